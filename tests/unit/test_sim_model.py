"""The simulator: determinism, monotonicity in load, saturation, and exact call accounting."""

import numpy as np
import pytest

from policy.sim.app import AppSpec, ServiceParams, load_app
from policy.sim.engine import ClusterSpec, SimConfig, Simulation, rps_for_app, weighted_percentile
from policy.sim.kube_scheduler import KubeSchedulerModel
from policy.sim.model import NetworkModel, PerfModel, PodArrays
from policy.sim.traces import load_trace
from policy.state import ServiceEdge, ServiceGraph


def tiny_app(cpu_ms=1.0, p50=1.0, mean=1.0001, edges=(("a", "b", 1.0),), timeout_ms=1000.0, cpu_cv=1.0):
    graph = ServiceGraph.build(["a", "b"], [ServiceEdge(c, d, calls_per_request=m) for c, d, m in edges])
    params = {
        s: ServiceParams(cpu_ms_per_request=cpu_ms, latency_p50_ms=p50, latency_mean_ms=mean, cpu_cv=cpu_cv)
        for s in graph.services
    }
    return AppSpec("tiny", (), (), graph, params, {"a": 1.0}, slo_p95_ms=100.0, timeout_ms=timeout_ms)


def pods(services, nodes, limit=1.0):
    return PodArrays(np.array(services), np.array(nodes), np.full(len(services), limit), np.full(len(services), 0.1))


def step(app, lam, pa, n_nodes=2, seed=0, n=4000, net=NetworkModel()):
    m = PerfModel(app, net)
    return m.step(lam, pa, np.full(n_nodes, 4.0), [""] * n_nodes, np.random.default_rng(seed), n, app.timeout_ms)


def test_visits_follow_calls_per_request_along_the_graph():
    app = tiny_app(edges=(("a", "b", 2.5),))
    m = PerfModel(app)
    assert m.visits.tolist() == [1.0, 2.5]


def test_a_cycle_is_cut_so_visits_stay_finite():
    app = tiny_app(edges=(("a", "b", 1.0), ("b", "a", 1.0)))
    assert np.isfinite(PerfModel(app).visits).all()


def test_the_same_seed_gives_the_same_step_and_another_seed_does_not():
    app = tiny_app()
    pa = pods([0, 1], [0, 1])
    a, b, c = step(app, 100, pa, seed=1), step(app, 100, pa, seed=1), step(app, 100, pa, seed=2)
    assert np.array_equal(a.latency_ms, b.latency_ms)
    assert not np.array_equal(a.latency_ms, c.latency_ms)


def test_more_load_never_gives_less_latency():
    app = tiny_app(cpu_ms=5.0)
    pa = pods([0, 1], [0, 1], limit=1.0)
    means = [step(app, lam, pa, seed=3).latency_ms.mean() for lam in (10, 50, 100, 150, 190)]
    assert all(x <= y for x, y in zip(means, means[1:])), means


def test_no_request_is_faster_than_the_service_times_on_its_path():
    # every request needs 1 ms of CPU at each of a and b (cv 0); own time and queueing only add
    app = tiny_app(cpu_ms=1.0, p50=0.001, mean=0.0011, cpu_cv=0.0)
    for lam in (10, 500, 1500):
        st = step(app, lam, pods([0, 1], [0, 0], limit=2.0))
        assert st.latency_ms.min() >= 2.0 * 1.0 - 1e-9


def test_a_saturated_service_fails_requests_and_an_unsaturated_one_does_not():
    app = tiny_app(cpu_ms=10.0)  # 10 ms CPU, limit 1 core -> 100 rps capacity per pod
    low = step(app, 20, pods([0, 1], [0, 1]))
    high = step(app, 400, pods([0, 1], [0, 1]))
    assert low.fail_frac == 0.0
    assert high.fail_frac > 0.5


def test_a_service_without_ready_pods_fails_every_request_that_reaches_it():
    st = step(tiny_app(), 10, pods([0], [0]))  # no pod of b
    assert st.fail_frac == 1.0


def test_cross_node_calls_are_exact_from_placement():
    app = tiny_app()
    together = step(app, 10, pods([0, 1], [0, 0]))
    apart = step(app, 10, pods([0, 1], [0, 1]))
    half = step(app, 10, pods([0, 1, 1], [0, 0, 1]))
    assert together.cross_calls_rps == 0.0
    assert apart.cross_calls_rps == pytest.approx(10.0)
    assert half.cross_calls_rps == pytest.approx(5.0)


def test_cross_node_calls_cost_the_network_delay():
    net = NetworkModel(same_node_ms=0.0, same_zone_ms=50.0, cross_zone_ms=50.0)
    app = tiny_app()
    together = step(app, 10, pods([0, 1], [0, 0]), net=net).latency_ms.mean()
    apart = step(app, 10, pods([0, 1], [0, 1]), net=net).latency_ms.mean()
    assert apart - together == pytest.approx(50.0, rel=0.05)


def test_cpu_contention_on_a_shared_node_slows_requests():
    app = tiny_app(cpu_ms=5.0)
    m = PerfModel(app)
    pa_shared = pods([0, 1], [0, 0], limit=1.0)
    pa_apart = pods([0, 1], [0, 1], limit=1.0)
    cores = np.array([0.6, 0.6])
    shared = m.step(100, pa_shared, cores, ["", ""], np.random.default_rng(0), 4000)
    apart = m.step(100, pa_apart, cores, ["", ""], np.random.default_rng(0), 4000)
    assert shared.pod_sojourn_ms.min() > apart.pod_sojourn_ms.max()


def test_weighted_percentile_matches_numpy_for_equal_weights():
    x = np.random.default_rng(0).exponential(size=1001)
    assert weighted_percentile(x, np.ones_like(x), 50) == pytest.approx(np.percentile(x, 50), rel=0.01)


def run_ob(seed, peak=0.8, minutes=10):
    app = load_app("online-boutique")
    m = PerfModel(app)
    rps = rps_for_app(load_trace("nasa", minutes), m, app, peak)
    sim = Simulation(
        app, rps, ClusterSpec(nodes=8), KubeSchedulerModel(), SimConfig(minutes=minutes, seed=seed, n_samples=500)
    )
    return sim.run()


def test_a_whole_simulation_is_deterministic_per_seed():
    a, b, c = run_ob(7), run_ob(7), run_ob(8)
    assert a.metrics == b.metrics
    assert a.metrics != c.metrics


def test_a_whole_simulation_reports_every_metric_and_places_every_pod():
    r = run_ob(0)
    assert set(r.metrics) == {
        "latency_mean_ms",
        "latency_p95_ms",
        "latency_p99_ms",
        "failed_pct",
        "slo_violation_pct",
        "cpu_core_hours",
        "evictions",
        "cross_node_call_pct",
    }
    assert r.pods_placed == 12 and r.unschedulable == 0
    # 12 pods' CPU requests (1570m) for 10 minutes
    assert r.metrics["cpu_core_hours"] == pytest.approx(1.57 * 10 / 60)
    # every offered request is served or failed, per minute and overall
    s = r.series
    assert np.allclose(np.add(s["served"], s["failed"]), s["offered"])
    assert r.extra["served_requests"] + r.extra["failed_requests"] == pytest.approx(r.extra["offered_requests"])
    assert r.extra["offered_requests"] == pytest.approx(60.0 * sum(s["rps"]))


def test_overloading_the_app_fails_requests():
    assert run_ob(0, peak=3.0).metrics["failed_pct"] > run_ob(0, peak=0.5).metrics["failed_pct"]
