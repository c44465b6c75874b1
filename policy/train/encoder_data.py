"""Self-supervised training data for the graph encoder, from the simulator's performance model (numpy only).

**Objective** (why: what a scheduler needs to know about a service is how much CPU it burns, how slow it is
with everything it calls, how that changes under more load, and how much of it is network distance that
placement can remove). For one application under one scenario — replicas, CPU requests and limits, a
cluster, a pod placement, a load — the encoder sees the call graph with *some* measurements (none, some
services', or all: declared-only graphs must work too) and predicts, for every service, five targets
computed by :class:`policy.sim.model.PerfModel` (:data:`TARGET_SPEC`):

1. ``log_cpu_m``: CPU in use by all its pods at the current load;
2. ``log_latency_ms``: its expected response time (its own time, CPU queueing included, plus its calls
   and their network delays, recursively) at the current load and placement;
3. ``log_cpu_m_1p5x`` and 4. ``log_latency_ms_1p5x``: the same at 1.5× the load (headroom, saturation);
5. ``log_latency_ms_colocated``: the response time if every call stayed on one node (what placement can
   win back).

Targets 3–5 are what-if quantities no measurement shows, so the embeddings must carry load sensitivity
and placement sensitivity, not echo their inputs. Response times are the model's expectations (parallel
calls: the largest expected branch); the input latency percentiles are those expectations with the
service's own lognormal spread (an approximation documented in :func:`simulate`).

**Data**: the built-in applications (``policy/data/apps/*/app.yaml``) with varied replicas and loads, and
random synthetic microservice graphs (:func:`synthetic_app`: layered call DAGs with shared back ends,
fan-out, parallel calls, the odd self-call), each under random clusters (2–8 cores per node, 1–3 zones),
placements (spread, random, packed by call-graph neighbourhood) and loads (5–85% of capacity).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from policy.encoder import GraphArrays, ServiceStats, featurize_graph
from policy.features import FeatureSpec
from policy.observe import parse_workload
from policy.sim.app import AppSpec, ServiceParams, builtin_apps, load_app
from policy.sim.model import NetworkModel, PerfModel, PodArrays
from policy.state import Resources, ServiceEdge, ServiceGraph, WorkloadInfo
from policy.telemetry import progress

__all__ = [
    "TARGET_SPEC",
    "MAX_LATENCY_MS",
    "EncoderSample",
    "Scenario",
    "synthetic_app",
    "random_scenario",
    "simulate",
    "make_sample",
    "make_dataset",
    "load_builtin_apps",
    "LOAD_FACTOR",
]

LOAD_FACTOR = 1.5
#: Response-time targets and inputs are capped here (ms): beyond it a request has long timed out.
MAX_LATENCY_MS = 60_000.0

TARGET_SPEC = FeatureSpec.of(
    [
        ("log_cpu_m", "log1p(millicores used, all pods)"),
        ("log_latency_ms", "log1p(ms): expected response time incl. calls"),
        ("log_cpu_m_1p5x", "log1p(millicores) at 1.5x the load"),
        ("log_latency_ms_1p5x", "log1p(ms) at 1.5x the load"),
        ("log_latency_ms_colocated", "log1p(ms) with every call on one node"),
    ]
)


@dataclass(frozen=True)
class EncoderSample:
    """One training example: the encoder's ``arrays`` and the (N, T) float32 ``targets`` (rows in
    ``arrays.services`` order, columns :data:`TARGET_SPEC`); ``app``: the application's name;
    ``measured``: (N,) bool, services whose measurements the encoder saw."""

    arrays: GraphArrays
    targets: np.ndarray
    app: str
    measured: np.ndarray


@dataclass(frozen=True)
class Scenario:
    """An application on a cluster: per-service ``replicas`` (S,), ``cpu_request_m`` (S,), ``cpu_limit_m`` (S,)
    (inf = no limit), ``memory_request_mib`` (S,) in ``model.services`` order; ``node_cores`` (Nn,),
    ``zones`` (Nn,), the pods' ``pod_service`` / ``pod_node`` (P,), and the user load ``lam_rps``."""

    app: AppSpec
    model: PerfModel
    replicas: np.ndarray
    cpu_request_m: np.ndarray
    cpu_limit_m: np.ndarray
    memory_request_mib: np.ndarray
    node_cores: np.ndarray
    zones: list[str]
    pod_service: np.ndarray
    pod_node: np.ndarray
    lam_rps: float


def load_builtin_apps(exclude: Sequence[str] = (), only: Sequence[str] | None = None) -> list[AppSpec]:
    """Every built-in application (``policy/data/apps``; only those named in ``only`` when given) except
    ``exclude``; apps that fail to load are skipped."""
    out = []
    for name in builtin_apps():
        if name in exclude or (only is not None and name not in only):
            continue
        try:
            out.append(load_app(name))
        except (ValueError, OSError):
            continue
    return out


def synthetic_app(
    rng: np.random.Generator, n_services: int, name: str = "synthetic", guaranteed_share: float = 0.0
) -> AppSpec:
    """A random microservice application of ``n_services`` (>= 2) services: 1–2 entry services, a layered
    call DAG where each service has a caller in an earlier layer (plus extra callers with probability 0.3:
    shared back ends), calls per request lognormal around 0.74 (0.02–8), 20% parallel calls, 3% self-calls;
    CPU per request lognormal around 0.3 ms (0.01–20 ms), own time lognormal with median around 1 ms
    (0.05–100 ms) and a mean 1.6x to 50x the median (heavy tails, as Online Boutique's frontend),
    replicas 1–5, requests 50–1000 m, limits 1–4× the request on 60% of services; then, with ``guaranteed_share``
    in [0, 1] > 0, each service with that probability runs Guaranteed pods instead (CPU and memory limits equal to
    the requests; drawn after everything else, so the app is otherwise the one of ``guaranteed_share`` 0)."""
    n = max(2, int(n_services))
    names = [f"svc-{i:03d}" for i in range(n)]
    n_entry = 1 if n < 6 or rng.random() < 0.7 else 2
    depth = np.zeros(n, int)
    n_layers = int(rng.integers(2, max(3, min(7, n // 2 + 2))))
    depth[n_entry:] = np.sort(rng.integers(1, n_layers, size=n - n_entry))
    edges: dict[tuple[int, int], ServiceEdge] = {}

    def add(a: int, b: int) -> None:
        if (a, b) in edges:
            return
        m = float(np.clip(rng.lognormal(-0.3, 0.9), 0.02, 8.0))
        edges[(a, b)] = ServiceEdge(
            names[a], names[b], calls_per_request=round(m, 3), parallel=bool(rng.random() < 0.2)
        )

    for b in range(n_entry, n):
        earlier = np.flatnonzero(depth < depth[b])
        prev = earlier[depth[earlier] == depth[b] - 1]
        pool = prev if len(prev) and rng.random() < 0.8 else earlier
        add(int(rng.choice(pool)), b)
        while rng.random() < 0.3 and len(earlier) > 1:
            add(int(rng.choice(earlier)), b)
    for a in range(n):
        if rng.random() < 0.03:
            m = float(np.clip(rng.lognormal(-1.0, 0.5), 0.05, 2.0))
            edges[(a, a)] = ServiceEdge(names[a], names[a], calls_per_request=round(m, 3))
    graph = ServiceGraph.build(names, edges.values(), source=f"synthetic:{name}")
    params = {}
    workloads = []
    for s in names:
        p50 = float(np.clip(rng.lognormal(0.0, 1.2), 0.05, 100.0))
        params[s] = ServiceParams(
            cpu_ms_per_request=float(np.clip(rng.lognormal(math.log(0.3), 1.0), 0.01, 20.0)),
            latency_p50_ms=p50,
            latency_mean_ms=p50 * (1.0 + float(np.clip(rng.lognormal(-0.5, 1.5), 0.0, 50.0))),
            working_set_mi=float(np.clip(rng.lognormal(math.log(64), 0.7), 8, 2048)),
        )
        req = int(np.clip(rng.lognormal(math.log(200), 0.7), 50, 1000))
        lim = int(req * rng.uniform(1.0, 4.0)) if rng.random() < 0.6 else 0
        mem = int(np.clip(rng.lognormal(math.log(128), 0.6), 16, 4096)) * 1024 * 1024
        workloads.append(
            WorkloadInfo(
                s,
                "default",
                s,
                replicas=int(rng.integers(1, 6)),
                pod_requests=Resources(req, mem),
                pod_limits=Resources(lim, 2 * mem),
            )
        )
    entry = {names[i]: float(rng.uniform(0.3, 1.0)) for i in range(n_entry)}
    if guaranteed_share > 0:
        guaranteed = rng.random(len(workloads)) < guaranteed_share
        workloads = [
            replace(w, pod_limits=Resources(w.pod_requests.cpu_m, w.pod_requests.memory_bytes)) if g else w
            for w, g in zip(workloads, guaranteed)
        ]
    total = sum(entry.values())
    entry = {k: v / total for k, v in entry.items()}
    deployments = tuple(synthetic_deployment(w) for w in workloads)
    return AppSpec(
        name,
        tuple(parse_workload(d) for d in deployments),
        deployments,
        graph,
        params,
        entry,
        slo_p95_ms=float(rng.uniform(100, 1000)),
        timeout_ms=float(rng.uniform(1000, 5000)),
    )


def synthetic_deployment(w: WorkloadInfo) -> dict[str, Any]:
    """An apps/v1 Deployment for a synthetic service: ``w``'s name, namespace and replicas, one container with
    its requests (and limits when set), pods labelled ``app: <name>``, so the simulator runs it as a manifest."""
    res: dict[str, Any] = {"requests": {"cpu": f"{w.pod_requests.cpu_m}m", "memory": str(w.pod_requests.memory_bytes)}}
    if w.pod_limits.cpu_m:
        res["limits"] = {"cpu": f"{w.pod_limits.cpu_m}m", "memory": str(w.pod_limits.memory_bytes)}
    labels = {"app": w.name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": w.name, "namespace": w.namespace, "labels": dict(labels)},
        "spec": {
            "replicas": w.replicas,
            "selector": {"matchLabels": dict(labels)},
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {"containers": [{"name": w.name, "image": f"synthetic/{w.name}:1", "resources": res}]},
            },
        },
    }


def random_scenario(
    app: AppSpec, rng: np.random.Generator, vary_resources: bool = True, network: NetworkModel | None = None
) -> Scenario:
    """A random cluster, replica counts, placement and load for ``app`` (see the module docstring).
    ``vary_resources``: scale the manifests' replicas by 1–3× (built-in apps) instead of keeping them."""
    model = PerfModel(app, network)
    S = len(model.services)
    wl = {w.service: w for w in app.workloads}
    reps = np.ones(S, int)
    req = np.full(S, 100.0)
    lim = np.full(S, np.inf)
    mem = np.full(S, 64.0)
    for i, s in enumerate(model.services):
        w = wl.get(s)
        if w is None:
            continue
        reps[i] = max(1, w.replicas)
        req[i] = max(10.0, float(w.pod_requests.cpu_m))
        lim[i] = float(w.pod_limits.cpu_m) if w.pod_limits.cpu_m > 0 else np.inf
        mem[i] = max(1.0, w.pod_requests.memory_bytes / 2**20)
    if vary_resources:
        reps = np.maximum(1, reps * rng.integers(1, 4, size=S) - rng.integers(0, 2, size=S))
    total_req_cores = float((reps * req).sum()) / 1000.0
    cores = float(rng.choice([2.0, 4.0, 8.0]))
    n_nodes = max(2, int(math.ceil(total_req_cores / (cores * rng.uniform(0.3, 0.8)))))
    n_nodes = min(n_nodes, 64)
    node_cores = np.full(n_nodes, cores)
    n_zones = int(rng.integers(1, 4))
    zones = [f"zone-{i % n_zones}" for i in range(n_nodes)]
    pod_service = np.repeat(np.arange(S), reps)
    strategy = rng.choice(["spread", "random", "packed"])
    if strategy == "random":
        pod_node = rng.integers(0, n_nodes, size=len(pod_service))
    elif strategy == "spread":
        load = np.zeros(n_nodes)
        pod_node = np.empty(len(pod_service), int)
        for k in rng.permutation(len(pod_service)):
            j = int(np.argmin(load + rng.random(n_nodes) * 1e-3))
            pod_node[k] = j
            load[j] += req[pod_service[k]] / 1000.0 / cores
    else:  # packed: neighbours of the call graph share a home node
        home = np.full(S, -1)
        nbrs: dict[int, list[int]] = {i: [] for i in range(S)}
        for e in app.graph.edges:
            a, b = model.pos[e.caller], model.pos[e.callee]
            nbrs[a].append(b)
            nbrs[b].append(a)
        for s in rng.permutation(S):
            placed = [home[t] for t in nbrs[s] if home[t] >= 0]
            home[s] = int(rng.choice(placed)) if placed and rng.random() < 0.8 else int(rng.integers(n_nodes))
        pod_node = np.where(
            rng.random(len(pod_service)) < 0.7, home[pod_service], rng.integers(0, n_nodes, size=len(pod_service))
        )
    # load: a fraction of the capacity of the busiest service (its pods at min(limit, node cores))
    work = model.visits * model.cpu_s  # core-seconds per user request
    svc_cores = reps * np.minimum(lim / 1000.0, cores)
    with np.errstate(divide="ignore"):
        cap_s = np.where(work > 0, svc_cores / np.maximum(work, 1e-12), np.inf)
    cap = float(min(cap_s.min(initial=np.inf), node_cores.sum() / max(work.sum(), 1e-12)))
    if not math.isfinite(cap):
        cap = 100.0
    lam = cap * float(rng.uniform(0.05, 0.85))
    return Scenario(app, model, reps, req, lim, mem, node_cores, zones, pod_service, np.asarray(pod_node, int), lam)


def _pods(sc: Scenario) -> PodArrays:
    return PodArrays(
        service=sc.pod_service,
        node=sc.pod_node,
        limit_cores=sc.cpu_limit_m[sc.pod_service] / 1000.0,
        request_cores=sc.cpu_request_m[sc.pod_service] / 1000.0,
    )


def _flat(network: NetworkModel) -> NetworkModel:
    """``network`` with every call costing what a same-node call costs (the "all co-located" what-if)."""
    same = {"same_zone_ms": network.same_node_ms, "cross_zone_ms": network.same_node_ms}
    for k in ("same_zone_gbps", "cross_zone_gbps"):
        if hasattr(network, k) and hasattr(network, "same_node_gbps"):
            same[k] = network.same_node_gbps
    return replace(network, **same)


def simulate(sc: Scenario, rng: np.random.Generator, n_samples: int = 128) -> dict[str, np.ndarray]:
    """Run the simulator's performance model (:meth:`PerfModel.step`, ``per_service=True``) three times with
    common random numbers: at ``lam_rps``; at :data:`LOAD_FACTOR` × it; and at ``lam_rps`` with a network
    where every call costs a same-node call. Returns per service (S,) arrays: ``cpu_m``, ``latency_ms``
    (mean visit latency, calls included; 0 where unvisited), ``latency_p50_ms`` / ``_p95_ms`` / ``_p99_ms``,
    ``cpu_m_hi``, ``latency_ms_hi``, ``latency_ms_coloc``, ``rps``, ``error_rate`` (the chance a visit fails:
    its pod refuses it, or a call below it fails), and per model edge ``edge_rps`` (E,), ``same_node`` (E,)."""
    model = sc.model
    S = len(model.services)
    pods = _pods(sc)
    n_pods = np.bincount(sc.pod_service, minlength=S).astype(float)
    share = np.zeros((S, len(sc.node_cores)))
    np.add.at(share, (sc.pod_service, sc.pod_node), 1.0)
    share /= np.maximum(n_pods[:, None], 1)
    seed = int(rng.integers(2**63))
    out: dict[str, np.ndarray] = {}
    runs = (
        ("", model, sc.lam_rps),
        ("_hi", model, sc.lam_rps * LOAD_FACTOR),
        ("_coloc", PerfModel(sc.app, _flat(model.network)), sc.lam_rps),
    )
    for tag, m, lam in runs:
        with warnings.catch_warnings():  # services nobody visits have no latency samples (NaN -> 0 below)
            warnings.simplefilter("ignore", RuntimeWarning)
            st = m.step(
                lam, pods, sc.node_cores, sc.zones, np.random.default_rng(seed), n_samples=n_samples, per_service=True
            )
        out["latency_ms" + tag] = np.nan_to_num(np.asarray(st.service_visit_ms, float), nan=0.0)
        if tag == "_coloc":
            continue
        out["cpu_m" + tag] = 1000.0 * np.bincount(sc.pod_service, weights=st.pod_cpu_cores, minlength=S)
        if tag:
            continue
        q = np.asarray(st.service_latency_ms, float)
        for k, name in enumerate(("latency_p50_ms", "latency_p95_ms", "latency_p99_ms")):
            out[name] = np.nan_to_num(q[:, k], nan=0.0)
        blocked = np.asarray(getattr(st, "pod_blocked_frac", np.zeros(len(sc.pod_service))), float)
        d_s = np.bincount(sc.pod_service, weights=np.clip(blocked, 0, 1), minlength=S) / np.maximum(n_pods, 1)
        F = np.zeros(S)
        for s in reversed(model.topo):
            ok = 1.0 - d_s[s]
            for b, mult, _par in model.out_edges[s]:
                ok *= (1.0 - F[b]) ** min(mult, 10.0)
            F[s] = 1.0 - ok
        out["error_rate"] = F
        out["rps"] = lam * model.visits
        out["edge_rps"] = np.asarray(st.edge_rps, float)
        out["same_node"] = np.array([float(share[a] @ share[b]) for a, b, _m, _p in model.edges])
    return out


def make_sample(
    app: AppSpec,
    rng: np.random.Generator,
    measured_frac: float | None = None,
    vary_resources: bool = True,
    noise: float = 0.1,
) -> EncoderSample:
    """One :class:`EncoderSample` of ``app`` under a :func:`random_scenario`.

    ``measured_frac``: share of services whose measurements (usage, rate, latency, error; their incoming
    calls' rate/latency/error) the encoder sees; ``None`` draws it (20% none, 20% all, else 0.3–0.95).
    Measurements get multiplicative lognormal noise of sigma ``noise`` (scrape-to-scrape jitter)."""
    sc = random_scenario(app, rng, vary_resources)
    sim = simulate(sc, rng)
    model = sc.model
    S = len(model.services)
    if measured_frac is None:
        r = rng.random()
        measured_frac = 0.0 if r < 0.2 else 1.0 if r < 0.4 else float(rng.uniform(0.3, 0.95))
    measured = rng.random(S) < measured_frac

    def jit(v: float) -> float:
        return float(v * math.exp(rng.normal(0.0, noise))) if noise > 0 else float(v)

    entry = set(app.entry)
    stats: dict[str, ServiceStats] = {}
    for i, s in enumerate(model.services):
        p = app.params.get(s)
        kw: dict[str, float | None] = {
            "replicas": float(sc.replicas[i]),
            "cpu_request_m": float(sc.cpu_request_m[i]),
            "memory_request_bytes": float(sc.memory_request_mib[i]) * 2**20,
            "cpu_limit_m": float(sc.cpu_limit_m[i]) if math.isfinite(sc.cpu_limit_m[i]) else None,
            "slo_p95_ms": app.slo_p95_ms if s in entry else None,
        }
        if measured[i]:
            lat = {
                k: min(MAX_LATENCY_MS, sim[k][i])
                for k in ("latency_ms", "latency_p50_ms", "latency_p95_ms", "latency_p99_ms")
            }
            kw.update(
                cpu_usage_m=jit(sim["cpu_m"][i]),
                memory_usage_bytes=jit(sc.replicas[i] * (p.working_set_mi if p else 64.0) * 2**20),
                request_rps=jit(sim["rps"][i]),
                latency_mean_ms=jit(lat["latency_ms"]),
                latency_p50_ms=jit(lat["latency_p50_ms"]),
                latency_p95_ms=jit(lat["latency_p95_ms"]),
                latency_p99_ms=jit(lat["latency_p99_ms"]),
                error_rate=float(sim["error_rate"][i]),
            )
        stats[s] = ServiceStats(**kw)
    rates = {
        (model.services[a], model.services[b]): (float(r), float(sh))
        for (a, b, _m, _p), r, sh in zip(model.edges, sim["edge_rps"], sim["same_node"])
    }
    hide_calls = rng.random() < 0.3
    placement_known = rng.random() < 0.8
    edges = []
    colocation: dict[tuple[str, str], float] = {}
    for e in app.graph.edges:
        b = model.pos[e.callee]
        r = rates.get((e.caller, e.callee))
        kw2: dict[str, object] = {
            "calls_per_request": None if hide_calls else e.calls_per_request,
            "parallel": e.parallel,
        }
        if measured[b] and r is not None:
            kw2.update(
                rps=jit(r[0]),
                latency_mean_ms=jit(min(MAX_LATENCY_MS, sim["latency_ms"][b])),
                latency_p95_ms=jit(min(MAX_LATENCY_MS, sim["latency_p95_ms"][b])),
                error_rate=float(sim["error_rate"][b]),
            )
        edges.append(ServiceEdge(e.caller, e.callee, **kw2))  # type: ignore[arg-type]
        if placement_known and r is not None:
            colocation[(e.caller, e.callee)] = r[1]
    graph = ServiceGraph.build(model.services, edges, source=app.graph.source)
    arrays = featurize_graph(graph, stats, colocation)
    rows = np.array([model.pos[s] for s in arrays.services])
    y = np.stack(
        [sim["cpu_m"], sim["latency_ms"], sim["cpu_m_hi"], sim["latency_ms_hi"], sim["latency_ms_coloc"]], axis=1
    )[rows]
    y[:, [1, 3, 4]] = np.minimum(y[:, [1, 3, 4]], MAX_LATENCY_MS)
    return EncoderSample(arrays, np.log1p(np.maximum(y, 0.0)).astype(np.float32), app.name, measured[rows])


def make_dataset(
    n_samples: int,
    seed: int,
    apps: Sequence[AppSpec] = (),
    app_share: float = 0.3,
    size_range: tuple[int, int] = (4, 40),
) -> list[EncoderSample]:
    """``n_samples`` samples: a share ``app_share`` from ``apps`` (round robin; none when empty), the rest
    from fresh :func:`synthetic_app` graphs with ``size_range`` services. Deterministic for ``seed``."""
    rng = np.random.default_rng(seed)
    out = []
    k = 0
    for i in progress(range(n_samples), "encoder: training scenarios", n_samples, "scenario"):
        if apps and rng.random() < app_share:
            app = apps[k % len(apps)]
            k += 1
        else:
            app = synthetic_app(rng, int(rng.integers(size_range[0], size_range[1] + 1)), name=f"synthetic-{seed}-{i}")
        out.append(make_sample(app, rng))
    return out


def error_table(
    preds: Sequence[np.ndarray], samples: Sequence[EncoderSample], subset: str = "all"
) -> dict[str, dict[str, float]]:
    """Held-out error per target of predictions ``preds`` ((N_i, T) log1p units, one per sample), over the
    services of ``subset``: ``all``, ``measured`` (the encoder saw their measurements) or ``unmeasured``.

    Per target name: ``mae_log`` (mean |prediction − truth| in log1p units), ``median_rel_err`` (median of
    |expm1(p) − expm1(y)| / max(expm1(y), 1): relative error, with 1 m / 1 ms as the floor),
    ``r2`` (coefficient of determination in log1p units) and ``rows``."""
    if subset not in ("all", "measured", "unmeasured"):
        raise ValueError(f"subset: expected all, measured or unmeasured, got {subset!r}")
    P = np.concatenate([np.asarray(p, np.float64) for p in preds])
    Y = np.concatenate([s.targets.astype(np.float64) for s in samples])
    if subset != "all":
        keep = np.concatenate([s.measured for s in samples])
        keep = keep if subset == "measured" else ~keep
        P, Y = P[keep], Y[keep]
    out: dict[str, dict[str, float]] = {}
    for j, name in enumerate(TARGET_SPEC.names):
        p, y = P[:, j], Y[:, j]
        ey = np.expm1(y)
        rel = np.abs(np.expm1(p) - ey) / np.maximum(ey, 1.0)
        var = float(np.var(y))
        out[name] = {
            "mae_log": float(np.mean(np.abs(p - y))),
            "median_rel_err": float(np.median(rel)),
            "r2": float(1.0 - np.mean((p - y) ** 2) / var) if var > 0 else 0.0,
            "rows": float(len(y)),
        }
    return out


def heldout_sets(
    seed: int, n_synthetic: int, n_per_app: int, holdout_apps: Sequence[AppSpec], size_range: tuple[int, int] = (4, 40)
) -> dict[str, list[EncoderSample]]:
    """The held-out evaluation sets: ``"synthetic"`` (new random graphs, seed-derived) and one per held-out
    application (``"app:<name>"``, under new scenarios). Deterministic for ``seed``."""
    sets = {"synthetic": make_dataset(n_synthetic, seed + 7919, (), 0.0, size_range)}
    for i, app in enumerate(holdout_apps):
        sets[f"app:{app.name}"] = make_dataset(n_per_app, seed + 104729 + i, [app], 1.0, size_range)
    return sets
