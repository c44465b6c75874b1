"""The learned placement policy's input: one row per (pod, candidate node) (numpy only).

:func:`featurize_candidates` builds, for a pod of service *s* and each candidate node *n*, one row of
:data:`PLACEMENT_FEATURES` (C candidates → a (C, F) float32 array); the columns are documented in
:data:`CONTEXT_FEATURES` and :mod:`policy.lowlevel.learned`.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from policy.encoder import NODE_SPEC
from policy.features import FeatureSpec
from policy.index import ClusterIndex, estimated_cpu_m
from policy.state import LABEL_CPU_SPEED, PodInfo, ServiceGraph

from .interface import intent_value

__all__ = [
    "SERVICE_INPUTS",
    "FLAT_ROWS_VERSION",
    "CONTEXT_FEATURES",
    "CONTEXT_FEATURES_V1",
    "CONTEXT_FEATURES_V2",
    "CONTEXT_LAYOUTS",
    "PLACEMENT_INTENTS",
    "placement_feature_spec",
    "PLACEMENT_FEATURES",
    "PLACEMENT_FEATURES_FLAT",
    "featurize_candidates",
    "node_cpu_used_m",
    "node_slowness",
    "node_log_speed",
    "declared_speeds",
]


SERVICE_INPUTS = ("encoder", "flat")

log = logging.getLogger(__name__)


#: ``encoder_version`` of the rows :func:`compute_service_rows` makes for ``service_input="flat"``.
FLAT_ROWS_VERSION = "flat-node-spec-v1"


#: The columns every variant shares (before the service block), in order.
CONTEXT_FEATURES: tuple[tuple[str, str], ...] = (
    ("pod_cpu_request_frac", "pod CPU request / node allocatable CPU"),
    ("pod_memory_request_frac", "pod memory request / node allocatable memory"),
    ("cpu_requested_frac", "requested CPU / allocatable, the pod included"),
    ("memory_requested_frac", "requested memory / allocatable, the pod included"),
    (
        "cpu_used_frac",
        "(measured CPU use + estimated use of the node's pods not measured yet + the pod's request) / allocatable; "
        "= cpu_requested_frac when unknown",
    ),
    ("usage_known", "flag: the node reports measured CPU use (not when every node reports 0)"),
    ("pods_frac", "pods / allocatable pods, the pod included"),
    ("cpu_headroom_cores", "cores: allocatable - max(requested, used), the pod included (may be < 0)"),
    ("caller_node_share", "call-rate-weighted share of the callers' pods on the node, 0..1"),
    ("callee_node_share", "call-rate-weighted share of the callees' pods on the node, 0..1"),
    ("caller_zone_share", "call-rate-weighted share of the callers' pods in the node's zone, 0..1"),
    ("callee_zone_share", "call-rate-weighted share of the callees' pods in the node's zone, 0..1"),
    ("log_caller_rps", "log1p(calls/s into the service, self-calls excluded; 1 per edge without a rate)"),
    ("log_callee_rps", "log1p(calls/s out of the service, self-calls excluded; 1 per edge without a rate)"),
    ("rates_known", "flag: some edge of the service has a measured rate"),
    ("same_service_node_share", "share of the service's other pods on the node, 0..1"),
    ("same_service_zone_share", "share of the service's other pods in the node's zone, 0..1"),
    ("log_same_service_node_pods", "log1p(the service's other pods on the node)"),
    *(
        (f"intent_{n}", f"intent component {n} (policy.lowlevel.INTENT_SPEC; its default when absent)")
        for n in ("locality_weight", "balance_weight")
    ),
    (
        "svc_similarity_node",
        "mean cosine similarity of the pod's service row (its graph embedding, or its flat row) to the rows of the "
        "services of the other pods on the node, -1..1 (0 on a node without such pods, or without other rows)",
    ),
    (
        "node_log_speed",
        "log of the node's per-core CPU speed over the cluster's median, -1..1: declared by the node's label "
        "hrl-scheduler.io/cpu-speed, else measured (-node_slowness: its pods' CPU against their services' other "
        "pods'); 0 where neither is known",
    ),
)

#: The context columns of the placement bundles trained before the node-speed input: every column of
#: :data:`CONTEXT_FEATURES` but the last, ``node_log_speed``. A bundle of this layout still loads and scores as it was
#: trained (:class:`policy.lowlevel.LearnedPlacement` drops the column).
CONTEXT_FEATURES_V2 = CONTEXT_FEATURES[:-1]

#: The context columns of the first placement bundles (``placement-mlp-v1`` trained before the relational input):
#: :data:`CONTEXT_FEATURES_V2` without its last column, ``svc_similarity_node``; loaded the same way.
CONTEXT_FEATURES_V1 = CONTEXT_FEATURES_V2[:-1]

#: The context layouts a bundle may have, newest first.
CONTEXT_LAYOUTS = (CONTEXT_FEATURES, CONTEXT_FEATURES_V2, CONTEXT_FEATURES_V1)


#: The intent components the policy reads, by name (INTENT_SPEC may grow without changing these columns).
PLACEMENT_INTENTS = ("locality_weight", "balance_weight")


def placement_feature_spec(
    service_input: str, dim: int, context: tuple[tuple[str, str], ...] = CONTEXT_FEATURES
) -> FeatureSpec:
    """The candidate rows' columns: ``context`` (one of :data:`CONTEXT_LAYOUTS`; the newest by default) then the
    service block — ``svc_emb_00`` .. (``dim`` embedding components) for ``"encoder"``, or ``svc_<NODE_SPEC name>``
    for ``"flat"`` (``dim`` must be ``len(NODE_SPEC)``). Raises ``ValueError`` for another ``service_input``, a wrong
    ``dim`` or a ``context`` that is not a known layout."""
    if not any(context is c or context == c for c in CONTEXT_LAYOUTS):
        raise ValueError(f"context: expected one of CONTEXT_LAYOUTS, got {len(context)} columns")
    if service_input == "encoder":
        block = [(f"svc_emb_{i:02d}", "graph-encoder embedding component") for i in range(dim)]
    elif service_input == "flat":
        if dim != len(NODE_SPEC):
            raise ValueError(f"dim: the flat service block has {len(NODE_SPEC)} columns, got {dim}")
        block = [(f"svc_{n}", u) for n, u in zip(NODE_SPEC.names, NODE_SPEC.units)]
    else:
        raise ValueError(f"service_input: expected one of {', '.join(SERVICE_INPUTS)}, got {service_input!r}")
    return FeatureSpec.of([*context, *block])


#: The hrl-scheduler bundle's input (32-dimensional embeddings of the committed encoder).
PLACEMENT_FEATURES = placement_feature_spec("encoder", 32)


#: The ``hrl-no-encoder`` ablation's input (the encoder's raw per-service row instead of its embedding).
PLACEMENT_FEATURES_FLAT = placement_feature_spec("flat", len(NODE_SPEC))


# ---- featurization -------------------------------------------------------------------------------------


class _IndexExtras:
    """Per-index arrays featurization needs beyond :class:`ClusterIndex` (built once per index)."""

    __slots__ = ("index", "zone", "n_zones", "alloc_pods", "usage_known", "_speed")

    def __init__(self, index: ClusterIndex):
        self.index = index
        u = index.usage_cpu_m
        # a cluster where every node reports exactly 0 m has no metrics yet (e.g. before the first scrape)
        self.usage_known = np.isfinite(u) & (not (len(u) and np.all(np.nan_to_num(u) == 0.0)))
        zones: dict[str, int] = {}
        self.zone = np.array([zones.setdefault(n.zone, len(zones)) for n in index.snapshot.nodes], dtype=np.int64)
        self.n_zones = max(len(zones), 1)
        self.alloc_pods = np.array([max(n.allocatable_pods, 1) for n in index.snapshot.nodes], dtype=np.float64)
        self._speed: np.ndarray | None = None

    @property
    def speed(self) -> np.ndarray:
        """(N,) :func:`node_log_speed` of the index, the measured part only where the node reports measured use
        (computed once)."""
        if self._speed is None:
            self._speed = node_log_speed(self.index, self.usage_known)
        return self._speed


class _GraphExtras:
    """Per-graph neighbour lists: service → ((caller, rps), ...), ((callee, rps), ...), rates known."""

    __slots__ = ("graph", "callers", "callees", "known")

    def __init__(self, graph: ServiceGraph, default_rps: float):
        self.graph = graph
        self.callers: dict[str, list[tuple[str, float]]] = {}
        self.callees: dict[str, list[tuple[str, float]]] = {}
        self.known: dict[str, bool] = {}
        for e in graph.edges:
            if e.caller == e.callee:
                continue
            r = default_rps if e.rps is None else max(float(e.rps), 0.0)
            self.callees.setdefault(e.caller, []).append((e.callee, r))
            self.callers.setdefault(e.callee, []).append((e.caller, r))
            if e.rps is not None:
                self.known[e.caller] = self.known[e.callee] = True


_EXTRAS_LOCK = threading.Lock()


_INDEX_EXTRAS: list[_IndexExtras] = []


_GRAPH_EXTRAS: list[_GraphExtras] = []


class _RowsExtras:
    """Per (index, service rows): the rows' unit vectors (S, D) and the (S, N) counts of each row's service's bound
    pods per node (zero for a service the index does not know), for :func:`_similarity_to_nodes`."""

    __slots__ = ("index", "rows", "pos", "unit", "counts", "total")

    def __init__(self, index: ClusterIndex, rows: Any):
        self.index = index
        self.rows = rows
        services = tuple(rows.services)
        self.pos = {svc: i for i, svc in enumerate(services)}
        m = np.asarray(rows.matrix, dtype=np.float64).reshape(len(services), -1)
        norm = np.linalg.norm(m, axis=1, keepdims=True)
        self.unit = np.divide(m, norm, out=np.zeros_like(m), where=norm > 0)
        N = len(index.snapshot.nodes)
        self.counts = np.zeros((len(services), N))
        for svc, i in self.pos.items():
            c = index.service_nodes.get(svc)
            if c is not None:
                self.counts[i] = c
        self.total = self.counts.sum(axis=0)


_ROWS_EXTRAS: list[_RowsExtras] = []


def _rows_extras(index: ClusterIndex, rows: Any) -> _RowsExtras:
    for e in _ROWS_EXTRAS:
        if e.index is index and e.rows is rows:
            return e
    e = _RowsExtras(index, rows)
    with _EXTRAS_LOCK:
        _ROWS_EXTRAS.insert(0, e)
        del _ROWS_EXTRAS[4:]
    return e


def _similarity_to_nodes(service: str, rows: Any, index: ClusterIndex, own_node: int) -> np.ndarray:
    """(N,) mean cosine similarity of ``service``'s row to the rows of the services of the pods bound to each node,
    the pod itself (bound to ``own_node``, -1 when unbound) left out; 0 where no such pod is, and everywhere when
    ``rows`` holds only the pod's own row (a bare array). O(S · N) per pod with the (S, N) counts kept per index."""
    N = len(index.snapshot.nodes)
    if not (hasattr(rows, "services") and hasattr(rows, "matrix")):
        return np.zeros(N)
    ex = _rows_extras(index, rows)
    i = ex.pos.get(service)
    if i is None:
        return np.zeros(N)
    sims = ex.unit @ ex.unit[i]
    num = sims @ ex.counts
    den = ex.total.copy()
    if own_node >= 0:
        num[own_node] -= sims[i]
        den[own_node] -= 1.0
    return np.divide(num, den, out=np.zeros(N), where=den > 0)


def _index_extras(index: ClusterIndex) -> _IndexExtras:
    for e in _INDEX_EXTRAS:
        if e.index is index:
            return e
    e = _IndexExtras(index)
    with _EXTRAS_LOCK:
        _INDEX_EXTRAS.insert(0, e)
        del _INDEX_EXTRAS[4:]
    return e


def _graph_extras(graph: ServiceGraph, default_rps: float) -> _GraphExtras:
    for e in _GRAPH_EXTRAS:
        if e.graph is graph:
            return e
    e = _GraphExtras(graph, default_rps)
    with _EXTRAS_LOCK:
        _GRAPH_EXTRAS.insert(0, e)
        del _GRAPH_EXTRAS[4:]
    return e


def _service_row(service: str, embeddings: Any) -> np.ndarray:
    if isinstance(embeddings, np.ndarray):
        return embeddings.reshape(-1)
    if embeddings is None:
        raise ValueError(f"embeddings: none given for service {service!r}")
    row = embeddings.get(service) if isinstance(embeddings, Mapping) else embeddings.row(service)
    if row is None:
        raise ValueError(f"embeddings: no row for service {service!r}")
    return np.asarray(row, dtype=np.float32).reshape(-1)


def node_cpu_used_m(index: ClusterIndex) -> np.ndarray:
    """(N,) float64: each node's CPU in use before a pod is added, millicores, as the ``cpu_used_frac`` column counts
    it (:func:`featurize_candidates`): measured use plus the requests of its pods not measured yet where the node
    reports use, else its requested CPU. ``cpu_used_frac`` of an unbound pod is ``(this + pod CPU) / allocatable``."""
    ix = _index_extras(index)
    use = index.usage_cpu_m
    unmeasured = index.unmeasured_cpu_m
    if unmeasured is not None:
        use = use + unmeasured
    return np.where(ix.usage_known, np.nan_to_num(use), index.req_cpu_m)


#: A node's :func:`node_slowness` is known once its measured pods' peers use this much CPU (millicores) in all.
SLOWNESS_MIN_CPU_M = 20.0


def node_slowness(index: ClusterIndex) -> np.ndarray:
    """(N,) float64 in [-1, 1]: how much more CPU a node's pods use than their services' other pods, a live proxy
    of the node's per-core slowness (and of interference on it), for nodes that do not declare their speed. With
    ``u_p`` the measured CPU of a bound pod *p* of a service *s* (a service of the call graph, or any when the graph
    is empty) and ``ū_p`` the mean measured CPU of *s*'s other pods (at least one)::

        node_slowness(n) = clip(log(Σ_{p on n} u_p / Σ_{p on n} ū_p), -1, 1)

    0 where ``Σ ū_p`` < :data:`SLOWNESS_MIN_CPU_M` (too few measured peers to tell). Kubernetes Services spread
    requests evenly over a service's ready pods, so a pod's CPU over its peers' is the work per request on its node
    over theirs: ``1/speed`` in the simulator (:mod:`policy.sim.model`, a request's CPU work takes ``x / speed``).
    Pods without ``usage`` (not measured yet) and terminating or unbound pods are left out (a bound pod that is being
    scored counts on its own node like any other). O(P); O(N) when the index counts no measured pod."""
    N = len(index.snapshot.nodes)
    if index.measured_pods is not None and not index.measured_pods.any():
        return np.zeros(N)  # no pod measured (no metrics source): nothing to compare, and no pass over the pods
    services = set(index.snapshot.graph.services)
    pos = index.node_pos
    rows = [
        (p.service, pos[p.node_name], float(p.usage.cpu_m))
        for p in index.snapshot.pods
        if p.usage is not None and p.node_name in pos and not p.terminating and (not services or p.service in services)
    ]
    if not rows:
        return np.zeros(N)
    ids: dict[str, int] = {}
    svc = np.fromiter((ids.setdefault(r[0], len(ids)) for r in rows), dtype=np.int64, count=len(rows))
    node = np.fromiter((r[1] for r in rows), dtype=np.int64, count=len(rows))
    use = np.fromiter((r[2] for r in rows), dtype=np.float64, count=len(rows))
    total = np.bincount(svc, weights=use, minlength=len(ids))
    count = np.bincount(svc, minlength=len(ids)).astype(np.float64)
    peers = count[svc] - 1.0
    has = peers > 0
    peer_mean = np.divide(total[svc] - use, peers, out=np.zeros(len(rows)), where=has)
    num = np.bincount(node[has], weights=use[has], minlength=N)
    den = np.bincount(node[has], weights=peer_mean[has], minlength=N)
    ok = (den >= SLOWNESS_MIN_CPU_M) & (num > 0)
    out = np.zeros(N)
    out[ok] = np.clip(np.log(num[ok] / den[ok]), -1.0, 1.0)
    return out


#: (node, label value) pairs already reported as not a speed (each is logged once per process).
_BAD_SPEED_LABELS: set[tuple[str, str]] = set()


def declared_speeds(index: ClusterIndex) -> np.ndarray:
    """(N,) float64: each node's :data:`policy.state.LABEL_CPU_SPEED` label as a number, NaN where absent or not a
    finite number > 0 (such a value is logged once per node and value, as a WARNING naming both, and the node counts
    as undeclared)."""
    out = np.full(len(index.snapshot.nodes), np.nan)
    for i, n in enumerate(index.snapshot.nodes):
        v = n.labels.get(LABEL_CPU_SPEED)
        if v is None:
            continue
        try:
            f = float(v)
        except ValueError:
            f = math.nan
        if math.isfinite(f) and f > 0:
            out[i] = f
        elif (n.name, v) not in _BAD_SPEED_LABELS:
            _BAD_SPEED_LABELS.add((n.name, v))
            log.warning(
                "node %s: label %s: expected a number > 0, got %r; its speed counts as unknown",
                n.name,
                LABEL_CPU_SPEED,
                v,
            )
    return out


def node_log_speed(index: ClusterIndex, measured_ok: np.ndarray | None = None) -> np.ndarray:
    """(N,) float64 in [-1, 1], the ``node_log_speed`` column: ``log(speed / median speed)`` over the nodes that
    declare their speed (:func:`declared_speeds`), and ``-node_slowness`` (:func:`node_slowness`, measured) on the
    others where ``measured_ok`` (default: everywhere) holds; 0 where neither is known."""
    declared = declared_speeds(index)
    measured = -node_slowness(index)
    if measured_ok is not None:
        measured = np.where(measured_ok, measured, 0.0)
    has = np.isfinite(declared)
    if not has.any():
        return measured
    rel = np.log(declared[has] / np.median(declared[has]))
    out = measured.copy()
    out[has] = np.clip(rel, -1.0, 1.0)
    return out


def featurize_candidates(
    pod: PodInfo,
    candidates: Sequence[str],
    index: ClusterIndex,
    embeddings: Any,
    intent: Sequence[float] | None = None,
    *,
    default_rps: float = 1.0,
) -> np.ndarray:
    """(C, len(CONTEXT_FEATURES) + D) float32: one row of :data:`PLACEMENT_FEATURES` (or the flat variant,
    by the width of the service row) per candidate, in ``candidates`` order.

    ``embeddings``: the pod's service row itself ((D,) array), or a mapping / :class:`ServiceRows` holding it
    (raises ``ValueError`` when it lacks the service). Candidates the index does not know get all-zero context
    columns. Call rates come from ``index.snapshot.graph`` (``default_rps`` per edge without one).
    Vectorised over candidates: O(C · (1 + neighbours)), plus O(S · N) for ``svc_similarity_node`` (S services with
    rows, N nodes) and, once per index, O(P) for ``node_log_speed`` (P pods).
    """
    svc_row = _service_row(pod.service, embeddings)
    C = len(candidates)
    K = len(CONTEXT_FEATURES)
    out = np.zeros((C, K + svc_row.shape[0]), dtype=np.float32)
    out[:, K:] = svc_row
    if C == 0:
        return out
    ix = _index_extras(index)
    gx = _graph_extras(index.snapshot.graph, default_rps)
    node_pos = index.node_pos
    pos = np.fromiter((node_pos.get(c, -1) for c in candidates), dtype=np.int64, count=C)
    known = pos >= 0
    p = np.where(known, pos, 0)
    own_i = node_pos.get(pod.node_name, -2) if pod.node_name is not None else -2
    own = (pos == own_i).astype(np.float64)
    cpu = float(pod.requests.cpu_m)
    mem = float(pod.requests.memory_bytes)
    alloc_cpu = np.maximum(index.alloc_cpu_m[p], 1.0)
    alloc_mem = np.maximum(index.alloc_mem_bytes[p], 1.0)
    req_cpu = index.req_cpu_m[p] - own * cpu + cpu
    req_mem = index.req_mem_bytes[p] - own * mem + mem
    use = index.usage_cpu_m[p]
    use_known = ix.usage_known[p]
    # a bound pod scoring its own node: what the node's use holds of it (measured, or the estimate of an unmeasured
    # pod) comes out, its request goes in as for any pending pod
    own_use = float(pod.usage.cpu_m) if pod.usage is not None else float(estimated_cpu_m(pod))
    unmeasured = index.unmeasured_cpu_m
    if unmeasured is not None:
        use = use + unmeasured[p]
    used = np.where(use_known, np.nan_to_num(use) - own * own_use + cpu, req_cpu)
    zone = ix.zone[p]
    cols: list[np.ndarray] = [
        cpu / alloc_cpu,
        mem / alloc_mem,
        req_cpu / alloc_cpu,
        req_mem / alloc_mem,
        used / alloc_cpu,
        use_known.astype(np.float64),
        (index.pod_count[p] - own + 1.0) / ix.alloc_pods[p],
        (alloc_cpu - np.maximum(req_cpu, used)) / 1000.0,
    ]
    nz = ix.n_zones
    shares = []  # (node, zone) per side: callers, then callees
    for side in (gx.callers.get(pod.service, ()), gx.callees.get(pod.service, ())):
        node_share = np.zeros(C)
        zone_share = np.zeros(C)
        total_w = sum(w for _t, w in side)
        if total_w > 0:
            for t, w in side:
                counts = index.service_nodes.get(t)
                tot = index.service_total.get(t, 0)
                if counts is None or tot <= 0:
                    continue
                f = w / (total_w * tot)
                node_share += f * counts[p]
                zone_share += f * np.bincount(ix.zone, weights=counts, minlength=nz)[zone]
        shares.append((node_share, zone_share))
    cols += [shares[0][0], shares[1][0], shares[0][1], shares[1][1]]
    in_rps = sum(w for _t, w in gx.callers.get(pod.service, ()))
    out_rps = sum(w for _t, w in gx.callees.get(pod.service, ()))
    cols += [
        np.full(C, math.log1p(in_rps)),
        np.full(C, math.log1p(out_rps)),
        np.full(C, 1.0 if gx.known.get(pod.service, False) else 0.0),
    ]
    counts = index.service_nodes.get(pod.service)
    bound_here = 1.0 if (pod.node_name is not None and own_i >= 0) else 0.0
    tot_other = float(index.service_total.get(pod.service, 0)) - bound_here
    if counts is not None and tot_other > 0:
        on_node = counts[p] - own
        in_zone = (
            np.bincount(ix.zone, weights=counts, minlength=nz)[zone] - (ix.zone[own_i] == zone) * bound_here
            if own_i >= 0
            else np.bincount(ix.zone, weights=counts, minlength=nz)[zone]
        )
        cols += [on_node / tot_other, in_zone / tot_other, np.log1p(np.maximum(on_node, 0.0))]
    else:
        cols += [np.zeros(C), np.zeros(C), np.zeros(C)]
    for n in PLACEMENT_INTENTS:
        cols.append(np.full(C, intent_value(intent, n)))
    cols.append(_similarity_to_nodes(pod.service, embeddings, index, own_i if own_i >= 0 else -1)[p])
    cols.append(ix.speed[p])
    ctx = np.stack(cols, axis=1)
    ctx[~known] = 0.0
    out[:, :K] = ctx
    return out
