"""A recording (:mod:`policy.recording`) read as the simulator's inputs: the application's workloads and its
observed traffic (for ``app build``'s calibration, :func:`policy.sim.appbuild.build_from_observations`), the
recorded cluster (its nodes, the other tenants' pods, where every pod of the app ran), the recorded load, and the
recorded latency and CPU each replay is compared with.

- **the app**: the Deployments and StatefulSets of the recorded namespaces (every namespace but ``kube-*`` when
  the recording names none) at the first step, written as manifests (their ``*_ADDR`` variables kept: the declared
  call graph);
- **observations** (the mesh metrics in place of spans): per service, visits = Σ served rate × step; per edge,
  calls = Σ rate × step; entry visits = Σ entering rate × step, over the window; no visit durations (the latency
  targets come from the per-service latency series) and no parallel fan-out (meshes do not see it: sequential);
- **metrics** (:class:`policy.sim.measurements.Metrics`, one step per recorded step): per pod ``cpu_m``,
  ``memory_mi``, ``rps``; per service ``latency_p50/p95/p99_ms`` and ``success_pct``;
- **the cluster** (:class:`RecordedCluster`): the recorded Node objects as they were at the first step; the pods
  of other namespaces as background tenants on their nodes, using their measured CPU (their requests when not
  measured); the app's pods' nodes at the first step (the replay's starting placement);
- **the load**: per step, the entering rate summed over the entry services (user requests/s);
- **recorded series**: per step, each service's p50 / p95 latency, the app's CPU in use (cores).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from policy.observe import ObjectError, parse_node
from policy.recording import Recording, bound_pods
from policy.sim.engine import BackgroundPod, ClusterSpec
from policy.sim.measurements import ColumnSpec, Metrics, Series, SpanStats
from policy.state import ServiceEdge, ServiceGraph

__all__ = ["RecordedCluster", "RecordedInputs", "read_inputs", "SYSTEM_NAMESPACE_PREFIX"]

SYSTEM_NAMESPACE_PREFIX = "kube-"
MIB = 2**20


@dataclass(frozen=True)
class RecordedCluster(ClusterSpec):
    """The recorded cluster as a :class:`policy.sim.engine.ClusterSpec`: ``objects`` are its Node objects (API
    JSON), replayed as they were; ``background``: the other namespaces' pods."""

    objects: tuple[Any, ...] = ()

    def node_objects(self) -> list[dict[str, Any]]:
        return [json.loads(json.dumps(o)) for o in self.objects]


@dataclass
class RecordedInputs:
    """What :func:`read_inputs` makes of a recording (module docstring). ``steps``: steps with metrics; ``step_s``;
    ``load_rps``: (T,) user requests/s; ``latency``: service → (T, 2) recorded p50 / p95 (NaN unmeasured);
    ``cpu_cores``: (T,) the app's measured CPU (NaN without pod use); ``placement``: service → nodes of its pods at
    the first step; ``workloads``: the app's workload objects; ``namespaces``: the app's namespaces."""

    recording: Recording
    workloads: list[dict[str, Any]]
    namespaces: list[str]
    graph: ServiceGraph
    stats: SpanStats
    metrics: Metrics
    cluster: RecordedCluster
    placement: dict[str, list[str]]
    load_rps: np.ndarray
    entry: dict[str, float]
    latency: dict[str, np.ndarray]
    cpu_cores: np.ndarray
    step_s: float
    warnings: list[str] = field(default_factory=list)

    @property
    def steps(self) -> int:
        return len(self.load_rps)

    def write_manifests(self, path: Path) -> Path:
        """The app's workloads as one JSON List at ``path/workloads.json`` (the manifests ``app build`` reads)."""
        path.mkdir(parents=True, exist_ok=True)
        f = path / "workloads.json"
        f.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": self.workloads}, indent=1) + "\n")
        return f


def _app_namespaces(rec: Recording, objects: list[dict[str, Any]]) -> list[str]:
    if rec.manifest.namespaces:
        return list(rec.manifest.namespaces)
    spaces = {
        (o.get("metadata") or {}).get("namespace", "default")
        for o in objects
        if o.get("kind") in ("Deployment", "StatefulSet")
    }
    return sorted(s for s in spaces if not s.startswith(SYSTEM_NAMESPACE_PREFIX))


def _workloads(objects: list[dict[str, Any]], namespaces: list[str]) -> list[dict[str, Any]]:
    out = []
    for o in objects:
        if o.get("kind") not in ("Deployment", "StatefulSet"):
            continue
        meta = dict(o.get("metadata") or {})
        if meta.get("namespace", "default") not in namespaces:
            continue
        keep = {k: meta[k] for k in ("name", "namespace", "labels", "annotations") if k in meta}
        out.append(
            {"apiVersion": o.get("apiVersion", "apps/v1"), "kind": o["kind"], "metadata": keep, "spec": o["spec"]}
        )
    return out


def _node_object(o: dict[str, Any]) -> dict[str, Any]:
    """A recorded Node with what scheduling reads (labels, taints, allocatable, conditions), nothing else."""
    meta = o.get("metadata") or {}
    st = o.get("status") or {}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": meta.get("name"), "labels": dict(meta.get("labels") or {})},
        "spec": {k: v for k, v in (o.get("spec") or {}).items() if k in ("taints", "unschedulable")},
        "status": {
            "capacity": st.get("capacity") or st.get("allocatable") or {},
            "allocatable": st.get("allocatable") or st.get("capacity") or {},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _cluster(
    objects: list[dict[str, Any]], namespaces: list[str], pod_cpu: dict[tuple[str, str], float]
) -> tuple[RecordedCluster, dict[str, list[str]], list[str]]:
    nodes = [o for o in objects if o.get("kind") == "Node"]
    warnings: list[str] = []
    infos = []
    for o in nodes:
        try:
            infos.append(parse_node(o))
        except ObjectError as exc:
            warnings.append(f"node left out of the replay: {exc}")
    names = [n.name for n in infos]
    pos = {n: i for i, n in enumerate(names)}
    node_objs = tuple(_node_object(o) for o in nodes if (o.get("metadata") or {}).get("name") in pos)
    background: list[BackgroundPod] = []
    placement: dict[str, list[str]] = defaultdict(list)
    for p in bound_pods(objects):
        if p.node_name not in pos:
            continue
        if p.namespace in namespaces:
            placement[p.service].append(p.node_name)
            continue
        use = pod_cpu.get((p.namespace, p.name), float(p.requests.cpu_m))
        background.append(
            BackgroundPod(
                f"bg-{len(background):04d}-{p.name}"[:63],
                pos[p.node_name],
                int(p.requests.cpu_m),
                int(p.requests.memory_bytes),
                float(use),
                int(p.requests.memory_bytes),
                int(p.limits.cpu_m),
                int(p.limits.memory_bytes),
            )
        )
    mem = [n.allocatable.memory_bytes for n in infos] or [8 * 2**30]
    cpu = [n.allocatable.cpu_m for n in infos] or [2000]
    cluster = RecordedCluster(
        nodes=len(node_objs),
        cpu_m=int(np.median(cpu)),
        memory_bytes=int(np.median(mem)),
        background=tuple(background),
        objects=node_objs,
    )
    return cluster, dict(placement), warnings


def _series(name: str, service: str, steps: list[int], cols: dict[str, list[float]], is_pod: bool) -> Series:
    raw = {r: np.array(v, dtype=np.float64) for r, v in cols.items() if np.isfinite(np.array(v, dtype=float)).any()}
    return Series(
        service, name, "recording", np.array(steps, dtype=np.int64), raw, {r: ColumnSpec(r) for r in raw}, is_pod
    )


def _nan(v: float | None) -> float:
    return math.nan if v is None else float(v)


@dataclass
class _PodUse:
    """The app's pods' series, the app's CPU per step, and the other tenants' mean CPU (millicores)."""

    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    cpu_by_step: dict[int, float] = field(default_factory=lambda: defaultdict(float))
    measured: set[int] = field(default_factory=set)
    background_cpu_m: dict[tuple[str, str], list[float]] = field(default_factory=lambda: defaultdict(list))


def _pod_use(rec: Recording, namespaces: list[str], step_of: Callable[[float | None], int]) -> _PodUse:
    u = _PodUse()
    for r in rec.numeric_rows("pods"):
        k = step_of(r["time_s"])
        key = (r["namespace"], r["pod"])
        if r["namespace"] not in namespaces:
            if r["cpu_m"] is not None:
                u.background_cpu_m[key].append(r["cpu_m"])
            continue
        d = u.pods.setdefault(key, {"service": r["service"], "steps": [], "cpu_m": [], "memory_mi": [], "rps": []})
        d["steps"].append(k)
        for c in ("cpu_m", "memory_mi", "rps"):
            d[c].append(_nan(r[c]))
        if r["cpu_m"] is not None:
            u.cpu_by_step[k] += r["cpu_m"] / 1000.0
            u.measured.add(k)
    return u


_SERVICE_COLUMNS = ("latency_p50_ms", "latency_p95_ms", "latency_p99_ms", "success_pct")


@dataclass
class _Traffic:
    """Per service its latency and success series; visits and entering requests over the window; per step the
    entering rate of each entry service; calls per edge over the window."""

    services: dict[str, dict[str, Any]] = field(default_factory=dict)
    served: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    entered: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    entry_by_step: dict[int, dict[str, float]] = field(default_factory=lambda: defaultdict(dict))
    calls: dict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(float))


def _traffic(rec: Recording, step_of: Callable[[float | None], int]) -> _Traffic:
    tr = _Traffic()
    step_s = rec.manifest.step_s
    for r in rec.numeric_rows("services"):
        k = step_of(r["time_s"])
        d = tr.services.setdefault(r["service"], {"steps": [], **{c: [] for c in _SERVICE_COLUMNS}})
        d["steps"].append(k)
        for c in _SERVICE_COLUMNS:
            d[c].append(_nan(r[c]))
        tr.served[r["service"]] += (r["served_rps"] or 0.0) * step_s
        if r["entry_rps"]:
            tr.entered[r["service"]] += r["entry_rps"] * step_s
            tr.entry_by_step[k][r["service"]] = r["entry_rps"]
    for r in rec.numeric_rows("edges"):
        if r["rps"] is not None and r["caller"] != r["callee"]:
            tr.calls[(r["caller"], r["callee"])] += r["rps"] * step_s
    return tr


def _metrics(step_s: float, use: _PodUse, tr: _Traffic) -> Metrics:
    metrics = Metrics(step_s=step_s)
    for (_ns, name), d in sorted(use.pods.items()):
        cols = {c: d[c] for c in ("cpu_m", "memory_mi", "rps")}
        metrics.series.append(_series(name, d["service"], d["steps"], cols, True))
    for s, d in sorted(tr.services.items()):
        ser = _series(s, s, d["steps"], {c: d[c] for c in _SERVICE_COLUMNS}, False)
        if ser.raw:
            metrics.series.append(ser)
    return metrics


def _recorded_latency(tr: _Traffic, steps: int) -> dict[str, np.ndarray]:
    latency = {}
    for s, d in tr.services.items():
        a = np.full((steps, 2), np.nan)
        for k, p50, p95 in zip(d["steps"], d["latency_p50_ms"], d["latency_p95_ms"]):
            if 0 <= k < steps:
                a[k] = (p50, p95)
        latency[s] = a
    return latency


def read_inputs(path: str | Path) -> RecordedInputs:
    """The simulator's inputs from the recording at ``path`` (module docstring). Raises
    :class:`policy.recording.RecordingError` for a directory that is not a readable recording, ``ValueError`` for
    one without steps, app workloads or traffic."""
    rec = Recording(path)
    m = rec.manifest
    if m.steps < 1:
        raise ValueError(f"{rec.root}: the recording has no completed step")
    first = rec.objects(0)
    namespaces = _app_namespaces(rec, first)
    workloads = _workloads(first, namespaces)
    if not workloads:
        raise ValueError(f"{rec.root}: no Deployment or StatefulSet in the app's namespaces {namespaces} at step 0")
    t0 = m.step_end_s(0)

    def step_of(t: float | None) -> int:
        return int(round(((t or t0) - t0) / m.step_s))

    use = _pod_use(rec, namespaces, step_of)
    tr = _traffic(rec, step_of)
    if not tr.served:
        raise ValueError(f"{rec.root}: no service traffic recorded (metrics/services.csv is empty: no Prometheus?)")
    steps = m.steps
    window = steps * m.step_s
    stats = SpanStats(
        durations_ms={},
        visits={s: int(round(v)) for s, v in tr.served.items()},
        calls={k: int(round(v)) for k, v in tr.calls.items()},
        window_s=window,
        user_requests=int(round(sum(tr.entered.values()))),
        roots={s: int(round(v)) for s, v in tr.entered.items()},
    )
    services = sorted(set(tr.served) | {s for e in tr.calls for s in e})
    graph = ServiceGraph.build(
        services, [ServiceEdge(a, b, rps=n / window) for (a, b), n in sorted(tr.calls.items())], f"recording:{rec.root}"
    )
    pod_cpu = {k: float(np.mean(v)) for k, v in use.background_cpu_m.items() if v}
    cluster, placement, warnings = _cluster(first, namespaces, pod_cpu)
    total_entry = sum(tr.entered.values())
    entry = {s: v / total_entry for s, v in sorted(tr.entered.items(), key=lambda kv: -kv[1])} if total_entry else {}
    load = np.array([sum(tr.entry_by_step.get(k, {}).values()) for k in range(steps)], dtype=np.float64)
    cpu = np.array([use.cpu_by_step[k] if k in use.measured else np.nan for k in range(steps)], dtype=np.float64)
    if not use.measured:
        warnings.append("the recording has no pod CPU use (no cAdvisor series): CPU per request keeps its default")
    return RecordedInputs(
        rec,
        workloads,
        namespaces,
        graph,
        stats,
        _metrics(m.step_s, use, tr),
        cluster,
        placement,
        load,
        entry,
        _recorded_latency(tr, steps),
        cpu,
        m.step_s,
        warnings,
    )
