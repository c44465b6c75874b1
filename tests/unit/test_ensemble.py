"""Ensembles of learned bundles (policy.bundle.ensemble_members, policy.lowlevel.PlacementEnsemble,
policy.highlevel.IntentEnsemble): the manifest's checks, the mean logit and the mean intent against the members
computed one by one, a one-member ensemble equal to its member, the extender's and the descheduler's loaders, and
the simulator's hrl-ensemble stack."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from policy.bundle import DEFAULT_BUNDLES, BundleError, BundleMissing, ensemble_members, is_ensemble
from policy.highlevel import (
    HierarchicalPolicy,
    Intent,
    IntentAutoscaler,
    IntentEnsemble,
    LearnedIntent,
    UtilizationTargetAutoscaler,
    load_intent_policy,
    mean_intent,
)
from policy.index import ClusterIndex
from policy.lowlevel import (
    LearnedPlacement,
    MemberRows,
    NodeScoreTable,
    PlacementEnsemble,
    TopologyHeuristic,
    load_placement,
    scores_from_logits,
)
from policy.state import (
    ClusterSnapshot,
    LabelSelector,
    NodeInfo,
    OwnerRef,
    PodInfo,
    Resources,
    ServiceEdge,
    ServiceGraph,
    WorkloadInfo,
    frozen_map,
)

GI = 2**30
ENSEMBLE = DEFAULT_BUNDLES / "hrl-ensemble"
SEEDS = (DEFAULT_BUNDLES, DEFAULT_BUNDLES / "seeds" / "1", DEFAULT_BUNDLES / "seeds" / "2")


def pod(svc: str, node: str | None, i: int = 0, cpu_m: int = 200, usage_m: int | None = None) -> PodInfo:
    return PodInfo(
        name=f"{svc}-{i}",
        namespace="shop",
        service=svc,
        requests=Resources(cpu_m, GI),
        uid=f"u-{svc}-{i}",
        node_name=node,
        phase="Running" if node else "Pending",
        owner=OwnerRef("ReplicaSet", f"{svc}-rs"),
        labels=frozen_map({"app": svc}),
        usage=None if usage_m is None else Resources(usage_m, 0),
    )


def workload(svc: str, replicas: int) -> WorkloadInfo:
    return WorkloadInfo(
        svc,
        "shop",
        svc,
        kind="Deployment",
        replicas=replicas,
        selector=LabelSelector(frozen_map({"app": svc})),
        pod_requests=Resources(200, GI),
    )


def world(t: float = 600.0) -> ClusterSnapshot:
    zone = "topology.kubernetes.io/zone"
    nodes = tuple(
        NodeInfo(f"n{i}", Resources(4000, 16 * GI), labels={zone: "ab"[i % 2]}, usage=Resources(800 + 900 * i, 0))
        for i in range(4)
    )
    pods = (
        pod("front", "n0", 0, usage_m=150),
        pod("front", "n1", 1, usage_m=170),
        pod("cart", "n2", 0, usage_m=300),
        pod("db", "n3", 0, usage_m=90),
    )
    g = ServiceGraph.build(
        ("front", "cart", "db"),
        [ServiceEdge("front", "cart", rps=40.0, calls_per_request=1.0), ServiceEdge("cart", "db", rps=25.0)],
        "test",
    )
    return ClusterSnapshot(
        nodes, pods, graph=g, workloads=(workload("front", 2), workload("cart", 1), workload("db", 1)), taken_at_s=t
    )


def write_ensemble(d: Path, level: str, members, **extra) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    doc = {"kind": "Ensemble", "level": level, "members": [str(m) for m in members], **extra}
    (d / "ensemble.json").write_text(json.dumps(doc))
    return d


# ---- ensemble.json ----------------------------------------------------------------------------------------------


def test_the_committed_ensembles_name_the_three_training_seeds_bundles():
    for level in ("low", "high"):
        got = ensemble_members(ENSEMBLE / level, level)
        assert got == tuple((root / "hrl-scheduler" / level).resolve() for root in SEEDS)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("[1, 2", r"ensemble\.json: not valid JSON"),
        ([], r"expected a JSON object, found list"),
        ({"kind": "Ensemble", "level": "low", "members": ["a"], "weights": 1}, r"unknown key 'weights'"),
        ({"kind": "Bundle", "level": "low", "members": ["a"]}, r"kind: expected 'Ensemble', found 'Bundle'"),
        ({"kind": "Ensemble", "level": "high", "members": ["a"]}, r"level: expected 'low', found 'high'"),
        ({"kind": "Ensemble", "level": "low", "combine": "max", "members": ["a"]}, r"combine: expected 'mean'"),
        ({"kind": "Ensemble", "level": "low", "members": []}, r"members: expected a list of 1 to 16 directory paths"),
        ({"kind": "Ensemble", "level": "low", "members": "a"}, r"members: expected a list"),
        ({"kind": "Ensemble", "level": "low", "members": ["a", ""]}, r"members: expected a list"),
        ({"kind": "Ensemble", "level": "low", "members": ["a", "./a"]}, r"members\[1\]: './a' is listed twice"),
    ],
)
def test_a_bad_ensemble_file_is_one_line_naming_the_file_and_the_field(tmp_path, doc, message):
    (tmp_path / "ensemble.json").write_text(doc if isinstance(doc, str) else json.dumps(doc))
    with pytest.raises(BundleError, match=message) as exc:
        ensemble_members(tmp_path, "low")
    assert str(tmp_path / "ensemble.json") in str(exc.value) and "\n" not in str(exc.value)


def test_an_ensemble_of_ensembles_and_a_missing_member_are_refused(tmp_path):
    inner = write_ensemble(tmp_path / "inner", "low", [DEFAULT_BUNDLES / "hrl-scheduler" / "low"])
    write_ensemble(tmp_path / "outer", "low", [inner])
    with pytest.raises(BundleError, match=r"members\[0\]: .* is an ensemble itself"):
        ensemble_members(tmp_path / "outer", "low")
    write_ensemble(tmp_path / "gap", "low", [DEFAULT_BUNDLES / "hrl-scheduler" / "low", tmp_path / "nowhere"])
    with pytest.raises((BundleError, BundleMissing), match="nowhere"):
        PlacementEnsemble.load(tmp_path / "gap")
    assert is_ensemble(tmp_path / "gap") and not is_ensemble(DEFAULT_BUNDLES / "hrl-scheduler" / "low")


# ---- the placement ensemble -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def members() -> tuple[LearnedPlacement, ...]:
    return tuple(LearnedPlacement.load(root / "hrl-scheduler" / "low") for root in SEEDS)


def test_the_ensemble_scores_the_sigmoid_of_the_members_mean_logit_with_their_guards(members):
    ens = PlacementEnsemble(members)
    snap = world()
    idx = ClusterIndex.build(snap)
    p = pod("cart", None, 1, cpu_m=600)
    cands = list(idx.node_names)
    for intent in (None, (2.5, 0.4)):
        xs = [m.features(p, cands, idx, intent) for m in members]
        z = np.mean([m.logits(x) for m, x in zip(members, xs)], axis=0)
        want = scores_from_logits(z, xs[0], members[0].intent_gain, members[0].saturation_guard)
        got = ens.score(p, cands, idx, intent)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)  # float64 mean of float32 logits
        singles = [m.score(p, cands, idx, intent) for m in members]
        assert not any(np.allclose(got, s) for s in singles)  # not one member's scores in disguise
    assert ens.score(p, [], idx).shape == (0,)


def test_a_one_member_ensemble_scores_exactly_as_its_member(members):
    snap = world()
    idx = ClusterIndex.build(snap)
    p = pod("db", None, 1)
    one = PlacementEnsemble(members[:1])
    cands = ["n3", "n0", "n2"]
    np.testing.assert_array_equal(one.score(p, cands, idx), members[0].score(p, cands, idx))
    base, weight = one.score_parts(p, cands, idx)
    np.testing.assert_array_equal(base, members[0].score_parts(p, cands, idx)[0])
    assert weight == (1.0 if members[0].saturation_guard else 0.0)


def test_members_that_disagree_on_the_output_rules_are_refused_naming_the_member(tmp_path, members):
    root = tmp_path / "b"
    shutil.copytree(DEFAULT_BUNDLES / "encoder", root / "encoder")
    shutil.copytree(DEFAULT_BUNDLES / "hrl-scheduler" / "low", root / "hrl-scheduler" / "low")
    man = root / "hrl-scheduler" / "low" / "manifest.json"
    doc = json.loads(man.read_text())
    doc["architecture"]["saturation_guard"] = not doc["architecture"].get("saturation_guard", False)
    man.write_text(json.dumps(doc))
    other = LearnedPlacement.load(root / "hrl-scheduler" / "low")
    with pytest.raises(BundleError, match=r"members\[1\] .*architecture\.saturation_guard: expected"):
        PlacementEnsemble([members[0], other], "x")
    with pytest.raises(BundleError, match="members: expected at least one"):
        PlacementEnsemble([])


def test_the_loaders_serve_an_ensemble_directory_wherever_a_placement_bundle_is_served(members):
    for loaded in (
        load_placement(ENSEMBLE / "low"),
        load_placement(ENSEMBLE / "low", refresh_s=60.0),
        PlacementEnsemble.load(ENSEMBLE / "low"),
    ):
        assert isinstance(loaded, PlacementEnsemble) and len(loaded.members) == 3
        assert [m.version for m in loaded.members] == [m.version for m in members]
    assert isinstance(load_placement(DEFAULT_BUNDLES / "hrl-scheduler" / "low"), LearnedPlacement)
    with pytest.raises(BundleMissing, match="holds a stack's bundles"):  # the single loader's hint is kept
        load_placement(DEFAULT_BUNDLES / "hrl-scheduler")
    assert load_placement(ENSEMBLE / "low", refresh_s=60.0).members[2].rows.refresh_s == 60.0


def test_the_extender_loads_an_ensemble_and_feeds_every_member_its_rows():
    from extender.config import build_policy, load_extender_config, start_policy_feeds

    doc = {"apiVersion": "hrl-scheduler.io/v1alpha1", "kind": "ExtenderConfiguration"}
    doc["policy"] = {"name": "learned", "bundle": str(ENSEMBLE / "low")}
    cfg = load_extender_config(doc, check_files=True)
    pol = build_policy(cfg)
    assert isinstance(pol, PlacementEnsemble)
    snap = world()

    class Store:
        def get(self):
            return type("View", (), {"snapshot": snap, "embeddings": None})()

    refresher = start_policy_feeds(pol, cfg, Store())
    try:
        assert refresher is not None and pol.background_rows
        refresher.tick()
        assert all(m.rows.computations >= 1 for m in pol.members)
    finally:
        refresher.stop()


def test_the_node_score_table_keeps_its_vectors_while_the_members_rows_are_unchanged(members):
    ens = PlacementEnsemble(members)
    snap = world()
    idx = ClusterIndex.build(snap)
    tok = ens.service_rows(idx, "cart")
    assert isinstance(tok, MemberRows) and ens.service_rows(idx, "cart") is tok
    table = NodeScoreTable(ens)
    p = pod("cart", None, 1)
    table.lookup(p, idx, None, tok)  # a miss: wanted at the next warm
    assert table.warm(idx, None) >= 1
    vec = table.lookup(p, idx, None, ens.service_rows(idx, "cart"))
    assert vec is not None
    np.testing.assert_allclose(vec, ens.score(p, list(idx.node_names), idx), rtol=0, atol=1e-12)


# ---- the intent ensemble ----------------------------------------------------------------------------------------


def test_the_mean_intent_averages_every_component_over_the_intents_that_set_it():
    a = Intent((2.0, 1.0), {"cart": 0.4, "db": 0.8}, {"cart": 1.0}, 0.0)
    b = Intent((1.0, 0.5), {"cart": 0.6}, {"cart": 3.0, "db": 2.0}, 1.0)
    m = mean_intent([a, b])
    assert m.values == (1.5, 0.75)
    assert dict(m.capacity_target) == {"cart": 0.5, "db": 0.8}
    assert dict(m.colocation_priority) == {"cart": 2.0, "db": 2.0}
    assert m.move_budget_frac == 0.5
    with pytest.raises(ValueError, match="at least one"):
        mean_intent([])
    with pytest.raises(ValueError, match="different lengths"):
        mean_intent([a, Intent((1.0,))])


def test_pessimism_moves_each_capacity_target_from_the_mean_towards_the_members_lowest():
    a = Intent((2.0,), {"cart": 0.4, "db": 0.8}, {"cart": 1.0}, 0.0)
    b = Intent((1.0,), {"cart": 0.8}, {"cart": 3.0}, 1.0)
    mean = mean_intent([a, b])
    low = mean_intent([a, b], pessimism=1.0)
    half = mean_intent([a, b], pessimism=0.5)
    assert dict(low.capacity_target) == {"cart": 0.4, "db": 0.8}  # db: set by one intent, its own value
    assert half.capacity_target["cart"] == pytest.approx(0.5)
    # nothing but the capacity targets moves
    for m in (low, half):
        assert (m.values, dict(m.colocation_priority), m.move_budget_frac) == (
            mean.values,
            dict(mean.colocation_priority),
            mean.move_budget_frac,
        )
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="pessimism: expected a number in"):
            mean_intent([a, b], pessimism=bad)


def test_the_ensembles_pessimism_file_is_served_and_a_bad_one_is_one_line(tmp_path):
    from policy.highlevel.tuned import tuned_pessimism

    paths = [root / "hrl-scheduler" / "high" for root in SEEDS]
    d = write_ensemble(tmp_path / "h", "high", paths)
    assert load_intent_policy(d).pessimism == 0.0  # no pessimism.json: the members' mean
    (d / "pessimism.json").write_text(json.dumps({"pessimism": 1.0, "grid": []}))
    ens = load_intent_policy(d)
    assert ens.pessimism == 1.0
    from policy.cli.bundle import check_bundle

    assert check_bundle(d)[1].endswith(") pessimism 1")  # what `hrl-policy bundle check` prints
    alone = [_plan_intents(LearnedIntent.load(p), minutes=1)[0] for p in paths]
    got = _plan_intents(ens, minutes=1)[0]
    assert dict(got.capacity_target) == pytest.approx(
        {s: min(a.capacity_target[s] for a in alone) for s in got.capacity_target}, rel=1e-12
    )
    for text, message in (
        ("{", "not a usable JSON file: line 1: invalid JSON"),
        ('{"pessimism": 0, "pessimism": 1}', "not a usable JSON file: pessimism: duplicate key"),
        ('{"pessimism": 2}', "pessimism: expected a number in"),
        ("[]", "expected a JSON object with a number 'pessimism'"),
    ):
        (d / "pessimism.json").write_text(text)
        with pytest.raises(BundleError, match=rf"^{re.escape(str(d))}/pessimism\.json: {message}") as exc:
            load_intent_policy(d)
        assert "\n" not in str(exc.value)
    with pytest.raises(ValueError, match="expected a JSON object with a number 'pessimism'"):
        tuned_pessimism(d)
    # the committed ensemble's file, when there is one, is what the served ensemble runs at
    assert load_intent_policy(ENSEMBLE / "high").pessimism == tuned_pessimism(ENSEMBLE / "high")
    # beside a single high level the file would do nothing: refused, not ignored
    single = tmp_path / "single"
    shutil.copytree(paths[0], single)
    (single / "pessimism.json").write_text(json.dumps({"pessimism": 0.5}))
    with pytest.raises(BundleError, match=r"pessimism\.json: pessimism is read only beside an ensemble\.json"):
        load_intent_policy(single)
    with pytest.raises(BundleError, match=r"^intent ensemble: pessimism: expected a number in \[0, 1\], got 'x'"):
        IntentEnsemble([LearnedIntent.load(paths[0])], pessimism="x")


def _plan_intents(policy, minutes=11, planner_out=None):
    planner = HierarchicalPolicy(intent_policy=policy, intent_period_s=300.0, rebalance=False)
    out = []
    for minute in range(1, minutes + 1):
        snap = world(60.0 * minute)
        out.append(planner.plan(snap, ClusterIndex.build(snap), TopologyHeuristic()).intent)
    if planner_out is not None:
        planner_out.append(planner)
    return out


def test_the_intent_ensemble_serves_the_mean_of_its_members_intents_and_records_the_history_once():
    paths = [root / "hrl-scheduler" / "high" for root in SEEDS]
    alone = [_plan_intents(LearnedIntent.load(p)) for p in paths]
    planners: list = []
    together = _plan_intents(IntentEnsemble([LearnedIntent.load(p) for p in paths]), planner_out=planners)
    # the first period: every member sees what it would see alone (later ones read the mean's last targets)
    want = mean_intent([a[0] for a in alone])
    np.testing.assert_allclose(together[0].values, want.values, rtol=1e-12)
    assert dict(together[0].capacity_target) == pytest.approx(dict(want.capacity_target), rel=1e-12)
    assert dict(together[0].colocation_priority) == pytest.approx(dict(want.colocation_priority), rel=1e-12)
    assert together[0].move_budget_frac == pytest.approx(want.move_budget_frac, rel=1e-12)
    assert len({tuple(sorted(a[0].capacity_target.items())) for a in alone}) > 1  # the members differ
    assert together[4] != together[3]  # a new intent at minute 5 (periods of 300 s)
    # the rate history the members read is recorded once per cycle, as by one LearnedIntent
    single: list = []
    _plan_intents(LearnedIntent.load(paths[0]), planner_out=single)
    key = LearnedIntent.STATE_KEY
    assert planners[0].state.autoscaler[key] == single[0].state.autoscaler[key]
    one = _plan_intents(IntentEnsemble([LearnedIntent.load(paths[1])]))
    assert one == alone[1]


def test_a_members_fallback_counts_one_ensemble_period():
    class Member:
        featurizer = None
        last_observation = None

        def __init__(self, fall: bool):
            self.fall, self.fallbacks, self.service_fallbacks, self.records = fall, 0, 0, 0

        def record(self, *_):
            self.records += 1

        def intent(self, *_):
            if self.fall:
                self.fallbacks += 1
                self.service_fallbacks += 2
            return Intent((1.0, 1.0), {"cart": 0.5 if self.fall else 0.7})

    ens = IntentEnsemble([Member(True), Member(True), Member(False)])
    got = _plan_intents(ens, minutes=6)
    assert ens.fallbacks == 2 and ens.service_fallbacks == 8  # minutes 1 and 5; two members x two services
    assert [m.records for m in ens.members] == [6, 0, 0]  # the history is recorded once, by the first
    assert dict(got[0].capacity_target)["cart"] == pytest.approx((0.5 + 0.5 + 0.7) / 3)


def test_the_descheduler_loads_both_ensembles_and_names_the_field_of_a_broken_one(tmp_path):
    from descheduler.config import _hierarchical, load_descheduler_config, placement_from_config

    doc = {
        "apiVersion": "hrl-scheduler.io/v1alpha1",
        "kind": "DeschedulerConfiguration",
        "placement": {"name": "learned", "bundle": str(ENSEMBLE / "low")},
        "planner": {
            "intentPolicy": {"name": "learned", "bundle": str(ENSEMBLE / "high")},
            "autoscaler": {"name": "intent"},
        },
    }
    cfg = load_descheduler_config(doc)
    assert isinstance(placement_from_config(cfg), PlacementEnsemble)
    h = _hierarchical(cfg)
    assert isinstance(h.intent_policy, IntentEnsemble) and h.intent_period_s > 0
    assert h.autoscaler.forecaster is h.intent_policy.members[0].featurizer.local.predictor
    write_ensemble(tmp_path / "high", "low", [DEFAULT_BUNDLES / "hrl-scheduler" / "high"])
    doc["planner"]["intentPolicy"]["bundle"] = str(tmp_path / "high")
    with pytest.raises(ValueError, match=r"^planner\.intentPolicy\.bundle: .*level: expected 'high', found 'low'"):
        _hierarchical(load_descheduler_config(doc))
    assert isinstance(load_intent_policy(DEFAULT_BUNDLES / "hrl-scheduler" / "high"), LearnedIntent)


def test_the_simulators_hrl_ensemble_stack_runs_both_ensembles():
    from policy.bench.cells import run_one
    from policy.sim.app import load_app
    from policy.sim.engine import ClusterSpec
    from policy.sim.hrl_stacks import VARIANTS, load_parts
    from policy.sim.stackbase import StackContext

    ctx = StackContext(app=load_app("online-boutique"), cluster=ClusterSpec())
    parts = load_parts(VARIANTS["hrl-ensemble"], ctx)
    assert isinstance(parts.placement, PlacementEnsemble) and isinstance(parts.intent_policy, IntentEnsemble)
    assert parts.autoscaler.forecaster is parts.intent_policy.members[0].featurizer.local.predictor
    assert (
        load_parts(VARIANTS["hrl-ensemble"], replace(ctx, params={"pessimism": 0.75})).intent_policy.pessimism == 0.75
    )
    runs = {
        s: run_one("baseline-2026-11", "online-boutique", "nasa", s, 0, (8, 330, 200, ""))
        for s in ("hrl-ensemble", "hrl-scheduler")
    }
    assert runs["hrl-ensemble"]["policy"] == "hrl-ensemble" and "intent_fallbacks" in runs["hrl-ensemble"]["counters"]
    assert runs["hrl-ensemble"]["metrics"] != runs["hrl-scheduler"]["metrics"]


def test_the_ensembles_research_knobs_set_the_extenders_weight_and_the_placement():
    from policy.sim.app import load_app
    from policy.sim.engine import ClusterSpec
    from policy.sim.stacks import StackContext, build_stack

    ctx = StackContext(app=load_app("online-boutique"), cluster=ClusterSpec())
    served = build_stack("hrl-ensemble", ctx).handles
    assert served["extender"].weight == 2 and isinstance(served["placement"], PlacementEnsemble)
    knobs = build_stack("hrl-ensemble@heuristic=1,weight=10", ctx).handles
    assert knobs["extender"].weight == 10 and isinstance(knobs["placement"], TopologyHeuristic)
    with pytest.raises(ValueError, match="weight"):
        build_stack("hrl-ensemble@weight=0", ctx)
    # the descheduler predicts the scheduler it runs beside: the same weight
    assert served["config"].scheduler_prediction.extender_weight == 2
    assert knobs["config"].scheduler_prediction.extender_weight == 10
    # the replica targets' lowest forecast factor: 0.5 as served, the knob's value where given (hrl-constant too)
    assert served["planner"].autoscaler.forecast_min == 0.5
    for name in ("hrl-ensemble@forecast_min=1", "hrl-constant@forecast_min=0.75"):
        assert build_stack(name, ctx).handles["planner"].autoscaler.forecast_min == float(name.split("=")[1])
    with pytest.raises(ValueError, match="forecast_min"):
        build_stack("hrl-ensemble@forecast_min=0.2", ctx)
    # entry services forecast from their arrivals: off as served, on with the knob; an integer 0/1
    assert served["planner"].autoscaler.entry_forecast is False
    for name in ("hrl-ensemble@entry_forecast=1", "hrl-constant@entry_forecast=1", "hrl-scheduler@entry_forecast=1"):
        assert build_stack(name, ctx).handles["planner"].autoscaler.entry_forecast is True
    with pytest.raises(ValueError, match="entry_forecast=0.5 must be an integer"):
        build_stack("hrl-ensemble@entry_forecast=0.5", ctx)
    # a stack whose replica targets do not come from the intent refuses it rather than ignore it
    with pytest.raises(ValueError, match="knob entry_forecast: this stack's replica targets do not come from"):
        build_stack("hrl-scheduler@entry_forecast=1", replace(ctx, parts={"autoscaler": UtilizationTargetAutoscaler()}))
    # nor silently ignore it where the caller gave the intent's autoscaler, built without the knob
    given = replace(ctx, parts={"autoscaler": IntentAutoscaler()})
    assert build_stack("hrl-scheduler", given).handles["planner"].autoscaler is given.parts["autoscaler"]
    with pytest.raises(ValueError, match="knob limit_target: this stack's replica targets do not come from"):
        build_stack("hrl-scheduler@limit_target=0.2", given)


def test_the_offline_bundle_check_loads_every_member_of_an_ensemble(tmp_path):
    from policy.cli.bundle import check_bundle

    assert check_bundle(ENSEMBLE / "low") == ("low", load_placement(ENSEMBLE / "low").version)
    level, version = check_bundle(ENSEMBLE / "high")
    assert level == "high" and version.startswith("ensemble(") and version.count(",") == 2
    write_ensemble(tmp_path / "e", "low", [DEFAULT_BUNDLES / "hrl-scheduler" / "low", tmp_path / "gone"])
    with pytest.raises(ValueError, match="gone"):
        check_bundle(tmp_path / "e")


# ---- what review found ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"kind": "Ensemble", "kind": "Ensemble", "level": "low", "members": ["a"]}', r"kind: duplicate key"),
        ("[" * 5000 + "]" * 5000, r"not valid JSON \(.*deep"),
        (b"\xff\xfe", r"not UTF-8 text"),
    ],
)
def test_the_ensemble_file_is_read_as_strictly_as_a_manifest(tmp_path, text, message):
    f = tmp_path / "ensemble.json"
    f.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(BundleError, match=message):
        ensemble_members(tmp_path, "low")


def test_a_directory_with_a_manifest_and_an_ensemble_file_is_refused(tmp_path):
    d = tmp_path / "both"
    shutil.copytree(DEFAULT_BUNDLES / "hrl-scheduler" / "low", d)
    write_ensemble(d, "low", [DEFAULT_BUNDLES / "hrl-scheduler" / "low"])
    with pytest.raises(BundleError, match="holds a manifest.json too"):
        load_placement(d)


def test_one_network_listed_twice_is_refused_however_it_is_spelled(tmp_path, members):
    high = DEFAULT_BUNDLES / "hrl-scheduler" / "high"
    write_ensemble(tmp_path / "h", "high", [high, high / "intent"])
    with pytest.raises(BundleError, match=r"members\[1\]: .* is listed twice"):
        load_intent_policy(tmp_path / "h")
    with pytest.raises(BundleError, match=r"members\[1\]: the same network as members\[0\]"):
        IntentEnsemble([LearnedIntent.load(high), LearnedIntent.load(high)])
    with pytest.raises(BundleError, match=r"members\[2\]: the same network as members\[0\]"):
        PlacementEnsemble([members[0], members[1], LearnedPlacement.load(DEFAULT_BUNDLES / "hrl-scheduler" / "low")])


def test_a_members_error_names_the_ensemble_file_and_the_member(tmp_path):
    low = DEFAULT_BUNDLES / "hrl-scheduler" / "low"
    write_ensemble(tmp_path / "l", "low", [low, tmp_path / "gone"])
    with pytest.raises(BundleError, match=r"ensemble .*/l/ensemble\.json: members\[1\] \(.*gone\): ") as exc:
        load_placement(tmp_path / "l")
    assert "\n" not in str(exc.value)
    write_ensemble(tmp_path / "h", "high", [DEFAULT_BUNDLES / "hrl-scheduler" / "high", low])
    with pytest.raises(BundleError, match=r"ensemble .*/h/ensemble\.json: members\[1\] \(.*hrl-scheduler/low\): "):
        load_intent_policy(tmp_path / "h")


def test_the_signals_reach_every_member_and_the_caps_are_counted():
    from policy.live import signal_readers

    ens = load_intent_policy(ENSEMBLE / "high")
    planner = HierarchicalPolicy(intent_policy=ens)
    assert ens in signal_readers(planner)
    marker: dict = {}
    ens.signals = marker
    assert all(m.signals is marker for m in ens.members) and ens.signals is marker
    _plan_intents(ens, minutes=6)
    for k in ("lean_capped", "no_burst_capped", "service_fallbacks"):
        assert getattr(ens, k) == sum(getattr(m, k) for m in ens.members)


def test_the_burst_of_an_ensemble_is_its_first_members_tuned_constants(tmp_path):
    from policy.highlevel.tuned import tuned_burst

    first = SEEDS[1] / "hrl-scheduler" / "high"
    write_ensemble(tmp_path / "h", "high", [first, SEEDS[0] / "hrl-scheduler" / "high"])
    assert tuned_burst(tmp_path / "h") == tuned_burst(first)
    own = {"capacity_target": 0.6, "move_budget_frac": 0.0, "burst": 0.25}
    (tmp_path / "h" / "constant.json").write_text(json.dumps(own))
    assert tuned_burst(tmp_path / "h") == 0.25  # one of its own wins


def test_the_rows_token_is_the_same_object_for_the_same_member_rows_even_when_they_alternate(members):
    ens = PlacementEnsemble(members)
    idx = ClusterIndex.build(world())
    a = ens.service_rows(idx, "cart")
    own = members[0].rows.get(idx.snapshot)
    other = type(own)(own.fingerprint, own.services, own.matrix.copy(), 2, 0.0, own.encoder_version)
    members[0].embedding_source = lambda: other
    b = ens.service_rows(idx, "cart")
    members[0].embedding_source = None
    assert b is not a and b[0] is other
    assert ens.service_rows(idx, "cart") is a  # back to its own rows: the earlier token


def test_the_ensemble_stack_has_no_training_seed_knob_and_explain_says_it_does_not_split_it(members):
    from policy.lowlevel.explain import explain_scores
    from policy.sim.stacks import get_stack

    with pytest.raises(ValueError, match="tseed"):
        get_stack("hrl-ensemble@tseed=1")
    idx = ClusterIndex.build(world())
    ex = explain_scores(PlacementEnsemble(members), pod("cart", None, 1), list(idx.node_names), idx)
    assert ex.method == "none" and "ensemble of 3" in ex.notes[0]
