"""scheduler-plugins NetworkAware: the NetworkOverhead filter and score plugin, with an AppGroup built from
the call graph and zone/region costs from a NetworkTopology.

Source: kubernetes-sigs/scheduler-plugins (commit 903da7df82cb8794dda8f2d510ba1156111662dd)
pkg/networkaware/networkoverhead/networkoverhead.go (PreFilter, Filter, Score, NormalizeScore,
getAccumulatedCost, checkMaxNetworkCostRequirements), pkg/networkaware/util/util.go, and
pkg/networkaware/README.md (the recommended profile: NetworkOverhead weight 5, BalancedAllocation 1,
NodeResourcesFit disabled, TopologicalSort queue sort).

The AppGroup CR lists each workload's dependencies (here: the services it calls, self-calls dropped) with a
``maxNetworkCost``; pods carry the AppGroup and workload-selector labels (here: every pod of the app
belongs to the app's AppGroup and its workload selector is its service). The NetworkTopology CR gives costs
between zones (same region) and between regions; the plugin's constants are 0 for the same host, 1 for the
same zone and 100 (MaxCost) when a cost is unknown or the other node has neither zone nor region label.

Not modelled: the TopologicalSort queue-sort plugin (the simulator schedules pods in creation order) and
``minBandwidth`` (the upstream plugin does not check it either).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from policy.index import ClusterIndex
from policy.observe import parse_pod
from policy.state import NodeInfo, PodInfo, ServiceGraph

from .kube_default import MAX_NODE_SCORE

__all__ = [
    "MAX_COST",
    "SAME_HOSTNAME",
    "SAME_ZONE",
    "DEFAULT_MAX_NETWORK_COST",
    "Dependency",
    "AppGroup",
    "NetworkTopology",
    "NetworkOverhead",
    "InTreeFilterExtender",
]

MAX_COST = 100
SAME_HOSTNAME = 0
SAME_ZONE = 1
#: maxNetworkCost given to every dependency of an AppGroup built from a call graph (the upstream
#: examples use 15-30; any cross-zone cost of our topologies is below it, cross-region above).
DEFAULT_MAX_NETWORK_COST = 30


@dataclass(frozen=True)
class Dependency:
    """An AppGroup dependency: the workload (selector) called, and the highest network cost allowed."""

    workload: str
    max_network_cost: int = DEFAULT_MAX_NETWORK_COST


@dataclass(frozen=True)
class AppGroup:
    """An AppGroup CR: ``workloads`` maps each workload selector to its dependencies."""

    name: str
    workloads: Mapping[str, tuple[Dependency, ...]]

    @cached_property
    def members(self) -> frozenset[str]:
        """Every workload of the group: the listed ones and those they depend on."""
        return frozenset(self.workloads) | {d.workload for deps in self.workloads.values() for d in deps}

    @staticmethod
    def from_graph(
        graph: ServiceGraph, name: str = "app", max_network_cost: int = DEFAULT_MAX_NETWORK_COST
    ) -> AppGroup:
        """One workload per service; its dependencies are its callees (self-calls dropped)."""
        deps: dict[str, list[Dependency]] = {s: [] for s in graph.services}
        for e in graph.edges:
            if e.caller != e.callee:
                deps[e.caller].append(Dependency(e.callee, max_network_cost))
        return AppGroup(name, {s: tuple(d) for s, d in deps.items()})


@dataclass(frozen=True)
class NetworkTopology:
    """A NetworkTopology CR's manual ("UserDefined") weights: ``zone_costs[(origin, destination)]`` and
    ``region_costs[(origin, destination)]`` (unitless network costs, 0..100)."""

    zone_costs: Mapping[tuple[str, str], int] = field(default_factory=dict)
    region_costs: Mapping[tuple[str, str], int] = field(default_factory=dict)

    @staticmethod
    def uniform(
        zones: Iterable[str], zone_cost: int, regions: Iterable[str] = (), region_cost: int = 50
    ) -> NetworkTopology:
        """Every pair of distinct zones costs ``zone_cost``, every pair of distinct regions ``region_cost``."""
        zs, rs = sorted(set(zones)), sorted(set(regions))
        return NetworkTopology(
            {(a, b): zone_cost for a in zs for b in zs if a != b},
            {(a, b): region_cost for a in rs for b in rs if a != b},
        )


# how checkMaxNetworkCostRequirements treats a dependency pod on node b for a candidate node a
_ALWAYS_OK, _CHECK_COST, _ALWAYS_VIOLATED, _NOT_COUNTED = 0, 1, 2, 3


def _cost(a: NodeInfo, b: NodeInfo, topo: NetworkTopology) -> tuple[int, int]:
    """``(cost, kind)``: the cost a dependency placed on ``b`` adds when the pod goes to ``a``
    (getAccumulatedCost) and how the filter counts it (checkMaxNetworkCostRequirements)."""
    if a.name == b.name:
        return SAME_HOSTNAME, _ALWAYS_OK
    ra, za, rb, zb = a.region, a.zone, b.region, b.zone
    if rb == "" and zb == "":
        return MAX_COST, _ALWAYS_VIOLATED
    if ra == rb:
        if za == zb:
            return SAME_ZONE, _ALWAYS_OK
        c = topo.zone_costs.get((za, zb)) if za else None
    else:
        c = topo.region_costs.get((ra, rb)) if ra else None
    return (MAX_COST, _NOT_COUNTED) if c is None else (int(c), _CHECK_COST)


class _CostMatrix:
    """(N, N) costs between the nodes of an index and how the filter counts each pair, cached per node
    list."""

    def __init__(self) -> None:
        self._key: tuple | None = None
        self.cost = np.zeros((0, 0), dtype=np.int64)
        self.kind = np.zeros((0, 0), dtype=np.int64)

    def get(self, nodes: Sequence[NodeInfo], topo: NetworkTopology) -> tuple[np.ndarray, np.ndarray]:
        key = tuple((n.name, n.zone, n.region) for n in nodes)
        if key != self._key:
            n = len(nodes)
            cost = np.zeros((n, n), dtype=np.int64)
            kind = np.zeros((n, n), dtype=np.int64)
            for i, a in enumerate(nodes):
                for j, b in enumerate(nodes):
                    cost[i, j], kind[i, j] = _cost(a, b, topo)
            self._key, self.cost, self.kind = key, cost, kind
        return self.cost, self.kind


def _scheduled_counts(index: ClusterIndex, deps: Sequence[Dependency]) -> list[tuple[Dependency, np.ndarray]]:
    """Per dependency, the (N,) number of the AppGroup's scheduled pods of that workload per node."""
    out = []
    for d in deps:
        arr = index.service_nodes.get(d.workload)
        if arr is not None and arr.sum() > 0:
            out.append((d, arr))
    return out


@dataclass
class NetworkOverhead:
    """The NetworkOverhead score plugin (weight 5 in the upstream example profile).

    Score (PreFilter's finalCostMap): for each candidate node, the sum over the AppGroup's scheduled pods of
    each of the pod's dependencies of the network cost from the candidate to that pod's node
    (0 same host, 1 same zone, the zone or region cost, else 100). NormalizeScore: ``100 - int(100 × (c -
    min) / (max - min))`` (lower cost scores higher; all equal → ``100 - (c - min)`` = 100; all 0 → 0).
    A pod of no AppGroup workload, without dependencies, or whose AppGroup has no scheduled pod scores 0
    everywhere (scoreEqually).
    """

    app_group: AppGroup
    topology: NetworkTopology = field(default_factory=NetworkTopology)
    name: str = "NetworkOverhead"
    weight: int = 5
    _matrix: _CostMatrix = field(default_factory=_CostMatrix, repr=False)

    def costs(self, pod: PodInfo, candidates: Sequence[str], index: ClusterIndex) -> np.ndarray | None:
        """(len(candidates),) accumulated costs, or None when the pod scores equally everywhere."""
        deps = self.app_group.workloads.get(pod.service)
        if not deps:
            return None
        if not any(index.service_total.get(s, 0) for s in self.app_group.members):
            return None
        counts = _scheduled_counts(index, deps)
        if not counts:
            # pods of the AppGroup are scheduled, but none of this pod's dependencies: every cost is 0
            return np.zeros(len(candidates), dtype=np.int64)
        cost, _kind = self._matrix.get(index.snapshot.nodes, self.topology)
        pos = index.positions(candidates)
        total = np.zeros(len(index.node_names), dtype=np.float64)
        for _d, arr in counts:
            total += cost @ arr
        out = np.zeros(len(candidates), dtype=np.int64)
        ok = pos >= 0
        out[ok] = np.rint(total[pos[ok]]).astype(np.int64)
        return out

    def score(self, pod: PodInfo, candidates: Sequence[str], index: ClusterIndex) -> np.ndarray:
        c = self.costs(pod, candidates, index)
        if c is None or len(c) == 0:
            return np.zeros(len(candidates), dtype=np.int64)
        lo, hi = int(c.min()), int(c.max())
        if lo == 0 and hi == 0:
            return c
        if hi != lo:
            return np.array(
                [MAX_NODE_SCORE - int(MAX_NODE_SCORE * (v - lo) / (hi - lo)) for v in c.tolist()], dtype=np.int64
            )
        return MAX_NODE_SCORE - (c - lo)

    def satisfied_violated(self, pod: PodInfo, index: ClusterIndex) -> tuple[np.ndarray, np.ndarray] | None:
        """(N,) satisfied and violated dependency counts per node of the index (checkMaxNetworkCost-
        Requirements), or None when the filter passes every node (scoreEqually)."""
        deps = self.app_group.workloads.get(pod.service)
        if not deps or not any(index.service_total.get(s, 0) for s in self.app_group.members):
            return None
        cost, kind = self._matrix.get(index.snapshot.nodes, self.topology)
        n = len(index.node_names)
        sat = np.zeros(n, dtype=np.int64)
        vio = np.zeros(n, dtype=np.int64)
        for d, arr in _scheduled_counts(index, deps):
            checked = kind == _CHECK_COST
            ok = (kind == _ALWAYS_OK) | (checked & (cost <= d.max_network_cost))
            bad = (kind == _ALWAYS_VIOLATED) | (checked & (cost > d.max_network_cost))
            sat += (ok @ arr).astype(np.int64)
            vio += (bad @ arr).astype(np.int64)
        return sat, vio

    def filter(self, pod: PodInfo, candidates: Sequence[str], index: ClusterIndex) -> dict[str, str]:
        """Filter: a node is unschedulable when it violates more dependencies than it satisfies."""
        sv = self.satisfied_violated(pod, index)
        if sv is None:
            return {}
        sat, vio = sv
        out = {}
        for c in candidates:
            i = index.node_pos.get(c)
            if i is not None and vio[i] > sat[i]:
                out[c] = (
                    f"Node {c} does not meet several network requirements from Workload dependencies: "
                    f"Satisfied: {sat[i]} Violated: {vio[i]}"
                )
        return out


@dataclass
class InTreeFilterExtender:
    """Runs a plugin's ``filter(pod, candidates, index)`` at kube-scheduler's extender filter step, for
    in-tree filter plugins the simulator's kube-scheduler model has no slot for (same semantics: it sees
    the nodes that passed the other filters). ``view()`` returns the current :class:`ClusterIndex` (kept
    by the stack's ``on_change``)."""

    plugin: Any
    view: Callable[[], ClusterIndex | None]
    weight: int = 0
    ignorable: bool = False
    has_filter: bool = True
    has_prioritize: bool = False

    def filter(self, pod_obj: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]]):

        names = [n["metadata"]["name"] for n in nodes]
        index = self.view()
        if index is None:
            return names, {}
        failed = self.plugin.filter(parse_pod(pod_obj), names, index)
        return [n for n in names if n not in failed], failed

    def prioritize(self, pod_obj, nodes):  # pragma: no cover - has_prioritize is False
        raise NotImplementedError
