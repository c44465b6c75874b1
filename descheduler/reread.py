"""The targeted re-read before an eviction: only what the decision depends on, fresh.

A cycle observes the cluster once (a LIST per kind, or the watch cache in interval mode) and plans on that.
Before each eviction the loop re-reads, through a :class:`ClusterReader`, exactly what the guards decide on:

- the pod (GET): gone → ``not_found``; re-created (another UID) or moved since planning → ``skipped``;
- its PodDisruptionBudgets (GET each, found by selector among the observed ones) and the pods each one covers
  (for the healthy count of :func:`descheduler.guards.pdb_budget`): a label-selected LIST in the namespace from
  the API server, or the watch cache's copy in interval mode;
- its controller owner (GET the ReplicaSet / StatefulSet): gone or another UID → not evicted (nothing would
  re-create the pod as planned);
- the target node (GET): gone, cordoned, not Ready or tainted against the pod → not evicted.

Implementations: :class:`SnapshotReader` answers from a snapshot (``--snapshot`` files, where nothing can change,
and the simulator, which passes a callable so each move sees the simulated cluster as it is now);
``descheduler.kube.KubeReader`` asks the API server. A reader raises on a failed read (the loop then stops the
cycle: no eviction without a fresh view); a missing object is ``None``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from policy.state import ClusterSnapshot, NodeInfo, OwnerRef, PodDisruptionBudgetInfo, PodInfo

__all__ = ["OwnerInfo", "ClusterReader", "SnapshotReader", "READABLE_OWNER_KINDS"]

#: Controller kinds whose object the descheduler re-reads before evicting one of their pods (RBAC: ``get`` on
#: apps ``replicasets`` and ``statefulsets``). A pod owned by another kind is not evicted (fail closed).
READABLE_OWNER_KINDS = ("ReplicaSet", "StatefulSet")


@dataclass(frozen=True, slots=True)
class OwnerInfo:
    """A pod's controller as re-read: ``kind``, ``name``, ``uid``, ``replicas`` (``spec.replicas``, ``None``
    when absent), ``terminating`` (``metadata.deletionTimestamp`` set) and its own controller owner
    (``owner``: e.g. the Deployment of a ReplicaSet)."""

    kind: str
    name: str
    uid: str = ""
    replicas: int | None = None
    terminating: bool = False
    owner: OwnerRef | None = None


@runtime_checkable
class ClusterReader(Protocol):
    """The slice of the cluster the guards re-read before an eviction (see the module docstring). Every method
    raises when the read fails, and returns ``None`` (or ``[]``) when the object does not exist."""

    def read_pod(self, namespace: str, name: str) -> PodInfo | None: ...

    def read_pdb(self, namespace: str, name: str) -> PodDisruptionBudgetInfo | None: ...

    def pods_covered(self, pdb: PodDisruptionBudgetInfo) -> list[PodInfo]: ...

    def read_owner(self, namespace: str, owner: OwnerRef) -> OwnerInfo | None: ...

    def read_node(self, name: str) -> NodeInfo | None: ...


class SnapshotReader:
    """A :class:`ClusterReader` answering from a snapshot: ``source`` is either a fixed
    :class:`~policy.state.ClusterSnapshot` (nothing changes: a file) or a callable returning the current one
    (the simulator: called at most once per pod re-read, and the same view answers the rest of that move's
    reads). Owners are the snapshot's pods' own references (no ReplicaSet objects in a snapshot): an owner is
    known while some pod of the snapshot names it (with ``replicas`` from the Deployment / StatefulSet of the same
    service when there is one). ``reads`` counts calls by method."""

    def __init__(self, source: ClusterSnapshot | Callable[[], ClusterSnapshot]):
        self._source = source
        self._snap: ClusterSnapshot | None = source if isinstance(source, ClusterSnapshot) else None
        self._indexed: ClusterSnapshot | None = None
        self._pods: dict[str, PodInfo] = {}
        self._owners: dict[tuple[str, str, str], OwnerRef] = {}
        self.reads: dict[str, int] = {}

    def _count(self, what: str) -> None:
        self.reads[what] = self.reads.get(what, 0) + 1

    def _view(self, refresh: bool = False) -> ClusterSnapshot:
        if refresh and not isinstance(self._source, ClusterSnapshot):
            self._snap = self._source()
        if self._snap is None:
            self._snap = self._source()  # type: ignore[operator]
        assert self._snap is not None  # set above
        if self._indexed is not self._snap:
            self._pods = {p.key: p for p in self._snap.pods}
            self._owners = {}
            for p in self._snap.pods:
                if p.owner is not None:
                    self._owners[(p.namespace, p.owner.kind, p.owner.name)] = p.owner
            self._indexed = self._snap
        return self._snap  # type: ignore[return-value]  # set above

    def read_pod(self, namespace: str, name: str) -> PodInfo | None:
        self._count("pod")
        self._view(refresh=True)
        return self._pods.get(f"{namespace}/{name}")

    def read_pdb(self, namespace: str, name: str) -> PodDisruptionBudgetInfo | None:
        self._count("pdb")
        return next((b for b in self._view().pdbs if b.namespace == namespace and b.name == name), None)

    def pods_covered(self, pdb: PodDisruptionBudgetInfo) -> list[PodInfo]:
        self._count("pods_covered")
        return [p for p in self._view().pods if pdb.covers(p)]

    def read_owner(self, namespace: str, owner: OwnerRef) -> OwnerInfo | None:
        self._count("owner")
        snap = self._view()
        ref = self._owners.get((namespace, owner.kind, owner.name))
        if ref is None:
            return None
        replicas = None
        service = next((p.service for p in snap.pods if p.owner == ref), None)
        for w in snap.workloads:
            if w.namespace == namespace and w.service == service:
                replicas = w.replicas
                break
        return OwnerInfo(ref.kind, ref.name, ref.uid, replicas)

    def read_node(self, name: str) -> NodeInfo | None:
        self._count("node")
        return next((n for n in self._view().nodes if n.name == name), None)
