"""The extender's decisions as pure functions (no HTTP): parsed request + store view + placement policy
→ wire reply + an outcome label for metrics.

Scoring fails open (DESIGN.md section 2): a missing or stale snapshot, a pod whose service the call graph
does not know, candidates the snapshot lacks, an exception inside the policy or non-finite scores all give
**neutral** scores (every candidate 0), so kube-scheduler's own plugins decide. Filtering rejects only the
policy's hard constraints; "no fit" is a normal reply with reasons, and any trouble passes every node.

The all-equal fallback on error follows kubernetes-sigs/scheduler-plugins' scoring plugins (e.g.
``pkg/networkaware/networkoverhead``), which return equal scores rather than failing the cycle.
"""

from __future__ import annotations

import logging
import operator
import time
from collections.abc import Sequence

import numpy as np

from policy.intent import pending_move_scores
from policy.lowlevel import MAX_EXTENDER_PRIORITY, NodeScoreTable, PlacementPolicy

from .store import StoreView
from .wire import (
    ExtenderFilterResult,
    HostPriority,
    ParsedArgs,
    build_filter_result,
    build_host_priorities,
    neutral_host_priorities,
)

__all__ = ["PRIORITIZE_OUTCOMES", "FILTER_OUTCOMES", "SHED_REASONS", "prioritize", "prioritize_scores", "filter_nodes"]

log = logging.getLogger(__name__)

#: Every outcome label :func:`prioritize` returns (the ``outcome`` label of ``hrl_extender_prioritize_total``).
#: ``ok``: the policy's scores; every other label: neutral scores, and why.
PRIORITIZE_OUTCOMES: tuple[str, ...] = (
    "ok",
    "pending_move",  # a make-before-break move of the pod's service is pending: its target scores 10, others 0
    "neutral_no_snapshot",  # no snapshot loaded yet
    "neutral_stale",  # the snapshot is older than maxSnapshotAgeSeconds
    "neutral_unknown_service",  # the pod's service is not in the call graph
    "neutral_embeddings_missing",  # a cache is configured but has no embedding for the pod's service
    "neutral_embeddings_stale",  # a cache is configured but its embeddings are older than maxAgeSeconds
    "neutral_unknown_nodes",  # none of the candidates is in the snapshot
    "neutral_error",  # the policy raised, or returned the wrong shape
    "neutral_nonfinite",  # the policy returned NaN or infinity
    "neutral_overload",  # shed: too many requests waiting (limits.maxQueuedRequests / workers), not scored
    "neutral_deadline",  # not answered within limits.requestDeadlineSeconds of its arrival, not scored
    "shadow",  # mode: shadow: scored and recorded (extender.decisions), answered neutral
)

#: Every outcome label :func:`filter_nodes` returns (the ``outcome`` label of ``hrl_extender_filter_total``).
FILTER_OUTCOMES: tuple[str, ...] = (
    "ok",  # every candidate passes
    "filtered",  # some candidates rejected, some pass
    "no_fit",  # every candidate rejected (still a normal reply with reasons)
    "no_snapshot",  # no snapshot: every candidate passes (fail open)
    "stale",  # stale snapshot: every candidate passes (fail open)
    "error",  # the policy raised or answered garbage: every candidate passes (fail open)
    "overload",  # shed: too many requests waiting; every candidate passes (fail open)
    "deadline",  # not answered within limits.requestDeadlineSeconds; every candidate passes (fail open)
)

#: Why a request was answered without being scored (the server's load shedding, :mod:`extender.server`).
SHED_REASONS: tuple[str, ...] = ("overload", "deadline")


def _precheck(view: StoreView, max_snapshot_age_s: float, now_s: float | None) -> str | None:
    if not view.ready:
        return "no_snapshot"
    if max_snapshot_age_s > 0:
        t = now_s if now_s is not None else time.time()
        if view.is_stale(t, max_snapshot_age_s):
            return "stale"
    return None


def prioritize_scores(
    parsed: ParsedArgs,
    view: StoreView,
    policy: PlacementPolicy,
    *,
    max_snapshot_age_s: float = 0.0,
    now_s: float | None = None,
    table: NodeScoreTable | None = None,
) -> tuple[np.ndarray, str]:
    """The integer scores of :func:`prioritize` as a (C,) int64 array in 0..10 (one per
    ``parsed.node_names`` entry, in order) and the outcome; ``encode_host_scores(parsed.node_names, scores)``
    is the reply. ``table``: a :class:`~policy.lowlevel.NodeScoreTable` of ``policy`` to gather the scores from
    when it holds the pod's vector for ``view`` (identical scores; see :mod:`policy.lowlevel.precomputed`),
    else the policy scores the candidates directly.

    A pod of a service with a make-before-break move pending (``view.pending_moves``, from the descheduler through
    the embedding cache) is scored by :func:`policy.intent.pending_move_scores` first: its move's target node 10,
    the other candidates 0 (outcome ``pending_move``), whatever the snapshot's state: the record names the node.

    With a decision recorder in the view (:meth:`extender.store.SnapshotStore.set_decisions`) every answer is
    recorded (:class:`extender.decisions.DecisionRecorder`); in shadow mode (``view.shadow``) a scored pod is
    answered with zeros, outcome ``shadow`` (kube-scheduler's own plugins decide)."""
    ints, outcome, raw = _scores(parsed, view, policy, max_snapshot_age_s, now_s, table)
    rec = view.decisions
    if rec is not None:
        try:
            intent = view.plan_intent.for_service(parsed.pod.service) if view.plan_intent is not None else None
            rec.record(parsed.pod, parsed.node_names, raw, outcome, view, intent)
        except Exception as exc:  # noqa: BLE001 - the record never changes the answer
            log.warning("decision record: %s: %s", type(exc).__name__, exc)
    if view.shadow and outcome == "ok":
        return np.zeros(len(parsed.node_names), dtype=np.int64), "shadow"
    return ints, outcome


def _scores(
    parsed: ParsedArgs,
    view: StoreView,
    policy: PlacementPolicy,
    max_snapshot_age_s: float,
    now_s: float | None,
    table: NodeScoreTable | None,
) -> tuple[np.ndarray, str, np.ndarray | None]:
    """:func:`prioritize_scores` without the record: ``(ints, outcome, scores)``, ``scores`` (C,) float64 in 0..10
    (NaN for candidates the snapshot lacks) when the outcome is ``ok``, else ``None``."""
    names = parsed.node_names
    pod = parsed.pod
    if view.pending_moves and names:
        t = now_s if now_s is not None else time.time()
        pm = pending_move_scores(names, view.pending_moves, pod.namespace, pod.service, t)
        if pm is not None:
            return np.asarray(pm, dtype=np.int64), "pending_move", None
    zeros = np.zeros(len(names), dtype=np.int64)
    pre = _precheck(view, max_snapshot_age_s, now_s)
    if pre is not None:
        return zeros, "neutral_" + pre, None
    assert view.index is not None
    if not names:
        return zeros, "ok", np.zeros(0)
    if pod.service not in view.graph.services:
        return zeros, "neutral_unknown_service", None
    emb = view.embedding_problem(pod.service, now_s if now_s is not None else time.time())
    if emb is not None:
        return zeros, "neutral_embeddings_" + emb, None
    index = view.index
    node_pos = index.node_pos
    try:  # every candidate known (the usual case): one C-level lookup of all names
        found = operator.itemgetter(*names)(node_pos)
        pos = np.array(found if len(names) > 1 else (found,), dtype=np.int64)
    except KeyError:
        pos = np.fromiter((node_pos.get(n, -1) for n in names), dtype=np.int64, count=len(names))
    known_mask = pos >= 0
    if not known_mask.any():
        return zeros, "neutral_unknown_nodes", None
    all_known = bool(known_mask.all())
    vec = None
    if table is not None:
        vec = table.lookup(
            pod, index, view.intent, table.rows_token(index, pod.service), colocation=view.colocation or None
        )
    if vec is not None:
        raw = vec[pos if all_known else pos[known_mask]]
    else:
        cands = list(names) if all_known else [n for n, k in zip(names, known_mask) if k]
        try:
            intent = view.plan_intent.for_service(pod.service) if view.plan_intent is not None else None
            raw = np.asarray(policy.score(pod, cands, index, intent), dtype=np.float64)
        except Exception as exc:
            log.warning(
                "prioritize: policy %r raised %s: %s (neutral scores for pod %s)",
                getattr(policy, "name", type(policy).__name__),
                type(exc).__name__,
                exc,
                pod.key,
                exc_info=log.isEnabledFor(logging.DEBUG),
            )
            return zeros, "neutral_error", None
        if raw.shape != (len(cands),):
            log.warning(
                "prioritize: policy %r returned shape %s for %d candidates (neutral scores)",
                getattr(policy, "name", type(policy).__name__),
                raw.shape,
                len(cands),
            )
            return zeros, "neutral_error", None
    if not np.all(np.isfinite(raw)):
        log.warning(
            "prioritize: policy %r returned non-finite scores (neutral scores for pod %s)",
            getattr(policy, "name", type(policy).__name__),
            pod.key,
        )
        return zeros, "neutral_nonfinite", None
    full = np.zeros(len(names))
    full[known_mask] = np.clip(raw, 0.0, MAX_EXTENDER_PRIORITY)
    scored = np.where(known_mask, full, np.nan)
    # round half up, as extender.wire.build_host_priorities does (the values are finite and in 0..10 here)
    return np.floor(full + 0.5).astype(np.int64), "ok", scored


def prioritize(
    parsed: ParsedArgs,
    view: StoreView,
    policy: PlacementPolicy,
    *,
    max_snapshot_age_s: float = 0.0,
    now_s: float | None = None,
    table: NodeScoreTable | None = None,
) -> tuple[list[HostPriority], str]:
    """Score ``parsed.node_names`` for ``parsed.pod`` with ``policy.score`` on ``view``.

    Returns ``(reply, outcome)``: ``reply`` has one ``{"Host", "Score"}`` per candidate in request order,
    integer scores in 0..10 (the policy's values rounded half up and clamped); ``outcome`` is one of
    :data:`PRIORITIZE_OUTCOMES`. Candidates the snapshot lacks score 0 (neutral) and are not shown to
    the policy. ``max_snapshot_age_s``: older snapshots count as stale (``<= 0``: never); ``now_s``: the
    current time on the store's clock (default :func:`time.time`); ``table``: see :func:`prioritize_scores`.
    Never raises for policy failures.
    """
    scores, outcome = prioritize_scores(
        parsed, view, policy, max_snapshot_age_s=max_snapshot_age_s, now_s=now_s, table=table
    )
    if outcome not in ("ok", "pending_move"):
        return neutral_host_priorities(parsed.node_names), outcome
    return build_host_priorities(parsed.node_names, scores), outcome


def _clean_failures(failed: object, candidates: Sequence[str], policy_name: str) -> dict[str, str]:
    if not isinstance(failed, dict):
        raise TypeError(f"filter returned {type(failed).__name__}, expected dict[str, str]")
    cand = set(candidates)
    out: dict[str, str] = {}
    for k, v in failed.items():
        if k in cand:
            reason = " ".join(str(v).split()) if v is not None else ""
            out[str(k)] = reason or f"rejected by {policy_name}"
    return out


def filter_nodes(
    parsed: ParsedArgs,
    view: StoreView,
    policy: PlacementPolicy,
    *,
    max_snapshot_age_s: float = 0.0,
    now_s: float | None = None,
) -> tuple[ExtenderFilterResult, str]:
    """Reject the candidates that violate ``policy.filter``'s hard constraints.

    Returns ``(reply, outcome)``: an ``ExtenderFilterResult`` in the request's mode with the passing
    candidates, ``FailedNodes`` = the policy's ``{node: reason}``, ``FailedAndUnresolvableNodes = {}``,
    ``Error = ""``; ``outcome`` is one of :data:`FILTER_OUTCOMES`. Without a (fresh) snapshot, or when the
    policy raises, every candidate passes (fail open). Candidates the snapshot lacks pass. Never raises
    for policy failures.
    """
    names = parsed.node_names
    pre = _precheck(view, max_snapshot_age_s, now_s)
    if pre is not None:
        return build_filter_result(parsed, {}), pre
    assert view.index is not None
    pname = getattr(policy, "name", type(policy).__name__)
    known = [n for n in names if n in view.index.node_pos]
    try:
        failed = _clean_failures(policy.filter(parsed.pod, known, view.index), known, pname) if known else {}
    except Exception as exc:
        log.warning(
            "filter: policy %r raised %s: %s (every node passes for pod %s)",
            pname,
            type(exc).__name__,
            exc,
            parsed.pod.key,
            exc_info=log.isEnabledFor(logging.DEBUG),
        )
        return build_filter_result(parsed, {}), "error"
    result = build_filter_result(parsed, failed)
    if not failed:
        outcome = "ok"
    elif len(failed) >= len(set(names)):
        outcome = "no_fit"
    else:
        outcome = "filtered"
    return result, outcome
