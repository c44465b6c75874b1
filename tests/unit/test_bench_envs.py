"""Reference returns of the Gymnasium environments (policy/bench/envs.py, ``make bench-envs``) and the SB3 example
that compares a trained MaskablePPO against them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from policy.bench.envs import REFERENCES, episode_return, markdown, masked_random, reference_returns
from policy.sim.env import SchedulingEnv
from policy.sim.scenario import run_scenario

ROOT = Path(__file__).resolve().parents[2]


def test_a_stacks_reference_return_is_the_benchmarks_objective_of_the_same_runs():
    rows = reference_returns(
        ["hrl-scheduler/Joint-v1"], ["hpa", "hrl-scheduler"], seeds=2, episode_minutes=4, churn=0.0
    )
    for row in rows:
        stack = REFERENCES[row["reference"]][0]
        env = SchedulingEnv(mode="both", stack=stack, episode_minutes=4, churn=0.0)
        want = []
        for seed in range(2):
            env.reset(seed=seed)  # the start minute and the simulation seed that seed gives
            flat, _res = run_scenario(
                "baseline-2026-11",
                stack,
                seed=env.sim.config.seed,
                minutes=4,
                offset_min=env.offset_min,
                n_samples=1000,
            )
            want.append(-flat["objective"] * 4)
        assert row["return_mean"] == pytest.approx(np.mean(want), rel=1e-9)
        assert row["objective"] == pytest.approx(-np.mean(want) / 4, rel=1e-9) and row["refused"] == 0


def test_the_random_reference_only_takes_masked_actions_and_is_reproducible():
    env = SchedulingEnv(mode="both", episode_minutes=3, churn=1.0)
    a = episode_return(env, masked_random(np.random.default_rng(0)), 1)
    b = episode_return(env, masked_random(np.random.default_rng(0)), 1)
    assert a == b and a[1] == 0


def test_unknown_references_and_ids_are_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="unknown oracle.*known: random"):
        reference_returns(references=["oracle"])
    with pytest.raises(ValueError, match="unknown hrl-scheduler/Placement-v0"):
        reference_returns(["hrl-scheduler/Placement-v0"])


def test_the_section_lists_every_row_with_its_return_and_objective():
    rows = [
        {"scenario": "events", "env": "hrl-scheduler/Scaling-v1", "reference": r, "return_mean": -60.0 - k,
         "return_std": 1.5, "objective": 2.0 + k / 30, "refused": 0, "wall_s": 1.0}
        for k, r in enumerate(REFERENCES)
    ]  # fmt: skip
    md = markdown(rows, {"scenarios": ["events"], "minutes": 30, "seeds": 3})
    assert md.startswith("## RL environments: reference returns") and "scenarios `events`" in md
    assert "| events     | `hrl-scheduler/Scaling-v1` | hrl-scheduler  | -63.00 ± 1.50" in md


def test_the_sb3_example_trains_and_says_how_far_it_is_from_the_shipped_policy():
    out = subprocess.run(
        [sys.executable, "examples/sb3_maskable_ppo.py", "--env", "hrl-scheduler/Placement-v1", "--steps", "32",
         "--minutes", "3", "--seeds", "1"],
        capture_output=True, text=True, cwd=ROOT, timeout=300, env={"OMP_NUM_THREADS": "1", "PATH": ""},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert [ln.split()[0] for ln in lines[1:6]] == [*REFERENCES, "MaskablePPO"]
    assert "the shipped policy's return" in lines[-1] and lines[-1].startswith("MaskablePPO ")
