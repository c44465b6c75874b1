#!/usr/bin/env python3
"""`make demo`: hrl-scheduler's main job on the embedded default, side by side with kube-scheduler.

The real Online Boutique manifests are deployed on a simulated cluster (8 nodes of 2 vCPU / 8 GiB) and
driven for 30 minutes by the real NASA-HTTP request-rate trace, scaled so its peak loads the app's
busiest service to 80% of its CPU limit. The same cluster, trace and seed are run twice:

(a) ``default-kube-scheduler``: kube-scheduler's default scoring (NodeResourcesFit LeastAllocated +
    NodeResourcesBalancedAllocation, weights 1 and 1), no descheduler;
(b) ``hrl-scheduler``: the same kube-scheduler model, with our extender registered exactly as the shipped
    KubeSchedulerConfiguration does (prioritize + filter verbs, nodeCacheCapable, ignorable), served over
    real HTTP on 127.0.0.1 by ``extender.server.ExtenderServer``; every pod's scheduling cycle POSTs the
    ExtenderArgs JSON kube-scheduler would send. The extender serves the learned low-level policy of
    ``policy/bundles/hrl-scheduler/low`` when that bundle exists (else ``TopologyHeuristic``). Our descheduler
    (``descheduler.loop.run_once`` with the hierarchical planner ``policy.highlevel.HierarchicalPolicy``) runs every
    simulated minute: replica targets every minute through the simulator's scale subresource (the DRPC
    students of ``policy/bundles/hrl-scheduler/high`` when that bundle exists, else the utilisation-target
    stand-in), moves every 5 minutes through its Eviction API, and each cycle's intent is published to the
    extender's store; evicted and new pods are placed through the extender;
(c) ``drpc``: DRPC's autoscaling with default placement, no extender (the ``drpc`` stack of the
    ``hrl_scheduler.stacks`` entry points with its bundle; while that is unavailable, a stand-in: the
    utilisation-target autoscaler through the same descheduler loop, marked ``"learned": false``).

Prints the comparison table and writes ``out/demo.json``. This script is the only place that wires the
three packages together (policy never imports extender or descheduler). No torch: bundles are served in numpy.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families
from tabulate import tabulate

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from descheduler.guards import EvictionHistory
from descheduler.loop import run_once
from descheduler.scale import SimScaler
from descheduler.stacks import MOVE_MARGIN, sim_descheduler_config
from extender.config import load_extender_config
from extender.server import ExtenderServer
from policy.bundle import DEFAULT_BUNDLES
from policy.highlevel import (
    FixedIntent,
    HierarchicalPolicy,
    UtilizationIntent,
    UtilizationTargetAutoscaler,
    load_learned_autoscaler,
)
from policy.lowlevel import (
    TopologyHeuristic,
    load_learned_placement,
)
from policy.sim.app import load_app
from policy.sim.engine import (
    METRIC_KEYS,
    ClusterSpec,
    PeriodicHook,
    SimConfig,
    Simulation,
    metrics_table_row,
    rps_for_app,
)
from policy.sim.kube_scheduler import HttpExtender, KubeSchedulerModel
from policy.sim.model import PerfModel
from policy.sim.stacks import StackContext, autoscaled_workloads, available_stacks, run_stack
from policy.sim.traces import load_trace

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


def learned_or(load, path: Path, fallback, what: str):
    """``(load(path), True)``, or ``(fallback(), False)`` with one line saying why when the bundle is missing or
    does not load (the demo runs everywhere; `make bench` never falls back)."""
    try:
        return load(path), True
    except Exception as exc:  # noqa: BLE001 - BundleMissing, BundleError, ImportError: say it, use the stand-in
        log(f"{what}: {' '.join(str(exc).split())[:200]}; using the stand-in")
        return fallback(), False


def drpc_row(app, rps, spec, cfg) -> tuple[object, bool]:
    """The DRPC row: the ``drpc`` stack (from the ``hrl_scheduler.stacks`` entry points, else
    ``policy.sim.drpc.drpc_stack`` directly) when its bundle loads, else the stand-in autoscaler."""
    try:
        if "drpc" in available_stacks():
            return run_stack("drpc", app, rps, spec, cfg), True
        from policy.sim.drpc import drpc_stack

        built = drpc_stack(StackContext(app, spec, cfg.seed, cfg))
        return Simulation(
            app,
            rps,
            spec,
            built.scheduler,
            cfg,
            hooks=built.hooks,
            on_change=built.on_change,
            scheduler_name=built.scheduler_name,
        ).run(), True
    except Exception as exc:  # noqa: BLE001 - not there, or its bundle is missing: say it, run the stand-in
        log(f"drpc stack: {' '.join(str(exc).split())[:200]}; using the stand-in autoscaler")
    workloads = tuple(autoscaled_workloads(app))
    des_config = sim_descheduler_config()
    planner = HierarchicalPolicy(
        autoscaler=UtilizationTargetAutoscaler(workloads=workloads),
        intent_policy=FixedIntent(),
        rebalance=False,
        workloads=workloads,
        excluded_namespaces=tuple(des_config.excluded_namespaces),
        name="drpc-stand-in",
    )

    def autoscale(sim: Simulation) -> None:
        run_once(
            sim.observe, sim.evictor, planner, TopologyHeuristic(), des_config, None, sim.now_s, scaler=SimScaler(sim)
        )

    hook = PeriodicHook("autoscaler", 1, autoscale)
    return Simulation(app, rps, spec, KubeSchedulerModel(), cfg, hooks=[hook]).run(), False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--app", default="online-boutique")
    ap.add_argument("--trace", default="nasa")
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--minutes", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--peak-utilization", type=float, default=0.8)
    ap.add_argument("--descheduler-period-min", type=int, default=5, help="minutes between move plans")
    ap.add_argument("--json", default=str(ROOT / "out" / "demo.json"), help="where to write the results")
    args = ap.parse_args(argv)

    t_start = time.monotonic()
    app = load_app(args.app)
    model = PerfModel(app)
    rps = rps_for_app(load_trace(args.trace, args.minutes), model, app, args.peak_utilization)
    spec = ClusterSpec(nodes=args.nodes, cpu_m=2000, memory_bytes=8 * 1024**3)
    cfg = SimConfig(minutes=args.minutes, seed=args.seed)
    log(
        f"{app.name}: {len(app.workloads)} workloads, {len(app.graph.edges)} call edges; trace {args.trace}: "
        f"{args.minutes} min, {rps.min():.1f}-{rps.max():.1f} user req/s; {args.nodes} nodes x 2 vCPU / 8 GiB"
    )

    # (a) default kube-scheduler scoring
    log("running default-kube-scheduler ...")
    base = Simulation(app, rps, spec, KubeSchedulerModel(), cfg).run()

    # (b) hrl-scheduler: the extender over real HTTP + the hierarchical descheduler every minute
    ext_config = load_extender_config(
        {
            "apiVersion": "hrl-scheduler.io/v1alpha1",
            "kind": "ExtenderConfiguration",
            "listen": {"host": "127.0.0.1", "port": 0},
        }
    )
    workloads = tuple(autoscaled_workloads(app))
    placement, learned_low = learned_or(
        load_learned_placement, DEFAULT_BUNDLES / "hrl-scheduler" / "low", TopologyHeuristic, "learned placement"
    )
    autoscaler, learned_high = learned_or(
        lambda p: load_learned_autoscaler(p, workloads, slo_p95_ms=app.slo_p95_ms),
        DEFAULT_BUNDLES / "hrl-scheduler" / "high",
        lambda: UtilizationTargetAutoscaler(workloads=workloads),
        "DRPC students",
    )
    with ExtenderServer(ext_config, policy=placement) as server:
        log(f"extender listening on {server.url} (placement {placement.name})")
        client = HttpExtender(server.url, weight=EXTENDER_WEIGHT, node_cache_capable=True, ignorable=True)
        scheduler = KubeSchedulerModel(extenders=[client])
        des_config = sim_descheduler_config()
        planner = HierarchicalPolicy(
            autoscaler=autoscaler,
            intent_policy=UtilizationIntent(),
            margin=MOVE_MARGIN,
            moves_period_s=args.descheduler_period_min * 60.0,
            scale_period_s=60.0,
            workloads=workloads,
            excluded_namespaces=tuple(des_config.excluded_namespaces),
        )
        history = EvictionHistory()
        cycles = []

        def descheduler(sim: Simulation) -> None:
            if learned_high:  # the DRPC students read per-service metrics, as from a service mesh
                from policy.sim.drpc import signals_from_sim

                autoscaler.signals = signals_from_sim(sim)
            report = run_once(
                sim.observe, sim.evictor, planner, placement, des_config, history, sim.now_s, scaler=SimScaler(sim)
            )
            cycles.append(report)
            server.store.set_intent(report.intent, version=len(cycles))
            scaled = [
                f"{r.workload.split('/')[-1]} {r.current}->{r.target}" for r in report.scaling if r.outcome == "scaled"
            ]
            if report.planned_moves or scaled:
                log(
                    f"  t={sim.now_s / 60:.0f} min descheduler: {len(report.planned_moves)} planned, "
                    f"{report.counts['evicted']} evicted, {report.counts['blocked']} blocked; "
                    f"scaled: {', '.join(scaled) or 'none'}; intent {[round(x, 2) for x in report.intent]}"
                )

        log("running hrl-scheduler (extender + hierarchical descheduler) ...")
        hook = PeriodicHook("descheduler", 1, descheduler)
        sim = Simulation(
            app,
            rps,
            spec,
            scheduler,
            cfg,
            hooks=[hook],
            on_change=lambda snap: server.store.update(snap),
            scheduler_name="hrl-scheduler",
        )
        hrl = sim.run()
        calls = prioritize_calls(server.base_url + "/metrics")
        client.close()

    # (c) DRPC: learned autoscaling with default placement, no extender
    log("running drpc (autoscaling, default placement) ...")
    drpc, learned_drpc = drpc_row(app, rps, spec, cfg)

    drpc_name = "drpc" if learned_drpc else "drpc (stand-in)"
    rows = [
        metrics_table_row("default-kube-scheduler", base.metrics),
        metrics_table_row("hrl-scheduler", hrl.metrics),
        metrics_table_row(drpc_name, drpc.metrics),
    ]
    headers = ["policy", "mean ms", "p95 ms", "p99 ms", "failed %", "cross-node calls %", "CPU core-h", "evictions"]
    print(f"\n{app.name} on {args.nodes} simulated nodes, {args.trace} trace, {args.minutes} min, seed {args.seed}\n")
    print(tabulate(rows, headers=headers, floatfmt=".2f"))
    scaled = sum(1 for c in cycles for r in c.scaling if r.outcome == "scaled")
    print(
        f"\nhrl-scheduler: {hrl.pods_placed} pods placed, {calls} prioritize calls counted by the extender, "
        f"{len(cycles)} descheduler cycles, {scaled} scale-subresource updates; "
        f"placement {'learned' if learned_low else 'TopologyHeuristic (no bundle)'}, autoscaler "
        f"{'DRPC students' if learned_high else 'utilisation-target stand-in (no bundle)'}"
    )
    if not learned_drpc:
        print(
            "drpc (stand-in): the DRPC stack or its bundle is not available here; the utilisation-target "
            "autoscaler ran in its place"
        )

    out = {
        "app": app.name,
        "trace": args.trace,
        "nodes": args.nodes,
        "minutes": args.minutes,
        "seed": args.seed,
        "policies": {
            "default-kube-scheduler": {k: base.metrics[k] for k in METRIC_KEYS},
            "hrl-scheduler": {
                **{k: hrl.metrics[k] for k in METRIC_KEYS},
                "pods_placed": hrl.pods_placed,
                "extender_prioritize_calls": calls,
                "scale_updates": scaled,
                "learned": {"placement": learned_low, "autoscaler": learned_high},
            },
            "drpc": {**{k: drpc.metrics[k] for k in METRIC_KEYS}, "learned": learned_drpc},
        },
    }
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    log(f"wrote {path} in {time.monotonic() - t_start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
