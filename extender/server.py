"""The extender's application and how it is served: :class:`ExtenderApp` (made by :func:`make_app`) answers each
request around :mod:`extender.scoring`; :mod:`extender.http` serves it (:class:`extender.http.HttpServer`: an
asyncio protocol over httptools on uvloop, chosen by measurement: DESIGN.md section 5, BENCHMARKS.md section
``fuzz``); :class:`ExtenderServer` runs that in a background thread (demo, tests). The application is also a plain
ASGI application (any ASGI server can serve it; :func:`uvicorn_config` is uvicorn's, through its public interface,
for comparisons), without what only the transport can measure (the time a request waited in its socket).

Routes (DESIGN.md section 5; kube-scheduler treats any status other than 200 as an error):

- ``POST {urlPrefix}/filter``     → ``ExtenderFilterResult``; "no fit" is a 200 with ``FailedNodes``;
- ``POST {urlPrefix}/prioritize`` → ``[{"Host", "Score"}]``, integer scores 0..10;
- ``GET /livez``, ``GET /healthz`` → 200 ``ok`` while the process serves (liveness);
- ``GET /readyz``  → 200 ``ok`` when a snapshot is loaded and not stale, else 503 with the reason;
- ``GET /metrics`` → Prometheus text exposition of the registry.

With ``listen.healthPort`` the three probes (``/livez``, ``/healthz``, ``/readyz``; nothing else) are also served on
a listener of their own (:class:`HealthListener`: :class:`HealthApp` on its own socket, thread and event loop), the
same replies, so that the kubelet's probes never wait behind the scoring loop's sockets; there they answer 503 once
that loop has not turned for ``limits.maxLoopStallSeconds`` (:meth:`extender.http.HttpServer.stalled_s`), where the
probes on the serving port would time out.

A verb request, in order (``limits`` of :class:`extender.config.ExtenderConfiguration`; the transport's own limits,
read timeouts and the connection bound, are in :mod:`extender.http`):

1. a body over ``maxRequestBytes`` → **413** with a one-line reason, before it is read (outcome ``too_large``); a
   body not complete within ``bodyTimeoutSeconds`` → **408** (outcome ``timeout``);
2. older than ``requestDeadlineSeconds`` since its first bytes reached the socket (:func:`extender.http.tcp_wait_s`:
   the wait in the kernel's socket buffer counts) → neutral reply at once, not scored (``neutral_deadline`` /
   ``deadline``);
3. read after the event loop has been handling requests for ``maxLoopBusySeconds`` since it last read its sockets
   (the requests still in them wait meanwhile), or more than ``maxQueuedRequests`` complete requests not answered
   yet (waiting for a worker or behind another request of their connection) → neutral reply at once
   (``neutral_overload`` / ``overload``);
4. a body up to ``offloadRequestBytes`` is decoded (:func:`extender.wire.decode_extender_args`), scored and encoded
   on the event loop, as soon as it is read (tens of microseconds); a larger one in a pool of ``workers`` threads,
   awaited at most until the deadline (then neutral), and shed when every worker is busy;
5. the reply: the policy's scores, gathered from the :class:`policy.lowlevel.NodeScoreTable` when it holds the
   pod's vector. A malformed request (:class:`~extender.wire.WireError`) → **400** with a one-line ``text/plain``
   reason (logged at WARNING, at most :data:`extender.ratelog.LOG_BURST` a minute per verb, then a count of those
   left out: :class:`extender.ratelog.RateLimitedLog`; outcome ``invalid``); anything failing after parsing → 200
   neutral (``neutral_error`` / ``error``).

Every error becomes its HTTP status in one place, :func:`error_response` (:data:`ERROR_STATUS`), and every reply
the application makes is counted there or in :meth:`ExtenderApp.reply`: ``hrl_extender_http_responses_total{code}``
for all, ``hrl_extender_{prioritize,filter}_total{outcome}`` for every verb request answered (the rejected ones
too: ``invalid``, ``too_large``, ``timeout``).

The neutral reply: prioritize, every candidate scored 0 when they are known (a failure after parsing), ``[]``
when the request is shed (kube-scheduler adds extender scores only for the hosts listed,
``pkg/scheduler/schedule_one.go`` ``prioritizeNodes``: the same as all zeros, and nothing to decode); filter, every
candidate passes (their names read from a body of at most :data:`SHED_DECODE_BYTES`), else ``Error`` set, which
kube-scheduler skips when the extender is ``ignorable`` (as shipped) and otherwise retries the pod. Every reply goes
through :func:`extender.wire.encode_json` (or its byte-identical fast form), which cannot fail on a string.

A wrong method → 405 with ``Allow``; an unknown path → 404. Successful requests are not logged at INFO.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future as ThreadFuture
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from policy.live import InputMetrics
from policy.lowlevel import NodeScoreTable, PlacementPolicy
from policy.topology.live import TopologyMetrics

from . import scoring
from .config import ExtenderConfiguration, build_policy, http_limits, tls_context
from .http import (
    BadHttp,
    BodyTimeout,
    BodyTooLarge,
    HeadersTooLarge,
    HeaderTimeout,
    HttpLimits,
    HttpProblem,
    HttpServer,
    Request,
    Response,
)
from .metrics import ExtenderMetrics
from .ratelog import RateLimitedLog
from .store import SnapshotStore, StoreView
from .wire import (
    WireError,
    build_filter_result,
    decode_candidate_names,
    decode_extender_args,
    encode_host_scores,
    encode_json,
)

__all__ = [
    "ERROR_STATUS",
    "SHED_DECODE_BYTES",
    "NotFound",
    "MethodNotAllowed",
    "error_response",
    "make_app",
    "readiness",
    "uvicorn_config",
    "ExtenderApp",
    "PROBE_ROUTES",
    "HealthApp",
    "HealthListener",
    "health_limits",
    "ExtenderServer",
    "bind_socket",
]

log = logging.getLogger(__name__)

#: A filter request answered without scoring has its candidates read (to pass them all) only when its body is at
#: most this large; a larger one gets the reply that does without them.
SHED_DECODE_BYTES = 256 * 1024

_JSON = b"application/json"
_TEXT = b"text/plain; charset=utf-8"


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


class NotFound(HttpProblem):
    """No route for the path."""


class MethodNotAllowed(HttpProblem):
    """The route exists for another method (``allow``)."""

    def __init__(self, reason: str, path: str, allow: str):
        super().__init__(reason, path)
        self.allow = allow


#: The one mapping of errors to HTTP statuses (:func:`error_response`), with the outcome a verb request gets:
#: ``(exception type, status, outcome)``, the first matching type wins.
ERROR_STATUS: tuple[tuple[type[BaseException], int, str], ...] = (
    (BodyTooLarge, 413, "too_large"),
    (HeadersTooLarge, 431, "too_large"),
    (HeaderTimeout, 408, "timeout"),
    (BodyTimeout, 408, "timeout"),
    (NotFound, 404, ""),
    (MethodNotAllowed, 405, ""),
    (BadHttp, 400, "invalid"),
    (WireError, 400, "invalid"),
)


def error_response(app: ExtenderApp, exc: BaseException, path: str, request: Request | None = None) -> Response:
    """The reply to ``exc`` raised while answering a request for ``path`` (``request``: the request when it was
    complete): the status of :data:`ERROR_STATUS` with a one-line ``text/plain`` reason, counted (the verb's
    ``outcome``, ``hrl_extender_requests_invalid_total`` / ``_too_large_total`` too); any other exception fails
    open for a verb (200, neutral: prioritize every known candidate 0, filter every candidate passes; outcome
    ``neutral_error`` / ``error``, logged with its traceback) and is a 500 elsewhere. Never raises."""
    verb = app.verb_of(path)
    arrival = request.arrival_s if request is not None else None
    for kind, status, outcome in ERROR_STATUS:
        if isinstance(exc, kind):
            reason = " ".join(str(getattr(exc, "reason", None) or exc).split())
            headers: tuple[tuple[bytes, bytes], ...] = ()
            if isinstance(exc, MethodNotAllowed):
                headers = ((b"allow", exc.allow.encode("ascii")),)
            m = app.metrics
            if verb is not None and outcome:
                if outcome == "invalid":
                    m.requests_invalid_total.labels(verb=verb).inc()
                    app.request_log.warning(f"{verb}: bad request", "%s: bad request: %s", verb, reason)
                elif outcome == "too_large":
                    m.requests_too_large_total.labels(verb=verb).inc()
                    if isinstance(exc, BodyTooLarge):
                        reason += f" is over limits.maxRequestBytes ({app.config.limits.max_request_bytes})"
                        app.request_log.warning(f"{verb}: request too large", "%s: request too large: %s", verb, reason)
            return app.reply(
                status,
                (reason + "\n").encode(),
                _TEXT,
                verb=verb if outcome else None,
                outcome=outcome or None,
                arrival_s=None,
                headers=headers,
                close=status in (408, 413, 431) or isinstance(exc, BadHttp),
            )
    if verb is None:
        log.error("%s: internal failure %s: %s", path, type(exc).__name__, exc, exc_info=exc)
        return app.reply(500, b"internal error\n", _TEXT)
    log.error("%s: internal failure %s: %s (neutral reply)", verb, type(exc).__name__, exc, exc_info=exc)
    body = request.body if request is not None else None
    if verb == "prioritize":
        names = decode_candidate_names(body) if body is not None and len(body) <= SHED_DECODE_BYTES else None
        return app.reply(200, _neutral_prioritize(names), _JSON, verb=verb, outcome="neutral_error", arrival_s=arrival)
    return app.reply(200, _neutral_filter(_shed_args(body), "error"), _JSON, verb=verb, outcome="error",
                     arrival_s=arrival)  # fmt: skip


def _neutral_prioritize(names: list[str] | None) -> bytes:
    return b"[]" if names is None else encode_host_scores(names, [0] * len(names))


def _shed_args(body: bytes | None):
    if body is None or len(body) > SHED_DECODE_BYTES:
        return None
    try:
        return decode_extender_args(body, echo_nodes=True)
    except WireError:
        return None


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


class ExtenderApp:
    """The extender's application (:func:`make_app` makes it): :meth:`handle` answers a complete
    :class:`extender.http.Request` (the :class:`extender.http.Handler` that :class:`extender.http.HttpServer`
    serves), :meth:`error` answers a problem (:func:`error_response`), and calling it is the ASGI application.
    Attributes: ``config``, ``store``, ``policy``, ``metrics`` (:class:`ExtenderMetrics`), ``table``
    (:class:`NodeScoreTable` or ``None``), ``topology``, ``state`` (a namespace with the same names, as a Starlette
    app's). Call :meth:`close` to stop its worker pool (idempotent; :class:`ExtenderServer` and ``hrl-extender``
    do)."""

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
        #: the per-request warnings (bad request, too large): at most LOG_BURST per kind a window, counts kept
        self.request_log = RateLimitedLog(log)
        self.inputs = tuple(inputs)
        self.state = SimpleNamespace(
            metrics=metrics, store=store, config=config, topology=topology, table=table, policy=policy
        )
        lim = config.limits
        self._max_bytes = lim.max_request_bytes
        self._offload_bytes = lim.offload_request_bytes
        self._deadline_s = lim.request_deadline_seconds
        self._max_queued = lim.max_queued_requests
        self._max_busy_s = lim.max_loop_busy_seconds
        self._body_timeout_s = lim.body_timeout_seconds
        self._workers = lim.workers
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._busy_workers = 0
        self._asgi_unanswered = 0
        prefix = config.url_prefix
        self._routes = {
            f"{prefix}/prioritize": ("POST", "prioritize"),
            f"{prefix}/filter": ("POST", "filter"),
            "/livez": ("GET", "livez"),
            "/healthz": ("GET", "livez"),
            "/readyz": ("GET", "readyz"),
            "/metrics": ("GET", "metrics"),
        }
        self._responses = {c: metrics.http_responses_total.labels(code=str(c)) for c in (200, 400, 404, 405, 503)}

    # ---- the core ------------------------------------------------------------------------------------------
    def verb_of(self, path: str) -> str | None:
        """``"prioritize"`` / ``"filter"`` when ``path`` is a verb's, else ``None``."""
        route = self._routes.get(path)
        return route[1] if route is not None and route[0] == "POST" else None

    def handle(self, request: Request) -> Response | asyncio.Future:
        """The reply to ``request``, or (a large verb body, scored in the worker pool) a future of it on the running
        event loop. Never raises: whatever fails is answered through :func:`error_response`."""
        try:
            route = self._routes.get(request.path)
            if route is None:
                raise NotFound("not found", request.path)
            method, name = route
            if request.method != method and not (method == "GET" and request.method == "HEAD"):
                raise MethodNotAllowed("method not allowed", request.path, method)
            if name in ("prioritize", "filter"):
                return self._verb(name, request)
            if name == "livez":
                return self.reply(200, b"ok\n", _TEXT)
            if name == "readyz":
                ok, reason = readiness(self.store, self.config, topology=self.topology, inputs=self.inputs)
                return self.reply(200 if ok else 503, (reason + "\n").encode(), _TEXT)
            return self.reply(200, generate_latest(self.metrics.registry), CONTENT_TYPE_LATEST.encode())
        except Exception as exc:  # noqa: BLE001 - mapped to its status (or fail open) in one place
            return error_response(self, exc, request.path, request)

    def error(self, exc: BaseException, path: str) -> Response:
        """:func:`error_response` for a request that was not complete (the transport's problems)."""
        return error_response(self, exc, path)

    def reply(
        self,
        status: int,
        body: bytes,
        content_type: bytes,
        *,
        verb: str | None = None,
        outcome: str | None = None,
        arrival_s: float | None = None,
        headers: tuple[tuple[bytes, bytes], ...] = (),
        close: bool = False,
    ) -> Response:
        """A :class:`extender.http.Response`, counted: every reply in ``hrl_extender_http_responses_total{code}``;
        a verb's ``outcome`` in ``hrl_extender_{verb}_total``, and with ``arrival_s`` (``perf_counter``) its time
        since arrival in ``hrl_extender_{verb}_duration_seconds``."""
        counter = self._responses.get(status)
        if counter is None:
            counter = self._responses[status] = self.metrics.http_responses_total.labels(code=str(status))
        counter.inc()
        if verb is not None and outcome is not None:
            m = self.metrics
            (m.prioritize_total if verb == "prioritize" else m.filter_total).labels(outcome=outcome).inc()
            if arrival_s is not None:
                hist = m.prioritize_duration_seconds if verb == "prioritize" else m.filter_duration_seconds
                hist.observe(time.perf_counter() - arrival_s)
        return Response(status, body, content_type, headers, close)

    # ---- verbs ---------------------------------------------------------------------------------------------
    def _verb(self, verb: str, req: Request) -> Response | asyncio.Future:
        arrival = req.arrival_s
        if time.perf_counter() - arrival > self._deadline_s:
            return self._shed(verb, req, "deadline")
        if req.unanswered > self._max_queued or req.busy_s > self._max_busy_s:
            return self._shed(verb, req, "overload")
        if len(req.body) <= self._offload_bytes:
            return self._answer(verb, req, self._score(verb, req.body))
        with self._pool_lock:
            if self._busy_workers >= self._workers:
                return self._shed(verb, req, "overload")
            self._busy_workers += 1
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="hrl-extender-worker")
            pool = self._pool
        loop = asyncio.get_running_loop()
        out: asyncio.Future = loop.create_future()

        def settle(work: ThreadFuture | None) -> None:  # on the loop: the worker's answer, or the deadline's
            if out.done():
                return
            timer.cancel()
            if work is None:
                out.set_result(self._shed(verb, req, "deadline"))
                return
            try:
                out.set_result(self._answer(verb, req, work.result()))
            except Exception as exc:  # noqa: BLE001 - a malformed body (WireError) or a failure: one place
                out.set_result(error_response(self, exc, req.path, req))

        def back_to_loop(f: ThreadFuture) -> None:  # in the worker thread
            try:
                loop.call_soon_threadsafe(settle, f)
            except RuntimeError:  # the loop closed meanwhile (the server stopped): nobody to answer
                pass

        work = pool.submit(self._score, verb, req.body, arrival)
        work.add_done_callback(self._worker_done)
        work.add_done_callback(back_to_loop)
        remaining = max(0.0, self._deadline_s - (time.perf_counter() - arrival))
        timer = loop.call_later(remaining, settle, None)
        return out

    def _worker_done(self, _fut) -> None:
        with self._pool_lock:
            self._busy_workers -= 1

    def _answer(self, verb: str, req: Request, scored: tuple[bytes, str]) -> Response:
        content, outcome = scored
        return self.reply(200, content, _JSON, verb=verb, outcome=outcome, arrival_s=req.arrival_s)

    def _shed(self, verb: str, req: Request, why: str) -> Response:
        """The neutral reply without scoring (module docstring): prioritize ``[]``; filter every candidate passes
        (their names read from a body of at most :data:`SHED_DECODE_BYTES`)."""
        if verb == "prioritize":
            return self.reply(200, b"[]", _JSON, verb=verb, outcome="neutral_" + why, arrival_s=req.arrival_s)
        content = _neutral_filter(_shed_args(req.body), why)
        return self.reply(200, content, _JSON, verb=verb, outcome=why, arrival_s=req.arrival_s)

    def _score(self, verb: str, body: bytes, arrival_s: float | None = None) -> tuple[bytes, str]:
        """``(reply body, outcome)`` of a verb request (in a worker when ``arrival_s`` is given: past the deadline
        it stops before scoring, the loop having answered already). Raises :class:`WireError` for a malformed
        request; a failure of the policy fails open here."""
        parsed = decode_extender_args(body, echo_nodes=verb == "filter")
        if arrival_s is not None and time.perf_counter() - arrival_s > self._deadline_s:
            return b"[]", "neutral_deadline"  # never sent: the deadline's reply went first
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
                return encode_host_scores(parsed.node_names, scores), outcome
            except Exception as exc:
                log.error(
                    "prioritize: internal failure %s: %s (neutral scores)", type(exc).__name__, exc, exc_info=True
                )
                return _neutral_prioritize(parsed.node_names), "neutral_error"
        try:
            reply, outcome = scoring.filter_nodes(
                parsed,
                self.store.get(),
                self.policy,
                max_snapshot_age_s=cfg.max_snapshot_age_seconds,
                now_s=self.store.clock(),
            )
            return encode_json(reply), outcome
        except Exception as exc:
            log.error("filter: internal failure %s: %s (every node passes)", type(exc).__name__, exc, exc_info=True)
            return encode_json(build_filter_result(parsed, {})), "error"

    # ---- ASGI ----------------------------------------------------------------------------------------------
    async def __call__(self, scope, receive, send) -> None:
        """The ASGI application (HTTP and lifespan scopes): the same replies as :meth:`handle`, the deadline counted
        from when the application got the request, the body read within ``limits.bodyTimeoutSeconds``."""
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
        arrival = time.perf_counter()
        path = scope["path"]
        try:
            body = await self._asgi_body(scope, receive, path)
        except HttpProblem as exc:
            res = self.error(exc, path)
        else:
            if body is None:  # the client went away
                return
            self._asgi_unanswered += 1  # complete requests only: one being read waits for nothing else
            try:
                out = self.handle(Request(scope["method"], path, body, arrival, self._asgi_unanswered))
                res = out if isinstance(out, Response) else await out
            finally:
                self._asgi_unanswered -= 1
        headers = [(b"content-type", res.content_type), (b"content-length", str(len(res.body)).encode())]
        await send({"type": "http.response.start", "status": res.status, "headers": headers + list(res.headers)})
        await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else res.body})

    async def _asgi_body(self, scope, receive, path: str) -> bytes | None:
        limit = self._max_bytes
        for k, v in scope.get("headers", ()):
            if k == b"content-length":
                try:
                    n = int(v)
                except ValueError:
                    raise BadHttp("Content-Length: not an integer", path) from None
                if n > limit:
                    raise BodyTooLarge(f"Content-Length {n}", path)
                break
        chunks: list[bytes] = []
        size = 0
        while True:
            try:
                msg = await asyncio.wait_for(receive(), self._body_timeout_s)
            except TimeoutError:
                raise BodyTimeout(f"body not complete within {self._body_timeout_s:g} s", path) from None
            if msg["type"] == "http.disconnect":
                return None
            chunk = msg.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > limit:
                    raise BodyTooLarge(f"more than {limit} bytes received", path)
                chunks.append(chunk)
            if not msg.get("more_body", False):
                return b"".join(chunks)

    def close(self) -> None:
        """Stop the worker pool (running work finishes in the background); log the per-request warnings suppressed
        since their window began. Idempotent."""
        self.request_log.flush()
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
        topology.attach_metrics(TopologyMetrics(metrics.registry))
    unexported = [h for h in inputs if h.metrics is None]
    if unexported:
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


#: The probes' paths (the only ones :class:`HealthApp` serves) and their route in :class:`ExtenderApp`.
PROBE_ROUTES: dict[str, str] = {"/livez": "livez", "/healthz": "livez", "/readyz": "readyz"}
#: The probes' listener: connections open at most (the kubelet opens one per probe), largest body (probes send none).
HEALTH_MAX_CONNECTIONS = 64
HEALTH_MAX_REQUEST_BYTES = 64 * 1024


class HealthApp:
    """The :class:`extender.http.Handler` of the probes' listener (:class:`HealthListener`): ``GET``/``HEAD``
    ``/livez``, ``/healthz`` and ``/readyz`` answered by ``app`` (:class:`ExtenderApp`: the same replies and
    counters as on the serving port, :func:`readiness` for ``/readyz``), any other path 404 and another method 405
    (:func:`error_response`; a verb's path is not a verb here, nothing is scored). ``stalled_s``: how long the loop
    serving the verbs has not turned (:meth:`extender.http.HttpServer.stalled_s`; ``None``: not checked); over
    ``max_stall_s`` seconds both probes answer 503 with the reason. Runs on the listener's own thread: what it
    reads (the store's view, the refreshers' status) is published for other threads already."""

    def __init__(self, app: ExtenderApp, stalled_s: Callable[[], float] | None = None, max_stall_s: float = 10.0):
        if not max_stall_s > 0:
            raise ValueError(f"HealthApp.max_stall_s: must be > 0, got {max_stall_s!r}")
        self.app, self.stalled_s, self.max_stall_s = app, stalled_s, max_stall_s

    def handle(self, request: Request) -> Response:
        """The probe's reply (never raises, never a future)."""
        try:
            route = PROBE_ROUTES.get(request.path)
            if route is None:
                raise NotFound("not found: this port serves /livez, /healthz and /readyz only", request.path)
            if request.method not in ("GET", "HEAD"):
                raise MethodNotAllowed("method not allowed", request.path, "GET")
            stall = self.stalled_s() if self.stalled_s is not None else 0.0
            if stall > self.max_stall_s:
                what = "live" if route == "livez" else "ready"
                reason = (
                    f"not {what}: the event loop serving the verbs has not turned for {stall:.1f} s "
                    f"(> limits.maxLoopStallSeconds {self.max_stall_s:g})"
                )
                log.warning("%s: %s", request.path, reason)
                return self.app.reply(503, (reason + "\n").encode(), _TEXT)
            res = self.app.handle(request)
            assert isinstance(res, Response)  # the probes are answered at once
            return res
        except Exception as exc:  # noqa: BLE001 - mapped to its status in one place
            return self.error(exc, request.path)

    def error(self, exc: BaseException, path: str) -> Response:
        """:func:`error_response` of ``app`` (a path other than a probe's counts as no route, never as a verb)."""
        return error_response(self.app, exc, path if path in PROBE_ROUTES else "")


def health_limits(config: ExtenderConfiguration) -> HttpLimits:
    """The probes' listener's :class:`extender.http.HttpLimits`: the serving port's timeouts (``limits``), at most
    :data:`HEALTH_MAX_CONNECTIONS` connections and :data:`HEALTH_MAX_REQUEST_BYTES` of body."""
    lim = http_limits(config)
    return HttpLimits(
        header_timeout_s=lim.header_timeout_s,
        body_timeout_s=lim.body_timeout_s,
        idle_timeout_s=lim.idle_timeout_s,
        max_connections=HEALTH_MAX_CONNECTIONS,
        max_request_bytes=HEALTH_MAX_REQUEST_BYTES,
    )


class HealthListener:
    """The probes' own listener (``listen.healthPort``): :class:`HealthApp` of ``app`` served by an
    :class:`extender.http.HttpServer` (read timeouts and the connection bound of :func:`health_limits`, TLS when
    ``ssl`` is given) on ``sock`` (bound and listening, :func:`bind_socket`), from a daemon thread with its own
    uvloop event loop, so that a probe never waits behind the serving loop's sockets nor for its turn.
    ``stalled_s`` / ``max_stall_s``: see :class:`HealthApp`. No metrics of its own (its replies are counted in
    ``hrl_extender_http_responses_total`` as the serving port's probes are). :meth:`start` raises
    ``RuntimeError`` when it does not listen within ``timeout_s``; :meth:`stop` is idempotent. Attributes:
    ``port``, ``http`` (the server), ``app`` (the :class:`HealthApp`)."""

    def __init__(
        self,
        app: ExtenderApp,
        sock: socket.socket,
        *,
        limits: HttpLimits,
        stalled_s: Callable[[], float] | None = None,
        max_stall_s: float = 10.0,
        ssl: Any = None,
    ):
        self.app = HealthApp(app, stalled_s, max_stall_s)
        self.sock = sock
        self.port: int = sock.getsockname()[1]
        self.http = HttpServer(self.app, limits, None, ssl=ssl, grace_s=0.5)
        self._thread: threading.Thread | None = None

    def start(self, timeout_s: float = 10.0) -> HealthListener:
        """Serve in a daemon thread; return once it listens."""
        if self._thread is not None:
            raise RuntimeError("HealthListener already started")
        self._thread = threading.Thread(
            target=self.http.run, args=([self.sock],), name=f"hrl-extender-health:{self.port}", daemon=True
        )
        self._thread.start()
        if not self.http.started.wait(timeout_s) or not self._thread.is_alive():
            self.stop()
            raise RuntimeError(f"the probes' listener on port {self.port} did not start")
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop serving, wait for the thread (up to ``timeout_s`` seconds), close the socket. Idempotent."""
        self.http.request_stop()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        self.sock.close()


def uvicorn_config(app: ExtenderApp, **kwargs: Any):
    """A ``uvicorn.Config`` serving ``app`` as an ASGI application through uvicorn's public options only (httptools,
    uvloop, no access log, no lifespan, keep-alive 90 s as kube-scheduler's transport): the stack
    ``hrl-extender`` used before :mod:`extender.http`, kept for comparisons (``make bench-scheduler``). It has no
    header or body read timeout and cannot see the time a request waited in its socket (DESIGN.md section 5).
    ``kwargs`` (host, port, log_level, ...) are passed through. Needs uvicorn installed."""
    import uvicorn

    opts: dict[str, Any] = {
        "http": "httptools",
        "loop": "uvloop",
        "access_log": False,
        "lifespan": "off",
        "log_config": None,
        "timeout_keep_alive": 90,
    }
    opts.update(kwargs)
    return uvicorn.Config(app, **opts)


class ExtenderServer:
    """Run the extender (:class:`extender.http.HttpServer` on uvloop) in a background thread; a context manager.

    ``config`` (default: all defaults), ``store`` (default: a new empty :class:`SnapshotStore`), ``policy``
    (default: :func:`~extender.config.build_policy` of ``config``), ``registry`` (default: a new
    :class:`CollectorRegistry`), ``topology`` (a :class:`policy.topology.live.TopologyRefresher`, optional; see
    :func:`make_app`). ``host`` / ``port`` override ``config.listen`` (``port=0``: any free port); with
    ``listen.healthPort`` the probes get their own listener too (:class:`HealthListener`, on ``host``; ``0``: any
    free port). The sockets are bound in :meth:`start`, so :attr:`port`, :attr:`health_port` and :attr:`url` are
    real once started.

    Attributes: ``store``, ``policy``, ``registry``, ``metrics`` (:class:`ExtenderMetrics`), ``app``, ``http``
    (the :class:`~extender.http.HttpServer` once started), ``health`` (the :class:`HealthListener` once started,
    or ``None``), ``host``, ``port``, ``health_port`` (``None`` without one), ``base_url`` (``http://HOST:PORT``,
    ``https://`` when ``config.listen.tls`` is set), ``health_url`` (the same for ``health_port``), ``url``
    (``base_url + urlPrefix``, the value for kube-scheduler's ``urlPrefix``).

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
        self.health_port = self.config.listen.health_port
        self.startup_timeout_s = startup_timeout_s
        self._ssl = tls_context(self.config)
        self.http: HttpServer | None = None
        self.health: HealthListener | None = None
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None

    def _url(self, port: int | None) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self._ssl is not None else 'http'}://{host}:{port}"

    @property
    def base_url(self) -> str:
        return self._url(self.port)

    @property
    def health_url(self) -> str | None:
        return None if self.health_port is None else self._url(self.health_port)

    @property
    def url(self) -> str:
        return self.base_url + self.config.url_prefix

    def start(self) -> ExtenderServer:
        """Bind, start serving in a daemon thread (and the probes' listener in another, with ``health_port``), and
        wait until both listen."""
        if self._thread is not None:
            raise RuntimeError("ExtenderServer already started")
        sock = bind_socket(self.host, self.port)
        self._sock = sock
        self.port = sock.getsockname()[1]
        health_sock = None
        if self.health_port is not None:
            try:
                health_sock = bind_socket(self.host, self.health_port)
            except OSError:
                sock.close()
                self._sock = None
                raise
            self.health_port = health_sock.getsockname()[1]
        server = HttpServer(self.app, http_limits(self.config), self.metrics, ssl=self._ssl)
        self.http = server
        self._thread = threading.Thread(
            target=server.run, args=([sock],), name=f"hrl-extender:{self.port}", daemon=True
        )
        self._thread.start()
        if not server.started.wait(self.startup_timeout_s) or not self._thread.is_alive():
            if health_sock is not None:
                health_sock.close()
            self.stop()
            raise RuntimeError(f"extender server on {self.base_url} did not start")
        if health_sock is not None:
            self.health = HealthListener(
                self.app,
                health_sock,
                limits=health_limits(self.config),
                stalled_s=server.stalled_s,
                max_stall_s=self.config.limits.max_loop_stall_seconds,
                ssl=self._ssl,
            )
            try:
                self.health.start(self.startup_timeout_s)
            except RuntimeError:
                self.stop()
                raise
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop serving (requests in progress answered, for at most 2 s), wait for the threads (up to ``timeout_s``
        each), close the sockets and the worker pool. Idempotent."""
        if self.health is not None:
            self.health.stop(timeout_s)
        if self.http is not None:
            self.http.request_stop()
        if self._thread is not None:
            self._thread.join(timeout_s)
        if self._sock is not None:
            self._sock.close()
        self.app.close()
        self.http = None
        self.health = None
        self._thread = None
        self._sock = None

    def __enter__(self) -> ExtenderServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def bind_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (IPv6 when ``host`` contains ':') and listening (connections wait in
    the backlog until the server serves it), ``SO_REUSEADDR`` set, inheritable. Raises ``OSError`` (e.g.
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
