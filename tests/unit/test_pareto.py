"""Pareto fronts and the equal-CPU comparison with its paired confidence intervals, on hand-computed points."""

import math

import pytest

from policy.bench.pareto import (
    FrontPoint,
    at_equal_cpu,
    interpolate,
    pareto_front,
    sweep_stacks,
)
from policy.sim.stacks import get_stack


def test_the_front_keeps_only_settings_better_than_every_cheaper_one():
    pts = [
        FrontPoint("a", 1.0, 10.0),
        FrontPoint("b", 2.0, 12.0),  # dominated by a (more CPU, worse)
        FrontPoint("c", 3.0, 4.0),
        FrontPoint("d", 3.0, 5.0),  # same CPU as c, worse
        FrontPoint("e", 0.5, 20.0),
    ]
    assert [p.stack for p in pareto_front(pts)] == ["e", "a", "c"]


def test_a_stack_between_two_front_points_is_compared_with_the_line_between_them():
    front = [FrontPoint("lo", 1.0, 10.0), FrontPoint("hi", 3.0, 4.0)]
    assert interpolate(front, 2.5) == ("inside", 0, 1, 0.75)
    assert interpolate(front, 5.0) == ("above", 1, 1, 0.0)
    assert interpolate(front, 0.5) is None
    per_seed = {"lo": [9.0, 11.0], "hi": [3.0, 5.0]}
    e = at_equal_cpu(front, [2.5, 2.5], [5.0, 6.0], per_seed)
    # front per seed: 0.25*9 + 0.75*3 = 4.5 and 0.25*11 + 0.75*5 = 6.5; deltas 0.5 and -0.5
    assert e["front"]["mean"] == pytest.approx(5.5)
    assert e["delta"]["mean"] == pytest.approx(0.0)
    assert e["delta"]["ci95"] == pytest.approx(12.706 * math.sqrt(0.5) / math.sqrt(2))
    assert e["ratio"] == pytest.approx(5.5 / 5.5)
    lo, hi = e["ratio_ci95"]
    assert lo == pytest.approx(1 - e["delta"]["ci95"] / 5.5) and hi == pytest.approx(1 + e["delta"]["ci95"] / 5.5)
    assert e["bracket"] == ["lo", "hi"] and e["position"] == "inside"


def test_a_stack_cheaper_than_every_baseline_has_no_equal_cpu_comparison_and_a_zero_front_has_no_ratio():
    front = [FrontPoint("x", 1.0, 0.0)]
    assert at_equal_cpu(front, [0.5], [1.0], {"x": [0.0]}) is None
    e = at_equal_cpu(front, [2.0], [1.0], {"x": [0.0]})
    assert e["position"] == "above" and e["ratio"] is None and e["ratio_ci95"] is None
    assert e["delta"] == {"mean": 1.0, "ci95": 0.0}


@pytest.mark.parametrize("mode", ["quick", "full"])
def test_every_sweep_setting_names_a_valid_stack_and_the_hpa_sweep_spans_40_to_300_percent(mode):
    sweeps = sweep_stacks(mode)
    for names in sweeps.values():
        for n in names:
            get_stack(n)  # raises on an unknown knob or a value out of range
    hpa = sweeps["default-kube-scheduler+hpa"]
    assert "default-kube-scheduler+hpa@target=0.4" in hpa and "default-kube-scheduler+hpa@target=0.9" in hpa
    assert "default-kube-scheduler+hpa@target=1.5" in hpa and "default-kube-scheduler+hpa@target=3" in hpa
    assert "default-kube-scheduler+hpa" in hpa  # the plain stack is the 80 % point
    # the offline reference (a placement planned under a simplified model, not a bound) is no sweep of the bench
    assert not any(n.startswith("offline-reference") for names in sweeps.values() for n in names)
