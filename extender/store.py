"""The extender's in-memory view of the cluster: the latest :class:`~policy.state.ClusterSnapshot`, its
:class:`~policy.index.ClusterIndex`, the call graph and the high-level intent.

Nothing on the request path touches the network or builds an index (DESIGN.md section 2): feeders —
the simulator in-process, a static ``kubectl get nodes,pods,pdb -A -o json`` file (:meth:`SnapshotStore.load_file`),
later a Kubernetes watch (``extender/kube.py``) — call :meth:`SnapshotStore.update`, which builds the index
in the caller's thread and then swaps one reference. Request handlers call :meth:`SnapshotStore.get` and
read an immutable :class:`StoreView`; they never block on a writer.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from policy.cache import EmbeddingEntry
from policy.index import ClusterIndex
from policy.intent import Intent, PendingMove
from policy.observe import load_snapshot_objects, snapshot_from_objects, snapshot_warnings
from policy.state import ANNOTATION_DEPENDS_ON, ClusterSnapshot, ServiceEdge, ServiceGraph

__all__ = ["StoreView", "SnapshotStore", "graph_with_annotations"]

log = logging.getLogger(__name__)


_NO_COLOCATION: Mapping[str, float] = MappingProxyType({})
_NO_MOVES: Mapping[tuple[str, str], PendingMove] = MappingProxyType({})


@dataclass(frozen=True)
class StoreView:
    """One consistent, immutable reading of the store.

    - ``snapshot``: the latest snapshot with the effective call graph applied, ``None`` before the first
      :meth:`SnapshotStore.update`;
    - ``index``: :meth:`ClusterIndex.build` of ``snapshot`` (``index.snapshot is snapshot``), ``None`` likewise;
    - ``graph``: the effective call graph (set with :meth:`SnapshotStore.set_graph`, else the snapshot's own);
    - ``plan_intent``: the high level's :class:`policy.intent.Intent` (its vector and per-service co-location
      priorities; :meth:`~policy.intent.Intent.for_service` is what a pod is scored with), ``None`` = defaults;
      ``intent`` and ``colocation`` read its two parts (``None`` / empty when unset);
    - ``intent_version``: the producer's label for the intent (e.g. a plan id), ``None`` when unset;
    - ``pending_moves``: the descheduler's make-before-break moves in progress, ``(namespace, service)`` →
      :class:`policy.intent.PendingMove` (read-only; empty when none): a new pod of that service scores its move's
      target highest (:func:`policy.intent.pending_move_scores`);
    - ``updated_at_s``: the store clock's time (unix seconds by default) of the last
      :meth:`~SnapshotStore.update` or :meth:`~SnapshotStore.touch`, ``None`` before the first;
    - ``generation``: incremented by every change (snapshot, graph, intent or embeddings), 0 initially;
    - ``embeddings``: the latest copy of the topology embeddings (:class:`policy.cache.EmbeddingEntry`,
      from the embedding cache), ``None`` before the first;
    - ``embeddings_required`` / ``embeddings_max_age_s``: set by :meth:`SnapshotStore.require_embeddings`
      when a cache is configured (see :meth:`embedding_problem`);
    - ``decisions``: the decision recorder every prioritize answer is recorded in
      (:class:`extender.decisions.DecisionRecorder`), ``None`` = none; ``shadow``: shadow mode (scored pods are
      answered neutral), both set by :meth:`SnapshotStore.set_decisions`.
    """

    snapshot: ClusterSnapshot | None = None
    index: ClusterIndex | None = None
    graph: ServiceGraph = ServiceGraph()
    plan_intent: Intent | None = None
    intent_version: str | None = None
    pending_moves: Mapping[tuple[str, str], PendingMove] = field(default_factory=lambda: _NO_MOVES)
    updated_at_s: float | None = None
    generation: int = 0
    embeddings: EmbeddingEntry | None = None
    embeddings_required: bool = False
    embeddings_max_age_s: float = 0.0
    decisions: Any = None
    shadow: bool = False

    @property
    def intent(self) -> tuple[float, ...] | None:
        """The intent's vector (:data:`policy.intent.INTENT_SPEC` order), ``None`` when unset or empty."""
        return (self.plan_intent.values or None) if self.plan_intent is not None else None

    @property
    def colocation(self) -> Mapping[str, float]:
        """The intent's per-service co-location priorities (read-only; the same object until the intent
        changes), empty when unset."""
        return self.plan_intent.colocation_priority if self.plan_intent is not None else _NO_COLOCATION

    @property
    def ready(self) -> bool:
        """True once a snapshot has been set."""
        return self.snapshot is not None and self.index is not None

    def age_s(self, now_s: float) -> float:
        """Seconds since the snapshot was last updated or touched (``now_s`` on the store's clock);
        ``inf`` when there is none."""
        if self.updated_at_s is None:
            return math.inf
        return max(0.0, now_s - self.updated_at_s)

    def is_stale(self, now_s: float, max_age_s: float) -> bool:
        """True when a snapshot exists and is older than ``max_age_s`` seconds; ``max_age_s <= 0`` = never."""
        return self.ready and max_age_s > 0 and self.age_s(now_s) > max_age_s

    def embedding_problem(self, service: str, now_s: float) -> str | None:
        """Why ``service`` cannot be scored with embeddings: ``"missing"`` (no copy yet, or the copy lacks the
        service) or ``"stale"`` (the copy was computed more than ``embeddings_max_age_s`` ago, unix seconds
        ``now_s``); ``None`` when it can, or when embeddings are not required."""
        if not self.embeddings_required:
            return None
        e = self.embeddings
        if e is None or e.row(service) is None:
            return "missing"
        if self.embeddings_max_age_s > 0 and e.age_s(now_s) > self.embeddings_max_age_s:
            return "stale"
        return None


class SnapshotStore:
    """Thread-safe holder of the extender's :class:`StoreView`.

    Writers (:meth:`update`, :meth:`set_graph`, :meth:`set_intent`, :meth:`touch`, :meth:`load_file`) are
    serialised by a lock and publish a new view with one reference assignment; :meth:`get` takes no lock.

    ``clock``: seconds, used for ``updated_at_s`` and staleness (default :func:`time.time`).
    """

    def __init__(self, clock: Callable[[], float] = time.time):
        self.clock = clock
        self._lock = threading.Lock()
        self._graph_override: ServiceGraph | None = None
        self._raw: ClusterSnapshot | None = None
        self._view = StoreView()
        self._listeners: list[Callable[[StoreView], None]] = []

    # ---- listeners -------------------------------------------------------------------------------
    def subscribe(self, listener: Callable[[StoreView], None]) -> None:
        """Call ``listener(view)`` after every change is published (snapshot, touch, graph, intent, embeddings),
        in the writer's thread, after the writer's lock is released: off the request path. A listener that
        raises is logged and does not stop the write or the other listeners."""
        self._listeners = [*self._listeners, listener]

    def _notify(self, view: StoreView) -> StoreView:
        for fn in self._listeners:
            try:
                fn(view)
            except Exception as exc:  # noqa: BLE001 - a listener must not break the feed
                log.warning("store listener %r failed: %s: %s", fn, type(exc).__name__, exc)
        return view

    # ---- reading ---------------------------------------------------------------------------------
    def get(self) -> StoreView:
        """The current view (immutable; safe to keep and read from any thread)."""
        return self._view

    @property
    def ready(self) -> bool:
        """True once a snapshot has been set."""
        return self._view.ready

    # ---- writing ---------------------------------------------------------------------------------
    def update(
        self, snapshot: ClusterSnapshot, now_s: float | None = None, index: ClusterIndex | None = None
    ) -> StoreView:
        """Replace the snapshot: apply the graph set with :meth:`set_graph` (if any; else the snapshot's
        own ``graph`` is used), build its :class:`ClusterIndex` in the caller's thread, publish.
        ``now_s``: the time to record (default: the store clock). ``index``: the caller's index of exactly these
        nodes and pods (e.g. maintained incrementally, :func:`extender.kube.updated_index`), used instead of a
        fresh build (its ``snapshot`` is replaced by the published one). Returns the new view."""
        if not isinstance(snapshot, ClusterSnapshot):
            raise TypeError(f"snapshot: expected a ClusterSnapshot, got {type(snapshot).__name__}")
        with self._lock:
            graph = self._graph_override if self._graph_override is not None else snapshot.graph
            snap = snapshot if graph is snapshot.graph else snapshot.with_graph(graph)
            if index is None:
                index = ClusterIndex.build(snap)
            elif index.snapshot is not snap:
                index = replace(index, snapshot=snap)
            self._raw = snapshot
            v = self._view
            self._view = replace(
                v,
                snapshot=snap,
                index=index,
                graph=graph,
                updated_at_s=self.clock() if now_s is None else float(now_s),
                generation=v.generation + 1,
            )
            view = self._view
        return self._notify(view)

    def touch(self, now_s: float | None = None) -> StoreView:
        """Mark the current snapshot as still current (e.g. a watch that is connected but saw no events),
        so it does not go stale. No effect before the first :meth:`update`."""
        with self._lock:
            v = self._view
            if v.ready:
                self._view = replace(v, updated_at_s=self.clock() if now_s is None else float(now_s))
            view = self._view
        return self._notify(view)

    def set_graph(self, graph: ServiceGraph | None) -> StoreView:
        """Use ``graph`` as the call graph for this and every later snapshot (``None``: go back to each
        snapshot's own graph). The index is reused: it does not depend on the graph."""
        if graph is not None and not isinstance(graph, ServiceGraph):
            raise TypeError(f"graph: expected a ServiceGraph or None, got {type(graph).__name__}")
        with self._lock:
            self._graph_override = graph
            v = self._view
            if self._raw is None:
                self._view = replace(v, graph=graph or ServiceGraph(), generation=v.generation + 1)
            else:
                eff = graph if graph is not None else self._raw.graph
                snap = self._raw.with_graph(eff)
                index = replace(v.index, snapshot=snap) if v.index is not None else ClusterIndex.build(snap)
                self._view = replace(v, snapshot=snap, index=index, graph=eff, generation=v.generation + 1)
            view = self._view
        return self._notify(view)

    def set_intent(
        self, intent: Intent | None, version: str | int | None = None, pending_moves: tuple[PendingMove, ...] = ()
    ) -> StoreView:
        """Set the high level's intent the placement policy scores with (``None``: defaults), its producer's
        label ``version`` and the make-before-break moves in progress that came with it (``pending_moves``; for a
        service named twice, the one that expires last). The intent was validated where it was made or decoded
        (:class:`policy.intent.Intent`, :class:`policy.intent.PendingMove`); raises ``TypeError`` for anything else,
        and nothing changes then."""
        if intent is not None and not isinstance(intent, Intent):
            raise TypeError(f"intent: expected a policy.intent.Intent or None, got {type(intent).__name__}")
        moves: dict[tuple[str, str], PendingMove] = {}
        for m in pending_moves:
            if not isinstance(m, PendingMove):
                raise TypeError(f"pending_moves: expected policy.intent.PendingMove values, got {type(m).__name__}")
            k = (m.namespace, m.service)
            if k not in moves or m.expires_at_s > moves[k].expires_at_s:
                moves[k] = m
        with self._lock:
            v = self._view
            self._view = replace(
                v,
                plan_intent=intent,
                intent_version=None if version is None else str(version),
                pending_moves=MappingProxyType(moves) if moves else _NO_MOVES,
                generation=v.generation + 1,
            )
            view = self._view
        return self._notify(view)

    def set_embeddings(self, entry: EmbeddingEntry | None) -> StoreView:
        """Use ``entry`` as the current copy of the topology embeddings (``None``: drop the copy)."""
        if entry is not None and not isinstance(entry, EmbeddingEntry):
            raise TypeError(f"embeddings: expected an EmbeddingEntry or None, got {type(entry).__name__}")
        with self._lock:
            v = self._view
            self._view = replace(v, embeddings=entry, generation=v.generation + 1)
            view = self._view
        return self._notify(view)

    def require_embeddings(self, max_age_s: float = 0.0, required: bool = True) -> StoreView:
        """Make scoring depend on the embeddings (a cache is configured): a service without a fresh row
        scores neutral (see :meth:`StoreView.embedding_problem`). ``max_age_s``: staleness, 0 = never."""
        if not (max_age_s >= 0 and math.isfinite(max_age_s)):
            raise ValueError(f"max_age_s: expected a finite number >= 0, got {max_age_s!r}")
        with self._lock:
            v = self._view
            self._view = replace(
                v,
                embeddings_required=bool(required),
                embeddings_max_age_s=float(max_age_s),
                generation=v.generation + 1,
            )
            view = self._view
        return self._notify(view)

    def set_decisions(self, recorder: Any, shadow: bool = False) -> StoreView:
        """Record every prioritize answer in ``recorder`` (a :class:`extender.decisions.DecisionRecorder`, or
        ``None``: no record) and, with ``shadow``, answer scored pods with neutral scores (``mode: shadow``). The
        recorder also listens to the store (:meth:`subscribe`): it resolves each pod's binding from the snapshots
        the watch publishes."""
        if shadow and recorder is None:
            raise ValueError("shadow mode needs a decision recorder")
        with self._lock:
            v = self._view
            self._view = replace(v, decisions=recorder, shadow=bool(shadow), generation=v.generation + 1)
            view = self._view
        if recorder is not None and recorder.on_view not in self._listeners:
            self.subscribe(recorder.on_view)
        return self._notify(view)

    def load_file(self, path: str | Path, now_s: float | None = None) -> StoreView:
        """Load a static cluster state — a Kubernetes ``List`` as ``kubectl get nodes,pods,pdb -A -o json``
        prints it, or a directory of such files (:func:`policy.observe.load_snapshot_objects`) — and
        :meth:`update` with it. The snapshot's ``taken_at_s`` is the store clock's time. Raises
        :class:`policy.observe.ObjectError` (one line naming file, object, field, value) for anything that is not
        such a List (``null``, ``{}``, ``[]``, an empty directory, ...); nothing changes then. Inconsistencies
        that do not stop the load (pods bound to nodes not in the file, duplicate pods) are logged as one
        warning line each (:func:`policy.observe.snapshot_warnings`)."""
        objs = load_snapshot_objects(path)
        t = self.clock() if now_s is None else float(now_s)
        snap = snapshot_from_objects(objs, taken_at_s=t, source=str(path))
        for w in snapshot_warnings(snap):
            log.warning("snapshot %s: %s", path, w)
        return self.update(snap, now_s=t)


def graph_with_annotations(graph: ServiceGraph | None, pods) -> ServiceGraph:
    """``graph`` (may be ``None``) united with the edges declared by the pods' ``hrl-scheduler.io/depends-on:
    "svc-a,svc-b"`` annotations; every pod's service becomes a vertex. Mirrors
    ``descheduler.snapshot.graph_from_annotations`` (the two apps may not import each other)."""
    services = set(graph.services) if graph is not None else set()
    edges = list(graph.edges) if graph is not None else []
    # The pods of one workload carry the same annotation: each distinct (service, annotation) once. An
    # annotation's edge carries no rate or latency, so merging its duplicates (ServiceGraph.build) changes nothing.
    declared: dict[tuple[str, str], None] = {}
    for p in pods:
        services.add(p.service)
        ann = p.annotations.get(ANNOTATION_DEPENDS_ON)
        if ann:
            declared[(p.service, ann)] = None
    for service, ann in declared:
        for dep in ann.split(","):
            if dep.strip():
                edges.append(ServiceEdge(service, dep.strip()))
    source = graph.source if graph is not None and graph.source else ""
    return ServiceGraph.build(services, edges, source=(source + "; annotations").lstrip("; "))
