"""`make train` = ``hrl-policy train --all``: every training stage in order, every learned stack's bundles
written to ``policy/bundles/<stack>/``, and the wall time of each stage reported.

Stages (each a function ``fn(root: Path, *, quick: bool, seed: int, log: Callable[[str], None]) ->
list[str]`` that trains and writes bundle directories under ``root``, returning the directories it wrote),
run in this order because each may read what the previous ones wrote:

=============  ===================================================  ================================================
stage          entry                                                 writes (under ``root``)
=============  ===================================================  ================================================
``encoder``    ``policy.encoder_train.run_cli`` (graph encoder)      ``encoder/``
``drpc``       ``policy.drpc_train:train_stage`` (GRU predictor,     ``drpc/``, ``hrl-scheduler/high``,
               DRPC teacher + students)                              ``hrl-no-encoder/high``, ``hrl-flat/high``
``placement``  ``policy.placement_train:train_stage`` (the learned   ``hrl-scheduler/low``, ``hrl-no-encoder/low``,
               low level)                                            ``hrl-flat/low``
=============  ===================================================  ================================================

Then :func:`assemble` completes the ablations that evaluate the full hierarchy's trained policies with one
part switched off (``hrl-no-rebalance/{low,high}`` and ``hrl-no-autoscale/low`` are copies of
``hrl-scheduler``'s bundles unless a stage wrote its own) and checks that every learned stack has its
bundles (:data:`REQUIRED_BUNDLES`).

Training wall time per stage goes to ``training.json`` and ``training.csv`` in the report directory and, for a
full (not ``--quick``) run into ``policy/bundles``, to the ``training`` section of BENCHMARKS.md
(:func:`policy.benchmarks_md.write_section`). torch is imported only by the stages' own modules.
"""

from __future__ import annotations

import csv
import importlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Stage", "STAGES", "REQUIRED_BUNDLES", "ABLATION_COPIES", "StageResult", "TrainingReport",
           "resolve", "run_all", "assemble", "markdown", "cmd_train"]

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_ROOT = ROOT / "policy" / "bundles"

StageFn = Callable[..., Sequence[str]]


@dataclass(frozen=True)
class Stage:
    """A training stage: ``name``, its ``entry`` (``module:function``, imported when the stage runs) and a
    one-line ``description``."""

    name: str
    entry: str
    description: str


STAGES: tuple[Stage, ...] = (
    Stage("encoder", "policy.train_all:encoder_stage", "graph encoder (self-supervised, simulator what-ifs)"),
    Stage("drpc", "policy.drpc_train:train_stage", "GRU workload predictor, DRPC teacher and students (TD3)"),
    Stage("placement", "policy.placement_train:train_stage", "learned low-level placement policy"),
)

#: Bundle directories (under the bundles root) each learned stack loads. A directory counts as present when a
#: ``manifest.json`` is in it or below it (``high/`` holds ``student/`` and ``predictor/``; ``drpc/`` likewise).
REQUIRED_BUNDLES: Mapping[str, tuple[str, ...]] = {
    "hrl-scheduler": ("hrl-scheduler/low", "hrl-scheduler/high"),
    "hrl-no-encoder": ("hrl-no-encoder/low", "hrl-no-encoder/high"),
    "hrl-flat": ("hrl-flat/low", "hrl-flat/high"),
    "hrl-no-rebalance": ("hrl-no-rebalance/low", "hrl-no-rebalance/high"),
    "hrl-no-autoscale": ("hrl-no-autoscale/low",),
    "drpc": ("drpc",),
}

#: Ablations that run the full hierarchy's trained policies with a part switched off: copied from
#: ``hrl-scheduler`` unless a stage wrote them (destination → source).
ABLATION_COPIES: Mapping[str, str] = {
    "hrl-no-rebalance/low": "hrl-scheduler/low",
    "hrl-no-rebalance/high": "hrl-scheduler/high",
    "hrl-no-autoscale/low": "hrl-scheduler/low",
}


@dataclass
class StageResult:
    """One stage's outcome: ``status`` ``ok`` / ``failed`` / ``not_run``, ``wall_s`` (seconds), the bundle
    directories it wrote and, when it failed, the one-line ``error``."""

    name: str
    status: str = "not_run"
    wall_s: float = 0.0
    bundles: list[str] = field(default_factory=list)
    error: str = ""


@dataclass
class TrainingReport:
    """The whole run: ``stages`` in order, ``total_wall_s``, ``quick``, ``seed``, the bundles ``root``, the
    ``assembled`` copies and the ``missing`` bundles (stack → paths) after assembly."""

    stages: list[StageResult]
    total_wall_s: float
    quick: bool
    seed: int
    root: str
    assembled: list[str] = field(default_factory=list)
    missing: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(s.status == "ok" for s in self.stages) and not self.missing

    def to_json(self) -> dict[str, Any]:
        return {"quick": self.quick, "seed": self.seed, "root": self.root, "ok": self.ok,
                "total_wall_s": round(self.total_wall_s, 3),
                "stages": [{"stage": s.name, "status": s.status, "wall_s": round(s.wall_s, 3), "bundles": s.bundles,
                            "error": s.error} for s in self.stages],
                "assembled": self.assembled, "missing": self.missing}


def encoder_stage(root: Path, *, quick: bool, seed: int, log: Callable[[str], None] = print) -> list[str]:
    """The ``encoder`` stage: ``policy.encoder_train.run_cli`` writing ``<root>/encoder``."""
    from . import encoder_train  # noqa: PLC0415 - torch, only when this stage runs

    out = Path(root) / "encoder"
    rc = encoder_train.run_cli(str(out), quick, seed, None, None, None, log=log)
    if rc != 0:
        raise RuntimeError(f"train encoder exited {rc}")
    return [str(out)]


def resolve(stage: Stage) -> StageFn:
    """The stage's function. Raises ``ValueError`` naming the entry when it cannot be imported or found."""
    mod_name, _, attr = stage.entry.partition(":")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as exc:
        raise ValueError(f"stage {stage.name}: cannot import {mod_name} ({exc})") from exc
    fn = getattr(mod, attr, None)
    if not callable(fn):
        raise ValueError(f"stage {stage.name}: {stage.entry} is not a function")
    return fn


def _has_bundle(p: Path) -> bool:
    return p.is_dir() and any(p.rglob("manifest.json"))


def assemble(root: str | Path, written: Sequence[str] = ()) -> tuple[list[str], dict[str, list[str]]]:
    """Copy :data:`ABLATION_COPIES` whose destination no stage wrote (``written``: directories the stages
    reported) from their source when it exists; then list what each stack still lacks. Returns
    ``(copied destinations, {stack: [missing paths]})``."""
    root = Path(root)
    wrote = {Path(w).resolve() for w in written}
    copied = []
    for dst, src in ABLATION_COPIES.items():
        d, s = root / dst, root / src
        if d.resolve() in wrote or not _has_bundle(s):
            continue
        if d.exists():
            shutil.rmtree(d)
        shutil.copytree(s, d)
        copied.append(dst)
    missing: dict[str, list[str]] = {}
    for stack, paths in REQUIRED_BUNDLES.items():
        for rel in paths:
            p = root / rel
            if not _has_bundle(p):
                missing.setdefault(stack, []).append(str(p))
    return copied, missing


def run_all(root: str | Path = DEFAULT_ROOT, *, quick: bool = False, seed: int = 0,
            stages: Sequence[str] | None = None, trainers: Mapping[str, StageFn] | None = None,
            log: Callable[[str], None] = lambda m: print(m, file=sys.stderr),
            clock: Callable[[], float] = time.monotonic) -> TrainingReport:
    """Run the stages (``stages``: names, default all, always in :data:`STAGES` order), then :func:`assemble`.

    ``trainers``: stage name → function overriding its entry (tests, stand-ins). Stops at the first stage that
    fails (later stages read earlier outputs); its error is in the report. Raises ``ValueError`` for an unknown
    stage name."""
    names = [s.name for s in STAGES]
    chosen = list(names) if stages is None else list(stages)
    unknown = [n for n in chosen if n not in names]
    if unknown:
        raise ValueError(f"stages: unknown {unknown} (known: {', '.join(names)})")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    results = [StageResult(s.name) for s in STAGES if s.name in chosen]
    t_all = clock()
    written: list[str] = []
    for stage, res in zip([s for s in STAGES if s.name in chosen], results):
        log(f"train --all: stage {stage.name}: {stage.description}")
        t0 = clock()
        try:
            fn = (trainers or {}).get(stage.name) or resolve(stage)
            out = fn(root, quick=quick, seed=seed, log=log)
            res.bundles = [str(p) for p in (out or [])]
            res.status = "ok"
        except Exception as exc:  # noqa: BLE001 - report the failing stage, stop the pipeline
            res.status = "failed"
            res.error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:500]}"
        res.wall_s = clock() - t0
        written += res.bundles
        log(f"train --all: stage {stage.name}: {res.status} in {res.wall_s:.1f} s"
            + (f" ({res.error})" if res.error else ""))
        if res.status != "ok":
            break
    copied, missing = assemble(root, written)
    return TrainingReport(results, clock() - t_all, quick, seed, str(root), copied, missing)


def markdown(report: TrainingReport) -> str:
    """The ``training`` section of BENCHMARKS.md: wall time per stage on this machine."""
    from tabulate import tabulate  # noqa: PLC0415

    rows = [[s.name, s.status, f"{s.wall_s:.1f}", f"{s.wall_s / 60:.1f}",
             ", ".join(os.path.relpath(b, ROOT) if os.path.isabs(b) else b for b in s.bundles) or "-"]
            for s in report.stages]
    rows.append(["total", "ok" if report.ok else "incomplete", f"{report.total_wall_s:.1f}",
                 f"{report.total_wall_s / 60:.1f}", ""])
    cpus = os.cpu_count() or 0
    lines = ["## Training", "",
             f"`make train` (`hrl-policy train --all`, seed {report.seed}) on {cpus} CPU cores: wall time per stage "
             "(each stage trains in torch with one thread per process and exports numpy bundles to "
             "`policy/bundles/<stack>/`).", "",
             tabulate(rows, headers=["stage", "status", "wall s", "wall min", "bundles written"], tablefmt="github",
                      disable_numparse=True)]
    if report.assembled:
        lines += ["", "Copied from `hrl-scheduler` (ablations evaluated with its trained policies): "
                  + ", ".join(f"`{a}`" for a in report.assembled) + "."]
    if report.missing:
        lines += ["", "Missing after this run: " + "; ".join(f"{k}: {', '.join(v)}" for k, v in report.missing.items())]
    return "\n".join(lines) + "\n"


def write_reports(report: TrainingReport, out_dir: str | Path) -> tuple[Path, Path]:
    """Write ``training.json`` and ``training.csv`` (stage, status, wall_s, bundles) into ``out_dir``."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    j = d / "training.json"
    j.write_text(json.dumps(report.to_json(), indent=1) + "\n", encoding="utf-8")
    c = d / "training.csv"
    with c.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["stage", "status", "wall_s", "bundles"])
        for s in report.stages:
            w.writerow([s.name, s.status, f"{s.wall_s:.3f}", ";".join(s.bundles)])
        w.writerow(["total", "ok" if report.ok else "incomplete", f"{report.total_wall_s:.3f}", ""])
    return j, c


def cmd_train(args: Any) -> int:
    """The body of ``hrl-policy train --all``. Exit 0 when every stage ran and every stack has its bundles,
    1 otherwise (the report says which), 2 without ``--all``."""
    if not getattr(args, "all", False):
        args._parser.print_help(sys.stderr)
        print("hrl-policy train: give --all, or a stage: train encoder | placement | drpc", file=sys.stderr)
        return 2
    root = Path(args.out) if args.out else DEFAULT_ROOT
    stages = [s.strip() for s in args.stages.split(",") if s.strip()] if args.stages else None
    report = run_all(root, quick=args.quick, seed=args.seed, stages=stages)
    full = not args.quick and stages is None and root.resolve() == DEFAULT_ROOT.resolve()
    out_dir = Path(args.report) if args.report else (ROOT / "benchmarks" if full else ROOT / "out" / "train")
    j, c = write_reports(report, out_dir)
    print(f"hrl-policy train: report written to {j} and {c}", file=sys.stderr)
    if full:
        from .benchmarks_md import write_section  # noqa: PLC0415

        write_section("training", markdown(report))
        print("hrl-policy train: BENCHMARKS.md section 'training' updated", file=sys.stderr)
    for stack, paths in report.missing.items():
        print(f"hrl-policy train: {stack}: missing bundle(s) {', '.join(paths)}", file=sys.stderr)
    return 0 if report.ok else 1
