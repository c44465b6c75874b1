"""The verdict on a calibration (``hrl-policy app build``, :mod:`policy.sim.appbuild`): per service and overall,
**good**, **usable** or **not usable**, from the errors of the simulated visit latency against the measured one,
and the plot of measured against simulated latency written next to ``calibration.md``.

What the verdict reads, per service:

- **p50 and p95** (what the objective prices: :mod:`policy.sim.objective` weighs the mean and the p95 latency
  against the SLO): the **hold-out** errors when the build ran its checks (the fit on one half of the traces and
  minutes, compared with the other half: how well the simulator predicts data it was not fitted to), else the fit
  errors (small by construction: the fit targets them; the verdict then says ``fit only``);
- **p99** (never fitted, not priced directly; it decides how many requests cross the timeout, which the app build
  sets at 2x the measured p99, and failed requests weigh 100 in the objective): the fit's error.

Thresholds (absolute error, %; :data:`THRESHOLDS_PCT`):

===========  ======  ========  =====================================================================================
percentile   good    usable    why
===========  ======  ========  =====================================================================================
p50, p95     <= 10   <= 25     the default SLO is 1.3x the measured entry p95 (30 % headroom): within 25 % a run at
                               the measured load stays on the same side of the SLO as the measurement (usable);
                               within 10 % the error is of the order of two halves of the same data disagreeing
                               (the reference Online Boutique build: median hold-out error 2-4 %, its
                               well-sampled services within 7 %) (good)
p99          <= 25   any       the tail is not fitted and the objective does not price it; an error above 25 % makes
                               the failure counts near the timeout unreliable, so the service is at most usable
===========  ======  ========  =====================================================================================

A percentile is judged only where the data can tell. The measured percentile has a sampling error of its own (its
relative standard error, by bootstrap over the service's spans, or over its normal minutes for a target taken from
latency metrics: :func:`relative_standard_error`); a comparison is judged only when three of its standard errors fit
within the 25 % bound (:data:`MAX_NOISE_FRACTION`), so that a perfectly calibrated simulator is called off by more
than 25 % less than 0.3 % of the time, and when at least :data:`MIN_TAIL_SAMPLES` (10) samples lie beyond the
percentile (below that a bootstrap of a tail percentile is itself unreliable: a span-based p95 needs 200 spans, a
p99 1,000). The hold-out compares a fit on one half with the other half, each half √2 noisier than the whole: its
standard error is twice the whole data's and its tail counts are a half's; the fit's p99 compares with the whole
data. A service with few spans or a heavy tail is therefore ``not judged`` at that percentile rather than given a
verdict the data cannot support.

Overall: the worst verdict of the entry services (their visit latency is the end-to-end latency the objective
reads), lowered to ``usable`` when any other service is ``not usable`` (those services' placement and scaling are
misjudged); ``not judged`` when no entry service could be judged.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "VERDICTS",
    "THRESHOLDS_PCT",
    "MIN_TAIL_SAMPLES",
    "MAX_NOISE_FRACTION",
    "Noise",
    "relative_standard_error",
    "ServiceVerdict",
    "CalibrationVerdict",
    "judge",
    "verdict_markdown",
    "plot_calibration",
]

#: From best to worst; ``not judged`` is outside the scale.
VERDICTS = ("good", "usable", "not usable")
#: percentile -> (good, usable) bound on the absolute error in % (``math.inf``: no bound).
THRESHOLDS_PCT: dict[str, tuple[float, float]] = {"p50": (10.0, 25.0), "p95": (10.0, 25.0), "p99": (25.0, math.inf)}
#: A percentile needs this many samples beyond it (n x (1 - q)) before its bootstrap error means anything.
MIN_TAIL_SAMPLES = 10
#: A comparison is judged when 3 standard errors of it fit within this bound (%).
NOISE_BOUND_PCT = 25.0
#: ... i.e. when its standard error is at most this fraction of the bound.
MAX_NOISE_FRACTION = 1.0 / 3.0
_Q = {"p50": 50.0, "p95": 95.0, "p99": 99.0}
QS = ("p50", "p95", "p99")


def relative_standard_error(
    values: Any, statistic: str = "percentiles", *, resamples: int = 200, seed: int = 0
) -> tuple[float, float, float]:
    """The relative standard error (%) at p50, p95, p99 of a measured target, by bootstrap (Efron and Tibshirani
    1993, ch. 6): ``statistic="percentiles"``: ``values`` (n,) are visit durations and the target is their
    percentile; ``"medians"``: ``values`` (m, 3) are per-minute p50 / p95 / p99 and the target is each column's
    median over the minutes. NaN where there are fewer than 2 values or the target is not > 0."""
    rng = np.random.default_rng(seed)
    x = np.asarray(values, dtype=np.float64)
    out = []
    for i, q in enumerate(_Q.values()):
        col = x if statistic == "percentiles" else x[:, i]
        col = col[np.isfinite(col)]
        if len(col) < 2:
            out.append(math.nan)
            continue
        idx = rng.integers(0, len(col), size=(resamples, len(col)))
        if statistic == "percentiles":
            point, boot = np.percentile(col, q), np.percentile(col[idx], q, axis=1)
        else:
            point, boot = np.median(col), np.median(col[idx], axis=1)
        out.append(100.0 * float(np.std(boot)) / point if point > 0 else math.nan)
    return (out[0], out[1], out[2])


@dataclass(frozen=True)
class Noise:
    """The sampling error of a service's measured target: ``rel_se_pct`` (p50, p95, p99; %, NaN unknown) of the
    whole data's percentile; ``spans``: how many visit durations it rests on (None: a target from latency metrics,
    medians over ``minutes`` normal minutes)."""

    rel_se_pct: tuple[float, float, float]
    spans: int | None = None
    minutes: int | None = None

    @property
    def what(self) -> str:
        """``527 spans`` or ``1146 minutes``, for the report."""
        return f"{self.spans} spans" if self.spans is not None else f"{self.minutes or 0} minutes"

    def comparison_se_pct(self, q: str, holdout: bool) -> float:
        """The standard error (%) of a comparison at percentile ``q``: twice the whole data's for the hold-out
        (two halves, each √2 noisier), the whole data's for the fit."""
        se = self.rel_se_pct[("p50", "p95", "p99").index(q)]
        return 2.0 * se if holdout else se

    def tail_ok(self, q: str, holdout: bool = False) -> bool:
        """At least :data:`MIN_TAIL_SAMPLES` samples beyond percentile ``q`` (a half's for the hold-out), or that
        many normal minutes for a metrics target."""
        if self.spans is not None:
            n = self.spans / 2 if holdout else self.spans
            return n * (1.0 - _Q[q] / 100.0) >= MIN_TAIL_SAMPLES
        return (self.minutes or 0) >= MIN_TAIL_SAMPLES

    def enough(self, q: str, holdout: bool = False) -> bool:
        """Whether the comparison at percentile ``q`` can be judged (module docstring): :meth:`tail_ok` and a
        standard error of the comparison at most a third of 25 %."""
        se = self.comparison_se_pct(q, holdout)
        return self.tail_ok(q, holdout) and math.isfinite(se) and se <= MAX_NOISE_FRACTION * NOISE_BOUND_PCT


@dataclass(frozen=True)
class ServiceVerdict:
    """One service: ``verdict`` (one of :data:`VERDICTS`, or ``not judged``), ``basis`` (``hold-out`` or ``fit
    only``), the judged absolute errors by percentile (%; None: not judged), and the ``reasons`` (one line each)."""

    service: str
    verdict: str
    basis: str
    errors_pct: dict[str, float | None]
    reasons: tuple[str, ...] = ()
    entry: bool = False


@dataclass(frozen=True)
class CalibrationVerdict:
    """Every service's verdict and the ``overall`` one with its ``reasons``."""

    services: tuple[ServiceVerdict, ...]
    overall: str
    reasons: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        """``{"overall", "reasons", "thresholds_pct", "min_tail_samples", "services": [...]}``."""
        return {
            "overall": self.overall,
            "reasons": list(self.reasons),
            "thresholds_pct": {
                q: {"good": g, "usable": None if math.isinf(u) else u} for q, (g, u) in THRESHOLDS_PCT.items()
            },
            "judged_when_standard_error_pct_at_most": round(MAX_NOISE_FRACTION * NOISE_BOUND_PCT, 2),
            "min_tail_samples": MIN_TAIL_SAMPLES,
            "services": [
                {
                    "service": v.service,
                    "entry": v.entry,
                    "verdict": v.verdict,
                    "basis": v.basis,
                    "errors_pct": v.errors_pct,
                    "reasons": list(v.reasons),
                }
                for v in self.services
            ],
        }


def _grade(q: str, err: float) -> int:
    """0 good, 1 usable, 2 not usable for absolute error ``err`` (%) at percentile ``q``."""
    good, usable = THRESHOLDS_PCT[q]
    return 0 if err <= good else (1 if err <= usable else 2)


def _finite(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


def _judge_service(
    service: str,
    fit: Sequence[float | None],
    held: Sequence[float | None] | None,
    noise: Noise | None,
    entry: bool,
) -> ServiceVerdict:
    basis = "hold-out" if held is not None else "fit only"
    errors: dict[str, float | None] = {}
    grades: list[tuple[int, str]] = []
    reasons: list[str] = []
    unjudged: list[str] = []
    for i, q in enumerate(("p50", "p95", "p99")):
        from_holdout = q != "p99" and held is not None
        e = _finite(held[i]) if from_holdout else _finite(fit[i])
        errors[q] = None
        if e is None:
            unjudged.append(q)
            continue
        if noise is not None and not noise.enough(q, holdout=from_holdout):
            se = noise.comparison_se_pct(q, from_holdout)
            why = f"±{se:.0f} %" if noise.tail_ok(q, from_holdout) and math.isfinite(se) else "too few beyond it"
            unjudged.append(f"{q} ({why})")
            continue
        errors[q] = round(abs(e), 2)
        g = _grade(q, abs(e))
        grades.append((g, q))
        if g:
            good, usable = THRESHOLDS_PCT[q]
            bound = f"{good:g} %" if g == 1 or math.isinf(usable) else f"{usable:g} %"
            reasons.append(f"{q} off by {e:+.1f} % ({'hold-out' if from_holdout else 'fit'}; above {bound})")
    if unjudged:
        what = f" ({noise.what})" if noise is not None and noise.what else ""
        reasons.append(f"not judged: {', '.join(unjudged)}: the measurement{what} cannot tell")
    if not any(q in ("p50", "p95") for _g, q in grades):
        return ServiceVerdict(service, "not judged", basis, errors, tuple(reasons), entry)
    worst = max(g for g, _q in grades)
    return ServiceVerdict(service, VERDICTS[worst], basis, errors, tuple(reasons), entry)


def judge(
    fit_errors_pct: Mapping[str, Sequence[float | None]],
    holdout_errors_pct: Mapping[str, Sequence[float | None]] | None,
    noise: Mapping[str, Noise],
    entry: Iterable[str],
) -> CalibrationVerdict:
    """The verdict (module docstring) from ``fit_errors_pct`` (service -> signed errors at p50, p95, p99, %),
    ``holdout_errors_pct`` (service -> signed hold-out errors at p50, p95, %; None: the build skipped its checks),
    ``noise`` (service -> the sampling error of its measured target; a service without an entry here is judged on
    its errors alone) and the ``entry`` services."""
    entries = set(entry)
    out = []
    for s in sorted(fit_errors_pct):
        held = None if holdout_errors_pct is None else holdout_errors_pct.get(s)
        out.append(_judge_service(s, fit_errors_pct[s], held, noise.get(s), s in entries))
    judged_entry = [v for v in out if v.entry and v.verdict != "not judged"]
    reasons: list[str] = []
    if not judged_entry:
        return CalibrationVerdict(tuple(out), "not judged", ("no entry service could be judged",))
    worst = max(VERDICTS.index(v.verdict) for v in judged_entry)
    for v in judged_entry:
        reasons.append(f"entry {v.service}: {v.verdict}")
    bad = [v.service for v in out if not v.entry and v.verdict == "not usable"]
    if bad:
        reasons.append(f"not usable: {', '.join(bad)} (the overall verdict is at most usable)")
        worst = max(worst, 1)
    if holdout_errors_pct is None:
        reasons.append("fit errors only (built with --skip-checks): run the hold-out test for a predictive verdict")
    return CalibrationVerdict(tuple(out), VERDICTS[worst], tuple(reasons))


def _cell(v: float | None) -> str:
    return "–" if v is None else f"{v:.1f}"


def verdict_markdown(verdict: CalibrationVerdict, plot: str | None) -> str:
    """The ``## Verdict`` section of ``calibration.md``: thresholds and why, one row per service, the overall
    verdict, and the plot (``plot``: its file name next to the report; None: not drawn, with the reason)."""
    out = [
        "## Verdict",
        "",
        "Judged on the absolute error of the simulated visit latency: p50 and p95 (the objective's latency terms) "
        "from the hold-out test (fit on one half of the data, compared with the other), p99 (not fitted; it sets "
        "how many requests cross the timeout) from the fit. Method: `policy/sim/fit_verdict.py`.",
        "",
        "| percentile | good | usable | why |",
        "|---|---|---|---|",
        "| p50, p95 | ≤ 10 % | ≤ 25 % | the default SLO is 1.3x the measured entry p95: within 25 % a run at the "
        "measured load stays on the measurement's side of the SLO; 10 % is what two halves of the same data "
        "disagree by (the reference Online Boutique build: median hold-out error 2-4 %) |",
        "| p99 | ≤ 25 % | any | not fitted nor priced; above 25 % the failure counts near the timeout are "
        "unreliable, so the service is at most usable |",
        "",
        "A percentile is judged where the data can tell: when three standard errors of the comparison (the measured "
        "percentile's own sampling error, by bootstrap over the spans or the normal minutes; twice that for the "
        f"hold-out's two halves) fit within 25 % and at least {MIN_TAIL_SAMPLES} samples lie beyond it (a span-based "
        "p95 needs 200 spans, a p99 1,000; a half's for the hold-out); elsewhere it says `not judged` (with the "
        "standard error where that is what fails).",
        "",
        "| service | verdict | basis | abs. error p50 / p95 / p99 % | why |",
        "|---|---|---|---|---|",
    ]
    for v in verdict.services:
        e = v.errors_pct
        name = f"{v.service} (entry)" if v.entry else v.service
        out.append(
            f"| {name} | **{v.verdict}** | {v.basis} | {_cell(e.get('p50'))} / {_cell(e.get('p95'))} / "
            f"{_cell(e.get('p99'))} | {'; '.join(v.reasons) or '–'} |"
        )
    out += ["", f"**Overall: {verdict.overall}** — {'; '.join(verdict.reasons)}.", ""]
    if plot is not None:
        out += [f"![measured against simulated latency per service]({plot})", ""]
    return "\n".join(out)


_COLORS = {"good": "#1b9e77", "usable": "#d95f02", "not usable": "#d7191c"}
_FITTED = "#4d4d4d"


def _point_style(v: ServiceVerdict | None, q: str, judged_here: bool) -> dict[str, Any]:
    """How one point is drawn: coloured by its own grade when the verdict judged it (``judged_here``: this panel
    holds the error the verdict read), hollow grey when the data could not tell, dark grey when it is a fitted
    value the verdict does not read (p50 / p95 of the fit when a hold-out exists)."""
    e = None if v is None else v.errors_pct.get(q)
    if not judged_here:
        return {"color": _FITTED, "s": 22, "alpha": 0.6}
    if e is None:
        return {"facecolors": "none", "edgecolors": "#8c8c8c", "s": 36}
    return {"color": _COLORS[VERDICTS[_grade(q, e)]], "s": 40}


def plot_calibration(
    rows: Sequence[Mapping[str, Any]],
    holdout_rows: Sequence[Mapping[str, Any]] | None,
    verdict: CalibrationVerdict,
    path: str | Path,
    title: str = "",
) -> Path:
    """Measured (x) against simulated (y) visit latency per service, log-log: the fit's p50 / p95 / p99 (left) and,
    when the build ran its checks, the hold-out's p50 / p95 (right); the diagonal and the good (±10 %) and usable
    (±25 %) bands. A point the verdict judged is coloured by its own grade at its percentile's thresholds, one the
    data cannot tell is hollow, a fitted value the verdict does not read is dark grey; services are labelled at
    their p95. ``rows``: :func:`policy.sim.calibrate.error_table`; ``holdout_rows``: the hold-out's ``services``.
    Writes a PNG to ``path`` and returns it. Needs matplotlib (ImportError otherwise)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by = {v.service: v for v in verdict.services}
    held = bool(holdout_rows)
    # (title, rows, percentiles, the percentiles whose error the verdict reads from this panel)
    panels = [("fit (p50 / p95 fitted, p99 not)", rows, ("p50", "p95", "p99"), ("p99",) if held else QS)]
    if holdout_rows:
        panels.append(("hold-out: fit on one half, the other half measured", holdout_rows, ("p50", "p95"), QS))
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 5.6), squeeze=False)
    markers = {"p50": "o", "p95": "s", "p99": "^"}
    for ax, (name, data, qs, reads) in zip(axes[0], panels):
        xs: list[float] = []
        for r in data:
            for q in qs:
                m, sim = _finite(r.get(f"measured_{q}_ms")), _finite(r.get(f"simulated_{q}_ms"))
                if m is None or sim is None or m <= 0 or sim <= 0:
                    continue
                xs += [m, sim]
                style = _point_style(by.get(r["service"]), q, q in reads)
                ax.scatter(m, sim, marker=markers[q], zorder=3, **style)
                if q == "p95":
                    ax.annotate(r["service"], (m, sim), fontsize=6.5, xytext=(3, -9), textcoords="offset points")
        if xs:
            lo, hi = min(xs) / 1.6, max(xs) * 1.6
            grid = [lo, hi]
            ax.plot(grid, grid, color="0.2", lw=0.8)
            ax.fill_between(grid, [g * 0.9 for g in grid], [g * 1.1 for g in grid], color="#1b9e77", alpha=0.12)
            ax.fill_between(grid, [g * 0.75 for g in grid], [g * 1.25 for g in grid], color="#d95f02", alpha=0.07)
            ax.set_xlim(lo, hi)
            ax.set_ylim(lo, hi)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("measured visit latency (ms)")
        ax.set_ylabel("simulated visit latency (ms)")
        ax.set_title(name, fontsize=10)
        ax.grid(alpha=0.25, which="both")
    line = plt.Line2D
    handles = [line([], [], ls="", marker=markers[q], color="0.3", label=q) for q in QS]
    handles += [line([], [], ls="", marker="o", color=c, label=f"judged {k}") for k, c in _COLORS.items()]
    handles += [
        line([], [], ls="", marker="o", mfc="none", mec="#8c8c8c", label="not judged (the data cannot tell)"),
        line([], [], ls="", marker="o", color=_FITTED, alpha=0.6, label="fitted (not judged)"),
        plt.Rectangle((0, 0), 1, 1, color="#1b9e77", alpha=0.25, label="±10 %"),
        plt.Rectangle((0, 0), 1, 1, color="#d95f02", alpha=0.15, label="±25 %"),
    ]
    axes[0][0].legend(handles=handles, fontsize=7, loc="upper left")
    fig.suptitle(title or f"calibration: overall {verdict.overall}", fontsize=11)
    fig.tight_layout()
    p = Path(path)
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p
