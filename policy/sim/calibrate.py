"""Calibration of a simulated application from measurements of the real one: per-minute metrics and spans
(:mod:`policy.sim.measurements` reads them), on top of the app's structure (workloads from its manifests, call
graph). ``hrl-policy app build`` (:mod:`policy.sim.appbuild`) runs it on a user's data; the vendored Online
Boutique (``policy/data/apps/online-boutique/app.yaml``) is its output on the TraStrainer Online Boutique
measurements (FSE'24 artifact) in ``policy/data/calibration/online-boutique/`` (``python -m
policy.sim.calibrate [--write-app]``; ``make bench-sim`` writes the fit error to BENCHMARKS.md, section
``calibration``).

What is fitted, and how (units: ms of one core per request, MiB, ms):

- **Normal minutes of a pod**: load > 0.05 req/s and CPU at most Q3 + 3·IQR of the pod's minutes (Tukey's far-out
  fence: drops the minutes of CPU faults, such as those the TraStrainer experiment injects).
- **CPU per request** (``cpuMsPerRequest``): Σ cpu_m / Σ rps over the normal minutes of the service's pods
  (millicores / (req/s) = ms of CPU per request). When the load hardly varies the idle overhead cannot be
  separated: the figure includes it (an upper bound on the marginal cost).
- **Working set** (``workingSetMi``): median memory_mi over the normal pod-minutes.
- **Calls per request** (edges' ``callsPerRequest``): calls from caller to callee / visits of the caller in the
  spans; **parallel fan-out** (``parallel``): at least half of an edge's calls overlapped another call of the same
  caller visit (:mod:`policy.topology.spans`). A declared edge between two services seen in the spans that never
  occurs gets 0; an edge to or from a service without spans keeps 1 call per request, sequential (a warning).
- **Targets**: the measured visit latency p50 / p95 (p99 reported, not fitted) of each service: by default
  (``latency_from="auto"``) the median over the service's *normal latency minutes* of its per-minute
  latency_p50/p95/p99_ms metrics when it has them (longer than a span window, which may catch an incident), else
  its server spans' percentiles. Normal latency minutes: success rate at its maximum (within 1e-5 relative; a
  success column that is constant, e.g. 0 because it was not collected, is not used; when that leaves fewer than
  a quarter of the minutes, the minutes at or above the median success rate) and p50 under 3× its median.
- **Load** (``lam``, user req/s): the median over the entry's normal latency minutes (else all its pod minutes)
  of the entry services' summed rps; without an entry rps metric, entry spans / span window (an underestimate
  when traces are sampled: a warning).
- **Own time** (``latencyP50Ms`` / ``latencyMeanMs``, a lognormal; and ``cpuCv`` where the CPU work alone is
  more spread out than the measured latency): fitted so that the *simulated* visit latency of each service (CPU
  sojourn + own time + its calls, as :mod:`policy.sim.model` computes it, at the measured load, with as many pods
  per workload as the metrics show (median over the minutes; else the manifests' replicas), round-robin on 4-core
  nodes of one zone) matches the target p50 and p95. Fixed-point
  iterations on (μ, σ) = (log median, log(p95/p50)/1.645) of each service's own time, all services together,
  common random numbers: μ += log(t50/s50); σ += (log(t95/t50) - log(s95/s50)) / 1.645, σ in [0.05, 2.5]; when σ
  is at its floor and the simulated spread is still too wide, cpuCv ×= 0.75 (down to 0.1).
- Services with neither spans nor metrics keep :data:`UNTRACED_DEFAULTS` (a fast in-memory store: 0.05 ms CPU,
  0.2 ms own time), a warning each.

The fit error is simulated vs measured per service (p50, p95, p99 in %) and its median over services; checks
(``checks=True``): the entry minute by minute (each measured minute simulated at its measured load), visits per
user request (metrics vs model) and the pods' own server-side p95 metric vs the spans.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import numpy as np

from policy.state import ServiceEdge
from policy.telemetry import progress
from policy.topology.spans import read_span_table, table_warnings

from .app import AppSpec, ServiceParams, load_app
from .measurements import Metrics, Series, SpanStats, read_metrics, span_stats
from .model import PerfModel, PodArrays

__all__ = [
    "ROOT",
    "DATA_DIR",
    "APP_DIR",
    "UNTRACED_DEFAULTS",
    "LatencyFrom",
    "Measurements",
    "load_measurements",
    "quiet_nanmedian",
    "normal_minutes",
    "latency_normal_minutes",
    "measured_targets",
    "Calibration",
    "placement",
    "with_params",
    "simulate_services",
    "calibrate_app",
    "measured_replicas",
    "calibrate",
    "per_minute_fit",
    "error_table",
    "APP_YAML_HEADER",
    "slo_for",
    "app_yaml",
    "markdown",
    "main",
]

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = ROOT / "data" / "calibration" / "online-boutique"
APP_DIR = ROOT / "data" / "apps" / "online-boutique"

UNTRACED_DEFAULTS = ServiceParams(cpu_ms_per_request=0.05, latency_p50_ms=0.2, latency_mean_ms=0.25, working_set_mi=64)
"""Parameters of a service with neither spans nor metrics (Online Boutique's redis-cart and load generator)."""

LatencyFrom = Literal["auto", "spans", "metrics"]

_QUANTILES = ("p50", "p95", "p99")


@dataclass
class Measurements:
    """What a calibration reads: the metrics (:class:`~policy.sim.measurements.Metrics`), the span statistics
    (:class:`~policy.sim.measurements.SpanStats`) and warnings from reading them."""

    metrics: Metrics
    spans: SpanStats
    warnings: list[str] = field(default_factory=list)


def load_measurements(data_dir: Path = DATA_DIR, services: list[str] | None = None) -> Measurements:
    """Read ``data_dir/metric`` (metrics tables) and ``data_dir/trace`` (a span table), gzip or plain, in the
    default layouts of :mod:`policy.sim.measurements`; ``services``: the app's workloads (default: Online
    Boutique's). Raises FileNotFoundError naming the folder when one is missing."""
    mdir, tdir = Path(data_dir) / "metric", Path(data_dir) / "trace"
    if not mdir.is_dir() or not tdir.is_dir():
        raise FileNotFoundError(f"{data_dir}: expected metric/ and trace/ folders")
    if services is None:
        services = list(load_app(str(APP_DIR)).services)
    metrics = read_metrics(mdir, services)
    table = read_span_table(tdir)
    return Measurements(metrics, span_stats(table), metrics.warnings + table_warnings(table))


def quiet_nanmedian(a: np.ndarray | list[float]) -> float:
    """``np.nanmedian`` of ``a``, NaN when it holds no number (numpy would warn ``All-NaN slice`` / ``Mean of
    empty slice`` on stderr and give NaN anyway: a measurement that is missing is reported as missing, once)."""
    a = np.asarray(a, dtype=np.float64)
    return float(np.nanmedian(a)) if (~np.isnan(a)).any() else math.nan


def normal_minutes(cpu: np.ndarray | None, load: np.ndarray | None) -> np.ndarray:
    """(T,) bool: minutes of one pod with load > 0.05 req/s and CPU at most Q3 + 3·IQR (Tukey's far-out fence)
    and finite. ``cpu`` / ``load`` (T,) float, either may be None (its criterion is skipped)."""
    n = len(cpu if cpu is not None else load) if (cpu is not None or load is not None) else 0
    ok = np.ones(n, dtype=bool)
    if load is not None:
        ok &= load > 0.05
    if cpu is not None:
        if np.isnan(cpu).all():  # no CPU measured: no minute is normal
            return ok & False
        q1, q3 = np.nanpercentile(cpu, [25, 75])
        ok &= (cpu <= q3 + 3 * (q3 - q1)) & np.isfinite(cpu)
    return ok


def latency_normal_minutes(p50: np.ndarray, success: np.ndarray | None) -> tuple[np.ndarray, str]:
    """(T,) bool: the minutes of a service-level latency series without failures (success at its maximum, within
    1e-5 relative; if that keeps under a quarter of the minutes, success >= its median) and with a median
    latency under 3× its overall median; and a note saying which success rule was applied."""
    ok = (p50 < 3 * quiet_nanmedian(p50)) & np.isfinite(p50)
    if success is None or not np.isfinite(success).any():
        return ok, "no success-rate column"
    top = float(np.nanmax(success))
    good = success >= top * (1 - 1e-5)
    if good.sum() >= 0.25 * np.isfinite(success).sum():
        return ok & good, f"success rate at its maximum ({top:g})"
    med = float(np.nanmedian(success))
    return ok & (success >= med), f"success rate >= its median ({med:g}): its maximum is rare"


@dataclass
class Calibration:
    """The fitted parameters, the fit error tables and what the fit read.

    ``params``: service → fitted :class:`ServiceParams` (traced services only); ``calls_per_request``:
    (caller, callee) → calls per caller visit; ``parallel``: edges with parallel fan-out; ``lam_rps``: the fit
    load (user req/s); ``targets`` / ``simulated``: service → (p50, p95, p99) ms; ``target_source``: where each
    target comes from; ``entry``: entry service → share; ``warnings``: notes for the user; ``replicas``: pods per
    service in the measured deployment (the fit's placement).
    """

    params: dict[str, ServiceParams]
    calls_per_request: dict[tuple[str, str], float]
    lam_rps: float
    targets: dict[str, tuple[float, float, float]]
    simulated: dict[str, tuple[float, float, float]]
    target_source: dict[str, str]
    per_minute: dict[str, dict[str, float]] = field(default_factory=dict)
    visits_check: list[tuple[str, float, float]] = field(default_factory=list)
    pod_latency_check: list[tuple[str, float, float, float]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    entry: dict[str, float] = field(default_factory=dict)
    parallel: set[tuple[str, str]] = field(default_factory=set)
    warnings: list[str] = field(default_factory=list)
    app_name: str = ""
    replicas: dict[str, int] = field(default_factory=dict)

    def errors_pct(self) -> dict[str, tuple[float, float, float]]:
        """Service → signed error (simulated / measured - 1) in % at p50, p95, p99."""
        return {
            s: tuple(100.0 * (b / a - 1.0) for a, b in zip(t, self.simulated[s]))  # type: ignore[misc]
            for s, t in self.targets.items()
        }

    def median_abs_error_pct(self) -> dict[str, float]:
        """``{"p50": .., "p95": .., "p99": ..}``: the median over services of the absolute error (%)."""
        e = np.abs(np.array(list(self.errors_pct().values()), dtype=np.float64).reshape(-1, 3))
        return {q: quiet_nanmedian(e[:, i]) for i, q in enumerate(_QUANTILES)}


def placement(
    model: PerfModel, app: AppSpec, nodes: int = 6, replicas: dict[str, int] | None = None
) -> tuple[PodArrays, np.ndarray]:
    """The measured deployment: ``replicas[service]`` pods per workload (default one), round-robin over ``nodes``
    4-core nodes of one zone in workload order, CPU limits and requests from the manifests."""
    replicas = replicas or {}
    svc, node, lim, req = [], [], [], []
    k = 0
    for w in app.workloads:
        r = max(1, int(replicas.get(w.service, 1)))
        if w.service not in model.pos:
            k += r
            continue
        for _ in range(r):
            svc.append(model.pos[w.service])
            node.append(k % nodes)
            lim.append(w.pod_limits.cpu_m / 1000.0 if w.pod_limits.cpu_m else math.inf)
            req.append(w.pod_requests.cpu_m / 1000.0)
            k += 1
    pods = PodArrays(np.array(svc), np.array(node), np.array(lim), np.array(req))
    return pods, np.full(nodes, 4.0)


def _nodes_for(app: AppSpec, replicas: dict[str, int] | None = None) -> int:
    """Nodes of the calibration placement: 6, or one per two pods for larger apps."""
    pods = sum(max(1, int((replicas or {}).get(w.service, 1))) for w in app.workloads)
    return max(6, math.ceil(pods / 2))


def with_params(app: AppSpec, params: dict[str, ServiceParams], calls: dict[tuple[str, str], float]) -> AppSpec:
    """``app`` with these service parameters and calls per request (edges not in ``calls`` keep theirs)."""
    edges = [
        ServiceEdge(
            e.caller,
            e.callee,
            rps=e.rps,
            calls_per_request=calls.get((e.caller, e.callee), e.calls_per_request),
            parallel=e.parallel,
        )
        for e in app.graph.edges
    ]
    return replace(app, graph=app.graph.with_edges(edges), params={**app.params, **params})


def simulate_services(
    app: AppSpec, lam: float, seed: int = 0, n: int = 20000, replicas: dict[str, int] | None = None
) -> dict[str, tuple[float, ...]]:
    """Simulated p50/p95/p99 (ms) of every visited service's visit latency at ``lam`` user req/s, with
    ``replicas`` pods per service (default one each; :func:`placement`)."""
    m = PerfModel(app)
    pods, cores = placement(m, app, _nodes_for(app, replicas), replicas)
    st = m.step(lam, pods, cores, [""] * len(cores), np.random.default_rng(seed), n, app.timeout_ms, per_service=True)
    return {
        s: tuple(float(x) for x in st.service_latency_ms[i])
        for s, i in m.pos.items()
        if np.isfinite(st.service_latency_ms[i]).all()
    }


# ---- from the measurements ----------------------------------------------------------------------------------


def _pod_normal(s: Series) -> np.ndarray:
    return normal_minutes(s.get("cpu_m") if s.has("cpu_m") else None, s.get("rps") if s.has("rps") else None)


def _service_rps(metrics: Metrics, services: list[str]) -> dict[int, float]:
    """Step → summed rps of these services' pods (steps where every one of them has a value)."""
    per: dict[str, dict[int, float]] = {}
    for svc in services:
        acc: dict[int, float] = {}
        for s in metrics.pods(svc):
            if not s.has("rps"):
                continue
            for k, v in zip(s.step.tolist(), s.get("rps").tolist()):
                acc[k] = acc.get(k, 0.0) + v
        per[svc] = acc
    if not per or not all(per.values()):
        return {}
    steps = set.intersection(*(set(a) for a in per.values()))
    return {k: sum(per[s][k] for s in services) for k in sorted(steps)}


def measured_replicas(metrics: Metrics, app: AppSpec) -> dict[str, int]:
    """Pods per service in the measured deployment: the median over steps of the pods with a sample of the
    service, else the manifests' replicas."""
    out = {w.service: max(1, w.replicas) for w in app.workloads}
    for svc in metrics.services():
        pods = [p for p in metrics.pods(svc) if p.is_pod]
        if not pods:
            continue
        count: dict[int, int] = {}
        for p in pods:
            for k in np.unique(p.step).tolist():
                count[k] = count.get(k, 0) + 1
        if count:
            out[svc] = max(1, int(round(float(np.median(list(count.values()))))))
    return out


def _resource_params(
    meas: Measurements, base: dict[str, ServiceParams], limits_mi: dict[str, float]
) -> tuple[dict[str, ServiceParams], list[str], list[str]]:
    """CPU per request and working set per service from its pods' normal minutes; notes and warnings."""
    params: dict[str, ServiceParams] = {}
    notes, warnings = [], []
    for svc in meas.metrics.services():
        pods = meas.metrics.pods(svc)
        if not pods:
            continue
        cpu, load, mem, n_ok, n_all = [], [], [], 0, 0
        for s in pods:
            ok = _pod_normal(s)
            n_ok, n_all = n_ok + int(ok.sum()), n_all + len(ok)
            if s.has("cpu_m") and s.has("rps"):
                cpu.append(s.get("cpu_m")[ok])
                load.append(s.get("rps")[ok])
            if s.has("memory_mi"):
                mem.append(s.get("memory_mi")[ok])
        update: dict[str, float] = {}
        if cpu:
            c = float(np.nansum(np.concatenate(cpu)) / max(np.nansum(np.concatenate(load)), 1e-9))
            update["cpu_ms_per_request"] = round(c, 4)
        else:
            warnings.append(f"{svc}: no cpu_m and rps metrics: cpuMsPerRequest keeps its default")
        if mem and np.isfinite(np.concatenate(mem)).any():
            ws = float(np.nanmedian(np.concatenate(mem)))
            update["working_set_mi"] = round(ws, 1)
            lim = limits_mi.get(svc)
            if lim and ws > lim:
                warnings.append(
                    f"{svc}: measured working set {ws:.0f} Mi exceeds its memory limit {lim:.0f} Mi in the manifests: "
                    f"the simulator OOM-kills such a pod (raise the limit or check the memory_mi column's unit)"
                )
        params[svc] = base.get(svc, ServiceParams()).model_copy(update=update)
        notes.append(f"{svc}: {n_ok} of {n_all} minutes normal")
    return params, notes, warnings


def measured_targets(
    meas: Measurements, latency_from: LatencyFrom
) -> tuple[dict[str, tuple[float, float, float]], dict[str, str], dict[str, np.ndarray], list[str]]:
    """The measured p50/p95/p99 (ms) per service (module docstring, "Targets"), their sources, the normal latency
    minutes (step numbers) of the services with a latency series, and warnings."""
    targets: dict[str, tuple[float, float, float]] = {}
    source: dict[str, str] = {}
    normal_steps: dict[str, np.ndarray] = {}
    warnings: list[str] = []
    for svc in sorted(set(meas.spans.durations_ms) | set(meas.metrics.services())):
        lat = meas.metrics.latency(svc) if latency_from != "spans" else None
        d = meas.spans.durations_ms.get(svc)
        if lat is not None:
            ok, rule = latency_normal_minutes(
                lat.raw["latency_p50_ms"], lat.raw["success_pct"] if lat.has("success_pct") else None
            )
            normal_steps[svc] = lat.step[ok]
            q = []
            for r in ("latency_p50_ms", "latency_p95_ms", "latency_p99_ms"):
                q.append(lat.columns[r].factor * quiet_nanmedian(lat.raw[r][ok]) if lat.has(r) else math.nan)
            targets[svc] = (q[0], q[1], q[2])
            source[svc] = f"{Path(lat.file).name}, median over {int(ok.sum())} normal minutes"
            if d is not None and len(d) >= 20:
                s50 = float(np.percentile(d, 50))
                ratio = s50 / q[0] if q[0] > 0 else math.inf
                if not 0.5 <= ratio <= 2.0:
                    warnings.append(
                        f"{svc}: its spans' median ({s50:.1f} ms) is {ratio:.1f}x its metrics' normal-minute median "
                        f"({q[0]:.1f} ms): the span window may catch an incident; the metrics are the target"
                    )
            if int(ok.sum()) < 10:
                warnings.append(f"{svc}: only {int(ok.sum())} normal latency minutes ({rule})")
        elif d is not None and len(d):
            if latency_from == "metrics":
                warnings.append(f"{svc}: no latency metrics: its target comes from its spans")
            targets[svc] = tuple(float(np.percentile(d, q)) for q in (50, 95, 99))  # type: ignore[assignment]
            source[svc] = f"server spans (n={len(d)})"
            if len(d) < 20:
                warnings.append(f"{svc}: only {len(d)} visits in the spans: its p95 target is uncertain")
    return targets, source, normal_steps, warnings


def _entry_visits(ss: SpanStats, services: set[str]) -> dict[str, int]:
    """Visits per service that enter the app: root spans, and calls from services outside it (an ingress gateway
    or a load generator in the spans but not in the manifests)."""
    out = {s: n for s, n in ss.roots.items() if s in services}
    for (a, b), n in ss.calls.items():
        if a not in services and b in services:
            out[b] = out.get(b, 0) + n
    return out


def _entry_load(
    meas: Measurements, entry: dict[str, float], normal_steps: dict[str, np.ndarray], entry_visits: dict[str, int]
) -> tuple[float, str]:
    """The fit load (user req/s) and how it was measured."""
    rps = _service_rps(meas.metrics, list(entry))
    if rps:
        lat_steps = [normal_steps[s] for s in entry if s in normal_steps]
        if lat_steps:
            steps = [k for k in lat_steps[0].tolist() if k in rps]
            how = "median entry rps over its normal latency minutes"
        else:
            steps = list(rps)
            how = "median entry rps over all its minutes"
        vals = np.array([rps[k] for k in steps], dtype=np.float64)
        if len(vals) and np.isfinite(vals).any() and np.nanmedian(vals) > 0:
            return float(np.nanmedian(vals)), how
    roots = sum(entry_visits.get(s, 0) for s in entry)
    if meas.spans.window_s > 0 and roots:
        return (
            roots / meas.spans.window_s,
            "entry visits / span window (no entry rps metric: sampled traces undercount)",
        )
    raise ValueError(
        f"entry {', '.join(entry)}: no load measured: neither an rps metric of the entry service nor entry spans "
        f"over a time window"
    )


def calibrate_app(
    app: AppSpec,
    meas: Measurements,
    entry: dict[str, float] | None = None,
    iterations: int = 20,
    seed: int = 0,
    checks: bool = True,
    latency_from: LatencyFrom = "auto",
) -> Calibration:
    """Fit the parameters of ``app`` to ``meas`` (module docstring). ``app`` gives the structure: workloads,
    call graph (its edges' ``parallel`` and, for edges without spans, ``calls_per_request``), the parameters of
    untraced services, the timeout; its traced services' parameters are replaced. ``entry``: entry service →
    share (default: ``app.entry``). ``checks``: also run the minute-by-minute comparison and the other checks.

    Raises ``ValueError`` when nothing can be fitted (no span visits and no latency metrics) or no load is
    measured.
    """
    entry = dict(entry or app.entry)
    warnings = list(meas.warnings)
    limits_mi = {w.service: w.pod_limits.memory_bytes / 2**20 for w in app.workloads if w.pod_limits.memory_bytes}
    base = {s: app.params.get(s, ServiceParams()) for s in app.params}
    params, notes, w = _resource_params(meas, base, limits_mi)
    warnings += w
    ss = meas.spans
    traced = set(ss.visits)
    calls = {k: round(v, 3) for k, v in ss.calls_per_request().items()}
    for e in app.graph.edges:
        if (e.caller, e.callee) in calls:
            continue
        if e.caller in traced and e.callee in traced:
            calls[(e.caller, e.callee)] = 0.0  # a traced pair that never occurs
        elif e.caller in traced:
            warnings.append(
                f"edge {e.caller} -> {e.callee}: {e.callee} is not in the spans: "
                f"{e.calls_per_request if e.calls_per_request is not None else 1:g} call(s) per request assumed"
            )
    targets, source, normal_steps, w = measured_targets(meas, latency_from)
    warnings += w
    targets = {s: t for s, t in targets.items() if s in app.services}  # a span service without a workload: dropped
    if meas.metrics.series:
        for s in sorted(set(targets) - set(params)):
            warnings.append(f"{s}: no resource metrics: cpuMsPerRequest and workingSetMi keep their defaults")
    if not targets:
        raise ValueError("nothing to fit: no service has span visits or latency metrics")
    lam, how = _entry_load(meas, entry, normal_steps, _entry_visits(ss, set(app.services)))
    notes.append(f"load {lam:.3f} user req/s: {how}")
    replicas = measured_replicas(meas.metrics, app)
    for s in sorted(set(app.services) - traced - set(meas.metrics.services())):
        if s not in entry and any(e.callee == s for e in app.graph.edges):
            warnings.append(f"{s}: neither spans nor metrics: it keeps {_params_text(app.params.get(s))}")
    for s in sorted(set(ss.visits) - set(app.services)):
        warnings.append(f"{s}: in the spans but no workload in the manifests: dropped")
    # ---- own time: fixed-point fit on the simulated visit latency ---------------------------------------
    # start from the measured quantiles themselves (independent of the app's current parameters: idempotent)
    for s in targets:
        params[s] = params.get(s, base.get(s, ServiceParams())).model_copy(update={"cpu_cv": 1.0})
    mu = {s: math.log(targets[s][0] / 2.0) for s in targets}
    sg = {s: min(max(math.log(targets[s][1] / targets[s][0]) / 1.645, 0.05), 2.5) for s in targets}
    cur = app
    for _ in progress(range(iterations), "calibration: fit", iterations, "iteration"):
        for s in targets:
            params[s] = params[s].model_copy(
                update={"latency_p50_ms": math.exp(mu[s]), "latency_mean_ms": math.exp(mu[s] + sg[s] ** 2 / 2)}
            )
        cur = with_params(app, params, calls)
        sim = simulate_services(cur, lam, seed, replicas=replicas)
        for s, (t50, t95, _t99) in targets.items():
            if s not in sim:
                continue
            s50, s95, _ = sim[s]
            mu[s] += math.log(t50 / s50)
            want = math.log(t95 / t50) - math.log(s95 / s50)
            if want < 0 and sg[s] <= 0.05 + 1e-9 and params[s].cpu_cv > 0.1:
                # the spread comes from the CPU work itself: make it less variable
                params[s] = params[s].model_copy(update={"cpu_cv": round(max(params[s].cpu_cv * 0.75, 0.1), 3)})
            sg[s] = min(max(sg[s] + want / 1.645, 0.05), 2.5)
            mu[s] = max(mu[s], math.log(0.005))
    for s in targets:
        params[s] = params[s].model_copy(
            update={
                "latency_p50_ms": round(math.exp(mu[s]), 4),
                "latency_mean_ms": round(math.exp(mu[s] + sg[s] ** 2 / 2), 4),
            }
        )
    cur = with_params(app, params, calls)
    sim = simulate_services(cur, lam, seed + 1, replicas=replicas)
    unreached = [s for s in targets if s not in sim]
    if unreached:
        warnings.append(
            f"not reached from the entry {', '.join(entry)} in the call graph, so not fitted: {', '.join(unreached)}"
        )
    cal = Calibration(
        params,
        calls,
        lam,
        targets,
        {s: sim.get(s, (math.nan,) * 3) for s in targets},  # type: ignore[misc]
        source,
        notes=notes,
        entry=entry,
        parallel={(e.caller, e.callee) for e in app.graph.edges if e.parallel},
        warnings=list(dict.fromkeys(warnings)),
        app_name=app.name,
        replicas=replicas,
    )
    for svc, e in cal.errors_pct().items():
        if svc in sim and (abs(e[0]) > 15 or abs(e[1]) > 15):
            why = (
                "its calls and CPU alone take longer than its measured latency (check calls per request and the "
                "callees' latencies)"
                if e[0] > 15 and params[svc].latency_p50_ms <= 0.0051
                else "the fit did not converge (try more --iterations)"
            )
            cal.warnings.append(f"{svc}: simulated vs measured p50 {e[0]:+.0f} %, p95 {e[1]:+.0f} %: {why}")
    if checks:
        _checks(cal, cur, meas, normal_steps, seed)
    return cal


def _params_text(p: ServiceParams | None) -> str:
    p = p or ServiceParams()
    return f"cpuMsPerRequest {p.cpu_ms_per_request:g}, latencyP50Ms {p.latency_p50_ms:g}"


def _checks(cal: Calibration, app: AppSpec, meas: Measurements, normal_steps: dict[str, np.ndarray], seed: int) -> None:
    m = PerfModel(app)
    entry = list(cal.entry)
    entry_ok: dict[int, bool] = {}
    for s in (p for e in entry for p in meas.metrics.pods(e)):
        for k, ok in zip(s.step.tolist(), _pod_normal(s).tolist()):
            entry_ok[k] = entry_ok.get(k, True) and ok
    entry_rps = _service_rps(meas.metrics, entry)
    for svc in meas.metrics.services():
        pods = [p for p in meas.metrics.pods(svc) if p.has("rps")]
        if not pods or svc not in m.pos or not entry_rps:
            continue
        num = den = 0.0
        for p in pods:
            for k, ok, v in zip(p.step.tolist(), _pod_normal(p).tolist(), p.get("rps").tolist()):
                if ok and entry_ok.get(k) and k in entry_rps and math.isfinite(v):
                    num += v
                    den += entry_rps[k]
        cal.visits_check.append((svc, num / den if den else math.nan, float(m.visits[m.pos[svc]])))
    if len(entry) == 1 and meas.metrics.latency(entry[0]) is not None and entry_rps:
        cal.per_minute = per_minute_fit(app, meas, entry[0], seed, replicas=cal.replicas)
    for svc in meas.metrics.services():
        pods = [p for p in meas.metrics.pods(svc) if p.has("pod_latency_p95_ms")]
        if not pods:
            continue
        vals = np.concatenate([p.raw["pod_latency_p95_ms"][_pod_normal(p)] for p in pods])
        meas_p95 = pods[0].columns["pod_latency_p95_ms"].factor * quiet_nanmedian(vals)
        cal.pod_latency_check.append(
            (
                svc,
                meas_p95,
                cal.targets[svc][1] if svc in cal.targets else math.nan,
                cal.simulated[svc][1] if svc in cal.simulated else math.nan,
            )
        )


def per_minute_fit(
    app: AppSpec, meas: Measurements, entry: str, seed: int = 0, n: int = 2000, replicas: dict[str, int] | None = None
) -> dict[str, dict[str, float]]:
    """Simulate every measured minute at its measured entry load and compare the simulated user-request
    p50/p95/p99 with the entry's latency metrics of that minute: median absolute relative error (%) over the
    normal minutes and over all minutes, and the median signed error over the normal minutes."""
    m = PerfModel(app)
    pods, cores = placement(m, app, _nodes_for(app, replicas), replicas)
    rng = np.random.default_rng(seed)
    rps = _service_rps(meas.metrics, [entry])
    lat = meas.metrics.latency(entry)
    assert lat is not None
    normal, _ = latency_normal_minutes(
        lat.raw["latency_p50_ms"], lat.raw["success_pct"] if lat.has("success_pct") else None
    )
    roles = ("latency_p50_ms", "latency_p95_ms", "latency_p99_ms")
    sim, meas_q, norm = [], [], []
    steps = lat.step.tolist()
    for i, k in enumerate(progress(steps, f"calibration: {entry} minute by minute", len(steps), "minute")):
        lam = rps.get(k, math.nan)
        row = [math.nan] * 3
        if lam > 0:
            st = m.step(float(lam), pods, cores, [""] * len(cores), rng, n, app.timeout_ms)
            if len(st.latency_ms):
                row = list(np.percentile(st.latency_ms, [50, 95, 99]))
        sim.append(row)
        meas_q.append([lat.get(r)[i] if lat.has(r) else math.nan for r in roles])
        norm.append(bool(normal[i]))
    sim_a, meas_a, normal_a = np.array(sim), np.array(meas_q), np.array(norm)
    out = {}
    for j, q in enumerate(_QUANTILES):
        err = 100.0 * (sim_a[:, j] / meas_a[:, j] - 1.0)
        okk = np.isfinite(err)
        out[q] = {
            "mape_normal_pct": float(np.nanmedian(np.abs(err[okk & normal_a]))) if (okk & normal_a).any() else math.nan,
            "mape_all_pct": float(np.nanmedian(np.abs(err[okk]))) if okk.any() else math.nan,
            "median_err_normal_pct": float(np.nanmedian(err[okk & normal_a])) if (okk & normal_a).any() else math.nan,
            "minutes_normal": int((okk & normal_a).sum()),
            "minutes_all": int(okk.sum()),
        }
    return out


# ---- Online Boutique ------------------------------------------------------------------------------------


def calibrate(
    meas: Measurements | None = None,
    app: AppSpec | None = None,
    iterations: int = 20,
    seed: int = 0,
    checks: bool = True,
) -> Calibration:
    """Online Boutique fitted to the vendored TraStrainer measurements: :func:`calibrate_app` on
    ``policy/data/apps/online-boutique`` (only its structure is used: the fit does not depend on the parameters
    it holds) and ``policy/data/calibration/online-boutique``."""
    app = app or load_app(str(APP_DIR))
    meas = meas or load_measurements(DATA_DIR, list(app.services))
    return calibrate_app(app, meas, {"frontend": 1.0}, iterations, seed, checks)


APP_YAML_HEADER = """\
# Online Boutique (Google microservices-demo v0.10.6) as a simulated application.
# Replicas, requests and limits: the real release manifests next to this file (unchanged).
# Call graph: from those manifests' *_ADDR environment variables (hrl-policy graph policy/data/apps/online-boutique).
# Performance parameters: GENERATED by `python -m policy.sim.calibrate --write-app` from the TraStrainer Online
# Boutique measurements vendored in policy/data/calibration/online-boutique/ (method: policy/sim/calibrate.py and
# PROVENANCE.md "Calibration"; fit error: BENCHMARKS.md, section calibration). Edit the script, not these numbers.
"""


def slo_for(cal: Calibration) -> float:
    """The app's p95 SLO (ms): 1.3x the measured p95 of the (slowest) entry service, rounded to 50 ms (>= 50)."""
    p95 = max(cal.targets[s][1] for s in cal.entry if s in cal.targets)
    return float(max(50, 50 * round(1.3 * p95 / 50)))


def app_yaml(cal: Calibration, app: AppSpec) -> str:
    """Online Boutique's app.yaml text with the fitted parameters (the committed file)."""
    lines = [
        APP_YAML_HEADER.rstrip("\n"),
        "apiVersion: hrl-scheduler.io/v1alpha1",
        "kind: App",
        "name: online-boutique",
        "description: Google Online Boutique, 12 workloads, user requests enter at the frontend",
        "manifests: kubernetes-manifests.yaml",
        "graph: manifests",
        "entry: {frontend: 1.0}",
        f"# SLO: about 1.3x the measured p95 of the frontend in normal minutes ({cal.targets['frontend'][1]:.0f} ms)",
        f"sloP95Ms: {slo_for(cal):g}",
        f"timeoutMs: {app.timeout_ms:g}",
        "# untraced services (redis-cart, loadgenerator) keep these defaults",
        "defaults: {cpuMsPerRequest: 0.05, latencyP50Ms: 0.2, latencyMeanMs: 0.25, workingSetMi: 64}",
        "services:",
    ]
    width = max(len(s) for s in cal.params) + 1
    for s in sorted(cal.params):
        p = cal.params[s]
        cv = f", cpuCv: {p.cpu_cv:g}" if p.cpu_cv != 1.0 else ""
        lines.append(
            f"  {s + ':':<{width}} {{cpuMsPerRequest: {p.cpu_ms_per_request:g}{cv}, latencyP50Ms: "
            f"{p.latency_p50_ms:g}, latencyMeanMs: {p.latency_mean_ms:g}, workingSetMi: {p.working_set_mi:g}}}"
        )
    lines.append("edges:")
    order = sorted(cal.calls_per_request.items(), key=lambda kv: (kv[0][0] != "frontend", kv[0][0], -kv[1]))
    for (a, b), v in order:
        if app.graph.edge(a, b) is None:
            continue
        if v == 0.0:
            lines.append("  # in the code (manifests' *_ADDR), never called in the spans")
        lines.append(f"  - {{caller: {a}, callee: {b}, callsPerRequest: {v:g}}}")
    lines.append("  # redis is not traced; one cache operation per cart request (cartservice's RedisCartStore)")
    lines.append("  - {caller: cartservice, callee: redis-cart, callsPerRequest: 1.0}")
    return "\n".join(lines) + "\n"


# ---- report ---------------------------------------------------------------------------------------------


def error_table(cal: Calibration) -> list[dict[str, object]]:
    """One row per fitted service: measured and simulated p50/p95/p99 (ms), signed errors (%), the source."""
    errs = cal.errors_pct()
    rows = []
    for s in sorted(cal.targets):
        row: dict[str, object] = {"service": s, "target_from": cal.target_source[s]}
        for i, q in enumerate(_QUANTILES):
            row[f"measured_{q}_ms"] = _finite(cal.targets[s][i])
            row[f"simulated_{q}_ms"] = _finite(cal.simulated[s][i])
            row[f"error_{q}_pct"] = _finite(errs[s][i])
        rows.append(row)
    return rows


def _finite(v: float) -> float | None:
    return round(float(v), 4) if math.isfinite(v) else None


_OB_POD_METRIC_NOTE = (
    " For Online Boutique the metric (PodServerLatencyP95) comes from a latency histogram: values just under 5 ms are "
    'the first bucket\'s interpolation ("under 5 ms"); for currencyservice, frontend and checkoutservice it disagrees '
    "with the spans by an order of magnitude (it measures more than the handler: queueing in front of it)."
)


def markdown(cal: Calibration, intro: str | None = None) -> str:
    """The fit report in markdown; without ``intro``, Online Boutique's (the ``calibration`` section of
    BENCHMARKS.md)."""
    note = _OB_POD_METRIC_NOTE if intro is None else ""
    if intro is None:
        intro = (
            "Written by `make bench-sim` (`python -m policy.bench.sim`). Online Boutique fitted to the TraStrainer "
            "measurements (policy/sim/calibrate.py; data in policy/data/calibration/online-boutique/; the same "
            "fit as `hrl-policy app build`)."
        )
    out = [
        f"{intro} Fit load: {cal.lam_rps:.2f} user req/s (median entry load of the normal minutes); one pod per "
        "workload as measured.",
        "",
        "**Per service: simulated vs measured visit latency** (ms; fitted on p50 and p95, p99 not fitted; the "
        "target of each service from its latency metrics, median over normal minutes, else its server spans).",
        "",
        "| service | target from | measured p50 / p95 / p99 | simulated p50 / p95 / p99 | error p50 / p95 / p99 % |",
        "|---|---|---|---|---|",
    ]
    errs = cal.errors_pct()
    for s in sorted(cal.targets):
        t, m, e = cal.targets[s], cal.simulated[s], errs[s]
        out.append(
            f"| {s} | {cal.target_source[s]} | {t[0]:.2f} / {t[1]:.2f} / {t[2]:.2f} | "
            f"{m[0]:.2f} / {m[1]:.2f} / {m[2]:.2f} | {e[0]:+.1f} / {e[1]:+.1f} / {e[2]:+.1f} |"
        )
    E = np.abs(np.array(list(errs.values()), dtype=np.float64).reshape(-1, 3))
    med = cal.median_abs_error_pct()
    out += [
        "",
        f"Median absolute error over services: p50 {med['p50']:.1f}%, p95 {med['p95']:.1f}%, "
        f"p99 {med['p99']:.1f}% (max {np.nanmax(E[:, 0]):.1f}% / {np.nanmax(E[:, 1]):.1f}% / "
        f"{np.nanmax(E[:, 2]):.1f}%).",
        "",
    ]
    pm = cal.per_minute
    if pm:
        out += [
            f"**{', '.join(cal.entry)} minute by minute** (each measured minute simulated at its measured load, "
            "compared with that minute's latency metrics): median absolute error %.",
            "",
            "| percentile | normal minutes | all minutes (faults included) | median signed error, normal |",
            "|---|---|---|---|",
        ]
        for q, d in pm.items():
            out.append(
                f"| {q} | {d['mape_normal_pct']:.1f} (n={d['minutes_normal']}) | {d['mape_all_pct']:.1f} "
                f"(n={d['minutes_all']}) | {d['median_err_normal_pct']:+.1f} |"
            )
        out.append("")
    if cal.visits_check:
        out += [
            "**Visits per user request**: measured (Σ rps / Σ entry rps over normal minutes, from the metrics) vs "
            "the model (from the span-derived calls per request):",
            "",
            "| service | measured | model |",
            "|---|---|---|",
        ]
        for s, a, b in cal.visits_check:
            out.append(f"| {s} | {a:.3f} | {b:.3f} |")
        out.append("")
    if cal.pod_latency_check:
        out += [
            "**Per-pod server-side p95 metric** (median over normal minutes) vs the target p95 and the simulated p95 "
            "(ms); reported, not fitted." + note,
            "",
            "| service | pod metric p95 | target p95 | simulated p95 |",
            "|---|---|---|---|",
        ]
        for s, a, t, b in cal.pod_latency_check:
            out.append(f"| {s} | {a:.1f} | {t:.1f} | {b:.1f} |")
        out.append("")
    out += [
        "Fitted parameters:",
        "",
        "| service | cpuMsPerRequest | cpuCv | latencyP50Ms | latencyMeanMs | workingSetMi |",
        "|---|---|---|---|---|---|",
    ]
    for s in sorted(cal.params):
        p = cal.params[s]
        out.append(
            f"| {s} | {p.cpu_ms_per_request:g} | {p.cpu_cv:g} | {p.latency_p50_ms:g} | {p.latency_mean_ms:g} | "
            f"{p.working_set_mi:g} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Calibrate the simulated Online Boutique from the TraStrainer data.")
    ap.add_argument("--write-app", action="store_true", help="regenerate policy/data/apps/online-boutique/app.yaml")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    cal = calibrate(seed=args.seed)
    print(markdown(cal))
    for w in cal.warnings:
        print(f"warning: {w}", file=sys.stderr)
    if args.write_app:
        app = load_app(str(APP_DIR))
        (APP_DIR / "app.yaml").write_text(app_yaml(cal, app), encoding="utf-8")
        print(f"wrote {APP_DIR / 'app.yaml'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
