"""Fine-tuning on your own app (``hrl-policy train --all --app DIR --fine-tune [ROOT]``, policy/train/finetune.py): each
stage starts from the committed bundle's weights and input normalization (with a zero learning rate or no update the
output is the source, with updates it moves away from it), the bundles say what they were fine-tuned from, a source the
stage could not start from is refused in one line before anything trains, and bad flag values are one-line errors."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from policy.bundle import DEFAULT_BUNDLES, PolicyBundle
from policy.cli.core import main
from policy.encoder import GraphEncoder
from policy.highlevel import HRL_SPEC, LearnedIntent
from policy.lowlevel import load_learned_placement
from policy.sim.app import builtin_apps_dir
from policy.train import constant, placement
from policy.train import pipeline as ta
from policy.train.dagger import QUICK as DAGGER_QUICK
from policy.train.dagger import DaggerConfig, train_dagger
from policy.train.drpc import (
    GLOBAL_EXTRA,
    DrpcTrainConfig,
    fine_tune_sources,
    teacher_from_student,
    train_drpc,
)
from policy.train.episodes import TrainingTarget
from policy.train.finetune import FineTune, RunOptions
from policy.train.placement import QUICK as PLACEMENT_QUICK
from policy.train.placement import PlacementTrainConfig, train_placement
from policy.train.td3 import TD3, Actor, ReplayBufferSamples, TD3Config
from tests.unit.test_train_all import fake_bundle, stand_ins


@pytest.fixture
def shop(tmp_path) -> str:
    """An app folder as ``hrl-policy app build`` writes one (app.yaml + manifests), named ``my-shop``."""
    d = tmp_path / "apps" / "shop"
    shutil.copytree(builtin_apps_dir() / "sock-shop", d)
    y = d / "app.yaml"
    y.write_text(y.read_text().replace("name: sock-shop", "name: my-shop", 1))
    return str(d)


def arrays(b: PolicyBundle) -> dict[str, np.ndarray]:
    return {k: np.array(v) for k, v in b.weights.items()}  # writable copies


def same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in a)


# ---- placement -----------------------------------------------------------------------------------------------


def tiny_placement(shop: str, **kw) -> PlacementTrainConfig:
    quick = {k: v for k, v in PLACEMENT_QUICK.items() if k != "hidden"}  # the source's width
    return PlacementTrainConfig(
        **{**quick, "train_apps": (shop,), "synthetic_share": 0.0, "heldout_apps": (), "iterations": 2, **kw}
    )


def test_placement_starts_from_the_bundles_weights_keeps_its_normalization_and_moves_away_with_updates(
    tmp_path, monkeypatch, shop
):
    src = PolicyBundle.load(DEFAULT_BUNDLES / "hrl-scheduler" / "low")
    seen: list[tuple[dict, dict]] = []
    real = placement.ppo_update

    def spy(net, *a, **k):
        before = net.numpy_weights()
        out = real(net, *a, **k)
        seen.append((before, net.numpy_weights()))
        return out

    monkeypatch.setattr(placement, "ppo_update", spy)
    prov = FineTune().provenance("hrl-scheduler/low", src)
    log = lambda m: None  # noqa: E731
    # a zero learning rate: every update is a no-op, the bundle written is the source's weights exactly
    train_placement(
        tiny_placement(shop, lr=0.0), tmp_path / "zero", tmp_path / "r0", log, False, False, opts=RunOptions(init=src)
    )
    assert seen and same(seen[0][0], arrays(src))
    zero = PolicyBundle.load(tmp_path / "zero")
    assert same(arrays(zero), arrays(src)) and zero.normalization == src.normalization
    # with updates the weights leave the source's; the normalization stays the source's (served == trained)
    seen.clear()
    out = tmp_path / "ft"
    train_placement(
        tiny_placement(shop), out, tmp_path / "r1", log, False, False, opts=RunOptions(init=src, fine_tuned_from=prov)
    )
    assert same(seen[0][0], arrays(src)) and not same(seen[-1][1], arrays(src))
    ft = PolicyBundle.load(out)
    assert ft.normalization == src.normalization
    assert ft.metadata["fine_tuned_from"] == {
        "policy_version": src.policy_version,
        "bundle": "hrl-scheduler/low",
        "root": str(DEFAULT_BUNDLES),
    }
    assert "-ft-quick-" in ft.policy_version and ft.metadata["train_apps"] == [shop]
    # a fresh start does not begin at the source's weights (what the assertions above tell apart)
    seen.clear()
    train_placement(tiny_placement(shop), None, tmp_path / "r2", log, False, False)
    assert not same(seen[0][0], arrays(src))


# ---- DRPC ------------------------------------------------------------------------------------------------------


def tiny_drpc(shop: str, **td3) -> DrpcTrainConfig:
    return DrpcTrainConfig(
        apps=(shop,),
        students=("drpc", "hrl"),
        total_minutes=16,
        episode_minutes=8,
        n_samples=100,
        updates_per_minute=1,
        eval_every=0,
        td3=replace(DrpcTrainConfig().td3, batch_size=8, **td3),
    )


def test_the_teacher_starts_as_the_student_on_its_local_columns():
    student = PolicyBundle.load(DEFAULT_BUNDLES / "hrl-scheduler" / "high" / "student")
    F = len(HRL_SPEC)
    FT = F + 2 * 15 + len(GLOBAL_EXTRA)
    teacher, actor = Actor(FT, 1, 64), Actor(F, 1, 64)
    teacher.load_state_dict({k: torch.as_tensor(v) for k, v in teacher_from_student(arrays(student), FT).items()})
    actor.load_state_dict({k: torch.as_tensor(v) for k, v in arrays(student).items()})
    aug = torch.as_tensor(np.random.default_rng(0).normal(size=(6, FT)).astype(np.float32))
    with torch.no_grad():
        assert torch.allclose(teacher(aug), actor(aug[:, :F]), atol=1e-6)
    with pytest.raises(ValueError, match="the student has 47 inputs, the teacher 20"):
        teacher_from_student(arrays(student), 20)


def test_drpc_students_start_from_their_bundles_and_move_away_only_with_updates(tmp_path, shop):
    ft = FineTune()
    init, predictor = fine_tune_sources(ft, tiny_drpc(shop))
    prov = {k: ft.provenance(f"x/{k}", b) for k, b in init.items()}
    dirs = {"drpc": tmp_path / "a" / "drpc", "hrl": tmp_path / "a" / "hrl"}
    # no update at all (learning never starts): the students written are the sources
    train_drpc(
        tiny_drpc(shop, learning_starts=10**6),
        out_dir=tmp_path / "run0",
        bundle_dirs=dirs,
        predictor=predictor,
        progress=False,
        plots=False,
        opts=RunOptions(init=init, fine_tuned_from=prov),
    )
    for name in ("drpc", "hrl"):
        b = PolicyBundle.load(dirs[name] / "student")
        assert same(arrays(b), arrays(init[name])), name
        assert b.metadata["fine_tuned_from"]["policy_version"] == init[name].policy_version
        assert "-ft-" in b.policy_version
        # the predictor is the source's, unchanged (its forecasts are the students' inputs)
        assert PolicyBundle.load(dirs[name] / "predictor").policy_version == predictor.policy_version
    # with updates (no critic warm-up) the actors leave the sources
    dirs = {"drpc": tmp_path / "b" / "drpc", "hrl": tmp_path / "b" / "hrl"}
    train_drpc(
        tiny_drpc(shop, learning_starts=8),
        out_dir=tmp_path / "run1",
        bundle_dirs=dirs,
        predictor=predictor,
        progress=False,
        plots=False,
        opts=RunOptions(init=init),
    )
    for name in ("drpc", "hrl"):
        b = PolicyBundle.load(dirs[name] / "student")
        assert not same(arrays(b), arrays(init[name])), name
        assert "fine_tuned_from" not in b.metadata  # none given, none claimed


def test_a_critic_warmup_keeps_the_actor_fixed_for_its_updates():
    rng = np.random.default_rng(0)
    agent = TD3(4, 1, TD3Config(policy_delay=1, critic_warmup=3, batch_size=8), seed=0)
    b = ReplayBufferSamples(
        *(torch.as_tensor(rng.normal(size=s).astype(np.float32)) for s in ((8, 4), (8, 1), (8, 4))),
        torch.zeros(8, 1),
        torch.as_tensor(rng.normal(size=(8, 1)).astype(np.float32)),
    )
    start = {k: v.clone() for k, v in agent.actor.state_dict().items()}
    assert [agent.update(b)["actor_loss"] for _ in range(3)] == [None, None, None]
    assert all(torch.equal(start[k], v) for k, v in agent.actor.state_dict().items())
    assert agent.update(b)["actor_loss"] is not None
    assert not all(torch.equal(start[k], v) for k, v in agent.actor.state_dict().items())


# ---- DAgger and the constant ------------------------------------------------------------------------------------


def test_dagger_starts_from_the_intent_bundle_and_keeps_its_normalization_and_reach(tmp_path, shop):
    src = PolicyBundle.load(DEFAULT_BUNDLES / "hrl-scheduler" / "high" / "intent")
    cfg = DaggerConfig(**{**DAGGER_QUICK, "apps": (shop,), "synthetic_share": 0.0})
    prov = FineTune().provenance("hrl-scheduler/high/intent", src)
    log = lambda m: None  # noqa: E731
    train_dagger(
        replace(cfg, lr=0.0),
        tmp_path / "zero",
        tmp_path / "r0",
        log=log,
        opts=RunOptions(init=src, fine_tuned_from=prov),
    )
    zero = PolicyBundle.load(tmp_path / "zero" / "intent")
    assert same(arrays(zero), arrays(src)) and zero.normalization == src.normalization
    train_dagger(cfg, tmp_path / "ft", tmp_path / "r1", log=log, opts=RunOptions(init=src, fine_tuned_from=prov))
    ft = PolicyBundle.load(tmp_path / "ft" / "intent")
    assert not same(arrays(ft), arrays(src)) and ft.normalization == src.normalization
    assert ft.metadata["fine_tuned_from"]["policy_version"] == src.policy_version
    assert ft.metadata["fallback"]["global_z_max"] >= src.metadata["fallback"]["global_z_max"]
    assert ft.metadata["encoder_version"] == GraphEncoder.load().version and "-ft-quick-" in ft.policy_version
    LearnedIntent.load(tmp_path / "ft")  # the descheduler's loader takes it


def test_the_constant_search_includes_and_records_the_sources_point(tmp_path, monkeypatch, shop):
    src = tmp_path / "src" / "hrl-scheduler" / "high"
    src.mkdir(parents=True)
    (src / "constant.json").write_text(json.dumps({"capacity_target": 0.75, "move_budget_frac": 0.2, "burst": 0.3}))
    got = {}
    monkeypatch.setattr(constant, "tune_constant", lambda cfg, *a, **k: got.update(cfg=cfg, **k))
    ft = FineTune(tmp_path / "src")
    constant.train_stage(tmp_path / "root", log=lambda m: None, target=TrainingTarget((shop,)), fine_tune=ft)
    assert 0.75 in got["cfg"].capacity_targets and 0.2 in got["cfg"].move_budgets and 0.3 in got["cfg"].burst_shares
    assert got["cfg"].episodes == constant.FINE_TUNE["episodes"] and got["cfg"].apps == (shop,)
    assert got["extra"]["fine_tuned_from"]["capacity_target"] == 0.75
    (src / "constant.json").write_text('{"capacity_target": 3}')
    with pytest.raises(ValueError, match=r"^--fine-tune: .*constant.json: capacity_target: expected a number"):
        constant.check_fine_tune(ft, tmp_path / "root")


# ---- the pipeline and the command line --------------------------------------------------------------------------


def taking_fine_tune(fn):
    """A stand-in stage that also takes ``fine_tune`` (and requires it: a fine-tune hands it to every stage)."""

    def stage(root, *, fine_tune, **kw):
        assert isinstance(fine_tune, FineTune)
        return fn(root, **kw)

    return stage


def test_the_pipeline_fine_tunes_all_but_the_encoder_and_completes_the_root_from_the_source(tmp_path, monkeypatch):
    source, root = tmp_path / "source", tmp_path / "root"
    fake_bundle(source / "encoder", "source-encoder")
    for d in ("drpc", "hrl-scheduler/high", "hrl-no-encoder/high", "hrl-flat/high"):
        fake_bundle(source / d / "student", f"source-{d}")
    fake_bundle(root / "hrl-flat" / "high" / "student", "root-flat")  # the root's own wins over the source's
    monkeypatch.setattr(ta, "STAGES", tuple(replace(s, fine_tune_check="") for s in ta.STAGES))
    order: list[str] = []
    seen = []

    def placement_stage(r, *, quick, seed, log, fine_tune=None):
        seen.append((fine_tune, json.loads((r / "encoder" / "manifest.json").read_text())["tag"]))
        return stand_ins(order)["placement"](r, quick=quick, seed=seed, log=log)

    report = ta.run_all(
        root,
        stages=["placement"],
        trainers={"placement": placement_stage},
        log=lambda m: None,
        options=ta.StageOptions(fine_tune=FineTune(source)),
    )
    assert report.ok and seen == [(FineTune(source), "source-encoder")]
    tag = lambda *p: json.loads(root.joinpath(*p, "manifest.json").read_text())["tag"]  # noqa: E731
    assert tag("encoder") == "source-encoder" and tag("drpc", "student") == "source-drpc"
    assert tag("hrl-flat", "high", "student") == "root-flat" and tag("hrl-scheduler", "low") == "hrl-scheduler-low"
    assert "encoder" in report.from_source and "hrl-scheduler/low" not in report.from_source
    assert report.to_json()["fine_tune"]["source"] == str(source)
    # the default stages of a fine-tune: every stage but the encoder
    order.clear()
    trainers = {k: taking_fine_tune(f) for k, f in stand_ins(order).items()}
    fake_bundle(source / "hrl-scheduler" / "low", "source-low")
    report = ta.run_all(
        tmp_path / "r2", trainers=trainers, log=lambda m: None, options=ta.StageOptions(fine_tune=FineTune(source))
    )
    assert order == ["drpc", "placement", "constant", "dagger"] and report.ok
    with pytest.raises(ValueError, match="stages: encoder: not fine-tuned"):
        ta.run_all(tmp_path / "r3", stages=["encoder"], options=ta.StageOptions(fine_tune=FineTune(source)))


def test_train_all_fine_tune_trains_from_the_committed_bundles_into_a_complete_root(tmp_path, capsys, shop):
    out = tmp_path / "bundles"
    argv = ["train", "--all", "--quick", "--app", shop, "--fine-tune", "--stages", "placement,dagger"]
    assert main([*argv, "--out", str(out), "--report", str(tmp_path / "rep")]) == 0, capsys.readouterr().err
    report = json.loads((tmp_path / "rep" / "training.json").read_text())
    assert report["ok"] and report["fine_tune"]["source"] == str(DEFAULT_BUNDLES)
    assert {"encoder", "drpc", "hrl-flat/high"} <= set(report["fine_tune"]["from_source"])
    for rel in ("hrl-scheduler/low", "hrl-no-encoder/low", "hrl-flat/low", "hrl-scheduler/high/intent"):
        b = PolicyBundle.load(out / rel)
        src = PolicyBundle.load(DEFAULT_BUNDLES / rel)
        assert b.metadata["fine_tuned_from"] == {
            "policy_version": src.policy_version,
            "bundle": rel,
            "root": str(DEFAULT_BUNDLES),
        }
        assert b.dims["hidden"] == src.dims["hidden"] and b.normalization == src.normalization  # not quick's width
    enc = PolicyBundle.load(out / "encoder")
    assert enc.policy_version == PolicyBundle.load(DEFAULT_BUNDLES / "encoder").policy_version
    load_learned_placement(out / "hrl-scheduler" / "low")  # the extender's and the descheduler's loaders take them
    LearnedIntent.load(out / "hrl-scheduler" / "high")


def incompatible(tmp_path: Path, how: str) -> Path:
    """A copy of the committed bundles whose hrl-scheduler/low a placement stage could not start from."""
    src = tmp_path / "src"
    shutil.copytree(DEFAULT_BUNDLES, src, ignore=shutil.ignore_patterns("seeds"))
    low = src / "hrl-scheduler" / "low"
    if how == "flat":  # the flat variant's bundle where the encoder variant's belongs
        shutil.rmtree(low)
        shutil.copytree(src / "hrl-no-encoder" / "low", low)
    else:  # a narrower network
        m = json.loads((low / "manifest.json").read_text())
        m["dims"]["hidden"] = 32
        (low / "manifest.json").write_text(json.dumps(m))
    return src


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("flat", "feature_spec.candidate"),
        ("hidden", "dims.hidden: the placement stage builds 64, the bundle has 32"),
    ],
)
def test_an_incompatible_source_bundle_is_one_line_naming_it_and_the_field_before_any_stage(
    tmp_path, monkeypatch, capsys, shop, how, message
):
    src = incompatible(tmp_path, how)
    order: list[str] = []
    real = ta.resolve
    monkeypatch.setattr(
        ta, "resolve", lambda stage, entry=None: real(stage, entry) if entry else stand_ins(order)[stage.name]
    )
    out = tmp_path / "out" / "bundles"
    rc = main(
        ["train", "--all", "--app", shop, "--fine-tune", str(src), "--out", str(out), "--report", str(tmp_path / "r")]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and order == [] and not out.exists(), err
    assert len(err) == 1 and err[0].startswith(
        f"hrl-policy train: error: --fine-tune: bundle {src / 'hrl-scheduler' / 'low'}: "
    )
    assert message in err[0]
    assert [p.name for p in out.parent.iterdir()] == []  # no staging directory left behind


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--fine-tune"], "--fine-tune: only with --app"),
        (["--app", "SHOP", "--fine-tune", "/nowhere/bundles"], "--fine-tune: /nowhere/bundles: not a directory"),
        (
            ["--app", "SHOP", "--fine-tune", "--stages", "encoder,placement"],
            "--stages: with --fine-tune, expected a subset of drpc,placement,constant,dagger",
        ),
        (["--app", "SHOP", "--fine-tune", "EMPTY"], "--fine-tune: bundle EMPTY/drpc/predictor: manifest.json: missing"),
    ],
)
def test_a_bad_fine_tune_value_is_one_line_and_exit_2_before_any_stage(
    tmp_path, monkeypatch, capsys, shop, argv, message
):
    (tmp_path / "empty").mkdir()
    subst = {"SHOP": shop, "EMPTY": str(tmp_path / "empty")}
    argv = [subst.get(a, a) for a in argv]
    message = message.replace("EMPTY", str(tmp_path / "empty"))
    order: list[str] = []
    real = ta.resolve
    monkeypatch.setattr(
        ta, "resolve", lambda stage, entry=None: real(stage, entry) if entry else stand_ins(order)[stage.name]
    )
    rc = main(["train", "--all", "--out", str(tmp_path / "b"), "--report", str(tmp_path / "r"), *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and order == [] and not (tmp_path / "b").exists(), err
    assert len(err) == 1 and err[0].startswith(f"hrl-policy train: error: {message}"), err
