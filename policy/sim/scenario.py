"""Scenario files: versioned YAML that names everything a simulated run needs besides the stack and the seed:
the applications and their loads, the cluster (node pools), the network, interference, background tenants,
rate drift and events. The built-in ones live in ``policy/data/scenarios/<name>.yaml`` (sources of every
parameter: comments there and ``policy/data/scenarios/PROVENANCE.md``).

Format (``apiVersion: hrl-scheduler.io/v1alpha1``, ``kind: Scenario``; camelCase or snake_case keys; every
section but ``name`` and ``apps`` optional, defaults as below)::

    name: shared-cluster
    family: shared-cluster          # baseline | shared-cluster | network | interference | heterogeneous | events | load
    description: ...
    minutes: 30                     # run length (``--minutes`` overrides)
    apps:                           # one or several; several share the cluster, each in its own namespace
      - app: online-boutique        # built-in app or a path (relative to this file) to an app.yaml / its folder
        namespace: online-boutique  # default: "default" for one app, the app's name for several
        load:
          trace: nasa               # nasa | twitter | bursty | a CSV of requests per minute
          peakUtilization: 1.25     # the window's peak = this × the app's capacity at its manifest replicas
          # peakRps: 120            # ... or an absolute peak (user requests/s)
          flashCrowds: [{atMin: 10, durationMin: 5, factor: 3.0, rampMin: 1}]   # minutes of the run
        callBytes: {requestBytes: 1024, responseBytes: 16384}   # payload of every call the app.yaml leaves at 0
    cluster:
      appBench: true                # the app's `make bench` cluster (policy.sim.sizing.APP_BENCH); or:
      nodePools:
        - {name: general, count: 12, cpuM: 4000, memoryGiB: 16, speed: 1.0, zones: [zone-a, zone-b],
           region: region-1, racksPerZone: 2, nicGbps: 10, instanceType: m5.xlarge, maxPods: 110,
           speedLabel: true}        # nodes labelled hrl-scheduler.io/cpu-speed: <speed> (false: no label)
    network:                        # absent: the classic three-class model (NetworkModel defaults)
      classes: {sameNodeMs: 0.05, sameZoneMs: 0.5, crossZoneMs: 2.0, sameNodeGbps: 40, sameZoneGbps: 10,
                crossZoneGbps: 5}   # the classic model with other values; or the topology model:
      latency: {sameNodeMs: 0.05, sameRackMs: 0.2, sameZoneMs: 0.5, crossZoneMs: 2.0, crossRegionMs: 15,
                zoneRttMs: {site-a: {site-b: 12}}, zoneRttRangeMs: [5, 50], pairCv: 0.2}
      jitter: {meanMs: 0.0, fracOfDelay: 0.2, cv: 1.0}
      bandwidth: {nicGbps: 10, rackUplinkGbps: 40, crossZoneGbps: 25, crossRegionGbps: 10, flowGbps: 5,
                  maxFlows: 1024, sameNodeGbps: 40}
      sidecar: {latencyMs: 2.65, cpuMsPerRequest: 0.35}
      seed: 0
    interference:
      cpu: {knee: 0.5, slope: 0.5}
      memoryBandwidth: {knee: 0.5, slope: 1.0, nodeGbpsPerCore: 6.4, appGbpsPerCore: 1.0,
                        backgroundGbpsPerCore: 4.0}
    background: {podsPerNode: 2, requestFrac: 0.3, useFrac: 0.2, useFrom: alibaba-2021, useScale: 0.6,
                 memoryFrac: 0.25, cpuUseCv: 0.2, seed: 0}
    drift: {sigma: 0.25, tauMin: 30, seed: 0}
    events:
      - {type: nodeFailure, node: node-003, atMin: 10, recoverAfterMin: 15}
      - {type: drain, node: node-005, atMin: 20, uncordonAfterMin: 5}

A bad file gets a :class:`~policy.config.ConfigError` with one line per problem naming the field and value.

Running one: :func:`run_scenario` (``hrl-policy simulate --scenario NAME|FILE``), or :func:`build` for the
pieces (application, rates, cluster, configuration) to run with :func:`policy.sim.stacks.run_stack`. The
scenario ``baseline-2026-11`` is the setting of `make bench` until November 2026: one app on its bench
cluster, the classic network, no tenants: through :func:`run_scenario` it gives exactly the numbers of
``hrl-policy simulate --app A --trace T --policy P``.
"""

from __future__ import annotations

import copy
import csv
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, model_validator

from policy.config import ConfigError, ConfigModel, load_config
from policy.observe import parse_workload
from policy.state import ANNOTATION_SERVICE, ServiceEdge, ServiceGraph

from .app import AppPart, AppSpec, CallParams, load_app
from .engine import METRIC_KEYS, NODE_UTIL_KEYS, BackgroundPod, ClusterSpec, SimConfig, SimResult
from .events import NODE_MONITOR_GRACE_S, NodeDrain, NodeFailure
from .interference import Interference
from .model import NetworkModel
from .network import TopologyNetwork
from .pools import NodePool, PoolClusterSpec
from .sizing import PEAK_UTILIZATION, app_bench, capacity_rps, cluster_for, window_offset
from .stacks import run_stack
from .traces import FlashCrowd, RateDrift, apply_flash_crowds, load_trace, scale_to_peak

__all__ = [
    "KIND",
    "FAMILIES",
    "BASELINE",
    "scenarios_dir",
    "builtin_scenarios",
    "ScenarioFile",
    "Scenario",
    "load_scenario",
    "compose_apps",
    "background_for_nodes",
    "ScenarioRun",
    "resolve_app",
    "build",
    "run_scenario",
    "flat_result",
    "scenario_window_offset",
    "FLAT_KEYS",
]

KIND = "Scenario"
FAMILIES = ("baseline", "shared-cluster", "network", "interference", "heterogeneous", "events", "load")
#: The scenario of the setting used until November 2026 (one app, its bench cluster, the classic network).
BASELINE = "baseline-2026-11"

GIB = 1024**3
MIB = 1024**2


def scenarios_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "data" / "scenarios"


def builtin_scenarios() -> list[str]:
    d = scenarios_dir()
    return sorted(p.stem for p in d.glob("*.yaml")) if d.is_dir() else []


# ---- the file format ---------------------------------------------------------------------------------------


class FlashCrowdFile(ConfigModel):
    """A flash crowd (:class:`policy.sim.traces.FlashCrowd`), minutes of the run."""

    at_min: int = Field(ge=0)
    duration_min: int = Field(ge=1)
    factor: float = Field(gt=0, le=100)
    ramp_min: int = Field(1, ge=0)


class LoadFile(ConfigModel):
    """An app's load: a trace, scaled so the window's peak is ``peak_utilization`` × the app's capacity at its
    manifest replicas (busiest service at its CPU limit) or ``peak_rps`` user requests/s, plus flash crowds."""

    trace: str = "nasa"
    peak_utilization: float | None = Field(None, gt=0, le=100)
    peak_rps: float | None = Field(None, gt=0)
    flash_crowds: list[FlashCrowdFile] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_peak(self) -> LoadFile:
        if self.peak_utilization is not None and self.peak_rps is not None:
            raise ValueError(
                f"peakUtilization ({self.peak_utilization}) and peakRps ({self.peak_rps}): give one, not both"
            )
        return self


class CallBytesFile(ConfigModel):
    """Payload of every call whose app.yaml leaves it at 0 (bytes)."""

    request_bytes: float = Field(0.0, ge=0)
    response_bytes: float = Field(0.0, ge=0)


class AppRefFile(ConfigModel):
    """One application of the scenario."""

    app: str
    namespace: str | None = Field(None, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)
    load: LoadFile = Field(default_factory=LoadFile)
    call_bytes: CallBytesFile | None = None


class NodePoolFile(ConfigModel):
    """A node pool (:class:`policy.sim.pools.NodePool`)."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)
    count: int = Field(ge=0, le=100_000)
    cpu_m: int = Field(gt=0, le=1_000_000)
    memory_gi_b: float = Field(gt=0, le=100_000, alias="memoryGiB")
    speed: float = Field(1.0, gt=0, le=10)
    max_pods: int = Field(110, ge=1, le=10_000)
    zones: list[str] = Field(default_factory=list)
    region: str = ""
    racks_per_zone: int = Field(1, ge=1, le=10_000)
    nic_gbps: float | None = Field(None, gt=0)
    instance_type: str = ""
    speed_label: bool = True


class ClusterFile(ConfigModel):
    """``app_bench``: the app's bench cluster (``nodes`` overrides its count); or ``node_pools``."""

    app_bench: bool = False
    nodes: int | None = Field(None, ge=1, le=100_000)
    node_pools: list[NodePoolFile] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_kind(self) -> ClusterFile:
        if self.app_bench == bool(self.node_pools):
            raise ValueError("give exactly one of appBench: true or nodePools")
        if self.node_pools and self.nodes is not None:
            raise ValueError(f"nodes ({self.nodes}) only applies with appBench: true (pools give their count)")
        names = [p.name for p in self.node_pools]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"node pool names must be unique, got {dup}")
        return self


class ClassesFile(ConfigModel):
    """The classic three-class network (:class:`policy.sim.model.NetworkModel`)."""

    same_node_ms: float = Field(0.05, ge=0)
    same_zone_ms: float = Field(0.5, ge=0)
    cross_zone_ms: float = Field(2.0, ge=0)
    same_node_gbps: float = Field(40.0, gt=0)
    same_zone_gbps: float = Field(10.0, gt=0)
    cross_zone_gbps: float = Field(5.0, gt=0)


class LatencyFile(ConfigModel):
    same_node_ms: float = Field(0.05, ge=0)
    same_rack_ms: float = Field(0.2, ge=0)
    same_zone_ms: float = Field(0.5, ge=0)
    cross_zone_ms: float = Field(2.0, ge=0)
    cross_region_ms: float = Field(15.0, ge=0)
    zone_rtt_ms: dict[str, dict[str, float]] = Field(default_factory=dict)
    zone_rtt_range_ms: tuple[float, float] | None = None
    pair_cv: float = Field(0.0, ge=0, le=2)

    @model_validator(mode="after")
    def _range(self) -> LatencyFile:
        if self.zone_rtt_range_ms is not None:
            lo, hi = self.zone_rtt_range_ms
            if not 0 <= lo <= hi:
                raise ValueError(f"zoneRttRangeMs: must be [low, high] with 0 <= low <= high, got [{lo}, {hi}]")
        for a, row in self.zone_rtt_ms.items():
            for b, ms in row.items():
                if ms < 0:
                    raise ValueError(f"zoneRttMs.{a}.{b}: must be >= 0, got {ms}")
        return self


class JitterFile(ConfigModel):
    mean_ms: float = Field(0.0, ge=0)
    frac_of_delay: float = Field(0.0, ge=0, le=10)
    cv: float = Field(1.0, gt=0, le=10)


class BandwidthFile(ConfigModel):
    same_node_gbps: float = Field(40.0, gt=0)
    nic_gbps: float | None = Field(None, gt=0)
    rack_uplink_gbps: float | None = Field(None, gt=0)
    cross_zone_gbps: float | None = Field(None, gt=0)
    cross_region_gbps: float | None = Field(None, gt=0)
    flow_gbps: float = Field(5.0, gt=0)
    max_flows: int = Field(1024, ge=1, le=1_000_000)


class SidecarFile(ConfigModel):
    """A service-mesh proxy per pod: ``latency_ms`` per call (both proxies), ``cpu_ms_per_request`` per
    request through each proxy."""

    latency_ms: float = Field(ge=0, le=1000)
    cpu_ms_per_request: float = Field(0.0, ge=0, le=1000)


class NetworkFile(ConfigModel):
    classes: ClassesFile | None = None
    latency: LatencyFile | None = None
    jitter: JitterFile | None = None
    bandwidth: BandwidthFile | None = None
    sidecar: SidecarFile | None = None
    seed: int = Field(0, ge=0)

    @model_validator(mode="after")
    def _one_model(self) -> NetworkFile:
        topo = [k for k in ("latency", "jitter", "bandwidth", "sidecar") if getattr(self, k) is not None]
        if self.classes is not None and topo:
            raise ValueError(f"classes and {', '.join(topo)}: the classic model or the topology model, not both")
        return self


class CpuInterferenceFile(ConfigModel):
    knee: float = Field(0.5, ge=0, le=1)
    slope: float = Field(0.5, ge=0, le=100)


class MemoryBandwidthFile(ConfigModel):
    knee: float = Field(0.5, ge=0, le=1)
    slope: float = Field(1.0, ge=0, le=100)
    node_gbps: float | None = Field(None, gt=0)
    node_gbps_per_core: float = Field(6.4, gt=0)
    app_gbps_per_core: float = Field(1.0, ge=0)
    background_gbps_per_core: float = Field(1.0, ge=0)


class InterferenceFile(ConfigModel):
    cpu: CpuInterferenceFile = Field(default_factory=CpuInterferenceFile)
    memory_bandwidth: MemoryBandwidthFile | None = None


class BackgroundFile(ConfigModel):
    """Other tenants' pods: ``pods_per_node`` per node requesting about ``request_frac`` of its CPU and
    ``memory_frac`` of its memory, using ``use_frac`` of its CPU (or, with ``use_from: alibaba-2021``, a
    draw per node from the Alibaba 2021 node CPU distribution × ``use_scale``)."""

    pods_per_node: int = Field(2, ge=1, le=100)
    request_frac: float = Field(0.3, ge=0, le=1)
    use_frac: float = Field(0.2, ge=0, le=1)
    use_from: Literal["alibaba-2021"] | None = None
    use_scale: float = Field(1.0, ge=0, le=1)
    memory_frac: float = Field(0.25, ge=0, le=1)
    cpu_use_cv: float = Field(0.2, ge=0, le=5)
    seed: int = Field(0, ge=0)


class DriftFile(ConfigModel):
    sigma: float = Field(ge=0, le=2)
    tau_min: float = Field(gt=0)
    seed: int = Field(0, ge=0)
    max_factor: float = Field(3.0, ge=1, le=100)


class EventFile(ConfigModel):
    type: Literal["nodeFailure", "drain"]
    node: str
    at_min: int = Field(ge=0)
    recover_after_min: int | None = Field(None, ge=1)
    node_monitor_grace_seconds: float = Field(NODE_MONITOR_GRACE_S, ge=0, le=600)
    uncordon_after_min: int | None = Field(None, ge=1)
    timeout_min: int = Field(10, ge=1)

    @model_validator(mode="after")
    def _fields_of_type(self) -> EventFile:
        if self.type == "drain" and self.recover_after_min is not None:
            raise ValueError("recoverAfterMin: only for type nodeFailure")
        if self.type == "nodeFailure" and self.uncordon_after_min is not None:
            raise ValueError("uncordonAfterMin: only for type drain")
        return self


class ScenarioFile(ConfigModel):
    """A scenario file (module docstring)."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", max_length=63)
    family: Literal["baseline", "shared-cluster", "network", "interference", "heterogeneous", "events", "load"] = (
        "baseline"
    )
    description: str = ""
    minutes: int = Field(30, ge=1, le=100_000)
    apps: list[AppRefFile] = Field(min_length=1)
    cluster: ClusterFile = Field(default_factory=lambda: ClusterFile(app_bench=True))
    network: NetworkFile | None = None
    interference: InterferenceFile | None = None
    background: BackgroundFile | None = None
    drift: DriftFile | None = None
    events: list[EventFile] = Field(default_factory=list)

    @model_validator(mode="after")
    def _apps(self) -> ScenarioFile:
        if self.cluster.app_bench and len(self.apps) != 1:
            raise ValueError(f"cluster.appBench: needs exactly one app, got {len(self.apps)}")
        ns = [a.namespace for a in self.apps if a.namespace]
        dup = sorted({n for n in ns if ns.count(n) > 1})
        if dup:
            raise ValueError(f"apps: namespaces must be unique, got {dup}")
        return self


@dataclass(frozen=True)
class Scenario:
    """A validated scenario file and where it came from (``source``: its path; relative app paths resolve
    against its folder)."""

    spec: ScenarioFile
    source: str = ""

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def family(self) -> str:
        return self.spec.family


def load_scenario(name_or_path: str | Path | Mapping[str, Any]) -> Scenario:
    """A built-in scenario by name, a scenario YAML file, or an already-parsed mapping. Raises
    :class:`~policy.config.ConfigError` (one line per problem, naming the field and value) or ValueError
    (unknown name)."""
    if isinstance(name_or_path, Mapping):
        return Scenario(load_config(ScenarioFile, KIND, name_or_path), "")
    p = Path(name_or_path)
    if not p.exists():
        cand = scenarios_dir() / f"{name_or_path}.yaml"
        if not cand.is_file():
            raise ValueError(
                f"scenario: unknown scenario {str(name_or_path)!r} (built-in: {', '.join(builtin_scenarios())}; "
                "or a path to a scenario YAML file)"
            )
        p = cand
    return Scenario(load_config(ScenarioFile, KIND, p), str(p))


# ---- several applications on one cluster -------------------------------------------------------------------


def compose_apps(apps: list[tuple[AppSpec, str]], name: str) -> AppSpec:
    """One :class:`AppSpec` of several applications sharing a cluster: each app's Deployments go to its
    namespace and its services are renamed ``<service>.<namespace>`` (the ``hrl-scheduler.io/service``
    annotation on the workload and its pod template), so services of different apps never collide; the call
    graphs are disjoint. ``parts`` keeps each app's services, entry shares, SLO and timeout; the composite's
    own ``entry`` weighs the apps equally, its SLO is the strictest and its timeout the longest."""
    if len(apps) < 2:
        raise ValueError("compose_apps: needs at least two apps")
    deps: list[Mapping[str, Any]] = []
    services: list[str] = []
    edges: list[ServiceEdge] = []
    params: dict[str, Any] = {}
    calls: dict[tuple[str, str], CallParams] = {}
    entry: dict[str, float] = {}
    parts: list[AppPart] = []
    for spec, ns in apps:
        ren = {s: f"{s}.{ns}" for s in spec.graph.services}
        for w, obj in zip(spec.workloads, spec.deployments):
            d = copy.deepcopy(dict(obj))
            meta = dict(d.get("metadata") or {})
            meta["namespace"] = ns
            svc = ren.get(w.service, f"{w.service}.{ns}")
            meta["annotations"] = {**(meta.get("annotations") or {}), ANNOTATION_SERVICE: svc}
            d["metadata"] = meta
            tmpl = d.setdefault("spec", {}).setdefault("template", {})
            tmeta = dict(tmpl.get("metadata") or {})
            tmeta["annotations"] = {**(tmeta.get("annotations") or {}), ANNOTATION_SERVICE: svc}
            tmpl["metadata"] = tmeta
            deps.append(d)
        services += [ren[s] for s in spec.graph.services]
        edges += [
            ServiceEdge(ren[e.caller], ren[e.callee], calls_per_request=e.calls_per_request, parallel=e.parallel)
            for e in spec.graph.edges
        ]
        params.update({ren[s]: p for s, p in spec.params.items() if s in ren})
        calls.update({(ren[a], ren[b]): c for (a, b), c in spec.calls.items() if a in ren and b in ren})
        ent = {ren[s]: w for s, w in spec.entry.items() if s in ren}
        for s, w in ent.items():
            entry[s] = entry.get(s, 0.0) + w / len(apps)
        parts.append(
            AppPart(
                spec.name,
                ns,
                tuple(ren[s] for s in spec.graph.services),
                ent,
                spec.slo_p95_ms,
                spec.timeout_ms,
                spec.source,
            )
        )
    workloads = tuple(parse_workload(o) for o in deps)
    graph = ServiceGraph.build(services, edges, source=f"scenario:{name}")
    return AppSpec(
        name,
        workloads,
        tuple(deps),
        graph,
        params,
        entry,
        min(p.slo_p95_ms for p in parts),
        max(p.timeout_ms for p in parts),
        source="",
        calls=calls,
        parts=tuple(parts),
    )


def _with_call_bytes(spec: AppSpec, cb: CallBytesFile | None) -> AppSpec:
    if cb is None:
        return spec
    calls = {}
    for e in spec.graph.edges:
        c = spec.calls.get((e.caller, e.callee), CallParams())
        upd = {}
        if c.request_bytes == 0:
            upd["request_bytes"] = cb.request_bytes
        if c.response_bytes == 0:
            upd["response_bytes"] = cb.response_bytes
        calls[(e.caller, e.callee)] = c.model_copy(update=upd) if upd else c
    return replace(spec, calls=calls)


# ---- background tenants on any nodes -----------------------------------------------------------------------


@lru_cache(maxsize=1)
def _alibaba_node_cpu_quantiles() -> tuple[np.ndarray, np.ndarray]:
    p = scenarios_dir() / "alibaba-2021-node-cpu-quantiles.csv"
    with p.open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    return (
        np.array([float(r["quantile_pct"]) / 100.0 for r in rows]),
        np.array([float(r["node_cpu_usage"]) for r in rows]),
    )


def background_for_nodes(
    node_cpu_m: list[int], node_memory_bytes: list[int], spec: BackgroundFile
) -> tuple[BackgroundPod, ...]:
    """Background tenants for nodes of these sizes (:class:`BackgroundFile`), deterministic per ``spec.seed``.
    With ``use_from: alibaba-2021`` each node's tenants use ``use_scale`` × a draw (inverse CDF of the 21
    quantiles in ``alibaba-2021-node-cpu-quantiles.csv``) of its CPU, split between its pods like the requests."""
    rng = np.random.default_rng(spec.seed)
    qs = _alibaba_node_cpu_quantiles() if spec.use_from == "alibaba-2021" else None
    out = []
    for n, (cpu_m, mem) in enumerate(zip(node_cpu_m, node_memory_bytes)):
        w = rng.uniform(0.5, 1.5, size=spec.pods_per_node)
        w = w / w.sum()
        node_use = None
        if qs is not None:
            node_use = spec.use_scale * float(np.interp(rng.uniform(), qs[0], qs[1]))
        for k in range(spec.pods_per_node):
            req = int(cpu_m * spec.request_frac * w[k])
            if node_use is None:
                use = float(cpu_m * spec.use_frac * w[k] * rng.uniform(0.5, 1.5))
            else:
                use = float(cpu_m * node_use * w[k])
            m = int(mem * spec.memory_frac * w[k])
            out.append(
                BackgroundPod(
                    f"tenant-{n:03d}-{k}", n, req, m, use, int(m * rng.uniform(0.6, 1.0)), cpu_use_cv=spec.cpu_use_cv
                )
            )
    return tuple(out)


# ---- a run ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScenarioRun:
    """What :func:`build` makes of a scenario: the application (composite for several apps), the user rates
    ``rps`` ((minutes,) for one app, (minutes, apps) for several), the cluster and the configuration, ready
    for :func:`policy.sim.stacks.run_stack`; plus ``apps`` / ``traces`` (names per app) and ``offset_min``."""

    scenario: Scenario
    app: AppSpec
    rps: np.ndarray
    cluster: ClusterSpec
    config: SimConfig
    apps: tuple[str, ...]
    traces: tuple[str, ...]
    offset_min: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def resolve_app(ref: str, scn: Scenario) -> str:
    """What :func:`build` loads for app ``ref`` of ``scn``: a path relative to the scenario file's folder when it
    exists there, else ``ref`` itself (a built-in app name, or a path relative to the working directory)."""
    if scn.source:
        p = Path(scn.source).parent / ref
        if p.exists():
            return str(p)
    return ref


def _app_rates(
    spec: AppSpec, load: LoadFile, trace: str, minutes: int, offset_min: int, node_cpu_m: int | None
) -> np.ndarray:
    whole = load_trace(trace)
    if offset_min < 0 or offset_min + minutes > len(whole):
        raise ValueError(
            f"minutes: trace {trace!r} has {len(whole)} minutes, cannot give [{offset_min}, {offset_min + minutes})"
        )
    if load.peak_rps is not None:
        scaled = scale_to_peak(np.asarray(whole, dtype=np.float64), load.peak_rps)
    else:
        pu = PEAK_UTILIZATION if load.peak_utilization is None else load.peak_utilization
        scaled = scale_to_peak(np.asarray(whole, dtype=np.float64), pu * capacity_rps(spec, node_cpu_m))
    out = scaled[offset_min : offset_min + minutes]
    if load.flash_crowds:
        out = apply_flash_crowds(
            out, [FlashCrowd(c.at_min, c.duration_min, c.factor, c.ramp_min) for c in load.flash_crowds]
        )
    return out


def _cluster(scn: Scenario, app: AppSpec, nodes: int | None) -> ClusterSpec:
    c = scn.spec.cluster
    if c.app_bench:
        base = cluster_for(app, nodes if nodes is not None else c.nodes)
        if scn.spec.background is None:
            return base
        bg = background_for_nodes([base.cpu_m] * base.nodes, [base.memory_bytes] * base.nodes, scn.spec.background)
        return replace(base, background=bg)
    if nodes is not None:
        raise ValueError(f"nodes: scenario {scn.name!r} sizes its cluster with node pools; --nodes does not apply")
    pools = tuple(
        NodePool(
            p.name,
            p.count,
            p.cpu_m,
            int(round(p.memory_gi_b * GIB)),
            p.speed,
            p.max_pods,
            tuple(p.zones),
            p.region,
            p.racks_per_zone,
            p.nic_gbps,
            p.instance_type,
            p.speed_label,
        )
        for p in c.node_pools
    )
    spec = PoolClusterSpec.of(pools)
    if scn.spec.background is not None:
        layout = spec.node_layout()
        bg = background_for_nodes(
            [n["pool"].cpu_m for n in layout], [n["pool"].memory_bytes for n in layout], scn.spec.background
        )
        spec = replace(spec, background=bg)
    return spec


def _network(nf: NetworkFile | None) -> tuple[NetworkModel, TopologyNetwork | None]:
    if nf is None:
        return NetworkModel(), None
    if nf.classes is not None or not any(
        getattr(nf, k) is not None for k in ("latency", "jitter", "bandwidth", "sidecar")
    ):
        c = nf.classes or ClassesFile()
        return NetworkModel(**c.model_dump()), None
    lat = nf.latency or LatencyFile()
    jit = nf.jitter or JitterFile()
    bw = nf.bandwidth or BandwidthFile()
    side = nf.sidecar
    return NetworkModel(), TopologyNetwork(
        same_node_ms=lat.same_node_ms,
        same_rack_ms=lat.same_rack_ms,
        same_zone_ms=lat.same_zone_ms,
        cross_zone_ms=lat.cross_zone_ms,
        cross_region_ms=lat.cross_region_ms,
        zone_rtt_ms=tuple((a, b, float(ms)) for a, row in lat.zone_rtt_ms.items() for b, ms in row.items()),
        zone_rtt_range_ms=None if lat.zone_rtt_range_ms is None else tuple(lat.zone_rtt_range_ms),
        pair_cv=lat.pair_cv,
        jitter_ms=jit.mean_ms,
        jitter_frac=jit.frac_of_delay,
        jitter_cv=jit.cv,
        same_node_gbps=bw.same_node_gbps,
        nic_gbps=bw.nic_gbps,
        rack_uplink_gbps=bw.rack_uplink_gbps,
        cross_zone_gbps=bw.cross_zone_gbps,
        cross_region_gbps=bw.cross_region_gbps,
        flow_gbps=bw.flow_gbps,
        max_flows=bw.max_flows,
        sidecar_ms=side.latency_ms if side else 0.0,
        sidecar_cpu_ms=side.cpu_ms_per_request if side else 0.0,
        seed=nf.seed,
    )


def _interference(f: InterferenceFile | None) -> Interference | None:
    if f is None:
        return None
    mb = f.memory_bandwidth
    return Interference(
        cpu_knee=f.cpu.knee,
        cpu_slope=f.cpu.slope,
        mem_knee=mb.knee if mb else 1.0,
        mem_slope=mb.slope if mb else 0.0,
        node_gbps=mb.node_gbps if mb else None,
        node_gbps_per_core=mb.node_gbps_per_core if mb else 6.4,
        app_gbps_per_core=mb.app_gbps_per_core if mb else 0.0,
        background_gbps_per_core=mb.background_gbps_per_core if mb else 0.0,
    )


def build(
    scenario: Scenario | str | Path,
    *,
    app: str | AppSpec | None = None,
    trace: str | None = None,
    nodes: int | None = None,
    minutes: int | None = None,
    seed: int = 0,
    offset_min: int = 0,
    n_samples: int | None = None,
) -> ScenarioRun:
    """The pieces of one run of ``scenario``: ``app`` / ``trace`` replace the scenario's (only for a
    one-app scenario), ``nodes`` the node count of an ``appBench`` cluster, ``minutes`` its run length;
    ``offset_min``: where the run starts in every app's trace window; ``n_samples``: user requests sampled
    per minute (SimConfig's default when None). Raises ValueError / ConfigError with one-line messages."""
    scn = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
    sp = scn.spec
    if (app is not None or trace is not None) and len(sp.apps) != 1:
        which = "--app" if app is not None else "--trace"
        raise ValueError(f"{which}: scenario {scn.name!r} has {len(sp.apps)} apps; only a one-app scenario takes it")
    if nodes is not None and nodes < 1:
        raise ValueError(f"nodes: must be >= 1, got {nodes}")
    if minutes is not None and minutes < 1:
        raise ValueError(f"minutes: must be >= 1, got {minutes}")
    if offset_min < 0:
        raise ValueError(f"offset: must be >= 0, got {offset_min}")
    if n_samples is not None and n_samples < 1:
        raise ValueError(f"samples: must be >= 1, got {n_samples}")
    T = minutes or sp.minutes
    specs: list[AppSpec] = []
    traces: list[str] = []
    for k, ref in enumerate(sp.apps):
        a = app if (k == 0 and app is not None) else ref.app
        spec = a if isinstance(a, AppSpec) else load_app(resolve_app(a, scn))
        specs.append(_with_call_bytes(spec, ref.call_bytes))
        traces.append(trace if (k == 0 and trace is not None) else ref.load.trace)
    cluster = _cluster(scn, specs[0], nodes)
    if sp.cluster.app_bench:
        node_cpu = app_bench(specs[0]).cpu_m
    else:
        node_cpu = max(p.cpu_m for p in sp.cluster.node_pools if p.count > 0)
    rates = [_app_rates(s, ref.load, t, T, offset_min, node_cpu) for s, ref, t in zip(specs, sp.apps, traces)]
    if len(specs) == 1:
        composite = specs[0]
        rps = rates[0]
    else:
        ns = [ref.namespace or spec.name for ref, spec in zip(sp.apps, specs)]
        dup = sorted({n for n in ns if ns.count(n) > 1})
        if dup:
            raise ValueError(f"apps: two apps in namespace {dup[0]!r}: give them distinct namespaces")
        composite = compose_apps(list(zip(specs, ns)), sp.name)
        rps = np.stack(rates, axis=1)
    network, topo = _network(sp.network)
    events = tuple(
        NodeFailure(e.node, e.at_min, e.recover_after_min, e.node_monitor_grace_seconds)
        if e.type == "nodeFailure"
        else NodeDrain(e.node, e.at_min, e.uncordon_after_min, e.timeout_min)
        for e in sp.events
    )
    names = {o["metadata"]["name"] for o in cluster.node_objects()}
    problems = [(f"events[{i}].node", f"no node named {e.node!r}") for i, e in enumerate(events) if e.node not in names]
    if problems:
        raise ConfigError(scn.source or scn.name, problems)
    drift = None
    if sp.drift is not None:
        drift = RateDrift(sp.drift.sigma, sp.drift.tau_min, sp.drift.seed, sp.drift.max_factor)
    kw: dict[str, Any] = {} if n_samples is None else {"n_samples": n_samples}
    config = SimConfig(
        minutes=len(rps),
        seed=seed,
        network=network,
        network_topology=topo,
        interference=_interference(sp.interference),
        events=events,
        edge_drift=drift,
        **kw,
    )
    return ScenarioRun(
        scn,
        composite,
        rps,
        cluster,
        config,
        tuple(s.name for s in specs),
        tuple(traces),
        offset_min,
    )


#: Keys of :func:`run_scenario`'s flat result, in order (then ``apps`` for several apps).
FLAT_KEYS = (
    "scenario",
    "family",
    "app",
    "trace",
    "policy",
    "nodes",
    "minutes",
    "seed",
    "offset_min",
    "samples",
    *METRIC_KEYS,
    *NODE_UTIL_KEYS,
    "drain_evictions",
    "resizes",
    "objective",
)


def run_scenario(
    scenario: Scenario | str | Path,
    policy: str,
    *,
    app: str | AppSpec | None = None,
    trace: str | None = None,
    nodes: int | None = None,
    minutes: int | None = None,
    seed: int = 0,
    offset_min: int = 0,
    n_samples: int | None = None,
    progress=None,
    bundles: str | Path | None = None,
) -> tuple[dict[str, Any], SimResult]:
    """One run of stack ``policy`` in ``scenario`` (arguments as :func:`build`; ``bundles``: the bundles root the
    learned stacks load, :attr:`policy.sim.stackbase.StackContext.bundles`, None the committed ones): ``(flat,
    SimResult)`` with ``flat`` the keys :data:`FLAT_KEYS` (``app`` / ``trace`` joined with ``+`` for several apps;
    non-finite metrics as None) and, for several apps, ``apps``: each app's latency, failed and SLO figures."""
    run = build(
        scenario,
        app=app,
        trace=trace,
        nodes=nodes,
        minutes=minutes,
        seed=seed,
        offset_min=offset_min,
        n_samples=n_samples,
    )
    res = run_stack(policy, run.app, run.rps, run.cluster, run.config, progress, bundles=bundles)
    flat = flat_result(
        run.scenario.name,
        run.scenario.family,
        "+".join(run.apps),
        "+".join(run.traces),
        policy,
        run.cluster.nodes,
        len(run.rps),
        seed,
        offset_min,
        run.config.n_samples,
        res,
    )
    return flat, res


def flat_result(
    scenario: str,
    family: str,
    app: str,
    trace: str,
    policy: str,
    nodes: int,
    minutes: int,
    seed: int,
    offset_min: int,
    samples: int,
    res: SimResult,
) -> dict[str, Any]:
    """The flat JSON object of one run (:data:`FLAT_KEYS`; ``apps`` too for several apps)."""
    flat: dict[str, Any] = {
        "scenario": scenario,
        "family": family,
        "app": app,
        "trace": trace,
        "policy": policy,
        "nodes": nodes,
        "minutes": minutes,
        "seed": seed,
        "offset_min": offset_min,
        "samples": samples,
    }
    for k in METRIC_KEYS:
        v = float(res.metrics[k])
        flat[k] = v if math.isfinite(v) else None
    for k in NODE_UTIL_KEYS:
        flat[k] = float(res.extra.get(k, 0.0))
    flat["drain_evictions"] = int(res.extra.get("drain_evictions", 0))
    flat["resizes"] = int(res.extra.get("resizes", 0))
    flat["objective"] = float(res.extra["objective"]) if "objective" in res.extra else None
    if "apps" in res.extra:
        flat["apps"] = {
            k: {m: (v if math.isfinite(v) else None) for m, v in d.items()} for k, d in res.extra["apps"].items()
        }
    return flat


def scenario_window_offset(
    scenario: Scenario | str | Path, minutes: int | None = None, trace: str | None = None
) -> int:
    """The offset `make bench` runs a shortened window at: the ``minutes``-long part centred on the peak of the
    (first) app's trace (:func:`policy.sim.sizing.window_offset`); 0 for the whole window."""
    scn = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
    return window_offset(trace or scn.spec.apps[0].load.trace, minutes or scn.spec.minutes)
