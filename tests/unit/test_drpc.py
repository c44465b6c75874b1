"""DRPC serving (numpy): the action mapping, the state carried across periods, the local features, the
student's parity with torch, bundle refusal, and the simulator stack."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch  # the [train] extra, which `make test` installs

from policy.bundle import BundleError, PolicyBundle
from policy.highlevel import FORECAST_ARCH, FORECAST_SPEC, GruForecaster
from policy.highlevel.drpc import (
    DRPC_SPEC,
    HRL_SPEC,
    STUDENT_ARCH,
    ActionMapping,
    DrpcAutoscaler,
    DrpcFeaturizer,
    DrpcState,
    ServiceSignals,
    StudentActor,
    graph_rates,
    mapping_json,
)
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
)
from policy.train.td3 import Actor, WorkloadPredictor

ROOT = Path(__file__).resolve().parents[2]
GI = 1024**3


# ---- fixtures ------------------------------------------------------------------------------------------------


def student_bundle(spec=DRPC_SPEC, seed=0, mapping=ActionMapping(), hidden=16) -> tuple[PolicyBundle, Actor]:
    torch.manual_seed(seed)
    actor = Actor(len(spec), 1, hidden)
    b = PolicyBundle(
        level="high",
        policy_version=f"test-student-{seed}",
        feature_spec={"local": spec},
        dims={"hidden": hidden, "layers": 2},
        architecture={"type": STUDENT_ARCH},
        weights={k: v.detach().numpy() for k, v in actor.state_dict().items()},
        action_bounds={"low": [-1.0], "high": [1.0]},
        metadata={"action_mapping": mapping_json(mapping)},
    )
    return b, actor


def predictor_bundle(window=10, horizon=3) -> PolicyBundle:
    torch.manual_seed(1)
    m = WorkloadPredictor(hidden=8, horizon=horizon, last_value_skip=True)
    return PolicyBundle(
        level="high",
        policy_version="test-predictor",
        feature_spec={"rates": FORECAST_SPEC},
        dims={"window": window, "horizon": horizon, "hidden": 8},
        architecture={"type": FORECAST_ARCH, "skip": "last_value"},
        weights={k: v.detach().numpy() for k, v in m.state_dict().items()},
    )


def pod(service, i, node="n1", req_m=200, limit_m=0, usage_m=None, phase="Running", created_s=0.0):
    return PodInfo(
        name=f"{service}-abc-{i}",
        namespace="shop",
        service=service,
        requests=Resources(req_m, GI),
        limits=Resources(limit_m, 0),
        node_name=node if phase == "Running" else None,
        phase=phase,
        labels={"app": service},
        owner=OwnerRef("ReplicaSet", f"{service}-abc"),
        usage=None if usage_m is None else Resources(usage_m, 0),
        created_s=created_s,
    )


def workload(service, replicas, req_m=200, limit_m=0):
    return WorkloadInfo(
        service,
        "shop",
        service,
        replicas=replicas,
        selector=LabelSelector({"app": service}),
        pod_requests=Resources(req_m, GI),
        pod_limits=Resources(limit_m, 0),
    )


def snapshot(t_s=600.0, api_usage=(300, 300), db_usage=(50,), pending_api=0, api_rps=None):
    pods = [pod("api", i, usage_m=u, limit_m=400) for i, u in enumerate(api_usage)]
    pods += [pod("api", 10 + i, phase="Pending") for i in range(pending_api)]
    pods += [pod("db", i, node="n2", usage_m=u) for i, u in enumerate(db_usage)]
    edges = [ServiceEdge("api", "db", rps=None if api_rps is None else 2.0 * api_rps, calls_per_request=2.0)]
    return ClusterSnapshot(
        nodes=(NodeInfo("n1", Resources(4000, 8 * GI)), NodeInfo("n2", Resources(2000, 8 * GI))),
        pods=tuple(pods),
        workloads=(workload("api", len(api_usage) + pending_api, limit_m=400), workload("db", len(db_usage))),
        graph=ServiceGraph.build((), edges),
        taken_at_s=t_s,
    )


# ---- action mapping --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("a,u", [(-1.0, 0.2), (1.0, 2.0), (0.0, 0.2 * 10**0.5), (-5.0, 0.2), (5.0, 2.0)])
def test_an_action_maps_to_a_target_utilisation_log_uniformly_between_u_min_and_u_max(a, u):
    assert float(ActionMapping().target_utilization(a)) == pytest.approx(u)


@pytest.mark.parametrize(
    "action,current,demand,expected",
    [
        (0.0, 2, None, 2),  # no metric yet: keep
        (1.0, 4, 4.0, 2),  # u = 2.0: 4 pods' worth of CPU fits in 2 pods
        (-1.0, 2, 1.0, 5),  # u = 0.2: 1 pod's worth wants 5 pods
        (-1.0, 2, 10.0, 6),  # wants 50, one step adds at most max(×2, +4): 6
        (-1.0, 8, 10.0, 10),  # from 8, doubling is the larger bound (then max_replicas)
        (-1.0, 1, 3.0, 5),  # from 1, + 4 pods is the larger bound
        (1.0, 8, 0.1, 4),  # scale-in at most halves
        (1.0, 1, 0.0, 1),  # never below min_replicas
        (-1.0, 9, 50.0, 10),  # never above max_replicas
    ],
)
def test_replicas_follow_the_demand_over_the_target_within_the_step_bounds(action, current, demand, expected):
    assert ActionMapping().replicas(action, current, demand) == expected


def test_an_invalid_mapping_is_refused_naming_the_fields():
    with pytest.raises(ValueError, match="u_min < u_max"):
        ActionMapping(u_min=2.0, u_max=1.0)
    with pytest.raises(ValueError, match="unknown keys \\['bogus'\\]"):
        ActionMapping.from_json({"bogus": 1})


# ---- state -------------------------------------------------------------------------------------------------


def test_the_state_round_trips_through_json_and_stays_small():
    s = DrpcState()
    s.record(0.0, {"shop/api": 1.0}, keep=5)
    for t in range(1, 9):
        s.record(60.0 * t, {"shop/api": float(t)}, keep=5)
    s.last_scale_s["shop/api"] = 120.0
    text = json.dumps(s.to_dict())
    back = DrpcState.from_dict(json.loads(text))
    assert back == s and back.history["shop/api"] == [4.0, 5.0, 6.0, 7.0, 8.0]


def test_a_gap_between_calls_is_filled_by_linear_interpolation_and_a_repeat_replaces_the_minute():
    s = DrpcState()
    s.record(0.0, {"w": 0.0}, keep=10)
    s.record(240.0, {"w": 8.0}, keep=10)  # a CronJob every 4 minutes
    assert s.history["w"] == [0.0, 2.0, 4.0, 6.0, 8.0]
    s.record(250.0, {"w": 9.0}, keep=10)  # again within the same minute
    assert s.history["w"][-1] == 9.0 and len(s.history["w"]) == 5
    s.record(310.0, {}, keep=10)  # a workload that disappeared is forgotten
    assert s.history == {}


@pytest.mark.parametrize(
    "bad,field",
    [
        ({"version": 2}, "version"),
        ({"version": 1, "history": {"w": [1.0, -2.0]}}, "history.w\\[1\\]"),
        ({"version": 1, "history": {"w": "x"}}, "history.w"),
        ({"version": 1, "last_s": "yesterday"}, "last_s"),
        ({"version": 1, "last_scale_s": {"w": float("inf")}}, "last_scale_s.w"),
    ],
)
def test_a_corrupt_state_is_refused_naming_the_field(bad, field):
    with pytest.raises(ValueError, match=f"drpc state.{field}"):
        DrpcState.from_dict(bad)


# ---- features --------------------------------------------------------------------------------------------------


def test_graph_rates_sum_incoming_calls_and_infer_the_entry_rate_from_calls_per_request():
    g = ServiceGraph.build(
        (),
        [
            ServiceEdge("fe", "a", rps=30.0, calls_per_request=3.0),
            ServiceEdge("fe", "b", rps=5.0, calls_per_request=0.5),
            ServiceEdge("a", "b", rps=2.0),
            ServiceEdge("b", "b", rps=100.0),
            ServiceEdge("a", "c", rps=None),
        ],
    )
    assert graph_rates(g) == {"fe": 10.0, "a": 30.0, "b": 7.0}


def test_local_features_describe_utilisation_pending_pods_and_metrics():
    f = DrpcFeaturizer(GruForecaster(predictor_bundle()), "drpc", slo_p95_ms=200.0)
    state = DrpcState()
    sig = {"api": ServiceSignals(rps=10.0, latency_mean_ms=50.0, refused_frac=0.1)}
    obs = f.observe(snapshot(pending_api=1), state, sig, ["shop/api", "shop/db"])
    assert obs.keys == ("shop/api", "shop/db")
    row = dict(zip(DRPC_SPEC.names, obs.local[0].tolist()))
    assert row["replicas_frac"] == pytest.approx(0.3)
    assert row["measured_frac"] == pytest.approx(2 / 3) and row["starting_frac"] == pytest.approx(1 / 3)
    assert row["cpu_util_request"] == pytest.approx(600 / 400)
    assert row["cpu_util_capacity"] == pytest.approx(600 / 800)
    assert row["capacity_over_request"] == pytest.approx(0.2)
    assert row["latency_slo"] == pytest.approx(0.25) and row["refused_frac"] == pytest.approx(0.1)
    assert row["metrics_known"] == 1.0 and row["minutes_since_scale"] == 1.0
    # demand in pods' worth of requests, corrected for refusals
    assert obs.demand_pods[0] == pytest.approx(600 / 0.9 / 200)
    db = dict(zip(DRPC_SPEC.names, obs.local[1].tolist()))
    assert db["metrics_known"] == 0.0 and db["latency_slo"] == 0.0  # no signals for db
    assert state.history["shop/api"] == [10.0]


def test_the_load_trend_and_forecast_come_from_the_recorded_history():
    f = DrpcFeaturizer(GruForecaster(predictor_bundle()), "drpc")
    state = DrpcState()
    for t, r in enumerate([10.0, 10.0, 10.0, 10.0, 10.0, 20.0]):
        obs = f.observe(snapshot(t_s=60.0 * t, api_rps=r), state, None, ["shop/api"])
    row = dict(zip(DRPC_SPEC.names, obs.local[0].tolist()))
    assert row["load_trend_1m"] == pytest.approx(math.log(2.0), abs=1e-4)
    assert row["load_trend_5m"] == pytest.approx(math.log(2.0), abs=1e-4)
    assert obs.forecast.shape == (1, 3)
    assert row["forecast_ratio"] == pytest.approx(math.log(obs.forecast[0].max() / 20.0), abs=1e-4)


def test_unknown_or_unscalable_workloads_are_refused_by_name():
    f = DrpcFeaturizer(GruForecaster(predictor_bundle()), "drpc")
    with pytest.raises(ValueError, match="'shop/nope' is not a workload"):
        f.observe(snapshot(), DrpcState(), None, ["shop/nope"])


# ---- the student and the autoscaler -----------------------------------------------------------------------


def test_the_numpy_student_matches_the_torch_actor_to_1e_5():
    b, actor = student_bundle(HRL_SPEC, seed=4)
    x = np.random.default_rng(0).normal(size=(9, len(HRL_SPEC))).astype(np.float32)
    with torch.no_grad():
        want = actor(torch.as_tensor(x)).numpy()[:, 0]
    assert np.max(np.abs(StudentActor(b, HRL_SPEC)(x) - want)) < 1e-5


def test_a_student_trained_on_other_features_is_refused_naming_both_layouts():
    b, _ = student_bundle(DRPC_SPEC)
    with pytest.raises(BundleError, match="expected 47 features .* found 15 features .*first difference at column 15"):
        DrpcAutoscaler(b, predictor_bundle(), spec="hrl", encoder=object())  # type: ignore[arg-type]


def test_a_predictor_bundle_in_the_student_slot_is_refused(tmp_path):
    predictor_bundle().save(tmp_path / "student")
    predictor_bundle().save(tmp_path / "predictor")
    with pytest.raises(BundleError, match="architecture.type: expected 'drpc-student-v1', found 'gru-forecast-v1'"):
        DrpcAutoscaler.load(tmp_path)


def test_replica_targets_scale_a_hot_deployment_and_remember_when(tmp_path):
    b, _ = student_bundle(seed=2)
    b.save(tmp_path / "student")
    predictor_bundle().save(tmp_path / "predictor")
    scaler = DrpcAutoscaler.load(
        tmp_path, slo_p95_ms=200.0, mapping=ActionMapping(u_min=0.25, u_max=0.5)
    )  # any action: 0.25..0.5
    state = DrpcState()
    targets = scaler.replica_targets(snapshot(api_usage=(400, 400)), state, None, ["shop/api", "shop/db"])
    assert set(targets) == {"shop/api", "shop/db"}
    assert targets["shop/api"] == 6  # 4 pods' worth at 0.25..0.5 → 8..16; one step adds at most max(×2, +4)
    assert targets["shop/db"] == 1  # 0.25 pod's worth at 0.25..0.5 → 1
    assert state.last_scale_s == {"shop/api": 600.0}
    assert json.loads(json.dumps(state.to_dict()))["history"]["shop/api"]


def test_the_drpc_stack_runs_in_the_simulator_and_scales_under_a_peak():
    if not (ROOT / "policy" / "bundles" / "drpc" / "student" / "manifest.json").is_file():
        pytest.skip("no committed drpc bundle yet")
    from policy.sim.app import load_app
    from policy.sim.drpc import drpc_stack
    from policy.sim.engine import SimConfig, Simulation
    from policy.sim.sizing import cluster_for, trace_rps
    from policy.sim.stacks import StackContext, autoscaled_workloads

    app = load_app("online-boutique")
    cfg = SimConfig(minutes=8, seed=0, n_samples=200)
    built = drpc_stack(StackContext(app, cluster_for(app), 0, cfg))
    rps = trace_rps(app, "bursty", 8, 160)
    sim = Simulation(app, rps * 2.0, cluster_for(app), built.scheduler, cfg, hooks=built.hooks)
    res = sim.run()
    replicas = [sim.cluster.replicas[w] for w in autoscaled_workloads(app)]
    assert max(replicas) > 1 and res.metrics["failed_pct"] < 50
