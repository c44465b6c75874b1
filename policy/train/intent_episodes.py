"""[torch side] The high level's training episodes: the distribution they are drawn from
(:class:`EpisodeDistribution`, which the trainers' configurations extend), one fully determined episode
(:class:`EpisodeSpec`), its simulation pieces (:func:`episode_pieces`) and the served ``hrl-scheduler`` stack with the
intent policy being trained injected (:func:`episode_stack`), shared by PPO (:mod:`policy.train.hierarchy`) and
DAgger (:mod:`policy.train.dagger`).

The distribution: the training apps (never the held-out ones, :data:`policy.train.episodes.HELD_OUT_APPS`) and
synthetic call graphs with Alibaba-like statistics, training segments of the traces only (never the evaluation
windows), random peak load, background tenants and cluster size, and a share of episodes in the benchmark's scenario
families (:mod:`policy.train.episodes`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from policy.bundle import DEFAULT_BUNDLES, PolicyBundle
from policy.encoder import GraphEncoder
from policy.highlevel import GruForecaster, IntentAutoscaler, IntentFeaturizer
from policy.highlevel.tuned import tuned_burst
from policy.lowlevel import load_learned_placement
from policy.sim.engine import SimConfig, background_tenants
from policy.sim.sizing import capacity_rps, cluster_for
from policy.sim.stacks import StackBuild, StackContext, autoscaled_workloads, build_stack
from policy.sim.traces import scale_to_peak

from .episodes import HELD_OUT_APPS, TRAINING_FAMILIES, scenario_app_count, training_app, training_run
from .forecast_data import training_series

__all__ = [
    "TRAIN_APPS",
    "PERIOD_MIN",
    "PREDICTOR_BUNDLE",
    "EpisodeDistribution",
    "EpisodeSpec",
    "sample_episode_specs",
    "episode_pieces",
    "EpisodeSetting",
    "episode_setting",
    "episode_stack",
]

TRAIN_APPS = ("online-boutique", "sock-shop", "dsb-hotel-reservation")
PREDICTOR_BUNDLE = DEFAULT_BUNDLES / "hrl-scheduler" / "high" / "predictor"
#: Minutes between two high-level decisions (the descheduler's move period).
PERIOD_MIN = 5


@dataclass(frozen=True)
class EpisodeDistribution:
    """Where the high level's episodes come from: ``apps`` (training apps) plus a ``synthetic_share`` of synthetic
    apps of ``synthetic_services`` services, of which a ``synthetic_guaranteed_share`` of the services (each with that
    probability) run Guaranteed pods (CPU limit = request, as the DeathStarBench manifests and many charts do); with
    ``synthetic_guaranteed_shares`` (values in [0, 1]) each synthetic app draws its share from those instead (apps
    whose every pod is Guaranteed, apps with none and mixed ones);
    ``episode_minutes`` each; a ``scenario_share`` of them in one of
    ``scenarios`` (the benchmark's scenario families with training apps and training load segments), the rest in the
    classic setting: peak load ``peak_range`` × the app's capacity at its manifests; ``background_range``: background
    tenants' CPU request share of every node; ``nodes_frac_range``: the share of the app's bench cluster it runs on
    (fewer nodes: more contention); ``cpu_price_range``; ``n_samples``: user requests sampled per minute. Ranges are
    checked in ``__post_init__`` (ValueError naming the field); the trainers' configurations extend it."""

    apps: tuple[str, ...] = TRAIN_APPS
    synthetic_share: float = 0.2
    synthetic_guaranteed_share: float = 0.0
    synthetic_guaranteed_shares: tuple[float, ...] = ()
    scenario_share: float = 0.5
    scenarios: tuple[str, ...] = TRAINING_FAMILIES
    synthetic_services: tuple[int, int] = (6, 24)
    episode_minutes: int = 60
    peak_range: tuple[float, float] = (0.7, 1.6)
    background_range: tuple[float, float] = (0.0, 0.45)
    cpu_price_range: tuple[float, float] = (0.25, 1.0)
    nodes_frac_range: tuple[float, float] = (0.4, 1.0)
    n_samples: int = 300

    def __post_init__(self) -> None:
        if not self.apps:
            raise ValueError("apps: at least one training application")
        bad = [a for a in self.apps if a in HELD_OUT_APPS]
        if bad:
            raise ValueError(f"apps: {', '.join(bad)} is held out of training (evaluation only)")
        for f in ("synthetic_share", "synthetic_guaranteed_share", "scenario_share"):
            if not 0.0 <= getattr(self, f) <= 1.0:
                raise ValueError(f"{f}: expected a number in [0, 1], got {getattr(self, f)!r}")
        for f in ("peak_range", "background_range", "cpu_price_range", "synthetic_services", "nodes_frac_range"):
            lo, hi = getattr(self, f)
            if not (0 <= lo <= hi):
                raise ValueError(f"{f}: expected (low, high) with 0 <= low <= high, got {getattr(self, f)!r}")
        if any(not 0.0 <= g <= 1.0 for g in self.synthetic_guaranteed_shares):
            raise ValueError(
                f"synthetic_guaranteed_shares: expected numbers in [0, 1], got {self.synthetic_guaranteed_shares!r}"
            )
        if self.scenario_share > 0 and not self.scenarios:
            raise ValueError("scenarios: at least one scenario when scenario_share > 0")
        if self.episode_minutes < 2 * PERIOD_MIN:
            raise ValueError(f"episode_minutes: expected at least {2 * PERIOD_MIN}, got {self.episode_minutes!r}")
        if self.n_samples < 1:
            raise ValueError(f"n_samples: expected an integer >= 1, got {self.n_samples!r}")


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


def _draw_app(cfg: EpisodeDistribution, rng: np.random.Generator) -> str:
    if rng.random() < cfg.synthetic_share:
        lo, hi = cfg.synthetic_services
        name = f"synthetic:{int(rng.integers(lo, hi + 1))}:{int(rng.integers(1_000_000))}"
        shares = cfg.synthetic_guaranteed_shares
        g = float(rng.choice(shares)) if shares else cfg.synthetic_guaranteed_share
        return f"{name}:{g:g}" if g > 0 else name
    return str(rng.choice(cfg.apps))


def sample_episode_specs(
    cfg: EpisodeDistribution, rng: np.random.Generator, n: int, *, seed0: int
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


def _classic(spec: EpisodeSpec) -> tuple[Any, np.ndarray, Any, SimConfig]:
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


def episode_pieces(spec: EpisodeSpec) -> tuple[Any, np.ndarray, Any, SimConfig]:
    """The simulation pieces of episode ``spec``: (application, rates (T,) or (T, apps) req/s, cluster spec,
    configuration), in its scenario family or in the classic setting."""
    if spec.scenario:
        tr = training_run(
            spec.scenario,
            list(spec.apps),
            np.random.default_rng(spec.trace_seed),
            minutes=spec.minutes,
            seed=spec.seed,
            n_samples=spec.n_samples,
        )
        return tr.app, tr.rps, tr.cluster, tr.config
    return _classic(spec)


@dataclass
class EpisodeSetting:
    """One episode's simulation pieces (``app``, ``rps``, ``cluster``, ``config``), the stack it runs (``stack``,
    ``hrl-scheduler`` or ``hrl-no-encoder``), the autoscaled ``workloads``, and the parts the trained intent policy
    reads and acts through: its ``featurizer`` (the stack's predictor and, unless flat, the graph encoder) and the
    ``parts`` given to the stack (the intent autoscaler; the staged placement when training over fresh bundles)."""

    app: Any
    rps: np.ndarray
    cluster: Any
    config: SimConfig
    stack: str
    workloads: list[str]
    featurizer: IntentFeaturizer
    predictor: GruForecaster
    parts: dict[str, Any]


_PLACEMENTS: dict[str, Any] = {}


def _placement(path: str) -> Any:
    if path not in _PLACEMENTS:
        _PLACEMENTS[path] = load_learned_placement(path)
    return _PLACEMENTS[path]


def episode_setting(
    spec: EpisodeSpec, *, flat: bool = False, stack: str | None = None, bundles_root: str | Path | None = None
) -> EpisodeSetting:
    """The :class:`EpisodeSetting` of ``spec`` for the ``stack`` (default ``hrl-scheduler``, ``hrl-no-encoder`` when
    ``flat``). ``bundles_root``: where the stack's other bundles (``<stack>/low``, ``<stack>/high/predictor``, and the
    tuned constant's burst share in ``hrl-scheduler/high/constant.json``) come from (default ``policy/bundles``;
    ``make train`` passes its staging root so the high level trains over the low level trained just before)."""
    app, rps, cluster, cfg = episode_pieces(spec)
    name = stack or ("hrl-no-encoder" if flat else "hrl-scheduler")
    root = Path(bundles_root) if bundles_root else DEFAULT_BUNDLES
    pred_dir = root / name / "high" / "predictor"
    predictor = GruForecaster(
        PolicyBundle.load(pred_dir if (pred_dir / "manifest.json").is_file() else PREDICTOR_BUNDLE)
    )
    encoder = None if flat else GraphEncoder.load()
    featurizer = IntentFeaturizer(predictor, encoder, slo_p95_ms=app.slo_p95_ms, cpu_price=spec.cpu_price)
    workloads = autoscaled_workloads(app)
    # the autoscaler as served: the burst share of the tuned constant beside the high level (policy.highlevel.tuned)
    burst = tuned_burst(root / "hrl-scheduler" / "high")
    auto = IntentAutoscaler(workloads=tuple(workloads), forecaster=predictor, burst=burst)
    parts: dict[str, Any] = {"autoscaler": auto}
    if bundles_root and (root / name / "low" / "manifest.json").is_file():
        parts["placement"] = _placement(str(root / name / "low"))
    return EpisodeSetting(app, rps, cluster, cfg, name, workloads, featurizer, predictor, parts)


def episode_stack(setting: EpisodeSetting, intent_policy: Any, seed: int, extra: Mapping[str, Any] = ()) -> StackBuild:
    """The served stack of ``setting`` with ``intent_policy`` injected (through ``StackContext.parts``, as the
    stack's factory takes it) for a run of simulation seed ``seed``."""
    parts = {**setting.parts, "intent_policy": intent_policy, **dict(extra)}
    ctx = StackContext(setting.app, setting.cluster, seed, setting.config, parts=parts, rps=setting.rps)
    return build_stack(setting.stack, ctx)
