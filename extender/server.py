"""The extender's HTTP transport: a thin starlette adapter around :mod:`extender.scoring`, plus
:class:`ExtenderServer`, which runs it with uvicorn in a background thread (demo, tests).

Routes (DESIGN.md section 5; kube-scheduler treats any status other than 200 as an error):

- ``POST {urlPrefix}/filter``     → ``ExtenderFilterResult``; "no fit" is a 200 with ``FailedNodes``;
- ``POST {urlPrefix}/prioritize`` → ``[{"Host", "Score"}]``, integer scores 0..10;
- ``GET /healthz`` → 200 ``ok`` while the process serves;
- ``GET /readyz``  → 200 ``ok`` when a snapshot is loaded and not stale, else 503 with the reason;
- ``GET /metrics`` → Prometheus text exposition of the registry.

Errors are mapped to HTTP in one place (:func:`make_app`'s handlers): a malformed request
(:class:`~extender.wire.WireError`) → 400 with a one-line ``text/plain`` reason (logged at WARNING and
counted in ``hrl_extender_requests_invalid_total{verb}``); anything failing inside a handler after
parsing → 200 with neutral scores (prioritize) or every node passing (filter), counted as outcome
``neutral_error`` / ``error``. A wrong method → 405 (starlette). Successful requests are not logged at INFO.
"""

from __future__ import annotations

import logging
import socket
import threading
import time

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from policy.lowlevel import PlacementPolicy

from . import scoring
from .config import ExtenderConfiguration, build_policy, tls_server_kwargs
from .metrics import ExtenderMetrics
from .store import SnapshotStore
from .wire import WireError, build_filter_result, encode_json, neutral_host_priorities, parse_extender_args

__all__ = ["make_app", "readiness", "ExtenderServer"]

log = logging.getLogger(__name__)

_JSON = "application/json"


def readiness(
    store: SnapshotStore, config: ExtenderConfiguration, now_s: float | None = None, topology=None
) -> tuple[bool, str]:
    """``(ready, reason)``: ready when a snapshot is loaded and not older than ``maxSnapshotAgeSeconds``.

    ``topology``: the :class:`policy.topology.live.TopologyRefresher` keeping the call graph current (or
    ``None``). A stale call graph does NOT make the extender unready (scoring goes on with the last good graph;
    an unready extender would be dropped from its Service and so from scheduling altogether): the reason then
    reads ``ok (warning: call graph stale: ...)``, and ``hrl_topology_graph_stale`` is 1."""
    v = store.get()
    warning = ""
    if topology is not None:
        st = topology.status()
        if st.stale:
            age = st.age_s(topology.clock())
            age_text = "never refreshed" if age == float("inf") else f"age {age:.0f} s"
            warning = f" (warning: call graph stale, {age_text}: {st.reason}; scoring uses the last good graph)"
    if not v.ready:
        return False, "not ready: no cluster snapshot loaded yet" + warning
    t = store.clock() if now_s is None else now_s
    max_age = config.max_snapshot_age_seconds
    if v.is_stale(t, max_age):
        return False, (
            f"not ready: snapshot is stale (age {v.age_s(t):.1f} s > maxSnapshotAgeSeconds {max_age:g})" + warning
        )
    return True, "ok" + warning


def make_app(
    config: ExtenderConfiguration,
    store: SnapshotStore,
    policy: PlacementPolicy,
    registry: CollectorRegistry | ExtenderMetrics,
    topology=None,
) -> Starlette:
    """The starlette application serving the extender.

    ``config``: routes (``urlPrefix``) and staleness (``maxSnapshotAgeSeconds``); ``store``: read on every
    request, never written here; ``policy``: the placement policy; ``registry``: a
    :class:`CollectorRegistry` to register :class:`ExtenderMetrics` in (once per registry), or an
    :class:`ExtenderMetrics` already registered. The metrics object is ``app.state.metrics``.
    ``topology``: an optional :class:`policy.topology.live.TopologyRefresher`; its staleness shows in ``/readyz``
    and its ``hrl_topology_*`` metrics are registered in the same registry (when it has none yet).
    """
    metrics = registry if isinstance(registry, ExtenderMetrics) else ExtenderMetrics(registry)
    metrics.bind_store(store)
    if topology is not None and topology.metrics is None:
        from policy.topology.live import TopologyMetrics

        topology.attach_metrics(TopologyMetrics(metrics.registry))
    max_age = config.max_snapshot_age_seconds
    prefix = config.url_prefix

    def bad_request(verb: str, exc: WireError) -> Response:
        metrics.requests_invalid_total.labels(verb=verb).inc()
        reason = " ".join(str(exc).split())
        log.warning("%s: bad request: %s", verb, reason)
        return PlainTextResponse(reason + "\n", status_code=400)

    async def prioritize(request: Request) -> Response:
        t0 = time.perf_counter()
        body = await request.body()
        try:
            parsed = parse_extender_args(body)
        except WireError as exc:
            return bad_request("prioritize", exc)
        try:
            reply, outcome = scoring.prioritize(
                parsed, store.get(), policy, max_snapshot_age_s=max_age, now_s=store.clock()
            )
            content = encode_json(reply)
        except Exception as exc:  # fail open: the scheduler's own plugins decide
            log.error("prioritize: internal failure %s: %s (neutral scores)", type(exc).__name__, exc, exc_info=True)
            content, outcome = encode_json(neutral_host_priorities(parsed.node_names)), "neutral_error"
        metrics.prioritize_total.labels(outcome=outcome).inc()
        metrics.prioritize_duration_seconds.observe(time.perf_counter() - t0)
        return Response(content, media_type=_JSON)

    async def filter_(request: Request) -> Response:
        t0 = time.perf_counter()
        body = await request.body()
        try:
            parsed = parse_extender_args(body)
        except WireError as exc:
            return bad_request("filter", exc)
        try:
            reply, outcome = scoring.filter_nodes(
                parsed, store.get(), policy, max_snapshot_age_s=max_age, now_s=store.clock()
            )
            content = encode_json(reply)
        except Exception as exc:  # fail open: every candidate passes
            log.error("filter: internal failure %s: %s (every node passes)", type(exc).__name__, exc, exc_info=True)
            content, outcome = encode_json(build_filter_result(parsed, {})), "error"
        metrics.filter_total.labels(outcome=outcome).inc()
        metrics.filter_duration_seconds.observe(time.perf_counter() - t0)
        return Response(content, media_type=_JSON)

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok\n")

    async def readyz(request: Request) -> Response:
        ok, reason = readiness(store, config, topology=topology)
        return PlainTextResponse(reason + "\n", status_code=200 if ok else 503)

    async def metrics_endpoint(request: Request) -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    app = Starlette(
        routes=[
            Route(f"{prefix}/filter", filter_, methods=["POST"]),
            Route(f"{prefix}/prioritize", prioritize, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/metrics", metrics_endpoint, methods=["GET"]),
        ]
    )
    app.state.metrics = metrics
    app.state.store = store
    app.state.config = config
    app.state.topology = topology
    return app


class ExtenderServer:
    """Run the extender with uvicorn in a background thread; a context manager.

    ``config`` (default: all defaults), ``store`` (default: a new empty :class:`SnapshotStore`), ``policy``
    (default: :func:`~extender.config.build_policy` of ``config``), ``registry`` (default: a new
    :class:`CollectorRegistry`), ``topology`` (a :class:`policy.topology.live.TopologyRefresher`, optional; see
    :func:`make_app`). ``host`` / ``port`` override ``config.listen`` (``port=0``: any free port).
    The socket is bound in :meth:`start`, so :attr:`port` and :attr:`url` are real once started.

    Attributes: ``store``, ``policy``, ``registry``, ``metrics`` (:class:`ExtenderMetrics`), ``app``,
    ``host``, ``port``, ``base_url`` (``http://HOST:PORT``, ``https://`` when ``config.listen.tls`` is set),
    ``url`` (``base_url + urlPrefix``, the value for kube-scheduler's ``urlPrefix``).

    Raises ``ValueError`` from the constructor when ``config.listen.tls`` names unusable files, ``OSError``
    from :meth:`start` when the address cannot be bound, ``RuntimeError`` when the server does not come up
    within ``startup_timeout_s``.
    """

    def __init__(
        self,
        config: ExtenderConfiguration | None = None,
        store: SnapshotStore | None = None,
        policy: PlacementPolicy | None = None,
        registry: CollectorRegistry | None = None,
        *,
        host: str | None = None,
        port: int | None = None,
        startup_timeout_s: float = 10.0,
        log_level: str = "warning",
        topology=None,
    ):
        self.config = config or ExtenderConfiguration()
        self.store = store if store is not None else SnapshotStore()
        self.policy = policy if policy is not None else build_policy(self.config)
        self.registry = registry if registry is not None else CollectorRegistry()
        self.app = make_app(self.config, self.store, self.policy, self.registry, topology=topology)
        self.metrics: ExtenderMetrics = self.app.state.metrics
        self.host = host if host is not None else self.config.listen.host
        self.port = port if port is not None else self.config.listen.port
        self.startup_timeout_s = startup_timeout_s
        self._tls_kwargs = tls_server_kwargs(self.config)
        self._log_level = log_level
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self._tls_kwargs else 'http'}://{host}:{self.port}"

    @property
    def url(self) -> str:
        return self.base_url + self.config.url_prefix

    def start(self) -> ExtenderServer:
        """Bind, start serving in a daemon thread, and wait until uvicorn reports it has started."""
        if self._thread is not None:
            raise RuntimeError("ExtenderServer already started")
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port))
        except OSError:
            sock.close()
            raise
        sock.set_inheritable(True)
        self._sock = sock
        self.port = sock.getsockname()[1]
        cfg = uvicorn.Config(
            self.app,
            log_level=self._log_level,
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=2,
            **self._tls_kwargs,
        )
        server = uvicorn.Server(cfg)
        self._server = server
        self._thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name=f"hrl-extender:{self.port}", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + self.startup_timeout_s
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"extender server on {self.base_url} did not start")
            time.sleep(0.005)
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Ask uvicorn to exit, wait for the thread (up to ``timeout_s``), close the socket. Idempotent."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout_s)
        if self._sock is not None:
            self._sock.close()
        self._server = None
        self._thread = None
        self._sock = None

    def __enter__(self) -> ExtenderServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
