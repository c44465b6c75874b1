"""The Kubernetes HPA (autoscaling/v2, CPU utilisation), checked against the documented replica formula and
the controller's handling of tolerance, unready and missing pods, stabilization and rate limits."""

import pytest

from policy.baselines.hpa import HorizontalPodAutoscaler, HPASpec, PodSample, group_pods, replica_count

SPEC = HPASpec()  # target 80 %, tolerance 0.1, 1-10 replicas, 300 s scale-down stabilization


def ready(name, usage_m, request_m=100, start_s=-1000.0):
    return PodSample(
        name,
        "Running",
        request_m,
        ready=True,
        ready_changed_s=start_s + 20,
        start_s=start_s,
        cpu_usage_m=usage_m,
        metric_s=0.0,
    )


def test_desired_replicas_is_ceil_of_ready_pods_times_utilization_over_target():
    # utilization = (150 + 170) * 100 / 200 = 160 % -> ratio 2.0 -> ceil(2.0 * 2) = 4
    assert replica_count(2, [ready("a", 150), ready("b", 170)], 0.0, SPEC) == (4, 160)
    # 30 % -> ratio 0.375 -> ceil(0.375 * 3) = 2
    assert replica_count(3, [ready("a", 30), ready("b", 30), ready("c", 30)], 0.0, SPEC) == (2, 30)


def test_a_ratio_within_the_tolerance_keeps_the_current_replicas():
    # 85 % / 80 % = 1.0625, within 1 +- 0.1
    assert replica_count(2, [ready("a", 85), ready("b", 85)], 0.0, SPEC) == (2, 85)


def test_unready_pods_count_as_zero_on_a_scale_up():
    pending = [PodSample(f"p{i}", "Pending", 100, ready=False, start_s=None) for i in range(2)]
    # ready only: 200 % -> ratio 2.5 (scale-up); with the 2 pending at 0 %: 400 / 400 = 100 % -> 1.25
    # -> ceil(1.25 * 4) = 5
    assert replica_count(4, [ready("a", 200), ready("b", 200), *pending], 0.0, SPEC)[0] == 5


def test_missing_metrics_count_as_full_request_on_a_scale_down():
    missing = PodSample("m", "Running", 100, ready=True, start_s=-1000.0, cpu_usage_m=None)
    # ready: 20 % -> 0.25; with the missing pod at 100 %: (20 + 20 + 100) / 300 = 46 % -> 0.575
    # -> ceil(0.575 * 3) = 2
    assert replica_count(3, [ready("a", 20), ready("b", 20), missing], 0.0, SPEC)[0] == 2


def test_pods_still_initialising_are_unready_when_their_metric_predates_readiness():
    young = PodSample(
        "y",
        "Running",
        100,
        ready=True,
        ready_changed_s=-40.0,
        start_s=-100.0,
        cpu_usage_m=50.0,
        metric_s=0.0,
        metric_window_s=60.0,
    )
    old = ready("o", 50)
    r, u, m = group_pods([young, old], 0.0, SPEC)
    assert [p.name for p in r] == ["o"] and [p.name for p in u] == ["y"] and m == []


def test_scale_down_waits_for_the_300_second_stabilization_window():
    hpa = HorizontalPodAutoscaler()
    busy = [ready(f"p{i}", 80) for i in range(4)]
    idle = [ready(f"p{i}", 20) for i in range(4)]
    assert hpa.reconcile(4, busy, 0.0) == 4  # 80 %: on target
    seen = [hpa.reconcile(4, idle, t) for t in (60.0, 120.0, 180.0, 240.0, 300.0)]
    # the recommendation of t=0 (4) holds the replicas up until it leaves the window (t > 0 + 300)
    assert seen == [4, 4, 4, 4, 1]


def test_scale_up_is_immediate_but_limited_to_double_or_plus_four_and_max_replicas():
    hpa = HorizontalPodAutoscaler()
    hot = [ready("a", 800)]  # 800 % -> ratio 10 -> ceil(10 * 1) = 10
    assert hpa.reconcile(1, hot, 0.0) == 5  # max(2 * 1, 1 + 4) = 5
    hpa2 = HorizontalPodAutoscaler()
    hot6 = [ready(f"p{i}", 400) for i in range(6)]  # 500 % -> 36 -> capped by maxReplicas 10
    assert hpa2.reconcile(6, hot6, 0.0) == 10


def test_replicas_outside_min_max_are_brought_back_and_zero_disables_scaling():
    hpa = HorizontalPodAutoscaler()
    assert hpa.reconcile(12, [ready("a", 80)], 0.0) == 10
    assert hpa.reconcile(0, [], 0.0) == 0


def test_no_usable_metric_keeps_the_scale():
    pending = [PodSample("p", "Pending", 100, ready=False, start_s=None)]
    assert HorizontalPodAutoscaler().reconcile(3, pending, 0.0) == 3
    no_request = [ready("a", 50, request_m=0)]
    assert HorizontalPodAutoscaler().reconcile(3, no_request, 0.0) == 3


def test_spec_validation():
    with pytest.raises(ValueError, match="minReplicas"):
        HPASpec(min_replicas=5, max_replicas=2)
