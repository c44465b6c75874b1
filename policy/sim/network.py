"""The topology network model: a per-node-pair delay matrix (racks, zones, regions, edge sites), jitter,
links of limited bandwidth shared by the calls crossing them, and an optional service-mesh sidecar.

It replaces the three-class :class:`~policy.sim.model.NetworkModel` when a scenario sets ``network.latency``
or ``network.bandwidth`` (``SimConfig.network_topology``); without it the simulator is unchanged.

**Delay.** A call (request + response) between pods on nodes *a* and *b* costs the round-trip delay
``d_ab`` of the closest level both nodes share: same node < same rack < same zone < cross zone < cross region
(:class:`TopologyNetwork` fields, ms). Zone pairs may carry their own RTT (``zone_rtt_ms``, e.g. edge sites
5-50 ms apart, or drawn uniformly from ``zone_rtt_range_ms``), and ``pair_cv`` gives each node pair a fixed
lognormal multiplier of mean 1 (per-pair heterogeneity: different paths through the fabric), deterministic
per ``seed``.

**Jitter.** Each call adds a random delay ``J > 0``, lognormal with mean ``jitter_ms + jitter_frac × d_ab``
and coefficient of variation ``jitter_cv`` (``σ² = ln(1 + cv²)``, ``μ = ln(mean) − σ²/2``): queueing in
switches and the host stacks makes data-centre RTTs right-skewed with a long tail (Pingmesh, SIGCOMM 2015).
The mean latency of a call rises by the mean jitter, its tail by more (cv 1: the 95th percentile of J is
``exp(1.645 σ − σ²/2) = 2.78`` times its mean).

**Bandwidth.** Links: each node's NIC (``nic_gbps`` per direction: cloud NICs are full duplex, EC2 states
instance bandwidth for inbound and outbound separately), each rack's uplink and downlink to the fabric
(``rack_uplink_gbps``), one link per ordered pair of zones (``cross_zone_gbps``) and of regions
(``cross_region_gbps``); None = not a bottleneck. A call's request (``request_bytes``, caller → callee) and
response (``response_bytes``, callee → caller) are two flows, each crossing the links of its direction's
path. Each link *l* of capacity ``C_l`` (bytes/s) is a processor-sharing station (flow-level model of TCP
bandwidth sharing: Ben Fredj, Bonald, Proutière, Régnié, Roberts, "Statistical bandwidth sharing: a study of
congestion at flow level", SIGCOMM 2001): the flows crossing it share ``C_l`` equally, each at most the
single-flow rate ``flow_gbps`` (EC2: 5 Gbit/s per flow outside a cluster placement group). Its offered load
``ρ_l = Σ_calls rate × bytes / C_l`` comes exactly from the call rates and the pod placement (random backend
choice, as for cross-node calls). The station is the one of :func:`policy.sim.stations.station_stats` with
work = bytes / ``C_l``, ``κ = 1`` and one flow's speed ``min(1, flow / C_l)``: a flow of ``b`` bytes that
finds ``n`` flows takes ``b / min(flow, C_l / (n + 1))`` (PASTA, ``n`` from the stationary distribution),
exact in the mean, ``b / (C_l (1 − ρ_l))`` for one flow able to fill the link (M/G/1-PS). At most
``max_flows`` flows share a link; a flow that finds it full fails at once, and so does its call attempt (a
full accept backlog; Envoy's circuit breakers default to 1024 pending requests), which is how a link past
saturation (ρ ≥ 1) shows: long transfers, timeouts and refused calls. A flow crossing several links is timed
at its **bottleneck** (the link with the longest expected time per byte; the others add nothing: the rate of
a flow in a max-min fair network is set by its bottleneck). Calls between pods of one node cross no link:
``bytes / same_node_gbps`` (a memory copy through the node's bridge).

The flows of one caller visit (its calls one after another, request and response) cross a congested link
moments apart, so they meet correlated queues: each flow reuses the queue draw its visit made on that link
with probability ``c_l = exp(−T_l / τ_l)``, else draws its own, where ``T_l = (b / C_l) / (1 − ρ_l)`` is a
flow's mean time on the link (the least gap between two flows of one visit) and ``τ_l = (b / C_l) /
(1 − √ρ_l)²`` the relaxation time of the M/M/1 queue (Kleinrock, Queueing Systems vol. 1, 1975; Cohen), i.e.
``c_l = exp(−(1 − √ρ_l) / (1 + √ρ_l))``: 0.37 on an idle link, 0.84 at ρ 0.5, 0.92 at ρ 0.7, 1 at saturation.
Independent draws made the p95 of two sequential calls over one link 7-15 % too low against the
discrete-event simulation, identical draws 6-11 % too high (BENCHMARKS.md ``simulator``).

**Service mesh.** With a sidecar (Istio, Linkerd), each call passes the caller's outbound and the callee's
inbound proxy: ``sidecar_ms`` more per call, and ``sidecar_cpu_ms`` of CPU per request per proxy on the
proxy's node (in its own container, outside the app container's CPU limit). Istio 1.10-1.16 publish 2.65 ms
added to the 90th percentile per call and 0.35 vCPU per 1000 requests/s through a proxy
(istio.io, "Performance and Scalability").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .stations import station_stats

__all__ = ["LABEL_RACK", "TopologyNetwork", "BoundNetwork", "LinkState", "GBPS"]

#: The node label naming its rack (no upstream label names a rack; Kubernetes leaves it to the provider).
LABEL_RACK = "hrl-scheduler.io/rack"

#: bytes per second in one Gbit/s
GBPS = 1e9 / 8.0


@dataclass(frozen=True)
class TopologyNetwork:
    """The network of a scenario (module docstring). Delays are round trips per call (ms); bandwidths are
    Gbit/s per direction (None = not a bottleneck); ``zone_rtt_ms``: ``((zone_a, zone_b, ms), ...)``,
    symmetric; ``seed``: the per-pair multipliers and drawn zone RTTs."""

    same_node_ms: float = 0.05
    same_rack_ms: float = 0.2
    same_zone_ms: float = 0.5
    cross_zone_ms: float = 2.0
    cross_region_ms: float = 15.0
    zone_rtt_ms: tuple[tuple[str, str, float], ...] = ()
    zone_rtt_range_ms: tuple[float, float] | None = None
    pair_cv: float = 0.0
    jitter_ms: float = 0.0
    jitter_frac: float = 0.0
    jitter_cv: float = 1.0
    same_node_gbps: float = 40.0
    nic_gbps: float | None = None
    rack_uplink_gbps: float | None = None
    cross_zone_gbps: float | None = None
    cross_region_gbps: float | None = None
    flow_gbps: float = 5.0
    max_flows: int = 1024
    sidecar_ms: float = 0.0
    sidecar_cpu_ms: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        for k in (
            "same_node_ms",
            "same_rack_ms",
            "same_zone_ms",
            "cross_zone_ms",
            "cross_region_ms",
            "pair_cv",
            "jitter_ms",
            "jitter_frac",
            "sidecar_ms",
            "sidecar_cpu_ms",
        ):
            v = getattr(self, k)
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"network.{k}: must be a finite number >= 0, got {v!r}")
        if not (math.isfinite(self.jitter_cv) and self.jitter_cv > 0):
            raise ValueError(f"network.jitter_cv: must be a finite number > 0, got {self.jitter_cv!r}")
        for k in (
            "same_node_gbps",
            "flow_gbps",
            "nic_gbps",
            "rack_uplink_gbps",
            "cross_zone_gbps",
            "cross_region_gbps",
        ):
            v = getattr(self, k)
            if v is not None and not (math.isfinite(v) and v > 0):
                raise ValueError(f"network.{k}: must be a finite number > 0, got {v!r}")
        if self.max_flows < 1:
            raise ValueError(f"network.max_flows: must be >= 1, got {self.max_flows}")
        if self.zone_rtt_range_ms is not None:
            lo, hi = self.zone_rtt_range_ms
            if not (0 <= lo <= hi and math.isfinite(hi)):
                raise ValueError(
                    f"network.zone_rtt_range_ms: must be [low, high] with 0 <= low <= high, got {lo}, {hi}"
                )
        for a, b, ms in self.zone_rtt_ms:
            if not (math.isfinite(ms) and ms >= 0):
                raise ValueError(f"network.zone_rtt_ms.{a}.{b}: must be a finite number >= 0, got {ms!r}")

    @property
    def has_jitter(self) -> bool:
        return self.jitter_ms > 0 or self.jitter_frac > 0

    def bind(
        self,
        zones: Sequence[str],
        regions: Sequence[str],
        racks: Sequence[str],
        nic_gbps: Sequence[float | None] | None = None,
    ) -> BoundNetwork:
        """The network of these nodes (labels per node, in node order); ``nic_gbps`` per node overrides
        :attr:`nic_gbps` where not None."""
        return BoundNetwork(self, list(zones), list(regions), list(racks), None if nic_gbps is None else list(nic_gbps))


def _ids(labels: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    names: dict[str, int] = {}
    ids = np.array([names.setdefault(x, len(names)) for x in labels], dtype=np.int64)
    return ids, list(names)


@dataclass
class LinkState:
    """The links' state in one step (all (L,) arrays): ``load_bps`` offered bytes/s, ``util`` = load / capacity,
    and the processor-sharing station quantities of :class:`policy.sim.stations.Stations` in flow units."""

    load_bps: np.ndarray
    util: np.ndarray
    speed: np.ndarray
    f: np.ndarray
    jt: np.ndarray
    rho: np.ndarray
    blocked: np.ndarray
    head: np.ndarray
    per_byte_s: np.ndarray  # expected seconds per byte of a flow on the link (its bottleneck score)
    rack_best: np.ndarray | None = None  # (R, R) the slowest of the links between two racks (-1 = none)
    # per link, for drawing j (the queue beyond the full-speed flows, P(j) ~ rho^j on 0..jt) by inverse CDF:
    # kind 0: rho < 1, 1: rho > 1 (sampled mirrored), 2: rho = 1 (uniform); log of the ratio; 1 - ratio^(jt+1)
    j_kind: np.ndarray | None = None
    j_log_r: np.ndarray | None = None
    j_one_minus_tail: np.ndarray | None = None
    # per link, the share of flows of one caller visit that meet the same queue (module docstring)
    queue_corr: np.ndarray | None = None


@dataclass
class BoundNetwork:
    """A :class:`TopologyNetwork` on a concrete node list: the (N, N) delay matrix and the links.

    ``delay_ms`` (N, N) round trip per call; ``jitter_mean_ms`` (N, N) or None; link arrays: ``capacity_bps``
    (L,) bytes/s, ``link_names`` (L,); per node ``nic_out`` / ``nic_in`` (N,) link id or -1; per rack
    ``rack_up`` / ``rack_down`` (R,); ``zone_link`` (Z, Z) and ``region_link`` (G, G) link ids (-1 = none).
    """

    spec: TopologyNetwork
    zones: list[str]
    regions: list[str]
    racks: list[str]
    nic_gbps: list[float | None] | None = None
    delay_ms: np.ndarray = field(init=False)
    jitter_mean_ms: np.ndarray | None = field(init=False)

    def __post_init__(self) -> None:
        s = self.spec
        N = len(self.zones)
        if not (len(self.regions) == len(self.racks) == N):
            raise ValueError(f"network: {N} zones, {len(self.regions)} regions, {len(self.racks)} racks for the nodes")
        self.node_zone, znames = _ids(self.zones)
        self.node_region, gnames = _ids(self.regions)
        # racks are only meaningful inside a zone
        self.node_rack, rnames = _ids([f"{z}\x00{r}" for z, r in zip(self.zones, self.racks)])
        self.zone_names, self.region_names = znames, gnames
        rng = np.random.default_rng(np.random.SeedSequence([int(s.seed), 0x6E6574]))
        Z = len(znames)
        zone_ms = np.full((Z, Z), s.cross_zone_ms)
        if s.zone_rtt_range_ms is not None:
            lo, hi = s.zone_rtt_range_ms
            iu = np.triu_indices(Z, 1)
            draw = rng.uniform(lo, hi, size=len(iu[0]))
            zone_ms[iu] = draw
            zone_ms[(iu[1], iu[0])] = draw
        zpos = {z: i for i, z in enumerate(znames)}
        for a, b, ms in s.zone_rtt_ms:
            if a not in zpos or b not in zpos:
                raise ValueError(f"network.zoneRttMs: zone {a if a not in zpos else b!r} has no node (zones: {znames})")
            zone_ms[zpos[a], zpos[b]] = zone_ms[zpos[b], zpos[a]] = ms
        za, zb = self.node_zone[:, None], self.node_zone[None, :]
        d = zone_ms[za, zb]
        same_zone = za == zb
        d = np.where(same_zone, s.same_zone_ms, d)
        same_rack = self.node_rack[:, None] == self.node_rack[None, :]
        d = np.where(same_rack & same_zone, s.same_rack_ms, d)
        cross_region = self.node_region[:, None] != self.node_region[None, :]
        d = np.where(cross_region, np.maximum(d, s.cross_region_ms), d)
        if s.pair_cv > 0 and N > 1:
            s2 = math.log1p(s.pair_cv**2)
            iu = np.triu_indices(N, 1)
            mult = np.ones((N, N))
            mult[iu] = rng.lognormal(-s2 / 2, math.sqrt(s2), size=len(iu[0]))
            mult[(iu[1], iu[0])] = mult[iu]  # symmetric: one path per pair, both directions
            d = d * mult
        np.fill_diagonal(d, s.same_node_ms)
        self.delay_ms = d
        self.jitter_mean_ms = (s.jitter_ms + s.jitter_frac * d) if s.has_jitter else None
        # ---- links ------------------------------------------------------------------------------------------
        names: list[str] = []
        caps: list[float] = []

        def add(name: str, gbps: float | None) -> int:
            if gbps is None:
                return -1
            names.append(name)
            caps.append(gbps * GBPS)
            return len(names) - 1

        nic = [s.nic_gbps if self.nic_gbps is None or self.nic_gbps[i] is None else self.nic_gbps[i] for i in range(N)]
        self.nic_out = np.array([add(f"node{i}:out", nic[i]) for i in range(N)], dtype=np.int64)
        self.nic_in = np.array([add(f"node{i}:in", nic[i]) for i in range(N)], dtype=np.int64)
        R = len(rnames)
        self.rack_up = np.array([add(f"rack{r}:up", s.rack_uplink_gbps) for r in range(R)], dtype=np.int64)
        self.rack_down = np.array([add(f"rack{r}:down", s.rack_uplink_gbps) for r in range(R)], dtype=np.int64)
        G = len(gnames)
        self.zone_link = np.full((Z, Z), -1, dtype=np.int64)
        self.region_link = np.full((G, G), -1, dtype=np.int64)
        for a in range(Z):
            for b in range(Z):
                if a != b:
                    self.zone_link[a, b] = add(f"zone {znames[a]}->{znames[b]}", s.cross_zone_gbps)
        for a in range(G):
            for b in range(G):
                if a != b:
                    self.region_link[a, b] = add(f"region {gnames[a]}->{gnames[b]}", s.cross_region_gbps)
        self.link_names = names
        self.capacity_bps = np.array(caps, dtype=np.float64)
        self.flow_bps = s.flow_gbps * GBPS
        self.same_node_bps = s.same_node_gbps * GBPS
        self.rack_zone = np.zeros(R, dtype=np.int64)
        self.rack_region = np.zeros(R, dtype=np.int64)
        self.rack_zone[self.node_rack] = self.node_zone
        self.rack_region[self.node_rack] = self.node_region

    @property
    def n_links(self) -> int:
        return len(self.link_names)

    # ---- link loads --------------------------------------------------------------------------------------

    def link_loads(
        self,
        pod_service: np.ndarray,
        pod_node: np.ndarray,
        n_ready: np.ndarray,
        e_a: np.ndarray,
        e_b: np.ndarray,
        attempts_rps: np.ndarray,
        req_bytes: np.ndarray,
        resp_bytes: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(bytes/s, flows/s) offered to each link, exactly, from the call attempts per second of each edge
        (``attempts_rps`` (E,)), its request and response bytes and the placement (pods spread the calls
        evenly; a request flow goes caller → callee, a response flow callee → caller)."""
        L = self.n_links
        load = np.zeros(L)
        flows = np.zeros(L)
        if not L or not len(e_a):
            return load, flows
        S = len(n_ready)
        has = (n_ready[e_a] > 0) & (n_ready[e_b] > 0)
        rq = np.where(has, attempts_rps * req_bytes, 0.0)
        rs = np.where(has, attempts_rps * resp_bytes, 0.0)
        fq = np.where(has & (req_bytes > 0), attempts_rps, 0.0)
        fs = np.where(has & (resp_bytes > 0), attempts_rps, 0.0)
        inv = 1.0 / np.maximum(n_ready, 1)

        def per_group(group_of_pod: np.ndarray, G: int, out_ids: np.ndarray, in_ids: np.ndarray) -> None:
            # Σ_e w_e share_a(g): each pod of the caller service carries 1/n of the caller's weight
            def spread(w_caller: np.ndarray, w_callee: np.ndarray) -> np.ndarray:
                ws = np.bincount(e_a, weights=w_caller, minlength=S) + np.bincount(e_b, weights=w_callee, minlength=S)
                return np.bincount(group_of_pod, weights=(ws * inv)[pod_service], minlength=G)

            over_b = _overlap(pod_service, group_of_pod, n_ready, G, e_a, e_b, rq + rs)
            over_f = _overlap(pod_service, group_of_pod, n_ready, G, e_a, e_b, fq + fs)
            # leaving g: requests of callers in g to callees elsewhere + responses of callees in g to callers elsewhere
            out_b = spread(rq, rs) - over_b
            in_b = spread(rs, rq) - over_b
            out_f = spread(fq, fs) - over_f
            in_f = spread(fs, fq) - over_f
            for ids, b, f in ((out_ids, out_b, out_f), (in_ids, in_b, in_f)):
                m = ids >= 0
                np.add.at(load, ids[m], np.maximum(b[m], 0.0))
                np.add.at(flows, ids[m], np.maximum(f[m], 0.0))

        N = len(self.zones)
        if np.any(self.nic_out >= 0):
            per_group(pod_node, N, self.nic_out, self.nic_in)
        if np.any(self.rack_up >= 0):
            per_group(self.node_rack[pod_node], len(self.rack_up), self.rack_up, self.rack_down)
        for link, gid in ((self.zone_link, self.node_zone), (self.region_link, self.node_region)):
            if not np.any(link >= 0):
                continue
            G = link.shape[0]
            A = np.zeros((S, G))
            np.add.at(A, (pod_service, gid[pod_node]), inv[pod_service])
            for w_req, w_resp, acc in ((rq, rs, load), (fq, fs, flows)):
                M = (A[e_a] * w_req[:, None]).T @ A[e_b] + (A[e_b] * w_resp[:, None]).T @ A[e_a]
                np.fill_diagonal(M, 0.0)
                m = link >= 0
                np.add.at(acc, link[m], M[m])
        return load, flows

    def link_state(self, load_bps: np.ndarray, flows_ps: np.ndarray) -> LinkState:
        """The station of each link at these loads (module docstring)."""
        C = self.capacity_bps
        L = len(C)
        speed = np.minimum(1.0, self.flow_bps / C) if L else np.zeros(0)
        mean_bytes = np.where(flows_ps > 0, load_bps / np.maximum(flows_ps, 1e-300), 0.0)
        work = mean_bytes / C if L else np.zeros(0)
        K = np.full(L, int(self.spec.max_flows), dtype=np.int64)
        st = station_stats(flows_ps, work, np.ones(L), speed, K)
        # expected time per byte: the station's mean sojourn per unit work, over the capacity
        per_work = np.where(work > 0, st.mean_sojourn_s / np.maximum(work, 1e-300), 1.0 / speed)
        ls = LinkState(load_bps, load_bps / C, speed, st.f, st.jt, st.rho, st.blocked, st.head, per_work / C)
        ls.rack_best = self._rack_best(ls)
        r = st.rho
        kind = np.where(r < 1 - 1e-9, 0, np.where(r > 1 + 1e-9, 1, 2))
        with np.errstate(divide="ignore"):
            rr = np.where(kind == 0, r, np.where(kind == 1, 1.0 / np.where(kind == 1, r, 1.0), 0.5))
            log_r = np.log(np.maximum(rr, 1e-300))
        ls.j_kind = kind
        ls.j_log_r = log_r
        ls.j_one_minus_tail = 1.0 - np.exp(np.maximum((st.jt + 1) * log_r, -700.0))
        sr = np.sqrt(np.clip(ls.util, 0.0, 1.0))
        ls.queue_corr = np.exp(-(1.0 - sr) / (1.0 + sr))
        return ls

    def _rack_best(self, ls: LinkState) -> np.ndarray:
        """(R, R) per ordered pair of racks, the slowest (per byte) of the links a flow between them crosses
        besides the two NICs: rack uplink and downlink, zone link, region link (-1 = none)."""
        score = np.concatenate([ls.per_byte_s, [1.0 / self.flow_bps]])
        R = len(self.rack_up)
        ra, rb = np.meshgrid(np.arange(R), np.arange(R), indexing="ij")
        cur = np.full((R, R), -1, dtype=np.int64)
        diff = ra != rb
        za, zb = self.rack_zone[ra], self.rack_zone[rb]
        ga, gb = self.rack_region[ra], self.rack_region[rb]
        for cand in (
            np.where(diff, self.rack_up[ra], -1),
            np.where(diff, self.rack_down[rb], -1),
            self.zone_link[za, zb],
            self.region_link[ga, gb],
        ):
            cur = np.where(score[cand] > score[cur], cand, cur)
        return cur

    # ---- sampling ----------------------------------------------------------------------------------------

    def bottleneck(self, na: np.ndarray, nb: np.ndarray, ls: LinkState | None) -> np.ndarray:
        """Link id (-1 = none) of the bottleneck of the path from nodes ``na`` to ``nb`` (arrays of one shape)."""
        if ls is None or not self.n_links:
            return np.full(na.shape, -1, dtype=np.int64)
        score = np.concatenate([ls.per_byte_s, [1.0 / self.flow_bps]])  # index -1: no link, the flow's own cap

        def best(cur: np.ndarray, cand: np.ndarray) -> np.ndarray:
            return np.where(score[cand] > score[cur], cand, cur)

        cur = self.nic_out[na]
        cur = best(cur, self.nic_in[nb])
        rb = ls.rack_best if ls.rack_best is not None else self._rack_best(ls)
        if np.any(rb >= 0):
            cur = best(cur, rb[self.node_rack[na], self.node_rack[nb]])
        return np.where(na == nb, -1, cur)

    def transfer_s(
        self,
        nbytes: np.ndarray,
        link: np.ndarray,
        same_node: np.ndarray,
        ls: LinkState | None,
        rng: np.random.Generator,
        u: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(seconds, refused) of flows of ``nbytes`` timed at ``link`` (-1: no link). The number of flows a flow
        finds on its link is drawn by inverse CDF from one uniform per flow, ``u`` (same shape as ``link``;
        drawn here when None): refused when ``u`` falls in the top ``blocked`` share (the link full), else
        the head (fewer flows than fit at full speed) or the tail's ``j``. Flows given the same ``u`` on the
        same link see the same queue (common random numbers: the flows of one request over one link, moments
        apart, meet the same congestion)."""
        t = np.where(same_node, nbytes / self.same_node_bps, nbytes / self.flow_bps)
        refused = np.zeros(np.shape(link), dtype=bool)
        if ls is None or not self.n_links:
            return t, refused
        has = link >= 0
        if not np.any(has):
            return t, refused
        li = np.where(has, link, 0)
        if u is None:
            u = rng.random(np.shape(link))
        blocked = ls.blocked[li]
        refused = has & (u >= 1.0 - blocked) & (nbytes > 0)
        ua = np.minimum(u / np.maximum(1.0 - blocked, 1e-300), 1.0 - 1e-12)
        hp = ls.head[li]
        head = ua < hp
        u3 = np.clip((ua - hp) / np.maximum(1.0 - hp, 1e-300), 0.0, 1.0 - 1e-12)
        # j by inverse CDF with the per-link constants (policy.sim.model._sample_trunc_geom, gathered)
        jt = ls.jt[li]
        kind = ls.j_kind[li]
        jg = np.floor(np.log1p(-u3 * ls.j_one_minus_tail[li]) / ls.j_log_r[li])
        j = np.where(kind == 0, jg, np.where(kind == 1, jt - jg, np.floor(u3 * (jt + 1))))
        j = np.clip(j, 0, jt)
        C = self.capacity_bps[li]
        tl = np.where(head, nbytes / C / ls.speed[li], nbytes / C * (ls.f[li] + 1 + j))
        t = np.where(has, tl, t)
        return t, refused

    def jitter_ms(self, na: np.ndarray, nb: np.ndarray, rng: np.random.Generator) -> np.ndarray | float:
        """One jitter draw per call (ms), lognormal with the pair's mean and ``jitter_cv``."""
        if self.jitter_mean_ms is None:
            return 0.0
        mean = self.jitter_mean_ms[na, nb]
        s2 = math.log1p(self.spec.jitter_cv**2)
        return mean * np.exp(math.sqrt(s2) * rng.standard_normal(np.shape(na)) - s2 / 2)


def _overlap(
    pod_service: np.ndarray,
    group_of_pod: np.ndarray,
    n_ready: np.ndarray,
    G: int,
    e_a: np.ndarray,
    e_b: np.ndarray,
    w: np.ndarray,
) -> np.ndarray:
    """(G,) Σ_e w_e share_a(g) share_b(g): the part of each edge's weight whose caller and callee pods are
    both in group g (random backend choice), via the sparse (service, group) shares."""
    out = np.zeros(G)
    if not len(pod_service):
        return out
    key = pod_service.astype(np.int64) * G + group_of_pod
    uk, cnt = np.unique(key, return_counts=True)
    svc_of = uk // G
    grp_of = uk % G
    share = cnt / np.maximum(n_ready[svc_of], 1)
    S = len(n_ready)
    first = np.searchsorted(svc_of, np.arange(S))
    last = np.searchsorted(svc_of, np.arange(S), side="right")
    na = last[e_a] - first[e_a]
    E = len(e_a)
    rep_e = np.repeat(np.arange(E), na)
    off = np.arange(len(rep_e)) - np.repeat(np.cumsum(na) - na, na)
    ent = np.repeat(first[e_a], na) + off
    kb = e_b[rep_e] * G + grp_of[ent]
    pos = np.minimum(np.searchsorted(uk, kb), len(uk) - 1)
    sb = np.where(uk[pos] == kb, share[pos], 0.0)
    np.add.at(out, grp_of[ent], w[rep_e] * share[ent] * sb)
    return out
