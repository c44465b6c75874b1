"""The policy benchmark's plots: dot-and-interval panels per metric (the objective among them), latency CDFs that
count failed requests at the app's timeout, and Pareto plots of every baseline setting against CPU core-hours with
the fronts, the lookahead oracle and the learned stacks.

Style: ``hrl-scheduler`` in one strong colour and a larger marker, the lookahead oracle (the achievable target) as a
black star, the other learned stacks in a muted blue, baselines in greys; linear axes; confidence intervals clipped
to the metric's range (no interval below 0 or above 100 %); a value that was not measured is written as "missing",
never drawn as zero; legends outside the data area.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .pareto import FRONT_METRICS

__all__ = ["HIGHLIGHT", "style_of", "clip_interval", "failure_aware_cdf", "metric_panels", "latency_cdfs", "pareto"]

#: The stack the plots highlight.
HIGHLIGHT = "hrl-scheduler"

_HIGHLIGHT_COLOR = "#d62728"
_LEARNED_COLOR = "#6a8fb5"
_BASELINE_COLORS = ("#444444", "#777777", "#999999", "#555555", "#888888", "#aaaaaa")
_ORACLE_COLOR = "#000000"
#: The achievable target's stack family, drawn as a black star.
ORACLE = "lookahead-oracle"
_PCT = ("failed_pct", "slo_violation_pct", "cross_node_call_pct")


def style_of(stack: str, baselines: Sequence[str], k: int = 0) -> dict[str, Any]:
    """Matplotlib style of a stack: the highlighted one, the lookahead oracle (black star), a baseline (grey,
    ``k``-th) or another learned stack."""
    if stack == HIGHLIGHT:
        return {"color": _HIGHLIGHT_COLOR, "marker": "o", "ms": 7, "lw": 2.4, "zorder": 5}
    if stack.partition("@")[0] == ORACLE:
        return {"color": _ORACLE_COLOR, "marker": "*", "ms": 10, "lw": 1.6, "zorder": 4}
    if stack in baselines or stack.partition("@")[0] in {b.partition("@")[0] for b in baselines}:
        return {"color": _BASELINE_COLORS[k % len(_BASELINE_COLORS)], "marker": "s", "ms": 4, "lw": 1.1, "zorder": 2}
    return {"color": _LEARNED_COLOR, "marker": "D", "ms": 4.5, "lw": 1.2, "zorder": 3}


def clip_interval(metric: str, mean: float, ci: float) -> tuple[float, float]:
    """``(lo, hi)`` of ``mean ± ci`` clipped to the metric's range: [0, 100] for percentages, [0, ∞) else."""
    lo, hi = mean - ci, mean + ci
    lo = max(lo, 0.0)
    if metric in _PCT:
        hi = min(hi, 100.0)
    return lo, hi


def failure_aware_cdf(hist: np.ndarray, edges_ms: np.ndarray, failed: float, timeout_ms: float):
    """The latency CDF of *all* user requests: the successful ones' histogram ``hist`` (request-weighted, over
    ``edges_ms``) plus ``failed`` requests counted at ``timeout_ms``. Returns ``(x_ms, cdf)`` (the CDF reaches
    1 at the timeout; it is flat below 1 − failed share before it)."""
    h = np.asarray(hist, dtype=np.float64)
    total = h.sum() + max(failed, 0.0)
    centers = np.sqrt(edges_ms[:-1] * edges_ms[1:])
    if total <= 0:
        return centers, np.zeros(len(centers))
    cdf = np.cumsum(h) / total
    cdf = np.where(centers >= timeout_ms, cdf + max(failed, 0.0) / total, cdf)
    return centers, np.minimum(cdf, 1.0)


def _setup():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def metric_panels(
    summary: Mapping[str, Any],
    policies: Sequence[str],
    baselines: Sequence[str],
    metric: str,
    label: str,
    path: Path,
    title: str = "",
    marks: Mapping[tuple[str, str], tuple[str, float]] | None = None,
) -> Path:
    """One figure: a panel per (trace, app), the stacks on the vertical axis, each a dot at its mean with its
    clipped 95 % interval on a linear axis; "missing" where a stack has no result. ``summary``: ``{"results":
    {app: {trace: {stack: {metric: {"mean", "ci95"}}}}}}`` (one scenario); ``title`` prefixes the figure's title;
    ``marks``: per (app, trace) a ``(label, value)`` drawn as a dashed vertical line (e.g. the best baseline's
    objective)."""
    plt = _setup()
    res = summary["results"]
    apps = list(res)
    traces = list(dict.fromkeys(t for a in res.values() for t in a))
    fig, axes = plt.subplots(
        len(traces),
        len(apps),
        figsize=(max(2.6 * len(apps) + 2.4, 9.0), 0.24 * len(policies) * len(traces) + 1.6),
        squeeze=False,
        sharey=True,
    )
    y = np.arange(len(policies))[::-1]
    for r, trace in enumerate(traces):
        for c, app in enumerate(apps):
            ax = axes[r, c]
            cell = res[app].get(trace, {})
            for k, (p, yy) in enumerate(zip(policies, y)):
                st = style_of(p, baselines, k)
                v = cell.get(p)
                if v is None:
                    ax.text(
                        0.02,
                        yy,
                        "missing",
                        transform=ax.get_yaxis_transform(),
                        va="center",
                        fontsize=7,
                        color="#999999",
                        style="italic",
                    )
                    continue
                m, ci = v[metric]["mean"], v[metric]["ci95"]
                lo, hi = clip_interval(metric, m, ci)
                ax.plot([lo, hi], [yy, yy], color=st["color"], lw=st["lw"], zorder=st["zorder"])
                ax.plot([m], [yy], marker=st["marker"], color=st["color"], ms=st["ms"], zorder=st["zorder"], ls="none")
            mark = (marks or {}).get((app, trace))
            if mark is not None:
                ax.axvline(mark[1], color="#777777", lw=1.0, ls="--", zorder=1)
            # from 0, with room right of the largest marker
            right = 1.04 * ax.get_xlim()[1]
            ax.set_xlim(0, max(right, 1.0) if metric in _PCT else right)
            ax.grid(True, axis="x", alpha=0.3)
            ax.tick_params(labelsize=7)
            if r == 0 or mark is not None:
                # the mark's label on lines of its own ("best baseline:" / the setting): long settings do not run
                # into the next panel's title
                mark_label = None if mark is None else str(mark[0]).replace(": ", ":\n", 1)
                title_text = app if mark_label is None else f"{app}\n(dashed: {mark_label})"
                ax.set_title(title_text, fontsize=9 if mark is None else 7)
            if c == 0:
                ax.set_ylabel(f"trace {trace}", fontsize=9)
            if r == len(traces) - 1:
                ax.set_xlabel(label, fontsize=8)
    axes[0, 0].set_yticks(y)
    axes[0, 0].set_yticklabels(policies, fontsize=7)
    for ax in axes[:, 0]:
        for lab in ax.get_yticklabels():
            if lab.get_text() == HIGHLIGHT:
                lab.set_color(_HIGHLIGHT_COLOR)
                lab.set_fontweight("bold")
    fig.suptitle(f"{title}{label}: mean and 95 % CI over seeds ({HIGHLIGHT} in red)", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def latency_cdfs(
    hists: Mapping[tuple[str, str, str], np.ndarray],
    failed: Mapping[tuple[str, str, str], float],
    timeouts: Mapping[str, float],
    edges_ms: np.ndarray,
    apps: Sequence[str],
    trace: str,
    policies: Sequence[str],
    baselines: Sequence[str],
    path: Path,
    title: str = "",
) -> Path:
    """Latency CDF of every user request (failed ones at the app's timeout), one panel per app, for one trace;
    the legend to the right of the panels; ``title`` prefixes the figure's title."""
    plt = _setup()
    ncol = 3 if len(apps) > 2 else len(apps)
    nrow = math.ceil(len(apps) / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.4 * ncol + 2.6, 3.4 * nrow), squeeze=False)
    handles: dict[str, Any] = {}
    for ax, app in zip(axes.flat, apps):
        lo, hi = math.inf, 0.0
        for k, p in enumerate(policies):
            h = hists.get((app, trace, p))
            if h is None:
                continue
            x, cdf = failure_aware_cdf(h, edges_ms, failed.get((app, trace, p), 0.0), timeouts[app])
            st = style_of(p, baselines, k)
            (line,) = ax.plot(
                x,
                cdf,
                color=st["color"],
                lw=st["lw"],
                zorder=st["zorder"],
                ls="-" if st["zorder"] >= 3 else (0, (4, 1.5)),
                label=p,
            )
            handles.setdefault(p, line)
            if cdf[-1] > 0:
                lo = min(lo, float(x[np.searchsorted(cdf, 0.01)]))
                hi = max(hi, float(x[min(np.searchsorted(cdf, 0.999), len(x) - 1)]))
        ax.axvline(timeouts[app], color="#bbbbbb", lw=0.8, ls=":")
        ax.set_xscale("log")
        if hi > 0:
            ax.set_xlim(lo / 1.5, max(hi, timeouts[app]) * 1.3)
        ax.set_ylim(0, 1.01)
        ax.set_title(f"{app} (timeout {timeouts[app]:g} ms)", fontsize=9)
        ax.set_xlabel("end-to-end latency (ms), failed requests at the timeout", fontsize=8)
        ax.set_ylabel("fraction of all requests", fontsize=8)
        ax.grid(True, which="both", alpha=0.25)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(apps) :]:
        ax.axis("off")
    fig.legend(
        list(handles.values()), list(handles), loc="center left", bbox_to_anchor=(0.995, 0.5), fontsize=7, frameon=False
    )
    fig.suptitle(
        f"{title}latency CDF of all user requests — trace {trace} (all seeds; {HIGHLIGHT} in red)", fontsize=11
    )
    fig.tight_layout(rect=(0, 0, 0.86, 0.96))
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def pareto(
    summary: Mapping[str, Any],
    app: str,
    contenders: Sequence[str],
    baselines: Sequence[str],
    path: Path,
    title: str = "",
) -> Path:
    """Pareto plots of one app: a column per trace, a row per front metric; every baseline setting (grey
    squares), the baseline front (grey line), the tuned HPA front (dashed), and the contenders with their 95 %
    intervals in both CPU and the metric (the lookahead oracle as a black star). The vertical range follows the
    HPA front, the oracle and the highlighted stack; settings far above it are marked at the top edge (a
    triangle and their value). ``summary``: ``{"results", "fronts"}`` per app and trace (one scenario);
    ``title`` prefixes the figure's title."""
    plt = _setup()
    res = summary["results"][app]
    traces = list(res)
    labels = {"latency_p95_ms": "p95 latency (ms)", "failed_pct": "failed requests (%)"}
    fig, axes = plt.subplots(
        len(FRONT_METRICS), len(traces), figsize=(4.2 * len(traces) + 2.6, 3.3 * len(FRONT_METRICS)), squeeze=False
    )
    handles: dict[str, Any] = {}
    for c, trace in enumerate(traces):
        cell = res[trace]
        fr = summary["fronts"][app][trace]
        for r, metric in enumerate(FRONT_METRICS):
            ax = axes[r, c]
            xs = [cell[b]["cpu_core_hours"]["mean"] for b in baselines if b in cell]
            ys = [cell[b][metric]["mean"] for b in baselines if b in cell]
            handles.setdefault("baseline settings", ax.scatter(xs, ys, s=14, marker="s", color="#b0b0b0", zorder=1))
            f = fr[metric]["baselines"]
            if f:
                (h,) = ax.plot(
                    [p["cpu_core_hours"] for p in f], [p["value"] for p in f], color="#666666", lw=1.4, zorder=2
                )
                handles.setdefault("baseline front", h)
            f = fr[metric]["hpa"]
            if f:
                (h,) = ax.plot(
                    [p["cpu_core_hours"] for p in f],
                    [p["value"] for p in f],
                    color="#666666",
                    lw=1.0,
                    ls="--",
                    zorder=2,
                )
                handles.setdefault("tuned HPA front", h)
            for k, s in enumerate(contenders):
                v = cell.get(s)
                if v is None:
                    continue
                st = style_of(s, baselines, k)
                mx, cx = v["cpu_core_hours"]["mean"], v["cpu_core_hours"]["ci95"]
                my, cy = v[metric]["mean"], v[metric]["ci95"]
                ylo, yhi = clip_interval(metric, my, cy)
                ax.plot([mx - cx, mx + cx], [my, my], color=st["color"], lw=1.0, zorder=st["zorder"])
                ax.plot([mx, mx], [ylo, yhi], color=st["color"], lw=1.0, zorder=st["zorder"])
                (h,) = ax.plot(
                    [mx], [my], marker=st["marker"], ms=st["ms"], color=st["color"], ls="none", zorder=st["zorder"]
                )
                label = s if s == HIGHLIGHT else ("lookahead oracle" if s.partition("@")[0] == ORACLE else None)
                handles.setdefault(label or "other learned stacks", h)
            # the y range follows the HPA front, the oracle and the highlighted stack; points far above it
            # (fixed replicas at saturation) are marked at the top edge with their value instead of squeezing
            # the rest against the axis
            near = [p["value"] for p in fr[metric]["hpa"]]
            for s in contenders:
                if s in cell and (s == HIGHLIGHT or s.partition("@")[0] == ORACLE):
                    near.append(clip_interval(metric, cell[s][metric]["mean"], cell[s][metric]["ci95"])[1])
            top = 1.3 * max(near) if near and max(near) > 0 else (1.0 if metric in _PCT else None)
            if top is not None:
                above = [(x, y, "#b0b0b0") for x, y in zip(xs, ys) if y > top]
                above += [
                    (cell[s]["cpu_core_hours"]["mean"], cell[s][metric]["mean"], style_of(s, baselines, k)["color"])
                    for k, s in enumerate(contenders)
                    if s in cell and cell[s][metric]["mean"] > top
                ]
                for x, y, color in above:
                    ax.annotate(
                        f"{y:.0f}",
                        (x, top),
                        xytext=(0, -9),
                        textcoords="offset points",
                        ha="center",
                        fontsize=6,
                        color=color,
                    )
                    ax.plot([x], [top], marker="^", color=color, ms=5, clip_on=False, zorder=6)
                ax.set_ylim(0, min(top, 100.0) if metric in _PCT else top)
            else:
                ax.set_ylim(bottom=0)
            ax.grid(True, alpha=0.3)
            ax.tick_params(labelsize=7)
            ax.set_xlabel("CPU core-hours requested", fontsize=8)
            ax.set_ylabel(labels[metric], fontsize=8)
            if r == 0:
                ax.set_title(f"trace {trace}", fontsize=9)
    order = [
        HIGHLIGHT,
        "lookahead oracle",
        "other learned stacks",
        "baseline front",
        "tuned HPA front",
        "baseline settings",
    ]
    keys = [k for k in order if k in handles]
    fig.legend(
        [handles[k] for k in keys], keys, loc="center left", bbox_to_anchor=(0.995, 0.5), fontsize=8, frameon=False
    )
    fig.suptitle(f"{title}{app}: p95 latency and failed requests against CPU (mean ± 95 % CI)", fontsize=11)
    fig.tight_layout(rect=(0, 0, 0.88, 0.95))
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path
