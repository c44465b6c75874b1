"""The performance model of a microservice application on a cluster, one time step at a time.

Per step (default one minute) with user arrival rate λ (requests/s):

1. **Visits.** Each user request enters at an entry service (shares from the app) and calls along the call
   graph: service *s* is visited ``V_s`` times per user request, ``V_callee += V_caller × calls_per_request``
   (edges closing a cycle are dropped; a self-edge multiplies the service's own CPU work by ``1 + m``).
2. **Load balancing.** A service's rate ``λ V_s`` is split evenly over its ready pods (kube-proxy's random
   backend choice).
3. **CPU.** A pod demands ``d_p = λ_p c_s`` cores (``c_s`` CPU-seconds per request). On node *n* with
   allocatable ``C_n`` the pod can use ``κ_p = min(limit_p, max(fair_p, C_n − others_p))`` cores, where
   ``others_p`` is the other pods' demand on the node and ``fair_p`` its request-weighted share of ``C_n``
   (CFS shares). One request runs on at most one core at speed ``min(1, C_n − others_p)``.
4. **Queueing.** Each pod is a processor-sharing server: utilisation ``ρ_p = d_p / κ_p``, service time
   ``S_p = c_s / speed_p``, mean sojourn ``S_p / (1 − ρ_p)`` (M/G/1-PS, insensitive to the job-size
   distribution); a request's sojourn is its work ``S_p`` plus an exponential slow-down with mean
   ``S_p ρ_p / (1 − ρ_p)``, so it is never shorter than its own service time. Above ``rho_max`` the pod is
   saturated: it serves at ``rho_max`` and drops the excess ``1 − rho_max/ρ_p`` of its requests.
   Each visit also takes the service's own non-CPU time (lognormal, calibrated median and mean).
5. **Network.** Each call adds a delay by where caller and callee pods sit: same node < same zone <
   cross zone (:class:`NetworkModel`).
6. **Requests.** ``n_samples`` user requests are drawn per step: each picks an entry, pods at random per
   call, and accumulates latency along its call tree (sequential calls add up, parallel calls take the
   max). A request fails when any pod on its path drops it, a service on its path has no ready pod, or it
   exceeds the app's timeout. Latency percentiles are over successful requests.

Cross-node call % is computed exactly from the rates and pod placement, not sampled.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .app import AppSpec


@dataclass(frozen=True)
class NetworkModel:
    """One-way request + response delay per call (ms) by placement of caller and callee."""

    same_node_ms: float = 0.05
    same_zone_ms: float = 0.5
    cross_zone_ms: float = 2.0

    def matrix(self, zones: list[str]) -> np.ndarray:
        """(N, N) float64 delay (ms) between nodes with these zone labels ('' = one default zone)."""
        z = np.array(zones, dtype=object)
        same_zone = z[:, None] == z[None, :]
        d = np.where(same_zone, self.same_zone_ms, self.cross_zone_ms).astype(np.float64)
        np.fill_diagonal(d, self.same_node_ms)
        return d


@dataclass(frozen=True)
class PodArrays:
    """The ready pods of one step: ``service`` (P,) int service index, ``node`` (P,) int node index,
    ``limit_cores`` (P,) float (inf when no limit), ``request_cores`` (P,) float."""

    service: np.ndarray
    node: np.ndarray
    limit_cores: np.ndarray
    request_cores: np.ndarray


@dataclass(frozen=True)
class StepStats:
    """What one step produced.

    ``latency_ms``: (k,) latencies of the successful sampled requests; ``fail_frac``: fraction of user
    requests that failed (0..1); ``calls_rps`` / ``cross_calls_rps``: service-to-service calls per second,
    all and crossing nodes; ``pod_cpu_cores``: (P,) CPU in use per pod; ``pod_rps``: (P,) arrival rate per
    pod; ``pod_sojourn_ms``: (P,) mean sojourn; ``edge_rps``: (E,) calls/s per edge of ``PerfModel.edges``.
    """

    latency_ms: np.ndarray
    fail_frac: float
    calls_rps: float
    cross_calls_rps: float
    pod_cpu_cores: np.ndarray
    pod_rps: np.ndarray
    pod_sojourn_ms: np.ndarray
    edge_rps: np.ndarray


class PerfModel:
    """Precomputed arrays of an :class:`AppSpec` for fast steps. ``services`` orders the service index."""

    def __init__(self, app: AppSpec, network: NetworkModel | None = None, rho_max: float = 0.98):
        self.app = app
        self.network = network or NetworkModel()
        self.rho_max = rho_max
        self.services = tuple(app.graph.services)
        self.pos = {s: i for i, s in enumerate(self.services)}
        S = len(self.services)
        p = [app.params[s] if s in app.params else None for s in self.services]
        self.cpu_s = np.array([(x.cpu_ms_per_request if x else 0.2) / 1000.0 for x in p])
        p50 = np.array([x.latency_p50_ms if x else 1.0 for x in p])
        mean = np.array([x.latency_mean_ms if x else 1.2 for x in p])
        # lognormal with median p50 and mean `mean`: sigma^2 = 2 ln(mean / p50)
        self.base_mu = np.log(p50)
        self.base_sigma = np.sqrt(2.0 * np.log(np.maximum(mean, p50 * 1.000001) / p50))
        # edges, minus self-edges (folded into CPU work) and cycle-closing edges
        edges = [(self.pos[e.caller], self.pos[e.callee], float(e.calls_per_request or 1.0), bool(e.parallel))
                 for e in app.graph.edges]
        for a, b, m, _ in edges:
            if a == b:
                self.cpu_s[a] *= 1.0 + m
        entries = [self.pos[s] for s in app.entry if s in self.pos]
        order, kept = _dag(S, [(a, b) for a, b, _, _ in edges if a != b], entries)
        keep = set(kept)
        self.edges = [(a, b, m, par) for a, b, m, par in edges if a != b and (a, b) in keep]
        self.topo = order  # callers before callees
        self.visits = np.zeros(S)
        for s, share in app.entry.items():
            if s in self.pos:
                self.visits[self.pos[s]] += share
        out_edges: dict[int, list[tuple[int, float, bool]]] = {i: [] for i in range(S)}
        for a, b, m, par in self.edges:
            out_edges[a].append((b, m, par))
        self.out_edges = out_edges
        for s in self.topo:
            for b, m, _par in out_edges[s]:
                self.visits[b] += self.visits[s] * m
        self.entry_idx = np.array([self.pos[s] for s in app.entry if s in self.pos], dtype=np.int64)
        self.entry_p = np.array([app.entry[s] for s in app.entry if s in self.pos])
        self.entry_p = self.entry_p / self.entry_p.sum()

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

    def step(self, lam_rps: float, pods: PodArrays, node_cores: np.ndarray, node_zones: list[str],
             rng: np.random.Generator, n_samples: int = 2000, timeout_ms: float = np.inf) -> StepStats:
        """Simulate one step at user arrival rate ``lam_rps`` (>= 0). See the module docstring."""
        S = len(self.services)
        P = len(pods.service)
        n_ready = np.bincount(pods.service, minlength=S).astype(np.float64)
        svc_rate = lam_rps * self.visits
        pod_rps = np.where(n_ready[pods.service] > 0, svc_rate[pods.service] / np.maximum(n_ready[pods.service], 1), 0)
        demand = pod_rps * self.cpu_s[pods.service]
        N = len(node_cores)
        node_demand = np.bincount(pods.node, weights=demand, minlength=N)
        node_req = np.bincount(pods.node, weights=pods.request_cores, minlength=N)
        cap = node_cores[pods.node]
        others = node_demand[pods.node] - demand
        avail = np.maximum(cap - others, 1e-6)
        fair = cap * np.where(node_req[pods.node] > 0, pods.request_cores / np.maximum(node_req[pods.node], 1e-12),
                              1.0 / np.maximum(np.bincount(pods.node, minlength=N)[pods.node], 1))
        kappa = np.minimum(pods.limit_cores, np.maximum(fair, avail))
        kappa = np.maximum(kappa, 1e-6)
        speed = np.minimum(1.0, avail)
        rho = demand / kappa
        drop = np.where(rho > self.rho_max, 1.0 - self.rho_max / np.maximum(rho, 1e-12), 0.0)
        rho_eff = np.minimum(rho, self.rho_max)
        service_ms = 1000.0 * self.cpu_s[pods.service] / speed
        sojourn_ms = service_ms / (1.0 - rho_eff)
        used = np.minimum(demand, kappa)

        # exact call accounting
        share = np.zeros((S, N))
        np.add.at(share, (pods.service, pods.node), 1.0)
        share = share / np.maximum(n_ready[:, None], 1)
        edge_rps = np.array([svc_rate[a] * m for a, _b, m, _ in self.edges])
        same = np.array([float(share[a] @ share[b]) for a, b, _m, _ in self.edges])
        calls = float(edge_rps.sum())
        cross = float((edge_rps * (1.0 - same)).sum()) if len(edge_rps) else 0.0

        if lam_rps <= 0 or n_samples <= 0:
            return StepStats(np.zeros(0), 0.0, calls, cross, used, pod_rps, sojourn_ms, edge_rps)

        delay = self.network.matrix(node_zones)
        pods_of = [np.flatnonzero(pods.service == s) for s in range(S)]
        L = [None] * S
        F = [None] * S
        NODE = [None] * S
        n = n_samples
        for s in reversed(self.topo):
            if self.visits[s] <= 0:
                continue
            cand = pods_of[s]
            if len(cand) == 0:
                L[s] = np.zeros(n)
                F[s] = np.ones(n, dtype=bool)
                NODE[s] = np.full(n, -1)
                continue
            choice = cand[rng.integers(0, len(cand), size=n)]
            node_s = pods.node[choice]
            # deterministic CPU work + PS slow-down (mean S·ρ/(1−ρ), exponential) + own non-CPU time
            own = (service_ms[choice] + rng.exponential(sojourn_ms[choice] - service_ms[choice])
                   + rng.lognormal(self.base_mu[s], self.base_sigma[s], size=n))
            fail = rng.random(n) < drop[choice]
            seq = np.zeros(n)
            par = np.zeros(n)
            for k_e, (b, m, parallel) in enumerate(self.out_edges[s]):
                if L[b] is None:
                    continue
                whole = int(np.floor(m))
                k_calls = whole + (rng.random(n) < (m - whole))
                for k in range(int(k_calls.max(initial=0))):
                    shift = (7919 * (k + 1) + 104729 * k_e + 31 * s) % n
                    lc = np.roll(L[b], shift)
                    nc = np.roll(NODE[b], shift)
                    fc = np.roll(F[b], shift)
                    mask = k_calls > k
                    net = np.where(nc >= 0, delay[node_s, np.maximum(nc, 0)], 0.0)
                    contrib = np.where(mask, net + lc, 0.0)
                    fail |= mask & fc
                    if parallel:
                        par = np.maximum(par, contrib)
                    else:
                        seq += contrib
            L[s] = own + seq + par
            F[s] = fail
            NODE[s] = node_s
        entry = self.entry_idx[rng.choice(len(self.entry_idx), size=n, p=self.entry_p)]
        lat = np.zeros(n)
        failed = np.zeros(n, dtype=bool)
        for e in np.unique(entry):
            m_e = entry == e
            lat[m_e] = L[e][m_e] if L[e] is not None else 0.0
            failed[m_e] = F[e][m_e] if F[e] is not None else True
        failed |= lat > timeout_ms
        return StepStats(lat[~failed], float(failed.mean()), calls, cross, used, pod_rps, sojourn_ms, edge_rps)


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
