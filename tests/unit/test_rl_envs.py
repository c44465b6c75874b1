"""The Gymnasium environments registered by policy.sim.registration: reachable through ``gym.make`` with a
TimeLimit and an ``ansi`` render mode, valid under Gymnasium's own checker, and trainable by sb3-contrib's
MaskablePPO for a few hundred steps with the action masks honoured."""

from __future__ import annotations

import shutil

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import TimeLimit

import policy.sim.registration as registration
from policy.sim.app import builtin_apps_dir


def test_the_three_ids_are_registered_with_a_time_limit_and_the_right_mode():
    for env_id, (mode, steps) in registration.ENV_IDS.items():
        env = gym.make(env_id, episode_minutes=2)
        try:
            assert isinstance(env, TimeLimit) and env.spec.max_episode_steps == steps
            assert env.unwrapped.config.mode == mode
        finally:
            env.close()
    assert set(registration.ENV_IDS) == {
        "hrl-scheduler/Placement-v1",
        "hrl-scheduler/Scaling-v1",
        "hrl-scheduler/Joint-v1",
    }


def test_gym_make_takes_a_scenario_and_an_app_folder_and_refuses_unknown_options(tmp_path):
    app_dir = tmp_path / "shop"
    shutil.copytree(builtin_apps_dir() / "sock-shop", app_dir)
    env = gym.make("hrl-scheduler/Joint-v1", scenario="network-edge", app=str(app_dir), episode_minutes=2)
    try:
        u = env.unwrapped
        assert u.scenario.name == "network-edge" and u.app.name == "sock-shop" and u.N == 12
        obs, _ = env.reset(seed=0)
        assert env.observation_space.contains(obs)
    finally:
        env.close()
    with pytest.raises(ValueError, match="unknown option.*peak_utilization"):
        gym.make("hrl-scheduler/Placement-v1", peak_utilization=0.8)
    # the v0 ids are gone; Gymnasium points at v1
    with pytest.warns(DeprecationWarning, match="v1"), pytest.raises(gym.error.Error, match="Placement-v1"):
        gym.make("hrl-scheduler/Placement-v0")


def test_registering_twice_keeps_one_registration():
    before = gym.spec("hrl-scheduler/Placement-v1")
    registration.register_envs()
    assert gym.spec("hrl-scheduler/Placement-v1") is before


def test_the_time_limit_truncates_an_episode_longer_than_its_step_budget():
    env = gym.make("hrl-scheduler/Scaling-v1", episode_minutes=30, max_episode_steps=3)
    try:
        env.reset(seed=0)
        flags = [env.step(np.zeros(env.action_space.shape, dtype=np.int64))[3] for _ in range(3)]
        assert flags == [False, False, True]
    finally:
        env.close()


def test_ansi_render_shows_the_minute_and_one_line_per_node_and_other_modes_are_refused():
    env = gym.make("hrl-scheduler/Placement-v1", episode_minutes=2, render_mode="ansi")
    try:
        env.reset(seed=0)
        frame = env.render()
        lines = frame.splitlines()
        assert lines[0].startswith("minute 0 phase placement") and len(lines) == 2 + env.unwrapped.N
    finally:
        env.close()
    # Gymnasium warns about an undeclared mode first; the environment then refuses it.
    with pytest.warns(UserWarning, match="render_mode"), pytest.raises(ValueError, match="render_mode"):
        gym.make("hrl-scheduler/Placement-v1", render_mode="human")


@pytest.mark.parametrize("env_id", ["hrl-scheduler/Placement-v1", "hrl-scheduler/Scaling-v1"])
def test_gymnasiums_checker_accepts_the_registered_environments(env_id):
    from gymnasium.utils.env_checker import check_env

    env = gym.make(env_id, episode_minutes=2, render_mode="ansi")
    try:
        check_env(env.unwrapped, skip_render_check=False)
    finally:
        env.close()


class MaskAudit(gym.Wrapper):
    """Counts the actions taken outside the environment's mask (sb3-contrib reaches action_masks() through it)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.steps = 0
        self.outside_mask = 0
        self.partial_masks = 0

    def step(self, action):
        mask = self.env.unwrapped.action_masks()
        self.steps += 1
        a = np.atleast_1d(np.asarray(action, dtype=np.int64))
        nvec = [self.action_space.n] if a.size == 1 else list(self.action_space.nvec)
        starts = np.r_[0, np.cumsum(nvec)[:-1]]
        self.outside_mask += int(not all(mask[s + int(v)] for s, v in zip(starts, a)))
        self.partial_masks += int(not mask.all())
        return self.env.step(action)


@pytest.mark.parametrize(
    ("env_id", "kw", "steps"),
    [
        # 8 nodes padded to 12 actions: the 4 padding nodes are always masked out, and nodes fill up
        ("hrl-scheduler/Placement-v1", {"episode_minutes": 5, "max_nodes": 12}, 256),
        # Joint-v1's one MultiDiscrete action (Joint-v0's Dict could not be trained by SB3): the node, the replica
        # deltas and the eviction, masked component by component
        ("hrl-scheduler/Joint-v1", {"episode_minutes": 3}, 64),
    ],
)
def test_maskable_ppo_trains_through_gym_make_and_honours_the_masks(env_id, kw, steps):
    from sb3_contrib import MaskablePPO

    env = MaskAudit(gym.make(env_id, churn=0.5, **kw))
    try:
        model = MaskablePPO(
            "MultiInputPolicy", env, n_steps=steps // 4, batch_size=steps // 8, n_epochs=1, seed=0, device="cpu"
        )
        model.learn(total_timesteps=steps)
        assert model.num_timesteps >= steps and env.steps >= steps
        # Every action sampled during training respected the mask (padding nodes, nodes where the pod does not fit,
        # impossible scalings and evictions were never chosen), and the masks did mask something out.
        assert env.outside_mask == 0 and env.partial_masks > 0
        obs, _ = env.reset(seed=1)
        for _ in range(30):
            action, _ = model.predict(obs, action_masks=env.unwrapped.action_masks(), deterministic=True)
            obs, _r, terminated, truncated, _info = env.step(action)
            if terminated or truncated:
                obs, _ = env.reset()
        assert env.outside_mask == 0 and env.unwrapped._invalid == 0  # the environment refused nothing either
    finally:
        env.close()
