"""The extender's Prometheus metrics (prometheus-client), registered in a :class:`CollectorRegistry`
passed in, so tests and the demo read values directly (``registry.get_sample_value(...)``).

Names use base units (DESIGN.md section 6); label values come from fixed sets (verbs, outcome labels
of :mod:`extender.scoring`), never pod or node names.

======================================================  =========  ===============================================
metric                                                  type       meaning
======================================================  =========  ===============================================
``hrl_extender_prioritize_duration_seconds``            histogram  time to answer a valid prioritize request
``hrl_extender_prioritize_total{outcome}``              counter    valid prioritize requests by outcome
``hrl_extender_filter_duration_seconds``                histogram  time to answer a valid filter request
``hrl_extender_filter_total{outcome}``                  counter    valid filter requests by outcome
``hrl_extender_requests_invalid_total{verb}``           counter    malformed requests answered 400 (filter, prioritize)
``hrl_extender_snapshot_age_seconds``                   gauge      age of the snapshot (NaN when none)
``hrl_extender_snapshot_pods`` / ``_nodes``             gauge      pods / nodes in the snapshot (0 when none)
======================================================  =========  ===============================================
"""

from __future__ import annotations

import math
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from .scoring import FILTER_OUTCOMES, PRIORITIZE_OUTCOMES
from .store import SnapshotStore

__all__ = ["DURATION_BUCKETS_S", "VERBS", "ExtenderMetrics"]

#: Histogram buckets (seconds): fine from 50 µs to 1 s. kube-scheduler's budget per cycle is a few ms
#: (DESIGN.md section 5), so most of the resolution sits below 10 ms.
DURATION_BUCKETS_S: tuple[float, ...] = (
    0.00005,
    0.0001,
    0.00015,
    0.0002,
    0.0003,
    0.0005,
    0.00075,
    0.001,
    0.0015,
    0.002,
    0.003,
    0.005,
    0.0075,
    0.01,
    0.015,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
)

VERBS: tuple[str, ...] = ("filter", "prioritize")


class ExtenderMetrics:
    """The extender's collectors, registered in ``registry`` on construction (one instance per registry:
    registering the same names twice raises ``ValueError`` from prometheus-client).

    Every label value of every counter is created at 0 up front, so rates and sums are defined before
    the first request.
    """

    def __init__(self, registry: CollectorRegistry):
        self.registry = registry
        self.prioritize_duration_seconds = Histogram(
            "hrl_extender_prioritize_duration_seconds",
            "Time to answer a valid prioritize request (parse, score, encode), seconds.",
            buckets=DURATION_BUCKETS_S,
            registry=registry,
        )
        self.prioritize_total = Counter(
            "hrl_extender_prioritize_total",
            "Valid prioritize requests by outcome (ok, or neutral_* with the reason scores were neutral).",
            ["outcome"],
            registry=registry,
        )
        self.filter_duration_seconds = Histogram(
            "hrl_extender_filter_duration_seconds",
            "Time to answer a valid filter request (parse, filter, encode), seconds.",
            buckets=DURATION_BUCKETS_S,
            registry=registry,
        )
        self.filter_total = Counter(
            "hrl_extender_filter_total",
            "Valid filter requests by outcome (ok, filtered, no_fit, or a fail-open reason).",
            ["outcome"],
            registry=registry,
        )
        self.requests_invalid_total = Counter(
            "hrl_extender_requests_invalid_total",
            "Malformed extender requests answered with HTTP 400, by verb.",
            ["verb"],
            registry=registry,
        )
        self.snapshot_age_seconds = Gauge(
            "hrl_extender_snapshot_age_seconds",
            "Seconds since the cluster snapshot was last updated (NaN when there is none).",
            registry=registry,
        )
        self.snapshot_pods = Gauge(
            "hrl_extender_snapshot_pods", "Pods in the current cluster snapshot (0 when none).", registry=registry
        )
        self.snapshot_nodes = Gauge(
            "hrl_extender_snapshot_nodes", "Nodes in the current cluster snapshot (0 when none).", registry=registry
        )
        for o in PRIORITIZE_OUTCOMES:
            self.prioritize_total.labels(outcome=o)
        for o in FILTER_OUTCOMES:
            self.filter_total.labels(outcome=o)
        for v in VERBS:
            self.requests_invalid_total.labels(verb=v)
        self.snapshot_age_seconds.set(math.nan)

    def bind_store(self, store: SnapshotStore, clock: Callable[[], float] | None = None) -> None:
        """Compute the snapshot gauges from ``store`` at every scrape (``clock``: defaults to the store's)."""
        now = clock or store.clock

        def age() -> float:
            v = store.get()
            return v.age_s(now()) if v.ready else math.nan

        self.snapshot_age_seconds.set_function(age)
        self.snapshot_pods.set_function(lambda: float(len(s.pods)) if (s := store.get().snapshot) else 0.0)
        self.snapshot_nodes.set_function(lambda: float(len(s.nodes)) if (s := store.get().snapshot) else 0.0)

    def _sum(self, name: str) -> int:
        total = 0.0
        for metric in self.registry.collect():
            for s in metric.samples:
                if s.name == name:
                    total += s.value
        return int(total)

    def prioritize_calls(self) -> int:
        """Valid prioritize requests answered so far (all outcomes)."""
        return self._sum("hrl_extender_prioritize_total")

    def filter_calls(self) -> int:
        """Valid filter requests answered so far (all outcomes)."""
        return self._sum("hrl_extender_filter_total")
