"""The performance model of a microservice application on a cluster, one time step at a time.

Per step (default one minute) with user arrival rate λ (requests/s), everything stationary within the step:

1. **Visits.** Each user request enters at an entry service (shares from the app) and calls along the call
   graph: service *s* is visited ``V_s`` times per user request, ``V_callee += V_caller × m_e × g_e`` with
   ``m_e`` the edge's calls per request and ``g_e`` its mean attempts per call (1 without retries; with
   retries ``Σ_{r<=R} q_e^r``, ``q_e`` the chance an attempt fails or times out, carried over from the
   previous step and refined by ``retry_iterations`` passes). Edges closing a cycle are dropped; a self-edge
   multiplies the service's own CPU work by ``1 + m``.
2. **Load balancing.** A service's rate ``λ V_s`` is split evenly over its ready pods (kube-proxy's random
   backend choice; each call picks a pod at random). A visit its pod refuses (step 4) makes no calls, so
   callees see only their callers' admitted share: visits and refusals are settled together by a few
   fixed-point passes (nothing changes below saturation).
3. **CPU.** A pod's offered demand is ``d_p = λ_p x_s`` cores (``x_s`` CPU-seconds per request, gamma
   distributed with coefficient of variation ``cpu_cv``; on a node of per-core speed ``v_n`` and interference
   slowdown ``σ_n`` (scenarios: :mod:`policy.sim.pools`, :mod:`policy.sim.interference`) the work is
   ``x_s σ_n / v_n``; mesh sidecars use CPU on the node outside the pod's limit). On node *n* with ``C_n``
   allocatable cores the pod can use ``κ_p = min(limit_p, max(fair_p, C_n − others_p))`` cores, where
   ``others_p`` is the other pods' CPU use on the node (each capped at its limit, plus background tenants'
   use) and ``fair_p`` its request-weighted share of ``C_n`` (CFS shares: ``cpu.weight`` follows the
   request). One request runs on at most one core, at speed ``s_p = min(1, max(fair_p, C_n − others_p))``.
4. **Queueing.** Each pod is a processor-sharing station with ``n`` requests in its run queue, served together
   at ``φ(n) = min(n s_p, κ_p)`` cores, except that a lone request runs at full speed ``s_p`` even when the
   limit is under one core (CFS quota: a request much shorter than the period's quota never exhausts it;
   concurrent ones share the quota, so the long-run rate is ``κ_p``). Each of ``n`` requests gets ``φ(n)/n``.
   At most ``K = max_inflight`` requests are admitted; an arrival that finds ``K`` fails at once. This is a
   symmetric queue (Kelly 1979): its stationary distribution of ``n`` is that of the birth-death chain with
   departure rate ``φ(n) / x_s`` and does not depend on the work
   distribution beyond its mean (insensitivity), so blocking ``p_K`` is exact. A request's CPU sojourn is
   sampled as its work over the rate it gets with the queue it finds on arrival, ``x / min(s_p, κ_p/(n+1))``
   with ``n`` drawn from the stationary distribution (PASTA): exact in the mean by detailed balance, and
   within a few % of a discrete-event processor-sharing queue in the 95th percentile (``policy/sim/des.py``,
   BENCHMARKS.md ``simulator``). Past saturation the queue fills: requests wait ``≈ K x / κ`` or are refused.
5. **Own time.** Each visit also takes the service's own non-CPU time: lognormal, calibrated median and mean.
6. **Network.** Each call adds a delay by where caller and callee pods sit, same node < same zone < cross
   zone, plus the request and response bytes at that link's per-byte cost (:class:`NetworkModel`). With a
   scenario's topology network instead (``step(net=...)``, :mod:`policy.sim.network`): the node pair's delay
   (racks, zones, regions, edge sites; per-pair spread), a lognormal jitter draw, the mesh sidecar's latency,
   and the request and response as flows timed at the bottleneck link of their path, each link a
   processor-sharing station whose load comes exactly from the call rates and the placement (a full link
   refuses flows: the call attempt fails).
7. **Calls, timeouts, retries.** A visit's latency is its CPU sojourn + own time + the sum of its sequential
   calls + the longest of its parallel calls (the critical path). A call attempt fails when the callee
   refuses it, a call further down failed, or it exceeds the edge's per-try timeout (the caller waits the
   timeout; the callee's work goes on); a failed attempt is retried up to ``retries`` times after
   ``retry_backoff_ms``. A call fails when every attempt failed; then the user request fails — once, however
   many retries. It also fails when a service on its path has no ready pod or it exceeds the app's timeout.
8. **Sampling.** Latencies are Monte Carlo samples computed level by level (leaves first), vectorized over all
   services of a level: each service gets ``n_svc`` samples (``n_samples``, fewer for large graphs so that
   ``services × n_svc <= sample_budget``), a call on edge e reads callee samples through a fixed shift per
   (edge, copy, attempt) so every copy and retry of one caller sample sees a distinct, independent callee
   sample. More than :data:`MAX_COPIES` calls on one edge are summarised: sequential ones by mean and
   variance of their sum, parallel ones by the maximum's quantile. Latency percentiles are over the
   successful sampled user requests.

Cross-node call % is computed exactly from the rates and pod placement, not sampled.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from .app import AppSpec, CallParams
from .stations import Stations, sample_trunc_geom, station_stats

if TYPE_CHECKING:
    from .interference import Interference
    from .network import BoundNetwork

__all__ = ["MAX_COPIES", "NetworkModel", "zone_ids", "PodArrays", "StepStats", "Stations", "station_stats", "PerfModel"]

#: Calls of one edge sampled one by one per caller visit; beyond, the sum / max is summarised.
MAX_COPIES = 8


@dataclass(frozen=True)
class NetworkModel:
    """Per-call network cost (request + response, ms) by where caller and callee sit: a fixed delay plus
    bytes over the link's bandwidth.

    Delays: same node (veth) < same zone < cross zone. Bandwidths (Gbit/s): same node 40 (a memory copy
    through the node's bridge), same zone 10 (a common cloud NIC), cross zone 5. Order-of-magnitude
    defaults; every field is configurable.
    """

    same_node_ms: float = 0.05
    same_zone_ms: float = 0.5
    cross_zone_ms: float = 2.0
    same_node_gbps: float = 40.0
    same_zone_gbps: float = 10.0
    cross_zone_gbps: float = 5.0

    def __post_init__(self) -> None:
        for k in ("same_node_ms", "same_zone_ms", "cross_zone_ms"):
            if not (getattr(self, k) >= 0 and math.isfinite(getattr(self, k))):
                raise ValueError(f"network.{k}: must be a finite number >= 0, got {getattr(self, k)!r}")
        for k in ("same_node_gbps", "same_zone_gbps", "cross_zone_gbps"):
            if not getattr(self, k) > 0:
                raise ValueError(f"network.{k}: must be > 0, got {getattr(self, k)!r}")

    @property
    def class_delay_ms(self) -> np.ndarray:
        """(3,) delay per call class: 0 same node, 1 same zone, 2 cross zone."""
        return np.array([self.same_node_ms, self.same_zone_ms, self.cross_zone_ms])

    @property
    def class_ms_per_byte(self) -> np.ndarray:
        """(3,) ms per byte per call class (8 bits / bandwidth)."""
        return 8e-6 / np.array([self.same_node_gbps, self.same_zone_gbps, self.cross_zone_gbps])

    def matrix(self, zones: list[str]) -> np.ndarray:
        """(N, N) float64 fixed delay (ms) between nodes with these zone labels ('' = one default zone)."""
        z = np.array(zones, dtype=object)
        same_zone = z[:, None] == z[None, :]
        d = np.where(same_zone, self.same_zone_ms, self.cross_zone_ms).astype(np.float64)
        np.fill_diagonal(d, self.same_node_ms)
        return d

    def call_ms(
        self, node_a: np.ndarray, node_b: np.ndarray, zone_id: np.ndarray, nbytes: np.ndarray | float
    ) -> np.ndarray:
        """Cost (ms) of calls from nodes ``node_a`` to ``node_b`` (index arrays of one shape) carrying
        ``nbytes`` (request + response); ``zone_id`` (N,) int zone of each node."""
        cls = (node_a != node_b).astype(np.int8) + (zone_id[node_a] != zone_id[node_b])
        return self.class_delay_ms[cls] + nbytes * self.class_ms_per_byte[cls]


def zone_ids(zones: list[str]) -> np.ndarray:
    """(N,) int: the same id for the same zone label."""
    ids: dict[str, int] = {}
    return np.array([ids.setdefault(z, len(ids)) for z in zones], dtype=np.int64)


@dataclass(frozen=True)
class PodArrays:
    """The ready pods of one step: ``service`` (P,) int service index, ``node`` (P,) int node index,
    ``limit_cores`` (P,) float (inf when no limit), ``request_cores`` (P,) float (CFS weight)."""

    service: np.ndarray
    node: np.ndarray
    limit_cores: np.ndarray
    request_cores: np.ndarray


@dataclass(frozen=True)
class StepStats:
    """What one step produced (rates are per second, averaged over the step).

    - ``latency_ms``: (k,) end-to-end latencies of the successful sampled user requests;
    - ``fail_frac``: fraction of user requests that failed (0..1);
    - ``calls_rps`` / ``cross_calls_rps``: service-to-service calls per second, all and crossing nodes
      (exact, first attempts only);
    - ``pod_cpu_cores``: (P,) CPU in use per pod (accepted work); ``pod_rps``: (P,) arrival rate per pod
      (attempts, retries included); ``pod_sojourn_ms``: (P,) mean CPU sojourn of an admitted request;
    - ``edge_rps``: (E,) calls/s per edge of ``PerfModel.edges`` (first attempts);
    - ``pod_blocked_frac``: (P,) share of arrivals refused (run queue full);
    - ``pod_inflight``: (P,) mean requests in flight on the pod (rate × mean visit latency, calls included:
      what an eviction or OOM kill loses); ``pod_memory_mi``: (P,) working set (MiB);
    - ``edge_attempt_fail``: (E,) share of first attempts that failed or timed out (drives retry load);
    - ``edge_attempts_rps``: (E,) attempts/s per edge (retries included);
    - ``service_latency_ms``: (S, 3) p50/p95/p99 of each service's visit latency (ms, calls included,
      successful visits), NaN where unvisited; only with ``per_service=True``, else None;
    - ``service_visit_ms``: (S,) mean visit latency per service (ms; 0 where unvisited);
    - with scenario features: ``link_util`` (L,) offered load over capacity of each link of the topology
      network; ``node_sidecar_cores`` (N,) mesh proxies' CPU (``pod_sidecar_cores`` (P,) per pod, part of its measured
      use); ``node_slowdown`` (N,) interference σ;
      ``user_entry`` / ``user_failed`` (k,) entry service and outcome of every sampled user request (when
      ``entry`` shares were given: several apps).
    """

    latency_ms: np.ndarray
    fail_frac: float
    calls_rps: float
    cross_calls_rps: float
    pod_cpu_cores: np.ndarray
    pod_rps: np.ndarray
    pod_sojourn_ms: np.ndarray
    edge_rps: np.ndarray
    pod_blocked_frac: np.ndarray = field(default_factory=lambda: np.zeros(0))
    pod_inflight: np.ndarray = field(default_factory=lambda: np.zeros(0))
    pod_memory_mi: np.ndarray = field(default_factory=lambda: np.zeros(0))
    edge_attempt_fail: np.ndarray = field(default_factory=lambda: np.zeros(0))
    edge_attempts_rps: np.ndarray = field(default_factory=lambda: np.zeros(0))
    service_latency_ms: np.ndarray | None = None
    service_visit_ms: np.ndarray = field(default_factory=lambda: np.zeros(0))
    cross_zone_calls_rps: float = 0.0
    link_util: np.ndarray | None = None
    node_sidecar_cores: np.ndarray | None = None
    node_slowdown: np.ndarray | None = None
    pod_sidecar_cores: np.ndarray | None = None
    user_entry: np.ndarray | None = None
    user_failed: np.ndarray | None = None


class PerfModel:
    """Precomputed arrays of an :class:`AppSpec` for fast steps. ``services`` orders the service index;
    ``edges`` lists the kept call edges as ``(caller, callee, calls_per_request, parallel)`` index tuples.

    ``rho_max`` is accepted for compatibility and ignored (saturation is each pod's ``max_inflight``).
    """

    def __init__(
        self, app: AppSpec, network: NetworkModel | None = None, rho_max: float | None = None, m_headroom: float = 1.0
    ):
        self.app = app
        if not (math.isfinite(m_headroom) and m_headroom >= 1.0):
            raise ValueError(f"m_headroom: must be a finite number >= 1, got {m_headroom!r}")
        self.m_headroom = float(m_headroom)
        self.network = network or NetworkModel()
        self.services = tuple(app.graph.services)
        self.pos = {s: i for i, s in enumerate(self.services)}
        S = len(self.services)
        p = [app.params[s] if s in app.params else None for s in self.services]
        self.cpu_s = np.array([(x.cpu_ms_per_request if x else 0.2) / 1000.0 for x in p])
        self.cpu_cv = np.array([x.cpu_cv if x else 1.0 for x in p])
        p50 = np.array([x.latency_p50_ms if x else 1.0 for x in p])
        mean = np.array([x.latency_mean_ms if x else 1.2 for x in p])
        # lognormal with median p50 and mean `mean`: sigma^2 = 2 ln(mean / p50)
        self.base_mu = np.log(p50)
        self.base_sigma = np.sqrt(2.0 * np.log(np.maximum(mean, p50 * 1.000001) / p50))
        self.max_inflight = np.array([x.max_inflight if x else 1024 for x in p], dtype=np.int64)
        self.mem_base_mi = np.array([x.working_set_mi if x else 64.0 for x in p])
        self.mem_per_inflight_mi = np.array([x.memory_mi_per_inflight if x else 0.0 for x in p])
        # edges, minus self-edges (folded into CPU work) and cycle-closing edges
        # calls_per_request None (declared, never measured) means one call; 0 means the edge is never taken
        edges = [
            (
                self.pos[e.caller],
                self.pos[e.callee],
                1.0 if e.calls_per_request is None else float(e.calls_per_request),
                bool(e.parallel),
            )
            for e in app.graph.edges
        ]
        for a, b, m, _ in edges:
            if a == b:
                self.cpu_s[a] *= 1.0 + m
        entries = [self.pos[s] for s in app.entry if s in self.pos]
        order, kept = _dag(S, [(a, b) for a, b, _, _ in edges if a != b], entries)
        keep = set(kept)
        self.edges = [(a, b, m, par) for a, b, m, par in edges if a != b and (a, b) in keep]
        self.topo = order  # callers before callees
        calls: Mapping[tuple[str, str], CallParams] = getattr(app, "calls", None) or {}
        cp = [calls.get((self.services[a], self.services[b]), CallParams()) for a, b, _, _ in self.edges]
        E = len(self.edges)
        self.e_a = np.array([e[0] for e in self.edges], dtype=np.int64)
        self.e_b = np.array([e[1] for e in self.edges], dtype=np.int64)
        self.e_m = np.array([e[2] for e in self.edges], dtype=np.float64)
        self.e_par = np.array([e[3] for e in self.edges], dtype=bool)
        self.e_bytes = np.array([c.request_bytes + c.response_bytes for c in cp], dtype=np.float64)
        self.e_req_bytes = np.array([c.request_bytes for c in cp], dtype=np.float64)
        self.e_resp_bytes = np.array([c.response_bytes for c in cp], dtype=np.float64)
        self.e_timeout_ms = np.array([c.timeout_ms if c.timeout_ms is not None else np.inf for c in cp])
        self.e_retries = np.array([c.retries for c in cp], dtype=np.int64)
        self.e_backoff_ms = np.array([c.retry_backoff_ms for c in cp], dtype=np.float64)
        self.has_retries = bool(E and self.e_retries.max() > 0)
        self._has_par_multi = bool(E and np.any(self.e_par & (self.e_m > 1.0)))
        out_edges: dict[int, list[tuple[int, float, bool]]] = {i: [] for i in range(S)}
        for a, b, m, par in self.edges:
            out_edges[a].append((b, m, par))
        self.out_edges = out_edges
        self.visits = self.visits_with(np.ones(E))
        self.entry_idx = np.array([self.pos[s] for s in app.entry if s in self.pos], dtype=np.int64)
        self.entry_p = np.array([app.entry[s] for s in app.entry if s in self.pos])
        self.entry_p = self.entry_p / self.entry_p.sum()
        self._build_levels()

    # ---- structure ------------------------------------------------------------------------------------

    def visits_with(
        self,
        attempts: np.ndarray,
        admitted: np.ndarray | None = None,
        entry: np.ndarray | None = None,
        m: np.ndarray | None = None,
    ) -> np.ndarray:
        """(S,) visits per user request when edge e carries ``m_e × attempts[e]`` calls per admitted caller
        visit; ``admitted`` (S,) the share of each service's visits its pods admit (1 when None); ``entry``
        (S,) the share of user requests entering at each service (the app's entry shares when None); ``m``
        (E,) calls per request of each edge (``e_m`` when None)."""
        S = len(self.services)
        v = np.zeros(S)
        if entry is None:
            for s, share in self.app.entry.items():
                if s in self.pos:
                    v[self.pos[s]] += share
        else:
            v += entry
        if not len(self.edges):
            return v
        rank = np.empty(S, dtype=np.int64)
        rank[np.asarray(self.topo, dtype=np.int64)] = np.arange(S)
        if not hasattr(self, "_edge_order"):
            self._edge_order = np.argsort(rank[self.e_a], kind="stable")
        w = (self.e_m if m is None else m) * attempts * (1.0 if admitted is None else admitted[self.e_a])
        # callers in topological order: a python loop over edges is fine (visits are per step, E small-ish);
        # for large graphs go level by level
        if len(self.edges) > 256 and hasattr(self, "level"):
            for lvl in range(int(self.level.max()), 0, -1):
                m = self._lvl_edge_mask[lvl]
                np.add.at(v, self.e_b[m], v[self.e_a[m]] * w[m])
            return v
        for k in self._edge_order:
            v[self.e_b[k]] += v[self.e_a[k]] * w[k]
        return v

    def _build_levels(self) -> None:
        S = len(self.services)
        level = np.zeros(S, dtype=np.int64)
        for s in reversed(self.topo):  # callees first
            for b, _m, _p in self.out_edges[s]:
                level[s] = max(level[s], level[b] + 1)
        self.level = level
        L = int(level.max(initial=0))
        self._lvl_edge_mask = {lvl: (level[self.e_a] == lvl) & (self.e_m > 0) for lvl in range(1, L + 1)}
        # per level: edges sorted by (caller, parallel); copies per edge
        self._levels = []
        for lvl in range(1, L + 1):
            idx = np.flatnonzero(self._lvl_edge_mask[lvl])
            if not len(idx):
                continue
            idx = idx[np.lexsort((self.e_par[idx], self.e_a[idx]))]
            ncopy = np.minimum(np.ceil(self.e_m[idx] * self.m_headroom - 1e-12).astype(np.int64), MAX_COPIES)
            ncopy = np.maximum(ncopy, 1)
            copy_edge = np.repeat(np.arange(len(idx)), ncopy)  # local edge index per copy
            first = np.concatenate([[0], np.cumsum(ncopy)[:-1]])
            copy_k = np.arange(len(copy_edge)) - first[copy_edge]
            callers, cstart = np.unique(self.e_a[idx], return_index=True)
            self._levels.append(
                {
                    "edges": idx,
                    "ncopy": ncopy,
                    "copy_edge": copy_edge,
                    "copy_k": copy_k,
                    "copy_start": first,
                    "callers": callers,
                    "caller_start": cstart,
                    "R": int(self.e_retries[idx].max(initial=0)),
                }
            )

    def capacity_rps(self, replicas: dict[str, int], limit_cores: dict[str, float]) -> float:
        """User requests/s at which the busiest service reaches utilisation 1 (all pods at their limit)."""
        cap = np.inf
        for s, i in self.pos.items():
            load = self.visits[i] * self.cpu_s[i]
            if load <= 0:
                continue
            cores = replicas.get(s, 0) * limit_cores.get(s, np.inf)
            cap = min(cap, cores / load)
        return float(cap)

    # ---- one step ---------------------------------------------------------------------------------------

    def pod_stations(
        self,
        lam_rps: float,
        pods: PodArrays,
        node_cores: np.ndarray,
        attempts: np.ndarray | None = None,
        node_bg_cores: np.ndarray | None = None,
        node_bg_request_cores: np.ndarray | None = None,
        thinning_iterations: int = 4,
        *,
        node_speed: np.ndarray | None = None,
        interference: Interference | None = None,
        sidecar_cpu_ms: float = 0.0,
        entry: np.ndarray | None = None,
        m: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, Stations, np.ndarray]:
        """Visits per user request (S,), per-pod arrival rates (P,), station quantities and the admitted share
        of each service's visits (S,) at user rate
        ``lam_rps``. A refused visit makes no calls, so a service's callees see only its admitted share:
        visits and refusals are settled together by ``thinning_iterations`` fixed-point passes (nothing
        changes while no pod refuses, i.e. below saturation). ``attempts`` (E,) mean attempts per call.

        ``node_speed`` (N,) per-core speed of each node (a request's CPU work takes ``x / speed``; 1 = the
        calibration machine); ``interference`` slows every request of a node by its σ
        (:mod:`policy.sim.interference`); ``sidecar_cpu_ms``: CPU per request through each mesh proxy (the
        callee's inbound and the caller's outbound proxy), used on the pod's node outside its CPU limit;
        ``entry`` (S,) and ``m`` (E,) as in :meth:`visits_with`."""
        S = len(self.services)
        N = len(node_cores)
        att = np.ones(len(self.edges)) if attempts is None else np.asarray(attempts, np.float64)
        n_ready = np.bincount(pods.service, minlength=S).astype(np.float64)
        admitted = (n_ready > 0).astype(np.float64)
        ps = pods.service
        work = self.cpu_s[ps]
        limit = pods.limit_cores
        bg = np.zeros(N) if node_bg_cores is None else np.asarray(node_bg_cores, dtype=np.float64)
        bg_req = np.zeros(N) if node_bg_request_cores is None else np.asarray(node_bg_request_cores, np.float64)
        node_req = np.bincount(pods.node, weights=pods.request_cores, minlength=N) + bg_req
        node_n = np.bincount(pods.node, minlength=N) + (bg_req > 0)
        cap = node_cores[pods.node]
        fair = cap * np.where(
            node_req[pods.node] > 0,
            pods.request_cores / np.maximum(node_req[pods.node], 1e-12),
            1.0 / np.maximum(node_n[pods.node], 1),
        )
        inv_speed = None if node_speed is None else 1.0 / np.asarray(node_speed, np.float64)[pods.node]
        em = self.e_m if m is None else m
        st = None
        for _ in range(max(1, thinning_iterations)):
            v = self.visits_with(att, admitted, entry, m)
            svc_rate = lam_rps * v
            pod_rps = np.where(n_ready[ps] > 0, svc_rate[ps] / np.maximum(n_ready[ps], 1), 0.0)
            side = None
            side_pod = None
            others_bg = bg
            if sidecar_cpu_ms > 0:
                # inbound: every arrival; outbound: every call attempt the pod makes
                out_att = np.bincount(self.e_a, weights=svc_rate[self.e_a] * admitted[self.e_a] * em * att, minlength=S)
                out_pod = np.where(n_ready[ps] > 0, out_att[ps] / np.maximum(n_ready[ps], 1), 0.0)
                side_pod = (pod_rps + out_pod) * sidecar_cpu_ms / 1000.0
                side = np.bincount(pods.node, weights=side_pod, minlength=N)
                others_bg = bg + side
            wf = None
            sigma = None
            if inv_speed is not None or interference is not None:
                wf = np.ones(len(ps)) if inv_speed is None else inv_speed
                if interference is not None:
                    d0 = np.bincount(pods.node, weights=np.minimum(pod_rps * self.cpu_s[ps] * wf, limit), minlength=N)
                    sigma = interference.slowdown(node_cores, d0, others_bg - bg, bg)
                    wf = wf * sigma[pods.node]
                work = self.cpu_s[ps] * wf
            demand = pod_rps * work
            used = demand if st is None else st.used_cores
            capped = np.minimum(used, limit)
            node_demand = np.bincount(pods.node, weights=capped, minlength=N) + others_bg
            others = node_demand[pods.node] - capped
            avail = np.maximum(cap - others, 0.0)
            free = np.maximum(fair, avail)
            kappa = np.maximum(np.minimum(limit, free), 1e-3)
            # a lone request runs on one core at the node's speed even under a sub-core limit (CFS lets it run
            # until the period's quota is spent, which a request much shorter than the quota never does)
            speed = np.maximum(np.minimum(1.0, free), 1e-3)
            gamma = (
                self._batch_gamma(lam_rps, svc_rate, n_ready, att, admitted, entry, m)[ps]
                if self._has_par_multi
                else None
            )
            st = station_stats(pod_rps, work, kappa, speed, self.max_inflight[ps], gamma)
            if wf is not None or side is not None:
                st = replace(
                    st, work_factor=wf, node_sidecar_cores=side, node_slowdown=sigma, pod_sidecar_cores=side_pod
                )
            blocked_s = np.bincount(ps, weights=st.blocked, minlength=S) / np.maximum(n_ready, 1)
            new = np.where(n_ready > 0, 1.0 - blocked_s, 0.0)
            if np.max(np.abs(new - admitted), initial=0.0) < 1e-4 and np.all(st.blocked < 1e-9):
                admitted = new
                break
            admitted = new
        return v, pod_rps, st, admitted

    def _batch_gamma(
        self,
        lam_rps: float,
        svc_rate: np.ndarray,
        n_ready: np.ndarray,
        attempts: np.ndarray,
        admitted: np.ndarray,
        entry: np.ndarray | None = None,
        m: np.ndarray | None = None,
    ) -> np.ndarray:
        """(S,) E[B²]/E[B] of the arrival batches at one pod of each service: the calls one caller visit makes
        in parallel on one edge land on the same pod together (Binomial(k, 1/pods) of them); user requests,
        sequential calls and retries arrive one by one."""
        S = len(self.services)
        first = np.zeros(S)
        second = np.zeros(S)
        pb = np.maximum(n_ready[self.e_b], 1).astype(np.float64)
        lam_a = svc_rate[self.e_a] * admitted[self.e_a]
        em = self.e_m if m is None else m
        w = np.floor(em + 1e-12)
        fr = em - w
        ek2 = w * w * (1 - fr) + (w + 1) ** 2 * fr
        x1 = lam_a * em / pb
        x2 = lam_a * (em / pb * (1 - 1 / pb) + ek2 / pb**2)
        retry_extra = lam_a * em * (attempts - 1.0) / pb
        x2 = np.where(self.e_par, x2, x1) + retry_extra
        x1 = x1 + retry_extra
        np.add.at(first, self.e_b, x1)
        np.add.at(second, self.e_b, x2)
        single = np.zeros(S)
        if entry is None:
            single[self.entry_idx] += lam_rps * self.entry_p
        else:
            single += lam_rps * entry
        single /= np.maximum(n_ready, 1)
        first += single
        second += single
        return np.where(first > 0, second / np.maximum(first, 1e-300), 1.0)

    def step(
        self,
        lam_rps: float,
        pods: PodArrays,
        node_cores: np.ndarray,
        node_zones: list[str],
        rng: np.random.Generator,
        n_samples: int = 2000,
        timeout_ms: float = np.inf,
        *,
        node_bg_cores: np.ndarray | None = None,
        node_bg_request_cores: np.ndarray | None = None,
        retry_fail_prob: np.ndarray | None = None,
        retry_iterations: int = 2,
        sample_budget: int = 1_000_000,
        per_service: bool = False,
        net: BoundNetwork | None = None,
        node_speed: np.ndarray | None = None,
        interference: Interference | None = None,
        entry: np.ndarray | None = None,
        entry_timeout_ms: np.ndarray | None = None,
        edge_scale: np.ndarray | None = None,
    ) -> StepStats:
        """Simulate one step at user arrival rate ``lam_rps`` (>= 0). See the module docstring.

        ``node_cores`` (N,) allocatable cores; ``node_zones`` (N,) zone labels; ``node_bg_cores`` /
        ``node_bg_request_cores`` (N,) CPU used / requested by pods outside the app (background tenants);
        ``retry_fail_prob`` (E,) the previous step's ``edge_attempt_fail`` (retry load; zeros when None);
        ``sample_budget``: at most this many visit samples per step (services × samples per service).

        Scenario features (all None by default, and then nothing changes): ``net`` the topology network of
        these nodes (:mod:`policy.sim.network`: delay matrix, jitter, shared links, sidecar), replacing
        :class:`NetworkModel`; ``node_speed`` (N,) per-core speeds; ``interference``
        (:mod:`policy.sim.interference`); ``entry`` (S,) this step's share of user requests entering at each
        service (several apps with their own loads), with ``entry_timeout_ms`` (S,) each entry's end-to-end
        timeout (ms) and the sampled user requests' entries and outcomes in ``StepStats.user_entry`` /
        ``user_failed``; ``edge_scale`` (E,) multipliers of each edge's calls per request (rate drift; their
        product with ``e_m`` must stay within the model's ``m_headroom``).
        """
        E = len(self.edges)
        if len(node_zones) != len(node_cores):
            raise ValueError(f"node_zones: {len(node_zones)} zones for {len(node_cores)} nodes")
        if not (np.isfinite(lam_rps) and lam_rps >= 0):
            raise ValueError(f"lam_rps: must be a finite number >= 0, got {lam_rps!r}")
        zid = zone_ids(list(node_zones))
        q = np.zeros(E) if retry_fail_prob is None else np.clip(np.asarray(retry_fail_prob, np.float64), 0, 1)
        passes = max(1, int(retry_iterations)) if self.has_retries else 1
        m = None
        if edge_scale is not None:
            m = self.e_m * np.asarray(edge_scale, np.float64)
            if E and np.any(np.ceil(m - 1e-12) > np.ceil(self.e_m * self.m_headroom - 1e-12)):
                raise ValueError("edge_scale: calls per request exceed the model's m_headroom")
        if entry is not None:
            entry = np.asarray(entry, np.float64)
            if entry.shape != (len(self.services),) or np.any(entry < 0) or not entry.sum() > 0:
                raise ValueError(f"entry: must be ({len(self.services)},) shares >= 0 with a positive sum")
            entry = entry / entry.sum()
        feats = {
            "net": net,
            "node_speed": node_speed,
            "interference": interference,
            "entry": entry,
            "entry_timeout_ms": entry_timeout_ms,
            "m": m,
        }
        out = None
        for _ in range(passes):
            attempts = _attempts(q, self.e_retries)
            v, pod_rps, st, admitted = self.pod_stations(
                lam_rps,
                pods,
                node_cores,
                attempts,
                node_bg_cores,
                node_bg_request_cores,
                node_speed=node_speed,
                interference=interference,
                sidecar_cpu_ms=net.spec.sidecar_cpu_ms if net is not None else 0.0,
                entry=entry,
                m=m,
            )
            out = self._sample(
                lam_rps,
                v,
                pod_rps,
                st,
                pods,
                node_cores,
                zid,
                rng,
                n_samples,
                timeout_ms,
                sample_budget,
                per_service,
                attempts,
                admitted,
                feats,
            )
            q = out.edge_attempt_fail
        assert out is not None
        return out

    def _sample(
        self,
        lam_rps,
        v,
        pod_rps,
        st: Stations,
        pods: PodArrays,
        node_cores,
        zid,
        rng,
        n_samples,
        timeout_ms,
        sample_budget,
        per_service,
        attempts,
        admitted,
        feats=None,
    ) -> StepStats:
        S = len(self.services)
        E = len(self.edges)
        P = len(pods.service)
        N = len(node_cores)
        feats = feats or {}
        net: BoundNetwork | None = feats.get("net")
        em = self.e_m if feats.get("m") is None else feats["m"]
        svc_rate = lam_rps * v
        n_ready = np.bincount(pods.service, minlength=S)
        edge_rps = svc_rate[self.e_a] * admitted[self.e_a] * em if E else np.zeros(0)
        calls, cross, cross_zone = self._exact_calls(edge_rps, pods, n_ready, N, zid)
        links = None
        if net is not None and net.n_links and E:
            links = net.link_state(
                *net.link_loads(
                    pods.service,
                    pods.node,
                    n_ready,
                    self.e_a,
                    self.e_b,
                    edge_rps * attempts,
                    self.e_req_bytes,
                    self.e_resp_bytes,
                )
            )
        extra = {
            "link_util": None if links is None else links.util,
            "node_sidecar_cores": st.node_sidecar_cores,
            "node_slowdown": st.node_slowdown,
            "pod_sidecar_cores": st.pod_sidecar_cores,
        }
        used = st.used_cores
        soj_ms = 1000.0 * st.mean_sojourn_s
        empty = np.zeros(0)
        if lam_rps <= 0 or n_samples <= 0:
            mem = self.mem_base_mi[pods.service] if P else empty
            return StepStats(
                empty,
                0.0,
                calls,
                cross,
                used,
                pod_rps,
                soj_ms,
                edge_rps,
                st.blocked,
                np.zeros(P),
                mem,
                np.zeros(E),
                edge_rps * attempts if E else empty,
                np.full((S, 3), np.nan) if per_service else None,
                np.zeros(S),
                cross_zone,
                **extra,
            )

        if P == 0:
            return StepStats(
                empty,
                1.0,
                calls,
                cross,
                used,
                pod_rps,
                soj_ms,
                edge_rps,
                st.blocked,
                empty,
                empty,
                np.zeros(E),
                edge_rps * attempts if E else empty,
                np.full((S, 3), np.nan) if per_service else None,
                np.zeros(S),
                cross_zone,
                **extra,
            )
        n = int(max(16, min(n_samples, sample_budget // max(S, 1))))
        # ---- per-visit samples of every service: pod, CPU sojourn, own time, refusal ------------------
        order = np.argsort(pods.service, kind="stable")
        start = np.concatenate([[0], np.cumsum(n_ready)[:-1]])
        cnt = n_ready
        u = rng.random((S, n))
        pick = order[np.minimum(start[:, None] + (u * cnt[:, None]).astype(np.int64), P - 1)]
        has = cnt > 0
        node = np.where(has[:, None], pods.node[pick], -1)
        # work: gamma with mean x and cv
        cv = self.cpu_cv
        x_mean = self.cpu_s[:, None]
        if np.all(cv == cv[0]) and cv[0] in (0.0, 1.0):
            work = x_mean * (rng.standard_exponential((S, n)) if cv[0] == 1.0 else 1.0)
        else:
            shape = np.where(cv > 0, 1.0 / np.maximum(cv, 1e-9) ** 2, 1.0)[:, None]
            g = rng.standard_gamma(np.broadcast_to(shape, (S, n)))
            work = np.where(cv[:, None] > 0, x_mean * g / shape, x_mean)
        ub, uh, uj = rng.random((3, S, n))
        blocked = ub < st.blocked[pick]
        head = uh < st.head[pick]
        j = sample_trunc_geom(st.rho[pick], st.jt[pick], uj)
        tcpu = np.where(head, work / st.speed[pick], work * (st.f[pick] + 1 + j) / st.kappa[pick])
        if st.batch_factor is not None:
            tcpu = tcpu * st.batch_factor[pick]
        if st.work_factor is not None:
            tcpu = tcpu * st.work_factor[pick]
        own = np.exp(self.base_mu[:, None] + self.base_sigma[:, None] * rng.standard_normal((S, n)))
        L = 1000.0 * tcpu + own
        F = blocked | ~has[:, None]
        L = np.where(F, 0.0, L)
        first_fail = np.zeros(E)
        # ---- calls, level by level (leaves first) ------------------------------------------------------
        for lv in self._levels:
            self._calls_of_level(lv, L, F, node, zid, rng, n, first_fail, em, net, links)
        # ---- user requests -----------------------------------------------------------------------------
        k = int(n_samples)
        w_entry = feats.get("entry")
        p_entry = self.entry_p if w_entry is None else w_entry[self.entry_idx] / w_entry[self.entry_idx].sum()
        entry = self.entry_idx[rng.choice(len(self.entry_idx), size=k, p=p_entry)]
        col = np.arange(k) if k <= n else rng.integers(0, n, size=k)
        col = col % n
        lat = L[entry, col]
        t_out = feats.get("entry_timeout_ms")
        failed = F[entry, col] | (lat > (timeout_ms if t_out is None else np.asarray(t_out)[entry]))
        if w_entry is not None:
            extra["user_entry"] = entry
            extra["user_failed"] = failed
        Lm = np.where(F, np.nan, L)
        ok_n = (~F).sum(axis=1)
        visit_ms = np.where(ok_n > 0, np.where(F, 0.0, L).sum(axis=1) / np.maximum(ok_n, 1), 0.0)
        visit_ms = np.where(v > 0, visit_ms, 0.0)
        svc_lat = None
        if per_service:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                svc_lat = np.nanpercentile(Lm, [50, 95, 99], axis=1).T
            svc_lat[(v <= 0) | (ok_n == 0)] = np.nan
        inflight = pod_rps * (1.0 - st.blocked) * visit_ms[pods.service] / 1000.0
        mem = self.mem_base_mi[pods.service] + self.mem_per_inflight_mi[pods.service] * inflight
        return StepStats(
            lat[~failed],
            float(failed.mean()),
            calls,
            cross,
            used,
            pod_rps,
            soj_ms,
            edge_rps,
            st.blocked,
            inflight,
            mem,
            first_fail,
            edge_rps * attempts if E else empty,
            svc_lat,
            visit_ms,
            cross_zone,
            **extra,
        )

    def _calls_of_level(self, lv, L, F, node, zid, rng, n, first_fail, em=None, net=None, links=None) -> None:
        idx = lv["edges"]
        ce = lv["copy_edge"]
        C = len(ce)
        ge = idx[ce]  # global edge per copy
        a, b = self.e_a[ge], self.e_b[ge]
        em = self.e_m if em is None else em
        m = em[idx]
        ncopy = lv["ncopy"]
        exact = em[idx] <= MAX_COPIES
        # calls made by each caller sample on each edge: floor(m) + Bernoulli(frac); all copies when capped
        whole = np.floor(m + 1e-12)
        kcalls = whole[:, None] + (rng.random((len(idx), n)) < (m - whole)[:, None])
        kcalls = np.where(exact[:, None], kcalls, ncopy[:, None])
        active = lv["copy_k"][:, None] < kcalls[ce]
        R = lv["R"]
        slots = MAX_COPIES * (R + 1)
        step = max(1, (n - 1) // slots)
        offset = rng.integers(0, n, size=len(idx))
        cols = np.arange(n)
        na = node[a]  # (C, n) caller nodes
        tau = self.e_timeout_ms[ge][:, None]
        backoff = self.e_backoff_ms[ge][:, None]
        retries = self.e_retries[ge][:, None]
        nbytes = self.e_bytes[ge][:, None]
        elapsed = np.zeros((C, n))
        done = ~active
        callfail = np.zeros((C, n), dtype=bool)
        crn = None
        if net is not None and links is not None and net.n_links:
            crn = (rng.random(n), rng.random(net.n_links))
        for r in range(R + 1):
            slot = lv["copy_k"] * (R + 1) + r
            shift = 1 + (offset[ce] + slot * step) % max(n - 1, 1)
            jc = (cols[None, :] + shift[:, None]) % n
            lb = L[b[:, None], jc]
            fb = F[b[:, None], jc]
            nb = node[b[:, None], jc]
            if net is None:
                cost = self.network.call_ms(np.maximum(na, 0), np.maximum(nb, 0), zid, nbytes) if len(zid) else 0.0
                att = cost + lb
                fail = fb | (att > tau)
            else:
                cost, refused = self._topology_call_ms(net, links, np.maximum(na, 0), np.maximum(nb, 0), ge, rng, crn)
                att = cost + lb
                fail = fb | (att > tau) | refused
            if r == 0:
                # first-attempt failure share per edge (over active copies)
                num = np.bincount(ce, weights=(fail & active).sum(axis=1), minlength=len(idx))
                den = np.bincount(ce, weights=active.sum(axis=1), minlength=len(idx))
                first_fail[idx] = np.where(den > 0, num / np.maximum(den, 1), 0.0)
            live = ~done
            ok = live & ~fail
            elapsed += np.where(ok, att, 0.0)
            bad = live & fail
            can_retry = bad & (r < retries)
            elapsed += np.where(bad, np.minimum(att, tau), 0.0) + np.where(can_retry, backoff, 0.0)
            callfail |= bad & ~can_retry
            done = done | ok | (bad & ~can_retry)
            if done.all():
                break
        contrib = np.where(active, elapsed, 0.0)
        cfail = active & callfail
        # copies -> edges
        cs = lv["copy_start"]
        seq_e = np.add.reduceat(contrib, cs, axis=0)
        par_e = np.maximum.reduceat(contrib, cs, axis=0)
        fail_e = np.logical_or.reduceat(cfail, cs, axis=0)
        capped = ~exact
        if capped.any():
            for i in np.flatnonzero(capped):
                k = int(ncopy[i])
                blk = contrib[cs[i] : cs[i] + k]
                mu = float(blk.mean())
                if self.e_par[idx[i]]:
                    pooled = np.sort(blk.ravel())
                    uu = rng.random(n) ** (1.0 / m[i])
                    par_e[i] = pooled[np.minimum((uu * len(pooled)).astype(np.int64), len(pooled) - 1)]
                else:
                    seq_e[i] = np.maximum(m[i] * mu + math.sqrt(m[i] / k) * (seq_e[i] - k * mu), 0.0)
                p_fail = float(cfail[cs[i] : cs[i] + k].mean())
                if p_fail > 0:
                    extra = 1.0 - (1.0 - p_fail) ** max(m[i] - k, 0.0)
                    fail_e[i] |= rng.random(n) < extra
        par_flag = self.e_par[idx][:, None]
        edge_val_seq = np.where(par_flag, 0.0, seq_e)
        edge_val_par = np.where(par_flag, par_e, 0.0)
        cst = lv["caller_start"]
        callers = lv["callers"]
        add = np.add.reduceat(edge_val_seq, cst, axis=0) + np.maximum.reduceat(edge_val_par, cst, axis=0)
        fails = np.logical_or.reduceat(fail_e, cst, axis=0)
        # a refused visit (or one of a service without pods) made no calls: it stays at 0 ms, failed
        L[callers] = np.where(F[callers], 0.0, L[callers] + add)
        F[callers] |= fails

    def _topology_call_ms(self, net, links, na, nb, ge, rng, crn=None) -> tuple[np.ndarray, np.ndarray]:
        """(ms, refused) of call attempts from nodes ``na`` to ``nb`` (C, n) on edges ``ge`` (C,) through the
        topology network: delay + jitter + sidecar + request and response transfers (:mod:`.network`).
        ``crn``: ``(base (n,), shift (L,))``: with probability ``LinkState.queue_corr[l]`` the uniform of a flow
        on link l from caller sample c is the shared ``frac(base[c] + shift[l])``, else its own: the flows of one
        caller visit over one link, moments apart, meet correlated queues."""
        cost = net.delay_ms[na, nb]
        if net.jitter_mean_ms is not None:
            cost = cost + net.jitter_ms(na, nb, rng)
        if net.spec.sidecar_ms > 0:
            cost = cost + net.spec.sidecar_ms
        q = self.e_req_bytes[ge][:, None]
        r = self.e_resp_bytes[ge][:, None]
        refused = np.zeros(na.shape, dtype=bool)
        if not (np.any(q > 0) or np.any(r > 0)):
            return cost, refused
        same = na == nb
        lq = net.bottleneck(na, nb, links)
        lr = net.bottleneck(nb, na, links)
        uq = ur = None
        if crn is not None:
            base, shift = crn
            corr = links.queue_corr
            uq, ur = (
                np.where(
                    rng.random(lk.shape) < corr[np.maximum(lk, 0)],
                    np.mod(base[None, :] + shift[np.maximum(lk, 0)], 1.0),
                    rng.random(lk.shape),
                )
                for lk in (lq, lr)
            )
        tq, fq = net.transfer_s(q, lq, same, links, rng, uq)
        tr, fr = net.transfer_s(r, lr, same, links, rng, ur)
        return cost + 1000.0 * (tq + tr), fq | fr

    def _exact_calls(
        self, edge_rps: np.ndarray, pods: PodArrays, n_ready: np.ndarray, N: int, zid: np.ndarray
    ) -> tuple[float, float, float]:
        """Calls/s, calls/s crossing nodes and calls/s crossing zones, from the placement (expected values
        under random backend choice; first attempts)."""
        E = len(edge_rps)
        if not E:
            return 0.0, 0.0, 0.0
        calls = float(edge_rps.sum())
        P = len(pods.service)
        if not P:
            return calls, calls, calls
        # (service, node) -> share of the service's pods on that node
        key = pods.service.astype(np.int64) * N + pods.node
        uk, cnt = np.unique(key, return_counts=True)
        svc_of = uk // N
        share = cnt / np.maximum(n_ready[svc_of], 1)
        node_of = uk % N
        # per edge: expand the caller's (node, share) entries, look the callee's share up at that node
        first = np.searchsorted(svc_of, np.arange(len(n_ready)))
        last = np.searchsorted(svc_of, np.arange(len(n_ready)), side="right")
        na = last[self.e_a] - first[self.e_a]
        rep_e = np.repeat(np.arange(E), na)
        off = np.arange(len(rep_e)) - np.repeat(np.cumsum(na) - na, na)
        ent = np.repeat(first[self.e_a], na) + off
        kb = self.e_b[rep_e] * N + node_of[ent]
        pos = np.minimum(np.searchsorted(uk, kb), len(uk) - 1)
        sb = np.where(uk[pos] == kb, share[pos], 0.0)
        same = np.bincount(rep_e, weights=share[ent] * sb, minlength=E)
        # zones: the same with zone instead of node
        nz = int(zid.max(initial=0)) + 1
        zkey = pods.service.astype(np.int64) * nz + zid[pods.node]
        zk, zc = np.unique(zkey, return_counts=True)
        zsvc = zk // nz
        zshare = zc / np.maximum(n_ready[zsvc], 1)
        zfirst = np.searchsorted(zsvc, np.arange(len(n_ready)))
        zlast = np.searchsorted(zsvc, np.arange(len(n_ready)), side="right")
        za = zlast[self.e_a] - zfirst[self.e_a]
        zrep = np.repeat(np.arange(E), za)
        zoff = np.arange(len(zrep)) - np.repeat(np.cumsum(za) - za, za)
        zent = np.repeat(zfirst[self.e_a], za) + zoff
        zkb = self.e_b[zrep] * nz + (zk[zent] % nz)
        zpos = np.minimum(np.searchsorted(zk, zkb), len(zk) - 1)
        zsb = np.where(zk[zpos] == zkb, zshare[zpos], 0.0)
        same_zone = np.bincount(zrep, weights=zshare[zent] * zsb, minlength=E)
        has = (n_ready[self.e_a] > 0) & (n_ready[self.e_b] > 0)
        same = np.where(has, same, 0.0)
        same_zone = np.where(has, same_zone, 0.0)
        cross = float((edge_rps * (1.0 - same)).sum())
        cross_zone = float((edge_rps * (1.0 - same_zone)).sum())
        return calls, cross, cross_zone


def _attempts(q: np.ndarray, retries: np.ndarray) -> np.ndarray:
    """Mean attempts per call: Σ_{r=0..R} q^r."""
    if not len(q):
        return np.ones(0)
    R = retries.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        g = np.where(q < 1 - 1e-12, (1.0 - q ** (R + 1)) / (1.0 - q), R + 1)
    return np.where(R > 0, g, 1.0)


def _dag(n: int, edges: list[tuple[int, int]], roots: list[int]) -> tuple[list[int], list[tuple[int, int]]]:
    """A topological order (callers first) of all ``n`` nodes and the edges kept after dropping those that
    close a cycle (DFS back edges, starting from ``roots`` then every other node)."""
    out: dict[int, list[int]] = {i: [] for i in range(n)}
    for a, b in edges:
        out[a].append(b)
    state = [0] * n  # 0 new, 1 on stack, 2 done
    post: list[int] = []
    kept: list[tuple[int, int]] = []
    for r in [*roots, *range(n)]:
        if state[r]:
            continue
        stack = [(r, iter(out[r]))]
        state[r] = 1
        while stack:
            v, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[v] = 2
                post.append(v)
                stack.pop()
                continue
            if state[nxt] == 1:
                continue  # back edge: drop
            kept.append((v, nxt))
            if state[nxt] == 0:
                state[nxt] = 1
                stack.append((nxt, iter(out[nxt])))
    return post[::-1], kept
