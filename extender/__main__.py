"""``hrl-extender``: serve the kube-scheduler extender.

Usage::

    hrl-extender [--config FILE] [--snapshot FILE] [--host HOST] [--port PORT] [--log-format text|json] [--version]

``--config``: an ``ExtenderConfiguration`` YAML (see :mod:`extender.config`; omitted = defaults).
With ``listen.tls`` set it serves HTTPS (see :class:`extender.config.TLSConfig`).
``--snapshot``: a static cluster state (``kubectl get nodes,pods,pdb -A -o json`` output), overriding
``snapshotFile``. With ``kubernetes.enabled`` the snapshot comes from the API server instead (list + watch
of Nodes and Pods, :mod:`extender.kube`). ``--host`` / ``--port`` override ``listen``. Logs go to stderr,
as text or one JSON object per line (``--log-format``, :func:`policy.telemetry.configure_logging`);
``/metrics`` carries ``hrl_build_info`` and the ``process_*`` metrics besides the extender's own.

The listening socket is bound before ``serving on ...`` is logged, so that line means the port is open. With
``listen.healthPort`` the probes (``/livez``, ``/healthz``, ``/readyz``) are served on that port too, from a thread
of their own (:class:`extender.server.HealthListener`), bound before that line as well.

Exit status (:data:`EXIT_CODES`): 0 after a clean shutdown (SIGINT/SIGTERM); 2 for a bad command line,
configuration (TLS files included), topology source or snapshot file (one line on stderr); 4 when the listen
address or the health port cannot be bound (port taken, address not local, permission denied: one line naming
``listen`` or ``listen.healthPort`` and the error); 1 when the server fails after it started. Configuration
problems are printed all at once, one line each: ``FILE: dotted.path: problem (got VALUE)``
(:class:`policy.config.ConfigError`; the files it names are checked in the same pass). With ``--log-format json``
each such line is one ERROR record instead (:func:`policy.telemetry.say`, as ``hrl-policy`` and ``hrl-descheduler``
write theirs; a usage error too, when ``--log-format json`` is on the command line:
:func:`policy.telemetry.parse_args`).
"""

from __future__ import annotations

import argparse
import gc
import logging
import signal
import sys
import threading
from collections.abc import Sequence

from prometheus_client import CollectorRegistry

from policy.telemetry import add_log_format_argument, add_version_argument, parse_args

PROG = "hrl-extender"

#: Exit status → meaning (the module docstring; docs/operations.md).
EXIT_CODES: dict[int, str] = {
    0: "clean shutdown (SIGINT/SIGTERM)",
    1: "the server failed after it started",
    2: "bad command line, configuration, topology source or snapshot file",
    4: "the listen address or listen.healthPort cannot be bound (port taken, address not local, permission denied)",
}
EXIT_BIND = 4


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Serve the hrl-scheduler kube-scheduler extender "
        "(POST {urlPrefix}/filter, {urlPrefix}/prioritize; GET /livez, /healthz, /readyz, /metrics; "
        "the probes also on listen.healthPort when set).",
    )
    p.add_argument("--config", metavar="FILE", help="ExtenderConfiguration YAML (default: built-in defaults)")
    p.add_argument(
        "--snapshot",
        metavar="FILE",
        help="cluster state as `kubectl get nodes,pods,pdb -A -o json` prints it (overrides snapshotFile)",
    )
    p.add_argument("--host", help="address to bind (overrides listen.host)")
    p.add_argument("--port", type=int, help="TCP port (overrides listen.port; 0 = any free port)")
    add_log_format_argument(p)
    add_version_argument(p, PROG)
    return p


def _say(line: str, log_format: str) -> None:
    """A start-up error on stderr: with ``--log-format text`` the line as is; with ``json`` one ERROR record
    (:func:`policy.telemetry.say`, the shape of ``hrl-policy`` and ``hrl-descheduler``)."""
    if log_format == "json":
        from policy.telemetry import say

        say(line, logging.ERROR, prog=PROG)
    else:
        print(line, file=sys.stderr)


def _fail(msg: str, log_format: str = "text") -> int:
    _say(f"{PROG}: error: {' '.join(str(msg).split())}", log_format)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``hrl-extender``; returns the exit status (see the module docstring)."""
    args = parse_args(_parser(), argv)  # a usage error under --log-format json: one JSON record
    fmt = args.log_format
    if fmt == "json":  # the errors before the configuration's log level is known are records too
        from policy.telemetry import configure_logging

        configure_logging(PROG, "WARNING", fmt)
    # Imports after argument parsing so `--help` stays fast.
    from policy.config import ConfigError

    from .config import decision_recorder, load_extender_config, start_policy_feeds

    try:  # every problem at once, one line each: FILE: dotted.path: problem (got VALUE); named files must exist
        config = load_extender_config(args.config, check_files=True)
    except ConfigError as exc:
        for line in exc.lines():
            _say(line, fmt)
        return 2

    def config_line(line: str) -> str:  # a problem found past validation, in the same format
        line = " ".join(str(line).split())
        return f"{args.config}: {line}" if args.config else f"{PROG}: error: {line}"

    if args.port is not None and not 0 <= args.port <= 65535:
        return _fail(f"--port: must be 0..65535, got {args.port}", fmt)

    from policy.telemetry import configure_logging, register_process_metrics

    configure_logging(PROG, config.log_level, args.log_format)
    log = logging.getLogger("extender")

    from .config import http_limits
    from .http import HttpServer
    from .server import HealthListener, bind_socket, health_limits, make_app
    from .startup import StartupError, prepare
    from .store import SnapshotStore

    store = SnapshotStore()
    try:  # what the valid configuration names must also load: every such problem at once, one line each
        startup = prepare(config, store, snapshot=args.snapshot)
    except StartupError as exc:
        for line in exc.problems:
            _say(config_line(line), fmt)
        return 2
    ssl_context, policy, refresher, graph = startup.ssl_context, startup.policy, startup.refresher, startup.graph
    assert policy is not None
    for w in startup.warnings:
        log.warning("topology: %s", w)
    if graph is not None:
        log.info(
            "call graph: %d services, %d edges from %d source(s)",
            len(graph.services),
            len(graph.edges),
            len(config.topology.sources),
        )
    source = None
    usage_refresher = None
    usage_cfg = config.metrics_sources.resource_usage
    kube = config.kubernetes
    if kube.enabled:
        from .kube import KubeSnapshotSource, usage_input

        try:
            usage = usage_input(usage_cfg, startup.api)
        except ValueError as exc:
            _say(config_line(f"metricsSources.resourceUsage.uri: {exc}"), fmt)
            return 2
        source = KubeSnapshotSource(
            store,
            startup.api,
            graph=graph,
            resync_s=kube.resync_seconds,
            debounce_s=kube.debounce_seconds,
            usage=usage,
        )
        log.info("watching nodes and pods on %s", startup.api.configuration.host)
        from policy.live import UsageRefresher

        usage_refresher = UsageRefresher(usage, usage_cfg.refresh_seconds, on_update=source.changed)
    elif startup.snapshot_path:
        snap = store.get().snapshot
        assert snap is not None
        log.info(
            "snapshot %s: %d nodes, %d pods; call graph%s: %d services, %d edges",
            startup.snapshot_path,
            len(snap.nodes),
            len(snap.pods),
            "" if graph is not None else " from the pods' depends-on annotations",
            len(snap.graph.services),
            len(snap.graph.edges),
        )
    else:
        log.warning("no snapshot: scores stay neutral and /readyz answers 503 until one is loaded")
    if source is None:  # no watch: no measured use (the configuration refuses a source without one)
        from policy.live import UsageInput

        usage = UsageInput(None, logger=log)

    if refresher is not None:
        if source is not None:  # the watch merges it with pod annotations at its next rebuild
            refresher.on_update = lambda g: setattr(source, "graph", g)
        else:
            refresher.on_update = store.set_graph
        st = refresher.status()
        if st.stale:
            log.warning(
                "topology: %s (serving with the graph at hand; retrying every %g s)", st.reason, refresher.refresh_s
            )
    registry = CollectorRegistry()
    register_process_metrics(registry, PROG)
    sink = None
    if config.decisions.events and kube.enabled:
        from .kube import KubeEventSink

        sink = KubeEventSink(startup.api)
    try:  # the decision record (the shadow log in shadow mode): before the first request is scored
        recorder = decision_recorder(config, policy, registry, events=sink)
    except OSError as exc:
        line = f"decisions.log: cannot open {config.decisions.log!r}: {exc.strerror or exc}"
        _say(config_line(line), fmt)
        return 2
    if recorder is not None:
        store.set_decisions(recorder, shadow=config.mode == "shadow")
        recorder.start()
        log.info(
            "mode %s: recording decisions%s%s",
            config.mode,
            f" to {config.decisions.log}" if config.decisions.log else "",
            " (answering neutral scores)" if config.mode == "shadow" else "",
        )
    app = make_app(config, store, policy, registry, topology=refresher, inputs=(usage.health,))
    host = args.host or config.listen.host
    port = config.listen.port if args.port is None else args.port
    scheme = "https" if ssl_context is not None else "http"
    health_port = config.listen.health_port
    sock = health_sock = None
    try:
        what, where = "listen", f"{host}:{port}"
        sock = bind_socket(host, port)
        if health_port is not None:
            what, where = "listen.healthPort", f"{host}:{health_port}"
            health_sock = bind_socket(host, health_port)
    except OSError as exc:
        if sock is not None:
            sock.close()
        app.close()
        if refresher is not None:
            refresher.stop()
        if recorder is not None:
            recorder.stop()
        _say(f"{PROG}: error: {what}: cannot bind {where}: {exc.strerror or exc}", fmt)
        return EXIT_BIND
    port = sock.getsockname()[1]
    server = HttpServer(app, http_limits(config), app.metrics, ssl=ssl_context)
    health = None
    if health_sock is not None:
        health = HealthListener(
            app,
            health_sock,
            limits=health_limits(config),
            stalled_s=server.stalled_s,
            max_stall_s=config.limits.max_loop_stall_seconds,
            ssl=ssl_context,
        )
        log.info("probes also on %s://%s:%d/livez, /healthz, /readyz (their own thread)", scheme, host, health.port)
    log.info("serving on %s://%s:%d%s (policy %s)", scheme, host, port, config.url_prefix, policy.name)

    def on_loop(loop) -> None:  # SIGINT/SIGTERM: stop gracefully (requests in progress answered), exit 0
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, server.request_stop)

    if source is not None:
        source.start()
    if usage_refresher is not None:
        usage_refresher.start()
    if refresher is not None:
        refresher.start()
    from .cache import start_cache_link  # the embedding cache (config.cache); a background copy, never waited on

    cache_link = start_cache_link(config.cache, store, registry)
    feeds = start_policy_feeds(policy, config, store)  # a learned policy's service rows, off the request path
    from .publisher import start_score_table_publisher  # plugin mode: the HRLScore plugin's table (scoreTable)

    publisher = start_score_table_publisher(config, store, policy, registry)
    # what start-up built (snapshot, index, policy, modules) lives until exit: out of the collector's sight, so that
    # a full collection does not scan it while requests wait (gc.freeze; the watch's later snapshots are collected)
    gc.collect()
    gc.freeze()
    try:
        if health is not None:  # its own thread and loop: it answers while the serving loop is saturated
            health.start()
        server.run([sock], on_loop=on_loop)
    except Exception as exc:  # noqa: BLE001 - the server failed after it started: one line, status 1
        log.error("server stopped: %s: %s", type(exc).__name__, exc)
        return 1
    finally:
        if health is not None:
            health.stop()
        sock.close()
        app.close()
        if source is not None:
            source.stop()
        if usage_refresher is not None:
            usage_refresher.stop()
        if refresher is not None:
            refresher.stop()
        if cache_link is not None:
            cache_link.stop()
        if feeds is not None:
            feeds.stop()
        if publisher is not None:
            publisher.stop()
        if recorder is not None:
            recorder.stop()
    return 0 if server.started.is_set() else 1


if __name__ == "__main__":
    sys.exit(main())
