"""The bench plan (policy/data/bench/plan.yaml): what the quick and full modes run, how --scenarios / --apps /
--traces narrow it, and the one-line errors of a bad plan."""

import pytest

from policy.bench.plan import DEFAULT_PLAN, learned_runs, load_plan, plan_cells
from policy.config import ConfigError
from policy.sim.placement import TRAIN_APPS
from policy.sim.scenario import FAMILIES, load_scenario
from policy.sim.sizing import window_offset
from policy.train.episodes import HELD_OUT_APPS

LEARNED = (
    "hrl-scheduler",
    "hrl-no-encoder",
    "hrl-flat",
    "hrl-no-rebalance",
    "hrl-no-autoscale",
    "hrl-no-resize",
    "hrl-no-shield",
    "drpc",
)


def keys(cells):
    return [c.key for c in cells]


def test_the_shipped_plan_runs_every_family_in_quick_with_a_training_and_a_held_out_app_each():
    plan = load_plan()
    assert tuple(plan.spec.training_apps) == TRAIN_APPS
    assert tuple(plan.spec.held_out_apps) == HELD_OUT_APPS
    assert set(LEARNED) <= set(plan.spec.stacks)
    # the targets run in every cell; the MIP reference is not planned (a plan under a model, not a bound)
    assert {"hrl-constant", "lookahead-oracle"} <= set(plan.spec.stacks)
    assert not any(s.startswith("offline-reference") for s in plan.spec.stacks)
    assert plan.mode("quick").oracle.startswith("lookahead-oracle") and len(plan.mode("quick").seeds) == 5
    assert len(plan.spec.training_seeds) >= 3 and 0 in plan.spec.training_seeds
    quick = plan_cells(plan, "quick")
    assert {c.family for c in quick} == set(FAMILIES)
    assert len(plan.mode("quick").seeds) >= 3 and len(plan.mode("full").seeds) >= 5
    for family in FAMILIES:
        one_app = [c for c in quick if c.family == family and len(c.apps) == 1]
        if one_app:
            roles = {c.role for c in one_app}
            assert {"training", "held-out"} <= roles, (family, roles)
    # both held-out apps are judged in the scenario families, not only in the classic setting
    for app in HELD_OUT_APPS:
        assert any(c.app_name == app and c.family != "baseline" for c in quick), app
    # every cell runs a window inside its trace, 30 minutes long in quick mode
    assert all(c.minutes == 30 and c.offset_min >= 0 for c in quick)
    full = plan_cells(plan, "full")
    assert {c.family for c in full} == set(FAMILIES)
    assert len(full) > len(quick)
    # the classic setting's full runs take the whole window, as before the scenario families
    assert all(c.minutes == 360 and c.offset_min == 0 for c in full if c.scenario == "baseline-2026-11")


def test_a_scenario_of_several_apps_is_one_cell_named_after_its_apps_and_traces():
    (cell,) = plan_cells(load_plan(), "quick", scenarios=["shared-cluster"])
    assert cell.app is None and cell.trace is None
    assert cell.app_name == "online-boutique+sock-shop+dsb-hotel-reservation"
    assert cell.trace_name == "nasa+twitter+bursty"
    assert cell.apps == ("online-boutique", "sock-shop", "dsb-hotel-reservation") and cell.role == "training"


def test_the_plan_narrows_to_the_scenarios_apps_and_traces_asked_for():
    plan = load_plan()
    assert keys(plan_cells(plan, "quick", scenarios=["network-edge"], apps=["online-boutique"])) == [
        ("network-edge", "online-boutique", "nasa")
    ]
    # an app the selected scenario does not plan runs there (a held-out app in another family)
    assert keys(plan_cells(plan, "quick", scenarios=["network-edge"], apps=["dsb-social-network"])) == [
        ("network-edge", "dsb-social-network", "nasa")
    ]
    # --apps: every selected one-app scenario runs those apps (load plans sock-shop and dsb-media-microservices);
    # a scenario of several apps keeps its own
    got = keys(plan_cells(plan, "quick", scenarios=["shared-cluster", "events", "load"], apps=["online-boutique"]))
    assert got == [
        ("shared-cluster", "online-boutique+sock-shop+dsb-hotel-reservation", "nasa+twitter+bursty"),
        ("events", "online-boutique", "nasa"),
        ("load", "online-boutique", "nasa"),
    ]
    # --traces replaces the planned traces the same way; the plan's order stays
    got = keys(plan_cells(plan, "quick", scenarios=["events", "heterogeneous"], traces=["twitter", "bursty"]))
    assert got == [
        ("heterogeneous", "dsb-hotel-reservation", "twitter"),
        ("heterogeneous", "dsb-hotel-reservation", "bursty"),
        ("heterogeneous", "dsb-media-microservices", "twitter"),
        ("heterogeneous", "dsb-media-microservices", "bursty"),
        ("events", "online-boutique", "twitter"),
        ("events", "online-boutique", "bursty"),
        ("events", "dsb-social-network", "twitter"),
        ("events", "dsb-social-network", "bursty"),
    ]
    # without --scenarios every family is kept: --apps narrows the whole plan to that app
    got = plan_cells(plan, "quick", apps=["dsb-social-network"])
    assert {c.family for c in got} == set(FAMILIES)
    assert {c.app_name for c in got if len(c.apps) == 1} == {"dsb-social-network"}
    assert all(c.minutes == 5 for c in plan_cells(plan, "quick", scenarios=["events"], minutes=5))


def test_a_scenario_file_the_plan_does_not_name_runs_its_own_app_and_trace(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text(
        "apiVersion: hrl-scheduler.io/v1alpha1\nkind: Scenario\nname: mine\nminutes: 20\n"
        "apps: [{app: sock-shop, load: {trace: bursty}}]\ncluster: {appBench: true}\n"
    )
    (cell,) = plan_cells(load_plan(), "quick", scenarios=[str(f)])
    assert cell.key == ("mine", "sock-shop", "bursty") and cell.scenario == str(f)
    assert cell.minutes == 30  # the mode's length; `minutes: scenario` would take the file's 20
    assert cell.offset_min == window_offset("bursty", 30)
    assert load_scenario(f).name == "mine"


def plan_file(tmp_path, body):
    f = tmp_path / "plan.yaml"
    f.write_text("apiVersion: hrl-scheduler.io/v1alpha1\nkind: BenchPlan\nstacks: [default-kube-scheduler]\n" + body)
    return f


@pytest.mark.parametrize(
    ("body", "line"),
    [
        (
            "modes: {quick: {seeds: [0, -1], cells: [{scenario: load}]}}",
            "modes.quick: seeds: must be >= 0, got [-1]",
        ),
        (
            "modes: {quick: {seeds: [0], sweep: huge, cells: [{scenario: load}]}}",
            "modes.quick.sweep: must be one of 'quick', 'full' or 'none' (got 'huge')",
        ),
        (
            "modes: {quick: {seeds: [0], cells: [{scenario: load, minutes: 0}]}}",
            "modes.quick.cells[0].minutes: must be a number of minutes >= 1, 'scenario' or 'window' (got 0)",
        ),
        (
            "trainingApps: [sock-shop]\nheldOutApps: [sock-shop]\n"
            "modes: {quick: {seeds: [0], cells: [{scenario: load}]}}",
            "an app is one or the other, got ['sock-shop'] in both",
        ),
        ("modes: {quick: {seeds: [0], cells: [{scenario: load, app: sock-shop}]}}", "modes.quick.cells[0].app:"),
        (
            "modes: {quick: {seeds: [0], minutes: 1.5, cells: [{scenario: load}]}}",
            "modes.quick.minutes: must be a number of minutes >= 1, 'scenario' or 'window' (got 1.5)",
        ),
        (
            "trainingSeeds: [1, 2]\nmodes: {quick: {seeds: [0], cells: [{scenario: load}]}}",
            "trainingSeeds: distinct integers >= 0 including 0 (the committed bundles), got [1, 2]",
        ),
        (
            "trainingSeeds: [0, 1, 1]\nmodes: {quick: {seeds: [0], cells: [{scenario: load}]}}",
            "trainingSeeds: distinct integers >= 0 including 0",
        ),
        (
            "modes: {quick: {seeds: [0], oracle: hrl-constant, cells: [{scenario: load}]}}",
            "modes.quick.oracle: must be a setting of lookahead-oracle (e.g. lookahead-oracle@horizon=10)",
        ),
        (
            "modes: {quick: {seeds: [0], oracle: 'lookahead-oracle@horizon=0', cells: [{scenario: load}]}}",
            "modes.quick.oracle: stack 'lookahead-oracle@horizon=0': knob horizon=0 is outside [1, 60]",
        ),
        (
            "skipMissingTrainingSeeds: maybe\nmodes: {quick: {seeds: [0], cells: [{scenario: load}]}}",
            "skipMissingTrainingSeeds:",
        ),
    ],
)
def test_a_bad_plan_file_is_refused_with_one_line_naming_the_field(tmp_path, body, line):
    with pytest.raises(ConfigError) as e:
        load_plan(plan_file(tmp_path, body))
    assert any(line in x for x in e.value.lines()), e.value.lines()
    assert all("\n" not in x for x in e.value.lines())


def test_a_plan_cell_that_cannot_run_is_refused_naming_the_cell(tmp_path):
    f = plan_file(
        tmp_path,
        "modes:\n  quick:\n    seeds: [0]\n    cells:\n      - {scenario: no-such-scenario}\n"
        "      - {scenario: shared-cluster, apps: [sock-shop]}\n",
    )
    with pytest.raises(ConfigError) as e:
        plan_cells(load_plan(f), "quick")
    lines = e.value.lines()
    assert any("modes.quick.cells[0].scenario: scenario: unknown scenario 'no-such-scenario'" in x for x in lines)
    assert any("modes.quick.cells[1]: scenario 'shared-cluster' runs 3 apps of its own" in x for x in lines)
    with pytest.raises(ConfigError, match="modes: no mode 'full'"):
        plan_cells(load_plan(f), "full")
    with pytest.raises(ValueError, match="--scenarios nope: scenario: unknown scenario 'nope'"):
        plan_cells(load_plan(DEFAULT_PLAN), "quick", scenarios=["nope"])


def test_the_learned_stacks_run_at_every_training_seed_and_the_targets_and_baselines_at_the_committed_bundles():
    stacks = ["default-kube-scheduler+hpa", "hrl-scheduler", "drpc", "hrl-constant", "lookahead-oracle@horizon=5"]
    stacks += ["hrl-flat@tseed=4"]  # a training seed named explicitly runs as named, once
    got = learned_runs(stacks, (0, 1, 2))
    assert got == {
        "hrl-scheduler": ["hrl-scheduler", "hrl-scheduler@tseed=1", "hrl-scheduler@tseed=2"],
        "drpc": ["drpc", "drpc@tseed=1", "drpc@tseed=2"],
    }
    assert learned_runs(["hrl-no-resize"], (0,)) == {"hrl-no-resize": ["hrl-no-resize"]}
    with pytest.raises(ValueError, match="unknown stack"):
        learned_runs(["no-such-stack"], (0, 1))
