"""The offline reference: perfect-foresight autoscaling and a placement planned under a simplified model (HiGHS MIP),
not a bound.

It has **perfect foresight of the request rates** (the run's whole per-minute trace) and plans offline, in two
parts, each solved exactly for its surrogate model (the surrogates, not the simulator: the plan sees one CPU size and
no speed per node, no sidecar CPU, no node events and no failure domains, and it maximises co-location only, so its
simulated result can be far worse than a tuned HPA's; the bench no longer runs it, and its achievable target is
``lookahead-oracle``, :mod:`policy.sim.oracle`):

1. **Autoscaling** (:func:`foresight_replicas`). Every minute, each autoscaled workload gets the replica count
   ``r`` (1..``max_replicas``, the HPA's bounds) minimising ``V_s × [(1 − B) W_s(r) + B × timeout] + price ×
   r × request_s``: the mean time a user request spends in the service's CPU queues plus its refused
   visits counted at the app's timeout, plus the price of the requested cores. ``W_s`` and ``B`` are the
   simulator's own processor-sharing station quantities (:func:`policy.sim.model.station_stats`: per-pod
   rate ``λ(t) V_s / r``, cores = the pod's CPU limit, or the node's without one) at the minute's *known*
   rate ``λ(t)``, so it scales ahead of every ramp and down at once. The cost is separable over services,
   so enumerating ``r`` per service is the exact optimum of the surrogate; when the replicas' requests do
   not fit the cluster, ``price`` is raised (bisection) until they do. The ``price`` knob
   (milliseconds of mean latency per requested core) traces the reference's own latency-CPU curve.
2. **Placement** (:func:`solve_placement`): a mixed-integer program solved by HiGHS (``highspy``) for the
   replica counts of each distinct minute: integer pods per (service, node), every request fitting
   (CPU, memory, pods, as kube-scheduler's NodeResourcesFit), the expected CPU use per node at most
   ``max_node_util`` of its cores (no contention), maximising the expected network time saved per
   second, ``Σ_e rate_e [(d_cross − d_zone) P_zone(e) + (d_zone − d_node) P_node(e)]``, where ``P_node(e)``
   is the share of edge e's calls that stay on one node. Calls pick a callee pod at random, so
   ``P_node = Σ_n f_a,n f_b,n`` (``f``: a service's share of pods per node); the MIP maximises its linear
   upper bound ``Σ_n min(f_a,n, f_b,n)`` (exact when either service has one pod, or both sit on one node),
   and the same for zones. HiGHS reports the relative MIP gap of each solve (0 = proven optimal for the
   MIP); solves stop at ``time_limit_s``.

In the simulation (:func:`reference_stack`, the ``offline-reference`` stack) a hook sets each minute's
replicas before its traffic, and kube-scheduler places new pods with a plan score plugin (weight 100) that
prefers the nodes where the plan wants more pods of the service; running pods are not moved. The result is
*simulated* like every other stack: what its plan achieves in the simulator, with no claim that nothing does better.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from policy.baselines.kube_default import default_score_plugins
from policy.index import ClusterIndex
from policy.observe import parse_workload
from policy.state import PodInfo

from .app import AppSpec
from .engine import ClusterSpec, NetworkModel, PeriodicHook, Simulation
from .kube_scheduler import KubeSchedulerModel
from .model import PerfModel, station_stats
from .stackbase import (
    AUTOSCALER_PERIOD_MIN,
    Knob,
    StackBuild,
    StackContext,
    autoscaled_workloads,
    current_replicas,
    register_stack,
    terms_lookup,
)

__all__ = [
    "DEFAULT_PRICE_MS_PER_CORE",
    "MAX_REPLICAS",
    "PlacementProblem",
    "PlacementSolution",
    "ReferencePlan",
    "foresight_replicas",
    "placement_problem",
    "placement_objective",
    "MAX_INTEGER_VARS",
    "MIP_MAX_NODES",
    "solve_placement",
    "reference_plan",
    "PlanScore",
    "reference_stack",
    "offline_reference",
    "REFERENCE_STACKS",
]

#: Default price of a requested core, in milliseconds of mean user latency (the ``price`` knob).
DEFAULT_PRICE_MS_PER_CORE = 30.0

#: Replica bounds of the reference's autoscaling: those of the benchmarked HPA (1-10).
MAX_REPLICAS = 10


# ---- 1. autoscaling with foresight ----------------------------------------------------------------------


def _service_costs(
    model: PerfModel, lam: float, s: int, limit_cores: float, request_cores: float, timeout_ms: float, max_r: int
) -> np.ndarray:
    """(max_r,) latency part of the cost (ms per user request) of 1..max_r pods of service ``s`` at ``lam``."""
    r = np.arange(1, max_r + 1, dtype=np.float64)
    v = float(model.visits[s])
    work = float(model.cpu_s[s])
    if v <= 0 or work <= 0 or lam <= 0:
        return np.zeros(max_r)
    rate = lam * v / r
    kappa = np.full(max_r, max(limit_cores, 1e-3))
    speed = np.minimum(1.0, kappa)
    st = station_stats(rate, np.full(max_r, work), kappa, speed, np.full(max_r, int(model.max_inflight[s])))
    return v * ((1.0 - st.blocked) * st.mean_sojourn_s * 1000.0 + st.blocked * timeout_ms)


def foresight_replicas(
    app: AppSpec,
    rps: Sequence[float],
    workloads: Sequence[str],
    price_ms_per_core: float,
    node_cores: float,
    cpu_budget_cores: float = math.inf,
    max_replicas: int = MAX_REPLICAS,
) -> np.ndarray:
    """(T, W) int replicas per minute of each workload of ``workloads`` (``namespace/name``) with perfect
    foresight of ``rps`` (T,) user req/s: per minute, the exact minimiser of the separable surrogate cost
    (module docstring, part 1) at ``price_ms_per_core`` (>= 0). ``node_cores``: the cores a pod without a
    CPU limit could use. ``cpu_budget_cores``: the requested cores the workloads may hold together; the price
    is raised (bisection, 40 steps) in minutes where the optimum would exceed it. Raises ValueError for a
    negative price or an unknown workload."""
    if not (price_ms_per_core >= 0 and math.isfinite(price_ms_per_core)):
        raise ValueError(f"price: must be a finite number >= 0, got {price_ms_per_core!r}")
    model = PerfModel(app)
    info = _workload_info(app)
    cols = []
    for w in workloads:
        if w not in info:
            raise ValueError(f"workload {w!r} is not in app {app.name!r}")
        svc, req_c, lim_c = info[w]
        cols.append((model.pos.get(svc), req_c, lim_c if lim_c > 0 else node_cores))
    rps = np.asarray(rps, dtype=np.float64)
    out = np.ones((len(rps), len(cols)), dtype=np.int64)
    sizes = np.arange(1, max_replicas + 1, dtype=np.float64)
    for t, lam in enumerate(rps):
        lat = np.zeros((len(cols), max_replicas))
        req = np.zeros(len(cols))
        for j, (s, req_c, lim_c) in enumerate(cols):
            req[j] = req_c
            if s is not None:
                lat[j] = _service_costs(model, float(lam), s, lim_c, req_c, app.timeout_ms, max_replicas)

        def choose(price: float, lat: np.ndarray = lat, req: np.ndarray = req) -> np.ndarray:
            cost = lat + price * sizes[None, :] * req[:, None]
            return np.argmin(cost, axis=1) + 1  # ties: the fewest replicas

        r = choose(price_ms_per_core)
        if float(r @ req) > cpu_budget_cores:
            lo, hi = price_ms_per_core, max(price_ms_per_core, 1.0)
            while float(choose(hi) @ req) > cpu_budget_cores and hi < 1e12:
                hi *= 4.0
            for _ in range(40):
                mid = 0.5 * (lo + hi)
                if float(choose(mid) @ req) > cpu_budget_cores:
                    lo = mid
                else:
                    hi = mid
            r = choose(hi)
        out[t] = r
    return out


def _workload_info(app: AppSpec) -> dict[str, tuple[str, float, float]]:
    """``namespace/name`` → (service, CPU request cores, CPU limit cores (0 = none)) per workload."""
    out = {}
    for obj, w in zip(app.deployments, app.workloads):
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace') or 'default'}/{meta['name']}"
        out[key] = (parse_workload(obj).service, w.pod_requests.cpu_m / 1000.0, w.pod_limits.cpu_m / 1000.0)
    return out


# ---- 2. placement: a MIP solved by HiGHS -----------------------------------------------------------------


@dataclass(frozen=True)
class PlacementProblem:
    """One placement MIP (module docstring, part 2).

    ``replicas`` (S,) pods per service; ``pod_cpu_m`` / ``pod_mem_bytes`` (S,) requests per pod;
    ``pod_use_cores`` (S,) expected CPU use per pod; ``free_cpu_m`` / ``free_mem_bytes`` / ``free_pods`` (N,)
    what the nodes have left for these pods; ``use_cap_cores`` (N,) the CPU use the nodes may take;
    ``zone`` (N,) int zone ids; ``edges`` (E, 2) int (caller, callee) service indices; ``w_node`` / ``w_zone``
    (E,) ms saved per second when a call stays on its node / in its zone (>= 0)."""

    replicas: np.ndarray
    pod_cpu_m: np.ndarray
    pod_mem_bytes: np.ndarray
    pod_use_cores: np.ndarray
    free_cpu_m: np.ndarray
    free_mem_bytes: np.ndarray
    free_pods: np.ndarray
    use_cap_cores: np.ndarray
    zone: np.ndarray
    edges: np.ndarray
    w_node: np.ndarray
    w_zone: np.ndarray


@dataclass(frozen=True)
class PlacementSolution:
    """``x`` (S, N) int pods per service and node, or None when HiGHS found no feasible placement within its
    time limit (then the pods go where kube-scheduler's default scoring puts them); ``objective`` (ms saved per
    second, the MIP's); ``mip_gap`` the relative gap HiGHS proved (0 = optimal; inf without a solution);
    ``status`` HiGHS's model status; ``relaxed``: the CPU-use constraint was dropped because the requests
    alone fit only without it; ``solve_s`` wall seconds."""

    x: np.ndarray | None
    objective: float
    mip_gap: float
    status: str
    relaxed: bool = False
    solve_s: float = 0.0


def placement_objective(p: PlacementProblem, x: np.ndarray) -> float | None:
    """The MIP's objective for pod counts ``x`` (S, N), or None when ``x`` breaks a constraint (the
    brute-force check of :func:`solve_placement`)."""
    x = np.asarray(x)
    if np.any(x < 0) or np.any(x.sum(axis=1) != p.replicas):
        return None
    if np.any(p.pod_cpu_m @ x > p.free_cpu_m) or np.any(p.pod_mem_bytes @ x > p.free_mem_bytes):
        return None
    if np.any(x.sum(axis=0) > p.free_pods) or np.any(p.pod_use_cores @ x > p.use_cap_cores + 1e-9):
        return None
    f = x / np.maximum(p.replicas, 1)[:, None]
    zones = np.unique(p.zone)
    fz = np.stack([f[:, p.zone == z].sum(axis=1) for z in zones], axis=1)
    a, b = p.edges[:, 0], p.edges[:, 1]
    node = np.minimum(f[a], f[b]).sum(axis=1)
    zone = np.minimum(fz[a], fz[b]).sum(axis=1)
    return float(p.w_node @ node + p.w_zone @ zone)


#: Largest MIP attempted (integer pod-count variables, services × nodes); larger apps (the 386-service
#: Alibaba graph on 40 nodes) are placed by kube-scheduler's default scoring, reported as unsolved.
MAX_INTEGER_VARS = 4000

#: Branch-and-bound nodes per solve: the deterministic work limit (a wall-clock limit would make the plan,
#: and so the reference's results, depend on the machine's load).
MIP_MAX_NODES = 2000


def solve_placement(p: PlacementProblem, time_limit_s: float = 60.0, mip_rel_gap: float = 1e-4) -> PlacementSolution:
    """Solve the placement MIP with HiGHS: one thread, a fixed seed and at most :data:`MIP_MAX_NODES`
    branch-and-bound nodes, so the result does not depend on the machine (``time_limit_s`` is a safety net
    only). When no placement keeps the nodes' CPU use under their cap, the cap is dropped (``relaxed``).
    A problem with more than :data:`MAX_INTEGER_VARS` pod-count variables is not attempted (``x`` None,
    status ``too large``). Raises ValueError when even the requests cannot fit."""
    if len(p.replicas) * len(p.free_cpu_m) > MAX_INTEGER_VARS:
        return PlacementSolution(None, 0.0, math.inf, "too large")
    sol = _solve(p, time_limit_s, mip_rel_gap, use_cap=True)
    if sol is None:
        sol = _solve(p, time_limit_s, mip_rel_gap, use_cap=False)
        if sol is None:
            raise ValueError("placement: the pods' requests do not fit the nodes")
        sol = PlacementSolution(sol.x, sol.objective, sol.mip_gap, sol.status, True, sol.solve_s)
    return sol


@contextlib.contextmanager
def _stdout_to_stderr():
    """HiGHS prints its banner on file descriptor 1 when a solver is created, whatever its options: send it
    to stderr, so ``--json -`` output stays JSON."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _solve(p: PlacementProblem, time_limit_s: float, mip_rel_gap: float, use_cap: bool) -> PlacementSolution | None:
    try:
        import highspy
    except ImportError:
        raise ValueError("offline-reference: needs HiGHS (pip install 'hrl-scheduler[bench]')") from None

    S, N = len(p.replicas), len(p.free_cpu_m)
    zones = np.unique(p.zone)
    K = len(zones)
    zk = np.searchsorted(zones, p.zone)
    keep = (p.replicas[p.edges[:, 0]] > 0) & (p.replicas[p.edges[:, 1]] > 0) if len(p.edges) else np.zeros(0, bool)
    edges, wn, wz = p.edges[keep], p.w_node[keep], p.w_zone[keep]
    E = len(edges)
    nx, nzn = S * N, E * N
    ncol = nx + nzn + E * K
    cost = np.concatenate([np.zeros(nx), -np.repeat(wn, N), -np.repeat(wz, K)])  # minimise the negative
    lower = np.zeros(ncol)
    upper = np.concatenate([np.repeat(p.replicas.astype(np.float64), N), np.ones(nzn + E * K)])
    rows_i: list[np.ndarray] = []
    rows_j: list[np.ndarray] = []
    rows_v: list[np.ndarray] = []
    rlo: list[np.ndarray] = []
    rhi: list[np.ndarray] = []
    r0 = 0

    def add(i, j, v, lo, hi):
        nonlocal r0
        rows_i.append(np.asarray(i, np.int64) + r0)
        rows_j.append(np.asarray(j, np.int64))
        rows_v.append(np.asarray(v, np.float64))
        rlo.append(np.asarray(lo, np.float64))
        rhi.append(np.asarray(hi, np.float64))
        r0 += len(rlo[-1])

    xi = np.arange(nx).reshape(S, N)
    # every service gets its replicas
    add(np.repeat(np.arange(S), N), xi.ravel(), np.ones(nx), p.replicas, p.replicas)
    # requests fit, pods fit, (optionally) expected CPU use under the cap
    node_of = np.tile(np.arange(N), S)
    add(node_of, xi.ravel(), np.repeat(p.pod_cpu_m.astype(np.float64), N), np.full(N, -np.inf), p.free_cpu_m)
    add(node_of, xi.ravel(), np.repeat(p.pod_mem_bytes / 2**20, N), np.full(N, -np.inf), p.free_mem_bytes / 2**20)
    add(node_of, xi.ravel(), np.ones(nx), np.full(N, -np.inf), p.free_pods)
    if use_cap:
        add(node_of, xi.ravel(), np.repeat(p.pod_use_cores, N), np.full(N, -np.inf), p.use_cap_cores)
    # zn[e,n] <= x[a,n]/r_a and <= x[b,n]/r_b
    if E:
        zn = nx + np.arange(nzn).reshape(E, N)
        for side in (0, 1):
            s = edges[:, side]
            rows = np.arange(nzn)
            add(
                np.concatenate([rows, rows]),
                np.concatenate([zn.ravel(), xi[s].ravel()]),
                np.concatenate([np.ones(nzn), -np.repeat(1.0 / p.replicas[s], N)]),
                np.full(nzn, -np.inf),
                np.zeros(nzn),
            )
        zz = nx + nzn + np.arange(E * K).reshape(E, K)
        for side in (0, 1):
            s = edges[:, side]
            ii, jj, vv = [np.arange(E * K)], [zz.ravel()], [np.ones(E * K)]
            for n in range(N):
                ii.append(np.arange(E) * K + zk[n])
                jj.append(xi[s, n])
                vv.append(-1.0 / p.replicas[s])
            add(np.concatenate(ii), np.concatenate(jj), np.concatenate(vv), np.full(E * K, -np.inf), np.zeros(E * K))
    ri, cj, val = np.concatenate(rows_i), np.concatenate(rows_j), np.concatenate(rows_v)
    order = np.lexsort((ri, cj))
    ri, cj, val = ri[order], cj[order], val[order]
    start = np.searchsorted(cj, np.arange(ncol + 1))

    lp = highspy.HighsLp()
    lp.num_col_ = ncol
    lp.num_row_ = r0
    lp.col_cost_ = cost
    lp.col_lower_ = lower
    lp.col_upper_ = upper
    lp.row_lower_ = np.concatenate(rlo)
    lp.row_upper_ = np.concatenate(rhi)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = start
    lp.a_matrix_.index_ = ri
    lp.a_matrix_.value_ = val
    lp.integrality_ = [highspy.HighsVarType.kInteger] * nx + [highspy.HighsVarType.kContinuous] * (ncol - nx)
    t0 = time.perf_counter()
    with _stdout_to_stderr():
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("time_limit", float(time_limit_s))
        h.setOptionValue("mip_rel_gap", float(mip_rel_gap))
        h.setOptionValue("threads", 1)
        h.setOptionValue("random_seed", 0)
        h.setOptionValue("mip_max_nodes", MIP_MAX_NODES)
        h.passModel(lp)
        h.run()
    model_status = h.getModelStatus()
    status = h.modelStatusToString(model_status)
    info = h.getInfo()
    if model_status == highspy.HighsModelStatus.kInfeasible:
        return None
    if info.primal_solution_status != 2:  # kSolutionStatusFeasible: none found within the time limit
        return PlacementSolution(None, 0.0, math.inf, status, False, time.perf_counter() - t0)
    x = np.rint(np.asarray(h.getSolution().col_value[:nx])).astype(np.int64).reshape(S, N)
    gap = float(info.mip_gap) if math.isfinite(info.mip_gap) else math.inf
    obj = placement_objective(p, x) if use_cap else _objective_without_cap(p, x)
    return PlacementSolution(
        x,
        float(obj if obj is not None else -h.getInfo().objective_function_value),
        max(gap, 0.0),
        status,
        False,
        time.perf_counter() - t0,
    )


def _objective_without_cap(p: PlacementProblem, x: np.ndarray) -> float | None:
    loose = PlacementProblem(**{**p.__dict__, "use_cap_cores": np.full(len(p.free_cpu_m), np.inf)})
    return placement_objective(loose, x)


def placement_problem(
    app: AppSpec,
    model: PerfModel,
    lam: float,
    replicas: Mapping[str, int],
    cluster: ClusterSpec,
    network: NetworkModel,
    max_node_util: float = 0.8,
) -> tuple[PlacementProblem, list[str]]:
    """The placement MIP of ``app``'s workloads (``replicas``: ``namespace/name`` → pods) on ``cluster`` at user
    rate ``lam`` (req/s); returns the problem and the workload key of each row."""
    info = _workload_info(app)
    keys = list(info)
    by_key = {}
    for obj, w in zip(app.deployments, app.workloads):
        meta = obj.get("metadata") or {}
        by_key[f"{meta.get('namespace') or 'default'}/{meta['name']}"] = w
    S, N = len(keys), cluster.nodes
    r = np.array([int(replicas.get(k, by_key[k].replicas)) for k in keys], dtype=np.int64)
    cpu = np.array([by_key[k].pod_requests.cpu_m for k in keys], dtype=np.float64)
    mem = np.array([by_key[k].pod_requests.memory_bytes for k in keys], dtype=np.float64)
    svc_pos = [model.pos.get(info[k][0]) for k in keys]
    use = np.zeros(S)
    for i, s in enumerate(svc_pos):
        if s is not None and r[i] > 0:
            use[i] = lam * model.visits[s] * model.cpu_s[s] / r[i]
            lim = info[keys[i]][2]
            use[i] = min(use[i], lim if lim > 0 else cluster.cpu_m / 1000.0)
    bg_cpu = np.zeros(N)
    bg_mem = np.zeros(N)
    bg_use = np.zeros(N)
    bg_pods = np.zeros(N)
    for b in cluster.background:
        bg_cpu[b.node] += b.cpu_request_m
        bg_mem[b.node] += b.memory_request_bytes
        bg_use[b.node] += b.cpu_use_m / 1000.0
        bg_pods[b.node] += 1
    zones = [cluster.zones[i % len(cluster.zones)] if cluster.zones else "" for i in range(N)]
    _, zid = np.unique(np.array(zones), return_inverse=True)
    row_of_svc: dict[int, int] = {}
    for i, s in enumerate(svc_pos):
        if s is not None:
            row_of_svc.setdefault(s, i)
    delay = network.class_delay_ms
    per_byte = network.class_ms_per_byte
    e_list, wn, wz = [], [], []
    for k, (a, b, m, _par) in enumerate(model.edges):
        if a not in row_of_svc or b not in row_of_svc or m <= 0:
            continue
        rate = lam * model.visits[a] * m
        d = delay + model.e_bytes[k] * per_byte
        e_list.append((row_of_svc[a], row_of_svc[b]))
        wn.append(rate * max(d[1] - d[0], 0.0))
        wz.append(rate * max(d[2] - d[1], 0.0))
    prob = PlacementProblem(
        replicas=r,
        pod_cpu_m=cpu,
        pod_mem_bytes=mem,
        pod_use_cores=use,
        free_cpu_m=np.full(N, float(cluster.cpu_m)) - bg_cpu,
        free_mem_bytes=np.full(N, float(cluster.memory_bytes)) - bg_mem,
        free_pods=np.full(N, float(cluster.max_pods)) - bg_pods,
        use_cap_cores=np.maximum(max_node_util * cluster.cpu_m / 1000.0 - bg_use, 0.0),
        zone=zid.astype(np.int64),
        edges=np.array(e_list, dtype=np.int64).reshape(-1, 2),
        w_node=np.array(wn, dtype=np.float64),
        w_zone=np.array(wz, dtype=np.float64),
    )
    return prob, keys


# ---- the whole plan, cached per run ----------------------------------------------------------------------


@dataclass
class ReferencePlan:
    """The reference's plan for one run: ``workloads`` (W,) autoscaled ``namespace/name``; ``replicas`` (T, W)
    per minute; ``placements``: per distinct replica vector (a tuple over ``workloads``), the target pods per
    (workload key, node index) (empty when the MIP found no placement in time: kube-scheduler's default
    scoring places those pods); ``mip_gaps`` (inf for those) / ``solve_s`` / ``relaxed`` per solve."""

    workloads: list[str]
    replicas: np.ndarray
    placements: dict[tuple[int, ...], dict[str, np.ndarray]] = field(default_factory=dict)
    mip_gaps: list[float] = field(default_factory=list)
    solve_s: list[float] = field(default_factory=list)
    relaxed: list[bool] = field(default_factory=list)

    def summary(self) -> dict[str, float]:
        """``{"solves", "unsolved" (no placement found in time), "mip_gap_max", "mip_gap_mean" (over the solved),
        "solve_s_total", "relaxed"}`` of the placement MIPs."""
        g = np.asarray(self.mip_gaps or [0.0])
        solved = g[np.isfinite(g)]
        return {
            "solves": float(len(self.mip_gaps)),
            "unsolved": float(len(g) - len(solved)),
            "mip_gap_max": float(solved.max()) if len(solved) else 0.0,
            "mip_gap_mean": float(solved.mean()) if len(solved) else 0.0,
            "solve_s_total": float(sum(self.solve_s)),
            "relaxed": float(sum(self.relaxed)),
        }


_PLANS: dict[str, ReferencePlan] = {}


def reference_plan(
    app: AppSpec,
    rps: Sequence[float],
    cluster: ClusterSpec,
    network: NetworkModel,
    workloads: Sequence[str],
    price_ms_per_core: float = DEFAULT_PRICE_MS_PER_CORE,
    time_limit_s: float = 60.0,
) -> ReferencePlan:
    """The reference's replicas per minute and placement per distinct replica vector (cached per process by
    app, rates, cluster, network and price: the seeds of one bench cell share it)."""
    rps = np.asarray(rps, dtype=np.float64)
    key = hashlib.sha256(
        repr((app.name, app.source, rps.tobytes(), cluster, network, tuple(workloads), price_ms_per_core)).encode()
    ).hexdigest()
    if key in _PLANS:
        return _PLANS[key]
    fixed_cores = sum(
        w.replicas * w.pod_requests.cpu_m / 1000.0
        for obj, w in zip(app.deployments, app.workloads)
        if f"{(obj.get('metadata') or {}).get('namespace') or 'default'}/{obj['metadata']['name']}" not in workloads
    )
    budget = cluster.nodes * cluster.cpu_m / 1000.0 - sum(b.cpu_request_m for b in cluster.background) / 1000.0
    budget = 0.9 * budget - fixed_cores
    reps = foresight_replicas(app, rps, workloads, price_ms_per_core, cluster.cpu_m / 1000.0, budget)
    plan = ReferencePlan(list(workloads), reps)
    model = PerfModel(app, network)
    manifest = tuple(
        next(w.replicas for obj, w in zip(app.deployments, app.workloads) if _key(obj) == k) for k in workloads
    )
    vectors = [(manifest, float(rps[0]) if len(rps) else 0.0)]
    for t in range(1, len(rps)):
        vectors.append((tuple(int(x) for x in reps[t]), float(rps[t])))
    for vec, lam in vectors:
        if vec in plan.placements:
            continue
        prob, keys = placement_problem(app, model, lam, dict(zip(workloads, vec)), cluster, network)
        sol = solve_placement(prob, time_limit_s)
        plan.placements[vec] = {} if sol.x is None else {k: sol.x[i] for i, k in enumerate(keys)}
        plan.mip_gaps.append(sol.mip_gap)
        plan.solve_s.append(sol.solve_s)
        plan.relaxed.append(sol.relaxed)
    _PLANS[key] = plan
    return plan


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta['name']}"


# ---- the stack -----------------------------------------------------------------------------------------


@dataclass
class PlanScore:
    """A score plugin that follows the reference's placement plan: 100 on the nodes where the plan wants more
    pods of the pod's workload than run there now, 0 elsewhere (and 0 everywhere for a pod outside the plan).
    ``target``: workload key → (N,) pods per node, replaced by the hook when the plan changes."""

    workload_of: Mapping[str, str]
    target: dict[str, np.ndarray] = field(default_factory=dict)
    name: str = "OfflinePlan"
    weight: int = 100

    def score(self, pod: PodInfo, candidates: Sequence[str], index: ClusterIndex) -> np.ndarray:
        out = np.zeros(len(candidates), dtype=np.int64)
        w = self.workload_of.get(pod.service)
        want = self.target.get(w) if w is not None else None
        if want is None:
            return out
        have = index.service_nodes.get(pod.service)
        pos = index.positions(candidates)
        ok = pos >= 0
        deficit = want[pos[ok]] - (have[pos[ok]] if have is not None else 0.0)
        out[ok] = np.where(deficit > 0, 100, 0)
        return out


def reference_stack(ctx: StackContext) -> StackBuild:
    """The ``offline-reference`` stack (module docstring): ``ctx.rps`` must hold the run's rates."""
    if ctx.rps is None:
        raise ValueError("stack offline-reference: needs the run's request rates (StackContext.rps)")
    price = float(ctx.params.get("price", DEFAULT_PRICE_MS_PER_CORE))
    workloads = autoscaled_workloads(ctx.app)
    plan = reference_plan(ctx.app, ctx.rps, ctx.cluster, ctx.config.network, workloads, price)
    workload_of = {parse_workload(obj).service: _key(obj) for obj in ctx.app.deployments}
    manifest = tuple(
        next(w.replicas for obj, w in zip(ctx.app.deployments, ctx.app.workloads) if _key(obj) == k) for k in workloads
    )
    scorer = PlanScore(workload_of, dict(plan.placements[manifest]))

    def sync(sim: Simulation) -> None:
        t = sim.minute
        vec = tuple(int(x) for x in plan.replicas[t])
        scorer.target = dict(plan.placements[vec])
        for w, r in zip(workloads, vec):
            if current_replicas(sim, w) != r:
                sim.scale(w, r)

    plugins = [*default_score_plugins(terms_lookup(ctx.app)), scorer]
    return StackBuild(
        KubeSchedulerModel(plugins=plugins), hooks=(PeriodicHook("offline-reference", AUTOSCALER_PERIOD_MIN, sync),)
    )


@register_stack(
    "offline-reference",
    "perfect-foresight autoscaling + a placement planned under a simplified model (HiGHS MIP), not a bound",
    knobs=(Knob("price", 0.0, 1e6, help="price of a requested core, ms of mean user latency (default 30)"),),
)
def offline_reference(ctx: StackContext) -> StackBuild:
    """The offline reference (:mod:`policy.sim.reference`): replicas per minute chosen with perfect foresight
    of the request rates, placement planned by a MIP solved with HiGHS. Needs ``ctx.rps``."""
    return reference_stack(ctx)


#: Stacks the bench leaves out of its default stack list (run them with ``--policies``).
REFERENCE_STACKS = ("offline-reference",)
