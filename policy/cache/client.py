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
