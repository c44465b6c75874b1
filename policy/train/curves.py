"""The high level's learning curves side by side (``python -m policy.train.curves``): the validation objective (cost
per minute on the trainer's fixed validation episodes, the policy alone as served) against the CPU-minutes of
training so far, for DAgger (:mod:`policy.train.dagger`: ``progress.csv``, columns ``cpu_minutes`` and
``validation_objective``) and PPO (:mod:`policy.train.hierarchy`: ``validation.csv``, columns ``cpu_minutes`` and
``objective``) runs, with the tuned constant intent's objective on the same episodes as a line when given.

    python -m policy.train.curves runs/dagger-hrl-scheduler runs/hierarchy-hrl-scheduler \\
        --constant 2.41 -o benchmarks/hierarchy_learning_curves.png
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

__all__ = ["read_curve", "plot_curves", "main"]


def read_curve(run_dir: str | Path) -> tuple[str, list[float], list[float]]:
    """``(label, cpu_minutes, objective)`` of a DAgger or PPO run directory. Raises ValueError naming the directory
    when it holds neither file, or a file without the columns."""
    d = Path(run_dir)
    for name, col, label in (
        ("progress.csv", "validation_objective", "DAgger"),
        ("validation.csv", "objective", "PPO"),
    ):
        f = d / name
        if not f.is_file():
            continue
        with f.open(encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
        if not rows or col not in rows[0] or "cpu_minutes" not in rows[0]:
            continue
        return (
            f"{label} ({d.name})",
            [float(r["cpu_minutes"]) for r in rows],
            [float(r[col]) for r in rows],
        )
    raise ValueError(f"{d}: no progress.csv (DAgger) or validation.csv (PPO) with cpu_minutes and the objective")


def plot_curves(runs: Sequence[str | Path], out: str | Path, constant: float | None = None) -> Path:
    """One plot of the runs' curves (:func:`read_curve`) written to ``out``; returns the path."""
    fig, ax = plt.subplots(figsize=(7.2, 4.2))
    for r in runs:
        label, x, y = read_curve(r)
        ax.plot(x, y, "o-", ms=4, label=label)
    if constant is not None:
        ax.axhline(constant, color="0.4", ls="--", lw=1.2, label="tuned constant intent")
    ax.set_xlabel("CPU-minutes of training")
    ax.set_ylabel("validation cost per minute (lower is better)")
    ax.set_title("The learned high level: validation objective against training cost")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m policy.train.curves", description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories of train dagger / train hierarchy")
    p.add_argument("--constant", type=float, default=None, help="the tuned constant's validation objective")
    p.add_argument("-o", "--out", required=True, help="the PNG to write")
    a = p.parse_args(argv)
    try:
        path = plot_curves(a.runs, a.out, a.constant)
    except ValueError as exc:
        print(f"policy.train.curves: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
