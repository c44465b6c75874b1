"""policy.sim.objective: the one reward, on hand-computed minutes."""

import math

import numpy as np
import pytest

from policy.sim.objective import (
    DEFAULT_OBJECTIVE,
    MinuteOutcome,
    Objective,
    intent_following_penalty,
    minute_outcomes,
    period_rewards,
    run_objective,
)

OBJ = Objective(mean_weight=0.5, p95_weight=0.5, violation_weight=1.0, failed_weight=100.0, cpu_price=0.5, cap=10.0)


def test_a_healthy_minute_costs_its_latency_relative_to_the_slo_and_its_cpu():
    # mean 100 ms, p95 150 ms against an SLO of 200 ms, nothing failed, 3 cores for a 2-core manifest:
    # 0.5·0.5 + 0.5·0.75 + 0 + 0 + 0.5·1.5 = 1.375
    m = MinuteOutcome(100.0, 150.0, 0.0, 600.0, 3.0)
    assert OBJ.costs(m, 200.0, 2.0) == pytest.approx([1.375])
    assert OBJ.rewards(m, 200.0, 2.0) == pytest.approx([-1.375])


def test_a_violating_minute_pays_the_penalty_and_its_failures():
    # p95 300 > SLO 200: 0.5·(250/200) + 0.5·1.5 + 1 (violation) + 100·(6/600) + 0.5·(2/2) = 3.875
    m = MinuteOutcome(250.0, 300.0, 6.0, 600.0, 2.0)
    assert OBJ.costs(m, 200.0, 2.0) == pytest.approx([3.875])


def test_a_minute_whose_requests_all_failed_takes_the_cap_and_counts_as_violating():
    # no latency sample: cap 10 on both latency terms, violation, 100 % failed: 5 + 5 + 1 + 100 + 0
    m = MinuteOutcome(math.inf, math.inf, 50.0, 50.0, 0.0)
    assert OBJ.costs(m, 200.0, 1.0) == pytest.approx([111.0])


def test_a_minute_without_traffic_costs_only_its_cpu():
    m = MinuteOutcome(0.0, 0.0, 0.0, 0.0, 4.0)
    assert OBJ.costs(m, 200.0, 2.0) == pytest.approx([1.0])


def test_latency_terms_are_capped_so_one_bad_minute_stays_bounded():
    m = MinuteOutcome(1e9, 1e9, 0.0, 100.0, 0.0)
    assert OBJ.costs(m, 100.0, 1.0) == pytest.approx([0.5 * 10 + 0.5 * 10 + 1.0])


def test_series_of_a_simulation_are_read_by_name_and_averaged_per_minute():
    series = {
        "latency_mean_ms": [100.0, 250.0],
        "latency_p95_ms": [150.0, 300.0],
        "failed": [0.0, 6.0],
        "offered": [600.0, 600.0],
        "cpu_cores_requested": [3.0, 2.0],
        "rps": [10.0, 10.0],
    }
    assert run_objective(series, 200.0, 2.0, OBJ) == pytest.approx((1.375 + 3.875) / 2)
    assert minute_outcomes(series).failed.tolist() == [0.0, 6.0]
    with pytest.raises(KeyError, match="latency_p95_ms"):
        minute_outcomes({"latency_mean_ms": [1.0]})


def test_the_high_levels_reward_is_the_sum_over_its_period():
    r = np.array([-1.0, -2.0, -3.0, -4.0, -5.0, -6.0, -7.0])
    assert period_rewards(r, 5).tolist() == [-15.0, -13.0]
    assert period_rewards(r, 1).tolist() == r.tolist()
    with pytest.raises(ValueError, match="period_min"):
        period_rewards(r, 0)


def test_the_lagrange_multiplier_rises_above_the_target_violation_rate_and_falls_below_it():
    o = Objective(violation_weight=1.0, target_violation_rate=0.05)
    assert o.lagrangian_step(0.25, lr=0.5).violation_weight == pytest.approx(1.1)
    assert o.lagrangian_step(0.0, lr=0.5).violation_weight == pytest.approx(0.975)
    assert Objective(violation_weight=0.0).lagrangian_step(0.0).violation_weight == 0.0  # never negative


def test_following_the_intent_costs_the_distance_to_the_capacity_target():
    p = intent_following_penalty(np.array([0.5, 0.9, np.nan]), np.array([0.6, 0.6, 0.6]), weight=2.0)
    assert p == pytest.approx([0.2, 0.6, 0.0])


@pytest.mark.parametrize(
    "field,value",
    [("cpu_price", -1.0), ("failed_weight", float("nan")), ("cap", 0.0), ("target_violation_rate", 1.5)],
)
def test_bad_weights_name_the_field(field, value):
    with pytest.raises(ValueError, match=f"objective.{field}"):
        Objective(**{field: value})


def test_bad_slo_or_reference_is_refused():
    m = MinuteOutcome(1.0, 1.0, 0.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="slo_p95_ms"):
        DEFAULT_OBJECTIVE.costs(m, 0.0, 1.0)
    with pytest.raises(ValueError, match="reference_cores"):
        DEFAULT_OBJECTIVE.costs(m, 100.0, -1.0)
