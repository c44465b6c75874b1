"""The extender's Prometheus metrics (prometheus-client), registered in a :class:`CollectorRegistry`
passed in, so tests and the demo read values directly (``registry.get_sample_value(...)``).

Names use base units (DESIGN.md section 6); label values come from fixed sets (verbs, outcome labels
of :mod:`extender.scoring`), never pod or node names.

======================================================  =========  ===============================================
metric                                                  type       meaning
======================================================  =========  ===============================================
``hrl_extender_prioritize_duration_seconds``            histogram  time from arrival (bytes in the socket) to the
                                                                   reply, prioritize scored or shed
``hrl_extender_prioritize_total{outcome}``              counter    every prioritize request answered, by outcome
                                                                   (the scoring's, or invalid / too_large / timeout)
``hrl_extender_filter_duration_seconds``                histogram  the same, filter
``hrl_extender_filter_total{outcome}``                  counter    every filter request answered, by outcome
``hrl_extender_requests_invalid_total{verb}``           counter    malformed requests answered 400 (filter, prioritize)
``hrl_extender_requests_too_large_total{verb}``         counter    bodies over limits.maxRequestBytes answered 413
``hrl_extender_requests_in_flight``                     gauge      complete requests not answered yet (waiting for a
                                                                   worker or behind another of their connection)
``hrl_extender_http_requests_reading``                  gauge      requests begun and not complete (being read)
``hrl_extender_http_responses_total{code}``             counter    every reply, by HTTP status code
``hrl_extender_http_connections_total``                 counter    HTTP connections accepted (kube-scheduler reuses its)
``hrl_extender_http_connections_closed_total{reason}``  counter    connections closed, by reason
                                                                   (:data:`extender.http.CLOSE_REASONS`)
``hrl_extender_http_connections_open``                  gauge      connections open now
``hrl_extender_score_table_lookups_total{result}``      counter    precomputed-score lookups: hit, miss
``hrl_extender_score_table_vectors``                    gauge      node-score vectors held for the current snapshot
``hrl_extender_score_table_computed_total``             counter    node-score vectors computed (off the request path)
``hrl_extender_score_table_warm_seconds_total``         counter    time spent computing them, seconds
``hrl_extender_snapshot_age_seconds``                   gauge      age of the snapshot (NaN when none)
``hrl_extender_snapshot_pods`` / ``_nodes``             gauge      pods / nodes in the snapshot (0 when none)
======================================================  =========  ===============================================
"""

from __future__ import annotations

import math
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from policy.lowlevel import NodeScoreTable

from .http import CLOSE_REASONS
from .scoring import FILTER_OUTCOMES, PRIORITIZE_OUTCOMES
from .store import SnapshotStore

__all__ = ["DURATION_BUCKETS_S", "VERBS", "REJECTED_OUTCOMES", "HTTP_CODES", "ExtenderMetrics"]

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

#: Outcomes of verb requests answered without reaching the scoring (besides :data:`extender.scoring` 's): ``invalid``
#: (400: malformed), ``too_large`` (413: over limits.maxRequestBytes), ``timeout`` (408: the body did not arrive
#: within limits.bodyTimeoutSeconds).
REJECTED_OUTCOMES: tuple[str, ...] = ("invalid", "too_large", "timeout")

#: Status codes whose ``hrl_extender_http_responses_total`` series exist from the start (others appear when used).
HTTP_CODES: tuple[int, ...] = (200, 400, 404, 405, 408, 413, 431, 500, 503)


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
            "Time from a prioritize request's arrival (its bytes in the socket) to its reply, scored or shed, seconds.",
            buckets=DURATION_BUCKETS_S,
            registry=registry,
        )
        self.prioritize_total = Counter(
            "hrl_extender_prioritize_total",
            "Prioritize requests answered, by outcome (ok; pending_move; neutral_* with the reason scores were "
            "neutral; invalid, too_large, timeout for requests refused before scoring).",
            ["outcome"],
            registry=registry,
        )
        self.filter_duration_seconds = Histogram(
            "hrl_extender_filter_duration_seconds",
            "Time from a filter request's arrival (its bytes in the socket) to its reply, filtered or shed, seconds.",
            buckets=DURATION_BUCKETS_S,
            registry=registry,
        )
        self.filter_total = Counter(
            "hrl_extender_filter_total",
            "Filter requests answered, by outcome (ok, filtered, no_fit, a fail-open reason; invalid, too_large, "
            "timeout for requests refused before filtering).",
            ["outcome"],
            registry=registry,
        )
        self.requests_invalid_total = Counter(
            "hrl_extender_requests_invalid_total",
            "Malformed extender requests answered with HTTP 400, by verb.",
            ["verb"],
            registry=registry,
        )
        self.requests_too_large_total = Counter(
            "hrl_extender_requests_too_large_total",
            "Extender requests whose body exceeded limits.maxRequestBytes, answered with HTTP 413, by verb.",
            ["verb"],
            registry=registry,
        )
        self.requests_in_flight = Gauge(
            "hrl_extender_requests_in_flight",
            "Complete requests not answered yet (waiting for a worker, or behind another request of their connection).",
            registry=registry,
        )
        self.http_requests_reading = Gauge(
            "hrl_extender_http_requests_reading",
            "Requests begun and not complete yet (headers or body being read); they wait for nothing else.",
            registry=registry,
        )
        self.http_responses_total = Counter(
            "hrl_extender_http_responses",
            "Replies sent, by HTTP status code (every route).",
            ["code"],
            registry=registry,
        )
        self.http_connections_total = Counter(
            "hrl_extender_http_connections",
            "HTTP connections accepted (kube-scheduler keeps its connections alive: this grows by a few per "
            "scheduler, not per request).",
            registry=registry,
        )
        self.http_connections_closed_total = Counter(
            "hrl_extender_http_connections_closed",
            "HTTP connections closed, by reason (client; keep_alive_off; idle_timeout, header_timeout, "
            "body_timeout, write_timeout; bad_request, too_large, pipeline_limit; connection_limit, client_limit; "
            "shutdown).",
            ["reason"],
            registry=registry,
        )
        self.http_connections_open = Gauge(
            "hrl_extender_http_connections_open", "HTTP connections open now.", registry=registry
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
        for o in (*PRIORITIZE_OUTCOMES, *REJECTED_OUTCOMES):
            self.prioritize_total.labels(outcome=o)
        for o in (*FILTER_OUTCOMES, *REJECTED_OUTCOMES):
            self.filter_total.labels(outcome=o)
        for c in HTTP_CODES:
            self.http_responses_total.labels(code=str(c))
        for r in CLOSE_REASONS:
            self.http_connections_closed_total.labels(reason=r)
        for v in VERBS:
            self.requests_invalid_total.labels(verb=v)
            self.requests_too_large_total.labels(verb=v)
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

    def bind_table(self, table: NodeScoreTable) -> None:
        """Export ``table``'s counters (hits, misses, vectors, computations, time) at every scrape."""
        self.registry.register(_TableCollector(table))

    def _sum(self, name: str) -> int:
        total = 0.0
        for metric in self.registry.collect():
            for s in metric.samples:
                if s.name == name:
                    total += s.value
        return int(total)

    def prioritize_calls(self) -> int:
        """Prioritize requests answered so far (all outcomes, the rejected ones too)."""
        return self._sum("hrl_extender_prioritize_total")

    def filter_calls(self) -> int:
        """Filter requests answered so far (all outcomes, the rejected ones too)."""
        return self._sum("hrl_extender_filter_total")


class _TableCollector(Collector):
    def __init__(self, table: NodeScoreTable):
        self.table = table

    def collect(self):
        t = self.table
        c = CounterMetricFamily(
            "hrl_extender_score_table_lookups",
            "Lookups of precomputed node-score vectors by prioritize requests: hit (gathered) or miss (scored "
            "directly).",
            labels=["result"],
        )
        c.add_metric(["hit"], t.hits)
        c.add_metric(["miss"], t.misses)
        yield c
        yield GaugeMetricFamily(
            "hrl_extender_score_table_vectors", "Node-score vectors held for the current snapshot.", value=len(t)
        )
        yield CounterMetricFamily(
            "hrl_extender_score_table_computed",
            "Node-score vectors computed off the request path.",
            value=t.computed,
        )
        yield CounterMetricFamily(
            "hrl_extender_score_table_warm_seconds",
            "Time spent computing node-score vectors off the request path, seconds.",
            value=t.warm_seconds,
        )

    def describe(self):
        return []
