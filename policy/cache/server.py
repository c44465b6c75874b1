"""The gRPC embedding cache server (``hrl-policy cache serve``): :class:`CacheServer` over an
:class:`~policy.cache.memory.InMemoryEmbeddingCache` and a :class:`~policy.cache.scoretable.ScoreTableHub` (the
node-score table the extender publishes and the kube-scheduler plugin watches), with ``grpc.health.v1`` health
checking."""

from __future__ import annotations

import logging
import time
from concurrent import futures
from typing import Any

from prometheus_client import CollectorRegistry

from .codec import entry_to_pb, intent_to_pb, matrix_from_pb, pb_modules, pending_moves_from_pb
from .memory import InMemoryEmbeddingCache
from .metrics import CacheMetrics
from .records import MAX_MESSAGE_BYTES
from .scoretable import ScoreTableHub, WatchersExhausted

__all__ = ["CacheServer", "SERVICE_NAME"]

log = logging.getLogger(__name__)


#: The gRPC service's full name (also a health-check service name).
SERVICE_NAME = "hrlscheduler.embeddings.v1.EmbeddingCache"


# ---- gRPC: server ----------------------------------------------------------------------------------------------


def _timed(grpc, metrics: CacheMetrics | None, method: str, fn):
    """A unary handler: ``fn(request)``, a ``ValueError`` answered INVALID_ARGUMENT, anything else INTERNAL; counted
    and timed by method and outcome."""

    def handler(request, context):
        t0 = time.perf_counter()
        outcome = "ok"
        try:
            return fn(request)
        except ValueError as exc:
            outcome = "invalid"
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, " ".join(str(exc).split()))
        except Exception as exc:
            outcome = "error"
            log.exception("cache %s failed", method)
            context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")
        finally:
            if metrics is not None:
                metrics.requests.labels(method=method, outcome=outcome).inc()
                metrics.request_duration.labels(method=method).observe(time.perf_counter() - t0)

    return handler


def _embedding_handlers(cache: InMemoryEmbeddingCache, pb2) -> dict:
    """Get, Put, GetIntent, PutIntent over ``cache`` (request message → response message)."""

    def get(req):
        r = cache.get(req.fingerprint, int(req.known_version))
        if r.not_modified:
            return pb2.GetResponse(found=True, not_modified=True)
        if r.entry is None:
            return pb2.GetResponse(found=False)
        return pb2.GetResponse(found=True, entry=entry_to_pb(pb2, r.entry))

    def put(req):
        e = cache.put(
            req.fingerprint,
            tuple(req.services),
            matrix_from_pb(req.embeddings),
            encoder_version=req.encoder_version,
            timestamp_s=req.timestamp_s,
        )
        return pb2.PutResponse(version=e.version, stored_at_s=e.stored_at_s)

    def get_intent(req):
        r = cache.get_intent(int(req.known_version))
        if r.not_modified:
            return pb2.GetIntentResponse(found=True, not_modified=True)
        if r.entry is None:
            return pb2.GetIntentResponse(found=False)
        return pb2.GetIntentResponse(found=True, intent=intent_to_pb(pb2, r.entry))

    def put_intent(req):
        it = cache.put_intent(
            tuple(req.values),
            tuple(req.names),
            source=req.source,
            timestamp_s=req.timestamp_s,
            pending_moves=pending_moves_from_pb(req.pending_moves),
        )
        return pb2.PutIntentResponse(version=it.version, stored_at_s=it.stored_at_s)

    return {"Get": get, "Put": put, "GetIntent": get_intent, "PutIntent": put_intent}


def _score_table_handlers(grpc, hub: ScoreTableHub, metrics: CacheMetrics | None, pb2) -> tuple[dict, Any]:
    """``({PublishScoreTable, TouchScoreTable}: unary request → response, the WatchScoreTable stream handler)``."""

    def publish_table(req):
        version, watchers = hub.publish(req.table)
        if metrics is not None:
            metrics.puts.labels(kind="score_table").inc()
            metrics.score_table_generation.set(req.table.generation)
            metrics.score_table_bytes.set(req.table.ByteSize())
        return pb2.PublishScoreTableResponse(version=version, watchers=watchers)

    def touch_table(req):
        return pb2.TouchScoreTableResponse(found=hub.touch(int(req.generation), float(req.snapshot_age_s)))

    def watch_table(request, context):
        context.add_callback(hub.wake)  # a watcher that leaves frees its thread at once
        who = request.watcher or context.peer()
        log.info("score-table watch opened by %s", who)
        outcome = "ok"
        try:
            yield from hub.watch(pb2, int(request.known_generation), context.is_active)
        except WatchersExhausted as exc:
            outcome = "exhausted"
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
        finally:
            if metrics is not None:
                metrics.requests.labels(method="WatchScoreTable", outcome=outcome).inc()
            log.info("score-table watch by %s ended (%s)", who, outcome)

    return {"PublishScoreTable": publish_table, "TouchScoreTable": touch_table}, watch_table


def _servicer(cache: InMemoryEmbeddingCache, metrics: CacheMetrics | None, hub: ScoreTableHub):
    import grpc

    pb2, pb2_grpc = pb_modules()
    tables, watch_table = _score_table_handlers(grpc, hub, metrics, pb2)
    unary = {**_embedding_handlers(cache, pb2), **tables}
    methods = {name: staticmethod(_timed(grpc, metrics, name, fn)) for name, fn in unary.items()}
    methods["WatchScoreTable"] = staticmethod(watch_table)
    return type("Servicer", (pb2_grpc.EmbeddingCacheServicer,), methods)()


class CacheServer:
    """The gRPC embedding cache server (``hrl-policy cache serve``); a context manager.

    ``address``: ``host:port`` to bind (port 0: any free port; :attr:`port` / :attr:`address` are real once
    started). ``cache``: the store (default: a new :class:`InMemoryEmbeddingCache` with ``max_entries``).
    ``registry``: where :class:`CacheMetrics` go (default: a new one), with the usual gRPC server metrics of
    py-grpc-prometheus (the names of go-grpc-prometheus: ``grpc_server_started_total``,
    ``grpc_server_handled_total{grpc_type,grpc_service,grpc_method,grpc_code}``, ``grpc_server_handling_seconds``,
    ``grpc_server_msg_received_total``, ``grpc_server_msg_sent_total``). Serves ``grpc.health.v1`` with
    SERVING for ``""`` and :data:`SERVICE_NAME` from :meth:`start` until :meth:`stop`. Raises ``OSError``
    from :meth:`start` when the address cannot be bound.

    ``max_watchers``: score-table watch streams served at once (each holds one of the ``max_workers`` threads while
    open, so it must leave some for the unary calls: 1 <= max_watchers < max_workers); ``heartbeat_s``: a watch
    stream with nothing new sends a heartbeat this often. Raises ``ValueError`` for a bad combination.
    """

    def __init__(
        self,
        address: str = "127.0.0.1:0",
        cache: InMemoryEmbeddingCache | None = None,
        registry: CollectorRegistry | None = None,
        max_entries: int = 64,
        max_workers: int = 8,
        max_watchers: int = 4,
        heartbeat_s: float = 2.0,
    ):
        if not 1 <= max_watchers < max_workers:
            raise ValueError(
                f"max_watchers: expected 1 <= max_watchers < max_workers ({max_workers}), got {max_watchers}"
            )
        self.registry = registry if registry is not None else CollectorRegistry()
        self.metrics = CacheMetrics(self.registry)
        from py_grpc_prometheus.prometheus_server_interceptor import PromServerInterceptor

        self._grpc_metrics = PromServerInterceptor(enable_handling_time_histogram=True, registry=self.registry)
        if cache is None:
            cache = InMemoryEmbeddingCache(max_entries, metrics=self.metrics)
        elif cache.metrics is None:
            cache.metrics = self.metrics
            self.metrics.entries.set_function(lambda: float(len(cache)))
        self.cache = cache
        metrics = self.metrics
        self.score_tables = ScoreTableHub(
            heartbeat_s, max_watchers, on_event=lambda kind: metrics.score_table_events.labels(kind=kind).inc()
        )
        metrics.score_table_watchers.set_function(lambda: float(self.score_tables.watchers))
        self.requested_address = address
        self.max_workers = max_workers
        self.port = 0
        self._server = None
        self._health = None

    @property
    def address(self) -> str:
        host = self.requested_address.rsplit(":", 1)[0]
        return f"{host}:{self.port}"

    def start(self) -> CacheServer:
        import grpc
        from grpc_health.v1 import health, health_pb2, health_pb2_grpc

        _pb2, pb2_grpc = pb_modules()
        opts = [
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", 0),
        ]
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix="hrl-cache"),
            options=opts,
            interceptors=[self._grpc_metrics],
        )
        pb2_grpc.add_EmbeddingCacheServicer_to_server(_servicer(self.cache, self.metrics, self.score_tables), server)
        hs = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(hs, server)
        try:
            port = server.add_insecure_port(self.requested_address)
        except RuntimeError as exc:
            raise OSError(f"cannot listen on {self.requested_address}: {exc}") from None
        if port == 0:
            raise OSError(f"cannot listen on {self.requested_address} (address in use or invalid)")
        server.start()
        for name in ("", SERVICE_NAME):
            hs.set(name, health_pb2.HealthCheckResponse.SERVING)
        self.port, self._server, self._health = port, server, hs
        return self

    def stop(self, grace_s: float | None = 0.5) -> None:
        """Report NOT_SERVING, end the score-table watch streams, then stop (in-flight calls get ``grace_s``
        seconds). Idempotent."""
        if self._health is not None:
            self._health.enter_graceful_shutdown()
        self.score_tables.close()
        if self._server is not None:
            self._server.stop(grace_s).wait()
        self._server = None
        self._health = None

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until the server stops (or ``timeout_s``); True when it stopped."""
        return self._server.wait_for_termination(timeout_s) if self._server is not None else True

    def __enter__(self) -> CacheServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
