"""The descheduler's live inputs (``metricsSources``, :mod:`policy.live`): built from the configuration, applied to
every observation (:class:`policy.live.LiveInputs`), and the rule for what a cycle may plan without them.

**What needs measured use.** A move is planned from the nodes' measured CPU use (the learned placement's
``cpu_used_frac``, the overload threshold) and a resize is sized from the pod's: with ``resourceUsage`` configured but
not usable in a cycle's observation (``stale``, ``error``, ``pending``), :func:`guard_planner`'s wrapper lets that cycle
plan no move and no resize (eviction fails closed: the state they would be planned on is not the one the policies were
trained on) and says so once per cycle (a WARNING line, the report's ``inputs`` and ``inputs_withheld``). Replica
targets go on: an autoscaler gives a target only to a Deployment whose pods are measured, so none without use. With
``resourceUsage`` off (no ``uri``) nothing is withheld: the documented fallback to requests applies (the planner's
``overloadThreshold`` reads "measured when known, else requested"), and the start-up line and every report say the
input is off. Missing service signals withhold nothing: every reader has a documented fallback
(:data:`policy.contract.FEATURE_CONTRACT`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from policy.highlevel import Admission, HighLevelPolicy, MoveGate, planner_accepts_gate
from policy.index import ClusterIndex
from policy.live import (
    InputMetrics,
    LiveInputs,
    SignalsInput,
    UsageInput,
    open_signals_source,
    open_usage_source,
    signal_readers,
)
from policy.lowlevel import PlacementPolicy
from policy.state import ClusterSnapshot, Move, Plan, PodInfo

from .config import DeschedulerConfiguration

__all__ = ["live_inputs", "InputsGuard", "guard_planner"]

log = logging.getLogger("descheduler.inputs")


def live_inputs(
    config: DeschedulerConfiguration,
    planner: Any,
    metrics_api: Callable[[], Any] | None = None,
    metrics: InputMetrics | None = None,
) -> LiveInputs:
    """The :class:`policy.live.LiveInputs` of ``config.metricsSources`` for ``planner`` (its signal readers:
    :func:`policy.live.signal_readers`). ``metrics_api``: the Metrics API's fetch callable on a live cluster
    (:class:`policy.kube.MetricsApiReader`; ``None`` with ``--snapshot``, where ``metrics-api`` cannot be read).
    Raises ``ValueError`` naming the field for a source that cannot be built."""
    ms = config.metrics_sources
    ru, ss = ms.resource_usage, ms.service_signals
    try:
        usage_source = open_usage_source(ru.uri, metrics_api) if ru.uri is not None else None
    except ValueError as exc:
        raise ValueError(f"metricsSources.resourceUsage.uri: {exc}") from None
    try:
        signals_source = open_signals_source(ss.uri) if ss.uri is not None else None
    except ValueError as exc:
        raise ValueError(f"metricsSources.serviceSignals.uri: {exc}") from None
    usage = UsageInput(usage_source, max_age_s=ru.max_age_seconds, logger=log, metrics=metrics)
    signals = SignalsInput(signals_source, max_age_s=ss.max_age_seconds, logger=log, metrics=metrics)
    return LiveInputs(usage, signals, signal_readers(planner))


class _NoMoves:
    """A :class:`policy.highlevel.MoveGate` that admits nothing and lets no pod be proposed (no API call)."""

    def __init__(self, gate: MoveGate):
        self.gate = gate

    @property
    def exhausted(self) -> bool:
        return True

    def may_move(self, pod: PodInfo) -> bool:
        return False

    def admit(self, move: Move) -> Admission:
        return "reject"


class InputsGuard:
    """``planner`` under the live-input rule of the module docstring, for planners without a move gate; attributes
    not its own (``name``, ``load_state``, ``autoscaler``, ...) are the planner's. ``rereads``: the cycle observes
    again before its in-place resizes (``resize.enabled`` with a resizer): that second observation then reuses this
    cycle's readings (:meth:`policy.live.LiveInputs.expect_reread`: one round trip per source per cycle).
    ``withheld``: the last cycle's ``{"moves": bool, "resizes": n}`` (moves not planned; planned resizes dropped);
    ``blocked_cycles``: cycles that withheld."""

    def __init__(self, planner: HighLevelPolicy, live: LiveInputs, rereads: bool = False):
        self.planner = planner
        self.live = live
        self.rereads = rereads
        self.withheld: dict[str, Any] = {"moves": False, "resizes": 0}
        self.blocked_cycles = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.planner, name)

    @property
    def name(self) -> str:
        return str(getattr(self.planner, "name", type(self.planner).__name__))

    def blocked(self) -> bool:
        """Whether this cycle's observation lacks measured use the configuration asks for."""
        return self.live.usage.configured and not self.live.usage_usable

    def _finish(self, plan: Plan, blocked: bool) -> Plan:
        self.withheld = {"moves": blocked, "resizes": len(plan.resizes) if blocked else 0}
        if blocked:
            plan = replace(plan, moves=(), resizes=())
            self.blocked_cycles += 1
            st = self.live.usage.health.status
            log.warning(
                "no move and no resize planned this cycle (%d planned resize(s) dropped): %s",
                self.withheld["resizes"],
                st.line(self.live.usage.clock()),
            )
        if plan.resizes and self.rereads:
            self.live.expect_reread()
        return plan

    def plan(self, snapshot: ClusterSnapshot, index: ClusterIndex, placement: PlacementPolicy) -> Plan:
        blocked = self.blocked()
        return self._finish(self.planner.plan(snapshot, index, placement), blocked)


class GatedInputsGuard(InputsGuard):
    """:class:`InputsGuard` for a planner that takes the descheduler's move gate: while blocked, its gate admits
    nothing, so no pod is even proposed and nothing is evicted."""

    def plan(
        self,
        snapshot: ClusterSnapshot,
        index: ClusterIndex,
        placement: PlacementPolicy,
        *,
        gate: MoveGate | None = None,
    ) -> Plan:
        blocked = self.blocked()
        if blocked and gate is not None:
            gate = _NoMoves(gate)
        planner: Any = self.planner
        return self._finish(planner.plan(snapshot, index, placement, gate=gate), blocked)


def guard_planner(planner: HighLevelPolicy, live: LiveInputs, rereads: bool = False) -> InputsGuard:
    """``planner`` wrapped by :class:`GatedInputsGuard` when it takes a move gate, else by :class:`InputsGuard`."""
    if planner_accepts_gate(planner):
        return GatedInputsGuard(planner, live, rereads)
    return InputsGuard(planner, live, rereads)
