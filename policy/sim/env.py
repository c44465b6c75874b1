"""A Gymnasium environment over the simulator: place pods, scale and rebalance services, minute by minute.

An episode is a window of a request-rate trace (``episode_minutes`` from a random offset drawn by
``reset(seed)``) on a simulated cluster running one application (:class:`EnvConfig`). The agent makes one of
two kinds of decision per step, depending on ``mode``:

- ``"placement"``: choose the node of the Pending pod (``Discrete(max_nodes)``, masked to the nodes where it
  fits). Every pod is a decision: the initial ones at reset, replacements of evicted pods (``churn`` random
  evictions per minute, like node maintenance) and pods the stack's own controllers create (e.g. an HPA with
  ``stack="default-kube-scheduler+hpa"``). Replica counts follow the stack.
- ``"scaling"``: at each minute, per-service replica deltas and at most one eviction
  (``MultiDiscrete([3] * S + [S * max_nodes + 1])``: delta = value − 1 for service s; the last component picks
  "evict one pod of service s from node n" as ``1 + s * max_nodes + n``, 0 = none). kube-scheduler (the
  stack's profile) places the pods.
- ``"both"``: each minute starts with a scaling decision, then one placement decision per Pending pod.
  The action space is ``Dict(place=Discrete, scale=MultiDiscrete)``; only the part of the current phase
  (observation ``global.phase``: 0 scaling, 1 placement) is read.

After the decisions of a minute, the minute's traffic is simulated and its reward is returned on the step
that completed it (0 on the other steps, minus ``invalid`` for an action outside the mask):

    reward = −( latency × min(p95 / SLO, 10) + failed × failed_fraction + slo × [p95 > SLO]
                + cpu × requested_cores / manifest_requested_cores + evictions × evictions_this_minute )

with the weights of :class:`RewardWeights` (defaults 1, 10, 1, 0.5, 0.02; the SLO is the app's p95 target).

Observations are a ``Dict`` of float32 arrays, each described by a :class:`~policy.features.FeatureSpec`
(names and units, in column order): ``nodes`` (max_nodes, len(NODE_FEATURES)), ``services`` (S,
len(SERVICE_FEATURES)), ``pod`` (len(POD_FEATURES),) — the Pending pod being placed, zeros otherwise —
and ``global`` (len(GLOBAL_FEATURES),). Padding rows (nodes beyond the cluster) are zeros with ``valid`` 0.
Use ``gymnasium.wrappers.FlattenObservation`` for one flat vector. :meth:`SchedulingEnv.action_masks`
gives the valid actions (sb3-contrib MaskablePPO convention: a flat bool array; a dict of them in "both").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from policy.features import FeatureSpec

from .app import AppSpec, load_app
from .cluster import SimPod
from .engine import ClusterSpec, SimConfig, Simulation, background_tenants, rps_for_app
from .model import PerfModel
from .stacks import StackContext, autoscaled_workloads, build_stack
from .traces import load_trace

__all__ = [
    "MODES",
    "NODE_FEATURES",
    "SERVICE_FEATURES",
    "POD_FEATURES",
    "GLOBAL_FEATURES",
    "OBS_HIGH",
    "RewardWeights",
    "EnvConfig",
    "SchedulingEnv",
]

MODES = ("placement", "scaling", "both")

NODE_FEATURES = FeatureSpec.of(
    [
        ("cpu_allocatable_cores", "cores"),
        ("cpu_requested_frac", "fraction of allocatable"),
        ("cpu_used_frac", "fraction of allocatable, last minute (background tenants included)"),
        ("memory_requested_frac", "fraction of allocatable"),
        ("memory_used_frac", "fraction of allocatable, last minute's working sets"),
        ("pods_frac", "pods / allocatable pods"),
        ("zone", "zone index / zones"),
        ("same_service_pods", "count of the decision pod's service on the node"),
        ("neighbor_affinity", "fraction of the decision service's call traffic whose peer has pods here"),
        ("fits", "flag: the decision pod's requests fit"),
        ("valid", "flag: 1 node, 0 padding"),
    ]
)

SERVICE_FEATURES = FeatureSpec.of(
    [
        ("replicas_ready", "count"),
        ("replicas_target", "count"),
        ("pods_pending", "count"),
        ("rps", "log1p(requests/s), last minute, retries included"),
        ("cpu_used_cores", "cores, last minute"),
        ("cpu_requested_cores", "cores"),
        ("cpu_utilization", "used / requested"),
        ("latency_p95_ms", "log1p(ms), visit latency with calls, last minute"),
        ("refused_frac", "fraction of visits refused (run queue full), last minute"),
        ("visits_per_request", "count per user request"),
        ("cross_node_calls_frac", "fraction of its outgoing calls to another node"),
        ("restarts", "count, OOM kills so far"),
        ("scalable", "flag: the agent may scale it"),
        ("is_decision", "flag: the decision pod's service"),
    ]
)

POD_FEATURES = FeatureSpec.of(
    [
        ("service", "index / services"),
        ("cpu_request_cores", "cores"),
        ("memory_request_gib", "GiB"),
        ("cpu_limit_cores", "cores, 0 = none"),
    ]
)

GLOBAL_FEATURES = FeatureSpec.of(
    [
        ("phase", "0 scaling, 1 placement"),
        ("time_frac", "minutes done / episode minutes"),
        ("rps_last", "log1p(user requests/s), last minute"),
        ("latency_p95_slo", "p95 / SLO, last minute (capped at 10)"),
        ("failed_frac", "fraction, last minute"),
        ("cpu_requested_frac", "cluster CPU requested / allocatable"),
        ("cpu_used_frac", "cluster CPU used / allocatable, last minute"),
        ("pending_pods", "count"),
    ]
)

#: Bounds of every observation value (features are counts, fractions, cores and logs: never negative).
OBS_HIGH = 1e6


@dataclass(frozen=True)
class RewardWeights:
    """Weights of the per-minute reward (module docstring). ``invalid``: penalty for a masked-out action."""

    latency: float = 1.0
    failed: float = 10.0
    slo: float = 1.0
    cpu: float = 0.5
    evictions: float = 0.02
    invalid: float = 1.0


@dataclass(frozen=True)
class EnvConfig:
    """An environment: ``app`` (built-in name, path, or an AppSpec), ``trace`` (named window or CSV) scaled so
    its peak is ``peak_utilization`` of the app's capacity, ``cluster``, ``episode_minutes`` per episode from a
    random offset, ``mode`` (placement | scaling | both), ``stack`` (the kube-scheduler profile and controllers
    of :mod:`policy.sim.stacks` doing what the agent does not), ``churn`` (random evictions of app pods per
    minute, mean), ``max_nodes`` (padding of the node axis, >= cluster nodes), ``max_replicas`` per service,
    ``background`` (add background tenants to the cluster), ``n_samples`` (requests sampled per minute)."""

    app: str | AppSpec = "online-boutique"
    trace: str = "nasa"
    cluster: ClusterSpec = ClusterSpec(nodes=8, zones=("zone-a", "zone-b"))
    episode_minutes: int = 30
    mode: str = "both"
    stack: str = "default-kube-scheduler"
    peak_utilization: float = 0.8
    churn: float = 0.2
    max_nodes: int | None = None
    max_replicas: int = 10
    background: bool = False
    n_samples: int = 1000
    reward: RewardWeights = RewardWeights()
    sim: SimConfig = field(default_factory=lambda: SimConfig(n_samples=1000, per_service=True))

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode: must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.episode_minutes < 1:
            raise ValueError(f"episode_minutes: must be >= 1, got {self.episode_minutes}")
        if self.max_nodes is not None and self.max_nodes < self.cluster.nodes:
            raise ValueError(f"max_nodes: {self.max_nodes} < the cluster's {self.cluster.nodes} nodes")
        if self.churn < 0:
            raise ValueError(f"churn: must be >= 0, got {self.churn}")
        if self.max_replicas < 1:
            raise ValueError(f"max_replicas: must be >= 1, got {self.max_replicas}")


class SchedulingEnv(gym.Env):
    """See the module docstring. ``render_mode``: ``None`` or ``"ansi"`` (:meth:`render` returns a text frame: the
    minute, the phase and one line per node). Registered as ``hrl-scheduler/Placement-v0``, ``Scaling-v0`` and
    ``Joint-v0`` by :mod:`policy.sim.registration`."""

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(self, config: EnvConfig | None = None, render_mode: str | None = None, **overrides: Any):
        super().__init__()
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode: expected None or one of {self.metadata['render_modes']}, got {render_mode!r}"
            )
        self.render_mode = render_mode
        cfg = config or EnvConfig()
        if overrides:
            cfg = replace(cfg, **overrides)
        self.config = cfg
        self.app = load_app(cfg.app) if isinstance(cfg.app, str) else cfg.app

        self._trace_counts = load_trace(cfg.trace)
        if len(self._trace_counts) < cfg.episode_minutes:
            raise ValueError(
                f"trace {cfg.trace!r}: {len(self._trace_counts)} minutes < episode_minutes {cfg.episode_minutes}"
            )
        self.model = PerfModel(self.app, cfg.sim.network)
        self._rps_all = rps_for_app(self._trace_counts, self.model, self.app, cfg.peak_utilization)
        self.services = self.model.services
        self.S = len(self.services)
        self.N = cfg.cluster.nodes
        self.Nmax = cfg.max_nodes or self.N

        wl_by_service = {}
        for obj, w in zip(self.app.deployments, self.app.workloads):
            meta = obj.get("metadata") or {}
            wl_by_service[w.service] = f"{meta.get('namespace') or 'default'}/{meta['name']}"
        self._workload_of = wl_by_service
        scalable = set(autoscaled_workloads(self.app))
        self._scalable = np.array([wl_by_service.get(s) in scalable for s in self.services], dtype=bool)
        self._manifest_req_cores = sum(w.replicas * w.pod_requests.cpu_m for w in self.app.workloads) / 1000.0
        place = spaces.Discrete(self.Nmax)
        scale = spaces.MultiDiscrete([3] * self.S + [self.S * self.Nmax + 1])
        if cfg.mode == "placement":
            self.action_space = place
        elif cfg.mode == "scaling":
            self.action_space = scale
        else:
            self.action_space = spaces.Dict({"place": place, "scale": scale})
        box = lambda shape: spaces.Box(0.0, OBS_HIGH, shape=shape, dtype=np.float32)  # noqa: E731
        self.observation_space = spaces.Dict(
            {
                "nodes": box((self.Nmax, len(NODE_FEATURES))),
                "services": box((self.S, len(SERVICE_FEATURES))),
                "pod": box((len(POD_FEATURES),)),
                "global": box((len(GLOBAL_FEATURES),)),
            }
        )
        self.sim: Simulation | None = None
        self._pending: SimPod | None = None
        self._phase = 0
        self._rng = np.random.default_rng()

    # ---- episode ----------------------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        cfg = self.config
        rng = self.np_random
        self._rng = np.random.default_rng(int(rng.integers(2**63)))
        offset = int(rng.integers(0, len(self._rps_all) - cfg.episode_minutes + 1))
        if options and "offset_min" in options:
            offset = int(options["offset_min"])
        rps = self._rps_all[offset : offset + cfg.episode_minutes]
        sim_seed = int(rng.integers(2**31))
        spec = cfg.cluster
        if cfg.background and not spec.background:
            spec = replace(
                spec, background=background_tenants(spec.nodes, spec.cpu_m, spec.memory_bytes, seed=sim_seed)
            )

        simcfg = replace(cfg.sim, minutes=cfg.episode_minutes, seed=sim_seed, n_samples=cfg.n_samples, per_service=True)
        built = build_stack(cfg.stack, StackContext(self.app, spec, sim_seed, simcfg))
        self._built = built
        self.sim = Simulation(
            self.app,
            rps,
            spec,
            built.scheduler,
            simcfg,
            hooks=built.hooks,
            on_change=built.on_change,
            scheduler_name=built.scheduler_name,
        )
        sim = self.sim
        sim.start(schedule=not self._agent_places())  # the agent places the app's pods itself
        self._episode_reward = 0.0
        self._skip: set[str] = set()
        self._last_minute = None
        self._phase = 0
        self._pending = None
        self._advance_to_decision(reward=0.0, first=True)
        return self._obs(), self._info()

    def _agent_places(self) -> bool:
        return self.config.mode in ("placement", "both")

    def _advance_to_decision(self, reward: float, first: bool = False) -> tuple[float, bool]:
        """Run the simulation until the agent has a decision to make or the episode ends. Returns the reward
        accumulated on the way and whether the episode is over."""
        sim = self.sim
        assert sim is not None
        cfg = self.config
        while True:
            if self._agent_places():
                # the next Pending pod that fits somewhere (the others wait for kube-scheduler's retries)
                for p in sim.cluster.pending():
                    if sim.is_background(p) or p.info.key in self._skip or not self._place_mask(p).any():
                        continue
                    self._pending = p
                    self._phase = 1
                    return reward, False
            self._pending = None
            if sim.minute >= cfg.episode_minutes:
                return reward, True
            if not getattr(sim, "_in_minute", False):
                # a new minute: controllers act, churn evicts, then (scaling/both) the agent scales
                sim.begin_minute()
                self._skip = set()
                self._churn()
                if cfg.mode in ("scaling", "both"):
                    self._phase = 0
                    self._scaling_due = True
                    return reward, False
                continue
            reward += self._finish_minute()

    def _finish_minute(self) -> float:
        sim = self.sim
        assert sim is not None
        st = sim.finish_minute()
        self._last_minute = st
        return self.minute_reward(st)

    def _churn(self) -> None:
        sim = self.sim
        if self.config.churn <= 0 or sim is None or sim.minute == 0:
            return
        k = int(self._rng.poisson(self.config.churn))
        pods = [p for p in sim.cluster.live_pods() if p.node >= 0 and not sim.is_background(p)]
        for i in self._rng.permutation(len(pods))[:k]:
            sim.evictor.evict(pods[int(i)].info, "churn")

    def minute_reward(self, st) -> float:
        """The reward of one simulated minute (module docstring)."""
        w = self.config.reward
        slo = self.app.slo_p95_ms
        p95 = st.p95_ms if math.isfinite(st.p95_ms) else 10 * slo
        failed = st.failed / st.offered if st.offered > 0 else 0.0
        req = (
            sum(
                p.info.requests.cpu_m
                for p in self.sim.cluster.live_pods()
                if p.node >= 0 and not self.sim.is_background(p)
            )
            / 1000.0
        )
        cpu = req / self._manifest_req_cores if self._manifest_req_cores > 0 else 0.0
        return -(
            w.latency * min(p95 / slo, 10.0)
            + w.failed * failed
            + w.slo * float(p95 > slo)
            + w.cpu * cpu
            + w.evictions * st.evictions
        )

    def step(self, action):
        if self.sim is None:
            raise RuntimeError("step() before reset()")
        cfg = self.config
        reward = 0.0
        if self._phase == 1 and self._pending is not None:
            a = action["place"] if isinstance(action, dict) else action
            reward += self._place(int(np.asarray(a).reshape(-1)[0]) if np.ndim(a) else int(a))
        else:
            a = action["scale"] if isinstance(action, dict) else action
            reward += self._scale(np.asarray(a, dtype=np.int64).reshape(-1))
        if self._phase == 0 and cfg.mode in ("scaling", "both"):
            # the scaling decision of this minute is made: place (agent or kube-scheduler) and run
            if not self._agent_places():
                reward += self._finish_minute()
            self._phase = 1
        reward, done = self._advance_to_decision(reward)
        self._episode_reward += reward
        return self._obs(), float(reward), False, bool(done), self._info()

    def _place(self, node_idx: int) -> float:
        sim = self.sim
        pod = self._pending
        assert sim is not None and pod is not None
        mask = self._place_mask(pod)
        penalty = 0.0
        if 0 <= node_idx < self.N and mask[node_idx]:
            sim.schedule_one(pod, sim.cluster.nodes[node_idx].name)
        else:
            penalty = self.config.reward.invalid
            sim.schedule_one(pod)  # the stack's kube-scheduler decides instead
            if pod.node < 0:  # its filters rejected every node: it waits for the next minute
                self._skip.add(pod.info.key)
        self._pending = None
        return -penalty

    def _scale(self, a: np.ndarray) -> float:
        sim = self.sim
        assert sim is not None
        penalty = 0.0
        if len(a) != self.S + 1:
            raise ValueError(f"scale action: expected {self.S + 1} integers, got {len(a)}")
        masks = self._scale_masks()
        off = 0
        for i, s in enumerate(self.services):
            d = int(a[i])
            if not (0 <= d <= 2) or not masks[off + d]:
                penalty += self.config.reward.invalid
            elif d != 1:
                w = self._workload_of[s]
                sim.scale(w, int(sim.cluster.replicas[w]) + d - 1)
            off += 3
        ev = int(a[-1])
        emask = masks[off:]
        if not (0 <= ev < len(emask)) or not emask[ev]:
            penalty += self.config.reward.invalid
        elif ev > 0:
            s, n = divmod(ev - 1, self.Nmax)
            svc = self.services[s]
            for p in sim.cluster.live_pods():
                if p.node == n and p.info.service == svc and not sim.is_background(p):
                    sim.evictor.evict(p.info, "agent")
                    break
        return -penalty

    # ---- masks ------------------------------------------------------------------------------------------

    def _place_mask(self, pod: SimPod) -> np.ndarray:
        sim = self.sim
        assert sim is not None
        N = self.N
        req_cpu = np.zeros(N)
        req_mem = np.zeros(N)
        count = np.zeros(N)
        for p in sim.cluster.live_pods():
            if p.node >= 0:
                req_cpu[p.node] += p.info.requests.cpu_m
                req_mem[p.node] += p.info.requests.memory_bytes
                count[p.node] += 1
        m = np.zeros(self.Nmax, dtype=bool)
        for i, n in enumerate(sim.cluster.nodes):
            ok = (
                not n.unschedulable
                and req_cpu[i] + pod.info.requests.cpu_m <= n.allocatable.cpu_m
                and req_mem[i] + pod.info.requests.memory_bytes <= n.allocatable.memory_bytes
                and count[i] + 1 <= n.allocatable_pods
                and all(n.labels.get(k) == v for k, v in pod.info.node_selector.items())
            )
            m[i] = ok
        return m

    def _scale_masks(self) -> np.ndarray:
        sim = self.sim
        assert sim is not None
        out = []
        for i, s in enumerate(self.services):
            w = self._workload_of.get(s)
            cur = int(sim.cluster.replicas.get(w, 0)) if w else 0
            ok = bool(self._scalable[i]) and w is not None
            out += [ok and cur > 1, True, ok and cur < self.config.max_replicas]
        ev = np.zeros(self.S * self.Nmax + 1, dtype=bool)
        ev[0] = True
        for p in sim.cluster.live_pods():
            if p.node >= 0 and not sim.is_background(p) and p.info.service in self.model.pos:
                ev[1 + self.model.pos[p.info.service] * self.Nmax + p.node] = True
        return np.concatenate([np.array(out, dtype=bool), ev])

    def action_masks(self):
        """Valid actions now: placement → (max_nodes,) bool; scaling → flat bool of ``3 S + S·max_nodes + 1``
        (per MultiDiscrete component, concatenated); both → ``{"place": ..., "scale": ...}`` where the part of
        the inactive phase is all True."""
        if self.sim is None:
            raise RuntimeError("action_masks() before reset()")
        place = self._place_mask(self._pending) if self._pending is not None else np.ones(self.Nmax, dtype=bool)
        if self.config.mode == "placement":
            return place
        scale = self._scale_masks() if self._phase == 0 else np.ones(3 * self.S + self.S * self.Nmax + 1, dtype=bool)
        if self.config.mode == "scaling":
            return scale
        return {"place": place, "scale": scale}

    # ---- observations -----------------------------------------------------------------------------------

    def _obs(self) -> dict[str, np.ndarray]:
        sim = self.sim
        assert sim is not None
        N, S = self.N, self.S
        nodes = np.zeros((self.Nmax, len(NODE_FEATURES)), dtype=np.float64)
        svc = np.zeros((S, len(SERVICE_FEATURES)), dtype=np.float64)
        pod_f = np.zeros(len(POD_FEATURES), dtype=np.float64)
        glob = np.zeros(len(GLOBAL_FEATURES), dtype=np.float64)
        alloc_cpu = np.array([n.allocatable.cpu_m for n in sim.cluster.nodes], dtype=np.float64)
        alloc_mem = np.array([n.allocatable.memory_bytes for n in sim.cluster.nodes], dtype=np.float64)
        alloc_pods = np.array([max(n.allocatable_pods, 1) for n in sim.cluster.nodes], dtype=np.float64)
        req_cpu = np.zeros(N)
        req_mem = np.zeros(N)
        count = np.zeros(N)
        used_cpu = np.zeros(N)
        used_mem = np.zeros(N)
        ready_by_svc = np.zeros(S)
        pending_by_svc = np.zeros(S)
        req_by_svc = np.zeros(S)
        restarts = np.zeros(S)
        svc_nodes = np.zeros((S, N))
        now_mid = sim.now_s + sim.config.step_s / 2
        usage = sim._last_pod_usage_m
        for p in sim.cluster.live_pods():
            si = self.model.pos.get(p.info.service) if not sim.is_background(p) else None
            if p.node < 0:
                if si is not None:
                    pending_by_svc[si] += 1
                continue
            req_cpu[p.node] += p.info.requests.cpu_m
            req_mem[p.node] += p.info.requests.memory_bytes
            count[p.node] += 1
            used_cpu[p.node] += usage.get(p.info.key, 0.0)
            if si is not None:
                req_by_svc[si] += p.info.requests.cpu_m / 1000.0
                restarts[si] += p.restarts
                svc_nodes[si, p.node] += 1
                if p.ready_at_s <= now_mid:
                    ready_by_svc[si] += 1
        last = self._last_minute
        if last is not None:
            st = last.step
            for p, m in zip(last.ready, st.pod_memory_mi):
                used_mem[p.node] += m * 1024 * 1024
            used_mem += np.asarray(sim.last_node_bg_mem_mi) * 1024 * 1024
        zones = sorted(set(sim.node_zones))
        zid = np.array([zones.index(z) for z in sim.node_zones], dtype=np.float64) / max(len(zones), 1)
        # the decision pod's service: locality features
        dec = None
        if self._pending is not None:
            dec = self.model.pos.get(self._pending.info.service)
        same = np.zeros(N)
        aff = np.zeros(N)
        fits = np.zeros(N)
        if dec is not None:
            same = svc_nodes[dec]
            share = svc_nodes / np.maximum(svc_nodes.sum(axis=1, keepdims=True), 1)
            rates = (
                sim._last_edge_rps
                if sim._last_edge_rps is not None
                else self.model.e_m * self.model.visits[self.model.e_a]
            )
            wsum = 0.0
            for k, (a, b, _m, _p) in enumerate(self.model.edges):
                if a == dec or b == dec:
                    peer = b if a == dec else a
                    w = float(rates[k]) if k < len(rates) else 0.0
                    aff += w * share[peer]
                    wsum += w
            aff = aff / wsum if wsum > 0 else aff
            fits = self._place_mask(self._pending)[:N].astype(np.float64)
        nodes[:N] = np.stack(
            [
                alloc_cpu / 1000.0,
                req_cpu / alloc_cpu,
                used_cpu / alloc_cpu,
                req_mem / alloc_mem,
                used_mem / alloc_mem,
                count / alloc_pods,
                zid,
                same,
                aff,
                fits,
                np.ones(N),
            ],
            axis=1,
        )
        # services
        rps = np.zeros(S)
        cpu_used = np.zeros(S)
        p95 = np.zeros(S)
        refused = np.zeros(S)
        cross = np.zeros(S)
        if last is not None:
            st = last.step
            ps = np.array([self.model.pos[p.info.service] for p in last.ready], dtype=np.int64)
            if len(ps):
                rps = np.bincount(ps, weights=st.pod_rps, minlength=S)
                cpu_used = np.bincount(ps, weights=st.pod_cpu_cores, minlength=S)
                n_ps = np.maximum(np.bincount(ps, minlength=S), 1)
                refused = np.bincount(ps, weights=st.pod_blocked_frac, minlength=S) / n_ps
            if st.service_latency_ms is not None:
                p95 = np.nan_to_num(st.service_latency_ms[:, 1], nan=0.0)
        # cross-node share of each service's outgoing calls from the placement (random backend choice)
        share = svc_nodes / np.maximum(svc_nodes.sum(axis=1, keepdims=True), 1)
        out_w = np.zeros(S)
        for a, b, m, _p in self.model.edges:
            w = m * self.model.visits[a]
            cross[a] += w * (1.0 - float(share[a] @ share[b]))
            out_w[a] += w
        cross = np.where(out_w > 0, cross / np.maximum(out_w, 1e-12), 0.0)
        target = np.array(
            [sim.cluster.replicas.get(self._workload_of.get(s, ""), 0) for s in self.services], dtype=np.float64
        )
        isdec = np.zeros(S)
        if dec is not None:
            isdec[dec] = 1.0
        svc[:] = np.stack(
            [
                ready_by_svc,
                target,
                pending_by_svc,
                np.log1p(rps),
                cpu_used,
                req_by_svc,
                np.where(req_by_svc > 0, cpu_used / np.maximum(req_by_svc, 1e-9), 0.0),
                np.log1p(p95),
                refused,
                self.model.visits,
                cross,
                restarts,
                self._scalable.astype(np.float64),
                isdec,
            ],
            axis=1,
        )
        if self._pending is not None:
            info = self._pending.info
            pod_f[:] = [
                (dec or 0) / max(S, 1),
                info.requests.cpu_m / 1000.0,
                info.requests.memory_bytes / 2**30,
                (info.limits.cpu_m or 0) / 1000.0,
            ]
        slo = self.app.slo_p95_ms
        if last is not None:
            lp95 = min((last.p95_ms if math.isfinite(last.p95_ms) else 10 * slo) / slo, 10.0)
            lf = last.failed / last.offered if last.offered > 0 else 0.0
            lrps = last.rps
        else:
            lp95, lf, lrps = 0.0, 0.0, 0.0
        glob[:] = [
            float(self._phase),
            sim.minute / self.config.episode_minutes,
            math.log1p(lrps),
            lp95,
            lf,
            req_cpu.sum() / alloc_cpu.sum(),
            used_cpu.sum() / alloc_cpu.sum(),
            float(sum(1 for p in sim.cluster.pending() if not sim.is_background(p))),
        ]
        clip = lambda x: np.clip(np.nan_to_num(x, nan=0.0, posinf=OBS_HIGH), 0.0, OBS_HIGH).astype(np.float32)  # noqa: E731
        return {"nodes": clip(nodes), "services": clip(svc), "pod": clip(pod_f), "global": clip(glob)}

    def _info(self) -> dict[str, Any]:
        sim = self.sim
        d: dict[str, Any] = {
            "phase": "placement" if self._phase == 1 else "scaling",
            "minute": sim.minute if sim else 0,
            "episode_reward": getattr(self, "_episode_reward", 0.0),
        }
        if self._last_minute is not None:
            m = self._last_minute
            d.update(
                {
                    "latency_p95_ms": m.p95_ms,
                    "failed_pct": 100.0 * m.failed / m.offered if m.offered else 0.0,
                    "evictions": m.evictions,
                    "oom_kills": m.oom_kills,
                }
            )
        return d

    def render(self) -> str | None:
        """``render_mode="ansi"``: a text frame (minute, phase, the Pending pod's service, then per node its
        requested CPU and memory fractions, pods fraction and whether the pod fits); ``None`` otherwise."""
        if self.render_mode != "ansi":
            return None
        if self.sim is None:
            return "(not reset)"
        obs = self._obs()
        info = self._info()
        col = {name: i for i, name in enumerate(NODE_FEATURES.names)}
        pending = self._pending.workload if self._pending is not None else "-"
        lines = [f"minute {info['minute']} phase {info['phase']} pending pod of {pending}"]
        lines.append("node  cpu_req  mem_req  pods  fits")
        for n in range(self.N):
            row = obs["nodes"][n]
            lines.append(
                f"{n:>4}  {row[col['cpu_requested_frac']]:7.2f}  {row[col['memory_requested_frac']]:7.2f}  "
                f"{row[col['pods_frac']]:4.2f}  {int(row[col['fits']])}"
            )
        return "\n".join(lines)

    def result(self):
        """The simulation's :class:`~policy.sim.engine.SimResult` so far (metrics over the episode)."""
        if self.sim is None:
            raise RuntimeError("result() before reset()")
        return self.sim.result()

    def close(self) -> None:
        built = getattr(self, "_built", None)
        if built is not None and built.close is not None:
            built.close()
            self._built = None
