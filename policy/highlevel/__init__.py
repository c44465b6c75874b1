"""The high level: what should change in the cluster this period, and what intent goes down to the low level
(numpy only; served by the descheduler and run by the simulator; no torch, no simulator).

- :mod:`.interface`: the :class:`HighLevelPolicy` contract (``plan(snapshot, index, placement) -> Plan``);
- :mod:`.rebalance`: :class:`RebalanceHeuristic` and the greedy move selection every planner shares;
- :mod:`.hierarchy`: :class:`HierarchicalPolicy`: replica targets + moves + intent, every period;
- :mod:`.move_cost`: :class:`MoveCostModel`: a move's predicted gain and cost in the objective's units;
- :mod:`.planner_state`: :class:`HrlState`, what the hierarchy keeps between periods (JSON);
- :mod:`.intent`: the intent policies;
- :mod:`.learned_intent`: :class:`LearnedIntent`, the learned intent actor served from a bundle;
- :mod:`.ensemble`: :class:`IntentEnsemble`, several learned high levels (training seeds) serving their mean intent;
- :mod:`.autoscale`: replica targets (the stand-in, the DRPC students with their guardrails);
- :mod:`.drpc`: DRPC's per-deployment student actors in numpy (arXiv 2407.10169);
- :mod:`.forecast`: the workload predictors (DRPC's GRU, the trend stand-in).
"""

from .autoscale import (
    DrpcReplicaAutoscaler,
    IntentAutoscaler,
    ReplicaAutoscaler,
    UtilizationTargetAutoscaler,
    load_learned_autoscaler,
    pods_of_workload,
)
from .drpc import (
    DEFAULT_DRPC_BUNDLE,
    DEFAULT_HRL_HIGH_BUNDLE,
    DRPC_SPEC,
    EMBEDDING_DIM,
    HRL_SPEC,
    SPECS,
    STUDENT_ARCH,
    ActionMapping,
    DrpcAutoscaler,
    DrpcFeaturizer,
    DrpcObservation,
    DrpcState,
    ServiceSignals,
    StudentActor,
    structural_embeddings,
    student_weight_shapes,
)
from .ensemble import IntentEnsemble, load_intent_policy, mean_intent
from .feasibility import DEFAULT_PLUGIN_WEIGHTS, SYSTEM_DEFAULT_SPREAD, SchedulerModel
from .forecast import (
    EPS_RPS,
    FORECAST_ARCH,
    FORECAST_SPEC,
    Forecaster,
    GruForecaster,
    TrendForecaster,
    forecast_errors,
    forecast_factor,
    forecast_weight_shapes,
    naive_forecast,
    normalize_windows,
    rate_history,
)
from .hierarchy import HierarchicalPolicy, due
from .intent import FixedIntent, Intent, IntentPolicy, UtilizationIntent, as_intent, cluster_cpu_utilization
from .interface import (
    SYSTEM_CRITICAL_CLASSES,
    SYSTEM_CRITICAL_PRIORITY,
    Admission,
    GatedPlanner,
    HighLevelPolicy,
    MoveGate,
    default_intent,
    node_cpu_utilization,
    structurally_movable,
)
from .learned_intent import (
    CAPACITY_RANGE,
    COLOCATION_MAX,
    DEFAULT_CPU_PRICE,
    INTENT_ARCH,
    INTENT_GLOBAL_SPEC,
    INTENT_SERVICE_EXTRA,
    INTENT_SERVICE_SPEC,
    INTENT_SERVICE_SPEC_FLAT,
    WEIGHT_MAX,
    IntentActor,
    IntentFeaturizer,
    IntentObservation,
    LearnedIntent,
    intent_from_outputs,
    intent_weight_shapes,
)
from .move_cost import LOAD_FACTOR_SOURCE, MoveCostModel, MoveEconomics, TrafficModel, app_use_by_node, traffic_of
from .planner_state import STATE_VERSION, HrlState, service_rates_rps
from .rebalance import (
    PlanView,
    Proposal,
    RebalanceHeuristic,
    admissible_positions,
    finite_scores,
    greedy_moves,
    planner_accepts_gate,
    util_after_add,
)
from .resize import ResizePlanner

__all__ = [
    "HighLevelPolicy",
    "GatedPlanner",
    "MoveGate",
    "Admission",
    "default_intent",
    "structurally_movable",
    "node_cpu_utilization",
    "SYSTEM_CRITICAL_PRIORITY",
    "SYSTEM_CRITICAL_CLASSES",
    "RebalanceHeuristic",
    "PlanView",
    "Proposal",
    "greedy_moves",
    "planner_accepts_gate",
    "admissible_positions",
    "finite_scores",
    "util_after_add",
    "STATE_VERSION",
    "HrlState",
    "service_rates_rps",
    "FORECAST_ARCH",
    "FORECAST_SPEC",
    "EPS_RPS",
    "GruForecaster",
    "forecast_weight_shapes",
    "normalize_windows",
    "naive_forecast",
    "forecast_errors",
    "rate_history",
    "Forecaster",
    "TrendForecaster",
    "forecast_factor",
    "Intent",
    "as_intent",
    "IntentPolicy",
    "UtilizationIntent",
    "FixedIntent",
    "cluster_cpu_utilization",
    "STUDENT_ARCH",
    "DRPC_SPEC",
    "HRL_SPEC",
    "EMBEDDING_DIM",
    "SPECS",
    "DEFAULT_DRPC_BUNDLE",
    "DEFAULT_HRL_HIGH_BUNDLE",
    "ActionMapping",
    "ServiceSignals",
    "DrpcState",
    "DrpcObservation",
    "DrpcFeaturizer",
    "StudentActor",
    "DrpcAutoscaler",
    "structural_embeddings",
    "student_weight_shapes",
    "ReplicaAutoscaler",
    "UtilizationTargetAutoscaler",
    "pods_of_workload",
    "load_learned_autoscaler",
    "DrpcReplicaAutoscaler",
    "IntentAutoscaler",
    "HierarchicalPolicy",
    "due",
    "SchedulerModel",
    "DEFAULT_PLUGIN_WEIGHTS",
    "SYSTEM_DEFAULT_SPREAD",
    "INTENT_ARCH",
    "INTENT_SERVICE_EXTRA",
    "INTENT_SERVICE_SPEC",
    "INTENT_SERVICE_SPEC_FLAT",
    "INTENT_GLOBAL_SPEC",
    "CAPACITY_RANGE",
    "COLOCATION_MAX",
    "WEIGHT_MAX",
    "DEFAULT_CPU_PRICE",
    "IntentObservation",
    "IntentFeaturizer",
    "intent_weight_shapes",
    "IntentActor",
    "intent_from_outputs",
    "LearnedIntent",
    "IntentEnsemble",
    "load_intent_policy",
    "mean_intent",
    "ResizePlanner",
    "MoveCostModel",
    "MoveEconomics",
    "TrafficModel",
    "traffic_of",
    "app_use_by_node",
    "LOAD_FACTOR_SOURCE",
]
