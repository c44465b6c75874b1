"""scheduler-plugins Trimaran TargetLoadPacking: best-fit packing of measured node CPU around a target
utilisation.

Source: kubernetes-sigs/scheduler-plugins (commit 903da7df82cb8794dda8f2d510ba1156111662dd)
pkg/trimaran/targetloadpacking/targetloadpacking.go (Score, PredictUtilisation; NormalizeScore is a no-op),
apis/config/v1/defaults.go (targetUtilization 40 %, defaultRequests 1000m, defaultRequestsMultiplier 1.5),
pkg/trimaran/handler.go (pods assigned since the last metrics report count as "missing" utilisation) and
pkg/trimaran/targetloadpacking/README.md (the example profile: NodeResourcesBalancedAllocation and
NodeResourcesLeastAllocated disabled, TargetLoadPacking enabled with weight 1).

Node CPU comes from the snapshot's measured ``NodeInfo.usage`` (the load watcher's latest average); a node
without a measurement scores the minimum (0). A pod's predicted CPU is its CPU limit, else its request ×
the multiplier, else the default request (per pod, from the summed requests/limits of
:class:`~policy.state.PodInfo`: exact for single-container pods).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from policy.index import ClusterIndex
from policy.state import ClusterSnapshot, PodInfo

__all__ = [
    "DEFAULT_TARGET_UTILIZATION_PCT",
    "DEFAULT_REQUESTS_MILLICORES",
    "DEFAULT_REQUESTS_MULTIPLIER",
    "METRICS_REPORTING_INTERVAL_S",
    "predict_utilisation_m",
    "MetricsWindow",
    "TargetLoadPacking",
]

DEFAULT_TARGET_UTILIZATION_PCT = 40
DEFAULT_REQUESTS_MILLICORES = 1000
DEFAULT_REQUESTS_MULTIPLIER = 1.5
#: metricsAgentReportingIntervalSeconds: pods assigned less than this before the metrics' end count as missing
METRICS_REPORTING_INTERVAL_S = 60.0


def predict_utilisation_m(
    pod: PodInfo, default_requests_m: int = DEFAULT_REQUESTS_MILLICORES, multiplier: float = DEFAULT_REQUESTS_MULTIPLIER
) -> int:
    """PredictUtilisation: the CPU limit (m), else round(request × multiplier), else the default request."""
    if pod.limits.cpu_m > 0:
        return pod.limits.cpu_m
    if pod.requests.cpu_m > 0:
        return int(math.floor(pod.requests.cpu_m * multiplier + 0.5))
    return default_requests_m


@dataclass
class MetricsWindow:
    """What the load watcher's latest report covers: the pods bound when it was taken (``mark``). Pods
    bound after that are the plugin's "missing" utilisation (PodAssignEventHandler's cache). Until the
    first ``mark`` every bound pod counts as covered, except those whose ``usage`` is unknown (None)."""

    covered: frozenset[str] | None = None
    taken_at_s: float | None = None

    def mark(self, snapshot: ClusterSnapshot) -> None:
        """Record a metrics report taken now: every pod bound in ``snapshot`` is in it."""
        self.covered = frozenset(p.key for p in snapshot.pods if p.node_name is not None)
        self.taken_at_s = snapshot.taken_at_s

    def is_missing(self, pod: PodInfo) -> bool:
        if self.covered is None:
            return pod.usage is None
        return pod.key not in self.covered


@dataclass
class TargetLoadPacking:
    """The TargetLoadPacking score plugin (score 0..100, no normalisation).

    With U = 100 × (node measured CPU + predicted CPU of the pod + predicted CPU of pods bound since the
    metrics) / node capacity, and T the target: U <= T → ``round((100 - T) × U / T + T)`` (rising from T
    to 100 as the node fills up to the target); T < U <= 100 → ``round(T × (100 - U) / (100 - T))``;
    U > 100 → 0.
    """

    target_utilization_pct: int = DEFAULT_TARGET_UTILIZATION_PCT
    default_requests_m: int = DEFAULT_REQUESTS_MILLICORES
    requests_multiplier: float = DEFAULT_REQUESTS_MULTIPLIER
    window: MetricsWindow = field(default_factory=MetricsWindow)
    name: str = "TargetLoadPacking"
    weight: int = 1

    def __post_init__(self) -> None:
        if not 0 < self.target_utilization_pct < 100:
            raise ValueError(f"targetUtilization: must be in (0, 100), got {self.target_utilization_pct}")

    def predicted_pct(self, pod: PodInfo, candidates: Sequence[str], index: ClusterIndex) -> np.ndarray:
        """(len(candidates),) predicted CPU utilisation % (NaN where the node has no measurement)."""
        own = predict_utilisation_m(pod, self.default_requests_m, self.requests_multiplier)
        nodes = index.snapshot.nodes
        missing = np.zeros(len(nodes))
        for p in index.snapshot.pods:
            if p.node_name is None or p.terminating or p.key == pod.key:
                continue
            i = index.node_pos.get(p.node_name)
            if i is not None and self.window.is_missing(p):
                missing[i] += predict_utilisation_m(p, self.default_requests_m, self.requests_multiplier)
        out = np.full(len(candidates), np.nan)
        for k, c in enumerate(candidates):
            i = index.node_pos.get(c)
            if i is None or nodes[i].usage is None:
                continue
            cap = float(nodes[i].allocatable.cpu_m)
            out[k] = 100.0 * (nodes[i].usage.cpu_m + own + missing[i]) / cap if cap else 0.0
        return out

    def score(self, pod: PodInfo, candidates: Sequence[str], index: ClusterIndex) -> np.ndarray:
        t = float(self.target_utilization_pct)
        out = np.zeros(len(candidates), dtype=np.int64)
        for k, u in enumerate(self.predicted_pct(pod, candidates, index).tolist()):
            if math.isnan(u) or u > 100:
                continue
            if u > t:
                out[k] = int(math.floor(t * (100 - u) / (100 - t) + 0.5))
            else:
                out[k] = int(math.floor((100 - t) * u / t + t + 0.5))
        return out
