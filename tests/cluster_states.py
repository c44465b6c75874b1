"""Random cluster states for property tests (hypothesis): Nodes and Pods as the API server returns them (JSON), with
the variety the extender's parsing meets (every rule of ``policy.observe.service_of``, requests given as requests or
only as limits, several containers, init containers, overhead, pending / bound / terminating / finished pods), a
call graph over the services with and without rates, measured use on some nodes and pods, and an intent with
per-service co-location priorities. :func:`cluster_states` draws one; :func:`load_state` turns it into the extender's
:class:`~extender.store.SnapshotStore`."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from hypothesis import strategies as st

from policy.state import Resources, ServiceEdge, ServiceGraph

SERVICES = ("cart", "checkout", "frontend", "payment", "ads-v2")
CPUS = ("250m", "500m", "1", "2", "3500m", "4", "7900m", "32")
MEMORIES = ("1Gi", "4Gi", "16Gi", "128Gi")
POD_CPUS = ("1m", "50m", "100m", "250m", "0.5", "1", "1500m", "3")
POD_MEMORIES = ("16Mi", "64M", "128Mi", "1Gi", "1.5Gi")


@dataclass
class State:
    """One drawn state: the API objects, the call graph, measured CPU use (millicores) per node and per pod name,
    the intent vector and its co-location priorities."""

    nodes: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    graph: ServiceGraph
    node_usage_m: dict[str, float] = field(default_factory=dict)
    pod_usage_m: dict[str, float] = field(default_factory=dict)
    intent: tuple[float, ...] | None = None
    colocation: dict[str, float] = field(default_factory=dict)


def node_object(name: str, cpu: str = "4", memory: str = "8Gi") -> dict[str, Any]:
    """A plain Node: ``name`` with ``cpu`` and ``memory`` allocatable."""
    return {"kind": "Node", "metadata": {"name": name}, "status": {"allocatable": {"cpu": cpu, "memory": memory}}}


def pod_object(
    name: str, service: str, cpu: str = "100m", memory: str = "64Mi", node: str | None = None, phase: str = "Running"
) -> dict[str, Any]:
    """A one-container Pod of ``service`` (label ``app``) in namespace ``d`` requesting ``cpu`` and ``memory``; bound
    to ``node`` in ``phase``, or Pending."""
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}
    if node:
        spec["nodeName"] = node
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "d", "labels": {"app": service}},
        "spec": spec,
        "status": {"phase": phase if node else "Pending"},
    }


def _resources(draw, key: str, values) -> dict[str, str]:
    return {key: draw(st.sampled_from(values))} if draw(st.booleans()) or key == "cpu" else {}


@st.composite
def pod_objects(draw, name: str, nodes: list[str]) -> dict[str, Any]:
    """One Pod: its service by one of the rules of service_of, its requests in one of the shapes they come in."""
    svc = draw(st.sampled_from(SERVICES))
    rule = draw(st.sampled_from(["app", "name-label", "annotation", "replicaset", "statefulset", "pod-name"]))
    meta: dict[str, Any] = {"name": name, "namespace": draw(st.sampled_from(["default", "shop"])), "uid": f"uid-{name}"}
    labels: dict[str, str] = {}
    if rule == "app":
        labels["app"] = svc
    elif rule == "name-label":
        labels["app.kubernetes.io/name"] = svc
        labels["app"] = "ignored"
    elif rule == "annotation":
        meta["annotations"] = {"hrl-scheduler.io/service": svc}
        labels["app"] = "ignored"
    elif rule in ("replicaset", "statefulset"):
        kind = "ReplicaSet" if rule == "replicaset" else "StatefulSet"
        owner = f"{svc}-{draw(st.sampled_from(['7d9f8c6b5', 'x1', 'abcde']))}" if kind == "ReplicaSet" else svc
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": kind, "name": owner, "uid": "o", "controller": True}
        ]
        meta["name"] = name = f"{owner}-{name}"
    else:
        meta["name"] = name = f"{svc}-5f7b9-{name}"
    if labels:
        meta["labels"] = labels
    containers = []
    for i in range(draw(st.integers(1, 3))):
        res: dict[str, Any] = {}
        shape = draw(st.sampled_from(["requests", "limits", "both", "none"]))
        if shape in ("requests", "both"):
            res["requests"] = {"cpu": draw(st.sampled_from(POD_CPUS)), **_resources(draw, "memory", POD_MEMORIES)}
        if shape in ("limits", "both"):
            res["limits"] = {"cpu": draw(st.sampled_from(POD_CPUS)), "memory": draw(st.sampled_from(POD_MEMORIES))}
        containers.append({"name": f"c{i}", "image": "registry.invalid/app:1", "resources": res})
    spec: dict[str, Any] = {"containers": containers, "schedulerName": "hrl-scheduler"}
    if draw(st.integers(0, 4)) == 0:
        spec["initContainers"] = [
            {
                "name": "init",
                "image": "registry.invalid/init:1",
                "resources": {"requests": {"cpu": draw(st.sampled_from(POD_CPUS))}},
            }
        ]
    if draw(st.integers(0, 6)) == 0:
        spec["overhead"] = {"cpu": "10m", "memory": "20Mi"}
    status: dict[str, Any] = {"phase": "Pending"}
    if nodes and draw(st.booleans()):
        spec["nodeName"] = draw(st.sampled_from(nodes))
        status["phase"] = draw(st.sampled_from(["Running", "Running", "Running", "Succeeded", "Failed"]))
        if draw(st.integers(0, 5)) == 0:
            meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


@st.composite
def cluster_states(draw, max_nodes: int = 12, max_pods: int = 24) -> State:
    """A :class:`State` with 1..``max_nodes`` nodes and 0..``max_pods`` pods."""
    n = draw(st.integers(1, max_nodes))
    names = [f"node-{i:02d}" for i in range(n)]
    nodes = []
    for nm in names:
        labels = {"kubernetes.io/hostname": nm}
        if draw(st.booleans()):
            labels["topology.kubernetes.io/zone"] = draw(st.sampled_from(["zone-a", "zone-b", "zone-c"]))
        alloc = {"cpu": draw(st.sampled_from(CPUS)), "memory": draw(st.sampled_from(MEMORIES)), "pods": "110"}
        nodes.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": nm, "labels": labels},
                "status": {
                    "capacity": alloc,
                    "allocatable": alloc,
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            }
        )
    pods = [draw(pod_objects(f"p{i:02d}", names)) for i in range(draw(st.integers(0, max_pods)))]
    svcs = list(SERVICES[: draw(st.integers(1, len(SERVICES)))])
    edges = []
    for a in svcs:
        for b in svcs:
            if a != b and draw(st.integers(0, 2)) == 0:
                edges.append(ServiceEdge(a, b, rps=draw(st.one_of(st.none(), st.floats(0.0, 500.0)))))
    graph = ServiceGraph.build(svcs, edges)
    usage = {}
    if draw(st.booleans()):
        for nm in names:
            if draw(st.booleans()):
                usage[nm] = float(draw(st.integers(0, 40_000)))
    pod_usage = {}
    for p in pods:
        if p["spec"].get("nodeName") and draw(st.integers(0, 2)) == 0:
            pod_usage[p["metadata"]["name"]] = float(draw(st.integers(0, 3000)))
    intent = None
    if draw(st.booleans()):
        intent = (draw(st.floats(0.0, 3.0)), draw(st.floats(0.0, 3.0)))
    colocation = {}
    if intent is not None and draw(st.booleans()):
        colocation = {s: draw(st.floats(0.0, 2.0)) for s in svcs if draw(st.booleans())}
    return State(nodes, pods, graph, usage, pod_usage, intent, colocation)


def load_state(state: State, now_s: float = 1000.0):
    """The extender's :class:`~extender.store.SnapshotStore` for ``state``: its objects parsed by
    :func:`policy.observe.snapshot_from_objects`, the measured use attached, the call graph and the intent set."""
    from extender.store import SnapshotStore
    from policy.intent import Intent
    from policy.observe import snapshot_from_objects

    snap = snapshot_from_objects([*state.nodes, *state.pods], taken_at_s=now_s)
    if state.node_usage_m or state.pod_usage_m:
        nodes = tuple(
            replace(nd, usage=Resources(state.node_usage_m[nd.name], 0)) if nd.name in state.node_usage_m else nd
            for nd in snap.nodes
        )
        pods = tuple(
            replace(p, usage=Resources(state.pod_usage_m[p.name], 0)) if p.name in state.pod_usage_m else p
            for p in snap.pods
        )
        snap = replace(snap, nodes=nodes, pods=pods)
    store = SnapshotStore(clock=lambda: now_s)
    store.update(snap.with_graph(state.graph), now_s=now_s)
    if state.intent is not None:
        store.set_intent(Intent(tuple(state.intent), colocation_priority=state.colocation))
    return store
