"""extender.store.SnapshotStore: the extender's thread-safe view of snapshot, index, graph and intent."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import pytest

from extender.store import SnapshotStore, StoreView
from policy.intent import Intent
from policy.observe import ObjectError
from policy.state import ClusterSnapshot, NodeInfo, PodInfo, Resources, ServiceEdge, ServiceGraph

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "extender"


class Clock:
    def __init__(self, t: float = 100.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def snap(n_nodes: int = 2, graph: ServiceGraph = ServiceGraph()) -> ClusterSnapshot:
    nodes = tuple(NodeInfo(f"n{i}", Resources(4000, 2**34)) for i in range(n_nodes))
    pods = (PodInfo("a-1", "default", "a", Resources(100, 2**26), node_name="n0"),)
    return ClusterSnapshot(nodes=nodes, pods=pods, graph=graph)


G1 = ServiceGraph.build([], [ServiceEdge("a", "b")])
G2 = ServiceGraph.build([], [ServiceEdge("c", "d")])


def test_a_new_store_is_not_ready_and_its_view_is_empty():
    s = SnapshotStore()
    v = s.get()
    assert not s.ready and not v.ready
    assert v.snapshot is None and v.index is None and v.updated_at_s is None
    assert v.age_s(0.0) == math.inf and not v.is_stale(0.0, 10.0)


def test_update_builds_the_index_and_records_the_time():
    clock = Clock(100.0)
    s = SnapshotStore(clock=clock)
    v = s.update(snap(3))
    assert s.ready and v is s.get()
    assert v.index is not None and v.index.node_names == ("n0", "n1", "n2")
    assert v.index.snapshot is v.snapshot
    assert v.updated_at_s == 100.0 and v.generation == 1


def test_a_view_is_immutable_and_survives_later_updates():
    s = SnapshotStore()
    v1 = s.update(snap(2))
    s.update(snap(5))
    assert len(v1.snapshot.nodes) == 2 and len(s.get().snapshot.nodes) == 5
    with pytest.raises(AttributeError):
        v1.snapshot = None  # type: ignore[misc]


def test_without_set_graph_the_snapshots_own_graph_is_used():
    s = SnapshotStore()
    v = s.update(snap(graph=G1))
    assert v.graph == G1 and v.snapshot.graph == G1 and v.index.snapshot.graph == G1


def test_set_graph_overrides_the_graph_of_the_current_and_later_snapshots():
    s = SnapshotStore()
    s.update(snap(graph=G1))
    v = s.set_graph(G2)
    assert v.graph == G2 and v.snapshot.graph == G2 and v.index.snapshot.graph == G2
    v = s.update(snap(graph=G1))
    assert v.graph == G2 and v.index.snapshot.graph == G2
    v = s.set_graph(None)
    assert v.graph == G1 and v.index.snapshot.graph == G1


def test_set_graph_before_any_snapshot_applies_to_the_first_one():
    s = SnapshotStore()
    s.set_graph(G2)
    assert not s.ready
    assert s.update(snap()).graph == G2


def test_set_graph_keeps_the_index_arrays():
    s = SnapshotStore()
    v1 = s.update(snap())
    v2 = s.set_graph(G2)
    assert v2.index.req_cpu_m is v1.index.req_cpu_m


def test_set_intent_stores_a_validated_vector_and_its_version():
    s = SnapshotStore()
    v = s.set_intent(Intent([1.5, 0]), version=7)
    assert v.intent == (1.5, 0.0) and v.intent_version == "7" and v.plan_intent == Intent((1.5, 0.0))
    assert s.set_intent(None).intent is None


@pytest.mark.parametrize(
    "vector,msg",
    [
        ([1.0, math.nan], r"intent.values\[1\]: expected a finite weight >= 0, got nan"),
        ([math.inf], r"intent.values\[0\]: expected a finite weight >= 0, got inf"),
        ([-1.0], r"intent.values\[0\]: expected a finite weight >= 0, got -1.0"),
        (["x"], r"intent.values\[0\]: expected a number, got 'x'"),
    ],
)
def test_a_bad_intent_is_refused_and_nothing_changes(vector, msg):
    s = SnapshotStore()
    s.set_intent(Intent([1.0, 1.0]), "a")
    with pytest.raises(ValueError, match=msg):
        s.set_intent(Intent(vector), "b")
    assert s.get().intent == (1.0, 1.0) and s.get().intent_version == "a"


def test_staleness_follows_the_store_clock_and_touch_refreshes_it():
    clock = Clock(0.0)
    s = SnapshotStore(clock=clock)
    s.update(snap())
    clock.t = 50.0
    assert s.get().age_s(clock.t) == 50.0
    assert s.get().is_stale(clock.t, 30.0) and not s.get().is_stale(clock.t, 0.0)
    s.touch()
    assert not s.get().is_stale(clock.t, 30.0)


def test_touch_before_any_snapshot_does_nothing():
    s = SnapshotStore()
    assert s.touch(5.0).updated_at_s is None


def test_load_file_reads_a_kubectl_list():
    s = SnapshotStore(clock=Clock(42.0))
    v = s.load_file(FIX / "cluster-list.json")
    assert v.ready
    assert [n.name for n in v.snapshot.nodes] == ["boutique-worker", "boutique-worker2", "boutique-worker3"]
    assert len(v.snapshot.pods) == 13 and len(v.snapshot.pdbs) == 1
    assert v.snapshot.taken_at_s == 42.0
    assert v.index.req_cpu_m[2] == 3300  # checkout 100 + ad 200 + loadgenerator 300 + batch 2700


def test_a_bad_file_raises_a_one_line_error_and_changes_nothing(tmp_path):
    s = SnapshotStore()
    before = s.update(snap())
    bad = tmp_path / "bad.json"
    bad.write_text(
        '{"kind": "List", "items": [{"kind": "Node", "metadata": {"name": "n"}, '
        '"status": {"allocatable": {"cpu": "lots"}}}]}'
    )
    with pytest.raises(ObjectError) as ei:
        s.load_file(bad)
    assert "\n" not in str(ei.value) and "lots" in str(ei.value)
    assert s.get() is before
    with pytest.raises(ObjectError, match="cannot read"):
        s.load_file(tmp_path / "missing.json")


def test_update_refuses_something_that_is_not_a_snapshot():
    with pytest.raises(TypeError, match="ClusterSnapshot"):
        SnapshotStore().update({"nodes": []})  # type: ignore[arg-type]


def test_readers_always_see_a_consistent_view_while_a_writer_updates():
    s = SnapshotStore()
    s.update(snap(1))
    stop = threading.Event()
    bad: list[str] = []

    def reader():
        while not stop.is_set():
            v: StoreView = s.get()
            if v.index.snapshot is not v.snapshot or len(v.index.node_names) != len(v.snapshot.nodes):
                bad.append("inconsistent")

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for i in range(200):
        s.update(snap(1 + i % 7))
        if i % 50 == 0:
            s.set_graph(G1 if i % 100 == 0 else None)
    stop.set()
    for t in threads:
        t.join()
    assert bad == []
    assert s.get().generation == 1 + 200 + 4
