"""The extender's per-request warnings are rate-limited (extender.ratelog): a client flooding it with bad requests
gets at most LOG_BURST warnings per kind a window, then one line counting the rest; the metrics count every
request."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry
from test_extender_app import Client, count  # the in-process ASGI client

from extender.config import ExtenderConfiguration
from extender.ratelog import LOG_BURST, RateLimitedLog
from extender.server import make_app
from extender.store import SnapshotStore
from policy.lowlevel import TopologyHeuristic


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def messages(caplog, name: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == name]


def test_at_most_burst_per_kind_a_window_then_the_count_of_the_rest_when_it_rolls_over(caplog):
    clock = Clock()
    rl = RateLimitedLog(logging.getLogger("hrl-test.rl"), burst=3, interval_s=10.0, clock=clock)
    with caplog.at_level(logging.WARNING, logger="hrl-test.rl"):
        shown = [rl.warning("bad", "bad %d", i) for i in range(8)]
        assert shown == [True] * 3 + [False] * 5
        assert rl.warning("other", "other 0")  # each kind has its own window
        clock.t += 10.0
        assert rl.warning("bad", "bad again")
    assert messages(caplog, "hrl-test.rl") == [
        "bad 0",
        "bad 1",
        "bad 2",
        "other 0",
        "bad: 5 more like it suppressed (at most 3 per 10 s)",
        "bad again",
    ]
    (summary,) = [r for r in caplog.records if "suppressed" in r.getMessage()]
    assert (summary.kind, summary.suppressed, summary.levelno) == ("bad", 5, logging.WARNING)


def test_flush_logs_the_pending_count_once(caplog):
    rl = RateLimitedLog(logging.getLogger("hrl-test.rl"), burst=1, interval_s=60.0, clock=Clock())
    with caplog.at_level(logging.WARNING, logger="hrl-test.rl"):
        for _ in range(4):
            rl.warning("k", "k")
        rl.flush()
        rl.flush()
    assert messages(caplog, "hrl-test.rl") == ["k", "k: 3 more like it suppressed (at most 1 per 60 s)"]


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        RateLimitedLog(logging.getLogger("x"), burst=0)
    with pytest.raises(ValueError):
        RateLimitedLog(logging.getLogger("x"), interval_s=0)


def test_a_flood_of_bad_requests_logs_at_most_burst_warnings_and_counts_every_request(caplog):
    n = LOG_BURST * 3
    reg = CollectorRegistry()
    app = make_app(ExtenderConfiguration(), SnapshotStore(), TopologyHeuristic(), reg)
    c = Client(app)
    with caplog.at_level(logging.WARNING, logger="extender.server"):
        for _ in range(n):
            assert c.post("/scheduler/filter", content=b'{"Pod": {').status_code == 400
        app.close()  # the count of those left out, at shutdown
    bad = [m for m in messages(caplog, "extender.server") if "bad request" in m]
    assert len(bad) == LOG_BURST + 1, bad
    assert bad[-1] == f"filter: bad request: {n - LOG_BURST} more like it suppressed (at most {LOG_BURST} per 60 s)"
    assert count(reg, "hrl_extender_requests_invalid_total", verb="filter") == n
