"""The descheduler's configuration file (``kind: DeschedulerConfiguration``).

Every field is optional; the defaults below are what an empty file (or no ``--config``) gives::

    apiVersion: hrl-scheduler.io/v1alpha1
    kind: DeschedulerConfiguration
    dryRun: false                 # evict nothing, report what would be evicted (same code path)
    shadow:                       # dry runs only (shadow mode, descheduler/shadow.py): where each evicted pod would
      log: null                   #   land, the predicted effect and why, one JSON line per cycle to this file
      maxBytes: 67108864          #   (null: printed only); the file rotates at maxBytes, keeping `backups` old ones
      backups: 3
    intervalSeconds: 300          # period of --interval mode when the command line gives none
    caps:                         # evictions per cycle; null = unlimited, 0 = none
      perNode: 2                  #   from any one node
      perNamespace: 5             #   in any one namespace
      total: 10                   #   in all
    excludedNamespaces: [kube-system]
    evictLocalStoragePods: false  # pods with emptyDir / hostPath / local PersistentVolumes stay
    cooldownSeconds: 1800         # a workload evicted from node N is not evicted from N again for this long
    loopDetection:                # a workload whose pod comes back to a node it was evicted from is put on hold
      windowSeconds: 3600         #   evictions remembered this long for the check (0 = off)
      holdSeconds: 3600           #   no move of that workload for this long (metric + Warning Event)
    schedulerPrediction:          # predict where kube-scheduler puts the replacement; no move it would undo
      enabled: true
      extenderWeight: 2           #   the extender's weight in the KubeSchedulerConfiguration (manifests: 2)
      extenderSchedulers: [hrl-scheduler]  # schedulerName values whose profile calls our extender
    events: true                  # a Kubernetes Event (events.k8s.io/v1) per eviction, scale and loop hold
    stateFile: null               # JSON file keeping the eviction history across runs (CronJob mode)
    planner:
      name: rebalance-heuristic   # or hierarchical (policy.highlevel.HierarchicalPolicy)
      overloadThreshold: 0.85     # CPU utilisation fraction of allocatable
      localityMargin: 1.0         # score points (0..10) a target must beat the current node by
      minPairRps: 0.0             # call rate below which a caller/callee pair is not "chatty"
      defaultRps: 1.0             # rate assumed for a dependency without a measured rate
      maxMovesPerService: 1
      maxMoves: 50
      minServingPods: 2           # hierarchical: move a pod only while its service has this many bound pods
      intent: null                # [locality_weight, balance_weight], two finite numbers >= 0; null = defaults
                                  #   (hierarchical: computed by intentPolicy)
      # hierarchical only:
      rebalance: true             # plan moves (false: replica targets and intent only)
      movesPeriodSeconds: 0       # plan moves at most once per such window (0 = every cycle)
      scalePeriodSeconds: 0       # plan replica targets at most once per such window (0 = every cycle)
      autoscaler:                 # null = no replica targets
        name: utilization-target  # or drpc (the learned students; bundle below), or intent (carries out the
                                  #   learned high level's capacity targets; targetUtilization when it names none)
        bundle: null              # drpc only: bundle directory; null = policy/bundles/hrl-scheduler/high
        targetUtilization: 0.6    # utilization-target: CPU use / requests aimed at
        tolerance: null           # no change while the need is within this fraction of the replicas; null = the
                                  #   autoscaler's own (utilization-target 0.1, intent 0.05); drpc: refused
        stabilizationSeconds: null  # scale-downs held this long (drpc: after the saturation shield); null = the
                                  #   autoscaler's own (utilization-target and drpc 300, intent 180)
        workloads: null           # [namespace/name, ...] the only Deployments scaled; null = all
      intentPolicy:               # where the intent comes from:
        name: utilization         #   utilization: cluster utilisation (x forecast) -> [locality_weight, balance_weight]
                                  #   learned: the trained high level (bundle below), once per periodSeconds
        bundle: null              # learned only: directory with intent/ and predictor/ (or an ensemble of such);
                                  #   null = policy/bundles/hrl-ensemble/high (the training seeds' high levels)
        periodSeconds: 300        # learned only: how often the intent is recomputed (it holds in between)
        cpuPrice: 0.5             # learned only: the price of CPU the policy trades latency against
        sloP95Ms: null            # learned only: the application's p95 SLO (ms); null = latency unknown
        lowUtilization: 0.3
        highUtilization: 0.8
        localityMax: 1.5
        localityMin: 0.75
        balanceMin: 0.5
        balanceMax: 2.0
        smoothing: 0.5
    placement:                    # the low-level policy the planner scores with (as the extender's)
      name: topology-heuristic    # or learned (policy.lowlevel.LearnedPlacement)
      bundle: null                # learned only: bundle (or ensemble) directory; null = policy/bundles/hrl-ensemble/low
      targetUtilization: 0.7      # topology-heuristic only
    scaling:                      # applying the plan's replica targets (deployments/scale)
      enabled: true               # false: report the targets, scale nothing
      minReplicas: 1
      maxReplicas: 10
      maxStepPerCycle: 4          # replicas added or removed per Deployment per cycle; null = no cap
    moves:                        # how a planned move is made (descheduler/surge.py; DESIGN.md section 5)
      strategy: surge             # surge: make-before-break (scale the Deployment up by one, the new pod on the
                                  #   target, then the old pod goes by a scale-down) | evict: the Eviction API only
      fallback: evict             # where a surge is not possible (an HPA owns the replicas, a PodDisruptionBudget or
                                  #   a ResourceQuota forbids it, not a Deployment, scaling off): evict | skip
      steerDelaySeconds: 15       # the scale-up waits this long after the move is announced to the extender
                                  #   (its cache.refreshSeconds, 10 by default, + margin); 0 = in the same cycle
      surgeTimeoutSeconds: 600    # abort a surge whose new pod is not Ready on the target by then (> one cycle)
      maxPending: 10              # surges in progress at once
      costModel:                  # a move is made only when its predicted gain exceeds its predicted cost
        enabled: true             #   (policy/highlevel/move_cost.py: the objective's units)
        sloP95Ms: null            #   the latency unit; null = planner.intentPolicy.sloP95Ms, else 100
        horizonSeconds: 600       #   how long a new placement is expected to last
        overlapSeconds: null      #   how long the surge pod runs next to the old one; null = intervalSeconds
        startupSeconds: 20        #   a replacement's time to Ready (the eviction path's outage of a lone pod)
        cpuPrice: 0.5             #   the objective's price of CPU
        cpuReferenceCores: null   #   C0; null = the CPU requests of the call graph's pods
        failedWeight: 100         #   the objective's weight of the failed share
        sameZoneCallMs: 0.45      #   network delay a call saves by sharing a node (within a zone)
        crossZoneCallMs: 1.95     #   ... across zones
        loadFactor: 2.05          #   nodes' utilisation judged at this multiple of the current load
        minNetGain: 0.0           #   the net gain (objective units) a move must exceed
    resize:                       # in-place CPU resizes through pods/resize (descheduler/resize.py); hierarchical only
      enabled: false              # true: the planner plans resizes (policy.highlevel.ResizePlanner) and they are made
      maxPerCycle: 10             # resizes per cycle (0: none)
      cooldownSeconds: 300        # a pod is resized at most once per this long
      maxStep: 0.5                # a resize changes a pod's CPU request by at most this fraction of it
      maxBurst: 2.0               # and never above this multiple of its template's request
      minChange: 0.1              # the planner acts when use leaves the target by this fraction; < maxStep
    nodeLoss:                     # pods of an unreachable node replaced sooner (descheduler/nodeloss.py)
      enabled: true               # evict, through the Eviction API, the pods of a node tainted
                                  #   node.kubernetes.io/unreachable or not-ready (NoExecute) this long
                                  #   and closed to new pods (the NoSchedule taint too, or cordoned):
      afterSeconds: 60            #   seconds since the taint's timeAdded (the taint manager waits the pods'
                                  #   tolerationSeconds, 300 by default)
      maxTolerationSeconds: 300   # a pod tolerating the taint longer than this (or forever) is left to wait
      maxLostFraction: 0.5        # more than this share of the nodes not Ready or tainted so (however recently):
                                  #   do nothing (a partition of the control plane, not of the nodes; as the node
                                  #   lifecycle controller's --unhealthy-zone-threshold stops evictions)
      maxPerCycle: 50             # such evictions per cycle (beside caps: these pods serve nothing; caps.total 0
                                  #   stops them too)
      evictLocalStoragePods: null # pods with local storage too (their data is out of reach, and the taint manager
                                  #   deletes them after tolerationSeconds anyway; only a node back within that
                                  #   time would have kept it); null = as evictLocalStoragePods
    topology:
      sources: []                 # call-graph sources (manifests, spans, Alibaba CSV); [] = annotations
    metrics:
      textfile: null              # write Prometheus text exposition here after each cycle ("-" = stderr)
      pushgateway: null           # push to this Pushgateway URL after each cycle (CronJob mode)
      listen: null                # serve /metrics on host:port in --interval mode (e.g. 127.0.0.1:9102)
      job: hrl-descheduler        # Pushgateway job name
      groupingKey: {}             # more labels of the Pushgateway group (e.g. {namespace: NS}); with a stateFile
                                  #   the counters carry over from run to run, so each push replaces the group
                                  #   with cumulative totals (CronJob mode: rate() and increase() work)
    cache: null                   # the topology embedding cache (descheduler/cache.py), e.g.
                                  #   {address: hrl-embedding-cache:50051, timeoutSeconds: 2,
                                  #    encoderBundle: null, reencodeAfterSeconds: 300}
    leaderElection:               # --interval mode against a live cluster only (descheduler/leader.py)
      enabled: true               # one active replica at a time, holder of a coordination.k8s.io/v1 Lease
      leaseName: hrl-descheduler
      leaseNamespace: null        # null = $POD_NAMESPACE, else the ServiceAccount's namespace, else default
      identity: null              # null = <hostname>_<random>
      leaseDurationSeconds: 15    # a standby takes over after seeing the lease unrenewed this long
      renewDeadlineSeconds: 10    # the leader stops evicting when it could not renew for this long
      retryPeriodSeconds: 2       # renew / retry period
    metricsSources:               # live inputs (policy.live): what the policies saw in training, read once per cycle
      resourceUsage:              #   measured pod CPU use
        uri: null                 #   metrics-api | prometheus+cadvisor://HOST:PORT?window=1m; null = off (requests)
        refreshSeconds: 30        #   (the extender's background period; a cycle reads once)
        maxAgeSeconds: 120        #   older = stale: not used, and the cycle plans no move and no resize
      serviceSignals:             #   per-service arrivals, latency (mean, p95) and refused share
        uri: null                 #   prometheus+istio|linkerd|otel://HOST:PORT?window=1m&namespace=NS; null = off
        maxAgeSeconds: 120

The caps and the guards mirror kubernetes-sigs/descheduler (``maxNoOfPodsToEvictPerNode``,
``maxNoOfPodsToEvictPerNamespace``, ``maxNoOfPodsToEvictTotal``; DefaultEvictor's ``evictLocalStoragePods``),
with more conservative defaults. Every number is finite, every ``*Seconds`` field at most
:data:`policy.config.MAX_SECONDS` (365 days), ``localityMin <= localityMax`` and ``balanceMin <= balanceMax``;
a ``bundle`` is an error next to a heuristic ``name`` (and when empty). Load with
:func:`load_descheduler_config`; every problem is reported with its dotted path in one
:class:`policy.config.ConfigError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from policy import highlevel
from policy.bundle import DEFAULT_BUNDLES, SERVED_INTENT_BUNDLE, SERVED_PLACEMENT_BUNDLE, bundle_error_line
from policy.config import (
    HOST_PORT,
    LISTEN_ADDRESS,
    NAMESPACED_NAME,
    ConfigModel,
    ExistingBundle,
    ExistingPath,
    load_config,
    matches,
    pattern_schema,
)
from policy.highlevel import HighLevelPolicy, MoveCostModel, RebalanceHeuristic, ResizePlanner
from policy.highlevel.tuned import tuned_burst
from policy.live import MetricsSourcesConfig
from policy.lowlevel import INTENT_SPEC, PlacementPolicy, TopologyHeuristic, load_placement

__all__ = [
    "KIND",
    "Caps",
    "PlannerConfig",
    "TopologyConfig",
    "MetricsConfig",
    "CacheConfig",
    "LeaderElectionConfig",
    "LoopDetectionConfig",
    "SchedulerPredictionConfig",
    "AutoscalerConfig",
    "IntentPolicyConfig",
    "PlacementConfig",
    "ScalingConfig",
    "ResizeConfig",
    "CostModelConfig",
    "MovesConfig",
    "NodeLossConfig",
    "ShadowConfig",
    "DeschedulerConfiguration",
    "load_descheduler_config",
    "planner_from_config",
    "resize_planner_from_config",
    "placement_from_config",
    "cost_model_from_config",
]

KIND = "DeschedulerConfiguration"


class Caps(ConfigModel):
    """Evictions allowed per cycle. ``None`` = unlimited; ``0`` = no eviction at all."""

    per_node: int | None = Field(2, ge=0)
    per_namespace: int | None = Field(5, ge=0)
    total: int | None = Field(10, ge=0)


def _finite_number(v: float) -> float:
    if v != v or v in (float("inf"), float("-inf")):
        raise ValueError("must be a finite number")
    return v


class AutoscalerConfig(ConfigModel):
    """Where the hierarchical planner's replica targets come from (:mod:`policy.highlevel`): ``utilization-target``
    (the stand-in :class:`policy.highlevel.UtilizationTargetAutoscaler`), ``drpc`` (the learned students of
    ``bundle``, :func:`policy.highlevel.load_learned_autoscaler`) or ``intent`` (the learned high level's
    per-service capacity targets carried out by :class:`policy.highlevel.IntentAutoscaler`; ``targetUtilization``
    is then the target of a service the intent names none for, and ``burst`` the share of a Burstable pod's CPU
    room above its request (to its limit, at most its node's unused CPU) counted as capacity: 0 counts the request
    as an HPA does; unset, the tuned constant's beside the learned intent bundle (``constant.json``,
    :mod:`policy.highlevel.tuned`), else 0), and ``forecastMin`` the lowest forecast factor of its replica targets
    (:attr:`policy.highlevel.IntentAutoscaler.forecast_min`, 0.5..1; unset 0.5, as the simulator serves; 1: the
    forecast only adds capacity to what the measured demand needs), and ``limitTarget`` the share of the CPU a pod with
    room above its request can reach that its replica target plans it for, on calm services only
    (:attr:`policy.highlevel.IntentAutoscaler.limit_target`, 0..0.9; unset: the autoscaler's default, as the
    simulator serves; 0: off)."""

    name: Literal["utilization-target", "drpc", "intent"] = "utilization-target"
    bundle: ExistingBundle | None = Field(None, min_length=1)
    target_utilization: float = Field(0.6, gt=0.0, le=1.0)
    tolerance: float | None = Field(None, ge=0.0)
    stabilization_seconds: float | None = Field(None, ge=0.0)
    workloads: tuple[str, ...] | None = Field(None, json_schema_extra=pattern_schema(NAMESPACED_NAME, items=True))
    burst: float | None = Field(None, ge=0.0, le=1.0)
    forecast_min: float | None = Field(None, ge=0.5, le=1.0)
    limit_target: float | None = Field(None, ge=0.0, le=0.9)

    @field_validator("workloads")
    @classmethod
    def _keys(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for k in v or ():
            if not matches(NAMESPACED_NAME, k):
                raise ValueError(f"expected namespace/name, got {k!r}")
        return v

    @model_validator(mode="after")
    def _bundle_needs_drpc(self) -> AutoscalerConfig:
        if self.bundle is not None and self.name != "drpc":
            raise ValueError(f"bundle ({self.bundle!r}) is only read by name: drpc (got name: {self.name})")
        return self

    @model_validator(mode="after")
    def _tolerance_not_drpc(self) -> AutoscalerConfig:
        if self.tolerance is not None and self.name == "drpc":
            raise ValueError(
                f"tolerance ({self.tolerance:g}) is not read by name: drpc (its students set replica targets without "
                "a tolerance band; utilization-target and intent read it)"
            )
        return self

    @model_validator(mode="after")
    def _intent_only_fields(self) -> AutoscalerConfig:
        for key, v in (("burst", self.burst), ("forecastMin", self.forecast_min), ("limitTarget", self.limit_target)):
            if v is not None and self.name != "intent":
                raise ValueError(f"{key} ({v:g}) is only read by name: intent (got name: {self.name})")
        return self


class IntentPolicyConfig(ConfigModel):
    """Where the intent comes from: ``utilization`` (:class:`policy.highlevel.UtilizationIntent`: cluster CPU
    utilisation, times the forecast change of the request rate, → ``[locality_weight, balance_weight]``,
    exponentially smoothed; the fields below) or ``learned`` (:class:`policy.highlevel.LearnedIntent`: the
    trained high level of ``bundle``, acting once per ``periodSeconds`` with per-service capacity targets and
    co-location priorities, told the operator's ``cpuPrice`` and the application's ``sloP95Ms``)."""

    name: Literal["utilization", "learned"] = "utilization"
    bundle: ExistingBundle | None = Field(None, min_length=1)
    period_seconds: float = Field(300.0, ge=0.0)
    cpu_price: float = Field(0.5, ge=0.0)
    slo_p95_ms: float | None = Field(None, gt=0.0)

    low_utilization: float = Field(0.3, ge=0.0)
    high_utilization: float = Field(0.8, gt=0.0)
    locality_max: float = Field(1.5, ge=0.0)
    locality_min: float = Field(0.75, ge=0.0)
    balance_min: float = Field(0.5, ge=0.0)
    balance_max: float = Field(2.0, ge=0.0)
    smoothing: float = Field(0.5, gt=0.0, le=1.0)

    @model_validator(mode="after")
    def _range(self) -> IntentPolicyConfig:
        if self.bundle is not None and self.name != "learned":
            raise ValueError(f"bundle ({self.bundle!r}) is only read by name: learned (got name: {self.name})")
        for f in ("period_seconds", "cpu_price"):
            _finite_number(getattr(self, f))
        if not self.low_utilization < self.high_utilization:
            raise ValueError(
                f"lowUtilization ({self.low_utilization:g}) must be < highUtilization ({self.high_utilization:g})"
            )
        if not self.locality_min <= self.locality_max:
            raise ValueError(f"localityMin ({self.locality_min:g}) must be <= localityMax ({self.locality_max:g})")
        if not self.balance_min <= self.balance_max:
            raise ValueError(f"balanceMin ({self.balance_min:g}) must be <= balanceMax ({self.balance_max:g})")
        return self


class PlannerConfig(ConfigModel):
    """The high-level policy and its parameters (see :class:`policy.highlevel.RebalanceHeuristic` and
    :class:`policy.highlevel.HierarchicalPolicy`)."""

    name: Literal["rebalance-heuristic", "hierarchical"] = "rebalance-heuristic"
    overload_threshold: float = Field(0.85, gt=0.0, le=1.0)
    locality_margin: float = Field(1.0, ge=0.0, le=10.0)
    min_pair_rps: float = Field(0.0, ge=0.0)
    default_rps: float = Field(1.0, gt=0.0)
    max_moves_per_service: int = Field(1, ge=1)
    max_moves: int = Field(50, ge=0)
    min_serving_pods: int = Field(2, ge=1)
    intent: tuple[float, ...] | None = Field(
        None,
        json_schema_extra={"minItems": len(INTENT_SPEC), "maxItems": len(INTENT_SPEC), "items": {"minimum": 0}},
    )
    rebalance: bool = True
    moves_period_seconds: float = Field(0.0, ge=0.0)
    scale_period_seconds: float = Field(0.0, ge=0.0)
    autoscaler: AutoscalerConfig | None = AutoscalerConfig()
    intent_policy: IntentPolicyConfig = IntentPolicyConfig()

    @field_validator(
        "overload_threshold",
        "locality_margin",
        "min_pair_rps",
        "default_rps",
        "moves_period_seconds",
        "scale_period_seconds",
    )
    @classmethod
    def _finite(cls, v: float) -> float:
        return _finite_number(v)

    @field_validator("intent")
    @classmethod
    def _intent(cls, v: tuple[float, ...] | None) -> tuple[float, ...] | None:
        # policy.lowlevel.INTENT_SPEC: [locality_weight, balance_weight], each a finite weight >= 0
        if v is None:
            return v
        names = ", ".join(n for n, _doc, _default in INTENT_SPEC)
        if len(v) != len(INTENT_SPEC) or not all(x == x and abs(x) != float("inf") and x >= 0 for x in v):
            raise ValueError(f"must be [{names}]: exactly {len(INTENT_SPEC)} finite numbers >= 0")
        return v


class PlacementConfig(ConfigModel):
    """The low-level policy the descheduler plans and checks feasibility with (it should be the extender's):
    ``topology-heuristic`` (:class:`policy.lowlevel.TopologyHeuristic`) or ``learned`` (the bundle's
    :class:`policy.lowlevel.LearnedPlacement`)."""

    name: Literal["topology-heuristic", "learned"] = "topology-heuristic"
    bundle: ExistingBundle | None = Field(None, min_length=1)
    target_utilization: float = Field(0.7, gt=0.0, lt=1.0)

    @model_validator(mode="after")
    def _bundle_needs_learned(self) -> PlacementConfig:
        if self.bundle is not None and self.name != "learned":
            raise ValueError(f"bundle ({self.bundle!r}) is only read by name: learned (got name: {self.name})")
        return self


class ScalingConfig(ConfigModel):
    """How the plan's replica targets are applied through ``deployments/scale`` (:mod:`descheduler.scale`):
    each target is clipped to ``[minReplicas, maxReplicas]`` and to ``maxStepPerCycle`` replicas away from the
    current count (``null``: no step cap); a Deployment that a HorizontalPodAutoscaler targets is left alone."""

    enabled: bool = True
    min_replicas: int = Field(1, ge=0)
    max_replicas: int = Field(10, ge=1)
    max_step_per_cycle: int | None = Field(4, ge=1)

    @model_validator(mode="after")
    def _bounds(self) -> ScalingConfig:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"minReplicas ({self.min_replicas}) must be <= maxReplicas ({self.max_replicas})")
        return self


class ResizeConfig(ConfigModel):
    """In-place CPU resizes of running pods through ``pods/resize`` (:mod:`descheduler.resize`; Kubernetes in-place
    pod resize, KEP-1287, GA in 1.35). With ``enabled`` the ``hierarchical`` planner plans them
    (:class:`policy.highlevel.ResizePlanner`: a pod above its capacity target grows within its node's room, up to
    ``maxBurst`` × its template's request; it shrinks back toward that request) and the descheduler makes them
    behind its guards: at most ``maxPerCycle`` per cycle, one per pod per ``cooldownSeconds``, each at most
    ``maxStep`` (a fraction of the pod's request) away from the current request; never a pod a
    VerticalPodAutoscaler owns. ``basis``: what a pod's CPU use is held against, ``limit`` (default: a pod whose CPU
    limit is above its request, a Burstable pod, against its limit, where it would throttle; any other against its
    request) or ``request`` (every pod against its request, as an HPA counts utilization: a Burstable pod that runs
    above its request but far below its limit is grown too, which reserves CPU it could already use). Ranges: 0 <
    ``minChange`` < ``maxStep`` <= 1, ``maxBurst`` >= 1."""

    enabled: bool = False
    basis: Literal["request", "limit"] = "limit"
    max_per_cycle: int = Field(10, ge=0)
    cooldown_seconds: float = Field(300.0, ge=0.0)
    max_step: float = Field(0.5, gt=0.0, le=1.0)
    max_burst: float = Field(2.0, ge=1.0)
    min_change: float = Field(0.1, gt=0.0, lt=1.0)

    @model_validator(mode="after")
    def _steps(self) -> ResizeConfig:
        if not self.min_change < self.max_step:
            raise ValueError(f"minChange ({self.min_change:g}) must be < maxStep ({self.max_step:g})")
        return self


class CostModelConfig(ConfigModel):
    """The move cost model (:class:`policy.highlevel.MoveCostModel`, whose docstring gives every parameter's source):
    with ``enabled`` a planned move is made only when its predicted gain over ``horizonSeconds`` exceeds its
    predicted cost by ``minNetGain`` (objective units), and an eviction whose cost cannot be priced (no measured
    request rate or CPU use) is not made."""

    enabled: bool = True
    slo_p95_ms: float | None = Field(None, gt=0.0)
    horizon_seconds: float = Field(600.0, ge=0.0)
    overlap_seconds: float | None = Field(None, ge=0.0)
    startup_seconds: float = Field(20.0, ge=0.0)
    cpu_price: float = Field(0.5, ge=0.0)
    cpu_reference_cores: float | None = Field(None, gt=0.0)
    failed_weight: float = Field(100.0, ge=0.0)
    same_zone_call_ms: float = Field(0.45, ge=0.0)
    cross_zone_call_ms: float = Field(1.95, ge=0.0)
    load_factor: float = Field(2.05, ge=1.0)
    min_net_gain: float = Field(0.0, ge=0.0)

    @field_validator(
        "slo_p95_ms",
        "horizon_seconds",
        "overlap_seconds",
        "startup_seconds",
        "cpu_price",
        "cpu_reference_cores",
        "failed_weight",
        "same_zone_call_ms",
        "cross_zone_call_ms",
        "load_factor",
        "min_net_gain",
    )
    @classmethod
    def _finite(cls, v: float | None) -> float | None:
        return v if v is None else _finite_number(v)


class MovesConfig(ConfigModel):
    """How a planned move is made (:mod:`descheduler.surge`): ``strategy: surge`` makes it before it breaks the old
    placement where our autoscaler owns the Deployment's replica count (``scaling.enabled``, the Deployment in
    ``planner.autoscaler.workloads`` or that list null, no HorizontalPodAutoscaler targeting it, one ReplicaSet, below
    ``scaling.maxReplicas``) and no PodDisruptionBudget or ResourceQuota forbids one more pod; elsewhere ``fallback``
    decides: ``evict`` (the Eviction API behind every guard; never a service's only serving pod when
    ``planner.minServingPods`` >= 2) or ``skip``. ``strategy: evict`` is the Eviction API only. A surge whose new pod is
    not Ready on the target within ``surgeTimeoutSeconds`` is aborted; at most ``maxPending`` surges run at once.
    ``steerDelaySeconds``: the move is first announced to the extender (the pending-move record next to the intent in
    the embedding cache) and the Deployment scaled up by the first cycle at least this long later, so the record has
    reached the extender (its ``cache.refreshSeconds``) when the new pod is scheduled; 0 scales in the same cycle."""

    strategy: Literal["surge", "evict"] = "surge"
    fallback: Literal["evict", "skip"] = "evict"
    steer_delay_seconds: float = Field(15.0, ge=0.0)
    surge_timeout_seconds: float = Field(600.0, gt=0.0)
    max_pending: int = Field(10, ge=0)
    cost_model: CostModelConfig = CostModelConfig()

    @field_validator("surge_timeout_seconds", "steer_delay_seconds")
    @classmethod
    def _finite(cls, v: float) -> float:
        return _finite_number(v)


class NodeLossConfig(ConfigModel):
    """Replacing the pods of an unreachable node sooner than the taint manager (:mod:`descheduler.nodeloss`):
    ``enabled``; ``afterSeconds``: how long a node must carry the node lifecycle controller's NoExecute taint
    (``node.kubernetes.io/unreachable`` or ``not-ready``, counted from its ``timeAdded``; the node must also be closed
    to new pods: that taint's NoSchedule effect, or cordoned); ``maxTolerationSeconds``:
    pods that tolerate that taint longer (or forever) are left alone; ``maxLostFraction``: no such eviction while
    more than this share of the nodes is not Ready or tainted so, however recently; ``maxPerCycle``: at most this
    many per cycle; ``evictLocalStoragePods``: whether pods with local storage go too (``None``: as the top-level
    ``evictLocalStoragePods``)."""

    enabled: bool = True
    after_seconds: float = Field(60.0, ge=0.0, le=3600.0)
    max_toleration_seconds: float = Field(300.0, ge=0.0)
    max_lost_fraction: float = Field(0.5, gt=0.0, le=1.0)
    max_per_cycle: int = Field(50, ge=0)
    evict_local_storage_pods: bool | None = None

    @field_validator("max_toleration_seconds")
    @classmethod
    def _finite(cls, v: float) -> float:
        return _finite_number(v)


class TopologyConfig(ConfigModel):
    """Where the call graph comes from: paths read by ``policy.topology.sources.load_graph``. Empty: the
    ``hrl-scheduler.io/depends-on`` annotations of the workloads and pods in the snapshot."""

    sources: tuple[ExistingPath, ...] = ()


#: A Prometheus label name the Pushgateway takes in a grouping key: not reserved (``__``...); ``job`` is refused
#: apart (set by ``job``). The validator and the JSON Schema (``propertyNames``) share it.
_LABEL_NAME = r"^([a-zA-Z][a-zA-Z0-9_]*|_([a-zA-Z0-9][a-zA-Z0-9_]*)?)$"
_GROUPING_KEY_SCHEMA: dict[str, Any] = {
    "propertyNames": {"pattern": _LABEL_NAME, "not": {"const": "job"}},
    "additionalProperties": {"type": "string", "minLength": 1},
}


class MetricsConfig(ConfigModel):
    """Where the Prometheus metrics go (all optional; several may be set)."""

    textfile: str | None = None
    pushgateway: str | None = None
    listen: str | None = Field(None, json_schema_extra=pattern_schema(LISTEN_ADDRESS))
    job: str = Field("hrl-descheduler", min_length=1)
    grouping_key: dict[str, str] = Field(default_factory=dict, json_schema_extra=_GROUPING_KEY_SCHEMA)

    @field_validator("grouping_key")
    @classmethod
    def _label_names(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            if not matches(_LABEL_NAME, name) or name == "job":
                raise ValueError(f"{name!r} is not a label name the Pushgateway accepts (job is set by job)")
            if not value:
                raise ValueError(f"{name}: the value must not be empty")
        return v

    @field_validator("listen")
    @classmethod
    def _host_port(cls, v: str | None) -> str | None:
        if v is not None and not matches(LISTEN_ADDRESS, v):
            raise ValueError("must be host:port, e.g. 127.0.0.1:9102")
        return v


class LeaderElectionConfig(ConfigModel):
    """Leader election for ``--interval`` mode on a live cluster (client-go's meanings and defaults; see
    :mod:`descheduler.leader`). Ignored by ``--once`` (a CronJob with ``concurrencyPolicy: Forbid`` runs
    one Job at a time) and by ``--snapshot`` runs."""

    enabled: bool = True
    lease_name: str = Field(
        "hrl-descheduler", min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
    )
    lease_namespace: str | None = Field(None, min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    identity: str | None = Field(None, min_length=1)
    lease_duration_seconds: float = Field(15.0, ge=1.0)
    renew_deadline_seconds: float = Field(10.0, gt=0.0)
    retry_period_seconds: float = Field(2.0, gt=0.0)

    @model_validator(mode="after")
    def _timings(self) -> LeaderElectionConfig:
        # client-go's rules (tools/leaderelection NewLeaderElector); JITTER_FACTOR = 1.2
        if not self.renew_deadline_seconds > 1.2 * self.retry_period_seconds:
            raise ValueError(
                f"renewDeadlineSeconds ({self.renew_deadline_seconds:g}) must be > 1.2 x "
                f"retryPeriodSeconds ({self.retry_period_seconds:g})"
            )
        if not self.lease_duration_seconds > self.renew_deadline_seconds:
            raise ValueError(
                f"leaseDurationSeconds ({self.lease_duration_seconds:g}) must be > "
                f"renewDeadlineSeconds ({self.renew_deadline_seconds:g})"
            )
        return self


class CacheConfig(ConfigModel):
    """The topology embedding cache (``hrl-policy cache serve``): each cycle the descheduler reads (or
    computes and stores) the embeddings of its call graph and, unless in a dry run, publishes its intent
    (:mod:`descheduler.cache`)."""

    address: str = Field(..., min_length=3, json_schema_extra=pattern_schema(HOST_PORT))
    timeout_seconds: float = Field(2.0, gt=0.0, le=60.0)
    encoder_bundle: ExistingBundle | None = Field(None, min_length=1)
    reencode_after_seconds: float = Field(300.0, gt=0.0)

    @field_validator("address")
    @classmethod
    def _cache_host_port(cls, v: str) -> str:
        if not matches(HOST_PORT, v):
            raise ValueError("must be host:port, e.g. 127.0.0.1:50051")
        return v


class LoopDetectionConfig(ConfigModel):
    """Loop detection (:func:`descheduler.guards.detect_loops`): evictions are remembered ``windowSeconds``; a
    workload whose pod comes back to a node it was evicted from within that time is on hold ``holdSeconds``."""

    window_seconds: float = Field(3600.0, ge=0.0)
    hold_seconds: float = Field(3600.0, ge=0.0)


class SchedulerPredictionConfig(ConfigModel):
    """How the descheduler predicts kube-scheduler (:class:`policy.highlevel.SchedulerModel`): ``enabled``;
    ``extenderWeight``: the weight of our extender in the KubeSchedulerConfiguration; ``extenderSchedulers``:
    the ``schedulerName`` values whose profile calls it (others are predicted with the in-tree plugins only)."""

    enabled: bool = True
    extender_weight: int = Field(2, ge=0, le=100)
    extender_schedulers: tuple[str, ...] = ("hrl-scheduler",)


class ShadowConfig(ConfigModel):
    """The shadow record of dry runs (:mod:`descheduler.shadow`): ``log``, a JSON-lines file (one record per cycle;
    null = in the report only), rotated at ``maxBytes`` with ``backups`` old files kept."""

    log: str | None = Field(None, min_length=1)
    max_bytes: int = Field(64 * 2**20, ge=4096)
    backups: int = Field(3, ge=0, le=100)


class DeschedulerConfiguration(ConfigModel):
    """The whole file; see the module docstring for every field and its default."""

    dry_run: bool = False
    shadow: ShadowConfig = ShadowConfig()
    interval_seconds: float = Field(300.0, gt=0.0)
    caps: Caps = Caps()
    excluded_namespaces: tuple[str, ...] = ("kube-system",)
    evict_local_storage_pods: bool = False
    cooldown_seconds: float = Field(1800.0, ge=0.0)
    loop_detection: LoopDetectionConfig = LoopDetectionConfig()
    scheduler_prediction: SchedulerPredictionConfig = SchedulerPredictionConfig()
    events: bool = True
    state_file: str | None = None
    planner: PlannerConfig = PlannerConfig()
    placement: PlacementConfig = PlacementConfig()
    scaling: ScalingConfig = ScalingConfig()
    resize: ResizeConfig = ResizeConfig()
    moves: MovesConfig = MovesConfig()
    node_loss: NodeLossConfig = NodeLossConfig()
    topology: TopologyConfig = TopologyConfig()
    metrics: MetricsConfig = MetricsConfig()
    cache: CacheConfig | None = None
    leader_election: LeaderElectionConfig = LeaderElectionConfig()
    metrics_sources: MetricsSourcesConfig = MetricsSourcesConfig()

    @model_validator(mode="after")
    def _resize_needs_hierarchical(self) -> DeschedulerConfiguration:
        if self.resize.enabled and self.planner.name != "hierarchical":
            raise ValueError(
                f"resize.enabled: true needs planner.name: hierarchical (got planner.name: {self.planner.name})"
            )
        return self


def load_descheduler_config(
    source: str | Path | Mapping[str, Any] | None, *, check_files: bool = False
) -> DeschedulerConfiguration:
    """Read a ``DeschedulerConfiguration`` from a YAML file, a mapping, or ``None`` (all defaults).
    ``check_files``: also check that the files it names exist (bundles, the file sources of
    ``topology.sources``), in the same pass (``hrl-descheduler`` does).
    Raises :class:`policy.config.ConfigError` listing every problem with its dotted path."""
    return load_config(DeschedulerConfiguration, KIND, source, check_files=check_files)


def planner_from_config(config: DeschedulerConfiguration) -> HighLevelPolicy:
    """The high-level policy the ``planner`` section describes: a :class:`RebalanceHeuristic`, or a
    :class:`policy.highlevel.HierarchicalPolicy` for ``name: hierarchical`` (both also skip the pods that
    ``excludedNamespaces`` / ``evictLocalStoragePods`` make unevictable). Raises ``ValueError`` (naming the
    path) when a learned autoscaler's bundle is missing or cannot be loaded."""
    cfg = config.planner
    if cfg.name == "hierarchical":
        return _hierarchical(config)
    return RebalanceHeuristic(
        overload_threshold=cfg.overload_threshold,
        locality_margin=cfg.locality_margin,
        min_pair_rps=cfg.min_pair_rps,
        default_rps=cfg.default_rps,
        max_moves_per_service=cfg.max_moves_per_service,
        max_moves=cfg.max_moves,
        intent=cfg.intent,
        excluded_namespaces=tuple(config.excluded_namespaces),
        evict_local_storage_pods=config.evict_local_storage_pods,
    )


def _hierarchical(config: DeschedulerConfiguration) -> HighLevelPolicy:

    cfg = config.planner
    a = cfg.autoscaler
    ip = cfg.intent_policy
    intent_policy: Any
    intent_bundle = None
    if cfg.intent is not None:
        intent_policy = highlevel.FixedIntent(cfg.intent)
    elif ip.name == "learned":
        bundle = intent_bundle = ip.bundle or str(SERVED_INTENT_BUNDLE)
        try:
            intent_policy = highlevel.load_intent_policy(
                bundle, slo_p95_ms=ip.slo_p95_ms, cpu_price=ip.cpu_price, workloads=a.workloads if a else None
            )
        except ValueError as exc:  # one line starting with the field (BundleMissing, BundleError)
            raise ValueError(bundle_error_line("planner.intentPolicy.bundle", exc, default=ip.bundle is None)) from None
    else:
        intent_policy = highlevel.UtilizationIntent(
            low_utilization=ip.low_utilization,
            high_utilization=ip.high_utilization,
            locality_max=ip.locality_max,
            locality_min=ip.locality_min,
            balance_min=ip.balance_min,
            balance_max=ip.balance_max,
            smoothing=ip.smoothing,
        )
    auto = None
    if a is not None and a.name == "drpc":
        bundle = a.bundle or str(DEFAULT_BUNDLES / "hrl-scheduler" / "high")
        try:
            auto = highlevel.load_learned_autoscaler(
                bundle, a.workloads, **_set(stabilization_s=a.stabilization_seconds)
            )
        except ValueError as exc:  # one line starting with the field (BundleMissing, BundleError)
            field = "planner.autoscaler.bundle"
            raise ValueError(bundle_error_line(field, exc, default=a.bundle is None)) from None
    elif a is not None and a.name == "intent":
        featurizer = getattr(intent_policy, "featurizer", None)
        burst = a.burst
        if burst is None:  # the tuned constant's, beside the learned intent it was tuned with (as the simulator)
            try:
                burst = tuned_burst(intent_bundle) if intent_bundle is not None else 0.0
            except ValueError as exc:
                raise ValueError(f"planner.intentPolicy.bundle: {exc}") from None
        auto = highlevel.IntentAutoscaler(
            default_target=a.target_utilization,
            min_replicas=config.scaling.min_replicas,
            max_replicas=config.scaling.max_replicas,
            workloads=a.workloads,
            **_set(tolerance=a.tolerance, stabilization_s=a.stabilization_seconds),
            forecaster=featurizer.local.predictor if featurizer is not None else None,
            burst=burst,
            **_set(forecast_min=a.forecast_min, limit_target=a.limit_target),
        )
    elif a is not None:
        auto = highlevel.UtilizationTargetAutoscaler(
            target_utilization=a.target_utilization,
            min_replicas=config.scaling.min_replicas,
            max_replicas=config.scaling.max_replicas,
            workloads=a.workloads,
            **_set(tolerance=a.tolerance, stabilization_s=a.stabilization_seconds),
        )
    learned = isinstance(intent_policy, (highlevel.LearnedIntent, highlevel.IntentEnsemble))
    return highlevel.HierarchicalPolicy(
        resizer=resize_planner_from_config(config),
        autoscaler=auto,
        intent_policy=intent_policy,
        rebalance=cfg.rebalance,
        margin=cfg.locality_margin,
        overload_threshold=cfg.overload_threshold,
        max_moves=cfg.max_moves,
        max_moves_per_service=cfg.max_moves_per_service,
        min_serving_pods=cfg.min_serving_pods,
        moves_period_s=cfg.moves_period_seconds,
        scale_period_s=cfg.scale_period_seconds,
        intent_period_s=ip.period_seconds if learned else 0.0,
        workloads=a.workloads if a is not None else None,
        excluded_namespaces=tuple(config.excluded_namespaces),
        evict_local_storage_pods=config.evict_local_storage_pods,
    )


def _set(**kw: Any) -> dict[str, Any]:
    """The keyword arguments that are not None (a null configuration field leaves the constructor's default)."""
    return {k: v for k, v in kw.items() if v is not None}


def cost_model_from_config(config: DeschedulerConfiguration) -> MoveCostModel | None:
    """The :class:`policy.highlevel.MoveCostModel` of ``moves.costModel`` (``None`` when not ``enabled``): its
    parameters, the SLO from ``sloP95Ms`` (else ``planner.intentPolicy.sloP95Ms``, else the model's 100 ms) and the
    surge's overlap from ``overlapSeconds`` (else ``intervalSeconds``: one cycle)."""
    c = config.moves.cost_model
    if not c.enabled:
        return None
    slo = c.slo_p95_ms if c.slo_p95_ms is not None else config.planner.intent_policy.slo_p95_ms
    kw: dict[str, Any] = {} if slo is None else {"slo_p95_ms": float(slo)}
    return MoveCostModel(
        **kw,
        failed_weight=c.failed_weight,
        cpu_price=c.cpu_price,
        cpu_reference_cores=c.cpu_reference_cores,
        horizon_s=c.horizon_seconds,
        overlap_s=c.overlap_seconds if c.overlap_seconds is not None else config.interval_seconds,
        startup_s=c.startup_seconds,
        same_zone_call_ms=c.same_zone_call_ms,
        cross_zone_call_ms=c.cross_zone_call_ms,
        load_factor=c.load_factor,
        min_net_gain=c.min_net_gain,
    )


def resize_planner_from_config(config: DeschedulerConfiguration) -> ResizePlanner | None:
    """The :class:`policy.highlevel.ResizePlanner` of the ``resize`` section (``None`` unless ``enabled``): its
    ``maxStep``, ``maxBurst``, ``minChange``, ``maxPerCycle`` and ``cooldownSeconds``; the capacity target of a
    service the intent names none for is ``planner.autoscaler.targetUtilization`` (0.6 without an autoscaler),
    and it resizes only the Deployments of ``planner.autoscaler.workloads`` (null: all)."""
    rc = config.resize
    if not rc.enabled:
        return None
    a = config.planner.autoscaler
    return ResizePlanner(
        default_target=a.target_utilization if a is not None else 0.6,
        min_change=rc.min_change,
        max_step=rc.max_step,
        max_burst=rc.max_burst,
        max_resizes=rc.max_per_cycle,
        cooldown_s=rc.cooldown_seconds,
        workloads=a.workloads if a is not None else None,
        basis=rc.basis,
    )


def placement_from_config(config: DeschedulerConfiguration) -> PlacementPolicy:
    """The low-level policy of the ``placement`` section. Raises ``ValueError`` (naming the path) when the
    learned policy's bundle is missing or cannot be loaded."""
    p = config.placement
    if p.name == "learned":
        try:
            return load_placement(p.bundle or str(SERVED_PLACEMENT_BUNDLE))
        except ValueError as exc:  # one line starting with the field (BundleMissing, BundleError)
            raise ValueError(bundle_error_line("placement.bundle", exc, default=p.bundle is None)) from None
    return TopologyHeuristic(target_utilization=p.target_utilization)
