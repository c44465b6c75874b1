"""The discrete-event version of the model (simpy) and the cross-check of the fast model against it (a
reduced sweep; the full one is `make bench-sim`, BENCHMARKS.md section simulator)."""

import math

import numpy as np
import pytest

from policy.sim import crosscheck as cc
from policy.sim import des


@pytest.mark.parametrize(
    "capacity,caps,weights,expect",
    [
        (1.0, [1.0, 1.0], [1.0, 1.0], [0.5, 0.5]),  # equal weights share equally
        (1.0, [1.0, 1.0], [3.0, 1.0], [0.75, 0.25]),  # by weight (CFS cpu.weight)
        (1.0, [0.1, 1.0], [1.0, 1.0], [0.1, 0.9]),  # a capped claimant's leftover is redistributed
        (4.0, [1.0, 2.0], [1.0, 1.0], [1.0, 2.0]),  # no contention: everyone gets its cap
        (2.0, [0.0, 5.0, 5.0], [1.0, 1.0, 3.0], [0.0, 0.5, 1.5]),
    ],
)
def test_water_filling_shares_by_weight_and_redistributes_the_leftover(capacity, caps, weights, expect):
    assert des.water_fill(capacity, caps, weights) == pytest.approx(expect)


def test_the_des_single_ps_station_has_the_mm1_ps_mean_sojourn():
    case = cc.cases()["single"]  # 10 ms of exponential work on one core, own time median 0.5 ms (mean 0.6)
    m = case.model()
    lam = 0.5 / 0.010
    r = des.simulate(m, lam, case.pods, np.array(case.node_cores), list(case.zones), duration_s=1500.0, seed=3)
    mean, ci = r.estimate("mean")
    assert mean == pytest.approx(10.0 / (1 - 0.5) + 0.6, abs=max(2 * ci, 0.5))
    assert r.pod_busy_cores[0] == pytest.approx(0.5, rel=0.03)
    assert r.failed == 0 and r.offered == len(r.latency_ms)


def test_the_des_counts_every_request_once_past_saturation():
    case = cc.cases()["chain"]
    m = case.model()
    lam = cc.rate_for(case, 1.3, m)
    r = des.simulate(
        m,
        lam,
        case.pods,
        np.array(case.node_cores),
        list(case.zones),
        duration_s=40.0,
        seed=1,
        timeout_ms=case.app.timeout_ms,
    )
    assert r.offered == len(r.latency_ms) + r.failed
    assert 0.1 < r.fail_frac < 0.6
    assert r.pod_refused_frac.max() > 0.1


@pytest.fixture(scope="module")
def latency_points():
    cases = cc.cases()
    return [
        cc.run_point(cases[name], util, requests, target_ci_pct=2.9, max_requests=400_000)
        for name, util, requests in (("single", 0.6, 120_000), ("shared-node", 0.5, 70_000))
    ]


def test_the_fast_model_is_within_10pct_of_the_des_in_mean_and_p95_below_saturation(latency_points):
    for p in latency_points:
        assert p.des_mean_ci_pct < 3.0 and p.des_p95_ci_pct < 3.0, (p.case, p.des_mean_ci_pct, p.des_p95_ci_pct)
        assert abs(p.mean_err_pct) <= 10.0, (p.case, p.util, p.mean_err_pct)
        assert abs(p.p95_err_pct) <= 10.0, (p.case, p.util, p.p95_err_pct)


def test_the_fast_model_fails_within_5_points_of_the_des_at_and_past_saturation():
    cases = cc.cases()
    for name, util in (("chain", 1.2), ("shared-node", 1.2), ("retries", 1.5)):
        p = cc.run_point(cases[name], util, 10_000)
        assert p.des_failed_pct > 3.0, (name, util, p.des_failed_pct)
        assert abs(p.failed_diff_pts) <= 5.0, (name, util, p.des_failed_pct, p.fast_failed_pct)


def test_the_rate_for_a_utilisation_target_hits_it():
    case = cc.cases()["shared-node"]
    lam = cc.rate_for(case, 0.7)
    assert cc.utilization(case, lam) == pytest.approx(0.7, rel=1e-6)
    assert math.isfinite(lam) and lam > 0
