"""One descheduling cycle, and the periodic loop around it.

A cycle (:func:`run_once`)::

    observe() -> snapshot -> ClusterIndex -> planner.plan(...) -> Plan
    for each planned move, in plan order (best gain first):
        observe() again and find the pod         gone            -> not_found (nothing evicted)
                                                 re-created / moved since planning -> skipped
        guards on the fresh state                any blocker     -> blocked (with every reason)
        evictor.evict(pod)                       evicted / dry_run -> counted in the ledger (caps, PDBs)
                                                 refused (429)   -> that workload is skipped for the rest
                                                                    of the cycle; no retry
                                                 not_found / error -> counted, nothing else
        evicted -> recorded in the eviction history (cooldown; saved to the state file when configured)

    then, with a scaler and ``scaling.enabled``, the plan's replica targets (after the evictions):
        observe() once more; per target, in key order:
            excluded namespace / not a Deployment -> blocked;  not in the cluster -> not_found
            bound_target(current, planned, minReplicas, maxReplicas, maxStepPerCycle) == current -> unchanged
            scaler.scale(workload, target)        scaled / unchanged / refused_hpa (an HPA owns it: left alone)
                                                  / not_found / error / dry_run

    then, with a resizer and ``resize.enabled``, the plan's in-place resizes (after the scaling):
        :func:`descheduler.resize.execute_resizes`: observe() once more; per resize, in plan order: excluded
        namespace / not a Deployment's pod -> blocked; gone -> not_found; not running -> not_running; re-created or
        its request changed -> changed; cooldown; maxPerCycle -> capped; bounds -> unchanged; node too full ->
        no_room; resizer.resize(order): resized / refused_vpa (a VPA owns it: left alone) / ... / dry_run

A dry run is the same cycle with :class:`~descheduler.evict.DryRunEvictor` (``config.dry_run`` forces it)
and the scaler's and the resizer's read-only twins (:func:`descheduler.scale.dry_run_scaler`,
:func:`descheduler.resize.dry_run_resizer`): the same plan, the same guards, the same ledger, the same bounds
and caps; only the evictor, the scaler, the resizer and the persistent history differ (a dry run never writes
the history: it changes nothing).

Fail closed: if re-reading the cluster fails or the history cannot be saved, the rest of the cycle's
moves are skipped.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from policy.highlevel import HighLevelPolicy
from policy.index import ClusterIndex
from policy.lowlevel import INTENT_SPEC, PlacementPolicy
from policy.state import ClusterSnapshot, Move, PodInfo

from .config import DeschedulerConfiguration
from .evict import DryRunEvictor, Evictor, safe_evict
from .guards import GUARD_NAMES, Blocker, CycleLedger, EvictionHistory, GuardContext, HistoryError, check_guards
from .resize import RESIZE_OUTCOMES, Resizer, ResizeResult, dry_run_resizer, execute_resizes
from .scale import SCALE_OUTCOMES, Scaler, ScaleResult, bound_target, dry_run_scaler, safe_scale

__all__ = ["MoveOutcome", "REPORT_OUTCOMES", "MoveResult", "CycleReport", "run_once", "run_forever"]

MoveOutcome = Literal["evicted", "refused", "not_found", "error", "dry_run", "blocked", "skipped"]
#: Every per-move outcome of a cycle: the evictor's five, plus ``blocked`` (a guard said no) and ``skipped``
#: (the pod changed since planning, or the cycle stopped early).
REPORT_OUTCOMES: tuple[str, ...] = ("evicted", "refused", "not_found", "error", "dry_run", "blocked", "skipped")


@dataclass(frozen=True, slots=True)
class MoveResult:
    """What became of one planned move: ``outcome`` (one of :data:`REPORT_OUTCOMES`), the guards that
    blocked it (every one, not just the first) and a one-line ``message``."""

    move: Move
    outcome: MoveOutcome
    blockers: tuple[Blocker, ...] = ()
    message: str = ""

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
        }


@dataclass(frozen=True)
class CycleReport:
    """The result of one cycle.

    ``started_at_s``: the cycle's ``now_s`` (unix s, or simulated time); ``duration_s``: wall time;
    ``planned_moves``: the plan, in order; ``results``: one :class:`MoveResult` per planned move, same order;
    ``counts``: outcome → number of moves (every outcome of :data:`REPORT_OUTCOMES` present);
    ``blocked_by_guard``: guard → moves it blocked (every guard present); ``replica_targets`` / ``intent``:
    from the plan, with the intent's per-service parts ``colocation_priority`` and ``capacity_targets``;
    ``nodes`` / ``pods``: size of the observed snapshot; ``scaling``: one
    :class:`~descheduler.scale.ScaleResult` per replica target acted on, in key order (empty without a scaler);
    ``resizes``: one :class:`~descheduler.resize.ResizeResult` per planned in-place resize, in plan order (empty
    without a resizer or with ``resize.enabled`` false).
    """

    started_at_s: float
    dry_run: bool
    planner: str
    planned_moves: tuple[Move, ...]
    results: tuple[MoveResult, ...]
    counts: Mapping[str, int]
    blocked_by_guard: Mapping[str, int]
    replica_targets: Mapping[str, int]
    intent: tuple[float, ...]
    duration_s: float
    nodes: int = 0
    pods: int = 0
    warnings: tuple[str, ...] = field(default=())
    scaling: tuple[ScaleResult, ...] = field(default=())
    colocation_priority: Mapping[str, float] = field(default_factory=dict)
    capacity_targets: Mapping[str, float] = field(default_factory=dict)
    resizes: tuple[ResizeResult, ...] = field(default=())

    @property
    def evictions(self) -> int:
        """Pods actually evicted this cycle (0 in a dry run)."""
        return self.counts.get("evicted", 0)

    @property
    def scale_counts(self) -> dict[str, int]:
        """Scaling outcome → number of workloads (every outcome of :data:`descheduler.scale.SCALE_OUTCOMES`)."""
        c = Counter(r.outcome for r in self.scaling)
        return {o: c.get(o, 0) for o in SCALE_OUTCOMES}

    @property
    def resize_counts(self) -> dict[str, int]:
        """Resize outcome → number of pods (every outcome of :data:`descheduler.resize.RESIZE_OUTCOMES`)."""
        c = Counter(r.outcome for r in self.resizes)
        return {o: c.get(o, 0) for o in RESIZE_OUTCOMES}

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict with stable keys (units in the names)."""
        names = [n for n, _doc, _d in INTENT_SPEC]
        return {
            "started_at_s": self.started_at_s,
            "duration_s": round(self.duration_s, 6),
            "dry_run": self.dry_run,
            "planner": self.planner,
            "nodes": self.nodes,
            "pods": self.pods,
            "planned_moves": [_move_json(m) for m in self.planned_moves],
            "results": [r.to_json() for r in self.results],
            "counts": dict(self.counts),
            "evictions": self.evictions,
            "blocked_by_guard": dict(self.blocked_by_guard),
            "replica_targets": dict(sorted(self.replica_targets.items())),
            "intent": list(self.intent),
            "intent_names": names[: len(self.intent)],
            "colocation_priority": dict(sorted(self.colocation_priority.items())),
            "capacity_targets": dict(sorted(self.capacity_targets.items())),
            "scaling": [r.to_json() for r in self.scaling],
            "scale_counts": self.scale_counts,
            "resizes": [r.to_json() for r in self.resizes],
            "resize_counts": self.resize_counts,
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


def _find(snapshot: ClusterSnapshot, key: str) -> PodInfo | None:
    for p in snapshot.pods:
        if p.key == key:
            return p
    return None


def _evict_reason(m: Move) -> str:
    to = f" towards {m.to_node}" if m.to_node else ""
    return f"hrl-descheduler: {m.reason} move off {m.from_node}{to} (gain {m.gain:.2f})"


def run_once(
    observe: Callable[[], ClusterSnapshot],
    evictor: Evictor,
    planner: HighLevelPolicy,
    placement: PlacementPolicy,
    config: DeschedulerConfiguration,
    history: EvictionHistory | None,
    now_s: float,
    *,
    metrics: Any = None,
    clock: Callable[[], float] = time.monotonic,
    warnings: tuple[str, ...] = (),
    scaler: Scaler | None = None,
    resizer: Resizer | None = None,
) -> CycleReport:
    """Run one descheduling cycle (see the module docstring) and return its :class:`CycleReport`.

    ``observe``: returns a fresh snapshot each call (called once to plan, then once before each eviction, and
    once before scaling when there are replica targets and a scaler);
    ``history``: the eviction history for the cooldown (``None`` = this cycle's only); ``now_s``: the time
    stamped on history records and compared with ``cooldownSeconds`` (unix s, or simulated time);
    ``metrics``: a :class:`descheduler.metrics.DeschedulerMetrics` to update, or ``None``; ``clock``:
    for ``duration_s`` only; ``warnings``: carried into the report (e.g. from loading the graph);
    ``scaler``: applies the plan's replica targets (:mod:`descheduler.scale`); ``None``: they are only reported;
    ``resizer``: makes the plan's in-place resizes when ``resize.enabled`` (:mod:`descheduler.resize`; real resizes
    are recorded in ``history`` for their cooldown); ``None``: none is made or reported.

    Raises whatever the first ``observe()`` or ``planner.plan`` raises (nothing has been evicted then).
    """
    t0 = clock()
    if config.dry_run and not isinstance(evictor, DryRunEvictor):
        evictor = DryRunEvictor()
    dry_run = isinstance(evictor, DryRunEvictor)
    if history is not None and config.cooldown_seconds > 0:
        history.prune(now_s - config.cooldown_seconds)

    snapshot = observe()
    index = ClusterIndex.build(snapshot)
    plan = planner.plan(snapshot, index, placement)
    planned_pods = {p.key: p for p in snapshot.pods}

    ledger = CycleLedger()
    results: list[MoveResult] = []
    stop_reason = ""
    for move in plan.moves:
        if stop_reason:
            results.append(MoveResult(move, "skipped", (), stop_reason))
            continue
        try:
            fresh = observe()
        except Exception as exc:  # noqa: BLE001 - fail closed: no eviction without a fresh view
            stop_reason = f"cycle stopped: could not re-read the cluster: {type(exc).__name__}: {exc}"
            results.append(MoveResult(move, "skipped", (), stop_reason))
            continue
        pod = _find(fresh, move.pod)
        if pod is None:
            results.append(MoveResult(move, "not_found", (), f"{move.pod} is gone since planning"))
            continue
        before = planned_pods.get(move.pod)
        if before is not None and before.uid and pod.uid and before.uid != pod.uid:
            results.append(MoveResult(move, "skipped", (), f"{move.pod} was re-created since planning"))
            continue
        if pod.node_name != move.from_node:
            results.append(
                MoveResult(
                    move, "skipped", (), f"{move.pod} moved from {move.from_node} to {pod.node_name} since planning"
                )
            )
            continue
        ctx = GuardContext(fresh, config, ledger, history, now_s, placement, ClusterIndex.build(fresh), move.to_node)
        blockers = tuple(check_guards(pod, ctx))
        if blockers:
            results.append(MoveResult(move, "blocked", blockers, "; ".join(str(b) for b in blockers)))
            continue
        res = safe_evict(evictor, pod, _evict_reason(move))
        results.append(MoveResult(move, res.outcome, (), res.message))
        if res.outcome in ("evicted", "dry_run"):
            ledger.record_eviction(pod, fresh.pdbs)
            if res.outcome == "evicted" and history is not None:
                try:
                    history.record(pod, pod.node_name or "", now_s)
                except HistoryError as exc:
                    stop_reason = f"cycle stopped: {exc}"
        elif res.outcome == "refused":
            ledger.record_refusal(pod)

    scaling: tuple[ScaleResult, ...] = ()
    if scaler is not None and config.scaling.enabled and plan.replica_targets:
        scaling = _scale(plan.replica_targets, dry_run_scaler(scaler) if dry_run else scaler, config, observe)

    resizes: tuple[ResizeResult, ...] = ()
    if resizer is not None and config.resize.enabled and plan.resizes:
        resizes = execute_resizes(
            plan.resizes,
            dry_run_resizer(resizer) if dry_run else resizer,
            config,
            observe,
            history,
            now_s,
            planned_uids={k: p.uid for k, p in planned_pods.items()},
        )

    counts = Counter(r.outcome for r in results)
    blocked = Counter(g for r in results for g in r.blocked_by)
    report = CycleReport(
        started_at_s=now_s,
        dry_run=dry_run,
        planner=str(getattr(planner, "name", type(planner).__name__)),
        planned_moves=tuple(plan.moves),
        results=tuple(results),
        counts=MappingProxyType({o: counts.get(o, 0) for o in REPORT_OUTCOMES}),
        blocked_by_guard=MappingProxyType({g: blocked.get(g, 0) for g in GUARD_NAMES}),
        replica_targets=MappingProxyType(dict(plan.replica_targets)),
        intent=tuple(float(x) for x in plan.intent),
        duration_s=max(0.0, clock() - t0),
        nodes=len(snapshot.nodes),
        pods=len(snapshot.pods),
        warnings=tuple(warnings),
        scaling=scaling,
        colocation_priority=MappingProxyType(dict(plan.colocation_priority)),
        capacity_targets=MappingProxyType(dict(plan.capacity_targets)),
        resizes=resizes,
    )
    if metrics is not None:
        metrics.observe_cycle(report)
    return report


def _scale(
    targets: Mapping[str, int], scaler: Scaler, config: DeschedulerConfiguration, observe: Callable[[], ClusterSnapshot]
) -> tuple[ScaleResult, ...]:
    """Apply replica targets (see the module docstring); fail closed when the cluster cannot be re-read."""
    keys = sorted(targets)
    try:
        fresh = observe()
    except Exception as exc:  # noqa: BLE001 - no scaling without a fresh view
        why = f"cycle stopped: could not re-read the cluster: {type(exc).__name__}: {exc}"
        return tuple(ScaleResult(k, "skipped", None, None, int(targets[k]), why) for k in keys)
    workloads = {}
    for w in fresh.workloads:  # a Deployment wins over a StatefulSet of the same name
        key = f"{w.namespace}/{w.name}"
        if key not in workloads or w.kind == "Deployment":
            workloads[key] = w
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
                out.append(safe_scale(scaler, key, target, current=w.replicas, planned=planned))
    return tuple(out)


def run_forever(
    interval_s: float,
    observe: Callable[[], ClusterSnapshot],
    evictor: Evictor,
    planner: HighLevelPolicy,
    placement: PlacementPolicy,
    config: DeschedulerConfiguration,
    history: EvictionHistory | None,
    *,
    metrics: Any = None,
    stop: threading.Event | None = None,
    max_cycles: int | None = None,
    now: Callable[[], float] = time.time,
    on_report: Callable[[CycleReport], None] | None = None,
    on_error: Callable[[Exception], None] | None = None,
    scaler: Scaler | None = None,
    resizer: Resizer | None = None,
) -> int:
    """Run :func:`run_once` every ``interval_s`` seconds (> 0) until ``stop`` is set or ``max_cycles`` cycles
    ran; returns the number of cycles attempted. A cycle that raises is reported to ``on_error`` (default:
    one line on stderr), counted as a failed cycle, and the loop goes on. ``on_report`` gets every report;
    ``scaler`` and ``resizer`` are passed to :func:`run_once`. Raises ``ValueError`` when ``interval_s`` is not > 0."""
    if not interval_s > 0:
        raise ValueError(f"interval_s: must be > 0 (got {interval_s!r})")
    stop = stop if stop is not None else threading.Event()
    cycles = 0
    while not stop.is_set() and (max_cycles is None or cycles < max_cycles):
        cycles += 1
        try:
            report = run_once(
                observe,
                evictor,
                planner,
                placement,
                config,
                history,
                now(),
                metrics=metrics,
                scaler=scaler,
                resizer=resizer,
            )
        except Exception as exc:  # noqa: BLE001 - one bad cycle must not end the loop
            if metrics is not None:
                metrics.observe_failed_cycle()
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
