"""Training episodes over the scenario families (numpy only): the benchmark's scenarios
(:mod:`policy.sim.scenario`, ``policy/data/scenarios/``) with everything the benchmark evaluates on swapped out, so
training never sees an evaluation cell:

- the applications: training apps or synthetic call graphs (:func:`policy.train.encoder_data.synthetic_app`)
  instead of the scenario's; the held-out apps (``dsb-social-network``, ``dsb-media-microservices``) never appear;
- the load: training segments of the traces (:func:`policy.train.forecast_data.training_series`: never the named
  evaluation windows), scaled as the scenario scales its own (``peakUtilization`` × the app's capacity on the
  scenario's nodes, jittered ±20 %), with the scenario's flash crowds;
- the seeds.

The cluster, the network, the interference, the background tenants and the events are the scenario's: what the
policy must learn to handle. :func:`training_run` returns the pieces :class:`policy.sim.engine.Simulation` takes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from policy.sim.app import AppSpec, load_app
from policy.sim.scenario import build, compose_apps, load_scenario
from policy.sim.sizing import PEAK_UTILIZATION, app_bench, capacity_rps
from policy.sim.traces import FlashCrowd, apply_flash_crowds, scale_to_peak

from .encoder_data import synthetic_app
from .forecast_data import training_series

__all__ = [
    "TRAINING_FAMILIES",
    "HELD_OUT_APPS",
    "TrainingRun",
    "TrainingTarget",
    "scenario_app_count",
    "training_app",
    "training_run",
]

#: The scenario files training draws from (every family of the benchmark, and the classic setting).
TRAINING_FAMILIES = (
    "baseline-2026-11",
    "shared-cluster",
    "network-datacenter",
    "network-edge",
    "interference",
    "heterogeneous",
    "events",
    "load",
)
#: Applications that never appear in training (the benchmark's held-out apps).
HELD_OUT_APPS = ("dsb-social-network", "dsb-media-microservices")

_APPS: dict[str, AppSpec] = {}
_APP_COUNTS: dict[str, int] = {}


def scenario_app_count(scenario: str) -> int:
    """How many applications ``scenario`` (a name or a path) runs side by side (cached)."""
    if scenario not in _APP_COUNTS:
        _APP_COUNTS[scenario] = len(load_scenario(scenario).spec.apps)
    return _APP_COUNTS[scenario]


def training_app(name: str) -> AppSpec:
    """A built-in training app, or ``synthetic:<services>:<seed>[:<guaranteed share>]`` (cached; the share of its
    services that run Guaranteed pods, 0 when absent). Raises ValueError for a held-out app or a bad synthetic
    name."""
    if name in HELD_OUT_APPS:
        raise ValueError(f"app: {name!r} is held out of training")
    if name not in _APPS:
        if name.startswith("synthetic:"):
            parts = name.split(":")
            try:
                n, seed = int(parts[1]), int(parts[2])
                share = float(parts[3]) if len(parts) == 4 else 0.0
                if len(parts) not in (3, 4) or not 0.0 <= share <= 1.0:
                    raise ValueError
            except (ValueError, IndexError):
                raise ValueError(
                    f"app: {name!r}: expected synthetic:<services>:<seed>[:<guaranteed share in [0, 1]>]"
                ) from None
            label = f"synthetic-{n}-{seed}" + (f"-g{share:g}" if share > 0 else "")
            _APPS[name] = synthetic_app(np.random.default_rng(seed), n, name=label, guaranteed_share=share)
        else:
            _APPS[name] = load_app(name)
    return _APPS[name]


@dataclass(frozen=True)
class TrainingTarget:
    """Train on your own applications (``hrl-policy train --app DIR [--scenario NAME]``): ``apps``, the folders (or
    ``app.yaml`` files) ``hrl-policy app build`` wrote, or built-in app names, replace the training apps of every
    stage that draws applications, with no synthetic call graphs; ``scenario`` (a scenario name or file), when
    given, is where the high level's episodes run (all of them; its other apps are replaced by ``apps`` too),
    else they run in the benchmark's scenario families and the classic setting as usual. The low level's
    placement instances are always the app's bench cluster, resized at random (:mod:`policy.train.placement`).

    Checked when made: every app loads, none is held out of training, the scenario loads. Raises ValueError
    naming ``--app`` or ``--scenario`` and the value."""

    apps: tuple[str, ...]
    scenario: str | None = None

    def __post_init__(self) -> None:
        if not self.apps:
            raise ValueError("--app: at least one application folder")
        for a in self.apps:
            try:
                spec = training_app(a)
            except ValueError as exc:
                raise ValueError(f"--app: {a}: {' '.join(str(exc).split())}") from None
            if spec.name in HELD_OUT_APPS:
                raise ValueError(f"--app: {a}: {spec.name!r} is held out of training (evaluation only)")
        if self.scenario is not None:
            try:
                scenario_app_count(self.scenario)
            except ValueError as exc:
                raise ValueError(f"--scenario: {' '.join(str(exc).split())}") from None

    @classmethod
    def from_flags(cls, apps: Sequence[str] | None, scenario: str | None) -> TrainingTarget | None:
        """``--app`` (repeated) / ``--scenario`` of a training command: None without ``--app``. Raises ValueError
        naming the flag for a bad value, or ``--scenario`` without ``--app``."""
        if not apps:
            if scenario is not None:
                raise ValueError("--scenario: only with --app (the scenario your app is trained in)")
            return None
        return cls(tuple(apps), scenario)

    @property
    def name(self) -> str:
        """The first app's name (``name:`` of its app.yaml): names the default output folders."""
        return training_app(self.apps[0]).name

    def distribution(self) -> dict[str, Any]:
        """Overrides of :class:`policy.train.intent_episodes.EpisodeDistribution` fields (the high level's
        episodes): the apps, no synthetic apps, and every scenario episode in ``scenario`` when given."""
        out: dict[str, Any] = {"apps": self.apps, "synthetic_share": 0.0}
        if self.scenario is not None:
            out.update(scenarios=(self.scenario,), scenario_share=1.0)
        return out

    def placement(self) -> dict[str, Any]:
        """Overrides of :class:`policy.train.placement.PlacementTrainConfig` fields: the apps as the training apps,
        no synthetic apps, no held-out evaluation apps."""
        return {"train_apps": self.apps, "synthetic_share": 0.0, "heldout_apps": ()}


@dataclass(frozen=True)
class TrainingRun:
    """What one training episode simulates: ``app`` (composite for several), ``rps`` ((T,) or (T, apps)),
    ``cluster``, ``config`` (the scenario's network, interference and events; ``minutes``, ``seed``,
    ``n_samples`` set), ``scenario`` and ``apps`` (names) for the logs."""

    app: AppSpec
    rps: np.ndarray
    cluster: Any
    config: Any
    scenario: str
    apps: tuple[str, ...]


def _node_cpu_m(scn) -> int | None:
    pools = [p for p in scn.spec.cluster.node_pools if p.count > 0]
    return max(p.cpu_m for p in pools) if pools else None


def _rates(app: AppSpec, load, rng: np.random.Generator, minutes: int, node_cpu_m: int | None) -> np.ndarray:
    _name, counts = training_series(rng, minutes)
    if load.peak_rps is not None:
        peak = float(load.peak_rps)
    else:
        pu = PEAK_UTILIZATION if load.peak_utilization is None else float(load.peak_utilization)
        peak = pu * capacity_rps(app, node_cpu_m)
    out = scale_to_peak(np.asarray(counts, dtype=np.float64), peak * float(rng.uniform(0.8, 1.2)))
    if load.flash_crowds:
        crowds = [FlashCrowd(c.at_min, c.duration_min, c.factor, c.ramp_min) for c in load.flash_crowds]
        out = apply_flash_crowds(out, [c for c in crowds if c.at_min < minutes])
    return out


def training_run(
    scenario: str,
    apps: list[str],
    rng: np.random.Generator,
    *,
    minutes: int,
    seed: int,
    n_samples: int | None = None,
) -> TrainingRun:
    """One training episode of ``scenario`` (a name of :data:`TRAINING_FAMILIES` or a path) with ``apps`` (as many
    as the scenario has; training apps or ``synthetic:...``) on training load segments drawn from ``rng``.
    Raises ValueError for a held-out app or the wrong number of apps."""
    scn = load_scenario(scenario)
    refs = scn.spec.apps
    if len(apps) != len(refs):
        raise ValueError(f"apps: scenario {scn.name!r} runs {len(refs)} apps, got {len(apps)}")
    specs = [training_app(a) for a in apps]
    base = build(scn, seed=seed, minutes=minutes, n_samples=n_samples) if len(refs) > 1 else None
    node_cpu = _node_cpu_m(scn)
    if len(refs) == 1:
        run = build(scn, app=specs[0], seed=seed, minutes=minutes, n_samples=n_samples)
        if scn.spec.cluster.app_bench:
            node_cpu = app_bench(specs[0]).cpu_m
        rps = _rates(specs[0], refs[0].load, rng, minutes, node_cpu)
        return TrainingRun(run.app, rps, run.cluster, replace(run.config, minutes=len(rps)), scn.name, tuple(apps))
    assert base is not None
    names = [f"train-{k}" for k in range(len(specs))]
    composite = compose_apps(list(zip(specs, names)), f"{scn.name}-training")
    rps = np.stack([_rates(s, r.load, rng, minutes, node_cpu) for s, r in zip(specs, refs)], axis=1)
    return TrainingRun(composite, rps, base.cluster, replace(base.config, minutes=len(rps)), scn.name, tuple(apps))
