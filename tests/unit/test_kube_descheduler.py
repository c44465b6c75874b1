"""kubernetes-sigs/descheduler LowNodeUtilization, RemoveDuplicates and the DefaultEvictor's filters,
checked against hand-computed decisions."""

import pytest

from policy.baselines.kube_descheduler import (
    DefaultEvictor,
    LowNodeUtilization,
    RemoveDuplicates,
    sort_pods_priority_low_to_high,
)
from policy.state import ClusterSnapshot, NodeInfo, OwnerRef, PodInfo, Resources

GI = 2**30


def node(name, cpu_m=1000, **kw):
    return NodeInfo(name, Resources(cpu_m, 64 * GI), **kw)


def pod(name, node_name, req_m=250, lim_m=500, prio=0, owner="web-abc", mem=GI, **kw):
    return PodInfo(
        name,
        "default",
        "web",
        Resources(req_m, mem),
        Resources(lim_m, mem if lim_m else 0),
        node_name=node_name,
        priority=prio,
        owner=OwnerRef("ReplicaSet", owner) if owner else None,
        **kw,
    )


class Evictor:
    def __init__(self, refuse=()):
        self.calls, self.refuse = [], set(refuse)

    def __call__(self, p, reason):
        self.calls.append((p.name, reason))
        return p.name not in self.refuse


def test_the_default_evictor_protects_bare_daemonset_critical_local_storage_and_mirror_pods():
    ev = DefaultEvictor()
    assert ev.filter(pod("ok", "a"))
    assert not ev.filter(pod("bare", "a", owner=None))
    assert not ev.filter(PodInfo("ds", "default", "x", Resources(), node_name="a", owner=OwnerRef("DaemonSet", "d")))
    assert not ev.filter(pod("crit", "a", prio=2_000_000_000))
    assert not ev.filter(pod("local", "a", local_storage=True))
    assert not ev.filter(pod("term", "a", terminating=True))
    assert not ev.filter(pod("mirror", "a", annotations={"kubernetes.io/config.mirror": "x"}))


def test_pods_are_evicted_lowest_priority_first_then_best_effort_burstable_guaranteed():
    pods = [
        pod("g", "a", 250, 250, prio=0),
        pod("hi", "a", prio=100),
        pod("b", "a", 250, 500, prio=0),
        pod("be", "a", 0, 0, prio=0, mem=0),
    ]
    assert [p.name for p in sort_pods_priority_low_to_high(pods)] == ["be", "b", "g", "hi"]


def cluster():
    # a: 3 x 250m = 75 % cpu (over the 50 % target); b: 100m = 10 % (under 20 %); c: 300m = 30 % (neither)
    nodes = [node("a"), node("b"), node("c")]
    pods = [
        pod("p1", "a", 250, 500, prio=0),
        pod("p2", "a", 250, 250, prio=0),
        pod("p3", "a", 250, 500, prio=100),
        pod("q", "b", 100, 200, owner="db-x"),
        pod("r", "c", 300, 600, owner="db-y"),
    ]
    return ClusterSnapshot(nodes=tuple(nodes), pods=tuple(pods))


LNU = LowNodeUtilization(thresholds={"cpu": 20}, target_thresholds={"cpu": 50})


def test_low_node_utilization_classifies_nodes_by_requested_cpu():
    assert LNU.classify(cluster()) == (["b"], ["a"])


def test_low_node_utilization_evicts_from_the_overutilized_node_until_it_is_at_the_target():
    ev = Evictor()
    # p1 (priority 0, Burstable) goes first; a drops to 500m = 50 %, no longer above the target
    assert LNU.balance(cluster(), ev) == ["default/p1"]
    assert ev.calls == [("p1", "LowNodeUtilization")]


def test_a_refused_eviction_does_not_count_and_the_next_pod_is_tried():
    ev = Evictor(refuse={"p1"})
    assert LNU.balance(cluster(), ev) == ["default/p2"]


def test_nothing_happens_without_underutilized_nodes_or_when_all_are_underutilized():
    snap = cluster()
    busy = ClusterSnapshot(nodes=snap.nodes, pods=snap.pods + (pod("s", "b", 200, 0, owner="z"),))
    assert LNU.balance(busy, Evictor()) == []  # b at 30 %: nobody under 20 %
    idle = ClusterSnapshot(nodes=snap.nodes, pods=())
    assert LNU.balance(idle, Evictor()) == []


def test_low_node_utilization_validates_its_thresholds():
    with pytest.raises(ValueError, match="greater than targetThresholds"):
        LowNodeUtilization(thresholds={"cpu": 60}, target_thresholds={"cpu": 50})
    with pytest.raises(ValueError, match="different resources"):
        LowNodeUtilization(thresholds={"cpu": 20}, target_thresholds={"memory": 50})


def test_remove_duplicates_keeps_at_most_the_ceiling_average_per_node():
    nodes = (node("n1"), node("n2"), node("n3"))
    pods = (
        pod("w1", "n1"),
        pod("w2", "n1"),
        pod("w3", "n1"),  # web: 3 pods on n1
        pod("d1", "n1", owner="db-x"),
        pod("d2", "n1", owner="db-x"),
        pod("d3", "n2", owner="db-x"),
        pod("l1", "n2", owner="logs-z", local_storage=True),
        pod("l2", "n2", owner="logs-z", local_storage=True),
    )
    ev = Evictor()
    evicted = RemoveDuplicates().balance(ClusterSnapshot(nodes=nodes, pods=pods), ev)
    # web: 3 pods / 3 nodes -> at most 1 per node: w2, w3 go. db: 3 / 3 -> d2 goes. logs: local storage, kept.
    assert sorted(evicted) == ["default/d2", "default/w2", "default/w3"]


def test_remove_duplicates_needs_two_feasible_nodes():
    nodes = (node("n1"), node("n2", unschedulable=False))
    pods = (pod("w1", "n1", node_selector={"disk": "ssd"}), pod("w2", "n1", node_selector={"disk": "ssd"}))
    assert RemoveDuplicates().balance(ClusterSnapshot(nodes=nodes, pods=pods), Evictor()) == []
