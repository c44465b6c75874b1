"""Train sb3-contrib's MaskablePPO on an hrl-scheduler Gymnasium environment and say how far it gets.

    python examples/sb3_maskable_ppo.py --env hrl-scheduler/Joint-v1 --steps 50000 --tensorboard runs/ppo-tb

Trains with the environment's action masks (``env.action_masks()``, MaskablePPO's convention) through ``gym.make``,
then plays the evaluation episodes the reference returns were measured on (``reset(seed=k)``, k = 0 … N−1, the
setting of ``python -m policy.bench.envs``: same scenario, episode length, seeds) with the trained policy, greedy and
masked, and prints its mean return next to the references (random, kube-scheduler, HPA, the shipped hrl-scheduler)
and the gap to the shipped policy. Needs the [train,test] extras (torch, stable-baselines3, sb3-contrib). On one core
here, 512 training steps of Joint-v1 on Online Boutique took about 12 s.
"""

from __future__ import annotations

import argparse
import sys

import gymnasium as gym
import numpy as np
from sb3_contrib import MaskablePPO

import policy.sim.registration  # noqa: F401  (registers the ids)
from policy.bench.envs import REFERENCES, episode_return, reference_returns


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="hrl-scheduler/Joint-v1", help="an id of policy.sim.registration")
    p.add_argument("--scenario", default="baseline-2026-11")
    p.add_argument("--minutes", type=int, default=30, help="episode minutes (training and evaluation)")
    p.add_argument("--steps", type=int, default=20_000, help="training steps (environment steps)")
    p.add_argument("--seeds", type=int, default=3, help="evaluation episodes (seeds 0..N-1)")
    p.add_argument("--seed", type=int, default=0, help="seed of PPO and of the training episodes")
    p.add_argument("--tensorboard", default=None, metavar="DIR", help="MaskablePPO's TensorBoard log directory")
    args = p.parse_args(argv)
    kw = {"scenario": args.scenario, "episode_minutes": args.minutes}
    env = gym.make(args.env, **kw)
    model = MaskablePPO(
        "MultiInputPolicy",
        env,
        n_steps=min(512, max(16, args.steps)),
        batch_size=min(64, max(16, args.steps)),
        seed=args.seed,
        device="cpu",
        verbose=0,
        tensorboard_log=args.tensorboard,
    )
    model.learn(total_timesteps=args.steps)
    inner = env.unwrapped
    env.reset(seed=10_000 + args.seed)  # training episodes never use the evaluation seeds

    def act(e, obs):
        action, _ = model.predict(obs, action_masks=e.action_masks(), deterministic=True)
        return int(action) if np.ndim(action) == 0 else np.asarray(action, dtype=np.int64)

    rets = [episode_return(inner, act, seed)[0] for seed in range(args.seeds)]
    env.close()
    refs = {r["reference"]: r["return_mean"] for r in reference_returns([args.env], seeds=args.seeds, **kw)}
    ppo = float(np.mean(rets))
    print(f"{args.env} in {args.scenario}, {args.minutes}-minute episodes, seeds 0-{args.seeds - 1}:")
    for name in REFERENCES:
        print(f"  {name:<15} {refs[name]:9.2f}")
    print(f"  {'MaskablePPO':<15} {ppo:9.2f}  ({args.steps} steps)")
    gap = ppo - refs["hrl-scheduler"]
    verdict = "reaches" if gap >= 0 else f"is {-gap:.2f} below ({-gap / args.minutes:.3f} objective per minute)"
    print(f"MaskablePPO {verdict} the shipped policy's return")
    return 0


if __name__ == "__main__":
    sys.exit(main())
