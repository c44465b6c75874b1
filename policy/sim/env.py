"""Gymnasium environments over the simulator: place pods, scale and rebalance services, minute by minute, in the
benchmark's scenarios and rewarded with the benchmark's objective.

**Setting.** An episode is ``episode_minutes`` of a scenario (:mod:`policy.sim.scenario`: the benchmark's families
in ``policy/data/scenarios/`` or a scenario file): its cluster and node pools, network, interference, background
tenants, events and load, with ``app`` / ``trace`` replacing the app and trace of a one-app scenario (a built-in app
or the folder ``hrl-policy app build`` wrote), starting at a random minute of the trace window drawn by
``reset(seed)`` (or ``options={"offset_min": k}``). ``stack`` (a stack of :mod:`policy.sim.stacks`) does what the
agent does not: its kube-scheduler profile places the pods the agent does not place, its controllers (an HPA, the
hrl-scheduler descheduler) keep running. ``churn`` random evictions per minute (like node maintenance) make
replacement pods to place.

**Decisions** (``mode``):

- ``"placement"`` (``hrl-scheduler/Placement-v1``): the node of the Pending pod, ``Discrete(max_nodes)``, masked to
  the nodes where it fits. Every app pod is a decision: the initial ones at reset, replacements of evicted pods and
  pods the stack's controllers create.
- ``"scaling"`` (``Scaling-v1``): once a minute, a replica delta per service and at most one eviction:
  ``MultiDiscrete([3] * max_services + [max_services * max_nodes + 1])`` (delta = value − 1 for service *s*; the
  last component ``1 + s * max_nodes + n`` evicts one pod of service *s* from node *n*, 0 = none). The stack's
  kube-scheduler places the pods.
- ``"both"`` (``Joint-v1``): each minute starts with a scaling decision, then one placement decision per Pending
  pod, with one ``MultiDiscrete([max_nodes] + [3] * max_services + [max_services * max_nodes + 1])`` action: the
  first component is the node (read in the placement phase), the others the scaling decision (read in the scaling
  phase); the mask leaves the unread part one valid value, so the action space is the same in every phase and
  masked PPO (sb3-contrib MaskablePPO) trains it as it is.

**Masks**: :meth:`SchedulingEnv.action_masks` returns one flat bool array, MaskablePPO's convention (for a
``MultiDiscrete``, the components' masks concatenated); every component always has a valid value. Padding nodes and
padding services are always masked (a padding service may only "hold"). An action outside the mask is counted
(``info["invalid_actions"]``) and costs ``invalid_penalty`` (default 0); an invalid node leaves the pod to the stack's
kube-scheduler, an invalid scaling component does nothing.

**Observations** have a fixed shape whatever the app and cluster: a ``Dict`` of float32 arrays padded to
``max_nodes`` nodes and ``max_services`` services, with masks — ``nodes`` (max_nodes, len(NODE_FEATURES)),
``node_mask`` (max_nodes,), ``services`` (max_services, len(SERVICE_FEATURES)), ``service_mask`` (max_services,),
``calls`` (max_services, max_services): calls from service *i* to service *j* per user request (the call graph,
the topology the policies of this project encode), ``pod`` (len(POD_FEATURES),): the Pending pod being placed, zeros
otherwise, and ``global`` (len(GLOBAL_FEATURES),). Each feature is named with its unit in the FeatureSpecs below;
padding rows are zeros. ``gymnasium.wrappers.FlattenObservation`` gives one vector.

**Reward**: the negated cost of each simulated minute under the benchmark's objective
(:data:`policy.sim.objective.DEFAULT_OBJECTIVE`: latency relative to the SLO, SLO-violating minutes, failed requests,
CPU requested relative to the manifests), returned on the step that completes the minute, 0 on the other steps
(minus ``invalid_penalty`` for an action outside the mask). So an episode's return is −(the benchmark's
``objective``) × minutes, and the mean reward per minute is the number the benchmark reports for the same run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from policy.features import FeatureSpec
from policy.index import ClusterIndex

from .app import AppSpec, load_app
from .cluster import SimPod
from .engine import Simulation
from .model import PerfModel
from .objective import DEFAULT_OBJECTIVE, Objective, minute_outcomes, reference_cores
from .scenario import Scenario, build, load_scenario
from .stacks import StackBuild, StackContext, autoscaled_workloads, build_stack
from .traces import load_trace

__all__ = [
    "MODES",
    "NODE_FEATURES",
    "SERVICE_FEATURES",
    "POD_FEATURES",
    "GLOBAL_FEATURES",
    "OBS_HIGH",
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
        ("schedulable", "flag: neither cordoned nor failed"),
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
        ("service", "index / max_services"),
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
class EnvConfig:
    """An environment (module docstring).

    - ``scenario``: a scenario name (``policy/data/scenarios/``), a scenario file, or its mapping;
    - ``app`` / ``trace``: replace the scenario's app (a built-in name, an ``app.yaml`` or its folder, or an
      :class:`AppSpec`) and trace (a named window or a CSV); one-app scenarios only; ``nodes``: the node count of a
      scenario whose cluster is the app's bench cluster (``appBench``);
    - ``episode_minutes`` per episode (>= 1), from a random offset of the trace window;
    - ``mode``: ``placement`` | ``scaling`` | ``both``; ``stack``: the stack doing what the agent does not;
    - ``churn``: random evictions of app pods per minute (mean, >= 0);
    - ``max_nodes`` / ``max_services``: the padded axes of observations and actions (>= the cluster's nodes / the
      app's services); ``max_replicas`` per service (>= 1);
    - ``n_samples``: user requests sampled per simulated minute (None: the scenario's default);
    - ``objective``: the reward's weights (default: the benchmark's); ``invalid_penalty`` (>= 0) per action outside
      the mask.

    Raises ValueError naming the field for a bad value."""

    scenario: str | Path | Mapping[str, Any] = "baseline-2026-11"
    app: str | AppSpec | None = None
    trace: str | None = None
    nodes: int | None = None
    episode_minutes: int = 30
    mode: str = "both"
    stack: str = "default-kube-scheduler"
    churn: float = 0.2
    max_nodes: int = 16
    max_services: int = 48
    max_replicas: int = 10
    n_samples: int | None = 1000
    objective: Objective = DEFAULT_OBJECTIVE
    invalid_penalty: float = 0.0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode: must be one of {', '.join(MODES)}, got {self.mode!r}")
        for f in ("episode_minutes", "max_nodes", "max_services", "max_replicas"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{f}: must be an integer >= 1, got {v!r}")
        if not (math.isfinite(self.churn) and self.churn >= 0):
            raise ValueError(f"churn: must be >= 0, got {self.churn}")
        if not (math.isfinite(self.invalid_penalty) and self.invalid_penalty >= 0):
            raise ValueError(f"invalid_penalty: must be >= 0, got {self.invalid_penalty}")
        if self.n_samples is not None and self.n_samples < 1:
            raise ValueError(f"n_samples: must be >= 1, got {self.n_samples}")


class SchedulingEnv(gym.Env):
    """See the module docstring. ``render_mode``: ``None`` or ``"ansi"`` (:meth:`render` returns a text frame: the
    minute, the phase and one line per node). Registered as ``hrl-scheduler/Placement-v1``, ``Scaling-v1`` and
    ``Joint-v1`` by :mod:`policy.sim.registration`; keyword arguments override :class:`EnvConfig` fields."""

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
            unknown = sorted(set(overrides) - set(EnvConfig.__dataclass_fields__))
            if unknown:
                raise ValueError(f"unknown option(s) {', '.join(unknown)} (EnvConfig fields: {_fields()})")
            cfg = replace(cfg, **overrides)
        self.config = cfg
        self.scenario: Scenario = load_scenario(cfg.scenario)
        self._app_arg = load_app(cfg.app) if isinstance(cfg.app, (str, Path)) else cfg.app
        probe = self._build(0, minutes=1)
        self.app: AppSpec = probe.app
        self.model = PerfModel(self.app, probe.config.network)
        self.services = self.model.services
        self.S = len(self.services)
        self.N = probe.cluster.nodes
        self.Nmax, self.Smax = cfg.max_nodes, cfg.max_services
        if self.N > self.Nmax:
            raise ValueError(f"max_nodes: {self.Nmax} < the cluster's {self.N} nodes (pass max_nodes={self.N} or more)")
        if self.S > self.Smax:
            raise ValueError(
                f"max_services: {self.Smax} < the app's {self.S} services (pass max_services={self.S} or more)"
            )
        window = min(len(load_trace(t)) for t in probe.traces)
        if window < cfg.episode_minutes:
            raise ValueError(
                f"episode_minutes: {cfg.episode_minutes} > the trace window's {window} minutes "
                f"({', '.join(probe.traces)})"
            )
        self._max_offset = window - cfg.episode_minutes
        self._workload_of = {}
        for obj, w in zip(self.app.deployments, self.app.workloads):
            meta = obj.get("metadata") or {}
            self._workload_of[w.service] = f"{meta.get('namespace') or 'default'}/{meta['name']}"
        scalable = set(autoscaled_workloads(self.app))
        self._scalable = np.array([self._workload_of.get(s) in scalable for s in self.services], dtype=bool)
        self._reference_cores = reference_cores(self.app)
        self._calls = self._call_matrix()
        self._evict_n = self.Smax * self.Nmax + 1
        if cfg.mode == "placement":
            self.action_space: spaces.Space = spaces.Discrete(self.Nmax)
        elif cfg.mode == "scaling":
            self.action_space = spaces.MultiDiscrete([3] * self.Smax + [self._evict_n])
        else:
            self.action_space = spaces.MultiDiscrete([self.Nmax] + [3] * self.Smax + [self._evict_n])
        box = lambda shape, high=OBS_HIGH: spaces.Box(0.0, high, shape=shape, dtype=np.float32)  # noqa: E731
        self.observation_space = spaces.Dict(
            {
                "nodes": box((self.Nmax, len(NODE_FEATURES))),
                "node_mask": box((self.Nmax,), 1.0),
                "services": box((self.Smax, len(SERVICE_FEATURES))),
                "service_mask": box((self.Smax,), 1.0),
                "calls": box((self.Smax, self.Smax)),
                "pod": box((len(POD_FEATURES),)),
                "global": box((len(GLOBAL_FEATURES),)),
            }
        )
        self.sim: Simulation | None = None
        self._built: StackBuild | None = None
        self._pending: SimPod | None = None
        self._phase = 0
        self._rng = np.random.default_rng()
        self._last_minute = None
        self._invalid = 0

    # ---- episode ----------------------------------------------------------------------------------------

    def _build(self, seed: int, minutes: int | None = None, offset_min: int = 0):
        cfg = self.config
        return build(
            self.scenario,
            app=self._app_arg,
            trace=cfg.trace,
            nodes=cfg.nodes,
            minutes=minutes or cfg.episode_minutes,
            seed=seed,
            offset_min=offset_min,
            n_samples=cfg.n_samples,
        )

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        cfg = self.config
        rng = self.np_random
        self._rng = np.random.default_rng(int(rng.integers(2**63)))
        offset = int(rng.integers(0, self._max_offset + 1))
        if options and "offset_min" in options:
            offset = int(options["offset_min"])
            if not 0 <= offset <= self._max_offset:
                raise ValueError(f"options.offset_min: must be in [0, {self._max_offset}], got {offset}")
        sim_seed = int(rng.integers(2**31))
        self.close()
        run = self._build(sim_seed, offset_min=offset)
        simcfg = replace(run.config, per_service=True)
        built = build_stack(cfg.stack, StackContext(run.app, run.cluster, sim_seed, simcfg, rps=run.rps))
        self._built = built
        self.sim = sim = built.simulation(run.app, run.rps, run.cluster, simcfg)
        self.offset_min = offset
        sim.start(schedule=not self._agent_places())  # the agent places the app's pods itself
        if self._agent_places():
            for h in sim.hooks:  # what start() runs before its first scheduling cycle
                if h.at_start:
                    h.fn(sim)
        self._episode_reward = 0.0
        self._invalid = 0
        self._skip: set[str] = set()
        self._last_minute = None
        self._phase = 0
        self._pending = None
        self._advance_to_decision(reward=0.0)
        return self._obs(), self._info()

    def _agent_places(self) -> bool:
        return self.config.mode in ("placement", "both")

    def _advance_to_decision(self, reward: float) -> tuple[float, bool]:
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
            if not sim._in_minute:
                # a new minute: controllers act, churn evicts, then (scaling/both) the agent scales
                if sim.before_minute is not None:
                    sim.before_minute(sim)
                sim.begin_minute()
                self._skip = set()
                self._churn()
                if cfg.mode in ("scaling", "both"):
                    self._phase = 0
                    return reward, False
                continue
            reward += self._finish_minute()

    def _finish_minute(self) -> float:
        sim = self.sim
        assert sim is not None
        st = sim.finish_minute()
        self._last_minute = st
        return self.minute_reward()

    def _churn(self) -> None:
        sim = self.sim
        if self.config.churn <= 0 or sim is None or sim.minute == 0:
            return
        k = int(self._rng.poisson(self.config.churn))
        pods = [p for p in sim.cluster.live_pods() if p.node >= 0 and not sim.is_background(p)]
        for i in self._rng.permutation(len(pods))[:k]:
            sim.evictor.evict(pods[int(i)].info, "churn")

    def minute_reward(self) -> float:
        """The reward of the minute just simulated: minus its cost under ``config.objective`` (module docstring),
        computed from the run's own per-minute series as the benchmark computes its ``objective``."""
        sim = self.sim
        assert sim is not None
        series = sim.series_so_far()
        last = minute_outcomes({k: series[k][-1:] for k in _OUTCOME_SERIES})
        return -float(self.config.objective.costs(last, self.app.slo_p95_ms, self._reference_cores)[0])

    def step(self, action):
        if self.sim is None:
            raise RuntimeError("step() before reset()")
        cfg = self.config
        a = np.asarray(action, dtype=np.int64).reshape(-1)
        if len(a) != (self.action_space.shape[0] if self.action_space.shape else 1):
            raise ValueError(f"action: expected shape {self.action_space.shape or ()}, got {np.shape(action)}")
        reward = 0.0
        if self._phase == 1 and self._pending is not None:
            reward -= self._place(int(a[0]))
        else:
            reward -= self._scale(a[1:] if cfg.mode == "both" else a)
            if not self._agent_places():
                reward += self._finish_minute()
            self._phase = 1
        reward, done = self._advance_to_decision(reward)
        self._episode_reward += reward
        return self._obs(), float(reward), False, bool(done), self._info()  # the episode's end is a time limit

    def _refused(self) -> float:
        self._invalid += 1
        return self.config.invalid_penalty

    def _place(self, node_idx: int) -> float:
        """Bind the Pending pod to node ``node_idx``; returns the penalty (0, or ``invalid_penalty``)."""
        sim = self.sim
        pod = self._pending
        assert sim is not None and pod is not None
        penalty = 0.0
        if 0 <= node_idx < self.N and self._place_mask(pod)[node_idx]:
            sim.schedule_one(pod, sim.cluster.nodes[node_idx].name)
        else:
            penalty = self._refused()
            sim.schedule_one(pod)  # the stack's kube-scheduler decides instead
            if pod.node < 0:  # its filters rejected every node: it waits for the next minute
                self._skip.add(pod.info.key)
        self._pending = None
        return penalty

    def _scale(self, a: np.ndarray) -> float:
        """Apply a scaling decision (``Smax`` deltas + one eviction); returns the penalty."""
        sim = self.sim
        assert sim is not None
        masks = self._scale_masks()
        penalty = 0.0
        for i in range(self.Smax):
            d = int(a[i])
            if not (0 <= d <= 2) or not masks[3 * i + d]:
                penalty += self._refused()
            elif d != 1:
                w = self._workload_of[self.services[i]]
                sim.scale(w, int(sim.cluster.replicas[w]) + d - 1)
        ev = int(a[self.Smax])
        emask = masks[3 * self.Smax :]
        if not (0 <= ev < len(emask)) or not emask[ev]:
            penalty += self._refused()
        elif ev > 0:
            s, n = divmod(ev - 1, self.Nmax)
            svc = self.services[s]
            for p in sim.cluster.live_pods():
                if p.node == n and p.info.service == svc and not sim.is_background(p):
                    sim.evictor.evict(p.info, "agent")
                    break
        return penalty

    # ---- the stack's own decision -----------------------------------------------------------------------

    def stack_action(self, build: StackBuild | None = None) -> Any:
        """The action that does what a stack would do now: in the placement phase, the node its kube-scheduler
        profile picks for the Pending pod (``build``: another stack's :class:`StackBuild`, e.g. ``hrl-scheduler``'s
        to place with its learned extender; default: this environment's stack, whose cycle it then is: same
        random numbers as the stack alone); in the scaling phase, hold (no change, no eviction), so the stack's own
        controllers decide. The node falls back to the first valid one when the scheduler finds none the mask
        allows."""
        sim = self.sim
        if sim is None:
            raise RuntimeError("stack_action() before reset()")
        node = 0
        if self._phase == 1 and self._pending is not None:
            b = build or self._built
            assert b is not None
            snap = sim.observe()
            if b.on_change is not None:
                b.on_change(snap)
            rng = sim.rng_sched if build is None else self._rng
            res = b.scheduler.schedule(
                self._pending.info, self._pending.obj, ClusterIndex.build(snap), sim.node_objs, rng
            )
            mask = self._place_mask(self._pending)
            names = [n.name for n in sim.cluster.nodes]
            node = names.index(res.node) if res.node in names and mask[names.index(res.node)] else int(mask.argmax())
        hold = np.r_[np.ones(self.Smax, dtype=np.int64), 0]
        if self.config.mode == "placement":
            return node
        if self.config.mode == "scaling":
            return hold
        return np.r_[node, hold]

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
            m[i] = (
                not n.unschedulable
                and i not in sim.failed_nodes
                and req_cpu[i] + pod.info.requests.cpu_m <= n.allocatable.cpu_m
                and req_mem[i] + pod.info.requests.memory_bytes <= n.allocatable.memory_bytes
                and count[i] + 1 <= n.allocatable_pods
                and all(n.labels.get(k) == v for k, v in pod.info.node_selector.items())
            )
        return m

    def _scale_masks(self) -> np.ndarray:
        sim = self.sim
        assert sim is not None
        per = np.zeros((self.Smax, 3), dtype=bool)
        per[:, 1] = True  # hold is always valid (padding services: the only valid value)
        for i, s in enumerate(self.services):
            w = self._workload_of.get(s)
            cur = int(sim.cluster.replicas.get(w, 0)) if w else 0
            ok = bool(self._scalable[i]) and w is not None
            per[i, 0] = ok and cur > 1
            per[i, 2] = ok and cur < self.config.max_replicas
        ev = np.zeros(self._evict_n, dtype=bool)
        ev[0] = True
        for p in sim.cluster.live_pods():
            if p.node >= 0 and not sim.is_background(p) and p.info.service in self.model.pos:
                ev[1 + self.model.pos[p.info.service] * self.Nmax + p.node] = True
        return np.concatenate([per.reshape(-1), ev])

    def action_masks(self) -> np.ndarray:
        """The valid actions now, as one flat bool array (sb3-contrib MaskablePPO's convention): placement →
        (max_nodes,); scaling → (3 max_services + max_services·max_nodes + 1,), per component concatenated; both →
        (max_nodes + the scaling mask's length,), where the part the current phase does not read allows one value
        only (node 0; hold and no eviction)."""
        if self.sim is None:
            raise RuntimeError("action_masks() before reset()")
        mode = self.config.mode
        placing = self._phase == 1 and self._pending is not None
        if placing:
            place = self._place_mask(self._pending)
        else:
            place = np.zeros(self.Nmax, dtype=bool)
            place[0] = True
        if mode == "placement":
            return place if placing else np.ones(self.Nmax, dtype=bool)
        if placing:
            scale = np.zeros(3 * self.Smax + self._evict_n, dtype=bool)
            scale[1 : 3 * self.Smax : 3] = True  # hold
            scale[3 * self.Smax] = True  # no eviction
        else:
            scale = self._scale_masks()
        return scale if mode == "scaling" else np.concatenate([place, scale])

    # ---- observations -----------------------------------------------------------------------------------

    def _call_matrix(self) -> np.ndarray:
        """(Smax, Smax) calls from service i to service j per user request (padded with zeros)."""
        m = self.model
        out = np.zeros((self.Smax, self.Smax), dtype=np.float32)
        for a, b, calls, _p in m.edges:
            out[a, b] += float(calls * m.visits[a])
        return out

    def _obs(self) -> dict[str, np.ndarray]:
        sim = self.sim
        assert sim is not None
        N, S = self.N, self.S
        nodes = np.zeros((self.Nmax, len(NODE_FEATURES)), dtype=np.float64)
        svc = np.zeros((self.Smax, len(SERVICE_FEATURES)), dtype=np.float64)
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
            for p, m in zip(last.ready, last.step.pod_memory_mi):
                used_mem[p.node] += m * 1024 * 1024
            used_mem += np.asarray(sim.last_node_bg_mem_mi) * 1024 * 1024
        zones = sorted(set(sim.node_zones))
        zid = np.array([zones.index(z) for z in sim.node_zones], dtype=np.float64) / max(len(zones), 1)
        # the decision pod's service: locality features
        dec = self.model.pos.get(self._pending.info.service) if self._pending is not None else None
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
        schedulable = np.array(
            [0.0 if (n.unschedulable or i in sim.failed_nodes) else 1.0 for i, n in enumerate(sim.cluster.nodes)]
        )
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
                schedulable,
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
        svc[:S] = np.stack(
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
                (dec or 0) / self.Smax,
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
        node_mask = np.zeros(self.Nmax, dtype=np.float32)
        node_mask[:N] = 1.0
        service_mask = np.zeros(self.Smax, dtype=np.float32)
        service_mask[:S] = 1.0
        return {
            "nodes": _clip(nodes),
            "node_mask": node_mask,
            "services": _clip(svc),
            "service_mask": service_mask,
            "calls": _clip(self._calls),
            "pod": _clip(pod_f),
            "global": _clip(glob),
        }

    def _info(self) -> dict[str, Any]:
        sim = self.sim
        d: dict[str, Any] = {
            "phase": "placement" if self._phase == 1 else "scaling",
            "minute": sim.minute if sim else 0,
            "episode_reward": getattr(self, "_episode_reward", 0.0),
            "invalid_actions": self._invalid,
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
        """The simulation's :class:`~policy.sim.engine.SimResult` so far (metrics and series over the episode)."""
        if self.sim is None:
            raise RuntimeError("result() before reset()")
        return self.sim.result()

    def close(self) -> None:
        built = self._built
        if built is not None and built.close is not None:
            built.close()
        self._built = None


#: The per-minute series the objective reads (:func:`policy.sim.objective.minute_outcomes`).
_OUTCOME_SERIES = ("latency_mean_ms", "latency_p95_ms", "failed", "offered", "cpu_cores_requested")


def _fields() -> str:
    return ", ".join(EnvConfig.__dataclass_fields__)


_clip: Callable[[np.ndarray], np.ndarray] = lambda x: np.clip(  # noqa: E731
    np.nan_to_num(x, nan=0.0, posinf=OBS_HIGH), 0.0, OBS_HIGH
).astype(np.float32)
