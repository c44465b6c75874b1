"""`make bench` / `make bench-quick`: every scheduling stack in every cell of the bench plan (scenario × app ×
trace, :mod:`policy.bench.plan`) × seed in the simulator → the ``policy`` section of BENCHMARKS.md (a part per
scenario), ``benchmarks/summary.json`` and the plots in ``benchmarks/<scenario>/``.

    python -m policy.bench --quick          # make bench-quick: the plan's quick mode (~30 min on 2 cores)
    python -m policy.bench --full           # make bench: the plan's full mode (hours; --ray-address for a cluster)
    python -m policy.bench --quick --scenarios network-edge,events --apps dsb-social-network
    python -m policy.bench --tune           # grid-search the threshold autoscaler (tuning seeds)
    python -m policy.bench --full --resume  # finish an interrupted run (finished runs are journaled)
    python -m policy.bench --quick --scenarios baseline-2026-11 --apps my/app.yaml --traces my.csv \\
        --policies my-stack --out out/mine
    python -m policy.bench --quick --scenarios network-edge --apps apps/shop \\
        --policies hrl-scheduler,default-kube-scheduler --bundles out/train/shop/bundles   # your app's own bundles

Every run is built by :func:`policy.sim.scenario.build`, as ``hrl-policy simulate --scenario`` builds it, so the
command the report prints for a cell reproduces its runs exactly. Every stack named runs with, per cell, the
baselines' knob sweeps (:mod:`policy.bench.pareto`; ``--no-sweep`` leaves them out), the learned stacks at each of
the plan's training seeds (:func:`policy.bench.plan.learned_runs`; ``--training-seeds`` overrides) and the targets
``hrl-constant`` and ``lookahead-oracle`` (the mode's setting) when the plan or ``--policies`` names them. The
simulations are Ray tasks (:mod:`policy.bench.runner`): on the cluster at ``--ray-address``, else on a local Ray
started on this machine's cores (``--jobs N`` CPUs) and shut down afterwards; ``--no-ray`` runs them here one by
one. Results are aggregated in task order (by seed), so the same matrix writes a byte-identical ``summary.json``.

``summary.json`` (schema 4, documented in docs/benchmarks.md, checked by :func:`validate_summary`): per scenario,
app, trace and stack the eight metrics and the objective as ``{"mean", "ci95"}`` (``ci95`` the half-width of the
95 % confidence interval of the mean over seeds, Student t, 0 when all seeds agree), per-run node CPU utilization,
the Pareto fronts, every contender at equal CPU to the best baseline front, the targets on the objective (the
oracle, the best baseline setting, the best constant, every contender's share of the oracle's gain, the cells where
the oracle loses to a baseline), the learned stacks' spread across training seeds next to the spread across
evaluation seeds with the ablation verdicts, the learned stacks' guardrail counters, and per cell its run window,
role (training or held-out app) and the ``hrl-policy simulate`` command. ``--bundles DIR`` runs the learned stacks
on the bundles under DIR (laid out like ``policy/bundles``, e.g. what ``hrl-policy train --app`` wrote) instead of
the committed ones; the cells' commands carry it. Only the standard run (the shipped plan, unnarrowed, every planned
stack, with the sweeps, the committed bundles) writes BENCHMARKS.md and ``benchmarks/``; any other selection writes
to ``--out`` (default ``out/bench``).

This module is the command; its parts: :mod:`.common` (paths, modes, the mean and its ci95), :mod:`.cells` (one run
as a Ray task, the runs of a plan), :mod:`.summary` (``summary.json``: aggregation, comparisons, its schema check),
:mod:`.report` (BENCHMARKS.md and the plots), :mod:`.tuning` (the threshold autoscaler's grid search).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from policy.bundle import bundles_root_arg
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
    RunSetting,
    cached_app,
    cached_scenario,
    floor_all,
    node_cpu_utilization,
    run_all,
    run_one,
    run_seeds,
    simulate_command,
)
from .common import (
    APPS,
    BENCH_DIR,
    HIST_EDGES_MS,
    ROOT,
    SCHEMA,
    TRACES,
    TUNING_SEEDS,
    Mode,
    StackRoles,
    mean_ci95,
    t975,
)
from .markdown import write_section
from .pareto import (
    BASELINE_FAMILIES,
    sweep_stacks,
)
from .plan import ORACLE, BenchPlan, Cell, learned_runs, load_plan, plan_cells
from .report import markdown, per_app_figures, plots
from .runner import RaySession, read_journal, task_key
from .spread import training_seed_of
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
    "RunSetting",
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
    "split_stacks",
    "main",
]


# ---- the command ---------------------------------------------------------------------------------------------


def unavailable_stacks(policies: Sequence[str], cell: Cell, bundles: str = "") -> dict[str, str]:
    """The stacks among ``policies`` whose factory fails in ``cell`` (its scenario's cluster and app), with the
    one-line reason (each factory is called once; its ``close()`` too); ``bundles``: the bundles root the learned
    stacks load (empty: the committed ``policy/bundles``)."""
    root = Path(bundles) if bundles else None
    scn = cached_scenario(cell.scenario)
    run = build(
        scn, app=None if cell.app is None else cached_app(resolve_app(cell.app, scn)), trace=cell.trace, minutes=1
    )
    out = {}
    for p in policies:
        try:
            ctx = StackContext(run.app, run.cluster, 0, SimConfig(minutes=1), rps=np.zeros_like(run.rps), bundles=root)
            built = build_stack(p, ctx)
            if built.close is not None:
                built.close()
        except Exception as exc:  # noqa: BLE001 - any failure makes the stack unavailable
            out[p] = " ".join(str(exc).split()) or type(exc).__name__
    return out


def _split(v: str | None) -> list[str] | None:
    return None if v is None else [x for x in v.split(",") if x]


def split_stacks(v: str | None) -> list[str] | None:
    """``--policies``: comma-separated stack names, whose knobs may be comma-separated too:
    ``"a,b@k=1,j=2,c"`` → ``["a", "b@k=1,j=2", "c"]`` (a part ``knob=value`` without ``@`` continues the stack
    before it)."""
    if v is None:
        return None
    out: list[str] = []
    for part in (x.strip() for x in v.split(",")):
        if not part:
            continue
        if out and "@" in out[-1] and "@" not in part and re.fullmatch(r"[A-Za-z_]\w*=.*", part):
            out[-1] += "," + part
        else:
            out.append(part)
    return out


def _fail(msg: str) -> SystemExit:
    return SystemExit("policy.bench: " + " ".join(str(msg).split()))


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m policy.bench", description=__doc__.split("\n\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--quick", action="store_true", help="the plan's quick mode (make bench-quick)")
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
        "--no-sweep", action="store_true", help="run only the stacks named, without the baselines' knob sweeps"
    )
    ap.add_argument("--seeds", type=int, default=None, help="number of seeds (0..N-1; default: the plan's)")
    ap.add_argument(
        "--training-seeds",
        default=None,
        help="comma-separated training seeds of the learned stacks, 0 among them (default: the plan's trainingSeeds)",
    )
    ap.add_argument("--minutes", type=int, default=None, help="minutes per run (default: the plan's)")
    ap.add_argument("--samples", type=int, default=None, help="sampled user requests per minute (default: the plan's)")
    ap.add_argument("--jobs", type=int, default=None, help="CPUs of the local Ray (default: this machine's cores)")
    ap.add_argument("--ray-address", default=None, help="run on this Ray cluster (e.g. auto, ray://HOST:10001)")
    ap.add_argument("--no-ray", action="store_true", help="run every simulation in this process, one by one")
    ap.add_argument("--out", default=None, help="output folder (default: benchmarks/ for the standard run)")
    ap.add_argument(
        "--bundles",
        default=None,
        metavar="DIR",
        help="the learned stacks load their bundles from DIR, laid out like policy/bundles (e.g. "
        "out/train/<app>/bundles of 'hrl-policy train --app'; training seed N: DIR/seeds/N), not policy/bundles; "
        "DIR must be readable where the simulations run (every node of a --ray-address cluster)",
    )
    ap.add_argument(
        "--resume",
        action="store_true",
        help="reuse the runs of an interrupted benchmark with the same arguments (journal: "
        "out/bench-runs/runs-<mode>.jsonl, or runs-<mode>.jsonl in --out); without it the journal "
        "starts afresh",
    )
    return ap


def _training_seeds(arg: str | None, planned: Sequence[int]) -> tuple[int, ...]:
    """The training seeds of ``--training-seeds`` (or the plan's). Raises SystemExit for a bad list."""
    if arg is None:
        return tuple(planned)
    try:
        seeds = tuple(int(x) for x in arg.split(",") if x.strip())
    except ValueError:
        raise _fail(f"--training-seeds: expected comma-separated integers, got {arg!r}") from None
    if 0 not in seeds or any(t < 0 for t in seeds) or len(set(seeds)) != len(seeds):
        raise _fail(f"--training-seeds: distinct integers >= 0 including 0 (the committed bundles), got {arg!r}")
    return seeds


@dataclass(frozen=True)
class _Selection:
    """The stacks a bench runs: ``roles`` (:class:`~policy.bench.common.StackRoles`), ``run`` (every name, in table
    order), ``skipped`` (stack → why it cannot be built here, left out of a default run) and ``skipped_seeds``
    (``{"stack", "training_seed", "reason"}``: training seeds the plan let the bench skip); ``every_planned``: every
    stack of the plan runs or was left out as unbuildable (the standard run)."""

    roles: StackRoles
    run: tuple[str, ...]
    skipped: dict[str, str]
    skipped_seeds: tuple[dict[str, Any], ...]
    every_planned: bool


def _select(args: argparse.Namespace, plan: BenchPlan, mode: Mode, cell: Cell) -> _Selection:
    """Which stacks run (module docstring): the plan's and every other registered one but the yardsticks, or
    ``--policies`` (in both, the plain ``lookahead-oracle`` is the mode's setting); each learned one at every
    training seed;
    the baselines' sweeps. A stack that cannot be built in ``cell`` is left out of a default run with a warning and
    refused when named; a training seed without its bundles too, unless the plan skips those (then it is listed)."""
    stacks = available_stacks()

    def oracle_setting(names: Sequence[str]) -> list[str]:  # the plain name stands for the mode's setting
        return [mode.oracle if p == ORACLE and mode.oracle else p for p in names]

    planned = oracle_setting(plan.spec.stacks)
    policies = (
        oracle_setting(split_stacks(args.policies) or [])
        if args.policies
        else [*planned, *sorted(set(stacks) - {parse_stack_name(p)[0] for p in planned} - set(REFERENCE_STACKS))]
    )
    unknown = [p for p in policies if parse_stack_name(p)[0] not in stacks]
    if unknown and args.policies:
        raise _fail(f"unknown stack(s) {unknown} (known: {', '.join(sorted(stacks))})")
    skipped = dict.fromkeys(
        unknown, "not a registered stack (built-in or an entry point of group hrl_scheduler.stacks)"
    )
    skipped |= unavailable_stacks([p for p in policies if p not in unknown], cell, mode.bundles)
    if skipped and args.policies:
        raise _fail("; ".join(f"{p}: {why}" for p, why in skipped.items()))
    for p, why in skipped.items():
        print(f"policy.bench: warning: skipping stack {p}: {why}", file=sys.stderr)
    policies = [p for p in policies if p not in skipped]
    variants = learned_runs(policies, mode.training_seeds)
    extra = [v for names in variants.values() for v in names[1:]]
    missing = unavailable_stacks(extra, cell, mode.bundles)
    if missing and not plan.spec.skip_missing_training_seeds:
        by_seed: dict[int, list[str]] = {}
        for p in missing:
            by_seed.setdefault(training_seed_of(p)[1], []).append(p)
        raise _fail(
            f"the training seeds {list(mode.training_seeds)} (the plan's trainingSeeds, or --training-seeds): "
            + "; ".join(
                f"no bundles of training seed {t} for {', '.join(training_seed_of(p)[0] for p in ps)} "
                f"({training_seed_of(ps[0])[0]}: {missing[ps[0]]})"
                for t, ps in by_seed.items()
            )
            + f"; skipMissingTrainingSeeds: true in {plan.source} leaves an absent training seed out"
        )
    skipped_seeds = tuple(
        {"stack": training_seed_of(p)[0], "training_seed": training_seed_of(p)[1], "reason": why}
        for p, why in missing.items()
    )
    for x in skipped_seeds:
        print(
            f"policy.bench: warning: skipping training seed {x['training_seed']} of {x['stack']}: {x['reason']}",
            file=sys.stderr,
        )
    sweeps = {} if mode.sweep == "none" else sweep_stacks(mode.sweep)
    baselines = [p for p in policies if parse_stack_name(p)[0] in BASELINE_FAMILIES]
    for names in sweeps.values():
        baselines += [n for n in names if n not in baselines]
    contenders = [p for p in policies if p not in baselines]
    seeded = [v for p in policies for v in variants.get(p, [p]) if v not in missing]
    run = tuple(dict.fromkeys([*seeded, *baselines]))
    oracle = next((p for p in policies if parse_stack_name(p)[0] == ORACLE), "")
    roles = StackRoles(tuple(policies), tuple(baselines), tuple(contenders), oracle, tuple(variants), run)
    return _Selection(roles, run, skipped, skipped_seeds, set(planned) <= set(policies) | set(skipped))


#: The relative cost of a run per workload of its cell (the oracle forks and rolls out its candidates: measured
#: about 30 times a learned stack's run), to start the longest runs first.
_COST = {ORACLE: 30.0}


def _tasks(cells: Sequence[Cell], stacks: Sequence[str], mode: Mode) -> list[tuple]:
    """One task per (cell, stack, seed) (:func:`policy.bench.cells.run_seeds` arguments), the longest first; the
    order is fixed, so the results are too."""
    tasks = []
    for c in cells:
        n = sum(len(cached_app(a).workloads) for a in ([c.app] if c.app else _scenario_apps(c)))
        for p in stacks:
            w = n * _COST.get(parse_stack_name(p)[0], 1.0)
            for s in mode.seeds:
                setting = RunSetting(c.minutes, c.offset_min, mode.n_samples, mode.bundles)
                tasks.append((w, (c.scenario, c.app, c.trace, p, (s,), setting)))
    return [t for _w, t in sorted(tasks, key=lambda wt: -wt[0])]


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    t_start = time.time()
    for opt in ("jobs", "seeds", "minutes", "samples"):
        v = getattr(args, opt)
        if v is not None and v < 1:
            raise _fail(f"--{opt}: must be >= 1, got {v}")
    if args.no_ray and args.ray_address:
        raise _fail("--no-ray and --ray-address exclude each other")
    try:
        bundles = str(bundles_root_arg(args.bundles)) if args.bundles is not None else ""
    except ValueError as exc:
        raise _fail(str(exc)) from None

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
        _training_seeds(args.training_seeds, plan.spec.training_seeds),
        spec.oracle,
        bundles,
    )
    sel = _select(args, plan, mode, cells[0])
    mode = replace(mode, oracle=sel.roles.oracle)  # the setting that runs (--policies may name another)
    standard = (
        args.plan is None
        and args.out is None
        and scenarios is None
        and apps is None
        and traces is None
        and args.seeds is None
        and args.training_seeds is None
        and args.minutes is None
        and args.samples is None
        and not args.no_sweep
        and not bundles
        and sel.every_planned
    )
    out = Path(args.out) if args.out else (BENCH_DIR if standard else ROOT / "out" / "bench")
    tasks = _tasks(cells, sel.run, mode)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    t0 = time.time()
    journal = (ROOT / "out" / "bench-runs" if standard else out) / f"runs-{mode.name}.jsonl"
    journaled = read_journal(journal) if args.resume and journal.exists() else {}
    reused = sum(task_key(t) in journaled for t in tasks)
    with session:
        cpus = _ray_cpus() if not args.no_ray else 1
        results = run_all(tasks, f"bench-{mode.name}", journal, args.resume, use_ray=not args.no_ray)
        floor_tasks = [
            (c.scenario, c.app, c.trace, (s,), RunSetting(c.minutes, c.offset_min, mode.n_samples, ""))
            for c in cells
            for s in mode.seeds
        ]
        # computed anew every time (about a minute), also when resuming: a journal would keep an older floor
        floors = floor_all(
            floor_tasks, f"floor-{mode.name}", journal.with_name(f"floors-{mode.name}.jsonl"), use_ray=not args.no_ray
        )
    wall = time.time() - t0
    summary = build_summary(results, mode, cells, sel.roles, sel.skipped_seeds, floors)
    validate_summary(summary)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    written = plots(summary, results, sel.roles, out)
    cpu_by_scn: dict[str, float] = {}
    runs_by_scn: dict[str, int] = {}
    oracle_cpu = [r["cpu_s"] for r in results if parse_stack_name(r["policy"])[0] == ORACLE]
    for r in results:
        cpu_by_scn[r["scenario"]] = cpu_by_scn.get(r["scenario"], 0.0) + r["cpu_s"] / 60
        runs_by_scn[r["scenario"]] = runs_by_scn.get(r["scenario"], 0) + 1
    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "wall_min": (time.time() - t_start) / 60,  # the whole command: plan, Ray start, runs, summary, plots
        "runs": len(results),
        "reused": reused,
        "jobs": cpus,
        "load": load,
        "cpu_min": sum(r["cpu_s"] for r in results) / 60,
        "cpu_min_by_scenario": cpu_by_scn,
        "runs_by_scenario": runs_by_scn,
        "oracle_cpu_min": sum(oracle_cpu) / 60,
        "oracle_runs": len(oracle_cpu),
        "baseline_settings": len(sel.roles.baselines),
        "skipped": sel.skipped,
    }
    plots_dir = str(out.resolve().relative_to(ROOT)) if out.resolve().is_relative_to(ROOT) else str(out)
    md = markdown(summary, mode, sel.roles, meta, per_app_figures(results), plots_dir)
    if standard:
        write_section("policy", md)
    else:
        (out / "BENCHMARKS-policy.md").write_text(md + "\n", encoding="utf-8")
    timing = ", ".join(f"{s} {m:.1f}" for s, m in cpu_by_scn.items())
    where = "BENCHMARKS.md section 'policy'" if standard else str(out / "BENCHMARKS-policy.md")
    print(
        f"policy.bench: {len(results)} runs in {wall / 60:.1f} min wall, {meta['cpu_min']:.1f} CPU-minutes "
        f"({timing}; the oracle {meta['oracle_cpu_min']:.1f} in {len(oracle_cpu)} runs); wrote "
        f"{out / 'summary.json'}, {len(written)} plots, {where}",
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
