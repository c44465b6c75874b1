"""The node-score table of the kube-scheduler plugin (policy.lowlevel.scoretable, policy.cache.scoretable): its base
and load term give each policy's own scores bit for bit on random clusters; the rows it holds; its message survives
the wire; the checks the cache applies; the hub's watch streams (newest table first, heartbeats with the age growing,
slow watchers skip tables, the watcher limit)."""

from __future__ import annotations

import threading
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policy.bundle import DEFAULT_BUNDLES
from policy.cache import LoadTerm, ScoreTableHub, WatchersExhausted, table_from_pb, table_to_pb
from policy.cache.codec import pb_modules
from policy.index import ClusterIndex
from policy.lowlevel import (
    LearnedPlacement,
    TopologyHeuristic,
    apply_load_term,
    build_score_table,
    load_placement,
    scheduler_requested_cpu_m,
    table_keys,
)
from policy.state import PodInfo, Resources
from tests.cluster_states import cluster_states, load_state, node_object, pod_object

PB2, _ = pb_modules()
LEARNED = LearnedPlacement.load()
POLICIES = {
    "heuristic": TopologyHeuristic(),
    "heuristic-0.5": TopologyHeuristic(target_utilization=0.5),
    "learned": LEARNED,
    "ensemble": load_placement(DEFAULT_BUNDLES / "hrl-ensemble" / "low"),
}


def _table(policy, view, keys=None, **kw):
    keys = table_keys(view.index, 256) if keys is None else keys
    return build_score_table(policy, view.index, view.intent, keys, colocation=view.colocation or None, **kw)


@pytest.mark.parametrize("name", sorted(POLICIES))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(state=cluster_states(), extra_cpu=st.sampled_from([0, 1, 100, 2500]))
def test_the_load_term_applied_to_the_base_is_the_policys_own_score_bit_for_bit(name, state, extra_cpu):
    policy = POLICIES[name]
    view = load_state(state).get()
    index = view.index
    keys = table_keys(index, 256)
    keys += [(s, 100 + extra_cpu, 1 << 27) for s in view.graph.services]  # requests no pod of the cluster has
    table = _table(policy, view, keys)
    term, used = policy.load_term(index)
    np.testing.assert_array_equal(table.cpu_used_m, used)
    if not policy.base_reads_requests:  # one row per service of the graph, for any requests
        assert [r.key for r in table.rows] == [(s, -1, -1) for s in sorted(view.graph.services)]
    for service, cpu_m, mem in keys:
        row = table.row(service, cpu_m, mem)
        if service not in view.graph.services:
            assert row is None
            continue
        pod = PodInfo(name="p", namespace="", service=service, requests=Resources(cpu_m, mem))
        # what the extender scores a pod of `service` with (extender.scoring.prioritize_scores)
        intent = view.plan_intent.for_service(service) if view.plan_intent is not None else None
        direct = np.asarray(policy.score(pod, list(index.node_names), index, intent), dtype=np.float64)
        rebuilt = apply_load_term(row.base, row.weight, table.load_term, index.alloc_cpu_m, table.cpu_used_m, cpu_m)
        assert direct.tobytes() == rebuilt.tobytes(), ((service, cpu_m, mem), direct, rebuilt)


def _requested_direct(index) -> np.ndarray:
    """kube-scheduler's requested CPU per node, summed pod by pod (the reference of scheduler_requested_cpu_m)."""
    out = np.zeros(len(index.node_names))
    for p in index.snapshot.pods:
        i = index.node_pos.get(p.node_name) if p.node_name is not None else None
        if i is not None and p.phase not in ("Succeeded", "Failed"):
            out[i] += p.requests.cpu_m
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(state=cluster_states(), data=st.data())
def test_the_schedulers_requested_cpu_is_the_pod_by_pod_sum_bit_for_bit(state, data):
    # from the index's sum (bound, not terminating), corrected by the terminating and finished pods
    snap = load_state(state).get().index.snapshot
    flags = st.tuples(st.booleans(), st.sampled_from(["Running", "Pending", "Succeeded", "Failed"]))
    pods = tuple(
        replace(p, terminating=t, phase=ph)
        for p, (t, ph) in zip(snap.pods, data.draw(st.lists(flags, min_size=len(snap.pods), max_size=len(snap.pods))))
    )
    index = ClusterIndex.build(replace(snap, pods=pods))
    assert scheduler_requested_cpu_m(index).tobytes() == _requested_direct(index).tobytes()


def test_the_load_term_adds_the_cpu_placed_since_the_snapshot():
    term = LoadTerm(scale=1.0, from_frac=0.7, cap=10.0)
    base = np.array([10.0, 10.0, 10.0])
    alloc = np.array([1000.0, 1000.0, 1000.0])
    used = np.array([500.0, 500.0, 500.0])
    # pod 100 m: 60 % used with it, no penalty; 300 m more placed since -> 90 %, two thirds of the way to 100 %
    got = apply_load_term(base, 1.0, term, alloc, used, 100, since_m=np.array([0.0, 300.0, -50.0]))
    np.testing.assert_allclose(got, [10.0, 10.0 / 3, 10.0])


def test_the_table_keeps_the_pending_pods_rows_first_then_those_of_the_running_pods_most_frequent_first():
    from tests.cluster_states import State

    nodes = [node_object("n1")]

    def pod(name, svc, cpu, node=None, phase="Running"):
        return pod_object(name, svc, cpu, "1Gi", node, phase)

    from policy.state import ServiceGraph

    pods = [
        pod("a1", "a", "100m", "n1"),
        pod("a2", "a", "100m", "n1"),
        pod("b1", "b", "200m", "n1"),
        pod("b2", "b", "300m"),
        pod("x1", "x", "1"),
        pod("a3", "a", "50m", "n1", "Succeeded"),
    ]
    store = load_state(State(nodes, pods, ServiceGraph.build(["a", "b"], [])))
    index = store.get().index
    gib = 1 << 30
    assert table_keys(index, 10) == [("b", 300, gib), ("a", 100, gib), ("b", 200, gib)]  # not the finished a3's
    assert table_keys(index, 2) == [("b", 300, gib), ("a", 100, gib)]
    # what kube-scheduler counts on n1: the three running pods, not the finished one
    assert scheduler_requested_cpu_m(index).tolist() == [400.0]


def test_a_row_the_policy_cannot_score_is_left_out_and_reported():
    from tests.cluster_states import State

    nodes = [node_object("n1")]
    from policy.state import ServiceGraph

    view = load_state(State(nodes, [], ServiceGraph.build(["a", "b"], []))).get()

    class Broken(TopologyHeuristic):
        base_reads_requests = True  # rows per key

        def score_parts(self, pod, candidates, index, intent=None):
            if pod.service == "b":
                raise ValueError("no rows for b")
            return super().score_parts(pod, candidates, index, intent)

    seen = []
    t = build_score_table(
        Broken(),
        view.index,
        None,
        [("a", 1, 1), ("b", 1, 1), ("zz", 1, 1)],
        on_error=lambda k, e: seen.append((k, str(e))),
    )
    assert [r.key for r in t.rows] == [("a", 1, 1)]
    assert seen == [(("b", 1, 1), "no rows for b")]  # zz is not in the call graph: not a row, not an error
    with pytest.raises(TypeError, match="cannot be served by the plugin"):
        build_score_table(object(), view.index, None, [])


@settings(max_examples=15, deadline=None)
@given(state=cluster_states())
def test_the_table_message_survives_the_wire(state):
    view = load_state(state).get()
    t = replace(_table(POLICIES["learned"], view), generation=7, producer="p", computed_at_s=12.5, snapshot_age_s=0.25)
    back = table_from_pb(PB2.ScoreTable.FromString(table_to_pb(PB2, t).SerializeToString()))
    assert (back.generation, back.producer, back.policy, back.nodes, back.load_term) == (
        t.generation,
        t.producer,
        t.policy,
        t.nodes,
        t.load_term,
    )
    for a, b in (
        (back.alloc_cpu_m, t.alloc_cpu_m),
        (back.cpu_used_m, t.cpu_used_m),
        (back.requested_cpu_m, t.requested_cpu_m),
    ):
        assert a.tobytes() == b.tobytes()
    assert [(r.key, r.weight, r.base.tobytes()) for r in back.rows] == [
        (r.key, r.weight, r.base.tobytes()) for r in t.rows
    ]


def _msg(generation=1, nodes=("n1", "n2"), rows=(("a", 100, 1, 1.0),), **kw):
    n = len(nodes)
    f = lambda v: np.full(n, v, dtype="<f8").tobytes()  # noqa: E731
    m = PB2.ScoreTable(
        generation=generation,
        nodes=list(nodes),
        alloc_cpu_m=f(1000.0),
        cpu_used_m=f(0.0),
        requested_cpu_m=f(0.0),
        load_term=PB2.LoadTerm(scale=1.0, from_frac=0.7, cap=10.0),
        rows=[PB2.ScoreRow(service=s, cpu_m=c, memory_bytes=mb, weight=w, base=f(5.0)) for s, c, mb, w in rows],
    )
    for k, v in kw.items():
        setattr(m, k, v)
    return m


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda m: setattr(m, "generation", 0), "table.generation: expected >= 1, got 0"),
        (lambda m: m.nodes.append("n1"), "table.nodes[2]: 'n1' appears twice"),
        (lambda m: setattr(m, "cpu_used_m", b"\0" * 8), "table.cpu_used_m: 2 nodes need 16 bytes of float64, got 8"),
        (lambda m: m.ClearField("load_term"), "table.load_term: missing"),
        (lambda m: setattr(m.load_term, "from_frac", 1.0), "load_term.from_frac: expected 0 <= x < 1, got 1.0"),
        (lambda m: setattr(m, "snapshot_age_s", -1.0), "table.snapshot_age_s: expected a finite number >= 0, got -1.0"),
        (lambda m: setattr(m.rows[0], "service", ""), "table.rows[0].service: expected a service name, got ''"),
        (lambda m: m.rows.append(m.rows[0]), "table.rows[1]: row ('a', 100, 1) appears twice"),
        (lambda m: setattr(m.rows[0], "weight", float("nan")), "table.rows[0].weight: expected a finite number"),
        (lambda m: setattr(m.rows[0], "base", np.array([1.0, np.inf]).tobytes()), "table.rows[0].base: contains NaN"),
        (lambda m: setattr(m.rows[0], "cpu_m", -1), "table.rows[0]: requests must be >= 0 (or both -1: any)"),
    ],
)
def test_the_cache_refuses_a_malformed_table_with_one_line_naming_the_field(change, message):
    hub = ScoreTableHub()
    m = _msg()
    change(m)
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        hub.publish(m)
    assert hub.current is None


class _Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_a_watch_gets_the_newest_table_then_heartbeats_with_the_snapshot_age_growing():
    clock = _Clock()
    hub = ScoreTableHub(heartbeat_s=0.05, clock=clock)
    hub.publish(_msg(1, snapshot_age_s=0.5))
    clock.t += 2.0
    events = hub.watch(PB2, 0)
    first = next(events)
    assert first.WhichOneof("event") == "table" and first.table.generation == 1
    assert first.table.snapshot_age_s == pytest.approx(2.5)  # held 2 s by the cache
    assert hub.touch(1, 0.1) and not hub.touch(9, 0.1)
    hb = next(events)
    assert hb.WhichOneof("event") == "heartbeat" and hb.heartbeat.snapshot_age_s == pytest.approx(0.1)
    clock.t += 1.0
    hb = next(events)  # nothing new: a heartbeat after heartbeat_s anyway, the age grown
    assert hb.heartbeat.snapshot_age_s == pytest.approx(1.1)
    hub.publish(_msg(2))
    assert next(events).table.generation == 2
    events.close()
    assert hub.watchers == 0


def test_a_watcher_that_has_the_table_gets_only_heartbeats_and_a_slow_one_skips_to_the_newest():
    hub = ScoreTableHub(heartbeat_s=0.05)
    hub.publish(_msg(3))
    known = hub.watch(PB2, 3)
    assert next(known).WhichOneof("event") == "heartbeat"
    slow = hub.watch(PB2, 0)
    assert next(slow).table.generation == 3
    for g in (4, 5, 6):
        hub.publish(_msg(g))
    assert next(slow).table.generation == 6  # 4 and 5 were never queued
    assert next(known).table.generation == 6


def test_the_hub_serves_at_most_max_watchers_and_ends_every_stream_on_close():
    hub = ScoreTableHub(heartbeat_s=10.0, max_watchers=2)
    hub.publish(_msg(1))
    a, b = hub.watch(PB2), hub.watch(PB2)
    next(a), next(b)
    with pytest.raises(WatchersExhausted):
        next(hub.watch(PB2))
    done = threading.Event()

    def drain():
        list(a)
        done.set()

    threading.Thread(target=drain, daemon=True).start()
    hub.close()
    assert done.wait(5.0), "close() must end a stream waiting for news"
    assert list(b) == []
