"""An ensemble of learned high levels planning one intent (numpy only).

:class:`IntentEnsemble` holds K :class:`~policy.highlevel.LearnedIntent` members (in the committed bundles, the
high levels of the K training seeds of ``make train``). Every member observes the cluster with its own featurizer
and applies its own guardrails (its out-of-distribution fallback to the tuned constant, its per-service fallback,
its lean caps); the intent served is the members' mean: the mean of the global weights, of each service's capacity
target and co-location priority, and of the move budget; with a ``pessimism`` (``pessimism.json`` beside
``ensemble.json``, tuned on training episodes by ``hrl-policy train pessimism``) each service's capacity target moves
from the mean towards the members' lowest. A deep ensemble's mean varies less from one training seed
to the next than a member does (Lakshminarayanan et al., NeurIPS 2017, arXiv 1612.01474); here it keeps one
seed's poor high level (measured: a capacity target far from what the other seeds learned in a few cells) from
deciding alone.

An ensemble directory holds ``ensemble.json`` with level ``high`` (:func:`policy.bundle.ensemble_members`), each
member a high-level bundle directory (``intent/`` + ``predictor/``); :func:`load_intent_policy` loads either.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from policy.bundle import BundleError, check_distinct_members, ensemble_member_error, ensemble_members, is_ensemble
from policy.index import ClusterIndex
from policy.state import ClusterSnapshot

from .intent import Intent
from .learned_intent import DEFAULT_CPU_PRICE, LearnedIntent
from .planner_state import HrlState
from .tuned import PESSIMISM_FILE_NAME, tuned_pessimism

__all__ = ["IntentEnsemble", "mean_intent", "load_intent_policy"]


def mean_intent(intents: Sequence[Intent], pessimism: float = 0.0) -> Intent:
    """The component-wise mean of ``intents`` (at least one, global vectors of one length): the global weights,
    each service's capacity target and co-location priority (over the intents that set it), the move budget.
    ``pessimism`` in [0, 1] moves each service's capacity target from the members' mean (0) towards their lowest
    (1, the most headroom: as clipped double Q-learning takes the lower of two critics, Fujimoto et al. 2018,
    arXiv 1802.09477): ``(1 - pessimism) * mean + pessimism * min``.
    Raises ``ValueError`` for no intents, global vectors of different lengths or a pessimism outside [0, 1]."""
    if not (0.0 <= float(pessimism) <= 1.0):
        raise ValueError(f"pessimism: expected a number in [0, 1], got {pessimism!r}")
    if not intents:
        raise ValueError("intents: expected at least one")
    n = len(intents[0].values)
    if any(len(i.values) != n for i in intents):
        raise ValueError(f"intents: global vectors of different lengths {[len(i.values) for i in intents]}")
    values = tuple(float(np.mean([i.values[k] for i in intents])) for k in range(n))

    def per_service(field: str) -> dict[str, float]:
        names = sorted({s for i in intents for s in getattr(i, field)})
        return {s: float(np.mean([getattr(i, field)[s] for i in intents if s in getattr(i, field)])) for s in names}

    capacity = per_service("capacity_target")
    if pessimism:
        p = float(pessimism)
        capacity = {
            s: (1.0 - p) * v + p * min(i.capacity_target[s] for i in intents if s in i.capacity_target)
            for s, v in capacity.items()
        }
    return Intent(
        values,
        capacity_target=capacity,
        colocation_priority=per_service("colocation_priority"),
        move_budget_frac=float(np.mean([i.move_budget_frac for i in intents])),
    )


class IntentEnsemble:
    """K learned high levels serving their mean intent (module docstring); an
    :class:`~policy.highlevel.IntentPolicy` wherever :class:`~policy.highlevel.LearnedIntent` is served.

    ``members``: one or more :class:`LearnedIntent` (an ensemble file lists at most 16); ``source``: where they
    were loaded from; ``pessimism`` in [0, 1]: each service's capacity target from the members' mean (0) towards
    their lowest (1) (:func:`mean_intent`). Counters:
    ``fallbacks``, the periods in which at least one member fell back to its tuned constant (out of distribution);
    ``service_fallbacks``, ``lean_capped``, ``no_burst_capped``: the members' counts, summed.
    ``featurizer`` is the first member's (the workload predictor the intent's autoscaler reads); ``signals`` are
    passed to every member. Raises :class:`~policy.bundle.BundleError` for no members or the same network twice."""

    def __init__(self, members: Sequence[LearnedIntent], source: str = "", pessimism: float = 0.0):
        self.members = tuple(members)
        where = f"intent ensemble {source}".rstrip()
        try:
            p = float(pessimism)
        except (TypeError, ValueError):
            p = float("nan")
        if not 0.0 <= p <= 1.0:
            raise BundleError(f"{where}: pessimism: expected a number in [0, 1], got {pessimism!r}")
        self.pessimism = p
        if not self.members:
            raise BundleError(f"{where}: members: expected at least one high-level bundle")
        check_distinct_members(
            [str(getattr(getattr(m, "actor", None), "version", "") or "") for m in self.members], where
        )
        self.source = source
        self.featurizer = self.members[0].featurizer
        # the member whose featurizer keeps the longest rate history records it for all
        self._recorder = max(self.members, key=lambda m: getattr(getattr(m.featurizer, "local", None), "keep", 0))
        self.fallbacks = 0
        self.service_fallbacks = 0
        self.lean_capped = 0
        self.no_burst_capped = 0
        self.last_observation: Any = None

    @property
    def signals(self) -> Any:
        """The per-service signals (measured latency, refused share, ...) every member reads this cycle; set by
        the live and simulated signal readers (:func:`policy.live.signal_readers`), as on a LearnedIntent."""
        return self.members[0].signals

    @signals.setter
    def signals(self, value: Any) -> None:
        for m in self.members:
            m.signals = value

    @staticmethod
    def load(
        path: str | Path,
        *,
        slo_p95_ms: float | None = None,
        cpu_price: float = DEFAULT_CPU_PRICE,
        workloads: Sequence[str] | None = None,
    ) -> IntentEnsemble:
        """The ensemble of directory ``path`` (its ``ensemble.json``, level ``high``), each member loaded by
        :meth:`LearnedIntent.load` with the same arguments, at the pessimism of ``path/pessimism.json``
        (:func:`policy.highlevel.tuned.tuned_pessimism`; 0 without one). Raises :class:`~policy.bundle.BundleError` /
        :class:`~policy.bundle.BundleMissing` as that does, one line naming the file or member."""
        members = []
        for i, d in enumerate(ensemble_members(path, "high")):
            try:
                members.append(LearnedIntent.load(d, slo_p95_ms=slo_p95_ms, cpu_price=cpu_price, workloads=workloads))
            except ValueError as exc:  # BundleMissing, BundleError: one line naming the ensemble and the member
                raise ensemble_member_error(path, i, d, exc) from None
        try:
            pessimism = tuned_pessimism(path)
        except ValueError as exc:  # names the file
            raise BundleError(str(exc)) from None
        return IntentEnsemble(members, str(path), pessimism=pessimism)

    def record(self, snapshot: ClusterSnapshot, index: ClusterIndex, state: HrlState) -> None:
        """Record this cycle's rates once: the members keep them in one place of ``state`` (the per-Deployment
        history of :class:`~policy.highlevel.LearnedIntent`, what the cluster did, not what a network made of it),
        so one member records for all: the one whose predictor keeps the longest history; every member reads it."""
        self._recorder.record(snapshot, index, state)

    def intent(self, snapshot: ClusterSnapshot, index: ClusterIndex, state: HrlState) -> Intent:
        """:func:`mean_intent` of the members' intents for this period, at :attr:`pessimism`."""
        keys = ("fallbacks", "service_fallbacks", "lean_capped", "no_burst_capped")
        before = [[getattr(m, k, 0) for k in keys] for m in self.members]
        intents = [m.intent(snapshot, index, state) for m in self.members]
        self.last_observation = self.members[0].last_observation
        added = [sum(getattr(m, k, 0) - b[j] for m, b in zip(self.members, before)) for j, k in enumerate(keys)]
        self.fallbacks += 1 if added[0] else 0
        self.service_fallbacks += added[1]
        self.lean_capped += added[2]
        self.no_burst_capped += added[3]
        return mean_intent(intents, self.pessimism)


def load_intent_policy(
    path: str | Path,
    *,
    slo_p95_ms: float | None = None,
    cpu_price: float = DEFAULT_CPU_PRICE,
    workloads: Sequence[str] | None = None,
) -> LearnedIntent | IntentEnsemble:
    """The learned high level of directory ``path``: an :class:`IntentEnsemble` when it holds ``ensemble.json``,
    else :meth:`LearnedIntent.load`. Raises as those do, and :class:`~policy.bundle.BundleError` for a
    ``pessimism.json`` beside a single high level (it would be ignored)."""
    if is_ensemble(path):
        return IntentEnsemble.load(path, slo_p95_ms=slo_p95_ms, cpu_price=cpu_price, workloads=workloads)
    if (Path(path) / PESSIMISM_FILE_NAME).exists():  # a setting that would do nothing is refused, not ignored
        raise BundleError(
            f"{Path(path) / PESSIMISM_FILE_NAME}: pessimism is read only beside an ensemble.json (a single high level "
            "has one intent to serve)"
        )
    return LearnedIntent.load(path, slo_p95_ms=slo_p95_ms, cpu_price=cpu_price, workloads=workloads)
