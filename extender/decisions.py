"""The extender's decision record, and its shadow mode (``mode: shadow``, :mod:`extender.config`).

In shadow mode the extender is registered with kube-scheduler as usual but answers **neutral** scores (every
candidate 0, outcome ``shadow``), so kube-scheduler's own plugins alone decide; it still scores every pod and
records what it would have chosen. The record (both modes when ``decisions`` is enabled; the default in shadow
mode) holds, per pod:

- the candidates kube-scheduler sent, with our scores (float, and the integer we would have answered);
- our choice: the candidates with the best score (all of them when tied);
- the node kube-scheduler bound the pod to, read from the snapshot the watch keeps (:mod:`extender.kube`): the
  :class:`DecisionRecorder` is a store listener (:meth:`extender.store.SnapshotStore.subscribe`), and a pending
  decision is resolved by the first snapshot in which its pod (same UID) is bound;
- ``result``: ``agree`` (the bound node is one of our best, and we preferred some candidates to others),
  ``disagree``, ``indifferent`` (we scored every candidate alike, or there was one: no preference to agree with),
  ``not_scored`` (we would have answered neutral: the reason is ``outcome``), ``outside`` (bound to a node we were
  not asked about: another profile, preemption), ``unbound`` (not bound within ``pendingTimeoutSeconds``: deleted or
  unschedulable);
- ``score_gap``: our best score minus our score of the bound node (points, 0..10; 0 when we agree);
- with ``explain``, the explanation (:func:`policy.lowlevel.explain.explain_scores`) of our best node and of the
  bound node: every score as named contributions that sum to it;
- with ``events`` (opt-in), a Kubernetes Event (``events.k8s.io/v1``) on the pod carrying the top three
  contributions of our choice and of the bound node (reason ``HrlShadowChoice`` in shadow mode, ``HrlScored``
  in active mode).

Nothing here is on the request path beyond :meth:`DecisionRecorder.record` (a copy of the candidate names and
scores into a bounded dict, under a lock held for microseconds): resolving runs in the store's writer thread,
explaining, logging and Events in the recorder's own worker thread, behind a bounded queue. What does not fit
(``maxPending`` decisions waiting for their binding, ``queueSize`` resolved ones waiting for the worker) is
dropped and counted (``hrl_extender_decisions_dropped_total{reason}``), never waited for.

The log: one JSON object per line (:data:`RECORD_KIND`, ``version`` :data:`RECORD_VERSION`), to ``log`` with
size-based rotation (``maxBytes``, ``backups``; :class:`logging.handlers.RotatingFileHandler`). Keys:
``kind``, ``version``, ``mode``, ``time_s`` (unix s, resolved), ``decided_at_s``, ``bound_at_s``, ``pod``,
``uid``, ``service``, ``outcome`` (our scoring outcome, :data:`extender.scoring.PRIORITIZE_OUTCOMES`),
``result``, ``candidates`` (``[{node, score, served}]``, best first), ``our_choice`` (nodes), ``best_score``,
``bound_node``, ``bound_score`` (``None`` when not a candidate), ``score_gap``, ``intent`` (the vector the pod
was scored with), ``policy`` / ``policy_version`` (the placement policy's name and bundle version),
``explanation`` (``{"best": ..., "bound": ...}``, :meth:`NodeExplanation.to_json`, or absent).
docs/shadow-mode.md shows one.

Metrics (registered in the extender's registry; no pod or node names as labels):

- ``hrl_extender_decisions_total{mode, result}``: resolved decisions by result;
- ``hrl_extender_decision_score_gap{mode}``: histogram of ``score_gap`` (points) of the decisions we scored and
  that were bound to a candidate;
- ``hrl_extender_decisions_pending``: decisions waiting for their pod's binding;
- ``hrl_extender_decisions_dropped_total{reason}``: ``pending_full``, ``queue_full``, ``explain_error``,
  ``log_error``, ``event_error``.

Agreement over the last hour, in PromQL: ``sum(rate(hrl_extender_decisions_total{result="agree"}[1h])) /
sum(rate(hrl_extender_decisions_total{result=~"agree|disagree"}[1h]))``.
"""

from __future__ import annotations

import logging
import logging.handlers
import math
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from policy.lowlevel import PlacementPolicy
from policy.lowlevel.explain import Explanation, NodeExplanation, explain_scores
from policy.state import ClusterSnapshot, PodInfo
from policy.telemetry import JsonLinesLog

__all__ = [
    "RECORD_KIND",
    "RECORD_VERSION",
    "RESULTS",
    "DROP_REASONS",
    "EventSink",
    "Decision",
    "DecisionMetrics",
    "DecisionSettings",
    "DecisionRecorder",
    "event_note",
]

log = logging.getLogger(__name__)

RECORD_KIND = "ExtenderDecision"
RECORD_VERSION = 1
#: ``result`` of a resolved decision (module docstring).
RESULTS: tuple[str, ...] = ("agree", "disagree", "indifferent", "not_scored", "outside", "unbound")
DROP_REASONS: tuple[str, ...] = ("pending_full", "queue_full", "explain_error", "log_error", "event_error")
#: Score-gap histogram buckets (points of 0..10).
GAP_BUCKETS: tuple[float, ...] = (0.0, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0)
#: Ties: scores within this many points of the best count as our choice.
TIE_POINTS = 1e-9
#: Longest Event note the API server accepts (events.k8s.io/v1 ``note``: 1 kB).
MAX_NOTE = 1024


class EventSink(Protocol):
    """Posts one Event about a pod (``extender.kube.KubeEventSink``: events.k8s.io/v1). Raises on failure."""

    def post(self, pod: PodInfo, reason: str, action: str, note: str) -> None: ...


@dataclass
class _Pending:
    pod: PodInfo
    decided_at_s: float
    candidates: tuple[str, ...]
    scores: np.ndarray  # (C,) float64, NaN = not scored (a candidate the snapshot lacks)
    outcome: str
    view: Any  # the StoreView the pod was scored on (immutable)
    intent: tuple[float, ...] | None


@dataclass
class Decision:
    """One resolved decision (the log record's fields; :meth:`to_json`)."""

    mode: str
    pod: PodInfo
    decided_at_s: float
    bound_at_s: float | None
    outcome: str
    result: str
    candidates: tuple[str, ...]
    scores: np.ndarray
    our_choice: tuple[str, ...]
    best_score: float | None
    bound_node: str | None
    bound_score: float | None
    score_gap: float | None
    intent: tuple[float, ...] | None
    view: Any = field(default=None, repr=False)
    explanation: dict[str, Any] | None = None
    policy: str = ""
    policy_version: str = ""

    def to_json(self) -> dict[str, Any]:
        order = np.argsort(-np.nan_to_num(self.scores, nan=-1.0), kind="stable")
        cands = []
        for i in order.tolist():
            s = float(self.scores[i])
            ok = math.isfinite(s)
            cands.append(
                {
                    "node": self.candidates[i],
                    "score": round(s, 4) if ok else None,
                    "served": int(np.floor(s + 0.5)) if ok else None,
                }
            )
        d: dict[str, Any] = {
            "kind": RECORD_KIND,
            "version": RECORD_VERSION,
            "mode": self.mode,
            "time_s": round(time.time(), 3),
            "decided_at_s": round(self.decided_at_s, 3),
            "bound_at_s": None if self.bound_at_s is None else round(self.bound_at_s, 3),
            "pod": self.pod.key,
            "uid": self.pod.uid,
            "service": self.pod.service,
            "outcome": self.outcome,
            "result": self.result,
            "candidates": cands,
            "our_choice": list(self.our_choice),
            "best_score": None if self.best_score is None else round(self.best_score, 4),
            "bound_node": self.bound_node,
            "bound_score": None if self.bound_score is None else round(self.bound_score, 4),
            "score_gap": None if self.score_gap is None else round(self.score_gap, 4),
            "intent": None if self.intent is None else list(self.intent),
            "policy": self.policy,
            "policy_version": self.policy_version,
        }
        if self.explanation is not None:
            d["explanation"] = self.explanation
        return d


class DecisionMetrics:
    """The decision record's metrics (module docstring), registered in ``registry``."""

    def __init__(self, registry: CollectorRegistry, mode: str):
        self.mode = mode
        self.decisions = Counter(
            "hrl_extender_decisions",
            "Resolved decisions of the decision record (shadow log) by result: agree (kube-scheduler bound the pod "
            "to one of our best nodes), disagree, indifferent (every candidate scored alike), not_scored, outside, "
            "unbound.",
            ["mode", "result"],
            registry=registry,
        )
        self.score_gap = Histogram(
            "hrl_extender_decision_score_gap",
            "Our best score minus our score of the node kube-scheduler bound the pod to (points, 0..10).",
            ["mode"],
            buckets=GAP_BUCKETS,
            registry=registry,
        )
        self.pending = Gauge(
            "hrl_extender_decisions_pending", "Decisions waiting for their pod's binding.", registry=registry
        )
        self.dropped = Counter(
            "hrl_extender_decisions_dropped",
            "Decisions or parts of them dropped, by reason (pending_full, queue_full, explain_error, log_error, "
            "event_error).",
            ["reason"],
            registry=registry,
        )
        for r in RESULTS:
            self.decisions.labels(mode=mode, result=r)
        self.score_gap.labels(mode=mode)
        for r in DROP_REASONS:
            self.dropped.labels(reason=r)


def event_note(d: Decision, k: int = 3) -> str:
    """The Event's note (at most :data:`MAX_NOTE` characters): our choice and the bound node with the top ``k``
    contributions of each (from ``d.explanation``)."""
    verb = "would have chosen" if d.mode == "shadow" else "preferred"
    best = d.our_choice[0] if d.our_choice else "-"
    parts = [f"hrl-scheduler {verb} {best} (score {d.best_score:.1f})" if d.best_score is not None else "no score"]
    ex = d.explanation or {}
    if ex.get("best"):
        parts[0] += ": " + ", ".join(f"{t['name']} {t['points']:+.1f}" for t in ex["best"]["top"][:k])
    if d.bound_node is not None:
        bound = f"bound to {d.bound_node}"
        if d.bound_score is not None:
            bound += f" (our score {d.bound_score:.1f})"
        if ex.get("bound") and d.bound_node != best:
            bound += ": " + ", ".join(f"{t['name']} {t['points']:+.1f}" for t in ex["bound"]["top"][:k])
        parts.append(bound)
    note = "; ".join(parts) + f" [{d.result}]"
    return note if len(note) <= MAX_NOTE else note[: MAX_NOTE - 3] + "..."


@dataclass(frozen=True)
class DecisionSettings:
    """How a :class:`DecisionRecorder` records (``decisions`` of :class:`extender.config.ExtenderConfiguration`):
    ``log_path``: JSON-lines file (``None``: no log); ``max_bytes`` / ``backups``: its rotation; ``explain``:
    explanations in the records; ``max_pending``, ``pending_timeout_s``, ``queue_size``: the bounds."""

    log_path: str | Path | None = None
    max_bytes: int = 64 * 2**20
    backups: int = 3
    explain: bool = True
    max_pending: int = 10_000
    pending_timeout_s: float = 300.0
    queue_size: int = 1_000


class DecisionRecorder:
    """Records what the extender decided (or, in shadow mode, would have decided) per pod; see the module docstring.

    ``mode``: ``active`` or ``shadow``; ``policy``: the placement policy (explanations); ``registry``: where the
    metrics go; ``settings``: :class:`DecisionSettings`; ``events``: an :class:`EventSink` (``None``: no Events);
    ``clock``: unix seconds.

    Call :meth:`start` (the worker thread) and :meth:`stop` (drains the queue, closes the log). Raises ``OSError``
    from the constructor when the log cannot be opened, ``ValueError`` for another ``mode``.
    """

    def __init__(
        self,
        mode: str,
        policy: PlacementPolicy,
        registry: CollectorRegistry,
        settings: DecisionSettings = DecisionSettings(),
        *,
        events: EventSink | None = None,
        clock: Callable[[], float] = time.time,
    ):
        if mode not in ("active", "shadow"):
            raise ValueError(f"mode: expected active or shadow, got {mode!r}")
        self.mode = mode
        self.policy = policy
        self.metrics = DecisionMetrics(registry, mode)
        self.explain = settings.explain
        self.events = events
        self.max_pending = settings.max_pending
        self.pending_timeout_s = settings.pending_timeout_s
        self.clock = clock
        self._lock = threading.Lock()
        self._pending: OrderedDict[str, _Pending] = OrderedDict()
        self._queue: queue.Queue[Decision | None] = queue.Queue(maxsize=settings.queue_size)
        self._thread: threading.Thread | None = None
        self._snap_keys: tuple[Any, dict[str, PodInfo]] | None = None
        self.written = 0
        self._writer = (
            JsonLinesLog(settings.log_path, settings.max_bytes, settings.backups, "hrl.decisions")
            if settings.log_path is not None
            else None
        )
        self.metrics.pending.set_function(lambda: float(len(self._pending)))

    # ---- the request path ---------------------------------------------------------------------------------
    def record(
        self,
        pod: PodInfo,
        candidates: Sequence[str],
        scores: np.ndarray | None,
        outcome: str,
        view: Any,
        intent: Sequence[float] | None = None,
    ) -> None:
        """Remember one prioritize answer: ``scores`` (C,) float64 in 0..10 (NaN for candidates not scored),
        ``None`` when nothing was scored (``outcome`` says why). A later answer for the same pod replaces it."""
        if not candidates:
            return
        s = np.full(len(candidates), np.nan) if scores is None else np.array(scores, dtype=np.float64)
        p = _Pending(
            pod,
            self.clock(),
            tuple(candidates),
            s,
            outcome,
            view,
            None if intent is None else tuple(float(v) for v in intent),
        )
        with self._lock:
            self._pending.pop(pod.key, None)
            if len(self._pending) >= self.max_pending:
                self._pending.popitem(last=False)
                self.metrics.dropped.labels(reason="pending_full").inc()
            self._pending[pod.key] = p

    # ---- the watch: resolving ---------------------------------------------------------------------------
    def _pods(self, snap: ClusterSnapshot) -> dict[str, PodInfo]:
        if self._snap_keys is None or self._snap_keys[0] is not snap.pods:
            self._snap_keys = (snap.pods, {p.key: p for p in snap.pods})
        return self._snap_keys[1]

    def on_view(self, view: Any) -> None:
        """Store listener: resolve the pending decisions whose pod the new snapshot shows bound, and expire
        those older than ``pendingTimeoutSeconds``."""
        snap = getattr(view, "snapshot", None)
        if not self._pending:
            return
        now = self.clock()
        pods = self._pods(snap) if snap is not None else {}
        done: list[tuple[_Pending, PodInfo | None]] = []
        with self._lock:
            for key, p in list(self._pending.items()):
                cur = pods.get(key)
                if cur is not None and p.pod.uid and cur.uid and cur.uid != p.pod.uid:
                    cur = None  # another pod of the same name: ours is gone
                if cur is not None and cur.node_name is not None:
                    done.append((p, cur))
                    del self._pending[key]
                elif now - p.decided_at_s > self.pending_timeout_s:
                    done.append((p, None))
                    del self._pending[key]
        for p, cur in done:
            self._resolved(self.resolve(p, cur, now))

    def expire(self, now_s: float | None = None) -> None:
        """Expire old pending decisions without a new snapshot (called by the worker while idle)."""
        now = self.clock() if now_s is None else now_s
        with self._lock:
            old = [(k, p) for k, p in self._pending.items() if now - p.decided_at_s > self.pending_timeout_s]
            for k, _p in old:
                del self._pending[k]
        for _k, p in old:
            self._resolved(self.resolve(p, None, now))

    def resolve(self, p: _Pending, bound: PodInfo | None, now_s: float) -> Decision:
        """The :class:`Decision` of a pending answer and the pod as the watch saw it bound (``None``: never)."""
        s = p.scores
        scored = p.outcome in ("ok", "shadow") and bool(np.isfinite(s).any())
        best = float(np.nanmax(s)) if scored else None
        choice = (
            tuple(c for c, v in zip(p.candidates, s.tolist()) if math.isfinite(v) and v >= best - TIE_POINTS)
            if best is not None
            else ()
        )
        node = bound.node_name if bound is not None else None
        bound_score = None
        if node is not None and node in p.candidates:
            v = float(s[p.candidates.index(node)])
            bound_score = v if math.isfinite(v) else None
        gap = None
        if node is None:
            result = "unbound"
        elif not scored:
            result = "not_scored"
        elif node not in p.candidates or bound_score is None:
            result = "outside"
        else:
            gap = max(0.0, (best or 0.0) - bound_score)
            if len(choice) == len(p.candidates):
                result = "indifferent"  # every candidate tied (or only one): any binding would "agree"
            else:
                result = "agree" if node in choice else "disagree"
        return Decision(
            self.mode,
            p.pod,
            p.decided_at_s,
            now_s if node is not None else None,
            p.outcome,
            result,
            p.candidates,
            s,
            choice,
            best,
            node,
            bound_score,
            gap,
            p.intent,
            view=p.view,
            policy=str(getattr(self.policy, "name", type(self.policy).__name__)),
            policy_version=str(getattr(self.policy, "version", "") or ""),
        )

    def _resolved(self, d: Decision) -> None:
        m = self.metrics
        m.decisions.labels(mode=self.mode, result=d.result).inc()
        if d.score_gap is not None:
            m.score_gap.labels(mode=self.mode).observe(d.score_gap)
        if self._writer is None and self.events is None:
            return
        try:
            self._queue.put_nowait(d)
        except queue.Full:
            m.dropped.labels(reason="queue_full").inc()

    # ---- the worker: explanations, log, Events ---------------------------------------------------------------
    def explain_decision(self, d: Decision) -> dict[str, Any] | None:
        """``{"best": ..., "bound": ...}`` (:meth:`NodeExplanation.to_json`) of our best node and the bound node,
        from the view the pod was scored on; ``None`` when the pod was not scored."""
        if d.best_score is None or d.view is None or d.view.index is None:
            return None
        bound = [d.bound_node] if d.bound_node is not None and d.bound_score is not None else []
        nodes: list[str] = list(dict.fromkeys([*d.our_choice[:1], *bound]))
        if not nodes:
            return None
        ex: Explanation = explain_scores(self.policy, _unbound(d.pod), nodes, d.view.index, d.intent)
        out: dict[str, Any] = {"method": ex.method, "max_integration_error_points": ex.max_integration_error}
        best = ex.node(nodes[0])
        out["best"] = best.to_json() if best is not None else None
        b: NodeExplanation | None = ex.node(bound[0]) if bound else None
        out["bound"] = b.to_json() if b is not None else None
        return out

    def handle(self, d: Decision) -> None:
        """Explain, log and post the Event of one decision (the worker's step; errors counted, never raised)."""
        if self.explain:
            try:
                d.explanation = self.explain_decision(d)
            except Exception as exc:  # noqa: BLE001 - the record goes out without it
                self.metrics.dropped.labels(reason="explain_error").inc()
                log.debug("decision %s: explanation failed: %s: %s", d.pod.key, type(exc).__name__, exc)
        if self._writer is not None:
            try:
                self._writer.write(d.to_json())
                self.written += 1
            except Exception as exc:  # noqa: BLE001
                self.metrics.dropped.labels(reason="log_error").inc()
                log.warning("decision log: %s: %s", type(exc).__name__, exc)
        if self.events is not None and d.result != "unbound":
            reason = "HrlShadowChoice" if self.mode == "shadow" else "HrlScored"
            try:
                self.events.post(d.pod, reason, "Score", event_note(d))
            except Exception as exc:  # noqa: BLE001
                self.metrics.dropped.labels(reason="event_error").inc()
                log.warning("decision event for %s: %s: %s", d.pod.key, type(exc).__name__, exc)
        d.view = None  # let the snapshot go

    def _run(self) -> None:
        while True:
            try:
                d = self._queue.get(timeout=1.0)
            except queue.Empty:
                self.expire()
                continue
            if d is None:
                return
            self.handle(d)

    def start(self) -> DecisionRecorder:
        """Start the worker thread (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="hrl-decisions", daemon=True)
            self._thread.start()
        return self

    def flush(self, timeout_s: float = 5.0) -> None:
        """Wait until the queue is empty (tests, shutdown)."""
        deadline = time.monotonic() + timeout_s
        while not self._queue.empty() and time.monotonic() < deadline:
            time.sleep(0.01)
        if self._thread is None:
            while True:
                try:
                    d = self._queue.get_nowait()
                except queue.Empty:
                    break
                if d is not None:
                    self.handle(d)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Write what is queued, stop the worker, close the log. Idempotent."""
        if self._thread is not None:
            try:
                self._queue.put(None, timeout=timeout_s)
            except queue.Full:
                pass
            self._thread.join(timeout_s)
            self._thread = None
        else:
            self.flush(timeout_s)
        if self._writer is not None:
            self._writer.close()


def _unbound(pod: PodInfo) -> PodInfo:
    """The pod as it was scored: not bound yet (its explanation must not see it on a node)."""
    return pod if pod.node_name is None else replace(pod, node_name=None)
