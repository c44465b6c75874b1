"""The learned low-level policy: scores every candidate node for a pod (numpy only; served in the extender).

For a pod of service *s* and each candidate node *n*, :func:`featurize_candidates` builds one row of
:data:`PLACEMENT_FEATURES` (C candidates → a (C, F) float32 array):

- **the node after placing the pod**: requested CPU and memory fractions, measured CPU fraction (requested when
  no metrics; ``usage_known`` says which), pods fraction, CPU cores left; the pod's own requests as fractions of
  the node. A pod already bound to a candidate (the descheduler scoring its current node) is not counted twice;
- **co-location with the call graph**: the call-rate-weighted share of the pods of *s*'s callers on *n*, and of
  its callees (separately), the same shares over *n*'s zone, and the log call rates in and out of *s*;
- **spread**: the share of *s*'s other pods on *n* and in its zone, and their count on *n*;
- **the high-level intent**: its ``locality_weight`` and ``balance_weight`` (:data:`policy.lowlevel.INTENT_SPEC`,
  defaults when absent; see :mod:`policy.placement_train` for what they weigh);
- **the service's representation**: its graph-encoder embedding (``service_input="encoder"``,
  :data:`PLACEMENT_FEATURES`), or, for the ``hrl-no-encoder`` ablation, the encoder's raw per-service input
  row (:data:`policy.graph_features.NODE_SPEC`; ``service_input="flat"``, :data:`PLACEMENT_FEATURES_FLAT`).

The network (``placement-mlp-v1``) is one small MLP applied to every row (so any number of candidates, any
cluster)::

    x̂ = (x − μ) / σ                                     (normalisation stored in the bundle)
    h = tanh(W₁ x̂ + b₁);  h = tanh(W₂ h + b₂);  z = W₃ h + b₃  (C,)
    score = clip(10 · sigmoid(z) + g · intent_adjustment(x), 0, 10)   (C,), what the extender answers

``intent_adjustment`` (:func:`intent_adjustment`) is 0 at the default intent (1, 1) and otherwise moves the score by
``(locality_weight − 1) × co-location − (balance_weight − 1) × CPU overload`` points per unit of ``g``
(``architecture.intent_gain``, 3 in the committed bundles; the network is trained with it in place): the high
level gets a direct, predictable handle on placement, and the learned part adapts around it.

kube-scheduler then adds ``round(score) × weight × 10`` (weight 2 as shipped) to its in-tree plugins' total and
picks the best node. Training (:mod:`policy.placement_train`) optimises exactly that combination: its policy is
the softmax, over the candidates, of ``(in-tree total + 20 · round(score)) / temperature``, and the served
decision (kube-scheduler's argmax) is the trained policy's greedy choice.

Service rows come from :class:`ServiceRowCache` (computed from a snapshot off the request path, refreshed every
``refresh_s`` seconds of snapshot time, keyed by the graph's fingerprint), or from an embedding-cache copy (an
:class:`policy.embeddings.EmbeddingEntry`) when it was made by the same encoder the bundle was trained with.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from .bundle import BundleError, PolicyBundle, located
from .embeddings import EmbeddingEntry, fingerprint
from .features import FeatureSpec, FeatureSpecError
from .graph_features import NODE_SPEC, colocation_from_snapshot, featurize_graph, stats_from_snapshot
from .index import ClusterIndex
from .lowlevel import MAX_EXTENDER_PRIORITY, intent_value, resource_fit_failures
from .state import ClusterSnapshot, PodInfo, ServiceGraph

__all__ = ["PLACEMENT_ARCH", "SERVICE_INPUTS", "FLAT_ROWS_VERSION", "CONTEXT_FEATURES", "PLACEMENT_INTENTS",
           "placement_feature_spec",
           "PLACEMENT_FEATURES", "PLACEMENT_FEATURES_FLAT", "DEFAULT_PLACEMENT_BUNDLE", "DEFAULT_FLAT_PLACEMENT_BUNDLE",
           "EXTENDER_WEIGHT", "ServiceRows", "compute_service_rows", "ServiceRowCache", "featurize_candidates",
           "mlp_weight_shapes", "mlp_logits", "intent_adjustment", "scores_from_logits", "served_totals",
           "LearnedPlacement",
           "encoder_for", "RowsRefresher"]

log = logging.getLogger(__name__)

PLACEMENT_ARCH = "placement-mlp-v1"
SERVICE_INPUTS = ("encoder", "flat")
#: ``encoder_version`` of the rows :func:`compute_service_rows` makes for ``service_input="flat"``.
FLAT_ROWS_VERSION = "flat-node-spec-v1"
#: The extender's ``weight`` in ``KubeSchedulerConfiguration.extenders`` as shipped (manifests/).
EXTENDER_WEIGHT = 2
_BUNDLES = Path(__file__).resolve().parent / "bundles"
DEFAULT_PLACEMENT_BUNDLE = _BUNDLES / "hrl-scheduler" / "low"
DEFAULT_FLAT_PLACEMENT_BUNDLE = _BUNDLES / "hrl-no-encoder" / "low"

#: The columns every variant shares (before the service block), in order.
CONTEXT_FEATURES: tuple[tuple[str, str], ...] = (
    ("pod_cpu_request_frac", "pod CPU request / node allocatable CPU"),
    ("pod_memory_request_frac", "pod memory request / node allocatable memory"),
    ("cpu_requested_frac", "requested CPU / allocatable, the pod included"),
    ("memory_requested_frac", "requested memory / allocatable, the pod included"),
    ("cpu_used_frac", "measured CPU use + the pod's request / allocatable; = cpu_requested_frac when unknown"),
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
    *((f"intent_{n}", f"intent component {n} (policy.lowlevel.INTENT_SPEC; its default when absent)")
      for n in ("locality_weight", "balance_weight")),
)
#: The intent components the policy reads, by name (INTENT_SPEC may grow without changing these columns).
PLACEMENT_INTENTS = ("locality_weight", "balance_weight")


def placement_feature_spec(service_input: str, dim: int) -> FeatureSpec:
    """The candidate rows' columns: :data:`CONTEXT_FEATURES` then the service block — ``svc_emb_00`` ..
    (``dim`` embedding components) for ``"encoder"``, or ``svc_<NODE_SPEC name>`` for ``"flat"`` (``dim`` must
    be ``len(NODE_SPEC)``). Raises ``ValueError`` for another ``service_input`` or a wrong ``dim``."""
    if service_input == "encoder":
        block = [(f"svc_emb_{i:02d}", "graph-encoder embedding component") for i in range(dim)]
    elif service_input == "flat":
        if dim != len(NODE_SPEC):
            raise ValueError(f"dim: the flat service block has {len(NODE_SPEC)} columns, got {dim}")
        block = [(f"svc_{n}", u) for n, u in zip(NODE_SPEC.names, NODE_SPEC.units)]
    else:
        raise ValueError(f"service_input: expected one of {', '.join(SERVICE_INPUTS)}, got {service_input!r}")
    return FeatureSpec.of([*CONTEXT_FEATURES, *block])


#: The hrl-scheduler bundle's input (32-dimensional embeddings of the committed encoder).
PLACEMENT_FEATURES = placement_feature_spec("encoder", 32)
#: The ``hrl-no-encoder`` ablation's input (the encoder's raw per-service row instead of its embedding).
PLACEMENT_FEATURES_FLAT = placement_feature_spec("flat", len(NODE_SPEC))


# ---- service rows ----------------------------------------------------------------------------------------

class ServiceRows(Protocol):
    """Per-service vectors: :class:`policy.embeddings.EmbeddingEntry` is one."""

    def row(self, service: str) -> np.ndarray | None: ...


def compute_service_rows(snapshot: ClusterSnapshot, service_input: str, encoder: Any = None,
                         now_s: float | None = None) -> EmbeddingEntry:
    """The service block of every service of ``snapshot.graph``, as the descheduler computes embeddings
    (:mod:`descheduler.cache`): node features from :func:`~policy.graph_features.stats_from_snapshot`, edge
    features with :func:`~policy.graph_features.colocation_from_snapshot`.

    ``"encoder"``: ``encoder`` (:class:`policy.serving.GraphEncoder`) embeddings (N, D), ``encoder_version`` its
    ``version``; ``"flat"``: the (N, len(NODE_SPEC)) input rows, ``encoder_version`` :data:`FLAT_ROWS_VERSION`.
    ``timestamp_s``: ``now_s``, default the snapshot's ``taken_at_s``. Raises ``ValueError`` for an unknown
    ``service_input`` or an ``"encoder"`` request without an encoder."""
    g = snapshot.graph
    stats = stats_from_snapshot(snapshot)
    share = colocation_from_snapshot(snapshot, g)
    ts = snapshot.taken_at_s if now_s is None else now_s
    if service_input == "encoder":
        if encoder is None:
            raise ValueError("service_input 'encoder' needs a GraphEncoder")
        out = encoder.encode_graph(g, stats, share)
        return EmbeddingEntry(fingerprint(g), out.services, out.embeddings, 0, ts, encoder.version)
    if service_input == "flat":
        arrays = featurize_graph(g, stats, share)
        return EmbeddingEntry(fingerprint(g), arrays.services, arrays.x, 0, ts, FLAT_ROWS_VERSION)
    raise ValueError(f"service_input: expected one of {', '.join(SERVICE_INPUTS)}, got {service_input!r}")


class ServiceRowCache:
    """Service rows per call-graph fingerprint, recomputed when older than ``refresh_s`` seconds of snapshot
    time (``taken_at_s``: simulated time in the simulator, unix time live). ``get`` computes on a miss (in the
    caller's thread); the extender's :class:`RowsRefresher` calls it in the background so requests hit."""

    def __init__(self, service_input: str, encoder: Any = None, refresh_s: float = 300.0, max_entries: int = 4):
        if service_input not in SERVICE_INPUTS:
            raise ValueError(f"service_input: expected one of {', '.join(SERVICE_INPUTS)}, got {service_input!r}")
        if not (refresh_s > 0 and math.isfinite(refresh_s)):
            raise ValueError(f"refresh_s: expected a finite number > 0, got {refresh_s!r}")
        self.service_input = service_input
        self.encoder = encoder
        self.refresh_s = float(refresh_s)
        self.max_entries = max_entries
        self._entries: dict[str, EmbeddingEntry] = {}
        self._fp_graph: tuple[ServiceGraph | None, str] = (None, "")
        self._lock = threading.Lock()
        self.computations = 0

    def graph_fingerprint(self, graph: ServiceGraph) -> str:
        """``fingerprint(graph)``, recomputed only when the graph object changes."""
        g, fp = self._fp_graph
        if g is not graph:
            fp = fingerprint(graph)
            self._fp_graph = (graph, fp)
        return fp

    def peek(self, snapshot: ClusterSnapshot) -> EmbeddingEntry | None:
        """The cached rows of ``snapshot.graph`` however old, or ``None``."""
        return self._entries.get(self.graph_fingerprint(snapshot.graph))

    def get(self, snapshot: ClusterSnapshot) -> EmbeddingEntry:
        """The rows of ``snapshot.graph``: cached unless missing or older than ``refresh_s``."""
        fp = self.graph_fingerprint(snapshot.graph)
        e = self._entries.get(fp)
        if e is not None and snapshot.taken_at_s - e.timestamp_s <= self.refresh_s:
            return e
        with self._lock:
            e = self._entries.get(fp)
            if e is not None and snapshot.taken_at_s - e.timestamp_s <= self.refresh_s:
                return e
            e = compute_service_rows(snapshot, self.service_input, self.encoder)
            entries = dict(self._entries)
            entries[fp] = e
            while len(entries) > self.max_entries:
                entries.pop(next(iter(entries)))
            self._entries = entries
            self.computations += 1
            return e


# ---- featurization -------------------------------------------------------------------------------------

class _IndexExtras:
    """Per-index arrays featurization needs beyond :class:`ClusterIndex` (built once per index)."""

    __slots__ = ("index", "zone", "n_zones", "alloc_pods", "usage_known")

    def __init__(self, index: ClusterIndex):
        self.index = index
        u = index.usage_cpu_m
        # a cluster where every node reports exactly 0 m has no metrics yet (e.g. before the first scrape)
        self.usage_known = np.isfinite(u) & (not (len(u) and np.all(np.nan_to_num(u) == 0.0)))
        zones: dict[str, int] = {}
        self.zone = np.array([zones.setdefault(n.zone, len(zones)) for n in index.snapshot.nodes], dtype=np.int64)
        self.n_zones = max(len(zones), 1)
        self.alloc_pods = np.array([max(n.allocatable_pods, 1) for n in index.snapshot.nodes], dtype=np.float64)


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


def featurize_candidates(pod: PodInfo, candidates: Sequence[str], index: ClusterIndex, embeddings: Any,
                         intent: Sequence[float] | None = None, *, default_rps: float = 1.0) -> np.ndarray:
    """(C, len(CONTEXT_FEATURES) + D) float32: one row of :data:`PLACEMENT_FEATURES` (or the flat variant,
    by the width of the service row) per candidate, in ``candidates`` order.

    ``embeddings``: the pod's service row itself ((D,) array), or a mapping / :class:`ServiceRows` holding it
    (raises ``ValueError`` when it lacks the service). Candidates the index does not know get all-zero context
    columns. Call rates come from ``index.snapshot.graph`` (``default_rps`` per edge without one).
    Vectorised over candidates: O(C · (1 + neighbours)).
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
    own_use = float(pod.usage.cpu_m) if pod.usage is not None else cpu
    used = np.where(use_known, np.nan_to_num(use) - own * own_use + cpu, req_cpu)
    zone = ix.zone[p]
    cols: list[np.ndarray] = [
        cpu / alloc_cpu, mem / alloc_mem, req_cpu / alloc_cpu, req_mem / alloc_mem, used / alloc_cpu,
        use_known.astype(np.float64), (index.pod_count[p] - own + 1.0) / ix.alloc_pods[p],
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
    cols += [np.full(C, math.log1p(in_rps)), np.full(C, math.log1p(out_rps)),
             np.full(C, 1.0 if gx.known.get(pod.service, False) else 0.0)]
    counts = index.service_nodes.get(pod.service)
    bound_here = 1.0 if (pod.node_name is not None and own_i >= 0) else 0.0
    tot = index.service_total.get(pod.service, 0) - bound_here
    if counts is not None and tot > 0:
        on_node = counts[p] - own
        in_zone = np.bincount(ix.zone, weights=counts, minlength=nz)[zone] - (ix.zone[own_i] == zone) * bound_here \
            if own_i >= 0 else np.bincount(ix.zone, weights=counts, minlength=nz)[zone]
        cols += [on_node / tot, in_zone / tot, np.log1p(np.maximum(on_node, 0.0))]
    else:
        cols += [np.zeros(C), np.zeros(C), np.zeros(C)]
    for n in PLACEMENT_INTENTS:
        cols.append(np.full(C, intent_value(intent, n)))
    ctx = np.stack(cols, axis=1)
    ctx[~known] = 0.0
    out[:, :K] = ctx
    return out


# ---- the network ---------------------------------------------------------------------------------------

def mlp_weight_shapes(features: int, hidden: int, layers: int = 2) -> dict[str, tuple[int, ...]]:
    """Every weight of ``placement-mlp-v1`` (torch ``nn.Sequential`` names: Linear at 0, 2, ..., Tanh between)."""
    s: dict[str, tuple[int, ...]] = {}
    d = features
    for i in range(layers):
        s[f"net.{2 * i}.weight"] = (hidden, d)
        s[f"net.{2 * i}.bias"] = (hidden,)
        d = hidden
    s[f"net.{2 * layers}.weight"] = (1, d)
    s[f"net.{2 * layers}.bias"] = (1,)
    return s


def mlp_logits(weights: Mapping[str, np.ndarray], x: np.ndarray, mean: np.ndarray, std: np.ndarray,
               layers: int = 2) -> np.ndarray:
    """(C,) float32 pre-sigmoid outputs ``z`` of ``placement-mlp-v1`` for rows ``x`` (C, F); ``weights`` in torch
    layout (``weight`` is (out, in))."""
    h = (np.asarray(x, np.float32) - mean) / std
    for i in range(layers):
        h = np.tanh(h @ weights[f"net.{2 * i}.weight"].T + weights[f"net.{2 * i}.bias"])
    z = h @ weights[f"net.{2 * layers}.weight"].T + weights[f"net.{2 * layers}.bias"]
    return z.reshape(-1).astype(np.float32, copy=False)


_COL = {n: i for i, (n, _u) in enumerate(CONTEXT_FEATURES)}
#: CPU used fraction above which :func:`intent_adjustment` counts a node as overloaded (as TopologyHeuristic).
OVERLOAD_FROM = 0.7


def intent_adjustment(x: np.ndarray) -> np.ndarray:
    """(C,) float64 score adjustment per unit of intent gain, from feature rows ``x`` (C, F) alone:
    ``(locality_weight − 1) · ½(caller_node_share + callee_node_share)
    − (balance_weight − 1) · clip((cpu_used_frac − 0.7) / 0.3, 0, 1)``; 0 at the default intent."""
    x = np.asarray(x, dtype=np.float64)
    loc = 0.5 * (x[:, _COL["caller_node_share"]] + x[:, _COL["callee_node_share"]])
    over = np.clip((x[:, _COL["cpu_used_frac"]] - OVERLOAD_FROM) / (1.0 - OVERLOAD_FROM), 0.0, 1.0)
    return (x[:, _COL["intent_locality_weight"]] - 1.0) * loc - (x[:, _COL["intent_balance_weight"]] - 1.0) * over


def scores_from_logits(z: np.ndarray, x: np.ndarray | None = None, intent_gain: float = 0.0) -> np.ndarray:
    """(C,) float64 scores in [0, 10]: ``10 · sigmoid(z)`` (numerically stable), plus ``intent_gain ·``
    :func:`intent_adjustment` ``(x)`` clipped to [0, 10] when ``x`` is given and the gain is not 0."""
    z = np.asarray(z, dtype=np.float64)
    s = MAX_EXTENDER_PRIORITY * np.where(z >= 0, 1.0 / (1.0 + np.exp(-np.abs(z))),
                                         np.exp(-np.abs(z)) / (1.0 + np.exp(-np.abs(z))))
    if x is not None and intent_gain:
        s = np.clip(s + intent_gain * intent_adjustment(x), 0.0, MAX_EXTENDER_PRIORITY)
    return s


def served_totals(in_tree_totals: np.ndarray, scores: np.ndarray, weight: int = EXTENDER_WEIGHT) -> np.ndarray:
    """kube-scheduler's final node totals: in-tree total + ``round_half_up(score)`` (clamped 0..10) × weight × 10
    (MaxNodeScore / MaxExtenderPriority), as :func:`extender.wire.build_host_priorities` and
    :class:`policy.sim.kube_scheduler.KubeSchedulerModel` compute them."""
    q = np.clip(np.floor(np.asarray(scores, dtype=np.float64) + 0.5), 0, MAX_EXTENDER_PRIORITY)
    return np.asarray(in_tree_totals, dtype=np.float64) + q * weight * 10


# ---- the policy ----------------------------------------------------------------------------------------

class LearnedPlacement:
    """The learned placement policy, a :class:`policy.lowlevel.PlacementPolicy`, built from a ``level: low``
    bundle of architecture ``placement-mlp-v1``.

    ``encoder``: the :class:`policy.serving.GraphEncoder` for ``service_input: encoder`` bundles (default:
    ``find_encoder(architecture.encoder_version)`` when given, called once the bundle itself has been checked,
    else the committed encoder; checked against the bundle's ``architecture.encoder_version``); ``refresh_s``: service
    rows are recomputed when older than this (snapshot time). ``embedding_source``: a callable returning an
    embedding-cache copy (``EmbeddingEntry`` or ``None``) to prefer over in-process rows when its
    ``encoder_version`` matches (the extender passes ``lambda: store.get().embeddings``).

    Raises :class:`policy.bundle.BundleError` (one line naming the bundle directory and the field) when the
    bundle is of another level or architecture, its feature spec differs from :func:`placement_feature_spec` of
    its service input, its dims disagree with its feature spec or arrays (checked before anything is sized by
    them), a weight is misshapen, an ``architecture`` field has the wrong type or range (``temperature``: a
    finite number > 0, default 20; ``intent_gain``: a finite number, default 0; ``extender_weight``: an integer
    >= 1, default :data:`EXTENDER_WEIGHT`; ``encoder_version``: text or absent), ``normalization.candidate`` is
    not a mean/std pair of the input's width, or the encoder differs from the one it was trained with.
    """

    name = "learned"

    def __init__(self, bundle: PolicyBundle, *, encoder: Any = None, refresh_s: float = 300.0,
                 embedding_source: Callable[[], Any] | None = None,
                 find_encoder: Callable[[str], Any] | None = None):
        where = f"placement {bundle.where}"
        if bundle.level != "low":
            raise BundleError(f"{where}: level: expected 'low', found {bundle.level!r}")
        arch = dict(bundle.architecture)
        if arch.get("type") != PLACEMENT_ARCH:
            raise BundleError(f"{where}: architecture.type: expected {PLACEMENT_ARCH!r}, found {arch.get('type')!r}")
        si = arch.get("service_input")
        if si not in SERVICE_INPUTS:
            raise BundleError(f"{where}: architecture.service_input: expected one of {', '.join(SERVICE_INPUTS)}, "
                              f"found {si!r}")
        d = bundle.dims
        try:
            self.hidden, self.layers, self.service_dim = d["hidden"], d["layers"], d["service_dim"]
        except KeyError as exc:
            raise BundleError(f"{where}: dims: missing {exc.args[0]!r}") from None
        found = bundle.feature_spec.get("candidate")
        if found is None:
            raise BundleError(f"{where}: feature_spec: expected input 'candidate', found {sorted(bundle.feature_spec)}")
        # bound every dim by what the manifest's own spec and arrays say before sizing anything by it
        if len(CONTEXT_FEATURES) + self.service_dim != len(found):
            raise BundleError(f"{where}: dims.service_dim: expected {len(found) - len(CONTEXT_FEATURES)} "
                              f"(feature_spec.candidate has {len(found)} columns, {len(CONTEXT_FEATURES)} of them "
                              f"context), found {self.service_dim}")
        if "features" in d and d["features"] != len(found):
            raise BundleError(f"{where}: dims.features: expected {len(found)} (the columns of "
                              f"feature_spec.candidate), found {d['features']}")
        if self.hidden < 1:
            raise BundleError(f"{where}: dims.hidden: expected an integer >= 1, found {self.hidden}")
        if 2 * self.layers + 2 > len(bundle.weights):
            raise BundleError(f"{where}: dims.layers: {self.layers} hidden layers need {2 * self.layers + 2} "
                              f"arrays, the bundle has {len(bundle.weights)}")
        if si == "flat" and self.service_dim != len(NODE_SPEC):
            raise BundleError(f"{where}: architecture.service_input: 'flat' rows have {len(NODE_SPEC)} columns "
                              f"(policy.graph_features.NODE_SPEC), but dims.service_dim is {self.service_dim}")
        try:
            spec = placement_feature_spec(si, self.service_dim)
            spec.check(found, "feature_spec.candidate")
        except (FeatureSpecError, ValueError) as exc:
            raise BundleError(f"{where}: {exc}") from None
        self.spec = spec
        shapes = mlp_weight_shapes(len(spec), self.hidden, self.layers)
        self.weights: dict[str, np.ndarray] = {}
        for k, shape in shapes.items():
            a = bundle.array(k)
            if a.shape != shape:
                raise BundleError(f"{where}: weights[{k!r}]: expected shape {list(shape)}, found {list(a.shape)}")
            self.weights[k] = np.ascontiguousarray(a, dtype=np.float32)
        self.mean, self.std = bundle.norm("candidate", len(spec))
        self.service_input: str = si
        ev = arch.get("encoder_version")
        if ev is not None and not isinstance(ev, str):
            raise BundleError(f"{where}: architecture.encoder_version: expected text, found {ev!r}")
        self.rows_version = str(ev or (FLAT_ROWS_VERSION if si == "flat" else ""))
        self.temperature = _arch_number(arch, "temperature", 20.0, where, minimum=0.0, strict=True)
        self.intent_gain = _arch_number(arch, "intent_gain", 0.0, where)
        self.extender_weight = int(_arch_number(arch, "extender_weight", EXTENDER_WEIGHT, where, minimum=1,
                                                integer=True))
        if si == "encoder":
            if encoder is None and find_encoder is not None:  # looked up only once the bundle itself is sound
                encoder = find_encoder(self.rows_version)
            if encoder is None:
                from .serving import GraphEncoder

                encoder = GraphEncoder.load()
            enc_src = getattr(getattr(encoder, "bundle", None), "source", "") or "given"
            if self.rows_version and encoder.version != self.rows_version:
                raise BundleError(f"{where}: architecture.encoder_version: expected {self.rows_version!r} (trained "
                                  f"with it), found encoder {encoder.version!r} ({enc_src})")
            if encoder.embedding_dim != self.service_dim:
                raise BundleError(f"{where}: dims.service_dim: expected the encoder's {encoder.embedding_dim} "
                                  f"({enc_src}), found {self.service_dim}")
        self.encoder = encoder
        self.rows = ServiceRowCache(si, encoder, refresh_s)
        self.embedding_source = embedding_source
        #: True when a :class:`RowsRefresher` keeps the rows fresh: requests then use the cached rows however
        #: old and compute only when there are none for the graph (the first request after a change of structure)
        self.background_rows = False
        self.bundle = bundle
        self.version = bundle.policy_version

    @staticmethod
    def load(path: str | Path = DEFAULT_PLACEMENT_BUNDLE, *, encoder: Any = None, refresh_s: float = 300.0,
             embedding_source: Callable[[], Any] | None = None) -> LearnedPlacement:
        """Load the bundle at ``path`` (default: the committed ``policy/bundles/hrl-scheduler/low``). The encoder
        (``encoder`` unless given) is the one the bundle was trained with (:func:`encoder_for`: the same bundles
        root's ``<path>/../../encoder``, as ``make train`` writes it, when it loads and matches, else the committed
        ``policy/bundles/encoder``). Everything is checked here, before serving: raises
        :class:`policy.bundle.BundleError`, one line naming the bundle directory (or the encoder's) and the field."""
        b = PolicyBundle.load(path, level="low", architecture_type=PLACEMENT_ARCH)
        try:
            return LearnedPlacement(b, encoder=encoder, refresh_s=refresh_s, embedding_source=embedding_source,
                                    find_encoder=lambda version: encoder_for(Path(path), version))
        except BundleError as exc:
            raise located(exc, path) from None

    def with_embeddings(self, embedding_source: Callable[[], Any] | None) -> LearnedPlacement:
        """A copy sharing the weights and encoder, reading embeddings from ``embedding_source``."""
        return LearnedPlacement(self.bundle, encoder=self.encoder, refresh_s=self.rows.refresh_s,
                                embedding_source=embedding_source)

    # ---- service rows ----------------------------------------------------------------------------------
    def service_rows(self, index: ClusterIndex, service: str | None = None) -> ServiceRows:
        """The rows to read ``service``'s block from: the embedding source's copy when it has ``service`` and
        was made by this bundle's encoder, else :attr:`rows` for ``index.snapshot``."""
        if self.embedding_source is not None and self.service_input == "encoder":
            try:
                e = self.embedding_source()
            except Exception:  # noqa: BLE001 - a broken source falls back to in-process rows
                e = None
            if (e is not None and getattr(e, "encoder_version", "") == self.rows_version
                    and (service is None or e.row(service) is not None)):
                return e
        if self.background_rows:
            cached = self.rows.peek(index.snapshot)
            if cached is not None:
                return cached
        return self.rows.get(index.snapshot)

    def refresh(self, snapshot: ClusterSnapshot) -> EmbeddingEntry:
        """Compute (if due) and cache the service rows of ``snapshot`` (off the request path)."""
        return self.rows.get(snapshot)

    # ---- PlacementPolicy -------------------------------------------------------------------------------
    def filter(self, pod: PodInfo, candidates: Sequence[str], index: ClusterIndex) -> dict[str, str]:
        """The hard filter: :func:`policy.lowlevel.resource_fit_failures`."""
        return resource_fit_failures(pod, candidates, index)

    def features(self, pod: PodInfo, candidates: Sequence[str], index: ClusterIndex,
                 intent: Sequence[float] | None = None, *, embeddings: Any = None) -> np.ndarray:
        """(C, F) float32 rows of :attr:`spec` (``embeddings``: as :func:`featurize_candidates`; default
        :meth:`service_rows`). Raises ``ValueError`` when the service has no row or the row's width differs."""
        rows = embeddings if embeddings is not None else self.service_rows(index, pod.service)
        x = featurize_candidates(pod, candidates, index, rows, intent)
        if x.shape[1] != len(self.spec):
            raise ValueError(f"features: service row of width {x.shape[1] - len(CONTEXT_FEATURES)}, the bundle "
                             f"expects {self.service_dim}")
        return x

    def logits(self, x: np.ndarray) -> np.ndarray:
        """(C,) float32 pre-sigmoid outputs for feature rows ``x`` (C, F)."""
        return mlp_logits(self.weights, x, self.mean, self.std, self.layers)

    def score(self, pod: PodInfo, candidates: Sequence[str], index: ClusterIndex,
              intent: Sequence[float] | None = None, *, embeddings: Any = None) -> np.ndarray:
        """(C,) float64 in [0, 10] for ``candidates`` (any list, the pod's current node included: the pod is
        then not counted twice). Raises ``ValueError`` when the pod's service has no service row (the extender
        answers neutral scores then)."""
        if not len(candidates):
            return np.zeros(0)
        x = self.features(pod, candidates, index, intent, embeddings=embeddings)
        return scores_from_logits(self.logits(x), x, self.intent_gain)


def encoder_for(bundle_path: Path, version: str = "") -> Any:
    """The :class:`policy.serving.GraphEncoder` a placement bundle at ``bundle_path`` reads embeddings of, looked
    up in this order: ``<bundle_path>/../../encoder`` (the same bundles root, as ``make train`` lays bundles
    out), then the committed ``policy/bundles/encoder``; the first that loads and whose ``policy_version`` is
    ``version`` (any loadable one when ``version`` is empty). A candidate that is absent, does not load or does
    not match is skipped. Raises :class:`policy.bundle.BundleError` naming every encoder path tried and why it
    was not used when none fits."""
    from .serving import DEFAULT_ENCODER_BUNDLE, GraphEncoder

    candidates: list[Path] = []
    for c in (Path(bundle_path).resolve().parent.parent / "encoder", Path(DEFAULT_ENCODER_BUNDLE).resolve()):
        if c not in candidates:
            candidates.append(c)
    tried = []
    for c in candidates:
        if not (c / "manifest.json").exists():
            tried.append(f"{c}: absent")
            continue
        try:
            enc = GraphEncoder.load(c)
        except BundleError as exc:
            tried.append(str(located(exc, c)))
            continue
        if not version or enc.version == version:
            return enc
        tried.append(f"{c}: policy_version {enc.version!r}")
    want = f"the encoder {version!r} it was trained with (architecture.encoder_version)" if version else "an encoder"
    raise BundleError(f"placement bundle {bundle_path}: no usable encoder bundle: expected {want}; tried "
                      f"{'; '.join(tried)}")


def _arch_number(arch: Mapping[str, Any], key: str, default: float, where: str, *, minimum: float | None = None,
                 strict: bool = False, integer: bool = False) -> float:
    """``architecture[key]`` (``default`` when absent) as a finite number (an integer when ``integer``) >=
    ``minimum`` (> when ``strict``); raises :class:`BundleError` naming the field otherwise (null included)."""
    if key not in arch:
        return float(default)
    v = arch[key]
    ok = (isinstance(v, int) if integer else isinstance(v, (int, float))) and not isinstance(v, bool)
    if ok and -1e300 < v < 1e300 and (minimum is None or (v > minimum if strict else v >= minimum)):
        return float(v)
    kind = "an integer" if integer else "a finite number"
    bound = "" if minimum is None else f" {'>' if strict else '>='} {minimum:g}"
    raise BundleError(f"{where}: architecture.{key}: expected {kind}{bound} (or absent: {default:g}), found {v!r}")


class RowsRefresher:
    """A daemon thread calling ``policy.refresh(get_snapshot())`` every ``interval_s`` seconds, so that
    :class:`LearnedPlacement` computes service rows off the request path (the extender without an embedding
    cache). Errors are logged and retried at the next tick."""

    def __init__(self, policy: LearnedPlacement, get_snapshot: Callable[[], ClusterSnapshot | None],
                 interval_s: float = 30.0):
        self.policy = policy
        self.get_snapshot = get_snapshot
        self.interval_s = float(interval_s)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.runs = 0

    def tick(self) -> None:
        snap = self.get_snapshot()
        if snap is None or not snap.graph.services:
            return
        try:
            self.policy.refresh(snap)
            self.runs += 1
        except Exception as exc:  # noqa: BLE001 - keep serving with the last rows
            log.warning("placement: cannot compute service rows: %s: %s", type(exc).__name__, exc)

    def start(self) -> RowsRefresher:
        def loop() -> None:
            while not self._stop.is_set():
                t0 = time.monotonic()
                self.tick()
                self._stop.wait(max(0.05, self.interval_s - (time.monotonic() - t0)))

        self.policy.background_rows = True
        self._thread = threading.Thread(target=loop, name="placement-rows", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 2.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._thread = None
