"""The descheduler's link to the topology embedding cache (``cache:`` in the DeschedulerConfiguration).

Each cycle the descheduler (a CronJob's short-lived pod, or the interval-mode Deployment):

1. **reads the embeddings** of its call graph (:meth:`CacheLink.embeddings_for`): the entry stored under the
   graph's fingerprint when it is younger than ``reencodeAfterSeconds``; otherwise it encodes the graph with
   the encoder bundle (numpy, :class:`policy.encoder.mpnn.GraphEncoder`; node features from the snapshot: replicas,
   requests, limits, measured usage; edge features: call rates and the same-node share of each call) and
   stores the result, so the extender finds it;
2. **writes its intent** (:meth:`CacheLink.publish_intent`): the plan's intent vector, which the extender
   copies and passes to its placement policy, with the make-before-break moves in progress
   (:class:`policy.intent.PendingMove`: the extender scores each one's target highest for its service's new pod).
   A dry run publishes no intent (it changes nothing that steers scheduling); embeddings are derived data and are
   stored in dry runs too.

The cache being down never fails a cycle: the link returns warnings (printed on stderr) and counts the
failures in ``hrl_cache_client_requests_total``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry

from policy.cache import (
    CacheClientMetrics,
    CacheUnavailable,
    EmbeddingCache,
    EmbeddingEntry,
    EncoderMetrics,
    GrpcEmbeddingCache,
    fingerprint,
)
from policy.encoder import DEFAULT_ENCODER_BUNDLE, GraphEncoder, colocation_from_snapshot, stats_from_snapshot
from policy.intent import Intent, PendingMove
from policy.state import ClusterSnapshot

from .config import CacheConfig

__all__ = ["CacheLink", "cache_link_from_config"]

SOURCE = "hrl-descheduler"


class CacheLink:
    """Embeddings in, intent out (see the module docstring).

    ``cache``: an :class:`~policy.cache.EmbeddingCache` (gRPC client, or in process in tests);
    ``encoder_bundle``: bundle directory (``None``: the committed ``policy/bundles/encoder``), loaded on first
    use; ``reencode_after_s``: re-encode when the stored entry is older (> 0); ``clock``: unix seconds.
    """

    def __init__(
        self,
        cache: EmbeddingCache,
        encoder_bundle: str | None = None,
        reencode_after_s: float = 300.0,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.time,
    ):
        self.cache = cache
        self.encoder_bundle = encoder_bundle
        self.reencode_after_s = float(reencode_after_s)
        self.clock = clock
        self.encoder_metrics = EncoderMetrics(registry) if registry is not None else None
        self._encoder: Any = None
        self.last_snapshot: ClusterSnapshot | None = None

    def remember(self, observe: Callable[[], ClusterSnapshot]) -> Callable[[], ClusterSnapshot]:
        """``observe`` that also keeps the snapshot it returns in :attr:`last_snapshot`."""

        def wrapped() -> ClusterSnapshot:
            snap = observe()
            self.last_snapshot = snap
            return snap

        return wrapped

    def encoder(self):
        """The numpy graph encoder (loaded once). Raises :class:`policy.bundle.BundleError` for a bad bundle."""
        if self._encoder is None:
            self._encoder = GraphEncoder.load(self.encoder_bundle or DEFAULT_ENCODER_BUNDLE)
        return self._encoder

    def encode(self, snapshot: ClusterSnapshot) -> tuple[str, tuple[str, ...], Any, float]:
        """``(fingerprint, services, embeddings (N, D) float32, duration_s)`` of ``snapshot.graph``."""
        enc = self.encoder()
        g = snapshot.graph
        out = enc.encode_graph(g, stats_from_snapshot(snapshot), colocation_from_snapshot(snapshot, g))
        if self.encoder_metrics is not None:
            self.encoder_metrics.observe(out.duration_s, len(out.services))
        return fingerprint(g), out.services, out.embeddings, out.duration_s

    def embeddings_for(self, snapshot: ClusterSnapshot) -> tuple[EmbeddingEntry | None, list[str]]:
        """The embeddings of ``snapshot.graph``: from the cache when fresh, else encoded and stored.
        Returns ``(entry or None, warnings)``; never raises for cache or bundle trouble."""
        g = snapshot.graph
        if not g.services:
            return None, ["cache: the call graph is empty; no embeddings"]
        warnings: list[str] = []
        fp = fingerprint(g)
        try:
            r = self.cache.get(fp)
            e = r.entry if isinstance(r.entry, EmbeddingEntry) else None
            if e is not None and e.age_s(self.clock()) <= self.reencode_after_s:
                return e, warnings
        except CacheUnavailable as exc:
            warnings.append(f"cache: {exc}")
        try:
            fp, services, z, _dt = self.encode(snapshot)
        except ValueError as exc:  # BundleError, featurization of bad input
            return None, [*warnings, f"cache: cannot encode the call graph: {exc}"]
        try:
            stored = self.cache.put(fp, services, z, encoder_version=self.encoder().version, timestamp_s=self.clock())
            return stored, warnings
        except (CacheUnavailable, ValueError) as exc:
            warnings.append(f"cache: could not store the embeddings: {exc}")
            return EmbeddingEntry(fp, services, z, 0, self.clock(), self.encoder().version), warnings

    def publish_intent(self, intent: Intent, dry_run: bool, pending_moves: Sequence[PendingMove] = ()) -> list[str]:
        """Store the plan's ``intent`` in the cache (its vector and per-service co-location priorities, in the wire
        form of :meth:`policy.intent.Intent.to_wire`) with the make-before-break moves in progress
        (``pending_moves``: the extender steers their new pods to their targets) unless ``dry_run``. Returns
        warnings; never raises for cache trouble."""
        if dry_run:
            return []
        try:
            names, values = intent.to_wire()
            self.cache.put_intent(
                values,
                names if len(names) == len(values) else [],
                source=SOURCE,
                timestamp_s=self.clock(),
                pending_moves=tuple(pending_moves),
            )
        except (CacheUnavailable, ValueError) as exc:
            return [f"cache: could not publish the intent: {exc}"]
        return []

    def after_cycle(self, intent: Intent, dry_run: bool, pending_moves: Sequence[PendingMove] = ()) -> list[str]:
        """After a cycle: make sure the embeddings of the last observed snapshot are stored, then publish the
        intent and the moves in progress. Returns warnings."""
        warnings: list[str] = []
        if self.last_snapshot is not None:
            _e, w = self.embeddings_for(self.last_snapshot)
            warnings += w
        return warnings + self.publish_intent(intent, dry_run, pending_moves)


def cache_link_from_config(
    config: CacheConfig | None, registry: CollectorRegistry | None = None, client: EmbeddingCache | None = None
) -> CacheLink | None:
    """A :class:`CacheLink` for ``config`` (``None`` → ``None``), with a gRPC client unless ``client`` is given;
    client and encoder metrics go to ``registry``."""
    if config is None:
        return None
    if client is None:
        metrics = CacheClientMetrics(registry) if registry is not None else None
        client = GrpcEmbeddingCache(config.address, config.timeout_seconds, metrics)
    return CacheLink(client, config.encoder_bundle, config.reencode_after_seconds, registry)
