"""Request-rate traces (real ones: NASA-HTTP 1995, Twitter 2021; see policy/data/traces/PROVENANCE.md) as
named, fixed windows at 1-minute steps, and their scaling to an application's capacity.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from policy.documents import FileError, open_text

__all__ = [
    "TraceError",
    "TraceWindow",
    "WINDOWS",
    "read_counts",
    "load_trace",
    "bursty_trace",
    "scale_to_peak",
    "FlashCrowd",
    "apply_flash_crowds",
    "RateDrift",
]


class TraceError(ValueError):
    """A trace file or name is invalid; the message names the file/name, line and value."""


@dataclass(frozen=True)
class TraceWindow:
    """A fixed window of a per-minute request-count trace.

    ``file``: CSV with header ``minute_index,requests`` (or any two columns: index, count); ``start_min`` and
    ``length_min`` select the window. ``description`` says why this window.
    """

    name: str
    file: str
    start_min: int
    length_min: int
    description: str = ""


def data_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "data" / "traces"


#: The named windows used by the demo, `hrl-policy simulate` and `make bench`.
WINDOWS: dict[str, TraceWindow] = {
    "nasa": TraceWindow(
        "nasa",
        "nasa_requests_per_minute.csv",
        start_min=3 * 1440 + 9 * 60,
        length_min=360,
        description="NASA-HTTP, 3 July 1995 09:00-15:00 (server time): the daily ramp-up to the peak",
    ),
    "twitter": TraceWindow(
        "twitter",
        "twitter_requests_per_minute.csv",
        start_min=1440 + 4 * 60,
        length_min=360,
        description="Twitter stream Aug 2021, day 2 04:00-10:00 (trace time): two swings between 3k and 6k/min",
    ),
}


@lru_cache(maxsize=16)
def read_counts(path: str) -> np.ndarray:
    """Read a per-minute trace CSV (header + ``index,count`` rows) → (T,) float64 counts per minute.

    Raises :class:`TraceError` naming file, line and value for a malformed row or a negative count.
    """
    p = Path(path)
    try:
        fh = open_text(p)  # the hardened reader: gzip, size, UTF-8 (policy.documents)
    except FileError as exc:
        raise TraceError(str(exc)) from None
    out: list[float] = []
    with fh:
        try:
            rows = csv.reader(fh)
            header = next(rows, None)
            if header is None:
                raise TraceError(f"{p}: empty file")
            for lineno, row in enumerate(rows, start=2):
                if not row:
                    continue
                if len(row) < 2:
                    raise TraceError(f"{p}:{lineno}: expected 2 columns (index,count), got {row!r}")
                try:
                    v = float(row[1])
                except ValueError:
                    raise TraceError(f"{p}:{lineno}: count: not a number: {row[1]!r}") from None
                if not np.isfinite(v) or v < 0:
                    raise TraceError(f"{p}:{lineno}: count: must be a finite number >= 0, got {row[1]!r}")
                out.append(v)
        except FileError as exc:  # bad gzip data, not UTF-8: where reading stopped
            raise TraceError(str(exc)) from None
    if not out:
        raise TraceError(f"{p}: no data rows")
    return np.asarray(out, dtype=np.float64)


def load_trace(name_or_path: str, minutes: int | None = None, offset_min: int = 0) -> np.ndarray:
    """Requests per minute of a named window (``nasa``, ``twitter``, ``bursty``) or of a CSV file path.

    Returns (minutes,) float64 (the whole window when ``minutes`` is None). A window shorter than asked is
    an error (never silently padded).
    """
    if name_or_path == "bursty":
        n = minutes or 360
        return bursty_trace(n + offset_min)[offset_min : offset_min + n]
    w = WINDOWS.get(name_or_path)
    if w is not None:
        counts = read_counts(str(data_dir() / w.file))
        start, length = w.start_min, w.length_min
    else:
        p = Path(name_or_path)
        if not p.exists():
            raise TraceError(
                f"trace: unknown name or missing file {name_or_path!r} "
                f"(named traces: {', '.join(sorted([*WINDOWS, 'bursty']))})"
            )
        counts = read_counts(str(p))
        start, length = 0, len(counts)
    n = length - offset_min if minutes is None else minutes
    if offset_min < 0 or n <= 0 or offset_min + n > length or start + offset_min + n > len(counts):
        raise TraceError(
            f"trace {name_or_path!r}: window of {length} min cannot give minutes [{offset_min}, {offset_min + n})"
        )
    return counts[start + offset_min : start + offset_min + n].copy()


def bursty_trace(minutes: int, seed: int = 20240710, base: float = 100.0) -> np.ndarray:
    """A synthetic flash-crowd trace (requests/minute): a slow diurnal-like baseline with 3-4 sudden bursts
    of 3-5x lasting 5-20 minutes. Deterministic for a given seed (the default is fixed so the named
    trace ``bursty`` never changes)."""
    rng = np.random.default_rng(seed)
    t = np.arange(minutes, dtype=np.float64)
    y = base * (1.0 + 0.3 * np.sin(2 * np.pi * t / 240.0))
    n_bursts = max(1, int(round(minutes / 90)))
    for _ in range(n_bursts):
        start = int(rng.integers(0, max(1, minutes - 5)))
        dur = int(rng.integers(5, 21))
        height = float(rng.uniform(3.0, 5.0))
        ramp = np.clip((t - start) / 2.0, 0, 1) * np.clip((start + dur - t) / 2.0, 0, 1)
        y = y * (1.0 + (height - 1.0) * ramp)
    return y * rng.uniform(0.95, 1.05, size=minutes)


def scale_to_peak(counts_per_min: np.ndarray, peak_rps: float) -> np.ndarray:
    """Scale a per-minute count series to arrival rates (rps) whose maximum equals ``peak_rps``.

    (T,) → (T,) float64 rps. An all-zero series stays zero.
    """
    m = float(np.max(counts_per_min)) if len(counts_per_min) else 0.0
    if m <= 0:
        return np.zeros_like(counts_per_min, dtype=np.float64)
    return counts_per_min.astype(np.float64) * (peak_rps / m)


@dataclass(frozen=True)
class FlashCrowd:
    """A flash crowd: from minute ``at_min`` the rate rises linearly over ``ramp_min`` minutes to ``factor``
    times the trace, holds for ``duration_min`` minutes (ramp-up included) and falls back over ``ramp_min``.
    The shape of the synthetic ``bursty`` trace's bursts (3-5x for 5-20 minutes); flash crowds as sudden,
    short surges of legitimate requests: Jung, Krishnamurthy, Rabinovich, WWW 2002."""

    at_min: int
    duration_min: int
    factor: float
    ramp_min: int = 1

    def __post_init__(self) -> None:
        if self.at_min < 0:
            raise ValueError(f"flashCrowds: atMin must be >= 0, got {self.at_min}")
        if self.duration_min < 1:
            raise ValueError(f"flashCrowds: durationMin must be >= 1, got {self.duration_min}")
        if not (math.isfinite(self.factor) and self.factor > 0):
            raise ValueError(f"flashCrowds: factor must be a finite number > 0, got {self.factor!r}")
        if self.ramp_min < 0:
            raise ValueError(f"flashCrowds: rampMin must be >= 0, got {self.ramp_min}")

    def multiplier(self, t: np.ndarray) -> np.ndarray:
        """(T,) rate multiplier at minutes ``t`` (indices into the window)."""
        r = max(self.ramp_min, 1e-9)
        end = self.at_min + self.duration_min
        up = np.clip((t - self.at_min + 1) / r, 0.0, 1.0) if self.ramp_min else (t >= self.at_min).astype(float)
        down = np.clip((end - t) / r, 0.0, 1.0) if self.ramp_min else (t < end).astype(float)
        return 1.0 + (self.factor - 1.0) * np.minimum(up, down)


def apply_flash_crowds(counts: np.ndarray, crowds: tuple[FlashCrowd, ...] | list[FlashCrowd]) -> np.ndarray:
    """``counts`` (T,) with every flash crowd's multiplier applied (minutes relative to the window start)."""
    out = np.asarray(counts, dtype=np.float64).copy()
    t = np.arange(len(out), dtype=np.float64)
    for c in crowds:
        out = out * c.multiplier(t)
    return out


@dataclass(frozen=True)
class RateDrift:
    """Per-service rate drift: each call edge's calls per request is multiplied by its own slowly varying
    factor, so the services' rates drift apart over a run instead of following the entry rate in lockstep
    (Alibaba's microservice traces show call graphs of one online service that change between requests and
    over time: Luo et al., "Characterizing Microservice Dependency and Performance: Alibaba Trace Analysis",
    SoCC 2021).

    The factor of each edge is ``exp(x_t − σ²/2)`` (mean 1) with ``x`` a stationary Gaussian AR(1) process,
    ``x_t = φ x_{t−1} + √(1 − φ²) σ ε_t``, ``φ = exp(−1 / tau_min)``; factors are clipped to
    ``[1 / max_factor, max_factor]``. Deterministic per ``seed``. ``sigma`` and ``tau_min`` are documented
    guesses (the public Alibaba samples have no per-service rate series: MSRTQps is not among them).
    """

    sigma: float
    tau_min: float
    seed: int = 0
    max_factor: float = 3.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.sigma) and 0 <= self.sigma <= 2):
            raise ValueError(f"drift.sigma: must be in [0, 2], got {self.sigma!r}")
        if not (math.isfinite(self.tau_min) and self.tau_min > 0):
            raise ValueError(f"drift.tauMin: must be a finite number > 0, got {self.tau_min!r}")
        if not (math.isfinite(self.max_factor) and self.max_factor >= 1):
            raise ValueError(f"drift.maxFactor: must be a finite number >= 1, got {self.max_factor!r}")

    def multipliers(self, minutes: int, n_edges: int) -> np.ndarray:
        """(minutes, n_edges) factors, one row per simulated minute."""
        rng = np.random.default_rng(np.random.SeedSequence([int(self.seed), 0x64726966]))
        phi = math.exp(-1.0 / self.tau_min)
        x = np.empty((minutes, n_edges))
        cur = rng.standard_normal(n_edges) * self.sigma
        for t in range(minutes):
            if t:
                cur = phi * cur + math.sqrt(1 - phi * phi) * self.sigma * rng.standard_normal(n_edges)
            x[t] = cur
        return np.clip(np.exp(x - self.sigma**2 / 2), 1.0 / self.max_factor, self.max_factor)
