"""The extender's watch-fed snapshot source (extender/kube.py) against a small fake of the two CoreV1Api list
calls it uses: pagination, resourceVersion bookkeeping, ADDED/MODIFIED/DELETED/BOOKMARK, 410 Gone → list
again, a bad object skipped, the graph merged with pod annotations, touch while idle, clean stop.
(The real API server is exercised by tests/integration/test_controlplane_*.py.)"""

from __future__ import annotations

import json
import threading
import time

import pytest
from waiting import wait_until

from extender.kube import POD_FIELD_SELECTOR, KubeSnapshotSource, _Gone, graph_with_annotations, updated_index
from extender.store import SnapshotStore
from policy.index import ClusterIndex
from policy.lowlevel import NodeScoreTable, TopologyHeuristic
from policy.observe import parse_pod
from policy.state import ANNOTATION_DEPENDS_ON, ClusterSnapshot, PodInfo, Resources, ServiceEdge, ServiceGraph


def node(name, rv="1"):
    return {
        "metadata": {"name": name, "resourceVersion": rv},
        "status": {
            "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(name, node_name=None, rv="1", app="web", depends=None, cpu="100m"):
    ann = {"hrl-scheduler.io/depends-on": depends} if depends else {}
    spec = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
    if node_name:
        spec["nodeName"] = node_name
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "resourceVersion": rv,
            "labels": {"app": app},
            "annotations": ann,
        },
        "spec": spec,
        "status": {"phase": "Running"},
    }


class ListResponse:
    def __init__(self, items, rv, cont=None):
        self.data = json.dumps({"items": items, "metadata": {"resourceVersion": rv, "continue": cont}}).encode()


class WatchResponse:
    """A watch stream: one JSON event per line; then it ends (the server's timeout), or blocks until shut
    down when ``hold`` is set."""

    def __init__(self, events, hold=False):
        self.events = events
        self.hold = hold
        self.closed = threading.Event()

    def stream(self, amt=None, decode_content=False):
        for e in self.events:
            yield (json.dumps(e) + "\n").encode()
        if self.hold:
            self.closed.wait(10)

    def release_conn(self):
        pass

    def shutdown(self):
        self.closed.set()


class FakeCore:
    """The slice of CoreV1Api the source uses. ``script[kind]``: responses handed out in order, the last one
    repeated; every call is recorded with its keyword arguments."""

    def __init__(self, script):
        self.script = script
        self.calls = {"Node": [], "Pod": []}

    def _next(self, kind, kw):
        self.calls[kind].append(kw)
        seq = self.script[kind]
        item = seq.pop(0) if len(seq) > 1 else seq[0]
        if isinstance(item, Exception):
            raise item
        return item

    def list_node(self, **kw):
        return self._next("Node", kw)

    def list_pod_for_all_namespaces(self, **kw):
        return self._next("Pod", kw)


def source(core, **kw):
    return KubeSnapshotSource(SnapshotStore(), core=core, debounce_s=0.0, **kw)


def test_a_paginated_list_is_followed_by_a_watch_from_the_list_resource_version():
    core = FakeCore(
        {
            "Node": [ListResponse([node("a")], "5", cont="next"), ListResponse([node("b")], "7"), WatchResponse([])],
            "Pod": [ListResponse([], "7")],
        }
    )
    src = source(core)
    src.nodes.list()
    assert sorted(src.nodes.items) == ["a", "b"] and src.nodes.resource_version == "7"
    assert core.calls["Node"][1]["_continue"] == "next"
    src.nodes.watch(time.monotonic() + 0.2)
    w = core.calls["Node"][2]
    assert (w["watch"], w["resource_version"], w["allow_watch_bookmarks"]) == (True, "7", True)


def test_pods_are_listed_and_watched_without_finished_ones():
    core = FakeCore({"Node": [ListResponse([], "1")], "Pod": [ListResponse([], "3"), WatchResponse([])]})
    src = source(core)
    src.pods.list()
    src.pods.watch(time.monotonic() + 0.2)
    assert all(c["field_selector"] == POD_FIELD_SELECTOR for c in core.calls["Pod"])


def test_watch_events_update_the_objects_and_the_resource_version():
    events = [
        {"type": "ADDED", "object": pod("p1", "a", rv="8")},
        {"type": "MODIFIED", "object": pod("p1", "b", rv="9")},
        {"type": "ADDED", "object": pod("p2", "a", rv="10")},
        {"type": "DELETED", "object": pod("p2", "a", rv="11")},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}},
    ]
    core = FakeCore(
        {"Node": [ListResponse([], "1")], "Pod": [ListResponse([], "7"), WatchResponse(events), WatchResponse([])]}
    )
    src = source(core)
    src.pods.list()
    src.pods.watch(time.monotonic() + 0.2)
    assert list(src.pods.items) == ["ns/p1"] and src.pods.items["ns/p1"].node_name == "b"
    assert src.pods.resource_version == "15" and src.pods.events == 4
    # The next watch continues from the bookmark.
    assert core.calls["Pod"][-1]["resource_version"] == "15"


def test_410_gone_in_a_watch_raises_so_the_reflector_lists_again():
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old resource version"}}
    core = FakeCore(
        {"Node": [ListResponse([], "1")], "Pod": [ListResponse([pod("p1", "a")], "7"), WatchResponse([gone])]}
    )
    src = source(core)
    src.pods.list()
    with pytest.raises(_Gone):
        src.pods.watch(time.monotonic() + 1)


def test_the_reflector_loop_lists_again_after_410_and_keeps_watching():
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old resource version"}}
    core = FakeCore(
        {
            "Node": [ListResponse([node("a")], "1"), WatchResponse([], hold=True)],
            "Pod": [
                ListResponse([pod("old", "a")], "7"),
                WatchResponse([gone]),
                ListResponse([pod("new", "a")], "20"),
                WatchResponse([], hold=True),
            ],
        }
    )
    src = source(core)
    src.start()
    try:
        assert src.wait_synced(5)
        wait_until(lambda: src.pods.lists >= 2, 5, what="the pod reflector to list again after the 410")
        assert src.pods.lists == 2 and list(src.pods.items) == ["ns/new"]
        lists = [c for c in core.calls["Pod"] if not c.get("watch")]
        watches = [c["resource_version"] for c in core.calls["Pod"] if c.get("watch")]
        assert len(lists) == 2 and watches[:2] == ["7", "20"]
    finally:
        src.stop()
    assert src._threads == []  # every thread ended (the held watches were interrupted)


def test_an_object_the_parser_rejects_is_left_out_and_the_rest_is_kept():
    bad = pod("bad", "a", cpu="lots")
    core = FakeCore({"Node": [ListResponse([], "1")], "Pod": [ListResponse([pod("good", "a"), bad], "7")]})
    src = source(core)
    src.pods.list()
    assert list(src.pods.items) == ["ns/good"]


def test_the_snapshot_graph_is_the_static_graph_plus_pod_annotations():
    static = ServiceGraph.build(["frontend", "cart"], [ServiceEdge("frontend", "cart", 10.0)])
    core = FakeCore(
        {
            "Node": [ListResponse([node("a")], "1")],
            "Pod": [ListResponse([pod("p", "a", app="checkout", depends="cart,payment")], "7")],
        }
    )
    src = source(core, graph=static)
    src.nodes.list()
    src.pods.list()
    snap = src.build_snapshot()
    assert snap.graph.services == ("cart", "checkout", "frontend", "payment")
    assert {(e.caller, e.callee) for e in snap.graph.edges} == {
        ("frontend", "cart"),
        ("checkout", "cart"),
        ("checkout", "payment"),
    }
    assert graph_with_annotations(None, []).services == ()


def test_annotation_edges_are_merged_as_when_every_pod_adds_its_own():
    static = ServiceGraph.build(["frontend", "cart"], [ServiceEdge("frontend", "cart", 10.0, latency_p95_ms=4.0)])
    objs = [pod(f"p{i}", "a", app=f"svc-{i % 3}", depends=f"svc-{(i + 1) % 3}, cart") for i in range(30)]
    objs += [pod("q", "a", app="cart", depends="frontend"), pod("r", None, app="frontend")]
    pods = [parse_pod({**o, "kind": "Pod"}) for o in objs]

    def every_pod_adds_its_own(graph, pods):  # the definition: one edge per pod and named dependency
        edges = list(graph.edges) if graph is not None else []
        for p in pods:
            for dep in p.annotations.get(ANNOTATION_DEPENDS_ON, "").split(","):
                if dep.strip():
                    edges.append(ServiceEdge(p.service, dep.strip()))
        services = (set(graph.services) if graph is not None else set()) | {p.service for p in pods}
        source = (graph.source if graph is not None and graph.source else "") + "; annotations"
        return ServiceGraph.build(services, edges, source=source.lstrip("; "))

    for g in (None, static):
        assert graph_with_annotations(g, pods) == every_pod_adds_its_own(g, pods)
    assert graph_with_annotations(static, pods).edge("frontend", "cart").latency_p95_ms == 4.0


def test_a_status_only_update_of_a_pod_or_a_node_does_not_rebuild_the_snapshot_but_a_binding_does():
    running = pod("p", None)
    status_only = {**running, "metadata": {**running["metadata"], "resourceVersion": "8"}, "status": {"phase": "X"}}
    heartbeat = node("a", rv="9")
    heartbeat["status"]["conditions"].append({"type": "MemoryPressure", "status": "False"})
    core = FakeCore(
        {
            "Node": [
                ListResponse([node("a")], "1"),
                WatchResponse([{"type": "MODIFIED", "object": heartbeat}]),
                WatchResponse([]),
            ],
            "Pod": [
                ListResponse([running], "7"),
                WatchResponse([{"type": "MODIFIED", "object": status_only}]),
                WatchResponse([]),
            ],
        }
    )
    src = source(core)
    src.nodes.list()
    src.pods.list()
    src._dirty.clear()
    src.nodes.watch(time.monotonic() + 0.2)
    src.pods.watch(time.monotonic() + 0.2)
    assert not src._dirty.is_set() and src.nodes.unchanged == 1 and src.pods.unchanged == 1
    assert src.pods.items["ns/p"].phase == "X"  # stored all the same
    core.script["Pod"] = [WatchResponse([{"type": "MODIFIED", "object": pod("p", "a", rv="10")}]), WatchResponse([])]
    src.pods.watch(time.monotonic() + 0.2)
    assert src._dirty.is_set() and src.pods.items["ns/p"].node_name == "a" and src.pods.unchanged == 1


def test_the_store_gets_a_snapshot_once_both_lists_are_done_and_is_touched_while_idle():
    core = FakeCore(
        {
            "Node": [ListResponse([node("a")], "1"), WatchResponse([], hold=True)],
            "Pod": [ListResponse([pod("p", "a")], "7"), WatchResponse([], hold=True)],
        }
    )
    src = KubeSnapshotSource(SnapshotStore(), core=core, debounce_s=0.0, touch_interval_s=0.05)
    with src:
        assert src.wait_synced(5)
        view = src.store.get()
        assert [n.name for n in view.snapshot.nodes] == ["a"] and [p.name for p in view.snapshot.pods] == ["p"]
        first = view.updated_at_s
        wait_until(lambda: src.store.get().updated_at_s != first, 5, what="the idle store to be touched")
        assert src.store.get().updated_at_s > first and src.store.get().generation == view.generation
    assert src._threads == []


def test_an_unreachable_api_server_leaves_the_store_untouched_so_it_goes_stale():
    core = FakeCore({"Node": [ConnectionRefusedError("down")], "Pod": [ConnectionRefusedError("down")]})
    src = KubeSnapshotSource(SnapshotStore(), core=core, debounce_s=0.0, touch_interval_s=0.05)
    with src:
        # a second failure of each comes after a back-off (>= 0.4 s): the store had many touch intervals to go wrong
        wait_until(
            lambda: src.nodes.errors >= 2 and src.pods.errors >= 2,
            5,
            what="both reflectors to fail, back off and fail again against the unreachable API server",
        )
        assert not src.synced and not src.store.ready
        assert src.nodes.errors >= 1 and src.pods.errors >= 1


def test_bad_parameters_are_refused():
    core = FakeCore({"Node": [ListResponse([], "1")], "Pod": [ListResponse([], "1")]})
    with pytest.raises(ValueError, match="resync_s"):
        KubeSnapshotSource(SnapshotStore(), core=core, resync_s=0)
    with pytest.raises(ValueError, match="api_client or core"):
        KubeSnapshotSource(SnapshotStore())


def _index_fields(ix):
    """Every field of a ClusterIndex but its snapshot, arrays as raw bytes (bit-identical or not equal)."""
    arrays = ("alloc_cpu_m", "alloc_mem_bytes", "req_cpu_m", "req_mem_bytes", "usage_cpu_m", "pod_count")
    arrays += ("unmeasured_estimated_cpu_m", "measured_pods")
    out = {k: (getattr(ix, k).dtype, getattr(ix, k).tobytes()) for k in arrays}
    out["service_nodes"] = {s: a.tobytes() for s, a in ix.service_nodes.items()}
    out.update(node_names=ix.node_names, node_pos=ix.node_pos, service_total=ix.service_total)
    return out


def test_the_index_kept_up_to_date_by_watch_events_equals_a_fresh_build_and_so_do_the_score_vectors():
    nodes = [node(f"n{i}") for i in range(6)]
    pods = [
        pod(f"p{i}", f"n{i % 6}" if i % 3 else None, app=f"svc-{i % 4}", depends=f"svc-{(i + 1) % 4}")
        for i in range(120)
    ]
    steps = [
        # scheduler bindings, then kwok's status updates of the same pods
        [
            {
                "type": "MODIFIED",
                "object": pod(
                    f"p{i}", f"n{(i * 7) % 6}", rv=str(100 + i), app=f"svc-{i % 4}", depends=f"svc-{(i + 1) % 4}"
                ),
            }
            for i in range(0, 40, 3)
        ],
        [
            {
                "type": "MODIFIED",
                "object": {
                    **pod(
                        f"p{i}", f"n{(i * 7) % 6}", rv=str(200 + i), app=f"svc-{i % 4}", depends=f"svc-{(i + 1) % 4}"
                    ),
                    "status": {"phase": "Running"},
                },
            }
            for i in range(0, 12, 3)
        ],
        # deletions (the last pods of svc-3 among them), a terminating pod, a new service, a changed request
        [{"type": "DELETED", "object": pod(f"p{i}", None, rv=str(300 + i), app="svc-3")} for i in range(3, 40, 4)]
        + [
            {
                "type": "MODIFIED",
                "object": {
                    **pod("p1", "n1", rv="310", app="svc-1", depends="svc-2"),
                    "metadata": {
                        **pod("p1", "n1", rv="310", app="svc-1", depends="svc-2")["metadata"],
                        "deletionTimestamp": "2026-12-01T00:00:00Z",
                    },
                },
            }
        ]
        + [{"type": "ADDED", "object": pod("new", "n5", rv="311", app="svc-new", cpu="250m")}]
        + [{"type": "MODIFIED", "object": pod("p2", "n2", rv="312", app="svc-2", depends="svc-3", cpu="1500m")}],
        # the rest of svc-3 leaves: its row goes, as in a fresh build
        [{"type": "DELETED", "object": pod(f"p{i}", None, rv=str(400 + i))} for i in range(120) if i % 4 == 3],
    ]
    core = FakeCore({"Node": [ListResponse(nodes, "1")], "Pod": [ListResponse(pods, "7"), WatchResponse([])]})
    src = source(core)
    src.nodes.list()
    src.pods.list()
    table_inc, table_fresh = NodeScoreTable(TopologyHeuristic()), NodeScoreTable(TopologyHeuristic())
    snap, index = src._build()
    for events in steps:
        core.script["Pod"] = [WatchResponse(events), WatchResponse([])]
        src.pods.watch(time.monotonic() + 0.2)
        snap, index = src._build()
        fresh = ClusterIndex.build(snap)
        assert index.snapshot is snap and _index_fields(index) == _index_fields(fresh)
        keys = [(s, 100, 0) for s in snap.graph.services] + [("svc-new", 250, 0)]
        table_inc.warm(index, None, keys)
        table_fresh.warm(fresh, None, keys)
        for k in keys:
            probe = PodInfo(name="x", namespace="ns", service=k[0], requests=Resources(k[1], k[2]))
            a, b = table_inc.lookup(probe, index, None), table_fresh.lookup(probe, fresh, None)
            assert (a is None) == (b is None) and (a is None or a.tobytes() == b.tobytes()), k
    assert src.incremental_builds == len(steps)
    assert "svc-3" not in index.service_nodes and index.service_total.get("svc-new") == 1


def test_a_changed_node_or_a_large_change_rebuilds_the_index_from_scratch():
    core = FakeCore(
        {
            "Node": [ListResponse([node("a"), node("b")], "1"), WatchResponse([])],
            "Pod": [ListResponse([pod(f"p{i}", "a") for i in range(8)], "7"), WatchResponse([])],
        }
    )
    src = source(core)
    src.nodes.list()
    src.pods.list()
    src._build()
    tainted = node("b", rv="2")
    tainted["spec"] = {"taints": [{"key": "k", "effect": "NoSchedule"}]}
    core.script["Node"] = [WatchResponse([{"type": "MODIFIED", "object": tainted}]), WatchResponse([])]
    src.nodes.watch(time.monotonic() + 0.2)
    snap, index = src._build()
    assert src.incremental_builds == 0 and _index_fields(index) == _index_fields(ClusterIndex.build(snap))
    core.script["Pod"] = [
        WatchResponse([{"type": "MODIFIED", "object": pod(f"p{i}", "b", rv="9")} for i in range(3)]),
        WatchResponse([]),
    ]
    src.pods.watch(time.monotonic() + 0.2)
    snap, index = src._build()  # 3 of 8 pods changed: more than a quarter
    assert src.incremental_builds == 0 and index.req_cpu_m.tolist() == [500.0, 300.0]
    with pytest.raises(ValueError, match="nodes differ"):
        updated_index(index, ClusterSnapshot(nodes=snap.nodes[:1], pods=snap.pods), [])


def test_measured_use_reaches_the_snapshot_through_the_builder_and_a_pod_binding_still_updates_the_index():
    from policy.live import UsageInput, UsageReading

    class Src:
        name = "fake://usage"

        def __init__(self):
            self.cpu = {"ns/p0": 250.4, "ns/p1": 50.0}

        def read(self):
            return UsageReading(dict(self.cpu), {}, time.time(), 60.0)

        def close(self):
            pass

    src_use = Src()
    usage = UsageInput(src_use, max_age_s=60)
    core = FakeCore(
        {
            "Node": [ListResponse([node("a"), node("b")], "1"), WatchResponse([])],
            "Pod": [ListResponse([pod(f"p{i}", "a") for i in range(8)], "7"), WatchResponse([])],
        }
    )
    src = source(core, usage=usage)
    src.nodes.list()
    src.pods.list()
    usage.refresh()
    snap, index = src._build()
    use = {p.name: p.usage for p in snap.pods}
    assert use["p0"] == Resources(250, 0) and use["p1"] == Resources(50, 0) and use["p2"] is None
    assert [n.usage for n in snap.nodes] == [Resources(300, 0), Resources(0, 0)]
    # the six unmeasured pods (100m requested, no limit) count 85 % of it, as Koordinator's estimator does
    assert index.unmeasured_cpu_m.tolist() == [510.0, 0.0]
    assert _index_fields(index) == _index_fields(ClusterIndex.build(snap))
    # the same reading: a pod bound elsewhere changes one pod, the index is updated from it (incremental)
    core.script["Pod"] = [WatchResponse([{"type": "MODIFIED", "object": pod("p7", "b", rv="9")}]), WatchResponse([])]
    src.pods.watch(time.monotonic() + 0.2)
    snap2, index2 = src._build()
    assert src.incremental_builds == 1 and _index_fields(index2) == _index_fields(ClusterIndex.build(snap2))
    assert snap2.pods[0] is snap.pods[0]  # an unchanged pod with an unchanged use is the same object
    # a new reading changes every node's use: a full build, still exact
    src_use.cpu = {"ns/p0": 10.0}
    usage.refresh()
    snap3, index3 = src._build()
    assert [n.usage for n in snap3.nodes] == [Resources(10, 0), Resources(0, 0)]
    assert _index_fields(index3) == _index_fields(ClusterIndex.build(snap3))
