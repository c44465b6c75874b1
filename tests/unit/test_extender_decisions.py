"""extender.decisions: the decision record and shadow mode (neutral answers, what we would have chosen, the bound
node from the snapshots the watch publishes, agreement and score-gap metrics, explanations, Events)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from prometheus_client import CollectorRegistry

from extender.config import decision_recorder, load_extender_config
from extender.decisions import DecisionRecorder, DecisionSettings, event_note
from extender.scoring import prioritize, prioritize_scores
from extender.store import SnapshotStore
from extender.wire import ParsedArgs
from policy.config import ConfigError
from policy.lowlevel import TopologyHeuristic
from policy.state import ClusterSnapshot, NodeInfo, OwnerRef, PodInfo, Resources, ServiceEdge, ServiceGraph

GRAPH = ServiceGraph.build(["web", "api", "db"], [ServiceEdge("web", "api", 20.0), ServiceEdge("api", "db", 5.0)])
NODES = tuple(NodeInfo(f"n{i}", Resources(4000, 16 * 2**30)) for i in range(3))


def pod(name: str, service: str, node: str | None = None, uid: str = "") -> PodInfo:
    return PodInfo(
        name,
        "shop",
        service,
        Resources(200, 2**28),
        uid=uid or f"uid-{name}",
        node_name=node,
        phase="Running" if node else "Pending",
        owner=OwnerRef("ReplicaSet", f"{service}-abc"),
    )


BOUND = (pod("web-1", "web", "n1"), pod("db-1", "db", "n2"))
NEW = pod("api-1", "api")


def snapshot(*extra: PodInfo) -> ClusterSnapshot:
    return ClusterSnapshot(NODES, (*BOUND, *extra), graph=GRAPH, taken_at_s=1.0)


class Sink:
    def __init__(self, fail: bool = False):
        self.posted: list[tuple[str, str, str]] = []
        self.fail = fail

    def post(self, pod, reason, action, note):
        if self.fail:
            raise RuntimeError("403 Forbidden")
        self.posted.append((pod.key, reason, note))


def setup(tmp_path, mode="shadow", events=None, timeout_s=300.0):
    store = SnapshotStore(clock=lambda: 1000.0)
    store.update(snapshot(NEW))
    reg = CollectorRegistry()
    settings = DecisionSettings(log_path=tmp_path / "shadow" / "decisions.jsonl", pending_timeout_s=timeout_s)
    rec = DecisionRecorder(mode, TopologyHeuristic(), reg, settings, events=events)
    store.set_decisions(rec, shadow=mode == "shadow")
    return store, rec, reg


def ask(store, p: PodInfo = NEW, names=("n0", "n1", "n2")):
    return prioritize_scores(ParsedArgs(p, list(names), "NodeNames"), store.get(), TopologyHeuristic())


def records(tmp_path):
    return [json.loads(x) for x in (tmp_path / "shadow" / "decisions.jsonl").read_text().splitlines()]


def test_shadow_mode_answers_neutral_and_records_what_it_would_have_chosen_with_the_bound_node(tmp_path):
    store, rec, reg = setup(tmp_path)
    scores, outcome = ask(store)
    assert outcome == "shadow" and scores.tolist() == [0, 0, 0]  # kube-scheduler alone decides
    reply, outcome = prioritize(ParsedArgs(NEW, ["n0", "n1", "n2"], "NodeNames"), store.get(), TopologyHeuristic())
    assert outcome == "shadow" and {h["Score"] for h in reply} == {0}
    # kube-scheduler binds it to n0 (not where its caller runs): the watch publishes the snapshot
    store.update(snapshot(replace(NEW, node_name="n0", phase="Running")))
    rec.flush()
    v = reg.get_sample_value
    assert v("hrl_extender_decisions_total", {"mode": "shadow", "result": "disagree"}) == 1
    assert v("hrl_extender_decision_score_gap_count", {"mode": "shadow"}) == 1
    assert v("hrl_extender_decisions_pending") == 0
    [r] = records(tmp_path)
    assert r["kind"] == "ExtenderDecision" and r["version"] == 1 and r["mode"] == "shadow"
    assert r["pod"] == "shop/api-1" and r["bound_node"] == "n0" and r["result"] == "disagree"
    assert r["our_choice"] == ["n1"]  # web (its caller at 20 calls/s) runs there
    assert [c["node"] for c in r["candidates"]][0] == "n1" and len(r["candidates"]) == 3
    assert r["score_gap"] == pytest.approx(r["best_score"] - r["bound_score"]) and r["score_gap"] > 0
    best = r["explanation"]["best"]
    assert sum(c["points"] for c in best["contributions"]) == pytest.approx(best["score"], abs=1e-4)
    assert any(c.get("service") == "web" and c["factor"] == "callers_on_node" for c in best["contributions"])


def test_agreement_when_the_scheduler_binds_to_our_best_node(tmp_path):
    store, rec, reg = setup(tmp_path)
    ask(store)
    store.update(snapshot(replace(NEW, node_name="n1", phase="Running")))
    rec.flush()
    assert reg.get_sample_value("hrl_extender_decisions_total", {"mode": "shadow", "result": "agree"}) == 1
    [r] = records(tmp_path)
    assert r["score_gap"] == 0 and r["result"] == "agree"


def test_a_pod_we_scored_alike_on_every_candidate_counts_neither_as_agreement_nor_as_disagreement(tmp_path):
    store, rec, reg = setup(tmp_path)
    store.update(ClusterSnapshot(NODES, (NEW,), graph=GRAPH, taken_at_s=1.0))  # no caller or callee placed yet
    scores, outcome = ask(store)
    assert outcome == "shadow"
    store.update(ClusterSnapshot(NODES, (replace(NEW, node_name="n2", phase="Running"),), graph=GRAPH, taken_at_s=2.0))
    rec.flush()
    [r] = records(tmp_path)
    assert r["our_choice"] == ["n0", "n1", "n2"] and r["score_gap"] == 0  # three identical empty nodes: a tie
    assert r["result"] == "indifferent"
    v = reg.get_sample_value
    assert v("hrl_extender_decisions_total", {"mode": "shadow", "result": "indifferent"}) == 1
    assert v("hrl_extender_decisions_total", {"mode": "shadow", "result": "agree"}) in (None, 0)


def test_active_mode_records_but_answers_its_scores(tmp_path):
    store, rec, reg = setup(tmp_path, mode="active")
    scores, outcome = ask(store)
    assert outcome == "ok" and scores.tolist()[1] > 0
    store.update(snapshot(replace(NEW, node_name="n1", phase="Running")))
    rec.flush()
    assert reg.get_sample_value("hrl_extender_decisions_total", {"mode": "active", "result": "agree"}) == 1


def test_a_pod_we_would_not_score_is_recorded_as_not_scored_with_the_reason(tmp_path):
    store, rec, reg = setup(tmp_path)
    stranger = pod("cache-1", "cache")  # not in the call graph
    scores, outcome = ask(store, stranger)
    assert outcome == "neutral_unknown_service"
    store.update(snapshot(NEW, replace(stranger, node_name="n2", phase="Running")))
    rec.flush()
    [r] = records(tmp_path)
    assert r["result"] == "not_scored" and r["outcome"] == "neutral_unknown_service" and "explanation" not in r


def test_a_pod_never_bound_expires_as_unbound_and_a_recreated_pod_is_not_taken_for_it(tmp_path):
    t = [1000.0]
    store, rec, reg = setup(tmp_path, timeout_s=60.0)
    rec.clock = lambda: t[0]
    ask(store)
    other = replace(NEW, uid="uid-other", node_name="n1", phase="Running")  # same name, another pod
    store.update(snapshot(other))
    assert reg.get_sample_value("hrl_extender_decisions_pending") == 1
    t[0] += 61
    rec.expire()
    rec.flush()
    assert reg.get_sample_value("hrl_extender_decisions_total", {"mode": "shadow", "result": "unbound"}) == 1
    assert records(tmp_path)[0]["bound_node"] is None


def test_pending_decisions_are_bounded_and_the_overflow_is_counted(tmp_path):
    store = SnapshotStore(clock=lambda: 1000.0)
    store.update(snapshot())
    reg = CollectorRegistry()
    rec = DecisionRecorder("shadow", TopologyHeuristic(), reg, DecisionSettings(max_pending=3))
    store.set_decisions(rec, shadow=True)
    for i in range(5):
        ask(store, pod(f"api-{i}", "api"))
    assert reg.get_sample_value("hrl_extender_decisions_pending") == 3
    assert reg.get_sample_value("hrl_extender_decisions_dropped_total", {"reason": "pending_full"}) == 2


def test_events_carry_the_top_three_and_a_failing_sink_is_counted_not_raised(tmp_path):
    sink = Sink()
    store, rec, reg = setup(tmp_path, events=sink)
    ask(store)
    store.update(snapshot(replace(NEW, node_name="n0", phase="Running")))
    rec.flush()
    [(key, reason, note)] = sink.posted
    assert key == "shop/api-1" and reason == "HrlShadowChoice"
    assert "would have chosen n1" in note and "callers_on_node/web" in note and "bound to n0" in note
    assert len(note) <= 1024
    bad = Sink(fail=True)
    store2, rec2, reg2 = setup(tmp_path / "b", events=bad)
    ask(store2)
    store2.update(snapshot(replace(NEW, node_name="n1", phase="Running")))
    rec2.flush()
    assert reg2.get_sample_value("hrl_extender_decisions_dropped_total", {"reason": "event_error"}) == 1


def test_the_worker_thread_writes_the_log_and_stop_drains_it(tmp_path):
    store, rec, reg = setup(tmp_path)
    rec.start()
    for i in range(20):
        ask(store, pod(f"api-{i}", "api"))
    store.update(snapshot(*(pod(f"api-{i}", "api", f"n{i % 3}") for i in range(20))))
    rec.stop()
    assert len(records(tmp_path)) == 20
    results = {r["result"] for r in records(tmp_path)}
    assert results <= {"agree", "disagree"}


def conf(**fields):
    return load_extender_config({"apiVersion": "hrl-scheduler.io/v1alpha1", "kind": "ExtenderConfiguration", **fields})


def test_configuration_mode_and_decisions_validate_together(tmp_path):
    cfg = conf(mode="shadow")
    assert cfg.records_decisions and cfg.mode == "shadow"
    assert not conf().records_decisions
    with pytest.raises(ConfigError, match="shadow mode records decisions"):
        conf(mode="shadow", decisions={"enabled": False})
    with pytest.raises(ConfigError, match="kubernetes.enabled"):
        conf(mode="shadow", decisions={"events": True})
    with pytest.raises(ConfigError, match="mode"):
        conf(mode="dry")
    # plugin mode scores from the published table in kube-scheduler, which shadow mode could not make neutral
    with pytest.raises(ConfigError, match="scoreTable.publish: true and mode: shadow"):
        conf(mode="shadow", cache={"address": "127.0.0.1:9090"}, scoreTable={"publish": True})
    assert conf(cache={"address": "127.0.0.1:9090"}, scoreTable={"publish": True}).score_table_address()
    cfg = conf(mode="shadow", decisions={"log": str(tmp_path / "d.jsonl"), "maxPending": 7})
    rec = decision_recorder(cfg, TopologyHeuristic(), CollectorRegistry())
    assert rec is not None and rec.max_pending == 7 and rec.mode == "shadow"
    rec.stop()
    assert decision_recorder(conf(), TopologyHeuristic(), CollectorRegistry()) is None


def test_the_event_note_is_cut_to_the_apis_limit():
    class D:
        mode, our_choice, best_score, bound_node, bound_score, result = (
            "shadow",
            ("n" * 2000,),
            7.0,
            "x",
            1.0,
            "disagree",
        )
        explanation = None

    assert len(event_note(D())) == 1024  # type: ignore[arg-type]


def test_shadow_needs_a_recorder():
    with pytest.raises(ValueError):
        SnapshotStore().set_decisions(None, shadow=True)
