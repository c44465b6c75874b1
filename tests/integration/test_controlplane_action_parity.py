"""One truth for every action (issue 19): the same case driven through the real control plane (kube-apiserver 1.36,
kube-controller-manager, kwok nodes) and through the simulator gives the same outcome and the same object, because
the simulator serves the descheduler's LIVE scaler and resizer (policy/sim/subresources.py) and answers as the API
server does. Per action: in-place resizes of a Guaranteed pod (its limit follows its request) and of a Burstable pod
(the limit keeps its ratio), a resize beyond the node's allocatable (refused: no_room, nothing changed), scaling a
Deployment through deployments/scale, and an eviction a PodDisruptionBudget refuses."""

from __future__ import annotations

import numpy as np
import pytest
from cp_helpers import apply, deployment, get_json, pdb, wait_for, wait_running

from descheduler.kube import KubeEvictor, KubeResizer, KubeScaler
from descheduler.resize import ResizeOrder, container_cpu
from policy.observe import parse_pdb, parse_pod, parse_workload
from policy.sim.app import AppSpec, ServiceParams
from policy.sim.engine import ClusterSpec, SimConfig, Simulation
from policy.sim.kube_scheduler import KubeSchedulerModel
from policy.sim.subresources import SimResizer, SimScaler
from policy.state import ServiceGraph

pytestmark = pytest.mark.controlplane

NODE_CPU_M = 4000


def guaranteed(name: str) -> dict:
    """One pod of 100m CPU and 64Mi memory, requests = limits: Guaranteed."""
    d = deployment(name, scheduler="default-scheduler", cpu="100m")
    d["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "100m", "memory": "64Mi"}
    return d


def burstable(name: str) -> dict:
    """One pod of 200m CPU (limit 400m) and 64Mi memory (limit 128Mi): Burstable."""
    d = deployment(name, scheduler="default-scheduler", cpu="200m")
    d["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "400m", "memory": "128Mi"}
    return d


def simulation(ns: str, deployments: list[dict]) -> Simulation:
    """A simulated cluster of one 4-core node running ``deployments`` in namespace ``ns`` (as the kwok node does)."""
    objs = []
    for d in deployments:
        o = {**d, "metadata": {**d["metadata"], "namespace": ns}}
        objs.append(o)
    workloads = tuple(parse_workload(o) for o in objs)
    services = [w.service for w in workloads]
    app = AppSpec(
        "parity",
        workloads,
        tuple(objs),
        ServiceGraph.build(services, []),
        {s: ServiceParams() for s in services},
        {services[0]: 1.0},
        100.0,
        1000.0,
    )
    sim = Simulation(
        app,
        np.full(3, 1.0),
        ClusterSpec(nodes=1, cpu_m=NODE_CPU_M, memory_bytes=16 << 30, zones=()),
        KubeSchedulerModel(),
        SimConfig(minutes=3, seed=0, n_samples=20),
    )
    sim.advance()
    return sim


def live_pod(cp, ns: str, deployment_name: str) -> dict:
    (p,) = [
        x
        for x in wait_running(cp, ns, 1, f"hrl-test/deployment={deployment_name}")
        if x["metadata"]["labels"]["hrl-test/deployment"] == deployment_name
    ]
    return p


def sim_pod(sim: Simulation, deployment_name: str):
    return next(
        p
        for p in sim.cluster.pods
        if p.alive and p.obj["metadata"]["labels"].get("hrl-test/deployment") == deployment_name
    )


def resources(pod_obj: dict) -> dict:
    return pod_obj["spec"]["containers"][0]["resources"]


def resized_live(cp, ns: str, name: str, before_rv: str) -> dict:
    return wait_for(
        lambda: (p := get_json(cp, "pod", name, "-n", ns))["metadata"]["resourceVersion"] != before_rv and p,
        30,
        f"pod {ns}/{name} to be resized",
    )


@pytest.mark.parametrize(
    ("make", "target_m"),
    [(guaranteed, 200), (burstable, 300), (guaranteed, NODE_CPU_M + 1000)],
    ids=["guaranteed", "burstable", "beyond-allocatable"],
)
def test_a_resize_has_the_same_outcome_and_leaves_the_same_pod_on_the_cluster_and_in_the_simulator(
    control_plane, namespace, kwok_nodes, make, target_m
):
    cp, ns = control_plane, namespace
    kwok_nodes(1, cpu=str(NODE_CPU_M // 1000))
    d = make("web")
    apply(cp, ns, [d])
    live = live_pod(cp, ns, "web")
    wait_for(
        lambda: (
            (get_json(cp, "pod", live["metadata"]["name"], "-n", ns).get("status") or {}).get("containerStatuses")
            or [{}]
        )[0].get("resources"),
        30,
        "kwok to report the container's resources",
    )
    live = get_json(cp, "pod", live["metadata"]["name"], "-n", ns)
    sim = simulation(ns, [d])
    spod = sim_pod(sim, "web")
    info = parse_pod(live)

    live_order = ResizeOrder(info.key, info.requests.cpu_m, target_m, f"{ns}/web", reason="burst")
    sim_order = ResizeOrder(spod.info.key, spod.info.requests.cpu_m, target_m, f"{ns}/web", reason="burst")
    got_live = KubeResizer(cp.api("hrl-descheduler")).resize(live_order)
    got_sim = SimResizer(sim).resize(sim_order)
    assert got_live.outcome == got_sim.outcome, (got_live.message, got_sim.message)
    if got_live.outcome == "resized":
        after = resized_live(cp, ns, live["metadata"]["name"], live["metadata"]["resourceVersion"])
        assert container_cpu(after) == container_cpu(spod.obj)
        assert resources(after) == resources(spod.obj)
        assert sim.result().extra["resizes"] == 1
    else:
        assert got_live.outcome == "no_room"
        assert resources(get_json(cp, "pod", live["metadata"]["name"], "-n", ns)) == resources(live)
        assert spod.info.requests.cpu_m == 100 and sim.result().extra["resizes"] == 0


def test_scaling_has_the_same_outcomes_on_the_cluster_and_in_the_simulator(control_plane, namespace, kwok_nodes):
    cp, ns = control_plane, namespace
    kwok_nodes(1)
    d = guaranteed("api")
    apply(cp, ns, [d])
    wait_running(cp, ns, 1)
    sim = simulation(ns, [d])
    live, simulated = KubeScaler(cp.api("hrl-descheduler")), SimScaler(sim)
    for target, expected in ((3, "scaled"), (3, "unchanged"), (2, "scaled")):
        a, b = live.scale(f"{ns}/api", target), simulated.scale(f"{ns}/api", target)
        assert (a.outcome, a.current, a.target) == (b.outcome, b.current, b.target) == (expected, b.current, target)
    assert get_json(cp, "deployment", "api", "-n", ns)["spec"]["replicas"] == 2 == sim.cluster.replicas[f"{ns}/api"]
    assert live.scale(f"{ns}/nope", 2).outcome == simulated.scale(f"{ns}/nope", 2).outcome == "not_found"


def test_an_eviction_a_pdb_forbids_is_refused_on_the_cluster_and_in_the_simulator(control_plane, namespace, kwok_nodes):
    cp, ns = control_plane, namespace
    kwok_nodes(1)
    d = guaranteed("db")
    budget = pdb("db", d["spec"]["selector"]["matchLabels"], 1)
    apply(cp, ns, [d, budget])
    live = live_pod(cp, ns, "db")
    wait_for(
        lambda: (get_json(cp, "pdb", "db", "-n", ns).get("status") or {}).get("expectedPods") == 1,
        30,
        "the disruption controller to count the PDB's pod",
    )
    sim = simulation(ns, [d])
    sim.cluster.pdbs.append(parse_pdb({**budget, "metadata": {**budget["metadata"], "namespace": ns}}))
    spod = sim_pod(sim, "db")
    a = KubeEvictor(cp.api("hrl-descheduler")).evict(parse_pod(live), "parity")
    b = sim.evictor.evict(spod.info, "parity")
    assert a.outcome == b.outcome == "refused"
    assert get_json(cp, "pod", live["metadata"]["name"], "-n", ns)["metadata"]["uid"] == live["metadata"]["uid"]
    assert spod.alive and sim.result().metrics["evictions"] == 0
