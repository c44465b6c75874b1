"""The descheduler against the real API server (issue 3, item 4b): it observes the cluster, evicts through the
policy/v1 Eviction API only (the API server's audit log is the witness), honours PodDisruptionBudgets, lets
the ReplicaSet's replacement be placed again through the extender, and every guard of DESIGN.md section 5
holds on real objects.

The descheduler runs as the ``hrl-descheduler`` identity (get/list/watch on what it observes, ``create`` on
``pods/eviction``, and nothing else: it could not delete a pod even by mistake). Most tests drive
:func:`descheduler.loop.run_once` in-process with :class:`descheduler.kube.KubeObserver` and
:class:`descheduler.kube.KubeEvictor`; the cooldown test also runs the ``hrl-descheduler`` command.
Where a test needs a specific move, a fixed planner (a small fake of the high-level policy) plans it; the
guards, the re-read and the evictor are the real ones.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

import pytest
from cp_helpers import (
    DEFAULT,
    HRL,
    ROOT,
    apply,
    cpmod,
    deployment,
    extender_synced,
    get_json,
    node_of,
    pdb,
    pods,
    running,
    scheduled_by,
    wait_for,
    wait_running,
)
from prometheus_client import CollectorRegistry

from descheduler.config import load_descheduler_config, planner_from_config
from descheduler.guards import EvictionHistory
from descheduler.kube import KubeEvictor, KubeObserver, KubeReader
from descheduler.loop import CycleDeps, run_once
from descheduler.metrics import DeschedulerMetrics
from policy.highlevel import default_intent
from policy.intent import Intent
from policy.lowlevel import TopologyHeuristic
from policy.state import Move, Plan

pytestmark = pytest.mark.controlplane

HOSTNAME = "kubernetes.io/hostname"
USER = "hrl-descheduler"


HEADER = {"apiVersion": "hrl-scheduler.io/v1alpha1", "kind": "DeschedulerConfiguration"}
#: moves by the Eviction API only, on the planner's scores alone
EVICT = {"strategy": "evict", "costModel": {"enabled": False}}


def config(**overrides):
    """A DeschedulerConfiguration without caps (unless overridden). kube-scheduler's predicted placement is off:
    these tests pin pods with soft node affinity, which the prediction rightly says would bring them back; it has
    tests of its own (test_controlplane_descheduler_scale.py). Moves are evictions (these tests are the Eviction API's;
    make-before-break moves and the move cost model have tests of their own: test_controlplane_moves.py)."""
    base = {
        **HEADER,
        "caps": {"perNode": None, "perNamespace": None, "total": None},
        "cooldownSeconds": 1800,
        "schedulerPrediction": {"enabled": False},
        "moves": EVICT,
    }
    base.update(overrides)
    return load_descheduler_config(base)


def prefer(node: str, weight: int = 100) -> dict:
    """A soft node affinity: the first placement is deterministic, yet the pod may live elsewhere
    (so the feasibility guard has somewhere else to send it)."""
    return {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": weight,
                    "preference": {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": [node]}]},
                }
            ]
        }
    }


@dataclass
class FixedPlanner:
    """A high-level policy that plans the given moves: Deployment name (label ``hrl-test/deployment``) →
    target node, in that order, one move per pod found in the snapshot."""

    namespace: str
    targets: dict
    name: str = "fixed"

    def plan(self, snapshot, index, placement):
        moves = []
        for dep, to in self.targets.items():
            for p in sorted(snapshot.pods, key=lambda p: p.key):
                if p.labels.get("hrl-test/deployment") == dep and p.node_name is not None:
                    moves.append(Move(p.key, p.node_name, to, "locality", 5.0))
        return Plan(moves=tuple(moves), replica_targets={}, intent=Intent(default_intent()))


def descheduler(cp):
    api = cp.api(USER)
    return KubeObserver(api), KubeEvictor(api)


def reader(cp) -> KubeReader:
    return KubeReader(cp.api(USER))


def eviction_calls(cp, ns: str) -> list[dict]:
    """Audit events of the descheduler's requests on pods in ``ns`` (eviction creates, and anything else)."""
    return [
        e
        for e in cp.audit_events(USER)
        if (e.get("objectRef") or {}).get("resource") == "pods"
        and (e.get("objectRef") or {}).get("namespace") == ns
        and e.get("verb") not in ("list", "watch", "get")
    ]


def test_it_observes_evicts_through_the_eviction_api_and_the_extender_places_the_replacement_by_its_callee(
    control_plane, namespace, kwok_nodes
):
    cp, ns = control_plane, namespace
    kwok_nodes(3)
    # The caller first: nothing it depends on is placed yet, so the extender is neutral and it lands anywhere.
    apply(cp, ns, [deployment("caller", app="ds-caller", depends_on=["ds-callee"], scheduler=HRL)])
    (caller,) = wait_running(cp, ns, 1, "app=ds-caller")
    # Its callee goes to another node, so the caller is one node away from the service it calls.
    x = next(n for n in get_json(cp, "nodes")["items"] if n["metadata"]["name"] != node_of(caller))
    x = x["metadata"]["name"]
    apply(cp, ns, [deployment("callee", app="ds-callee", scheduler=DEFAULT, node_selector={HOSTNAME: x})])
    wait_running(cp, ns, 1, "app=ds-callee")
    extender_synced(cp)
    observe, evictor = descheduler(cp)
    cfg = config()
    planner, placement = planner_from_config(cfg), TopologyHeuristic()

    # A dry run goes through the same path and changes nothing.
    dry = run_once(
        CycleDeps(
            observe,
            evictor,
            planner,
            placement,
            cfg.model_copy(update={"dry_run": True}),
            history=None,
            reader=reader(cp),
        ),
        0.0,
    )
    assert dry.pods >= 2 and dry.nodes >= 3
    assert [(r.move.pod, r.move.to_node, r.outcome) for r in dry.results] == [
        (f"{ns}/{caller['metadata']['name']}", x, "dry_run")
    ]
    assert evictor.calls == [] and eviction_calls(cp, ns) == []

    history = EvictionHistory()
    metrics = DeschedulerMetrics(CollectorRegistry())
    calls_before = observe.calls
    rr = reader(cp)
    report = run_once(
        CycleDeps(observe, evictor, planner, placement, cfg, history=history, metrics=metrics, reader=rr), 1000.0
    )
    assert [(r.move.from_node, r.move.to_node, r.move.reason, r.outcome) for r in report.results] == [
        (node_of(caller), x, "locality", "evicted")
    ]
    assert observe.calls - calls_before == 1  # one observation; before the eviction only targeted GETs
    assert rr.calls == {("get", "pods"): 1, ("get", "replicasets"): 1, ("get", "nodes"): 1}
    assert (
        metrics.registry.get_sample_value("hrl_descheduler_evictions_total", {"outcome": "evicted", "dry_run": "false"})
        == 1
    )

    # The API server saw exactly one eviction, of that pod, and no delete from the descheduler.
    (call,) = eviction_calls(cp, ns)
    assert (call["verb"], call["objectRef"]["subresource"], call["objectRef"]["name"]) == (
        "create",
        "eviction",
        caller["metadata"]["name"],
    )
    assert call["responseStatus"]["code"] in (200, 201)
    assert not [e for e in cp.audit_events(USER) if e.get("verb") in ("delete", "deletecollection")]

    # kwok removes the evicted pod; the ReplicaSet's replacement is scheduled by hrl-scheduler next to its callee.
    def replaced():
        ps = running(pods(cp, ns, "app=ds-caller"))
        return ps if len(ps) == 1 and ps[0]["metadata"]["name"] != caller["metadata"]["name"] else None

    (new,) = wait_for(replaced, 60, "the replacement of the evicted caller")
    assert node_of(new) == x
    assert scheduled_by(cp, ns, new["metadata"]["name"]) == HRL

    extender_synced(cp)
    again = run_once(CycleDeps(observe, evictor, planner, placement, cfg, history=history, reader=reader(cp)), 1100.0)
    assert again.planned_moves == ()  # together now: nothing left to move


def test_a_pdb_refusal_is_an_outcome_counted_once_and_its_workload_is_not_retried(control_plane, namespace, kwok_nodes):
    cp, ns = control_plane, namespace
    a, b, c = kwok_nodes(3)
    apply(
        cp,
        ns,
        [
            deployment(
                "guarded", app="ds-guarded", replicas=2, scheduler=DEFAULT, depends_on=["ds-target"], affinity=prefer(a)
            ),
            deployment("target", app="ds-target", scheduler=DEFAULT, node_selector={HOSTNAME: c}),
            pdb("guarded", {"app": "ds-guarded"}, min_available=2),
        ],
    )
    before = {p["metadata"]["name"] for p in wait_running(cp, ns, 2, "app=ds-guarded")}
    wait_running(cp, ns, 1, "app=ds-target")
    wait_for(
        lambda: get_json(cp, "pdb", "guarded", "-n", ns).get("status", {}).get("observedGeneration"),
        30,
        "the disruption controller to compute the budget",
    )
    observe, evictor = descheduler(cp)
    cfg = config(planner={"maxMovesPerService": 2})
    planner = planner_from_config(cfg)

    # With the budget in view, the pdb guard stops both moves before any eviction.
    report = run_once(
        CycleDeps(observe, evictor, planner, TopologyHeuristic(), cfg, history=None, reader=reader(cp)), 0.0
    )
    assert len(report.planned_moves) == 2
    assert [r.blocked_by for r in report.results] == [("pdb",), ("pdb",)]
    assert evictor.calls == []

    # A descheduler whose view of the budget is missing (e.g. a stale cache) is still refused by the API
    # server: HTTP 429 -> "refused", counted, and the workload is skipped for the rest of the cycle.
    def blind():
        return dataclasses.replace(observe(), pdbs=())

    metrics = DeschedulerMetrics(CollectorRegistry())
    report = run_once(
        CycleDeps(blind, evictor, planner, TopologyHeuristic(), cfg, history=None, metrics=metrics, reader=reader(cp)),
        0.0,
    )
    assert [r.outcome for r in report.results] == ["refused"]
    assert report.skipped_by_guard == {"pdb_refused": 1}  # the workload's other pod: not proposed, no API call
    assert report.counts["refused"] == 1 and report.evictions == 0
    assert (
        metrics.registry.get_sample_value("hrl_descheduler_evictions_total", {"outcome": "refused", "dry_run": "false"})
        == 1
    )
    assert [o for _k, o in evictor.calls] == ["refused"]
    (call,) = eviction_calls(cp, ns)  # one attempt, no retry loop
    assert call["objectRef"]["subresource"] == "eviction" and call["responseStatus"]["code"] == 429
    assert {p["metadata"]["name"] for p in running(pods(cp, ns, "app=ds-guarded"))} == before


def test_the_structural_guards_block_local_storage_terminating_critical_and_uncontrolled_pods(
    control_plane, namespace, kwok_nodes
):
    cp, ns = control_plane, namespace
    a, b = kwok_nodes(2)
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"{ns}-local"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "persistentVolumeReclaimPolicy": "Retain",
            "local": {"path": "/mnt/disk0"},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": [a]}]}]
                }
            },
        },
    }
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "volumeName": f"{ns}-local",
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    cp.kubectl("apply", "-f", "-", input=json.dumps(pv))
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent"},
        "spec": {
            "selector": {"matchLabels": {"hrl-test/deployment": "agent"}},
            "template": {
                "metadata": {"labels": {"hrl-test/deployment": "agent", "app": "agent"}},
                "spec": {"nodeSelector": {HOSTNAME: a}, "containers": [{"name": "a", "image": "registry.invalid/a"}]},
            },
        },
    }
    bare = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bare", "labels": {"hrl-test/deployment": "bare"}},
        "spec": {"containers": [{"name": "a", "image": "registry.invalid/a"}], "nodeSelector": {HOSTNAME: a}},
    }
    mirror = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "static",
            "labels": {"hrl-test/deployment": "static"},
            "annotations": {"kubernetes.io/config.mirror": "0123456789abcdef"},
        },
        "spec": {"nodeName": a, "containers": [{"name": "a", "image": "registry.invalid/a"}]},
    }
    apply(
        cp,
        ns,
        [
            pvc,
            daemonset,
            bare,
            mirror,
            deployment(
                "empty-dir", scheduler=DEFAULT, affinity=prefer(a), volumes=[{"name": "scratch", "emptyDir": {}}]
            ),
            deployment(
                "host-path",
                scheduler=DEFAULT,
                affinity=prefer(a),
                volumes=[{"name": "host", "hostPath": {"path": "/tmp"}}],
            ),
            deployment(
                "local-pv",
                scheduler=DEFAULT,
                volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
            ),
            deployment("critical", scheduler=DEFAULT, affinity=prefer(a), priorityClassName="system-cluster-critical"),
            deployment("terminating", scheduler=DEFAULT, affinity=prefer(a)),
            deployment("plain", scheduler=DEFAULT, affinity=prefer(a)),
        ],
    )
    wait_running(cp, ns, 9, timeout_s=90)
    (term,) = pods(cp, ns, "hrl-test/deployment=terminating")
    # A finalizer holds the pod in Terminating after kwok deletes it (released by the namespace fixture).
    cp.kubectl(
        "patch",
        "pod",
        term["metadata"]["name"],
        "-n",
        ns,
        "--type=merge",
        "-p",
        '{"metadata":{"finalizers":["hrl-scheduler.io/test-hold"]}}',
    )
    cp.kubectl("delete", "pod", term["metadata"]["name"], "-n", ns, "--wait=false")
    wait_for(
        lambda: (
            len(running(pods(cp, ns, "hrl-test/deployment=terminating"))) == 1
            and len(pods(cp, ns, "hrl-test/deployment=terminating")) == 2
        ),
        30,
        "the held pod Terminating and its replacement Running",
    )
    system_ns = "kube-system"
    sys_dep = deployment(f"{ns}-sys"[:60], app="ds-system", scheduler=DEFAULT, affinity=prefer(a))
    apply(cp, system_ns, [sys_dep])
    try:
        wait_running(cp, system_ns, 1, f"hrl-test/deployment={sys_dep['metadata']['name']}")
        names = [
            "empty-dir",
            "host-path",
            "local-pv",
            "critical",
            "terminating",
            "agent",
            "bare",
            "static",
            sys_dep["metadata"]["name"],
            "plain",
        ]
        observe, evictor = descheduler(cp)
        snap = observe()
        term_pod = next(p for p in snap.pods if p.name == term["metadata"]["name"])
        assert term_pod.terminating
        planner = FixedPlanner(ns, dict.fromkeys(names, b))
        cfg = config(dryRun=True)
        report = run_once(
            CycleDeps(observe, evictor, planner, TopologyHeuristic(), cfg, history=None, reader=reader(cp)), 0.0
        )
    finally:
        cp.kubectl("delete", "deployment", sys_dep["metadata"]["name"], "-n", system_ns, "--wait=false")
        cp.kubectl("delete", "pv", f"{ns}-local", "--wait=false")

    got = {r.move.pod.split("/", 1)[1]: (r.outcome, r.blocked_by) for r in report.results}
    want = {
        "empty-dir": "local_storage",
        "host-path": "local_storage",
        "local-pv": "local_storage",
        "critical": "system_critical",
        "terminating": "terminating",
        "agent": "daemonset",
        "bare": "no_controller",
        "static": "mirror",
        sys_dep["metadata"]["name"]: "excluded_namespace",
    }
    seen = {}
    for r in report.results:
        dep = next(p for p in snap.pods if p.key == r.move.pod).labels.get("hrl-test/deployment")
        if dep == "terminating" and r.move.pod != term_pod.key:
            continue  # the replacement pod of that Deployment is an ordinary pod
        seen[dep] = (r.outcome, r.blocked_by)
    for dep, guard in want.items():
        outcome, blocked_by = seen[dep]
        assert outcome == "blocked" and guard in blocked_by, (dep, seen[dep], got)
    assert seen["plain"] == ("dry_run", ())  # the control: an ordinary pod would be evicted


def test_per_node_per_namespace_and_total_caps_hold_on_real_evictions(control_plane, namespace, kwok_nodes):
    cp, ns = control_plane, namespace
    n1, n2, n3, n4, n5, spare = kwok_nodes(6)
    other = f"{ns}-b"
    cp.kubectl("create", "namespace", other)
    try:
        apply(
            cp,
            ns,
            [
                deployment("a1", scheduler=DEFAULT, affinity=prefer(n1)),
                deployment("a2", scheduler=DEFAULT, affinity=prefer(n1)),
                deployment("a3", scheduler=DEFAULT, affinity=prefer(n2)),
                deployment("a4", scheduler=DEFAULT, affinity=prefer(n3)),
            ],
        )
        apply(
            cp,
            other,
            [
                deployment("b1", scheduler=DEFAULT, affinity=prefer(n4)),
                deployment("b2", scheduler=DEFAULT, affinity=prefer(n5)),
            ],
        )
        wait_running(cp, ns, 4)
        wait_running(cp, other, 2)
        observe, evictor = descheduler(cp)
        planner = FixedPlanner(ns, dict.fromkeys(("a1", "a2", "a3", "a4", "b1", "b2"), spare))
        cfg = config(caps={"perNode": 1, "perNamespace": 2, "total": 3})
        report = run_once(
            CycleDeps(
                observe, evictor, planner, TopologyHeuristic(), cfg, history=EvictionHistory(), reader=reader(cp)
            ),
            0.0,
        )
        deps = [r.move.pod.split("/", 1)[1].rsplit("-", 2)[0] for r in report.results]
        assert deps == ["a1", "a2", "a3", "a4", "b1"]
        assert [(r.outcome, r.blocked_by) for r in report.results] == [
            ("evicted", ()),
            ("blocked", ("cap_node",)),
            ("evicted", ()),
            ("blocked", ("cap_namespace",)),
            ("evicted", ()),
        ]
        # the total cap ends the cycle, once: b2 is never looked at
        assert report.stop.kind == "total_cap" and report.stop.not_attempted == 1
        evicted = {r.move.pod for r in report.results if r.outcome == "evicted"}
        audited = {
            f"{e['objectRef']['namespace']}/{e['objectRef']['name']}"
            for e in cp.audit_events(USER)
            if (e.get("objectRef") or {}).get("subresource") == "eviction"
            and e["objectRef"]["namespace"] in (ns, other)
        }
        assert audited == evicted
    finally:
        cp.kubectl("delete", "namespace", other, "--wait=false")
        cp.kubectl("delete", "pods", "--all", "-n", other, "--grace-period=0", "--force", "--wait=false", check=False)
        wait_for(
            lambda: cp.kubectl("get", "pods", "-n", other, "-o", "name").stdout.strip() == "",
            60,
            f"the pods of {other} to go",
        )


def test_a_pod_that_comes_back_to_the_same_node_is_not_evicted_again(control_plane, namespace, kwok_nodes, tmp_path):
    """Loop detection: the planner keeps wanting the caller next to its callee on X, but the default scheduler
    keeps putting it back on Y (X is loaded). With the prediction off (it would refuse the move outright),
    it is evicted once; the replacement comes back to Y; from then on the workload is on hold (a Warning Event
    on its ReplicaSet, the loop_hold metric), in the same process and in a fresh ``hrl-descheduler`` run reading
    the eviction history and the hold from its state file."""
    cp, ns = control_plane, namespace
    x, y = kwok_nodes(2)
    apply(
        cp,
        ns,
        [
            deployment("filler", app="loop-filler", cpu="2", scheduler=DEFAULT, affinity=prefer(x)),
            deployment("callee", app="loop-callee", scheduler=DEFAULT, node_selector={HOSTNAME: x}),
        ],
    )
    wait_running(cp, ns, 2)
    apply(cp, ns, [deployment("caller", app="loop-caller", depends_on=["loop-callee"], scheduler=DEFAULT)])
    (first,) = wait_running(cp, ns, 1, "app=loop-caller")
    assert node_of(first) == y
    state = tmp_path / "history.json"
    cfg_doc = {
        **HEADER,
        "caps": {"perNode": None, "perNamespace": None, "total": None},
        "cooldownSeconds": 0,
        "schedulerPrediction": {"enabled": False},
        "stateFile": str(state),
        "moves": EVICT,
    }
    cfg = load_descheduler_config(cfg_doc)
    observe, evictor = descheduler(cp)
    history = EvictionHistory.load(state)
    planner = planner_from_config(cfg)
    from descheduler.kube import KubeEventRecorder

    recorder = KubeEventRecorder(cp.api(USER), instance="test")
    metrics = DeschedulerMetrics(CollectorRegistry())
    kw = {"reader": reader(cp), "recorder": recorder, "metrics": metrics}

    report = run_once(CycleDeps(observe, evictor, planner, TopologyHeuristic(), cfg, history, **kw), time.time())
    assert [(r.move.to_node, r.outcome) for r in report.results] == [(x, "evicted")]

    def back():
        ps = running(pods(cp, ns, "app=loop-caller"))
        return ps if len(ps) == 1 and ps[0]["metadata"]["name"] != first["metadata"]["name"] else None

    (second,) = wait_for(back, 60, "the caller's replacement")
    assert node_of(second) == y  # it came back

    report = run_once(CycleDeps(observe, evictor, planner, TopologyHeuristic(), cfg, history, **kw), time.time())
    assert report.results == () and report.skipped_by_guard == {"loop_hold": 1}
    (hold,) = report.loop_holds
    assert hold.node == y and hold.pod == f"{ns}/{second['metadata']['name']}"
    assert len(evictor.calls) == 1
    assert metrics.registry.get_sample_value("hrl_descheduler_loop_holds") == 1
    assert metrics.registry.get_sample_value("hrl_descheduler_loops_detected_total") == 1

    def loop_event():
        evs = get_json(cp, "events.events.k8s.io", "-n", ns)["items"]
        return [e for e in evs if e.get("reason") == "EvictionLoop"]

    (ev,) = wait_for(loop_event, 20, "the EvictionLoop event")
    assert ev["type"] == "Warning" and ev["regarding"]["kind"] == "ReplicaSet"
    assert ev["reportingController"] == "hrl-scheduler.io/descheduler" and "came back to" in ev["note"]

    cfg_file = tmp_path / "descheduler.yaml"
    cfg_file.write_text(json.dumps(cfg_doc))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "descheduler",
            "--once",
            "--json",
            "--config",
            str(cfg_file),
            "--kubeconfig",
            str(cp.kubeconfigs[USER]),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["dry_run"] is False and out["results"] == [] and out["skipped_by_guard"] == {"loop_hold": 1}
    assert [h["pod"] for h in out["loop_holds"]] == [f"{ns}/{second['metadata']['name']}"]
    assert len([e for e in eviction_calls(cp, ns) if e["objectRef"].get("subresource") == "eviction"]) == 1
    assert len(loop_event()) == 1  # reported once, not every cycle


def test_state_is_read_again_before_each_eviction(control_plane, namespace, kwok_nodes):
    """A pod deleted by someone else after planning: the targeted GET finds it gone (not_found), nothing is
    sent for it; the next move goes on."""
    cp, ns = control_plane, namespace
    a, b = kwok_nodes(2)
    apply(
        cp,
        ns,
        [
            deployment("first", scheduler=DEFAULT, affinity=prefer(a)),
            deployment("second", scheduler=DEFAULT, affinity=prefer(a)),
        ],
    )
    wait_running(cp, ns, 2)
    (gone,) = pods(cp, ns, "hrl-test/deployment=first")
    observe, evictor = descheduler(cp)

    class DeletingReader(KubeReader):
        """After planning, before the first re-read: the planned pod disappears."""

        def read_pod(self, namespace, name):
            if not self.calls:
                cp.kubectl("delete", "pod", gone["metadata"]["name"], "-n", ns, "--grace-period=0", "--force")
            return super().read_pod(namespace, name)

    planner = FixedPlanner(ns, {"first": b, "second": b})
    rr = DeletingReader(cp.api(USER))
    report = run_once(CycleDeps(observe, evictor, planner, TopologyHeuristic(), config(), history=None, reader=rr), 0.0)
    assert observe.calls == 1
    assert [r.outcome for r in report.results] == ["not_found", "evicted"]
    assert [k.split("/", 1)[1] for k, _o in evictor.calls] == [
        report.results[1].move.pod.split("/", 1)[1]
    ]  # the vanished pod was never sent to the API
    assert rr.calls[("get", "pods")] == 2 and ("list", "pods") not in rr.calls


def test_the_feasibility_guard_keeps_a_pod_that_no_other_node_can_take(control_plane, namespace, kwok_nodes):
    cp, ns = control_plane, namespace
    here, full, cordoned = kwok_nodes(3)
    apply(
        cp,
        ns,
        [
            deployment("stuck", cpu="1", scheduler=DEFAULT, affinity=prefer(here)),
            deployment("hog", cpu="3500m", scheduler=DEFAULT, node_selector={HOSTNAME: full}),
        ],
    )
    wait_running(cp, ns, 2)
    cp.kubectl("cordon", cordoned)
    observe, evictor = descheduler(cp)
    planner = FixedPlanner(ns, {"stuck": full})
    report = run_once(
        CycleDeps(observe, evictor, planner, TopologyHeuristic(), config(), history=None, reader=reader(cp)), 0.0
    )
    (r,) = report.results
    assert (r.outcome, r.blocked_by) == ("blocked", ("infeasible",))
    reason = r.blockers[0].reason
    assert f"on {full}: Insufficient cpu" in reason
    assert evictor.calls == []
    # a move towards the cordoned node is refused too, and neither cost an API call
    report = run_once(
        CycleDeps(observe, evictor, FixedPlanner(ns, {"stuck": cordoned}), TopologyHeuristic(), config(), history=None),
        0.0,
    )
    assert "node is unschedulable" in report.results[0].blockers[0].reason and report.reads == {}


class EvictionHook:
    """A validating admission webhook on ``pods/eviction`` in one namespace, served over HTTPS on 127.0.0.1 (the API
    server calls it for every eviction there, and it allows each): it records the evictions it sees, and at the
    first real one (not a dry run) sends SIGTERM to ``pid`` and holds the eviction ``hold_s`` before allowing it, so
    that the signal arrives while that eviction is in flight. A context manager: the webhook is registered (and seen
    by the API server, checked with a dry-run eviction of ``probe_pod``) on entry, removed on exit."""

    def __init__(self, cp, ns: str, workdir, probe_pod: str, hold_s: float = 0.5):
        self.cp, self.ns, self.workdir, self.probe_pod, self.hold_s = cp, ns, workdir, probe_pod, hold_s
        self.pid: int | None = None
        self.seen: list[tuple[str, bool]] = []  # (pod, dry run) in the order the API server asked
        self.name = f"hrl-test-evictions-{ns}"[:63]

    def _serve(self):
        import ssl
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                req = review["request"]
                dry = bool(req.get("dryRun"))
                first = not dry and not any(not d for _, d in hook.seen)
                hook.seen.append((req.get("name"), dry))
                if first and hook.pid is not None:
                    os.kill(hook.pid, signal.SIGTERM)  # the Pod's deletion, mid-eviction
                    time.sleep(hook.hold_s)
                out = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "response": {"uid": req["uid"], "allowed": True}}  # fmt: skip
                body = json.dumps(out).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        certs = self.workdir / "webhook-certs"
        subprocess.run([str(ROOT / "hack" / "gen-extender-certs.sh"), str(certs), "127.0.0.1"], check=True,
                       capture_output=True, timeout=120)  # fmt: skip
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(certs / "tls.crt", certs / "tls.key")
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return base64.b64encode((certs / "ca.crt").read_bytes()).decode(), self.server.server_address[1]

    def __enter__(self):
        ca, port = self._serve()
        hook = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": self.name},
            "webhooks": [
                {
                    "name": "evictions.hrl-test.io",
                    "clientConfig": {"url": f"https://127.0.0.1:{port}/evictions", "caBundle": ca},
                    "rules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods/eviction"],
                            "scope": "Namespaced",
                        }
                    ],
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": self.ns}},
                    "failurePolicy": "Fail",
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "timeoutSeconds": 10,
                }
            ],
        }
        self.cp.kubectl("apply", "-f", "-", input=json.dumps(hook))
        from kubernetes import client as kclient

        core = kclient.CoreV1Api(self.cp.api())
        meta = {"name": self.probe_pod, "namespace": self.ns}
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": meta}

        def registered():  # the API server's webhook configuration is watched: wait until it calls this one
            core.create_namespaced_pod_eviction(self.probe_pod, self.ns, body, dry_run="All")
            return any(d for _, d in self.seen)

        wait_for(registered, 30, "the eviction webhook to be called")
        return self

    def __exit__(self, *exc):
        self.cp.kubectl("delete", "validatingwebhookconfiguration", self.name, "--wait=false", check=False)
        self.server.shutdown()
        self.server.server_close()  # its TLS listening socket: left open, its ResourceWarning fails a later test

    def real(self) -> list[str]:
        return [pod for pod, dry in self.seen if not dry]


def test_sigterm_during_an_interval_cycle_stops_at_the_next_eviction_boundary(
    control_plane, namespace, kwok_nodes, tmp_path
):
    """Issue 26 item 8 on the real control plane: ``hrl-descheduler --interval`` in a cycle with four evictions to
    make (its dry run plans them) gets SIGTERM while the API server is admitting its first one (an admission webhook
    sends the signal and holds that eviction). That eviction completes; no other is sent; the process exits 0 after
    reporting the cycle as interrupted, and what it leaves agrees with what the API server did: one eviction in the
    audit log, one record in its state file, one Descheduled Event, the other three pods where they were."""
    cp, ns = control_plane, namespace
    hub_node, here, _spare = kwok_nodes(3)
    callers = ("c1", "c2", "c3", "c4")
    apply(cp, ns, [deployment("hub", app="sig-hub", scheduler=DEFAULT, node_selector={HOSTNAME: hub_node})])
    apply(cp, ns, [deployment(c, app=f"sig-{c}", depends_on=["sig-hub"], scheduler=DEFAULT, affinity=prefer(here))
                   for c in callers])  # fmt: skip
    wait_running(cp, ns, 5)
    before = {p["metadata"]["name"]: node_of(p) for p in pods(cp, ns) if p["metadata"]["labels"]["app"] != "sig-hub"}
    assert set(before.values()) == {here}  # each caller one node away from the service it calls: four moves
    state = tmp_path / "history.json"
    cfg = tmp_path / "descheduler.yaml"
    cfg.write_text(
        json.dumps(
            {
                **HEADER,
                "caps": {"perNode": None, "perNamespace": None, "total": None},
                "cooldownSeconds": 1800,
                "schedulerPrediction": {"enabled": False},  # soft affinity would bring them back: the rule's own tests
                "moves": EVICT,
                "scaling": {"enabled": False},
                "leaderElection": {"enabled": False},
                "stateFile": str(state),
            }
        )
    )
    dry = subprocess.run(
        [sys.executable, "-m", "descheduler", "--once", "--dry-run", "--json", "--config", str(cfg),
         "--kubeconfig", str(cp.kubeconfigs[USER])],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    planned = json.loads(dry.stdout)["results"]
    assert sorted(r["pod"] for r in planned if r["outcome"] == "dry_run") == sorted(f"{ns}/{n}" for n in before)
    with EvictionHook(cp, ns, tmp_path, probe_pod=sorted(before)[0]) as hook:
        proc = subprocess.Popen(
            [sys.executable, "-m", "descheduler", "--interval", "600", "--json", "--config", str(cfg),
             "--kubeconfig", str(cp.kubeconfigs[USER])],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        hook.pid = proc.pid
        try:
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
        evicted = hook.real()
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert len(evicted) == 1, (evicted, err)  # the one in flight; no other reached the API server
    (gone,) = evicted
    reports = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert len(reports) == 1, out  # one cycle, then the loop ended
    (report,) = reports
    assert [(r["pod"], r["outcome"]) for r in report["results"]] == [(f"{ns}/{gone}", "evicted")], report["results"]
    # the shipped planner takes a gate (it evicts as it plans): it plans nothing after the stop, so none is counted
    # as not attempted; the three the dry run planned were neither planned nor sent
    assert report["stop"]["kind"] == "interrupted" and "SIGTERM" in report["stop"]["message"], report["stop"]
    assert report["scaling"] == []
    # what it leaves agrees with what the API server did
    audited = [e for e in eviction_calls(cp, ns) if (e.get("objectRef") or {}).get("subresource") == "eviction"]
    assert [(e["objectRef"]["name"], e["responseStatus"]["code"]) for e in audited] in ([(gone, 201)], [(gone, 200)])
    assert [r.pod for r in EvictionHistory.load(state).records] == [f"{ns}/{gone}"]

    def descheduled():
        evs = get_json(cp, "events.events.k8s.io", "-n", ns)["items"]
        return [e["regarding"]["name"] for e in evs if e.get("reason") == "Descheduled"]

    assert wait_for(descheduled, 20, "the Descheduled Event") == [gone]
    left = {p["metadata"]["name"]: node_of(p) for p in running(pods(cp, ns)) if p["metadata"]["name"] in before}
    assert left == {name: here for name in before if name != gone}  # the three not attempted, untouched


def test_the_pod_of_a_lost_node_is_evicted_and_replaced_on_a_ready_node(control_plane, namespace, kwok_nodes):
    """A node that never reports (no kwok behind it): the node lifecycle controller marks it Unknown after
    --node-monitor-grace-period and taints it unreachable, NoSchedule and NoExecute with a timeAdded. The cycle's
    node-loss step evicts the pod bound there through the Eviction API, long before the taint manager's 300 s, and
    the ReplicaSet's replacement runs on a Ready node."""
    cp, ns = control_plane, namespace
    (b,) = kwok_nodes(1)
    lost = cpmod.fake_node(f"{b}-lost")
    del lost["metadata"]["annotations"][cpmod.KWOK_ANNOTATION[0]]  # nobody runs it: it never reports
    x = lost["metadata"]["name"]
    cp.kubectl("create", "-f", "-", input=json.dumps(lost))
    try:
        # a pod that may start on a node not Ready yet lands there (its soft affinity), before the node is lost
        wait = [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoSchedule"}]
        apply(cp, ns, [deployment("lone", scheduler=DEFAULT, affinity=prefer(x), tolerations=wait)])

        def bound():
            ps = [p for p in pods(cp, ns, "app=lone") if p["spec"].get("nodeName")]
            return ps or None

        (old,) = wait_for(bound, 60, "the pod bound")
        assert node_of(old) == x

        def tainted():
            # both effects: the controller adds them from two queues, and until NoSchedule is there the node is
            # not lost to the descheduler (the replacement could land back on it)
            taints = get_json(cp, "node", x)["spec"].get("taints") or []
            mine = {t["effect"]: t for t in taints if t["key"] == "node.kubernetes.io/unreachable"}
            return mine if {"NoExecute", "NoSchedule"} <= mine.keys() else None

        taint = wait_for(tainted, 150, f"node {x} to be tainted unreachable, NoExecute and NoSchedule")["NoExecute"]
        assert taint.get("timeAdded")
        observe, evictor = descheduler(cp)
        cfg = config(nodeLoss={"afterSeconds": 0})
        report = run_once(
            CycleDeps(observe, evictor, FixedPlanner(ns, {}), TopologyHeuristic(), cfg, reader=reader(cp)), time.time()
        )
        assert x in [n.name for n in report.lost_nodes]
        mine = [(r.move.pod, r.move.from_node, r.outcome) for r in report.node_loss if r.move.pod.startswith(ns + "/")]
        assert mine == [(f"{ns}/{old['metadata']['name']}", x, "evicted")]
        (call,) = eviction_calls(cp, ns)
        assert (call["verb"], call["objectRef"]["subresource"]) == ("create", "eviction")

        def replaced():
            ps = running(pods(cp, ns, "app=lone"))
            return ps if len(ps) == 1 and ps[0]["metadata"]["name"] != old["metadata"]["name"] else None

        (new,) = wait_for(replaced, 60, "the replacement of the lost node's pod")
        assert node_of(new) == b
    finally:
        cp.kubectl("delete", "pods", "-n", ns, "-l", "app=lone", "--force", "--grace-period=0", check=False)
        cp.kubectl("delete", "node", x, "--wait=false", check=False)
