"""extender.scoring: the extender's decisions as pure functions (fail open, clamp, no-fit reasons)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from extender.scoring import FILTER_OUTCOMES, PRIORITIZE_OUTCOMES, filter_nodes, prioritize
from extender.store import SnapshotStore
from extender.wire import decode_filter_result, decode_host_priorities, parse_extender_args
from policy.intent import Intent, PendingMove
from policy.lowlevel import TopologyHeuristic
from policy.state import ClusterSnapshot, NodeInfo, OwnerRef, PodInfo, Resources, ServiceEdge, ServiceGraph

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "extender"
NAMES = ["boutique-worker", "boutique-worker2", "boutique-worker3"]


def boutique_graph() -> ServiceGraph:
    d = json.loads((FIX / "online-boutique-graph.json").read_text())
    return ServiceGraph.build(d["services"], [ServiceEdge(e["caller"], e["callee"], e["rps"]) for e in d["edges"]])


def args(name: str = "args-nodecachecapable.json"):
    return parse_extender_args((FIX / name).read_bytes())


def scores(reply) -> dict[str, int]:
    return {h["Host"]: h["Score"] for h in reply}


def fixture_store(clock=lambda: 1000.0) -> SnapshotStore:
    s = SnapshotStore(clock=clock)
    s.set_graph(boutique_graph())
    s.load_file(FIX / "cluster-list.json")
    return s


# ---- small designed clusters -------------------------------------------------------------------------


def node(name: str, cpu_m: int = 4000, mem: int = 16 * 2**30, **kw) -> NodeInfo:
    return NodeInfo(name=name, allocatable=Resources(cpu_m, mem), **kw)


def pod(name: str, service: str, node_name: str | None = None, cpu_m: int = 100, mem: int = 2**26) -> PodInfo:
    return PodInfo(
        name=name,
        namespace="default",
        service=service,
        requests=Resources(cpu_m, mem),
        node_name=node_name,
        phase="Running" if node_name else "Pending",
        owner=OwnerRef("ReplicaSet", f"{service}-abc12"),
    )


def pod_json(name: str, service: str, cpu: str = "100m") -> dict:
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"app": service},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"{service}-5d8c9f7b6d",
                    "uid": "u",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}],
            "schedulerName": "default-scheduler",
        },
        "status": {"phase": "Pending"},
    }


def request(service: str, names: list[str], cpu: str = "100m"):
    return parse_extender_args(
        {"Pod": pod_json(f"{service}-5d8c9f7b6d-abcde", service, cpu), "Nodes": None, "NodeNames": names}
    )


GRAPH = ServiceGraph.build([], [ServiceEdge("web", "api", rps=50.0), ServiceEdge("api", "db", rps=20.0)])


def store_of(nodes, pods, graph=GRAPH) -> SnapshotStore:
    s = SnapshotStore(clock=lambda: 0.0)
    s.update(ClusterSnapshot(nodes=tuple(nodes), pods=tuple(pods), graph=graph))
    return s


HEURISTIC = TopologyHeuristic()


# ---- the heuristic through the extender ---------------------------------------------------------------


def test_the_node_hosting_the_pods_callee_with_room_gets_the_top_score():
    s = store_of([node("x"), node("y"), node("z")], [pod("api-1", "api", "y")])
    reply, outcome = prioritize(request("web", ["x", "y", "z"]), s.get(), HEURISTIC)
    assert outcome == "ok"
    sc = scores(reply)
    assert sc["y"] == 10 and sc["x"] == 0 and sc["z"] == 0


def test_a_hot_node_is_penalised_against_an_equally_close_cool_node():
    # api's neighbours: web (50 rps, one pod on x and one on y) and db (20 rps, unplaced):
    # locality 0.5 * 50/70 on both; x is hot: (3400 + 2*100 + 100) m / 4000 m = 0.925 > 0.7
    # → penalty (0.925 - 0.7) / 0.3 = 0.75 → score 3.57 * 0.25 ≈ 0.9.
    s = store_of(
        [node("x"), node("y")],
        [pod("web-1", "web", "x"), pod("web-2", "web", "y"), pod("hog", "batch", "x", cpu_m=3400)],
    )
    reply, outcome = prioritize(request("api", ["x", "y"]), s.get(), HEURISTIC)
    sc = scores(reply)
    assert outcome == "ok"
    assert sc == {"x": 1, "y": 4}


def test_call_rates_weigh_the_neighbours():
    # api talks to web at 50 rps and db at 20 rps: the node with web wins over the node with db.
    s = store_of([node("x"), node("y")], [pod("web-1", "web", "x"), pod("db-1", "db", "y")])
    sc = scores(prioritize(request("api", ["x", "y"]), s.get(), HEURISTIC)[0])
    assert sc["x"] > sc["y"] > 0


def test_online_boutique_frontend_prefers_the_node_with_most_of_its_callees_and_avoids_the_hot_one():
    s = fixture_store()
    reply, outcome = prioritize(args(), s.get(), HEURISTIC)
    assert outcome == "ok"
    assert scores(reply) == {"boutique-worker": 1, "boutique-worker2": 5, "boutique-worker3": 2}
    assert decode_host_priorities(json.dumps(reply), NAMES)  # a reply kube-scheduler accepts


def test_both_request_modes_score_the_same():
    s = fixture_store()
    a, _ = prioritize(args("args-nodecachecapable.json"), s.get(), HEURISTIC)
    b, _ = prioritize(args("args-nodelist.json"), s.get(), HEURISTIC)
    assert a == b


def test_the_intent_vector_reaches_the_policy():
    s = store_of([node("x"), node("y")], [pod("api-1", "api", "y")])
    s.set_intent(Intent([0.0, 1.0]), version="plan-1")  # locality weight 0: nothing to prefer
    reply, outcome = prioritize(request("web", ["x", "y"]), s.get(), HEURISTIC)
    assert outcome == "ok" and scores(reply) == {"x": 0, "y": 0}


def test_a_pending_make_before_break_move_steers_its_services_new_pod_to_the_target_and_only_that_service():
    s = store_of([node("x"), node("y"), node("z")], [pod("api-1", "api", "y")])
    move = PendingMove("default", "web", "web", "z", expires_at_s=100.0, source_pod="web-5d8c9f7b6d-old")
    s.set_intent(Intent([1.0, 1.0]), pending_moves=(move,))
    reply, outcome = prioritize(request("web", ["x", "y", "z"]), s.get(), HEURISTIC, now_s=50.0)
    assert outcome == "pending_move" and outcome in PRIORITIZE_OUTCOMES
    assert scores(reply) == {"x": 0, "y": 0, "z": 10}  # without it y (next to api) would win
    assert prioritize(request("db", ["x", "y", "z"]), s.get(), HEURISTIC, now_s=50.0)[1] == "ok"  # other services
    # expired, or its target filtered out by kube-scheduler: scored as usual
    assert prioritize(request("web", ["x", "y", "z"]), s.get(), HEURISTIC, now_s=100.0)[1] == "ok"
    reply, outcome = prioritize(request("web", ["x", "y"]), s.get(), HEURISTIC, now_s=50.0)
    assert outcome == "ok" and scores(reply)["y"] == 10


def test_a_pending_move_is_applied_even_before_the_first_snapshot():
    s = SnapshotStore(clock=lambda: 0.0)
    s.set_intent(None, pending_moves=(PendingMove("default", "web", "web", "y", 100.0),))
    reply, outcome = prioritize(request("web", ["x", "y"]), s.get(), HEURISTIC, now_s=1.0)
    assert outcome == "pending_move" and scores(reply) == {"x": 0, "y": 10}


def test_the_store_keeps_the_latest_expiring_pending_move_per_service_and_refuses_anything_else():
    s = SnapshotStore(clock=lambda: 0.0)
    early, late = PendingMove("default", "web", "web", "x", 10.0), PendingMove("default", "web", "web", "y", 20.0)
    v = s.set_intent(None, pending_moves=(late, early))
    assert dict(v.pending_moves) == {("default", "web"): late}
    with pytest.raises(TypeError, match="pending_moves"):
        s.set_intent(None, pending_moves=({"service": "web"},))
    assert s.get().pending_moves[("default", "web")] is late  # nothing changed


# ---- failing open -----------------------------------------------------------------------------------------


class Raising:
    name = "raising"

    def filter(self, pod, candidates, index):
        raise RuntimeError("policy bug")

    def score(self, pod, candidates, index, intent=None):
        raise RuntimeError("policy bug")


class Fixed:
    """Returns the given scores / failures; records what it was asked."""

    name = "fixed"

    def __init__(self, values=None, failures=None):
        self.values = values
        self.failures = failures or {}
        self.calls: list[tuple[list[str], object]] = []

    def filter(self, pod, candidates, index):
        self.calls.append((list(candidates), None))
        return dict(self.failures)

    def score(self, pod, candidates, index, intent=None):
        self.calls.append((list(candidates), intent))
        return np.asarray(self.values, dtype=float)


def small_store() -> SnapshotStore:
    return store_of([node("x"), node("y"), node("z")], [pod("api-1", "api", "y")])


@pytest.mark.parametrize(
    "view_of,policy,outcome",
    [
        (lambda: SnapshotStore().get(), HEURISTIC, "neutral_no_snapshot"),
        (lambda: small_store().get(), Raising(), "neutral_error"),
        (lambda: small_store().get(), Fixed([1.0, math.nan, 3.0]), "neutral_nonfinite"),
        (lambda: small_store().get(), Fixed([1.0, math.inf, 3.0]), "neutral_nonfinite"),
        (lambda: small_store().get(), Fixed([1.0, 2.0]), "neutral_error"),  # wrong length
        (lambda: small_store().get(), Fixed([[1.0, 2.0, 3.0]]), "neutral_error"),  # wrong shape
    ],
)
def test_trouble_gives_neutral_scores_and_an_outcome_saying_why(view_of, policy, outcome):
    reply, got = prioritize(request("web", ["x", "y", "z"]), view_of(), policy)
    assert got == outcome and got in PRIORITIZE_OUTCOMES
    assert reply == [{"Host": n, "Score": 0} for n in ("x", "y", "z")]


def test_a_pod_of_a_service_the_graph_does_not_know_scores_neutral():
    reply, outcome = prioritize(request("unrelated", ["x", "y", "z"]), small_store().get(), HEURISTIC)
    assert outcome == "neutral_unknown_service" and {h["Score"] for h in reply} == {0}


def test_a_stale_snapshot_scores_neutral_and_a_fresh_one_does_not():
    s = store_of([node("x"), node("y")], [pod("api-1", "api", "y")])  # updated at t=0
    r = request("web", ["x", "y"])
    assert prioritize(r, s.get(), HEURISTIC, max_snapshot_age_s=30, now_s=31.0)[1] == "neutral_stale"
    assert prioritize(r, s.get(), HEURISTIC, max_snapshot_age_s=30, now_s=29.0)[1] == "ok"
    assert prioritize(r, s.get(), HEURISTIC, max_snapshot_age_s=0, now_s=1e9)[1] == "ok"  # 0 = never stale


def test_candidates_the_snapshot_lacks_score_neutral_and_are_not_shown_to_the_policy():
    p = Fixed([7.0, 9.0])
    reply, outcome = prioritize(request("web", ["x", "ghost", "y"]), small_store().get(), p)
    assert outcome == "ok"
    assert reply == [{"Host": "x", "Score": 7}, {"Host": "ghost", "Score": 0}, {"Host": "y", "Score": 9}]
    assert p.calls[0][0] == ["x", "y"]


def test_only_unknown_candidates_score_neutral():
    reply, outcome = prioritize(request("web", ["g1", "g2"]), small_store().get(), HEURISTIC)
    assert outcome == "neutral_unknown_nodes" and reply == [{"Host": "g1", "Score": 0}, {"Host": "g2", "Score": 0}]


def test_out_of_range_policy_scores_are_clamped_to_0_10():
    reply, outcome = prioritize(request("web", ["x", "y", "z"]), small_store().get(), Fixed([-4.0, 12.0, 7.6]))
    assert outcome == "ok" and scores(reply) == {"x": 0, "y": 10, "z": 8}


def test_no_candidates_gives_an_empty_reply():
    assert prioritize(request("web", []), small_store().get(), HEURISTIC) == ([], "ok")


# ---- filter ---------------------------------------------------------------------------------------------------


def test_filter_passes_every_node_with_room():
    result, outcome = filter_nodes(request("web", ["x", "y", "z"]), small_store().get(), HEURISTIC)
    assert outcome == "ok"
    assert result == {
        "Nodes": None,
        "NodeNames": ["x", "y", "z"],
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }


def test_filter_rejects_only_nodes_without_room_with_the_reason():
    s = store_of(
        [node("x", cpu_m=1000), node("y", cpu_m=1000), node("z", unschedulable=True)],
        [pod("hog", "batch", "x", cpu_m=900)],
    )
    result, outcome = filter_nodes(request("web", ["x", "y", "z"], cpu="500m"), s.get(), HEURISTIC)
    assert outcome == "filtered"
    assert result["NodeNames"] == ["y"]
    assert result["FailedNodes"]["x"].startswith("Insufficient cpu")
    assert "cordoned" in result["FailedNodes"]["z"]


def test_no_fit_is_a_normal_reply_with_every_reason():
    s = store_of([node("x", cpu_m=1000), node("y", cpu_m=1000)], [])
    result, outcome = filter_nodes(request("web", ["x", "y"], cpu="2"), s.get(), HEURISTIC)
    assert outcome == "no_fit"
    assert result["NodeNames"] == [] and result["Error"] == ""
    assert set(result["FailedNodes"]) == {"x", "y"}
    assert decode_filter_result(json.dumps(result), ["x", "y"], node_cache_capable=True) == (
        [],
        result["FailedNodes"],
        {},
    )


@pytest.mark.parametrize(
    "view_of,policy,outcome",
    [
        (lambda: SnapshotStore().get(), HEURISTIC, "no_snapshot"),
        (lambda: small_store().get(), Raising(), "error"),
        (lambda: small_store().get(), Fixed(failures=["not", "a", "dict"]), "error"),
    ],
)
def test_filter_fails_open(view_of, policy, outcome):
    result, got = filter_nodes(request("web", ["x", "y", "z"]), view_of(), policy)
    assert got == outcome and got in FILTER_OUTCOMES
    assert result["NodeNames"] == ["x", "y", "z"] and result["FailedNodes"] == {}


def test_filter_on_a_stale_snapshot_passes_every_node():
    s = store_of([node("x", cpu_m=10)], [])
    result, outcome = filter_nodes(request("web", ["x"]), s.get(), HEURISTIC, max_snapshot_age_s=5, now_s=6.0)
    assert outcome == "stale" and result["NodeNames"] == ["x"]


def test_filter_passes_candidates_the_snapshot_lacks():
    p = Fixed(failures={"x": "no", "ghost": "also no"})
    result, outcome = filter_nodes(request("web", ["x", "ghost"]), small_store().get(), p)
    assert p.calls[0][0] == ["x"]
    assert result["NodeNames"] == ["ghost"] and result["FailedNodes"] == {"x": "no"}
    assert outcome == "filtered"


def test_filter_gives_an_empty_policy_reason_a_readable_one():
    result, _ = filter_nodes(request("web", ["x", "y"]), small_store().get(), Fixed(failures={"x": ""}))
    assert result["FailedNodes"] == {"x": "rejected by fixed"}


def test_filter_in_node_list_mode_answers_with_node_objects():
    s = fixture_store()
    p = args("args-nodelist.json")
    result, outcome = filter_nodes(p, s.get(), Fixed(failures={"boutique-worker3": "hot"}))
    assert outcome == "filtered" and result["NodeNames"] is None
    assert [it["metadata"]["name"] for it in result["Nodes"]["items"]] == NAMES[:2]
    assert decode_filter_result(json.dumps(result), NAMES, node_cache_capable=False)[0] == NAMES[:2]
