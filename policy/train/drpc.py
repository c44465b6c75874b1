"""[torch] DRPC training (arXiv 2407.10169): the GRU workload predictor, then distributed TD3 autoscaling with a
central teacher on global state distilled into per-deployment students by imitation; export to the numpy
bundles :class:`policy.highlevel.DrpcAutoscaler` serves (``hrl-policy train drpc``).

One readable loop in the style of CleanRL's ``td3_continuous_action.py``; hyperparameters in
:class:`DrpcTrainConfig` (documented defaults), seeds, a progress bar with the running reward
(:func:`policy.telemetry.progress_bar`: JSON records under ``--log-format json``), a CSV log and PNG
learning curves under ``runs/`` (git-ignored).

**Environment.** Episodes of ``episode_minutes`` simulated minutes (:class:`policy.sim.engine.Simulation`, the
bench's cluster for the app, kube-scheduler's default profile) on a training app (``apps``), with a load
series from :func:`policy.train.forecast_data.training_series` (NASA / Twitter outside the evaluation windows,
bursty traces of other seeds), scaled so its peak asks U(``peak_range``) × the app's capacity at its
manifest replicas (the bench asks 1.25×). Every minute each autoscaled deployment is one agent.

**Observations.** Student: the deployment's local row (:data:`policy.highlevel.DRPC_SPEC` or ``HRL_SPEC``).
Teacher: that row ⊕ a pooled global summary — mean and max over all deployments' rows (the
:data:`~policy.highlevel.DRPC_SPEC` part), so any number of deployments fits — ⊕ :data:`GLOBAL_EXTRA` (the user
load's trend and forecast, the last minute's end-to-end p95 / SLO and failed share, the cluster's requested
CPU). Teacher actor and critic are per deployment on that input (one set of weights for all, as the students).

**Reward** of deployment i for minute t (:class:`DrpcReward`): the one objective of hrl-scheduler
(:mod:`policy.sim.objective`), split so the sum over agents is the team's objective and each agent's own action
moves only its own cost, plus two small per-agent shaping terms::

    r_i = −scale · ( objective cost without CPU (latency / SLO, SLO-violating minute, failed share)   (shared)
                     + cpu_price · requested cores_i / manifest cores (all autoscaled)               (own)
                     + refused · refused %_i + change · |Δ replicas_i| )                            (own)

**Learning.** Teacher: TD3 (:class:`policy.train.td3.TD3`) on the teacher input. Students: TD3 on the local rows with
the actor loss ``−Q/mean|Q| + imitation_weight · ‖π_s(local) − π_t(teacher input)‖²`` (the Q term normalised as
in TD3+BC, Fujimoto & Gu 2021, so the imitation weight is scale-free). Behaviour policy: the teacher with
Gaussian noise, and from ``student_from`` of the run on a growing share of episodes the student itself
(DAgger-style, so the students see their own states), up to ``student_share``.
"""

from __future__ import annotations

import csv
import json
import math
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from policy.baselines.kube_default import default_score_plugins
from policy.bundle import PolicyBundle, content_version
from policy.encoder import GraphEncoder
from policy.features import FeatureSpec
from policy.highlevel import (
    FORECAST_ARCH,
    FORECAST_SPEC,
    GruForecaster,
    forecast_errors,
    naive_forecast,
    normalize_windows,
)
from policy.highlevel.drpc import (
    DEFAULT_DRPC_BUNDLE,
    DEFAULT_HRL_HIGH_BUNDLE,
    DRPC_SPEC,
    SPECS,
    STUDENT_ARCH,
    ActionMapping,
    DrpcFeaturizer,
    DrpcState,
    mapping_json,
)
from policy.sim.app import load_app
from policy.sim.drpc import signals_from_sim
from policy.sim.engine import SimConfig, Simulation
from policy.sim.kube_scheduler import KubeSchedulerModel
from policy.sim.objective import MinuteOutcome, Objective
from policy.sim.sizing import capacity_rps, cluster_for
from policy.sim.stacks import autoscaled_workloads, terms_lookup
from policy.sim.traces import scale_to_peak
from policy.telemetry import note, progress_bar

from .episodes import TrainingTarget
from .finetune import FineTune, RunOptions
from .forecast_data import dataset, heldout_sets, training_series
from .pipeline import check_replaceable, install_dirs
from .td3 import TD3, Actor, ReplayBuffer, ReplayBufferSamples, TD3Config, WorkloadPredictor, imitation_loss
from .tensorboard import open_board

__all__ = [
    "json_ready",
    "PredictorConfig",
    "DrpcReward",
    "DrpcTrainConfig",
    "GLOBAL_EXTRA",
    "train_predictor",
    "export_predictor",
    "train_drpc",
    "export_student",
    "FINE_TUNE",
    "SOURCE_DIRS",
    "fine_tune_sources",
    "check_fine_tune",
    "train_stage",
    "run_cli",
]

ROOT = Path(__file__).resolve().parents[2]

#: The teacher's global features besides the pooled local rows.
GLOBAL_EXTRA = FeatureSpec.of(
    [
        ("user_trend_1m", "log(user rate now / 1 min ago), clipped to [-2, 2]"),
        ("user_forecast_ratio", "log(forecast peak of the user rate / now), clipped to [-2, 2]"),
        ("p95_slo", "end-to-end p95 / SLO, last minute, capped at 10, / 10"),
        ("failed_frac", "failed user requests / offered, last minute"),
        ("cpu_requested_frac", "cluster CPU requested / allocatable"),
        ("deployments", "autoscaled deployments / 50"),
    ]
)


# ---- the workload predictor -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PredictorConfig:
    """GRU predictor training: ``window`` minutes of history → ``horizon`` minutes ahead; ``hidden`` GRU
    width; ``epochs`` over the training windows (``stride`` minutes apart); Adam ``lr``; ``batch_size``;
    ``seed``. Huber loss (beta 0.1) on the window-mean-normalised rates (:mod:`policy.highlevel.forecast`),
    targets capped at 10 window means."""

    window: int = 30
    horizon: int = 5
    hidden: int = 32
    epochs: int = 10
    stride: int = 2
    batch_size: int = 512
    lr: float = 3e-3
    seed: int = 0


def train_predictor(
    cfg: PredictorConfig = PredictorConfig(), data=None, heldout=None, progress: bool = True
) -> tuple[WorkloadPredictor, dict[str, Any]]:
    """Train the predictor on :func:`policy.train.forecast_data.dataset` (or ``data``: a Windows of rates) and measure
    it on the held-out windows (``heldout``: name → Windows; default :func:`policy.train.forecast_data.heldout_sets`)
    against the last-value forecast. Returns (model, report): :func:`evaluate_predictor`'s errors, sizes and
    wall time."""
    torch.set_num_threads(1)
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    t0 = time.perf_counter()
    data = data if data is not None else dataset(cfg.window, cfg.horizon, cfg.stride)
    heldout = heldout if heldout is not None else heldout_sets(cfg.window, cfg.horizon, cfg.stride)
    xn, m = normalize_windows(data.x)
    # targets in units of the window mean, capped at 10 (a window of zeros before a jump would otherwise
    # dominate the squared error)
    yn = np.minimum(data.y / m[:, None], 10.0).astype(np.float32)
    X = torch.as_tensor(xn[:, :, None])
    Y = torch.as_tensor(yn)
    model = WorkloadPredictor(hidden=cfg.hidden, horizon=cfg.horizon, last_value_skip=True)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    steps = cfg.epochs * math.ceil(len(X) / cfg.batch_size)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, max(steps, 1))
    bar = progress_bar("drpc predictor", steps, "step", enabled=progress)
    for _epoch in range(cfg.epochs):
        order = rng.permutation(len(X))
        for k in range(0, len(X), cfg.batch_size):
            idx = torch.as_tensor(order[k : k + cfg.batch_size])
            loss = torch.nn.functional.smooth_l1_loss(model(X[idx]), Y[idx], beta=0.1)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            if bar.shown:
                bar.update(1)
                bar.set_postfix(loss=f"{loss.item():.4f}")
    bar.close()
    report = {
        "train_windows": int(len(X)),
        "heldout_windows": int(sum(len(w.x) for w in heldout.values())),
        "train_s": time.perf_counter() - t0,
        **evaluate_predictor(model, heldout, cfg.horizon),
    }
    return model, report


def evaluate_predictor(model: WorkloadPredictor, sets, horizon: int) -> dict[str, Any]:
    """Held-out errors of the model (``gru``) and of the last-value forecast (``naive``) per source of
    ``sets`` (name → Windows), and their mean WAPE over the sources (``gru_wape_mean``, ``naive_wape_mean``)."""
    out: dict[str, Any] = {}
    for name, windows in sets.items():
        xn, m = normalize_windows(windows.x)
        with torch.no_grad():
            pred = model(torch.as_tensor(xn[:, :, None])).numpy().clip(min=0.0) * m[:, None]
        out[name] = {
            "gru": forecast_errors(pred, windows.y),
            "naive": forecast_errors(naive_forecast(windows.x, horizon), windows.y),
        }
    out["gru_wape_mean"] = float(np.mean([v["gru"]["wape"] for v in out.values() if isinstance(v, dict)]))
    out["naive_wape_mean"] = float(np.mean([v["naive"]["wape"] for k, v in out.items() if isinstance(v, dict)]))
    return out


def export_predictor(
    model: WorkloadPredictor,
    cfg: PredictorConfig,
    path: str | Path,
    report: dict[str, Any] | None = None,
    *,
    quick: bool = False,
) -> PolicyBundle:
    """Write the predictor bundle (``level: high``, ``gru-forecast-v1``) to directory ``path``. Its
    ``policy_version`` is ``drpc-predictor-<date>-s<seed>[-quick]-<hash8>`` (:func:`policy.bundle.content_version`;
    ``quick``: a smoke-test run)."""
    weights = {k: v.detach().cpu().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    b = PolicyBundle(
        level="high",
        policy_version=content_version(f"drpc-predictor-{_today()}-s{cfg.seed}", weights, quick=quick),
        feature_spec={"rates": FORECAST_SPEC},
        dims={"window": cfg.window, "horizon": cfg.horizon, "hidden": cfg.hidden},
        architecture={
            "type": FORECAST_ARCH,
            "cell": "GRU",
            "layers": 1,
            **({"skip": "last_value"} if model.last_value_skip else {}),
        },
        weights=weights,
        metadata={
            "source": "arXiv 2407.10169 (DRPC) workload predictor; policy/train/drpc.py",
            "data": "NASA-HTTP and Twitter traces minus the evaluation windows ± 1 day (time split 80/20), "
            "synthetic bursty traces of training seeds 1-40 (held out: 9001-9010)",
            "config": asdict(cfg),
            "heldout": json_ready(report or {}),
        },
    )
    b.save(path)
    return b


# ---- DRPC autoscaling ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DrpcReward:
    """Weights of the per-deployment reward (module docstring): ``objective`` (:class:`policy.sim.objective.Objective`;
    its ``cpu_price`` per manifest-sized allocation-minute is split over the deployments by their requested cores),
    refused 0.2 per % refused at the deployment, change 0.02 per replica added or removed; the sum times ``scale``
    0.1 (keeps Q values of order 10)."""

    objective: Objective = field(default_factory=Objective)
    refused: float = 0.2
    change: float = 0.02
    scale: float = 0.1


#: Student name → (observation layout of :data:`policy.highlevel.SPECS`, distilled from the teacher?).
STUDENT_KINDS: dict[str, tuple[str, bool]] = {"drpc": ("drpc", True), "hrl": ("hrl", True), "hrl-td3": ("hrl", False)}


@dataclass(frozen=True)
class DrpcTrainConfig:
    """DRPC training hyperparameters.

    - ``apps``: training applications; ``students``: the students trained side by side on the same
      experience (:data:`STUDENT_KINDS`): ``drpc`` (local features only, distilled from the teacher → the DRPC
      baseline), ``hrl`` (+ the graph encoder's embeddings, distilled → the hierarchical policy's autoscaler),
      ``hrl-td3`` (embeddings, TD3 alone without teacher → the ``hrl-flat`` ablation);
    - ``total_minutes``: simulated minutes in all (environment steps; each gives one transition per
      deployment); ``episode_minutes`` per episode; ``peak_range``: the episode's peak load, × capacity;
      ``n_samples``: user requests sampled per simulated minute (latency percentiles);
    - ``td3``: TD3 hyperparameters (shared by teacher and students; ``learning_starts`` counts transitions);
      ``updates_per_minute``: gradient steps of the teacher and of each student per simulated minute;
    - ``imitation_weight``: weight of the distillation loss in the students' actor loss;
    - ``student_from`` / ``student_share``: from this fraction of the run, the students (with noise, taking
      turns) drive a share of episodes growing linearly to ``student_share``;
    - ``reward``: :class:`DrpcReward`; ``mapping``: the action mapping (:class:`policy.highlevel.ActionMapping`);
    - ``seed``; ``predictor``: its config (trained first unless a predictor bundle is given to
      :func:`train_drpc`);
    - ``eval_every``: every this many simulated minutes (and at the end), the teacher and each student act
      without noise on a fixed validation set (``eval_episodes`` per training app: training-trace windows of
      fixed seeds, peak 1.25× capacity as in the bench); each student is exported at its best validation
      reward (the learning curves show the whole history);
    - ``embedding_noise``: std of Gaussian noise added to the embedding columns of the ``hrl`` students'
      training inputs (the embeddings of the three training apps are few distinct points; the noise keeps
      the students from keying on them, which hurt apps never seen in training);
    - ``signal_dropout``: share of training episodes observed without service metrics (``signals=None``: rates
      from the call graph, latency and refusals unknown), as a descheduler without a mesh would serve;
    - ``quick``: a smoke-test run (``hrl-policy train drpc --quick``): its bundles' versions say ``-quick`` and,
      without explicit bundle directories, they go under the run directory, never to ``policy/bundles``.

    The defaults (30,000 simulated minutes) take about 11 minutes on one core of this machine, plus about
    30 s for the predictor.
    """

    apps: tuple[str, ...] = ("online-boutique", "sock-shop", "dsb-hotel-reservation")
    students: tuple[str, ...] = ("drpc", "hrl")
    total_minutes: int = 30_000
    episode_minutes: int = 40
    peak_range: tuple[float, float] = (1.0, 1.5)
    n_samples: int = 300
    td3: TD3Config = TD3Config(
        gamma=0.9,
        tau=0.01,
        exploration_noise=0.25,
        batch_size=256,
        learning_starts=3_000,
        buffer_size=200_000,
        hidden=64,
        actor_lr=3e-4,
        critic_lr=1e-3,
        actor_q_normalization=True,
    )
    updates_per_minute: int = 2
    imitation_weight: float = 2.5
    student_from: float = 0.3
    student_share: float = 0.5
    reward: DrpcReward = DrpcReward()
    mapping: ActionMapping = ActionMapping()
    seed: int = 0
    predictor: PredictorConfig = PredictorConfig()
    eval_every: int = 3_000
    eval_episodes: int = 2
    embedding_noise: float = 0.25
    signal_dropout: float = 0.2
    quick: bool = False

    def __post_init__(self) -> None:
        if (
            not self.students
            or any(s not in STUDENT_KINDS for s in self.students)
            or len(set(self.students)) != len(self.students)
        ):
            raise ValueError(
                f"students: expected distinct names among {', '.join(STUDENT_KINDS)}, got {self.students!r}"
            )
        if not self.apps:
            raise ValueError("apps: at least one training application")
        if self.total_minutes < 1 or self.episode_minutes < 2:
            raise ValueError(
                f"total_minutes >= 1 and episode_minutes >= 2, got {self.total_minutes}, {self.episode_minutes}"
            )
        if self.seed < 0:
            raise ValueError(f"seed: expected an integer >= 0, got {self.seed}")

    @property
    def feature_layout(self) -> str:
        """The layout the featurizer computes: ``hrl`` when any student needs embeddings (the ``drpc`` rows
        are its first columns), else ``drpc``."""
        return "hrl" if any(STUDENT_KINDS[s][0] == "hrl" for s in self.students) else "drpc"


def _today() -> str:
    return datetime.now(UTC).strftime("%Y%m%d")


def json_ready(v: Any) -> Any:
    """``v`` for :func:`json.dumps`: dict keys as strings, tuples as lists, numpy scalars as Python numbers,
    non-finite floats as None (JSON has no NaN)."""
    if isinstance(v, dict):
        return {str(k): json_ready(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_ready(x) for x in v]
    if isinstance(v, (np.floating, np.integer)):
        return v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


class _Episode:
    """One training episode: the simulation, the featurizer's state and the teacher's global extras."""

    def __init__(
        self,
        cfg: DrpcTrainConfig,
        rng: np.random.Generator,
        forecaster: GruForecaster,
        encoder,
        episode: int,
        app_name: str | None = None,
        peak: float | None = None,
    ):

        self.app_name = app_name or str(rng.choice(cfg.apps))
        app = _APP_CACHE.get(self.app_name)
        if app is None:
            app = _APP_CACHE[self.app_name] = load_app(self.app_name)
        self.app = app
        self.trace, counts = training_series(rng, cfg.episode_minutes)
        peak = float(rng.uniform(*cfg.peak_range)) if peak is None else peak
        self.rps = scale_to_peak(counts, peak * capacity_rps(app))
        cluster = cluster_for(app)
        sched = KubeSchedulerModel(plugins=default_score_plugins(terms_lookup(app)))
        self.sim = Simulation(
            app,
            self.rps,
            cluster,
            sched,
            SimConfig(minutes=cfg.episode_minutes, seed=100_000 + episode, n_samples=cfg.n_samples),
        )
        self.workloads = autoscaled_workloads(app)
        self.featurizer = DrpcFeaturizer(forecaster, cfg.feature_layout, cfg.mapping, app.slo_p95_ms, encoder)
        self.state = DrpcState()
        self.user_hist: list[float] = []
        wl = {w: self.sim.cluster.workload_infos[w] for w in self.workloads}
        self.manifest_cores = sum(w.replicas * w.pod_requests.cpu_m for w in wl.values()) / 1000.0
        self.app_manifest_cores = sum(w.replicas * w.pod_requests.cpu_m for w in app.workloads) / 1000.0
        self.request_cores = {k: w.pod_requests.cpu_m / 1000.0 for k, w in wl.items()}
        self.alloc_cores = float(sum(self.sim.node_cores))
        self.forecaster = forecaster
        self.use_signals = app_name is not None or rng.random() >= cfg.signal_dropout

    def global_extra(self) -> np.ndarray:
        sim = self.sim
        last = sim.last
        lam = float(last.rps) if last is not None else float(self.rps[0])
        self.user_hist.append(lam)
        h = self.user_hist[-self.forecaster.window :]
        prev = h[-2] if len(h) >= 2 else h[-1]
        peak = float(self.forecaster.predict(np.array([h])).max())
        slo = self.app.slo_p95_ms
        if last is not None:
            p95 = last.p95_ms if math.isfinite(last.p95_ms) else 10 * slo
            failed = last.failed / last.offered if last.offered > 0 else 0.0
        else:
            p95, failed = 0.0, 0.0
        req = (
            sum(p.info.requests.cpu_m for p in sim.cluster.live_pods() if p.node >= 0 and not sim.is_background(p))
            / 1000.0
        )
        return np.array(
            [
                np.clip(math.log((lam + 1e-6) / (prev + 1e-6)), -2, 2),
                np.clip(math.log((peak + 1e-6) / (lam + 1e-6)), -2, 2),
                min(p95 / slo, 10.0) / 10.0,
                failed,
                req / max(self.alloc_cores, 1e-9),
                len(self.workloads) / 50.0,
            ],
            dtype=np.float32,
        )

    def deployment_cores(self) -> np.ndarray:
        cnt = dict.fromkeys(self.workloads, 0)
        for p in self.sim.cluster.live_pods():
            if p.node >= 0 and p.workload in cnt:
                cnt[p.workload] += 1
        return np.array([cnt[w] * self.request_cores[w] for w in self.workloads])


_APP_CACHE: dict[str, Any] = {}


def teacher_input(local: np.ndarray, extra: np.ndarray) -> np.ndarray:
    """(N, F) local rows + (G,) extras → (N, F + 2·len(DRPC_SPEC) + G): row ⊕ mean ⊕ max of the DRPC part ⊕ extras."""
    base = local[:, : len(DRPC_SPEC)]
    pooled = np.concatenate([base.mean(axis=0), base.max(axis=0), extra]).astype(np.float32)
    return np.concatenate([local, np.repeat(pooled[None, :], len(local), axis=0)], axis=1)


def _reward(
    ep: _Episode, st, cores: np.ndarray, refused_pct: np.ndarray, changes: np.ndarray, w: DrpcReward
) -> tuple[np.ndarray, float]:
    mean = float(st.latency_ms.mean()) if len(st.latency_ms) else math.inf
    shared = float(
        replace(w.objective, cpu_price=0.0).costs(
            MinuteOutcome(mean, st.p95_ms, st.failed, st.offered, 0.0), ep.app.slo_p95_ms, 1.0
        )[0]
    )
    own = w.objective.cpu_price * cores / max(ep.manifest_cores, 1e-9) + w.refused * refused_pct + w.change * changes
    return -w.scale * (shared + own), shared


class Transition(NamedTuple):
    """One decision minute of an episode, one row per autoscaled deployment (N of them): ``local`` (N, F) and
    ``teacher_obs`` (N, FT) the observations the action was taken on (:func:`teacher_input`), ``action`` (N, 1)
    in [-1, 1], ``reward`` (N,) (:class:`DrpcReward`), ``next_local`` (N, F) and ``next_teacher_obs`` (N, FT)
    one simulated minute later."""

    local: np.ndarray
    teacher_obs: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    next_local: np.ndarray
    next_teacher_obs: np.ndarray


class MinuteResult(NamedTuple):
    """What :func:`_episode_minutes` yields after each simulated minute with a decision: ``transition``, the
    previous minute's decision with its outcome (None after the first decision), ``reward``: this minute's
    reward, mean over deployments, and ``shared``: its shared QoS cost (before ``−scale``)."""

    transition: Transition | None
    reward: float
    shared: float


def _episode_minutes(ep: _Episode, cfg: DrpcTrainConfig, act) -> Iterator[MinuteResult]:
    """Run one episode with ``act(local (N, F), teacher input (N, FT)) -> (N,) actions``, yielding a
    :class:`MinuteResult` after every simulated minute but the first (which only starts the load); the caller
    runs between minutes (the training loop stores the transition and updates the networks there). The run's
    metrics are ``ep.sim.result().metrics`` once the generator is exhausted."""
    sim = ep.sim
    sim.start()
    prev = None
    for m in range(cfg.episode_minutes):
        sim.begin_minute()
        if m == 0:
            ep.global_extra()
            sim.finish_minute()
            continue
        snap = sim.observe()
        obs = ep.featurizer.observe(snap, ep.state, signals_from_sim(sim) if ep.use_signals else None, ep.workloads)
        aug = teacher_input(obs.local, ep.global_extra())
        transition = None if prev is None else Transition(*prev, obs.local, aug)
        a = act(obs.local, aug)
        before = obs.replicas.copy()
        targets = ep.featurizer.targets(obs, a, ep.state, snap.taken_at_s)
        for k, n in targets.items():
            if n != int(sim.cluster.replicas[k]):
                sim.scale(k, n)
        changes = np.abs(np.array([targets[k] for k in obs.keys]) - before).astype(np.float64)
        st = sim.finish_minute()
        sig = signals_from_sim(sim)
        svc = [sim.cluster.workload_infos[k].service for k in obs.keys]
        refused = np.array([100.0 * ((sig.get(x).refused_frac or 0.0) if sig.get(x) else 0.0) for x in svc])
        r, shared = _reward(ep, st, ep.deployment_cores(), refused, changes, cfg.reward)
        prev = (obs.local, aug, a.reshape(-1, 1), r)
        yield MinuteResult(transition, float(r.mean()), shared)


def _rollout(ep: _Episode, cfg: DrpcTrainConfig, act) -> tuple[list[float], list[float], dict]:
    """Run one whole episode (:func:`_episode_minutes`) without learning. Returns (mean reward per minute,
    shared QoS cost per minute, the run's metrics)."""
    minutes = list(_episode_minutes(ep, cfg, act))
    return [m.reward for m in minutes], [m.shared for m in minutes], ep.sim.result().metrics


def export_student(
    actor: Actor, name: str, cfg: DrpcTrainConfig, path: str | Path, metadata: dict[str, Any]
) -> PolicyBundle:
    """Write student ``name``'s bundle (``level: high``, ``drpc-student-v1``, feature spec ``local`` = its
    layout's spec) to directory ``path``; ``policy_version`` ``drpc-student-<name>-<date>-s<seed>[-quick]-<hash8>``
    (:func:`policy.bundle.content_version`; ``-ft`` before the digest when ``metadata`` has ``fine_tuned_from``)."""
    weights = {k: v.detach().cpu().numpy().astype(np.float32) for k, v in actor.state_dict().items()}
    spec, distilled = STUDENT_KINDS[name]
    fs = SPECS[spec]
    ft = "-ft" if "fine_tuned_from" in metadata else ""
    b = PolicyBundle(
        level="high",
        policy_version=content_version(f"drpc-student-{name}-{_today()}-s{cfg.seed}{ft}", weights, quick=cfg.quick),
        feature_spec={"local": fs},
        dims={"hidden": cfg.td3.hidden, "layers": 2, "obs": len(fs), "action": 1},
        architecture={"type": STUDENT_ARCH, "activation": "relu", "output": "tanh"},
        weights=weights,
        action_bounds={"low": [-1.0], "high": [1.0]},
        metadata={
            "source": "arXiv 2407.10169 (DRPC) student actor, TD3 + imitation of a global teacher; "
            "policy/train/drpc.py",
            "spec": spec,
            "student": name,
            "distilled": distilled,
            "action_mapping": mapping_json(cfg.mapping),
            **json_ready(metadata),
        },
    )
    b.save(path)
    return b


#: Where each student's bundle goes by default (the predictor is written next to it, in ``predictor/``).
DEFAULT_BUNDLE_DIRS: dict[str, Path] = {
    "drpc": DEFAULT_DRPC_BUNDLE,
    "hrl": DEFAULT_HRL_HIGH_BUNDLE,
    "hrl-td3": DEFAULT_HRL_HIGH_BUNDLE.parent.parent / "hrl-flat" / "high",
}


def check_apps(apps: Sequence[str]) -> None:
    """Load every training app (cached for the episodes); raises ``ValueError`` naming an unknown one."""
    for name in apps:
        if name not in _APP_CACHE:
            _APP_CACHE[name] = load_app(name)


# ---- the pieces of train_drpc --------------------------------------------------------------------------------


def _resolve_bundle_dirs(cfg: DrpcTrainConfig, out: Path, bundle_dirs: dict[str, str | Path] | None) -> dict[str, Path]:
    """Each student's bundle directory: ``bundle_dirs`` or :data:`DEFAULT_BUNDLE_DIRS` (with ``cfg.quick`` the
    same layout under ``<out>/bundles``). Raises ``ValueError`` when two students share a directory or one
    holds files that are not a bundle (:func:`policy.train.pipeline.check_replaceable`)."""
    dirs = {k: Path(v) for k, v in (bundle_dirs or {}).items()}
    for sname in cfg.students:
        dirs.setdefault(
            sname,
            out / "bundles" / DEFAULT_BUNDLE_DIRS[sname].relative_to(DEFAULT_DRPC_BUNDLE.parent)
            if cfg.quick
            else DEFAULT_BUNDLE_DIRS[sname],
        )
    dirs = {k: v for k, v in dirs.items() if k in cfg.students}
    resolved = [d.resolve() for d in dirs.values()]
    if len(set(resolved)) != len(resolved):
        raise ValueError(f"bundle_dirs: expected a directory per student, got {', '.join(map(str, dirs.values()))}")
    check_replaceable(list(dirs.values()))
    return dirs


def _predictor_bundle(predictor: GruForecaster | PolicyBundle | str | Path | None) -> PolicyBundle | None:
    """The given predictor as a bundle (checked to be one before any training), or None: train one."""
    if isinstance(predictor, GruForecaster):
        return predictor.bundle
    if predictor is None:
        return None
    pb = predictor if isinstance(predictor, PolicyBundle) else PolicyBundle.load(predictor)
    GruForecaster(pb)  # refuses a bundle that is not a predictor, before training
    return pb


def _graph_encoder(cfg: DrpcTrainConfig, encoder: Any) -> Any:
    """The graph encoder the ``hrl`` layout reads (``encoder``: a GraphEncoder, a bundle directory or None for the
    committed one); None when no student needs embeddings."""
    if cfg.feature_layout != "hrl":
        return None

    return (
        encoder
        if isinstance(encoder, GraphEncoder)
        else (GraphEncoder.load() if encoder is None else GraphEncoder.load(encoder))
    )


class _Imitation:
    """DRPC's distillation term of a student's actor loss on a batch ``b`` (:class:`ReplayBufferSamples`):
    ``weight · ‖π_s(b.observations) − π_t(b.teacher_observations)‖²``
    (:func:`policy.train.td3.imitation_loss`; the teacher's action is a fixed target). Each unweighted value is
    appended to ``log``."""

    def __init__(self, teacher: Actor, student: Actor, weight: float, log: list[float]):
        self.teacher, self.student, self.weight, self.log = teacher, student, weight, log

    def __call__(self, b: ReplayBufferSamples) -> torch.Tensor:
        with torch.no_grad():
            target = self.teacher(b.teacher_observations)
        loss = imitation_loss(self.student, b.observations, target)
        self.log.append(float(loss.detach()))
        return self.weight * loss


class _Agents:
    """The teacher (TD3 on the teacher input, FT columns) and the students (TD3 on the first ``dims[name]``
    columns of the local row), with their recent losses (``losses``: ``teacher_critic``, ``<student>_critic``,
    ``<student>_imitation``)."""

    def __init__(self, cfg: DrpcTrainConfig, F: int, FT: int):
        self.cfg = cfg
        # torch.manual_seed inside each TD3: the teacher with cfg.seed, student k with cfg.seed + 7 + k
        self.teacher = TD3(FT, 1, cfg.td3, seed=cfg.seed)
        self.students = {
            sname: TD3(len(SPECS[STUDENT_KINDS[sname][0]]), 1, cfg.td3, seed=cfg.seed + 7 + k)
            for k, sname in enumerate(cfg.students)
        }
        self.dims = {sname: len(SPECS[STUDENT_KINDS[sname][0]]) for sname in cfg.students}
        self.emb_cols = slice(len(DRPC_SPEC), F)  # the encoder's embedding columns of the hrl layout
        self.losses: dict[str, list[float]] = {
            "teacher_critic": [],
            **{f"{k}_critic": [] for k in self.students},
            **{f"{k}_imitation": [] for k in self.students},
        }
        self.imitations = {
            k: _Imitation(self.teacher.actor, s.actor, cfg.imitation_weight, self.losses[f"{k}_imitation"])
            if STUDENT_KINDS[k][1]
            else None
            for k, s in self.students.items()
        }

    def actor_fn(self, name: str, noise: np.random.Generator | None):
        """``act(local (N, F), teacher input (N, FT)) -> (N,)`` of ``name`` (``teacher`` or a student), with
        Gaussian exploration noise drawn from ``noise`` (None: greedy)."""
        if name == "teacher":
            return lambda local, aug: self.teacher.act(aug, noise).reshape(-1)
        d = self.dims[name]
        return lambda local, aug: self.students[name].act(local[:, :d], noise).reshape(-1)

    def update(self, b: ReplayBufferSamples) -> None:
        """One TD3 step of the teacher on the teacher input, then one of each student on its columns of the
        local rows (the ``hrl`` students' embedding columns with Gaussian noise of std ``embedding_noise``),
        plus the imitation term for the distilled students."""
        cfg = self.cfg
        tb = b._replace(observations=b.teacher_observations, next_observations=b.next_teacher_observations)
        self.losses["teacher_critic"].append(self.teacher.update(tb)["critic_loss"])
        for sname, student in self.students.items():
            d = self.dims[sname]
            o, no = b.observations[:, :d], b.next_observations[:, :d]
            if d > len(DRPC_SPEC) and cfg.embedding_noise > 0:
                o, no = o.clone(), no.clone()
                o[:, self.emb_cols] += cfg.embedding_noise * torch.randn_like(o[:, self.emb_cols])
                no[:, self.emb_cols] += cfg.embedding_noise * torch.randn_like(no[:, self.emb_cols])
            sb = b._replace(observations=o, next_observations=no)
            self.losses[f"{sname}_critic"].append(
                student.update(sb, extra_actor_loss=self.imitations[sname])["critic_loss"]
            )

    def recent_losses(self) -> dict[str, float | None]:
        """``<name>_loss``: the mean of the last 200 values of each loss (None before the first update); then
        keeps only the last 400 of each."""
        row = {f"{k}_loss": float(np.mean(v[-200:])) if v else None for k, v in self.losses.items()}
        for v in self.losses.values():
            del v[:-400]
        return row

    def checkpoint(self) -> dict[str, Any]:
        """Every network's state_dict and the config (``checkpoint.pt``)."""
        cfg = self.cfg
        return {
            "teacher_actor": self.teacher.actor.state_dict(),
            "teacher_critic": self.teacher.critic.state_dict(),
            **{f"{k}_actor": v.actor.state_dict() for k, v in self.students.items()},
            **{f"{k}_critic": v.critic.state_dict() for k, v in self.students.items()},
            "config": json_ready(asdict(cfg)),
        }


def teacher_from_student(weights: dict[str, np.ndarray], teacher_obs_dim: int) -> dict[str, np.ndarray]:
    """A teacher actor's arrays that act as the student of ``weights`` (a ``drpc-student-v1`` bundle's, first layer
    ``net.0.weight`` (hidden, d)): the first layer widened to (hidden, ``teacher_obs_dim``) with zeros beyond the
    first d columns (the teacher input starts with the local row, :func:`teacher_input`), the other arrays as they
    are. Raises ValueError when the student has more inputs than the teacher."""
    out = {k: np.asarray(v, np.float32).copy() for k, v in weights.items()}
    w0 = out["net.0.weight"]
    if w0.shape[1] > teacher_obs_dim:
        raise ValueError(f"teacher_from_student: the student has {w0.shape[1]} inputs, the teacher {teacher_obs_dim}")
    wide = np.zeros((w0.shape[0], teacher_obs_dim), np.float32)
    wide[:, : w0.shape[1]] = w0
    out["net.0.weight"] = wide
    return out


def _start_from(agents: _Agents, bundles: dict[str, PolicyBundle], F: int, FT: int) -> None:
    """A fine-tune's start: each student's actor from its bundle; the teacher from the widest student bundle (a
    distilled one first), through :func:`teacher_from_student`."""
    for name, b in bundles.items():
        try:
            agents.students[name].load_actor(dict(b.weights))
        except ValueError as exc:
            raise ValueError(f"{b.where}: {exc}") from None
    widest = max(bundles, key=lambda n: (agents.dims[n], STUDENT_KINDS[n][1]))
    agents.teacher.load_actor(teacher_from_student(dict(bundles[widest].weights), FT))


def _store(buf: ReplayBuffer, t: Transition) -> None:
    """One buffer row per deployment (never ``done``: episodes end by a time limit, not a terminal state)."""
    for local, aug, a, r, next_local, next_aug in zip(*t):
        buf.add(local, a, r, next_local, 0.0, teacher_obs=aug, next_teacher_obs=next_aug)


def _driver(cfg: DrpcTrainConfig, minutes_done: int, rng: np.random.Generator) -> str:
    """Who drives the next episode: the teacher, or from ``student_from`` of the run with a probability growing
    linearly to ``student_share`` a student chosen at random (DAgger-style)."""
    frac = minutes_done / cfg.total_minutes
    share = (
        0.0
        if frac < cfg.student_from
        else cfg.student_share * (frac - cfg.student_from) / max(1e-9, 1.0 - cfg.student_from)
    )
    return str(rng.choice(cfg.students)) if rng.random() < share else "teacher"


def _cpu_vs_manifest(ep: _Episode, cfg: DrpcTrainConfig, metrics: dict) -> float:
    """The episode's requested CPU core-hours over those of the app's manifests for the same time."""
    return metrics["cpu_core_hours"] / max(ep.app_manifest_cores * cfg.episode_minutes / 60.0, 1e-9)


class _Validation:
    """The fixed validation set (``eval_episodes`` per training app, training-trace windows of fixed seeds at
    peak 1.25× capacity, their own rngs, never the training stream's), its rows (``validation.csv``) and each
    student's best actor weights so far."""

    def __init__(self, cfg: DrpcTrainConfig, forecaster: GruForecaster, encoder: Any):
        self.cfg, self.forecaster, self.encoder = cfg, forecaster, encoder
        self.specs = [(app, 9_000_000 + 97 * k + j) for j, app in enumerate(cfg.apps) for k in range(cfg.eval_episodes)]
        self.rows: list[dict[str, Any]] = []
        self.best: dict[str, tuple[float, dict[str, torch.Tensor]]] = {}

    def run(self, agents: _Agents, minutes: int) -> None:
        """The teacher and each student act without noise on every validation episode; a row per policy
        (mean reward per deployment-minute, failed %, CPU vs manifests); keeps a student's weights when its
        reward beats its best."""
        cfg = self.cfg
        for name in ["teacher", *agents.students]:
            rewards, failed, cpu = [], [], []
            for app, seed in self.specs:
                ep = _Episode(
                    cfg, np.random.default_rng(seed), self.forecaster, self.encoder, seed, app_name=app, peak=1.25
                )
                r, _shared, res = _rollout(ep, cfg, agents.actor_fn(name, None))
                rewards.append(float(np.mean(r)) if r else 0.0)
                failed.append(res["failed_pct"])
                cpu.append(_cpu_vs_manifest(ep, cfg, res))
            score = float(np.mean(rewards))
            self.rows.append(
                {
                    "minutes": minutes,
                    "policy": name,
                    "reward": score,
                    "failed_pct": float(np.mean(failed)),
                    "cpu_vs_manifest": float(np.mean(cpu)),
                }
            )
            if name in agents.students and (name not in self.best or score > self.best[name][0]):
                self.best[name] = (
                    score,
                    {k: v.detach().clone() for k, v in agents.students[name].actor.state_dict().items()},
                )

    def restore_best(self, agents: _Agents) -> None:
        """Load each validated student's best actor weights (the ones exported)."""
        for name, (_score, sd) in self.best.items():
            agents.students[name].actor.load_state_dict(sd)

    def selected(self) -> dict[str, Any]:
        """``validation_reward`` and ``selected_at_minutes`` of each student's exported weights (bundle metadata)."""
        return {
            "validation_reward": {k: v[0] for k, v in self.best.items()},
            "selected_at_minutes": {
                k: max((r["minutes"] for r in self.rows if r["policy"] == k and r["reward"] == v[0]), default=None)
                for k, v in self.best.items()
            },
        }


def _episode_row(
    episode: int,
    minutes: int,
    wall_s: float,
    ep: _Episode,
    driver: str,
    rewards: list[float],
    shared: list[float],
    running: float,
    metrics: dict,
    cfg: DrpcTrainConfig,
) -> dict[str, Any]:
    """The episode's ``progress.csv`` row (before its ``<loss>_loss`` columns)."""
    return {
        "episode": episode,
        "minutes": minutes,
        "wall_s": round(wall_s, 2),
        "app": ep.app_name,
        "trace": ep.trace,
        "driver": driver,
        "reward": float(np.mean(rewards)) if rewards else 0.0,
        "running_reward": running,
        "qos_cost": float(np.mean(shared)) if shared else 0.0,
        "latency_p95_ms": metrics["latency_p95_ms"],
        "failed_pct": metrics["failed_pct"],
        "cpu_core_hours": metrics["cpu_core_hours"],
        "cpu_vs_manifest": _cpu_vs_manifest(ep, cfg, metrics),
    }


def _write_run(
    out: Path,
    staged: dict[str, Path],
    dirs: dict[str, Path],
    cfg: DrpcTrainConfig,
    agents: _Agents,
    validation: _Validation,
    rows: list[dict[str, Any]],
    meta: dict[str, Any],
    report: dict[str, Any],
    summary: dict[str, Any],
    plots: bool,
    student_meta: dict[str, dict[str, Any]] | None = None,
) -> None:
    """Export each student to ``<staged>/student`` (bundle metadata ``meta``, plus ``student_meta[name]``), then
    write ``checkpoint.pt``, ``progress.csv``, ``validation.csv``, ``learning_curves.png`` (``plots``) and
    ``report.json`` under ``out``; ``report`` gets the validation rows, ``summary``, the students' versions and the
    directories."""
    extra = student_meta or {}
    versions = {
        sname: export_student(
            student.actor, sname, cfg, staged[sname] / "student", {**meta, **extra.get(sname, {})}
        ).policy_version
        for sname, student in agents.students.items()
    }
    torch.save(agents.checkpoint(), out / "checkpoint.pt")
    _write_csv(out / "progress.csv", rows)
    _write_csv(out / "validation.csv", validation.rows)
    report["validation"] = validation.rows
    report.update(
        {
            **summary,
            "student_versions": versions,
            "bundle_dirs": {k: str(v) for k, v in dirs.items()},
            "run_dir": str(out),
        }
    )
    if plots and rows:
        report["plot"] = str(_plot(rows, out / "learning_curves.png", validation.rows))
    (out / "report.json").write_text(json.dumps(json_ready(report), indent=1) + "\n", encoding="utf-8")


def _staging(cfg: DrpcTrainConfig, out: Path, dirs: dict[str, Path]) -> dict[str, Path]:
    """Make the run and bundle directories and an empty ``<out>/staged-bundles``; returns student → staged dir."""
    out.mkdir(parents=True, exist_ok=True)
    for d in dirs.values():
        d.parent.mkdir(parents=True, exist_ok=True)
    staging = out / "staged-bundles"
    if staging.exists():
        shutil.rmtree(staging)
    return {sname: staging / sname for sname in cfg.students}


def _staged_predictor(
    cfg: DrpcTrainConfig, pb: PolicyBundle | None, staged: dict[str, Path], progress: bool, report: dict[str, Any]
) -> GruForecaster:
    """The workload predictor (trained here unless ``pb`` is given), staged next to every student; its training
    report and version go into ``report``."""
    if pb is None:
        model, prep = train_predictor(cfg.predictor, progress=progress)
        pb = export_predictor(model, cfg.predictor, staged[cfg.students[0]] / "predictor", prep, quick=cfg.quick)
        report["predictor"] = prep
    forecaster = GruForecaster(pb)
    for sname in cfg.students:
        pb.save(staged[sname] / "predictor")
    report["predictor_version"] = forecaster.version
    return forecaster


def train_drpc(
    cfg: DrpcTrainConfig = DrpcTrainConfig(),
    out_dir: str | Path | None = None,
    bundle_dirs: dict[str, str | Path] | None = None,
    predictor: GruForecaster | PolicyBundle | str | Path | None = None,
    progress: bool = True,
    plots: bool = True,
    encoder: Any = None,
    opts: RunOptions | None = None,
) -> dict[str, Any]:
    """Train the predictor (unless given), then the teacher and the students, and export each student to
    ``bundle_dirs[spec]/student`` with the predictor in ``bundle_dirs[spec]/predictor`` (defaults
    :data:`DEFAULT_BUNDLE_DIRS`: ``policy/bundles/drpc``, ``policy/bundles/hrl-scheduler/high``; with
    ``cfg.quick``: the same layout under ``<out_dir>/bundles``). Logs to ``out_dir`` (default
    ``runs/drpc-s<seed>-<time>``): ``progress.csv`` (one row per episode), ``validation.csv``,
    ``learning_curves.png``, ``checkpoint.pt`` (teacher and students), ``report.json``; with ``tensorboard``, each
    ``progress.csv`` row as TensorBoard scalars ``drpc/<column>`` at its episode and each ``validation.csv`` row as
    ``drpc_validation/<policy>/<column>`` at its simulated minute (when training ends), under that directory.
    ``encoder``: the graph encoder of the ``hrl`` layouts (a :class:`policy.encoder.mpnn.GraphEncoder` or a bundle
    directory; default the committed one).

    ``opts`` (:class:`~policy.train.finetune.RunOptions`): ``opts.tensorboard`` as above; ``opts.init``: student name →
    a ``drpc-student-v1`` bundle to start from (a fine-tune,
    :mod:`policy.train.finetune`; give the source's ``predictor`` too, its forecasts are inputs): the student's actor
    and its target start as the bundle's; the teacher starts as the widest of them (the distilled one first), with
    zero weights on its extra columns, so it acts as that student at first (:func:`teacher_from_student`); the critics
    start fresh (``cfg.td3.critic_warmup``: critic-only updates first). ``opts.fine_tuned_from``: name → what goes
    into that student's ``metadata.fine_tuned_from`` (and ``-ft`` into its version).

    Everything that can be checked is checked before any training (apps, the predictor and encoder bundles, the
    bundle directories), and the bundles are built under ``<out_dir>/staged-bundles``; only at the end of a
    successful run is each ``bundle_dirs`` directory replaced as a whole (student and predictor together:
    :func:`policy.train.pipeline.install_dirs`). Returns the report."""
    # ---- build everything: checks first (nothing is trained or written before they pass) ----
    opts = opts or RunOptions()
    torch.set_num_threads(1)
    t_start = time.perf_counter()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    out = Path(out_dir) if out_dir is not None else ROOT / "runs" / f"drpc-s{cfg.seed}-{stamp}"
    check_apps(cfg.apps)
    dirs = _resolve_bundle_dirs(cfg, out, bundle_dirs)
    pb = _predictor_bundle(predictor)
    encoder = _graph_encoder(cfg, encoder)
    staged = _staging(cfg, out, dirs)
    report: dict[str, Any] = {"config": json_ready(asdict(cfg)), "started": stamp}
    forecaster = _staged_predictor(cfg, pb, staged, progress, report)
    if encoder is not None:
        report["encoder_version"] = encoder.version
    # seeds: rng draws the episodes and drivers, np_rng the exploration noise and the minibatches
    rng = np.random.default_rng(cfg.seed)
    np_rng = np.random.default_rng(cfg.seed + 1)
    F = len(SPECS[cfg.feature_layout])
    FT = F + 2 * len(DRPC_SPEC) + len(GLOBAL_EXTRA)
    agents = _Agents(cfg, F, FT)
    if opts.init:
        _start_from(agents, opts.init, F, FT)
    buf = ReplayBuffer(F, 1, cfg.td3.buffer_size, teacher_obs_dim=FT)
    validation = _Validation(cfg, forecaster, encoder)
    bar = progress_bar("drpc", cfg.total_minutes, "min", enabled=progress)
    board = open_board(opts.tensorboard, json_ready(asdict(cfg)))
    rows: list[dict[str, Any]] = []
    minutes_done = 0
    episode = 0
    running = None
    next_eval = cfg.eval_every

    while minutes_done < cfg.total_minutes:
        # ---- collect: one episode, driven by the teacher or a student, with exploration noise ----
        driver = _driver(cfg, minutes_done, rng)
        ep = _Episode(cfg, rng, forecaster, encoder, episode)
        ep_rewards: list[float] = []
        ep_shared: list[float] = []
        for minute in _episode_minutes(ep, cfg, agents.actor_fn(driver, np_rng)):
            ep_rewards.append(minute.reward)
            ep_shared.append(minute.shared)
            if minute.transition is not None:
                _store(buf, minute.transition)
            minutes_done += 1
            # ---- update: every simulated minute once the buffer holds learning_starts transitions ----
            if len(buf) >= cfg.td3.learning_starts:
                for _ in range(cfg.updates_per_minute):
                    agents.update(buf.sample(cfg.td3.batch_size, np_rng))
            bar.update(1)
        metrics = ep.sim.result().metrics

        # ---- log: one progress.csv row per episode ----
        mean_r = float(np.mean(ep_rewards)) if ep_rewards else 0.0
        running = mean_r if running is None else 0.95 * running + 0.05 * mean_r
        rows.append(
            {
                **_episode_row(
                    episode,
                    minutes_done,
                    time.perf_counter() - t_start,
                    ep,
                    driver,
                    ep_rewards,
                    ep_shared,
                    running,
                    metrics,
                    cfg,
                ),
                **agents.recent_losses(),
            }
        )
        board.row(episode, rows[-1], "drpc")
        bar.set_postfix(R=f"{running:.3f}", drv=driver[0], app=ep.app_name[:6])
        episode += 1

        # ---- evaluate: every eval_every simulated minutes (and once more after the loop) ----
        if cfg.eval_every and minutes_done >= next_eval and minutes_done < cfg.total_minutes:
            validation.run(agents, minutes_done)
            next_eval += cfg.eval_every

    if cfg.eval_every:
        validation.run(agents, minutes_done)
    for vrow in validation.rows:
        board.row(int(vrow["minutes"]), vrow, f"drpc_validation/{vrow['policy']}")
    board.close()
    bar.close()
    # ---- export: each student at its best validation reward, staged; the bundle directories last ----
    validation.restore_best(agents)
    train_s = time.perf_counter() - t_start
    meta = {
        "apps": list(cfg.apps),
        "episodes": episode,
        "simulated_minutes": minutes_done,
        "train_wall_s": round(train_s, 1),
        "predictor_version": forecaster.version,
        "reward": asdict(cfg.reward),
        "imitation_weight": cfg.imitation_weight,
        "final_running_reward": running,
        "students_trained_together": list(cfg.students),
        **validation.selected(),
    }
    if encoder is not None:
        meta["encoder_version"] = encoder.version
    _write_run(
        out,
        staged,
        dirs,
        cfg,
        agents,
        validation,
        rows,
        meta,
        report,
        {"episodes": episode, "simulated_minutes": minutes_done, "train_wall_s": train_s},
        plots,
        {k: {"fine_tuned_from": dict(v)} for k, v in (opts.fine_tuned_from or {}).items()},
    )
    install_dirs({staged[k]: dirs[k] for k in cfg.students})  # only now, each student with its predictor
    shutil.rmtree(out / "staged-bundles", ignore_errors=True)
    return report


def _write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    if not rows:
        return
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def _plot(rows: Sequence[dict[str, Any]], path: Path, eval_rows: Sequence[dict[str, Any]] = ()) -> Path:
    """Learning curves: per training app, every episode (dots: the teacher drove it, crosses: a student) and
    the moving mean of the reward, failed %, requested CPU relative to the manifests and p95 latency; right
    column: the validation reward and CPU of the teacher and of each student (fixed episodes, no noise)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    apps = sorted({r["app"] for r in rows})
    colors = plt.get_cmap("tab10")
    fig, axes = plt.subplots(2, 3, figsize=(16, 7.5))
    ax_v, ax_vc = axes[0, 2], axes[1, 2]
    for j, name in enumerate(sorted({r["policy"] for r in eval_rows}, key=lambda n: (n != "teacher", n))):
        sel = [r for r in eval_rows if r["policy"] == name]
        ax_v.plot(
            [r["minutes"] for r in sel], [r["reward"] for r in sel], marker="o", ms=3, label=name, color=colors(j + 3)
        )
        ax_vc.plot(
            [r["minutes"] for r in sel],
            [r["cpu_vs_manifest"] for r in sel],
            marker="o",
            ms=3,
            label=name,
            color=colors(j + 3),
        )
    ax_v.set_title("validation (fixed episodes, no noise)", fontsize=10)
    ax_v.set_ylabel("mean reward per deployment-minute")
    ax_vc.set_ylabel("validation CPU requested / manifests")
    for ax in (ax_v, ax_vc):
        ax.set_xlabel("simulated minutes")
        ax.grid(alpha=0.3)
    if eval_rows:
        ax_v.legend(fontsize=8)
    panels = (
        (axes[0, 0], "reward", "mean reward per deployment-minute"),
        (axes[0, 1], "failed_pct", "failed requests (%)"),
        (axes[1, 0], "cpu_vs_manifest", "CPU requested / manifests' requests"),
        (axes[1, 1], "latency_p95_ms", "p95 latency (ms)"),
    )
    for ax, key, label in panels:
        for j, app in enumerate(apps):
            sel = [r for r in rows if r["app"] == app]
            x = np.array([r["minutes"] for r in sel])
            y = np.array([np.nan if r[key] is None else r[key] for r in sel], dtype=np.float64)
            teach = np.array([r["driver"] == "teacher" for r in sel])
            ax.scatter(x[teach], y[teach], s=5, alpha=0.25, color=colors(j), marker="o")
            ax.scatter(x[~teach], y[~teach], s=9, alpha=0.5, color=colors(j), marker="x")
            k = min(20, len(y))
            if k > 1:
                smooth = np.convolve(np.nan_to_num(y), np.ones(k) / k, mode="valid")
                ax.plot(x[k - 1 :], smooth, color=colors(j), lw=1.8, label=f"{app} ({k}-episode mean)")
        ax.set_xlabel("simulated minutes")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        if key == "latency_p95_ms":
            ax.set_yscale("log")
    if axes[0, 0].get_legend_handles_labels()[0]:  # no smoothed curve before 2 episodes of an app (a quick run)
        axes[0, 0].legend(fontsize=8)
    fig.suptitle("DRPC training: dots = teacher-driven episodes, crosses = student-driven")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


#: The budget of a fine-tune (``train --all --fine-tune``; :mod:`policy.train.finetune`): a fifth of the simulated
#: minutes, updates from 1,000 transitions on, the first 2,000 updates of every critic alone (fresh critics under
#: trained actors). With ``--quick``: the quick budget, 50 critic-only updates.
FINE_TUNE: dict[str, Any] = {
    "total_minutes": 6_000,
    "eval_every": 2_000,
    "learning_starts": 1_000,
    "critic_warmup": 2_000,
}


def _config_for(
    students: Sequence[str],
    seed: int,
    quick: bool,
    minutes: int | None,
    apps: Sequence[str] | None,
    *,
    fine_tune: bool = False,
) -> DrpcTrainConfig:
    cfg = DrpcTrainConfig(students=tuple(students), seed=seed)
    if apps:
        cfg = replace(cfg, apps=tuple(apps))
    if quick:
        cfg = replace(
            cfg,
            total_minutes=300,
            episode_minutes=15,
            td3=replace(cfg.td3, learning_starts=100, batch_size=32, critic_warmup=50 if fine_tune else 0),
            eval_episodes=1,
            predictor=replace(cfg.predictor, epochs=1, stride=40),
            quick=True,
        )
    elif fine_tune:
        cfg = replace(
            cfg,
            total_minutes=FINE_TUNE["total_minutes"],
            eval_every=FINE_TUNE["eval_every"],
            td3=replace(
                cfg.td3, learning_starts=FINE_TUNE["learning_starts"], critic_warmup=FINE_TUNE["critic_warmup"]
            ),
        )
    if minutes is not None:
        cfg = replace(cfg, total_minutes=minutes)
    return cfg


def _names(text: str | None) -> list[str]:
    return [x.strip() for x in (text or "").split(",") if x.strip()]


def run_cli(
    students: str = "drpc,hrl",
    minutes: int | None = None,
    seed: int = 0,
    run_dir: str | None = None,
    bundles_root: str | None = None,
    apps: str | None = None,
    predictor: str | None = None,
    quick: bool = False,
) -> int:
    """The body of ``hrl-policy train drpc``: train and export the named students (comma-separated, of
    :data:`STUDENT_KINDS`) into ``bundles_root`` (default ``policy/bundles``; with ``quick``
    ``<run_dir>/bundles``, so a smoke test never overwrites the committed bundles: ``drpc/``,
    ``hrl-scheduler/high/``, ``hrl-flat/high/``).

    Every argument is checked before any training; a bad one raises ``ValueError`` naming the flag and the
    value (``hrl-policy`` prints it on one line and exits 2) and nothing is written."""
    names = _names(students)
    if not names or len(set(names)) != len(names) or any(n not in STUDENT_KINDS for n in names):
        raise ValueError(f"--students: expected distinct names among {', '.join(STUDENT_KINDS)}, got {students!r}")
    if minutes is not None and minutes < 1:
        raise ValueError(f"--minutes: expected an integer >= 1, got {minutes}")
    if seed < 0:
        raise ValueError(f"--seed: expected an integer >= 0, got {seed}")
    app_names = _names(apps) if apps is not None else None
    if app_names is not None and not app_names:
        raise ValueError(f"--apps: expected comma-separated app names, got {apps!r}")
    if app_names:
        try:
            check_apps(app_names)
        except ValueError as exc:
            raise ValueError(f"--apps: {exc}") from None
    pb = None
    if predictor is not None:
        try:
            pb = PolicyBundle.load(predictor)
            GruForecaster(pb)
        except ValueError as exc:
            raise ValueError(f"--predictor: {exc}") from None
    cfg = _config_for(names, seed, quick, minutes, app_names)
    if run_dir is None:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        run_dir = str(ROOT / "runs" / f"drpc-s{seed}-{stamp}{'-quick' if quick else ''}")
    # a --quick run never overwrites a committed bundle unless --out says so
    root = Path(bundles_root) if bundles_root else (Path(run_dir) / "bundles" if quick else DEFAULT_DRPC_BUNDLE.parent)
    dirs = {k: root / v.relative_to(DEFAULT_DRPC_BUNDLE.parent) for k, v in DEFAULT_BUNDLE_DIRS.items() if k in names}
    rep = train_drpc(cfg, out_dir=run_dir, bundle_dirs=dirs, predictor=pb)
    _print_report(rep, note)
    return 0


def _print_report(rep: dict[str, Any], log=lambda m: print(m, file=sys.stderr)) -> None:
    p = rep.get("predictor")
    if p:
        log(
            f"drpc predictor: held-out WAPE {p['gru_wape_mean']:.3f} (naive last value {p['naive_wape_mean']:.3f}), "
            f"{p['train_windows']} training windows, {p['train_s']:.0f} s"
        )
    quick = bool(rep.get("config", {}).get("quick"))
    log(
        f"drpc: {rep['episodes']} episodes, {rep['simulated_minutes']} simulated minutes in "
        f"{rep['train_wall_s'] / 60:.1f} min; "
        + ("quick run, " if quick else "")
        + "bundles: "
        + ", ".join(f"{k} → {v}" for k, v in rep["bundle_dirs"].items())
        + f"; log in {rep['run_dir']}"
    )


#: Where each student's source bundle lives under a bundles root (a fine-tune's, :mod:`policy.train.finetune`).
SOURCE_DIRS: dict[str, str] = {"drpc": "drpc", "hrl": "hrl-scheduler/high", "hrl-td3": "hrl-flat/high"}


def fine_tune_sources(
    fine_tune: FineTune, cfg: DrpcTrainConfig, encoder_version: str | None = None
) -> tuple[dict[str, PolicyBundle], PolicyBundle]:
    """The source bundles of a fine-tune of ``cfg``'s students: ``(name → <dir>/student, the predictor)`` with
    ``<dir>`` from :data:`SOURCE_DIRS` and the predictor ``drpc/predictor``, each checked against what
    :func:`train_drpc` builds: the predictor's feature spec and architecture; each student's layout (feature spec),
    ``drpc-student-v1``, ``dims`` (obs, action, hidden = ``cfg.td3.hidden``, 2 layers), its action mapping
    (``cfg.mapping``), its ``metadata.predictor_version`` (the predictor's) and, for the embedding layouts, its
    ``metadata.encoder_version`` (``encoder_version``: the graph encoder the stage reads; default the committed
    one). Raises ValueError naming the bundle and the field."""
    pred = fine_tune.load(
        "drpc/predictor",
        stage="drpc",
        level="high",
        feature_spec={"rates": FORECAST_SPEC},
        architecture_type=FORECAST_ARCH,
        expect={"dims.window": cfg.predictor.window, "dims.horizon": cfg.predictor.horizon},
    )
    try:
        GruForecaster(pred)
    except ValueError as exc:
        raise ValueError(f"--fine-tune: {' '.join(str(exc).split())}") from None
    students = {}
    for name in cfg.students:
        spec = STUDENT_KINDS[name][0]
        expect: dict[str, Any] = {
            "dims.obs": len(SPECS[spec]),
            "dims.action": 1,
            "dims.hidden": cfg.td3.hidden,
            "dims.layers": 2,
            "metadata.action_mapping": mapping_json(cfg.mapping),
            "metadata.predictor_version": pred.policy_version,
        }
        if spec == "hrl":
            expect["metadata.encoder_version"] = encoder_version or GraphEncoder.load().version
        students[name] = fine_tune.load(
            f"{SOURCE_DIRS[name]}/student",
            stage="drpc",
            level="high",
            feature_spec={"local": SPECS[spec]},
            architecture_type=STUDENT_ARCH,
            expect=expect,
        )
    return students, pred


#: The students the ``drpc`` stage trains.
STAGE_STUDENTS = ("drpc", "hrl", "hrl-td3")


def check_fine_tune(fine_tune: FineTune, root: str | Path) -> None:
    """Refuse (ValueError, one line) a source the ``drpc`` stage could not start from (:func:`fine_tune_sources`)."""
    fine_tune_sources(fine_tune, _config_for(STAGE_STUDENTS, 0, False, None, None, fine_tune=True))


def train_stage(
    root: Path,
    *,
    quick: bool,
    seed: int,
    log=print,
    target: TrainingTarget | None = None,
    tensorboard: str | Path | None = None,
    fine_tune: FineTune | None = None,
) -> list[str]:
    """The ``drpc`` stage of ``make train`` (:mod:`policy.train.pipeline`): one run training the teacher and the
    students ``drpc``, ``hrl`` and ``hrl-td3`` together, written to ``<root>/drpc``,
    ``<root>/hrl-scheduler/high``, ``<root>/hrl-flat/high``; ``<root>/hrl-no-encoder/high`` gets a copy of the
    ``drpc`` student (flat per-service features, distilled) with its predictor. The ``hrl`` students read the
    committed encoder's embeddings, as :meth:`policy.highlevel.DrpcAutoscaler.load` serves them (the layout has a
    fixed embedding width). ``target``: train on its apps; ``tensorboard``: event files under
    ``<tensorboard>/drpc``; ``fine_tune``: every student starts from its bundle under that root and the source's
    predictor is reused (:func:`fine_tune_sources`, checked before any training), with the :data:`FINE_TUNE`
    budget. Returns the directories."""
    root = Path(root)
    apps = target.apps if target is not None else None
    cfg = _config_for(STAGE_STUDENTS, seed, quick, None, apps, fine_tune=fine_tune is not None)
    init, predictor, provenance = None, None, None
    if fine_tune is not None:
        init, predictor = fine_tune_sources(fine_tune, cfg)
        provenance = {k: fine_tune.provenance(f"{SOURCE_DIRS[k]}/student", b) for k, b in init.items()}
    dirs = {"drpc": root / "drpc", "hrl": root / "hrl-scheduler" / "high", "hrl-td3": root / "hrl-flat" / "high"}
    rep = train_drpc(
        cfg,
        bundle_dirs=dirs,
        predictor=predictor,
        progress=not quick,
        out_dir=(ROOT / "out" / "train" / "drpc") if quick else None,
        opts=RunOptions(
            tensorboard=None if tensorboard is None else Path(tensorboard) / "drpc",
            init=init,
            fine_tuned_from=provenance,
        ),
    )
    _print_report(rep, log)
    ne = root / "hrl-no-encoder" / "high"
    install_dirs({dirs["drpc"]: ne})
    return [str(d) for d in dirs.values()] + [str(ne)]
