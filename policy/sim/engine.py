"""The simulation loop: a cluster, an application under a request-rate trace, kube-scheduler (with or
without extenders) placing every pod, and controllers (descheduler, autoscalers) run every few minutes.

Each simulated minute: the due hooks act (evictions lose the requests in flight on the evicted pods); the
scheduler places every Pending pod; the performance model (:mod:`policy.sim.model`) serves the minute's
traffic on the pods Ready at mid-minute; pods whose working set exceeds their memory limit (or whose node
runs out of memory) are OOM-killed and restarted by the kubelet after its back-off; then the minute's
accounting: ``offered = served + failed`` user requests, exactly, per minute and over the run.

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
from policy.state import ClusterSnapshot, EvictionResult, PodInfo, ServiceEdge, ServiceGraph

from .app import AppSpec
from .cluster import SimCluster, SimPod
from .kube_scheduler import KubeSchedulerModel
from .model import NetworkModel, PerfModel, PodArrays, StepStats
from .objects import node_object

__all__ = [
    "METRIC_KEYS",
    "BACKGROUND_NAMESPACE",
    "ANNOTATION_BACKGROUND",
    "MIB",
    "BackgroundPod",
    "background_tenants",
    "ClusterSpec",
    "SimConfig",
    "SimResult",
    "SimEvictor",
    "PeriodicHook",
    "MinuteStats",
    "Simulation",
    "weighted_percentile",
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
    - ``evictions_lose_inflight``: requests in flight on an evicted pod fail (no graceful drain);
    - ``network``: per-call network costs; ``retry_iterations``: passes per step to settle retry load;
    - ``per_service``: also record per-service latency percentiles each step (``series``).
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
    retry_iterations: int = 2
    sample_budget: int = 1_000_000
    per_service: bool = False


@dataclass
class SimResult:
    """Run-level metrics (keys :data:`METRIC_KEYS`) and per-minute series (for plots).

    ``series`` keys (one value per minute): ``rps``, ``offered``, ``served``, ``failed`` (user requests),
    ``latency_mean_ms``, ``latency_p50_ms``, ``latency_p95_ms``, ``failed_pct``, ``cross_node_call_pct``,
    ``cross_zone_call_pct``, ``cpu_cores_requested``, ``cpu_cores_used``, ``pods``, ``evictions``,
    ``oom_kills``, ``lost_inflight``. ``extra``: totals ``offered_requests``, ``served_requests``,
    ``failed_requests``, ``oom_kills``, ``lost_inflight_requests``, ``evictions``.
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
        res = self.sim.cluster.evict(pod.key, self.sim.now_s)
        self.results.append(res)
        if res.outcome == "evicted":
            self.sim.note_eviction(pod.key)
        return res


@dataclass(frozen=True)
class PeriodicHook:
    """A controller run inside the simulation every ``period_min`` simulated minutes (from minute
    ``period_min`` on), before that minute's traffic: a descheduler, an autoscaler (HPA syncs every
    15 s in Kubernetes; here at most once per step). ``fn(sim)`` observes ``sim.observe()`` and acts
    through ``sim.evictor`` (Eviction API) and ``sim.scale`` (scale subresource)."""

    name: str
    period_min: int
    fn: Callable[[Simulation], Any]


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
        self.rps = np.asarray(rps, dtype=np.float64)
        if not np.all(np.isfinite(self.rps)) or np.any(self.rps < 0):
            raise ValueError("trace: rates must be finite and >= 0")
        self.spec = cluster_spec
        self.scheduler = scheduler
        self.config = config
        for h in hooks:
            if h.period_min < 1:
                raise ValueError(f"hook {h.name}: period_min must be >= 1, got {h.period_min}")
        self.hooks = tuple(hooks)
        self.on_change = on_change
        ss = np.random.SeedSequence(config.seed)
        r_cluster, r_sched, r_model, r_bg = (np.random.default_rng(s) for s in ss.spawn(4))
        self.rng_sched = r_sched
        self.rng_model = r_model
        self.rng_bg = r_bg
        self.model = PerfModel(app, config.network)
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

    def note_eviction(self, pod_key: str) -> None:
        self._evicted_now.append(pod_key)

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
        if schedule:
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
        """Simulate the next minute (hooks, scheduling, traffic, OOM kills, accounting)."""
        self.begin_minute()
        return self.finish_minute()

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
        for h in self.hooks:
            if self.minute > 0 and self.minute % h.period_min == 0:
                h.fn(self)

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
        if self._evicted_now and cfg.evictions_lose_inflight:
            # requests in flight on an evicted pod are lost (Little's law: rate x visit latency)
            lost += sum(self._last_pod_inflight.get(k, 0.0) for k in self._evicted_now)
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
        )
        self._retry_q = st.edge_attempt_fail
        # ---- OOM kills ----------------------------------------------------------------------------------
        killed = self._oom(app_ready, st, bg_mem, mid)
        lost += sum(float(st.pod_inflight[i]) for i in killed)
        # ---- accounting: offered = served + failed ---------------------------------------------------
        offered = lam * cfg.step_s
        failed = min(offered, offered * st.fail_frac + lost)
        served = offered - failed
        acc["offered"] += offered
        acc["failed"] += failed
        acc["calls"] += st.calls_rps * cfg.step_s
        acc["cross"] += st.cross_calls_rps * cfg.step_s
        acc["evictions"] += evictions
        acc["oom"] += len(killed)
        acc["lost"] += lost
        lat = st.latency_ms
        if len(lat) and served > 0:
            w = np.full(len(lat), served / len(lat))
            acc["lat"].append(lat)
            acc["w"].append(w)
            p95 = float(np.percentile(lat, 95))
        else:
            w = np.zeros(0)
            p95 = math.inf if offered > 0 else 0.0
        if p95 > self.app.slo_p95_ms:
            acc["slo_bad"] += 1
        alive = [p for p in self.cluster.live_pods() if p.node >= 0 and not self.is_background(p)]
        req_cores = sum(p.info.requests.cpu_m for p in alive) / 1000.0
        acc["core_hours"] += req_cores * cfg.step_s / 3600.0
        usage = {p.info.key: float(u) * 1000.0 for p, u in zip(app_ready, st.pod_cpu_cores)}
        for p, u in bg_pods:
            usage[p.info.key] = u * 1000.0
        self._last_pod_usage_m = usage
        self._last_pod_inflight = {p.info.key: float(x) for p, x in zip(app_ready, st.pod_inflight)}
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
        self.last = MinuteStats(
            minute, lam, offered, served, failed, lat, w, p95, evictions, len(killed), lost, st, tuple(app_ready)
        )
        self.minute += 1
        return self.last

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
            "slo_violation_pct": 100.0 * acc.get("slo_bad", 0) / done,
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
        }
        return SimResult(metrics, dict(acc.get("series", {})), lat, w, self.pods_placed, self.unschedulable, extra)

    def run(self, progress: Callable[[int], None] | None = None) -> SimResult:
        """Run every minute of the trace; ``progress(minute)`` after each."""
        self.start()
        while self.minute < self.config.minutes:
            m = self.minute
            self.advance()
            if progress is not None:
                progress(m)
        return self.result()


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
    from .traces import scale_to_peak

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
