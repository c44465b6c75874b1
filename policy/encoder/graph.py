"""Features of the call graph for the graph encoder: per-service (node) and per-call (edge) float32 arrays.

Inputs are a :class:`~policy.state.ServiceGraph` (edges with call rates, latencies, error rates where
known), optional per-service measurements (:class:`ServiceStats`: replicas, CPU/memory requests, limits and
usage, request rate, latency percentiles, error rate, SLO) and optional placement (the share of each call
that stays on one node). Everything unknown is 0 with a ``*_known`` flag at 0, so one encoder serves a
declared-only graph (manifests, annotations) and a fully measured one (Prometheus) alike.

Magnitudes spanning decades (rates, milliseconds, millicores, bytes) enter as ``log1p``; fractions and
flags as they are. Column order and units are :data:`NODE_SPEC` and :data:`EDGE_SPEC` (the encoder
bundle records them; a bundle trained on another layout is refused when loaded).

:func:`stats_from_snapshot` derives :class:`ServiceStats` from a :class:`~policy.state.ClusterSnapshot`
(workloads → replicas, requests, limits; pods → measured usage; the graph's incoming edges → request
rate, latency, error rate); :func:`colocation_from_snapshot` the same-node share of each edge.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from policy.features import FeatureSpec
from policy.state import ClusterSnapshot, ServiceGraph

__all__ = [
    "NODE_SPEC",
    "EDGE_SPEC",
    "ServiceStats",
    "GraphArrays",
    "featurize_graph",
    "stats_from_snapshot",
    "colocation_from_snapshot",
]

_MIB = 1024.0 * 1024.0

#: Per-service input columns (names, units) of the encoder.
NODE_SPEC = FeatureSpec.of(
    [
        ("log_replicas", "log1p(pods)"),
        ("log_cpu_request_m", "log1p(millicores per pod)"),
        ("log_memory_request_mib", "log1p(MiB per pod)"),
        ("log_cpu_limit_m", "log1p(millicores per pod), 0 = no limit"),
        ("has_cpu_limit", "flag"),
        ("log_cpu_usage_m", "log1p(millicores, all pods)"),
        ("cpu_usage_per_request", "fraction of replicas x request, clipped 0..10"),
        ("log_memory_usage_mib", "log1p(MiB, all pods)"),
        ("usage_known", "flag"),
        ("log_request_rps", "log1p(requests/s served)"),
        ("rate_known", "flag"),
        ("log_latency_p50_ms", "log1p(ms)"),
        ("log_latency_p95_ms", "log1p(ms)"),
        ("log_latency_p99_ms", "log1p(ms)"),
        ("latency_known", "flag"),
        ("error_rate", "fraction 0..1"),
        ("error_known", "flag"),
        ("log_slo_p95_ms", "log1p(ms)"),
        ("latency_p95_per_slo", "fraction of the SLO, clipped 0..10"),
        ("slo_known", "flag"),
        ("log_in_degree", "log1p(callers)"),
        ("log_out_degree", "log1p(callees)"),
        ("is_entry", "flag"),
        ("has_self_call", "flag"),
    ]
)

#: Per-edge (caller → callee) input columns of the encoder.
EDGE_SPEC = FeatureSpec.of(
    [
        ("log_rps", "log1p(calls/s)"),
        ("rps_share_of_callee", "fraction of the callee's incoming calls/s"),
        ("rps_known", "flag"),
        ("log_calls_per_request", "log1p(calls per caller request)"),
        ("calls_known", "flag"),
        ("log_latency_ms", "log1p(ms), callee side, p95 else mean/p99/p50"),
        ("latency_known", "flag"),
        ("error_rate", "fraction 0..1"),
        ("parallel", "flag"),
        ("same_node_share", "fraction of calls staying on one node"),
        ("placement_known", "flag"),
        ("is_self_call", "flag"),
    ]
)


@dataclass(frozen=True, slots=True)
class ServiceStats:
    """What is known about one service; ``None`` = unknown (never "zero").

    ``replicas``: pods (desired or running); ``cpu_request_m`` / ``memory_request_bytes`` /
    ``cpu_limit_m``: per pod (limit ``None`` = no limit); ``cpu_usage_m`` / ``memory_usage_bytes``: measured,
    summed over the service's pods; ``request_rps``: requests/s the service serves; latencies (ms) are the
    server side of the service (its own time plus its calls); ``error_rate``: fraction 0..1 of its requests
    failing; ``slo_p95_ms``: its latency objective, when it has one.
    """

    replicas: float | None = None
    cpu_request_m: float | None = None
    memory_request_bytes: float | None = None
    cpu_limit_m: float | None = None
    cpu_usage_m: float | None = None
    memory_usage_bytes: float | None = None
    request_rps: float | None = None
    latency_p50_ms: float | None = None
    latency_p95_ms: float | None = None
    latency_p99_ms: float | None = None
    latency_mean_ms: float | None = None
    error_rate: float | None = None
    slo_p95_ms: float | None = None


class GraphArrays(NamedTuple):
    """The encoder's input for one graph.

    ``services``: (N,) names, row order of ``x``; ``x``: (N, len(NODE_SPEC)) float32; ``edge_index``: (2, E)
    int64 rows of (caller, callee); ``edge_attr``: (E, len(EDGE_SPEC)) float32.
    """

    services: tuple[str, ...]
    x: np.ndarray
    edge_index: np.ndarray
    edge_attr: np.ndarray


def _col(values: list, ok_min: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(values as float64 with NaN for unknown, known mask): None, non-finite or < ``ok_min`` → unknown."""
    a = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    with np.errstate(invalid="ignore"):
        known = np.isfinite(a) & (a >= ok_min)
    return np.where(known, a, np.nan), known


def _fallback(*cols: np.ndarray) -> np.ndarray:
    """Elementwise first non-NaN of ``cols`` (NaN when none)."""
    out = cols[0].copy()
    for c in cols[1:]:
        out = np.where(np.isnan(out), c, out)
    return out


def _log1p0(a: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(a), 0.0, np.log1p(np.maximum(np.nan_to_num(a), 0.0)))


def featurize_graph(
    graph: ServiceGraph,
    stats: Mapping[str, ServiceStats] | None = None,
    same_node_share: Mapping[tuple[str, str], float] | None = None,
) -> GraphArrays:
    """The encoder's input arrays for ``graph`` (see :class:`GraphArrays`; columns :data:`NODE_SPEC`,
    :data:`EDGE_SPEC`).

    ``stats``: per-service measurements (services absent or fields ``None`` → unknown); a service's
    request rate, latency and error rate default to those of its incoming edges (rate: the sum; latency and
    error: the rate-weighted mean, calls without a rate weighing 1) when ``stats`` lacks them.
    ``same_node_share``: (caller, callee) → fraction 0..1 of calls staying on one node (see
    :func:`colocation_from_snapshot`). Negative or non-finite values count as unknown. Vectorised: about
    0.1 s for 20,000 services and 60,000 calls.
    """
    services = graph.services
    pos = {s: i for i, s in enumerate(services)}
    n, m = len(services), len(graph.edges)
    stats = stats or {}
    share = same_node_share or {}
    edges = graph.edges
    src = np.fromiter((pos[e.caller] for e in edges), np.int64, m)
    dst = np.fromiter((pos[e.callee] for e in edges), np.int64, m)
    selfc = src == dst
    rps, rps_k = _col([e.rps for e in edges])
    cpr, cpr_k = _col([e.calls_per_request for e in edges])
    e50, _ = _col([e.latency_p50_ms for e in edges])
    e95, _ = _col([e.latency_p95_ms for e in edges])
    e99, _ = _col([e.latency_p99_ms for e in edges])
    emean, _ = _col([e.latency_mean_ms for e in edges])
    err, err_k = _col([e.error_rate for e in edges])
    err = np.minimum(err, 1.0)
    par = np.fromiter((1.0 if e.parallel else 0.0 for e in edges), np.float64, m)
    sh, sh_k = _col([share.get((e.caller, e.callee)) for e in edges])
    sh_k &= ~np.isnan(sh) & (np.nan_to_num(sh) <= 1.0)
    lat = _fallback(e95, emean, e99, e50)
    lat_k = ~np.isnan(lat)

    ea = np.zeros((m, len(EDGE_SPEC)), np.float32)
    ea[:, 0] = _log1p0(rps)
    rps0 = np.nan_to_num(rps)
    tot = np.bincount(dst, weights=rps0, minlength=n)
    ea[:, 1] = np.where(tot[dst] > 0, rps0 / np.maximum(tot[dst], 1e-12), 0.0)
    ea[:, 2] = rps_k
    ea[:, 3] = _log1p0(cpr)
    ea[:, 4] = cpr_k
    ea[:, 5] = _log1p0(lat)
    ea[:, 6] = lat_k
    ea[:, 7] = np.nan_to_num(err)
    ea[:, 8] = par
    ea[:, 9] = np.where(sh_k, np.nan_to_num(sh), 0.0)
    ea[:, 10] = sh_k
    ea[:, 11] = selfc

    # per-service aggregates of the incoming calls
    not_self = ~selfc
    in_deg = np.bincount(dst[not_self], minlength=n)
    out_deg = np.bincount(src[not_self], minlength=n)
    has_self = np.bincount(src[selfc], minlength=n) > 0
    in_rps = np.bincount(dst, weights=rps0, minlength=n)
    in_rps_known = np.bincount(dst, weights=rps_k.astype(float), minlength=n) > 0
    w = np.where(rps_k, rps0, 1.0)
    lw = np.bincount(dst, weights=np.where(lat_k, w, 0.0), minlength=n)
    p95e = _fallback(lat)
    p50e = _fallback(e50, emean, lat)
    p99e = _fallback(e99, lat)

    def wmean(v: np.ndarray) -> np.ndarray:
        s_ = np.bincount(dst, weights=np.where(lat_k, w * np.nan_to_num(v), 0.0), minlength=n)
        return np.where(lw > 0, s_ / np.maximum(lw, 1e-12), np.nan)

    in_p50, in_p95, in_p99 = wmean(p50e), wmean(p95e), wmean(p99e)
    ew = np.bincount(dst, weights=np.where(err_k, w, 0.0), minlength=n)
    in_err = np.where(
        ew > 0,
        np.bincount(dst, weights=np.where(err_k, w * np.nan_to_num(err), 0.0), minlength=n) / np.maximum(ew, 1e-12),
        np.nan,
    )

    none = ServiceStats()
    st = [stats.get(s_) or none for s_ in services]
    reps, reps_k = _col([x.replicas for x in st])
    req, req_k = _col([x.cpu_request_m for x in st])
    mem, _ = _col([x.memory_request_bytes for x in st])
    lim, lim_k = _col([x.cpu_limit_m for x in st])
    lim_k &= np.nan_to_num(lim) > 0
    use, use_k = _col([x.cpu_usage_m for x in st])
    muse, _ = _col([x.memory_usage_bytes for x in st])
    rate = _fallback(_col([x.request_rps for x in st])[0], np.where(in_rps_known, in_rps, np.nan))
    s50, _ = _col([x.latency_p50_ms for x in st])
    s95, _ = _col([x.latency_p95_ms for x in st])
    s99, _ = _col([x.latency_p99_ms for x in st])
    smean, _ = _col([x.latency_mean_ms for x in st])
    serr, _ = _col([x.error_rate for x in st])
    slo, slo_k = _col([x.slo_p95_ms for x in st])
    slo_k &= np.nan_to_num(slo) > 0
    own95 = _fallback(s95, s99, smean, s50)
    own = ~np.isnan(own95)
    p95 = np.where(own, own95, in_p95)
    p50 = np.where(own, _fallback(s50, smean, s95, own95), in_p50)
    p99 = np.where(own, _fallback(s99, s95, smean, s50), in_p99)
    lat_known = ~np.isnan(p95)
    errv = _fallback(serr, in_err)

    x = np.zeros((n, len(NODE_SPEC)), np.float32)
    x[:, 0] = _log1p0(reps)
    x[:, 1] = _log1p0(req)
    x[:, 2] = _log1p0(mem / _MIB)
    x[:, 3] = np.where(lim_k, _log1p0(lim), 0.0)
    x[:, 4] = lim_k
    x[:, 5] = _log1p0(use)
    denom = np.nan_to_num(reps) * np.nan_to_num(req)
    x[:, 6] = np.where(
        use_k & reps_k & req_k & (denom > 0), np.minimum(10.0, np.nan_to_num(use) / np.maximum(denom, 1e-12)), 0.0
    )
    x[:, 7] = np.where(use_k, _log1p0(muse / _MIB), 0.0)
    x[:, 8] = use_k
    x[:, 9] = _log1p0(rate)
    x[:, 10] = ~np.isnan(rate)
    x[:, 11] = np.where(lat_known, _log1p0(_fallback(p50, p95)), 0.0)
    x[:, 12] = _log1p0(p95)
    x[:, 13] = np.where(lat_known, _log1p0(_fallback(p99, p95)), 0.0)
    x[:, 14] = lat_known
    x[:, 15] = np.minimum(1.0, np.nan_to_num(errv))
    x[:, 16] = ~np.isnan(errv)
    x[:, 17] = np.where(slo_k, _log1p0(slo), 0.0)
    x[:, 18] = np.where(slo_k & lat_known, np.minimum(10.0, np.nan_to_num(p95) / np.where(slo_k, slo, 1.0)), 0.0)
    x[:, 19] = slo_k
    x[:, 20] = np.log1p(in_deg)
    x[:, 21] = np.log1p(out_deg)
    x[:, 22] = in_deg == 0
    x[:, 23] = has_self
    return GraphArrays(services, x, np.stack([src, dst]) if m else np.zeros((2, 0), np.int64), ea)


def stats_from_snapshot(
    snapshot: ClusterSnapshot, slo_p95_ms: Mapping[str, float] | None = None
) -> dict[str, ServiceStats]:
    """Per-service :class:`ServiceStats` from a snapshot: replicas, requests and limits from its workloads
    (else from its pods), CPU/memory usage summed over the pods that report usage, and SLOs from
    ``slo_p95_ms`` (service → ms). Rates, latencies and error rates are left to the graph's edges
    (see :func:`featurize_graph`)."""
    out: dict[str, dict[str, float]] = {}
    for w in snapshot.workloads:
        d = out.setdefault(w.service, {})
        d["replicas"] = d.get("replicas", 0.0) + w.replicas
        d.setdefault("cpu_request_m", float(w.pod_requests.cpu_m))
        d.setdefault("memory_request_bytes", float(w.pod_requests.memory_bytes))
        if w.pod_limits.cpu_m > 0:
            d.setdefault("cpu_limit_m", float(w.pod_limits.cpu_m))
    pods_by: dict[str, list] = {}
    for p in snapshot.pods:
        if not p.terminating:
            pods_by.setdefault(p.service, []).append(p)
    for svc, pods in pods_by.items():
        d = out.setdefault(svc, {})
        if "replicas" not in d:
            d["replicas"] = float(len(pods))
            d["cpu_request_m"] = float(np.mean([p.requests.cpu_m for p in pods]))
            d["memory_request_bytes"] = float(np.mean([p.requests.memory_bytes for p in pods]))
            lim = [p.limits.cpu_m for p in pods if p.limits.cpu_m > 0]
            if lim:
                d["cpu_limit_m"] = float(np.mean(lim))
        used = [p.usage for p in pods if p.usage is not None and p.node_name is not None]
        if used:
            d["cpu_usage_m"] = float(sum(u.cpu_m for u in used))
            mem = sum(u.memory_bytes for u in used)
            if mem > 0:
                d["memory_usage_bytes"] = float(mem)
    for svc, slo in (slo_p95_ms or {}).items():
        out.setdefault(svc, {})["slo_p95_ms"] = float(slo)
    return {s: ServiceStats(**d) for s, d in out.items()}


def colocation_from_snapshot(snapshot: ClusterSnapshot, graph: ServiceGraph) -> dict[tuple[str, str], float]:
    """For each edge of ``graph`` whose two services have bound pods in ``snapshot``: the fraction of its
    calls that stay on one node when each call picks a callee pod at random (kube-proxy) —
    ``Σ_node share_caller(node) · share_callee(node)``, 0..1."""
    by_node: dict[str, dict[str, float]] = {}
    for p in snapshot.pods:
        if p.node_name is None or p.terminating:
            continue
        d = by_node.setdefault(p.service, {})
        d[p.node_name] = d.get(p.node_name, 0.0) + 1.0
    shares = {s: {k: v / sum(d.values()) for k, v in d.items()} for s, d in by_node.items()}
    out: dict[tuple[str, str], float] = {}
    for e in graph.edges:
        a, b = shares.get(e.caller), shares.get(e.callee)
        if a is None or b is None:
            continue
        out[(e.caller, e.callee)] = float(min(1.0, sum(v * b.get(k, 0.0) for k, v in a.items())))
    return out
