"""Edge lists as a call-graph source: the JSON `hrl-policy graph --json` writes reads back unchanged, an edge CSV
reads with its optional columns, bad fields are one-line errors; and the warnings for sources without edges."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from policy.state import ServiceEdge, ServiceGraph
from policy.topology.common import TopologyError
from policy.topology.edges import load_edges
from policy.topology.sources import detect_format, load_graph

ROOT = Path(__file__).resolve().parents[2]
RELEASE = ROOT / "policy/data/apps/online-boutique/kubernetes-manifests.yaml"
SPANS_DIR = ROOT / "tests/fixtures/online-boutique-spans"


def hrl_policy(*args) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).parent / "hrl-policy"
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_graph_json_output_reads_back_as_the_same_graph(tmp_path):
    first = hrl_policy("graph", RELEASE, SPANS_DIR, "--json")
    assert first.returncode == 0, first.stderr
    saved = tmp_path / "graph.json"
    saved.write_text(first.stdout)
    assert detect_format(saved) == "edges"
    again = hrl_policy("graph", saved, "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == json.loads(first.stdout)
    graph, warnings = load_edges(saved)
    assert warnings == []
    assert graph.edge("frontend", "productcatalogservice").calls_per_request == pytest.approx(157 / 31, rel=1e-5)
    assert "loadgenerator" in graph.services and graph.edge("checkoutservice", "currencyservice").rps is None


def test_every_edge_field_round_trips_through_json(tmp_path):
    g = ServiceGraph.build(
        ["lonely"],
        [
            ServiceEdge(
                "a",
                "b",
                rps=2.5,
                calls_per_request=1.5,
                latency_mean_ms=3.0,
                latency_p50_ms=2.0,
                latency_p95_ms=9.0,
                latency_p99_ms=12.0,
                error_rate=0.25,
                parallel=True,
            ),  # fmt: skip
            ServiceEdge("b", "c"),
        ],
    )
    f = tmp_path / "g.json"
    f.write_text(json.dumps(g.to_json()))
    back, _ = load_edges(f)
    assert back.services == g.services and back.edges == g.edges


def test_an_edge_csv_reads_optional_columns_and_empty_cells_as_unknown(tmp_path):
    f = tmp_path / "edges.csv"
    f.write_text("caller,callee,rps,calls_per_request,parallel\nweb,api,4,2,true\nweb,db,,,\napi,db,1.5,0.5,no\n")
    assert detect_format(f) == "edges"
    graph, warnings = load_graph([f])
    assert warnings == []
    api = graph.edge("web", "api")
    assert (api.rps, api.calls_per_request, api.parallel) == (4.0, 2.0, True)
    db = graph.edge("web", "db")
    assert (db.rps, db.calls_per_request, db.parallel) == (None, None, False)
    assert graph.edge("api", "db").parallel is False


def test_an_unknown_column_or_field_is_a_warning_not_silently_used(tmp_path):
    f = tmp_path / "edges.csv"
    f.write_text("caller,callee,calls_per_req\nweb,api,3\n")
    graph, warnings = load_edges(f)
    assert graph.edge("web", "api").calls_per_request is None
    assert len(warnings) == 1 and "unknown column(s) calls_per_req" in warnings[0]
    j = tmp_path / "g.json"
    j.write_text(json.dumps({"edges": [{"caller": "a", "callee": "b", "rsp": 1}]}))
    _, warnings = load_edges(j)
    assert "edges[0]: unknown field(s) rsp" in warnings[0]


@pytest.mark.parametrize(
    "name, text, message",
    [
        ("e.csv", "caller,callee,rps\nweb,api,fast\n", "e.csv:2: rps: not a number: 'fast'"),
        ("e.csv", "caller,callee,rps\nweb,api,-1\n", "e.csv:2: rps: expected a number >= 0, got '-1'"),
        ("e.csv", "caller,callee,error_rate\nweb,api,2\n", "e.csv:2: error_rate: expected a fraction 0..1"),
        ("e.csv", "caller,callee,parallel\nweb,api,maybe\n", "e.csv:2: parallel: expected true or false"),
        ("e.csv", "caller,callee\n,api\n", "e.csv:2: caller: empty"),
        ("g.json", '{"edges": [{"caller": "a"}]}', "g.json: edges[0].callee: expected a service name, got None"),
        ("g.json", '{"edges": [{"caller": "a", "callee": "b", "rps": "x"}]}', "edges[0].rps: expected a number >= 0"),
        ("g.json", '{"edges": [{"caller": "a", "callee": "b", "parallel": 1}]}', "edges[0].parallel: expected true"),
        ("g.json", '{"edges": [], "services": "a"}', "g.json: services: expected a list of service names"),
        ("g.json", '{"edges": [,]}', "g.json:1: invalid JSON"),
    ],
)
def test_a_bad_edge_list_is_a_one_line_error_naming_file_and_field(tmp_path, name, text, message):
    f = tmp_path / name
    f.write_text(text)
    with pytest.raises(TopologyError) as exc:
        load_edges(f)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_manifests_without_edges_warn_why_in_json_mode_and_exit_0(tmp_path):
    f = tmp_path / "app.yaml"
    f.write_text(
        "\n---\n".join(
            f"apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {n}}}\nspec:\n  selector: {{matchLabels: "
            f"{{app: {n}}}}}\n  template:\n    metadata: {{labels: {{app: {n}}}}}\n    spec:\n      containers:\n"
            f"      - {{name: {n}, image: {n}, env: [{{name: CONFIG, value: /etc/{n}.json}}]}}\n"
            for n in ("web", "api", "db")
        )
    )
    p = hrl_policy("graph", f, "--json")
    assert p.returncode == 0
    assert json.loads(p.stdout) == {"services": ["api", "db", "web"], "edges": []}
    assert "no call edges among 3 services" in p.stderr
    assert "no `*_ADDR` env vars" in p.stderr and "depends-on" in p.stderr
    # combined with a source that has the edges, the note is moot and not printed
    e = tmp_path / "edges.csv"
    e.write_text("caller,callee\nweb,api\n")
    both = hrl_policy("graph", f, e, "--json")
    assert both.returncode == 0 and "no call edges" not in both.stderr
    assert json.loads(both.stdout)["edges"] == [{"caller": "web", "callee": "api", "rps": None}]


def test_spans_without_any_cross_service_parent_warn_that_they_give_no_edges(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text(
        "TraceID,SpanID,ParentID,PodName,StartTimeUnixNano,EndTimeUnixNano\n"
        "t1,a,root,web-abc12-x1,0,10\nt2,b,root,db-abc12-x1,0,10\n"
    )
    _, warnings = load_graph([f])
    assert any("no call edges: no span has a parent span recorded by another service" in w for w in warnings)
