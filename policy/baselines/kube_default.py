"""kube-scheduler's default score plugins, reimplemented from k8s.io/kubernetes v1.36.3
(pkg/scheduler/framework/plugins/...), with the default profile's weights
(pkg/scheduler/apis/config/v1/default_plugins.go: TaintToleration 3, NodeAffinity 2, NodeResourcesFit 1,
PodTopologySpread 2, InterPodAffinity 2, NodeResourcesBalancedAllocation 1, ImageLocality 1).

Each plugin maps ``(pod, candidates, index)`` to int64 scores in [0, 100] (framework MaxNodeScore), one
per candidate, computed with the same integer arithmetic as the Go code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..index import ClusterIndex
from ..state import PodInfo

MAX_NODE_SCORE = 100
#: pkg/scheduler/util/pod_resources.go: requests assumed for containers that set none (scoring only).
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024


class ScorePlugin(Protocol):
    """A kube-scheduler score plugin: ``score`` returns (len(candidates),) int64 in [0, 100]."""

    name: str
    weight: int

    def score(self, pod: PodInfo, candidates: Sequence[str], index: ClusterIndex) -> np.ndarray: ...


def _non_zero(v: int, default: int) -> int:
    return v if v > 0 else default


def _node_arrays(candidates: Sequence[str], index: ClusterIndex, nonzero: bool):
    """(alloc_cpu, alloc_mem, req_cpu, req_mem) int64 arrays for the candidates.

    ``nonzero``: use the scheduler's NonZeroRequested accounting (pods without requests count the defaults).
    Unknown candidates get zeros (score 0).
    """
    pos = index.positions(candidates)
    known = pos >= 0
    alloc_cpu = np.zeros(len(candidates), dtype=np.int64)
    alloc_mem = np.zeros(len(candidates), dtype=np.int64)
    req_cpu = np.zeros(len(candidates), dtype=np.int64)
    req_mem = np.zeros(len(candidates), dtype=np.int64)
    alloc_cpu[known] = index.alloc_cpu_m[pos[known]].astype(np.int64)
    alloc_mem[known] = index.alloc_mem_bytes[pos[known]].astype(np.int64)
    if nonzero:
        nz_cpu, nz_mem = _nonzero_requested(index)
        req_cpu[known] = nz_cpu[pos[known]]
        req_mem[known] = nz_mem[pos[known]]
    else:
        req_cpu[known] = index.req_cpu_m[pos[known]].astype(np.int64)
        req_mem[known] = index.req_mem_bytes[pos[known]].astype(np.int64)
    return alloc_cpu, alloc_mem, req_cpu, req_mem


def _nonzero_requested(index: ClusterIndex) -> tuple[np.ndarray, np.ndarray]:
    cpu = np.zeros(len(index.node_names), dtype=np.int64)
    mem = np.zeros(len(index.node_names), dtype=np.int64)
    for p in index.snapshot.pods:
        if p.terminating or p.node_name is None:
            continue
        i = index.node_pos.get(p.node_name)
        if i is None:
            continue
        cpu[i] += _non_zero(p.requests.cpu_m, DEFAULT_MILLI_CPU_REQUEST)
        mem[i] += _non_zero(p.requests.memory_bytes, DEFAULT_MEMORY_REQUEST)
    return cpu, mem


def _least_requested_score(requested: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """least_allocated.go leastRequestedScore: ((capacity - requested) * 100) / capacity, 0 when over."""
    out = np.zeros_like(requested)
    ok = (capacity > 0) & (requested <= capacity)
    out[ok] = ((capacity[ok] - requested[ok]) * MAX_NODE_SCORE) // capacity[ok]
    return out


@dataclass(frozen=True)
class NodeResourcesFitLeastAllocated:
    """NodeResourcesFit with the default ``LeastAllocated`` strategy over cpu and memory (weights 1, 1),
    using NonZeroRequested for the node and the pod (least_allocated.go, resource_allocation.go)."""

    name: str = "NodeResourcesFit"
    weight: int = 1

    def score(self, pod: PodInfo, candidates: Sequence[str], index: ClusterIndex) -> np.ndarray:
        a_cpu, a_mem, r_cpu, r_mem = _node_arrays(candidates, index, nonzero=True)
        own = np.array([c == pod.node_name for c in candidates])
        p_cpu = _non_zero(pod.requests.cpu_m, DEFAULT_MILLI_CPU_REQUEST)
        p_mem = _non_zero(pod.requests.memory_bytes, DEFAULT_MEMORY_REQUEST)
        # the pod itself is not yet on any candidate (a bound pod being re-scored is subtracted)
        r_cpu = r_cpu - own * p_cpu + p_cpu
        r_mem = r_mem - own * p_mem + p_mem
        s_cpu = _least_requested_score(r_cpu, a_cpu)
        s_mem = _least_requested_score(r_mem, a_mem)
        wsum = (a_cpu > 0).astype(np.int64) + (a_mem > 0).astype(np.int64)
        total = s_cpu * (a_cpu > 0) + s_mem * (a_mem > 0)
        return np.where(wsum > 0, total // np.maximum(wsum, 1), 0)


def _balanced_score(req_cpu: np.ndarray, req_mem: np.ndarray, a_cpu: np.ndarray, a_mem: np.ndarray) -> np.ndarray:
    """balanced_allocation.go balancedResourceScore: int((1 - std) * 100), std = |f_cpu - f_mem| / 2 with
    fractions capped at 1; std = 0 when only one resource is allocatable."""
    f_cpu = np.where(a_cpu > 0, np.minimum(req_cpu / np.maximum(a_cpu, 1), 1.0), np.nan)
    f_mem = np.where(a_mem > 0, np.minimum(req_mem / np.maximum(a_mem, 1), 1.0), np.nan)
    both = ~np.isnan(f_cpu) & ~np.isnan(f_mem)
    std = np.where(both, np.abs(np.nan_to_num(f_cpu) - np.nan_to_num(f_mem)) / 2.0, 0.0)
    return ((1.0 - std) * MAX_NODE_SCORE).astype(np.int64)


@dataclass(frozen=True)
class NodeResourcesBalancedAllocation:
    """NodeResourcesBalancedAllocation as of v1.36: scores the change in balance the pod brings,
    ``50 + (50 + score_with_pod - score_without_pod) / 2`` (integer division), using actual requests
    (``useRequested: true``); BestEffort pods score 0 (balanced_allocation.go)."""

    name: str = "NodeResourcesBalancedAllocation"
    weight: int = 1

    def score(self, pod: PodInfo, candidates: Sequence[str], index: ClusterIndex) -> np.ndarray:
        if pod.requests.cpu_m == 0 and pod.requests.memory_bytes == 0:
            return np.zeros(len(candidates), dtype=np.int64)
        a_cpu, a_mem, r_cpu, r_mem = _node_arrays(candidates, index, nonzero=False)
        own = np.array([c == pod.node_name for c in candidates])
        base_cpu = r_cpu - own * pod.requests.cpu_m
        base_mem = r_mem - own * pod.requests.memory_bytes
        with_pod = _balanced_score(base_cpu + pod.requests.cpu_m, base_mem + pod.requests.memory_bytes,
                                   a_cpu, a_mem)
        without = _balanced_score(base_cpu, base_mem, a_cpu, a_mem)
        # Go's integer division truncates toward zero; the operand is always >= 0 here.
        return MAX_NODE_SCORE // 2 + (MAX_NODE_SCORE // 2 + with_pod - without) // 2


def default_score_plugins() -> list[ScorePlugin]:
    """The default profile's score plugins that distinguish nodes in our simulated clusters (no taints,
    affinities, or images): NodeResourcesFit (LeastAllocated) and NodeResourcesBalancedAllocation."""
    return [NodeResourcesFitLeastAllocated(), NodeResourcesBalancedAllocation()]
