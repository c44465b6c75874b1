"""The body of ``hrl-policy simulate``: one run of a stack in a scenario (or in the setting ``baseline-2026-11``
with ``--app`` and ``--trace``), printed as a table or written as one JSON object."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

from tabulate import tabulate

from policy.bundle import bundles_root_arg
from policy.sim.run import simulate
from policy.sim.scenario import run_scenario
from policy.telemetry import say, showing_progress

__all__ = ["cmd_simulate"]


def _run(args):
    """The run ``args`` names: ``(flat, result)``; ValueError for missing or bad arguments."""
    bundles = None if args.bundles is None else bundles_root_arg(args.bundles)
    if args.scenario is None:
        missing = [f for f, v in (("--app", args.app), ("--trace", args.trace)) if v is None]
        if missing:
            raise ValueError(f"{' and '.join(missing)}: required without --scenario")
        flat, res = simulate(
            args.app,
            args.trace,
            args.policy,
            args.nodes,
            30 if args.minutes is None else args.minutes,
            args.seed,
            offset_min=args.offset,
            n_samples=args.samples,
            bundles=bundles,
        )
    else:
        flat, res = run_scenario(
            args.scenario,
            args.policy,
            app=args.app,
            trace=args.trace,
            nodes=args.nodes,
            minutes=args.minutes,
            seed=args.seed,
            offset_min=args.offset,
            n_samples=args.samples,
            bundles=bundles,
        )
    return flat, res


def cmd_simulate(args) -> int:
    """The body of ``hrl-policy simulate``: the JSON object to ``--json PATH`` (``-`` = stdout) or a table.

    Without ``--scenario``, ``--app`` and ``--trace`` are required (the bench's classic setting,
    :func:`policy.sim.run.simulate`); with it, they replace the app and trace of a one-app scenario. ``--bundles
    DIR``: the learned stacks load their bundles from DIR (:func:`policy.bundle.bundles_root_arg`) instead of the
    committed ``policy/bundles``. Raises ValueError (exit 2, one line) for missing or bad arguments."""
    with showing_progress():
        flat, res = _run(args)
    if args.json:
        text = json.dumps(flat, indent=2) + "\n"
        if args.json == "-":
            sys.stdout.write(text)
        else:
            p = Path(args.json)
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text, encoding="utf-8")
            say(f"hrl-policy simulate: wrote {p}", logging.INFO, prog="hrl-policy")
        return 0

    rows = []
    for k, v in flat.items():
        if k == "apps":
            continue
        rows.append([k, f"{v:.3f}" if isinstance(v, float) else ("inf" if v is None else v)])
    rows += [["pods_placed", res.pods_placed], ["unschedulable", res.unschedulable]]
    print(tabulate(rows, disable_numparse=True))
    for name, m in (flat.get("apps") or {}).items():
        print(f"\n{name}")
        print(tabulate([[k, f"{v:.3f}" if v is not None else "inf"] for k, v in m.items()], disable_numparse=True))
    return 0
