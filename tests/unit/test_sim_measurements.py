"""Metrics tables for calibration: column roles and factors, time parsing and alignment, pods matched to workloads,
constant columns, the success-rate filter; and app.yaml's ``graph:`` as a list of sources."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from policy.config import ConfigError
from policy.sim.app import load_app
from policy.sim.calibrate import latency_normal_minutes
from policy.sim.measurements import parse_column_specs, parse_time, read_metrics
from policy.topology.common import TopologyError

ROOT = Path(__file__).resolve().parents[2]
OB_APP = ROOT / "policy/data/apps/online-boutique"
SPANS_DIR = ROOT / "tests/fixtures/online-boutique-spans"


@pytest.mark.parametrize(
    "cell, expected",
    [
        ("1700000000", 1_700_000_000.0),
        ("1700000000500", 1_700_000_000.5),  # ms
        ("1700000000000000000", 1_700_000_000.0),  # ns
        ("2023-11-14T22:13:20Z", 1_700_000_000.0),
        ("2023-11-14 23:13:20+01:00", 1_700_000_000.0),
        ("2023-11-14 22:13:20.25", 1_700_000_000.25),
        ("2022-08-22 03:51:19.799087274 +0000 UTC m=+0.305041286", 1_661_140_279.799087274),  # Go's time.String
    ],
)
def test_time_cells_are_unix_seconds_in_any_common_form(cell, expected):
    assert parse_time(cell) == pytest.approx(expected, abs=1e-6)


def test_a_cell_that_is_no_time_is_refused():
    with pytest.raises(ValueError):
        parse_time("yesterday")


def test_column_specs_take_a_header_and_an_optional_factor():
    specs = parse_column_specs(["cpu_m=cpu_seconds*1000", "rps=Requests Per Second"], ["cpu_m", "rps"], "--x")
    assert (specs["cpu_m"].header, specs["cpu_m"].factor) == ("cpu_seconds", 1000.0)
    assert (specs["rps"].header, specs["rps"].factor) == ("Requests Per Second", 1.0)
    for bad, msg in (("cpu_m", "expected ROLE=HEADER"), ("cpu=x", "unknown role 'cpu'"), ("cpu_m=x*0", "positive")):
        with pytest.raises(ValueError, match=msg):
            parse_column_specs([bad], ["cpu_m", "rps"], "--x")


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_samples_seconds_apart_in_different_files_share_a_step_even_near_the_half_minute(tmp_path):
    t0 = 1_700_000_030  # samples near :30, where naive minute flooring would split them
    _write(
        tmp_path / "m/a.csv",
        "time_s,pod,cpu_m,rps\n" + "".join(f"{t0 + 60 * i - 2},web-abc12-x1,5,10\n" for i in range(5)),
    )
    _write(tmp_path / "m/b.csv", "time_s,pod,cpu_m,rps\n" + "".join(f"{t0 + 60 * i + 2},db-0,3,10\n" for i in range(5)))
    m = read_metrics(tmp_path / "m", ["web", "db"])
    assert m.step_s == 60.0
    web, db = m.pods("web")[0], m.pods("db")[0]  # a StatefulSet pod db-0 belongs to db
    assert web.step.tolist() == db.step.tolist() and len(set(web.step.tolist())) == 5


def test_pods_and_services_are_matched_to_workloads_and_strangers_reported(tmp_path):
    _write(
        tmp_path / "m.csv",
        "pod,cpu_m,rps\nweb-abc12-x1,1,2\nweb-abc12-x1,1,3\nweb-api-7d9f8-x2,4,5\nnosuch-abc-x,1,1\n",
    )
    m = read_metrics(tmp_path / "m.csv", ["web", "web-api"])
    assert [s.name for s in m.pods("web")] == ["web-abc12-x1"]
    assert [s.name for s in m.pods("web-api")] == ["web-api-7d9f8-x2"]  # the longest workload name wins
    assert any("matching no workload" in w and "nosuch-abc-x" in w for w in m.warnings)


def test_constant_columns_are_reported_and_all_zero_ones_dropped(tmp_path):
    rows = "".join(f"{i},web-abc12-x1,{i + 1},128,0,10,100\n" for i in range(5))
    _write(tmp_path / "m/web.csv", "time_s,pod,cpu_m,memory_mi,rps,success_pct,latency_p50_ms\n" + rows)
    m = read_metrics(tmp_path / "m", ["web"])
    (s,) = m.series
    assert set(s.raw) == {"cpu_m", "memory_mi", "latency_p50_ms"}  # rps 0 and success 10: not used
    text = "\n".join(m.warnings)
    assert "rps (rps) is constant (0) in web.csv: not used" in text
    assert "success_pct (success_pct) is constant (10) in web.csv: not used" in text
    assert "memory_mi (memory_mi) is constant (128) in web.csv: used as is" in text


def test_a_file_without_known_columns_is_a_warning_and_a_bad_cell_an_error(tmp_path):
    _write(tmp_path / "m/notes.csv", "when,what\n1,x\n")
    _write(tmp_path / "m/web.csv", "time_s,pod,cpu_m\n1,web-abc12-x1,fast\n")
    with pytest.raises(TopologyError, match=r"web\.csv:2: cpu_m: not a number: 'fast'"):
        read_metrics(tmp_path / "m", ["web"])
    (tmp_path / "m/web.csv").write_text("time_s,pod,cpu_m\n1,web-abc12-x1,1\n")
    m = read_metrics(tmp_path / "m", ["web"])
    assert any("notes.csv: no metrics column found" in w for w in m.warnings)


def test_the_success_filter_adapts_to_the_scale_and_to_frequent_failures():
    p50 = np.full(8, 10.0)
    ok, rule = latency_normal_minutes(p50, np.array([1.0, 0.999, 1.0, 1.0, 0.5, 1.0, 1.0, 1.0]))  # fractions
    assert ok.tolist() == [True, False, True, True, False, True, True, True] and "maximum (1)" in rule
    ok, rule = latency_normal_minutes(p50, np.array([100.0, 99.0, 99.5, 99.2, 99.4, 99.1, 98.0, 99.3]))
    assert ok.sum() == 4 and "median" in rule  # the maximum is one minute: keep those at or above the median
    ok, _ = latency_normal_minutes(np.array([10.0, 11.0, 40.0, 10.0]), None)
    assert ok.tolist() == [True, True, False, True]  # p50 over 3x its median


# ---- app.yaml graph: a list of sources ----------------------------------------------------------------------


def _app_dir(tmp_path: Path, graph: str, extra: str = "") -> Path:
    d = tmp_path / "app"
    d.mkdir(exist_ok=True)
    shutil.copy(OB_APP / "kubernetes-manifests.yaml", d / "k8s.yaml")
    if not (d / "spans").exists():
        shutil.copytree(SPANS_DIR, d / "spans")
    (d / "app.yaml").write_text(
        "apiVersion: hrl-scheduler.io/v1alpha1\nkind: App\nname: mine\nmanifests: k8s.yaml\n"
        f"graph: {graph}\nentry: {{frontend: 1}}\nsloP95Ms: 500\ntimeoutMs: 2000\n{extra}"
    )
    return d


def test_manifests_and_spans_combine_declared_edges_with_measured_calls_per_request(tmp_path):
    app = load_app(str(_app_dir(tmp_path, "[manifests, spans]")))
    assert len(app.graph.edges) == 16
    assert app.graph.edge("frontend", "productcatalogservice").calls_per_request == pytest.approx(157 / 31)
    assert app.graph.edge("checkoutservice", "cartservice").calls_per_request == pytest.approx(2.0)
    assert app.graph.edge("cartservice", "redis-cart").calls_per_request == 1.0  # declared, not measured


def test_an_edge_override_without_calls_per_request_keeps_the_measured_one(tmp_path):
    extra = "edges:\n  - {caller: frontend, callee: cartservice, timeoutMs: 100}\n"
    app = load_app(str(_app_dir(tmp_path, "[manifests, spans]", extra)))
    assert app.graph.edge("frontend", "cartservice").calls_per_request == pytest.approx(0.5, abs=0.5)
    assert app.graph.edge("frontend", "cartservice").calls_per_request != 1.0
    assert app.calls[("frontend", "cartservice")].timeout_ms == 100


def test_span_services_without_a_workload_are_dropped_with_a_warning(tmp_path):
    d = _app_dir(tmp_path, "spans")
    objs = (d / "k8s.yaml").read_text().split("\n---\n")
    keep = [o for o in objs if any(f"name: {n}\n" in o for n in ("frontend", "cartservice", "currencyservice"))]
    (d / "k8s.yaml").write_text("\n---\n".join(keep))
    app = load_app(str(d))
    assert set(app.services) == {"frontend", "cartservice", "currencyservice"}
    assert {(e.caller, e.callee) for e in app.graph.edges} == {
        ("frontend", "cartservice"),
        ("frontend", "currencyservice"),
    }
    assert any("have no workload in the manifests and are dropped" in w and "adservice" in w for w in app.warnings)


def test_the_graph_json_of_hrl_policy_graph_is_a_graph_source(tmp_path):
    from policy.topology.sources import load_graph

    d = _app_dir(tmp_path, "graph.json")
    g, _ = load_graph([str(d / "k8s.yaml"), str(d / "spans")])
    (d / "graph.json").write_text(json.dumps(g.to_json()))
    app = load_app(str(d))
    assert app.graph.edge("frontend", "productcatalogservice").calls_per_request == pytest.approx(157 / 31, rel=1e-5)


@pytest.mark.parametrize(
    "graph, where", [("[]", "graph: empty list"), ("[manifests, nosuch.csv]", "graph[1]: no such file or directory")]
)
def test_a_bad_graph_list_names_the_entry(tmp_path, graph, where):
    with pytest.raises(ConfigError, match=where.replace("[", r"\[").replace("]", r"\]")):
        load_app(str(_app_dir(tmp_path, graph)))
