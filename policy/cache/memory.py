"""The cache protocol (:class:`EmbeddingCache`: get/put embeddings, get/put intent) and its in-process
implementation (:class:`InMemoryEmbeddingCache`: the simulator's, the tests' and the gRPC server's store)."""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from policy.intent import PendingMove

from .metrics import CacheMetrics
from .records import EmbeddingEntry, IntentEntry, Lookup, check_intent, check_pending_moves, check_put

__all__ = ["EmbeddingCache", "InMemoryEmbeddingCache"]


# ---- the protocol and the in-memory cache ---------------------------------------------------------------------


@runtime_checkable
class EmbeddingCache(Protocol):
    """What the extender, the descheduler and the simulator need from a cache (in process or remote).

    ``get(fingerprint="", known_version=0)``: the entry of ``fingerprint`` (empty: the most recently put);
    ``known_version`` equal to the stored version → ``Lookup(None, not_modified=True)``.
    ``put(...)`` stores and returns the stored entry (with its version). ``get_intent`` / ``put_intent``
    likewise for the intent (and the make-before-break moves in progress, ``pending_moves``, stored with it in one
    record). Implementations raise ``ValueError`` for invalid input, and the remote one
    :class:`CacheUnavailable` when the server cannot be reached in time.
    """

    def get(self, fingerprint: str = "", known_version: int = 0) -> Lookup: ...

    def put(
        self,
        fingerprint: str,
        services: Sequence[str],
        matrix: np.ndarray,
        *,
        encoder_version: str = "",
        timestamp_s: float = 0.0,
    ) -> EmbeddingEntry: ...

    def get_intent(self, known_version: int = 0) -> Lookup: ...

    def put_intent(
        self,
        values: Sequence[float],
        names: Sequence[str] = (),
        *,
        source: str = "",
        timestamp_s: float = 0.0,
        pending_moves: Sequence[PendingMove] = (),
    ) -> IntentEntry: ...


class InMemoryEmbeddingCache:
    """A thread-safe :class:`EmbeddingCache` in process memory, holding the ``max_entries`` (>= 1) most
    recently put fingerprints (least recently put dropped first) and one intent.

    ``clock``: unix seconds (default :func:`time.time`); ``metrics``: a :class:`CacheMetrics` to update.
    """

    def __init__(
        self, max_entries: int = 64, clock: Callable[[], float] = time.time, metrics: CacheMetrics | None = None
    ):
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
        ts = float(timestamp_s)
        if not math.isfinite(ts) or ts < 0:
            raise ValueError(f"timestamp_s: expected unix seconds >= 0, got {timestamp_s!r}")
        now = self.clock()
        with self._lock:
            self._version += 1
            it = IntentEntry(vals, nm, self._version, ts or now, str(source), now, moves)
            self._intent = it
        if self.metrics is not None:
            self.metrics.puts.labels(kind="intent").inc()
        return it
