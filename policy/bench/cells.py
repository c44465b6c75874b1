"""One run of the policy benchmark (a Ray task: a stack in a cell of the plan with one seed) and the runs of a
whole plan: :func:`run_one`, :func:`run_seeds`, :func:`run_all` (results in task order, so the same matrix
aggregates identically); the latency floor of a cell's runs (:mod:`policy.sim.floor`): :func:`floor_seeds`,
:func:`floor_all`."""

from __future__ import annotations

import json
import math
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from tqdm import tqdm

from policy.sim.app import load_app
from policy.sim.engine import METRIC_KEYS
from policy.sim.floor import FLOOR_KEYS, latency_floor
from policy.sim.scenario import build, load_scenario, resolve_app
from policy.sim.stacks import run_stack

from .common import HIST_EDGES_MS
from .plan import Cell
from .runner import read_journal, run_tasks, task_key

__all__ = [
    "UTIL_KEYS",
    "simulate_command",
    "node_cpu_utilization",
    "RunSetting",
    "run_one",
    "run_seeds",
    "run_all",
    "floor_seeds",
    "floor_all",
]


# ---- one run (a Ray task) ------------------------------------------------------------------------------------

_APPS: dict[str, Any] = {}
_SCENARIOS: dict[str, Any] = {}


def cached_app(name: str):
    """The app ``name`` (a built-in name or a path), loaded once per process."""
    if name not in _APPS:
        _APPS[name] = load_app(name)
    return _APPS[name]


def cached_scenario(name: str):
    """The scenario ``name`` (a built-in name or a path), loaded once per process."""
    if name not in _SCENARIOS:
        _SCENARIOS[name] = load_scenario(name)
    return _SCENARIOS[name]


def simulate_command(cell: Cell, policy: str, seed: int | str, n_samples: int | None, bundles: str = "") -> str:
    """The ``hrl-policy simulate`` command that reproduces one run of ``cell`` (``--offset`` / ``--samples``: the
    window offset and the sampled requests per minute; no ``--samples`` = the simulator's default; ``--bundles``:
    the bundles root of the learned stacks, when not the committed one)."""
    parts = ["hrl-policy simulate", f"--scenario {shlex.quote(cell.scenario)}"]
    if cell.app is not None:
        parts.append(f"--app {shlex.quote(cell.app)} --trace {shlex.quote(str(cell.trace))}")
    parts += [f"--policy '{policy}'", f"--minutes {cell.minutes} --offset {cell.offset_min}"]
    if n_samples is not None:
        parts.append(f"--samples {n_samples}")
    if bundles:
        parts.append(f"--bundles {shlex.quote(bundles)}")
    parts.append(f"--seed {seed} --json -")
    return " ".join(parts)


def node_cpu_utilization(sim) -> np.ndarray:
    """(N,) CPU in use on each node over the last simulated minute (the app's pods and the background
    tenants), as a fraction of the node's allocatable CPU."""
    snap = sim.observe()
    return np.array([(n.usage.cpu_m if n.usage is not None else 0.0) / max(n.allocatable.cpu_m, 1) for n in snap.nodes])


def _util_summary(u: np.ndarray) -> dict[str, float]:
    """``{"mean", "p50", "p95", "max"}`` (%) over every (minute, node) of a run."""
    x = 100.0 * np.asarray(u, dtype=np.float64).ravel()
    if not len(x):
        return dict.fromkeys(UTIL_KEYS, 0.0)
    return {
        "mean": float(x.mean()),
        "p50": float(np.percentile(x, 50)),
        "p95": float(np.percentile(x, 95)),
        "max": float(x.max()),
    }


#: The statistics of a run's node CPU utilization distribution (%, over every minute × node).
UTIL_KEYS = ("mean", "p50", "p95", "max")


def _finite_or_none(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None


class RunSetting(NamedTuple):
    """How a run of a cell is set up besides its stack and seed: the window (``minutes`` from ``offset_min``),
    ``n_samples`` (sampled user requests per minute; None: the simulator's default) and ``bundles`` (the bundles root
    the learned stacks load, ``--bundles``; "": the committed ``policy/bundles``). A tuple, so a task's arguments stay
    JSON (its journal key, :func:`policy.bench.runner.task_key`)."""

    minutes: int
    offset_min: int
    n_samples: int | None
    bundles: str = ""


def _cell_run(scenario: str, app: str | None, trace: str | None, seed: int, setting: RunSetting):
    """``(scenario, ScenarioRun)`` of one run of a cell as :func:`run_one` documents it (``setting`` may be a list
    after a journal or a Ray round trip)."""
    minutes, offset_min, n_samples, _bundles = RunSetting(*setting)
    scn = cached_scenario(scenario)
    spec = None if app is None else cached_app(resolve_app(app, scn))
    return scn, build(
        scn, app=spec, trace=trace, minutes=minutes, seed=seed, offset_min=offset_min, n_samples=n_samples
    )


def run_one(
    scenario: str, app: str | None, trace: str | None, policy: str, seed: int, setting: RunSetting
) -> dict[str, Any]:
    """One simulation of stack ``policy`` in ``scenario`` (a built-in name or a scenario file), built by
    :func:`policy.sim.scenario.build` exactly as ``hrl-policy simulate --scenario SCENARIO [--app APP --trace
    TRACE] --minutes MINUTES --offset OFFSET_MIN [--samples N_SAMPLES] [--bundles BUNDLES] --seed SEED`` builds it,
    with the values of ``setting`` (``app`` / ``trace`` None: the scenario's own, the only choice for a scenario of
    several apps).

    Returns the run record (JSON-able): ``scenario``, ``family``, ``app`` / ``trace`` (names; several apps' joined
    with ``+``), ``policy``, ``seed``, ``minutes``, ``offset_min``, ``samples``, ``nodes``, ``metrics`` (the eight
    metric keys and ``objective``, the mean cost per minute of :mod:`policy.sim.objective`: :data:`RESULT_KEYS`),
    ``hist`` (latency histogram of the successful requests over :data:`HIST_EDGES_MS`,
    request-weighted), ``failed_requests``, ``served_requests``, ``timeout_ms``, ``node_cpu_util_pct``
    (:data:`UTIL_KEYS`), ``counters`` (the stack's own counts, e.g. guardrail firings; ``{}`` for a stack that keeps
    none), ``apps`` (several apps: each app's latency, failed and SLO figures, None where not finite), ``wall_s``,
    ``cpu_s``. Raises ValueError for a bad
    scenario, app, trace or window."""
    t0, c0 = time.perf_counter(), time.process_time()
    scn, run = _cell_run(scenario, app, trace, seed, setting)
    _minutes, offset_min, _n, bundles = RunSetting(*setting)
    util: list[np.ndarray] = []
    res = run_stack(
        policy,
        run.app,
        run.rps,
        run.cluster,
        run.config,
        on_minute=lambda sim: util.append(node_cpu_utilization(sim)),
        bundles=bundles or None,
    )
    hist, _ = np.histogram(
        np.clip(res.latency_samples_ms, HIST_EDGES_MS[0], HIST_EDGES_MS[-1]),
        bins=HIST_EDGES_MS,
        weights=res.latency_weights,
    )
    out: dict[str, Any] = {
        "scenario": scn.name,
        "family": scn.family,
        "app": "+".join(run.apps),
        "trace": "+".join(run.traces),
        "policy": policy,
        "seed": seed,
        "minutes": len(run.rps),
        "offset_min": offset_min,
        "samples": run.config.n_samples,
        "nodes": run.cluster.nodes,
        "metrics": {**{k: float(res.metrics[k]) for k in METRIC_KEYS}, "objective": float(res.extra["objective"])},
        "hist": hist.tolist(),
        "failed_requests": float(res.extra["failed_requests"]),
        "served_requests": float(res.extra["served_requests"]),
        "timeout_ms": float(run.app.timeout_ms),
        "node_cpu_util_pct": _util_summary(np.array(util)),
        "counters": dict(res.extra.get("counters") or {}),
    }
    if "apps" in res.extra:
        out["apps"] = {a: {k: _finite_or_none(v) for k, v in m.items()} for a, m in res.extra["apps"].items()}
    out["wall_s"] = time.perf_counter() - t0
    out["cpu_s"] = time.process_time() - c0
    return out


def run_seeds(
    scenario: str, app: str | None, trace: str | None, policy: str, seeds: Sequence[int], setting: RunSetting
) -> dict[str, Any]:
    """:func:`run_one` for each of ``seeds`` in turn, in one process: ``{"runs": [record, ...]}`` (a task of the
    bench: one seed each today; a stack whose seeds share work cached per process may batch them)."""
    return {"runs": [run_one(scenario, app, trace, policy, s, setting) for s in seeds]}


def run_all(
    tasks: Sequence[tuple],
    desc: str = "bench",
    journal: Path | None = None,
    resume: bool = False,
    use_ray: bool = True,
) -> list[dict[str, Any]]:
    """Run ``tasks`` (argument tuples of :func:`run_seeds`) as Ray tasks in the current Ray session (or one by
    one in this process with ``use_ray=False``); the run records, task by task in the order of ``tasks`` (so
    aggregation is deterministic). ``journal`` / ``resume``: see :func:`policy.bench.runner.run_tasks` (one line per
    task)."""
    return [r for batch in _run_batches(run_seeds, tasks, desc, journal, resume, use_ray) for r in batch["runs"]]


def floor_seeds(
    scenario: str, app: str | None, trace: str | None, seeds: Sequence[int], setting: RunSetting
) -> dict[str, Any]:
    """The latency floor (:func:`policy.sim.floor.latency_floor`) of the runs of a cell that :func:`run_one` builds
    with each of ``seeds`` and ``setting`` (its ``bundles`` unused): ``{"runs": [record, ...]}``, a record per seed
    with ``scenario``, ``app``, ``trace`` (as :func:`run_one` names them), ``seed`` and the keys of
    :data:`policy.sim.floor.FLOOR_KEYS`. Raises ValueError as :func:`run_one`."""
    runs = []
    for seed in seeds:
        scn, run = _cell_run(scenario, app, trace, seed, setting)
        floor = latency_floor(run.app, run.rps, run.cluster, run.config)
        runs.append(
            {
                "scenario": scn.name,
                "app": "+".join(run.apps),
                "trace": "+".join(run.traces),
                "seed": seed,
                **{k: float(getattr(floor, k)) for k in FLOOR_KEYS},
            }
        )
    return {"runs": runs}


def floor_all(
    tasks: Sequence[tuple], desc: str = "floor", journal: Path | None = None, use_ray: bool = True
) -> list[dict[str, Any]]:
    """:func:`floor_seeds` for every task (its argument tuple), as :func:`run_all` runs :func:`run_seeds`, always
    anew (``journal`` is written, never resumed from: a journaled floor may be an older code's): the floor records in
    the order of ``tasks``."""
    return [r for batch in _run_batches(floor_seeds, tasks, desc, journal, False, use_ray) for r in batch["runs"]]


def _run_batches(
    fn, tasks: Sequence[tuple], desc: str, journal: Path | None, resume: bool, use_ray: bool
) -> list[dict[str, Any]]:

    if use_ray:
        return run_tasks(fn, tasks, desc, journal, resume)

    done: dict[str, dict[str, Any]] = {}
    if journal is not None:
        journal.parent.mkdir(parents=True, exist_ok=True)
        if resume and journal.exists():
            done = read_journal(journal)
        else:
            journal.write_text("", encoding="utf-8")
    keys = [task_key(t) for t in tasks]
    n_done = sum(k in done for k in keys)
    if n_done:
        print(f"policy.bench: resuming, {n_done} of {len(tasks)} runs already in {journal}", file=sys.stderr)
    for k, t in tqdm(list(zip(keys, tasks)), desc=desc, unit="run", file=sys.stderr):
        if k in done:
            continue
        r = fn(*t)
        r["task"] = k
        done[k] = r
        if journal is not None:
            with journal.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(r) + "\n")
    return [done[k] for k in keys]
