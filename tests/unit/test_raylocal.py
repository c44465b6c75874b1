"""policy.raylocal: a local Ray whose start-up timed out is stopped (its daemons killed) and started again; other errors
are raised after the same clean-up. The first tests drive a small fake of the two calls used (``init``, ``shutdown``)
whose ``init`` fails inside a node's ``__init__`` as Ray's does; the last starts a real local Ray whose first raylet
never registers (Ray's own 30 s wait runs out) and checks that none of the first try's processes survive."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from policy.raylocal import init_local, is_startup_timeout, stop_failed_node

TIMEOUT = "The current node timed out during startup. This could happen because some of the raylet failed to startup"


class FakeNode:
    """The slice of ``ray._private.node.Node`` used: a constructor that may fail, ``kill_all_processes``."""

    killed: list[FakeNode] = []

    def __init__(self, error: Exception | None):
        self.alive = True
        if error is not None:
            raise error

    def kill_all_processes(self, check_alive: bool = True, allow_graceful: bool = False) -> None:
        assert (check_alive, allow_graceful) == (False, False)
        self.alive = False
        FakeNode.killed.append(self)


class FakeRay:
    def __init__(self, errors: list[Exception | None]):
        self.errors = list(errors)
        self.calls: list[dict] = []
        self.shutdowns = 0
        self.node: FakeNode | None = None

    def init(self, **kwargs) -> None:
        self.calls.append(kwargs)
        self.node = FakeNode(self.errors.pop(0))

    def shutdown(self) -> None:
        self.shutdowns += 1


@pytest.fixture(autouse=True)
def _fresh():
    FakeNode.killed = []


def test_a_timed_out_start_is_stopped_and_retried_with_the_same_arguments():
    ray = FakeRay([Exception(TIMEOUT), None])
    retries = []
    init_local(ray, attempts=3, on_retry=lambda a, e: retries.append((a, is_startup_timeout(e))), num_cpus=2)
    assert ray.calls == [{"num_cpus": 2}, {"num_cpus": 2}]
    assert retries == [(1, True)]
    assert len(FakeNode.killed) == 1 and not FakeNode.killed[0].alive
    assert ray.shutdowns == 1 and ray.node is not None and ray.node.alive


def test_a_gcs_server_that_did_not_write_its_port_in_time_is_a_start_up_timeout_too():
    # what Ray raised in CI on a busy machine (stop 37): the GCS server's port file, 30 s
    gcs = RuntimeError("Timed out waiting for file /tmp/ray/session_x/gcs_server_port_13f3bfc8")
    ray = FakeRay([gcs, None])
    init_local(ray, attempts=2, on_retry=lambda a, e: None)
    assert len(ray.calls) == 2 and len(FakeNode.killed) == 1 and ray.node is not None and ray.node.alive
    assert not is_startup_timeout(RuntimeError("Timed out waiting for file /tmp/something_else"))


def test_every_attempt_timing_out_raises_one_error_naming_the_attempts():
    ray = FakeRay([Exception(TIMEOUT)] * 2)
    with pytest.raises(RuntimeError, match=r"did not start in 2 attempt\(s\)") as err:
        init_local(ray, attempts=2, on_retry=lambda a, e: None)
    assert "overloaded" in str(err.value) and len(FakeNode.killed) == 2 and ray.shutdowns == 2


def test_another_error_is_raised_as_it_is_at_once_after_the_clean_up():
    ray = FakeRay([ValueError("num_cpus: bad"), None])
    with pytest.raises(ValueError, match="num_cpus: bad"):
        init_local(ray, attempts=3)
    assert len(ray.calls) == 1 and len(FakeNode.killed) == 1 and ray.shutdowns == 1


def test_no_node_in_the_traceback_stops_nothing_and_bad_attempts_are_refused():
    try:
        raise Exception(TIMEOUT)
    except Exception as exc:  # noqa: BLE001
        assert stop_failed_node(exc) == 0
    assert stop_failed_node(Exception(TIMEOUT)) == 0  # never raised: no traceback at all
    with pytest.raises(ValueError, match="attempts: expected an integer >= 1, got 0"):
        init_local(FakeRay([None]), attempts=0)


def _children() -> set[int]:
    """This process's live children (Linux ``/proc``; zombies left out)."""
    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if fields[0] != "Z" and int(fields[1]) == os.getpid():
            out.add(int(stat.parent.name))
    return out


def test_a_real_local_ray_whose_raylet_never_registers_is_killed_and_started_again(monkeypatch):
    """Ray's own wait (30 s) runs out on the first try because the GCS lookup of the node is made to fail; every
    process that try started is gone before the second, which starts and runs a task."""
    import ray
    from ray._private import services

    assert not ray.is_initialized()
    real_get_node = services.get_node
    failing = {"on": True}

    def get_node(*args, **kwargs):
        if failing["on"]:
            raise RuntimeError("node not registered yet (made to fail by the test)")
        return real_get_node(*args, **kwargs)

    monkeypatch.setattr(services, "get_node", get_node)
    before = _children()
    left: list[int] = []

    def on_retry(attempt, exc):
        assert attempt == 1 and is_startup_timeout(exc)
        left.extend(sorted(_children() - before))
        failing["on"] = False

    init_local(ray, attempts=2, on_retry=on_retry, num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        assert left == [], f"processes of the failed start still running: {left}"
        assert ray.get(ray.remote(lambda: 41 + 1).remote()) == 42
    finally:
        ray.shutdown()
