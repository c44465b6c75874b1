"""Gymnasium registration of the scheduling environments (:class:`policy.sim.env.SchedulingEnv`).

Importing this module registers three environment ids, each wrapped in ``TimeLimit`` (``max_episode_steps``)
besides the environment's own end of episode (``episode_minutes`` of simulated time, a truncation):

==================================  ==========  ====================================================  ==========
id                                  mode        action space (M nodes, K services: ``max_nodes``,      step limit
                                                ``max_services``)
==================================  ==========  ====================================================  ==========
``hrl-scheduler/Placement-v1``      placement   ``Discrete(M)``: the Pending pod's node                   2000
``hrl-scheduler/Scaling-v1``        scaling     ``MultiDiscrete([3]*K + [K*M + 1])``: deltas, eviction     240
``hrl-scheduler/Joint-v1``          both        ``MultiDiscrete([M] + [3]*K + [K*M + 1])``                 2000
==================================  ==========  ====================================================  ==========

Version 1 (the ``-v0`` ids are gone): scenarios of the benchmark (``scenario=``), observations of a fixed shape
(padded, with masks), one ``MultiDiscrete`` instead of ``Joint-v0``'s ``Dict`` action space, and the benchmark's
objective as the reward.

Usage (docs/rl-environments.md)::

    import gymnasium as gym
    import policy.sim.registration  # noqa: F401  (or gym.make("policy.sim.registration:hrl-scheduler/Placement-v1"))

    env = gym.make("hrl-scheduler/Placement-v1", scenario="network-edge", app="apps/shop", render_mode="ansi")
    obs, info = env.reset(seed=0)
    mask = env.unwrapped.action_masks()  # sb3-contrib MaskablePPO's convention

Keyword arguments of ``gym.make`` override fields of :class:`policy.sim.env.EnvConfig` (``scenario``, ``app``,
``trace``, ``episode_minutes``, ``churn``, ``stack``, ``max_nodes`` ...). Defaults: the scenario
``baseline-2026-11`` (Online Boutique on its bench cluster, the NASA trace), 30-minute episodes.
"""

from __future__ import annotations

from gymnasium.envs.registration import register, registry

__all__ = ["ENV_IDS", "register_envs"]

ENTRY_POINT = "policy.sim.env:SchedulingEnv"

#: id -> (mode, max_episode_steps)
ENV_IDS: dict[str, tuple[str, int]] = {
    "hrl-scheduler/Placement-v1": ("placement", 2000),
    "hrl-scheduler/Scaling-v1": ("scaling", 240),
    "hrl-scheduler/Joint-v1": ("both", 2000),
}


def register_envs() -> None:
    """Register every id of :data:`ENV_IDS` (idempotent: an id already registered is left as it is)."""
    for env_id, (mode, steps) in ENV_IDS.items():
        if env_id not in registry:
            register(id=env_id, entry_point=ENTRY_POINT, max_episode_steps=steps, kwargs={"mode": mode})


register_envs()
