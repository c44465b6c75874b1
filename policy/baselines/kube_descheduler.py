"""kubernetes-sigs/descheduler's LowNodeUtilization and RemoveDuplicates balance plugins, with the
DefaultEvictor's filters, run against a :class:`~policy.state.ClusterSnapshot` and an ``evict`` callback.

Sources: kubernetes-sigs/descheduler (commit 7d2b28bf2b6a12810317936d909af0270ff38fa3)
pkg/framework/plugins/nodeutilization/{lownodeutilization.go, nodeutilization.go, usageclients.go,
classifier/classifier.go}, pkg/framework/plugins/removeduplicates/removeduplicates.go,
pkg/framework/plugins/defaultevictor/{defaultevictor.go, defaults.go}, pkg/descheduler/pod/pods.go
(SortPodsBasedOnPriorityLowToHigh) and README.md (the example thresholds: cpu/memory/pods 20 %,
targetThresholds 50 %; the plugins have no default thresholds).

Usage is the sum of the requests of the pods bound to a node (the default "requested" usage client):
CPU in millicores, memory in bytes and the pod count, as a percentage of the node's allocatable.
Differences, all documented upstream behaviour we cannot observe in a snapshot: container images are not
in :class:`~policy.state.PodInfo`, so RemoveDuplicates treats the pods of one controller as having the same
images (true for the pods of one ReplicaSet); ``nodeFit`` is off (the DefaultEvictor default).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from policy.state import ClusterSnapshot, NodeInfo, PodInfo

__all__ = [
    "SYSTEM_CRITICAL_PRIORITY",
    "RESOURCES",
    "EvictFn",
    "DefaultEvictor",
    "sort_pods_priority_low_to_high",
    "LowNodeUtilization",
    "RemoveDuplicates",
]

#: scheduling.SystemCriticalPriority: pods at or above it are protected by the DefaultEvictor.
SYSTEM_CRITICAL_PRIORITY = 2_000_000_000
RESOURCES = ("cpu", "memory", "pods")

#: ``evict(pod, reason) -> True`` when the eviction went through (False: refused, e.g. by a PDB).
EvictFn = Callable[[PodInfo, str], bool]


@dataclass(frozen=True)
class DefaultEvictor:
    """The DefaultEvictor plugin's Filter with its defaults: mirror/static pods, terminating pods, pods
    without an owner (bare pods), DaemonSet pods, system-critical pods (priority >= 2e9 or the
    system-cluster-critical / system-node-critical classes) and pods with local storage (emptyDir,
    hostPath) are not evictable."""

    evict_local_storage_pods: bool = False
    evict_system_critical_pods: bool = False
    evict_daemonset_pods: bool = False

    def filter(self, pod: PodInfo) -> bool:
        if pod.is_mirror or pod.terminating or pod.owner is None:
            return False
        if pod.is_daemonset and not self.evict_daemonset_pods:
            return False
        critical = pod.priority >= SYSTEM_CRITICAL_PRIORITY or pod.priority_class_name in (
            "system-cluster-critical",
            "system-node-critical",
        )
        if critical and not self.evict_system_critical_pods:
            return False
        if pod.local_storage and not self.evict_local_storage_pods:
            return False
        return True


def _qos_rank(pod: PodInfo) -> int:
    """0 BestEffort, 1 Burstable, 2 Guaranteed (from the pod's summed requests and limits)."""
    r, lim = pod.requests, pod.limits
    if r.cpu_m == 0 and r.memory_bytes == 0 and lim.cpu_m == 0 and lim.memory_bytes == 0:
        return 0
    if lim.cpu_m > 0 and lim.memory_bytes > 0 and r.cpu_m in (0, lim.cpu_m) and r.memory_bytes in (0, lim.memory_bytes):
        return 2
    return 1


def sort_pods_priority_low_to_high(pods: Sequence[PodInfo]) -> list[PodInfo]:
    """SortPodsBasedOnPriorityLowToHigh: lower priority first; equal priority → BestEffort, then
    Burstable, then Guaranteed (stable for ties)."""
    return sorted(pods, key=lambda p: (p.priority, _qos_rank(p)))


def _pod_usage(p: PodInfo) -> dict[str, float]:
    return {"cpu": float(p.requests.cpu_m), "memory": float(p.requests.memory_bytes), "pods": 1.0}


def _capacity(n: NodeInfo) -> dict[str, float]:
    return {
        "cpu": float(n.allocatable.cpu_m),
        "memory": float(n.allocatable.memory_bytes),
        "pods": float(n.allocatable_pods),
    }


def _tolerates_any(pod: PodInfo, destination_taints: Mapping[str, Sequence]) -> bool:
    """utils.PodToleratesTaints: the pod tolerates the NoSchedule taints of at least one destination."""
    for taints in destination_taints.values():
        if all(t.effect != "NoSchedule" or any(tol.tolerates(t) for tol in pod.tolerations) for t in taints):
            return True
    return False


@dataclass
class LowNodeUtilization:
    """The LowNodeUtilization balance plugin (static thresholds).

    A node is *underutilized* when every resource named in ``thresholds`` is at or below it (and the node is
    schedulable); else *overutilized* when any resource named in ``target_thresholds`` is above it. Nothing
    happens unless there are underutilized nodes (more than ``number_of_nodes``, not all nodes) and
    overutilized ones. Overutilized nodes are processed in decreasing order of usage (CPU millicores +
    memory bytes + pods, as upstream sums them); their evictable pods lowest priority first; each eviction
    moves the pod's requests out of the node and out of the underutilized nodes' spare room up to the
    target (Σ target × capacity − usage), and eviction stops on a node once no resource is above target or
    any spare room is used up.
    """

    thresholds: Mapping[str, float] = field(default_factory=lambda: {"cpu": 20, "memory": 20, "pods": 20})
    target_thresholds: Mapping[str, float] = field(default_factory=lambda: {"cpu": 50, "memory": 50, "pods": 50})
    number_of_nodes: int = 0
    evictor: DefaultEvictor = field(default_factory=DefaultEvictor)
    max_pods_per_node: int | None = None
    name: str = "LowNodeUtilization"

    def __post_init__(self) -> None:
        problems = []
        for label, th in (("thresholds", self.thresholds), ("targetThresholds", self.target_thresholds)):
            for k, v in th.items():
                if k not in RESOURCES:
                    problems.append(f"{label}.{k}: unknown resource (cpu, memory, pods)")
                elif not 0 <= v <= 100:
                    problems.append(f"{label}.{k}: {v} not in [0, 100]")
        if set(self.thresholds) != set(self.target_thresholds):
            problems.append("thresholds and targetThresholds configured different resources")
        for k, v in self.thresholds.items():
            if k in self.target_thresholds and v > self.target_thresholds[k]:
                problems.append(f"thresholds.{k}: {v} is greater than targetThresholds' {self.target_thresholds[k]}")
        if problems:
            raise ValueError("LowNodeUtilization: " + "; ".join(problems))

    def usage(self, snapshot: ClusterSnapshot) -> dict[str, dict[str, float]]:
        """Requested usage per node (cpu m, memory bytes, pods)."""
        use = {n.name: dict.fromkeys(RESOURCES, 0.0) for n in snapshot.nodes}
        for p in snapshot.pods:
            if p.node_name in use and not p.terminating:
                for k, v in _pod_usage(p).items():
                    use[p.node_name][k] += v
        return use

    def classify(self, snapshot: ClusterSnapshot) -> tuple[list[str], list[str]]:
        """(underutilized, overutilized) node names, in snapshot order."""
        use = self.usage(snapshot)
        low, high = [], []
        for n in snapshot.nodes:
            cap = _capacity(n)
            pct = {k: (100.0 * use[n.name][k] / cap[k] if cap[k] > 0 else 0.0) for k in RESOURCES}
            if not n.unschedulable and all(pct[k] <= v for k, v in self.thresholds.items()):
                low.append(n.name)
            elif any(pct[k] > v for k, v in self.target_thresholds.items()):
                high.append(n.name)
        return low, high

    def balance(self, snapshot: ClusterSnapshot, evict: EvictFn) -> list[str]:
        """Run one Balance pass; returns the keys of the pods evicted (in order)."""
        nodes = {n.name: n for n in snapshot.nodes}
        use = self.usage(snapshot)
        low, high = self.classify(snapshot)
        if not low or len(low) <= self.number_of_nodes or len(low) == len(nodes) or not high:
            return []

        def capped(n: NodeInfo) -> dict[str, float]:
            cap = _capacity(n)
            return {
                k: (float(int(self.target_thresholds[k] * 0.01 * cap[k])) if k in self.target_thresholds else cap[k])
                for k in RESOURCES
            }

        available = dict.fromkeys(RESOURCES, 0.0)
        for name in low:
            c = capped(nodes[name])
            for k in RESOURCES:
                available[k] += c[k] - use[name][k]
        taints = {name: nodes[name].taints for name in low}

        def keep_going(name: str) -> bool:
            c = capped(nodes[name])
            if not any(use[name][k] > c[k] for k in RESOURCES):
                return False
            return all(available[k] > 0 for k in RESOURCES)

        high.sort(key=lambda name: -(use[name]["cpu"] + use[name]["memory"] + use[name]["pods"]))
        evicted: list[str] = []
        for name in high:
            pods = [p for p in snapshot.pods if p.node_name == name and not p.terminating]
            removable = sort_pods_priority_low_to_high([p for p in pods if self.evictor.filter(p)])
            if not removable or not keep_going(name):
                continue
            count = 0
            for p in removable:
                if self.max_pods_per_node is not None and count >= self.max_pods_per_node:
                    break
                if not _tolerates_any(p, taints):
                    continue
                if not evict(p, self.name):
                    continue
                count += 1
                evicted.append(p.key)
                for k, v in _pod_usage(p).items():
                    use[name][k] -= v
                    available[k] -= v
                if not keep_going(name):
                    break
        return evicted


def _node_selector_ok(pod: PodInfo, n: NodeInfo) -> bool:
    return all(n.labels.get(k) == v for k, v in pod.node_selector.items())


def _taints_ok(pod: PodInfo, n: NodeInfo) -> bool:
    return all(
        t.effect not in ("NoSchedule", "NoExecute") or any(tol.tolerates(t) for tol in pod.tolerations)
        for t in n.taints
    )


@dataclass
class RemoveDuplicates:
    """The RemoveDuplicates balance plugin: pods of the same controller (same namespace, owner kind and
    name; images assumed equal) on the same node are duplicates. Per owner, with ``k`` evictable pods over
    ``T`` feasible target nodes (nodes whose taints and nodeSelector at least one of the duplicates
    accepts; at least 2), every node keeps at most ``ceil(k / T)`` of them and the rest are evicted."""

    evictor: DefaultEvictor = field(default_factory=DefaultEvictor)
    exclude_owner_kinds: tuple[str, ...] = ()
    name: str = "RemoveDuplicates"

    def duplicates(self, snapshot: ClusterSnapshot) -> tuple[dict[tuple, dict[str, list[PodInfo]]], dict[tuple, int]]:
        """(owner → node → duplicate pods beyond the first, owner → evictable pod count)."""
        dups: dict[tuple, dict[str, list[PodInfo]]] = {}
        occurrences: dict[tuple, int] = {}
        for n in snapshot.nodes:
            seen: set[tuple] = set()
            for p in snapshot.pods:
                if p.node_name != n.name or not self.evictor.filter(p) or p.owner is None:
                    continue
                if p.owner.kind in self.exclude_owner_kinds:
                    continue
                key = (p.namespace, p.owner.kind, p.owner.name)
                occurrences[key] = occurrences.get(key, 0) + 1
                if key in seen:
                    dups.setdefault(key, {}).setdefault(n.name, []).append(p)
                else:
                    seen.add(key)
        return dups, occurrences

    def balance(self, snapshot: ClusterSnapshot, evict: EvictFn) -> list[str]:
        """Run one Balance pass; returns the keys of the pods evicted."""
        dups, occurrences = self.duplicates(snapshot)
        evicted: list[str] = []
        for key, per_node in dups.items():
            pods = [p for ps in per_node.values() for p in ps]
            targets: set[str] = set()
            for p in pods:
                ok = [n.name for n in snapshot.nodes if _taints_ok(p, n) and _node_selector_ok(p, n)]
                if len(ok) > 1:
                    targets.update(ok)
            if len(targets) < 2:
                continue
            upper_avg = math.ceil(occurrences[key] / len(targets))
            for _node, ps in per_node.items():
                if len(ps) + 1 > upper_avg:
                    for p in ps[upper_avg - 1 :]:
                        if evict(p, self.name):
                            evicted.append(p.key)
        return evicted
