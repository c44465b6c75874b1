"""The latency floor (policy.sim.floor): each request's own work at the fastest node's speed plus its own time and its
calls' same-node network cost, with nothing contended; no stack's run serves the same requests faster."""

from dataclasses import dataclass, replace

import numpy as np
import pytest

from policy.sim.engine import ClusterSpec, SimConfig
from policy.sim.floor import FLOOR_KEYS, latency_floor
from policy.sim.model import NetworkModel
from policy.sim.scenario import build
from policy.sim.stacks import run_stack
from tests.unit.test_sim_model import tiny_app


@dataclass(frozen=True)
class SpeedCluster(ClusterSpec):
    speeds: tuple[float, ...] = ()

    def node_speeds(self):
        return np.array(self.speeds) if self.speeds else None


#: A network whose calls cost nothing (the same-node call is what the floor pays).
FREE = NetworkModel(same_node_ms=0.0, same_node_gbps=1e12)


def deterministic_app(timeout_ms=1000.0):
    # a -> b once per request; each visit 2 ms of CPU (cv 0) and 3 ms of own time (a lognormal of almost no spread)
    return tiny_app(cpu_ms=2.0, p50=3.0, mean=3.000001, cpu_cv=0.0, timeout_ms=timeout_ms)


def test_the_floor_is_the_path_s_own_work_at_full_speed_plus_its_own_time():
    cfg = SimConfig(minutes=3, n_samples=500, network=FREE)
    f = latency_floor(deterministic_app(), np.full(3, 50.0), ClusterSpec(nodes=2), cfg)
    assert f.latency_p50_ms == pytest.approx(10.0, rel=2e-3) and f.latency_p95_ms == pytest.approx(10.0, rel=2e-3)
    assert f.failed_pct == 0.0 and set(FLOOR_KEYS) == {"latency_p50_ms", "latency_p95_ms", "failed_pct"}
    # the one call a -> b pays the network's same-node delay, and no other class's
    slow = NetworkModel(same_node_ms=1.5, same_zone_ms=50.0, cross_zone_ms=90.0, same_node_gbps=1e12)
    g = latency_floor(deterministic_app(), np.full(3, 50.0), ClusterSpec(nodes=2), replace(cfg, network=slow))
    assert g.latency_p95_ms == pytest.approx(11.5, rel=2e-3)


def test_the_floor_reads_the_fastest_node_and_ignores_the_cluster_s_size_and_the_load():
    app = deterministic_app()
    cfg = SimConfig(minutes=3, n_samples=500, network=FREE)
    fast = latency_floor(app, np.full(3, 50.0), SpeedCluster(nodes=2, speeds=(0.5, 2.0)), cfg)
    assert fast.latency_p95_ms == pytest.approx(2 * (2.0 / 2.0 + 3.0), rel=2e-3)  # CPU at twice the speed
    # 2 nodes at 50 requests/s would saturate a 2-core cluster at 20,000 (a request needs 4 ms of CPU): not the floor
    base = latency_floor(app, np.full(3, 50.0), ClusterSpec(nodes=2, cpu_m=1000), cfg)
    busy = latency_floor(app, np.full(3, 20_000.0), ClusterSpec(nodes=20), cfg)
    assert busy.latency_p95_ms == pytest.approx(base.latency_p95_ms, rel=1e-6) and busy.failed_pct == 0.0


def test_requests_whose_own_time_outlasts_the_timeout_fail_in_the_floor_too():
    # own time lognormal median 3 ms, mean 30 ms: a long tail, cut at a 20 ms end-to-end timeout
    app = tiny_app(cpu_ms=0.1, p50=3.0, mean=30.0, cpu_cv=0.0, timeout_ms=20.0)
    f = latency_floor(app, np.full(3, 50.0), ClusterSpec(nodes=2), SimConfig(minutes=3, n_samples=2000))
    assert 1.0 < f.failed_pct < 50.0 and f.latency_p95_ms <= 20.0


def test_the_seed_picks_the_samples():
    app = tiny_app(cpu_ms=1.0, p50=1.0, mean=2.0)
    a, b, c = (
        latency_floor(app, np.full(2, 10.0), ClusterSpec(nodes=2), SimConfig(minutes=2, n_samples=300, seed=s))
        for s in (1, 1, 2)
    )
    assert a == b and a != c


def test_with_a_topology_network_the_floor_pays_the_mesh_sidecar_on_every_call():
    run = build("network-datacenter", minutes=3, seed=0, n_samples=400)
    with_mesh = latency_floor(run.app, run.rps, run.cluster, run.config)
    classic = latency_floor(run.app, run.rps, run.cluster, replace(run.config, network_topology=None))
    sidecar_ms = run.config.network_topology.sidecar_ms
    assert sidecar_ms > 1 and with_mesh.latency_p50_ms > classic.latency_p50_ms + sidecar_ms


@pytest.mark.parametrize(
    ("scenario", "app", "trace"),
    [
        ("baseline-2026-11", "dsb-hotel-reservation", "nasa"),
        ("shared-cluster", None, None),
        ("network-datacenter", "sock-shop", None),
    ],
)
def test_no_stack_serves_the_same_requests_faster_than_the_floor(scenario, app, trace):
    run = build(scenario, app=app, trace=trace, minutes=6, seed=3, n_samples=400)
    floor = latency_floor(run.app, run.rps, run.cluster, run.config)
    for stack in ("default-kube-scheduler+hpa", "hrl-scheduler"):
        res = run_stack(stack, run.app, run.rps, run.cluster, run.config)
        assert res.metrics["failed_pct"] >= floor.failed_pct - 0.05, stack
        assert floor.latency_p95_ms <= res.metrics["latency_p95_ms"], stack


def test_a_trace_shorter_than_the_run_is_refused():
    with pytest.raises(ValueError, match="trace"):
        latency_floor(deterministic_app(), np.full(2, 10.0), ClusterSpec(), SimConfig(minutes=3))
