"""Synthetic applications of any size for the simulator's speed benchmark, tests and training: a layered
call graph (entry services at the top, data stores at the bottom), Deployments with CPU/memory requests
and limits, and per-service performance parameters in the ranges the calibrated apps show.

Deterministic per seed. Not a model of any real application (use the built-in apps for that).
"""

from __future__ import annotations

import math

import numpy as np

from policy.observe import parse_workload
from policy.state import ServiceEdge, ServiceGraph

from .app import AppSpec, CallParams, ServiceParams

__all__ = ["deployment", "synthetic_app"]


def deployment(
    name: str,
    replicas: int,
    cpu_request_m: int,
    cpu_limit_m: int,
    mem_request_mi: int,
    mem_limit_mi: int,
    namespace: str = "default",
) -> dict:
    """An apps/v1 Deployment of one container with these resources (limits 0 = none)."""
    res: dict = {"requests": {"cpu": f"{cpu_request_m}m", "memory": f"{mem_request_mi}Mi"}}
    lim = {}
    if cpu_limit_m:
        lim["cpu"] = f"{cpu_limit_m}m"
    if mem_limit_mi:
        lim["memory"] = f"{mem_limit_mi}Mi"
    if lim:
        res["limits"] = lim
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {
            "replicas": int(replicas),
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "server", "image": f"example/{name}:1", "resources": res}]},
            },
        },
    }


def synthetic_app(
    n_services: int,
    seed: int = 0,
    *,
    depth: int | None = None,
    fanout: float = 1.2,
    parallel_share: float = 0.3,
    max_replicas: int = 3,
    name: str | None = None,
    slo_p95_ms: float = 300.0,
    timeout_ms: float = 2000.0,
) -> AppSpec:
    """An app of ``n_services`` (>= 1) services in ``depth`` layers (default 2 + log10(n), at most 5): each
    service of a layer calls Poisson(``fanout``) services of deeper layers (mostly the next), ``parallel_share``
    of the edges in parallel, 1-3 calls each; 1..``max_replicas`` replicas; CPU 0.1-2 ms per request, own time 0.2-5 ms.
    Entry: the first layer's services (equal shares)."""
    if n_services < 1:
        raise ValueError(f"n_services: must be >= 1, got {n_services}")
    rng = np.random.default_rng(seed)
    L = depth or max(2, min(5, int(math.log10(n_services)) + 2))
    L = min(L, n_services)
    # layer sizes: many entry services (each user request touches one entry's call tree), deeper layers wider
    w = np.linspace(1.0, 2.0, L)
    sizes = np.maximum(1, np.floor(w / w.sum() * n_services)).astype(int)
    sizes[-1] += n_services - sizes.sum()
    while sizes[-1] < 1:
        k = int(np.argmax(sizes[:-1]))
        sizes[k] -= 1
        sizes[-1] += 1
    names = [f"svc-{i:04d}" for i in range(n_services)]
    layer = np.repeat(np.arange(L), sizes)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    edges = []
    for i in range(n_services):
        lv = layer[i]
        if lv == L - 1:
            continue
        k = int(rng.poisson(fanout))
        for _ in range(k):
            tl = lv + 1 if rng.random() < 0.8 or lv + 2 >= L else int(rng.integers(lv + 1, L))
            j = int(rng.integers(starts[tl], starts[tl + 1]))
            m = float(rng.choice([1.0, 1.0, 1.0, 1.0, 0.5, 2.0]))
            edges.append((names[i], names[j], m, bool(rng.random() < parallel_share)))
    # every non-entry service gets at least one caller
    called = {b for _a, b, _m, _p in edges}
    for j in range(sizes[0], n_services):
        if names[j] not in called:
            lv = layer[j]
            i = int(rng.integers(starts[lv - 1], starts[lv]))
            edges.append((names[i], names[j], 1.0, False))
    dedup = {}
    for a, b, m, p in edges:
        dedup.setdefault((a, b), (m, p))
    graph = ServiceGraph.build(
        names,
        [ServiceEdge(a, b, calls_per_request=m, parallel=p) for (a, b), (m, p) in dedup.items()],
        source="synthetic",
    )
    deps = []
    params = {}
    for s in names:
        req = int(rng.choice([50, 100, 100, 200]))
        deps.append(deployment(s, int(rng.integers(1, max_replicas + 1)), req, 2 * req, 64, 256))
        cpu = float(np.exp(rng.uniform(math.log(0.1), math.log(2.0))))
        p50 = float(np.exp(rng.uniform(math.log(0.2), math.log(5.0))))
        params[s] = ServiceParams(
            cpu_ms_per_request=round(cpu, 4),
            latency_p50_ms=round(p50, 4),
            latency_mean_ms=round(p50 * float(rng.uniform(1.05, 1.6)), 4),
            working_set_mi=float(rng.uniform(30, 120)),
        )
    workloads = tuple(parse_workload(d) for d in deps)
    entry = {names[i]: 1.0 / sizes[0] for i in range(sizes[0])}
    calls = {
        (a, b): CallParams(request_bytes=float(rng.integers(200, 4000)), response_bytes=float(rng.integers(500, 20000)))
        for (a, b) in dedup
    }
    return AppSpec(
        name or f"synthetic-{n_services}",
        workloads,
        tuple(deps),
        graph,
        params,
        entry,
        slo_p95_ms,
        timeout_ms,
        source="synthetic",
        calls=calls,
    )
