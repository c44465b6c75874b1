"""The hand-written low-level policy: :class:`TopologyHeuristic` scores a node by where the pod's
callers and callees run and by how loaded the node is (numpy only)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from policy.cache import LoadTerm
from policy.index import ClusterIndex
from policy.state import PodInfo, ServiceGraph

from .interface import MAX_EXTENDER_PRIORITY, admission_mask, intent_value, resource_fit_failures

__all__ = ["TopologyHeuristic", "neighbor_weights"]

_NEIGHBORS_LOCK = threading.Lock()
_NEIGHBORS: list[tuple[ServiceGraph, float, dict[str, dict[str, float]]]] = []


def neighbor_weights(graph: ServiceGraph, service: str, default_rps: float = 1.0) -> dict[str, float]:
    """:meth:`ServiceGraph.neighbor_weights` of every service of ``graph``, computed once per graph object
    (O(E)) and then read in O(1): the planners ask it for every pod of a cycle. Do not mutate the result."""
    for g, d, cached in _NEIGHBORS:
        if g is graph and d == default_rps:
            return cached.get(service, _NO_WEIGHTS)
    table: dict[str, dict[str, float]] = {}
    for e in graph.edges:  # the same accumulation, in the same order, as ServiceGraph.neighbor_weights
        if e.caller == e.callee:
            continue
        r = default_rps if e.rps is None else e.rps
        a = table.setdefault(e.caller, {})
        a[e.callee] = a.get(e.callee, 0.0) + r
        b = table.setdefault(e.callee, {})
        b[e.caller] = b.get(e.caller, 0.0) + r
    with _NEIGHBORS_LOCK:
        _NEIGHBORS.insert(0, (graph, default_rps, table))
        del _NEIGHBORS[4:]
    return table.get(service, _NO_WEIGHTS)


_NO_WEIGHTS: dict[str, float] = {}


@dataclass(frozen=True)
class TopologyHeuristic:
    """A topology- and load-aware heuristic: prefer nodes hosting the pod's callers and callees,
    weighted by call rate; avoid hot nodes.

    For a pod of service *s* and candidate node *n*::

        locality(n) = Σ_t w(s,t) · pods_t(n) / pods_t        (w = call rate s↔t, normalised to Σ w = 1)
        load(n)     = (requested_cpu(n) + pod_cpu) / allocatable_cpu(n)   (measured use when known, if higher)
        penalty(n)  = clip((load(n) - target_utilization) / (1 - target_utilization), 0, 1)
        score(n)    = 10 · clip(a · locality(n) · (1 - b · penalty(n)) , 0, 1)

    with *a* = ``locality_weight`` and *b* = ``balance_weight`` from the intent. A pod whose neighbours
    are not placed yet scores 0 everywhere (neutral), so kube-scheduler's own plugins decide.
    """

    name: str = "topology-heuristic"
    target_utilization: float = 0.7
    default_rps: float = 1.0

    def filter(self, pod: PodInfo, candidates: Sequence[str], index: ClusterIndex) -> dict[str, str]:
        return resource_fit_failures(pod, candidates, index)

    #: :meth:`filter` is exactly :func:`policy.lowlevel.resource_fit_failures` (:func:`~policy.lowlevel.admission_mask`
    #: as a mask): a caller that applied that mask already need not filter again.
    filter_is_admission = True

    def filter_mask(self, pod: PodInfo, positions: np.ndarray, index: ClusterIndex) -> np.ndarray:
        """:meth:`filter` as a mask over node positions (True: passes), vectorised
        (:func:`policy.lowlevel.admission_mask`)."""
        return admission_mask(pod, positions, index)

    def locality(self, pod: PodInfo, candidates: Sequence[str], index: ClusterIndex) -> np.ndarray:
        """(len(candidates),) float64 in [0, 1]: call-rate-weighted share of neighbour pods per node."""
        return self._locality(pod, index.positions(candidates), index)

    def _locality(self, pod: PodInfo, pos: np.ndarray, index: ClusterIndex) -> np.ndarray:
        out = np.zeros(len(pos))
        weights = neighbor_weights(index.snapshot.graph, pod.service, self.default_rps)
        total_w = sum(weights.values())
        if total_w <= 0:
            return out
        known = pos >= 0
        for svc, w in weights.items():
            counts = index.service_nodes.get(svc)
            tot = index.service_total.get(svc, 0)
            if counts is None or tot <= 0:
                continue
            out[known] += (w / total_w) * counts[pos[known]] / tot
        return out

    def support(self, pod: PodInfo, index: ClusterIndex) -> np.ndarray:
        """Positions (in ``index.node_names``, ascending) of the nodes where :meth:`score` may be above 0: those
        hosting a pod of a neighbour of the pod's service (``score`` is exactly 0 everywhere else, whatever the
        load and intent). O(neighbours · N) numpy."""
        weights = neighbor_weights(index.snapshot.graph, pod.service, self.default_rps)
        if sum(weights.values()) <= 0:
            return np.zeros(0, dtype=np.int64)
        mask = np.zeros(len(index.node_names), dtype=bool)
        for svc in weights:
            counts = index.service_nodes.get(svc)
            if counts is not None and index.service_total.get(svc, 0) > 0:
                mask |= counts > 0
        return np.flatnonzero(mask)

    def load(self, pod: PodInfo, candidates: Sequence[str], index: ClusterIndex) -> np.ndarray:
        """(len(candidates),) float64: CPU utilisation of each node with the pod added (0 where unknown)."""
        return self._load(pod, index.positions(candidates), index)

    def _load(self, pod: PodInfo, pos: np.ndarray, index: ClusterIndex) -> np.ndarray:
        out = np.zeros(len(pos))
        known = pos >= 0
        p = pos[known]
        alloc = np.maximum(index.alloc_cpu_m[p], 1.0)
        own_i = index.node_pos.get(pod.node_name, -2) if pod.node_name is not None else -2
        own = np.where(p == own_i, float(pod.requests.cpu_m), 0.0)
        req = (index.req_cpu_m[p] - own + pod.requests.cpu_m) / alloc
        use = index.usage_cpu_m[p]
        use = np.where(np.isnan(use), 0.0, (use + pod.requests.cpu_m) / alloc)
        out[known] = np.maximum(req, use)
        return out

    def score(
        self,
        pod: PodInfo,
        candidates: Sequence[str],
        index: ClusterIndex,
        intent: Sequence[float] | None = None,
        *,
        embeddings: Any = None,
    ) -> np.ndarray:
        """(C,) float64 in [0, 10] (the class docstring); ``embeddings`` is ignored (no learned rows)."""
        a = max(0.0, intent_value(intent, "locality_weight"))
        b = max(0.0, intent_value(intent, "balance_weight"))
        pos = index.positions(candidates)
        loc = self._locality(pod, pos, index)
        t = self.target_utilization
        penalty = np.clip((self._load(pod, pos, index) - t) / (1.0 - t), 0.0, 1.0)
        raw = np.clip(a * loc * (1.0 - b * penalty), 0.0, 1.0)
        return MAX_EXTENDER_PRIORITY * raw

    # ---- the plugin's table (policy.lowlevel.scoretable): score = load_term applied to score_parts ----------
    #: the base (locality) reads no requests: one table row per service serves every pod of it
    base_reads_requests = False

    def load_term(self, index: ClusterIndex) -> tuple[LoadTerm, np.ndarray]:
        """The load penalty as the plugin's load term: ``10 · clip(base · (1 − b · penalty), 0, 1)`` with
        ``from_frac`` the target utilisation, and each node's CPU in use before the pod, ``max(requested, measured)``
        (requested where unmeasured), millicores (N,)."""
        use = index.usage_cpu_m
        used = np.where(np.isnan(use), index.req_cpu_m, np.maximum(index.req_cpu_m, use))
        return LoadTerm(scale=float(MAX_EXTENDER_PRIORITY), from_frac=self.target_utilization, cap=1.0), used

    def score_parts(
        self, pod: PodInfo, candidates: Sequence[str], index: ClusterIndex, intent: Sequence[float] | None = None
    ) -> tuple[np.ndarray, float]:
        """``(locality_weight · locality (C,), balance_weight)``: :meth:`score` is
        :func:`policy.lowlevel.apply_load_term` of these with :meth:`load_term`, bit for bit, for an unbound pod."""
        a = max(0.0, intent_value(intent, "locality_weight"))
        b = max(0.0, intent_value(intent, "balance_weight"))
        every = candidates is index.node_names  # the table's case: no name lookups
        pos = np.arange(len(index.node_names)) if every else index.positions(candidates)
        return a * self._locality(pod, pos, index), b
