"""Service rows for the learned placement policy: the per-service block of its input (graph-encoder embeddings,
or the encoder's raw input row for the ``hrl-no-encoder`` ablation), computed from a snapshot off the request
path (:func:`compute_service_rows`), cached per call-graph fingerprint (:class:`ServiceRowCache`) and kept
fresh in the background (:class:`RowsRefresher`)."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from policy.cache import EmbeddingEntry, fingerprint
from policy.encoder import colocation_from_snapshot, featurize_graph, stats_from_snapshot
from policy.state import ClusterSnapshot, ServiceGraph

from .features import FLAT_ROWS_VERSION, SERVICE_INPUTS

__all__ = ["ServiceRows", "compute_service_rows", "ServiceRowCache", "RowsSource", "RowsRefresher"]

log = logging.getLogger(__name__)


# ---- service rows ----------------------------------------------------------------------------------------


class ServiceRows(Protocol):
    """Per-service vectors: :class:`policy.cache.EmbeddingEntry` is one."""

    def row(self, service: str) -> np.ndarray | None: ...


def compute_service_rows(
    snapshot: ClusterSnapshot, service_input: str, encoder: Any = None, now_s: float | None = None
) -> EmbeddingEntry:
    """The service block of every service of ``snapshot.graph``, as the descheduler computes embeddings
    (:mod:`descheduler.cache`): node features from :func:`~policy.encoder.graph.stats_from_snapshot`, edge
    features with :func:`~policy.encoder.graph.colocation_from_snapshot`.

    ``"encoder"``: ``encoder`` (:class:`policy.encoder.mpnn.GraphEncoder`) embeddings (N, D), ``encoder_version`` its
    ``version``; ``"flat"``: the (N, len(NODE_SPEC)) input rows, ``encoder_version`` :data:`FLAT_ROWS_VERSION`.
    ``timestamp_s``: ``now_s``, default the snapshot's ``taken_at_s``. Raises ``ValueError`` for an unknown
    ``service_input`` or an ``"encoder"`` request without an encoder."""
    g = snapshot.graph
    stats = stats_from_snapshot(snapshot)
    share = colocation_from_snapshot(snapshot, g)
    ts = snapshot.taken_at_s if now_s is None else now_s
    if service_input == "encoder":
        if encoder is None:
            raise ValueError("service_input 'encoder' needs a GraphEncoder")
        out = encoder.encode_graph(g, stats, share)
        return EmbeddingEntry(fingerprint(g), out.services, out.embeddings, 0, ts, encoder.version)
    if service_input == "flat":
        arrays = featurize_graph(g, stats, share)
        return EmbeddingEntry(fingerprint(g), arrays.services, arrays.x, 0, ts, FLAT_ROWS_VERSION)
    raise ValueError(f"service_input: expected one of {', '.join(SERVICE_INPUTS)}, got {service_input!r}")


class ServiceRowCache:
    """Service rows per call-graph fingerprint, recomputed when older than ``refresh_s`` seconds of snapshot
    time (``taken_at_s``: simulated time in the simulator, unix time live). ``get`` computes on a miss (in the
    caller's thread); the extender's :class:`RowsRefresher` calls it in the background so requests hit."""

    def __init__(self, service_input: str, encoder: Any = None, refresh_s: float = 300.0, max_entries: int = 4):
        if service_input not in SERVICE_INPUTS:
            raise ValueError(f"service_input: expected one of {', '.join(SERVICE_INPUTS)}, got {service_input!r}")
        if not (refresh_s > 0 and math.isfinite(refresh_s)):
            raise ValueError(f"refresh_s: expected a finite number > 0, got {refresh_s!r}")
        self.service_input = service_input
        self.encoder = encoder
        self.refresh_s = float(refresh_s)
        self.max_entries = max_entries
        self._entries: dict[str, EmbeddingEntry] = {}
        self._fp_graph: tuple[ServiceGraph | None, str] = (None, "")
        self._lock = threading.Lock()
        self.computations = 0

    def graph_fingerprint(self, graph: ServiceGraph) -> str:
        """``fingerprint(graph)``, recomputed only when the graph object changes."""
        g, fp = self._fp_graph
        if g is not graph:
            fp = fingerprint(graph)
            self._fp_graph = (graph, fp)
        return fp

    def peek(self, snapshot: ClusterSnapshot) -> EmbeddingEntry | None:
        """The cached rows of ``snapshot.graph`` however old, or ``None``."""
        return self._entries.get(self.graph_fingerprint(snapshot.graph))

    def get(self, snapshot: ClusterSnapshot) -> EmbeddingEntry:
        """The rows of ``snapshot.graph``: cached unless missing or older than ``refresh_s``."""
        fp = self.graph_fingerprint(snapshot.graph)
        e = self._entries.get(fp)
        if e is not None and snapshot.taken_at_s - e.timestamp_s <= self.refresh_s:
            return e
        with self._lock:
            e = self._entries.get(fp)
            if e is not None and snapshot.taken_at_s - e.timestamp_s <= self.refresh_s:
                return e
            e = compute_service_rows(snapshot, self.service_input, self.encoder)
            entries = dict(self._entries)
            entries[fp] = e
            while len(entries) > self.max_entries:
                entries.pop(next(iter(entries)))
            self._entries = entries
            self.computations += 1
            return e


class RowsSource(Protocol):
    """What :class:`RowsRefresher` drives (:class:`policy.lowlevel.LearnedPlacement`): ``refresh(snapshot)``
    computes the service rows of ``snapshot``; ``background_rows`` is set once a refresher owns that work."""

    background_rows: bool

    def refresh(self, snapshot: ClusterSnapshot) -> object: ...


class RowsRefresher:
    """A daemon thread calling ``policy.refresh(get_snapshot())`` every ``interval_s`` seconds, so that
    :class:`~policy.lowlevel.LearnedPlacement` computes service rows off the request path (the extender without an
    embedding cache). Errors are logged and retried at the next tick."""

    def __init__(
        self, policy: RowsSource, get_snapshot: Callable[[], ClusterSnapshot | None], interval_s: float = 30.0
    ):
        self.policy = policy
        self.get_snapshot = get_snapshot
        self.interval_s = float(interval_s)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.runs = 0

    def tick(self) -> None:
        snap = self.get_snapshot()
        if snap is None or not snap.graph.services:
            return
        try:
            self.policy.refresh(snap)
            self.runs += 1
        except Exception as exc:  # noqa: BLE001 - keep serving with the last rows
            log.warning("placement: cannot compute service rows: %s: %s", type(exc).__name__, exc)

    def start(self) -> RowsRefresher:
        def loop() -> None:
            while not self._stop.is_set():
                t0 = time.monotonic()
                self.tick()
                self._stop.wait(max(0.05, self.interval_s - (time.monotonic() - t0)))

        self.policy.background_rows = True
        self._thread = threading.Thread(target=loop, name="placement-rows", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 2.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._thread = None
