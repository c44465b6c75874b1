"""The descheduler's configuration file (``kind: DeschedulerConfiguration``).

Every field is optional; the defaults below are what an empty file (or no ``--config``) gives::

    apiVersion: hrl-scheduler.io/v1alpha1
    kind: DeschedulerConfiguration
    dryRun: false                 # evict nothing, report what would be evicted (same code path)
    intervalSeconds: 300          # period of --interval mode when the command line gives none
    caps:                         # evictions per cycle; null = unlimited, 0 = none
      perNode: 2                  #   from any one node
      perNamespace: 5             #   in any one namespace
      total: 10                   #   in all
    excludedNamespaces: [kube-system]
    evictLocalStoragePods: false  # pods with emptyDir / hostPath / local PersistentVolumes stay
    cooldownSeconds: 1800         # a workload evicted from node N is not evicted from N again for this long
    stateFile: null               # JSON file keeping the eviction history across runs (CronJob mode)
    planner:
      name: rebalance-heuristic
      overloadThreshold: 0.85     # CPU utilisation fraction of allocatable
      localityMargin: 1.0         # score points (0..10) a target must beat the current node by
      minPairRps: 0.0             # call rate below which a caller/callee pair is not "chatty"
      defaultRps: 1.0             # rate assumed for a dependency without a measured rate
      maxMovesPerService: 1
      maxMoves: 50
      intent: null                # [locality_weight, balance_weight]; null = defaults
    topology:
      sources: []                 # call-graph sources (manifests, spans, Alibaba CSV); [] = annotations
    metrics:
      textfile: null              # write Prometheus text exposition here after each cycle ("-" = stderr)
      pushgateway: null           # push to this Pushgateway URL after each cycle (CronJob mode)
      listen: null                # serve /metrics on host:port in --interval mode (e.g. 127.0.0.1:9102)
      job: hrl-descheduler        # Pushgateway job name
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

The caps and the guards mirror kubernetes-sigs/descheduler (``maxNoOfPodsToEvictPerNode``,
``maxNoOfPodsToEvictPerNamespace``, ``maxNoOfPodsToEvictTotal``; DefaultEvictor's ``evictLocalStoragePods``),
with more conservative defaults. Load with :func:`load_descheduler_config`; every problem is reported with
its dotted path in one :class:`policy.config.ConfigError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from policy.config import ConfigModel, load_config
from policy.highlevel import RebalanceHeuristic

__all__ = [
    "KIND",
    "Caps",
    "PlannerConfig",
    "TopologyConfig",
    "MetricsConfig",
    "CacheConfig",
    "LeaderElectionConfig",
    "DeschedulerConfiguration",
    "load_descheduler_config",
    "planner_from_config",
]

KIND = "DeschedulerConfiguration"


class Caps(ConfigModel):
    """Evictions allowed per cycle. ``None`` = unlimited; ``0`` = no eviction at all."""

    per_node: int | None = Field(2, ge=0)
    per_namespace: int | None = Field(5, ge=0)
    total: int | None = Field(10, ge=0)


class PlannerConfig(ConfigModel):
    """The high-level policy and its parameters (see :class:`policy.highlevel.RebalanceHeuristic`)."""

    name: Literal["rebalance-heuristic"] = "rebalance-heuristic"
    overload_threshold: float = Field(0.85, gt=0.0, le=1.0)
    locality_margin: float = Field(1.0, ge=0.0, le=10.0)
    min_pair_rps: float = Field(0.0, ge=0.0)
    default_rps: float = Field(1.0, gt=0.0)
    max_moves_per_service: int = Field(1, ge=1)
    max_moves: int = Field(50, ge=0)
    intent: tuple[float, ...] | None = None

    @field_validator("overload_threshold", "locality_margin", "min_pair_rps", "default_rps")
    @classmethod
    def _finite(cls, v: float) -> float:
        if v != v or v in (float("inf"), float("-inf")):
            raise ValueError("must be a finite number")
        return v


class TopologyConfig(ConfigModel):
    """Where the call graph comes from: paths read by ``policy.topology.sources.load_graph``. Empty: the
    ``hrl-scheduler.io/depends-on`` annotations of the workloads and pods in the snapshot."""

    sources: tuple[str, ...] = ()


class MetricsConfig(ConfigModel):
    """Where the Prometheus metrics go (all optional; several may be set)."""

    textfile: str | None = None
    pushgateway: str | None = None
    listen: str | None = None
    job: str = Field("hrl-descheduler", min_length=1)

    @field_validator("listen")
    @classmethod
    def _host_port(cls, v: str | None) -> str | None:
        if v is None:
            return v
        host, sep, port = v.rpartition(":")
        if not sep or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError("must be host:port, e.g. 127.0.0.1:9102")
        return v


class LeaderElectionConfig(ConfigModel):
    """Leader election for ``--interval`` mode on a live cluster (client-go's meanings and defaults; see
    :mod:`descheduler.leader`). Ignored by ``--once`` (a CronJob with ``concurrencyPolicy: Forbid`` runs
    one Job at a time) and by ``--snapshot`` runs."""

    enabled: bool = True
    lease_name: str = Field("hrl-descheduler", min_length=1, max_length=253,
                            pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    lease_namespace: str | None = Field(None, min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    identity: str | None = Field(None, min_length=1)
    lease_duration_seconds: float = Field(15.0, ge=1.0)
    renew_deadline_seconds: float = Field(10.0, gt=0.0)
    retry_period_seconds: float = Field(2.0, gt=0.0)

    @model_validator(mode="after")
    def _timings(self) -> LeaderElectionConfig:
        # client-go's rules (tools/leaderelection NewLeaderElector); JITTER_FACTOR = 1.2
        if not self.renew_deadline_seconds > 1.2 * self.retry_period_seconds:
            raise ValueError(f"renewDeadlineSeconds ({self.renew_deadline_seconds:g}) must be > 1.2 x "
                             f"retryPeriodSeconds ({self.retry_period_seconds:g})")
        if not self.lease_duration_seconds > self.renew_deadline_seconds:
            raise ValueError(f"leaseDurationSeconds ({self.lease_duration_seconds:g}) must be > "
                             f"renewDeadlineSeconds ({self.renew_deadline_seconds:g})")
        return self


class CacheConfig(ConfigModel):
    """The topology embedding cache (``hrl-policy cache serve``): each cycle the descheduler reads (or
    computes and stores) the embeddings of its call graph and, unless in a dry run, publishes its intent
    (:mod:`descheduler.cache`)."""

    address: str = Field(..., min_length=3)
    timeout_seconds: float = Field(2.0, gt=0.0, le=60.0)
    encoder_bundle: str | None = None
    reencode_after_seconds: float = Field(300.0, gt=0.0)

    @field_validator("address")
    @classmethod
    def _cache_host_port(cls, v: str) -> str:
        host, sep, port = v.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError("must be host:port, e.g. 127.0.0.1:50051")
        return v


class DeschedulerConfiguration(ConfigModel):
    """The whole file; see the module docstring for every field and its default."""

    dry_run: bool = False
    interval_seconds: float = Field(300.0, gt=0.0)
    caps: Caps = Caps()
    excluded_namespaces: tuple[str, ...] = ("kube-system",)
    evict_local_storage_pods: bool = False
    cooldown_seconds: float = Field(1800.0, ge=0.0)
    state_file: str | None = None
    planner: PlannerConfig = PlannerConfig()
    topology: TopologyConfig = TopologyConfig()
    metrics: MetricsConfig = MetricsConfig()
    cache: CacheConfig | None = None
    leader_election: LeaderElectionConfig = LeaderElectionConfig()


def load_descheduler_config(source: str | Path | Mapping[str, Any] | None) -> DeschedulerConfiguration:
    """Read a ``DeschedulerConfiguration`` from a YAML file, a mapping, or ``None`` (all defaults).
    Raises :class:`policy.config.ConfigError` listing every problem with its dotted path."""
    return load_config(DeschedulerConfiguration, KIND, source)


def planner_from_config(config: DeschedulerConfiguration) -> RebalanceHeuristic:
    """The :class:`RebalanceHeuristic` the ``planner`` section describes (it also skips the pods that
    ``excludedNamespaces`` / ``evictLocalStoragePods`` make unevictable)."""
    cfg = config.planner
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
