"""The calibration verdict (policy/sim/fit_verdict.py): each service graded good / usable / not usable at the stated
thresholds from its hold-out p50 / p95 and its fit p99, percentiles the data cannot tell left unjudged, and the overall
verdict led by the entry services."""

from __future__ import annotations

import math

import numpy as np
import pytest

from policy.sim.fit_verdict import MIN_TAIL_SAMPLES, THRESHOLDS_PCT, Noise, judge, relative_standard_error

QUIET = Noise((1.0, 2.0, 3.0), spans=100_000)  # plenty of spans, small sampling error: everything can be judged


@pytest.mark.parametrize(
    ("fit", "held", "expected"),
    [
        ((0.5, 0.5, 5.0), (4.0, -9.9), "good"),
        ((0.5, 0.5, 5.0), (4.0, 15.0), "usable"),  # p95 off by 15 %: above 10, within 25
        ((0.5, 0.5, 5.0), (-30.0, 2.0), "not usable"),  # p50 off by 30 %
        ((0.5, 0.5, 60.0), (1.0, 1.0), "usable"),  # p99 (not fitted) off by 60 %: at most usable, never worse
        ((0.5, 0.5, 400.0), (1.0, 1.0), "usable"),
        ((0.5, 0.5, None), (1.0, None), "good"),  # missing errors are not judged, the rest is
    ],
)
def test_a_service_is_graded_at_the_stated_thresholds(fit, held, expected):
    v = judge({"web": fit}, {"web": held}, {"web": QUIET}, entry=["web"])
    assert v.services[0].verdict == expected and v.services[0].basis == "hold-out"
    assert v.overall == expected


def test_the_thresholds_are_the_documented_ones():
    assert THRESHOLDS_PCT["p50"] == THRESHOLDS_PCT["p95"] == (10.0, 25.0)
    assert THRESHOLDS_PCT["p99"][0] == 25.0 and math.isinf(THRESHOLDS_PCT["p99"][1])


def test_the_hold_out_errors_decide_p50_and_p95_and_the_fit_decides_p99():
    # the fit's own p50/p95 are tiny (fitted); the hold-out's are what the verdict reads
    v = judge({"web": (0.1, 0.1, 1.0)}, {"web": (40.0, 1.0)}, {"web": QUIET}, entry=["web"]).services[0]
    assert v.verdict == "not usable" and v.errors_pct == {"p50": 40.0, "p95": 1.0, "p99": 1.0}
    assert any("p50 off by +40.0 % (hold-out" in r for r in v.reasons)


def test_without_a_hold_out_the_fit_errors_are_judged_and_the_overall_says_so():
    v = judge({"web": (1.0, 2.0, 3.0)}, None, {"web": QUIET}, entry=["web"])
    assert v.services[0].basis == "fit only" and v.overall == "good"
    assert any("--skip-checks" in r for r in v.reasons)


def test_a_percentile_with_too_few_samples_beyond_it_is_not_judged():
    # 300 spans: a half holds 150, i.e. 7.5 beyond the p95 (< 10): p95 of the hold-out cannot be judged, p50 can
    few = Noise((1.0, 2.0, 3.0), spans=300)
    v = judge({"web": (0.0, 0.0, 90.0)}, {"web": (3.0, 80.0)}, {"web": few}, entry=["web"]).services[0]
    assert v.errors_pct["p95"] is None and v.errors_pct["p99"] is None and v.errors_pct["p50"] == 3.0
    assert v.verdict == "good" and "too few beyond it" in v.reasons[-1]
    assert few.tail_ok("p95") and not few.tail_ok("p95", holdout=True)  # 300 x 0.05 = 15, a half's 7.5
    assert MIN_TAIL_SAMPLES == 10


def test_a_percentile_whose_sampling_error_is_too_large_is_not_judged():
    # 5 % standard error on the whole data: the hold-out's comparison is twice that, above 25 / 3 %
    noisy = Noise((5.0, 5.0, 5.0), spans=100_000)
    v = judge({"web": (0.0, 0.0, 30.0)}, {"web": (50.0, 50.0)}, {"web": noisy}, entry=["web"]).services[0]
    assert v.errors_pct == {"p50": None, "p95": None, "p99": 30.0}
    assert v.verdict == "not judged" and "p50 (±10 %)" in v.reasons[-1]


def test_a_metrics_target_needs_ten_normal_minutes():
    assert Noise((1.0, 1.0, 1.0), minutes=10).enough("p99", holdout=True)
    assert not Noise((1.0, 1.0, 1.0), minutes=9).enough("p50")


def test_the_overall_verdict_is_the_entrys_lowered_to_usable_by_another_service_not_usable():
    fit = {"web": (0.0, 0.0, 1.0), "db": (0.0, 0.0, 1.0), "cache": (0.0, 0.0, 1.0)}
    held = {"web": (1.0, 1.0), "db": (60.0, 1.0), "cache": (1.0, 1.0)}
    v = judge(fit, held, dict.fromkeys(fit, QUIET), entry=["web"])
    assert [s.verdict for s in v.services] == ["good", "not usable", "good"]  # sorted: cache, db, web
    assert v.overall == "usable" and any("db" in r for r in v.reasons)
    # the entry itself not usable: the app is not usable
    held["web"] = (1.0, 30.0)
    assert judge(fit, held, dict.fromkeys(fit, QUIET), entry=["web"]).overall == "not usable"
    # no entry service can be judged: no overall verdict
    none = judge(fit, held, {**dict.fromkeys(fit, QUIET), "web": Noise((50.0,) * 3, spans=5)}, entry=["web"])
    assert none.overall == "not judged"


def test_the_bootstrap_standard_error_of_a_median_matches_its_asymptotic_value():
    rng = np.random.default_rng(0)
    x = rng.normal(100.0, 10.0, size=4000)
    se50, se95, se99 = relative_standard_error(x, resamples=400)
    # asymptotic SE of the median of a normal sample: sqrt(pi / 2) sigma / sqrt(n); 0.198 % of 100 here
    assert se50 == pytest.approx(100.0 * math.sqrt(math.pi / 2) * 10.0 / math.sqrt(4000) / 100.0, rel=0.2)
    assert se50 < se95 < se99  # tails are noisier
    minutes = np.column_stack([x, 2 * x, 3 * x])
    assert relative_standard_error(minutes, "medians", resamples=400)[1] == pytest.approx(se50, rel=0.25)
    assert all(math.isnan(v) for v in relative_standard_error(np.array([1.0])))
