"""The body of ``hrl-policy train --all``."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from policy.telemetry import say
from policy.train import pipeline
from policy.train.episodes import TrainingTarget

__all__ = ["cmd_train"]


def cmd_train(args: Any) -> int:
    """The body of ``hrl-policy train --all``. Exit 0 when every stage ran and every stack has its bundles,
    1 otherwise (the report says which), 2 without ``--all``."""
    if not getattr(args, "all", False):
        args._parser.print_help(sys.stderr)
        say(
            "hrl-policy train: give --all, or a stage: train encoder | drpc | placement | hierarchy",
            logging.ERROR,
            prog="hrl-policy",
        )
        return 2
    if args.seed < 0:
        raise ValueError(f"--seed: expected an integer >= 0, got {args.seed}")
    target = TrainingTarget.from_flags(getattr(args, "app", None), getattr(args, "scenario", None))
    # a --quick run, or one on your own app, never overwrites the committed bundles unless --out says so
    own = pipeline.ROOT / "out" / "train" / target.name if target is not None else None
    if args.out:
        root = Path(args.out)
    elif own is not None:
        root = own / "bundles"
    else:
        root = pipeline.QUICK_ROOT if args.quick else pipeline.DEFAULT_ROOT
    stages = [s.strip() for s in args.stages.split(",") if s.strip()] if args.stages is not None else None
    if stages is not None:
        known = [s.name for s in pipeline.STAGES]
        bad = [s for s in stages if s not in known]
        if bad or not stages:
            raise ValueError(f"--stages: expected a comma-separated subset of {','.join(known)}, got {args.stages!r}")
    board = Path(args.tensorboard) if getattr(args, "tensorboard", None) else None
    report = pipeline.run_all(
        root, quick=args.quick, seed=args.seed, stages=stages, options=pipeline.StageOptions(target, board)
    )
    full = not args.quick and stages is None and target is None and root.resolve() == pipeline.DEFAULT_ROOT.resolve()
    if args.report:
        out_dir = Path(args.report)
    else:
        out_dir = own or (pipeline.ROOT / "benchmarks" if full else pipeline.ROOT / "out" / "train")
    j, c = pipeline.write_reports(report, out_dir)
    print(
        f"hrl-policy train: report written to {j} and {c}; bundles "
        + (f"under {root}" if all(st.status == "ok" for st in report.stages) else f"unchanged in {root}"),
        file=sys.stderr,
    )
    if full:
        from policy.bench.markdown import write_section

        write_section("training", pipeline.markdown(report))
        say("hrl-policy train: BENCHMARKS.md section 'training' updated", logging.INFO, prog="hrl-policy")
    for stack, paths in report.missing.items():
        say(f"hrl-policy train: {stack}: missing bundle(s) {', '.join(paths)}", logging.ERROR, prog="hrl-policy")
    return 0 if report.ok else 1
