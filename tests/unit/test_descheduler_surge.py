"""Make-before-break moves (descheduler/surge.py): the state machine, the book in the state file, the driver's API
calls on a small fake of the API slice (descheduler.surge.MoverApi), and the cycle that chooses between a surge and
the eviction fallback (descheduler.loop)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from prometheus_client import CollectorRegistry

from descheduler.config import load_descheduler_config
from descheduler.guards import CycleLedger, EvictionHistory, GuardContext, guard_infeasible
from descheduler.loop import CycleDeps, run_once
from descheduler.metrics import DeschedulerMetrics
from descheduler.scale import ScaleApiError
from descheduler.surge import (
    ANNOTATION_DELETION_COST,
    DELETION_COST_FIRST,
    ApiMover,
    SurgeBook,
    SurgeDriver,
    SurgeMove,
    decide,
    deployment_of,
    quota_blocker,
    workload_pods,
)
from policy.highlevel import FixedIntent, HierarchicalPolicy
from policy.index import ClusterIndex
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
    WorkloadInfo,
    frozen_map,
)

GI = 1024**3
NS = "shop"
HEADER = {"apiVersion": "hrl-scheduler.io/v1alpha1", "kind": "DeschedulerConfiguration"}


def node(name: str) -> NodeInfo:
    return NodeInfo(name, Resources(8000, 32 * GI))


def pod(svc: str, at: str | None, suffix: str = "aaaaa", *, ready: bool = True, created_s: float = 0.0) -> PodInfo:
    return PodInfo(
        name=f"{svc}-7d9f8c6b5-{suffix}",
        namespace=NS,
        service=svc,
        requests=Resources(100, GI),
        uid=f"uid-{svc}-{suffix}",
        node_name=at,
        phase="Running" if at else "Pending",
        owner=OwnerRef("ReplicaSet", f"{svc}-7d9f8c6b5"),
        labels=frozen_map({"app": svc}),
        ready=ready if at else False,
        created_s=created_s,
    )


def deployment(svc: str, replicas: int = 1) -> WorkloadInfo:
    return WorkloadInfo(svc, NS, svc, "Deployment", replicas, LabelSelector(frozen_map({"app": svc})))


def snapshot(pods, workloads, pdbs=(), graph=ServiceGraph(), t=0.0) -> ClusterSnapshot:
    return ClusterSnapshot(
        nodes=(node("n1"), node("n2"), node("n3")),
        pods=tuple(pods),
        pdbs=tuple(pdbs),
        workloads=tuple(workloads),
        graph=graph,
        taken_at_s=t,
    )


def config(**kw):
    base = {
        **HEADER,
        "caps": {"perNode": None, "perNamespace": None, "total": None},
        "schedulerPrediction": {"enabled": False},
        # the scale-up in the cycle that plans the move; the announcement first has a test of its own
        "moves": {"steerDelaySeconds": 0, "costModel": {"enabled": False}},
    }
    base.update(kw)
    return load_descheduler_config(base)


class FakeMoveApi:
    """The MoverApi slice over a dict of replica counts: scale reads and writes (with a resourceVersion), pod
    annotations, HPAs and ResourceQuotas per namespace; ``fail`` names the calls that answer an error."""

    def __init__(self, replicas, *, hpas=None, quotas=None, fail=()):
        self.replicas = dict(replicas)
        self.hpas = hpas or {}
        self.quotas = quotas or {}
        self.fail = set(fail)
        self.rv = 1
        self.calls: list[tuple] = []

    def list_hpas(self, namespace):
        return self.hpas.get(namespace, [])

    def read_scale(self, namespace, name):
        key = f"{namespace}/{name}"
        if key not in self.replicas:
            raise ScaleApiError(404, f'deployments.apps "{name}" not found')
        return {"metadata": {"resourceVersion": str(self.rv)}, "spec": {"replicas": self.replicas[key]}}

    def replace_scale(self, namespace, name, body):
        if "scale" in self.fail:
            raise ScaleApiError(409, "the object has been modified")
        assert body["metadata"]["resourceVersion"] == str(self.rv)
        key = f"{namespace}/{name}"
        self.replicas[key] = body["spec"]["replicas"]
        self.rv += 1
        self.calls.append(("scale", key, body["spec"]["replicas"]))
        return body

    def patch_pod_annotations(self, namespace, name, annotations):
        if "annotate" in self.fail:
            raise ScaleApiError(500, "etcdserver: request timed out")
        self.calls.append(("annotate", f"{namespace}/{name}", dict(annotations)))
        return {}

    def list_resource_quotas(self, namespace):
        return self.quotas.get(namespace, [])


def hpa(target: str) -> dict:
    return {"metadata": {"name": f"{target}-hpa"}, "spec": {"scaleTargetRef": {"kind": "Deployment", "name": target}}}


SRC = pod("api", "n1")


def move(**kw) -> SurgeMove:
    base = SurgeMove(f"{NS}/api", "api", SRC.key, SRC.uid, "n1", "n2", (SRC.key,), 0.0, 600.0)
    return replace(base, **kw)


# ---- the state machine ------------------------------------------------------------------------------------------


def test_a_new_pod_ready_on_the_target_drains_the_old_one_marked_and_scaled_away():
    new = pod("api", "n2", "bbbbb")
    step = decide(move(), snapshot([SRC, new], [deployment("api", 2)]), 60.0)
    assert (step.action, step.mark, step.keep, step.scale_down) == ("drain", SRC.key, new.key, True)


def test_a_new_pod_not_ready_yet_or_pending_is_waited_for_until_the_deadline_then_the_move_aborts():
    for new in (pod("api", "n2", "bbbbb", ready=False), pod("api", None, "bbbbb")):
        s = snapshot([SRC, new], [deployment("api", 2)])
        assert decide(move(), s, 60.0).action == "wait"
        step = decide(move(), s, 600.0)
        assert (step.action, step.reason, step.mark, step.scale_down) == ("abort", "not_ready", new.key, True)


def test_a_new_pod_bound_elsewhere_aborts_the_move_and_is_the_one_marked():
    new = pod("api", "n3", "bbbbb")
    step = decide(move(), snapshot([SRC, new], [deployment("api", 2)]), 60.0)
    assert (step.action, step.reason, step.mark, step.scale_down) == ("abort", "landed_elsewhere", new.key, True)


def test_an_old_pod_gone_by_itself_aborts_and_scales_the_extra_replica_away():
    new = pod("api", "n2", "bbbbb")
    step = decide(move(), snapshot([new], [deployment("api", 2)]), 60.0)
    assert (step.action, step.reason, step.scale_down) == ("abort", "source_gone", True)
    assert step.mark == ""  # the one new pod serves on the target: nothing else to remove first


def test_a_drained_move_completes_when_the_old_pod_is_gone_and_the_new_one_stays():
    new = pod("api", "n2", "bbbbb")
    m = move(phase="draining", keep=new.key)
    assert decide(m, snapshot([new], [deployment("api", 1)]), 120.0).action == "complete"
    terminating = replace(SRC, terminating=True)
    assert decide(m, snapshot([terminating, new], [deployment("api", 1)]), 120.0).action == "complete"
    assert decide(m, snapshot([SRC, new], [deployment("api", 1)]), 120.0).action == "wait"


def test_a_replicaset_that_deleted_the_new_pod_instead_aborts_the_move_and_unmarks_the_old_one():
    m = move(phase="draining", keep=pod("api", "n2", "bbbbb").key)
    step = decide(m, snapshot([SRC], [deployment("api", 1)]), 120.0)
    assert (step.action, step.reason, step.unmark) == ("abort", "wrong_pod_deleted", True)


def test_a_move_whose_deployment_is_gone_aborts():
    assert decide(move(), snapshot([SRC], []), 60.0).reason == "workload_gone"


# ---- the book ---------------------------------------------------------------------------------------------------


def test_the_pending_moves_survive_in_the_state_file_and_a_dry_run_writes_nothing(tmp_path):
    path = tmp_path / "state.json"
    h = EvictionHistory.load(path)
    book = SurgeBook.load(h)
    book.put(move())
    book.save()
    again = SurgeBook.load(EvictionHistory.load(path))
    assert again.moves == [move()]
    assert again.records()[0].target_node == "n2" and again.records()[0].expires_at_s == 600.0
    dry = SurgeBook.load(EvictionHistory.load(path), dry_run=True)
    dry.drop(move())
    dry.save()
    assert json.loads(path.read_text())["pendingMoves"][0]["pod"] == SRC.key


def test_a_malformed_pending_move_is_dropped_with_a_warning(tmp_path):
    h = EvictionHistory(sections={"pendingMoves": [{"workload": "shop/api"}, move().to_json()]})
    book = SurgeBook.load(h)
    assert book.moves == [move()] and len(book.warnings) == 1 and "pendingMoves[0]" in book.warnings[0]


# ---- the driver's API calls -------------------------------------------------------------------------------------


def driver(api, snap, book=None, now=0.0, **cfg):
    return SurgeDriver(book or SurgeBook(), ApiMover(api), config(**cfg), snap, now)


def test_a_surge_scales_the_deployment_up_by_one_from_the_count_observed_and_records_the_move():
    api = FakeMoveApi({f"{NS}/api": 1})
    d = driver(api, snapshot([SRC], [deployment("api", 1)]))
    assert d.unavailable(SRC) is None
    outcome, _msg = d.start(SRC, "n2", 3.0, "policy")
    assert outcome == "surged" and api.calls == [("scale", f"{NS}/api", 2)]
    (m,) = d.book.moves
    assert (m.pod, m.to_node, m.known, m.deadline_s) == (SRC.key, "n2", (SRC.key,), 600.0)
    assert [e.outcome for e in d.events] == ["started"]


def test_a_surge_refuses_a_count_that_changed_since_it_was_observed_and_an_hpa_owned_deployment():
    api = FakeMoveApi({f"{NS}/api": 3})  # the observation said 1
    assert driver(api, snapshot([SRC], [deployment("api", 1)])).start(SRC, "n2", 1.0, "policy")[0] == "error"
    api = FakeMoveApi({f"{NS}/api": 1}, hpas={NS: [hpa("api")]})
    assert driver(api, snapshot([SRC], [deployment("api", 1)])).start(SRC, "n2", 1.0, "policy")[0] == "hpa"
    assert api.calls == []


@pytest.mark.parametrize(
    "pods,workloads,cfg,why",
    [
        ([SRC], [], {}, "not_deployment"),
        ([SRC], [deployment("api", 10)], {}, "max_replicas"),
        ([SRC], [deployment("api")], {"moves": {"strategy": "evict"}}, "strategy"),
        ([SRC], [deployment("api")], {"scaling": {"enabled": False}}, "scaling_disabled"),
        ([SRC], [deployment("api")], {"planner": {"autoscaler": {"workloads": ["shop/web"]}}}, "unmanaged"),
        (
            [SRC, replace(pod("api", "n2", "bbbbb"), owner=OwnerRef("ReplicaSet", "api-5f5f5f5f5"))],
            [deployment("api", 2)],
            {},
            "rollout",
        ),
        ([SRC], [deployment("api")], {"moves": {"maxPending": 0}}, "max_pending"),
    ],
)
def test_where_a_surge_is_not_possible_the_driver_says_why_without_an_api_call(pods, workloads, cfg, why):
    api = FakeMoveApi({})
    assert driver(api, snapshot(pods, workloads), **cfg).unavailable(SRC) == why
    assert api.calls == []


def test_a_deployment_with_a_surge_pending_is_not_surged_again():
    book = SurgeBook([move()])
    assert driver(FakeMoveApi({}), snapshot([SRC], [deployment("api", 2)]), book).unavailable(SRC) == "pending"


def test_advancing_a_drain_marks_the_old_pod_with_the_lowest_deletion_cost_then_scales_down_by_one():
    api = FakeMoveApi({f"{NS}/api": 2})
    new = pod("api", "n2", "bbbbb")
    d = driver(api, snapshot([SRC, new], [deployment("api", 2)]), SurgeBook([move()]), now=60.0)
    d.advance()
    assert api.calls == [
        ("annotate", SRC.key, {ANNOTATION_DELETION_COST: str(DELETION_COST_FIRST)}),
        ("scale", f"{NS}/api", 1),
    ]
    (m,) = d.book.moves
    assert m.phase == "draining" and m.keep == new.key and m.deadline_s == 660.0
    assert [e.outcome for e in d.events] == ["draining"] and d.book.records() == ()  # no more steering


def test_a_failed_annotation_is_retried_without_scaling_until_the_deadline_then_the_move_aborts():
    new = pod("api", "n2", "bbbbb")
    s = snapshot([SRC, new], [deployment("api", 2)])
    api = FakeMoveApi({f"{NS}/api": 2}, fail={"annotate"})
    d = driver(api, s, SurgeBook([move()]), now=60.0)
    d.advance()
    assert api.calls == [] and d.book.moves[0].retries == 1 and d.events == []
    late = driver(api, s, SurgeBook([move(retries=3)]), now=601.0)
    late.advance()
    # past the deadline the decision is the abort (no pod Ready there any more counts): it marks the new pod first
    assert late.book.moves == [] and [(e.outcome, e.reason) for e in late.events] == [("aborted", "annotate_failed")]


def test_the_replica_targets_count_a_pending_surge_and_hold_the_one_begun_this_cycle():
    book = SurgeBook([move(workload=f"{NS}/web", service="web"), move()])
    d = driver(FakeMoveApi({}), snapshot([SRC], [deployment("api", 1), deployment("web", 3)]), book)
    d.started.add(f"{NS}/api")
    out = d.replica_targets({f"{NS}/api": 4, f"{NS}/web": 3, f"{NS}/db": 2})
    assert out == {f"{NS}/api": 2, f"{NS}/web": 4, f"{NS}/db": 2}


def test_a_deployment_a_drain_scaled_back_down_keeps_that_count_this_cycle():
    api = FakeMoveApi({f"{NS}/api": 3})
    new = pod("api", "n2", "bbbbb")
    s = snapshot([SRC, new, pod("api", "n3", "ccccc")], [deployment("api", 3)])
    d = driver(api, s, SurgeBook([move(known=(SRC.key, f"{NS}/api-7d9f8c6b5-ccccc"))]), now=60.0)
    d.advance()
    assert api.replicas[f"{NS}/api"] == 2  # the drain's scale-down
    # the autoscaler planned 1 on the observation of 3: that would remove the new pod too; it waits a cycle
    assert d.replica_targets({f"{NS}/api": 1}) == {f"{NS}/api": 2}


def test_a_quota_without_room_for_one_more_pod_forbids_the_surge():
    full = {"metadata": {"name": "q"}, "status": {"hard": {"pods": "3", "requests.cpu": "1"}, "used": {"pods": "3"}}}
    cpu = {"metadata": {"name": "c"}, "status": {"hard": {"requests.cpu": "1"}, "used": {"requests.cpu": "950m"}}}
    room = {
        "metadata": {"name": "r"},
        "status": {"hard": {"pods": "10", "limits.memory": "8Gi"}, "used": {"pods": "2"}},
    }
    req, lim = Resources(100, GI), Resources(0, 0)
    assert "pods has room for 0" in quota_blocker([full], req, lim)
    assert "requests.cpu" in quota_blocker([cpu], req, lim)
    assert quota_blocker([room], req, lim) is None
    assert "no status.hard" in quota_blocker([{"metadata": {"name": "new"}}], req, lim)


# ---- the cycle: surge, else the fallback ------------------------------------------------------------------------


class Cluster:
    """The observation (changed by the test between cycles) and an evictor that records."""

    def __init__(self, snap):
        self.snap = snap
        self.evicted: list[str] = []

    def observe(self):
        return self.snap

    def evict(self, p, reason):
        self.evicted.append(p.key)
        return EvictionResult(p.key, "evicted", "evicted")


class FixedPlanner:
    name = "fixed"

    def __init__(self, *moves):
        self.moves = moves

    def plan(self, snapshot, index, placement):
        return Plan(moves=self.moves, replica_targets={}, intent=Intent((1.0, 1.0)))


def cycle(cluster, planner, api, cfg=None, history=None, now=0.0, metrics=None):
    deps = CycleDeps(
        cluster.observe,
        cluster,
        planner,
        TopologyHeuristic(),
        cfg or config(),
        history if history is not None else EvictionHistory(),
        mover=None if api is None else ApiMover(api),
        metrics=metrics,
    )
    return run_once(deps, now)


def test_a_single_replica_deployment_moves_make_before_break_through_three_cycles():
    history, metrics = EvictionHistory(), DeschedulerMetrics(CollectorRegistry())
    api = FakeMoveApi({f"{NS}/api": 1})
    cluster = Cluster(snapshot([SRC], [deployment("api", 1)]))
    planner = FixedPlanner(Move(SRC.key, "n1", "n2", "policy", 4.0))
    first = cycle(cluster, planner, api, history=history, metrics=metrics)
    assert [(r.outcome, r.path) for r in first.results] == [("surged", "surge")]
    assert cluster.evicted == [] and api.replicas[f"{NS}/api"] == 2
    assert [(m.service, m.target_node) for m in first.pending_moves] == [("api", "n2")]
    assert first.move_counts["surged"] == 1 and history.records[0].node == "n1"  # the cooldown knows

    new = pod("api", "n2", "bbbbb", created_s=10.0)
    cluster.snap = snapshot([SRC, new], [deployment("api", 2)], t=60.0)
    second = cycle(cluster, FixedPlanner(), api, history=history, now=60.0, metrics=metrics)
    assert [e.outcome for e in second.surges] == ["draining"] and second.pending_moves == ()
    assert api.calls[-2:] == [
        ("annotate", SRC.key, {ANNOTATION_DELETION_COST: str(DELETION_COST_FIRST)}),
        ("scale", f"{NS}/api", 1),
    ]

    cluster.snap = snapshot([new], [deployment("api", 1)], t=120.0)  # the ReplicaSet removed the marked pod
    third = cycle(cluster, FixedPlanner(), api, history=history, now=120.0, metrics=metrics)
    assert [e.outcome for e in third.surges] == ["completed"] and third.move_counts["completed"] == 1
    assert history.sections["pendingMoves"] == [] and cluster.evicted == []
    get = metrics.registry.get_sample_value
    assert get("hrl_descheduler_moves_total", {"path": "surge", "outcome": "started"}) == 1
    assert get("hrl_descheduler_moves_total", {"path": "surge", "outcome": "completed"}) == 1
    assert get("hrl_descheduler_moves_pending") == 0


def test_with_a_steer_delay_the_move_is_announced_first_and_the_deployment_scaled_up_a_cycle_later():
    cfg = config(moves={"steerDelaySeconds": 15, "costModel": {"enabled": False}})
    history, api = EvictionHistory(), FakeMoveApi({f"{NS}/api": 1})
    cluster = Cluster(snapshot([SRC], [deployment("api", 1)]))
    first = cycle(cluster, FixedPlanner(Move(SRC.key, "n1", "n2", "policy", 4.0)), api, cfg=cfg, history=history)
    assert [r.outcome for r in first.results] == ["surged"] and api.calls == []  # nothing scaled yet
    assert [e.outcome for e in first.surges] == ["announced"] and first.move_counts["surged"] == 0
    assert [m.target_node for m in first.pending_moves] == ["n2"]  # the extender steers from now on
    early = cycle(cluster, FixedPlanner(), api, cfg=cfg, history=history, now=10.0)
    assert early.surges == () and api.calls == []  # the record may not have reached the extender yet
    later = cycle(cluster, FixedPlanner(), api, cfg=cfg, history=history, now=60.0)
    assert [e.outcome for e in later.surges] == ["started"] and api.calls == [("scale", f"{NS}/api", 2)]
    assert later.move_counts["surged"] == 1 and [m.target_node for m in later.pending_moves] == ["n2"]
    (m,) = SurgeBook.load(history).moves
    assert m.phase == "surging" and m.known == (SRC.key,) and m.deadline_s == 660.0


def test_an_announced_move_whose_deployment_an_hpa_took_meanwhile_is_dropped():
    cfg = config(moves={"steerDelaySeconds": 15, "costModel": {"enabled": False}})
    history, api = EvictionHistory(), FakeMoveApi({f"{NS}/api": 1})
    cluster = Cluster(snapshot([SRC], [deployment("api", 1)]))
    cycle(cluster, FixedPlanner(Move(SRC.key, "n1", "n2", "policy", 4.0)), api, cfg=cfg, history=history)
    api.hpas = {NS: [hpa("api")]}
    later = cycle(cluster, FixedPlanner(), api, cfg=cfg, history=history, now=60.0)
    assert [(e.outcome, e.reason) for e in later.surges] == [("aborted", "hpa")] and api.calls == []
    assert later.pending_moves == () and SurgeBook.load(history).moves == []


def test_a_surge_is_not_blocked_by_the_budget_an_eviction_needs_while_one_more_pod_would_keep_it():
    pdb = PodDisruptionBudgetInfo("api", NS, LabelSelector(frozen_map({"app": "api"})), min_available=1)
    pdb = replace(pdb, disruptions_allowed=0, generation=1, observed_generation=1)
    cluster = Cluster(snapshot([SRC], [deployment("api", 1)], pdbs=[pdb]))
    report = cycle(cluster, FixedPlanner(Move(SRC.key, "n1", "n2", "policy", 4.0)), FakeMoveApi({f"{NS}/api": 1}))
    assert [r.outcome for r in report.results] == ["surged"]
    # maxUnavailable 0 forbids any voluntary disruption: no surge, and the eviction fallback is blocked by the PDB
    strict = replace(pdb, min_available=None, max_unavailable=0)
    two = [SRC, pod("api", "n3", "ccccc")]
    cluster = Cluster(snapshot(two, [deployment("api", 2)], pdbs=[strict]))
    report = cycle(cluster, FixedPlanner(Move(SRC.key, "n1", "n2", "policy", 4.0)), FakeMoveApi({f"{NS}/api": 2}))
    (r,) = report.results
    assert (r.outcome, r.fallback, r.blocked_by) == ("blocked", "pdb", ("pdb",)) and cluster.evicted == []


def test_an_hpa_owned_deployment_falls_back_to_the_eviction_behind_the_guards_or_is_skipped():
    two = [SRC, pod("api", "n3", "ccccc")]
    mv = Move(SRC.key, "n1", "n2", "policy", 4.0)
    api = FakeMoveApi({f"{NS}/api": 2}, hpas={NS: [hpa("api")]})
    cluster = Cluster(snapshot(two, [deployment("api", 2)]))
    report = cycle(cluster, FixedPlanner(mv), api)
    assert [(r.outcome, r.path, r.fallback) for r in report.results] == [("evicted", "evict", "hpa")]
    assert cluster.evicted == [SRC.key] and report.move_counts["fallback_by_reason"] == {"hpa": 1}
    cluster = Cluster(snapshot(two, [deployment("api", 2)]))
    report = cycle(
        cluster,
        FixedPlanner(mv),
        api,
        cfg=config(moves={"fallback": "skip", "steerDelaySeconds": 0, "costModel": {"enabled": False}}),
    )
    assert [(r.outcome, r.blocked_by) for r in report.results] == [("blocked", ("surge",))] and cluster.evicted == []


def test_the_eviction_fallback_never_takes_a_services_only_serving_pod():
    api = FakeMoveApi({f"{NS}/api": 1}, hpas={NS: [hpa("api")]})
    cluster = Cluster(snapshot([SRC], [deployment("api", 1)]))
    report = cycle(cluster, FixedPlanner(Move(SRC.key, "n1", "n2", "policy", 4.0)), api)
    (r,) = report.results
    assert (r.outcome, r.blocked_by, r.fallback) == ("blocked", ("surge",), "hpa") and cluster.evicted == []
    assert "only serving pod" in r.message


def test_without_a_mover_the_moves_take_the_eviction_path_as_before():
    two = [SRC, pod("api", "n3", "ccccc")]
    cluster = Cluster(snapshot(two, [deployment("api", 2)]))
    report = cycle(cluster, FixedPlanner(Move(SRC.key, "n1", "n2", "policy", 4.0)), None)
    assert [(r.outcome, r.fallback) for r in report.results] == [("evicted", "no_mover")]


def test_a_move_the_cost_model_does_not_find_worth_it_is_blocked_before_any_api_call():
    api = FakeMoveApi({f"{NS}/api": 1})
    cluster = Cluster(snapshot([SRC], [deployment("api", 1)]))  # no call graph: nothing to gain
    report = cycle(
        cluster, FixedPlanner(Move(SRC.key, "n1", "n2", "policy", 4.0)), api, cfg=config(moves={"steerDelaySeconds": 0})
    )
    (r,) = report.results
    assert (r.outcome, r.blocked_by, r.path) == ("blocked", ("cost",), "surge") and api.calls == []
    assert r.economics is not None and not r.economics.worth
    assert report.move_counts["refused_by_reason"] == {"cost": 1}


def test_a_dry_run_reads_and_changes_nothing_and_keeps_no_pending_move(tmp_path):
    api = FakeMoveApi({f"{NS}/api": 1})
    history = EvictionHistory.load(tmp_path / "state.json")
    cluster = Cluster(snapshot([SRC], [deployment("api", 1)]))
    report = cycle(
        cluster, FixedPlanner(Move(SRC.key, "n1", "n2", "policy", 4.0)), api, cfg=config(dryRun=True), history=history
    )
    assert [(r.outcome, r.path) for r in report.results] == [("dry_run", "surge")]
    assert api.calls == [] and report.pending_moves == () and not (tmp_path / "state.json").exists()


def test_the_hierarchical_planner_proposes_a_services_only_pod_when_the_gate_moves_it_make_before_break():
    g = ServiceGraph.build((), [ServiceEdge("api", "db", rps=40.0)])
    db = pod("db", "n2")
    planner = HierarchicalPolicy(intent_policy=FixedIntent(), autoscaler=None)
    snap = snapshot([SRC, db], [deployment("api", 1), deployment("db", 1)], graph=g)

    class Gate:
        def __init__(self, mbb):
            self.mbb, self.admitted = mbb, []

        exhausted = False

        def may_move(self, p):
            return True

        def make_before_break(self, p):
            return self.mbb

        def admit(self, m):
            self.admitted.append(m.pod)
            return "accept"

    for mbb, want in ((False, []), (True, [SRC.key])):
        gate = Gate(mbb)
        planner.plan(snap, ClusterIndex.build(snap), TopologyHeuristic(), gate=gate)
        assert gate.admitted[:1] == want


def test_a_make_before_break_move_is_checked_against_kube_schedulers_filters_not_its_scores():
    class Prediction:  # kube-scheduler's scores would bring an evicted pod's replacement back; its filters pass
        def undone(self, pod, to, index):
            return "it would come back to n1"

        def rejects(self, pod, to, index):
            return None

    snap = snapshot([SRC], [deployment("api", 1)])
    base = GuardContext(snap, config(), CycleLedger(), to_node="n2", prediction=Prediction())
    assert guard_infeasible(SRC, base) is not None and "come back" in guard_infeasible(SRC, base)
    assert guard_infeasible(SRC, replace(base, steered=True)) is None


def test_a_pods_deployment_is_the_one_its_replicaset_is_named_after_by_the_pod_template_hash():
    v2 = replace(
        pod("api", "n1", "ddddd"),
        owner=OwnerRef("ReplicaSet", "api-v2-6b7c8d9f5"),
        labels=frozen_map({"app": "api", "pod-template-hash": "6b7c8d9f5"}),
    )
    snap = snapshot([v2], [deployment("api"), replace(deployment("api"), name="api-v2")])
    assert deployment_of(v2, snap).name == "api-v2"  # "api-" is a prefix of its ReplicaSet's name too
    assert workload_pods(deployment("api"), snap) == []
