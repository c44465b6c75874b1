"""kube-scheduler's default scoring and scheduling cycle, checked against hand-computed decisions."""

import numpy as np
import pytest

from policy.baselines.kube_default import NodeResourcesBalancedAllocation, NodeResourcesFitLeastAllocated
from policy.index import ClusterIndex
from policy.sim.kube_scheduler import KubeSchedulerModel, num_feasible_nodes_to_find
from policy.state import ClusterSnapshot, NodeInfo, PodInfo, Resources, Taint

GI = 2**30


def node(name, cpu_m=2000, mem=4 * GI, **kw):
    return NodeInfo(name, Resources(cpu_m, mem), **kw)


def pod(name, cpu_m, mem, node_name=None, service="s"):
    return PodInfo(name, "ns", service, Resources(cpu_m, mem), node_name=node_name)


def index(pods, nodes=None):
    return ClusterIndex.build(ClusterSnapshot(nodes=tuple(nodes or [node("n1"), node("n2")]), pods=tuple(pods)))


# n1 already runs 1000m / 0 memory; n2 is empty; the new pod asks 500m / 2Gi.
EXISTING = [pod("old", 1000, 0, "n1")]
NEW = pod("new", 500, 2 * GI)


def test_least_allocated_scores_by_free_fraction_averaged_over_cpu_and_memory():
    s = NodeResourcesFitLeastAllocated().score(NEW, ["n1", "n2"], index(EXISTING))
    # n1: cpu (2000-1500)*100/2000 = 25, memory: the old pod counts the 200 MB default (NonZeroRequested):
    #     (4Gi - (2Gi + 200Mi))*100 // 4Gi = 45 -> (25 + 45) // 2 = 35
    # n2: cpu 75, memory 50 -> 62
    assert s.tolist() == [35, 62]


def test_balanced_allocation_scores_the_change_in_balance_the_pod_brings():
    s = NodeResourcesBalancedAllocation().score(NEW, ["n1", "n2"], index(EXISTING))
    # n1: with pod fractions (0.75, 0.5) -> 87; without (0.5, 0) -> 75 -> 50 + (50 + 12) // 2 = 81
    # n2: with (0.25, 0.5) -> 87; without (0, 0) -> 100 -> 50 + (50 - 13) // 2 = 68
    assert s.tolist() == [81, 68]


def test_a_best_effort_pod_scores_zero_in_balanced_allocation():
    assert NodeResourcesBalancedAllocation().score(pod("be", 0, 0), ["n1", "n2"], index(EXISTING)).tolist() == [0, 0]


def test_the_default_profile_picks_the_less_loaded_node():
    sched = KubeSchedulerModel()
    res = sched.schedule(NEW, {}, index(EXISTING), {}, np.random.default_rng(0))
    assert res.node == "n2"
    # TaintToleration (weight 3) gives 100 to every untainted node; the pod has no owner, affinity or
    # spread constraints, so PodTopologySpread, InterPodAffinity and NodeAffinity skip (0).
    assert res.scores == {"n1": 35 + 81 + 300, "n2": 62 + 68 + 300}


class FixedExtender:
    """An extender that prefers n1 with the maximum score (10)."""

    weight = 1
    ignorable = True
    has_filter = False
    has_prioritize = True

    def filter(self, pod_obj, nodes):  # pragma: no cover - has_filter is False
        raise AssertionError

    def prioritize(self, pod_obj, nodes):
        return {n["metadata"]["name"]: (10 if n["metadata"]["name"] == "n1" else 0) for n in nodes}


def test_an_extender_score_is_multiplied_by_weight_and_ten_and_can_flip_the_decision():
    sched = KubeSchedulerModel(extenders=[FixedExtender()])
    objs = {n: {"metadata": {"name": n}} for n in ("n1", "n2")}
    res = sched.schedule(NEW, {}, index(EXISTING), objs, np.random.default_rng(0))
    assert res.node == "n1"
    assert res.scores["n1"] == 35 + 81 + 300 + 100


def test_filters_drop_nodes_that_do_not_fit_are_cordoned_or_tainted():
    nodes = [
        node("small", cpu_m=400),
        node("cordoned", unschedulable=True),
        node("tainted", taints=(Taint("dedicated", "x", "NoSchedule"),)),
        node("ok"),
    ]
    feasible, reasons = KubeSchedulerModel().filter_in_tree(NEW, index([], nodes))
    assert feasible == ["ok"]
    assert reasons == {
        "small": "Insufficient cpu",
        "cordoned": "node(s) were unschedulable",
        "tainted": "node(s) had untolerated taint",
    }


def test_ties_are_broken_at_random_but_reproducibly_per_seed():
    nodes = [node(f"n{i}") for i in range(6)]
    picks = {
        KubeSchedulerModel().schedule(NEW, {}, index([], nodes), {}, np.random.default_rng(s)).node for s in range(40)
    }
    assert len(picks) > 1
    a = KubeSchedulerModel().schedule(NEW, {}, index([], nodes), {}, np.random.default_rng(5)).node
    b = KubeSchedulerModel().schedule(NEW, {}, index([], nodes), {}, np.random.default_rng(5)).node
    assert a == b


@pytest.mark.parametrize("n,expected", [(50, 50), (100, 100), (1000, 420), (5000, 500), (10000, 500)])
def test_the_number_of_feasible_nodes_to_find_follows_the_adaptive_percentage(n, expected):
    assert num_feasible_nodes_to_find(n) == expected
