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
    ExtenderArgs JSON kube-scheduler would send. Our descheduler (``descheduler.loop.run_once``) runs every
    5 simulated minutes on the simulator's Eviction API; evicted pods are re-placed through the extender.

Prints the comparison table and writes ``out/demo.json``. This script is the only place that wires the
three packages together (policy never imports extender or descheduler).
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

from descheduler.config import load_descheduler_config, planner_from_config  # noqa: E402
from descheduler.guards import EvictionHistory  # noqa: E402
from descheduler.loop import run_once  # noqa: E402
from extender.config import load_extender_config  # noqa: E402
from extender.server import ExtenderServer  # noqa: E402
from policy.lowlevel import TopologyHeuristic  # noqa: E402
from policy.sim.app import load_app  # noqa: E402
from policy.sim.engine import (  # noqa: E402
    METRIC_KEYS,
    ClusterSpec,
    PeriodicHook,
    SimConfig,
    Simulation,
    metrics_table_row,
    rps_for_app,
)
from policy.sim.kube_scheduler import HttpExtender, KubeSchedulerModel  # noqa: E402
from policy.sim.model import PerfModel  # noqa: E402
from policy.sim.traces import load_trace  # noqa: E402

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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--app", default="online-boutique")
    ap.add_argument("--trace", default="nasa")
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--minutes", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--peak-utilization", type=float, default=0.8)
    ap.add_argument("--descheduler-period-min", type=int, default=5)
    ap.add_argument("--json", default=str(ROOT / "out" / "demo.json"), help="where to write the results")
    args = ap.parse_args(argv)

    t_start = time.monotonic()
    app = load_app(args.app)
    model = PerfModel(app)
    rps = rps_for_app(load_trace(args.trace, args.minutes), model, app, args.peak_utilization)
    spec = ClusterSpec(nodes=args.nodes, cpu_m=2000, memory_bytes=8 * 1024**3)
    cfg = SimConfig(minutes=args.minutes, seed=args.seed)
    log(f"{app.name}: {len(app.workloads)} workloads, {len(app.graph.edges)} call edges; trace {args.trace}: "
        f"{args.minutes} min, {rps.min():.1f}-{rps.max():.1f} user req/s; {args.nodes} nodes x 2 vCPU / 8 GiB")

    # (a) default kube-scheduler scoring
    log("running default-kube-scheduler ...")
    base = Simulation(app, rps, spec, KubeSchedulerModel(), cfg).run()

    # (b) hrl-scheduler: the extender over real HTTP + the descheduler every few minutes
    ext_config = load_extender_config({"apiVersion": "hrl-scheduler.io/v1alpha1", "kind": "ExtenderConfiguration",
                                       "listen": {"host": "127.0.0.1", "port": 0}})
    placement = TopologyHeuristic()
    with ExtenderServer(ext_config, policy=placement) as server:
        log(f"extender listening on {server.url}")
        client = HttpExtender(server.url, weight=EXTENDER_WEIGHT, node_cache_capable=True, ignorable=True)
        scheduler = KubeSchedulerModel(extenders=[client])
        des_config = load_descheduler_config(None)
        planner = planner_from_config(des_config)
        history = EvictionHistory()
        cycles = []

        def descheduler(sim: Simulation) -> None:
            report = run_once(sim.observe, sim.evictor, planner, placement, des_config, history, sim.now_s)
            cycles.append(report)
            server.store.set_intent(report.intent, version=len(cycles))
            log(f"  t={sim.now_s / 60:.0f} min descheduler: {len(report.planned_moves)} planned, "
                f"{report.counts['evicted']} evicted, {report.counts['blocked']} blocked")

        log("running hrl-scheduler (extender + descheduler) ...")
        hook = PeriodicHook("descheduler", args.descheduler_period_min, descheduler)
        sim = Simulation(app, rps, spec, scheduler, cfg, hooks=[hook],
                         on_change=lambda snap: server.store.update(snap), scheduler_name="hrl-scheduler")
        hrl = sim.run()
        calls = prioritize_calls(server.base_url + "/metrics")
        client.close()

    rows = [metrics_table_row("default-kube-scheduler", base.metrics), metrics_table_row("hrl-scheduler", hrl.metrics)]
    headers = ["policy", "mean ms", "p95 ms", "p99 ms", "failed %", "cross-node calls %", "CPU core-h", "evictions"]
    print(f"\n{app.name} on {args.nodes} simulated nodes, {args.trace} trace, {args.minutes} min, seed {args.seed}\n")
    print(tabulate(rows, headers=headers, floatfmt=".2f"))
    print(f"\nhrl-scheduler: {hrl.pods_placed} pods placed, {calls} prioritize calls counted by the extender, "
          f"{len(cycles)} descheduler cycles")

    out = {
        "app": app.name, "trace": args.trace, "nodes": args.nodes, "minutes": args.minutes, "seed": args.seed,
        "policies": {
            "default-kube-scheduler": {k: base.metrics[k] for k in METRIC_KEYS},
            "hrl-scheduler": {**{k: hrl.metrics[k] for k in METRIC_KEYS}, "pods_placed": hrl.pods_placed,
                              "extender_prioritize_calls": calls},
        },
    }
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    log(f"wrote {path} in {time.monotonic() - t_start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
