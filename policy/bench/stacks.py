"""`make bench` / `make bench-quick`: every scheduling stack × application × load trace × seed in the simulator
→ the ``policy`` section of BENCHMARKS.md, ``benchmarks/summary.json`` and the plots in ``benchmarks/``.

    python -m policy.bench --quick          # make bench-quick: 3 seeds, 30-minute windows around each peak
    python -m policy.bench --full           # make bench: 5 seeds, the whole 6-hour windows
    python -m policy.bench --tune           # grid-search the threshold autoscaler (tuning seeds)
    python -m policy.bench --full --resume  # finish an interrupted run (finished runs are journaled)
    python -m policy.bench --quick --apps my/app.yaml --traces my.csv --policies my-stack --out out/mine

Every stack named runs with, per cell, the baselines' knob sweeps and the offline reference
(:mod:`policy.bench.pareto`, :mod:`policy.sim.reference`; ``--no-sweep`` leaves them out). The simulations are Ray
tasks (:mod:`policy.bench.runner`): on the cluster at ``--ray-address``, else on a local Ray started on this
machine's cores (``--jobs N`` CPUs) and shut down afterwards; ``--no-ray`` runs them here one by one. Results are
aggregated in task order (by seed), so the same matrix writes a byte-identical ``summary.json``.

``summary.json`` (schema 2, documented in docs/benchmarks.md, checked by :func:`validate_summary`): per app,
trace and stack the eight metrics as ``{"mean", "ci95"}`` (``ci95`` the half-width of the 95 % confidence
interval of the mean over seeds, Student t, 0 when all seeds agree), per-run node CPU utilization, the Pareto
fronts, every contender at equal CPU to the best baseline front, its share of the reference's gain over tuned HPA,
the reference's MIP gaps and the ``hrl-policy simulate`` command of each cell. Only the standard run (the six
built-in apps, the three named traces, the six baseline stacks or more, with the sweeps) writes BENCHMARKS.md and
``benchmarks/``; any other selection writes to ``--out`` (default ``out/bench``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from policy.sim.engine import METRIC_KEYS
from policy.sim.run import window_offset

__all__ = [
    "ROOT",
    "BENCH_DIR",
    "APPS",
    "TRACES",
    "TUNING_SEEDS",
    "HIST_EDGES_MS",
    "t975",
    "mean_ci95",
    "Mode",
    "QUICK",
    "FULL",
    "BASELINE_SCENARIO",
    "Cell",
    "UTIL_KEYS",
    "SUMMARY_KEYS",
    "window",
    "simulate_command",
    "node_cpu_utilization",
    "run_one",
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


APPS = (
    "online-boutique",
    "sock-shop",
    "dsb-hotel-reservation",
    "dsb-social-network",
    "dsb-media-microservices",
    "alibaba",
)


TRACES = ("nasa", "twitter", "bursty")


#: Seeds of the tuning runs (the threshold autoscaler's grid search); disjoint from every evaluation seed.
TUNING_SEEDS = (1000, 1001)


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
    """A benchmark size: seeds, minutes per run (None: the whole window), sampled requests per minute."""

    name: str
    seeds: tuple[int, ...]
    minutes: int | None
    n_samples: int | None


QUICK = Mode("quick", (0, 1, 2), 30, 1000)


FULL = Mode("full", (0, 1, 2, 3, 4), None, None)


# ---- one run (a Ray task) ------------------------------------------------------------------------------------

_APPS: dict[str, Any] = {}


def _app(name: str):
    from policy.sim.app import load_app

    if name not in _APPS:
        _APPS[name] = load_app(name)
    return _APPS[name]


#: The scenario of today's matrix (apps × traces, the setting of the simulator before scenario families).
BASELINE_SCENARIO = "baseline-2026-11"


@dataclass(frozen=True)
class Cell:
    """One cell of the bench: a scenario and, inside it, an app and a load trace. Today every cell is in the
    scenario :data:`BASELINE_SCENARIO` (the app's bench cluster, the trace scaled to the app, the default
    network); scenario families plug in here."""

    scenario: str
    app: str
    trace: str


def window(trace: str, minutes: int | None) -> tuple[int, int | None]:
    """(offset, minutes) of a run's window in the trace (:func:`window_offset`)."""
    return window_offset(trace, minutes), minutes


def simulate_command(cell: Cell, policy: str, seed: int | str, minutes: int | None, n_samples: int | None) -> str:
    """The ``hrl-policy simulate`` command that reproduces one run of the bench (``--offset`` / ``--samples``:
    the window offset and the sampled requests per minute; ``minutes`` None = the whole window)."""
    off, _ = window(cell.trace, minutes)
    parts = ["hrl-policy simulate"]
    if cell.scenario != BASELINE_SCENARIO:
        parts.append(f"--scenario {cell.scenario}")
    parts += [f"--app {cell.app}", f"--trace {cell.trace}", f"--policy '{policy}'"]
    if minutes is None:
        from policy.sim.traces import load_trace

        minutes = len(load_trace(cell.trace))
    parts.append(f"--minutes {minutes} --offset {off}")
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


def run_one(
    app: str,
    trace: str,
    policy: str,
    seed: int,
    minutes: int | None,
    n_samples: int | None,
    scenario: str = BASELINE_SCENARIO,
) -> dict[str, Any]:
    """One simulation of ``scenario`` → ``{"metrics", "hist" (latency histogram of the successful requests,
    request-weighted), "failed_requests", "served_requests", "node_cpu_util_pct", "wall_s", "cpu_s", ...}``
    (JSON-able). Raises ValueError for a scenario other than :data:`BASELINE_SCENARIO`."""
    from policy.sim.engine import SimConfig
    from policy.sim.run import cluster_for, trace_rps
    from policy.sim.stacks import run_stack

    if scenario != BASELINE_SCENARIO:
        raise ValueError(f"scenario: only {BASELINE_SCENARIO!r} is wired into the bench yet, got {scenario!r}")
    t0, c0 = time.perf_counter(), time.process_time()
    spec = _app(app)
    offset, _ = window(trace, minutes)
    # the same steps as policy.sim.run.simulate (what `hrl-policy simulate` runs)
    rps = trace_rps(spec, trace, minutes, offset)
    cluster = cluster_for(spec)
    kw = {} if n_samples is None else {"n_samples": n_samples}
    cfg = SimConfig(minutes=len(rps), seed=seed, **kw)
    util: list[np.ndarray] = []
    res = run_stack(policy, spec, rps, cluster, cfg, on_minute=lambda sim: util.append(node_cpu_utilization(sim)))
    hist, _ = np.histogram(
        np.clip(res.latency_samples_ms, HIST_EDGES_MS[0], HIST_EDGES_MS[-1]),
        bins=HIST_EDGES_MS,
        weights=res.latency_weights,
    )
    out: dict[str, Any] = {
        "scenario": scenario,
        "app": app,
        "trace": trace,
        "policy": policy,
        "seed": seed,
        "metrics": {k: float(res.metrics[k]) for k in METRIC_KEYS},
        "hist": hist.tolist(),
        "failed_requests": float(res.extra["failed_requests"]),
        "served_requests": float(res.extra["served_requests"]),
        "timeout_ms": float(spec.timeout_ms),
        "node_cpu_util_pct": _util_summary(np.array(util)),
        "minutes": len(rps),
        "nodes": cluster.nodes,
    }
    if policy.partition("@")[0] == "offline-reference":
        from policy.sim.reference import DEFAULT_PRICE_MS_PER_CORE, reference_plan
        from policy.sim.stacks import autoscaled_workloads, parse_stack_name

        price = parse_stack_name(policy)[1].get("price", DEFAULT_PRICE_MS_PER_CORE)
        plan = reference_plan(spec, rps, cluster, cfg.network, autoscaled_workloads(spec), price)  # cached
        out["reference_mip"] = plan.summary()
    out["wall_s"] = time.perf_counter() - t0
    out["cpu_s"] = time.process_time() - c0
    return out


def run_all(
    tasks: Sequence[tuple],
    desc: str = "bench",
    journal: Path | None = None,
    resume: bool = False,
    use_ray: bool = True,
) -> list[dict[str, Any]]:
    """Run ``tasks`` (argument tuples of :func:`run_one`) as Ray tasks in the current Ray session (or one by
    one in this process with ``use_ray=False``); results in the order of ``tasks`` (so aggregation is
    deterministic). ``journal`` / ``resume``: see :func:`policy.bench.runner.run_tasks`."""
    from .runner import run_tasks, task_key

    if use_ray:
        return run_tasks(run_one, tasks, desc, journal, resume)
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
        r = run_one(*t)
        r["task"] = k
        done[k] = r
        if journal is not None:
            with journal.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(r) + "\n")
    return [done[k] for k in keys]


# ---- aggregation ---------------------------------------------------------------------------------------------


def summarize(results: Iterable[Mapping[str, Any]], seeds: int) -> dict[str, Any]:
    """``{"seeds", "results": {app: {trace: {policy: {metric: {"mean", "ci95"}}}}}}`` from per-run results.
    Each cell's seeds are aggregated in seed order, so the same runs give the same bits in any order."""
    per: dict[tuple[str, str, str], list[tuple[int, Mapping[str, float]]]] = {}
    for r in results:
        per.setdefault((r["app"], r["trace"], r["policy"]), []).append((int(r.get("seed", 0)), r["metrics"]))
    out: dict[str, Any] = {}
    for (app, trace, policy), ms in per.items():
        ms = sorted(ms, key=lambda t: t[0])
        out.setdefault(app, {}).setdefault(trace, {})[policy] = {
            k: mean_ci95([m[k] for _s, m in ms]) for k in METRIC_KEYS
        }
    return {"seeds": seeds, "results": out}


def _per_seed(results: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str, str], list[Mapping[str, Any]]]:
    per: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    for r in results:
        per.setdefault((r["app"], r["trace"], r["policy"]), []).append(r)
    return {k: sorted(v, key=lambda r: int(r["seed"])) for k, v in per.items()}


def _front_json(points) -> list[dict[str, Any]]:
    return [{"stack": p.stack, "cpu_core_hours": p.cpu, "value": p.value} for p in points]


def comparisons(
    results: Sequence[Mapping[str, Any]], baselines: Sequence[str], reference: Sequence[str], contenders: Sequence[str]
) -> dict[str, Any]:
    """``{"fronts", "equal_cpu", "reference_share"}`` per app and trace (:mod:`policy.bench.pareto`)."""
    from .pareto import FRONT_METRICS, at_equal_cpu, cell_fronts, reference_share

    per = _per_seed(results)
    cells = sorted({(a, t) for a, t, _p in per}, key=lambda c: list(per).index(next(k for k in per if k[:2] == c)))
    fronts: dict[str, Any] = {}
    equal: dict[str, Any] = {}
    share: dict[str, Any] = {}
    for app, trace in cells:
        runs = {p: [r["metrics"] for r in rs] for (a, t, p), rs in per.items() if (a, t) == (app, trace)}
        fr = cell_fronts(runs, baselines, reference)
        fronts.setdefault(app, {})[trace] = {m: {k: _front_json(v) for k, v in fr[m].items()} for m in FRONT_METRICS}
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
            equal.setdefault(app, {}).setdefault(trace, {})[stack] = eq
            share.setdefault(app, {}).setdefault(trace, {})[stack] = sh
    return {"fronts": fronts, "equal_cpu": equal, "reference_share": share}


SUMMARY_KEYS = (
    "schema",
    "scenario",
    "mode",
    "seeds",
    "results",
    "node_cpu_util_pct",
    "fronts",
    "equal_cpu",
    "reference_share",
    "reference_mip",
    "commands",
)


def build_summary(
    results: Sequence[Mapping[str, Any]],
    mode: Mode,
    baselines: Sequence[str],
    reference: Sequence[str],
    contenders: Sequence[str],
    scenario: str = BASELINE_SCENARIO,
) -> dict[str, Any]:
    """The whole summary.json object (schema 2, docs/benchmarks.md) from per-run results (any order)."""
    base = summarize(results, len(mode.seeds))
    per = _per_seed(results)
    util: dict[str, Any] = {}
    mip: dict[str, Any] = {}
    commands: dict[str, Any] = {}
    for (app, trace, policy), rs in per.items():
        util.setdefault(app, {}).setdefault(trace, {})[policy] = [
            {"seed": int(r["seed"]), **r["node_cpu_util_pct"]} for r in rs
        ]
        if "reference_mip" in rs[0]:
            mip.setdefault(app, {}).setdefault(trace, {})[policy] = rs[0]["reference_mip"]
        commands.setdefault(app, {})[trace] = simulate_command(
            Cell(scenario, app, trace), "{stack}", "{seed}", mode.minutes, mode.n_samples
        )
    comp = comparisons(results, baselines, reference, contenders)
    return {
        "schema": 2,
        "scenario": scenario,
        "mode": {"name": mode.name, "minutes": mode.minutes, "n_samples": mode.n_samples, "seeds": list(mode.seeds)},
        "seeds": base["seeds"],
        "results": base["results"],
        "node_cpu_util_pct": util,
        **comp,
        "reference_mip": mip,
        "commands": commands,
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


def _cells(obj: Any, where: str):
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: must be an object")
    for app, traces in obj.items():
        if not isinstance(traces, dict):
            raise ValueError(f"{where}.{app}: must be an object")
        for trace, v in traces.items():
            yield f"{where}.{app}.{trace}", v


def validate_summary(obj: Any) -> None:
    """Raise ValueError (naming the first offending field) unless ``obj`` has exactly the summary.json shape
    of docs/benchmarks.md, every number finite and every interval >= 0. A summary of the first schema
    (``{"seeds", "results"}`` only) is accepted as it is."""
    legacy = isinstance(obj, dict) and set(obj) == {"seeds", "results"}
    if not legacy:
        _exact(obj, SUMMARY_KEYS, "summary")
        if obj["schema"] != 2:
            raise ValueError(f"summary.schema: must be 2, got {obj['schema']!r}")
        if not isinstance(obj["scenario"], str) or not obj["scenario"]:
            raise ValueError(f"summary.scenario: must be a non-empty string, got {obj['scenario']!r}")
        _exact(obj["mode"], ("name", "minutes", "n_samples", "seeds"), "summary.mode")
    if not isinstance(obj["seeds"], int) or isinstance(obj["seeds"], bool) or obj["seeds"] < 1:
        raise ValueError(f"summary.seeds: must be a positive integer, got {obj['seeds']!r}")
    for where, policies in _cells(obj["results"], "summary.results"):
        for policy, metrics in policies.items():
            _exact(metrics, METRIC_KEYS, f"{where}.{policy}")
            for k, v in metrics.items():
                _mean_ci(v, f"{where}.{policy}.{k}")
    if legacy:
        return
    from .pareto import FRONT_METRICS

    for where, policies in _cells(obj["node_cpu_util_pct"], "summary.node_cpu_util_pct"):
        for policy, runs in policies.items():
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
        for stack, metrics in stacks.items():
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
        for stack, metrics in stacks.items():
            _exact(metrics, FRONT_METRICS, f"{where}.{stack}")
            for m, v in metrics.items():
                _num(v, f"{where}.{stack}.{m}", nullable=True)
    mip_keys = ("solves", "unsolved", "mip_gap_max", "mip_gap_mean", "solve_s_total", "relaxed")
    for where, stacks in _cells(obj["reference_mip"], "summary.reference_mip"):
        for stack, v in stacks.items():
            _exact(v, mip_keys, f"{where}.{stack}")
            for k in mip_keys:
                _num(v[k], f"{where}.{stack}.{k}")


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


def markdown(
    summary: Mapping[str, Any],
    mode: Mode,
    policies: Sequence[str],
    meta: Mapping[str, Any],
    contenders: Sequence[str] = (),
    reference: Sequence[str] = (),
) -> str:
    """The BENCHMARKS.md ``policy`` section: per scenario, the equal-CPU comparison (the headline), the
    reference, the Pareto plots, then every stack's full row."""
    from tabulate import tabulate

    from policy.sim.run import PEAK_UTILIZATION, app_bench

    from .pareto import REFERENCE_PRICES

    res = summary["results"]
    lines = [
        "## Policy benchmark (`make bench" + ("-quick" if mode.name == "quick" else "") + "`)",
        "",
        f"Generated by `python -m policy.bench --{mode.name}` on {meta['date']} in {meta['wall_min']:.1f} min "
        f"({meta['runs']} simulations, {meta['cpu_min']:.1f} CPU-minutes, Ray on {meta['jobs']} CPUs; "
        f"machine load average {meta.get('load', 0.0):.1f} at the start). "
        f"Each cell: mean ± half-width of the 95 % confidence interval over {summary['seeds']} seeds "
        "(Student t). Runs: "
        + (
            "the whole 6-hour window of each trace"
            if mode.minutes is None
            else f"{mode.minutes} minutes of each trace window, centred on its peak"
        )
        + f"; traces scaled so their peak asks {PEAK_UTILIZATION:g}× the CPU the app's busiest service has at "
        "its limits with the manifest replicas; nodes spread over 3 zones. Machine-readable: "
        "`benchmarks/summary.json` (schema in docs/benchmarks.md). Stacks and the method: docs/benchmarks.md.",
        "",
    ]
    for p, why in (meta.get("skipped") or {}).items():
        lines += [f"Not run (the stack cannot be built here): `{p}`: {why}", ""]
    lines += [
        f"### Scenario `{summary['scenario']}`",
        "",
        "**At equal CPU to the best baseline front** (the headline): each stack's p95 latency and failed "
        "requests against the front of every baseline setting (HPA targets 40-90 %, threshold-autoscaler grid "
        "points, NetworkAware, Trimaran and LowNodeUtilization knobs, each placement baseline also with an HPA), "
        "interpolated linearly at the stack's CPU core-hours. Δ = stack − front with its 95 % CI over seeds "
        '(paired: same seeds, same requests); ratio = stack / front with the CI of Δ carried over. "beyond": the '
        'stack spends more CPU than the costliest front point, compared with it; "below the front\'s CPU": no '
        "baseline setting is that cheap. *share*: the share of the offline reference's gain over the tuned HPA "
        "front that the stack captures at its CPU (0 % = tuned HPA, 100 % = the reference, above 100 % = better than "
        'the reference); "—" where the reference gains less than 5 % (and under 1 ms of p95 or 0.1 point of '
        "failures) over tuned HPA there, or a curve does not reach the stack's CPU.",
        "",
    ]
    reproduce: list[str] = []
    for app, traces in res.items():
        rows = []
        for trace in traces:
            for s in contenders:
                eq = summary["equal_cpu"].get(app, {}).get(trace, {}).get(s)
                if eq is None:
                    continue
                sh = summary["reference_share"][app][trace][s]
                cell = res[app][trace][s]
                p95 = _eq_cell(eq["latency_p95_ms"], 1)
                fail = _eq_cell(eq["failed_pct"], 2)
                rows.append(
                    [
                        trace,
                        f"**{s}**" if s == "hrl-scheduler" else s,
                        _fmt(cell["cpu_core_hours"], 2),
                        _fmt(cell["latency_p95_ms"], 1),
                        *p95,
                        _fmt(cell["failed_pct"], 2),
                        *fail,
                        _share(sh["latency_p95_ms"]),
                        _share(sh["failed_pct"]),
                    ]
                )
                reproduce.append(
                    simulate_command(Cell(summary["scenario"], app, trace), s, "S", mode.minutes, mode.n_samples)
                    + f"  # S in {','.join(map(str, mode.seeds))}"
                )
        if not rows:
            continue
        lines += [f"#### {app}: equal CPU", ""]
        lines.append(
            tabulate(
                rows,
                headers=[
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
                tablefmt="github",
                disable_numparse=True,
            )
        )
        lines.append("")
    lines += [
        "**The offline reference** (`offline-reference`, policy/sim/reference.py): perfect foresight of the request "
        "rates (each minute's replicas chosen, exactly, for the surrogate queueing model at the known rate) and "
        "placement from a MIP solved by HiGHS, at prices of "
        + ", ".join(f"{p:g}" for p in REFERENCE_PRICES)
        + " ms of mean latency per requested core. MIP gap: the largest relative gap HiGHS proved over the run's "
        'solves (0 = optimal for the MIP); "not solved": solves without a placement (too large or no incumbent '
        "within the node limit; kube-scheduler's default scoring placed those pods). The reference is an upper "
        "bound only as far as its surrogates hold: a stack beating it is flagged in the equal-CPU shares (> 100 %).",
        "",
    ]
    ref_rows = []
    for app, traces in res.items():
        for trace, cell in traces.items():
            for s in reference:
                if s not in cell:
                    continue
                mip = summary["reference_mip"].get(app, {}).get(trace, {}).get(s)
                gap = "—" if mip is None else f"{100 * mip['mip_gap_max']:.2f} %"
                uns = "—" if mip is None else f"{mip['unsolved']:.0f} of {mip['solves']:.0f}"
                ref_rows.append(
                    [
                        app,
                        trace,
                        s,
                        _fmt(cell[s]["cpu_core_hours"], 2),
                        _fmt(cell[s]["latency_p95_ms"], 1),
                        _fmt(cell[s]["failed_pct"], 2),
                        gap,
                        uns,
                    ]
                )
    if ref_rows:
        lines.append(
            tabulate(
                ref_rows,
                headers=["app", "trace", "setting", "CPU core-h", "p95 ms", "failed %", "MIP gap (max)", "not solved"],
                tablefmt="github",
                disable_numparse=True,
            )
        )
        lines.append("")
    lines += [
        "Pareto plots (p95 and failed % against CPU core-hours, one file per app, `hrl-scheduler` in red): "
        + ", ".join(f"`benchmarks/pareto_{a}.png`" for a in res)
        + ". Per metric: `benchmarks/latency_p95.png`, `benchmarks/failed_pct.png`, `benchmarks/cpu_core_hours.png`; "
        "latency CDFs counting failed requests at the timeout: `benchmarks/latency_cdf_<trace>.png`.",
        "",
        "<details><summary>Reproduce a row: the <code>hrl-policy simulate</code> command of each equal-CPU row "
        "(one run per seed)</summary>",
        "",
        "```sh",
        *reproduce,
        "```",
        "",
        "</details>",
        "",
        "#### Every stack (the main settings; every sweep setting is in summary.json)",
        "",
    ]
    for app, traces in res.items():
        spec = _app(app) if app in _APPS else None
        b = app_bench(spec) if spec is not None else None
        cl = f"{b.nodes} nodes × {b.cpu_m / 1000:g} vCPU / {b.memory_gib} GiB" if b else ""
        slo = f", SLO p95 {spec.slo_p95_ms:g} ms" if spec is not None else ""
        lines += [f"##### {app} ({cl}{slo})", ""]
        rows = []
        for trace, pols in traces.items():
            for p in policies:
                if p in pols:
                    util = summary["node_cpu_util_pct"][app][trace][p]
                    um = float(np.mean([u["mean"] for u in util]))
                    u95 = float(np.mean([u["p95"] for u in util]))
                    rows.append([trace, p] + [_fmt(pols[p][k], d) for k, _h, d in _COLUMNS] + [f"{um:.0f} / {u95:.0f}"])
        lines.append(
            tabulate(
                rows,
                headers=["trace", "policy"] + [h for _k, h, _d in _COLUMNS] + ["node CPU % mean / p95"],
                tablefmt="github",
                disable_numparse=True,
            )
        )
        lines.append("")
    return "\n".join(lines)


def plots(
    summary: Mapping[str, Any],
    results: Sequence[Mapping[str, Any]],
    policies: Sequence[str],
    baselines: Sequence[str],
    contenders: Sequence[str],
    reference: Sequence[str],
    out: Path,
) -> list[Path]:
    """Every plot of :mod:`policy.bench.plots` into ``out``."""
    from . import plots as pl

    out.mkdir(parents=True, exist_ok=True)
    hists: dict[tuple[str, str, str], np.ndarray] = {}
    failed: dict[tuple[str, str, str], float] = {}
    timeouts: dict[str, float] = {}
    for r in results:
        k = (r["app"], r["trace"], r["policy"])
        hists[k] = hists.get(k, 0) + np.asarray(r["hist"])
        failed[k] = failed.get(k, 0.0) + float(r["failed_requests"])
        timeouts[r["app"]] = float(r["timeout_ms"])
    apps = list(summary["results"])
    traces = list(dict.fromkeys(t for a in summary["results"].values() for t in a))
    shown = [*policies, *[s for s in reference if s not in policies]]
    written = [
        pl.latency_cdfs(
            hists, failed, timeouts, HIST_EDGES_MS, apps, t, policies, baselines, out / f"latency_cdf_{t}.png"
        )
        for t in traces
    ]
    for metric, label, fname in (
        ("latency_p95_ms", "p95 latency (ms)", "latency_p95.png"),
        ("failed_pct", "failed requests (%)", "failed_pct.png"),
        ("cpu_core_hours", "CPU core-hours requested", "cpu_core_hours.png"),
    ):
        written.append(pl.metric_panels(summary, shown, baselines, metric, label, out / fname))
    sweep = [p for p in {s for a in summary["results"].values() for c in a.values() for s in c} if p in baselines]
    for app in apps:
        written.append(pl.pareto(summary, app, contenders, sorted(sweep), reference, out / f"pareto_{app}.png"))
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


def unavailable_stacks(policies: Sequence[str], app: Any) -> dict[str, str]:
    """The stacks among ``policies`` whose factory fails for ``app`` on its benchmark cluster, with the
    one-line reason (each factory is called once; its ``close()`` too)."""
    from policy.sim.engine import SimConfig
    from policy.sim.run import cluster_for
    from policy.sim.stacks import StackContext, build_stack

    out = {}
    for p in policies:
        try:
            ctx = StackContext(app, cluster_for(app), 0, SimConfig(minutes=1), rps=np.zeros(1))
            built = build_stack(p, ctx)
            if built.close is not None:
                built.close()
        except Exception as exc:  # noqa: BLE001 - any failure makes the stack unavailable
            out[p] = " ".join(str(exc).split()) or type(exc).__name__
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m policy.bench", description=__doc__.split("\n\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--quick", action="store_true", help="3 seeds, 30-minute windows around each trace's peak")
    g.add_argument("--full", action="store_true", help="5 seeds, whole 6-hour windows")
    g.add_argument("--tune", action="store_true", help="grid-search the threshold autoscaler per app")
    ap.add_argument("--apps", default=",".join(APPS), help="comma-separated app names or app.yaml paths")
    ap.add_argument("--traces", default=",".join(TRACES), help="comma-separated trace names or CSV paths")
    ap.add_argument("--policies", default=None, help="comma-separated stacks (default: every registered one)")
    ap.add_argument(
        "--no-sweep",
        action="store_true",
        help="run only the stacks named, without the baselines' knob sweeps and the offline reference",
    )
    ap.add_argument("--seeds", type=int, default=None, help="number of seeds (0..N-1; default by mode)")
    ap.add_argument("--minutes", type=int, default=None, help="minutes per run (default by mode)")
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
    if args.jobs is not None and args.jobs < 1:
        raise SystemExit(f"policy.bench: --jobs: must be >= 1, got {args.jobs}")
    if args.no_ray and args.ray_address:
        raise SystemExit("policy.bench: --no-ray and --ray-address exclude each other")

    from policy.sim.stacks import BENCH_STACKS, REFERENCE_STACKS, available_stacks, parse_stack_name

    from .pareto import BASELINE_FAMILIES, sweep_stacks
    from .runner import RaySession

    apps = [a for a in args.apps.split(",") if a]
    traces = [t for t in args.traces.split(",") if t]
    for a in apps:
        _app(a)  # fail fast on a bad app
    session = contextlib.nullcontext() if args.no_ray else RaySession(args.ray_address, args.jobs)
    if args.tune:
        with session:
            tune([_app(a).name if a in APPS else a for a in apps], traces, use_ray=not args.no_ray)
        return 0
    mode = QUICK if args.quick else FULL
    if args.seeds is not None or args.minutes is not None:
        mode = Mode(
            mode.name,
            tuple(range(args.seeds)) if args.seeds else mode.seeds,
            args.minutes if args.minutes else mode.minutes,
            mode.n_samples,
        )
    stacks = available_stacks()
    policies = (
        [p for p in args.policies.split(",") if p]
        if args.policies
        else [*BENCH_STACKS, *sorted(set(stacks) - set(BENCH_STACKS) - set(REFERENCE_STACKS))]
    )
    unknown = [p for p in policies if parse_stack_name(p)[0] not in stacks]
    if unknown:
        raise SystemExit(f"policy.bench: unknown stack(s) {unknown} (known: {', '.join(sorted(stacks))})")
    # a registered stack that cannot be built here (e.g. a learned stack whose bundle is not trained yet) is
    # left out of a default run with a warning, and is an error when asked for by name
    skipped = unavailable_stacks(policies, _app(apps[0]))
    if skipped and args.policies:
        raise SystemExit("policy.bench: " + "; ".join(f"{p}: {why}" for p, why in skipped.items()))
    for p, why in skipped.items():
        print(f"policy.bench: warning: skipping stack {p}: {why}", file=sys.stderr)
    policies = [p for p in policies if p not in skipped]
    sweeps = {} if args.no_sweep else sweep_stacks(mode.name)
    reference = list(sweeps.get("offline-reference", ()))
    baselines = [p for p in policies if parse_stack_name(p)[0] in BASELINE_FAMILIES]
    for fam, names in sweeps.items():
        if fam != "offline-reference":
            baselines += [n for n in names if n not in baselines]
    contenders = [p for p in policies if p not in baselines and parse_stack_name(p)[0] not in REFERENCE_STACKS]
    reference += [p for p in policies if parse_stack_name(p)[0] in REFERENCE_STACKS and p not in reference]
    run_stacks = list(dict.fromkeys([*policies, *baselines, *reference]))
    standard = (
        apps == list(APPS) and traces == list(TRACES) and set(BENCH_STACKS) <= set(policies) and not args.no_sweep
    )
    out = Path(args.out) if args.out else (BENCH_DIR if standard else ROOT / "out" / "bench")
    names = {a: _app(a).name for a in apps}
    # the longest runs first, so the workers finish together; the order is fixed, so results are too
    tasks = [
        (a, t, p, s, mode.minutes, mode.n_samples) for a in apps for t in traces for p in run_stacks for s in mode.seeds
    ]
    tasks.sort(key=lambda t: -len(_app(t[0]).workloads))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    t0 = time.time()
    journal = (ROOT / "out" / "bench-runs" if standard else out) / f"runs-{mode.name}.jsonl"
    with session:
        cpus = _ray_cpus() if not args.no_ray else 1
        results = run_all(tasks, f"bench-{mode.name}", journal, args.resume, use_ray=not args.no_ray)
    wall = time.time() - t0
    for r in results:
        r["app"] = names[r["app"]]
    summary = build_summary(results, mode, baselines, reference, contenders)
    # stable order: apps, traces and stacks as requested
    for key in ("results", "node_cpu_util_pct"):
        summary[key] = {
            names[a]: {t: {p: summary[key][names[a]][t][p] for p in run_stacks} for t in traces} for a in apps
        }
    validate_summary(summary)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    written = plots(summary, results, policies, baselines, contenders, reference, out)
    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "wall_min": wall / 60,
        "runs": len(results),
        "jobs": cpus,
        "load": load,
        "cpu_min": sum(r["cpu_s"] for r in results) / 60,
        "skipped": skipped,
    }
    md = markdown(summary, mode, policies, meta, contenders, reference)
    if standard:
        from .markdown import write_section

        write_section("policy", md)
    else:
        (out / "BENCHMARKS-policy.md").write_text(md + "\n", encoding="utf-8")
    per_app: dict[str, float] = {}
    for r in results:
        per_app[r["app"]] = per_app.get(r["app"], 0.0) + r["cpu_s"]
    timing = ", ".join(f"{a} {s / 60:.1f}" for a, s in per_app.items())
    print(
        f"policy.bench: {len(results)} runs in {wall / 60:.1f} min wall, {sum(per_app.values()) / 60:.1f} "
        f"CPU-minutes ({timing}); wrote "
        f"{out / 'summary.json'}, {len(written)} plots" + (", BENCHMARKS.md section 'policy'" if standard else ""),
        file=sys.stderr,
    )
    return 0


def _ray_cpus() -> int:
    import ray

    return int(ray.cluster_resources().get("CPU", 0))


if __name__ == "__main__":
    sys.exit(main())
