#!/usr/bin/env python3
"""``make bench-scheduler``: what the extender costs kube-scheduler, on the real control plane (hack/controlplane.py),
in the style of kube-scheduler's scheduler_perf (test/integration/scheduler_perf: ``SchedulingBasic`` with its
``SchedulingThroughput`` measurement), plus the extender alone driven from the caller's side.

Sections, in one run:

1. **decoders** (in process): the request decoders on the bench's request (5 KB Pod, 230 and 500 names):
   the reference (``json`` + :func:`policy.observe.parse_pod`), orjson + the same parse, and the msgspec fast
   path the server uses (:func:`extender.wire.decode_extender_args`); median of repeats.
2. **caller side** (the extender alone, a static snapshot of the bench's cluster, ``hrl-extender``'s own app
   under its own server, :class:`extender.http.HttpServer`, set up as ``hrl-extender`` does it):
   ``extender-load`` (hack/extender-load, Go net/http with keep-alive as kube-scheduler's HTTPExtender) sends
   ``--caller-requests`` prioritize and filter requests one after another and measures each round trip:
   500-node cluster with 230 candidates (kube-scheduler's sample of 500 nodes) and all 500; 5,000-node cluster
   with 500 candidates (its sample) and all 5,000 (the 500-node NodeNames rows twice: as is, then with the
   generator's own garbage collector off, :data:`QUIET_GC`; each with the collections it made); then the **stall**
   case: the same ordinary requests while two clients post 5,000-node ``Nodes`` bodies (nodeCacheCapable: false)
   without pause.
3. **server comparison**: the same app and requests (500 nodes, 230 candidates) under uvicorn with h11 +
   asyncio, uvicorn with httptools + uvloop (:func:`extender.server.uvicorn_config`, the stack before
   :mod:`extender.http`), granian (ASGI, Rust HTTP) and the shipped server (``hrl-http``);
   ``--server-repeats`` alternating runs, medians.
4. **kube-scheduler** (``--nodes`` kwok nodes, then ``--large-nodes``): per phase, ``--pods`` pods (100m / 128Mi,
   ``--services`` services chained by ``hrl-scheduler.io/depends-on``) are created while no scheduler serves their
   ``schedulerName``; then ONE kube-scheduler starts and schedules the whole queue: ``baseline`` (no extender),
   ``shipped`` (the registration the manifests ship: prioritize only, nodeCacheCapable, ignorable, weight 2,
   httpTimeout 300ms), ``filter`` (the same plus ``filterVerb``), and at ``--nodes`` the **overload** case: the
   shipped phase again while ``extender-load`` adds 10x the extender traffic kube-scheduler generated in the
   shipped phase (open loop, 64 keep-alive connections, 300 ms client timeout, one run for the whole phase), counting
   replies later than httpTimeout, 5xx and invalid replies, both as the client sees them and without the client's
   own reconnects (a timed-out request closes its connection; the next one dials anew); and ``plugin``: the same
   queue scheduled by kube-scheduler built with the HRLScore plugin (hack/build-scheduler-plugin.sh; profile weight
   2, as the extender's), reading the score table a second ``hrl-extender`` (``scoreTable.publish``, started for the
   phase) publishes to an ``hrl-policy cache serve``: plugin mode, side by side with extender mode. Figures:
   throughput = pods / (last binding − first binding) from the scheduler's
   log, the per-second throughput's p50; per-pod latency p50/p99 from the scheduler's histograms
   (``histogram_quantile`` interpolation): ``scheduler_scheduling_algorithm_duration_seconds`` (filter + score,
   extender calls included) and ``..._attempt_duration_seconds`` (+ binding); the extender's own time per call
   from its histograms (arrival to reply). Every pod must be bound, or the run fails. Ratios are against the
   baseline of the same node count in the same run.

Writes the section ``scheduler`` of BENCHMARKS.md (``policy.bench.markdown.write_section``) and, with
``--json PATH``, the figures as JSON. A benchmark, not a test: nothing here asserts speed.

    hack/bench-scheduler.py [--nodes 500] [--large-nodes 5000] [--pods 2000] [--services 20] [--json PATH]
                            [--no-write] [--skip SECTION ...]
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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from prometheus_client.parser import text_string_to_metric_families

from policy.bench.markdown import write_section
from policy.documents import dump_yaml


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


class LogBinds:
    """Counts the "Successfully bound pod to node" lines of a scheduler log as it grows (reads only what was
    appended since the last call)."""

    def __init__(self, path: Path, offset: int = 0):
        self.path = path
        self.offset = offset
        self.rest = b""
        self.n = 0

    def count(self) -> int:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return self.n
        self.offset += len(data)
        lines = (self.rest + data).split(b"\n")
        self.rest = lines.pop()
        self.n += sum(1 for line in lines if b'"Successfully bound pod to node"' in line)
        return self.n


def bind_times(log_path: Path, offset: int = 0) -> list[float]:
    """Seconds (since the start of the month, microsecond precision) of each binding in a scheduler log, from byte
    ``offset`` on (a scheduler of the same name appends to the log of an earlier one)."""
    out = []
    with open(log_path, encoding="utf-8", errors="replace") as f:
        f.seek(offset)
        for line in f:
            m = BOUND.match(line)
            if m:
                _mo, d, hh, mm, ss, us = (int(x) for x in m.groups())
                out.append(((d * 24 + hh) * 60 + mm) * 60 + ss + us / 1e6)
    return out


# ---- CPU accounting -------------------------------------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def proc_cpu_s(pid: int | str) -> float:
    """User + system CPU seconds of process ``pid`` so far (``/proc/PID/stat`` utime + stime, every thread);
    NaN when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / _TICK  # fields 14, 15 of proc(5), counted after "(comm)"


def _per_thread(pid: int, read: Callable[[str], float]) -> dict[int, float]:
    """``read(TID)`` for each thread of process ``pid`` (``/proc/PID/task``), leaving out the NaNs (a thread
    that ended meanwhile, an unreadable file); empty when the process is gone."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return {}
    values = ((int(tid), read(tid)) for tid in tids)
    return {tid: v for tid, v in values if not math.isnan(v)}


def thread_cpu_s(pid: int) -> dict[int, float]:
    """User + system CPU seconds of each thread of process ``pid`` (``/proc/PID/task/TID/stat``)."""
    return _per_thread(pid, lambda tid: proc_cpu_s(f"{pid}/task/{tid}"))


def _runqueue_wait_s(path: str) -> float:
    """Seconds a task has waited on a run queue (``schedstat``'s second field, nanoseconds); NaN when unreadable."""
    try:
        with open(path, encoding="ascii") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return math.nan


def thread_wait_s(pid: int) -> dict[int, float]:
    """Seconds each thread of process ``pid`` has waited on a run queue, runnable but not running
    (``/proc/PID/task/TID/schedstat``, second field, nanoseconds)."""
    return _per_thread(pid, lambda tid: _runqueue_wait_s(f"/proc/{pid}/task/{tid}/schedstat"))


def thread_names(pid: int) -> dict[int, str]:
    """Thread id → Python thread name of process ``pid``, from ``py-spy dump`` (empty when py-spy is missing)."""
    import shutil
    import subprocess

    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    try:
        r = subprocess.run([spy, "dump", "-p", str(pid), "--nonblocking"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return {
        int(m.group(1)): m.group(2)
        for m in re.finditer(r'^Thread (?:0x[0-9A-Fa-f]+ )?\(?(\d+)\)?.*?: "([^"]+)"', r.stdout, re.M)
    }


def children_cpu_s() -> float:
    """CPU seconds of the bench's reaped children (the ``kubectl`` polls, ``extender-load``), cutime + cstime."""
    with open("/proc/self/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / _TICK


def machine_cpu_s() -> tuple[float, float]:
    """``(busy, idle)`` CPU seconds of the whole machine since boot (``/proc/stat``, every core)."""
    with open("/proc/stat", encoding="ascii") as f:
        vals = [int(x) for x in f.readline().split()[1:]]
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)  # idle + iowait
    busy = sum(vals[:8]) - idle  # user nice system idle iowait irq softirq steal (guest is inside user)
    return busy / _TICK, idle / _TICK


#: Control-plane component names (hack/controlplane.py) → the rows of the CPU table.
CPU_ROWS = {
    "etcd": "etcd",
    "kube-apiserver": "kube-apiserver",
    "kube-controller-manager": "kube-controller-manager",
    "kwok": "kwok",
    "hrl-extender": "hrl-extender",
    "hrl-producer": "hrl-producer",
    "hrl-cache": "hrl-cache",
}


#: PIDs of this process's children that run through a phase (the overload's load generator): counted in the
#: ``bench`` row while they live, since a child's CPU reaches :func:`children_cpu_s` only once it is reaped.
LIVE_CHILDREN: set[int] = set()


class CpuMeter:
    """CPU seconds per process of one phase: :meth:`start` before the phase's scheduler starts, :meth:`stop`
    once every pod is bound (before the scheduler is stopped). Rows: ``scheduler`` (the phase's kube-scheduler),
    each control-plane component of :data:`CPU_ROWS`, ``idle schedulers`` (the two the control plane always
    runs), ``bench`` (this process, its reaped children — the ``kubectl`` polls — and its live children of
    :data:`LIVE_CHILDREN` — the load generator), ``other`` (everything else the machine ran meanwhile: other
    users' work) and ``idle``."""

    def __init__(self, cp):
        self.cp = cp
        self.t0 = 0.0
        self.before: dict[str, float] = {}

    def _sample(self, scheduler_pid: int | None) -> dict[str, float]:
        out: dict[str, float] = dict.fromkeys([*CPU_ROWS.values(), "idle schedulers"], 0.0)
        for comp in self.cp.components:
            if comp.pid == scheduler_pid:
                continue
            row = CPU_ROWS.get(comp.name)
            if row is None and comp.name.startswith("kube-scheduler-"):
                row = "idle schedulers"
            if row is not None:
                v = proc_cpu_s(comp.pid)
                if not math.isnan(v):
                    out[row] += v
        out["scheduler"] = proc_cpu_s(scheduler_pid) if scheduler_pid else 0.0
        live = (proc_cpu_s(pid) for pid in list(LIVE_CHILDREN))  # NaN once reaped: then in children_cpu_s()
        out["bench"] = proc_cpu_s(os.getpid()) + children_cpu_s() + sum(v for v in live if not math.isnan(v))
        out["machine busy"], out["idle"] = machine_cpu_s()
        return out

    def start(self) -> None:
        self.t0 = time.monotonic()
        self.before = self._sample(None)

    def stop(self, scheduler_pid: int, scheduler_cpu_at_start: float = 0.0) -> dict[str, float]:
        """CPU seconds per row over the phase (``wall`` included); the scheduler's from its start."""
        after = self._sample(scheduler_pid)
        res = {k: after[k] - self.before.get(k, 0.0) for k in after}
        res["scheduler"] = after["scheduler"] - scheduler_cpu_at_start
        ours = sum(v for k, v in res.items() if k not in ("machine busy", "idle"))
        res["other"] = max(0.0, res.pop("machine busy") - ours)
        res["wall"] = time.monotonic() - self.t0
        return {k: round(v, 2) for k, v in res.items()}


def extender_connections(cp) -> int | None:
    """HTTP connections the extender has accepted so far (``hrl_extender_http_connections_total``)."""
    m = re.search(r"^hrl_extender_http_connections_total (\S+)$", cp.fetch(f"{cp.extender_base_url}/metrics"), re.M)
    return int(float(m.group(1))) if m else None


# ---- profiling (py-spy, the [bench] extra) ----------------------------------------------------------------


def start_profile(cp, outdir: Path, label: str, component: str = "hrl-extender"):
    """``py-spy record`` of ``component`` (the extender; plugin mode: its producer) for the phase (100 samples/s,
    per thread, idle samples dropped: each sample is a thread running Python or native code), written as collapsed
    stacks to ``outdir/LABEL.txt``."""
    import shutil
    import subprocess

    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    outdir.mkdir(parents=True, exist_ok=True)
    out = outdir / f"{label}.txt"
    pid = cp.component(component).pid
    proc = subprocess.Popen(
        [spy, "record", "-p", str(pid), "-r", "100", "--threads", "--format", "raw", "-o", str(out), "--nonblocking"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    log(f"{label}: py-spy recording {component} (pid {pid}) into {out}")
    return proc, out


def start_pprof(cp, port: int, outdir: Path, label: str, seconds: int) -> tuple[threading.Thread, Path]:
    """The phase's kube-scheduler's CPU profile over its first ``seconds`` (``/debug/pprof/profile``, Go's 100
    samples/s), fetched in a thread into ``outdir/LABEL.pprof``; :func:`stop_pprof` waits for it."""
    import urllib.request

    outdir.mkdir(parents=True, exist_ok=True)
    out = outdir / f"{label}.pprof"
    url = f"https://127.0.0.1:{port}/debug/pprof/profile?seconds={seconds}"

    def fetch() -> None:
        try:
            with urllib.request.urlopen(url, timeout=seconds + 60, context=cp._ssl_context()) as r:
                out.write_bytes(r.read())
        except OSError as exc:
            log(f"{label}: pprof failed: {exc}")

    th = threading.Thread(target=fetch, name="pprof", daemon=True)
    th.start()
    log(f"{label}: recording the scheduler's CPU profile ({seconds} s) into {out}")
    return th, out


def stop_pprof(cp, port: int, prof: tuple[threading.Thread, Path], binary: Path, seconds: int) -> None:
    """Wait for :func:`start_pprof`'s profile, fetch the scheduler's allocations since its start
    (``/debug/pprof/allocs``, into ``LABEL.allocs.pprof``), then log the CPU profile's top functions
    (``go tool pprof -top``)."""
    import shutil
    import subprocess
    import urllib.request

    th, out = prof
    th.join(seconds + 90)
    try:
        url = f"https://127.0.0.1:{port}/debug/pprof/allocs"
        with urllib.request.urlopen(url, timeout=60, context=cp._ssl_context()) as r:
            out.with_suffix(".allocs.pprof").write_bytes(r.read())
    except OSError as exc:
        log(f"{out.stem}: pprof allocs failed: {exc}")
    go = shutil.which("go")
    if not out.exists() or go is None:
        return
    res = subprocess.run(
        [go, "tool", "pprof", "-top", "-nodecount=40", str(binary), str(out)], capture_output=True, text=True
    )
    for line in (res.stdout or res.stderr).splitlines()[:48]:
        log(f"pprof {out.stem}: {line}")


def stop_profile(profiler) -> None:
    import signal
    import subprocess

    proc, out = profiler
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    if proc.returncode not in (0, -signal.SIGINT):
        log(f"py-spy exited with {proc.returncode}: {err.decode(errors='replace')[-500:]}")
    if out.exists():
        for line in profile_summary(out):
            log(f"profile {out.stem}: {line}")


def profile_summary(path: Path, top: int = 12) -> list[str]:
    """The share of samples per thread and the functions most often on a stack (inclusive), from a
    ``py-spy --format raw`` file (lines ``frame;frame;... COUNT``)."""
    threads: dict[str, int] = {}
    incl: dict[str, int] = {}
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        k = int(n)
        total += k
        frames = stack.split(";")
        threads[frames[0]] = threads.get(frames[0], 0) + k
        for f in set(frames[1:]):
            name = f.split(" (")[0]
            incl[name] = incl.get(name, 0) + k
    if not total:
        return ["no samples"]
    out = [f"{total} samples"]
    out += [f"thread {t}: {100 * k / total:.1f} %" for t, k in sorted(threads.items(), key=lambda x: -x[1])]
    out += [f"{100 * k / total:5.1f} %  {f}" for f, k in sorted(incl.items(), key=lambda x: -x[1])[:top]]
    return out


def run_phase(
    cp,
    label: str,
    scheduler: str,
    extenders: list,
    pods: int,
    services: int,
    timeout_s: float,
    during=None,
    profile: Path | None = None,
    binary: Path | None = None,
    sched_profile: dict | None = None,
    before_start=None,
    profile_component: str = "hrl-extender",
    pprof: Path | None = None,
    pprof_s: int = 6,
    producer: bool = False,
) -> dict:
    """One phase (see the module docstring). ``during``: a callable started (in a thread) when the scheduler
    starts and given a ``threading.Event`` set when every pod is bound; its return value is ``res["during"]``.
    ``binary`` / ``sched_profile``: the scheduler's binary and profile fields (plugin mode); ``before_start()``: called
    once the pods exist, before the scheduler starts (e.g. waits for the plugin's table). ``profile``: a directory
    for ``py-spy`` of ``profile_component``; ``pprof``: a directory for the scheduler's CPU profile over its first
    ``pprof_s`` seconds (the scheduler is stopped only once it is written); ``producer``: plugin mode, record the
    CPU seconds of each thread of its producer (``hrl-producer``)."""
    ns = f"bench-{label}"
    cp.kubectl("create", "namespace", ns)
    log(f"{label}: creating {pods} pods for scheduler {scheduler!r} (not running yet)")
    create_s = create_pods(cp, ns, pods, services, scheduler)
    log(f"{label}: created in {create_s:.1f} s; starting the scheduler")
    if before_start is not None:
        before_start()
    ext_before = cp.fetch(f"{cp.extender_base_url}/metrics") if extenders else ""
    done = threading.Event()
    side: dict = {}
    helper = None
    if during is not None:

        def run_during() -> None:
            try:
                side["result"] = during(done)
            except Exception as exc:  # noqa: BLE001 - reported with the phase, not lost with the thread
                side["result"] = {"error": f"{type(exc).__name__}: {exc}"}
                log(f"{label}: the load during the phase failed: {exc}")

        helper = threading.Thread(target=run_during, name="during", daemon=True)
        helper.start()
    meter = CpuMeter(cp)
    ext_pid = cp.component("hrl-extender").pid if extenders else 0
    threads0 = thread_cpu_s(ext_pid) if ext_pid else {}
    waits0 = thread_wait_s(ext_pid) if ext_pid else {}
    prod_pid = cp.component("hrl-producer").pid if producer else 0
    prod0 = thread_cpu_s(prod_pid) if prod_pid else {}
    meter.start()
    log_path = cp.logs_dir / f"kube-scheduler-{scheduler}.log"  # appended to by every scheduler of this name
    log_offset = log_path.stat().st_size if log_path.exists() else 0
    comp = cp.start_scheduler(scheduler, extenders, timeout_s=120, binary=binary, profile=sched_profile)
    sched_wait0 = sum(thread_wait_s(comp.pid).values())
    port = int(comp.ready_url.rsplit(":", 1)[1].split("/")[0])
    t0 = time.monotonic()
    profiler = start_profile(cp, profile, label, profile_component) if profile else None
    sched_prof = start_pprof(cp, port, pprof, label, pprof_s) if pprof else None
    binds = LogBinds(comp.log_path, log_offset)
    try:
        # the scheduler's own log says when every pod is bound (a few KB read per poll); the API confirms once.
        # Polling the API instead (`kubectl get pods -o json` of every pod twice a second) costs the machine
        # CPU in proportion to the phase's length, so it slowed a slow phase more than a fast one.
        cpm.wait_for(lambda: binds.count() >= pods, timeout_s, f"{pods} bindings in the log of {scheduler}", 0.1)
        cpm.wait_for(lambda: count_bound(cp, ns)[0] >= pods, 60, f"{pods} pods bound by {scheduler}", 0.5)
        wall_s = time.monotonic() - t0
        cpu = meter.stop(comp.pid)
        sched_wait = sum(thread_wait_s(comp.pid).values()) - sched_wait0
        if ext_pid:
            names = thread_names(ext_pid)
            ext_waits = {
                names.get(t, str(t)): round(v - waits0.get(t, 0.0), 2) for t, v in thread_wait_s(ext_pid).items()
            }
            ext_threads = {
                names.get(t, str(t)): round(v - threads0.get(t, 0.0), 2) for t, v in thread_cpu_s(ext_pid).items()
            }
        if prod_pid:
            prod_threads = {t: v - prod0.get(t, 0.0) for t, v in thread_cpu_s(prod_pid).items()}
            names = thread_names(prod_pid)
            prod_threads = {names.get(t, str(t)): round(v, 2) for t, v in prod_threads.items()}
        sched_metrics = cp.fetch(f"https://127.0.0.1:{port}/metrics")
        ext_conns = extender_connections(cp) if extenders else None
    finally:
        if profiler is not None:
            stop_profile(profiler)
        if sched_prof is not None:
            stop_pprof(cp, port, sched_prof, Path(binary or cp.bin_dir / "kube-scheduler"), pprof_s)
        done.set()
        cp.stop_component(comp)
        if helper is not None:
            helper.join(600)
    ext_after = cp.fetch(f"{cp.extender_base_url}/metrics") if extenders else ""
    times = bind_times(comp.log_path, log_offset)
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
        "cpu_s": cpu,
        "scheduler_gc_cycles": sample_value(sched_metrics, "go_gc_duration_seconds_count"),
        "scheduler_heap_bytes": sample_value(sched_metrics, "go_memstats_heap_alloc_bytes"),
    }
    if ext_conns is not None:
        res["extender_connections"] = ext_conns
    res["scheduler_runqueue_wait_s"] = round(sched_wait, 2)
    if ext_pid:
        res["extender_threads_runqueue_wait_s"] = {k: v for k, v in ext_waits.items() if v > 0}
        res["extender_threads_cpu_s"] = {k: v for k, v in sorted(ext_threads.items(), key=lambda x: -x[1]) if v > 0}
    if prod_pid:
        res["producer_threads_cpu_s"] = {k: v for k, v in sorted(prod_threads.items(), key=lambda x: -x[1]) if v > 0}
    if during is not None:
        res["during"] = side.get("result")
    plugin = plugin_outcomes(sched_metrics)
    if plugin:
        res["plugin_prescore_outcomes"] = plugin
        res["plugin_watch"] = plugin_watch_stats(sched_metrics)
    if extenders:
        for verb in ("prioritize", "filter"):
            for o, n in outcomes(ext_after, verb).items():
                n0 = outcomes(ext_before, verb).get(o, 0.0)
                if n - n0 > 0:
                    res.setdefault(f"extender_{verb}_outcomes", {})[o] = int(n - n0)
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


def sample_value(text: str, sample: str) -> float | None:
    """The value of the first sample named ``sample`` in a Prometheus text exposition (``None`` when absent)."""
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == sample:
                return s.value
    return None


def plugin_outcomes(text: str) -> dict[str, int]:
    """``hrl_plugin_prescore_total`` of a scheduler's metrics by outcome (empty without the plugin)."""
    out: dict[str, int] = {}
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            if smp.name == "hrl_plugin_prescore_total" and smp.value:
                out[smp.labels["outcome"]] = int(smp.value)
    return out


def plugin_watch_stats(text: str) -> dict[str, float]:
    """What the plugin's table watch received over the phase: ``tables`` and ``heartbeats``
    (``hrl_plugin_table_updates_total``) and the seconds spent decoding tables
    (``hrl_plugin_table_decode_duration_seconds_sum``)."""
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            if smp.name == "hrl_plugin_table_updates_total":
                out[f"{smp.labels['kind']}s"] = int(smp.value)
            elif smp.name == "hrl_plugin_table_decode_duration_seconds_sum":
                out["decode_s"] = round(smp.value, 4)
    return out


def outcomes(text: str, verb: str) -> dict[str, float]:
    """``hrl_extender_{verb}_total`` by outcome."""
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            if smp.name == f"hrl_extender_{verb}_total":
                out[smp.labels["outcome"]] = out.get(smp.labels["outcome"], 0.0) + smp.value
    return out


# ---- the load generator (Go, hack/extender-load) --------------------------------------------------------


def build_load_generator() -> Path:
    """Build hack/extender-load (Go standard library only) into the cache next to the control plane's binaries,
    keyed by a hash of its source (worktrees sharing the cache never overwrite each other's build); a no-op when
    that build is there. Returns the binary's path."""
    import hashlib
    import subprocess

    src = ROOT / "hack" / "extender-load"
    h = hashlib.sha256()
    for f in sorted(src.iterdir()):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    cache = Path(os.environ.get("HRL_CP_CACHE") or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")))
    root = cache if os.environ.get("HRL_CP_CACHE") else cache / "hrl-scheduler"
    out = root / f"extender-load-{h.hexdigest()[:12]}" / "extender-load"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
    tmp = out.with_name(f"extender-load.{os.getpid()}")
    subprocess.run(["go", "build", "-trimpath", "-o", str(tmp), "."], cwd=src, env=env, check=True)
    tmp.replace(out)  # atomic: a concurrent run sees the whole binary or none
    return out


# the generator's environment without its own garbage collections while it measures (hack/extender-load): its
# collector competes for the cores with the server measured, so the rows run this way give the server's share alone;
# kube-scheduler collects too (scheduler_gc_cycles of each phase), so the rows as they are are what it sees
QUIET_GC = {"GOGC": "off", "GOMEMLIMIT": "1GiB"}


def load(gen: Path, url: str, body: Path, *args: str, lines: bool = False, env: dict | None = None) -> dict:
    """The generator's JSON report of one run; ``env``: variables added to its environment (e.g. :data:`QUIET_GC`)."""
    import subprocess

    cmd = [str(gen), "-url", url, "-bodies" if lines else "-body", str(body), *args]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=900, env={**os.environ, **(env or {})})
    return json.loads(r.stdout)


# ---- 1. decoders ----------------------------------------------------------------------------------------


def bench_decoders(services: int, candidates: tuple[int, ...] = (230, 500)) -> list[dict]:
    import timeit

    import orjson

    from extender.wire import decode_extender_args, encode_json, parse_extender_args
    from policy.observe import parse_pod

    rows = []
    for c in candidates:
        body = encode_json(bench_request(7, services, [f"bench-node-{i:04d}" for i in range(c)]))

        def ref(b=body):
            return parse_extender_args(b)

        def orj(b=body):  # the same checks as the reference, on orjson's objects
            d = orjson.loads(b)
            names = d["NodeNames"]
            if not all(isinstance(n, str) and n for n in names):
                raise ValueError("bad name")
            return parse_pod(d["Pod"]), names

        def fast(b=body):
            return decode_extender_args(b)

        row = {"candidates": c, "body_bytes": len(body)}
        fns = (("json_us", ref), ("orjson_us", orj), ("msgspec_us", fast))
        best = dict.fromkeys((k for k, _ in fns), math.inf)
        for _ in range(40):  # interleaved: every decoder sees the same moments of a shared machine
            for name, fn in fns:
                best[name] = min(best[name], timeit.timeit(fn, number=50) / 50)
        for name, v in best.items():  # min: the run least disturbed by other work (timeit's advice)
            row[name] = round(v * 1e6, 1)
        rows.append(row)
        log(f"decoders: {row}")
    return rows


# ---- 2. / 3. the extender alone -------------------------------------------------------------------------

SERVER_SCRIPT = """
import json, os, sys
from prometheus_client import CollectorRegistry
from extender.config import load_extender_config
from extender.kube import graph_with_annotations
from extender.server import make_app, uvicorn_config
from extender.store import SnapshotStore
from policy.lowlevel import TopologyHeuristic

store = SnapshotStore()
store.load_file(os.environ["HRL_BENCH_SNAPSHOT"])
snap = store.get().snapshot
store.set_graph(graph_with_annotations(None, snap.pods))
config = load_extender_config({"apiVersion": "hrl-scheduler.io/v1alpha1", "kind": "ExtenderConfiguration",
                               "logLevel": "WARNING"})
app = make_app(config, store, TopologyHeuristic(), CollectorRegistry())

if __name__ == "__main__":
    import uvicorn
    kind, port = sys.argv[1], int(sys.argv[2])
    if kind == "uvicorn-h11-asyncio":
        uvicorn.run(app, host="127.0.0.1", port=port, http="h11", loop="asyncio", access_log=False,
                    lifespan="off", log_level="warning")
    elif kind == "uvicorn-httptools-uvloop":
        uvicorn.Server(uvicorn_config(app, host="127.0.0.1", port=port, log_level="warning")).run()
    elif kind == "hrl-http":  # what ships: hrl-extender's own server, set up as extender/__main__.py does
        import gc
        from extender.config import http_limits
        from extender.http import HttpServer
        from extender.server import bind_socket
        sock = bind_socket("127.0.0.1", port)
        server = HttpServer(app, http_limits(config), app.metrics)
        gc.collect()
        gc.freeze()
        server.run([sock])
    elif kind == "granian":
        from granian import Granian
        from granian.constants import Interfaces
        Granian("hrl_bench_server:app", address="127.0.0.1", port=port, interface=Interfaces.ASGI, workers=1,
                log_enabled=False, respawn_failed_workers=False).serve()
"""

SHIPPED_SERVER = "hrl-http"
SERVERS = ("uvicorn-h11-asyncio", "uvicorn-httptools-uvloop", "granian", SHIPPED_SERVER)


class StaticExtender:
    """The extender's app on a static snapshot of the bench's cluster, in a subprocess, under one server."""

    def __init__(self, workdir: Path, snapshot: Path, kind: str = SHIPPED_SERVER):
        import subprocess

        from hrl_controlplane import free_ports

        (workdir / "hrl_bench_server.py").write_text(SERVER_SCRIPT)
        self.port = free_ports(1)[0]
        self.base = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "HRL_BENCH_SNAPSHOT": str(snapshot), "PYTHONPATH": f"{workdir}:{ROOT}"}
        self.log_path = workdir / f"static-{kind}.log"
        self._log = open(self.log_path, "w")  # closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, str(workdir / "hrl_bench_server.py"), kind, str(self.port)],
            cwd=workdir,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        try:
            cpm.wait_for(self._up, 180, f"the static extender ({kind})", 0.2)
        except BaseException:  # not up: nobody else holds the process to stop it
            self.stop()
            raise

    def _up(self) -> bool:
        import urllib.request

        if self.proc.poll() is not None:
            raise RuntimeError(f"static extender exited, see {self.log_path}")
        try:
            with urllib.request.urlopen(f"{self.base}/readyz", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except Exception:  # noqa: BLE001 - a server that ignores SIGTERM
            self.proc.kill()
            self.proc.wait(30)
        self._log.close()


def write_requests(path: Path, services: int, nodes: int, candidates: int, count: int = 64, seed: int = 1) -> Path:
    """JSON lines of ``count`` bench requests (pending pods of every service) with ``candidates`` names drawn
    from ``nodes`` nodes."""
    import random

    from extender.wire import encode_json

    rng = random.Random(seed)
    names = [f"bench-node-{i:04d}" for i in range(nodes)]
    with open(path, "wb") as f:
        for k in range(count):
            f.write(encode_json(bench_request(k, services, rng.sample(names, candidates))) + b"\n")
    return path


def write_nodes_request(path: Path, services: int, nodes: int) -> Path:
    """One request in Nodes mode (nodeCacheCapable: false) carrying all ``nodes`` Node objects, as kwok's."""
    from extender.wire import encode_json

    items = [
        {k: v for k, v in cpm.fake_node(f"bench-node-{i:04d}", cpu="32", memory="128Gi").items() if k != "kind"}
        for i in range(nodes)
    ]
    args = bench_request(3, services, [])
    args["NodeNames"], args["Nodes"] = None, {"metadata": {}, "items": items}
    path.write_bytes(encode_json(args))
    return path


def bench_caller_side(gen: Path, workdir: Path, services: int, pods: int, n: int) -> dict:
    out: dict = {"cases": [], "stall": None, "server": SHIPPED_SERVER}
    for nodes, cands in ((500, (230, 500)), (5000, (500, 5000))):
        snap = workdir / f"snapshot-{nodes}.json"
        snap.write_text(json.dumps(bench_cluster_objects(nodes, pods, services, bound_fraction=0.5, seed=1)))
        ext = StaticExtender(workdir, snap)
        try:
            for c in cands:
                reqs = write_requests(workdir / f"req-{nodes}-{c}.jsonl", services, nodes, c)
                for verb in ("prioritize", "filter"):
                    r = load(gen, f"{ext.base}/scheduler/{verb}", reqs, "-n", str(n), "-verb", verb, lines=True)
                    row = {"nodes": nodes, "candidates": c, "verb": verb, **_summary(r)}
                    if nodes == 500:  # the same again without the generator's own collections
                        q = _summary(
                            load(
                                gen,
                                f"{ext.base}/scheduler/{verb}",
                                reqs,
                                "-n",
                                str(n),
                                "-verb",
                                verb,
                                lines=True,
                                env=QUIET_GC,
                            )
                        )
                        row["quiet_gc"] = {k: q[k] for k in ("p50_ms", "p99_ms", "max_ms", "gc_cycles", "errors")}
                    out["cases"].append(row)
                    log(f"caller side: {row}")
            if nodes == 500:  # nodeCacheCapable: false: the candidates as whole Node objects
                lst = write_nodes_request(workdir / "nodes-500-230.json", services, 230)
                for verb in ("prioritize", "filter"):
                    r = load(gen, f"{ext.base}/scheduler/{verb}", lst, "-n", str(n), "-verb", verb)
                    row = {"nodes": nodes, "candidates": 230, "verb": f"{verb} (Nodes)", **_summary(r)}
                    out["cases"].append(row)
                    log(f"caller side: {row}")
            if nodes == 5000:
                big = write_nodes_request(workdir / "nodes-5000.json", services, nodes)
                reqs = workdir / f"req-{nodes}-500.jsonl"
                import subprocess

                hogs = [
                    subprocess.Popen(
                        [
                            str(gen),
                            "-url",
                            f"{ext.base}/scheduler/prioritize",
                            "-body",
                            str(big),
                            "-mode",
                            "rate",
                            "-rps",
                            "1000",
                            "-workers",
                            "1",
                            "-duration",
                            "600s",
                            "-timeout",
                            "10s",
                        ],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                    for _ in range(2)
                ]
                try:
                    time.sleep(1.0)
                    r = load(gen, f"{ext.base}/scheduler/prioritize", reqs, "-n", str(n), lines=True)
                finally:
                    for h in hogs:
                        h.terminate()
                        h.wait(30)
                metrics = urllib_get(f"{ext.base}/metrics")
                out["stall"] = {
                    "nodes_body_bytes": big.stat().st_size,
                    **_summary(r),
                    "outcomes": {k: int(v) for k, v in outcomes(metrics, "prioritize").items() if v},
                }
                log(f"stall: {out['stall']}")
        finally:
            ext.stop()
    return out


def urllib_get(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def _summary(r: dict) -> dict:
    lat = r["latency_ms"]
    return {
        "count": r["count"],
        "ok": r["ok"],
        "p50_ms": round(lat["p50"], 3),
        "p99_ms": round(lat["p99"], 3),
        "max_ms": round(lat["max"], 3),
        "over_timeout": r["over_timeout"],
        "errors": r["errors"],
        "status": r["status"],
        "invalid": r["invalid"],
        "rps": round(r["rps"], 1),
        "gc_cycles": r.get("gc_cycles"),
    }


def bench_servers(gen: Path, workdir: Path, services: int, pods: int, n: int, repeats: int) -> dict:
    import statistics

    snap = workdir / "snapshot-500.json"
    if not snap.exists():
        snap.write_text(json.dumps(bench_cluster_objects(500, pods, services, bound_fraction=0.5, seed=1)))
    reqs = workdir / "req-500-230.jsonl"
    if not reqs.exists():
        write_requests(reqs, services, 500, 230)
    runs: dict[str, list[dict]] = {k: [] for k in SERVERS}
    for rep in range(repeats):
        for kind in SERVERS:
            ext = StaticExtender(workdir, snap, kind)
            try:
                r = _summary(load(gen, f"{ext.base}/scheduler/prioritize", reqs, "-n", str(n), lines=True))
            finally:
                ext.stop()
            runs[kind].append(r)
            log(f"server {kind} run {rep + 1}: {r}")
    out = {}
    for kind, rs in runs.items():
        out[kind] = {
            "p50_ms": round(statistics.median(r["p50_ms"] for r in rs), 3),
            "p99_ms": round(statistics.median(r["p99_ms"] for r in rs), 3),
            "rps": round(statistics.median(r["rps"] for r in rs), 1),
            "runs": len(rs),
            "errors": sum(r["errors"] for r in rs),
        }
    return out


# ---- 4. kube-scheduler ----------------------------------------------------------------------------------

NAMES = {
    "baseline": "without extender",
    "plugin": "with the HRLScore plugin (plugin mode)",
    "plugin-base": "with the HRLScore plugin, --plugin-base's build",
    "shipped": "with hrl-extender as shipped (prioritize only)",
    "filter": "with hrl-extender, filter + prioritize",
    "overload": "as shipped, with 10x extender traffic added",
}


def wait_extender_nodes(cp, n: int) -> None:
    cpm.wait_for(
        lambda: (
            float(
                re.search(
                    r"^hrl_extender_snapshot_nodes (\S+)$", cp.fetch(f"{cp.extender_base_url}/metrics"), re.M
                ).group(1)
            )
            >= n
        ),
        300,
        f"the extender to see {n} nodes",
        1.0,
    )


class PluginMode:
    """Plugin mode's side of the bench: an ``hrl-policy cache serve`` (started once) and, per phase, a producing
    ``hrl-extender`` (``scoreTable.publish`` to that cache; the heuristic, as the shipped extender; its own watch as
    the ``hrl-extender`` identity), and the binary of kube-scheduler with HRLScore. ``checkout``: another checkout of
    the repository (``--plugin-base``) whose producer (its Python) and kube-scheduler (its plugin build) the
    ``plugin-base`` phases run, beside this checkout's in the same rounds."""

    def __init__(self, cp, workdir: Path, checkout: Path | None = None):
        self.cp = cp
        self.workdir = workdir
        self.bin = cpm.plugin_bin_dir(build=True, log=log) / "kube-scheduler"
        self.checkout = checkout
        self.checkout_bin = checkout_plugin_bin(checkout) if checkout is not None else None
        port, mport = cpm.free_ports(2)
        self.address = f"127.0.0.1:{port}"
        self.cache = cp.start(
            cpm.Component(
                "hrl-cache",
                [
                    sys.executable,
                    "-m",
                    "policy.cli",
                    "cache",
                    "serve",
                    "--listen",
                    self.address,
                    "--metrics-listen",
                    f"127.0.0.1:{mport}",
                    "--log-level",
                    "WARNING",
                ],
                cp.logs_dir / "hrl-cache.log",
                f"http://127.0.0.1:{mport}/metrics",
                env={"PYTHONUNBUFFERED": "1"},
            ),
            60,
        )
        self.producer = None
        self.base = ""

    def start_producer(self, checkout: Path | None = None) -> None:
        """The producing extender, from ``checkout``'s Python when given."""

        port = cpm.free_ports(1)[0]
        self.base = f"http://127.0.0.1:{port}"
        cfg = {
            "apiVersion": "hrl-scheduler.io/v1alpha1",
            "kind": "ExtenderConfiguration",
            "listen": {"host": "127.0.0.1", "port": port},
            "logLevel": "WARNING",
            "kubernetes": {"enabled": True, "kubeconfig": str(self.cp.kubeconfigs["hrl-extender"])},
            "maxSnapshotAgeSeconds": 120,
            "precompute": {"enabled": False},  # no prioritize traffic: only the table is computed
            "scoreTable": {"publish": True, "address": self.address},
        }
        path = self.workdir / "producer.yaml"
        path.write_text(dump_yaml(cfg))
        self.producer = self.cp.start(
            cpm.Component(
                "hrl-producer",
                [sys.executable, "-m", "extender", "--config", str(path)],
                self.cp.logs_dir / "hrl-producer.log",
                f"{self.base}/readyz",
                env={"PYTHONUNBUFFERED": "1", **({"PYTHONPATH": str(checkout)} if checkout is not None else {})},
            ),
            120,
        )

    def wait_table(self, nodes: int, services: int) -> None:
        """Until the producer's table covers every node and every service of the queued pods."""

        def ready() -> bool:
            got: dict[str, float] = {}
            for fam in text_string_to_metric_families(self.cp.fetch(f"{self.base}/metrics")):
                for smp in fam.samples:
                    if smp.labels.get("outcome", "ok") == "ok":
                        got[smp.name] = got.get(smp.name, 0.0) + smp.value
            return (
                got.get("hrl_extender_snapshot_nodes", 0) >= nodes
                and got.get("hrl_extender_score_table_rows", 0) >= services
                and got.get("hrl_extender_score_table_publishes_total", 0) >= 1
            )

        cpm.wait_for(ready, 300, f"the producer's table of {nodes} nodes and {services} services", 1.0)

    def stop_producer(self) -> None:
        if self.producer is not None:
            self.cp.stop_component(self.producer)
        self.producer = None


def checkout_plugin_bin(checkout: Path) -> Path:
    """kube-scheduler with HRLScore as another checkout builds it (its hack/build-scheduler-plugin.sh: cached by its
    source's hash)."""
    import subprocess

    out = subprocess.run(
        [str(checkout / "hack" / "build-scheduler-plugin.sh")], capture_output=True, text=True, check=True
    )
    return Path(out.stdout.strip().splitlines()[-1]) / "kube-scheduler"


def kube_phases(cp, gen: Path, workdir: Path, nodes: int, args, overload: bool, on_result, plugin=None) -> None:
    """The phases at ``nodes`` nodes (baseline, shipped, filter, and with ``overload`` the overload case); each
    result is passed to ``on_result`` as soon as it is measured."""
    pods, services, t = args.pods, args.services, args.timeout
    shipped = [cpm.extender_registration(cp.extender_url)]
    with_filter = [cpm.extender_registration(cp.extender_url, filterVerb="filter")]
    tag = f"{nodes}"
    res = []
    # the control plane's own CPU with nothing to schedule: what every phase pays per second of its length
    meter = CpuMeter(cp)
    meter.start()
    time.sleep(args.idle_s)
    on_result({"label": f"idle-{tag}", "nodes": nodes, "pods": 0, "bound": 0, "cpu_s": meter.stop(0)})
    both = plugin is not None and plugin.checkout is not None  # plugin-base beside plugin, in every round
    paired: list[tuple[str, list]] = [("baseline", []), ("plugin", [])] + ([("plugin-base", [])] if both else [])
    # --interleave N: the baseline and plugin phases N more times, alternating, so that both see the same moments of a
    # shared machine (their ratio is taken pair by pair); plugin and plugin-base swap places every other round
    rounds = []
    for k in range(1 + getattr(args, "interleave", 0)):
        ph = paired if k % 2 == 0 else [paired[0], *reversed(paired[1:])]
        rounds.append((k, ph + ([("shipped", shipped), ("filter", with_filter)] if k == 0 else [])))
    for rep, (label, regs) in ((k, lr) for k, phases in rounds for lr in phases):
        if ("plugin" if label == "plugin-base" else label) not in args.phases:
            continue
        prof = Path(args.profile) / f"round{rep}" if getattr(args, "profile", None) else None
        pprof = Path(args.pprof) / f"round{rep}" if getattr(args, "pprof", None) else None
        if label in ("plugin", "plugin-base"):
            if plugin is None:
                continue
            base = label == "plugin-base"
            plugin.start_producer(plugin.checkout if base else None)
            try:
                r = run_phase(
                    cp,
                    f"{label}-{tag}",
                    f"bench-{label}-{tag}",
                    [],
                    pods,
                    services,
                    t,
                    binary=plugin.checkout_bin if base else plugin.bin,
                    sched_profile=cpm.hrl_score_profile(plugin.address, weight=2, max_table_age_s=30.0),
                    before_start=lambda: plugin.wait_table(nodes, services),
                    profile=prof,
                    profile_component="hrl-producer",
                    pprof=pprof,
                    pprof_s=args.pprof_seconds,
                    producer=True,
                )
            finally:
                plugin.stop_producer()
        else:
            r = run_phase(
                cp,
                f"{label}-{tag}",
                f"bench-{label}-{tag}",
                regs,
                pods,
                services,
                t,
                profile=prof if regs else None,
                pprof=pprof,
                pprof_s=args.pprof_seconds,
            )
        r["nodes"] = nodes
        r["repeat"] = rep
        res.append(r)
        on_result(r)
    ships = [r for r in res if _phase_kind(r["label"]) == "shipped"]
    if overload and ships and "overload" in args.phases:
        ship = ships[0]
        ordinary_rps = ship["extender_prioritize_calls"] / max(ship["schedule_span_s"], 1e-3)
        rps = 10 * ordinary_rps
        reqs = write_requests(workdir / f"req-cp-{nodes}.jsonl", services, nodes, min(nodes, 230), seed=2)

        def generate_bounded(done: threading.Event) -> dict:
            # one generator run for the whole burst (its length is not known in advance): SIGTERM once every pod is
            # bound; its 64 keep-alive connections live for the whole phase, as kube-scheduler's would
            import subprocess

            cmd = [
                str(gen),
                "-url",
                f"{cp.extender_url}/prioritize",
                "-bodies",
                str(reqs),
                "-mode",
                "rate",
                "-rps",
                f"{rps:.0f}",
                "-workers",
                "64",
                "-duration",
                "0",
                "-timeout",
                "300ms",
            ]
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            LIVE_CHILDREN.add(proc.pid)
            try:
                done.wait()
                proc.terminate()
                out, err = proc.communicate(timeout=120)
            finally:
                LIVE_CHILDREN.discard(proc.pid)
            if proc.returncode != 0:
                raise RuntimeError(f"extender-load exited {proc.returncode}: {err[-500:]}")
            r = json.loads(out)
            return {
                "rps_target": round(rps, 1),
                "requests": r["count"],
                "ok": r["ok"],
                "over_timeout": r["over_timeout"],
                "server_over_timeout": r["server_over_timeout"],
                "reconnects": r["reconnects"],
                "errors": r["errors"],
                "invalid": r["invalid"],
                "dropped": r["dropped"],
                "status": r["status"],
                "p50_ms": r["latency_ms"]["p50"],
                "p99_ms": r["latency_ms"]["p99"],
                "max_ms": r["latency_ms"]["max"],
                "server_p99_ms": r["server_latency_ms"]["p99"],
                "server_max_ms": r["server_latency_ms"]["max"],
                "rps_achieved": round(r["rps"], 1),
            }

        ov = run_phase(
            cp, f"overload-{tag}", f"bench-overload-{tag}", shipped, pods, services, t, during=generate_bounded
        )
        ov["nodes"] = nodes
        on_result(ov)


# ---- report ---------------------------------------------------------------------------------------------


def _phase_kind(label: str) -> str:
    return label.rsplit("-", 1)[0]


def markdown(report: dict) -> str:
    lines = ["## The extender's cost to kube-scheduler (`make bench-scheduler`)", ""]
    load0, load1 = report.get("load", (math.nan, math.nan))
    lines.append(
        f"Run on {report['date']}, {report['host']} ({report['cores']} cores shared by every component, the "
        f"extender, the load generator and whatever else runs: 1-min load average {load0:.1f} at the start, "
        f"{load1:.1f} at the end). Real kube-scheduler v1.36.3 on the loopback control plane "
        "(`hack/controlplane.py`); the extender is `hrl-extender` with the topology heuristic (the base "
        "manifests' policy). Ratios compare phases of the same run; on a loaded 2-core machine the absolute "
        "figures move by 2x between runs."
    )
    cp = report.get("kube")
    if cp:
        lines += ["", "### kube-scheduler throughput", ""]
        lines.append(
            f"scheduler_perf-style SchedulingBasic: kwok nodes (32 CPU, 128 GiB), {report['pods']} pods (100m, "
            f"128 MiB) of {report['services']} services chained by `hrl-scheduler.io/depends-on`, queued before "
            "one kube-scheduler starts. Shipped registration: prioritize only, `nodeCacheCapable: true`, "
            "`ignorable: true`, weight 2, `httpTimeout: 300ms`."
        )
        lines += [
            "",
            "| nodes | scheduler | bound | throughput (pods/s) | ratio | algorithm p50 / p99 (ms) | "
            "attempt p50 / p99 (ms) | extender prioritize p50 / p99 (ms) | extender filter p50 / p99 (ms) |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        base = _baselines(cp)
        for r in cp:
            if _phase_kind(r["label"]) == "idle":
                continue
            b = base.get((r["nodes"], r.get("repeat", 0)))
            ratio = r["throughput_pods_per_s"] / b["throughput_pods_per_s"] if b else math.nan
            ep = (
                f"{r['extender_prioritize_p50_ms']:.2f} / {r['extender_prioritize_p99_ms']:.2f}"
                if r.get("extender_prioritize_calls")
                else "–"
            )
            ef = (
                f"{r['extender_filter_p50_ms']:.2f} / {r['extender_filter_p99_ms']:.2f}"
                if r.get("extender_filter_calls")
                else "–"
            )
            lines.append(
                f"| {r['nodes']} | {NAMES[_phase_kind(r['label'])]}{_round_tag(r)} | {r['bound']}/{r['pods']} | "
                f"{r['throughput_pods_per_s']:.1f} | {ratio:.2f} | {r['algorithm_latency_p50_ms']:.1f} / "
                f"{r['algorithm_latency_p99_ms']:.1f} | {r['attempt_latency_p50_ms']:.1f} / "
                f"{r['attempt_latency_p99_ms']:.1f} | {ep} | {ef} |"
            )
        for line in plugin_rounds(cp):
            lines += ["", line]
        ov = [r for r in cp if _phase_kind(r["label"]) == "overload"]
        for r in ov:
            d = r.get("during") or {}
            if not d.get("requests"):
                why = d.get("error") or "it reported nothing"
                lines += ["", f"**Overload ({r['nodes']} nodes)**: no figures: the load generator failed ({why})."]
                continue
            st = ", ".join(f"{k}: {v}" for k, v in sorted(d.get("status", {}).items()))
            fivexx = sum(v for k, v in d.get("status", {}).items() if k.startswith("5"))
            lines += [
                "",
                f"**Overload ({r['nodes']} nodes)**: while kube-scheduler bound {r['pods']} pods, `extender-load` "
                f"added {d.get('rps_target', math.nan):.0f} requests/s (10x the shipped phase's "
                f"{d.get('rps_target', math.nan) / 10:.0f}/s), achieved {d.get('rps_achieved', math.nan):.0f}/s: "
                f"{d.get('requests', 0)} requests, statuses {{{st}}}, **{fivexx} 5xx**, "
                + (
                    f"**{d.get('server_over_timeout', 0)} replies later than 300 ms** once the request had its "
                    f"connection ({d.get('over_timeout', 0)} counting the client's own reconnects: "
                    f"{d.get('reconnects', 0)} requests dialed a new connection), p99 {d.get('p99_ms', math.nan):.1f} "
                    f"ms ({d.get('server_p99_ms', math.nan):.1f} ms without the dial), max "
                    f"{d.get('max_ms', math.nan):.1f} ms, "
                    if "server_over_timeout" in d
                    else f"**{d.get('over_timeout', 0)} replies later than 300 ms** (client timeouts and reconnects "
                    f"included), worst 2-s slice p99 {d.get('p99_ms_max_slice', math.nan):.1f} ms, "
                )
                + f"{d.get('invalid', 0)} invalid replies, {d.get('errors', 0)} transport errors. Extender outcomes "
                f"during the phase: {json.dumps(r.get('extender_prioritize_outcomes', {}))}.",
            ]
        for n in sorted({r["nodes"] for r in cp if r.get("plugin_prescore_outcomes")}):
            outcomes = [
                json.dumps(r["plugin_prescore_outcomes"])
                for r in cp
                if r["nodes"] == n and r.get("plugin_prescore_outcomes")
            ]
            lines += [
                "",
                f"Plugin mode ({n} nodes): HRLScore's cycles by outcome "
                + (
                    f"{outcomes[0]} in each of its {len(outcomes)} phases"
                    if len(set(outcomes)) == 1
                    else ", ".join(outcomes)
                )
                + " (`hrl_plugin_prescore_total`; `ok`: scored from the table).",
            ]
    if cp and any("cpu_s" in r for r in cp):
        lines += cpu_table(cp)
    repeats = report.get("repeats")
    if repeats:
        lines += ["", repeat_summary(report, repeats)]
    for note in report.get("notes", []):
        lines += ["", note]
    cs = report.get("caller")
    if cs:
        lines += ["", "### The extender's round trip, seen by the caller", ""]
        served_by = (
            "`hrl-extender`'s app and server (`extender.http`, as shipped)"
            if cs.get("server") == SHIPPED_SERVER
            else "`hrl-extender`'s app under uvicorn with httptools and uvloop (the stack before `extender.http`)"
        )
        lines.append(
            f"`hack/extender-load` (Go net/http, keep-alive, as kube-scheduler's HTTPExtender) against "
            f"{served_by} on a static snapshot of the bench's cluster (half of {report['pods']} pods "
            f"bound), {report['caller_requests']} requests one after another per row, candidates drawn at random."
        )
        lines.append(
            "Verb `X (Nodes)`: the same request with `nodeCacheCapable: false`, the candidates as whole Node objects. "
            "`caller's GCs`: the generator's own garbage collections during the row, whose work competes for the "
            "cores with the server; the 500-node `NodeNames` rows again, right after, with its collector off "
            "(`GOGC=off GOMEMLIMIT=1GiB`; the collections it still made in brackets): the server's share alone. "
            "kube-scheduler collects as well (`scheduler_gc_cycles` and `scheduler_heap_bytes` of each kube-scheduler "
            "phase in the JSON), less often per request than the generator: what it sees lies between the two."
        )
        lines += [
            "",
            "| nodes | candidates | verb | p50 (ms) | p99 (ms) | max (ms) | requests/s | errors | caller's GCs "
            "| caller's GC off: p50 / p99 / max (ms) [GCs] |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in cs["cases"]:
            q = r.get("quiet_gc")
            quiet = f"{q['p50_ms']:.3f} / {q['p99_ms']:.3f} / {q['max_ms']:.1f} [{q['gc_cycles']}]" if q else "–"
            gcs = "–" if r.get("gc_cycles") is None else str(r["gc_cycles"])
            lines.append(
                f"| {r['nodes']} | {r['candidates']} | {r['verb']} | {r['p50_ms']:.3f} | {r['p99_ms']:.3f} | "
                f"{r['max_ms']:.1f} | {r['rps']:.0f} | {r['errors'] + r['invalid']} | {gcs} | {quiet} |"
            )
        st = cs.get("stall")
        if st:
            lines += [
                "",
                f"**Stall case**: the 5,000-node / 500-candidate prioritize requests again while two clients post "
                f"{st['nodes_body_bytes'] / 1e6:.1f} MB `Nodes` bodies (5,000 Node objects, nodeCacheCapable: false) "
                f"without pause: p50 {st['p50_ms']:.2f} ms, p99 {st['p99_ms']:.2f} ms, max {st['max_ms']:.1f} ms, "
                f"{st['over_timeout']} over 300 ms, statuses {st['status']}; outcomes of all prioritize requests "
                f"{json.dumps(st['outcomes'])}.",
            ]
    sv = report.get("servers")
    if sv:
        lines += ["", "### Server stack", ""]
        lines.append(
            "The same app and requests (500 nodes, 230 candidates, prioritize), one connection, "
            f"{report['caller_requests']} requests per run, medians of {next(iter(sv.values()))['runs']} "
            "alternating runs:"
        )
        lines += ["", "| server | p50 (ms) | p99 (ms) | requests/s |", "|---|---|---|---|"]
        for k, r in sv.items():
            chosen = " (shipped)" if k == SHIPPED_SERVER else ""
            if SHIPPED_SERVER not in sv and k == "uvicorn-httptools-uvloop":  # a report from before extender.http
                chosen = " (chosen)"
            lines.append(f"| {k}{chosen} | {r['p50_ms']:.3f} | {r['p99_ms']:.3f} | {r['rps']:.0f} |")
    dec = report.get("decoders")
    if dec:
        lines += ["", "### Request decoding", ""]
        lines.append(
            "Per request, in process, the fastest of 40 interleaved repeats of 50 (timeit's advice on a "
            "shared machine): the reference (`json` + every Pod field parsed + the names checked), orjson + "
            "the same, and the msgspec fast path the server uses (only the fields scoring reads)."
        )
        lines += ["", "| candidates | body (bytes) | json (µs) | orjson (µs) | msgspec (µs) |", "|---|---|---|---|---|"]
        for r in dec:
            lines.append(
                f"| {r['candidates']} | {r['body_bytes']} | {r['json_us']:.1f} | {r['orjson_us']:.1f} | "
                f"{r['msgspec_us']:.1f} |"
            )
    return "\n".join(lines)


def _round_tag(r: dict) -> str:
    return f" (round {r['repeat'] + 1})" if r.get("repeat") else ""


def plugin_rounds(kube: list[dict]) -> list[str]:
    """One line per node count with plugin mode's throughput ratio in each round (its baseline of the same round)."""
    import statistics

    base = _baselines(kube)
    out = []
    for n in sorted({r["nodes"] for r in kube}):
        for kind, what in (("plugin", "Plugin mode"), ("plugin-base", "Plugin mode, --plugin-base's build,")):
            vals = [
                r["throughput_pods_per_s"] / base[(n, r.get("repeat", 0))]["throughput_pods_per_s"]
                for r in kube
                if r["nodes"] == n and _phase_kind(r["label"]) == kind and (n, r.get("repeat", 0)) in base
            ]
            if len(vals) > 1:
                out.append(
                    f"{what} at {n} nodes, ratio to the baseline of the same round, round by round: "
                    + ", ".join(f"{v:.2f}" for v in vals)
                    + f"; **median {statistics.median(vals):.2f}**."
                )
    return out


def _baselines(kube: list[dict]) -> dict[tuple[int, int], dict]:
    """The baseline phase of each (nodes, repeat)."""
    return {(r["nodes"], r.get("repeat", 0)): r for r in kube if _phase_kind(r["label"]) == "baseline"}


def _ratios(report: dict) -> dict[tuple[int, str], float]:
    """(nodes, phase) → throughput / the baseline's of the same repeat; the median over the repeats of this run."""
    import statistics

    kube = report.get("kube") or []
    base = _baselines(kube)
    per: dict[tuple[int, str], list[float]] = {}
    for r in kube:
        b = base.get((r["nodes"], r.get("repeat", 0)))
        if b is not None and _phase_kind(r["label"]) not in ("baseline", "idle"):
            per.setdefault((r["nodes"], _phase_kind(r["label"])), []).append(
                r["throughput_pods_per_s"] / b["throughput_pods_per_s"]
            )
    return {k: statistics.median(v) for k, v in per.items()}


def repeat_summary(report: dict, repeats: list[dict]) -> str:
    """One paragraph: the throughput ratio of each phase in this run and in ``repeats`` (reports of the same
    command run before it, ``--repeats``), and their median."""
    import statistics

    runs = [report, *repeats]
    per = [_ratios(r) for r in runs]
    keys = sorted({k for p in per for k in p}, key=lambda k: (k[0], list(NAMES).index(k[1])))
    parts = []
    for k in keys:
        vals = [p[k] for p in per if k in p]
        each = ", ".join(f"{v:.2f}" for v in vals)
        parts.append(f"{NAMES[k[1]]} ({k[0]} nodes): {each}, **median {statistics.median(vals):.2f}**")
    loads = ", ".join(f"{r['load'][0]:.1f}–{r['load'][1]:.1f}" for r in runs if r.get("load"))
    return (
        f"**Throughput ratio over {len(runs)} runs** of the kube-scheduler phases (this one first; 1-min load "
        f"average at start–end of each: {loads}): " + "; ".join(parts) + "."
    )


CPU_COLUMNS = (
    "scheduler",
    "kube-apiserver",
    "etcd",
    "kwok",
    "kube-controller-manager",
    "idle schedulers",
    "hrl-extender",
    "hrl-producer",
    "hrl-cache",
    "bench",
    "other",
    "idle",
)


def cpu_table(phases: list[dict]) -> list[str]:
    """Where each phase's CPU went: CPU milliseconds per bound pod per process (``CpuMeter``), and the phase's
    wall time, CPU seconds in all and the machine's idle share."""
    lines = [
        "",
        "### Where the CPU goes",
        "",
        "CPU milliseconds per bound pod (row `idle`: per second, over a period with nothing to schedule "
        "before the phases), per process, from the scheduler's start until every pod is bound "
        "(`/proc/PID/stat` utime + stime before and after; `idle schedulers`: the control plane's two "
        "kube-schedulers that serve other names; `hrl-extender`: the shipped extender, which watches in every "
        "phase; `hrl-producer`: plugin mode's producing extender, run for its phase only; `hrl-cache`: the "
        "embedding cache relaying its table; `bench`: this script and its children, the `kubectl` polls "
        "and the load generator; `other`: whatever else the machine ran meanwhile; `idle`: idle CPU time of "
        f"all {os.cpu_count()} cores).",
        "",
        "| nodes | phase | wall (s) | " + " | ".join(CPU_COLUMNS) + " | busy CPU-s |",
        "|---|---|---|" + "---|" * len(CPU_COLUMNS) + "---|",
    ]
    for r in phases:
        c = r.get("cpu_s")
        if not c:
            continue
        if _phase_kind(r["label"]) == "idle":  # no pods: CPU milliseconds per second instead
            per = [1000 * c.get(k, 0.0) / max(c.get("wall", 1.0), 1e-9) for k in CPU_COLUMNS]
        else:
            per = [1000 * c.get(k, 0.0) / max(r["bound"], 1) for k in CPU_COLUMNS]
        busy = sum(v for k, v in c.items() if k not in ("idle", "wall"))
        lines.append(
            f"| {r['nodes']} | {_phase_kind(r['label'])}{_round_tag(r)} | {c.get('wall', math.nan):.1f} | "
            + " | ".join(f"{v:.2f}" for v in per)
            + f" | {busy:.1f} |"
        )
    threads = [
        (r["nodes"], _phase_kind(r["label"]), r["extender_threads_cpu_s"])
        for r in phases
        if r.get("extender_threads_cpu_s")
    ]
    if threads:
        lines += [
            "",
            "The extender's CPU seconds by thread (MainThread: the event loop serving requests; watch-pods / "
            "watch-nodes: decoding and parsing watch events; snapshot-builder: snapshot, index and score-table "
            "rebuilds): "
            + "; ".join(f"{k} ({n} nodes) " + ", ".join(f"{t} {v:.2f}" for t, v in th.items()) for n, k, th in threads)
            + ".",
        ]
    prods = [r for r in phases if r.get("producer_threads_cpu_s")]
    if prods:
        lines += [
            "",
            "Plugin mode's producer (the extender that computes and publishes the table), CPU seconds by thread: "
            + "; ".join(
                f"{_phase_kind(r['label'])}{_round_tag(r)} ({r['nodes']} nodes) "
                + ", ".join(f"{t} {v:.2f}" for t, v in r["producer_threads_cpu_s"].items())
                for r in prods
            )
            + ".",
        ]
    waits = [r for r in phases if "scheduler_runqueue_wait_s" in r and r.get("bound")]
    if waits:
        lines += [
            "",
            "Time spent runnable but waiting for a core (`/proc/PID/task/TID/schedstat`), milliseconds per bound "
            "pod: "
            + "; ".join(
                f"{_phase_kind(r['label'])}{_round_tag(r)} ({r['nodes']} nodes): kube-scheduler "
                f"{1000 * r['scheduler_runqueue_wait_s'] / r['bound']:.2f}"
                + "".join(
                    f", extender {t} {1000 * v / r['bound']:.2f}"
                    for t, v in (r.get("extender_threads_runqueue_wait_s") or {}).items()
                )
                for r in waits
            )
            + ".",
        ]
    conns = [
        (r["nodes"], _phase_kind(r["label"]), r["extender_connections"]) for r in phases if "extender_connections" in r
    ]
    if conns:
        lines += [
            "",
            "HTTP connections the extender had accepted by the end of each phase (cumulative): "
            + ", ".join(f"{k} ({n} nodes) {v}" for n, k, v in conns)
            + ".",
        ]
    return lines


SECTIONS = ("decoders", "caller", "servers", "kube", "kube-large")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="hack/bench-scheduler.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--large-nodes", type=int, default=5000, help="the large cluster (0: skip)")
    ap.add_argument("--pods", type=int, default=2000)
    ap.add_argument("--services", type=int, default=20)
    ap.add_argument("--caller-requests", type=int, default=2000, help="requests per caller-side row")
    ap.add_argument("--server-repeats", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds allowed per phase to bind every pod")
    ap.add_argument(
        "--node-wait", type=float, default=1800.0, help="seconds allowed for each batch of nodes to become Ready"
    )
    ap.add_argument("--skip", nargs="*", default=[], choices=SECTIONS, help="sections to leave out")
    ap.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    ap.add_argument(
        "--idle-s", type=float, default=10.0, help="seconds of the idle measurement before the phases (CPU table)"
    )
    ap.add_argument(
        "--repeats",
        nargs="*",
        default=[],
        metavar="PATH",
        help="--json reports of earlier runs of the same phases: their throughput ratios are listed with this "
        "run's, and the median",
    )
    ap.add_argument(
        "--profile",
        metavar="DIR",
        help="record the extender with py-spy (the [bench] extra) during each phase that calls it, and plugin "
        "mode's producer during its phases: collapsed stacks in DIR/roundN/PHASE.txt, a summary in the log",
    )
    ap.add_argument(
        "--pprof",
        metavar="DIR",
        help="record each phase's kube-scheduler with Go's CPU profiler (/debug/pprof/profile over its first "
        "--pprof-seconds): DIR/roundN/PHASE.pprof, its top functions in the log (go tool pprof)",
    )
    ap.add_argument("--pprof-seconds", type=int, default=6, metavar="S", help="length of each --pprof profile")
    ap.add_argument(
        "--phases",
        nargs="*",
        default=["baseline", "plugin", "shipped", "filter", "overload"],
        choices=["baseline", "plugin", "shipped", "filter", "overload"],
        help="the kube-scheduler phases to run (overload needs shipped)",
    )
    ap.add_argument(
        "--interleave",
        type=int,
        default=0,
        metavar="N",
        help="run the baseline and plugin phases N more times, alternating (ratios pair by pair: a shared machine)",
    )
    ap.add_argument(
        "--plugin-base",
        metavar="DIR",
        help="another checkout of the repository (e.g. git worktree add DIR main): its producer and plugin build "
        "run as phase plugin-base beside plugin in every round, so that the two versions see the same moments",
    )
    ap.add_argument("--no-write", action="store_true", help="do not touch BENCHMARKS.md")
    ap.add_argument("--workdir", help="control-plane working directory (default: a temporary one)")
    ap.add_argument(
        "--from-json", metavar="PATH", help="run nothing: write the section from a report --json wrote (even partial)"
    )
    args = ap.parse_args(argv)
    if args.from_json:
        report = json.loads(Path(args.from_json).read_text())
        if args.repeats:
            report["repeats"] = [json.loads(Path(p).read_text()) for p in args.repeats]
        md = markdown(report)
        print(md)
        if not args.no_write:
            write_section("scheduler", md)
        return 0
    if args.nodes < 2 or args.pods < 1 or args.services < 1:
        ap.error("--nodes >= 2, --pods >= 1, --services >= 1")

    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="hrl-bench-scheduler-"))
    workdir.mkdir(parents=True, exist_ok=True)
    report: dict = {
        "date": datetime.now().strftime("%Y-%m-%d"),
        "host": platform.node() or "this machine",
        "cores": os.cpu_count(),
        "pods": args.pods,
        "services": args.services,
        "caller_requests": args.caller_requests,
    }
    load0 = os.getloadavg()[0]
    gen = build_load_generator()

    def checkpoint() -> None:  # partial figures survive an interrupted run (--from-json renders them)
        report["load"] = (load0, os.getloadavg()[0])
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=1))

    if "decoders" not in args.skip:
        report["decoders"] = bench_decoders(args.services)
        checkpoint()
    if "caller" not in args.skip:
        report["caller"] = bench_caller_side(gen, workdir, args.services, args.pods, args.caller_requests)
        checkpoint()
    if "servers" not in args.skip:
        report["servers"] = bench_servers(
            gen, workdir, args.services, args.pods, args.caller_requests, args.server_repeats
        )
        checkpoint()
    if "kube" not in args.skip or ("kube-large" not in args.skip and args.large_nodes):
        cp = cpm.ControlPlane(workdir / "cp", log=log)
        log(f"control plane in {workdir / 'cp'}")
        # every client is on 127.0.0.1 here: the overload phase's 64 generator connections beside kube-scheduler's
        # would meet the shipped per-address bound (64), which stands for clients on other addresses
        cp.up(extender_config={"logLevel": "WARNING", "limits": {"maxConnectionsPerClient": 0}})
        results: list[dict] = []

        def on_result(r: dict) -> None:
            results.append(r)
            report["kube"] = results
            checkpoint()

        try:
            checkout = Path(args.plugin_base).resolve() if args.plugin_base else None
            plugin = PluginMode(cp, workdir, checkout) if "plugin" in args.phases else None
            log(f"up in {cp.startup_s['total']:.1f} s; creating {args.nodes} nodes")
            make = lambda a, b: (  # noqa: E731
                cpm.fake_node(
                    f"bench-node-{i:04d}",
                    cpu="32",
                    memory="128Gi",
                    labels={"topology.kubernetes.io/zone": f"zone-{i % 3}"},
                )
                for i in range(a, b)
            )
            cp.create_nodes(make(0, args.nodes), wait_s=args.node_wait)
            wait_extender_nodes(cp, args.nodes)
            if "kube" not in args.skip:
                kube_phases(cp, gen, workdir, args.nodes, args, overload=True, on_result=on_result, plugin=plugin)
            if "kube-large" not in args.skip and args.large_nodes > args.nodes:
                log(f"creating {args.large_nodes - args.nodes} more nodes")
                try:
                    for a in range(args.nodes, args.large_nodes, 500):
                        cp.create_nodes(make(a, min(a + 500, args.large_nodes)), wait_s=args.node_wait)
                    wait_extender_nodes(cp, args.large_nodes)
                    kube_phases(
                        cp, gen, workdir, args.large_nodes, args, overload=False, on_result=on_result, plugin=plugin
                    )
                except cpm.ControlPlaneError as exc:  # the figures so far are still worth writing
                    note = f"The {args.large_nodes}-node phases did not complete: {exc}."
                    log(note)
                    report.setdefault("notes", []).append(note)
                    checkpoint()
        finally:
            cp.down()
        report["kube"] = results
        report["startup_s"] = cp.startup_s.get("total", math.nan)
    report["load"] = (load0, os.getloadavg()[0])
    if args.repeats:
        report["repeats"] = [json.loads(Path(p).read_text()) for p in args.repeats]
    md = markdown(report)
    print(md)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    if not args.no_write:
        write_section("scheduler", md)
        log("wrote the 'scheduler' section of BENCHMARKS.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
