"""Cluster events and in-place resize in the simulation loop, pinned to hand-computed values: a node failure's
lost requests and the rescheduling of its pods, a drain (cordon + evictions, PodDisruptionBudgets), an
in-place resize changing a pod's service time without a restart (and its refusals), node utilisation."""

import math

import numpy as np
import pytest

from policy.observe import parse_pdb, parse_workload
from policy.sim.app import AppSpec, ServiceParams
from policy.sim.cluster import TAINT_UNREACHABLE
from policy.sim.engine import BackgroundPod, ClusterSpec, SimConfig, Simulation
from policy.sim.events import NodeDrain, NodeFailure
from policy.sim.kube_scheduler import KubeSchedulerModel
from policy.sim.synthetic import deployment
from policy.state import ServiceEdge, ServiceGraph


def small_app(replicas=2, cpu_req=500, cpu_lim=1000, cpu_ms=2.0, services=("a", "b")):
    deps = [deployment(s, replicas, cpu_req, cpu_lim, 64, 256) for s in services]
    edges = [ServiceEdge(services[i], services[i + 1]) for i in range(len(services) - 1)]
    graph = ServiceGraph.build(list(services), edges)
    params = {s: ServiceParams(cpu_ms_per_request=cpu_ms, latency_p50_ms=1.0, latency_mean_ms=1.2) for s in services}
    workloads = tuple(parse_workload(d) for d in deps)
    return AppSpec("small", workloads, tuple(deps), graph, params, {services[0]: 1.0}, 1000.0, 10_000.0)


def sim_with(app, events=(), nodes=3, minutes=12, rate=50.0, cpu_m=4000, background=()):
    spec = ClusterSpec(nodes=nodes, cpu_m=cpu_m, zones=("z1", "z2", "z3"), background=background)
    cfg = SimConfig(minutes=minutes, seed=3, events=tuple(events))
    return Simulation(app, np.full(minutes, rate), spec, KubeSchedulerModel(), cfg)


def busiest_node(app) -> str:
    """The node holding most of the app's pods at the start (deterministic for the seed)."""
    sim = sim_with(app)
    sim.start()
    nodes = [p.node for p in sim.cluster.live_pods()]
    return sim.cluster.nodes[max(set(nodes), key=nodes.count)].name


def test_a_failed_node_loses_its_inflight_and_grace_period_requests_and_its_pods_are_replaced_after_the_toleration():
    app = small_app()
    node = busiest_node(app)
    sim = sim_with(app, [NodeFailure(node, at_min=2)])
    i = [n.name for n in sim.cluster.nodes].index(node)
    sim.advance()
    sim.advance()
    before = sim.last  # minute 1: what was in flight and arriving on the node's pods
    on_node = [k for k, p in enumerate(before.ready) if p.node == i]
    assert on_node
    expected = sum(before.step.pod_inflight[k] + before.step.pod_rps[k] * 50.0 for k in on_node)
    doomed = {before.ready[k].info.key for k in on_node}
    m2 = sim.advance()
    # Little's law in flight + every request routed there until the node lifecycle controller notices (50 s)
    assert m2.lost_inflight == pytest.approx(expected)
    assert m2.failed >= expected
    assert all(p.node != i for p in m2.ready)
    node_info = sim.cluster.nodes[i]
    assert {(t.key, t.effect) for t in node_info.taints} == {
        (TAINT_UNREACHABLE, "NoSchedule"),
        (TAINT_UNREACHABLE, "NoExecute"),
    }
    # deleted 50 s + 300 s (DefaultTolerationSeconds) after the failure at 120 s: at 470 s, i.e. minute 8
    for _ in range(5):  # minutes 3..7
        sim.advance()
    assert doomed <= {p.info.key for p in sim.cluster.live_pods()}
    m8 = sim.advance()
    live = sim.cluster.live_pods()
    assert not doomed & {p.info.key for p in live}
    assert all(p.node != i for p in live) and len(live) == 4  # replaced by the ReplicaSets, placed elsewhere
    assert len(m8.ready) == 4  # Ready 20 s after binding, before the middle of the minute
    assert sim.result().extra["failed_nodes"] == [node]


def test_a_recovered_node_is_ready_and_schedulable_again():
    app = small_app()
    node = busiest_node(app)
    sim = sim_with(app, [NodeFailure(node, at_min=1, recover_after_min=2)])
    i = [n.name for n in sim.cluster.nodes].index(node)
    for _ in range(4):  # minutes 0..3: fails at 1, back at 3 (before the taint manager deletes its pods at 6)
        sim.advance()
    assert sim.cluster.nodes[i].ready and not sim.cluster.nodes[i].taints
    assert i not in sim.failed_nodes
    assert any(p.node == i for p in sim.last.ready)  # its pods (not yet deleted) started again


def test_a_drain_cordons_the_node_and_evicts_every_pod_which_is_placed_elsewhere():
    app = small_app()
    node = busiest_node(app)
    sim = sim_with(app, [NodeDrain(node, at_min=2)])
    i = [n.name for n in sim.cluster.nodes].index(node)
    sim.advance()
    sim.advance()
    before = sim.last
    on_node = [k for k, p in enumerate(before.ready) if p.node == i]
    expected_lost = sum(before.step.pod_inflight[k] for k in on_node)
    m2 = sim.advance()
    assert sim.cluster.nodes[i].unschedulable
    assert not sim.cluster.pods_on(i)
    assert m2.lost_inflight == pytest.approx(expected_lost)
    assert m2.evictions == 0  # the drain's evictions are not the stack's
    res = sim.result()
    assert res.extra["drain_evictions"] == len(on_node) and res.metrics["evictions"] == 0
    assert len(m2.ready) == 4 and all(p.node != i for p in m2.ready)


def test_a_drain_respects_a_pod_disruption_budget_and_gives_up_after_its_timeout():
    app = small_app()
    node = busiest_node(app)
    sim = sim_with(app, [NodeDrain(node, at_min=1, timeout_min=2, uncordon_after_min=4)])
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "a-pdb", "namespace": "default"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "a"}}},
    }
    sim.cluster.pdbs.append(parse_pdb(pdb))
    i = [n.name for n in sim.cluster.nodes].index(node)
    a_on_node = lambda: [p for p in sim.cluster.pods_on(i) if p.workload == "default/a"]  # noqa: E731
    sim.start()
    n_a = len(a_on_node())
    for _ in range(4):  # minutes 0..3: the drain evicts b's pods, a's are refused (429) and retried until 180 s
        sim.advance()
    assert len(a_on_node()) == n_a and sim.cluster.nodes[i].unschedulable
    sim.advance()  # minute 4 (240 s): past the timeout, the drain gave up; minute 5 uncordons
    sim.advance()
    assert not sim.cluster.nodes[i].unschedulable and len(a_on_node()) == n_a


def ps_mean_sojourn_ms(lam, x_ms, cores):
    """E[T] of a processor-sharing pod with ``cores`` cores, one core per request, Poisson arrivals:
    Little's law over the birth-death chain pi(n) ~ a^n / prod_k min(k, cores)."""
    a = lam * x_ms / 1000.0
    w, d = [], 1.0
    for n in range(2000):
        d = d * min(n, cores) if n else 1.0
        w.append(a**n / d)
    pi = np.array(w) / sum(w)
    return 1000.0 * float(np.dot(np.arange(len(pi)), pi)) / lam


def test_an_in_place_resize_changes_the_pods_service_time_without_a_restart():
    deps = [deployment("a", 1, 500, 1000, 64, 256)]
    graph = ServiceGraph.build(["a"], [])
    params = {"a": ServiceParams(cpu_ms_per_request=10.0, latency_p50_ms=0.01, latency_mean_ms=0.012)}
    app = AppSpec("one", tuple(parse_workload(d) for d in deps), tuple(deps), graph, params, {"a": 1.0}, 1e3, 1e4)
    sim = sim_with(app, nodes=1, cpu_m=8000, minutes=4)
    m0 = sim.advance()
    # limit 1 core at 50 req/s x 10 ms: M/G/1-PS, E[T] = x / (1 - rho) = 20 ms
    assert m0.step.pod_sojourn_ms[0] == pytest.approx(20.0, rel=1e-6)
    pod = m0.ready[0]
    res = sim.resize(pod.info.key, cpu_request_m=2000, cpu_limit_m=4000)
    assert res.outcome == "resized"
    m1 = sim.advance()
    assert m1.ready[0].info.key == pod.info.key and m1.ready[0].restarts == 0
    assert m1.ready[0].info.limits.cpu_m == 4000 and m1.ready[0].info.requests.cpu_m == 2000
    # 4 cores: up to 4 requests at full speed
    assert m1.step.pod_sojourn_ms[0] == pytest.approx(ps_mean_sojourn_ms(50.0, 10.0, 4), rel=1e-6)
    assert ps_mean_sojourn_ms(50.0, 10.0, 1) == pytest.approx(20.0)
    assert sim.result().extra["resizes"] == 1


def test_a_resize_the_node_cannot_fit_is_refused_with_a_typed_result():
    deps = [deployment("a", 1, 500, 1000, 64, 256), deployment("big", 1, 6000, 6000, 64, 256)]
    graph = ServiceGraph.build(["a", "big"], [])
    params = {s: ServiceParams() for s in ("a", "big")}
    app = AppSpec("two", tuple(parse_workload(d) for d in deps), tuple(deps), graph, params, {"a": 1.0}, 1e3, 1e4)
    sim = sim_with(app, nodes=1, cpu_m=8000, minutes=2)
    sim.start()
    key = next(p.info.key for p in sim.cluster.live_pods() if p.workload == "default/a")
    r = sim.resize(key, cpu_request_m=9000, cpu_limit_m=9000)
    assert (r.outcome, r.pod) == ("infeasible", key) and "8000m" in r.message
    r = sim.resize(key, cpu_request_m=3000, cpu_limit_m=3000)
    assert r.outcome == "deferred" and "2000m" in r.message  # 8000 - 6000 left by the other pod
    r = sim.resize(key, cpu_request_m=1000, cpu_limit_m=1000, memory_request_bytes=256 * 2**20)
    assert r.outcome == "invalid" and "QoS" in r.message  # Burstable -> Guaranteed
    assert sim.resize("default/nope").outcome == "not_found"
    assert sim.cluster.live_pods()[0].info.requests.cpu_m == 500  # nothing applied


def test_node_utilization_counts_app_pods_and_background_tenants():
    bg = (BackgroundPod("tenant-0", 0, 500, 2**30, 1000.0, 2**29),)
    app = small_app(replicas=1)
    sim = sim_with(app, nodes=2, cpu_m=4000, minutes=3, rate=0.0, background=bg)
    res = sim.run()
    # no traffic: node 0 runs its tenant's 1 core of 4 (25 %), node 1 nothing
    assert res.series["cluster_cpu_util_pct"] == pytest.approx([12.5] * 3)
    # (node, minute) samples: three of 25 %, three of 0 %
    ex = res.extra
    assert (ex["node_cpu_util_p10_pct"], ex["node_cpu_util_p50_pct"], ex["node_cpu_util_p90_pct"]) == pytest.approx(
        (0.0, 12.5, 25.0)
    )
    assert ex["node_cpu_util_mean_pct"] == pytest.approx(12.5)
    assert math.isclose(res.extra["cluster_cpu_util_mean_pct"], 12.5)
