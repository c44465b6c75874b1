"""The high-level (descheduling) policy: which pods should move, and what intent goes down to the extender.

The descheduler calls a :class:`HighLevelPolicy` once per cycle on a fresh snapshot; the simulator calls the
same object between simulated periods. A policy only *plans*: it never evicts. The descheduler's guards
(PodDisruptionBudgets, caps, cooldown, feasibility) decide which planned moves actually happen, and
kube-scheduler (through the extender) decides where an evicted pod lands: ``Move.to_node`` is advice.

Contract (``plan(snapshot, index, placement) -> Plan``):

- ``index`` is ``ClusterIndex.build(snapshot)``; ``placement`` is the low-level policy the extender serves
  (its ``filter`` decides where a pod may go, its ``score`` how much better a node is);
- ``Plan.moves``: at most one move per pod, sorted by ``gain`` (descending, ties by pod key);
- ``Plan.replica_targets``: ``namespace/name`` → replicas (empty: no scaling opinion);
- ``Plan.intent``: the intent vector (see :data:`policy.lowlevel.INTENT_SPEC`) for the extender;
- deterministic: the same inputs give the same plan.

A planner may also accept a keyword ``gate`` (a :class:`MoveGate`, ``plan(snapshot, index, placement,
gate=...)``): the descheduler's guards and evictor, consulted *while* planning. ``gate.may_move(pod)`` (cheap,
no API call) says whether a pod may be proposed at all; ``gate.admit(move)`` runs the guards on a targeted
re-read and evicts, answering ``"accept"`` (the move happened, or would in a dry run), ``"reject"`` (blocked or
failed: the pod stays, and its service's slot is *not* spent) or ``"stop"`` (a limit ends the cycle: plan no
more). With a gate the returned ``Plan.moves`` are the accepted moves. A gate may also offer
``make_before_break(pod) -> bool`` (cheap, no API call): whether it would move the pod without losing its
capacity (scale up first, the old pod goes once the new one is Ready), so a planner may propose a service's only
pod. :func:`policy.highlevel.greedy_moves`
implements this for both built-in planners.

:class:`RebalanceHeuristic` is the first (hand-written) high-level policy; learned ones come later.
"""

from __future__ import annotations

from typing import Literal, Protocol, runtime_checkable

import numpy as np

from policy.index import ClusterIndex
from policy.lowlevel import INTENT_SPEC, PlacementPolicy
from policy.state import ClusterSnapshot, Move, Plan, PodInfo

__all__ = [
    "HighLevelPolicy",
    "GatedPlanner",
    "MoveGate",
    "Admission",
    "default_intent",
    "structurally_movable",
    "node_cpu_utilization",
    "SYSTEM_CRITICAL_PRIORITY",
    "SYSTEM_CRITICAL_CLASSES",
]


#: k8s.io/kubernetes pkg/apis/scheduling SystemCriticalPriority = 2 * HighestUserDefinablePriority (1e9).
SYSTEM_CRITICAL_PRIORITY = 2_000_000_000


#: The built-in PriorityClasses of system components (pkg/apis/scheduling/types.go).
SYSTEM_CRITICAL_CLASSES = ("system-cluster-critical", "system-node-critical")


_DONE_PHASES = ("Succeeded", "Failed")


@runtime_checkable
class HighLevelPolicy(Protocol):
    """What the descheduler and the simulator need from a high-level policy."""

    @property
    def name(self) -> str: ...

    def plan(self, snapshot: ClusterSnapshot, index: ClusterIndex, placement: PlacementPolicy) -> Plan: ...


class GatedPlanner(HighLevelPolicy, Protocol):
    """A high-level policy that consults the descheduler before accepting each move (``gate``, a :class:`MoveGate`;
    :func:`policy.highlevel.planner_accepts_gate` tells one apart)."""

    def plan(
        self,
        snapshot: ClusterSnapshot,
        index: ClusterIndex,
        placement: PlacementPolicy,
        *,
        gate: MoveGate | None = None,
    ) -> Plan: ...


#: A :class:`MoveGate`'s answer to one proposed move.
Admission = Literal["accept", "reject", "stop"]


@runtime_checkable
class MoveGate(Protocol):
    """The descheduler's side of planning (see the module docstring): ``may_move`` is called for every
    candidate pod (it must be O(1): no API call), ``admit`` once per move the planner would accept;
    ``exhausted`` turns true when no further move can be admitted this cycle (planning may stop)."""

    @property
    def exhausted(self) -> bool: ...

    def may_move(self, pod: PodInfo) -> bool: ...

    def admit(self, move: Move) -> Admission: ...


def default_intent() -> tuple[float, ...]:
    """The intent vector with every component at its default from :data:`INTENT_SPEC`
    (``(locality_weight, balance_weight)`` = ``(1.0, 1.0)`` today)."""
    return tuple(float(default) for _name, _doc, default in INTENT_SPEC)


def structurally_movable(pod: PodInfo) -> bool:
    """True for a pod that a controller would re-create after an eviction: bound, not terminating, not
    finished, with a controller owner that is not a DaemonSet, and not a mirror (static) pod.
    The descheduler's guards check these again (and much more); the planner only skips pods that could
    never move, so it does not waste a move on them."""
    return (
        pod.node_name is not None
        and not pod.terminating
        and pod.phase not in _DONE_PHASES
        and pod.owner is not None
        and not pod.is_daemonset
        and not pod.is_mirror
    )


def node_cpu_utilization(index: ClusterIndex) -> np.ndarray:
    """(N,) float64 CPU utilisation per node of ``index`` (fraction of allocatable, may exceed 1): measured
    use (``NodeInfo.usage``) where known, else the sum of requests. ``inf`` where allocatable CPU is 0."""
    load = np.where(np.isnan(index.usage_cpu_m), index.req_cpu_m, index.usage_cpu_m)
    with np.errstate(divide="ignore", invalid="ignore"):
        util = np.where(index.alloc_cpu_m > 0, load / np.maximum(index.alloc_cpu_m, 1e-12), np.inf)
    return util
