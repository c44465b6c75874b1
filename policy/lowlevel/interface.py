"""The low-level (placement) policy: which node should this pod go to?

The extender serves a :class:`PlacementPolicy` on every scheduling cycle; the simulator and the
descheduler's feasibility check call the same object. Implementations are numpy-only (no torch).

Contract:

- ``filter(pod, candidates, index)`` → ``{node: reason}`` for candidates that violate a hard constraint
  of ours (never soft preferences). Nodes the index does not know pass: we only reject what we know.
- ``score(pod, candidates, index, intent)`` → ``(len(candidates),)`` float64 in [0, 10]
  (kube-scheduler's MaxExtenderPriority = 10); higher is better. Equal scores everywhere = neutral.

``intent`` is the high-level policy's vector (see :data:`INTENT_SPEC`); ``None`` = defaults. The high level's
:class:`policy.intent.Intent` may also set a per-service co-location priority (a multiplier of ``locality_weight``
for that service's pods): the callers of ``score`` apply it with :meth:`policy.intent.Intent.for_service` before
scoring, so a policy always sees one vector.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from policy.index import ClusterIndex
from policy.intent import COLOCATION_PREFIX, INTENT_SPEC, intent_value
from policy.state import NodeInfo, PodInfo

__all__ = [
    "MAX_EXTENDER_PRIORITY",
    "INTENT_SPEC",
    "intent_value",
    "COLOCATION_PREFIX",
    "PlacementPolicy",
    "TAINT_EFFECTS_THAT_REPEL",
    "node_admits",
    "resource_fit_failures",
    "admission_mask",
]


MAX_EXTENDER_PRIORITY = 10  # k8s.io/kube-scheduler/extender/v1 MaxExtenderPriority


@runtime_checkable
class PlacementPolicy(Protocol):
    """What the extender, the simulator and the descheduler need from a low-level policy. ``embeddings``: the
    service rows to score with (:meth:`policy.lowlevel.LearnedPlacement.service_rows`; ``None``: the policy's own),
    passed only to a policy that offers ``service_rows``; a policy without rows ignores it."""

    @property
    def name(self) -> str: ...

    def filter(self, pod: PodInfo, candidates: Sequence[str], index: ClusterIndex) -> dict[str, str]: ...

    def score(
        self,
        pod: PodInfo,
        candidates: Sequence[str],
        index: ClusterIndex,
        intent: Sequence[float] | None = None,
        *,
        embeddings: Any = None,
    ) -> np.ndarray: ...


TAINT_EFFECTS_THAT_REPEL = ("NoSchedule", "NoExecute")


def node_admits(pod: PodInfo, node: NodeInfo, pods_on_node: int | None = None) -> str | None:
    """Why kube-scheduler would refuse ``node`` for ``pod`` on grounds the resource filter does not see,
    or ``None`` when it would not.

    Checks (k8s.io/kubernetes pkg/scheduler/framework/plugins): TaintToleration (an untolerated
    ``NoSchedule``/``NoExecute`` taint), NodeAffinity's ``spec.nodeSelector`` part (every key/value must be
    a node label), NodeUnschedulable, node Ready, and the node's pod-count limit (``allocatable_pods``,
    when ``pods_on_node`` is given). Resource fit is :func:`resource_fit_failures`, which also applies these checks.
    """
    if node.unschedulable:
        return "node is unschedulable (cordoned)"
    if not node.ready:
        return "node is not Ready"
    for taint in node.taints:
        if taint.effect in TAINT_EFFECTS_THAT_REPEL and not any(t.tolerates(taint) for t in pod.tolerations):
            return f"untolerated taint {taint.key}={taint.value}:{taint.effect}"
    for k, v in pod.node_selector.items():
        if node.labels.get(k) != v:
            return f"nodeSelector {k}={v} does not match"
    if pods_on_node is not None and pods_on_node + 1 > node.allocatable_pods:
        return f"too many pods: node allows {node.allocatable_pods}"
    return None


def resource_fit_failures(pod: PodInfo, candidates: Sequence[str], index: ClusterIndex) -> dict[str, str]:
    """Candidates on which ``pod``'s requests do not fit next to the pods already bound there
    (the NodeResourcesFit filter, from our snapshot), or that :func:`node_admits` refuses (cordoned, not
    Ready, untolerated taint, nodeSelector, pod count). A pod already bound to a candidate is not counted
    twice. Candidates the snapshot does not know pass. O(len(candidates))."""
    failed: dict[str, str] = {}
    snap_nodes = index.snapshot.nodes
    for name in candidates:
        i = index.node_pos.get(name)
        if i is None:
            continue
        node = snap_nodes[i]
        on_node = int(index.pod_count[i]) - (1 if pod.node_name == name else 0)
        why = node_admits(pod, node, on_node)
        if why is not None:
            failed[name] = why
            continue
        own_cpu = pod.requests.cpu_m if pod.node_name == name else 0
        own_mem = pod.requests.memory_bytes if pod.node_name == name else 0
        free_cpu = index.alloc_cpu_m[i] - (index.req_cpu_m[i] - own_cpu)
        free_mem = index.alloc_mem_bytes[i] - (index.req_mem_bytes[i] - own_mem)
        if pod.requests.cpu_m > free_cpu:
            failed[name] = f"Insufficient cpu: requests {pod.requests.cpu_m}m, free {int(free_cpu)}m"
        elif pod.requests.memory_bytes > free_mem:
            failed[name] = (
                f"Insufficient memory: requests {pod.requests.memory_bytes} bytes, free {int(free_mem)} bytes"
            )
    return failed


_STATIC_LOCK = threading.Lock()
_STATIC: list[tuple[tuple[str, ...], dict[tuple, np.ndarray]]] = []


def _static_mask(pod: PodInfo, index: ClusterIndex) -> np.ndarray:
    """(N,) bool: :func:`node_admits` without the pod count (cordon, readiness, taints, nodeSelector), per node of
    ``index``; computed once per distinct (tolerations, nodeSelector) and node list, O(N) then O(1)."""
    key = (pod.tolerations, tuple(sorted(pod.node_selector.items())))
    names = index.node_names
    for n, table in _STATIC:
        if n is names:
            hit = table.get(key)
            if hit is not None:
                return hit
            break
    else:
        table = {}
        with _STATIC_LOCK:
            _STATIC.insert(0, (names, table))
            del _STATIC[4:]
    mask = np.fromiter((node_admits(pod, n) is None for n in index.snapshot.nodes), dtype=bool, count=len(names))
    table[key] = mask
    return mask


def admission_mask(pod: PodInfo, positions: np.ndarray, index: ClusterIndex) -> np.ndarray:
    """(len(positions),) bool: the candidates (positions in ``index.node_names``) that
    :func:`resource_fit_failures` would *not* refuse (node_admits: cordon, readiness, taints, nodeSelector, pod
    count; then cpu and memory requests), vectorised: the same decisions in O(len(positions)) numpy."""
    positions = np.asarray(positions, dtype=np.int64)
    ok = _static_mask(pod, index)[positions].copy()
    own_i = index.node_pos.get(pod.node_name, -1) if pod.node_name is not None else -1
    own = (positions == own_i).astype(np.int64)
    alloc_pods = _alloc_pods(index)
    ok &= index.pod_count[positions] - own + 1 <= alloc_pods[positions]
    ok &= pod.requests.cpu_m <= index.alloc_cpu_m[positions] - (index.req_cpu_m[positions] - own * pod.requests.cpu_m)
    ok &= pod.requests.memory_bytes <= index.alloc_mem_bytes[positions] - (
        index.req_mem_bytes[positions] - own * pod.requests.memory_bytes
    )
    return ok


_ALLOC_PODS: list[tuple[tuple[str, ...], np.ndarray]] = []


def _alloc_pods(index: ClusterIndex) -> np.ndarray:
    for n, arr in _ALLOC_PODS:
        if n is index.node_names:
            return arr
    arr = np.array([n.allocatable_pods for n in index.snapshot.nodes], dtype=np.int64)
    with _STATIC_LOCK:
        _ALLOC_PODS.insert(0, (index.node_names, arr))
        del _ALLOC_PODS[4:]
    return arr
