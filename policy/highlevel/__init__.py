"""The high level: what should change in the cluster this period, and what intent goes down to the low level
(numpy only; served by the descheduler and run by the simulator; no torch, no simulator).

- :mod:`.interface`: the :class:`HighLevelPolicy` contract (``plan(snapshot, index, placement) -> Plan``);
- :mod:`.rebalance`: :class:`RebalanceHeuristic` and the greedy move selection every planner shares;
- :mod:`.hierarchy`: :class:`HierarchicalPolicy`: replica targets + moves + intent, every period;
- :mod:`.planner_state`: :class:`HrlState`, what the hierarchy keeps between periods (JSON);
- :mod:`.intent`: the intent policies;
- :mod:`.autoscale`: replica targets (the stand-in, the DRPC students with their guardrails);
- :mod:`.drpc`: DRPC's per-deployment student actors in numpy (arXiv 2407.10169);
- :mod:`.forecast`: the workload predictors (DRPC's GRU, the trend stand-in).
"""

from .interface import HighLevelPolicy, default_intent, structurally_movable, node_cpu_utilization, SYSTEM_CRITICAL_PRIORITY, SYSTEM_CRITICAL_CLASSES
from .rebalance import RebalanceHeuristic, PlanView, Proposal, greedy_moves, finite_scores, util_after_add
from .planner_state import STATE_VERSION, HrlState, service_rates_rps
from .forecast import FORECAST_ARCH, FORECAST_SPEC, EPS_RPS, GruForecaster, forecast_weight_shapes, normalize_windows, naive_forecast, forecast_errors, rate_history, Forecaster, TrendForecaster, forecast_factor
from .intent import IntentPolicy, UtilizationIntent, FixedIntent, cluster_cpu_utilization
from .drpc import STUDENT_ARCH, DRPC_SPEC, HRL_SPEC, EMBEDDING_DIM, SPECS, DEFAULT_DRPC_BUNDLE, DEFAULT_HRL_HIGH_BUNDLE, ActionMapping, ServiceSignals, DrpcState, DrpcObservation, DrpcFeaturizer, StudentActor, DrpcAutoscaler, structural_embeddings, student_weight_shapes
from .autoscale import ReplicaAutoscaler, UtilizationTargetAutoscaler, pods_of_workload, load_learned_autoscaler, DrpcReplicaAutoscaler
from .hierarchy import HierarchicalPolicy, due

__all__ = ["HighLevelPolicy", "default_intent", "structurally_movable", "node_cpu_utilization", "SYSTEM_CRITICAL_PRIORITY", "SYSTEM_CRITICAL_CLASSES", "RebalanceHeuristic", "PlanView", "Proposal", "greedy_moves", "finite_scores", "util_after_add", "STATE_VERSION", "HrlState", "service_rates_rps", "FORECAST_ARCH", "FORECAST_SPEC", "EPS_RPS", "GruForecaster", "forecast_weight_shapes", "normalize_windows", "naive_forecast", "forecast_errors", "rate_history", "Forecaster", "TrendForecaster", "forecast_factor", "IntentPolicy", "UtilizationIntent", "FixedIntent", "cluster_cpu_utilization", "STUDENT_ARCH", "DRPC_SPEC", "HRL_SPEC", "EMBEDDING_DIM", "SPECS", "DEFAULT_DRPC_BUNDLE", "DEFAULT_HRL_HIGH_BUNDLE", "ActionMapping", "ServiceSignals", "DrpcState", "DrpcObservation", "DrpcFeaturizer", "StudentActor", "DrpcAutoscaler", "structural_embeddings", "student_weight_shapes", "ReplicaAutoscaler", "UtilizationTargetAutoscaler", "pods_of_workload", "load_learned_autoscaler", "DrpcReplicaAutoscaler", "HierarchicalPolicy", "due"]
