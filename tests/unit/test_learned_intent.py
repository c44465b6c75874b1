"""The learned high level: the structured intent, its wire encoding, the intent actor (numpy vs its torch twin),
served vs trained behaviour, the planner's plumbing and the capacity targets' executor."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import numpy as np
import pytest

from policy.bundle import DEFAULT_BUNDLES, BundleError, PolicyBundle
from policy.highlevel import (
    INTENT_GLOBAL_SPEC,
    INTENT_SERVICE_SPEC,
    INTENT_SERVICE_SPEC_FLAT,
    FixedIntent,
    GruForecaster,
    HierarchicalPolicy,
    HrlState,
    Intent,
    IntentActor,
    IntentAutoscaler,
    IntentFeaturizer,
    LearnedIntent,
    ResizePlanner,
    intent_from_outputs,
)
from policy.highlevel.autoscale import LIMIT_TARGET_QUIET_S
from policy.index import ClusterIndex
from policy.lowlevel import TopologyHeuristic, intent_adjustment
from policy.lowlevel.features import CONTEXT_FEATURES
from policy.state import (
    ClusterSnapshot,
    LabelSelector,
    NodeInfo,
    OwnerRef,
    PodInfo,
    Resources,
    ServiceEdge,
    ServiceGraph,
    ServiceSignals,
    WorkloadInfo,
    frozen_map,
)

torch = pytest.importorskip("torch")
from policy.train.hierarchy import SampledIntent  # noqa: E402
from policy.train.intent_net import IntentNet, export_intent  # noqa: E402

GI = 1024**3
PREDICTOR = "policy/bundles/hrl-scheduler/high/predictor"


def pod(svc, node, i=0, cpu_m=200, usage_m=None, limit_m=0):
    return PodInfo(
        name=f"{svc}-{i}",
        namespace="shop",
        service=svc,
        requests=Resources(cpu_m, GI),
        limits=Resources(limit_m, 0),
        uid=f"u-{svc}-{i}",
        node_name=node,
        phase="Running",
        owner=OwnerRef("ReplicaSet", f"{svc}-rs"),
        labels=frozen_map({"app": svc}),
        usage=None if usage_m is None else Resources(usage_m, 0),
    )


def workload(svc, replicas, cpu_m=200):
    return WorkloadInfo(
        svc,
        "shop",
        svc,
        kind="Deployment",
        replicas=replicas,
        selector=LabelSelector(frozen_map({"app": svc})),
        pod_requests=Resources(cpu_m, GI),
    )


def world(t: float = 600.0, usage=(150, 150, 300)) -> ClusterSnapshot:
    nodes = tuple(NodeInfo(f"n{i}", Resources(4000, 16 * GI), usage=Resources(1000 + 500 * i, 0)) for i in range(3))
    pods = (
        pod("front", "n0", 0, usage_m=usage[0]),
        pod("front", "n1", 1, usage_m=usage[1]),
        pod("cart", "n2", 0, usage_m=usage[2], limit_m=400),
    )
    g = ServiceGraph.build(("front", "cart"), [ServiceEdge("front", "cart", rps=40.0, calls_per_request=1.0)], "test")
    return ClusterSnapshot(nodes, pods, graph=g, workloads=(workload("front", 2), workload("cart", 1)), taken_at_s=t)


def predictor() -> GruForecaster:
    return GruForecaster(PolicyBundle.load(PREDICTOR))


def random_net(flat: bool = True, seed: int = 0) -> IntentNet:
    torch.manual_seed(seed)
    spec = INTENT_SERVICE_SPEC_FLAT if flat else INTENT_SERVICE_SPEC
    net = IntentNet(len(spec), len(INTENT_GLOBAL_SPEC), hidden=16)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.3 * torch.randn_like(p))
    rng = np.random.default_rng(seed)
    net.set_normalization(
        rng.normal(size=len(spec)),
        0.5 + rng.random(len(spec)),
        rng.normal(size=len(INTENT_GLOBAL_SPEC)),
        0.5 + rng.random(len(INTENT_GLOBAL_SPEC)),
    )
    return net


# ---- the intent and its wire encoding ---------------------------------------------------------------------------


def test_an_intent_round_trips_through_the_cache_encoding_with_its_per_service_priorities():
    it = Intent((1.5, 0.5), colocation_priority={"cart": 2.0, "front": 0.0})
    names, values = it.to_wire()
    assert names == ["locality_weight", "balance_weight", "colocation_priority/cart", "colocation_priority/front"]
    back = Intent.from_wire(names, values)
    assert back.values == (1.5, 0.5) and dict(back.colocation_priority) == {"cart": 2.0, "front": 0.0}
    # doubles travel bit-exact: a value with every mantissa bit in use comes back the same double
    x = 0.1 + 0.2
    assert Intent.from_wire(*Intent((x, 1 / 3)).to_wire()).values == (x, 1 / 3)
    # an older producer's bare vector, a newer producer's unknown name, nothing at all
    assert Intent.from_wire([], [1.2, 0.8]) == Intent((1.2, 0.8))
    assert Intent.from_wire(["balance_weight", "future"], [2.0, 9.0]) == Intent((1.0, 2.0))
    assert Intent.from_wire([], []) is None and Intent.from_wire(["future"], [1.0]) is None
    # a bad value refuses the record whole (nothing half-applied)
    with pytest.raises(ValueError, match=r"colocation_priority\['x'\]: expected a number >= 0, got nan"):
        Intent.from_wire(["locality_weight", "colocation_priority/x"], [1.0, float("nan")])
    with pytest.raises(ValueError, match="2 names for 1 values"):
        Intent.from_wire(["locality_weight", "balance_weight"], [1.0])


def test_an_intent_crosses_the_protobuf_record_bit_for_bit():
    from policy.cache import IntentEntry
    from policy.cache.codec import intent_from_pb, intent_to_pb, pb_modules

    pb2, _ = pb_modules()
    x = Intent((0.1 + 0.2, 1 / 3), colocation_priority={"cart": 2.0 / 3.0, "front": 1e-300})
    names, values = x.to_wire()
    wire = intent_to_pb(pb2, IntentEntry(tuple(values), tuple(names), 1)).SerializeToString()
    parsed = pb2.Intent()
    parsed.ParseFromString(wire)
    it = intent_from_pb(parsed)
    back = Intent.from_wire(it.names, it.values)
    assert back.values == x.values and dict(back.colocation_priority) == dict(x.colocation_priority)
    assert back.for_service("cart") == x.for_service("cart")


def test_a_services_co_location_priority_scales_only_its_pods_locality_weight():
    it = Intent((1.5, 0.5), colocation_priority={"cart": 2.0})
    assert it.for_service("cart") == (3.0, 0.5)
    assert it.for_service("front") == (1.5, 0.5)
    assert Intent((), colocation_priority={"cart": 0.5}).for_service("cart") == (0.5, 1.0)  # the defaults, scaled
    assert Intent(()).for_service("cart") == ()


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"values": (1.0, -1.0)}, "intent.values"),
        ({"values": (1.0, 1.0), "capacity_target": {"a": 0.0}}, "capacity_target"),
        ({"values": (1.0, 1.0), "colocation_priority": {"a": -1.0}}, "colocation_priority"),
        ({"values": (1.0, 1.0), "move_budget_frac": 1.5}, "move_budget_frac"),
    ],
)
def test_an_out_of_range_intent_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        Intent(**kwargs)


def test_a_balance_weight_below_one_never_makes_an_overloaded_node_more_attractive():
    col = {n: i for i, (n, _u) in enumerate(CONTEXT_FEATURES)}
    x = np.zeros((2, len(CONTEXT_FEATURES)))
    x[:, col["cpu_used_frac"]] = [0.5, 1.0]  # a calm node and an overloaded one
    x[:, col["intent_locality_weight"]] = 1.0
    for b in (0.0, 0.5, 1.0):
        x[:, col["intent_balance_weight"]] = b
        adj = intent_adjustment(x)
        assert adj[1] <= adj[0] + 1e-12
    x[:, col["intent_balance_weight"]] = 2.0
    assert intent_adjustment(x)[1] == pytest.approx(-1.0)  # above 1 it penalizes overload more


# ---- the actor: numpy serving vs the torch twin ----------------------------------------------------------------


@pytest.mark.parametrize("flat", [True, False])
def test_the_numpy_actor_matches_its_torch_twin_to_1e5(tmp_path, flat):
    net = random_net(flat)
    bundle = export_intent(net, tmp_path / "intent", flat=flat, policy_version="t", metadata={})
    actor = IntentActor(PolicyBundle.load(tmp_path / "intent"))
    assert actor.uses_embeddings is (not flat)
    rng = np.random.default_rng(1)
    spec = INTENT_SERVICE_SPEC_FLAT if flat else INTENT_SERVICE_SPEC
    for n in (1, 3, 7):
        s = rng.normal(size=(n, len(spec))).astype(np.float32)
        g = rng.normal(size=len(INTENT_GLOBAL_SPEC)).astype(np.float32)
        z_s, z_g = actor(s, g)
        with torch.no_grad():
            t_s, t_g, _v = net(torch.as_tensor(s)[None], torch.ones(1, n, dtype=torch.bool), torch.as_tensor(g)[None])
        assert np.abs(z_s - t_s[0].numpy()).max() < 1e-5
        assert np.abs(z_g - t_g[0].numpy()).max() < 1e-5
    assert bundle.feature_spec["service"] == spec


def test_padding_does_not_change_the_torch_twins_outputs():
    net = random_net()
    rng = np.random.default_rng(2)
    s = torch.as_tensor(rng.normal(size=(1, 5, len(INTENT_SERVICE_SPEC_FLAT))).astype(np.float32))
    g = torch.as_tensor(rng.normal(size=(1, len(INTENT_GLOBAL_SPEC))).astype(np.float32))
    mask = torch.tensor([[True, True, True, False, False]])
    with torch.no_grad():
        a = net(s, mask, g)
        b = net(s[:, :3], torch.ones(1, 3, dtype=torch.bool), g)
    assert torch.allclose(a[0][:, :3], b[0], atol=1e-6) and torch.allclose(a[1], b[1], atol=1e-6)
    assert torch.allclose(a[2], b[2], atol=1e-6)


def test_a_bundle_with_another_feature_layout_is_refused_naming_both(tmp_path):
    net = random_net(flat=True)
    export_intent(net, tmp_path / "intent", flat=True, policy_version="t", metadata={})
    with pytest.raises(BundleError, match="feature_spec.service"):
        IntentActor(PolicyBundle.load(tmp_path / "intent"), INTENT_SERVICE_SPEC)


def test_outputs_are_squashed_into_the_documented_ranges():
    it = intent_from_outputs(["a", "b"], np.array([[50.0, -50.0], [-50.0, 50.0]]), np.array([50.0, -50.0, 0.0]))
    assert it.capacity_target == {"a": pytest.approx(0.95), "b": pytest.approx(0.3)}
    assert it.colocation_priority == {"a": pytest.approx(0.0), "b": pytest.approx(2.0)}
    assert it.values == (pytest.approx(3.0), pytest.approx(0.0)) and it.move_budget_frac == pytest.approx(0.5)


# ---- served == trained ------------------------------------------------------------------------------------------


def test_the_served_policy_and_the_trained_policy_without_exploration_give_the_same_intent(tmp_path):
    net = random_net(flat=True)
    export_intent(net, tmp_path / "intent", flat=True, policy_version="t", metadata={})
    shutil.copytree(PREDICTOR, tmp_path / "predictor")
    served = LearnedIntent.load(tmp_path, slo_p95_ms=200.0, cpu_price=0.7)
    actor = IntentActor(PolicyBundle.load(tmp_path / "intent"))
    trained = SampledIntent(
        actor,
        IntentFeaturizer(predictor(), None, slo_p95_ms=200.0, cpu_price=0.7),
        None,
        None,
        np.random.default_rng(0),
    )
    for t, usage in ((540.0, (100, 120, 390)), (600.0, (150, 150, 300)), (660.0, (300, 320, 380))):
        snap = world(t, usage)
        idx = ClusterIndex.build(snap)
        s1, s2 = HrlState(), HrlState()
        served.record(snap, idx, s1)
        trained.record(snap, idx, s2)
        a, b = served.intent(snap, idx, s1), trained.intent(snap, idx, s2)
        assert a == b
    assert len(trained.decisions) == 3


# ---- the planner's plumbing --------------------------------------------------------------------------------------


class CountingIntent:
    """An intent policy that returns a fixed structured intent and counts its calls."""

    def __init__(self, intent: Intent):
        self.it = intent
        self.calls = 0
        self.records = 0

    def record(self, snapshot, index, state):
        self.records += 1

    def intent(self, snapshot, index, state):
        self.calls += 1
        return self.it


def test_the_intent_is_computed_once_per_period_and_holds_in_between():
    it = Intent((2.0, 0.5), {"cart": 0.4}, {"cart": 1.5}, 0.5)
    pol = CountingIntent(it)
    planner = HierarchicalPolicy(intent_policy=pol, intent_period_s=300.0, rebalance=False)
    placement = TopologyHeuristic()
    plans = []
    for minute in range(1, 12):
        snap = world(60.0 * minute)
        plans.append(planner.plan(snap, ClusterIndex.build(snap), placement))
    assert pol.calls == 3  # minutes 1 (first), 5 and 10
    assert pol.records == 11  # the history is recorded every cycle
    assert all(p.intent.values == (2.0, 0.5) for p in plans)
    assert all(dict(p.intent.colocation_priority) == {"cart": 1.5} for p in plans)
    assert all(dict(p.intent.capacity_target) == {"cart": 0.4} for p in plans)
    doc = planner.state.to_json()
    assert HrlState.from_json(doc).capacity_targets == {"cart": 0.4}


def test_the_move_budget_bounds_the_moves_of_the_period():
    # front's two pods sit on n0/n1, its callee cart on n2: the heuristic wants to co-locate them
    snap = world()
    full = HierarchicalPolicy(
        intent_policy=CountingIntent(Intent((3.0, 1.0))), margin=0.0, min_serving_pods=1, max_moves=4
    ).plan(snap, ClusterIndex.build(snap), TopologyHeuristic())
    none = HierarchicalPolicy(
        intent_policy=CountingIntent(Intent((3.0, 1.0), move_budget_frac=0.0)),
        margin=0.0,
        min_serving_pods=1,
        max_moves=4,
    ).plan(snap, ClusterIndex.build(snap), TopologyHeuristic())
    assert full.moves and not none.moves


def test_the_capacity_targets_reach_the_autoscaler_and_decide_the_replicas():
    # cart uses 300 m of a 200 m request (one pod): at target 0.5 it needs ceil(300 / 100) = 3 replicas,
    # at 1.0 it needs 2; without a target the default (0.6) gives ceil(300 / 120) = 3
    snap = world()
    auto = IntentAutoscaler(shield=False, stabilization_s=0.0)
    for target, want in ((0.5, 3), (1.0, 2)):
        st = HrlState(capacity_targets={"cart": target})
        assert auto.replica_targets(snap, st)["shop/cart"] == want
    assert auto.replica_targets(snap, HrlState())["shop/cart"] == 3


def test_burst_counts_a_share_of_a_burstable_pods_headroom_as_capacity_and_leaves_others_alone():
    # cart: request 200 m, limit 400 m (Burstable), uses 300 m; front has no limit. At target 0.5 cart needs
    # ceil(300 / (0.5 · 200)) = 3 replicas counted on the request, ceil(300 / (0.5 · 300)) = 2 with half its headroom
    # (300 m), ceil(300 / (0.5 · 400)) = 2 with all of it; front's targets never move
    base = world()
    snap = replace(base, workloads=(workload("front", 2), replace(workload("cart", 1), pod_limits=Resources(400, GI))))
    st = HrlState(capacity_targets={"cart": 0.5, "front": 0.5})
    got = {
        b: IntentAutoscaler(shield=False, stabilization_s=0.0, burst=b).replica_targets(snap, st) for b in (0, 0.5, 1)
    }
    assert [got[b]["shop/cart"] for b in (0, 0.5, 1)] == [3, 2, 2]
    assert got[0]["shop/front"] == got[0.5]["shop/front"] == got[1]["shop/front"] == 3  # ceil(300 / 100), no limit
    # the shield counts the same capacity: cart at 390 of its 400 m limit, target 0.95, shield target 0.5
    hot = replace(snap, pods=world(usage=(150, 150, 390)).pods)
    st = HrlState(capacity_targets={"cart": 0.95})
    assert IntentAutoscaler(stabilization_s=0.0, shield_target=0.5).replica_targets(hot, st)["shop/cart"] == 4
    assert (
        IntentAutoscaler(stabilization_s=0.0, shield_target=0.5, burst=1.0).replica_targets(hot, st)["shop/cart"] == 2
    )
    # the room is at most the node's unused CPU: cart's node n2 with 3,950 of 4,000 m in use gives 50 m, so
    # ceil(300 / (0.5 · 250)) = 3; without the node's use (second case), none: the request alone, as at burst 0
    busy = replace(snap, nodes=(*snap.nodes[:2], replace(snap.nodes[2], usage=Resources(3950, 0))))
    half, one = HrlState(capacity_targets={"cart": 0.5}), IntentAutoscaler(shield=False, stabilization_s=0.0, burst=1.0)
    for nodes in (busy, replace(snap, nodes=(*snap.nodes[:2], replace(snap.nodes[2], usage=None)))):
        assert one.replica_targets(nodes, half)["shop/cart"] == 3
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match=r"IntentAutoscaler.burst: must be in \[0, 1\]"):
            IntentAutoscaler(burst=bad)


class _FallingForecast:
    """A predictor that always expects a quarter of the last rate."""

    def predict(self, rates):
        return np.asarray(rates, dtype=np.float64)[:, -1:] * 0.25


def test_the_forecast_min_bounds_how_far_a_predicted_fall_lowers_the_target():
    # cart uses 300 m of a 200 m request, target 0.5: ceil(300 / 100) = 3 replicas on the measured demand; a forecast
    # of a quarter of the rate is clipped to forecast_min: 0.5 plans for ceil(1.5) = 2, 1 for the measured 3
    snap = world()
    st = HrlState(capacity_targets={"cart": 0.5}, rate_times_s=[0.0], rates_rps={"cart": [40.0]})
    got = {
        m: IntentAutoscaler(
            shield=False, stabilization_s=0.0, forecaster=_FallingForecast(), forecast_min=m
        ).replica_targets(snap, st)["shop/cart"]
        for m in (0.5, 0.75, 1.0)
    }
    assert got == {0.5: 2, 0.75: 3, 1.0: 3}  # 0.75: ceil(2.25)
    assert IntentAutoscaler(shield=False, stabilization_s=0.0, forecaster=_FallingForecast()).forecast_min == 0.5
    for bad in (0.4, 1.1, float("nan")):
        with pytest.raises(ValueError, match=r"IntentAutoscaler.forecast_min: must be in \[0.5, 1\]"):
            IntentAutoscaler(forecast_min=bad)


class _RisingForecast:
    """A predictor that always expects twice the last rate."""

    def predict(self, rates):
        return np.asarray(rates, dtype=np.float64)[:, -1:] * 2.0


class _FlatForecast:
    """A predictor that always expects the last rate."""

    def predict(self, rates):
        return np.asarray(rates, dtype=np.float64)[:, -1:]


def test_an_entry_service_is_forecast_from_its_arrivals_only_with_entry_forecast():
    # front (no caller: the entry) uses 300 m of 2 × 200 m at target 0.5: 3 replicas on the measured demand; its
    # arrivals forecast to double: 6 with the entry forecast; without it an entry has no rate series (factor 1)
    snap = world()
    sig = {"front": ServiceSignals(rps=50.0), "cart": ServiceSignals(rps=40.0)}

    def targets(entry, st, at=snap):
        a = IntentAutoscaler(
            shield=False,
            stabilization_s=0.0,
            forecaster=_RisingForecast(),
            entry_forecast=entry,
            history_len=3,
            limit_target=0.0,
        )
        a.signals = sig
        return a.replica_targets(at, st)

    st = HrlState(capacity_targets={"front": 0.5, "cart": 0.5}, rate_times_s=[0.0], rates_rps={"cart": [40.0]})
    assert targets(False, st)["shop/front"] == 3 and "entry_rates" not in st.autoscaler
    served = IntentAutoscaler(signals=sig)  # the served limit target records no arrivals either
    served.replica_targets(snap, st)
    assert served.limit_target > 0 and "entry_rates" not in st.autoscaler
    left = HrlState(autoscaler={"entry_rates": {"front": [[540.0, 50.0]]}})  # left by an earlier setting: dropped
    served.replica_targets(snap, left)
    assert "entry_rates" not in left.autoscaler
    assert targets(True, st)["shop/front"] == 6
    # only the entry is recorded: cart's forecast comes from its call-graph rates, as before
    assert st.autoscaler["entry_rates"] == {"front": [[600.0, 50.0]]}
    # one record per time, the last history_len kept; it survives the state file
    for t in (600.0, 660.0, 720.0, 780.0):
        targets(True, st, replace(snap, taken_at_s=t))
    assert [r[0] for r in st.autoscaler["entry_rates"]["front"]] == [660.0, 720.0, 780.0]
    st = HrlState.from_json(json.loads(json.dumps(st.to_json())))
    assert len(st.autoscaler["entry_rates"]["front"]) == 3
    # arrivals unknown this cycle: the history goes (a forecast never spans a gap) and the factor is 1
    sig = {}
    assert targets(True, st, replace(snap, taken_at_s=840.0))["shop/front"] == 3
    assert st.autoscaler["entry_rates"] == {}
    # a malformed record (a hand-edited state file) is dropped, not raised
    sig = {"front": ServiceSignals(rps=50.0)}
    for bad in ([["x", 1.0]], [[10**400, 1.0]], [[1.0, -1.0]], [[2.0, 1.0], [1.0, 1.0]], 3, None):
        st.autoscaler["entry_rates"] = {"front": bad, "gone": 3}
        assert targets(True, st, replace(snap, taken_at_s=900.0))["shop/front"] == 6
        assert st.autoscaler["entry_rates"] == {"front": [[900.0, 50.0]]}
    # a gap of more than three periods, or a time in the past: the old points are no trend
    for t, kept in ((960.0, 2), (1020.0, 3), (2000.0, 1), (1000.0, 1)):
        targets(True, st, replace(snap, taken_at_s=t))
        assert len(st.autoscaler["entry_rates"]["front"]) == kept, t
    for field, bad in (("entry_forecast", 1), ("history_len", 0), ("history_len", True)):
        with pytest.raises(ValueError, match=f"IntentAutoscaler.{field}: must be"):
            IntentAutoscaler(**{field: bad})


def test_the_limit_target_plans_a_pod_for_a_share_of_the_cpu_it_can_reach():
    # cart: 300 m used, request 200 m, limit 400 m, its node 2 of 4 cores free: it can reach 400 m. At target 0.5
    # of the request (100 m a pod) it asks 3 replicas; planned for 0.6 of the reachable 400 m (240 m a pod) 2
    snap = world()
    snap = replace(snap, workloads=(workload("front", 2), replace(workload("cart", 1), pod_limits=Resources(400, 0))))
    st = HrlState(capacity_targets={"cart": 0.5})

    def cart(limit_target, at=snap):
        a = IntentAutoscaler(shield=False, stabilization_s=0.0, limit_target=limit_target)
        return a.replica_targets(at, st)["shop/cart"]

    assert cart(0.0) == 3 and cart(0.6) == 2
    # below the capacity target's own share it changes nothing (the larger of the two)
    assert cart(0.2) == 3
    # planned for 0.8 of 400 m (320 m a pod) one would do; it keeps two where the request alone asks two or more
    assert cart(0.8) == 2
    pods = tuple(replace(p, usage=Resources(90, 0)) if p.service == "cart" else p for p in snap.pods)
    light = replace(snap, pods=pods)
    assert cart(0.0, light) == 1 and cart(0.8, light) == 1  # ceil(90 / 100): one, and no floor above it
    # no room above the request (a full node, or a limit equal to the request): planned as before, even at a
    # limit_target above the capacity target (310 m: ceil(310 / 100) = 4, where 0.6 of the request would give 3)
    pods = tuple(replace(p, usage=Resources(310, 0)) if p.service == "cart" else p for p in snap.pods)
    full = tuple(replace(n, usage=n.allocatable) if n.name == "n2" else n for n in snap.nodes)
    assert cart(0.0, replace(snap, pods=pods)) == 4
    assert cart(0.6, replace(snap, pods=pods, nodes=full)) == 4
    guaranteed = (workload("front", 2), replace(workload("cart", 1), pod_limits=Resources(200, 0)))
    assert cart(0.6, replace(snap, pods=pods, workloads=guaranteed)) == 4
    for bad in (-0.1, 1.0, float("nan")):
        with pytest.raises(ValueError, match=r"IntentAutoscaler.limit_target: must be in \[0, 1\)"):
            IntentAutoscaler(limit_target=bad)


def test_the_limit_target_holds_off_where_the_service_is_not_calm():
    # the cart of the test above: 2 replicas with limit_target 0.6, 3 without; each unrest plans it as without
    snap = world()
    snap = replace(snap, workloads=(workload("front", 2), replace(workload("cart", 1), pod_limits=Resources(400, 0))))
    now = snap.taken_at_s

    def cart(at=snap, rates=(), sig=None):
        st = HrlState(capacity_targets={"cart": 0.5}, rate_times_s=[0.0] * len(rates), rates_rps={"cart": list(rates)})
        a = IntentAutoscaler(
            shield=False, stabilization_s=0.0, limit_target=0.6, signals=sig, forecaster=_FlatForecast()
        )
        return a.replica_targets(at, st)["shop/cart"], a.guardrail_counts["limit_target_held"]

    def with_cart(**kw):
        return replace(snap, pods=tuple(replace(p, **kw) if p.service == "cart" else p for p in snap.pods))

    assert cart() == (2, 0)
    # a container of its pod terminated (an OOM kill) within the quiet window; long ago: calm again
    assert cart(with_cart(restarts=1, last_terminated_s=now - 60)) == (3, 1)
    assert cart(with_cart(restarts=1, last_terminated_s=now - LIMIT_TARGET_QUIET_S)) == (2, 0)
    assert cart(with_cart(restarts=2, last_terminated_s=None)) == (3, 1)  # a count without a time: recent
    # a rising rate does not hold it (the forecast, flat here, is what plans for a rise)
    assert cart(rates=(100.0, 100.0, 130.0)) == (2, 0) and cart(rates=(50.0, 100.0, 200.0)) == (2, 0)
    # it refuses arrivals
    refused = cart(sig={"cart": ServiceSignals(rps=40.0, refused_frac=0.02)})
    assert refused[1] == 1 and refused[0] >= 3  # planned without it (the refused share adds to the demand)
    # a node of the cluster is not Ready, or cordoned
    for change in ({"ready": False}, {"unschedulable": True}):
        nodes = tuple(replace(n, **change) if n.name == "n1" else n for n in snap.nodes)
        assert cart(replace(snap, nodes=nodes)) == (3, 1), change


def test_the_limit_target_plans_an_entry_on_its_forecast_arrivals_and_a_rise_does_not_hold_it():
    # front (the entry, no call-graph rate) with a limit of 400 m: 300 m over 2 pods, each can reach 400 m (its
    # node has room); at limit target 0.6 a pod is planned for 240 m. Its arrivals forecast to double (factor 2):
    # ceil(600 / 240) = 3 with the entry forecast, ceil(300 / 240) = 2 without it (and at least the floor of 2)
    snap = world()
    snap = replace(snap, workloads=(replace(workload("front", 2), pod_limits=Resources(400, 0)), workload("cart", 1)))
    st = {True: HrlState(capacity_targets={"front": 0.5}), False: HrlState(capacity_targets={"front": 0.5})}

    def front(entry, rps, t):
        a = IntentAutoscaler(
            shield=False,
            stabilization_s=0.0,
            forecaster=_RisingForecast(),
            entry_forecast=entry,
            limit_target=0.6,
            signals={"front": ServiceSignals(rps=rps)},
        )
        return a.replica_targets(replace(snap, taken_at_s=t), st[entry])["shop/front"], a.guardrail_counts

    for i, rps in enumerate((50.0, 80.0, 160.0)):  # arrivals rising three-fold: still calm
        (on, held_on), (off, held_off) = front(True, rps, 600.0 + 60 * i), front(False, rps, 600.0 + 60 * i)
        assert (on, off) == (3, 2) and not held_on["limit_target_held"] and not held_off["limit_target_held"]
    assert [r[1] for r in st[True].autoscaler["entry_rates"]["front"]] == [50.0, 80.0, 160.0]


def test_the_saturation_shield_is_a_counted_last_resort():
    # cart uses 390 m of its 400 m limit: saturated; at target 0.95 the intent asks ceil(390 / 190) = 3
    snap = world(usage=(150, 150, 390))
    st = HrlState(capacity_targets={"cart": 0.95})
    on = IntentAutoscaler(stabilization_s=0.0, shield_target=0.5)
    off = IntentAutoscaler(stabilization_s=0.0, shield=False)
    assert off.replica_targets(snap, st)["shop/cart"] == 3
    assert on.replica_targets(snap, st)["shop/cart"] == 4  # ceil(390 / (0.5 · 200)) = 4
    assert on.guardrail_counts["saturation_shield"] == 1 and not off.guardrail_counts


def test_fixed_intent_policies_still_plan_with_the_whole_move_budget():
    snap = world()
    plan = HierarchicalPolicy(intent_policy=FixedIntent((3.0, 1.0)), margin=0.0, min_serving_pods=1).plan(
        snap, ClusterIndex.build(snap), TopologyHeuristic()
    )
    assert plan.moves and dict(plan.intent.colocation_priority) == {}


# ---- in-place resizes -------------------------------------------------------------------------------------------


def test_a_pod_above_its_capacity_target_grows_in_place_within_its_nodes_room():
    # cart (request 200 m = its template's) uses 300 m: at target 0.5 it wants 600 m; a step is at most +50 %
    snap = world()
    st = HrlState(capacity_targets={"cart": 0.5, "front": 0.9})
    (rz,) = ResizePlanner(max_step=0.5).plan(snap, st)
    assert (rz.pod, rz.from_cpu_request_m, rz.cpu_request_m, rz.reason) == ("shop/cart-0", 200, 300, "burst")

    # never beyond the node's unrequested CPU: with 3750 m requested by another pod, n2 has 50 m left
    def with_other(cpu_m):
        return ClusterSnapshot(
            snap.nodes,
            (*snap.pods, pod("other", "n2", 0, cpu_m=cpu_m)),
            graph=snap.graph,
            workloads=snap.workloads,
            taken_at_s=snap.taken_at_s,
        )

    targets = {"cart": 0.5, "front": 0.9}
    (rz,) = ResizePlanner(max_step=0.5).plan(with_other(3750), HrlState(capacity_targets=targets))
    assert rz.cpu_request_m == 250
    assert ResizePlanner(max_step=0.5).plan(with_other(3800), HrlState(capacity_targets=targets)) == ()


def test_a_burstable_pod_is_held_against_its_limit_and_a_guaranteed_one_against_its_request():
    # cart: request 200 m, limit 400 m (Burstable), using 300 m at target 0.6: against its request it wants 500 m,
    # against its limit 250 m of request (300 / 0.6 = 500 m of limit at the same ratio)
    snap = world()
    st = HrlState(capacity_targets={"cart": 0.6, "front": 0.9})
    (by_request,) = ResizePlanner(max_step=0.5, basis="request").plan(snap, st)
    (by_limit,) = ResizePlanner(max_step=0.5, basis="limit").plan(snap, HrlState(capacity_targets=st.capacity_targets))
    assert (by_request.cpu_request_m, by_limit.cpu_request_m) == (300, 250)
    # at 220 m of use it runs at 55 % of its limit: grown against its request (220 / 0.6 = 367 m), not against its limit
    calm = world(usage=(150, 150, 220))
    assert ResizePlanner(max_step=0.5, basis="request").plan(calm, HrlState(capacity_targets=st.capacity_targets))
    assert ResizePlanner(max_step=0.5, basis="limit").plan(calm, HrlState(capacity_targets=st.capacity_targets)) == ()
    # a Guaranteed pod (limit = request) is held against its request either way
    guaranteed = ClusterSnapshot(
        snap.nodes,
        tuple(
            PodInfo(**{**{f: getattr(p, f) for f in p.__dataclass_fields__}, "limits": p.requests})
            if p.service == "cart"
            else p
            for p in snap.pods
        ),
        graph=snap.graph,
        workloads=snap.workloads,
        taken_at_s=snap.taken_at_s,
    )
    plans = [
        ResizePlanner(max_step=0.5, basis=b).plan(guaranteed, HrlState(capacity_targets=st.capacity_targets))
        for b in ("request", "limit")
    ]
    assert plans[0] == plans[1] and plans[0][0].cpu_request_m == 300
    with pytest.raises(ValueError, match="ResizePlanner.basis: expected one of request, limit"):
        ResizePlanner(basis="usage")


def test_a_grown_pod_shrinks_back_toward_its_templates_request_never_below_it():
    base = world(usage=(150, 150, 60))
    grown = tuple(
        PodInfo(**{**{f: getattr(p, f) for f in p.__dataclass_fields__}, "requests": Resources(400, GI)})
        if p.service == "cart"
        else p
        for p in base.pods
    )
    snap = ClusterSnapshot(base.nodes, grown, graph=base.graph, workloads=base.workloads, taken_at_s=600.0)
    (rz,) = ResizePlanner(max_step=0.5).plan(snap, HrlState(capacity_targets={"cart": 0.6, "front": 0.9}))
    assert (rz.from_cpu_request_m, rz.cpu_request_m, rz.reason) == (400, 200, "release")  # want 100 m: the template


def test_a_resized_pod_waits_its_cooldown_and_the_planner_records_when():
    snap = world()
    st = HrlState(capacity_targets={"cart": 0.5, "front": 0.9})
    planner = ResizePlanner(cooldown_s=120.0)
    assert planner.plan(snap, st)
    assert planner.plan(world(t=660.0), st) == ()  # 60 s later: still cooling down
    assert planner.plan(world(t=780.0), st)
    assert set(st.autoscaler["resized"]) == {"shop/cart-0"}


def test_the_hierarchy_plans_resizes_from_the_intents_capacity_targets():
    planner = HierarchicalPolicy(
        intent_policy=CountingIntent(Intent((1.0, 1.0), {"cart": 0.5, "front": 0.9})),
        rebalance=False,
        resizer=ResizePlanner(),
    )
    snap = world()
    plan = planner.plan(snap, ClusterIndex.build(snap), TopologyHeuristic())
    assert [r.pod for r in plan.resizes] == ["shop/cart-0"]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("lean_margin", -0.1),
        ("no_burst_lean_margin", 2.0),
        ("capacity_target", 0.0),
        ("service_z_max", float("nan")),
        ("global_z_max", "far"),
    ],
)
def test_a_bundle_whose_fallback_is_out_of_range_is_refused_at_load_naming_the_field(tmp_path, key, value):
    root = tmp_path / "high"
    shutil.copytree(DEFAULT_BUNDLES / "hrl-scheduler" / "high", root)
    manifest = root / "intent" / "manifest.json"
    m = json.loads(manifest.read_text())
    m["metadata"].setdefault("fallback", {})[key] = value
    manifest.write_text(json.dumps(m))
    with pytest.raises(BundleError, match=f"metadata.fallback.{key}: expected a finite number"):
        LearnedIntent.load(root)
