"""The low level: where should this pod go? Served by the extender on every scheduling cycle, and called by
the simulator and the descheduler's feasibility check (numpy only; no torch, no simulator).

- :mod:`.interface`: the :class:`PlacementPolicy` contract, the intent vector's layout (:data:`INTENT_SPEC`),
  and the kube-scheduler rules we mirror (:func:`node_admits`, :func:`resource_fit_failures`);
- :mod:`.heuristic`: :class:`TopologyHeuristic`, the hand-written scorer;
- :mod:`.features`: the learned scorer's input, one row per (pod, candidate node);
- :mod:`.rows`: the per-service block of that input (embeddings), computed off the request path;
- :mod:`.learned`: :class:`LearnedPlacement`, the learned scorer served from a bundle;
- :mod:`.ensemble`: :class:`PlacementEnsemble`, several learned scorers (training seeds) served as one;
- :mod:`.precomputed`: :class:`NodeScoreTable`, every node's score per (service, requests), computed off the
  request path so that a request is a gather;
- :mod:`.scoretable`: :func:`build_score_table`, the same split into a base and a per-pod load term, for the
  kube-scheduler plugin (scheduler-plugin/), and :func:`apply_load_term`, the plugin's arithmetic.
"""

from .ensemble import MemberRows, PlacementEnsemble, load_placement
from .features import (
    CONTEXT_FEATURES,
    CONTEXT_FEATURES_V1,
    CONTEXT_FEATURES_V2,
    CONTEXT_LAYOUTS,
    FLAT_ROWS_VERSION,
    PLACEMENT_FEATURES,
    PLACEMENT_FEATURES_FLAT,
    PLACEMENT_INTENTS,
    SERVICE_INPUTS,
    featurize_candidates,
    node_cpu_used_m,
    placement_feature_spec,
)
from .heuristic import TopologyHeuristic, neighbor_weights
from .interface import (
    COLOCATION_PREFIX,
    INTENT_SPEC,
    MAX_EXTENDER_PRIORITY,
    TAINT_EFFECTS_THAT_REPEL,
    PlacementPolicy,
    admission_mask,
    intent_value,
    node_admits,
    resource_fit_failures,
)
from .learned import (
    DEFAULT_FLAT_PLACEMENT_BUNDLE,
    DEFAULT_PLACEMENT_BUNDLE,
    EXTENDER_WEIGHT,
    PLACEMENT_ARCH,
    LearnedPlacement,
    encoder_for,
    intent_adjustment,
    load_learned_placement,
    mlp_logits,
    mlp_weight_shapes,
    saturation_factor,
    scores_from_logits,
    served_totals,
)
from .precomputed import NodeScoreTable, ScoreKey, score_key
from .rows import RowsRefresher, ServiceRowCache, ServiceRows, compute_service_rows
from .scoretable import (
    ANY_REQUESTS,
    TablePolicy,
    apply_load_term,
    build_score_table,
    scheduler_requested_cpu_m,
    table_keys,
)

__all__ = [
    "MAX_EXTENDER_PRIORITY",
    "INTENT_SPEC",
    "intent_value",
    "COLOCATION_PREFIX",
    "PlacementPolicy",
    "TAINT_EFFECTS_THAT_REPEL",
    "node_admits",
    "resource_fit_failures",
    "admission_mask",
    "TopologyHeuristic",
    "PlacementEnsemble",
    "MemberRows",
    "load_placement",
    "neighbor_weights",
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
    "ServiceRows",
    "compute_service_rows",
    "ServiceRowCache",
    "RowsRefresher",
    "PLACEMENT_ARCH",
    "DEFAULT_PLACEMENT_BUNDLE",
    "DEFAULT_FLAT_PLACEMENT_BUNDLE",
    "EXTENDER_WEIGHT",
    "mlp_weight_shapes",
    "mlp_logits",
    "intent_adjustment",
    "saturation_factor",
    "scores_from_logits",
    "served_totals",
    "LearnedPlacement",
    "encoder_for",
    "load_learned_placement",
    "ScoreKey",
    "score_key",
    "NodeScoreTable",
    "ANY_REQUESTS",
    "TablePolicy",
    "apply_load_term",
    "scheduler_requested_cpu_m",
    "table_keys",
    "build_score_table",
]
