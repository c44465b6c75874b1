"""Training and held-out data for the workload predictor (numpy only), disjoint from the evaluation windows.

Sources: the NASA-HTTP and Twitter per-minute traces (policy/data/traces) with the named evaluation windows
(:data:`policy.sim.traces.WINDOWS`) cut out together with a margin of :data:`EXCLUDE_MARGIN_MIN` on each side,
and synthetic bursty traces (:func:`policy.sim.traces.bursty_trace`) with seeds other than the named ``bursty``
trace's. Each real trace's remaining minutes are split in time: the first ``1 - heldout_frac`` train, the
last ``heldout_frac`` are held out; synthetic traces use :data:`TRAIN_SEEDS` for training and
:data:`HELDOUT_SEEDS` held out.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from policy.sim.traces import WINDOWS, bursty_trace, data_dir, read_counts

__all__ = [
    "EXCLUDE_MARGIN_MIN",
    "TRAIN_SEEDS",
    "HELDOUT_SEEDS",
    "BURSTY_MINUTES",
    "Windows",
    "segments",
    "windows_of",
    "dataset",
    "training_series",
    "heldout_sets",
]

#: Minutes cut out before and after each evaluation window (one day).
EXCLUDE_MARGIN_MIN = 1440
#: Seeds of the synthetic bursty traces used to train / to measure held-out error (the named ``bursty``
#: trace's seed, 20240710, is in neither).
TRAIN_SEEDS = tuple(range(1, 41))
HELDOUT_SEEDS = tuple(range(9001, 9011))
BURSTY_MINUTES = 1440


class Windows(NamedTuple):
    """Forecasting examples: ``x`` (B, window) past rates, ``y`` (B, horizon) the next minutes (same unit)."""

    x: np.ndarray
    y: np.ndarray


def segments(trace: str, heldout_frac: float = 0.2) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(train segments, held-out segments) of a real trace (``nasa`` or ``twitter``): the whole per-minute
    series minus its evaluation window ± :data:`EXCLUDE_MARGIN_MIN`, split in time."""
    w = WINDOWS[trace]
    counts = read_counts(str(data_dir() / w.file))
    lo = max(w.start_min - EXCLUDE_MARGIN_MIN, 0)
    hi = min(w.start_min + w.length_min + EXCLUDE_MARGIN_MIN, len(counts))
    parts = [counts[:lo], counts[hi:]]
    total = sum(len(p) for p in parts)
    cut = int(round(total * (1.0 - heldout_frac)))
    train, held = [], []
    seen = 0
    for p in parts:
        a, b = max(min(cut - seen, len(p)), 0), len(p)
        if a > 0:
            train.append(p[:a])
        if b > a:
            held.append(p[a:])
        seen += len(p)
    return train, held


def windows_of(series: np.ndarray, window: int, horizon: int, stride: int = 1) -> Windows:
    """Every (window → horizon) example of one series, starting every ``stride`` minutes."""
    s = np.asarray(series, dtype=np.float64)
    n = len(s) - window - horizon + 1
    if n <= 0:
        return Windows(np.zeros((0, window)), np.zeros((0, horizon)))
    starts = np.arange(0, n, stride)
    idx = starts[:, None] + np.arange(window + horizon)[None, :]
    full = s[idx]
    return Windows(full[:, :window], full[:, window:])


def dataset(
    window: int = 30,
    horizon: int = 5,
    stride: int = 2,
    heldout: bool = False,
    bursty_seeds: tuple[int, ...] | None = None,
) -> Windows:
    """The predictor's training set (``heldout=False``) or held-out set (``True``): NASA + Twitter segments
    and the synthetic bursty traces, all windows concatenated (rates in the traces' own units; the predictor
    normalises each window by its mean)."""
    xs, ys = [], []
    for trace in ("nasa", "twitter"):
        train, held = segments(trace)
        for seg in held if heldout else train:
            w = windows_of(seg, window, horizon, stride)
            xs.append(w.x)
            ys.append(w.y)
    seeds = bursty_seeds if bursty_seeds is not None else (HELDOUT_SEEDS if heldout else TRAIN_SEEDS)
    for s in seeds:
        w = windows_of(bursty_trace(BURSTY_MINUTES, seed=s), window, horizon, stride)
        xs.append(w.x)
        ys.append(w.y)
    return Windows(np.concatenate(xs), np.concatenate(ys))


def training_series(rng: np.random.Generator, minutes: int) -> tuple[str, np.ndarray]:
    """One random per-minute series of ``minutes`` for the autoscaler's training episodes, never overlapping
    an evaluation window: a real trace's training segment (NASA or Twitter) or a bursty trace of a training
    seed. The series is centred on the peak of a random 6-hour region (as `make bench-quick` centres its runs
    on each window's peak), shifted by up to ±1/3 of ``minutes``. Returns (description, counts)."""
    kind = rng.choice(["nasa", "twitter", "bursty"])
    if kind == "bursty":
        seed = int(rng.choice(TRAIN_SEEDS))
        s = bursty_trace(BURSTY_MINUTES, seed=seed)
        name = f"bursty-seed{seed}"
    else:
        train, _ = segments(str(kind))
        seg = max(train, key=len) if rng.random() < 0.5 else train[int(rng.integers(len(train)))]
        s = seg
        name = str(kind)
    region = min(360, len(s))
    r0 = int(rng.integers(0, len(s) - region + 1))
    reg = s[r0 : r0 + region]
    peak = r0 + int(np.argmax(reg))
    jitter = int(rng.integers(-minutes // 3, minutes // 3 + 1))
    start = int(min(max(peak - minutes // 2 + jitter, 0), len(s) - minutes))
    return f"{name}@{start}", np.asarray(s[start : start + minutes], dtype=np.float64)


def heldout_sets(window: int = 30, horizon: int = 5, stride: int = 2) -> dict[str, Windows]:
    """The held-out windows per source: ``nasa``, ``twitter`` (the last 20 % of each trace outside its
    evaluation window) and ``bursty`` (seeds :data:`HELDOUT_SEEDS`)."""
    out: dict[str, Windows] = {}
    for trace in ("nasa", "twitter"):
        _, held = segments(trace)
        ws = [windows_of(seg, window, horizon, stride) for seg in held]
        out[trace] = Windows(np.concatenate([w.x for w in ws]), np.concatenate([w.y for w in ws]))
    ws = [windows_of(bursty_trace(BURSTY_MINUTES, seed=s), window, horizon, stride) for s in HELDOUT_SEEDS]
    out["bursty"] = Windows(np.concatenate([w.x for w in ws]), np.concatenate([w.y for w in ws]))
    return out
