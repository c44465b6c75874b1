"""Placement alone, compared in the simulator, and the learned policy's inference latency (numpy only).

``python -m policy.bench.placement [--seeds N] [--minutes M] [--apps A,B] [--no-write]`` runs, on every
built-in app (the train apps of :mod:`policy.train.placement` and the held-out ones), with fixed replicas and
the same seeds for every policy:

- ``default``: kube-scheduler's default profile alone;
- ``+heuristic``: the same + the extender serving :class:`policy.lowlevel.TopologyHeuristic` (weight 2);
- ``+learned``: the same + the extender serving the committed :class:`policy.lowlevel.LearnedPlacement`
  bundles (``hrl-scheduler/low``; ``+learned-no-encoder`` = ``hrl-no-encoder/low`` and ``+learned-no-intent`` =
  ``hrl-flat/low`` too when present), weight 2;
- ``+learned-ensemble``: the placement served by default (:data:`policy.bundle.SERVED_PLACEMENT_BUNDLE`, the
  :class:`policy.lowlevel.PlacementEnsemble` of ``hrl-ensemble/low``: the mean logit of training seeds 0, 1, 2),
  weight 2,

each in two cluster settings: the benchmark cluster of `make bench` (:func:`policy.sim.sizing.cluster_for`, no other
tenants) and the same with background tenants (2 per node, ~30 % of the CPU requested, 20-50 % used, measured
from the start: :func:`policy.sim.placement.start_with_metrics`). The trace
is ``nasa``'s window centred on its peak, scaled as `make bench` scales it. It also times
``score`` of each learned placement for 100 and 500 candidate nodes (features + forward pass, one thread) and writes
both to section ``placement`` of BENCHMARKS.md.

The extender stacks are built by :func:`policy.sim.placement.placement_stack`, a
:data:`policy.sim.stacks.StackFactory` maker that the learned stacks of ``make bench`` can reuse.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from policy.bundle import SERVED_PLACEMENT_BUNDLE
from policy.index import ClusterIndex
from policy.lowlevel import (
    DEFAULT_FLAT_PLACEMENT_BUNDLE,
    DEFAULT_PLACEMENT_BUNDLE,
    LearnedPlacement,
    PlacementEnsemble,
    PlacementPolicy,
    load_placement,
)
from policy.sim.app import load_app
from policy.sim.engine import SimConfig, Simulation, background_tenants
from policy.sim.kube_scheduler import KubeSchedulerModel as _K
from policy.sim.placement import APPS, compare, markdown_table
from policy.sim.sizing import cluster_for

from .markdown import write_section

__all__ = ["inference_latency", "main"]

SHOWN = ("latency_mean_ms", "latency_p95_ms", "failed_pct", "cross_node_call_pct")


def inference_latency(policy: PlacementPolicy, candidates: int = 100, calls: int = 2000) -> dict[str, float]:
    """Wall time of ``policy.score`` (features + forward, service rows cached) for one pod over ``candidates``
    nodes of a synthetic cluster running Online Boutique ``candidates // 4`` times over; ``{"p50_ms", "p99_ms",
    "mean_ms", "candidates", "calls"}``. Run with ``OMP_NUM_THREADS=1`` for the one-core figure."""
    app = load_app("online-boutique")
    spec = replace(cluster_for(app, candidates), background=background_tenants(candidates, 2000, 8 * 1024**3, seed=0))
    sim = Simulation(app, np.full(2, 5.0), spec, _K(), SimConfig(minutes=2, seed=0, n_samples=100))
    for _ in range(max(1, candidates // 4) - 1):
        for w in list(sim.cluster.replicas):
            if not w.startswith("tenants/"):
                sim.cluster.set_replicas(w, sim.cluster.replicas[w] + 1, 0.0)
    sim.run()
    snap = sim.observe()
    index = ClusterIndex.build(snap)
    pod = next(p for p in snap.pods if p.service == "checkoutservice")
    pod = replace(pod, node_name=None)
    names = list(index.node_names)[:candidates]
    policy.refresh(snap)
    for _ in range(20):
        policy.score(pod, names, index, None)
    ts = np.empty(calls)
    for i in range(calls):
        t0 = time.perf_counter()
        policy.score(pod, names, index, None)
        ts[i] = time.perf_counter() - t0
    return {
        "p50_ms": float(np.percentile(ts, 50) * 1e3),
        "p99_ms": float(np.percentile(ts, 99) * 1e3),
        "mean_ms": float(ts.mean() * 1e3),
        "candidates": len(names),
        "calls": calls,
    }


def _section(
    table: Mapping[str, Any], lat: Mapping[str, Mapping[int, Mapping[str, float]]], bundles: Mapping[str, Any]
) -> str:
    lines = ["## Learned placement (`python -m policy.bench.placement`)", ""]
    for name, b in bundles.items():
        if isinstance(b, PlacementEnsemble):
            lines.append(
                f"- `{name}`: the placement served by default, `{SERVED_PLACEMENT_BUNDLE.parent.name}/low`: the mean "
                f"logit of {len(b.members)} members, bundles {', '.join(f'`{m.version}`' for m in b.members)}."
            )
            continue
        m = b.bundle.metadata
        lines.append(
            f"- `{name}`: bundle `{b.version}` ({m.get('algorithm', '')}); trained in "
            f"{m.get('train_s', '?')} s, {m.get('episodes', '?')} episodes, on "
            f"{', '.join(m.get('train_apps', []))}."
        )
    lines += [
        "",
        "Inference in the extender (`score`: features + forward pass, numpy, one thread, service rows cached), one "
        "pod against 100 and 500 candidate nodes (the extender's node-score table computes these off the request "
        "path; a request it has no vector for pays them):",
        "",
        "| bundle | candidates | p50 ms | p99 ms | mean ms |",
        "|---|---|---|---|---|",
    ]
    for name, by_n in lat.items():
        for n, v in by_n.items():
            lines.append(f"| {name} | {n} | {v['p50_ms']:.3f} | {v['p99_ms']:.3f} | {v['mean_ms']:.3f} |")
    lines += [
        "",
        f"Placement alone in the simulator: fixed replicas (manifest), `nasa` trace, {table['minutes']} minutes "
        f"centred on its peak, seeds {', '.join(map(str, table['seeds']))} (mean ± sd), the same seeds for every "
        "policy; `bench` = the cluster of `make bench` (3 zones, no other tenants), `background` = the same "
        "with 2 background pods per node (~30 % of the CPU requested, 20-50 % used). Extenders at weight 2 "
        "(as shipped). Held-out apps were never seen in training.",
        "",
        markdown_table(table),
        "",
        f"Run on {time.strftime('%Y-%m-%d')} in {table['wall_s']:.0f} s.",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m policy.bench.placement``: see the module docstring."""
    p = argparse.ArgumentParser(prog="python -m policy.bench.placement", description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--minutes", type=int, default=30)
    p.add_argument("--apps", default=",".join(APPS))
    p.add_argument("--no-write", action="store_true", help="print instead of writing BENCHMARKS.md")
    a = p.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    bundles: dict[str, PlacementPolicy] = {"learned": LearnedPlacement.load(DEFAULT_PLACEMENT_BUNDLE)}
    for name, path in (
        ("learned-no-encoder", DEFAULT_FLAT_PLACEMENT_BUNDLE),
        ("learned-no-intent", DEFAULT_PLACEMENT_BUNDLE.parent.parent / "hrl-flat" / "low"),
    ):
        if (path / "manifest.json").exists():
            bundles[name] = LearnedPlacement.load(path)
    bundles["learned-ensemble"] = load_placement(SERVED_PLACEMENT_BUNDLE)
    lat = {k: {n: inference_latency(v, candidates=n) for n in (100, 500)} for k, v in bundles.items()}
    table = compare(
        a.apps.split(","), list(range(a.seeds)), a.minutes, learned=bundles, log=lambda m: print(m, flush=True)
    )
    text = _section(table, lat, bundles)
    if a.no_write:
        print(text)
    else:
        write_section("placement", text)
        print(text)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
