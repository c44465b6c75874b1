"""``hrl-descheduler``: observe the cluster, plan moves, check the guards, evict (or report what it would).

Usage::

    hrl-descheduler [--config FILE] [--once | --interval SECONDS] [--dry-run] [--snapshot FILE] [--json]

- ``--once``: one cycle, then exit (CronJob mode). ``--interval S``: a cycle every S seconds until
  interrupted (Deployment mode). Neither: ``--once`` with ``--snapshot``, else every ``intervalSeconds`` of
  the configuration.
- ``--snapshot FILE``: read the cluster from a file, as ``kubectl get nodes,pods,pdb,deployments -A -o json``
  prints it. There is no cluster to evict from then, so ``--snapshot`` **implies** ``--dry-run`` (a note
  on stderr says so when ``--dry-run`` was not given). Without ``--snapshot`` the descheduler needs the
  live-cluster observer and Eviction API evictor of ``descheduler/kube.py`` (a later issue); until then it
  exits 2 with a one-line message.
- ``--json``: stdout carries only the :meth:`CycleReport.to_json` object (one line per cycle in
  ``--interval`` mode); messages go to stderr. Without it, a readable report.

Exit status: 0 after the cycle(s) ran (whatever their outcomes); 1 when the cluster state, the graph
sources or the eviction-history file cannot be read; 2 for usage or configuration errors.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Sequence

from policy.config import ConfigError
from policy.lowlevel import TopologyHeuristic
from policy.observe import ObjectError

from .config import DeschedulerConfiguration, load_descheduler_config, planner_from_config
from .evict import DryRunEvictor
from .guards import EvictionHistory, HistoryError
from .loop import CycleReport, run_forever, run_once
from .metrics import DeschedulerMetrics, push, serve, write_textfile
from .snapshot import TopologyUnavailable, load_snapshot_file, load_topology

PROG = "hrl-descheduler"
NO_OBSERVER = (f"{PROG}: reading a live cluster is not available yet (descheduler/kube.py comes with the "
               "control-plane issue); use --snapshot FILE with the output of "
               "'kubectl get nodes,pods,pdb,deployments -A -o json'")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Topology-aware descheduler: moves pods of chatty services together and off overloaded "
                    "nodes, through guarded evictions.")
    p.add_argument("--config", metavar="FILE", help="DeschedulerConfiguration YAML (default: built-in defaults)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true", help="run one cycle and exit (CronJob mode)")
    mode.add_argument("--interval", metavar="SECONDS", type=_positive_float,
                      help="run a cycle every SECONDS until interrupted")
    p.add_argument("--dry-run", action="store_true", help="evict nothing; report what would be evicted")
    p.add_argument("--snapshot", metavar="FILE",
                   help="read the cluster from a Kubernetes List JSON/YAML file or directory "
                        "(kubectl get nodes,pods,pdb,deployments -A -o json); implies --dry-run")
    p.add_argument("--json", action="store_true", help="print only the cycle report JSON on stdout")
    return p


def _positive_float(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0 (got {s!r})") from None
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0 (got {s!r})")
    return v


def _err(msg: str) -> None:
    print(msg, file=sys.stderr)


def format_report(report: CycleReport) -> str:
    """The human-readable report: one summary line, then a table of the planned moves and their outcomes."""
    from tabulate import tabulate  # noqa: PLC0415 - only the readable output needs it

    mode = "dry run" if report.dry_run else "live"
    counts = ", ".join(f"{k} {v}" for k, v in report.counts.items() if v)
    head = (f"{PROG} ({mode}, planner {report.planner}): {report.nodes} nodes, {report.pods} pods, "
            f"{len(report.planned_moves)} planned moves" + (f" ({counts})" if counts else "")
            + f" in {report.duration_s * 1000:.0f} ms")
    intent = ", ".join(f"{v:g}" for v in report.intent)
    lines = [head, f"intent: [{intent}]"]
    if report.results:
        rows = []
        for r in report.results:
            m = r.move
            detail = "; ".join(str(b) for b in r.blockers) if r.blockers else r.message
            rows.append([m.pod, m.from_node, m.to_node or "-", m.reason, f"{m.gain:.2f}", r.outcome, detail])
        lines.append(tabulate(rows, headers=["pod", "from", "to", "reason", "gain", "outcome", "detail"],
                              tablefmt="simple", disable_numparse=True))
    else:
        lines.append("nothing worth moving")
    for w in report.warnings:
        lines.append(f"warning: {w}")
    return "\n".join(lines)


def _export_metrics(metrics: DeschedulerMetrics, config: DeschedulerConfiguration) -> None:
    mc = config.metrics
    try:
        if mc.textfile:
            write_textfile(metrics.registry, mc.textfile)
        if mc.pushgateway:
            push(metrics.registry, mc.pushgateway, mc.job)
    except OSError as exc:
        _err(f"{PROG}: warning: could not export metrics: {exc}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``hrl-descheduler``; returns the exit status (see the module docstring)."""
    args = build_parser().parse_args(argv)
    try:
        config = load_descheduler_config(args.config)
    except ConfigError as exc:
        _err(str(exc))
        return 2
    if args.snapshot is None:
        _err(NO_OBSERVER)
        return 2
    if not (args.dry_run or config.dry_run):
        _err(f"{PROG}: note: --snapshot implies --dry-run (there is no cluster to evict from)")
    config = config.model_copy(update={"dry_run": True})

    warnings: list[str] = []
    graph = None
    if config.topology.sources:
        try:
            graph, warnings = load_topology(config.topology.sources)
        except TopologyUnavailable as exc:
            _err(f"{PROG}: {exc}")
            return 1
        except (OSError, ValueError) as exc:
            _err(f"{PROG}: topology.sources: {exc}")
            return 1
        for w in warnings:
            _err(f"{PROG}: warning: {w}")

    snapshot_path = args.snapshot

    def observe():
        return load_snapshot_file(snapshot_path, graph, taken_at_s=time.time())

    try:
        observe()  # fail fast, before anything else, on an unreadable snapshot
        history = EvictionHistory.load(config.state_file) if config.state_file else EvictionHistory()
    except (ObjectError, HistoryError) as exc:
        _err(f"{PROG}: {exc}")
        return 1

    evictor = DryRunEvictor()
    planner = planner_from_config(config)
    placement = TopologyHeuristic()
    metrics = DeschedulerMetrics()

    def emit(report: CycleReport) -> None:
        if args.json:
            print(json.dumps(report.to_json(), sort_keys=False), flush=True)
        else:
            print(format_report(report), flush=True)
        _export_metrics(metrics, config)

    once = args.once or (args.interval is None and args.snapshot is not None)
    if once:
        try:
            report = run_once(observe, evictor, planner, placement, config, history, time.time(),
                              metrics=metrics, warnings=tuple(warnings))
        except ObjectError as exc:
            _err(f"{PROG}: {exc}")
            return 1
        emit(report)
        return 0

    interval_s = args.interval if args.interval is not None else config.interval_seconds
    if config.metrics.listen:
        serve(metrics.registry, config.metrics.listen)
    stop = threading.Event()
    try:
        run_forever(interval_s, observe, evictor, planner, placement, config, history, metrics=metrics,
                    stop=stop, on_report=emit,
                    on_error=lambda exc: _err(f"{PROG}: cycle failed: {type(exc).__name__}: {exc}"))
    except KeyboardInterrupt:
        stop.set()
    return 0


if __name__ == "__main__":
    sys.exit(main())
