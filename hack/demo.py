#!/usr/bin/env python3
"""`make demo`: hrl-scheduler's main job on a contended cluster, side by side with what users run today.

The default scenario is ``shared-cluster`` (``policy/data/scenarios/shared-cluster.yaml``): the real manifests
of Online Boutique, Sock Shop and DSB hotel reservation on 10 nodes of 4 vCPU, each app driven by its own real
request-rate trace (NASA-HTTP, Twitter, a bursty trace) peaking at 1.25x its busiest service's CPU, next to
other tenants' pods whose CPU use follows Alibaba's 2021 node distribution: nodes run at 40-80 % CPU, so where
pods go and how many there are decides who competes with whom. The same cluster, traces and seed are run four
times:

(a) ``default-kube-scheduler``: kube-scheduler's default scoring, fixed replicas, no descheduler;
(b) ``default-kube-scheduler+hpa``: the same with a HorizontalPodAutoscaler at 80 % CPU on every Deployment
    (what most clusters run);
(c) ``hrl-scheduler``: the same kube-scheduler model with our extender registered as the shipped
    KubeSchedulerConfiguration does (prioritize, nodeCacheCapable, ignorable), served over real HTTP on
    127.0.0.1 by ``extender.server.ExtenderServer`` with the served learned placement
    (``policy/bundles/hrl-ensemble/low``: the placements of training seeds 0, 1 and 2, averaged;
    ``policy.bundle.SERVED_STACK``); our descheduler (``descheduler.loop.run_once`` with the hierarchical
    planner of ``policy.sim.hrl_stacks.hrl_planner``) runs every simulated minute: the served learned high level
    (``policy/bundles/hrl-ensemble/high``, the same seeds' intents averaged) sets the intent every 5 minutes (per
    service a capacity target and a co-location priority, globally locality / balance weights and a move budget),
    the intent autoscaler carries the capacity targets out through the scale subresource, moves go through the Eviction
    API, in-place CPU resizes through ``pods/resize``, and each intent is published to the extender's store
    (with its co-location priorities), so new and evicted pods are placed by it. Every change of the intent is
    printed. Without the intent bundle, the DRPC students and the utilisation rule stand in (said so);
(d) ``drpc``: DRPC's learned autoscaling with default placement (the ``drpc`` stack).

Prints the comparison table and writes ``out/demo.json`` (``intents``: every intent the high level chose).
This script is the only place that wires the three packages together (policy never imports extender or
descheduler). No torch: bundles are served in numpy.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from prometheus_client.parser import text_string_to_metric_families
from tabulate import tabulate

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from descheduler.guards import EvictionHistory
from descheduler.loop import CycleDeps, run_once
from extender.config import load_extender_config
from extender.server import ExtenderServer
from policy.bundle import DEFAULT_BUNDLES, SERVED_STACK
from policy.highlevel import IntentEnsemble, LearnedIntent, UtilizationTargetAutoscaler
from policy.lowlevel import TopologyHeuristic
from policy.sim.engine import METRIC_KEYS, PeriodicHook, Simulation, metrics_table_row
from policy.sim.hrl_stacks import VARIANTS, StackParts, hrl_planner, load_parts, sim_descheduler_config
from policy.sim.kube_scheduler import HttpExtender, KubeSchedulerModel
from policy.sim.scenario import build
from policy.sim.stacks import StackContext, autoscaled_workloads, run_stack
from policy.sim.subresources import SimMover, SimResizer, SimScaler

#: The extender's weight in the shipped KubeSchedulerConfiguration (manifests/): each 0..10 score is
#: multiplied by weight × 10 and added to the in-tree plugins' weighted sum.
EXTENDER_WEIGHT = 2


def log(msg: str) -> None:
    print(f"[demo] {msg}", file=sys.stderr, flush=True)


def prioritize_calls(metrics_url: str) -> int:
    """The extender's own counter, read from its /metrics endpoint like Prometheus would."""
    text = httpx.get(metrics_url, timeout=5.0).text
    total = 0.0
    for fam in text_string_to_metric_families(text):
        if fam.name == "hrl_extender_prioritize":
            total += sum(s.value for s in fam.samples if s.name == "hrl_extender_prioritize_total")
    return int(total)


def hrl_parts(ctx: StackContext) -> tuple[StackParts, dict[str, bool]]:
    """hrl-scheduler's served parts from ``policy/bundles/<SERVED_STACK>`` (:func:`policy.sim.hrl_stacks.load_parts`),
    or stand-ins with one line saying why (the demo runs everywhere; `make bench` never falls back). Returns the parts
    and which of them are learned."""
    try:
        parts = load_parts(VARIANTS[SERVED_STACK], ctx)
    except Exception as exc:  # noqa: BLE001 - BundleMissing, BundleError: say it, use the stand-ins
        log(f"hrl-scheduler bundles: {' '.join(str(exc).split())[:200]}; using the heuristic stand-ins")
        workloads = tuple(autoscaled_workloads(ctx.app))
        return StackParts(TopologyHeuristic(), UtilizationTargetAutoscaler(workloads=workloads), None), {
            "placement": False,
            "autoscaler": False,
            "intent": False,
        }
    learned_intent = isinstance(parts.intent_policy, (LearnedIntent, IntentEnsemble))
    if not learned_intent:
        log(
            f"no learned high level in {DEFAULT_BUNDLES / SERVED_STACK / 'high'}: the DRPC students "
            "and the utilisation rule set the replicas and the intent"
        )
    return parts, {"placement": True, "autoscaler": True, "intent": learned_intent}


def intent_record(minute: float, report: Any) -> dict[str, Any]:
    """What the demo prints and saves of one cycle's intent."""
    cap = dict(report.intent.capacity_target)
    col = dict(report.intent.colocation_priority)
    vec = report.intent.values
    return {
        "minute": round(minute, 1),
        "locality_weight": round(float(vec[0]), 3),
        "balance_weight": round(float(vec[1]), 3) if len(vec) > 1 else None,
        "capacity_targets": {k: round(float(v), 3) for k, v in sorted(cap.items())},
        "colocation_priority": {k: round(float(v), 3) for k, v in sorted(col.items())},
    }


def describe(rec: dict[str, Any]) -> str:
    """One line of an intent: global weights, the capacity targets' range, the most and least co-located."""
    parts = [f"locality {rec['locality_weight']:.2f}"]
    if rec["balance_weight"] is not None:
        parts.append(f"balance {rec['balance_weight']:.2f}")
    cap = rec["capacity_targets"]
    if cap:
        lo, hi = min(cap, key=cap.get), max(cap, key=cap.get)
        parts.append(
            f"capacity targets {np.mean(list(cap.values())):.2f} mean ({lo} {cap[lo]:.2f} .. {hi} {cap[hi]:.2f})"
        )
    col = rec["colocation_priority"]
    if col:
        hi = max(col, key=col.get)
        parts.append(f"co-locate first: {hi} ({col[hi]:.2f})")
    return ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="shared-cluster", help="a scenario name or file (policy/data/scenarios)")
    ap.add_argument("--minutes", type=int, default=None, help="simulated minutes (default: the scenario's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=str(ROOT / "out" / "demo.json"), help="where to write the results")
    args = ap.parse_args(argv)

    t_start = time.monotonic()
    run = build(args.scenario, minutes=args.minutes, seed=args.seed)
    app, rps, spec, cfg = run.app, run.rps, run.cluster, run.config
    minutes = len(rps)
    log(
        f"scenario {run.scenario.name}: {' + '.join(run.apps)} ({len(app.workloads)} workloads, "
        f"{len(app.graph.edges)} call edges); traces {', '.join(run.traces)}; {minutes} min; "
        f"{spec.nodes} nodes"
    )

    results: dict[str, Any] = {}
    for name in ("default-kube-scheduler", "default-kube-scheduler+hpa"):
        log(f"running {name} ...")
        results[name] = run_stack(name, app, rps, spec, cfg)

    # hrl-scheduler: the extender over real HTTP + the hierarchical descheduler every minute
    ctx = StackContext(app, spec, cfg.seed, cfg)
    parts, learned = hrl_parts(ctx)
    des_config = sim_descheduler_config(app)
    workloads = tuple(autoscaled_workloads(app))
    planner = hrl_planner(VARIANTS[SERVED_STACK], parts, des_config, workloads)
    ext_config = load_extender_config(
        {"apiVersion": "hrl-scheduler.io/v1alpha1", "kind": "ExtenderConfiguration", "listen": {"port": 0}}
    )
    intents: list[dict[str, Any]] = []
    cycles = []
    with ExtenderServer(ext_config, policy=parts.placement) as server:
        where = f"policy/bundles/{SERVED_STACK}"
        log(f"extender listening on {server.url} (placement {parts.placement.name}, bundles {where})")
        client = HttpExtender(server.url, weight=EXTENDER_WEIGHT, node_cache_capable=True, ignorable=True)
        scheduler = KubeSchedulerModel(extenders=[client])
        history = EvictionHistory()
        readers = [x for x in (planner.autoscaler, planner.intent_policy) if x is not None and hasattr(x, "signals")]

        def descheduler(sim: Simulation) -> None:
            if readers:  # the learned parts read per-service metrics, as from a service mesh
                from policy.sim.drpc import signals_from_sim

                signals = signals_from_sim(sim)
                for x in readers:
                    x.signals = signals
            report = run_once(
                CycleDeps(
                    sim.observe,
                    sim.evictor,
                    planner,
                    parts.placement,
                    des_config,
                    history=history,
                    scaler=SimScaler(sim),
                    resizer=SimResizer(sim) if planner.resizer is not None else None,
                    mover=SimMover(sim),
                ),
                sim.now_s,
            )
            cycles.append(report)
            # the pending moves' expiry is simulated time; the served extender's clock is the wall clock
            wall = time.time() - sim.now_s
            moves = tuple(replace(m, expires_at_s=m.expires_at_s + wall) for m in report.pending_moves)
            server.store.set_intent(report.intent, version=len(cycles), pending_moves=moves)
            rec = intent_record(sim.now_s / 60.0, report)
            if not intents or {k: v for k, v in rec.items() if k != "minute"} != {
                k: v for k, v in intents[-1].items() if k != "minute"
            }:
                intents.append(rec)
                log(f"  t={rec['minute']:.0f} min intent: {describe(rec)}")

        log("running hrl-scheduler (extender over HTTP + hierarchical descheduler) ...")
        sim = Simulation(
            app,
            rps,
            spec,
            scheduler,
            cfg,
            hooks=[PeriodicHook("descheduler", 1, descheduler)],
            on_change=lambda snap: server.store.update(snap),
            scheduler_name="hrl-scheduler",
        )
        results["hrl-scheduler"] = hrl = sim.run()
        calls = prioritize_calls(server.base_url + "/metrics")
        client.close()

    log("running drpc (learned autoscaling, default placement) ...")
    try:
        results["drpc"] = run_stack("drpc", app, rps, spec, cfg)
    except Exception as exc:  # noqa: BLE001 - its bundle is missing: say it, leave the row out
        log(f"drpc: {' '.join(str(exc).split())[:200]}; row left out")

    headers = ["policy", "mean ms", "p95 ms", "p99 ms", "failed %", "cross-node calls %", "CPU core-h", "evictions"]
    print(f"\n{run.scenario.name}: {' + '.join(run.apps)} on {spec.nodes} nodes, {minutes} min, seed {args.seed}\n")
    print(tabulate([metrics_table_row(k, r.metrics) for k, r in results.items()], headers=headers, floatfmt=".2f"))
    scaled = sum(1 for c in cycles for r in c.scaling if r.outcome == "scaled")
    resized = sum(1 for c in cycles for r in c.resizes if r.outcome == "resized")
    print(
        f"\nhrl-scheduler: {hrl.pods_placed} pods placed, {calls} prioritize calls counted by the extender, "
        f"{len(cycles)} descheduler cycles, {scaled} scale-subresource updates, {resized} in-place resizes, "
        f"{len(intents)} distinct intents; placement {'learned' if learned['placement'] else 'heuristic'}, "
        f"high level {'learned (intent)' if learned['intent'] else 'DRPC students + utilisation rule'}"
    )

    out = {
        "scenario": run.scenario.name,
        "apps": list(run.apps),
        "traces": list(run.traces),
        "nodes": spec.nodes,
        "minutes": minutes,
        "seed": args.seed,
        "policies": {k: {m: r.metrics[m] for m in METRIC_KEYS} for k, r in results.items()},
        "intents": intents,
    }
    out["policies"]["hrl-scheduler"].update(
        {
            "pods_placed": hrl.pods_placed,
            "extender_prioritize_calls": calls,
            "scale_updates": scaled,
            "resizes": resized,
            "learned": learned,
        }
    )
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    log(f"wrote {path} in {time.monotonic() - t_start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
