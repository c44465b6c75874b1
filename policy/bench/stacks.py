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

This module is the command; its parts: :mod:`.common` (paths, modes, the mean and its ci95), :mod:`.cells` (one run
as a Ray task, the runs of a plan), :mod:`.summary` (``summary.json``: aggregation, comparisons, its schema check),
:mod:`.report` (BENCHMARKS.md and the plots), :mod:`.tuning` (the threshold autoscaler's grid search).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from policy.config import ConfigError
from policy.sim.engine import SimConfig
from policy.sim.scenario import BASELINE as BASELINE_SCENARIO
from policy.sim.scenario import build, resolve_app
from policy.sim.stacks import (
    REFERENCE_STACKS,
    StackContext,
    available_stacks,
    build_stack,
    parse_stack_name,
)
from policy.sim.traces import load_trace

from .cells import (
    UTIL_KEYS,
    cached_app,
    cached_scenario,
    node_cpu_utilization,
    run_all,
    run_one,
    run_seeds,
    simulate_command,
)
from .common import APPS, BENCH_DIR, HIST_EDGES_MS, ROOT, SCHEMA, TRACES, TUNING_SEEDS, Mode, mean_ci95, t975
from .markdown import write_section
from .pareto import (
    BASELINE_FAMILIES,
    sweep_stacks,
)
from .plan import Cell, load_plan, plan_cells
from .report import markdown, per_app_figures, plots
from .runner import RaySession
from .summary import CELL_KEYS, SUMMARY_KEYS, build_summary, comparisons, summarize, validate_summary
from .tuning import tune

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


# ---- the command ---------------------------------------------------------------------------------------------


def unavailable_stacks(policies: Sequence[str], cell: Cell) -> dict[str, str]:
    """The stacks among ``policies`` whose factory fails in ``cell`` (its scenario's cluster and app), with the
    one-line reason (each factory is called once; its ``close()`` too)."""
    scn = cached_scenario(cell.scenario)
    run = build(
        scn, app=None if cell.app is None else cached_app(resolve_app(cell.app, scn)), trace=cell.trace, minutes=1
    )
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

    scenarios, apps, traces = _split(args.scenarios), _split(args.apps), _split(args.traces)
    try:
        for a in apps or ():
            cached_app(a)  # fail fast on a bad app, trace or scenario
        for t in traces or ():
            load_trace(t)
        for s in scenarios or ():
            cached_scenario(s)
    except (ValueError, OSError) as exc:
        raise _fail(str(exc)) from None
    session = contextlib.nullcontext() if args.no_ray else RaySession(args.ray_address, args.jobs)
    if args.tune:
        with session:
            tune(
                [cached_app(a).name if a in APPS else a for a in apps or APPS],
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
        n = sum(len(cached_app(a).workloads) for a in ([cell.app] if cell.app else _scenario_apps(cell)))
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

    scn = cached_scenario(cell.scenario)
    return [resolve_app(a.app, scn) for a in scn.spec.apps]


def _ray_cpus() -> int:
    import ray

    return int(ray.cluster_resources().get("CPU", 0))


if __name__ == "__main__":
    sys.exit(main())
