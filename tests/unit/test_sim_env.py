"""The Gymnasium environment over the simulator: spaces, masks, the three modes, rewards, determinism."""

import math

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from policy.sim.engine import ClusterSpec
from policy.sim.env import (
    GLOBAL_FEATURES,
    NODE_FEATURES,
    POD_FEATURES,
    SERVICE_FEATURES,
    EnvConfig,
    RewardWeights,
    SchedulingEnv,
)


def env(mode, **kw):
    return SchedulingEnv(EnvConfig(mode=mode, episode_minutes=kw.pop("minutes", 6), **kw))


@pytest.mark.parametrize("mode", ["placement", "scaling", "both"])
def test_the_environment_passes_gymnasiums_checker(mode):
    check_env(env(mode), skip_render_check=True)


def test_observations_follow_their_feature_specs():
    e = env("both", max_nodes=10)
    obs, info = e.reset(seed=0)
    assert obs["nodes"].shape == (10, len(NODE_FEATURES)) and obs["nodes"].dtype == np.float32
    assert obs["services"].shape == (len(e.services), len(SERVICE_FEATURES))
    assert obs["pod"].shape == (len(POD_FEATURES),) and obs["global"].shape == (len(GLOBAL_FEATURES),)
    valid = obs["nodes"][:, NODE_FEATURES.index("valid")]
    assert valid.tolist() == [1.0] * 8 + [0.0] * 2  # 8 nodes, 2 padding rows
    assert e.observation_space.contains(obs)
    assert len(set(NODE_FEATURES.names)) == len(NODE_FEATURES) and all(NODE_FEATURES.units)


def play(e, seed, pick):
    obs, _ = e.reset(seed=seed)
    rewards, done = [], False
    while not done:
        obs, r, term, trunc, _ = e.step(pick(e))
        rewards.append(r)
        done = term or trunc
    return obs, rewards


def first_fit(e):
    m = e.action_masks()
    if e.config.mode == "placement":
        return int(np.flatnonzero(m)[0])
    scale = np.r_[np.ones(e.S, dtype=np.int64), 0]
    if e.config.mode == "scaling":
        return scale
    return {"place": int(np.flatnonzero(m["place"])[0]), "scale": scale}


@pytest.mark.parametrize("mode", ["placement", "scaling", "both"])
def test_an_episode_is_deterministic_per_seed_and_ends_after_its_minutes(mode):
    e = env(mode)
    o1, r1 = play(e, 5, first_fit)
    o2, r2 = play(e, 5, first_fit)
    _o3, r3 = play(e, 6, first_fit)
    assert r1 == r2 and all(np.array_equal(o1[k], o2[k]) for k in o1)
    assert r1 != r3
    assert e.sim.minute == 6
    assert all(math.isfinite(r) for r in r1)


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


def test_a_masked_out_node_costs_the_invalid_penalty_and_kube_scheduler_places_the_pod():
    # 3 nodes of 300m: the frontend pod (100m) fits anywhere until two pods fill a node
    e = env(
        "placement", churn=0.0, reward=RewardWeights(invalid=3.0), max_nodes=4, cluster=ClusterSpec(nodes=3, cpu_m=2000)
    )
    e.reset(seed=1)
    mask = e.action_masks()
    assert mask.tolist() == [True, True, True, False]  # the padding node is never valid
    pod = e._pending
    _obs, r, *_ = e.step(3)
    assert r == pytest.approx(-3.0)
    assert 0 <= pod.node < 3


def test_scaling_actions_change_replicas_and_evict_the_chosen_pod():
    e = env("scaling", churn=0.0)
    obs, info = e.reset(seed=2)
    assert info["phase"] == "scaling"
    s = e.services.index("frontend")
    w = e._workload_of["frontend"]
    a = np.ones(e.S + 1, dtype=np.int64)
    a[s] = 2  # +1 replica
    a[-1] = 0  # no eviction
    e.step(a)
    assert e.sim.cluster.replicas[w] == 2
    # evict the frontend pod on its node
    pod = next(p for p in e.sim.cluster.live_pods() if p.info.service == "frontend" and p.node >= 0)
    a = np.ones(e.S + 1, dtype=np.int64)
    a[-1] = 1 + s * e.Nmax + pod.node
    assert e.action_masks()[3 * e.S + a[-1]]
    _obs, _r, *_ = e.step(a)
    assert not pod.alive and e.result().metrics["evictions"] == 1.0


def test_scaling_masks_forbid_going_below_one_replica_or_scaling_data_stores():
    e = env("scaling")
    e.reset(seed=0)
    m = e.action_masks()
    per = m[: 3 * e.S].reshape(e.S, 3)
    redis = e.services.index("redis-cart")
    front = e.services.index("frontend")
    assert per[redis].tolist() == [False, True, False]  # not autoscaled (a data store)
    assert per[front].tolist() == [False, True, True]  # 1 replica: may grow, not shrink
    assert m[3 * e.S]  # "no eviction" is always allowed


def test_the_reward_is_the_documented_weighted_sum_of_the_minute():
    w = RewardWeights(latency=2.0, failed=7.0, slo=3.0, cpu=0.25, evictions=0.5)
    e = env("scaling", reward=w, churn=0.0)
    e.reset(seed=3)
    _obs, r, *_ = e.step(np.r_[np.ones(e.S, dtype=np.int64), 0])
    m = e._last_minute
    slo = e.app.slo_p95_ms
    req = sum(p.info.requests.cpu_m for p in e.sim.cluster.live_pods() if p.node >= 0) / 1000.0
    expect = -(
        2.0 * min(m.p95_ms / slo, 10)
        + 7.0 * m.failed / m.offered
        + 3.0 * (m.p95_ms > slo)
        + 0.25 * req / e._manifest_req_cores
        + 0.5 * m.evictions
    )
    assert r == pytest.approx(expect)


def test_background_tenants_show_in_the_node_features():
    e = env("placement", background=True, churn=0.0)
    obs, _ = e.reset(seed=0)
    req = obs["nodes"][:8, NODE_FEATURES.index("cpu_requested_frac")]
    assert np.all(req > 0.1)  # each node already carries tenants' requests before the app's pods


def test_a_bad_mode_is_refused_with_its_name():
    with pytest.raises(ValueError, match="mode"):
        EnvConfig(mode="everything")


def test_the_observation_flattens_to_one_vector_of_every_feature():
    from gymnasium.wrappers import FlattenObservation

    e = env("scaling", max_nodes=8)
    flat = FlattenObservation(e)
    obs, _ = flat.reset(seed=0)
    n = 8 * len(NODE_FEATURES) + len(e.services) * len(SERVICE_FEATURES) + len(POD_FEATURES) + len(GLOBAL_FEATURES)
    assert obs.shape == (n,) and obs.dtype == np.float32
    obs, r, term, trunc, info = flat.step(np.r_[np.ones(e.S, dtype=np.int64), 0])
    assert obs.shape == (n,) and info["phase"] == "scaling"
