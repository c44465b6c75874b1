"""The built-in baseline stacks of the simulator (what users run today), registered by name with
:func:`~policy.sim.stackbase.register_stack`; :mod:`policy.sim.stacks` lists every stack.

========================================  ==============================================================
``default-kube-scheduler``                default profile, manifest replicas, no descheduler
``default-kube-scheduler+hpa``            default profile + an HPA (CPU 80 %, 1-10) per scalable workload
``networkaware``                          scheduler-plugins NetworkOverhead (AppGroup from the call graph)
``trimaran-tlp``                          scheduler-plugins Trimaran TargetLoadPacking (target 40 %)
``descheduler-lownodeutilization``        default profile + descheduler LowNodeUtilization and
                                          RemoveDuplicates every 5 minutes
``threshold-autoscaler``                  default profile + the tuned threshold autoscaler
========================================  ==============================================================
"""

from __future__ import annotations

from policy.baselines.hpa import HorizontalPodAutoscaler, HPASpec, PodSample
from policy.baselines.kube_default import (
    InterPodAffinity,
    NodeAffinity,
    NodeResourcesBalancedAllocation,
    PodTopologySpread,
    TaintToleration,
    default_score_plugins,
)
from policy.baselines.kube_descheduler import LowNodeUtilization, RemoveDuplicates
from policy.baselines.networkaware import AppGroup, InTreeFilterExtender, NetworkOverhead, NetworkTopology
from policy.baselines.threshold import ThresholdAutoscaler, ThresholdParams, load_params
from policy.baselines.trimaran import TargetLoadPacking
from policy.index import ClusterIndex
from policy.state import ClusterSnapshot, PodInfo

from .app import AppSpec
from .engine import PeriodicHook, Simulation
from .kube_scheduler import KubeSchedulerModel
from .stackbase import (
    AUTOSCALER_PERIOD_MIN,
    DESCHEDULER_PERIOD_MIN,
    Knob,
    StackBuild,
    StackContext,
    autoscaled_workloads,
    current_replicas,
    pod_views,
    register_stack,
    terms_lookup,
)

__all__ = [
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
    "BENCH_STACKS",
]


@register_stack("default-kube-scheduler", "kube-scheduler's default profile, manifest replicas, no descheduler")
def default_kube_scheduler(ctx: StackContext) -> StackBuild:
    """kube-scheduler's default profile (all default score plugins and weights), fixed replicas."""
    return StackBuild(KubeSchedulerModel(plugins=default_score_plugins(terms_lookup(ctx.app))))


def hpa_hook(app: AppSpec, spec=None) -> PeriodicHook:
    """One HPA per autoscaled workload (:func:`autoscaled_workloads`), synced every simulated minute."""
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
