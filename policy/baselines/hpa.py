"""The Kubernetes HorizontalPodAutoscaler (autoscaling/v2) on CPU utilisation, as the controller computes it.

Sources: k8s.io/kubernetes v1.36.3 pkg/controller/podautoscaler/replica_calculator.go (GetResourceReplicas,
groupPods, calculateRequests), metrics/utilization.go (GetResourceUtilizationRatio), horizontal.go
(reconcileAutoscaler, normalizeDesiredReplicasWithBehaviors, stabilizeRecommendationWithBehaviors,
convertDesiredReplicasWithBehaviorRate, calculateScale{Up,Down}Limit*), the autoscaling/v2 defaults
(pkg/apis/autoscaling/v2/defaults.go: scale-up stabilization 0 s, policies 100 % or 4 pods per 15 s, Max;
scale-down stabilization 300 s, policy 100 % per 15 s) and the documented algorithm
(https://kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/#algorithm-details):

    desiredReplicas = ceil(readyPods × currentUtilization / targetUtilization)

where utilisation is Σ CPU usage / Σ CPU requests of the pods with metrics, skipped when the ratio is within
the tolerance (0.1); pods being deleted or failed are ignored; Pending pods and pods still initialising
(within the CPU initialization period, 300 s, while not ready or whose latest metric window started before
they became ready) are "unready" and, when the result is a scale-up, counted at 0 %; pods without metrics
count at 0 % on a scale-up and at 100 % on a scale-down; the recomputed ratio must keep the direction.

The controller's sync period is 15 s; a simulation calls :meth:`HorizontalPodAutoscaler.reconcile` once per
simulated minute (its step), which the rate limits (per 15 s) then never bind across syncs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["ScalingPolicy", "HPASpec", "PodSample", "group_pods", "replica_count", "HorizontalPodAutoscaler"]


@dataclass(frozen=True)
class ScalingPolicy:
    """An HPAScalingPolicy: ``kind`` Pods or Percent, ``value``, ``period_s``."""

    kind: Literal["Pods", "Percent"]
    value: int
    period_s: int


@dataclass(frozen=True)
class HPASpec:
    """A HorizontalPodAutoscaler on CPU utilisation with the defaults this project benchmarks with
    (target 80 %, 1-10 replicas) and the autoscaling/v2 default behaviour."""

    target_cpu_utilization_pct: int = 80
    min_replicas: int = 1
    max_replicas: int = 10
    tolerance: float = 0.1
    scale_up_stabilization_s: float = 0.0
    scale_down_stabilization_s: float = 300.0
    scale_up_policies: tuple[ScalingPolicy, ...] = (ScalingPolicy("Percent", 100, 15), ScalingPolicy("Pods", 4, 15))
    scale_down_policies: tuple[ScalingPolicy, ...] = (ScalingPolicy("Percent", 100, 15),)
    cpu_initialization_period_s: float = 300.0
    initial_readiness_delay_s: float = 30.0

    def __post_init__(self) -> None:
        if self.target_cpu_utilization_pct <= 0:
            raise ValueError(f"targetCPUUtilizationPercentage: must be > 0, got {self.target_cpu_utilization_pct}")
        if not 1 <= self.min_replicas <= self.max_replicas:
            raise ValueError(
                f"replicas: need 1 <= minReplicas <= maxReplicas, got {self.min_replicas}, {self.max_replicas}"
            )


@dataclass(frozen=True)
class PodSample:
    """What the controller sees of one pod of the target.

    ``phase``: Pending, Running, Succeeded or Failed; ``ready`` and ``ready_changed_s``: the Ready condition
    and its lastTransitionTime; ``start_s``: status.startTime (None before the kubelet starts it);
    ``cpu_usage_m``: the latest metric (None: missing) covering ``[metric_s - metric_window_s, metric_s]``;
    ``cpu_request_m``: the pod's CPU request (sum over containers).
    """

    name: str
    phase: str
    cpu_request_m: int
    ready: bool = True
    ready_changed_s: float = 0.0
    start_s: float | None = 0.0
    cpu_usage_m: float | None = None
    metric_s: float = 0.0
    metric_window_s: float = 60.0
    terminating: bool = False


def group_pods(
    pods: Sequence[PodSample], now_s: float, spec: HPASpec
) -> tuple[list[PodSample], list[PodSample], list[PodSample]]:
    """groupPods: (ready pods with metrics, unready pods, pods missing metrics); deleted/failed ignored."""
    ready, unready, missing = [], [], []
    for p in pods:
        if p.terminating or p.phase == "Failed":
            continue
        if p.phase == "Pending":
            unready.append(p)
            continue
        if p.cpu_usage_m is None:
            missing.append(p)
            continue
        if p.start_s is None:
            bad = True
        elif p.start_s + spec.cpu_initialization_period_s > now_s:
            bad = (not p.ready) or p.metric_s < p.ready_changed_s + p.metric_window_s
        else:
            bad = (not p.ready) and p.start_s + spec.initial_readiness_delay_s > p.ready_changed_s
        (unready if bad else ready).append(p)
    return ready, unready, missing


def _ratio(usage_and_request: Sequence[tuple[float, int]], target_pct: int) -> tuple[float, int]:
    """GetResourceUtilizationRatio: (ratio to target, integer utilisation %). Raises ValueError when the
    requests sum to 0 (the controller's "missing request" error)."""
    total_use = sum(u for u, _r in usage_and_request)
    total_req = sum(r for _u, r in usage_and_request)
    if total_req <= 0:
        raise ValueError("HPA: the pods have no CPU request (utilization cannot be computed)")
    util = int(math.floor(total_use * 100 / total_req))
    return util / target_pct, util


def replica_count(current_replicas: int, pods: Sequence[PodSample], now_s: float, spec: HPASpec) -> tuple[int, int]:
    """GetResourceReplicas → (proposed replicas, current utilisation %). Raises ValueError when no pod has
    a usable metric or the pods have no CPU request (the controller then leaves the scale alone)."""
    ready, unready, missing = group_pods(pods, now_s, spec)
    if not ready:
        raise ValueError("HPA: did not receive metrics for any ready pod")
    target = spec.target_cpu_utilization_pct
    metrics = {p.name: (float(p.cpu_usage_m or 0.0), p.cpu_request_m) for p in ready}
    ratio, util = _ratio(list(metrics.values()), target)

    def within(r: float) -> bool:
        return (1.0 - spec.tolerance) <= r <= (1.0 + spec.tolerance)

    scale_up_with_unready = bool(unready) and ratio > 1.0
    if not scale_up_with_unready and not missing:
        if within(ratio):
            return current_replicas, util
        return int(math.ceil(ratio * len(ready))), util
    if missing:
        if ratio < 1.0:
            fallback = max(100, target)
            for p in missing:
                metrics[p.name] = (p.cpu_request_m * fallback / 100.0, p.cpu_request_m)
        elif ratio > 1.0:
            for p in missing:
                metrics[p.name] = (0.0, p.cpu_request_m)
    if scale_up_with_unready:
        for p in unready:
            metrics[p.name] = (0.0, p.cpu_request_m)
    new_ratio, _ = _ratio(list(metrics.values()), target)
    if within(new_ratio) or (ratio < 1.0 < new_ratio) or (ratio > 1.0 > new_ratio):
        return current_replicas, util
    new = int(math.ceil(new_ratio * len(metrics)))
    if (new_ratio < 1.0 and new > current_replicas) or (new_ratio > 1.0 and new < current_replicas):
        return current_replicas, util
    return new, util


@dataclass
class HorizontalPodAutoscaler:
    """One HPA object's controller state: the recommendations of the stabilization windows and the scale
    events the rate limits look back on."""

    spec: HPASpec = field(default_factory=HPASpec)
    recommendations: list[tuple[float, int]] = field(default_factory=list)
    scale_up_events: list[tuple[float, int]] = field(default_factory=list)
    scale_down_events: list[tuple[float, int]] = field(default_factory=list)
    last_utilization_pct: int | None = None

    def _stabilize(self, current: int, desired: int, now_s: float) -> int:
        up_cut = now_s - self.spec.scale_up_stabilization_s
        down_cut = now_s - self.spec.scale_down_stabilization_s
        up, down = desired, desired
        for t, r in self.recommendations:
            if t > up_cut:
                up = min(up, r)
            if t > down_cut:
                down = max(down, r)
        keep = max(self.spec.scale_up_stabilization_s, self.spec.scale_down_stabilization_s)
        self.recommendations = [(t, r) for t, r in self.recommendations if t > now_s - keep]
        self.recommendations.append((now_s, desired))
        rec = current
        if rec < up:
            rec = up
        if rec > down:
            rec = down
        return rec

    @staticmethod
    def _changed(events: list[tuple[float, int]], period_s: int, now_s: float) -> int:
        return sum(c for t, c in events if t > now_s - period_s)

    def _rate_limit(self, current: int, desired: int, now_s: float) -> int:
        s = self.spec
        if desired > current:
            limit = -math.inf
            for pol in s.scale_up_policies:
                start = (
                    current
                    - self._changed(self.scale_up_events, pol.period_s, now_s)
                    + self._changed(self.scale_down_events, pol.period_s, now_s)
                )
                prop = start + pol.value if pol.kind == "Pods" else math.ceil(start * (1 + pol.value / 100))
                limit = max(limit, prop)
            limit = max(int(limit), current)
            return min(desired, min(s.max_replicas, limit))
        if desired < current:
            limit = math.inf
            for pol in s.scale_down_policies:
                start = (
                    current
                    - self._changed(self.scale_up_events, pol.period_s, now_s)
                    + self._changed(self.scale_down_events, pol.period_s, now_s)
                )
                prop = start - pol.value if pol.kind == "Pods" else int(start * (1 - pol.value / 100))
                limit = min(limit, prop)
            limit = min(int(limit), current)
            return max(desired, max(s.min_replicas, limit))
        return desired

    def reconcile(self, current_replicas: int, pods: Sequence[PodSample], now_s: float) -> int:
        """One sync of reconcileAutoscaler: the replica count to set (``current_replicas`` when nothing
        changes). A metrics problem (no ready pod with a metric, no CPU request) keeps the current scale."""
        s = self.spec
        if current_replicas == 0:
            return 0  # scaling disabled for a target scaled to zero
        if current_replicas > s.max_replicas:
            desired = s.max_replicas
        elif current_replicas < s.min_replicas:
            desired = s.min_replicas
        else:
            try:
                proposal, util = replica_count(current_replicas, pods, now_s, s)
            except ValueError:
                return current_replicas
            self.last_utilization_pct = util
            stabilized = self._stabilize(current_replicas, proposal, now_s)
            desired = self._rate_limit(current_replicas, stabilized, now_s)
        if desired > current_replicas:
            self.scale_up_events.append((now_s, desired - current_replicas))
        elif desired < current_replicas:
            self.scale_down_events.append((now_s, current_replicas - desired))
        keep = max([p.period_s for p in (*s.scale_up_policies, *s.scale_down_policies)], default=0)
        self.scale_up_events = [e for e in self.scale_up_events if e[0] > now_s - keep]
        self.scale_down_events = [e for e in self.scale_down_events if e[0] > now_s - keep]
        return desired
