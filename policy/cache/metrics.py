"""Prometheus metrics of the embedding cache: the gRPC server's (:class:`CacheMetrics`), a client's
(:class:`CacheClientMetrics`) and the graph encoder's (:class:`EncoderMetrics`), each on a registry passed in."""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["CacheMetrics", "CacheClientMetrics", "EncoderMetrics", "GRPC_BUCKETS_S"]


#: Histogram buckets (seconds) for gRPC calls: 100 µs to 5 s.
GRPC_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


# ---- metrics ------------------------------------------------------------------------------------------------


class CacheMetrics:
    """Server-side metrics, registered in ``registry``:

    ``hrl_cache_grpc_request_duration_seconds{method}`` (histogram), ``hrl_cache_grpc_requests_total{method,
    outcome}`` (ok, invalid, error), ``hrl_cache_lookups_total{kind,result}`` (kind embeddings|intent;
    result hit|miss|not_modified), ``hrl_cache_entries`` (gauge), ``hrl_cache_puts_total{kind}``,
    ``hrl_cache_fingerprint_changes_total`` (puts whose fingerprint differs from the latest one); the score table:
    ``hrl_cache_score_table_watchers`` (watch streams open), ``hrl_cache_score_table_events_total{kind}`` (table,
    heartbeat: messages sent to watchers), ``hrl_cache_score_table_generation``, ``hrl_cache_score_table_bytes`` (of
    the newest table)."""

    METHODS = ("Get", "Put", "GetIntent", "PutIntent", "PublishScoreTable", "TouchScoreTable", "WatchScoreTable")

    def __init__(self, registry: CollectorRegistry):
        self.registry = registry
        self.request_duration = Histogram(
            "hrl_cache_grpc_request_duration_seconds",
            "Time to serve one cache gRPC call, seconds.",
            ["method"],
            buckets=GRPC_BUCKETS_S,
            registry=registry,
        )
        self.requests = Counter(
            "hrl_cache_grpc_requests_total",
            "Cache gRPC calls by method and outcome.",
            ["method", "outcome"],
            registry=registry,
        )
        self.lookups = Counter(
            "hrl_cache_lookups_total",
            "Cache lookups by kind and result (hit, miss, not_modified).",
            ["kind", "result"],
            registry=registry,
        )
        self.entries = Gauge(
            "hrl_cache_entries", "Embedding entries held (one per graph fingerprint).", registry=registry
        )
        self.puts = Counter(
            "hrl_cache_puts_total", "Entries stored, by kind (embeddings, intent).", ["kind"], registry=registry
        )
        self.fingerprint_changes = Counter(
            "hrl_cache_fingerprint_changes_total",
            "Embedding puts whose graph fingerprint differs from the latest one.",
            registry=registry,
        )
        self.score_table_watchers = Gauge(
            "hrl_cache_score_table_watchers", "Score-table watch streams open.", registry=registry
        )
        self.score_table_events = Counter(
            "hrl_cache_score_table_events_total",
            "Score-table messages sent to watchers, by kind (table, heartbeat).",
            ["kind"],
            registry=registry,
        )
        self.score_table_generation = Gauge(
            "hrl_cache_score_table_generation",
            "The producer's generation of the newest score table.",
            registry=registry,
        )
        self.score_table_bytes = Gauge(
            "hrl_cache_score_table_bytes", "Size of the newest score table message, bytes.", registry=registry
        )
        for m in self.METHODS:
            if m != "WatchScoreTable":
                self.request_duration.labels(method=m)
            for o in ("ok", "invalid", "error") if m != "WatchScoreTable" else ("ok", "exhausted"):
                self.requests.labels(method=m, outcome=o)
        for k in ("embeddings", "intent", "score_table"):
            self.puts.labels(kind=k)
        for k in ("embeddings", "intent"):
            for r in ("hit", "miss", "not_modified"):
                self.lookups.labels(kind=k, result=r)
        for k in ("table", "heartbeat"):
            self.score_table_events.labels(kind=k)


class CacheClientMetrics:
    """Client-side metrics (extender, descheduler), registered in ``registry``:

    ``hrl_cache_client_request_duration_seconds{method}`` (histogram), ``hrl_cache_client_requests_total{method,
    outcome}`` (ok, miss, not_modified, unavailable, timeout, invalid), ``hrl_cache_refresh_total{kind,outcome}``
    (ok, not_modified, missing, error, stale), ``hrl_cache_copy_age_seconds{kind}`` (age of the local copy's
    producer timestamp; NaN without a copy)."""

    OUTCOMES = ("ok", "miss", "not_modified", "unavailable", "timeout", "invalid")
    REFRESH_OUTCOMES = ("ok", "not_modified", "missing", "error", "stale")

    def __init__(self, registry: CollectorRegistry):
        self.registry = registry
        self.request_duration = Histogram(
            "hrl_cache_client_request_duration_seconds",
            "Round trip of one cache gRPC call as the client sees it, seconds.",
            ["method"],
            buckets=GRPC_BUCKETS_S,
            registry=registry,
        )
        self.requests = Counter(
            "hrl_cache_client_requests_total",
            "Cache gRPC calls made, by method and outcome.",
            ["method", "outcome"],
            registry=registry,
        )
        self.refresh = Counter(
            "hrl_cache_refresh_total",
            "Background refreshes of the local copy, by kind (embeddings, intent) and outcome.",
            ["kind", "outcome"],
            registry=registry,
        )
        self.copy_age = Gauge(
            "hrl_cache_copy_age_seconds",
            "Age of the local copy (since its producer computed it), seconds; NaN without a copy.",
            ["kind"],
            registry=registry,
        )
        for m in CacheMetrics.METHODS:
            self.request_duration.labels(method=m)
            for o in self.OUTCOMES:
                self.requests.labels(method=m, outcome=o)
        for k in ("embeddings", "intent"):
            self.copy_age.labels(kind=k).set(math.nan)
            for o in self.REFRESH_OUTCOMES:
                self.refresh.labels(kind=k, outcome=o)


class EncoderMetrics:
    """``hrl_encoder_duration_seconds`` (histogram: featurize + encode one graph) and
    ``hrl_encoder_services`` (gauge: services in the last encoded graph)."""

    def __init__(self, registry: CollectorRegistry):
        self.duration = Histogram(
            "hrl_encoder_duration_seconds",
            "Time to featurize and encode one call graph, seconds.",
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=registry,
        )
        self.services = Gauge("hrl_encoder_services", "Services in the last encoded graph.", registry=registry)

    def observe(self, duration_s: float, services: int) -> None:
        self.duration.observe(duration_s)
        self.services.set(services)
