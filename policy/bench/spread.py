"""The spread that training alone causes, next to the spread across evaluation seeds, and the ablation verdicts that
count only beyond both.

Every learned stack (a stack with the knob ``tseed``, :data:`policy.sim.stackbase.TRAINING_SEED_KNOB`) runs at each
of the plan's training seeds: ``hrl-scheduler`` (training seed 0, the committed bundles), ``hrl-scheduler@tseed=1``,
... (:func:`with_training_seed`), each over the same evaluation seeds. Per learned stack and cell and per metric of
:data:`SPREAD_METRICS` (:func:`seed_spread`), with ``y[t, s]`` the metric of training seed ``t`` on evaluation seed
``s``:

- **across training seeds**: the mean over ``t`` of the per-training-seed means ``ȳ_t = mean_s y[t, s]``, ± the
  Student-t half-width over the training seeds (what another training run would likely give);
- **across evaluation seeds**: the same grand mean, ± the Student-t half-width over the evaluation seeds of
  ``mean_t y[t, s]`` (what other traffic samples would likely give).

**Ablation verdict** (:func:`ablation_verdict`), hrl-scheduler against each ablation on the objective (lower is
better): ``difference = ablation − hrl-scheduler``; ``better`` (hrl-scheduler better: the ablated part pays) when the
difference exceeds the sum of the two stacks' half-widths across training seeds **and** the sum of their
half-widths across evaluation seeds (the two intervals are apart under both spreads), ``worse`` when ``−difference``
does, ``within`` otherwise; None, with the reason, when either stack ran fewer than two training seeds (no training
spread is known, so nothing can be outside it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from policy.sim.stackbase import parse_stack_name, stack_name

from .common import mean_ci95

__all__ = [
    "SPREAD_METRICS",
    "VERDICTS",
    "with_training_seed",
    "training_seed_of",
    "seed_spread",
    "ablation_verdict",
    "spreads_of_cell",
]

#: The metrics whose training-seed spread the summary reports (the verdict reads ``objective``).
SPREAD_METRICS = ("objective", "latency_p95_ms", "failed_pct", "cpu_core_hours")

#: The values of a verdict.
VERDICTS = ("better", "worse", "within")


def with_training_seed(name: str, training_seed: int) -> str:
    """The stack name ``name`` at training seed ``training_seed`` (its knob ``tseed``; 0: no knob, the committed
    bundles): ``with_training_seed("hrl-scheduler", 2) == "hrl-scheduler@tseed=2"``."""
    base, params = parse_stack_name(name)
    params.pop("tseed", None)
    if training_seed:
        params["tseed"] = float(training_seed)
    return stack_name(base, params)


def training_seed_of(name: str) -> tuple[str, int]:
    """``(the name at training seed 0, the training seed)`` of a stack name (:func:`with_training_seed` inverted)."""
    params = parse_stack_name(name)[1]
    return with_training_seed(name, 0), int(params.get("tseed", 0))


def seed_spread(values: Mapping[int, Mapping[int, float]]) -> dict[str, Any]:
    """The spread of one metric (module docstring) from ``values``: training seed → evaluation seed → value.
    Returns ``{"per_training_seed": [ȳ_t in training-seed order], "training": {mean, ci95}, "evaluation": {mean,
    ci95}}``; the evaluation spread is over the evaluation seeds every training seed ran. Raises ValueError for
    no values or a training seed without any."""
    tseeds = sorted(values)
    if not tseeds or any(not values[t] for t in tseeds):
        raise ValueError(f"seed_spread: every training seed needs values, got {dict(values)!r}")
    per = [float(np.mean([values[t][s] for s in sorted(values[t])])) for t in tseeds]
    common = sorted(set.intersection(*(set(values[t]) for t in tseeds)))
    ev = [float(np.mean([values[t][s] for t in tseeds])) for s in common]
    training = mean_ci95(per)
    evaluation = mean_ci95(ev) if ev else {"mean": training["mean"], "ci95": 0.0}
    return {"per_training_seed": per, "training": training, "evaluation": evaluation}


def ablation_verdict(
    hrl: Mapping[str, Any], ablation: Mapping[str, Any], n_hrl: int, n_ablation: int, name: str = "the ablation"
) -> dict[str, Any]:
    """hrl-scheduler against one ablation on their :func:`seed_spread` of the objective (module docstring);
    ``n_hrl`` / ``n_ablation``: the training seeds each ran. Returns ``{"verdict": "better" | "worse" | "within" |
    None, "difference": ablation − hrl-scheduler (grand means), "why": None or why there is no verdict}``."""
    diff = float(ablation["training"]["mean"] - hrl["training"]["mean"])
    if min(n_hrl, n_ablation) < 2:
        who = "hrl-scheduler" if n_hrl < 2 else name
        n = n_hrl if n_hrl < 2 else n_ablation
        return {
            "verdict": None,
            "difference": diff,
            "why": f"{who} ran {n} training seed{'s' if n != 1 else ''}: no training spread to be outside of",
        }
    t = hrl["training"]["ci95"] + ablation["training"]["ci95"]
    e = hrl["evaluation"]["ci95"] + ablation["evaluation"]["ci95"]
    if diff > t and diff > e:
        verdict = "better"
    elif -diff > t and -diff > e:
        verdict = "worse"
    else:
        verdict = "within"
    return {"verdict": verdict, "difference": diff, "why": None}


def spreads_of_cell(
    runs: Mapping[str, Sequence[Mapping[str, Any]]], learned: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """Per learned stack (``learned``: names at training seed 0) with runs in ``runs`` (stack name → the cell's run
    records), ``{"training_seeds": [...], <metric>: seed_spread}`` for every metric of :data:`SPREAD_METRICS`, over
    the training seeds that ran."""
    by: dict[str, dict[int, dict[int, Mapping[str, float]]]] = {}
    for name, rs in runs.items():
        plain, t = training_seed_of(name)
        if plain in learned:
            by.setdefault(plain, {})[t] = {int(r["seed"]): r["metrics"] for r in rs}
    out: dict[str, dict[str, Any]] = {}
    for plain in learned:
        if plain not in by or 0 not in by[plain]:
            continue
        ts = by[plain]
        entry: dict[str, Any] = {"training_seeds": sorted(ts)}
        for m in SPREAD_METRICS:
            entry[m] = seed_spread({t: {s: float(v[m]) for s, v in ts[t].items()} for t in ts})
        out[plain] = entry
    return out
