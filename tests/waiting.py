"""Polling instead of fixed sleeps: wait until a condition holds, with a deadline and a clear failure.

``tests/conftest.py`` puts this directory on ``sys.path``, so unit and integration tests alike can
``from waiting import wait_until``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T], timeout_s: float = 5.0, interval_s: float = 0.01, what: str | None = None
) -> T:
    """Call ``predicate`` every ``interval_s`` until it returns something truthy, and return that.

    Raises ``AssertionError`` naming ``what`` (default: the predicate's name) and the last value it returned
    once ``timeout_s`` has passed. Exceptions of the predicate propagate (it is an assertion, not a probe)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            name = what or getattr(predicate, "__name__", repr(predicate))
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {name} (last value: {value!r})")
        time.sleep(interval_s)
