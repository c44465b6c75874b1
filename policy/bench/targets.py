"""The bench's targets on the one objective (:mod:`policy.sim.objective`, mean cost per minute, lower is better), per
cell (scenario, app, trace):

- **the oracle**: ``lookahead-oracle`` (:mod:`policy.sim.oracle`), the achievable target: hrl-scheduler whose intent
  is chosen every period by forked rollouts of candidate intents with perfect foresight of the trace;
- **the best baseline** (:func:`best_baseline`): the baseline setting of least mean objective over every baseline
  family's swept settings (:data:`policy.bench.pareto.BASELINE_FAMILIES`), named;
- **the best constant**: ``hrl-constant`` (hrl-scheduler under the tuned constant intent committed with its bundles,
  chosen by grid search on the training episodes only, never on a bench cell);
- **every contender's share of the oracle's gain** over the best constant (:func:`oracle_share`):
  ``(constant − stack) / (constant − oracle)`` on the mean objectives: 0 = as good as the best constant, 1 = as good
  as the oracle, below 0 = worse than the constant, above 1 = better than the oracle. None where the oracle's gain is
  under :func:`gain_floor`: a share divides by the gain, so a gain within the seeds' noise would turn that noise into
  shares of hundreds of percent;
- **the cells where the oracle loses to a baseline** (:func:`oracle_loss`): the baseline, both objectives, their
  difference, paired by seed (every stack runs the same seeds with common random numbers), and the reason: whether
  the oracle beat the best constant (then the shortfall is hrl-scheduler's stack under every candidate intent) or not
  (then it is the lookahead's search).

Mean ± ci95: Student t over the evaluation seeds (:func:`policy.bench.common.mean_ci95`); differences and gains are
paired by seed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .common import mean_ci95

__all__ = [
    "ORACLE_FAMILY",
    "CONSTANT_STACK",
    "TARGET_FAMILIES",
    "MIN_ORACLE_GAIN",
    "MIN_ORACLE_GAIN_FRAC",
    "gain_floor",
    "paired",
    "best_baseline",
    "oracle_share",
    "cell_targets",
    "LOSS_REASONS",
    "oracle_loss",
]

#: The achievable target's stack family.
ORACLE_FAMILY = "lookahead-oracle"
#: The best constant intent (its tuned setting: the plain name).
CONSTANT_STACK = "hrl-constant"
#: The families that are targets, not contenders of the training-seed spread.
TARGET_FAMILIES = (ORACLE_FAMILY, CONSTANT_STACK)

#: The smallest gain of the oracle over the best constant (objective units per minute) for which a share is
#: reported, and the same as a fraction of the constant's objective: the larger of the two applies.
MIN_ORACLE_GAIN = 0.02
MIN_ORACLE_GAIN_FRAC = 0.02


def gain_floor(constant: float) -> float:
    """The smallest oracle gain over a best constant of mean objective ``constant`` that a share divides by:
    ``max(MIN_ORACLE_GAIN, MIN_ORACLE_GAIN_FRAC × |constant|)``."""
    return max(MIN_ORACLE_GAIN, MIN_ORACLE_GAIN_FRAC * abs(constant))


def paired(a: Mapping[int, float], b: Mapping[int, float]) -> dict[str, float] | None:
    """``{"mean", "ci95"}`` of ``a_s − b_s`` over the seeds ``s`` both ran (per-seed values by seed); None when they
    share no seed."""
    common = sorted(set(a) & set(b))
    if not common:
        return None
    return mean_ci95([a[s] - b[s] for s in common])


def _mean(v: Mapping[int, float]) -> float:
    return float(np.mean([v[s] for s in sorted(v)]))


def best_baseline(objective: Mapping[str, Mapping[int, float]], baselines: Sequence[str]) -> str | None:
    """The baseline setting (among ``baselines``, in that order, the ones with runs in ``objective``: stack → seed →
    objective) of least mean objective; the first of equals; None when none ran."""
    best, value = None, np.inf
    for b in baselines:
        if b in objective and objective[b]:
            m = _mean(objective[b])
            if m < value:
                best, value = b, m
    return best


def oracle_share(constant: float, oracle: float, value: float) -> float | None:
    """The share of the oracle's gain over the best constant that a stack of mean objective ``value`` captures,
    ``(constant − value) / (constant − oracle)``; None when the gain ``constant − oracle`` is under
    :func:`gain_floor` (module docstring)."""
    gain = constant - oracle
    if not gain >= gain_floor(constant):
        return None
    return (constant - value) / gain


def _entry(name: str, v: Mapping[int, float]) -> dict[str, Any]:
    return {"stack": name, "objective": mean_ci95([v[s] for s in sorted(v)])}


def cell_targets(
    objective: Mapping[str, Mapping[int, float]],
    baselines: Sequence[str],
    contenders: Sequence[str],
    oracle: str | None,
    constant: str | None = CONSTANT_STACK,
) -> dict[str, Any]:
    """The targets of one cell (module docstring) from ``objective`` (stack → seed → the run's objective):
    ``{"oracle": {"stack", "objective": {mean, ci95}} | None, "best_baseline": {"stack", "objective", "share"} | None,
    "best_constant": {"stack", "objective"} | None, "oracle_gain": {mean, ci95} | None (constant − oracle, paired by
    seed), "share": {contender: float | None}}``. ``oracle`` / ``constant``: their stack names (None or not run: that
    target is None, and so are the shares); ``share`` holds every one of ``contenders`` that ran, the targets
    excepted."""
    o = objective.get(oracle) if oracle else None
    c = objective.get(constant) if constant else None
    bb = best_baseline(objective, baselines)
    shares: dict[str, float | None] = {}
    gain = None
    if o and c:
        gain = paired(c, o)
        cm, om = _mean(c), _mean(o)
        for s in contenders:
            if s in objective and objective[s] and s not in (oracle, constant):
                shares[s] = oracle_share(cm, om, _mean(objective[s]))
    best = None
    if bb is not None:
        share = oracle_share(_mean(c), _mean(o), _mean(objective[bb])) if o and c else None
        best = {**_entry(bb, objective[bb]), "share": share}
    return {
        "oracle": _entry(oracle, o) if o else None,
        "best_baseline": best,
        "best_constant": _entry(constant, c) if c else None,
        "oracle_gain": gain,
        "share": shares,
    }


#: Why the oracle loses to a baseline, by whether it beat the best constant too (:func:`oracle_loss`).
LOSS_REASONS = {
    "stack": (
        "the oracle beats the best constant but not {baseline}: every candidate intent runs hrl-scheduler's own "
        "placement, autoscaler and guards, and that stack falls short of the baseline under each of them"
    ),
    "search": (
        "the oracle loses to the best constant too: its greedy lookahead over the horizon misses what one constant "
        "intent held for the whole run achieves (a longer horizon or more candidates)"
    ),
    "unknown": "the best constant did not run: nothing tells the stack's shortfall from the search's",
}


def oracle_loss(
    objective: Mapping[str, Mapping[int, float]],
    baseline: str | None,
    oracle: str | None,
    constant: str | None = CONSTANT_STACK,
) -> dict[str, Any] | None:
    """Where the oracle's mean objective is above ``baseline``'s (the cell's best baseline): ``{"baseline",
    "oracle_objective", "baseline_objective", "difference", "reason"}`` (difference = oracle − baseline, paired by
    seed, > 0; None without a common seed; reason: one of :data:`LOSS_REASONS`, by whether the oracle beat the best
    constant ``constant`` too); None where the oracle is at least as good, or either did not run."""
    o = objective.get(oracle) if oracle else None
    b = objective.get(baseline) if baseline else None
    if not o or not b or not _mean(o) > _mean(b):
        return None
    c = objective.get(constant) if constant else None
    kind = "unknown" if not c else ("stack" if _mean(o) <= _mean(c) else "search")
    return {
        "baseline": baseline,
        "oracle_objective": mean_ci95([o[s] for s in sorted(o)]),
        "baseline_objective": mean_ci95([b[s] for s in sorted(b)]),
        "difference": paired(o, b),
        "reason": LOSS_REASONS[kind].format(baseline=baseline),
    }
