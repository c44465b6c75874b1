"""The bodies of ``hrl-policy explain``, ``hrl-policy record`` and ``hrl-policy whatif`` (docs/shadow-mode.md)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from tabulate import tabulate
from tqdm import tqdm

from .core import PROG

__all__ = ["cmd_explain", "cmd_record", "cmd_whatif", "load_explain_snapshot"]


def _intent(text: str | None) -> tuple[float, ...] | None:
    if text is None:
        return None
    try:
        values = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise ValueError(f"--intent: expected LOCALITY,BALANCE (numbers), got {text!r}") from None
    if len(values) != 2 or not all(math.isfinite(v) and v >= 0 for v in values):
        raise ValueError(f"--intent: expected two finite numbers >= 0, got {text!r}")
    return values


def load_explain_snapshot(path: str, graph_sources: list[str]):
    """The snapshot ``hrl-policy explain`` reads: a recording (``DIR`` or ``DIR@STEP``: that step's objects and call
    graph) or a ``kubectl get -o json`` file/folder; ``graph_sources`` replace the graph when given. Returns
    ``(snapshot, warnings)``. Raises ``ValueError`` (one line)."""
    from policy.observe import load_snapshot_objects, snapshot_from_objects
    from policy.recording import Recording
    from policy.topology.sources import load_graph

    base, _, step = path.partition("@")
    warnings: list[str] = []
    graph = None
    if (Path(base) / "recording.json").is_file():
        rec = Recording(base)
        try:
            k = int(step) if step else 0
        except ValueError:
            raise ValueError(f"--snapshot: {path}: STEP must be an integer") from None
        if not 0 <= k < rec.steps:
            raise ValueError(f"--snapshot: {path}: the recording has steps 0..{rec.steps - 1}")
        objs = rec.objects(k)
        graph = rec.graph(k)
    else:
        objs = load_snapshot_objects(path)
    if graph_sources:
        graph, w = load_graph(graph_sources)
        warnings += [str(x) for x in w]
    snap = snapshot_from_objects(objs, graph=graph if graph is not None and graph.edges else None, source=path)
    return snap, warnings


def cmd_explain(args: argparse.Namespace) -> int:
    """Explain one pod's scores on every candidate (a table, or ``--json``)."""
    from policy.bundle import SERVED_PLACEMENT_BUNDLE
    from policy.index import ClusterIndex
    from policy.lowlevel import TopologyHeuristic, load_placement
    from policy.lowlevel.explain import FACTORS, explain_scores

    if args.top < 1:
        raise ValueError(f"--top: must be >= 1, got {args.top}")
    intent = _intent(args.intent)
    snap, warnings = load_explain_snapshot(args.snapshot, list(args.graph))
    for w in warnings:
        print(f"{PROG} explain: warning: {w}", file=sys.stderr)
    pod = next((p for p in snap.pods if p.key == args.pod), None)
    if pod is None:
        raise ValueError(f"--pod: {args.pod!r} is not in {args.snapshot} ({len(snap.pods)} pods)")
    # the pod as kube-scheduler sees it: not bound, and not counted on any node
    others = tuple(p for p in snap.pods if p.key != pod.key)
    index = ClusterIndex.build(replace(snap, pods=others))
    pod = replace(pod, node_name=None)
    if args.policy == "learned":
        policy: Any = load_placement(args.bundle or SERVED_PLACEMENT_BUNDLE)
    else:
        if args.bundle:
            raise ValueError("--bundle: only with --policy learned")
        policy = TopologyHeuristic(target_utilization=args.target_utilization)
    if args.nodes:
        cands = [n.strip() for n in args.nodes.split(",") if n.strip()]
        unknown = [n for n in cands if n not in index.node_pos]
        if unknown:
            raise ValueError(f"--nodes: not in the snapshot: {', '.join(unknown)}")
        failed: dict[str, str] = {}
    else:
        names = list(index.node_names)
        failed = policy.filter(pod, names, index)
        cands = [n for n in names if n not in failed]
    if pod.service not in index.snapshot.graph.services:
        print(
            f"{PROG} explain: warning: service {pod.service!r} is not in the call graph: the extender answers it "
            f"neutral (the scores below are what the policy computes)",
            file=sys.stderr,
        )
    ex = explain_scores(policy, pod, cands, index, intent)
    if args.json:
        doc = ex.to_json()
        doc["filtered"] = failed
        doc["factors"] = FACTORS
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    rows = []
    for n in sorted(ex.nodes, key=lambda n: -n.score):
        top = "; ".join(f"{name} {v:+.2f}" for name, v in n.top(args.top))
        ref = next((c.value for c in n.contributions if c.factor == "reference"), None)
        rows.append([n.node, f"{n.score:.2f}", n.served, "" if ref is None else f"{ref:.2f}", top])
    print(f"{ex.pod} (service {ex.service}), policy {ex.policy}, method {ex.method}")
    print(tabulate(rows, headers=["node", "score", "served", "reference", "top contributions"], disable_numparse=True))
    if failed:
        print(f"\nfiltered out ({len(failed)}): " + "; ".join(f"{k}: {v}" for k, v in sorted(failed.items())[:10]))
    if ex.method == "integrated-gradients":
        print(f"\nintegration error at most {ex.max_integration_error:.2e} points (the parts sum to each score)")
    for note in ex.notes:
        print(f"note: {note}")
    return 0


def _seconds(text: str, what: str) -> float:
    from policy.topology.prometheus import parse_duration_s

    return parse_duration_s(text, what)


def cmd_record(args: argparse.Namespace) -> int:
    """Record (a progress bar on stderr); the manifest's summary on stdout (``--json``: the manifest)."""
    from policy.recording import RecordOptions, record, recording_summary

    step = _seconds(args.step, "--step")
    window = _seconds(args.window, "--window")
    lag = 0.0 if args.lag in ("0", "0s") else _seconds(args.lag, "--lag")
    logs = {k: v for k, v in (("extender", args.extender_log), ("descheduler", args.descheduler_log)) if v}
    from policy.recording.kube import KubeObjects, load_api_client

    try:
        api = load_api_client(args.kubeconfig)
    except Exception as exc:  # noqa: BLE001 - ConfigException, OSError: one line
        raise ValueError(f"--kubeconfig: cannot load a client configuration: {exc}") from None
    objects = KubeObjects(api, args.namespace)
    signals = None
    prom = None
    if args.prometheus:
        from policy.recording.signals import Signals

        signals = Signals(args.prometheus, step, args.namespace)
        prom = {"uri": args.prometheus, "flavor": signals.source.flavor, "url": signals.source.url}
    else:
        print(f"{PROG} record: warning: no --prometheus: only the cluster's objects are recorded", file=sys.stderr)
    opts = RecordOptions(
        Path(args.out), window, step, tuple(args.namespace), lag, args.resume, logs, prom, objects.server
    )
    bar = tqdm(total=max(1, round(window / step)), unit="step", desc="record", file=sys.stderr, disable=args.json)
    try:

        def progress(done: int, total: int) -> None:
            bar.n = done
            bar.refresh()

        m = record(opts, objects, signals, progress=progress)
    finally:
        bar.close()
        if signals is not None:
            signals.close()
    summary = recording_summary(opts.out)
    if args.json:
        json.dump(summary, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    for w in m.warnings:
        print(f"{PROG} record: warning: {w}", file=sys.stderr)
    rows = summary["rows"]
    print(
        f"recorded {m.steps} of {m.total_steps} steps ({m.status}) into {opts.out}: {rows['pods']} pod rows, "
        f"{rows['services']} service rows, {rows['edges']} edge rows"
        + (f"; shadow: {', '.join(m.shadow.values())}" if m.shadow else "")
        + f"\nnext: {PROG} whatif {opts.out} --policy hrl-scheduler -o {opts.out}-report"
    )
    return 0


def cmd_whatif(args: argparse.Namespace) -> int:
    """Write the report; a summary on stdout (``--json``: report.json)."""
    from policy.whatif import WhatIfOptions, whatif

    stacks = tuple(args.policy) or ("hrl-scheduler",)
    opts = WhatIfOptions(
        stacks=stacks,
        seeds=args.seeds,
        start=args.start,
        front=not args.no_front,
        iterations=args.iterations,
        samples=args.samples,
    )

    def say(msg: str) -> None:
        if not args.json:
            tqdm.write(f"{PROG} whatif: {msg}", file=sys.stderr)

    w = whatif(args.recording, args.out, opts, progress=say)
    doc = w.to_json()
    if args.json:
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    err = doc["replay_error"]["median_abs_error_pct"]
    print(
        f"replay error of {w.baseline} against the recording (per-service median): p50 {err['p50']} %, "
        f"p95 {err['p95']} %"
    )
    for s, m in doc["results"].items():
        if s.startswith("default-kube-scheduler+hpa@"):
            continue
        print(
            f"  {s}: p95 {m['latency_p95_ms']} ms, failed {m['failed_pct']} %, CPU {m['cpu_core_hours']} core-h, "
            f"cross-node calls {m['cross_node_call_pct']} %"
        )
    print(f"wrote {Path(args.out) / 'report.md'}, report.json" + (f", {', '.join(w.plots)}" if w.plots else ""))
    return 0
