"""The extender's HTTP/1.1 server: an asyncio protocol over httptools' request parser (llhttp, the parser of
Node.js) on uvloop, written for a webhook that must answer every request within kube-scheduler's ``httpTimeout``
whatever other clients do. :class:`HttpServer` serves a :class:`Handler` (the extender's application,
:class:`extender.server.ExtenderApp`); :func:`tcp_wait_s` reads how long a request sat in the kernel.

Why not uvicorn (DESIGN.md section 5 gives the measurement): uvicorn's public interface has no header or body read
timeout (a client that declares a body and stalls is held until it goes away), answers 503 above
``limit_concurrency``, and hands a request to the application only once the event loop reaches it, so the time it
waited in its socket is invisible to the application. This module adds what the extender needs, and nothing else:

- **time from the kernel's read side**: a request's arrival is when its bytes reached the socket, not when the loop
  read them: ``tcpi_last_data_recv`` of the socket's ``TCP_INFO`` (Linux, millisecond resolution), subtracted from
  the time of the read. Under overload the wait is in the socket buffers of many connections; the application's
  deadline (``limits.requestDeadlineSeconds``) then counts it, so a request that waited too long is answered
  neutral at once instead of scored late. Where ``TCP_INFO`` is unavailable the read time is the arrival.
- **requests handled when read**: a complete request is handed to the handler inside the read callback, and a reply
  written at once, in one ``write`` (status line, headers and body together); no task per request. The request
  carries how long the loop has been handling requests since it last polled its sockets (``busy_s``): what every
  request not read yet has waited for it, which the application bounds (``limits.maxLoopBusySeconds``). A handler may
  return a future instead (the extender's worker pool for large bodies); the connection then stops reading until it
  resolves (one request at a time per connection; at most :data:`MAX_PIPELINED` pipelined requests wait behind it,
  more close the connection).
- **timeouts**, checked by one sweep every :attr:`HttpLimits.sweep_s`: a request's headers must be complete within
  ``header_timeout_s`` (of the connection's accept for its first request, of the request's first byte after that)
  and its body within ``body_timeout_s`` of its headers, else it is answered 408 and the connection closed; a
  connection without a request in progress is closed after ``idle_timeout_s`` (keep-alive); a client that reads no
  replies (writes paused) for ``body_timeout_s`` is cut. A request being read does not count as waiting to be
  scored, so held connections cannot starve scoring.
- **accepting**: the server accepts connections itself, up to :data:`MAX_ACCEPT_PER_TURN` each time a listening
  socket is readable (each then set up by the loop's ``connect_accepted_socket``). uvloop's own server accepts one
  connection per turn of the loop (libuv/libuv#3696); under overload a turn takes tens of milliseconds, so clients
  that reconnect after their timeouts (kube-scheduler's and Go's HTTP clients close a connection whose request timed
  out) outpaced it: the accept queue filled (2,048 connections), their requests waited there for seconds, timed
  out in turn and reconnected again (measured: ``make fuzz`` at 256 connections, issue 26).
- **bounds**: at most :data:`MAX_HEADER_BYTES` of headers (431), a body of at most ``max_request_bytes`` (413 before
  it is read, from its ``Content-Length``, or as soon as a chunked body grows past it); at most
  ``max_connections_per_client`` open connections per client address (0 = no bound): a new one beyond is closed at
  once; at most ``max_connections`` open connections: a new connection beyond it displaces one that has no request
  in progress (handled or waiting), or is closed at once when every connection has one. The one displaced is
  chosen so that kube-scheduler's keep-alive connection, idle between scheduling cycles and so often the least
  recently active, is the last to go: from the client address holding the most connections (kube-scheduler holds
  one or two per replica, a flood many), then the one that has answered the fewest requests, then the least
  recently active (:meth:`HttpServer.displaceable`).

Every problem becomes a reply through the handler's :meth:`Handler.error` (the one place where errors become HTTP
statuses, :func:`extender.server.error_response`); every connection closed is counted by reason
(``hrl_extender_http_connections_closed_total{reason}``, :data:`CLOSE_REASONS`).

HTTP details: HTTP/1.1 keep-alive (HTTP/1.0 only with ``Connection: keep-alive``), pipelining, chunked request
bodies, ``Expect: 100-continue`` (answered ``100 Continue`` unless the body is refused), ``HEAD``; ``Upgrade`` is
not supported (the request is answered as HTTP/1.1 and the connection closed; one carrying a body gets 400); a
request the parser refuses gets 400 and the connection is closed. TLS is the event loop's (``ssl=``), with the
TLS handshake bounded by ``header_timeout_s``.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import socket
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import formatdate
from http import HTTPStatus
from typing import Any, Protocol

import httptools

__all__ = [
    "MAX_HEADER_BYTES",
    "MAX_PIPELINED",
    "MAX_PER_TURN",
    "MAX_ACCEPT_PER_TURN",
    "DEFAULT_MAX_CONNECTIONS_PER_CLIENT",
    "CLOSE_REASONS",
    "HttpLimits",
    "Request",
    "Response",
    "HttpProblem",
    "BadHttp",
    "HeadersTooLarge",
    "HeaderTimeout",
    "BodyTimeout",
    "BodyTooLarge",
    "Handler",
    "ConnectionMetrics",
    "HttpServer",
    "tcp_wait_s",
]

log = logging.getLogger(__name__)

#: Request line and headers of one request, bytes at most (Go's net/http server allows 1 MiB, nginx 8-32 KiB);
#: kube-scheduler sends about 200.
MAX_HEADER_BYTES = 64 * 1024
#: Complete requests that may wait behind a request in progress on the same connection (pipelining); more close it.
MAX_PIPELINED = 16
#: Requests of one connection handled in one turn of the event loop (one read): once reached, the rest of the read
#: is parsed in a later turn, so that a client pipelining many requests cannot hold the loop (a slice of
#: :data:`FEED_BYTES` parsed meanwhile is handled whole).
MAX_PER_TURN = 16
#: Bytes handed to the parser at a time (a read is parsed in slices, so that parsing stops once requests wait).
FEED_BYTES = 8 * 1024
#: Connections accepted from a listening socket in one turn of the event loop, at most (the rest in the next turn:
#: the socket stays readable). The server accepts them itself: libuv (uvloop's server) accepts one per turn since
#: libuv/libuv#3696, and under load a turn takes tens of milliseconds, so clients reconnecting after their timeouts
#: (kube-scheduler closes a connection whose request timed out) outpaced it and waited seconds in the accept queue.
MAX_ACCEPT_PER_TURN = 256
#: Seconds before accepting again after ``accept`` failed for want of file descriptors (as asyncio's servers).
ACCEPT_RETRY_S = 1.0
#: Open connections at most from one client address, by default (``limits.maxConnectionsPerClient``). kube-scheduler
#: calls an extender through one Go ``http.Transport`` per extender (kubernetes pkg/scheduler/framework/extender.go,
#: ``makeTransport``): one request at a time per scheduling cycle, at most 2 idle keep-alive connections per host
#: (Go's ``DefaultMaxIdleConnsPerHost``), and a connection whose request timed out is closed, not kept; so a replica
#: holds one to three. 64 leaves room for every scheduler replica and other clients sharing one address (the
#: cluster's own kube-scheduler on the host network in drop-in mode shares its node's address; a SNAT gateway), while
#: one address can hold at most a sixteenth of the default ``max_connections`` (1024): filling the server takes 16.
DEFAULT_MAX_CONNECTIONS_PER_CLIENT = 64

#: Why connections were closed (the ``reason`` label of ``hrl_extender_http_connections_closed_total``).
CLOSE_REASONS: tuple[str, ...] = (
    "client",  # the client closed it (or it broke)
    "keep_alive_off",  # the request asked for it (Connection: close, HTTP/1.0) or the server is stopping
    "idle_timeout",  # no request for idle_timeout_s (keep-alive)
    "header_timeout",  # headers not complete within header_timeout_s (408 when a request had begun)
    "body_timeout",  # body not complete within body_timeout_s of its headers (408)
    "write_timeout",  # the client read no reply for body_timeout_s
    "bad_request",  # the parser refused the request, or an Upgrade (400 where a reply is due)
    "too_large",  # headers over MAX_HEADER_BYTES (431) or a body over max_request_bytes (413)
    "pipeline_limit",  # more than MAX_PIPELINED requests waiting behind one in progress
    "connection_limit",  # refused or displaced at max_connections
    "client_limit",  # refused: its client address holds max_connections_per_client already
    "shutdown",  # the server stopped
)

_IDLE, _HEADERS, _BODY = 0, 1, 2

_TCP_INFO = getattr(socket, "TCP_INFO", None) if sys.platform.startswith("linux") else None
_TCPI_LAST_DATA_RECV = struct.Struct("=I")  # struct tcp_info: __u32 tcpi_last_data_recv at byte offset 52 (ms)
_TCPI_OFFSET = 52
_TCPI_SIZE = 104


def tcp_wait_s(sock: Any) -> float:
    """Seconds since the last data segment reached ``sock`` (a connected TCP socket, or the socket object an
    asyncio transport gives for ``get_extra_info("socket")``): ``tcpi_last_data_recv`` of ``TCP_INFO`` (Linux,
    ``include/uapi/linux/tcp.h``; the kernel's clock tick, 1-4 ms, is its resolution). Read right after the data
    was read, it is how long the data waited in the socket, the accept queue included. ``0.0`` where ``TCP_INFO``
    is not available (not Linux, not TCP) or fails."""
    if _TCP_INFO is None or sock is None:
        return 0.0
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, _TCPI_SIZE)
    except (OSError, AttributeError, TypeError):
        return 0.0
    if len(info) < _TCPI_OFFSET + 4:
        return 0.0
    return _TCPI_LAST_DATA_RECV.unpack_from(info, _TCPI_OFFSET)[0] / 1000.0


@dataclass(frozen=True)
class HttpLimits:
    """What bounds each connection and the server (``limits`` of :class:`extender.config.ExtenderConfiguration`):
    seconds for a request's headers (``header_timeout_s``), for its body after the headers (``body_timeout_s``),
    between requests on a keep-alive connection (``idle_timeout_s``); open connections at most
    (``max_connections``), and per client address (``max_connections_per_client``, 0 = no bound; the default is
    :data:`DEFAULT_MAX_CONNECTIONS_PER_CLIENT`); the largest body (``max_request_bytes``). Every other value > 0."""

    header_timeout_s: float = 2.0
    body_timeout_s: float = 2.0
    idle_timeout_s: float = 120.0
    max_connections: int = 1024
    max_request_bytes: int = 16 * 1024 * 1024
    max_connections_per_client: int = DEFAULT_MAX_CONNECTIONS_PER_CLIENT

    def __post_init__(self) -> None:
        for name in ("header_timeout_s", "body_timeout_s", "idle_timeout_s", "max_connections", "max_request_bytes"):
            if not getattr(self, name) > 0:
                raise ValueError(f"HttpLimits.{name}: must be > 0, got {getattr(self, name)!r}")
        if self.max_connections_per_client < 0:
            raise ValueError(
                f"HttpLimits.max_connections_per_client: must be >= 0, got {self.max_connections_per_client}"
            )

    @property
    def sweep_s(self) -> float:
        """Seconds between two timeout sweeps: a tenth of the shortest timeout, within 0.02..0.5 s."""
        return min(0.5, max(0.02, min(self.header_timeout_s, self.body_timeout_s, self.idle_timeout_s) / 10))


@dataclass(slots=True)
class Request:
    """One complete request: ``method`` (``"GET"``, ...), ``path`` (the request target without its query),
    ``body``; ``arrival_s``: :func:`time.perf_counter` when its first bytes reached the socket (kernel side,
    :func:`tcp_wait_s`); ``unanswered``: complete requests of the whole server not answered yet, this one included
    (those waiting for a worker or behind another request of their connection); ``busy_s``: how long the event loop
    has been handling requests since it last read its sockets (what the requests not read yet have waited for it);
    ``keep_alive``: the connection stays open after the reply (HTTP/1.1 without ``Connection: close``)."""

    method: str
    path: str
    body: bytes
    arrival_s: float
    unanswered: int = 1
    busy_s: float = 0.0
    keep_alive: bool = True


@dataclass(slots=True)
class Response:
    """A reply: ``status``, ``body``, ``content_type``, extra ``headers`` (``(name, value)`` bytes pairs);
    ``close``: close the connection after it."""

    status: int
    body: bytes
    content_type: bytes = b"text/plain; charset=utf-8"
    headers: tuple[tuple[bytes, bytes], ...] = ()
    close: bool = False


class HttpProblem(Exception):
    """A request the transport itself cannot hand on: ``path`` (``""`` when not read yet) and a one-line ``reason``.
    Mapped to its status by the handler's :meth:`Handler.error`."""

    def __init__(self, reason: str, path: str = ""):
        super().__init__(reason)
        self.reason, self.path = reason, path


class BadHttp(HttpProblem):
    """Not HTTP/1.1 as the parser reads it (or an Upgrade carrying a body)."""


class HeadersTooLarge(HttpProblem):
    """Request line and headers over :data:`MAX_HEADER_BYTES`."""


class HeaderTimeout(HttpProblem):
    """Headers not complete within ``header_timeout_s``."""


class BodyTimeout(HttpProblem):
    """Body not complete within ``body_timeout_s`` of the headers."""


class BodyTooLarge(HttpProblem):
    """A body over ``max_request_bytes`` (declared, or received so far)."""


class Handler(Protocol):
    """What :class:`HttpServer` serves. ``handle`` answers a complete request now (a :class:`Response`) or later
    (an ``asyncio.Future`` resolving to one, on the server's loop); it should not raise (what it raises is
    answered through ``error``). ``error`` maps a problem (:class:`HttpProblem`, or whatever ``handle`` raised) to
    its reply; it must not raise. Both run on the event loop."""

    def handle(self, request: Request) -> Response | asyncio.Future: ...

    def error(self, exc: BaseException, path: str) -> Response: ...


class ConnectionMetrics(Protocol):
    """The counters and gauges the server keeps (prometheus-client objects; :class:`extender.metrics.ExtenderMetrics`
    has them): connections accepted, closed by reason, open now; requests being read now; complete requests not
    answered yet."""

    http_connections_total: Any
    http_connections_closed_total: Any
    http_connections_open: Any
    http_requests_reading: Any
    requests_in_flight: Any


_STATUS_LINES: dict[int, bytes] = {
    s.value: f"HTTP/1.1 {s.value} {s.phrase}\r\n".encode("ascii") for s in HTTPStatus if s.value >= 200
}
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


def _status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    return line if line is not None else f"HTTP/1.1 {status} Status\r\n".encode("ascii")


class _Connection(asyncio.Protocol):
    """One client connection (see the module docstring). State: ``_IDLE`` (waiting for a request's first byte),
    ``_HEADERS``, ``_BODY``; ``busy`` while the handler's future for a request is pending."""

    def __init__(self, server: HttpServer):
        self.server = server
        self.handler = server.handler
        self.limits = server.limits
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.sock: Any = None
        now = time.perf_counter()
        self.accepted_at = now
        self.since = now  # when the current state began (idle since; first byte; headers complete)
        self.active_at = now  # last request begun or answered (the order of displacement)
        self.served = 0  # requests answered on this connection (the order of displacement)
        self.state = _IDLE
        self.first = True  # no request begun yet on this connection
        self.busy = False
        self.pending: deque[Request] = deque()
        self.client = ""  # the peer's address (the per-client bound)
        self.counted = False  # counted in the server's per-client tally
        self.closed = False
        self.close_reason = "client"
        self.write_paused_at: float | None = None
        self.read_at = 0.0
        self.read_wait: float | None = None
        self.turn = 0  # requests handled in this turn (this read, or this drain)
        self.unparsed = b""  # read and not parsed yet (requests were waiting)
        self.drain_scheduled = False
        self._reset()

    def _reset(self) -> None:
        self.url = b""
        self.method = ""
        self.content_length = -1
        self.expect_continue = False
        self.upgrade = False
        self.body: list[bytes] = []
        self.body_bytes = 0
        self.header_bytes = 0  # bytes read while the headers were incomplete (bounds headers that never end)
        self.header_size = 0  # request target, header names and values (bounds headers that do end)
        self.arrival = 0.0

    # ---- asyncio.Protocol ----------------------------------------------------------------------------------
    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.sock = transport.get_extra_info("socket")
        peer = transport.get_extra_info("peername")
        self.client = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        self.server.attach(self)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            if self.state != _IDLE:
                self.server.reading(-1)
                self.state = _IDLE
            self.closed = True
            self.server.detach(self, self.close_reason)
        self.server.closing.pop(self, None)
        self.transport = None
        self.server.unanswered -= len(self.pending)  # never to be answered
        self.pending.clear()

    def pause_writing(self) -> None:
        self.write_paused_at = time.perf_counter()
        if self.transport is not None:
            self.transport.pause_reading()  # no more requests from a client that reads no replies

    def resume_writing(self) -> None:
        self.write_paused_at = None
        self._schedule_drain()

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self.read_at = time.perf_counter()
        self.read_wait = None
        self.turn = 0
        self._feed(data)

    def _feed(self, data: bytes) -> None:
        """Parse ``data`` a slice of :data:`FEED_BYTES` at a time; once complete requests wait (the connection has
        had its turn, a reply is pending or the client reads none), keep the rest and read no more for now."""
        pos, n = 0, len(data)
        while pos < n:
            piece = data if n <= FEED_BYTES else data[pos : pos + FEED_BYTES]
            pos += len(piece)
            if not self._parse(piece):
                return
            if self.state == _HEADERS:
                self.header_bytes += len(piece)  # read while the headers were incomplete (an upper bound)
                if self.header_bytes > MAX_HEADER_BYTES:
                    self._reply_problem(
                        HeadersTooLarge(f"request line and headers over {MAX_HEADER_BYTES} bytes", self._path()),
                        "too_large",
                    )
                    return
            if self.pending or (self.turn >= MAX_PER_TURN and pos < n):
                self.unparsed = data[pos:]
                if self.transport is not None:
                    self.transport.pause_reading()
                self._schedule_drain()
                return

    def _parse(self, piece: bytes) -> bool:
        """Feed the parser; a request it refuses is answered 400 and the connection closed. False once closed."""
        try:
            self.parser.feed_data(piece)
        except httptools.HttpParserUpgrade:
            self._finish_and_close("bad_request")
        except httptools.HttpParserError as exc:
            if self.closed:
                return False
            cause = exc.__context__ if isinstance(exc, httptools.HttpParserCallbackError) else None
            if cause is not None:  # our own code raised inside a parser callback: a bug, answered and logged
                log.error("http: internal failure %s: %s", type(cause).__name__, cause, exc_info=cause)
                self._reply_problem(cause, "bad_request")
                return False
            detail = " ".join(str(exc).split()) or type(exc).__name__
            self._reply_problem(BadHttp(f"invalid HTTP request: {detail}", self._path()), "bad_request")
        return not self.closed

    def _blocked(self) -> bool:
        """Requests must wait: one is in progress, or the client reads no replies."""
        return self.busy or self.write_paused_at is not None

    def _schedule_drain(self) -> None:
        if not self.drain_scheduled and not self.busy and self.write_paused_at is None and not self.closed:
            self.drain_scheduled = True
            loop = self.server.loop
            assert loop is not None  # connections exist only while the server's loop runs
            loop.call_soon(self._drain)

    def _drain(self) -> None:
        """A later turn of the event loop: answer what waits, parse what was left, then read again."""
        self.drain_scheduled = False
        if self.closed or self.busy or self.write_paused_at is not None:
            return
        self.turn = 0
        while self.pending and not self._blocked():
            self.turn += 1
            self._run(self.pending.popleft())
        if self.closed or self.busy or self.write_paused_at is not None:
            return
        if self.unparsed:
            data, self.unparsed = self.unparsed, b""
            self._feed(data)  # parsed as read then: the same arrival
            if self.closed or self.pending or self.unparsed:  # more waits: read nothing new before it
                return
        if self.transport is not None:
            self.transport.resume_reading()

    # ---- httptools callbacks -------------------------------------------------------------------------------
    def on_message_begin(self) -> None:  # the request's first byte
        self.server.reading(+1)
        self.state = _HEADERS
        self.since = self.active_at = self.read_at
        if self.read_wait is None:
            self.read_wait = tcp_wait_s(self.sock)
        self.arrival = self.read_at - self.read_wait

    def on_url(self, url: bytes) -> None:
        self.url += url
        self.header_size += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.header_size += len(name) + len(value) + 4
        n = name.lower()
        if n == b"content-length":
            self.content_length = int(value)  # digits only: the parser refuses anything else
        elif n == b"expect" and value.strip().lower() == b"100-continue":
            self.expect_continue = True

    def on_headers_complete(self) -> None:
        if self.closed:
            return
        self.state = _BODY
        self.since = time.perf_counter()
        self.method = self.parser.get_method().decode("ascii", "replace")
        self.upgrade = self.parser.should_upgrade()
        limit = self.limits.max_request_bytes
        if self.header_size > MAX_HEADER_BYTES:
            self._reply_problem(
                HeadersTooLarge(f"request line and headers over {MAX_HEADER_BYTES} bytes", self._path()), "too_large"
            )
        elif self.content_length > limit:
            self._reply_problem(BodyTooLarge(f"Content-Length {self.content_length}", self._path()), "too_large")
        elif self.expect_continue and self.transport is not None:
            self.transport.write(_CONTINUE)

    def on_body(self, body: bytes) -> None:
        if self.closed:
            return
        self.body_bytes += len(body)
        if self.body_bytes > self.limits.max_request_bytes:
            limit = self.limits.max_request_bytes
            self._reply_problem(BodyTooLarge(f"more than {limit} bytes received", self._path()), "too_large")
            return
        self.body.append(body)

    def on_message_complete(self) -> None:
        if self.closed:
            return
        self.server.reading(-1)
        body = self.body[0] if len(self.body) == 1 else b"".join(self.body)
        if self.upgrade and (body or self.content_length > 0):
            self._reset()
            self.state = _IDLE
            self._reply_problem(BadHttp("Upgrade is not supported; send the request without it", ""), "bad_request")
            return
        keep_alive = self.parser.should_keep_alive() and not self.upgrade
        req = Request(self.method, self._path(), body, self.arrival, keep_alive=keep_alive)
        self._reset()
        self.state = _IDLE
        self.since = self.active_at = time.perf_counter()
        self.first = False
        self.server.unanswered += 1
        if self.pending or self._blocked():
            if len(self.pending) >= MAX_PIPELINED:
                self.server.unanswered -= 1
                self._close("pipeline_limit")
                return
            self.pending.append(req)
            return
        self.turn += 1
        self._run(req)

    # ---- handling and replying ------------------------------------------------------------------------------
    def _path(self) -> str:
        return self.url.split(b"?", 1)[0].decode("latin-1")

    def _run(self, req: Request) -> None:
        req.unanswered = self.server.unanswered
        req.busy_s = self.server.busy_s()
        try:
            res = self.handler.handle(req)
        except Exception as exc:  # noqa: BLE001 - the handler's error() decides (fail open for the verbs)
            res = self.handler.error(exc, req.path)
        if isinstance(res, Response):
            self._write(req, res)
            return
        self.busy = True
        if self.transport is not None:
            self.transport.pause_reading()
        res.add_done_callback(functools.partial(self._resolved, req))

    def _resolved(self, req: Request, fut: asyncio.Future) -> None:
        self.busy = False
        try:
            res = fut.result()
        except BaseException as exc:  # noqa: BLE001 - a cancelled or failed future is answered too
            res = self.handler.error(exc, req.path)
        self._write(req, res)
        self._schedule_drain()

    def _write(self, req: Request | None, res: Response) -> None:
        """Write ``res`` (to ``req``, or to a request refused before it was complete) in one ``write``."""
        if req is not None:
            self.server.unanswered -= 1
            self.served += 1
        self.active_at = time.perf_counter()
        t = self.transport
        if t is None or self.closed:
            return
        keep = req is not None and req.keep_alive and not res.close and not self.server.stopping
        parts = [
            _status_line(res.status),
            b"content-type: ",
            res.content_type,
            b"\r\ncontent-length: ",
            str(len(res.body)).encode("ascii"),
            b"\r\n",
            self.server.date_header,
        ]
        for name, value in res.headers:
            parts += [name, b": ", value, b"\r\n"]
        if not keep:
            parts.append(b"connection: close\r\n")
        parts.append(b"\r\n")
        if req is None or req.method != "HEAD":
            parts.append(res.body)
        t.write(b"".join(parts))
        if not keep and req is not None:
            self._close("shutdown" if self.server.stopping else "keep_alive_off")

    def _reply_problem(self, exc: BaseException, reason: str) -> None:
        """Answer ``exc`` through the handler (its status) and close the connection."""
        if self.state != _IDLE:
            self.server.reading(-1)
            self.state = _IDLE
        path = getattr(exc, "path", "") or ""
        try:
            res = self.handler.error(exc, path)
        except Exception:
            log.exception("http: the handler's error() raised")
            self._close(reason)
            return
        self._write(None, res)
        self._close(reason)

    def _finish_and_close(self, reason: str) -> None:
        """After an Upgrade request (answered already when its message was complete; the parser reads no further):
        close now, or once what is in progress is answered (its request does not keep the connection alive)."""
        if not self.busy and not self.pending:
            self._close(reason)
        else:
            for req in self.pending:
                req.keep_alive = False

    def _close(self, reason: str) -> None:
        if self.closed:
            return
        if self.state != _IDLE:
            self.server.reading(-1)
            self.state = _IDLE
        self.closed = True
        self.close_reason = reason
        self.server.detach(self, reason)
        if self.transport is not None:
            self.transport.close()  # writes what is buffered first

    def abort(self, reason: str) -> None:
        if not self.closed:
            self._close(reason)
        if self.transport is not None:
            self.transport.abort()

    # ---- timeouts ---------------------------------------------------------------------------------------------
    def check(self, now: float) -> None:
        """Close the connection when one of its timeouts has passed (called by the server's sweep)."""
        if self.closed:
            return
        lim = self.limits
        if self.write_paused_at is not None and now - self.write_paused_at > lim.body_timeout_s:
            self.abort("write_timeout")
            return
        if self.busy or self.pending:
            return
        if self.state == _IDLE:
            if self.first:
                if now - self.accepted_at > lim.header_timeout_s:
                    self._close("header_timeout")
            elif now - self.since > lim.idle_timeout_s:
                self._close("idle_timeout")
        elif self.state == _HEADERS:
            start = self.accepted_at if self.first else self.since
            if now - start > lim.header_timeout_s:
                self._reply_problem(
                    HeaderTimeout(f"headers not complete within {lim.header_timeout_s:g} s", self._path()),
                    "header_timeout",
                )
        elif now - self.since > lim.body_timeout_s:
            self._reply_problem(
                BodyTimeout(
                    f"body not complete within {lim.body_timeout_s:g} s of the headers "
                    f"({self.body_bytes} of {self.content_length if self.content_length >= 0 else '?'} bytes)",
                    self._path(),
                ),
                "body_timeout",
            )


def _accepted(task: asyncio.Task) -> None:
    """An accepted connection is set up (or its TLS handshake failed, or the server stopped first): nothing to do but
    retrieve the outcome."""
    if not task.cancelled() and task.exception() is not None:
        log.debug("http: an accepted connection failed before it was served: %s", task.exception())


@dataclass
class _Stats:
    reading: int = 0  # requests begun and not complete (headers or body being read)


class HttpServer:
    """Serve ``handler`` over HTTP/1.1 on listening sockets (see the module docstring).

    ``limits``: :class:`HttpLimits`; ``metrics``: :class:`ConnectionMetrics` (or ``None``); ``ssl``: an
    ``ssl.SSLContext`` for HTTPS (or ``None``). Run :meth:`serve` on an event loop (:meth:`run` makes a uvloop loop
    and blocks); :meth:`request_stop` (any thread) makes it stop: no new connections, idle ones closed, requests in
    progress answered (for at most ``grace_s``), then every connection closed. Attributes: ``unanswered``
    (complete requests not answered yet), ``connections`` (the open ones), ``started``
    (a :class:`threading.Event`, set once listening), ``stopping``; :meth:`stalled_s` says, from any thread, how
    long the loop has not turned (the probes' listener, :class:`extender.server.HealthListener`, reads it).
    """

    def __init__(
        self,
        handler: Handler,
        limits: HttpLimits | None = None,
        metrics: ConnectionMetrics | None = None,
        ssl: Any = None,
        grace_s: float = 2.0,
    ):
        self.handler = handler
        self.limits = limits or HttpLimits()
        self.metrics = metrics
        self.ssl = ssl
        self.grace_s = grace_s
        self.connections: dict[_Connection, None] = {}
        self.closing: dict[_Connection, None] = {}
        self.per_client: dict[str, int] = {}  # open connections by client address
        self.unanswered = 0
        self.stopping = False
        self.started = threading.Event()
        self.date_header = b""
        self._date_s = -1
        self._stats = _Stats()
        self._busy_since: float | None = None
        self._turned_at: float | None = None  # perf_counter of the loop's last observed turn (stalled_s)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._listening: list[socket.socket] = []
        self._refresh_date()
        if metrics is not None:
            metrics.http_connections_open.set_function(lambda: float(len(self.connections)))
            metrics.http_requests_reading.set_function(lambda: float(self._stats.reading))
            metrics.requests_in_flight.set_function(lambda: float(self.unanswered))

    # ---- bookkeeping used by the connections ------------------------------------------------------------------
    def busy_s(self) -> float:
        """Seconds since the event loop began handling requests in its current iteration, i.e. since it last polled
        its sockets: the first call of an iteration starts the clock, a callback scheduled with ``call_soon`` (run
        once the iteration's read callbacks are done, before the next poll) stops it."""
        now = time.perf_counter()
        if self._busy_since is None:
            self._busy_since = now
            assert self.loop is not None
            self.loop.call_soon(self._polled)
            return 0.0
        return now - self._busy_since

    def _polled(self) -> None:
        self._busy_since = None
        self._turned_at = time.perf_counter()

    def stalled_s(self) -> float:
        """Seconds since the event loop last showed it turns: its last timeout sweep (every :attr:`HttpLimits.sweep_s`
        while it is free) or the end of its last iteration that handled requests. Large only while a callback holds
        the loop (a handler stuck on it); under overload an iteration lasts ``limits.maxLoopBusySeconds`` plus the
        cost of shedding. ``0.0`` before :meth:`serve` began. Safe to call from any thread (it reads one float)."""
        at = self._turned_at
        return 0.0 if at is None else max(0.0, time.perf_counter() - at)

    def reading(self, delta: int) -> None:
        self._stats.reading += delta

    def attach(self, conn: _Connection) -> None:
        m = self.metrics
        if m is not None:
            m.http_connections_total.inc()
        if self.stopping:
            conn._close("shutdown")
            return
        per_client = self.limits.max_connections_per_client
        if per_client and self.per_client.get(conn.client, 0) >= per_client:
            conn._close("client_limit")
            return
        if len(self.connections) >= self.limits.max_connections:
            victim = self.displaceable()
            if victim is None:
                conn._close("connection_limit")
                return
            victim._close("connection_limit")
        self.connections[conn] = None
        self.per_client[conn.client] = self.per_client.get(conn.client, 0) + 1
        conn.counted = True

    def displaceable(self) -> _Connection | None:
        """The connection a new one displaces at ``max_connections``, or ``None`` when every open connection has a
        request in progress (being handled, or waiting behind one): of the others, the one from the client address
        holding the most connections, then the one that has answered the fewest requests, then the least recently
        active. kube-scheduler's keep-alive connection (one or two per address, many requests answered) is thus the
        last to go, although it is often the least recently active between scheduling cycles."""
        per = self.per_client
        return min(
            (c for c in self.connections if not c.busy and not c.pending),
            key=lambda c: (-per.get(c.client, 0), c.served, c.active_at),
            default=None,
        )

    def detach(self, conn: _Connection, reason: str) -> None:
        self.connections.pop(conn, None)
        if conn.counted:
            conn.counted = False
            left = self.per_client.get(conn.client, 1) - 1
            if left > 0:
                self.per_client[conn.client] = left
            else:
                self.per_client.pop(conn.client, None)
        if conn.transport is not None:
            self.closing[conn] = None  # until its transport has flushed and gone
        if self.metrics is not None:
            self.metrics.http_connections_closed_total.labels(reason=reason).inc()

    def _refresh_date(self) -> None:
        now = int(time.time())
        if now != self._date_s:
            self._date_s = now
            self.date_header = b"date: " + formatdate(now, usegmt=True).encode("ascii") + b"\r\n"

    def _sweep(self) -> None:
        if self.loop is None or self.loop.is_closed():
            return
        self._refresh_date()
        now = time.perf_counter()
        self._turned_at = now
        for conn in list(self.connections):
            conn.check(now)
        if not self.stopping:
            self.loop.call_later(self.limits.sweep_s, self._sweep)

    # ---- running ----------------------------------------------------------------------------------------------
    async def serve(self, sockets: list[socket.socket]) -> None:
        """Listen on ``sockets`` (bound and listening) until :meth:`request_stop`, then stop gracefully."""
        loop = asyncio.get_running_loop()
        self.loop = loop
        self._stop = asyncio.Event()
        for sock in sockets:
            sock.setblocking(False)
            self._listening.append(sock)
            loop.add_reader(sock.fileno(), self._accept, sock)
        loop.call_later(self.limits.sweep_s, self._sweep)
        self._turned_at = time.perf_counter()
        self.started.set()
        try:
            await self._stop.wait()
        finally:
            await self._shutdown()

    def _accept(self, sock: socket.socket) -> None:
        """The listening ``sock`` is readable: accept up to :data:`MAX_ACCEPT_PER_TURN` connections, each served by
        a :class:`_Connection` (through the loop's ``connect_accepted_socket``, TLS included)."""
        loop = self.loop
        assert loop is not None
        kw: dict[str, Any] = {}
        if self.ssl is not None:
            kw = {"ssl": self.ssl, "ssl_handshake_timeout": self.limits.header_timeout_s}
        for _ in range(MAX_ACCEPT_PER_TURN):
            if self.stopping:
                return
            try:
                conn, _addr = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.ECONNABORTED, errno.EPROTO, errno.EPERM):
                    continue  # that connection is gone: the next one
                log.error("http: cannot accept connections: %s (again in %g s)", exc, ACCEPT_RETRY_S)
                loop.remove_reader(sock.fileno())  # EMFILE, ENOBUFS, ...: the socket stays readable; retry later
                loop.call_later(ACCEPT_RETRY_S, self._listen_again, sock)
                return
            try:
                task = loop.create_task(loop.connect_accepted_socket(lambda: _Connection(self), conn, **kw))
            except Exception as exc:  # noqa: BLE001 - that connection only
                log.error("http: cannot serve an accepted connection: %s", exc)
                conn.close()
                continue
            task.add_done_callback(_accepted)

    def _listen_again(self, sock: socket.socket) -> None:
        if not self.stopping and sock.fileno() != -1:
            assert self.loop is not None
            self.loop.add_reader(sock.fileno(), self._accept, sock)

    def request_stop(self) -> None:
        """Stop serving (thread-safe, idempotent)."""
        loop, stop = self.loop, self._stop
        if loop is None or stop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(stop.set)
        except RuntimeError:  # the loop closed meanwhile
            pass

    async def _shutdown(self) -> None:
        self.stopping = True
        for sock in self._listening:  # no new connections (those waiting to be accepted are reset)
            if sock.fileno() != -1:
                assert self.loop is not None
                self.loop.remove_reader(sock.fileno())
                sock.close()
        for conn in list(self.connections):
            if not conn.busy and not conn.pending and conn.state == _IDLE:
                conn._close("shutdown")
        deadline = time.monotonic() + self.grace_s
        while any(c.busy or c.pending for c in self.connections) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for conn in [*self.connections, *self.closing]:
            conn.abort("shutdown")
        self._listening.clear()

    def run(self, sockets: list[socket.socket], on_loop: Callable[[asyncio.AbstractEventLoop], None] | None = None):
        """Serve on a new uvloop event loop in this thread until :meth:`request_stop`; ``on_loop(loop)`` is called
        once the loop exists (e.g. to install signal handlers)."""
        import uvloop

        async def main() -> None:
            if on_loop is not None:
                on_loop(asyncio.get_running_loop())
            await self.serve(sockets)

        uvloop.run(main())
