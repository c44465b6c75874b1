"""One descheduling cycle, and the periodic loop around it.

A cycle (:func:`run_once`)::

    observe() once -> snapshot -> ClusterIndex -> loop detection (workloads whose pods came back: on hold)
    node loss (descheduler.nodeloss): the pods of nodes tainted unreachable / not-ready for nodeLoss.afterSeconds,
                             each through its guards, the targeted re-read and the Eviction API (not the caps)
    planner.plan(snapshot, index, placement, gate=...)      planning and evicting interleave (MoveGate):
        may_move(pod)        O(1), no API call: caps of the pod's node / namespace, refused or held workload,
                             cooldown; a pod that may not move is not even proposed
        admit(move)          the cheap guards and the feasibility of the target on the planning view (with
                             kube-scheduler's predicted placement): blocked -> no API call;
                             then the targeted re-read (descheduler.reread: GET the pod, its PDB(s) and the pods
                             they cover, its owner, the target node):
                               pod gone -> not_found; re-created / moved since planning -> skipped
                             every guard on the fresh objects: any blocker -> blocked (with every reason)
                             evictor.evict(pod): evicted / dry_run -> counted in the ledger (caps, PDBs),
                               recorded in the history (cooldown, loop detection), an Event on the pod;
                               refused (429) -> that workload is skipped for the rest of the cycle;
                               not_found / error -> counted, nothing else
        a blocked or failed move leaves its service's slot free: the planner proposes its next best pod;
        the total cap reached -> the cycle stops planning and evicting (CycleStop "total_cap", reported once)
    then, with a scaler and ``scaling.enabled``, the plan's replica targets, from the same observation:
        excluded namespace / not a Deployment -> blocked;  not in the cluster -> not_found
        bound_target(current, planned, minReplicas, maxReplicas, maxStepPerCycle) == current -> unchanged
        scaler.scale(workload, target)        scaled (an Event on the Deployment) / unchanged / refused_hpa /
                                              not_found / error / dry_run

    then, with a resizer and ``resize.enabled``, the plan's in-place resizes (after the scaling):
        :func:`descheduler.resize.execute_resizes`: observe() once more; per resize, in plan order: excluded
        namespace / not a Deployment's pod -> blocked; gone -> not_found; not running -> not_running; re-created or
        its request changed -> changed; cooldown; maxPerCycle -> capped; bounds -> unchanged; node too full ->
        no_room; resizer.resize(order): resized / refused_vpa (a VPA owns it: left alone) / ... / dry_run

A planner without the ``gate`` keyword (:func:`policy.highlevel.planner_accepts_gate`) plans first; its moves
then go through the same gate in plan order.

A dry run is the same cycle with :class:`~descheduler.evict.DryRunEvictor` (``config.dry_run`` forces it)
and the scaler's and the resizer's read-only twins (:func:`descheduler.scale.dry_run_scaler`,
:func:`descheduler.resize.dry_run_resizer`): the same plan, the same guards, the same re-reads, the same ledger,
the same bounds and caps; only the evictor, the scaler, the resizer, the events and the persistent history differ
(a dry run never writes the history: it changes nothing).

Fail closed: if a targeted re-read fails or the history cannot be saved, the cycle stops there.

API requests per cycle against a live cluster (``descheduler.kube``): the observation (one paginated LIST per
kind in CronJob mode, none in interval mode after start-up: a watch cache), plus per eviction attempted a GET
of the pod, of each covering PDB (and a label-selected LIST of its pods in CronJob mode), of the owner and of
the target node, the eviction, and an Event; a move blocked before the re-read costs nothing.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Literal, cast

from policy.highlevel import (
    Admission,
    GatedPlanner,
    HighLevelPolicy,
    MoveCostModel,
    MoveEconomics,
    PlanView,
    SchedulerModel,
    TrafficModel,
    app_use_by_node,
    planner_accepts_gate,
    traffic_of,
)
from policy.index import ClusterIndex
from policy.intent import Intent, PendingMove
from policy.lowlevel import INTENT_SPEC, PlacementPolicy
from policy.state import ClusterSnapshot, Move, PodDisruptionBudgetInfo, PodInfo, WorkloadInfo

from .config import DeschedulerConfiguration, cost_model_from_config
from .events import EventRecorder, ObjectRef
from .evict import DryRunEvictor, Evictor, safe_evict
from .guards import (
    CHEAP_GUARDS,
    GUARD_NAMES,
    NOT_READ,
    Blocker,
    CycleLedger,
    EvictionHistory,
    GuardContext,
    HistoryError,
    LoopHold,
    PdbView,
    check_guards,
    detect_loops,
)
from .nodeloss import NODE_LOSS_GUARDS, LostNode, node_loss_moves
from .reread import READABLE_OWNER_KINDS, ClusterReader, OwnerInfo, SnapshotReader
from .resize import RESIZE_OUTCOMES, Resizer, ResizeResult, dry_run_resizer, execute_resizes
from .scale import SCALE_OUTCOMES, Scaler, ScaleResult, bound_target, dry_run_scaler, safe_scale
from .surge import ApiMover, SurgeBook, SurgeDriver, SurgeEvent

__all__ = [
    "MoveOutcome",
    "REPORT_OUTCOMES",
    "BLOCKER_NAMES",
    "MOVE_PATHS",
    "STOP_KINDS",
    "MoveResult",
    "CycleStop",
    "CycleReport",
    "MoveExecutor",
    "CycleDeps",
    "run_once",
    "run_forever",
]

MoveOutcome = Literal["evicted", "surged", "refused", "not_found", "error", "dry_run", "blocked", "skipped"]
#: Every per-move outcome of a cycle: the evictor's five, ``surged`` (taken as a make-before-break move,
#: :mod:`descheduler.surge`: announced to the extender, or its Deployment already scaled up by one), ``blocked`` (a
#: guard, the cost model or the surge rules said no) and ``skipped`` (the pod changed since planning, or its re-read
#: failed).
REPORT_OUTCOMES: tuple[str, ...] = (
    "evicted",
    "surged",
    "refused",
    "not_found",
    "error",
    "dry_run",
    "blocked",
    "skipped",
)
#: The names a move is blocked by: the guards (:data:`descheduler.guards.GUARD_NAMES`), ``cost`` (its predicted gain
#: does not exceed its predicted cost, :class:`policy.highlevel.MoveCostModel`) and ``surge`` (no make-before-break
#: move is possible and ``moves.fallback`` is ``skip``, or the fallback would evict a service's only serving pod).
BLOCKER_NAMES: tuple[str, ...] = (*GUARD_NAMES, "cost", "surge")
#: How a move is made: ``surge`` (make-before-break) or ``evict`` (the Eviction API).
MOVE_PATHS: tuple[str, ...] = ("surge", "evict")
#: The guards a make-before-break move does not run: it evicts nothing, so the PodDisruptionBudget's current budget
#: and this cycle's 429s do not apply (:func:`descheduler.surge.surge_pdb_blocker` keeps the budget instead).
SURGE_SKIPPED_GUARDS: tuple[str, ...] = ("pdb", "pdb_refused")

StopKind = Literal["total_cap", "reread_failed", "history_unwritable", "interrupted"]
#: Why a cycle stopped before the end of its plan (the typed limit outcome, and the two fail-closed stops).
STOP_KINDS: tuple[str, ...] = ("total_cap", "reread_failed", "history_unwritable", "interrupted")


@dataclass(frozen=True, slots=True)
class MoveResult:
    """What became of one planned move: ``outcome`` (one of :data:`REPORT_OUTCOMES`), the guards that
    blocked it (every one, not just the first; names from :data:`BLOCKER_NAMES`), a one-line ``message``, the
    ``path`` it took or would have taken (:data:`MOVE_PATHS`; ``""`` when none was chosen), ``fallback``: why it
    could not be made make-before-break (:data:`descheduler.surge.SURGE_REFUSALS`; ``""`` when it was, or when
    ``moves.strategy`` is ``evict``), and its ``economics`` (:class:`policy.highlevel.MoveEconomics`, ``None`` without
    a cost model)."""

    move: Move
    outcome: MoveOutcome
    blockers: tuple[Blocker, ...] = ()
    message: str = ""
    path: str = ""
    fallback: str = ""
    economics: MoveEconomics | None = None

    @property
    def blocked_by(self) -> tuple[str, ...]:
        """Names of the blocking guards."""
        return tuple(b.guard for b in self.blockers)

    def to_json(self) -> dict[str, Any]:
        return {
            **_move_json(self.move),
            "outcome": self.outcome,
            "blockers": [{"guard": b.guard, "reason": b.reason} for b in self.blockers],
            "message": self.message,
            "path": self.path,
            "fallback": self.fallback,
            "economics": None if self.economics is None else self.economics.to_json(),
        }


@dataclass(frozen=True, slots=True)
class CycleStop:
    """Why the cycle stopped planning and evicting early (reported once, not per move): ``kind`` (one of
    :data:`STOP_KINDS`: ``total_cap`` is the typed limit outcome of ``caps.total``, as kubernetes-sigs/descheduler's
    ``EvictionTotalLimitError``), a one-line ``message``, and ``not_attempted``: planned moves never looked at
    (a planner that takes a gate plans none after the stop, so 0 there)."""

    kind: StopKind
    message: str
    not_attempted: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, "not_attempted": self.not_attempted}


@dataclass(frozen=True)
class CycleReport:
    """The result of one cycle.

    ``started_at_s``: the cycle's ``now_s`` (unix s, or simulated time); ``duration_s``: wall time;
    ``planned_moves``: the moves the cycle looked at, in the order it did (with a gate: as the planner proposed
    them; blocked ones included); ``results``: one :class:`MoveResult` per planned move, same order;
    ``counts``: outcome → number of moves (every outcome of :data:`REPORT_OUTCOMES` present);
    ``blocked_by_guard``: guard → moves it blocked (every guard present); ``replica_targets`` / ``intent``
    (:class:`policy.intent.Intent`: the vector, ``colocation_priority`` and ``capacity_targets``): from the plan;
    ``nodes`` / ``pods``: size of the observed snapshot; ``scaling``: one
    :class:`~descheduler.scale.ScaleResult` per replica target acted on, in key order (empty without a scaler);
    ``resizes``: one :class:`~descheduler.resize.ResizeResult` per planned in-place resize, in plan order (empty
    without a resizer or with ``resize.enabled`` false);
    ``stop``: why the cycle stopped early (``None``: it did not); ``skipped_by_guard``: pods the cheap guards
    kept from being proposed at all, by guard (no API call); ``loop_holds``: workloads on hold after an eviction
    loop (new this cycle or still held); ``reads``: targeted re-reads made, by kind; ``cpu_s``: the process's CPU
    time during the cycle (user + system); ``surges``: what happened to make-before-break moves this cycle
    (:class:`descheduler.surge.SurgeEvent`: started, draining, completed, aborted with a reason);
    ``pending_moves``: those still surging after the cycle, as the records the extender steers their new pods with
    (:class:`policy.intent.PendingMove`, published next to the intent); :attr:`move_counts`: the moves by outcome;
    ``lost_nodes``: nodes lost for at least ``nodeLoss.afterSeconds`` (:mod:`descheduler.nodeloss`), ``node_loss``:
    one :class:`MoveResult` per node-loss eviction tried (not in ``results``, ``counts`` or ``move_counts``),
    ``node_loss_held``: why none was tried although nodes are lost (``""``: nothing held them),
    ``node_loss_skipped``: pods on lost nodes left alone, by reason; :attr:`node_loss_counts`.
    """

    started_at_s: float
    dry_run: bool
    planner: str
    planned_moves: tuple[Move, ...]
    results: tuple[MoveResult, ...]
    counts: Mapping[str, int]
    blocked_by_guard: Mapping[str, int]
    replica_targets: Mapping[str, int]
    intent: Intent
    duration_s: float
    nodes: int = 0
    pods: int = 0
    warnings: tuple[str, ...] = field(default=())
    scaling: tuple[ScaleResult, ...] = field(default=())
    resizes: tuple[ResizeResult, ...] = field(default=())
    stop: CycleStop | None = None
    skipped_by_guard: Mapping[str, int] = field(default_factory=dict)
    loop_holds: tuple[LoopHold, ...] = field(default=())
    new_loop_holds: int = 0
    reads: Mapping[str, int] = field(default_factory=dict)
    cpu_s: float = 0.0
    surges: tuple[SurgeEvent, ...] = field(default=())
    pending_moves: tuple[PendingMove, ...] = field(default=())
    lost_nodes: tuple[LostNode, ...] = field(default=())
    node_loss: tuple[MoveResult, ...] = field(default=())
    node_loss_held: str = ""
    node_loss_skipped: Mapping[str, int] = field(default_factory=dict)

    @property
    def node_loss_counts(self) -> dict[str, int]:
        """Node-loss evictions (:mod:`descheduler.nodeloss`) by outcome (every outcome of :data:`REPORT_OUTCOMES`)."""
        c: Counter[str] = Counter(r.outcome for r in self.node_loss)
        return {o: c.get(o, 0) for o in REPORT_OUTCOMES}

    @property
    def move_counts(self) -> dict[str, Any]:
        """What the cycle's moves came to: ``accepted`` (planned moves taken as make-before-break moves),
        ``announced`` (their pending-move records published, the scale-up to follow), ``surged`` (Deployments scaled up
        by one: the surge began), ``completed`` / ``aborted``
        (make-before-break moves finished this cycle, ``aborted_by_reason``: :data:`descheduler.surge.ABORT_REASONS`),
        ``evicted`` (moves made by the Eviction API), ``refused`` (planned moves not made, ``refused_by_reason``: the
        first blocker's name, or ``eviction_refused`` for a PodDisruptionBudget's 429, or the outcome for
        ``not_found`` / ``skipped`` / ``error``), ``fallback_by_reason``: moves that could not be made
        make-before-break (:data:`descheduler.surge.SURGE_REFUSALS`), whichever way they went then, ``dry_run``."""
        refused: Counter[str] = Counter()
        fallback: Counter[str] = Counter(r.fallback for r in self.results if r.fallback)
        for r in self.results:
            if r.outcome == "blocked":
                refused[r.blockers[0].guard if r.blockers else "blocked"] += 1
            elif r.outcome == "refused":
                refused["eviction_refused"] += 1
            elif r.outcome in ("not_found", "skipped", "error"):
                refused[r.outcome] += 1
        aborted = Counter(e.reason for e in self.surges if e.outcome == "aborted")
        return {
            "accepted": sum(1 for r in self.results if r.outcome == "surged"),
            "announced": sum(1 for e in self.surges if e.outcome == "announced"),
            "surged": sum(1 for e in self.surges if e.outcome == "started"),
            "completed": sum(1 for e in self.surges if e.outcome == "completed"),
            "aborted": sum(aborted.values()),
            "evicted": sum(1 for r in self.results if r.outcome == "evicted"),
            "refused": sum(refused.values()),
            "dry_run": sum(1 for r in self.results if r.outcome == "dry_run"),
            "aborted_by_reason": dict(sorted(aborted.items())),
            "refused_by_reason": dict(sorted(refused.items())),
            "fallback_by_reason": dict(sorted(fallback.items())),
        }

    @property
    def evictions(self) -> int:
        """Pods actually evicted this cycle (0 in a dry run)."""
        return self.counts.get("evicted", 0)

    @property
    def scale_counts(self) -> dict[str, int]:
        """Scaling outcome → number of workloads (every outcome of :data:`descheduler.scale.SCALE_OUTCOMES`)."""
        c: Counter[str] = Counter(r.outcome for r in self.scaling)
        return {o: c.get(o, 0) for o in SCALE_OUTCOMES}

    @property
    def resize_counts(self) -> dict[str, int]:
        """Resize outcome → number of pods (every outcome of :data:`descheduler.resize.RESIZE_OUTCOMES`)."""
        c: Counter[str] = Counter(r.outcome for r in self.resizes)
        return {o: c.get(o, 0) for o in RESIZE_OUTCOMES}

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict with stable keys (units in the names)."""
        names = [n for n, _doc, _d in INTENT_SPEC]
        return {
            "started_at_s": self.started_at_s,
            "duration_s": round(self.duration_s, 6),
            "cpu_s": round(self.cpu_s, 6),
            "dry_run": self.dry_run,
            "planner": self.planner,
            "nodes": self.nodes,
            "pods": self.pods,
            "planned_moves": [_move_json(m) for m in self.planned_moves],
            "results": [r.to_json() for r in self.results],
            "counts": dict(self.counts),
            "evictions": self.evictions,
            "blocked_by_guard": dict(self.blocked_by_guard),
            "skipped_by_guard": dict(self.skipped_by_guard),
            "stop": None if self.stop is None else self.stop.to_json(),
            "loop_holds": [
                {"workload": h.workload, "node": h.node, "pod": h.pod, "until_s": h.until_s} for h in self.loop_holds
            ],
            "reads": dict(self.reads),
            "replica_targets": dict(sorted(self.replica_targets.items())),
            "intent": list(self.intent.values),
            "intent_names": names[: len(self.intent.values)],
            "colocation_priority": dict(sorted(self.intent.colocation_priority.items())),
            "capacity_targets": dict(sorted(self.intent.capacity_target.items())),
            "scaling": [r.to_json() for r in self.scaling],
            "scale_counts": self.scale_counts,
            "resizes": [r.to_json() for r in self.resizes],
            "resize_counts": self.resize_counts,
            "surges": [e.to_json() for e in self.surges],
            "pending_moves": [m.to_json() for m in self.pending_moves],
            "move_counts": self.move_counts,
            "lost_nodes": [{"node": x.name, "taint": x.taint, "since_s": x.since_s} for x in self.lost_nodes],
            "node_loss": [r.to_json() for r in self.node_loss],
            "node_loss_counts": self.node_loss_counts,
            "node_loss_held": self.node_loss_held,
            "node_loss_skipped": dict(self.node_loss_skipped),
            "warnings": list(self.warnings),
        }


def _move_json(m: Move) -> dict[str, Any]:
    return {
        "pod": m.pod,
        "from_node": m.from_node,
        "to_node": m.to_node,
        "reason": m.reason,
        "gain": round(float(m.gain), 6),
    }


def _evict_reason(m: Move) -> str:
    to = f" towards {m.to_node}" if m.to_node else ""
    return f"hrl-descheduler: {m.reason} move off {m.from_node}{to} (gain {m.gain:.2f})"


def _pod_ref(p: PodInfo) -> ObjectRef:
    return ObjectRef("v1", "Pod", p.namespace, p.name, p.uid)


class MoveExecutor:
    """The descheduler's :class:`policy.highlevel.MoveGate`: the guards, the targeted re-read, the evictor, the
    ledger, the history and the events of one cycle (see the module docstring). ``results`` and ``stop`` are
    what the report shows; ``view`` follows the accepted moves (the planning view the feasibility guard reads).
    """

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        index: ClusterIndex,
        config: DeschedulerConfiguration,
        history: EvictionHistory | None,
        now_s: float,
        placement: PlacementPolicy,
        reader: ClusterReader,
        evictor: Evictor,
        *,
        recorder: EventRecorder | None = None,
        holds: Mapping[str, str] | None = None,
        prediction: Any = None,
        dry_run: bool = False,
        surges: SurgeDriver | None = None,
        cost_model: MoveCostModel | None = None,
        interrupt: threading.Event | None = None,
    ):
        self.snapshot = snapshot
        self.interrupt = interrupt
        self.view = PlanView.of(index)
        self.config = config
        self.history = history
        self.now_s = now_s
        self.placement = placement
        self.reader = reader
        self.evictor = evictor
        self.recorder = recorder
        self.holds = dict(holds or {})
        self.prediction = prediction
        self.dry_run = dry_run
        self.surges = surges if surges is not None else SurgeDriver(SurgeBook(), None, config, snapshot, now_s)
        self.cost_model = cost_model
        self._traffic: TrafficModel | None = None
        #: pods evicted off lost nodes this cycle (terminating now: the planner's proposals skip them)
        self.node_loss_evicted: set[str] = set()
        self.ledger = CycleLedger()
        self.results: list[MoveResult] = []
        self.stop: CycleStop | None = None
        self.skipped: Counter = Counter()
        self.reads: Counter = Counter()
        self._pdbs_by_ns: dict[str, list[PodDisruptionBudgetInfo]] = {}
        for b in snapshot.pdbs:
            self._pdbs_by_ns.setdefault(b.namespace, []).append(b)
        self._cooldown_since = now_s - config.cooldown_seconds if config.cooldown_seconds > 0 else None
        caps = config.caps
        if caps.total is not None and caps.total <= 0:
            self.stop = CycleStop("total_cap", f"total cap reached (0/{caps.total} this cycle)")

    # ---- MoveGate ----------------------------------------------------------------------------------------

    @property
    def exhausted(self) -> bool:
        """True once the cycle stopped (total cap, failed re-read, unwritable history, interrupted)."""
        self._check_interrupt()
        return self.stop is not None

    def may_move(self, pod: PodInfo) -> bool:
        """O(1), no API call: the cheap guards that say a pod cannot go this cycle (counted in
        ``skipped_by_guard``, not reported per move)."""
        why = self._cheap(pod)
        if why is not None:
            self.skipped[why] += 1
            return False
        return True

    def _cheap(self, pod: PodInfo) -> str | None:
        if self.stop is not None:
            return "stopped"
        if pod.node_name is None:
            return "unbound"
        if pod.terminating or pod.key in self.node_loss_evicted:
            return "terminating"
        if pod.owner is None:
            return "no_controller"
        caps = self.config.caps
        led = self.ledger
        if caps.per_node is not None and led.per_node[pod.node_name] >= caps.per_node:
            return "cap_node"
        if caps.per_namespace is not None and led.per_namespace[pod.namespace] >= caps.per_namespace:
            return "cap_namespace"
        wl = f"{pod.namespace}/{pod.owner.kind}/{pod.owner.name}"
        if wl in led.refused_workloads:
            return "pdb_refused"
        if wl in self.holds:
            return "loop_hold"
        if (wl, pod.node_name) in led.evicted_from:
            return "cooldown"
        h = self.history
        if h is not None and self._cooldown_since is not None:
            if h.last_eviction(wl, pod.node_name, self._cooldown_since) is not None:
                return "cooldown"
        return None

    def make_before_break(self, pod: PodInfo) -> bool:
        """Whether ``pod`` would be moved make-before-break (no request and no capacity lost), from the observation
        alone (no API call): the planner may then propose a service's only serving pod."""
        return self.surges.unavailable(pod) is None

    def admit(self, move: Move) -> Admission:
        """The path (make-before-break where possible, else ``moves.fallback``), the guards, the cost model, the
        targeted re-read, the guards again on the fresh objects, then the surge or the eviction (see the module
        docstring)."""
        self._check_interrupt()
        if self.stop is not None:
            return "stop"
        pod = self.view.pods.get(move.pod)
        if pod is None:
            self.results.append(MoveResult(move, "not_found", (), f"{move.pod} is not in the observed cluster"))
            return "reject"
        why_not = self.surges.unavailable(pod) if move.to_node is not None else "no_target"
        path = "surge" if why_not is None else "evict"
        fallback = "" if why_not in (None, "strategy") else str(why_not)
        if fallback and self.config.moves.fallback == "skip":
            return self._block(move, "surge", f"no make-before-break move ({fallback}) and moves.fallback is skip")
        skip = SURGE_SKIPPED_GUARDS if path == "surge" else ()
        ctx = self._context(move, pod, steered=path == "surge")
        blockers = tuple(check_guards(pod, ctx, only=(*CHEAP_GUARDS, "infeasible"), skip=skip))
        if blockers:
            return self._blocked(move, blockers, path, fallback)
        econ = self._price(pod, move, path)
        if econ is not None and not econ.worth:
            return self._block(move, "cost", econ.describe(), path, fallback, econ)
        try:
            fresh = self._reread(move, pod)
        except Exception as exc:  # noqa: BLE001 - fail closed: no eviction without a fresh view
            detail = " ".join(str(exc).split())[:300]
            why = f"cycle stopped: could not re-read the cluster: {type(exc).__name__}: {detail}"
            self.results.append(MoveResult(move, "skipped", (), why, path, fallback))
            self.stop = CycleStop("reread_failed", why)
            return "stop"
        if isinstance(fresh, MoveResult):
            self.results.append(replace(fresh, path=path, fallback=fallback))
            return "reject"
        fpod, ctx = fresh
        ctx = replace(ctx, steered=path == "surge")
        blockers = tuple(check_guards(fpod, ctx, skip=skip))
        if blockers:
            return self._blocked(move, blockers, path, fallback)
        if path == "surge":
            return self._surge(move, fpod, ctx, econ)
        return self._evict(move, fpod, ctx, econ, fallback)

    # ---- internals ---------------------------------------------------------------------------------------

    def _context(self, move: Move, pod: PodInfo, **fresh: Any) -> GuardContext:
        return GuardContext(
            self.snapshot,
            self.config,
            self.ledger,
            self.history,
            self.now_s,
            self.placement,
            self.view.index,
            move.to_node,
            pdbs=fresh.get("pdbs", ()),
            owner=fresh.get("owner", NOT_READ),
            target=fresh.get("target", NOT_READ),
            holds=self.holds,
            prediction=self.prediction,
            steered=fresh.get("steered", False),
        )

    def _reread(self, move: Move, planned: PodInfo) -> MoveResult | tuple[PodInfo, GuardContext]:
        r = self.reader
        self.reads["pod"] += 1
        pod = r.read_pod(planned.namespace, planned.name)
        if pod is None:
            return MoveResult(move, "not_found", (), f"{move.pod} is gone since planning")
        if planned.uid and pod.uid and planned.uid != pod.uid:
            return MoveResult(move, "skipped", (), f"{move.pod} was re-created since planning")
        if pod.node_name != move.from_node:
            return MoveResult(
                move, "skipped", (), f"{move.pod} moved from {move.from_node} to {pod.node_name} since planning"
            )
        if planned.resource_version and pod.resource_version and planned.resource_version != pod.resource_version:
            if pod.labels != planned.labels or pod.owner != planned.owner or pod.terminating != planned.terminating:
                return MoveResult(move, "skipped", (), f"{move.pod} changed since planning (labels, owner or deletion)")
        views = []
        for b in self._pdbs_by_ns.get(pod.namespace, ()):
            if not b.covers(pod):
                continue
            self.reads["pdb"] += 1
            fb = r.read_pdb(b.namespace, b.name)
            if fb is None:
                continue
            self.reads["pods_covered"] += 1
            covered = tuple(r.pods_covered(fb))
            views.append(PdbView(fb, covered, None))
        owner: Any = NOT_READ
        if pod.owner is not None:
            if pod.owner.kind in READABLE_OWNER_KINDS:
                self.reads["owner"] += 1
                owner = r.read_owner(pod.namespace, pod.owner)
            else:
                owner = None
        views = [PdbView(v.pdb, v.pods, self._expected_scale(v, owner)) for v in views]
        target: Any = NOT_READ
        if move.to_node is not None:
            self.reads["node"] += 1
            target = r.read_node(move.to_node)
        return pod, self._context(move, pod, pdbs=tuple(views), owner=owner, target=target)

    def _expected_scale(self, v: PdbView, owner: Any) -> int | None:
        """The sum of ``spec.replicas`` of the controllers of the budget's pods: the re-read owner (or its
        Deployment, from the observation, for a ReplicaSet a Deployment controls) for the evicted pod's
        controller, the observed workloads for the others; ``None`` when one is unknown."""
        total = 0
        seen: set[tuple[str, str]] = set()
        for p in v.pods:
            if p.owner is None:
                continue
            k = (p.owner.kind, p.owner.name)
            if k in seen:
                continue
            seen.add(k)
            n = None
            if isinstance(owner, OwnerInfo) and (owner.kind, owner.name) == k:
                n = owner.replicas
                if owner.owner is not None and owner.owner.kind == "Deployment":
                    w = next(
                        (
                            w
                            for w in self.snapshot.workloads
                            if w.kind == "Deployment" and w.namespace == p.namespace and w.name == owner.owner.name
                        ),
                        None,
                    )
                    n = w.replicas if w is not None else None
            else:
                w = next(
                    (w for w in self.snapshot.workloads if w.namespace == p.namespace and w.service == p.service), None
                )
                n = w.replicas if w is not None else None
            if n is None:
                return None
            total += n
        return total

    def _blocked(self, move: Move, blockers: tuple[Blocker, ...], path: str, fallback: str) -> Admission:
        self.results.append(MoveResult(move, "blocked", blockers, "; ".join(str(b) for b in blockers), path, fallback))
        return "reject"

    def _block(
        self,
        move: Move,
        name: str,
        reason: str,
        path: str = "",
        fallback: str = "",
        econ: MoveEconomics | None = None,
    ) -> Admission:
        b = Blocker(name, reason)
        self.results.append(MoveResult(move, "blocked", (b,), str(b), path, fallback, econ))
        return "reject"

    def _price(self, pod: PodInfo, move: Move, path: str) -> MoveEconomics | None:
        """The cost model's verdict on moving ``pod`` by ``path`` on the planning view (``None``: no model)."""
        model = self.cost_model
        if model is None:
            return None
        if move.to_node is None:
            return model.unpriced("surge" if path == "surge" else "evict", "the move names no target node")
        snap = self.view.index.snapshot
        if self._traffic is None:
            self._traffic = traffic_of(snap.graph)
        return model.evaluate(
            pod,
            move.to_node,
            "surge" if path == "surge" else "evict",
            snap,
            traffic=self._traffic,
            nodes=self.view.nodes,
            app_use_m=app_use_by_node(snap),
            only_serving_pod=self._serving(pod) <= 1,
        )

    def _serving(self, pod: PodInfo) -> int:
        """The serving pods of ``pod``'s service on the planning view, ``pod`` included: bound, not terminating, not
        known to be unready."""
        return sum(
            1
            for p in self.view.pods.values()
            if p.service == pod.service and p.namespace == pod.namespace and p.node_name is not None
            and not p.terminating and p.ready is not False
        )  # fmt: skip

    def _serving_enough(self, pod: PodInfo) -> bool:
        """Whether the service has ``planner.minServingPods`` serving pods counting ``pod``: the eviction fallback
        never takes a service's only serving pod when that is >= 2."""
        return self._serving(pod) >= self.config.planner.min_serving_pods

    def _surge(self, move: Move, pod: PodInfo, ctx: GuardContext, econ: MoveEconomics | None) -> Admission:
        """Make ``move`` make-before-break (:meth:`descheduler.surge.SurgeDriver.start`); where the fresh objects forbid
        it (a ResourceQuota, a PodDisruptionBudget, an HPA), fall back as ``moves.fallback`` says."""
        assert move.to_node is not None
        fb = self.surges.fresh_blocker(pod, ctx.pdbs or ())
        if fb is None:
            outcome, msg = self.surges.start(pod, move.to_node, move.gain, move.reason)
            if outcome in ("surged", "announced", "dry_run"):
                made: MoveOutcome = "dry_run" if outcome == "dry_run" else "surged"
                self.results.append(MoveResult(move, made, (), msg, "surge", "", econ))
                if self.surges.unwritable is not None:
                    self.stop = CycleStop("history_unwritable", f"cycle stopped: {self.surges.unwritable}")
                return self._accepted(move, pod, (), real=outcome != "dry_run", what="Surge")
            if outcome == "error":
                self.results.append(MoveResult(move, "error", (), msg, "surge", "", econ))
                return "reject"
            fb = ("hpa", msg)
        reason, msg = fb
        if self.config.moves.fallback == "skip":
            return self._block(move, "surge", f"{msg}; moves.fallback is skip", "surge", reason, econ)
        if not self._serving_enough(pod):
            why = f"{msg}; the eviction fallback does not take the service's only serving pod (planner.minServingPods)"
            return self._block(move, "surge", why, "evict", reason, econ)
        ctx = replace(ctx, steered=False)  # the eviction's replacement goes where kube-scheduler's scores put it
        blockers = tuple(check_guards(pod, ctx))
        if blockers:
            return self._blocked(move, blockers, "evict", reason)
        econ_e = self._price(pod, move, "evict")
        if econ_e is not None and not econ_e.worth:
            return self._block(move, "cost", econ_e.describe(), "evict", reason, econ_e)
        return self._evict(move, pod, ctx, econ_e, reason)

    def _evict(
        self, move: Move, pod: PodInfo, ctx: GuardContext, econ: MoveEconomics | None = None, fallback: str = ""
    ) -> Admission:
        res = safe_evict(self.evictor, pod, _evict_reason(move))
        self.results.append(MoveResult(move, res.outcome, (), res.message, "evict", fallback, econ))
        if res.outcome in ("evicted", "dry_run"):
            pdbs = [v.pdb for v in ctx.pdbs or ()]
            return self._accepted(move, pod, pdbs, real=res.outcome == "evicted", what="Evict")
        if res.outcome == "refused":
            self.ledger.record_refusal(pod)
        return "reject"

    def _accepted(self, move: Move, pod: PodInfo, pdbs: Any, *, real: bool, what: str) -> Admission:
        """The bookkeeping of a move made (or, in a dry run, that would be): the ledger (caps, PDBs), the planning
        view, and for a real one an Event on the pod and the history (cooldown, loop detection); the total cap."""
        self.ledger.record_eviction(pod, pdbs)
        self.view = self.view.apply_move(move.pod, move.to_node)
        if real:
            if self.recorder is not None:
                reason = "Descheduled" if what == "Evict" else "Surged"
                self.recorder.record(_pod_ref(pod), "Normal", reason, what, _evict_reason(move))
            if self.history is not None:
                try:
                    self.history.record(pod, pod.node_name or "", self.now_s)
                except HistoryError as exc:
                    self.stop = CycleStop("history_unwritable", f"cycle stopped: {exc}")
        cap = self.config.caps.total
        if self.stop is None and cap is not None and self.ledger.total >= cap:
            self.stop = CycleStop(
                "total_cap",
                f"total cap reached ({self.ledger.total}/{cap} this cycle): the cycle stops planning and evicting",
            )
        return "accept"

    def evict_from_lost_node(self, move: Move) -> MoveResult:
        """A node-loss eviction (:mod:`descheduler.nodeloss`): :data:`~descheduler.nodeloss.NODE_LOSS_GUARDS` on the
        observation, the targeted re-read (a failed one stops the cycle, ``reread_failed``: fail closed), the same
        guards on the fresh objects, then the Eviction API. An eviction made counts against the PodDisruptionBudgets
        of this cycle (a Ready pod only), unbinds the pod on the planning view and keeps the planner from proposing it
        (skipped as ``terminating``), with an Event on the pod; not against the caps, and not in the history (the pod
        left no node of its own accord). Returns the result (not added to :attr:`results`)."""
        self._check_interrupt()
        if self.stop is not None:
            return MoveResult(move, "skipped", (), f"not attempted: {self.stop.message}", "evict")
        pod = self.view.pods.get(move.pod)
        if pod is None:
            return MoveResult(move, "not_found", (), f"{move.pod} is not in the observed cluster", "evict")
        blockers = tuple(check_guards(pod, self._node_loss_context(self._context(move, pod)), only=NODE_LOSS_GUARDS))
        if blockers:
            return MoveResult(move, "blocked", blockers, "; ".join(str(b) for b in blockers), "evict")
        try:
            fresh = self._reread(move, pod)
        except Exception as exc:  # noqa: BLE001 - fail closed: no eviction without a fresh view
            detail = " ".join(str(exc).split())[:300]
            why = f"cycle stopped: could not re-read the cluster: {type(exc).__name__}: {detail}"
            self.stop = CycleStop("reread_failed", why)
            return MoveResult(move, "skipped", (), why, "evict")
        if isinstance(fresh, MoveResult):
            return replace(fresh, path="evict")
        fpod, ctx = fresh
        blockers = tuple(check_guards(fpod, self._node_loss_context(ctx), only=NODE_LOSS_GUARDS))
        if blockers:
            return MoveResult(move, "blocked", blockers, "; ".join(str(b) for b in blockers), "evict")
        why = f"hrl-descheduler: node {move.from_node} lost: its pod replaced before the taint manager deletes it"
        res = safe_evict(self.evictor, fpod, why)
        if res.outcome in ("evicted", "dry_run"):
            self.ledger.record_budgets(fpod, [v.pdb for v in ctx.pdbs or ()])
            self.node_loss_evicted.add(move.pod)
            self.view = self.view.apply_move(move.pod, None)
            if res.outcome == "evicted" and self.recorder is not None:
                self.recorder.record(_pod_ref(fpod), "Normal", "Descheduled", "Evict", why)
        elif res.outcome == "refused":
            self.ledger.record_refusal(fpod)
        return MoveResult(move, res.outcome, (), res.message, "evict")

    def _node_loss_context(self, ctx: GuardContext) -> GuardContext:
        """``ctx`` with ``nodeLoss.evictLocalStoragePods`` in place of the top-level ``evictLocalStoragePods`` when
        set."""
        own = self.config.node_loss.evict_local_storage_pods
        if own is None or own == self.config.evict_local_storage_pods:
            return ctx
        return replace(ctx, config=self.config.model_copy(update={"evict_local_storage_pods": own}))

    def _check_interrupt(self) -> None:
        """Stop the cycle (kind ``interrupted``) once ``interrupt`` is set: between two evictions, never within one."""
        if self.stop is None and self.interrupt is not None and self.interrupt.is_set():
            self.stop = CycleStop("interrupted", "stopped at an eviction boundary: the process is stopping (SIGTERM)")

    def run_plan(self, moves: tuple[Move, ...]) -> None:
        """The moves of a planner without a gate, in plan order, through the same gate."""
        for k, move in enumerate(moves):
            self._check_interrupt()
            if self.stop is not None:
                self.stop = CycleStop(self.stop.kind, self.stop.message, len(moves) - k)
                return
            if move.pod in self.node_loss_evicted:  # evicted off its lost node this cycle: terminating
                self.skipped["terminating"] += 1
                continue
            pod = self.view.pods.get(move.pod)
            if pod is not None:
                blockers = tuple(check_guards(pod, self._context(move, pod), only=CHEAP_GUARDS))
                if blockers:
                    self.results.append(MoveResult(move, "blocked", blockers, "; ".join(str(b) for b in blockers)))
                    continue
            self.admit(move)


def _loop_holds(
    snapshot: ClusterSnapshot,
    config: DeschedulerConfiguration,
    history: EvictionHistory | None,
    now_s: float,
    dry_run: bool,
    recorder: EventRecorder | None,
) -> tuple[list[LoopHold], int]:
    """Active holds (see :func:`descheduler.guards.detect_loops`), the new ones reported by a Warning Event on
    the controller and kept in the history's ``loopHolds`` section (not in a dry run). Returns ``(holds, new)``."""
    ld = config.loop_detection
    holds = detect_loops(snapshot, history, now_s, ld.window_seconds, ld.hold_seconds)
    if history is None:
        return holds, 0
    known = {
        str(d.get("workload")) for d in history.sections.get("loopHolds") or () if float(d.get("until_s", 0)) > now_s
    }
    new = [h for h in holds if h.workload not in known]
    if new and not dry_run:
        for h in new:
            if recorder is not None:
                ns, kind, name = h.workload.split("/", 2)
                pod = next((p for p in snapshot.pods if p.key == h.pod), None)
                uid = pod.owner.uid if pod is not None and pod.owner is not None else ""
                group = "apps/v1" if kind in ("ReplicaSet", "StatefulSet", "Deployment", "DaemonSet") else "v1"
                recorder.record(
                    ObjectRef(group, kind, ns, name, uid), "Warning", "EvictionLoop", "Hold", h.reason(now_s)
                )
        doc = [
            {"workload": h.workload, "node": h.node, "evicted_at_s": h.evicted_at_s, "pod": h.pod, "until_s": h.until_s}
            for h in holds
        ]
        try:
            history.set_section("loopHolds", doc)
        except HistoryError:
            pass  # the holds stand for this cycle; the next one detects them again
    return holds, len(new)


@dataclass(frozen=True)
class CycleDeps:
    """What a descheduling cycle works with, as one value (:func:`run_once`, :func:`run_forever`).

    ``observe``: returns the cluster as it is now; called once per cycle (not at all when :func:`run_once` gets a
    ``snapshot``: an observation already made, e.g. by the command's start-up check), and once more before the
    in-place resizes when there are any; ``evictor``: :mod:`descheduler.evict` (a dry run when
    ``config.dry_run``); ``planner`` / ``placement``: the high and the low level; ``config``: the descheduler's
    configuration; ``history``: the eviction history for the cooldown and loop detection (``None`` = this cycle's
    only); ``scaler``: applies the plan's replica targets (:mod:`descheduler.scale`; ``None``: they are only
    reported); ``resizer``: makes the plan's in-place resizes when ``resize.enabled`` (:mod:`descheduler.resize`;
    real resizes are recorded in ``history`` for their cooldown; ``None``: none is made or reported); ``reader``:
    the targeted re-read before each eviction (:mod:`descheduler.reread`; default: a
    :class:`~descheduler.reread.SnapshotReader` of the observation, for a cluster that cannot change);
    ``recorder``: Kubernetes Events (:mod:`descheduler.events`; none in a dry run or when ``config.events`` is
    false); ``metrics``: a :class:`descheduler.metrics.DeschedulerMetrics` to update, or ``None``;
    ``prediction``: where kube-scheduler would put a replacement (:class:`policy.highlevel.SchedulerModel`;
    default: built from ``schedulerPrediction`` of the configuration); ``mover``: makes moves make-before-break
    (:class:`descheduler.surge.ApiMover`; ``None``: every move takes the ``moves.fallback`` path,
    :mod:`descheduler.surge`); ``clock``: for ``duration_s`` only. The move cost model comes from the configuration's
    ``moves.costModel``."""

    observe: Callable[[], ClusterSnapshot]
    evictor: Evictor
    planner: HighLevelPolicy
    placement: PlacementPolicy
    config: DeschedulerConfiguration
    history: EvictionHistory | None = None
    scaler: Scaler | None = None
    resizer: Resizer | None = None
    reader: ClusterReader | None = None
    recorder: EventRecorder | None = None
    metrics: Any = None
    prediction: Any = None
    mover: ApiMover | None = None
    clock: Callable[[], float] = time.monotonic


def run_once(
    deps: CycleDeps,
    now_s: float,
    *,
    warnings: tuple[str, ...] = (),
    snapshot: ClusterSnapshot | None = None,
    interrupt: threading.Event | None = None,
) -> CycleReport:
    """Run one descheduling cycle (see the module docstring) with ``deps`` (:class:`CycleDeps`) and return its
    :class:`CycleReport`. ``now_s``: the time stamped on history records and compared with ``cooldownSeconds``
    (unix s, or simulated time); ``warnings``: carried into the report; ``snapshot``: this cycle's observation
    when already made (``deps.observe`` is then not called for it); ``interrupt``: once set (SIGTERM), the cycle
    stops at the next eviction boundary: the eviction in progress completes, no other is made (stop
    ``interrupted``), and the plan's scaling and resizes are not applied.

    Raises whatever ``observe()`` or ``planner.plan`` raises (a planner with a gate may have evicted by then:
    the report is lost, the history keeps the evictions).
    """
    observe, evictor, planner, placement, config = deps.observe, deps.evictor, deps.planner, deps.placement, deps.config
    history, scaler, resizer, reader, recorder = deps.history, deps.scaler, deps.resizer, deps.reader, deps.recorder
    metrics, prediction, clock = deps.metrics, deps.prediction, deps.clock
    t0 = clock()
    c0 = time.process_time()
    if config.dry_run and not isinstance(evictor, DryRunEvictor):
        evictor = DryRunEvictor()
    dry_run = isinstance(evictor, DryRunEvictor)
    if history is not None:
        keep_s = max(config.cooldown_seconds, config.loop_detection.window_seconds)
        if keep_s > 0:
            history.prune(now_s - keep_s)
    if snapshot is None:
        snapshot = observe()
    index = ClusterIndex.build(snapshot)
    rec = None if dry_run or not config.events else recorder
    holds, new_holds = _loop_holds(snapshot, config, history, now_s, dry_run, rec)
    if prediction is None and config.scheduler_prediction.enabled:
        sp = config.scheduler_prediction
        prediction = SchedulerModel(placement, sp.extender_weight, frozenset(sp.extender_schedulers))
    surges = _surges(deps, snapshot, now_s, dry_run, rec)
    ex = MoveExecutor(
        snapshot,
        index,
        config,
        history,
        now_s,
        placement,
        reader if reader is not None else SnapshotReader(snapshot),
        evictor,
        recorder=rec,
        holds={h.workload: h.reason(now_s) for h in holds},
        prediction=prediction or None,
        dry_run=dry_run,
        surges=surges,
        cost_model=cost_model_from_config(config),
        interrupt=interrupt,
    )
    if surges.unwritable is not None:
        ex.stop = CycleStop("history_unwritable", f"cycle stopped: {surges.unwritable}")
    loss = node_loss_moves(snapshot, now_s, config.node_loss, tuple(config.excluded_namespaces))
    node_loss = tuple(ex.evict_from_lost_node(m) for m in loss.moves)
    if planner_accepts_gate(planner):
        plan = cast(GatedPlanner, planner).plan(snapshot, index, placement, gate=ex)
    else:
        plan = planner.plan(snapshot, index, placement)
        ex.run_plan(tuple(plan.moves))

    if interrupt is not None and interrupt.is_set():  # stopping: no scaling, no resizes after the evictions
        scaler = resizer = None
        if ex.stop is None:
            ex.stop = CycleStop("interrupted", "stopped after the evictions: the process is stopping (SIGTERM)")
    scaling: tuple[ScaleResult, ...] = ()
    if scaler is not None and config.scaling.enabled and plan.replica_targets:
        targets = surges.replica_targets(plan.replica_targets)
        scaling = _scale(targets, dry_run_scaler(scaler) if dry_run else scaler, config, snapshot, rec)

    resizes: tuple[ResizeResult, ...] = ()
    if resizer is not None and config.resize.enabled and plan.resizes:
        resizes = execute_resizes(
            plan.resizes,
            dry_run_resizer(resizer) if dry_run else resizer,
            config,
            observe,
            history,
            now_s,
            planned_uids={p.key: p.uid for p in snapshot.pods},
        )

    results = ex.results
    counts: Counter[str] = Counter(r.outcome for r in results)
    blocked = Counter(g for r in results for g in r.blocked_by)
    warnings = (*warnings, *surges.book.warnings)
    report = CycleReport(
        started_at_s=now_s,
        dry_run=dry_run,
        planner=str(getattr(planner, "name", type(planner).__name__)),
        planned_moves=tuple(r.move for r in results),
        results=tuple(results),
        counts=MappingProxyType({o: counts.get(o, 0) for o in REPORT_OUTCOMES}),
        blocked_by_guard=MappingProxyType({g: blocked.get(g, 0) for g in BLOCKER_NAMES}),
        replica_targets=MappingProxyType(dict(plan.replica_targets)),
        intent=plan.intent,
        duration_s=max(0.0, clock() - t0),
        nodes=len(snapshot.nodes),
        pods=len(snapshot.pods),
        warnings=tuple(warnings),
        scaling=scaling,
        resizes=resizes,
        stop=ex.stop,
        skipped_by_guard=MappingProxyType(dict(sorted(ex.skipped.items()))),
        loop_holds=tuple(holds),
        new_loop_holds=new_holds,
        reads=MappingProxyType(dict(sorted(ex.reads.items()))),
        cpu_s=max(0.0, time.process_time() - c0),
        surges=tuple(surges.events),
        pending_moves=surges.book.records(),
        lost_nodes=loss.lost,
        node_loss=node_loss,
        node_loss_held=loss.held,
        node_loss_skipped=MappingProxyType(dict(loss.skipped)),
    )
    if metrics is not None:
        metrics.observe_cycle(report)
    return report


def _surges(
    deps: CycleDeps, snapshot: ClusterSnapshot, now_s: float, dry_run: bool, recorder: EventRecorder | None
) -> SurgeDriver:
    """The cycle's make-before-break driver: the pending moves of the history's state file, taken one step with the
    mover (its read-only twin in a dry run) before anything is planned."""
    mover = deps.mover
    if mover is not None and dry_run:
        mover = mover.dry_run_twin()
    book = SurgeBook.load(deps.history, dry_run=dry_run)
    driver = SurgeDriver(book, mover, deps.config, snapshot, now_s, recorder=recorder)
    driver.advance()
    return driver


def _scale(
    targets: Mapping[str, int],
    scaler: Scaler,
    config: DeschedulerConfiguration,
    snapshot: ClusterSnapshot,
    recorder: EventRecorder | None = None,
) -> tuple[ScaleResult, ...]:
    """Apply replica targets (see the module docstring) from the cycle's observation (the scaler reads the
    scale subresource itself before writing it)."""
    keys = sorted(targets)
    fresh = snapshot
    workloads: dict[str, WorkloadInfo] = {}
    for wl in fresh.workloads:  # a Deployment wins over a StatefulSet of the same name
        key = f"{wl.namespace}/{wl.name}"
        if key not in workloads or wl.kind == "Deployment":
            workloads[key] = wl
    sc = config.scaling
    out = []
    for key in keys:
        planned = int(targets[key])
        ns = key.split("/", 1)[0]
        w = workloads.get(key)
        if ns in config.excluded_namespaces:
            out.append(
                ScaleResult(key, "blocked", None, None, planned, f"namespace {ns} is excluded (excludedNamespaces)")
            )
        elif w is None:
            out.append(ScaleResult(key, "not_found", None, None, planned, f"no Deployment {key} in the cluster"))
        elif w.kind != "Deployment":
            out.append(
                ScaleResult(
                    key, "blocked", w.replicas, None, planned, f"{key} is a {w.kind}: only Deployments are scaled"
                )
            )
        else:
            target = bound_target(w.replicas, planned, sc.min_replicas, sc.max_replicas, sc.max_step_per_cycle)
            if target == w.replicas:
                out.append(
                    ScaleResult(
                        key,
                        "unchanged",
                        w.replicas,
                        target,
                        planned,
                        f"{w.replicas} replicas (planned {planned}, within bounds: {target})",
                    )
                )
            else:
                res = safe_scale(scaler, key, target, current=w.replicas, planned=planned)
                out.append(res)
                if res.outcome == "scaled" and recorder is not None:
                    recorder.record(
                        ObjectRef("apps/v1", "Deployment", w.namespace, w.name),
                        "Normal",
                        "Scaled",
                        "Scale",
                        f"hrl-descheduler: replicas {w.replicas} -> {target} (planned {planned}): {res.message}",
                    )
    return tuple(out)


def run_forever(
    interval_s: float,
    deps: CycleDeps,
    *,
    stop: threading.Event | None = None,
    max_cycles: int | None = None,
    now: Callable[[], float] = time.time,
    on_report: Callable[[CycleReport], None] | None = None,
    on_error: Callable[[Exception], None] | None = None,
) -> int:
    """Run :func:`run_once` with ``deps`` every ``interval_s`` seconds (> 0) until ``stop`` is set or ``max_cycles``
    cycles ran (a cycle running when ``stop`` is set stops at its next eviction boundary: ``interrupt`` of
    :func:`run_once`); returns the number of cycles attempted. A cycle that raises is reported to ``on_error``
    (default: one line on stderr), counted as a failed cycle (``deps.metrics``), and the loop goes on.
    ``on_report`` gets every report. Raises ``ValueError`` when ``interval_s`` is not > 0."""
    if not interval_s > 0:
        raise ValueError(f"interval_s: must be > 0 (got {interval_s!r})")
    stop = stop if stop is not None else threading.Event()
    cycles = 0
    while not stop.is_set() and (max_cycles is None or cycles < max_cycles):
        cycles += 1
        try:
            report = run_once(deps, now(), interrupt=stop)
        except Exception as exc:  # noqa: BLE001 - one bad cycle must not end the loop
            if deps.metrics is not None:
                deps.metrics.observe_failed_cycle()
            if on_error is not None:
                on_error(exc)
            else:
                print(f"hrl-descheduler: cycle failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        else:
            if on_report is not None:
                on_report(report)
        if max_cycles is not None and cycles >= max_cycles:
            break
        stop.wait(interval_s)
    return cycles
