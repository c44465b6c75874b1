"""The offline reference: its placement MIP equals brute force on a tiny instance, its autoscaling is the exact
minimiser of its surrogate, and as a stack it scales ahead of the load it knows."""

import itertools

import numpy as np
import pytest

from policy.sim.reference import (
    PlacementProblem,
    _service_costs,
    foresight_replicas,
    placement_objective,
    solve_placement,
)


def tiny(use_cap=3.0):
    # three services (2, 1 and 2 pods) on three nodes in two zones; edges 0->1 (heavy) and 1->2
    return PlacementProblem(
        replicas=np.array([2, 1, 2]),
        pod_cpu_m=np.array([500.0, 700.0, 400.0]),
        pod_mem_bytes=np.array([1e8, 1e8, 1e8]),
        pod_use_cores=np.array([0.4, 0.9, 0.3]),
        free_cpu_m=np.array([1200.0, 1200.0, 1000.0]),
        free_mem_bytes=np.array([1e9, 1e9, 1e9]),
        free_pods=np.array([3.0, 3.0, 3.0]),
        use_cap_cores=np.array([1.2, 1.2, use_cap]),
        zone=np.array([0, 0, 1]),
        edges=np.array([[0, 1], [1, 2]]),
        w_node=np.array([5.0, 2.0]),
        w_zone=np.array([1.5, 1.0]),
    )


def brute_force(p):
    best, arg = None, None
    per_service = []
    for r in p.replicas:
        per_service.append([c for c in itertools.product(range(r + 1), repeat=len(p.free_cpu_m)) if sum(c) == r])
    for rows in itertools.product(*per_service):
        x = np.array(rows)
        v = placement_objective(p, x)
        if v is not None and (best is None or v > best + 1e-12):
            best, arg = v, x
    return best, arg


@pytest.mark.parametrize("cap", [3.0, 0.7])
def test_the_placement_mip_equals_brute_force_on_a_tiny_instance(cap):
    p = tiny(cap)
    best, _ = brute_force(p)
    sol = solve_placement(p)
    assert best is not None
    assert sol.objective == pytest.approx(best)
    assert placement_objective(p, sol.x) == pytest.approx(best)
    assert sol.mip_gap <= 1e-4 and not sol.relaxed


def test_a_placement_that_only_fits_without_the_cpu_use_cap_is_solved_relaxed():
    p = tiny()
    p = PlacementProblem(**{**p.__dict__, "use_cap_cores": np.array([0.1, 0.1, 0.1])})
    sol = solve_placement(p)
    assert sol.relaxed and sol.x.sum(axis=1).tolist() == [2, 1, 2]


def test_pods_whose_requests_cannot_fit_are_an_error():
    p = tiny()
    p = PlacementProblem(**{**p.__dict__, "free_cpu_m": np.array([100.0, 100.0, 100.0])})
    with pytest.raises(ValueError, match="requests do not fit"):
        solve_placement(p)


@pytest.fixture(scope="module")
def boutique():
    from policy.sim.app import load_app

    return load_app("online-boutique")


def test_foresight_replicas_are_the_exact_minimiser_of_the_surrogate_cost_each_minute(boutique):
    from policy.sim.model import PerfModel
    from policy.sim.reference import _workload_info

    rps = np.array([5.0, 60.0, 200.0])
    ws = ["default/frontend", "default/cartservice"]
    price = 20.0
    r = foresight_replicas(boutique, rps, ws, price, node_cores=2.0)
    model = PerfModel(boutique)
    info = _workload_info(boutique)
    for t, lam in enumerate(rps):
        for j, w in enumerate(ws):
            svc, req, lim = info[w]
            lat = _service_costs(model, lam, model.pos[svc], lim or 2.0, req, boutique.timeout_ms, 10)
            cost = [lat[k] + price * (k + 1) * req for k in range(10)]
            assert r[t, j] == int(np.argmin(cost)) + 1
    assert r[2].sum() > r[0].sum()  # more load, more replicas


def test_a_cpu_budget_raises_the_price_until_the_replicas_fit(boutique):
    rps = np.array([400.0])
    ws = ["default/frontend", "default/cartservice", "default/checkoutservice"]
    free = foresight_replicas(boutique, rps, ws, 0.0, node_cores=2.0)
    capped = foresight_replicas(boutique, rps, ws, 0.0, node_cores=2.0, cpu_budget_cores=0.5)
    from policy.sim.reference import _workload_info

    req = np.array([_workload_info(boutique)[w][1] for w in ws])
    assert float(free[0] @ req) > 0.5 >= float(capped[0] @ req)
    with pytest.raises(ValueError, match="price"):
        foresight_replicas(boutique, rps, ws, -1.0, node_cores=2.0)


def test_the_reference_stack_scales_each_workload_to_its_plan_before_the_minute_it_knows(boutique):
    from policy.sim.engine import SimConfig, Simulation
    from policy.sim.sizing import cluster_for, trace_rps
    from policy.sim.stacks import StackContext, build_stack

    rps = trace_rps(boutique, "bursty", 6, 150)
    cluster = cluster_for(boutique)
    cfg = SimConfig(minutes=6, seed=0, n_samples=200)
    with pytest.raises(ValueError, match="needs the run's request rates"):
        build_stack("offline-reference", StackContext(boutique, cluster, 0, cfg))
    built = build_stack("offline-reference@price=10", StackContext(boutique, cluster, 0, cfg, rps=rps))
    sim = Simulation(boutique, rps, cluster, built.scheduler, cfg, hooks=built.hooks)
    from policy.sim.reference import _PLANS

    plan = list(_PLANS.values())[-1]
    sim.start()
    for t in range(6):
        sim.advance()
        if t >= 1:
            got = [sim.cluster.replicas[w] for w in plan.workloads]
            assert got == plan.replicas[t].tolist()
    assert sim.unschedulable == 0


def test_hrl_policy_simulate_runs_the_reference_and_keeps_stdout_pure_json():
    import json
    import subprocess
    import sys

    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "policy.cli",
            "simulate",
            "--app",
            "online-boutique",
            "--trace",
            "nasa",
            "--policy",
            "offline-reference@price=30",
            "--minutes",
            "2",
            "--json",
            "-",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    flat = json.loads(out.stdout)  # HiGHS's banner went to stderr
    assert flat["policy"] == "offline-reference@price=30" and flat["cpu_core_hours"] > 0
