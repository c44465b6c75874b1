"""Gymnasium registration of the scheduling environment (:class:`policy.sim.env.SchedulingEnv`).

Importing this module registers three environment ids, each wrapped in ``TimeLimit`` (``max_episode_steps``)
besides the environment's own end of episode (``episode_minutes`` of simulated time):

==================================  ==========  ================================================  ===========
id                                  mode        action space                                      step limit
==================================  ==========  ================================================  ===========
``hrl-scheduler/Placement-v0``      placement   ``Discrete(max_nodes)``: the Pending pod's node     2000
``hrl-scheduler/Scaling-v0``        scaling     ``MultiDiscrete``: replica deltas + one eviction     240
``hrl-scheduler/Joint-v0``          both        ``Dict(place, scale)``                             2000
==================================  ==========  ================================================  ===========

Usage (docs/rl-environments.md)::

    import gymnasium as gym
    import policy.sim.registration  # noqa: F401  (or gym.make("policy.sim.registration:hrl-scheduler/Placement-v0"))

    env = gym.make("hrl-scheduler/Placement-v0", episode_minutes=10, render_mode="ansi")
    obs, info = env.reset(seed=0)
    mask = env.unwrapped.action_masks()  # sb3-contrib MaskablePPO's convention

Keyword arguments of ``gym.make`` override fields of :class:`policy.sim.env.EnvConfig` (``app``, ``trace``,
``episode_minutes``, ``churn`` ...). Defaults: Online Boutique on 8 nodes, the NASA trace, 30-minute episodes.
"""

from __future__ import annotations

from gymnasium.envs.registration import register, registry

__all__ = ["ENV_IDS", "register_envs"]

ENTRY_POINT = "policy.sim.env:SchedulingEnv"

#: id -> (mode, max_episode_steps)
ENV_IDS: dict[str, tuple[str, int]] = {
    "hrl-scheduler/Placement-v0": ("placement", 2000),
    "hrl-scheduler/Scaling-v0": ("scaling", 240),
    "hrl-scheduler/Joint-v0": ("both", 2000),
}


def register_envs() -> None:
    """Register every id of :data:`ENV_IDS` (idempotent: an id already registered is left as it is)."""
    for env_id, (mode, steps) in ENV_IDS.items():
        if env_id not in registry:
            register(id=env_id, entry_point=ENTRY_POINT, max_episode_steps=steps, kwargs={"mode": mode})


register_envs()
