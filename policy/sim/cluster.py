"""The simulated cluster's state: Nodes and Pods as Kubernetes API objects, plus the few controllers the
simulation needs (a ReplicaSet controller that replaces evicted pods and follows replica targets, deleting the surplus
in the order of Kubernetes' ``ActivePodsWithRanks``, the PodDisruptionBudget disruption controller's arithmetic, and
kwok-like readiness after a start-up delay, reported in the pods' ``Ready`` condition).

This is the only mutable state of a simulation; everything else reads :meth:`SimCluster.snapshot`.
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

import numpy as np

from policy.observe import parse_cpu_m, parse_memory_bytes, parse_node, parse_pdb, parse_pod, parse_workload
from policy.state import (
    ClusterSnapshot,
    EvictionResult,
    NodeInfo,
    PodDisruptionBudgetInfo,
    PodInfo,
    Resources,
    ServiceGraph,
)

from . import objects

__all__ = [
    "SimPod",
    "SimCluster",
    "ResizeResult",
    "TAINT_UNREACHABLE",
    "TAINT_UNSCHEDULABLE",
    "ANNOTATION_DELETION_COST",
    "scale_down_order",
]

#: The taint the node lifecycle controller puts on a node that stopped reporting (effects NoSchedule, NoExecute).
TAINT_UNREACHABLE = "node.kubernetes.io/unreachable"
#: The taint the node lifecycle controller mirrors ``spec.unschedulable`` (cordon) into.
TAINT_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
#: The pod annotation a ReplicaSet's scale-down ranks by (lower deleted first; an int32, 0 when absent or invalid).
ANNOTATION_DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"


def _deletion_cost(pod: SimPod) -> int:
    """``controller.kubernetes.io/pod-deletion-cost`` of ``pod``: an int32, 0 when absent or not one (the controller
    ignores an invalid value: k8s.io/kubernetes pkg/apis/core/helper GetDeletionCostFromPodAnnotations)."""
    raw = ((pod.obj.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_DELETION_COST)
    if raw is None:
        return 0
    try:
        v = int(str(raw).strip())
    except ValueError:
        return 0
    return v if -(2**31) <= v < 2**31 else 0


def _log_rank(t_s: float, now_s: float) -> int:
    """floor(log2(nanoseconds since ``t_s``)), -1 when not in the past (controller_utils.go logarithmicRankDiff)."""
    d_ns = (now_s - t_s) * 1e9
    return int(math.floor(math.log2(d_ns))) if d_ns > 0 else -1


def scale_down_order(pods: Sequence[SimPod], related: Sequence[SimPod], now_s: float) -> list[SimPod]:
    """``pods`` in the order a ReplicaSet's scale-down deletes them (first = deleted first), as
    k8s.io/kubernetes pkg/controller/replicaset getPodsToDelete ranks them with ``ActivePodsWithRanks`` (its ``Less``
    in pkg/controller/controller_utils.go, LogarithmicScaleDown GA since 1.31), rule by rule until one differs:
    1. unassigned before assigned; 2. Pending before Running (here: unbound vs bound); 3. not Ready before Ready;
    4. lower ``controller.kubernetes.io/pod-deletion-cost`` first; 5. more active pods of the workload on the same node
    (``related``) first; 6. both Ready: Ready for less time first, compared in powers of two (same power: by UID);
    7. more container restarts first; 8. created more recently first, in powers of two (same power: by UID)."""
    on_node: dict[int, int] = {}
    for p in related:
        if p.alive:
            on_node[p.node] = on_node.get(p.node, 0) + 1

    def ready(p: SimPod) -> bool:
        return p.node >= 0 and p.ready_at_s <= now_s

    def by_log(ta: float, tb: float, ua: str, ub: str) -> int:
        d = _log_rank(ta, now_s) - _log_rank(tb, now_s)
        if d == 0:
            return -1 if ua < ub else (1 if ua > ub else 0)
        return -1 if d < 0 else 1

    def cmp(a: SimPod, b: SimPod) -> int:
        if (a.node >= 0) != (b.node >= 0):
            return -1 if a.node < 0 else 1
        ra, rb = ready(a), ready(b)
        if ra != rb:
            return -1 if not ra else 1
        ca, cb = _deletion_cost(a), _deletion_cost(b)
        if ca != cb:
            return -1 if ca < cb else 1
        ka, kb = on_node.get(a.node, 0), on_node.get(b.node, 0)
        if ka != kb:
            return -1 if ka > kb else 1
        if ra and rb and a.ready_at_s != b.ready_at_s:
            return by_log(a.ready_at_s, b.ready_at_s, a.info.uid, b.info.uid)
        if a.restarts != b.restarts:
            return -1 if a.restarts > b.restarts else 1
        if a.created_s != b.created_s:
            return by_log(a.created_s, b.created_s, a.info.uid, b.info.uid)
        return 0

    return sorted(pods, key=functools.cmp_to_key(cmp))


@dataclass(frozen=True)
class ResizeResult:
    """The outcome of an in-place resize (``pods/resize``): ``resized``; ``infeasible`` (the node could never
    fit the new requests: the kubelet's ``PodResizePending`` reason ``Infeasible``); ``deferred`` (it does not
    fit now, next to the other pods: reason ``Deferred``; nothing is applied, the caller may retry);
    ``invalid`` (the API server refuses it: it would change the pod's QoS class, or a value is negative);
    ``not_found``. ``message`` says why, in one line."""

    pod: str
    outcome: str
    message: str = ""


@dataclass
class SimPod:
    """One pod of the simulation. ``node`` is the node index (-1 while Pending); the pod serves traffic
    from ``ready_at_s`` on; ``alive`` turns False when it is evicted or scaled away. ``restarts``: container
    restarts (OOM kills); ``backoff_s``: the kubelet's current crash back-off; ``delete_at_s``: when the taint
    manager deletes it (its node failed; inf = never); ``pending_resize``: the pod object with resources the API
    server took but the kubelet could not actuate yet (a deferred in-place resize), None when none is pending."""

    obj: dict[str, Any]
    info: PodInfo
    workload: str
    node: int = -1
    created_s: float = 0.0
    ready_at_s: float = math.inf
    alive: bool = True
    evicted_at_s: float | None = None
    restarts: int = 0
    backoff_s: float = 0.0
    last_restart_s: float | None = None
    delete_at_s: float = math.inf
    pending_resize: dict[str, Any] | None = None


@dataclass
class SimCluster:
    """Nodes, workloads and pods of one simulated cluster.

    ``startup_delay_s``: seconds from binding to Ready (image pull + start + readiness probe).
    ``scheduler_name``: written into the pods' ``spec.schedulerName``.
    """

    node_objs: list[dict[str, Any]]
    deployments: dict[str, dict[str, Any]]
    rng: np.random.Generator
    startup_delay_s: float = 20.0
    scheduler_name: str = "default-scheduler"
    pdb_objs: list[dict[str, Any]] = field(default_factory=list)
    pods: list[SimPod] = field(default_factory=list)
    replicas: dict[str, int] = field(default_factory=dict)
    _snap_cache: ClusterSnapshot | None = field(default=None, repr=False)
    _usage_cache: dict = field(default_factory=dict, repr=False)
    _workload_cache: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.nodes: list[NodeInfo] = [parse_node(o) for o in self.node_objs]
        self.node_pos = {n.name: i for i, n in enumerate(self.nodes)}
        self.workload_infos = {k: parse_workload(o) for k, o in self.deployments.items()}
        for k, w in self.workload_infos.items():
            self.replicas.setdefault(k, w.replicas)
        self.pdbs: list[PodDisruptionBudgetInfo] = [parse_pdb(o) for o in self.pdb_objs]

    # ---- construction ---------------------------------------------------------------------------

    @staticmethod
    def build(
        node_objs: Sequence[Mapping[str, Any]],
        deployments: Sequence[Mapping[str, Any]],
        seed: int,
        startup_delay_s: float = 20.0,
        scheduler_name: str = "default-scheduler",
        namespace: str = "default",
        pdb_objs: Sequence[Mapping[str, Any]] = (),
    ) -> SimCluster:
        deps: dict[str, dict[str, Any]] = {}
        for d in deployments:
            d = dict(d)
            meta = dict(d.get("metadata") or {})
            meta.setdefault("namespace", namespace)
            d["metadata"] = meta
            deps[f"{meta['namespace']}/{meta['name']}"] = d
        return SimCluster(
            [dict(o) for o in node_objs],
            deps,
            np.random.default_rng(seed),
            startup_delay_s,
            scheduler_name,
            [dict(o) for o in pdb_objs],
        )

    def _dirty(self) -> None:
        self._snap_cache = None

    # ---- the ReplicaSet controller ------------------------------------------------------------------

    def create_pod(self, workload: str, now_s: float) -> SimPod:
        """A new Pending pod of ``workload`` (``namespace/name``), as the ReplicaSet controller creates it."""
        obj = objects.pod_from_template(self.deployments[workload], self.rng, now_s, self.scheduler_name)
        pod = SimPod(obj, parse_pod(obj), workload, created_s=now_s)
        self.pods.append(pod)
        self._dirty()
        return pod

    def reconcile(self, now_s: float) -> list[SimPod]:
        """Create pods up to each workload's replica target, delete the surplus in the ReplicaSet controller's order
        (:func:`scale_down_order`); a deletion by a scale-down terminates the pod gracefully (no request in flight
        is lost, unlike an eviction: :class:`policy.sim.engine.Simulation`). Returns the pods created."""
        created = []
        by_workload: dict[str, list[SimPod]] = {}
        for p in self.pods:
            if p.alive:
                by_workload.setdefault(p.workload, []).append(p)
        for w, target in self.replicas.items():
            live = by_workload.get(w, [])
            for _ in range(target - len(live)):
                created.append(self.create_pod(w, now_s))
            if len(live) > target:
                for p in scale_down_order(live, live, now_s)[: len(live) - target]:
                    self._remove(p, now_s)
        return created

    def set_replicas(self, workload: str, replicas: int, now_s: float) -> list[SimPod]:
        """The scale subresource: set the target and reconcile."""
        if workload not in self.deployments:
            raise KeyError(f"workload {workload!r} not in the cluster")
        if replicas < 0:
            raise ValueError(f"replicas: must be >= 0, got {replicas}")
        self.replicas[workload] = int(replicas)
        return self.reconcile(now_s)

    def _remove(self, pod: SimPod, now_s: float) -> None:
        pod.alive = False
        pod.evicted_at_s = now_s
        self._dirty()

    # ---- scheduling and readiness -------------------------------------------------------------------

    def pending(self) -> list[SimPod]:
        """Alive unbound pods in creation order (kube-scheduler's queue order for equal priority)."""
        return sorted((p for p in self.pods if p.alive and p.node < 0), key=lambda p: p.created_s)

    def bind(self, pod: SimPod, node_name: str, now_s: float) -> None:
        """The Binding subresource + kwok: the pod runs on ``node_name`` and is Ready after the start-up delay."""
        i = self.node_pos[node_name]
        pod.node = i
        pod.obj = objects.bind(pod.obj, node_name)
        pod.info = replace(pod.info, node_name=node_name, phase="Running")
        pod.ready_at_s = now_s + self.startup_delay_s
        self._dirty()

    def oom_kill(
        self,
        pod: SimPod,
        now_s: float,
        first_backoff_s: float = 10.0,
        max_backoff_s: float = 300.0,
        ready_s: float = 5.0,
    ) -> float:
        """The kernel kills the pod's container (OOMKilled) at ``now_s``; the kubelet restarts it in place after
        its crash back-off (``first_backoff_s``, doubling per consecutive crash, capped at ``max_backoff_s``,
        reset after 10 minutes without one: kubelet's CrashLoopBackOff) and it is Ready ``ready_s`` later.
        Returns the time it is Ready again. The pod stays bound and alive (same name, restartCount + 1)."""
        if pod.last_restart_s is not None and now_s - pod.last_restart_s >= 600.0:
            pod.backoff_s = 0.0
        pod.backoff_s = first_backoff_s if pod.backoff_s <= 0 else min(2 * pod.backoff_s, max_backoff_s)
        pod.restarts += 1
        pod.last_restart_s = now_s
        pod.ready_at_s = now_s + pod.backoff_s + ready_s
        pod.obj = objects.record_restart(pod.obj, pod.restarts, "OOMKilled", now_s)
        pod.info = replace(pod.info, restarts=pod.restarts, last_terminated_s=now_s)
        self._dirty()
        return pod.ready_at_s

    def live_pods(self) -> list[SimPod]:
        return [p for p in self.pods if p.alive]

    def ready_mask(self, at_s: float) -> list[SimPod]:
        """Pods that serve traffic at ``at_s`` (alive, bound, past their start-up delay)."""
        return [p for p in self.pods if p.alive and p.node >= 0 and p.ready_at_s <= at_s]

    # ---- disruption (PodDisruptionBudget arithmetic of the disruption controller) ---------------------

    def _pdb_health(self, pdb: PodDisruptionBudgetInfo, at_s: float) -> tuple[int, int]:
        """(currentHealthy, desiredHealthy) of ``pdb`` at ``at_s``, from minAvailable or maxUnavailable
        (k8s.io/kubernetes pkg/controller/disruption; percentages round up)."""
        covered = [p for p in self.pods if p.alive and pdb.covers(p.info)]
        healthy = sum(1 for p in covered if p.node >= 0 and p.ready_at_s <= at_s)
        expected = max(len(covered), sum(self.replicas.get(w, 0) for w in {p.workload for p in covered}))
        if pdb.min_available is not None:
            desired = _resolve(pdb.min_available, expected)
        elif pdb.max_unavailable is not None:
            desired = expected - _resolve(pdb.max_unavailable, expected)
        else:
            desired = expected
        return healthy, desired

    def disruptions_allowed(self, pdb: PodDisruptionBudgetInfo, at_s: float) -> int:
        """status.disruptionsAllowed = currentHealthy - desiredHealthy (at least 0)."""
        healthy, desired = self._pdb_health(pdb, at_s)
        return max(0, healthy - desired)

    def evict(self, pod_key: str, now_s: float) -> EvictionResult:
        """The Eviction API on the simulated cluster: 404 → ``not_found``, PDB says no → ``refused`` (429: no
        disruption left; for a pod not Ready, fewer healthy pods than desired), else the pod goes away and its
        ReplicaSet creates a replacement (Pending)."""
        pod = next((p for p in self.pods if p.alive and p.info.key == pod_key), None)
        if pod is None:
            return EvictionResult(pod_key, "not_found", "pod not found")
        unhealthy = pod.node < 0 or pod.ready_at_s > now_s
        for pdb in self.pdbs:
            if not pdb.covers(pod.info):
                continue
            healthy, desired = self._pdb_health(pdb, now_s)
            # an unhealthy pod goes while the healthy ones are at least the desired count (the Eviction API's
            # default unhealthyPodEvictionPolicy IfHealthyBudget: pkg/registry/core/pod/storage/eviction.go)
            if unhealthy and desired > 0 and healthy >= desired:
                continue
            if healthy - desired <= 0:
                return EvictionResult(
                    pod_key, "refused", f"Cannot evict pod as it would violate the pod's disruption budget {pdb.name}"
                )
        self._remove(pod, now_s)
        self.reconcile(now_s)
        return EvictionResult(pod_key, "evicted", "evicted")

    # ---- node lifecycle (cordon, failure) and in-place resize -------------------------------------------

    def set_node(
        self,
        i: int,
        *,
        unschedulable: bool | None = None,
        ready: bool | None = None,
        add_taints: Sequence[Mapping[str, str]] = (),
        remove_taints: Sequence[str] = (),
    ) -> None:
        """Update node ``i``'s object (``spec.unschedulable``, ``spec.taints`` by key, the ``Ready`` condition)
        and its parsed :class:`NodeInfo`."""
        obj = copy.deepcopy(self.node_objs[i])
        spec = obj.setdefault("spec", {})
        if unschedulable is not None:
            if unschedulable:
                spec["unschedulable"] = True
            else:
                spec.pop("unschedulable", None)
        taints = [t for t in spec.get("taints") or [] if t.get("key") not in set(remove_taints)]
        for t in add_taints:
            if not any(x.get("key") == t["key"] and x.get("effect") == t["effect"] for x in taints):
                taints.append(dict(t))
        if taints:
            spec["taints"] = taints
        else:
            spec.pop("taints", None)
        if ready is not None:
            st = obj.setdefault("status", {})
            st["conditions"] = [
                {"type": "Ready", "status": "True", "reason": "KubeletReady"}
                if ready
                else {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}
            ]
        self.node_objs[i] = obj
        self.nodes[i] = parse_node(obj)
        self._dirty()

    def pods_on(self, i: int) -> list[SimPod]:
        """Alive pods bound to node ``i``, in creation order."""
        return [p for p in self.pods if p.alive and p.node == i]

    def delete_pod(self, pod: SimPod, now_s: float) -> list[SimPod]:
        """Delete ``pod`` (no PodDisruptionBudget check: the taint manager's deletion) and let its ReplicaSet
        replace it. Returns the pods created."""
        self._remove(pod, now_s)
        return self.reconcile(now_s)

    def resize(
        self,
        pod_key: str,
        cpu_request_m: int | None = None,
        cpu_limit_m: int | None = None,
        memory_request_bytes: int | None = None,
        memory_limit_bytes: int | None = None,
        working_set_bytes: float | None = None,
    ) -> ResizeResult:
        """In-place pod resize (``pods/resize``, KEP-1287): set the pod's requests / limits (None = unchanged;
        a limit of 0 = none) without a restart. The change lands on the pod's first container (the other
        containers keep theirs): the values are the pod's totals. Refused as :class:`ResizeResult` (never an
        exception): ``invalid`` when a value is negative, a request exceeds its limit or the QoS class would
        change (the API server's validation); ``infeasible`` when the new requests exceed the node's
        allocatable; ``deferred`` when they exceed what the other pods on the node leave, or a memory limit
        below the container's working set (``working_set_bytes``) is asked."""
        pod = next((p for p in self.pods if p.alive and p.info.key == pod_key), None)
        if pod is None:
            return ResizeResult(pod_key, "not_found", "pod not found")
        cur_req, cur_lim = pod.info.requests, pod.info.limits
        new = {
            "cpu_req": cur_req.cpu_m if cpu_request_m is None else int(cpu_request_m),
            "cpu_lim": cur_lim.cpu_m if cpu_limit_m is None else int(cpu_limit_m),
            "mem_req": cur_req.memory_bytes if memory_request_bytes is None else int(memory_request_bytes),
            "mem_lim": cur_lim.memory_bytes if memory_limit_bytes is None else int(memory_limit_bytes),
        }
        for k, v in new.items():
            if v < 0:
                return ResizeResult(pod_key, "invalid", f"{k}: must be >= 0, got {v}")
        if new["cpu_lim"] and new["cpu_req"] > new["cpu_lim"]:
            return ResizeResult(
                pod_key, "invalid", f"cpu request {new['cpu_req']}m exceeds the limit {new['cpu_lim']}m"
            )
        if new["mem_lim"] and new["mem_req"] > new["mem_lim"]:
            return ResizeResult(pod_key, "invalid", "memory request exceeds the memory limit")
        obj = copy.deepcopy(pod.obj)
        cs = (obj.get("spec") or {}).get("containers") or []
        if not cs:
            return ResizeResult(pod_key, "invalid", "pod has no containers")
        main = cs[0]
        res = main.setdefault("resources", {})
        req = dict(res.get("requests") or {})
        lim = dict(res.get("limits") or {})

        def first_share(total: int, key: str, kind: str) -> int:
            others = 0
            for c in cs[1:]:
                r = ((c.get("resources") or {}).get(kind) or {}).get(key)
                if r is not None:
                    others += parse_cpu_m(r) if key == "cpu" else parse_memory_bytes(r)
            return max(total - others, 0)

        for key, kind, total, d in (
            ("cpu", "requests", new["cpu_req"], req),
            ("cpu", "limits", new["cpu_lim"], lim),
            ("memory", "requests", new["mem_req"], req),
            ("memory", "limits", new["mem_lim"], lim),
        ):
            if kind == "limits" and total == 0:
                d.pop(key, None)
                continue
            if kind == "requests" and total == 0 and key not in d:
                continue
            v = first_share(total, key, kind)
            d[key] = f"{v}m" if key == "cpu" else str(v)
        res["requests"] = req
        if lim:
            res["limits"] = lim
        else:
            res.pop("limits", None)
        return self._admit_resize(pod, obj, working_set_bytes)

    def retry_pending_resizes(self) -> list[ResizeResult]:
        """The kubelet's retry of deferred resizes (``PodResizePending`` reason ``Deferred``): every pod with a
        pending resize is admitted again; those that fit now take it. Returns the results of those tried."""
        out = []
        for pod in self.pods:
            if pod.alive and pod.pending_resize is not None:
                res = self._admit_resize(pod, pod.pending_resize)
                if res.outcome != "deferred":
                    pod.pending_resize = None
                out.append(res)
        return out

    def _admit_resize(self, pod: SimPod, obj: dict[str, Any], working_set_bytes: float | None = None) -> ResizeResult:
        """The API server's validation and the kubelet's admission of ``obj`` (the pod with its new container
        resources) for ``pod``; applied when ``resized`` (see :meth:`resize`)."""
        pod_key = pod.info.key
        for i, c in enumerate((obj.get("spec") or {}).get("containers") or ()):
            res = c.get("resources") or {}
            for key, parse in (("cpu", parse_cpu_m), ("memory", parse_memory_bytes)):
                req, lim = (res.get("requests") or {}).get(key), (res.get("limits") or {}).get(key)
                if req is not None and lim is not None and parse(req) > parse(lim):
                    return ResizeResult(
                        pod_key,
                        "invalid",
                        f"spec.containers[{i}].resources.requests.{key}: {req} must be less than or equal to "
                        f"the {key} limit {lim}",
                    )
        before = objects.qos_class(pod.obj.get("spec") or {})
        after = objects.qos_class(obj["spec"])
        if before != after:
            return ResizeResult(pod_key, "invalid", f"the QoS class would change from {before} to {after}")
        parsed = parse_pod(obj)
        if pod.node >= 0:
            node = self.nodes[pod.node]
            alloc = node.allocatable
            if parsed.requests.cpu_m > alloc.cpu_m or parsed.requests.memory_bytes > alloc.memory_bytes:
                return ResizeResult(
                    pod_key,
                    "infeasible",
                    f"node {node.name} has {alloc.cpu_m}m CPU / {alloc.memory_bytes} bytes allocatable: "
                    f"cannot fit requests of {parsed.requests.cpu_m}m / {parsed.requests.memory_bytes} bytes",
                )
            others = [p for p in self.pods_on(pod.node) if p is not pod]
            used_cpu = sum(p.info.requests.cpu_m for p in others)
            used_mem = sum(p.info.requests.memory_bytes for p in others)
            if (
                used_cpu + parsed.requests.cpu_m > alloc.cpu_m
                or used_mem + parsed.requests.memory_bytes > alloc.memory_bytes
            ):
                return ResizeResult(
                    pod_key,
                    "deferred",
                    f"node {node.name}: {alloc.cpu_m - used_cpu}m CPU / {alloc.memory_bytes - used_mem} bytes "
                    f"left by the other pods, {parsed.requests.cpu_m}m / {parsed.requests.memory_bytes} bytes asked",
                )
        if (
            working_set_bytes is not None
            and parsed.limits.memory_bytes
            and working_set_bytes > parsed.limits.memory_bytes
        ):
            return ResizeResult(
                pod_key,
                "deferred",
                f"memory limit {parsed.limits.memory_bytes} bytes below the working set {int(working_set_bytes)} bytes",
            )
        pod.obj = obj
        pod.info = replace(pod.info, requests=parsed.requests, limits=parsed.limits)
        self._dirty()
        return ResizeResult(pod_key, "resized", "")

    def patch_resize(
        self, pod_key: str, patch: Mapping[str, Any], working_set_bytes: float | None = None
    ) -> ResizeResult:
        """``pods/{name}/resize`` with a strategic-merge ``patch`` of container resources, as the descheduler's
        live resizer sends it (:func:`descheduler.resize.resize_patch`: ``{"spec": {"containers": [{"name",
        "resources": {"requests", "limits"}}]}}``): each named container takes the patch's requests and limits
        (keys not in the patch keep their values), then the same validation and admission as :meth:`resize`.
        A container name the pod does not have, or a patch of anything but container resources, is ``invalid``
        (the API server's ``podResizeStrategy`` lets only container resources change). A ``deferred`` resize
        is taken by the API server and kept pending (``SimPod.pending_resize``): the kubelet actuates it when it
        fits (:meth:`retry_pending_resizes`, once per simulated minute)."""

        pod = next((p for p in self.pods if p.alive and p.info.key == pod_key), None)
        if pod is None:
            return ResizeResult(pod_key, "not_found", "pod not found")
        spec = patch.get("spec") if isinstance(patch, Mapping) else None
        if not isinstance(spec, Mapping) or set(spec) - {"containers"} or set(patch) - {"spec", "metadata"}:
            return ResizeResult(pod_key, "invalid", "a resize may change container resources only")
        obj = copy.deepcopy(pod.obj)
        by_name = {c.get("name"): c for c in (obj.get("spec") or {}).get("containers") or ()}
        for c in spec.get("containers") or ():
            target = by_name.get(c.get("name"))
            if target is None:
                return ResizeResult(pod_key, "invalid", f"spec.containers: no container named {c.get('name')!r}")
            if set(c) - {"name", "resources"}:
                return ResizeResult(pod_key, "invalid", "a resize may change container resources only")
            res = target.setdefault("resources", {})
            for kind in ("requests", "limits"):
                for key, value in ((c.get("resources") or {}).get(kind) or {}).items():
                    res.setdefault(kind, {})[key] = value
        res = self._admit_resize(pod, obj, working_set_bytes)
        if res.outcome == "deferred":  # the API server took it; the kubelet actuates it once it fits
            pod.pending_resize = obj
            self._dirty()
        return res

    def annotate(self, pod_key: str, annotations: Mapping[str, str | None]) -> bool:
        """A merge PATCH of ``pod_key``'s ``metadata.annotations`` (a value ``None`` removes the key). Returns False
        when the pod is gone."""
        pod = next((p for p in self.pods if p.alive and p.info.key == pod_key), None)
        if pod is None:
            return False
        obj = dict(pod.obj)
        meta = dict(obj.get("metadata") or {})
        ann = dict(meta.get("annotations") or {})
        for k, v in annotations.items():
            if v is None:
                ann.pop(k, None)
            else:
                ann[k] = str(v)
        if ann:
            meta["annotations"] = ann
        else:
            meta.pop("annotations", None)
        obj["metadata"] = meta
        pod.obj = obj
        pod.info = replace(pod.info, annotations=MappingProxyType(ann))
        self._dirty()
        return True

    def refresh_readiness(self, now_s: float) -> None:
        """Report each live pod's readiness at ``now_s`` in its ``PodInfo.ready`` (kwok's stages: Ready from
        ``ready_at_s`` on, not Ready while Pending or after an OOM kill until its restart is Ready)."""
        changed = False
        for p in self.pods:
            if not p.alive:
                continue
            r = p.node >= 0 and p.ready_at_s <= now_s
            if p.info.ready is not r:
                p.info = replace(p.info, ready=r)
                changed = True
        if changed:
            self._dirty()

    # ---- views ----------------------------------------------------------------------------------------

    def snapshot(
        self, now_s: float, graph: ServiceGraph | None = None, pod_cpu_usage_m: Mapping[str, float] | None = None
    ) -> ClusterSnapshot:
        """A :class:`ClusterSnapshot` of the current state. ``pod_cpu_usage_m`` (pod key → millicores of
        measured use, e.g. from the last simulated minute) fills ``PodInfo.usage`` / ``NodeInfo.usage``: a bound
        pod missing from it has not been measured yet (bound since the last minute, as a pod metrics-server has
        not scraped yet) and gets ``usage=None``; a node's use is the sum over its measured pods. Pods' readiness is
        that of ``now_s`` (:meth:`refresh_readiness`)."""
        self.refresh_readiness(now_s)
        if self._snap_cache is not None and pod_cpu_usage_m is None and graph is None:
            return replace(self._snap_cache, taken_at_s=now_s)
        live = self.live_pods()
        pods = []
        node_use = np.zeros(len(self.nodes))
        # annotated PodInfos are cached per pod while its info and usage stay the same (a scheduling cycle
        # per Pending pod would otherwise rebuild every pod's info)
        cache = self._usage_cache
        for p in live:
            info = p.info
            if pod_cpu_usage_m is not None and p.node >= 0:
                got = pod_cpu_usage_m.get(info.key)
                if got is not None:
                    u = float(got)
                    hit = cache.get(info.key)
                    if hit is not None and hit[0] is info and hit[1] == u:
                        info = hit[2]
                    else:
                        annotated = replace(info, usage=Resources(int(round(u)), 0))
                        cache[info.key] = (info, u, annotated)
                        info = annotated
                    node_use[p.node] += u
            pods.append(info)
        if len(cache) > 4 * max(len(live), 64):
            alive = {p.info.key for p in live}
            for k in [k for k in cache if k not in alive]:
                del cache[k]
        nodes = self.nodes
        if pod_cpu_usage_m is not None:
            nodes = [replace(n, usage=Resources(int(round(node_use[i])), 0)) for i, n in enumerate(self.nodes)]
        pdbs = tuple(replace(b, disruptions_allowed=self.disruptions_allowed(b, now_s)) for b in self.pdbs)
        wcache = self._workload_cache
        workloads = []
        for k, w in self.workload_infos.items():
            r = self.replicas[k]
            hit = wcache.get(k)
            if hit is None or hit[0] != r:
                hit = wcache[k] = (r, replace(w, replicas=r))
            workloads.append(hit[1])
        workloads = tuple(workloads)
        snap = ClusterSnapshot(tuple(nodes), tuple(pods), pdbs, workloads, graph or ServiceGraph(), now_s)
        if pod_cpu_usage_m is None and graph is None:
            self._snap_cache = snap
        return snap

    def objects(self) -> list[dict[str, Any]]:
        """Nodes and live Pods as API objects (what ``kubectl get nodes,pods -o json`` lists)."""
        return [*self.node_objs, *(p.obj for p in self.pods if p.alive)]


def _resolve(v: int | str, total: int) -> int:
    if isinstance(v, int):
        return v
    s = str(v).strip()
    if s.endswith("%"):
        return int(math.ceil(float(s[:-1]) * total / 100.0))
    return int(s)
