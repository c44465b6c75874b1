"""[torch] The learned high level distilled from the lookahead oracle (``hrl-policy train dagger``): DAgger (Ross,
Gordon and Bagnell 2011, "A reduction of imitation learning and structured prediction to no-regret online learning",
arXiv 1011.0686), with :mod:`policy.sim.oracle` as the expert.

**Why not PPO alone.** The episodes differ in their traces and clusters, an exogenous input that drowns a
return-based gradient (Mao et al. 2018, "Variance reduction for reinforcement learning in input-driven environments",
arXiv 1807.02264): the PPO high level of :mod:`policy.train.hierarchy` learned a constant. A lookahead teacher gives
a label per state instead of a return per episode (Comyco, arXiv 1908.02270; expert iteration, arXiv 1705.08439).

**Algorithm** (one loop, CleanRL-style):

1. *collect*: episodes of the training distribution (:class:`~policy.train.intent_episodes.EpisodeDistribution`,
   never a held-out app) run the served ``hrl-scheduler`` stack with the learner (:class:`LearnedIntent` of the
   current network) as its high level and :class:`~policy.sim.oracle.LookaheadOracle` as the driver: at every
   period the oracle forks the run and rolls out its candidates (the learner's intent, the constant grid, a
   per-service coordinate search); the run then continues with the oracle's best with probability ``beta_i`` and
   with the learner's intent otherwise (``beta_i = beta · beta_decay^(i−1)``: iteration 1 visits the expert's
   states, later ones the learner's, DAgger's mixture);
2. *label*: every decision gives the learner's observation of the state and the oracle's best intent, weighted by
   what the choice was worth there (the spread of the candidates' rollout costs, divided by its median);
3. *aggregate and fit*: all labels so far; the network (the served ``intent-actor-v1``) is fit by weighted squared
   error between its squashed outputs and the label (capacity targets per service; co-location priorities; the
   global weights and the move budget);
4. *validate*: fixed validation episodes with the learner alone (no oracle, as served); the bundle is the best
   validated iterate. The learning curve is the validation objective against the CPU-minutes spent so far.

**Fallback** (SPIBB-style, Laroche et al. 2019, arXiv 1712.06924): the bundle records the tuned constant intent
(:mod:`policy.train.constant`) and how far from the training states its inputs were (the largest |z| of the
normalized global row over every state it was fit on); the served policy falls back to that constant when a state's
global row lies further out (:class:`~policy.highlevel.LearnedIntent`, counted per run).

Outputs under ``run_dir``: ``progress.csv`` (one row per iteration: labels, fit loss, validation objective,
CPU-minutes), ``learning_curve.png``, ``labels.npz``, ``report.json``; the bundle (``intent/`` + ``predictor/``) goes
to ``out``.
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

from policy.bundle import DEFAULT_BUNDLES, PolicyBundle, content_version
from policy.encoder import GraphEncoder
from policy.highlevel import (
    INTENT_ARCH,
    INTENT_GLOBAL_SPEC,
    INTENT_SERVICE_SPEC,
    INTENT_SERVICE_SPEC_FLAT,
    IntentActor,
    LearnedIntent,
    default_intent,
    intent_from_outputs,
)
from policy.sim.objective import Objective, app_costs
from policy.sim.oracle import ImposedIntent, LookaheadConfig, LookaheadOracle, OracleDecision, managed_services
from policy.telemetry import note

from .constant import load_constant
from .drpc import json_ready
from .episodes import TrainingTarget
from .finetune import FineTune, RunOptions
from .intent_critic import CriticConfig, critic_intents, fit_ensemble
from .intent_episodes import (
    PREDICTOR_BUNDLE,
    EpisodeDistribution,
    EpisodeSpec,
    episode_setting,
    episode_stack,
    sample_episode_specs,
)
from .intent_net import IntentNet, actor_bundle, install_intent_bundle
from .ray_pool import TaskPool
from .tensorboard import open_board

__all__ = [
    "DaggerConfig",
    "Label",
    "LabelledEpisode",
    "label_episode",
    "validate_episode",
    "LOSSES",
    "FIT_LOSSES",
    "cost_loss",
    "imitation_loss",
    "FitOptions",
    "fit",
    "fit_student",
    "global_reach",
    "service_reach",
    "save_labels",
    "load_labels",
    "train_dagger",
    "FINE_TUNE",
    "fine_tune_sources",
    "check_fine_tune",
    "train_stage",
    "run_cli",
]

ROOT = Path(__file__).resolve().parents[2]
#: The fits of :class:`DaggerConfig`.loss (``critic`` is :func:`fit_student`'s: a critic, then imitation).
LOSSES = ("cost", "imitation", "critic")
#: The losses :func:`fit` itself takes.
FIT_LOSSES = ("cost", "imitation")


#: DaggerConfig's real-valued fields and their ranges: (low, high, low included, high included); None allowed for
#: the margins (their guard is off).
_RANGES: dict[str, tuple[float, float, bool, bool]] = {
    "beta": (0.0, 1.0, True, True),
    "beta_decay": (0.0, 1.0, True, True),
    "imitation_weight": (0.0, math.inf, True, False),
    "baseline_weight": (0.0, math.inf, True, False),
    "critic_margin": (0.0, math.inf, True, False),
    "regret_clip": (0.0, math.inf, False, False),
    "kernel_temperature": (0.0, math.inf, False, False),
    "fallback_quantile": (0.0, 1.0, False, True),
    "lean_margin": (0.0, 1.0, True, True),
    "no_burst_lean_margin": (0.0, 1.0, True, True),
}


def _check_ranges(cfg: Any) -> None:
    """Raise ValueError naming the first field of :data:`_RANGES` outside its range (a margin may be None)."""
    for f, (lo, hi, lo_in, hi_in) in _RANGES.items():
        v = getattr(cfg, f)
        if v is None and f.endswith("margin") and f != "critic_margin":
            continue
        ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
        ok = ok and (lo <= v if lo_in else lo < v) and (v <= hi if hi_in else v < hi)
        if not ok:
            span = f"{'[' if lo_in else '('}{lo:g}, {hi:g}{']' if hi_in else ')'}"
            none = "None or " if f.endswith("margin") and f != "critic_margin" else ""
            raise ValueError(f"{f}: expected {none}a finite number in {span}, got {v!r}")


@dataclass(frozen=True)
class DaggerConfig(EpisodeDistribution):
    """DAgger for the high level (module docstring), over the episodes of :class:`EpisodeDistribution` (its fields;
    episodes of ``episode_minutes`` = 30 by default; 40 % synthetic apps, 30 % of whose services run Guaranteed
    pods). Checked in ``__post_init__`` (ValueError naming the field).

    - ``iterations`` × ``episodes_per_iteration`` labelled episodes (Ray tasks, ``workers`` at a time);
    - the mixture: ``beta`` in [0, 1] (share of periods executed by the oracle in iteration 1), ``beta_decay`` in
      [0, 1];
    - the oracle: ``horizon_min``, the constant grid ``capacity_targets``, ``coordinate_services``;
    - the fit: ``epochs`` full-batch Adam steps per iteration at ``lr``, ``hidden`` units;
    - the loss (:func:`fit`): ``loss`` ``"cost"`` (AggreVaTe's cost-sensitive fit over every candidate's rollout
      cost, plus ``imitation_weight`` × the imitation loss; ``kernel_temperature`` > 0 sets how far, in the
      intent's scaled squared distance, a candidate's cost reaches), ``"imitation"`` (squared error to the best
      candidate only) or ``"critic"`` (a cost model of the intents is fit on every candidate's rollout cost, and the
      network imitates the intent it prefers where its predicted gain over the tuned constant exceeds
      ``critic_margin`` median stakes, the constant elsewhere: :mod:`policy.train.intent_critic`);
      ``random_candidates`` >= 0: random per-service intents the oracle rolls out at every period besides its own
      candidates (labels that tell the services apart); ``regret_clip`` > 0: the largest regret counted, in units
      of the median stakes (a bound on what one state's catastrophe weighs: the tail of the costs is what the
      cost-sensitive fit is for);
      ``baseline_weight`` >= 0: the pull toward the tuned constant intent at every state (:func:`fit`); the tuned
      constant's capacity target joins the oracle's grid when it is not on it (its cost is then known at every
      state);
    - the fallback: ``fallback_quantile`` in (0, 1], the quantile of the training states' largest |z| (global row;
      each service row) beyond which the served policy falls back to the tuned constant (1: the largest);
      ``lean_margin`` (None or in [0, 1]): the served capacity targets are at most the constant's plus this
      (:meth:`~policy.highlevel.LearnedIntent.lean_cap`; None: no cap); ``no_burst_lean_margin`` (None or in [0, 1],
      0.05 by default): the same for the services whose pods have no room to burst (CPU limit = request,
      :meth:`~policy.highlevel.LearnedIntent.no_burst_cap`);
    - ``eval_episodes`` fixed validation episodes; ``flat``: the ``hrl-no-encoder`` variant; ``seed``; ``quick``.
    """

    episode_minutes: int = 30
    synthetic_share: float = 0.4
    synthetic_guaranteed_share: float = 0.3
    iterations: int = 4
    episodes_per_iteration: int = 8
    beta: float = 1.0
    beta_decay: float = 0.5
    horizon_min: int = 10
    capacity_targets: tuple[float, ...] = (0.5, 0.65, 0.8, 0.9)
    coordinate_services: int = 1
    epochs: int = 300
    lr: float = 3e-3
    hidden: int = 64
    eval_episodes: int = 6
    workers: int = 2
    loss: str = "cost"
    imitation_weight: float = 0.0
    kernel_temperature: float = 0.02
    regret_clip: float = 100.0
    baseline_weight: float = 1.0
    fallback_quantile: float = 0.995
    lean_margin: float | None = None
    no_burst_lean_margin: float | None = 0.05
    random_candidates: int = 0
    critic_margin: float = 0.1
    objective: Objective = field(default_factory=Objective)
    flat: bool = False
    seed: int = 0
    quick: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        for f in ("iterations", "episodes_per_iteration", "workers", "epochs", "hidden", "horizon_min"):
            if getattr(self, f) < 1:
                raise ValueError(f"{f}: expected an integer >= 1, got {getattr(self, f)!r}")
        for f in ("eval_episodes", "random_candidates"):
            if getattr(self, f) < 0:
                raise ValueError(f"{f}: expected an integer >= 0, got {getattr(self, f)!r}")
        if self.loss not in LOSSES:
            raise ValueError(f"loss: expected one of {', '.join(LOSSES)}, got {self.loss!r}")
        _check_ranges(self)

    def fit_options(self, baseline: tuple[float, float] | None) -> FitOptions:
        """The options of :func:`fit` this configuration asks for, with ``baseline`` (the tuned constant's capacity
        target and move budget, or None)."""
        return FitOptions(
            self.loss, self.imitation_weight, self.kernel_temperature, self.regret_clip, baseline, self.baseline_weight
        )

    def oracle(self, cpu_price: float) -> LookaheadConfig:
        """The oracle's configuration for an episode whose objective prices CPU at ``cpu_price``."""
        return LookaheadConfig(
            horizon_min=self.horizon_min,
            capacity_targets=self.capacity_targets,
            coordinate_services=self.coordinate_services,
            learned=True,
            random_candidates=self.random_candidates,
            objective=replace(self.objective, cpu_price=cpu_price),
        )

    def critic(self) -> CriticConfig:
        """The critic's configuration (``loss`` ``"critic"``): its grid is the oracle's constant grid plus every
        0.05 between 0.5 and 0.95, its margin ``critic_margin``."""
        grid = tuple(sorted({*self.capacity_targets, *(round(0.5 + 0.05 * i, 2) for i in range(10))}))
        return CriticConfig(hidden=self.hidden, grid=grid, margin=self.critic_margin)


class Label(NamedTuple):
    """One decision's training example: the learner's observation (``service`` (N, F_s), ``global_`` (F_g,)), the
    oracle's intent as targets (``capacity`` (N,), ``colocation`` (N,), ``global_target`` (3,): locality, balance,
    move budget) and the example's ``weight`` (> 0: the spread of the candidates' costs). ``candidates``: every
    candidate the oracle rolled out at that state, as ``(capacity (K, N), colocation (K, N), global (K, 3),
    regret (K,))`` (regret: the candidate's cost over the horizon minus the best one's, >= 0), or None (the
    imitation fit needs only the best)."""

    service: np.ndarray
    global_: np.ndarray
    capacity: np.ndarray
    colocation: np.ndarray
    global_target: np.ndarray
    weight: float
    candidates: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None


class LabelledEpisode(NamedTuple):
    """What one labelled episode returns: its spec, its labels, the run's ``objective`` (mean cost per minute of the
    executed mixture), how often the oracle's best was the learner's own intent, and the task's ``cpu_s``."""

    spec: EpisodeSpec
    labels: list[Label]
    objective: float
    learned_best: int
    cpu_s: float


def _intent_arrays(intent: Any, services: Sequence[str], learner_intent: Any) -> tuple[np.ndarray, ...]:
    """(capacity (N,), colocation (N,), global (3,)) of ``intent`` (None: the learner's own) over ``services``."""
    it = intent if intent is not None else learner_intent
    cap = np.array([it.capacity_target.get(s, learner_intent.capacity_target.get(s, 0.7)) for s in services])
    col = np.array([it.colocation_priority.get(s, 1.0) for s in services])
    values = tuple(it.values) or tuple(learner_intent.values)
    glob = np.array([values[0], values[1], it.move_budget_frac])
    return cap.astype(np.float32), col.astype(np.float32), glob.astype(np.float32)


def _targets(decision: OracleDecision, services: Sequence[str], learner_intent: Any) -> tuple[np.ndarray, ...]:
    return _intent_arrays(decision.best.intent, services, learner_intent)


def _candidate_arrays(
    decision: OracleDecision, services: Sequence[str], learner_intent: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every candidate of ``decision`` as (capacity (K, N), colocation (K, N), global (K, 3), regret (K,))."""
    arrs = [_intent_arrays(c.intent, services, learner_intent) for c in decision.candidates]
    costs = np.array([c.cost for c in decision.candidates], np.float64)
    regret = (costs - costs.min()).astype(np.float32)
    return (
        np.stack([a[0] for a in arrs]),
        np.stack([a[1] for a in arrs]),
        np.stack([a[2] for a in arrs]),
        regret,
    )


def _stakes(decision: OracleDecision) -> float:
    costs = [c.cost for c in decision.candidates]
    return float(max(costs) - min(costs))


def label_episode(
    spec: EpisodeSpec,
    weights: dict[str, np.ndarray],
    norm: dict[str, Any],
    beta: float,
    cfg: DaggerConfig,
    bundles_root: str | None = None,
) -> LabelledEpisode:
    """Run episode ``spec`` with the learner of ``weights``/``norm`` under the oracle's mixture (execute the oracle's
    best with probability ``beta``) and return its labels (module docstring). Runs in a Ray task or in process."""
    t0 = time.process_time()
    setting = episode_setting(spec, flat=cfg.flat, bundles_root=bundles_root)
    actor = IntentActor(actor_bundle(weights, norm, cfg.flat, cfg.hidden))
    learner = LearnedIntent(actor, setting.featurizer, setting.workloads)
    imposed = ImposedIntent(learner)
    rng = np.random.default_rng([spec.seed, 7])

    def chooser(d: OracleDecision) -> int:
        if rng.random() < beta:
            return d.chosen
        return next(i for i, c in enumerate(d.candidates) if c.label == "learned")

    oracle = LookaheadOracle(
        cfg.oracle(spec.cpu_price), imposed, setting.app, managed_services(setting.app), chooser=chooser
    )
    built = episode_stack(setting, imposed, spec.seed)
    built.before_minute = oracle
    res = built.simulation(setting.app, setting.rps, setting.cluster, setting.config).run()
    labels = []
    for d in oracle.decisions:
        obs = d.observation
        if obs is None or not len(obs.services):
            continue
        own = intent_from_outputs(obs.services, *actor(obs.service, obs.global_))
        cap, col, glob = _targets(d, obs.services, own)
        cands = _candidate_arrays(d, obs.services, own)
        labels.append(Label(obs.service, obs.global_, cap, col, glob, _stakes(d), cands))
    costs = app_costs(setting.app, res.series, replace(cfg.objective, cpu_price=spec.cpu_price))
    learned_best = sum(d.best.label == "learned" for d in oracle.decisions)
    return LabelledEpisode(spec, labels, float(costs.mean()), learned_best, time.process_time() - t0)


def validate_episode(
    spec: EpisodeSpec,
    weights: dict[str, np.ndarray],
    norm: dict[str, Any],
    cfg: DaggerConfig,
    bundles_root: str | None = None,
) -> tuple[float, float]:
    """(objective per minute, CPU s) of episode ``spec`` with the learner alone, as served (``bundles_root``: where
    the stack's other bundles come from, :func:`policy.train.intent_episodes.episode_setting`)."""
    t0 = time.process_time()
    setting = episode_setting(spec, flat=cfg.flat, bundles_root=bundles_root)
    learner = LearnedIntent(
        IntentActor(actor_bundle(weights, norm, cfg.flat, cfg.hidden)), setting.featurizer, setting.workloads
    )
    built = episode_stack(setting, learner, spec.seed)
    res = built.simulation(setting.app, setting.rps, setting.cluster, setting.config).run()
    costs = app_costs(setting.app, res.series, replace(cfg.objective, cpu_price=spec.cpu_price))
    return float(costs.mean()), time.process_time() - t0


# ---- the fit -------------------------------------------------------------------------------------------------------


def _batch(labels: Sequence[Label]) -> tuple[torch.Tensor, ...]:
    B = len(labels)
    N = max(1, max(len(x.service) for x in labels))
    Fs = labels[0].service.shape[1]
    service = np.zeros((B, N, Fs), np.float32)
    mask = np.zeros((B, N), bool)
    cap = np.zeros((B, N), np.float32)
    col = np.ones((B, N), np.float32)
    for i, x in enumerate(labels):
        n = len(x.service)
        service[i, :n], mask[i, :n], cap[i, :n], col[i, :n] = x.service, True, x.capacity, x.colocation
    glob = np.stack([x.global_ for x in labels]).astype(np.float32)
    gt = np.stack([x.global_target for x in labels]).astype(np.float32)
    w = np.array([x.weight for x in labels], np.float64)
    med = float(np.median(w[w > 0])) if np.any(w > 0) else 1.0
    w = np.clip(w / max(med, 1e-9), 0.1, 10.0).astype(np.float32)
    return tuple(torch.as_tensor(a) for a in (service, mask, glob, cap, col, gt, w))


def imitation_loss(net: IntentNet, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """Weighted squared error between the squashed outputs of ``net`` and the labels, each output scaled by its
    range (capacity target 0.65 wide, co-location 2, global weights 3, move budget 1)."""
    service, mask, glob, cap, col, gt, w = batch
    z_s, z_g, _value = net(service, mask, glob)
    m = mask.to(z_s.dtype)
    n = m.sum(1).clamp_min(1.0)
    cap_hat = 0.3 + 0.65 * torch.sigmoid(z_s[..., 0])
    col_hat = 2.0 * torch.sigmoid(z_s[..., 1])
    g_hat = torch.sigmoid(z_g)
    l_cap = (((cap_hat - cap) / 0.65) ** 2 * m).sum(1) / n
    l_col = (((col_hat - col) / 2.0) ** 2 * m).sum(1) / n
    l_glob = ((g_hat[:, :2] - gt[:, :2] / 3.0) ** 2).sum(1) + (g_hat[:, 2] - gt[:, 2]) ** 2
    return (w * (l_cap + 0.25 * l_col + 0.25 * l_glob)).sum() / w.sum()


def _candidate_batch(labels: Sequence[Label], regret_clip: float) -> tuple[torch.Tensor, ...]:
    """The candidates of ``labels`` padded to (B, K, N) / (B, K, 3) / (B, K): capacity, co-location, global, regret
    (divided by the median stakes over ``labels``, clipped to ``regret_clip``) and the candidate mask (B, K). A label
    without candidates has its best intent as its one candidate (regret 0: no cost-sensitive signal)."""
    B = len(labels)
    N = max(1, max(len(x.service) for x in labels))
    K = max(1, max(len(x.candidates[3]) if x.candidates is not None else 1 for x in labels))
    cap = np.zeros((B, K, N), np.float32)
    col = np.ones((B, K, N), np.float32)
    glob = np.zeros((B, K, 3), np.float32)
    regret = np.zeros((B, K), np.float32)
    kmask = np.zeros((B, K), bool)
    for i, x in enumerate(labels):
        n = len(x.service)
        if x.candidates is None:
            cap[i, 0, :n], col[i, 0, :n], glob[i, 0], kmask[i, 0] = x.capacity, x.colocation, x.global_target, True
            continue
        c_cap, c_col, c_glob, c_reg = x.candidates
        k = len(c_reg)
        cap[i, :k, :n], col[i, :k, :n], glob[i, :k], regret[i, :k], kmask[i, :k] = c_cap, c_col, c_glob, c_reg, True
    w = np.array([x.weight for x in labels], np.float64)
    med = float(np.median(w[w > 0])) if np.any(w > 0) else 1.0
    regret = np.clip(regret / max(med, 1e-9), 0.0, regret_clip).astype(np.float32)
    return tuple(torch.as_tensor(a) for a in (cap, col, glob, regret, kmask))


def cost_loss(
    net: IntentNet, batch: tuple[torch.Tensor, ...], candidates: tuple[torch.Tensor, ...], temperature: float
) -> torch.Tensor:
    """The cost-sensitive loss of AggreVaTe (Ross and Bagnell 2014, "Reinforcement and imitation learning via
    interactive no-regret learning", arXiv 1406.5979), over the oracle's candidates: the network's intent at each
    state pays the candidates' regrets (their rollout cost over the horizon minus the best's), weighted by a softmax
    over −d_k / ``temperature``, d_k the intent's squared distance to candidate k scaled as in
    :func:`imitation_loss`. Unlike imitation, which averages the best candidates of similar states, this minimises
    what the choice costs on average: where the states do not tell a lean intent from a safe one, it takes the
    candidate whose mistakes cost least. Returns the mean over states."""
    service, mask, glob, _cap, _col, _gt, _w = batch
    c_cap, c_col, c_glob, regret, kmask = candidates
    z_s, z_g, _value = net(service, mask, glob)
    m = mask.to(z_s.dtype)[:, None, :]
    n = m.sum(2).clamp_min(1.0)
    cap_hat = (0.3 + 0.65 * torch.sigmoid(z_s[..., 0]))[:, None, :]
    col_hat = (2.0 * torch.sigmoid(z_s[..., 1]))[:, None, :]
    g_hat = torch.sigmoid(z_g)[:, None, :]
    d = (((cap_hat - c_cap) / 0.65) ** 2 * m).sum(2) / n
    d = d + 0.25 * (((col_hat - c_col) / 2.0) ** 2 * m).sum(2) / n
    d = d + 0.25 * (((g_hat[..., :2] - c_glob[..., :2] / 3.0) ** 2).sum(2) + (g_hat[..., 2] - c_glob[..., 2]) ** 2)
    logits = torch.where(kmask, -d / float(temperature), torch.full_like(d, -1e9))
    p = torch.softmax(logits, dim=1)
    return (p * regret).sum(1).mean()


@dataclass(frozen=True)
class FitOptions:
    """The loss of :func:`fit`: ``loss``, ``imitation_weight``, ``temperature``, ``regret_clip``, ``baseline`` (the
    tuned constant's capacity target and move budget, or None) and ``baseline_weight`` (as there)."""

    loss: str = "imitation"
    imitation_weight: float = 0.1
    temperature: float = 0.02
    regret_clip: float = 100.0
    baseline: tuple[float, float] | None = None
    baseline_weight: float = 0.0


def fit(net: IntentNet, labels: Sequence[Label], epochs: int, lr: float, options: FitOptions = FitOptions()) -> float:
    """``epochs`` full-batch Adam steps on ``labels`` (the actor's parameters only), by ``options``
    (:class:`FitOptions`): ``loss`` ``"imitation"``
    (:func:`imitation_loss`) or ``"cost"`` (:func:`cost_loss` + ``imitation_weight`` × :func:`imitation_loss`, the
    regrets in units of the median stakes, clipped to ``regret_clip``); plus, with ``baseline`` (the tuned constant's
    capacity target and move budget), ``baseline_weight`` × the imitation loss toward that constant intent at every
    state: the network stays with the baseline where the candidates' costs do not pull it away (SPIBB's principle,
    Laroche et al. 2019, arXiv 1712.06924, as a regularizer). Returns the final loss. Raises ValueError for another
    ``loss``."""
    loss, imitation_weight, temperature = options.loss, options.imitation_weight, options.temperature
    baseline, baseline_weight = options.baseline, options.baseline_weight
    if loss not in FIT_LOSSES:
        raise ValueError(f"loss: expected one of {', '.join(FIT_LOSSES)}, got {loss!r}")
    params = [p for p in net.actor_parameters() if p is not net.log_std]
    opt = torch.optim.Adam(params, lr=lr)
    batch = _batch(labels)
    cands = _candidate_batch(labels, options.regret_clip) if loss == "cost" else None
    prior = None
    if baseline is not None and baseline_weight > 0:
        service, mask, glob, cap, col, _gt, _w = batch
        gt = torch.tensor([[*default_intent(), float(baseline[1])]], dtype=cap.dtype).expand(len(cap), 3)
        prior = (service, mask, glob, torch.full_like(cap, float(baseline[0])), torch.ones_like(col), gt, _w * 0 + 1)
    value = torch.zeros(())
    for _ in range(epochs):
        value = imitation_loss(net, batch)
        if cands is not None:
            value = cost_loss(net, batch, cands, temperature) + imitation_weight * value
        if prior is not None:
            value = value + baseline_weight * imitation_loss(net, prior)
        opt.zero_grad()
        value.backward()
        opt.step()
    return float(value.detach())


def fit_student(
    net: IntentNet, labels: Sequence[Label], epochs: int, cfg: DaggerConfig, baseline: tuple[float, float] | None
) -> tuple[float, dict[str, float]]:
    """Fit ``net`` on ``labels`` by ``cfg.loss``: :func:`fit` for ``"cost"`` and ``"imitation"``; for ``"critic"``, a
    cost model of the intents fit on the labels' candidates (:func:`~policy.train.intent_critic.fit_critic`), then
    imitation of the intents it prefers (:func:`~policy.train.intent_critic.critic_intents`; the tuned constant
    ``baseline`` where its predicted gain is below ``cfg.critic_margin``; without a baseline, capacity 0.7 and no
    moves). Returns ``(final loss, extra figures for the progress rows)``."""
    if cfg.loss != "critic":
        return fit(net, labels, epochs, cfg.lr, cfg.fit_options(baseline)), {}
    norm = (net.s_mean.numpy(), net.s_std.numpy(), net.g_mean.numpy(), net.g_std.numpy())
    ccfg = cfg.critic()
    critics, critic_loss = fit_ensemble(labels, norm, ccfg, seed=cfg.seed)
    base = baseline if baseline is not None else (0.7, 0.0)
    targets = critic_intents(critics, labels, norm, base, ccfg)
    relabelled = [
        x._replace(capacity=t.capacity, colocation=t.colocation, global_target=t.global_target, weight=1.0)
        for x, t in zip(labels, targets)
    ]
    loss = fit(net, relabelled, epochs, cfg.lr, FitOptions(loss="imitation", imitation_weight=0.0))
    deviated = [t for t in targets if t.deviated]
    return loss, {
        "critic_loss": critic_loss,
        "critic_deviation_share": len(deviated) / max(1, len(targets)),
        "critic_mean_gain": float(np.mean([t.gain for t in deviated])) if deviated else 0.0,
    }


def _fit_normalization(net: IntentNet, labels: Sequence[Label]) -> None:
    s = np.concatenate([x.service for x in labels if len(x.service)])
    g = np.stack([x.global_ for x in labels])
    net.set_normalization(s.mean(0), s.std(0) + 1e-3, g.mean(0), g.std(0) + 1e-3)


def global_reach(net: IntentNet, labels: Sequence[Label], quantile: float = 1.0) -> float:
    """The ``quantile`` (in (0, 1]; 1: the largest) over ``labels``' states of the largest |z| of the normalized
    global row: how far out the training states went (the fallback's threshold for the global row)."""
    if not labels:
        return 0.0
    g = np.stack([x.global_ for x in labels])
    z = np.abs((g - net.g_mean.numpy()) / net.g_std.numpy()).max(axis=1)
    return float(np.quantile(z, quantile))


def service_reach(net: IntentNet, labels: Sequence[Label], quantile: float = 1.0) -> float:
    """The same over every service row of ``labels``' states (the largest |z| of a normalized service row): the
    fallback's threshold for one service's row."""
    rows = [x.service for x in labels if len(x.service)]
    if not rows:
        return 0.0
    s = np.concatenate(rows)
    z = np.abs((s - net.s_mean.numpy()) / net.s_std.numpy()).max(axis=1)
    return float(np.quantile(z, quantile))


def save_labels(path: str | Path, labels: Sequence[Label]) -> None:
    """Write ``labels`` (with their candidates) to the ``.npz`` archive ``path`` (:func:`load_labels` reads it), so
    that a fit can be redone without rolling out the oracle again."""
    n = np.array([len(x.service) for x in labels], np.int64)
    k = np.array([0 if x.candidates is None else len(x.candidates[3]) for x in labels], np.int64)
    cand = [x.candidates for x in labels if x.candidates is not None]
    Fs = labels[0].service.shape[1] if labels else 0

    def cat(parts: list[np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
        return np.concatenate(parts) if parts else np.zeros(shape, np.float32)

    np.savez_compressed(
        path,
        n_services=n,
        n_candidates=k,
        service=cat([x.service for x in labels], (0, Fs)),
        global_=np.stack([x.global_ for x in labels]) if labels else np.zeros((0, 0), np.float32),
        capacity=cat([x.capacity for x in labels], (0,)),
        colocation=cat([x.colocation for x in labels], (0,)),
        global_target=np.stack([x.global_target for x in labels]) if labels else np.zeros((0, 3), np.float32),
        weight=np.array([x.weight for x in labels], np.float64),
        cand_capacity=cat([c[0].ravel() for c in cand], (0,)),
        cand_colocation=cat([c[1].ravel() for c in cand], (0,)),
        cand_global=cat([c[2] for c in cand], (0, 3)),
        cand_regret=cat([c[3] for c in cand], (0,)),
    )


def load_labels(path: str | Path) -> list[Label]:
    """The labels :func:`save_labels` wrote to ``path``. Raises ValueError naming the file for an archive whose
    arrays do not add up."""
    with np.load(path, allow_pickle=False) as z:
        a = {key: z[key] for key in z.files}
    n, k = a["n_services"], a["n_candidates"]
    if len(a["service"]) != n.sum() or len(a["cand_regret"]) != k.sum() or len(a["cand_capacity"]) != (n * k).sum():
        raise ValueError(f"{path}: the label archive's arrays do not add up (a truncated or foreign file)")
    out: list[Label] = []
    so = ko = ckn = 0
    for i in range(len(n)):
        ni, ki = int(n[i]), int(k[i])
        cands = None
        if ki:
            size = ki * ni
            cands = (
                a["cand_capacity"][ckn : ckn + size].reshape(ki, ni),
                a["cand_colocation"][ckn : ckn + size].reshape(ki, ni),
                a["cand_global"][ko : ko + ki],
                a["cand_regret"][ko : ko + ki],
            )
            ckn += size
            ko += ki
        out.append(
            Label(
                a["service"][so : so + ni],
                a["global_"][i],
                a["capacity"][so : so + ni],
                a["colocation"][so : so + ni],
                a["global_target"][i],
                float(a["weight"][i]),
                cands,
            )
        )
        so += ni
    return out


# ---- the loop ------------------------------------------------------------------------------------------------------


def _predictor(bundles_root: str | Path | None, flat: bool) -> Path:
    """The workload predictor to ship with the intent: the staged root's (``make train`` trains it just before),
    else the committed one."""
    if bundles_root:
        p = Path(bundles_root) / ("hrl-no-encoder" if flat else "hrl-scheduler") / "high" / "predictor"
        if (p / "manifest.json").is_file():
            return p
    return PREDICTOR_BUNDLE


def _write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)


def _plot(rows: Sequence[dict[str, Any]], path: Path, constant: float | None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    ax.plot([r["cpu_minutes"] for r in rows], [r["validation_objective"] for r in rows], "o-", label="DAgger")
    if constant is not None:
        ax.axhline(constant, color="0.5", ls="--", label="tuned constant intent")
    ax.set_xlabel("CPU-minutes of training")
    ax.set_ylabel("validation cost per minute (lower is better)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def train_dagger(
    cfg: DaggerConfig = DaggerConfig(),
    out: str | Path | None = None,
    run_dir: str | Path | None = None,
    *,
    constant: dict[str, Any] | None = None,
    ray_address: str | None = None,
    bundles_root: str | Path | None = None,
    log: Callable[[str], None] = lambda m: print(m, file=sys.stderr),
    opts: RunOptions | None = None,
) -> tuple[IntentNet, dict[str, Any]]:
    """Train the high level by DAgger (module docstring); export the best validated iterate to ``out`` (None: no
    export). ``constant``: the tuned constant intent (``{"capacity_target", "move_budget_frac", "objective"}``,
    :mod:`policy.train.constant`) recorded in the bundle as the fallback; ``opts``
    (:class:`~policy.train.finetune.RunOptions`): ``opts.tensorboard``, ``progress.csv``'s rows as TensorBoard
    scalars ``dagger/<column>`` under that directory (:mod:`policy.train.tensorboard`); ``opts.init``: an
    ``intent-actor-v1`` bundle to start from (a fine-tune, :mod:`policy.train.finetune`): its actor and its input
    normalization, which stays fixed, and its fallback reach as a floor of the new one; ``opts.fine_tuned_from`` goes
    into the metadata and the version gets ``-ft``. ``opts.labels_from``: label archives of earlier runs (their
    ``labels.npz``, :func:`save_labels`): no oracle rollouts then, one fit of ``epochs × iterations`` steps on those
    labels (a refit with another loss; the archives are named in the metadata), validated and exported as usual.
    Raises ValueError when ``init``'s arrays differ in shape or an archive does not load. Returns (network,
    report)."""
    opts = opts or RunOptions()
    init, fine_tuned_from, labels_from = opts.init, opts.fine_tuned_from, opts.labels_from
    torch.set_num_threads(1)
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    run = Path(run_dir) if run_dir is not None else ROOT / "runs" / f"dagger-s{cfg.seed}"
    run.mkdir(parents=True, exist_ok=True)
    baseline = None
    if constant is not None:
        baseline = (float(constant["capacity_target"]), float(constant.get("move_budget_frac") or 0.0))
        if baseline[0] not in cfg.capacity_targets:  # the baseline's cost, known at every state
            cfg = replace(cfg, capacity_targets=tuple(sorted({*cfg.capacity_targets, baseline[0]})))
    t_start = time.perf_counter()
    cpu0 = time.process_time()
    # ---- build everything ----
    Fs = len(INTENT_SERVICE_SPEC_FLAT if cfg.flat else INTENT_SERVICE_SPEC)
    net = IntentNet(Fs, len(INTENT_GLOBAL_SPEC), cfg.hidden)
    if init is not None:  # a fine-tune: the trained actor and its (fixed) input normalization
        net.load_actor(init)
    board = open_board(opts.tensorboard, asdict(cfg))
    pool = TaskPool(cfg.workers, ray_address)
    broot = None if bundles_root is None else str(bundles_root)
    val_specs = sample_episode_specs(cfg, np.random.default_rng(10_000 + cfg.seed), cfg.eval_episodes, seed0=9_000_000)
    data: list[Label] = []
    rows: list[dict[str, Any]] = []
    task_cpu_s = 0.0
    best: tuple[float, dict[str, Any] | None] = (math.inf, None)
    archived = [x for f in labels_from for x in load_labels(f)]
    if labels_from and not archived:
        raise ValueError(f"labels: no label in {', '.join(map(str, labels_from))}")
    try:
        for it in range(1, (1 if archived else cfg.iterations) + 1):
            # ---- collect and label (or read the archives) ----
            epochs = cfg.epochs * cfg.iterations if archived else cfg.epochs
            beta = 0.0 if archived else cfg.beta * cfg.beta_decay ** (it - 1)
            eps: list[LabelledEpisode] = []
            if not archived:
                specs = sample_episode_specs(cfg, rng, cfg.episodes_per_iteration, seed0=it * 1000)
                eps = pool.map(
                    label_episode, specs, net.actor_arrays(), net.normalization(), beta, cfg, broot,
                    desc=f"dagger it {it}: labelled episodes",
                )  # fmt: skip
            task_cpu_s += sum(e.cpu_s for e in eps)
            new = archived or [x for e in eps for x in e.labels]
            if it == 1 and init is None:
                _fit_normalization(net, new)  # the inputs' normalization, fixed from here on (served == trained)
            # ---- aggregate and fit ----
            data.extend(new)
            loss, extra = fit_student(net, data, epochs, cfg, baseline)
            # ---- validate ----
            vals = pool.map(
                validate_episode, val_specs, net.actor_arrays(), net.normalization(), cfg, broot,
                desc=f"dagger it {it}: validation episodes",
            )  # fmt: skip
            task_cpu_s += sum(c for _o, c in vals)
            v = float(np.mean([o for o, _c in vals])) if vals else float("nan")
            row = {
                "iteration": it,
                "beta": round(beta, 4),
                "episodes": len(eps),
                "labels": len(data),
                "mixture_objective": float(np.mean([e.objective for e in eps])) if eps else float("nan"),
                "learned_best_share": float(sum(e.learned_best for e in eps) / max(1, len(new))),
                "fit_loss": loss,
                **extra,
                "validation_objective": v,
                "cpu_minutes": round(pool.cpu_s(task_cpu_s, cpu0) / 60.0, 2),
                "wall_s": round(time.perf_counter() - t_start, 1),
            }
            rows.append(row)
            board.row(it, row, "dagger")
            step = "refit" if archived else f"it {it}/{cfg.iterations}"
            log(
                f"dagger {step}: beta {beta:.2f}, {len(data)} labels, fit {loss:.4f}, validation {v:.3f}/min, "
                f"{row['cpu_minutes']:.0f} CPU-min"
            )
            if v < best[0]:
                best = (v, {k: t.detach().clone() for k, t in net.state_dict().items()})
    finally:
        pool.close()
        board.close()
    if best[1] is not None:
        net.load_state_dict(best[1])
    # ---- export ----
    _write_csv(run / "progress.csv", rows)
    save_labels(run / "labels.npz", data)
    _plot(rows, run / "learning_curve.png", None if constant is None else constant.get("objective"))
    reach = global_reach(net, data, cfg.fallback_quantile)
    s_reach = service_reach(net, data, cfg.fallback_quantile)
    if init is not None:  # the fine-tuned network was fit on the source's states too
        old = init.metadata.get("fallback") or {}
        reach = max(reach, float(old.get("global_z_max") or 0.0))
        s_reach = max(s_reach, float(old.get("service_z_max") or 0.0))
    meta = {
        "algorithm": "DAgger from the lookahead oracle (policy.train.dagger): imitation of the oracle's best intent",
        "objective": asdict(cfg.objective),
        "apps": list(cfg.apps),
        "synthetic_share": cfg.synthetic_share,
        "scenarios": list(cfg.scenarios) if cfg.scenario_share > 0 else [],
        "scenario_share": cfg.scenario_share,
        "iterations": cfg.iterations,
        "labels": len(data),
        "train_cpu_minutes": rows[-1]["cpu_minutes"] if rows else 0.0,
        "best_validation_cost": None if best[1] is None else best[0],
        "torch_version": torch.__version__,
        "loss": cfg.loss,
        "baseline_weight": cfg.baseline_weight,
        "labels_from": [str(f) for f in labels_from],
        "oracle_capacity_targets": list(cfg.capacity_targets),
        "synthetic_guaranteed_share": cfg.synthetic_guaranteed_share,
        "synthetic_guaranteed_shares": list(cfg.synthetic_guaranteed_shares),
        "fallback": {
            "quantile": cfg.fallback_quantile,
            "global_z_max": reach,
            "service_z_max": s_reach,
            **({} if cfg.lean_margin is None else {"lean_margin": cfg.lean_margin}),
            **({} if cfg.no_burst_lean_margin is None else {"no_burst_lean_margin": cfg.no_burst_lean_margin}),
            "capacity_target": None if constant is None else constant["capacity_target"],
            "move_budget_frac": None if constant is None else constant["move_budget_frac"],
        },
    }
    if not cfg.flat:  # the service rows' embeddings (intent_episodes.episode_setting reads the committed encoder)
        meta["encoder_version"] = GraphEncoder.load().version
    if fine_tuned_from:
        meta["fine_tuned_from"] = dict(fine_tuned_from)
    base = f"intent-dagger{'-flat' if cfg.flat else ''}-{time.strftime('%Y%m%d')}-s{cfg.seed}"
    base += "-ft" if fine_tuned_from else ""
    version = content_version(base, net.actor_arrays(), quick=cfg.quick)
    report = {"policy_version": version, "rows": rows, "run_dir": str(run), "config": json_ready(asdict(cfg))}
    if out is not None:
        install_intent_bundle(
            net,
            out,
            run / "staged-bundle",
            flat=cfg.flat,
            policy_version=version,
            metadata=meta,
            predictor=_predictor(bundles_root, cfg.flat),
        )
        log(f"dagger: {version}: bundle written to {out}")
    (run / "report.json").write_text(json.dumps(json_ready(report), indent=1) + "\n", encoding="utf-8")
    return net, report


#: The budget of a fine-tune (``train --all --fine-tune``; :mod:`policy.train.finetune`): fewer iterations,
#: episodes and fit steps than :class:`DaggerConfig`'s defaults.
FINE_TUNE: dict[str, Any] = {"iterations": 2, "episodes_per_iteration": 4, "epochs": 100, "eval_episodes": 4}

#: The high levels the ``dagger`` stage trains: stack → flat (no graph embeddings).
STACKS = (("hrl-scheduler", False), ("hrl-no-encoder", True))


def fine_tune_sources(fine_tune: FineTune, root: str | Path | None = None) -> dict[str, PolicyBundle]:
    """The source ``<stack>/high/intent`` bundle of every :data:`STACKS` entry, checked against what the stage builds:
    level, the service and global feature specifications, ``intent-actor-v1``, the hidden width and, where the
    source records it, the encoder version of the service rows (the committed encoder's). ``root`` is unused (the
    stage reads the committed encoder). Raises ValueError naming the bundle and the field."""
    out = {}
    encoder_version = None
    for stack, flat in STACKS:
        rel = f"{stack}/high/intent"
        expect: dict[str, Any] = {"dims.hidden": DaggerConfig().hidden}
        meta = _source_metadata(fine_tune.path(rel))
        if not flat and "encoder_version" in meta:
            encoder_version = encoder_version or GraphEncoder.load().version
            expect["metadata.encoder_version"] = encoder_version
        out[stack] = fine_tune.load(
            rel,
            stage="dagger",
            level="high",
            feature_spec={
                "service": INTENT_SERVICE_SPEC_FLAT if flat else INTENT_SERVICE_SPEC,
                "global": INTENT_GLOBAL_SPEC,
            },
            architecture_type=INTENT_ARCH,
            expect=expect,
        )
    return out


def _source_metadata(d: Path) -> dict[str, Any]:
    """The ``metadata`` of the manifest in ``d`` ({} when it cannot be read: :meth:`FineTune.load` reports that)."""
    try:
        m = json.loads((d / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    meta = m.get("metadata") if isinstance(m, dict) else None
    return meta if isinstance(meta, dict) else {}


def check_fine_tune(fine_tune: FineTune, root: str | Path) -> None:
    """Refuse (ValueError, one line) a source the ``dagger`` stage could not start from (:func:`fine_tune_sources`)."""
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
    """The ``dagger`` stage of ``make train`` (:mod:`policy.train.pipeline`): the high level of ``hrl-scheduler``
    (with embeddings) and of ``hrl-no-encoder`` (flat rows), over the staged ``root``'s low levels and with the
    constant the ``constant`` stage wrote there as their fallback, written to ``<root>/<stack>/high/{intent,
    predictor}``; on the episodes of ``target`` when given (:meth:`TrainingTarget.distribution`); ``tensorboard``:
    event files under ``<tensorboard>/dagger-<stack>``; ``fine_tune``: each starts from its intent bundle under that
    root (:func:`fine_tune_sources`, checked before any training) with the :data:`FINE_TUNE` budget (with ``quick``:
    the quick one). Returns the directories."""
    out = []
    sources = fine_tune_sources(fine_tune, root) if fine_tune is not None else {}
    constant = load_constant(Path(root) / "hrl-scheduler" / "high" / "constant.json")
    budget = QUICK if quick else (FINE_TUNE if fine_tune is not None else {})
    over = dict(budget, **(target.distribution() if target is not None else {}))
    for stack, flat in STACKS:
        cfg = DaggerConfig(seed=seed, flat=flat, **over)
        run_dir = ROOT / ("out/train" if quick else "runs") / f"dagger-{stack}"
        board = None if tensorboard is None else Path(tensorboard) / f"dagger-{stack}"
        train_dagger(
            cfg,
            Path(root) / stack / "high",
            run_dir,
            constant=constant,
            bundles_root=root,
            log=log,
            opts=RunOptions(
                tensorboard=board,
                init=sources.get(stack),
                fine_tuned_from=(
                    fine_tune.provenance(f"{stack}/high/intent", sources[stack]) if fine_tune is not None else None
                ),
            ),
        )
        out.append(str(Path(root) / stack / "high"))
    return out


def default_out(flat: bool) -> Path:
    """Where the committed bundle of the variant lives."""
    return DEFAULT_BUNDLES / ("hrl-no-encoder" if flat else "hrl-scheduler") / "high"


QUICK = {
    "iterations": 1,
    "episodes_per_iteration": 1,
    "episode_minutes": 10,
    "n_samples": 80,
    "eval_episodes": 1,
    "workers": 1,
    "horizon_min": 3,
    "capacity_targets": (0.6, 0.8),
    "coordinate_services": 0,
    "epochs": 20,
    "synthetic_share": 0.0,
    "quick": True,
}


def run_cli(args: Any) -> int:
    """The body of ``hrl-policy train dagger`` (options as there). Returns the exit status."""
    over: dict[str, Any] = dict(QUICK) if args.quick else {}
    for opt, name in (
        ("iterations", "iterations"),
        ("episodes", "episodes_per_iteration"),
        ("minutes", "episode_minutes"),
        ("horizon", "horizon_min"),
        ("workers", "workers"),
        ("loss", "loss"),
        ("baseline_weight", "baseline_weight"),
        ("random_candidates", "random_candidates"),
        ("critic_margin", "critic_margin"),
        ("eval_episodes", "eval_episodes"),
    ):
        v = getattr(args, opt, None)
        if v is not None:
            over[name] = v
    for opt, name in (("capacity_targets", "capacity_targets"), ("guaranteed_shares", "synthetic_guaranteed_shares")):
        text = getattr(args, opt, None)
        if text:
            try:
                over[name] = tuple(float(x) for x in str(text).split(","))
            except ValueError:
                flag = "--" + opt.replace("_", "-")
                raise ValueError(f"{flag}: expected comma-separated numbers, got {text!r}") from None
    if getattr(args, "synthetic_share", None) is not None:
        over["synthetic_share"] = args.synthetic_share
    target = TrainingTarget.from_flags(getattr(args, "app", None), getattr(args, "scenario", None))
    if target is not None:
        over.update(target.distribution())
    cfg = DaggerConfig(seed=args.seed, flat=args.flat, **over)
    stack = "hrl-no-encoder" if args.flat else "hrl-scheduler"
    suffix = "-quick" if args.quick else ""
    run_dir = Path(args.run_dir) if args.run_dir else ROOT / "runs" / f"dagger-{stack}{suffix}"
    # a --quick run, or one on your own app, never overwrites a committed bundle unless --out says so
    own = None if target is None else ROOT / "out" / "train" / target.name / "bundles" / stack / "high"
    out = Path(args.out) if args.out else (run_dir / "bundle" if args.quick else (own or default_out(args.flat)))
    constant = load_constant(args.constant) if args.constant else load_constant()
    _net, report = train_dagger(
        cfg,
        out,
        run_dir,
        constant=constant,
        ray_address=args.ray_address,
        log=note,
        opts=RunOptions(
            tensorboard=getattr(args, "tensorboard", None), labels_from=tuple(getattr(args, "labels", None) or ())
        ),
    )
    note(
        f"hrl-policy train dagger: {report['policy_version']}; bundle in {out}; "
        f"curve in {run_dir / 'learning_curve.png'}"
    )
    return 0
