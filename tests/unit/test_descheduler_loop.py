"""One descheduling cycle end to end: plan → re-read → guards → evict → ledger / history, and dry run."""

from __future__ import annotations

import json
import os
import signal
import threading
from dataclasses import replace

import pytest
from prometheus_client import CollectorRegistry

from descheduler.config import load_descheduler_config
from descheduler.evict import DryRunEvictor, Evictor, safe_evict
from descheduler.guards import EvictionHistory
from descheduler.loop import REPORT_OUTCOMES, CycleDeps, CycleReport, run_forever, run_once
from descheduler.metrics import DeschedulerMetrics
from descheduler.reread import SnapshotReader
from descheduler.scale import DryRunScaler
from policy.highlevel import RebalanceHeuristic
from policy.intent import Intent
from policy.lowlevel import TopologyHeuristic
from policy.state import (
    ClusterSnapshot,
    EvictionResult,
    LabelSelector,
    Move,
    NodeInfo,
    OwnerRef,
    Plan,
    PodDisruptionBudgetInfo,
    PodInfo,
    Resources,
    ServiceEdge,
    ServiceGraph,
    frozen_map,
)

GI = 1024**3
NOW_S = 1_700_000_000.0
PLACEMENT = TopologyHeuristic()


# ---- small fakes of the slice of the world the loop uses --------------------------------------------


def node(name: str) -> NodeInfo:
    return NodeInfo(name, Resources(8000, 32 * GI))


def pod(workload: str, node_name: str, suffix: str = "aaaaa", ns: str = "shop", uid: str = "") -> PodInfo:
    return PodInfo(
        name=f"{workload}-{suffix}",
        namespace=ns,
        service=workload,
        requests=Resources(100, GI),
        uid=uid or f"uid-{workload}-{suffix}",
        node_name=node_name,
        phase="Running",
        owner=OwnerRef("ReplicaSet", workload),
        labels=frozen_map({"app": workload}),
        scheduler_name="hrl-scheduler",
        ready=True,
    )


class FakeCluster:
    """Holds the current snapshot; ``observe`` returns it; hooks can change it between reads."""

    def __init__(self, pods, pdbs=(), graph=ServiceGraph()):
        self.snapshot = ClusterSnapshot(
            nodes=(node("n1"), node("n2"), node("n3")), pods=tuple(pods), pdbs=tuple(pdbs), graph=graph
        )
        self.reads = 0
        self.on_read = None

    def observe(self) -> ClusterSnapshot:
        self.reads += 1
        if self.on_read is not None:
            self.on_read(self)
        return self.snapshot

    def remove(self, key: str) -> None:
        self.snapshot = replace(self.snapshot, pods=tuple(p for p in self.snapshot.pods if p.key != key))

    def add(self, p: PodInfo) -> None:
        self.snapshot = replace(self.snapshot, pods=self.snapshot.pods + (p,))


class RecordingEvictor:
    """Records every call; answers ``outcomes[pod key]`` (default ``evicted``); removes evicted pods from
    ``cluster`` when given (a real eviction), or changes nothing (to compare with a dry run)."""

    def __init__(self, cluster: FakeCluster | None = None, outcomes=None, raises=()):
        self.cluster = cluster
        self.outcomes = outcomes or {}
        self.raises = set(raises)
        self.calls: list[str] = []

    def evict(self, p: PodInfo, reason: str) -> EvictionResult:
        self.calls.append(p.key)
        if p.key in self.raises:
            raise ConnectionError("apiserver unreachable")
        outcome = self.outcomes.get(p.key, "evicted")
        if outcome == "evicted" and self.cluster is not None:
            self.cluster.remove(p.key)
        return EvictionResult(p.key, outcome, outcome)


class ScriptedPlanner:
    name = "scripted"

    def __init__(self, *pods: PodInfo, to_node: str = "n3"):
        self.moves = tuple(Move(p.key, p.node_name, to_node, "locality", 1.0) for p in pods)

    def plan(self, snapshot, index, placement) -> Plan:
        return Plan(moves=self.moves, replica_targets={"shop/api": 3}, intent=Intent((1.0, 1.0)))


def config(**kw):
    base = {
        "apiVersion": "hrl-scheduler.io/v1alpha1",
        "kind": "DeschedulerConfiguration",
        "caps": {"perNode": None, "perNamespace": None, "total": None},
        # the loop's mechanics; kube-scheduler's prediction and the move cost model have tests of their own
        "schedulerPrediction": {"enabled": False},
        "moves": {"costModel": {"enabled": False}},
    }
    base.update(kw)
    return load_descheduler_config(base)


def cycle(
    cluster, evictor, planner, cfg=None, history=None, now_s=NOW_S, warnings=(), snapshot=None, **deps
) -> CycleReport:
    deps = CycleDeps(cluster.observe, evictor, planner, PLACEMENT, cfg or config(), history, **deps)
    return run_once(deps, now_s, warnings=warnings, snapshot=snapshot)


def outcomes(report: CycleReport) -> list[tuple[str, str]]:
    return [(r.move.pod, r.outcome) for r in report.results]


# ---- tests --------------------------------------------------------------------------------------------


def test_the_real_planner_and_a_real_eviction_move_a_chatty_pod_next_to_its_neighbour():
    g = ServiceGraph.build((), [ServiceEdge("api", "db", rps=40.0)])
    cluster = FakeCluster([pod("api", "n1"), pod("db", "n2")], graph=g)
    ev = RecordingEvictor(cluster)
    report = cycle(cluster, ev, RebalanceHeuristic())
    assert ev.calls == ["shop/api-aaaaa"]
    assert [(m.pod, m.to_node, m.reason) for m in report.planned_moves] == [("shop/api-aaaaa", "n2", "locality")]
    assert report.counts["evicted"] == 1 == report.evictions and not report.dry_run
    assert cluster.reads == 1  # one observation per cycle; the eviction re-reads only the pod, owner and node
    assert report.reads == {"node": 1, "owner": 1, "pod": 1}


@pytest.mark.parametrize(
    "caps, pods, blocked_by",
    [
        ({"perNode": 2}, [pod("a", "n1"), pod("b", "n1"), pod("c", "n1")], "cap_node"),
        ({"perNamespace": 2}, [pod("a", "n1"), pod("b", "n1"), pod("c", "n2")], "cap_namespace"),
    ],
)
def test_per_node_and_per_namespace_caps_block_without_reading_anything(caps, pods, blocked_by):
    cluster = FakeCluster(pods)
    ev = RecordingEvictor(cluster)
    reader = SnapshotReader(cluster.observe)
    cfg = config(caps={"perNode": None, "perNamespace": None, "total": None, **caps})
    report = cycle(cluster, ev, ScriptedPlanner(*pods, to_node="n3"), cfg, reader=reader)
    assert len(ev.calls) == 2
    assert [r.outcome for r in report.results] == ["evicted", "evicted", "blocked"]
    assert report.results[2].blocked_by == (blocked_by,)
    assert reader.reads["pod"] == 2  # the blocked move cost no read


class CountingReader(SnapshotReader):
    """Counts every read, as a fake API server would count requests."""

    def __init__(self, source):
        super().__init__(source)
        self.requests = 0

    def _count(self, what: str) -> None:
        super()._count(what)
        self.requests += 1


def test_the_total_cap_ends_the_cycle_once_with_a_typed_outcome_and_no_further_api_call():
    pods = [pod(w, n, ns=ns) for w, n, ns in (("a", "n1", "x"), ("b", "n3", "y"), ("c", "n3", "z"), ("d", "n1", "w"))]
    cluster = FakeCluster(pods)
    ev = RecordingEvictor(cluster)
    reader = CountingReader(cluster.observe)
    cfg = config(caps={"perNode": None, "perNamespace": None, "total": 2})
    report = cycle(cluster, ev, ScriptedPlanner(*pods, to_node="n2"), cfg, reader=reader)
    assert len(ev.calls) == 2 and [r.outcome for r in report.results] == ["evicted", "evicted"]
    assert report.stop is not None and report.stop.kind == "total_cap" and report.stop.not_attempted == 2
    assert "total cap reached (2/2" in report.stop.message
    assert reader.requests == 2 * 3  # pod, owner and target node for each eviction; nothing after the cap
    assert report.to_json()["stop"]["kind"] == "total_cap"


def test_with_a_gate_the_planner_stops_planning_at_the_total_cap():
    g = ServiceGraph.build((), [ServiceEdge(f"s{i}", "db", rps=10.0) for i in range(5)])
    pods = [pod(f"s{i}", "n1", ns=f"ns{i}") for i in range(5)] + [pod("db", "n2", ns="ns0")]
    g = ServiceGraph.build((), [ServiceEdge(f"s{i}", "db", rps=10.0) for i in range(5)])
    cluster = FakeCluster(pods, graph=g)
    reader = CountingReader(cluster.observe)
    cfg = config(caps={"perNode": None, "perNamespace": None, "total": 1})
    report = cycle(cluster, RecordingEvictor(cluster), RebalanceHeuristic(), cfg, reader=reader)
    assert report.counts["evicted"] == 1 and len(report.results) == 1 and report.stop.kind == "total_cap"
    assert report.stop.not_attempted == 0 and reader.requests == 3


def test_a_total_cap_of_zero_plans_no_move_and_reads_nothing():
    pods = [pod("a", "n1")]
    cluster = FakeCluster(pods)
    reader = CountingReader(cluster.observe)
    report = cycle(cluster, RecordingEvictor(cluster), ScriptedPlanner(*pods), config(caps={"total": 0}), reader=reader)
    assert report.results == () and report.stop.kind == "total_cap" and reader.requests == 0


def test_a_blocked_move_does_not_spend_its_services_slot():
    """Cooldown blocks the best move of service api; the planner then moves api's next pod (issue 13, item 1)."""
    g = ServiceGraph.build((), [ServiceEdge("api", "db", rps=40.0)])
    first, second = pod("api", "n1", "aaaaa"), pod("api", "n3", "bbbbb")
    cluster = FakeCluster([first, second, pod("db", "n2")], graph=g)
    history = EvictionHistory()
    history.record(first, "n1", NOW_S - 60)
    report = cycle(cluster, RecordingEvictor(cluster), RebalanceHeuristic(), config(cooldownSeconds=600), history)
    assert [(r.move.pod, r.outcome) for r in report.results] == [(second.key, "evicted")]
    assert report.skipped_by_guard.get("cooldown") == 1


def test_a_pdb_allowing_no_disruption_blocks_and_the_evictor_is_never_called():
    p = pod("api", "n1")
    pdb = PodDisruptionBudgetInfo("api", "shop", LabelSelector(frozen_map({"app": "api"})), disruptions_allowed=0)
    cluster = FakeCluster([p], pdbs=[pdb])
    ev = RecordingEvictor(cluster)
    report = cycle(cluster, ev, ScriptedPlanner(p))
    assert ev.calls == [] and report.results[0].blocked_by == ("pdb",)


def test_a_pdb_allowing_one_disruption_lets_only_one_of_its_pods_go_per_cycle():
    a, b = pod("api", "n1", "aaaaa"), pod("api", "n2", "bbbbb")
    pdb = PodDisruptionBudgetInfo(
        "api", "shop", LabelSelector(frozen_map({"app": "api"})), min_available=1, disruptions_allowed=1
    )
    cluster = FakeCluster([a, b], pdbs=[pdb])
    ev = RecordingEvictor(cluster)
    report = cycle(cluster, ev, ScriptedPlanner(a, b))
    assert ev.calls == [a.key]
    assert outcomes(report) == [(a.key, "evicted"), (b.key, "blocked")]
    assert report.results[1].blocked_by == ("pdb",)


def test_a_pdb_refusal_skips_the_rest_of_that_workload_without_retrying():
    a, b, c = pod("api", "n1", "aaaaa"), pod("api", "n2", "bbbbb"), pod("api", "n3", "ccccc")
    other = pod("web", "n1")
    cluster = FakeCluster([a, b, c, other])
    ev = RecordingEvictor(cluster, outcomes={a.key: "refused"})
    report = cycle(cluster, ev, ScriptedPlanner(a, b, other, c, to_node="n2"))
    assert ev.calls == [a.key, other.key]  # one attempt for api; web still goes
    assert outcomes(report) == [(a.key, "refused"), (b.key, "blocked"), (other.key, "evicted"), (c.key, "blocked")]
    assert report.results[1].blocked_by == ("pdb_refused",) == report.results[3].blocked_by
    assert report.counts["refused"] == 1 and report.counts["blocked"] == 2


def test_a_pod_gone_between_plan_and_eviction_is_not_found_and_nothing_is_evicted():
    p = pod("api", "n1")
    cluster = FakeCluster([p])

    def vanish(c):
        if c.reads == 2:
            c.remove(p.key)

    cluster.on_read = vanish
    ev = RecordingEvictor(cluster)
    report = cycle(cluster, ev, ScriptedPlanner(p), reader=SnapshotReader(cluster.observe))
    assert ev.calls == [] and outcomes(report) == [(p.key, "not_found")]


@pytest.mark.parametrize(
    "change, why",
    [
        (lambda p: replace(p, node_name="n2"), "moved"),
        (lambda p: replace(p, uid="uid-new"), "re-created"),
    ],
)
def test_a_pod_moved_or_recreated_since_planning_is_skipped(change, why):
    p = pod("api", "n1")
    cluster = FakeCluster([p])

    def mutate(c):
        if c.reads == 2:
            c.remove(p.key)
            c.add(change(p))

    cluster.on_read = mutate
    ev = RecordingEvictor(cluster)
    report = cycle(cluster, ev, ScriptedPlanner(p), reader=SnapshotReader(cluster.observe))
    assert ev.calls == [] and report.results[0].outcome == "skipped" and why in report.results[0].message


def test_guards_read_the_fresh_state_not_the_planning_snapshot():
    p = pod("api", "n1")
    cluster = FakeCluster([p])

    def terminate(c):
        if c.reads == 2:
            c.remove(p.key)
            c.add(replace(p, terminating=True))

    cluster.on_read = terminate
    ev = RecordingEvictor(cluster)
    report = cycle(cluster, ev, ScriptedPlanner(p), reader=SnapshotReader(cluster.observe))
    assert ev.calls == [] and report.results[0].blocked_by == ("terminating",)


def test_cooldown_stops_the_same_workload_leaving_the_same_node_again_in_the_next_cycle():
    first = pod("api", "n1", "aaaaa")
    cluster = FakeCluster([first])
    history = EvictionHistory()
    cfg = config(cooldownSeconds=600)
    r1 = cycle(cluster, RecordingEvictor(cluster), ScriptedPlanner(first), cfg, history, NOW_S)
    assert r1.counts["evicted"] == 1
    again = pod("api", "n1", "bbbbb")  # the ReplicaSet re-created it, and it landed on n1 again
    cluster.add(again)
    ev = RecordingEvictor(cluster)
    r2 = cycle(cluster, ev, ScriptedPlanner(again), cfg, history, NOW_S + 60)
    assert ev.calls == [] and r2.results[0].blocked_by == ("cooldown",)
    r3 = cycle(cluster, ev, ScriptedPlanner(again), cfg, history, NOW_S + 601)
    assert ev.calls == [again.key] and r3.counts["evicted"] == 1


def test_cooldown_survives_a_restart_through_the_state_file(tmp_path):
    state = tmp_path / "history.json"
    first = pod("api", "n1", "aaaaa")
    cluster = FakeCluster([first])
    cfg = config(cooldownSeconds=600, stateFile=str(state))
    cycle(cluster, RecordingEvictor(cluster), ScriptedPlanner(first), cfg, EvictionHistory.load(state), NOW_S)
    assert state.exists()
    again = pod("api", "n1", "bbbbb")
    cluster.add(again)
    ev = RecordingEvictor(cluster)
    report = cycle(cluster, ev, ScriptedPlanner(again), cfg, EvictionHistory.load(state), NOW_S + 60)
    assert ev.calls == [] and report.results[0].blocked_by == ("cooldown",)


def _mixed_cluster() -> tuple[FakeCluster, list[PodInfo]]:
    pods = [pod("a", "n1"), pod("b", "n1"), pod("c", "n1"), pod("guarded", "n2"), pod("d", "n2")]
    pdb = PodDisruptionBudgetInfo(
        "guarded", "shop", LabelSelector(frozen_map({"app": "guarded"})), disruptions_allowed=0
    )
    return FakeCluster(pods, pdbs=[pdb]), pods


def test_a_dry_run_goes_through_the_same_path_and_changes_nothing(tmp_path):
    state = tmp_path / "history.json"
    caps = {"perNode": 2, "perNamespace": None, "total": None}

    live_cluster, pods = _mixed_cluster()
    live_ev = RecordingEvictor()  # records, changes nothing: the same world as the dry run sees
    live = cycle(live_cluster, live_ev, ScriptedPlanner(*pods), config(caps=caps))

    dry_cluster, pods = _mixed_cluster()
    before = dry_cluster.snapshot
    dry_ev = RecordingEvictor(dry_cluster)  # would remove pods if it were ever called
    history = EvictionHistory.load(state)
    dry = cycle(dry_cluster, dry_ev, ScriptedPlanner(*pods), config(caps=caps, dryRun=True), history)

    assert dry.dry_run and not live.dry_run
    assert dry.planned_moves == live.planned_moves
    assert [r.blockers for r in dry.results] == [r.blockers for r in live.results]
    swap = {"evicted": "dry_run"}
    assert [r.outcome for r in dry.results] == [swap.get(r.outcome, r.outcome) for r in live.results]
    assert [r.outcome for r in dry.results] == ["dry_run", "dry_run", "blocked", "blocked", "dry_run"]
    assert dry_ev.calls == [] and dry_cluster.snapshot == before
    assert history.records == () and not state.exists()
    assert dry.evictions == 0 and dry.counts["dry_run"] == 3


def test_the_dry_run_evictor_records_what_it_would_do():
    ev = DryRunEvictor()
    res = ev.evict(pod("api", "n1"), "because")
    assert res.outcome == "dry_run" and ev.calls == [("shop/api-aaaaa", "because")]
    assert isinstance(ev, Evictor)


def test_an_evictor_that_raises_is_an_error_and_the_cycle_goes_on():
    a, b = pod("a", "n1"), pod("b", "n2")
    cluster = FakeCluster([a, b])
    ev = RecordingEvictor(cluster, raises={a.key})
    report = cycle(cluster, ev, ScriptedPlanner(a, b))
    assert outcomes(report) == [(a.key, "error"), (b.key, "evicted")]
    assert "apiserver unreachable" in report.results[0].message


@pytest.mark.parametrize(
    "answer, why",
    [
        ("not a result", "not an EvictionResult"),
        (EvictionResult("shop/other", "evicted"), "not 'shop/a-aaaaa'"),
        (EvictionResult("shop/a-aaaaa", "maybe"), "unknown outcome"),
    ],
)
def test_a_malformed_evictor_answer_counts_as_an_error_never_a_success(answer, why):
    class Odd:
        def evict(self, p, reason):
            return answer

    res = safe_evict(Odd(), pod("a", "n1"), "r")
    assert res.outcome == "error" and why in res.message


def test_a_failed_re_read_stops_the_cycle_before_any_further_eviction():
    a, b = pod("a", "n1"), pod("b", "n2")
    cluster = FakeCluster([a, b])

    def fail(c):
        if c.reads >= 2:
            raise TimeoutError("get pod timed out")

    cluster.on_read = fail
    ev = RecordingEvictor(cluster)
    report = cycle(cluster, ev, ScriptedPlanner(a, b), reader=SnapshotReader(cluster.observe))
    assert ev.calls == [] and [r.outcome for r in report.results] == ["skipped"]
    assert "could not re-read" in report.results[0].message
    assert report.stop.kind == "reread_failed" and report.stop.not_attempted == 1


def test_a_history_that_cannot_be_saved_stops_the_cycle(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    a, b = pod("a", "n1"), pod("b", "n2")
    cluster = FakeCluster([a, b])
    ev = RecordingEvictor(cluster)
    report = cycle(cluster, ev, ScriptedPlanner(a, b), history=EvictionHistory(path=blocker / "h.json"))
    assert ev.calls == [a.key] and [r.outcome for r in report.results] == ["evicted"]
    assert report.stop.kind == "history_unwritable" and report.stop.not_attempted == 1


def test_the_report_json_has_stable_keys_every_outcome_and_the_plan_intent():
    a = pod("a", "n1")
    cluster = FakeCluster([a])
    report = cycle(cluster, RecordingEvictor(cluster), ScriptedPlanner(a))
    doc = json.loads(json.dumps(report.to_json()))
    assert set(doc["counts"]) == set(REPORT_OUTCOMES)
    assert doc["replica_targets"] == {"shop/api": 3} and doc["intent"] == [1.0, 1.0]
    assert doc["intent_names"] == ["locality_weight", "balance_weight"]
    assert doc["results"][0]["outcome"] == "evicted" and doc["evictions"] == 1
    assert doc["planned_moves"][0] == {
        "pod": a.key,
        "from_node": "n1",
        "to_node": "n3",
        "reason": "locality",
        "gain": 1.0,
    }


def test_metrics_count_outcomes_guards_and_planned_moves_without_pod_or_node_labels():
    registry = CollectorRegistry()
    metrics = DeschedulerMetrics(registry)
    p = pod("api", "n1")
    pdb = PodDisruptionBudgetInfo("api", "shop", LabelSelector(frozen_map({"app": "api"})), disruptions_allowed=0)
    q = pod("web", "n2")
    cluster = FakeCluster([p, q], pdbs=[pdb])
    cycle(cluster, RecordingEvictor(cluster), ScriptedPlanner(p, q), metrics=metrics)
    v = registry.get_sample_value
    assert v("hrl_descheduler_evictions_total", {"outcome": "evicted", "dry_run": "false"}) == 1
    assert v("hrl_descheduler_evictions_total", {"outcome": "refused", "dry_run": "false"}) == 0
    assert v("hrl_descheduler_blocked_total", {"guard": "pdb", "dry_run": "false"}) == 1
    assert v("hrl_descheduler_planned_moves_total", {"reason": "locality", "dry_run": "false"}) == 2
    assert v("hrl_descheduler_cycle_duration_seconds_count") == 1
    labels = {k for m in registry.collect() for s in m.samples for k in s.labels}
    assert labels <= {"outcome", "guard", "reason", "result", "le", "kind", "path", "dry_run"}


def test_run_forever_runs_the_requested_cycles_and_survives_a_failing_one():
    a = pod("a", "n1")
    cluster = FakeCluster([a])
    calls = {"n": 0}
    real = cluster.observe

    def flaky():
        calls["n"] += 1
        if calls["n"] == 1:
            raise ConnectionError("apiserver restarting")
        return real()

    reports, errors = [], []
    metrics = DeschedulerMetrics()
    n = run_forever(
        0.001,
        CycleDeps(
            flaky, RecordingEvictor(cluster), ScriptedPlanner(a), PLACEMENT, config(), history=None, metrics=metrics
        ),
        max_cycles=3,
        on_report=reports.append,
        on_error=errors.append,
        now=lambda: NOW_S,
    )
    assert n == 3 and len(errors) == 1 and len(reports) == 2
    assert (
        metrics.registry.get_sample_value("hrl_descheduler_cycles_total", {"result": "error", "dry_run": "false"}) == 1
    )


def test_run_forever_stops_when_asked():
    stop = threading.Event()
    stop.set()
    assert (
        run_forever(
            60,
            CycleDeps(FakeCluster([]).observe, DryRunEvictor(), ScriptedPlanner(), PLACEMENT, config(), history=None),
            stop=stop,
        )
        == 0
    )
    with pytest.raises(ValueError, match="interval_s"):
        run_forever(
            0, CycleDeps(FakeCluster([]).observe, DryRunEvictor(), ScriptedPlanner(), PLACEMENT, config(), history=None)
        )


def test_sigterm_during_an_interval_cycle_stops_at_the_next_eviction_boundary():
    # issue 26 item 8: SIGTERM let the running cycle make all its evictions; now the one in progress completes and
    # no other is made, nor the plan's scaling; the loop then ends (hrl-descheduler exits 0)
    pods = [pod(w, "n1", ns=w) for w in ("a", "b", "c", "d")]
    cluster = FakeCluster(pods)
    stop = threading.Event()

    class TermOnSecond(RecordingEvictor):
        def evict(self, p, reason):
            out = super().evict(p, reason)
            if len(self.calls) == 2:
                os.kill(os.getpid(), signal.SIGTERM)  # the handler hrl-descheduler installs sets `stop`
            return out

    previous = signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    reports: list[CycleReport] = []
    try:
        ev = TermOnSecond(cluster)
        deps = CycleDeps(
            cluster.observe, ev, ScriptedPlanner(*pods, to_node="n2"), PLACEMENT, config(), scaler=DryRunScaler()
        )
        n = run_forever(60, deps, stop=stop, on_report=reports.append, now=lambda: NOW_S)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert n == 1 and ev.calls == [pods[0].key, pods[1].key]
    (report,) = reports
    assert report.stop is not None and report.stop.kind == "interrupted" and report.stop.not_attempted == 2
    assert [r.outcome for r in report.results] == ["evicted", "evicted"] and report.scaling == ()
    # without the signal the same cycle evicts all four and acts on the replica target
    full = cycle(FakeCluster(pods), RecordingEvictor(), ScriptedPlanner(*pods, to_node="n2"), scaler=DryRunScaler())
    assert full.counts["evicted"] == 4 and len(full.scaling) == 1 and full.stop is None
