"""The ``drpc`` baseline stack in the simulator: DRPC's student autoscaler (arXiv 2407.10169) on every
autoscaled workload, fed the per-service signals a service mesh would report."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from policy.bundle import BundleError, require_seed_bundle, training_seed_root
from policy.highlevel import DrpcAutoscaler, DrpcState, ServiceSignals

from .builtin_stacks import default_kube_scheduler
from .engine import PeriodicHook, Simulation
from .stackbase import (
    AUTOSCALER_PERIOD_MIN,
    TRAINING_SEED_KNOB,
    StackBuild,
    StackContext,
    autoscaled_workloads,
    register_stack,
    training_seed,
)

__all__ = ["signals_from_sim", "drpc_hook", "drpc_stack"]


# ---- the simulator's drpc stack ----------------------------------------------------------------------------


def signals_from_sim(sim: Simulation) -> dict[str, ServiceSignals]:
    """Per-service signals of the simulation's last minute (what a service mesh would report): arrivals
    (requests/s), mean visit latency (ms), refused share, and the p95 visit latency (ms) when the simulation keeps
    per-service percentiles (``SimConfig.per_service``; else None). Empty before the first minute."""
    last = sim.last
    if last is None:
        return {}
    st = last.step
    pos = sim.model.pos
    S = len(sim.model.services)
    idx = np.array([pos[p.info.service] for p in last.ready], dtype=np.int64)
    rps = np.bincount(idx, weights=st.pod_rps, minlength=S) if len(idx) else np.zeros(S)
    blocked = np.bincount(idx, weights=st.pod_rps * st.pod_blocked_frac, minlength=S) if len(idx) else np.zeros(S)
    visit = st.service_visit_ms if len(st.service_visit_ms) == S else np.zeros(S)
    pct = st.service_latency_ms if st.service_latency_ms is not None and len(st.service_latency_ms) == S else None

    def p95(i: int) -> float | None:
        return float(pct[i, 1]) if pct is not None and np.isfinite(pct[i, 1]) else None

    return {
        s: ServiceSignals(float(rps[i]), float(visit[i]), float(blocked[i] / rps[i]) if rps[i] > 0 else 0.0, p95(i))
        for s, i in pos.items()
    }


def drpc_hook(
    autoscaler: DrpcAutoscaler, workloads: Iterable[str], name: str = "drpc", period_min: int = 1
) -> PeriodicHook:
    """A :class:`~policy.sim.engine.PeriodicHook` running ``autoscaler`` on ``workloads`` every
    ``period_min`` simulated minutes with the simulator's service signals, scaling through ``sim.scale``."""
    keys = list(workloads)
    state = DrpcState()

    def sync(sim: Simulation) -> None:
        targets = autoscaler.replica_targets(sim.observe(), state, signals_from_sim(sim), keys)
        for w, n in targets.items():
            if n != int(sim.cluster.replicas[w]):
                sim.scale(w, n)

    return PeriodicHook(name, period_min, sync)


@register_stack("drpc", knobs=(TRAINING_SEED_KNOB,))
def drpc_stack(ctx: StackContext) -> StackBuild:
    """DRPC baseline: kube-scheduler's default profile + the DRPC student autoscaler (policy/bundles/drpc; knob
    ``tseed`` N: policy/bundles/seeds/N/drpc; under ``ctx.bundles`` when the run names another bundles root) on every
    autoscaled workload, every simulated minute. Raises :class:`policy.bundle.BundleMissing` for a training seed
    without its bundle."""
    tseed = training_seed(ctx)
    path = training_seed_root(tseed, ctx.bundles) / "drpc"
    if tseed:
        require_seed_bundle(path / "student", "drpc student", tseed)
    try:
        scaler = DrpcAutoscaler.load(path, spec="drpc", slo_p95_ms=ctx.app.slo_p95_ms)
    except BundleError as exc:
        raise ValueError(f"stack drpc: {exc} (train it with `hrl-policy train drpc`)") from None
    built = default_kube_scheduler(ctx)
    built.hooks = (drpc_hook(scaler, autoscaled_workloads(ctx.app), "drpc", AUTOSCALER_PERIOD_MIN),)
    return built
