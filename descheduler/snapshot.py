"""Cluster state from a file, for ``hrl-descheduler --snapshot FILE`` (and for tests).

The file is what ``kubectl get nodes,pods,pdb,deployments -A -o json`` (or ``-o yaml``) prints: a ``List``, or a
directory of such files (:func:`policy.observe.load_snapshot_objects`; anything else is an error, never an
empty cluster). The call graph comes from ``topology.sources`` of the
configuration when given (:func:`load_topology`), else from the ``hrl-scheduler.io/depends-on``
annotations of the workloads and pods in the snapshot (:func:`graph_from_annotations`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from policy.observe import load_snapshot, snapshot_warnings
from policy.state import ANNOTATION_DEPENDS_ON, ClusterSnapshot, ServiceEdge, ServiceGraph
from policy.topology.sources import load_graph

__all__ = ["graph_from_annotations", "load_topology", "load_snapshot_file"]


def graph_from_annotations(snapshot: ClusterSnapshot) -> ServiceGraph:
    """The call graph declared by ``hrl-scheduler.io/depends-on: "svc-a,svc-b"`` on workloads (or their pod
    templates) and on pods: an edge ``service → each named service``, rate unknown. Every service of a
    workload or pod in the snapshot is a vertex."""
    services = {w.service for w in snapshot.workloads} | {p.service for p in snapshot.pods}
    edges: list[ServiceEdge] = []
    for w in snapshot.workloads:
        edges.extend(ServiceEdge(w.service, dep) for dep in w.depends_on)
    for p in snapshot.pods:
        for dep in p.annotations.get(ANNOTATION_DEPENDS_ON, "").split(","):
            if dep.strip():
                edges.append(ServiceEdge(p.service, dep.strip()))
    return ServiceGraph.build(services, edges, source="annotations")


def load_topology(sources: Sequence[str]) -> tuple[ServiceGraph, list[str]]:
    """The graph from ``topology.sources`` (through ``policy.topology.sources.load_graph``) and its warnings;
    its errors pass through."""
    graph, warnings = load_graph(list(sources))
    return graph, list(warnings)


def load_snapshot_file(
    path: str | Path,
    graph: ServiceGraph | None = None,
    taken_at_s: float = 0.0,
    warn: Callable[[str], None] | None = None,
) -> ClusterSnapshot:
    """Read a snapshot from ``path``; ``graph=None`` → :func:`graph_from_annotations` of its contents.
    Raises :class:`policy.observe.ObjectError` (one line naming file, object, field and value) for a file that
    is not a Kubernetes List (see :func:`policy.observe.load_snapshot_objects`) or holds an object of the wrong
    shape (:func:`policy.observe.snapshot_from_objects`). ``warn`` (optional) gets one
    line per inconsistency that does not stop the read (:func:`policy.observe.snapshot_warnings`: pods bound
    to nodes not in the snapshot, duplicate pods), each prefixed with the path."""
    snap = load_snapshot(path, graph, taken_at_s)
    if warn is not None:
        for w in snapshot_warnings(snap):
            warn(f"{path}: {w}")
    if graph is None:
        snap = snap.with_graph(graph_from_annotations(snap))
    return snap
