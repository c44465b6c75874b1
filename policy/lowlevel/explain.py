"""Per-decision explanations of the low level: every score of a (pod, node) as named contributions that sum to it.

:func:`explain_scores` decomposes what :meth:`PlacementPolicy.score` returns for each candidate into
:class:`Contribution` values (score points, 0..10 scale) whose sum is the score, exactly (up to float rounding):

- :class:`~policy.lowlevel.TopologyHeuristic` (``10 · clip(a · locality · (1 − b · penalty), 0, 1)``), exactly:
  one contribution per neighbour service on the node (``10 · w_t / Σw · pods_t(n) / pods_t``, by name and call
  rate), the intent's locality weight (``10 · (a − 1) · locality``), the CPU overload penalty
  (``−10 · a · b · locality · penalty``) and the clip to 0..10;
- :class:`~policy.lowlevel.LearnedPlacement` (``clip(10 · sigmoid(z(x)) + g · adj(x), 0, 10) · f(x)``,
  :mod:`policy.lowlevel.learned`):

  - the **intent terms** ``g · adj(x)``, exactly: ``g (λ − 1) ½ caller_node_share`` and ``g (λ − 1) ½
    callee_node_share`` (split over the caller / callee services like the features are), ``−g max(β − 1, 0) ·
    overload``; any part of :func:`~policy.lowlevel.intent_adjustment` these terms do not cover (a later change
    of its formula) is its own contribution ``intent_other``, so the sum stays exact;
  - the **clip** to 0..10 (``clip(u) − u``) and the **saturation guard** (``s · f − s``, :func:`saturation_factor`),
    exactly;
  - the **network** ``10 · sigmoid(z(x))``: its value at a reference row ``x₀`` plus integrated gradients
    (Sundararajan, Taly & Yan, "Axiomatic Attribution for Deep Networks", ICML 2017) along the straight path from
    ``x₀`` to ``x``: ``IG_j = (x_j − x₀_j) ∫₀¹ ∂N/∂x_j(x₀ + α(x − x₀)) dα``, the integral by
    :data:`IG_POINTS`-point Gauss–Legendre quadrature (the network is a composition of tanh layers, smooth, so the
    quadrature converges fast). Completeness (``Σ_j IG_j = N(x) − N(x₀)``) holds up to the quadrature error,
    which is reported as ``integration_error`` (a contribution, so the parts still sum to the score; tested to
    stay under 1e-4 points). The reference row: every context column at the bundle's normalisation mean (the
    training set's average candidate), except the co-location and spread columns at 0 (none of the service's
    callers, callees or other pods on the node or in its zone), the intent columns at their defaults, and the
    service block (embedding) at the pod's own (so the reference is *this* service on an average node with none
    of its neighbours). Columns are found by name in the bundle's feature spec, never by position: a column
    this module does not know gets the mean as reference and its own contribution under its name.

  Attributions are grouped into the factors users reason about (:data:`FACTORS`): callers and callees on the node
  and in its zone (one contribution per service, the column's attribution split in proportion to each service's
  share of the column, which is exact since the reference is 0), CPU pressure, memory, pod count, call rates,
  the service's own pods (spread), the intent as the network reads it.

- any other policy: one contribution ``score`` (no decomposition known).

Units: score points (the extender answers ``round_half_up(score)``, 0..10). Cost: for C candidates,
``IG_POINTS · C`` forward and backward passes of the MLP (numpy, microseconds per row): computed off the
request path (the extender's shadow log, ``hrl-policy explain``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from policy.encoder import NODE_SPEC
from policy.index import ClusterIndex
from policy.intent import INTENT_SPEC, intent_value
from policy.state import PodInfo

from .heuristic import TopologyHeuristic, neighbor_weights
from .interface import MAX_EXTENDER_PRIORITY, PlacementPolicy
from .learned import OVERLOAD_FROM, LearnedPlacement, intent_adjustment, saturation_factor, scores_from_logits

__all__ = [
    "IG_POINTS",
    "FACTORS",
    "Contribution",
    "NodeExplanation",
    "Explanation",
    "explain_scores",
    "mlp_forward_grad",
    "integrated_gradients",
]

#: Gauss–Legendre points of the integrated-gradients quadrature.
IG_POINTS = 32

#: factor → what it means (the ``factor`` of a :class:`Contribution`).
FACTORS: dict[str, str] = {
    "reference": "the network's score for this service on an average node with none of its neighbours",
    "callers_on_node": "pods of the service's callers on the node (by call rate)",
    "callees_on_node": "pods of the service's callees on the node (by call rate)",
    "callers_in_zone": "pods of the service's callers in the node's zone",
    "callees_in_zone": "pods of the service's callees in the node's zone",
    "cpu_pressure": "the node's CPU requests, use and headroom with the pod added",
    "memory": "the node's memory requests with the pod added",
    "pods": "the node's pod count",
    "call_rates": "how busy the service's calls are",
    "spread": "the service's own other pods on the node and in its zone",
    "intent": "the intent's weights (as the network reads them, or as the policy applies them)",
    "intent_other": "the part of the intent adjustment no named term covers",
    "saturation_guard": "the saturation guard: the score scaled down from 70 % CPU use with the pod added",
    "clip": "the score clipped to 0..10",
    "integration_error": "the integrated-gradients quadrature error (Σ attributions − (N(x) − N(x₀)))",
    "score": "the policy's score (no decomposition for this policy)",
}

_COLUMN_FACTOR: dict[str, str] = {
    "pod_cpu_request_frac": "cpu_pressure",
    "cpu_requested_frac": "cpu_pressure",
    "cpu_used_frac": "cpu_pressure",
    "usage_known": "cpu_pressure",
    "cpu_headroom_cores": "cpu_pressure",
    "pod_memory_request_frac": "memory",
    "memory_requested_frac": "memory",
    "pods_frac": "pods",
    "caller_node_share": "callers_on_node",
    "callee_node_share": "callees_on_node",
    "caller_zone_share": "callers_in_zone",
    "callee_zone_share": "callees_in_zone",
    "log_caller_rps": "call_rates",
    "log_callee_rps": "call_rates",
    "rates_known": "call_rates",
    "same_service_node_share": "spread",
    "same_service_zone_share": "spread",
    "log_same_service_node_pods": "spread",
}
_ZERO_REFERENCE = frozenset(
    (
        "caller_node_share",
        "callee_node_share",
        "caller_zone_share",
        "callee_zone_share",
        "same_service_node_share",
        "same_service_zone_share",
        "log_same_service_node_pods",
    )
)
#: columns whose attribution is split over the neighbour services: column → (side, scope)
_PER_SERVICE = {
    "caller_node_share": ("callers", "node"),
    "callee_node_share": ("callees", "node"),
    "caller_zone_share": ("callers", "zone"),
    "callee_zone_share": ("callees", "zone"),
}
_SERVICE_BLOCK_FLAT = frozenset(f"svc_{n}" for n in NODE_SPEC.names)


@dataclass(frozen=True)
class Contribution:
    """One named part of a score, in score points (may be negative).

    ``factor``: one of :data:`FACTORS` (or a feature name the module does not know); ``part``: where it comes
    from (``network``: the learned network's attribution; ``intent_term``: the bundle's exact intent adjustment;
    ``guard``: the saturation guard; ``clip``; ``heuristic``: the hand-written policy's exact terms;
    ``reference``; ``quadrature``); ``service``: the neighbour service for per-service factors; ``detail``: one line
    for people (call rate, pods on the node)."""

    factor: str
    part: str
    value: float
    service: str = ""
    detail: str = ""

    @property
    def name(self) -> str:
        """``factor`` or ``factor/service``."""
        return f"{self.factor}/{self.service}" if self.service else self.factor

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"factor": self.factor, "part": self.part, "points": round(self.value, 6)}
        if self.service:
            d["service"] = self.service
        if self.detail:
            d["detail"] = self.detail
        return d


@dataclass(frozen=True)
class NodeExplanation:
    """The explanation of one candidate: ``score`` (float, 0..10, what the policy computed), ``served`` (the
    integer the extender answers), the contributions (their values sum to ``score``)."""

    node: str
    score: float
    served: int
    contributions: tuple[Contribution, ...]

    @property
    def total(self) -> float:
        """Σ contributions (equals :attr:`score` up to float rounding)."""
        return float(math.fsum(c.value for c in self.contributions))

    def by_factor(self) -> list[tuple[str, float]]:
        """``(name, points)`` summed over parts (network + intent term of one factor and service), largest
        magnitude first; the reference and the quadrature error left out."""
        acc: dict[str, float] = {}
        for c in self.contributions:
            if c.factor in ("reference", "integration_error"):
                continue
            acc[c.name] = acc.get(c.name, 0.0) + c.value
        return sorted(acc.items(), key=lambda kv: (-abs(kv[1]), kv[0]))

    def top(self, k: int = 3) -> list[tuple[str, float]]:
        """The ``k`` factors of :meth:`by_factor` with the largest magnitude."""
        return [kv for kv in self.by_factor() if abs(kv[1]) > 1e-9][:k]

    def summary(self, k: int = 3) -> str:
        """``"7.2: callers_on_node/frontend +3.1, cpu_pressure -1.2, ..."`` (one line)."""
        parts = ", ".join(f"{n} {v:+.2f}" for n, v in self.top(k))
        return f"{self.score:.2f}" + (f": {parts}" if parts else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "score": round(self.score, 6),
            "served": self.served,
            "contributions": [c.to_json() for c in self.contributions],
            "top": [{"name": n, "points": round(v, 4)} for n, v in self.top()],
        }


@dataclass(frozen=True)
class Explanation:
    """Every candidate's :class:`NodeExplanation` for one pod, in candidate order, and how it was computed
    (``method``: ``exact`` or ``integrated-gradients``, ``policy``, ``intent`` (the vector the pod was scored
    with), ``max_integration_error`` (points; 0 for exact methods))."""

    pod: str
    service: str
    policy: str
    method: str
    intent: tuple[float, ...]
    nodes: tuple[NodeExplanation, ...]
    max_integration_error: float = 0.0
    notes: tuple[str, ...] = field(default=())

    def node(self, name: str) -> NodeExplanation | None:
        return next((n for n in self.nodes if n.node == name), None)

    def best(self) -> NodeExplanation | None:
        """The candidate with the highest score (first in candidate order on ties)."""
        return max(self.nodes, key=lambda n: n.score, default=None)

    def to_json(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "service": self.service,
            "policy": self.policy,
            "method": self.method,
            "intent": list(self.intent),
            "max_integration_error_points": self.max_integration_error,
            "notes": list(self.notes),
            "nodes": [n.to_json() for n in self.nodes],
        }


def _served(score: float) -> int:
    return int(np.clip(np.floor(score + 0.5), 0, MAX_EXTENDER_PRIORITY))


# ---- neighbour shares (the per-service split of the co-location columns) ---------------------------------------


def _sides(index: ClusterIndex, service: str, default_rps: float) -> dict[str, list[tuple[str, float]]]:
    """``{"callers": [(service, rps)], "callees": [...]}`` of ``service`` in the index's graph (self-calls out; an
    edge without a rate counts ``default_rps``), as :func:`policy.lowlevel.featurize_candidates` reads them."""
    out: dict[str, list[tuple[str, float]]] = {"callers": [], "callees": []}
    for e in index.snapshot.graph.edges:
        if e.caller == e.callee:
            continue
        r = default_rps if e.rps is None else max(float(e.rps), 0.0)
        if e.callee == service:
            out["callers"].append((e.caller, r))
        if e.caller == service:
            out["callees"].append((e.callee, r))
    return out


def _neighbour_parts(
    index: ClusterIndex, pos: np.ndarray, side: list[tuple[str, float]], scope: str
) -> list[tuple[str, float, np.ndarray, np.ndarray]]:
    """Per neighbour service on one side: ``(service, rps, share (C,), pods there (C,))``, the service's part of
    the side's call-rate-weighted share of pods on the node (``scope="node"``) or in its zone."""
    total_w = sum(w for _t, w in side)
    out: list[tuple[str, float, np.ndarray, np.ndarray]] = []
    if total_w <= 0:
        return out
    p = np.where(pos >= 0, pos, 0)
    zones: dict[str, int] = {}
    zone = np.array([zones.setdefault(n.zone, len(zones)) for n in index.snapshot.nodes], dtype=np.int64)
    for t, w in side:
        counts = index.service_nodes.get(t)
        tot = index.service_total.get(t, 0)
        if counts is None or tot <= 0:
            continue
        here = counts[p] if scope == "node" else np.bincount(zone, weights=counts, minlength=len(zones))[zone[p]]
        here = np.where(pos >= 0, here, 0.0)
        out.append((t, w, w / (total_w * tot) * here, here))
    return out


# ---- the network ------------------------------------------------------------------------------------------------


def mlp_forward_grad(
    weights: Mapping[str, np.ndarray], x: np.ndarray, mean: np.ndarray, std: np.ndarray, layers: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(N, dN/dx)`` of ``N(x) = 10 · sigmoid(z(x))`` for ``placement-mlp-v1`` (:func:`policy.lowlevel.mlp_logits`:
    normalise, ``layers`` tanh layers, a linear output) at rows ``x`` (M, F), float64: ``N`` (M,), the gradient
    (M, F), by backpropagation through the same weights."""
    h = (np.asarray(x, dtype=np.float64) - mean) / std
    acts = []
    for i in range(layers):
        h = np.tanh(h @ weights[f"net.{2 * i}.weight"].astype(np.float64).T + weights[f"net.{2 * i}.bias"])
        acts.append(h)
    w_out = weights[f"net.{2 * layers}.weight"].astype(np.float64)
    z = (h @ w_out.T + weights[f"net.{2 * layers}.bias"]).reshape(-1)
    sig = np.where(z >= 0, 1.0 / (1.0 + np.exp(-np.abs(z))), np.exp(-np.abs(z)) / (1.0 + np.exp(-np.abs(z))))
    n = MAX_EXTENDER_PRIORITY * sig
    g = (MAX_EXTENDER_PRIORITY * sig * (1.0 - sig))[:, None] * w_out  # dN/dh_last (M, H)
    for i in reversed(range(layers)):
        g = g * (1.0 - acts[i] ** 2)
        g = g @ weights[f"net.{2 * i}.weight"].astype(np.float64)
    return n, g / std


def integrated_gradients(
    weights: Mapping[str, np.ndarray],
    x: np.ndarray,
    x0: np.ndarray,
    mean: np.ndarray,
    std: np.ndarray,
    layers: int,
    points: int = IG_POINTS,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Integrated gradients of ``N`` (:func:`mlp_forward_grad`) from reference rows ``x0`` to rows ``x`` (C, F):
    ``(attributions (C, F), N(x) (C,), N(x0) (C,))``; ``attributions.sum(1) ≈ N(x) − N(x0)`` up to the quadrature
    error (Gauss–Legendre, ``points`` nodes on [0, 1])."""
    x = np.asarray(x, dtype=np.float64)
    x0 = np.asarray(x0, dtype=np.float64)
    t, wq = np.polynomial.legendre.leggauss(points)
    alpha, wq = (t + 1.0) / 2.0, wq / 2.0
    C, F = x.shape
    path = x0[None, :, :] + alpha[:, None, None] * (x - x0)[None, :, :]  # (K, C, F)
    _n, grad = mlp_forward_grad(weights, path.reshape(-1, F), mean, std, layers)
    avg = np.tensordot(wq, grad.reshape(points, C, F), axes=(0, 0))  # (C, F)
    n_x, _ = mlp_forward_grad(weights, x, mean, std, layers)
    n_0, _ = mlp_forward_grad(weights, x0, mean, std, layers)
    return (x - x0) * avg, n_x, n_0


def _service_block(name: str) -> bool:
    return (name.startswith("svc_emb_") and name[8:].isdigit()) or name in _SERVICE_BLOCK_FLAT


def _reference_rows(x: np.ndarray, names: Sequence[str], mean: np.ndarray) -> np.ndarray:
    """The reference row of each candidate (module docstring): the mean, co-location and spread at 0, the intent
    at its defaults, the service block the pod's own."""
    x0 = np.broadcast_to(np.asarray(mean, dtype=np.float64), x.shape).copy()
    defaults = {f"intent_{n}": d for n, _doc, d in INTENT_SPEC}
    for j, name in enumerate(names):
        if name in _ZERO_REFERENCE:
            x0[:, j] = 0.0
        elif name in defaults:
            x0[:, j] = defaults[name]
        elif _service_block(name):
            x0[:, j] = x[:, j]
    return x0


def _learned(
    policy: LearnedPlacement,
    pod: PodInfo,
    candidates: Sequence[str],
    index: ClusterIndex,
    intent: Sequence[float] | None,
    embeddings: Any,
) -> Explanation:
    names = list(policy.spec.names)
    col = {n: j for j, n in enumerate(names)}
    x = np.asarray(policy.features(pod, candidates, index, intent, embeddings=embeddings), dtype=np.float64)
    x0 = _reference_rows(x, names, policy.mean)
    attr, n_x, n_0 = integrated_gradients(policy.weights, x, x0, policy.mean, policy.std, policy.layers)
    z = policy.logits(x.astype(np.float32))
    served = scores_from_logits(z, x, policy.intent_gain, policy.saturation_guard)
    n_served = scores_from_logits(z)  # 10 · sigmoid(z) as served (float32 network)
    pos = index.positions(candidates)
    sides = _sides(index, pod.service, 1.0)
    parts = {
        c: _neighbour_parts(index, pos, sides[side], scope) for c, (side, scope) in _PER_SERVICE.items() if c in col
    }
    g = policy.intent_gain
    lw = intent_value(intent, "locality_weight")
    bw = intent_value(intent, "balance_weight")
    adj = intent_adjustment(x) if g else np.zeros(len(candidates))
    factor = saturation_factor(x) if policy.saturation_guard else np.ones(len(candidates))
    notes = []
    if not np.allclose(n_x, n_served, atol=1e-3):
        notes.append("the network's forward pass here differs from the bundle's by more than 1e-3 points")
    out = []
    max_err = 0.0
    for i, node in enumerate(candidates):
        cs: list[Contribution] = [Contribution("reference", "reference", float(n_0[i]), detail=FACTORS["reference"])]
        for j, name in enumerate(names):
            a = float(attr[i, j])
            if _service_block(name) or a == 0.0:
                continue
            if name in parts and x[i, j] > 0:
                cs += _split(name, a, x[i, j], parts[name], i)
                continue
            cs.append(
                Contribution(
                    _COLUMN_FACTOR.get(name, "intent" if name.startswith("intent_") else name),
                    "network",
                    a,
                    detail=name,
                )
            )
        # the served network value (float32) minus the reference and the attributions: the quadrature error
        err = float(n_served[i] - n_0[i] - attr[i].sum())
        max_err = max(max_err, abs(err))
        cs.append(Contribution("integration_error", "quadrature", err))
        u = float(n_served[i])
        if g:
            terms = _intent_terms(x[i], col, g, lw, bw, parts, i)
            cs += terms
            other = g * float(adj[i]) - math.fsum(c.value for c in terms)
            if abs(other) > 1e-12:
                cs.append(Contribution("intent_other", "intent_term", other))
            u += g * float(adj[i])
        clipped = min(max(u, 0.0), MAX_EXTENDER_PRIORITY)
        if clipped != u:
            cs.append(Contribution("clip", "clip", clipped - u))
        if policy.saturation_guard and factor[i] != 1.0:
            cs.append(
                Contribution(
                    "saturation_guard",
                    "guard",
                    clipped * float(factor[i]) - clipped,
                    detail=f"CPU use {x[i, col['cpu_used_frac']]:.0%} with the pod: score x {factor[i]:.2f}"
                    if "cpu_used_frac" in col
                    else f"score x {factor[i]:.2f}",
                )
            )
        s = float(served[i])
        out.append(NodeExplanation(node, s, _served(s), tuple(cs)))
    return Explanation(
        pod.key,
        pod.service,
        getattr(policy, "version", "") or policy.name,
        "integrated-gradients",
        tuple(float(v) for v in (intent or ())),
        tuple(out),
        max_err,
        tuple(notes),
    )


def _split(
    name: str, a: float, xv: float, parts: list[tuple[str, float, np.ndarray, np.ndarray]], i: int
) -> list[Contribution]:
    """The attribution ``a`` of co-location column ``name`` (value ``xv`` > 0, reference 0) split over the
    neighbour services in proportion to their parts of the column (exact: the parts are normalised to sum 1)."""
    factor = _COLUMN_FACTOR[name]
    shares = [(t, w, float(sh[i]), float(here[i])) for t, w, sh, here in parts if sh[i] > 0]
    total = math.fsum(sh for _t, _w, sh, _h in shares)
    if total <= 0:
        return [Contribution(factor, "network", a, detail=name)]
    out = []
    for t, w, sh, here in shares:
        out.append(Contribution(factor, "network", a * sh / total, t, f"{w:g} calls/s, {here:g} pod(s) here"))
    return out


def _intent_terms(
    xi: np.ndarray,
    col: Mapping[str, int],
    g: float,
    lw: float,
    bw: float,
    parts: Mapping[str, list[tuple[str, float, np.ndarray, np.ndarray]]],
    i: int,
) -> list[Contribution]:
    """The exact terms of ``g · intent_adjustment`` (:func:`policy.lowlevel.intent_adjustment`), the locality term
    split over the neighbour services."""
    out: list[Contribution] = []
    for name in ("caller_node_share", "callee_node_share"):
        if name not in col or lw == 1.0:
            continue
        v = g * (lw - 1.0) * 0.5 * float(xi[col[name]])
        if v == 0.0:
            continue
        shares = [(t, w, float(sh[i])) for t, w, sh, _h in parts.get(name, ()) if sh[i] > 0]
        total = math.fsum(s for _t, _w, s in shares)
        if total > 0:
            for t, w, sh in shares:
                out.append(
                    Contribution(
                        _COLUMN_FACTOR[name], "intent_term", v * sh / total, t, f"locality weight {lw:g}, {w:g} calls/s"
                    )
                )
        else:
            out.append(Contribution(_COLUMN_FACTOR[name], "intent_term", v, detail=f"locality weight {lw:g}"))
    if "cpu_used_frac" in col and bw > 1.0:
        over = min(max((float(xi[col["cpu_used_frac"]]) - OVERLOAD_FROM) / (1.0 - OVERLOAD_FROM), 0.0), 1.0)
        v = -g * (bw - 1.0) * over
        if v != 0.0:
            out.append(
                Contribution("cpu_pressure", "intent_term", v, detail=f"balance weight {bw:g}, overload {over:.2f}")
            )
    return out


# ---- the heuristic ----------------------------------------------------------------------------------------------


def _heuristic(
    policy: TopologyHeuristic,
    pod: PodInfo,
    candidates: Sequence[str],
    index: ClusterIndex,
    intent: Sequence[float] | None,
) -> Explanation:
    a = max(0.0, intent_value(intent, "locality_weight"))
    b = max(0.0, intent_value(intent, "balance_weight"))
    pos = index.positions(candidates)
    weights = neighbor_weights(index.snapshot.graph, pod.service, policy.default_rps)
    total_w = sum(weights.values())
    loc = policy.locality(pod, candidates, index)
    load = policy.load(pod, candidates, index)
    t = policy.target_utilization
    penalty = np.clip((load - t) / (1.0 - t), 0.0, 1.0)
    scores = np.asarray(policy.score(pod, candidates, index, intent), dtype=np.float64)
    S = MAX_EXTENDER_PRIORITY
    out = []
    for i, node in enumerate(candidates):
        cs: list[Contribution] = []
        if pos[i] >= 0 and total_w > 0:
            for svc, w in sorted(weights.items()):
                counts = index.service_nodes.get(svc)
                tot = index.service_total.get(svc, 0)
                if counts is None or tot <= 0 or counts[pos[i]] <= 0:
                    continue
                v = S * (w / total_w) * counts[pos[i]] / tot
                side = _side_of(index, pod.service, svc)
                detail = f"{w:g} calls/s, {counts[pos[i]]:g} of {tot} pod(s) here"
                cs.append(Contribution(f"{side}_on_node", "heuristic", float(v), svc, detail))
        li = float(loc[i])
        if a != 1.0 and li:
            cs.append(Contribution("intent", "heuristic", S * (a - 1.0) * li, detail=f"locality weight {a:g}"))
        if li and b * float(penalty[i]):
            cs.append(
                Contribution(
                    "cpu_pressure",
                    "heuristic",
                    -S * a * b * li * float(penalty[i]),
                    detail=f"CPU {load[i]:.0%} with the pod, above {t:.0%} (balance weight {b:g})",
                )
            )
        raw = S * a * li * (1.0 - b * float(penalty[i]))
        s = float(scores[i])
        if abs(s - raw) > 0:
            cs.append(Contribution("clip", "clip", s - raw))
        out.append(NodeExplanation(node, s, _served(s), tuple(cs)))
    return Explanation(pod.key, pod.service, policy.name, "exact", tuple(float(v) for v in (intent or ())), tuple(out))


def _side_of(index: ClusterIndex, service: str, other: str) -> str:
    """``callers`` when ``other`` calls ``service`` (also when both call each other), else ``callees``."""
    g = index.snapshot.graph
    return "callers" if any(e.caller == other and e.callee == service for e in g.edges) else "callees"


# ---- entry point ------------------------------------------------------------------------------------------------


def explain_scores(
    policy: PlacementPolicy,
    pod: PodInfo,
    candidates: Sequence[str],
    index: ClusterIndex,
    intent: Sequence[float] | None = None,
    *,
    embeddings: Any = None,
) -> Explanation:
    """Explain ``policy.score(pod, candidates, index, intent)``: one :class:`NodeExplanation` per candidate whose
    contributions sum to its score (module docstring). ``intent``: the vector the pod is scored with
    (:meth:`policy.intent.Intent.for_service`); ``embeddings``: as :meth:`LearnedPlacement.score`.

    Raises ``ValueError`` as the policy's ``score`` does (e.g. a service without a service row)."""
    if isinstance(policy, LearnedPlacement):
        return _learned(policy, pod, candidates, index, intent, embeddings)
    if isinstance(policy, TopologyHeuristic):
        return _heuristic(policy, pod, candidates, index, intent)
    scores = np.asarray(policy.score(pod, candidates, index, intent), dtype=np.float64)
    nodes = tuple(
        NodeExplanation(n, float(s), _served(float(s)), (Contribution("score", "policy", float(s)),))
        for n, s in zip(candidates, scores)
    )
    name = str(getattr(policy, "name", type(policy).__name__))
    notes: tuple[str, ...] = ()
    members = getattr(policy, "members", None)
    if members:  # policy.lowlevel.PlacementEnsemble: the sigmoid of a mean logit has no additive split here
        notes = (
            f"an ensemble of {len(members)} placement networks (the mean logit): not split into factors; explain a "
            "member's scores with its own bundle (--bundle MEMBER_DIR, the members of its ensemble.json)",
        )
    return Explanation(pod.key, pod.service, name, "none", tuple(float(v) for v in (intent or ())), nodes, notes=notes)
