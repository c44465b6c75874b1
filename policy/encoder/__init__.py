"""The topology encoder in numpy: the call graph's features (:mod:`.graph`) and the graph neural network that
turns them into per-service embeddings (:mod:`.mpnn`, served from a bundle; trained in :mod:`policy.train.encoder`).
"""

from .graph import (
    EDGE_SPEC,
    NODE_SPEC,
    GraphArrays,
    ServiceStats,
    colocation_from_snapshot,
    featurize_graph,
    stats_from_snapshot,
)
from .mpnn import DEFAULT_ENCODER_BUNDLE, ENCODER_ARCH, EncodedGraph, GraphEncoder, encoder_weight_shapes, segment_mean

__all__ = [
    "NODE_SPEC",
    "EDGE_SPEC",
    "ServiceStats",
    "GraphArrays",
    "featurize_graph",
    "stats_from_snapshot",
    "colocation_from_snapshot",
    "ENCODER_ARCH",
    "DEFAULT_ENCODER_BUNDLE",
    "encoder_weight_shapes",
    "segment_mean",
    "GraphEncoder",
    "EncodedGraph",
]
