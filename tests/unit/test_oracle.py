"""lookahead-oracle: every period it rolls out candidate intents in forks of the run and continues with the best, so
the real run's cost over a period equals the chosen candidate's rollout (forks are faithful, the random numbers are
common), and hrl-constant imposes one intent on the served hierarchy."""

from __future__ import annotations

import numpy as np
import pytest

from policy.sim.objective import app_costs
from policy.sim.oracle import ImposedIntent, LookaheadConfig, constant_intent
from policy.sim.scenario import build
from policy.sim.stacks import StackContext, build_stack

MINUTES = 15


def _run(stack: str):
    run = build("heterogeneous", app="dsb-hotel-reservation", minutes=MINUTES, seed=2, offset_min=320, n_samples=200)
    built = build_stack(stack, StackContext(run.app, run.cluster, run.config.seed, run.config, rps=run.rps))
    sim = built.simulation(run.app, run.rps, run.cluster, run.config)
    while sim.minute < MINUTES:
        sim.advance()
    return run, built, sim


def test_the_real_run_over_each_period_costs_exactly_what_the_chosen_candidates_fork_cost():
    run, built, sim = _run("lookahead-oracle@horizon=5,coordinate=1")
    oracle = built.handles["oracle"]
    costs = app_costs(run.app, sim.series)
    assert [d.minute for d in oracle.decisions] == [0, 5, 10]
    for d in oracle.decisions:
        assert d.best.cost == min(c.cost for c in d.candidates)
        assert float(costs[d.minute : d.minute + 5].sum()) == pytest.approx(d.best.cost, rel=0, abs=1e-9)
    labels = [c.label for c in oracle.decisions[0].candidates]
    assert "learned" in labels and any(lb.startswith("constant c=0.85") for lb in labels)
    assert any(lb.endswith("weights 0.5/2") for lb in labels) and any(lb.endswith("weights 2/0.5") for lb in labels)
    for prev, d in zip(oracle.decisions, oracle.decisions[1:]):  # an imposed intent is kept as a candidate
        kept = prev.candidates[prev.executed].intent is not None
        assert ("keep" in [c.label for c in d.candidates]) == kept
    # the searches vary the learned intent too when it wins (the intent its fork ran)
    assert any(c.label.startswith("learned; ") for d in oracle.decisions for c in d.candidates) or all(
        d.candidates[d.chosen].label != "learned" for d in oracle.decisions
    )
    counters = built.counters()
    assert counters["oracle_decisions"] == 3 and counters["oracle_rollouts"] == sum(
        len(d.candidates) for d in oracle.decisions
    )


def test_hrl_constant_holds_its_intent_and_differs_by_knob():
    _, built_a, sim_a = _run("hrl-constant@capacity=0.5")
    _, _, sim_b = _run("hrl-constant@capacity=0.9")
    planner = built_a.handles["planner"]
    assert set(planner.state.capacity_targets.values()) == {0.5}
    assert planner.state.move_budget_frac == 0.0
    assert sum(sim_a.series["cpu_cores_requested"]) > sum(sim_b.series["cpu_cores_requested"])


def test_an_imposed_intent_falls_back_to_its_base_and_then_to_the_defaults():
    class Base:
        def intent(self, snapshot, index, state):
            return constant_intent(["a"], 0.6)

    assert ImposedIntent().intent(None, None, None) == (1.0, 1.0)
    imposed = ImposedIntent(Base())
    assert imposed.intent(None, None, None).capacity_target == {"a": 0.6}
    imposed.current = constant_intent(["a"], 0.4)
    assert imposed.intent(None, None, None).capacity_target == {"a": 0.4}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("horizon_min", 0),
        ("capacity_targets", (1.5,)),
        ("move_budgets", (-0.1,)),
        ("placement_weights", ((1.0,),)),
        ("random_candidates", -1),
    ],
)
def test_bad_oracle_settings_are_refused_naming_the_field(field, value):
    with pytest.raises(ValueError, match=f"lookahead.{field}"):
        LookaheadConfig(**{field: value})


def test_costs_are_per_minute_and_finite():
    run, _, sim = _run("hrl-constant")
    c = app_costs(run.app, sim.series)
    assert c.shape == (MINUTES,) and np.all(np.isfinite(c)) and np.all(c > 0)


def test_random_candidates_vary_each_service_within_the_grid_and_repeat_for_the_same_run_and_minute():
    run = build("baseline-2026-11", app="online-boutique", minutes=6, seed=3, offset_min=320, n_samples=100)
    ctx = StackContext(run.app, run.cluster, run.config.seed, run.config, rps=run.rps)
    built = build_stack("lookahead-oracle", ctx)
    oracle = built.handles["oracle"]
    oracle.config = LookaheadConfig(capacity_targets=(0.5, 0.7, 0.9), random_candidates=3)
    sim = built.simulation(run.app, run.rps, run.cluster, run.config)
    first = oracle._random_intents(sim)
    assert len(first) == 3 and first == oracle._random_intents(sim)  # the same run and minute: the same draws
    caps = [set(i.capacity_target.values()) for i in first]
    assert all(c <= {0.5, 0.7, 0.9} for c in caps) and any(len(c) > 1 for c in caps)  # per service, from the grid
    assert all(set(i.capacity_target) == set(oracle.services) for i in first)
    sim.advance()
    assert oracle._random_intents(sim) != first  # another minute: other draws
    labels = [c.label for c in oracle.decisions[0].candidates]
    assert [lb for lb in labels if lb.startswith("random ")] == ["random 0", "random 1", "random 2"]
