"""The topology network, interference and node speeds of the performance model, pinned to hand-computed values:
two calls sharing a link (below and past saturation), jitter's effect on the mean and the tail, link loads
from a placement, an interference slowdown, a faster node."""

import math

import numpy as np
import pytest

from policy.sim.app import AppSpec, CallParams, ServiceParams
from policy.sim.interference import Interference
from policy.sim.model import PerfModel, PodArrays
from policy.sim.network import GBPS, TopologyNetwork
from policy.state import ServiceEdge, ServiceGraph

# a visit that takes (almost) no time of its own: the network is all there is
QUIET = ServiceParams(cpu_ms_per_request=0.0, latency_p50_ms=1e-6, latency_mean_ms=1.000001e-6, cpu_cv=0.0)


def app(services, edges, params=None, calls=None, timeout_ms=10_000.0):
    g = ServiceGraph.build(services, [ServiceEdge(a, b, calls_per_request=m, parallel=p) for a, b, m, p in edges])
    params = params or dict.fromkeys(services, QUIET)
    return AppSpec("t", (), (), g, params, {services[0]: 1.0}, 1000.0, timeout_ms, calls=calls or {})


def pods(rows):
    a = np.array(rows, dtype=np.float64)
    return PodArrays(a[:, 0].astype(np.int64), a[:, 1].astype(np.int64), a[:, 2], a[:, 3])


def shared_link_case(max_flows=1024):
    """a on node 0 calls b then c, both on node 1; 125 kB responses over 100 Mbit/s NICs: 10 ms alone."""
    calls = {("a", "b"): CallParams(response_bytes=125_000), ("a", "c"): CallParams(response_bytes=125_000)}
    a = app(["a", "b", "c"], [("a", "b", 1.0, False), ("a", "c", 1.0, False)], calls=calls)
    net = TopologyNetwork(same_zone_ms=0.0, nic_gbps=0.1, flow_gbps=5.0, max_flows=max_flows)
    pa = pods([(0, 0, 4.0, 1.0), (1, 1, 4.0, 1.0), (2, 1, 4.0, 1.0)])
    return a, net.bind(["z", "z"], ["r", "r"], ["k0", "k1"]), pa


def test_two_calls_sharing_a_link_take_size_over_capacity_times_one_over_one_minus_rho():
    a, net, pa = shared_link_case()
    # 2 flows per request of 1 Mbit on 100 Mbit/s: rho = 2 * 40/s * 1e6 / 1e8 = 0.8
    st = PerfModel(a).step(40.0, pa, np.full(2, 8.0), ["z", "z"], np.random.default_rng(0), 200_000, net=net)
    util = dict(zip(net.link_names, st.link_util))
    assert util["node1:out"] == pytest.approx(0.8) and util["node0:in"] == pytest.approx(0.8)
    assert util["node0:out"] == 0.0 and util["node1:in"] == 0.0
    # M/G/1-PS: each transfer takes (b / C) / (1 - rho) = 10 ms / 0.2 = 50 ms on average; two per request
    assert st.fail_frac == 0.0
    assert st.latency_ms.mean() == pytest.approx(100.0, rel=0.02)


def test_past_saturation_a_full_link_refuses_flows_and_their_calls_fail():
    a, net, pa = shared_link_case(max_flows=4)
    # rho = 1.5 with at most K = 4 flows: P(full) = rho^4 / sum_{n<=4} rho^n = 5.0625 / 13.1875
    st = PerfModel(a).step(75.0, pa, np.full(2, 8.0), ["z", "z"], np.random.default_rng(1), 200_000, net=net)
    p_full = 1.5**4 / sum(1.5**n for n in range(5))
    assert p_full == pytest.approx(0.383886, abs=1e-6)
    # past saturation the link's queue persists (its relaxation time diverges), so both response flows of a request
    # meet the same queue (LinkState.queue_corr = 1): a request fails when that queue is full
    assert st.fail_frac == pytest.approx(p_full, abs=0.005)
    # an admitted flow finds n < 4 flows (P(n) ~ rho^n) and takes (b / C) (n + 1): 10 ms * 24.25 / 8.125
    per_flow = 10.0 * sum((n + 1) * 1.5**n for n in range(4)) / sum(1.5**n for n in range(4))
    assert per_flow == pytest.approx(29.846, abs=1e-3)
    assert st.latency_ms.mean() == pytest.approx(2 * per_flow, rel=0.02)


def test_link_loads_follow_the_placement_shares():
    # a has a pod on node 0 and one on node 1, b one pod on node 1: half of a's requests stay on node 1
    net = TopologyNetwork(nic_gbps=1.0).bind(["z"] * 3, ["r"] * 3, ["k"] * 3)
    load, flows = net.link_loads(
        np.array([0, 0, 1]),
        np.array([0, 1, 1]),
        np.array([2, 1]),
        np.array([0]),
        np.array([1]),
        np.array([100.0]),
        np.array([1000.0]),
        np.array([5000.0]),
    )
    got = dict(zip(net.link_names, load))
    # requests: node 0 -> node 1 for the pod on node 0 (50 calls/s x 1000 B); responses back (50 x 5000 B)
    assert got["node0:out"] == pytest.approx(50 * 1000.0)
    assert got["node1:in"] == pytest.approx(50 * 1000.0)
    assert got["node1:out"] == pytest.approx(50 * 5000.0)
    assert got["node0:in"] == pytest.approx(50 * 5000.0)
    assert got["node2:out"] == got["node2:in"] == 0.0
    assert dict(zip(net.link_names, flows))["node0:out"] == pytest.approx(50.0)
    assert net.capacity_bps[0] == pytest.approx(1.0 * GBPS)


def test_a_flow_is_timed_at_the_link_with_the_longest_time_per_byte_on_its_path():
    net = TopologyNetwork(nic_gbps=10.0, rack_uplink_gbps=1.0).bind(["z"] * 3, ["r"] * 3, ["k0", "k0", "k1"])
    ls = net.link_state(np.zeros(net.n_links), np.zeros(net.n_links))
    names = net.link_names
    same_rack = net.bottleneck(np.array([0]), np.array([1]), ls)
    other_rack = net.bottleneck(np.array([0]), np.array([2]), ls)
    assert names[same_rack[0]] == "node0:out"  # 10 Gbit/s NICs only (ties keep the first)
    assert names[other_rack[0]].startswith("rack") and names[other_rack[0]].endswith(":up")  # the 1 Gbit/s uplink
    assert net.bottleneck(np.array([1]), np.array([1]), ls)[0] == -1  # same node: no link


def test_jitter_adds_its_mean_to_the_mean_and_a_lognormal_tail_to_the_p95():
    params = {
        s: ServiceParams(cpu_ms_per_request=1.0, latency_p50_ms=1e-6, latency_mean_ms=1.000001e-6, cpu_cv=0.0)
        for s in "ab"
    }
    a = app(["a", "b"], [("a", "b", 1.0, False)], params=params)
    pa = pods([(0, 0, 4.0, 1.0), (1, 1, 4.0, 1.0)])
    cores = np.full(2, 8.0)
    base = TopologyNetwork(same_zone_ms=1.0).bind(["z", "z"], ["r", "r"], ["k0", "k1"])
    jit = TopologyNetwork(same_zone_ms=1.0, jitter_ms=2.0, jitter_cv=1.0).bind(["z", "z"], ["r", "r"], ["k0", "k1"])
    m = PerfModel(a)
    lam = 0.01  # no queueing: every visit takes exactly its 1 ms of CPU
    st0 = m.step(lam, pa, cores, ["z", "z"], np.random.default_rng(0), 200_000, net=base)
    st1 = m.step(lam, pa, cores, ["z", "z"], np.random.default_rng(0), 200_000, net=jit)
    assert np.allclose(st0.latency_ms, 1.0 + 1.0 + 1.0, atol=1e-3)  # CPU a + CPU b + RTT
    assert st1.latency_ms.mean() == pytest.approx(3.0 + 2.0, rel=0.01)  # + the jitter's mean
    # lognormal jitter of cv 1: sigma^2 = ln 2, its 95th percentile is exp(1.645 sigma - sigma^2 / 2) times its mean
    s = math.sqrt(math.log(2.0))
    assert np.percentile(st1.latency_ms, 95) == pytest.approx(3.0 + 2.0 * math.exp(1.6449 * s - s * s / 2), rel=0.02)


def test_the_delay_matrix_has_one_value_per_level_and_zone_pairs_of_their_own():
    spec = TopologyNetwork(
        same_node_ms=0.05,
        same_rack_ms=0.2,
        same_zone_ms=0.5,
        cross_zone_ms=2.0,
        cross_region_ms=30.0,
        zone_rtt_ms=(("za", "zb", 7.0),),
    )
    net = spec.bind(["za", "za", "za", "zb", "zc"], ["r1", "r1", "r1", "r1", "r2"], ["k0", "k0", "k1", "k0", "k0"])
    d = net.delay_ms
    assert d[0, 0] == 0.05 and d[0, 1] == 0.2 and d[0, 2] == 0.5
    assert d[0, 3] == d[3, 0] == 7.0  # the zone pair's own RTT
    assert d[0, 4] == 30.0  # another region


def test_edge_sites_draw_their_rtt_in_the_range_and_the_same_seed_gives_the_same_matrix():
    spec = TopologyNetwork(zone_rtt_range_ms=(5.0, 50.0), seed=7)
    zones = ["s1", "s2", "s3", "s4"]
    d1 = spec.bind(zones, ["r"] * 4, ["k"] * 4).delay_ms
    d2 = spec.bind(zones, ["r"] * 4, ["k"] * 4).delay_ms
    off = d1[~np.eye(4, dtype=bool)]
    assert np.all((off >= 5.0) & (off <= 50.0)) and np.array_equal(d1, d2) and np.array_equal(d1, d1.T)


def test_interference_slowdown_is_the_fixed_point_of_the_piecewise_linear_law():
    # 4 cores, tenants use 1.6, the app 0.8 at sigma = 1; knee 0.4, slope 1: sigma = 1 + (0.8 sigma + 1.6)/4 - 0.4
    inter = Interference(cpu_knee=0.4, cpu_slope=1.0, mem_slope=0.0)
    sig = inter.slowdown(np.array([4.0]), np.array([0.8]), np.array([0.0]), np.array([1.6]))
    assert sig[0] == pytest.approx(1.25)
    # with memory bandwidth: 10 GB/s, app 2 GB/s per busy core, tenants 5: sigma = 1.15 / 0.72
    inter = Interference(cpu_knee=0.4, cpu_slope=1.0, mem_knee=0.5, mem_slope=0.5, node_gbps=10.0)
    inter = Interference(**{**inter.__dict__, "app_gbps_per_core": 2.0, "background_gbps_per_core": 5.0})
    sig = inter.slowdown(np.array([4.0]), np.array([0.8]), np.array([0.0]), np.array([1.6]))
    assert sig[0] == pytest.approx(1.15 / 0.72)


def test_interference_slows_every_request_on_the_node_and_counts_the_slower_work_as_cpu_use():
    params = {"a": ServiceParams(cpu_ms_per_request=4.0, latency_p50_ms=1e-6, latency_mean_ms=1.000001e-6, cpu_cv=0.0)}
    a = app(["a"], [], params=params)
    pa = PodArrays(np.array([0]), np.array([0]), np.array([math.inf]), np.array([1.0]))
    m = PerfModel(a)
    inter = Interference(cpu_knee=0.4, cpu_slope=1.0, mem_slope=0.0)
    kw = {"node_bg_cores": np.array([1.6]), "interference": inter}
    st = m.step(200.0, pa, np.array([4.0]), ["z"], np.random.default_rng(0), 1000, **kw)
    assert st.node_slowdown[0] == pytest.approx(1.25)
    assert st.pod_cpu_cores[0] == pytest.approx(200.0 * 0.004 * 1.25)
    # a lone request (light load) under tenants using 2.4 of 4 cores: sigma = 1 + (2.4 + 0.004 sigma) / 4 - 0.4
    kw["node_bg_cores"] = np.array([2.4])
    st = m.step(1.0, pa, np.array([4.0]), ["z"], np.random.default_rng(0), 20_000, **kw)
    assert st.node_slowdown[0] == pytest.approx(1.2 / 0.999)
    assert st.latency_ms.mean() == pytest.approx(4.0 * 1.2 / 0.999, rel=0.002)


def test_a_node_twice_as_fast_halves_the_cpu_time():
    params = {"a": ServiceParams(cpu_ms_per_request=4.0, latency_p50_ms=1e-6, latency_mean_ms=1.000001e-6, cpu_cv=0.0)}
    a = app(["a"], [], params=params)
    pa = PodArrays(np.array([0]), np.array([0]), np.array([math.inf]), np.array([1.0]))
    st = PerfModel(a).step(0.01, pa, np.array([4.0]), ["z"], np.random.default_rng(0), 5000, node_speed=np.array([2.0]))
    assert np.allclose(st.latency_ms, 2.0, atol=1e-3)


def test_a_sidecar_adds_its_latency_per_call_and_its_cpu_on_the_node():
    params = {
        s: ServiceParams(cpu_ms_per_request=1.0, latency_p50_ms=1e-6, latency_mean_ms=1.000001e-6, cpu_cv=0.0)
        for s in "ab"
    }
    a = app(["a", "b"], [("a", "b", 2.0, False)], params=params)
    pa = pods([(0, 0, 4.0, 1.0), (1, 1, 4.0, 1.0)])
    net = TopologyNetwork(same_zone_ms=1.0, sidecar_ms=2.65, sidecar_cpu_ms=0.35).bind(
        ["z", "z"], ["r", "r"], ["k0", "k1"]
    )
    st = PerfModel(a).step(10.0, pa, np.full(2, 8.0), ["z", "z"], np.random.default_rng(0), 2000, net=net)
    # CPU 1 + 2 calls x (RTT 1 + sidecar 2.65 + CPU 1): 10.3 ms, with no queueing to speak of
    assert st.latency_ms.mean() == pytest.approx(1.0 + 2 * (1.0 + 2.65 + 1.0), rel=0.01)
    # proxies: node 0 sees 10 requests in and 20 calls out per second, node 1 20 in: 0.35 ms each
    assert st.node_sidecar_cores == pytest.approx([30 * 0.35e-3, 20 * 0.35e-3])
    assert st.pod_sidecar_cores == pytest.approx([30 * 0.35e-3, 20 * 0.35e-3])  # one pod per node here


def test_a_pods_measured_cpu_use_includes_its_mesh_proxy():
    from policy.sim.engine import Simulation
    from policy.sim.kube_scheduler import KubeSchedulerModel
    from policy.sim.scenario import build

    run = build("network-datacenter", app="sock-shop", minutes=2, seed=0, n_samples=200)
    sim = Simulation(run.app, run.rps, run.cluster, KubeSchedulerModel(), run.config)
    sim.run()
    st, ready = sim.last.step, sim.last.ready
    assert st.pod_sidecar_cores is not None and st.pod_sidecar_cores.sum() > 0.05
    np.testing.assert_allclose(
        np.bincount([p.node for p in ready], weights=st.pod_sidecar_cores, minlength=len(st.node_sidecar_cores)),
        st.node_sidecar_cores,
    )
    reported = {p.key: p.usage.cpu_m for p in sim.observe().pods if p.usage is not None}
    # what metrics-server reports for the pod: the app container and its proxy
    for p, app_cores, proxy_cores in zip(ready, st.pod_cpu_cores, st.pod_sidecar_cores):
        assert reported[p.info.key] == round(1000.0 * (app_cores + proxy_cores))


def test_the_discrete_event_twin_shares_a_link_by_processor_sharing_too():
    from policy.sim import des

    a, net, pa = shared_link_case()
    # rho = 0.5 at 25 requests/s: E[transfer] = 10 ms / (1 - 0.5) = 20 ms, two per request
    r = des.simulate(
        PerfModel(a), 25.0, pa, np.full(2, 8.0), ["z", "z"], duration_s=400.0, warmup_s=20.0, seed=2, net=net
    )
    est, ci = r.estimate("mean")
    assert r.fail_frac == 0.0 and ci / est < 0.06
    assert est == pytest.approx(40.0, rel=0.08)
    assert r.latency_ms.min() >= 20.0 - 1e-6  # each 1 Mbit response alone takes 10 ms


def test_the_discrete_event_twin_adds_the_jitter_and_the_sidecar_per_call():
    from policy.sim import des

    params = {
        s: ServiceParams(cpu_ms_per_request=1.0, latency_p50_ms=1e-6, latency_mean_ms=1.000001e-6, cpu_cv=0.0)
        for s in "ab"
    }
    a = app(["a", "b"], [("a", "b", 1.0, False)], params=params)
    pa = pods([(0, 0, 4.0, 1.0), (1, 1, 4.0, 1.0)])
    net = TopologyNetwork(same_zone_ms=1.0, jitter_ms=2.0, sidecar_ms=0.5).bind(["z", "z"], ["r", "r"], ["k0", "k1"])
    r = des.simulate(
        PerfModel(a), 5.0, pa, np.full(2, 8.0), ["z", "z"], duration_s=1000.0, warmup_s=1.0, seed=1, net=net
    )
    # CPU 1 + 1, RTT 1, sidecar 0.5, jitter 2 on average
    assert r.latency_ms.mean() == pytest.approx(5.5, rel=0.03)
    assert r.latency_ms.min() >= 3.5 - 1e-9


def test_the_per_pair_spread_is_symmetric_with_mean_one():
    n = 120
    d = TopologyNetwork(same_zone_ms=1.0, pair_cv=0.3, seed=5).bind(["z"] * n, ["r"] * n, [f"k{i}" for i in range(n)])
    off = d.delay_ms[~np.eye(n, dtype=bool)]
    assert np.array_equal(d.delay_ms, d.delay_ms.T)
    assert off.mean() == pytest.approx(1.0, abs=0.01) and off.std() == pytest.approx(0.3, abs=0.02)


def test_flows_of_one_visit_meet_correlated_queues_as_the_relaxation_time_says():
    a, net, pa = shared_link_case()
    ls = net.link_state(np.array([0.0, 0.5, 0.0, 0.0]) * net.capacity_bps, np.array([0.0, 1.0, 0.0, 0.0]))
    # c = exp(-(1 - sqrt(rho)) / (1 + sqrt(rho))): 1/e on an idle link, 0.8423 at rho = 0.5
    assert ls.queue_corr[0] == pytest.approx(math.exp(-1.0))
    assert ls.queue_corr[1] == pytest.approx(math.exp(-(1 - math.sqrt(0.5)) / (1 + math.sqrt(0.5))))
    assert ls.queue_corr[1] == pytest.approx(0.8423, abs=1e-4)
