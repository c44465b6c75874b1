"""numpy-only inference built from policy bundles (DESIGN.md section 7): no torch here, ever.

The graph encoder (:class:`GraphEncoder`) runs off the request path (in the descheduler job, or whoever fills
the embedding cache) and turns a call graph into per-service embeddings. Its network, ``mpnn-v1``, is a
message-passing neural network over the directed call graph (in the family of Gilmer et al., "Neural
Message Passing for Quantum Chemistry", ICML 2017, with edge features as in their edge network, and
separate aggregation of the two directions as in relational GNNs, Schlichtkrull et al. 2018)::

    x̂ = (x - μ_x) / σ_x,  ê = (e - μ_e) / σ_e                (normalisation stored in the bundle)
    h⁰ = relu(W_in x̂ + b_in)                                    (N, H)
    for l in 1..L:
        m_in[k]  = relu(A_in h[caller_k] + B_in ê_k + c_in)      message k along caller → callee
        m_out[k] = relu(A_out h[callee_k] + B_out ê_k + c_out)   message k back to the caller
        a_in  = mean of m_in over each service's incoming calls   (0 without callers)
        a_out = mean of m_out over each service's outgoing calls  (0 without callees)
        h ← h + relu(S h + b_S + U_in a_in + U_out a_out)       (residual)
    z = W_out h + b_out                                          (N, D) the embeddings
    ŷ = W_2 relu(W_1 z + b_1) + b_2                              (N, T) pre-training heads (σ_y ŷ + μ_y)

Weights are named like the torch ``state_dict`` of :class:`policy.nn.GraphEncoderNet` (``input.weight``,
``layers.0.msg_in_node.weight``, ...), so export is a copy and the parity test compares the two to 1e-5.
Aggregation uses numpy only: edges are sorted once by target and summed with ``np.add.reduceat``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

from policy.bundle import DEFAULT_BUNDLES, BundleError, PolicyBundle
from policy.features import FeatureSpecError, check_specs
from policy.state import ServiceGraph

from .graph import EDGE_SPEC, NODE_SPEC, GraphArrays, ServiceStats, featurize_graph

__all__ = [
    "ENCODER_ARCH",
    "DEFAULT_ENCODER_BUNDLE",
    "encoder_weight_shapes",
    "segment_mean",
    "GraphEncoder",
    "EncodedGraph",
]

ENCODER_ARCH = "mpnn-v1"
DEFAULT_ENCODER_BUNDLE = DEFAULT_BUNDLES / "encoder"


def encoder_weight_shapes(
    node_features: int, edge_features: int, hidden: int, embedding: int, layers: int, head_hidden: int, targets: int
) -> dict[str, tuple[int, ...]]:
    """Every weight of ``mpnn-v1`` and its shape (torch ``Linear`` layout: ``weight`` is (out, in))."""
    H = hidden
    s: dict[str, tuple[int, ...]] = {"input.weight": (H, node_features), "input.bias": (H,)}
    for i in range(layers):
        p = f"layers.{i}."
        s.update(
            {
                p + "msg_in_node.weight": (H, H),
                p + "msg_in_edge.weight": (H, edge_features),
                p + "msg_in_edge.bias": (H,),
                p + "msg_out_node.weight": (H, H),
                p + "msg_out_edge.weight": (H, edge_features),
                p + "msg_out_edge.bias": (H,),
                p + "self.weight": (H, H),
                p + "self.bias": (H,),
                p + "upd_in.weight": (H, H),
                p + "upd_out.weight": (H, H),
            }
        )
    s.update({"output.weight": (embedding, H), "output.bias": (embedding,)})
    if targets:
        s.update(
            {
                "head.0.weight": (head_hidden, embedding),
                "head.0.bias": (head_hidden,),
                "head.2.weight": (targets, head_hidden),
                "head.2.bias": (targets,),
            }
        )
    return s


class _Segments(NamedTuple):
    order: np.ndarray  # (E,) edge order sorted by target
    starts: np.ndarray  # (K,) start of each non-empty segment in the sorted order
    rows: np.ndarray  # (K,) target row of each non-empty segment
    inv_count: np.ndarray  # (N, 1) float32 1/count (0 where no edge)


def _segments(index: np.ndarray, n: int) -> _Segments:
    order = np.argsort(index, kind="stable")
    counts = np.bincount(index, minlength=n)
    rows = np.flatnonzero(counts)
    starts = (np.cumsum(counts) - counts)[rows]
    inv = np.where(counts > 0, 1.0 / np.maximum(counts, 1), 0.0).astype(np.float32)[:, None]
    return _Segments(order, starts, rows, inv)


def segment_mean(values: np.ndarray, index: np.ndarray, n: int, seg: _Segments | None = None) -> np.ndarray:
    """Mean of the rows of ``values`` (E, H) grouped by ``index`` (E,) int into ``n`` rows; rows without any
    edge are 0. ``seg``: a precomputed grouping (internal)."""
    seg = seg or _segments(index, n)
    out = np.zeros((n, values.shape[1]), dtype=values.dtype)
    if len(seg.rows):
        out[seg.rows] = np.add.reduceat(values[seg.order], seg.starts, axis=0)
    return out * seg.inv_count


def _relu(a: np.ndarray) -> np.ndarray:
    return np.maximum(a, 0, out=a)


class EncodedGraph(NamedTuple):
    """The encoder's output for one graph: ``services`` (N,) row names, ``embeddings`` (N, D) float32,
    ``duration_s`` wall time of featurize + encode."""

    services: tuple[str, ...]
    embeddings: np.ndarray
    duration_s: float


class GraphEncoder:
    """The ``mpnn-v1`` graph encoder in numpy, built from an encoder bundle (``level: encoder``).

    Raises :class:`~policy.bundle.BundleError` when the bundle is of another level or architecture, its
    feature specification differs from :data:`~policy.encoder.graph.NODE_SPEC` /
    :data:`~policy.encoder.graph.EDGE_SPEC`, or a weight is missing or misshapen.
    """

    def __init__(self, bundle: PolicyBundle):
        where = f"encoder bundle {bundle.policy_version}"
        if bundle.level != "encoder":
            raise BundleError(f"{where}: level: expected 'encoder', found {bundle.level!r}")
        if bundle.architecture.get("type") != ENCODER_ARCH:
            raise BundleError(
                f"{where}: architecture.type: expected {ENCODER_ARCH!r}, found {bundle.architecture.get('type')!r}"
            )

        try:
            check_specs({"node": NODE_SPEC, "edge": EDGE_SPEC}, dict(bundle.feature_spec))
        except FeatureSpecError as exc:
            raise BundleError(f"{where}: {exc}") from None
        d = bundle.dims
        try:
            self.hidden, self.embedding_dim, self.layers = d["hidden"], d["embedding"], d["layers"]
            self.head_hidden, self.targets = d.get("head_hidden", 0), d.get("targets", 0)
        except KeyError as exc:
            raise BundleError(f"{where}: dims: missing {exc.args[0]!r}") from None
        shapes = encoder_weight_shapes(
            len(NODE_SPEC), len(EDGE_SPEC), self.hidden, self.embedding_dim, self.layers, self.head_hidden, self.targets
        )
        self.w: dict[str, np.ndarray] = {}
        for k, shape in shapes.items():
            a = bundle.array(k)
            if a.shape != shape:
                raise BundleError(f"{where}: weights[{k!r}]: expected shape {list(shape)}, found {list(a.shape)}")
            # pre-transpose matrices once: x @ W.T
            self.w[k] = np.ascontiguousarray(a.T if a.ndim == 2 else a, dtype=np.float32)
        self.node_mean, self.node_std = bundle.norm("node", len(NODE_SPEC))
        self.edge_mean, self.edge_std = bundle.norm("edge", len(EDGE_SPEC))
        self.target_mean, self.target_std = bundle.norm("targets", self.targets)
        self.target_names = tuple(bundle.metadata.get("target_names", ()))
        self.bundle = bundle
        self.version = bundle.policy_version

    @staticmethod
    def load(path: str | Path = DEFAULT_ENCODER_BUNDLE) -> GraphEncoder:
        """Load the encoder bundle at ``path`` (default: the committed ``policy/bundles/encoder``)."""
        return GraphEncoder(
            PolicyBundle.load(
                path,
                level="encoder",
                feature_spec={"node": NODE_SPEC, "edge": EDGE_SPEC},
                architecture_type=ENCODER_ARCH,
            )
        )

    # ---- forward -----------------------------------------------------------------------------------
    def _hidden(self, arrays: GraphArrays) -> np.ndarray:
        w = self.w
        n = arrays.x.shape[0]
        x = np.asarray(arrays.x, np.float32)
        ei = np.asarray(arrays.edge_index, np.int64).reshape(2, -1)
        e = np.asarray(arrays.edge_attr, np.float32)
        if x.ndim != 2 or x.shape[1] != len(NODE_SPEC) or e.shape != (ei.shape[1], len(EDGE_SPEC)):
            raise ValueError(
                f"arrays: expected x (N, {len(NODE_SPEC)}) and edge_attr ({ei.shape[1]}, "
                f"{len(EDGE_SPEC)}), got {x.shape} and {e.shape}"
            )
        x = (x - self.node_mean) / self.node_std
        e = (e - self.edge_mean) / self.edge_std
        if ei.size and (ei.min() < 0 or ei.max() >= n):
            raise ValueError(f"edge_index: rows must be in 0..{n - 1}, got {ei.min()}..{ei.max()}")
        src, dst = ei[0], ei[1]
        seg_in, seg_out = _segments(dst, n), _segments(src, n)
        h = _relu(x @ w["input.weight"] + w["input.bias"])
        for i in range(self.layers):
            p = f"layers.{i}."
            m_in = _relu(
                (h @ w[p + "msg_in_node.weight"])[src] + (e @ w[p + "msg_in_edge.weight"] + w[p + "msg_in_edge.bias"])
            )
            a_in = segment_mean(m_in, dst, n, seg_in)
            m_out = _relu(
                (h @ w[p + "msg_out_node.weight"])[dst]
                + (e @ w[p + "msg_out_edge.weight"] + w[p + "msg_out_edge.bias"])
            )
            a_out = segment_mean(m_out, src, n, seg_out)
            upd = (
                h @ w[p + "self.weight"]
                + w[p + "self.bias"]
                + a_in @ w[p + "upd_in.weight"]
                + a_out @ w[p + "upd_out.weight"]
            )
            h = h + _relu(upd)
        return h

    def encode(self, arrays: GraphArrays) -> np.ndarray:
        """(N, D) float32 embeddings of the services of ``arrays`` (rows in ``arrays.services`` order).
        Raises ``ValueError`` for arrays of the wrong width or edge rows out of range."""
        h = self._hidden(arrays)
        return (h @ self.w["output.weight"] + self.w["output.bias"]).astype(np.float32, copy=False)

    def predict_from_embeddings(self, z: np.ndarray) -> np.ndarray:
        """(N, T) float32 pre-training predictions (target units, see ``metadata.target_names``) from
        embeddings ``z`` (N, D). Raises ``ValueError`` when the bundle has no heads."""
        if not self.targets:
            raise ValueError(f"encoder bundle {self.version} has no prediction heads")
        w = self.w
        a = _relu(z @ w["head.0.weight"] + w["head.0.bias"])
        y = a @ w["head.2.weight"] + w["head.2.bias"]
        return (y * self.target_std + self.target_mean).astype(np.float32, copy=False)

    def predict(self, arrays: GraphArrays) -> np.ndarray:
        """:meth:`encode` then :meth:`predict_from_embeddings`."""
        return self.predict_from_embeddings(self.encode(arrays))

    def encode_graph(
        self,
        graph: ServiceGraph,
        stats: dict[str, ServiceStats] | None = None,
        same_node_share: dict[tuple[str, str], float] | None = None,
    ) -> EncodedGraph:
        """Featurize (:func:`~policy.encoder.graph.featurize_graph`) and encode ``graph``; timed."""
        t0 = time.perf_counter()
        arrays = featurize_graph(graph, stats, same_node_share)
        z = self.encode(arrays)
        return EncodedGraph(arrays.services, z, time.perf_counter() - t0)
