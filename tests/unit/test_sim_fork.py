"""Simulation.fork(): a copy of a running simulation continues exactly as the original would, and running one
never changes the other (the stack's closures, the extender's index, the planner's state, the random generators)."""

from __future__ import annotations

import socket
import threading
import types

import numpy as np
import pytest

from policy.sim.fork import fork_copy
from policy.sim.scenario import build
from policy.sim.stacks import StackContext, build_stack

MINUTES = 12


def _run(scenario: str, app: str | None, stack: str):
    run = build(scenario, app=app, minutes=MINUTES, seed=1, offset_min=300, n_samples=200)
    built = build_stack(stack, StackContext(run.app, run.cluster, run.config.seed, run.config, rps=run.rps))
    return built.simulation(run.app, run.rps, run.cluster, run.config), built


def _finish(sim) -> dict[str, np.ndarray]:
    while sim.minute < MINUTES:
        sim.advance()
    res = sim.result()
    return {k: np.asarray(v, dtype=np.float64) for k, v in res.series.items()} | {
        "latency_samples_ms": np.asarray(res.latency_samples_ms),
        "evictions_total": np.asarray([res.extra.get("resizes", 0.0)]),
    }


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k], equal_nan=True) for k in a)


CASES = [
    ("heterogeneous", "dsb-hotel-reservation", "hrl-scheduler"),
    ("events", "online-boutique", "default-kube-scheduler+hpa"),
    ("network-datacenter", "sock-shop", "hrl-no-encoder"),
]


@pytest.mark.parametrize(("scenario", "app", "stack"), CASES)
@pytest.mark.parametrize("at_minute", [0, 4, 9])
def test_a_fork_continues_bit_identically_and_the_two_runs_never_interfere(scenario, app, stack, at_minute):
    reference, _ = _run(scenario, app, stack)
    expected = _finish(reference)

    sim, built = _run(scenario, app, stack)
    while sim.minute < at_minute:
        sim.advance()
    copy, copy_built = sim.fork(built)
    # the copy runs to the end first: had it shared state with the original, the original would now diverge
    forked = _finish(copy)
    original = _finish(sim)
    assert _same(forked, expected)
    assert _same(original, expected)
    if built.counters is not None:
        assert dict(copy_built.counters()) == dict(built.counters())


def test_a_fork_inside_a_minute_is_refused():
    sim, _ = _run("heterogeneous", "dsb-hotel-reservation", "default-kube-scheduler")
    sim.begin_minute()
    with pytest.raises(RuntimeError, match="between minutes"):
        sim.fork()


def test_fork_copy_gives_closures_their_own_cells_and_keeps_shared_cells_shared():
    def make():
        state = {"n": 0}

        def inc():
            state["n"] += 1
            return state["n"]

        def read():
            return state["n"]

        return inc, read

    inc, read = make()
    inc()
    inc2, read2 = fork_copy((inc, read))
    assert inc2() == 2 and read2() == 2  # the copies share their (copied) cell with each other
    assert read() == 1  # ... and not with the original
    assert inc2.__closure__[0] is read2.__closure__[0]


def test_fork_copy_copies_mapping_proxies_and_locks_and_refuses_sockets():
    held = threading.Lock()
    held.acquire()
    src = {"view": types.MappingProxyType({"a": [1]}), "lock": held}
    out = fork_copy(src)
    assert out["view"] == {"a": [1]} and out["view"]["a"] is not src["view"]["a"]
    assert out["lock"] is not held and out["lock"].acquire(blocking=False)
    with socket.socket() as s, pytest.raises(TypeError, match="socket"):
        fork_copy({"server": s})
