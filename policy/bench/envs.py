"""Reference returns of the Gymnasium environments (numpy only): what a new agent on ``hrl-scheduler/*-v1`` has to
beat, measured in the environments themselves.

``python -m policy.bench.envs [--scenario NAME ...] [--minutes M] [--seeds N] [--json PATH] [--no-write]``
(``make bench-envs``; default scenarios ``baseline-2026-11`` and ``events``) plays, in each scenario, every
environment of :data:`policy.sim.registration.ENV_IDS` with each reference policy, on the same seeds
(``reset(seed=k)``, k = 0 … N−1: the same start minutes, churn and simulator random numbers for every policy), and
reports the mean and standard deviation of the episode return and the equivalent objective (−return / minutes, the
number of BENCHMARKS.md's ``objective`` column), as section ``rl-environments`` of BENCHMARKS.md:

- ``random``: every action component uniform among the values its mask allows, the ``default-kube-scheduler``
  stack doing the rest;
- ``kube-scheduler``: the agent takes :meth:`~policy.sim.env.SchedulingEnv.stack_action` of the
  ``default-kube-scheduler`` stack (kube-scheduler's default profile places, replicas fixed);
- ``hpa``: the same in the ``default-kube-scheduler+hpa`` stack (an HPA scales the app);
- ``hrl-scheduler``: the same in the ``hrl-scheduler`` stack: the shipped policy (its learned extender places,
  its descheduler scales, resizes and moves), from the committed bundles.

Following the stack's action reproduces the benchmark's run of that stack when ``churn`` is 0, the benchmark's
setting (``tests/unit/test_sim_env.py``), so these are the returns of the policies the benchmark compares, in the
environments' own setting (the ``churn``, ``n_samples`` and episode length of :class:`policy.sim.env.EnvConfig`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from tabulate import tabulate

import policy.sim.registration as registration
from policy.sim.env import SchedulingEnv

from .markdown import write_section

__all__ = ["REFERENCES", "Agent", "masked_random", "episode_return", "reference_returns", "markdown", "main"]

#: reference name -> (the environment's stack, the agent: "random" or "stack")
REFERENCES: dict[str, tuple[str, str]] = {
    "random": ("default-kube-scheduler", "random"),
    "kube-scheduler": ("default-kube-scheduler", "stack"),
    "hpa": ("default-kube-scheduler+hpa", "stack"),
    "hrl-scheduler": ("hrl-scheduler", "stack"),
}


#: An agent: ``agent(env, obs) -> action`` (the environment, for its masks; the observation of the step).
Agent = Callable[[SchedulingEnv, Any], Any]


def masked_random(rng: np.random.Generator) -> Agent:
    """An agent that draws every action component uniformly among the values :meth:`SchedulingEnv.action_masks`
    allows (every component has one)."""

    def act(env: SchedulingEnv, _obs: Any) -> Any:
        mask = env.action_masks()
        space = env.action_space
        nvec = [int(space.n)] if isinstance(space, gym.spaces.Discrete) else [int(n) for n in space.nvec]
        out, k = [], 0
        for n in nvec:
            out.append(int(rng.choice(np.flatnonzero(mask[k : k + n]))))
            k += n
        return out[0] if isinstance(space, gym.spaces.Discrete) else np.array(out, dtype=np.int64)

    return act


def episode_return(env: SchedulingEnv, agent: Agent, seed: int) -> tuple[float, int]:
    """Play one episode of ``env`` from ``reset(seed=seed)`` with ``agent(env, obs) -> action``; returns (the
    return, the actions the environment refused)."""
    obs, _info = env.reset(seed=seed)
    total, done, info = 0.0, False, {}
    while not done:
        obs, r, terminated, truncated, info = env.step(agent(env, obs))
        total += float(r)
        done = terminated or truncated
    return total, int(info.get("invalid_actions", 0))


def reference_returns(
    env_ids: Sequence[str] = tuple(registration.ENV_IDS),
    references: Sequence[str] = tuple(REFERENCES),
    seeds: int = 3,
    progress: Callable[[str], None] | None = None,
    **env_kw: Any,
) -> list[dict[str, Any]]:
    """One row per (environment, reference): ``scenario``, ``env``, ``reference``, ``stack``, ``seeds``,
    ``return_mean``, ``return_std`` (over seeds), ``objective`` (−return_mean / minutes), ``refused`` (actions
    refused, summed), ``wall_s``. ``env_kw``: :class:`policy.sim.env.EnvConfig` fields for every environment.
    Raises ValueError for an unknown id or reference."""
    bad = [r for r in references if r not in REFERENCES]
    if bad:
        raise ValueError(f"references: unknown {', '.join(bad)} (known: {', '.join(REFERENCES)})")
    unknown = [e for e in env_ids if e not in registration.ENV_IDS]
    if unknown:
        raise ValueError(f"envs: unknown {', '.join(unknown)} (known: {', '.join(registration.ENV_IDS)})")
    rows = []
    for env_id in env_ids:
        mode = registration.ENV_IDS[env_id][0]
        for ref in references:
            stack, kind = REFERENCES[ref]
            env = SchedulingEnv(mode=mode, stack=stack, **env_kw)
            t0 = time.perf_counter()
            rets, refused = [], 0
            for seed in range(seeds):
                agent = masked_random(np.random.default_rng(seed)) if kind == "random" else _stack_agent
                ret, n = episode_return(env, agent, seed)
                rets.append(ret)
                refused += n
            env.close()
            minutes = env.config.episode_minutes
            row = {
                "scenario": env.scenario.name,
                "env": env_id,
                "reference": ref,
                "stack": stack,
                "seeds": seeds,
                "return_mean": float(np.mean(rets)),
                "return_std": float(np.std(rets)),
                "objective": float(-np.mean(rets) / minutes),
                "refused": refused,
                "wall_s": round(time.perf_counter() - t0, 1),
            }
            rows.append(row)
            if progress is not None:
                progress(f"{env_id} {ref}: return {row['return_mean']:.2f} ± {row['return_std']:.2f}")
    return rows


def _stack_agent(env: SchedulingEnv, _obs: Any) -> Any:
    return env.stack_action()


def markdown(rows: Sequence[dict[str, Any]], setting: dict[str, Any]) -> str:
    """Section ``rl-environments`` of BENCHMARKS.md: the table of reference returns and how it was measured."""
    table = tabulate(
        [
            [
                r["scenario"],
                f"`{r['env']}`",
                r["reference"],
                f"{r['return_mean']:.2f} ± {r['return_std']:.2f}",
                f"{r['objective']:.3f}",
                r["refused"],
                f"{r['wall_s']:.1f}",
            ]
            for r in rows
        ],
        headers=["scenario", "environment", "reference", "return (mean ± std)", "objective", "refused", "wall s"],
        tablefmt="github",
        disable_numparse=True,
    )
    return "\n".join(
        [
            "## RL environments: reference returns",
            "",
            f"`python -m policy.bench.envs` (`make bench-envs`) on {os.cpu_count() or 0} CPU cores: each environment "
            f"of `policy.sim.registration` in the scenarios {', '.join(f'`{s}`' for s in setting['scenarios'])}, "
            f"{setting['minutes']}-minute episodes, "
            f"seeds 0-{setting['seeds'] - 1} (`reset(seed=k)`: the same start minutes, churn and random numbers for "
            "every reference), the other options at their defaults (docs/rl-environments.md). A return is −objective "
            "× minutes; higher is better. `random`: uniform over the masked actions; `kube-scheduler`, `hpa`, "
            "`hrl-scheduler`: the stack's own action (`stack_action()`) in the stacks `default-kube-scheduler`, "
            "`default-kube-scheduler+hpa` and `hrl-scheduler` (the shipped policy, committed bundles). `refused`: "
            "actions outside the mask (none expected).",
            "",
            table,
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m policy.bench.envs", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--scenario",
        action="append",
        default=None,
        help="a scenario to play every environment in (repeat; default: baseline-2026-11 and events)",
    )
    p.add_argument("--minutes", type=int, default=30, help="episode minutes (default 30)")
    p.add_argument("--seeds", type=int, default=3, help="episodes per reference (seeds 0..N-1; default 3)")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the rows as JSON")
    p.add_argument("--no-write", action="store_true", help="print the section instead of writing BENCHMARKS.md")
    args = p.parse_args(argv)
    if args.seeds < 1:
        p.error(f"--seeds: expected an integer >= 1, got {args.seeds}")
    scenarios = args.scenario or ["baseline-2026-11", "events"]
    rows: list[dict[str, Any]] = []
    try:
        for scenario in scenarios:
            rows += reference_returns(
                seeds=args.seeds,
                progress=lambda m, s=scenario: print(f"{s}: {m}", file=sys.stderr),
                scenario=scenario,
                episode_minutes=args.minutes,
            )
    except ValueError as exc:
        p.error(" ".join(str(exc).split()))
    setting = {"scenarios": scenarios, "minutes": args.minutes, "seeds": args.seeds}
    md = markdown(rows, setting)
    if args.json:
        Path(args.json).write_text(json.dumps({"setting": setting, "rows": rows}, indent=1) + "\n", encoding="utf-8")
    if args.no_write:
        print(md)
    else:
        write_section("rl-environments", md)
        print("BENCHMARKS.md section 'rl-environments' updated", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
