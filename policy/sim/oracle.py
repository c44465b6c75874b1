"""``lookahead-oracle``: the achievable target of the high level, measured inside the simulator.

At every high-level period (:data:`~policy.sim.stackbase.DESCHEDULER_PERIOD_MIN` minutes, and at t = 0 before the
application's pods are placed) the oracle forks the running simulation (:meth:`Simulation.fork`) once per candidate
intent, runs each fork for ``horizon_min`` simulated minutes with that intent imposed on the hierarchy (held for the
whole horizon), and continues the real run with the candidate whose forks cost least by the one objective
(:mod:`policy.sim.objective`). Every fork starts from the same state with the same random generators (common random
numbers) and sees the run's real trace (perfect foresight). It is a greedy one-step lookahead (a rollout algorithm in
the sense of Bertsekas, "Rollout algorithms for discrete optimization", 2013): it is no bound, but an achievable
result that every candidate it considers (the learned intent, the tuned constants, the HPA-like targets) can only
match or lose to over its horizon.

The candidates of a period (:meth:`LookaheadOracle.candidates`):

- ``keep``: the intent in force (no change);
- ``learned``: the learned high level's own intent, state-dependent through the horizon (when the stack has one);
- ``constant c=..,b=..``: one capacity target ``c`` for every service and move budget ``b`` over the grid of
  :class:`LookaheadConfig` (``capacity_targets`` x ``move_budgets``); ``c = 0.8`` is what an HPA at 80 % aims for;
- ``random k``: ``random_candidates`` intents whose services each draw their capacity target from the grid and whose
  global weights are drawn from the defaults and ``placement_weights`` (training labels: per-service variations for
  a cost model to tell the services apart, :mod:`policy.train.intent_critic`; 0 in the benchmark), from a generator
  seeded by the run's seed and the minute;
- then a coordinate search from the best: for the ``coordinate_services`` services that use most CPU, the best
  intent with that service's capacity target moved by ``± coordinate_step`` (kept when it costs less); then the best
  with each of the ``placement_weights`` as its global (``locality_weight``, ``balance_weight``): spread pods over
  the nodes or consolidate them near their callers, for the pods placed in the horizon (kept when it costs less).

A candidate equal to one already tried is not rolled out again (same intent, same state, same random numbers: the
same cost, bit for bit).

The oracle drives the learned stack ``base`` (``hrl-scheduler``: its placement, autoscaler, resizer, moves and guards,
as served) through :class:`ImposedIntent`; its decisions (the costs of every candidate at every period) are kept in
:attr:`LookaheadOracle.decisions`, which training uses as labels (:mod:`policy.train.dagger`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from policy.highlevel import HrlState, Intent, IntentPolicy, default_intent
from policy.highlevel.tuned import load_tuned_constant
from policy.index import ClusterIndex
from policy.state import ClusterSnapshot

from .app import AppSpec
from .engine import Simulation
from .hrl_stacks import VARIANTS, StackParts, build_hrl_stack, bundles_root, load_parts
from .objective import DEFAULT_OBJECTIVE, Objective, app_costs
from .stackbase import (
    DESCHEDULER_PERIOD_MIN,
    INTENT_AUTOSCALER_KNOBS,
    TRAINING_SEED_KNOB,
    Knob,
    StackBuild,
    StackContext,
    autoscaled_workloads,
    register_stack,
)

__all__ = [
    "LookaheadConfig",
    "ImposedIntent",
    "Candidate",
    "OracleDecision",
    "LookaheadOracle",
    "constant_intent",
    "managed_services",
    "lookahead_oracle",
    "CONSTANT_FILE",
    "DEFAULT_CAPACITY_TARGET",
    "load_tuned_constant",
    "hrl_constant",
]


@dataclass(frozen=True)
class LookaheadConfig:
    """The oracle's knobs: ``horizon_min`` (simulated minutes each fork runs, >= 1), ``period_min`` (minutes between
    decisions, >= 1), the constant grid (``capacity_targets`` in (0, 1], ``move_budgets`` in [0, 1]), the coordinate
    search (``coordinate_services`` >= 0 services, ``coordinate_step`` > 0), the global weights tried on the best
    (``placement_weights``: (locality, balance) pairs >= 0), whether the learned intent is a candidate
    (``learned``), ``random_candidates`` >= 0 random per-service intents per period, and the ``objective`` the forks
    are ranked by. Raises ValueError naming the field."""

    horizon_min: int = 10
    period_min: int = DESCHEDULER_PERIOD_MIN
    capacity_targets: tuple[float, ...] = (0.55, 0.65, 0.75, 0.85)
    move_budgets: tuple[float, ...] = (0.0,)
    coordinate_services: int = 2
    coordinate_step: float = 0.1
    placement_weights: tuple[tuple[float, float], ...] = ((0.5, 2.0), (2.0, 0.5))
    learned: bool = True
    random_candidates: int = 0
    objective: Objective = field(default_factory=lambda: DEFAULT_OBJECTIVE)

    def __post_init__(self) -> None:
        if self.horizon_min < 1:
            raise ValueError(f"lookahead.horizon_min: expected an integer >= 1, got {self.horizon_min!r}")
        if self.period_min < 1:
            raise ValueError(f"lookahead.period_min: expected an integer >= 1, got {self.period_min!r}")
        for c in self.capacity_targets:
            if not 0.0 < c <= 1.0:
                raise ValueError(f"lookahead.capacity_targets: expected numbers in (0, 1], got {c!r}")
        for b in self.move_budgets:
            if not 0.0 <= b <= 1.0:
                raise ValueError(f"lookahead.move_budgets: expected numbers in [0, 1], got {b!r}")
        if self.coordinate_services < 0:
            raise ValueError(f"lookahead.coordinate_services: expected >= 0, got {self.coordinate_services!r}")
        if self.random_candidates < 0:
            raise ValueError(f"lookahead.random_candidates: expected >= 0, got {self.random_candidates!r}")
        if not self.coordinate_step > 0:
            raise ValueError(f"lookahead.coordinate_step: expected a number > 0, got {self.coordinate_step!r}")
        for w in self.placement_weights:
            if len(w) != 2 or min(w) < 0:
                raise ValueError(f"lookahead.placement_weights: expected (locality, balance) pairs >= 0, got {w!r}")


class ImposedIntent:
    """An :class:`~policy.highlevel.IntentPolicy` whose intent is set from outside: :attr:`current` when set, else
    what ``base`` (a state-dependent policy, e.g. the learned high level) says, else the defaults. A ``base`` that
    keeps its own history (``record``) records every cycle either way, so switching between the two is seamless."""

    def __init__(self, base: IntentPolicy | None = None):
        self.base = base
        self.current: Intent | None = None
        #: The intent ``base`` gave at its last call (``None`` before any, or when the last one was imposed).
        self.last_delegated: Intent | None = None

    @property
    def signals(self) -> Any:
        """The service metrics the stack hands its high level every cycle, passed on to ``base``."""
        return getattr(self.base, "signals", None)

    @signals.setter
    def signals(self, value: Any) -> None:
        if self.base is not None and hasattr(self.base, "signals"):
            self.base.signals = value

    def record(self, snapshot: ClusterSnapshot, index: ClusterIndex, state: HrlState) -> None:
        rec = getattr(self.base, "record", None)
        if rec is not None:
            rec(snapshot, index, state)

    def intent(self, snapshot: ClusterSnapshot, index: ClusterIndex, state: HrlState) -> Intent | tuple[float, ...]:
        self.last_delegated = None
        if self.current is not None:
            return self.current
        if self.base is not None:
            out = self.base.intent(snapshot, index, state)
            self.last_delegated = out if isinstance(out, Intent) else Intent(tuple(out))
            return out
        return default_intent()


def constant_intent(services: Sequence[str], capacity_target: float, move_budget_frac: float = 0.0) -> Intent:
    """The intent with one ``capacity_target`` for every service, the default global weights and co-location
    priorities, and move budget ``move_budget_frac``."""
    return Intent(
        default_intent(),
        capacity_target={s: float(capacity_target) for s in services},
        move_budget_frac=float(move_budget_frac),
    )


@dataclass(frozen=True)
class Candidate:
    """One candidate of a period: its ``label``, the ``intent`` imposed (``None``: the learned policy's) and the
    ``cost`` of its fork over the horizon (the objective summed over the minutes; lower is better)."""

    label: str
    intent: Intent | None
    cost: float


@dataclass(frozen=True)
class OracleDecision:
    """What the oracle chose at ``minute``: every candidate tried (in order), the index of the cheapest
    (``chosen``), the index of the one the run continued with (``executed``: the chosen one, unless a ``chooser``
    said otherwise, e.g. DAgger running the learner's own intent), and the learned policy's ``observation`` of the
    state (what it read to propose its candidate; ``None`` without a learned candidate)."""

    minute: int
    candidates: tuple[Candidate, ...]
    chosen: int
    executed: int = -1
    observation: Any = None

    @property
    def best(self) -> Candidate:
        return self.candidates[self.chosen]


class LookaheadOracle:
    """The driver of ``lookahead-oracle`` (module docstring): called by the simulation between minutes
    (:attr:`Simulation.before_minute`); at each period it forks, rolls out and imposes the best candidate.
    ``services``: the services whose capacity targets it sets; ``app``: for the objective's SLO and reference CPU."""

    def __init__(
        self,
        config: LookaheadConfig,
        imposed: ImposedIntent,
        app: AppSpec,
        services: Sequence[str],
        chooser: Callable[[OracleDecision], int] | None = None,
    ):
        self.config = config
        self.chooser = chooser
        self.imposed = imposed
        self.app = app
        self.services = tuple(services)
        self.decisions: list[OracleDecision] = []
        self.rollouts = 0
        self.in_rollout = False
        self._observation: Any = None
        self._learned: Intent | None = None

    def __call__(self, sim: Simulation) -> None:
        if self.in_rollout or sim.minute % self.config.period_min != 0:
            return
        tried: list[Candidate] = []
        self._observation = None
        self._learned = None
        for label, intent in self.candidates(sim):
            tried.append(Candidate(label, intent, self.rollout(sim, intent)))
        chosen = int(np.argmin([c.cost for c in tried]))
        for svc in self._busiest(sim)[: self.config.coordinate_services]:
            base = tried[chosen]
            base_intent = self._resolved(base)
            if base_intent is None:
                continue
            for sign in (+1.0, -1.0):
                varied = _with_capacity(base_intent, svc, sign * self.config.coordinate_step)
                if varied is None or any(varied == c.intent for c in tried):
                    continue
                c = Candidate(f"{base.label}; {svc} {'+' if sign > 0 else '-'}", varied, self.rollout(sim, varied))
                tried.append(c)
                if c.cost < tried[chosen].cost:
                    chosen = len(tried) - 1
                    break
        base = tried[chosen]
        base_intent = self._resolved(base)
        for loc, bal in self.config.placement_weights if base_intent is not None else ():
            varied = _with_weights(base_intent, loc, bal)
            if any(varied == c.intent for c in tried):
                continue
            c = Candidate(f"{base.label}; weights {loc:g}/{bal:g}", varied, self.rollout(sim, varied))
            tried.append(c)
            if c.cost < tried[chosen].cost:
                chosen = len(tried) - 1
        decision = OracleDecision(sim.minute, tuple(tried), chosen, chosen, self._observation)
        if self.chooser is not None:
            executed = int(self.chooser(decision))
            if not 0 <= executed < len(tried):
                raise ValueError(f"oracle chooser: index {executed} is not one of the {len(tried)} candidates")
            decision = OracleDecision(sim.minute, tuple(tried), chosen, executed, self._observation)
        self.decisions.append(decision)
        self.imposed.current = tried[decision.executed].intent

    def candidates(self, sim: Simulation) -> list[tuple[str, Intent | None]]:
        """The period's first candidates (module docstring), in order: keep, learned, the constant grid. A candidate
        equal to an earlier one (``keep`` is often a constant of the grid) is left out: its fork would run the same
        intent from the same state with the same random numbers, so its cost is the earlier one's, bit for bit, and
        the earlier one wins the tie anyway."""
        out: list[tuple[str, Intent | None]] = []
        if self.imposed.current is not None:
            out.append(("keep", self.imposed.current))
        if self.config.learned and self.imposed.base is not None:
            out.append(("learned", None))
        for b in self.config.move_budgets:
            for c in self.config.capacity_targets:
                intent = constant_intent(self.services, c, b)
                if not any(intent == i for _label, i in out):
                    out.append((f"constant c={c:g},b={b:g}", intent))
        for k, intent in enumerate(self._random_intents(sim)):
            if not any(intent == i for _label, i in out):
                out.append((f"random {k}", intent))
        return out

    def _random_intents(self, sim: Simulation) -> list[Intent]:
        """``random_candidates`` intents: each service's capacity target drawn from the grid, the global weights
        from the defaults and ``placement_weights``, the first move budget; the same for the same run and minute."""
        cfg = self.config
        if not cfg.random_candidates or not self.services:
            return []
        rng = np.random.default_rng([int(sim.config.seed) & 0xFFFFFFFF, int(sim.minute), 7919])
        weights = [tuple(default_intent()[:2]), *cfg.placement_weights]
        out = []
        for _ in range(cfg.random_candidates):
            caps = rng.choice(np.asarray(cfg.capacity_targets, dtype=np.float64), size=len(self.services))
            loc, bal = weights[int(rng.integers(len(weights)))]
            values = list(default_intent())
            values[0], values[1] = float(loc), float(bal)
            out.append(
                Intent(
                    tuple(values),
                    capacity_target={s: float(c) for s, c in zip(self.services, caps)},
                    move_budget_frac=float(cfg.move_budgets[0]),
                )
            )
        return out

    def _resolved(self, c: Candidate) -> Intent | None:
        """The intent candidate ``c`` ran: its own, or for ``learned`` the one the learned policy gave at the
        period's start in its fork (so the searches below can vary it too); ``None`` when there is none."""
        return c.intent if c.intent is not None else self._learned

    def rollout(self, sim: Simulation, intent: Intent | None) -> float:
        """The objective summed over the horizon of a fork of ``sim`` running ``intent`` (None: the learned one)."""
        fork, me = sim.fork(self)
        me.in_rollout = True
        me.imposed.current = intent
        start = fork.minute
        end = min(start + self.config.horizon_min, fork.config.minutes)
        while fork.minute < end:
            fork.advance()
            if intent is None and fork.minute == start + 1:  # the learned policy decided in this minute
                self._observation = getattr(me.imposed.base, "last_observation", None)
                self._learned = me.imposed.last_delegated
        self.rollouts += 1
        series = {k: v[start:end] for k, v in fork.series.items()}
        return float(app_costs(self.app, series, self.config.objective).sum())

    def _busiest(self, sim: Simulation) -> list[str]:
        """The services by CPU used in the last minute (most first), among those the oracle sets."""
        use: dict[str, float] = {}
        for p in sim.cluster.live_pods():
            m = sim.pod_cpu_usage_m.get(p.info.key)
            if m is not None and p.info.service in self.services:
                use[p.info.service] = use.get(p.info.service, 0.0) + float(m)
        return sorted(use, key=lambda s: (-use[s], s))

    def counters(self) -> Mapping[str, float]:
        """Per run: the periods decided, the rollouts run, and how often the learned intent was chosen."""
        return {
            "oracle_decisions": float(len(self.decisions)),
            "oracle_rollouts": float(self.rollouts),
            "oracle_chose_learned": float(sum(d.best.label == "learned" for d in self.decisions)),
        }


def _with_capacity(intent: Intent, service: str, delta: float) -> Intent | None:
    cur = float(intent.capacity_target.get(service, 0.0))
    if cur <= 0.0:
        return None
    new = min(max(cur + delta, 0.3), 0.95)
    if new == cur:
        return None
    return Intent(
        intent.values,
        capacity_target={**intent.capacity_target, service: new},
        colocation_priority=intent.colocation_priority,
        move_budget_frac=intent.move_budget_frac,
    )


def _with_weights(intent: Intent, locality: float, balance: float) -> Intent:
    values = list(intent.values) or list(default_intent())
    values[0], values[1] = float(locality), float(balance)
    return Intent(
        tuple(values),
        capacity_target=intent.capacity_target,
        colocation_priority=intent.colocation_priority,
        move_budget_frac=intent.move_budget_frac,
    )


ORACLE_KNOBS = (
    Knob("horizon", 1, 60, integer=True, help="simulated minutes each candidate's fork runs"),
    Knob("learned", 0, 1, integer=True, help="1: the learned intent is a candidate"),
    Knob("coordinate", 0, 20, integer=True, help="services of the per-service coordinate search"),
    Knob("weights", 0, 1, integer=True, help="1: try spreading and consolidating weights on the best"),
    TRAINING_SEED_KNOB,
)


@register_stack(
    "lookahead-oracle",
    "the achievable target: hrl-scheduler with, every period, the best of its candidate intents by forked "
    "rollouts with perfect foresight",
    ORACLE_KNOBS,
)
def lookahead_oracle(ctx: StackContext) -> StackBuild:
    """``lookahead-oracle`` over ``hrl-scheduler``'s bundles (module docstring); knobs ``horizon``, ``learned``,
    ``coordinate``."""
    p: Mapping[str, Any] = ctx.params
    cfg = LookaheadConfig(
        horizon_min=int(p.get("horizon", LookaheadConfig.horizon_min)),
        learned=bool(p.get("learned", 1)),
        coordinate_services=int(p.get("coordinate", LookaheadConfig.coordinate_services)),
        placement_weights=LookaheadConfig.placement_weights if int(p.get("weights", 1)) else (),
    )
    parts = load_parts(VARIANTS["hrl-scheduler"], ctx)
    imposed = ImposedIntent(parts.intent_policy)
    built = build_hrl_stack("hrl-scheduler", ctx, StackParts(parts.placement, parts.autoscaler, imposed))
    oracle = LookaheadOracle(cfg, imposed, ctx.app, managed_services(ctx.app))
    inner = built.counters

    def counters() -> dict[str, float]:
        return {**(dict(inner()) if inner is not None else {}), **oracle.counters()}

    built.before_minute = oracle
    built.counters = counters
    built.handles = {**built.handles, "oracle": oracle}
    return built


def managed_services(app: AppSpec) -> list[str]:
    """The services of ``app``'s autoscaled Deployments (:func:`~policy.sim.stackbase.autoscaled_workloads`), sorted."""
    keys = set(autoscaled_workloads(app))
    return sorted({w.service for w in app.workloads if f"{w.namespace}/{w.name}" in keys})


#: Where a stack's tuned constant intent lives, under its bundles root (``hrl-policy train constant`` writes it).
CONSTANT_FILE = Path("hrl-scheduler") / "high" / "constant.json"
#: The capacity target of ``hrl-constant`` where no tuned constant is committed.
DEFAULT_CAPACITY_TARGET = 0.7


CONSTANT_KNOBS = (
    Knob("capacity", 0.3, 0.95, help="capacity target of every service, fraction of the pods' CPU requests"),
    Knob("budget", 0.0, 1.0, help="move budget, share of the planner's maxMoves"),
    TRAINING_SEED_KNOB,
    *INTENT_AUTOSCALER_KNOBS,
)


@register_stack(
    "hrl-constant",
    "hrl-scheduler with a constant intent (the tuned constant of policy/bundles/hrl-scheduler/high/constant.json, or "
    "the knobs) instead of its learned high level: the best constant the learned high level must beat",
    CONSTANT_KNOBS,
)
def hrl_constant(ctx: StackContext) -> StackBuild:
    """``hrl-scheduler``'s placement, autoscaler, resizer, moves and guards under one constant intent
    (:func:`constant_intent`). Its capacity target, move budget and burst share: the knobs ``capacity``, ``budget``
    and ``burst`` where given, else the tuned constant committed with the bundles (:data:`CONSTANT_FILE` under the
    training seed's bundles root, :func:`load_tuned_constant`), else capacity :data:`DEFAULT_CAPACITY_TARGET`, no
    moves and burst 0. Raises ValueError for a malformed ``constant.json``."""
    parts = load_parts(VARIANTS["hrl-scheduler"], ctx)
    tuned = load_tuned_constant(bundles_root(ctx) / CONSTANT_FILE) or {}
    capacity = float(ctx.params.get("capacity", tuned.get("capacity_target", DEFAULT_CAPACITY_TARGET)))
    budget = float(ctx.params.get("budget", tuned.get("move_budget_frac", 0.0)))
    imposed = ImposedIntent()
    imposed.current = constant_intent(managed_services(ctx.app), capacity, budget)
    built = build_hrl_stack("hrl-scheduler", ctx, StackParts(parts.placement, parts.autoscaler, imposed))
    auto = parts.autoscaler
    built.handles = {
        **built.handles,
        "constant": {
            "capacity_target": capacity,
            "move_budget_frac": budget,
            "burst": getattr(auto, "burst", None),
            "forecast_min": getattr(auto, "forecast_min", None),
            "entry_forecast": getattr(auto, "entry_forecast", None),
            "limit_target": getattr(auto, "limit_target", None),
        },
    }
    return built
