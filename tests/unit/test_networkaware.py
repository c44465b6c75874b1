"""scheduler-plugins NetworkOverhead (NetworkAware): accumulated network cost, normalisation and the
maxNetworkCost filter, checked against hand-computed decisions."""

import numpy as np

from policy.baselines.networkaware import (
    MAX_COST,
    AppGroup,
    Dependency,
    InTreeFilterExtender,
    NetworkOverhead,
    NetworkTopology,
)
from policy.index import ClusterIndex
from policy.state import (
    LABEL_HOSTNAME,
    LABEL_ZONE,
    ClusterSnapshot,
    NodeInfo,
    PodInfo,
    Resources,
    ServiceEdge,
    ServiceGraph,
)


def node(name, zone=""):
    labels = {LABEL_HOSTNAME: name}
    if zone:
        labels[LABEL_ZONE] = zone
    return NodeInfo(name, Resources(4000, 2**33), labels=labels)


def pod(name, service, node_name=None):
    return PodInfo(name, "default", service, Resources(100, 2**28), node_name=node_name, labels={"app": service})


GROUP = AppGroup("shop", {"frontend": (Dependency("cart", 30), Dependency("catalog", 30)), "cart": (), "catalog": ()})
TOPO = NetworkTopology.uniform(["a", "b"], zone_cost=10)


def index(pods, nodes):
    return ClusterIndex.build(ClusterSnapshot(nodes=tuple(nodes), pods=tuple(pods)))


def test_the_app_group_built_from_a_call_graph_lists_each_services_callees_without_self_calls():
    g = ServiceGraph.build(
        [], [ServiceEdge("frontend", "cart"), ServiceEdge("frontend", "catalog"), ServiceEdge("cart", "cart")]
    )
    ag = AppGroup.from_graph(g, "shop", max_network_cost=15)
    assert ag.workloads["frontend"] == (Dependency("cart", 15), Dependency("catalog", 15))
    assert ag.workloads["cart"] == ()


def test_costs_add_zero_same_host_one_same_zone_and_the_zone_cost_across_zones():
    nodes = [node("n1", "a"), node("n2", "a"), node("n3", "b")]
    idx = index([pod("cart-1", "cart", "n1"), pod("cat-1", "catalog", "n3")], nodes)
    plugin = NetworkOverhead(GROUP, TOPO)
    # n1: cart 0 + catalog 10 = 10; n2: cart 1 + catalog 10 = 11; n3: cart 10 + catalog 0 = 10
    assert plugin.costs(pod("fe", "frontend"), ["n1", "n2", "n3"], idx).tolist() == [10, 11, 10]
    # normalised: 100 - int(100 * (c - 10) / (11 - 10)) -> 100, 0, 100
    assert plugin.score(pod("fe", "frontend"), ["n1", "n2", "n3"], idx).tolist() == [100, 0, 100]


def test_a_node_without_zone_or_region_pays_the_max_cost_for_unknown_links():
    nodes = [node("n1", "a"), node("n3", "b"), node("n4")]
    idx = index([pod("cart-1", "cart", "n1"), pod("cat-1", "catalog", "n3")], nodes)
    plugin = NetworkOverhead(GROUP, TOPO)
    # n4 has no zone: no cost is known from it -> 100 per dependency pod
    assert plugin.costs(pod("fe", "frontend"), ["n1", "n3", "n4"], idx).tolist() == [10, 10, 2 * MAX_COST]
    # normalised over [10, 200]: 100, 100, 100 - int(100 * 190 / 190) = 0
    assert plugin.score(pod("fe", "frontend"), ["n1", "n3", "n4"], idx).tolist() == [100, 100, 0]


def test_pods_without_dependencies_or_before_any_app_pod_is_scheduled_score_equally():
    nodes = [node("n1", "a"), node("n2", "b")]
    plugin = NetworkOverhead(GROUP, TOPO)
    assert plugin.score(pod("c", "cart"), ["n1", "n2"], index([pod("x", "catalog", "n1")], nodes)).tolist() == [0, 0]
    assert plugin.score(pod("fe", "frontend"), ["n1", "n2"], index([], nodes)).tolist() == [0, 0]


def test_the_filter_drops_nodes_violating_more_dependencies_than_they_satisfy():
    group = AppGroup("shop", {"frontend": (Dependency("cart", 5), Dependency("catalog", 5))})
    nodes = [node("n1", "a"), node("n2", "a"), node("n3", "b"), node("n4")]
    pods = [pod("cart-1", "cart", "n1"), pod("cart-2", "cart", "n4"), pod("cat-1", "catalog", "n3")]
    plugin = NetworkOverhead(group, TOPO)
    sat, vio = plugin.satisfied_violated(pod("fe", "frontend"), index(pods, nodes))
    # n1: cart-1 same host (ok), cart-2 on an unlabelled node (violated), catalog 10 > 5 (violated)
    # n2: cart-1 same zone (ok), cart-2 violated, catalog violated
    # n3: cart-1 10 > 5 violated, cart-2 violated, catalog same host ok
    # n4: no costs known from an unlabelled node (not counted), cart-2 same host ok
    assert sat.tolist() == [1, 1, 1, 1]
    assert vio.tolist() == [2, 2, 2, 0]
    failed = plugin.filter(pod("fe", "frontend"), ["n1", "n2", "n3", "n4"], index(pods, nodes))
    assert sorted(failed) == ["n1", "n2", "n3"]
    assert "Satisfied: 1 Violated: 2" in failed["n1"]


def test_the_filter_runs_at_the_extender_step_with_the_current_index():
    nodes = [node("n1", "a"), node("n4")]
    group = AppGroup("shop", {"frontend": (Dependency("cart", 5),)})
    idx = index([pod("cart-2", "cart", "n4")], nodes)
    ext = InTreeFilterExtender(NetworkOverhead(group, TOPO), lambda: idx)
    pod_obj = {
        "metadata": {"name": "fe", "namespace": "default", "labels": {"app": "frontend"}},
        "spec": {"containers": []},
    }
    names, failed = ext.filter(pod_obj, [{"metadata": {"name": "n1"}}, {"metadata": {"name": "n4"}}])
    assert names == ["n4"] and list(failed) == ["n1"]
    assert np.array_equal(ext.filter(pod_obj, [{"metadata": {"name": "n4"}}])[0], ["n4"])
