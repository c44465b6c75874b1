"""What a simulator stack is, and the registry the stacks register in: :class:`StackContext` (what a factory
gets), :class:`StackBuild` (what it returns), :class:`Knob` (a parameter set in a stack's name), :func:`register_stack`
and the helpers the stacks share (the autoscaled workloads, the pods' affinity terms, the pods as a controller sees
them). The stacks themselves live in :mod:`.builtin_stacks`, :mod:`.reference`, :mod:`.hrl_stacks` and :mod:`.drpc`;
:mod:`.stacks` looks a stack up by name and runs it. This module imports none of them."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from policy.baselines.affinity import terms_by_service
from policy.observe import parse_workload
from policy.state import ClusterSnapshot, PodInfo

from .app import AppSpec
from .engine import ClusterSpec, PeriodicHook, SimConfig, Simulation
from .kube_scheduler import KubeSchedulerModel

__all__ = [
    "Knob",
    "parse_stack_name",
    "stack_name",
    "check_knobs",
    "DESCHEDULER_PERIOD_MIN",
    "AUTOSCALER_PERIOD_MIN",
    "NOT_AUTOSCALED_IMAGES",
    "StackContext",
    "TRAINING_SEED_KNOB",
    "ENTRY_FORECAST_KNOB",
    "LIMIT_TARGET_KNOB",
    "INTENT_AUTOSCALER_KNOBS",
    "FORECAST_MIN_KNOB",
    "training_seed",
    "StackBuild",
    "StackFactory",
    "StackInfo",
    "register_stack",
    "registered_stacks",
    "terms_lookup",
    "workload_key",
    "autoscaled_workloads",
    "PodView",
    "pod_views",
    "current_replicas",
]

#: How often the descheduler-based stacks run the descheduler (the upstream Deployment example's
#: ``--descheduling-interval 5m``).
DESCHEDULER_PERIOD_MIN = 5
#: Autoscalers sync once per simulated minute (the simulation's step; the HPA controller syncs every 15 s).
AUTOSCALER_PERIOD_MIN = 1
#: Container images of data stores and infrastructure: not autoscaled (stateful or not on the request path).
NOT_AUTOSCALED_IMAGES = (
    "mongo",
    "redis",
    "memcached",
    "mysql",
    "postgres",
    "rabbitmq",
    "consul",
    "jaeger",
    "loadgenerator",
    "catalogue-db",
    "cassandra",
    "kafka",
    "zookeeper",
    "etcd",
)


@dataclass(frozen=True)
class StackContext:
    """What a stack factory gets: the application, the cluster spec, the run's seed and its configuration
    (minutes, step, start-up delay); ``parts``: overrides of a learned stack's parts by name (``placement``,
    ``autoscaler``, ``intent_policy``), which training uses to run the policies it is training inside the stack
    exactly as it is served (empty: the stack's committed bundles); ``params``: the values of the stack's knobs
    given in its name (``name@knob=value,...``, validated against :attr:`StackInfo.knobs`; empty = the stack's
    defaults); ``rps``: (T,) the run's user request rate per minute (req/s), for stacks with foresight (the
    offline reference); None when the caller does not know it; ``bundles``: the bundles root the learned stacks load
    from, laid out like ``policy/bundles`` (``<stack>/{low,high}``, ``drpc``, ``encoder``; training seed N under
    ``seeds/N``), e.g. what ``hrl-policy train --app`` wrote (``--bundles`` of ``hrl-policy simulate`` and
    ``python -m policy.bench``); None: the committed ``policy/bundles``."""

    app: AppSpec
    cluster: ClusterSpec
    seed: int = 0
    config: SimConfig = field(default_factory=SimConfig)
    parts: Mapping[str, Any] = field(default_factory=dict)
    params: Mapping[str, float] = field(default_factory=dict)
    rps: Any = None
    bundles: Path | None = None


@dataclass(frozen=True)
class Knob:
    """A stack parameter set in its name (``default-kube-scheduler+hpa@target=0.6``): ``name``, the closed
    range ``[lo, hi]`` of its values, whether it is an integer, and what it means (with its unit)."""

    name: str
    lo: float
    hi: float
    integer: bool = False
    help: str = ""

    def check(self, stack: str, value: float) -> float | int:
        """The value, validated. Raises ValueError naming the stack, the knob and the value."""
        if not math.isfinite(value) or not self.lo <= value <= self.hi:
            raise ValueError(f"stack {stack!r}: knob {self.name}={value:g} is outside [{self.lo:g}, {self.hi:g}]")
        if self.integer:
            if value != int(value):
                raise ValueError(f"stack {stack!r}: knob {self.name}={value:g} must be an integer")
            return int(value)
        return float(value)


#: The knob every learned stack takes: which training seed's bundles it runs (``hrl-scheduler@tseed=1``; the bench's
#: spread across training seeds, :mod:`policy.bench.spread`).
TRAINING_SEED_KNOB = Knob(
    "tseed",
    0,
    999,
    integer=True,
    help="training seed of the bundles: 0 the committed policy/bundles/<stack>, N policy/bundles/seeds/N/<stack> "
    "(under --bundles DIR: DIR/<stack>, DIR/seeds/N/<stack>)",
)


#: The knob of the stacks whose replica targets come from the intent (:class:`policy.highlevel.IntentAutoscaler`): the
#: share of a Burstable pod's headroom above its request counted as capacity (``hrl-scheduler@burst=1``).
BURST_KNOB = Knob(
    "burst",
    0.0,
    1.0,
    help="share of a Burstable pod's CPU room (limit - request, at most its node's unused CPU) its replica target "
    "counts as capacity: 0 the request (as an HPA), 1 all the room",
)


#: The knob of the same stacks that bounds the forecast factor of their replica targets from below
#: (:attr:`policy.highlevel.IntentAutoscaler.forecast_min`; ``hrl-ensemble@forecast_min=1``).
FORECAST_MIN_KNOB = Knob(
    "forecast_min",
    0.5,
    1.0,
    help="lowest forecast factor of the replica targets: 0.5 a predicted fall may halve the demand they plan for, "
    "1 the forecast only adds capacity",
)


#: The knob of the same stacks that sets a pod's usage target against its reachable limit
#: (:attr:`policy.highlevel.IntentAutoscaler.limit_target`; ``hrl-ensemble@limit_target=0.3``).
LIMIT_TARGET_KNOB = Knob(
    "limit_target",
    0.0,
    0.9,
    help="a replica target plans each pod for the larger of its capacity target of the request and this share of "
    "the CPU it can reach (request + room to its limit, at most its node's unused CPU), on calm services only; "
    "served 0.2, 0: off",
)


#: The knob of the same stacks that forecasts an entry service's replica target from its measured arrivals
#: (:attr:`policy.highlevel.IntentAutoscaler.entry_forecast`; ``hrl-ensemble@entry_forecast=1``).
ENTRY_FORECAST_KNOB = Knob(
    "entry_forecast",
    0,
    1,
    integer=True,
    help="1: an entry service's replica target is forecast from its measured arrivals (users' requests are no "
    "call-graph edge); 0: an entry service is planned without a forecast",
)


#: The knobs of the intent's autoscaler (:class:`policy.highlevel.IntentAutoscaler`), which every stack whose replica
#: targets come from the learned intent takes (and refuses where they do not).
INTENT_AUTOSCALER_KNOBS = (BURST_KNOB, FORECAST_MIN_KNOB, ENTRY_FORECAST_KNOB, LIMIT_TARGET_KNOB)


def training_seed(ctx: StackContext) -> int:
    """The training seed a stack's name set (knob ``tseed`` of :data:`TRAINING_SEED_KNOB`; 0 when absent)."""
    return int(ctx.params.get("tseed", 0))


@dataclass
class StackBuild:
    """What a stack factory returns. ``close()`` (optional) releases what the stack started (servers,
    threads) after the run; ``counters()`` (optional) returns the run's counts the stack keeps itself (e.g. how
    often each guardrail fired), copied into ``SimResult.extra["counters"]`` by :func:`run_stack`;
    ``before_minute(sim)`` (optional): a driver the simulation calls between minutes
    (:attr:`policy.sim.engine.Simulation.before_minute`), e.g. a lookahead controller that forks the run;
    ``handles``: the stack's parts by name for callers that drive or read them (e.g. ``planner``, ``oracle``)."""

    scheduler: KubeSchedulerModel
    hooks: tuple[PeriodicHook, ...] = ()
    scheduler_name: str = "default-scheduler"
    on_change: Callable[[ClusterSnapshot], None] | None = None
    close: Callable[[], None] | None = None
    counters: Callable[[], Mapping[str, float]] | None = None
    before_minute: Callable[[Simulation], None] | None = None
    handles: Mapping[str, Any] = field(default_factory=dict)

    def simulation(self, app: AppSpec, rps: Any, cluster: ClusterSpec, config: SimConfig) -> Simulation:
        """The :class:`~policy.sim.engine.Simulation` of one run of this stack (its scheduler, hooks, ``on_change``
        and driver) over ``app``, ``rps`` ((T,) or (T, apps) req/s), ``cluster`` and ``config``."""
        sim = Simulation(
            app,
            rps,
            cluster,
            self.scheduler,
            config,
            hooks=self.hooks,
            on_change=self.on_change,
            scheduler_name=self.scheduler_name,
        )
        sim.before_minute = self.before_minute
        return sim


StackFactory = Callable[[StackContext], StackBuild]


@dataclass(frozen=True)
class StackInfo:
    """A registered stack: ``name``, its ``factory``, a one-line ``description``, where it comes from
    (``builtin`` or ``entry point <module:attr>``) and the ``knobs`` its name may set (none for entry points)."""

    name: str
    factory: StackFactory
    description: str = ""
    origin: str = "builtin"
    knobs: tuple[Knob, ...] = ()


_BUILTIN: dict[str, StackInfo] = {}


def registered_stacks() -> Mapping[str, StackInfo]:
    """The stacks registered with :func:`register_stack` so far, by name, in registration order (read-only)."""
    return MappingProxyType(_BUILTIN)


def register_stack(
    name: str, description: str = "", knobs: Sequence[Knob] = ()
) -> Callable[[StackFactory], StackFactory]:
    """Register a built-in stack factory under ``name`` (decorator) with the ``knobs`` its name may set.
    Raises ValueError when the name is taken or holds ``@``."""

    def deco(fn: StackFactory) -> StackFactory:
        if name in _BUILTIN:
            raise ValueError(f"stack {name!r} registered twice")
        if "@" in name:
            raise ValueError(f"stack {name!r}: '@' separates a stack's name from its knobs")
        desc = description or (fn.__doc__ or "").strip().split("\n")[0]
        _BUILTIN[name] = StackInfo(name, fn, desc, knobs=tuple(knobs))
        return fn

    return deco


def parse_stack_name(name: str) -> tuple[str, dict[str, float]]:
    """``"base@k=v,k2=v2"`` → ``("base", {"k": v, "k2": v2})`` (values as floats; no ``@``: no knobs).
    Raises ValueError naming the part that is not ``knob=number``, or a knob given twice."""
    base, sep, rest = name.partition("@")
    if not base:
        raise ValueError(f"stack {name!r}: empty stack name before '@'")
    params: dict[str, float] = {}
    if not sep:
        return base, params
    for part in rest.split(","):
        k, eq, v = part.partition("=")
        k = k.strip()
        try:
            x = float(v)
        except ValueError:
            x = math.nan
        if not eq or not k or not math.isfinite(x):
            raise ValueError(f"stack {name!r}: knob {part!r} is not knob=number")
        if k in params:
            raise ValueError(f"stack {name!r}: knob {k} given twice")
        params[k] = x
    return base, params


def stack_name(base: str, params: Mapping[str, float]) -> str:
    """The canonical name of ``base`` with ``params`` (knobs sorted, values in ``%g``): the name the bench
    reports and ``hrl-policy simulate --policy`` accepts."""
    if not params:
        return base
    return base + "@" + ",".join(f"{k}={params[k]:g}" for k in sorted(params))


def check_knobs(info: StackInfo, name: str, params: Mapping[str, float]) -> dict[str, float]:
    knobs = {k.name: k for k in info.knobs}
    out: dict[str, float] = {}
    for k, v in params.items():
        if k not in knobs:
            known = ", ".join(sorted(knobs)) or "none"
            raise ValueError(f"stack {name!r}: unknown knob {k!r} for {info.name} (knobs: {known})")
        out[k] = knobs[k].check(name, v)
    return out


# ---- helpers shared by the built-in stacks ---------------------------------------------------------------


def terms_lookup(app: AppSpec):
    """The pods' affinity/spread terms from the app's pod templates (keyed by service)."""
    return terms_by_service(app.deployments, lambda o: parse_workload(o).service)


def workload_key(obj: Mapping[str, Any], namespace: str = "default") -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or namespace}/{meta['name']}"


def autoscaled_workloads(app: AppSpec) -> list[str]:
    """``namespace/name`` of the workloads an autoscaler manages: those with a CPU request whose containers
    are not data stores or infrastructure (:data:`NOT_AUTOSCALED_IMAGES`)."""
    out = []
    for obj, w in zip(app.deployments, app.workloads):
        if w.pod_requests.cpu_m <= 0:
            continue
        images = [
            str(c.get("image", ""))
            for c in (((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
        ]
        names = [i.rsplit("/", 1)[-1].split(":")[0] for i in images] + [w.name]
        if any(k in n for n in names for k in NOT_AUTOSCALED_IMAGES):
            continue
        out.append(workload_key(obj))
    return out


@dataclass(frozen=True)
class PodView:
    """A pod as a controller sees it in the simulation: its info (with measured usage), its workload key,
    whether it is bound, when it became (or becomes) Ready, and whether the last minute measured it."""

    info: PodInfo
    workload: str
    bound: bool
    ready_at_s: float
    start_s: float | None
    has_metric: bool


def pod_views(sim: Simulation) -> list[PodView]:
    """The live pods of ``sim`` with readiness and metric availability (the metrics are those of the last
    simulated step: a pod has one when it was Ready at that step's middle).

    Reads ``SimCluster.live_pods()`` and ``SimPod.ready_at_s`` / ``node`` / ``workload`` (the simulator's
    own readiness bookkeeping; the snapshot does not carry readiness)."""
    snap = sim.observe()
    usage = {p.key: p for p in snap.pods}
    step = sim.config.step_s
    out = []
    for sp in sim.cluster.live_pods():
        info = usage.get(sp.info.key, sp.info)
        bound = sp.node >= 0
        start = sp.ready_at_s - sim.config.startup_delay_s if bound else None
        has_metric = bound and sim.now_s > 0 and sp.ready_at_s <= sim.now_s - step / 2
        out.append(PodView(info, sp.workload, bound, sp.ready_at_s if bound else math.inf, start, has_metric))
    return out


def current_replicas(sim: Simulation, workload: str) -> int:
    """The workload's spec.replicas (the scale subresource's current value)."""
    return int(sim.cluster.replicas[workload])
