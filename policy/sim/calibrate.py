"""Calibration of the simulated Online Boutique (``policy/data/apps/online-boutique/app.yaml``) from real
measurements: the TraStrainer Online Boutique spans and per-pod metrics (FSE'24 artifact), vendored in
``policy/data/calibration/online-boutique/`` (see its PROVENANCE.md).

What is fitted, and how:

- **CPU per request** (``cpuMsPerRequest``): Σ CpuUsage(m) / Σ PodWorkload(Ops) over each pod's *normal*
  minutes (load > 0.05 ops/s and CPU not a far outlier: ≤ Q3 + 3·IQR of the pod's minutes, which drops the
  minutes of the experiment's injected CPU faults). The load hardly varies over the 20 hours, so the idle
  overhead cannot be separated: the figure includes it (an upper bound on the marginal cost).
- **Working set** (``workingSetMi``): median MemoryUsage(Mi) over the normal minutes.
- **Calls per request** (edges' ``callsPerRequest``): calls from caller to callee / visits the caller
  served, in the spans (each (TraceID, SpanID) once); a call is a server span of another service whose
  parent chain inside the caller's pod leads to the caller's server span.
- **Own time** (``latencyP50Ms`` / ``latencyMeanMs``, a lognormal; and ``cpuCv`` where the CPU work alone is
  more spread out than the measured latency): fitted so that the *simulated* visit
  latency of each service (CPU sojourn + own time + its calls, as :mod:`policy.sim.model` computes it, at the
  measured load, one pod per service as in the measured deployment) matches the measured median and 95th
  percentile: of the services' server spans for the back ends; of the frontend's per-minute LatencyP50/P95
  (``front_service.csv``, median over the normal minutes) for the frontend, because the spans' two minutes
  catch an injected fault at the frontend (its server spans take ~1.2 s there against ~0.16 s normally).
  Fixed-point iterations on (log median, log p95/p50), all services together, common random numbers.

The fit error (simulated vs measured p50/p95/p99 per service; the frontend minute by minute) goes to the
``calibration`` section of BENCHMARKS.md (written by ``make bench-sim``). Run
``python -m policy.sim.calibrate [--write-app]``.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import math
import sys
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from .app import AppSpec, ServiceParams, load_app
from .model import PerfModel, PodArrays

__all__ = [
    "ROOT",
    "DATA_DIR",
    "APP_DIR",
    "TRACED",
    "service_of_pod",
    "Measurements",
    "load_measurements",
    "normal_minutes",
    "front_normal_minutes",
    "SpanStats",
    "span_stats",
    "Calibration",
    "placement",
    "with_params",
    "simulate_services",
    "calibrate",
    "per_minute_fit",
    "APP_YAML_HEADER",
    "slo_for",
    "app_yaml",
    "markdown",
    "main",
]

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = ROOT / "data" / "calibration" / "online-boutique"
APP_DIR = ROOT / "data" / "apps" / "online-boutique"

#: Services whose pods were instrumented (redis-cart and the load generator were not).
TRACED = (
    "adservice",
    "cartservice",
    "checkoutservice",
    "currencyservice",
    "emailservice",
    "frontend",
    "paymentservice",
    "productcatalogservice",
    "recommendationservice",
    "shippingservice",
)


def service_of_pod(pod: str) -> str:
    """PodName without its last two dash-separated parts (ReplicaSet hash and pod suffix)."""
    return "-".join(pod.split("-")[:-2])


def _read_csv(path: Path) -> list[dict[str, str]]:
    with (
        gzip.open(path, "rt", encoding="utf-8", newline="")
        if path.suffix == ".gz"
        else open(path, encoding="utf-8", newline="") as fh
    ):
        return list(csv.DictReader(io.StringIO(fh.read())))


@dataclass
class Measurements:
    """The vendored measurements: ``metrics[service][column]`` (per-minute arrays, one pod per service),
    ``front[column]`` (frontend service level), ``spans`` (deduplicated rows)."""

    metrics: dict[str, dict[str, np.ndarray]]
    front: dict[str, np.ndarray]
    spans: list[dict[str, str]]


def load_measurements(data_dir: Path = DATA_DIR) -> Measurements:
    """Read the per-pod metric CSVs, ``front_service.csv`` and the span files (gzip or plain).

    Raises FileNotFoundError naming the folder when a file is missing."""
    mdir, tdir = data_dir / "metric", data_dir / "trace"
    if not mdir.is_dir() or not tdir.is_dir():
        raise FileNotFoundError(f"{data_dir}: expected metric/ and trace/ folders")
    metrics: dict[str, dict[str, np.ndarray]] = {}
    front: dict[str, np.ndarray] = {}
    for p in sorted(mdir.iterdir()):
        rows = _read_csv(p)
        if not rows:
            continue
        cols = {k: np.array([_num(r[k]) for r in rows]) for k in rows[0] if k not in ("Time", "PodName", "ServiceName")}
        if p.name.startswith("front_service"):
            front = cols
        else:
            metrics[service_of_pod(rows[0]["PodName"])] = cols
    spans: dict[tuple[str, str], dict[str, str]] = {}
    for p in sorted(tdir.iterdir()):
        for r in _read_csv(p):
            spans.setdefault((r["TraceID"], r["SpanID"]), r)  # the two files repeat 192 spans
    return Measurements(metrics, front, list(spans.values()))


def _num(s: str) -> float:
    try:
        return float(s)
    except ValueError:
        return math.nan


def normal_minutes(m: dict[str, np.ndarray]) -> np.ndarray:
    """Minutes of one pod with load (> 0.05 ops/s) and CPU at most Q3 + 3·IQR (Tukey's far-out fence)."""
    cpu, w = m["CpuUsage(m)"], m["PodWorkload(Ops)"]
    q1, q3 = np.nanpercentile(cpu, [25, 75])
    return (w > 0.05) & (cpu <= q3 + 3 * (q3 - q1)) & np.isfinite(cpu)


def front_normal_minutes(front: dict[str, np.ndarray]) -> np.ndarray:
    """Frontend minutes without failures and with a median latency under 3× the overall median."""
    p50 = front["LatencyP50(s)"]
    return (front["SuccessRate(%)"] >= 99.999) & (p50 < 3 * np.nanmedian(p50)) & np.isfinite(p50)


@dataclass
class SpanStats:
    """From the spans: server-span durations (ms) per service, visits per service, calls per (caller,
    callee), the window (s) and the user requests (frontend root spans)."""

    durations_ms: dict[str, np.ndarray]
    visits: dict[str, int]
    calls: dict[tuple[str, str], int]
    window_s: float
    user_requests: int

    def calls_per_request(self) -> dict[tuple[str, str], float]:
        return {(a, b): n / self.visits[a] for (a, b), n in self.calls.items() if self.visits.get(a)}


def span_stats(spans: list[dict[str, str]]) -> SpanStats:
    by_id = {(r["TraceID"], r["SpanID"]): r for r in spans}
    svc = {k: service_of_pod(r["PodName"]) for k, r in by_id.items()}

    def is_server(k) -> bool:
        r = by_id[k]
        if r["ParentID"] == "root":
            return True
        pk = (k[0], r["ParentID"])
        return pk in by_id and svc[pk] != svc[k]

    def owner(k):
        """The server span of the same pod that (transitively) contains span k."""
        seen = 0
        while not is_server(k) and seen < 64:
            k = (k[0], by_id[k]["ParentID"])
            if k not in by_id:
                return None
            seen += 1
        return k

    dur: dict[str, list[float]] = defaultdict(list)
    visits: dict[str, int] = defaultdict(int)
    calls: dict[tuple[str, str], int] = defaultdict(int)
    for k, r in by_id.items():
        if not is_server(k):
            continue
        s = svc[k]
        dur[s].append(int(r["Duration"]) / 1000.0)
        visits[s] += 1
        if r["ParentID"] != "root":
            o = owner((k[0], r["ParentID"]))
            if o is not None:
                calls[(svc[o], s)] += 1
    t0 = min(int(r["StartTimeUnixNano"]) for r in spans)
    t1 = max(int(r["EndTimeUnixNano"]) for r in spans)
    roots = sum(1 for r in spans if r["ParentID"] == "root")
    return SpanStats({s: np.array(v) for s, v in dur.items()}, dict(visits), dict(calls), (t1 - t0) / 1e9, roots)


@dataclass
class Calibration:
    """The fitted parameters and the fit error tables."""

    params: dict[str, ServiceParams]
    calls_per_request: dict[tuple[str, str], float]
    lam_rps: float
    targets: dict[str, tuple[float, float, float]]  # measured p50, p95, p99 (ms)
    simulated: dict[str, tuple[float, float, float]]
    target_source: dict[str, str]
    per_minute: dict[str, dict[str, float]] = field(default_factory=dict)
    visits_check: list[tuple[str, float, float]] = field(default_factory=list)
    pod_latency_check: list[tuple[str, float, float, float]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def placement(model: PerfModel, app: AppSpec, nodes: int = 6) -> tuple[PodArrays, np.ndarray]:
    """One pod per workload (the measured deployment), round-robin over ``nodes`` 4-core nodes of one zone,
    CPU limits and requests from the manifests."""
    svc, node, lim, req = [], [], [], []
    for i, w in enumerate(app.workloads):
        if w.service not in model.pos:
            continue
        svc.append(model.pos[w.service])
        node.append(i % nodes)
        lim.append(w.pod_limits.cpu_m / 1000.0 if w.pod_limits.cpu_m else math.inf)
        req.append(w.pod_requests.cpu_m / 1000.0)
    pods = PodArrays(np.array(svc), np.array(node), np.array(lim), np.array(req))
    return pods, np.full(nodes, 4.0)


def with_params(app: AppSpec, params: dict[str, ServiceParams], calls: dict[tuple[str, str], float]) -> AppSpec:
    from policy.state import ServiceEdge

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


def simulate_services(app: AppSpec, lam: float, seed: int = 0, n: int = 20000) -> dict[str, tuple[float, ...]]:
    """Simulated p50/p95/p99 (ms) of every visited service's visit latency at ``lam`` user req/s."""
    m = PerfModel(app)
    pods, cores = placement(m, app)
    st = m.step(lam, pods, cores, [""] * len(cores), np.random.default_rng(seed), n, app.timeout_ms, per_service=True)
    return {
        s: tuple(float(x) for x in st.service_latency_ms[i])
        for s, i in m.pos.items()
        if np.isfinite(st.service_latency_ms[i]).all()
    }


def calibrate(
    meas: Measurements | None = None,
    app: AppSpec | None = None,
    iterations: int = 20,
    seed: int = 0,
    checks: bool = True,
) -> Calibration:
    """Fit the parameters (module docstring). ``app``: the Online Boutique AppSpec to start from (only its
    structure is used: the fit does not depend on the parameters it holds). ``checks``: also run the
    minute-by-minute comparison and the other checks of the report (slower)."""
    meas = meas or load_measurements()
    app = app or load_app(str(APP_DIR))
    notes = []
    # ---- CPU and memory from the per-pod metrics ------------------------------------------------------
    base = {s: app.params.get(s, ServiceParams()) for s in app.params}
    params: dict[str, ServiceParams] = {}
    for s, m in meas.metrics.items():
        ok = normal_minutes(m)
        cpu = float(np.nansum(m["CpuUsage(m)"][ok]) / max(np.nansum(m["PodWorkload(Ops)"][ok]), 1e-9))
        ws = float(np.nanmedian(m["MemoryUsage(Mi)"][ok]))
        params[s] = base.get(s, ServiceParams()).model_copy(
            update={"cpu_ms_per_request": round(cpu, 4), "working_set_mi": round(ws, 1)}
        )
        notes.append(f"{s}: {int(ok.sum())} of {len(ok)} minutes normal")
    # ---- calls per request from the spans -------------------------------------------------------------
    ss = span_stats(meas.spans)
    calls = {k: round(v, 3) for k, v in ss.calls_per_request().items()}
    for e in app.graph.edges:
        if e.caller in TRACED and e.callee in TRACED and (e.caller, e.callee) not in calls:
            calls[(e.caller, e.callee)] = 0.0  # a traced pair that never occurs
    # ---- targets ----------------------------------------------------------------------------------------
    fm = front_normal_minutes(meas.front)
    targets: dict[str, tuple[float, float, float]] = {}
    source: dict[str, str] = {}
    for s, d in ss.durations_ms.items():
        if s == "frontend":
            continue
        targets[s] = tuple(float(np.percentile(d, q)) for q in (50, 95, 99))  # type: ignore[assignment]
        source[s] = f"server spans (n={len(d)})"
    targets["frontend"] = tuple(
        1000.0 * float(np.nanmedian(meas.front[c][fm]))  # type: ignore[assignment]
        for c in ("LatencyP50(s)", "LatencyP95(s)", "LatencyP99(s)")
    )
    source["frontend"] = f"front_service.csv, median over {int(fm.sum())} normal minutes"
    lam = float(np.nanmedian(meas.metrics["frontend"]["PodWorkload(Ops)"][fm]))
    # ---- own time: fixed-point fit on the simulated visit latency ---------------------------------------
    # start from the measured quantiles themselves (independent of the current app.yaml: the fit is idempotent)
    for s in targets:
        params[s] = params[s].model_copy(update={"cpu_cv": 1.0})
    mu = {s: math.log(targets[s][0] / 2.0) for s in targets}
    sg = {s: min(max(math.log(targets[s][1] / targets[s][0]) / 1.645, 0.05), 2.5) for s in targets}
    cur = app
    for _ in range(iterations):
        for s in targets:
            params[s] = params[s].model_copy(
                update={"latency_p50_ms": math.exp(mu[s]), "latency_mean_ms": math.exp(mu[s] + sg[s] ** 2 / 2)}
            )
        cur = with_params(app, params, calls)
        sim = simulate_services(cur, lam, seed)
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
    sim = simulate_services(cur, lam, seed + 1)
    cal = Calibration(
        params, calls, lam, targets, {s: sim.get(s, (math.nan,) * 3) for s in targets}, source, notes=notes
    )
    if not checks:
        return cal
    # ---- checks -------------------------------------------------------------------------------------------
    m = PerfModel(cur)
    w_front = meas.metrics["frontend"]["PodWorkload(Ops)"]
    for s, mm in sorted(meas.metrics.items()):
        ok = normal_minutes(mm) & normal_minutes(meas.metrics["frontend"])
        measured = float(np.nansum(mm["PodWorkload(Ops)"][ok]) / max(np.nansum(w_front[ok]), 1e-9))
        cal.visits_check.append((s, measured, float(m.visits[m.pos[s]])))
    cal.per_minute = per_minute_fit(cur, meas, seed)
    for s, mm in sorted(meas.metrics.items()):
        ok = normal_minutes(mm)
        meas_p95 = 1000.0 * float(np.nanmedian(mm["PodServerLatencyP95(s)"][ok]))
        cal.pod_latency_check.append(
            (
                s,
                meas_p95,
                targets[s][1] if s in targets else math.nan,
                cal.simulated[s][1] if s in cal.simulated else math.nan,
            )
        )
    return cal


def per_minute_fit(app: AppSpec, meas: Measurements, seed: int = 0, n: int = 2000) -> dict[str, dict[str, float]]:
    """Simulate every measured minute at its measured frontend load and compare the frontend's simulated
    p50/p95/p99 with ``front_service.csv``'s: median absolute relative error (%) over the normal minutes and
    over all minutes, and the median signed error."""
    m = PerfModel(app)
    pods, cores = placement(m, app)
    rng = np.random.default_rng(seed)
    lam = meas.metrics["frontend"]["PodWorkload(Ops)"]
    front = meas.front
    k = min(len(lam), len(front["LatencyP50(s)"]))
    sim = np.full((k, 3), np.nan)
    for i in range(k):
        if not lam[i] > 0:
            continue
        st = m.step(float(lam[i]), pods, cores, [""] * len(cores), rng, n, app.timeout_ms)
        if len(st.latency_ms):
            sim[i] = np.percentile(st.latency_ms, [50, 95, 99])
    meas_q = 1000.0 * np.stack([front[c][:k] for c in ("LatencyP50(s)", "LatencyP95(s)", "LatencyP99(s)")], axis=1)
    normal = front_normal_minutes({c: v[:k] for c, v in front.items()})
    out = {}
    for j, q in enumerate(("p50", "p95", "p99")):
        err = 100.0 * (sim[:, j] / meas_q[:, j] - 1.0)
        okk = np.isfinite(err)
        out[q] = {
            "mape_normal_pct": float(np.nanmedian(np.abs(err[okk & normal]))),
            "mape_all_pct": float(np.nanmedian(np.abs(err[okk]))),
            "median_err_normal_pct": float(np.nanmedian(err[okk & normal])),
            "minutes_normal": int((okk & normal).sum()),
            "minutes_all": int(okk.sum()),
        }
    return out


# ---- output ---------------------------------------------------------------------------------------------

APP_YAML_HEADER = """\
# Online Boutique (Google microservices-demo v0.10.6) as a simulated application.
# Replicas, requests and limits: the real release manifests next to this file (unchanged).
# Call graph: from those manifests' *_ADDR environment variables (hrl-policy graph policy/data/apps/online-boutique).
# Performance parameters: GENERATED by `python -m policy.sim.calibrate --write-app` from the TraStrainer Online
# Boutique measurements vendored in policy/data/calibration/online-boutique/ (method: policy/sim/calibrate.py and
# PROVENANCE.md "Calibration"; fit error: BENCHMARKS.md, section calibration). Edit the script, not these numbers.
"""


def slo_for(cal: Calibration) -> float:
    """The app's p95 SLO (ms): 1.3x the measured normal-minute frontend p95, rounded to 50 ms."""
    return float(50 * round(1.3 * cal.targets["frontend"][1] / 50))


def app_yaml(cal: Calibration, app: AppSpec) -> str:
    """The whole app.yaml text with the fitted parameters."""
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


def markdown(cal: Calibration) -> str:
    """The ``calibration`` section of BENCHMARKS.md."""
    out = [
        "Written by `make bench-sim` (`python -m policy.bench.sim`). Online Boutique fitted to the "
        "TraStrainer measurements (policy/sim/calibrate.py; data in policy/data/calibration/online-boutique/). "
        f"Fit load: {cal.lam_rps:.2f} user req/s (median frontend load of the normal minutes); one pod per "
        "service as measured.",
        "",
        "**Per service: simulated vs measured visit latency** (ms; back ends: their server spans, fitted on p50 "
        "and p95, p99 not fitted; frontend: front_service.csv per-minute percentiles, median over normal "
        "minutes).",
        "",
        "| service | target from | measured p50 / p95 / p99 | simulated p50 / p95 / p99 | error p50 / p95 / p99 % |",
        "|---|---|---|---|---|",
    ]
    errs = []
    for s in sorted(cal.targets):
        t, m = cal.targets[s], cal.simulated[s]
        e = [100.0 * (b / a - 1.0) for a, b in zip(t, m)]
        errs.append(e)
        out.append(
            f"| {s} | {cal.target_source[s]} | {t[0]:.2f} / {t[1]:.2f} / {t[2]:.2f} | "
            f"{m[0]:.2f} / {m[1]:.2f} / {m[2]:.2f} | {e[0]:+.1f} / {e[1]:+.1f} / {e[2]:+.1f} |"
        )
    E = np.abs(np.array(errs))
    out += [
        "",
        f"Median absolute error over services: p50 {np.median(E[:, 0]):.1f}%, p95 {np.median(E[:, 1]):.1f}%, "
        f"p99 {np.median(E[:, 2]):.1f}% (max {E[:, 0].max():.1f}% / {E[:, 1].max():.1f}% / "
        f"{E[:, 2].max():.1f}%).",
        "",
    ]
    pm = cal.per_minute
    if pm:
        out += [
            "**Frontend minute by minute** (each measured minute simulated at its measured frontend load, "
            "compared with that minute's front_service.csv percentiles): median absolute error %.",
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
    out += [
        "**Visits per user request**: measured (Σ PodWorkload / Σ frontend PodWorkload over normal minutes, "
        "from the metrics) vs the model (from the span-derived calls per request):",
        "",
        "| service | measured | model |",
        "|---|---|---|",
    ]
    for s, a, b in cal.visits_check:
        out.append(f"| {s} | {a:.3f} | {b:.3f} |")
    out += [
        "",
        "**Per-pod PodServerLatencyP95** (median over normal minutes) vs the span-derived p95 and the "
        "simulated p95 (ms). The metric comes from a latency histogram: values just under 5 ms are the "
        'first bucket\'s interpolation ("under 5 ms"); for currencyservice, frontend and checkoutservice it '
        "disagrees with the spans by an order of magnitude (it measures more than the handler: queueing in "
        "front of it), so it is reported, not fitted.",
        "",
        "| service | PodServerLatencyP95 | spans p95 | simulated p95 |",
        "|---|---|---|---|",
    ]
    for s, a, t, b in cal.pod_latency_check:
        out.append(f"| {s} | {a:.1f} | {t:.1f} | {b:.1f} |")
    out += [
        "",
        "Fitted parameters (written to app.yaml by `--write-app`):",
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
    md = markdown(cal)
    print(md)
    if args.write_app:
        app = load_app(str(APP_DIR))
        (APP_DIR / "app.yaml").write_text(app_yaml(cal, app), encoding="utf-8")
        print(f"wrote {APP_DIR / 'app.yaml'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
