"""Call graph from Alibaba MSCallGraph CSV samples (v2021 sjlgaga + CASPER, v2022 CASPER) against the
expected edge lists shipped with the fixtures."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from policy.topology.alibaba import alibaba_version, load_alibaba, read_alibaba
from policy.topology.common import TopologyError, read_csv_header

FIX = Path(__file__).resolve().parents[2] / "tests/fixtures/alibaba"
SAMPLES = {
    "v2021-sjlgaga": (
        FIX / "v2021-sjlgaga/Callgraph.csv",
        FIX / "expected/derived_edges_sjlgaga_callgraph.csv",
        "v2021",
        100,
    ),
    "v2021-casper": (
        FIX / "v2021-casper/2021-shuffled-sample-traces-small.csv",
        FIX / "expected/derived_edges_casper_2021.csv",
        "v2021",
        133,
    ),
    "v2022-casper": (
        FIX / "v2022-casper/2022-shuffled-sample-traces-small.csv",
        FIX / "expected/derived_edges_casper_2022.csv",
        "v2022",
        224,
    ),
}
MISSING = {"", "(?)", "nan", "unknown", "unavailable"}


def expected_edges(path: Path) -> dict[tuple[str, str], dict[str, str]]:
    with open(path, newline="") as fh:
        return {(r["um"], r["dm"]): r for r in csv.DictReader(fh)}


def raw_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(params=list(SAMPLES), ids=list(SAMPLES))
def sample(request):
    return SAMPLES[request.param]


def test_edges_and_row_counts_equal_the_derived_edge_list_exactly(sample):
    src, expected_file, _, _ = sample
    expected = expected_edges(expected_file)
    obs = read_alibaba(src)
    assert set(obs.edges) == set(expected)
    assert {k: v.calls for k, v in obs.edges.items()} == {k: int(r["rows"]) for k, r in expected.items()}


def test_rpctype_mix_and_mean_abs_rt_equal_the_derived_edge_list(sample):
    src, expected_file, _, _ = sample
    obs = read_alibaba(src)
    graph = obs.to_graph()
    for (um, dm), row in expected_edges(expected_file).items():
        mix = dict(kv.split(":") for kv in row["rpctypes"].split(";"))
        assert dict(obs.edges[(um, dm)].kinds) == {k: int(v) for k, v in mix.items()}
        assert round(graph.edge(um, dm).latency_mean_ms, 2) == pytest.approx(float(row["mean_abs_rt_ms"]), abs=1e-9)


def test_rates_are_rows_over_the_table_window_without_rescaling(sample):
    src, expected_file, _, _ = sample
    stamps = [int(r["timestamp"]) for r in raw_rows(src)]
    window_s = (max(stamps) - min(stamps)) / 1000
    graph, warnings = load_alibaba(src)
    assert warnings == []
    for (um, dm), row in expected_edges(expected_file).items():
        assert graph.edge(um, dm).rps == pytest.approx(int(row["rows"]) / window_s, rel=1e-12)


def test_self_edges_are_kept_and_no_edge_touches_a_missing_name(sample):
    src, expected_file, _, n_names = sample
    graph, _ = load_alibaba(src)
    self_edges = [e for e in graph.edges if e.caller == e.callee]
    assert self_edges and len(self_edges) == sum(1 for um, dm in expected_edges(expected_file) if um == dm)
    assert not any(name.strip().lower() in MISSING for e in graph.edges for name in (e.caller, e.callee))
    assert len(graph.services) == n_names, "every named microservice, incl. the named side of dropped rows"


def test_every_rpctype_of_a_row_with_both_names_is_kept(sample):
    src, _, _, _ = sample
    rows = [
        r for r in raw_rows(src) if r["um"].strip().lower() not in MISSING and r["dm"].strip().lower() not in MISSING
    ]
    kept_types = {r["rpctype"] for r in rows}
    obs = read_alibaba(src)
    seen = set().union(*(set(e.kinds) for e in obs.edges.values()))
    assert seen == kept_types
    assert sum(e.calls for e in obs.edges.values()) == len(rows)
    assert obs.dropped_rows == obs.rows - len(rows)


def test_the_v2022_sample_keeps_rows_whose_rpctype_is_unknown_but_drops_unknown_callers():
    src = SAMPLES["v2022-casper"][0]
    obs = read_alibaba(src)
    assert sum(e.kinds.get("UNKNOWN", 0) for e in obs.edges.values()) == 6
    assert "UNKNOWN" not in obs.services and "UNAVAILABLE" not in obs.services
    assert "USER" in obs.services


def test_the_schema_version_is_detected_from_the_header(sample):
    src, _, version, _ = sample
    assert alibaba_version(read_csv_header(src)) == version


@pytest.mark.parametrize(
    "header, version",
    [
        ([""] + "traceid,timestamp,rpcid,um,rpctype,dm,interface,rt".split(","), "v2021"),
        ("traceid,timestamp,rpcid,um,rpctype,dm,interface,rt".split(","), "v2021"),
        ("timestamp,traceid,service,rpc_id,rpctype,um,uminstanceid,interface,dm,dminstanceid,rt".split(","), "v2022"),
        ("TraceID,SpanID,ParentID,PodName".split(","), None),
        ("minute_index,requests".split(","), None),
    ],
)
def test_headers_map_to_schema_versions(header, version):
    assert alibaba_version(header) == version


@pytest.mark.parametrize(
    "um, dm, kept",
    [
        ("a", "b", True),
        ("a", "a", True),
        ("(?)", "b", False),
        ("a", "", False),
        ("NaN", "b", False),
        ("a", "nan", False),
        ("UNKNOWN", "b", False),
        ("a", "UNAVAILABLE", False),
        ("USER", "b", True),
    ],
)
def test_rows_without_a_microservice_name_on_either_side_are_dropped(tmp_path, um, dm, kept):
    f = tmp_path / "cg.csv"
    f.write_text(
        f"traceid,timestamp,rpcid,um,rpctype,dm,interface,rt\nt,0,0.1,{um},rpc,{dm},i,-3\nt,1000,0.2,x,mq,y,i,\n"
    )
    obs = read_alibaba(f)
    assert ((um, dm) in obs.edges) is kept
    assert obs.edges[("x", "y")].latencies_ms == [], "an empty rt counts the call but gives no latency"
    if kept:
        assert obs.edges[(um, dm)].latencies_ms == [3.0]


def test_a_non_numeric_timestamp_is_an_error_naming_file_line_and_field(tmp_path):
    f = tmp_path / "cg.csv"
    f.write_text("traceid,timestamp,rpcid,um,rpctype,dm,interface,rt\nt,0,0.1,a,rpc,b,i,1\nt,soon,0.1,a,rpc,b,i,1\n")
    with pytest.raises(TopologyError) as exc:
        read_alibaba(f)
    assert str(exc.value) == f"{f}:3: timestamp: not a number: 'soon'"


def test_a_non_numeric_rt_is_an_error(tmp_path):
    f = tmp_path / "cg.csv"
    f.write_text("traceid,timestamp,rpcid,um,rpctype,dm,interface,rt\nt,0,0.1,a,rpc,b,i,slow\n")
    with pytest.raises(TopologyError, match=re.escape(f"{f}:2: rt: not a number: 'slow'")):
        read_alibaba(f)
