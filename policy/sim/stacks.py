"""Whole scheduling stacks (placement + rebalancing + scaling) for the simulator, by name: what `make bench`
compares and ``hrl-policy simulate --policy NAME`` runs.

A stack is a factory ``factory(ctx: StackContext) -> StackBuild``: given the application, the cluster spec
and the seed of the run, it builds kube-scheduler's profile (:class:`KubeSchedulerModel`: score plugins and
extenders), the controllers that run inside the simulation (:class:`PeriodicHook`: descheduler,
autoscalers) and, when its extenders need the cluster state, an ``on_change(snapshot)`` callback the
simulation calls before every scheduling cycle.

Built-in stacks (baselines users run today):

========================================  ==============================================================
``default-kube-scheduler``                default profile, manifest replicas, no descheduler
``default-kube-scheduler+hpa``            default profile + an HPA (CPU 80 %, 1-10) per scalable workload
``networkaware``                          scheduler-plugins NetworkOverhead (AppGroup from the call graph)
``trimaran-tlp``                          scheduler-plugins Trimaran TargetLoadPacking (target 40 %)
``descheduler-lownodeutilization``        default profile + descheduler LowNodeUtilization and
                                          RemoveDuplicates every 5 minutes
``threshold-autoscaler``                  default profile + the tuned threshold autoscaler
``offline-reference``                     perfect-foresight autoscaling + MIP placement (HiGHS): the bench's
                                          upper bound (:mod:`policy.sim.reference`; not a contender)
========================================  ==============================================================

A name may set the stack's knobs (:class:`Knob`, :attr:`StackInfo.knobs`): ``NAME@knob=value,...``, e.g.
``default-kube-scheduler+hpa@target=0.6`` (HPA target 60 %), ``networkaware@hpa=0.8,weight=20``; a knob left out
keeps its default, so the plain name and the name with every default give the same run, bit for bit.

More stacks come from the entry-point group ``hrl_scheduler.stacks``: each entry point names a stack and
points at its factory. A package adds one in its ``pyproject.toml``::

    [project.entry-points."hrl_scheduler.stacks"]
    my-stack = "my_package.stacks:build_my_stack"

and ``hrl-policy simulate --policy my-stack`` / ``python -m policy.bench`` run it without any change here
(the learned stacks of hrl-scheduler register the same way, from the ``descheduler`` package, which may
import ``policy``; this module never imports ``descheduler`` or ``extender``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import metadata
from typing import Any

import numpy as np

from policy.index import ClusterIndex
from policy.observe import parse_workload
from policy.state import ClusterSnapshot, PodInfo

from .app import AppSpec
from .engine import ClusterSpec, PeriodicHook, SimConfig, Simulation
from .kube_scheduler import KubeSchedulerModel

__all__ = [
    "ENTRY_POINT_GROUP",
    "Knob",
    "parse_stack_name",
    "stack_name",
    "DESCHEDULER_PERIOD_MIN",
    "AUTOSCALER_PERIOD_MIN",
    "NOT_AUTOSCALED_IMAGES",
    "StackContext",
    "StackBuild",
    "StackFactory",
    "StackInfo",
    "register_stack",
    "available_stacks",
    "get_stack",
    "build_stack",
    "run_stack",
    "terms_lookup",
    "workload_key",
    "autoscaled_workloads",
    "PodView",
    "pod_views",
    "current_replicas",
    "default_kube_scheduler",
    "hpa_hook",
    "default_kube_scheduler_hpa",
    "threshold_hook",
    "threshold_autoscaler",
    "descheduler_hook",
    "descheduler_lownodeutilization",
    "networkaware",
    "trimaran_tlp",
    "HPA_KNOB",
    "offline_reference",
    "REFERENCE_STACKS",
    "BENCH_STACKS",
]

ENTRY_POINT_GROUP = "hrl_scheduler.stacks"
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
    offline reference); None when the caller does not know it."""

    app: AppSpec
    cluster: ClusterSpec
    seed: int = 0
    config: SimConfig = field(default_factory=SimConfig)
    parts: Mapping[str, Any] = field(default_factory=dict)
    params: Mapping[str, float] = field(default_factory=dict)
    rps: Any = None


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


@dataclass
class StackBuild:
    """What a stack factory returns. ``close()`` (optional) releases what the stack started (servers,
    threads) after the run; ``counters()`` (optional) returns the run's counts the stack keeps itself (e.g. how
    often each guardrail fired), copied into ``SimResult.extra["counters"]`` by :func:`run_stack`."""

    scheduler: KubeSchedulerModel
    hooks: tuple[PeriodicHook, ...] = ()
    scheduler_name: str = "default-scheduler"
    on_change: Callable[[ClusterSnapshot], None] | None = None
    close: Callable[[], None] | None = None
    counters: Callable[[], Mapping[str, float]] | None = None


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


def _checked_params(info: StackInfo, name: str, params: Mapping[str, float]) -> dict[str, float]:
    knobs = {k.name: k for k in info.knobs}
    out: dict[str, float] = {}
    for k, v in params.items():
        if k not in knobs:
            known = ", ".join(sorted(knobs)) or "none"
            raise ValueError(f"stack {name!r}: unknown knob {k!r} for {info.name} (knobs: {known})")
        out[k] = knobs[k].check(name, v)
    return out


def _entry_points() -> list[metadata.EntryPoint]:
    return list(metadata.entry_points(group=ENTRY_POINT_GROUP))


def available_stacks() -> dict[str, StackInfo]:
    """Every stack by name: the built-ins, then those of the ``hrl_scheduler.stacks`` entry points (loaded
    here). Raises ValueError when an entry point reuses a built-in name or cannot be loaded."""
    out = dict(_BUILTIN)
    for ep in _entry_points():
        if ep.name in _BUILTIN:
            raise ValueError(
                f"entry point {ep.name!r} ({ep.value}) of group {ENTRY_POINT_GROUP}: the name of a built-in stack"
            )
        try:
            fn = ep.load()
        except Exception as exc:
            raise ValueError(
                f"entry point {ep.name!r} ({ep.value}) of group {ENTRY_POINT_GROUP}: cannot load: {exc}"
            ) from exc
        if not callable(fn):
            raise ValueError(f"entry point {ep.name!r} ({ep.value}): not a callable stack factory")
        out[ep.name] = StackInfo(ep.name, fn, (fn.__doc__ or "").strip().split("\n")[0], f"entry point {ep.value}")
    return out


def get_stack(name: str) -> StackInfo:
    """The stack called ``name`` (``base`` or ``base@knob=value,...``; the knobs are validated). Raises
    ValueError listing the known names when there is none, or naming a bad knob or value."""
    base, params = parse_stack_name(name)
    if base in _BUILTIN:
        info = _BUILTIN[base]
    else:
        stacks = available_stacks()
        if base not in stacks:
            raise ValueError(f"policy: unknown stack {base!r} (known: {', '.join(sorted(stacks))})")
        info = stacks[base]
    _checked_params(info, name, params)
    return info


def build_stack(name: str, ctx: StackContext) -> StackBuild:
    """Build stack ``name`` (``base@knob=value,...`` sets knobs, see :class:`Knob`) for one run. Raises
    ValueError for an unknown name, a bad knob, or a factory that does not return a :class:`StackBuild`."""
    info = get_stack(name)
    params = _checked_params(info, name, parse_stack_name(name)[1])
    if params or ctx.params:
        ctx = replace(ctx, params=params)
    built = info.factory(ctx)
    if not isinstance(built, StackBuild):
        raise ValueError(
            f"stack {name!r} ({info.origin}): factory returned {type(built).__name__}, "
            "expected policy.sim.stacks.StackBuild"
        )
    return built


def run_stack(
    name: str,
    app: AppSpec,
    rps: Sequence[float],
    cluster: ClusterSpec,
    config: SimConfig,
    progress: Callable[[int], None] | None = None,
    on_minute: Callable[[Simulation], None] | None = None,
):
    """Build stack ``name`` and run one simulation; returns the :class:`~policy.sim.engine.SimResult`.
    ``progress(minute)`` after each minute; ``on_minute(sim)`` too, to read the simulation's state (it must
    not change it)."""
    built = build_stack(name, StackContext(app, cluster, config.seed, config, rps=np.asarray(rps, dtype=np.float64)))
    try:
        sim = Simulation(
            app,
            rps,
            cluster,
            built.scheduler,
            config,
            hooks=built.hooks,
            on_change=built.on_change,
            scheduler_name=built.scheduler_name,
        )
        if on_minute is None:
            res = sim.run(progress)
        else:
            sim.start()
            while sim.minute < config.minutes:
                m = sim.minute
                sim.advance()
                on_minute(sim)
                if progress is not None:
                    progress(m)
            res = sim.result()
        if built.counters is not None:
            res.extra["counters"] = {str(k): float(v) for k, v in built.counters().items()}
        return res
    finally:
        if built.close is not None:
            built.close()


# ---- helpers shared by the built-in stacks ---------------------------------------------------------------


def terms_lookup(app: AppSpec):
    """The pods' affinity/spread terms from the app's pod templates (keyed by service)."""
    from policy.baselines.affinity import terms_by_service

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


# ---- the built-in stacks ---------------------------------------------------------------------------------


@register_stack("default-kube-scheduler", "kube-scheduler's default profile, manifest replicas, no descheduler")
def default_kube_scheduler(ctx: StackContext) -> StackBuild:
    """kube-scheduler's default profile (all default score plugins and weights), fixed replicas."""
    from policy.baselines.kube_default import default_score_plugins

    return StackBuild(KubeSchedulerModel(plugins=default_score_plugins(terms_lookup(ctx.app))))


def hpa_hook(app: AppSpec, spec=None) -> PeriodicHook:
    """One HPA per autoscaled workload (:func:`autoscaled_workloads`), synced every simulated minute."""
    from policy.baselines.hpa import HorizontalPodAutoscaler, HPASpec, PodSample

    spec = spec or HPASpec()
    hpas = {w: HorizontalPodAutoscaler(spec) for w in autoscaled_workloads(app)}

    def sync(sim: Simulation) -> None:
        by_workload: dict[str, list[PodSample]] = {w: [] for w in hpas}
        for v in pod_views(sim):
            if v.workload not in by_workload:
                continue
            ready = v.bound and v.ready_at_s <= sim.now_s
            usage = (float(v.info.usage.cpu_m) if v.info.usage is not None else 0.0) if v.has_metric else None
            by_workload[v.workload].append(
                PodSample(
                    name=v.info.key,
                    phase="Running" if v.bound else "Pending",
                    cpu_request_m=v.info.requests.cpu_m,
                    ready=ready,
                    ready_changed_s=v.ready_at_s if ready else (v.start_s or 0.0),
                    start_s=v.start_s,
                    cpu_usage_m=usage,
                    metric_s=sim.now_s,
                    metric_window_s=sim.config.step_s,
                    terminating=v.info.terminating,
                )
            )
        for w, hpa in hpas.items():
            cur = current_replicas(sim, w)
            new = hpa.reconcile(cur, by_workload[w], sim.now_s)
            if new != cur:
                sim.scale(w, new)

    return PeriodicHook("hpa", AUTOSCALER_PERIOD_MIN, sync)


#: The knob of every stack that can run with an HPA instead of the manifest replicas.
HPA_KNOB = Knob("hpa", 0.05, 5.0, help="add an HPA per autoscaled workload with this CPU target (fraction of requests)")


def _hpa_spec(target: float):
    from policy.baselines.hpa import HPASpec

    return HPASpec(target_cpu_utilization_pct=int(round(100 * target)))


def _with_hpa(ctx: StackContext, built: StackBuild) -> StackBuild:
    """``built`` plus an HPA per autoscaled workload when the ``hpa`` knob is set (synced before the
    stack's own hooks)."""
    if "hpa" in ctx.params:
        built.hooks = (hpa_hook(ctx.app, _hpa_spec(ctx.params["hpa"])), *built.hooks)
    return built


@register_stack(
    "default-kube-scheduler+hpa",
    "default profile + HPA (CPU 80 %, 1-10 replicas) per workload",
    knobs=(Knob("target", 0.05, 5.0, help="CPU target utilization, fraction of requests (HPA: 0.8 = 80 %)"),),
)
def default_kube_scheduler_hpa(ctx: StackContext) -> StackBuild:
    """kube-scheduler's default profile + a HorizontalPodAutoscaler (80 % CPU of requests, or the ``target``
    knob; 1-10 replicas, tolerance 0.1, 300 s scale-down stabilization) on every stateless workload."""
    built = default_kube_scheduler(ctx)
    spec = _hpa_spec(ctx.params["target"]) if "target" in ctx.params else None
    built.hooks = (hpa_hook(ctx.app, spec),)
    return built


def threshold_hook(app: AppSpec, params=None) -> PeriodicHook:
    """The threshold autoscaler on every autoscaled workload, every simulated minute, with the app's tuned
    parameters (``threshold-autoscaler.yaml`` next to its app.yaml) unless ``params`` is given."""
    from policy.baselines.threshold import ThresholdAutoscaler, load_params

    ctl = ThresholdAutoscaler(params or load_params(app.source))
    workloads = autoscaled_workloads(app)

    def sync(sim: Simulation) -> None:
        use: dict[str, float] = dict.fromkeys(workloads, 0.0)
        req: dict[str, float] = dict.fromkeys(workloads, 0.0)
        for v in pod_views(sim):
            if v.workload in use and v.has_metric and v.info.usage is not None:
                use[v.workload] += v.info.usage.cpu_m
                req[v.workload] += v.info.requests.cpu_m
        for w in workloads:
            cur = current_replicas(sim, w)
            util = use[w] / req[w] if req[w] > 0 else None
            new = ctl.decide(w, cur, util, sim.now_s / 60.0)
            if new != cur:
                sim.scale(w, new)

    return PeriodicHook("threshold-autoscaler", AUTOSCALER_PERIOD_MIN, sync)


@register_stack(
    "threshold-autoscaler",
    "default profile + the tuned threshold autoscaler",
    knobs=(
        Knob("u_hi", 0.01, 10.0, help="scale out above this CPU utilization (fraction of requests)"),
        Knob("u_lo", 0.0, 10.0, help="scale in below this CPU utilization (fraction of requests)"),
        Knob("step_out", 1, 100, integer=True, help="replicas added per action"),
        Knob("step_in", 1, 100, integer=True, help="replicas removed per action"),
        Knob("cooldown_min", 0, 1440, integer=True, help="minutes without action after one (per workload)"),
    ),
)
def threshold_autoscaler(ctx: StackContext) -> StackBuild:
    """kube-scheduler's default profile + the threshold autoscaler tuned for the app
    (policy/baselines/threshold.py; parameters in the app's threshold-autoscaler.yaml); knobs override the
    tuned values one by one."""
    built = default_kube_scheduler(ctx)
    params = None
    if ctx.params:
        from policy.baselines.threshold import ThresholdParams, load_params

        tuned = load_params(ctx.app.source).model_dump(exclude={"tuning"})
        try:
            params = ThresholdParams(**{**tuned, **ctx.params})
        except ValueError as exc:
            msg = " ".join(str(exc).split())
            raise ValueError(f"stack threshold-autoscaler: knobs {dict(ctx.params)}: {msg}") from None
    built.hooks = (threshold_hook(ctx.app, params),)
    return built


def descheduler_hook(
    period_min: int = DESCHEDULER_PERIOD_MIN, low_pct: float | None = None, high_pct: float | None = None
) -> PeriodicHook:
    """kubernetes-sigs/descheduler with RemoveDuplicates then LowNodeUtilization (the README's example
    thresholds 20 % / targets 50 %, or ``low_pct`` / ``high_pct`` for cpu, memory and pods), evicting through
    the simulation's Eviction API."""
    from policy.baselines.kube_descheduler import LowNodeUtilization, RemoveDuplicates

    lnu = LowNodeUtilization()
    if low_pct is not None or high_pct is not None:
        lo = 20.0 if low_pct is None else low_pct
        hi = 50.0 if high_pct is None else high_pct
        try:
            lnu = LowNodeUtilization(
                thresholds=dict.fromkeys(("cpu", "memory", "pods"), lo),
                target_thresholds=dict.fromkeys(("cpu", "memory", "pods"), hi),
            )
        except ValueError as exc:
            raise ValueError(f"stack descheduler-lownodeutilization: low={lo:g} %, high={hi:g} %: {exc}") from None
    plugins = (RemoveDuplicates(), lnu)

    def run(sim: Simulation) -> None:
        def evict(pod: PodInfo, reason: str) -> bool:
            return sim.evictor.evict(pod, reason).outcome == "evicted"

        for pl in plugins:
            pl.balance(sim.observe(), evict)

    return PeriodicHook("descheduler", period_min, run)


@register_stack(
    "descheduler-lownodeutilization",
    "default profile + descheduler LowNodeUtilization and RemoveDuplicates every 5 min",
    knobs=(
        Knob("low", 0.0, 1.0, help="LowNodeUtilization thresholds: underutilized at or below (fraction)"),
        Knob("high", 0.0, 1.0, help="LowNodeUtilization targetThresholds: overutilized above (fraction)"),
        HPA_KNOB,
    ),
)
def descheduler_lownodeutilization(ctx: StackContext) -> StackBuild:
    """kube-scheduler's default profile + kubernetes-sigs/descheduler (RemoveDuplicates, LowNodeUtilization
    with thresholds 20 % / targets 50 % of cpu, memory, pods, or the ``low`` / ``high`` knobs) every 5
    simulated minutes; the ``hpa`` knob adds an HPA."""
    built = default_kube_scheduler(ctx)
    p = ctx.params
    low = 100.0 * p["low"] if "low" in p else None
    high = 100.0 * p["high"] if "high" in p else None
    built.hooks = (descheduler_hook(low_pct=low, high_pct=high),)
    return _with_hpa(ctx, built)


@register_stack(
    "networkaware",
    "scheduler-plugins NetworkOverhead (AppGroup from the call graph)",
    knobs=(
        Knob("weight", 1, 100, integer=True, help="NetworkOverhead's score weight (upstream example: 5)"),
        Knob("zone_cost", 1, 100, integer=True, help="NetworkTopology cost between zones (default 10)"),
        HPA_KNOB,
    ),
)
def networkaware(ctx: StackContext) -> StackBuild:
    """scheduler-plugins' network-aware profile: NetworkOverhead (weight 5, filter + score) with an AppGroup
    built from the app's call graph and a NetworkTopology of the cluster's zones (cross-zone cost 10),
    BalancedAllocation 1, NodeResourcesFit scoring disabled; the other default plugins keep their weights.
    Knobs: ``weight``, ``zone_cost``, ``hpa`` (adds an HPA)."""
    from policy.baselines.kube_default import (
        InterPodAffinity,
        NodeAffinity,
        NodeResourcesBalancedAllocation,
        PodTopologySpread,
        TaintToleration,
    )
    from policy.baselines.networkaware import AppGroup, InTreeFilterExtender, NetworkOverhead, NetworkTopology

    terms = terms_lookup(ctx.app)
    overhead = NetworkOverhead(
        AppGroup.from_graph(ctx.app.graph, ctx.app.name),
        NetworkTopology.uniform(ctx.cluster.zones, zone_cost=int(ctx.params.get("zone_cost", 10))),
        weight=int(ctx.params.get("weight", 5)),
    )
    state: dict[str, ClusterIndex | None] = {"index": None}

    def on_change(snap: ClusterSnapshot) -> None:
        state["index"] = ClusterIndex.build(snap)

    plugins = [
        TaintToleration(),
        NodeAffinity(terms),
        PodTopologySpread(terms),
        InterPodAffinity(terms),
        NodeResourcesBalancedAllocation(),
        overhead,
    ]
    ext = InTreeFilterExtender(overhead, lambda: state["index"])
    return _with_hpa(ctx, StackBuild(KubeSchedulerModel(plugins=plugins, extenders=[ext]), on_change=on_change))


@register_stack(
    "trimaran-tlp",
    "scheduler-plugins Trimaran TargetLoadPacking (target 40 %)",
    knobs=(
        Knob("target", 0.01, 0.99, help="TargetLoadPacking targetUtilization, fraction of node CPU (default 0.4)"),
        HPA_KNOB,
    ),
)
def trimaran_tlp(ctx: StackContext) -> StackBuild:
    """scheduler-plugins Trimaran profile: TargetLoadPacking (weight 1, target 40 % or the ``target`` knob) on
    measured node CPU, NodeResourcesBalancedAllocation and NodeResourcesFit scoring disabled; the load watcher
    reports every simulated minute; the ``hpa`` knob adds an HPA."""
    from policy.baselines.kube_default import InterPodAffinity, NodeAffinity, PodTopologySpread, TaintToleration
    from policy.baselines.trimaran import TargetLoadPacking

    terms = terms_lookup(ctx.app)
    tlp = (
        TargetLoadPacking(target_utilization_pct=int(round(100 * ctx.params["target"])))
        if "target" in ctx.params
        else TargetLoadPacking()
    )

    def metrics(sim: Simulation) -> None:
        tlp.window.mark(sim.observe())

    plugins = [TaintToleration(), NodeAffinity(terms), PodTopologySpread(terms), InterPodAffinity(terms), tlp]
    built = StackBuild(KubeSchedulerModel(plugins=plugins), hooks=(PeriodicHook("load-watcher", 1, metrics),))
    return _with_hpa(ctx, built)


#: The stacks `make bench` compares, in table order.
BENCH_STACKS = (
    "default-kube-scheduler",
    "default-kube-scheduler+hpa",
    "networkaware",
    "trimaran-tlp",
    "descheduler-lownodeutilization",
    "threshold-autoscaler",
)


@register_stack(
    "offline-reference",
    "perfect-foresight autoscaling + MIP placement (HiGHS): the bench's upper bound",
    knobs=(Knob("price", 0.0, 1e6, help="price of a requested core, ms of mean user latency (default 30)"),),
)
def offline_reference(ctx: StackContext) -> StackBuild:
    """The offline reference (:mod:`policy.sim.reference`): replicas per minute chosen with perfect foresight
    of the request rates, placement planned by a MIP solved with HiGHS. Needs ``ctx.rps``."""
    from .reference import reference_stack

    return reference_stack(ctx)


#: Stacks that are yardsticks, not contenders: the bench runs them apart (never in the default stack list).
REFERENCE_STACKS = ("offline-reference",)
