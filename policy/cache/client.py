"""The gRPC embedding cache client: :class:`GrpcEmbeddingCache` implements
:class:`~policy.cache.memory.EmbeddingCache` over the network, with deadlines and typed errors
(:class:`CacheUnavailable`, :class:`CacheTimeout`)."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from policy.intent import PendingMove

from .codec import entry_from_pb, intent_from_pb, matrix_to_pb, pb_modules, pending_moves_to_pb
from .metrics import CacheClientMetrics
from .records import (
    MAX_MESSAGE_BYTES,
    EmbeddingEntry,
    IntentEntry,
    Lookup,
    check_intent,
    check_pending_moves,
    check_put,
)
from .scoretable import ScoreTable, table_from_pb, table_to_pb

__all__ = ["GrpcEmbeddingCache", "CacheUnavailable", "CacheTimeout"]


# ---- gRPC: client ----------------------------------------------------------------------------------------------


class CacheUnavailable(ConnectionError):
    """The cache server could not answer (unreachable, shutting down, or an internal error); one line."""


class CacheTimeout(CacheUnavailable):
    """The cache server did not answer within the client's timeout."""


class GrpcEmbeddingCache:
    """An :class:`EmbeddingCache` client over gRPC, with a deadline of ``timeout_s`` seconds (> 0) per call.

    ``address``: ``host:port`` of ``hrl-policy cache serve``. ``metrics``: a :class:`CacheClientMetrics`.
    The channel connects lazily and reconnects by itself after the server comes back. Raises
    :class:`CacheTimeout` / :class:`CacheUnavailable` when a call fails for lack of a server and
    ``ValueError`` when the server refuses the input (INVALID_ARGUMENT). Thread-safe.
    """

    def __init__(self, address: str, timeout_s: float = 1.0, metrics: CacheClientMetrics | None = None):
        import grpc

        if not timeout_s > 0:
            raise ValueError(f"timeout_s: must be > 0, got {timeout_s!r}")
        if not address or ":" not in address:
            raise ValueError(f"address: expected host:port, got {address!r}")
        pb2, pb2_grpc = pb_modules()
        self._pb2 = pb2
        self.address = address
        self.timeout_s = float(timeout_s)
        self.metrics = metrics
        self._channel = grpc.insecure_channel(
            address,
            options=[
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.initial_reconnect_backoff_ms", 200),
                ("grpc.max_reconnect_backoff_ms", 2000),
            ],
        )
        self._stub = pb2_grpc.EmbeddingCacheStub(self._channel)

    def _call(self, method: str, request, miss=None):
        import grpc

        t0 = time.perf_counter()
        outcome = "ok"
        try:
            resp = getattr(self._stub, method)(request, timeout=self.timeout_s)
            if miss is not None:
                outcome = miss(resp)
            return resp
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            detail = exc.details() if hasattr(exc, "details") else str(exc)
            if code == grpc.StatusCode.INVALID_ARGUMENT:
                outcome = "invalid"
                raise ValueError(detail) from None
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                outcome = "timeout"
                raise CacheTimeout(f"cache {self.address}: {method}: no answer within {self.timeout_s:g} s") from None
            outcome = "unavailable"
            name = code.name if code is not None else "ERROR"
            raise CacheUnavailable(f"cache {self.address}: {method}: {name}: {' '.join(str(detail).split())}") from None
        finally:
            if self.metrics is not None:
                self.metrics.requests.labels(method=method, outcome=outcome).inc()
                self.metrics.request_duration.labels(method=method).observe(time.perf_counter() - t0)

    @staticmethod
    def _outcome(resp) -> str:
        return "not_modified" if resp.not_modified else ("ok" if resp.found else "miss")

    def get(self, fingerprint: str = "", known_version: int = 0) -> Lookup:
        r = self._call("Get", self._pb2.GetRequest(fingerprint=fingerprint, known_version=known_version), self._outcome)
        if r.not_modified:
            return Lookup(None, True)
        return Lookup(entry_from_pb(r.entry) if r.found else None)

    def put(
        self,
        fingerprint: str,
        services: Sequence[str],
        matrix: np.ndarray,
        *,
        encoder_version: str = "",
        timestamp_s: float = 0.0,
    ) -> EmbeddingEntry:
        names, m = check_put(fingerprint, services, matrix)
        r = self._call(
            "Put",
            self._pb2.PutRequest(
                fingerprint=fingerprint,
                services=list(names),
                embeddings=matrix_to_pb(self._pb2, m),
                timestamp_s=float(timestamp_s),
                encoder_version=encoder_version,
            ),
        )
        return EmbeddingEntry(
            fingerprint,
            names,
            m,
            int(r.version),
            float(timestamp_s) or float(r.stored_at_s),
            encoder_version,
            float(r.stored_at_s),
        )

    def get_intent(self, known_version: int = 0) -> Lookup:
        r = self._call("GetIntent", self._pb2.GetIntentRequest(known_version=known_version), self._outcome)
        if r.not_modified:
            return Lookup(None, True)
        return Lookup(intent_from_pb(r.intent) if r.found else None)

    def put_intent(
        self,
        values: Sequence[float],
        names: Sequence[str] = (),
        *,
        source: str = "",
        timestamp_s: float = 0.0,
        pending_moves: Sequence[PendingMove] = (),
    ) -> IntentEntry:
        vals, nm = check_intent(values, names)
        moves = check_pending_moves(pending_moves)
        r = self._call(
            "PutIntent",
            self._pb2.PutIntentRequest(
                values=list(vals),
                names=list(nm),
                source=source,
                timestamp_s=float(timestamp_s),
                pending_moves=pending_moves_to_pb(self._pb2, moves),
            ),
        )
        return IntentEntry(
            vals, nm, int(r.version), float(timestamp_s) or float(r.stored_at_s), source, float(r.stored_at_s), moves
        )

    def publish_score_table(self, table: ScoreTable) -> tuple[int, int]:
        """Store ``table`` as the cache's newest score table (the watchers get it at once). Returns ``(version,
        watchers)``: the cache's version of it and the watch streams open. Raises ``ValueError`` when the cache
        refuses it (one line naming the field), :class:`CacheUnavailable` / :class:`CacheTimeout`."""
        r = self._call("PublishScoreTable", self._pb2.PublishScoreTableRequest(table=table_to_pb(self._pb2, table)))
        return int(r.version), int(r.watchers)

    def touch_score_table(self, generation: int, snapshot_age_s: float) -> bool:
        """Heartbeat: the snapshot of table ``generation`` is ``snapshot_age_s`` seconds old now. False when the
        cache holds no table of that generation (publish it again: the cache restarted, or another producer
        published since)."""
        r = self._call(
            "TouchScoreTable",
            self._pb2.TouchScoreTableRequest(generation=int(generation), snapshot_age_s=float(snapshot_age_s)),
        )
        return bool(r.found)

    def watch_score_table(self, known_generation: int = 0, watcher: str = ""):
        """The cache's score-table stream, as the plugin reads it: an iterator of ``("table", ScoreTable)`` and
        ``("heartbeat", generation, snapshot_age_s)``, without a deadline; ``.cancel()`` on the returned object ends
        it. Raises ``grpc.RpcError`` from the iteration when the stream breaks (``RESOURCE_EXHAUSTED`` when the
        cache serves as many watchers as it allows)."""
        call = self._stub.WatchScoreTable(
            self._pb2.WatchScoreTableRequest(known_generation=int(known_generation), watcher=watcher)
        )
        return _TableStream(call)

    def health(self, service: str = "") -> str:
        """The server's ``grpc.health.v1`` status name for ``service`` (``SERVING``, ``NOT_SERVING``, ...);
        raises :class:`CacheUnavailable` / :class:`CacheTimeout` like the other calls."""
        import grpc
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        try:
            r = health_pb2_grpc.HealthStub(self._channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=self.timeout_s
            )
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise CacheTimeout(f"cache {self.address}: health: no answer within {self.timeout_s:g} s") from None
            raise CacheUnavailable(f"cache {self.address}: health: {exc.code().name}: {exc.details()}") from None
        return health_pb2.HealthCheckResponse.ServingStatus.Name(r.status)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> GrpcEmbeddingCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _TableStream:
    """Iterator over a WatchScoreTable call (see :meth:`GrpcEmbeddingCache.watch_score_table`)."""

    def __init__(self, call):
        self._call = call

    def __iter__(self):
        return self

    def __next__(self):
        ev = next(self._call)
        if ev.WhichOneof("event") == "table":
            return ("table", table_from_pb(ev.table))
        return ("heartbeat", int(ev.heartbeat.generation), float(ev.heartbeat.snapshot_age_s))

    def cancel(self) -> None:
        self._call.cancel()
