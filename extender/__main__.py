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

The listening socket is bound before ``serving on ...`` is logged, so that line means the port is open.

Exit status (:data:`EXIT_CODES`): 0 after a clean shutdown (SIGINT/SIGTERM); 2 for a bad command line,
configuration (TLS files included), topology source or snapshot file (one line on stderr); 4 when the listen
address cannot be bound (port taken, address not local, permission denied: one line naming ``listen`` and the
error); 1 when the server fails after it started. Configuration problems are printed all at once, one line each:
``FILE: dotted.path: problem (got VALUE)`` (:class:`policy.config.ConfigError`; the files it names are checked
in the same pass).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence

from prometheus_client import CollectorRegistry

from policy.telemetry import add_log_format_argument, add_version_argument

PROG = "hrl-extender"

#: Exit status → meaning (the module docstring; docs/operations.md).
EXIT_CODES: dict[int, str] = {
    0: "clean shutdown (SIGINT/SIGTERM)",
    1: "the server failed after it started",
    2: "bad command line, configuration, topology source or snapshot file",
    4: "the listen address cannot be bound (port taken, address not local, permission denied)",
}
EXIT_BIND = 4


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Serve the hrl-scheduler kube-scheduler extender "
        "(POST {urlPrefix}/filter, {urlPrefix}/prioritize; GET /healthz, /readyz, /metrics).",
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


def _fail(msg: str) -> int:
    print(f"{PROG}: error: {' '.join(str(msg).split())}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``hrl-extender``; returns the exit status (see the module docstring)."""
    args = _parser().parse_args(argv)
    # Imports after argument parsing so `--help` stays fast.
    from policy.config import ConfigError
    from policy.observe import ObjectError

    from .config import (
        build_policy,
        decision_recorder,
        load_extender_config,
        load_topology,
        start_policy_feeds,
        tls_server_kwargs,
        topology_refresher,
    )

    try:  # every problem at once, one line each: FILE: dotted.path: problem (got VALUE); named files must exist
        config = load_extender_config(args.config, check_files=True)
    except ConfigError as exc:
        for line in exc.lines():
            print(line, file=sys.stderr)
        return 2

    def config_line(line: str) -> str:  # a problem found past validation, in the same format
        line = " ".join(str(line).split())
        return f"{args.config}: {line}" if args.config else f"{PROG}: error: {line}"

    def config_fail(line: str) -> int:
        print(config_line(line), file=sys.stderr)
        return 2

    if args.port is not None and not 0 <= args.port <= 65535:
        return _fail(f"--port: must be 0..65535, got {args.port}")

    from policy.telemetry import configure_logging, register_process_metrics

    configure_logging(PROG, config.log_level, args.log_format)
    log = logging.getLogger("extender")

    import uvicorn

    from .server import bind_socket, make_app, uvicorn_config
    from .store import SnapshotStore

    store = SnapshotStore()
    # what the valid configuration names must also load: every such problem at once, one line each
    problems: list[str] = []
    try:
        tls_kwargs = tls_server_kwargs(config)  # HTTPS when listen.tls is set
    except ValueError as exc:
        problems.append(str(exc))
    try:
        policy = build_policy(config)
    except ValueError as exc:  # a learned policy's bundle that cannot be loaded (BundleError)
        problems.append(f"policy.bundle: {exc}")
    try:  # live sources (prometheus+...://) → a background refresher; files only → read once
        refresher, warnings = topology_refresher(config)
        graph, more = (refresher.graph, []) if refresher is not None else load_topology(config)
        warnings += more
    except ImportError as exc:
        problems.append(f"topology.sources: the call-graph loader is unavailable ({exc})")
    except Exception as exc:  # noqa: BLE001 - the loader's own one-line errors (unreadable file, bad content)
        problems.append(f"topology.sources: {exc}")
    if problems:
        for line in problems:
            print(config_line(line), file=sys.stderr)
        return 2
    for w in warnings:
        log.warning("topology: %s", w)
    kube = config.kubernetes
    if kube.enabled and (args.snapshot or config.snapshot_file):
        return _fail("kubernetes.enabled and a snapshot file (snapshotFile / --snapshot) are exclusive")
    if graph is not None and not kube.enabled:  # with the watch, the source merges it with pod annotations
        store.set_graph(graph)
    if graph is not None:
        log.info(
            "call graph: %d services, %d edges from %d source(s)",
            len(graph.services),
            len(graph.edges),
            len(config.topology.sources),
        )

    source = None
    api = None
    snap_path = args.snapshot or config.snapshot_file
    if kube.enabled:
        try:
            from .kube import KubeSnapshotSource, load_api_client

            api = load_api_client(kube.kubeconfig)
        except Exception as exc:  # noqa: BLE001 - ConfigException, OSError: one line
            return config_fail(f"kubernetes.kubeconfig: cannot load a client configuration: {exc}")
        source = KubeSnapshotSource(
            store, api, graph=graph, resync_s=kube.resync_seconds, debounce_s=kube.debounce_seconds
        )
        log.info("watching nodes and pods on %s", api.configuration.host)
    elif snap_path:
        try:
            view = store.load_file(snap_path)
        except ObjectError as exc:
            return _fail(f"snapshot: {exc}")
        assert view.snapshot is not None
        log.info("snapshot %s: %d nodes, %d pods", snap_path, len(view.snapshot.nodes), len(view.snapshot.pods))
    else:
        log.warning("no snapshot: scores stay neutral and /readyz answers 503 until one is loaded")

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
    if config.decisions.events and api is not None:
        from .kube import KubeEventSink

        sink = KubeEventSink(api)
    try:  # the decision record (the shadow log in shadow mode): before the first request is scored
        recorder = decision_recorder(config, policy, registry, events=sink)
    except OSError as exc:
        return config_fail(f"decisions.log: cannot open {config.decisions.log!r}: {exc.strerror or exc}")
    if recorder is not None:
        store.set_decisions(recorder, shadow=config.mode == "shadow")
        recorder.start()
        log.info(
            "mode %s: recording decisions%s%s",
            config.mode,
            f" to {config.decisions.log}" if config.decisions.log else "",
            " (answering neutral scores)" if config.mode == "shadow" else "",
        )
    app = make_app(config, store, policy, registry, topology=refresher)
    host = args.host or config.listen.host
    port = config.listen.port if args.port is None else args.port
    scheme = "https" if tls_kwargs else "http"
    try:
        sock = bind_socket(host, port)
    except OSError as exc:
        app.close()
        if refresher is not None:
            refresher.stop()
        if recorder is not None:
            recorder.stop()
        print(
            f"{PROG}: error: listen: cannot bind {host}:{port}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return EXIT_BIND
    port = sock.getsockname()[1]
    log.info("serving on %s://%s:%d%s (policy %s)", scheme, host, port, config.url_prefix, policy.name)
    server = uvicorn.Server(uvicorn_config(app, log_level=config.log_level.lower(), **tls_kwargs))

    def on_signal(signum: int, frame: object) -> None:
        # uvicorn handles SIGINT/SIGTERM while serving and re-raises the signal afterwards with the
        # previous handler: this one, so a graceful shutdown ends with status 0, not death by signal.
        server.should_exit = True

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, on_signal)
    if source is not None:
        source.start()
    if refresher is not None:
        refresher.start()
    from .cache import start_cache_link  # the embedding cache (config.cache); a background copy, never waited on

    cache_link = start_cache_link(config.cache, store, registry)
    feeds = start_policy_feeds(policy, config, store)  # a learned policy's service rows, off the request path
    try:
        server.run(sockets=[sock])
    except SystemExit as exc:  # uvicorn's own exits (e.g. 3 for a failed start-up) mean "failed after start"
        log.error("server stopped with status %s", exc.code)
        return 1
    finally:
        sock.close()
        app.close()
        if source is not None:
            source.stop()
        if refresher is not None:
            refresher.stop()
        if cache_link is not None:
            cache_link.stop()
        if feeds is not None:
            feeds.stop()
        if recorder is not None:
            recorder.stop()
    return 0 if server.started else 1


if __name__ == "__main__":
    sys.exit(main())
