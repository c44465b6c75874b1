"""policy/highlevel/hierarchy.py: the hierarchical high-level policy (replica targets, moves by the low
level's scores, intent)
and the state it carries between periods."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from policy.bundle import BundleMissing
from policy.highlevel import (
    FixedIntent,
    HierarchicalPolicy,
    HighLevelPolicy,
    HrlState,
    TrendForecaster,
    UtilizationIntent,
    UtilizationTargetAutoscaler,
    cluster_cpu_utilization,
    default_intent,
    due,
    forecast_factor,
    load_learned_autoscaler,
    service_rates_rps,
)
from policy.index import ClusterIndex
from policy.lowlevel import TopologyHeuristic, load_learned_placement
from policy.state import (
    ClusterSnapshot,
    LabelSelector,
    NodeInfo,
    OwnerRef,
    PodInfo,
    Resources,
    ServiceEdge,
    ServiceGraph,
    WorkloadInfo,
    frozen_map,
)

GI = 1024**3


def node(name: str, cpu_m: int = 4000, usage_m: int | None = None) -> NodeInfo:
    return NodeInfo(name, Resources(cpu_m, 16 * GI), usage=None if usage_m is None else Resources(usage_m, 0))


def pod(
    svc: str, node_name: str | None, i: int = 0, cpu_m: int = 100, usage_m: int | None = None, ns: str = "shop"
) -> PodInfo:
    return PodInfo(
        name=f"{svc}-{i}",
        namespace=ns,
        service=svc,
        requests=Resources(cpu_m, GI),
        uid=f"u-{svc}-{i}",
        node_name=node_name,
        phase="Running",
        owner=OwnerRef("ReplicaSet", f"{svc}-rs"),
        labels=frozen_map({"app": svc}),
        usage=None if usage_m is None else Resources(usage_m, 0),
    )


def workload(svc: str, replicas: int, cpu_m: int = 100, ns: str = "shop", kind: str = "Deployment") -> WorkloadInfo:
    return WorkloadInfo(
        svc,
        ns,
        svc,
        kind=kind,
        replicas=replicas,
        selector=LabelSelector(frozen_map({"app": svc})),
        pod_requests=Resources(cpu_m, GI),
    )


def snap(nodes, pods, workloads=(), edges=(), t_s: float = 600.0) -> ClusterSnapshot:
    g = ServiceGraph.build({p.service for p in pods}, edges)
    return ClusterSnapshot(nodes=tuple(nodes), pods=tuple(pods), workloads=tuple(workloads), graph=g, taken_at_s=t_s)


class FixedScores:
    """A low-level policy with given per-node scores (a small fake of the PlacementPolicy slice)."""

    name = "fixed-scores"

    def __init__(self, scores: dict[str, float], refuse: dict[str, str] | None = None):
        self.scores, self.refuse, self.intents = scores, refuse or {}, []

    def filter(self, pod, candidates, index):
        return {c: r for c, r in self.refuse.items() if c in candidates}

    def score(self, pod, candidates, index, intent=None):
        self.intents.append(intent)
        return np.array([self.scores.get(c, 0.0) for c in candidates])


class ScriptedAutoscaler:
    name = "scripted"

    def __init__(self, targets):
        self.targets, self.seen_states = targets, []

    def replica_targets(self, snapshot, state):
        self.seen_states.append(state)
        return dict(self.targets)


def plan(policy, s, placement=None):
    return policy.plan(s, ClusterIndex.build(s), placement or TopologyHeuristic())


# ---- state -----------------------------------------------------------------------------------------------


def test_the_state_round_trips_through_json_exactly():
    st = HrlState()
    g = ServiceGraph.build((), [ServiceEdge("web", "api", rps=10.0), ServiceEdge("web", "db", rps=2.5)])
    st.record_rates(g, 60.0, 10)
    st.record_rates(g.with_edges([ServiceEdge("web", "api", rps=12.0), ServiceEdge("api", "db", rps=1.0)]), 120.0, 10)
    st.last_intent, st.last_moves_s, st.last_targets = (1.2, 0.8), 120.0, {"shop/api": 3}
    st.recommendations = {"shop/api": [[60.0, 2.0], [120.0, 3.0]]}
    st.autoscaler = {"hidden": [0.1, 0.2]}
    doc = json.loads(json.dumps(st.to_json()))
    again = HrlState.from_json(doc)
    assert again == st
    assert again.rates("api").tolist() == [10.0, 12.0] and again.rates("db").tolist() == [2.5, 1.0]


@pytest.mark.parametrize(
    "doc, message",
    [
        ({"version": 2}, "version: expected 1"),
        ({"version": 1, "rate_times_s": [1.0], "rates_rps": {"a": [1.0, 2.0]}}, "rates_rps.a: 2 values for 1 times"),
        ({"version": 1, "last_intent": [1.0, "x"]}, "last_intent[1]: expected a number"),
        ({"version": 1, "rate_times_s": [float("nan")]}, "rate_times_s[0]: expected a finite number"),
        ({"version": 1, "last_targets": {"shop/a": -1}}, "last_targets.shop/a: expected an integer >= 0"),
        ({"version": 1, "recommendations": {"shop/a": [[1.0]]}}, "recommendations.shop/a[0]"),
        ([1, 2], "expected an object"),
    ],
)
def test_a_malformed_state_is_refused_with_the_field_named(doc, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        HrlState.from_json(doc)


def test_rates_are_inbound_sums_and_a_late_service_is_padded_with_its_first_value():
    g1 = ServiceGraph.build(
        (),
        [
            ServiceEdge("web", "api", rps=4.0),
            ServiceEdge("cron", "api", rps=1.0),
            ServiceEdge("web", "cache", rps=None),
        ],
    )
    assert service_rates_rps(g1) == {"api": 5.0}
    st = HrlState()
    assert st.record_rates(g1, 0.0, 3) and st.rates("api").tolist() == [5.0]
    g2 = g1.with_edges([ServiceEdge("web", "api", rps=6.0), ServiceEdge("api", "db", rps=3.0)])
    st.record_rates(g2, 60.0, 3)
    assert st.rates("db").tolist() == [3.0, 3.0] and st.rates("api").tolist() == [5.0, 6.0]
    st.record_rates(g2, 60.0, 3)  # the same time again replaces, not appends
    assert st.rate_times_s == [0.0, 60.0]
    for t in (120.0, 180.0):
        st.record_rates(g2, t, 3)
    assert st.rate_times_s == [60.0, 120.0, 180.0] and len(st.rates("db")) == 3
    assert not st.record_rates(ServiceGraph.build(("a",), ()), 240.0, 3)  # nothing measured: nothing recorded
    assert st.total_rates().tolist() == [9.0, 9.0, 9.0]


@pytest.mark.parametrize(
    "now, last, period, want",
    [
        (100.0, None, 0.0, True),
        (100.0, 90.0, 0.0, True),
        (240.0, None, 300.0, False),
        (300.0, None, 300.0, True),
        (599.0, 300.0, 300.0, False),
        (600.0, 300.0, 300.0, True),
        (1_700_000_000.0, None, 300.0, True),
    ],
)
def test_an_action_is_due_once_per_period_window(now, last, period, want):
    assert due(now, last, period) is want


# ---- forecasting -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "series, want",
    [
        ([10.0], 10.0),
        ([10.0, 20.0], 30.0),
        ([1.0, 2.0, 3.0, 4.0, 5.0], 6.0),
        ([5.0, 4.0, 3.0, 2.0, 1.0], 0.0),
        ([0.0, 0.0, 3.0, 0.0, 0.0], 0.6),
    ],
)
def test_the_trend_forecaster_extrapolates_a_least_squares_line_floored_at_zero(series, want):
    assert TrendForecaster(window=5).predict(np.array(series))[0, 0] == pytest.approx(want)


def test_the_forecast_factor_is_clipped_and_neutral_without_data():
    assert forecast_factor(np.array([]), None) == 1.0
    assert forecast_factor(np.array([0.0, 0.0]), None) == 1.0
    assert forecast_factor(np.array([10.0, 20.0]), None) == 1.5
    assert forecast_factor(np.array([10.0, 40.0]), None, hi=1.5) == 1.5
    assert forecast_factor(np.array([100.0, 10.0]), None) == 0.5


# ---- (a) replica targets ---------------------------------------------------------------------------------


def test_the_stand_in_autoscaler_scales_to_the_cpu_target_within_its_bounds():
    nodes = [node("n1"), node("n2")]
    hot = [pod("api", "n1", i, cpu_m=200, usage_m=190) for i in range(2)]  # 95 % of requests, target 60 %
    idle = [pod("web", "n2", 0, cpu_m=200, usage_m=110)]  # 55 %: within the tolerance
    s = snap(nodes, hot + idle, [workload("api", 2, 200), workload("web", 1, 200), workload("db", 1, 200)])
    auto = UtilizationTargetAutoscaler(target_utilization=0.6, max_replicas=3)
    got = auto.replica_targets(s, HrlState())
    assert got == {"shop/api": 3, "shop/web": 1}  # ceil(380 / 120) = 4, capped at 3; db has no measurement


def test_the_stand_in_holds_scale_downs_for_the_stabilization_window_and_follows_the_forecast():
    nodes = [node("n1")]
    st = HrlState()
    auto = UtilizationTargetAutoscaler(target_utilization=0.5, stabilization_s=300)
    busy = snap(nodes, [pod("api", "n1", i, usage_m=100) for i in range(4)], [workload("api", 4)], t_s=0.0)
    assert auto.replica_targets(busy, st) == {"shop/api": 8}
    quiet = snap(nodes, [pod("api", "n1", i, usage_m=10) for i in range(4)], [workload("api", 4)], t_s=120.0)
    assert auto.replica_targets(quiet, st) == {"shop/api": 8}  # the window still holds the 8
    later = replace(quiet, taken_at_s=400.0)
    assert auto.replica_targets(later, st) == {"shop/api": 1}
    # a rising request rate scales ahead of the CPU
    g = ServiceGraph.build((), [ServiceEdge("web", "api", rps=10.0)])
    st2 = HrlState()
    st2.record_rates(g, 0.0, 10)
    st2.record_rates(g.with_edges([ServiceEdge("web", "api", rps=20.0)]), 60.0, 10)
    mid = snap(nodes, [pod("api", "n1", i, usage_m=50) for i in range(2)], [workload("api", 2)], t_s=60.0)
    assert auto.replica_targets(mid, HrlState()) == {"shop/api": 2}
    assert auto.replica_targets(mid, st2) == {"shop/api": 3}  # factor 1.5: ceil(150 / 50)


@pytest.mark.parametrize(
    "kw, field",
    [
        ({"target_utilization": 0.0}, "target_utilization"),
        ({"min_replicas": 3, "max_replicas": 2}, "min_replicas"),
        ({"stabilization_s": -1.0}, "stabilization_s"),
    ],
)
def test_the_stand_in_refuses_bad_parameters(kw, field):
    with pytest.raises(ValueError, match=field):
        UtilizationTargetAutoscaler(**kw)


def test_the_policy_keeps_only_allowed_targets_and_refuses_nonsense_from_its_autoscaler():
    s = snap([node("n1"), node("n2")], [pod("api", "n1")], [workload("api", 1)])
    p = HierarchicalPolicy(
        autoscaler=ScriptedAutoscaler({"shop/api": 3, "kube-system/dns": 5, "shop/other": 2}),
        workloads=("shop/api", "kube-system/dns"),
        rebalance=False,
    )
    assert dict(plan(p, s).replica_targets) == {"shop/api": 3}
    assert p.state.last_targets == {"shop/api": 3} and p.state.last_targets_s == 600.0
    for bad in ({"shop/api": -1}, {"shop/api": 2.5}, {"api": 2}, {"shop/api": True}):
        with pytest.raises(ValueError, match="replica_targets"):
            plan(HierarchicalPolicy(autoscaler=ScriptedAutoscaler(bad)), s)


def test_replica_targets_follow_their_period_and_the_autoscaler_sees_the_state():
    auto = ScriptedAutoscaler({"shop/api": 2})
    p = HierarchicalPolicy(autoscaler=auto, scale_period_s=60.0, rebalance=False)
    base = snap([node("n1")], [pod("api", "n1")], [workload("api", 1)], t_s=60.0)
    assert dict(plan(p, base).replica_targets) == {"shop/api": 2}
    assert dict(plan(p, replace(base, taken_at_s=90.0)).replica_targets) == {}  # same minute: no opinion
    assert dict(plan(p, replace(base, taken_at_s=120.0)).replica_targets) == {"shop/api": 2}
    assert auto.seen_states == [p.state, p.state]


# ---- (b) moves -------------------------------------------------------------------------------------------


def test_a_pod_moves_when_the_best_other_node_beats_its_own_by_more_than_the_margin():
    s = snap([node("n1"), node("n2"), node("n3")], [pod("api", "n1")])
    low = FixedScores({"n1": 3.0, "n2": 5.5, "n3": 4.0})
    moves = plan(HierarchicalPolicy(min_serving_pods=1, margin=2.0), s, low).moves
    assert [(m.pod, m.from_node, m.to_node, m.reason, m.gain) for m in moves] == [
        ("shop/api-0", "n1", "n2", "policy", 2.5)
    ]
    assert plan(HierarchicalPolicy(min_serving_pods=1, margin=2.5), s, low).moves == ()  # strictly more than the margin


def test_a_move_only_goes_where_the_low_level_filter_and_the_node_admit_it():
    cordoned = replace(node("n3"), unschedulable=True)
    s = snap([node("n1"), node("n2"), cordoned], [pod("api", "n1")])
    low = FixedScores({"n1": 0.0, "n2": 9.0, "n3": 10.0}, refuse={"n2": "policy says no"})
    assert plan(HierarchicalPolicy(min_serving_pods=1), s, low).moves == ()
    low = FixedScores({"n1": 0.0, "n2": 9.0, "n3": 10.0})
    assert [m.to_node for m in plan(HierarchicalPolicy(min_serving_pods=1), s, low).moves] == ["n2"]


def test_a_move_never_creates_an_overload_and_a_pod_on_a_hot_node_is_an_overload_move():
    s = snap([node("n1", usage_m=3900), node("n2", usage_m=3400)], [pod("api", "n1", cpu_m=200)])
    low = FixedScores({"n1": 0.0, "n2": 10.0})
    assert (
        plan(HierarchicalPolicy(min_serving_pods=1, overload_threshold=0.85), s, low).moves == ()
    )  # n2 would reach 0.9
    s = snap([node("n1", usage_m=3900), node("n2", usage_m=1000)], [pod("api", "n1", cpu_m=200)])
    (m,) = plan(HierarchicalPolicy(min_serving_pods=1, overload_threshold=0.85), s, low).moves
    assert (m.to_node, m.reason) == ("n2", "overload")


def test_the_heuristic_low_level_brings_a_caller_next_to_its_callee_and_then_rests():
    g_edges = [ServiceEdge("api", "db", rps=50.0)]
    s = snap([node("n1"), node("n2")], [pod("api", "n1"), pod("db", "n2")], edges=g_edges)
    p = HierarchicalPolicy(min_serving_pods=1)
    moves = plan(p, s).moves
    assert len(moves) == 1 and {(m.from_node, m.to_node) for m in moves} <= {("n1", "n2"), ("n2", "n1")}
    together = snap([node("n1"), node("n2")], [pod("api", "n2"), pod("db", "n2")], edges=g_edges)
    assert plan(HierarchicalPolicy(min_serving_pods=1), together).moves == ()


def test_movable_pods_only_and_the_caps_per_service_and_in_all():
    nodes = [node("n1"), node("n2")]
    pods = [
        pod("api", "n1", 0),
        pod("api", "n1", 1),
        pod("web", "n1"),
        pod("sys", "n1", ns="kube-system"),
        replace(pod("bare", "n1"), owner=None),
        replace(pod("ds", "n1"), owner=OwnerRef("DaemonSet", "ds")),
        replace(pod("crit", "n1"), priority_class_name="system-node-critical"),
        replace(pod("disk", "n1"), local_storage=True),
    ]
    low = FixedScores({"n1": 0.0, "n2": 9.0})
    moves = plan(HierarchicalPolicy(min_serving_pods=1), snap(nodes, pods), low).moves
    assert sorted(m.pod for m in moves) == ["shop/api-0", "shop/web-0"]
    assert len(plan(HierarchicalPolicy(min_serving_pods=1, max_moves=1), snap(nodes, pods), low).moves) == 1
    assert len(plan(HierarchicalPolicy(min_serving_pods=1, max_moves_per_service=2), snap(nodes, pods), low).moves) == 3


def test_moves_follow_their_period_and_rebalance_off_means_none():
    s = snap([node("n1"), node("n2")], [pod("api", "n1")], t_s=240.0)
    low = FixedScores({"n1": 0.0, "n2": 9.0})
    p = HierarchicalPolicy(min_serving_pods=1, moves_period_s=300.0)
    assert plan(p, s, low).moves == ()  # before the first window ends (the simulator starts at 0)
    assert len(plan(p, replace(s, taken_at_s=300.0), low).moves) == 1
    assert plan(p, replace(s, taken_at_s=420.0), low).moves == ()
    assert plan(HierarchicalPolicy(min_serving_pods=1, rebalance=False), s, low).moves == ()


# ---- (c) intent ------------------------------------------------------------------------------------------


def test_a_quiet_cluster_asks_for_locality_and_a_busy_one_for_balance():
    ui = UtilizationIntent(smoothing=1.0)
    quiet = snap([node("n1", usage_m=400), node("n2", usage_m=400)], [pod("api", "n1")])
    busy = snap([node("n1", usage_m=3800), node("n2", usage_m=3600)], [pod("api", "n1")])
    lo = ui.intent(quiet, ClusterIndex.build(quiet), HrlState())
    hi = ui.intent(busy, ClusterIndex.build(busy), HrlState())
    assert lo == (1.5, 0.5) and hi == (0.75, 2.0)
    mid = snap([node("n1", usage_m=2200), node("n2", usage_m=2200)], [pod("api", "n1")])  # u = 0.55: halfway
    assert ui.intent(mid, ClusterIndex.build(mid), HrlState()) == pytest.approx((1.125, 1.25))


def test_a_rising_forecast_moves_the_intent_towards_balance_before_the_cpu_does():
    s = snap([node("n1", usage_m=1600), node("n2", usage_m=1600)], [pod("api", "n1")])  # u = 0.4
    st = HrlState()
    g = ServiceGraph.build((), [ServiceEdge("web", "api", rps=10.0)])
    st.record_rates(g, 0.0, 10)
    st.record_rates(g.with_edges([ServiceEdge("web", "api", rps=20.0)]), 60.0, 10)  # factor 1.5 → u_f = 0.6
    ui = UtilizationIntent(smoothing=1.0)
    flat, rising = ui.intent(s, ClusterIndex.build(s), HrlState()), ui.intent(s, ClusterIndex.build(s), st)
    assert rising[1] > flat[1] and rising[0] < flat[0]
    assert rising == pytest.approx(ui.target(0.6))


def test_the_intent_is_smoothed_against_the_last_one_kept_in_the_state():
    busy = snap([node("n1", usage_m=4000)], [pod("api", "n1")])
    p = HierarchicalPolicy(min_serving_pods=1, intent_policy=UtilizationIntent(smoothing=0.5), rebalance=False)
    p.state.last_intent = (1.5, 0.5)
    assert plan(p, busy).intent.values == pytest.approx((1.125, 1.25))
    assert plan(p, busy).intent.values == pytest.approx((0.9375, 1.625))
    assert p.state.last_intent == pytest.approx((0.9375, 1.625))


def test_the_flat_intent_is_always_the_default_and_the_low_level_is_scored_with_the_plan_intent():
    s = snap([node("n1", usage_m=4000), node("n2")], [pod("api", "n1")])
    low = FixedScores({"n1": 0.0, "n2": 9.0})
    p = HierarchicalPolicy(min_serving_pods=1, intent_policy=FixedIntent())
    out = plan(p, s, low)
    assert out.intent.values == default_intent() and set(low.intents) == {default_intent()}
    p2 = HierarchicalPolicy(min_serving_pods=1)
    out2 = plan(p2, s, low)
    assert set(low.intents[-1:]) == {out2.intent.values} and out2.intent.values != default_intent()
    assert FixedIntent((2.0,)).intent(s, ClusterIndex.build(s), HrlState()) == (2.0, 1.0)


def test_cluster_utilization_uses_measured_use_else_requests_on_ready_schedulable_nodes():
    s = snap(
        [node("n1", usage_m=1000), node("n2"), replace(node("n3", usage_m=4000), unschedulable=True)],
        [pod("api", "n2", cpu_m=1000)],
    )
    assert cluster_cpu_utilization(ClusterIndex.build(s)) == pytest.approx(2000 / 8000)
    assert cluster_cpu_utilization(ClusterIndex.build(snap([], []))) == 0.0


# ---- the policy as a whole -------------------------------------------------------------------------------


def test_it_is_a_high_level_policy_deterministic_for_the_same_inputs_and_state():
    edges = [ServiceEdge("api", "db", rps=5.0), ServiceEdge("web", "api", rps=20.0)]
    s = snap(
        [node("n1", usage_m=2000), node("n2", usage_m=500), node("n3")],
        [pod("web", "n1", usage_m=80), pod("api", "n1", usage_m=95), pod("db", "n3", usage_m=10)],
        [workload("web", 1), workload("api", 1), workload("db", 1)],
        edges,
    )

    def fresh():
        return HierarchicalPolicy(autoscaler=UtilizationTargetAutoscaler())

    a, b = fresh(), fresh()
    assert isinstance(a, HighLevelPolicy)
    pa, pb = plan(a, s), plan(b, s)
    assert pa == pb and dict(pa.replica_targets) == dict(pb.replica_targets)
    assert a.dump_state() == b.dump_state()
    # a CronJob's next run: a new process with the state loaded plans as the old one would have
    c = fresh()
    c.load_state(json.loads(json.dumps(a.dump_state())))
    later = replace(s, taken_at_s=900.0)
    assert plan(c, later) == plan(a, later)


@pytest.mark.parametrize(
    "kw, field",
    [
        ({"margin": -1.0}, "margin"),
        ({"margin": 11.0}, "margin"),
        ({"overload_threshold": 0.0}, "overload_threshold"),
        ({"max_moves": -1}, "max_moves"),
        ({"moves_period_s": math.inf}, "moves_period_s"),
        ({"history_len": 0}, "history_len"),
    ],
)
def test_out_of_range_parameters_are_refused_by_name(kw, field):
    with pytest.raises(ValueError, match=f"HierarchicalPolicy.{field}"):
        HierarchicalPolicy(**kw)


def test_a_missing_learned_bundle_names_its_path(tmp_path):
    with pytest.raises(BundleMissing, match=str(tmp_path / "low")):
        load_learned_placement(tmp_path / "low")
    with pytest.raises(BundleMissing, match="run `make train`"):
        load_learned_autoscaler(tmp_path / "high")


# ---- guardrails: a service's only pod stays; the learned targets are shielded and stabilised -------------


def test_a_services_only_pod_is_not_moved_unless_allowed():
    s = snap([node("n1"), node("n2"), node("n3")], [pod("api", "n1")])
    low = FixedScores({"n1": 3.0, "n2": 5.5, "n3": 4.0})
    assert plan(HierarchicalPolicy(margin=2.0), s, low).moves == ()  # default min_serving_pods=2
    assert [m.to_node for m in plan(HierarchicalPolicy(margin=2.0, min_serving_pods=1), s, low).moves] == ["n2"]
    two = snap([node("n1"), node("n2"), node("n3")], [pod("api", "n1"), pod("api", "n3", i=1)])
    assert [
        m.pod for m in plan(HierarchicalPolicy(margin=0.5), two, FixedScores({"n1": 3.0, "n2": 5.5, "n3": 5.5})).moves
    ] == ["shop/api-0"]


class FakeStudents:
    """The slice of policy.highlevel.DrpcAutoscaler that DrpcReplicaAutoscaler uses: scripted targets."""

    class mapping:
        max_replicas = 10

    def __init__(self, targets):
        self.targets = targets

    def replica_targets(self, snapshot, state, signals, keys):
        return dict(self.targets)


def limited_pod(i: int, usage_m: int) -> PodInfo:
    return replace(pod("api", "n1", i=i, cpu_m=100, usage_m=usage_m), limits=Resources(200, GI))


def test_the_saturation_shield_scales_a_saturated_service_up_whatever_the_students_say():
    from policy.highlevel import DrpcReplicaAutoscaler

    # 2 pods at 95 % of their 200m limit: used 380m → HPA formula at 80 % of the 100m request = 5 pods
    hot = snap([node("n1")], [limited_pod(0, 190), limited_pod(1, 190)], [workload("api", 2)])
    auto = DrpcReplicaAutoscaler(FakeStudents({"shop/api": 2}), stabilization_s=0.0)
    assert auto.replica_targets(hot, HrlState()) == {"shop/api": 5}
    # below saturation the students decide, even to scale down
    calm = snap([node("n1")], [limited_pod(0, 100), limited_pod(1, 100)], [workload("api", 2)])
    assert DrpcReplicaAutoscaler(FakeStudents({"shop/api": 1}), stabilization_s=0.0).replica_targets(
        calm, HrlState()
    ) == {"shop/api": 1}


def test_the_learned_targets_hold_scale_downs_for_the_stabilization_window():
    from policy.highlevel import DrpcReplicaAutoscaler

    st = HrlState()
    students = FakeStudents({"shop/api": 4})
    auto = DrpcReplicaAutoscaler(students, stabilization_s=300.0)
    pods = [limited_pod(0, 50), limited_pod(1, 50)]
    assert auto.replica_targets(snap([node("n1")], pods, [workload("api", 2)], t_s=600.0), st) == {"shop/api": 4}
    students.targets = {"shop/api": 2}
    assert auto.replica_targets(snap([node("n1")], pods, [workload("api", 4)], t_s=660.0), st) == {"shop/api": 4}
    assert auto.replica_targets(snap([node("n1")], pods, [workload("api", 4)], t_s=901.0), st) == {"shop/api": 2}


@pytest.mark.parametrize(
    "kw, field",
    [
        ({"saturation": 0.0}, "saturation"),
        ({"shield_target": 1.5}, "shield_target"),
        ({"refused_frac": math.nan}, "refused_frac"),
        ({"stabilization_s": -1.0}, "stabilization_s"),
    ],
)
def test_the_guardrails_refuse_bad_parameters_by_name(kw, field):
    from policy.highlevel import DrpcReplicaAutoscaler

    with pytest.raises(ValueError, match=f"DrpcReplicaAutoscaler.{field}"):
        DrpcReplicaAutoscaler(FakeStudents({}), **kw)


def test_min_serving_pods_below_one_is_refused():
    with pytest.raises(ValueError, match="HierarchicalPolicy.min_serving_pods"):
        HierarchicalPolicy(min_serving_pods=0)
