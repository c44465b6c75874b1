"""The intent the high level passes down (:class:`policy.intent.Intent`, :data:`policy.intent.INTENT_SPEC` order):
the :class:`IntentPolicy` interface, the fixed intent of the ``hrl-flat`` ablation (:class:`FixedIntent`) and
:class:`UtilizationIntent` (cluster CPU utilisation × forecast → locality vs balance weights)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from policy.index import ClusterIndex
from policy.intent import Intent
from policy.state import ClusterSnapshot

from .forecast import Forecaster, forecast_factor
from .interface import default_intent, node_cpu_utilization
from .planner_state import HrlState

__all__ = ["Intent", "as_intent", "IntentPolicy", "UtilizationIntent", "FixedIntent", "cluster_cpu_utilization"]


def cluster_cpu_utilization(index: ClusterIndex) -> float:
    """Cluster-wide CPU utilisation, a fraction (may exceed 1): Σ load / Σ allocatable over the Ready,
    schedulable nodes with allocatable CPU, load = measured use where known, else the sum of requests
    (:func:`policy.highlevel.node_cpu_utilization`). 0 for a cluster without such nodes."""
    util = node_cpu_utilization(index)
    nodes = index.snapshot.nodes
    ok = np.array([n.ready and not n.unschedulable for n in nodes], dtype=bool) & (index.alloc_cpu_m > 0)
    if not ok.any():
        return 0.0
    load = util[ok] * index.alloc_cpu_m[ok]
    return float(load.sum() / index.alloc_cpu_m[ok].sum())


def as_intent(x: Intent | tuple[float, ...] | list[float]) -> Intent:
    """``x`` as an :class:`Intent` (a bare vector: no per-service parts, the whole move budget)."""
    return x if isinstance(x, Intent) else Intent(tuple(float(v) for v in x))


@runtime_checkable
class IntentPolicy(Protocol):
    """Maps global state to the intent: a vector in :data:`policy.lowlevel.INTENT_SPEC` order, or an
    :class:`Intent` with its per-service parts and move budget."""

    def intent(self, snapshot: ClusterSnapshot, index: ClusterIndex, state: HrlState) -> tuple[float, ...] | Intent: ...


@dataclass(frozen=True)
class FixedIntent:
    """Always the same intent (``None``: :func:`policy.highlevel.default_intent`). The ``hrl-flat``
    ablation uses the defaults: no intent comes down from a high level."""

    values: tuple[float, ...] | None = None

    def intent(self, snapshot: ClusterSnapshot, index: ClusterIndex, state: HrlState) -> tuple[float, ...]:
        base = list(default_intent())
        for i, v in enumerate((self.values or ())[: len(base)]):
            base[i] = float(v)
        return tuple(base)


@dataclass(frozen=True)
class UtilizationIntent:
    """The intent from global state: how busy the cluster is about to be decides locality vs balance.

    ::

        u      = cluster_cpu_utilization(index)                     (fraction of allocatable CPU)
        f      = forecast_factor(total inbound request rate)         (in [0.5, 2]; 1 without rates)
        x      = clip((u · f − low_utilization) / (high_utilization − low_utilization), 0, 1)
        target = (locality_weight: locality_max − x · (locality_max − locality_min),
                  balance_weight:  balance_min  + x · (balance_max  − balance_min))
        intent = target                                             first period
                 last + smoothing · (target − last)                 afterwards (exponential smoothing)

    Why: on a quiet cluster co-locating callers with callees saves network hops at no contention cost, so
    locality dominates; as the cluster fills up (or the predictor sees load rising), CPU contention and
    queueing cost more than a hop, so the low level is told to weigh node load more. The smoothing keeps
    the low level from flapping between periods (hence ``last_intent`` in the state).

    Parameters: ``0 <= low_utilization < high_utilization``; weights >= 0; ``smoothing`` in (0, 1]
    (1 = no smoothing). ValueError naming the field otherwise.
    """

    low_utilization: float = 0.3
    high_utilization: float = 0.8
    locality_max: float = 1.5
    locality_min: float = 0.75
    balance_min: float = 0.5
    balance_max: float = 2.0
    smoothing: float = 0.5
    forecaster: Forecaster | None = None

    def __post_init__(self) -> None:
        vals = (
            self.low_utilization,
            self.high_utilization,
            self.locality_max,
            self.locality_min,
            self.balance_min,
            self.balance_max,
            self.smoothing,
        )
        if not all(math.isfinite(v) for v in vals):
            raise ValueError(f"UtilizationIntent: parameters must be finite (got {vals!r})")
        if not 0.0 <= self.low_utilization < self.high_utilization:
            raise ValueError(
                f"UtilizationIntent: need 0 <= low_utilization < high_utilization "
                f"(got {self.low_utilization!r}, {self.high_utilization!r})"
            )
        if min(self.locality_max, self.locality_min, self.balance_min, self.balance_max) < 0:
            raise ValueError("UtilizationIntent: weights must be >= 0")
        if not 0.0 < self.smoothing <= 1.0:
            raise ValueError(f"UtilizationIntent.smoothing: must be in (0, 1] (got {self.smoothing!r})")

    def target(self, utilization: float) -> tuple[float, float]:
        """``(locality_weight, balance_weight)`` for a (forecast) utilisation, before smoothing."""
        x = float(
            np.clip((utilization - self.low_utilization) / (self.high_utilization - self.low_utilization), 0.0, 1.0)
        )
        return (
            self.locality_max - x * (self.locality_max - self.locality_min),
            self.balance_min + x * (self.balance_max - self.balance_min),
        )

    def intent(self, snapshot: ClusterSnapshot, index: ClusterIndex, state: HrlState) -> tuple[float, ...]:
        u = cluster_cpu_utilization(index) * forecast_factor(state.total_rates(), self.forecaster)
        target = list(default_intent())
        target[0], target[1] = self.target(u)
        last = state.last_intent
        if last is None or len(last) != len(target):
            return tuple(float(v) for v in target)
        a = self.smoothing
        return tuple(float(l_ + a * (t - l_)) for l_, t in zip(last, target))
