"""A numpy index over a :class:`~policy.state.ClusterSnapshot`, built once per snapshot (off the
extender's request path) so that scoring a pod against N candidate nodes is O(N + degree).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .state import ClusterSnapshot, PodInfo

__all__ = ["ClusterIndex", "estimated_cpu_m", "DEFAULT_ESTIMATED_CPU_M", "ESTIMATED_CPU_SCALING_PCT"]

#: The CPU a pod without a CPU request or limit is estimated to use until it is measured, millicores (Koordinator's
#: LoadAware estimator: ``DefaultMilliCPURequest``).
DEFAULT_ESTIMATED_CPU_M = 250
#: The share of its CPU request a pod whose limit is not above its request is estimated to use, per cent
#: (Koordinator's LoadAware ``estimatedScalingFactors`` default for CPU).
ESTIMATED_CPU_SCALING_PCT = 85


def estimated_cpu_m(pod: PodInfo) -> int:
    """The CPU ``pod`` is estimated to use before it is measured, whole millicores: its limit when the limit is above
    its request (a Burstable pod is assumed to use what it may), else :data:`ESTIMATED_CPU_SCALING_PCT` % of its
    request, rounded half up, and :data:`DEFAULT_ESTIMATED_CPU_M` for a pod with neither (BestEffort). This is the
    default estimator of Koordinator's LoadAware scheduling plugin (koordinator-sh/koordinator,
    pkg/scheduler/plugins/loadaware/estimator: ``estimatedUsedByResource``), which estimates the use of pods scheduled
    since the node's last metrics report the same way. Counting requests alone, a pod that requests nothing counts
    nothing: a whole application of such pods (sock-shop's databases) fitted on one node by its requests."""
    req, lim = pod.requests.cpu_m, pod.limits.cpu_m
    if lim > req:
        return int(lim)
    if req <= 0:
        return DEFAULT_ESTIMATED_CPU_M
    return (ESTIMATED_CPU_SCALING_PCT * int(req) + 50) // 100


@dataclass(frozen=True)
class ClusterIndex:
    """Arrays aligned with ``node_names`` (length N).

    - ``alloc_cpu_m``, ``alloc_mem_bytes``: (N,) float64 allocatable;
    - ``req_cpu_m``, ``req_mem_bytes``: (N,) float64 sum of requests of bound, non-terminating pods;
    - ``usage_cpu_m``: (N,) float64 measured CPU use, NaN where unknown;
    - ``unmeasured_estimated_cpu_m``: (N,) float64 estimated CPU use (:func:`estimated_cpu_m`) of the bound,
      non-terminating pods without a measured use (``PodInfo.usage`` None); ``measured_pods``: (N,) int64 count of
      those with one; both ``None`` in an index built by hand (see :attr:`unmeasured_cpu_m`);
    - ``pod_count``: (N,) int64 bound pods;
    - ``service_nodes``: service → (N,) float64 count of that service's bound pods per node;
    - ``service_total``: service → total bound pods of the service (>= 0).
    """

    snapshot: ClusterSnapshot
    node_names: tuple[str, ...]
    node_pos: dict[str, int]
    alloc_cpu_m: np.ndarray
    alloc_mem_bytes: np.ndarray
    req_cpu_m: np.ndarray
    req_mem_bytes: np.ndarray
    usage_cpu_m: np.ndarray
    pod_count: np.ndarray
    service_nodes: dict[str, np.ndarray]
    service_total: dict[str, int]
    unmeasured_estimated_cpu_m: np.ndarray | None = None
    measured_pods: np.ndarray | None = None

    @property
    def unmeasured_cpu_m(self) -> np.ndarray | None:
        """(N,) float64: the estimated CPU use (:func:`estimated_cpu_m`) of the pods not measured yet, on nodes where
        some other pod is (0 elsewhere): pods bound since the metrics window, which the node's measured use does not
        hold yet. A
        snapshot without any pod metrics (the extender's) gives zeros. ``None`` when the index has no counts."""
        if self.unmeasured_estimated_cpu_m is None or self.measured_pods is None:
            return None
        return np.where(self.measured_pods > 0, self.unmeasured_estimated_cpu_m, 0.0)

    @staticmethod
    def build(snapshot: ClusterSnapshot) -> ClusterIndex:
        names = tuple(n.name for n in snapshot.nodes)
        pos = {n: i for i, n in enumerate(names)}
        n = len(names)
        alloc_cpu = np.array([x.allocatable.cpu_m for x in snapshot.nodes], dtype=np.float64)
        alloc_mem = np.array([x.allocatable.memory_bytes for x in snapshot.nodes], dtype=np.float64)
        usage = np.array([np.nan if x.usage is None else x.usage.cpu_m for x in snapshot.nodes], dtype=np.float64)
        req_cpu = np.zeros(n)
        req_mem = np.zeros(n)
        count = np.zeros(n, dtype=np.int64)
        unmeasured = np.zeros(n)
        measured = np.zeros(n, dtype=np.int64)
        svc_nodes: dict[str, np.ndarray] = {}
        svc_total: dict[str, int] = {}
        for p in snapshot.pods:
            if p.terminating or p.node_name is None:
                continue
            i = pos.get(p.node_name)
            if i is None:
                continue
            req_cpu[i] += p.requests.cpu_m
            req_mem[i] += p.requests.memory_bytes
            count[i] += 1
            if p.usage is None:
                unmeasured[i] += estimated_cpu_m(p)
            else:
                measured[i] += 1
            arr = svc_nodes.get(p.service)
            if arr is None:
                arr = svc_nodes[p.service] = np.zeros(n)
            arr[i] += 1.0
            svc_total[p.service] = svc_total.get(p.service, 0) + 1
        return ClusterIndex(
            snapshot,
            names,
            pos,
            alloc_cpu,
            alloc_mem,
            req_cpu,
            req_mem,
            usage,
            count,
            svc_nodes,
            svc_total,
            unmeasured,
            measured,
        )

    def positions(self, node_names: Sequence[str]) -> np.ndarray:
        """Indices of ``node_names`` in this index; -1 for nodes the snapshot does not know."""
        get = self.node_pos.get
        return np.fromiter((get(n, -1) for n in node_names), dtype=np.int64, count=len(node_names))
