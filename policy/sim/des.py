"""A discrete-event version (simpy) of the performance model of :mod:`policy.sim.model`, for cross-checks on
small cases (a few services, 1-3 nodes): the same pods, placement, parameters and rules, simulated request
by request instead of by stationary formulas and Monte Carlo composition.

What it simulates, event by event:

- user requests arrive as a Poisson process at rate λ and enter at an entry service (the app's shares);
- a visit picks a ready pod of the service at random; if the pod already holds ``max_inflight`` requests in
  its run queue the visit fails at once; else its CPU work (gamma, mean ``cpu_ms_per_request``, cv
  ``cpu_cv``) joins the pod's processor-sharing run queue, then the visit spends its own time (lognormal),
  then makes its calls: sequential edges one call after another (``floor(m)`` + Bernoulli(frac) calls per
  edge), all parallel calls at once, waiting for the last;
- CPU is shared on each node by water-filling (CFS): each pod with ``n >= 2`` requests can use up to
  ``min(limit, n)`` cores, a lone request one core (CFS quota lets a short request run at full speed); the
  node's cores (minus background tenants' use) go to the pods in proportion to
  their CPU requests (``cpu.weight``), capped by what each can use, the rest redistributed; inside a pod the
  requests share its cores equally (each at most one core);
- a call costs the network delay of its link (same node / zone / cross zone + bytes × per-byte cost); with the
  topology network (:mod:`policy.sim.network`) instead: the pair's delay, a lognormal jitter draw and the sidecar's
  latency, then the request as a flow from caller to callee before the visit and the response as a flow back
  after it. A flow crosses the links of its path (NICs, rack uplinks, zone and region links); each link
  shares its capacity equally among the flows on it, and a flow moves at ``min(flow cap, min over its links of
  C_l / n_l)`` (its bottleneck share, recomputed at every flow arrival and departure); a flow that finds a
  link of its path holding ``max_flows`` flows is refused and the call attempt fails; with a
  per-try timeout the caller stops waiting after ``timeout_ms`` (the callee's work goes on) and retries, up
  to ``retries`` times, after ``retry_backoff_ms``;
- a user request fails when a call fails after its retries, a visit finds no ready pod or a full run queue,
  or it takes longer than the app's timeout.

:func:`simulate` runs it for ``duration_s`` after a warm-up and returns latencies with batch-means 95%
confidence intervals. It is slow (pure Python, ~10^5 visits/s): for tests and the cross-check benchmark.
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass, field

import numpy as np
import simpy

from .model import PerfModel, PodArrays, zone_ids
from .network import BoundNetwork

__all__ = ["BEST_EFFORT_WEIGHT_CORES", "water_fill", "DesResult", "simulate"]

#: CPU weight of a pod without a CPU request (cgroup cpu.shares = 2 of 1024 per core, BestEffort).
BEST_EFFORT_WEIGHT_CORES = 2.0 / 1024.0


@dataclass
class _PodQ:
    limit: float
    weight: float
    K: int
    heap: list = field(default_factory=list)  # (finish virtual time, seq, event)
    V: float = 0.0  # work attained by each request in the queue since the start (core-seconds)
    rate: float = 0.0  # cores per request now
    busy_core_s: float = 0.0
    arrivals: int = 0
    refused: int = 0


class _NodeCPU:
    """One node's CPU: processor-sharing queues of its pods, coupled by weighted water-filling."""

    def __init__(self, env: simpy.Environment, cores: float, bg_use: float, bg_weight: float):
        self.env = env
        self.cores = cores
        self.bg_use = bg_use
        self.bg_weight = bg_weight
        self.pods: list[_PodQ] = []
        self.last = 0.0
        self.gen = 0
        self.seq = 0

    def add(self, q: _PodQ) -> int:
        self.pods.append(q)
        return len(self.pods) - 1

    def submit(self, i: int, work_core_s: float) -> simpy.Event | None:
        q = self.pods[i]
        q.arrivals += 1
        if len(q.heap) >= q.K:
            q.refused += 1
            return None
        self._advance()
        ev = self.env.event()
        self.seq += 1
        heapq.heappush(q.heap, (q.V + work_core_s, self.seq, ev))
        self._reallocate()
        self._reschedule()
        return ev

    def _advance(self) -> None:
        dt = self.env.now - self.last
        if dt > 0:
            for q in self.pods:
                if q.heap:
                    q.V += q.rate * dt
                    q.busy_core_s += q.rate * len(q.heap) * dt
        self.last = self.env.now

    def _reallocate(self) -> None:
        active = [q for q in self.pods if q.heap]
        # a lone request may use a whole core even under a sub-core limit (CFS quota, see policy.sim.model)
        caps = [1.0 if len(q.heap) == 1 else min(q.limit, float(len(q.heap))) for q in active]
        if sum(caps) + self.bg_use <= self.cores:  # no contention: everyone gets what it can use
            for q, a in zip(active, caps):
                q.rate = a / len(q.heap)
            return
        ws = [q.weight for q in active]
        # background tenants: a constant demand with its own weight
        caps.append(self.bg_use)
        ws.append(max(self.bg_weight, BEST_EFFORT_WEIGHT_CORES) if self.bg_use > 0 else 1.0)
        alloc = water_fill(self.cores, caps, ws)
        for q, a in zip(active, alloc):
            q.rate = a / len(q.heap)

    def _reschedule(self) -> None:
        self.gen += 1
        best = math.inf
        for q in self.pods:
            if q.heap and q.rate > 0:
                best = min(best, (q.heap[0][0] - q.V) / q.rate)
        if best < math.inf:
            g = self.gen
            ev = self.env.timeout(max(best, 0.0))
            ev.callbacks.append(lambda _e, g=g: self._wake(g))

    def _wake(self, g: int) -> None:
        if g != self.gen:
            return
        self._advance()
        for q in self.pods:
            while q.heap and q.heap[0][0] - q.V <= 1e-12 * max(1.0, abs(q.V)):
                _f, _s, ev = heapq.heappop(q.heap)
                ev.succeed()
        self._reallocate()
        self._reschedule()


def water_fill(capacity: float, caps: list[float], weights: list[float]) -> list[float]:
    """Share ``capacity`` among claimants in proportion to ``weights``, each capped at ``caps[i]``, the
    leftover of capped ones redistributed (max-min fairness with weights). Returns the allocations."""
    n = len(caps)
    alloc = [0.0] * n
    left = capacity
    todo = [i for i in range(n) if caps[i] > 0]
    while todo and left > 1e-15:
        wsum = sum(weights[i] for i in todo)
        level = left / wsum
        capped = [i for i in todo if caps[i] - alloc[i] <= weights[i] * level + 1e-15]
        if not capped:
            for i in todo:
                alloc[i] += weights[i] * level
            break
        for i in capped:
            left -= caps[i] - alloc[i]
            alloc[i] = caps[i]
        todo = [i for i in todo if i not in capped]
    return alloc


class _Links:
    """The links of a topology network as processor-sharing servers of flows (module docstring)."""

    def __init__(self, env: simpy.Environment, net: BoundNetwork):
        self.env = env
        self.net = net
        self.cap = net.capacity_bps.tolist()
        self.flow_bps = float(net.flow_bps)
        self.K = int(net.spec.max_flows)
        self.n = [0] * len(self.cap)
        self.flows: dict[int, list] = {}  # id -> [remaining bytes, links, event, rate]
        self.last = 0.0
        self.gen = 0
        self.seq = 0
        self.rack_up, self.rack_down = net.rack_up.tolist(), net.rack_down.tolist()
        self.nic_out, self.nic_in = net.nic_out.tolist(), net.nic_in.tolist()
        self.rack, self.zone, self.region = net.node_rack.tolist(), net.node_zone.tolist(), net.node_region.tolist()
        self.flows_through = [0] * len(self.cap)  # arrivals per link (admitted or not), for checks

    def path(self, a: int, b: int) -> tuple[int, ...]:
        if a == b:
            return ()
        links = [self.nic_out[a]]
        if self.rack[a] != self.rack[b]:
            links += [self.rack_up[self.rack[a]], self.rack_down[self.rack[b]]]
        if self.zone[a] != self.zone[b]:
            links.append(int(self.net.zone_link[self.zone[a], self.zone[b]]))
        if self.region[a] != self.region[b]:
            links.append(int(self.net.region_link[self.region[a], self.region[b]]))
        links.append(self.nic_in[b])
        return tuple(x for x in links if x >= 0)

    def start(self, nbytes: float, links: tuple[int, ...]) -> simpy.Event | None:
        """A flow of ``nbytes`` over ``links``: the event of its end, or None when a link refuses it."""
        for link in links:
            self.flows_through[link] += 1
        if any(self.n[link] >= self.K for link in links):
            return None
        self._advance()
        ev = self.env.event()
        self.seq += 1
        self.flows[self.seq] = [nbytes, links, ev, 0.0]
        for link in links:
            self.n[link] += 1
        self._reallocate()
        self._reschedule()
        return ev

    def _advance(self) -> None:
        dt = self.env.now - self.last
        if dt > 0:
            for f in self.flows.values():
                f[0] -= f[3] * dt
        self.last = self.env.now

    def _reallocate(self) -> None:
        for f in self.flows.values():
            f[3] = min([self.flow_bps] + [self.cap[link] / self.n[link] for link in f[1]])

    def _reschedule(self) -> None:
        self.gen += 1
        best = min((f[0] / f[3] for f in self.flows.values() if f[3] > 0), default=math.inf)
        if best < math.inf:
            g = self.gen
            ev = self.env.timeout(max(best, 0.0))
            ev.callbacks.append(lambda _e, g=g: self._wake(g))

    def _wake(self, g: int) -> None:
        if g != self.gen:
            return
        self._advance()
        done = [k for k, f in self.flows.items() if f[0] <= 1e-9 * max(1.0, f[3])]
        for k in done:
            f = self.flows.pop(k)
            for link in f[1]:
                self.n[link] -= 1
            f[2].succeed()
        self._reallocate()
        self._reschedule()


@dataclass(frozen=True)
class DesResult:
    """Requests that started in the measured window: ``latency_ms`` of the successful ones (start order),
    ``start_s`` their start times, ``offered`` / ``failed`` counts; per pod ``pod_busy_cores`` (mean cores
    in use), ``pod_refused_frac``; ``batches`` for the confidence intervals."""

    latency_ms: np.ndarray
    start_s: np.ndarray
    offered: int
    failed: int
    pod_busy_cores: np.ndarray
    pod_refused_frac: np.ndarray
    window_s: tuple[float, float]
    batches: int = 20

    @property
    def fail_frac(self) -> float:
        return self.failed / self.offered if self.offered else 0.0

    def _batches(self) -> list[np.ndarray]:
        lo, hi = self.window_s
        edges = np.linspace(lo, hi, self.batches + 1)
        k = np.searchsorted(edges, self.start_s, side="right") - 1
        return [self.latency_ms[k == i] for i in range(self.batches)]

    def estimate(self, stat: str) -> tuple[float, float]:
        """(estimate, 95% CI half-width) of ``mean`` or ``pNN`` (e.g. ``p95``) by batch means."""
        f = np.mean if stat == "mean" else (lambda x: np.percentile(x, float(stat[1:])))
        est = float(f(self.latency_ms)) if len(self.latency_ms) else math.nan
        per = np.array([f(b) for b in self._batches() if len(b) > 1])
        if len(per) < 2:
            return est, math.inf
        t = 2.093 if len(per) == 20 else 2.0  # Student t, 19 dof
        return est, float(t * per.std(ddof=1) / math.sqrt(len(per)))


class _Sim:
    def __init__(
        self,
        model: PerfModel,
        pods: PodArrays,
        node_cores: np.ndarray,
        node_zones: list[str],
        rng: random.Random,
        node_bg_cores: np.ndarray | None,
        node_bg_request_cores: np.ndarray | None,
        net: BoundNetwork | None = None,
    ):
        self.m = model
        self.env = simpy.Environment()
        self.rng = rng
        self.net = net
        self.links = _Links(self.env, net) if net is not None and net.n_links else None
        N = len(node_cores)
        bg = np.zeros(N) if node_bg_cores is None else np.asarray(node_bg_cores, np.float64)
        bgr = np.zeros(N) if node_bg_request_cores is None else np.asarray(node_bg_request_cores, np.float64)
        self.nodes = [_NodeCPU(self.env, float(node_cores[i]), float(bg[i]), float(bgr[i])) for i in range(N)]
        self.zid = zone_ids(list(node_zones))
        S = len(model.services)
        self.pods_of: list[list[int]] = [[] for _ in range(S)]
        self.pod_node = [int(n) for n in pods.node]
        self.pod_slot: list[int] = []
        self.queues: list[_PodQ] = []
        for p in range(len(pods.service)):
            s = int(pods.service[p])
            w = float(pods.request_cores[p]) or BEST_EFFORT_WEIGHT_CORES
            q = _PodQ(float(pods.limit_cores[p]), w, int(model.max_inflight[s]))
            self.queues.append(q)
            self.pod_slot.append(self.nodes[self.pod_node[p]].add(q))
            self.pods_of[s].append(p)
        self.seq_edges: list[list[int]] = [[] for _ in range(S)]
        self.par_edges: list[list[int]] = [[] for _ in range(S)]
        for e in range(len(model.edges)):
            if model.e_m[e] <= 0:
                continue
            (self.par_edges if model.e_par[e] else self.seq_edges)[int(model.e_a[e])].append(e)
        self.starts: list[float] = []
        self.delay = model.network.class_delay_ms.tolist()
        self.per_byte = model.network.class_ms_per_byte.tolist()
        self.zid = self.zid.tolist()
        self.mu = model.base_mu.tolist()
        self.sigma = model.base_sigma.tolist()
        self.em = model.e_m.tolist()
        self.eb = [int(x) for x in model.e_b]
        self.etau = (model.e_timeout_ms / 1000.0).tolist()
        self.eR = [int(x) for x in model.e_retries]
        self.eback = (model.e_backoff_ms / 1000.0).tolist()
        self.ebytes = model.e_bytes.tolist()
        self.ereq = model.e_req_bytes.tolist()
        self.eresp = model.e_resp_bytes.tolist()

    # ---- random draws (Python's random: scalar draws are ~10x cheaper than numpy's) ---------------------
    def work(self, s: int) -> float:
        x = float(self.m.cpu_s[s])
        cv = float(self.m.cpu_cv[s])
        if cv <= 0 or x <= 0:
            return x
        if cv == 1.0:
            return self.rng.expovariate(1.0 / x)
        k = 1.0 / (cv * cv)
        return self.rng.gammavariate(k, x / k)

    def own_s(self, s: int) -> float:
        return math.exp(self.mu[s] + self.sigma[s] * self.rng.gauss(0.0, 1.0)) / 1000.0

    def kcalls(self, e: int) -> int:
        m = self.em[e]
        w = math.floor(m + 1e-12)
        return w + (1 if self.rng.random() < m - w else 0)

    def net_s(self, e: int, na: int, nb: int) -> float:
        """The call's fixed network time (s): with the topology network its delay, jitter and sidecar latency
        (its bytes travel as flows, :meth:`flow`); else the classic class delay + bytes × per-byte cost."""
        if self.net is None:
            cls = int(na != nb) + int(self.zid[na] != self.zid[nb])
            return (self.delay[cls] + self.ebytes[e] * self.per_byte[cls]) / 1000.0
        d = float(self.net.delay_ms[na, nb]) + self.net.spec.sidecar_ms
        if self.net.jitter_mean_ms is not None:
            mean = float(self.net.jitter_mean_ms[na, nb])
            if mean > 0:
                s2 = math.log1p(self.net.spec.jitter_cv**2)
                d += self.rng.lognormvariate(math.log(mean) - s2 / 2, math.sqrt(s2))
        return d / 1000.0

    def flow(self, nbytes: float, a: int, b: int):
        """Send ``nbytes`` from node ``a`` to ``b`` (a generator); returns True when a link refused it."""
        if nbytes <= 0:
            return False
        if a == b:
            yield self.env.timeout(nbytes / self.net.same_node_bps)
            return False
        links = self.links.path(a, b) if self.links is not None else ()
        if not links:
            yield self.env.timeout(nbytes / self.net.flow_bps)
            return False
        ev = self.links.start(nbytes, links)
        if ev is None:
            return True
        yield ev
        return False

    def pick(self, s: int) -> int | None:
        cands = self.pods_of[s]
        if not cands:
            return None
        return cands[self.rng.randrange(len(cands))] if len(cands) > 1 else cands[0]

    # ---- processes ------------------------------------------------------------------------------------
    def visit(self, s: int, pod: int):
        """A visit to ``pod`` of service ``s`` (a generator to delegate to); returns True when it failed."""
        node = self.pod_node[pod]
        done = self.nodes[node].submit(self.pod_slot[pod], self.work(s))
        if done is None:
            return True
        yield done
        yield self.env.timeout(self.own_s(s))
        failed = False
        for e in self.seq_edges[s]:
            for _ in range(self.kcalls(e)):
                f = yield from self.call(e, node)
                failed |= f
        par = [self.env.process(self.call(e, node)) for e in self.par_edges[s] for _ in range(self.kcalls(e))]
        if par:
            yield self.env.all_of(par)
            failed |= any(p.value for p in par)
        return failed

    def attempt(self, b: int, pod: int, net_s: float, e: int = -1, caller_node: int = -1):
        yield self.env.timeout(net_s)
        if self.net is None:
            f = yield from self.visit(b, pod)
            return f
        callee_node = self.pod_node[pod]
        refused = yield from self.flow(self.ereq[e], caller_node, callee_node)
        if refused:
            return True
        f = yield from self.visit(b, pod)
        refused = yield from self.flow(self.eresp[e], callee_node, caller_node)
        return f or refused

    def call(self, e: int, caller_node: int):
        b = self.eb[e]
        tau = self.etau[e]
        R = self.eR[e]
        for r in range(R + 1):
            pod = self.pick(b)
            if pod is None:
                failed = True
            elif tau < math.inf:
                att = self.env.process(
                    self.attempt(b, pod, self.net_s(e, caller_node, self.pod_node[pod]), e, caller_node)
                )
                res = yield att | self.env.timeout(tau)
                failed = res[att] if att in res else True
            else:
                failed = yield from self.attempt(b, pod, self.net_s(e, caller_node, self.pod_node[pod]), e, caller_node)
            if not failed:
                return False
            if r < R:
                yield self.env.timeout(self.eback[e])
        return True

    def request(self, entry: int, out: list):
        t0 = self.env.now
        self.starts.append(t0)
        pod = self.pick(entry)
        if pod is None:
            out.append((t0, 0.0, True))
            return
        failed = yield from self.visit(entry, pod)
        out.append((t0, (self.env.now - t0) * 1000.0, failed))

    def source(self, lam: float, until_s: float, out: list):
        entries = [int(x) for x in self.m.entry_idx]
        cum = np.cumsum(self.m.entry_p).tolist()
        while True:
            yield self.env.timeout(self.rng.expovariate(lam))
            if self.env.now >= until_s:
                return
            if len(entries) == 1:
                e = entries[0]
            else:
                u = self.rng.random()
                e = entries[min(next((i for i, c in enumerate(cum) if u < c), len(cum) - 1), len(entries) - 1)]
            self.env.process(self.request(e, out))


def simulate(
    model: PerfModel,
    lam_rps: float,
    pods: PodArrays,
    node_cores: np.ndarray,
    node_zones: list[str],
    *,
    duration_s: float,
    warmup_s: float | None = None,
    seed: int = 0,
    timeout_ms: float = math.inf,
    node_bg_cores: np.ndarray | None = None,
    node_bg_request_cores: np.ndarray | None = None,
    drain_s: float = 60.0,
    batches: int = 20,
    net: BoundNetwork | None = None,
) -> DesResult:
    """Simulate ``warmup_s + duration_s`` seconds at ``lam_rps`` user requests/s (> 0) and measure the
    requests that start after the warm-up (default: a tenth of ``duration_s``). Requests still running at
    the end get ``drain_s`` more seconds to finish (none arrive then); any still unfinished count as failed.
    ``timeout_ms``: the app's end-to-end timeout (a slower request counts as failed). ``net``: the topology
    network of these nodes (delay matrix, jitter, links, sidecar latency) instead of the model's classic one."""
    if not lam_rps > 0:
        raise ValueError(f"lam_rps: must be > 0, got {lam_rps!r}")
    warm = duration_s / 10.0 if warmup_s is None else warmup_s
    sim = _Sim(model, pods, node_cores, node_zones, random.Random(seed), node_bg_cores, node_bg_request_cores, net)
    out: list[tuple[float, float, bool]] = []
    end = warm + duration_s
    sim.env.process(sim.source(lam_rps, end, out))
    sim.env.run(until=warm)
    for q in sim.queues:  # measure utilisation in the window only
        q.busy_core_s = 0.0
        q.arrivals = 0
        q.refused = 0
    sim.env.run(until=end)
    for nd in sim.nodes:
        nd._advance()
    busy = np.array([q.busy_core_s / duration_s for q in sim.queues])
    refused = np.array([q.refused / q.arrivals if q.arrivals else 0.0 for q in sim.queues])
    sim.env.run(until=end + drain_s)
    measured = [r for r in out if r[0] >= warm]
    # requests started in the window but never finished (only possible far past saturation)
    started = sum(1 for t in sim.starts if t >= warm)
    unfinished = started - len(measured)
    ok = [(t, lat) for t, lat, f in measured if not f and lat <= timeout_ms]
    failed = sum(1 for _t, lat, f in measured if f or lat > timeout_ms) + unfinished
    lat = np.array([x for _t, x in ok])
    t0 = np.array([t for t, _x in ok])
    return DesResult(lat, t0, started, failed, busy, refused, (warm, end), batches)
