"""Moves in the simulator, with Kubernetes' rules: the ReplicaSet controller's scale-down order
(policy.sim.cluster.scale_down_order, ActivePodsWithRanks), readiness after the start-up delay, the live mover over
the simulation (policy.sim.subresources.SimMover), and a single-replica service moved make-before-break without one
failed request where the eviction of the same pod fails some."""

from __future__ import annotations

import numpy as np
import pytest

from descheduler.config import load_descheduler_config
from descheduler.guards import EvictionHistory
from descheduler.loop import CycleDeps, run_once
from descheduler.surge import ANNOTATION_DELETION_COST
from policy.baselines.kube_default import default_score_plugins
from policy.cache import InMemoryEmbeddingCache
from policy.index import ClusterIndex
from policy.intent import Intent
from policy.lowlevel import TopologyHeuristic
from policy.sim.cluster import SimPod, scale_down_order
from policy.sim.engine import PeriodicHook, Simulation
from policy.sim.kube_scheduler import InProcessExtender, KubeSchedulerModel
from policy.sim.scenario import build
from policy.sim.stackbase import terms_lookup
from policy.sim.subresources import SimMoveApi, SimMover, SimScaler
from policy.state import Move, OwnerRef, Plan, PodInfo, Resources

# ---- the ReplicaSet controller's scale-down order ----------------------------------------------------------------


def simpod(name: str, node: int, *, ready_at: float = 0.0, created: float = 0.0, cost=None, restarts=0) -> SimPod:
    meta = {"name": name, "namespace": "shop", "uid": f"uid-{name}"}
    if cost is not None:
        meta["annotations"] = {ANNOTATION_DELETION_COST: str(cost)}
    info = PodInfo(name, "shop", "api", Resources(100, 0), uid=f"uid-{name}", owner=OwnerRef("ReplicaSet", "api-x"))
    return SimPod(
        {"metadata": meta}, info, "shop/api", node=node, created_s=created, ready_at_s=ready_at, restarts=restarts
    )


NOW = 10_000.0


@pytest.mark.parametrize(
    "first,second,rule",
    [
        (simpod("unbound", -1), simpod("bound", 0), "unassigned before assigned"),
        (simpod("starting", 0, ready_at=NOW + 5), simpod("ready", 1), "not Ready before Ready"),
        (simpod("marked", 0, cost=-2147483648), simpod("plain", 1, ready_at=NOW - 1), "lower deletion cost first"),
        (simpod("plain", 1), simpod("valued", 2, cost=100), "no annotation counts 0"),
        (simpod("fresh", 0, ready_at=NOW - 10), simpod("old", 1, ready_at=NOW - 5000), "Ready for less time first"),
        (simpod("crashy", 0, restarts=3), simpod("calm", 1), "more restarts first"),
        (simpod("newer", 0, created=NOW - 10), simpod("older", 1, created=NOW - 5000), "created more recently first"),
    ],
)
def test_a_scale_down_removes_pods_in_the_replicasets_order(first, second, rule):
    for pods in ([first, second], [second, first]):
        assert scale_down_order(pods, pods, NOW)[0] is first, rule


def test_a_pod_doubled_up_on_a_node_goes_before_one_alone_and_a_bad_cost_counts_zero():
    a, b, c = simpod("a", 0), simpod("b", 0), simpod("c", 1)
    assert scale_down_order([c, a], [a, b, c], NOW)[0] is a
    bad = simpod("bad", 1, cost="cheap")
    assert scale_down_order([bad, simpod("marked", 0, cost=-1)], [bad], NOW)[0].info.name == "marked"


def test_ready_times_in_the_same_power_of_two_are_ordered_by_uid():
    # 3 s and 3.5 s ago: floor(log2(ns)) is the same, so the UID decides, not which became Ready last
    x, y = simpod("x", 0, ready_at=NOW - 3.0), simpod("y", 1, ready_at=NOW - 3.5)
    assert scale_down_order([y, x], [x, y], NOW)[0] is x  # "uid-x" < "uid-y"


# ---- readiness, annotations ----------------------------------------------------------------------------------------


def started(minutes: int = 3) -> Simulation:
    """A simulation two minutes in (its clock at minute 1: the pods bound at 0 are Ready)."""
    run = build("baseline-2026-11", app="dsb-hotel-reservation", minutes=minutes, seed=0, offset_min=0, n_samples=100)
    sim = Simulation(run.app, run.rps, run.cluster, KubeSchedulerModel(), run.config)
    sim.advance()
    sim.advance()
    return sim


def test_pods_report_ready_from_their_start_up_delay_on():
    sim = started()
    p = next(p for p in sim.cluster.pods if p.alive and p.workload.endswith("/frontend"))
    assert sim.observe().pods[[q.key for q in sim.observe().pods].index(p.info.key)].ready is True
    sim.scale(p.workload, 2)
    sim.schedule_pending()
    new = next(q for q in sim.cluster.pods if q.alive and q.workload == p.workload and q is not p)
    by_key = {q.key: q for q in sim.observe().pods}
    assert by_key[new.info.key].ready is False  # bound now, Ready after the start-up delay
    sim.now_s += sim.config.startup_delay_s
    assert {q.key: q for q in sim.observe().pods}[new.info.key].ready is True


def test_the_sim_mover_api_annotates_a_pod_and_answers_404_for_one_that_is_gone():
    sim = started()
    api = SimMoveApi(sim)
    p = next(p for p in sim.cluster.pods if p.alive and p.workload.endswith("/frontend"))
    ns, name = p.info.namespace, p.info.name
    api.patch_pod_annotations(ns, name, {ANNOTATION_DELETION_COST: "-5"})
    assert p.obj["metadata"]["annotations"][ANNOTATION_DELETION_COST] == "-5"
    assert {q.key: q for q in sim.observe().pods}[p.info.key].annotations[ANNOTATION_DELETION_COST] == "-5"
    api.patch_pod_annotations(ns, name, {ANNOTATION_DELETION_COST: None})
    assert ANNOTATION_DELETION_COST not in (p.obj["metadata"].get("annotations") or {})
    with pytest.raises(Exception, match="404"):
        api.patch_pod_annotations(ns, "gone", {ANNOTATION_DELETION_COST: "1"})
    assert api.list_resource_quotas(ns) == []


# ---- a single-replica service moved: make-before-break vs an eviction ---------------------------------------------


class MoveOnce:
    """Plans one move of ``service``'s only pod to ``target`` at minute ``at``, nothing else."""

    name = "move-once"

    def __init__(self, service: str, at: int, target: dict):
        self.service, self.at, self.target = service, at, target

    def plan(self, snapshot, index, placement):
        moves = ()
        if snapshot.taken_at_s == self.at * 60.0:
            p = next(p for p in snapshot.pods if p.service == self.service and p.node_name is not None)
            to = next(n.name for n in snapshot.nodes if n.name != p.node_name)
            self.target["node"] = to
            moves = (Move(p.key, p.node_name, to, "policy", 5.0),)
        return Plan(moves=moves, replica_targets={}, intent=Intent(()))


def moved_run(strategy: str, minutes: int = 7, at: int = 2):
    """hotel at a third of its trace (nothing fails by load), the descheduler's cycle every minute with the live
    mover and the simulator's Eviction API, the extender steering a pending move's new pod (as hrl_stacks wires it)."""
    run = build("baseline-2026-11", app="dsb-hotel-reservation", minutes=minutes, seed=0, offset_min=0, n_samples=300)
    cfg = load_descheduler_config(
        {
            "apiVersion": "hrl-scheduler.io/v1alpha1",
            "kind": "DeschedulerConfiguration",
            "intervalSeconds": 60,
            "schedulerPrediction": {"enabled": False},
            "moves": {"strategy": strategy, "steerDelaySeconds": 0, "costModel": {"enabled": False}},
        }
    )
    cache, shared, target = InMemoryEmbeddingCache(), {"index": None, "now": 0.0}, {}

    def pending():
        e = cache.get_intent().entry
        return (e.pending_moves if e is not None else ()), shared["now"]

    def on_change(snap):
        shared["index"], shared["now"] = ClusterIndex.build(snap), snap.taken_at_s

    extender = InProcessExtender(TopologyHeuristic(), lambda: (shared["index"], None), weight=2, pending=pending)
    scheduler = KubeSchedulerModel(plugins=default_score_plugins(terms_lookup(run.app)), extenders=[extender])
    planner, history = MoveOnce("frontend", at, target), EvictionHistory()
    reports = []

    def cycle(sim):
        deps = CycleDeps(
            sim.observe,
            sim.evictor,
            planner,
            TopologyHeuristic(),
            cfg,
            history,
            scaler=SimScaler(sim),
            mover=SimMover(sim),
        )
        report = run_once(deps, sim.now_s)
        cache.put_intent([], [], source="test", pending_moves=report.pending_moves)
        reports.append(report)

    sim = Simulation(
        run.app, np.asarray(run.rps) / 3, run.cluster, scheduler, run.config,
        hooks=(PeriodicHook("descheduler", 1, cycle),), on_change=on_change,
    )  # fmt: skip
    ready, failed = [], []
    for _ in range(minutes):
        st = sim.advance()
        failed.append(st.failed)
        ready.append([p for p in st.ready if p.info.service == "frontend"])
    return sim, reports, failed, ready, target


def test_a_single_replica_service_moved_make_before_break_loses_no_request_and_no_capacity():
    sim, reports, failed, ready, target = moved_run("surge")
    outcomes = [(e.outcome, e.reason) for r in reports for e in r.surges]
    assert outcomes == [("started", ""), ("draining", ""), ("completed", "")]
    assert [r.outcome for rep in reports for r in rep.results] == ["surged"]
    assert sum(failed) == 0  # not one failed request in the minutes around the move
    assert all(len(pods) >= 1 for pods in ready)  # the service always had a pod serving
    assert max(len(pods) for pods in ready) == 2  # the two overlapped for the surge
    (front,) = [p for p in sim.cluster.pods if p.alive and p.info.service == "frontend"]
    assert sim.cluster.nodes[front.node].name == target["node"] and sim.cluster.replicas[front.workload] == 1
    assert extender_steered(sim) and sim.result().extra["evictions"] == 0


def extender_steered(sim) -> bool:
    return any(getattr(e, "calls", {}).get("pending_move", 0) > 0 for e in sim.scheduler.extenders)


def test_the_same_move_by_eviction_fails_requests_while_the_replacement_starts():
    sim, reports, failed, ready, _target = moved_run("evict")
    assert [r.outcome for rep in reports for r in rep.results] == ["evicted"]
    assert failed[2] > 0 and sum(failed[:2]) == 0 and sum(failed[3:]) == 0
    # every request needs the frontend, whose only pod was gone for the 20 s start-up delay: a third of the minute's
    # requests (plus the few in flight)
    offered = sim.result().series["offered"][2]
    assert 0.3 * offered < failed[2] < 0.4 * offered
