"""How a simulation is sized: the cluster per app (:data:`APP_BENCH`, :func:`cluster_for`), the trace scaled to the
app's capacity (:data:`PEAK_UTILIZATION`, :func:`trace_rps`), the window of a shortened run (:func:`window_offset`).
Read by :mod:`.run` (one simulation by name) and :mod:`.scenario` (scenario files)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .app import AppSpec
from .engine import ClusterSpec
from .model import PerfModel
from .objects import node_object
from .traces import load_trace, scale_to_peak

__all__ = [
    "PEAK_UTILIZATION",
    "ZONES",
    "REGION",
    "KubeletClusterSpec",
    "AppBench",
    "APP_BENCH",
    "app_bench",
    "cluster_for",
    "trace_rps",
    "capacity_rps",
    "scale_to_capacity",
    "window_offset",
]


#: The trace's peak is scaled to this multiple of the app's capacity at its manifest replicas (busiest
#: service at its CPU limit): above 1, so fixed replicas saturate at the peaks and scaling matters, while
#: most of each window stays well below capacity.
PEAK_UTILIZATION = 1.25


ZONES = ("zone-a", "zone-b", "zone-c")


REGION = "region-1"


@dataclass(frozen=True)
class KubeletClusterSpec(ClusterSpec):
    """A :class:`ClusterSpec` whose nodes carry every label a real kubelet sets, including the deprecated
    ``beta.kubernetes.io/os`` / ``beta.kubernetes.io/arch`` (kubelet_node_status.go still sets them in
    v1.36, and Sock Shop's manifests select on ``beta.kubernetes.io/os``), and a region label."""

    region: str = REGION

    def node_objects(self) -> list[dict[str, Any]]:
        out = []
        for i in range(self.nodes):
            zone = self.zones[i % len(self.zones)] if self.zones else ""
            out.append(
                node_object(
                    f"node-{i:03d}",
                    self.cpu_m,
                    self.memory_bytes,
                    self.max_pods,
                    zone=zone,
                    region=self.region if zone else "",
                    labels={"beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64"},
                )
            )
        return out


@dataclass(frozen=True)
class AppBench:
    """How `make bench` (and ``simulate`` by default) runs an app: ``nodes`` nodes of ``cpu_m`` millicores
    and ``memory_gib`` GiB over three zones."""

    nodes: int
    cpu_m: int = 2000
    memory_gib: int = 8


#: Cluster per built-in app: about 4-8× the manifest's CPU requests, so autoscalers have room and
#: placement matters (documented in docs/benchmarks.md).
APP_BENCH: dict[str, AppBench] = {
    "online-boutique": AppBench(8),
    "sock-shop": AppBench(6),
    "dsb-hotel-reservation": AppBench(8, cpu_m=4000),
    "dsb-social-network": AppBench(8),
    "dsb-media-microservices": AppBench(10),
    "alibaba": AppBench(40, cpu_m=4000, memory_gib=16),
}


def app_bench(app: AppSpec) -> AppBench:
    """The built-in setting for ``app``, or for a user's app: enough 2-core nodes for 4× its CPU requests
    (at least 4)."""
    if app.name in APP_BENCH:
        return APP_BENCH[app.name]
    req_m = sum(w.replicas * w.pod_requests.cpu_m for w in app.workloads)
    return AppBench(max(4, math.ceil(4 * req_m / 2000)))


def cluster_for(app: AppSpec, nodes: int | None = None) -> KubeletClusterSpec:
    b = app_bench(app)
    return KubeletClusterSpec(nodes=nodes or b.nodes, cpu_m=b.cpu_m, memory_bytes=b.memory_gib * 1024**3, zones=ZONES)


def trace_rps(app: AppSpec, trace: str, minutes: int | None, offset_min: int = 0) -> np.ndarray:
    """The trace's per-minute user request rate (req/s) for ``app``: ``minutes`` from ``offset_min`` of
    the named window or CSV, scaled so the whole window's peak is :data:`PEAK_UTILIZATION` of capacity."""
    whole = load_trace(trace)
    if minutes is None:
        minutes = len(whole) - offset_min
    if offset_min < 0 or offset_min + minutes > len(whole):
        raise ValueError(
            f"minutes: trace {trace!r} has {len(whole)} minutes, cannot give [{offset_min}, {offset_min + minutes})"
        )
    return scale_to_capacity(whole, app)[offset_min : offset_min + minutes]


def capacity_rps(app: AppSpec, node_cpu_m: int | None = None) -> float:
    """User requests/s at which the app's busiest service reaches its CPU capacity at the manifest
    replicas: a pod's capacity is its CPU limit, or the node's CPU when it has no limit (what it could
    use alone; :func:`policy.sim.engine.rps_for_app` counts such pods at their request, 0 for none)."""
    node_cores = (node_cpu_m or app_bench(app).cpu_m) / 1000.0
    replicas = {w.service: w.replicas for w in app.workloads}
    limits = {w.service: (w.pod_limits.cpu_m / 1000.0 if w.pod_limits.cpu_m else node_cores) for w in app.workloads}
    return PerfModel(app).capacity_rps(replicas, limits)


def scale_to_capacity(counts_per_min: np.ndarray, app: AppSpec) -> np.ndarray:
    """(T,) requests per minute → (T,) req/s whose peak is :data:`PEAK_UTILIZATION` × :func:`capacity_rps`."""
    return scale_to_peak(np.asarray(counts_per_min, dtype=np.float64), PEAK_UTILIZATION * capacity_rps(app))


def window_offset(trace: str, minutes: int | None) -> int:
    """Where a shortened run starts: the ``minutes``-long part of the window centred on its peak."""
    if minutes is None:
        return 0
    whole = load_trace(trace)
    if minutes >= len(whole):
        return 0
    peak = int(np.argmax(whole))
    return int(min(max(peak - minutes // 2, 0), len(whole) - minutes))
