"""The Gymnasium environments over the simulator (policy.sim.env): the benchmark's scenarios and objective, fixed
shapes across apps and clusters, valid masks, the three modes' decisions, determinism, clear errors."""

import math
import shutil

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.wrappers import FlattenObservation

from policy.sim.app import builtin_apps_dir
from policy.sim.env import (
    GLOBAL_FEATURES,
    NODE_FEATURES,
    POD_FEATURES,
    SERVICE_FEATURES,
    EnvConfig,
    SchedulingEnv,
)
from policy.sim.objective import Objective, app_costs
from policy.sim.scenario import run_scenario


def env(mode, **kw):
    return SchedulingEnv(EnvConfig(mode=mode, episode_minutes=kw.pop("minutes", 4), **kw))


def play(e, seed, pick, **reset_kw):
    """One whole episode; returns the last observation, the rewards and the last info."""
    obs, info = e.reset(seed=seed, **reset_kw)
    rewards, done = [], False
    while not done:
        obs, r, term, trunc, info = e.step(pick(e))
        rewards.append(r)
        done = term or trunc
    return obs, rewards, info


def masked_random(rng):
    """A policy that samples every action component uniformly among the values its mask allows."""

    def pick(e):
        mask = e.action_masks()
        nvec = [e.action_space.n] if e.config.mode == "placement" else list(e.action_space.nvec)
        out, k = [], 0
        for n in nvec:
            out.append(int(rng.choice(np.flatnonzero(mask[k : k + n]))))
            k += n
        return out[0] if e.config.mode == "placement" else np.array(out, dtype=np.int64)

    return pick


@pytest.mark.parametrize("mode", ["placement", "scaling", "both"])
def test_the_environment_passes_gymnasiums_checker(mode):
    check_env(env(mode), skip_render_check=True)


@pytest.mark.parametrize("mode", ["placement", "scaling", "both"])
def test_an_episode_return_is_minus_the_benchmark_objective_times_its_minutes(mode):
    # Random masked actions, churn on: whatever happens, the rewards add up to the objective of the same run.
    e = env(mode, minutes=5, churn=0.5, stack="default-kube-scheduler+hpa")
    _obs, rewards, info = play(e, 7, masked_random(np.random.default_rng(0)))
    res = e.result()
    costs = app_costs(e.app, res.series)
    assert len(costs) == 5 and info["invalid_actions"] == 0
    assert sum(rewards) == pytest.approx(-costs.sum(), rel=1e-9)
    assert info["episode_reward"] == pytest.approx(sum(rewards))


@pytest.mark.parametrize("mode", ["placement", "scaling", "both"])
def test_doing_what_the_stack_does_reproduces_the_benchmarks_run_of_that_stack(mode):
    stack = "default-kube-scheduler+hpa"
    e = env(mode, minutes=5, churn=0.0, stack=stack)
    _obs, rewards, _info = play(e, 3, lambda e: e.stack_action())
    flat, _res = run_scenario(
        "baseline-2026-11", stack, seed=e.sim.config.seed, minutes=5, offset_min=e.offset_min, n_samples=1000
    )
    assert sum(rewards) == pytest.approx(-flat["objective"] * 5, rel=1e-9)


def test_the_reward_follows_the_objective_it_is_given():
    heavy_cpu = Objective(cpu_price=10.0)
    _o, base, _ = play(env("scaling", churn=0.0), 3, lambda e: e.stack_action())
    e = env("scaling", churn=0.0, objective=heavy_cpu)
    _o, priced, _ = play(e, 3, lambda e: e.stack_action())
    assert sum(priced) == pytest.approx(-app_costs(e.app, e.result().series, heavy_cpu).sum())
    assert sum(priced) < sum(base)


@pytest.mark.parametrize("mode", ["placement", "scaling", "both"])
def test_masks_are_valid_at_every_step_padding_is_masked_and_masked_actions_are_never_refused(mode):
    e = env(mode, minutes=4, churn=1.0, max_nodes=12, max_services=20)
    rng = np.random.default_rng(1)
    pick = masked_random(rng)
    e.reset(seed=2)
    nvec = [e.action_space.n] if mode == "placement" else list(e.action_space.nvec)
    done, steps = False, 0
    while not done:
        mask = e.action_masks()
        assert mask.dtype == bool and mask.shape == (sum(nvec),)
        k = 0
        for n in nvec:  # every component has a valid value
            assert mask[k : k + n].any()
            k += n
        if mode != "scaling" and e._phase == 1:
            assert not mask[e.N : e.Nmax].any()  # padding nodes never
        if mode != "placement":
            base = e.Nmax if mode == "both" else 0
            per = mask[base : base + 3 * e.Smax].reshape(e.Smax, 3)
            assert per[e.S :].tolist() == [[False, True, False]] * (e.Smax - e.S)  # padding services only hold
            ev = mask[base + 3 * e.Smax :].reshape(-1)
            assert ev[0] and not ev[1 + e.S * e.Nmax :].any()
        *_, term, trunc, info = e.step(pick(e))
        done = term or trunc
        steps += 1
    assert steps >= 4 and info["invalid_actions"] == 0


def test_observations_and_actions_have_one_shape_across_apps_and_clusters(tmp_path):
    # Online Boutique on 8 nodes, the network-datacenter app (27 services) on 12 nodes, and an app folder
    app_dir = tmp_path / "my-app"
    shutil.copytree(builtin_apps_dir() / "sock-shop", app_dir)
    envs = [
        env("both"),
        env("both", scenario="network-datacenter"),
        env("both", app=str(app_dir), trace="bursty"),
    ]
    assert [(e.N, e.S) for e in envs] == [(8, 12), (12, 27), (6, 14)]  # baseline's cluster: the app's bench cluster
    assert envs[2].app.name == "sock-shop"
    for e in envs:
        assert e.observation_space == envs[0].observation_space and e.action_space == envs[0].action_space
        obs, _ = e.reset(seed=0)
        assert e.observation_space.contains(obs)
        assert obs["nodes"].shape == (16, len(NODE_FEATURES)) and obs["services"].shape == (48, len(SERVICE_FEATURES))
        assert obs["node_mask"].tolist() == [1.0] * e.N + [0.0] * (16 - e.N)
        assert obs["service_mask"].tolist() == [1.0] * e.S + [0.0] * (48 - e.S)
        assert not obs["nodes"][e.N :].any() and not obs["services"][e.S :].any()
        assert obs["calls"].shape == (48, 48) and not obs["calls"][e.S :].any() and not obs["calls"][:, e.S :].any()
        assert len(FlattenObservation(e).observation_space.sample()) == len(
            FlattenObservation(envs[0]).observation_space.sample()
        )


def test_the_call_matrix_is_the_apps_call_graph_per_user_request():
    e = env("placement")
    obs, _ = e.reset(seed=0)
    calls = obs["calls"]
    ix = e.services.index
    # Online Boutique (policy/data/apps/online-boutique): the frontend, visited once per request, calls the catalog
    # 4.687 times per visit; recommendationservice (0.729 visits per request) calls it once per visit
    assert calls[ix("frontend"), ix("productcatalogservice")] == pytest.approx(4.687)
    assert calls[ix("recommendationservice"), ix("productcatalogservice")] == pytest.approx(0.729)
    assert calls[ix("productcatalogservice"), ix("frontend")] == 0
    assert np.count_nonzero(calls) == sum(1 for a, _b, c, _p in e.model.edges if c * e.model.visits[a] > 0)


def test_an_episode_is_deterministic_per_seed_and_ends_after_its_minutes():
    e = env("both", churn=0.5)
    o1, r1, _ = play(e, 5, masked_random(np.random.default_rng(0)))
    o2, r2, _ = play(e, 5, masked_random(np.random.default_rng(0)))
    _o3, r3, _ = play(e, 6, masked_random(np.random.default_rng(0)))
    assert r1 == r2 and all(np.array_equal(o1[k], o2[k]) for k in o1)
    assert r1 != r3
    assert e.sim.minute == 4 and all(math.isfinite(r) for r in r1)


def test_the_offset_option_picks_the_start_minute_and_is_range_checked():
    e = env("scaling")
    e.reset(seed=0, options={"offset_min": 3})
    assert e.offset_min == 3
    with pytest.raises(ValueError, match="offset_min"):
        e.reset(seed=0, options={"offset_min": e._max_offset + 1})


def test_placement_decisions_place_the_pending_pod_where_the_agent_says():
    e = env("placement", churn=0.0)
    obs, info = e.reset(seed=1)
    assert info["phase"] == "placement" and obs["global"][GLOBAL_FEATURES.index("phase")] == 1.0
    n_pods = len([p for p in e.sim.cluster.pending() if not e.sim.is_background(p)])
    assert n_pods == 12  # Online Boutique's 12 pods, each one decision
    placed = []
    for k in range(n_pods):
        pod = e._pending
        assert obs["pod"][POD_FEATURES.index("cpu_request_cores")] == pytest.approx(pod.info.requests.cpu_m / 1000)
        target = k % 3
        obs, r, term, trunc, info = e.step(target)
        placed.append((pod, target))
    assert all(p.node == t for p, t in placed)
    assert trunc  # no churn: after the last pod the whole episode runs
    assert e.result().metrics["cross_node_call_pct"] > 0


def test_a_masked_out_node_is_counted_costs_the_penalty_and_kube_scheduler_places_the_pod():
    e = env("placement", churn=0.0, invalid_penalty=3.0)
    e.reset(seed=1)
    assert not e.action_masks()[e.N :].any()
    pod = e._pending
    _obs, r, *_, info = e.step(e.N)  # the first padding node
    assert r == pytest.approx(-3.0) and info["invalid_actions"] == 1
    assert 0 <= pod.node < e.N


def test_scaling_actions_change_replicas_and_evict_the_chosen_pod():
    e = env("scaling", churn=0.0)
    _obs, info = e.reset(seed=2)
    assert info["phase"] == "scaling"
    s = e.services.index("frontend")
    w = e._workload_of["frontend"]
    hold = np.r_[np.ones(e.Smax, dtype=np.int64), 0]
    a = hold.copy()
    a[s] = 2  # +1 replica
    before = e.sim.cluster.replicas[w]
    e.step(a)
    assert e.sim.cluster.replicas[w] == before + 1
    pod = next(p for p in e.sim.cluster.live_pods() if p.info.service == "frontend" and p.node >= 0)
    a = hold.copy()
    a[-1] = 1 + s * e.Nmax + pod.node
    assert e.action_masks()[3 * e.Smax + a[-1]]
    e.step(a)
    assert not pod.alive and e.result().metrics["evictions"] >= 1.0


def test_joint_actions_read_the_node_in_placement_and_the_scaling_part_in_scaling():
    e = env("both", churn=0.0)
    _obs, info = e.reset(seed=2)
    while info["phase"] == "placement":  # the initial pods first
        _obs, _r, *_, info = e.step(e.stack_action())
    assert info["minute"] == 0 and all(p.node >= 0 for p in e.sim.cluster.live_pods())
    s = e.services.index("frontend")
    w = e._workload_of["frontend"]
    a = np.r_[0, np.ones(e.Smax, dtype=np.int64), 0]
    a[1 + s] = 2
    before = e.sim.cluster.replicas[w]
    _obs, _r, *_, info = e.step(a)
    assert e.sim.cluster.replicas[w] == before + 1
    assert info["phase"] == "placement" and e._pending.info.service == "frontend"  # the new replica
    pod = e._pending
    node = int(np.flatnonzero(e.action_masks()[: e.Nmax])[-1])
    e.step(np.r_[node, np.ones(e.Smax, dtype=np.int64), 0])
    assert pod.node == node


def test_scaling_masks_forbid_going_below_one_replica_or_scaling_data_stores():
    e = env("scaling")
    e.reset(seed=0)
    per = e.action_masks()[: 3 * e.Smax].reshape(e.Smax, 3)
    redis = e.services.index("redis-cart")
    front = e.services.index("frontend")
    assert per[redis].tolist() == [False, True, False]  # not autoscaled (a data store)
    assert per[front].tolist() == [False, True, True]  # 1 replica: may grow, not shrink


def test_background_tenants_of_the_scenario_show_in_the_node_features():
    e = env("placement", scenario="shared-cluster", churn=0.0)
    obs, _ = e.reset(seed=0)
    req = obs["nodes"][: e.N, NODE_FEATURES.index("cpu_requested_frac")]
    assert np.all(req > 0.1)  # each node carries tenants' requests before the app's pods


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"mode": "everything"}, "mode"),
        ({"max_nodes": 0}, "max_nodes"),
        ({"episode_minutes": 0}, "episode_minutes"),
        ({"churn": -1.0}, "churn"),
        ({"invalid_penalty": float("nan")}, "invalid_penalty"),
        ({"n_samples": 0}, "n_samples"),
    ],
)
def test_bad_config_values_are_refused_with_their_field(kw, message):
    with pytest.raises(ValueError, match=message):
        EnvConfig(**kw)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"max_nodes": 4}, "max_nodes: 4 < the cluster's 8 nodes"),
        ({"max_services": 10}, "max_services: 10 < the app's 12 services"),
        ({"episode_minutes": 100_000}, "episode_minutes"),
        ({"scenario": "nowhere"}, "scenario: unknown scenario"),
        ({"scenario": "shared-cluster", "app": "sock-shop"}, "one-app scenario"),
        ({"reward": 1.0}, "unknown option"),
    ],
)
def test_an_environment_that_cannot_be_built_says_why(kw, message):
    with pytest.raises(ValueError, match=message):
        SchedulingEnv(**kw)


def test_the_observation_flattens_to_one_vector_of_every_feature():
    e = env("scaling")
    flat = FlattenObservation(e)
    obs, _ = flat.reset(seed=0)
    n = (
        16 * len(NODE_FEATURES)
        + 16
        + 48 * len(SERVICE_FEATURES)
        + 48
        + 48 * 48
        + len(POD_FEATURES)
        + len(GLOBAL_FEATURES)
    )
    assert obs.shape == (n,) and obs.dtype == np.float32
    obs, _r, _term, _trunc, info = flat.step(np.r_[np.ones(e.Smax, dtype=np.int64), 0])
    assert obs.shape == (n,) and info["phase"] == "scaling"
