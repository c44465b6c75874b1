"""DRPC training (torch): a trained-for-seconds run exports bundles the numpy autoscaler loads and acts with;
the predictor learns to beat a naive forecast; the teacher's input handles any number of deployments."""

from __future__ import annotations

import csv
import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from policy.bundle import PolicyBundle
from policy.cli.core import main
from policy.highlevel import DRPC_SPEC, HRL_SPEC, DrpcAutoscaler, DrpcState, StudentActor
from policy.sim.drpc import drpc_hook, signals_from_sim
from policy.train import drpc as drpc_train
from policy.train.drpc import (
    GLOBAL_EXTRA,
    DrpcTrainConfig,
    PredictorConfig,
    evaluate_predictor,
    export_predictor,
    teacher_input,
    train_drpc,
    train_predictor,
)
from policy.train.finetune import RunOptions
from policy.train.forecast_data import Windows, windows_of
from policy.train.td3 import Actor


def wavy(n: int, seed: int) -> np.ndarray:
    """A smooth daily-like wave with multiplicative noise: smoothing beats the last value."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return 100 * (1.5 + np.sin(2 * np.pi * t / 90 + rng.uniform(0, 6))) * rng.uniform(0.75, 1.25, n)


def small_windows(seeds, window=12, horizon=3) -> Windows:
    ws = [windows_of(wavy(600, s), window, horizon, stride=2) for s in seeds]
    return Windows(np.concatenate([w.x for w in ws]), np.concatenate([w.y for w in ws]))


def test_the_gru_predictor_beats_the_last_value_forecast_on_held_out_noisy_series():
    cfg = PredictorConfig(window=12, horizon=3, hidden=16, epochs=20, batch_size=128, lr=1e-2, seed=0)
    held = {"wavy": small_windows(range(100, 103))}
    model, rep = train_predictor(cfg, data=small_windows(range(6)), heldout=held, progress=False)
    assert rep["wavy"]["gru"]["wape"] < 0.9 * rep["wavy"]["naive"]["wape"]
    assert evaluate_predictor(model, held, 3)["wavy"]["gru"]["wape"] == pytest.approx(rep["wavy"]["gru"]["wape"])


@pytest.mark.parametrize("n", [1, 4, 11])
def test_the_teacher_input_is_each_row_plus_the_same_pooled_summary_for_any_number_of_deployments(n):
    local = np.random.default_rng(n).uniform(size=(n, len(HRL_SPEC))).astype(np.float32)
    extra = np.arange(len(GLOBAL_EXTRA), dtype=np.float32)
    x = teacher_input(local, extra)
    F = len(HRL_SPEC)
    assert x.shape == (n, F + 2 * len(DRPC_SPEC) + len(GLOBAL_EXTRA))
    assert np.array_equal(x[:, :F], local)
    assert np.allclose(x[:, F : F + len(DRPC_SPEC)], local[:, : len(DRPC_SPEC)].mean(axis=0))
    assert np.allclose(x[:, F + len(DRPC_SPEC) : F + 2 * len(DRPC_SPEC)], local[:, : len(DRPC_SPEC)].max(axis=0))
    assert np.array_equal(x[:, -len(GLOBAL_EXTRA) :], np.repeat(extra[None], n, axis=0))


def test_a_seconds_long_run_exports_bundles_that_the_numpy_autoscaler_loads_and_acts_with(tmp_path):
    torch.set_num_threads(1)
    pcfg = PredictorConfig(window=10, horizon=3, hidden=8, epochs=1, seed=0)
    model, rep = train_predictor(
        pcfg, data=small_windows(range(2), 10, 3), heldout={"w": small_windows([9], 10, 3)}, progress=False
    )
    pb = export_predictor(model, pcfg, tmp_path / "pred", rep)
    cfg = DrpcTrainConfig(
        apps=("online-boutique",),
        students=("drpc", "hrl"),
        total_minutes=40,
        episode_minutes=8,
        n_samples=100,
        updates_per_minute=1,
        student_from=0.0,
        student_share=1.0,
        td3=replace(DrpcTrainConfig().td3, learning_starts=20, batch_size=16),
        seed=3,
    )
    dirs = {"drpc": tmp_path / "drpc", "hrl": tmp_path / "hrl"}
    tb = tmp_path / "tb"
    report = train_drpc(
        cfg,
        out_dir=tmp_path / "run",
        bundle_dirs=dirs,
        predictor=pb,
        progress=False,
        plots=True,
        opts=RunOptions(tensorboard=tb),
    )
    assert report["simulated_minutes"] >= 40 and (tmp_path / "run" / "learning_curves.png").is_file()
    with (tmp_path / "run" / "validation.csv").open() as fh:
        vrows = list(csv.DictReader(fh))
    assert {r["policy"] for r in vrows} == {"teacher", "drpc", "hrl"}
    with (tmp_path / "run" / "progress.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert rows and {"reward", "running_reward", "failed_pct", "cpu_core_hours", "driver"} <= set(rows[0])
    # the same numbers as TensorBoard scalars: per episode, and the validation per policy at its minute
    ea = EventAccumulator(str(tb))
    ea.Reload()
    got = [(e.step, e.value) for e in ea.Scalars("drpc/reward")]
    assert got == [(k, pytest.approx(float(r["reward"]), rel=1e-6)) for k, r in enumerate(rows)]
    hrl = [(int(r["minutes"]), float(r["reward"])) for r in vrows if r["policy"] == "hrl"]
    assert [(e.step, pytest.approx(e.value, rel=1e-6)) for e in ea.Scalars("drpc_validation/hrl/reward")] == hrl
    assert not (tmp_path / "run" / "staged-bundles").exists()
    for name, spec in (("drpc", DRPC_SPEC), ("hrl", HRL_SPEC)):
        student = PolicyBundle.load(dirs[name] / "student", level="high", feature_spec={"local": spec})
        assert PolicyBundle.load(dirs[name] / "predictor").policy_version == pb.policy_version
        assert student.metadata["predictor_version"] == pb.policy_version  # each student with its own predictor
        digest = json.loads((dirs[name] / "student" / "manifest.json").read_text())["weights"]["sha256"]
        assert re.fullmatch(rf"drpc-student-{name}-\d{{8}}-s3-{digest[:8]}", student.policy_version)
        # parity: the exported numpy student against the torch actor rebuilt from the checkpoint
        ckpt = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)
        actor = Actor(len(spec), 1, cfg.td3.hidden)
        actor.load_state_dict(ckpt[f"{name}_actor"])
        x = np.random.default_rng(0).normal(size=(5, len(spec))).astype(np.float32)
        with torch.no_grad():
            want = actor(torch.as_tensor(x)).numpy()[:, 0]
        assert np.max(np.abs(StudentActor(student, spec)(x) - want)) < 1e-5
    # the DRPC student drives a short simulation through the stack's hook
    from policy.sim.app import load_app
    from policy.sim.engine import SimConfig, Simulation
    from policy.sim.sizing import cluster_for, trace_rps
    from policy.sim.stacks import StackContext, autoscaled_workloads, default_kube_scheduler

    app = load_app("online-boutique")
    scaler = DrpcAutoscaler.load(dirs["drpc"], slo_p95_ms=app.slo_p95_ms)
    sim_cfg = SimConfig(minutes=5, seed=0, n_samples=100)
    built = default_kube_scheduler(StackContext(app, cluster_for(app), 0, sim_cfg))
    sim = Simulation(
        app,
        trace_rps(app, "nasa", 5, 100),
        cluster_for(app),
        built.scheduler,
        sim_cfg,
        hooks=[drpc_hook(scaler, autoscaled_workloads(app))],
    )
    sim.run()
    assert set(signals_from_sim(sim)) >= {"frontend", "cartservice"}
    state = DrpcState()
    targets = scaler.replica_targets(sim.observe(), state, signals_from_sim(sim), autoscaled_workloads(app))
    assert set(targets) == set(autoscaled_workloads(app)) and all(1 <= n <= 10 for n in targets.values())


# ---- nothing half-written, quick runs elsewhere, versions that name the weights ---------------------------


def tiny_config(**kw) -> DrpcTrainConfig:
    return DrpcTrainConfig(
        apps=("online-boutique",),
        total_minutes=16,
        episode_minutes=8,
        n_samples=100,
        updates_per_minute=1,
        td3=replace(DrpcTrainConfig().td3, learning_starts=8, batch_size=8, hidden=8),
        eval_every=0,
        **kw,
    )


def tiny_predictor(path: Path, quick: bool = False) -> PolicyBundle:
    pcfg = PredictorConfig(window=10, horizon=3, hidden=8, epochs=1, seed=0)
    model, rep = train_predictor(
        pcfg, data=small_windows(range(1), 10, 3), heldout={"w": small_windows([9], 10, 3)}, progress=False
    )
    return export_predictor(model, pcfg, path, rep, **({"quick": True} if quick else {}))


def committed_like(root: Path) -> dict[Path, bytes]:
    """Stand-in 'committed' bundles (student + predictor per directory) and their file contents."""
    for d in ("drpc", "hrl-scheduler/high", "hrl-flat/high"):
        for part in ("student", "predictor"):
            (root / d / part).mkdir(parents=True, exist_ok=True)
            (root / d / part / "manifest.json").write_text(f"committed {d} {part}")
    return contents(root)


def contents(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    "argv,flag,value",
    [
        (["--apps", "nope"], "--apps", "'nope'"),
        (["--apps", "online-boutique,nope"], "--apps", "'nope'"),
        (["--students", "drpc,bogus"], "--students", "bogus"),
        (["--minutes", "0"], "--minutes", "0"),
        (["--seed", "-1"], "--seed", "-1"),
        (["--predictor", "/nonexistent/predictor"], "--predictor", "/nonexistent/predictor"),
    ],
)
def test_a_bad_argument_is_refused_before_anything_is_trained_or_written(tmp_path, capsys, argv, flag, value):
    root = tmp_path / "root"
    before = committed_like(root)
    rc = main(["train", "drpc", "--quick", "--out", str(root), "--run-dir", str(tmp_path / "run"), *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith(f"hrl-policy train drpc: error: {flag}: ") and value in err[0]
    assert contents(root) == before  # the predictor is not trained and written before --apps is checked
    assert not (tmp_path / "run").exists()


def test_a_run_that_fails_on_the_way_leaves_every_bundle_directory_as_it_was(tmp_path, monkeypatch):
    torch.set_num_threads(1)
    root = tmp_path / "root"
    before = committed_like(root)
    pb = tiny_predictor(tmp_path / "pred")

    def broken_plot(*a, **k):
        raise RuntimeError("matplotlib exploded")

    monkeypatch.setattr(drpc_train, "_plot", broken_plot)  # after the students are exported
    dirs = {"drpc": root / "drpc", "hrl": root / "hrl-scheduler" / "high"}
    with pytest.raises(RuntimeError, match="exploded"):
        train_drpc(
            tiny_config(students=("drpc", "hrl")),
            out_dir=tmp_path / "run",
            bundle_dirs=dirs,
            predictor=pb,
            progress=False,
        )
    assert contents(root) == before


def test_a_quick_run_without_bundle_directories_writes_under_its_run_directory(tmp_path, monkeypatch):
    torch.set_num_threads(1)
    committed = tmp_path / "committed"
    monkeypatch.setattr(
        drpc_train,
        "DEFAULT_BUNDLE_DIRS",
        {
            "drpc": committed / "drpc",
            "hrl": committed / "hrl-scheduler" / "high",
            "hrl-td3": committed / "hrl-flat" / "high",
        },
    )
    monkeypatch.setattr(drpc_train, "DEFAULT_DRPC_BUNDLE", committed / "drpc")
    pb = tiny_predictor(tmp_path / "pred", quick=True)
    rep = train_drpc(
        tiny_config(students=("drpc",), quick=True), out_dir=tmp_path / "run", predictor=pb, progress=False, plots=False
    )
    assert not committed.exists()
    assert rep["bundle_dirs"] == {"drpc": str(tmp_path / "run" / "bundles" / "drpc")}
    student = PolicyBundle.load(tmp_path / "run" / "bundles" / "drpc" / "student")
    assert "-s0-quick-" in student.policy_version and "-s0-quick-" in pb.policy_version


def test_the_quick_command_line_default_is_the_run_directory_and_the_log_says_so(tmp_path, monkeypatch, capsys):
    seen = {}

    def fake_train(cfg, out_dir=None, bundle_dirs=None, predictor=None, **kw):
        seen.update(cfg=cfg, out_dir=out_dir, bundle_dirs=bundle_dirs)
        return {
            "config": {"quick": cfg.quick},
            "episodes": 1,
            "simulated_minutes": 15,
            "train_wall_s": 1.0,
            "run_dir": str(out_dir),
            "bundle_dirs": {k: str(v) for k, v in (bundle_dirs or {}).items()},
        }

    monkeypatch.setattr(drpc_train, "train_drpc", fake_train)
    assert main(["train", "drpc", "--quick", "--students", "drpc,hrl,hrl-td3", "--run-dir", str(tmp_path / "run")]) == 0
    bundles = tmp_path / "run" / "bundles"
    assert seen["cfg"].quick and seen["bundle_dirs"] == {
        "drpc": bundles / "drpc",
        "hrl": bundles / "hrl-scheduler" / "high",
        "hrl-td3": bundles / "hrl-flat" / "high",
    }
    err = capsys.readouterr().err
    assert "quick run" in err and f"drpc → {bundles / 'drpc'}" in err


def test_an_out_directory_holding_other_files_is_refused_before_training(tmp_path, capsys):
    root = tmp_path / "root"
    before = committed_like(root)
    (root / "drpc" / "notes.txt").write_text("mine")
    rc = main(["train", "drpc", "--quick", "--students", "drpc", "--out", str(root), "--run-dir", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "notes.txt" in err[0] and "refusing" in err[0]
    assert contents(root) == {**before, root / "drpc" / "notes.txt": b"mine"} and not (tmp_path / "r").exists()
