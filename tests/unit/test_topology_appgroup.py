"""The scheduler-plugins AppGroup CRD as a call-graph source and as an export format.

Real data: the Online Boutique AppGroup of kubernetes-sigs/scheduler-plugins (tests/fixtures/appgroup, with its
expected edge list in PROVENANCE.md computed with plain PyYAML) — including the upstream file as published, which
is not valid YAML at line 80.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from policy.cli.core import main as cli_main
from policy.state import ServiceEdge, ServiceGraph
from policy.topology import detect_format, load_graph
from policy.topology.appgroup import (
    ANNOTATION_CALL_GRAPH,
    API_VERSION,
    LABEL_WORKLOAD,
    WorkloadRef,
    appgroup_from_graph,
    dump_appgroup,
    load_appgroup,
    parse_appgroup,
    read_appgroups,
)
from policy.topology.common import TopologyError
from policy.topology.manifests import graph_from_objects

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests/fixtures/appgroup"
AG = FIX / "online-boutique-appgroup.yaml"
AG_UPSTREAM = FIX / "online-boutique-appgroup-upstream.yaml"
MANIFESTS = ROOT / "tests/fixtures/online-boutique-manifests"
SPANS = ROOT / "tests/fixtures/online-boutique-spans"


def provenance_edges() -> set[tuple[str, str]]:
    """The 28 edges listed in the fixture's PROVENANCE.md (``caller -> a, b, ...`` lines, wrapped)."""
    text = (FIX / "PROVENANCE.md").read_text()
    block = text.split("```")[1]
    out = set()
    caller = None
    for line in block.splitlines():
        m = re.match(r"^([a-z-]+) -> (.*)$", line.strip())
        if m:
            caller, rest = m.group(1), m.group(2)
        elif line.strip() and caller:
            rest = line.strip()
        else:
            continue
        out.update((caller, c.strip()) for c in rest.split(",") if c.strip())
    return out


def edges_of(graph: ServiceGraph) -> set[tuple[str, str]]:
    return {(e.caller, e.callee) for e in graph.edges}


# ---- reading real data ------------------------------------------------------------------------------------


def test_the_scheduler_plugins_online_boutique_appgroup_gives_the_provenance_edges():
    graph, warnings = load_appgroup(AG)
    expected = provenance_edges()
    assert len(expected) == 28
    assert edges_of(graph) == expected
    assert len(graph.services) == 11 and "loadgenerator" not in graph.services
    assert all(e.rps is None for e in graph.edges)
    assert warnings == []


def test_the_upstream_file_as_published_is_reported_with_its_file_and_line():
    with pytest.raises(TopologyError, match=r"online-boutique-appgroup-upstream\.yaml:80: invalid YAML"):
        load_appgroup(AG_UPSTREAM)
    with pytest.raises(TopologyError, match=r"upstream\.yaml:80:"):
        load_graph([AG_UPSTREAM])


def test_an_appgroup_file_is_detected_by_content(tmp_path):
    assert detect_format(AG) == "appgroup"
    assert detect_format(MANIFESTS) == "manifests"
    (tmp_path / "ag.yaml").write_text(AG.read_text())
    assert detect_format(tmp_path) == "appgroup"  # a directory of AppGroups only
    graph, _ = load_graph([tmp_path])
    assert edges_of(graph) == provenance_edges()


def test_hrl_policy_graph_prints_the_appgroup_edges(capsys):
    assert cli_main(["graph", str(AG), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {(e["caller"], e["callee"]) for e in doc["edges"]} == provenance_edges()
    assert all(e["rps"] is None for e in doc["edges"])


# ---- malformed input: file, line and field ----------------------------------------------------------------

GOOD = """\
apiVersion: appgroup.diktyo.x-k8s.io/v1alpha1
kind: AppGroup
metadata:
  name: shop
spec:
  numMembers: 2
  topologySortingAlgorithm: KahnSort
  workloads:
    - workload:
        kind: Deployment
        name: a
        selector: a
      dependencies:
        - workload:
            kind: Deployment
            name: b
            selector: b
          minBandwidth: 100Mi
          maxNetworkCost: 30
    - workload:
        kind: Deployment
        name: b
        selector: b
"""


@pytest.mark.parametrize(
    "old, new, line, message",
    [
        ("  numMembers: 2\n", "", 6, r"spec\.numMembers: required field missing"),  # the line spec's map starts
        ("  numMembers: 2\n", "  numMembers: 0\n", 6, r"spec\.numMembers: out of range 1\.\.2147483647: 0"),
        ("  numMembers: 2\n", "  numMembers: two\n", 6, r"spec\.numMembers: expected an integer, got 'two'"),
        ("  topologySortingAlgorithm: KahnSort\n", "", 6, r"spec\.topologySortingAlgorithm: required field missing"),
        ("  workloads:\n", "  workloads: {}\n  other:\n", 8, r"spec\.workloads: expected a list"),
        ("        selector: a\n", "", 10, r"spec\.workloads\[0\]\.workload\.selector: required field missing"),
        (
            "        name: a\n",
            "        name: 7\n",
            11,
            r"spec\.workloads\[0\]\.workload\.name: expected a non-empty string",
        ),
        (
            "          maxNetworkCost: 30\n",
            "          maxNetworkCost: 20000\n",
            19,
            r"spec\.workloads\[0\]\.dependencies\[0\]\.maxNetworkCost: out of range 0\.\.10000: 20000",
        ),
        (
            "          minBandwidth: 100Mi\n",
            "          minBandwidth: fast\n",
            18,
            r"spec\.workloads\[0\]\.dependencies\[0\]\.minBandwidth: expected a Kubernetes quantity",
        ),
        (
            "            selector: b\n",
            "            selector: b\n            colour: red\n",
            18,
            r"spec\.workloads\[0\]\.dependencies\[0\]\.workload\.colour: unknown field",
        ),
        (
            "        - workload:\n            kind: Deployment\n            name: b\n            selector: b\n"
            "          minBandwidth: 100Mi\n          maxNetworkCost: 30\n",
            "        - 42\n",
            14,
            r"spec\.workloads\[0\]\.dependencies\[0\]: expected a map",
        ),
        ("appgroup.diktyo.x-k8s.io/v1alpha1", "appgroup.diktyo.x-k8s.io/v2", 1, r"apiVersion: unsupported version"),
        (
            "  name: shop\n",
            '  name: shop\n  annotations:\n    hrl-scheduler.io/call-graph: \'[{"caller": "a"\'\n',
            6,
            r"metadata\.annotations\['hrl-scheduler\.io/call-graph'\]: invalid JSON",
        ),
        (
            "  name: shop\n",
            "  name: shop\n  annotations:\n    hrl-scheduler.io/call-graph: "
            '\'[{"caller": "a", "callee": "b", "rps": -1}]\'\n',
            6,
            r"call-graph'\]\[0\]\.rps: expected a finite number >= 0",
        ),
        ("spec:\n", "spec:\n  bad: [\n", 8, r"invalid YAML: expected ',' or ']'"),
    ],
    ids=[
        "numMembers-missing",
        "numMembers-zero",
        "numMembers-text",
        "algorithm-missing",
        "workloads-map",
        "selector-missing",
        "name-number",
        "cost-too-high",
        "bandwidth-text",
        "unknown-field",
        "dependency-scalar",
        "version",
        "annotation-json",
        "annotation-negative",
        "yaml-syntax",
    ],
)
def test_a_malformed_appgroup_names_file_line_and_field(tmp_path, old, new, line, message):
    assert old in GOOD
    f = tmp_path / "ag.yaml"
    f.write_text(GOOD.replace(old, new, 1))
    with pytest.raises(TopologyError) as info:
        load_appgroup(f)
    text = str(info.value)
    assert text.startswith(f"{f}:{line}: "), text
    assert re.search(message, text), text
    assert "\n" not in text


def test_the_well_formed_variant_of_those_cases_reads_cleanly(tmp_path):
    f = tmp_path / "ag.yaml"
    f.write_text(GOOD)
    graph, warnings = load_appgroup(f)
    assert edges_of(graph) == {("a", "b")} and graph.services == ("a", "b") and warnings == []


def test_a_file_whose_only_appgroup_is_of_another_api_group_holds_no_appgroup(tmp_path):
    f = tmp_path / "x.yaml"
    f.write_text("apiVersion: example.com/v1\nkind: AppGroup\nmetadata: {name: x}\n")
    with pytest.raises(TopologyError, match="no AppGroup object"):
        load_appgroup(f)


def test_the_legacy_api_group_and_an_unknown_sorting_algorithm_are_warnings(tmp_path):
    f = tmp_path / "ag.yaml"
    f.write_text(
        GOOD.replace("appgroup.diktyo.x-k8s.io/v1alpha1", "appgroup.diktyo.k8s.io/v1alpha1").replace(
            "KahnSort", "Quicksort"
        )
    )
    graph, warnings = load_appgroup(f)
    assert edges_of(graph) == {("a", "b")}
    assert any("legacy API group" in w for w in warnings)
    assert any("'Quicksort' is not one of" in w for w in warnings)


def test_a_dependency_outside_the_group_is_kept_with_a_warning(tmp_path):
    f = tmp_path / "ag.yaml"
    f.write_text(GOOD.replace("    - workload:\n        kind: Deployment\n        name: b\n        selector: b\n", ""))
    graph, warnings = load_appgroup(f)
    assert edges_of(graph) == {("a", "b")}
    assert any("'b', which is not among spec.workloads" in w for w in warnings)


# ---- export and round trips -------------------------------------------------------------------------------


def test_online_boutique_manifests_survive_a_round_trip_through_an_appgroup(tmp_path):
    graph, _ = load_graph([MANIFESTS])
    obj = appgroup_from_graph(graph, "online-boutique", max_network_cost=100, min_bandwidth="10Mi")
    f = tmp_path / "ag.yaml"
    f.write_text(dump_appgroup(obj))
    back, warnings = load_graph([f])
    assert warnings == []
    assert back.services == graph.services
    assert edges_of(back) == edges_of(graph) and len(back.edges) == 16
    parsed = parse_appgroup(yaml.safe_load(f.read_text()), str(f))
    assert parsed.num_members == 12 and parsed.topology_sorting_algorithm == "KahnSort"
    assert all(
        d.max_network_cost == 100 and d.min_bandwidth == "10Mi" for w in parsed.workloads for d in w.dependencies
    )


def test_measured_rates_and_latencies_survive_a_round_trip_in_the_annotation(tmp_path):
    graph, _ = load_graph([SPANS])
    f = tmp_path / "ag.yaml"
    f.write_text(dump_appgroup(appgroup_from_graph(graph, "ob")))
    back, _ = load_appgroup(f)
    assert back.to_json() == graph.to_json()


def test_the_cli_exports_an_appgroup_with_the_manifests_workload_names(tmp_path, capsys):
    assert (
        cli_main(
            [
                "graph",
                str(MANIFESTS),
                "--appgroup",
                "online-boutique",
                "--namespace",
                "shop",
                "--max-network-cost",
                "80",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    obj = yaml.safe_load(text)
    assert obj["apiVersion"] == API_VERSION and obj["kind"] == "AppGroup"
    assert obj["metadata"] == {"name": "online-boutique", "namespace": "shop"}
    refs = {w["workload"]["selector"]: w["workload"] for w in obj["spec"]["workloads"]}
    # Online Boutique's Deployments are named like their app label; the namespace comes from --namespace
    # only where the manifests do not set one (they don't).
    assert refs["frontend"] == {
        "kind": "Deployment",
        "name": "frontend",
        "selector": "frontend",
        "apiVersion": "apps/v1",
        "namespace": "default",
    }
    f = tmp_path / "ag.yaml"
    f.write_text(text)
    assert cli_main(["graph", str(f), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["edges"]) == 16


def test_export_refuses_bad_arguments():
    g = ServiceGraph.build(["a", "b"], [ServiceEdge("a", "b")])
    for kwargs, message in [
        ({"max_network_cost": 10001}, "max_network_cost"),
        ({"min_bandwidth": "lots"}, "min_bandwidth"),
        ({"topology_sorting_algorithm": "Bogo"}, "topology_sorting_algorithm"),
        ({"num_members": 0}, "num_members"),
    ]:
        with pytest.raises(ValueError, match=message):
            appgroup_from_graph(g, "x", **kwargs)
    with pytest.raises(ValueError, match="name"):
        appgroup_from_graph(g, "Not_A_Name")


def test_self_edges_are_not_exported_and_isolated_services_are(tmp_path):
    g = ServiceGraph.build(["a", "b", "lonely"], [ServiceEdge("a", "a", rps=3.0), ServiceEdge("a", "b", rps=1.0)])
    obj = appgroup_from_graph(g, "x")
    ws = {w["workload"]["selector"]: w for w in obj["spec"]["workloads"]}
    assert set(ws) == {"a", "b", "lonely"}
    assert [d["workload"]["selector"] for d in ws["a"]["dependencies"]] == ["b"]
    assert json.loads(obj["metadata"]["annotations"][ANNOTATION_CALL_GRAPH]) == [
        {"caller": "a", "callee": "b", "rps": 1.0}
    ]


# ---- together with manifests ----------------------------------------------------------------------------


def _deployment(name: str, labels: dict[str, str]) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "c"}]}},
        },
    }


def test_appgroup_references_resolve_to_the_manifests_services_by_the_workload_label():
    objs = [
        _deployment("web-deployment", {"app": "web", LABEL_WORKLOAD: "w1"}),
        _deployment("db-deployment", {"app": "db", LABEL_WORKLOAD: "w2"}),
        _deployment("cache", {"app": "redis"}),
        yaml.safe_load(
            GOOD.replace("selector: a", "selector: w1")
            .replace("selector: b", "selector: w2")
            .replace("name: b\n            selector: w2", "name: b\n            selector: w2")
        ),
    ]
    # a second dependency, on a workload known only by its name, and one on nothing
    ag = objs[-1]
    ag["spec"]["workloads"][0]["dependencies"].append(
        {"workload": {"kind": "Deployment", "name": "cache", "selector": "zzz"}}
    )
    ag["spec"]["workloads"][0]["dependencies"].append(
        {"workload": {"kind": "Deployment", "name": "ghost", "selector": "ghost"}}
    )
    graph, warnings = graph_from_objects(objs, "mixed.yaml")
    assert edges_of(graph) == {("web", "db"), ("web", "redis")}
    assert any("selector 'ghost'" in w and "matches no workload" in w for w in warnings)


def test_an_appgroup_file_next_to_manifests_joins_the_manifests_input(tmp_path):
    f = tmp_path / "ag.yaml"
    f.write_text(AG.read_text())
    graph, warnings = load_graph([MANIFESTS, f])
    # the manifests' 16 edges plus the AppGroup's 28, which resolve to the same service names
    assert edges_of(graph) == edges_of(load_graph([MANIFESTS])[0]) | provenance_edges()
    assert "manifests:" in graph.source


def test_the_export_refs_default_to_deployments_in_the_given_namespace():
    g = ServiceGraph.build([], [ServiceEdge("a", "b")])
    obj = appgroup_from_graph(g, "x", "prod", workloads={"b": WorkloadRef("StatefulSet", "b-db", "b", "", "")})
    ws = {w["workload"]["selector"]: w["workload"] for w in obj["spec"]["workloads"]}
    assert ws["a"] == {"kind": "Deployment", "name": "a", "selector": "a", "apiVersion": "apps/v1", "namespace": "prod"}
    assert ws["b"] == {
        "kind": "StatefulSet",
        "name": "b-db",
        "selector": "b",
        "apiVersion": "apps/v1",
        "namespace": "prod",
    }


def test_the_console_script_reports_the_broken_upstream_file_in_one_line():
    exe = Path(sys.executable).parent / "hrl-policy"
    p = subprocess.run([str(exe), "graph", str(AG_UPSTREAM)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and ":80: invalid YAML" in p.stderr


def test_names_and_bandwidths_that_look_like_numbers_survive_a_round_trip(tmp_path):
    # `1e5` is a number to YAML 1.2 readers (ours, kubectl's): the writer quotes such text, and a numeric
    # minBandwidth is read as the quantity the API server would make of it
    f = tmp_path / "ag.yaml"
    for services, bandwidth in ((("front", "back"), "1e3"), (("front", "1e5"), None)):
        g = ServiceGraph(services, (ServiceEdge(services[0], services[1], rps=10.0),))
        text = dump_appgroup(appgroup_from_graph(g, "shop", min_bandwidth=bandwidth))
        f.write_text(text)
        assert set(load_appgroup(f)[0].services) == set(services)
        assert ("'1e3'" in text) == (bandwidth is not None) and ("'1e5'" in text) == (bandwidth is None)
    f.write_text(f.read_text().replace("'1e5'", "back"))
    doc = yaml.safe_load(f.read_text())
    doc["spec"]["workloads"][0]["dependencies"] = [
        {"workload": {"kind": "Deployment", "name": "back", "selector": "back"}, "minBandwidth": 1000}
    ]
    f.write_text(yaml.safe_dump(doc).replace("minBandwidth: 1000", "minBandwidth: 1e3"))
    ags = read_appgroups(f)
    assert [d.min_bandwidth for w in ags[0].workloads for d in w.dependencies] == ["1000"]
