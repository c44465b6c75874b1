"""The calibration of the simulated Online Boutique from the vendored TraStrainer measurements."""

from pathlib import Path

import numpy as np
import pytest

from policy.sim import calibrate as cal
from policy.sim.app import load_app
from policy.sim.measurements import span_stats
from policy.topology.spans import read_span_table

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "online-boutique-spans"


@pytest.fixture(scope="module")
def meas():
    return cal.load_measurements()


TRACED = {
    "adservice",
    "cartservice",
    "checkoutservice",
    "currencyservice",
    "emailservice",
    "frontend",
    "paymentservice",
    "productcatalogservice",
    "recommendationservice",
    "shippingservice",
}


def test_the_vendored_measurements_hold_every_traced_pod_and_both_span_minutes(meas):
    assert {s for s in meas.metrics.services() if meas.metrics.pods(s)} == TRACED
    assert all(len(p.get("cpu_m")) > 1200 for s in TRACED for p in meas.metrics.pods(s))
    assert meas.metrics.latency("frontend") is not None  # front_service.csv, matched to the frontend in any case
    table = read_span_table(cal.DATA_DIR / "trace")
    assert len(table.spans) == 16833 + 16220 - 192  # the two files repeat 192 spans
    assert table.repeats == 192


def test_calls_per_request_count_calls_per_visit_of_the_caller():
    # the committed span excerpt: 29 PlaceOrder traces, checkout calls cart twice and product catalog 64 times
    ss = span_stats(read_span_table(FIXTURE))
    cpr = ss.calls_per_request()
    assert ss.visits["checkoutservice"] == 29 and ss.visits["frontend"] == 31
    assert cpr[("checkoutservice", "cartservice")] == pytest.approx(58 / 29)
    assert cpr[("checkoutservice", "productcatalogservice")] == pytest.approx(64 / 29)
    assert cpr[("frontend", "productcatalogservice")] == pytest.approx(157 / 31)
    assert ss.user_requests == 31


def test_normal_minutes_drop_cpu_outliers_and_idle_minutes():
    cpu = np.array([1.0, 1.1, 0.9, 1.0, 30.0, 1.2, 1.0])
    w = np.array([5.0, 5.0, 5.0, 0.0, 5.0, 5.0, 5.0])
    ok = cal.normal_minutes(cpu, w)
    assert ok.tolist() == [True, True, True, False, False, True, True]


def test_the_committed_app_yaml_is_what_the_calibration_writes(meas):
    app = load_app(str(cal.APP_DIR))
    c = cal.calibrate(meas, app, checks=False)
    assert cal.app_yaml(c, app) == (cal.APP_DIR / "app.yaml").read_text(encoding="utf-8")


def test_the_fit_reproduces_the_measured_median_and_p95_of_every_service(meas):
    c = cal.calibrate(meas, checks=False)
    for s, (t50, t95, _t99) in c.targets.items():
        s50, s95, _ = c.simulated[s]
        assert s50 == pytest.approx(t50, rel=0.06), s
        assert s95 == pytest.approx(t95, rel=0.08), s
    assert c.params["frontend"].cpu_ms_per_request == pytest.approx(0.5665, rel=1e-3)
