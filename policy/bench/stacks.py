"""`make bench` / `make bench-quick`: every scheduling stack × application × load trace × seed in the simulator
→ the ``policy`` section of BENCHMARKS.md, ``benchmarks/summary.json`` and the plots in ``benchmarks/``.

    python -m policy.bench --quick          # make bench-quick: 3 seeds, 30-minute windows around each peak
    python -m policy.bench --full           # make bench: 5 seeds, the whole 6-hour windows
    python -m policy.bench --tune           # grid-search the threshold autoscaler (tuning seeds)
    python -m policy.bench --full --resume  # finish an interrupted run (finished runs are journaled)
    python -m policy.bench --quick --apps my/app.yaml --traces my.csv --policies my-stack --out out/mine

Runs are spread over ``--jobs`` processes (default 2) with a progress bar. ``summary.json`` is exactly
``{"seeds": N, "results": {app: {trace: {policy: {metric: {"mean", "ci95"}}}}}}``, ``ci95`` the half-width
of the 95 % confidence interval of the mean over seeds (Student t), in the metric's unit, 0 when all seeds
agree. Only the standard run (the six built-in apps, the three named traces and the six baseline stacks, or
more stacks) writes BENCHMARKS.md and ``benchmarks/``; any other selection writes to ``--out`` (default
``out/bench``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
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
    "run_one",
    "run_all",
    "summarize",
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


# ---- one run (in a worker process) -------------------------------------------------------------------------

_APPS: dict[str, Any] = {}


def _app(name: str):
    from policy.sim.app import load_app

    if name not in _APPS:
        _APPS[name] = load_app(name)
    return _APPS[name]


def run_one(app: str, trace: str, policy: str, seed: int, minutes: int | None, n_samples: int | None) -> dict[str, Any]:
    """One simulation → ``{"metrics": {...}, "hist": latency histogram counts (weighted), "wall_s"}``."""
    from policy.sim.run import simulate

    t0, c0 = time.perf_counter(), time.process_time()
    spec = _app(app)
    flat, res = simulate(
        spec, trace, policy, minutes=minutes, seed=seed, offset_min=window_offset(trace, minutes), n_samples=n_samples
    )
    hist, _ = np.histogram(
        np.clip(res.latency_samples_ms, HIST_EDGES_MS[0], HIST_EDGES_MS[-1]),
        bins=HIST_EDGES_MS,
        weights=res.latency_weights,
    )
    metrics = {k: float(res.metrics[k]) for k in METRIC_KEYS}
    return {
        "app": app,
        "trace": trace,
        "policy": policy,
        "seed": seed,
        "metrics": metrics,
        "hist": hist.tolist(),
        "wall_s": time.perf_counter() - t0,
        "cpu_s": time.process_time() - c0,
        "minutes": flat["minutes"],
        "nodes": flat["nodes"],
    }


def _run_task(task: tuple) -> dict[str, Any]:
    return run_one(*task)


def _task_key(t: Sequence) -> str:
    return json.dumps(list(t))


def run_all(
    tasks: Sequence[tuple], jobs: int, desc: str = "bench", journal: Path | None = None, resume: bool = False
) -> list[dict[str, Any]]:
    """Run ``tasks`` (argument tuples of :func:`run_one`) over ``jobs`` processes with a progress bar.

    ``journal``: a JSON-lines file every finished run is appended to (so a long run that is interrupted
    loses nothing); with ``resume``, runs already in it (same arguments) are not run again."""
    from tqdm import tqdm

    done: dict[str, dict[str, Any]] = {}
    if journal is not None:
        journal.parent.mkdir(parents=True, exist_ok=True)
        if resume and journal.exists():
            for line in journal.read_text(encoding="utf-8").splitlines():
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by the interruption
                done[r.get("task", "")] = r
        else:
            journal.write_text("", encoding="utf-8")
    wanted = {_task_key(t) for t in tasks}
    out = [r for k, r in done.items() if k in wanted]
    todo = [t for t in tasks if _task_key(t) not in done]
    if out:
        print(f"policy.bench: resuming, {len(out)} of {len(tasks)} runs already in {journal}", file=sys.stderr)

    def record(t: tuple, r: dict[str, Any]) -> None:
        r["task"] = _task_key(t)
        out.append(r)
        if journal is not None:
            with journal.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(r) + "\n")

    if jobs <= 1:
        for t in tqdm(todo, desc=desc, unit="run", file=sys.stderr):
            record(t, _run_task(t))
        return out
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futs = {pool.submit(_run_task, t): t for t in todo}
        for f in tqdm(as_completed(futs), total=len(futs), desc=desc, unit="run", file=sys.stderr):
            record(futs[f], f.result())
    return out


# ---- aggregation and outputs --------------------------------------------------------------------------------


def summarize(results: Iterable[Mapping[str, Any]], seeds: int) -> dict[str, Any]:
    """The summary.json object from per-run results."""
    per: dict[tuple[str, str, str], list[Mapping[str, float]]] = {}
    for r in results:
        per.setdefault((r["app"], r["trace"], r["policy"]), []).append(r["metrics"])
    out: dict[str, Any] = {}
    for (app, trace, policy), ms in per.items():
        out.setdefault(app, {}).setdefault(trace, {})[policy] = {k: mean_ci95([m[k] for m in ms]) for k in METRIC_KEYS}
    return {"seeds": seeds, "results": out}


def validate_summary(obj: Any) -> None:
    """Raise ValueError unless ``obj`` has exactly the summary.json shape with finite numbers."""
    if not isinstance(obj, dict) or set(obj) != {"seeds", "results"}:
        raise ValueError("summary: top level must be exactly {'seeds', 'results'}")
    if not isinstance(obj["seeds"], int) or isinstance(obj["seeds"], bool) or obj["seeds"] < 1:
        raise ValueError(f"summary.seeds: must be a positive integer, got {obj['seeds']!r}")
    for app, traces in obj["results"].items():
        for trace, policies in traces.items():
            for policy, metrics in policies.items():
                where = f"summary.results.{app}.{trace}.{policy}"
                if set(metrics) != set(METRIC_KEYS):
                    raise ValueError(f"{where}: metric keys must be exactly {sorted(METRIC_KEYS)}")
                for k, v in metrics.items():
                    if not isinstance(v, dict) or set(v) != {"mean", "ci95"}:
                        raise ValueError(f"{where}.{k}: must be exactly {{'mean', 'ci95'}}")
                    for f in ("mean", "ci95"):
                        x = v[f]
                        if not isinstance(x, (int, float)) or isinstance(x, bool) or not math.isfinite(x):
                            raise ValueError(f"{where}.{k}.{f}: must be a finite number, got {x!r}")
                    if v["ci95"] < 0:
                        raise ValueError(f"{where}.{k}.ci95: must be >= 0, got {v['ci95']}")


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


def markdown(summary: Mapping[str, Any], mode: Mode, policies: Sequence[str], meta: Mapping[str, Any]) -> str:
    """The BENCHMARKS.md ``policy`` section."""
    from tabulate import tabulate

    from policy.sim.run import PEAK_UTILIZATION, app_bench

    lines = [
        "## Policy benchmark (`make bench" + ("-quick" if mode.name == "quick" else "") + "`)",
        "",
        f"Generated by `python -m policy.bench --{mode.name}` on {meta['date']} in {meta['wall_min']:.1f} min "
        f"({meta['runs']} simulations, {meta['cpu_min']:.1f} CPU-minutes, {meta['jobs']} processes). "
        f"Each cell: mean ± half-width of the 95 % confidence interval over {summary['seeds']} seeds "
        "(Student t). Runs: "
        + (
            "the whole 6-hour window of each trace"
            if mode.minutes is None
            else f"{mode.minutes} minutes of each trace window, centred on its peak"
        )
        + f"; traces scaled so their peak asks {PEAK_UTILIZATION:g}× the CPU the app's busiest service has at "
        "its limits with the manifest replicas (fixed replicas saturate at the peaks); nodes spread over 3 zones. "
        "Machine-readable: `benchmarks/summary.json`. Stacks: see docs/benchmarks.md.",
        "",
        "Plots: `benchmarks/latency_cdf_<trace>.png`, `benchmarks/failed_pct.png`, "
        "`benchmarks/cpu_core_hours.png`, `benchmarks/latency_p95.png`.",
        "",
    ]
    for p, why in (meta.get("skipped") or {}).items():
        lines += [f"Not run (the stack cannot be built here): `{p}`: {why}", ""]
    for app, traces in summary["results"].items():
        spec = _app(app) if app in _APPS else None
        b = app_bench(spec) if spec is not None else None
        cl = f"{b.nodes} nodes × {b.cpu_m / 1000:g} vCPU / {b.memory_gib} GiB" if b else ""
        slo = f", SLO p95 {spec.slo_p95_ms:g} ms" if spec is not None else ""
        lines += [f"### {app} ({cl}{slo})", ""]
        rows = []
        for trace, pols in traces.items():
            for p in policies:
                if p in pols:
                    rows.append([trace, p] + [_fmt(pols[p][k], d) for k, _h, d in _COLUMNS])
        lines.append(
            tabulate(
                rows,
                headers=["trace", "policy"] + [h for _k, h, _d in _COLUMNS],
                tablefmt="github",
                disable_numparse=True,
            )
        )
        lines.append("")
    return "\n".join(lines)


def plots(
    summary: Mapping[str, Any], hists: Mapping[tuple[str, str, str], np.ndarray], policies: Sequence[str], out: Path
) -> list[Path]:
    """Latency CDF per trace (one panel per app), failed %, CPU core-hours (relative to
    default-kube-scheduler) and p95 latency per policy (one panel per trace)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    res = summary["results"]
    apps = list(res)
    traces = sorted({t for a in res.values() for t in a}, key=lambda t: (TRACES + (t,)).index(t))
    colors = plt.get_cmap("tab10" if len(policies) <= 10 else "tab20")  # one colour per stack
    styles = ("-", "--", "-.", ":", (0, (6, 2)), (0, (3, 1, 1, 1, 1, 1)))
    written = []
    centers = np.sqrt(HIST_EDGES_MS[:-1] * HIST_EDGES_MS[1:])
    for trace in traces:
        ncol = 3 if len(apps) > 2 else len(apps)
        nrow = math.ceil(len(apps) / ncol)
        fig, axes = plt.subplots(nrow, ncol, figsize=(5.2 * ncol, 3.8 * nrow), squeeze=False)
        for ax, app in zip(axes.flat, apps):
            lo, hi = math.inf, 0.0
            for k, p in enumerate(policies):
                h = hists.get((app, trace, p))
                if h is None or h.sum() <= 0:
                    continue
                cdf = np.cumsum(h) / h.sum()
                # dashes keep curves that coincide (stacks that behave alike) visible
                ax.plot(centers, cdf, label=p, color=colors(k), lw=1.8, ls=styles[k % len(styles)])
                lo = min(lo, float(centers[np.searchsorted(cdf, 0.001)]))
                hi = max(hi, float(centers[min(np.searchsorted(cdf, 0.999), len(centers) - 1)]))
            ax.set_xscale("log")
            if hi > 0:
                ax.set_xlim(lo / 1.5, hi * 1.5)
            ax.set_title(app, fontsize=11)
            ax.set_xlabel("end-to-end latency (ms)")
            ax.set_ylabel("fraction of requests")
            ax.grid(True, which="both", alpha=0.3)
            ax.set_ylim(0, 1.01)
        for ax in list(axes.flat)[len(apps) :]:
            ax.axis("off")
        handles, labels = axes.flat[0].get_legend_handles_labels()
        fig.legend(
            handles, labels, loc="lower center", ncol=min(len(policies), 3), fontsize=10, bbox_to_anchor=(0.5, 0.0)
        )
        fig.suptitle(f"Latency CDF of successful requests — trace {trace} (all seeds)", fontsize=13)
        fig.tight_layout(rect=(0, 0.1 if nrow == 1 else 0.06, 1, 0.96))
        p = out / f"latency_cdf_{trace}.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        written.append(p)

    def bars(metric: str, ylabel: str, fname: str, title: str, relative: bool = False, log: bool = False) -> None:
        fig, axes = plt.subplots(len(traces), 1, figsize=(13, 3.4 * len(traces)), squeeze=False)
        width = 0.8 / max(len(policies), 1)
        x = np.arange(len(apps))
        for ax, trace in zip(axes[:, 0], traces):
            for k, p in enumerate(policies):
                vals, errs = [], []
                for app in apps:
                    cell = res[app].get(trace, {}).get(p)
                    ref = res[app].get(trace, {}).get("default-kube-scheduler")
                    if cell is None:
                        vals.append(np.nan)
                        errs.append(0.0)
                        continue
                    m, c = cell[metric]["mean"], cell[metric]["ci95"]
                    if relative and ref is not None and ref[metric]["mean"] > 0:
                        m, c = m / ref[metric]["mean"], c / ref[metric]["mean"]
                    vals.append(m)
                    errs.append(c)
                ax.bar(
                    x + (k - (len(policies) - 1) / 2) * width,
                    vals,
                    width,
                    yerr=errs,
                    label=p,
                    color=colors(k),
                    capsize=2,
                )
            ax.set_xticks(x)
            ax.set_xticklabels(apps, fontsize=10)
            ax.set_ylabel(ylabel)
            ax.set_title(f"trace {trace}", fontsize=11)
            ax.grid(True, axis="y", alpha=0.3)
            if log:
                ax.set_yscale("log")
        handles, labels = axes[0, 0].get_legend_handles_labels()
        fig.legend(
            handles, labels, ncol=min(len(policies), 6), fontsize=9, loc="upper center", bbox_to_anchor=(0.5, 0.965)
        )
        fig.suptitle(title, fontsize=13)
        fig.tight_layout(rect=(0, 0, 1, 0.93))
        p = out / fname
        fig.savefig(p, dpi=110)
        plt.close(fig)
        written.append(p)

    bars("failed_pct", "failed requests (%)", "failed_pct.png", "Failed requests per policy (mean ± 95 % CI)")
    bars(
        "cpu_core_hours",
        "CPU core-hours / default",
        "cpu_core_hours.png",
        "Requested CPU core-hours per policy, relative to default-kube-scheduler (mean ± 95 % CI)",
        relative=True,
    )
    bars(
        "latency_p95_ms",
        "p95 latency (ms)",
        "latency_p95.png",
        "p95 end-to-end latency per policy (mean ± 95 % CI)",
        log=True,
    )
    return written


# ---- the threshold autoscaler's grid search --------------------------------------------------------------


def _tune_task(task: tuple) -> dict[str, Any]:
    """One tuning run set: the fixed-replica reference and every candidate on one (app, trace, seed). The
    initial placement (the same for all: same seed, same default profile) is computed once and copied."""
    import copy
    import copyreg
    import types

    # the frozen state types keep their maps read-only (MappingProxyType), which deepcopy cannot copy by
    # default: copy them through a plain dict
    copyreg.pickle(types.MappingProxyType, lambda m: (types.MappingProxyType, (dict(m),)))
    app, trace, seed, params_json, minutes, n_samples = task
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
    jobs: int,
    minutes: int | None = 30,
    n_samples: int | None = 300,
    write: bool = True,
) -> dict[str, Any]:
    """Grid-search the threshold autoscaler per app on :data:`TUNING_SEEDS` (disjoint from the evaluation
    seeds 0-4) over ``traces``; write each app's best parameters to ``threshold-autoscaler.yaml`` next to
    its app.yaml. Returns ``{app: {"best": params, "table": [(params, mean cost)]}}``."""
    import yaml
    from pydantic.alias_generators import to_camel
    from tqdm import tqdm

    from policy.baselines.threshold import GRID, candidates

    cands = [c.model_dump_json(include={"u_hi", "u_lo", "step_out", "step_in", "cooldown_min"}) for c in candidates()]
    tasks = [(a, t, s, tuple(cands), minutes, n_samples) for a in apps for t in traces for s in TUNING_SEEDS]
    tasks.sort(key=lambda t: t[0] != "alibaba")
    results = []
    if jobs <= 1:
        for t in tqdm(tasks, desc="tune", unit="run", file=sys.stderr):
            results.append(_tune_task(t))
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futs = [pool.submit(_tune_task, t) for t in tasks]
            for f in tqdm(as_completed(futs), total=len(futs), desc="tune", unit="run", file=sys.stderr):
                results.append(f.result())
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
            built = build_stack(p, StackContext(app, cluster_for(app), 0, SimConfig(minutes=1)))
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
    ap.add_argument("--seeds", type=int, default=None, help="number of seeds (0..N-1; default by mode)")
    ap.add_argument("--minutes", type=int, default=None, help="minutes per run (default by mode)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="worker processes")
    ap.add_argument("--out", default=None, help="output folder (default: benchmarks/ for the standard run)")
    ap.add_argument(
        "--resume",
        action="store_true",
        help="reuse the runs of an interrupted benchmark with the same arguments (journal: "
        "out/bench-runs/runs-<mode>.jsonl, or runs-<mode>.jsonl in --out); without it the journal "
        "starts afresh",
    )
    args = ap.parse_args(argv)

    from policy.sim.stacks import BENCH_STACKS, available_stacks

    apps = [a for a in args.apps.split(",") if a]
    traces = [t for t in args.traces.split(",") if t]
    for a in apps:
        _app(a)  # fail fast on a bad app, and load every app once before the workers fork
    if args.tune:
        tune([_app(a).name if a in APPS else a for a in apps], traces, args.jobs)
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
        else [*BENCH_STACKS, *sorted(set(stacks) - set(BENCH_STACKS))]
    )
    unknown = [p for p in policies if p not in stacks]
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
    standard = apps == list(APPS) and traces == list(TRACES) and set(BENCH_STACKS) <= set(policies)
    out = Path(args.out) if args.out else (BENCH_DIR if standard else ROOT / "out" / "bench")
    names = {a: _app(a).name for a in apps}
    # the longest runs first, so the two workers finish together
    tasks = [
        (a, t, p, s, mode.minutes, mode.n_samples) for a in apps for t in traces for p in policies for s in mode.seeds
    ]
    tasks.sort(key=lambda t: -len(_app(t[0]).workloads))
    t0 = time.time()
    journal = (ROOT / "out" / "bench-runs" if standard else out) / f"runs-{mode.name}.jsonl"
    results = run_all(tasks, args.jobs, desc=f"bench-{mode.name}", journal=journal, resume=args.resume)
    wall = time.time() - t0
    for r in results:
        r["app"] = names[r["app"]]
    summary = summarize(results, len(mode.seeds))
    # stable order: apps, traces and policies as requested
    ordered = {names[a]: {t: {p: summary["results"][names[a]][t][p] for p in policies} for t in traces} for a in apps}
    summary = {"seeds": len(mode.seeds), "results": ordered}
    validate_summary(summary)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    hists: dict[tuple[str, str, str], np.ndarray] = {}
    for r in results:
        k = (r["app"], r["trace"], r["policy"])
        hists[k] = hists.get(k, 0) + np.asarray(r["hist"])
    written = plots(summary, hists, policies, out)
    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "wall_min": wall / 60,
        "runs": len(results),
        "jobs": args.jobs,
        "cpu_min": sum(r["cpu_s"] for r in results) / 60,
        "skipped": skipped,
    }
    md = markdown(summary, mode, policies, meta)
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


if __name__ == "__main__":
    sys.exit(main())
