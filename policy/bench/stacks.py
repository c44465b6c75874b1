"""`make bench` / `make bench-quick`: every scheduling stack in every cell of the bench plan (scenario × app ×
trace, :mod:`policy.bench.plan`) × seed in the simulator → the ``policy`` section of BENCHMARKS.md (a part per
scenario), ``benchmarks/summary.json`` and the plots in ``benchmarks/<scenario>/``.

    python -m policy.bench --quick          # make bench-quick: the plan's quick mode (< 15 min on 2 cores)
    python -m policy.bench --full           # make bench: the plan's full mode (hours; --ray-address for a cluster)
    python -m policy.bench --quick --scenarios network-edge,events --apps dsb-social-network
    python -m policy.bench --tune           # grid-search the threshold autoscaler (tuning seeds)
    python -m policy.bench --full --resume  # finish an interrupted run (finished runs are journaled)
    python -m policy.bench --quick --scenarios baseline-2026-11 --apps my/app.yaml --traces my.csv \\
        --policies my-stack --out out/mine

Every run is built by :func:`policy.sim.scenario.build`, as ``hrl-policy simulate --scenario`` builds it, so the
command the report prints for a cell reproduces its runs exactly. Every stack named runs with, per cell, the
baselines' knob sweeps and the offline reference (:mod:`policy.bench.pareto`, :mod:`policy.sim.reference`;
``--no-sweep`` leaves them out; the reference is left out of a scenario of several apps, which its plan does not
cover). The simulations are Ray tasks (:mod:`policy.bench.runner`): on the cluster at ``--ray-address``, else on a
local Ray started on this machine's cores (``--jobs N`` CPUs) and shut down afterwards; ``--no-ray`` runs them here
one by one. Results are aggregated in task order (by seed), so the same matrix writes a byte-identical
``summary.json``.

``summary.json`` (schema 3, documented in docs/benchmarks.md, checked by :func:`validate_summary`): per scenario,
app, trace and stack the eight metrics as ``{"mean", "ci95"}`` (``ci95`` the half-width of the 95 % confidence
interval of the mean over seeds, Student t, 0 when all seeds agree), per-run node CPU utilization, the Pareto
fronts, every contender at equal CPU to the best baseline front, its share of the reference's gain over tuned HPA,
the reference's MIP gaps, the learned stacks' guardrail counters, and per cell its run window, role (training or
held-out app) and the ``hrl-policy simulate`` command. Only the standard run (the shipped plan, unnarrowed, every
planned stack, with the sweeps) writes BENCHMARKS.md and ``benchmarks/``; any other selection writes to ``--out``
(default ``out/bench``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shlex
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from policy.sim.engine import METRIC_KEYS
from policy.sim.run import window_offset
from policy.sim.scenario import BASELINE as BASELINE_SCENARIO

from .plan import Cell, load_plan, plan_cells

__all__ = [
    "ROOT",
    "BENCH_DIR",
    "APPS",
    "TRACES",
    "TUNING_SEEDS",
    "HIST_EDGES_MS",
    "SCHEMA",
    "t975",
    "mean_ci95",
    "Mode",
    "BASELINE_SCENARIO",
    "Cell",
    "UTIL_KEYS",
    "SUMMARY_KEYS",
    "CELL_KEYS",
    "simulate_command",
    "node_cpu_utilization",
    "run_one",
    "run_seeds",
    "run_all",
    "summarize",
    "comparisons",
    "build_summary",
    "validate_summary",
    "markdown",
    "plots",
    "tune",
    "unavailable_stacks",
    "main",
]


ROOT = Path(__file__).resolve().parents[2]


BENCH_DIR = ROOT / "benchmarks"


#: The built-in applications (the threshold autoscaler is tuned for each).
APPS = (
    "online-boutique",
    "sock-shop",
    "dsb-hotel-reservation",
    "dsb-social-network",
    "dsb-media-microservices",
    "alibaba",
)


#: The named load traces.
TRACES = ("nasa", "twitter", "bursty")


#: Seeds of the tuning runs (the threshold autoscaler's grid search); disjoint from every evaluation seed.
TUNING_SEEDS = (1000, 1001)


#: The summary.json schema :func:`build_summary` writes.
SCHEMA = 3


#: Latency histogram edges (ms) for the CDF plots: log-spaced 0.1 ms .. 100 s.
HIST_EDGES_MS = np.logspace(-1, 5, 601)


# Student t 0.975 quantiles for 1..30 degrees of freedom (two-sided 95 %).
_T975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` >= 1 degrees of freedom (table to 30, then
    1.96 + 2.4/df, within 0.002 of the exact value)."""
    if df < 1:
        raise ValueError(f"df: must be >= 1, got {df}")
    return _T975[df - 1] if df <= 30 else 1.96 + 2.4 / df


def mean_ci95(values: Sequence[float]) -> dict[str, float]:
    """``{"mean", "ci95"}`` of per-seed values: ci95 = t(0.975, n-1) × sd / sqrt(n) (0 for one value or
    identical values). Non-finite values raise ValueError (the summary never holds null or inf)."""
    x = np.asarray(values, dtype=np.float64)
    if len(x) == 0 or not np.all(np.isfinite(x)):
        raise ValueError(f"metric values must be finite and non-empty, got {list(values)!r}")
    m = float(x.mean())
    if len(x) < 2 or float(np.ptp(x)) == 0.0:
        return {"mean": m, "ci95": 0.0}
    sd = float(x.std(ddof=1))
    return {"mean": m, "ci95": t975(len(x) - 1) * sd / math.sqrt(len(x))}


@dataclass(frozen=True)
class Mode:
    """A benchmark size (a mode of the plan, with the command line's overrides): its ``name`` (quick, full), the
    ``plan`` file, ``seeds``, the run length ``minutes`` (minutes, ``"scenario"`` or ``"window"``; cells may
    override it), ``n_samples`` (sampled user requests per minute; None: the simulator's default) and the
    baselines' ``sweep`` (quick, full or none)."""

    name: str
    seeds: tuple[int, ...]
    minutes: int | str
    n_samples: int | None
    sweep: str = "quick"
    plan: str = ""


# ---- one run (a Ray task) ------------------------------------------------------------------------------------

_APPS: dict[str, Any] = {}
_SCENARIOS: dict[str, Any] = {}


def _app(name: str):
    """The app ``name`` (a built-in name or a path), loaded once per process."""
    from policy.sim.app import load_app

    if name not in _APPS:
        _APPS[name] = load_app(name)
    return _APPS[name]


def _scenario(name: str):
    """The scenario ``name`` (a built-in name or a path), loaded once per process."""
    from policy.sim.scenario import load_scenario

    if name not in _SCENARIOS:
        _SCENARIOS[name] = load_scenario(name)
    return _SCENARIOS[name]


def simulate_command(cell: Cell, policy: str, seed: int | str, n_samples: int | None) -> str:
    """The ``hrl-policy simulate`` command that reproduces one run of ``cell`` (``--offset`` / ``--samples``: the
    window offset and the sampled requests per minute; no ``--samples`` = the simulator's default)."""
    parts = ["hrl-policy simulate", f"--scenario {shlex.quote(cell.scenario)}"]
    if cell.app is not None:
        parts.append(f"--app {shlex.quote(cell.app)} --trace {shlex.quote(str(cell.trace))}")
    parts += [f"--policy '{policy}'", f"--minutes {cell.minutes} --offset {cell.offset_min}"]
    if n_samples is not None:
        parts.append(f"--samples {n_samples}")
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


def run_one(
    scenario: str,
    app: str | None,
    trace: str | None,
    policy: str,
    seed: int,
    minutes: int,
    offset_min: int,
    n_samples: int | None,
) -> dict[str, Any]:
    """One simulation of stack ``policy`` in ``scenario`` (a built-in name or a scenario file), built by
    :func:`policy.sim.scenario.build` exactly as ``hrl-policy simulate --scenario SCENARIO [--app APP --trace
    TRACE] --minutes MINUTES --offset OFFSET_MIN [--samples N_SAMPLES] --seed SEED`` builds it (``app`` / ``trace``
    None: the scenario's own, the only choice for a scenario of several apps).

    Returns the run record (JSON-able): ``scenario``, ``family``, ``app`` / ``trace`` (names; several apps' joined
    with ``+``), ``policy``, ``seed``, ``minutes``, ``offset_min``, ``samples``, ``nodes``, ``metrics`` (the eight
    metric keys), ``hist`` (latency histogram of the successful requests over :data:`HIST_EDGES_MS`,
    request-weighted), ``failed_requests``, ``served_requests``, ``timeout_ms``, ``node_cpu_util_pct``
    (:data:`UTIL_KEYS`), ``counters`` (the stack's own counts, e.g. guardrail firings; ``{}`` for a stack that keeps
    none), ``apps`` (several apps: each app's latency, failed and SLO figures, None where not finite),
    ``reference_mip`` (the offline reference: its MIP's gaps), ``wall_s``, ``cpu_s``. Raises ValueError for a bad
    scenario, app, trace or window."""
    from policy.sim.scenario import build, resolve_app
    from policy.sim.stacks import run_stack

    t0, c0 = time.perf_counter(), time.process_time()
    scn = _scenario(scenario)
    spec = None if app is None else _app(resolve_app(app, scn))
    run = build(scn, app=spec, trace=trace, minutes=minutes, seed=seed, offset_min=offset_min, n_samples=n_samples)
    util: list[np.ndarray] = []
    res = run_stack(
        policy,
        run.app,
        run.rps,
        run.cluster,
        run.config,
        on_minute=lambda sim: util.append(node_cpu_utilization(sim)),
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
        "metrics": {k: float(res.metrics[k]) for k in METRIC_KEYS},
        "hist": hist.tolist(),
        "failed_requests": float(res.extra["failed_requests"]),
        "served_requests": float(res.extra["served_requests"]),
        "timeout_ms": float(run.app.timeout_ms),
        "node_cpu_util_pct": _util_summary(np.array(util)),
        "counters": dict(res.extra.get("counters") or {}),
    }
    if "apps" in res.extra:
        out["apps"] = {a: {k: _finite_or_none(v) for k, v in m.items()} for a, m in res.extra["apps"].items()}
    if policy.partition("@")[0] == "offline-reference":
        from policy.sim.reference import DEFAULT_PRICE_MS_PER_CORE, reference_plan
        from policy.sim.stacks import autoscaled_workloads, parse_stack_name

        price = parse_stack_name(policy)[1].get("price", DEFAULT_PRICE_MS_PER_CORE)
        plan = reference_plan(  # cached: the plan the stack ran
            run.app, run.rps, run.cluster, run.config.network, autoscaled_workloads(run.app), price
        )
        out["reference_mip"] = plan.summary()
    out["wall_s"] = time.perf_counter() - t0
    out["cpu_s"] = time.process_time() - c0
    return out


def run_seeds(
    scenario: str,
    app: str | None,
    trace: str | None,
    policy: str,
    seeds: Sequence[int],
    minutes: int,
    offset_min: int,
    n_samples: int | None,
) -> dict[str, Any]:
    """:func:`run_one` for each of ``seeds`` in turn, in one process: ``{"runs": [record, ...]}``. The bench runs
    the offline reference's seeds of a cell this way, so its plan (the MIPs, the same for every seed) is solved
    once per cell and price (:func:`policy.sim.reference.reference_plan` caches it per process)."""
    return {"runs": [run_one(scenario, app, trace, policy, s, minutes, offset_min, n_samples) for s in seeds]}


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
    return [r for batch in _run_batches(tasks, desc, journal, resume, use_ray) for r in batch["runs"]]


def _run_batches(
    tasks: Sequence[tuple], desc: str, journal: Path | None, resume: bool, use_ray: bool
) -> list[dict[str, Any]]:
    from .runner import run_tasks, task_key

    if use_ray:
        return run_tasks(run_seeds, tasks, desc, journal, resume)
    from tqdm import tqdm

    done: dict[str, dict[str, Any]] = {}
    if journal is not None:
        journal.parent.mkdir(parents=True, exist_ok=True)
        if resume and journal.exists():
            for line in journal.read_text(encoding="utf-8").splitlines():
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:
                    continue
                done[r.get("task", "")] = r
        else:
            journal.write_text("", encoding="utf-8")
    keys = [task_key(t) for t in tasks]
    n_done = sum(k in done for k in keys)
    if n_done:
        print(f"policy.bench: resuming, {n_done} of {len(tasks)} runs already in {journal}", file=sys.stderr)
    for k, t in tqdm(list(zip(keys, tasks)), desc=desc, unit="run", file=sys.stderr):
        if k in done:
            continue
        r = run_seeds(*t)
        r["task"] = k
        done[k] = r
        if journal is not None:
            with journal.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(r) + "\n")
    return [done[k] for k in keys]


# ---- aggregation ---------------------------------------------------------------------------------------------

CellKey = tuple[str, str, str]


def _nest(flat: Mapping[tuple[str, ...], Any]) -> dict[str, Any]:
    """``{(a, b, c, ...): v}`` → ``{a: {b: {c: ... v}}}`` (insertion order kept)."""
    out: dict[str, Any] = {}
    for key, v in flat.items():
        d = out
        for k in key[:-1]:
            d = d.setdefault(k, {})
        d[key[-1]] = v
    return out


def _per_seed(results: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, str, str], list[Mapping[str, Any]]]:
    """Run records per (scenario, app, trace, policy), each list in seed order."""
    per: dict[tuple[str, str, str, str], list[Mapping[str, Any]]] = {}
    for r in results:
        key = (r.get("scenario", BASELINE_SCENARIO), r["app"], r["trace"], r["policy"])
        per.setdefault(key, []).append(r)
    return {k: sorted(v, key=lambda r: int(r.get("seed", 0))) for k, v in per.items()}


def summarize(results: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """``{scenario: {app: {trace: {policy: {metric: {"mean", "ci95"}}}}}}`` from run records (any order). Each
    cell's seeds are aggregated in seed order, so the same runs give the same bits in any order."""
    return _nest(
        {
            key: {k: mean_ci95([r["metrics"][k] for r in rs]) for k in METRIC_KEYS}
            for key, rs in _per_seed(results).items()
        }
    )


def _counters(rs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]] | None:
    """``{name: {"mean", "ci95"}}`` of a stack's counters over its seeds (a name missing in a seed counts 0);
    None for a stack that keeps no counters."""
    names = sorted({n for r in rs for n in (r.get("counters") or {})})
    if not names:
        return None
    return {n: mean_ci95([float((r.get("counters") or {}).get(n, 0.0)) for r in rs]) for n in names}


def _front_json(points) -> list[dict[str, Any]]:
    return [{"stack": p.stack, "cpu_core_hours": p.cpu, "value": p.value} for p in points]


def comparisons(
    results: Sequence[Mapping[str, Any]], baselines: Sequence[str], reference: Sequence[str], contenders: Sequence[str]
) -> dict[str, Any]:
    """``{"fronts", "equal_cpu", "reference_share"}`` per scenario, app and trace (:mod:`policy.bench.pareto`)."""
    from .pareto import FRONT_METRICS, at_equal_cpu, cell_fronts, reference_share

    per = _per_seed(results)
    cells = list(dict.fromkeys(k[:3] for k in per))
    fronts: dict[CellKey, Any] = {}
    equal: dict[tuple[str, str, str, str], Any] = {}
    share: dict[tuple[str, str, str, str], Any] = {}
    for cell in cells:
        runs = {k[3]: [r["metrics"] for r in rs] for k, rs in per.items() if k[:3] == cell}
        fr = cell_fronts(runs, baselines, reference)
        fronts[cell] = {m: {k: _front_json(v) for k, v in fr[m].items()} for m in FRONT_METRICS}
        for stack in contenders:
            if stack not in runs:
                continue
            cpu = [m["cpu_core_hours"] for m in runs[stack]]
            eq, sh = {}, {}
            for m in FRONT_METRICS:
                front = fr[m]["baselines"]
                per_seed = {p.stack: [x[m] for x in runs[p.stack]] for p in front}
                eq[m] = at_equal_cpu(front, cpu, [x[m] for x in runs[stack]], per_seed)
                sh[m] = reference_share(
                    fr[m]["hpa"],
                    fr[m]["reference"],
                    float(np.mean(cpu)),
                    float(np.mean([x[m] for x in runs[stack]])),
                    m,
                )
            equal[(*cell, stack)] = eq
            share[(*cell, stack)] = sh
    return {"fronts": _nest(fronts), "equal_cpu": _nest(equal), "reference_share": _nest(share)}


SUMMARY_KEYS = (
    "schema",
    "mode",
    "seeds",
    "scenarios",
    "cells",
    "results",
    "node_cpu_util_pct",
    "fronts",
    "equal_cpu",
    "reference_share",
    "reference_mip",
    "counters",
)

#: The keys of each entry of summary.json ``cells``.
CELL_KEYS = ("apps", "role", "minutes", "offset_min", "samples", "nodes", "reference_not_run", "command")

#: Why the offline reference is left out of a cell of several apps.
REFERENCE_ONE_APP = (
    "the offline reference plans one application's replicas and placement (policy/sim/reference.py); this "
    "scenario runs {n} side by side"
)


def build_summary(
    results: Sequence[Mapping[str, Any]],
    mode: Mode,
    cells: Sequence[Cell],
    baselines: Sequence[str],
    reference: Sequence[str],
    contenders: Sequence[str],
    stacks: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The whole summary.json object (schema 3, docs/benchmarks.md) from run records (any order): cells in the
    order of ``cells``, stacks in the order of ``stacks`` (default: as first seen)."""
    per = _per_seed(results)
    order = list(dict.fromkeys([*(stacks or ()), *(k[3] for k in per)]))
    keys = sorted(per, key=lambda k: ([c.key for c in cells].index(k[:3]), order.index(k[3])))
    per = {k: per[k] for k in keys}
    present = {k[:3] for k in per}
    res, util, mip, counters = {}, {}, {}, {}
    for key, rs in per.items():
        res[key] = {k: mean_ci95([r["metrics"][k] for r in rs]) for k in METRIC_KEYS}
        util[key] = [{"seed": int(r["seed"]), **r["node_cpu_util_pct"]} for r in rs]
        if "reference_mip" in rs[0]:
            mip[key] = rs[0]["reference_mip"]
        c = _counters(rs)
        if c is not None:
            counters[key] = c
    scenarios: dict[str, Any] = {}
    cell_info: dict[CellKey, Any] = {}
    for c in cells:
        if c.key not in present:
            continue
        scn = _scenario(c.scenario)
        scenarios.setdefault(c.scenario_name, {"family": c.family, "description": scn.spec.description})
        first = next(rs[0] for k, rs in per.items() if k[:3] == c.key)
        cell_info[c.key] = {
            "apps": list(c.apps),
            "role": c.role,
            "minutes": c.minutes,
            "offset_min": c.offset_min,
            "samples": int(first["samples"]),
            "nodes": int(first["nodes"]),
            "reference_not_run": REFERENCE_ONE_APP.format(n=len(c.apps)) if len(c.apps) > 1 and reference else None,
            "command": simulate_command(c, "{stack}", "{seed}", mode.n_samples),
        }
    comp = comparisons([r for rs in per.values() for r in rs], baselines, reference, contenders)
    return {
        "schema": SCHEMA,
        "mode": {
            "name": mode.name,
            "plan": mode.plan,
            "minutes": mode.minutes,
            "n_samples": mode.n_samples,
            "seeds": list(mode.seeds),
            "sweep": mode.sweep,
        },
        "seeds": len(mode.seeds),
        "scenarios": scenarios,
        "cells": _nest(cell_info),
        "results": _nest(res),
        "node_cpu_util_pct": _nest(util),
        **comp,
        "reference_mip": _nest(mip),
        "counters": _nest(counters),
    }


def _num(x: Any, where: str, nullable: bool = False) -> None:
    if x is None and nullable:
        return
    if not isinstance(x, (int, float)) or isinstance(x, bool) or not math.isfinite(x):
        raise ValueError(f"{where}: must be a finite number, got {x!r}")


def _exact(obj: Any, keys: Iterable[str], where: str) -> None:
    if not isinstance(obj, dict) or set(obj) != set(keys):
        raise ValueError(
            f"{where}: keys must be exactly {sorted(keys)}, got {sorted(obj) if isinstance(obj, dict) else obj!r}"
        )


def _mean_ci(v: Any, where: str) -> None:
    _exact(v, ("mean", "ci95"), where)
    for f in ("mean", "ci95"):
        _num(v[f], f"{where}.{f}")
    if v["ci95"] < 0:
        raise ValueError(f"{where}.ci95: must be >= 0, got {v['ci95']}")


def _obj(obj: Any, where: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: must be an object, got {type(obj).__name__}")
    return obj


def _walk(obj: Any, where: str, depth: int, keys: tuple[str, ...] = ()):
    """``(where, keys, value)`` of every entry ``depth`` levels down (scenario, app, trace), each level an object."""
    if depth == 0:
        yield where, keys, obj
        return
    for k, v in _obj(obj, where).items():
        yield from _walk(v, f"{where}.{k}", depth - 1, (*keys, k))


def _cells(obj: Any, where: str, depth: int = 3):
    """``(where, value)`` of every cell ``depth`` levels down (scenario, app, trace)."""
    for w, _k, v in _walk(obj, where, depth):
        yield w, v


def _int(x: Any, where: str, lo: int) -> None:
    if not isinstance(x, int) or isinstance(x, bool) or x < lo:
        raise ValueError(f"{where}: must be an integer >= {lo}, got {x!r}")


def validate_summary(obj: Any) -> None:
    """Raise ValueError (naming the first offending field and its value) unless ``obj`` has exactly the
    summary.json shape of docs/benchmarks.md (schema 3), every number finite, every interval and counter >= 0 and
    every result cell described in ``cells``. A summary of the first schema (``{"seeds", "results"}``, per app and
    trace) is accepted as it is."""
    legacy = isinstance(obj, dict) and set(obj) == {"seeds", "results"}
    if legacy:
        _int(obj["seeds"], "summary.seeds", 1)
        for where, policies in _cells(obj["results"], "summary.results", 2):
            for policy, metrics in _obj(policies, where).items():
                _exact(metrics, METRIC_KEYS, f"{where}.{policy}")
                for k, v in metrics.items():
                    _mean_ci(v, f"{where}.{policy}.{k}")
        return
    _exact(obj, SUMMARY_KEYS, "summary")
    if obj["schema"] != SCHEMA:
        raise ValueError(f"summary.schema: must be {SCHEMA}, got {obj['schema']!r}")
    _exact(obj["mode"], ("name", "plan", "minutes", "n_samples", "seeds", "sweep"), "summary.mode")
    _int(obj["seeds"], "summary.seeds", 1)
    for name, s in _obj(obj["scenarios"], "summary.scenarios").items():
        _exact(s, ("family", "description"), f"summary.scenarios.{name}")
    described = set()
    for where, key, c in _walk(obj["cells"], "summary.cells", 3):
        _exact(c, CELL_KEYS, where)
        described.add(key)
        if key[0] not in obj["scenarios"]:
            raise ValueError(f"{where}: scenario {key[0]!r} is not in summary.scenarios")
        for k in ("minutes", "samples", "nodes"):
            _int(c[k], f"{where}.{k}", 1)
        _int(c["offset_min"], f"{where}.offset_min", 0)
        if c["role"] not in ("training", "held-out", ""):
            raise ValueError(f"{where}.role: must be 'training', 'held-out' or '', got {c['role']!r}")
        if not isinstance(c["command"], str) or "{stack}" not in c["command"] or "{seed}" not in c["command"]:
            raise ValueError(f"{where}.command: must be a command with {{stack}} and {{seed}}, got {c['command']!r}")
        if c["reference_not_run"] is not None and not isinstance(c["reference_not_run"], str):
            raise ValueError(f"{where}.reference_not_run: must be a reason or null, got {c['reference_not_run']!r}")
    for where, key, policies in _walk(obj["results"], "summary.results", 3):
        if key not in described:
            raise ValueError(f"{where}: a result cell that summary.cells does not describe")
        for policy, metrics in _obj(policies, where).items():
            _exact(metrics, METRIC_KEYS, f"{where}.{policy}")
            for k, v in metrics.items():
                _mean_ci(v, f"{where}.{policy}.{k}")
    from .pareto import FRONT_METRICS

    for where, policies in _cells(obj["node_cpu_util_pct"], "summary.node_cpu_util_pct"):
        for policy, runs in _obj(policies, where).items():
            if not isinstance(runs, list) or len(runs) != obj["seeds"]:
                raise ValueError(f"{where}.{policy}: must be a list of one entry per seed")
            for i, r in enumerate(runs):
                _exact(r, ("seed", *UTIL_KEYS), f"{where}.{policy}[{i}]")
                for k in UTIL_KEYS:
                    _num(r[k], f"{where}.{policy}[{i}].{k}")
    for where, metrics in _cells(obj["fronts"], "summary.fronts"):
        _exact(metrics, FRONT_METRICS, where)
        for m, fr in metrics.items():
            _exact(fr, ("baselines", "hpa", "reference"), f"{where}.{m}")
            for name, pts in fr.items():
                for i, p in enumerate(pts):
                    _exact(p, ("stack", "cpu_core_hours", "value"), f"{where}.{m}.{name}[{i}]")
                    _num(p["cpu_core_hours"], f"{where}.{m}.{name}[{i}].cpu_core_hours")
                    _num(p["value"], f"{where}.{m}.{name}[{i}].value")
    eq_keys = ("cpu_core_hours", "position", "bracket", "weight", "front", "stack", "delta", "ratio", "ratio_ci95")
    for where, stacks in _cells(obj["equal_cpu"], "summary.equal_cpu"):
        for stack, metrics in _obj(stacks, where).items():
            _exact(metrics, FRONT_METRICS, f"{where}.{stack}")
            for m, e in metrics.items():
                w = f"{where}.{stack}.{m}"
                if e is None:
                    continue
                _exact(e, eq_keys, w)
                _num(e["cpu_core_hours"], f"{w}.cpu_core_hours")
                _num(e["weight"], f"{w}.weight")
                if e["position"] not in ("inside", "above"):
                    raise ValueError(f"{w}.position: must be 'inside' or 'above', got {e['position']!r}")
                for f in ("front", "stack", "delta"):
                    _mean_ci(e[f], f"{w}.{f}")
                _num(e["ratio"], f"{w}.ratio", nullable=True)
                if e["ratio_ci95"] is not None:
                    if not isinstance(e["ratio_ci95"], list) or len(e["ratio_ci95"]) != 2:
                        raise ValueError(f"{w}.ratio_ci95: must be [lo, hi] or null")
                    for x in e["ratio_ci95"]:
                        _num(x, f"{w}.ratio_ci95")
    for where, stacks in _cells(obj["reference_share"], "summary.reference_share"):
        for stack, metrics in _obj(stacks, where).items():
            _exact(metrics, FRONT_METRICS, f"{where}.{stack}")
            for m, v in metrics.items():
                _num(v, f"{where}.{stack}.{m}", nullable=True)
    mip_keys = ("solves", "unsolved", "mip_gap_max", "mip_gap_mean", "solve_s_total", "relaxed")
    for where, stacks in _cells(obj["reference_mip"], "summary.reference_mip"):
        for stack, v in _obj(stacks, where).items():
            _exact(v, mip_keys, f"{where}.{stack}")
            for k in mip_keys:
                _num(v[k], f"{where}.{stack}.{k}")
    for where, stacks in _cells(obj["counters"], "summary.counters"):
        for stack, names in _obj(stacks, where).items():
            if not _obj(names, f"{where}.{stack}"):
                raise ValueError(f"{where}.{stack}: must name at least one counter (leave a stack without any out)")
            for name, v in names.items():
                if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
                    raise ValueError(f"{where}.{stack}: counter names are snake_case, got {name!r}")
                _mean_ci(v, f"{where}.{stack}.{name}")
                if v["mean"] < 0:
                    raise ValueError(f"{where}.{stack}.{name}.mean: a count must be >= 0, got {v['mean']}")


# ---- BENCHMARKS.md --------------------------------------------------------------------------------------


def _fmt(v: Mapping[str, float], digits: int) -> str:
    return f"{v['mean']:.{digits}f} ± {v['ci95']:.{digits}f}"


_COLUMNS = (
    ("latency_mean_ms", "mean ms", 1),
    ("latency_p95_ms", "p95 ms", 1),
    ("latency_p99_ms", "p99 ms", 1),
    ("failed_pct", "failed %", 2),
    ("slo_violation_pct", "SLO viol. %", 1),
    ("cpu_core_hours", "CPU core-h", 2),
    ("evictions", "evictions", 1),
    ("cross_node_call_pct", "cross-node calls %", 1),
)


def _eq_cell(e: Mapping[str, Any] | None, digits: int) -> tuple[str, str, str]:
    """(front at equal CPU, Δ ± ci, ratio [lo, hi]) as text; "—" where the comparison is missing."""
    if e is None:
        return "— (below the front's CPU)", "—", "—"
    front = _fmt(e["front"], digits) + (" (beyond)" if e["position"] == "above" else "")
    delta = f"{e['delta']['mean']:+.{digits}f} ± {e['delta']['ci95']:.{digits}f}"
    if e["ratio"] is None:
        return front, delta, "— (front at 0)"
    lo, hi = e["ratio_ci95"]
    return front, delta, f"{e['ratio']:.2f} [{max(lo, 0.0):.2f}, {hi:.2f}]"


def _share(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.0f} %"


def _fname(name: str) -> str:
    """A file-name-safe form of an app or trace name (a path's separators and odd characters become ``_``)."""
    return re.sub(r"[^A-Za-z0-9.+_-]", "_", name)


def _table(rows: list[list[str]], headers: list[str]) -> str:
    from tabulate import tabulate

    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


def _role_text(role: str) -> str:
    return {"training": "training app", "held-out": "held-out app: never seen in training"}.get(role, "")


#: What the quick mode gives up to finish in under 15 minutes on 2 cores, printed in its section.
QUICK_TRADES = (
    "The quick mode trades precision for time: 3 seeds (full: 5), 1,000 sampled user requests per minute "
    "(full: 2,000), 30-minute runs (the classic setting's full runs take the whole 6-hour windows), the quick sweep "
    "(HPA targets 40-90 %, three threshold settings, each placement baseline with and without an HPA; the full "
    "sweep adds each one's own knob), one trace per cell and two apps per scenario family (one training, one "
    "held-out; full: five apps × three traces), and no alibaba (386 services: about 10× the CPU of a cell of the "
    "other apps)."
)


def _length_text(mode: Mode) -> str:
    if mode.minutes == "window":
        return "runs over the whole window of each trace"
    if mode.minutes == "scenario":
        return "runs of each scenario's own length, centred on the peak of its trace's window"
    return f"{mode.minutes}-minute runs centred on the peak of each trace's window"


def markdown(
    summary: Mapping[str, Any],
    mode: Mode,
    policies: Sequence[str],
    meta: Mapping[str, Any],
    contenders: Sequence[str] = (),
    reference: Sequence[str] = (),
    per_app: Mapping[tuple[str, str, str], Any] | None = None,
    plots_dir: str = "benchmarks",
) -> str:
    """The BENCHMARKS.md ``policy`` section: the run, the plan's cells per scenario with their cost, how to read
    the tables, then a part per scenario: per app the equal-CPU comparison (the headline), the offline reference,
    the guardrail counters, the plots in ``plots_dir/<scenario>/``, the commands that reproduce each row and
    every stack's full row. ``per_app``: per cell of several apps, each stack's per-app p95 and failed %
    (:func:`per_app_figures`)."""
    from .pareto import REFERENCE_PRICES

    res = summary["results"]
    cells = summary["cells"]
    n_base = meta.get("baseline_settings")
    sweep = f"the {mode.sweep} sweep" + (f" ({n_base} baseline settings)" if n_base else "")
    samples = (
        "the simulator's default 2,000 sampled user requests per minute"
        if mode.n_samples is None
        else f"{mode.n_samples:,} sampled user requests per minute"
    )
    lines = [
        "## Policy benchmark (`make bench" + ("-quick" if mode.name == "quick" else "") + "`)",
        "",
        f"Generated by `python -m policy.bench --{mode.name}` on {meta['date']} in **{meta['wall_min']:.1f} min** "
        f"wall, start to end ({meta['runs']} simulations, {meta['cpu_min']:.1f} CPU-minutes, Ray on {meta['jobs']} "
        f"CPUs; machine load average {meta.get('load', 0.0):.1f} at the start, the machine shared with other work). "
        f"Plan: `{mode.plan}`, mode `{mode.name}`: seeds {', '.join(map(str, mode.seeds))}; {_length_text(mode)}; "
        f"{samples}; {sweep} and the offline reference at prices "
        + ", ".join(f"{p:g}" for p in REFERENCE_PRICES)
        + f". Each figure: mean ± half-width of the 95 % confidence interval over {summary['seeds']} seeds (Student "
        "t). Machine-readable: `summary.json` (schema 3); the method, the plan and the scenarios: "
        "docs/benchmarks.md.",
        "",
    ]
    if mode.name == "quick":
        lines += [QUICK_TRADES, ""]
    for p, why in (meta.get("skipped") or {}).items():
        lines += [f"Not run (the stack cannot be built here): `{p}`: {why}", ""]
    cpu_by_scn = meta.get("cpu_min_by_scenario") or {}
    runs_by_scn = meta.get("runs_by_scenario") or {}
    rows = []
    for scn, apps in cells.items():
        parts = []
        utils = []
        for app, traces in apps.items():
            role = next(iter(traces.values()))["role"]
            parts.append(f"{app}{' (' + role + ')' if role else ''} × {', '.join(traces)}")
            for trace in traces:
                u = summary["node_cpu_util_pct"][scn][app][trace]
                ref_stack = "default-kube-scheduler+hpa" if "default-kube-scheduler+hpa" in u else next(iter(u))
                utils.append((np.mean([x["mean"] for x in u[ref_stack]]), np.mean([x["p95"] for x in u[ref_stack]])))
        rows.append(
            [
                f"[`{scn}`](#scenario-{scn.replace('.', '')})",
                summary["scenarios"][scn]["family"],
                "; ".join(parts),
                str(runs_by_scn.get(scn, "")),
                f"{cpu_by_scn[scn]:.1f}" if scn in cpu_by_scn else "",
                f"{np.mean([u[0] for u in utils]):.0f} / {np.mean([u[1] for u in utils]):.0f}",
            ]
        )
    lines += [
        _table(
            rows,
            ["scenario", "family", "cells: app (role) × traces", "runs", "CPU-min", "node CPU % mean / p95 (HPA)"],
        ),
        "",
        "How to read the tables. **At equal CPU to the best baseline front** (the headline): each stack's p95 latency "
        "and failed requests against the front of every baseline setting (HPA targets 40-90 %, threshold-autoscaler "
        "grid points, NetworkAware, Trimaran and LowNodeUtilization knobs, each placement baseline also with an HPA), "
        "interpolated linearly at the stack's CPU core-hours. Δ = stack − front with its 95 % CI over seeds "
        '(paired: same seeds, same requests); ratio = stack / front with the CI of Δ carried over. "beyond": the '
        'stack spends more CPU than the costliest front point, compared with it; "below the front\'s CPU": no '
        "baseline setting is that cheap. *share*: the share of the offline reference's gain over the tuned HPA "
        "front that the stack captures at its CPU (0 % = tuned HPA, 100 % = the reference, above 100 % = better than "
        'the reference); "—" where the reference gains less than 5 % (and under 1 ms of p95 or 0.1 point of '
        "failures) over tuned HPA there, or a curve does not reach the stack's CPU. **The offline reference** "
        "(`offline-reference`, policy/sim/reference.py): perfect foresight of the request rates and placement from "
        "a MIP solved by HiGHS (MIP gap: the largest relative gap HiGHS proved over the run's solves, 0 = optimal "
        'for the MIP; "not solved": solves without a placement, placed by kube-scheduler\'s default scoring); it is '
        "an upper bound only as far as its surrogates hold (its MIP sees the classic three-class network, not a "
        "scenario's per-pair delays and links). **Guardrails**: per run, how often each of a learned stack's "
        "guardrails changed a target (`guardrail_saturation_shield`: the saturation shield raised a replica target; "
        "`guardrail_stabilization`: scale-down stabilisation held one) and how often its extender failed open "
        "(`extender_failed_open`: neutral scores), mean ± 95 % CI over seeds.",
        "",
    ]
    for scn, apps in res.items():
        lines += _scenario_markdown(
            summary, scn, apps, mode, policies, contenders, reference, per_app or {}, f"{plots_dir}/{scn}"
        )
    return "\n".join(lines)


def _scenario_markdown(
    summary: Mapping[str, Any],
    scn: str,
    apps: Mapping[str, Any],
    mode: Mode,
    policies: Sequence[str],
    contenders: Sequence[str],
    reference: Sequence[str],
    per_app: Mapping[tuple[str, str, str], Any],
    plots_dir: str,
) -> list[str]:
    cells = summary["cells"][scn]
    info = summary["scenarios"][scn]
    first = next(iter(next(iter(cells.values())).values()))
    lines = [
        f"### Scenario `{scn}`",
        "",
        f"Family *{info['family']}*: {info['description']}. Runs: {first['minutes']} minutes, "
        + ", ".join(
            f"{app} × {trace} from minute {c['offset_min']} on {c['nodes']} nodes"
            for app, traces in cells.items()
            for trace, c in traces.items()
        )
        + f"; {first['samples']:,} sampled user requests per minute.",
        "",
    ]
    reproduce: list[str] = []
    for app, traces in apps.items():
        rows = []
        for trace in traces:
            c = cells[app][trace]
            for s in contenders:
                eq = summary["equal_cpu"].get(scn, {}).get(app, {}).get(trace, {}).get(s)
                if eq is None:
                    continue
                sh = summary["reference_share"][scn][app][trace][s]
                cell = summary["results"][scn][app][trace][s]
                rows.append(
                    [
                        trace,
                        f"**{s}**" if s == "hrl-scheduler" else s,
                        _fmt(cell["cpu_core_hours"], 2),
                        _fmt(cell["latency_p95_ms"], 1),
                        *_eq_cell(eq["latency_p95_ms"], 1),
                        _fmt(cell["failed_pct"], 2),
                        *_eq_cell(eq["failed_pct"], 2),
                        _share(sh["latency_p95_ms"]),
                        _share(sh["failed_pct"]),
                    ]
                )
                reproduce.append(
                    c["command"].replace("{stack}", s).replace("{seed}", "S")
                    + f"  # S in {','.join(map(str, mode.seeds))}"
                )
        if not rows:
            continue
        role = _role_text(next(iter(cells[app].values()))["role"])
        lines += [f"#### {app}{' (' + role + ')' if role else ''}: equal CPU", ""]
        lines.append(
            _table(
                rows,
                [
                    "trace",
                    "stack",
                    "CPU core-h",
                    "p95 ms",
                    "front p95 ms",
                    "Δ p95 ms",
                    "p95 ratio",
                    "failed %",
                    "front failed %",
                    "Δ failed %",
                    "failed ratio",
                    "share p95",
                    "share failed",
                ],
            )
        )
        lines.append("")
    # the offline reference
    ref_rows, not_run = [], []
    for app, traces in apps.items():
        for trace, cell in traces.items():
            why = cells[app][trace]["reference_not_run"]
            if why:
                not_run.append(f"{app} × {trace}: {why}")
                continue
            for s in reference:
                if s not in cell:
                    continue
                mip = summary["reference_mip"].get(scn, {}).get(app, {}).get(trace, {}).get(s)
                ref_rows.append(
                    [
                        app,
                        trace,
                        s,
                        _fmt(cell[s]["cpu_core_hours"], 2),
                        _fmt(cell[s]["latency_p95_ms"], 1),
                        _fmt(cell[s]["failed_pct"], 2),
                        "—" if mip is None else f"{100 * mip['mip_gap_max']:.2f} %",
                        "—" if mip is None else f"{mip['unsolved']:.0f} of {mip['solves']:.0f}",
                    ]
                )
    if ref_rows:
        lines += [
            "**The offline reference**:",
            "",
            _table(
                ref_rows, ["app", "trace", "setting", "CPU core-h", "p95 ms", "failed %", "MIP gap (max)", "not solved"]
            ),
            "",
        ]
    for why in not_run:
        lines += [f"**The offline reference** was not run for {why}.", ""]
    # the guardrail counters
    cnt = summary["counters"].get(scn, {})
    names = sorted({n for a in cnt.values() for t in a.values() for s in t.values() for n in s})
    g_rows = []
    for app, traces in cnt.items():
        for trace, stacks in traces.items():
            for s, cs in stacks.items():
                g_rows.append(
                    [app, trace, f"**{s}**" if s == "hrl-scheduler" else s]
                    + [_fmt(cs[n], 1) if n in cs else "—" for n in names]
                )
    if g_rows:
        lines += ["**Guardrails** (per run):", "", _table(g_rows, ["app", "trace", "stack", *names]), ""]
    # several apps: each app's own figures
    for app, traces in apps.items():
        for trace in traces:
            figs = per_app.get((scn, app, trace))
            if not figs:
                continue
            names_a = list(next(iter(figs.values())))
            rows = []
            for s in [*policies, *[r for r in reference if r not in policies]]:
                if s not in figs:
                    continue
                rows.append(
                    [f"**{s}**" if s == "hrl-scheduler" else s]
                    + [
                        "—" if figs[s][a][m] is None else _fmt(figs[s][a][m], 1 if m == "latency_p95_ms" else 2)
                        for a in names_a
                        for m in ("latency_p95_ms", "failed_pct")
                    ]
                )
            lines += [
                "**Each app's own figures** (p95 ms and failed %, the main setting of each stack):",
                "",
                _table(rows, ["stack", *[f"{a} {h}" for a in names_a for h in ("p95 ms", "failed %")]]),
                "",
            ]
    pngs = [f"`{plots_dir}/pareto_{_fname(a)}.png`" for a in apps]
    traces_all = list(dict.fromkeys(t for a in apps.values() for t in a))
    lines += [
        "Plots: Pareto fronts (p95 and failed % against CPU core-hours, `hrl-scheduler` in red) "
        + ", ".join(pngs)
        + f"; per metric `{plots_dir}/latency_p95.png`, `{plots_dir}/failed_pct.png`, "
        f"`{plots_dir}/cpu_core_hours.png`; "
        "latency CDFs counting failed requests at the timeout: "
        + ", ".join(f"`{plots_dir}/latency_cdf_{_fname(t)}.png`" for t in traces_all)
        + ".",
        "",
    ]
    if reproduce:
        lines += [
            "<details><summary>Reproduce a row: the <code>hrl-policy simulate</code> command of each equal-CPU row "
            "(one run per seed)</summary>",
            "",
            "```sh",
            *reproduce,
            "```",
            "",
            "</details>",
            "",
        ]
    rows = []
    for app, traces in apps.items():
        for trace, pols in traces.items():
            for p in policies:
                if p in pols:
                    util = summary["node_cpu_util_pct"][scn][app][trace][p]
                    um = float(np.mean([u["mean"] for u in util]))
                    u95 = float(np.mean([u["p95"] for u in util]))
                    rows.append(
                        [app, trace, p] + [_fmt(pols[p][k], d) for k, _h, d in _COLUMNS] + [f"{um:.0f} / {u95:.0f}"]
                    )
    lines += [
        "<details><summary>Every stack (the main settings; every sweep setting is in summary.json)</summary>",
        "",
        _table(rows, ["app", "trace", "policy"] + [h for _k, h, _d in _COLUMNS] + ["node CPU % mean / p95"]),
        "",
        "</details>",
        "",
    ]
    return lines


def per_app_figures(results: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str, str], Any]:
    """Per cell of several apps: ``{stack: {app: {"latency_p95_ms", "failed_pct": {"mean", "ci95"} or None}}}``
    over seeds, from the run records' ``apps``."""
    out: dict[tuple[str, str, str], Any] = {}
    for (scn, app, trace, policy), rs in _per_seed(results).items():
        if "apps" not in rs[0]:
            continue
        figs = {}
        for a in rs[0]["apps"]:
            figs[a] = {}
            for m in ("latency_p95_ms", "failed_pct"):
                vals = [r["apps"][a][m] for r in rs]
                figs[a][m] = None if any(v is None for v in vals) else mean_ci95(vals)
        out.setdefault((scn, app, trace), {})[policy] = figs
    return out


def _view(summary: Mapping[str, Any], scn: str) -> dict[str, Any]:
    """One scenario's part of the summary in the shape :mod:`policy.bench.plots` draws (per app and trace)."""
    return {k: summary[k].get(scn, {}) for k in ("results", "fronts")}


def plots(
    summary: Mapping[str, Any],
    results: Sequence[Mapping[str, Any]],
    policies: Sequence[str],
    baselines: Sequence[str],
    contenders: Sequence[str],
    reference: Sequence[str],
    out: Path,
) -> list[Path]:
    """Every plot of :mod:`policy.bench.plots`, per scenario into ``out/<scenario>/``: ``pareto_<app>.png``,
    ``latency_p95.png``, ``failed_pct.png``, ``cpu_core_hours.png``, ``latency_cdf_<trace>.png``."""
    from . import plots as pl

    written: list[Path] = []
    shown = [*policies, *[s for s in reference if s not in policies]]
    for scn in summary["results"]:
        d = out / scn
        d.mkdir(parents=True, exist_ok=True)
        view = _view(summary, scn)
        hists: dict[tuple[str, str, str], np.ndarray] = {}
        failed: dict[tuple[str, str, str], float] = {}
        timeouts: dict[str, float] = {}
        for r in results:
            if r.get("scenario", BASELINE_SCENARIO) != scn:
                continue
            k = (r["app"], r["trace"], r["policy"])
            hists[k] = hists.get(k, 0) + np.asarray(r["hist"])
            failed[k] = failed.get(k, 0.0) + float(r["failed_requests"])
            timeouts[r["app"]] = float(r["timeout_ms"])
        apps = list(view["results"])
        traces = list(dict.fromkeys(t for a in view["results"].values() for t in a))
        for t in traces:
            apps_t = [a for a in apps if t in view["results"][a]]
            written.append(
                pl.latency_cdfs(
                    hists,
                    failed,
                    timeouts,
                    HIST_EDGES_MS,
                    apps_t,
                    t,
                    policies,
                    baselines,
                    d / f"latency_cdf_{_fname(t)}.png",
                    title=f"{scn}: ",
                )
            )
        for metric, label, fname in (
            ("latency_p95_ms", "p95 latency (ms)", "latency_p95.png"),
            ("failed_pct", "failed requests (%)", "failed_pct.png"),
            ("cpu_core_hours", "CPU core-hours requested", "cpu_core_hours.png"),
        ):
            written.append(pl.metric_panels(view, shown, baselines, metric, label, d / fname, title=f"{scn}: "))
        sweep = sorted({s for a in view["results"].values() for c in a.values() for s in c if s in baselines})
        for app in apps:
            written.append(
                pl.pareto(view, app, contenders, sweep, reference, d / f"pareto_{_fname(app)}.png", title=f"{scn}: ")
            )
    return written


# ---- the threshold autoscaler's grid search --------------------------------------------------------------


def _tune_task(
    app: str, trace: str, seed: int, params_json: Sequence[str], minutes: int | None, n_samples: int | None
) -> dict[str, Any]:
    """One tuning run set: the fixed-replica reference and every candidate on one (app, trace, seed). The
    initial placement (the same for all: same seed, same default profile) is computed once and copied."""
    import copy
    import copyreg
    import types

    # the frozen state types keep their maps read-only (MappingProxyType), which deepcopy cannot copy by
    # default: copy them through a plain dict
    copyreg.pickle(types.MappingProxyType, lambda m: (types.MappingProxyType, (dict(m),)))
    from policy.baselines.threshold import ThresholdParams, tuning_cost
    from policy.sim.engine import SimConfig, Simulation
    from policy.sim.run import cluster_for, trace_rps
    from policy.sim.stacks import StackContext, default_kube_scheduler, threshold_hook

    spec = _app(app)
    rps = trace_rps(spec, trace, minutes, window_offset(trace, minutes))
    cluster = cluster_for(spec)
    kw = {} if n_samples is None else {"n_samples": n_samples}
    cfg = SimConfig(minutes=len(rps), seed=seed, **kw)
    base = Simulation(spec, rps, cluster, default_kube_scheduler(StackContext(spec, cluster, seed, cfg)).scheduler, cfg)
    base.cluster.reconcile(0.0)
    base.schedule_pending()  # run() starts with the same two calls, which then find nothing to do
    ref = copy.deepcopy(base).run().metrics
    out = []
    for pj in params_json:
        params = ThresholdParams.model_validate(json.loads(pj))
        sim = copy.deepcopy(base)
        sim.hooks = (threshold_hook(spec, params),)
        out.append((pj, tuning_cost(sim.run().metrics, ref["cpu_core_hours"])))
    return {"app": app, "costs": out}


def tune(
    apps: Sequence[str],
    traces: Sequence[str],
    minutes: int | None = 30,
    n_samples: int | None = 300,
    write: bool = True,
    use_ray: bool = True,
) -> dict[str, Any]:
    """Grid-search the threshold autoscaler per app on :data:`TUNING_SEEDS` (disjoint from the evaluation
    seeds 0-4) over ``traces``; write each app's best parameters to ``threshold-autoscaler.yaml`` next to
    its app.yaml. The runs are Ray tasks in the current Ray session (:class:`policy.bench.runner.RaySession`),
    or run here one by one with ``use_ray=False``.
    Returns ``{app: {"best": params, "table": [(params, mean cost)]}}``."""
    import yaml
    from pydantic.alias_generators import to_camel
    from tqdm import tqdm

    from policy.baselines.threshold import GRID, candidates

    cands = [c.model_dump_json(include={"u_hi", "u_lo", "step_out", "step_in", "cooldown_min"}) for c in candidates()]
    tasks = [(a, t, s, tuple(cands), minutes, n_samples) for a in apps for t in traces for s in TUNING_SEEDS]
    tasks.sort(key=lambda t: t[0] != "alibaba")
    if use_ray:
        from .runner import run_tasks

        results = run_tasks(_tune_task, tasks, desc="tune")
    else:
        results = [_tune_task(*t) for t in tqdm(tasks, desc="tune", unit="run", file=sys.stderr)]
    report: dict[str, Any] = {}
    for app in apps:
        costs: dict[str, list[float]] = {}
        for r in results:
            if r["app"] == app:
                for pj, c in r["costs"]:
                    costs.setdefault(pj, []).append(c)
        table = sorted(((json.loads(pj), float(np.mean(v))) for pj, v in costs.items()), key=lambda t: t[1])
        order = {pj: i for i, pj in enumerate(cands)}
        best_cost = table[0][1]
        best = min((pj for pj, v in costs.items() if float(np.mean(v)) == best_cost), key=lambda pj: order[pj])
        best_params = json.loads(best)
        report[app] = {"best": best_params, "table": table}
        if write:
            spec = _app(app)
            path = Path(spec.source).parent / "threshold-autoscaler.yaml"
            doc = {
                "apiVersion": "hrl-scheduler.io/v1alpha1",
                "kind": "ThresholdAutoscaler",
                **{to_camel(k): best_params[k] for k in ("u_hi", "u_lo", "step_out", "step_in", "cooldown_min")},
                "tuning": {
                    "command": "python -m policy.bench --tune",
                    "seeds": list(TUNING_SEEDS),
                    "traces": list(traces),
                    "minutes": minutes,
                    "nSamples": n_samples,
                    "grid": {to_camel(k): list(v) for k, v in GRID.items()},
                    "objective": "mean over runs of slo_violation_pct + 5 failed_pct + 50 "
                    "cpu_core_hours / cpu_core_hours(default-kube-scheduler)",
                    "cost": round(best_cost, 3),
                },
            }
            path.write_text(
                "# Tuned by `python -m policy.bench --tune` (policy/baselines/threshold.py); "
                "do not edit by hand.\n" + yaml.safe_dump(doc, sort_keys=False),
                encoding="utf-8",
            )
            print(f"tune: {app}: {best_params} (cost {best_cost:.2f}) -> {path}", file=sys.stderr)
    return report


# ---- the command ---------------------------------------------------------------------------------------------


def unavailable_stacks(policies: Sequence[str], cell: Cell) -> dict[str, str]:
    """The stacks among ``policies`` whose factory fails in ``cell`` (its scenario's cluster and app), with the
    one-line reason (each factory is called once; its ``close()`` too)."""
    from policy.sim.engine import SimConfig
    from policy.sim.scenario import build, resolve_app
    from policy.sim.stacks import StackContext, build_stack

    scn = _scenario(cell.scenario)
    run = build(scn, app=None if cell.app is None else _app(resolve_app(cell.app, scn)), trace=cell.trace, minutes=1)
    out = {}
    for p in policies:
        try:
            ctx = StackContext(run.app, run.cluster, 0, SimConfig(minutes=1), rps=np.zeros_like(run.rps))
            built = build_stack(p, ctx)
            if built.close is not None:
                built.close()
        except Exception as exc:  # noqa: BLE001 - any failure makes the stack unavailable
            out[p] = " ".join(str(exc).split()) or type(exc).__name__
    return out


def _split(v: str | None) -> list[str] | None:
    return None if v is None else [x for x in v.split(",") if x]


def _fail(msg: str) -> SystemExit:
    return SystemExit("policy.bench: " + " ".join(str(msg).split()))


def main(argv: Sequence[str] | None = None) -> int:
    from policy.config import ConfigError

    ap = argparse.ArgumentParser(prog="python -m policy.bench", description=__doc__.split("\n\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--quick", action="store_true", help="the plan's quick mode (make bench-quick, < 15 min on 2 cores)")
    g.add_argument("--full", action="store_true", help="the plan's full mode (make bench; hours)")
    g.add_argument("--tune", action="store_true", help="grid-search the threshold autoscaler per app")
    ap.add_argument("--plan", default=None, help="a bench plan file (default: policy/data/bench/plan.yaml)")
    ap.add_argument("--scenarios", default=None, help="comma-separated scenario names or files: keep those cells")
    ap.add_argument("--apps", default=None, help="comma-separated app names or app.yaml paths: keep those cells")
    ap.add_argument("--traces", default=None, help="comma-separated trace names or CSV paths: keep those cells")
    ap.add_argument(
        "--policies", default=None, help="comma-separated stacks (default: the plan's and every registered)"
    )
    ap.add_argument(
        "--no-sweep",
        action="store_true",
        help="run only the stacks named, without the baselines' knob sweeps and the offline reference",
    )
    ap.add_argument("--seeds", type=int, default=None, help="number of seeds (0..N-1; default: the plan's)")
    ap.add_argument("--minutes", type=int, default=None, help="minutes per run (default: the plan's)")
    ap.add_argument("--samples", type=int, default=None, help="sampled user requests per minute (default: the plan's)")
    ap.add_argument("--jobs", type=int, default=None, help="CPUs of the local Ray (default: this machine's cores)")
    ap.add_argument("--ray-address", default=None, help="run on this Ray cluster (e.g. auto, ray://HOST:10001)")
    ap.add_argument("--no-ray", action="store_true", help="run every simulation in this process, one by one")
    ap.add_argument("--out", default=None, help="output folder (default: benchmarks/ for the standard run)")
    ap.add_argument(
        "--resume",
        action="store_true",
        help="reuse the runs of an interrupted benchmark with the same arguments (journal: "
        "out/bench-runs/runs-<mode>.jsonl, or runs-<mode>.jsonl in --out); without it the journal "
        "starts afresh",
    )
    args = ap.parse_args(argv)
    t_start = time.time()
    for opt in ("jobs", "seeds", "minutes", "samples"):
        v = getattr(args, opt)
        if v is not None and v < 1:
            raise _fail(f"--{opt}: must be >= 1, got {v}")
    if args.no_ray and args.ray_address:
        raise _fail("--no-ray and --ray-address exclude each other")

    from policy.sim.stacks import REFERENCE_STACKS, available_stacks, parse_stack_name
    from policy.sim.traces import load_trace

    from .pareto import BASELINE_FAMILIES, sweep_stacks
    from .runner import RaySession

    scenarios, apps, traces = _split(args.scenarios), _split(args.apps), _split(args.traces)
    try:
        for a in apps or ():
            _app(a)  # fail fast on a bad app, trace or scenario
        for t in traces or ():
            load_trace(t)
        for s in scenarios or ():
            _scenario(s)
    except (ValueError, OSError) as exc:
        raise _fail(str(exc)) from None
    session = contextlib.nullcontext() if args.no_ray else RaySession(args.ray_address, args.jobs)
    if args.tune:
        with session:
            tune(
                [_app(a).name if a in APPS else a for a in apps or APPS],
                traces or list(TRACES),
                use_ray=not args.no_ray,
            )
        return 0
    name = "quick" if args.quick else "full"
    try:
        plan = load_plan(args.plan)
        spec = plan.mode(name)
        cells = plan_cells(plan, name, scenarios=scenarios, apps=apps, traces=traces, minutes=args.minutes)
    except ConfigError as exc:
        raise SystemExit("\n".join("policy.bench: " + line for line in exc.lines())) from None
    except ValueError as exc:
        raise _fail(str(exc)) from None
    if not cells:
        raise _fail("the selection leaves no cell to run (see --scenarios, --apps, --traces)")
    plan_path = Path(plan.source).resolve()
    mode = Mode(
        name,
        tuple(range(args.seeds)) if args.seeds else tuple(spec.seeds),
        args.minutes if args.minutes else spec.minutes,
        args.samples if args.samples else spec.samples,
        "none" if args.no_sweep else spec.sweep,
        str(plan_path.relative_to(ROOT)) if plan_path.is_relative_to(ROOT) else str(plan_path),
    )
    stacks = available_stacks()
    planned = list(plan.spec.stacks)
    policies = (
        _split(args.policies) or []
        if args.policies
        else [*planned, *sorted(set(stacks) - set(planned) - set(REFERENCE_STACKS))]
    )
    unknown = [p for p in policies if parse_stack_name(p)[0] not in stacks]
    if unknown and args.policies:
        raise _fail(f"unknown stack(s) {unknown} (known: {', '.join(sorted(stacks))})")
    # a planned stack that is not registered here, or a registered one that cannot be built (e.g. a learned stack
    # whose bundle is not trained yet) is left out of a default run with a warning, and is an error when asked for
    # by name
    skipped = dict.fromkeys(
        unknown, "not a registered stack (built-in or an entry point of group hrl_scheduler.stacks)"
    )
    skipped |= unavailable_stacks([p for p in policies if p not in unknown], cells[0])
    if skipped and args.policies:
        raise _fail("; ".join(f"{p}: {why}" for p, why in skipped.items()))
    for p, why in skipped.items():
        print(f"policy.bench: warning: skipping stack {p}: {why}", file=sys.stderr)
    policies = [p for p in policies if p not in skipped]
    sweeps = {} if mode.sweep == "none" else sweep_stacks(mode.sweep)
    reference = list(sweeps.get("offline-reference", ()))
    baselines = [p for p in policies if parse_stack_name(p)[0] in BASELINE_FAMILIES]
    for fam, names in sweeps.items():
        if fam != "offline-reference":
            baselines += [n for n in names if n not in baselines]
    contenders = [p for p in policies if p not in baselines and parse_stack_name(p)[0] not in REFERENCE_STACKS]
    reference += [p for p in policies if parse_stack_name(p)[0] in REFERENCE_STACKS and p not in reference]
    run_stacks = list(dict.fromkeys([*policies, *baselines, *reference]))
    standard = (
        args.plan is None
        and args.out is None
        and scenarios is None
        and apps is None
        and traces is None
        and args.seeds is None
        and args.minutes is None
        and args.samples is None
        and not args.no_sweep
        and set(planned) <= set(policies) | set(skipped)
    )
    out = Path(args.out) if args.out else (BENCH_DIR if standard else ROOT / "out" / "bench")

    def cost(cell: Cell, policy: str) -> float:
        n = sum(len(_app(a).workloads) for a in ([cell.app] if cell.app else _scenario_apps(cell)))
        return n * (3.0 if parse_stack_name(policy)[0] in REFERENCE_STACKS else 1.0)

    tasks = []
    for c in cells:
        for p in run_stacks:
            if parse_stack_name(p)[0] in REFERENCE_STACKS:
                if len(c.apps) > 1:
                    continue  # REFERENCE_ONE_APP
                # the reference's seeds in one task: its plan is solved once per cell and price
                batches = [tuple(mode.seeds)]
            else:
                batches = [(s,) for s in mode.seeds]
            for seeds in batches:
                args_ = (c.scenario, c.app, c.trace, p, seeds, c.minutes, c.offset_min, mode.n_samples)
                tasks.append((cost(c, p) * len(seeds), args_))
    # the longest runs first, so the workers finish together; the order is fixed, so results are too
    tasks = [t for _c, t in sorted(tasks, key=lambda ct: -ct[0])]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    t0 = time.time()
    journal = (ROOT / "out" / "bench-runs" if standard else out) / f"runs-{mode.name}.jsonl"
    with session:
        cpus = _ray_cpus() if not args.no_ray else 1
        results = run_all(tasks, f"bench-{mode.name}", journal, args.resume, use_ray=not args.no_ray)
    wall = time.time() - t0
    summary = build_summary(results, mode, cells, baselines, reference, contenders, run_stacks)
    validate_summary(summary)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    written = plots(summary, results, policies, baselines, contenders, reference, out)
    cpu_by_scn: dict[str, float] = {}
    runs_by_scn: dict[str, int] = {}
    for r in results:
        cpu_by_scn[r["scenario"]] = cpu_by_scn.get(r["scenario"], 0.0) + r["cpu_s"] / 60
        runs_by_scn[r["scenario"]] = runs_by_scn.get(r["scenario"], 0) + 1
    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "wall_min": (time.time() - t_start) / 60,  # the whole command: plan, Ray start, runs, summary, plots
        "runs": len(results),
        "jobs": cpus,
        "load": load,
        "cpu_min": sum(r["cpu_s"] for r in results) / 60,
        "cpu_min_by_scenario": cpu_by_scn,
        "runs_by_scenario": runs_by_scn,
        "baseline_settings": len(baselines),
        "skipped": skipped,
    }
    plots_dir = str(out.resolve().relative_to(ROOT)) if out.resolve().is_relative_to(ROOT) else str(out)
    md = markdown(summary, mode, policies, meta, contenders, reference, per_app_figures(results), plots_dir)
    if standard:
        from .markdown import write_section

        write_section("policy", md)
    else:
        (out / "BENCHMARKS-policy.md").write_text(md + "\n", encoding="utf-8")
    timing = ", ".join(f"{s} {m:.1f}" for s, m in cpu_by_scn.items())
    print(
        f"policy.bench: {len(results)} runs in {wall / 60:.1f} min wall, {meta['cpu_min']:.1f} CPU-minutes "
        f"({timing}); wrote {out / 'summary.json'}, {len(written)} plots"
        + (", BENCHMARKS.md section 'policy'" if standard else f", {out / 'BENCHMARKS-policy.md'}"),
        file=sys.stderr,
    )
    return 0


def _scenario_apps(cell: Cell) -> list[str]:
    from policy.sim.scenario import resolve_app

    scn = _scenario(cell.scenario)
    return [resolve_app(a.app, scn) for a in scn.spec.apps]


def _ray_cpus() -> int:
    import ray

    return int(ray.cluster_resources().get("CPU", 0))


if __name__ == "__main__":
    sys.exit(main())
