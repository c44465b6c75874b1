"""Placement alone in the simulator: fixed replicas, kube-scheduler's default profile with or without a
placement policy as its extender, on the built-in apps (the comparison behind ``make bench``'s ``placement``
section, :mod:`policy.bench.placement`, and the final evaluation of :mod:`policy.train.placement`)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from policy.baselines.kube_default import default_score_plugins
from policy.index import ClusterIndex
from policy.lowlevel import EXTENDER_WEIGHT, PlacementPolicy, TopologyHeuristic
from policy.sim.app import load_app
from policy.sim.sizing import cluster_for, trace_rps
from policy.sim.stacks import StackBuild, StackContext, terms_lookup

from .engine import METRIC_KEYS, SimConfig, Simulation, background_tenants
from .kube_scheduler import InProcessExtender, KubeSchedulerModel
from .sizing import window_offset

__all__ = [
    "APPS",
    "TRAIN_APPS",
    "SETTINGS",
    "placement_stack",
    "start_with_metrics",
    "cluster_for_setting",
    "run_placement",
    "compare",
    "markdown_table",
]


APPS = (
    "online-boutique",
    "sock-shop",
    "dsb-hotel-reservation",
    "dsb-social-network",
    "dsb-media-microservices",
    "alibaba",
)


TRAIN_APPS = ("online-boutique", "sock-shop", "dsb-hotel-reservation")


SETTINGS = ("bench", "background")


def placement_stack(
    policy: PlacementPolicy | None, weight: int = EXTENDER_WEIGHT, intent: Sequence[float] | None = None
):
    """A stack factory (``factory(ctx) -> StackBuild``): kube-scheduler's default profile plus, unless ``policy``
    is ``None``, an in-process extender serving ``policy`` with ``weight`` (filter + prioritize, as shipped),
    fed the current snapshot before every cycle and ``intent``."""

    def factory(ctx) -> StackBuild:
        plugins = default_score_plugins(terms_lookup(ctx.app))
        if policy is None:
            return StackBuild(KubeSchedulerModel(plugins=plugins))
        state: dict[str, Any] = {"index": None}

        def on_change(snap) -> None:
            state["index"] = ClusterIndex.build(snap)

        ext = InProcessExtender(policy, lambda: (state["index"], intent), weight=weight)
        return StackBuild(KubeSchedulerModel(plugins=plugins, extenders=[ext]), on_change=on_change)

    return factory


def start_with_metrics(sim: Simulation) -> None:
    """Start ``sim`` (create and place the pods) with the background tenants' CPU use already measured, as a
    metrics pipeline would report it when the app is deployed into a running cluster: the simulator measures
    use only from its first minute on, so without this every minute-0 scheduling cycle sees idle nodes.
    (Reads and sets ``Simulation._last_pod_usage_m``; a ``Simulation`` option would be cleaner.)"""
    sim.start(schedule=False)
    if sim.background:
        usage = dict(sim._last_pod_usage_m)
        for p in sim.cluster.live_pods():
            b = sim.background.get(p.workload)
            if b is not None and p.node >= 0:
                usage[p.info.key] = float(b.cpu_use_m)
        sim._last_pod_usage_m = usage
    sim.schedule_pending()


def cluster_for_setting(app, setting: str, seed: int):
    """The bench cluster of ``app`` (:func:`policy.sim.sizing.cluster_for`); ``setting="background"`` adds two
    background-tenant pods per node (30 % of the node's CPU requested, 35 % used)."""
    spec = cluster_for(app)
    if setting == "background":
        spec = replace(
            spec,
            background=background_tenants(
                spec.nodes,
                spec.cpu_m,
                spec.memory_bytes,
                pods_per_node=2,
                request_frac=0.3,
                use_frac=0.35,
                seed=1000 + seed,
            ),
        )
    return spec


def run_placement(
    app_name: str,
    policy: PlacementPolicy | None,
    seed: int,
    minutes: int = 30,
    setting: str = "bench",
    trace: str = "nasa",
) -> dict[str, float]:
    """One simulation (fixed replicas) of ``app_name`` placed by default scoring (+ ``policy`` as an extender);
    returns the metrics (:data:`policy.sim.engine.METRIC_KEYS`)."""
    app = load_app(app_name)
    rps = trace_rps(app, trace, minutes, window_offset(trace, minutes))
    spec = cluster_for_setting(app, setting, seed)
    cfg = SimConfig(minutes=len(rps), seed=seed)
    built = placement_stack(policy)(StackContext(app, spec, seed, cfg))
    sim = Simulation(app, rps, spec, built.scheduler, cfg, hooks=built.hooks, on_change=built.on_change)
    start_with_metrics(sim)
    res = sim.run()
    return {k: float(res.metrics[k]) for k in METRIC_KEYS}


def compare(
    apps: Sequence[str],
    seeds: Sequence[int],
    minutes: int = 30,
    learned: Mapping[str, PlacementPolicy] | None = None,
    settings: Sequence[str] = SETTINGS,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Every app × setting × policy (``default``, ``+heuristic``, ``+<name>`` for each of ``learned``) over
    ``seeds``: ``{"rows": [{"app", "setting", "policy", "<metric>": mean, "<metric>_sd": sd}], "seeds",
    "minutes", "wall_s"}``."""
    policies: dict[str, PlacementPolicy | None] = {"default": None, "+heuristic": TopologyHeuristic()}
    for k, v in (learned or {}).items():
        policies["+" + k] = v
    t0 = time.perf_counter()
    rows = []
    for app in apps:
        for setting in settings:
            for name, pol in policies.items():
                runs = [run_placement(app, pol, s, minutes, setting) for s in seeds]
                row: dict[str, Any] = {"app": app, "setting": setting, "policy": name}
                for k in METRIC_KEYS:
                    v = np.array([r[k] for r in runs], dtype=np.float64)
                    row[k] = float(v.mean())
                    row[k + "_sd"] = float(v.std(ddof=1)) if len(v) > 1 else 0.0
                rows.append(row)
            if log is not None:
                log(f"placement bench: {app} ({setting}) done, {time.perf_counter() - t0:.0f} s")
    return {"rows": rows, "seeds": list(seeds), "minutes": minutes, "wall_s": time.perf_counter() - t0}


def markdown_table(table: Mapping[str, Any]) -> str:
    """The comparison as a Markdown table (mean ± sd over the seeds; ratios to ``default`` for latency)."""
    rows = table["rows"]
    base = {(r["app"], r["setting"]): r for r in rows if r["policy"] == "default"}
    out = [
        "| app | cluster | placement | mean ms | p95 ms | failed % | cross-node calls % | mean / default |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        b = base[(r["app"], r["setting"])]
        held = "" if r["app"] in TRAIN_APPS else " (held out)"
        ratio = r["latency_mean_ms"] / b["latency_mean_ms"] if b["latency_mean_ms"] > 0 else math.nan
        out.append(
            f"| {r['app']}{held} | {r['setting']} | {r['policy']} | {r['latency_mean_ms']:.1f} ± "
            f"{r['latency_mean_ms_sd']:.1f} | {r['latency_p95_ms']:.1f} ± {r['latency_p95_ms_sd']:.1f} | "
            f"{r['failed_pct']:.2f} | {r['cross_node_call_pct']:.1f} | {ratio:.3f} |"
        )
    return "\n".join(out)
