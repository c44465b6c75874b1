"""policy/sim/hrl_stacks.py: the learned stacks in the simulator, built with stand-in parts (the heuristic low level
and the utilisation-target autoscaler) where the bundles are not trained yet; the factories never fall back."""

from __future__ import annotations

import itertools

import pytest

from policy.bundle import BundleMissing
from policy.highlevel import UtilizationTargetAutoscaler, default_intent
from policy.lowlevel import TopologyHeuristic
from policy.sim import hrl_stacks as hs
from policy.sim.app import load_app
from policy.sim.engine import ClusterSpec, SimConfig, Simulation, rps_for_app
from policy.sim.model import PerfModel
from policy.sim.stacks import StackBuild, StackContext, autoscaled_workloads, register_stack, run_stack
from policy.sim.traces import load_trace

MINUTES = 11
_names = itertools.count()


@pytest.fixture(scope="module")
def world():
    app = load_app("online-boutique")
    rps = rps_for_app(load_trace("nasa", MINUTES), PerfModel(app), app, 0.8)
    return app, rps, ClusterSpec(nodes=6), SimConfig(minutes=MINUTES, seed=0, n_samples=300)


def parts(app) -> hs.StackParts:
    return hs.StackParts(
        TopologyHeuristic(),
        UtilizationTargetAutoscaler(target_utilization=0.3, workloads=tuple(autoscaled_workloads(app))),
    )


class WithoutResize(Simulation):
    """The simulator as it is before in-place resizes are modelled: no ``pods/resize``."""

    patch_resize = None


class ResizingSim(Simulation):
    """The simulator, recording every ``pods/resize`` patch the stacks send (with the simulated time) and what the
    simulated API answered."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.resized: list[tuple[float, str, int]] = []

    def patch_resize(self, pod_key, patch):
        res = super().patch_resize(pod_key, patch)
        if res.outcome == "resized":
            (pod,) = (p for p in self.cluster.pods if p.alive and p.info.key == pod_key)
            self.resized.append((self.now_s, pod_key, pod.info.requests.cpu_m))
        return res


def simulate(name, world, sim_class=Simulation):
    app, rps, spec, cfg = world
    reports: list = []
    built = hs.build_hrl_stack(name, StackContext(app, spec, 0, cfg), parts(app), reports=reports)
    sim = sim_class(
        app,
        rps,
        spec,
        built.scheduler,
        cfg,
        hooks=built.hooks,
        on_change=built.on_change,
        scheduler_name=built.scheduler_name,
    )
    result = sim.run()
    return built, reports, result, sim


def test_hrl_scheduler_runs_the_real_descheduler_loop_every_minute_and_passes_its_intent_down(world):
    built, reports, result, sim = simulate("hrl-scheduler", world)
    assert built.scheduler_name == "hrl-scheduler" and [h.period_min for h in built.hooks] == [1]
    assert [r.started_at_s / 60 for r in reports] == list(
        range(0, MINUTES)
    )  # the first cycle at t = 0, before any pod is placed
    (ext,) = built.scheduler.extenders
    assert ext.weight == hs.EXTENDER_WEIGHT and ext.calls["prioritize"] >= 12
    _index, intent = ext.view()  # through the embedding cache's intent record, as in a cluster
    assert intent.values == reports[-1].intent.values  # the low level scores with the last cycle's intent
    assert dict(intent.colocation_priority) == dict(reports[-1].intent.colocation_priority)  # and its priorities
    scaled = [s for r in reports for s in r.scaling if s.outcome == "scaled"]
    assert scaled and all(s.workload in autoscaled_workloads(world[0]) for s in scaled)
    assert all(abs(s.target - s.current) <= 4 and 1 <= s.target <= 10 for s in scaled)
    assert result.pods_placed > 12  # the new replicas were placed (through the extender)
    move_minutes = {r.started_at_s / 60 for r in reports if r.planned_moves}
    assert move_minutes and move_minutes <= {0.0, 5.0, 10.0}  # moves are planned every 5 simulated minutes only
    assert all(r.planner == "hrl-scheduler-planner" for r in reports)


def test_the_ablations_switch_off_exactly_their_part(world):
    _b, no_rebalance, _r, _s = simulate("hrl-no-rebalance", world)
    assert all(r.planned_moves == () for r in no_rebalance) and any(r.scaling for r in no_rebalance)
    _b, no_autoscale, res, _s = simulate("hrl-no-autoscale", world)
    assert all(dict(r.replica_targets) == {} and r.scaling == () for r in no_autoscale)
    assert res.pods_placed == 12
    built, flat, _r, _s = simulate("hrl-flat", world)
    assert all(r.intent.values == default_intent() for r in flat)
    assert built.scheduler.extenders[0].view()[1] is None  # no intent ever reaches the low level


def test_a_stack_registered_by_name_runs_through_the_stack_registry(world):
    app, rps, spec, cfg = world
    name = f"test-hrl-stand-in-{next(_names)}"
    register_stack(name, "hrl-scheduler with stand-in parts")(
        lambda ctx: hs.build_hrl_stack("hrl-scheduler", ctx, parts(ctx.app))
    )
    result = run_stack(name, app, rps, spec, cfg)
    assert result.metrics["cross_node_call_pct"] >= 0 and result.pods_placed >= 12


def test_a_missing_bundle_fails_the_factory_with_its_path_never_a_silent_fallback(world, tmp_path):
    app, _rps, spec, cfg = world
    ctx = StackContext(app, spec, 0, cfg)
    for name in hs.VARIANTS:
        with pytest.raises(BundleMissing, match=str(tmp_path / hs.VARIANTS[name].folder / "low")):
            hs.build_hrl_stack(name, ctx, root=tmp_path)
    with pytest.raises(ValueError, match="unknown learned stack"):
        hs.build_hrl_stack("hrl-magic", ctx, parts(app))


@pytest.mark.parametrize(
    "factory, name",
    [
        (hs.hrl_scheduler, "hrl-scheduler"),
        (hs.hrl_no_encoder, "hrl-no-encoder"),
        (hs.hrl_flat, "hrl-flat"),
        (hs.hrl_no_rebalance, "hrl-no-rebalance"),
        (hs.hrl_no_autoscale, "hrl-no-autoscale"),
        (hs.hrl_no_resize, "hrl-no-resize"),
        (hs.hrl_no_shield, "hrl-no-shield"),
    ],
)
def test_each_entry_point_factory_loads_its_own_bundles(world, factory, name):
    app, _rps, spec, cfg = world
    try:
        built = factory(StackContext(app, spec, 0, cfg))
    except BundleMissing as exc:  # not trained yet: the error names this stack's folder
        assert f"policy/bundles/{hs.VARIANTS[name].folder}/" in str(exc)
    else:
        assert isinstance(built, StackBuild) and built.scheduler_name == "hrl-scheduler"


def test_the_simulated_descheduler_excludes_the_background_tenants_and_bounds_replicas():
    cfg = hs.sim_descheduler_config()
    assert "tenants" in cfg.excluded_namespaces and "kube-system" in cfg.excluded_namespaces
    assert (cfg.scaling.min_replicas, cfg.scaling.max_replicas, cfg.scaling.max_step_per_cycle) == (1, 10, 4)


def test_the_stacks_resize_pods_in_place_through_the_simulators_resize(world):
    _b, reports, _r, sim = simulate("hrl-scheduler", world, ResizingSim)
    resized = [r for rep in reports for r in rep.resizes if r.outcome == "resized"]
    assert resized and len(resized) == len(sim.resized)
    assert [(r.pod, r.cpu_request_m) for r in resized] == [(k, m) for _t, k, m in sim.resized]
    workloads = set(autoscaled_workloads(world[0]))
    assert all(r.workload in workloads and r.cpu_request_m != r.from_cpu_request_m for r in resized)
    cfg = hs.sim_descheduler_config()
    assert all(
        abs(r.cpu_request_m - r.from_cpu_request_m) <= r.from_cpu_request_m * cfg.resize.max_step for r in resized
    )
    last: dict[str, float] = {}
    for t, k, _m in sim.resized:  # the per-pod cooldown, in simulated time
        assert k not in last or t - last[k] >= cfg.resize.cooldown_seconds
        last[k] = t


def test_without_a_simulated_resize_every_resize_is_unsupported_and_the_run_goes_on(world):
    _b, reports, result, _s = simulate("hrl-scheduler", world, WithoutResize)
    done = [r.outcome for rep in reports for r in rep.resizes]
    assert done and set(done) == {"unsupported"}
    assert [rep.started_at_s / 60 for rep in reports] == list(range(0, MINUTES)) and result.pods_placed > 12


def test_the_no_shield_and_no_resize_ablations_switch_off_one_part_and_every_run_reports_its_counters(world):
    """hrl-no-shield: the same bundles, the autoscaler's saturation shield off; hrl-no-resize: no resizer; both
    report the guardrail and fail-open counts of the run (StackBuild.counters)."""
    app, rps, spec, cfg = world
    ctx = StackContext(app, spec, 0, cfg)
    full = hs.load_parts(hs.VARIANTS["hrl-scheduler"], ctx)
    bare = hs.load_parts(hs.VARIANTS["hrl-no-shield"], ctx)
    shield_of = lambda a: getattr(a, "shield_enabled", getattr(a, "shield", None))  # noqa: E731
    assert shield_of(full.autoscaler) is True and shield_of(bare.autoscaler) is False
    cfgd = hs.sim_descheduler_config()
    wl = tuple(autoscaled_workloads(app))
    assert hs.hrl_planner(hs.VARIANTS["hrl-no-resize"], full, cfgd, wl).resizer is None
    assert hs.hrl_planner(hs.VARIANTS["hrl-scheduler"], full, cfgd, wl).resizer is not None
    built = hs.build_hrl_stack("hrl-no-shield", ctx, bare)
    sim = Simulation(app, rps, spec, built.scheduler, cfg, hooks=built.hooks, on_change=built.on_change,
                     scheduler_name=built.scheduler_name)  # fmt: skip
    sim.run()
    counts = built.counters()
    guardrails = {
        "guardrail_saturation_shield",
        "guardrail_stabilization",
        "guardrail_limit_target_held",
        "extender_failed_open",
        "intent_fallbacks",
        "intent_service_fallbacks",
        "intent_lean_capped",
        "intent_no_burst_capped",
    }
    assert guardrails | set(hs.MOVE_COUNTERS) <= set(counts)  # every run reports its moves, with their reasons
    assert "node_loss_evicted" in counts  # evictions of lost nodes' pods, even when none was lost
    assert all(k in guardrails or k.startswith(("moves_", "actions_", "node_loss_")) for k in counts)
    assert counts["guardrail_saturation_shield"] == 0  # the shield never fires when it is off
