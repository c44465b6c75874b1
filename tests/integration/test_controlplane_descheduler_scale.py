"""The descheduler's cycle against the real API server, for issue 15 (one observation, targeted re-reads, a watch
cache in interval mode), issue 13 (a move kube-scheduler would undo is never made; a PodDisruptionBudget whose
controller lags is not over-spent) and issue 14 (an Event per eviction).

The descheduler runs as the ``hrl-descheduler`` identity; the API server's audit log is the witness of what it
asked."""

from __future__ import annotations

import os
import signal
import time

import pytest
from cp_helpers import DEFAULT, HRL, apply, deployment, get_json, node_of, pdb, pods, running, wait_for, wait_running
from waiting import wait_until

from descheduler.config import load_descheduler_config, planner_from_config
from descheduler.evict import DryRunEvictor
from descheduler.guards import EvictionHistory
from descheduler.kube import KubeEventRecorder, KubeEvictor, KubeObserver, KubeReader, KubeWatchCache
from descheduler.loop import CycleDeps, run_once
from policy.intent import Intent
from policy.lowlevel import TopologyHeuristic

pytestmark = pytest.mark.controlplane

USER = "hrl-descheduler"
HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
HEADER = {"apiVersion": "hrl-scheduler.io/v1alpha1", "kind": "DeschedulerConfiguration"}


def config(**kw):
    """No caps; moves are evictions on the planner's scores alone (make-before-break moves and the move cost model have
    tests of their own)."""
    base = {**HEADER, "caps": {"perNode": None, "perNamespace": None, "total": None}}
    base["moves"] = {"strategy": "evict", "costModel": {"enabled": False}}
    return load_descheduler_config({**base, **kw})


def requests_of(cp, ns: str | None = None) -> list[tuple[str, str]]:
    """``(verb, resource)`` of every request the descheduler identity made (in ``ns`` when given)."""
    out = []
    for e in cp.audit_events(USER):
        ref = e.get("objectRef") or {}
        if ns is not None and ref.get("namespace") not in (ns, None):
            continue
        res = ref.get("resource", "")
        if ref.get("subresource"):
            res += "/" + ref["subresource"]
        out.append((e.get("verb"), res))
    return out


def test_a_move_the_topology_spread_rule_would_undo_is_never_made(control_plane, namespace, kwok_nodes):
    """Issue 13, item 1: a service spread across zones of unequal size (maxSkew 1, DoNotSchedule) depends on a
    service pinned in the small zone. Moving one of its pods next to the callee would break the spread, so
    kube-scheduler would put the replacement back in the big zone: the move is blocked before any API call,
    cycle after cycle (cooldownSeconds 0), and nothing is evicted."""
    cp, ns = control_plane, namespace
    (small,) = kwok_nodes(1, labels={ZONE: f"{ns}-small"})
    big = kwok_nodes(2, labels={ZONE: f"{ns}-big"})
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": ZONE,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "spread-api"}},
        }
    ]
    nodes_of_test = {"nodeAffinity": _only([small, *big])}
    apply(cp, ns, [deployment("callee", app="spread-db", scheduler=DEFAULT, node_selector={HOSTNAME: small})])
    wait_running(cp, ns, 1, "app=spread-db")
    apply(
        cp,
        ns,
        [
            deployment(
                "api",
                app="spread-api",
                replicas=2,
                scheduler=HRL,
                depends_on=["spread-db"],
                topologySpreadConstraints=spread,
                affinity=nodes_of_test,
            )
        ],
    )
    placed = wait_running(cp, ns, 2, "app=spread-api")
    far = [p for p in placed if node_of(p) in big]
    assert len(far) == 1 and {node_of(p) for p in placed} & {small}  # one per zone
    api = cp.api(USER)
    observe, evictor = KubeObserver(api), KubeEvictor(api)
    cfg = config(cooldownSeconds=0)
    planner = planner_from_config(cfg)
    before = len(requests_of(cp, ns))
    for _ in range(2):
        report = run_once(
            CycleDeps(
                observe, evictor, planner, TopologyHeuristic(), cfg, history=EvictionHistory(), reader=KubeReader(api)
            ),
            time.time(),
        )
        moved = [r for r in report.results if r.move.pod == f"{ns}/{far[0]['metadata']['name']}"]
        assert [(r.move.to_node, r.outcome, r.blocked_by) for r in moved] == [(small, "blocked", ("infeasible",))]
        assert "topology spread" in moved[0].blockers[0].reason and "skew 2 > maxSkew 1" in moved[0].blockers[0].reason
        assert report.evictions == 0 and evictor.calls == []
    after = requests_of(cp, ns)[before:]
    assert [v for v, _r in after if v not in ("list",)] == []  # blocked before any GET: no re-read, no eviction
    assert {p["metadata"]["name"] for p in running(pods(cp, ns, "app=spread-api"))} == {
        p["metadata"]["name"] for p in placed
    }

    # Without the prediction the same cycle evicts, and kube-scheduler puts the replacement back in the big zone:
    # the loop the prediction prevents.
    loose = config(cooldownSeconds=0, schedulerPrediction={"enabled": False})
    report = run_once(
        CycleDeps(
            observe, evictor, planner, TopologyHeuristic(), loose, history=EvictionHistory(), reader=KubeReader(api)
        ),
        time.time(),
    )
    assert [(r.move.to_node, r.outcome) for r in report.results if r.outcome == "evicted"] == [(small, "evicted")]

    def replaced():
        ps = running(pods(cp, ns, "app=spread-api"))
        names = {p["metadata"]["name"] for p in ps}
        return ps if len(ps) == 2 and far[0]["metadata"]["name"] not in names else None

    now = wait_for(replaced, 60, "the replacement")
    assert sorted(node_of(p) in big for p in now) == [False, True]  # back in the big zone, not next to the callee


def _only(nodes: list[str]) -> dict:
    return {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": nodes}]}]
        }
    }


def test_a_pdb_whose_controller_lags_is_not_over_spent(control_plane, namespace, kwok_nodes):
    """Issue 13, item 2: kube-controller-manager paused (SIGSTOP); a pod of a budget with minAvailable 3 goes
    away, the stale status still says disruptionsAllowed 1. The guard counts the ready pods from a fresh read
    (3 = minAvailable: none may go) and evicts nothing; resumed, the controller agrees (disruptionsAllowed 0)."""
    cp, ns = control_plane, namespace
    kwok_nodes(3)
    apply(
        cp,
        ns,
        [
            deployment("guarded", app="lag-api", replicas=4, scheduler=DEFAULT),
            pdb("guarded", {"app": "lag-api"}, min_available=3),
        ],
    )
    ready = wait_running(cp, ns, 4, "app=lag-api")

    def allowed():
        st = get_json(cp, "pdb", "guarded", "-n", ns).get("status") or {}
        return st.get("disruptionsAllowed") if st.get("observedGeneration") else None

    assert wait_for(lambda: allowed() == 1, 60, "disruptionsAllowed 1")
    kcm = cp.component("kube-controller-manager")
    os.kill(kcm.pid, signal.SIGSTOP)
    try:
        cp.kubectl("delete", "pod", ready[0]["metadata"]["name"], "-n", ns, "--grace-period=0", "--force")
        wait_for(lambda: len(pods(cp, ns, "app=lag-api")) == 3, 30, "3 pods left")
        assert allowed() == 1  # the stale status
        api = cp.api(USER)
        evictor = KubeEvictor(api)
        victim = ready[1]
        from policy.highlevel import default_intent
        from policy.state import Move, Plan

        class One:
            name = "one"

            def plan(self, snapshot, index, placement):
                move = Move(f"{ns}/{victim['metadata']['name']}", node_of(victim), None, "locality", 5.0)
                return Plan(moves=(move,), replica_targets={}, intent=Intent(default_intent()))

        report = run_once(
            CycleDeps(
                KubeObserver(api), evictor, One(), TopologyHeuristic(), config(), history=None, reader=KubeReader(api)
            ),
            time.time(),
        )
        (r,) = report.results
        assert (r.outcome, r.blocked_by) == ("blocked", ("pdb",))
        assert "disruptionsAllowed 1" in r.blockers[0].reason and "counted 0" in r.blockers[0].reason
        assert evictor.calls == []
        assert len(running(pods(cp, ns, "app=lag-api"))) == 3
    finally:
        os.kill(kcm.pid, signal.SIGCONT)
    assert wait_for(lambda: allowed() in (0, 1) and len(pods(cp, ns, "app=lag-api")) == 4, 60, "the controller back")


def test_cronjob_mode_lists_once_and_evicts_with_targeted_gets_and_an_event(control_plane, namespace, kwok_nodes):
    """Issue 15: one LIST per kind for the cycle, then per eviction GETs of the pod, its owner and the target node
    (no LIST), the eviction, and an events.k8s.io/v1 Event on the pod (issue 14)."""
    cp, ns = control_plane, namespace
    a, b = kwok_nodes(2)
    # the callee loads b, so the default scheduler's LeastAllocated puts the caller on a
    apply(cp, ns, [deployment("callee", app="ev-db", cpu="2", scheduler=DEFAULT, node_selector={HOSTNAME: b})])
    wait_running(cp, ns, 1, "app=ev-db")
    apply(cp, ns, [deployment("caller", app="ev-api", depends_on=["ev-db"], scheduler=DEFAULT)])
    (caller,) = wait_running(cp, ns, 1, "app=ev-api")
    assert node_of(caller) == a
    api = cp.api(USER)
    cfg = config(schedulerPrediction={"extenderSchedulers": [DEFAULT]})  # as a drop-in install
    observe, evictor, rr = KubeObserver(api), KubeEvictor(api), KubeReader(api)
    mark = len(cp.audit_events(USER))
    report = run_once(
        CycleDeps(
            observe,
            evictor,
            planner_from_config(cfg),
            TopologyHeuristic(),
            cfg,
            history=EvictionHistory(),
            reader=rr,
            recorder=KubeEventRecorder(api, instance="test"),
        ),
        time.time(),
    )
    assert [(r.move.to_node, r.outcome) for r in report.results] == [(b, "evicted")]
    reqs = [
        (e.get("verb"), (e.get("objectRef") or {}).get("resource"), (e.get("objectRef") or {}).get("subresource"))
        for e in cp.audit_events(USER)[mark:]
    ]
    lists = sorted(r for v, r, _s in reqs if v == "list")
    assert lists == sorted(
        [
            "nodes",
            "persistentvolumes",
            "persistentvolumeclaims",
            "poddisruptionbudgets",
            "deployments",
            "statefulsets",
            "pods",
        ]
    )  # one per kind (the test cluster fits in one page)
    gets = sorted(r for v, r, _s in reqs if v == "get")
    assert gets == ["nodes", "pods", "replicasets"]
    assert [(v, r, s) for v, r, s in reqs if v == "create"] == [
        ("create", "pods", "eviction"),
        ("create", "events", None),
    ]

    def event():
        evs = get_json(cp, "events.events.k8s.io", "-n", ns)["items"]
        return [e for e in evs if e.get("reason") == "Descheduled"]

    (ev,) = wait_for(event, 20, "the Descheduled event")
    assert ev["regarding"]["name"] == caller["metadata"]["name"] and ev["action"] == "Evict"
    assert ev["reportingController"] == "hrl-scheduler.io/descheduler" and f"towards {b}" in ev["note"]


def test_the_interval_modes_watch_cache_sees_a_pod_deleted_by_another_actor_without_listing_again(
    control_plane, namespace, kwok_nodes
):
    """Issue 15: the watch cache lists each kind once; a pod deleted by someone else is gone from the next cycle's
    snapshot (through the watch), and the cycles ask the API server for no list at all."""
    cp, ns = control_plane, namespace
    kwok_nodes(2)
    apply(cp, ns, [deployment("web", app="wc-web", replicas=2, scheduler=DEFAULT)])
    placed = wait_running(cp, ns, 2, "app=wc-web")
    api = cp.api(USER)
    with KubeWatchCache(api) as cache:
        assert cache.wait_synced(60)
        wait_until(
            lambda: {p.name for p in cache().pods if p.namespace == ns} >= {p["metadata"]["name"] for p in placed},
            30,
            what="the cache to hold the pods",
        )
        lists_after_start = [r for v, r in requests_of(cp) if v == "list"]
        victim = placed[0]["metadata"]["name"]
        cp.kubectl("delete", "pod", victim, "-n", ns, "--grace-period=0", "--force")
        wait_until(
            lambda: victim not in {p.name for p in cache().pods if p.namespace == ns},
            30,
            what="the watch to deliver the deletion",
        )
        cfg = config(dryRun=True)
        for _ in range(2):
            report = run_once(
                CycleDeps(
                    cache,
                    DryRunEvictor(),
                    planner_from_config(cfg),
                    TopologyHeuristic(),
                    cfg,
                    history=None,
                    reader=KubeReader(api, cache=cache),
                ),
                time.time(),
            )
            assert f"{ns}/{victim}" not in {m.pod for m in report.planned_moves}
        assert [r for v, r in requests_of(cp) if v == "list"] == lists_after_start  # no list since start-up
        stats = cache.stats()
        assert stats["pod_lists"] == 1 and stats["pod_events"] >= 1
