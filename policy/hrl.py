"""The hierarchy: one high-level policy that, every period, plans replica targets, moves and the intent
passed down to the low-level (placement) policy. numpy only (served in the descheduler and the simulator).

Method (issue 6; DESIGN.md section 1): joint scheduling by a high level that plans global intent and a low level
that places pods, plus DRPC-style autoscaling (arXiv 2407.10169). :class:`HierarchicalPolicy` implements
:class:`policy.highlevel.HighLevelPolicy` and produces, from one :class:`~policy.state.ClusterSnapshot`:

(a) **replica targets** (``namespace/name`` → replicas) from a pluggable :class:`ReplicaAutoscaler`: DRPC's
    student actors when their bundle exists (``policy.drpc.DrpcAutoscaler``, loaded by
    :func:`load_learned_autoscaler`), else the documented stand-in :class:`UtilizationTargetAutoscaler`;
(b) **moves** decided with the low-level policy's own scores: a pod moves when the best *other* node's
    ``placement.score`` beats its current node's by more than ``margin`` points (0..10 scale) and that node
    passes ``placement.filter`` (the descheduler's guards check again before any eviction);
(c) the **intent vector** (:data:`policy.lowlevel.INTENT_SPEC`) for the low level, from global state by an
    :class:`IntentPolicy`: :class:`UtilizationIntent` maps the cluster-wide CPU utilisation, scaled by the
    forecast change of the total request rate, to locality vs balance weights.

State that must survive between periods (the descheduler may run as a CronJob: a fresh process each cycle)
is explicit in :class:`HrlState` (rate history for the predictor, last intent, when moves / targets were last
planned, the stand-in's recommendation window, an opaque slot for the autoscaler) and round-trips through
JSON (:meth:`HrlState.to_json` / :meth:`HrlState.from_json`); the descheduler keeps it in its state file next
to the eviction history.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .highlevel import (SYSTEM_CRITICAL_CLASSES, SYSTEM_CRITICAL_PRIORITY, _finite_scores, greedy_moves,
                        _util_after_add, _View, default_intent, node_cpu_utilization, structurally_movable)
from .index import ClusterIndex
from .lowlevel import INTENT_SPEC, PlacementPolicy, node_admits
from .state import ClusterSnapshot, Move, Plan, PodInfo, ServiceGraph, WorkloadInfo

__all__ = [
    "STATE_VERSION",
    "HrlState",
    "ReplicaAutoscaler",
    "IntentPolicy",
    "Forecaster",
    "TrendForecaster",
    "UtilizationTargetAutoscaler",
    "UtilizationIntent",
    "FixedIntent",
    "HierarchicalPolicy",
    "BundleMissing",
    "service_rates_rps",
    "cluster_cpu_utilization",
    "forecast_factor",
    "pods_of_workload",
    "due",
    "load_learned_placement",
    "load_learned_autoscaler",
    "bundle_error_line",
    "DrpcReplicaAutoscaler",
    "DEFAULT_BUNDLES",
]

#: Version of :meth:`HrlState.to_json`'s document.
STATE_VERSION = 1
#: Where the learned stacks' bundles live: ``policy/bundles/<stack>/{low,high}``.
DEFAULT_BUNDLES = Path(__file__).resolve().parent / "bundles"


# ---- state kept between periods -----------------------------------------------------------------------

@dataclass
class HrlState:
    """Everything :class:`HierarchicalPolicy` carries from one period to the next (JSON-serialisable).

    - ``rate_times_s``: (T,) times (snapshot ``taken_at_s``) of the recorded rates, oldest first;
    - ``rates_rps``: service → (T,) inbound request rate (requests/s, >= 0) at those times: the sum of the
      measured ``rps`` of the edges calling it (:func:`service_rates_rps`); a service first seen later is
      left-padded with its first value (as the predictor pads a short window);
    - ``last_intent``: the intent of the last plan (``None`` before the first), smoothed against by
      :class:`UtilizationIntent`;
    - ``last_moves_s`` / ``last_targets_s``: when moves / replica targets were last planned (``None``: never);
    - ``last_targets``: the last replica targets (``namespace/name`` → replicas);
    - ``recommendations``: ``namespace/name`` → ``[[t_s, replicas], ...]``, the stand-in autoscaler's
      scale-down stabilisation window;
    - ``autoscaler``: an opaque JSON object the pluggable autoscaler may read and write (e.g. DRPC's
      predictor or actor state).
    """

    rate_times_s: list[float] = field(default_factory=list)
    rates_rps: dict[str, list[float]] = field(default_factory=dict)
    last_intent: tuple[float, ...] | None = None
    last_moves_s: float | None = None
    last_targets_s: float | None = None
    last_targets: dict[str, int] = field(default_factory=dict)
    recommendations: dict[str, list[list[float]]] = field(default_factory=dict)
    autoscaler: dict[str, Any] = field(default_factory=dict)

    # ---- rate history --------------------------------------------------------------------------------

    def record_rates(self, graph: ServiceGraph, t_s: float, max_len: int) -> bool:
        """Append the inbound rates of ``graph`` at time ``t_s`` (a second record at the same time replaces
        the first); keeps the last ``max_len`` (>= 1) records. A graph without any measured rate records
        nothing. Returns whether a record was made."""
        rates = service_rates_rps(graph)
        if not rates:
            return False
        if self.rate_times_s and self.rate_times_s[-1] == t_s:
            self.rate_times_s.pop()
            for series in self.rates_rps.values():
                series.pop()
        n = len(self.rate_times_s)
        self.rate_times_s.append(float(t_s))
        for svc, series in self.rates_rps.items():
            series.append(float(rates.get(svc, 0.0)))
        for svc, r in rates.items():
            if svc not in self.rates_rps:
                self.rates_rps[svc] = [float(r)] * (n + 1)
        if len(self.rate_times_s) > max_len:
            cut = len(self.rate_times_s) - max_len
            del self.rate_times_s[:cut]
            for series in self.rates_rps.values():
                del series[:cut]
        return True

    def rates(self, service: str) -> np.ndarray:
        """(T,) float64 recorded inbound rates of ``service`` (requests/s); empty when never measured."""
        return np.asarray(self.rates_rps.get(service, ()), dtype=np.float64)

    def total_rates(self) -> np.ndarray:
        """(T,) float64 sum of every service's recorded inbound rate (requests/s)."""
        if not self.rates_rps:
            return np.zeros(len(self.rate_times_s))
        return np.sum([np.asarray(v, dtype=np.float64) for v in self.rates_rps.values()], axis=0)

    # ---- JSON ------------------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (``{"version": 1, ...}``; every float finite)."""
        return {
            "version": STATE_VERSION,
            "rate_times_s": list(self.rate_times_s),
            "rates_rps": {k: list(v) for k, v in sorted(self.rates_rps.items())},
            "last_intent": None if self.last_intent is None else list(self.last_intent),
            "last_moves_s": self.last_moves_s,
            "last_targets_s": self.last_targets_s,
            "last_targets": dict(sorted(self.last_targets.items())),
            "recommendations": {k: [list(x) for x in v] for k, v in sorted(self.recommendations.items())},
            "autoscaler": self.autoscaler,
        }

    @staticmethod
    def from_json(doc: Any) -> HrlState:
        """Parse :meth:`to_json`'s document. Raises ``ValueError`` naming the field and the value for anything
        else: another ``version``, a field :meth:`to_json` does not write, a wrong type, a non-finite number,
        a ``last_intent`` that is not ``len(INTENT_SPEC)`` finite weights >= 0, and an ``autoscaler.drpc``
        section that :meth:`policy.drpc.DrpcState.from_dict` refuses (e.g. an older layout without
        ``version``). The descheduler drops such a state with a warning and starts fresh."""
        if not isinstance(doc, Mapping):
            raise ValueError(f"planner state: expected an object, got {type(doc).__name__}")
        if doc.get("version") != STATE_VERSION:
            raise ValueError(f"planner state: version: expected {STATE_VERSION}, got {doc.get('version')!r}")
        unknown = sorted(str(k) for k in doc if k not in HrlState().to_json())
        if unknown:
            raise ValueError(f"planner state: unknown field(s) {', '.join(unknown)} (got {doc[unknown[0]]!r} for "
                             f"{unknown[0]})")

        def num(v: Any, where: str) -> float:
            if isinstance(v, bool):
                raise ValueError(f"planner state: {where}: expected a number, got {v!r}")
            try:
                x = float(v)
            except (TypeError, ValueError):
                raise ValueError(f"planner state: {where}: expected a number, got {v!r}") from None
            if not math.isfinite(x):
                raise ValueError(f"planner state: {where}: expected a finite number, got {v!r}")
            return x

        def opt(v: Any, where: str) -> float | None:
            return None if v is None else num(v, where)

        def seq(where: str) -> list[Any]:
            v = doc.get(where)
            if v is None:
                return []
            if not isinstance(v, list):
                raise ValueError(f"planner state: {where}: expected a list, got {v!r}")
            return v

        def obj(where: str) -> Mapping[str, Any]:
            v = doc.get(where)
            if v is None:
                return {}
            if not isinstance(v, Mapping):
                raise ValueError(f"planner state: {where}: expected an object, got {v!r}")
            return v

        times = [num(v, f"rate_times_s[{i}]") for i, v in enumerate(seq("rate_times_s"))]
        rates: dict[str, list[float]] = {}
        for svc, series in obj("rates_rps").items():
            if series is not None and not isinstance(series, list):
                raise ValueError(f"planner state: rates_rps.{svc}: expected a list of rates, got {series!r}")
            vals = [num(v, f"rates_rps.{svc}[{i}]") for i, v in enumerate(series or [])]
            if len(vals) != len(times):
                raise ValueError(f"planner state: rates_rps.{svc}: {len(vals)} values for {len(times)} times")
            rates[str(svc)] = vals
        li = doc.get("last_intent")
        intent = None
        if li is not None:  # as planner.intent of the configuration: [locality_weight, balance_weight]
            if not isinstance(li, list) or len(li) != len(INTENT_SPEC):
                raise ValueError(f"planner state: last_intent: expected {len(INTENT_SPEC)} weights "
                                 f"[{', '.join(n for n, _d, _v in INTENT_SPEC)}], got {li!r}")
            intent = tuple(num(v, f"last_intent[{i}]") for i, v in enumerate(li))
            if min(intent) < 0:
                raise ValueError(f"planner state: last_intent: expected weights >= 0, got {li!r}")
        targets = {}
        for k, v in obj("last_targets").items():
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"planner state: last_targets.{k}: expected an integer >= 0, got {v!r}")
            targets[str(k)] = v
        recs: dict[str, list[list[float]]] = {}
        for k, v in obj("recommendations").items():
            if v is not None and not isinstance(v, list):
                raise ValueError(f"planner state: recommendations.{k}: expected a list, got {v!r}")
            rows = []
            for i, row in enumerate(v or []):
                if not isinstance(row, (list, tuple)) or len(row) != 2:
                    raise ValueError(f"planner state: recommendations.{k}[{i}]: expected [t_s, replicas], got {row!r}")
                rows.append([num(row[0], f"recommendations.{k}[{i}][0]"), num(row[1], f"recommendations.{k}[{i}][1]")])
            recs[str(k)] = rows
        auto = obj("autoscaler")
        if "drpc" in auto:  # DrpcReplicaAutoscaler's own state: refuse it here, not at every cycle
            from .drpc import DrpcState  # noqa: PLC0415 - the DRPC layout; no torch

            try:
                DrpcState.from_dict(auto["drpc"])
            except ValueError as exc:  # names the field: "drpc state.version: expected 1, got None"
                raise ValueError(f"planner state: autoscaler: {' '.join(str(exc).split())}") from None
            except (TypeError, AttributeError) as exc:  # e.g. "history": "zz"
                raise ValueError(f"planner state: autoscaler: drpc state: malformed ({exc}): "
                                 f"{str(auto['drpc'])[:80]}") from None
        return HrlState(times, rates, intent, opt(doc.get("last_moves_s"), "last_moves_s"),
                        opt(doc.get("last_targets_s"), "last_targets_s"), targets, recs, dict(auto))


def service_rates_rps(graph: ServiceGraph) -> dict[str, float]:
    """Inbound request rate of every service that has at least one caller edge with a measured ``rps``:
    the sum of those rates (requests/s). Services without a measured inbound edge are absent."""
    out: dict[str, float] = {}
    for e in graph.edges:
        if e.rps is not None and math.isfinite(e.rps) and e.rps >= 0:
            out[e.callee] = out.get(e.callee, 0.0) + float(e.rps)
    return out


def cluster_cpu_utilization(index: ClusterIndex) -> float:
    """Cluster-wide CPU utilisation, a fraction (may exceed 1): Σ load / Σ allocatable over the Ready,
    schedulable nodes with allocatable CPU, load = measured use where known, else the sum of requests
    (:func:`policy.highlevel.node_cpu_utilization`). 0 for a cluster without such nodes."""
    util = node_cpu_utilization(index)
    nodes = index.snapshot.nodes
    ok = np.array([n.ready and not n.unschedulable for n in nodes], dtype=bool) & (index.alloc_cpu_m > 0)
    if not ok.any():
        return 0.0
    load = util[ok] * index.alloc_cpu_m[ok]
    return float(load.sum() / index.alloc_cpu_m[ok].sum())


def due(now_s: float, last_s: float | None, period_s: float) -> bool:
    """Whether a periodic action is due at ``now_s``: always when ``period_s`` <= 0; else once per window
    ``[k·period_s, (k+1)·period_s)``: never run (``last_s is None``) → from ``now_s >= period_s`` on (so in
    the simulator, which starts at 0, the first run is one period in); otherwise when ``now_s`` is in a later
    window than ``last_s``."""
    if period_s <= 0:
        return True
    if last_s is None:
        return now_s >= period_s
    return math.floor(now_s / period_s) > math.floor(last_s / period_s)


def pods_of_workload(snapshot: ClusterSnapshot, w: WorkloadInfo) -> list[PodInfo]:
    """The non-terminating pods of workload ``w``: same namespace, labels matched by its selector (an empty
    selector matches none here, unlike a PodDisruptionBudget's)."""
    if not w.selector.match_labels and not w.selector.match_expressions:
        return []
    return [p for p in snapshot.pods if p.namespace == w.namespace and not p.terminating
            and w.selector.matches(p.labels)]


# ---- forecasting -----------------------------------------------------------------------------------------

@runtime_checkable
class Forecaster(Protocol):
    """The workload predictor's interface (as :class:`policy.forecast.GruForecaster`): ``predict`` maps
    (B, T) per-period rates (requests/s, >= 0) to (B, horizon) forecast rates for the next periods."""

    def predict(self, rates: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class TrendForecaster:
    """The stand-in predictor: a least-squares line through the last ``window`` (>= 2) points, extrapolated
    ``horizon`` (>= 1) periods ahead, floored at 0. One point: the last value (no trend)."""

    window: int = 5
    horizon: int = 1

    def predict(self, rates: np.ndarray) -> np.ndarray:
        """(B, T) → (B, horizon) requests/s; see the class docstring. Raises ValueError for negative or
        non-finite rates or an empty history."""
        from .forecast import rate_history  # noqa: PLC0415 - numpy only

        r = rate_history(rates)
        x = r[:, -max(2, self.window):]
        t = x.shape[1]
        steps = np.arange(1, self.horizon + 1, dtype=np.float64)
        if t < 2:
            return np.repeat(x[:, -1:], self.horizon, axis=1)
        s = np.arange(t, dtype=np.float64)
        sc = s - s.mean()
        slope = (x - x.mean(axis=1, keepdims=True)) @ sc / float(sc @ sc)
        last_fit = x.mean(axis=1) + slope * sc[-1]
        return np.maximum(last_fit[:, None] + slope[:, None] * steps[None, :], 0.0)


def forecast_factor(series: np.ndarray, forecaster: Forecaster | None, lo: float = 0.5, hi: float = 2.0) -> float:
    """Forecast change of a rate: mean forecast over the predictor's horizon ÷ the last measured value, clipped
    to ``[lo, hi]``; 1 when the series is empty, its last value is ~0 (< 1e-6 requests/s), or the predictor
    fails (bad input never stops a cycle over a forecast)."""
    x = np.asarray(series, dtype=np.float64)
    if x.size == 0 or not np.isfinite(x[-1]) or x[-1] < 1e-6:
        return 1.0
    fc = forecaster if forecaster is not None else TrendForecaster()
    try:
        pred = float(np.mean(fc.predict(x[None, :])))
    except (ValueError, FloatingPointError):
        return 1.0
    if not math.isfinite(pred):
        return 1.0
    return float(np.clip(pred / x[-1], lo, hi))


# ---- (a) replica targets ---------------------------------------------------------------------------------

@runtime_checkable
class ReplicaAutoscaler(Protocol):
    """What :class:`HierarchicalPolicy` needs from an autoscaler: ``replica_targets(snapshot, state)`` →
    ``{"namespace/name": replicas >= 0}`` for the Deployments it has an opinion on (absent: no opinion).
    ``state`` is the policy's :class:`HrlState` (rate history in ``rates_rps``; ``state.autoscaler`` is the
    autoscaler's own JSON slot, persisted across CronJob runs). Implementations: the DRPC students
    (``policy.drpc.DrpcAutoscaler``), :class:`UtilizationTargetAutoscaler` (stand-in)."""

    name: str

    def replica_targets(self, snapshot: ClusterSnapshot, state: HrlState) -> dict[str, int]: ...


@dataclass(frozen=True)
class UtilizationTargetAutoscaler:
    """The stand-in autoscaler (used until a DRPC bundle exists, and in tests): the HPA rule on measured CPU,
    made proactive by the forecast (Kubernetes HPA algorithm, k8s.io/kubernetes
    pkg/controller/podautoscaler/replica_calculator.go, simplified)::

        used_m   = Σ measured CPU of the workload's bound pods (pods without a measurement count 0)
        factor   = forecast_factor(inbound rate of the workload's service)      in [0.5, 2], 1 without rates
        ratio    = used_m · factor / (target_utilization · replicas · cpu_request_m)
        desired  = replicas                                  if |ratio − 1| <= tolerance
                   ceil(used_m · factor / (target_utilization · cpu_request_m))   otherwise
        target   = clip(max(desired, recommendations of the last stabilization_s s), min_replicas, max_replicas)

    (the max over the stabilisation window only holds scale-downs back, as the HPA's default 300 s
    scale-down stabilisation does; recommendations are kept in ``state.recommendations``).

    Only Deployments with a CPU request whose pods carry measured use are scaled (``workloads`` restricts
    them further to ``namespace/name`` keys; ``None`` = all); a workload without any measurement gets no
    target (no opinion). Parameters: ``target_utilization`` in (0, 1]; ``tolerance`` >= 0; ``min_replicas``
    >= 0; ``max_replicas`` >= ``min_replicas``; ``stabilization_s`` >= 0. ValueError naming the field otherwise.
    """

    name: str = "utilization-target"
    target_utilization: float = 0.6
    tolerance: float = 0.1
    min_replicas: int = 1
    max_replicas: int = 10
    stabilization_s: float = 300.0
    workloads: tuple[str, ...] | None = None
    forecaster: Forecaster | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.target_utilization) and 0.0 < self.target_utilization <= 1.0):
            raise ValueError(f"UtilizationTargetAutoscaler.target_utilization: must be in (0, 1] "
                             f"(got {self.target_utilization!r})")
        if not (math.isfinite(self.tolerance) and self.tolerance >= 0):
            raise ValueError(f"UtilizationTargetAutoscaler.tolerance: must be >= 0 (got {self.tolerance!r})")
        if self.min_replicas < 0 or self.max_replicas < self.min_replicas:
            raise ValueError(f"UtilizationTargetAutoscaler: need 0 <= min_replicas <= max_replicas "
                             f"(got {self.min_replicas!r}, {self.max_replicas!r})")
        if not (math.isfinite(self.stabilization_s) and self.stabilization_s >= 0):
            raise ValueError(f"UtilizationTargetAutoscaler.stabilization_s: must be >= 0 "
                             f"(got {self.stabilization_s!r})")
        if self.workloads is not None:
            object.__setattr__(self, "workloads", tuple(self.workloads))

    def replica_targets(self, snapshot: ClusterSnapshot, state: HrlState) -> dict[str, int]:
        now = snapshot.taken_at_s
        allowed = None if self.workloads is None else set(self.workloads)
        out: dict[str, int] = {}
        for w in sorted(snapshot.workloads, key=lambda w: (w.namespace, w.name)):
            key = f"{w.namespace}/{w.name}"
            if w.kind != "Deployment" or w.pod_requests.cpu_m <= 0 or (allowed is not None and key not in allowed):
                continue
            pods = [p for p in pods_of_workload(snapshot, w) if p.node_name is not None]
            measured = [p for p in pods if p.usage is not None]
            if not measured:
                continue
            used_m = float(sum(p.usage.cpu_m for p in measured))
            factor = forecast_factor(state.rates(w.service), self.forecaster)
            cur = max(int(w.replicas), 0)
            per_pod = self.target_utilization * w.pod_requests.cpu_m
            ratio = used_m * factor / (per_pod * cur) if cur > 0 else math.inf
            desired = cur if abs(ratio - 1.0) <= self.tolerance else int(math.ceil(used_m * factor / per_pod))
            window = [r for r in state.recommendations.get(key, []) if r[0] > now - self.stabilization_s]
            window.append([float(now), float(desired)])
            state.recommendations[key] = window
            stabilized = max(int(r[1]) for r in window)
            out[key] = int(np.clip(stabilized, self.min_replicas, self.max_replicas))
        return out


# ---- (c) the intent ---------------------------------------------------------------------------------------

@runtime_checkable
class IntentPolicy(Protocol):
    """Maps global state to the intent vector (:data:`policy.lowlevel.INTENT_SPEC` order)."""

    def intent(self, snapshot: ClusterSnapshot, index: ClusterIndex, state: HrlState) -> tuple[float, ...]: ...


@dataclass(frozen=True)
class FixedIntent:
    """Always the same intent (``None``: :func:`policy.highlevel.default_intent`). The ``hrl-flat``
    ablation uses the defaults: no intent comes down from a high level."""

    values: tuple[float, ...] | None = None

    def intent(self, snapshot: ClusterSnapshot, index: ClusterIndex, state: HrlState) -> tuple[float, ...]:
        base = list(default_intent())
        for i, v in enumerate((self.values or ())[: len(base)]):
            base[i] = float(v)
        return tuple(base)


@dataclass(frozen=True)
class UtilizationIntent:
    """The intent from global state: how busy the cluster is about to be decides locality vs balance.

    ::

        u      = cluster_cpu_utilization(index)                     (fraction of allocatable CPU)
        f      = forecast_factor(total inbound request rate)         (in [0.5, 2]; 1 without rates)
        x      = clip((u · f − low_utilization) / (high_utilization − low_utilization), 0, 1)
        target = (locality_weight: locality_max − x · (locality_max − locality_min),
                  balance_weight:  balance_min  + x · (balance_max  − balance_min))
        intent = target                                             first period
                 last + smoothing · (target − last)                 afterwards (exponential smoothing)

    Why: on a quiet cluster co-locating callers with callees saves network hops at no contention cost, so
    locality dominates; as the cluster fills up (or the predictor sees load rising), CPU contention and
    queueing cost more than a hop, so the low level is told to weigh node load more. The smoothing keeps
    the low level from flapping between periods (hence ``last_intent`` in the state).

    Parameters: ``0 <= low_utilization < high_utilization``; weights >= 0; ``smoothing`` in (0, 1]
    (1 = no smoothing). ValueError naming the field otherwise.
    """

    low_utilization: float = 0.3
    high_utilization: float = 0.8
    locality_max: float = 1.5
    locality_min: float = 0.75
    balance_min: float = 0.5
    balance_max: float = 2.0
    smoothing: float = 0.5
    forecaster: Forecaster | None = None

    def __post_init__(self) -> None:
        vals = (self.low_utilization, self.high_utilization, self.locality_max, self.locality_min,
                self.balance_min, self.balance_max, self.smoothing)
        if not all(math.isfinite(v) for v in vals):
            raise ValueError(f"UtilizationIntent: parameters must be finite (got {vals!r})")
        if not 0.0 <= self.low_utilization < self.high_utilization:
            raise ValueError(f"UtilizationIntent: need 0 <= low_utilization < high_utilization "
                             f"(got {self.low_utilization!r}, {self.high_utilization!r})")
        if min(self.locality_max, self.locality_min, self.balance_min, self.balance_max) < 0:
            raise ValueError("UtilizationIntent: weights must be >= 0")
        if not 0.0 < self.smoothing <= 1.0:
            raise ValueError(f"UtilizationIntent.smoothing: must be in (0, 1] (got {self.smoothing!r})")

    def target(self, utilization: float) -> tuple[float, float]:
        """``(locality_weight, balance_weight)`` for a (forecast) utilisation, before smoothing."""
        x = float(np.clip((utilization - self.low_utilization) / (self.high_utilization - self.low_utilization),
                          0.0, 1.0))
        return (self.locality_max - x * (self.locality_max - self.locality_min),
                self.balance_min + x * (self.balance_max - self.balance_min))

    def intent(self, snapshot: ClusterSnapshot, index: ClusterIndex, state: HrlState) -> tuple[float, ...]:
        u = cluster_cpu_utilization(index) * forecast_factor(state.total_rates(), self.forecaster)
        target = list(default_intent())
        target[0], target[1] = self.target(u)
        last = state.last_intent
        if last is None or len(last) != len(target):
            return tuple(float(v) for v in target)
        a = self.smoothing
        return tuple(float(l_ + a * (t - l_)) for l_, t in zip(last, target))


# ---- the hierarchy -----------------------------------------------------------------------------------------

@dataclass(frozen=True, order=True)
class _Proposal:
    sort_key: tuple
    move: Move


@dataclass
class HierarchicalPolicy:
    """The high-level policy of hrl-scheduler (see the module docstring). Not frozen: it owns its
    :class:`HrlState` (``state``), updated by every :meth:`plan` call.

    Each :meth:`plan` (one descheduler cycle, or one simulated period):

    1. records the inbound rates of ``snapshot.graph`` in the state (``history_len`` points kept);
    2. computes the intent (``intent_policy``; every call) and stores it as ``state.last_intent``;
    3. when ``autoscaler`` is set and :func:`due` (``scale_period_s``): asks it for replica targets, keeps
       those of Deployments in ``workloads`` (``None``: any) outside ``excluded_namespaces``; otherwise the
       plan has no replica opinion (``{}``);
    4. when ``rebalance`` and :func:`due` (``moves_period_s``): plans moves. For every movable pod (bound,
       controller-owned, not a DaemonSet/mirror/terminating/system-critical pod, not in an excluded namespace,
       no local storage unless allowed), the candidate nodes are the other nodes that pass
       ``placement.filter`` and :func:`policy.lowlevel.node_admits` and stay strictly below
       ``overload_threshold`` CPU utilisation with the pod added. The low level scores the current node and
       the candidates under the new intent; the pod moves towards the best candidate when it beats the
       current node by more than ``margin`` points; ``gain`` = the difference (0..10). Reason ``overload``
       when the pod's node is above ``overload_threshold``, else ``policy``. Greedy by gain with re-evaluation
       on a virtual cluster after each accepted move (as :class:`policy.highlevel.RebalanceHeuristic`): at most
       one move per pod, ``max_moves_per_service`` per service, ``max_moves`` in all; sorted by gain
       (descending), ties by pod key. A pod is moved only while its service has at least ``min_serving_pods``
       bound, non-terminating pods (default 2: a service's only pod is never moved, since its requests would
       fail until the replacement is ready; 1 allows it).

    The low level must score a pod already bound to a candidate node without counting that pod twice (its
    own requests and co-location), as :class:`policy.lowlevel.TopologyHeuristic` and
    :class:`policy.placement.LearnedPlacement` do. A pod the low level cannot judge (its ``filter`` or ``score``
    raises, e.g. no service row for its service) is not moved.

    Deterministic for the same inputs and state. Raises ``ValueError`` (naming the field) for out-of-range
    parameters, and when the autoscaler answers something that is not ``{str: int >= 0}``.
    """

    autoscaler: ReplicaAutoscaler | None = None
    intent_policy: IntentPolicy = field(default_factory=UtilizationIntent)
    rebalance: bool = True
    margin: float = 1.0
    overload_threshold: float = 0.85
    max_moves: int = 10
    max_moves_per_service: int = 1
    min_serving_pods: int = 2
    moves_period_s: float = 0.0
    scale_period_s: float = 0.0
    history_len: int = 60
    workloads: tuple[str, ...] | None = None
    excluded_namespaces: tuple[str, ...] = ("kube-system",)
    evict_local_storage_pods: bool = False
    name: str = "hierarchical"
    state: HrlState = field(default_factory=HrlState)

    def __post_init__(self) -> None:
        def bad(f: str, v: object, want: str) -> ValueError:
            return ValueError(f"HierarchicalPolicy.{f}: must be {want} (got {v!r})")

        if not (math.isfinite(self.margin) and 0.0 <= self.margin <= 10.0):
            raise bad("margin", self.margin, "in [0, 10] score points")
        if not (math.isfinite(self.overload_threshold) and 0.0 < self.overload_threshold <= 1.0):
            raise bad("overload_threshold", self.overload_threshold, "in (0, 1]")
        if self.max_moves < 0:
            raise bad("max_moves", self.max_moves, ">= 0")
        if self.max_moves_per_service < 1:
            raise bad("max_moves_per_service", self.max_moves_per_service, ">= 1")
        if self.min_serving_pods < 1:
            raise bad("min_serving_pods", self.min_serving_pods, ">= 1")
        for f in ("moves_period_s", "scale_period_s"):
            v = getattr(self, f)
            if not (math.isfinite(v) and v >= 0):
                raise bad(f, v, "a number of seconds >= 0")
        if self.history_len < 1:
            raise bad("history_len", self.history_len, ">= 1")
        self.excluded_namespaces = tuple(self.excluded_namespaces)
        if self.workloads is not None:
            self.workloads = tuple(self.workloads)

    # ---- state -----------------------------------------------------------------------------------------

    def dump_state(self) -> dict[str, Any]:
        """The state as JSON (for the descheduler's state file)."""
        return self.state.to_json()

    def load_state(self, doc: Any) -> None:
        """Replace the state with :meth:`HrlState.from_json` of ``doc``. Raises ValueError for a bad document."""
        self.state = HrlState.from_json(doc)

    # ---- planning --------------------------------------------------------------------------------------

    def movable(self, pod: PodInfo) -> bool:
        """Whether the planner considers moving ``pod`` at all (see the class docstring, step 4)."""
        return (structurally_movable(pod)
                and pod.priority < SYSTEM_CRITICAL_PRIORITY
                and pod.priority_class_name not in SYSTEM_CRITICAL_CLASSES
                and pod.namespace not in self.excluded_namespaces
                and (self.evict_local_storage_pods or not pod.local_storage))

    def plan(self, snapshot: ClusterSnapshot, index: ClusterIndex, placement: PlacementPolicy) -> Plan:
        """One period's plan (see the class docstring); updates :attr:`state`."""
        st = self.state
        now = float(snapshot.taken_at_s)
        st.record_rates(snapshot.graph, now, self.history_len)
        intent = tuple(float(x) for x in self.intent_policy.intent(snapshot, index, st))
        if len(intent) != len(INTENT_SPEC) or not all(math.isfinite(x) for x in intent):
            raise ValueError(f"intent: expected {len(INTENT_SPEC)} finite numbers, got {intent!r}")
        st.last_intent = intent

        targets: dict[str, int] = {}
        if self.autoscaler is not None and due(now, st.last_targets_s, self.scale_period_s):
            targets = self._targets(self.autoscaler.replica_targets(snapshot, st))
            st.last_targets_s = now
            st.last_targets = dict(targets)

        moves: tuple[Move, ...] = ()
        if self.rebalance and due(now, st.last_moves_s, self.moves_period_s):
            moves = self._moves(snapshot, index, placement, intent)
            st.last_moves_s = now
        return Plan(moves=moves, replica_targets=targets, intent=intent)

    def _targets(self, raw: Mapping[str, Any]) -> dict[str, int]:
        allowed = None if self.workloads is None else set(self.workloads)
        out: dict[str, int] = {}
        for key, v in sorted(dict(raw).items()):
            if not isinstance(key, str) or key.count("/") != 1:
                raise ValueError(f"replica_targets: key {key!r} is not namespace/name")
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or int(v) < 0:
                raise ValueError(f"replica_targets[{key!r}]: expected an integer >= 0, got {v!r}")
            if key.split("/", 1)[0] in self.excluded_namespaces or (allowed is not None and key not in allowed):
                continue
            out[key] = int(v)
        return out

    def _moves(self, snapshot: ClusterSnapshot, index: ClusterIndex, placement: PlacementPolicy,
               intent: tuple[float, ...]) -> tuple[Move, ...]:
        if self.max_moves == 0 or len(snapshot.nodes) < 2:
            return ()
        bound: dict[str, int] = {}
        for p in snapshot.pods:
            if p.node_name is not None and not p.terminating:
                bound[p.service] = bound.get(p.service, 0) + 1
        # never move a service's only serving pod: its requests would fail until the replacement starts
        # (make-before-break is the autoscaler's job: scale up first, the move comes in a later period)
        pods = sorted((p for p in snapshot.pods if self.movable(p) and p.node_name in index.node_pos
                       and bound.get(p.service, 0) >= self.min_serving_pods), key=lambda p: p.key)
        return greedy_moves(pods, index, lambda key, view: self._propose(key, view, placement, intent),
                            self.max_moves, self.max_moves_per_service)

    def _propose(self, pod_key: str, view: _View, placement: PlacementPolicy,
                 intent: tuple[float, ...]) -> _Proposal | None:
        index = view.index
        pod = view.pods.get(pod_key)
        if pod is None or pod.node_name is None or pod.node_name not in index.node_pos:
            return None
        others = [n for n in index.node_names if n != pod.node_name]
        if not others:
            return None
        try:
            failed = placement.filter(pod, others, index)
        except Exception:  # noqa: BLE001 - a low level that cannot judge the pod gives no basis for a move
            return None
        targets = []
        for n in others:
            if n in failed:
                continue
            i = index.node_pos[n]
            if node_admits(pod, view.nodes[n], int(index.pod_count[i])) is not None:
                continue
            if _util_after_add(pod, index, i) >= self.overload_threshold:
                continue
            targets.append(n)
        if not targets:
            return None
        try:
            scores = _finite_scores(placement.score(pod, [pod.node_name, *targets], index, intent))
        except Exception:  # noqa: BLE001 - e.g. no service row for the pod: it stays where it is
            return None
        if scores.shape != (len(targets) + 1,):
            raise ValueError(f"placement {getattr(placement, 'name', placement)!r}: score returned shape "
                             f"{scores.shape} for {len(targets) + 1} candidates")
        cur = float(scores[0])
        if not math.isfinite(cur):
            return None
        j = int(np.argmax(scores[1:]))
        best = float(scores[1 + j])
        if not best > cur + self.margin:
            return None
        gain = best - cur
        here = index.node_pos[pod.node_name]
        reason = "overload" if view.util[here] > self.overload_threshold else "policy"
        return _Proposal((-gain, pod.key), Move(pod.key, pod.node_name, targets[j], reason, gain))


# ---- the learned parts, by bundle ---------------------------------------------------------------------------

class BundleMissing(ValueError):
    """A learned stack's bundle directory (or its ``manifest.json``) does not exist; the message names the path
    and says how to make it (``make train``). ``path``: the directory without a bundle; ``hint``: what the
    caller probably meant instead ("" when nothing better than ``make train`` is known)."""

    def __init__(self, message: str, path: str | Path | None = None, hint: str = ""):
        super().__init__(message)
        self.path = None if path is None else Path(path)
        self.hint = hint


def _require_bundle(path: str | Path, what: str, hint: str = "") -> Path:
    p = Path(path)
    if not (p / "manifest.json").is_file():
        if hint:
            raise BundleMissing(f"{what}: {hint}", p, hint)
        raise BundleMissing(f"{what}: no policy bundle at {p} (missing {p / 'manifest.json'}; run `make train`)", p)
    return p


def bundle_error_line(field: str, exc: ValueError, *, default: bool) -> str:
    """One line for configuration field ``field`` (``placement.bundle``, ``planner.autoscaler.bundle``) whose
    bundle did not load with ``exc`` (:class:`BundleMissing`, :class:`policy.bundle.BundleError`, ...):
    ``<field>: <what is wrong>``. ``default``: the field was null, so the path is the committed default: only
    then is ``make train`` suggested for a missing bundle (a path the user wrote is more likely a typo)."""
    if isinstance(exc, BundleMissing) and exc.path is not None:
        if exc.hint:
            return f"{field}: {exc.hint}"
        advice = f"run `make train` to build the default bundles, or set {field}" if default else "check the path"
        return f"{field}: no policy bundle at {exc.path} (missing {exc.path / 'manifest.json'}; {advice})"
    return f"{field}: {' '.join(str(exc).split())}"


def load_learned_placement(path: str | Path) -> PlacementPolicy:
    """The learned low-level policy (``policy.placement.LearnedPlacement.load(path)``) from bundle directory
    ``path``. Raises :class:`BundleMissing` when there is no bundle there, ``ValueError`` when the module is
    not available, and whatever the loader raises (:class:`policy.bundle.BundleError`) for a bad bundle."""
    p = Path(path)
    hint = ""
    if not (p / "manifest.json").is_file() and (p / "low" / "manifest.json").is_file():
        hint = f"{p} holds a stack's bundles, not a bundle: name its low/ directory, {p / 'low'}"
    p = _require_bundle(p, "low-level placement", hint)
    try:
        from .placement import LearnedPlacement  # noqa: PLC0415 - part A of issue 6
    except ImportError as exc:
        raise ValueError(f"low-level placement bundle {p}: policy.placement cannot be imported ({exc})") from exc
    return LearnedPlacement.load(p)


class DrpcReplicaAutoscaler:
    """:class:`ReplicaAutoscaler` over the DRPC students (:class:`policy.drpc.DrpcAutoscaler`): their own state
    (:class:`policy.drpc.DrpcState`: per-minute rate history for the GRU predictor, last scale times) lives in
    ``HrlState.autoscaler["drpc"]``, so it is persisted with the planner's state. ``workloads``
    (``namespace/name``; ``None``: every Deployment with a CPU request) are the Deployments it manages;
    ``signals`` (service → :class:`policy.drpc.ServiceSignals`, e.g. a service mesh's or the simulator's
    per-service metrics) may be set before each period; ``None``: the snapshot's call graph only.

    The students' targets pass two guardrails, in the spirit of the HPA's ``behavior`` (they are part of
    hrl-scheduler's planner, not of DRPC: the ``drpc`` baseline stack runs the students bare):

    - **saturation shield**: a Deployment whose measured pods use at least ``saturation`` of their CPU limit
      (of the request where no limit is set), or whose service refuses at least ``refused_frac`` of its
      arrivals (from ``signals``), gets at least the HPA formula's replicas at ``shield_target`` of the request:
      ``max(student, ceil(used_m / (shield_target * request_m)), current + 1)``. A student that never saw an
      application can otherwise hold a saturated service at its replicas (seen on held-out apps in
      ``make bench``: the CPU it uses is capped by its limit, so the student's utilisation target can make a
      saturated service look adequately provisioned);
    - **scale-down stabilisation**: the target is the maximum of the (shielded) targets of the last
      ``stabilization_s`` seconds (HPA's default 300 s), so a target that flips minute to minute does not
      churn pods (kept in ``HrlState.recommendations``).

    Ranges: 0 < ``saturation`` <= 1, 0 < ``shield_target`` <= 1, 0 < ``refused_frac`` <= 1,
    ``stabilization_s`` >= 0; ValueError naming the parameter otherwise.
    """

    name = "drpc"

    def __init__(self, drpc: Any, workloads: Iterable[str] | None = None, *, saturation: float = 0.9,
                 shield_target: float = 0.8, refused_frac: float = 0.01, stabilization_s: float = 300.0):
        for f, v in (("saturation", saturation), ("shield_target", shield_target), ("refused_frac", refused_frac)):
            if not (isinstance(v, (int, float)) and math.isfinite(v) and 0 < v <= 1):
                raise ValueError(f"DrpcReplicaAutoscaler.{f}: must be in (0, 1], got {v!r}")
        if not (isinstance(stabilization_s, (int, float)) and math.isfinite(stabilization_s) and stabilization_s >= 0):
            raise ValueError(f"DrpcReplicaAutoscaler.stabilization_s: must be >= 0, got {stabilization_s!r}")
        self.drpc = drpc
        self.workloads = None if workloads is None else tuple(workloads)
        self.signals: Mapping[str, Any] | None = None
        self.saturation = float(saturation)
        self.shield_target = float(shield_target)
        self.refused_frac = float(refused_frac)
        self.stabilization_s = float(stabilization_s)

    def shield(self, snapshot: ClusterSnapshot, w: WorkloadInfo, target: int) -> int:
        """The saturation shield for workload ``w`` (see the class docstring): ``target`` or more."""
        pods = [p for p in pods_of_workload(snapshot, w) if p.node_name is not None and p.usage is not None]
        cur = max(int(w.replicas), 0)
        req = float(w.pod_requests.cpu_m)
        if not pods or req <= 0:
            return target
        used = float(sum(p.usage.cpu_m for p in pods))
        cap = float(sum(p.limits.cpu_m if p.limits.cpu_m > 0 else p.requests.cpu_m for p in pods))
        sig = (self.signals or {}).get(w.service)
        refused = getattr(sig, "refused_frac", None)
        saturated = cap > 0 and used >= self.saturation * cap
        if saturated or (refused is not None and refused >= self.refused_frac):
            hpa = int(math.ceil(used / (self.shield_target * req) - 1e-9))
            return max(int(target), hpa, cur + 1)
        return int(target)

    def replica_targets(self, snapshot: ClusterSnapshot, state: HrlState) -> dict[str, int]:
        from .drpc import DrpcState  # noqa: PLC0415

        ds = DrpcState.from_dict(state.autoscaler.get("drpc"))
        by_key = {f"{w.namespace}/{w.name}": w for w in snapshot.workloads
                  if w.kind == "Deployment" and w.pod_requests.cpu_m > 0}
        keys = None if self.workloads is None else [k for k in self.workloads if k in by_key]
        targets = self.drpc.replica_targets(snapshot, ds, self.signals, keys)
        state.autoscaler["drpc"] = ds.to_dict()
        now = float(snapshot.taken_at_s)
        hi = int(getattr(self.drpc.mapping, "max_replicas", 10**6))
        out: dict[str, int] = {}
        for k, v in targets.items():
            w = by_key.get(k)
            t = min(self.shield(snapshot, w, int(v)), max(hi, int(v))) if w is not None else int(v)
            window = [r for r in state.recommendations.get(k, []) if r[0] > now - self.stabilization_s]
            window.append([now, float(t)])
            state.recommendations[k] = window
            out[k] = int(max(r[1] for r in window))
        return out


def load_learned_autoscaler(path: str | Path, workloads: Iterable[str] | None = None, *,
                            slo_p95_ms: float | None = None, stabilization_s: float = 300.0) -> ReplicaAutoscaler:
    """The DRPC student autoscaler of bundle directory ``path`` (``path/student`` + ``path/predictor``, as
    :meth:`policy.drpc.DrpcAutoscaler.load` reads them; the observation layout, with the graph encoder's
    embeddings or without, is the one the student's bundle declares), wrapped in
    :class:`DrpcReplicaAutoscaler` for ``workloads``. ``slo_p95_ms``: the application's p95 SLO (a feature of the
    students; ``None``: unknown); ``stabilization_s``: the scale-down stabilisation window of
    :class:`DrpcReplicaAutoscaler`. Raises :class:`BundleMissing` when ``path/student`` has no bundle, ``ValueError``
    when ``policy.drpc`` cannot be imported, and :class:`policy.bundle.BundleError` naming expected and found when
    the bundle matches neither layout (or anything else is wrong with it: one line naming the directory and the
    field). A ``path`` that is itself a bundle (``.../student``) is reported with a hint to name its parent."""
    p = Path(path)
    hint = ""
    if (p / "manifest.json").is_file() and not (p / "student").exists():
        hint = f"{p} is a single bundle, not a directory holding student/ and predictor/"
        if (p.parent / "student" / "manifest.json").is_file():
            hint += f": name its parent, {p.parent}"
    elif not (p / "student").exists() and (p / "high" / "student" / "manifest.json").is_file():
        hint = f"{p} holds a stack's bundles, not student/ and predictor/: name its high/ directory, {p / 'high'}"
    _require_bundle(p / "student", "autoscaler (DRPC students)", hint)
    try:
        from .bundle import BundleError, PolicyBundle, located  # noqa: PLC0415
        from .drpc import SPECS, DrpcAutoscaler  # noqa: PLC0415 - part B of issue 6
    except ImportError as exc:
        raise ValueError(f"autoscaler bundle {p}: policy.drpc cannot be imported ({exc})") from exc
    # the observation layout the student declares: with the encoder's embeddings ("hrl") or without ("drpc")
    local = PolicyBundle.load(p / "student", level="high").feature_spec.get("local")
    spec = next((k for k, v in SPECS.items() if v == local), None)
    if spec is None:
        spec = "hrl" if local is not None and any(n.startswith("emb_") for n in local.names) else "drpc"
    try:
        return DrpcReplicaAutoscaler(DrpcAutoscaler.load(p, spec=spec, slo_p95_ms=slo_p95_ms), workloads,
                                     stabilization_s=stabilization_s)
    except BundleError as exc:
        raise located(exc, p) from None

