"""The extender's HTTP transport: a small ASGI application around :mod:`extender.scoring` (:func:`make_app`),
served by uvicorn with httptools and uvloop (:func:`uvicorn_config`; the server stack chosen by measurement,
BENCHMARKS.md section ``scheduler``), and :class:`ExtenderServer`, which runs it in a background thread (demo,
tests).

Routes (DESIGN.md section 5; kube-scheduler treats any status other than 200 as an error):

- ``POST {urlPrefix}/filter``     → ``ExtenderFilterResult``; "no fit" is a 200 with ``FailedNodes``;
- ``POST {urlPrefix}/prioritize`` → ``[{"Host", "Score"}]``, integer scores 0..10;
- ``GET /livez``, ``GET /healthz`` → 200 ``ok`` while the process serves (liveness);
- ``GET /readyz``  → 200 ``ok`` when a snapshot is loaded and not stale, else 503 with the reason;
- ``GET /metrics`` → Prometheus text exposition of the registry.

A verb request, in order (``limits`` of :class:`extender.config.ExtenderConfiguration`):

1. a ``Content-Length`` above ``maxRequestBytes`` (or a chunked body growing past it) → **413** with a one-line
   reason, before the body is read; counted in ``hrl_extender_requests_too_large_total{verb}``;
2. more than ``maxQueuedRequests`` requests received and not answered → neutral reply at once (outcome
   ``neutral_overload`` / ``overload``): load is shed instead of queued;
3. older than ``requestDeadlineSeconds`` since its headers arrived → neutral reply (``neutral_deadline`` /
   ``deadline``), not scored;
4. a body up to ``offloadRequestBytes`` is decoded (:func:`extender.wire.decode_extender_args`), scored and
   encoded on the event loop (tens of microseconds); a larger one in a pool of ``workers`` threads, awaited at most
   until the deadline (then neutral), and shed when every worker is busy;
5. the reply: the policy's scores, gathered from the :class:`policy.lowlevel.NodeScoreTable` when it holds the
   pod's vector. A malformed request (:class:`~extender.wire.WireError`) → 400 with a one-line ``text/plain``
   reason (logged at WARNING, counted in ``hrl_extender_requests_invalid_total{verb}``); anything failing after
   parsing → 200 neutral (``neutral_error`` / ``error``).

The neutral reply: prioritize, every candidate scored 0; filter, every candidate passes. When the candidates are
not known (a request shed or out of time before its body was decoded): prioritize answers ``[]`` (kube-scheduler
adds extender scores only for the hosts listed, ``pkg/scheduler/schedule_one.go`` ``prioritizeNodes``: the same
as all zeros); filter answers with ``Error`` set, which kube-scheduler skips when the extender is ``ignorable``
(as shipped) and otherwise retries the pod. Every reply goes through :func:`extender.wire.encode_json` (or its
byte-identical fast form), which cannot fail on a string.

A wrong method → 405 with ``Allow``; an unknown path → 404. Successful requests are not logged at INFO.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from policy.lowlevel import NodeScoreTable, PlacementPolicy

from . import scoring
from .config import ExtenderConfiguration, build_policy, tls_server_kwargs
from .metrics import ExtenderMetrics
from .store import SnapshotStore, StoreView
from .wire import (
    WireError,
    build_filter_result,
    decode_candidate_names,
    decode_extender_args,
    encode_host_scores,
    encode_json,
)

__all__ = ["ARRIVAL_KEY", "make_app", "readiness", "uvicorn_config", "ExtenderApp", "ExtenderServer"]

log = logging.getLogger(__name__)

#: ``scope["extensions"][ARRIVAL_KEY]``: :func:`time.perf_counter` when the request's first bytes were parsed,
#: set by the server's HTTP protocol (:func:`uvicorn_config`); absent = when the application got the request.
ARRIVAL_KEY = "hrl.arrival_s"

#: A request answered without scoring has its candidates read (to list them with score 0, or pass them) only when
#: its body is at most this large; a larger one gets the reply that does without them.
SHED_DECODE_BYTES = 256 * 1024

_JSON_HEADERS = [(b"content-type", b"application/json")]
_TEXT_HEADERS = [(b"content-type", b"text/plain; charset=utf-8")]


def readiness(
    store: SnapshotStore, config: ExtenderConfiguration, now_s: float | None = None, topology=None, inputs=()
) -> tuple[bool, str]:
    """``(ready, reason)``: ready when a snapshot is loaded and not older than ``maxSnapshotAgeSeconds``.

    ``topology``: the :class:`policy.topology.live.TopologyRefresher` keeping the call graph current (or
    ``None``). A stale call graph does NOT make the extender unready (scoring goes on with the last good graph;
    an unready extender would be dropped from its Service and so from scheduling altogether): the reason then
    reads ``ok (warning: call graph stale: ...)``, and ``hrl_topology_graph_stale`` is 1.

    ``inputs``: the live inputs' :class:`policy.live.InputHealth` objects (measured use). A configured one that is not
    ``ok`` adds its line (``warning: resource_usage: stale (...)``; ``note: ...`` while pending) without making the
    extender unready either: scoring goes on from requests (fail open). One that is off adds nothing (its start-up
    line and ``hrl_metrics_source_state{state="off"}`` say so)."""
    v = store.get()
    warning = "".join(_input_note(h, store.clock() if now_s is None else now_s) for h in inputs)
    if topology is not None:
        st = topology.status()
        if st.stale:
            age = st.age_s(topology.clock())
            age_text = "never refreshed" if age == float("inf") else f"age {age:.0f} s"
            warning += f" (warning: call graph stale, {age_text}: {st.reason}; scoring uses the last good graph)"
    if not v.ready:
        return False, "not ready: no cluster snapshot loaded yet" + warning
    t = store.clock() if now_s is None else now_s
    max_age = config.max_snapshot_age_seconds
    if v.is_stale(t, max_age):
        return False, (
            f"not ready: snapshot is stale (age {v.age_s(t):.1f} s > maxSnapshotAgeSeconds {max_age:g})" + warning
        )
    return True, "ok" + warning


def _input_note(health, now_s: float) -> str:
    st = health.status
    if st.state in ("ok", "off"):  # off: a configuration choice, said at start and by hrl_metrics_source_state
        return ""
    kind = "note" if st.state == "pending" else "warning"
    return f" ({kind}: {st.line(now_s)})"


class _Reply(Exception):
    """Answer now with this status and body (raised while reading the body)."""

    def __init__(self, status: int, body: bytes, headers: list[tuple[bytes, bytes]]):
        super().__init__(status)
        self.status, self.body, self.headers = status, body, headers


def _neutral_prioritize(names: list[str] | None) -> bytes:
    return b"[]" if names is None else encode_host_scores(names, [0] * len(names))


def _neutral_filter(parsed, reason: str) -> bytes:
    if parsed is None:
        return encode_json(
            {
                "Nodes": None,
                "NodeNames": None,
                "FailedNodes": {},
                "FailedAndUnresolvableNodes": {},
                "Error": f"hrl-extender: {reason}; not filtered (ignorable: true lets the scheduler go on)",
            }
        )
    return encode_json(build_filter_result(parsed, {}))


class _LoopLag:
    """How late the event loop runs: a timer every :attr:`PERIOD_S` records how late it fired (the length of the
    loop iteration it waited behind). While the loop is saturated, that is about how long a request sat in its
    socket before the loop read it. :meth:`watch` (re)starts the timer on the running loop (a new loop, as in
    tests, restarts it); :meth:`lag_s` is the last lateness, 0 once it is older than :attr:`MAX_AGE_S`."""

    PERIOD_S = 0.005
    MAX_AGE_S = 0.5

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0
        self._late_s = 0.0
        self._at = 0.0

    def watch(self) -> None:
        loop = asyncio.get_running_loop()
        if loop is not self._loop or self._handle is None:
            self.stop()
            self._loop = loop
            self._schedule()

    def _schedule(self) -> None:
        assert self._loop is not None
        self._due = time.perf_counter() + self.PERIOD_S
        self._handle = self._loop.call_later(self.PERIOD_S, self._tick)

    def _tick(self) -> None:
        now = time.perf_counter()
        self._late_s, self._at = max(0.0, now - self._due), now
        if self._loop is not None and not self._loop.is_closed():
            self._schedule()

    def lag_s(self) -> float:
        return self._late_s if time.perf_counter() - self._at < self.MAX_AGE_S else 0.0

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = None
        self._loop = None


class ExtenderApp:
    """The ASGI application :func:`make_app` returns. Attributes: ``config``, ``store``, ``policy``,
    ``metrics`` (:class:`ExtenderMetrics`), ``table`` (:class:`NodeScoreTable` or ``None``), ``topology``,
    ``state`` (a namespace with the same names, as a Starlette app's). Call :meth:`close` to stop its worker
    pool (idempotent; :class:`ExtenderServer` and ``hrl-extender`` do)."""

    def __init__(
        self,
        config: ExtenderConfiguration,
        store: SnapshotStore,
        policy: PlacementPolicy,
        metrics: ExtenderMetrics,
        topology: Any = None,
        table: NodeScoreTable | None = None,
        inputs: tuple = (),
    ):
        self.config, self.store, self.policy, self.metrics = config, store, policy, metrics
        self.topology, self.table = topology, table
        self.inputs = tuple(inputs)
        self.state = SimpleNamespace(
            metrics=metrics, store=store, config=config, topology=topology, table=table, policy=policy
        )
        lim = config.limits
        self._max_bytes = lim.max_request_bytes
        self._offload_bytes = lim.offload_request_bytes
        self._deadline_s = lim.request_deadline_seconds
        self._max_queued = lim.max_queued_requests
        self._workers = lim.workers
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._busy_workers = 0
        self._queued = 0
        self._lag = _LoopLag()
        prefix = config.url_prefix
        self._routes = {
            f"{prefix}/prioritize": ("POST", "prioritize"),
            f"{prefix}/filter": ("POST", "filter"),
            "/livez": ("GET", "livez"),
            "/healthz": ("GET", "livez"),
            "/readyz": ("GET", "readyz"),
            "/metrics": ("GET", "metrics"),
        }
        metrics.requests_in_flight.set_function(lambda: float(self._queued))

    # ---- ASGI ------------------------------------------------------------------------------------------
    async def __call__(self, scope, receive, send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    self.close()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if kind != "http":
            return
        route = self._routes.get(scope["path"])
        if route is None:
            await self._send(send, 404, b"not found\n", _TEXT_HEADERS)
            return
        method, name = route
        if scope["method"] != method and not (method == "GET" and scope["method"] == "HEAD"):
            await self._send(send, 405, b"method not allowed\n", [*_TEXT_HEADERS, (b"allow", method.encode())])
            return
        if name in ("prioritize", "filter"):
            await self._verb(name, scope, receive, send)
        elif name == "livez":
            await self._send(send, 200, b"ok\n", _TEXT_HEADERS)
        elif name == "readyz":
            ok, reason = readiness(self.store, self.config, topology=self.topology, inputs=self.inputs)
            await self._send(send, 200 if ok else 503, (reason + "\n").encode(), _TEXT_HEADERS)
        else:
            body = generate_latest(self.metrics.registry)
            await self._send(send, 200, body, [(b"content-type", CONTENT_TYPE_LATEST.encode())])

    @staticmethod
    async def _send(send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [*headers, (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})

    # ---- verbs -----------------------------------------------------------------------------------------
    async def _read_body(self, verb: str, scope, receive) -> bytes | None:
        limit = self._max_bytes
        for k, v in scope.get("headers", ()):
            if k == b"content-length":
                try:
                    n = int(v)
                except ValueError:
                    raise _Reply(400, b"Content-Length: not an integer\n", _TEXT_HEADERS) from None
                if n > limit:
                    raise self._too_large(verb, f"Content-Length {n}")
                break
        chunks: list[bytes] = []
        size = 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return None
            chunk = msg.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > limit:
                    raise self._too_large(verb, f"more than {limit} bytes received")
                chunks.append(chunk)
            if not msg.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _too_large(self, verb: str, what: str) -> _Reply:
        self.metrics.requests_too_large_total.labels(verb=verb).inc()
        reason = f"body: too large ({what}); limits.maxRequestBytes is {self._max_bytes}"
        log.warning("%s: %s", verb, reason)
        return _Reply(413, (reason + "\n").encode(), _TEXT_HEADERS)

    async def _verb(self, verb: str, scope, receive, send) -> None:
        self._lag.watch()
        arrival = (scope.get("extensions") or {}).get(ARRIVAL_KEY)
        if arrival is None:
            arrival = time.perf_counter()
        self._queued += 1
        try:
            try:
                body = await self._read_body(verb, scope, receive)
            except _Reply as r:
                await self._send(send, r.status, r.body, r.headers)
                return
            if body is None:  # the client went away
                return
            try:
                status, content, headers, outcome = await self._answer(verb, body, arrival)
            except Exception as exc:  # fail open, whatever went wrong in the transport's own code
                log.error("%s: internal failure %s: %s (neutral reply)", verb, type(exc).__name__, exc, exc_info=True)
                status, content, headers, outcome = self._shed(verb, body, "error")
                outcome = "neutral_error" if verb == "prioritize" else "error"
        finally:
            self._queued -= 1
        if outcome is not None:
            m = self.metrics
            (m.prioritize_total if verb == "prioritize" else m.filter_total).labels(outcome=outcome).inc()
            hist = m.prioritize_duration_seconds if verb == "prioritize" else m.filter_duration_seconds
            hist.observe(time.perf_counter() - arrival)
        await self._send(send, status, content, headers)

    async def _answer(self, verb: str, body: bytes, arrival: float) -> tuple[int, bytes, list, str | None]:
        """(status, body, headers, outcome or None for a 400)."""
        if self._queued > self._max_queued:
            return self._shed(verb, body, "overload")
        # waited: since its first bytes were parsed (behind the requests parsed with it), plus the event loop's
        # last iteration, which is about how long it sat in the socket before that (loop saturated = queue)
        if time.perf_counter() - arrival + self._lag.lag_s() > self._deadline_s:
            return self._shed(verb, body, "deadline")
        if len(body) <= self._offload_bytes:
            return self._handle(verb, body, arrival)
        with self._pool_lock:
            if self._busy_workers >= self._workers:
                busy = True
            else:
                busy = False
                self._busy_workers += 1
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="hrl-extender-worker")
                pool = self._pool
        if busy:
            return self._shed(verb, body, "overload")
        fut = pool.submit(self._handle, verb, body, arrival, True)
        fut.add_done_callback(self._worker_done)
        remaining = self._deadline_s - (time.perf_counter() - arrival)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(fut), max(remaining, 0.0))
        except TimeoutError:
            return self._shed(verb, body, "deadline")

    def _worker_done(self, _fut) -> None:
        with self._pool_lock:
            self._busy_workers -= 1

    def _shed(self, verb: str, body: bytes | None, why: str) -> tuple[int, bytes, list, str]:
        """The neutral reply without scoring; the candidates are read only from a body of at most
        :data:`SHED_DECODE_BYTES` (prioritize: their names alone, a few microseconds), else the reply does
        without them."""
        small = body is not None and len(body) <= SHED_DECODE_BYTES
        if verb == "prioritize":
            names = decode_candidate_names(body) if small else None
            return 200, _neutral_prioritize(names), _JSON_HEADERS, "neutral_" + why
        parsed = None
        if small:
            try:
                parsed = decode_extender_args(body, echo_nodes=True)
            except WireError:
                parsed = None
        return 200, _neutral_filter(parsed, why), _JSON_HEADERS, why

    def _handle(
        self, verb: str, body: bytes, arrival: float, in_worker: bool = False
    ) -> tuple[int, bytes, list, str | None]:
        try:
            parsed = decode_extender_args(body, echo_nodes=verb == "filter")
        except WireError as exc:
            self.metrics.requests_invalid_total.labels(verb=verb).inc()
            reason = " ".join(str(exc).split())
            log.warning("%s: bad request: %s", verb, reason)
            return 400, (reason + "\n").encode(), _TEXT_HEADERS, None
        if in_worker and time.perf_counter() - arrival > self._deadline_s:
            return self._shed(verb, None, "deadline")  # the loop has answered already
        cfg = self.config
        if verb == "prioritize":
            try:
                view: StoreView = self.store.get()
                scores, outcome = scoring.prioritize_scores(
                    parsed,
                    view,
                    self.policy,
                    max_snapshot_age_s=cfg.max_snapshot_age_seconds,
                    now_s=self.store.clock(),
                    table=self.table,
                )
                content = encode_host_scores(parsed.node_names, scores)
            except Exception as exc:  # fail open: the scheduler's own plugins decide
                log.error(
                    "prioritize: internal failure %s: %s (neutral scores)", type(exc).__name__, exc, exc_info=True
                )
                content, outcome = _neutral_prioritize(parsed.node_names), "neutral_error"
            return 200, content, _JSON_HEADERS, outcome
        try:
            reply, outcome = scoring.filter_nodes(
                parsed,
                self.store.get(),
                self.policy,
                max_snapshot_age_s=cfg.max_snapshot_age_seconds,
                now_s=self.store.clock(),
            )
            content = encode_json(reply)
        except Exception as exc:  # fail open: every candidate passes
            log.error("filter: internal failure %s: %s (every node passes)", type(exc).__name__, exc, exc_info=True)
            content, outcome = encode_json(build_filter_result(parsed, {})), "error"
        return 200, content, _JSON_HEADERS, outcome

    def close(self) -> None:
        """Stop the worker pool (running work finishes in the background) and the loop-lag timer. Idempotent."""
        self._lag.stop()
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


def make_app(
    config: ExtenderConfiguration,
    store: SnapshotStore,
    policy: PlacementPolicy,
    registry: CollectorRegistry | ExtenderMetrics,
    topology=None,
    inputs=(),
) -> ExtenderApp:
    """The ASGI application serving the extender (:class:`ExtenderApp`).

    ``config``: routes (``urlPrefix``), staleness (``maxSnapshotAgeSeconds``), ``limits`` and ``precompute``;
    ``store``: read on every request, never written here; ``policy``: the placement policy; ``registry``: a
    :class:`CollectorRegistry` to register :class:`ExtenderMetrics` in (once per registry), or an
    :class:`ExtenderMetrics` already registered. The metrics object is ``app.state.metrics``.
    ``topology``: an optional :class:`policy.topology.live.TopologyRefresher`; its staleness shows in ``/readyz``
    and its ``hrl_topology_*`` metrics are registered in the same registry (when it has none yet). ``inputs``: the
    live inputs' :class:`policy.live.InputHealth` objects: their state shows in ``/readyz`` (see :func:`readiness`)
    and their ``hrl_metrics_source_*`` metrics are registered in the same registry (when they have none yet).

    With ``precompute.enabled`` a :class:`policy.lowlevel.NodeScoreTable` of ``policy`` is subscribed to
    ``store``: every change the store publishes re-warms it in the writer's thread (off the request path), for at
    most :data:`WARM_BUDGET_S` seconds per change.
    """
    metrics = registry if isinstance(registry, ExtenderMetrics) else ExtenderMetrics(registry)
    metrics.bind_store(store)
    if topology is not None and topology.metrics is None:
        from policy.topology.live import TopologyMetrics

        topology.attach_metrics(TopologyMetrics(metrics.registry))
    unexported = [h for h in inputs if h.metrics is None]
    if unexported:
        from policy.live import InputMetrics

        im = InputMetrics(metrics.registry)
        for h in unexported:
            h.attach(im)
    table = None
    if config.precompute.enabled:
        table = NodeScoreTable(policy, max_keys=config.precompute.max_keys)
        metrics.bind_table(table)

        def warm(view: StoreView) -> None:
            if view.ready:
                table.warm(
                    view.index,
                    view.intent,
                    deadline_s=time.monotonic() + WARM_BUDGET_S,
                    colocation=view.colocation or None,
                )

        store.subscribe(warm)
        try:
            warm(store.get())
        except Exception as exc:  # noqa: BLE001 - the first store change warms it instead
            log.warning("score table: cannot warm at start: %s: %s", type(exc).__name__, exc)
    return ExtenderApp(config, store, policy, metrics, topology, table, inputs)


#: Seconds of vector computation at most per store change (the rest waits for the next change; misses are
#: scored directly meanwhile).
WARM_BUDGET_S = 0.5


def _stamped_protocol(on_connect: Any = None) -> type:
    """uvicorn's httptools protocol, stamping each request's arrival time (``perf_counter``) into
    ``scope["extensions"][ARRIVAL_KEY]`` when its first bytes are parsed, so the deadline and the duration
    metrics count the time a request waited behind others on the event loop. ``on_connect()``: called for every
    accepted connection (counts them: kube-scheduler's client keeps its connections alive)."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class StampedHttpToolsProtocol(HttpToolsProtocol):
        def connection_made(self, transport) -> None:  # type: ignore[no-untyped-def]
            super().connection_made(transport)
            self.transport = CoalescingTransport(transport, self.loop)  # the request cycles write through it
            if on_connect is not None:
                on_connect()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self.scope.setdefault("extensions", {})[ARRIVAL_KEY] = time.perf_counter()  # type: ignore[typeddict-item]

    return StampedHttpToolsProtocol


class CoalescingTransport:
    """A write-side proxy of an asyncio transport that hands it the writes of one event-loop iteration as one
    ``write``: uvicorn writes a response's status line and headers, then its body, apart (uvicorn
    ``protocols/http/httptools_impl.py``, ``RequestResponseCycle.send``), which on a ``TCP_NODELAY`` socket are two
    segments and two wake-ups of the client; joined, a reply is one ``send``. The join runs by
    ``loop.call_soon`` after the current callback (the reply is complete by then); :meth:`close` and
    :meth:`write_eof` write what is pending first, :meth:`abort` drops it. Everything else is the transport's."""

    __slots__ = ("_transport", "_loop", "_pending", "writes")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []
        self.writes = 0  # writes handed to the transport (for tests)

    def write(self, data: bytes) -> None:
        if not self._pending:
            self._loop.call_soon(self._flush)
        self._pending.append(data)

    def _flush(self) -> None:
        if self._pending:
            data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
            self._pending.clear()
            if not self._transport.is_closing():
                self.writes += 1
                self._transport.write(data)

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._pending.clear()
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def uvicorn_config(app: ExtenderApp, **kwargs: Any) -> uvicorn.Config:
    """The ``uvicorn.Config`` the extender is served with: httptools (HTTP/1.1 keep-alive, as kube-scheduler's Go
    client uses it) with arrival stamps, uvloop, no access log, no lifespan; ``kwargs`` (host, port, TLS files,
    log_level, ...) are passed through."""
    metrics = getattr(app, "metrics", None)
    on_connect = metrics.http_connections_total.inc if metrics is not None else None
    opts: dict[str, Any] = {
        "http": _stamped_protocol(on_connect),
        "loop": "uvloop",
        "access_log": False,
        "lifespan": "off",
        "log_config": None,
        "timeout_keep_alive": 90,  # kube-scheduler's transport keeps idle connections 90 s
    }
    opts.update(kwargs)
    return uvicorn.Config(app, **opts)


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
        inputs=(),
    ):
        self.config = config or ExtenderConfiguration()
        self.store = store if store is not None else SnapshotStore()
        self.policy = policy if policy is not None else build_policy(self.config)
        self.registry = registry if registry is not None else CollectorRegistry()
        self.app = make_app(self.config, self.store, self.policy, self.registry, topology=topology, inputs=inputs)
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
        sock = bind_socket(self.host, self.port)
        self._sock = sock
        self.port = sock.getsockname()[1]
        cfg = uvicorn_config(
            self.app, log_level=self._log_level, timeout_graceful_shutdown=2, log_config=None, **self._tls_kwargs
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
        """Ask uvicorn to exit, wait for the thread (up to ``timeout_s``), close the socket and the worker pool.
        Idempotent."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout_s)
        if self._sock is not None:
            self._sock.close()
        self.app.close()
        self._server = None
        self._thread = None
        self._sock = None

    def __enter__(self) -> ExtenderServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def bind_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (IPv6 when ``host`` contains ':') and listening (connections wait in
    the backlog until uvicorn serves it), ``SO_REUSEADDR`` set, inheritable. Raises ``OSError`` (e.g.
    ``EADDRINUSE``) when it cannot bind; the socket is closed then."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock
