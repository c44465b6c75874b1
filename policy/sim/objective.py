"""The one objective of hrl-scheduler: a reward per simulated minute over latency, SLO violations, failed
requests and CPU, used by training (both levels of the hierarchy), by the benchmark (the ``objective`` column)
and by the ablations. Nothing else computes a reward.

Per minute *m* of an application with p95 SLO ``S`` (ms) and manifest CPU requests ``C0`` (cores)::

    cost_m =   mean_weight  · min(latency_mean_ms_m / S, cap)
             + p95_weight   · min(latency_p95_ms_m  / S, cap)
             + violation_weight · 1[latency_p95_ms_m > S]            (a penalty per SLO-violating minute)
             + failed_weight · failed_m / offered_m                  (fraction of user requests that failed)
             + cpu_price    · cpu_cores_requested_m / C0              (CPU allocated, relative to the manifests)
    reward_m = −cost_m

The failed weight (100: 1 % of the requests failing weighs as much as a p95 at the SLO) keeps a policy
from buying the survivors a lower p95 by refusing requests (a failed request is excluded from the latency
percentiles). A minute without traffic costs only its CPU. A minute whose requests all failed has no latency sample: its
latency terms take ``cap`` and it counts as violating. ``cap`` (10) bounds a single bad minute so that one
overload does not drown every other signal. The terms are scale-free (latency relative to the SLO, CPU
relative to the app's own manifests), so one set of weights serves every application.

The violation weight is the multiplier of a constraint "at most ``target_violation_rate`` of the minutes
violate the SLO": training may adapt it as a Lagrange multiplier (:meth:`Objective.lagrangian_step`, dual
ascent: ``λ ← clip(λ + η (violation rate − target), 0, λ_max)``, as in constrained policy optimization, Altman
1999; Tessler et al. 2019 "Reward Constrained Policy Optimization"); the benchmark reports with the stated
defaults below.

The high level's reward for one period is the sum of its minutes' rewards (:func:`period_rewards`); the low
level adds an intrinsic term for following the intent (:func:`intent_following_penalty`, FeUdal / HIRO style:
Vezhnevets et al. 2017, Nachum et al. 2018).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "Objective",
    "MinuteOutcome",
    "DEFAULT_OBJECTIVE",
    "minute_outcomes",
    "period_rewards",
    "intent_following_penalty",
    "run_objective",
    "reference_cores",
    "app_costs",
]


class MinuteOutcome(NamedTuple):
    """What the objective reads of one minute (arrays of shape (T,) for T minutes are accepted too):
    ``latency_mean_ms`` and ``latency_p95_ms`` of the successful requests (``inf`` or NaN when none succeeded),
    ``failed`` and ``offered`` user requests (counts, ``failed <= offered``), ``cpu_cores_requested`` (cores
    allocated to the app's pods that minute)."""

    latency_mean_ms: Any
    latency_p95_ms: Any
    failed: Any
    offered: Any
    cpu_cores_requested: Any


@dataclass(frozen=True)
class Objective:
    """The weights of the objective (module docstring). All finite and >= 0; ``cap`` > 0; ``target_violation_rate``
    in [0, 1]. Raises ValueError naming the field otherwise."""

    mean_weight: float = 0.5
    p95_weight: float = 0.5
    violation_weight: float = 1.0
    failed_weight: float = 100.0
    cpu_price: float = 0.5
    cap: float = 10.0
    target_violation_rate: float = 0.05

    def __post_init__(self) -> None:
        for f in ("mean_weight", "p95_weight", "violation_weight", "failed_weight", "cpu_price", "cap"):
            v = getattr(self, f)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"objective.{f}: expected a finite number >= 0, got {v!r}")
        if self.cap <= 0:
            raise ValueError(f"objective.cap: expected a number > 0, got {self.cap!r}")
        if not 0.0 <= self.target_violation_rate <= 1.0:
            raise ValueError(
                f"objective.target_violation_rate: expected a number in [0, 1], got {self.target_violation_rate!r}"
            )

    def costs(self, m: MinuteOutcome, slo_p95_ms: float, reference_cores: float) -> np.ndarray:
        """(T,) float64 cost of each minute (the negated reward). ``slo_p95_ms`` > 0; ``reference_cores`` > 0 (the
        app's manifest CPU requests, cores). Raises ValueError for non-positive SLO or reference."""
        if not (slo_p95_ms > 0 and math.isfinite(slo_p95_ms)):
            raise ValueError(f"slo_p95_ms: expected a finite number > 0, got {slo_p95_ms!r}")
        if not (reference_cores > 0 and math.isfinite(reference_cores)):
            raise ValueError(f"reference_cores: expected a finite number > 0, got {reference_cores!r}")
        mean = np.atleast_1d(np.asarray(m.latency_mean_ms, dtype=np.float64))
        p95 = np.atleast_1d(np.asarray(m.latency_p95_ms, dtype=np.float64))
        failed = np.atleast_1d(np.asarray(m.failed, dtype=np.float64))
        offered = np.atleast_1d(np.asarray(m.offered, dtype=np.float64))
        cores = np.atleast_1d(np.asarray(m.cpu_cores_requested, dtype=np.float64))
        traffic = offered > 0
        all_failed = traffic & (failed >= offered)
        bad_mean = ~np.isfinite(mean) | all_failed
        bad_p95 = ~np.isfinite(p95) | all_failed
        lat_mean = np.where(bad_mean, self.cap, np.minimum(np.nan_to_num(mean, posinf=0.0) / slo_p95_ms, self.cap))
        lat_p95 = np.where(bad_p95, self.cap, np.minimum(np.nan_to_num(p95, posinf=0.0) / slo_p95_ms, self.cap))
        violated = bad_p95 | (np.nan_to_num(p95, posinf=0.0) > slo_p95_ms)
        frac_failed = np.where(traffic, np.clip(failed / np.where(traffic, offered, 1.0), 0.0, 1.0), 0.0)
        latency = np.where(traffic, self.mean_weight * lat_mean + self.p95_weight * lat_p95, 0.0)
        return (
            latency
            + np.where(traffic, self.violation_weight * violated, 0.0)
            + self.failed_weight * frac_failed
            + self.cpu_price * cores / reference_cores
        )

    def rewards(self, m: MinuteOutcome, slo_p95_ms: float, reference_cores: float) -> np.ndarray:
        """(T,) float64 reward of each minute: ``-costs(...)``."""
        return -self.costs(m, slo_p95_ms, reference_cores)

    def lagrangian_step(self, violation_rate: float, lr: float = 0.5, max_weight: float = 20.0) -> Objective:
        """The objective with ``violation_weight`` moved by one dual-ascent step toward meeting the target
        violation rate (module docstring); ``violation_rate`` in [0, 1] is the measured share of violating
        minutes. Returns a new Objective (this one is frozen)."""
        if not (math.isfinite(violation_rate) and 0.0 <= violation_rate <= 1.0):
            raise ValueError(f"violation_rate: expected a number in [0, 1], got {violation_rate!r}")
        w = float(np.clip(self.violation_weight + lr * (violation_rate - self.target_violation_rate), 0.0, max_weight))
        return replace(self, violation_weight=w)


#: The stated weights the benchmark reports with.
DEFAULT_OBJECTIVE = Objective()


def minute_outcomes(series: Mapping[str, Sequence[float]]) -> MinuteOutcome:
    """The objective's view of a simulation's per-minute ``series`` (:class:`policy.sim.engine.SimResult`):
    (T,) arrays of ``latency_mean_ms``, ``latency_p95_ms``, ``failed``, ``offered``, ``cpu_cores_requested``.
    Raises KeyError naming a missing series."""
    cols = []
    for k in ("latency_mean_ms", "latency_p95_ms", "failed", "offered", "cpu_cores_requested"):
        if k not in series:
            raise KeyError(f"series: missing {k!r}")
        cols.append(np.asarray(series[k], dtype=np.float64))
    return MinuteOutcome(*cols)


def period_rewards(rewards: np.ndarray, period_min: int) -> np.ndarray:
    """The high level's reward per period: the sum of the minute rewards of each ``period_min``-minute period
    ((T,) → (ceil(T / period_min),); the last period may be shorter). ``period_min`` >= 1."""
    if period_min < 1:
        raise ValueError(f"period_min: expected an integer >= 1, got {period_min!r}")
    r = np.asarray(rewards, dtype=np.float64)
    n = -(-len(r) // period_min)
    out = np.zeros(n)
    np.add.at(out, np.arange(len(r)) // period_min, r)
    return out


def intent_following_penalty(utilization: np.ndarray, capacity_target: np.ndarray, weight: float = 0.5) -> np.ndarray:
    """The low level's intrinsic cost for not following the intent: ``weight · |u − u*|`` per deployment, where
    ``u`` is the deployment's measured CPU utilization (used / requested, (D,)) and ``u*`` the capacity target
    the high level set for it ((D,), in (0, 1]). NaN utilizations (no measurement) cost 0."""
    u = np.asarray(utilization, dtype=np.float64)
    t = np.asarray(capacity_target, dtype=np.float64)
    return np.where(np.isfinite(u), weight * np.abs(u - t), 0.0)


def reference_cores(app: Any) -> float:
    """An application's manifest CPU requests, cores (Σ replicas × pod request over its workloads; at least 1m):
    the objective's CPU reference ``C0``."""
    return max(sum(w.replicas * w.pod_requests.cpu_m for w in app.workloads) / 1000.0, 1e-3)


def app_costs(app: Any, series: Mapping[str, Sequence[float]], objective: Objective = DEFAULT_OBJECTIVE) -> np.ndarray:
    """(T,) cost of each minute of a run of ``app`` (a :class:`policy.sim.app.AppSpec`: its ``slo_p95_ms`` and
    :func:`reference_cores`) from its per-minute ``series``. Raises KeyError naming a missing series."""
    return objective.costs(minute_outcomes(series), app.slo_p95_ms, reference_cores(app))


def run_objective(
    series: Mapping[str, Sequence[float]],
    slo_p95_ms: float,
    reference_cores: float,
    objective: Objective = DEFAULT_OBJECTIVE,
) -> float:
    """The mean cost per minute of a whole run (lower is better): what the benchmark reports as ``objective``."""
    c = objective.costs(minute_outcomes(series), slo_p95_ms, reference_cores)
    return float(c.mean()) if len(c) else 0.0
