"""The placement policy's node-speed input (``node_log_speed``): declared by a node label, else measured from the
pods' CPU against their services' pods elsewhere; the simulator's node pools carry the label; training draws clusters
whose sizes and speeds vary independently."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from policy.index import ClusterIndex
from policy.lowlevel import CONTEXT_FEATURES, featurize_candidates
from policy.lowlevel.features import SLOWNESS_MIN_CPU_M, declared_speeds, node_log_speed, node_slowness
from policy.sim.pools import NodePool, PoolClusterSpec
from policy.state import (
    LABEL_CPU_SPEED,
    ClusterSnapshot,
    NodeInfo,
    PodInfo,
    Resources,
    ServiceEdge,
    ServiceGraph,
)

GI = 2**30
GRAPH = ServiceGraph.build(["a", "b"], [ServiceEdge("a", "b", rps=10.0)])
SPEED_COL = [n for n, _u in CONTEXT_FEATURES].index("node_log_speed")


def node(name: str, speed: str | None = None) -> NodeInfo:
    labels = {} if speed is None else {LABEL_CPU_SPEED: speed}
    return NodeInfo(name=name, allocatable=Resources(4000, 8 * GI), labels=labels, usage=Resources(0, 0))


def pod(name: str, service: str, node_name: str, use_m: int | None) -> PodInfo:
    return PodInfo(
        name=name,
        namespace="default",
        service=service,
        requests=Resources(100, GI),
        node_name=node_name,
        phase="Running",
        usage=None if use_m is None else Resources(use_m, 0),
    )


def index(nodes, pods, graph=GRAPH) -> ClusterIndex:
    snap = ClusterSnapshot(nodes=tuple(nodes), pods=tuple(pods), pdbs=(), workloads=(), graph=graph, taken_at_s=0)
    # the nodes report measured use (the sum of their measured pods), as the simulator and UsageApplier set it
    use = {n.name: 0 for n in nodes}
    for p in pods:
        if p.usage is not None:
            use[p.node_name] += p.usage.cpu_m
    snap = replace(snap, nodes=tuple(replace(n, usage=Resources(use[n.name], 0)) for n in nodes))
    return ClusterIndex.build(snap)


NODES = (node("n0"), node("n1"), node("n2"), node("n3"))


def test_slowness_is_the_nodes_pods_cpu_over_their_peers_mean_elsewhere():
    # a: 200m on n0, 100m on n1 and n2; b: one pod only (no peer: left out); n3 holds nothing
    pods = [pod("a0", "a", "n0", 200), pod("a1", "a", "n1", 100), pod("a2", "a", "n2", 100), pod("b0", "b", "n1", 900)]
    got = node_slowness(index(NODES, pods))
    np.testing.assert_allclose(got, [np.log(200 / 100), np.log(100 / 150), np.log(100 / 150), 0.0])


def test_slowness_leaves_out_unmeasured_pods_services_outside_the_graph_and_thin_evidence():
    pods = [
        pod("a0", "a", "n0", 200),
        pod("a1", "a", "n1", 100),
        pod("a2", "a", "n2", None),  # not measured yet: neither a peer nor measured
        pod("t0", "tenant", "n2", 900),  # not a service of the call graph
        pod("t1", "tenant", "n3", 50),
    ]
    got = node_slowness(index(NODES, pods))
    np.testing.assert_allclose(got, [np.log(2.0), np.log(0.5), 0.0, 0.0])
    # clipped to -1..1
    far = node_slowness(index(NODES, [pod("a0", "a", "n0", 1000), pod("a1", "a", "n1", 100)]))
    np.testing.assert_allclose(far, [1.0, -1.0, 0.0, 0.0])
    # peers using less than SLOWNESS_MIN_CPU_M in all tell nothing
    small = node_slowness(index(NODES, [pod("a0", "a", "n0", 10), pod("a1", "a", "n1", int(SLOWNESS_MIN_CPU_M))]))
    assert small[0] == np.log(10 / SLOWNESS_MIN_CPU_M) and small[1] == 0.0


def test_an_empty_graph_counts_every_service():
    pods = [pod("t0", "tenant", "n0", 300), pod("t1", "tenant", "n1", 100)]
    got = node_slowness(index(NODES, pods, graph=ServiceGraph()))
    assert got[0] > 0 > got[1]


def test_declared_speeds_win_over_the_measured_estimate_and_bad_labels_are_ignored(caplog):
    nodes = (node("n0", "1.2"), node("n1", "0.8"), node("bad-a", "fast"), node("bad-b", "-1"))
    pods = [pod("a0", "a", "bad-a", 150), pod("a1", "a", "bad-b", 100)]
    ix = index(nodes, pods)
    with caplog.at_level("WARNING", logger="policy.lowlevel.features"):
        np.testing.assert_array_equal(np.isnan(declared_speeds(ix)), [False, False, True, True])
        declared_speeds(ix)  # reported once per node and value
    bad = [r.getMessage() for r in caplog.records if LABEL_CPU_SPEED in r.getMessage()]
    assert len(bad) == 2 and "node bad-a" in bad[0] and "'fast'" in bad[0] and "'-1'" in bad[1], bad
    got = node_log_speed(ix)
    # declared: relative to the declared nodes' median (1.0); the others: minus the measured slowness
    np.testing.assert_allclose(got, [np.log(1.2), np.log(0.8), -np.log(1.5), -np.log(1 / 1.5)])
    assert node_log_speed(index(NODES, [])).tolist() == [0.0] * 4


def test_the_column_is_zero_where_no_node_reports_measured_use():
    pods = [pod("a0", "a", "n0", 200), pod("a1", "a", "n1", 100)]
    ix = index(NODES, pods)
    pending = PodInfo(name="p", namespace="default", service="a", requests=Resources(100, GI))
    row = np.zeros(4, dtype=np.float32)
    x = featurize_candidates(pending, ["n0", "n1", "n2"], ix, row)
    np.testing.assert_allclose(x[:, SPEED_COL], node_log_speed(ix)[:3], rtol=1e-6)
    assert x[0, SPEED_COL] < 0 < x[1, SPEED_COL]
    # metrics hidden (every node NaN, as the placement training hides them): the measured part is unknown
    hidden = replace(ix, usage_cpu_m=np.full(4, np.nan))
    assert not featurize_candidates(pending, ["n0", "n1"], hidden, row)[:, SPEED_COL].any()
    # but a declared speed still reads
    declared = index((node("n0", "2"), node("n1", "1"), node("n2", "1"), node("n3", "1")), pods)
    hidden = replace(declared, usage_cpu_m=np.full(4, np.nan))
    np.testing.assert_allclose(
        featurize_candidates(pending, ["n0", "n1"], hidden, row)[:, SPEED_COL], [np.log(2.0), 0.0], rtol=1e-6
    )


def test_simulated_pools_label_their_speed_unless_told_not_to():
    fast = NodePool("fast", 1, 8000, 32 * GI, speed=1.25)
    old = NodePool("old", 2, 2000, 8 * GI, speed=0.8, speed_label=False)
    labels = [o["metadata"]["labels"] for o in PoolClusterSpec.of((fast, old)).node_objects()]
    assert [lb.get(LABEL_CPU_SPEED) for lb in labels] == ["1.25", None, None]


def test_the_measured_estimate_finds_the_slow_nodes_in_the_simulator():
    """Unlabelled pools of speed 0.6 and 1.4 (the Simulation's node speeds): after a few minutes the measured
    node_log_speed of every slow node that holds a replicated service's pod is below every such fast node's."""
    from policy.baselines.kube_default import default_score_plugins
    from policy.sim.app import load_app
    from policy.sim.engine import SimConfig, Simulation
    from policy.sim.kube_scheduler import KubeSchedulerModel
    from policy.sim.placement import start_with_metrics
    from policy.sim.sizing import trace_rps
    from policy.sim.stacks import terms_lookup

    app = load_app("online-boutique")
    pools = (
        NodePool("slow", 4, 4000, 16 * GI, speed=0.6, zones=("zone-a",), speed_label=False),
        NodePool("fast", 4, 4000, 16 * GI, speed=1.4, zones=("zone-a",), speed_label=False),
    )
    sim = Simulation(
        app,
        trace_rps(app, "nasa", 6),
        PoolClusterSpec.of(pools),
        KubeSchedulerModel(plugins=default_score_plugins(terms_lookup(app))),
        SimConfig(minutes=6, seed=1, n_samples=300),
    )
    start_with_metrics(sim)
    for w in list(sim.cluster.replicas):
        sim.scale(w, 4)
    for _ in range(4):
        sim.advance()
    ix = ClusterIndex.build(sim.observe())
    got = node_log_speed(ix)
    slow, fast = got[:4][got[:4] != 0], got[4:][got[4:] != 0]
    assert len(slow) >= 2 and len(fast) >= 2, got
    assert slow.max() < fast.min(), got


def test_training_clusters_mix_sizes_and_speeds_both_ways():
    pytest.importorskip("torch")
    from policy.sim.sizing import KubeletClusterSpec
    from policy.train.placement import PlacementTrainConfig, mixed_cluster, sample_instance

    base = KubeletClusterSpec(nodes=6, cpu_m=2000, memory_bytes=8 * GI, zones=("zone-a", "zone-b"))
    seen_sizes, seen_labels, fast_small, fast_large = set(), set(), 0, 0
    for s in range(60):
        c = mixed_cluster(base, np.random.default_rng(s), (0.6, 1.4), (0.5, 2.0))
        first, second = c.pools
        assert first.count >= 1 and second.count >= 1 and c.nodes == 6
        assert first.cpu_m == 2000 and second.cpu_m in (1000, 4000)
        assert all(0.6 <= p.speed <= 1.4 for p in c.pools) and first.speed_label == second.speed_label
        seen_sizes.add(second.cpu_m)
        seen_labels.add(first.speed_label)
        faster_is_smaller = (first.speed > second.speed) == (first.cpu_m < second.cpu_m)
        fast_small += faster_is_smaller
        fast_large += not faster_is_smaller
    assert seen_sizes == {1000, 4000} and seen_labels == {True, False}
    assert fast_small >= 10 and fast_large >= 10
    # mixed_prob 0 never draws a mixed cluster and samples what the earlier trainings sampled
    for prob, want in ((0.0, False), (1.0, True)):
        cfg = PlacementTrainConfig(mixed_prob=prob, train_apps=("sock-shop",), synthetic_share=0.0)
        kinds = {isinstance(sample_instance(cfg, np.random.default_rng(s)).cluster, PoolClusterSpec) for s in range(8)}
        assert kinds == {want}
    # each pool's background tenants are sized by its own nodes
    cfg = PlacementTrainConfig(mixed_prob=1.0, background_prob=1.0, train_apps=("sock-shop",), synthetic_share=0.0)
    inst = sample_instance(cfg, np.random.default_rng(5))
    alloc = [p.cpu_m for p in inst.cluster.pools for _ in range(p.count)]
    per_node = np.zeros(len(alloc))
    for b in inst.cluster.background:
        per_node[b.node] += b.cpu_request_m
    assert np.all(per_node <= 0.5 * np.asarray(alloc) + 1) and len({b.name for b in inst.cluster.background}) == len(
        inst.cluster.background
    )
    # the fixed evaluation instances: the bench cluster, split into the slowest and the fastest pool when mixed
    for mixed, want in ((False, None), (True, [0.6, 1.4])):
        inst = sample_instance(cfg, np.random.default_rng(7), "sock-shop", randomize=False, mixed=mixed)
        speeds = inst.cluster.node_speeds()
        assert (speeds is None) if want is None else sorted(set(speeds.tolist())) == want
    with pytest.raises(ValueError, match="speed_range"):
        PlacementTrainConfig(speed_range=(0.0, 1.0))
