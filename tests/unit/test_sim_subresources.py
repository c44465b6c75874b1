"""The simulator serves the descheduler's LIVE resizer and scaler (policy.sim.subresources): the same patch as on a
cluster (a Guaranteed pod's CPU limit follows its request, so it stays Guaranteed), the API server's refusals as its
status codes, and a simulation that counts only what it took."""

from __future__ import annotations

import pytest

from descheduler.resize import ApiResizer, ResizeOrder, container_cpu
from policy.sim.engine import Simulation
from policy.sim.scenario import build
from policy.sim.stacks import StackContext, build_stack
from policy.sim.subresources import SimResizeApi, SimResizer, SimScaler


def started(app: str) -> Simulation:
    run = build("baseline-2026-11", app=app, minutes=3, seed=0, offset_min=300, n_samples=100)
    built = build_stack("default-kube-scheduler", StackContext(run.app, run.cluster, 0, run.config))
    sim = built.simulation(run.app, run.rps, run.cluster, run.config)
    sim.advance()
    return sim


def first_pod(sim: Simulation, qos: str):
    for p in sim.cluster.pods:
        if p.alive and p.node >= 0 and not sim.is_background(p):
            cs = container_cpu(p.obj)
            guaranteed = all(c.limit_m == c.request_m for c in cs)
            if (qos == "Guaranteed") == guaranteed:
                return p
    raise AssertionError(f"no {qos} pod")


def order(pod, cpu_m: int) -> ResizeOrder:
    return ResizeOrder(pod.info.key, pod.info.requests.cpu_m, cpu_m, pod.workload, reason="burst")


def test_a_guaranteed_pod_is_resized_with_its_limit_and_stays_guaranteed():
    sim = started("dsb-social-network")  # request = limit = 100m
    pod = first_pod(sim, "Guaranteed")
    old = pod.info.requests.cpu_m
    res = SimResizer(sim).resize(order(pod, old + 100))
    assert res.outcome == "resized", res.message
    assert pod.info.requests.cpu_m == old + 100 and pod.info.limits.cpu_m == old + 100
    assert sim.result().extra["resizes"] == 1


def test_a_burstable_pod_keeps_its_limit_to_request_ratio():
    sim = started("online-boutique")
    pod = first_pod(sim, "Burstable")
    before = container_cpu(pod.obj)
    target = before[0].request_m * 2
    assert SimResizer(sim).resize(order(pod, target)).outcome == "resized"
    after = container_cpu(pod.obj)
    assert after[0].request_m == target
    assert after[0].limit_m == round(before[0].limit_m * target / before[0].request_m)


def test_a_resize_beyond_the_nodes_allocatable_is_refused_as_no_room_and_not_counted():
    sim = started("dsb-social-network")
    pod = first_pod(sim, "Guaranteed")
    cores = sim.cluster.nodes[pod.node].allocatable.cpu_m
    res = SimResizer(sim).resize(order(pod, cores + 1000))
    assert res.outcome == "no_room" and "allocatable" in res.message
    assert pod.info.requests.cpu_m == 100 and sim.result().extra["resizes"] == 0


def test_a_deferred_resize_is_taken_and_actuated_when_the_pod_fits():
    sim = started("dsb-social-network")
    pod = first_pod(sim, "Guaranteed")
    node = sim.cluster.nodes[pod.node]
    others = sum(p.info.requests.cpu_m for p in sim.cluster.pods_on(pod.node) if p is not pod)
    target = node.allocatable.cpu_m - others + 50  # fits the node, not next to the others
    assert SimResizer(sim).resize(order(pod, target)).outcome == "resized"  # the API server took it
    assert pod.info.requests.cpu_m == 100 and pod.pending_resize is not None
    assert sim.result().extra["resizes_deferred"] == 1
    for other in [p for p in sim.cluster.pods_on(pod.node) if p is not pod]:
        sim.cluster.delete_pod(other, sim.now_s)
    sim.advance()
    assert pod.info.requests.cpu_m == target and pod.pending_resize is None


def test_dry_runs_change_nothing_and_gone_pods_are_not_found():
    sim = started("dsb-social-network")
    pod = first_pod(sim, "Guaranteed")
    assert SimResizer(sim, dry_run=True).resize(order(pod, 200)).outcome == "dry_run"
    assert SimResizer(sim).dry_run_twin().dry_run is True
    assert pod.info.requests.cpu_m == 100
    gone = ResizeOrder("default/nope", 100, 200, pod.workload)
    assert SimResizer(sim).resize(gone).outcome == "not_found"


def test_a_simulation_without_pods_resize_answers_unsupported():
    class NoResize:
        def __init__(self, sim):
            self.cluster = sim.cluster

    sim = started("dsb-social-network")
    pod = first_pod(sim, "Guaranteed")
    api = SimResizeApi(NoResize(sim))
    assert ApiResizer(api).resize(order(pod, 200)).outcome == "unsupported"


@pytest.mark.parametrize(("replicas", "outcome"), [(3, "scaled"), (1, "unchanged")])
def test_the_simulators_scaler_is_the_live_scaler(replicas, outcome):
    sim = started("dsb-social-network")
    w = next(iter(sim.cluster.replicas))
    sim.cluster.replicas[w] = 1
    res = SimScaler(sim).scale(w, replicas)
    assert res.outcome == outcome and sim.cluster.replicas[w] == replicas
    assert SimScaler(sim).scale("default/nope", 2).outcome == "not_found"
