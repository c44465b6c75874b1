"""policy.lowlevel: the placement policy's hard filter and the topology heuristic's scores."""

import numpy as np

from policy.index import ClusterIndex
from policy.lowlevel import TopologyHeuristic, resource_fit_failures
from policy.state import ClusterSnapshot, NodeInfo, PodInfo, Resources, ServiceEdge, ServiceGraph, Taint, Toleration

GI = 2**30


def snap(nodes, pods, edges=()):
    return ClusterIndex.build(
        ClusterSnapshot(tuple(nodes), tuple(pods), graph=ServiceGraph.build([], [ServiceEdge(*e) for e in edges]))
    )


def test_the_hard_filter_refuses_taints_selectors_cordons_and_resources_but_not_unknown_nodes():
    nodes = [
        NodeInfo("tainted", Resources(4000, 8 * GI), taints=(Taint("gpu", "yes", "NoSchedule"),)),
        NodeInfo("labelled", Resources(4000, 8 * GI), labels={"disk": "ssd"}),
        NodeInfo("cordoned", Resources(4000, 8 * GI), unschedulable=True),
        NodeInfo("small", Resources(100, 8 * GI), labels={"disk": "ssd"}),
        NodeInfo("hdd", Resources(4000, 8 * GI), labels={"disk": "hdd"}),
    ]
    pod = PodInfo("p", "ns", "a", Resources(500, GI), node_selector={"disk": "ssd"})
    failed = resource_fit_failures(pod, ["tainted", "labelled", "cordoned", "small", "hdd", "unknown"], snap(nodes, []))
    assert set(failed) == {"tainted", "cordoned", "small", "hdd"}
    assert "taint" in failed["tainted"] and "Insufficient cpu" in failed["small"] and "nodeSelector" in failed["hdd"]
    tolerant = PodInfo("p", "ns", "a", Resources(500, GI), tolerations=(Toleration("gpu", "Exists"),))
    assert "tainted" not in resource_fit_failures(tolerant, ["tainted"], snap(nodes, []))


def test_the_heuristic_prefers_the_node_of_the_busiest_neighbour_and_is_neutral_without_neighbours():
    nodes = [NodeInfo(f"n{i}", Resources(4000, 8 * GI)) for i in range(3)]
    pods = [
        PodInfo("b-1", "ns", "b", Resources(100, GI), node_name="n1"),
        PodInfo("c-1", "ns", "c", Resources(100, GI), node_name="n2"),
    ]
    idx = snap(nodes, pods, [("a", "b", 10.0), ("a", "c", 1.0)])
    s = TopologyHeuristic().score(PodInfo("a-1", "ns", "a", Resources(100, GI)), ["n0", "n1", "n2"], idx)
    assert int(np.argmax(s)) == 1 and s[2] > s[0] == 0.0
    lonely = TopologyHeuristic().score(PodInfo("z-1", "ns", "z", Resources(100, GI)), ["n0", "n1", "n2"], idx)
    assert np.all(lonely == lonely[0])


def test_a_hot_node_loses_its_locality_advantage():
    nodes = [NodeInfo("hot", Resources(1000, 8 * GI)), NodeInfo("cool", Resources(4000, 8 * GI))]
    pods = [
        PodInfo("b-1", "ns", "b", Resources(900, GI), node_name="hot"),
        PodInfo("b-2", "ns", "b", Resources(100, GI), node_name="cool"),
    ]
    idx = snap(nodes, pods, [("a", "b", 1.0)])
    s = TopologyHeuristic().score(PodInfo("a-1", "ns", "a", Resources(50, GI)), ["hot", "cool"], idx)
    assert s[1] > s[0]
