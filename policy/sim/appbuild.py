"""``hrl-policy app build``: a simulated application built from a user's own manifests, spans and metrics.

Inputs (docs/bring-your-own-app.md describes the formats):

- ``manifests``: Kubernetes YAML/JSON (a file or a folder): the workloads (Deployments, StatefulSets), their
  replicas, CPU/memory requests and limits, and the declared call graph (``*_ADDR`` env vars, the
  ``hrl-scheduler.io/depends-on`` annotation, AppGroups; :mod:`policy.topology.manifests`);
- ``spans``: a span table (:mod:`policy.topology.spans`; columns configurable): the observed call graph, calls
  per request, parallel or sequential fan-out, each service's visit latency, the entry service;
- ``metrics`` (optional): per-minute metrics tables (:mod:`policy.sim.measurements`; columns configurable): CPU
  per request, working set, the load, the entry's latency percentiles.

Steps: (1) the call graph = the manifests' declared edges ∪ the spans' observed edges, restricted to services
that have a workload (span services without one are dropped, with a warning: the simulator has no pod to run
them); (2) the entry service: given, or the services of the spans' entry (root) spans that hold at least 5 % of
them, shares by their counts; (3) the output folder: ``manifests/`` (a copy of the input manifests),
``graph.json`` (the call graph, as ``hrl-policy graph --json`` writes it), ``app.yaml``; (4) the calibration
(:func:`policy.sim.calibrate.calibrate_app`: its docstring gives the method); (5) ``app.yaml`` rewritten with the
fitted parameters and every edge's calls per request and fan-out, loaded back, and the fit error written to
``calibration.json`` and ``calibration.md`` beside it.

Defaults chosen here: the timeout (``timeoutMs``) is 2× the entry's measured p99 rounded up to 100 ms, at least
2,000 ms; the SLO (``sloP95Ms``) 1.3× the entry's measured p95 rounded to 50 ms; services with neither spans nor
metrics get :data:`policy.sim.calibrate.UNTRACED_DEFAULTS`.

Checks (``checks=True``) besides the fit error: the entry minute by minute, visits per request, and a hold-out
test: the fit repeated on half the traces (trace id CRC-32 even) and the even metric minutes, its simulated
latencies compared with the other half's measurements (odd traces, odd minutes).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import tempfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from policy.observe import ObjectError, load_objects, parse_workload
from policy.state import ServiceEdge, ServiceGraph
from policy.topology.sources import load_graph
from policy.topology.spans import SpanTable, observations_from_table, read_span_table, table_warnings

from .app import AppSpec, ServiceParams, load_app
from .calibrate import (
    UNTRACED_DEFAULTS,
    Calibration,
    LatencyFrom,
    Measurements,
    calibrate_app,
    error_table,
    markdown,
    measured_targets,
    quiet_nanmedian,
    simulate_services,
    slo_for,
)
from .fit_verdict import CalibrationVerdict, Noise, judge, plot_calibration, relative_standard_error, verdict_markdown
from .measurements import ColumnSpec, Metrics, Series, SpanStats, read_metrics, span_stats

__all__ = [
    "ENTRY_MIN_SHARE",
    "BuildResult",
    "BuildOptions",
    "Observations",
    "parse_entry",
    "detect_entry",
    "check_options",
    "build_app",
    "build_from_observations",
    "holdout_check",
]

ENTRY_MIN_SHARE = 0.05
"""A service is an entry when at least this share of the spans' entry (root) spans are its."""

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def _y(name: str) -> str:
    """A service name as a YAML scalar (quoted as JSON when it is not a plain DNS-like name)."""
    return name if _SAFE_NAME.match(name) and name not in ("true", "false", "null", "yes", "no") else json.dumps(name)


def parse_entry(text: str, services: set[str]) -> dict[str, float]:
    """``"frontend"`` or ``"web=0.7,api=0.3"`` → entry service → share (normalised). Raises ``ValueError``
    naming the service that is not a workload or the malformed share."""
    out: dict[str, float] = {}
    for item in (x.strip() for x in text.split(",") if x.strip()):
        name, sep, share = item.partition("=")
        name = name.strip()
        if name not in services:
            raise ValueError(f"--entry: {name!r} is not a workload of the manifests ({', '.join(sorted(services))})")
        try:
            v = float(share) if sep else 1.0
        except ValueError:
            raise ValueError(f"--entry: share of {name!r} is not a number: {share!r}") from None
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"--entry: share of {name!r} must be > 0, got {share!r}")
        out[name] = v
    if not out:
        raise ValueError("--entry: empty")
    total = sum(out.values())
    return {s: v / total for s, v in out.items()}


def detect_entry(stats: SpanStats, services: set[str]) -> tuple[dict[str, float], list[str]]:
    """Entry service → share from the visits that enter the app: root spans of workload services, and calls
    from services without a workload (an ingress gateway, a load generator) — the services holding at least
    :data:`ENTRY_MIN_SHARE` of them, shares by their counts; and warnings. Raises ``ValueError`` when no workload
    has such visits."""
    roots = {s: n for s, n in stats.roots.items() if s in services and n}
    for (a, b), n in stats.calls.items():
        if a not in services and b in services and n:
            roots[b] = roots.get(b, 0) + n
    total = sum(roots.values())
    if not total:
        seen = ", ".join(sorted(stats.roots)) or "none"
        raise ValueError(
            f"cannot detect the entry service: no workload of the manifests has entry (root) spans (services with "
            f"root spans: {seen}); pass --entry SERVICE"
        )
    keep = {s: n for s, n in roots.items() if n >= ENTRY_MIN_SHARE * total}
    warnings = []
    minor = sorted(set(roots) - set(keep))
    if minor:
        warnings.append(
            f"entry: {', '.join(minor)} hold(s) under {ENTRY_MIN_SHARE:.0%} of the entry spans and are not entries "
            f"(pass --entry to choose)"
        )
    n = sum(keep.values())
    return {s: round(keep[s] / n, 4) for s in sorted(keep, key=lambda s: (-keep[s], s))}, warnings


@dataclass
class BuildResult:
    """What ``app build`` produced: the folder, the written app (loaded back), the calibration, where each
    edge's calls per request came from, the hold-out test and the comparison with a reference app (when run),
    the warnings and the inputs."""

    out: Path
    app: AppSpec
    calibration: Calibration
    graph: ServiceGraph
    edge_source: dict[tuple[str, str], str]
    warnings: list[str]
    inputs: dict[str, Any]
    holdout: dict[str, Any] | None = None
    compare: dict[str, Any] | None = None
    span_only_edges: list[tuple[str, str]] = field(default_factory=list)
    verdict: CalibrationVerdict | None = None
    plot: str | None = None
    plot_note: str = ""

    def to_json(self) -> dict[str, Any]:
        """The report (``calibration.json``, and ``app build --json``'s stdout)."""
        cal = self.calibration
        med = cal.median_abs_error_pct()
        p = self.app.params
        return {
            "app": self.app.name,
            "out": str(self.out),
            "app_yaml": str(self.out / "app.yaml"),
            "entry": dict(cal.entry),
            "load_rps": round(cal.lam_rps, 6),
            "slo_p95_ms": self.app.slo_p95_ms,
            "timeout_ms": self.app.timeout_ms,
            "median_abs_error_pct": {k: _r(v) for k, v in med.items()},
            "services": error_table(cal),
            "params": {
                s: {
                    "cpu_ms_per_request": p[s].cpu_ms_per_request,
                    "cpu_cv": p[s].cpu_cv,
                    "latency_p50_ms": p[s].latency_p50_ms,
                    "latency_mean_ms": p[s].latency_mean_ms,
                    "working_set_mi": p[s].working_set_mi,
                    "fitted": s in cal.params,
                }
                for s in sorted(p)
            },
            "edges": [
                {
                    "caller": e.caller,
                    "callee": e.callee,
                    "calls_per_request": e.calls_per_request,
                    "parallel": e.parallel,
                    "from": self.edge_source.get((e.caller, e.callee), ""),
                }
                for e in self.app.graph.edges
            ],
            "checks": {
                "per_minute": cal.per_minute or None,
                "visits_per_request": [
                    {"service": s, "measured": _r(a), "model": _r(b)} for s, a, b in cal.visits_check
                ]
                or None,
                "holdout": self.holdout,
            },
            "compare": self.compare,
            "verdict": None if self.verdict is None else self.verdict.to_json(),
            "plot": self.plot,
            "notes": cal.notes,
            "warnings": self.warnings,
            "inputs": self.inputs,
        }

    def markdown(self) -> str:
        """The report as markdown (``calibration.md``)."""
        cal = self.calibration
        intro = (
            f"`{self.app.name}` built by `hrl-policy app build` from {self.inputs['manifests']} (workloads), "
            f"{self.inputs['spans']} ({self.inputs.get('observed_from', 'spans')})"
            + (f" and {self.inputs['metrics']} (metrics)" if self.inputs.get("metrics") else "")
            + f"; entry {', '.join(f'{s} ({v:g})' for s, v in cal.entry.items())}."
        )
        out = [f"# Calibration of {self.app.name}", "", markdown(cal, intro)]
        if self.holdout:
            h = self.holdout
            out += [
                "",
                "**Hold-out test**: " + h["method"],
                "",
                "| service | measured p50 / p95 (other half) | simulated p50 / p95 | error p50 / p95 % |",
                "|---|---|---|---|",
            ]
            for r in h["services"]:
                out.append(
                    f"| {r['service']} | {_f(r['measured_p50_ms'])} / {_f(r['measured_p95_ms'])} | "
                    f"{_f(r['simulated_p50_ms'])} / {_f(r['simulated_p95_ms'])} | "
                    f"{_pct(r['error_p50_pct'])} / {_pct(r['error_p95_pct'])} |"
                )
            m = h["median_abs_error_pct"]
            med = f"p50 {_f(m['p50'], 1)}%, p95 {_f(m['p95'], 1)}%"
            out += ["", f"Median absolute hold-out error over services: {med}."]
        if self.compare:
            c = self.compare
            out += [
                "",
                f"**Compared with {c['reference']}** (both simulated at {cal.lam_rps:.2f} req/s): median absolute "
                f"difference of the simulated visit latency over services p50 {_f(c['median_abs_diff_pct']['p50'], 2)}"
                f"%, p95 {_f(c['median_abs_diff_pct']['p95'], 2)}%; parameters differing by more than 1 %: "
                f"{c['params_differing'] or 'none'}; edges whose calls per request differ: "
                f"{c['edges_differing'] or 'none'}.",
            ]
        if self.span_only_edges:
            out += [
                "",
                f"Edges observed in the {self.inputs.get('observed_from', 'spans')} but not declared in the manifests: "
                + ", ".join(f"{a} → {b}" for a, b in self.span_only_edges)
                + ".",
            ]
        if self.warnings:
            out += ["", "Warnings:", ""] + [f"- {w}" for w in self.warnings]
        if self.verdict is not None:
            out += ["", verdict_markdown(self.verdict, self.plot).rstrip("\n")]
            if self.plot is None and self.plot_note:
                out += ["", self.plot_note]
        return "\n".join(out) + "\n"


def _r(v: float | None, digits: int = 4) -> float | None:
    return None if v is None or not math.isfinite(v) else round(float(v), digits)


def _f(v: float | None, digits: int = 2) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:+.1f}"


# ---- steps ----------------------------------------------------------------------------------------------------


def _manifest_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(f for f in path.rglob("*") if f.is_file() and f.suffix in (".yaml", ".yml", ".json"))


def _copy_manifests(src: Path, dst: Path) -> None:
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    for f in _manifest_files(src):
        rel = f.name if src.is_file() else f.relative_to(src)
        target = dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, target)


def _workload_services(path: Path) -> list[str]:
    """The services of the Deployments and StatefulSets at ``path`` (what the simulator runs), in order; raises
    ``ValueError`` for no workload or two workloads with one service name."""
    seen: dict[str, str] = {}
    objs = [(f, o) for f in _manifest_files(path) for o in load_objects(f)]
    for f, o in objs:
        if o.get("kind") not in ("Deployment", "StatefulSet"):
            continue
        try:
            w = parse_workload(o)
        except ObjectError as exc:  # the file the workload came from, then the workload, field and value
            raise ValueError(f"{f}: {' '.join(str(exc).split())}") from None
        ref = f"{o.get('kind')} {w.namespace}/{w.name}"
        if w.service in seen:
            raise ValueError(
                f"{path}: {ref} and {seen[w.service]} are both service {w.service!r}: give one folder of manifests "
                f"per application (e.g. not both per-service files and a release bundle)"
            )
        seen[w.service] = ref
    if not seen:
        raise ValueError(f"{path}: no Deployment or StatefulSet found")
    return list(seen)


def _timeout_for(targets: dict[str, tuple[float, float, float]], entry: dict[str, float]) -> float:
    p99 = [targets[s][2] for s in entry if s in targets and math.isfinite(targets[s][2])]
    p99 += [
        targets[s][1] * 1.5
        for s in entry
        if s in targets and not math.isfinite(targets[s][2]) and math.isfinite(targets[s][1])
    ]
    if not p99:
        return 2000.0
    return max(2000.0, 100.0 * math.ceil(2 * max(p99) / 100.0))


def _app_yaml(
    name: str,
    entry: dict[str, float],
    slo: float,
    timeout: float,
    params: dict[str, ServiceParams],
    edges: list[ServiceEdge],
    edge_source: dict[tuple[str, str], str],
    inputs: dict[str, Any],
    cal: Calibration | None,
) -> str:
    d = UNTRACED_DEFAULTS
    lines = [
        f"# {name}: a simulated application GENERATED by `hrl-policy app build` (policy/sim/appbuild.py) from",
        f"#   manifests {inputs['manifests']} (copied to manifests/), {inputs.get('observed_from', 'spans')} "
        f"{inputs['spans']}" + (f", metrics {inputs['metrics']}" if inputs.get("metrics") else " (no metrics)") + ".",
        "# Call graph: graph.json (the manifests' declared edges and the edges observed in the spans).",
        "# Parameters: fitted by policy/sim/calibrate.py (method in its docstring); fit error in calibration.md and",
        "# calibration.json next to this file. Rebuild rather than edit these numbers.",
        "apiVersion: hrl-scheduler.io/v1alpha1",
        "kind: App",
        f"name: {_y(name)}",
        f"description: {json.dumps(f'{name}, built from its manifests, spans and metrics by hrl-policy app build')}",
        "manifests: manifests",
        "graph: graph.json",
        "entry: {" + ", ".join(f"{_y(s)}: {v:g}" for s, v in entry.items()) + "}",
    ]
    if cal is not None:
        lines.append("# SLO: 1.3x the measured p95 of the entry; timeout: 2x its measured p99 (at least 2 s)")
    lines += [
        f"sloP95Ms: {slo:g}",
        f"timeoutMs: {timeout:g}",
        "# services with neither spans nor metrics keep these defaults",
        f"defaults: {{cpuMsPerRequest: {d.cpu_ms_per_request:g}, latencyP50Ms: {d.latency_p50_ms:g}, "
        f"latencyMeanMs: {d.latency_mean_ms:g}, workingSetMi: {d.working_set_mi:g}}}",
    ]
    if params:
        lines.append("services:")
        width = max(len(_y(s)) for s in params) + 1
        for s in sorted(params):
            p = params[s]
            cv = f", cpuCv: {p.cpu_cv:g}" if p.cpu_cv != 1.0 else ""
            lines.append(
                f"  {_y(s) + ':':<{width}} {{cpuMsPerRequest: {p.cpu_ms_per_request:g}{cv}, latencyP50Ms: "
                f"{p.latency_p50_ms:g}, latencyMeanMs: {p.latency_mean_ms:g}, workingSetMi: {p.working_set_mi:g}}}"
            )
    if edges:
        lines.append("edges:")
        for e in sorted(edges, key=lambda e: (e.caller not in entry, e.caller, -(e.calls_per_request or 0), e.callee)):
            src = edge_source.get((e.caller, e.callee), "")
            if src and src not in ("spans", inputs.get("observed_from", "spans")):
                lines.append(f"  # {src}")
            par = ", parallel: true" if e.parallel else ""
            lines.append(
                f"  - {{caller: {_y(e.caller)}, callee: {_y(e.callee)}, callsPerRequest: {e.calls_per_request:g}{par}}}"
            )
    return "\n".join(lines) + "\n"


def _half_stats(meas_table, keep_trace) -> SpanStats:

    t = SpanTable(path=meas_table.path, window_s=meas_table.window_s, has_status=meas_table.has_status)
    t.spans = {k: v for k, v in meas_table.spans.items() if keep_trace(k[0])}
    t.classify()
    st = span_stats(t)
    st.window_s = float(meas_table.window_s or 0.0)
    return st


def _half_metrics(metrics: Metrics, parity: int) -> Metrics:
    out = Metrics(step_s=metrics.step_s, columns=metrics.columns)
    for s in metrics.series:
        if s.has("latency_p50_ms"):
            keep = (s.step % 2) == parity
            s = Series(
                s.service,
                s.name,
                s.file,
                s.step[keep],
                {r: v[keep] for r, v in s.raw.items()},
                s.columns,
                s.is_pod,
            )
        out.series.append(s)
    return out


def _holdout(
    struct: AppSpec, table, metrics: Metrics, entry, iterations: int, seed: int, latency_from: LatencyFrom
) -> dict[str, Any]:
    """Fit on half the traces (CRC-32 of the trace id even) and the even metric minutes; compare with the other
    half's measured targets."""

    def even(t: str) -> bool:
        return zlib.crc32(t.encode()) % 2 == 0

    return holdout_check(
        struct,
        (_half_stats(table, even), _half_stats(table, lambda t: not even(t))),
        metrics,
        entry,
        BuildOptions(iterations=iterations, seed=seed, latency_from=latency_from),
        "the fit repeated on half the traces (CRC-32 of the trace id even) and the even metric minutes; "
        "its simulated visit latencies compared with the other half (odd traces, odd minutes).",
    )


def holdout_check(
    struct: AppSpec,
    halves: tuple[SpanStats, SpanStats],
    metrics: Metrics,
    entry: dict[str, float],
    options: BuildOptions,
    method: str,
) -> dict[str, Any]:
    """The hold-out test: the fit repeated on the first half of the observations (``halves[0]``) and the even metric
    minutes, its simulated visit latencies compared with the other half's measured targets (``halves[1]``, the odd
    minutes). Returns ``{"method", "median_abs_error_pct": {p50, p95}, "services": [...]}``."""
    a = Measurements(metrics=_half_metrics(metrics, 0), spans=halves[0])
    b = Measurements(metrics=_half_metrics(metrics, 1), spans=halves[1])
    o = options
    cal_a = calibrate_app(struct, a, entry, o.iterations, o.seed, checks=False, latency_from=o.latency_from)
    targets_b, source_b, _, _ = measured_targets(b, o.latency_from)
    rows, e50, e95 = [], [], []
    for s in sorted(cal_a.simulated):
        if s not in targets_b:
            continue
        m, sim = targets_b[s], cal_a.simulated[s]
        err = [100.0 * (sim[i] / m[i] - 1.0) if m[i] > 0 else math.nan for i in (0, 1)]
        e50.append(abs(err[0]))
        e95.append(abs(err[1]))
        rows.append(
            {
                "service": s,
                "measured_from": source_b[s],
                "measured_p50_ms": _r(m[0]),
                "measured_p95_ms": _r(m[1]),
                "simulated_p50_ms": _r(sim[0]),
                "simulated_p95_ms": _r(sim[1]),
                "error_p50_pct": _r(err[0], 2),
                "error_p95_pct": _r(err[1], 2),
            }
        )
    return {
        "method": method,
        "median_abs_error_pct": {
            "p50": _r(quiet_nanmedian(e50), 2) if e50 else None,
            "p95": _r(quiet_nanmedian(e95), 2) if e95 else None,
        },
        "services": rows,
    }


def _compare(built: AppSpec, cal: Calibration, ref: AppSpec, seed: int) -> dict[str, Any]:
    sim_ref = simulate_services(ref, cal.lam_rps, seed + 1, replicas=cal.replicas)
    rows, d50, d95 = [], [], []
    for s in sorted(cal.simulated):
        if s not in sim_ref:
            continue
        a, b = cal.simulated[s], sim_ref[s]
        diff = [100.0 * (a[i] / b[i] - 1.0) for i in (0, 1)]
        d50.append(abs(diff[0]))
        d95.append(abs(diff[1]))
        row: dict[str, Any] = {"service": s}
        for i, q in enumerate(("p50", "p95")):
            row.update({f"built_{q}_ms": _r(a[i]), f"reference_{q}_ms": _r(b[i]), f"diff_{q}_pct": _r(diff[i], 2)})
        rows.append(row)
    fields = ("cpu_ms_per_request", "cpu_cv", "latency_p50_ms", "latency_mean_ms", "working_set_mi")
    differing = []
    for s in sorted(set(built.params) & set(ref.params)):
        for f in fields:
            x, y = getattr(built.params[s], f), getattr(ref.params[s], f)
            if abs(x - y) > 0.01 * max(abs(y), 1e-9):
                differing.append(f"{s}.{f} {x:g} vs {y:g}")
    edges = []
    for e in built.graph.edges:
        r = ref.graph.edge(e.caller, e.callee)
        if r is None:
            edges.append(f"{e.caller}->{e.callee} not in the reference")
        elif abs((e.calls_per_request or 0) - (r.calls_per_request or 0)) > 1e-9 or e.parallel != r.parallel:
            edges.append(f"{e.caller}->{e.callee} {e.calls_per_request:g} vs {r.calls_per_request:g}")
    return {
        "reference": ref.source,
        "median_abs_diff_pct": {"p50": _r(float(np.median(d50)), 4), "p95": _r(float(np.median(d95)), 4)}
        if d50
        else {"p50": None, "p95": None},
        "services": rows,
        "params_differing": differing,
        "edges_differing": edges,
    }


def _noise(meas: Measurements, source: dict[str, str], normal_steps: dict[str, np.ndarray]) -> dict[str, Noise]:
    """The sampling error of each service's measured target (:func:`policy.sim.fit_verdict.relative_standard_error`):
    by bootstrap over its normal latency minutes (a metrics target) or over its server spans."""
    out = {}
    for s in source:
        lat = meas.metrics.latency(s) if s in normal_steps and not source[s].startswith("server spans") else None
        if lat is not None:
            ok = np.isin(lat.step, normal_steps[s])
            cols = [
                lat.raw[r][ok] if lat.has(r) else np.full(int(ok.sum()), np.nan)
                for r in ("latency_p50_ms", "latency_p95_ms", "latency_p99_ms")
            ]
            out[s] = Noise(relative_standard_error(np.stack(cols, axis=1), "medians"), minutes=int(ok.sum()))
        else:
            d = meas.spans.durations_ms.get(s, np.zeros(0))
            out[s] = Noise(relative_standard_error(d), spans=len(d))
    return out


def _judge(
    result: BuildResult,
    meas: Measurements,
    source: dict[str, str],
    normal_steps: dict[str, np.ndarray],
    folder: Path,
) -> None:
    """The verdict (:mod:`policy.sim.fit_verdict`) and its plot ``calibration.png`` in ``folder``, next to the report
    (skipped, with a note in the report, where matplotlib is not installed)."""
    cal = result.calibration
    held = None
    if result.holdout is not None:
        held = {r["service"]: (r["error_p50_pct"], r["error_p95_pct"]) for r in result.holdout["services"]}
    result.verdict = judge(cal.errors_pct(), held, _noise(meas, source, normal_steps), cal.entry)
    try:
        plot_calibration(
            error_table(cal),
            None if result.holdout is None else result.holdout["services"],
            result.verdict,
            folder / "calibration.png",
            title=f"{result.app.name}: measured vs simulated visit latency (overall {result.verdict.overall})",
        )
        result.plot = "calibration.png"
    except ImportError:
        result.plot_note = "No plot: matplotlib is not installed (`pip install 'hrl-scheduler[train]'`)."


@dataclass(frozen=True)
class BuildOptions:
    """How an app is built (:func:`build_app`'s keywords): ``entry`` (``"svc"`` or ``"a=0.7,b=0.3"``; default
    detected), ``name`` (default the folder's), ``latency_from``, ``slo_p95_ms`` / ``timeout_ms`` (default: from the
    measurements), ``iterations`` and ``seed`` of the fit, ``checks`` (the hold-out and minute-by-minute checks),
    ``compare`` (a reference app), ``force`` (overwrite ``app.yaml``)."""

    entry: str | None = None
    name: str | None = None
    latency_from: LatencyFrom = "auto"
    slo_p95_ms: float | None = None
    timeout_ms: float | None = None
    iterations: int = 20
    seed: int = 0
    checks: bool = True
    compare: str | None = None
    force: bool = False


@dataclass
class Observations:
    """What the app's traffic was observed from: ``graph``, the call graph seen (edges with their calls);
    ``stats``, the visits, calls and entry visits per service over a window (and visit durations, from spans);
    ``what`` (``spans``, ``mesh metrics``) and ``source`` (a path), for the report; ``holdout(struct, metrics,
    entry, options)``: the hold-out check (``None``: none)."""

    graph: ServiceGraph
    stats: SpanStats
    what: str
    source: str
    holdout: Callable[[AppSpec, Metrics, dict[str, float], BuildOptions], dict[str, Any]] | None = None


def check_options(out: Path, options: BuildOptions) -> str:
    """The app's name (``options.name`` or the folder's), once the options are valid. Raises ``ValueError`` (one
    line) for ``out/app.yaml`` existing without ``force``, an ``out`` that is not a folder or holds files but no
    ``app.yaml`` (not an earlier build: the build replaces the whole folder, so it never takes one over), a bad
    name, iterations, SLO or timeout."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"-o: {out}: exists and is not a folder")
    if (out / "app.yaml").exists():
        if not options.force:
            raise ValueError(f"{out / 'app.yaml'}: exists; pass --force to overwrite")
    elif out.is_dir() and any(out.iterdir()):
        raise ValueError(f"-o: {out}: holds files but is not an app build (no app.yaml); name a new or empty folder")
    name = options.name or out.resolve().name
    if not _SAFE_NAME.match(name):
        raise ValueError(f"--name: {name!r}: use letters, digits, '.', '_' and '-'")
    if options.iterations < 1:
        raise ValueError(f"--iterations: must be >= 1, got {options.iterations}")
    for label, v in (("--slo-p95-ms", options.slo_p95_ms), ("--timeout-ms", options.timeout_ms)):
        if v is not None and not (math.isfinite(v) and v > 0):
            raise ValueError(f"{label}: must be > 0, got {v}")
    return name


def build_app(
    manifests: str | Path,
    spans: str | Path,
    out: str | Path,
    metrics: str | Path | None = None,
    *,
    span_columns: dict[str, str] | None = None,
    metric_columns: dict[str, ColumnSpec] | None = None,
    **options: Any,
) -> BuildResult:
    """Build the app folder ``out`` (module docstring) from ``manifests``, ``spans`` and ``metrics``, and return
    what was built. ``span_columns`` / ``metric_columns``: header overrides per role; ``options``: the fields of
    :class:`BuildOptions` (``entry``: default detected from the spans; ``latency_from``: where targets come from,
    :func:`policy.sim.calibrate.calibrate_app`; ``compare``: a reference app, name or path).

    Raises ``ValueError`` (one line: a missing input, a malformed file naming the file, line and column, an entry
    that is not a workload, ``out/app.yaml`` existing without ``force``, a ``compare`` app that cannot be loaded,
    nothing to fit) — exit code 2 on the command line.

    The folder is written whole or not at all (:func:`build_from_observations`).
    """
    opts = BuildOptions(**options)
    manifests, spans, out = Path(manifests), Path(spans), Path(out)
    for label, p in (("--manifests", manifests), ("--spans", spans), ("--metrics", metrics)):
        if p is not None and not Path(p).exists():
            raise ValueError(f"{label}: {p}: no such file or directory")
    check_options(out, opts)
    inputs: dict[str, Any] = {
        "manifests": str(manifests),
        "spans": str(spans),
        "metrics": str(metrics) if metrics is not None else None,
    }
    services = _workload_services(manifests)
    table = read_span_table(spans, span_columns)
    inputs["span_columns"] = dict(table.columns)
    warnings = list(table_warnings(table))
    observed = observations_from_table(table).to_graph(f"spans:{spans}")

    def holdout(struct: AppSpec, mt: Metrics, entry: dict[str, float], o: BuildOptions) -> dict[str, Any]:
        return _holdout(struct, table, mt, entry, o.iterations, o.seed, o.latency_from)

    obs = Observations(observed, span_stats(table), "spans", str(spans), holdout)
    if metrics is not None:
        mt = read_metrics(metrics, services, metric_columns)
        inputs["metric_columns"] = {r: sorted(h) for r, h in sorted(mt.columns.items())}
    else:
        mt = Metrics()
        warnings.append(
            "no --metrics: cpuMsPerRequest and workingSetMi keep their defaults and the load comes from the spans"
        )
    return build_from_observations(manifests, out, obs, mt, opts, inputs, warnings)


def _merged_graph(
    manifests: Path, names: set[str], observed: ServiceGraph, what: str, warnings: list[str]
) -> tuple[ServiceGraph, list[tuple[str, str]]]:
    """The manifests' declared edges ∪ the observed ones among the workloads, and the edges only observed."""
    declared, w = load_graph([str(manifests)], "manifests")
    warnings += w
    no_workload = sorted(set(observed.services) - names)
    if no_workload:
        lost = [e for e in observed.edges if e.caller in no_workload or e.callee in no_workload]
        who = "span service(s)" if what == "spans" else f"service(s) of the {what}"
        warnings.append(
            f"{len(no_workload)} {who} have no workload in the manifests; dropped with their {len(lost)} "
            f"edge(s) (check the pod/service column and the manifests): {', '.join(no_workload)}"
        )
    kept_observed = [e for e in observed.edges if e.caller in names and e.callee in names]
    declared_keys = {(e.caller, e.callee) for e in declared.edges}
    only = [(e.caller, e.callee) for e in kept_observed if (e.caller, e.callee) not in declared_keys]
    graph = ServiceGraph.build(
        names, [e for e in declared.edges if e.caller in names and e.callee in names] + kept_observed, "app build"
    )
    if not any(e.caller != e.callee for e in graph.edges):
        warnings.append(
            f"the call graph has no edges: neither the manifests nor the {what} give a call between services"
        )
    return graph, only


def _fitted_edges(
    struct: AppSpec, cal: Calibration, stats: SpanStats, what: str
) -> tuple[list[ServiceEdge], dict[tuple[str, str], str]]:
    edges, source = [], {}
    for e in struct.graph.edges:
        k = (e.caller, e.callee)
        cpr = cal.calls_per_request.get(k, e.calls_per_request if e.calls_per_request is not None else 1.0)
        edges.append(ServiceEdge(e.caller, e.callee, calls_per_request=cpr, parallel=e.parallel))
        if k in stats.calls:
            source[k] = what
        elif e.caller in stats.visits and e.callee in stats.visits:
            source[k] = f"declared in the manifests, never called in the {what}"
        else:
            source[k] = f"declared in the manifests; a side is not in the {what}: 1 call per request assumed"
    return edges, source


def build_from_observations(
    manifests: Path,
    out: Path,
    obs: Observations,
    mt: Metrics,
    options: BuildOptions,
    inputs: dict[str, Any],
    warnings: list[str],
) -> BuildResult:
    """Steps (1)-(5) of the module docstring from observations already read (:func:`build_app` reads them from
    spans; :mod:`policy.whatif` from a recording's mesh metrics), the metrics ``mt`` and ``options``; ``inputs``
    and ``warnings`` go into the report. Raises ``ValueError`` as :func:`build_app`.

    The folder is written whole or not at all: everything is built in a temporary folder next to ``out`` and renamed
    to ``out`` at the end (an ``out`` replaced with ``force`` is removed only then); a failure leaves ``out`` as it
    was and no temporary folder behind."""
    name = check_options(out, options)
    reference = None
    if options.compare:
        try:  # before any work: a reference that cannot be loaded is the user's typo, not a failed build
            reference = load_app(options.compare)
        except ValueError as exc:
            raise ValueError(f"--compare: {' '.join(str(exc).split())}") from None
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.build-", dir=out.parent))
    try:
        result = _build(manifests, out, work, name, reference, obs, mt, options, inputs, warnings)
        _swap_in(work, out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    result.app = load_app(str(out))
    return result


def _swap_in(work: Path, out: Path) -> None:
    """Rename the finished folder ``work`` to ``out``; an existing ``out`` is moved aside first and removed after.
    ``work`` (made private by ``mkdtemp``) gets the mode a new folder would have under the process's umask."""
    umask = os.umask(0)
    os.umask(umask)
    work.chmod(0o777 & ~umask)
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        out.rename(old)
    try:
        work.rename(out)
    except OSError:
        if old is not None:
            old.rename(out)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _build(
    manifests: Path,
    out: Path,
    work: Path,
    name: str,
    reference: AppSpec | None,
    obs: Observations,
    mt: Metrics,
    o: BuildOptions,
    inputs: dict[str, Any],
    warnings: list[str],
) -> BuildResult:
    """:func:`build_from_observations`'s work, written into ``work`` (renamed to ``out`` by the caller)."""
    inputs = {**inputs, "observed_from": obs.what}
    services = _workload_services(manifests)
    names = set(services)
    graph, only = _merged_graph(manifests, names, obs.graph, obs.what, warnings)
    meas = Measurements(mt, obs.stats, list(mt.warnings))
    entry_shares = parse_entry(o.entry, names) if o.entry else None
    if entry_shares is None:
        entry_shares, w = detect_entry(obs.stats, names)
        warnings += w
    targets, target_source, normal_steps, _ = measured_targets(meas, o.latency_from)
    timeout = o.timeout_ms or _timeout_for(targets, entry_shares)
    # ---- the folder, a first app.yaml for the structure ----------------------------------------------------------
    _copy_manifests(manifests, work / "manifests")
    (work / "graph.json").write_text(json.dumps(graph.to_json(), indent=2) + "\n", encoding="utf-8")
    (work / "app.yaml").write_text(
        _app_yaml(name, entry_shares, o.slo_p95_ms or 1000.0, timeout, {}, [], {}, inputs, None), encoding="utf-8"
    )
    struct = load_app(str(work))  # every service at UNTRACED_DEFAULTS (the first app.yaml's defaults)
    cal = calibrate_app(struct, meas, entry_shares, o.iterations, o.seed, o.checks, o.latency_from)
    # ---- the app -------------------------------------------------------------------------------------------------
    edges, source = _fitted_edges(struct, cal, obs.stats, obs.what)
    slo = o.slo_p95_ms or slo_for(cal)
    (work / "app.yaml").write_text(
        _app_yaml(name, entry_shares, slo, timeout, cal.params, edges, source, inputs, cal), encoding="utf-8"
    )
    app = load_app(str(work))
    warnings = list(dict.fromkeys(warnings + cal.warnings))
    result = BuildResult(out, app, cal, graph, source, warnings, inputs, span_only_edges=only)
    if o.checks and obs.holdout is not None:
        result.holdout = obs.holdout(struct, mt, entry_shares, o)
    if reference is not None:
        result.compare = _compare(app, cal, reference, o.seed)
    _judge(result, meas, target_source, normal_steps, work)
    (work / "calibration.json").write_text(json.dumps(result.to_json(), indent=2) + "\n", encoding="utf-8")
    (work / "calibration.md").write_text(result.markdown(), encoding="utf-8")
    return result
