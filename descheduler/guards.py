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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from policy.config import describe_utf8_error
from policy.highlevel import SYSTEM_CRITICAL_CLASSES, SYSTEM_CRITICAL_PRIORITY, SchedulerModel
from policy.index import ClusterIndex
from policy.lowlevel import PlacementPolicy, node_admits, resource_fit_failures
from policy.state import ClusterSnapshot, NodeInfo, PodDisruptionBudgetInfo, PodInfo

from .config import DeschedulerConfiguration
from .reread import READABLE_OWNER_KINDS, OwnerInfo

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
    "CHEAP_GUARDS",
    "NOT_READ",
    "PdbView",
    "pdb_budget",
    "pdb_counts",
    "LoopHold",
    "detect_loops",
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
        """Count an accepted (or dry-run) eviction of ``pod`` against every cap and every PDB covering it (a pod
        known to be unready takes nothing from a budget: :meth:`record_budgets`)."""
        self.evicted.append(pod.key)
        node = pod.node_name or ""
        self.per_node[node] += 1
        self.per_namespace[pod.namespace] += 1
        self.record_budgets(pod, pdbs)
        self.evicted_from.add((workload_key(pod), node))

    def record_budgets(self, pod: PodInfo, pdbs: Iterable[PodDisruptionBudgetInfo]) -> None:
        """Count an eviction of ``pod`` against the PDBs covering it, unless the pod is known to be unready (it was
        not among the healthy pods the budget counts)."""
        if pod.ready is False:
            return
        for b in pdbs:
            if b.covers(pod):
                self.pdb_evictions[f"{b.namespace}/{b.name}"] += 1

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
        self._latest: dict[tuple[str, str], float] = {}
        self._by_workload: dict[str, list[EvictionRecord]] = {}
        self._reindex()

    def _reindex(self) -> None:
        """(workload, node) → latest eviction time, and workload → its records: O(1) look-ups for the guards."""
        self._latest = {}
        self._by_workload = {}
        for r in self._records:
            k = (r.workload, r.node)
            if r.at_s > self._latest.get(k, -math.inf):
                self._latest[k] = r.at_s
            self._by_workload.setdefault(r.workload, []).append(r)

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
        rec = EvictionRecord(workload_key(pod), node, float(at_s), pod.key)
        self._records.append(rec)
        k = (rec.workload, rec.node)
        if rec.at_s > self._latest.get(k, -math.inf):
            self._latest[k] = rec.at_s
        self._by_workload.setdefault(rec.workload, []).append(rec)
        if self.path is not None:
            self.save()

    def last_eviction(self, workload: str, node: str, since_s: float) -> EvictionRecord | None:
        """The latest eviction of ``workload`` from ``node`` at or after ``since_s``, or ``None``. O(1) when
        there is none (the usual case), else O(evictions of the workload)."""
        at = self._latest.get((workload, node))
        if at is None or at < since_s:
            return None
        best = None
        for r in self._by_workload.get(workload, ()):
            if r.node == node and r.at_s >= since_s and (best is None or r.at_s > best.at_s):
                best = r
        return best

    def of_workload(self, workload: str) -> tuple[EvictionRecord, ...]:
        """Every remembered eviction of ``workload``, oldest first."""
        return tuple(self._by_workload.get(workload, ()))

    def prune(self, before_s: float) -> None:
        """Forget evictions older than ``before_s``."""
        self._records = [r for r in self._records if r.at_s >= before_s]
        self._reindex()

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
class PdbView:
    """A PodDisruptionBudget as re-read before an eviction, with the pods it covers (fresh) and the expected pod
    count of their controllers (``expected_scale``: the sum of the controllers' ``spec.replicas``, ``None`` when
    it could not be worked out; used for ``maxUnavailable`` and percentage ``minAvailable``)."""

    pdb: PodDisruptionBudgetInfo
    pods: tuple[PodInfo, ...]
    expected_scale: int | None = None


class _NotRead:
    def __repr__(self) -> str:
        return "NOT_READ"


#: ``GuardContext.owner`` / ``target`` when the loop did not re-read them (the guards judge the observation).
NOT_READ: object = _NotRead()


@dataclass(frozen=True)
class GuardContext:
    """Everything a guard may read. ``snapshot``: the cycle's observation (for what was not re-read);
    ``history`` / ``now_s``: for the cooldown (``None`` → only this cycle's ledger is consulted);
    ``placement``: our low-level policy, whose ``filter`` the feasibility guard also applies; ``index``: the
    planning view's index (``ClusterIndex.build(snapshot)`` when ``None``); ``to_node``: where the planner hopes
    the pod lands. Fresh reads (:mod:`descheduler.reread`), when the loop made them: ``pdbs`` (the covering
    budgets; ``None``: judge ``snapshot.pdbs`` and ``snapshot.pods``), ``owner`` (the re-read controller, ``None``
    when gone; :data:`NOT_READ` when not re-read), ``target`` (the re-read target node, ``None`` when gone;
    :data:`NOT_READ` when not re-read); ``holds``: workloads on hold after an eviction loop (workload → why);
    ``prediction``: where kube-scheduler would put the replacement (:class:`policy.highlevel.SchedulerModel`,
    ``None``: not predicted); ``steered``: the move is make-before-break (the extender steers the new pod to
    ``to_node`` and the old pod stays until it is Ready: only kube-scheduler's filters are predicted)."""

    snapshot: ClusterSnapshot
    config: DeschedulerConfiguration
    ledger: CycleLedger
    history: EvictionHistory | None = None
    now_s: float | None = None
    placement: PlacementPolicy | None = None
    index: ClusterIndex | None = None
    to_node: str | None = None
    pdbs: tuple[PdbView, ...] | None = None
    owner: OwnerInfo | None | object = NOT_READ
    target: NodeInfo | None | object = NOT_READ
    holds: Mapping[str, str] = field(default_factory=dict)
    prediction: SchedulerModel | None = None
    steered: bool = False


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


def guard_owner(pod: PodInfo, ctx: GuardContext) -> str | None:
    """The re-read controller must exist, be the one the pod names (same UID) and not be going away; only
    :data:`descheduler.reread.READABLE_OWNER_KINDS` are re-read, any other kind is not evicted (fail closed)."""
    if ctx.owner is NOT_READ or pod.owner is None:
        return None
    ref = pod.owner
    if ref.kind not in READABLE_OWNER_KINDS:
        return f"controller kind {ref.kind} is not re-read before evicting (only {', '.join(READABLE_OWNER_KINDS)})"
    own = ctx.owner
    if own is None:
        return f"{ref.kind} {pod.namespace}/{ref.name} is gone: nothing would re-create the pod"
    if not isinstance(own, OwnerInfo):
        return f"{ref.kind} {pod.namespace}/{ref.name} could not be re-read"
    if ref.uid and own.uid and own.uid != ref.uid:
        return f"{ref.kind} {pod.namespace}/{ref.name} was re-created (uid {own.uid}, the pod names {ref.uid})"
    if own.terminating:
        return f"{ref.kind} {pod.namespace}/{ref.name} is being deleted"
    if own.replicas is not None and own.replicas <= 0:
        return f"{ref.kind} {pod.namespace}/{ref.name} is scaled to 0: the pod would not be replaced"
    return None


def _scaled(v: int | str, total: int, what: str) -> int:
    """intstr.GetScaledValueFromIntOrPercent(v, total, roundUp=true). Raises ValueError for a bad value."""
    if isinstance(v, int):
        return v
    s = str(v)
    if not s.endswith("%") or not s[:-1].isdigit():
        raise ValueError(f"{what} {v!r} is neither an integer nor a percentage")
    return -(-int(s[:-1]) * total // 100)


def pdb_counts(view: PdbView) -> tuple[int, int, int] | str:
    """``(healthy, desired, expected)`` of a PodDisruptionBudget, counted from ``view.pods`` as the disruption
    controller does (k8s.io/kubernetes pkg/controller/disruption/disruption.go getExpectedPodCount, countHealthyPods):
    healthy = covered pods that are Ready, not terminating and not in ``status.disruptedPods``; desired =
    ``minAvailable`` (an integer; expected = the covered pods), or ceil(``minAvailable``% × expected scale), or
    expected scale − ``maxUnavailable`` (an integer, or a percentage rounded up), at least 0. A one-line reason
    instead when they cannot be counted (an expected scale that is unknown, a malformed value)."""
    b = view.pdb
    healthy = sum(1 for p in view.pods if p.ready is True and not p.terminating and p.name not in b.disrupted_pods)
    try:
        if b.max_unavailable is not None:
            if view.expected_scale is None:
                return "the controllers' replica count is unknown (maxUnavailable needs it)"
            expected = view.expected_scale
            desired = max(0, expected - _scaled(b.max_unavailable, expected, "maxUnavailable"))
        elif b.min_available is not None:
            if isinstance(b.min_available, int):
                expected, desired = len(view.pods), b.min_available
            else:
                if view.expected_scale is None:
                    return "the controllers' replica count is unknown (a percentage minAvailable needs it)"
                expected = view.expected_scale
                desired = _scaled(b.min_available, expected, "minAvailable")
        else:
            expected, desired = 0, 0
    except ValueError as exc:
        return str(exc)
    return healthy, desired, expected


def pdb_budget(view: PdbView, counts: tuple[int, int, int] | str | None = None) -> tuple[int | None, str]:
    """The disruptions a PodDisruptionBudget allows now (updatePdbStatus): healthy − desired of
    :func:`pdb_counts` (``counts`` when already made), and 0 when the expected count is 0 or the difference is
    negative. Returns ``(allowed, how)``; ``allowed`` is ``None`` (with the reason) when it cannot be computed."""
    counts = pdb_counts(view) if counts is None else counts
    if isinstance(counts, str):
        return None, counts
    healthy, desired, expected = counts
    allowed = healthy - desired
    if expected <= 0 or allowed <= 0:
        allowed = 0
    return allowed, f"{healthy} healthy, {desired} desired of {expected} expected"


def guard_pdb(pod: PodInfo, ctx: GuardContext) -> str | None:
    """Every PodDisruptionBudget covering the pod must allow one more disruption, counting this cycle's
    evictions against it. The budget is the stricter of ``status.disruptionsAllowed`` and the count of
    :func:`pdb_budget` over the fresh pods (a disruption controller that lags cannot over-spend it); a status
    that is missing, or computed for an older spec (``status.observedGeneration`` < ``metadata.generation``),
    blocks (the Eviction API answers 429 then too: pkg/registry/core/pod/storage/eviction.go). A pod covered by
    more than one PDB is blocked: the Eviction API refuses it."""
    if ctx.pdbs is not None:
        views = [v for v in ctx.pdbs if v.pdb.covers(pod)]
    else:
        views = [
            PdbView(b, tuple(p for p in ctx.snapshot.pods if b.covers(p)), _scale_from_snapshot(b, ctx.snapshot))
            for b in ctx.snapshot.pdbs
            if b.covers(pod)
        ]
    if len(views) > 1:
        names = ", ".join(sorted(f"{v.pdb.namespace}/{v.pdb.name}" for v in views))
        return f"covered by more than one PodDisruptionBudget ({names}); the Eviction API refuses it"
    for v in views:
        b = v.pdb
        key = f"{b.namespace}/{b.name}"
        if b.disruptions_allowed is None:
            return f"PodDisruptionBudget {key} has no status.disruptionsAllowed yet"
        if b.generation is not None and (b.observed_generation is None or b.observed_generation < b.generation):
            return (
                f"PodDisruptionBudget {key}: status.observedGeneration {b.observed_generation} is behind "
                f"metadata.generation {b.generation} (its status is not for this spec yet)"
            )
        counts = pdb_counts(v)
        counted, how = pdb_budget(v, counts)
        if counted is None:
            return f"PodDisruptionBudget {key}: cannot count its budget: {how}"
        used = ctx.ledger.pdb_evictions[key]
        if pod.ready is False and not isinstance(counts, str):
            # an unhealthy pod takes nothing from the budget: the Eviction API lets it go while the healthy pods
            # are at least the desired count (unhealthyPodEvictionPolicy IfHealthyBudget, the default;
            # pkg/registry/core/pod/storage/eviction.go)
            healthy, desired, _expected = counts
            if desired > 0 and healthy - used >= desired:
                continue
        allowed = min(b.disruptions_allowed, counted)
        if allowed - used <= 0:
            return (
                f"PodDisruptionBudget {key} allows no more disruptions (status.disruptionsAllowed "
                f"{b.disruptions_allowed}, counted {counted}: {how}; {used} used this cycle)"
            )
    return None


def _scale_from_snapshot(b: PodDisruptionBudgetInfo, snapshot: ClusterSnapshot) -> int | None:
    """The expected scale of a budget's pods from the observed workloads: the sum of ``spec.replicas`` of the
    Deployments / StatefulSets of the services its pods belong to (``None`` when one is not known)."""
    services = {p.service for p in snapshot.pods if b.covers(p) and p.owner is not None}
    total = 0
    for svc in services:
        w = next((w for w in snapshot.workloads if w.namespace == b.namespace and w.service == svc), None)
        if w is None:
            return None
        total += w.replicas
    return total


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
    """The pod's workload was evicted from this node within ``cooldownSeconds`` (or this cycle), or the
    planner wants it on a node the workload was evicted from within that time (a move back)."""
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


def guard_loop_hold(pod: PodInfo, ctx: GuardContext) -> str | None:
    """Loop detection (:func:`detect_loops`): a workload whose pods came back to a node they were evicted from
    is on hold for ``loopDetection.holdSeconds``, whatever made them come back."""
    return ctx.holds.get(workload_key(pod))


def guard_infeasible(pod: PodInfo, ctx: GuardContext) -> str | None:
    """The replacement must be able to go where the move sends it: the target node (re-read when the loop did)
    must exist and admit the pod (:func:`policy.lowlevel.node_admits`: cordon, readiness, taints, nodeSelector,
    pod count), have room for its requests on the planning view (:func:`policy.lowlevel.resource_fit_failures`)
    and pass our placement policy's ``filter``; and kube-scheduler must be predicted to put it there rather than
    back (``ctx.prediction``, :class:`policy.highlevel.SchedulerModel`: node affinity, taints, inter-pod
    (anti-)affinity, topology spread, resources; for a make-before-break move, ``ctx.steered``, its filters only:
    the extender steers the new pod). A move without a target needs some other node that passes the same checks."""
    index = ctx.index if ctx.index is not None else ClusterIndex.build(ctx.snapshot)
    to = ctx.to_node
    if to is None:
        return _any_other_node(pod, ctx, index)
    i = index.node_pos.get(to)
    node = cast(NodeInfo | None, ctx.target if ctx.target is not NOT_READ else None)
    if ctx.target is NOT_READ:
        node = index.snapshot.nodes[i] if i is not None else None
    if node is None:
        return f"target node {to} is gone"
    if to == pod.node_name:
        return f"target node {to} is the pod's own node"
    why = node_admits(pod, node, int(index.pod_count[i]) if i is not None else None)
    if why is None and i is not None:
        why = resource_fit_failures(pod, [to], index).get(to)
    if why is None and ctx.placement is not None:
        why = ctx.placement.filter(pod, [to], index).get(to)
    if why is None and ctx.prediction is not None:
        why = ctx.prediction.rejects(pod, to, index) if ctx.steered else ctx.prediction.undone(pod, to, index)
    if why is not None:
        return f"kube-scheduler would not put the replacement on {to}: {why}"
    return None


def _any_other_node(pod: PodInfo, ctx: GuardContext, index: ClusterIndex) -> str | None:
    others = [n for n in index.node_names if n != pod.node_name]
    if not others:
        return "no other node in the cluster"
    failed: dict[str, str] = {}
    nodes = index.snapshot.nodes
    for name in others:
        i = index.node_pos[name]
        why = node_admits(pod, nodes[i], int(index.pod_count[i]))
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
    ("owner", guard_owner),
    ("pdb", guard_pdb),
    ("pdb_refused", guard_pdb_refused),
    ("cap_node", guard_cap_node),
    ("cap_namespace", guard_cap_namespace),
    ("cap_total", guard_cap_total),
    ("cooldown", guard_cooldown),
    ("loop_hold", guard_loop_hold),
    ("infeasible", guard_infeasible),
)
GUARD_NAMES: tuple[str, ...] = tuple(name for name, _fn in GUARDS)

#: The guards that read nothing but the pod, the configuration, the ledger and the history: O(1), no API call.
#: The loop runs them before proposing a pod and before re-reading anything (a blocked move costs no request).
CHEAP_GUARDS: tuple[str, ...] = (
    "mirror",
    "daemonset",
    "no_controller",
    "excluded_namespace",
    "system_critical",
    "local_storage",
    "terminating",
    "unbound",
    "pdb_refused",
    "cap_node",
    "cap_namespace",
    "cap_total",
    "cooldown",
    "loop_hold",
)


def check_guards(
    pod: PodInfo, ctx: GuardContext, skip: Sequence[str] = (), only: Sequence[str] | None = None
) -> list[Blocker]:
    """Run every guard (except those named in ``skip``; only those in ``only`` when given) and return the ones
    that block, in :data:`GUARDS` order. A guard that raises blocks too (fail closed), with the exception as its
    reason."""
    out = []
    for name, fn in GUARDS:
        if name in skip or (only is not None and name not in only):
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
    ctx = GuardContext(
        snapshot, config, ledger, history, now_s, placement, index, to_node, owner=NOT_READ, target=NOT_READ
    )
    return [str(b) for b in check_guards(pod, ctx)]


# ---- loop detection ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoopHold:
    """A workload put on hold: ``workload`` (see :func:`workload_key`), the ``node`` its pod came back to, the
    eviction it came back after (``evicted_at_s``), the pod that came back, and until when (``until_s``)."""

    workload: str
    node: str
    evicted_at_s: float
    pod: str
    until_s: float

    def reason(self, now_s: float) -> str:
        return (
            f"eviction loop: {self.pod} came back to {self.node}, from which {self.workload} was evicted "
            f"{max(0.0, now_s - self.evicted_at_s):.0f} s before; on hold for {max(0.0, self.until_s - now_s):.0f} s"
        )


def detect_loops(
    snapshot: ClusterSnapshot, history: EvictionHistory | None, now_s: float, window_s: float, hold_s: float
) -> list[LoopHold]:
    """Workloads whose pods came back where they were evicted from: a pod of the workload, bound to node N and
    not terminating, created at or after (to the second: ``creationTimestamp`` has 1 s resolution) an eviction
    of that workload from N in the last ``window_s`` seconds. Whatever the cause (kube-scheduler's rules that our
    model lacks, another controller, a node selector), evicting it again would loop. O(P) per cycle plus the
    workloads' history. Holds already recorded in ``history`` (section ``loopHolds``) are returned while active."""
    if history is None or window_s <= 0 or hold_s <= 0:
        return []
    holds: dict[str, LoopHold] = {}
    for doc in history.sections.get("loopHolds") or ():
        try:
            h = LoopHold(
                str(doc["workload"]),
                str(doc["node"]),
                float(doc["evicted_at_s"]),
                str(doc["pod"]),
                float(doc["until_s"]),
            )
        except (KeyError, TypeError, ValueError):
            continue
        if h.until_s > now_s:
            holds[h.workload] = h
    since = now_s - window_s
    for p in snapshot.pods:
        if p.node_name is None or p.terminating or p.owner is None:
            continue
        wl = workload_key(p)
        if wl in holds:
            continue
        at = history.last_eviction(wl, p.node_name, since)
        if at is None or p.key == at.pod:
            continue
        if p.created_s >= math.floor(at.at_s):
            holds[wl] = LoopHold(wl, p.node_name, at.at_s, p.key, now_s + hold_s)
    return sorted(holds.values(), key=lambda h: h.workload)
