"""[torch] The learned high level (``hrl-policy train hierarchy``): PPO over the intent, in the simulator, with
the whole stack served as in a cluster underneath it, rollouts as Ray tasks.

**Setting (trained as served).** Every episode builds the ``hrl-scheduler`` stack through its entry point
(:mod:`policy.sim.stacks`: the real descheduler loop with its guards, the learned placement as kube-scheduler's
extender, the :class:`~policy.highlevel.IntentAutoscaler` under the intent) and hands it, through
``StackContext.parts``, the intent policy being trained: :class:`SampledIntent`, which is
:class:`~policy.highlevel.LearnedIntent` (the same featurizer, the same numpy network, the same squashing)
plus Gaussian exploration on the network's pre-activations. The high level acts every 5 simulated minutes
(the descheduler's move period); between periods its last intent holds.

**Objective.** One reward (:mod:`policy.sim.objective`): per minute, −(latency relative to the SLO + a penalty per
SLO-violating minute + failed requests + a price per CPU allocated relative to the manifests); the high level's
reward for a period is the sum of its minutes. The SLO penalty's weight is adapted as a Lagrange multiplier toward
the objective's target violation rate (dual ascent once per iteration); the CPU price is drawn per episode from
``cpu_price_range`` and given to the policy as an input, so one network serves any price the operator sets.

**Algorithm.** PPO (Schulman et al. 2017, "Proximal Policy Optimization Algorithms"; clipped surrogate, GAE
Schulman et al. 2016) with a diagonal Gaussian policy over the pre-activations (per service 2, global 3; one
learned log-std per output kind) and a permutation-invariant critic (mean and max pooling of a per-service trunk
with the global row). Why PPO: the action is a set of per-service continuous outputs of variable size, the reward
arrives per period over whole episodes, and an on-policy method with a clipped trust region is stable with the
few thousand decisions 2 cores can simulate in the training budget; off-policy TD3 would need a critic over sets
of actions of varying size. Written CleanRL-style (``ppo_continuous_action.py``): build everything, then one loop
(collect on Ray, update, log, evaluate).

**Generalization.** Episodes draw the application (the training apps and synthetic call graphs with Alibaba-like
statistics, :func:`policy.train.encoder_data.synthetic_app`), the trace (training segments only:
:func:`policy.train.forecast_data.training_series`), the peak load and the background tenants' share of every
node. ``dsb-social-network`` and ``dsb-media-microservices`` never appear in training.

Outputs under ``run_dir``: ``progress.csv`` (one row per iteration), ``validation.csv``, ``learning_curves.png``,
``checkpoint.pt``, ``report.json``; the bundle (``intent/`` + ``predictor/``) goes to ``out``.
"""

from __future__ import annotations

import csv
import json
import math
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from policy.bundle import DEFAULT_BUNDLES, PolicyBundle, content_version
from policy.encoder import GraphEncoder
from policy.highlevel import (
    INTENT_ARCH,
    INTENT_GLOBAL_SPEC,
    INTENT_SERVICE_SPEC,
    INTENT_SERVICE_SPEC_FLAT,
    GruForecaster,
    IntentActor,
    IntentAutoscaler,
    IntentFeaturizer,
    IntentObservation,
    LearnedIntent,
    intent_from_outputs,
    intent_weight_shapes,
)
from policy.lowlevel import load_learned_placement
from policy.sim.engine import SimConfig, Simulation, background_tenants
from policy.sim.objective import Objective, minute_outcomes
from policy.sim.sizing import capacity_rps, cluster_for
from policy.sim.stacks import StackContext, autoscaled_workloads, available_stacks
from policy.sim.traces import scale_to_peak

from .drpc import json_ready
from .episodes import HELD_OUT_APPS, TRAINING_FAMILIES, scenario_app_count, training_app, training_run
from .forecast_data import training_series

__all__ = [
    "HierarchyTrainConfig",
    "EpisodeSpec",
    "Decision",
    "EpisodeData",
    "IntentNet",
    "SampledIntent",
    "sample_episode_specs",
    "run_episode",
    "export_intent",
    "train_hierarchy",
    "train_stage",
    "run_cli",
]

ROOT = Path(__file__).resolve().parents[2]
TRAIN_APPS = ("online-boutique", "sock-shop", "dsb-hotel-reservation")
PREDICTOR_BUNDLE = DEFAULT_BUNDLES / "hrl-scheduler" / "high" / "predictor"
PERIOD_MIN = 5
#: Number of per-service and global pre-activations (capacity target, co-location; locality, balance, budget).
N_SERVICE_OUT, N_GLOBAL_OUT = 2, 3


# ---- configuration ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HierarchyTrainConfig:
    """PPO for the high level (module docstring). Ranges are checked in ``__post_init__`` (ValueError naming the
    field).

    - episodes: ``apps`` (training apps) plus a ``synthetic_share`` of synthetic apps of ``synthetic_services``
      services; ``episode_minutes`` each; a ``scenario_share`` of them in one of ``scenarios`` (the benchmark's
      scenario families with training apps and training load segments: :mod:`policy.train.episodes`), the rest
      in the classic setting: peak load ``peak_range`` × the app's capacity at its manifests;
      ``background_range``: background tenants' CPU request share of every node; ``nodes_frac_range``: the share of
      the app's bench cluster it runs on (fewer nodes: more contention); ``cpu_price_range``;
      ``n_samples``: user requests sampled per minute;
    - ``iterations`` × ``episodes_per_iteration`` episodes (Ray tasks, ``workers`` at a time on a local Ray);
    - PPO: ``gamma`` (per period), ``gae_lambda``, ``clip``, ``epochs``, ``minibatch``, ``lr``, ``vf_coef``,
      ``max_grad_norm``, ``init_log_std``, ``hidden``;
    - ``objective`` (its ``violation_weight`` starts the Lagrange multiplier; ``lagrangian_lr`` its step);
    - ``eval_every`` iterations, ``eval_episodes`` fixed validation episodes (no exploration); the bundle is the
      best validation policy;
    - ``flat``: train the ``hrl-no-encoder`` variant (service rows without the graph encoder's embedding);
    - ``seed``; ``quick``: a smoke test (versions say ``-quick``; bundles never overwrite committed ones).
    """

    apps: tuple[str, ...] = TRAIN_APPS
    synthetic_share: float = 0.2
    scenario_share: float = 0.5
    scenarios: tuple[str, ...] = TRAINING_FAMILIES
    synthetic_services: tuple[int, int] = (6, 24)
    episode_minutes: int = 60
    peak_range: tuple[float, float] = (0.7, 1.6)
    background_range: tuple[float, float] = (0.0, 0.45)
    cpu_price_range: tuple[float, float] = (0.25, 1.0)
    nodes_frac_range: tuple[float, float] = (0.4, 1.0)
    n_samples: int = 300
    iterations: int = 45
    episodes_per_iteration: int = 16
    workers: int = 2
    gamma: float = 0.9
    gae_lambda: float = 0.9
    clip: float = 0.2
    epochs: int = 8
    minibatch: int = 32
    lr: float = 3e-4
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    init_log_std: float = -0.7
    hidden: int = 64
    objective: Objective = field(default_factory=Objective)
    lagrangian_lr: float = 0.5
    eval_every: int = 5
    eval_episodes: int = 6
    flat: bool = False
    seed: int = 0
    quick: bool = False

    def __post_init__(self) -> None:
        if not self.apps:
            raise ValueError("apps: at least one training application")
        bad = [a for a in self.apps if a in HELD_OUT_APPS]
        if bad:
            raise ValueError(f"apps: {', '.join(bad)} is held out of training (evaluation only)")
        for f in ("synthetic_share", "scenario_share"):
            if not 0.0 <= getattr(self, f) <= 1.0:
                raise ValueError(f"{f}: expected a number in [0, 1], got {getattr(self, f)!r}")
        for f in ("peak_range", "background_range", "cpu_price_range", "synthetic_services", "nodes_frac_range"):
            lo, hi = getattr(self, f)
            if not (0 <= lo <= hi):
                raise ValueError(f"{f}: expected (low, high) with 0 <= low <= high, got {getattr(self, f)!r}")
        for f in ("iterations", "episodes_per_iteration", "workers", "epochs", "minibatch", "hidden"):
            if getattr(self, f) < 1:
                raise ValueError(f"{f}: expected an integer >= 1, got {getattr(self, f)!r}")
        if self.scenario_share > 0 and not self.scenarios:
            raise ValueError("scenarios: at least one scenario when scenario_share > 0")
        if self.episode_minutes < 2 * PERIOD_MIN:
            raise ValueError(f"episode_minutes: expected at least {2 * PERIOD_MIN}, got {self.episode_minutes!r}")
        for f in ("gamma", "gae_lambda"):
            if not 0.0 <= getattr(self, f) <= 1.0:
                raise ValueError(f"{f}: expected a number in [0, 1], got {getattr(self, f)!r}")


# ---- episodes ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EpisodeSpec:
    """One episode, fully determined: ``app`` (a built-in name, or ``synthetic:<services>:<seed>``), the trace
    ``trace_seed`` (which training segment), ``peak`` (× capacity), ``background`` (request share of every node),
    ``nodes_frac`` (the share of the app's bench cluster's nodes it runs on, at least 2), ``cpu_price``, the
    simulation ``seed``, ``minutes`` and ``n_samples``; ``scenario`` (a scenario family, :mod:`policy.train.episodes`;
    empty: the classic setting above) runs ``apps`` (one per app of the scenario; ``app`` is the first) in that
    scenario's cluster, network, interference and events, on training segments drawn with ``trace_seed``
    (``peak``, ``background`` and ``nodes_frac`` are then the scenario's own)."""

    app: str
    trace_seed: int
    peak: float
    background: float
    nodes_frac: float
    cpu_price: float
    seed: int
    minutes: int
    n_samples: int
    scenario: str = ""
    apps: tuple[str, ...] = ()


def _draw_app(cfg: HierarchyTrainConfig, rng: np.random.Generator) -> str:
    if rng.random() < cfg.synthetic_share:
        lo, hi = cfg.synthetic_services
        return f"synthetic:{int(rng.integers(lo, hi + 1))}:{int(rng.integers(1_000_000))}"
    return str(rng.choice(cfg.apps))


def sample_episode_specs(
    cfg: HierarchyTrainConfig, rng: np.random.Generator, n: int, *, seed0: int
) -> list[EpisodeSpec]:
    """``n`` episode specs drawn from the training distribution of ``cfg`` (module docstring)."""
    out = []
    for k in range(n):
        scenario, apps = "", ()
        if cfg.scenario_share > 0 and rng.random() < cfg.scenario_share:
            scenario = str(rng.choice(cfg.scenarios))
            apps = tuple(_draw_app(cfg, rng) for _ in range(scenario_app_count(scenario)))
        app = apps[0] if apps else _draw_app(cfg, rng)
        out.append(
            EpisodeSpec(
                app=app,
                trace_seed=int(rng.integers(1 << 31)),
                peak=float(rng.uniform(*cfg.peak_range)),
                background=float(rng.uniform(*cfg.background_range)),
                nodes_frac=float(rng.uniform(*cfg.nodes_frac_range)),
                cpu_price=float(rng.uniform(*cfg.cpu_price_range)),
                seed=seed0 + k,
                minutes=cfg.episode_minutes,
                n_samples=cfg.n_samples,
                scenario=scenario,
                apps=apps,
            )
        )
    return out


class Decision(NamedTuple):
    """One high-level decision: ``minute`` it was taken, the observation (``service`` (N, F_s), ``global_``
    (F_g,)), the sampled pre-activations ``z_s`` (N, 2), ``z_g`` (3,), and the period's ``reward`` (sum of its
    minutes' rewards)."""

    minute: int
    service: np.ndarray
    global_: np.ndarray
    z_s: np.ndarray
    z_g: np.ndarray
    reward: float


class EpisodeData(NamedTuple):
    """What one episode returns: its spec, its decisions (in order), the per-minute rewards (T,), and the run's
    metrics (:data:`policy.sim.engine.METRIC_KEYS` plus ``slo_violation_frac`` and ``objective``: mean cost per
    minute), ``intents``: the intent of each decision as JSON, ``wall_s``."""

    spec: EpisodeSpec
    decisions: list[Decision]
    rewards: np.ndarray
    metrics: dict[str, float]
    intents: list[dict[str, Any]]
    wall_s: float


class SampledIntent(LearnedIntent):
    """:class:`~policy.highlevel.LearnedIntent` with Gaussian exploration on the pre-activations (``std``: (5,)
    per output kind: capacity, co-location, locality, balance, budget; ``None``: the means, as served) that
    records every decision (:attr:`decisions`: (minute, observation, z_s, z_g))."""

    def __init__(
        self,
        actor: IntentActor,
        featurizer: IntentFeaturizer,
        workloads,
        std: np.ndarray | None,
        rng: np.random.Generator,
    ):
        super().__init__(actor, featurizer, workloads)
        self.std = None if std is None else np.asarray(std, dtype=np.float64)
        self.rng = rng
        self.decisions: list[tuple[float, IntentObservation, np.ndarray, np.ndarray]] = []

    def intent(self, snapshot, index, state):
        obs = self.observe(snapshot, index, state)
        z_s, z_g = self.actor(obs.service, obs.global_)
        z_s, z_g = z_s.astype(np.float64), z_g.astype(np.float64)
        if self.std is not None:
            z_s = z_s + self.std[:N_SERVICE_OUT] * self.rng.standard_normal(z_s.shape)
            z_g = z_g + self.std[N_SERVICE_OUT:] * self.rng.standard_normal(z_g.shape)
        self.decisions.append((float(snapshot.taken_at_s), obs, z_s, z_g))
        return intent_from_outputs(obs.services, z_s, z_g)


_PLACEMENTS: dict[str, Any] = {}


def _placement(path: str, load: Callable[[str], Any]) -> Any:
    if path not in _PLACEMENTS:
        _PLACEMENTS[path] = load(path)
    return _PLACEMENTS[path]


def _actor_bundle(weights: dict[str, np.ndarray], norm: dict[str, Any], flat: bool, hidden: int) -> PolicyBundle:
    return PolicyBundle(
        level="high",
        policy_version="training",
        feature_spec={
            "service": INTENT_SERVICE_SPEC_FLAT if flat else INTENT_SERVICE_SPEC,
            "global": INTENT_GLOBAL_SPEC,
        },
        dims={"hidden": hidden},
        architecture={"type": INTENT_ARCH},
        weights=weights,
        normalization=norm,
    )


def _classic(spec: EpisodeSpec) -> tuple[Any, np.ndarray, Any, Any]:
    """The classic episode: one app on a share of its bench cluster, background tenants, a training segment
    scaled to ``peak`` × the app's capacity. Returns (app, rps, cluster, config)."""
    app = training_app(spec.app)
    _trace, counts = training_series(np.random.default_rng(spec.trace_seed), spec.minutes)
    rps = scale_to_peak(counts, spec.peak * capacity_rps(app))
    cluster = cluster_for(app)
    cluster = cluster_for(app, max(2, int(round(spec.nodes_frac * cluster.nodes))))
    if spec.background > 0:
        bg = background_tenants(
            cluster.nodes,
            cluster.cpu_m,
            cluster.memory_bytes,
            pods_per_node=2,
            request_frac=spec.background,
            use_frac=0.8 * spec.background,
            seed=spec.seed,
        )
        cluster = replace(cluster, background=bg)
    cfg = SimConfig(minutes=spec.minutes, seed=spec.seed, n_samples=spec.n_samples)
    return app, rps, cluster, cfg


def run_episode(
    spec: EpisodeSpec,
    weights: dict[str, np.ndarray],
    norm: dict[str, Any],
    std: np.ndarray | None,
    objective: Objective,
    *,
    flat: bool = False,
    hidden: int = 64,
    stack: str | None = None,
    bundles_root: str | None = None,
) -> EpisodeData:
    """Simulate one episode with the intent network of ``weights`` (numpy arrays named as the bundle's) and
    ``norm`` (its normalization), exploring with ``std`` (None: deterministic, as served), under the whole
    ``stack`` (default ``hrl-scheduler``, or ``hrl-no-encoder`` when ``flat``; built through its entry point with
    the intent policy injected). ``bundles_root``: where the stack's other bundles (``<stack>/low``, the predictor in
    ``<stack>/high/predictor``) come from (default ``policy/bundles``; ``make train`` passes its staging root so the
    high level trains over the low level trained just before). Runs in a Ray task or in process."""
    t0 = time.perf_counter()
    rng = np.random.default_rng(spec.seed)
    if spec.scenario:
        tr = training_run(
            spec.scenario,
            list(spec.apps),
            np.random.default_rng(spec.trace_seed),
            minutes=spec.minutes,
            seed=spec.seed,
            n_samples=spec.n_samples,
        )
        app, rps, cluster, cfg = tr.app, tr.rps, tr.cluster, tr.config
    else:
        app, rps, cluster, cfg = _classic(spec)
    workloads = autoscaled_workloads(app)
    actor = IntentActor(_actor_bundle(weights, norm, flat, hidden))
    encoder = None
    if not flat:
        encoder = GraphEncoder.load()
    name = stack or ("hrl-no-encoder" if flat else "hrl-scheduler")
    root = Path(bundles_root) if bundles_root else DEFAULT_BUNDLES
    pred_dir = root / name / "high" / "predictor"
    predictor = GruForecaster(
        PolicyBundle.load(pred_dir if (pred_dir / "manifest.json").is_file() else PREDICTOR_BUNDLE)
    )
    featurizer = IntentFeaturizer(predictor, encoder, slo_p95_ms=app.slo_p95_ms, cpu_price=spec.cpu_price)
    policy = SampledIntent(actor, featurizer, workloads, std, rng)
    auto = IntentAutoscaler(workloads=tuple(workloads), forecaster=predictor)
    parts: dict[str, Any] = {"intent_policy": policy, "autoscaler": auto}
    if bundles_root and (root / name / "low" / "manifest.json").is_file():
        parts["placement"] = _placement(str(root / name / "low"), load_learned_placement)
    ctx = StackContext(app, cluster, spec.seed, cfg, parts=parts)
    built = available_stacks()[name].factory(ctx)
    try:
        sim = Simulation(
            app,
            rps,
            cluster,
            built.scheduler,
            cfg,
            hooks=built.hooks,
            on_change=built.on_change,
            scheduler_name=built.scheduler_name,
        )
        res = sim.run()
    finally:
        if built.close is not None:
            built.close()
    ref_cores = sum(w.replicas * w.pod_requests.cpu_m for w in app.workloads) / 1000.0
    obj = replace(objective, cpu_price=spec.cpu_price)
    rewards = obj.rewards(minute_outcomes(res.series), app.slo_p95_ms, max(ref_cores, 1e-3))
    minutes = [int(round(t / cfg.step_s)) for t, *_ in policy.decisions]
    decisions = []
    for i, (_t, o, zs, zg) in enumerate(policy.decisions):
        end = minutes[i + 1] if i + 1 < len(minutes) else len(rewards)
        decisions.append(Decision(minutes[i], o.service, o.global_, zs, zg, float(rewards[minutes[i] : end].sum())))
    costs = -rewards
    metrics = {k: float(v) for k, v in res.metrics.items()}
    p95 = np.asarray(res.series.get("latency_p95_ms", []), dtype=np.float64)
    metrics["slo_violation_frac"] = float(np.mean(~(p95 <= app.slo_p95_ms))) if len(p95) else 0.0
    metrics["objective"] = float(costs.mean()) if len(costs) else 0.0
    metrics.update({f"guardrail_{k}": float(v) for k, v in auto.guardrail_counts.items()})
    intents = []
    for i, (_t, o, zs, zg) in enumerate(policy.decisions):
        it = intent_from_outputs(o.services, zs, zg)
        intents.append(
            {
                "minute": minutes[i],
                "locality_weight": it.values[0],
                "balance_weight": it.values[1],
                "move_budget_frac": it.move_budget_frac,
                "capacity_target_mean": float(np.mean(list(it.capacity_target.values()) or [0.0])),
                "colocation_mean": float(np.mean(list(it.colocation_priority.values()) or [0.0])),
            }
        )
    return EpisodeData(spec, decisions, rewards, metrics, intents, time.perf_counter() - t0)


# ---- the networks --------------------------------------------------------------------------------------------------


class IntentNet(nn.Module):
    """The torch twin of :class:`policy.highlevel.IntentActor` (same arrays, same forward) plus the critic and the
    exploration log-stds. ``forward(service (B, N, F_s), mask (B, N) bool, global_ (B, F_g))`` →
    ``(z_s (B, N, 2), z_g (B, 3), value (B,))``; padded services (mask False) are ignored by the pooling."""

    def __init__(self, service_features: int, global_features: int, hidden: int = 64, init_log_std: float = -0.7):
        super().__init__()
        F = service_features + global_features
        self.trunk = nn.Sequential(nn.Linear(F, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
        self.service_head = nn.Linear(hidden, N_SERVICE_OUT)
        self.global_body = nn.Linear(hidden + global_features, hidden)
        self.global_head = nn.Linear(hidden, N_GLOBAL_OUT)
        self.critic_trunk = nn.Sequential(nn.Linear(F, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
        self.critic_head = nn.Sequential(
            nn.Linear(2 * hidden + global_features, hidden), nn.Tanh(), nn.Linear(hidden, 1)
        )
        self.log_std = nn.Parameter(torch.full((N_SERVICE_OUT + N_GLOBAL_OUT,), float(init_log_std)))
        for m in (self.service_head, self.global_head):
            nn.init.orthogonal_(m.weight, 0.01)
            nn.init.zeros_(m.bias)
        with torch.no_grad():  # start at the default intent: locality = balance = 1 (3 σ(z) = 1), budget 0.5
            self.global_head.bias[:2] = math.log(1.0 / 2.0)
        self.register_buffer("s_mean", torch.zeros(service_features))
        self.register_buffer("s_std", torch.ones(service_features))
        self.register_buffer("g_mean", torch.zeros(global_features))
        self.register_buffer("g_std", torch.ones(global_features))
        # rewards are divided by this before GAE (set once from the first episodes): the critic then learns values
        # of order 1, whatever the objective's scale
        self.register_buffer("reward_scale", torch.ones(()))

    def set_normalization(self, s_mean, s_std, g_mean, g_std) -> None:
        for name, v in (("s_mean", s_mean), ("s_std", s_std), ("g_mean", g_mean), ("g_std", g_std)):
            getattr(self, name).copy_(torch.as_tensor(np.asarray(v, dtype=np.float32)))

    def _inputs(self, service: torch.Tensor, global_: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        sn = (service - self.s_mean) / self.s_std.clamp_min(1e-6)
        gn = (global_ - self.g_mean) / self.g_std.clamp_min(1e-6)
        x = torch.cat([sn, gn[:, None, :].expand(-1, sn.shape[1], -1)], dim=-1)
        return x, gn

    def forward(self, service: torch.Tensor, mask: torch.Tensor, global_: torch.Tensor):
        x, gn = self._inputs(service, global_)
        m = mask.to(x.dtype)[..., None]
        n = m.sum(dim=1).clamp_min(1.0)
        h = self.trunk(x)
        z_s = self.service_head(h)
        pooled = (h * m).sum(dim=1) / n
        z_g = self.global_head(torch.tanh(self.global_body(torch.cat([pooled, gn], dim=-1))))
        c = self.critic_trunk(x)
        c_mean = (c * m).sum(dim=1) / n
        c_max = torch.where(m > 0, c, torch.full_like(c, -1e9)).amax(dim=1)
        value = self.critic_head(torch.cat([c_mean, c_max, gn], dim=-1))[:, 0]
        return z_s, z_g, value

    def actor_parameters(self) -> list[nn.Parameter]:
        """The actor's parameters (served) and the exploration log-stds."""
        mods = (self.trunk, self.service_head, self.global_body, self.global_head)
        return [p for m in mods for p in m.parameters()] + [self.log_std]

    def critic_parameters(self) -> list[nn.Parameter]:
        """The critic's parameters (training only)."""
        return [*self.critic_trunk.parameters(), *self.critic_head.parameters()]

    def actor_arrays(self) -> dict[str, np.ndarray]:
        """The actor's arrays named as the bundle's (:func:`policy.highlevel.intent_weight_shapes`)."""
        sd = {k: v.detach().cpu().numpy().astype(np.float32) for k, v in self.state_dict().items()}
        return {k: sd[k] for k in intent_weight_shapes(1, 1, 1)}

    def normalization(self) -> dict[str, Any]:
        def lst(t):
            return [float(x) for x in t.detach().cpu().numpy()]

        return {
            "service": {"mean": lst(self.s_mean), "std": lst(self.s_std.clamp_min(1e-6))},
            "global": {"mean": lst(self.g_mean), "std": lst(self.g_std.clamp_min(1e-6))},
        }


def export_intent(
    net: IntentNet, path: str | Path | None, *, flat: bool, policy_version: str, metadata: dict[str, Any]
) -> PolicyBundle:
    """The ``intent-actor-v1`` bundle of ``net`` (written to ``path`` unless None)."""
    hidden = net.service_head.in_features
    b = PolicyBundle(
        level="high",
        policy_version=policy_version,
        feature_spec={
            "service": INTENT_SERVICE_SPEC_FLAT if flat else INTENT_SERVICE_SPEC,
            "global": INTENT_GLOBAL_SPEC,
        },
        dims={"hidden": hidden},
        architecture={"type": INTENT_ARCH, "capacity_range": [0.3, 0.95], "colocation_max": 2.0, "weight_max": 3.0},
        weights=net.actor_arrays(),
        normalization=net.normalization(),
        metadata=metadata,
    )
    if path is not None:
        b.save(path)
    return b


# ---- PPO -----------------------------------------------------------------------------------------------------------


class RolloutBatch(NamedTuple):
    """Decisions of one iteration, padded to the most services: ``service`` (B, N, F_s), ``mask`` (B, N), ``global_``
    (B, F_g), ``z_s`` (B, N, 2), ``z_g`` (B, 3), ``logp`` (B,) under the collecting policy, ``advantages`` (B,),
    ``returns`` (B,)."""

    service: torch.Tensor
    mask: torch.Tensor
    global_: torch.Tensor
    z_s: torch.Tensor
    z_g: torch.Tensor
    logp: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor


def _log_prob(net: IntentNet, z_s_mean, z_g_mean, z_s, z_g, mask) -> torch.Tensor:
    """Log-probability of the sampled pre-activations under the diagonal Gaussian (per decision)."""
    std = net.log_std.exp()
    ls = (
        -0.5 * ((z_s - z_s_mean) / std[:N_SERVICE_OUT]) ** 2 - net.log_std[:N_SERVICE_OUT] - 0.5 * math.log(2 * math.pi)
    )
    lg = (
        -0.5 * ((z_g - z_g_mean) / std[N_SERVICE_OUT:]) ** 2 - net.log_std[N_SERVICE_OUT:] - 0.5 * math.log(2 * math.pi)
    )
    return (ls.sum(-1) * mask.to(ls.dtype)).sum(-1) + lg.sum(-1)


def _pad(decisions: Sequence[Decision]) -> tuple[torch.Tensor, ...]:
    B = len(decisions)
    N = max(1, max(len(d.service) for d in decisions))
    Fs = decisions[0].service.shape[1]
    service = np.zeros((B, N, Fs), np.float32)
    mask = np.zeros((B, N), bool)
    z_s = np.zeros((B, N, N_SERVICE_OUT), np.float32)
    for i, d in enumerate(decisions):
        n = len(d.service)
        service[i, :n], mask[i, :n], z_s[i, :n] = d.service, True, d.z_s
    glob = np.stack([d.global_ for d in decisions]).astype(np.float32)
    z_g = np.stack([d.z_g for d in decisions]).astype(np.float32)
    return tuple(torch.as_tensor(a) for a in (service, mask, glob, z_s, z_g))


def build_batch(net: IntentNet, episodes: Sequence[EpisodeData], gamma: float, lam: float) -> RolloutBatch:
    """GAE advantages per episode (terminal at the episode's end), on rewards divided by ``net.reward_scale``
    (advantages and returns in those units), and the collecting policy's log-probs."""
    decisions = [d for ep in episodes for d in ep.decisions]
    service, mask, glob, z_s, z_g = _pad(decisions)
    with torch.no_grad():
        m_s, m_g, values = net(service, mask, glob)
        logp = _log_prob(net, m_s, m_g, z_s, z_g, mask)
    adv = np.zeros(len(decisions))
    v = values.numpy()
    k = 0
    for ep in episodes:
        n = len(ep.decisions)
        r = np.array([d.reward for d in ep.decisions]) / float(net.reward_scale)
        last = 0.0
        for t in reversed(range(n)):
            nxt = v[k + t + 1] if t + 1 < n else 0.0
            delta = r[t] + gamma * nxt - v[k + t]
            last = delta + gamma * lam * last
            adv[k + t] = last
        k += n
    returns = adv + v
    return RolloutBatch(
        service,
        mask,
        glob,
        z_s,
        z_g,
        logp,
        torch.as_tensor(adv, dtype=torch.float32),
        torch.as_tensor(returns, dtype=torch.float32),
    )


def ppo_update(
    net: IntentNet, opt: torch.optim.Optimizer, batch: RolloutBatch, cfg: HierarchyTrainConfig, rng: np.random.Generator
) -> dict[str, float]:
    """``cfg.epochs`` passes of clipped-surrogate PPO over ``batch`` in minibatches; returns mean losses."""
    B = len(batch.logp)
    stats = {"policy_loss": [], "value_loss": [], "approx_kl": [], "clip_frac": []}
    adv_all = (batch.advantages - batch.advantages.mean()) / (batch.advantages.std() + 1e-8)
    for _ in range(cfg.epochs):
        order = rng.permutation(B)
        for i in range(0, B, cfg.minibatch):
            idx = torch.as_tensor(order[i : i + cfg.minibatch])
            m_s, m_g, value = net(batch.service[idx], batch.mask[idx], batch.global_[idx])
            logp = _log_prob(net, m_s, m_g, batch.z_s[idx], batch.z_g[idx], batch.mask[idx])
            ratio = (logp - batch.logp[idx]).exp()
            adv = adv_all[idx]
            pg = -torch.min(ratio * adv, ratio.clamp(1 - cfg.clip, 1 + cfg.clip) * adv).mean()
            vl = 0.5 * ((value - batch.returns[idx]) ** 2).mean()
            loss = pg + cfg.vf_coef * vl
            opt.zero_grad()
            loss.backward()
            # actor and critic clipped apart: a large critic gradient must not scale the actor's away
            nn.utils.clip_grad_norm_(net.actor_parameters(), cfg.max_grad_norm)
            nn.utils.clip_grad_norm_(net.critic_parameters(), cfg.max_grad_norm)
            opt.step()
            with torch.no_grad():
                stats["policy_loss"].append(float(pg))
                stats["value_loss"].append(float(vl))
                stats["approx_kl"].append(float((batch.logp[idx] - logp).mean()))
                stats["clip_frac"].append(float(((ratio - 1).abs() > cfg.clip).float().mean()))
    return {k: float(np.mean(v)) if v else 0.0 for k, v in stats.items()}


# ---- Ray -----------------------------------------------------------------------------------------------------------


class Rollouts:
    """Episodes as Ray tasks (a local Ray of ``workers`` CPUs unless ``address`` names a cluster), or in this
    process with ``workers=1`` and no address (tests, quick runs)."""

    def __init__(self, workers: int, address: str | None = None):
        self.ray = None
        if workers > 1 or address:
            import ray

            if not ray.is_initialized():
                ray.init(
                    address=address,
                    num_cpus=None if address else workers,
                    include_dashboard=False,
                    log_to_driver=False,
                    ignore_reinit_error=True,
                )
                self._owned = True
            else:
                self._owned = False
            self.ray = ray
            self._task = ray.remote(num_cpus=1)(run_episode)

    def run(
        self, specs: Sequence[EpisodeSpec], weights, norm, std, objective, flat, hidden, bundles_root=None
    ) -> list[EpisodeData]:
        kw = {"flat": flat, "hidden": hidden, "bundles_root": bundles_root}
        if self.ray is None:
            return [run_episode(s, weights, norm, std, objective, **kw) for s in specs]
        w = self.ray.put(weights)
        refs = [self._task.remote(s, w, norm, std, objective, **kw) for s in specs]
        return list(self.ray.get(refs))

    def close(self) -> None:
        if self.ray is not None and getattr(self, "_owned", False):
            self.ray.shutdown()
            self.ray = None


# ---- helpers of the loop -------------------------------------------------------------------------------------------


def _fit_normalization(net: IntentNet, episodes: Sequence[EpisodeData]) -> None:
    s = np.concatenate([d.service for ep in episodes for d in ep.decisions if len(d.service)])
    g = np.stack([d.global_ for ep in episodes for d in ep.decisions])
    net.set_normalization(s.mean(0), s.std(0) + 1e-3, g.mean(0), g.std(0) + 1e-3)


def _write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    if not rows:
        return
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)


def _episode_summary(episodes: Sequence[EpisodeData]) -> dict[str, float]:
    keys = ("objective", "latency_mean_ms", "latency_p95_ms", "failed_pct", "cpu_core_hours", "slo_violation_frac")
    out = {k: float(np.mean([ep.metrics[k] for ep in episodes])) for k in keys}
    out["return"] = float(np.mean([sum(d.reward for d in ep.decisions) for ep in episodes]))
    its = [i for ep in episodes for i in ep.intents]
    for k in ("locality_weight", "balance_weight", "move_budget_frac", "capacity_target_mean", "colocation_mean"):
        vals = np.array([i[k] for i in its]) if its else np.zeros(1)
        out[f"intent_{k}_mean"] = float(vals.mean())
        out[f"intent_{k}_sd"] = float(vals.std())
    return out


def _plot(rows: Sequence[dict[str, Any]], eval_rows: Sequence[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    it = [r["iteration"] for r in rows]
    axes[0].plot(it, [r["objective"] for r in rows], color="0.6", label="training episodes (exploring)")
    if eval_rows:
        axes[0].plot(
            [r["iteration"] for r in eval_rows],
            [r["objective"] for r in eval_rows],
            "o-",
            color="C3",
            label="validation (as served)",
        )
    axes[0].set_ylabel("cost per minute (lower is better)")
    axes[0].legend(fontsize=8, loc="upper right")
    axes[1].plot(it, [r["intent_capacity_target_mean_mean"] for r in rows], label="capacity target")
    axes[1].plot(it, [r["intent_colocation_mean_mean"] / 2 for r in rows], label="co-location priority / 2")
    axes[1].plot(it, [r["intent_balance_weight_mean"] / 3 for r in rows], label="balance weight / 3")
    axes[1].plot(it, [r["intent_move_budget_frac_mean"] for r in rows], label="move budget")
    axes[1].set_ylabel("mean intent (scaled to 0..1)")
    axes[1].set_ylim(0, 1)
    axes[1].legend(fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
    axes[2].plot(it, [r["violation_weight"] for r in rows], color="C2")
    axes[2].set_ylabel("SLO penalty (Lagrange multiplier)")
    for ax in axes:
        ax.set_xlabel("PPO iteration")
        ax.grid(alpha=0.3)
    fig.suptitle("High-level intent policy: PPO in the simulator")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ---- training ------------------------------------------------------------------------------------------------------


def train_hierarchy(
    cfg: HierarchyTrainConfig = HierarchyTrainConfig(),
    out: str | Path | None = None,
    run_dir: str | Path | None = None,
    *,
    ray_address: str | None = None,
    bundles_root: str | Path | None = None,
    log: Callable[[str], None] = lambda m: print(m, file=sys.stderr),
) -> tuple[IntentNet, dict[str, Any]]:
    """Train the high level (module docstring); export the best validation policy to ``out`` (``intent/`` and a
    copy of the predictor in ``predictor/``; None: no export). ``ray_address``: a Ray cluster to run the episodes
    on (None: a local Ray of ``cfg.workers`` CPUs); ``bundles_root``: where the stack's other bundles come from
    (:func:`run_episode`). Returns (network, report)."""
    torch.set_num_threads(1)
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    t_start = time.perf_counter()
    run = Path(run_dir) if run_dir is not None else ROOT / "runs" / f"hierarchy-s{cfg.seed}"
    run.mkdir(parents=True, exist_ok=True)
    # ---- build everything ----
    Fs = len(INTENT_SERVICE_SPEC_FLAT if cfg.flat else INTENT_SERVICE_SPEC)
    net = IntentNet(Fs, len(INTENT_GLOBAL_SPEC), cfg.hidden, cfg.init_log_std)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr, eps=1e-5)
    objective = cfg.objective
    rollouts = Rollouts(cfg.workers, ray_address)
    broot = None if bundles_root is None else str(bundles_root)

    def roll(specs: Sequence[EpisodeSpec], std: np.ndarray | None, obj: Objective) -> list[EpisodeData]:
        return rollouts.run(specs, net.actor_arrays(), net.normalization(), std, obj, cfg.flat, cfg.hidden, broot)

    val_specs = sample_episode_specs(cfg, np.random.default_rng(10_000 + cfg.seed), cfg.eval_episodes, seed0=9_000_000)
    rows: list[dict[str, Any]] = []
    eval_rows: list[dict[str, Any]] = []
    best: tuple[float, dict[str, Any] | None] = (math.inf, None)
    try:
        # the inputs' normalization, from episodes of the initial policy (never updated: served == trained)
        warm = roll(
            sample_episode_specs(cfg, rng, cfg.episodes_per_iteration, seed0=0),
            net.log_std.exp().detach().numpy(),
            objective,
        )
        _fit_normalization(net, warm)
        rewards = np.array([d.reward for ep in warm for d in ep.decisions], dtype=np.float64)
        net.reward_scale.fill_(float(max(rewards.std(), 1e-3)) if len(rewards) else 1.0)
        for it in range(1, cfg.iterations + 1):
            # ---- collect ----
            specs = sample_episode_specs(cfg, rng, cfg.episodes_per_iteration, seed0=it * 1000)
            std = net.log_std.exp().detach().numpy()
            episodes = roll(specs, std, objective)
            # ---- update ----
            batch = build_batch(net, episodes, cfg.gamma, cfg.gae_lambda)
            losses = ppo_update(net, opt, batch, cfg, rng)
            violation = float(np.mean([ep.metrics["slo_violation_frac"] for ep in episodes]))
            objective = objective.lagrangian_step(violation, cfg.lagrangian_lr)
            # ---- log ----
            row = {
                "iteration": it,
                "wall_s": round(time.perf_counter() - t_start, 1),
                "episodes": len(episodes),
                "decisions": len(batch.logp),
                "violation_weight": objective.violation_weight,
                **_episode_summary(episodes),
                **losses,
                "log_std_mean": float(net.log_std.detach().mean()),
            }
            rows.append(row)
            log(
                f"hierarchy it {it}/{cfg.iterations}: cost {row['objective']:.3f}/min, p95 "
                f"{row['latency_p95_ms']:.0f} ms, failed {row['failed_pct']:.2f} %, CPU {row['cpu_core_hours']:.2f} "
                f"core-h, capacity target {row['intent_capacity_target_mean_mean']:.2f}, kl {losses['approx_kl']:.4f}, "
                f"{row['wall_s']:.0f} s"
            )
            # ---- evaluate ----
            if cfg.eval_every and (it % cfg.eval_every == 0 or it == cfg.iterations):
                evals = roll(val_specs, None, cfg.objective)
                ev = {"iteration": it, **_episode_summary(evals)}
                eval_rows.append(ev)
                log(f"hierarchy validation it {it}: cost {ev['objective']:.3f}/min (best so far {best[0]:.3f})")
                if ev["objective"] < best[0]:
                    best = (ev["objective"], {k: v.detach().clone() for k, v in net.state_dict().items()})
    finally:
        rollouts.close()
    if best[1] is not None:
        net.load_state_dict(best[1])
    # ---- export ----
    _write_csv(run / "progress.csv", rows)
    _write_csv(run / "validation.csv", eval_rows)
    torch.save({"net": net.state_dict(), "config": json_ready(asdict(cfg))}, run / "checkpoint.pt")
    if rows:
        _plot(rows, eval_rows, run / "learning_curves.png")
    train_s = time.perf_counter() - t_start
    meta = {
        "algorithm": "PPO (clipped surrogate, GAE) over the intent's pre-activations; critic on mean+max pooled "
        "services (policy.train.hierarchy)",
        "objective": asdict(cfg.objective),
        "final_violation_weight": objective.violation_weight,
        "apps": list(cfg.apps),
        "synthetic_share": cfg.synthetic_share,
        "iterations": cfg.iterations,
        "episodes": cfg.iterations * cfg.episodes_per_iteration,
        "train_s": round(train_s, 1),
        "best_validation_cost": None if best[1] is None else best[0],
        "torch_version": torch.__version__,
    }
    base = f"intent{'-flat' if cfg.flat else ''}-{time.strftime('%Y%m%d')}-s{cfg.seed}"
    version = content_version(base, net.actor_arrays(), quick=cfg.quick)
    report = {
        "train_s": train_s,
        "policy_version": version,
        "rows": rows[-1:] if rows else [],
        "validation": eval_rows,
        "run_dir": str(run),
        "config": json_ready(asdict(cfg)),
    }
    if out is not None:
        staged = run / "staged-bundle"
        if staged.exists():
            shutil.rmtree(staged)
        export_intent(net, staged / "intent", flat=cfg.flat, policy_version=version, metadata=meta)
        pred = (
            Path(bundles_root) / ("hrl-no-encoder" if cfg.flat else "hrl-scheduler") / "high" / "predictor"
            if bundles_root
            else None
        )
        shutil.copytree(
            pred if pred is not None and (pred / "manifest.json").is_file() else PREDICTOR_BUNDLE, staged / "predictor"
        )
        LearnedIntent.load(staged)  # refuse to install what the server could not load
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        for sub in ("intent", "predictor"):
            if (out / sub).exists():
                shutil.rmtree(out / sub)
            shutil.copytree(staged / sub, out / sub)
        shutil.rmtree(staged)
        log(f"hierarchy: {version}: bundle written to {out}")
    (run / "report.json").write_text(json.dumps(json_ready(report), indent=1) + "\n", encoding="utf-8")
    return net, report


QUICK = {
    "iterations": 2,
    "episodes_per_iteration": 2,
    "episode_minutes": 15,
    "n_samples": 100,
    "eval_every": 2,
    "eval_episodes": 1,
    "workers": 1,
    "synthetic_share": 0.0,
    "quick": True,
}


def train_stage(root: Path, *, quick: bool, seed: int, log: Callable[[str], None] = print) -> list[str]:
    """The ``hierarchy`` stage of ``make train`` (:mod:`policy.train.pipeline`): the high level of
    ``hrl-scheduler`` (with embeddings) and of ``hrl-no-encoder`` (flat rows), written to
    ``<root>/<stack>/high/{intent,predictor}``. Returns the directories."""
    out = []
    for stack, flat in (("hrl-scheduler", False), ("hrl-no-encoder", True)):
        cfg = HierarchyTrainConfig(seed=seed, flat=flat, **(QUICK if quick else {}))
        run_dir = ROOT / "out" / "train" / f"hierarchy-{stack}" if quick else ROOT / "runs" / f"hierarchy-{stack}"
        train_hierarchy(cfg, Path(root) / stack / "high", run_dir, bundles_root=root, log=log)
        out.append(str(Path(root) / stack / "high"))
    return out


def run_cli(args: Any) -> int:
    """The body of ``hrl-policy train hierarchy`` (options as there). Returns the exit status."""
    over: dict[str, Any] = dict(QUICK) if args.quick else {}
    for opt, name in (
        ("iterations", "iterations"),
        ("episodes", "episodes_per_iteration"),
        ("minutes", "episode_minutes"),
        ("workers", "workers"),
        ("scenario_share", "scenario_share"),
    ):
        v = getattr(args, opt, None)
        if v is not None:
            over[name] = v
    cfg = HierarchyTrainConfig(seed=args.seed, flat=args.flat, **over)
    stack = "hrl-no-encoder" if args.flat else "hrl-scheduler"
    suffix = "-quick" if args.quick else ""
    run_dir = Path(args.run_dir) if args.run_dir else ROOT / "runs" / f"hierarchy-{stack}{suffix}"
    out = Path(args.out) if args.out else (run_dir / "bundle" if args.quick else DEFAULT_BUNDLES / stack / "high")
    _net, report = train_hierarchy(cfg, out, run_dir, ray_address=args.ray_address)
    print(
        f"hrl-policy train hierarchy: {report['policy_version']} in {report['train_s']:.0f} s; bundle in {out}; "
        f"curves in {run_dir / 'learning_curves.png'}",
        file=sys.stderr,
    )
    return 0
