"""The learned placement policy: features, the numpy network vs torch (1e-5), bundle refusals, the committed
bundles, and that the served decision (kube-scheduler + extender) is the trained policy's greedy choice."""

from __future__ import annotations

import copy
import json
import math
from dataclasses import replace

import numpy as np
import pytest

from policy.bundle import BundleError, PolicyBundle
from policy.cache import EmbeddingEntry
from policy.encoder import NODE_SPEC
from policy.index import ClusterIndex, estimated_cpu_m
from policy.lowlevel import (
    CONTEXT_FEATURES,
    CONTEXT_FEATURES_V1,
    CONTEXT_FEATURES_V2,
    DEFAULT_FLAT_PLACEMENT_BUNDLE,
    DEFAULT_PLACEMENT_BUNDLE,
    FLAT_ROWS_VERSION,
    PLACEMENT_FEATURES,
    PLACEMENT_FEATURES_FLAT,
    PLACEMENT_INTENTS,
    LearnedPlacement,
    PlacementPolicy,
    ServiceRowCache,
    compute_service_rows,
    featurize_candidates,
    intent_value,
    placement_feature_spec,
    saturation_factor,
    scores_from_logits,
    served_totals,
)
from policy.lowlevel.learned import mlp_logits
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

torch = pytest.importorskip("torch")
from policy.train.placement import (  # noqa: E402
    PlacementNet,
    export_checkpoint,
    export_placement,
    loo_advantages,
    policy_log_probs,
    saturation_factor_t,
    save_checkpoint,
)

GI = 2**30
ZONE = "topology.kubernetes.io/zone"


def node(name: str, zone: str, cpu_m: int = 4000, usage_m: int | None = None) -> NodeInfo:
    return NodeInfo(
        name=name,
        allocatable=Resources(cpu_m, 8 * GI),
        allocatable_pods=10,
        labels={ZONE: zone},
        usage=None if usage_m is None else Resources(usage_m, 0),
    )


def pod(name: str, service: str, node_name: str | None = None, cpu_m: int = 500, mem: int = GI) -> PodInfo:
    return PodInfo(
        name=name,
        namespace="default",
        service=service,
        requests=Resources(cpu_m, mem),
        node_name=node_name,
        phase="Running" if node_name else "Pending",
        owner=OwnerRef("ReplicaSet", f"{service}-abc12"),
    )


GRAPH = ServiceGraph.build(
    ["front", "cart", "db", "ads"],
    [
        ServiceEdge("front", "cart", rps=30.0),
        ServiceEdge("cart", "db", rps=10.0),
        ServiceEdge("front", "ads", rps=10.0),
    ],
)
NODES = (node("n1", "a"), node("n2", "a"), node("n3", "b"))
BOUND = (
    pod("front-1", "front", "n1"),
    pod("db-1", "db", "n3"),
    pod("db-2", "db", "n3"),
    pod("ads-1", "ads", "n2"),
    pod("cart-1", "cart", "n2"),
)
WORKLOADS = tuple(
    WorkloadInfo(kind="Deployment", name=s, namespace="default", replicas=r, service=s, pod_requests=Resources(500, GI))
    for s, r in (("front", 1), ("cart", 1), ("db", 2), ("ads", 1))
)


def snapshot(nodes=NODES, pods=BOUND, graph=GRAPH, t: float = 100.0) -> ClusterSnapshot:
    return ClusterSnapshot(
        nodes=tuple(nodes), pods=tuple(pods), pdbs=(), workloads=WORKLOADS, graph=graph, taken_at_s=t
    )


ROW = np.arange(32, dtype=np.float32) / 10.0


def col(x: np.ndarray, name: str) -> np.ndarray:
    return x[:, PLACEMENT_FEATURES.index(name)]


# ---- feature specification ------------------------------------------------------------------------------


def test_the_encoder_and_flat_variants_have_distinct_specs_sharing_the_context_columns():
    assert len(PLACEMENT_FEATURES) == len(CONTEXT_FEATURES) + 32
    assert len(PLACEMENT_FEATURES_FLAT) == len(CONTEXT_FEATURES) + len(NODE_SPEC)
    assert PLACEMENT_FEATURES != PLACEMENT_FEATURES_FLAT
    assert PLACEMENT_FEATURES.names[: len(CONTEXT_FEATURES)] == PLACEMENT_FEATURES_FLAT.names[: len(CONTEXT_FEATURES)]
    assert PLACEMENT_FEATURES_FLAT.names[len(CONTEXT_FEATURES)] == "svc_log_replicas"
    for n in PLACEMENT_INTENTS:
        assert f"intent_{n}" in PLACEMENT_FEATURES.names


@pytest.mark.parametrize("service_input,dim", [("flat", 10), ("graph", 32)])
def test_a_spec_of_an_unknown_service_input_or_wrong_flat_width_is_refused(service_input, dim):
    with pytest.raises(ValueError):
        placement_feature_spec(service_input, dim)


# ---- featurization ------------------------------------------------------------------------------------------


def test_callers_and_callees_are_located_separately_by_node_and_by_zone():
    idx = ClusterIndex.build(snapshot())
    x = featurize_candidates(pod("cart-2", "cart"), ["n1", "n2", "n3"], idx, ROW)
    assert x.shape == (3, len(PLACEMENT_FEATURES)) and x.dtype == np.float32
    np.testing.assert_allclose(col(x, "caller_node_share"), [1, 0, 0])  # front on n1
    np.testing.assert_allclose(col(x, "callee_node_share"), [0, 0, 1])  # both db pods on n3
    np.testing.assert_allclose(col(x, "caller_zone_share"), [1, 1, 0])  # zone a
    np.testing.assert_allclose(col(x, "callee_zone_share"), [0, 0, 1])  # zone b
    np.testing.assert_allclose(col(x, "log_caller_rps"), math.log1p(30.0), rtol=1e-6)
    np.testing.assert_allclose(col(x, "log_callee_rps"), math.log1p(10.0), rtol=1e-6)
    np.testing.assert_allclose(col(x, "rates_known"), 1.0)


def test_same_service_pods_give_the_spread_columns():
    idx = ClusterIndex.build(snapshot())
    x = featurize_candidates(pod("cart-2", "cart"), ["n1", "n2", "n3"], idx, ROW)
    np.testing.assert_allclose(col(x, "same_service_node_share"), [0, 1, 0])
    np.testing.assert_allclose(col(x, "same_service_zone_share"), [1, 1, 0])
    np.testing.assert_allclose(col(x, "log_same_service_node_pods"), [0, math.log1p(1), 0], rtol=1e-6)


def test_node_state_is_the_state_after_placing_the_pod_and_usage_falls_back_to_requests():
    nodes = (node("n1", "a", usage_m=1000), node("n2", "a"), node("n3", "b"))
    idx = ClusterIndex.build(snapshot(nodes=nodes))
    x = featurize_candidates(pod("cart-2", "cart"), ["n1", "n2"], idx, ROW)
    np.testing.assert_allclose(col(x, "cpu_requested_frac"), [1000 / 4000, 1500 / 4000])
    np.testing.assert_allclose(col(x, "cpu_used_frac"), [1500 / 4000, 1500 / 4000])  # n2: no metrics → requests
    np.testing.assert_allclose(col(x, "usage_known"), [1, 0])
    np.testing.assert_allclose(col(x, "pods_frac"), [2 / 10, 3 / 10])
    np.testing.assert_allclose(col(x, "pod_cpu_request_frac"), 500 / 4000)
    np.testing.assert_allclose(col(x, "memory_requested_frac"), [2 / 8, 3 / 8])


def test_pods_not_measured_yet_count_their_estimate_on_nodes_whose_other_pods_are_measured():
    # n1: front-1 measured (700m, in the node's 700m use), cart-9 bound since the last metrics window (500m requested,
    # no limit: estimated at 85 %, 425m, as Koordinator's LoadAware estimator does)
    # n2: nobody measured (no pod metrics there: its node use alone counts, as the extender's snapshots)
    nodes = (node("n1", "a", usage_m=700), node("n2", "a", usage_m=600), node("n3", "b"))
    pods = (
        replace(pod("front-1", "front", "n1"), usage=Resources(700, 0)),
        pod("cart-9", "cart", "n1"),
        pod("ads-1", "ads", "n2"),
    )
    idx = ClusterIndex.build(snapshot(nodes=nodes, pods=pods))
    np.testing.assert_allclose(idx.unmeasured_cpu_m, [425, 0, 0])
    x = featurize_candidates(pod("cart-2", "cart"), ["n1", "n2"], idx, ROW)
    np.testing.assert_allclose(col(x, "cpu_used_frac"), [(700 + 425 + 500) / 4000, (600 + 500) / 4000])
    # the not-yet-measured pod scoring its own node counts once (its estimate out, its request in)
    x = featurize_candidates(pods[1], ["n1"], idx, ROW)
    np.testing.assert_allclose(col(x, "cpu_used_frac"), [(700 + 500) / 4000])


@pytest.mark.parametrize(
    ("request_m", "limit_m", "expected"),
    [
        (100, 300, 300),  # Burstable with a limit above the request: the limit
        (100, 100, 85),  # Guaranteed: 85 % of the request
        (99, 0, 84),  # no limit: 85 % of the request, rounded half up (84.15)
        (10, 0, 9),  # 8.5 -> 9
        (0, 0, 250),  # BestEffort: the default
        (0, 200, 200),  # a limit and no request: the limit
    ],
)
def test_an_unmeasured_pod_is_estimated_as_koordinators_loadaware_estimates_it(request_m, limit_m, expected):
    p = replace(pod("x-1", "x", "n1", cpu_m=request_m), limits=Resources(limit_m, 0))
    assert estimated_cpu_m(p) == expected and isinstance(estimated_cpu_m(p), int)


def test_a_bound_pod_scoring_its_own_node_is_not_counted_twice():
    full = ClusterIndex.build(snapshot())
    without = ClusterIndex.build(snapshot(pods=[p for p in BOUND if p.name != "cart-1"]))
    bound = featurize_candidates(BOUND[-1], ["n1", "n2", "n3"], full, ROW)
    pending = featurize_candidates(pod("cart-1", "cart"), ["n1", "n2", "n3"], without, ROW)
    np.testing.assert_allclose(bound, pending, atol=1e-6)


def test_intent_columns_take_the_given_values_or_the_defaults():
    idx = ClusterIndex.build(snapshot())
    p = pod("cart-2", "cart")
    d = featurize_candidates(p, ["n1"], idx, ROW, None)
    given = featurize_candidates(p, ["n1"], idx, ROW, (0.5, 2.0))
    assert [float(col(d, f"intent_{n}")[0]) for n in PLACEMENT_INTENTS] == [
        intent_value(None, n) for n in PLACEMENT_INTENTS
    ]
    assert float(col(given, "intent_locality_weight")[0]) == 0.5
    assert float(col(given, "intent_balance_weight")[0]) == 2.0


def test_unknown_candidates_get_zero_context_and_the_service_row_is_copied_into_every_row():
    idx = ClusterIndex.build(snapshot())
    x = featurize_candidates(pod("cart-2", "cart"), ["ghost", "n1"], idx, {"cart": ROW})
    K = len(CONTEXT_FEATURES)
    assert not x[0, :K].any() and x[1, :K].any()
    np.testing.assert_allclose(x[:, K:], np.stack([ROW, ROW]))


def test_a_service_without_an_embedding_row_is_an_error_naming_it():
    idx = ClusterIndex.build(snapshot())
    with pytest.raises(ValueError, match="cart"):
        featurize_candidates(pod("cart-2", "cart"), ["n1"], idx, {"front": ROW})


def test_service_rows_are_cached_per_graph_and_recomputed_after_refresh_seconds_of_snapshot_time():
    cache = ServiceRowCache("flat", refresh_s=60.0)
    a = cache.get(snapshot(t=100.0))
    assert a.encoder_version == FLAT_ROWS_VERSION and a.matrix.shape == (4, len(NODE_SPEC))
    assert cache.get(snapshot(t=150.0)) is a
    assert cache.get(snapshot(t=170.0)) is not a and cache.computations == 2


# ---- network, parity, bundles ------------------------------------------------------------------------------


def random_net(features: int, seed: int = 0, hidden: int = 16) -> PlacementNet:
    torch.manual_seed(seed)
    net = PlacementNet(features, hidden, 2)
    with torch.no_grad():
        net.net[-1].weight.normal_(0, 1.0)
        net.net[-1].bias.fill_(0.3)
    rng = np.random.default_rng(seed)
    net.set_normalization(rng.normal(0, 1, features), rng.uniform(0.5, 2, features))
    return net


def bundle_of(
    net: PlacementNet,
    service_input: str = "encoder",
    tmp=None,
    rows_version: str | None = None,
    intent_gain: float = 0.0,
    saturation_guard: bool = False,
):
    from policy.encoder import GraphEncoder

    dim = 32 if service_input == "encoder" else len(NODE_SPEC)
    rv = rows_version or (GraphEncoder.load().version if service_input == "encoder" else FLAT_ROWS_VERSION)
    return export_placement(
        net,
        tmp,
        service_input=service_input,
        service_dim=dim,
        rows_version=rv,
        temperature=20.0,
        policy_version="test",
        intent_gain=intent_gain,
        saturation_guard=saturation_guard,
    )


def test_numpy_serving_matches_torch_to_1e_5():
    net = random_net(len(PLACEMENT_FEATURES))
    x = np.random.default_rng(1).normal(0, 3, (100, len(PLACEMENT_FEATURES))).astype(np.float32)
    with torch.no_grad():
        z_t = net(torch.from_numpy(x)).numpy()
        s_t = (10 * torch.sigmoid(net(torch.from_numpy(x)))).numpy()
    pol = LearnedPlacement(bundle_of(net))
    np.testing.assert_allclose(pol.logits(x), z_t, atol=1e-5)
    np.testing.assert_allclose(scores_from_logits(pol.logits(x)), s_t, atol=1e-5)


def test_a_bundle_with_another_feature_spec_is_refused_naming_both(tmp_path):
    bundle_of(random_net(len(PLACEMENT_FEATURES)), "encoder", tmp_path / "b")
    with pytest.raises(BundleError) as e:
        PolicyBundle.load(tmp_path / "b", feature_spec={"candidate": PLACEMENT_FEATURES_FLAT})
    msg = str(e.value)
    assert "svc_emb_00" in msg and "svc_log_replicas" in msg and "expected" in msg and "found" in msg


def test_learned_placement_refuses_a_bundle_whose_columns_do_not_match_its_service_input():
    b = bundle_of(random_net(len(PLACEMENT_FEATURES)))
    arch = {**b.architecture, "service_input": "flat"}
    with pytest.raises(BundleError, match="feature"):
        LearnedPlacement(replace(b, architecture=arch, dims={**b.dims, "service_dim": len(NODE_SPEC)}))


def test_learned_placement_refuses_embeddings_of_another_encoder():
    b = bundle_of(random_net(len(PLACEMENT_FEATURES)), rows_version="encoder-other")
    with pytest.raises(BundleError, match="encoder-other"):
        LearnedPlacement(b)


def test_learned_placement_refuses_a_bundle_of_another_level(tmp_path):
    b = bundle_of(random_net(len(PLACEMENT_FEATURES)))
    with pytest.raises(BundleError, match="level"):
        LearnedPlacement(replace(b, level="high"))


def test_scores_are_in_0_10_for_any_candidate_list_and_the_policy_fits_the_protocol():
    pol = LearnedPlacement(bundle_of(random_net(len(PLACEMENT_FEATURES))))
    assert isinstance(pol, PlacementPolicy)
    idx = ClusterIndex.build(snapshot())
    s = pol.score(pod("cart-2", "cart"), ["n1", "n2", "n3", "ghost"], idx, (2.0, 0.0))
    assert s.shape == (4,) and np.all((s >= 0) & (s <= 10))
    assert pol.score(BOUND[-1], ["n2"], idx).shape == (1,)  # its current node alone (the descheduler's case)
    assert pol.filter(pod("big", "cart", cpu_m=3200), ["n1", "n2"], idx) == {
        "n2": "Insufficient cpu: requests 3200m, free 3000m"
    }


def test_the_intent_moves_scores_by_its_documented_adjustment_and_not_at_the_defaults():
    pol = LearnedPlacement(bundle_of(random_net(len(PLACEMENT_FEATURES)), intent_gain=3.0))
    nodes = (node("n1", "a"), node("n2", "a", usage_m=3500), node("n3", "b"))
    idx = ClusterIndex.build(snapshot(nodes=nodes))
    p, c = pod("cart-2", "cart"), ["n1", "n2", "n3"]
    plain = LearnedPlacement(bundle_of(random_net(len(PLACEMENT_FEATURES)), intent_gain=0.0))
    np.testing.assert_allclose(pol.score(p, c, idx, (1.0, 1.0)), plain.score(p, c, idx, (1.0, 1.0)))
    base = np.clip(plain.score(p, c, idx, (2.0, 1.0)), 0, 10)
    # locality_weight 2: +3 × ½(caller share + callee share): n1 hosts the caller, n3 both callees
    np.testing.assert_allclose(pol.score(p, c, idx, (2.0, 1.0)), np.clip(base + [1.5, 0.0, 1.5], 0, 10), atol=1e-9)
    # balance_weight 2: −3 × overload of n2 ((3500 + 500) / 4000 = 1.0 → fully overloaded)
    base = plain.score(p, c, idx, (1.0, 2.0))
    np.testing.assert_allclose(pol.score(p, c, idx, (1.0, 2.0)), np.clip(base - [0.0, 3.0, 0.0], 0, 10), atol=1e-9)


def test_the_saturation_guard_scales_scores_down_from_70_to_100_percent_cpu_use():
    net = random_net(len(PLACEMENT_FEATURES))
    guarded = LearnedPlacement(bundle_of(net, saturation_guard=True))
    plain = LearnedPlacement(bundle_of(net))
    assert guarded.saturation_guard and not plain.saturation_guard
    # CPU use with the pod (500m) added: n1 (2300m) 70 %, n2 (3500m) 100 %, n3 (2900m) 85 %, n4 (3800m) 107 %
    nodes = tuple(node(f"n{i}", "ab"[i % 2], usage_m=u) for i, u in enumerate((2300, 3500, 2900, 3800), start=1))
    idx = ClusterIndex.build(snapshot(nodes=nodes))
    p, c = pod("cart-2", "cart"), ["n1", "n2", "n3", "n4"]
    x = guarded.features(p, c, idx)
    np.testing.assert_allclose(saturation_factor(x), [1.0, 0.0, 0.5, 0.0], atol=1e-6)
    np.testing.assert_allclose(guarded.score(p, c, idx), plain.score(p, c, idx) * saturation_factor(x), atol=1e-9)
    assert guarded.score(p, c, idx)[[1, 3]].max() == 0.0
    with torch.no_grad():
        s_t = (10 * torch.sigmoid(net(torch.from_numpy(x))) * saturation_factor_t(torch.from_numpy(x))).numpy()
    np.testing.assert_allclose(guarded.score(p, c, idx), s_t, atol=1e-5)  # trained == served


def test_a_bundle_whose_saturation_guard_is_not_a_boolean_is_refused(tmp_path):
    bundle_of(random_net(len(PLACEMENT_FEATURES)), tmp=tmp_path / "b", saturation_guard=True)
    man = tmp_path / "b" / "manifest.json"
    doc = json.loads(man.read_text())
    doc["architecture"]["saturation_guard"] = "yes"
    man.write_text(json.dumps(doc))
    with pytest.raises(BundleError, match=r"architecture\.saturation_guard: expected true or false, found 'yes'"):
        LearnedPlacement(PolicyBundle.load(tmp_path / "b"))


def test_an_embedding_copy_of_the_training_encoder_is_preferred_and_another_ignored():
    pol = LearnedPlacement(bundle_of(random_net(len(PLACEMENT_FEATURES))))
    snap = snapshot()
    idx = ClusterIndex.build(snap)
    own = compute_service_rows(snap, "encoder", pol.encoder)
    fake = EmbeddingEntry(own.fingerprint, own.services, np.zeros_like(own.matrix), 1, 0.0, pol.rows_version)
    pol.embedding_source = lambda: fake
    assert pol.service_rows(idx, "cart") is fake
    pol.embedding_source = lambda: replace(fake, encoder_version="another")
    np.testing.assert_allclose(pol.service_rows(idx, "cart").row("cart"), own.row("cart"))


def test_the_flat_variant_reads_the_encoders_input_rows():
    pol = LearnedPlacement(bundle_of(random_net(len(PLACEMENT_FEATURES_FLAT)), "flat"))
    assert pol.service_input == "flat" and pol.encoder is None
    idx = ClusterIndex.build(snapshot())
    x = pol.features(pod("cart-2", "cart"), ["n1", "n2"], idx)
    assert x.shape == (2, len(PLACEMENT_FEATURES_FLAT))


def test_a_checkpoint_exports_to_the_same_bundle(tmp_path):
    net = random_net(len(PLACEMENT_FEATURES))
    b = bundle_of(net)
    save_checkpoint(
        net,
        tmp_path / "c.pt",
        service_input="encoder",
        service_dim=32,
        rows_version=b.architecture["encoder_version"],
        temperature=20.0,
        policy_version="test",
    )
    b2 = export_checkpoint(tmp_path / "c.pt", tmp_path / "out")
    for k, a in b.weights.items():
        np.testing.assert_array_equal(a, b2.weights[k])
    assert b2.normalization["candidate"] == b.normalization["candidate"]
    with pytest.raises(ValueError, match="not a"):
        export_checkpoint(tmp_path / "out" / "manifest.json", tmp_path / "x")


@pytest.mark.parametrize(
    "path,spec",
    [
        (DEFAULT_PLACEMENT_BUNDLE, PLACEMENT_FEATURES),
        (DEFAULT_PLACEMENT_BUNDLE.parent.parent / "hrl-flat" / "low", PLACEMENT_FEATURES),
        (DEFAULT_FLAT_PLACEMENT_BUNDLE, PLACEMENT_FEATURES_FLAT),
    ],
)
def test_the_committed_bundles_load_are_small_and_say_how_they_were_trained(path, spec):
    b = PolicyBundle.load(path, level="low", feature_spec={"candidate": spec})
    size = sum(f.stat().st_size for f in path.iterdir())
    assert size < 1_000_000
    assert "PPO" in b.metadata["algorithm"] and b.metadata["train_s"] > 0
    LearnedPlacement(b)


# ---- training mechanics -----------------------------------------------------------------------------------


def test_leave_one_out_advantages_compare_rewards_to_go_at_the_decisions_minute():
    from policy.train.placement import Decision

    d = lambda t: Decision(np.zeros((1, 1)), np.zeros(1), 0, 0.0, t)  # noqa: E731
    returns = [np.array([1.0, 1.0, 1.0]), np.array([0.0, 1.0, 3.0]), np.array([2.0, 2.0, 2.0])]
    adv = loo_advantages(returns, [[d(0), d(2)], [d(1)], []])
    # to-go: [3,2,1], [4,4,3], [6,4,2]
    np.testing.assert_allclose(adv[0], [3 - (4 + 6) / 2, 1 - (3 + 2) / 2])
    np.testing.assert_allclose(adv[1], [4 - (2 + 4) / 2])
    assert len(adv[2]) == 0


def test_the_training_distribution_is_kube_schedulers_total_with_the_rounded_extender_score():
    net = random_net(4, hidden=8)
    x = torch.from_numpy(np.random.default_rng(0).normal(0, 1, (1, 3, 4)).astype(np.float32))
    D = torch.tensor([[100.0, 130.0, 90.0]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    with torch.no_grad():
        s = 10 * torch.sigmoid(net(x))
    logp = policy_log_probs(net, x, D, mask, 20.0)
    want = torch.log_softmax(torch.from_numpy(served_totals(D.numpy()[0], s.numpy()[0])).float() / 20.0, -1)
    np.testing.assert_allclose(logp.detach().numpy()[0], want.numpy(), atol=1e-5)
    logp.sum().backward()  # the straight-through rounding lets gradients through
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in net.parameters())


# ---- served decision == trained greedy choice -------------------------------------------------------------


def sim_states(n_minutes: int = 3):
    """(pod, pod object without a node, index without the pod) for every app pod of a short Online Boutique run
    with background tenants."""
    from policy.sim.app import load_app
    from policy.sim.engine import SimConfig, Simulation, background_tenants
    from policy.sim.kube_scheduler import KubeSchedulerModel
    from policy.sim.sizing import cluster_for, trace_rps

    app = load_app("online-boutique")
    spec = replace(cluster_for(app, 6), background=background_tenants(6, 2000, 8 * GI, seed=3, use_frac=0.5))
    sim = Simulation(
        app,
        trace_rps(app, "nasa", n_minutes),
        spec,
        KubeSchedulerModel(),
        SimConfig(minutes=n_minutes, seed=1, n_samples=200),
    )
    sim.run()
    snap = sim.observe()
    out = []
    for sp in sim.cluster.live_pods():
        if sp.node < 0 or sim.is_background(sp):
            continue
        obj = copy.deepcopy(sp.obj)
        obj["spec"].pop("nodeName", None)
        info = replace(sp.info, node_name=None)
        idx = ClusterIndex.build(replace(snap, pods=tuple(p for p in snap.pods if p.key != info.key)))
        out.append((info, obj, idx, sim.node_objs))
    return app, out


@pytest.mark.parametrize("which,intent", [("random", None), ("committed", None), ("committed", (3.0, 0.5))])
def test_the_served_choice_is_the_trained_policys_greedy_choice(which, intent):
    from policy.baselines.kube_default import default_score_plugins
    from policy.sim.kube_scheduler import InProcessExtender, KubeSchedulerModel
    from policy.sim.stacks import terms_lookup

    if which == "random":
        net = random_net(len(PLACEMENT_FEATURES), seed=4)
        pol = LearnedPlacement(bundle_of(net))
    else:
        pol = LearnedPlacement.load(DEFAULT_PLACEMENT_BUNDLE)
        net = PlacementNet(len(PLACEMENT_FEATURES), pol.hidden, pol.layers)
        net.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in pol.weights.items()})
        net.set_normalization(pol.mean, pol.std)
    app, states = sim_states()
    compared = 0
    for info, obj, idx, node_objs in states:
        base = KubeSchedulerModel(plugins=default_score_plugins(terms_lookup(app)))
        res0 = base.schedule(info, obj, idx, node_objs, np.random.default_rng(0))
        names = list(res0.scores)
        D = torch.tensor([[float(res0.scores[n]) for n in names]])
        x = torch.from_numpy(pol.features(info, names, idx, intent)[None])
        with torch.no_grad():
            logp = policy_log_probs(
                net,
                x,
                D,
                torch.ones_like(D, dtype=torch.bool),
                pol.temperature,
                intent_gain=pol.intent_gain,
                saturation_guard=pol.saturation_guard,
            )[0]
        top = torch.topk(logp, 2).values
        if float(top[0] - top[1]) < 1e-6:
            continue  # a tie: kube-scheduler breaks it at random
        trained = names[int(torch.argmax(logp))]
        served = KubeSchedulerModel(
            plugins=default_score_plugins(terms_lookup(app)),
            extenders=[InProcessExtender(pol, lambda idx=idx: (idx, intent), weight=2)],
        )
        res = served.schedule(info, obj, idx, node_objs, np.random.default_rng(0))
        assert res.node == trained, info.key
        compared += 1
    assert compared >= 5


@pytest.mark.parametrize("layout", ["v1", "v2"])
def test_a_bundle_of_an_earlier_layout_still_loads_and_scores_without_the_newer_columns(layout):
    """A bundle trained before ``svc_similarity_node`` (v1: CONTEXT_FEATURES_V1) or before ``node_slowness`` (v2:
    CONTEXT_FEATURES_V2) is served as it was trained: its rows are today's rows without those columns, and its scores
    are its network on those rows."""
    context = {"v1": CONTEXT_FEATURES_V1, "v2": CONTEXT_FEATURES_V2}[layout]
    dropped = np.arange(len(context), len(CONTEXT_FEATURES))
    assert [n for n, _u in context] == [n for n, _u in CONTEXT_FEATURES][: len(context)] and len(dropped) >= 1
    now = bundle_of(random_net(len(PLACEMENT_FEATURES_FLAT)), service_input="flat")
    spec_old = placement_feature_spec("flat", len(NODE_SPEC), context)
    w = dict(now.weights)
    first = min(n for n in w if n.endswith("weight"))
    w[first] = np.delete(w[first], dropped, axis=1)
    norm = {key: list(np.delete(now.normalization["candidate"][key], dropped)) for key in ("mean", "std")}
    old = replace(
        now,
        feature_spec={"candidate": spec_old},
        dims={**now.dims, "features": len(spec_old)},
        weights=w,
        normalization={"candidate": norm},
    )
    policy, current = LearnedPlacement(old), LearnedPlacement(now)
    assert (policy.context, current.context) == (context, CONTEXT_FEATURES) and len(policy.spec) == len(spec_old)
    snap = snapshot()
    index = ClusterIndex.build(snap)
    pod = snap.pods[0]
    names = [n.name for n in snap.nodes]
    x = policy.features(pod, names, index)
    np.testing.assert_array_equal(x, np.delete(current.features(pod, names, index), dropped, axis=1))
    np.testing.assert_allclose(
        policy.logits(x), mlp_logits(policy.weights, x, policy.mean, policy.std, policy.layers), rtol=1e-6
    )
