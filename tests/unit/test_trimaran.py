"""scheduler-plugins Trimaran TargetLoadPacking, checked against hand-computed scores."""

import pytest

from policy.baselines.trimaran import MetricsWindow, TargetLoadPacking, predict_utilisation_m
from policy.index import ClusterIndex
from policy.state import ClusterSnapshot, NodeInfo, PodInfo, Resources


def node(name, usage_m):
    return NodeInfo(name, Resources(4000, 2**33), usage=None if usage_m is None else Resources(usage_m, 0))


def pod(name, req_m=0, lim_m=0, node_name=None):
    return PodInfo(name, "default", "s", Resources(req_m, 0), Resources(lim_m, 0), node_name=node_name)


@pytest.mark.parametrize("p,expected", [(pod("a", 100, 500), 500), (pod("b", 200), 300), (pod("c"), 1000)])
def test_predicted_pod_cpu_is_the_limit_else_request_times_1_5_else_one_core(p, expected):
    assert predict_utilisation_m(p) == expected


def test_target_load_packing_fills_nodes_up_to_the_target_and_penalises_beyond():
    nodes = [node("a", 1000), node("b", 400), node("c", 3800), node("d", None)]
    old = pod("old", 100, 0, "b")
    new = pod("new", 200, 0, "a")  # bound after the last metrics report: its 300m is "missing"
    snap = ClusterSnapshot(nodes=tuple(nodes), pods=(old, new))
    window = MetricsWindow()
    window.mark(ClusterSnapshot(nodes=tuple(nodes), pods=(old,)))
    plugin = TargetLoadPacking(window=window)
    incoming = pod("in", 100, 500)
    s = plugin.score(incoming, ["a", "b", "c", "d"], ClusterIndex.build(snap))
    # a: U = 100 * (1000 + 500 + 300) / 4000 = 45 > 40 -> round(40 * 55 / 60) = 37
    # b: U = 100 * (400 + 500) / 4000 = 22.5 -> round(60 * 22.5 / 40 + 40) = 74
    # c: U = 107.5 > 100 -> 0; d: no metrics -> 0
    assert s.tolist() == [37, 74, 0, 0]


def test_before_any_metrics_report_only_pods_without_usage_count_as_missing():
    nodes = [node("a", 1000)]
    snap = ClusterSnapshot(nodes=tuple(nodes), pods=(pod("x", 200, 0, "a"),))
    plugin = TargetLoadPacking()
    # x has usage None -> missing 300m: U = 100 * (1000 + 500 + 300) / 4000 = 45 -> 37
    assert plugin.score(pod("in", 100, 500), ["a"], ClusterIndex.build(snap)).tolist() == [37]


def test_target_must_be_between_0_and_100():
    with pytest.raises(ValueError, match="targetUtilization"):
        TargetLoadPacking(target_utilization_pct=100)
