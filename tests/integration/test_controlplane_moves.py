"""Make-before-break moves on the real control plane (issue 19): a Deployment of one replica is moved to a target node
by a surge and no pod of it stops serving. The descheduler (the ``hrl-descheduler`` identity with the shipped rights:
``patch`` on pods, ``list`` on resourcequotas, ``deployments/scale``; no delete, here no eviction either) announces the
move through a real ``hrl-policy cache serve``; a real ``hrl-extender`` copies the pending-move record and a
kube-scheduler that calls it puts the new pod on the target although its own plugins prefer another node; once the new
pod is Ready the descheduler marks the old one with ``controller.kubernetes.io/pod-deletion-cost`` and scales the
Deployment back down, and kube-controller-manager's ReplicaSet controller deletes the old pod. The witnesses: a watch
on the namespace's pods (a Ready pod at every moment), the API server's audit log (the descheduler's writes) and the
ReplicaSet's ``SuccessfulDelete`` Event.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass

import pytest
from cp_helpers import apply, cpmod, deployment, get_json, metric, metrics, pods, running, wait_for, wait_running
from kubernetes import client as kclient
from kubernetes import watch as kwatch

from descheduler.cache import CacheLink
from descheduler.config import load_descheduler_config
from descheduler.guards import EvictionHistory
from descheduler.kube import KubeEvictor, KubeMover, KubeObserver, KubeReader
from descheduler.loop import CycleDeps, run_once
from descheduler.surge import ANNOTATION_DELETION_COST, DELETION_COST_FIRST, SurgeBook
from policy.cache import GrpcEmbeddingCache
from policy.intent import Intent
from policy.lowlevel import TopologyHeuristic
from policy.state import Move, Plan

pytestmark = pytest.mark.controlplane

USER = "hrl-descheduler"
MBB = "hrl-mbb"  # the profile of the kube-scheduler that calls the extender under test
HOSTNAME = "kubernetes.io/hostname"


@dataclass
class MoveOnce:
    """Plans one move of the Deployment's pod (label ``app``) to ``to`` in the first cycle, nothing after."""

    app: str
    to: str
    name: str = "move-once"
    done: bool = False

    def plan(self, snapshot, index, placement):
        moves = ()
        if not self.done:
            (p,) = [p for p in snapshot.pods if p.labels.get("app") == self.app and p.node_name]
            moves, self.done = (Move(p.key, p.node_name, self.to, "policy", 5.0),), True
        return Plan(moves=moves, replica_targets={}, intent=Intent((1.0, 1.0)))


class PodWatch:
    """Every event of a watch on the pods of ``selector``: ``(s, type, name, node, ready, terminating, annotations)``
    tuples, from a thread."""

    def __init__(self, cp, ns: str, selector: str):
        self.events: list[tuple] = []
        self._w = kwatch.Watch()
        self._core = kclient.CoreV1Api(cp.api())
        self._ns, self._selector = ns, selector
        self._stopped = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        try:
            self._watch()
        except Exception:  # the stream breaks when stop() closes it
            if not self._stopped.is_set():
                raise

    def _watch(self) -> None:
        stream = self._w.stream(
            self._core.list_namespaced_pod, self._ns, label_selector=self._selector, timeout_seconds=600
        )
        for ev in stream:
            p = ev["object"]
            ready = any(c.type == "Ready" and c.status == "True" for c in (p.status.conditions or []))
            self.events.append(
                (
                    time.monotonic(),
                    ev["type"],
                    p.metadata.name,
                    p.spec.node_name,
                    ready,
                    p.metadata.deletion_timestamp is not None,
                    dict(p.metadata.annotations or {}),
                )
            )

    def stop(self) -> None:
        self._stopped.set()
        self._w.stop()
        self._t.join(10)

    def serving_counts(self) -> list[int]:
        """The number of Ready, non-terminating pods after each event."""
        state: dict[str, bool] = {}
        out = []
        for _t, typ, name, _node, ready, terminating, _ann in self.events:
            if typ == "DELETED":
                state.pop(name, None)
            else:
                state[name] = ready and not terminating
            out.append(sum(state.values()))
        return out


def descheduler_writes(cp, ns: str) -> list[tuple[str, str, str, str]]:
    """The descheduler's writes in ``ns`` by the audit log: (verb, resource, subresource, name)."""
    out = []
    for e in cp.audit_events(USER):
        ref = e.get("objectRef") or {}
        if ref.get("namespace") == ns and e.get("verb") not in ("get", "list", "watch"):
            out.append((e["verb"], ref.get("resource", ""), ref.get("subresource", ""), ref.get("name", "")))
    return out


def replicas_of(cp, ns: str, name: str) -> int:
    return int(get_json(cp, "deployment", name, "-n", ns)["spec"]["replicas"])


def test_a_single_replica_deployment_moves_make_before_break_and_the_replicaset_deletes_the_marked_pod(
    control_plane, namespace, kwok_nodes, cache_and_extender, tmp_path
):
    cp, ns = control_plane, namespace
    cache_addr, ext = cache_and_extender
    a, b, c = kwok_nodes(3)  # 4 CPU each
    # b carries a filler: kube-scheduler's own scores prefer the empty c for a new pod; the move targets b
    apply(
        cp,
        ns,
        [deployment("filler", app="mv-filler", cpu="2", scheduler="default-scheduler", node_selector={HOSTNAME: b})],
    )
    wait_running(cp, ns, 1, "app=mv-filler")
    for n in (b, c):
        cp.kubectl("cordon", n)
    with cp.scheduler(MBB, [cpmod.extender_registration(f"{ext}/scheduler")]):
        apply(cp, ns, [deployment("api", app="mv-api", scheduler=MBB)])
        (old,) = wait_running(cp, ns, 1, "app=mv-api", timeout_s=90)
        assert old["spec"]["nodeName"] == a
        for n in (b, c):
            cp.kubectl("uncordon", n)
        wait_for(lambda: all(not get_json(cp, "node", n)["spec"].get("unschedulable") for n in (b, c)), 30, "uncordon")

        watch = PodWatch(cp, ns, "app=mv-api")
        api = cp.api(USER)
        cfg = load_descheduler_config(
            {
                "apiVersion": "hrl-scheduler.io/v1alpha1",
                "kind": "DeschedulerConfiguration",
                "caps": {"perNode": None, "perNamespace": None, "total": None},
                "schedulerPrediction": {"enabled": False},
                "stateFile": str(tmp_path / "state.json"),
                # the record reaches the extender within 0.2 s (its refreshSeconds); the cost model has unit tests
                "moves": {"steerDelaySeconds": 1, "costModel": {"enabled": False}},
            }
        )
        link = CacheLink(GrpcEmbeddingCache(cache_addr, 5.0))
        planner = MoveOnce("mv-api", b)

        def cycle():
            history = EvictionHistory.load(cfg.state_file)  # a fresh process each time: the CronJob
            deps = CycleDeps(
                KubeObserver(api),
                KubeEvictor(api),
                planner,
                TopologyHeuristic(),
                cfg,
                history=history,
                mover=KubeMover(api),
                reader=KubeReader(api),
            )
            report = run_once(deps, time.time())
            assert link.publish_intent(report.intent, report.dry_run, report.pending_moves) == []
            return report

        # 1. the move is announced: the record goes to the extender through the cache; nothing is scaled yet
        first = cycle()
        assert [(r.outcome, r.path) for r in first.results] == [("surged", "surge")], first.results
        assert [e.outcome for e in first.surges] == ["announced"] and replicas_of(cp, ns, "api") == 1
        time.sleep(1.5)

        # 2. the surge: one replica more; the ReplicaSet's new pod is steered to b and becomes Ready there
        second = cycle()
        assert [e.outcome for e in second.surges] == ["started"] and replicas_of(cp, ns, "api") == 2
        new = wait_for(
            lambda: [
                p for p in running(pods(cp, ns, "app=mv-api")) if p["metadata"]["name"] != old["metadata"]["name"]
            ],
            90,
            "the new pod to run",
        )[0]
        assert new["spec"]["nodeName"] == b  # not c, where the in-tree plugins alone would put it
        assert metric(metrics(ext), "hrl_extender_prioritize_total", outcome="pending_move") >= 1
        wait_for(
            lambda: any(
                c_["type"] == "Ready" and c_["status"] == "True"
                for c_ in get_json(cp, "pod", new["metadata"]["name"], "-n", ns)["status"].get("conditions", [])
            ),
            60,
            "the new pod to be Ready",
        )

        # 3. the old pod is marked and the Deployment scaled back down: the ReplicaSet deletes the marked pod
        third = cycle()
        assert [e.outcome for e in third.surges] == ["draining"] and replicas_of(cp, ns, "api") == 1
        (left,) = wait_running(cp, ns, 1, "app=mv-api", timeout_s=90)
        assert left["metadata"]["name"] == new["metadata"]["name"] and left["spec"]["nodeName"] == b

        # 4. the next cycle sees it done
        fourth = cycle()
        assert [e.outcome for e in fourth.surges] == ["completed"]
        assert SurgeBook.load(EvictionHistory.load(cfg.state_file)).moves == []
        time.sleep(1.0)
        watch.stop()

    # Witnesses. The service had a Ready pod at every moment of the move:
    counts = watch.serving_counts()
    assert counts and min(counts) >= 1 and max(counts) == 2, watch.events
    # the old pod was marked before it went:
    marked = [e for e in watch.events if e[2] == old["metadata"]["name"] and ANNOTATION_DELETION_COST in e[6]]
    assert marked and marked[0][6][ANNOTATION_DELETION_COST] == str(DELETION_COST_FIRST)
    # the descheduler scaled up, patched the old pod, scaled down, and never evicted nor deleted a pod:
    writes = descheduler_writes(cp, ns)
    assert [w for w in writes if w[1] in ("deployments", "pods")] == [
        ("update", "deployments", "scale", "api"),
        ("patch", "pods", "", old["metadata"]["name"]),
        ("update", "deployments", "scale", "api"),
    ], writes
    assert not [e for e in cp.audit_events(USER) if e.get("verb") in ("delete", "deletecollection")]
    # and the ReplicaSet controller deleted the marked pod:
    evs = get_json(cp, "events", "-n", ns, "--field-selector", "reason=SuccessfulDelete")["items"]
    assert any(old["metadata"]["name"] in (e.get("message") or e.get("note") or "") for e in evs), json.dumps(evs)[
        :2000
    ]
