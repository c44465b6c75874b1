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
  left alone).
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
from collections.abc import Sequence

from policy.config import MAX_SECONDS, ConfigError
from policy.observe import ObjectError
from policy.telemetry import add_log_format_argument, add_version_argument, configure_logging, register_process_metrics

from .config import DeschedulerConfiguration, load_descheduler_config, placement_from_config, planner_from_config
from .evict import DryRunEvictor, Evictor
from .guards import EvictionHistory, HistoryError
from .loop import CycleReport, run_forever, run_once
from .metrics import DeschedulerMetrics, counters_path, load_counters, push, save_counters, serve, write_textfile
from .resize import DryRunResizer, GatedResizer, Resizer
from .scale import DryRunScaler, GatedScaler, Scaler
from .snapshot import TopologyUnavailable, load_snapshot_file, load_topology

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


def format_report(report: CycleReport) -> str:
    """The human-readable report: one summary line, then a table of the planned moves and their outcomes."""
    from tabulate import tabulate

    mode = "dry run" if report.dry_run else "live"
    counts = ", ".join(f"{k} {v}" for k, v in report.counts.items() if v)
    head = (
        f"{PROG} ({mode}, planner {report.planner}): {report.nodes} nodes, {report.pods} pods, "
        f"{len(report.planned_moves)} planned moves"
        + (f" ({counts})" if counts else "")
        + f" in {report.duration_s * 1000:.0f} ms"
    )
    intent = ", ".join(f"{v:g}" for v in report.intent)
    lines = [head, f"intent: [{intent}]"]
    for r in report.scaling:
        lines.append(f"scale {r.workload}: {r.outcome} ({r.message})")
    for rr in report.resizes:
        lines.append(f"resize {rr.pod}: {rr.outcome} ({rr.message})")
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
            push(metrics.registry, mc.pushgateway, mc.job, mc.grouping_key)
    except OSError as exc:
        _err(f"{PROG}: warning: could not export metrics: {exc}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``hrl-descheduler``; returns the exit status (see the module docstring)."""
    args = build_parser().parse_args(argv)
    configure_logging(PROG, "INFO", args.log_format)
    global _log_format
    _log_format = args.log_format
    try:
        config = load_descheduler_config(args.config, check_files=True)
    except ConfigError as exc:
        for line in exc.lines():
            _fatal(line)
        return 2
    live = args.snapshot is None
    if not live and args.kubeconfig:
        _fatal(f"{PROG}: --snapshot and --kubeconfig are exclusive (a file or a live cluster)")
        return 2
    if not live:
        if not (args.dry_run or config.dry_run):
            _err(f"{PROG}: note: --snapshot implies --dry-run (there is no cluster to evict from)")
        config = config.model_copy(update={"dry_run": True})
    elif args.dry_run:
        config = config.model_copy(update={"dry_run": True})

    warnings: list[str] = []
    graph = None
    if config.topology.sources:
        try:
            graph, warnings = load_topology(config.topology.sources)
        except TopologyUnavailable as exc:
            _fatal(f"{PROG}: {exc}")
            return 1
        except (OSError, ValueError) as exc:
            _fatal(f"{PROG}: topology.sources: {exc}")
            return 1
        for w in warnings:
            _err(f"{PROG}: warning: {w}")

    snapshot_path = args.snapshot
    api_client = None
    once = args.once or (args.interval is None and args.snapshot is not None)
    reader = None
    recorder = None
    watch_cache = None
    if live:
        try:
            from .kube import KubeEventRecorder, KubeEvictor, KubeObserver, KubeReader, KubeWatchCache, load_api_client

            api_client = load_api_client(args.kubeconfig)
        except Exception as exc:  # noqa: BLE001 - ConfigException, OSError: one line
            _fatal(f"{PROG}: --kubeconfig: cannot load a client configuration: {' '.join(str(exc).split())}")
            return 2
        if once:  # CronJob mode: one LIST per kind for the run
            observe = KubeObserver(api_client, graph)
            reader = KubeReader(api_client)
        else:  # interval mode: list once, then watch; every cycle reads memory
            watch_cache = KubeWatchCache(api_client, graph).start()
            if not watch_cache.wait_synced(120.0):
                watch_cache.stop()
                _fatal(f"{PROG}: cannot read the cluster: the watch cache did not list every kind within 120 s")
                return 1
            observe = watch_cache
            reader = KubeReader(api_client, cache=watch_cache)
        if config.events and not config.dry_run:
            recorder = KubeEventRecorder(api_client)
    else:
        warned: set[str] = set()

        def warn_once(msg: str) -> None:  # the file is re-read every cycle: say each inconsistency once
            if msg not in warned:
                warned.add(msg)
                _err(f"{PROG}: warning: {msg}")

        def observe():
            return load_snapshot_file(snapshot_path, graph, taken_at_s=time.time(), warn=warn_once)

    try:
        first = observe()  # fail fast on an unreadable snapshot / unreachable API server; the first cycle uses it
        history = EvictionHistory.load(config.state_file) if config.state_file else EvictionHistory()
    except (ObjectError, HistoryError) as exc:
        _fatal(f"{PROG}: {exc}")
        return 2 if isinstance(exc, ObjectError) and not live else 1
    except Exception as exc:
        if not live:
            raise
        _fatal(f"{PROG}: cannot read the cluster: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
        return 1

    evictor = DryRunEvictor() if config.dry_run or not live else KubeEvictor(api_client)
    try:
        planner = planner_from_config(config)
        placement = placement_from_config(config)
    except ValueError as exc:  # a learned policy's bundle is missing or does not load
        _fatal(f"{PROG}: {exc}")
        return 2
    state_section = history.sections.get("planner")
    if state_section is not None and hasattr(planner, "load_state"):
        try:
            planner.load_state(state_section)
        except ValueError as exc:  # learned state only: safe to start afresh (the eviction history fails closed)
            _err(
                f"{PROG}: warning: {config.state_file}: dropping the planner state, starting fresh: "
                f"{' '.join(str(exc).split())[:300]}"
            )
            history.sections.pop("planner", None)
    scaler: Scaler | None = None
    if config.scaling.enabled:
        if live:
            from .kube import KubeScaler

            scaler = KubeScaler(api_client, dry_run=config.dry_run)
        else:
            scaler = DryRunScaler()
    resizer: Resizer | None = None
    if config.resize.enabled:
        if live:
            from .kube import KubeResizer

            resizer = KubeResizer(api_client, dry_run=config.dry_run)
        else:
            resizer = DryRunResizer()
    metrics = DeschedulerMetrics()
    register_process_metrics(metrics.registry, PROG)
    counters = counters_path(config.state_file) if once and config.state_file else None
    if counters is not None:  # CronJob mode: the counters carry over from the previous runs
        try:
            load_counters(metrics, counters)
        except ValueError as exc:  # only the metrics' continuity is lost: start them at 0
            _err(f"{PROG}: warning: dropping the saved counters, starting at 0: {exc}")
    from .cache import cache_link_from_config  # the embedding cache: embeddings in, intent out

    link = cache_link_from_config(config.cache, metrics.registry)
    if link is not None:
        observe = link.remember(observe)
        link.last_snapshot = first

    def keep_counters() -> None:
        if counters is not None:
            try:  # before the push: the next run starts from these totals
                save_counters(metrics, counters)
            except OSError as exc:
                _err(f"{PROG}: warning: could not save the counters to {counters}: {exc}")

    def failed_run() -> None:
        """A CronJob run whose cycle failed still counts and pushes it (hrl_descheduler_cycles_total{result="error"}:
        the alert HrlDeschedulerCyclesFailing)."""
        metrics.observe_failed_cycle()
        keep_counters()
        _export_metrics(metrics, config)

    def emit(report: CycleReport) -> None:
        if not report.dry_run and config.state_file and hasattr(planner, "dump_state"):
            try:  # the planner's state (rate history, last intent) survives CronJob runs, next to the history
                history.set_section("planner", planner.dump_state())
            except (HistoryError, TypeError, ValueError) as exc:
                _err(f"{PROG}: warning: could not save the planner state: {exc}")
        if link is not None:
            for w in link.after_cycle(report.intent, report.dry_run, report.colocation_priority):
                _err(f"{PROG}: warning: {w}")
        keep_counters()
        if args.json:
            print(json.dumps(report.to_json(), sort_keys=False), flush=True)
        else:
            print(format_report(report), flush=True)
        _export_metrics(metrics, config)

    if once:
        try:
            report = run_once(
                observe,
                evictor,
                planner,
                placement,
                config,
                history,
                time.time(),
                metrics=metrics,
                warnings=tuple(warnings),
                scaler=scaler,
                resizer=resizer,
                reader=reader,
                recorder=recorder,
                snapshot=first,
            )
        except ObjectError as exc:
            _fatal(f"{PROG}: {exc}")
            failed_run()
            return 1 if live else 2
        except Exception as exc:
            if not live:
                raise
            _fatal(f"{PROG}: cannot read the cluster: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
            failed_run()
            return 1
        emit(report)
        return 0

    interval_s = args.interval if args.interval is not None else config.interval_seconds
    if config.metrics.listen:
        serve(metrics.registry, config.metrics.listen)  # every replica, standbys too
    stop = threading.Event()
    if threading.current_thread() is threading.main_thread():  # SIGTERM (Pod deletion): stop, release the Lease
        signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())

    def loop(until: threading.Event, ev: Evictor, sc: Scaler | None, rz: Resizer | None) -> None:
        run_forever(
            interval_s,
            observe,
            ev,
            planner,
            placement,
            config,
            history,
            metrics=metrics,
            stop=until,
            on_report=emit,
            scaler=sc,
            resizer=rz,
            reader=reader,
            recorder=recorder,
            on_error=lambda exc: _err(f"{PROG}: cycle failed: {type(exc).__name__}: {exc}"),
        )

    try:
        le = config.leader_election
        if live and le.enabled:  # one active replica: the holder of the Lease (descheduler/leader.py)
            from .leader import LeaderGatedEvictor, elector_from_config, lead

            elector = elector_from_config(le, api_client)
            backend = elector.backend
            metrics.leader.labels(name=backend.name).set_function(lambda: float(elector.is_leader()))
            _err(
                f"{PROG}: leader election on lease {backend.namespace}/{backend.name} as {elector.identity}",
                logging.INFO,
            )

            def leading(over: threading.Event) -> None:
                _err(f"{PROG}: {elector.identity} holds the lease; running cycles", logging.INFO)
                gated = (
                    None
                    if scaler is None
                    else GatedScaler(
                        scaler,
                        elector.is_leader,
                        f"{elector.identity} does not hold the leader-election lease any more",
                    )
                )
                gated_rz = (
                    None
                    if resizer is None
                    else GatedResizer(
                        resizer,
                        elector.is_leader,
                        f"{elector.identity} does not hold the leader-election lease any more",
                    )
                )
                loop(over, LeaderGatedEvictor(evictor, elector), gated, gated_rz)

            if lead(elector, leading, stop) == "lost":
                _fatal(f"{PROG}: lost the leader-election lease; exiting so that a restart rejoins the election")
                return 1
        else:
            loop(stop, evictor, scaler, resizer)
    except KeyboardInterrupt:
        stop.set()
    finally:
        if watch_cache is not None:
            watch_cache.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
