"""Per-request warnings without a flood: :class:`RateLimitedLog`.

A client can send malformed or oversized requests as fast as the socket takes them; one WARNING each lets it fill
the logs (an audit counted 1,429 lines). The metrics count every request
(``hrl_extender_requests_invalid_total``, ``_too_large_total``); the log says the first :data:`LOG_BURST` of a
kind in each :data:`LOG_INTERVAL_S`, and the first record of a kind after its window rolls over (or
:meth:`RateLimitedLog.flush` at shutdown) says how many were left out: ``KIND: N more like it suppressed (at most B
per S s)``, with the structured fields ``kind`` and ``suppressed``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__ = ["LOG_BURST", "LOG_INTERVAL_S", "RateLimitedLog"]

#: Records of one kind logged per window at most.
LOG_BURST = 10
#: The window, in seconds.
LOG_INTERVAL_S = 60.0


class RateLimitedLog:
    """At most ``burst`` records of each ``kind`` per ``interval_s`` on ``logger``; the rest are counted and the
    count logged (at the same level) when that kind's window rolls over: at its next record, or at :meth:`flush`.
    Thread-safe; ``clock`` is monotonic seconds (a test passes its own)."""

    def __init__(
        self,
        logger: logging.Logger,
        burst: int = LOG_BURST,
        interval_s: float = LOG_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        if burst < 1 or not interval_s > 0:
            raise ValueError(f"RateLimitedLog: burst >= 1 and interval_s > 0 (got {burst!r}, {interval_s!r})")
        self.logger, self.burst, self.interval_s, self.clock = logger, burst, interval_s, clock
        self._lock = threading.Lock()
        # kind -> [window start, records logged in it, records suppressed in it, level]
        self._windows: dict[str, list] = {}

    def log(self, level: int, kind: str, msg: str, *args: object) -> bool:
        """Log ``msg % args`` at ``level`` unless ``kind`` has had ``burst`` records in its window; returns whether
        it was logged."""
        now = self.clock()
        with self._lock:
            w = self._windows.get(kind)
            rolled = None
            if w is None or now - w[0] >= self.interval_s:
                if w is not None and w[2]:
                    rolled = (w[3], w[2])
                w = self._windows[kind] = [now, 0, 0, level]
            shown = w[1] < self.burst
            if shown:
                w[1] += 1
            else:
                w[2] += 1
        if rolled is not None:
            self._suppressed(kind, *rolled)
        if shown:
            self.logger.log(level, msg, *args)
        return shown

    def warning(self, kind: str, msg: str, *args: object) -> bool:
        """:meth:`log` at WARNING."""
        return self.log(logging.WARNING, kind, msg, *args)

    def flush(self) -> None:
        """Log the counts suppressed so far (windows not rolled over yet) and forget them."""
        with self._lock:
            pending = [(k, w[3], w[2]) for k, w in self._windows.items() if w[2]]
            for w in self._windows.values():
                w[2] = 0
        for kind, level, n in pending:
            self._suppressed(kind, level, n)

    def _suppressed(self, kind: str, level: int, n: int) -> None:
        self.logger.log(
            level,
            "%s: %d more like it suppressed (at most %d per %g s)",
            kind,
            n,
            self.burst,
            self.interval_s,
            extra={"kind": kind, "suppressed": n},
        )
