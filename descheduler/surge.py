"""Make-before-break moves: the new pod comes up on its target node and is Ready before the old one goes, so a move
loses no request and no capacity (DESIGN.md section 5, "Moves").

A move of a Deployment's pod ``P`` from node ``A`` to node ``B`` where our autoscaler owns the replica count:

1. **announce** (the cycle that plans it, :meth:`SurgeDriver.start`): a :class:`policy.intent.PendingMove` record
   ("a new pod of this service goes to ``B``") published next to the intent in the embedding cache, so the extender
   scores ``B`` highest for the ReplicaSet's new pod. The extender copies the cache every ``cache.refreshSeconds``
   (10 s by default), so the scale-up waits ``moves.steerDelaySeconds`` for the record to get there (0: at once, as
   in the simulator, whose extender reads the record when it scores);
2. **surge** (the first cycle after that delay): ``deployments/scale`` from ``R`` to ``R + 1`` (GET, then PUT with
   the ``resourceVersion`` read and only when ``spec.replicas`` is still the ``R`` observed);
3. **drain** (a later cycle, :func:`decide`): once a new pod of the Deployment is Ready on ``B``, ``P`` is annotated
   ``controller.kubernetes.io/pod-deletion-cost: "-2147483648"`` (a PATCH of its metadata) and the Deployment is
   scaled back down by one: the ReplicaSet controller deletes the pods of lowest deletion cost first among pods
   equally scheduled, running and ready (k8s.io/kubernetes pkg/controller/controller_utils.go ``ActivePodsWithRanks``;
   https://kubernetes.io/docs/concepts/workloads/controllers/replicaset/#pod-deletion-cost, KEP-2255), so ``P`` goes,
   by a graceful termination, not an eviction;
4. **complete** (the next cycle): ``P`` is gone and the new pod runs on ``B``. If the ReplicaSet deleted the new pod
   instead (its informer had not seen the annotation yet: the docs call the cost best-effort), the move is aborted
   (``wrong_pod_deleted``) and ``P``'s annotation removed.

**Abort** (counted with its reason, :data:`ABORT_REASONS`): the new pod was bound to another node than ``B``
(``landed_elsewhere``: it is annotated and the Deployment scaled back, so it is the one deleted), or is not Ready on
``B`` by ``moves.surgeTimeoutSeconds`` (``not_ready``: likewise), ``P`` went away by itself (``source_gone``: the
extra replica is scaled away), the Deployment is gone (``workload_gone``), an API call failed past the deadline
(``scale_failed``, ``annotate_failed``), or the old pod was not removed by then (``not_removed``); an announced move
whose Deployment an HPA took meanwhile is dropped (``hpa``).

**Where a surge is not possible** (:data:`SURGE_REFUSALS`, decided without an API call by
:meth:`SurgeDriver.unavailable`, then on fresh objects): ``moves.strategy: evict``; no mover (no scale subresource,
or ``--once`` without a ``stateFile``: a surge spans cycles); ``scaling.enabled`` false; the pod's controller is not a
Deployment's ReplicaSet; the Deployment is not one ``planner.autoscaler.workloads`` names; a rollout in progress (its
pods in more than one ReplicaSet); ``scaling.maxReplicas`` reached; a surge of the workload already pending;
``moves.maxPending`` surges pending; a HorizontalPodAutoscaler targets the Deployment (``hpa``: its controller owns
``spec.replicas``); a ResourceQuota of the namespace has no room for one more such pod (``quota``); a
PodDisruptionBudget covering the pod would allow no disruption even with the new pod Ready (``pdb``: e.g.
``maxUnavailable: 0``). The executor then falls back as ``moves.fallback`` says (:mod:`descheduler.loop`).

The pending moves live in the eviction history's state file (section ``pendingMoves``, :class:`SurgeBook`), so a
CronJob's next run finishes what the last one began; a dry run reads them and changes nothing. The API slice is
:class:`MoverApi` (the scale subresource of :class:`descheduler.scale.ScaleApi`, a metadata PATCH of pods, a LIST of
ResourceQuotas); :class:`ApiMover` over it is the one implementation, ``descheduler.kube.KubeMover`` its live client and
``policy.sim.subresources.SimMover`` the simulator's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

from policy.intent import PendingMove
from policy.observe import parse_cpu_m, parse_memory_bytes
from policy.state import ClusterSnapshot, PodInfo, Resources, WorkloadInfo

from .events import ObjectRef
from .guards import EvictionHistory, HistoryError, PdbView, pdb_budget
from .scale import ApiScaler, ScaleApi, ScaleApiError, ScaleResult, hpa_targeting

__all__ = [
    "ANNOTATION_DELETION_COST",
    "DELETION_COST_FIRST",
    "SURGE_REFUSALS",
    "ABORT_REASONS",
    "SURGE_OUTCOMES",
    "MoverApi",
    "ApiMover",
    "SurgeMove",
    "SurgeEvent",
    "Step",
    "SurgeBook",
    "deployment_of",
    "deployment_named",
    "workload_pods",
    "decide",
    "quota_blocker",
    "surge_pdb_blocker",
    "SurgeDriver",
]

#: The annotation the ReplicaSet controller ranks pods by on a scale-down (lower first; int32; default 0).
ANNOTATION_DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
#: The value put on the pod a scale-down must remove: the lowest int32, below any cost a user sets.
DELETION_COST_FIRST = -2147483648

#: Why a make-before-break move is not possible for a pod (the ``reason`` of ``moves_refused`` / of the fallback).
SURGE_REFUSALS: tuple[str, ...] = (
    "strategy",
    "no_mover",
    "scaling_disabled",
    "not_deployment",
    "unmanaged",
    "rollout",
    "max_replicas",
    "pending",
    "max_pending",
    "hpa",
    "quota",
    "pdb",
)
#: Why a surge in progress was given up (the ``reason`` of ``moves_aborted``).
ABORT_REASONS: tuple[str, ...] = (
    "landed_elsewhere",
    "not_ready",
    "source_gone",
    "wrong_pod_deleted",
    "surge_pod_gone",
    "not_removed",
    "workload_gone",
    "scale_failed",
    "annotate_failed",
    "hpa",
)
SurgeOutcome = Literal["announced", "started", "draining", "completed", "aborted"]
#: What :class:`SurgeEvent` reports: a move was announced to the extender, its Deployment scaled up (the surge began),
#: its old pod marked and scaled away, it completed, it aborted.
SURGE_OUTCOMES: tuple[str, ...] = ("announced", "started", "draining", "completed", "aborted")


# ---- the API slice -------------------------------------------------------------------------------------------------


class MoverApi(ScaleApi, Protocol):
    """The slice of the Kubernetes API a make-before-break move uses, raw camelCase JSON, each call raising
    :class:`descheduler.scale.ScaleApiError` (HTTP status, one-line message) on failure: the scale subresource
    (:class:`descheduler.scale.ScaleApi`) and

    - ``patch_pod_annotations(namespace, name, annotations)``: a merge PATCH ``{"metadata": {"annotations": {...}}}``
      of the pod (a value ``None`` removes the key), answering the pod;
    - ``list_resource_quotas(namespace)``: the namespace's ResourceQuota objects (their ``status.hard`` / ``used``).
    """

    def patch_pod_annotations(
        self, namespace: str, name: str, annotations: Mapping[str, str | None]
    ) -> dict[str, Any]: ...

    def list_resource_quotas(self, namespace: str) -> list[dict[str, Any]]: ...


def _split(key: str) -> tuple[str, str]:
    ns, _, name = key.partition("/")
    return ns, name


class ApiMover:
    """What a make-before-break move does to the cluster, over a :class:`MoverApi` (module docstring): scale with
    the live :class:`descheduler.scale.ApiScaler` (HPA refused, ``resourceVersion`` carried, ``expect``ed count
    checked), mark or unmark a pod's deletion cost, check the namespace's quotas. ``dry_run=True`` reads (HPAs, the
    scale, the quotas) and writes nothing; ``allowed``: writes only while it returns true (e.g. the leader election's
    ``is_leader``), else they fail with ``why`` (fail closed). ``calls``: ``(verb, object, outcome)`` of every write."""

    def __init__(self, api: MoverApi, *, dry_run: bool = False, allowed: Any = None, why: str = "not allowed"):
        self.api = api
        self.dry_run = dry_run
        self.allowed = allowed
        self.why = why
        self.scaler = ApiScaler(api, dry_run=dry_run)
        self.calls: list[tuple[str, str, str]] = []

    def dry_run_twin(self) -> ApiMover:
        """The same mover, reading only."""
        twin = ApiMover(self.api, dry_run=True)
        twin.calls = self.calls
        return twin

    def gated(self, allowed: Any, why: str) -> ApiMover:
        """The same mover, writing only while ``allowed()`` (:class:`descheduler.scale.GatedScaler`'s rule)."""
        g = ApiMover(self.api, dry_run=self.dry_run, allowed=allowed, why=why)
        g.calls = self.calls
        return g

    def _denied(self) -> bool:
        return self.allowed is not None and not self.dry_run and not self.allowed()

    def scale(self, workload: str, replicas: int, expect: int) -> ScaleResult:
        """``deployments/scale`` of ``workload`` (``namespace/name``) to ``replicas``, only while ``spec.replicas`` is
        still ``expect`` (else ``error``, nothing written); ``refused_hpa`` when an HPA targets it."""
        if self._denied():
            self.calls.append(("scale", workload, "error"))
            return ScaleResult(workload, "error", None, int(replicas), message=f"not scaled: {self.why}")
        res = self.scaler.scale(workload, replicas, expect=expect)
        self.calls.append(("scale", workload, res.outcome))
        return res

    def mark(self, pod_key: str, cost: int | None) -> tuple[bool, str]:
        """Set ``pod_key``'s deletion cost to ``cost`` (``None``: remove the annotation). Returns ``(done, message)``;
        a pod that is gone (404) counts as done (nothing is left to rank)."""
        ns, name = _split(pod_key)
        if self.dry_run:
            return True, f"dry run: would annotate {pod_key} {ANNOTATION_DELETION_COST}={cost}"
        if self._denied():
            self.calls.append(("annotate", pod_key, "error"))
            return False, f"not annotated: {self.why}"
        value = None if cost is None else str(int(cost))
        try:
            self.api.patch_pod_annotations(ns, name, {ANNOTATION_DELETION_COST: value})
        except ScaleApiError as exc:
            if exc.status == 404:
                self.calls.append(("annotate", pod_key, "not_found"))
                return True, f"{pod_key} is gone"
            self.calls.append(("annotate", pod_key, "error"))
            return False, f"cannot annotate {pod_key}: {exc}"
        self.calls.append(("annotate", pod_key, "ok"))
        return True, f"{pod_key}: {ANNOTATION_DELETION_COST}={value}"

    def hpa_owner(self, workload: str) -> str | None:
        """The HorizontalPodAutoscaler targeting Deployment ``workload``, or ``None``. Raises :class:`ScaleApiError`
        when the HPAs cannot be listed."""
        ns, name = _split(workload)
        return hpa_targeting(self.api.list_hpas(ns), name)

    def quota_blocker(self, namespace: str, requests: Resources, limits: Resources) -> str | None:
        """Why a ResourceQuota of ``namespace`` has no room for one more pod with these requests and limits
        (:func:`quota_blocker`), ``None`` when all have. Raises :class:`ScaleApiError` when they cannot be listed."""
        return quota_blocker(self.api.list_resource_quotas(namespace), requests, limits)


# ---- quota and PDB checks ------------------------------------------------------------------------------------------


def _quota_needs(requests: Resources, limits: Resources) -> dict[str, tuple[float, Any]]:
    cpu, mem = float(requests.cpu_m), float(requests.memory_bytes)
    return {
        "pods": (1.0, float),
        "count/pods": (1.0, float),
        "requests.cpu": (cpu, parse_cpu_m),
        "cpu": (cpu, parse_cpu_m),
        "requests.memory": (mem, parse_memory_bytes),
        "memory": (mem, parse_memory_bytes),
        "limits.cpu": (float(limits.cpu_m), parse_cpu_m),
        "limits.memory": (float(limits.memory_bytes), parse_memory_bytes),
    }


def quota_blocker(quotas: Iterable[Mapping[str, Any]], requests: Resources, limits: Resources) -> str | None:
    """Why one more pod with ``requests`` / ``limits`` would exceed one of ``quotas`` (ResourceQuota JSON:
    ``status.hard`` minus ``status.used`` on ``pods``, ``count/pods``, ``requests.cpu`` / ``cpu``, ``requests.memory``
    / ``memory``, ``limits.cpu``, ``limits.memory``; the API server's quota admission refuses such a pod, so the
    ReplicaSet could not create it), ``None`` when it fits. A quota with ``scopes`` or a ``scopeSelector`` is assumed
    to apply (fail closed); one without a status yet, or with a value that cannot be parsed, blocks."""
    needs = _quota_needs(requests, limits)
    for q in quotas:
        name = str((q.get("metadata") or {}).get("name", "?"))
        status = q.get("status") or {}
        hard, used = status.get("hard"), status.get("used") or {}
        if not isinstance(hard, Mapping):
            return f"ResourceQuota {name} has no status.hard yet"
        for key, (need, parse) in needs.items():
            if key not in hard or need <= 0:
                continue
            try:
                room = float(parse(str(hard[key]))) - float(parse(str(used.get(key, "0"))))
            except (TypeError, ValueError):
                return f"ResourceQuota {name}: cannot read {key} ({hard[key]!r} hard, {used.get(key)!r} used)"
            if need > room:
                return f"ResourceQuota {name}: {key} has room for {room:g}, one more pod needs {need:g}"
    return None


def surge_pdb_blocker(pod: PodInfo, views: Sequence[PdbView]) -> str | None:
    """Why removing ``pod`` once its replacement is Ready would break a PodDisruptionBudget covering it: the budget
    counted as the disruption controller does (:func:`descheduler.guards.pdb_budget`) over the fresh pods plus the new
    one (Ready) and an expected scale one higher must allow at least one disruption. The scale-down does not go
    through the Eviction API, so this is the descheduler keeping the operator's budget itself."""
    for v in views:
        if not v.pdb.covers(pod):
            continue
        extra = replace(pod, name=f"{pod.name}-surge", uid="", ready=True, terminating=False)
        after = PdbView(v.pdb, (*v.pods, extra), None if v.expected_scale is None else v.expected_scale + 1)
        allowed, how = pdb_budget(after)
        key = f"{v.pdb.namespace}/{v.pdb.name}"
        if allowed is None:
            return f"PodDisruptionBudget {key}: cannot count its budget: {how}"
        if allowed < 1:
            return f"PodDisruptionBudget {key} would allow no disruption even with the new pod Ready ({how})"
    return None


# ---- the Deployment of a pod ---------------------------------------------------------------------------------------


def _owned_by(pod: PodInfo, w: WorkloadInfo) -> bool:
    """Whether ``pod``'s ReplicaSet is one of Deployment ``w``'s: same namespace, ``w``'s selector matching the pod,
    and the ReplicaSet named ``<deployment>-<pod-template-hash>`` (the Deployment controller's naming; with no
    ``pod-template-hash`` label, any ``<deployment>-`` prefix)."""
    o = pod.owner
    if o is None or o.kind != "ReplicaSet" or w.kind != "Deployment" or w.namespace != pod.namespace:
        return False
    h = pod.labels.get("pod-template-hash")
    named = o.name == f"{w.name}-{h}" if h else o.name.startswith(w.name + "-")
    return named and w.selector.matches(pod.labels)


def deployment_of(pod: PodInfo, snapshot: ClusterSnapshot) -> WorkloadInfo | None:
    """The Deployment whose ReplicaSet controls ``pod`` (:func:`_owned_by`), ``None`` otherwise."""
    return next((w for w in snapshot.workloads if _owned_by(pod, w)), None)


def deployment_named(snapshot: ClusterSnapshot, key: str) -> WorkloadInfo | None:
    """The Deployment ``key`` (``namespace/name``) of ``snapshot``, or ``None``."""
    ns, name = _split(key)
    found = (w for w in snapshot.workloads if w.kind == "Deployment" and w.namespace == ns and w.name == name)
    return next(found, None)


def workload_pods(w: WorkloadInfo, snapshot: ClusterSnapshot) -> list[PodInfo]:
    """The pods of Deployment ``w`` in ``snapshot`` (their ReplicaSet is one of ``w``'s: :func:`_owned_by`)."""
    return [p for p in snapshot.pods if _owned_by(p, w)]


# ---- the record of a move in progress ------------------------------------------------------------------------------

Phase = Literal["announced", "surging", "draining"]


@dataclass(frozen=True)
class SurgeMove:
    """One make-before-break move in progress (kept in the state file): the Deployment ``workload``
    (``namespace/name``) and ``service``; the old pod ``pod`` (key) and its ``pod_uid`` on ``from_node``; the target
    ``to_node``; ``known``: the keys of the Deployment's pods when it began (a new pod is any other);
    ``started_at_s`` / ``deadline_s`` (the descheduler's clock); ``phase``: ``announced`` (the record published, the
    scale-up waiting for ``moves.steerDelaySeconds``), ``surging`` (scaled up, waiting for a new pod Ready on the
    target) or ``draining`` (the old pod marked and the Deployment scaled back: waiting for it to go); ``keep``: the
    new pod kept (draining); ``gain`` / ``reason``: the planner's; ``retries``: failed API calls."""

    workload: str
    service: str
    pod: str
    pod_uid: str
    from_node: str
    to_node: str
    known: tuple[str, ...]
    started_at_s: float
    deadline_s: float
    phase: Phase = "surging"
    keep: str = ""
    gain: float = 0.0
    reason: str = ""
    retries: int = 0

    def record(self) -> PendingMove:
        """The :class:`policy.intent.PendingMove` the extender steers the new pod with (until the deadline)."""
        ns, name = _split(self.workload)
        return PendingMove(ns, self.service, name, self.to_node, self.deadline_s, _split(self.pod)[1])

    def to_json(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "service": self.service,
            "pod": self.pod,
            "pod_uid": self.pod_uid,
            "from_node": self.from_node,
            "to_node": self.to_node,
            "known": list(self.known),
            "started_at_s": self.started_at_s,
            "deadline_s": self.deadline_s,
            "phase": self.phase,
            "keep": self.keep,
            "gain": self.gain,
            "reason": self.reason,
            "retries": self.retries,
        }

    @classmethod
    def from_json(cls, doc: Any) -> SurgeMove:
        """The inverse of :meth:`to_json`. Raises ValueError naming the field for a malformed document."""
        if not isinstance(doc, Mapping):
            raise ValueError(f"expected an object, got {type(doc).__name__}")
        try:
            phase = str(doc.get("phase", "surging"))
            if phase not in ("announced", "surging", "draining"):
                raise ValueError(f"phase: expected announced, surging or draining, got {phase!r}")
            known = doc.get("known") or []
            if not isinstance(known, list):
                raise ValueError("known: expected a list of pod keys")
            m = cls(
                str(doc["workload"]),
                str(doc["service"]),
                str(doc["pod"]),
                str(doc.get("pod_uid", "")),
                str(doc["from_node"]),
                str(doc["to_node"]),
                tuple(str(k) for k in known),
                float(doc["started_at_s"]),
                float(doc["deadline_s"]),
                phase,  # type: ignore[arg-type]
                str(doc.get("keep", "")),
                float(doc.get("gain", 0.0)),
                str(doc.get("reason", "")),
                int(doc.get("retries", 0)),
            )
        except KeyError as exc:
            raise ValueError(f"missing field {exc.args[0]!r}") from None
        except (TypeError, ValueError) as exc:
            raise ValueError(str(exc)) from None
        m.record()  # validates the names and the deadline
        return m


@dataclass(frozen=True)
class SurgeEvent:
    """What happened to one make-before-break move this cycle: ``outcome`` (:data:`SURGE_OUTCOMES`), its ``reason``
    (an abort's: :data:`ABORT_REASONS`), a one-line ``message``."""

    workload: str
    pod: str
    from_node: str
    to_node: str
    outcome: SurgeOutcome
    reason: str = ""
    message: str = ""

    @staticmethod
    def of(m: SurgeMove, outcome: SurgeOutcome, reason: str = "", message: str = "") -> SurgeEvent:
        return SurgeEvent(m.workload, m.pod, m.from_node, m.to_node, outcome, reason, message)

    def to_json(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "pod": self.pod,
            "from_node": self.from_node,
            "to_node": self.to_node,
            "outcome": self.outcome,
            "reason": self.reason,
            "message": self.message,
        }


# ---- the state machine ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """What :func:`decide` says to do with a move this cycle: ``action`` ``wait`` (nothing yet), ``drain`` (mark
    ``mark`` — the old pod — and scale down by one, keeping ``keep``), ``abort`` (with ``reason``: mark ``mark`` when
    set, scale down by one when ``scale_down``, remove the old pod's mark when ``unmark``), ``complete``; ``message``:
    one line."""

    action: Literal["wait", "drain", "abort", "complete"]
    reason: str = ""
    mark: str = ""
    keep: str = ""
    scale_down: bool = False
    unmark: bool = False
    message: str = ""


def _draining(m: SurgeMove, source_alive: bool, kept: PodInfo | None, now_s: float) -> Step:
    if not source_alive:
        if kept is not None:
            return Step("complete", message=f"{m.pod} is gone; {kept.key} serves on {m.to_node}")
        return Step("abort", "surge_pod_gone", message=f"{m.pod} is gone, and so is the new pod {m.keep}")
    if kept is None:
        return Step(
            "abort",
            "wrong_pod_deleted",
            unmark=True,
            message=f"the ReplicaSet removed the new pod {m.keep} instead of {m.pod} (its cost was not seen yet)",
        )
    if now_s >= m.deadline_s:
        return Step("abort", "not_removed", unmark=True, message=f"{m.pod} is still running after the scale-down")
    return Step("wait", message=f"waiting for {m.pod} to go")


def decide(m: SurgeMove, snapshot: ClusterSnapshot, now_s: float) -> Step:
    """The next step of move ``m`` from the cluster as observed (module docstring; no API call)."""
    w = deployment_named(snapshot, m.workload)
    if w is None:
        return Step("abort", "workload_gone", message=f"Deployment {m.workload} is gone")
    pods = workload_pods(w, snapshot)
    source = next((p for p in pods if p.key == m.pod and (not m.pod_uid or not p.uid or p.uid == m.pod_uid)), None)
    source_alive = source is not None and not source.terminating
    new = sorted((p for p in pods if p.key not in m.known and not p.terminating), key=lambda p: (p.created_s, p.key))
    if m.phase == "announced":  # the driver scales it up once the record has reached the extender
        return Step("wait", message=f"announced: the new pod of {m.service} goes to {m.to_node}")
    if m.phase == "draining":
        return _draining(m, source_alive, next((p for p in new if p.key == m.keep), None), now_s)
    ready_there = [p for p in new if p.node_name == m.to_node and p.ready is True]
    if not source_alive:
        spare = [p for p in new if p not in ready_there[:1]]
        return Step(
            "abort",
            "source_gone",
            mark=spare[-1].key if spare else "",
            scale_down=True,
            message=f"{m.pod} went away by itself; the extra replica is scaled away",
        )
    if ready_there:
        keep = ready_there[0]
        return Step("drain", mark=m.pod, keep=keep.key, scale_down=True, message=f"{keep.key} is Ready on {m.to_node}")
    elsewhere = [p for p in new if p.node_name is not None and p.node_name != m.to_node]
    waiting = [p for p in new if p.node_name is None or p.node_name == m.to_node]
    if elsewhere and not waiting:
        p = elsewhere[-1]
        return Step(
            "abort",
            "landed_elsewhere",
            mark=p.key,
            scale_down=True,
            message=f"the new pod {p.key} was bound to {p.node_name}, not {m.to_node}",
        )
    if now_s >= m.deadline_s:
        left = waiting or elsewhere
        return Step(
            "abort",
            "not_ready",
            mark=left[-1].key if left else "",
            scale_down=True,
            message=f"no new pod Ready on {m.to_node} within {m.deadline_s - m.started_at_s:.0f} s",
        )
    return Step("wait", message=f"waiting for a new pod Ready on {m.to_node}")


# ---- the book of pending moves -------------------------------------------------------------------------------------


@dataclass
class SurgeBook:
    """The pending make-before-break moves (:class:`SurgeMove`), kept in ``history``'s section :attr:`SECTION` of the
    state file (``None``: in memory only). :meth:`load` reads them (a malformed entry is dropped with a warning: the
    Deployment it scaled keeps one replica more until the autoscaler next sets its count); :meth:`save` writes them
    (raises :class:`descheduler.guards.HistoryError`), never in a ``dry_run``."""

    moves: list[SurgeMove] = field(default_factory=list)
    history: EvictionHistory | None = None
    dry_run: bool = False
    warnings: list[str] = field(default_factory=list)

    SECTION = "pendingMoves"

    @classmethod
    def load(cls, history: EvictionHistory | None, dry_run: bool = False) -> SurgeBook:
        book = cls(history=history, dry_run=dry_run)
        docs = history.sections.get(cls.SECTION) if history is not None else None
        for i, d in enumerate(docs if isinstance(docs, list) else ()):
            try:
                book.moves.append(SurgeMove.from_json(d))
            except ValueError as exc:
                book.warnings.append(f"state file: {cls.SECTION}[{i}]: dropped: {exc}")
        return book

    def __len__(self) -> int:
        return len(self.moves)

    def of(self, workload: str) -> SurgeMove | None:
        return next((m for m in self.moves if m.workload == workload), None)

    def put(self, m: SurgeMove) -> None:
        """Add ``m``, or replace the move of the same workload."""
        self.moves = [x for x in self.moves if x.workload != m.workload] + [m]

    def drop(self, m: SurgeMove) -> None:
        self.moves = [x for x in self.moves if x.workload != m.workload]

    def save(self) -> None:
        """Write the moves to the state file (nothing in a dry run or without a history)."""
        if self.dry_run or self.history is None:
            return
        self.history.set_section(self.SECTION, [m.to_json() for m in self.moves])

    def records(self) -> tuple[PendingMove, ...]:
        """The moves announced or still surging, as the records the extender steers new pods with."""
        return tuple(m.record() for m in self.moves if m.phase in ("announced", "surging"))

    def surging(self) -> dict[str, SurgeMove]:
        """Workload → its move still surging (its replica target is one more while it is)."""
        return {m.workload: m for m in self.moves if m.phase == "surging"}


# ---- one cycle's driver --------------------------------------------------------------------------------------------


class SurgeDriver:
    """The make-before-break side of one descheduling cycle (used by :class:`descheduler.loop.MoveExecutor` and
    :func:`descheduler.loop.run_once`): the ``book`` of pending moves, the ``mover`` (``None``: no surge is possible),
    the ``config``, the cycle's ``snapshot`` and ``now_s``, the Event ``recorder``. ``events``: what happened to moves
    this cycle (:class:`SurgeEvent`); ``started``: workloads whose surge began this cycle; ``unwritable``: the state
    file could not be written (the cycle stops: fail closed)."""

    def __init__(
        self,
        book: SurgeBook,
        mover: ApiMover | None,
        config: Any,
        snapshot: ClusterSnapshot,
        now_s: float,
        *,
        recorder: Any = None,
    ):
        self.book = book
        self.mover = mover
        self.config = config
        self.snapshot = snapshot
        self.now_s = float(now_s)
        self.recorder = recorder
        self.events: list[SurgeEvent] = []
        self.started: set[str] = set()
        self.scaled_down: set[str] = set()
        self.unwritable: str | None = None
        self._deployment: dict[str, WorkloadInfo | None] = {}
        self._pods: dict[str, list[PodInfo]] = {}

    # ---- which pods may move by surge ----------------------------------------------------------------------

    def deployment(self, pod: PodInfo) -> WorkloadInfo | None:
        if pod.key not in self._deployment:
            self._deployment[pod.key] = deployment_of(pod, self.snapshot)
        return self._deployment[pod.key]

    def pods_of(self, w: WorkloadInfo) -> list[PodInfo]:
        key = f"{w.namespace}/{w.name}"
        if key not in self._pods:
            self._pods[key] = workload_pods(w, self.snapshot)
        return self._pods[key]

    def unavailable(self, pod: PodInfo) -> str | None:
        """Why ``pod`` cannot move by surge, from the observation alone (no API call; :data:`SURGE_REFUSALS` up to
        ``max_pending``), or ``None``."""
        cfg = self.config
        if cfg.moves.strategy == "evict":
            return "strategy"
        if self.mover is None:
            return "no_mover"
        if not cfg.scaling.enabled:
            return "scaling_disabled"
        w = self.deployment(pod)
        if w is None:
            return "not_deployment"
        key = f"{w.namespace}/{w.name}"
        a = cfg.planner.autoscaler
        if a is not None and a.workloads is not None and key not in a.workloads:
            return "unmanaged"
        if len({p.owner.name for p in self.pods_of(w) if p.owner is not None and not p.terminating}) > 1:
            return "rollout"
        if w.replicas + 1 > cfg.scaling.max_replicas:
            return "max_replicas"
        if self.book.of(key) is not None:
            return "pending"
        if len(self.book) >= cfg.moves.max_pending:
            return "max_pending"
        return None

    def fresh_blocker(self, pod: PodInfo, pdbs: Sequence[PdbView]) -> tuple[str, str] | None:
        """``(reason, message)`` when the fresh objects forbid the surge (``quota``: one API LIST; ``pdb``), else
        ``None``. A quota that cannot be listed blocks (fail closed)."""
        assert self.mover is not None
        try:
            why = self.mover.quota_blocker(pod.namespace, pod.requests, pod.limits)
        except ScaleApiError as exc:
            why = f"cannot list the ResourceQuotas of {pod.namespace}: {exc}"
        if why is not None:
            return "quota", why
        why = surge_pdb_blocker(pod, pdbs)
        return ("pdb", why) if why is not None else None

    # ---- starting a move -----------------------------------------------------------------------------------

    def start(self, pod: PodInfo, to_node: str, gain: float, reason: str) -> tuple[str, str]:
        """Begin a make-before-break move of ``pod`` to ``to_node``: announce it (``moves.steerDelaySeconds`` > 0:
        the scale-up waits for the record to reach the extender) or scale its Deployment up by one at once. Returns
        ``(outcome, message)``: ``announced``, ``surged``, ``dry_run``, ``hpa`` (a HorizontalPodAutoscaler owns the
        Deployment: the caller falls back) or ``error``."""
        assert self.mover is not None
        w = self.deployment(pod)
        if w is None:
            return "error", f"{pod.key}: its Deployment is not in the observation"
        key = f"{w.namespace}/{w.name}"
        delay = float(self.config.moves.steer_delay_seconds)
        timeout = float(self.config.moves.surge_timeout_seconds)
        m = SurgeMove(
            key, pod.service, pod.key, pod.uid, pod.node_name or "", to_node, (), self.now_s,
            self.now_s + delay + timeout, gain=float(gain), reason=reason,
        )  # fmt: skip
        if delay <= 0:
            return self._scale_up(m, w)
        try:
            owner = self.mover.hpa_owner(key)
        except ScaleApiError as exc:
            return "error", f"cannot check for a HorizontalPodAutoscaler of {key}: {exc}"
        if owner is not None:
            return "hpa", f"HorizontalPodAutoscaler {w.namespace}/{owner} owns {key}"
        if self.mover.dry_run:
            return "dry_run", f"dry run: would announce {pod.key} -> {to_node}, then scale {key} up by one"
        self.book.put(replace(m, phase="announced"))
        msg = f"announced: {key}'s new pod goes to {to_node}; scaled up by one in {delay:g} s, then {pod.key} goes"
        self.events.append(SurgeEvent.of(m, "announced", message=msg))
        self._save()
        return "announced", msg

    def _scale_up(self, m: SurgeMove, w: WorkloadInfo) -> tuple[str, str]:
        """``deployments/scale`` ``R -> R + 1`` of move ``m``'s Deployment ``w`` (``R`` as observed), recording the
        move as surging. Returns ``(outcome, message)`` as :meth:`start`."""
        assert self.mover is not None
        key = m.workload
        res = self.mover.scale(key, w.replicas + 1, expect=w.replicas)
        if res.outcome == "refused_hpa":
            return "hpa", res.message
        if res.outcome == "dry_run":
            return "dry_run", f"dry run: would scale {key} {w.replicas} -> {w.replicas + 1} and move {m.pod}"
        if res.outcome != "scaled":
            return "error", f"cannot scale {key} up by one: {res.message}"
        timeout = float(self.config.moves.surge_timeout_seconds)
        known = tuple(p.key for p in self.pods_of(w))
        self.book.put(replace(m, phase="surging", known=known, deadline_s=self.now_s + timeout, retries=0))
        self.started.add(key)
        msg = f"scaled {key} {w.replicas} -> {w.replicas + 1}: its new pod goes to {m.to_node}, then {m.pod} goes"
        self.events.append(SurgeEvent.of(m, "started", message=msg))
        self._save()
        return "surged", msg

    def _announced(self, m: SurgeMove) -> bool:
        """Scale up an announced move whose record has had ``moves.steerDelaySeconds`` to reach the extender (or drop
        it: its Deployment or old pod is gone, an HPA owns it now, the scale-up kept failing). Returns whether the
        book changed."""
        if self.now_s < m.started_at_s + float(self.config.moves.steer_delay_seconds):
            return False
        w = deployment_named(self.snapshot, m.workload)
        if w is None:
            self.book.drop(m)
            self._aborted(m, "workload_gone", f"Deployment {m.workload} is gone")
            return True
        alive = any(p.key == m.pod and not p.terminating for p in self.pods_of(w))
        if not alive:
            self.book.drop(m)
            self._aborted(m, "source_gone", f"{m.pod} went away before the surge")
            return True
        outcome, msg = self._scale_up(m, w)
        if outcome == "hpa":
            self.book.drop(m)
            self._aborted(m, "hpa", msg)
        elif outcome == "error":
            self._failed(m, Step("abort", "scale_failed"), "scale_failed", msg)
        return True

    # ---- advancing the moves in progress -------------------------------------------------------------------

    def advance(self) -> None:
        """Take every pending move one step (:func:`decide`, then its API calls), record the events, save."""
        if self.mover is None:  # cannot act on them here: they wait for a run that can
            return
        changed = False
        for m in list(self.book.moves):
            if m.phase == "announced":
                changed = self._announced(m) or changed
                continue
            step = decide(m, self.snapshot, self.now_s)
            if step.action != "wait":
                self._act(m, step)
                changed = True
        if changed:
            self._save()

    def _deadline_passed(self, m: SurgeMove) -> bool:
        return self.now_s >= m.deadline_s

    def _act(self, m: SurgeMove, step: Step) -> None:
        assert self.mover is not None
        if step.action == "complete":
            self.book.drop(m)
            self.events.append(SurgeEvent.of(m, "completed", message=step.message))
            self._event(m, "Normal", "Moved", f"{m.pod} moved to {m.to_node} make-before-break: {step.message}")
            return
        if step.mark:
            ok, msg = self.mover.mark(step.mark, DELETION_COST_FIRST)
            if not ok:
                self._failed(m, step, "annotate_failed", msg)
                return
        if step.unmark:
            self.mover.mark(m.pod, None)
        if step.scale_down:
            res = self._scale_down(m)
            if res is not None and res.outcome not in ("scaled", "dry_run"):
                self._failed(m, step, "scale_failed", res.message)
                return
        if step.action == "drain":
            timeout = float(self.config.moves.surge_timeout_seconds)
            self.book.put(replace(m, phase="draining", keep=step.keep, deadline_s=self.now_s + timeout, retries=0))
            self.events.append(SurgeEvent.of(m, "draining", message=f"{step.message}; {m.pod} marked and scaled away"))
            return
        self.book.drop(m)
        self._aborted(m, step.reason, step.message)

    def _scale_down(self, m: SurgeMove) -> ScaleResult | None:
        assert self.mover is not None
        w = deployment_named(self.snapshot, m.workload)
        if w is None or w.replicas <= 0:
            return None
        res = self.mover.scale(m.workload, w.replicas - 1, expect=w.replicas)
        if res.outcome == "scaled":
            self.scaled_down.add(m.workload)
        return res

    def _failed(self, m: SurgeMove, step: Step, reason: str, msg: str) -> None:
        """An API call of ``step`` failed: try again next cycle until the deadline, then abort with ``reason``."""
        if not self._deadline_passed(m):
            self.book.put(replace(m, retries=m.retries + 1))
            return
        if self.mover is not None and (step.action == "drain" or m.phase == "draining"):
            self.mover.mark(m.pod, None)
        self.book.drop(m)
        self._aborted(m, reason, msg)

    def _aborted(self, m: SurgeMove, reason: str, msg: str) -> None:
        self.events.append(SurgeEvent.of(m, "aborted", reason, msg))
        self._event(m, "Warning", "MoveAborted", f"make-before-break move of {m.pod} aborted ({reason}): {msg}")

    def _event(self, m: SurgeMove, type_: str, reason: str, note: str) -> None:
        if self.recorder is None:
            return
        ns, name = _split(m.workload)
        self.recorder.record(ObjectRef("apps/v1", "Deployment", ns, name), type_, reason, "Move", note)

    def _save(self) -> None:
        try:
            self.book.save()
        except HistoryError as exc:
            self.unwritable = str(exc)

    # ---- the replica targets while moves are pending -------------------------------------------------------

    def replica_targets(self, targets: Mapping[str, int]) -> dict[str, int]:
        """The plan's replica targets with the pending surges counted: a workload whose surge began this cycle keeps
        the surge's count (its scale change waits one cycle, so the new pods are not all steered to the target);
        one still surging from an earlier cycle gets its target + 1; one a drain or an abort scaled back down this
        cycle keeps that count (a scale-down on top, planned on the observation before it, would remove the pod the
        move kept: the youngest, which the ReplicaSet removes first)."""
        out = dict(targets)
        for key in self.scaled_down:
            w = deployment_named(self.snapshot, key)
            if key in out and w is not None:
                out[key] = w.replicas - 1
        for key in self.book.surging():
            if key not in out:
                continue
            if key in self.started:
                w = deployment_named(self.snapshot, key)
                if w is not None:
                    out[key] = w.replicas + 1
            else:
                out[key] = int(out[key]) + 1
        return out
