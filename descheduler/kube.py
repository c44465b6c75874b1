"""The descheduler against a live cluster: :class:`KubeObserver` (the cluster → a
:class:`~policy.state.ClusterSnapshot`), :class:`KubeEvictor` (the policy/v1 Eviction API),
:class:`KubeScaler` (``deployments/scale``, refusing Deployments an HPA owns; see :mod:`descheduler.scale`) and
:class:`KubeResizer` (``pods/resize``, refusing pods a VPA owns; see :mod:`descheduler.resize`).

This is the only module of ``descheduler`` (with leader.py) that imports ``kubernetes``. The identity it runs
as needs get/list/watch on nodes, pods, persistentvolumes, persistentvolumeclaims, poddisruptionbudgets
(policy), deployments, replicasets and statefulsets (apps), list/watch on horizontalpodautoscalers
(autoscaling), get/update/patch on ``deployments/scale``, ``create`` on ``pods/eviction``, ``create`` on
``events`` (events.k8s.io), and for in-place resizes ``patch`` on ``pods/resize`` and get/list on
``verticalpodautoscalers`` (autoscaling.k8s.io); never ``delete`` on pods.

- :class:`KubeObserver` (CronJob mode) lists once per call (paginated, raw JSON, so the objects reach
  :mod:`policy.observe` exactly as the API server sends them: the one parser) Nodes, PersistentVolumes,
  PersistentVolumeClaims, PodDisruptionBudgets, Deployments, StatefulSets, then Pods that are not
  ``Succeeded``/``Failed``, each page of pods parsed as it arrives (the raw objects of a large cluster are never
  all in memory at once); pods on local PersistentVolumes count as local storage. The call graph is the one
  given, else the ``hrl-scheduler.io/depends-on`` annotations (:func:`descheduler.snapshot.graph_from_annotations`).
  The loop calls it once per cycle.
- :class:`KubeWatchCache` (interval mode) lists each kind once, then watches (:class:`policy.kube.Reflector`):
  every cycle builds its snapshot from memory, with no request to the API server.
- :class:`KubeReader`: the targeted re-read before an eviction (:mod:`descheduler.reread`): GET the pod, the
  PodDisruptionBudget, the owner (ReplicaSet / StatefulSet) and the target node; the pods a budget covers by a
  label-selected LIST in its namespace (or from the watch cache in interval mode).
- :class:`KubeEventRecorder`: an ``events.k8s.io/v1`` Event per eviction, scale and loop hold.
- :class:`KubeEvictor` POSTs a policy/v1 ``Eviction`` to ``pods/{name}/eviction`` with a UID precondition (so a
  pod re-created under the same name since the guards looked at it is never evicted) and maps the answer
  (kubernetes-sigs/descheduler ``pkg/descheduler/evictions``; k8s.io/kubernetes
  ``pkg/registry/core/pod/storage/eviction.go``): 200/201 → ``evicted``; 429 TooManyRequests (a
  PodDisruptionBudget refuses) → ``refused``; 404 → ``not_found``; 409 Conflict (UID precondition failed: the
  pod was replaced) → ``not_found``; anything else, or no answer → ``error``. It never deletes a pod.
"""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Callable
from typing import Any, cast

from kubernetes import client as kclient
from kubernetes.client.rest import ApiException

from policy.kube import POD_FIELD_SELECTOR, ReflectorGroup, discard_answer, event_object, load_api_client
from policy.observe import (
    local_pvc_names,
    parse_node,
    parse_pdb,
    parse_pod,
    parse_workload,
    snapshot_from_objects,
)
from policy.state import (
    ClusterSnapshot,
    EvictionResult,
    LabelSelector,
    NodeInfo,
    OwnerRef,
    PodDisruptionBudgetInfo,
    PodInfo,
    ServiceGraph,
)

from .events import REPORTING_CONTROLLER, EventType, ObjectRef
from .reread import OwnerInfo
from .resize import ApiResizer, ResizeApiError
from .scale import ApiScaler, ScaleApiError
from .snapshot import graph_from_annotations
from .surge import ApiMover

log = logging.getLogger(__name__)

__all__ = [
    "load_api_client",
    "KubeObserver",
    "KubeWatchCache",
    "KubeReader",
    "KubeEventRecorder",
    "KubeEvictor",
    "KubeScaleApi",
    "KubeScaler",
    "KubeResizeApi",
    "KubeResizer",
    "KubeMoveApi",
    "KubeMover",
    "POD_FIELD_SELECTOR",
    "label_selector_string",
]


def _list_pages(list_fn: Callable[..., Any], kind: str, page_size: int, timeout_s: float, **kw: Any):
    """Yield every object of a (paginated) list call, page by page, as raw camelCase dicts with ``kind`` set."""
    cont = None
    while True:
        args = dict(kw, limit=page_size, _preload_content=False, _request_timeout=timeout_s)
        if cont:
            args["_continue"] = cont
        doc = json.loads(list_fn(**args).data)
        for o in doc.get("items") or ():
            yield {**o, "kind": kind}
        cont = (doc.get("metadata") or {}).get("continue")
        if not cont:
            return


def _list_all(
    list_fn: Callable[..., Any], kind: str, page_size: int, timeout_s: float, **kw: Any
) -> list[dict[str, Any]]:
    """Every object of a (paginated) list call, as raw camelCase dicts with ``kind`` set."""
    return list(_list_pages(list_fn, kind, page_size, timeout_s, **kw))


class KubeObserver:
    """``observe()`` for :func:`descheduler.loop.run_once` in CronJob mode: lists the cluster (one paginated LIST
    per kind) and returns a fresh snapshot.

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
        return [*self._others(), *self._pods_raw()]

    def _others(self) -> list[dict[str, Any]]:
        ps, t = self.page_size, self.timeout_s
        objs: list[dict[str, Any]] = []
        objs += _list_all(self.core.list_node, "Node", ps, t)
        objs += _list_all(self.core.list_persistent_volume, "PersistentVolume", ps, t)
        objs += _list_all(self.core.list_persistent_volume_claim_for_all_namespaces, "PersistentVolumeClaim", ps, t)
        objs += _list_all(self.policy.list_pod_disruption_budget_for_all_namespaces, "PodDisruptionBudget", ps, t)
        objs += _list_all(self.apps.list_deployment_for_all_namespaces, "Deployment", ps, t)
        objs += _list_all(self.apps.list_stateful_set_for_all_namespaces, "StatefulSet", ps, t)
        return objs

    def _pods_raw(self):
        return _list_pages(
            self.core.list_pod_for_all_namespaces,
            "Pod",
            self.page_size,
            self.timeout_s,
            field_selector=POD_FIELD_SELECTOR,
        )

    def __call__(self) -> ClusterSnapshot:
        self.calls += 1
        others = self._others()
        base = snapshot_from_objects(others, self.graph, taken_at_s=self.clock())
        local = local_pvc_names(others)
        pods = tuple(parse_pod(o, local) for o in self._pods_raw())
        snap = ClusterSnapshot(base.nodes, pods, base.pdbs, base.workloads, base.graph, base.taken_at_s)
        if self.graph is None:
            snap = snap.with_graph(graph_from_annotations(snap))
        return snap


def label_selector_string(sel: LabelSelector) -> str:
    """A metav1.LabelSelector as the ``labelSelector`` query parameter (``k=v,k in (a,b),!k``)."""
    parts = [f"{k}={v}" for k, v in sorted(sel.match_labels.items())]
    for key, op, values in sel.match_expressions:
        if op == "In":
            parts.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(values)})")
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts)


def _get(fn: Callable[..., Any], *args: Any, timeout_s: float) -> dict[str, Any] | None:
    """One GET (raw JSON); ``None`` on 404; raises on anything else."""
    try:
        return json.loads(fn(*args, _preload_content=False, _request_timeout=timeout_s).data)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


class KubeReader:
    """:class:`descheduler.reread.ClusterReader` against the API server (see the module docstring): GETs of the
    pod, the PodDisruptionBudget, the owner and the node (raw JSON through :mod:`policy.observe`); the pods a
    budget covers with a label-selected LIST in its namespace, or from ``cache`` (a :class:`KubeWatchCache`) when
    given. A 404 is ``None``; any other failure raises (the loop stops the cycle). ``calls``: requests made, by
    ``(verb, resource)``."""

    def __init__(self, api_client: kclient.ApiClient, *, timeout_s: float = 30.0, cache: KubeWatchCache | None = None):
        self.core = kclient.CoreV1Api(api_client)
        self.policy = kclient.PolicyV1Api(api_client)
        self.apps = kclient.AppsV1Api(api_client)
        self.timeout_s = timeout_s
        self.cache = cache
        self.calls: dict[tuple[str, str], int] = {}

    def _count(self, verb: str, resource: str) -> None:
        self.calls[(verb, resource)] = self.calls.get((verb, resource), 0) + 1

    def read_pod(self, namespace: str, name: str) -> PodInfo | None:
        self._count("get", "pods")
        obj = _get(self.core.read_namespaced_pod, name, namespace, timeout_s=self.timeout_s)
        if obj is None:
            return None
        return parse_pod({**obj, "kind": "Pod"}, self._local_pvcs(namespace))

    def _local_pvcs(self, namespace: str) -> frozenset[str]:
        if self.cache is not None:
            return self.cache.local_pvcs()
        return frozenset()  # a pod on a local volume was refused by the guards on the observation already

    def read_pdb(self, namespace: str, name: str) -> PodDisruptionBudgetInfo | None:
        self._count("get", "poddisruptionbudgets")
        obj = _get(self.policy.read_namespaced_pod_disruption_budget, name, namespace, timeout_s=self.timeout_s)
        return None if obj is None else parse_pdb({**obj, "kind": "PodDisruptionBudget"})

    def pods_covered(self, pdb: PodDisruptionBudgetInfo) -> list[PodInfo]:
        if self.cache is not None:
            return self.cache.pods_covered(pdb)
        self._count("list", "pods")
        sel = label_selector_string(pdb.selector)
        objs = _list_all(
            self.core.list_namespaced_pod,
            "Pod",
            500,
            self.timeout_s,
            namespace=pdb.namespace,
            label_selector=sel,
            field_selector=POD_FIELD_SELECTOR,
        )
        return [p for p in (parse_pod(o) for o in objs) if pdb.covers(p)]

    def read_owner(self, namespace: str, owner: OwnerRef) -> OwnerInfo | None:
        if owner.kind == "ReplicaSet":
            self._count("get", "replicasets")
            obj = _get(self.apps.read_namespaced_replica_set, owner.name, namespace, timeout_s=self.timeout_s)
        elif owner.kind == "StatefulSet":
            self._count("get", "statefulsets")
            obj = _get(self.apps.read_namespaced_stateful_set, owner.name, namespace, timeout_s=self.timeout_s)
        else:
            raise ValueError(f"owner kind {owner.kind} is not read by the descheduler")
        if obj is None:
            return None
        meta = obj.get("metadata") or {}
        ctrl = next((o for o in meta.get("ownerReferences") or () if o.get("controller")), None)
        replicas = (obj.get("spec") or {}).get("replicas")
        return OwnerInfo(
            owner.kind,
            str(meta.get("name", owner.name)),
            str(meta.get("uid", "")),
            replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else None,
            bool(meta.get("deletionTimestamp")),
            None
            if ctrl is None
            else OwnerRef(str(ctrl.get("kind", "")), str(ctrl.get("name", "")), str(ctrl.get("uid", ""))),
        )

    def read_node(self, name: str) -> NodeInfo | None:
        self._count("get", "nodes")
        obj = _get(self.core.read_node, name, timeout_s=self.timeout_s)
        return None if obj is None else parse_node({**obj, "kind": "Node"})


class KubeWatchCache(ReflectorGroup):
    """The interval mode's view of the cluster: one :class:`policy.kube.Reflector` (list once, then watch) per
    kind the snapshot is built from (Nodes, Pods not ``Succeeded``/``Failed``, PodDisruptionBudgets, Deployments,
    StatefulSets, PersistentVolumes, PersistentVolumeClaims), each in its own daemon thread
    (a :class:`policy.kube.ReflectorGroup`: ``reflectors``, ``synced``, ``healthy``, :meth:`stats`, :meth:`start`,
    :meth:`stop`); a context manager.
    Calling it (``observe()``) builds a :class:`~policy.state.ClusterSnapshot` from memory (no request).

    ``graph``: the call graph (``None``: annotations); ``resync_s``: full re-list period; ``page_size``,
    ``timeout_s``: of the lists. Raises ``RuntimeError`` from ``observe()`` until every kind has been listed
    once, or when a watch has been failing (``healthy`` false) for longer than ``max_unhealthy_s``: no eviction
    from a view that may be stale."""

    thread_prefix = "hrl-descheduler"

    KINDS = (
        "Node",
        "Pod",
        "PodDisruptionBudget",
        "Deployment",
        "StatefulSet",
        "PersistentVolume",
        "PersistentVolumeClaim",
    )

    def __init__(
        self,
        api_client: kclient.ApiClient,
        graph: ServiceGraph | None = None,
        *,
        clock: Callable[[], float] = time.time,
        resync_s: float = 3600.0,
        page_size: int = 500,
        timeout_s: float = 60.0,
        max_unhealthy_s: float = 60.0,
    ):
        super().__init__()
        core, pol, apps = kclient.CoreV1Api(api_client), kclient.PolicyV1Api(api_client), kclient.AppsV1Api(api_client)
        self.graph = graph
        self.clock = clock
        self.max_unhealthy_s = float(max_unhealthy_s)
        kw: dict[str, Any] = {"page_size": page_size, "request_timeout_s": timeout_s, "resync_s": resync_s}

        def raw(o):
            return o

        def pod(o):
            claims = tuple(
                str((v.get("persistentVolumeClaim") or {}).get("claimName"))
                for v in (o.get("spec") or {}).get("volumes") or ()
                if (v.get("persistentVolumeClaim") or {}).get("claimName")
            )
            return parse_pod(o), claims, (o if claims else None)

        self.add("Node", core.list_node, parse_node, **kw)
        self.add("Pod", core.list_pod_for_all_namespaces, pod, field_selector=POD_FIELD_SELECTOR, **kw)
        self.add("PodDisruptionBudget", pol.list_pod_disruption_budget_for_all_namespaces, parse_pdb, **kw)
        self.add("Deployment", apps.list_deployment_for_all_namespaces, parse_workload, **kw)
        self.add("StatefulSet", apps.list_stateful_set_for_all_namespaces, parse_workload, **kw)
        self.add("PersistentVolume", core.list_persistent_volume, raw, **kw)
        self.add("PersistentVolumeClaim", core.list_persistent_volume_claim_for_all_namespaces, raw, **kw)
        self._unhealthy_since: float | None = None
        self.calls = 0

    def wait_synced(self, timeout_s: float) -> bool:
        """Wait until every kind has been listed once; ``False`` after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.synced:
                return True
            self.stop_event.wait(0.02)
        return self.synced

    def local_pvcs(self) -> frozenset[str]:
        with self.lock:
            pvs = list(self.reflectors["PersistentVolume"].items.values())
            pvcs = list(self.reflectors["PersistentVolumeClaim"].items.values())
        return local_pvc_names([*pvs, *pvcs])

    def pods_covered(self, pdb: PodDisruptionBudgetInfo) -> list[PodInfo]:
        """The cached pods ``pdb`` covers (fresh as the watch)."""
        with self.lock:
            pods = [v[0] for v in self.reflectors["Pod"].items.values()]
        return [p for p in pods if pdb.covers(p)]

    def __call__(self) -> ClusterSnapshot:
        self.calls += 1
        if not self.synced:
            raise RuntimeError("the watch cache has not listed every kind yet")
        if not self.healthy:
            now = time.monotonic()
            self._unhealthy_since = self._unhealthy_since or now
            if now - self._unhealthy_since > self.max_unhealthy_s:
                raise RuntimeError(f"the watch cache has been failing for {now - self._unhealthy_since:.0f} s")
        else:
            self._unhealthy_since = None
        local = self.local_pvcs()
        with self.lock:
            r = self.reflectors
            nodes = tuple(r["Node"].items[k] for k in sorted(r["Node"].items))
            pod_entries = [r["Pod"].items[k] for k in sorted(r["Pod"].items)]
            pdbs = tuple(r["PodDisruptionBudget"].items[k] for k in sorted(r["PodDisruptionBudget"].items))
            workloads = tuple(
                [r["Deployment"].items[k] for k in sorted(r["Deployment"].items)]
                + [r["StatefulSet"].items[k] for k in sorted(r["StatefulSet"].items)]
            )
        pods = []
        for info, claims, raw_obj in pod_entries:
            if raw_obj is not None and any(f"{info.namespace}/{c}" in local for c in claims) and not info.local_storage:
                info = parse_pod(raw_obj, local)
            pods.append(info)
        snap = ClusterSnapshot(nodes, tuple(pods), pdbs, workloads, self.graph or ServiceGraph(), self.clock())
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
            resp = self.core.create_namespaced_pod_eviction(  # the client sends a dict body as it is
                pod.name,
                pod.namespace,
                cast(Any, self.body(pod)),
                _request_timeout=self.timeout_s,
                _preload_content=False,
            )
            discard_answer(resp)
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


def _json_call(
    what: str,
    fn: Callable[..., Any],
    timeout_s: float,
    error: Callable[[int | None, str, ApiException | None], Exception],
    *args: Any,
    **kw: Any,
) -> dict[str, Any]:
    """``fn(*args, **kw)`` of the ``kubernetes`` client as raw JSON (a dict), within ``timeout_s``. A refusal
    raises ``error(http status, "WHAT: the Status' message", the ApiException)``; no answer at all raises
    ``error(None, "WHAT: no answer: ...", None)`` (one line, at most 300 characters of the cause)."""
    try:
        r = fn(*args, _preload_content=False, _request_timeout=timeout_s, **kw)
        return json.loads(r.data)
    except ApiException as exc:
        raise error(exc.status, f"{what}: {_status_message(exc)}", exc) from exc
    except Exception as exc:
        raise error(None, f"{what}: no answer: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}", None) from exc


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
        return _json_call(what, fn, self.timeout_s, lambda status, msg, _exc: ScaleApiError(status, msg), *args, **kw)

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


# ---- make-before-break moves (descheduler/surge.py) -------------------------------------------------------------


class KubeMoveApi(KubeScaleApi):
    """:class:`descheduler.surge.MoverApi` with the ``kubernetes`` client: the scale subresource of
    :class:`KubeScaleApi`, a JSON merge PATCH of a pod's ``metadata.annotations`` (core/v1 ``patch`` on ``pods``: the
    ``controller.kubernetes.io/pod-deletion-cost`` a make-before-break move sets on the pod its scale-down removes) and
    a LIST of the namespace's ResourceQuotas. Raw JSON in and out; failures are
    :class:`~descheduler.scale.ScaleApiError` with the HTTP status."""

    def __init__(self, api_client: kclient.ApiClient, *, timeout_s: float = 30.0):
        super().__init__(api_client, timeout_s=timeout_s)
        self.core = kclient.CoreV1Api(api_client)

    def patch_pod_annotations(self, namespace: str, name: str, annotations: Any) -> dict[str, Any]:
        body = {"metadata": {"annotations": dict(annotations)}}
        return self._call(
            "patch pod",
            self.core.patch_namespaced_pod,
            name,
            namespace,
            body,
            _content_type="application/merge-patch+json",
        )

    def list_resource_quotas(self, namespace: str) -> list[dict[str, Any]]:
        doc = self._call("list resourcequotas", self.core.list_namespaced_resource_quota, namespace)
        return list(doc.get("items") or [])


class KubeMover(ApiMover):
    """The real :class:`~descheduler.surge.ApiMover`: over :class:`KubeMoveApi` (``dry_run=True`` reads only)."""

    def __init__(self, api_client: kclient.ApiClient, *, dry_run: bool = False, timeout_s: float = 30.0):
        super().__init__(KubeMoveApi(api_client, timeout_s=timeout_s), dry_run=dry_run)


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
        def error(status: int | None, msg: str, exc: ApiException | None) -> ResizeApiError:
            return ResizeApiError(status, msg) if exc is None else ResizeApiError(status, msg, _status_kind(exc))

        return _json_call(what, fn, self.timeout_s, error, *args, **kw)

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


# ---- Kubernetes Events (descheduler/events.py) ---------------------------------------------------------------


class KubeEventRecorder:
    """:class:`descheduler.events.EventRecorder` creating ``events.k8s.io/v1`` Events (``reportingController``
    :data:`~descheduler.events.REPORTING_CONTROLLER`, ``reportingInstance`` the given identity). A failed create
    is counted in ``failures`` and logged once per reason; it never fails the cycle."""

    def __init__(self, api_client: kclient.ApiClient, *, instance: str = "", timeout_s: float = 10.0, clock=time.time):
        self.events = kclient.EventsV1Api(api_client)
        self.instance = instance or socket.gethostname()
        self.timeout_s = timeout_s
        self.clock = clock
        self.created = 0
        self.failures = 0

    def body(self, regarding: ObjectRef, type: EventType, reason: str, action: str, note: str) -> dict[str, Any]:
        """The events.k8s.io/v1 Event object (:func:`policy.kube.event_object`)."""
        ref = {
            "apiVersion": regarding.api_version,
            "kind": regarding.kind,
            "namespace": regarding.namespace,
            "name": regarding.name,
            "uid": regarding.uid,
        }
        return event_object(
            ref, type, reason, action, note, controller=REPORTING_CONTROLLER, instance=self.instance, now_s=self.clock()
        )

    def record(self, regarding: ObjectRef, type: EventType, reason: str, action: str, note: str) -> None:
        try:
            resp = self.events.create_namespaced_event(
                regarding.namespace or "default",
                cast(Any, self.body(regarding, type, reason, action, note)),  # the client sends a dict as it is
                _request_timeout=self.timeout_s,
                _preload_content=False,
            )
            discard_answer(resp)
            self.created += 1
        except Exception as exc:  # noqa: BLE001 - an event is a report, never a reason to fail the cycle
            self.failures += 1
            if self.failures <= 3:
                log.warning("could not record event %s on %s/%s: %s", reason, regarding.namespace, regarding.name, exc)
