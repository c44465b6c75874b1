"""The registry of whole scheduling stacks: built-ins, entry-point stacks (the documented way to add one),
and a short run of each built-in stack."""

import textwrap

import pytest

from policy.sim.engine import SimConfig
from policy.sim.sizing import cluster_for, trace_rps
from policy.sim.stacks import (
    BENCH_STACKS,
    ENTRY_POINT_GROUP,
    StackBuild,
    StackContext,
    autoscaled_workloads,
    available_stacks,
    build_stack,
    get_stack,
    run_stack,
)


@pytest.fixture(scope="module")
def boutique():
    from policy.sim.app import load_app

    return load_app("online-boutique")


def test_the_six_baseline_stacks_are_built_in():
    stacks = available_stacks()
    assert set(BENCH_STACKS) <= set(stacks)
    assert all(stacks[n].origin == "builtin" and stacks[n].description for n in BENCH_STACKS)


def test_an_unknown_stack_is_a_one_line_error_listing_the_known_ones():
    with pytest.raises(ValueError, match="unknown stack 'nope'.*default-kube-scheduler"):
        get_stack("nope")


@pytest.fixture()
def fake_distribution(tmp_path, monkeypatch):
    """An installed distribution declaring a stack in the hrl_scheduler.stacks entry-point group."""
    (tmp_path / "fake_stacks_mod.py").write_text(
        textwrap.dedent('''
        from policy.sim.kube_scheduler import KubeSchedulerModel
        from policy.sim.stacks import StackBuild

        CALLS = []

        def build(ctx):
            """A fake stack: default scoring, records its context."""
            CALLS.append((ctx.app.name, ctx.cluster.nodes, ctx.seed))
            return StackBuild(KubeSchedulerModel(), scheduler_name="fake-scheduler")

        def broken(ctx):
            return "not a StackBuild"
    ''')
    )
    dist = tmp_path / "fake_stacks-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-stacks\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\nfake-stack = fake_stacks_mod:build\nbroken-stack = fake_stacks_mod:broken\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_a_stack_registered_through_an_entry_point_runs_without_touching_the_harness(fake_distribution, boutique):
    import fake_stacks_mod

    info = get_stack("fake-stack")
    assert info.origin == "entry point fake_stacks_mod:build"
    assert info.description == "A fake stack: default scoring, records its context."
    cluster = cluster_for(boutique, nodes=4)
    res = run_stack("fake-stack", boutique, trace_rps(boutique, "bursty", 2), cluster, SimConfig(minutes=2, seed=7))
    assert fake_stacks_mod.CALLS == [("online-boutique", 4, 7)]
    assert res.pods_placed == len(boutique.workloads)


def test_a_factory_that_returns_something_else_is_rejected(fake_distribution, boutique):
    with pytest.raises(ValueError, match="broken-stack.*expected policy.sim.stacks.StackBuild"):
        build_stack("broken-stack", StackContext(boutique, cluster_for(boutique)))


def test_autoscalers_leave_data_stores_and_the_load_generator_alone(boutique):
    scaled = autoscaled_workloads(boutique)
    assert "default/frontend" in scaled and "default/cartservice" in scaled
    assert "default/redis-cart" not in scaled and "default/loadgenerator" not in scaled


@pytest.mark.parametrize("name", BENCH_STACKS)
def test_every_built_in_stack_runs_a_short_simulation(name, boutique):
    built = build_stack(name, StackContext(boutique, cluster_for(boutique), 0))
    assert isinstance(built, StackBuild)
    res = run_stack(
        name,
        boutique,
        trace_rps(boutique, "bursty", 6, 150),
        cluster_for(boutique),
        SimConfig(minutes=6, seed=0, n_samples=200),
    )
    assert res.unschedulable == 0
    assert res.metrics["latency_p95_ms"] > 0


@pytest.mark.parametrize("name", ["default-kube-scheduler+hpa", "threshold-autoscaler"])
def test_autoscaling_stacks_scale_out_a_workload_running_far_above_its_cpu_request(name):
    import numpy as np

    from policy.sim.app import load_app
    from policy.sim.engine import Simulation
    from policy.sim.sizing import capacity_rps

    app = load_app("dsb-hotel-reservation")  # requests 100m, limits 1000m: busy pods run at ~800 % of request
    cluster = cluster_for(app)
    cfg = SimConfig(minutes=4, seed=0, n_samples=200)
    built = build_stack(name, StackContext(app, cluster, 0, cfg))
    sim = Simulation(app, np.full(4, 0.8 * capacity_rps(app)), cluster, built.scheduler, cfg, hooks=built.hooks)
    sim.run()
    assert sim.cluster.replicas["default/frontend"] > 1
    assert sim.cluster.replicas["default/mongodb-geo"] == 1  # data stores are not autoscaled


def test_a_stack_name_sets_its_knobs_and_bad_knobs_are_one_line_errors():
    from policy.sim.stacks import parse_stack_name, stack_name

    assert parse_stack_name("default-kube-scheduler+hpa@target=0.6") == ("default-kube-scheduler+hpa", {"target": 0.6})
    assert stack_name("networkaware", {"weight": 20, "hpa": 0.8}) == "networkaware@hpa=0.8,weight=20"
    for bad, msg in [
        ("networkaware@weight=0", r"knob weight=0 is outside \[1, 100\]"),
        ("networkaware@weight=2.5", "knob weight=2.5 must be an integer"),
        ("trimaran-tlp@target", "knob 'target' is not knob=number"),
        ("trimaran-tlp@target=0.5,target=0.6", "knob target given twice"),
        ("default-kube-scheduler@target=0.5", r"unknown knob 'target' for default-kube-scheduler \(knobs: none\)"),
        ("@target=1", "empty stack name"),
    ]:
        with pytest.raises(ValueError, match=msg) as exc:
            get_stack(bad)
        assert "\n" not in str(exc.value)


def test_threshold_knobs_that_break_the_autoscalers_rules_are_refused_when_built(boutique):
    with pytest.raises(ValueError, match=r"stack threshold-autoscaler: knobs .*u_lo.*must be below uHi"):
        build_stack("threshold-autoscaler@u_hi=0.5,u_lo=0.6", StackContext(boutique, cluster_for(boutique)))
    with pytest.raises(ValueError, match="low=60 %, high=50 %"):
        build_stack("descheduler-lownodeutilization@low=0.6", StackContext(boutique, cluster_for(boutique)))


def _run(name, app, minutes=10):
    from policy.sim.sizing import window_offset

    rps = trace_rps(app, "bursty", minutes, window_offset("bursty", minutes))
    return run_stack(name, app, rps, cluster_for(app), SimConfig(minutes=minutes, seed=3, n_samples=200)).metrics


def test_a_knob_at_its_default_gives_the_unparametrized_stack_bit_for_bit_and_another_value_changes_it(boutique):
    plain = _run("default-kube-scheduler+hpa", boutique)
    assert _run("default-kube-scheduler+hpa@target=0.8", boutique) == plain
    eager = _run("default-kube-scheduler+hpa@target=0.4", boutique)
    assert eager["cpu_core_hours"] > plain["cpu_core_hours"]
    assert _run("networkaware@weight=5,zone_cost=10", boutique) == _run("networkaware", boutique)
    assert _run("trimaran-tlp@target=0.4", boutique) == _run("trimaran-tlp", boutique)


def test_the_hpa_knob_autoscales_a_placement_baseline(boutique):
    fixed = _run("networkaware", boutique)
    scaled = _run("networkaware@hpa=0.5", boutique)
    assert scaled["cpu_core_hours"] > fixed["cpu_core_hours"]
    assert scaled["failed_pct"] < fixed["failed_pct"]
