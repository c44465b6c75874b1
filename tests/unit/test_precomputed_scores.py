"""The precomputed-score path (policy.lowlevel.NodeScoreTable, served by extender.scoring) gives the scores of the
direct computation on the bench's cluster (hack/bench-scheduler.py): bit-identical for the heuristic, identical
integer scores (and floats to 1e-6) for the learned policy, whose matrix products may round differently with the
batch size."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scripts import load_script

from extender.scoring import prioritize_scores
from extender.store import SnapshotStore
from extender.wire import build_host_priorities, decode_extender_args, encode_host_scores, encode_json
from policy.bundle import DEFAULT_BUNDLES
from policy.intent import Intent
from policy.lowlevel import LearnedPlacement, NodeScoreTable, TopologyHeuristic, load_placement, score_key
from policy.observe import snapshot_from_objects

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    return load_script("hrl_bench_scheduler", ROOT / "hack" / "bench-scheduler.py")


NODES, PODS, SERVICES = 500, 2000, 20


@pytest.fixture(scope="module")
def bench_store():
    bench = _bench()
    objs = bench.bench_cluster_objects(NODES, PODS, SERVICES, bound_fraction=0.5, seed=3)
    snap = snapshot_from_objects(objs["items"], taken_at_s=1000.0)
    from extender.kube import graph_with_annotations

    store = SnapshotStore(clock=lambda: 1000.0)
    store.update(snap.with_graph(graph_with_annotations(None, snap.pods)), now_s=1000.0)
    return bench, store


def _requests(bench, rng: np.random.Generator, n: int):
    names = [f"bench-node-{i:04d}" for i in range(NODES)]
    for _ in range(n):
        i = int(rng.integers(PODS // 2, PODS))  # a pending pod of the bench
        cands = [str(c) for c in rng.choice(names, size=int(rng.integers(1, NODES + 1)), replace=False)]
        body = encode_json(bench.bench_request(i, SERVICES, cands))
        yield decode_extender_args(body)


@pytest.mark.parametrize("policy_name", ["topology-heuristic", "learned", "ensemble"])
def test_the_precomputed_path_and_the_direct_computation_give_the_same_scores_on_the_bench_cluster(
    bench_store, policy_name
):
    bench, store = bench_store
    view = store.get()
    policy = {
        "topology-heuristic": TopologyHeuristic,
        "learned": LearnedPlacement.load,
        "ensemble": lambda: load_placement(DEFAULT_BUNDLES / "hrl-ensemble" / "low"),
    }[policy_name]()
    table = NodeScoreTable(policy)
    computed = table.warm(view.index, view.intent)
    assert computed == SERVICES  # one vector per (service, requests) of the pending pods
    rng = np.random.default_rng(7)
    ok = 0
    for parsed in _requests(bench, rng, 60):
        direct, out_d = prioritize_scores(parsed, view, policy)
        hits = table.hits
        gathered, out_t = prioritize_scores(parsed, view, policy, table=table)
        assert table.hits == hits + 1, "the table must serve every pending pod of the bench"
        assert out_d == out_t
        np.testing.assert_array_equal(gathered, direct)
        ok += out_d == "ok"
        # and the floats behind them
        vec = table.lookup(parsed.pod, view.index, view.intent, table.rows_token(view.index, parsed.pod.service))
        pos = [view.index.node_pos[n] for n in parsed.node_names]
        raw = np.asarray(policy.score(parsed.pod, parsed.node_names, view.index, view.intent))
        if policy_name == "topology-heuristic":
            np.testing.assert_array_equal(vec[pos], raw)
        else:
            np.testing.assert_allclose(vec[pos], raw, rtol=0, atol=1e-6)
    assert ok == 60


def test_a_table_of_another_index_intent_or_bound_pod_is_not_used(bench_store):
    bench, store = bench_store
    view = store.get()
    table = NodeScoreTable(TopologyHeuristic())
    table.warm(view.index, view.intent)
    parsed = next(_requests(bench, np.random.default_rng(1), 1))
    assert table.lookup(parsed.pod, view.index, view.intent) is not None
    assert table.lookup(parsed.pod, view.index, (2.0, 1.0)) is None  # another intent
    other = store.set_intent(Intent((1.0, 1.0))).index  # set_intent keeps the index: same vectors, same intent
    assert table.lookup(parsed.pod, other, None) is not None
    from dataclasses import replace

    bound = replace(parsed.pod, node_name="bench-node-0001")
    assert table.lookup(bound, view.index, view.intent) is None
    moved = replace(view.index)  # a new index object (a new snapshot)
    assert table.lookup(parsed.pod, moved, view.intent) is None
    # a miss is remembered and computed at the next warm
    odd = replace(parsed.pod, requests=type(parsed.pod.requests)(123, 456))
    assert table.lookup(odd, view.index, view.intent) is None
    assert score_key(odd) in table.keys_for(view.index)
    table.warm(view.index, view.intent)
    assert table.lookup(odd, view.index, view.intent) is not None


def test_the_fast_reply_encoder_writes_the_same_bytes_as_the_generic_one(bench_store):
    bench, store = bench_store
    view = store.get()
    policy = TopologyHeuristic()
    for parsed in _requests(bench, np.random.default_rng(2), 10):
        scores, _ = prioritize_scores(parsed, view, policy)
        assert encode_host_scores(parsed.node_names, scores) == encode_json(
            build_host_priorities(parsed.node_names, scores)
        )


def test_per_service_colocation_priorities_score_the_same_from_the_table_and_directly(bench_store):
    """The learned high level's co-location priorities (scaling each service's locality weight) reach the
    scores on both paths, and change them."""
    from dataclasses import replace

    bench, store = bench_store
    base = store.get()
    policy = TopologyHeuristic()
    requests = list(_requests(bench, np.random.default_rng(11), 40))
    services = sorted({p.pod.service for p in requests})
    colocation = {s: (0.0 if k % 2 else 4.0) for k, s in enumerate(services)}
    view = replace(base, plan_intent=Intent(base.intent or (), colocation_priority=colocation))
    table = NodeScoreTable(policy)
    table.warm(view.index, view.intent, colocation=view.colocation)
    changed = 0
    for parsed in requests:
        direct, out_d = prioritize_scores(parsed, view, policy)
        gathered, out_t = prioritize_scores(parsed, view, policy, table=table)
        assert out_d == out_t == "ok"
        np.testing.assert_array_equal(gathered, direct)
        plain, _ = prioritize_scores(parsed, base, policy)
        changed += not np.array_equal(plain, direct)
    assert changed > 0  # the priorities matter
    # a table warmed without them is not used for a view that has them
    plain_table = NodeScoreTable(policy)
    plain_table.warm(base.index, base.intent)
    assert plain_table.lookup(requests[0].pod, view.index, view.intent, colocation=view.colocation) is None
