"""A rule-based threshold autoscaler, the strong simple baseline: per workload, scale out by ``step_out``
replicas when CPU utilisation (of requests, over the ready pods with a metric) is above ``u_hi``, scale in
by ``step_in`` when it is below ``u_lo``, then wait ``cooldown_min`` minutes before acting on that workload
again; replicas stay within [min_replicas, max_replicas].

This is the class of rule used by cloud autoscalers' step-scaling policies (e.g. AWS Application Auto
Scaling step scaling with a cooldown), and the kind of tuned rule-based autoscaler that a published
benchmark found cheaper than six RL algorithms on steady load (issue 4). Our thresholds are grid-searched
per application on tuning seeds disjoint from the evaluation seeds (:func:`grid_search`,
``python -m policy.bench --tune``) and stored next to the app as ``threshold-autoscaler.yaml`` (kind
``ThresholdAutoscaler``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from policy.config import ConfigModel, load_config

__all__ = [
    "ThresholdParams",
    "PARAMS_FILE",
    "load_params",
    "ThresholdAutoscaler",
    "GRID",
    "tuning_cost",
    "candidates",
    "grid_search",
]


class ThresholdParams(ConfigModel):
    """``threshold-autoscaler.yaml`` (``apiVersion: hrl-scheduler.io/v1alpha1``, ``kind: ThresholdAutoscaler``).

    ``u_hi`` / ``u_lo``: utilisation fractions of the CPU request (e.g. 0.8 = 80 %), ``u_lo < u_hi``;
    ``step_out`` / ``step_in``: replicas added / removed per action (>= 1); ``cooldown_min``: minutes
    without action on a workload after it scaled (>= 0). ``tuning``: how the values were chosen (free text,
    written by the grid search).
    """

    u_hi: float = Field(0.8, gt=0)
    u_lo: float = Field(0.3, ge=0)
    step_out: int = Field(1, ge=1)
    step_in: int = Field(1, ge=1)
    cooldown_min: int = Field(3, ge=0)
    min_replicas: int = Field(1, ge=1)
    max_replicas: int = Field(10, ge=1)
    tuning: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _order(self) -> ThresholdParams:
        if self.u_lo >= self.u_hi:
            raise ValueError(f"uLo ({self.u_lo}) must be below uHi ({self.u_hi})")
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"minReplicas ({self.min_replicas}) must be <= maxReplicas ({self.max_replicas})")
        return self


PARAMS_FILE = "threshold-autoscaler.yaml"


def load_params(app_source: str | Path | None) -> ThresholdParams:
    """The tuned parameters stored next to an app's ``app.yaml`` (``app_source``: its path), or the
    defaults when the app has none. Raises :class:`~policy.config.ConfigError` for an invalid file."""
    if app_source:
        p = Path(app_source)
        p = (p if p.is_dir() else p.parent) / PARAMS_FILE
        if p.is_file():
            return load_config(ThresholdParams, "ThresholdAutoscaler", p)
    return ThresholdParams()


@dataclass
class ThresholdAutoscaler:
    """The controller's state: the minute of the last action per workload."""

    params: ThresholdParams = field(default_factory=ThresholdParams)
    last_action_min: dict[str, float] = field(default_factory=dict)

    def decide(self, workload: str, replicas: int, utilization: float | None, now_min: float) -> int:
        """The replica count for ``workload`` at minute ``now_min`` given its utilisation (fraction of
        requests; None when unknown: no action)."""
        p = self.params
        if utilization is None:
            return replicas
        last = self.last_action_min.get(workload)
        if last is not None and now_min - last < p.cooldown_min:
            return replicas
        new = replicas
        if utilization > p.u_hi:
            new = min(p.max_replicas, replicas + p.step_out)
        elif utilization < p.u_lo:
            new = max(p.min_replicas, replicas - p.step_in)
        if new != replicas:
            self.last_action_min[workload] = now_min
        return new


#: The grid searched by :func:`grid_search` and ``python -m policy.bench --tune`` (40 combinations;
#: utilisation is of the CPU request, so values above 1 matter where limits exceed requests).
GRID: dict[str, tuple] = {
    "u_hi": (0.6, 0.8, 1.0, 1.5, 2.0),
    "u_lo": (0.2, 0.4),
    "step_out": (1, 2),
    "cooldown_min": (1, 4),
}


def tuning_cost(metrics: Mapping[str, float], reference_core_hours: float) -> float:
    """The objective the grid search minimises (lower is better): SLO-violation % + 5 × failed % +
    50 × CPU core-hours relative to the fixed-replica default stack on the same run (so a configuration
    that doubles the requested CPU pays as much as 50 points of SLO violations)."""
    rel = metrics["cpu_core_hours"] / reference_core_hours if reference_core_hours > 0 else 0.0
    return metrics["slo_violation_pct"] + 5.0 * metrics["failed_pct"] + 50.0 * rel


def candidates(grid: Mapping[str, Sequence] = GRID) -> list[ThresholdParams]:
    """Every valid combination of the grid (u_lo < u_hi), step_in 1, in a fixed order."""
    keys = list(grid)
    out = []
    for combo in itertools.product(*(grid[k] for k in keys)):
        kw = dict(zip(keys, combo))
        if kw.get("u_lo", 0.3) >= kw.get("u_hi", 0.8):
            continue
        out.append(ThresholdParams(**kw))
    return out


def grid_search(
    evaluate: Callable[[ThresholdParams], float],
    grid: Mapping[str, Sequence] = GRID,
    progress: Callable[[Iterable], Iterable] = lambda it: it,
) -> tuple[ThresholdParams, list[tuple[ThresholdParams, float]]]:
    """Evaluate every candidate with ``evaluate(params) -> cost`` (mean over the tuning runs) and return the
    cheapest (ties: the first in grid order) and the whole table."""
    table = [(c, float(evaluate(c))) for c in progress(candidates(grid))]
    best = min(table, key=lambda t: t[1])[0]
    return best, table
