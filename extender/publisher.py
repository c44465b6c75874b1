"""Plugin mode's producer: :class:`ScoreTablePublisher` computes the node-score table of the extender's policy from
the extender's own store (the same snapshot, call graph, intent and embeddings its replies read) and publishes it to
the embedding cache, which streams it to kube-scheduler's HRLScore plugin (``scheduler-plugin/``).

Why here: the extender process already keeps everything a table depends on current (the list + watch of Nodes and
Pods, the call graph, the cache's intent and embeddings, a learned policy's service rows) and applies the same
checks before it scores (the call graph knows the service, a fresh embedding when a cache is configured); a table
computed anywhere else would need all of it again, and its replies and the plugin's would drift apart.

A daemon thread wakes on every change the store publishes (a snapshot, a touch of the watch about once a second, the
graph, the intent, the embeddings): when what a table depends on changed (the index, intent, co-location priorities,
embeddings, the policy's service rows, which services may be scored) it builds a new generation
(:func:`policy.lowlevel.build_score_table`, at most one per ``minIntervalSeconds``) and publishes it; otherwise it
sends a heartbeat with the snapshot's age. A cache that does not know the generation (it restarted) gets the table
again; a cache that cannot be reached is retried at the next wake, logged once per outage. Nothing here is on the
extender's request path.

Metrics (registry of the extender): ``hrl_extender_score_table_publishes_total{outcome}`` (ok, error, refused),
``hrl_extender_score_table_heartbeats_total{outcome}`` (ok, unknown, error),
``hrl_extender_score_table_build_duration_seconds`` (histogram), ``hrl_extender_score_table_generation``,
``hrl_extender_score_table_rows``, ``hrl_extender_score_table_watchers`` (watch streams open at the last publish).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from policy.cache import CacheUnavailable, GrpcEmbeddingCache, ScoreTable
from policy.lowlevel import PlacementPolicy, TablePolicy, build_score_table, table_keys

from .config import ExtenderConfiguration
from .store import SnapshotStore, StoreView

__all__ = ["ScoreTablePublisher", "PublisherMetrics", "start_score_table_publisher"]

log = logging.getLogger(__name__)


class PublisherMetrics:
    """The publisher's metrics (see the module docstring), registered in ``registry``."""

    def __init__(self, registry: CollectorRegistry):
        self.publishes = Counter(
            "hrl_extender_score_table_publishes_total",
            "Score tables published to the embedding cache, by outcome (ok, error: not reached, refused: invalid).",
            ["outcome"],
            registry=registry,
        )
        self.heartbeats = Counter(
            "hrl_extender_score_table_heartbeats_total",
            "Score-table heartbeats sent, by outcome (ok, unknown: the cache lacked the table, error).",
            ["outcome"],
            registry=registry,
        )
        self.build = Histogram(
            "hrl_extender_score_table_build_duration_seconds",
            "Time to compute one score table, seconds.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
            registry=registry,
        )
        self.generation = Gauge(
            "hrl_extender_score_table_generation", "Generation of the last score table published.", registry=registry
        )
        self.rows = Gauge("hrl_extender_score_table_rows", "Rows of the last score table built.", registry=registry)
        self.watchers = Gauge(
            "hrl_extender_score_table_watchers",
            "Watch streams the cache had open at the last publish (the plugins reading the table).",
            registry=registry,
        )
        for o in ("ok", "error", "refused"):
            self.publishes.labels(outcome=o)
        for o in ("ok", "unknown", "error"):
            self.heartbeats.labels(outcome=o)


class ScoreTablePublisher:
    """Keep the cache's score table current from ``store`` (see the module docstring).

    ``policy``: a :class:`policy.lowlevel.TablePolicy` (``TypeError`` otherwise); ``client``: the cache
    (:meth:`~policy.cache.GrpcEmbeddingCache.publish_score_table` and ``touch_score_table``); ``max_keys``: rows at
    most; ``min_interval_s``: between two builds; ``heartbeat_s``: the longest wait without a store change before a
    heartbeat anyway; ``producer``: the name in the table. Times are on the store's clock (unix seconds).
    """

    def __init__(
        self,
        store: SnapshotStore,
        policy: PlacementPolicy,
        client: Any,
        *,
        max_keys: int = 256,
        min_interval_s: float = 0.1,
        heartbeat_s: float = 1.0,
        producer: str = "",
        metrics: PublisherMetrics | None = None,
    ):
        if not isinstance(policy, TablePolicy):
            raise TypeError(
                f"scoreTable.publish: policy {getattr(policy, 'name', type(policy).__name__)!r} cannot be served by "
                "the HRLScore plugin (no load_term / score_parts)"
            )
        self.store = store
        self.policy = policy
        self.client = client
        self.max_keys = int(max_keys)
        self.min_interval_s = float(min_interval_s)
        self.heartbeat_s = float(heartbeat_s)
        self.producer = producer or f"hrl-extender@{socket.gethostname()}"
        self.metrics = metrics
        self.clock = store.clock  # unix seconds, the clock the snapshot ages by
        self.generation = 0
        self.published: ScoreTable | None = None
        self._signature: tuple | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False
        self._last_build = -float("inf")

    # ---- what a table depends on -------------------------------------------------------------------------
    def _usable(self, view: StoreView, now_s: float) -> Callable[[str], bool]:
        return lambda svc: view.embedding_problem(svc, now_s) is None

    def _signature_of(self, view: StoreView, now_s: float) -> tuple:
        index = view.index
        assert index is not None
        services = sorted(index.snapshot.graph.services)
        usable = self._usable(view, now_s)
        rows_of = getattr(self.policy, "service_rows", None)
        rows = None
        if rows_of is not None and services:
            try:
                rows = rows_of(index, services[0])
            except Exception:  # noqa: BLE001 - no rows yet: the build finds out per row
                rows = None
        return (
            id(index),
            view.intent,
            id(view.colocation),
            id(view.embeddings),
            id(rows),
            tuple(s for s in services if usable(s)),
        )

    # ---- one round ----------------------------------------------------------------------------------------
    def step(self) -> str:
        """One round (the thread's body, callable from tests): ``"published"``, ``"heartbeat"``, ``"idle"`` (no
        snapshot yet), ``"waiting"`` (a build due sooner than ``min_interval_s`` after the last), or ``"error"``."""
        view = self.store.get()
        if not view.ready:
            return "idle"
        now = self.clock()
        sig = self._signature_of(view, now)
        if sig != self._signature or self.published is None:
            if time.monotonic() - self._last_build < self.min_interval_s:
                return "waiting"
            return self._publish_new(view, now, sig)
        return self._heartbeat(view, now)

    def _publish_new(self, view: StoreView, now: float, sig: tuple) -> str:
        assert view.index is not None
        t0 = time.perf_counter()
        self._last_build = time.monotonic()
        # a policy whose base reads no requests has one row per service: its rows' keys are not read (the scan of
        # every pod they take was most of a build at 2,000 pods)
        keys = table_keys(view.index, self.max_keys) if self.policy.base_reads_requests else ()
        built = build_score_table(
            self.policy,
            view.index,
            view.intent,
            keys,
            colocation=view.colocation or None,
            usable=self._usable(view, now),
            on_error=lambda key, exc: log.debug("score table: row %s: %s: %s", key, type(exc).__name__, exc),
        )
        table = replace(
            built,
            generation=self.generation + 1,
            producer=self.producer,
            computed_at_s=float(now),
            snapshot_age_s=max(0.0, float(view.age_s(now))),
        )
        if self.metrics is not None:
            self.metrics.build.observe(time.perf_counter() - t0)
            self.metrics.rows.set(len(table.rows))
        self.generation += 1
        self._signature = sig
        return self._send(table)

    def _send(self, table: ScoreTable) -> str:
        try:
            _version, watchers = self.client.publish_score_table(table)
        except ValueError as exc:  # the cache refused it: a bug of ours, not a transient failure
            log.error("score table generation %d refused by the cache: %s", table.generation, exc)
            self._count_publish("refused")
            self.published = None
            return "error"
        except (CacheUnavailable, OSError) as exc:
            self._note_failure(exc)
            self._count_publish("error")
            self.published = None  # send it whole again at the next wake
            self._signature = None
            return "error"
        self._recovered()
        self.published = table
        self._count_publish("ok")
        if self.metrics is not None:
            self.metrics.generation.set(table.generation)
            self.metrics.watchers.set(watchers)
        log.debug(
            "score table generation %d: %d rows x %d nodes, %d watchers",
            table.generation,
            len(table.rows),
            len(table.nodes),
            watchers,
        )
        return "published"

    def _heartbeat(self, view: StoreView, now: float) -> str:
        assert self.published is not None
        try:
            found = self.client.touch_score_table(self.published.generation, view.age_s(now))
        except (CacheUnavailable, OSError) as exc:
            self._note_failure(exc)
            self._count_heartbeat("error")
            self.published = None
            self._signature = None
            return "error"
        self._recovered()
        if not found:  # the cache restarted (or another producer published): send ours again
            self._count_heartbeat("unknown")
            log.info("score table: the cache lacks generation %d; publishing it again", self.published.generation)
            return self._send(self.published)
        self._count_heartbeat("ok")
        return "heartbeat"

    def _count_publish(self, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.publishes.labels(outcome=outcome).inc()

    def _count_heartbeat(self, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.heartbeats.labels(outcome=outcome).inc()

    def _note_failure(self, exc: Exception) -> None:
        if not self._failing:
            log.warning("score table: cannot reach the cache (retrying at every snapshot change): %s", exc)
        self._failing = True

    def _recovered(self) -> None:
        if self._failing:
            log.info("score table: the cache is reachable again")
        self._failing = False

    # ---- the thread -------------------------------------------------------------------------------------------
    def _on_change(self, _view: StoreView) -> None:
        self._wake.set()

    def start(self) -> ScoreTablePublisher:
        """Subscribe to the store and start the thread (a first round at once)."""
        if self._thread is not None:
            raise RuntimeError("ScoreTablePublisher already started")
        self.store.subscribe(self._on_change)
        self._stop.clear()

        def loop() -> None:
            while not self._stop.is_set():
                self._wake.wait(self.heartbeat_s)
                self._wake.clear()
                if self._stop.is_set():
                    return
                try:
                    if self.step() == "waiting":
                        self._wake.wait(self.min_interval_s)  # a build was due: come back once it may run
                        self._wake.set()
                except Exception:
                    log.exception("score table: round failed")

        self._wake.set()
        self._thread = threading.Thread(target=loop, name="score-table", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the thread (waits up to ``timeout_s``). Idempotent."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._thread = None


def start_score_table_publisher(
    config: ExtenderConfiguration,
    store: SnapshotStore,
    policy: PlacementPolicy,
    registry: CollectorRegistry | None = None,
    client: Any = None,
) -> ScoreTablePublisher | None:
    """Start publishing when ``config.scoreTable.publish`` is set (else ``None``): a gRPC client to
    ``scoreTable.address`` (or ``cache.address``), :class:`PublisherMetrics` in ``registry``. ``client``: a cache to
    publish to instead (tests). Raises ``TypeError`` for a policy the plugin cannot serve."""
    address = config.score_table_address()
    if address is None:
        return None
    st = config.score_table
    if client is None:
        client = GrpcEmbeddingCache(address, st.timeout_seconds)
    pub = ScoreTablePublisher(
        store,
        policy,
        client,
        max_keys=st.max_keys,
        min_interval_s=st.min_interval_seconds,
        metrics=PublisherMetrics(registry) if registry is not None else None,
    )
    log.info("score table: publishing to %s for the HRLScore plugin (at most %d rows)", address, st.max_keys)
    return pub.start()
