"""The descheduler's shadow mode: a dry run that also simulates what the cycle would have done.

A dry run (``dryRun: true``, ``--dry-run``) plans exactly as the real run does: the same planner, guards,
targeted re-reads, ledger, caps and bounds (:mod:`descheduler.loop`); only the evictor, the scaler and the
resizer are read-only. :func:`analyze_cycle` then takes the cycle's report and its observation and says, per
decision, what would have happened and why:

- **moves** the guards let through (outcome ``dry_run``), in the cycle's order: where kube-scheduler would bind
  each evicted pod's replacement (:meth:`policy.highlevel.SchedulerModel.landing`: its default filters and scores,
  plus our extender's for the profiles that call it), on the cluster as the earlier moves left it (each move is
  applied to the planning view at its predicted landing node, :meth:`policy.highlevel.PlanView.apply_move`); the
  planner's intended target and whether the prediction agrees; the predicted effect: the pod's co-location with its
  callers and callees (the call-rate-weighted share of its neighbours' pods on its node, 0..1) before and after,
  and the CPU utilisation of the node it leaves and of the node it lands on, before and after; why it was proposed
  (the planner's reason and gain);
- **blocked moves**: every guard that blocked each (``guard``: reason), and the cheap guards' counts (pods never
  proposed: ``skipped_by_guard``);
- **scale changes**: replicas before → after and the predicted CPU utilisation of the service's pods (their
  measured use, or requests, over the requests of the new replica count), or why none was made;
- **resizes**: the CPU request before → after, the pod's predicted utilisation of its new request and its
  node's requested CPU after, or why it was not made;
- **node-loss evictions** (the pods of lost nodes, :mod:`descheduler.nodeloss`), before the moves: the outcome, where
  kube-scheduler would bind each replacement, or the guards that blocked it;
- the cycle's predicted effect: the share of call traffic between pods on different nodes (each edge's rate
  times the chance that a caller pod and a callee pod share a node, with calls spread evenly over the pods) and
  the busiest node's CPU utilisation, before and after the moves.

The record is one JSON object per cycle (:data:`RECORD_KIND`, version :data:`RECORD_VERSION`; keys in
:meth:`ShadowCycle.to_json`), appended to ``shadow.log`` (:class:`ShadowLog`, size-rotated) and printed with
``--json`` under the report's ``shadow`` key. The metrics of a dry run carry ``dry_run="true"``
(:mod:`descheduler.metrics`). docs/shadow-mode.md shows a record.
"""

from __future__ import annotations

import logging
import logging.handlers
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from policy.highlevel import PlanView, SchedulerModel
from policy.index import ClusterIndex
from policy.lowlevel import neighbor_weights
from policy.state import ClusterSnapshot, PodInfo
from policy.telemetry import JsonLinesLog

from .loop import CycleReport

__all__ = ["RECORD_KIND", "RECORD_VERSION", "ShadowCycle", "analyze_cycle", "cross_node_call_share", "ShadowLog"]

log = logging.getLogger(__name__)

RECORD_KIND = "DeschedulerShadowCycle"
RECORD_VERSION = 1


def _r(v: float | None, digits: int = 4) -> float | None:
    return None if v is None or not math.isfinite(v) else round(float(v), digits)


def colocation_share(pod: PodInfo, node: str | None, index: ClusterIndex, default_rps: float = 1.0) -> float:
    """The call-rate-weighted share of ``pod``'s neighbours' pods (callers and callees, both directions summed) on
    ``node``, 0..1 (0 without neighbours or when unbound); the pod itself not counted."""
    if node is None or node not in index.node_pos:
        return 0.0
    weights = neighbor_weights(index.snapshot.graph, pod.service, default_rps)
    total = sum(weights.values())
    if total <= 0:
        return 0.0
    i = index.node_pos[node]
    share = 0.0
    for svc, w in weights.items():
        counts = index.service_nodes.get(svc)
        tot = index.service_total.get(svc, 0)
        if counts is not None and tot > 0:
            share += w / total * float(counts[i]) / tot
    return share


def cross_node_call_share(index: ClusterIndex, default_rps: float = 1.0) -> float | None:
    """The share (0..1) of the call graph's traffic between pods on different nodes, with each edge's calls spread
    evenly over its caller's and callee's pods: ``1 − Σ_e rps_e Σ_n (a_n / A)(b_n / B) / Σ_e rps_e``; ``None``
    without an edge whose both sides have pods."""
    num = den = 0.0
    for e in index.snapshot.graph.edges:
        if e.caller == e.callee:
            continue
        a, b = index.service_nodes.get(e.caller), index.service_nodes.get(e.callee)
        ta, tb = index.service_total.get(e.caller, 0), index.service_total.get(e.callee, 0)
        if a is None or b is None or ta <= 0 or tb <= 0:
            continue
        r = default_rps if e.rps is None else max(float(e.rps), 0.0)
        num += r * float(np.dot(a / ta, b / tb))
        den += r
    return None if den <= 0 else 1.0 - num / den


@dataclass
class ShadowCycle:
    """The simulated outcome of one dry-run cycle (module docstring)."""

    started_at_s: float
    planner: str
    moves: list[dict[str, Any]] = field(default_factory=list)
    blocked: list[dict[str, Any]] = field(default_factory=list)
    skipped_by_guard: dict[str, int] = field(default_factory=dict)
    scaling: list[dict[str, Any]] = field(default_factory=list)
    resizes: list[dict[str, Any]] = field(default_factory=list)
    effect: dict[str, Any] = field(default_factory=dict)
    intent: dict[str, Any] = field(default_factory=dict)
    node_loss: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": RECORD_KIND,
            "version": RECORD_VERSION,
            "started_at_s": self.started_at_s,
            "planner": self.planner,
            "effect": self.effect,
            "moves": self.moves,
            "blocked": self.blocked,
            "skipped_by_guard": self.skipped_by_guard,
            "scaling": self.scaling,
            "resizes": self.resizes,
            "intent": self.intent,
            "node_loss": self.node_loss,
        }

    def summary(self) -> str:
        """One line: ``shadow: 2 moves (1 landing where planned), 3 blocked, 1 scale change; cross-node calls
        62.0 % -> 48.1 %``."""
        e = self.effect
        agree = sum(1 for m in self.moves if m["lands_as_planned"])
        scales = sum(1 for s in self.scaling if s["outcome"] == "dry_run")
        resizes = sum(1 for r in self.resizes if r["outcome"] == "dry_run")
        text = (
            f"shadow: {len(self.moves)} move(s) ({agree} landing where planned), {len(self.blocked)} blocked, "
            f"{scales} scale change(s), {resizes} resize(s)"
        )
        b, a = e.get("cross_node_call_pct_before"), e.get("cross_node_call_pct_after")
        if b is not None and a is not None:
            text += f"; cross-node calls {b:.1f} % -> {a:.1f} %"
        return text


def _util(view: PlanView, node: str | None) -> float | None:
    if node is None or node not in view.index.node_pos:
        return None
    return float(view.util[view.index.node_pos[node]])


def _node_loss(report: CycleReport, view: PlanView, model: SchedulerModel) -> tuple[list[dict[str, Any]], PlanView]:
    """The cycle's node-loss evictions (:mod:`descheduler.nodeloss`), each with where kube-scheduler would bind its
    replacement (the dry-run ones, applied to the view in order); the view after them."""
    out: list[dict[str, Any]] = []
    for r in report.node_loss:
        pod = view.pods.get(r.move.pod)
        landing = None
        if r.outcome == "dry_run" and pod is not None:
            landing, _total, _feasible = model.landing(pod, view.index)
            view = view.apply_move(r.move.pod, landing)
        out.append(
            {
                "pod": r.move.pod,
                "service": pod.service if pod is not None else None,
                "from_node": r.move.from_node,
                "outcome": r.outcome,
                "predicted_node": landing,
                "blocked_by": [{"guard": b.guard, "reason": b.reason} for b in r.blockers],
                "message": r.message,
            }
        )
    return out, view


def _moves(
    report: CycleReport, index: ClusterIndex, model: SchedulerModel, view: PlanView | None = None
) -> tuple[list[dict[str, Any]], PlanView]:
    """The dry-run moves simulated in order (module docstring), from ``view`` (default: the observation's); the
    planning view after them."""
    view = view if view is not None else PlanView.of(index)
    out: list[dict[str, Any]] = []
    for r in report.results:
        if r.outcome != "dry_run":
            continue
        m = r.move
        pod = view.pods.get(m.pod)
        if pod is None:
            continue
        node, total, feasible = model.landing(pod, view.index)
        before = colocation_share(pod, pod.node_name, view.index)
        src_before, land_before = _util(view, pod.node_name), _util(view, node)
        after_view = view.apply_move(m.pod, node)
        moved = after_view.pods[m.pod]
        out.append(
            {
                "pod": m.pod,
                "service": pod.service,
                "from_node": m.from_node,
                "planned_to_node": m.to_node,
                "predicted_node": node,
                "lands_as_planned": node is not None and (m.to_node is None or node == m.to_node),
                "predicted_score": total,
                "feasible_nodes": feasible,
                "why": f"{m.reason} (planner gain {m.gain:.2f})",
                "reason": m.reason,
                "gain": _r(m.gain),
                "colocation_before": _r(before),
                "colocation_after": _r(colocation_share(moved, node, after_view.index)),
                "from_node_cpu_util_before": _r(src_before),
                "from_node_cpu_util_after": _r(_util(after_view, m.from_node)),
                "to_node_cpu_util_before": _r(land_before),
                "to_node_cpu_util_after": _r(_util(after_view, node)),
            }
        )
        view = after_view
    return out, view


def _scaling(report: CycleReport, snapshot: ClusterSnapshot) -> list[dict[str, Any]]:
    pods_of: dict[str, list[PodInfo]] = {}
    services: dict[str, str] = {}
    for w in snapshot.workloads:
        services[f"{w.namespace}/{w.name}"] = w.service
    for p in snapshot.pods:
        if p.node_name is not None and not p.terminating:
            pods_of.setdefault(f"{p.namespace}/{p.service}", []).append(p)
    out = []
    for s in report.scaling:
        ns = s.workload.split("/", 1)[0]
        pods = pods_of.get(f"{ns}/{services.get(s.workload, '')}", [])
        use = sum((p.usage.cpu_m if p.usage is not None else p.requests.cpu_m) for p in pods)
        req = pods[0].requests.cpu_m if pods else 0

        def util(n: int | None, use=use, req=req) -> float | None:
            return use / (n * req) if n and req else None

        out.append(
            {
                "workload": s.workload,
                "outcome": s.outcome,
                "replicas_before": s.current,
                "replicas_after": s.target if s.outcome == "dry_run" else s.current,
                "planned_replicas": s.planned,
                "pod_cpu_util_before": _r(util(s.current)),
                "pod_cpu_util_after": _r(util(s.target if s.outcome == "dry_run" else s.current)),
                "why": s.message,
            }
        )
    return out


def _resizes(report: CycleReport, snapshot: ClusterSnapshot, index: ClusterIndex) -> list[dict[str, Any]]:
    pods = {p.key: p for p in snapshot.pods}
    out = []
    for r in report.resizes:
        p = pods.get(r.pod)
        use = (p.usage.cpu_m if p is not None and p.usage is not None else None) if p is not None else None
        node_after = None
        if p is not None and p.node_name in index.node_pos and r.cpu_request_m is not None and r.outcome == "dry_run":
            i = index.node_pos[p.node_name]
            node_after = (index.req_cpu_m[i] - p.requests.cpu_m + r.cpu_request_m) / max(index.alloc_cpu_m[i], 1.0)
        after = r.cpu_request_m if r.outcome == "dry_run" else r.from_cpu_request_m
        out.append(
            {
                "pod": r.pod,
                "workload": r.workload,
                "outcome": r.outcome,
                "reason": r.reason,
                "cpu_request_m_before": r.from_cpu_request_m,
                "cpu_request_m_after": after,
                "pod_cpu_util_before": _r(use / r.from_cpu_request_m)
                if use is not None and r.from_cpu_request_m
                else None,
                "pod_cpu_util_after": _r(use / after) if use is not None and after else None,
                "node_cpu_requested_after": _r(node_after),
                "why": r.message,
            }
        )
    return out


def analyze_cycle(report: CycleReport, snapshot: ClusterSnapshot, model: SchedulerModel | None = None) -> ShadowCycle:
    """What the dry-run cycle ``report`` would have done to ``snapshot`` (the cycle's observation), and why (module
    docstring). ``model``: kube-scheduler's prediction (default: a :class:`SchedulerModel` without our extender)."""
    model = model if model is not None else SchedulerModel(None, 0)
    index = ClusterIndex.build(snapshot)
    lost, view = _node_loss(report, PlanView.of(index), model)
    moves, after = _moves(report, index, model, view)
    blocked = [
        {
            "pod": r.move.pod,
            "from_node": r.move.from_node,
            "planned_to_node": r.move.to_node,
            "why_proposed": f"{r.move.reason} (planner gain {r.move.gain:.2f})",
            "outcome": r.outcome,
            "blocked_by": [{"guard": b.guard, "reason": b.reason} for b in r.blockers],
            "message": r.message,
        }
        for r in report.results
        if r.outcome != "dry_run"
    ]
    before_pct = cross_node_call_share(index)
    after_pct = cross_node_call_share(after.index)
    util0 = [float(u) for u in PlanView.of(index).util if math.isfinite(u)]
    util1 = [float(u) for u in after.util if math.isfinite(u)]
    effect = {
        "moves": len(moves),
        "cross_node_call_pct_before": _r(None if before_pct is None else 100 * before_pct, 2),
        "cross_node_call_pct_after": _r(None if after_pct is None else 100 * after_pct, 2),
        "max_node_cpu_util_before": _r(max(util0, default=None)),
        "max_node_cpu_util_after": _r(max(util1, default=None)),
        "node_cpu_util_std_before": _r(float(np.std(util0)) if util0 else None),
        "node_cpu_util_std_after": _r(float(np.std(util1)) if util1 else None),
    }
    intent = {
        "values": list(report.intent.values),
        "colocation_priority": dict(sorted(report.intent.colocation_priority.items())),
        "capacity_targets": dict(sorted(report.intent.capacity_target.items())),
    }
    return ShadowCycle(
        report.started_at_s,
        report.planner,
        moves,
        blocked,
        dict(report.skipped_by_guard),
        _scaling(report, snapshot),
        _resizes(report, snapshot, index),
        effect,
        intent,
        lost,
    )


class ShadowLog:
    """Appends :class:`ShadowCycle` records (one JSON object per line) to ``path``, rotating at ``max_bytes``
    (``backups`` old files kept; :class:`logging.handlers.RotatingFileHandler`), and remembers the first
    observation of each cycle (:meth:`remember` wraps the cycle's ``observe``). Raises ``OSError`` from the
    constructor when the file cannot be opened."""

    def __init__(self, path: str | Path | None, max_bytes: int = 64 * 2**20, backups: int = 3):
        self.path = Path(path) if path is not None else None
        self.snapshot: ClusterSnapshot | None = None
        self.written = 0
        self._writer = (
            JsonLinesLog(self.path, max_bytes, backups, "hrl.descheduler.shadow") if self.path is not None else None
        )

    def remember(self, observe: Callable[[], ClusterSnapshot]) -> Callable[[], ClusterSnapshot]:
        """``observe`` that also keeps the cycle's first observation (until :meth:`take`)."""

        def wrapped() -> ClusterSnapshot:
            snap = observe()
            if self.snapshot is None:
                self.snapshot = snap
            return snap

        return wrapped

    def take(self) -> ClusterSnapshot | None:
        """The cycle's first observation, forgotten here."""
        snap, self.snapshot = self.snapshot, None
        return snap

    def write(self, cycle: ShadowCycle) -> None:
        if self._writer is not None:
            self._writer.write({**cycle.to_json(), "written_at_s": round(time.time(), 3)})
            self.written += 1

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
