"""What every part of the policy benchmark shares: its paths, the default apps and traces, the summary's
schema, the latency histogram's edges, a benchmark mode (:class:`Mode`) and the mean with its 95 % confidence
interval (:func:`mean_ci95`, Student t)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from policy.sim.engine import METRIC_KEYS

__all__ = [
    "ROOT",
    "BENCH_DIR",
    "APPS",
    "TRACES",
    "TUNING_SEEDS",
    "SCHEMA",
    "RESULT_KEYS",
    "HIST_EDGES_MS",
    "t975",
    "mean_ci95",
    "Mode",
    "StackRoles",
]


ROOT = Path(__file__).resolve().parents[2]


BENCH_DIR = ROOT / "benchmarks"


#: The built-in applications (the threshold autoscaler is tuned for each).
APPS = (
    "online-boutique",
    "sock-shop",
    "dsb-hotel-reservation",
    "dsb-social-network",
    "dsb-media-microservices",
    "alibaba",
)


#: The named load traces.
TRACES = ("nasa", "twitter", "bursty")


#: Seeds of the tuning runs (the threshold autoscaler's grid search); disjoint from every evaluation seed.
TUNING_SEEDS = (1000, 1001)


#: The summary.json schema :func:`build_summary` writes.
SCHEMA = 4

#: What the summary reports of every run, per stack and cell: the simulator's eight metric keys and ``objective``
#: (the mean cost per minute of the one objective, :mod:`policy.sim.objective`; lower is better).
RESULT_KEYS = (*METRIC_KEYS, "objective")


#: Latency histogram edges (ms) for the CDF plots: log-spaced 0.1 ms .. 100 s.
HIST_EDGES_MS = np.logspace(-1, 5, 601)


# Student t 0.975 quantiles for 1..30 degrees of freedom (two-sided 95 %).
_T975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` >= 1 degrees of freedom (table to 30, then
    1.96 + 2.4/df, within 0.002 of the exact value)."""
    if df < 1:
        raise ValueError(f"df: must be >= 1, got {df}")
    return _T975[df - 1] if df <= 30 else 1.96 + 2.4 / df


def mean_ci95(values: Sequence[float]) -> dict[str, float]:
    """``{"mean", "ci95"}`` of per-seed values: ci95 = t(0.975, n-1) × sd / sqrt(n) (0 for one value or
    identical values). Non-finite values raise ValueError (the summary never holds null or inf)."""
    x = np.asarray(values, dtype=np.float64)
    if len(x) == 0 or not np.all(np.isfinite(x)):
        raise ValueError(f"metric values must be finite and non-empty, got {list(values)!r}")
    m = float(x.mean())
    if len(x) < 2 or float(np.ptp(x)) == 0.0:
        return {"mean": m, "ci95": 0.0}
    sd = float(x.std(ddof=1))
    return {"mean": m, "ci95": t975(len(x) - 1) * sd / math.sqrt(len(x))}


@dataclass(frozen=True)
class Mode:
    """A benchmark size (a mode of the plan, with the command line's overrides): its ``name`` (quick, full), the
    ``plan`` file, ``seeds``, the run length ``minutes`` (minutes, ``"scenario"`` or ``"window"``; cells may
    override it), ``n_samples`` (sampled user requests per minute; None: the simulator's default), the
    baselines' ``sweep`` (quick, full or none), the ``training_seeds`` the learned stacks run at, the ``oracle``
    (the setting of ``lookahead-oracle`` the mode runs; empty: none) and ``bundles``, the bundles root the learned
    stacks load (``--bundles``, an absolute path; empty: the committed ``policy/bundles``)."""

    name: str
    seeds: tuple[int, ...]
    minutes: int | str
    n_samples: int | None
    sweep: str = "quick"
    plan: str = ""
    training_seeds: tuple[int, ...] = (0,)
    oracle: str = ""
    bundles: str = ""


@dataclass(frozen=True)
class StackRoles:
    """Which stacks of a bench play which part: ``policies`` (the stacks planned or asked for, in table order, at
    training seed 0), ``baselines`` (every baseline setting: the fronts and the best baseline), ``contenders`` (the
    stacks compared at equal CPU and by their share of the oracle's gain), ``oracle`` (the ``lookahead-oracle``
    setting run; "" none), ``learned`` (the stacks whose spread across training seeds is reported, at training seed
    0) and ``order`` (every stack run, in table order)."""

    policies: tuple[str, ...] = ()
    baselines: tuple[str, ...] = ()
    contenders: tuple[str, ...] = ()
    oracle: str = ""
    learned: tuple[str, ...] = ()
    order: tuple[str, ...] = ()
