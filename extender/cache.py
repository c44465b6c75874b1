"""The extender's link to the topology embedding cache (``cache:`` in :class:`extender.config.ExtenderConfiguration`).

:func:`start_cache_link` starts a :class:`policy.cache.CacheRefresher` that copies, every
``refreshSeconds``, the embeddings (of the fingerprint of the store's call graph, or the latest entry) into
:meth:`SnapshotStore.set_embeddings` and the descheduler's intent, with its make-before-break moves in progress,
into :meth:`SnapshotStore.set_intent`.
Requests read the store only: they never wait on the cache. When the cache is down the last copy stays
in use until it is older than ``maxAgeSeconds``; then scores turn neutral for lack of fresh embeddings
(outcome ``neutral_embeddings_stale``) and the intent falls back to its defaults.
"""

from __future__ import annotations

import logging
from typing import Any

from prometheus_client import CollectorRegistry

from policy.cache import CacheClientMetrics, CacheRefresher, GrpcEmbeddingCache, IntentEntry, fingerprint
from policy.intent import Intent
from policy.state import ServiceGraph

from .config import CacheConfig
from .store import SnapshotStore

__all__ = ["start_cache_link", "GraphFingerprint"]

log = logging.getLogger(__name__)


class GraphFingerprint:
    """``fingerprint`` of the store's current graph, recomputed only when the graph object changes;
    ``""`` (the latest entry) while the graph is empty or ``match`` is ``latest``."""

    def __init__(self, store: SnapshotStore, match: str = "graph"):
        self.store = store
        self.match = match
        self._graph: ServiceGraph | None = None
        self._fp = ""

    def __call__(self) -> str:
        if self.match == "latest":
            return ""
        g = self.store.get().graph
        if g is not self._graph:
            self._graph = g
            self._fp = fingerprint(g) if g.services else ""
        return self._fp


def start_cache_link(
    config: CacheConfig | None, store: SnapshotStore, registry: CollectorRegistry | None = None, client: Any = None
) -> CacheRefresher | None:
    """Start copying from the cache ``config`` names into ``store`` (``None``: no cache, returns ``None``).

    Marks the store as requiring embeddings (:meth:`SnapshotStore.require_embeddings` with
    ``maxAgeSeconds``), registers :class:`policy.cache.CacheClientMetrics` in ``registry`` (when given)
    and returns the started refresher (call ``stop()`` at shutdown). ``client``: an
    :class:`~policy.cache.EmbeddingCache` to use instead of a gRPC client to ``config.address`` (tests)."""
    if config is None:
        return None
    metrics = CacheClientMetrics(registry) if registry is not None else None
    cache = client if client is not None else GrpcEmbeddingCache(config.address, config.timeout_seconds, metrics)
    store.require_embeddings(config.max_age_seconds)

    def on_intent(it: IntentEntry | None) -> None:
        if it is None:
            store.set_intent(None)
        else:  # the intent enters the extender here: validated once (a bad record is refused whole, counted)
            store.set_intent(Intent.from_wire(it.names, it.values), version=it.version, pending_moves=it.pending_moves)

    refresher = CacheRefresher(
        cache,
        config.refresh_seconds,
        GraphFingerprint(store, config.match),
        on_embeddings=store.set_embeddings,
        on_intent=on_intent,
        metrics=metrics,
        max_age_s=config.max_age_seconds,
    )
    log.info(
        "embedding cache %s: refreshing every %g s (match %s, max age %g s)",
        config.address,
        config.refresh_seconds,
        config.match,
        config.max_age_seconds,
    )
    return refresher.start()
