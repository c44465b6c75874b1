"""Starting a local Ray that survives a slow machine: :func:`init_local` retries a start-up that timed out, after
stopping the daemons the failed try left running.

Ray's node start-up waits a fixed 30 s for its raylet to register with the GCS (``ray/_private/node.py``: the
``raylet_start_wait_time_s`` of ``Node.__init__``; no setting changes it) and then raises a plain ``Exception``
("The current node timed out during startup"). On a loaded 2-core machine (a test suite building a control plane
beside it) that happens now and then. The failed ``Node`` object is dropped without stopping what it started (its
GCS server, raylet and helpers): the processes run on, and their ``Popen`` objects warn ``ResourceWarning``
("subprocess ... is still running") whenever the garbage collector reaches them, in whatever code runs then.
:func:`init_local` finds that ``Node`` in the exception's traceback, kills its processes (``Node.kill_all_processes``),
collects it, and tries again."""

from __future__ import annotations

import contextlib
import gc
import logging
import warnings
from collections.abc import Callable, Iterator
from typing import Any

__all__ = [
    "GCS_PORT_TIMEOUT_TEXT",
    "STARTUP_TIMEOUT_TEXT",
    "init_local",
    "is_startup_timeout",
    "ray_leaks",
    "stop_failed_node",
]

log = logging.getLogger("hrl.ray")

#: What Ray's exception says when the raylet did not register in time (ray/_private/node.py).
STARTUP_TIMEOUT_TEXT = "timed out during startup"
#: What it says when the GCS server did not write its port file in time (``wait_for_persisted_port``, 30 s by
#: default: ``RAY_gcs_server_port_wait_time_s``), as on a machine whose cores are busy.
GCS_PORT_TIMEOUT_TEXT = "Timed out waiting for file"


@contextlib.contextmanager
def ray_leaks() -> Iterator[None]:
    """Ray's node start-up keeps ``/dev/null`` handles and ``Popen`` objects of its daemons that are only collected
    when it shuts down (and then warn ``ResourceWarning``: unclosed file, subprocess still running); they are Ray's,
    not ours: silence exactly that category around its start and shutdown."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        yield


def is_startup_timeout(exc: BaseException) -> bool:
    """Whether ``exc`` is one of Ray's node start-up timeouts (an exception whose text says so: the raylet's
    registration, :data:`STARTUP_TIMEOUT_TEXT`, or the GCS server's port file, :data:`GCS_PORT_TIMEOUT_TEXT`)."""
    text = str(exc)
    return STARTUP_TIMEOUT_TEXT in text or (GCS_PORT_TIMEOUT_TEXT in text and "gcs_server_port" in text)


def stop_failed_node(exc: BaseException) -> int:
    """Kill the processes of the Ray ``Node`` whose ``__init__`` raised ``exc`` (found in its traceback: the ``self``
    of a frame ``__init__`` that has ``kill_all_processes``) and return how many nodes were stopped (0: none found,
    or stopping failed, which is logged). Never raises."""
    stopped = 0
    tb, frame = exc.__traceback__, None
    while tb is not None:
        frame = tb.tb_frame
        node = frame.f_locals.get("self") if frame.f_code.co_name == "__init__" else None
        kill = getattr(node, "kill_all_processes", None)
        if callable(kill):
            try:
                kill(check_alive=False, allow_graceful=False)
                stopped += 1
            except Exception as err:  # noqa: BLE001 - best effort: whatever Ray raised, the retry still runs
                log.warning("ray: stopping the processes of a node that failed to start: %s", err)
        tb = tb.tb_next
    del tb, frame
    return stopped


def init_local(
    ray: Any, *, attempts: int = 3, on_retry: Callable[[int, BaseException], None] | None = None, **kwargs: Any
) -> None:
    """``ray.init(**kwargs)`` for a local Ray, tried up to ``attempts`` times (>= 1) when the node's start-up timed
    out (:func:`is_startup_timeout`); before each retry, the failed node's processes are killed
    (:func:`stop_failed_node`), ``ray.shutdown()`` runs and the garbage is collected, with ``ResourceWarning``
    silenced (the ``Popen`` and ``/dev/null`` handles are Ray's). ``on_retry(attempt, exc)`` is called before each
    retry (default: a warning on the ``hrl.ray`` logger). Any other error is raised as it is, at once, after the same
    clean-up; the last timeout is raised as ``RuntimeError`` naming the attempts. ``ray``: the ``ray`` module (or a
    fake of ``init`` and ``shutdown``). Raises ``ValueError`` for ``attempts`` < 1."""
    if attempts < 1:
        raise ValueError(f"attempts: expected an integer >= 1, got {attempts!r}")
    for attempt in range(1, attempts + 1):
        try:
            with ray_leaks():
                ray.init(**kwargs)
            return
        except Exception as exc:
            timeout = is_startup_timeout(exc)
            with ray_leaks():
                stop_failed_node(exc)
                ray.shutdown()
                if timeout:
                    exc.__traceback__ = None  # the failed node's frames go now, while its warnings are silenced
                gc.collect()
            if not timeout:
                raise
            if attempt == attempts:
                raise RuntimeError(
                    f"ray: the local node did not start in {attempts} attempt(s) (its GCS server or raylet did not "
                    f"come up within Ray's 30 s; is the machine overloaded?): {exc}"
                ) from None
            if on_retry is not None:
                on_retry(attempt, exc)
            else:
                log.warning("ray: the local node timed out starting (attempt %d of %d); retrying", attempt, attempts)
