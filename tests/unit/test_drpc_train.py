"""DRPC training (torch): a trained-for-seconds run exports bundles the numpy autoscaler loads and acts with;
the predictor learns to beat a naive forecast; the teacher's input handles any number of deployments."""

from __future__ import annotations

import csv
from dataclasses import replace

import numpy as np
import pytest
import torch

from policy.bundle import PolicyBundle
from policy.drpc import DRPC_SPEC, HRL_SPEC, DrpcAutoscaler, DrpcState, StudentActor, drpc_hook, signals_from_sim
from policy.drpc_train import (GLOBAL_EXTRA, DrpcTrainConfig, PredictorConfig, evaluate_predictor, export_predictor,
                               teacher_input, train_drpc, train_predictor)
from policy.forecast_data import Windows, windows_of
from policy.td3 import Actor, TD3Config


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
    assert np.allclose(x[:, F:F + len(DRPC_SPEC)], local[:, :len(DRPC_SPEC)].mean(axis=0))
    assert np.allclose(x[:, F + len(DRPC_SPEC):F + 2 * len(DRPC_SPEC)], local[:, :len(DRPC_SPEC)].max(axis=0))
    assert np.array_equal(x[:, -len(GLOBAL_EXTRA):], np.repeat(extra[None], n, axis=0))


def test_a_seconds_long_run_exports_bundles_that_the_numpy_autoscaler_loads_and_acts_with(tmp_path):
    torch.set_num_threads(1)
    pcfg = PredictorConfig(window=10, horizon=3, hidden=8, epochs=1, seed=0)
    model, rep = train_predictor(pcfg, data=small_windows(range(2), 10, 3), heldout={"w": small_windows([9], 10, 3)},
                                 progress=False)
    pb = export_predictor(model, pcfg, tmp_path / "pred", rep)
    cfg = DrpcTrainConfig(apps=("online-boutique",), students=("drpc", "hrl"), total_minutes=40, episode_minutes=8,
                          n_samples=100, updates_per_minute=1, student_from=0.0, student_share=1.0,
                          td3=replace(DrpcTrainConfig().td3, learning_starts=20, batch_size=16), seed=3)
    dirs = {"drpc": tmp_path / "drpc", "hrl": tmp_path / "hrl"}
    report = train_drpc(cfg, out_dir=tmp_path / "run", bundle_dirs=dirs, predictor=pb, progress=False, plots=True)
    assert report["simulated_minutes"] >= 40 and (tmp_path / "run" / "learning_curves.png").is_file()
    with (tmp_path / "run" / "validation.csv").open() as fh:
        assert {r["policy"] for r in csv.DictReader(fh)} == {"teacher", "drpc", "hrl"}
    with (tmp_path / "run" / "progress.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert rows and {"reward", "running_reward", "failed_pct", "cpu_core_hours", "driver"} <= set(rows[0])
    for name, spec in (("drpc", DRPC_SPEC), ("hrl", HRL_SPEC)):
        student = PolicyBundle.load(dirs[name] / "student", level="high", feature_spec={"local": spec})
        assert PolicyBundle.load(dirs[name] / "predictor").policy_version == pb.policy_version
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
    from policy.sim.stacks import StackContext, autoscaled_workloads, default_kube_scheduler
    from policy.simulate import cluster_for, trace_rps

    app = load_app("online-boutique")
    scaler = DrpcAutoscaler.load(dirs["drpc"], slo_p95_ms=app.slo_p95_ms)
    sim_cfg = SimConfig(minutes=5, seed=0, n_samples=100)
    built = default_kube_scheduler(StackContext(app, cluster_for(app), 0, sim_cfg))
    sim = Simulation(app, trace_rps(app, "nasa", 5, 100), cluster_for(app), built.scheduler, sim_cfg,
                     hooks=[drpc_hook(scaler, autoscaled_workloads(app))])
    sim.run()
    assert set(signals_from_sim(sim)) >= {"frontend", "cartservice"}
    state = DrpcState()
    targets = scaler.replica_targets(sim.observe(), state, signals_from_sim(sim), autoscaled_workloads(app))
    assert set(targets) == set(autoscaled_workloads(app)) and all(1 <= n <= 10 for n in targets.values())
