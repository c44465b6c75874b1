"""Call graph from OpenTelemetry-style span tables (TraStrainer Online Boutique excerpt + small cases).

The expected values are computed here with a different method (csv.DictReader rows joined through a
plain dict, percentiles from ``statistics.quantiles``) and also checked against the hand-verified table
of the fixture's PROVENANCE.md.
"""

from __future__ import annotations

import csv
import re
import shutil
import statistics
from collections import defaultdict
from pathlib import Path

import pytest

from policy.topology.common import TopologyError
from policy.topology.spans import load_spans, read_spans, service_of_pod

ROOT = Path(__file__).resolve().parents[2]
SPANS_DIR = ROOT / "tests/fixtures/online-boutique-spans"
FRONTEND_FILE = SPANS_DIR / "frontend-spans.csv"
BACKEND_FILE = SPANS_DIR / "backend-spans.csv"
HEADER = "TraceID,SpanID,ParentID,PodName,OperationName,StartTimeUnixNano,EndTimeUnixNano,Duration"


def provenance_table() -> dict[tuple[str, str], dict[str, float]]:
    """The expected-graph table of the fixture's PROVENANCE.md."""
    text = (SPANS_DIR / "PROVENANCE.md").read_text()
    out = {}
    row = r"^\| ([a-z]+) \| ([a-z]+) \| (\d+) \| (\d+) \|" + r" ([\d.]+) \|" * 4
    for m in re.finditer(row, text, flags=re.M):
        caller, callee, spans, req, mean, p50, p95, p99 = m.groups()
        out[(caller, callee)] = {
            "spans": int(spans),
            "requests": int(req),
            "mean": float(mean),
            "p50": float(p50),
            "p95": float(p95),
            "p99": float(p99),
        }
    return out


def independent_edges(files: list[Path]) -> tuple[dict[tuple[str, str], list[float]], dict[str, int], float]:
    """(caller, callee) -> callee-side durations in ms; requests per service; window in s."""
    rows = []
    for f in files:
        with open(f, newline="") as fh:
            rows.extend(csv.DictReader(fh))
    by_id = {}
    for r in rows:
        by_id.setdefault((r["TraceID"], r["SpanID"]), r)
    svc = {k: r["PodName"].rsplit("-", 2)[0] for k, r in by_id.items()}
    edges: dict[tuple[str, str], list[float]] = defaultdict(list)
    requests: dict[str, int] = defaultdict(int)
    for key, r in by_id.items():
        parent_key = (r["TraceID"], r["ParentID"])
        if parent_key in by_id and svc[parent_key] != svc[key]:
            edges[(svc[parent_key], svc[key])].append(int(r["Duration"]) / 1000)
        if parent_key not in by_id or svc[parent_key] != svc[key]:
            requests[svc[key]] += 1
    window_s = (max(int(r["EndTimeUnixNano"]) for r in rows) - min(int(r["StartTimeUnixNano"]) for r in rows)) / 1e9
    return dict(edges), dict(requests), window_s


def quantile(values: list[float], q: int) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


# ---- the fixture ------------------------------------------------------------------------------------------


def test_the_fixture_directory_gives_exactly_the_thirteen_provenance_edges():
    graph, warnings = load_spans(SPANS_DIR)
    expected = set(provenance_table())
    assert len(expected) == 13
    assert {(e.caller, e.callee) for e in graph.edges} == expected
    assert len(graph.services) == 10
    assert warnings == []


def test_edge_counts_rates_and_latencies_match_an_independent_computation():
    edges, requests, window_s = independent_edges([FRONTEND_FILE, BACKEND_FILE])
    graph, _ = load_spans(SPANS_DIR)
    assert {(e.caller, e.callee) for e in graph.edges} == set(edges)
    for e in graph.edges:
        d = edges[(e.caller, e.callee)]
        assert e.rps == pytest.approx(len(d) / window_s, rel=1e-12)
        assert e.calls_per_request == pytest.approx(len(d) / requests[e.caller], rel=1e-12)
        assert e.latency_mean_ms == pytest.approx(statistics.fmean(d), rel=1e-9)
        assert e.latency_p50_ms == pytest.approx(quantile(d, 50), rel=1e-9)
        assert e.latency_p95_ms == pytest.approx(quantile(d, 95), rel=1e-9)
        assert e.latency_p99_ms == pytest.approx(quantile(d, 99), rel=1e-9)
        assert e.error_rate is None, "no status column in this table"


def test_edge_counts_and_latencies_match_the_hand_verified_provenance_table():
    obs = read_spans(SPANS_DIR)
    assert obs.window_s == pytest.approx(108.100294386, abs=1e-9)
    table = provenance_table()
    graph = obs.to_graph()
    for e in graph.edges:
        row = table[(e.caller, e.callee)]
        assert obs.edges[(e.caller, e.callee)].calls == row["spans"]
        assert obs.requests[e.caller] == row["requests"]
        assert e.latency_mean_ms == pytest.approx(row["mean"], abs=5e-5)
        assert e.latency_p50_ms == pytest.approx(row["p50"], abs=5e-5)
        assert e.latency_p95_ms == pytest.approx(row["p95"], abs=5e-5)
        assert e.latency_p99_ms == pytest.approx(row["p99"], abs=5e-5)


def test_checkout_calls_product_catalog_more_than_once_per_order():
    graph, _ = load_spans(SPANS_DIR)
    e = graph.edge("checkoutservice", "productcatalogservice")
    assert e.calls_per_request == pytest.approx(64 / 29)
    assert graph.edge("checkoutservice", "paymentservice").calls_per_request == pytest.approx(1.0)


def test_operation_names_are_kept_per_edge():
    obs = read_spans(SPANS_DIR)
    assert dict(obs.edges[("checkoutservice", "cartservice")].kinds) == {
        "hipstershop.CartService/GetCart": 29,
        "hipstershop.CartService/EmptyCart": 29,
    }


# ---- directory = one table ------------------------------------------------------------------------------


def test_a_directory_is_one_table_so_parents_in_the_other_file_resolve():
    backend_alone, warnings = load_spans(BACKEND_FILE)
    assert not any(e.caller == "frontend" for e in backend_alone.edges)
    assert any("255 span(s) have a ParentID not found" in w for w in warnings)
    frontend_alone, _ = load_spans(FRONTEND_FILE)
    assert frontend_alone.edges == (), "the frontend file holds only frontend spans"
    whole, warnings = load_spans(SPANS_DIR)
    frontend_edges = {e.callee for e in whole.edges if e.caller == "frontend"}
    assert frontend_edges == {
        "productcatalogservice",
        "currencyservice",
        "cartservice",
        "recommendationservice",
        "shippingservice",
        "checkoutservice",
        "adservice",
    }
    assert warnings == []


def test_a_span_repeated_across_files_counts_once(tmp_path):
    shutil.copy(BACKEND_FILE, tmp_path / "a.csv")
    shutil.copy(BACKEND_FILE, tmp_path / "b.csv")
    shutil.copy(FRONTEND_FILE, tmp_path / "c.csv")
    twice = read_spans(tmp_path)
    once = read_spans(SPANS_DIR)
    assert {k: v.calls for k, v in twice.edges.items()} == {k: v.calls for k, v in once.edges.items()}
    assert twice.requests == once.requests
    assert any("repeat an earlier (TraceID, SpanID) exactly" in w for w in twice.warnings)


def test_only_csv_files_directly_in_the_directory_are_read(tmp_path):
    shutil.copy(FRONTEND_FILE, tmp_path / "frontend.csv")
    (tmp_path / "notes.txt").write_text("not a table")
    (tmp_path / "sub").mkdir()
    shutil.copy(BACKEND_FILE, tmp_path / "sub" / "backend.csv")
    assert read_spans(tmp_path).edges == {}


# ---- service names ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pod, service",
    [
        ("frontend-579b9bff58-t2dbm", "frontend"),
        ("productcatalogservice-668d5f85fb-wckp8", "productcatalogservice"),
        ("redis-cart-7d9f8c6b5d-abcde", "redis-cart"),
        ("ts-order-service-5d8f7-x9z2q", "ts-order-service"),
        ("web-0", "web-0"),
        ("standalone", "standalone"),
    ],
)
def test_a_spans_service_is_its_pod_name_without_the_last_two_dash_parts(pod, service):
    assert service_of_pod(pod) == service


def test_spans_within_one_service_are_not_edges_and_different_services_are(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text(
        HEADER + "\n"
        "t1,a,root,web-abc12-x1,GET /,1000000000,2000000000,1000000\n"
        "t1,b,a,web-abc12-x1,client call,1100000000,1200000000,100000\n"
        "t1,c,b,db-def34-y2,query,1110000000,1190000000,80000\n"
        "t1,d,c,db-def34-y2,disk,1120000000,1180000000,60000\n"
    )
    obs = read_spans(f)
    assert set(obs.edges) == {("web", "db")}
    e = obs.to_graph().edges[0]
    assert e.latency_mean_ms == pytest.approx(80.0)
    assert e.rps == pytest.approx(1.0)
    assert e.calls_per_request == pytest.approx(1.0)
    assert obs.requests == {"web": 1, "db": 1}


def test_a_status_column_gives_the_error_rate(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text(
        HEADER + ",StatusCode\n"
        "t1,a,root,web-abc12-x1,GET,0,4000000000,4000000,STATUS_CODE_UNSET\n"
        "t1,b,a,db-def34-y2,q,0,1000000,1000,STATUS_CODE_OK\n"
        "t1,c,a,db-def34-y2,q,0,1000000,1000,STATUS_CODE_ERROR\n"
        "t1,d,a,db-def34-y2,q,0,1000000,1000,Error\n"
        "t1,e,a,db-def34-y2,q,0,1000000,1000,\n"
    )
    graph, _ = load_spans(f)
    assert graph.edge("web", "db").error_rate == pytest.approx(0.5)


def test_without_a_duration_column_the_duration_is_end_minus_start(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text(
        "TraceID,SpanID,ParentID,PodName,StartTimeUnixNano,EndTimeUnixNano\n"
        "t1,a,,web-abc12-x1,0,10000000\n"
        "t1,b,a,db-def34-y2,0,2500000\n"
    )
    graph, _ = load_spans(f)
    assert graph.edge("web", "db").latency_mean_ms == pytest.approx(2.5)


# ---- errors -------------------------------------------------------------------------------------------


def test_a_malformed_row_is_an_error_naming_file_line_and_field(tmp_path):
    lines = BACKEND_FILE.read_text().splitlines()
    fields = lines[16].split(",")
    fields[5] = "abc"
    lines[16] = ",".join(fields)
    d = tmp_path / "spans"
    d.mkdir()
    bad = d / "trace.csv"
    bad.write_text("\n".join(lines) + "\n")
    shutil.copy(FRONTEND_FILE, d / "a-frontend.csv")
    with pytest.raises(TopologyError) as exc:
        read_spans(d)
    assert str(exc.value) == f"{bad}:17: StartTimeUnixNano: not an integer: 'abc'"


@pytest.mark.parametrize(
    "row, message",
    [
        ("t1,a,root,web-abc12-x1,op,5,4,0", r":2: EndTimeUnixNano: 4 is before StartTimeUnixNano 5"),
        (
            "t1,a,root,web-abc12-x1,op,1,2,-3",
            r":2: Duration: must be microseconds in 0\.\.8\.64e\+10 \(a day\), got '-3'",
        ),
        ("t1,a,root,web-abc12-x1,op,1,2,1e11", r":2: Duration: must be microseconds in 0\.\.8\.64e\+10"),
        ("t1,a,root,web-abc12-x1,op,-1,2,1", r":2: StartTimeUnixNano: must be ns since 1970 in 0\.\.2\^63, got -1"),
        ("t1,a,root,web-abc12-x1,op,1,1" + "0" * 60 + ",1", r":2: EndTimeUnixNano: must be ns since 1970 in 0"),
        ("t1,a,root,web-abc12-x1,op,1,100000000000000,1", r":2: EndTimeUnixNano: the span lasts 100000 s, more than a"),
        ("t1,a,root,web-abc12-x1,op,1,2,fast", r":2: Duration: not a number: 'fast'"),
        (",a,root,web-abc12-x1,op,1,2,1", r":2: TraceID: empty"),
        ("t1,a,root,web-abc12-x1,op,1,2", r":2: expected 8 fields as in the header, got 7"),
    ],
)
def test_bad_rows_are_one_line_errors(tmp_path, row, message):
    f = tmp_path / "t.csv"
    f.write_text(HEADER + "\n" + row + "\n")
    with pytest.raises(TopologyError, match=re.escape(str(f)) + message) as exc:
        read_spans(f)
    assert "\n" not in str(exc.value)


def test_a_table_without_the_span_columns_names_the_missing_ones(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("TraceID,SpanID,PodName\nt,s,p\n")
    with pytest.raises(TopologyError, match=r"t\.csv:1: missing column\(s\) ParentID, StartTimeUnixNano"):
        read_spans(f)


# ---- fan-out, column names, compressed tables -------------------------------------------------------------


def _fanout_table(tmp_path: Path, overlap: bool) -> Path:
    """One web request calling api twice (client spans [5, 35] and [5 or 40, 40 or 70] ms) and db once after."""
    second = (5, 40) if overlap else (40, 70)
    ms = 1_000_000
    rows = [
        ("t1", "w", "root", "web-abc12-x1", 0, 100),
        ("t1", "c1", "w", "web-abc12-x1", 5, 35),
        ("t1", "s1", "c1", "api-def34-y2", 6, 34),
        ("t1", "c2", "w", "web-abc12-x1", *second),
        ("t1", "s2", "c2", "api-def34-y2", second[0] + 1, second[1] - 1),
        ("t1", "c3", "w", "web-abc12-x1", 80, 90),
        ("t1", "s3", "c3", "db-ghi56-z3", 81, 89),
    ]
    f = tmp_path / "t.csv"
    f.write_text(
        "TraceID,SpanID,ParentID,PodName,StartTimeUnixNano,EndTimeUnixNano\n"
        + "".join(f"{t},{s},{p},{pod},{a * ms},{b * ms}\n" for t, s, p, pod, a, b in rows)
    )
    return f


@pytest.mark.parametrize("overlap", [True, False])
def test_calls_of_one_request_that_overlap_in_time_make_a_parallel_edge(tmp_path, overlap):
    graph, _ = load_spans(_fanout_table(tmp_path, overlap))
    api = graph.edge("web", "api")
    assert api.calls_per_request == 2.0
    assert api.parallel is overlap
    assert graph.edge("web", "db").parallel is False  # after both api calls


def test_calls_that_touch_within_the_skew_margin_are_sequential(tmp_path):
    # two callee-side spans (no client spans) sharing 1 ms of 30 ms: under OVERLAP_FRACTION, clock skew
    ms = 1_000_000
    f = tmp_path / "t.csv"
    f.write_text(
        "TraceID,SpanID,ParentID,PodName,StartTimeUnixNano,EndTimeUnixNano\n"
        f"t1,w,root,web-abc12-x1,0,{100 * ms}\n"
        f"t1,s1,w,api-def34-y2,{5 * ms},{35 * ms}\n"
        f"t1,s2,w,api-def34-y2,{34 * ms},{64 * ms}\n"
    )
    graph, _ = load_spans(f)
    assert graph.edge("web", "api").parallel is False


def test_span_columns_can_be_renamed_and_a_service_column_replaces_pod_names(tmp_path):
    f = tmp_path / "otel.csv"
    f.write_text(
        "trace,span,parent,service.name,start,end\n"
        "t1,a,,web,0,10000000\n"
        "t1,b,a,web,1000000,9000000\n"
        "t1,c,b,db,2000000,8000000\n"
    )
    cols = {"trace_id": "trace", "span_id": "span", "parent_id": "parent", "start_ns": "start", "end_ns": "end"}
    graph, _ = load_spans(f, cols)
    assert graph.edges[0].caller == "web" and graph.edges[0].callee == "db"
    assert graph.edges[0].latency_mean_ms == pytest.approx(6.0)
    with pytest.raises(TopologyError, match=r"otel\.csv:1: missing column\(s\) TraceID"):
        load_spans(f)
    with pytest.raises(TopologyError, match="unknown role"):
        load_spans(f, {"trace": "t"})


def test_a_gzip_compressed_table_reads_like_the_plain_one(tmp_path):
    import gzip

    d = tmp_path / "spans"
    d.mkdir()
    for src in (FRONTEND_FILE, BACKEND_FILE):
        with gzip.open(d / (src.name + ".gz"), "wb") as fh:
            fh.write(src.read_bytes())
    g, ref = load_spans(d)[0], load_spans(SPANS_DIR)[0]
    assert g.services == ref.services and g.edges == ref.edges
