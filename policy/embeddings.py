"""The topology embedding cache: per-service embeddings keyed by the call graph's fingerprint, and the
descheduler's current intent, shared by the extender and the descheduler (DESIGN.md section 2).

- :func:`fingerprint`: a stable hash of a graph's **structure** — its services and its caller → callee
  pairs. Same structure → same fingerprint; adding, removing or renaming a service or an edge → a new one.
  Rates, latencies, error rates, multiplicities and the parallel flag do **not** change it: they move with
  every scrape, and a key that changed with them would make every reader miss. A fingerprint says which
  rows (services) an embedding matrix has; the embeddings under it are refreshed (a new ``version``) as the
  measurements move, and readers judge freshness by ``timestamp_s``.
- :class:`EmbeddingCache`: the protocol (get/put embeddings, get/put intent), implemented in process by
  :class:`InMemoryEmbeddingCache` (simulator, tests, and the server's store) and over gRPC by
  :class:`GrpcEmbeddingCache` (client) talking to :class:`CacheServer` (``hrl-policy cache serve``; the
  service is ``policy/proto/embeddings.proto``, health through ``grpc.health.v1``).
- :class:`CacheRefresher`: a background thread keeping a local copy (the extender's): a request never waits
  on the network, and a dead cache server leaves the last copy in place until it is too old to use.

Versions are assigned by the cache (one counter per server, increasing with every put), timestamps are unix
seconds. A server restarts empty, with versions from 1: readers compare versions for equality, not order.
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol, runtime_checkable

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from .state import ServiceGraph

__all__ = [
    "fingerprint", "EmbeddingEntry", "IntentEntry", "Lookup", "EmbeddingCache", "InMemoryEmbeddingCache",
    "CacheMetrics", "CacheClientMetrics", "EncoderMetrics", "CacheServer", "GrpcEmbeddingCache",
    "CacheUnavailable", "CacheTimeout", "CacheRefresher", "SERVICE_NAME", "MAX_MESSAGE_BYTES",
    "GRPC_BUCKETS_S",
]

log = logging.getLogger(__name__)

#: The gRPC service's full name (also a health-check service name).
SERVICE_NAME = "hrlscheduler.embeddings.v1.EmbeddingCache"
#: gRPC message size limit, both directions (64 MiB: 500,000 services × 32 float32 dims).
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
_MAX_DIM = 4096
_MAX_FP = 128

#: Histogram buckets (seconds) for gRPC calls: 100 µs to 5 s.
GRPC_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


# ---- fingerprint ----------------------------------------------------------------------------------------

def fingerprint(graph: ServiceGraph) -> str:
    """The structural fingerprint of ``graph``: 32 lowercase hex digits (128 bits of SHA-256) over the sorted
    services and the sorted (caller, callee) pairs. See the module docstring for what changes it."""
    h = hashlib.sha256()
    h.update(b"hrl-graph-v1\0")
    for s in sorted(set(graph.services)):
        h.update(b"s\0" + s.encode("utf-8") + b"\0")
    for a, b in sorted({(e.caller, e.callee) for e in graph.edges}):
        h.update(b"e\0" + a.encode("utf-8") + b"\0" + b.encode("utf-8") + b"\0")
    return h.hexdigest()[:32]


# ---- records ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class EmbeddingEntry:
    """Embeddings of one graph: ``services`` (N,) row names; ``matrix`` (N, D) float32, read-only;
    ``version`` (assigned by the cache, >= 1; 0 before it is stored); ``timestamp_s`` (unix s, when the
    producer computed them); ``encoder_version`` (the encoder bundle's policy_version); ``stored_at_s``."""

    fingerprint: str
    services: tuple[str, ...]
    matrix: np.ndarray = field(repr=False)
    version: int = 0
    timestamp_s: float = 0.0
    encoder_version: str = ""
    stored_at_s: float = 0.0
    _rows: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        m = np.array(self.matrix, dtype=np.float32, copy=True)
        m.setflags(write=False)
        object.__setattr__(self, "matrix", m)
        object.__setattr__(self, "services", tuple(self.services))
        object.__setattr__(self, "_rows", {s: i for i, s in enumerate(self.services)})

    @property
    def dim(self) -> int:
        """D, the embedding width."""
        return int(self.matrix.shape[1]) if self.matrix.ndim == 2 else 0

    def row(self, service: str) -> np.ndarray | None:
        """(D,) float32 embedding of ``service``, ``None`` when the entry lacks it."""
        i = self._rows.get(service)
        return None if i is None else self.matrix[i]

    def age_s(self, now_s: float) -> float:
        """Seconds since the producer computed these embeddings (>= 0)."""
        return max(0.0, now_s - self.timestamp_s)


@dataclass(frozen=True)
class IntentEntry:
    """The high-level intent: ``values`` (:data:`policy.lowlevel.INTENT_SPEC` order), their ``names``
    (empty or one per value), ``version`` (cache-assigned), ``timestamp_s`` (unix s, when decided),
    ``source`` (the writer), ``stored_at_s``."""

    values: tuple[float, ...]
    names: tuple[str, ...] = ()
    version: int = 0
    timestamp_s: float = 0.0
    source: str = ""
    stored_at_s: float = 0.0

    def age_s(self, now_s: float) -> float:
        return max(0.0, now_s - self.timestamp_s)


class Lookup(NamedTuple):
    """The answer to a get: ``entry`` (``None`` when absent or not modified) and ``not_modified`` (the
    caller's ``known_version`` is still current)."""

    entry: EmbeddingEntry | IntentEntry | None
    not_modified: bool = False

    @property
    def found(self) -> bool:
        return self.entry is not None or self.not_modified


def _check_put(fp: str, services: Sequence[str], matrix: np.ndarray) -> tuple[tuple[str, ...], np.ndarray]:
    if not isinstance(fp, str) or not fp or len(fp) > _MAX_FP or not fp.isprintable() or " " in fp:
        raise ValueError(f"fingerprint: expected 1..{_MAX_FP} printable characters without spaces, got {fp!r}")
    names = tuple(services)
    seen: set[str] = set()
    for i, s in enumerate(names):
        if not isinstance(s, str) or not s:
            raise ValueError(f"services[{i}]: expected a non-empty name, got {s!r}")
        if s in seen:
            raise ValueError(f"services[{i}]: {s!r} appears twice")
        seen.add(s)
    m = np.asarray(matrix)
    if m.ndim != 2 or m.shape[0] != len(names):
        raise ValueError(f"embeddings: expected a ({len(names)}, D) matrix for {len(names)} services, "
                         f"got shape {m.shape}")
    if not 1 <= m.shape[1] <= _MAX_DIM and len(names):
        raise ValueError(f"embeddings: width D must be 1..{_MAX_DIM}, got {m.shape[1]}")
    if m.dtype.kind not in "fiu":
        raise ValueError(f"embeddings: expected numbers, got dtype {m.dtype}")
    m = m.astype(np.float32)
    if not np.all(np.isfinite(m)):
        raise ValueError("embeddings: contain NaN or infinity")
    return names, m


def _check_intent(values: Sequence[float], names: Sequence[str]) -> tuple[tuple[float, ...], tuple[str, ...]]:
    vals = []
    for i, v in enumerate(values):
        try:
            f = float(v)
        except (TypeError, ValueError):
            raise ValueError(f"intent.values[{i}]: expected a number, got {v!r}") from None
        if not math.isfinite(f):
            raise ValueError(f"intent.values[{i}]: expected a finite number, got {v!r}")
        vals.append(f)
    nm = tuple(str(n) for n in names)
    if nm and len(nm) != len(vals):
        raise ValueError(f"intent.names: expected {len(vals)} names (one per value) or none, got {len(nm)}")
    return tuple(vals), nm


# ---- metrics ------------------------------------------------------------------------------------------------

class CacheMetrics:
    """Server-side metrics, registered in ``registry``:

    ``hrl_cache_grpc_request_duration_seconds{method}`` (histogram), ``hrl_cache_grpc_requests_total{method,
    outcome}`` (ok, invalid, error), ``hrl_cache_lookups_total{kind,result}`` (kind embeddings|intent;
    result hit|miss|not_modified), ``hrl_cache_entries`` (gauge), ``hrl_cache_puts_total{kind}``,
    ``hrl_cache_fingerprint_changes_total`` (puts whose fingerprint differs from the latest one)."""

    METHODS = ("Get", "Put", "GetIntent", "PutIntent")

    def __init__(self, registry: CollectorRegistry):
        self.registry = registry
        self.request_duration = Histogram("hrl_cache_grpc_request_duration_seconds",
                                          "Time to serve one cache gRPC call, seconds.", ["method"],
                                          buckets=GRPC_BUCKETS_S, registry=registry)
        self.requests = Counter("hrl_cache_grpc_requests_total", "Cache gRPC calls by method and outcome.",
                                ["method", "outcome"], registry=registry)
        self.lookups = Counter("hrl_cache_lookups_total", "Cache lookups by kind and result (hit, miss, "
                               "not_modified).", ["kind", "result"], registry=registry)
        self.entries = Gauge("hrl_cache_entries", "Embedding entries held (one per graph fingerprint).",
                             registry=registry)
        self.puts = Counter("hrl_cache_puts_total", "Entries stored, by kind (embeddings, intent).", ["kind"],
                            registry=registry)
        self.fingerprint_changes = Counter("hrl_cache_fingerprint_changes_total",
                                           "Embedding puts whose graph fingerprint differs from the latest one.",
                                           registry=registry)
        for m in self.METHODS:
            self.request_duration.labels(method=m)
            for o in ("ok", "invalid", "error"):
                self.requests.labels(method=m, outcome=o)
        for k in ("embeddings", "intent"):
            self.puts.labels(kind=k)
            for r in ("hit", "miss", "not_modified"):
                self.lookups.labels(kind=k, result=r)


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
        self.request_duration = Histogram("hrl_cache_client_request_duration_seconds",
                                          "Round trip of one cache gRPC call as the client sees it, seconds.",
                                          ["method"], buckets=GRPC_BUCKETS_S, registry=registry)
        self.requests = Counter("hrl_cache_client_requests_total", "Cache gRPC calls made, by method and outcome.",
                                ["method", "outcome"], registry=registry)
        self.refresh = Counter("hrl_cache_refresh_total", "Background refreshes of the local copy, by kind "
                               "(embeddings, intent) and outcome.", ["kind", "outcome"], registry=registry)
        self.copy_age = Gauge("hrl_cache_copy_age_seconds", "Age of the local copy (since its producer computed "
                              "it), seconds; NaN without a copy.", ["kind"], registry=registry)
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
        self.duration = Histogram("hrl_encoder_duration_seconds", "Time to featurize and encode one call graph, "
                                  "seconds.", buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
                                  registry=registry)
        self.services = Gauge("hrl_encoder_services", "Services in the last encoded graph.", registry=registry)

    def observe(self, duration_s: float, services: int) -> None:
        self.duration.observe(duration_s)
        self.services.set(services)


# ---- the protocol and the in-memory cache ---------------------------------------------------------------------

@runtime_checkable
class EmbeddingCache(Protocol):
    """What the extender, the descheduler and the simulator need from a cache (in process or remote).

    ``get(fingerprint="", known_version=0)``: the entry of ``fingerprint`` (empty: the most recently put);
    ``known_version`` equal to the stored version → ``Lookup(None, not_modified=True)``.
    ``put(...)`` stores and returns the stored entry (with its version). ``get_intent`` / ``put_intent``
    likewise for the intent. Implementations raise ``ValueError`` for invalid input, and the remote one
    :class:`CacheUnavailable` when the server cannot be reached in time.
    """

    def get(self, fingerprint: str = "", known_version: int = 0) -> Lookup: ...

    def put(self, fingerprint: str, services: Sequence[str], matrix: np.ndarray, *, encoder_version: str = "",
            timestamp_s: float = 0.0) -> EmbeddingEntry: ...

    def get_intent(self, known_version: int = 0) -> Lookup: ...

    def put_intent(self, values: Sequence[float], names: Sequence[str] = (), *, source: str = "",
                   timestamp_s: float = 0.0) -> IntentEntry: ...


class InMemoryEmbeddingCache:
    """A thread-safe :class:`EmbeddingCache` in process memory, holding the ``max_entries`` (>= 1) most
    recently put fingerprints (least recently put dropped first) and one intent.

    ``clock``: unix seconds (default :func:`time.time`); ``metrics``: a :class:`CacheMetrics` to update.
    """

    def __init__(self, max_entries: int = 64, clock: Callable[[], float] = time.time,
                 metrics: CacheMetrics | None = None):
        if max_entries < 1:
            raise ValueError(f"max_entries: must be >= 1, got {max_entries}")
        self.max_entries = max_entries
        self.clock = clock
        self.metrics = metrics
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, EmbeddingEntry] = OrderedDict()
        self._latest: str = ""
        self._intent: IntentEntry | None = None
        self._version = 0
        if metrics is not None:
            metrics.entries.set_function(lambda: float(len(self._entries)))

    def __len__(self) -> int:
        return len(self._entries)

    def fingerprints(self) -> list[str]:
        """Stored fingerprints, least recently put first."""
        with self._lock:
            return list(self._entries)

    def _count(self, kind: str, result: str) -> None:
        if self.metrics is not None:
            self.metrics.lookups.labels(kind=kind, result=result).inc()

    def get(self, fingerprint: str = "", known_version: int = 0) -> Lookup:
        with self._lock:
            e = self._entries.get(fingerprint or self._latest)
        if e is None:
            self._count("embeddings", "miss")
            return Lookup(None)
        if known_version and known_version == e.version:
            self._count("embeddings", "not_modified")
            return Lookup(None, True)
        self._count("embeddings", "hit")
        return Lookup(e)

    def put(self, fingerprint: str, services: Sequence[str], matrix: np.ndarray, *, encoder_version: str = "",
            timestamp_s: float = 0.0) -> EmbeddingEntry:
        names, m = _check_put(fingerprint, services, matrix)
        ts = float(timestamp_s)
        if not math.isfinite(ts) or ts < 0:
            raise ValueError(f"timestamp_s: expected unix seconds >= 0, got {timestamp_s!r}")
        now = self.clock()
        with self._lock:
            self._version += 1
            e = EmbeddingEntry(fingerprint, names, m, self._version, ts or now, str(encoder_version), now)
            changed = bool(self._latest) and self._latest != fingerprint
            self._entries.pop(fingerprint, None)
            self._entries[fingerprint] = e
            self._latest = fingerprint
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        if self.metrics is not None:
            self.metrics.puts.labels(kind="embeddings").inc()
            if changed:
                self.metrics.fingerprint_changes.inc()
        return e

    def get_intent(self, known_version: int = 0) -> Lookup:
        it = self._intent
        if it is None:
            self._count("intent", "miss")
            return Lookup(None)
        if known_version and known_version == it.version:
            self._count("intent", "not_modified")
            return Lookup(None, True)
        self._count("intent", "hit")
        return Lookup(it)

    def put_intent(self, values: Sequence[float], names: Sequence[str] = (), *, source: str = "",
                   timestamp_s: float = 0.0) -> IntentEntry:
        vals, nm = _check_intent(values, names)
        ts = float(timestamp_s)
        if not math.isfinite(ts) or ts < 0:
            raise ValueError(f"timestamp_s: expected unix seconds >= 0, got {timestamp_s!r}")
        now = self.clock()
        with self._lock:
            self._version += 1
            it = IntentEntry(vals, nm, self._version, ts or now, str(source), now)
            self._intent = it
        if self.metrics is not None:
            self.metrics.puts.labels(kind="intent").inc()
        return it


# ---- gRPC: conversions -----------------------------------------------------------------------------------------

def _pb():
    from .proto import embeddings_pb2, embeddings_pb2_grpc

    return embeddings_pb2, embeddings_pb2_grpc


def _matrix_to_pb(pb2, m: np.ndarray):
    m = np.ascontiguousarray(m, dtype="<f4")
    return pb2.Matrix(rows=m.shape[0], cols=m.shape[1] if m.ndim == 2 else 0, data=m.tobytes())


def _matrix_from_pb(mat) -> np.ndarray:
    rows, cols = int(mat.rows), int(mat.cols)
    if len(mat.data) != rows * cols * 4:
        raise ValueError(f"embeddings: {rows}x{cols} float32 needs {rows * cols * 4} bytes, got {len(mat.data)}")
    return np.frombuffer(mat.data, dtype="<f4").reshape(rows, cols).astype(np.float32)


def _entry_to_pb(pb2, e: EmbeddingEntry):
    return pb2.EmbeddingEntry(fingerprint=e.fingerprint, services=list(e.services),
                              embeddings=_matrix_to_pb(pb2, e.matrix), version=e.version, timestamp_s=e.timestamp_s,
                              encoder_version=e.encoder_version, stored_at_s=e.stored_at_s)


def _entry_from_pb(p) -> EmbeddingEntry:
    return EmbeddingEntry(p.fingerprint, tuple(p.services), _matrix_from_pb(p.embeddings), int(p.version),
                          float(p.timestamp_s), p.encoder_version, float(p.stored_at_s))


def _intent_to_pb(pb2, it: IntentEntry):
    return pb2.Intent(values=list(it.values), names=list(it.names), version=it.version, timestamp_s=it.timestamp_s,
                      source=it.source, stored_at_s=it.stored_at_s)


def _intent_from_pb(p) -> IntentEntry:
    return IntentEntry(tuple(float(v) for v in p.values), tuple(p.names), int(p.version), float(p.timestamp_s),
                       p.source, float(p.stored_at_s))


# ---- gRPC: server ----------------------------------------------------------------------------------------------

def _servicer(cache: InMemoryEmbeddingCache, metrics: CacheMetrics | None):
    import grpc

    pb2, pb2_grpc = _pb()

    def timed(method: str, fn):
        def handler(request, context):
            t0 = time.perf_counter()
            outcome = "ok"
            try:
                return fn(request)
            except ValueError as exc:
                outcome = "invalid"
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, " ".join(str(exc).split()))
            except Exception as exc:  # noqa: BLE001 - reported to the caller as INTERNAL
                outcome = "error"
                log.exception("cache %s failed", method)
                context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")
            finally:
                if metrics is not None:
                    metrics.requests.labels(method=method, outcome=outcome).inc()
                    metrics.request_duration.labels(method=method).observe(time.perf_counter() - t0)
        return handler

    def get(req):
        r = cache.get(req.fingerprint, int(req.known_version))
        if r.not_modified:
            return pb2.GetResponse(found=True, not_modified=True)
        if r.entry is None:
            return pb2.GetResponse(found=False)
        return pb2.GetResponse(found=True, entry=_entry_to_pb(pb2, r.entry))

    def put(req):
        e = cache.put(req.fingerprint, tuple(req.services), _matrix_from_pb(req.embeddings),
                      encoder_version=req.encoder_version, timestamp_s=req.timestamp_s)
        return pb2.PutResponse(version=e.version, stored_at_s=e.stored_at_s)

    def get_intent(req):
        r = cache.get_intent(int(req.known_version))
        if r.not_modified:
            return pb2.GetIntentResponse(found=True, not_modified=True)
        if r.entry is None:
            return pb2.GetIntentResponse(found=False)
        return pb2.GetIntentResponse(found=True, intent=_intent_to_pb(pb2, r.entry))

    def put_intent(req):
        it = cache.put_intent(tuple(req.values), tuple(req.names), source=req.source, timestamp_s=req.timestamp_s)
        return pb2.PutIntentResponse(version=it.version, stored_at_s=it.stored_at_s)

    class Servicer(pb2_grpc.EmbeddingCacheServicer):
        Get = staticmethod(timed("Get", get))
        Put = staticmethod(timed("Put", put))
        GetIntent = staticmethod(timed("GetIntent", get_intent))
        PutIntent = staticmethod(timed("PutIntent", put_intent))

    return Servicer()


class CacheServer:
    """The gRPC embedding cache server (``hrl-policy cache serve``); a context manager.

    ``address``: ``host:port`` to bind (port 0: any free port; :attr:`port` / :attr:`address` are real once
    started). ``cache``: the store (default: a new :class:`InMemoryEmbeddingCache` with ``max_entries``).
    ``registry``: where :class:`CacheMetrics` go (default: a new one). Serves ``grpc.health.v1`` with
    SERVING for ``""`` and :data:`SERVICE_NAME` from :meth:`start` until :meth:`stop`. Raises ``OSError``
    from :meth:`start` when the address cannot be bound.
    """

    def __init__(self, address: str = "127.0.0.1:0", cache: InMemoryEmbeddingCache | None = None,
                 registry: CollectorRegistry | None = None, max_entries: int = 64, max_workers: int = 8):
        self.registry = registry if registry is not None else CollectorRegistry()
        self.metrics = CacheMetrics(self.registry)
        if cache is None:
            cache = InMemoryEmbeddingCache(max_entries, metrics=self.metrics)
        elif cache.metrics is None:
            cache.metrics = self.metrics
            self.metrics.entries.set_function(lambda: float(len(cache)))
        self.cache = cache
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

        _pb2, pb2_grpc = _pb()
        opts = [("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.so_reuseport", 0)]
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=self.max_workers,
                                                        thread_name_prefix="hrl-cache"), options=opts)
        pb2_grpc.add_EmbeddingCacheServicer_to_server(_servicer(self.cache, self.metrics), server)
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
        """Report NOT_SERVING, then stop (in-flight calls get ``grace_s`` seconds). Idempotent."""
        if self._health is not None:
            self._health.enter_graceful_shutdown()
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
        pb2, pb2_grpc = _pb()
        self._pb2 = pb2
        self.address = address
        self.timeout_s = float(timeout_s)
        self.metrics = metrics
        self._channel = grpc.insecure_channel(address, options=[
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.initial_reconnect_backoff_ms", 200), ("grpc.max_reconnect_backoff_ms", 2000)])
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
            raise CacheUnavailable(f"cache {self.address}: {method}: {name}: "
                                   f"{' '.join(str(detail).split())}") from None
        finally:
            if self.metrics is not None:
                self.metrics.requests.labels(method=method, outcome=outcome).inc()
                self.metrics.request_duration.labels(method=method).observe(time.perf_counter() - t0)

    @staticmethod
    def _outcome(resp) -> str:
        return "not_modified" if resp.not_modified else ("ok" if resp.found else "miss")

    def get(self, fingerprint: str = "", known_version: int = 0) -> Lookup:
        r = self._call("Get", self._pb2.GetRequest(fingerprint=fingerprint, known_version=known_version),
                       self._outcome)
        if r.not_modified:
            return Lookup(None, True)
        return Lookup(_entry_from_pb(r.entry) if r.found else None)

    def put(self, fingerprint: str, services: Sequence[str], matrix: np.ndarray, *, encoder_version: str = "",
            timestamp_s: float = 0.0) -> EmbeddingEntry:
        names, m = _check_put(fingerprint, services, matrix)
        r = self._call("Put", self._pb2.PutRequest(fingerprint=fingerprint, services=list(names),
                                                   embeddings=_matrix_to_pb(self._pb2, m),
                                                   timestamp_s=float(timestamp_s), encoder_version=encoder_version))
        return EmbeddingEntry(fingerprint, names, m, int(r.version), float(timestamp_s) or float(r.stored_at_s),
                              encoder_version, float(r.stored_at_s))

    def get_intent(self, known_version: int = 0) -> Lookup:
        r = self._call("GetIntent", self._pb2.GetIntentRequest(known_version=known_version), self._outcome)
        if r.not_modified:
            return Lookup(None, True)
        return Lookup(_intent_from_pb(r.intent) if r.found else None)

    def put_intent(self, values: Sequence[float], names: Sequence[str] = (), *, source: str = "",
                   timestamp_s: float = 0.0) -> IntentEntry:
        vals, nm = _check_intent(values, names)
        r = self._call("PutIntent", self._pb2.PutIntentRequest(values=list(vals), names=list(nm), source=source,
                                                               timestamp_s=float(timestamp_s)))
        return IntentEntry(vals, nm, int(r.version), float(timestamp_s) or float(r.stored_at_s), source,
                           float(r.stored_at_s))

    def health(self, service: str = "") -> str:
        """The server's ``grpc.health.v1`` status name for ``service`` (``SERVING``, ``NOT_SERVING``, ...);
        raises :class:`CacheUnavailable` / :class:`CacheTimeout` like the other calls."""
        import grpc
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        try:
            r = health_pb2_grpc.HealthStub(self._channel).Check(health_pb2.HealthCheckRequest(service=service),
                                                                timeout=self.timeout_s)
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


# ---- the background copy -----------------------------------------------------------------------------------------

class CacheRefresher:
    """Keep a local copy of one cache's embeddings and intent, refreshed every ``interval_s`` seconds in a
    daemon thread, so readers never wait on the network (the extender's sidecar link).

    ``cache``: any :class:`EmbeddingCache` (usually a :class:`GrpcEmbeddingCache`); ``fingerprint_fn``:
    returns the fingerprint to follow each round (``""``: the most recently stored entry); ``on_embeddings`` /
    ``on_intent``: called (in the refresher thread) with each new entry; ``max_age_s``: an intent older than
    this (producer timestamp) is dropped — ``on_intent(None)`` — and counted ``stale`` (0 = never);
    ``metrics``: :class:`CacheClientMetrics`. Failures are counted and logged at WARNING once per outage;
    the last copy stays.
    """

    def __init__(self, cache: EmbeddingCache, interval_s: float = 10.0,
                 fingerprint_fn: Callable[[], str] | None = None,
                 on_embeddings: Callable[[EmbeddingEntry], None] | None = None,
                 on_intent: Callable[[IntentEntry | None], None] | None = None,
                 metrics: CacheClientMetrics | None = None, max_age_s: float = 0.0,
                 clock: Callable[[], float] = time.time):
        if not interval_s > 0:
            raise ValueError(f"interval_s: must be > 0, got {interval_s!r}")
        self.cache = cache
        self.interval_s = float(interval_s)
        self.fingerprint_fn = fingerprint_fn or (lambda: "")
        self.on_embeddings = on_embeddings
        self.on_intent = on_intent
        self.metrics = metrics
        self.max_age_s = float(max_age_s)
        self.clock = clock
        self.embeddings: EmbeddingEntry | None = None
        self.intent: IntentEntry | None = None
        self.last_success_s: float | None = None
        self._failing = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if metrics is not None:
            metrics.copy_age.labels(kind="embeddings").set_function(
                lambda: self.embeddings.age_s(self.clock()) if self.embeddings else math.nan)
            metrics.copy_age.labels(kind="intent").set_function(
                lambda: self.intent.age_s(self.clock()) if self.intent else math.nan)

    def _count(self, kind: str, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.refresh.labels(kind=kind, outcome=outcome).inc()

    def _fetch(self, kind: str, get, entry_type: type, on_new) -> str:
        """One conditional get of ``kind`` (``embeddings`` or ``intent``): a new ``entry_type`` entry replaces
        the copy and is passed to ``on_new``. Returns the outcome (ok, not_modified, missing, error); on an
        error the copy is kept."""
        try:
            r = get()
            if r.not_modified:
                return "not_modified"
            if not isinstance(r.entry, entry_type):
                return "missing"
            setattr(self, kind, r.entry)
            if on_new is not None:
                on_new(r.entry)
            return "ok"
        except Exception as exc:  # noqa: BLE001 - keep the copy; count and go on
            self._note_failure(exc)
            return "error"

    def refresh_once(self) -> dict[str, str]:
        """One round: fetch what changed. Returns ``{"embeddings": outcome, "intent": outcome}`` with outcomes
        ok, not_modified, missing, error; an intent copy older than ``max_age_s`` is then dropped
        (``on_intent(None)``, counted as refresh outcome ``stale``). Never raises (callbacks' errors are
        counted as ``error``)."""
        def embeddings():
            fp = self.fingerprint_fn()
            have = self.embeddings
            return self.cache.get(fp, have.version if have is not None and (not fp or have.fingerprint == fp) else 0)

        def intent():
            return self.cache.get_intent(self.intent.version if self.intent is not None else 0)

        out = {"embeddings": self._fetch("embeddings", embeddings, EmbeddingEntry, self.on_embeddings),
               "intent": self._fetch("intent", intent, IntentEntry, self.on_intent)}
        it = self.intent
        if it is not None and self.max_age_s > 0 and it.age_s(self.clock()) > self.max_age_s:
            self.intent = None
            self._count("intent", "stale")
            if self.on_intent is not None:
                self.on_intent(None)
        if "error" not in out.values():
            if self._failing:
                log.info("cache %s: reachable again", getattr(self.cache, "address", "in-process"))
            self._failing = False
            self.last_success_s = self.clock()
        for k, v in out.items():
            self._count(k, v)
        return out

    def _note_failure(self, exc: Exception) -> None:
        if not self._failing:
            log.warning("cache refresh failed (keeping the last copy): %s", exc)
        self._failing = True

    def start(self) -> CacheRefresher:
        """Refresh now (in the background) and then every ``interval_s`` until :meth:`stop`."""
        if self._thread is not None:
            raise RuntimeError("CacheRefresher already started")
        self._stop.clear()

        def loop() -> None:
            while not self._stop.is_set():
                self.refresh_once()
                self._stop.wait(self.interval_s)

        self._thread = threading.Thread(target=loop, name="hrl-cache-refresher", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the thread (waits up to ``timeout_s``). Idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._thread = None
