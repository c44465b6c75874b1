"""The high-level policy interface and the rebalance heuristic."""

from __future__ import annotations

from dataclasses import replace

import pytest

from policy.highlevel import HighLevelPolicy, RebalanceHeuristic, default_intent, node_cpu_utilization
from policy.index import ClusterIndex
from policy.lowlevel import TopologyHeuristic
from policy.state import ClusterSnapshot, NodeInfo, OwnerRef, Plan, PodInfo, Resources, ServiceEdge, ServiceGraph

GI = 1024**3
PLACEMENT = TopologyHeuristic()


def node(name: str, cpu_m: int = 4000, usage_m: int | None = None) -> NodeInfo:
    return NodeInfo(name, Resources(cpu_m, 16 * GI), usage=None if usage_m is None else Resources(usage_m, GI))


def pod(
    service: str,
    node_name: str,
    cpu_m: int = 500,
    ns: str = "shop",
    suffix: str = "abcde",
    owner_kind: str = "ReplicaSet",
    usage_m: int | None = None,
) -> PodInfo:
    return PodInfo(
        name=f"{service}-5d8f6c7b9c-{suffix}",
        namespace=ns,
        service=service,
        requests=Resources(cpu_m, GI),
        node_name=node_name,
        phase="Running",
        owner=OwnerRef(owner_kind, f"{service}-5d8f6c7b9c"),
        usage=None if usage_m is None else Resources(usage_m, GI),
    )


def graph(*pairs: tuple[str, str, float | None]) -> ServiceGraph:
    return ServiceGraph.build((), [ServiceEdge(a, b, rps=r) for a, b, r in pairs])


def snap(nodes, pods, g=ServiceGraph()) -> ClusterSnapshot:
    return ClusterSnapshot(nodes=tuple(nodes), pods=tuple(pods), graph=g)


def plan(s: ClusterSnapshot, planner: RebalanceHeuristic | None = None) -> Plan:
    return (planner or RebalanceHeuristic()).plan(s, ClusterIndex.build(s), PLACEMENT)


NODES3 = (node("n1"), node("n2"), node("n3"))


def test_the_heuristic_implements_the_high_level_policy_protocol():
    assert isinstance(RebalanceHeuristic(), HighLevelPolicy)


def test_a_chatty_pair_on_different_nodes_with_room_gets_one_locality_move_to_the_neighbours_node():
    s = snap(NODES3, [pod("api", "n1"), pod("db", "n2")], graph(("api", "db", 50.0)))
    p = plan(s)
    assert len(p.moves) == 1  # the pair is brought together once, never swapped
    m = p.moves[0]
    assert (m.pod, m.from_node, m.to_node, m.reason) == ("shop/api-5d8f6c7b9c-abcde", "n1", "n2", "locality")
    assert m.gain == pytest.approx(10.0)


def test_an_unknown_call_rate_still_makes_a_pair_chatty():
    s = snap(NODES3, [pod("api", "n1"), pod("db", "n2")], graph(("api", "db", None)))
    assert [m.reason for m in plan(s).moves] == ["locality"]


def test_a_pair_below_the_chatty_rate_is_left_alone():
    s = snap(NODES3, [pod("api", "n1"), pod("db", "n2")], graph(("api", "db", 0.5)))
    assert plan(s, RebalanceHeuristic(min_pair_rps=1.0)).moves == ()


def test_no_move_when_neither_side_fits_next_to_the_other():
    pods = [pod("api", "n1"), pod("db", "n2"), pod("filler-a", "n1", cpu_m=3400), pod("filler-b", "n2", cpu_m=3400)]
    s = snap(NODES3, pods, graph(("api", "db", 50.0)))
    assert plan(s, RebalanceHeuristic(overload_threshold=1.0)).moves == ()
    roomy = snap(NODES3, pods[:3] + [pod("filler-b", "n2", cpu_m=2500)], graph(("api", "db", 50.0)))
    assert [(m.pod, m.to_node) for m in plan(roomy, RebalanceHeuristic(overload_threshold=1.0)).moves] == [
        ("shop/api-5d8f6c7b9c-abcde", "n2")
    ]


def test_no_move_when_no_node_scores_better_than_the_current_one():
    # api talks to db (n2) and cache (n1) equally: n2 is no better than n1.
    pods = [pod("api", "n1"), pod("db", "n2"), pod("cache", "n1")]
    s = snap(NODES3, pods, graph(("api", "db", 10.0), ("api", "cache", 10.0)))
    moves = plan(s, RebalanceHeuristic(max_moves_per_service=1)).moves
    assert all(m.pod != "shop/api-5d8f6c7b9c-abcde" for m in moves)


def test_a_gain_within_the_margin_is_not_worth_a_move():
    # api's neighbours are pinned (kube-system is never planned): only api may move.
    pods = [
        pod("api", "n1"),
        pod("db", "n2", ns="kube-system"),
        pod("cache", "n2", ns="kube-system"),
        pod("queue", "n1", ns="kube-system"),
    ]
    g = graph(("api", "db", 10.0), ("api", "cache", 10.0), ("api", "queue", 10.0))
    s = snap(NODES3, list(pods), g)
    api_moves = lambda pl: [m for m in plan(s, pl).moves if m.pod.startswith("shop/api")]  # noqa: E731
    # score on n1 10/3, on n2 20/3: gain 3.33
    assert api_moves(RebalanceHeuristic(locality_margin=3.4)) == []
    assert [m.to_node for m in api_moves(RebalanceHeuristic(locality_margin=1.0))] == ["n2"]


def test_a_locality_move_never_pushes_the_target_over_the_overload_threshold():
    pods = [pod("api", "n1"), pod("db", "n2"), pod("filler", "n2", cpu_m=2500), pod("filler2", "n1", cpu_m=2600)]
    s = snap(NODES3, pods, graph(("api", "db", 50.0)))
    # n2 would reach (500 + 2500 + 500) / 4000 = 0.875 >= 0.85; n1 would reach 0.9.
    assert plan(s).moves == ()
    assert len(plan(s, RebalanceHeuristic(overload_threshold=0.95)).moves) == 1


def test_an_overloaded_node_sheds_a_pod_only_to_a_node_that_stays_under_the_threshold():
    pods = [
        pod("a", "n1", 1000),
        pod("b", "n1", 1000),
        pod("c", "n1", 1500),
        pod("x", "n2", 3000),
        pod("y", "n3", 2000),
    ]
    s = snap(NODES3, pods)
    p = plan(s)
    assert len(p.moves) == 1  # one move brings n1 to 0.625: it is not relieved twice
    m = p.moves[0]
    assert (m.from_node, m.to_node, m.reason) == ("n1", "n3", "overload")  # n2 would reach 1.0
    assert m.pod == "shop/a-5d8f6c7b9c-abcde"  # ties go to the smallest pod, then the key
    assert 0 < m.gain <= 10


def test_an_overloaded_node_keeps_its_pods_when_every_other_node_would_cross_the_threshold():
    pods = [
        pod("a", "n1", 1000),
        pod("b", "n1", 1000),
        pod("c", "n1", 1500),
        pod("x", "n2", 3000),
        pod("y", "n3", 3000),
    ]
    assert plan(snap(NODES3, pods)).moves == ()


def test_measured_usage_decides_overload_when_known():
    nodes = (node("n1", usage_m=3800), node("n2", usage_m=500), node("n3", usage_m=3700))
    pods = [pod("a", "n1", 200, usage_m=1500), pod("b", "n1", 200, usage_m=2000), pod("y", "n2", 200)]
    s = snap(nodes, pods)
    util = node_cpu_utilization(ClusterIndex.build(s))
    assert util[0] == pytest.approx(0.95)
    moves = plan(s).moves
    assert [(m.from_node, m.to_node, m.reason) for m in moves] == [("n1", "n2", "overload")]


def test_moves_are_sorted_by_gain_with_at_most_one_move_per_pod():
    pods = [pod("api", "n1"), pod("db", "n2"), pod("a", "n3", 1000), pod("b", "n3", 1000), pod("c", "n3", 1500)]
    s = snap(NODES3, pods, graph(("api", "db", 50.0)))
    moves = plan(s).moves
    assert [m.reason for m in moves] == ["locality", "overload"]
    assert [m.gain for m in moves] == sorted((m.gain for m in moves), reverse=True)
    assert len({m.pod for m in moves}) == len(moves)


def test_at_most_max_moves_per_service_pods_of_one_service_move_in_a_cycle():
    pods = [pod("api", "n1", suffix="aaaaa"), pod("api", "n1", suffix="bbbbb"), pod("db", "n2")]
    s = snap(NODES3, pods, graph(("api", "db", 50.0)))
    assert len(plan(s).moves) == 1
    assert len(plan(s, RebalanceHeuristic(max_moves_per_service=2)).moves) == 2


def test_pods_the_guards_would_always_refuse_are_not_planned():
    pods = [
        pod("api", "n1", ns="kube-system"),
        pod("agent", "n1", owner_kind="DaemonSet"),
        replace(pod("cache", "n3"), local_storage=True),
        pod("db", "n2"),
    ]
    g = graph(("api", "db", 50.0), ("agent", "db", 50.0), ("cache", "db", 50.0))
    moves = plan(snap(NODES3, pods, g)).moves
    assert [m.pod for m in moves] == ["shop/db-5d8f6c7b9c-abcde"]
    moves = plan(snap(NODES3, pods, g), RebalanceHeuristic(evict_local_storage_pods=True)).moves
    assert "shop/cache-5d8f6c7b9c-abcde" in {m.pod for m in moves}


def test_an_empty_plan_carries_the_default_intent_and_no_replica_targets():
    p = plan(snap(NODES3, [pod("api", "n1")]))
    assert p.moves == () and dict(p.replica_targets) == {} and p.intent.values == default_intent() == (1.0, 1.0)


def test_a_configured_intent_is_used_and_passed_down():
    p = plan(snap(NODES3, [pod("api", "n1")]), RebalanceHeuristic(intent=(2.0,)))
    assert p.intent.values == (2.0, 1.0)


def test_the_plan_is_deterministic_whatever_the_pod_order():
    pods = [pod("api", "n1"), pod("db", "n2"), pod("web", "n3"), pod("a", "n3", 3000), pod("b", "n3", 500)]
    g = graph(("web", "api", 20.0), ("api", "db", 50.0))
    p1 = plan(snap(NODES3, pods, g))
    p2 = plan(snap(NODES3, list(reversed(pods)), g))
    assert p1 == p2 and p1.moves


@pytest.mark.parametrize(
    "kw, field",
    [
        ({"overload_threshold": 1.5}, "overload_threshold"),
        ({"overload_threshold": 0.0}, "overload_threshold"),
        ({"locality_margin": -1.0}, "locality_margin"),
        ({"default_rps": 0.0}, "default_rps"),
        ({"max_moves_per_service": 0}, "max_moves_per_service"),
        ({"intent": (float("nan"),)}, "intent"),
    ],
)
def test_out_of_range_parameters_are_refused_with_the_field_named(kw, field):
    with pytest.raises(ValueError, match=field):
        RebalanceHeuristic(**kw)
