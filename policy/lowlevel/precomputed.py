"""Node-score vectors computed off the request path: :class:`NodeScoreTable`.

A placement policy's score of a candidate node depends on the pod only through a few of its fields (its
service, its CPU and memory requests, whether it is already bound somewhere) and on the node through the
snapshot's arrays. So for one snapshot index, one intent (with its per-service co-location priorities) and one
set of service rows, the score of **every**
node for a pod of service *s* requesting (cpu, memory) is one vector of length N, computed once; a request is
then a gather of the candidates' positions. :class:`NodeScoreTable` holds those vectors per *key* =
(service, cpu_m, memory_bytes) and is warmed in the background (:meth:`NodeScoreTable.warm`, called by the
extender whenever its store publishes a new snapshot, intent or embeddings) for the keys of the pending pods
and of recent requests.

Exactness: the vector is ``policy.score(pod, every node, index, intent)``, the same call the direct path makes
on the candidates. :class:`~policy.lowlevel.TopologyHeuristic` is element-wise, so the gathered values are
bit-identical to the direct ones; :class:`~policy.lowlevel.LearnedPlacement` is element-wise except its matrix
products, whose float32 sums may differ in the last bits with the batch size (BLAS blocking), far below the
rounding to integer scores (tests/unit/test_precomputed_scores.py checks both on the bench's cluster). A pod
already bound to a node of the snapshot (the descheduler's what-if, never a scheduling request) is not served
from the table: its own node changes its features.

Thread safety: :meth:`lookup` takes no lock and reads one immutable generation; :meth:`warm` builds a new
generation and publishes it with one assignment.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from policy.index import ClusterIndex
from policy.intent import Intent
from policy.state import PodInfo, Resources

from .interface import PlacementPolicy

__all__ = ["ScoreKey", "score_key", "NodeScoreTable"]

log = logging.getLogger(__name__)

#: (service, cpu_m, memory_bytes): what a row-wise policy's score reads of an unbound pod.
ScoreKey = tuple[str, int, int]


def score_key(pod: PodInfo) -> ScoreKey:
    """The table key of ``pod``: its service and its effective CPU (millicores) and memory (bytes) requests."""
    return (pod.service, int(pod.requests.cpu_m), int(pod.requests.memory_bytes))


def _template_pod(key: ScoreKey) -> PodInfo:
    service, cpu_m, mem = key
    return PodInfo(name="hrl-score-template", namespace="", service=service, requests=Resources(cpu_m, mem))


@dataclass(frozen=True)
class _Generation:
    """One consistent set of vectors: valid for exactly this index, intent, co-location map (by identity) and
    service-rows token."""

    index: ClusterIndex | None = None
    intent: tuple[float, ...] | None = None
    colocation: Mapping[str, float] | None = None
    rows: Any = None
    vectors: dict[ScoreKey, np.ndarray] | None = None


class NodeScoreTable:
    """Per-key node-score vectors of ``policy`` for one snapshot index at a time.

    ``policy``: a :class:`~policy.lowlevel.PlacementPolicy` whose ``score`` is row-wise (each candidate's score
    depends on that candidate only), as :class:`~policy.lowlevel.TopologyHeuristic` and
    :class:`~policy.lowlevel.LearnedPlacement` are. ``max_keys``: vectors kept per generation (the most
    recently wanted first), >= 1; ``recent_keys``: how many keys of past requests :meth:`warm` computes besides
    the pending pods'. Memory: ``max_keys × N × 8`` bytes (200 keys × 5,000 nodes = 8 MB).

    Counters (read by metrics): ``hits``, ``misses``, ``computed`` (vectors computed), ``warm_seconds`` (time
    spent in :meth:`warm`). Raises ``ValueError`` for ``max_keys < 1``.
    """

    def __init__(self, policy: PlacementPolicy, max_keys: int = 256, recent_keys: int = 64):
        if max_keys < 1:
            raise ValueError(f"max_keys: expected an integer >= 1, got {max_keys!r}")
        self.policy = policy
        self.max_keys = int(max_keys)
        self._gen = _Generation()
        self._recent: OrderedDict[ScoreKey, None] = OrderedDict()
        self._recent_max = max(int(recent_keys), 0)
        self._lock = threading.Lock()
        self._pending: tuple[ClusterIndex | None, list[ScoreKey]] = (None, [])
        self.hits = 0
        self.misses = 0
        self.computed = 0
        self.warm_seconds = 0.0

    # ---- the service rows a learned policy reads (part of what a vector depends on) ---------------------
    def rows_token(self, index: ClusterIndex, service: str) -> Any:
        """What besides the index and intent the policy's scores of ``service`` depend on: a
        :class:`~policy.lowlevel.LearnedPlacement`'s service rows object (``None`` for other policies, or when it
        has no rows for ``service``)."""
        rows_of = getattr(self.policy, "service_rows", None)
        if rows_of is None:
            return None
        try:
            return rows_of(index, service)
        except Exception:  # noqa: BLE001 - no rows: the direct path decides (and answers neutral)
            return None

    def _score_all(
        self,
        key: ScoreKey,
        index: ClusterIndex,
        intent: Sequence[float] | None,
        rows: Any,
        colocation: Mapping[str, float] | None = None,
    ) -> np.ndarray:
        pod = _template_pod(key)
        if colocation:  # the table is keyed by the store's vector and priorities (extender/server.py warms it so)
            intent = Intent(tuple(intent or ()), colocation_priority=colocation).for_service(key[0])
        if rows is not None:
            raw = self.policy.score(pod, index.node_names, index, intent, embeddings=rows)
        else:
            raw = self.policy.score(pod, index.node_names, index, intent)
        v = np.asarray(raw, dtype=np.float64)
        if v.shape != (len(index.node_names),):
            raise ValueError(f"policy {self.policy.name!r} returned shape {v.shape} for {len(index.node_names)} nodes")
        v.setflags(write=False)
        return v

    # ---- requests ---------------------------------------------------------------------------------------
    def lookup(
        self,
        pod: PodInfo,
        index: ClusterIndex,
        intent: Sequence[float] | None,
        rows: Any = None,
        colocation: Mapping[str, float] | None = None,
    ) -> np.ndarray | None:
        """The (N,) float64 scores of every node of ``index`` (in ``index.node_names`` order) for ``pod``, or
        ``None`` when the table has no current vector for it (then score directly; the key is remembered and
        computed at the next :meth:`warm`). ``rows``: :meth:`rows_token` of the pod's service; ``colocation``: the
        intent's per-service co-location priorities, the same object :meth:`warm` was given (compared by
        identity). A pod bound to a node of ``index`` is never served from the table."""
        key = score_key(pod)
        g = self._gen
        v = None
        if (
            g.vectors is not None
            and g.index is index
            and g.rows is rows
            and g.intent == (None if intent is None else tuple(intent))
            and g.colocation is (colocation or None)
            and (pod.node_name is None or pod.node_name not in index.node_pos)
        ):
            v = g.vectors.get(key)
        if v is None:
            self.misses += 1
            self._remember(key)
        else:
            self.hits += 1
        return v

    def _remember(self, key: ScoreKey) -> None:
        if self._recent_max == 0:
            return
        with self._lock:
            self._recent[key] = None
            self._recent.move_to_end(key)
            while len(self._recent) > self._recent_max:
                self._recent.popitem(last=False)

    # ---- off the request path -----------------------------------------------------------------------------
    def keys_for(self, index: ClusterIndex) -> list[ScoreKey]:
        """The keys :meth:`warm` computes for ``index``: the pending pods' (unbound, not terminating, in the
        call graph; the scheduler's queue as the snapshot sees it), then those of recent requests, at most
        ``max_keys``, without duplicates."""
        cached_index, pending = self._pending
        if cached_index is not index:  # once per index: a touch of the same snapshot does not walk its pods
            graph = index.snapshot.graph
            pending = list(
                dict.fromkeys(
                    score_key(p)
                    for p in index.snapshot.pods
                    if p.node_name is None and not p.terminating and p.service in graph.services
                )
            )
            self._pending = (index, pending)
        out: dict[ScoreKey, None] = dict.fromkeys(pending)
        with self._lock:
            recent = list(reversed(self._recent))
        for k in recent:
            out[k] = None
        return list(out)[: self.max_keys]

    def warm(
        self,
        index: ClusterIndex | None,
        intent: Sequence[float] | None,
        keys: Iterable[ScoreKey] | None = None,
        deadline_s: float | None = None,
        colocation: Mapping[str, float] | None = None,
    ) -> int:
        """Compute the vectors of ``keys`` (default :meth:`keys_for`) for ``index`` and ``intent`` (each service's
        locality weight scaled by its ``colocation`` priority, :meth:`policy.intent.Intent.for_service`) and publish
        them as the current generation (vectors of the previous generation for the same index, intent and rows
        are reused). ``deadline_s``: a :func:`time.monotonic` time after which no further key is started.
        Returns the number of vectors computed. A key whose computation raises is skipped (logged at DEBUG: the
        direct path then answers for it, neutral when the policy cannot score it)."""
        if index is None:
            return 0
        t0 = time.perf_counter()
        intent_t = None if intent is None else tuple(float(x) for x in intent)
        colocation = colocation or None
        old = self._gen
        keys = self.keys_for(index) if keys is None else list(keys)
        vectors: dict[ScoreKey, np.ndarray] = {}
        rows_seen: Any = _UNSET
        computed = 0
        for key in keys:
            if len(vectors) >= self.max_keys or (deadline_s is not None and time.monotonic() > deadline_s):
                break
            if key[0] not in index.snapshot.graph.services:
                continue
            rows = self.rows_token(index, key[0])
            if rows_seen is _UNSET:
                rows_seen = rows
            elif rows is not rows_seen:  # one rows object per generation (the learned policy has one per graph)
                continue
            if (
                old.vectors is not None
                and old.index is index
                and old.intent == intent_t
                and old.colocation is colocation
                and old.rows is rows
            ):
                v = old.vectors.get(key)
                if v is not None:
                    vectors[key] = v
                    continue
            try:
                vectors[key] = self._score_all(key, index, intent_t, rows, colocation)
                computed += 1
            except Exception as exc:  # noqa: BLE001 - see the docstring
                log.debug("score table: %s: %s: %s", key, type(exc).__name__, exc)
        self._gen = replace(
            old,
            index=index,
            intent=intent_t,
            colocation=colocation,
            rows=None if rows_seen is _UNSET else rows_seen,
            vectors=vectors,
        )
        self.computed += computed
        self.warm_seconds += time.perf_counter() - t0
        return computed

    def clear(self) -> None:
        """Drop every vector (lookups miss until the next :meth:`warm`)."""
        self._gen = _Generation()

    def __len__(self) -> int:
        v = self._gen.vectors
        return 0 if v is None else len(v)


_UNSET: Any = object()
