"""Plugin mode's producer (extender.publisher.ScoreTablePublisher) against a real gRPC embedding cache on
127.0.0.1: a table per change of what it depends on, heartbeats otherwise, the same rows the extender would score
(services of the call graph, with a fresh embedding when a cache is required), a restarted cache gets the table again,
an unreachable one is counted and retried; the configuration's checks."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from extender.config import load_extender_config
from extender.publisher import PublisherMetrics, ScoreTablePublisher, start_score_table_publisher
from extender.store import SnapshotStore
from policy.cache import CacheServer, GrpcEmbeddingCache
from policy.intent import Intent
from policy.lowlevel import TopologyHeuristic
from policy.observe import snapshot_from_objects
from policy.state import ServiceGraph
from tests.cluster_states import node_object, pod_object


def _objects(pending_cpu: str = "100m"):
    return [
        node_object("n1"),
        node_object("n2"),
        pod_object("a-1", "a", node="n1"),
        pod_object("b-1", "b", cpu=pending_cpu),
        pod_object("z-1", "not-in-graph"),
    ]


GRAPH = ServiceGraph.build(["a", "b"], [])


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


@pytest.fixture()
def cache():
    with CacheServer() as srv:
        client = GrpcEmbeddingCache(srv.address, 2.0)
        yield srv, client
        client.close()


def _store(clock, **kw):
    store = SnapshotStore(clock=clock)
    store.set_graph(GRAPH)
    store.update(snapshot_from_objects(_objects(**kw), taken_at_s=clock()))
    return store


def _next(watch):
    """The next event of a watch stream, past the generation-0 heartbeats a stream sends while the cache has no
    table."""
    ev = next(watch)
    while ev[0] == "heartbeat" and ev[1] == 0:
        ev = next(watch)
    return ev


def _sample(reg, name, **labels):
    return reg.get_sample_value(name, labels) or 0.0


def test_a_table_per_change_and_heartbeats_in_between(cache):
    srv, client = cache
    clock = Clock()
    store = _store(clock)
    reg = CollectorRegistry()
    pub = ScoreTablePublisher(store, TopologyHeuristic(), client, min_interval_s=0.0, metrics=PublisherMetrics(reg))
    watch = client.watch_score_table(0, "test")
    try:
        assert pub.step() == "published"
        kind, table = _next(watch)
        assert kind == "table" and table.generation == 1 and table.nodes == ("n1", "n2")
        # the heuristic's rows: one per service of the call graph, for any requests; none outside the graph
        assert [r.key for r in table.rows] == [("a", -1, -1), ("b", -1, -1)]
        assert table.requested_cpu_m.tolist() == [100.0, 0.0]
        clock.t += 3.0
        store.touch()  # the watch saw nothing new: same table, its age is 0 again
        assert pub.step() == "heartbeat"
        kind, gen, age = _next(watch)
        assert (kind, gen) == ("heartbeat", 1) and age == pytest.approx(0.0, abs=0.5)  # + the time the cache held it
        clock.t += 2.0
        assert pub.step() == "heartbeat"  # no touch: the snapshot ages
        assert _next(watch)[2] == pytest.approx(2.0, abs=0.5)
        store.set_intent(Intent((2.0, 0.5)))
        assert pub.step() == "published"
        kind, table = _next(watch)
        assert kind == "table" and table.generation == 2
        assert _sample(reg, "hrl_extender_score_table_publishes_total", outcome="ok") == 2
        assert _sample(reg, "hrl_extender_score_table_heartbeats_total", outcome="ok") == 2
        assert _sample(reg, "hrl_extender_score_table_generation") == 2
        assert _sample(reg, "hrl_extender_score_table_watchers") == 1
    finally:
        watch.cancel()


def test_the_pending_pods_are_scanned_for_row_keys_only_for_a_policy_whose_base_reads_requests(cache, monkeypatch):
    import extender.publisher as publisher
    from policy.lowlevel import LearnedPlacement

    _srv, client = cache
    scans = []
    real = publisher.table_keys
    monkeypatch.setattr(publisher, "table_keys", lambda index, n: scans.append(n) or real(index, n))
    clock = Clock()
    pub = ScoreTablePublisher(_store(clock), TopologyHeuristic(), client, min_interval_s=0.0, max_keys=7)
    assert pub.step() == "published" and scans == []  # the heuristic: one row per service, for any requests
    assert [r.key for r in pub.published.rows] == [("a", -1, -1), ("b", -1, -1)]
    pub = ScoreTablePublisher(_store(clock), LearnedPlacement.load(), client, min_interval_s=0.0, max_keys=7)
    assert pub.step() == "published" and scans == [7]  # rows of the pods' requests: the keys are read
    assert {r.key[0] for r in pub.published.rows} == {"a", "b"} and all(r.key[1] >= 0 for r in pub.published.rows)


def test_a_new_table_waits_min_interval_but_heartbeats_do_not(cache):
    _srv, client = cache
    clock = Clock()
    store = _store(clock)
    pub = ScoreTablePublisher(store, TopologyHeuristic(), client, min_interval_s=60.0)
    assert pub.step() == "published"
    store.set_intent(Intent((2.0, 1.0)))
    assert pub.step() == "waiting"
    assert pub.generation == 1


def test_services_without_a_fresh_embedding_get_no_row_when_a_cache_is_required(cache):
    _srv, client = cache
    clock = Clock()
    store = _store(clock)
    store.require_embeddings(max_age_s=60.0)
    pub = ScoreTablePublisher(store, TopologyHeuristic(), client, min_interval_s=0.0)
    assert pub.step() == "published"
    assert pub.published.rows == ()  # no embeddings at all: every pod would be answered neutral


def test_a_restarted_cache_gets_the_table_again_and_an_unreachable_one_is_counted(cache):
    srv, client = cache
    clock = Clock()
    store = _store(clock)
    reg = CollectorRegistry()
    pub = ScoreTablePublisher(store, TopologyHeuristic(), client, min_interval_s=0.0, metrics=PublisherMetrics(reg))
    assert pub.step() == "published"
    srv.score_tables._held = None  # as a cache that restarted empty
    assert pub.step() == "published"
    assert _sample(reg, "hrl_extender_score_table_heartbeats_total", outcome="unknown") == 1
    assert srv.score_tables.current.generation == 1
    dead = GrpcEmbeddingCache("127.0.0.1:1", 0.5)
    pub.client = dead
    assert pub.step() == "error"
    assert _sample(reg, "hrl_extender_score_table_heartbeats_total", outcome="error") == 1
    assert pub.step() == "error"  # the next round sends the table whole
    assert _sample(reg, "hrl_extender_score_table_publishes_total", outcome="error") == 1
    pub.client = client
    assert pub.step() == "published"
    dead.close()


class RequestsReadingHeuristic(TopologyHeuristic):
    """The heuristic's scores with the table's rows per (service, requests), as the learned policy's."""

    base_reads_requests = True


def test_the_thread_publishes_on_its_own_and_stops(cache):
    _srv, client = cache
    clock = Clock()
    store = _store(clock)
    watch = client.watch_score_table(0, "test")
    policy = RequestsReadingHeuristic()
    pub = ScoreTablePublisher(store, policy, client, min_interval_s=0.0, heartbeat_s=0.05).start()
    try:
        assert _next(watch)[0] == "table"
        store.update(snapshot_from_objects(_objects(pending_cpu="300m"), taken_at_s=clock()))
        kind, table = _next(watch)
        while kind != "table":
            kind, table = _next(watch)
        assert ("b", 300, 64 << 20) in [r.key for r in table.rows]
    finally:
        pub.stop()
        watch.cancel()


def test_the_configuration_starts_it_only_when_asked_and_names_the_cache():
    base = {"apiVersion": "hrl-scheduler.io/v1alpha1", "kind": "ExtenderConfiguration"}
    store = SnapshotStore()
    assert start_score_table_publisher(load_extender_config(base), store, TopologyHeuristic()) is None
    cfg = load_extender_config({**base, "cache": {"address": "127.0.0.1:1"}, "scoreTable": {"publish": True}})
    assert cfg.score_table_address() == "127.0.0.1:1"
    pub = start_score_table_publisher(cfg, store, TopologyHeuristic(), CollectorRegistry())
    try:
        assert pub is not None and pub.step() == "idle"  # no snapshot yet
    finally:
        pub.stop()
    with pytest.raises(TypeError, match="cannot be served by the HRLScore plugin"):
        ScoreTablePublisher(store, object(), None)
