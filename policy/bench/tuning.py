"""The threshold autoscaler's grid search (``python -m policy.bench --tune``): every candidate of
:data:`policy.baselines.threshold.GRID` on the tuning seeds, the best written next to each app."""

from __future__ import annotations

import copy
import copyreg
import json
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic.alias_generators import to_camel
from tqdm import tqdm

from policy.baselines.threshold import GRID, ThresholdParams, candidates, tuning_cost
from policy.documents import dump_yaml
from policy.sim.engine import SimConfig, Simulation
from policy.sim.sizing import cluster_for, trace_rps, window_offset
from policy.sim.stacks import (
    StackContext,
    default_kube_scheduler,
    threshold_hook,
)

from .cells import cached_app
from .common import TUNING_SEEDS
from .runner import run_tasks

__all__ = [
    "tune",
]


# ---- the threshold autoscaler's grid search --------------------------------------------------------------


def _tune_task(
    app: str, trace: str, seed: int, params_json: Sequence[str], minutes: int | None, n_samples: int | None
) -> dict[str, Any]:
    """One tuning run set: the fixed-replica reference and every candidate on one (app, trace, seed). The
    initial placement (the same for all: same seed, same default profile) is computed once and copied."""
    # the frozen state types keep their maps read-only (MappingProxyType), which deepcopy cannot copy by
    # default: copy them through a plain dict
    copyreg.pickle(types.MappingProxyType, lambda m: (types.MappingProxyType, (dict(m),)))

    spec = cached_app(app)
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
    cands = [c.model_dump_json(include={"u_hi", "u_lo", "step_out", "step_in", "cooldown_min"}) for c in candidates()]
    tasks = [(a, t, s, tuple(cands), minutes, n_samples) for a in apps for t in traces for s in TUNING_SEEDS]
    tasks.sort(key=lambda t: t[0] != "alibaba")
    if use_ray:
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
            spec = cached_app(app)
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
                "do not edit by hand.\n" + dump_yaml(doc, sort_keys=False),
                encoding="utf-8",
            )
            print(f"tune: {app}: {best_params} (cost {best_cost:.2f}) -> {path}", file=sys.stderr)
    return report
