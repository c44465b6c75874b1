#!/usr/bin/env python3
"""``make bench-scheduler``: kube-scheduler throughput and scheduling latency with and without our extender, on
the real control plane (hack/controlplane.py), in the style of kube-scheduler's scheduler_perf
(test/integration/scheduler_perf: ``SchedulingBasic`` with its ``SchedulingThroughput`` measurement).

One run, one control plane, two phases that differ only in the scheduler:

1. ``--nodes`` kwok nodes (32 CPU, 128 GiB, 110 pods each) and the extender (``hrl-extender``, a separate
   process fed by a watch) are up;
2. per phase, ``--pods`` pods (100m / 128Mi each, ``--services`` services in a chain of
   ``hrl-scheduler.io/depends-on`` annotations, so the extender scores every pod for real) are created while
   no scheduler serves their ``schedulerName``; then ONE kube-scheduler with that profile starts and
   schedules the whole queue: ``baseline`` without extenders, ``extender`` with our extender registered
   exactly as shipped (filter + prioritize, nodeCacheCapable, ignorable, weight 2, httpTimeout 300ms), and
   ``prioritize-only`` (the same without ``filterVerb``: one HTTP call per pod instead of two);
3. figures: throughput = pods / (last binding − first binding), from the scheduler's own log (microsecond
   timestamps of "Successfully bound pod to node"), plus the per-second throughput's p50; per-pod
   scheduling latency p50/p99 from the scheduler's histograms, interpolated within buckets as Prometheus'
   ``histogram_quantile`` does: ``scheduler_scheduling_algorithm_duration_seconds`` (filter + score of one
   pod, extender calls included: the decision) and ``scheduler_scheduling_attempt_duration_seconds``
   (the same plus binding: in a burst it is dominated by the API server's queue); the extender's own
   prioritize/filter latency p50/p99 from its histograms. Every pod must be bound, or the run fails.

Writes the section ``scheduler`` of BENCHMARKS.md (``policy.bench.markdown.write_section``) and, with
``--json PATH``, the figures as JSON. A benchmark, not a test: nothing here asserts speed.

    hack/bench-scheduler.py [--nodes 500] [--pods 2000] [--services 20] [--json PATH] [--no-write]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import platform
import re
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from prometheus_client.parser import text_string_to_metric_families

from policy.bench.markdown import write_section


def _controlplane():
    spec = importlib.util.spec_from_file_location("hrl_controlplane", ROOT / "hack" / "controlplane.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["hrl_controlplane"] = mod
    spec.loader.exec_module(mod)
    return mod


cpm = _controlplane()

BOUND = re.compile(r'^I(\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})\.(\d{6}) .*"Successfully bound pod to node"')


def log(msg: str) -> None:
    print(f"[bench-scheduler] {msg}", file=sys.stderr, flush=True)


# ---- metrics --------------------------------------------------------------------------------------------


def histogram(text: str, name: str, **labels: str) -> list[tuple[float, float]]:
    """Cumulative buckets ``[(le, count)]`` of histogram ``name`` (summed over series matching ``labels``)."""
    acc: dict[float, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name != f"{name}_bucket" or any(s.labels.get(k) != v for k, v in labels.items()):
                continue
            le = float(s.labels["le"])
            acc[le] = acc.get(le, 0.0) + s.value
    return sorted(acc.items())


def quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """Prometheus ``histogram_quantile``: linear interpolation inside the bucket holding rank q·total.
    NaN when the histogram is empty; the highest finite bound when the rank falls in +Inf."""
    if not buckets or buckets[-1][1] <= 0:
        return math.nan
    total = buckets[-1][1]
    rank = q * total
    prev_le, prev_c = 0.0, 0.0
    for le, c in buckets:
        if c >= rank:
            if math.isinf(le):
                return prev_le
            if c == prev_c:
                return le
            return prev_le + (le - prev_le) * (rank - prev_c) / (c - prev_c)
        prev_le, prev_c = le, c
    return prev_le


def diff(after: list[tuple[float, float]], before: list[tuple[float, float]]) -> list[tuple[float, float]]:
    b = dict(before)
    return [(le, c - b.get(le, 0.0)) for le, c in after]


# ---- workload -------------------------------------------------------------------------------------------


def pod_manifest(i: int, services: int, scheduler: str) -> dict:
    svc = i % services
    ann = {"hrl-scheduler.io/depends-on": f"bench-svc-{svc + 1:02d}"} if svc + 1 < services else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"bench-{i:05d}", "labels": {"app": f"bench-svc-{svc:02d}"}, "annotations": ann},
        "spec": {
            "schedulerName": scheduler,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "app",
                    "image": "registry.invalid/bench:1",
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                }
            ],
        },
    }


def bench_cluster_objects(nodes: int, pods: int, services: int, bound_fraction: float = 0.5, seed: int = 0) -> dict:
    """The bench's cluster as a ``kubectl get nodes,pods -A -o json`` List, mid-run: ``nodes`` kwok nodes as
    :func:`hack.controlplane.fake_node` makes them (32 CPU, 128 GiB, 110 pods, 3 zones), ``pods`` pods of
    :func:`pod_manifest` in namespace ``bench``, the first ``bound_fraction`` of them bound to nodes drawn
    with ``seed`` (the rest pending). Used by the server comparison (a static snapshot) and by the test that
    compares the precomputed scores with the direct computation."""
    import random

    rng = random.Random(seed)
    items = []
    for i in range(nodes):
        n = cpm.fake_node(
            f"bench-node-{i:04d}", cpu="32", memory="128Gi", labels={"topology.kubernetes.io/zone": f"zone-{i % 3}"}
        )
        n["status"]["conditions"] = [{"type": "Ready", "status": "True"}]  # as kwok reports it
        items.append(n)
    n_bound = int(pods * bound_fraction)
    for i in range(pods):
        p = pod_manifest(i, services, "hrl-scheduler")
        p["metadata"]["namespace"] = "bench"
        if i < n_bound:
            p["spec"]["nodeName"] = f"bench-node-{rng.randrange(nodes):04d}"
            p["status"] = {"phase": "Running"}
        else:
            p["status"] = {"phase": "Pending"}
        items.append(p)
    return {"apiVersion": "v1", "kind": "List", "items": items}


def bench_request(i: int, services: int, node_names: list[str], scheduler: str = "hrl-scheduler") -> dict:
    """The ``ExtenderArgs`` (nodeCacheCapable) kube-scheduler sends for the bench's pod ``i`` with candidates
    ``node_names`` (its Pod as the API server returns it: metadata, spec with defaults, status)."""
    pod = pod_manifest(i, services, scheduler)
    pod["metadata"].update(
        {"namespace": "bench", "uid": f"00000000-0000-4000-8000-{i:012d}", "resourceVersion": str(1000 + i)}
    )
    pod["metadata"]["creationTimestamp"] = "2026-11-30T10:00:00Z"
    pod["spec"].update(
        {
            "restartPolicy": "Always",
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "securityContext": {},
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
                {
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
        }
    )
    c = pod["spec"]["containers"][0]
    c.update(
        {
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File",
            "imagePullPolicy": "IfNotPresent",
        }
    )
    pod["status"] = {"phase": "Pending", "qosClass": "Burstable"}
    pod.pop("kind", None)
    pod.pop("apiVersion", None)
    return {"Pod": pod, "Nodes": None, "NodeNames": list(node_names)}


def create_pods(cp, ns: str, count: int, services: int, scheduler: str, workers: int = 8) -> float:
    """Create ``count`` pods in ``ns`` with ``workers`` threads (one ApiClient each); returns seconds taken."""
    from kubernetes import client as kclient

    local = threading.local()

    def core():
        if not hasattr(local, "core"):
            local.core = kclient.CoreV1Api(_fresh_admin(cp))
        return local.core

    def make(i: int) -> None:
        core().create_namespaced_pod(ns, pod_manifest(i, services, scheduler), _preload_content=False)

    t0 = time.monotonic()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(make, range(count)))
    return time.monotonic() - t0


def _fresh_admin(cp):
    from kubernetes import config as kconfig

    return kconfig.new_client_from_config(config_file=str(cp.kubeconfig))


def count_bound(cp, ns: str) -> tuple[int, int]:
    pods = json.loads(cp.kubectl("get", "pods", "-n", ns, "-o", "json", timeout_s=300).stdout)["items"]
    return sum(1 for p in pods if p["spec"].get("nodeName")), len(pods)


def bind_times(log_path: Path) -> list[float]:
    """Seconds (since the start of the month, microsecond precision) of each binding in a scheduler log."""
    out = []
    with open(log_path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = BOUND.match(line)
            if m:
                _mo, d, hh, mm, ss, us = (int(x) for x in m.groups())
                out.append(((d * 24 + hh) * 60 + mm) * 60 + ss + us / 1e6)
    return out


def run_phase(cp, label: str, scheduler: str, extenders: list, pods: int, services: int, timeout_s: float) -> dict:
    ns = f"bench-{label}"
    cp.kubectl("create", "namespace", ns)
    log(f"{label}: creating {pods} pods for scheduler {scheduler!r} (not running yet)")
    create_s = create_pods(cp, ns, pods, services, scheduler)
    log(f"{label}: created in {create_s:.1f} s; starting the scheduler")
    ext_before = cp.fetch(f"{cp.extender_base_url}/metrics") if extenders else ""
    comp = cp.start_scheduler(scheduler, extenders, timeout_s=120)
    port = int(comp.ready_url.rsplit(":", 1)[1].split("/")[0])
    t0 = time.monotonic()
    try:
        cpm.wait_for(lambda: count_bound(cp, ns)[0] >= pods, timeout_s, f"{pods} pods bound by {scheduler}", 1.0)
        wall_s = time.monotonic() - t0
        sched_metrics = cp.fetch(f"https://127.0.0.1:{port}/metrics")
    finally:
        cp.stop_component(comp)
    ext_after = cp.fetch(f"{cp.extender_base_url}/metrics") if extenders else ""
    times = bind_times(comp.log_path)
    if len(times) < pods:
        raise RuntimeError(f"{label}: {len(times)} bindings in {comp.log_path}, expected {pods}")
    span = max(times) - min(times)
    per_second: dict[int, int] = {}
    for t in times:
        per_second[int(t - min(times))] = per_second.get(int(t - min(times)), 0) + 1
    secs = sorted(per_second.values())
    attempts = histogram(sched_metrics, "scheduler_scheduling_attempt_duration_seconds", result="scheduled")
    algorithm = histogram(sched_metrics, "scheduler_scheduling_algorithm_duration_seconds")
    res = {
        "label": label,
        "scheduler": scheduler,
        "extenders": len(extenders),
        "pods": pods,
        "bound": len(times),
        "create_s": round(create_s, 2),
        "schedule_span_s": round(span, 3),
        "throughput_pods_per_s": round(pods / span, 1) if span > 0 else math.inf,
        "throughput_p50_per_second": secs[len(secs) // 2] if secs else 0,
        "algorithm_latency_p50_ms": round(1000 * quantile(0.5, algorithm), 2),
        "algorithm_latency_p99_ms": round(1000 * quantile(0.99, algorithm), 2),
        "attempt_latency_p50_ms": round(1000 * quantile(0.5, attempts), 2),
        "attempt_latency_p99_ms": round(1000 * quantile(0.99, attempts), 2),
        "wall_s": round(wall_s, 1),
    }
    if extenders:
        for verb in ("prioritize", "filter"):
            h = diff(
                histogram(ext_after, f"hrl_extender_{verb}_duration_seconds"),
                histogram(ext_before, f"hrl_extender_{verb}_duration_seconds"),
            )
            res[f"extender_{verb}_calls"] = int(h[-1][1]) if h else 0
            res[f"extender_{verb}_p50_ms"] = round(1000 * quantile(0.5, h), 2)
            res[f"extender_{verb}_p99_ms"] = round(1000 * quantile(0.99, h), 2)
    log(f"{label}: {json.dumps(res)}")
    cp.kubectl("delete", "namespace", ns, "--wait=false")
    cp.kubectl(
        "delete", "pods", "--all", "-n", ns, "--grace-period=0", "--force", "--wait=false", check=False, timeout_s=300
    )
    cpm.wait_for(
        lambda: cp.kubectl("get", "pods", "-n", ns, "-o", "name", timeout_s=120).stdout.strip() == "",
        300,
        f"the pods of {ns} to go",
        1.0,
    )
    return res


NAMES = {
    "baseline": "without extender",
    "extender": "with hrl-extender as shipped (filter + prioritize)",
    "prioritize-only": "with hrl-extender, prioritize only (no filterVerb)",
}


def markdown(
    results: list[dict],
    nodes: int,
    pods: int,
    services: int,
    startup_s: float,
    load: tuple[float, float] = (math.nan, math.nan),
) -> str:
    by = {r["label"]: r for r in results}
    base, ext = by["baseline"], by["extender"]
    ratio = ext["throughput_pods_per_s"] / base["throughput_pods_per_s"]
    extra = ""
    if "prioritize-only" in by:
        po = by["prioritize-only"]
        extra = (
            f" Without `filterVerb` (prioritize only): {po['throughput_pods_per_s']:.1f} pods/s, ratio "
            f"{po['throughput_pods_per_s'] / base['throughput_pods_per_s']:.2f}."
        )
    rows = []
    for r in results:
        name = NAMES[r["label"]]
        rows.append(
            f"| {name} | {r['bound']}/{r['pods']} | {r['throughput_pods_per_s']:.1f} | "
            f"{r['throughput_p50_per_second']} | {r['algorithm_latency_p50_ms']:.1f} / "
            f"{r['algorithm_latency_p99_ms']:.1f} | {r['attempt_latency_p50_ms']:.1f} / "
            f"{r['attempt_latency_p99_ms']:.1f} | {r['schedule_span_s']:.1f} |"
        )
    return "\n".join(
        [
            "## kube-scheduler with and without the extender (`make bench-scheduler`)",
            "",
            f"Real kube-scheduler v1.36.3 on the loopback control plane (`hack/controlplane.py`), in the style of "
            f"scheduler_perf's SchedulingBasic: {nodes} kwok nodes (32 CPU, 128 GiB), {pods} pods (100m CPU, "
            f"128 MiB) of {services} services chained by `hrl-scheduler.io/depends-on`, all queued before one "
            "kube-scheduler starts and schedules them. The extender is `hrl-extender` (a separate Python process, "
            "snapshot fed by its watch), registered as shipped: filter + prioritize, `nodeCacheCapable`, "
            "`ignorable`, weight 2, `httpTimeout: 300ms`.",
            "",
            "| scheduler | bound | throughput (pods/s) | per-second p50 (pods) | algorithm latency p50 / p99 (ms) | "
            "attempt latency p50 / p99 (ms) | span (s) |",
            "|---|---|---|---|---|---|---|",
            *rows,
            "",
            f"**Throughput ratio with / without the extender: {ratio:.2f}** "
            f"({ext['throughput_pods_per_s']:.1f} / {base['throughput_pods_per_s']:.1f} pods/s). "
            f"Extender time per call: prioritize p50 {ext['extender_prioritize_p50_ms']:.2f} ms / p99 "
            f"{ext['extender_prioritize_p99_ms']:.2f} ms ({ext['extender_prioritize_calls']} calls), filter p50 "
            f"{ext['extender_filter_p50_ms']:.2f} ms / p99 {ext['extender_filter_p99_ms']:.2f} ms "
            f"({ext['extender_filter_calls']} calls).{extra}",
            "",
            "Throughput: pods / (last − first binding) from the scheduler's log. Per-pod latency from the "
            "scheduler's histograms, interpolated within their exponential buckets (1 ms × 2^k): algorithm = "
            "`scheduler_scheduling_algorithm_duration_seconds` (filter + score of one pod, extender calls "
            "included: the cost of the decision); attempt = `scheduler_scheduling_attempt_duration_seconds"
            '{result="scheduled"}` (algorithm + binding; in a burst the binding waits in the API server\'s '
            "queue, which is why the fastest scheduler shows the longest attempts). "
            f"Control plane warm start-up: {startup_s:.1f} s. Run on {datetime.now().strftime('%Y-%m-%d')}, "
            f"{platform.node() or 'this machine'} ({os.cpu_count()} cores, shared by every component, the extender "
            f"and whatever else runs: 1-min load average {load[0]:.1f} at the start, {load[1]:.1f} at the end).",
        ]
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="hack/bench-scheduler.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--pods", type=int, default=2000)
    ap.add_argument("--services", type=int, default=20)
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds allowed per phase to bind every pod")
    ap.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    ap.add_argument("--no-write", action="store_true", help="do not touch BENCHMARKS.md")
    ap.add_argument(
        "--no-prioritize-only",
        action="store_true",
        help="skip the third phase (the extender registered without filterVerb)",
    )
    ap.add_argument("--workdir", help="control-plane working directory (default: a temporary one)")
    args = ap.parse_args(argv)
    if args.nodes < 2 or args.pods < 1 or args.services < 1:
        ap.error("--nodes >= 2, --pods >= 1, --services >= 1")

    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="hrl-bench-scheduler-"))
    load0 = os.getloadavg()[0]
    cp = cpm.ControlPlane(workdir, log=log)
    log(f"control plane in {workdir}")
    cp.up(extender_config={"logLevel": "WARNING"})
    try:
        log(f"up in {cp.startup_s['total']:.1f} s; creating {args.nodes} nodes")
        cp.create_nodes(
            (cpm.fake_node(f"bench-node-{i:04d}", cpu="32", memory="128Gi") for i in range(args.nodes)), wait_s=600
        )
        cpm.wait_for(
            lambda: (
                float(
                    re.search(
                        r"^hrl_extender_snapshot_nodes (\S+)$", cp.fetch(f"{cp.extender_base_url}/metrics"), re.M
                    ).group(1)
                )
                >= args.nodes
            ),
            120,
            "the extender to see every node",
            1.0,
        )
        results = [
            run_phase(cp, "baseline", "bench-baseline", [], args.pods, args.services, args.timeout),
            run_phase(
                cp,
                "extender",
                "bench-extender",
                [cpm.extender_registration(cp.extender_url)],
                args.pods,
                args.services,
                args.timeout,
            ),
        ]
        if not args.no_prioritize_only:
            results.append(
                run_phase(
                    cp,
                    "prioritize-only",
                    "bench-prioritize-only",
                    [cpm.extender_registration(cp.extender_url, filterVerb=None)],
                    args.pods,
                    args.services,
                    args.timeout,
                )
            )
    finally:
        cp.down()
    md = markdown(
        results, args.nodes, args.pods, args.services, cp.startup_s.get("total", math.nan), (load0, os.getloadavg()[0])
    )
    print(md)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"nodes": args.nodes, "pods": args.pods, "services": args.services, "results": results}, indent=1
            )
        )
    if not args.no_write:
        write_section("scheduler", md)
        log("wrote the 'scheduler' section of BENCHMARKS.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
