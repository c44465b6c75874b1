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
from policy.highlevel import (
    INTENT_GLOBAL_SPEC,
    INTENT_SERVICE_SPEC,
    INTENT_SERVICE_SPEC_FLAT,
    IntentActor,
    IntentFeaturizer,
    IntentObservation,
    LearnedIntent,
    intent_from_outputs,
)
from policy.sim.objective import Objective, app_costs
from policy.telemetry import note

from .drpc import json_ready
from .intent_episodes import (
    PREDICTOR_BUNDLE,
    EpisodeDistribution,
    EpisodeSpec,
    episode_setting,
    episode_stack,
    sample_episode_specs,
)
from .intent_net import N_SERVICE_OUT, IntentNet, actor_bundle, install_intent_bundle
from .ray_pool import TaskPool

__all__ = [
    "HierarchyTrainConfig",
    "Decision",
    "EpisodeData",
    "SampledIntent",
    "run_episode",
    "train_hierarchy",
    "train_stage",
    "run_cli",
]

ROOT = Path(__file__).resolve().parents[2]


# ---- configuration ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HierarchyTrainConfig(EpisodeDistribution):
    """PPO for the high level (module docstring), over the episodes of :class:`EpisodeDistribution` (its fields).
    Ranges are checked in ``__post_init__`` (ValueError naming the field).

    - ``iterations`` × ``episodes_per_iteration`` episodes (Ray tasks, ``workers`` at a time on a local Ray);
    - PPO: ``gamma`` (per period), ``gae_lambda``, ``clip``, ``epochs``, ``minibatch``, ``lr``, ``vf_coef``,
      ``max_grad_norm``, ``init_log_std``, ``hidden``;
    - ``objective`` (its ``violation_weight`` starts the Lagrange multiplier; ``lagrangian_lr`` its step);
    - ``eval_every`` iterations, ``eval_episodes`` fixed validation episodes (no exploration); the bundle is the
      best validation policy;
    - ``flat``: train the ``hrl-no-encoder`` variant (service rows without the graph encoder's embedding);
    - ``seed``; ``quick``: a smoke test (versions say ``-quick``; bundles never overwrite committed ones);
    - ``baseline``: ``critic`` (GAE on the learned critic) or ``paired``: every episode is also run without
      exploration on the same inputs and random numbers, and a decision's advantage is its reward-to-go minus the
      paired run's from the same period (an input-dependent baseline: Mao et al. 2018, arXiv 1807.02264), so the
      episodes' different traces and clusters cancel out;
    - ``init_bundle``: an ``intent`` bundle directory to start from (e.g. the DAgger bundle: PPO as a fine-tune).
    """

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
    baseline: str = "critic"
    init_bundle: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.baseline not in ("critic", "paired"):
            raise ValueError(f"baseline: expected 'critic' or 'paired', got {self.baseline!r}")
        for f in ("iterations", "episodes_per_iteration", "workers", "epochs", "minibatch", "hidden"):
            if getattr(self, f) < 1:
                raise ValueError(f"{f}: expected an integer >= 1, got {getattr(self, f)!r}")
        for f in ("gamma", "gae_lambda"):
            if not 0.0 <= getattr(self, f) <= 1.0:
                raise ValueError(f"{f}: expected a number in [0, 1], got {getattr(self, f)!r}")


# ---- episodes ------------------------------------------------------------------------------------------------------


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
    minute), ``intents``: the intent of each decision as JSON, ``wall_s``, ``cpu_s`` (the task's CPU time)."""

    spec: EpisodeSpec
    decisions: list[Decision]
    rewards: np.ndarray
    metrics: dict[str, float]
    intents: list[dict[str, Any]]
    wall_s: float
    cpu_s: float = 0.0


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
    t0, c0 = time.perf_counter(), time.process_time()
    rng = np.random.default_rng(spec.seed)
    setting = episode_setting(spec, flat=flat, stack=stack, bundles_root=bundles_root)
    app, cfg = setting.app, setting.config
    actor = IntentActor(actor_bundle(weights, norm, flat, hidden))
    policy = SampledIntent(actor, setting.featurizer, setting.workloads, std, rng)
    auto = setting.parts["autoscaler"]
    built = episode_stack(setting, policy, spec.seed)
    try:
        res = built.simulation(app, setting.rps, setting.cluster, cfg).run()
    finally:
        if built.close is not None:
            built.close()
    rewards = -app_costs(app, res.series, replace(objective, cpu_price=spec.cpu_price))
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
    return EpisodeData(spec, decisions, rewards, metrics, intents, time.perf_counter() - t0, time.process_time() - c0)


# ---- the networks --------------------------------------------------------------------------------------------------


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


def _to_go(rewards: np.ndarray, gamma: float) -> np.ndarray:
    out = np.zeros(len(rewards))
    acc = 0.0
    for t in reversed(range(len(rewards))):
        acc = rewards[t] + gamma * acc
        out[t] = acc
    return out


def build_batch(
    net: IntentNet,
    episodes: Sequence[EpisodeData],
    gamma: float,
    lam: float,
    paired: Sequence[EpisodeData] | None = None,
) -> RolloutBatch:
    """Advantages per episode on rewards divided by ``net.reward_scale`` (advantages and returns in those units),
    and the collecting policy's log-probs: GAE on the critic (terminal at the episode's end), or, with ``paired``
    (the same episodes run without exploration, in order), the decision's discounted reward-to-go minus the paired
    run's from the same period."""
    decisions = [d for ep in episodes for d in ep.decisions]
    service, mask, glob, z_s, z_g = _pad(decisions)
    with torch.no_grad():
        m_s, m_g, values = net(service, mask, glob)
        logp = _log_prob(net, m_s, m_g, z_s, z_g, mask)
    adv = np.zeros(len(decisions))
    v = values.numpy()
    k = 0
    for i, ep in enumerate(episodes):
        n = len(ep.decisions)
        r = np.array([d.reward for d in ep.decisions]) / float(net.reward_scale)
        if paired is not None:
            base = _to_go(np.array([d.reward for d in paired[i].decisions]) / float(net.reward_scale), gamma)
            base = np.concatenate([base, np.zeros(max(0, n - len(base)))])[:n]
            adv[k : k + n] = _to_go(r, gamma) - base
            k += n
            continue
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
    rollouts = TaskPool(cfg.workers, ray_address)
    broot = None if bundles_root is None else str(bundles_root)

    cpu0, task_cpu = time.process_time(), [0.0]

    def roll(specs: Sequence[EpisodeSpec], std: np.ndarray | None, obj: Objective, desc: str) -> list[EpisodeData]:
        kw = {"flat": cfg.flat, "hidden": cfg.hidden, "bundles_root": broot}
        eps = rollouts.map(run_episode, specs, net.actor_arrays(), net.normalization(), std, obj, desc=desc, **kw)
        task_cpu[0] += sum(e.cpu_s for e in eps)
        return eps

    val_specs = sample_episode_specs(cfg, np.random.default_rng(10_000 + cfg.seed), cfg.eval_episodes, seed0=9_000_000)
    rows: list[dict[str, Any]] = []
    eval_rows: list[dict[str, Any]] = []
    best: tuple[float, dict[str, Any] | None] = (math.inf, None)
    try:
        # the inputs' normalization, from episodes of the initial policy (never updated: served == trained)
        if cfg.init_bundle:  # a fine-tune: the distilled actor and its (fixed) input normalization
            net.load_actor(PolicyBundle.load(cfg.init_bundle, level="high"))
        warm = roll(
            sample_episode_specs(cfg, rng, cfg.episodes_per_iteration, seed0=0),
            net.log_std.exp().detach().numpy(),
            objective,
            "hierarchy: warm-up episodes",
        )
        if not cfg.init_bundle:
            _fit_normalization(net, warm)
        rewards = np.array([d.reward for ep in warm for d in ep.decisions], dtype=np.float64)
        net.reward_scale.fill_(float(max(rewards.std(), 1e-3)) if len(rewards) else 1.0)
        for it in range(1, cfg.iterations + 1):
            # ---- collect ----
            specs = sample_episode_specs(cfg, rng, cfg.episodes_per_iteration, seed0=it * 1000)
            std = net.log_std.exp().detach().numpy()
            episodes = roll(specs, std, objective, f"hierarchy it {it}: episodes")
            paired = (
                roll(specs, None, objective, f"hierarchy it {it}: paired episodes")
                if cfg.baseline == "paired"
                else None
            )
            # ---- update ----
            batch = build_batch(net, episodes, cfg.gamma, cfg.gae_lambda, paired)
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
                evals = roll(val_specs, None, cfg.objective, f"hierarchy it {it}: validation episodes")
                ev = {
                    "iteration": it,
                    "cpu_minutes": round(rollouts.cpu_s(task_cpu[0], cpu0) / 60.0, 2),
                    **_episode_summary(evals),
                }
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
        pred = Path(bundles_root) / ("hrl-no-encoder" if cfg.flat else "hrl-scheduler") / "high" / "predictor"
        if not (bundles_root and (pred / "manifest.json").is_file()):
            pred = PREDICTOR_BUNDLE
        install_intent_bundle(
            net, out, run / "staged-bundle", flat=cfg.flat, policy_version=version, metadata=meta, predictor=pred
        )
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
        ("baseline", "baseline"),
        ("init", "init_bundle"),
    ):
        v = getattr(args, opt, None)
        if v is not None:
            over[name] = v
    cfg = HierarchyTrainConfig(seed=args.seed, flat=args.flat, **over)
    stack = "hrl-no-encoder" if args.flat else "hrl-scheduler"
    suffix = "-quick" if args.quick else ""
    run_dir = Path(args.run_dir) if args.run_dir else ROOT / "runs" / f"hierarchy-{stack}{suffix}"
    out = Path(args.out) if args.out else (run_dir / "bundle" if args.quick else DEFAULT_BUNDLES / stack / "high")
    _net, report = train_hierarchy(cfg, out, run_dir, ray_address=args.ray_address, log=note)
    note(
        f"hrl-policy train hierarchy: {report['policy_version']} in {report['train_s']:.0f} s; bundle in {out}; "
        f"curves in {run_dir / 'learning_curves.png'}"
    )
    return 0
