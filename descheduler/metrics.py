"""Prometheus metrics of the descheduler (prometheus-client, registry passed in so tests read values directly).

- ``hrl_descheduler_evictions_total{outcome, dry_run}``: eviction attempts by outcome (evicted, refused, not_found,
  error, dry_run);
- ``hrl_descheduler_blocked_total{guard, dry_run}``: planned moves a guard blocked, by guard name (one move blocked
  by two guards counts once for each);
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
  ``history_unwritable``);
- ``hrl_descheduler_rereads_total{kind}``: targeted re-reads before evictions (pod, pdb, pods_covered, owner,
  node).

The counters of what a cycle decided (evictions, blocked, planned moves, scale, resizes, cycles) carry a
``dry_run`` label, ``"true"`` for a dry run (shadow mode, :mod:`descheduler.shadow`) and ``"false"`` for a live
one (kubernetes-sigs/descheduler#1176), so a dry run's figures never add up with real evictions.

No pod or node names as label values (DESIGN.md section 6). Exporters for the CronJob mode:
:func:`write_textfile` (node_exporter textfile collector, or ``-`` for stderr) and :func:`push`
(Pushgateway); for the interval mode :func:`serve` (``/metrics`` on a host:port).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, get_args

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
from .guards import GUARD_NAMES
from .loop import STOP_KINDS
from .resize import RESIZE_OUTCOMES
from .scale import SCALE_OUTCOMES

if TYPE_CHECKING:
    from .loop import CycleReport

__all__ = ["DeschedulerMetrics", "write_textfile", "push", "serve"]

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
        for k in STOP_KINDS:
            self.stops.labels(kind=k)
        for k in ("pod", "pdb", "pods_covered", "owner", "node"):
            self.rereads.labels(kind=k)
        for o in SCALE_OUTCOMES:
            self.scale.labels(outcome=o, dry_run=d)
        for o in EVICTION_OUTCOMES:
            self.evictions.labels(outcome=o, dry_run=d)
        for g in GUARD_NAMES:
            self.blocked.labels(guard=g, dry_run=d)
        for reason in get_args(MoveReason):
            self.planned.labels(reason=reason, dry_run=d)
        for res in ("ok", "error"):
            self.cycles.labels(result=res, dry_run=d)

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
        self.cycle_duration.observe(report.duration_s)
        self.cycles.labels(result="ok", dry_run=d).inc()

    def observe_failed_cycle(self) -> None:
        """A cycle that raised before producing a report (e.g. the cluster could not be read)."""
        self.cycles.labels(result="error", dry_run=_dry(self.dry_run)).inc()


def write_textfile(registry: CollectorRegistry, path: str) -> None:
    """Write the Prometheus text exposition of ``registry`` to ``path`` (atomically, for node_exporter's
    textfile collector), or to stderr when ``path`` is ``"-"`` (stdout stays for the report)."""
    if path == "-":
        sys.stderr.write(generate_latest(registry).decode("utf-8"))
        return
    write_to_textfile(path, registry)


def push(registry: CollectorRegistry, gateway: str, job: str) -> None:
    """Push ``registry`` to a Prometheus Pushgateway (replacing the job's group). Raises OSError on failure."""
    push_to_gateway(gateway, job=job, registry=registry)


def serve(registry: CollectorRegistry, listen: str) -> None:
    """Serve ``/metrics`` for ``registry`` on ``listen`` (``host:port``) from a daemon thread."""
    host, _, port = listen.rpartition(":")
    start_http_server(int(port), addr=host.strip("[]") or "127.0.0.1", registry=registry)
