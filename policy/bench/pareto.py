"""Tuned baselines on a Pareto front, and every other stack compared at equal CPU.

**Sweeps** (:func:`sweep_stacks`): each baseline runs at several settings of its main knob (stack names with
knobs, :func:`policy.sim.stacks.parse_stack_name`): the HPA's CPU target 40-300 %, points of the threshold
autoscaler's grid around its tuned values, NetworkAware's weight, Trimaran's target, LowNodeUtilization's
thresholds, and each placement baseline with an HPA (so placement is compared at autoscaled CPU too).

**Fronts** (:func:`pareto_front`): per cell (scenario, app, trace) and metric (p95 latency, failed %), the
settings not dominated in (mean CPU core-hours, mean metric): sorted by CPU, each point strictly better than
every cheaper one. The *baseline front* pools every baseline family's settings; the *tuned HPA front* is the
HPA sweep alone. (The target on the one objective, the lookahead oracle, is :mod:`policy.bench.targets`.)

**Equal CPU** (:func:`at_equal_cpu`): a stack spending ``c`` core-hours is compared with the front interpolated
linearly at ``c`` between the two front points around it (weights ``1 − a``, ``a`` from the mean CPUs). Above
the front's most expensive point the front's value there is used (the best baseline spending at most ``c``);
below its cheapest point there is no baseline that cheap and the comparison is missing (``position``
``"below"``). **Confidence intervals** propagate by pairing seeds: every stack runs the same seeds, which see the
same trace and request samples (common random numbers), so per seed ``s`` the front's value is
``(1 − a) y_i,s + a y_j,s`` and the difference ``Δ_s = y_stack,s − front_s``; the reported ``delta`` is the mean
of ``Δ_s`` ± the Student-t half-width over seeds. The ratio is ``mean(stack) / mean(front)``; its interval is
``1 + (Δ ± ci) / mean(front)`` (the front's mean taken as fixed). Which settings form the front, and the
interpolation weight, are taken from the means and not resampled.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .common import mean_ci95

__all__ = [
    "FRONT_METRICS",
    "HPA_TARGETS",
    "BASELINE_FAMILIES",
    "sweep_stacks",
    "family_of",
    "FrontPoint",
    "pareto_front",
    "interpolate",
    "at_equal_cpu",
    "cell_fronts",
]

#: The metrics drawn against CPU core-hours.
FRONT_METRICS = ("latency_p95_ms", "failed_pct")

#: The HPA sweep: CPU targets 40-90 % of requests (80 % is the plain ``default-kube-scheduler+hpa``), and 150 % and
#: 300 %, what an HPA user sets for Burstable pods (limit above request), which may use CPU above their request: the
#: tuned baseline of a stack whose replica targets count that headroom (``IntentAutoscaler.burst``).
HPA_TARGETS = (0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.5, 3.0)

#: Baseline stack families (the stack name before ``@``): the stacks users run today.
BASELINE_FAMILIES = (
    "default-kube-scheduler",
    "default-kube-scheduler+hpa",
    "networkaware",
    "trimaran-tlp",
    "descheduler-lownodeutilization",
    "threshold-autoscaler",
)


def _hpa(t: float) -> str:
    return "default-kube-scheduler+hpa" if t == 0.8 else f"default-kube-scheduler+hpa@target={t:g}"


def sweep_stacks(mode: str = "quick") -> dict[str, tuple[str, ...]]:
    """Per baseline family, the stack names its sweep runs (the family's plain name first when it is part of
    it). ``mode`` ``"quick"`` (the HPA's eight targets,
    three threshold settings, each placement baseline with and without an HPA) or ``"full"`` (more points of
    the threshold grid and each placement baseline's own knob)."""
    full = mode == "full"
    th = ["threshold-autoscaler", "threshold-autoscaler@u_hi=0.6", "threshold-autoscaler@u_hi=1.5"]
    # quick: each placement baseline at its default and with an HPA (autoscaled CPU); full: its knob too
    na = ["networkaware", "networkaware@hpa=0.8"]
    tl = ["trimaran-tlp", "trimaran-tlp@hpa=0.8"]
    ln = ["descheduler-lownodeutilization", "descheduler-lownodeutilization@hpa=0.8"]
    if full:
        th += ["threshold-autoscaler@u_hi=0.8,u_lo=0.2", "threshold-autoscaler@cooldown_min=1"]
        na += ["networkaware@weight=1", "networkaware@weight=20", "networkaware@hpa=0.6,weight=20"]
        tl += ["trimaran-tlp@target=0.2", "trimaran-tlp@target=0.7", "trimaran-tlp@hpa=0.6,target=0.7"]
        ln += ["descheduler-lownodeutilization@high=0.7,low=0.4", "descheduler-lownodeutilization@high=0.3,low=0.1"]
    return {
        "default-kube-scheduler": ("default-kube-scheduler",),
        "default-kube-scheduler+hpa": tuple(_hpa(t) for t in HPA_TARGETS),
        "threshold-autoscaler": tuple(th),
        "networkaware": tuple(na),
        "trimaran-tlp": tuple(tl),
        "descheduler-lownodeutilization": tuple(ln),
    }


def family_of(stack: str) -> str:
    """The family of a stack name: the part before ``@``."""
    return stack.partition("@")[0]


@dataclass(frozen=True)
class FrontPoint:
    """A setting on a front: its stack name, mean CPU core-hours and mean metric."""

    stack: str
    cpu: float
    value: float


def pareto_front(points: Sequence[FrontPoint]) -> list[FrontPoint]:
    """The non-dominated points, by increasing CPU: each strictly better (lower metric) than every point
    with less or equal CPU. Ties in CPU keep the better value (then the first given)."""
    out: list[FrontPoint] = []
    best = math.inf
    for p in sorted(points, key=lambda p: (p.cpu, p.value)):
        if p.value < best:
            out.append(p)
            best = p.value
    return out


def interpolate(front: Sequence[FrontPoint], cpu: float) -> tuple[str, int, int, float] | None:
    """Where ``cpu`` falls on ``front``: ``(position, i, j, a)`` with the front's value at ``cpu`` being
    ``(1 − a) front[i] + a front[j]``; position ``"inside"``, ``"above"`` (beyond the costliest point: its value)
    or None when ``cpu`` is below the cheapest point (or the front is empty)."""
    if not front or cpu < front[0].cpu - 1e-12:
        return None
    if cpu >= front[-1].cpu:
        n = len(front) - 1
        return ("above" if cpu > front[-1].cpu + 1e-12 else "inside"), n, n, 0.0
    for i in range(len(front) - 1):
        lo, hi = front[i], front[i + 1]
        if lo.cpu <= cpu <= hi.cpu:
            a = 0.0 if hi.cpu == lo.cpu else (cpu - lo.cpu) / (hi.cpu - lo.cpu)
            return "inside", i, i + 1, a
    return None  # pragma: no cover - the loop covers [front[0].cpu, front[-1].cpu]


def _ci(x: np.ndarray) -> dict[str, float]:

    return mean_ci95(x.tolist())


def at_equal_cpu(
    front: Sequence[FrontPoint],
    stack_cpu: Sequence[float],
    stack_values: Sequence[float],
    per_seed: Mapping[str, Sequence[float]],
) -> dict[str, Any] | None:
    """A stack's metric against ``front`` at its CPU (module docstring). ``stack_cpu`` / ``stack_values``: per
    seed; ``per_seed``: the front settings' per-seed values of the metric (same seed order). Returns
    ``{"cpu_core_hours", "position", "bracket": [stack_i, stack_j], "weight", "front": {mean, ci95},
    "stack": {mean, ci95}, "delta": {mean, ci95}, "ratio", "ratio_ci95": [lo, hi]}`` (``ratio`` None when the
    front's value is 0), or None when the stack spends less CPU than the whole front."""
    c = float(np.mean(stack_cpu))
    where = interpolate(front, c)
    if where is None:
        return None
    position, i, j, a = where
    yi = np.asarray(per_seed[front[i].stack], dtype=np.float64)
    yj = np.asarray(per_seed[front[j].stack], dtype=np.float64)
    ys = np.asarray(stack_values, dtype=np.float64)
    f = (1.0 - a) * yi + a * yj
    d = ys - f
    fm = float(f.mean())
    delta = _ci(d)
    ratio = float(ys.mean()) / fm if fm > 0 else None
    rci = [1.0 + (delta["mean"] - delta["ci95"]) / fm, 1.0 + (delta["mean"] + delta["ci95"]) / fm] if fm > 0 else None
    return {
        "cpu_core_hours": c,
        "position": position,
        "bracket": [front[i].stack, front[j].stack],
        "weight": a,
        "front": _ci(f),
        "stack": _ci(ys),
        "delta": delta,
        "ratio": ratio,
        "ratio_ci95": rci,
    }


def cell_fronts(runs: Mapping[str, Sequence[Mapping[str, float]]], baselines: Sequence[str]) -> dict[str, Any]:
    """The fronts of one cell: ``runs`` maps stack → per-seed metrics (same seed order for every stack).
    Returns ``{metric: {"baselines": [FrontPoint], "hpa": [...]}}``."""
    out: dict[str, Any] = {}

    def points(names: Sequence[str], metric: str) -> list[FrontPoint]:
        return [
            FrontPoint(
                n,
                float(np.mean([m["cpu_core_hours"] for m in runs[n]])),
                float(np.mean([m[metric] for m in runs[n]])),
            )
            for n in names
            if n in runs
        ]

    hpa = [n for n in baselines if family_of(n) == "default-kube-scheduler+hpa"]
    for metric in FRONT_METRICS:
        out[metric] = {
            "baselines": pareto_front(points(baselines, metric)),
            "hpa": pareto_front(points(hpa, metric)),
        }
    return out
