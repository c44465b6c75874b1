"""What a move is worth: its predicted gain and its predicted cost in the units of hrl-scheduler's objective
(:mod:`policy.sim.objective`: per minute ``0.5·mean/S + 0.5·p95/S + violation penalty + 100·failed share +
price·CPU/C0``), so that the descheduler makes a move only when the gain over the move's horizon exceeds the cost
(:meth:`MoveCostModel.evaluate`, :class:`MoveEconomics`). numpy-free, O(degree + pods of two nodes) per move.

**Gain per minute** (objective units / min), two terms, both a change of the mean latency of a user request, Δmean
(ms), turned into objective units as ``(mean_weight + p95_weight · p95_per_mean) · Δmean / S`` (``p95_per_mean``: how
much the p95 moves with the mean; 1 by default, so a saved millisecond moves both percentiles by one millisecond):

1. *calls no longer crossing nodes*: for every edge of the call graph between the pod's service ``s`` and a
   neighbour ``d`` (either direction), the calls per user request that pass through this pod, ``V(c) · m(e) / n_s``
   (``V``: the caller's visits per user request, ``m``: calls per request of the edge, ``n_s``: the service's bound
   pods: kube-proxy spreads calls evenly), times the change of the expected per-call network delay, the neighbour's
   pods weighted by where they run: ``Σ_Y n_d(Y)/n_d · (hop(from, Y) − hop(to, Y))``; ``hop`` = 0 on one node,
   ``same_zone_call_ms`` within a zone, ``cross_zone_call_ms`` across zones (the simulator's network defaults,
   :class:`policy.sim.model.NetworkModel`: 0.5 / 2.0 ms per call minus 0.05 ms on one node);
2. *leaving a loaded node*: the node's CPU as a processor-sharing queue (M/M/1-PS: a visit needing ``D`` CPU seconds
   takes ``D/(1−ρ)`` at utilisation ρ; Kleinrock, *Queueing Systems* vol. 2, 1976, section 4.4), so the latency a
   node adds to a user request is ``1000 · U/(λ·(1−ρ))`` ms, ``U`` the application's CPU use on it (cores: every visit's
   ``D`` times its rate) and ``λ`` the user request rate; the move takes the pod's use ``u`` from ``from`` to ``to``:
   ``Δmean = 1000/λ · Σ_{from,to} (U·f(kρ) − U'·f(kρ'))`` with ``f(ρ) = 1/(1−ρ)`` up to ``max_utilization`` and its
   tangent beyond (a saturated node keeps costing more the fuller it is). ``k`` =
   ``load_factor``: the utilisation is judged at ``k`` times the current load (the load the horizon may bring:
   :data:`LOAD_FACTOR_SOURCE`), so a move onto a small node that would saturate at the next peak is not made. Node
   speeds are not known to the descheduler and are not modelled.

**Cost** (objective units, once):

- *make-before-break* (``path="surge"``): the extra pod's CPU for the minutes it overlaps the old one,
  ``cpu_price · request_cores / C0 · overlap_s/60``; no request is lost (the old pod is removed by a scale-down, which
  terminates gracefully, once the new one is Ready);
- *eviction* (``path="evict"``): the requests in flight on the pod fail — by Little's law and the same queue,
  ``N = u/(1−ρ_from)`` visits — and, for a service whose only serving pod it is, every request needing the service
  fails until the replacement is Ready (``startup_s``): ``failed_weight · (N + λ·min(1, V(s))·startup_s) / (λ·60)``
  (the objective's failed share of one minute).

A move is worth making when ``gain_per_min · horizon_s/60 − cost > min_net_gain``. What the model cannot price
(no measured CPU use, no request rate: e.g. a cluster without metrics) counts nothing: the eviction path, whose cost
needs both, is then ``unknown`` (the descheduler does not evict: fail closed); a make-before-break move is priced
with the terms it has (its CPU cost and the locality term need only the requests and the call graph).

Visits per user request ``V(s)``: from the measured rates when the graph has them (``V(s) = inbound rps(s) / λ``,
``λ`` = the sum over the entry services — those no other service calls — of their largest outbound rate divided by
that edge's calls per request), else propagated from the entry services along ``calls_per_request`` (a declared edge
without one counts 1 call per request).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from policy.state import ClusterSnapshot, NodeInfo, PodInfo, ServiceGraph

__all__ = [
    "MovePath",
    "LOAD_FACTOR_SOURCE",
    "MoveCostModel",
    "MoveEconomics",
    "TrafficModel",
    "traffic_of",
    "app_use_by_node",
]

MovePath = Literal["surge", "evict"]

#: Where the default ``load_factor`` (2.05) comes from: over the bench's request-rate traces (policy/data/traces: nasa,
#: twitter, bursty), the largest rate of the next 10 minutes (the default horizon) divided by the current one has a
#: median of 1.08, a 75th percentile of 1.35 and a 90th of 2.05 (``hack/measure-trace-peaks.py`` prints them): a move is
#: judged at the load nine ten-minute windows in ten stay under. The objective weighs 1 % of failed requests as much
#: as a p95 at the SLO, so the model takes the cautious end: a placement that saturates at the next peak costs more
#: than the milliseconds it saves before it.
LOAD_FACTOR_SOURCE = "90th percentile of (max rate over the next 10 minutes / rate now), traces nasa, twitter, bursty"


@dataclass(frozen=True)
class TrafficModel:
    """What the model reads of the call graph, computed once per cycle (:func:`traffic_of`): ``user_rps`` (λ, user
    requests per second; ``None`` when no rate is measured), ``visits`` (service → visits per user request, ``V``),
    ``calls`` (service → ((neighbour, calls per user request of the edge from the caller's side), ...), both
    directions, self-edges left out)."""

    user_rps: float | None
    visits: Mapping[str, float]
    calls: Mapping[str, tuple[tuple[str, float], ...]]


def _entry_rate(graph: ServiceGraph, entry: str) -> float | None:
    best = None
    for e in graph.callees(entry):
        if e.caller == e.callee or e.rps is None or not math.isfinite(e.rps) or e.rps < 0:
            continue
        m = e.calls_per_request if e.calls_per_request is not None and e.calls_per_request > 0 else 1.0
        r = float(e.rps) / m
        best = r if best is None or r > best else best
    return best


def traffic_of(graph: ServiceGraph) -> TrafficModel:
    """The :class:`TrafficModel` of ``graph`` (see the module docstring for ``λ`` and ``V``). O(S + E) for measured
    rates; O(S · E) at worst for the propagation along ``calls_per_request`` (at most S passes)."""
    entries = graph.entry_services()
    rates = [r for r in (_entry_rate(graph, s) for s in entries) if r is not None]
    user = sum(rates) if rates else None
    visits: dict[str, float] = {}
    if user is not None and user > 0:
        inbound: dict[str, float] = {}
        for e in graph.edges:
            if e.caller != e.callee and e.rps is not None and math.isfinite(e.rps) and e.rps >= 0:
                inbound[e.callee] = inbound.get(e.callee, 0.0) + float(e.rps)
        for s in graph.services:
            visits[s] = inbound.get(s, 0.0) / user if s not in entries else 1.0
    else:
        user = None
        visits = dict.fromkeys(entries, 1.0)
        for _ in range(len(graph.services)):
            changed = False
            new = dict.fromkeys(entries, 1.0)
            for e in graph.edges:
                if e.caller == e.callee or e.caller not in visits:
                    continue
                m = e.calls_per_request if e.calls_per_request is not None else 1.0
                new[e.callee] = new.get(e.callee, 0.0) + visits[e.caller] * max(0.0, float(m))
            if new != visits:
                visits, changed = new, True
            if not changed:
                break
    calls: dict[str, list[tuple[str, float]]] = {}
    for e in graph.edges:
        if e.caller == e.callee:
            continue
        if user is not None and e.rps is not None and math.isfinite(e.rps):
            per_request = max(0.0, float(e.rps)) / user
        else:
            m = e.calls_per_request if e.calls_per_request is not None else 1.0
            per_request = visits.get(e.caller, 0.0) * max(0.0, float(m))
        calls.setdefault(e.caller, []).append((e.callee, per_request))
        calls.setdefault(e.callee, []).append((e.caller, per_request))
    return TrafficModel(user, visits, {k: tuple(v) for k, v in calls.items()})


@dataclass(frozen=True)
class MoveEconomics:
    """One move priced (objective units): ``path``; ``gain_per_min`` (its two terms ``locality_per_min`` and
    ``load_per_min``; may be negative: a move that makes things worse); ``cost`` (once: ``cpu_cost`` for a surge,
    ``failure_cost`` for an eviction); ``horizon_s``; ``net`` = ``gain_per_min · horizon_s/60 − cost``; ``worth``
    (``net > min_net_gain`` and the price is known); ``unknown``: why it cannot be priced ("" when it can)."""

    path: MovePath
    gain_per_min: float
    locality_per_min: float
    load_per_min: float
    cost: float
    cpu_cost: float
    failure_cost: float
    horizon_s: float
    net: float
    worth: bool
    unknown: str = ""

    def describe(self) -> str:
        """One line for a report or an Event."""
        if self.unknown:
            return f"{self.path}: cannot be priced ({self.unknown})"
        return (
            f"{self.path}: gain {self.gain_per_min:.4f}/min (locality {self.locality_per_min:.4f}, load "
            f"{self.load_per_min:.4f}) x {self.horizon_s / 60:.0f} min vs cost {self.cost:.4f} (net {self.net:+.4f})"
        )

    def to_json(self) -> dict[str, object]:
        return {
            "path": self.path,
            "gain_per_min": round(self.gain_per_min, 6),
            "locality_per_min": round(self.locality_per_min, 6),
            "load_per_min": round(self.load_per_min, 6),
            "cost": round(self.cost, 6),
            "net": round(self.net, 6),
            "worth": self.worth,
            "unknown": self.unknown,
        }


@dataclass(frozen=True)
class MoveCostModel:
    """The parameters of the model (module docstring), each with its source:

    - ``slo_p95_ms`` (> 0): the application's p95 SLO, the objective's latency unit ``S``;
    - ``mean_weight`` (0.5), ``p95_weight`` (0.5), ``failed_weight`` (100), ``cpu_price`` (0.5): the objective's
      weights (:class:`policy.sim.objective.Objective`); ``p95_per_mean`` (1.0): the p95's change per millisecond of
      the mean's (an assumption: the move shifts the whole latency distribution);
    - ``cpu_reference_cores``: ``C0``, the objective's CPU reference (the application's manifest requests); ``None``:
      the CPU requests of the call graph's pods in the snapshot;
    - ``horizon_s`` (600): how long the new placement is expected to last (two of the simulator's 5-minute move
      periods);
    - ``overlap_s`` (60): how long the surge pod and the old one run together (one descheduling cycle: the old pod is
      removed by the first cycle that sees the new one Ready);
    - ``startup_s`` (20): from a replacement's creation to Ready (the simulator's start-up delay; kwok's pod stages);
    - ``same_zone_call_ms`` (0.45), ``cross_zone_call_ms`` (1.95): the network delay a call saves when caller and
      callee share a node, within a zone and across zones (:class:`policy.sim.model.NetworkModel` defaults);
    - ``load_factor`` (2.05, :data:`LOAD_FACTOR_SOURCE`), ``max_utilization`` (0.95: the queue's ρ cap);
    - ``min_net_gain`` (0.0): the net gain a move must exceed.

    Raises ValueError naming the field for a value out of range."""

    slo_p95_ms: float = 100.0
    mean_weight: float = 0.5
    p95_weight: float = 0.5
    p95_per_mean: float = 1.0
    failed_weight: float = 100.0
    cpu_price: float = 0.5
    cpu_reference_cores: float | None = None
    horizon_s: float = 600.0
    overlap_s: float = 60.0
    startup_s: float = 20.0
    same_zone_call_ms: float = 0.45
    cross_zone_call_ms: float = 1.95
    load_factor: float = 2.05
    max_utilization: float = 0.95
    min_net_gain: float = 0.0

    def __post_init__(self) -> None:
        for f in (
            "mean_weight",
            "p95_weight",
            "p95_per_mean",
            "failed_weight",
            "cpu_price",
            "horizon_s",
            "overlap_s",
            "startup_s",
            "same_zone_call_ms",
            "cross_zone_call_ms",
            "min_net_gain",
        ):
            v = getattr(self, f)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"MoveCostModel.{f}: expected a finite number >= 0, got {v!r}")
        if not (math.isfinite(self.slo_p95_ms) and self.slo_p95_ms > 0):
            raise ValueError(f"MoveCostModel.slo_p95_ms: expected a number > 0, got {self.slo_p95_ms!r}")
        c0 = self.cpu_reference_cores
        if c0 is not None and not (math.isfinite(c0) and c0 > 0):
            raise ValueError(f"MoveCostModel.cpu_reference_cores: expected a number > 0 or None, got {c0!r}")
        if not (math.isfinite(self.load_factor) and self.load_factor >= 1.0):
            raise ValueError(f"MoveCostModel.load_factor: expected a number >= 1, got {self.load_factor!r}")
        if not (0.0 < self.max_utilization < 1.0):
            raise ValueError(
                f"MoveCostModel.max_utilization: expected a number in (0, 1), got {self.max_utilization!r}"
            )

    # ---- the terms ---------------------------------------------------------------------------------------------

    def _ms_to_objective(self, ms: float) -> float:
        """Objective units per minute of ``ms`` saved on the mean latency of every user request."""
        return (self.mean_weight + self.p95_weight * self.p95_per_mean) * ms / self.slo_p95_ms

    def hop_ms(self, a: NodeInfo | None, b: NodeInfo | None) -> float:
        """The network delay (ms) of one call from node ``a`` to node ``b`` relative to a call within one node."""
        if a is None or b is None or a.name == b.name:
            return 0.0
        if a.zone and b.zone and a.zone != b.zone:
            return self.cross_zone_call_ms
        return self.same_zone_call_ms

    def locality_ms(
        self,
        pod: PodInfo,
        to: NodeInfo,
        nodes: Mapping[str, NodeInfo],
        snapshot: ClusterSnapshot,
        traffic: TrafficModel,
    ) -> float:
        """Δmean (ms per user request, > 0: saved) of the calls through ``pod`` when it runs on ``to`` instead of its
        node (term 1 of the module docstring)."""
        frm = nodes.get(pod.node_name or "")
        neighbours = traffic.calls.get(pod.service, ())
        if frm is None or not neighbours:
            return 0.0
        where: dict[str, list[str]] = {}
        n_self = 0
        for p in snapshot.pods:
            if p.node_name is None or p.terminating or p.namespace != pod.namespace:
                continue
            if p.service == pod.service:
                n_self += 1
            where.setdefault(p.service, []).append(p.node_name)
        n_self = max(n_self, 1)
        saved = 0.0
        for other, per_request in neighbours:
            placed = where.get(other, ())
            if not placed or per_request <= 0:
                continue
            delta = sum(self.hop_ms(frm, nodes.get(y)) - self.hop_ms(to, nodes.get(y)) for y in placed) / len(placed)
            saved += per_request / n_self * delta
        return saved

    def _node_terms(self, node: NodeInfo, app_use_cores: float) -> tuple[float, float] | None:
        if node.usage is None or node.allocatable.cpu_m <= 0:
            return None
        return app_use_cores, node.usage.cpu_m / node.allocatable.cpu_m

    def _sojourn(self, app_cores: float, rho: float) -> float:
        """``U · f(k·ρ)``: ``f(ρ) = 1/(1−ρ)`` up to ``max_utilization`` and its tangent beyond (convex and finite, so
        of two saturated nodes the fuller one still costs more)."""
        r = max(rho * self.load_factor, 0.0)
        m = self.max_utilization
        f = 1.0 / (1.0 - r) if r <= m else 1.0 / (1.0 - m) + (r - m) / (1.0 - m) ** 2
        return max(app_cores, 0.0) * f

    def load_ms(
        self,
        pod: PodInfo,
        frm: NodeInfo,
        to: NodeInfo,
        app_use_m: Mapping[str, float],
        user_rps: float | None,
    ) -> float | None:
        """Δmean (ms per user request, > 0: saved) of the CPU queues of the two nodes when the pod's measured use
        moves from ``frm`` to ``to`` (term 2); ``app_use_m``: node → the application's measured CPU use (millicores).
        ``None`` when the pod's or a node's use, or the request rate, is not known."""
        if pod.usage is None or user_rps is None or user_rps <= 0:
            return None
        a = self._node_terms(frm, app_use_m.get(frm.name, 0.0) / 1000.0)
        b = self._node_terms(to, app_use_m.get(to.name, 0.0) / 1000.0)
        if a is None or b is None:
            return None
        u = pod.usage.cpu_m / 1000.0
        (ua, ra), (ub, rb) = a, b
        ra2 = ra - u * 1000.0 / frm.allocatable.cpu_m
        rb2 = rb + u * 1000.0 / to.allocatable.cpu_m
        before = self._sojourn(ua, ra) + self._sojourn(ub, rb)
        after = self._sojourn(ua - u, ra2) + self._sojourn(ub + u, rb2)
        return 1000.0 * (before - after) / user_rps

    def in_flight(self, pod: PodInfo, frm: NodeInfo) -> float | None:
        """Visits in flight on ``pod`` (Little's law on the node's queue: ``u/(1−ρ)``, at the current load); ``None``
        when its use or its node's is not known."""
        if pod.usage is None or frm.usage is None or frm.allocatable.cpu_m <= 0:
            return None
        rho = min(frm.usage.cpu_m / frm.allocatable.cpu_m, self.max_utilization)
        return (pod.usage.cpu_m / 1000.0) / (1.0 - rho)

    def reference_cores(self, snapshot: ClusterSnapshot) -> float:
        """``C0``: :attr:`cpu_reference_cores`, else the CPU requests (cores) of the bound pods of the call graph's
        services (at least 1 millicore)."""
        if self.cpu_reference_cores is not None:
            return self.cpu_reference_cores
        services = set(snapshot.graph.services)
        m = sum(p.requests.cpu_m for p in snapshot.pods if p.node_name is not None and p.service in services)
        return max(m, 1) / 1000.0

    # ---- the decision ------------------------------------------------------------------------------------------

    def evaluate(
        self,
        pod: PodInfo,
        to_node: str,
        path: MovePath,
        snapshot: ClusterSnapshot,
        *,
        traffic: TrafficModel | None = None,
        nodes: Mapping[str, NodeInfo] | None = None,
        app_use_m: Mapping[str, float] | None = None,
        only_serving_pod: bool = False,
    ) -> MoveEconomics:
        """Price moving ``pod`` (bound) to ``to_node`` by ``path`` on ``snapshot`` (its nodes' and pods' measured use,
        its call graph). ``traffic`` / ``nodes`` / ``app_use_m``: the cycle's :func:`traffic_of`, node lookup and
        per-node application use (computed here when not given); ``only_serving_pod``: no other pod of the service
        serves (the eviction path then loses the service until the replacement is Ready). Never raises for missing
        measurements: what cannot be priced is said in ``unknown`` (module docstring)."""
        traffic = traffic if traffic is not None else traffic_of(snapshot.graph)
        nodes = nodes if nodes is not None else {n.name: n for n in snapshot.nodes}
        frm, to = nodes.get(pod.node_name or ""), nodes.get(to_node)
        if frm is None or to is None:
            return self.unpriced(path, "the pod's node or the target is not in the snapshot")
        if app_use_m is None:
            app_use_m = app_use_by_node(snapshot)
        loc = self._ms_to_objective(self.locality_ms(pod, to, nodes, snapshot, traffic))
        load_ms = self.load_ms(pod, frm, to, app_use_m, traffic.user_rps)
        load = self._ms_to_objective(load_ms) if load_ms is not None else 0.0
        gain = loc + load
        cpu_cost = failure_cost = 0.0
        unknown = ""
        if path == "surge":
            cores = pod.requests.cpu_m / 1000.0
            cpu_cost = self.cpu_price * cores / self.reference_cores(snapshot) * self.overlap_s / 60.0
        else:
            lam = traffic.user_rps
            flight = self.in_flight(pod, frm)
            if lam is None or lam <= 0 or flight is None:
                unknown = "no measured request rate or CPU use to price the requests an eviction loses"
            else:
                lost = flight
                if only_serving_pod:
                    lost += lam * min(1.0, traffic.visits.get(pod.service, 1.0)) * self.startup_s
                failure_cost = self.failed_weight * min(1.0, lost / (lam * 60.0))
        cost = cpu_cost + failure_cost
        net = gain * self.horizon_s / 60.0 - cost
        return MoveEconomics(
            path, gain, loc, load, cost, cpu_cost, failure_cost, self.horizon_s, net,
            not unknown and net > self.min_net_gain, unknown,
        )  # fmt: skip

    def unpriced(self, path: MovePath, why: str) -> MoveEconomics:
        """A move the model cannot price (``why``): not worth making."""
        return MoveEconomics(path, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, self.horizon_s, 0.0, False, why)


def app_use_by_node(snapshot: ClusterSnapshot) -> dict[str, float]:
    """Node → the measured CPU use (millicores) of the pods of the call graph's services bound there."""
    services = set(snapshot.graph.services)
    out: dict[str, float] = {}
    for p in snapshot.pods:
        if p.node_name is None or p.terminating or p.usage is None or p.service not in services:
            continue
        out[p.node_name] = out.get(p.node_name, 0.0) + p.usage.cpu_m
    return out
