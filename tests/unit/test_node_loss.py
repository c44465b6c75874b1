"""The pods of a lost node replaced early (descheduler.nodeloss): which nodes and pods, the cycle's evictions,
their guards, and the simulated node failure they shorten."""

from __future__ import annotations

from dataclasses import replace

import pytest
from prometheus_client import CollectorRegistry

from descheduler.__main__ import format_report
from descheduler.config import NodeLossConfig
from descheduler.guards import EvictionHistory
from descheduler.loop import CycleDeps, run_once
from descheduler.metrics import DeschedulerMetrics
from descheduler.nodeloss import lost_nodes, node_loss_moves
from descheduler.reread import SnapshotReader
from policy.observe import ObjectError, parse_node, parse_pod
from policy.state import (
    ClusterSnapshot,
    LabelSelector,
    NodeInfo,
    OwnerRef,
    PodDisruptionBudgetInfo,
    Resources,
    Taint,
    Toleration,
    frozen_map,
)
from tests.unit.test_descheduler_loop import PLACEMENT, FakeCluster, RecordingEvictor, ScriptedPlanner, config, pod

NOW_S = 1_700_000_000.0
GI = 1024**3
UNREACHABLE = "node.kubernetes.io/unreachable"
DEFAULT_TOLERATIONS = (
    Toleration("node.kubernetes.io/not-ready", "Exists", "", "NoExecute", 300),
    Toleration(UNREACHABLE, "Exists", "", "NoExecute", 300),
)


def lost(name: str, since_s: float | None, key: str = UNREACHABLE) -> NodeInfo:
    return NodeInfo(
        name,
        Resources(8000, 32 * 1024**3),
        taints=(Taint(key, "", "NoSchedule"), Taint(key, "", "NoExecute", since_s)),
        ready=False,
    )


def tolerant(p, tolerations=DEFAULT_TOLERATIONS):
    return replace(p, tolerations=tuple(tolerations))


def cluster(*pods, nodes=None, pdbs=()):
    c = FakeCluster([tolerant(p) for p in pods], pdbs=pdbs)
    if nodes is not None:
        c.snapshot = replace(c.snapshot, nodes=tuple(nodes))
    return c


def test_parse_reads_taint_time_and_toleration_seconds():
    n = parse_node(
        {
            "metadata": {"name": "n1"},
            "spec": {"taints": [{"key": UNREACHABLE, "effect": "NoExecute", "timeAdded": "2026-12-06T10:00:00Z"}]},
            "status": {"allocatable": {"cpu": "2", "memory": "8Gi"}},
        }
    )
    assert n.taints[0].time_added_s == 1796551200.0
    p = parse_pod(
        {
            "metadata": {"name": "a-1", "namespace": "shop"},
            "spec": {
                "containers": [{"name": "c"}],
                "tolerations": [
                    {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                    {"operator": "Exists"},
                ],
            },
        }
    )
    assert [t.seconds for t in p.tolerations] == [300, None]
    with pytest.raises(ObjectError, match=r"Node n1: spec.taints\[0\].timeAdded: must be an RFC 3339 time, got 7"):
        parse_node({"metadata": {"name": "n1"}, "spec": {"taints": [{"key": "k", "timeAdded": 7}]}, "status": {}})


def test_a_node_is_lost_after_the_configured_time_and_only_with_a_time():
    snap = ClusterSnapshot(
        nodes=(
            lost("old", NOW_S - 61),
            lost("new", NOW_S - 30),
            lost("untimed", None),
            lost("notready", NOW_S - 100, "node.kubernetes.io/not-ready"),
            NodeInfo("fine", Resources(8000, GI)),
        ),
        pods=(),
    )
    assert [x.name for x in lost_nodes(snap, NOW_S, 60)] == ["old", "notready"]
    assert [x.name for x in lost_nodes(snap, NOW_S, 0)] == ["old", "new", "notready"]


def test_a_node_still_open_to_new_pods_is_not_lost_yet():
    """The node lifecycle controller adds the NoSchedule taint from another queue than the NoExecute one: until it
    is there (or the node is cordoned), a replacement could be scheduled back onto the lost node."""
    half = replace(lost("half", NOW_S - 120), taints=(Taint(UNREACHABLE, "", "NoExecute", NOW_S - 120),))
    other_key = replace(half, name="other", taints=(*half.taints, Taint("example.com/maintenance", "", "NoSchedule")))
    cordoned = replace(half, name="cordoned", unschedulable=True)
    # the controller swaps the keys as Ready moves between False and Unknown: either key closes the node
    swapped = replace(
        half, name="swapped", taints=(*half.taints, Taint("node.kubernetes.io/not-ready", "", "NoSchedule"))
    )
    fine = NodeInfo("fine", Resources(8000, GI))
    snap = ClusterSnapshot(nodes=(half, other_key, cordoned, swapped, fine), pods=())
    assert [x.name for x in lost_nodes(snap, NOW_S, 60)] == ["cordoned", "swapped"]
    # its pods wait, counted under node_open in the cycle's report; with a lost node beside it too
    snap = ClusterSnapshot(nodes=(half, fine), pods=(tolerant(pod("cart", "half")),))
    plan = node_loss_moves(snap, NOW_S, NodeLossConfig())
    assert plan.moves == () and plan.lost == () and dict(plan.skipped) == {"node_open": 1}
    snap = ClusterSnapshot(
        nodes=(half, lost("n1", NOW_S - 120), fine, replace(fine, name="fine2"), replace(fine, name="fine3")),
        pods=(tolerant(pod("cart", "half")), tolerant(pod("api", "n1"))),
    )
    plan = node_loss_moves(snap, NOW_S, NodeLossConfig())
    assert [m.pod for m in plan.moves] == [pod("api", "n1").key] and dict(plan.skipped) == {"node_open": 1}


def test_which_pods_go_first_and_which_stay():
    down = pod("cart", "n1")  # its service's only pod: first
    spare = pod("api", "n1")  # api also serves on n2
    other = pod("api", "n2", "bbbbb")
    sts = replace(pod("db", "n1"), owner=OwnerRef("StatefulSet", "db"))
    forever = tolerant(pod("cache", "n1"), [Toleration(UNREACHABLE, "Exists", "", "NoExecute", None)])
    longer = tolerant(pod("queue", "n1"), [Toleration(UNREACHABLE, "Exists", "", "NoExecute", 3600)])
    snap = ClusterSnapshot(
        nodes=(lost("n1", NOW_S - 120), NodeInfo("n2", Resources(8000, GI)), NodeInfo("n3", Resources(8000, 4 * GI))),
        pods=tuple(tolerant(p) for p in (spare, other, down, sts)) + (forever, longer),
    )
    plan = node_loss_moves(snap, NOW_S, NodeLossConfig())
    assert [m.pod for m in plan.moves] == ["shop/cart-aaaaa", "shop/api-aaaaa"]
    report = run_once(CycleDeps(lambda: snap, RecordingEvictor(), ScriptedPlanner(), PLACEMENT, config()), NOW_S)
    assert "node loss: pods left on lost nodes: not_replicaset 1, tolerates 2" in format_report(report)
    assert all(m.reason == "node-lost" and m.to_node is None and m.from_node == "n1" for m in plan.moves)
    assert plan.skipped == {"not_replicaset": 1, "tolerates": 2}
    capped = node_loss_moves(snap, NOW_S, NodeLossConfig(max_per_cycle=1))
    assert [m.pod for m in capped.moves] == ["shop/cart-aaaaa"] and capped.skipped["max_per_cycle"] == 1
    assert node_loss_moves(snap, NOW_S, NodeLossConfig(enabled=False)).moves == ()
    assert node_loss_moves(snap, NOW_S, NodeLossConfig(), excluded_namespaces=("shop",)).moves == ()


def test_too_many_lost_nodes_hold_every_eviction():
    snap = ClusterSnapshot(
        nodes=(lost("n1", NOW_S - 120), lost("n2", NOW_S - 120), NodeInfo("n3", Resources(8000, 1))),
        pods=(tolerant(pod("cart", "n1")),),
    )
    plan = node_loss_moves(snap, NOW_S, NodeLossConfig())
    assert plan.moves == () and len(plan.lost) == 2
    assert "2 of 3 nodes not Ready or tainted unreachable / not-ready, more than nodeLoss.maxLostFraction 0.5" in (
        plan.held
    )
    assert len(node_loss_moves(snap, NOW_S, NodeLossConfig(max_lost_fraction=0.7)).moves) == 1
    # a partition's nodes are tainted one by one: the ones tainted a moment ago count too
    snap = replace(snap, nodes=(lost("n1", NOW_S - 120), lost("n2", NOW_S - 1), NodeInfo("n3", Resources(8000, 1))))
    assert node_loss_moves(snap, NOW_S, NodeLossConfig()).moves == ()


def test_the_first_matching_toleration_decides_as_for_the_taint_manager():
    snap = ClusterSnapshot(
        nodes=(lost("n1", NOW_S - 120), NodeInfo("n2", Resources(8000, GI)), NodeInfo("n3", Resources(8000, 4 * GI))),
        pods=(
            tolerant(  # forever first, then 30 s: the taint manager reads the first, so it waits forever
                pod("a", "n1"),
                [Toleration(UNREACHABLE, "Exists", "", "NoExecute", None), Toleration("", "Exists", "", "", 30)],
            ),
            tolerant(pod("b", "n1"), [Toleration("", "Exists", "", "NoExecute", 30)]),  # 30 s: it goes
            tolerant(pod("c", "n1"), [Toleration("other", "Exists", "", "NoExecute", None)]),  # none: at once
        ),
    )
    plan = node_loss_moves(snap, NOW_S, NodeLossConfig())
    assert sorted(m.pod for m in plan.moves) == ["shop/b-aaaaa", "shop/c-aaaaa"] and plan.skipped == {"tolerates": 1}


def test_the_cycle_evicts_them_beside_the_caps_and_reports_them():
    nodes = (lost("n1", NOW_S - 120), NodeInfo("n2", Resources(8000, GI)), NodeInfo("n3", Resources(8000, 4 * GI)))
    a, b, c = pod("cart", "n1"), pod("api", "n1"), pod("web", "n1")
    fc = cluster(a, b, c, nodes=nodes)
    ev = RecordingEvictor(fc)
    cfg = config(caps={"perNode": 0, "total": 1})  # no rebalancing eviction from n1, one in all
    metrics = DeschedulerMetrics(CollectorRegistry())
    deps = CycleDeps(fc.observe, ev, ScriptedPlanner(), PLACEMENT, cfg, metrics=metrics)
    report = run_once(deps, NOW_S)
    assert sorted(ev.calls) == ["shop/api-aaaaa", "shop/cart-aaaaa", "shop/web-aaaaa"]
    assert report.node_loss_counts["evicted"] == 3 and report.counts["evicted"] == 0
    assert [x.name for x in report.lost_nodes] == ["n1"]
    js = report.to_json()
    assert js["node_loss_counts"]["evicted"] == 3 and js["lost_nodes"][0]["node"] == "n1"
    assert js["node_loss"][0]["from_node"] == "n1" and js["node_loss"][0]["reason"] == "node-lost"
    reg = metrics.registry
    assert (
        reg.get_sample_value("hrl_descheduler_node_loss_evictions_total", {"outcome": "evicted", "dry_run": "false"})
        == 3
    )
    assert reg.get_sample_value("hrl_descheduler_nodes_lost") == 1
    assert report.counts["evicted"] == 0  # the per-node cap still holds for a rebalancing move off n1
    text = format_report(report)
    assert "node n1 lost: node.kubernetes.io/unreachable for 120 s (since 2023-11-14T22:11:20Z)" in text
    assert "evict shop/cart-aaaaa off lost node n1: evicted" in text
    assert ", 3 off lost nodes (evicted 3)" in text.splitlines()[0] and "nothing worth moving" not in text
    # caps.total: 0 (no eviction at all) stops these too
    fc = cluster(a, nodes=nodes)
    ev = RecordingEvictor(fc)
    report = run_once(CycleDeps(fc.observe, ev, ScriptedPlanner(), PLACEMENT, config(caps={"total": 0})), NOW_S)
    assert ev.calls == [] and report.node_loss_counts["skipped"] == 1


def test_a_dry_run_evicts_nothing_and_a_budget_below_its_minimum_refuses():
    nodes = (lost("n1", NOW_S - 120), NodeInfo("n2", Resources(8000, GI)), NodeInfo("n3", Resources(8000, 4 * GI)))
    a = replace(pod("cart", "n1"), ready=False)
    fc = cluster(a, nodes=nodes)
    ev = RecordingEvictor(fc)
    report = run_once(CycleDeps(fc.observe, ev, ScriptedPlanner(), PLACEMENT, config(dryRun=True)), NOW_S)
    assert report.node_loss_counts["dry_run"] == 1 and report.node_loss_counts["evicted"] == 0
    pdb = PodDisruptionBudgetInfo(
        "cart",
        "shop",
        LabelSelector(frozen_map({"app": "cart"})),
        min_available=1,
        disruptions_allowed=0,
    )
    fc = cluster(a, nodes=nodes, pdbs=(pdb,))
    ev = RecordingEvictor(fc)
    report = run_once(CycleDeps(fc.observe, ev, ScriptedPlanner(), PLACEMENT, config()), NOW_S)
    assert ev.calls == [] and report.node_loss_counts["blocked"] == 1
    assert report.node_loss[0].blocked_by == ("pdb",)


def test_they_leave_the_caps_and_the_history_to_the_rebalancing_moves():
    nodes = (lost("n1", NOW_S - 120), NodeInfo("n2", Resources(8000, GI)), NodeInfo("n3", Resources(8000, 4 * GI)))
    gone, mover = pod("cart", "n1"), pod("web", "n2")
    fc = cluster(gone, mover, nodes=nodes)
    ev = RecordingEvictor(fc)
    history = EvictionHistory()
    cfg = config(caps={"perNode": None, "perNamespace": None, "total": 1})
    report = run_once(CycleDeps(fc.observe, ev, ScriptedPlanner(gone, mover), PLACEMENT, cfg, history=history), NOW_S)
    assert ev.calls == ["shop/cart-aaaaa", "shop/web-aaaaa"]  # node loss first; the one rebalancing move still made
    assert report.node_loss_counts["evicted"] == 1 and report.counts["evicted"] == 1
    assert report.skipped_by_guard.get("terminating") == 1  # the planner's move of the lost pod is not proposed
    assert [r.pod for r in history.records] == ["shop/web-aaaaa"]  # only the move is remembered


def test_an_unready_pod_goes_while_its_budget_has_its_desired_healthy_pods():
    nodes = (lost("n1", NOW_S - 120), NodeInfo("n2", Resources(8000, GI)), NodeInfo("n3", Resources(8000, 4 * GI)))
    gone = replace(pod("api", "n1"), ready=False)
    up = [pod("api", "n2", "bbbbb"), pod("api", "n3", "ccccc")]
    budget = PodDisruptionBudgetInfo(
        "api", "shop", LabelSelector(frozen_map({"app": "api"})), min_available=2, disruptions_allowed=0
    )
    fc = cluster(gone, *up, nodes=nodes, pdbs=(budget,))
    ev = RecordingEvictor(fc)
    report = run_once(CycleDeps(fc.observe, ev, ScriptedPlanner(), PLACEMENT, config()), NOW_S)
    assert ev.calls == ["shop/api-aaaaa"] and report.node_loss_counts["evicted"] == 1  # 2 healthy, 2 desired
    fc = cluster(gone, up[0], nodes=nodes, pdbs=(budget,))  # 1 healthy of 2 desired: the API would answer 429
    ev = RecordingEvictor(fc)
    report = run_once(CycleDeps(fc.observe, ev, ScriptedPlanner(), PLACEMENT, config()), NOW_S)
    assert ev.calls == [] and report.node_loss[0].blocked_by == ("pdb",)


def test_a_failed_re_read_stops_the_cycle():
    nodes = (lost("n1", NOW_S - 120), NodeInfo("n2", Resources(8000, GI)), NodeInfo("n3", Resources(8000, 4 * GI)))
    fc = cluster(pod("a", "n1"), pod("b", "n1"), nodes=nodes)

    def fail(c):
        if c.reads >= 2:
            raise TimeoutError("get pod timed out")

    fc.on_read = fail
    ev = RecordingEvictor(fc)
    report = run_once(
        CycleDeps(fc.observe, ev, ScriptedPlanner(), PLACEMENT, config(), reader=SnapshotReader(fc.observe)), NOW_S
    )
    assert ev.calls == [] and report.stop.kind == "reread_failed"
    assert [r.outcome for r in report.node_loss] == ["skipped", "skipped"]


def test_a_refused_eviction_is_counted_refused():
    nodes = (lost("n1", NOW_S - 120), NodeInfo("n2", Resources(8000, GI)), NodeInfo("n3", Resources(8000, 4 * GI)))
    fc = cluster(pod("cart", "n1"), nodes=nodes)
    ev = RecordingEvictor(fc, outcomes={"shop/cart-aaaaa": "refused"})
    report = run_once(CycleDeps(fc.observe, ev, ScriptedPlanner(), PLACEMENT, config()), NOW_S)
    assert report.node_loss_counts["refused"] == 1 and report.node_loss_counts["evicted"] == 0


def test_configuration_errors_name_the_field():
    with pytest.raises(Exception, match=r"nodeLoss.afterSeconds"):
        config(nodeLoss={"afterSeconds": -1})
    with pytest.raises(Exception, match=r"nodeLoss.maxLostFraction"):
        config(nodeLoss={"maxLostFraction": 0})


def test_in_the_simulator_the_lost_nodes_pods_come_back_before_the_taint_manager_would():
    """events: node-002 fails at minute 8 (tainted at 8:50); the taint manager would delete its pods at 13:50, the
    descheduler's cycle at minute 10 evicts them and their replacements run elsewhere."""
    from policy.bench.cells import build, cached_scenario
    from policy.sim.stacks import run_stack

    scn = cached_scenario("events")
    run = build(scn, app=None, trace=None, minutes=12, seed=0, offset_min=330, n_samples=200)
    seen = {}

    def on_minute(sim):
        names = [n.name for n in sim.cluster.nodes]
        seen[sim.minute] = sum(
            1
            for p in sim.cluster.live_pods()
            if p.node >= 0 and names[p.node] == "node-002" and not sim.is_background(p)
        )

    res = run_stack("hrl-constant", run.app, run.rps, run.cluster, run.config, on_minute=on_minute)
    assert seen[9] > 0  # still there once the node is tainted
    assert seen[11] == 0  # gone at the cycle of minute 10, three minutes before the taint manager
    assert res.extra["counters"]["node_loss_evicted"] == seen[9]


def test_the_simulated_eviction_api_lets_an_unready_pod_go_while_its_budget_holds():
    from policy.sim.cluster import SimCluster
    from policy.sim.engine import ClusterSpec
    from policy.sim.synthetic import deployment

    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "x", "namespace": "default"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "x"}}},
    }
    c = SimCluster.build(
        ClusterSpec(nodes=3).node_objects(), [deployment("x", 3, 100, 0, 64, 128)], 0, pdb_objs=[budget]
    )
    c.reconcile(0.0)
    for i, p in enumerate(c.pending()):
        c.bind(p, f"node-00{i}", 0.0)
    now = 100.0
    a, b, _ = c.live_pods()
    a.ready_at_s = float("inf")  # its node is lost: 2 healthy of 2 desired
    assert c.evict(b.info.key, now).outcome == "refused"  # a healthy one: no disruption left
    assert c.evict(a.info.key, now).outcome == "evicted"  # the unready one goes
    c.live_pods()[0].ready_at_s = float("inf")  # 1 healthy of 2 desired now: even an unready pod is refused
    assert c.evict(c.live_pods()[0].info.key, now).outcome == "refused"


def test_shadow_mode_lists_the_lost_nodes_pods_and_where_their_replacements_would_land():
    from descheduler.shadow import analyze_cycle

    nodes = (lost("n1", NOW_S - 120), NodeInfo("n2", Resources(8000, GI)), NodeInfo("n3", Resources(8000, 4 * GI)))
    fc = cluster(pod("cart", "n1"), nodes=nodes)
    report = run_once(
        CycleDeps(fc.observe, RecordingEvictor(fc), ScriptedPlanner(), PLACEMENT, config(dryRun=True)), NOW_S
    )
    (rec,) = analyze_cycle(report, fc.snapshot).to_json()["node_loss"]
    assert (rec["pod"], rec["from_node"], rec["outcome"], rec["predicted_node"]) == (
        "shop/cart-aaaaa",
        "n1",
        "dry_run",
        "n3",
    )


def test_pods_with_local_storage_stay_unless_node_loss_says_they_go():
    nodes = (lost("n1", NOW_S - 120), NodeInfo("n2", Resources(8000, GI)), NodeInfo("n3", Resources(8000, 4 * GI)))
    cache = replace(pod("cache", "n1"), local_storage=True)

    def run(**kw):
        fc = cluster(cache, nodes=nodes)
        ev = RecordingEvictor(fc)
        report = run_once(CycleDeps(fc.observe, ev, ScriptedPlanner(), PLACEMENT, config(**kw)), NOW_S)
        return [r.outcome for r in report.node_loss], ev.calls

    assert run() == (["blocked"], [])
    assert run(nodeLoss={"evictLocalStoragePods": True}) == (["evicted"], ["shop/cache-aaaaa"])
    assert run(evictLocalStoragePods=True) == (["evicted"], ["shop/cache-aaaaa"])
    assert run(evictLocalStoragePods=True, nodeLoss={"evictLocalStoragePods": False}) == (["blocked"], [])
