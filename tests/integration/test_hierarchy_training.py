"""The learned high level's training, end to end and small: a seconds-long PPO run whose episodes are Ray tasks on
a local Ray exports a bundle that the descheduler serves (the real CLI, one cycle on a snapshot) next to the low
level's bundle the extender serves."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("ray")

from policy.bundle import DEFAULT_BUNDLES
from policy.train.hierarchy import HierarchyTrainConfig, train_hierarchy

ROOT = Path(__file__).resolve().parents[2]


def boutique_snapshot(path: Path) -> Path:
    """A ``kubectl get nodes,pods,deployments -o json`` List of Online Boutique placed on a simulated cluster."""
    import numpy as np

    from policy.baselines.kube_default import default_score_plugins
    from policy.sim.app import load_app
    from policy.sim.engine import SimConfig, Simulation
    from policy.sim.kube_scheduler import KubeSchedulerModel
    from policy.sim.sizing import cluster_for

    app = load_app("online-boutique")
    sim = Simulation(
        app,
        np.full(3, 20.0),
        cluster_for(app),
        KubeSchedulerModel(plugins=default_score_plugins()),
        SimConfig(minutes=3, seed=0),
    )
    sim.run()
    path.write_text(
        json.dumps({"apiVersion": "v1", "kind": "List", "items": [*sim.cluster.objects(), *app.deployments]})
    )
    return path


def test_a_short_training_run_on_a_local_ray_exports_bundles_the_descheduler_and_the_extender_load(tmp_path):
    root = tmp_path / "bundles"
    shutil.copytree(DEFAULT_BUNDLES / "hrl-scheduler", root / "hrl-scheduler")
    cfg = HierarchyTrainConfig(
        iterations=1,
        episodes_per_iteration=2,
        episode_minutes=10,
        n_samples=60,
        eval_every=1,
        eval_episodes=2,
        workers=2,
        synthetic_share=0.0,
        quick=True,
    )
    net, report = train_hierarchy(
        cfg, root / "hrl-scheduler" / "high", tmp_path / "run", bundles_root=root, log=lambda m: None
    )
    assert report["policy_version"].startswith("intent-") and "-quick-" in report["policy_version"]
    assert (tmp_path / "run" / "progress.csv").is_file() and (tmp_path / "run" / "learning_curves.png").is_file()
    # what the descheduler and the extender load, checked with their own loaders
    for level in ("high", "low"):
        out = subprocess.run(
            [sys.executable, "-m", "policy.cli", "bundle", "check", str(root / "hrl-scheduler" / level)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
        assert out.returncode == 0 and out.stdout.startswith(f"ok: {level} "), out.stderr
        if level == "high":
            assert report["policy_version"] in out.stdout
    # one descheduler cycle with the learned high level on a snapshot: an intent with per-service targets
    conf = tmp_path / "d.yaml"
    conf.write_text(
        "apiVersion: hrl-scheduler.io/v1alpha1\nkind: DeschedulerConfiguration\n"
        f"planner:\n  name: hierarchical\n  autoscaler: {{name: intent}}\n"
        f"  intentPolicy: {{name: learned, bundle: {root / 'hrl-scheduler' / 'high'}, sloP95Ms: 250}}\n"
        f"placement: {{name: learned, bundle: {root / 'hrl-scheduler' / 'low'}}}\n"
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "descheduler",
            "--config",
            str(conf),
            "--snapshot",
            str(boutique_snapshot(tmp_path / "boutique.json")),
            "--once",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["planner"] == "hierarchical" and len(doc["intent"]) == 2
    assert doc["capacity_targets"] and all(0.3 <= v <= 0.95 for v in doc["capacity_targets"].values())
    assert doc["colocation_priority"] and all(0.0 <= v <= 2.0 for v in doc["colocation_priority"].values())
