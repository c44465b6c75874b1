"""[torch] Training of the learned placement policy (:mod:`policy.lowlevel`) in the simulator, and its export.

**Setting (trained as served).** Every scheduling cycle of the simulated kube-scheduler
(:class:`policy.sim.kube_scheduler.KubeSchedulerModel` with the default score plugins) computes the in-tree total
``D_c`` of each feasible candidate *c*; the policy adds its extender score ``s_c = 10·sigmoid(f_θ(x_c))`` as
kube-scheduler does with the shipped weight 2: ``total_c = D_c + 20·round(s_c)``. Training samples the node from
``π(c) = softmax_c(total_c / T)`` (rounding in the forward pass, straight-through in the backward pass); the
served decision is kube-scheduler's ``argmax_c total_c``, i.e. the trained policy's greedy choice
(``test_placement.py`` checks the two agree on sampled states).

**Algorithm: PPO-clip with a common-random-numbers leave-one-out baseline, no critic.** The action is a choice
among a variable set of candidate nodes, so the policy is one per-candidate scorer shared by all candidates
with a softmax over them (a pointer-style categorical policy, as in Decima, Mao et al. SIGCOMM 2019, and the
routing policies of Kool et al. ICLR 2019): it works for any cluster size and candidate sample. Its effect is
delayed (a pod placed at minute 0 shapes latency for the whole episode) and small against the noise of the
load, so a learned critic of a whole cluster state would be hard to fit in minutes of CPU; instead each
training instance (app, cluster, background tenants, trace window, churn, simulator seed) is rolled out K
times with the same random numbers (the simulator's streams are seeded per instance), and each decision taken
at minute *t* gets the advantage ``G_k(t) − mean_{j≠k} G_j(t)`` (reward-to-go from minute *t*, the other
rollouts' mean as baseline: Kool et al. 2019, "Buy 4 REINFORCE samples, get a baseline for free"; Decima's
input-driven baseline uses the same idea). Everything but the placements is then identical between the K
rollouts, so the advantage isolates what the placements did. The update is PPO's clipped surrogate
(Schulman et al. 2017) for a few epochs over each batch plus a small entropy bonus. Q-learning was not chosen:
bootstrapping a per-candidate value through the simulator's long, shared consequences is unstable, and the
simulator is cheap enough (a 20-minute episode of Online Boutique is ~0.1 s) for Monte Carlo returns.

**Episodes.** Train apps (default: online-boutique, sock-shop, dsb-hotel-reservation) on random clusters (0.5-1.5 × the
benchmark's node count, 1-3 zones; half of them two node pools whose sizes and per-core speeds are drawn independently,
:func:`mixed_cluster`, with or without the speed label), background tenants on most of them (random requests and CPU
use, measured from minute 0: :func:`policy.sim.placement.start_with_metrics`), metrics hidden on some (no
``NodeInfo.usage``), a random window of a random trace scaled to a random peak, the initial deployment and then churn
(random evictions, scale-outs and scale-ins whose new pods are placed again), and a high-level intent on part of them
(drawn from the intents the trained high level sends, when given, else uniform). Reward per simulated minute
(:class:`PlacementReward`): the one objective of hrl-scheduler (:mod:`policy.sim.objective`: latency relative to the
SLO, SLO-violating minutes, failed requests; its CPU term does not depend on placement and is left out) plus the low
level's intrinsic term for following the intent (FeUdal / HIRO style)::

    r = objective reward − ( locality_weight · 0.1 · cross-node call share + balance_weight · CPU overload )

where the intent's ``locality_weight`` / ``balance_weight`` (:data:`policy.lowlevel.INTENT_SPEC`, default 1; the
locality weight already multiplied by the pod's service's co-location priority) weigh the share of calls
crossing nodes and the mean over nodes of ``clip((CPU used fraction − 0.7) / 0.3, 0, 1)``. So the high level
steers the low level by reweighting its objective, and at the defaults both terms are small next to latency and
failures.

Outputs under ``run_dir`` (``hrl-policy train placement``: ``runs/placement-<stack>``): ``log.csv`` (one row per
iteration), ``learning_curves.png``, ``checkpoint.pt`` (best by the periodic evaluation), ``evaluations.json`` (each
evaluation, per instance), ``report.json``; the bundle goes
to ``out`` (``hrl-policy train placement``: ``policy/bundles/<stack>/low``, see :data:`VARIANTS`).
"""

from __future__ import annotations

import csv
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from policy.baselines.kube_default import default_score_plugins
from policy.bundle import PolicyBundle, content_version
from policy.encoder import DEFAULT_ENCODER_BUNDLE, NODE_SPEC, GraphEncoder
from policy.index import ClusterIndex
from policy.lowlevel import (
    CONTEXT_FEATURES,
    FLAT_ROWS_VERSION,
    PLACEMENT_INTENTS,
    ServiceRowCache,
    featurize_candidates,
    intent_value,
    placement_feature_spec,
)
from policy.lowlevel.learned import (
    EXTENDER_WEIGHT,
    OVERLOAD_FROM,
    PLACEMENT_ARCH,
    LearnedPlacement,
    mlp_logits,
    mlp_weight_shapes,
    scores_from_logits,
    served_totals,
)
from policy.sim.app import load_app
from policy.sim.engine import BackgroundPod, PeriodicHook, SimConfig, Simulation, background_tenants
from policy.sim.kube_scheduler import KubeSchedulerModel, ScheduleResult
from policy.sim.objective import MinuteOutcome, Objective
from policy.sim.placement import compare, markdown_table, start_with_metrics
from policy.sim.pools import NodePool, PoolClusterSpec
from policy.sim.sizing import REGION, KubeletClusterSpec, app_bench, cluster_for, trace_rps
from policy.sim.stacks import autoscaled_workloads, terms_lookup
from policy.sim.synthetic import synthetic_app
from policy.sim.traces import load_trace
from policy.telemetry import note, progress_bar

from .episodes import TrainingTarget
from .finetune import FineTune, RunOptions
from .tensorboard import TrainingBoard, open_board

__all__ = [
    "PlacementNet",
    "PlacementReward",
    "PlacementTrainConfig",
    "Instance",
    "sample_instance",
    "SamplingScheduler",
    "rollout",
    "DecisionBatch",
    "decision_batch",
    "ppo_update",
    "export_placement",
    "train_placement",
    "save_checkpoint",
    "export_checkpoint",
    "VARIANTS",
    "FINE_TUNE",
    "fine_tune_sources",
    "check_fine_tune",
    "train_stage",
    "run_cli",
]

ROOT = Path(__file__).resolve().parents[2]
TRACES = ("nasa", "twitter", "bursty")
ZONE_SETS = (("zone-a",), ("zone-a", "zone-b"), ("zone-a", "zone-b", "zone-c"))


class PlacementNet(nn.Module):
    """``placement-mlp-v1`` in torch (see :mod:`policy.lowlevel`): ``forward(x (..., F)) -> z (...)``, the
    pre-sigmoid output; inputs are normalised inside with the buffers ``mean`` / ``std``."""

    def __init__(self, features: int, hidden: int = 64, layers: int = 2):
        super().__init__()
        self.config = {"features": features, "hidden": hidden, "layers": layers}
        mods: list[nn.Module] = []
        d = features
        for _ in range(layers):
            mods += [nn.Linear(d, hidden), nn.Tanh()]
            d = hidden
        mods.append(nn.Linear(d, 1))
        self.net = nn.Sequential(*mods)
        with torch.no_grad():  # start neutral: every score 5, the default scheduler decides
            self.net[-1].weight.mul_(0.01)
            self.net[-1].bias.zero_()
        self.register_buffer("mean", torch.zeros(features), persistent=False)
        self.register_buffer("std", torch.ones(features), persistent=False)

    def set_normalization(self, mean: np.ndarray, std: np.ndarray) -> None:
        self.mean.copy_(torch.as_tensor(np.asarray(mean, np.float32)))
        self.std.copy_(torch.as_tensor(np.maximum(np.asarray(std, np.float32), 1e-6)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net((x - self.mean) / self.std).squeeze(-1)

    def numpy_weights(self) -> dict[str, np.ndarray]:
        """The state_dict as float32 numpy arrays (the bundle's ``weights``)."""
        return {k: v.detach().cpu().numpy().astype(np.float32) for k, v in self.state_dict().items()}

    def load_bundle(self, bundle: PolicyBundle) -> None:
        """Take the weights and the input normalization (``normalization.candidate``, F means and stds) of a
        ``placement-mlp-v1`` ``bundle`` of the same shapes (a fine-tune's start). Raises ValueError naming the bundle
        and the array whose shape differs."""
        sd = self.state_dict()
        new = {}
        for k, t in sd.items():
            a = np.array(bundle.array(k), dtype=np.float32)  # a copy: bundle arrays are read-only
            if tuple(a.shape) != tuple(t.shape):
                raise ValueError(f"{bundle.where}: weights.{k}: shape {list(a.shape)}, expected {list(t.shape)}")
            new[k] = torch.as_tensor(a)
        self.load_state_dict(new)
        self.set_normalization(*bundle.norm("candidate", self.config["features"]))


@dataclass(frozen=True)
class PlacementReward:
    """Per-minute reward of the placement training (module docstring): ``objective`` is the one objective
    (:class:`policy.sim.objective.Objective`) without its CPU term (replicas do not depend on placement);
    ``locality`` / ``balance``: scale of the intrinsic cross-node call share and CPU-overload terms, multiplied by
    the intent's ``locality_weight`` / ``balance_weight``; ``overload_from``: the CPU used fraction above which a
    node counts as overloaded."""

    objective: Objective = field(default_factory=lambda: Objective(cpu_price=0.0))
    locality: float = 0.1
    balance: float = 1.0
    overload_from: float = 0.7


@dataclass(frozen=True)
class PlacementTrainConfig:
    """Hyperparameters of :func:`train_placement` (the defaults trained the committed bundles).

    - ``seed``: seeds instance sampling, the policy's sampling and torch;
    - ``service_input``: ``"encoder"`` (the graph encoder's embeddings) or ``"flat"`` (``hrl-no-encoder``);
    - ``train_apps``: built-in apps episodes are drawn from; ``synthetic_share``: share of instances on a random
      synthetic app instead (:func:`policy.sim.synthetic.synthetic_app`, ``synthetic_services`` services: new
      call graphs for generalisation); ``heldout_apps``: evaluated only, at the end;
    - ``iterations``: policy updates; ``instances_per_iter``: training instances per update; ``rollouts``: K
      rollouts per instance with common random numbers (the leave-one-out baseline needs K >= 2);
    - ``episode_minutes``: simulated minutes per rollout; ``n_samples``: requests sampled per minute;
    - ``node_scale``: cluster size range as a multiple of the app's benchmark node count;
      ``background_prob``: share of instances with background tenants; ``hidden_usage_prob``: share with
      node metrics hidden (no ``usage``); ``load_range``: trace peak as a multiple of the benchmark's;
    - ``mixed_prob``: share of instances on a cluster of two node pools (:func:`mixed_cluster`) whose per-core speeds
      are drawn independently from ``speed_range`` and whose second pool's nodes are ``mixed_sizes`` times the
      first's (so fast and slow nodes come both large and small: ``node_slowness`` is what tells them apart);
    - ``evictions_per_min``: mean random evictions per minute; ``scale_prob``: chance per minute of a random
      scale-out (and half of it of a scale-in); ``intent_prob``: share of instances with a random intent
      (components uniform in ``intent_range``; the rest use the defaults); ``intent_gain``: points of score
      per unit of :func:`policy.lowlevel.intent_adjustment` (the served score's direct intent term, trained with);
      ``saturation_guard``: multiply the score by :func:`policy.lowlevel.saturation_factor` (trained and served);
    - ``temperature``: T of ``softmax(total / T)``, in kube-scheduler score points (20 = one extender point
      is one nat), annealed geometrically to ``temperature_final`` over the iterations: the served policy is
      the greedy one (T → 0), and a policy that is only good when it samples would pile pods onto whichever
      node its argmax prefers; ``hidden``, ``layers``: the MLP; ``lr`` (Adam), ``update_epochs``, ``clip`` (PPO ratio
      clip), ``entropy_coef``, ``max_grad_norm``, ``adv_clip`` (normalised advantages are clipped to ±this, so
      one instance whose rollouts diverge wildly — an OOM cascade — does not drown the batch);
    - ``eval_every``: iterations between greedy evaluations on ``eval_instances`` fixed instances per train
      app (the best one is kept); ``final_seeds``: seeds of the final comparison on every app;
    - ``time_budget_s``: stop training after this many seconds (``None``: run every iteration);
      ``save_eval_checkpoints``: keep the weights of every evaluation (``eval-<iteration>.pt``, for analysis);
    - ``threads``: torch CPU threads (1: this machine's cores are shared);
    - ``quick``: a smoke-test run (:data:`QUICK`): its ``policy_version`` says ``-quick``.

    Raises ``ValueError`` naming the field for ``iterations`` < 1, ``time_budget_s`` <= 0 or not finite, or a
    negative ``seed``.
    """

    seed: int = 0
    service_input: str = "encoder"
    train_apps: tuple[str, ...] = ("online-boutique", "sock-shop", "dsb-hotel-reservation")
    synthetic_share: float = 0.3
    synthetic_services: tuple[int, int] = (6, 40)
    heldout_apps: tuple[str, ...] = ("dsb-social-network", "dsb-media-microservices", "alibaba")
    iterations: int = 160
    instances_per_iter: int = 2
    rollouts: int = 4
    episode_minutes: int = 20
    n_samples: int = 1000
    node_scale: tuple[float, float] = (0.5, 1.5)
    background_prob: float = 0.7
    hidden_usage_prob: float = 0.3
    load_range: tuple[float, float] = (0.6, 1.2)
    mixed_prob: float = 0.5
    speed_range: tuple[float, float] = (0.6, 1.4)
    mixed_sizes: tuple[float, ...] = (0.5, 2.0)
    evictions_per_min: float = 0.3
    scale_prob: float = 0.1
    intent_prob: float = 0.5
    intent_range: tuple[float, float] = (0.0, 3.0)
    intent_gain: float = 3.0
    saturation_guard: bool = True
    temperature: float = 20.0
    temperature_final: float = 5.0
    hidden: int = 64
    layers: int = 2
    lr: float = 5e-4
    update_epochs: int = 4
    clip: float = 0.2
    entropy_coef: float = 0.003
    max_grad_norm: float = 1.0
    adv_clip: float = 4.0
    eval_every: int = 20
    eval_instances: int = 3
    final_seeds: tuple[int, ...] = (0, 1, 2)
    final_minutes: int = 30
    time_budget_s: float | None = None
    save_eval_checkpoints: bool = False
    reward: PlacementReward = field(default_factory=PlacementReward)
    threads: int = 1
    quick: bool = False

    def __post_init__(self) -> None:
        if self.iterations < 1:
            raise ValueError(f"iterations: expected an integer >= 1, got {self.iterations}")
        if self.time_budget_s is not None and not (math.isfinite(self.time_budget_s) and self.time_budget_s > 0):
            raise ValueError(f"time_budget_s: expected a number of seconds > 0, got {self.time_budget_s}")
        if self.seed < 0:
            raise ValueError(f"seed: expected an integer >= 0, got {self.seed}")
        if not 0 <= self.mixed_prob <= 1:
            raise ValueError(f"mixed_prob: expected a share in [0, 1], got {self.mixed_prob}")
        lo, hi = self.speed_range
        if not (0 < lo <= hi and math.isfinite(hi)):
            raise ValueError(f"speed_range: expected 0 < low <= high, got {self.speed_range}")
        if not self.mixed_sizes or min(self.mixed_sizes) <= 0:
            raise ValueError(f"mixed_sizes: expected factors > 0, got {self.mixed_sizes}")


# ---- instances --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Instance:
    """One training situation; the K rollouts of an instance share everything here (and so the simulator's
    random numbers): only the placements differ."""

    app: Any  # AppSpec
    cluster: Any  # ClusterSpec
    rps: np.ndarray
    sim_seed: int
    events_seed: int
    intent: tuple[float, ...] | None
    hidden_usage: bool
    evictions_per_min: float
    scale_prob: float


_APPS: dict[str, Any] = {}


def _app(name: str):

    if name not in _APPS:
        _APPS[name] = load_app(name)
    return _APPS[name]


def sample_instance(
    cfg: PlacementTrainConfig,
    rng: np.random.Generator,
    app_name: str | None = None,
    randomize: bool = True,
    mixed: bool = False,
) -> Instance:
    """A random training instance (module docstring) of ``app_name`` (default: a random train app).
    ``randomize=False``: the benchmark cluster with background tenants, default intent, metrics on (the fixed
    evaluation instances); with ``mixed``, that cluster split into two pools of the slowest and the fastest speed of
    ``cfg.speed_range`` (:func:`mixed_cluster`), so the evaluation that picks the kept checkpoint sees node speed."""
    if app_name is None and randomize and rng.random() < cfg.synthetic_share:
        app = synthetic_app(
            int(rng.integers(cfg.synthetic_services[0], cfg.synthetic_services[1] + 1)),
            seed=int(rng.integers(2**31)),
            name="synthetic",
        )
    else:
        app = _app(app_name or str(rng.choice(cfg.train_apps)))
    b = app_bench(app)
    M = cfg.episode_minutes
    trace = str(rng.choice(TRACES))
    whole = len(load_trace(trace))
    offset = int(rng.integers(0, max(1, whole - M)))
    if randomize:
        nodes = max(3, int(round(b.nodes * rng.uniform(*cfg.node_scale))))
        zones = ZONE_SETS[int(rng.integers(len(ZONE_SETS)))]
        load = float(rng.uniform(*cfg.load_range))
        bg = rng.random() < cfg.background_prob
        hidden = bool(rng.random() < cfg.hidden_usage_prob)
        intent = None
        if rng.random() < cfg.intent_prob:
            intent = tuple(float(rng.uniform(*cfg.intent_range)) for _ in PLACEMENT_INTENTS)
    else:
        nodes, zones, load, bg, hidden, intent = b.nodes, ZONE_SETS[2], 1.0, True, False, None
    spec = replace(cluster_for(app, nodes), zones=zones)
    # drawn only when asked, so mixed_prob=0 samples what the earlier trainings sampled
    if randomize and cfg.mixed_prob > 0 and nodes >= 2 and rng.random() < cfg.mixed_prob:
        spec = mixed_cluster(spec, rng, cfg.speed_range, cfg.mixed_sizes)
    elif mixed and nodes >= 2:
        spec = mixed_cluster(spec, rng, cfg.speed_range, cfg.mixed_sizes, extremes=True)
    sim_seed = int(rng.integers(2**31))
    if bg:
        tenants = {
            "pods_per_node": int(rng.integers(1, 4)),
            "request_frac": float(rng.uniform(0.1, 0.5)),
            "use_frac": float(rng.uniform(0.05, 0.7)),
            "memory_frac": float(rng.uniform(0.1, 0.3)),
            "seed": sim_seed,
        }
        spec = replace(spec, background=_background(spec, tenants))
    rps = trace_rps(app, trace, M, offset) * load
    return Instance(
        app, spec, rps, sim_seed, int(rng.integers(2**31)), intent, hidden, cfg.evictions_per_min, cfg.scale_prob
    )


def mixed_cluster(
    base: KubeletClusterSpec,
    rng: np.random.Generator,
    speed_range: tuple[float, float] = (0.6, 1.4),
    sizes: Sequence[float] = (0.5, 2.0),
    label_prob: float = 0.5,
    extremes: bool = False,
) -> PoolClusterSpec:
    """``base``'s node count split at random into two pools (each at least one node) over ``base.zones``: the first
    of ``base``'s node size, the second ``sizes``-times it (one factor drawn), each pool's per-core speed drawn
    uniformly from ``speed_range`` (:class:`policy.sim.pools.NodePool`), the nodes labelled with their speed
    (:data:`policy.state.LABEL_CPU_SPEED`) with probability ``label_prob`` (else the policy has only the measured
    estimate); ``extremes``: the two pools get the two ends of ``speed_range`` instead, in random order.
    ``base.nodes`` must be >= 2."""
    k = int(rng.integers(1, base.nodes))
    f = float(rng.choice(np.asarray(sizes, dtype=np.float64)))
    speeds = (
        rng.permutation(np.asarray(speed_range, dtype=np.float64)) if extremes else rng.uniform(*speed_range, size=2)
    )
    labelled = bool(rng.random() < label_prob)
    pools = tuple(
        NodePool(
            name,
            count,
            cpu_m=int(base.cpu_m * g),
            memory_bytes=int(base.memory_bytes * g),
            speed=float(v),
            max_pods=base.max_pods,
            zones=tuple(base.zones),
            region=REGION,
            speed_label=labelled,
        )
        for name, count, g, v in (("first", k, 1.0, speeds[0]), ("second", base.nodes - k, f, speeds[1]))
    )
    return PoolClusterSpec.of(pools, max_pods=base.max_pods)


def _background(spec: Any, tenants: dict[str, Any]) -> tuple[BackgroundPod, ...]:
    """:func:`policy.sim.engine.background_tenants` on every node of ``spec``, each pool's by its own node size."""
    if not isinstance(spec, PoolClusterSpec):
        return background_tenants(spec.nodes, spec.cpu_m, spec.memory_bytes, **tenants)
    out: list[BackgroundPod] = []
    first = 0
    for i, pool in enumerate(spec.pools):
        kw = dict(tenants, seed=int(tenants["seed"]) + i)
        for b in background_tenants(pool.count, pool.cpu_m, pool.memory_bytes, **kw):
            out.append(replace(b, name=f"{b.name}-{pool.name}", node=b.node + first))
        first += pool.count
    return tuple(out)


def churn_hook(inst: Instance) -> PeriodicHook:
    """Random evictions (Poisson), scale-outs and scale-ins every minute, drawn from ``inst.events_seed`` and
    chosen by service (not by node), so every rollout of the instance sees the same events."""
    rng = np.random.default_rng(inst.events_seed)
    scalable = sorted(autoscaled_workloads(inst.app))
    base = {}

    def run(sim: Simulation) -> None:
        k = int(rng.poisson(inst.evictions_per_min))
        u_scale = rng.random()
        pick_w = int(rng.integers(1 << 30))
        picks = rng.integers(1 << 30, size=max(k, 1))
        bound = {}
        for p in sim.cluster.live_pods():
            if p.node >= 0 and not sim.is_background(p):
                bound.setdefault(p.info.service, []).append(p)
        services = sorted(bound)
        for j in range(k):
            if not services:
                break
            svc = services[int(picks[j]) % len(services)]
            pod = sorted(bound[svc], key=lambda q: q.info.key)[0]
            sim.evictor.evict(pod.info, "churn")
            bound[svc].remove(pod)
            if not bound[svc]:
                services.remove(svc)
        if scalable and u_scale < inst.scale_prob * 1.5:
            w = scalable[pick_w % len(scalable)]
            cur = int(sim.cluster.replicas[w])
            base.setdefault(w, cur)
            if u_scale < inst.scale_prob and cur < base[w] + 2:
                sim.scale(w, cur + 1)
            elif u_scale >= inst.scale_prob and cur > base[w]:
                sim.scale(w, cur - 1)

    return PeriodicHook("churn", 1, run)


# ---- the scheduler with the policy inside -------------------------------------------------------------------


@dataclass
class Decision:
    """One sampled placement: candidate rows ``x`` (C, F), in-tree totals ``d`` (C,), the chosen index, its
    log-probability under the sampling policy, and the minute it was taken."""

    x: np.ndarray
    d: np.ndarray
    choice: int
    logp: float
    minute: int


class SamplingScheduler(KubeSchedulerModel):
    """kube-scheduler's default profile whose node choice combines the in-tree totals with the policy's
    extender score exactly as served (``served_totals``), then samples (``mode="sample"``), takes the argmax
    (``"greedy"``: what kube-scheduler with the extender does) or ignores the policy (``"default"``)."""

    def __init__(
        self,
        plugins,
        policy_state: dict[str, Any],
        rows: ServiceRowCache,
        *,
        mode: str = "sample",
        intent: Sequence[float] | None = None,
        hidden_usage: bool = False,
        temperature: float = 20.0,
        rng: np.random.Generator | None = None,
    ):
        super().__init__(plugins=plugins, extenders=[])
        self.state = policy_state
        self.rows = rows
        self.mode = mode
        self.intent = intent
        self.hidden_usage = hidden_usage
        self.temperature = temperature
        self.rng_policy = rng or np.random.default_rng(0)
        self.decisions: list[Decision] = []
        self.minute: Callable[[], int] = lambda: 0

    def schedule(self, pod, pod_obj, index: ClusterIndex, node_objs, rng) -> ScheduleResult:
        base = super().schedule(pod, pod_obj, index, node_objs, rng)
        if self.mode == "default" or base.node is None or base.feasible <= 1 or not base.scores:
            return base
        names = list(base.scores)
        d = np.array([base.scores[n] for n in names], dtype=np.float64)
        if self.hidden_usage:
            index = replace(index, usage_cpu_m=np.full_like(index.usage_cpu_m, np.nan))
        x = featurize_candidates(pod, names, index, self.rows.get(index.snapshot), self.intent)
        st = self.state
        z = mlp_logits(st["weights"], x, st["mean"], st["std"], st["layers"])
        totals = served_totals(d, scores_from_logits(z, x, st["intent_gain"], st["saturation_guard"]))
        if self.mode == "greedy":
            best = np.flatnonzero(totals == totals.max())
            k = int(best[int(rng.integers(0, len(best)))]) if len(best) > 1 else int(best[0])
            return replace(base, node=names[k])
        lg = totals / self.temperature
        lg = lg - lg.max()
        p = np.exp(lg)
        p /= p.sum()
        k = int(self.rng_policy.choice(len(names), p=p))
        self.decisions.append(Decision(x, d, k, float(np.log(max(p[k], 1e-300))), self.minute()))
        return replace(base, node=names[k])


def minute_reward(sim: Simulation, st, inst: Instance, w: PlacementReward) -> float:
    """The reward of one simulated minute (module docstring)."""
    slo = inst.app.slo_p95_ms
    mean = float(st.latency_ms.mean()) if len(st.latency_ms) else math.inf
    outcome = MinuteOutcome(mean, st.p95_ms, st.failed, st.offered, 0.0)
    r = float(w.objective.rewards(outcome, slo, 1.0)[0])
    calls = st.step.calls_rps
    cross = st.step.cross_calls_rps / calls if calls > 0 else 0.0
    snap = sim.observe()
    used = np.array([(n.usage.cpu_m if n.usage is not None else 0) / max(n.allocatable.cpu_m, 1) for n in snap.nodes])
    overload = float(np.mean(np.clip((used - w.overload_from) / (1 - w.overload_from), 0, 1))) if len(used) else 0.0
    r -= intent_value(inst.intent, "locality_weight") * w.locality * cross
    r -= intent_value(inst.intent, "balance_weight") * w.balance * overload
    return float(r)


def rollout(
    inst: Instance,
    cfg: PlacementTrainConfig,
    policy_state: dict[str, Any],
    rows: ServiceRowCache,
    mode: str,
    rng: np.random.Generator | None = None,
    minutes: int | None = None,
    temperature: float | None = None,
) -> tuple[np.ndarray, list[Decision], dict[str, float]]:
    """Run one episode of ``inst`` with the policy in ``mode`` (see :class:`SamplingScheduler`). Returns the
    per-minute rewards (M,), the sampled decisions (``mode="sample"``) and the run's metrics."""
    M = minutes or cfg.episode_minutes
    sched = SamplingScheduler(
        default_score_plugins(terms_lookup(inst.app)),
        policy_state,
        rows,
        mode=mode,
        intent=inst.intent,
        hidden_usage=inst.hidden_usage,
        temperature=temperature or cfg.temperature,
        rng=rng,
    )
    sim = Simulation(
        inst.app,
        inst.rps[:M],
        inst.cluster,
        sched,
        SimConfig(minutes=M, seed=inst.sim_seed, n_samples=cfg.n_samples),
        hooks=(churn_hook(inst),),
    )
    sched.minute = lambda: sim.minute
    start_with_metrics(sim)
    r = np.zeros(M)
    for t in range(M):
        st = sim.advance()
        r[t] = minute_reward(sim, st, inst, cfg.reward)
    return r, sched.decisions, dict(sim.result().metrics)


def loo_advantages(returns: Sequence[np.ndarray], decisions: Sequence[Sequence[Decision]]) -> list[np.ndarray]:
    """Per rollout k, per decision: ``G_k(t) − mean_{j≠k} G_j(t)`` with ``G(t)`` the reward-to-go from the
    decision's minute ``t`` (``returns``: K per-minute reward arrays of one instance)."""
    togo = np.array([np.cumsum(r[::-1])[::-1] for r in returns])  # (K, M)
    K = len(returns)
    out = []
    for k in range(K):
        others = (togo.sum(0) - togo[k]) / max(K - 1, 1)
        out.append(np.array([togo[k, d.minute] - others[d.minute] for d in decisions[k]], dtype=np.float64))
    return out


# ---- update -----------------------------------------------------------------------------------------------


class DecisionBatch(NamedTuple):
    """One PPO batch of B sampled placements, padded to the largest candidate set C (torch tensors):

    - ``x``: (B, C, F) float32 candidate feature rows (zeros where padded);
    - ``d``: (B, C) float32 kube-scheduler's in-tree totals of the candidates;
    - ``mask``: (B, C) bool, True for a real candidate;
    - ``actions``: (B,) int64, the chosen candidate's index;
    - ``old_log_probs``: (B,) float32, its log-probability under the policy that sampled it;
    - ``advantages``: (B,) float32, the leave-one-out advantages normalised over the batch (zero mean, unit
      std) and clipped to ± ``adv_clip``.
    """

    x: torch.Tensor
    d: torch.Tensor
    mask: torch.Tensor
    actions: torch.Tensor
    old_log_probs: torch.Tensor
    advantages: torch.Tensor


def decision_batch(decs: Sequence[Decision], adv: np.ndarray, features: int, adv_clip: float) -> DecisionBatch:
    """The :class:`DecisionBatch` of ``decs`` (at least one) with raw advantages ``adv`` (B,) and ``features``
    columns per candidate row."""
    B = len(decs)
    C = max(len(d.d) for d in decs)
    X = np.zeros((B, C, features), np.float32)
    D = np.zeros((B, C), np.float32)
    mask = np.zeros((B, C), bool)
    for i, d in enumerate(decs):
        c = len(d.d)
        X[i, :c] = d.x
        D[i, :c] = d.d
        mask[i, :c] = True
    a = np.array([d.choice for d in decs], np.int64)
    lp = np.array([d.logp for d in decs], np.float32)
    a_n = np.clip((adv - adv.mean()) / (adv.std() + 1e-8), -adv_clip, adv_clip)
    return DecisionBatch(
        torch.from_numpy(X),
        torch.from_numpy(D),
        torch.from_numpy(mask),
        torch.from_numpy(a),
        torch.from_numpy(lp),
        torch.from_numpy(a_n.astype(np.float32)),
    )


def _cpu_overload_t(X: torch.Tensor) -> torch.Tensor:
    """``clip((cpu_used_frac − 0.7) / 0.3, 0, 1)`` in torch, over the last axis of ``X`` (..., F)."""
    col = {n: i for i, (n, _u) in enumerate(CONTEXT_FEATURES)}
    return ((X[..., col["cpu_used_frac"]] - OVERLOAD_FROM) / (1.0 - OVERLOAD_FROM)).clamp(0.0, 1.0)


def saturation_factor_t(X: torch.Tensor) -> torch.Tensor:
    """:func:`policy.lowlevel.saturation_factor` in torch, over the last axis of ``X`` (..., F)."""
    return 1.0 - _cpu_overload_t(X)


def intent_adjustment_t(X: torch.Tensor) -> torch.Tensor:
    """:func:`policy.lowlevel.intent_adjustment` in torch, over the last axis of ``X`` (..., F)."""
    col = {n: i for i, (n, _u) in enumerate(CONTEXT_FEATURES)}
    loc = 0.5 * (X[..., col["caller_node_share"]] + X[..., col["callee_node_share"]])
    over = _cpu_overload_t(X)
    balance = (X[..., col["intent_balance_weight"]] - 1.0).clamp_min(0.0)
    return (X[..., col["intent_locality_weight"]] - 1.0) * loc - balance * over


def policy_log_probs(
    net: PlacementNet,
    X: torch.Tensor,
    D: torch.Tensor,
    mask: torch.Tensor,
    T: float,
    weight: int = EXTENDER_WEIGHT,
    intent_gain: float = 0.0,
    saturation_guard: bool = False,
) -> torch.Tensor:
    """(B, C) log π(c) = log_softmax((D + weight·10·round(s)) / T) over the valid candidates, with
    ``s = clip(10·sigmoid(z) + intent_gain · intent_adjustment(X), 0, 10)``, times
    :func:`policy.lowlevel.saturation_factor` ``(X)`` when ``saturation_guard``, as served; the rounding is
    straight-through (identity gradient)."""
    s = 10.0 * torch.sigmoid(net(X))
    if intent_gain:
        s = (s + intent_gain * intent_adjustment_t(X)).clamp(0.0, 10.0)
    if saturation_guard:
        s = s * saturation_factor_t(X)
    q = s + (torch.floor(s + 0.5) - s).detach()
    logits = (D + weight * 10.0 * q) / T
    logits = logits.masked_fill(~mask, -1e9)
    return torch.log_softmax(logits, dim=-1)


def ppo_update(
    net: PlacementNet,
    opt: torch.optim.Optimizer,
    b: DecisionBatch,
    cfg: PlacementTrainConfig,
    temperature: float | None = None,
) -> dict[str, float]:
    """PPO-clip (Schulman et al. 2017) for ``cfg.update_epochs`` full-batch epochs over ``b``, sampled at
    ``temperature`` (default ``cfg.temperature``): clipped surrogate minus ``entropy_coef`` × the entropy over the
    valid candidates, gradients clipped to ``max_grad_norm``. Returns the last epoch's ``loss``, ``entropy``,
    ``approx_kl`` and ``clip_frac``."""
    A = b.advantages
    stats = {}
    for _ in range(cfg.update_epochs):
        logp = policy_log_probs(
            net,
            b.x,
            b.d,
            b.mask,
            temperature or cfg.temperature,
            intent_gain=cfg.intent_gain,
            saturation_guard=cfg.saturation_guard,
        )
        lp = logp.gather(1, b.actions[:, None]).squeeze(1)
        ratio = torch.exp(lp - b.old_log_probs)
        pg = -torch.min(ratio * A, torch.clamp(ratio, 1 - cfg.clip, 1 + cfg.clip) * A).mean()
        p = torch.exp(logp) * b.mask
        ent = -(p * torch.where(b.mask, logp, torch.zeros_like(logp))).sum(1).mean()
        loss = pg - cfg.entropy_coef * ent
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(net.parameters(), cfg.max_grad_norm)
        opt.step()
        with torch.no_grad():
            stats = {
                "loss": float(loss),
                "entropy": float(ent),
                "approx_kl": float((b.old_log_probs - lp).mean()),
                "clip_frac": float(((ratio - 1).abs() > cfg.clip).float().mean()),
            }
    return stats


# ---- export -----------------------------------------------------------------------------------------------


def export_placement(
    net: PlacementNet,
    path: str | Path | None,
    *,
    service_input: str,
    service_dim: int,
    rows_version: str,
    temperature: float,
    policy_version: str,
    metadata: dict[str, Any] | None = None,
    intent_gain: float = 0.0,
    saturation_guard: bool = False,
) -> PolicyBundle:
    """The bundle of ``net`` (``level: low``, ``placement-mlp-v1``), written to directory ``path`` unless
    ``None``. Raises ``ValueError`` when a weight's shape differs from :func:`policy.lowlevel.mlp_weight_shapes`."""
    cfg = net.config
    spec = placement_feature_spec(service_input, service_dim)
    if cfg["features"] != len(spec):
        raise ValueError(f"export: net has {cfg['features']} inputs, the feature spec {len(spec)}")
    shapes = mlp_weight_shapes(len(spec), cfg["hidden"], cfg["layers"])
    sd = net.numpy_weights()
    if set(sd) != set(shapes) or any(sd[k].shape != s for k, s in shapes.items()):
        raise ValueError(
            f"export: state_dict {sorted((k, v.shape) for k, v in sd.items())} does not match "
            f"{PLACEMENT_ARCH} {sorted(shapes.items())}"
        )
    bundle = PolicyBundle(
        level="low",
        policy_version=policy_version,
        feature_spec={"candidate": spec},
        dims={"hidden": cfg["hidden"], "layers": cfg["layers"], "features": len(spec), "service_dim": service_dim},
        architecture={
            "type": PLACEMENT_ARCH,
            "service_input": service_input,
            "encoder_version": rows_version,
            "activation": "tanh",
            "score": "10*sigmoid(z)",
            "extender_weight": EXTENDER_WEIGHT,
            "temperature": temperature,
            "intent_gain": intent_gain,
            "saturation_guard": saturation_guard,
        },
        weights=sd,
        normalization={"candidate": {"mean": net.mean.numpy().tolist(), "std": net.std.numpy().tolist()}},
        metadata=dict(metadata or {}),
    )
    if path is not None:
        bundle.save(path)
    return bundle


def _state_of(net: PlacementNet, cfg: PlacementTrainConfig) -> dict[str, Any]:
    """The numpy policy state :class:`SamplingScheduler` scores with: ``net``'s weights and normalisation, and
    ``cfg``'s score terms (``intent_gain``, ``saturation_guard``), as the exported bundle serves them."""
    return {
        "weights": net.numpy_weights(),
        "mean": net.mean.numpy().copy(),
        "std": net.std.numpy().copy(),
        "layers": net.config["layers"],
        "intent_gain": cfg.intent_gain,
        "saturation_guard": cfg.saturation_guard,
    }


def _norm_stats(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    std = x.std(0)
    return x.mean(0), np.where(std > 1e-3, std, 1.0)


# ---- the pieces of train_placement --------------------------------------------------------------------------


def _service_input(
    cfg: PlacementTrainConfig, out: str | Path | None, encoder_path: str | Path | None
) -> tuple[Any, int, str]:
    """``(encoder, service_dim, rows_version)`` of ``cfg.service_input``: the graph encoder (``encoder_path``,
    default ``<out>/../../encoder`` when it exists, else the committed one) and its embedding width and version,
    or for ``flat`` no encoder, the per-service feature count and :data:`FLAT_ROWS_VERSION`."""
    if cfg.service_input != "encoder":
        return None, len(NODE_SPEC), FLAT_ROWS_VERSION

    if encoder_path is None:
        sibling = Path(out).resolve().parent.parent / "encoder" if out else None
        encoder_path = (
            sibling if sibling is not None and (sibling / "manifest.json").exists() else DEFAULT_ENCODER_BUNDLE
        )
    encoder = GraphEncoder.load(encoder_path)
    return encoder, encoder.embedding_dim, encoder.version


def _fit_normalization(
    net: PlacementNet,
    cfg: PlacementTrainConfig,
    rows: ServiceRowCache,
    rng: np.random.Generator,
    rng_pol: np.random.Generator,
) -> None:
    """Set ``net``'s input normalisation from the candidate rows of rollouts of the initial (neutral) policy on
    ``max(4, 2 · instances_per_iter)`` random instances."""
    warm = []
    for _ in range(max(4, cfg.instances_per_iter * 2)):
        inst = sample_instance(cfg, rng)
        _r, decs, _m = rollout(inst, cfg, _state_of(net, cfg), rows, "sample", rng_pol)
        warm += [d.x for d in decs]
    mean, std = _norm_stats(np.concatenate(warm))
    net.set_normalization(mean, std)


def _temperature(cfg: PlacementTrainConfig, it: int) -> float:
    """The sampling temperature of iteration ``it`` (1-based): ``temperature`` annealed geometrically to
    ``temperature_final`` at the last iteration."""
    return cfg.temperature * (cfg.temperature_final / cfg.temperature) ** ((it - 1) / max(cfg.iterations - 1, 1))


class Collected(NamedTuple):
    """One iteration's experience: the sampled ``decisions`` of every rollout, their leave-one-out
    ``advantages`` (B,) float64 (same order), each rollout's ``returns`` (sum of its per-minute rewards) and
    the number of ``episodes`` (rollouts) run."""

    decisions: list[Decision]
    advantages: np.ndarray
    returns: list[float]
    episodes: int


def _collect(
    cfg: PlacementTrainConfig,
    state: dict[str, Any],
    rows: ServiceRowCache,
    rng: np.random.Generator,
    rng_pol: np.random.Generator,
    temperature: float,
) -> Collected:
    """``instances_per_iter`` random instances, each rolled out ``rollouts`` times with common random numbers
    by the sampling policy ``state`` at ``temperature`` (:func:`loo_advantages`)."""
    decs: list[Decision] = []
    advs: list[np.ndarray] = []
    rets = []
    episodes = 0
    for _ in range(cfg.instances_per_iter):
        inst = sample_instance(cfg, rng)
        outs = [
            rollout(inst, cfg, state, rows, "sample", rng_pol, temperature=temperature) for _k in range(cfg.rollouts)
        ]
        episodes += len(outs)
        rets += [o[0].sum() for o in outs]
        for dk, ak in zip([o[1] for o in outs], loo_advantages([o[0] for o in outs], [o[1] for o in outs])):
            decs += dk
            advs.append(ak)
    return Collected(decs, np.concatenate(advs) if advs else np.zeros(0), rets, episodes)


class _Evaluation:
    """The greedy evaluation: ``eval_instances`` fixed instances per train app (the benchmark cluster,
    :func:`sample_instance` with ``randomize=False``, every second one split into a slow and a fast pool; their own
    rng), each rolled out once with default scoring
    (at construction) and, at every :meth:`run`, with the policy as served; ``details`` per run, written to
    ``<run>/evaluations.json``."""

    _METRICS = ("latency_mean_ms", "failed_pct", "cross_node_call_pct")

    def __init__(self, cfg: PlacementTrainConfig, net: PlacementNet, rows: ServiceRowCache, run: Path):
        self.cfg, self.rows, self.run_dir = cfg, rows, run
        eval_rng = np.random.default_rng(cfg.seed + 10_000)
        # every second instance on two node pools of the slowest and fastest speed (when training draws mixed
        # clusters): the kept checkpoint must also place by node speed
        self.instances = [
            sample_instance(cfg, eval_rng, a, randomize=False, mixed=cfg.mixed_prob > 0 and k % 2 == 1)
            for a in cfg.train_apps
            for k in range(cfg.eval_instances)
        ]
        self.default = [rollout(e, cfg, _state_of(net, cfg), rows, "default") for e in self.instances]
        self.details: list[dict[str, Any]] = []

    def run(self, net: PlacementNet, it: int = 0) -> dict[str, float]:
        """Evaluate ``net`` (after iteration ``it``): ``eval_gain``, the mean over instances of the return minus
        default scoring's; ``eval_latency_ratio``, mean latency over default's; ``eval_cross_node_pct``."""
        cfg, rows = self.cfg, self.rows
        res = [rollout(e, cfg, _state_of(net, cfg), rows, "greedy") for e in self.instances]
        self.details.append(
            {
                "iteration": it,
                "instances": [
                    {
                        "app": e.app.name,
                        "nodes": e.cluster.nodes,
                        "gain": float(r.sum() - d[0].sum()),
                        "default": {k: d[2][k] for k in self._METRICS},
                        "learned": {k: m[k] for k in self._METRICS},
                    }
                    for e, (r, _, m), d in zip(self.instances, res, self.default)
                ],
            }
        )
        (self.run_dir / "evaluations.json").write_text(
            json.dumps(_jsonable(self.details), indent=1) + "\n", encoding="utf-8"
        )
        gain = np.mean([r.sum() - d[0].sum() for (r, _, _), d in zip(res, self.default)])
        lat = np.mean(
            [m["latency_mean_ms"] / max(d[2]["latency_mean_ms"], 1e-9) for (_, _, m), d in zip(res, self.default)]
        )
        return {
            "eval_gain": float(gain),
            "eval_latency_ratio": float(lat),
            "eval_cross_node_pct": float(np.mean([m["cross_node_call_pct"] for _, _, m in res])),
        }


@dataclass
class _Best:
    """The best evaluation so far: its ``gain``, ``iteration`` and a copy of the net's ``state``."""

    gain: float
    iteration: int
    state: dict[str, torch.Tensor]

    @classmethod
    def of(cls, net: PlacementNet, gain: float, iteration: int) -> _Best:
        return cls(gain, iteration, {k: v.clone() for k, v in net.state_dict().items()})

    def offer(self, net: PlacementNet, gain: float, iteration: int) -> None:
        """Keep ``net``'s weights when ``gain`` beats the best."""
        if gain > self.gain:
            self.gain, self.iteration, self.state = gain, iteration, {k: v.clone() for k, v in net.state_dict().items()}


#: The columns of ``log.csv``.
LOG_FIELDS = [
    "iteration",
    "wall_s",
    "episodes",
    "decisions",
    "train_return",
    "adv_abs",
    "loss",
    "entropy",
    "approx_kl",
    "clip_frac",
    "eval_gain",
    "eval_latency_ratio",
    "eval_cross_node_pct",
]


class _Log:
    """``log.csv`` (one row per iteration, flushed as it goes) and the progress display: with ``progress`` a
    :func:`policy.telemetry.progress_bar` (a bar on a terminal, records in a log), else a ``log`` line per
    evaluation."""

    def __init__(
        self,
        path: Path,
        progress: bool,
        total: int,
        variant: str,
        log: Callable[[str], None],
        board: TrainingBoard | None = None,
    ):
        self.path, self.variant, self.log, self.board = path, variant, log, board
        self.fh = path.open("w", newline="", encoding="utf-8")
        self.writer = csv.DictWriter(self.fh, fieldnames=LOG_FIELDS)
        self.writer.writeheader()
        self.bar = progress_bar(f"placement ({variant})", total, "it", enabled=progress)

    def row(self, row: dict[str, Any]) -> None:
        self.writer.writerow(row)
        self.fh.flush()
        if self.board is not None:
            self.board.row(int(row["iteration"]), row, "placement")

    def evaluation(self, it: int, running: float, ev: dict[str, float], elapsed_s: float) -> None:
        if not self.bar.shown:
            self.log(
                f"placement[{self.variant}]: it {it}, return {running:.3f}, eval gain {ev['eval_gain']:+.3f}, "
                f"latency x{ev['eval_latency_ratio']:.3f}, {elapsed_s:.0f} s"
            )

    def step(self, running: float, best_gain: float) -> None:
        self.bar.update(1)
        self.bar.set_postfix(ret=f"{running:.2f}", gain=f"{best_gain:+.2f}")

    def close(self) -> None:
        self.bar.close()
        self.fh.close()
        if self.board is not None:
            self.board.close()


def _export(
    net: PlacementNet,
    cfg: PlacementTrainConfig,
    variant: str,
    run: Path,
    encoder: Any,
    dim: int,
    rows_version: str,
    best: _Best,
    iterations: int,
    episodes: int,
    train_s: float,
    final_eval: bool,
    log: Callable[[str], None],
    fine_tuned_from: dict[str, Any] | None = None,
) -> tuple[PolicyBundle, dict[str, Any]]:
    """The bundle of ``net`` (already the best weights) with its version and metadata, and the report; with
    ``final_eval`` the comparison on every app (``comparison.md``, in the report and the bundle's metadata);
    ``fine_tuned_from``: the source of a fine-tune (metadata, and ``-ft`` in the version). Writes
    ``checkpoint.pt``; the caller writes the bundle."""
    # date, seed, -ft, -quick and the weights' digest (policy.bundle.content_version): never the version of another
    # training's bundle

    version = content_version(
        f"placement-{variant}-{time.strftime('%Y%m%d')}-s{cfg.seed}" + ("-ft" if fine_tuned_from else ""),
        net.numpy_weights(),
        quick=cfg.quick,
    )
    meta: dict[str, Any] = {
        "algorithm": "PPO-clip with a common-random-numbers leave-one-out baseline (no critic), trained through "
        "kube-scheduler's default scores + extender score x weight 2 x 10 (policy.train.placement)",
        "train_apps": list(cfg.train_apps),
        "heldout_apps": list(cfg.heldout_apps),
        "config": _jsonable(asdict(cfg)),
        "train_s": round(train_s, 1),
        "iterations": iterations,
        "episodes": episodes,
        "best_iteration": best.iteration,
        "best_eval_gain": round(best.gain, 4),
        "torch_version": torch.__version__,
    }
    if fine_tuned_from:
        meta["fine_tuned_from"] = dict(fine_tuned_from)
    report: dict[str, Any] = {
        "train_s": train_s,
        "iterations": iterations,
        "episodes": episodes,
        "best_iteration": best.iteration,
        "best_eval_gain": best.gain,
        "policy_version": version,
        "config": meta["config"],
    }
    export_kw: dict[str, Any] = {
        "service_input": cfg.service_input,
        "service_dim": dim,
        "rows_version": rows_version,
        "temperature": cfg.temperature,
        "policy_version": version,
        "metadata": meta,
        "intent_gain": cfg.intent_gain,
        "saturation_guard": cfg.saturation_guard,
    }
    bundle = export_placement(net, None, **export_kw)
    if final_eval:
        pol = LearnedPlacement(bundle, encoder=encoder)
        table = compare(
            list(cfg.train_apps) + list(cfg.heldout_apps),
            cfg.final_seeds,
            cfg.final_minutes,
            learned={f"learned-{variant}": pol},
            log=log,
        )
        report["comparison"] = table
        meta["comparison"] = table
        (run / "comparison.md").write_text(markdown_table(table) + "\n", encoding="utf-8")
        bundle = export_placement(net, None, **export_kw)  # again, with the comparison in its metadata
    save_checkpoint(net, run / "checkpoint.pt", **export_kw)
    return bundle, report


# ---- the loop ---------------------------------------------------------------------------------------------


def train_placement(
    cfg: PlacementTrainConfig = PlacementTrainConfig(),
    out: str | Path | None = None,
    run_dir: str | Path | None = None,
    log: Callable[[str], None] = print,
    progress: bool = True,
    final_eval: bool = True,
    encoder_path: str | Path | None = None,
    opts: RunOptions | None = None,
) -> tuple[PlacementNet, dict[str, Any]]:
    """Train (module docstring), export the best policy to the bundle directory ``out`` (``None``: none), write the log,
    curves and report to ``run_dir`` (and ``log.csv``'s rows as TensorBoard scalars ``placement/<column>`` under
    ``opts.tensorboard``, :mod:`policy.train.tensorboard`) and, with ``final_eval``, compare default /
    topology-heuristic / learned on every train and held-out app (:func:`policy.sim.placement.compare`).
    ``encoder_path``: the encoder bundle whose embeddings the policy reads (default: ``<out>/../../encoder`` when it
    exists, as ``make train`` lays bundles out, else the committed one). ``opts.init``
    (:class:`~policy.train.finetune.RunOptions`): a bundle to start from (a fine-tune, :mod:`policy.train.finetune`):
    its weights and its input normalization, which then stays fixed (served == trained), instead of a neutral start with
    the normalization fitted on the first rollouts; ``opts.fine_tuned_from`` goes into the bundle's metadata and the
    version gets ``-ft``. Raises ValueError when ``init``'s arrays do not have the shapes of ``cfg``'s network. Returns
    ``(net, report)``."""
    # ---- build everything: seeds, the service rows, the net and its normalisation, the evaluation, the log ----
    torch.set_num_threads(max(1, cfg.threads))
    torch.manual_seed(cfg.seed)
    t_start = time.perf_counter()
    variant = ("encoder" if cfg.service_input == "encoder" else "flat") + ("-nointent" if cfg.intent_prob <= 0 else "")
    run = Path(run_dir) if run_dir else ROOT / "runs" / f"placement-{variant}"
    run.mkdir(parents=True, exist_ok=True)
    encoder, dim, rows_version = _service_input(cfg, out, encoder_path)
    rows = ServiceRowCache(cfg.service_input, encoder, refresh_s=300.0, max_entries=16)
    net = PlacementNet(len(placement_feature_spec(cfg.service_input, dim)), cfg.hidden, cfg.layers)
    rng = np.random.default_rng(cfg.seed)  # instances
    rng_pol = np.random.default_rng(cfg.seed + 1)  # the policy's sampling
    opts = opts or RunOptions()
    init, fine_tuned_from = opts.init, opts.fine_tuned_from
    if init is not None:  # a fine-tune: the trained weights and their (fixed) input normalization
        net.load_bundle(init)
    else:
        _fit_normalization(net, cfg, rows, rng, rng_pol)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    evaluation = _Evaluation(cfg, net, rows, run)
    ev = evaluation.run(net)
    best = _Best.of(net, ev["eval_gain"], 0)
    log(f"placement[{variant}]: start, eval gain over default {ev['eval_gain']:+.3f}")
    logger = _Log(run / "log.csv", progress, cfg.iterations, variant, log, open_board(opts.tensorboard, asdict(cfg)))
    logger.row({"iteration": 0, "wall_s": round(time.perf_counter() - t_start, 2), "episodes": 0, **ev})
    episodes = 0
    running = math.nan
    t_train = time.perf_counter()
    it = 0

    for it in range(1, cfg.iterations + 1):
        # ---- collect: K rollouts of each random instance, sampling at the annealed temperature ----
        state = _state_of(net, cfg)
        T = _temperature(cfg, it)
        batch = _collect(cfg, state, rows, rng, rng_pol, T)
        episodes += batch.episodes

        # ---- update: PPO-clip on the decisions with their leave-one-out advantages ----
        stats: dict[str, float] = {}
        if len(batch.decisions) >= 2:
            stats = ppo_update(
                net,
                opt,
                decision_batch(batch.decisions, batch.advantages, net.config["features"], cfg.adv_clip),
                cfg,
                T,
            )

        # ---- log: the iteration's row (written after the evaluation's columns) ----
        mret = float(np.mean(batch.returns))
        running = mret if math.isnan(running) else 0.9 * running + 0.1 * mret
        adv = batch.advantages
        row: dict[str, Any] = {
            "iteration": it,
            "wall_s": round(time.perf_counter() - t_start, 2),
            "episodes": episodes,
            "decisions": len(batch.decisions),
            "train_return": round(mret, 4),
            "adv_abs": round(float(np.abs(adv).mean()) if len(adv) else 0.0, 5),
            **{k: round(v, 5) for k, v in stats.items()},
        }

        # ---- evaluate: greedy, every eval_every iterations and at the last; keep the best weights ----
        if it % cfg.eval_every == 0 or it == cfg.iterations:
            ev = evaluation.run(net, it)
            if cfg.save_eval_checkpoints:
                torch.save(net.state_dict(), str(run / f"eval-{it:04d}.pt"))
            row.update({k: round(v, 4) for k, v in ev.items()})
            best.offer(net, ev["eval_gain"], it)
            logger.evaluation(it, running, ev, time.perf_counter() - t_start)
        logger.row(row)
        logger.step(running, best.gain)
        if cfg.time_budget_s is not None and time.perf_counter() - t_train > cfg.time_budget_s:
            log(f"placement[{variant}]: time budget of {cfg.time_budget_s:g} s reached at iteration {it}")
            break

    logger.close()
    # ---- export: the best evaluated weights; the bundle directory last ----
    train_s = time.perf_counter() - t_start
    net.load_state_dict(best.state)
    net.eval()
    log(
        f"placement[{variant}]: {it} iterations, {episodes} episodes in {train_s:.0f} s; best eval gain "
        f"{best.gain:+.3f} at iteration {best.iteration}"
    )
    bundle, report = _export(
        net,
        cfg,
        variant,
        run,
        encoder,
        dim,
        rows_version,
        best,
        it,
        episodes,
        train_s,
        final_eval,
        log,
        fine_tuned_from,
    )
    report["evaluations"] = evaluation.details
    (run / "report.json").write_text(json.dumps(_jsonable(report), indent=1) + "\n", encoding="utf-8")
    plot_curves(logger.path, run / "learning_curves.png", title=f"placement ({variant})")
    if out:  # last: a run that fails on the way leaves the bundle as it was
        bundle.save(out)
        log(
            f"placement[{variant}]: {report['policy_version']}: bundle written to {out}"
            + (" (quick run)" if cfg.quick else "")
        )
    return net, report


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (np.floating, np.integer)):
        return v.item()
    if isinstance(v, str):
        return str(v)  # plain str: torch.__version__ is a TorchVersion, which weights_only loading refuses
    return v


def plot_curves(csv_path: Path, png_path: Path, title: str = "placement") -> None:
    """Learning curves from ``log.csv``: training return per iteration (and its moving average) and the
    periodic greedy evaluation's gain over default scoring."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with csv_path.open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    it = np.array([int(r["iteration"]) for r in rows if r["train_return"]])
    ret = np.array([float(r["train_return"]) for r in rows if r["train_return"]])
    ev = [(int(r["iteration"]), float(r["eval_gain"]), float(r["eval_latency_ratio"])) for r in rows if r["eval_gain"]]
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
    if len(ret):
        ax[0].plot(it, ret, lw=0.6, alpha=0.5, label="episode return")
        k = min(20, len(ret))
        ax[0].plot(it[k - 1 :], np.convolve(ret, np.ones(k) / k, mode="valid"), lw=1.6, label=f"moving mean ({k})")
    ax[0].set_yscale("symlog", linthresh=10)
    ax[0].set_xlabel("iteration")
    ax[0].set_ylabel("return, random instances (symlog)")
    ax[0].legend(fontsize=8)
    if ev:
        e = np.array(ev)
        ax[1].plot(e[:, 0], e[:, 1], marker="o", label="return gain over default scoring")
        ax[1].axhline(0, color="grey", lw=0.8)
        ax2 = ax[1].twinx()
        ax2.plot(e[:, 0], e[:, 2], color="C1", marker="x", label="latency mean / default")
        ax2.set_ylabel("latency mean / default", color="C1")
    ax[1].set_yscale("symlog", linthresh=10)
    ax[1].set_xlabel("iteration")
    ax[1].set_ylabel("greedy eval gain over default (symlog)")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)
    plt.close(fig)


def save_checkpoint(net: PlacementNet, path: str | Path, **export_kwargs: Any) -> None:
    """A torch checkpoint of ``net`` with what :func:`export_placement` needs (for ``hrl-policy export
    placement``)."""
    torch.save(
        {
            "state_dict": net.state_dict(),
            "config": dict(net.config),
            "mean": net.mean.clone(),
            "std": net.std.clone(),
            "export": _jsonable(export_kwargs),
        },
        str(path),
    )


def export_checkpoint(path: str | Path, out: str | Path) -> PolicyBundle:
    """Rebuild the net from a :func:`save_checkpoint` file and write its bundle to ``out``. Raises
    ``ValueError`` for a file that is not such a checkpoint."""
    try:
        ck = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - OSError, UnpicklingError, RuntimeError: one line
        raise ValueError(f"{path}: not a readable placement checkpoint ({type(exc).__name__})") from None
    if not isinstance(ck, dict) or not {"state_dict", "config", "mean", "std", "export"} <= set(ck):
        raise ValueError(f"{path}: not a placement checkpoint (expected state_dict, config, mean, std, export)")
    c = ck["config"]
    net = PlacementNet(c["features"], c["hidden"], c["layers"])
    net.load_state_dict(ck["state_dict"])
    net.set_normalization(ck["mean"].numpy(), ck["std"].numpy())
    return export_placement(net, out, **ck["export"])


#: The low-level bundles ``make train`` writes (under the bundles root) and how each is trained:
#: ``hrl-scheduler`` on encoder embeddings, ``hrl-no-encoder`` on flat per-service features, ``hrl-flat`` (no
#: hierarchy) without ever seeing an intent other than the defaults (and without the direct intent term).
VARIANTS: dict[str, dict[str, Any]] = {
    "hrl-scheduler/low": {"service_input": "encoder"},
    "hrl-no-encoder/low": {"service_input": "flat"},
    "hrl-flat/low": {"service_input": "encoder", "intent_prob": 0.0, "intent_gain": 0.0},
}


#: The budget of a fine-tune (``train --all --fine-tune``; :mod:`policy.train.finetune`): a quarter of the updates.
FINE_TUNE: dict[str, Any] = {"iterations": 40, "eval_every": 10}

#: Fields of :class:`PlacementTrainConfig` that shape the network: a fine-tune keeps the defaults (the source's).
_ARCHITECTURE = ("hidden", "layers")


def fine_tune_sources(fine_tune: FineTune, root: str | Path) -> dict[str, PolicyBundle]:
    """The source bundle of every :data:`VARIANTS` directory, checked against what the stage builds under ``root``
    (the encoder it reads: ``<root>/encoder`` when present, else the committed one): feature specification, hidden
    width and layers, service input, encoder version, the score's intent gain and saturation guard. Raises
    ValueError naming the bundle and the field (:meth:`FineTune.load`)."""
    out = {}
    for rel, kw in VARIANTS.items():
        cfg = PlacementTrainConfig(**kw)
        _enc, dim, rows_version = _service_input(cfg, Path(root) / rel, None)
        out[rel] = fine_tune.load(
            rel,
            stage="placement",
            level="low",
            feature_spec={"candidate": placement_feature_spec(cfg.service_input, dim)},
            architecture_type=PLACEMENT_ARCH,
            expect={
                "dims.hidden": cfg.hidden,
                "dims.layers": cfg.layers,
                "architecture.service_input": cfg.service_input,
                "architecture.encoder_version": rows_version,
                "architecture.intent_gain": cfg.intent_gain,
                "architecture.saturation_guard": cfg.saturation_guard,
            },
        )
    return out


def check_fine_tune(fine_tune: FineTune, root: str | Path) -> None:
    """Refuse (ValueError, one line) a source the ``placement`` stage could not start from
    (:func:`fine_tune_sources`)."""
    fine_tune_sources(fine_tune, root)


def train_stage(
    root: str | Path,
    *,
    quick: bool = False,
    seed: int = 0,
    log: Callable[[str], None] = print,
    target: TrainingTarget | None = None,
    tensorboard: str | Path | None = None,
    fine_tune: FineTune | None = None,
) -> list[str]:
    """The ``placement`` stage of ``make train`` (:mod:`policy.train.pipeline`): train every :data:`VARIANTS` bundle
    into ``root`` (run directories ``runs/placement-<stack>``; the encoder is ``<root>/encoder`` when present)
    and return the directories written. ``quick``: seconds-long runs (smoke tests); ``target``: train on these
    apps instead (:meth:`TrainingTarget.placement`); ``tensorboard``: event files under
    ``<tensorboard>/placement-<stack>``; ``fine_tune``: start each variant from its bundle under that root
    (:func:`fine_tune_sources`, checked before any training) with the :data:`FINE_TUNE` budget (with ``quick``:
    the quick budget at the source's width)."""
    sources = fine_tune_sources(fine_tune, root) if fine_tune is not None else {}
    written = []
    for rel, kw in VARIANTS.items():
        over = dict(kw, seed=seed)
        if quick:
            quick_over = {k: v for k, v in QUICK.items() if fine_tune is None or k not in _ARCHITECTURE}
            over.update(quick_over, train_apps=("online-boutique",), heldout_apps=())
        elif fine_tune is not None:
            over.update(FINE_TUNE)
        if target is not None:
            over.update(target.placement())
        cfg = PlacementTrainConfig(**over)
        out = Path(root) / rel
        stack = rel.split("/")[0]
        t0 = time.perf_counter()
        train_placement(
            cfg,
            out=out,
            run_dir=ROOT / "runs" / (f"placement-{stack}" + ("-quick" if quick else "")),
            log=log,
            progress=False,
            final_eval=False,
            opts=RunOptions(
                tensorboard=None if tensorboard is None else Path(tensorboard) / f"placement-{stack}",
                init=sources.get(rel),
                fine_tuned_from=fine_tune.provenance(rel, sources[rel]) if fine_tune is not None else None,
            ),
        )
        log(f"placement: {rel} " + ("fine-tuned" if fine_tune else "trained") + f" in {time.perf_counter() - t0:.0f} s")
        written.append(str(out))
    return written


QUICK = {
    "iterations": 3,
    "instances_per_iter": 1,
    "rollouts": 2,
    "episode_minutes": 4,
    "n_samples": 200,
    "eval_every": 2,
    "eval_instances": 1,
    "hidden": 16,
    "final_seeds": (0,),
    "final_minutes": 4,
    "quick": True,
}


def run_cli(args: Any) -> int:
    """The body of ``hrl-policy train placement`` (``args``: out, run_dir, quick, seed, iterations, variant,
    flat, time_budget, no_eval): one :data:`VARIANTS` bundle, by default into ``policy/bundles/<variant>/low``
    (``--quick``: into ``runs/placement-<variant>-quick/bundle``)."""
    variant = "hrl-no-encoder" if args.flat else (getattr(args, "variant", None) or "hrl-scheduler")
    key = f"{variant}/low"
    if key not in VARIANTS:
        raise ValueError(f"--variant: expected one of {', '.join(k.split('/')[0] for k in VARIANTS)}, got {variant!r}")
    # refuse what would train nothing (an untrained bundle exiting 0) before anything runs
    if args.iterations is not None and args.iterations < 1:
        raise ValueError(f"--iterations: expected an integer >= 1, got {args.iterations}")
    if args.time_budget is not None and not (math.isfinite(args.time_budget) and args.time_budget > 0):
        raise ValueError(f"--time-budget: expected a number of seconds > 0, got {args.time_budget:g}")
    if args.seed < 0:
        raise ValueError(f"--seed: expected an integer >= 0, got {args.seed}")
    kw: dict[str, Any] = {"seed": args.seed, **VARIANTS[key]}
    target = TrainingTarget.from_flags(getattr(args, "app", None), None)
    if args.quick:
        kw.update(QUICK)
        kw["heldout_apps"] = ()
        kw["train_apps"] = ("online-boutique",)
    if target is not None:
        kw.update(target.placement())
    if args.iterations is not None:
        kw["iterations"] = args.iterations
    if args.time_budget is not None:
        kw["time_budget_s"] = args.time_budget
    cfg = PlacementTrainConfig(**kw)
    run_dir = args.run_dir or str(ROOT / "runs" / (f"placement-{variant}" + ("-quick" if args.quick else "")))
    # a --quick run, or one on your own app, never overwrites a committed bundle unless --out says so
    committed = ROOT / "policy" / "bundles" if target is None else ROOT / "out" / "train" / target.name / "bundles"
    out = args.out or (str(Path(run_dir) / "bundle") if args.quick else str(committed / key))
    _net, report = train_placement(
        cfg,
        out=out,
        run_dir=run_dir,
        log=note,
        progress=True,  # a bar on a terminal, else records (JSON with --log-format json), where progress is on
        final_eval=not args.no_eval,
        opts=RunOptions(tensorboard=getattr(args, "tensorboard", None)),
    )
    if "comparison" in report:
        note(markdown_table(report["comparison"]))
    return 0
