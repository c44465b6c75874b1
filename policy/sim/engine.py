"""The simulation loop: a cluster, an application under a request-rate trace, kube-scheduler (with or
without extenders) placing every pod, and controllers (descheduler, autoscalers) run every few minutes.

Each simulated minute: the due hooks act (evictions lose the requests in flight on the evicted pods); the
scheduler places every Pending pod; the performance model (:mod:`policy.sim.model`) serves the minute's
traffic on the pods Ready at mid-minute; pods whose working set exceeds their memory limit (or whose node
runs out of memory) are OOM-killed and restarted by the kubelet after its back-off; then the minute's
accounting: ``offered = served + failed`` user requests, exactly, per minute and over the run.

A scenario (:mod:`policy.sim.scenario`) adds, through :class:`SimConfig` and the cluster spec: node pools of
different sizes and speeds, the topology network and interference (passed to the model), per-service rate
drift, several applications with their own rates (``rps`` of shape (minutes, apps) for an :class:`AppSpec`
with ``parts``), and events applied at the start of their minute before the hooks (node failure and drain,
:mod:`policy.sim.events`). :meth:`Simulation.resize` resizes a running pod in place. Every run records the
CPU utilisation of every up node each minute (:data:`NODE_UTIL_KEYS`).

Everything is deterministic for a given seed: the cluster (pod names), the scheduler's tie-breaks, the
request sampling and the background tenants' CPU jitter draw from separate streams spawned from it, so two
stacks run with the same seed see the same trace and the same random requests.

:meth:`Simulation.run` runs the whole trace; :meth:`Simulation.start`, :meth:`Simulation.advance` and
:meth:`Simulation.result` do the same one minute at a time (the Gymnasium environment drives these).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from policy.index import ClusterIndex
from policy.state import ClusterSnapshot, EvictionResult, PodInfo, ServiceEdge, ServiceGraph, noexecute_toleration_s
from policy.telemetry import progress as report_progress

from .app import AppSpec
from .cluster import TAINT_UNREACHABLE, TAINT_UNSCHEDULABLE, ResizeResult, SimCluster, SimPod
from .events import NodeDrain, NodeEvent, NodeFailure
from .fork import fork_copy
from .interference import Interference
from .kube_scheduler import KubeSchedulerModel
from .model import NetworkModel, PerfModel, PodArrays, StepStats
from .network import LABEL_RACK, TopologyNetwork
from .objects import node_object, rfc3339
from .traces import RateDrift, scale_to_peak

__all__ = [
    "METRIC_KEYS",
    "NODE_UTIL_KEYS",
    "BACKGROUND_NAMESPACE",
    "ANNOTATION_BACKGROUND",
    "MIB",
    "BackgroundPod",
    "background_tenants",
    "ClusterSpec",
    "SimConfig",
    "SimResult",
    "SimEvictor",
    "ResizeResult",
    "PeriodicHook",
    "MinuteStats",
    "Simulation",
    "weighted_percentile",
    "part_outcomes",
    "rps_for_app",
    "metrics_table_row",
]

#: Metric keys every simulation reports (DESIGN.md section 4), all means over the run.
METRIC_KEYS = (
    "latency_mean_ms",
    "latency_p95_ms",
    "latency_p99_ms",
    "failed_pct",
    "slo_violation_pct",
    "cpu_core_hours",
    "evictions",
    "cross_node_call_pct",
)

#: Node-utilisation keys every run reports (``SimResult.extra`` and ``hrl-policy simulate``'s JSON), in %.
NODE_UTIL_KEYS = (
    "node_cpu_util_p10_pct",
    "node_cpu_util_p50_pct",
    "node_cpu_util_p90_pct",
    "node_cpu_util_mean_pct",
    "cluster_cpu_util_mean_pct",
)

#: Label and annotation of background tenants' pods (other workloads sharing the nodes).
BACKGROUND_NAMESPACE = "tenants"
ANNOTATION_BACKGROUND = "hrl-scheduler.io/background"

MIB = 1024 * 1024


@dataclass(frozen=True)
class BackgroundPod:
    """A pod of another tenant sharing the cluster: requests (what the scheduler sees), limits (0 = none)
    and actual use (what the node's CPU and memory feel). ``node``: the node index it starts on (it is
    placed there before the app; once evicted, its ReplicaSet's replacement is scheduled like any pod).
    ``cpu_use_cv``: per-minute jitter of its CPU use (lognormal, mean ``cpu_use_m``; 0 = constant)."""

    name: str
    node: int
    cpu_request_m: int
    memory_request_bytes: int
    cpu_use_m: float
    memory_use_bytes: int
    cpu_limit_m: int = 0
    memory_limit_bytes: int = 0
    cpu_use_cv: float = 0.0

    def deployment(self) -> dict[str, Any]:
        """The Deployment (replicas 1) whose pod this is, in namespace :data:`BACKGROUND_NAMESPACE`."""
        req = {"cpu": f"{int(self.cpu_request_m)}m", "memory": str(int(self.memory_request_bytes))}
        lim = {}
        if self.cpu_limit_m:
            lim["cpu"] = f"{int(self.cpu_limit_m)}m"
        if self.memory_limit_bytes:
            lim["memory"] = str(int(self.memory_limit_bytes))
        res: dict[str, Any] = {"requests": req}
        if lim:
            res["limits"] = lim
        labels = {"app": self.name, "hrl-scheduler.io/tenant": "background"}
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": self.name, "namespace": BACKGROUND_NAMESPACE, "labels": dict(labels)},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": self.name}},
                "template": {
                    "metadata": {"labels": labels, "annotations": {ANNOTATION_BACKGROUND: "true"}},
                    "spec": {"containers": [{"name": "main", "image": "tenant/workload:1", "resources": res}]},
                },
            },
        }


def background_tenants(
    nodes: int,
    cpu_m: int,
    memory_bytes: int,
    *,
    pods_per_node: int = 2,
    request_frac: float = 0.3,
    use_frac: float = 0.2,
    memory_frac: float = 0.25,
    cpu_use_cv: float = 0.2,
    seed: int = 0,
) -> tuple[BackgroundPod, ...]:
    """A random mix of background pods: ``pods_per_node`` per node requesting about ``request_frac`` of
    each node's CPU (and ``memory_frac`` of its memory) and using about ``use_frac`` of its CPU, the shares
    varying ±50% between pods. Deterministic per ``seed``."""
    for k, v in (("request_frac", request_frac), ("use_frac", use_frac), ("memory_frac", memory_frac)):
        if not 0 <= v <= 1:
            raise ValueError(f"{k}: must be in [0, 1], got {v!r}")
    rng = np.random.default_rng(seed)
    out = []
    for n in range(nodes):
        w = rng.uniform(0.5, 1.5, size=pods_per_node)
        w = w / w.sum()
        for k in range(pods_per_node):
            req = int(cpu_m * request_frac * w[k])
            use = float(cpu_m * use_frac * w[k] * rng.uniform(0.5, 1.5))
            mem = int(memory_bytes * memory_frac * w[k])
            out.append(
                BackgroundPod(
                    f"tenant-{n:03d}-{k}", n, req, mem, use, int(mem * rng.uniform(0.6, 1.0)), cpu_use_cv=cpu_use_cv
                )
            )
    return tuple(out)


@dataclass(frozen=True)
class ClusterSpec:
    """A homogeneous simulated cluster: ``nodes`` nodes of ``cpu_m`` millicores and ``memory_bytes``,
    spread round-robin over ``zones`` (empty = one unnamed zone). ``background``: other tenants' pods
    sharing the nodes (none by default; see :func:`background_tenants`)."""

    nodes: int = 8
    cpu_m: int = 2000
    memory_bytes: int = 8 * 1024**3
    zones: tuple[str, ...] = ()
    max_pods: int = 110
    background: tuple[BackgroundPod, ...] = ()

    def node_objects(self) -> list[dict[str, Any]]:
        out = []
        for i in range(self.nodes):
            zone = self.zones[i % len(self.zones)] if self.zones else ""
            out.append(node_object(f"node-{i:03d}", self.cpu_m, self.memory_bytes, self.max_pods, zone=zone))
        return out

    def node_speeds(self) -> np.ndarray | None:
        """(N,) per-core speed of each node relative to the calibration machine; None = all 1."""
        return None

    def node_nic_gbps(self) -> list[float | None] | None:
        """Per node NIC bandwidth (Gbit/s per direction) overriding the network's; None = the network's."""
        return None


@dataclass(frozen=True)
class SimConfig:
    """How a simulation runs.

    - ``minutes`` simulated, in steps of ``step_s`` seconds; ``seed``;
    - ``n_samples``: user requests drawn per step (latency percentiles come from these);
      ``sample_budget``: at most this many visit samples per step (large graphs get fewer per service);
    - ``startup_delay_s``: from binding to Ready (image pull, start, readiness probe);
    - ``restart_delay_s`` / ``restart_delay_max_s``: the kubelet's crash back-off after an OOM kill (10 s,
      doubling, capped at 300 s, reset after 10 minutes without a restart), plus ``restart_ready_s`` to start
      and pass the readiness probe again;
    - ``evictions_lose_inflight``: requests in flight on an evicted pod fail (no graceful drain); a scale-down
      removes its pods gracefully (no loss);
    - ``evictions_lose_capacity``: a pod evicted while no other pod of its service is Ready leaves the service without
      capacity until the replacement is Ready (``startup_delay_s``): the requests the pod served meanwhile fail;
    - ``network``: per-call network costs; ``retry_iterations``: passes per step to settle retry load;
    - ``per_service``: also record per-service latency percentiles each step (``series``);
    - scenario features (:mod:`policy.sim.scenario`; off by default, and then nothing changes):
      ``network_topology`` (:class:`~policy.sim.network.TopologyNetwork`: delay matrix, jitter, shared links,
      sidecar; replaces ``network``), ``interference`` (:class:`~policy.sim.interference.Interference`),
      ``events`` (:mod:`policy.sim.events`: node failures and drains), ``edge_drift``
      (:class:`~policy.sim.traces.RateDrift`: per-service rate drift).
    """

    minutes: int = 30
    seed: int = 0
    n_samples: int = 2000
    startup_delay_s: float = 20.0
    network: NetworkModel = NetworkModel()
    step_s: float = 60.0
    restart_delay_s: float = 10.0
    restart_delay_max_s: float = 300.0
    restart_ready_s: float = 5.0
    evictions_lose_inflight: bool = True
    evictions_lose_capacity: bool = True
    retry_iterations: int = 2
    sample_budget: int = 1_000_000
    per_service: bool = False
    network_topology: TopologyNetwork | None = None
    interference: Interference | None = None
    events: tuple[NodeEvent, ...] = ()
    edge_drift: RateDrift | None = None


@dataclass
class SimResult:
    """Run-level metrics (keys :data:`METRIC_KEYS`) and per-minute series (for plots).

    ``series`` keys (one value per minute): ``rps``, ``offered``, ``served``, ``failed`` (user requests),
    ``latency_mean_ms``, ``latency_p50_ms``, ``latency_p95_ms``, ``failed_pct``, ``cross_node_call_pct``,
    ``cross_zone_call_pct``, ``cpu_cores_requested``, ``cpu_cores_used``, ``pods``, ``evictions``,
    ``oom_kills``, ``lost_inflight``, ``cluster_cpu_util_pct`` (CPU in use over the cores of the up nodes, %),
    and with a topology network of limited links ``link_util_max_pct`` (the busiest link's load over its
    capacity). ``extra``: totals ``offered_requests``, ``served_requests``, ``failed_requests``, ``oom_kills``,
    ``lost_inflight_requests``, ``evictions``, ``drain_evictions`` (a scenario's drains, not the stack's),
    ``resizes``, ``failed_nodes``, the node-utilisation distribution (:data:`NODE_UTIL_KEYS`), and for several
    apps ``apps``: each app's latency mean/p95/p99, failed %, SLO-violation % and offered requests.
    """

    metrics: dict[str, float]
    series: dict[str, list[float]] = field(default_factory=dict)
    latency_samples_ms: np.ndarray = field(default_factory=lambda: np.zeros(0))
    latency_weights: np.ndarray = field(default_factory=lambda: np.zeros(0))
    pods_placed: int = 0
    unschedulable: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class SimEvictor:
    """The Eviction API of a simulated cluster, with the descheduler's Evictor shape
    (``evict(pod, reason) -> EvictionResult``). Evicted pods are replaced by their ReplicaSet and placed
    again by the simulation's scheduler."""

    def __init__(self, sim: Simulation):
        self.sim = sim
        self.results: list[EvictionResult] = []

    def evict(self, pod: PodInfo, reason: str = "") -> EvictionResult:
        alone = self.sim.only_serving(pod.key)
        res = self.sim.cluster.evict(pod.key, self.sim.now_s)
        self.results.append(res)
        if res.outcome == "evicted":
            self.sim.note_eviction(pod.key, alone=alone)
        return res


@dataclass(frozen=True)
class PeriodicHook:
    """A controller run inside the simulation every ``period_min`` simulated minutes (from minute
    ``period_min`` on), before that minute's traffic: a descheduler, an autoscaler (HPA syncs every
    15 s in Kubernetes; here at most once per step). ``fn(sim)`` observes ``sim.observe()`` and acts
    through ``sim.evictor`` (Eviction API) and ``sim.scale`` (scale subresource). ``at_start``: it also runs
    once at t = 0, after the background tenants are placed and before the application's pods are scheduled
    (a controller already running when the application is deployed, e.g. the high level publishing its first
    intent)."""

    name: str
    period_min: int
    fn: Callable[[Simulation], Any]
    at_start: bool = False


@dataclass(frozen=True)
class MinuteStats:
    """What one simulated minute produced (user requests are counts over the minute)."""

    minute: int
    rps: float
    offered: float
    served: float
    failed: float
    latency_ms: np.ndarray
    weights: np.ndarray
    p95_ms: float
    evictions: int
    oom_kills: int
    lost_inflight: float
    step: StepStats
    ready: tuple[SimPod, ...]


class Simulation:
    """One run. ``on_change(snapshot)`` is called before every scheduling cycle with the current state
    (what a watch-fed extender store would hold).

    Raises ValueError when the trace is shorter than ``config.minutes`` or a hook's period is < 1.
    """

    def __init__(
        self,
        app: AppSpec,
        rps: np.ndarray,
        cluster_spec: ClusterSpec,
        scheduler: KubeSchedulerModel,
        config: SimConfig,
        hooks: Sequence[PeriodicHook] = (),
        on_change: Callable[[ClusterSnapshot], None] | None = None,
        scheduler_name: str = "default-scheduler",
    ):
        if len(rps) < config.minutes:
            raise ValueError(f"trace: {len(rps)} minutes of rates for a {config.minutes}-minute simulation")
        self.app = app
        rates = np.asarray(rps, dtype=np.float64)
        if not np.all(np.isfinite(rates)) or np.any(rates < 0):
            raise ValueError("trace: rates must be finite and >= 0")
        parts = tuple(getattr(app, "parts", ()) or ())
        #: (T, A) user rate of each app of a composite application (several apps on one cluster), else None
        self.app_rps: np.ndarray | None = None
        if rates.ndim == 2:
            if len(parts) != rates.shape[1]:
                raise ValueError(f"trace: {rates.shape[1]} rate columns for an application of {len(parts)} apps")
            self.app_rps = rates
            rates = rates.sum(axis=1)
        elif rates.ndim != 1:
            raise ValueError(f"trace: rates must be (minutes,) or (minutes, apps), got shape {rates.shape}")
        self.rps = rates
        self.spec = cluster_spec
        self.scheduler = scheduler
        self.config = config
        for h in hooks:
            if h.period_min < 1:
                raise ValueError(f"hook {h.name}: period_min must be >= 1, got {h.period_min}")
        self.hooks = tuple(hooks)
        self.on_change = on_change
        #: A driver called by :meth:`advance` before each minute, the simulation between two minutes (before the
        #: first one: not started yet): the place where a controller may :meth:`fork` the run. None: no driver;
        #: set it after construction (``StackBuild.simulation`` does).
        self.before_minute: Callable[[Simulation], None] | None = None
        ss = np.random.SeedSequence(config.seed)
        r_cluster, r_sched, r_model, r_bg = (np.random.default_rng(s) for s in ss.spawn(4))
        self.rng_sched = r_sched
        self.rng_model = r_model
        self.rng_bg = r_bg
        drift = config.edge_drift
        self.model = PerfModel(app, config.network, m_headroom=drift.max_factor if drift is not None else 1.0)
        bg_deps = [b.deployment() for b in cluster_spec.background]
        self.cluster = SimCluster.build(
            cluster_spec.node_objects(),
            [*app.deployments, *bg_deps],
            seed=0,
            startup_delay_s=config.startup_delay_s,
            scheduler_name=scheduler_name,
        )
        self.cluster.rng = r_cluster
        self.node_objs = {o["metadata"]["name"]: o for o in self.cluster.node_objs}
        self.node_cores = np.array([n.allocatable.cpu_m / 1000.0 for n in self.cluster.nodes])
        self.node_mem_mi = np.array([n.allocatable.memory_bytes / MIB for n in self.cluster.nodes])
        self.node_zones = [n.zone for n in self.cluster.nodes]
        self.background = {f"{BACKGROUND_NAMESPACE}/{b.name}": b for b in cluster_spec.background}
        for b in cluster_spec.background:
            if not 0 <= b.node < len(self.cluster.nodes):
                raise ValueError(f"background {b.name}: node index {b.node} not in 0..{len(self.cluster.nodes) - 1}")
        self.evictor = SimEvictor(self)
        self._init_scenario(cluster_spec, config, parts)
        self.now_s = 0.0
        self.minute = 0
        self.pods_placed = 0
        self.unschedulable = 0
        self._evicted_now: list[str] = []
        self._last_pod_usage_m: dict[str, float] = {}
        self._last_pod_inflight: dict[str, float] = {}
        self._last_edge_rps: np.ndarray | None = None
        self._retry_q: np.ndarray | None = None
        self.last_node_bg_mem_mi = np.zeros(len(self.node_cores))
        self._started = False
        self._in_minute = False
        self._acc: dict[str, Any] = {}
        self.last: MinuteStats | None = None

    def _init_scenario(self, cluster_spec: ClusterSpec, config: SimConfig, parts: tuple) -> None:
        """The scenario features' state: node speeds, the bound topology network, rate drift, the parts of a
        composite application, the event schedule, node-utilisation accumulators."""
        N = len(self.node_cores)
        speeds = cluster_spec.node_speeds()
        self.node_speed = None if speeds is None else np.asarray(speeds, dtype=np.float64)
        if self.node_speed is not None and self.node_speed.shape != (N,):
            raise ValueError(f"cluster: {self.node_speed.shape} node speeds for {N} nodes")
        self.net = None
        if config.network_topology is not None:
            self.net = config.network_topology.bind(
                self.node_zones,
                [n.region for n in self.cluster.nodes],
                [n.labels.get(LABEL_RACK, "") for n in self.cluster.nodes],
                cluster_spec.node_nic_gbps(),
            )
        self.edge_scale = (
            None if config.edge_drift is None else config.edge_drift.multipliers(config.minutes, len(self.model.edges))
        )
        self.parts = parts
        self.entry_share = None
        self.entry_timeout_ms = None
        self.part_of_service = np.full(len(self.model.services), -1, dtype=np.int64)
        if parts:
            S = len(self.model.services)
            rates = self.app_rps if self.app_rps is not None else self.rps[:, None] * np.ones(len(parts)) / len(parts)
            share = np.zeros((len(rates), S))
            timeout = np.full(S, float(self.app.timeout_ms))
            for a, part in enumerate(parts):
                for svc in part.services:
                    if svc in self.model.pos:
                        self.part_of_service[self.model.pos[svc]] = a
                for svc, w in part.entry.items():
                    i = self.model.pos[svc]
                    share[:, i] += rates[:, a] * w
                    timeout[i] = part.timeout_ms
            self.entry_share = share
            self.entry_timeout_ms = timeout
        names = {n.name: i for i, n in enumerate(self.cluster.nodes)}
        for k, ev in enumerate(config.events):
            if ev.node not in names:
                raise ValueError(
                    f"events[{k}].node: no node named {ev.node!r} (nodes: {self.cluster.nodes[0].name}.."
                    f"{self.cluster.nodes[-1].name})"
                )
        self.events = tuple(config.events)
        self.failed_nodes: set[int] = set()
        self._drains: list[tuple[int, float]] = []  # (node, give up at s) of drains still evicting
        self._event_lost = 0.0
        self._event_lost_by_part: np.ndarray | None = None
        self._last_pod_rps: dict[str, float] = {}
        self._last_pod_part: dict[str, int] = {}
        self._node_util: list[np.ndarray] = []
        self.resizes = 0
        self.resizes_deferred = 0
        self.drain_evictions = 0

    # ---- hooks' API -----------------------------------------------------------------------------------

    def observed_graph(self) -> ServiceGraph:
        """The app's call graph with the call rates of the last simulated minute (what a service mesh's
        metrics would show); rates are None before the first minute."""
        if self._last_edge_rps is None:
            return self.app.graph
        rates = {
            (self.model.services[a], self.model.services[b]): float(r)
            for (a, b, _m, _p), r in zip(self.model.edges, self._last_edge_rps)
        }
        edges = [
            ServiceEdge(
                e.caller,
                e.callee,
                rps=rates.get((e.caller, e.callee), e.rps),
                calls_per_request=e.calls_per_request,
                parallel=e.parallel,
            )
            for e in self.app.graph.edges
        ]
        return self.app.graph.with_edges(edges)

    def observe(self) -> ClusterSnapshot:
        """The cluster as an observer would see it now: objects, measured CPU use of the last minute, and
        the observed call graph."""
        return self.cluster.snapshot(self.now_s, graph=self.observed_graph(), pod_cpu_usage_m=self._last_pod_usage_m)

    def scale(self, workload: str, replicas: int) -> None:
        """The scale subresource (``namespace/name``)."""
        self.cluster.set_replicas(workload, replicas, self.now_s)

    def only_serving(self, pod_key: str) -> bool:
        """Whether the live pod ``pod_key`` is the only Ready pod of its service now (False when it is gone)."""
        pod = next((p for p in self.cluster.pods if p.alive and p.info.key == pod_key), None)
        if pod is None:
            return False
        svc, ns, now = pod.info.service, pod.info.namespace, self.now_s
        return not any(
            p is not pod and p.alive and p.node >= 0 and p.ready_at_s <= now
            and p.info.service == svc and p.info.namespace == ns
            for p in self.cluster.pods
        )  # fmt: skip

    def note_eviction(self, pod_key: str, alone: bool = False) -> None:
        """Count an eviction of ``pod_key`` this minute (its requests in flight are lost when the minute is
        accounted); ``alone``: no other pod of its service was Ready, so with ``evictions_lose_capacity`` the requests
        it served fail until its replacement is Ready (``startup_delay_s``), capped at the minute's user rate."""
        self._evicted_now.append(pod_key)
        if alone and self.config.evictions_lose_capacity:
            rps = min(self._last_pod_rps.get(pod_key, 0.0), float(self.rps[min(self.minute, len(self.rps) - 1)]))
            self._lose(pod_key, rps * min(self.config.startup_delay_s, self.config.step_s))

    def is_background(self, pod: SimPod) -> bool:
        return pod.workload in self.background

    # ---- the loop -------------------------------------------------------------------------------------

    def schedule_pending(self) -> None:
        """Place every Pending pod, one scheduling cycle each, in queue order."""
        for pod in self.cluster.pending():
            self.schedule_one(pod)

    def schedule_one(self, pod: SimPod, node: str | None = None) -> str | None:
        """One scheduling cycle for ``pod`` (or bind it to ``node`` directly when given, as a placement
        policy outside kube-scheduler would). Returns the node name, or None when it stays Pending."""
        if node is None:
            snap = self.observe()
            if self.on_change is not None:
                self.on_change(snap)
            res = self.scheduler.schedule(pod.info, pod.obj, ClusterIndex.build(snap), self.node_objs, self.rng_sched)
            node = res.node
        if node is None:
            self.unschedulable += 1
            return None
        self.cluster.bind(pod, node, self.now_s)
        self.pods_placed += 1
        return node

    def _place_background(self) -> None:
        for pod in list(self.cluster.pending()):
            b = self.background.get(pod.workload)
            if b is not None:
                self.cluster.bind(pod, self.cluster.nodes[b.node].name, 0.0)
                pod.ready_at_s = 0.0

    def start(self, schedule: bool = True) -> None:
        """Create the pods of every workload and place them (background tenants first, on their nodes);
        ``schedule=False`` leaves the app's pods Pending (for a caller that places them itself)."""
        if self._started:
            return
        self._started = True
        self.cluster.reconcile(0.0)
        self._place_background()
        # the background tenants ran before the app arrived: metrics-server already reports their mean use
        self._last_pod_usage_m = {
            p.info.key: float(self.background[p.workload].cpu_use_m)
            for p in self.cluster.live_pods()
            if p.node >= 0 and p.workload in self.background
        }
        if schedule:
            for h in self.hooks:
                if h.at_start:
                    h.fn(self)
            self.schedule_pending()
        self._acc = {
            "lat": [],
            "w": [],
            "failed": 0.0,
            "offered": 0.0,
            "calls": 0.0,
            "cross": 0.0,
            "core_hours": 0.0,
            "slo_bad": 0,
            "evictions": 0,
            "oom": 0,
            "lost": 0.0,
            "series": {
                k: []
                for k in (
                    "rps",
                    "offered",
                    "served",
                    "failed",
                    "latency_mean_ms",
                    "latency_p50_ms",
                    "latency_p95_ms",
                    "failed_pct",
                    "cross_node_call_pct",
                    "cross_zone_call_pct",
                    "cpu_cores_requested",
                    "cpu_cores_used",
                    "pods",
                    "evictions",
                    "oom_kills",
                    "lost_inflight",
                )
            },
        }
        if self.config.per_service:
            self._acc["series"]["service_latency_ms"] = []
        self._acc["series"]["cluster_cpu_util_pct"] = []
        if self.net is not None and self.net.n_links:
            self._acc["series"]["link_util_max_pct"] = []
        self._acc["parts"] = [
            {"lat": [], "w": [], "offered": 0.0, "failed": 0.0, "slo_bad": 0} for _ in range(len(self.parts))
        ]

    def pod_arrays(self, ready: Sequence[SimPod]) -> PodArrays:
        """PodArrays of the app's pods among ``ready`` (background pods excluded)."""
        pos = self.model.pos
        app_pods = [p for p in ready if p.info.service in pos and not self.is_background(p)]
        return PodArrays(
            service=np.array([pos[p.info.service] for p in app_pods], dtype=np.int64),
            node=np.array([p.node for p in app_pods], dtype=np.int64),
            limit_cores=np.array(
                [p.info.limits.cpu_m / 1000.0 if p.info.limits.cpu_m else math.inf for p in app_pods], dtype=np.float64
            ),
            request_cores=np.array([p.info.requests.cpu_m / 1000.0 for p in app_pods], dtype=np.float64),
        )

    def advance(self) -> MinuteStats:
        """Simulate the next minute (the driver :attr:`before_minute`, hooks, scheduling, traffic, OOM kills,
        accounting)."""
        if self.before_minute is not None:
            self.before_minute(self)
        self.begin_minute()
        return self.finish_minute()

    def fork(self, *companions: Any) -> tuple[Any, ...]:
        """A copy of this simulation, between two minutes, whose continuation is bit-identical to this one's:
        the cluster, the traffic model's state and random generators, and everything the stack's scheduler,
        hooks, driver and ``on_change`` hold (closures included: :func:`policy.sim.fork.fork_copy`), copied in one
        memo with ``companions`` (objects of the run kept outside the simulation, e.g. the
        :class:`~policy.sim.stackbase.StackBuild` whose ``counters()`` read the stack's state). Returns
        ``(simulation, *companions)``, copies. Raises ``RuntimeError`` inside a minute (between
        :meth:`begin_minute` and :meth:`finish_minute`) and ``TypeError`` for a run holding what cannot be copied
        (a socket, a thread: e.g. a stack serving its extender over HTTP)."""
        if self._in_minute:
            raise RuntimeError("simulation: fork() between minutes only, not inside one")
        return fork_copy((self, *companions))

    def begin_minute(self) -> None:
        """First half of :meth:`advance`: the clock moves to the next minute and the due hooks act. A caller
        may act too (``evictor``, ``scale``, :meth:`schedule_one`) before :meth:`finish_minute`."""
        if not self._started:
            self.start()
        cfg = self.config
        if self.minute >= cfg.minutes:
            raise RuntimeError(f"simulation: all {cfg.minutes} minutes are done")
        self.now_s = self.minute * cfg.step_s
        self._evicted_now = []
        self._in_minute = True
        if self.events or self.failed_nodes:
            self._apply_events()
        if self.resizes_pending:
            self.cluster.retry_pending_resizes()
        for h in self.hooks:
            if self.minute > 0 and self.minute % h.period_min == 0:
                h.fn(self)

    # ---- scenario events and in-place resize ------------------------------------------------------------

    def _lose(self, pod_key: str, amount: float) -> None:
        """Count ``amount`` user requests lost on pod ``pod_key`` this minute (an event's losses)."""
        self._event_lost += amount
        if self.parts:
            if self._event_lost_by_part is None:
                self._event_lost_by_part = np.zeros(len(self.parts))
            a = self._last_pod_part.get(pod_key, -1)
            if a >= 0:
                self._event_lost_by_part[a] += amount

    def _apply_events(self) -> None:
        """The events of this minute (:mod:`policy.sim.events`), the taint manager's due deletions and the
        evictions of drains in progress."""
        m, now = self.minute, self.now_s
        self._event_lost = 0.0
        self._event_lost_by_part = np.zeros(len(self.parts)) if self.parts else None
        pos = {n.name: i for i, n in enumerate(self.cluster.nodes)}
        for ev in self.events:
            i = pos[ev.node]
            if isinstance(ev, NodeFailure):
                if m == ev.at_min:
                    self._fail_node(i, ev)
                if ev.recover_after_min is not None and m == ev.at_min + ev.recover_after_min:
                    self._recover_node(i)
            elif isinstance(ev, NodeDrain):
                if m == ev.at_min:
                    self.cluster.set_node(
                        i, unschedulable=True, add_taints=[{"key": TAINT_UNSCHEDULABLE, "effect": "NoSchedule"}]
                    )
                    self._drains.append((i, now + ev.timeout_min * 60.0))
                if ev.uncordon_after_min is not None and m == ev.at_min + ev.uncordon_after_min:
                    self.cluster.set_node(i, unschedulable=False, remove_taints=[TAINT_UNSCHEDULABLE])
            self.node_objs[ev.node] = self.cluster.node_objs[i]
        for p in list(self.cluster.pods):
            if p.alive and p.delete_at_s <= now:
                self.cluster.delete_pod(p, now)
        left = []
        for i, until in self._drains:
            for p in self.cluster.pods_on(i):
                res = self.cluster.evict(p.info.key, now)
                if res.outcome == "evicted":
                    self.drain_evictions += 1
                    if self.config.evictions_lose_inflight and not self.is_background(p):
                        self._lose(p.info.key, self._last_pod_inflight.get(p.info.key, 0.0))
            if self.cluster.pods_on(i) and now < until:
                left.append((i, until))
        self._drains = left

    def _fail_node(self, i: int, ev: NodeFailure) -> None:
        now = self.now_s
        self.failed_nodes.add(i)
        for p in self.cluster.pods_on(i):
            key = p.info.key
            if not self.is_background(p):
                lost = (
                    self._last_pod_inflight.get(key, 0.0) + self._last_pod_rps.get(key, 0.0) * ev.node_monitor_grace_s
                )
                self._lose(key, lost)
            p.ready_at_s = math.inf
            tol = noexecute_toleration_s(p.info, TAINT_UNREACHABLE)
            p.delete_at_s = math.inf if tol is None else now + ev.node_monitor_grace_s + tol
        self.cluster.set_node(
            i,
            ready=False,
            add_taints=[
                {"key": TAINT_UNREACHABLE, "effect": "NoSchedule"},
                # timeAdded: when the node lifecycle controller taints it (after the grace period); the taint
                # manager counts each pod's tolerationSeconds from there
                {"key": TAINT_UNREACHABLE, "effect": "NoExecute", "timeAdded": rfc3339(now + ev.node_monitor_grace_s)},
            ],
        )

    def _recover_node(self, i: int) -> None:
        self.failed_nodes.discard(i)
        self.cluster.set_node(i, ready=True, remove_taints=[TAINT_UNREACHABLE])
        for p in self.cluster.pods_on(i):  # not deleted yet: the containers start again
            p.delete_at_s = math.inf
            p.ready_at_s = self.now_s + self.config.startup_delay_s

    def resize(
        self,
        pod_key: str,
        cpu_request_m: int | None = None,
        cpu_limit_m: int | None = None,
        memory_request_bytes: int | None = None,
        memory_limit_bytes: int | None = None,
    ) -> ResizeResult:
        """In-place pod resize (``pods/resize`` subresource, KEP-1287, GA in Kubernetes 1.35): the pod's CPU
        request (its CFS weight) and limit (the cores its requests may use) and its memory take the new values
        from the next simulated traffic on, without a restart (the pod stays Ready, keeps its in-flight
        requests). None leaves a value unchanged; a limit of 0 removes it. Refused as a
        :class:`~policy.sim.cluster.ResizeResult` (``infeasible``, ``deferred``, ``invalid``, ``not_found``;
        see :meth:`SimCluster.resize`), never an exception; ``resized`` counts in ``extra["resizes"]``."""
        res = self.cluster.resize(
            pod_key,
            cpu_request_m,
            cpu_limit_m,
            memory_request_bytes,
            memory_limit_bytes,
            working_set_bytes=self._working_set_bytes(pod_key),
        )
        if res.outcome == "resized":
            self.resizes += 1
        return res

    @property
    def series(self) -> Mapping[str, Sequence[Any]]:
        """The per-minute series of the minutes simulated so far (the lists :meth:`result` returns; read only)."""
        return self._acc.get("series", {}) if self._acc else {}

    @property
    def pod_cpu_usage_m(self) -> Mapping[str, float]:
        """Measured CPU use of the last minute per pod key, millicores (what metrics-server reports; a pod bound
        since then has none)."""
        return self._last_pod_usage_m

    def _working_set_bytes(self, pod_key: str) -> float | None:
        if self.last is not None:
            for p, mem in zip(self.last.ready, self.last.step.pod_memory_mi):
                if p.info.key == pod_key:
                    return float(mem) * MIB
        return None

    def patch_resize(self, pod_key: str, patch: Mapping[str, Any]) -> ResizeResult:
        """``pods/{name}/resize`` with the live resizer's per-container patch (:meth:`SimCluster.patch_resize`: the
        API server's validation, the kubelet's admission; a deferred resize is actuated when it fits). Both
        ``resized`` and ``deferred`` were taken by the API server and count in ``extra["resizes"]``; ``deferred``
        ones in ``extra["resizes_deferred"]`` too."""
        res = self.cluster.patch_resize(pod_key, patch, working_set_bytes=self._working_set_bytes(pod_key))
        if res.outcome in ("resized", "deferred"):
            self.resizes += 1
        if res.outcome == "deferred":
            self.resizes_deferred += 1
        return res

    @property
    def resizes_pending(self) -> bool:
        """Whether a deferred resize waits for room on its node."""
        return self.resizes_deferred > 0 and any(p.pending_resize is not None for p in self.cluster.pods if p.alive)

    def finish_minute(self) -> MinuteStats:
        """Second half of :meth:`advance`: Pending pods are scheduled, the minute's traffic is served,
        OOM kills happen, and the minute is accounted."""
        if not getattr(self, "_in_minute", False):
            self.begin_minute()
        self._in_minute = False
        cfg = self.config
        minute = self.minute
        acc = self._acc
        lost = 0.0
        evictions = len(self._evicted_now)
        parts = self.parts
        lost_part = np.zeros(len(parts)) if parts else None
        if self._evicted_now and cfg.evictions_lose_inflight:
            # requests in flight on an evicted pod are lost (Little's law: rate x visit latency)
            lost += sum(self._last_pod_inflight.get(k, 0.0) for k in self._evicted_now)
            if lost_part is not None:
                for k in self._evicted_now:
                    a = self._last_pod_part.get(k, -1)
                    if a >= 0:
                        lost_part[a] += self._last_pod_inflight.get(k, 0.0)
        if self._event_lost:
            lost += self._event_lost
            if lost_part is not None and self._event_lost_by_part is not None:
                lost_part += self._event_lost_by_part
            self._event_lost = 0.0
            self._event_lost_by_part = None
        if self.cluster.pending():
            self.schedule_pending()
        mid = self.now_s + cfg.step_s / 2
        ready_all = self.cluster.ready_mask(mid)
        app_ready = [p for p in ready_all if p.info.service in self.model.pos and not self.is_background(p)]
        pa = self.pod_arrays(app_ready)
        bg_use, bg_req, bg_mem, bg_pods = self._background_now(ready_all)
        self.last_node_bg_mem_mi = bg_mem
        lam = float(self.rps[minute])
        st = self.model.step(
            lam,
            pa,
            self.node_cores,
            self.node_zones,
            self.rng_model,
            cfg.n_samples,
            self.app.timeout_ms,
            node_bg_cores=bg_use,
            node_bg_request_cores=bg_req,
            retry_fail_prob=self._retry_q,
            retry_iterations=cfg.retry_iterations,
            sample_budget=cfg.sample_budget,
            per_service=cfg.per_service,
            net=self.net,
            node_speed=self.node_speed,
            interference=cfg.interference,
            entry=None
            if self.entry_share is None or not self.entry_share[minute].sum() > 0
            else self.entry_share[minute],
            entry_timeout_ms=self.entry_timeout_ms,
            edge_scale=None if self.edge_scale is None else self.edge_scale[minute],
        )
        self._retry_q = st.edge_attempt_fail
        # ---- OOM kills ----------------------------------------------------------------------------------
        killed = self._oom(app_ready, st, bg_mem, mid)
        lost += sum(float(st.pod_inflight[i]) for i in killed)
        if lost_part is not None:
            for i in killed:
                a = self.part_of_service[self.model.pos[app_ready[i].info.service]]
                if a >= 0:
                    lost_part[a] += float(st.pod_inflight[i])
        # ---- accounting: offered = served + failed ---------------------------------------------------
        offered = lam * cfg.step_s
        lat = st.latency_ms
        if parts:
            failed, w, bad = self._account_parts(minute, st, lost_part)
        else:
            failed = min(offered, offered * st.fail_frac + lost)
            w = np.full(len(lat), (offered - failed) / len(lat)) if len(lat) and offered - failed > 0 else np.zeros(0)
            bad = None
        served = offered - failed
        acc["offered"] += offered
        acc["failed"] += failed
        acc["calls"] += st.calls_rps * cfg.step_s
        acc["cross"] += st.cross_calls_rps * cfg.step_s
        acc["evictions"] += evictions
        acc["oom"] += len(killed)
        acc["lost"] += lost
        if len(lat) and served > 0:
            acc["lat"].append(lat)
            acc["w"].append(w)
            p95 = float(np.percentile(lat, 95))
        else:
            w = np.zeros(0)
            p95 = math.inf if offered > 0 else 0.0
        if bad is None:
            if p95 > self.app.slo_p95_ms:
                acc["slo_bad"] += 1
        else:
            acc["slo_bad"] += bad
        alive = [p for p in self.cluster.live_pods() if p.node >= 0 and not self.is_background(p)]
        req_cores = sum(p.info.requests.cpu_m for p in alive) / 1000.0
        acc["core_hours"] += req_cores * cfg.step_s / 3600.0
        # what metrics-server reports: every container of the pod, the mesh proxy included
        pod_use = st.pod_cpu_cores if st.pod_sidecar_cores is None else st.pod_cpu_cores + st.pod_sidecar_cores
        usage = {p.info.key: float(u) * 1000.0 for p, u in zip(app_ready, pod_use)}
        for p, u in bg_pods:
            usage[p.info.key] = u * 1000.0
        self._last_pod_usage_m = usage
        self._last_pod_inflight = {p.info.key: float(x) for p, x in zip(app_ready, st.pod_inflight)}
        self._last_pod_rps = {p.info.key: float(x) for p, x in zip(app_ready, st.pod_rps)}
        if parts:
            self._last_pod_part = {
                p.info.key: int(self.part_of_service[self.model.pos[p.info.service]]) for p in app_ready
            }
        self._last_edge_rps = st.edge_rps
        s = acc["series"]
        s["rps"].append(lam)
        s["offered"].append(offered)
        s["served"].append(served)
        s["failed"].append(failed)
        s["latency_mean_ms"].append(float(lat.mean()) if len(lat) else (math.inf if offered > 0 else 0.0))
        s["latency_p50_ms"].append(float(np.percentile(lat, 50)) if len(lat) else (math.inf if offered > 0 else 0.0))
        s["latency_p95_ms"].append(p95)
        s["failed_pct"].append(100.0 * failed / offered if offered > 0 else 0.0)
        s["cross_node_call_pct"].append(100.0 * st.cross_calls_rps / st.calls_rps if st.calls_rps else 0.0)
        s["cross_zone_call_pct"].append(100.0 * st.cross_zone_calls_rps / st.calls_rps if st.calls_rps else 0.0)
        s["cpu_cores_requested"].append(req_cores)
        s["cpu_cores_used"].append(float(np.sum(st.pod_cpu_cores)))
        s["pods"].append(float(len(app_ready)))
        s["evictions"].append(float(evictions))
        s["oom_kills"].append(float(len(killed)))
        s["lost_inflight"].append(float(lost))
        if cfg.per_service and st.service_latency_ms is not None:
            s["service_latency_ms"].append(st.service_latency_ms)
        self._record_node_util(pa, st, bg_use)
        self.last = MinuteStats(
            minute, lam, offered, served, failed, lat, w, p95, evictions, len(killed), lost, st, tuple(app_ready)
        )
        self.minute += 1
        return self.last

    def _record_node_util(self, pa: PodArrays, st: StepStats, bg_use: np.ndarray | None) -> None:
        """Per-node CPU utilisation of this minute (app pods, background tenants, mesh proxies over the
        node's cores; failed nodes left out) and the cluster's, for the utilisation distribution."""
        N = len(self.node_cores)
        used = np.bincount(pa.node, weights=st.pod_cpu_cores, minlength=N)
        if bg_use is not None:
            used = used + bg_use
        if st.node_sidecar_cores is not None:
            used = used + st.node_sidecar_cores
        up = np.ones(N, dtype=bool)
        if self.failed_nodes:
            up[list(self.failed_nodes)] = False
        util = used[up] / self.node_cores[up]
        self._node_util.append(util)
        s = self._acc["series"]
        s["cluster_cpu_util_pct"].append(100.0 * float(used[up].sum() / self.node_cores[up].sum()) if up.any() else 0.0)
        if st.link_util is not None:
            s["link_util_max_pct"].append(100.0 * float(st.link_util.max(initial=0.0)))

    def part_rates(self, minute: int) -> np.ndarray:
        """(A,) user arrival rate (requests/s) of each app of a composite application at ``minute`` (the total split
        evenly when the trace has one column)."""
        A = len(self.parts)
        return self.app_rps[minute] if self.app_rps is not None else np.full(A, self.rps[minute] / A)

    def _account_parts(self, minute: int, st: StepStats, lost_part: np.ndarray) -> tuple[float, np.ndarray, int]:
        """Failed user requests, latency-sample weights and SLO-violating apps of this minute for a composite
        application: each app's failed share from its own sampled requests (+ its lost requests), its
        latencies weighted by its served requests, its p95 against its own SLO."""
        cfg = self.config
        offered_a = self.part_rates(minute) * cfg.step_s
        failed_a, w, oks = part_outcomes(st, self.part_of_service, offered_a, lost_part)
        failed_total = 0.0
        bad = 0
        pa_acc = self._acc["parts"]
        for a, p in enumerate(self.parts):
            failed = float(failed_a[a])
            served = offered_a[a] - failed
            ok = oks[a]
            n_ok = int(ok.sum())
            if n_ok and served > 0:
                lat_a = st.latency_ms[ok]
                p95 = float(np.percentile(lat_a, 95))
                pa_acc[a]["lat"].append(lat_a)
                pa_acc[a]["w"].append(w[ok])
            else:
                p95 = math.inf if offered_a[a] > 0 else 0.0
            if p95 > p.slo_p95_ms:
                bad += 1
                pa_acc[a]["slo_bad"] += 1
            pa_acc[a]["offered"] += offered_a[a]
            pa_acc[a]["failed"] += failed
            failed_total += failed
        return failed_total, w, bad

    def _background_now(self, ready_all: Sequence[SimPod]):
        """Per node: background CPU use (cores, this minute's jitter), requests (cores), memory (MiB);
        and (pod, cores) pairs for the usage metrics."""
        N = len(self.node_cores)
        use = np.zeros(N)
        req = np.zeros(N)
        mem = np.zeros(N)
        pods = []
        if not self.background:
            return None, None, mem, pods
        for p in ready_all:
            b = self.background.get(p.workload)
            if b is None:
                continue
            u = b.cpu_use_m / 1000.0
            if b.cpu_use_cv > 0:
                s2 = math.log1p(b.cpu_use_cv**2)
                u *= float(self.rng_bg.lognormal(-s2 / 2, math.sqrt(s2)))
            if b.cpu_limit_m:
                u = min(u, b.cpu_limit_m / 1000.0)
            use[p.node] += u
            req[p.node] += b.cpu_request_m / 1000.0
            mem[p.node] += b.memory_use_bytes / MIB
            pods.append((p, u))
        return use, req, mem, pods

    def _oom(self, app_ready: Sequence[SimPod], st: StepStats, bg_mem_mi: np.ndarray, at_s: float) -> list[int]:
        """OOM kills of this minute: a container over its memory limit; then, per node, while the working
        sets exceed the node's memory, the pod furthest above its memory request (the kernel OOM killer's
        choice under Kubernetes' oom_score_adj). Returns the indices (into ``app_ready``) killed."""
        killed: list[int] = []
        if not len(app_ready):
            return killed
        mem = np.asarray(st.pod_memory_mi, dtype=np.float64)
        for i, p in enumerate(app_ready):
            lim = p.info.limits.memory_bytes
            if lim and mem[i] * MIB > lim:
                killed.append(i)
        alive = np.ones(len(app_ready), dtype=bool)
        alive[killed] = False
        nodes = np.array([p.node for p in app_ready])
        used = np.bincount(nodes[alive], weights=mem[alive], minlength=len(self.node_cores)) + bg_mem_mi
        for n in np.flatnonzero(used > self.node_mem_mi):
            cand = list(np.flatnonzero((nodes == n) & alive))
            cand.sort(key=lambda i: -(mem[i] - app_ready[i].info.requests.memory_bytes / MIB))
            for i in cand:
                if used[n] <= self.node_mem_mi[n]:
                    break
                killed.append(int(i))
                alive[i] = False
                used[n] -= mem[i]
        for i in killed:
            self.cluster.oom_kill(
                app_ready[i],
                at_s,
                self.config.restart_delay_s,
                self.config.restart_delay_max_s,
                self.config.restart_ready_s,
            )
        return killed

    def result(self) -> SimResult:
        """The run's metrics and series so far (after :meth:`advance` ran every minute, the whole run's)."""
        acc = self._acc
        cfg = self.config
        lat = np.concatenate(acc["lat"]) if acc.get("lat") else np.zeros(0)
        w = np.concatenate(acc["w"]) if acc.get("w") else np.zeros(0)
        done = max(self.minute, 1)
        offered = acc.get("offered", 0.0)
        metrics = {
            "latency_mean_ms": float(np.average(lat, weights=w)) if len(lat) and w.sum() > 0 else 0.0,
            "latency_p95_ms": weighted_percentile(lat, w, 95),
            "latency_p99_ms": weighted_percentile(lat, w, 99),
            "failed_pct": 100.0 * acc.get("failed", 0.0) / offered if offered > 0 else 0.0,
            "slo_violation_pct": 100.0 * acc.get("slo_bad", 0) / (done * max(len(self.parts), 1)),
            "cpu_core_hours": acc.get("core_hours", 0.0),
            "evictions": float(acc.get("evictions", 0)),
            "cross_node_call_pct": 100.0 * acc["cross"] / acc["calls"] if acc.get("calls", 0) > 0 else 0.0,
        }
        extra = {
            "offered_requests": offered,
            "failed_requests": acc.get("failed", 0.0),
            "served_requests": offered - acc.get("failed", 0.0),
            "oom_kills": acc.get("oom", 0),
            "lost_inflight_requests": acc.get("lost", 0.0),
            "evictions": acc.get("evictions", 0),
            "minutes": self.minute,
            "step_s": cfg.step_s,
            "drain_evictions": self.drain_evictions,
            "resizes": self.resizes,
            "resizes_deferred": self.resizes_deferred,
            "failed_nodes": sorted(self.cluster.nodes[i].name for i in self.failed_nodes),
        }
        extra.update(self.node_util_stats())
        if self.parts:
            extra["apps"] = {p.name: _part_metrics(a_acc, done) for p, a_acc in zip(self.parts, acc.get("parts") or [])}
        return SimResult(metrics, dict(acc.get("series", {})), lat, w, self.pods_placed, self.unschedulable, extra)

    def series_so_far(self) -> Mapping[str, Sequence[float]]:
        """The per-minute series recorded so far (the ``series`` :meth:`result` reports), without building the
        result: read it, do not change it. Empty before :meth:`start`."""
        return self._acc.get("series", {}) if self._started else {}

    def node_util_stats(self) -> dict[str, float]:
        """``node_cpu_util_p10_pct`` / ``p50`` / ``p90`` / ``mean``: the distribution of node CPU utilisation
        (app pods + background tenants + mesh proxies over the node's cores, %) over every (up node, minute)
        so far; ``cluster_cpu_util_mean_pct``: the mean of the per-minute cluster utilisation."""
        u = np.concatenate(self._node_util) if self._node_util else np.zeros(0)
        if not len(u):
            return dict.fromkeys(NODE_UTIL_KEYS, 0.0)
        p10, p50, p90 = np.percentile(100.0 * u, [10, 50, 90])
        series = self._acc.get("series", {}).get("cluster_cpu_util_pct") or [0.0]
        return {
            "node_cpu_util_p10_pct": float(p10),
            "node_cpu_util_p50_pct": float(p50),
            "node_cpu_util_p90_pct": float(p90),
            "node_cpu_util_mean_pct": float(100.0 * u.mean()),
            "cluster_cpu_util_mean_pct": float(np.mean(series)),
        }

    def run(self, progress: Callable[[int], None] | None = None) -> SimResult:
        """Run every minute of the trace; ``progress(minute)`` after each (and a bar or progress records where a
        command turned :func:`policy.telemetry.showing_progress` on)."""
        if self.before_minute is None:  # with a driver, advance() starts the run after the driver's first call
            self.start()
        for m in report_progress(range(self.minute, self.config.minutes), "simulate", self.config.minutes - self.minute,
                                 "minute"):  # fmt: skip
            self.advance()  # one minute: self.minute == m + 1 after it
            if progress is not None:
                progress(m)
        return self.result()


def _part_metrics(a: Mapping[str, Any], minutes: int) -> dict[str, float]:
    lat = np.concatenate(a["lat"]) if a["lat"] else np.zeros(0)
    w = np.concatenate(a["w"]) if a["w"] else np.zeros(0)
    return {
        "latency_mean_ms": float(np.average(lat, weights=w)) if len(lat) and w.sum() > 0 else 0.0,
        "latency_p95_ms": weighted_percentile(lat, w, 95),
        "latency_p99_ms": weighted_percentile(lat, w, 99),
        "failed_pct": 100.0 * a["failed"] / a["offered"] if a["offered"] > 0 else 0.0,
        "slo_violation_pct": 100.0 * a["slo_bad"] / max(minutes, 1),
        "offered_requests": float(a["offered"]),
    }


def part_outcomes(
    st: StepStats, part_of_service: np.ndarray, offered_a: np.ndarray, lost_part: np.ndarray
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """One minute's outcome per app of a composite application from its sampled user requests: ``(failed_a,
    weights, ok_masks)``. ``part_of_service`` (S,) the app of each service (-1: none); ``offered_a`` / ``lost_part``
    (A,) each app's offered and lost requests this minute. ``failed_a`` (A,): each app's failed requests (its
    sampled requests' failed share of its offered ones, or the step's when none was sampled, plus its lost ones,
    at most what it offered); ``weights`` (k,) of ``st.latency_ms``: each app's served requests over its successful
    samples; ``ok_masks``: per app, which of ``st.latency_ms`` are its."""
    ue = st.user_entry if st.user_entry is not None else np.zeros(0, dtype=np.int64)
    uf = st.user_failed if st.user_failed is not None else np.zeros(0, dtype=bool)
    part = part_of_service[ue] if len(ue) else np.zeros(0, dtype=np.int64)
    part_ok = part[~uf]
    w = np.zeros(len(st.latency_ms))
    failed_a = np.zeros(len(offered_a))
    oks = []
    for a in range(len(offered_a)):
        mask = part == a
        frac = float(uf[mask].mean()) if mask.any() else (st.fail_frac if offered_a[a] > 0 else 0.0)
        failed_a[a] = min(offered_a[a], offered_a[a] * frac + lost_part[a])
        ok = part_ok == a
        n_ok = int(ok.sum())
        if n_ok and offered_a[a] - failed_a[a] > 0:
            w[ok] = (offered_a[a] - failed_a[a]) / n_ok
        oks.append(ok)
    return failed_a, w, oks


def weighted_percentile(x: np.ndarray, w: np.ndarray, q: float) -> float:
    """The ``q``-th percentile (0..100) of samples ``x`` with weights ``w`` (inverse of the weighted CDF);
    0.0 for no samples."""
    if len(x) == 0 or float(np.sum(w)) <= 0:
        return 0.0
    order = np.argsort(x, kind="stable")
    xs, ws = x[order], w[order]
    cdf = np.cumsum(ws)
    cdf /= cdf[-1]
    i = int(np.searchsorted(cdf, q / 100.0, side="left"))
    return float(xs[min(i, len(xs) - 1)])


def rps_for_app(counts_per_min: np.ndarray, model: PerfModel, app: AppSpec, peak_utilization: float) -> np.ndarray:
    """Scale a per-minute trace so its peak is ``peak_utilization`` × the app's capacity at its manifest
    replicas and CPU limits (the busiest service at its limit)."""
    replicas = {w.service: w.replicas for w in app.workloads}
    limits = {w.service: (w.pod_limits.cpu_m or w.pod_requests.cpu_m) / 1000.0 for w in app.workloads}
    cap = model.capacity_rps(replicas, limits)
    return scale_to_peak(counts_per_min, peak_utilization * cap)


def metrics_table_row(name: str, m: Mapping[str, float]) -> list[Any]:
    return [
        name,
        m["latency_mean_ms"],
        m["latency_p95_ms"],
        m["latency_p99_ms"],
        m["failed_pct"],
        m["cross_node_call_pct"],
        m["cpu_core_hours"],
        int(m["evictions"]),
    ]
