"""Prometheus metrics of the descheduler (prometheus-client, registry passed in so tests read values directly).

- ``hrl_descheduler_evictions_total{outcome, dry_run}``: eviction attempts by outcome (evicted, refused, not_found,
  error, dry_run);
- ``hrl_descheduler_blocked_total{guard, dry_run}``: planned moves a guard blocked, by guard name (one move blocked
  by two guards counts once for each; with ``cost``: the move cost model, and ``surge``: no make-before-break move
  and no fallback, :data:`descheduler.loop.BLOCKER_NAMES`);
- ``hrl_descheduler_planned_moves_total{reason, dry_run}``: moves the high-level policy planned, by reason;
- ``hrl_descheduler_cycle_duration_seconds``: histogram of whole-cycle wall time;
- ``hrl_descheduler_cycles_total{result, dry_run}``: cycles that completed (``ok``) or failed (``error``);
- ``hrl_descheduler_scale_total{outcome, dry_run}``: replica targets acted on, by outcome (scaled, unchanged,
  refused_hpa, not_found, error, dry_run, blocked, skipped; :mod:`descheduler.scale`);
- ``hrl_descheduler_hpa_conflicts``: Deployments the last cycle left alone because a HorizontalPodAutoscaler
  targets them (gauge);
- ``leader_election_master_status{name}``: 1 while this replica holds the leader-election Lease ``name``, else 0
  (interval mode; client-go's name for the same gauge, so the usual leader-election dashboards apply);
- ``hrl_build_info`` and the ``process_*`` / ``python_*`` collectors (:func:`policy.telemetry.register_process_metrics`,
  registered by ``hrl-descheduler``).
- ``hrl_descheduler_resizes_total{outcome, dry_run}``: planned in-place resizes by outcome (resized, unchanged,
  refused_vpa, refused_restart, changed, not_running, not_found, unsupported, error, dry_run, blocked, no_room, capped,
  cooldown, skipped; :mod:`descheduler.resize`);
- ``hrl_descheduler_vpa_conflicts``: pods the last cycle did not resize because a VerticalPodAutoscaler owns their
  Deployment (gauge).
- ``hrl_descheduler_loop_holds``: workloads on hold after an eviction loop (gauge, last cycle);
  ``hrl_descheduler_loops_detected_total``: holds started;
- ``hrl_descheduler_cycle_stops_total{kind}``: cycles that stopped early (``total_cap``, ``reread_failed``,
  ``history_unwritable``, ``interrupted``);
- ``hrl_descheduler_rereads_total{kind}``: targeted re-reads before evictions (pod, pdb, pods_covered, owner,
  node).
- ``hrl_descheduler_moves_total{path,outcome}``: planned moves by the way they were made (``path``: ``surge``,
  make-before-break; ``evict``, the Eviction API) and what came of them: ``accepted`` (taken as a make-before-break
  move), ``announced`` (its record published to the extender), ``started`` (its Deployment scaled up), ``completed``
  / ``aborted`` (later cycles), ``evicted``, ``blocked`` (a guard, the cost model, the surge rules),
  ``refused`` (a PodDisruptionBudget's 429), ``not_found``, ``skipped``, ``error``, ``dry_run``;
  ``hrl_descheduler_moves_aborted_total{reason}`` (:data:`descheduler.surge.ABORT_REASONS`),
  ``hrl_descheduler_moves_fallback_total{reason}`` (why a move could not be made make-before-break:
  :data:`descheduler.surge.SURGE_REFUSALS`), ``hrl_descheduler_moves_pending`` (surges in progress, gauge).
- ``hrl_descheduler_node_loss_evictions_total{outcome, dry_run}``: evictions of the pods of lost nodes
  (:mod:`descheduler.nodeloss`) by outcome (evicted, blocked, refused, not_found, skipped, error, dry_run);
  ``hrl_descheduler_nodes_lost``: nodes tainted unreachable or not-ready for ``nodeLoss.afterSeconds`` and closed to
  new pods (gauge, last cycle);

The counters of what a cycle decided (evictions, blocked, planned moves, scale, resizes, cycles) carry a
``dry_run`` label, ``"true"`` for a dry run (shadow mode, :mod:`descheduler.shadow`) and ``"false"`` for a live
one (kubernetes-sigs/descheduler#1176), so a dry run's figures never add up with real evictions.

No pod or node names as label values (DESIGN.md section 6). Exporters for the CronJob mode:
:func:`write_textfile` (node_exporter textfile collector, or ``-`` for stderr) and :func:`push`
(Pushgateway); for the interval mode :func:`serve` (``/metrics`` on a host:port).

Counters across CronJob runs: each run is a new process whose counters start at 0, and a Pushgateway group holds
what the last run pushed, so the pushed ``*_total`` series would restart at every run (two runs of 3 evictions each
read as no increase). :func:`save_counters` / :func:`load_counters` carry the ``hrl_descheduler_*_total`` counters
over in a file beside the state file (:func:`counters_path`: ``history.json`` -> ``history.counters.json``; the
eviction history itself is left alone, a dry run included), so each push replaces the group with cumulative totals,
as a long-running process would export them (histograms, gauges and the process metrics stay per run).
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    push_to_gateway,
    start_http_server,
    write_to_textfile,
)

from policy.state import MoveReason

from .evict import EVICTION_OUTCOMES
from .loop import BLOCKER_NAMES, STOP_KINDS
from .resize import RESIZE_OUTCOMES
from .scale import SCALE_OUTCOMES
from .surge import ABORT_REASONS, SURGE_REFUSALS

if TYPE_CHECKING:
    from .loop import CycleReport

__all__ = ["DeschedulerMetrics", "write_textfile", "push", "serve", "counters_path", "load_counters", "save_counters"]

#: The ``outcome`` values of ``hrl_descheduler_moves_total`` per ``path``.
MOVE_OUTCOMES: dict[str, tuple[str, ...]] = {
    "surge": (
        "accepted",
        "announced",
        "started",
        "completed",
        "aborted",
        "blocked",
        "error",
        "dry_run",
        "not_found",
        "skipped",
    ),
    "evict": ("evicted", "blocked", "refused", "not_found", "skipped", "error", "dry_run"),
}

_CYCLE_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


def _dry(flag: bool) -> str:
    return "true" if flag else "false"


class DeschedulerMetrics:
    """The descheduler's metrics, registered on ``registry`` (a fresh one when ``None``). Every label value
    is pre-created so a series exists (at 0) before its first event, with ``dry_run`` = ``dry_run`` (the
    process's mode; a cycle's own ``dry_run`` labels what it counts)."""

    def __init__(self, registry: CollectorRegistry | None = None, dry_run: bool = False):
        self.registry = registry if registry is not None else CollectorRegistry()
        self.dry_run = dry_run
        d = _dry(dry_run)
        r = self.registry
        self.evictions = Counter(
            "hrl_descheduler_evictions_total", "Eviction attempts by outcome.", ["outcome", "dry_run"], registry=r
        )
        self.blocked = Counter(
            "hrl_descheduler_blocked_total", "Planned moves blocked, by guard.", ["guard", "dry_run"], registry=r
        )
        self.planned = Counter(
            "hrl_descheduler_planned_moves_total", "Moves planned, by reason.", ["reason", "dry_run"], registry=r
        )
        self.cycle_duration = Histogram(
            "hrl_descheduler_cycle_duration_seconds",
            "Wall time of one descheduling cycle.",
            buckets=_CYCLE_BUCKETS_S,
            registry=r,
        )
        self.cycles = Counter(
            "hrl_descheduler_cycles_total", "Cycles by result (ok, error).", ["result", "dry_run"], registry=r
        )
        self.scale = Counter(
            "hrl_descheduler_scale_total", "Replica targets acted on, by outcome.", ["outcome", "dry_run"], registry=r
        )
        self.hpa_conflicts = Gauge(
            "hrl_descheduler_hpa_conflicts",
            "Deployments the last cycle left alone because an HPA targets them.",
            registry=r,
        )
        self.leader = Gauge(
            "leader_election_master_status",
            "1 while this replica holds the leader-election Lease (label name), else 0.",
            ["name"],
            registry=r,
        )
        self.resizes = Counter(
            "hrl_descheduler_resizes_total",
            "Planned in-place pod resizes, by outcome.",
            ["outcome", "dry_run"],
            registry=r,
        )
        self.vpa_conflicts = Gauge(
            "hrl_descheduler_vpa_conflicts",
            "Pods the last cycle did not resize because a VerticalPodAutoscaler owns their Deployment.",
            registry=r,
        )
        for o in RESIZE_OUTCOMES:
            self.resizes.labels(outcome=o, dry_run=d)
        self.node_loss = Counter(
            "hrl_descheduler_node_loss_evictions_total",
            "Evictions of pods of lost nodes (descheduler.nodeloss), by outcome.",
            ["outcome", "dry_run"],
            registry=r,
        )
        for o in MOVE_OUTCOMES["evict"]:
            self.node_loss.labels(outcome=o, dry_run=d)
        self.nodes_lost = Gauge(
            "hrl_descheduler_nodes_lost",
            "Nodes tainted unreachable or not-ready for at least nodeLoss.afterSeconds and closed to new pods "
            "(last cycle).",
            registry=r,
        )
        self.loop_holds = Gauge(
            "hrl_descheduler_loop_holds", "Workloads on hold after an eviction loop (last cycle).", registry=r
        )
        self.loops_detected = Counter(
            "hrl_descheduler_loops_detected_total", "Eviction loops detected (holds started).", registry=r
        )
        self.stops = Counter(
            "hrl_descheduler_cycle_stops_total", "Cycles that stopped early, by kind.", ["kind"], registry=r
        )
        self.rereads = Counter(
            "hrl_descheduler_rereads_total", "Targeted re-reads before evictions, by kind.", ["kind"], registry=r
        )
        self.moves = Counter(
            "hrl_descheduler_moves_total",
            "Planned moves by path (surge, evict) and outcome.",
            ["path", "outcome"],
            registry=r,
        )
        self.moves_aborted = Counter(
            "hrl_descheduler_moves_aborted_total", "Make-before-break moves aborted, by reason.", ["reason"], registry=r
        )
        self.moves_fallback = Counter(
            "hrl_descheduler_moves_fallback_total",
            "Moves that could not be made make-before-break, by reason.",
            ["reason"],
            registry=r,
        )
        self.moves_pending = Gauge(
            "hrl_descheduler_moves_pending", "Make-before-break moves in progress after the last cycle.", registry=r
        )
        for path, outcomes in MOVE_OUTCOMES.items():
            for o in outcomes:
                self.moves.labels(path=path, outcome=o)
        for reason in ABORT_REASONS:
            self.moves_aborted.labels(reason=reason)
        for reason in (*SURGE_REFUSALS, "no_target"):
            self.moves_fallback.labels(reason=reason)
        for k in STOP_KINDS:
            self.stops.labels(kind=k)
        for k in ("pod", "pdb", "pods_covered", "owner", "node"):
            self.rereads.labels(kind=k)
        for o in SCALE_OUTCOMES:
            self.scale.labels(outcome=o, dry_run=d)
        for o in EVICTION_OUTCOMES:
            self.evictions.labels(outcome=o, dry_run=d)
        for g in BLOCKER_NAMES:
            self.blocked.labels(guard=g, dry_run=d)
        for reason in get_args(MoveReason):
            if reason != "node-lost":  # not planned: node-loss evictions have their own counter
                self.planned.labels(reason=reason, dry_run=d)
        for res in ("ok", "error"):
            self.cycles.labels(result=res, dry_run=d)

    def _counters(self) -> dict[str, Counter]:
        """The counters that carry over between runs, by exported name."""
        cs = (self.evictions, self.blocked, self.planned, self.cycles, self.scale, self.resizes, self.loops_detected,
              self.stops, self.rereads, self.node_loss)  # fmt: skip
        return {f"{c._name}_total": c for c in cs}

    def counter_state(self) -> dict[str, Any]:
        """The counters' values, JSON-ready: ``{"version": 1, "counters": {name: [[labels, value], ...]}}``."""
        out: dict[str, list] = {}
        for name, c in self._counters().items():
            out[name] = [[dict(s.labels), s.value] for fam in c.collect() for s in fam.samples if s.name == name]
        return {"version": 1, "counters": out}

    def restore_counters(self, state: Any) -> None:
        """Add a previous run's :meth:`counter_state` to the counters (call once, before the first cycle). Unknown
        counters are ignored (a newer or older version named them). Raises ``ValueError`` naming the first
        malformed entry; nothing is added then."""
        if state is None:
            return
        if (
            not isinstance(state, Mapping)
            or state.get("version") != 1
            or not isinstance(state.get("counters"), Mapping)
        ):
            raise ValueError("metrics: expected {version: 1, counters: {...}}")
        known = self._counters()
        adds = []
        for name, entries in state["counters"].items():
            c = known.get(name)
            if c is None:
                continue
            if not isinstance(entries, list):
                raise ValueError(f"metrics.counters.{name}: expected a list of [labels, value]")
            for i, e in enumerate(entries):
                ok = isinstance(e, list) and len(e) == 2 and isinstance(e[0], Mapping)
                value = e[1] if ok else None
                if not ok or isinstance(value, bool) or not isinstance(value, int | float):
                    raise ValueError(f"metrics.counters.{name}[{i}]: expected [labels, value]")
                if not math.isfinite(value) or value < 0 or set(e[0]) != set(c._labelnames):
                    raise ValueError(f"metrics.counters.{name}[{i}]: labels {sorted(e[0])} or value {value!r} invalid")
                adds.append((c, {str(k): str(v) for k, v in e[0].items()}, float(value)))
        for c, labels, value in adds:
            (c.labels(**labels) if labels else c).inc(value)

    def observe_cycle(self, report: CycleReport) -> None:
        """Add one finished cycle's counts (labelled ``dry_run`` as the cycle was)."""
        d = _dry(report.dry_run)
        for m in report.planned_moves:
            self.planned.labels(reason=m.reason, dry_run=d).inc()
        for res in report.results:
            if res.outcome in EVICTION_OUTCOMES:
                self.evictions.labels(outcome=res.outcome, dry_run=d).inc()
            for guard in res.blocked_by:
                self.blocked.labels(guard=guard, dry_run=d).inc()
        for sr in report.scaling:
            self.scale.labels(outcome=sr.outcome, dry_run=d).inc()
        self.hpa_conflicts.set(sum(1 for sr in report.scaling if sr.outcome == "refused_hpa"))
        for rr in report.resizes:
            self.resizes.labels(outcome=rr.outcome, dry_run=d).inc()
        self.vpa_conflicts.set(sum(1 for rr in report.resizes if rr.outcome == "refused_vpa"))
        self.loop_holds.set(len(report.loop_holds))
        self.loops_detected.inc(report.new_loop_holds)
        if report.stop is not None:
            self.stops.labels(kind=report.stop.kind).inc()
        for k, n in report.reads.items():
            self.rereads.labels(kind=k).inc(n)
        self._observe_moves(report)
        for res in report.node_loss:
            self.node_loss.labels(outcome=res.outcome, dry_run=d).inc()
        self.nodes_lost.set(len(report.lost_nodes))
        self.cycle_duration.observe(report.duration_s)
        self.cycles.labels(result="ok", dry_run=d).inc()

    def _observe_moves(self, report: CycleReport) -> None:
        for res in report.results:
            path = res.path or "evict"
            outcome = "accepted" if res.outcome == "surged" else res.outcome
            self.moves.labels(path=path, outcome=outcome).inc()
            if res.fallback:
                self.moves_fallback.labels(reason=res.fallback).inc()
        for ev in report.surges:
            if ev.outcome in ("announced", "started", "completed", "aborted"):
                self.moves.labels(path="surge", outcome=ev.outcome).inc()
            if ev.outcome == "aborted":
                self.moves_aborted.labels(reason=ev.reason or "unknown").inc()
        self.moves_pending.set(len(report.pending_moves))

    def observe_failed_cycle(self) -> None:
        """A cycle that raised before producing a report (e.g. the cluster could not be read)."""
        self.cycles.labels(result="error", dry_run=_dry(self.dry_run)).inc()


def counters_path(state_file: str | Path) -> Path:
    """Where the counters of the runs sharing ``state_file`` are kept: ``DIR/NAME.counters.json`` beside it."""
    p = Path(state_file)
    return p.with_name(f"{p.stem}.counters.json")


def load_counters(metrics: DeschedulerMetrics, path: str | Path) -> None:
    """Add the counters saved at ``path`` (a missing file: none yet) to ``metrics``. Raises ``ValueError`` (one
    line naming the file) for a file that cannot be read or parsed; nothing is added then."""
    p = Path(path)
    if not p.exists():
        return
    try:
        state = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{p}: {' '.join(str(exc).split())}") from None
    try:
        metrics.restore_counters(state)
    except ValueError as exc:
        raise ValueError(f"{p}: {exc}") from None


def save_counters(metrics: DeschedulerMetrics, path: str | Path) -> None:
    """Write ``metrics``' counters to ``path`` atomically (temporary file + rename). Raises OSError."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=p.name + ".", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(metrics.counter_state(), f, sort_keys=True)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_textfile(registry: CollectorRegistry, path: str) -> None:
    """Write the Prometheus text exposition of ``registry`` to ``path`` (atomically, for node_exporter's
    textfile collector), or to stderr when ``path`` is ``"-"`` (stdout stays for the report)."""
    if path == "-":
        sys.stderr.write(generate_latest(registry).decode("utf-8"))
        return
    write_to_textfile(path, registry)


def push(registry: CollectorRegistry, gateway: str, job: str, grouping_key: Mapping[str, str] | None = None) -> None:
    """Push ``registry`` to a Prometheus Pushgateway, replacing the group ``{job, **grouping_key}`` (PUT). Raises
    OSError on failure."""
    push_to_gateway(gateway, job=job, registry=registry, grouping_key=dict(grouping_key or {}))


def serve(registry: CollectorRegistry, listen: str) -> None:
    """Serve ``/metrics`` for ``registry`` on ``listen`` (``host:port``) from a daemon thread."""
    host, _, port = listen.rpartition(":")
    start_http_server(int(port), addr=host.strip("[]") or "127.0.0.1", registry=registry)
