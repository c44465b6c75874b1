"""The graph encoder: features, torch-vs-numpy parity (1e-5), the committed bundle, export."""

from __future__ import annotations

import numpy as np
import pytest

from policy.bundle import BundleError, PolicyBundle
from policy.encoder import (
    DEFAULT_ENCODER_BUNDLE,
    EDGE_SPEC,
    NODE_SPEC,
    GraphArrays,
    GraphEncoder,
    ServiceStats,
    colocation_from_snapshot,
    featurize_graph,
    segment_mean,
    stats_from_snapshot,
)
from policy.state import (
    ClusterSnapshot,
    NodeInfo,
    OwnerRef,
    PodInfo,
    Resources,
    ServiceEdge,
    ServiceGraph,
    WorkloadInfo,
)
from policy.train.encoder_data import TARGET_SPEC, make_dataset, make_sample, synthetic_app

torch = pytest.importorskip("torch")
from policy.train.encoder import GraphEncoderNet, export_checkpoint, export_encoder, save_checkpoint  # noqa: E402

G = ServiceGraph.build(
    ["front", "cart", "db", "lonely"],
    [
        ServiceEdge("front", "cart", rps=20.0, calls_per_request=1.0, latency_p95_ms=8.0, error_rate=0.01),
        ServiceEdge("cart", "db", rps=40.0, latency_mean_ms=2.0),
        ServiceEdge("db", "db", rps=5.0),
    ],
)


def col(spec, name):
    return spec.index(name)


def test_featurize_gives_one_row_per_service_and_one_per_edge_in_graph_order():
    a = featurize_graph(G)
    assert a.services == ("cart", "db", "front", "lonely")
    assert a.x.shape == (4, len(NODE_SPEC)) and a.x.dtype == np.float32
    assert a.edge_attr.shape == (3, len(EDGE_SPEC))
    pos = {s: i for i, s in enumerate(a.services)}
    assert [tuple(r) for r in a.edge_index.T] == [
        (pos["cart"], pos["db"]),
        (pos["db"], pos["db"]),
        (pos["front"], pos["cart"]),
    ]


def test_unknown_measurements_are_zero_with_their_flag_down_and_edges_fill_in_what_they_know():
    a = featurize_graph(G)
    x = dict(zip(a.services, a.x))
    # nothing about lonely is known
    for flag in ("usage_known", "rate_known", "latency_known", "error_known", "slo_known"):
        assert x["lonely"][col(NODE_SPEC, flag)] == 0.0
    assert x["lonely"][col(NODE_SPEC, "is_entry")] == 1.0
    # cart's rate, latency, error come from its incoming edge
    assert x["cart"][col(NODE_SPEC, "log_request_rps")] == pytest.approx(np.log1p(20.0))
    assert x["cart"][col(NODE_SPEC, "log_latency_p95_ms")] == pytest.approx(np.log1p(8.0))
    assert x["cart"][col(NODE_SPEC, "error_rate")] == pytest.approx(0.01)
    # db: two incoming calls (cart, itself) add up; the self-call is flagged but not a caller
    assert x["db"][col(NODE_SPEC, "log_request_rps")] == pytest.approx(np.log1p(45.0))
    assert x["db"][col(NODE_SPEC, "has_self_call")] == 1.0
    assert x["db"][col(NODE_SPEC, "log_in_degree")] == pytest.approx(np.log1p(1))
    e = a.edge_attr
    assert e[0, col(EDGE_SPEC, "rps_share_of_callee")] == pytest.approx(40 / 45)
    assert e[1, col(EDGE_SPEC, "is_self_call")] == 1.0
    assert e[2, col(EDGE_SPEC, "calls_known")] == 1.0 and e[0, col(EDGE_SPEC, "calls_known")] == 0.0


def test_explicit_stats_win_over_edges_and_bad_values_count_as_unknown():
    stats = {
        "cart": ServiceStats(
            replicas=3, cpu_request_m=100, cpu_usage_m=150, request_rps=99.0, slo_p95_ms=16.0, latency_p95_ms=8.0
        ),
        "db": ServiceStats(replicas=-1, cpu_usage_m=float("nan")),
    }
    a = featurize_graph(G, stats)
    x = dict(zip(a.services, a.x))
    assert x["cart"][col(NODE_SPEC, "log_request_rps")] == pytest.approx(np.log1p(99.0))
    assert x["cart"][col(NODE_SPEC, "cpu_usage_per_request")] == pytest.approx(0.5)
    assert x["cart"][col(NODE_SPEC, "latency_p95_per_slo")] == pytest.approx(0.5)
    assert x["db"][col(NODE_SPEC, "log_replicas")] == 0.0 and x["db"][col(NODE_SPEC, "usage_known")] == 0.0


def snapshot() -> ClusterSnapshot:
    def pod(name, svc, node, cpu_use=None):
        return PodInfo(
            name,
            "default",
            svc,
            Resources(100, 2**27),
            Resources(500, 2**28),
            node_name=node,
            owner=OwnerRef("ReplicaSet", svc),
            usage=None if cpu_use is None else Resources(cpu_use, 2**26),
        )

    nodes = tuple(NodeInfo(n, Resources(4000, 2**34)) for n in ("n1", "n2"))
    pods = (
        pod("front-1", "front", "n1", 50),
        pod("cart-1", "cart", "n1", 30),
        pod("cart-2", "cart", "n2", 10),
        pod("db-1", "db", "n2"),
    )
    wl = (
        WorkloadInfo(
            "cart", "default", "cart", replicas=2, pod_requests=Resources(100, 2**27), pod_limits=Resources(500, 2**28)
        ),
    )
    return ClusterSnapshot(nodes, pods, (), wl, G)


def test_stats_from_a_snapshot_take_replicas_from_workloads_and_usage_from_pods():
    st = stats_from_snapshot(snapshot(), {"front": 200.0})
    assert st["cart"].replicas == 2 and st["cart"].cpu_limit_m == 500 and st["cart"].cpu_usage_m == 40
    assert st["cart"].memory_usage_bytes == 2 * 2**26
    assert st["db"].replicas == 1 and st["db"].cpu_usage_m is None
    assert st["front"].slo_p95_ms == 200.0


def test_colocation_is_the_chance_a_call_stays_on_its_node():
    share = colocation_from_snapshot(snapshot(), G)
    assert share[("front", "cart")] == pytest.approx(0.5)  # front on n1; cart half on n1
    assert share[("cart", "db")] == pytest.approx(0.5)
    assert share[("db", "db")] == pytest.approx(1.0)


def test_segment_mean_averages_rows_per_index_and_leaves_empty_rows_zero():
    v = np.array([[1.0, 2.0], [3.0, 4.0], [10.0, 10.0]], np.float32)
    out = segment_mean(v, np.array([2, 0, 2]), 4)
    np.testing.assert_allclose(out, [[3, 4], [0, 0], [5.5, 6], [0, 0]])


def tiny_net(layers=3, targets=None, seed=0) -> GraphEncoderNet:
    torch.manual_seed(seed)
    targets = len(TARGET_SPEC) if targets is None else targets
    net = GraphEncoderNet(hidden=32, embedding=16, layers=layers, head_hidden=16, targets=targets)
    rng = np.random.default_rng(seed)
    net.set_normalization(
        rng.normal(size=len(NODE_SPEC)),
        rng.uniform(0.5, 2, len(NODE_SPEC)),
        rng.normal(size=len(EDGE_SPEC)),
        rng.uniform(0.5, 2, len(EDGE_SPEC)),
    )
    net.eval()
    return net


def norm_of(net) -> dict:
    return {
        "node": {"mean": net.node_mean.tolist(), "std": net.node_std.tolist()},
        "edge": {"mean": net.edge_mean.tolist(), "std": net.edge_std.tolist()},
        "targets": {"mean": [1.0] * len(TARGET_SPEC), "std": [2.0] * len(TARGET_SPEC)},
    }


def torch_forward(net, a: GraphArrays):
    with torch.no_grad():
        z = net(torch.from_numpy(a.x), torch.from_numpy(a.edge_index), torch.from_numpy(a.edge_attr))
        y = net.heads(z) * 2.0 + 1.0
    return z.numpy(), y.numpy()


def parity_graphs():
    rng = np.random.default_rng(7)
    gs = [s.arrays for s in make_dataset(6, seed=11)]
    gs.append(featurize_graph(G))
    gs.append(featurize_graph(ServiceGraph.build(["solo"], [])))  # no edges at all
    big = synthetic_app(rng, 120)
    gs.append(make_sample(big, rng).arrays)
    return gs


@pytest.mark.parametrize("layers", [0, 1, 3])
def test_numpy_serving_matches_torch_to_1e_5(tmp_path, layers):
    net = tiny_net(layers)
    export_encoder(net, tmp_path, policy_version="parity", normalization=norm_of(net))
    enc = GraphEncoder.load(tmp_path)
    for a in parity_graphs():
        zt, yt = torch_forward(net, a)
        zn = enc.encode(a)
        assert zn.shape == zt.shape and zn.dtype == np.float32
        np.testing.assert_allclose(zn, zt, atol=1e-5, rtol=1e-5)
        np.testing.assert_allclose(enc.predict_from_embeddings(zn), yt, atol=1e-5, rtol=1e-5)


def test_embeddings_follow_the_services_not_their_row_order(tmp_path):
    net = tiny_net()
    export_encoder(net, tmp_path, policy_version="perm", normalization=norm_of(net))
    enc = GraphEncoder.load(tmp_path)
    a = parity_graphs()[0]
    n = a.x.shape[0]
    perm = np.random.default_rng(1).permutation(n)
    inv = np.argsort(perm)
    b = GraphArrays(tuple(a.services[i] for i in perm), a.x[perm], inv[a.edge_index], a.edge_attr)
    np.testing.assert_allclose(enc.encode(b), enc.encode(a)[perm], atol=1e-5)


def test_a_checkpoint_exports_to_the_same_bundle(tmp_path):
    net = tiny_net()
    save_checkpoint(net, tmp_path / "enc.pt", policy_version="ck-1", normalization=norm_of(net), metadata={"x": 1})
    export_checkpoint(tmp_path / "enc.pt", tmp_path / "bundle")
    enc = GraphEncoder.load(tmp_path / "bundle")
    assert enc.version == "ck-1"
    a = featurize_graph(G)
    np.testing.assert_allclose(enc.encode(a), torch_forward(net, a)[0], atol=1e-5)
    with pytest.raises(ValueError, match="not a readable encoder checkpoint"):
        export_checkpoint(tmp_path / "bundle" / "manifest.json", tmp_path / "x")


def test_the_committed_encoder_bundle_loads_is_small_and_encodes_the_demo_app():
    files = list(DEFAULT_ENCODER_BUNDLE.iterdir())
    assert sum(p.stat().st_size for p in files) < 1_000_000
    enc = GraphEncoder.load()
    from policy.sim.app import load_app

    app = load_app("online-boutique")
    out = enc.encode_graph(app.graph)
    assert out.services == app.graph.services
    assert out.embeddings.shape == (len(app.graph.services), enc.embedding_dim)
    assert np.all(np.isfinite(out.embeddings))
    assert len({tuple(np.round(r, 4)) for r in out.embeddings}) > len(out.services) // 2  # not collapsed
    assert enc.bundle.metadata["target_names"] == list(TARGET_SPEC.names)


def test_an_encoder_bundle_with_another_feature_layout_is_refused(tmp_path):
    net = tiny_net()
    b = export_encoder(net, tmp_path, policy_version="x", normalization=norm_of(net))
    from policy.features import FeatureSpec

    other = FeatureSpec(NODE_SPEC.names[:-1] + ("something_else",), NODE_SPEC.units)
    PolicyBundle(
        level="encoder",
        policy_version="x",
        feature_spec={"node": other, "edge": EDGE_SPEC},
        dims=dict(b.dims),
        architecture=dict(b.architecture),
        weights=dict(b.weights),
    ).save(tmp_path)
    with pytest.raises(BundleError, match="expected .*has_self_call.*found .*something_else"):
        GraphEncoder.load(tmp_path)
    PolicyBundle(
        level="low",
        policy_version="x",
        feature_spec={"node": NODE_SPEC, "edge": EDGE_SPEC},
        dims=dict(b.dims),
        architecture=dict(b.architecture),
        weights=dict(b.weights),
    ).save(tmp_path)
    with pytest.raises(BundleError, match="level: expected 'encoder', found 'low'"):
        GraphEncoder.load(tmp_path)


def test_a_few_seconds_of_training_lower_the_loss_and_export_a_servable_bundle(tmp_path):
    from policy.train.encoder import EncoderTrainConfig, train_encoder

    cfg = EncoderTrainConfig(
        n_train=32,
        n_val_synthetic=8,
        n_val_per_app=2,
        epochs=3,
        hidden=16,
        embedding=8,
        head_hidden=16,
        batch_graphs=8,
        size_range=(4, 10),
        holdout_apps=("online-boutique",),
        apps=("online-boutique",),
    )
    net, report = train_encoder(cfg, tmp_path, log=lambda m: None, progress=False)
    enc = GraphEncoder.load(tmp_path)
    assert enc.embedding_dim == 8
    assert set(report["heldout"]) == {
        "synthetic/all",
        "synthetic/unmeasured",
        "app:online-boutique/all",
        "app:online-boutique/unmeasured",
    }
    # after training the heads beat predicting the mean on the training distribution's held-out graphs
    h, b = report["heldout"]["synthetic/all"], report["baseline_mean"]["synthetic/all"]
    assert np.mean([h[t]["mae_log"] for t in h]) < np.mean([b[t]["mae_log"] for t in b])
