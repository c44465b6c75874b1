"""The descheduler against a live cluster: :class:`KubeObserver` (the cluster → a
:class:`~policy.state.ClusterSnapshot`), :class:`KubeEvictor` (the policy/v1 Eviction API),
:class:`KubeScaler` (``deployments/scale``, refusing Deployments an HPA owns; see :mod:`descheduler.scale`) and
:class:`KubeResizer` (``pods/resize``, refusing pods a VPA owns; see :mod:`descheduler.resize`).

This is the only module of ``descheduler`` (with leader.py) that imports ``kubernetes``. The identity it runs
as needs get/list/watch on nodes, pods, persistentvolumes, persistentvolumeclaims, poddisruptionbudgets
(policy), deployments and statefulsets (apps), list/watch on horizontalpodautoscalers (autoscaling),
get/update/patch on ``deployments/scale``, ``create`` on ``pods/eviction``, and for in-place resizes ``patch`` on
``pods/resize`` and get/list on ``verticalpodautoscalers`` (autoscaling.k8s.io); never ``delete`` on pods.

- :class:`KubeObserver` lists (paginated, raw JSON, so the objects reach :mod:`policy.observe` exactly as the
  API server sends them: the one parser) Nodes, Pods that are not ``Succeeded``/``Failed``,
  PodDisruptionBudgets, Deployments, StatefulSets, PersistentVolumes and PersistentVolumeClaims, and builds the
  snapshot with :func:`policy.observe.snapshot_from_objects` (pods on local PersistentVolumes count as local
  storage). The call graph is the one given, else the ``hrl-scheduler.io/depends-on`` annotations
  (:func:`descheduler.snapshot.graph_from_annotations`). Each call lists again: the loop calls it once to
  plan and once more before each eviction (state re-read).
- :class:`KubeEvictor` POSTs a policy/v1 ``Eviction`` to ``pods/{name}/eviction`` with a UID precondition (so a
  pod re-created under the same name since the guards looked at it is never evicted) and maps the answer
  (kubernetes-sigs/descheduler ``pkg/descheduler/evictions``; k8s.io/kubernetes
  ``pkg/registry/core/pod/storage/eviction.go``): 200/201 → ``evicted``; 429 TooManyRequests (a
  PodDisruptionBudget refuses) → ``refused``; 404 → ``not_found``; 409 Conflict (UID precondition failed: the
  pod was replaced) → ``not_found``; anything else, or no answer → ``error``. It never deletes a pod.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client as kclient
from kubernetes.client.rest import ApiException

from policy.kube import POD_FIELD_SELECTOR, load_api_client
from policy.observe import snapshot_from_objects
from policy.state import ClusterSnapshot, EvictionResult, PodInfo, ServiceGraph

from .resize import ApiResizer, ResizeApiError
from .scale import ApiScaler, ScaleApiError
from .snapshot import graph_from_annotations

__all__ = [
    "load_api_client",
    "KubeObserver",
    "KubeEvictor",
    "KubeScaleApi",
    "KubeScaler",
    "KubeResizeApi",
    "KubeResizer",
    "POD_FIELD_SELECTOR",
]


def _list_all(
    list_fn: Callable[..., Any], kind: str, page_size: int, timeout_s: float, **kw: Any
) -> list[dict[str, Any]]:
    """Every object of a (paginated) list call, as raw camelCase dicts with ``kind`` set."""
    out: list[dict[str, Any]] = []
    cont = None
    while True:
        args = dict(kw, limit=page_size, _preload_content=False, _request_timeout=timeout_s)
        if cont:
            args["_continue"] = cont
        doc = json.loads(list_fn(**args).data)
        out.extend({**o, "kind": kind} for o in doc.get("items") or ())
        cont = (doc.get("metadata") or {}).get("continue")
        if not cont:
            return out


class KubeObserver:
    """``observe()`` for :func:`descheduler.loop.run_once`: lists the cluster and returns a fresh snapshot.

    ``api_client``: a ``kubernetes.client.ApiClient``; ``graph``: the call graph (``None``: from the
    ``hrl-scheduler.io/depends-on`` annotations of the observed workloads and pods); ``clock``: unix seconds
    for ``taken_at_s``; ``page_size``: objects per list page; ``timeout_s``: per request.
    Raises ``kubernetes.client.rest.ApiException`` / urllib3 errors when the API server does not answer, and
    :class:`policy.observe.ObjectError` for an object the parser rejects (the loop then stops the cycle:
    no eviction without a trustworthy view). ``calls`` counts observations.
    """

    def __init__(
        self,
        api_client: kclient.ApiClient,
        graph: ServiceGraph | None = None,
        *,
        clock: Callable[[], float] = time.time,
        page_size: int = 500,
        timeout_s: float = 60.0,
    ):
        self.core = kclient.CoreV1Api(api_client)
        self.policy = kclient.PolicyV1Api(api_client)
        self.apps = kclient.AppsV1Api(api_client)
        self.graph = graph
        self.clock = clock
        self.page_size = page_size
        self.timeout_s = timeout_s
        self.calls = 0

    def list_objects(self) -> list[dict[str, Any]]:
        """The raw objects the snapshot is built from (Nodes, Pods, PDBs, Deployments, StatefulSets, PVs, PVCs)."""
        ps, t = self.page_size, self.timeout_s
        objs: list[dict[str, Any]] = []
        objs += _list_all(self.core.list_node, "Node", ps, t)
        objs += _list_all(self.core.list_persistent_volume, "PersistentVolume", ps, t)
        objs += _list_all(self.core.list_persistent_volume_claim_for_all_namespaces, "PersistentVolumeClaim", ps, t)
        objs += _list_all(self.policy.list_pod_disruption_budget_for_all_namespaces, "PodDisruptionBudget", ps, t)
        objs += _list_all(self.apps.list_deployment_for_all_namespaces, "Deployment", ps, t)
        objs += _list_all(self.apps.list_stateful_set_for_all_namespaces, "StatefulSet", ps, t)
        objs += _list_all(self.core.list_pod_for_all_namespaces, "Pod", ps, t, field_selector=POD_FIELD_SELECTOR)
        return objs

    def __call__(self) -> ClusterSnapshot:
        self.calls += 1
        snap = snapshot_from_objects(self.list_objects(), self.graph, taken_at_s=self.clock())
        if self.graph is None:
            snap = snap.with_graph(graph_from_annotations(snap))
        return snap


def _status_message(exc: ApiException) -> str:
    try:
        body = json.loads(exc.body or "{}")
        msg = body.get("message") or exc.reason
    except (TypeError, ValueError, AttributeError):
        msg = exc.reason
    return " ".join(str(msg).split())


def _status_kind(exc: ApiException) -> str:
    """``details.kind`` of the API server's Status answer (``pods`` for a missing pod), or ``""``."""
    try:
        return str((json.loads(exc.body or "{}").get("details") or {}).get("kind") or "")
    except (TypeError, ValueError, AttributeError):
        return ""


class KubeEvictor:
    """The real :class:`~descheduler.evict.Evictor`: policy/v1 Eviction (see the module docstring).

    ``api_client``: a ``kubernetes.client.ApiClient``; ``timeout_s``: per request;
    ``grace_period_s``: ``deleteOptions.gracePeriodSeconds`` (``None``: the pod's own).
    ``calls``: ``(pod key, outcome)`` of every eviction attempted, in order.
    """

    def __init__(self, api_client: kclient.ApiClient, *, timeout_s: float = 30.0, grace_period_s: int | None = None):
        self.core = kclient.CoreV1Api(api_client)
        self.timeout_s = timeout_s
        self.grace_period_s = grace_period_s
        self.calls: list[tuple[str, str]] = []

    def body(self, pod: PodInfo) -> dict[str, Any]:
        """The policy/v1 Eviction object for ``pod`` (with a UID precondition when the UID is known)."""
        opts: dict[str, Any] = {}
        if pod.uid:
            opts["preconditions"] = {"uid": pod.uid}
        if self.grace_period_s is not None:
            opts["gracePeriodSeconds"] = int(self.grace_period_s)
        body: dict[str, Any] = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
        }
        if opts:
            body["deleteOptions"] = opts
        return body

    def evict(self, pod: PodInfo, reason: str) -> EvictionResult:
        res = self._evict(pod)
        self.calls.append((pod.key, res.outcome))
        return res

    def _evict(self, pod: PodInfo) -> EvictionResult:
        try:
            self.core.create_namespaced_pod_eviction(
                pod.name, pod.namespace, self.body(pod), _request_timeout=self.timeout_s, _preload_content=False
            )
        except ApiException as exc:
            msg = _status_message(exc)
            if exc.status == 429:
                return EvictionResult(pod.key, "refused", f"refused by a PodDisruptionBudget: {msg}")
            if exc.status == 404:
                return EvictionResult(pod.key, "not_found", f"already gone: {msg}")
            if exc.status == 409:
                return EvictionResult(pod.key, "not_found", f"replaced since it was observed: {msg}")
            return EvictionResult(pod.key, "error", f"Eviction API answered {exc.status}: {msg}")
        except Exception as exc:  # noqa: BLE001 - network, timeout: fail closed
            return EvictionResult(
                pod.key, "error", f"Eviction API unreachable: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
            )
        return EvictionResult(pod.key, "evicted", f"evicted from {pod.node_name} through the Eviction API")


# ---- scaling through the scale subresource (descheduler/scale.py) ---------------------------------------------


class KubeScaleApi:
    """:class:`descheduler.scale.ScaleApi` with the ``kubernetes`` client: HorizontalPodAutoscalers through
    autoscaling/v2 (``list`` on ``horizontalpodautoscalers``), ``get`` / ``update`` on ``deployments/scale``
    (apps/v1; the body is an autoscaling/v1 ``Scale``). Raw JSON in and out; every failure becomes a
    :class:`~descheduler.scale.ScaleApiError` with the HTTP status (``None`` when there was no answer)."""

    def __init__(self, api_client: kclient.ApiClient, *, timeout_s: float = 30.0):
        self.apps = kclient.AppsV1Api(api_client)
        self.autoscaling = kclient.AutoscalingV2Api(api_client)
        self.timeout_s = timeout_s

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kw: Any) -> dict[str, Any]:
        try:
            r = fn(*args, _preload_content=False, _request_timeout=self.timeout_s, **kw)
            return json.loads(r.data)
        except ApiException as exc:
            raise ScaleApiError(exc.status, f"{what}: {_status_message(exc)}") from exc
        except Exception as exc:
            raise ScaleApiError(
                None, f"{what}: no answer: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
            ) from exc

    def list_hpas(self, namespace: str) -> list[dict[str, Any]]:
        doc = self._call(
            "list horizontalpodautoscalers", self.autoscaling.list_namespaced_horizontal_pod_autoscaler, namespace
        )
        return list(doc.get("items") or [])

    def read_scale(self, namespace: str, name: str) -> dict[str, Any]:
        return self._call("get deployments/scale", self.apps.read_namespaced_deployment_scale, name, namespace)

    def replace_scale(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._call(
            "update deployments/scale", self.apps.replace_namespaced_deployment_scale, name, namespace, body
        )


class KubeScaler(ApiScaler):
    """The real :class:`~descheduler.scale.Scaler`: :class:`~descheduler.scale.ApiScaler` over
    :class:`KubeScaleApi` (refuses a Deployment an autoscaling/v2 HPA targets; ``dry_run=True`` reads only)."""

    def __init__(self, api_client: kclient.ApiClient, *, dry_run: bool = False, timeout_s: float = 30.0):
        super().__init__(KubeScaleApi(api_client, timeout_s=timeout_s), dry_run=dry_run)


# ---- in-place resizes through pods/resize (descheduler/resize.py) ----------------------------------------------

#: The VerticalPodAutoscaler API (kubernetes/autoscaler vertical-pod-autoscaler, the VPA CRD).
VPA_GROUP, VPA_VERSION, VPA_PLURAL = "autoscaling.k8s.io", "v1", "verticalpodautoscalers"


class KubeResizeApi:
    """:class:`descheduler.resize.ResizeApi` with the ``kubernetes`` client: VerticalPodAutoscalers through the
    custom-objects API (``list`` on ``verticalpodautoscalers.autoscaling.k8s.io``, 404 when the CRD is not
    installed), ``get`` on pods, and a strategic-merge PATCH of ``pods/{name}/resize`` (core/v1, Kubernetes >= 1.33;
    GA in 1.35). Raw JSON in and out; every failure becomes a :class:`~descheduler.resize.ResizeApiError` with the
    HTTP status (``None`` when there was no answer) and the Status' ``details.kind``."""

    def __init__(self, api_client: kclient.ApiClient, *, timeout_s: float = 30.0):
        self.core = kclient.CoreV1Api(api_client)
        self.custom = kclient.CustomObjectsApi(api_client)
        self.timeout_s = timeout_s

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kw: Any) -> dict[str, Any]:
        try:
            r = fn(*args, _preload_content=False, _request_timeout=self.timeout_s, **kw)
            return json.loads(r.data)
        except ApiException as exc:
            raise ResizeApiError(exc.status, f"{what}: {_status_message(exc)}", _status_kind(exc)) from exc
        except Exception as exc:
            raise ResizeApiError(
                None, f"{what}: no answer: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
            ) from exc

    def list_vpas(self, namespace: str) -> list[dict[str, Any]]:
        doc = self._call(
            "list verticalpodautoscalers",
            self.custom.list_namespaced_custom_object,
            VPA_GROUP,
            VPA_VERSION,
            namespace,
            VPA_PLURAL,
        )
        return list(doc.get("items") or [])

    def read_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return self._call("get pod", self.core.read_namespaced_pod, name, namespace)

    def patch_pod_resize(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._call(
            "patch pods/resize",
            self.core.patch_namespaced_pod_resize,
            name,
            namespace,
            body,
            _content_type="application/strategic-merge-patch+json",
        )


class KubeResizer(ApiResizer):
    """The real :class:`~descheduler.resize.Resizer`: :class:`~descheduler.resize.ApiResizer` over
    :class:`KubeResizeApi` (refuses a pod whose Deployment a VPA owns; ``dry_run=True`` reads only)."""

    def __init__(self, api_client: kclient.ApiClient, *, dry_run: bool = False, timeout_s: float = 30.0):
        super().__init__(KubeResizeApi(api_client, timeout_s=timeout_s), dry_run=dry_run)
