"""[torch side] Rollouts as Ray tasks: one small pool every trainer of the high level uses. A local Ray of
``workers`` CPUs (started by :func:`policy.raylocal.init_local`, which retries a start-up that timed out) unless
``address`` names a cluster (``--ray-address``: the same command scales out), or plain calls in this process with
``workers=1`` and no address (tests, quick runs)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from policy.raylocal import init_local
from policy.telemetry import progress_bar

__all__ = ["TaskPool"]


class TaskPool:
    """``map(fn, items, *shared, desc=None, **kw)`` runs ``fn(item, *shared, **kw)`` for every item (as Ray tasks of
    one CPU each, the ``shared`` arguments put in the object store once) and returns the results in order; with
    ``desc``, its progress as tasks finish (:func:`policy.telemetry.progress_bar`: shown where a command turned
    progress on). ``close()`` shuts down a Ray this pool started."""

    def __init__(self, workers: int, address: str | None = None):
        if workers < 1:
            raise ValueError(f"workers: expected an integer >= 1, got {workers!r}")
        self.ray: Any = None
        self._owned = False
        self._tasks: dict[Callable[..., Any], Any] = {}
        if workers > 1 or address:
            import ray

            if not ray.is_initialized():
                init_local(
                    ray,
                    attempts=1 if address else 3,
                    address=address,
                    num_cpus=None if address else workers,
                    include_dashboard=False,
                    log_to_driver=False,
                    ignore_reinit_error=True,
                )
                self._owned = True
            self.ray = ray

    def map(
        self, fn: Callable[..., Any], items: Sequence[Any], *shared: Any, desc: str | None = None, **kw: Any
    ) -> list[Any]:
        with progress_bar(desc or "", len(items), "task", enabled=desc is not None) as bar:
            if self.ray is None:
                out = []
                for x in items:
                    out.append(fn(x, *shared, **kw))
                    bar.update(1)
                return out
            task = self._tasks.get(fn)
            if task is None:
                task = self._tasks[fn] = self.ray.remote(num_cpus=1)(fn)
            refs = [self.ray.put(a) for a in shared]
            futures = [task.remote(x, *refs, **kw) for x in items]
            pending = list(futures)
            while bar.shown and pending:  # count them as they finish; the results stay in the items' order
                done, pending = self.ray.wait(pending, num_returns=1)
                bar.update(len(done))
            return list(self.ray.get(futures))

    def cpu_s(self, task_cpu_s: float, cpu0: float) -> float:
        """CPU seconds spent since ``cpu0`` (a :func:`time.process_time` reading): this process's, plus
        ``task_cpu_s`` (the tasks' own CPU times, summed) when the tasks ran in other processes (on Ray)."""
        own = time.process_time() - cpu0
        return own + task_cpu_s if self.ray is not None else own

    def close(self) -> None:
        if self.ray is not None and self._owned:
            self.ray.shutdown()
        self.ray = None
