"""``hrl-descheduler``: observe the cluster, plan moves, check the guards, evict (or report what it would).

Usage::

    hrl-descheduler [--config FILE] [--once | --interval SECONDS] [--dry-run] [--snapshot FILE | --kubeconfig FILE]
                    [--json] [--log-format text|json] [--version]

- ``--once``: one cycle, then exit (CronJob mode). ``--interval S``: a cycle every S seconds until
  interrupted (Deployment mode). Neither: ``--once`` with ``--snapshot``, else every ``intervalSeconds`` of
  the configuration. On a live cluster the periodic mode runs cycles only while holding the
  ``leaderElection`` Lease (``descheduler/leader.py``; on by default), releases it on SIGTERM/SIGINT, and
  exits 1 when it loses it.
- ``--snapshot FILE``: read the cluster from a file, as ``kubectl get nodes,pods,pdb,deployments -A -o json``
  prints it. There is no cluster to evict from then, so ``--snapshot`` **implies** ``--dry-run`` (a note
  on stderr says so when ``--dry-run`` was not given). Without ``--snapshot`` it observes the live cluster
  and evicts through the policy/v1 Eviction API (``descheduler/kube.py``; ``--dry-run`` evicts nothing):
  ``--kubeconfig FILE``, else the in-cluster service account when running in a Pod, else ``$KUBECONFIG`` /
  ``~/.kube/config``. ``--once`` lists each kind once per run; ``--interval`` lists each kind once at start-up and
  then watches (``descheduler.kube.KubeWatchCache``): its cycles read memory. Before each eviction only what the
  decision depends on is read again (GETs; ``descheduler/reread.py``). The plan's replica targets go through
  ``deployments/scale`` (``descheduler/scale.py``; a Deployment an HPA targets is left alone), unless
  ``scaling.enabled`` is false; with ``resize.enabled`` (planner ``hierarchical``) the plan's in-place CPU resizes
  go through ``pods/resize`` (``descheduler/resize.py``; a pod whose Deployment a VerticalPodAutoscaler owns is
  left alone). A planned move is made make-before-break where it can (``moves.strategy: surge``,
  ``descheduler/surge.py``: scale up by one, the new pod steered by the pending-move record published to the
  embedding cache, the old pod marked with the lowest ``pod-deletion-cost`` and scaled away once the new one is
  Ready; it spans cycles, so ``--once`` needs a ``stateFile`` for it, else its moves take ``moves.fallback``).
- Planner state (the hierarchical planner's rate history and last intent) is kept in ``stateFile`` next to
  the eviction history, so a CronJob's next run continues from it; dry runs do not write it. A planner state
  that cannot be read (an older layout, a bad value) is dropped with one warning line and the planner starts
  fresh (its next save replaces it); an unreadable eviction history stops the run (exit 1, fail closed).
- ``--json``: stdout carries only the :meth:`CycleReport.to_json` object (one line per cycle in
  ``--interval`` mode); messages go to stderr. Without it, a readable report.
- ``--log-format text|json``: the messages on stderr, as readable lines or one JSON object per line
  (:func:`policy.telemetry.configure_logging`: timestamp, level, component, logger, message).

Exit status: 0 after the cycle(s) ran (whatever their outcomes); 1 when the live cluster state (API server),
the graph sources or the state file cannot be read; 2 for usage or configuration errors (a kubeconfig that
cannot be loaded, or a learned policy's bundle that is missing, included) and for a ``--snapshot`` file that
cannot be read or holds a malformed value (one line naming the file, the object and the field).

Configuration problems are printed all at once, one line each: ``FILE: dotted.path: problem (got VALUE)``
(:class:`policy.config.ConfigError`), the files the configuration names (bundles, sources) checked in the
same pass.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tabulate import tabulate

from policy.config import MAX_SECONDS, ConfigError
from policy.highlevel import HighLevelPolicy, SchedulerModel
from policy.live import InputMetrics, LiveInputs
from policy.lowlevel import PlacementPolicy
from policy.observe import ObjectError
from policy.state import ClusterSnapshot, ServiceGraph
from policy.telemetry import add_log_format_argument, add_version_argument, configure_logging, register_process_metrics

from .cache import cache_link_from_config
from .config import DeschedulerConfiguration, load_descheduler_config, placement_from_config, planner_from_config
from .events import EventRecorder
from .evict import DryRunEvictor, Evictor
from .guards import EvictionHistory, HistoryError
from .inputs import guard_planner, live_inputs
from .loop import CycleDeps, CycleReport, run_forever, run_once
from .metrics import DeschedulerMetrics, counters_path, load_counters, push, save_counters, serve, write_textfile
from .reread import ClusterReader
from .resize import DryRunResizer, GatedResizer, Resizer
from .scale import DryRunScaler, GatedScaler, Scaler
from .shadow import ShadowLog, analyze_cycle
from .snapshot import load_snapshot_file, load_topology
from .surge import ApiMover

PROG = "hrl-descheduler"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Topology-aware descheduler: moves pods of chatty services together and off overloaded "
        "nodes, through guarded evictions.",
    )
    p.add_argument("--config", metavar="FILE", help="DeschedulerConfiguration YAML (default: built-in defaults)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true", help="run one cycle and exit (CronJob mode)")
    mode.add_argument(
        "--interval",
        metavar="SECONDS",
        type=_positive_float,
        help=f"run a cycle every SECONDS (<= {MAX_SECONDS}, 365 days) until interrupted",
    )
    p.add_argument("--dry-run", action="store_true", help="evict nothing; report what would be evicted")
    p.add_argument(
        "--snapshot",
        metavar="FILE",
        help="read the cluster from a Kubernetes List JSON/YAML file or directory "
        "(kubectl get nodes,pods,pdb,deployments -A -o json); implies --dry-run",
    )
    p.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig of the live cluster (default: in-cluster service account, else $KUBECONFIG / ~/.kube/config)",
    )
    p.add_argument("--json", action="store_true", help="print only the cycle report JSON on stdout")
    add_log_format_argument(p)
    add_version_argument(p, PROG)
    return p


def _positive_float(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0 (got {s!r})") from None
    if not 0 < v <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0 and <= {MAX_SECONDS} (365 days) (got {s!r})")
    return v


log = logging.getLogger("descheduler")


def _err(msg: str, level: int | None = None) -> None:
    """One message on stderr through :mod:`logging` (``--log-format``): ``"PROG: warning: ..."`` logs at WARNING,
    ``"PROG: note: ..."`` at INFO, anything else at ERROR; the ``PROG: `` prefix is the record's component."""
    text = msg.removeprefix(f"{PROG}: ")
    if level is None:
        level = logging.ERROR
        for prefix, lvl in (("warning: ", logging.WARNING), ("note: ", logging.INFO)):
            if text.startswith(prefix):
                level = lvl
    log.log(level, text)


_log_format = "text"  # set by main() from --log-format


def _fatal(msg: str) -> None:
    """The error that ends the run (a non-zero exit follows): with ``--log-format text`` the line ``msg`` as is on
    stderr (``PROG: ...``, or a configuration problem ``FILE: dotted.path: problem (got VALUE)``), the format of
    ``hrl-extender`` and ``hrl-policy``; with ``json`` one ERROR record."""
    if _log_format == "json":
        log.error(msg.removeprefix(f"{PROG}: "))
    else:
        print(msg, file=sys.stderr, flush=True)


def format_report(report: CycleReport, inputs: Sequence[str] = ()) -> str:
    """The human-readable report: one summary line, then a table of the planned moves and their outcomes.
    ``inputs``: one line per live input that is not ``ok`` (:meth:`policy.live.InputStatus.line`)."""
    mode = "dry run" if report.dry_run else "live"
    counts = ", ".join(f"{k} {v}" for k, v in report.counts.items() if v)
    lost = ", ".join(f"{k} {v}" for k, v in report.node_loss_counts.items() if v)
    head = (
        f"{PROG} ({mode}, planner {report.planner}): {report.nodes} nodes, {report.pods} pods, "
        f"{len(report.planned_moves)} planned moves"
        + (f" ({counts})" if counts else "")
        + (f", {len(report.node_loss)} off lost nodes ({lost})" if lost else "")
        + f" in {report.duration_s * 1000:.0f} ms"
    )
    intent = ", ".join(f"{v:g}" for v in report.intent.values)
    lines = [head, f"intent: [{intent}]"]
    for sr in report.scaling:
        lines.append(f"scale {sr.workload}: {sr.outcome} ({sr.message})")
    for ev in report.surges:
        why = f" ({ev.reason})" if ev.reason else ""
        lines.append(f"move {ev.pod} {ev.from_node} -> {ev.to_node}: {ev.outcome}{why}: {ev.message}")
    for rr in report.resizes:
        lines.append(f"resize {rr.pod}: {rr.outcome} ({rr.message})")
    for x in report.lost_nodes:
        since = datetime.fromtimestamp(x.since_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        lines.append(f"node {x.name} lost: {x.taint} for {report.started_at_s - x.since_s:.0f} s (since {since})")
    if report.node_loss_held:
        lines.append(f"node loss: {report.node_loss_held}")
    if report.node_loss_skipped:
        left = ", ".join(f"{why} {n}" for why, n in report.node_loss_skipped.items())
        lines.append(f"node loss: pods left on lost nodes: {left} (nodeLoss in docs/operations.md 5.2.2)")
    for r in report.node_loss:
        detail = "; ".join(str(b) for b in r.blockers) if r.blockers else r.message
        lines.append(f"evict {r.move.pod} off lost node {r.move.from_node}: {r.outcome} ({detail})")
    if report.results:
        rows = []
        for r in report.results:
            m = r.move
            detail = "; ".join(str(b) for b in r.blockers) if r.blockers else r.message
            rows.append([m.pod, m.from_node, m.to_node or "-", m.reason, f"{m.gain:.2f}", r.outcome, detail])
        lines.append(
            tabulate(
                rows,
                headers=["pod", "from", "to", "reason", "gain", "outcome", "detail"],
                tablefmt="simple",
                disable_numparse=True,
            )
        )
    elif not report.node_loss:
        lines.append("nothing worth moving")
    for w in report.warnings:
        lines.append(f"warning: {w}")
    for line in inputs:
        lines.append(f"input {line}")
    return "\n".join(lines)


def _export_metrics(metrics: DeschedulerMetrics, config: DeschedulerConfiguration) -> None:
    mc = config.metrics
    try:
        if mc.textfile:
            write_textfile(metrics.registry, mc.textfile)
        if mc.pushgateway:
            push(metrics.registry, mc.pushgateway, mc.job, mc.grouping_key)
    except OSError as exc:
        _err(f"{PROG}: warning: could not export metrics: {exc}")


class _Exit(Exception):
    """Ends the command with exit status ``code`` after ``lines`` (one :func:`_fatal` each)."""

    def __init__(self, code: int, *lines: str):
        super().__init__(lines[0] if lines else "")
        self.code = code
        self.lines = lines


@dataclass(frozen=True)
class _Cluster:
    """Where the cycles read the cluster: ``observe`` (a live cluster or a snapshot file), the live cluster's
    ``api_client`` (``None`` for a file), its ``reader`` (targeted re-reads), event ``recorder`` and, in interval
    mode, the ``watch_cache`` to stop at the end."""

    observe: Callable[[], ClusterSnapshot]
    api_client: Any = None
    reader: ClusterReader | None = None
    recorder: EventRecorder | None = None
    watch_cache: Any = None


def _one_line(exc: BaseException, limit: int | None = None) -> str:
    return " ".join(str(exc).split())[:limit]


def _load_config(args: argparse.Namespace) -> DeschedulerConfiguration:
    """The configuration with the command line applied (``--snapshot`` and ``--dry-run`` force a dry run)."""
    try:
        config = load_descheduler_config(args.config, check_files=True)
    except ConfigError as exc:
        raise _Exit(2, *exc.lines()) from None
    if args.snapshot is not None and args.kubeconfig:
        raise _Exit(2, f"{PROG}: --snapshot and --kubeconfig are exclusive (a file or a live cluster)")
    if args.snapshot is not None:
        if not (args.dry_run or config.dry_run):
            _err(f"{PROG}: note: --snapshot implies --dry-run (there is no cluster to evict from)")
        return config.model_copy(update={"dry_run": True})
    if args.dry_run:
        return config.model_copy(update={"dry_run": True})
    return config


def _load_graph(config: DeschedulerConfiguration) -> tuple[ServiceGraph | None, list[str]]:
    """The call graph of ``topology.sources`` (``None``: the snapshot's annotations) and its warnings."""
    if not config.topology.sources:
        return None, []
    try:
        graph, warnings = load_topology(config.topology.sources)
    except (OSError, ValueError) as exc:
        raise _Exit(1, f"{PROG}: topology.sources: {exc}") from None
    for w in warnings:
        _err(f"{PROG}: warning: {w}")
    return graph, warnings


def _connect(args: argparse.Namespace, config: DeschedulerConfiguration, graph: ServiceGraph | None, once: bool):
    """The :class:`_Cluster` of ``--snapshot`` or of the live cluster (one LIST per kind per cycle with ``once``,
    else a watch cache listed once)."""
    if args.snapshot is not None:
        warned: set[str] = set()

        def warn_once(msg: str) -> None:  # the file is re-read every cycle: say each inconsistency once
            if msg not in warned:
                warned.add(msg)
                _err(f"{PROG}: warning: {msg}")

        def read_file() -> ClusterSnapshot:
            return load_snapshot_file(args.snapshot, graph, taken_at_s=time.time(), warn=warn_once)

        return _Cluster(read_file)
    try:
        from .kube import KubeEventRecorder, KubeObserver, KubeReader, KubeWatchCache, load_api_client

        api_client = load_api_client(args.kubeconfig)
    except Exception as exc:  # noqa: BLE001 - ConfigException, OSError: one line
        raise _Exit(2, f"{PROG}: --kubeconfig: cannot load a client configuration: {_one_line(exc)}") from None
    recorder = KubeEventRecorder(api_client) if config.events and not config.dry_run else None
    if once:  # CronJob mode: one LIST per kind for the run
        return _Cluster(KubeObserver(api_client, graph), api_client, KubeReader(api_client), recorder)
    watch_cache = KubeWatchCache(api_client, graph).start()  # interval mode: list once, then watch
    if not watch_cache.wait_synced(120.0):
        watch_cache.stop()
        raise _Exit(1, f"{PROG}: cannot read the cluster: the watch cache did not list every kind within 120 s")
    return _Cluster(watch_cache, api_client, KubeReader(api_client, cache=watch_cache), recorder, watch_cache)


def _cluster_error(exc: Exception) -> _Exit:
    return _Exit(1, f"{PROG}: cannot read the cluster: {type(exc).__name__}: {_one_line(exc, 300)}")


def _first_read(cluster: _Cluster, config: DeschedulerConfiguration) -> tuple[ClusterSnapshot, EvictionHistory]:
    """The first observation (fail fast on an unreadable snapshot or an unreachable API server; the first cycle
    uses it) and the eviction history (unreadable: exit 1, fail closed)."""
    live = cluster.api_client is not None
    try:
        first = cluster.observe()
        history = EvictionHistory.load(config.state_file) if config.state_file else EvictionHistory()
    except (ObjectError, HistoryError) as exc:
        raise _Exit(2 if isinstance(exc, ObjectError) and not live else 1, f"{PROG}: {exc}") from None
    except Exception as exc:
        if not live:
            raise
        raise _cluster_error(exc) from None
    return first, history


def _policies(config: DeschedulerConfiguration, history: EvictionHistory) -> tuple[HighLevelPolicy, PlacementPolicy]:
    """The planner (with its saved state, when it reads) and the low level the configuration names."""
    try:
        planner = planner_from_config(config)
        placement = placement_from_config(config)
    except ValueError as exc:  # a learned policy's bundle is missing or does not load
        raise _Exit(2, f"{PROG}: {exc}") from None
    state_section = history.sections.get("planner")
    load_state = getattr(planner, "load_state", None)
    if state_section is not None and load_state is not None:
        try:
            load_state(state_section)
        except ValueError as exc:  # learned state only: safe to start afresh (the eviction history fails closed)
            _err(
                f"{PROG}: warning: {config.state_file}: dropping the planner state, starting fresh: "
                f"{_one_line(exc, 300)}"
            )
            history.sections.pop("planner", None)
    return planner, placement


def _actuators(
    config: DeschedulerConfiguration, api_client: Any, once: bool = False
) -> tuple[Evictor, Scaler | None, Resizer | None, ApiMover | None, list[str]]:
    """The evictor, scaler, resizer and mover: the live cluster's (``api_client``), or dry runs (no mover without a
    cluster). No mover either when make-before-break moves could not finish: ``--once`` without a ``stateFile`` (a
    surge spans cycles; the next run would not know it) or ``scaling.enabled`` false; the moves then take
    ``moves.fallback``, and the returned warnings say why."""
    live = api_client is not None
    evictor: Evictor = DryRunEvictor()
    scaler: Scaler | None = None
    resizer: Resizer | None = None
    mover: ApiMover | None = None
    warnings: list[str] = []
    if live:
        from .kube import KubeEvictor, KubeMover, KubeResizer, KubeScaler

        if not config.dry_run:
            evictor = KubeEvictor(api_client)
        if config.scaling.enabled:
            scaler = KubeScaler(api_client, dry_run=config.dry_run)
        if config.resize.enabled:
            resizer = KubeResizer(api_client, dry_run=config.dry_run)
        if config.moves.strategy == "surge" and config.scaling.enabled:
            if once and not config.state_file:
                warnings.append(
                    "moves.strategy surge needs a stateFile with --once (a make-before-break move spans cycles): "
                    f"this run's moves take moves.fallback ({config.moves.fallback})"
                )
            else:
                mover = KubeMover(api_client, dry_run=config.dry_run)
    else:
        scaler = DryRunScaler() if config.scaling.enabled else None
        resizer = DryRunResizer() if config.resize.enabled else None
    return evictor, scaler, resizer, mover, warnings


def _live_inputs(
    config: DeschedulerConfiguration,
    cluster: _Cluster,
    planner: HighLevelPolicy,
    metrics: DeschedulerMetrics,
    rereads: bool,
) -> tuple[LiveInputs, HighLevelPolicy]:
    """The live inputs of ``metricsSources`` (the Metrics API through the live cluster's client) and the planner
    under their rule (:mod:`descheduler.inputs`). A source that cannot be built: exit 2."""
    reader = None
    if cluster.api_client is not None and config.metrics_sources.resource_usage.uri is not None:
        from policy.kube import MetricsApiReader

        reader = MetricsApiReader(cluster.api_client)
    try:
        live = live_inputs(config, planner, reader, InputMetrics(metrics.registry))
    except ValueError as exc:
        raise _Exit(2, f"{PROG}: {exc}") from None
    return live, guard_planner(planner, live, rereads=rereads and config.resize.enabled)


def _counters(config: DeschedulerConfiguration, metrics: DeschedulerMetrics, once: bool) -> Path | None:
    """In CronJob mode (``once``) with a ``stateFile``: where the counters carry over between runs
    (:func:`descheduler.metrics.counters_path`), loaded into ``metrics`` now; else ``None``."""
    counters = counters_path(config.state_file) if once and config.state_file else None
    if counters is not None:  # CronJob mode: the counters carry over from the previous runs
        try:
            load_counters(metrics, counters)
        except ValueError as exc:  # only the metrics' continuity is lost: start them at 0
            _err(f"{PROG}: warning: dropping the saved counters, starting at 0: {exc}")
    return counters


def _keep_counters(metrics: DeschedulerMetrics, counters: Path | None) -> None:
    if counters is not None:
        try:  # before the push: the next run starts from these totals
            save_counters(metrics, counters)
        except OSError as exc:
            _err(f"{PROG}: warning: could not save the counters to {counters}: {exc}")


def _failed_run(metrics: DeschedulerMetrics, config: DeschedulerConfiguration, counters: Path | None) -> None:
    """A CronJob run whose cycle failed still counts and pushes it (hrl_descheduler_cycles_total{result="error"}:
    the alert HrlDeschedulerCyclesFailing)."""
    metrics.observe_failed_cycle()
    _keep_counters(metrics, counters)
    _export_metrics(metrics, config)


def _emitter(
    args: argparse.Namespace,
    deps: CycleDeps,
    link: Any,
    metrics: DeschedulerMetrics,
    live: LiveInputs,
    counters: Path | None,
    shadow: ShadowLog | None = None,
) -> Callable[[CycleReport], None]:
    """After each cycle: save the planner's state, publish the intent to the embedding cache, save the counters
    (``counters``: :func:`_counters`), simulate a dry run's outcome (``shadow``: :mod:`descheduler.shadow`), print
    the report (with the live inputs' state: JSON keys ``inputs`` and ``inputs_withheld``), export the metrics."""
    config, planner, history = deps.config, deps.planner, deps.history
    dump_state = getattr(planner, "dump_state", None)
    sp = config.scheduler_prediction
    model = SchedulerModel(
        deps.placement if sp.enabled else None, sp.extender_weight, frozenset(sp.extender_schedulers)
    )

    def emit(report: CycleReport) -> None:
        if not report.dry_run and config.state_file and dump_state is not None and history is not None:
            try:  # the planner's state (rate history, last intent) survives CronJob runs, next to the history
                history.set_section("planner", dump_state())
            except (HistoryError, TypeError, ValueError) as exc:
                _err(f"{PROG}: warning: could not save the planner state: {exc}")
        if link is not None:
            for w in link.after_cycle(report.intent, report.dry_run, report.pending_moves):
                _err(f"{PROG}: warning: {w}")
        _keep_counters(metrics, counters)
        cycle = None
        if shadow is not None and report.dry_run:
            snap = shadow.take()
            if snap is not None:
                cycle = analyze_cycle(report, snap, model)
                try:
                    shadow.write(cycle)
                except OSError as exc:
                    _err(f"{PROG}: warning: could not write the shadow log: {exc}")
        now = time.time()
        if args.json:
            doc = report.to_json()
            doc["inputs"] = live.to_json(now)
            doc["inputs_withheld"] = dict(getattr(planner, "withheld", {}))
            if cycle is not None:
                doc["shadow"] = cycle.to_json()
            print(json.dumps(doc, sort_keys=False), flush=True)
        else:
            lines = [st.line(now) for st in live.statuses() if st.state != "ok"]
            text = format_report(report, lines)
            print(text + (f"\n{cycle.summary()}" if cycle is not None else ""), flush=True)
        _export_metrics(metrics, config)

    return emit


def _run_once(
    deps: CycleDeps,
    first: ClusterSnapshot,
    warnings: list[str],
    emit: Callable[[CycleReport], None],
    live: bool,
    counters: Path | None,
) -> int:
    """One cycle (CronJob mode); a failed one is still counted and exported (:func:`_failed_run`)."""
    metrics = deps.metrics
    try:
        report = run_once(deps, time.time(), warnings=tuple(warnings), snapshot=first)
    except ObjectError as exc:
        _failed_run(metrics, deps.config, counters)
        raise _Exit(1 if live else 2, f"{PROG}: {exc}") from None
    except Exception as exc:
        if not live:
            raise
        _failed_run(metrics, deps.config, counters)
        raise _cluster_error(exc) from None
    emit(report)
    return 0


def _run_interval(
    interval_s: float,
    deps: CycleDeps,
    cluster: _Cluster,
    metrics: DeschedulerMetrics,
    emit: Callable[[CycleReport], None],
) -> int:
    """Cycles every ``interval_s`` until SIGTERM/SIGINT; on a live cluster with ``leaderElection`` only while
    holding the Lease (exit 1 when it is lost)."""
    config = deps.config
    if config.metrics.listen:
        serve(metrics.registry, config.metrics.listen)  # every replica, standbys too
    stop = threading.Event()
    if threading.current_thread() is threading.main_thread():  # SIGTERM (Pod deletion): stop, release the Lease
        signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())

    def loop(until: threading.Event, d: CycleDeps) -> None:
        def on_error(exc: Exception) -> None:
            _err(f"{PROG}: cycle failed: {type(exc).__name__}: {exc}")

        run_forever(interval_s, d, stop=until, on_report=emit, on_error=on_error)

    try:
        le = config.leader_election
        if cluster.api_client is not None and le.enabled:  # one active replica: the Lease's holder (leader.py)
            from .leader import LeaderGatedEvictor, elector_from_config, lead

            elector = elector_from_config(le, cluster.api_client)
            backend = elector.backend
            metrics.leader.labels(name=backend.name).set_function(lambda: float(elector.is_leader()))
            _err(
                f"{PROG}: leader election on lease {backend.namespace}/{backend.name} as {elector.identity}",
                logging.INFO,
            )

            def leading(over: threading.Event) -> None:
                _err(f"{PROG}: {elector.identity} holds the lease; running cycles", logging.INFO)
                why = f"{elector.identity} does not hold the leader-election lease any more"
                gated = replace(
                    deps,
                    evictor=LeaderGatedEvictor(deps.evictor, elector),
                    scaler=None if deps.scaler is None else GatedScaler(deps.scaler, elector.is_leader, why),
                    resizer=None if deps.resizer is None else GatedResizer(deps.resizer, elector.is_leader, why),
                    mover=None if deps.mover is None else deps.mover.gated(elector.is_leader, why),
                )
                loop(over, gated)

            if lead(elector, leading, stop) == "lost":
                raise _Exit(
                    1, f"{PROG}: lost the leader-election lease; exiting so that a restart rejoins the election"
                )
        else:
            loop(stop, deps)
    except KeyboardInterrupt:
        stop.set()
    finally:
        if cluster.watch_cache is not None:
            cluster.watch_cache.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``hrl-descheduler``; returns the exit status (see the module docstring)."""
    args = build_parser().parse_args(argv)
    configure_logging(PROG, "INFO", args.log_format)
    global _log_format
    _log_format = args.log_format
    try:
        config = _load_config(args)
        graph, warnings = _load_graph(config)
        once = args.once or (args.interval is None and args.snapshot is not None)
        cluster = _connect(args, config, graph, once)
        first, history = _first_read(cluster, config)
        planner, placement = _policies(config, history)
        evictor, scaler, resizer, mover, more = _actuators(config, cluster.api_client, once)
        warnings.extend(more)
        metrics = DeschedulerMetrics(dry_run=config.dry_run)
        register_process_metrics(metrics.registry, PROG)
        live, planner = _live_inputs(config, cluster, planner, metrics, resizer is not None)
        first = live.observe(first)
        counters = _counters(config, metrics, once)
        link = cache_link_from_config(config.cache, metrics.registry)  # the embedding cache: embeddings in, intent out
        observe = live.wrap(cluster.observe)
        if link is not None:
            observe = link.remember(observe)
            link.last_snapshot = first
        shadow = None
        if config.dry_run:  # shadow mode: what the dry run would have done, simulated (descheduler/shadow.py)
            try:
                shadow = ShadowLog(config.shadow.log, config.shadow.max_bytes, config.shadow.backups)
            except OSError as exc:
                raise _Exit(2, f"{PROG}: shadow.log: cannot open {config.shadow.log!r}: {exc}") from None
            observe = shadow.remember(observe)
            if once:  # the one cycle runs on the first read; in interval mode each cycle observes
                shadow.snapshot = first
        deps = CycleDeps(
            observe,
            evictor,
            planner,
            placement,
            config,
            history=history,
            metrics=metrics,
            scaler=scaler,
            resizer=resizer,
            mover=mover,
            reader=cluster.reader,
            recorder=cluster.recorder,
        )
        emit = _emitter(args, deps, link, metrics, live, counters, shadow)
        if once:
            return _run_once(deps, first, warnings, emit, cluster.api_client is not None, counters)
        interval_s = args.interval if args.interval is not None else config.interval_seconds
        return _run_interval(interval_s, deps, cluster, metrics, emit)
    except _Exit as exc:
        for line in exc.lines:
            _fatal(line)
        return exc.code


if __name__ == "__main__":
    sys.exit(main())
