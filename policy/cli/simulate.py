"""The body of ``hrl-policy simulate``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from policy.sim.engine import METRIC_KEYS
from policy.sim.run import simulate

__all__ = ["cmd_simulate"]


def cmd_simulate(args) -> int:
    """The body of ``hrl-policy simulate``: the JSON object to ``--json PATH`` (``-`` = stdout) or a table."""
    flat, res = simulate(args.app, args.trace, args.policy, args.nodes, args.minutes, args.seed)
    if args.json:
        text = json.dumps(flat, indent=2) + "\n"
        if args.json == "-":
            sys.stdout.write(text)
        else:
            p = Path(args.json)
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text, encoding="utf-8")
            print(f"hrl-policy simulate: wrote {p}", file=sys.stderr)
        return 0
    from tabulate import tabulate

    rows = [[k, flat[k]] for k in ("app", "trace", "policy", "nodes", "minutes", "seed")]
    rows += [[k, f"{flat[k]:.3f}" if flat[k] is not None else "inf"] for k in METRIC_KEYS]
    rows += [["pods_placed", res.pods_placed], ["unschedulable", res.unschedulable]]
    print(tabulate(rows, disable_numparse=True))
    return 0
