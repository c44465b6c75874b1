"""policy.lowlevel.explain: every score decomposes into named contributions that sum to it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from policy.index import ClusterIndex
from policy.lowlevel import LearnedPlacement, TopologyHeuristic
from policy.lowlevel.explain import (
    explain_scores,
    integrated_gradients,
    mlp_forward_grad,
)
from policy.state import ClusterSnapshot, NodeInfo, OwnerRef, PodInfo, Resources, ServiceEdge, ServiceGraph

GI = 2**30
ZONE = "topology.kubernetes.io/zone"


def node(name: str, zone: str, cpu_m: int = 4000, usage_m: int | None = None) -> NodeInfo:
    return NodeInfo(
        name=name,
        allocatable=Resources(cpu_m, 8 * GI),
        allocatable_pods=20,
        labels={ZONE: zone},
        usage=None if usage_m is None else Resources(usage_m, 0),
    )


def pod(name: str, service: str, node_name: str | None = None, cpu_m: int = 500) -> PodInfo:
    return PodInfo(
        name=name,
        namespace="default",
        service=service,
        requests=Resources(cpu_m, GI),
        node_name=node_name,
        phase="Running" if node_name else "Pending",
        owner=OwnerRef("ReplicaSet", f"{service}-abc12"),
    )


# the Online Boutique services the committed encoder has embedded: the learned policy's rows exist for them
GRAPH = ServiceGraph.build(
    ["frontend", "cartservice", "redis-cart", "productcatalogservice", "currencyservice"],
    [
        ServiceEdge("frontend", "cartservice", rps=30.0),
        ServiceEdge("cartservice", "redis-cart", rps=30.0),
        ServiceEdge("frontend", "productcatalogservice", rps=60.0),
        ServiceEdge("frontend", "currencyservice", rps=45.0),
    ],
)
NODES = (node("n1", "a", usage_m=3300), node("n2", "a", usage_m=800), node("n3", "b", usage_m=400), node("n4", "b"))
BOUND = (
    pod("frontend-1", "frontend", "n1"),
    pod("frontend-2", "frontend", "n3"),
    pod("redis-cart-1", "redis-cart", "n2"),
    pod("productcatalogservice-1", "productcatalogservice", "n2"),
    pod("currencyservice-1", "currencyservice", "n1", cpu_m=2500),
)


def index(pods=BOUND) -> ClusterIndex:
    return ClusterIndex.build(ClusterSnapshot(NODES, tuple(pods), graph=GRAPH, taken_at_s=100.0))


CANDS = ["n1", "n2", "n3", "n4"]


@pytest.fixture(scope="module")
def learned() -> LearnedPlacement:
    return LearnedPlacement.load()


@pytest.mark.parametrize("intent", [None, (1.0, 1.0), (2.0, 1.5), (0.5, 3.0)])
def test_the_learned_scores_parts_sum_to_the_served_score_with_a_small_quadrature_error(learned, intent):
    ix = index()
    p = pod("cartservice-1", "cartservice")
    ex = explain_scores(learned, p, CANDS, ix, intent)
    served = learned.score(p, CANDS, ix, intent)
    assert [n.node for n in ex.nodes] == CANDS
    for n, s in zip(ex.nodes, served):
        assert n.score == pytest.approx(float(s), abs=1e-9)
        assert n.total == pytest.approx(float(s), abs=1e-9)  # parts sum to the score
        assert n.served == int(np.floor(s + 0.5))
    assert ex.method == "integrated-gradients"
    assert ex.max_integration_error < 1e-4  # completeness of the integrated gradients
    assert not ex.notes


def test_the_callers_on_a_node_are_named_with_their_call_rate_and_the_full_node_is_held_back_by_the_guard(learned):
    ex = explain_scores(learned, pod("cartservice-1", "cartservice"), CANDS, index(), (2.0, 1.0))
    n1 = ex.node("n1")  # frontend (the caller) is here, and the node is at 3.3 + 0.5 of 4 cores
    callers = [c for c in n1.contributions if c.factor == "callers_on_node"]
    assert {c.service for c in callers} == {"frontend"}
    assert any("30 calls/s" in c.detail for c in callers)
    assert {c.part for c in callers} == {"network", "intent_term"}  # learned and the intent's locality term
    guard = [c for c in n1.contributions if c.factor == "saturation_guard"]
    assert len(guard) == 1 and guard[0].value < 0 and "CPU use" in guard[0].detail
    n4 = ex.node("n4")  # nobody there: no co-location contribution at all
    assert not [c for c in n4.contributions if c.factor in ("callers_on_node", "callees_on_node")]
    assert n1.top(3) and len(n1.top(3)) <= 3


def test_a_caller_moved_onto_the_node_raises_its_contribution(learned):
    base = explain_scores(learned, pod("cartservice-1", "cartservice"), CANDS, index(), None).node("n4")
    more = (*BOUND, pod("frontend-3", "frontend", "n4"))
    moved = explain_scores(learned, pod("cartservice-1", "cartservice"), CANDS, index(more), None).node("n4")
    got = sum(c.value for c in moved.contributions if c.factor == "callers_on_node")
    assert sum(c.value for c in base.contributions if c.factor == "callers_on_node") == 0.0
    assert got != 0.0


def test_integrated_gradients_are_complete_and_the_gradient_matches_finite_differences(learned):
    rng = np.random.default_rng(0)
    F = len(learned.spec)
    x = learned.mean + learned.std * rng.normal(size=(5, F))
    x0 = np.tile(learned.mean, (5, 1)).astype(np.float64)
    attr, nx, n0 = integrated_gradients(learned.weights, x, x0, learned.mean, learned.std, learned.layers)
    assert np.allclose(attr.sum(axis=1), nx - n0, atol=1e-5)
    n, g = mlp_forward_grad(learned.weights, x, learned.mean, learned.std, learned.layers)
    j, eps = 4, 1e-5 * float(learned.std[4])
    xp, xm = x.copy(), x.copy()
    xp[:, j] += eps
    xm[:, j] -= eps

    def n_at(v):
        return mlp_forward_grad(learned.weights, v, learned.mean, learned.std, learned.layers)[0]

    fd = (n_at(xp) - n_at(xm)) / (2 * eps)
    assert np.allclose(g[:, j], fd, rtol=1e-4, atol=1e-6)
    z = learned.logits(x.astype(np.float32))
    assert np.allclose(n, 10 / (1 + np.exp(-z)), atol=1e-4)  # the same network as served


def test_too_few_quadrature_points_show_up_as_the_integration_error_not_as_a_wrong_sum(learned):
    ix = index()
    p = pod("cartservice-1", "cartservice")
    x = learned.features(p, CANDS, ix).astype(np.float64)
    x0 = x.copy()
    x0[:, :8] = learned.mean[:8]
    coarse, nx, n0 = integrated_gradients(learned.weights, x, x0, learned.mean, learned.std, learned.layers, points=1)
    fine, _, _ = integrated_gradients(learned.weights, x, x0, learned.mean, learned.std, learned.layers)
    err_coarse = np.abs(coarse.sum(1) - (nx - n0)).max()
    err_fine = np.abs(fine.sum(1) - (nx - n0)).max()
    assert err_fine < 1e-5 and err_fine < err_coarse


@pytest.mark.parametrize("intent", [None, (1.5, 1.0), (1.0, 3.0), (5.0, 0.0)])
def test_the_heuristics_parts_are_exact_neighbours_intent_overload_and_clip(intent):
    h = TopologyHeuristic(target_utilization=0.6)
    ix = index()
    p = pod("cartservice-1", "cartservice")
    ex = explain_scores(h, p, CANDS, ix, intent)
    scores = h.score(p, CANDS, ix, intent)
    assert ex.method == "exact" and ex.max_integration_error == 0.0
    for n, s in zip(ex.nodes, scores):
        assert math.isclose(n.total, float(s), abs_tol=1e-12)
    n1 = ex.node("n1")  # frontend's only pod of two on n1 (30 of the 60 calls/s: redis-cart is the other side)
    fr = next(c for c in n1.contributions if c.service == "frontend")
    assert fr.factor == "callers_on_node" and fr.value == pytest.approx(10 * 0.5 * 0.5)
    if intent == (1.0, 3.0):  # n1 is at 95 % with the pod: the overload penalty is there, negative
        assert any(c.factor == "cpu_pressure" and c.value < 0 for c in n1.contributions)


def test_a_policy_without_a_decomposition_gets_its_score_as_one_contribution():
    class Flat:
        name = "flat"

        def score(self, pod, candidates, index, intent=None, *, embeddings=None):
            return np.full(len(candidates), 4.4)

    ex = explain_scores(Flat(), pod("cartservice-1", "cartservice"), CANDS, index())  # type: ignore[arg-type]
    assert ex.method == "none" and all(n.total == 4.4 and n.served == 4 for n in ex.nodes)
