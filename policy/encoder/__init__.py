"""The topology encoder in numpy: the call graph's features (:mod:`.graph`) and the graph neural network that
turns them into per-service embeddings (:mod:`.mpnn`, served from a bundle; trained in :mod:`policy.train.encoder`).
"""

from .graph import NODE_SPEC, EDGE_SPEC, ServiceStats, GraphArrays, featurize_graph, stats_from_snapshot, colocation_from_snapshot
from .mpnn import ENCODER_ARCH, DEFAULT_ENCODER_BUNDLE, encoder_weight_shapes, segment_mean, GraphEncoder, EncodedGraph

__all__ = ["NODE_SPEC", "EDGE_SPEC", "ServiceStats", "GraphArrays", "featurize_graph", "stats_from_snapshot", "colocation_from_snapshot", "ENCODER_ARCH", "DEFAULT_ENCODER_BUNDLE", "encoder_weight_shapes", "segment_mean", "GraphEncoder", "EncodedGraph"]
