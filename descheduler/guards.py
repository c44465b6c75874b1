"""Eviction guards: every reason not to evict a pod, each a small function returning a reason or ``None``.

Eviction fails closed (DESIGN.md section 2): when a guard is unsure it blocks. The guards mirror the
constraints of kubernetes-sigs/descheduler (pkg/framework/plugins/defaultevictor: mirror/static pods,
DaemonSet pods, pods without owner references, system-critical priority, local storage, terminating pods;
pkg/descheduler/evictions: per-node / per-namespace / total limits; the NodeFit check) plus two of ours:
PodDisruptionBudget budgets tracked within the cycle, and a cooldown that stops a workload from being moved
back and forth (loop detection), with an optional state file so it survives CronJob runs.

Each guard has a stable name (:data:`GUARD_NAMES`), used as the ``guard`` label of
``hrl_descheduler_blocked_total`` and as the prefix of the blocker strings (``"pdb: ..."``).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from policy.highlevel import SYSTEM_CRITICAL_CLASSES, SYSTEM_CRITICAL_PRIORITY
from policy.index import ClusterIndex
from policy.lowlevel import PlacementPolicy, node_admits, resource_fit_failures
from policy.state import ClusterSnapshot, PodDisruptionBudgetInfo, PodInfo

from .config import DeschedulerConfiguration

__all__ = [
    "SYSTEM_CRITICAL_PRIORITY",
    "SYSTEM_CRITICAL_CLASSES",
    "GUARD_NAMES",
    "Blocker",
    "GuardContext",
    "CycleLedger",
    "EvictionRecord",
    "EvictionHistory",
    "HistoryError",
    "workload_key",
    "check_guards",
    "eviction_blockers",
]


def workload_key(pod: PodInfo) -> str:
    """The workload a pod belongs to: ``namespace/OwnerKind/ownerName`` of its controller owner, or
    ``namespace/Pod/name`` for a bare pod. Cooldown and PDB refusals are tracked per workload."""
    if pod.owner is None:
        return f"{pod.namespace}/Pod/{pod.name}"
    return f"{pod.namespace}/{pod.owner.kind}/{pod.owner.name}"


# ---- state kept within a cycle and across cycles ----------------------------------------------------


@dataclass
class CycleLedger:
    """What this cycle already evicted (dry-run evictions count too, so a dry run sees the same caps).

    ``per_node`` / ``per_namespace``: evictions counted by the node the pod was on / its namespace;
    ``pdb_evictions``: ``namespace/name`` of a PodDisruptionBudget → evictions of pods it covers;
    ``refused_workloads``: workloads a PDB refused this cycle (not tried again until the next cycle);
    ``evicted_from``: ``(workload, node)`` pairs evicted this cycle (the cooldown sees them at once).
    """

    evicted: list[str] = field(default_factory=list)
    per_node: Counter = field(default_factory=Counter)
    per_namespace: Counter = field(default_factory=Counter)
    pdb_evictions: Counter = field(default_factory=Counter)
    refused_workloads: set[str] = field(default_factory=set)
    evicted_from: set[tuple[str, str]] = field(default_factory=set)

    @property
    def total(self) -> int:
        return len(self.evicted)

    def record_eviction(self, pod: PodInfo, pdbs: Iterable[PodDisruptionBudgetInfo]) -> None:
        """Count an accepted (or dry-run) eviction of ``pod`` against every cap and every PDB covering it."""
        self.evicted.append(pod.key)
        node = pod.node_name or ""
        self.per_node[node] += 1
        self.per_namespace[pod.namespace] += 1
        for b in pdbs:
            if b.covers(pod):
                self.pdb_evictions[f"{b.namespace}/{b.name}"] += 1
        self.evicted_from.add((workload_key(pod), node))

    def record_refusal(self, pod: PodInfo) -> None:
        """A PodDisruptionBudget refused evicting ``pod`` (HTTP 429): skip its workload for the rest of the cycle."""
        self.refused_workloads.add(workload_key(pod))


class HistoryError(ValueError):
    """The eviction-history state file cannot be read or written; the message names the file and the problem."""


@dataclass(frozen=True, slots=True)
class EvictionRecord:
    """One real eviction: ``workload`` (see :func:`workload_key`) evicted from ``node`` at ``at_s`` (unix s)."""

    workload: str
    node: str
    at_s: float
    pod: str = ""


class EvictionHistory:
    """Evictions of recent cycles, for the cooldown / loop-detection guard.

    ``path``: optional JSON state file (``{"version": 1, "evictions": [{"workload", "node", "at_s", "pod"}]}``)
    so the history survives CronJob runs; :meth:`record` saves it at once (atomic replace), so a run that
    dies half-way keeps what it evicted. A missing file is an empty history; an unreadable or malformed one
    raises :class:`HistoryError` (fail closed: better no cycle than a cycle blind to the last one).

    The same file carries other state that must survive CronJob runs as extra top-level keys
    (``sections``, e.g. ``"planner"``: the hierarchical planner's :class:`policy.highlevel.HrlState`), kept as read
    and written back on every save; :meth:`set_section` replaces one and saves.
    """

    def __init__(
        self, records: Iterable[EvictionRecord] = (), path: str | Path | None = None, sections: dict | None = None
    ):
        self._records: list[EvictionRecord] = list(records)
        self.path = Path(path) if path is not None else None
        self.sections: dict = dict(sections or {})

    @property
    def records(self) -> tuple[EvictionRecord, ...]:
        return tuple(self._records)

    @classmethod
    def load(cls, path: str | Path) -> EvictionHistory:
        """Read the state file at ``path`` (missing → empty history bound to ``path``)."""
        p = Path(path)
        if not p.exists():
            return cls(path=p)
        try:
            raw = p.read_bytes()
            data = json.loads(raw.decode("utf-8"))
        except OSError as exc:
            raise HistoryError(f"{p}: cannot read eviction history: {exc.strerror}") from exc
        except UnicodeDecodeError as exc:
            from policy.config import describe_utf8_error

            raise HistoryError(f"{p}: eviction history is {describe_utf8_error(raw, exc)}") from exc
        except json.JSONDecodeError as exc:
            raise HistoryError(f"{p}:{exc.lineno}: eviction history is not valid JSON: {exc.msg}") from exc
        if not isinstance(data, dict) or data.get("version") != 1 or not isinstance(data.get("evictions"), list):
            raise HistoryError(f'{p}: eviction history must be {{"version": 1, "evictions": [...]}}')
        records = []
        for i, r in enumerate(data["evictions"]):
            try:
                at_s = float(r["at_s"])
                if not math.isfinite(at_s):
                    raise ValueError
                records.append(EvictionRecord(str(r["workload"]), str(r["node"]), at_s, str(r.get("pod", ""))))
            except (KeyError, TypeError, ValueError) as exc:
                raise HistoryError(f"{p}: evictions[{i}]: needs workload, node and a finite at_s (got {r!r})") from exc
        return cls(records, path=p, sections={k: v for k, v in data.items() if k not in ("version", "evictions")})

    def set_section(self, name: str, value: object) -> None:
        """Replace the extra top-level key ``name`` (JSON-serialisable ``value``) and save when bound to a file.
        Raises :class:`HistoryError` when it cannot be written."""
        if name in ("version", "evictions"):
            raise ValueError(f"section name {name!r} is reserved")
        self.sections[name] = value
        if self.path is not None:
            self.save()

    def record(self, pod: PodInfo, node: str, at_s: float) -> None:
        """Remember that ``pod``'s workload was evicted from ``node`` at ``at_s``; saves when bound to a file."""
        self._records.append(EvictionRecord(workload_key(pod), node, float(at_s), pod.key))
        if self.path is not None:
            self.save()

    def last_eviction(self, workload: str, node: str, since_s: float) -> EvictionRecord | None:
        """The latest eviction of ``workload`` from ``node`` at or after ``since_s``, or ``None``."""
        best = None
        for r in self._records:
            if r.workload == workload and r.node == node and r.at_s >= since_s:
                if best is None or r.at_s > best.at_s:
                    best = r
        return best

    def prune(self, before_s: float) -> None:
        """Forget evictions older than ``before_s``."""
        self._records = [r for r in self._records if r.at_s >= before_s]

    def save(self, path: str | Path | None = None) -> None:
        """Write the state file atomically (temporary file + rename). Raises :class:`HistoryError`."""
        p = Path(path) if path is not None else self.path
        if p is None:
            return
        doc = {
            **self.sections,
            "version": 1,
            "evictions": [
                {"workload": r.workload, "node": r.node, "at_s": r.at_s, "pod": r.pod} for r in self._records
            ],
        }
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=p.name + ".", suffix=".tmp", dir=p.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(doc, f, indent=1, sort_keys=True)
            os.replace(tmp, p)
        except OSError as exc:
            raise HistoryError(f"{p}: cannot write eviction history: {exc.strerror}") from exc


# ---- the guards ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GuardContext:
    """Everything a guard may read. ``history`` / ``now_s``: for the cooldown (``None`` → only this cycle's
    ledger is consulted); ``placement``: our low-level policy, whose ``filter`` the feasibility guard also
    applies; ``index``: ``ClusterIndex.build(snapshot)`` (built on demand when ``None``); ``to_node``: where
    the planner hopes the pod lands (for loop detection)."""

    snapshot: ClusterSnapshot
    config: DeschedulerConfiguration
    ledger: CycleLedger
    history: EvictionHistory | None = None
    now_s: float | None = None
    placement: PlacementPolicy | None = None
    index: ClusterIndex | None = None
    to_node: str | None = None


@dataclass(frozen=True, slots=True)
class Blocker:
    """One guard that says no: ``guard`` (a name from :data:`GUARD_NAMES`) and a one-line ``reason``."""

    guard: str
    reason: str

    def __str__(self) -> str:
        return f"{self.guard}: {self.reason}"


def guard_mirror(pod: PodInfo, ctx: GuardContext) -> str | None:
    """Mirror pods (annotation ``kubernetes.io/config.mirror``) stand for static pods the kubelet runs."""
    return "mirror (static) pod: the kubelet owns it" if pod.is_mirror else None


def guard_daemonset(pod: PodInfo, ctx: GuardContext) -> str | None:
    """A DaemonSet would put the pod right back on the same node."""
    return "DaemonSet pod: it would come back on the same node" if pod.is_daemonset else None


def guard_no_controller(pod: PodInfo, ctx: GuardContext) -> str | None:
    """A pod without a controller owner would not be re-created anywhere."""
    return "no controller owner: nothing would re-create it" if pod.owner is None else None


def guard_excluded_namespace(pod: PodInfo, ctx: GuardContext) -> str | None:
    if pod.namespace in ctx.config.excluded_namespaces:
        return f"namespace {pod.namespace} is excluded (excludedNamespaces)"
    return None


def guard_system_critical(pod: PodInfo, ctx: GuardContext) -> str | None:
    """Priority >= 2000000000 or a system-*-critical PriorityClass (descheduler utils.IsCriticalPriorityPod)."""
    if pod.priority >= SYSTEM_CRITICAL_PRIORITY:
        return f"system-critical priority {pod.priority}"
    if pod.priority_class_name in SYSTEM_CRITICAL_CLASSES:
        return f"system-critical priorityClassName {pod.priority_class_name}"
    return None


def guard_local_storage(pod: PodInfo, ctx: GuardContext) -> str | None:
    if pod.local_storage and not ctx.config.evict_local_storage_pods:
        return "uses local storage (emptyDir, hostPath or a local PersistentVolume); evictLocalStoragePods is false"
    return None


def guard_terminating(pod: PodInfo, ctx: GuardContext) -> str | None:
    return "already terminating" if pod.terminating else None


def guard_unbound(pod: PodInfo, ctx: GuardContext) -> str | None:
    return "not bound to a node" if pod.node_name is None else None


def guard_pdb(pod: PodInfo, ctx: GuardContext) -> str | None:
    """Every PodDisruptionBudget covering the pod must allow one more disruption, counting this cycle's
    evictions against it; an unknown status (no disruptionsAllowed yet) blocks. A pod covered by more than
    one PDB is blocked too: the Eviction API refuses it (pkg/registry/core/pod/storage/eviction.go)."""
    covering = [b for b in ctx.snapshot.pdbs if b.covers(pod)]
    if len(covering) > 1:
        names = ", ".join(sorted(f"{b.namespace}/{b.name}" for b in covering))
        return f"covered by more than one PodDisruptionBudget ({names}); the Eviction API refuses it"
    for b in covering:
        key = f"{b.namespace}/{b.name}"
        if b.disruptions_allowed is None:
            return f"PodDisruptionBudget {key} has no status.disruptionsAllowed yet"
        left = b.disruptions_allowed - ctx.ledger.pdb_evictions[key]
        if left <= 0:
            return (
                f"PodDisruptionBudget {key} allows no more disruptions (disruptionsAllowed "
                f"{b.disruptions_allowed}, {ctx.ledger.pdb_evictions[key]} used this cycle)"
            )
    return None


def guard_pdb_refused(pod: PodInfo, ctx: GuardContext) -> str | None:
    if workload_key(pod) in ctx.ledger.refused_workloads:
        return f"a PodDisruptionBudget refused evicting {workload_key(pod)} earlier this cycle"
    return None


def guard_cap_node(pod: PodInfo, ctx: GuardContext) -> str | None:
    cap = ctx.config.caps.per_node
    used = ctx.ledger.per_node[pod.node_name or ""]
    if cap is not None and used >= cap:
        return f"per-node cap reached on {pod.node_name} ({used}/{cap} this cycle)"
    return None


def guard_cap_namespace(pod: PodInfo, ctx: GuardContext) -> str | None:
    cap = ctx.config.caps.per_namespace
    used = ctx.ledger.per_namespace[pod.namespace]
    if cap is not None and used >= cap:
        return f"per-namespace cap reached in {pod.namespace} ({used}/{cap} this cycle)"
    return None


def guard_cap_total(pod: PodInfo, ctx: GuardContext) -> str | None:
    cap = ctx.config.caps.total
    if cap is not None and ctx.ledger.total >= cap:
        return f"total cap reached ({ctx.ledger.total}/{cap} this cycle)"
    return None


def guard_cooldown(pod: PodInfo, ctx: GuardContext) -> str | None:
    """Loop detection: the pod's workload was evicted from this node within ``cooldownSeconds`` (or this
    cycle), or the planner wants it on a node the workload was evicted from within that time (a move back)."""
    wl = workload_key(pod)
    node = pod.node_name or ""
    cooldown = ctx.config.cooldown_seconds
    if (wl, node) in ctx.ledger.evicted_from:
        return f"{wl} was already evicted from {node} this cycle"
    if ctx.to_node is not None and (wl, ctx.to_node) in ctx.ledger.evicted_from:
        return f"would move {wl} back to {ctx.to_node}, from which it was evicted this cycle"
    if ctx.history is None or ctx.now_s is None or cooldown <= 0:
        return None
    since = ctx.now_s - cooldown
    rec = ctx.history.last_eviction(wl, node, since)
    if rec is not None:
        return f"{wl} was evicted from {node} {ctx.now_s - rec.at_s:.0f} s ago (cooldownSeconds {cooldown:g})"
    if ctx.to_node is not None:
        rec = ctx.history.last_eviction(wl, ctx.to_node, since)
        if rec is not None:
            return (
                f"would move {wl} back to {ctx.to_node}, from which it was evicted "
                f"{ctx.now_s - rec.at_s:.0f} s ago (cooldownSeconds {cooldown:g})"
            )
    return None


def guard_infeasible(pod: PodInfo, ctx: GuardContext) -> str | None:
    """The pod must fit on at least one other node: resources (policy.lowlevel.resource_fit_failures),
    taints, nodeSelector, cordon, readiness, pod count (policy.lowlevel.node_admits), and our own
    placement policy's ``filter``."""
    others = [n.name for n in ctx.snapshot.nodes if n.name != pod.node_name]
    if not others:
        return "no other node in the cluster"
    index = ctx.index if ctx.index is not None else ClusterIndex.build(ctx.snapshot)
    failed: dict[str, str] = {}
    nodes = {n.name: n for n in ctx.snapshot.nodes}
    for name in others:
        i = index.node_pos.get(name)
        why = node_admits(pod, nodes[name], int(index.pod_count[i]) if i is not None else None)
        if why is not None:
            failed[name] = why
    rest = [n for n in others if n not in failed]
    if rest:
        failed.update(resource_fit_failures(pod, rest, index))
        rest = [n for n in rest if n not in failed]
    if rest and ctx.placement is not None:
        failed.update(ctx.placement.filter(pod, rest, index))
        rest = [n for n in rest if n not in failed]
    if rest:
        return None
    shown = "; ".join(f"{n}: {failed[n]}" for n in sorted(failed)[:3])
    more = f"; and {len(failed) - 3} more" if len(failed) > 3 else ""
    return f"no other node can take it ({shown}{more})"


GuardFn = Callable[[PodInfo, GuardContext], "str | None"]

#: The guards, in the order they run (cheap facts of the pod first, the feasibility search last).
GUARDS: tuple[tuple[str, GuardFn], ...] = (
    ("mirror", guard_mirror),
    ("daemonset", guard_daemonset),
    ("no_controller", guard_no_controller),
    ("excluded_namespace", guard_excluded_namespace),
    ("system_critical", guard_system_critical),
    ("local_storage", guard_local_storage),
    ("terminating", guard_terminating),
    ("unbound", guard_unbound),
    ("pdb", guard_pdb),
    ("pdb_refused", guard_pdb_refused),
    ("cap_node", guard_cap_node),
    ("cap_namespace", guard_cap_namespace),
    ("cap_total", guard_cap_total),
    ("cooldown", guard_cooldown),
    ("infeasible", guard_infeasible),
)
GUARD_NAMES: tuple[str, ...] = tuple(name for name, _fn in GUARDS)


def check_guards(pod: PodInfo, ctx: GuardContext, skip: Sequence[str] = ()) -> list[Blocker]:
    """Run every guard (except those named in ``skip``) and return the ones that block, in :data:`GUARDS` order.
    A guard that raises blocks too (fail closed), with the exception as its reason."""
    out = []
    for name, fn in GUARDS:
        if name in skip:
            continue
        try:
            why = fn(pod, ctx)
        except Exception as exc:  # noqa: BLE001 - fail closed on any guard failure
            why = f"guard failed: {type(exc).__name__}: {exc}"
        if why is not None:
            out.append(Blocker(name, why))
    return out


def eviction_blockers(
    pod: PodInfo,
    snapshot: ClusterSnapshot,
    config: DeschedulerConfiguration,
    ledger: CycleLedger,
    *,
    history: EvictionHistory | None = None,
    now_s: float | None = None,
    placement: PlacementPolicy | None = None,
    index: ClusterIndex | None = None,
    to_node: str | None = None,
) -> list[str]:
    """Every reason not to evict ``pod`` now, as ``"guard: reason"`` strings; empty = may evict.

    ``snapshot`` must be fresh (re-read just before the eviction); see :class:`GuardContext` for the
    keyword arguments."""
    ctx = GuardContext(snapshot, config, ledger, history, now_s, placement, index, to_node)
    return [str(b) for b in check_guards(pod, ctx)]
