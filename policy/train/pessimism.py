"""The intent ensemble's pessimism (``hrl-policy train pessimism``): how far each service's capacity target moves from
the high-level members' mean towards their lowest (:func:`policy.highlevel.mean_intent`), chosen on the training
distribution.

Grid search: every value of ``pessimism_values`` runs ``hrl-ensemble@pessimism=P`` (the served stack with that
combination) on the same ``episodes`` training episodes (:class:`~policy.train.intent_episodes.EpisodeDistribution`:
training apps, synthetic ones and the benchmark's scenario families on training segments of the traces; never a
held-out app, never an evaluation window), priced with the benchmark's objective
(:data:`policy.sim.objective.DEFAULT_OBJECTIVE`); the value of least mean cost per minute wins, ties going to the
smaller value (less CPU). The episodes are drawn from the same generator as ``hrl-policy train constant``'s, so the
two searches judge on one set. Written to ``policy/bundles/hrl-ensemble/high/pessimism.json``, which
:meth:`policy.highlevel.IntentEnsemble.load` serves (the simulator and the descheduler alike)::

    {"pessimism", "objective", "episodes", "tied", "grid": [{"pessimism", "objective", "paired_gap", "paired_se",
     "cheaper_episodes", "episode_objectives"}...], "train_s"}

``paired_gap`` / ``paired_se`` / ``cheaper_episodes`` / ``tied``: as in :mod:`policy.train.constant` (common random
numbers: a value's per-episode difference from the chosen one, its standard error, the episodes it cost less in,
the values within two standard errors of the choice).

Why a lower target than the mean: members that disagree on a service's target are a sign the state is far from
what all of them learned; taking the lower one buys headroom there (the lower of two critics in clipped double
Q-learning, Fujimoto et al. 2018, arXiv 1802.09477; a fallback to caution under uncertainty, as SPIBB, arXiv
1712.06924), at the price of CPU where they agree less for no reason."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from policy.bundle import DEFAULT_BUNDLES
from policy.highlevel.tuned import PESSIMISM_FILE_NAME
from policy.sim.objective import DEFAULT_OBJECTIVE, app_costs
from policy.sim.stacks import StackContext, build_stack, get_stack
from policy.telemetry import note

from .constant import option_error, paired_gaps, search_episodes
from .intent_episodes import EpisodeDistribution, EpisodeSpec, episode_pieces
from .ray_pool import TaskPool

__all__ = ["PessimismSearchConfig", "pessimism_cost", "tune_pessimism", "run_cli", "DEFAULT_PESSIMISM"]

#: The committed result of the search for the served ensemble.
DEFAULT_PESSIMISM = DEFAULT_BUNDLES / "hrl-ensemble" / "high" / PESSIMISM_FILE_NAME

#: The stack searched over (its knob ``pessimism``).
STACK = "hrl-ensemble"


#: The knobs of ``hrl-ensemble`` the search may sweep: ``pessimism`` (what it writes pessimism.json for) and, for
#: research, ``weight`` (the extender's weight in the scheduler profile), ``forecast_min`` (the replica targets'
#: lowest forecast factor), ``entry_forecast`` (0/1: the entry services' targets forecast from their arrivals),
#: ``burst`` (the share of a Burstable pod's room its replica target counts) and ``limit_target`` (each pod planned for
#: at least that share of the CPU it can reach), printed or written to ``--out`` only.
KNOBS = ("pessimism", "weight", "forecast_min", "entry_forecast", "burst", "limit_target")

#: Each knob's range, as (low, high, integer): the stack's own knob definitions.
_RANGES = {k.name: (float(k.lo), float(k.hi), k.integer) for k in get_stack(STACK).knobs if k.name in KNOBS}


@dataclass(frozen=True)
class PessimismSearchConfig(EpisodeDistribution):
    """The grid (``pessimism_values``: values of ``knob``, in its range: pessimism [0, 1], weight 1..100 integers,
    forecast_min [0.5, 1], entry_forecast 0 or 1, burst [0, 1], limit_target [0, 0.9])
    and the ``episodes`` it is judged on (30-minute episodes by default), ``workers`` Ray tasks at a time, ``seed``
    (the episodes' draw, as ``train constant``'s)."""

    episode_minutes: int = 30
    pessimism_values: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
    knob: str = "pessimism"
    episodes: int = 36
    workers: int = 2
    seed: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.knob not in KNOBS:
            raise ValueError(f"knob: expected one of {', '.join(KNOBS)}, got {self.knob!r}")
        if not self.pessimism_values:
            raise ValueError("pessimism_values: expected at least one value")
        lo, hi, integer = _RANGES[self.knob]
        for v in self.pessimism_values:
            if not (lo <= v <= hi and (float(v).is_integer() or not integer)):
                want = f"integers in {lo:g}..{hi:g}" if integer else f"numbers in [{lo:g}, {hi:g}]"
                raise ValueError(f"pessimism_values: expected {want} for knob {self.knob}, got {v!r}")
        if self.episodes < 1 or self.workers < 1:
            raise ValueError(f"episodes, workers: expected integers >= 1, got {self.episodes!r}, {self.workers!r}")


def stack_name(knob: str, value: float) -> str:
    """The stack a grid point runs: ``hrl-ensemble@<knob>=<value>`` (the value written exactly: ``repr``, or the
    integer of an integer knob)."""
    text = str(int(value)) if _RANGES[knob][2] else repr(float(value))
    return f"{STACK}@{knob}={text}"


def pessimism_cost(spec: EpisodeSpec, pessimism: float, knob: str = "pessimism") -> float:
    """Mean cost per minute of episode ``spec`` under ``hrl-ensemble@<knob>=<value>`` (:func:`stack_name`; the
    committed ensembles, the bench's objective)."""
    app, rps, cluster, config = episode_pieces(spec)
    built = build_stack(stack_name(knob, pessimism), StackContext(app, cluster, spec.seed, config, rps=rps))
    res = built.simulation(app, rps, cluster, config).run()
    return float(app_costs(app, res.series, DEFAULT_OBJECTIVE).mean())


def _point(job: tuple[EpisodeSpec, float, str]) -> float:
    return pessimism_cost(*job)


def tune_pessimism(
    cfg: PessimismSearchConfig = PessimismSearchConfig(),
    out: str | Path | None = None,
    *,
    ray_address: str | None = None,
    log: Callable[[str], None] = lambda m: print(m, file=sys.stderr),
) -> dict[str, Any]:
    """Run the grid search (module docstring); write the result to ``out`` (a ``pessimism.json`` path; None: do
    not write). Returns the result."""
    t0 = time.perf_counter()
    specs = search_episodes(cfg, cfg.episodes, cfg.seed)
    as_value = int if _RANGES[cfg.knob][2] else float  # an integer knob's values print as integers
    values = sorted({as_value(p) for p in cfg.pessimism_values})
    jobs = [(s, p, cfg.knob) for p in values for s in specs]
    pool = TaskPool(cfg.workers, ray_address)
    try:
        costs = np.array(pool.map(_point, jobs, desc=f"ensemble {cfg.knob}: grid")).reshape(len(values), len(specs))
    finally:
        pool.close()
    b = min(range(len(values)), key=lambda i: (float(costs[i].mean()), values[i]))  # ties: the smaller value
    gaps, ties = paired_gaps(costs, b)
    grid = [
        {
            cfg.knob: p,
            "objective": float(costs[i].mean()),
            **gaps[i],
            "episode_objectives": [round(float(x), 6) for x in costs[i]],
        }
        for i, p in enumerate(values)
    ]
    tied = [values[i] for i in ties]
    result = {
        **({"knob": cfg.knob} if cfg.knob != "pessimism" else {}),
        cfg.knob: values[b],
        "objective": grid[b]["objective"],
        "episodes": len(specs),
        "tied": tied,
        "grid": grid,
        "train_s": round(time.perf_counter() - t0, 1),
    }
    log(
        f"ensemble {cfg.knob}: {values[b]:g}: {grid[b]['objective']:.3f}/min over {len(specs)} training episodes; "
        f"{len(tied)} of the other {len(grid) - 1} values within two paired standard errors of it"
    )
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result


QUICK = {"episodes": 2, "episode_minutes": 10, "workers": 1, "n_samples": 100}

#: Each knob's grid without ``--values`` (``--quick``: its first and last value).
DEFAULT_VALUES = {
    "pessimism": PessimismSearchConfig.pessimism_values,
    "weight": (2.0, 5.0, 10.0),
    "forecast_min": (0.5, 1.0),
    "entry_forecast": (0.0, 1.0),
    "burst": (0.0, 0.25, 0.5, 1.0),
    "limit_target": (0.0, 0.2, 0.3),
}


def run_cli(args: Any) -> int:
    """The body of ``hrl-policy train pessimism``. Returns the exit status."""
    over: dict[str, Any] = dict(QUICK) if args.quick else {}
    for opt, name in (("episodes", "episodes"), ("minutes", "episode_minutes"), ("workers", "workers")):
        v = getattr(args, opt, None)
        if v is not None:
            over[name] = v
    knob = getattr(args, "knob", None) or "pessimism"
    over["knob"] = knob
    if getattr(args, "values", None):
        over["pessimism_values"] = tuple(args.values)
    elif knob in DEFAULT_VALUES:
        grid = DEFAULT_VALUES[knob]
        over["pessimism_values"] = (grid[0], grid[-1]) if args.quick else grid
    try:
        cfg = PessimismSearchConfig(seed=args.seed, **over)
    except ValueError as exc:
        raise option_error(exc) from None
    default = DEFAULT_PESSIMISM if knob == "pessimism" and not args.quick else None
    out = Path(args.out) if args.out else default
    if out is not None and out.is_dir():
        raise ValueError(f"--out: {out} is a directory (expected the file to write, e.g. {out / PESSIMISM_FILE_NAME})")
    if out is not None and knob != "pessimism" and out.name == PESSIMISM_FILE_NAME:
        # a served ensemble would load it and find no pessimism
        raise ValueError(
            f"--out: {out} is the file an ensemble serves its pessimism from; name the {knob} grid otherwise"
        )
    result = tune_pessimism(cfg, out, ray_address=args.ray_address, log=note)
    shown = {k: v for k, v in result.items() if k != "grid"}
    if out is None:  # nothing written: the grid's means on the terminal
        shown["grid"] = [{k: v for k, v in g.items() if k != "episode_objectives"} for g in result["grid"]]
    print(json.dumps(shown, indent=1))
    return 0
