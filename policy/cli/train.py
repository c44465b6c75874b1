"""The body of ``hrl-policy train --all``."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from policy.telemetry import note, say
from policy.train import pipeline
from policy.train.episodes import TrainingTarget
from policy.train.finetune import FINE_TUNED_STAGES, FineTune

__all__ = ["cmd_train"]


def cmd_train(args: Any) -> int:
    """The body of ``hrl-policy train --all``. Exit 0 when every stage ran and every stack has its bundles,
    1 otherwise (the report says which), 2 without ``--all``. A bad flag value (``--seed``, ``--stages``, ``--app``,
    ``--scenario``, ``--fine-tune`` and the bundles it names) raises ``ValueError`` naming the flag before any
    stage runs (exit 2, one line)."""
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
    fine_tune = FineTune.from_flag(getattr(args, "fine_tune", None), app_given=target is not None)
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
        if fine_tune is not None and any(s not in FINE_TUNED_STAGES for s in stages):
            raise ValueError(
                f"--stages: with --fine-tune, expected a subset of {','.join(FINE_TUNED_STAGES)} (the encoder is not "
                f"fine-tuned: the other bundles read its embeddings), got {args.stages!r}"
            )
    board = Path(args.tensorboard) if getattr(args, "tensorboard", None) else None
    report = pipeline.run_all(
        root,
        quick=args.quick,
        seed=args.seed,
        stages=stages,
        log=note,  # each stage's lines: plain lines with text logs, records with --log-format json
        options=pipeline.StageOptions(target, board, fine_tune),
    )
    full = not args.quick and stages is None and target is None and root.resolve() == pipeline.DEFAULT_ROOT.resolve()
    if args.report:
        out_dir = Path(args.report)
    else:
        out_dir = own or (pipeline.ROOT / "benchmarks" if full else pipeline.ROOT / "out" / "train")
    j, c = pipeline.write_reports(report, out_dir)
    note(
        f"hrl-policy train: report written to {j} and {c}; bundles "
        + (f"under {root}" if all(st.status == "ok" for st in report.stages) else f"unchanged in {root}")
    )
    if full:
        from policy.bench.markdown import write_section

        write_section("training", pipeline.markdown(report))
        say("hrl-policy train: BENCHMARKS.md section 'training' updated", logging.INFO, prog="hrl-policy")
    for stack, paths in report.missing.items():
        say(f"hrl-policy train: {stack}: missing bundle(s) {', '.join(paths)}", logging.ERROR, prog="hrl-policy")
    return 0 if report.ok else 1
