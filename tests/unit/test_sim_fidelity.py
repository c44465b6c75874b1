"""The simulator's fidelity features: the processor-sharing stations, calls (fan-out, multiplicity, bytes,
timeouts, retries), refusals, memory and OOM kills, evictions, background tenants, request conservation."""

import math

import numpy as np
import pytest

from policy.observe import parse_workload
from policy.sim.app import AppSpec, CallParams, ServiceParams
from policy.sim.cluster import SimCluster
from policy.sim.engine import BackgroundPod, ClusterSpec, PeriodicHook, SimConfig, Simulation, background_tenants
from policy.sim.kube_scheduler import KubeSchedulerModel
from policy.sim.model import NetworkModel, PerfModel, PodArrays, station_stats
from policy.sim.synthetic import deployment, synthetic_app
from policy.state import ServiceEdge, ServiceGraph


def app_of(services, edges=(), params=None, calls=None, timeout_ms=1e9, slo=100.0, entry=None):
    g = ServiceGraph.build(services, [ServiceEdge(a, b, calls_per_request=m, parallel=p) for a, b, m, p in edges])
    params = params or {s: ServiceParams() for s in services}
    return AppSpec("t", (), (), g, params, entry or {services[0]: 1.0}, slo, timeout_ms, calls=calls or {})


def P(**kw):
    return ServiceParams(**kw)


def pods(rows):
    a = np.array(rows, dtype=np.float64)
    return PodArrays(a[:, 0].astype(int), a[:, 1].astype(int), a[:, 2], a[:, 3])


def step(app, lam, pa, cores=(4.0, 4.0, 4.0), zones=("", "", ""), seed=0, n=20000, **kw):
    return PerfModel(app, kw.pop("network", None)).step(
        lam, pa, np.array(cores), list(zones), np.random.default_rng(seed), n, app.timeout_ms, **kw
    )


# ---- the processor-sharing station -----------------------------------------------------------------------


@pytest.mark.parametrize("rho", [0.2, 0.5, 0.8, 0.95])
def test_one_core_station_has_the_mm1_mean_sojourn(rho):
    x = 0.01
    st = station_stats(np.array([rho / x]), np.array([x]), np.array([1.0]), np.array([1.0]), np.array([10**6]))
    assert st.mean_sojourn_s[0] == pytest.approx(x / (1 - rho), rel=1e-6)
    assert st.blocked[0] < 1e-9


@pytest.mark.parametrize("rho,K", [(0.5, 5), (0.9, 10), (1.5, 8), (3.0, 20)])
def test_a_bounded_run_queue_refuses_what_mm1k_refuses(rho, K):
    x = 0.01
    st = station_stats(np.array([rho / x]), np.array([x]), np.array([1.0]), np.array([1.0]), np.array([K]))
    expect = (1 - rho) * rho**K / (1 - rho ** (K + 1))
    assert st.blocked[0] == pytest.approx(expect, rel=1e-6)


def test_a_station_with_as_many_cores_as_slots_refuses_what_erlang_b_refuses():
    a, K = 3.0, 4  # offered load in cores, 4 slots on 4 cores: M/G/4/4
    st = station_stats(np.array([a / 0.01]), np.array([0.01]), np.array([4.0]), np.array([1.0]), np.array([K]))
    b = 1.0
    for k in range(1, K + 1):
        b = a * b / (k + a * b)
    assert st.blocked[0] == pytest.approx(b, rel=1e-9)
    assert st.mean_sojourn_s[0] == pytest.approx(0.01)  # every admitted request runs on its own core


def test_past_saturation_the_station_sheds_the_excess_load():
    st = station_stats(np.array([300.0]), np.array([0.01]), np.array([1.0]), np.array([1.0]), np.array([1024]))
    assert st.blocked[0] == pytest.approx(1 - 1 / 3.0, rel=1e-6)
    assert st.used_cores[0] == pytest.approx(1.0, rel=1e-6)


def test_sampled_cpu_sojourns_average_to_the_stations_mean():
    app = app_of(["a"], params={"a": P(cpu_ms_per_request=10.0, latency_p50_ms=0.001, latency_mean_ms=0.0011)})
    st = step(app, 70.0, pods([(0, 0, 1.0, 0.5)]), n=200000)
    assert st.latency_ms.mean() == pytest.approx(st.pod_sojourn_ms[0], rel=0.03)
    assert st.pod_sojourn_ms[0] == pytest.approx(10.0 / (1 - 0.7), rel=1e-6)


def test_a_lone_request_runs_at_full_speed_under_a_subcore_limit_and_the_limit_caps_throughput():
    app = app_of(
        ["a"], params={"a": P(cpu_ms_per_request=2.0, cpu_cv=0.0, latency_p50_ms=0.001, latency_mean_ms=0.0011)}
    )
    low = step(app, 1.0, pods([(0, 0, 0.2, 0.1)]))
    assert np.median(low.latency_ms) == pytest.approx(2.0, rel=0.01)
    high = step(app, 200.0, pods([(0, 0, 0.2, 0.1)]))  # 0.4 cores offered to a 0.2-core limit
    assert high.pod_cpu_cores[0] == pytest.approx(0.2, rel=0.01)
    assert high.pod_blocked_frac[0] == pytest.approx(0.5, rel=0.02)


def test_more_load_never_gives_less_mean_or_p95_latency_on_a_fanout_app():
    app = app_of(
        ["a", "b", "c"],
        [("a", "b", 2.0, False), ("a", "c", 1.5, True)],
        {"a": P(cpu_ms_per_request=2.0), "b": P(cpu_ms_per_request=3.0), "c": P(cpu_ms_per_request=4.0)},
    )
    pa = pods([(0, 0, 1.0, 0.5), (1, 1, 1.0, 0.5), (2, 2, 1.0, 0.5)])
    means, p95s = [], []
    for lam in (10, 40, 80, 120, 150):
        st = step(app, lam, pa, seed=5)
        means.append(st.latency_ms.mean())
        p95s.append(np.percentile(st.latency_ms, 95))
    assert all(x < y for x, y in zip(means, means[1:])), means
    assert all(x < y for x, y in zip(p95s, p95s[1:])), p95s


# ---- calls ----------------------------------------------------------------------------------------------


def quiet(own_ms=10.0):
    """A service with almost no CPU and an almost constant own time."""
    return P(cpu_ms_per_request=0.001, cpu_cv=0.0, latency_p50_ms=own_ms, latency_mean_ms=own_ms * 1.00001)


def test_sequential_calls_add_up_and_parallel_calls_take_the_longest():
    prm = {"a": quiet(1.0), "b": quiet(10.0), "c": quiet(20.0)}
    pa = pods([(0, 0, 1.0, 0.5), (1, 0, 1.0, 0.5), (2, 0, 1.0, 0.5)])
    net = NetworkModel(same_node_ms=0.0, same_zone_ms=0.0, cross_zone_ms=0.0)
    seq = step(app_of(["a", "b", "c"], [("a", "b", 2.0, False), ("a", "c", 1.0, False)], prm), 1, pa, network=net)
    par = step(app_of(["a", "b", "c"], [("a", "b", 2.0, True), ("a", "c", 1.0, True)], prm), 1, pa, network=net)
    assert np.median(seq.latency_ms) == pytest.approx(1 + 2 * 10 + 20, rel=0.01)
    assert np.median(par.latency_ms) == pytest.approx(1 + 20, rel=0.01)


def test_fractional_multiplicity_makes_the_mean_number_of_calls():
    prm = {"a": quiet(0.001), "b": quiet(10.0)}
    net = NetworkModel(same_node_ms=0.0, same_zone_ms=0.0, cross_zone_ms=0.0)
    st = step(
        app_of(["a", "b"], [("a", "b", 2.5, False)], prm), 1, pods([(0, 0, 1.0, 0.5), (1, 0, 1.0, 0.5)]), network=net
    )
    assert st.latency_ms.mean() == pytest.approx(25.0, rel=0.02)
    assert set(np.round(st.latency_ms / 10.0).astype(int)) == {2, 3}


@pytest.mark.parametrize("parallel", [False, True])
def test_many_calls_on_one_edge_keep_their_mean_and_max(parallel):
    # 20 calls per visit: summarised beyond 8 sampled copies, the sum's mean and the max's order are kept
    prm = {"a": quiet(0.001), "b": P(cpu_ms_per_request=0.001, cpu_cv=0.0, latency_p50_ms=10.0, latency_mean_ms=12.0)}
    net = NetworkModel(same_node_ms=0.0, same_zone_ms=0.0, cross_zone_ms=0.0)
    st = step(
        app_of(["a", "b"], [("a", "b", 20.0, parallel)], prm),
        1,
        pods([(0, 0, 1.0, 0.5), (1, 0, 1.0, 0.5)]),
        network=net,
        n=40000,
    )
    if not parallel:
        assert st.latency_ms.mean() == pytest.approx(20 * 12.0, rel=0.02)
    else:
        rng = np.random.default_rng(1)
        sigma = math.sqrt(2 * math.log(1.2))
        exact = np.exp(math.log(10.0) + sigma * rng.standard_normal((40000, 20))).max(axis=1).mean()
        assert st.latency_ms.mean() == pytest.approx(exact, rel=0.05)


def test_network_delay_orders_same_node_same_zone_and_cross_zone_calls():
    app = app_of(["a", "b"], [("a", "b", 1.0, False)], {"a": quiet(1.0), "b": quiet(1.0)})
    net = NetworkModel(same_node_ms=0.1, same_zone_ms=1.0, cross_zone_ms=5.0)
    zones = ("z1", "z1", "z2")
    same_node = step(app, 1, pods([(0, 0, 1.0, 0.5), (1, 0, 1.0, 0.5)]), zones=zones, network=net)
    same_zone = step(app, 1, pods([(0, 0, 1.0, 0.5), (1, 1, 1.0, 0.5)]), zones=zones, network=net)
    cross_zone = step(app, 1, pods([(0, 0, 1.0, 0.5), (1, 2, 1.0, 0.5)]), zones=zones, network=net)
    m = [np.median(s.latency_ms) for s in (same_node, same_zone, cross_zone)]
    assert m[1] - m[0] == pytest.approx(0.9, abs=0.02)
    assert m[2] - m[0] == pytest.approx(4.9, abs=0.02)
    assert cross_zone.cross_zone_calls_rps == pytest.approx(1.0) and same_zone.cross_zone_calls_rps == 0.0


def test_bytes_cost_their_size_over_the_links_bandwidth():
    mb = 1e6
    calls = {("a", "b"): CallParams(request_bytes=mb, response_bytes=mb)}
    app = app_of(["a", "b"], [("a", "b", 1.0, False)], {"a": quiet(1.0), "b": quiet(1.0)}, calls=calls)
    net = NetworkModel(
        same_node_ms=0.0,
        same_zone_ms=0.0,
        cross_zone_ms=0.0,
        same_node_gbps=40.0,
        same_zone_gbps=10.0,
        cross_zone_gbps=1.0,
    )
    zones = ("z1", "z1", "z2")
    lat = [
        np.median(step(app, 1, pods([(0, 0, 1.0, 0.5), (1, n, 1.0, 0.5)]), zones=zones, network=net).latency_ms)
        for n in (0, 1, 2)
    ]
    per_gbps_ms = 2 * mb * 8 / 1e9 * 1000  # 2 MB over 1 Gbit/s, in ms
    assert lat[1] - lat[0] == pytest.approx(per_gbps_ms * (1 / 10 - 1 / 40), rel=0.01)
    assert lat[2] - lat[0] == pytest.approx(per_gbps_ms * (1 / 1 - 1 / 40), rel=0.01)


def slow_callee(timeout_ms, retries, backoff=5.0):
    # b takes 10 ms (median) with a heavy tail: P(> 30 ms) = P(Z > ln 3 / 0.8) ~ 8.5%
    sigma = 0.8
    prm = {
        "a": quiet(0.001),
        "b": P(
            cpu_ms_per_request=0.001, cpu_cv=0.0, latency_p50_ms=10.0, latency_mean_ms=10.0 * math.exp(sigma**2 / 2)
        ),
    }
    calls = {("a", "b"): CallParams(timeout_ms=timeout_ms, retries=retries, retry_backoff_ms=backoff)}
    return app_of(["a", "b"], [("a", "b", 1.0, False)], prm, calls=calls)


def test_a_per_try_timeout_fails_the_calls_slower_than_it():
    st = step(slow_callee(30.0, 0), 1, pods([(0, 0, 1.0, 0.5), (1, 0, 1.0, 0.5)]), n=100000)
    tail = 0.5 * math.erfc(math.log(30.0 / 10.0) / 0.8 / math.sqrt(2))
    assert st.fail_frac == pytest.approx(tail, abs=0.005)
    assert st.latency_ms.max() <= 30.0 + 1.0
    assert st.edge_attempt_fail[0] == pytest.approx(tail, abs=0.005)


def test_a_retry_saves_most_timed_out_calls_and_a_user_request_fails_once():
    pa = pods([(0, 0, 1.0, 0.5), (1, 0, 1.0, 0.5)])
    tail = 0.5 * math.erfc(math.log(30.0 / 10.0) / 0.8 / math.sqrt(2))
    st = step(slow_callee(30.0, 2), 1, pa, n=100000)
    assert st.fail_frac == pytest.approx(tail**3, abs=0.002)  # all three attempts timed out
    assert 0.0 <= st.fail_frac <= 1.0
    # a retried request waited the timeout and the back-off first
    retried = st.latency_ms[st.latency_ms > 30.0 + 0.5]
    assert len(retried) > 0 and retried.min() >= 30.0 + 5.0
    assert len(retried) / len(st.latency_ms) == pytest.approx(tail * (1 - tail**2), abs=0.01)


def test_retries_add_load_to_the_callee():
    pa = pods([(0, 0, 1.0, 0.5), (1, 1, 1.0, 0.5)])
    m = PerfModel(slow_callee(30.0, 2))
    st = m.step(10.0, pa, np.array([4.0, 4.0]), ["", ""], np.random.default_rng(0), 20000)
    assert st.edge_attempts_rps[0] > st.edge_rps[0] * 1.05
    assert st.pod_rps[1] == pytest.approx(st.edge_attempts_rps[0], rel=1e-9)
    none = PerfModel(slow_callee(30.0, 0)).step(
        10.0, pa, np.array([4.0, 4.0]), ["", ""], np.random.default_rng(0), 20000
    )
    assert none.pod_rps[1] == pytest.approx(10.0)


def test_refused_visits_make_no_calls_so_the_callees_see_only_the_admitted_load():
    prm = {"a": P(cpu_ms_per_request=10.0, max_inflight=16), "b": P(cpu_ms_per_request=1.0)}
    app = app_of(["a", "b"], [("a", "b", 1.0, False)], prm)
    st = step(app, 300.0, pods([(0, 0, 1.0, 0.5), (1, 1, 1.0, 0.5)]))  # a offered 3 cores, can do 1
    assert st.pod_blocked_frac[0] == pytest.approx(2 / 3, rel=0.01)
    assert st.pod_rps[1] == pytest.approx(300.0 * (1 - st.pod_blocked_frac[0]), rel=1e-6)
    assert st.fail_frac == pytest.approx(st.pod_blocked_frac[0], abs=0.01)


def test_the_working_set_grows_with_the_requests_in_flight():
    prm = {
        "a": P(
            cpu_ms_per_request=5.0,
            latency_p50_ms=50.0,
            latency_mean_ms=60.0,
            working_set_mi=100.0,
            memory_mi_per_inflight=2.0,
        )
    }
    app = app_of(["a"], params=prm)
    lo = step(app, 5.0, pods([(0, 0, 1.0, 0.5)]))
    hi = step(app, 100.0, pods([(0, 0, 1.0, 0.5)]))
    assert lo.pod_memory_mi[0] == pytest.approx(100.0 + 2.0 * lo.pod_inflight[0])
    assert hi.pod_inflight[0] > lo.pod_inflight[0] > 0
    assert hi.pod_memory_mi[0] > lo.pod_memory_mi[0]
    # Little's law: in flight = admitted rate x mean visit latency
    assert hi.pod_inflight[0] == pytest.approx(100.0 * (1 - hi.pod_blocked_frac[0]) * hi.service_visit_ms[0] / 1000)


def test_a_node_busy_with_background_use_slows_the_pods_on_it():
    app = app_of(["a"], params={"a": P(cpu_ms_per_request=10.0)})
    pa = pods([(0, 0, math.inf, 0.5)])
    free = step(app, 50.0, pa, cores=(1.0,), zones=("",))
    busy = step(
        app, 50.0, pa, cores=(1.0,), zones=("",), node_bg_cores=np.array([0.3]), node_bg_request_cores=np.array([0.5])
    )
    assert busy.pod_sojourn_ms[0] > free.pod_sojourn_ms[0] * 1.3


# ---- the engine: memory, evictions, background tenants, conservation ----------------------------------


def engine_app(mem_per_inflight=0.0, mem_limit_mi=256, own_ms=20.0, replicas=2):
    deps = (deployment("front", replicas, 200, 1000, 64, mem_limit_mi), deployment("back", 2, 200, 1000, 64, 512))
    g = ServiceGraph.build(["back", "front"], [ServiceEdge("front", "back", calls_per_request=1.0)])
    params = {
        "front": P(
            cpu_ms_per_request=2.0,
            latency_p50_ms=own_ms,
            latency_mean_ms=own_ms * 1.2,
            working_set_mi=100.0,
            memory_mi_per_inflight=mem_per_inflight,
        ),
        "back": P(cpu_ms_per_request=1.0, working_set_mi=50.0),
    }
    return AppSpec("e", tuple(parse_workload(d) for d in deps), deps, g, params, {"front": 1.0}, 200.0, 2000.0)


def run(app, rps, minutes=6, spec=None, hooks=(), **cfg):
    sim = Simulation(
        app,
        np.full(minutes, float(rps)),
        spec or ClusterSpec(nodes=3),
        KubeSchedulerModel(),
        SimConfig(minutes=minutes, seed=cfg.pop("seed", 0), n_samples=2000, **cfg),
        hooks=hooks,
    )
    return sim, sim.run()


def test_a_pod_over_its_memory_limit_is_oom_killed_and_restarted_after_the_kubelet_backoff():
    # front: 100 MiB + 20 MiB per request in flight, limit 256 MiB; ~100 rps x ~0.12 s per pod -> ~12 in flight
    sim, r = run(engine_app(mem_per_inflight=20.0, own_ms=100.0), 200.0, minutes=8)
    assert r.extra["oom_kills"] > 0
    assert sum(r.series["oom_kills"]) == r.extra["oom_kills"]
    front = [p for p in sim.cluster.live_pods() if p.info.service == "front"]
    assert all(p.restarts > 0 for p in front)
    st = front[0].obj["status"]["containerStatuses"][0]
    assert st["restartCount"] == front[0].restarts and st["lastState"]["terminated"]["reason"] == "OOMKilled"
    # the snapshot a policy reads carries the kill, as the kubelet's container status does live
    assert all(p.info.restarts == p.restarts and p.info.last_terminated_s == p.last_restart_s for p in front)
    assert r.extra["lost_inflight_requests"] > 0 and r.metrics["failed_pct"] > 0
    assert np.allclose(np.add(r.series["served"], r.series["failed"]), r.series["offered"])


def test_no_oom_kill_while_the_working_set_fits():
    _sim, r = run(engine_app(mem_per_inflight=0.1), 200.0)
    assert r.extra["oom_kills"] == 0


def test_the_kubelet_backoff_doubles_up_to_five_minutes_and_resets_after_ten_quiet_minutes():
    c = SimCluster.build(ClusterSpec(nodes=1).node_objects(), [deployment("x", 1, 100, 0, 64, 128)], seed=0)
    c.reconcile(0.0)
    pod = c.pending()[0]
    c.bind(pod, "node-000", 0.0)
    ready = [c.oom_kill(pod, t, 10.0, 300.0, 5.0) - t for t in (100.0, 200.0, 300.0, 400.0, 500.0, 600.0)]
    assert ready == [15.0, 25.0, 45.0, 85.0, 165.0, 305.0]
    assert c.oom_kill(pod, 600.0 + 700.0, 10.0, 300.0, 5.0) - 1300.0 == 15.0  # reset after 10 min
    assert pod.restarts == 7 and pod.alive and pod.node == 0


def test_node_memory_pressure_kills_the_pod_furthest_above_its_request():
    deps = (deployment("big", 1, 100, 0, 64, 0), deployment("small", 1, 100, 0, 64, 0))
    g = ServiceGraph.build(["big", "small"], [])
    params = {"big": P(working_set_mi=700.0), "small": P(working_set_mi=200.0)}
    app = AppSpec(
        "m", tuple(parse_workload(d) for d in deps), deps, g, params, {"big": 0.5, "small": 0.5}, 200.0, 2000.0
    )
    sim, r = run(app, 10.0, minutes=2, spec=ClusterSpec(nodes=1, memory_bytes=800 * 1024**2))
    big = next(p for p in sim.cluster.live_pods() if p.info.service == "big")
    small = next(p for p in sim.cluster.live_pods() if p.info.service == "small")
    assert big.restarts >= 1 and small.restarts == 0


def test_evicting_a_pod_loses_its_requests_in_flight_and_keeps_the_accounting_exact():
    def evict_one(sim):
        if sim.minute == 3:
            p = next(p for p in sim.cluster.live_pods() if p.info.service == "front" and p.node >= 0)
            sim.evictor.evict(p.info, "test")

    hook = PeriodicHook("evict", 1, evict_one)
    sim, r = run(engine_app(own_ms=200.0), 50.0, hooks=[hook])
    lost = r.series["lost_inflight"]
    assert lost[3] > 1.0 and sum(lost) == pytest.approx(lost[3])
    # ~25 rps per front pod x ~0.2 s per visit = ~5 requests in flight on the evicted pod
    assert lost[3] == pytest.approx(25.0 * 0.2 * 1.1, rel=0.5)
    assert r.series["failed"][3] >= lost[3]
    assert r.metrics["evictions"] == 1.0
    assert np.allclose(np.add(r.series["served"], r.series["failed"]), r.series["offered"])
    _sim2, r2 = run(engine_app(own_ms=200.0), 50.0, hooks=[hook], evictions_lose_inflight=False)
    assert sum(r2.series["lost_inflight"]) == 0.0


def test_background_tenants_start_on_their_nodes_share_the_cpu_and_do_not_count_as_the_apps():
    app = engine_app()
    bg = (
        BackgroundPod("batch-0", 0, 500, 2**30, 1500.0, 2**29),
        BackgroundPod("batch-1", 1, 500, 2**30, 1500.0, 2**29),
    )
    spec = ClusterSpec(nodes=2, cpu_m=2000, background=bg)
    sim, r = run(app, 300.0, minutes=3, spec=spec)
    base_sim, base = run(app, 300.0, minutes=3, spec=ClusterSpec(nodes=2, cpu_m=2000))
    tenants = [p for p in sim.cluster.live_pods() if sim.is_background(p)]
    assert sorted(p.node for p in tenants) == [0, 1] and all(p.info.namespace == "tenants" for p in tenants)
    assert r.metrics["cpu_core_hours"] == pytest.approx(base.metrics["cpu_core_hours"])
    assert r.metrics["latency_mean_ms"] > base.metrics["latency_mean_ms"] * 1.1
    snap = sim.observe()
    assert {p.key: p.usage.cpu_m for p in snap.pods if p.namespace == "tenants"} == {p.info.key: 1500 for p in tenants}
    assert snap.nodes[0].usage.cpu_m >= 1500


def test_the_first_scheduling_cycles_already_see_the_background_tenants_use():
    app = engine_app()
    bg = (BackgroundPod("batch-0", 0, 500, 2**30, 1500.0, 2**29),)
    sim = Simulation(
        app, np.full(2, 10.0), ClusterSpec(nodes=2, cpu_m=2000, background=bg), KubeSchedulerModel(), SimConfig(2)
    )
    sim.start(schedule=False)
    snap = sim.observe()  # what the app's first pods are scheduled against
    assert [p.usage.cpu_m for p in snap.pods if p.namespace == "tenants"] == [1500]
    assert snap.nodes[0].usage.cpu_m == 1500 and snap.nodes[1].usage.cpu_m == 0


def test_background_tenants_mix_is_deterministic_and_within_its_shares():
    a = background_tenants(10, 4000, 16 * 2**30, request_frac=0.3, use_frac=0.2, seed=3)
    assert a == background_tenants(10, 4000, 16 * 2**30, request_frac=0.3, use_frac=0.2, seed=3)
    per_node = np.bincount([b.node for b in a], weights=[b.cpu_request_m for b in a])
    assert np.all(per_node <= 0.3 * 4000 + 1) and np.all(per_node >= 0.3 * 4000 - 10)
    with pytest.raises(ValueError, match="request_frac"):
        background_tenants(1, 1000, 2**30, request_frac=1.5)


def test_a_simulation_with_every_feature_is_deterministic_per_seed():
    app = synthetic_app(12, seed=4)
    spec = ClusterSpec(nodes=4, zones=("a", "b"), background=background_tenants(4, 2000, 8 * 2**30, seed=1))
    runs = [run(app, 30.0, minutes=4, spec=spec, seed=s)[1].metrics for s in (1, 1, 2)]
    assert runs[0] == runs[1] and runs[0] != runs[2]


def test_start_without_scheduling_leaves_the_apps_pods_pending_for_the_caller():
    sim = Simulation(engine_app(), np.full(2, 10.0), ClusterSpec(nodes=2), KubeSchedulerModel(), SimConfig(minutes=2))
    sim.start(schedule=False)
    assert len(sim.cluster.pending()) == 4
    node = sim.schedule_one(sim.cluster.pending()[0], "node-001")
    assert node == "node-001" and len(sim.cluster.pending()) == 3
    sim.advance()  # the rest are scheduled by kube-scheduler's model
    assert not sim.cluster.pending()


def test_synthetic_apps_are_deterministic_and_every_service_is_reachable():
    a, b = synthetic_app(40, seed=2), synthetic_app(40, seed=2)
    assert a.graph == b.graph and a.params == b.params
    m = PerfModel(a)
    assert len(a.services) == 40 and np.all(m.visits > 0)


def test_app_yaml_edges_take_bytes_timeouts_and_retries_over_the_edge_defaults(tmp_path):
    import shutil

    from policy.config import ConfigError
    from policy.sim.app import builtin_apps_dir, load_app

    shutil.copy(builtin_apps_dir() / "online-boutique" / "kubernetes-manifests.yaml", tmp_path)
    head = (
        "apiVersion: hrl-scheduler.io/v1alpha1\nkind: App\nname: x\nmanifests: kubernetes-manifests.yaml\n"
        "entry: {frontend: 1.0}\nsloP95Ms: 200\ntimeoutMs: 2000\n"
    )
    (tmp_path / "app.yaml").write_text(
        head + "edgeDefaults: {requestBytes: 100, timeoutMs: 300}\nedges:\n"
        "  - {caller: frontend, callee: cartservice, retries: 2, responseBytes: 5000}\n"
    )
    app = load_app(str(tmp_path))
    assert app.calls[("frontend", "cartservice")] == CallParams(
        request_bytes=100, response_bytes=5000, timeout_ms=300, retries=2
    )
    assert app.calls[("frontend", "adservice")] == CallParams(request_bytes=100, timeout_ms=300)
    m = PerfModel(app)
    k = next(
        i for i, (a, b, _m, _p) in enumerate(m.edges) if m.services[a] == "frontend" and m.services[b] == "cartservice"
    )
    assert (m.e_bytes[k], m.e_timeout_ms[k], m.e_retries[k]) == (5100.0, 300.0, 2)
    (tmp_path / "app.yaml").write_text(head + "edges:\n  - {caller: frontend, callee: cartservice, retries: -1}\n")
    with pytest.raises(ConfigError, match="retries"):
        load_app(str(tmp_path))


def test_an_edge_with_zero_calls_per_request_is_never_called():
    prm = {"a": quiet(1.0), "b": quiet(50.0)}
    st = step(app_of(["a", "b"], [("a", "b", 0.0, False)], prm), 1, pods([(0, 0, 1.0, 0.5), (1, 0, 1.0, 0.5)]))
    assert np.median(st.latency_ms) == pytest.approx(1.0, rel=0.05)
    assert st.calls_rps == 0.0
