"""The threshold autoscaler: decisions, cooldown, its parameter file and the grid search."""

import pytest

from policy.baselines.threshold import (
    ThresholdAutoscaler,
    ThresholdParams,
    candidates,
    grid_search,
    load_params,
    tuning_cost,
)
from policy.config import ConfigError


def test_scales_out_above_u_hi_in_below_u_lo_and_holds_in_between():
    ctl = ThresholdAutoscaler(ThresholdParams(u_hi=0.8, u_lo=0.3, step_out=2, step_in=1, cooldown_min=0))
    assert ctl.decide("w", 3, 0.9, 0) == 5
    assert ctl.decide("w", 5, 0.5, 1) == 5
    assert ctl.decide("w", 5, 0.1, 2) == 4
    assert ctl.decide("w", 4, None, 3) == 4


def test_cooldown_blocks_actions_on_the_same_workload_only():
    ctl = ThresholdAutoscaler(ThresholdParams(u_hi=0.8, u_lo=0.3, cooldown_min=3))
    assert ctl.decide("a", 1, 0.95, 10) == 2
    assert ctl.decide("a", 2, 0.95, 12) == 2  # 2 min after: still cooling down
    assert ctl.decide("b", 1, 0.95, 12) == 2  # another workload is free
    assert ctl.decide("a", 2, 0.95, 13) == 3  # 3 min after: acts again


def test_replicas_stay_within_bounds():
    ctl = ThresholdAutoscaler(ThresholdParams(cooldown_min=0, max_replicas=3))
    assert ctl.decide("a", 3, 2.0, 0) == 3
    assert ctl.decide("a", 1, 0.0, 1) == 1


def test_parameters_are_validated_and_read_from_the_apps_folder(tmp_path):
    with pytest.raises(ValueError):
        ThresholdParams(u_hi=0.3, u_lo=0.5)
    (tmp_path / "app.yaml").write_text("")
    assert load_params(tmp_path / "app.yaml") == ThresholdParams()
    (tmp_path / "threshold-autoscaler.yaml").write_text(
        "apiVersion: hrl-scheduler.io/v1alpha1\nkind: ThresholdAutoscaler\nuHi: 0.7\nuLo: 0.2\ncooldownMin: 4\n"
    )
    p = load_params(tmp_path / "app.yaml")
    assert (p.u_hi, p.u_lo, p.cooldown_min) == (0.7, 0.2, 4)
    (tmp_path / "threshold-autoscaler.yaml").write_text(
        "apiVersion: hrl-scheduler.io/v1alpha1\nkind: ThresholdAutoscaler\nuHigh: 0.7\n"
    )
    with pytest.raises(ConfigError, match="uHigh"):
        load_params(tmp_path)


def test_every_built_in_app_has_valid_tuned_parameters():
    from policy.sim.app import builtin_apps, builtin_apps_dir

    for app in builtin_apps():
        load_params(builtin_apps_dir() / app / "app.yaml")


def test_the_tuning_cost_weighs_slo_failures_and_relative_cpu():
    m = {"slo_violation_pct": 10.0, "failed_pct": 1.0, "cpu_core_hours": 3.0}
    assert tuning_cost(m, 2.0) == 10.0 + 5.0 + 50.0 * 1.5


def test_grid_search_returns_the_cheapest_candidate_first_in_grid_order_on_ties():
    grid = {"u_hi": (0.6, 0.9), "u_lo": (0.2, 0.7), "cooldown_min": (1, 4)}
    assert len(candidates(grid)) == 6  # (0.6, 0.7) is dropped: u_lo must be below u_hi
    best, table = grid_search(lambda p: abs(p.u_hi - 0.9) + p.cooldown_min, grid)
    assert (best.u_hi, best.u_lo, best.cooldown_min) == (0.9, 0.2, 1)
    assert len(table) == 6
