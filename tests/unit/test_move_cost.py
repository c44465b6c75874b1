"""The move cost model (policy/highlevel/move_cost.py): a move's predicted gain and cost in the objective's units, and
the decision they make together."""

from __future__ import annotations

import math

import pytest

from descheduler.config import cost_model_from_config, load_descheduler_config
from policy.highlevel import MoveCostModel, traffic_of
from policy.state import (
    LABEL_ZONE,
    ClusterSnapshot,
    NodeInfo,
    OwnerRef,
    PodInfo,
    Resources,
    ServiceEdge,
    ServiceGraph,
)

GI = 1024**3
HEADER = {"apiVersion": "hrl-scheduler.io/v1alpha1", "kind": "DeschedulerConfiguration"}


def node(name: str, cpu_m: int = 8000, used_m: int | None = 0, zone: str = "a") -> NodeInfo:
    return NodeInfo(
        name,
        Resources(cpu_m, 32 * GI),
        labels={LABEL_ZONE: zone},
        usage=None if used_m is None else Resources(used_m, 0),
    )


def pod(svc: str, at: str, use_m: int | None = 100, suffix: str = "a", req_m: int = 100) -> PodInfo:
    return PodInfo(
        name=f"{svc}-{suffix}",
        namespace="shop",
        service=svc,
        requests=Resources(req_m, GI),
        node_name=at,
        phase="Running",
        owner=OwnerRef("ReplicaSet", f"{svc}-abcde"),
        usage=None if use_m is None else Resources(use_m, 0),
        ready=True,
    )


# web -> api (1 call per request, 100 rps), api -> db (2 calls per api call, 200 rps): 100 user requests/s
GRAPH = ServiceGraph.build(
    (),
    [
        ServiceEdge("web", "api", rps=100.0, calls_per_request=1.0),
        ServiceEdge("api", "db", rps=200.0, calls_per_request=2.0),
    ],
)


def snap(pods, nodes, graph=GRAPH) -> ClusterSnapshot:
    return ClusterSnapshot(nodes=tuple(nodes), pods=tuple(pods), graph=graph)


def test_the_traffic_model_reads_the_user_rate_and_the_visits_from_measured_rates():
    t = traffic_of(GRAPH)
    assert t.user_rps == pytest.approx(100.0)
    assert t.visits == pytest.approx({"web": 1.0, "api": 1.0, "db": 2.0})
    assert dict(t.calls["api"]) == pytest.approx({"web": 1.0, "db": 2.0})  # calls per user request, both ways


def test_without_rates_the_visits_follow_the_declared_calls_per_request_and_the_user_rate_is_unknown():
    g = ServiceGraph.build((), [ServiceEdge("web", "api", calls_per_request=3.0), ServiceEdge("api", "db")])
    t = traffic_of(g)
    assert t.user_rps is None
    assert t.visits == pytest.approx({"web": 1.0, "api": 3.0, "db": 3.0})  # a declared edge: 1 call per request


def test_moving_a_pod_next_to_the_pods_it_calls_saves_their_network_delay_per_user_request():
    m = MoveCostModel(slo_p95_ms=50.0)
    nodes = [node("n1"), node("n2"), node("n3", zone="b")]
    api, db, web = pod("api", "n1"), pod("db", "n2"), pod("web", "n2")
    s = snap([api, db, web], nodes)
    t, by_name = traffic_of(s.graph), {n.name: n for n in nodes}
    # 3 calls per user request cross n1 -> n2 (1 from web, 2 to db) at 0.45 ms each: all saved on n2
    assert m.locality_ms(api, by_name["n2"], by_name, s, t) == pytest.approx(3 * 0.45)
    # on n3 they would cross zones (1.95 ms) instead of crossing nodes (0.45 ms): a loss
    assert m.locality_ms(api, by_name["n3"], by_name, s, t) == pytest.approx(3 * (0.45 - 1.95))
    e = m.evaluate(api, "n2", "surge", s)
    assert e.locality_per_min == pytest.approx((0.5 + 0.5) * 3 * 0.45 / 50.0)


def test_the_calls_of_a_service_with_several_pods_are_shared_between_them():
    m = MoveCostModel()
    nodes = [node("n1"), node("n2")]
    s = snap([pod("api", "n1", suffix="a"), pod("api", "n2", suffix="b"), pod("db", "n2"), pod("web", "n2")], nodes)
    by_name = {n.name: n for n in nodes}
    one = m.locality_ms(s.pods[0], by_name["n2"], by_name, s, traffic_of(s.graph))
    assert one == pytest.approx(3 * 0.45 / 2)


def test_leaving_a_loaded_node_gains_and_joining_a_small_busy_one_loses():
    m = MoveCostModel(load_factor=1.0)
    busy, idle, small = node("busy", 2000, 1800), node("idle", 8000, 1000), node("small", 2000, 1500)
    g = ServiceGraph.build((), [ServiceEdge("web", "api", rps=100.0, calls_per_request=1.0)])
    api = pod("api", "busy", use_m=500)
    others = [pod("web", "busy", use_m=800), pod("web", "idle", use_m=600, suffix="b"), pod("web", "small", 900, "c")]
    s = snap([api, *others], [busy, idle, small], g)
    off = m.evaluate(api, "idle", "surge", s)
    onto = m.evaluate(
        pod("api", "idle", use_m=500),
        "small",
        "surge",
        snap([pod("api", "idle", 500), *others], [busy, idle, small], g),
    )
    assert off.load_per_min > 0 > onto.load_per_min
    # the queue arithmetic by hand: U/(1 - rho) per node, ms per user request at 100 rps
    before = 1.3 / (1 - 0.9) + 0.6 / (1 - 0.125)
    after = 0.8 / (1 - 0.65) + 1.1 / (1 - 0.1875)
    assert off.load_per_min == pytest.approx((before - after) * 1000.0 / 100.0 / 100.0)


def test_the_load_factor_judges_the_target_at_a_higher_load_so_a_move_that_saturates_it_at_the_peak_is_refused():
    calm, cautious = MoveCostModel(load_factor=1.0), MoveCostModel(load_factor=2.0)
    frm, to = node("n1", 8000, 2400), node("n2", 2000, 600)  # both at 30 % now; n2 is small
    g = ServiceGraph.build((), [ServiceEdge("web", "api", rps=1000.0, calls_per_request=10.0)])  # 10 calls/request
    api = pod("api", "n1", use_m=200)
    s = snap([api, pod("web", "n2", use_m=300)], [frm, to], g)
    now = calm.evaluate(api, "n2", "surge", s)
    assert now.locality_per_min > -now.load_per_min > 0 and now.gain_per_min > 0  # locality wins at today's load
    peak = cautious.evaluate(api, "n2", "surge", s)
    assert peak.locality_per_min == pytest.approx(now.locality_per_min)
    assert peak.gain_per_min < 0 and not peak.worth  # at twice the load n2 nears saturation: not worth it


def test_a_saturated_node_keeps_costing_more_the_fuller_it_is():
    m = MoveCostModel(load_factor=1.0, max_utilization=0.9)
    assert m._sojourn(1.0, 0.95) > m._sojourn(1.0, 0.9) > m._sojourn(1.0, 0.5)
    assert m._sojourn(1.0, 1.5) > m._sojourn(1.0, 1.2)
    assert math.isfinite(m._sojourn(1.0, 3.0))


def test_a_surge_costs_the_extra_pods_cpu_for_the_overlap_and_loses_no_request():
    m = MoveCostModel(cpu_price=0.5, cpu_reference_cores=4.0, overlap_s=120.0)
    s = snap([pod("api", "n1", req_m=500), pod("db", "n2"), pod("web", "n2")], [node("n1"), node("n2")])
    e = m.evaluate(s.pods[0], "n2", "surge", s)
    assert e.cpu_cost == pytest.approx(0.5 * 0.5 / 4.0 * 2.0) and e.failure_cost == 0.0
    assert e.cost == e.cpu_cost and e.net == pytest.approx(e.gain_per_min * 10 - e.cost) and e.worth


def test_the_cpu_reference_defaults_to_the_graphs_pods_requests():
    m = MoveCostModel()
    s = snap([pod("api", "n1", req_m=500), pod("db", "n2", req_m=300), pod("other", "n2", req_m=9000)], [node("n1")])
    assert m.reference_cores(s) == pytest.approx(0.8)


def test_an_eviction_costs_its_requests_in_flight_and_for_a_lone_pod_the_outage_until_its_replacement_is_ready():
    m = MoveCostModel(startup_s=20.0)
    n1, n2 = node("n1", 8000, 4000), node("n2")
    api = pod("api", "n1", use_m=500)
    s = snap([api, pod("db", "n2"), pod("web", "n2")], [n1, n2])
    shared = m.evaluate(api, "n2", "evict", s, only_serving_pod=False)
    lone = m.evaluate(api, "n2", "evict", s, only_serving_pod=True)
    in_flight = 0.5 / (1 - 0.5)  # Little's law on the node's queue: u / (1 - rho)
    assert shared.failure_cost == pytest.approx(100.0 * in_flight / (100.0 * 60.0))
    # every user request needs api (1 visit) for 20 s: a third of the minute's requests fail
    assert lone.failure_cost == pytest.approx(100.0 * (in_flight + 100.0 * 20.0) / (100.0 * 60.0))
    assert not lone.worth and lone.cost > 30


def test_an_eviction_without_measurements_cannot_be_priced_and_is_not_worth_it():
    m = MoveCostModel()
    g = ServiceGraph.build((), [ServiceEdge("web", "api"), ServiceEdge("api", "db")])  # declared, no rates
    s = snap(
        [pod("api", "n1", use_m=None), pod("db", "n2", use_m=None), pod("web", "n2", None)],
        [node("n1", used_m=None), node("n2", used_m=None)],
        g,
    )
    e = m.evaluate(s.pods[0], "n2", "evict", s)
    assert e.unknown and not e.worth
    # a make-before-break move is priced by what it has: the locality it gains from the declared graph, its CPU
    surge = m.evaluate(s.pods[0], "n2", "surge", s)
    assert not surge.unknown and surge.locality_per_min > 0 and surge.load_per_min == 0.0


def test_a_move_to_a_node_the_snapshot_lacks_cannot_be_priced():
    s = snap([pod("api", "n1")], [node("n1")])
    e = MoveCostModel().evaluate(s.pods[0], "gone", "surge", s)
    assert e.unknown and not e.worth and "not in the snapshot" in e.describe()


@pytest.mark.parametrize(
    "field,value",
    [
        ("slo_p95_ms", 0.0),
        ("load_factor", 0.5),
        ("max_utilization", 1.0),
        ("horizon_s", -1.0),
        ("cpu_price", math.inf),
        ("cpu_reference_cores", 0.0),
    ],
)
def test_a_parameter_out_of_range_is_refused_naming_it(field, value):
    with pytest.raises(ValueError, match=field):
        MoveCostModel(**{field: value})


def test_the_configuration_sets_the_model_with_the_slo_and_the_overlap_of_one_cycle_by_default():
    cfg = load_descheduler_config({**HEADER, "intervalSeconds": 120, "planner": {"intentPolicy": {"sloP95Ms": 80}}})
    m = cost_model_from_config(cfg)
    assert m is not None and m.slo_p95_ms == 80 and m.overlap_s == 120 and m.load_factor == 2.05
    cfg = load_descheduler_config({**HEADER, "moves": {"costModel": {"sloP95Ms": 40, "overlapSeconds": 30}}})
    m = cost_model_from_config(cfg)
    assert m is not None and m.slo_p95_ms == 40 and m.overlap_s == 30
    assert (
        cost_model_from_config(load_descheduler_config({**HEADER, "moves": {"costModel": {"enabled": False}}})) is None
    )
