"""The bodies of ``hrl-policy cache serve | get | encode`` (registered as small stubs in :mod:`policy.cli`).

- ``cache serve --listen HOST:PORT [--metrics-listen HOST:PORT] [--max-entries N] [--max-watchers N]``: the gRPC
  embedding cache (:class:`policy.cache.CacheServer`), which also relays the extender's score table to the
  HRLScore plugins that watch it (at most ``--max-watchers`` streams); ``/metrics`` on ``--metrics-listen``
  carries the usual gRPC server metrics
  (``grpc_server_started_total``, ``grpc_server_handled_total{grpc_code}``, ``grpc_server_handling_seconds``),
  the cache's own (``hrl_cache_*``), ``hrl_build_info`` and ``process_*``. Needs no configuration or bundle: it
  starts empty and reports SERVING (``grpc.health.v1``, service ``""`` and
  ``hrlscheduler.embeddings.v1.EmbeddingCache``) as soon as it listens. SIGINT/SIGTERM:
  NOT_SERVING, then a graceful stop, exit 0.
- ``cache get --address HOST:PORT [--fingerprint FP] [--json]``: print an entry (or the intent) of a cache.
- ``cache encode SOURCE... [--address HOST:PORT] [--bundle DIR] [--json]``: build the call graph from
  SOURCE (as ``hrl-policy graph``), encode it with the encoder bundle, print the fingerprint and shape, and
  store the embeddings in the cache at ``--address`` when given.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time

from prometheus_client import CollectorRegistry, start_http_server

from policy.telemetry import say

__all__ = ["PROG", "serve", "get", "encode"]

PROG = "hrl-policy"


def serve(args: argparse.Namespace) -> int:
    """``hrl-policy cache serve``; returns the exit status (0 after a signal, 2 when it cannot listen).

    With ``--log-format json`` gRPC's own (C-core) log lines are off (``GRPC_VERBOSITY=NONE`` unless the environment
    sets it): they are plain text (``E1206 ... add_port.cc:83] Failed to add port ...``) and would break the one
    JSON object per line; what they report reaches our own ERROR record anyway (the server's start raises).
    gRPC reads the variable once, when it is first imported, hence before :mod:`policy.cache`."""
    if getattr(args, "log_format", "text") == "json":
        os.environ.setdefault("GRPC_VERBOSITY", "NONE")

    from policy.cache import SERVICE_NAME, CacheServer
    from policy.telemetry import configure_logging, register_process_metrics

    configure_logging(PROG, args.log_level, getattr(args, "log_format", "text"))
    log = logging.getLogger("hrl-policy.cache")
    registry = CollectorRegistry()
    register_process_metrics(registry, "hrl-policy-cache")
    if not 1 <= args.max_watchers <= 7:
        raise ValueError(f"--max-watchers: expected 1..7, got {args.max_watchers}")
    server = CacheServer(args.listen, registry=registry, max_entries=args.max_entries, max_watchers=args.max_watchers)
    server.start()  # OSError (address in use / invalid) -> exit 2 through policy.cli.core.main
    if args.metrics_listen:
        host, _, port = args.metrics_listen.rpartition(":")
        if not port.isdigit():
            server.stop(0)
            raise ValueError(f"--metrics-listen: expected host:port, got {args.metrics_listen!r}")
        start_http_server(int(port), addr=host or "127.0.0.1", registry=registry)
        log.info("metrics on http://%s/metrics", args.metrics_listen)
    log.info("embedding cache serving on %s (gRPC %s, grpc.health.v1 SERVING)", server.address, SERVICE_NAME)
    say(f"listening on {server.address}", logging.INFO, prog=PROG)
    done = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        done.set()

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, on_signal)
    try:
        while not done.wait(0.5):
            pass
    finally:
        log.info("shutting down")
        server.stop(grace_s=1.0)
    return 0


def get(args: argparse.Namespace) -> int:
    """``hrl-policy cache get``: print the entry (or with ``--intent`` the intent); exit 1 when absent."""
    from policy.cache import GrpcEmbeddingCache

    with GrpcEmbeddingCache(args.address, args.timeout) as c:
        r = c.get_intent() if args.intent else c.get(args.fingerprint or "")
    e = r.entry
    if e is None:
        print(
            f"{PROG} cache get: nothing stored"
            + ("" if args.intent else f" for fingerprint {args.fingerprint!r}" if args.fingerprint else ""),
            file=sys.stderr,
        )
        return 1
    if args.intent:
        d = {
            "values": list(e.values),
            "names": list(e.names),
            "version": e.version,
            "timestamp_s": e.timestamp_s,
            "source": e.source,
        }
    else:
        d = {
            "fingerprint": e.fingerprint,
            "services": len(e.services),
            "dim": e.dim,
            "version": e.version,
            "timestamp_s": e.timestamp_s,
            "encoder_version": e.encoder_version,
            "stored_at_s": e.stored_at_s,
        }
        if args.json:
            d["service_names"] = list(e.services)
            d["embeddings"] = [[round(float(v), 6) for v in row] for row in e.matrix]
    if args.json:
        json.dump(d, sys.stdout)
        sys.stdout.write("\n")
    else:
        for k, v in d.items():
            print(f"{k}: {v}")
    return 0


def encode(args: argparse.Namespace) -> int:
    """``hrl-policy cache encode``: encode a graph; store it when ``--address`` is given."""
    from policy.cache import GrpcEmbeddingCache, fingerprint
    from policy.encoder import DEFAULT_ENCODER_BUNDLE, GraphEncoder
    from policy.topology.sources import load_graph

    graph, warnings = load_graph(args.sources, args.format)
    for w in warnings:
        say(f"{PROG} cache encode: warning: {w}", prog=PROG)
    enc = GraphEncoder.load(args.bundle or DEFAULT_ENCODER_BUNDLE)
    out = enc.encode_graph(graph)
    fp = fingerprint(graph)
    d: dict[str, object] = {
        "fingerprint": fp,
        "services": len(out.services),
        "dim": int(out.embeddings.shape[1]),
        "encoder_version": enc.version,
        "encode_s": round(out.duration_s, 6),
    }
    if args.address:
        with GrpcEmbeddingCache(args.address, args.timeout) as c:
            e = c.put(fp, out.services, out.embeddings, encoder_version=enc.version, timestamp_s=time.time())
        d["version"] = e.version
    if args.json:
        json.dump(d, sys.stdout)
        sys.stdout.write("\n")
    else:
        for k, v in d.items():
            print(f"{k}: {v}")
    return 0
