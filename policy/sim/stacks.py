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
========================================  ==============================================================

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
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from policy.index import ClusterIndex
from policy.observe import parse_workload
from policy.state import ClusterSnapshot, PodInfo

from .app import AppSpec
from .engine import ClusterSpec, PeriodicHook, SimConfig, Simulation
from .kube_scheduler import KubeSchedulerModel

__all__ = [
    "ENTRY_POINT_GROUP",
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
    exactly as it is served (empty: the stack's committed bundles)."""

    app: AppSpec
    cluster: ClusterSpec
    seed: int = 0
    config: SimConfig = field(default_factory=SimConfig)
    parts: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class StackBuild:
    """What a stack factory returns. ``close()`` (optional) releases what the stack started (servers,
    threads) after the run."""

    scheduler: KubeSchedulerModel
    hooks: tuple[PeriodicHook, ...] = ()
    scheduler_name: str = "default-scheduler"
    on_change: Callable[[ClusterSnapshot], None] | None = None
    close: Callable[[], None] | None = None


StackFactory = Callable[[StackContext], StackBuild]


@dataclass(frozen=True)
class StackInfo:
    """A registered stack: ``name``, its ``factory``, a one-line ``description`` and where it comes from
    (``builtin`` or ``entry point <module:attr>``)."""

    name: str
    factory: StackFactory
    description: str = ""
    origin: str = "builtin"


_BUILTIN: dict[str, StackInfo] = {}


def register_stack(name: str, description: str = "") -> Callable[[StackFactory], StackFactory]:
    """Register a built-in stack factory under ``name`` (decorator). Raises ValueError when taken."""

    def deco(fn: StackFactory) -> StackFactory:
        if name in _BUILTIN:
            raise ValueError(f"stack {name!r} registered twice")
        _BUILTIN[name] = StackInfo(name, fn, description or (fn.__doc__ or "").strip().split("\n")[0])
        return fn

    return deco


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
    """The stack called ``name``. Raises ValueError listing the known names when there is none."""
    if name in _BUILTIN:
        return _BUILTIN[name]
    stacks = available_stacks()
    if name not in stacks:
        raise ValueError(f"policy: unknown stack {name!r} (known: {', '.join(sorted(stacks))})")
    return stacks[name]


def build_stack(name: str, ctx: StackContext) -> StackBuild:
    """Build stack ``name`` for one run. Raises ValueError for an unknown name or a factory that does not
    return a :class:`StackBuild`."""
    info = get_stack(name)
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
):
    """Build stack ``name`` and run one simulation; returns the :class:`~policy.sim.engine.SimResult`."""
    built = build_stack(name, StackContext(app, cluster, config.seed, config))
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
        return sim.run(progress)
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


@register_stack("default-kube-scheduler+hpa", "default profile + HPA (CPU 80 %, 1-10 replicas) per workload")
def default_kube_scheduler_hpa(ctx: StackContext) -> StackBuild:
    """kube-scheduler's default profile + a HorizontalPodAutoscaler (80 % CPU of requests, 1-10 replicas,
    tolerance 0.1, 300 s scale-down stabilization) on every stateless workload."""
    built = default_kube_scheduler(ctx)
    built.hooks = (hpa_hook(ctx.app),)
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


@register_stack("threshold-autoscaler", "default profile + the tuned threshold autoscaler")
def threshold_autoscaler(ctx: StackContext) -> StackBuild:
    """kube-scheduler's default profile + the threshold autoscaler tuned for the app
    (policy/baselines/threshold.py; parameters in the app's threshold-autoscaler.yaml)."""
    built = default_kube_scheduler(ctx)
    built.hooks = (threshold_hook(ctx.app),)
    return built


def descheduler_hook(period_min: int = DESCHEDULER_PERIOD_MIN) -> PeriodicHook:
    """kubernetes-sigs/descheduler with RemoveDuplicates then LowNodeUtilization (the README's example
    thresholds), evicting through the simulation's Eviction API."""
    from policy.baselines.kube_descheduler import LowNodeUtilization, RemoveDuplicates

    plugins = (RemoveDuplicates(), LowNodeUtilization())

    def run(sim: Simulation) -> None:
        def evict(pod: PodInfo, reason: str) -> bool:
            return sim.evictor.evict(pod, reason).outcome == "evicted"

        for pl in plugins:
            pl.balance(sim.observe(), evict)

    return PeriodicHook("descheduler", period_min, run)


@register_stack(
    "descheduler-lownodeutilization",
    "default profile + descheduler LowNodeUtilization and RemoveDuplicates every 5 min",
)
def descheduler_lownodeutilization(ctx: StackContext) -> StackBuild:
    """kube-scheduler's default profile + kubernetes-sigs/descheduler (RemoveDuplicates, LowNodeUtilization
    with thresholds 20 % / targets 50 % of cpu, memory, pods) every 5 simulated minutes."""
    built = default_kube_scheduler(ctx)
    built.hooks = (descheduler_hook(),)
    return built


@register_stack("networkaware", "scheduler-plugins NetworkOverhead (AppGroup from the call graph)")
def networkaware(ctx: StackContext) -> StackBuild:
    """scheduler-plugins' network-aware profile: NetworkOverhead (weight 5, filter + score) with an AppGroup
    built from the app's call graph and a NetworkTopology of the cluster's zones (cross-zone cost 10),
    BalancedAllocation 1, NodeResourcesFit scoring disabled; the other default plugins keep their weights."""
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
        AppGroup.from_graph(ctx.app.graph, ctx.app.name), NetworkTopology.uniform(ctx.cluster.zones, zone_cost=10)
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
    return StackBuild(KubeSchedulerModel(plugins=plugins, extenders=[ext]), on_change=on_change)


@register_stack("trimaran-tlp", "scheduler-plugins Trimaran TargetLoadPacking (target 40 %)")
def trimaran_tlp(ctx: StackContext) -> StackBuild:
    """scheduler-plugins Trimaran profile: TargetLoadPacking (weight 1, target 40 %) on measured node CPU,
    NodeResourcesBalancedAllocation and NodeResourcesFit scoring disabled; the load watcher reports every
    simulated minute."""
    from policy.baselines.kube_default import InterPodAffinity, NodeAffinity, PodTopologySpread, TaintToleration
    from policy.baselines.trimaran import TargetLoadPacking

    terms = terms_lookup(ctx.app)
    tlp = TargetLoadPacking()

    def metrics(sim: Simulation) -> None:
        tlp.window.mark(sim.observe())

    plugins = [TaintToleration(), NodeAffinity(terms), PodTopologySpread(terms), InterPodAffinity(terms), tlp]
    return StackBuild(KubeSchedulerModel(plugins=plugins), hooks=(PeriodicHook("load-watcher", 1, metrics),))


#: The stacks `make bench` compares, in table order.
BENCH_STACKS = (
    "default-kube-scheduler",
    "default-kube-scheduler+hpa",
    "networkaware",
    "trimaran-tlp",
    "descheduler-lownodeutilization",
    "threshold-autoscaler",
)
