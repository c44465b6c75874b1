"""Planning that scales (issue 15) and kube-scheduler's predicted placement (issue 13, item 1): the incremental
planning view equals a rebuild, the planners give the same plans as before on the same inputs, and the
scheduler model applies topology spread, inter-pod anti-affinity and the scores that bring a pod back."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from policy.bench.synthetic_cluster import SyntheticCluster, synthetic_objects
from policy.highlevel import HierarchicalPolicy, PlanView, RebalanceHeuristic, SchedulerModel, greedy_moves
from policy.highlevel.rebalance import _apply_move
from policy.index import ClusterIndex
from policy.lowlevel import TopologyHeuristic
from policy.observe import snapshot_from_objects
from policy.state import (
    LABEL_HOSTNAME,
    LABEL_ZONE,
    NO_TERMS,
    AffinityTerm,
    LabelSelector,
    NodeInfo,
    OwnerRef,
    PodInfo,
    PodTerms,
    Resources,
    SpreadConstraint,
    frozen_map,
)

GI = 1024**3


def synthetic(nodes: int = 12, seed: int = 0):
    from descheduler.snapshot import graph_from_annotations

    snap = snapshot_from_objects(synthetic_objects(SyntheticCluster(nodes=nodes, seed=seed)))
    return snap.with_graph(graph_from_annotations(snap))


def _same_index(a: ClusterIndex, b: ClusterIndex) -> None:
    assert a.node_names == b.node_names
    for f in ("alloc_cpu_m", "alloc_mem_bytes", "req_cpu_m", "req_mem_bytes", "usage_cpu_m", "pod_count"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)
    assert a.service_total == b.service_total
    assert set(a.service_nodes) == set(b.service_nodes)
    for s in a.service_nodes:
        np.testing.assert_array_equal(a.service_nodes[s], b.service_nodes[s], err_msg=s)


@pytest.mark.parametrize("usage", [False, True])
def test_the_incremental_view_equals_a_rebuild_after_every_move(usage):
    snap = synthetic()
    if usage:
        snap = replace(
            snap,
            nodes=tuple(replace(n, usage=Resources(1000 + 10 * i, GI)) for i, n in enumerate(snap.nodes)),
            pods=tuple(replace(p, usage=Resources(p.requests.cpu_m // 2, 0)) for p in snap.pods),
        )
    view = PlanView.of(ClusterIndex.build(snap))
    ref = snap
    rng = np.random.default_rng(1)
    for k in range(8):
        pod = snap.pods[int(rng.integers(0, len(snap.pods)))]
        pod = view.pods[pod.key]
        to = None if k == 5 else snap.nodes[int(rng.integers(0, len(snap.nodes)))].name
        ref = _apply_move(ref, ref.pods[[p.key for p in ref.pods].index(pod.key)], to)
        view = view.apply_move(pod.key, to)
        want = PlanView.of(ClusterIndex.build(ref))
        _same_index(view.index, want.index)
        np.testing.assert_array_equal(view.util, want.util)
        assert view.index.snapshot.pods == ref.pods and view.index.snapshot.nodes == ref.nodes


def test_both_planners_plan_on_a_synthetic_cluster_and_the_view_stays_exact():
    snap = synthetic(nodes=20)
    index = ClusterIndex.build(snap)
    for planner in (RebalanceHeuristic(max_moves=12), HierarchicalPolicy(max_moves=12)):
        plan = planner.plan(snap, index, TopologyHeuristic())
        assert 0 < len(plan.moves) <= 12
        assert len({m.pod for m in plan.moves}) == len(plan.moves)


class Gate:
    """A MoveGate that rejects the moves named and stops after ``stop_after`` accepted moves."""

    def __init__(self, reject=(), stop_after=None):
        self.reject, self.stop_after = set(reject), stop_after
        self.admitted: list[str] = []
        self.asked: list[str] = []

    @property
    def exhausted(self):
        return self.stop_after is not None and len(self.admitted) >= self.stop_after

    def may_move(self, pod):
        return True

    def admit(self, move):
        self.asked.append(move.pod)
        if move.pod in self.reject:
            return "reject"
        self.admitted.append(move.pod)
        return "accept"


def test_a_rejected_move_leaves_its_service_free_to_move_another_pod_and_stop_ends_planning():
    snap = synthetic(nodes=20)
    index = ClusterIndex.build(snap)
    placement = TopologyHeuristic()
    planner = RebalanceHeuristic(max_moves=50)
    free = planner.plan(snap, index, placement)
    first = free.moves[0]
    service = next(p.service for p in snap.pods if p.key == first.pod)
    gate = Gate(reject={first.pod})
    gated = planner.plan(snap, index, placement, gate=gate)
    assert first.pod not in {m.pod for m in gated.moves}
    others = {p.key for p in snap.pods if p.service == service} - {first.pod}
    assert others & {m.pod for m in gated.moves} or others & set(gate.asked)  # the service's slot was not spent
    stop = Gate(stop_after=3)
    assert len(planner.plan(snap, index, placement, gate=stop).moves) == 3 and len(stop.asked) == 3


def test_greedy_moves_without_a_gate_is_deterministic_and_sorted():
    snap = synthetic(nodes=16)
    index = ClusterIndex.build(snap)
    p = TopologyHeuristic()
    h = HierarchicalPolicy(max_moves=10)
    a = h.plan(snap, index, p).moves
    b = HierarchicalPolicy(max_moves=10).plan(snap, index, p).moves
    assert a == b and list(a) == sorted(a, key=lambda m: (-m.gain, m.pod))
    assert greedy_moves([], index, lambda k, v: None, 5, 1) == ()


# ---- the scheduler model ----------------------------------------------------------------------------------


def node(name: str, zone: str, cpu_m: int = 8000) -> NodeInfo:
    return NodeInfo(name, Resources(cpu_m, 32 * GI), labels=frozen_map({LABEL_HOSTNAME: name, LABEL_ZONE: zone}))


def pod(name: str, node_name: str, app: str, terms: PodTerms = NO_TERMS, sched="default-scheduler") -> PodInfo:
    return PodInfo(
        name=name,
        namespace="shop",
        service=app,
        requests=Resources(100, GI),
        node_name=node_name,
        phase="Running",
        owner=OwnerRef("ReplicaSet", f"{app}-rs"),
        labels=frozen_map({"app": app}),
        terms=terms,
        scheduler_name=sched,
        ready=True,
    )


SPREAD = PodTerms(
    spread_constraints=(SpreadConstraint(1, LABEL_ZONE, "DoNotSchedule", LabelSelector(frozen_map({"app": "api"}))),)
)


def test_the_model_refuses_a_move_that_breaks_a_do_not_schedule_spread():
    """Zones of unequal size: small (1 node), big (2 nodes); api spread 1-1; moving the big zone's pod next to
    its callee in the small zone would make the skew 2."""
    from policy.state import ClusterSnapshot

    nodes = (node("s1", "small"), node("b1", "big"), node("b2", "big"))
    pods = (pod("api-1", "s1", "api", SPREAD), pod("api-2", "b1", "api", SPREAD), pod("db-1", "s1", "db"))
    snap = ClusterSnapshot(nodes=nodes, pods=pods)
    index = ClusterIndex.build(snap)
    model = SchedulerModel(TopologyHeuristic())
    why = model.undone(pods[1], "s1", index)
    assert why is not None and "skew 2 > maxSkew 1" in why
    assert model.undone(pods[1], "b2", index) is None or "come back" in model.undone(pods[1], "b2", index)
    loose = replace(SPREAD.spread_constraints[0], max_skew=2)
    relaxed = tuple(replace(p, terms=PodTerms(spread_constraints=(loose,))) if p.service == "api" else p for p in pods)
    snap2 = ClusterSnapshot(nodes=nodes, pods=relaxed)
    assert "topology spread" not in (model.undone(relaxed[1], "s1", ClusterIndex.build(snap2)) or "")


def test_the_model_applies_existing_pods_required_anti_affinity():
    from policy.state import ClusterSnapshot

    anti = PodTerms(required_anti_affinity=(AffinityTerm(LabelSelector(frozen_map({"app": "api"})), LABEL_HOSTNAME),))
    nodes = (node("n1", "a"), node("n2", "a"))
    pods = (pod("guard-1", "n2", "guard", anti), pod("api-1", "n1", "api"))
    index = ClusterIndex.build(ClusterSnapshot(nodes=nodes, pods=pods))
    why = SchedulerModel(None).undone(pods[1], "n2", index)
    assert why is not None and "anti-affinity" in why


def test_the_model_says_a_default_scheduler_pod_would_come_back_and_an_extender_pod_would_stay():
    from policy.state import ClusterSnapshot, ServiceEdge, ServiceGraph

    nodes = (node("n1", "a"), node("n2", "a"))
    g = ServiceGraph.build((), [ServiceEdge("api", "db", rps=10.0)])
    for sched, stays in (("default-scheduler", False), ("hrl-scheduler", True)):
        pods = (pod("api-1", "n1", "api", sched=sched), pod("db-1", "n2", "db"), pod("db-2", "n2", "db"))
        index = ClusterIndex.build(ClusterSnapshot(nodes=nodes, pods=pods, graph=g))
        why = SchedulerModel(TopologyHeuristic(), 2, frozenset({"hrl-scheduler"})).undone(pods[0], "n2", index)
        assert (why is None) is stays, why
        if not stays:
            assert "come back to n1" in why


# ---- reading a large snapshot file as a stream ---------------------------------------------------------------


def test_a_large_json_list_is_read_as_a_stream_into_the_same_snapshot(tmp_path, monkeypatch):
    import json

    import policy.observe as observe
    from policy.bench.synthetic_cluster import write_snapshot

    path = write_snapshot(SyntheticCluster(nodes=6), tmp_path / "c.json")
    strict = observe.snapshot_from_objects(observe.load_snapshot_objects(path))
    monkeypatch.setattr(observe, "STREAM_MIN_BYTES", 0)
    calls = []
    real = observe._stream_snapshot
    monkeypatch.setattr(observe, "_stream_snapshot", lambda *a: calls.append(1) or real(*a))
    assert observe.load_snapshot(path) == strict and calls == [1]
    # kind-less items of a typed list, a local PersistentVolume behind a claim: as the strict reader
    doc = json.loads(path.read_text())
    pod = next(o for o in doc["items"] if o["kind"] == "Pod")
    pod["spec"]["volumes"] = [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]
    ns = pod["metadata"]["namespace"]
    doc["items"] += [
        {"kind": "PersistentVolume", "metadata": {"name": "pv"}, "spec": {"local": {"path": "/x"}}},
        {"kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": ns}, "spec": {"volumeName": "pv"}},
    ]
    path.write_text(json.dumps(doc))
    got = observe.load_snapshot(path)
    assert got == observe.snapshot_from_objects(observe.load_snapshot_objects(path))
    assert next(p for p in got.pods if p.name == pod["metadata"]["name"]).local_storage
    # anything the stream does not handle falls back to the strict reader and its one-line errors
    path.write_text('{"kind": "List", "items": [1]}')
    with pytest.raises(observe.ObjectError, match=r"items\[0\]: expected a Kubernetes object"):
        observe.load_snapshot(path)
