"""The hierarchy: one high-level policy that, every period, plans replica targets, moves and the intent
passed down to the low-level (placement) policy. numpy only (served in the descheduler and the simulator).

Method (issue 6; DESIGN.md section 1): joint scheduling by a high level that plans global intent and a low level
that places pods, plus DRPC-style autoscaling (arXiv 2407.10169). :class:`HierarchicalPolicy` implements
:class:`policy.highlevel.HighLevelPolicy` and produces, from one :class:`~policy.state.ClusterSnapshot`:

(a) **replica targets** (``namespace/name`` → replicas) from a pluggable :class:`ReplicaAutoscaler`: DRPC's
    student actors when their bundle exists (``policy.highlevel.DrpcAutoscaler``, loaded by
    :func:`load_learned_autoscaler`), else the documented stand-in :class:`UtilizationTargetAutoscaler`;
(b) **moves** decided with the low-level policy's own scores: a pod moves when the best *other* node's
    ``placement.score`` beats its current node's by more than ``margin`` points (0..10 scale) and that node
    passes ``placement.filter`` (the descheduler's guards check again before any eviction);
(c) the **intent vector** (:data:`policy.lowlevel.INTENT_SPEC`) for the low level, from global state by an
    :class:`IntentPolicy`: :class:`UtilizationIntent` maps the cluster-wide CPU utilisation, scaled by the
    forecast change of the total request rate, to locality vs balance weights.

State that must survive between periods (the descheduler may run as a CronJob: a fresh process each cycle)
is explicit in :class:`HrlState` (rate history for the predictor, last intent, when moves / targets were last
planned, the stand-in's recommendation window, an opaque slot for the autoscaler) and round-trips through
JSON (:meth:`HrlState.to_json` / :meth:`HrlState.from_json`); the descheduler keeps it in its state file next
to the eviction history.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from policy.index import ClusterIndex
from policy.intent import INTENT_SPEC, Intent
from policy.lowlevel import PlacementPolicy
from policy.state import ClusterSnapshot, Move, Plan, PodInfo

from .autoscale import ReplicaAutoscaler
from .intent import IntentPolicy, UtilizationIntent, as_intent
from .interface import SYSTEM_CRITICAL_CLASSES, SYSTEM_CRITICAL_PRIORITY, MoveGate, structurally_movable
from .planner_state import HrlState
from .rebalance import PlanView, Proposal, admissible_positions, finite_scores, greedy_moves
from .resize import ResizePlanner

__all__ = ["HierarchicalPolicy", "due"]


def due(now_s: float, last_s: float | None, period_s: float) -> bool:
    """Whether a periodic action is due at ``now_s``: always when ``period_s`` <= 0; else once per window
    ``[k·period_s, (k+1)·period_s)``: never run (``last_s is None``) → from ``now_s >= period_s`` on (so in
    the simulator, which starts at 0, the first run is one period in); otherwise when ``now_s`` is in a later
    window than ``last_s``."""
    if period_s <= 0:
        return True
    if last_s is None:
        return now_s >= period_s
    return math.floor(now_s / period_s) > math.floor(last_s / period_s)


# ---- the hierarchy -----------------------------------------------------------------------------------------


@dataclass
class HierarchicalPolicy:
    """The high-level policy of hrl-scheduler (see the module docstring). Not frozen: it owns its
    :class:`HrlState` (``state``), updated by every :meth:`plan` call.

    Each :meth:`plan` (one descheduler cycle, or one simulated period):

    1. records the inbound rates of ``snapshot.graph`` in the state (``history_len`` points kept);
    2. when :func:`due` (``intent_period_s``; 0: every call) computes the intent (``intent_policy``: a vector or
       an :class:`~policy.highlevel.intent.Intent` with per-service capacity targets and co-location
       priorities and a move budget) and stores it in the state (``last_intent`` and its detail); between
       periods the last intent holds. The capacity targets reach the autoscaler through the state
       (``state.capacity_targets``), the co-location priorities the low level through
       :meth:`policy.intent.Intent.for_service` (here for moves, and in the plan for the extender);
    3. when ``autoscaler`` is set and :func:`due` (``scale_period_s``): asks it for replica targets, keeps
       those of Deployments in ``workloads`` (``None``: any) outside ``excluded_namespaces``; otherwise the
       plan has no replica opinion (``{}``);
    4. when a ``resizer`` is set and :func:`due` (``resize_period_s``): plans in-place resizes of pods
       (:class:`~policy.highlevel.resize.ResizePlanner`: a pod above its capacity target grows within its node's
       room, back toward its template's request below it), none for a pod it also moves;
    5. when ``rebalance`` and :func:`due` (``moves_period_s``): plans moves. For every movable pod (bound,
       controller-owned, not a DaemonSet/mirror/terminating/system-critical pod, not in an excluded namespace,
       no local storage unless allowed), the candidate nodes are the other nodes that pass
       ``placement.filter`` and :func:`policy.lowlevel.node_admits` and stay strictly below
       ``overload_threshold`` CPU utilisation with the pod added. The low level scores the current node and
       the candidates under the new intent; the pod moves towards the best candidate when it beats the
       current node by more than ``margin`` points; ``gain`` = the difference (0..10). Reason ``overload``
       when the pod's node is above ``overload_threshold``, else ``policy``. Greedy by gain with re-evaluation
       on a virtual cluster after each accepted move (as :class:`policy.highlevel.RebalanceHeuristic`): at most
       one move per pod, ``max_moves_per_service`` per service, ``max_moves`` in all; sorted by gain
       (descending), ties by pod key. A pod is moved only while its service has at least ``min_serving_pods``
       bound, non-terminating pods (default 2: a service's only pod is not evicted, since its requests would
       fail until the replacement is ready; 1 allows it), or when the gate would move it make-before-break
       (``gate.make_before_break(pod)``, :class:`descheduler.loop.MoveExecutor`: the new pod is Ready on the target
       before the old one goes, so no capacity is lost).

    The low level must score a pod already bound to a candidate node without counting that pod twice (its
    own requests and co-location), as :class:`policy.lowlevel.TopologyHeuristic` and
    :class:`policy.lowlevel.LearnedPlacement` do. A pod the low level cannot judge (its ``filter`` or ``score``
    raises, e.g. no service row for its service) is not moved.

    Deterministic for the same inputs and state. Raises ``ValueError`` (naming the field) for out-of-range
    parameters, and when the autoscaler answers something that is not ``{str: int >= 0}``.
    """

    autoscaler: ReplicaAutoscaler | None = None
    intent_policy: IntentPolicy = field(default_factory=UtilizationIntent)
    rebalance: bool = True
    margin: float = 1.0
    overload_threshold: float = 0.85
    max_moves: int = 10
    max_moves_per_service: int = 1
    min_serving_pods: int = 2
    moves_period_s: float = 0.0
    scale_period_s: float = 0.0
    intent_period_s: float = 0.0
    resizer: ResizePlanner | None = None
    resize_period_s: float = 0.0
    history_len: int = 60
    workloads: tuple[str, ...] | None = None
    excluded_namespaces: tuple[str, ...] = ("kube-system",)
    evict_local_storage_pods: bool = False
    name: str = "hierarchical"
    state: HrlState = field(default_factory=HrlState)

    def __post_init__(self) -> None:
        def bad(f: str, v: object, want: str) -> ValueError:
            return ValueError(f"HierarchicalPolicy.{f}: must be {want} (got {v!r})")

        if not (math.isfinite(self.margin) and 0.0 <= self.margin <= 10.0):
            raise bad("margin", self.margin, "in [0, 10] score points")
        if not (math.isfinite(self.overload_threshold) and 0.0 < self.overload_threshold <= 1.0):
            raise bad("overload_threshold", self.overload_threshold, "in (0, 1]")
        if self.max_moves < 0:
            raise bad("max_moves", self.max_moves, ">= 0")
        if self.max_moves_per_service < 1:
            raise bad("max_moves_per_service", self.max_moves_per_service, ">= 1")
        if self.min_serving_pods < 1:
            raise bad("min_serving_pods", self.min_serving_pods, ">= 1")
        for f in ("moves_period_s", "scale_period_s", "intent_period_s", "resize_period_s"):
            v = getattr(self, f)
            if not (math.isfinite(v) and v >= 0):
                raise bad(f, v, "a number of seconds >= 0")
        if self.history_len < 1:
            raise bad("history_len", self.history_len, ">= 1")
        self.excluded_namespaces = tuple(self.excluded_namespaces)
        if self.workloads is not None:
            self.workloads = tuple(self.workloads)

    # ---- state -----------------------------------------------------------------------------------------

    def dump_state(self) -> dict[str, Any]:
        """The state as JSON (for the descheduler's state file)."""
        return self.state.to_json()

    def load_state(self, doc: Any) -> None:
        """Replace the state with :meth:`HrlState.from_json` of ``doc``. Raises ValueError for a bad document."""
        self.state = HrlState.from_json(doc)

    # ---- planning --------------------------------------------------------------------------------------

    def movable(self, pod: PodInfo) -> bool:
        """Whether the planner considers moving ``pod`` at all (see the class docstring, step 4)."""
        return (
            structurally_movable(pod)
            and pod.priority < SYSTEM_CRITICAL_PRIORITY
            and pod.priority_class_name not in SYSTEM_CRITICAL_CLASSES
            and pod.namespace not in self.excluded_namespaces
            and (self.evict_local_storage_pods or not pod.local_storage)
        )

    def plan(
        self,
        snapshot: ClusterSnapshot,
        index: ClusterIndex,
        placement: PlacementPolicy,
        *,
        gate: MoveGate | None = None,
    ) -> Plan:
        """One period's plan (see the class docstring); updates :attr:`state`. ``gate``: the descheduler's
        guards and evictor, consulted before each move is accepted (:func:`policy.highlevel.greedy_moves`).

        Complexity of the moves per cycle (P pods, N nodes, M moves): one proposal per movable pod, each
        scoring the pod's current node and its candidates: the nodes where ``placement.score`` may be above 0
        when the low level says which (``support(pod, index)``, as :class:`policy.lowlevel.TopologyHeuristic`
        does: the h nodes hosting the pod's neighbours, O(d · N / 64 + h) per pod), else every other node
        (O(N) per pod, so O(P · N) per cycle); plus O(M · (N + S)) for the planning view."""
        st = self.state
        now = float(snapshot.taken_at_s)
        st.record_rates(snapshot.graph, now, self.history_len)
        record = getattr(self.intent_policy, "record", None)
        if record is not None:  # a policy that keeps its own history records every cycle
            record(snapshot, index, st)
        if st.last_intent is None or due(now, st.last_intent_s, self.intent_period_s):
            it = as_intent(self.intent_policy.intent(snapshot, index, st))
            if len(it.values) != len(INTENT_SPEC):
                raise ValueError(f"intent: expected {len(INTENT_SPEC)} finite numbers, got {it.values!r}")
            st.last_intent = it.values
            st.last_intent_s = now
            st.capacity_targets = dict(it.capacity_target)
            st.colocation_priority = dict(it.colocation_priority)
            st.move_budget_frac = it.move_budget_frac
        intent = Intent(
            st.last_intent,
            capacity_target=st.capacity_targets,
            colocation_priority=st.colocation_priority,
            move_budget_frac=st.move_budget_frac,
        )

        targets: dict[str, int] = {}
        if self.autoscaler is not None and due(now, st.last_targets_s, self.scale_period_s):
            targets = self._targets(self.autoscaler.replica_targets(snapshot, st))
            st.last_targets_s = now
            st.last_targets = dict(targets)

        moves: tuple[Move, ...] = ()
        if self.rebalance and due(now, st.last_moves_s, self.moves_period_s):
            budget = int(round(st.move_budget_frac * self.max_moves))
            moves = self._moves(snapshot, index, placement, intent, budget, gate)
            st.last_moves_s = now
        resizes = ()
        if self.resizer is not None and due(now, st.last_resizes_s, self.resize_period_s):
            moved = {m.pod for m in moves}
            resizes = tuple(r for r in self.resizer.plan(snapshot, st) if r.pod not in moved)
            st.last_resizes_s = now
        return Plan(moves=moves, replica_targets=targets, resizes=resizes, intent=intent)

    def _targets(self, raw: Mapping[str, Any]) -> dict[str, int]:
        allowed = None if self.workloads is None else set(self.workloads)
        out: dict[str, int] = {}
        for key, v in sorted(dict(raw).items()):
            if not isinstance(key, str) or key.count("/") != 1:
                raise ValueError(f"replica_targets: key {key!r} is not namespace/name")
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or int(v) < 0:
                raise ValueError(f"replica_targets[{key!r}]: expected an integer >= 0, got {v!r}")
            if key.split("/", 1)[0] in self.excluded_namespaces or (allowed is not None and key not in allowed):
                continue
            out[key] = int(v)
        return out

    def _moves(
        self,
        snapshot: ClusterSnapshot,
        index: ClusterIndex,
        placement: PlacementPolicy,
        intent: Intent,
        max_moves: int | None = None,
        gate: MoveGate | None = None,
    ) -> tuple[Move, ...]:
        max_moves = self.max_moves if max_moves is None else max_moves
        if max_moves == 0 or len(snapshot.nodes) < 2:
            return ()
        bound: dict[str, int] = {}
        for p in snapshot.pods:
            if p.node_name is not None and not p.terminating:
                bound[p.service] = bound.get(p.service, 0) + 1
        # a service's only serving pod moves only make-before-break (its requests would fail until an evicted
        # pod's replacement is Ready)
        mbb = getattr(gate, "make_before_break", None) if gate is not None else None
        pods = sorted(
            (
                p
                for p in snapshot.pods
                if self.movable(p)
                and p.node_name in index.node_pos
                and (bound.get(p.service, 0) >= self.min_serving_pods or (mbb is not None and mbb(p)))
            ),
            key=lambda p: p.key,
        )
        return greedy_moves(
            pods,
            index,
            lambda key, view: self._propose(key, view, placement, intent),
            max_moves,
            self.max_moves_per_service,
            gate=gate,
        )

    def _propose(
        self,
        pod_key: str,
        view: PlanView,
        placement: PlacementPolicy,
        intent: Intent,
    ) -> Proposal | None:
        index = view.index
        pod = view.pods.get(pod_key)
        if pod is None or pod.node_name is None or pod.node_name not in index.node_pos:
            return None
        support = getattr(placement, "support", None)
        try:
            if support is not None:  # the low level scores 0 elsewhere: no other node beats the current one there
                positions = np.asarray(support(pod, index), dtype=np.int64)
            else:
                positions = np.arange(len(index.node_names), dtype=np.int64)
            keep = admissible_positions(pod, positions, index, placement, self.overload_threshold)
        except Exception:  # noqa: BLE001 - a low level that cannot judge the pod gives no basis for a move
            return None
        names = index.node_names
        targets = [names[i] for i in keep.tolist()]
        if not targets:
            return None
        try:
            pod_intent = intent.for_service(pod.service)
            scores = finite_scores(placement.score(pod, [pod.node_name, *targets], index, pod_intent))
        except Exception:  # noqa: BLE001 - e.g. no service row for the pod: it stays where it is
            return None
        if scores.shape != (len(targets) + 1,):
            raise ValueError(
                f"placement {getattr(placement, 'name', placement)!r}: score returned shape "
                f"{scores.shape} for {len(targets) + 1} candidates"
            )
        cur = float(scores[0])
        if not math.isfinite(cur):
            return None
        j = int(np.argmax(scores[1:]))
        best = float(scores[1 + j])
        if not best > cur + self.margin:
            return None
        gain = best - cur
        here = index.node_pos[pod.node_name]
        reason = "overload" if view.util[here] > self.overload_threshold else "policy"
        return Proposal((-gain, pod.key), Move(pod.key, pod.node_name, targets[j], reason, gain))
