"""Parity of the HRLScore scheduler plugin with the extender: for the same cluster state and intent, the plugin's
scores (its compiled Go code: scheduler-plugin/cmd/hrl-score-check runs the lookup of its PreScore and the arithmetic
of its Score on the table the extender's producer publishes) equal the extender's prioritize replies, node for node,
on random clusters (hypothesis: tests/cluster_states.py), for the heuristic and the learned policy; the per-pod load
term with the scheduler's newer requested CPU is the Python reference's bit for bit; an old table scores neutral.

The binaries are built when missing (hack/build-scheduler-plugin.sh, about 20 s once the control plane is built);
without Go the test fails saying so, it never skips."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
from cp_helpers import cpmod
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.scoring import prioritize_scores
from extender.wire import decode_extender_args, encode_json, make_extender_args
from policy.bundle import DEFAULT_BUNDLES
from policy.cache import table_to_pb
from policy.cache.codec import pb_modules
from policy.lowlevel import (
    LearnedPlacement,
    NodeScoreTable,
    TopologyHeuristic,
    apply_load_term,
    build_score_table,
    load_placement,
    table_keys,
)
from tests.cluster_states import cluster_states, load_state, node_object, pod_object

PB2, _ = pb_modules()
NOW_S = 1000.0


@pytest.fixture(scope="module")
def score_check():
    try:
        return cpmod.plugin_bin_dir(build=True) / "hrl-score-check"
    except cpmod.ControlPlaneError as exc:
        pytest.fail(str(exc), pytrace=False)


POLICIES = {
    "heuristic": TopologyHeuristic(),
    "learned": LearnedPlacement.load(),
    "ensemble": load_placement(DEFAULT_BUNDLES / "hrl-ensemble" / "low"),
}


def _plugin(binary, table_path, cases, wait_s=0.0, max_age_s=30.0) -> list[dict]:
    doc = {"table": str(table_path), "waitSeconds": wait_s, "maxTableAgeSeconds": max_age_s, "cases": cases}
    r = subprocess.run([str(binary)], input=json.dumps(doc), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["cases"]


def _pending(pod: dict) -> dict:
    """A new replica of ``pod``, waiting for a node (as the scheduler sees it)."""
    p = json.loads(json.dumps(pod))
    p["spec"].pop("nodeName", None)
    p["metadata"].pop("deletionTimestamp", None)
    p["status"] = {"phase": "Pending"}
    return p


def _publish(policy, view, tmp_path):
    """The producer's table for ``view`` (extender.publisher does this), serialized as the cache streams it."""
    table = build_score_table(
        policy,
        view.index,
        view.intent,
        table_keys(view.index, 256),
        colocation=view.colocation or None,
        usable=lambda s: view.embedding_problem(s, NOW_S) is None,
    )
    path = tmp_path / "table.pb"
    path.write_bytes(table_to_pb(PB2, table).SerializeToString())
    return table, path


@pytest.mark.parametrize("name", ["heuristic", "learned"])
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(state=cluster_states(), data=st.data())
def test_the_plugin_scores_every_node_as_the_extender_does(score_check, tmp_path, name, state, data):
    policy = POLICIES[name]
    store = load_state(state, NOW_S)
    view = store.get()
    table, path = _publish(policy, view, tmp_path)
    # the extender as served: its own score table warmed at every store change (extender.server.make_app); for the
    # learned policy with the producer's keys too (as its recent requests would), so that both compute the network
    # on the same batch (its float32 sums may round differently with the batch size; the heuristic is exact either way)
    ext_table = NodeScoreTable(policy)
    keys = [r.key for r in table.rows] if name == "learned" else None
    ext_table.warm(view.index, view.intent, keys=keys, colocation=view.colocation or None)
    nodes = [n["metadata"]["name"] for n in state.nodes]
    # the pending pods, and new replicas of the running ones: the table's rows (policy.lowlevel.table_keys)
    live = [p for p in state.pods if p["status"]["phase"] not in ("Succeeded", "Failed")]
    pods = [_pending(p) for p in live if "deletionTimestamp" not in p["metadata"]]
    pods.append(
        _pending(
            {
                "metadata": {"name": "lone", "namespace": "x", "labels": {"app": "unknown-svc"}},
                "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            }
        )
    )
    cases, expected = [], []
    for pod in pods:
        cands = data.draw(st.lists(st.sampled_from([*nodes, "ghost-node"]), min_size=1, unique=True), label="nodes")
        parsed = decode_extender_args(encode_json(make_extender_args(pod, node_names=cands)))
        scores, outcome = prioritize_scores(parsed, view, policy, now_s=NOW_S, table=ext_table)
        cases.append({"pod": pod, "nodes": cands})
        expected.append((scores.tolist(), outcome))
    got = _plugin(score_check, path, cases)
    for case, (want, outcome), res in zip(cases, expected, got):
        assert res["scores"] == want, (case["pod"]["metadata"]["name"], res, outcome)
        if outcome == "ok" and any(want):
            assert res["outcome"] == "ok"
        if res["outcome"] != "ok":  # nothing to score with: every node neutral, as the extender answered
            assert not any(want), (res, outcome)


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(state=cluster_states(), data=st.data())
def test_the_load_term_with_the_schedulers_newer_requests_is_the_python_reference(score_check, tmp_path, state, data):
    policy = POLICIES[data.draw(st.sampled_from(sorted(POLICIES)), label="policy")]
    view = load_state(state, NOW_S).get()
    table, path = _publish(policy, view, tmp_path)
    if not table.rows:
        return
    nodes = list(table.nodes)
    extra = data.draw(st.lists(st.integers(-500, 20_000), min_size=len(nodes), max_size=len(nodes)), label="since")
    requested = {n: int(table.requested_cpu_m[i]) + e for i, (n, e) in enumerate(zip(nodes, extra))}
    cases, keys = [], []
    for row in table.rows:
        cpu_m, mem = (row.cpu_m, row.memory_bytes) if row.cpu_m >= 0 else (data.draw(st.integers(1, 4000)), 1 << 27)
        pod = {
            "metadata": {"name": "p", "namespace": "d", "annotations": {"hrl-scheduler.io/service": row.service}},
            "spec": {
                "containers": [{"name": "c", "resources": {"requests": {"cpu": f"{cpu_m}m", "memory": str(mem)}}}]
            },
        }
        cases.append({"pod": pod, "nodes": nodes, "requestedMilliCPU": requested})
        keys.append(cpu_m)
    got = _plugin(score_check, path, cases)
    since = np.array([requested[n] for n in nodes], dtype=np.float64) - table.requested_cpu_m
    for row, cpu_m, res in zip(table.rows, keys, got):
        assert res["outcome"] == "ok"
        want = apply_load_term(
            row.base, row.weight, table.load_term, table.alloc_cpu_m, table.cpu_used_m, cpu_m, since_m=since
        )
        # equal as numbers, bit for bit but for the sign of a zero (JSON's -0 reads back as 0)
        assert np.array_equal(np.asarray(res["raw"], dtype=np.float64), want), (row.key, res["raw"], want)
        assert res["scores"] == np.floor(np.clip(want, 0, 10) + 0.5).astype(int).tolist()


def test_a_pod_whose_requests_no_pod_of_the_cluster_has_scores_neutral_with_the_learned_policy(score_check, tmp_path):
    """The known difference: the extender scores any pod on the spot; with a policy whose base reads the requests
    (the learned one) the plugin only has the rows the producer computed (the pending pods', then the running pods' of
    each service), and answers a pod of another shape neutral until the producer's watch sees it pending (one
    debounce, about 0.2 s, later). The heuristic's rows serve any requests."""
    from policy.state import ServiceGraph
    from tests.cluster_states import State

    nodes = [node_object("n1")]
    pod = pod_object("a-0", "a", node="n1")
    view = load_state(State(nodes, [pod], ServiceGraph.build(["a", "b"], [])), NOW_S).get()
    bigger = _pending(pod)
    bigger["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "200m"
    cases = [{"pod": _pending(pod), "nodes": ["n1"]}, {"pod": bigger, "nodes": ["n1"]}]
    _table, path = _publish(POLICIES["learned"], view, tmp_path)
    assert [g["outcome"] for g in _plugin(score_check, path, cases)] == ["ok", "neutral_no_row"]
    _table, path = _publish(POLICIES["heuristic"], view, tmp_path)
    assert [g["outcome"] for g in _plugin(score_check, path, cases)] == ["ok", "ok"]


def test_an_old_table_or_none_scores_neutral(score_check, tmp_path):
    from policy.state import ServiceGraph
    from tests.cluster_states import State

    nodes = [node_object("n1")]
    pod, bound = pod_object("a-1", "a"), pod_object("a-0", "a", node="n1")
    view = load_state(State(nodes, [pod, bound], ServiceGraph.build(["a"], [])), NOW_S).get()
    _table, path = _publish(TopologyHeuristic(), view, tmp_path)
    case = [{"pod": pod, "nodes": ["n1"]}]
    assert _plugin(score_check, path, case, wait_s=0.0)[0]["outcome"] == "ok"
    old = _plugin(score_check, path, case, wait_s=31.0, max_age_s=30.0)[0]
    assert (old["outcome"], old["scores"]) == ("neutral_stale", [0])
    none = subprocess.run([str(score_check)], input=json.dumps({"cases": case}), capture_output=True, text=True)
    assert json.loads(none.stdout)["cases"][0]["outcome"] == "neutral_no_table"
    bad = subprocess.run([str(score_check)], input='{"table": 3}', capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "hrl-score-check: stdin:" in bad.stderr
