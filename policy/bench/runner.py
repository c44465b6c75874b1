"""Run the bench's simulations as Ray tasks (https://docs.ray.io): on a user's Ray cluster
(``--ray-address ADDR``) or on a local Ray started on this machine's cores and shut down afterwards.

:func:`run_tasks` journals every finished task (JSON lines, so an interrupted run loses nothing; ``resume``
skips the tasks already in the journal) and returns the results **in the order of the tasks**, whatever order
they finished in, so that everything aggregated from them is byte-identical between two runs.
"""

from __future__ import annotations

import gc
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from policy.raylocal import init_local, ray_leaks

__all__ = ["task_key", "read_journal", "RaySession", "run_tasks"]


def task_key(task: Sequence[Any]) -> str:
    """The journal key of a task (its arguments as JSON)."""
    return json.dumps(list(task))


class RaySession:
    """``with RaySession(address, num_cpus):`` connects to the Ray cluster at ``address`` (``auto`` or
    ``ray://HOST:10001`` or ``HOST:6379``), or starts a local Ray with ``num_cpus`` worker slots (default: the
    machine's cores; :func:`policy.raylocal.init_local` retries a start-up that timed out) when ``address`` is None;
    a local Ray is shut down on exit, a user's cluster is only disconnected from. Workers inherit ``OMP_NUM_THREADS``
    (1 unless set) so one simulation uses one core."""

    def __init__(self, address: str | None = None, num_cpus: int | None = None):
        self.address = address
        self.num_cpus = num_cpus
        self._started = False

    def __enter__(self) -> RaySession:
        import ray

        if ray.is_initialized():
            return self
        # Ray >= 2.4x warns (FutureWarning) that it will stop overriding CUDA_VISIBLE_DEVICES for tasks without
        # GPUs; opting into that behaviour now is what the bench wants (it asks for no GPU)
        os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
        env = {"env_vars": {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}}
        with ray_leaks():
            self._init(ray, env)
        self._started = True
        return self

    def _init(self, ray, env) -> None:
        if self.address:
            ray.init(address=self.address, runtime_env=env, logging_level="WARNING", log_to_driver=False)
        else:
            init_local(
                ray,
                num_cpus=self.num_cpus or os.cpu_count() or 1,
                include_dashboard=False,
                runtime_env=env,
                logging_level="WARNING",
                log_to_driver=False,
            )

    def __exit__(self, *exc: object) -> None:
        import ray

        if self._started:
            with ray_leaks():
                ray.shutdown()
                gc.collect()


def read_journal(journal: Path) -> dict[str, Any]:
    """The results journaled in ``journal`` (JSON lines), by task key; a line cut short by an interruption is
    skipped. Raises OSError when the file cannot be read."""
    done: dict[str, Any] = {}
    for line in journal.read_text(encoding="utf-8").splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by the interruption
        done[r.get("task", "")] = r
    return done


def run_tasks(
    fn: Callable[..., dict[str, Any]],
    tasks: Sequence[Sequence[Any]],
    desc: str = "bench",
    journal: Path | None = None,
    resume: bool = False,
) -> list[dict[str, Any]]:
    """Run ``fn(*task)`` for every task as a Ray task (one CPU each) in the current Ray session (see
    :class:`RaySession`), with a progress bar on stderr. Each result (a JSON-able dict) gets a ``"task"`` key
    and is appended to ``journal`` as soon as it arrives; with ``resume``, tasks already journaled are not
    run again. Returns the results in the order of ``tasks``. A failing task raises its error (Ray's
    ``RayTaskError`` wraps it) after the finished ones are journaled."""
    import ray

    done: dict[str, Any] = {}
    if journal is not None:
        journal.parent.mkdir(parents=True, exist_ok=True)
        if resume and journal.exists():
            done = read_journal(journal)
        else:
            journal.write_text("", encoding="utf-8")
    keys = [task_key(t) for t in tasks]
    have = {k: done[k] for k in keys if k in done}
    if have:
        print(f"policy.bench: resuming, {len(have)} of {len(tasks)} runs already in {journal}", file=sys.stderr)
    remote = ray.remote(num_cpus=1, max_retries=0)(fn)
    pending: dict[Any, str] = {}
    for k, t in zip(keys, tasks):
        if k not in have and k not in pending.values():
            pending[remote.remote(*t)] = k
    with tqdm(total=len(pending), desc=desc, unit="run", file=sys.stderr) as bar:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                k = pending.pop(ref)
                r = ray.get(ref)
                r["task"] = k
                have[k] = r
                if journal is not None:
                    with journal.open("a", encoding="utf-8") as fh:
                        fh.write(json.dumps(r) + "\n")
                bar.update(1)
    return [have[k] for k in keys]
