"""`make bench-sim`'s report: carrying cross-check rows over from BENCHMARKS.md and judging the network cases on
their own target."""

import math

import pytest

from policy.bench.sim import markdown, previous_points
from policy.sim.crosscheck import Point

SECTION = """<!-- BEGIN simulator -->
| case | util | req/s | DES requests | DES mean ms (±CI%) | fast mean ms (err %) | ... |
|---|---|---|---|---|---|---|
| single | 0.30 | 30.0 | 39,737 | 14.88 (±2.0) | 14.88 (+0.0) | 47.15 (±2.8) | 47.05 (-0.2) | 0.00 | 0.00 |
| shared-link | 0.50 | 25.0 | 29,846 | 46.19 (±1.7) | 46.23 (+0.1) | 96.44 (±3.6) | 85.76 (-11.1) | 0.00 | 0.00 |
<!-- END simulator -->
"""


def test_rows_of_the_cases_not_rerun_are_read_back_from_the_section(tmp_path):
    p = tmp_path / "B.md"
    p.write_text("# Benchmarks\n\n" + SECTION)
    (pt,) = previous_points({"shared-link"}, p)
    assert (pt.case, pt.util, pt.lam_rps, pt.requests) == ("single", 0.3, 30.0, 39737)
    assert (pt.des_mean_ms, pt.fast_mean_ms, pt.des_p95_ms, pt.fast_p95_ms) == (14.88, 14.88, 47.15, 47.05)
    assert pt.des_mean_ci_ms == pytest.approx(14.88 * 0.02) and pt.extra == {"carried_over": True}


def test_the_network_cases_are_judged_on_their_own_target():
    speed = {"pods": 1, "placement_s": 0.1, "minutes_s": 0.2, "total_s": 0.3, "total_s_best": 0.3, "cpu_s": 0.3}
    large = dict.fromkeys(
        ("services", "edges", "pods", "nodes", "minute_s_median", "minute_s_max", "minute_cpu_s_median"), 1
    ) | {"samples_per_service": 200, "build_s": 1.0, "placement_s": 1.0}
    pts = [
        Point("single", 0.5, 50.0, 1000, 20.0, 0.2, 70.0, 1.0, 0.0, 20.2, 71.0, 0.0, 1.0),
        Point("shared-link", 0.5, 25.0, 1000, 46.0, 0.5, 96.0, 2.0, 0.0, 46.0, 85.0, 0.0, 1.0),
    ]
    md = markdown(speed, speed, large, pts, None, 10.0)
    assert "worst mean error is **1.0%** and the worst p95 error **1.4%**" in md
    assert "worst p95 error **11.5%** (target <= 15%" in md
    assert not math.isnan(pts[1].p95_err_pct)
