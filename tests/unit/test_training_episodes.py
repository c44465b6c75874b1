"""Training episodes over the scenario families (policy/train/episodes.py) and the synthetic apps they draw."""

import numpy as np
import pytest

from policy.sim.engine import SimConfig
from policy.sim.sizing import cluster_for
from policy.sim.stacks import run_stack
from policy.train.episodes import HELD_OUT_APPS, TRAINING_FAMILIES, scenario_app_count, training_app, training_run


def test_a_synthetic_training_app_runs_as_manifests_in_the_simulator():
    app = training_app("synthetic:10:3")
    assert len(app.deployments) == len(app.workloads) == 10
    assert all(w.selector.match_labels == {"app": w.name} for w in app.workloads)
    res = run_stack("default-kube-scheduler+hpa", app, np.full(6, 20.0), cluster_for(app), SimConfig(minutes=6))
    assert res.metrics["cpu_core_hours"] > 0  # its pods exist and run
    assert res.metrics["failed_pct"] < 100.0


def test_a_synthetic_apps_guaranteed_share_sets_limits_to_requests_and_changes_nothing_else():
    plain, none, every = (
        training_app("synthetic:12:7"),
        training_app("synthetic:12:7:0"),
        training_app("synthetic:12:7:1"),
    )
    assert none.workloads == plain.workloads  # share 0: the app of the two-part name, draw for draw
    for p, g in zip(plain.workloads, every.workloads):
        assert g.pod_requests == p.pod_requests and g.replicas == p.replicas
        assert (g.pod_limits.cpu_m, g.pod_limits.memory_bytes) == (p.pod_requests.cpu_m, p.pod_requests.memory_bytes)
    assert plain.graph.edges == every.graph.edges and plain.params == every.params
    some = training_app("synthetic:40:7:0.3")
    guaranteed = sum(w.pod_limits.cpu_m == w.pod_requests.cpu_m for w in some.workloads)
    assert 3 <= guaranteed <= 25  # about 30 % of 40
    for bad in ("synthetic:12", "synthetic:12:x", "synthetic:12:7:1.5", "synthetic:12:7:0.1:9"):
        with pytest.raises(ValueError, match="expected synthetic:<services>:<seed>"):
            training_app(bad)


@pytest.mark.parametrize("app", HELD_OUT_APPS)
def test_a_held_out_app_never_enters_training(app):
    with pytest.raises(ValueError, match="held out"):
        training_run("baseline-2026-11", [app], np.random.default_rng(0), minutes=10, seed=0)


def test_a_scenario_episode_runs_training_apps_in_the_scenarios_cluster():
    n = scenario_app_count("shared-cluster")
    assert n >= 2
    with pytest.raises(ValueError, match=f"runs {n} apps, got 1"):
        training_run("shared-cluster", ["sock-shop"], np.random.default_rng(0), minutes=10, seed=0)
    apps = ["sock-shop", "online-boutique", "synthetic:8:1"][:n] + ["sock-shop"] * max(0, n - 3)
    run = training_run("shared-cluster", apps, np.random.default_rng(0), minutes=10, seed=0, n_samples=50)
    assert run.rps.shape == (10, n) and np.all(run.rps > 0)
    assert run.scenario == "shared-cluster" and run.apps == tuple(apps)
    assert {p.namespace for p in run.app.parts} == {f"train-{k}" for k in range(n)}
    res = run_stack("default-kube-scheduler+hpa", run.app, run.rps, run.cluster, run.config)
    assert res.metrics["cpu_core_hours"] > 0


def test_the_load_is_drawn_from_the_rng_and_scaled_to_the_scenarios_peak():
    a = training_run("load", ["sock-shop"], np.random.default_rng(1), minutes=30, seed=0)
    b = training_run("load", ["sock-shop"], np.random.default_rng(1), minutes=30, seed=0)
    c = training_run("load", ["sock-shop"], np.random.default_rng(2), minutes=30, seed=0)
    assert np.array_equal(a.rps, b.rps) and not np.array_equal(a.rps, c.rps)


def test_every_training_family_is_a_shipped_scenario():
    for name in TRAINING_FAMILIES:
        assert scenario_app_count(name) >= 1


def test_synthetic_apps_draw_their_guaranteed_share_from_the_given_shares():
    from policy.train.intent_episodes import EpisodeDistribution, sample_episode_specs

    cfg = EpisodeDistribution(synthetic_share=1.0, scenario_share=0.0, synthetic_guaranteed_shares=(0.0, 1.0))
    specs = sample_episode_specs(cfg, np.random.default_rng(0), 40, seed0=0)
    shares = {s.app.split(":")[3] if s.app.count(":") == 3 else "0" for s in specs}
    assert shares == {"0", "1"}  # both drawn: apps with no Guaranteed service and apps of Guaranteed services only
    every = training_app(next(s.app for s in specs if s.app.endswith(":1")))
    sized = [w for w in every.workloads if w.pod_requests.cpu_m > 0]
    assert sized and all(w.pod_limits.cpu_m == w.pod_requests.cpu_m for w in sized)
    one = EpisodeDistribution(synthetic_share=1.0, scenario_share=0.0, synthetic_guaranteed_share=0.3)
    assert {s.app.split(":")[3] for s in sample_episode_specs(one, np.random.default_rng(0), 5, seed0=0)} == {"0.3"}
    with pytest.raises(ValueError, match="synthetic_guaranteed_shares: expected numbers in \\[0, 1\\]"):
        EpisodeDistribution(synthetic_guaranteed_shares=(1.5,))
