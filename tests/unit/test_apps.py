"""The vendored applications: each loads, has the workloads and call edges its PROVENANCE.md lists, an SLO
and a timeout, and places on its benchmark cluster."""

import re
from functools import lru_cache
from pathlib import Path

import pytest

from policy.sim.app import builtin_apps, builtin_apps_dir
from policy.sim.app import load_app as _load_app
from policy.sim.engine import SimConfig
from policy.sim.sizing import cluster_for, trace_rps
from policy.sim.stacks import run_stack

load_app = lru_cache(maxsize=None)(_load_app)

EXPECTED = {  # app: (workloads, call edges)
    "online-boutique": (12, 16),
    "sock-shop": (14, 15),
    "dsb-hotel-reservation": (19, 16),
    "dsb-social-network": (27, 33),
    "dsb-media-microservices": (33, 40),
    "alibaba": (386, 475),
}


def test_the_six_benchmark_apps_are_built_in():
    assert set(EXPECTED) <= set(builtin_apps())


@pytest.mark.parametrize("name", [n for n in EXPECTED if n != "alibaba"])
def test_an_app_has_its_workloads_edges_slo_and_timeout(name):
    app = load_app(name)
    workloads, edges = EXPECTED[name]
    assert len(app.workloads) == workloads
    assert len(app.graph.edges) == edges
    assert app.slo_p95_ms > 0 and app.timeout_ms > app.slo_p95_ms
    assert all(w.replicas >= 1 for w in app.workloads)


@pytest.mark.parametrize(
    "name", ["sock-shop", "dsb-hotel-reservation", "dsb-social-network", "dsb-media-microservices"]
)
def test_the_call_graph_is_the_edge_table_of_the_provenance(name):
    text = (builtin_apps_dir() / name / "PROVENANCE.md").read_text()
    table = text[text.index("## Call graph") :]
    rows = set()
    for line in table.splitlines()[1:]:
        if line.startswith("## "):
            break
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if (
            line.startswith("|")
            and len(cells) >= 2
            and re.fullmatch(r"[a-z0-9][a-z0-9-]*", cells[0])
            and cells[0] != "caller"
        ):
            rows.add((cells[0], cells[1]))
    app = load_app(name)
    assert {(e.caller, e.callee) for e in app.graph.edges} == rows


def test_the_alibaba_app_is_the_union_of_the_sample_call_graphs():
    app = load_app("alibaba")
    assert (len(app.workloads), len(app.graph.edges)) == EXPECTED["alibaba"]
    assert abs(sum(app.entry.values()) - 1.0) < 1e-9 and len(app.entry) > 50
    mapping = (builtin_apps_dir() / "alibaba" / "services.csv").read_text().splitlines()
    assert len(mapping) == 1 + 386


@pytest.mark.parametrize("name", [n for n in EXPECTED if n != "alibaba"])
def test_every_pod_of_an_app_places_on_its_benchmark_cluster(name):
    app = load_app(name)
    res = run_stack(
        "default-kube-scheduler",
        app,
        trace_rps(app, "nasa", 2),
        cluster_for(app),
        SimConfig(minutes=2, seed=0, n_samples=100),
    )
    assert res.unschedulable == 0
    assert res.pods_placed == sum(w.replicas for w in app.workloads)


def test_each_app_folder_documents_its_provenance():
    for name in EXPECTED:
        assert (Path(builtin_apps_dir()) / name / "PROVENANCE.md").is_file()
