"""The simulation loop: a cluster, an application under a request-rate trace, kube-scheduler (with or
without extenders) placing every pod, and optionally a descheduler hook run every few minutes.

Everything is deterministic for a given seed: the cluster (pod names), the scheduler's tie-breaks and the
request sampling draw from separate streams spawned from it, so two stacks run with the same seed see
the same trace and the same random requests.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..index import ClusterIndex
from ..state import ClusterSnapshot, EvictionResult, PodInfo, ServiceEdge, ServiceGraph
from .app import AppSpec
from .cluster import SimCluster
from .kube_scheduler import KubeSchedulerModel
from .model import NetworkModel, PerfModel, PodArrays
from .objects import node_object

#: Metric keys every simulation reports (DESIGN.md section 4), all means over the run.
METRIC_KEYS = ("latency_mean_ms", "latency_p95_ms", "latency_p99_ms", "failed_pct", "slo_violation_pct",
               "cpu_core_hours", "evictions", "cross_node_call_pct")


@dataclass(frozen=True)
class ClusterSpec:
    """A homogeneous simulated cluster: ``nodes`` nodes of ``cpu_m`` millicores and ``memory_bytes``,
    spread round-robin over ``zones`` (empty = one unnamed zone)."""

    nodes: int = 8
    cpu_m: int = 2000
    memory_bytes: int = 8 * 1024**3
    zones: tuple[str, ...] = ()
    max_pods: int = 110

    def node_objects(self) -> list[dict[str, Any]]:
        out = []
        for i in range(self.nodes):
            zone = self.zones[i % len(self.zones)] if self.zones else ""
            out.append(node_object(f"node-{i:03d}", self.cpu_m, self.memory_bytes, self.max_pods, zone=zone))
        return out


@dataclass(frozen=True)
class SimConfig:
    """``minutes`` simulated (1-minute steps); ``n_samples`` user requests drawn per minute;
    hooks run at their own periods (:class:`PeriodicHook`)."""

    minutes: int = 30
    seed: int = 0
    n_samples: int = 2000
    startup_delay_s: float = 20.0
    network: NetworkModel = NetworkModel()
    step_s: float = 60.0


@dataclass
class SimResult:
    """Run-level metrics (keys :data:`METRIC_KEYS`) and per-minute series (for plots)."""

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
    fn: Callable[["Simulation"], Any]


class Simulation:
    """One run. ``on_change(snapshot)`` is called before every scheduling cycle with the current state
    (what a watch-fed extender store would hold)."""

    def __init__(self, app: AppSpec, rps: np.ndarray, cluster_spec: ClusterSpec, scheduler: KubeSchedulerModel,
                 config: SimConfig, hooks: Sequence[PeriodicHook] = (),
                 on_change: Callable[[ClusterSnapshot], None] | None = None,
                 scheduler_name: str = "default-scheduler"):
        if len(rps) < config.minutes:
            raise ValueError(f"trace: {len(rps)} minutes of rates for a {config.minutes}-minute simulation")
        self.app = app
        self.rps = np.asarray(rps, dtype=np.float64)
        self.spec = cluster_spec
        self.scheduler = scheduler
        self.config = config
        for h in hooks:
            if h.period_min < 1:
                raise ValueError(f"hook {h.name}: period_min must be >= 1, got {h.period_min}")
        self.hooks = tuple(hooks)
        self.on_change = on_change
        ss = np.random.SeedSequence(config.seed)
        r_cluster, r_sched, r_model = (np.random.default_rng(s) for s in ss.spawn(3))
        self.rng_sched = r_sched
        self.rng_model = r_model
        self.model = PerfModel(app, config.network)
        self.cluster = SimCluster.build(cluster_spec.node_objects(), app.deployments, seed=0,
                                        startup_delay_s=config.startup_delay_s, scheduler_name=scheduler_name)
        self.cluster.rng = r_cluster
        self.node_objs = {o["metadata"]["name"]: o for o in self.cluster.node_objs}
        self.node_cores = np.array([n.allocatable.cpu_m / 1000.0 for n in self.cluster.nodes])
        self.node_zones = [n.zone for n in self.cluster.nodes]
        self.evictor = SimEvictor(self)
        self.now_s = 0.0
        self.pods_placed = 0
        self.unschedulable = 0
        self._evicted_now: list[str] = []
        self._last_pod_usage_m: dict[str, float] = {}
        self._last_pod_inflight: dict[str, float] = {}
        self._last_edge_rps: np.ndarray | None = None

    # ---- hooks' API -----------------------------------------------------------------------------------

    def observed_graph(self) -> ServiceGraph:
        """The app's call graph with the call rates of the last simulated minute (what a service mesh's
        metrics would show); rates are None before the first minute."""
        if self._last_edge_rps is None:
            return self.app.graph
        rates = {(self.model.services[a], self.model.services[b]): float(r)
                 for (a, b, _m, _p), r in zip(self.model.edges, self._last_edge_rps)}
        edges = [ServiceEdge(e.caller, e.callee, rps=rates.get((e.caller, e.callee), e.rps),
                             calls_per_request=e.calls_per_request, parallel=e.parallel)
                 for e in self.app.graph.edges]
        return self.app.graph.with_edges(edges)

    def observe(self) -> ClusterSnapshot:
        """The cluster as an observer would see it now: objects, measured CPU use of the last minute, and
        the observed call graph."""
        return self.cluster.snapshot(self.now_s, graph=self.observed_graph(),
                                     pod_cpu_usage_m=self._last_pod_usage_m)

    def scale(self, workload: str, replicas: int) -> None:
        """The scale subresource (``namespace/name``)."""
        self.cluster.set_replicas(workload, replicas, self.now_s)

    def note_eviction(self, pod_key: str) -> None:
        self._evicted_now.append(pod_key)

    # ---- the loop -------------------------------------------------------------------------------------

    def schedule_pending(self) -> None:
        """Place every Pending pod, one scheduling cycle each, in queue order."""
        for pod in self.cluster.pending():
            snap = self.observe()
            if self.on_change is not None:
                self.on_change(snap)
            res = self.scheduler.schedule(pod.info, pod.obj, ClusterIndex.build(snap), self.node_objs, self.rng_sched)
            if res.node is None:
                self.unschedulable += 1
                continue
            self.cluster.bind(pod, res.node, self.now_s)
            self.pods_placed += 1

    def run(self, progress: Callable[[int], None] | None = None) -> SimResult:
        cfg = self.config
        self.cluster.reconcile(0.0)
        self.schedule_pending()
        lat_all: list[np.ndarray] = []
        w_all: list[np.ndarray] = []
        series: dict[str, list[float]] = {k: [] for k in (
            "rps", "latency_p95_ms", "failed_pct", "cross_node_call_pct", "cpu_cores_requested", "pods")}
        failed_req = 0.0
        total_req = 0.0
        calls = 0.0
        cross = 0.0
        core_hours = 0.0
        slo_bad = 0
        evictions = 0
        for minute in range(cfg.minutes):
            self.now_s = minute * cfg.step_s
            due = [h for h in self.hooks if minute > 0 and minute % h.period_min == 0]
            self._evicted_now = []
            for h in due:
                h.fn(self)
            if self._evicted_now:
                # requests in flight on an evicted pod are lost (Little's law: rate x sojourn)
                lost = sum(self._last_pod_inflight.get(k, 0.0) for k in self._evicted_now)
                failed_req += lost
                total_req += lost
                evictions += len(self._evicted_now)
            if self.cluster.pending():
                self.schedule_pending()
            mid = self.now_s + cfg.step_s / 2
            ready = self.cluster.ready_mask(mid)
            svc_pos = self.model.pos
            pa = PodArrays(
                service=np.array([svc_pos[p.info.service] for p in ready], dtype=np.int64),
                node=np.array([p.node for p in ready], dtype=np.int64),
                limit_cores=np.array([p.info.limits.cpu_m / 1000.0 if p.info.limits.cpu_m else math.inf
                                      for p in ready]),
                request_cores=np.array([p.info.requests.cpu_m / 1000.0 for p in ready]),
            )
            lam = float(self.rps[minute])
            st = self.model.step(lam, pa, self.node_cores, self.node_zones, self.rng_model, cfg.n_samples,
                                 self.app.timeout_ms)
            n_req = lam * cfg.step_s
            total_req += n_req
            failed_req += n_req * st.fail_frac
            calls += st.calls_rps * cfg.step_s
            cross += st.cross_calls_rps * cfg.step_s
            if len(st.latency_ms):
                lat_all.append(st.latency_ms)
                w_all.append(np.full(len(st.latency_ms), n_req * (1 - st.fail_frac) / len(st.latency_ms)))
                p95 = float(np.percentile(st.latency_ms, 95))
            else:
                p95 = math.inf if n_req > 0 else 0.0
            if p95 > self.app.slo_p95_ms:
                slo_bad += 1
            alive = [p for p in self.cluster.live_pods() if p.node >= 0]
            req_cores = sum(p.info.requests.cpu_m for p in alive) / 1000.0
            core_hours += req_cores * cfg.step_s / 3600.0
            self._last_pod_usage_m = {p.info.key: float(u) * 1000.0 for p, u in zip(ready, st.pod_cpu_cores)}
            self._last_pod_inflight = {p.info.key: float(r * s / 1000.0)
                                       for p, r, s in zip(ready, st.pod_rps, st.pod_sojourn_ms)}
            self._last_edge_rps = st.edge_rps
            series["rps"].append(lam)
            series["latency_p95_ms"].append(p95)
            series["failed_pct"].append(100.0 * st.fail_frac)
            series["cross_node_call_pct"].append(100.0 * st.cross_calls_rps / st.calls_rps if st.calls_rps else 0.0)
            series["cpu_cores_requested"].append(req_cores)
            series["pods"].append(float(len(ready)))
            if progress is not None:
                progress(minute)
        lat = np.concatenate(lat_all) if lat_all else np.zeros(0)
        w = np.concatenate(w_all) if w_all else np.zeros(0)
        metrics = {
            "latency_mean_ms": float(np.average(lat, weights=w)) if len(lat) else 0.0,
            "latency_p95_ms": weighted_percentile(lat, w, 95),
            "latency_p99_ms": weighted_percentile(lat, w, 99),
            "failed_pct": 100.0 * failed_req / total_req if total_req > 0 else 0.0,
            "slo_violation_pct": 100.0 * slo_bad / cfg.minutes,
            "cpu_core_hours": core_hours,
            "evictions": float(evictions),
            "cross_node_call_pct": 100.0 * cross / calls if calls > 0 else 0.0,
        }
        return SimResult(metrics, series, lat, w, self.pods_placed, self.unschedulable)


def weighted_percentile(x: np.ndarray, w: np.ndarray, q: float) -> float:
    """The ``q``-th percentile (0..100) of samples ``x`` with weights ``w`` (inverse of the weighted CDF);
    0.0 for no samples."""
    if len(x) == 0:
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
    return [name, m["latency_mean_ms"], m["latency_p95_ms"], m["latency_p99_ms"], m["failed_pct"],
            m["cross_node_call_pct"], m["cpu_core_hours"], int(m["evictions"])]
