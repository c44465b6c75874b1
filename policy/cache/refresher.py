""":class:`CacheRefresher`: a background thread keeping a local copy of the cache's embeddings and intent (the
extender's): a request never waits on the network, and a dead cache server leaves the last copy in place until it
is too old to use."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable

from .memory import EmbeddingCache
from .metrics import CacheClientMetrics
from .records import EmbeddingEntry, IntentEntry

__all__ = ["CacheRefresher"]

log = logging.getLogger(__name__)


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

    def __init__(
        self,
        cache: EmbeddingCache,
        interval_s: float = 10.0,
        fingerprint_fn: Callable[[], str] | None = None,
        on_embeddings: Callable[[EmbeddingEntry], object] | None = None,
        on_intent: Callable[[IntentEntry | None], object] | None = None,
        metrics: CacheClientMetrics | None = None,
        max_age_s: float = 0.0,
        clock: Callable[[], float] = time.time,
    ):
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
                lambda: self.embeddings.age_s(self.clock()) if self.embeddings else math.nan
            )
            metrics.copy_age.labels(kind="intent").set_function(
                lambda: self.intent.age_s(self.clock()) if self.intent else math.nan
            )

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

        out = {
            "embeddings": self._fetch("embeddings", embeddings, EmbeddingEntry, self.on_embeddings),
            "intent": self._fetch("intent", intent, IntentEntry, self.on_intent),
        }
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
