"""The simulated cluster's scale and in-place resize subresources and its pods' metadata, served to the descheduler's
LIVE scaler, resizer and mover: :class:`SimScaleApi`, :class:`SimResizeApi` and :class:`SimMoveApi` implement the
slices of the Kubernetes API that :class:`descheduler.scale.ApiScaler`, :class:`descheduler.resize.ApiResizer` and
:class:`descheduler.surge.ApiMover` call (``deployments/scale``, ``pods`` and ``pods/resize``, a merge PATCH of a
pod's annotations, ResourceQuotas), so a simulation runs the same code path as a cluster: the same patch (a Guaranteed
pod's limit follows its request), the same checks, the same outcomes. :class:`SimScaler`, :class:`SimResizer` and
:class:`SimMover` are those live classes over the simulation. What :func:`descheduler.loop.run_once` calls when the
simulation side (:mod:`policy.sim.hrl_stacks`, ``hack/demo.py``) runs the descheduler's own cycle in a
:class:`~policy.sim.engine.Simulation`.

The API server's answers are mirrored from k8s.io/kubernetes: ``pkg/registry/core/pod/strategy.go``
(``podResizeStrategy``), ``pkg/apis/core/validation`` (``ValidatePodResize``: a request above its limit or a change
of QoS class is 422 Invalid), the ``PodResizeValidator`` admission plugin (403 when the new requests exceed the
node's allocatable), and the kubelet's ``PodResizePending`` ``Deferred`` (taken, actuated once the pod fits).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from descheduler.resize import ApiResizer, ResizeApiError
from descheduler.scale import ApiScaler, ScaleApiError
from descheduler.surge import ApiMover

__all__ = ["SimScaleApi", "SimResizeApi", "SimMoveApi", "SimScaler", "SimResizer", "SimMover"]


def _workload_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


class SimScaleApi:
    """:class:`descheduler.scale.ScaleApi` over a simulation (``sim.cluster.replicas``, ``sim.scale``). A
    simulation has no HorizontalPodAutoscaler objects (its HPA baseline is a controller of its own), so
    ``list_hpas`` answers none; a workload the cluster does not run is 404."""

    def __init__(self, sim: Any):
        self.sim = sim

    def list_hpas(self, namespace: str) -> list[dict[str, Any]]:
        return []

    def _replicas(self, namespace: str, name: str) -> int:
        cur = self.sim.cluster.replicas.get(_workload_key(namespace, name))
        if cur is None:
            raise ScaleApiError(404, f'deployments.apps "{name}" not found')
        return int(cur)

    def read_scale(self, namespace: str, name: str) -> dict[str, Any]:
        cur = self._replicas(namespace, name)
        return {
            "apiVersion": "autoscaling/v1",
            "kind": "Scale",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": cur},
            "status": {"replicas": cur},
        }

    def replace_scale(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        self._replicas(namespace, name)
        replicas = (body.get("spec") or {}).get("replicas")
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise ScaleApiError(422, f'Scale.autoscaling "{name}" is invalid: spec.replicas: {replicas!r}')
        self.sim.scale(_workload_key(namespace, name), replicas)
        return self.read_scale(namespace, name)


class SimMoveApi(SimScaleApi):
    """:class:`descheduler.surge.MoverApi` over a simulation: the scale subresource of :class:`SimScaleApi`, a merge
    PATCH of a pod's annotations through :meth:`policy.sim.cluster.SimCluster.annotate` (404 for a pod that is gone;
    the ReplicaSet controller's scale-down ranks by the deletion cost it sets:
    :func:`policy.sim.cluster.scale_down_order`), and no ResourceQuota (a simulation has none)."""

    def patch_pod_annotations(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> dict[str, Any]:
        key = _workload_key(namespace, name)
        if not self.sim.cluster.annotate(key, annotations):
            raise ScaleApiError(404, f'pods "{name}" not found')
        pod = next(p for p in self.sim.cluster.pods if p.alive and p.info.key == key)
        return pod.obj

    def list_resource_quotas(self, namespace: str) -> list[dict[str, Any]]:
        return []


class SimResizeApi:
    """:class:`descheduler.resize.ResizeApi` over a simulation: ``read_pod`` answers the pod's object,
    ``patch_pod_resize`` applies the live resizer's patch through :meth:`Simulation.patch_resize` and answers as the
    API server would: the pod after it (``resized``, or ``deferred``: taken, actuated by the kubelet once it fits),
    404 for a pod that is gone, 422 for an invalid change (a request above its limit, a change of QoS class), 403
    with the ``PodResizeValidator``'s message when the node's allocatable cannot hold the new requests. A simulation
    has no VerticalPodAutoscaler, so ``list_vpas`` answers none; one without ``patch_resize`` has no
    ``pods/resize`` (404 not about the pod: ``unsupported``)."""

    def __init__(self, sim: Any):
        self.sim = sim

    def list_vpas(self, namespace: str) -> list[dict[str, Any]]:
        return []

    def read_pod(self, namespace: str, name: str) -> dict[str, Any]:
        key = _workload_key(namespace, name)
        pod = next((p for p in self.sim.cluster.pods if p.alive and p.info.key == key), None)
        if pod is None:
            raise ResizeApiError(404, f'pods "{name}" not found', kind="pods")
        return pod.obj

    def patch_pod_resize(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        patch = getattr(self.sim, "patch_resize", None)
        if not callable(patch):
            raise ResizeApiError(404, "the server could not find the requested resource (pods/resize)")
        key = _workload_key(namespace, name)
        res = patch(key, body)
        if res.outcome == "not_found":
            raise ResizeApiError(404, f'pods "{name}" not found', kind="pods")
        if res.outcome == "invalid":
            raise ResizeApiError(422, f'Pod "{name}" is invalid: {res.message}')
        if res.outcome == "infeasible":
            raise ResizeApiError(
                403, f'pods "{name}" is forbidden: node didn\'t have enough allocatable resources: {res.message}'
            )
        if res.outcome not in ("resized", "deferred"):
            raise ResizeApiError(500, f"unexpected resize outcome {res.outcome!r}: {res.message}")
        return self.read_pod(namespace, name) if res.outcome == "resized" else self._pending(key)

    def _pending(self, key: str) -> dict[str, Any]:
        pod = next(p for p in self.sim.cluster.pods if p.alive and p.info.key == key)
        return pod.pending_resize if pod.pending_resize is not None else pod.obj


class SimScaler(ApiScaler):
    """The live :class:`~descheduler.scale.ApiScaler` over :class:`SimScaleApi` (``dry_run=True`` reads only)."""

    def __init__(self, sim: Any, *, dry_run: bool = False):
        super().__init__(SimScaleApi(sim), dry_run=dry_run)


class SimMover(ApiMover):
    """The live :class:`~descheduler.surge.ApiMover` over :class:`SimMoveApi` (``dry_run=True`` reads only)."""

    def __init__(self, sim: Any, *, dry_run: bool = False):
        super().__init__(SimMoveApi(sim), dry_run=dry_run)


class SimResizer(ApiResizer):
    """The live :class:`~descheduler.resize.ApiResizer` over :class:`SimResizeApi` (``dry_run=True`` reads
    only)."""

    def __init__(self, sim: Any, *, dry_run: bool = False):
        super().__init__(SimResizeApi(sim), dry_run=dry_run)
