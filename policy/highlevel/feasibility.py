"""Where would kube-scheduler put the replacement of an evicted pod? :class:`SchedulerModel` answers for the
descheduler (its feasibility guard, before any eviction), so that a move kube-scheduler would undo is never
made: the replacement is a new pod of the same template, scheduled by the same profile, on the cluster as it
is once the pod is gone.

It applies kube-scheduler's default filters and scores (k8s.io/kubernetes v1.36.3 pkg/scheduler/framework/
plugins; the default profile of pkg/scheduler/apis/config/v1/default_plugins.go), from the pod's own spec
(``PodInfo.terms``, :func:`policy.observe.parse_pod_terms`):

- filters: NodeUnschedulable, TaintToleration, NodeAffinity (``nodeSelector`` and required terms),
  NodeResourcesFit (cpu, memory, pods; :func:`policy.lowlevel.node_admits`,
  :func:`policy.lowlevel.resource_fit_failures`),
  InterPodAffinity (the pod's required affinity and anti-affinity, and the existing pods' required
  anti-affinity against it; interpodaffinity/filtering.go) and PodTopologySpread with ``DoNotSchedule``
  (podtopologyspread/filtering.go: skew = matching pods in the node's domain + the pod itself − the global
  minimum over the eligible domains, where fewer domains than ``minDomains`` make the minimum 0; nodes missing
  a constraint's key are not eligible);
- scores, on the nodes that pass: TaintToleration (3), NodeAffinity (2), NodeResourcesFit LeastAllocated (1),
  PodTopologySpread (2: ``ScheduleAnyway`` constraints, or the system defaults by hostname and zone for a pod
  with none), InterPodAffinity (2), NodeResourcesBalancedAllocation (1), plus our extender's score × weight × 10
  for the profiles that call it, each normalised as the plugin does (see :mod:`policy.baselines.kube_default`,
  the simulator's copy of the same formulas).

:meth:`SchedulerModel.undone` says why a move would not stick: the target fails a filter ("the scheduler would
not put it there"), or the pod's current node passes every filter and scores at least as high as the target
("it would come back"). Not modelled: ``namespaceSelector`` of affinity terms, ImageLocality, volume and port
filters, preemption, and kube-scheduler's sampling of nodes on large clusters (``percentageOfNodesToScore``:
the model scores every feasible node); NodeResourcesFit scores actual requests (the scheduler counts 100 m /
200 MiB for a container without requests). Loop detection (``descheduler.guards.detect_loops``) catches what
this misses.

Cost per call: O(N) for the filters over the nodes (numpy and one pass of Python over the nodes), O(matching pods)
per spread constraint or affinity term through a label index built once per cycle (O(P)).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from policy.index import ClusterIndex
from policy.lowlevel import MAX_EXTENDER_PRIORITY, PlacementPolicy, node_admits
from policy.state import (
    LABEL_HOSTNAME,
    LABEL_ZONE,
    AffinityTerm,
    LabelSelector,
    NodeInfo,
    PodInfo,
    PodTerms,
    SpreadConstraint,
    frozen_map,
    node_matches_required,
    selector_from_labels,
)

__all__ = ["SchedulerModel", "DEFAULT_PLUGIN_WEIGHTS", "SYSTEM_DEFAULT_SPREAD"]

MAX_NODE_SCORE = 100
#: default_plugins.go: the default profile's score plugins and weights.
DEFAULT_PLUGIN_WEIGHTS = {
    "TaintToleration": 3,
    "NodeAffinity": 2,
    "NodeResourcesFit": 1,
    "PodTopologySpread": 2,
    "InterPodAffinity": 2,
    "NodeResourcesBalancedAllocation": 1,
}
#: podtopologyspread/plugin.go systemDefaultConstraints.
SYSTEM_DEFAULT_SPREAD = (
    SpreadConstraint(3, LABEL_HOSTNAME, "ScheduleAnyway", LabelSelector()),
    SpreadConstraint(5, LABEL_ZONE, "ScheduleAnyway", LabelSelector()),
)
_DEFAULT_SELECTOR_OWNERS = ("ReplicaSet", "StatefulSet", "ReplicationController")


@dataclass
class _Labels:
    """Pods by namespace and label (built once per observation): ``(ns, key, value) -> pod keys``."""

    by_ns: dict[str, list[str]] = field(default_factory=dict)
    postings: dict[tuple[str, str, str], set[str]] = field(default_factory=dict)
    with_terms: list[str] = field(default_factory=list)

    @staticmethod
    def of(pods: Iterable[PodInfo]) -> _Labels:
        ix = _Labels()
        for p in pods:
            ix.by_ns.setdefault(p.namespace, []).append(p.key)
            for k, v in p.labels.items():
                ix.postings.setdefault((p.namespace, k, v), set()).add(p.key)
            t = p.terms
            if t.required_anti_affinity or t.required_affinity or t.preferred_affinity or t.preferred_anti_affinity:
                ix.with_terms.append(p.key)
        return ix

    def matching(self, namespaces: Iterable[str], selector: LabelSelector, pods: Mapping[str, PodInfo]) -> list[str]:
        out: list[str] = []
        for ns in namespaces:
            if selector.match_labels:
                sets = [self.postings.get((ns, k, v), set()) for k, v in selector.match_labels.items()]
                keys = set.intersection(*sets) if sets else set()
            else:
                keys = set(self.by_ns.get(ns, ()))
            for k in sorted(keys):
                p = pods.get(k)
                if p is not None and selector.matches(p.labels):
                    out.append(k)
        return out


class SchedulerModel:
    """Predicts kube-scheduler for the descheduler (see the module docstring).

    ``placement``: our low-level policy, the extender's scorer; ``extender_weight``: its weight in the
    KubeSchedulerConfiguration (0: not counted); ``extender_schedulers``: the ``schedulerName`` values whose
    profile calls the extender."""

    def __init__(
        self,
        placement: PlacementPolicy | None = None,
        extender_weight: int = 2,
        extender_schedulers: frozenset[str] = frozenset({"hrl-scheduler"}),
    ):
        self.placement = placement
        self.extender_weight = int(extender_weight)
        self.extender_schedulers = frozenset(extender_schedulers)
        self._labels: tuple[object, _Labels] | None = None
        self._pods: tuple[object, dict[str, PodInfo]] | None = None
        self._memo: dict[tuple, object] = {}

    # ---- state per index ---------------------------------------------------------------------------------

    def _pods_of(self, index: ClusterIndex) -> dict[str, PodInfo]:
        snap = index.snapshot
        if self._pods is None or self._pods[0] is not snap.pods:
            self._pods = (snap.pods, {p.key: p for p in snap.pods})
        return self._pods[1]

    def _labels_of(self, index: ClusterIndex) -> _Labels:
        # labels and terms do not change when the planning view moves pods (PlanView.apply_move keeps the node
        # names tuple): one label index per observation
        key = index.node_names
        if self._labels is None or self._labels[0] is not key:
            self._labels = (key, _Labels.of(index.snapshot.pods))
        return self._labels[1]

    # ---- public ------------------------------------------------------------------------------------------

    def rejects(self, pod: PodInfo, to: str, index: ClusterIndex) -> str | None:
        """Why kube-scheduler's filters would refuse a new pod like ``pod`` on ``to`` (node admission, required node
        affinity, resources, topology spread with ``DoNotSchedule``, inter-pod (anti-)affinity), ``None`` when they
        pass or ``to`` is unknown. The check of a make-before-break move's new pod, whose node the extender steers
        (its scores do not decide): :meth:`undone` is the one of an evicted pod's replacement."""
        pods = self._pods_of(index)
        self._memo = {}
        t = index.node_pos.get(to)
        return None if t is None else self._filter(pod, t, index, pods)

    def undone(self, pod: PodInfo, to: str, index: ClusterIndex) -> str | None:
        """Why kube-scheduler would not leave the replacement of ``pod`` (bound to its current node) on ``to``:
        a filter that rejects ``to``, or the current node scoring at least as high; ``None`` when ``to`` wins
        over the current node."""
        pods = self._pods_of(index)
        self._memo = {}
        t = index.node_pos.get(to)
        if t is None:
            return None  # a node the index does not know: nothing to predict
        why = self._filter(pod, t, index, pods)
        if why is not None:
            return why
        src = index.node_pos.get(pod.node_name) if pod.node_name is not None else None
        if src is None or self._filter(pod, src, index, pods) is not None:
            return None  # it cannot come back
        feasible = [
            i for i in range(len(index.node_names)) if i in (src, t) or self._filter(pod, i, index, pods) is None
        ]
        totals = self.scores(pod, feasible, index)
        ts, tt = totals[feasible.index(src)], totals[feasible.index(t)]
        if ts >= tt:
            return (
                f"it would come back to {pod.node_name}: kube-scheduler's score there {ts} >= {tt} on {to} "
                f"(default plugins{' + extender' if self._with_extender(pod) else ''})"
            )
        return None

    def landing(self, pod: PodInfo, index: ClusterIndex) -> tuple[str | None, int, int]:
        """Where kube-scheduler would bind the replacement of ``pod`` (a new pod of its template, the pod itself
        taken off its node): ``(node, its weighted total, feasible nodes)``, the best total over the nodes that pass
        every filter (the first in node order on a tie; kube-scheduler picks one of the tied nodes at random);
        ``(None, 0, 0)`` when no node passes."""
        pods = self._pods_of(index)
        self._memo = {}
        feasible = [i for i in range(len(index.node_names)) if self._filter(pod, i, index, pods) is None]
        if not feasible:
            return None, 0, 0
        totals = self.scores(pod, feasible, index)
        k = int(np.argmax(totals))
        return index.node_names[feasible[k]], int(totals[k]), len(feasible)

    # ---- filters -----------------------------------------------------------------------------------------

    def _filter(self, pod: PodInfo, i: int, index: ClusterIndex, pods: Mapping[str, PodInfo]) -> str | None:
        node = index.snapshot.nodes[i]
        own = pod.node_name == node.name
        count = int(index.pod_count[i]) - (1 if own else 0)
        why = node_admits(pod, node, count)
        if why is not None:
            return why
        terms = pod.terms
        if terms.required_node_affinity and not node_matches_required(pod, terms, node.labels):
            return "node(s) didn't match Pod's node affinity/selector"
        free_cpu = index.alloc_cpu_m[i] - index.req_cpu_m[i] + (pod.requests.cpu_m if own else 0)
        free_mem = index.alloc_mem_bytes[i] - index.req_mem_bytes[i] + (pod.requests.memory_bytes if own else 0)
        if pod.requests.cpu_m > free_cpu:
            return "Insufficient cpu"
        if pod.requests.memory_bytes > free_mem:
            return "Insufficient memory"
        why = self._spread_filter(pod, node, index, pods)
        if why is not None:
            return why
        return self._affinity_filter(pod, node, index, pods)

    def _node_of(self, key: str, pod: PodInfo, index: ClusterIndex, pods: Mapping[str, PodInfo]) -> NodeInfo | None:
        if key == pod.key:
            return None  # the evicted pod is gone when its replacement is scheduled
        p = pods.get(key)
        if p is None or p.node_name is None or p.terminating:
            return None
        i = index.node_pos.get(p.node_name)
        return None if i is None else index.snapshot.nodes[i]

    def _constraint_selector(self, pod: PodInfo, c: SpreadConstraint) -> LabelSelector:
        extra = selector_from_labels(c.match_label_keys, pod.labels)
        if not extra:
            return c.selector
        return LabelSelector(frozen_map({**dict(c.selector.match_labels), **extra}), c.selector.match_expressions)

    def _eligible(self, pod: PodInfo, c: SpreadConstraint, node: NodeInfo, keys: tuple[str, ...]) -> bool:
        if any(k not in node.labels for k in keys):
            return False
        if c.node_affinity_policy != "Ignore" and not node_matches_required(pod, pod.terms, node.labels):
            return False
        if c.node_taints_policy == "Honor" and node_admits(pod, node) is not None and not node.unschedulable:
            return False
        return True

    def _domain_counts(
        self,
        pod: PodInfo,
        c: SpreadConstraint,
        keys: tuple[str, ...],
        index: ClusterIndex,
        pods: Mapping[str, PodInfo],
    ) -> dict[str, int]:
        memo_key = ("spread", pod.key, id(c), id(index))
        hit = self._memo.get(memo_key)
        if hit is not None:
            return hit  # type: ignore[return-value]
        counts: dict[str, int] = {}
        self._memo[memo_key] = counts
        for n in index.snapshot.nodes:
            if self._eligible(pod, c, n, keys):
                counts.setdefault(n.labels[c.topology_key], 0)
        sel = self._constraint_selector(pod, c)
        for k in self._labels_of(index).matching((pod.namespace,), sel, pods):
            n = self._node_of(k, pod, index, pods)
            if n is not None and n.labels.get(c.topology_key) in counts and self._eligible(pod, c, n, keys):
                counts[n.labels[c.topology_key]] += 1
        return counts

    def _spread_filter(
        self, pod: PodInfo, node: NodeInfo, index: ClusterIndex, pods: Mapping[str, PodInfo]
    ) -> str | None:
        hard = [c for c in pod.terms.spread_constraints if c.when_unsatisfiable == "DoNotSchedule"]
        if not hard:
            return None
        keys = tuple(c.topology_key for c in hard)
        for c in hard:
            if c.topology_key not in node.labels:
                return f"node(s) didn't match pod topology spread constraints (missing required label {c.topology_key})"
            counts = self._domain_counts(pod, c, keys, index, pods)
            if not counts:
                continue
            min_match = min(counts.values())
            if c.min_domains is not None and len(counts) < c.min_domains:
                min_match = 0
            self_match = 1 if self._constraint_selector(pod, c).matches(pod.labels) else 0
            here = counts.get(node.labels[c.topology_key], 0)
            skew = here + self_match - min_match
            if skew > c.max_skew:
                return (
                    f"node(s) didn't match pod topology spread constraints ({c.topology_key}="
                    f"{node.labels[c.topology_key]}: skew {skew} > maxSkew {c.max_skew})"
                )
        return None

    def _affinity_filter(
        self, pod: PodInfo, node: NodeInfo, index: ClusterIndex, pods: Mapping[str, PodInfo]
    ) -> str | None:
        # existing pods' required anti-affinity against the incoming pod: the (key, value) domains they forbid
        memo_key = ("anti", pod.key, id(index))
        blocked = self._memo.get(memo_key)
        if blocked is None:
            blocked = set()
            for k in self._labels_of(index).with_terms:
                e = pods.get(k)
                if e is None or not e.terms.required_anti_affinity:
                    continue
                en = self._node_of(k, pod, index, pods)
                if en is None:
                    continue
                for term in e.terms.required_anti_affinity:
                    tk = term.topology_key
                    if term.matches(pod, e.namespace) and tk in en.labels:
                        blocked.add((tk, en.labels[tk]))
            self._memo[memo_key] = blocked
        if any((k, v) in blocked for k, v in node.labels.items()):
            return "node(s) didn't satisfy existing pods anti-affinity rules"
        terms = pod.terms
        for term in terms.required_anti_affinity:
            if self._any_in_domain(pod, term, node, index, pods):
                return "node(s) didn't match pod anti-affinity rules"
        if terms.required_affinity:
            ok = all(self._any_in_domain(pod, t, node, index, pods) for t in terms.required_affinity)
            if not ok:
                # a pod matching its own terms may go anywhere when no pod matches them yet (filtering.go)
                anywhere = any(self._matches_any(pod, t, index, pods) for t in terms.required_affinity)
                self_match = all(t.matches(pod, pod.namespace) for t in terms.required_affinity)
                if (
                    anywhere
                    or not self_match
                    or any(t.topology_key not in node.labels for t in terms.required_affinity)
                ):
                    return "node(s) didn't match pod affinity rules"
        return None

    def _term_pods(self, pod: PodInfo, term: AffinityTerm, index: ClusterIndex, pods: Mapping[str, PodInfo]):
        namespaces = term.namespaces or (pod.namespace,)
        return self._labels_of(index).matching(namespaces, term.selector, pods)

    def _any_in_domain(
        self, pod: PodInfo, term: AffinityTerm, node: NodeInfo, index: ClusterIndex, pods: Mapping[str, PodInfo]
    ) -> bool:
        tk = term.topology_key
        if tk not in node.labels:
            return False
        memo_key = ("term", pod.key, id(term), id(index))
        values = self._memo.get(memo_key)
        if values is None:
            values = set()
            for k in self._term_pods(pod, term, index, pods):
                n = self._node_of(k, pod, index, pods)
                if n is not None and tk in n.labels:
                    values.add(n.labels[tk])
            self._memo[memo_key] = values
        return node.labels[tk] in values

    def _matches_any(self, pod: PodInfo, term: AffinityTerm, index: ClusterIndex, pods: Mapping[str, PodInfo]) -> bool:
        return any(self._node_of(k, pod, index, pods) is not None for k in self._term_pods(pod, term, index, pods))

    # ---- scores ------------------------------------------------------------------------------------------

    def _with_extender(self, pod: PodInfo) -> bool:
        return (
            self.placement is not None and self.extender_weight > 0 and pod.scheduler_name in self.extender_schedulers
        )

    def scores(self, pod: PodInfo, feasible: list[int], index: ClusterIndex) -> list[int]:
        """kube-scheduler's weighted total (in-tree plugins, + extender) of ``pod`` on each node position of
        ``feasible`` (the pod itself taken off its node)."""
        pods = self._pods_of(index)
        nodes = [index.snapshot.nodes[i] for i in feasible]
        pos = np.array(feasible, dtype=np.int64)
        own = np.array([n.name == pod.node_name for n in nodes])
        w = DEFAULT_PLUGIN_WEIGHTS
        total = np.zeros(len(feasible), dtype=np.int64)
        # NodeResourcesFit LeastAllocated (cpu, memory; weights 1, 1)
        a_cpu, a_mem = index.alloc_cpu_m[pos], index.alloc_mem_bytes[pos]
        r_cpu = index.req_cpu_m[pos] - own * pod.requests.cpu_m + pod.requests.cpu_m
        r_mem = index.req_mem_bytes[pos] - own * pod.requests.memory_bytes + pod.requests.memory_bytes
        fit = (_least(r_cpu, a_cpu) + _least(r_mem, a_mem)) // 2
        total += w["NodeResourcesFit"] * fit
        # NodeResourcesBalancedAllocation
        if pod.requests.cpu_m or pod.requests.memory_bytes:
            base_cpu = index.req_cpu_m[pos] - own * pod.requests.cpu_m
            base_mem = index.req_mem_bytes[pos] - own * pod.requests.memory_bytes
            with_pod = _balanced(base_cpu + pod.requests.cpu_m, base_mem + pod.requests.memory_bytes, a_cpu, a_mem)
            without = _balanced(base_cpu, base_mem, a_cpu, a_mem)
            total += w["NodeResourcesBalancedAllocation"] * (
                MAX_NODE_SCORE // 2 + (MAX_NODE_SCORE // 2 + with_pod - without) // 2
            )
        # TaintToleration: fewer untolerated PreferNoSchedule taints is better
        tols = [t for t in pod.tolerations if t.effect in ("", "PreferNoSchedule")]
        bad = np.array(
            [
                sum(1 for t in n.taints if t.effect == "PreferNoSchedule" and not any(x.tolerates(t) for x in tols))
                for n in nodes
            ],
            dtype=np.int64,
        )
        total += w["TaintToleration"] * _normalize(bad, reverse=True)
        # NodeAffinity (preferred terms)
        pref = pod.terms.preferred_node_affinity
        if pref:
            raw = np.array([sum(wt for wt, t in pref if t.matches(n.labels)) for n in nodes], dtype=np.int64)
            total += w["NodeAffinity"] * _normalize(raw, reverse=False)
        total += w["PodTopologySpread"] * self._spread_scores(pod, nodes, index, pods)
        total += w["InterPodAffinity"] * self._affinity_scores(pod, nodes, index, pods)
        if self._with_extender(pod):
            s = np.asarray(self.placement.score(pod, [n.name for n in nodes], index, None), dtype=np.float64)
            s = np.clip(np.nan_to_num(s, nan=0.0), 0, MAX_EXTENDER_PRIORITY).astype(np.int64)
            total += s * self.extender_weight * (MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY)
        return total.tolist()

    def _spread_scores(
        self, pod: PodInfo, nodes: list[NodeInfo], index: ClusterIndex, pods: Mapping[str, PodInfo]
    ) -> np.ndarray:
        terms: PodTerms = pod.terms
        soft = [c for c in terms.spread_constraints if c.when_unsatisfiable == "ScheduleAnyway"]
        system = not terms.spread_constraints
        if system:
            if pod.owner is None or pod.owner.kind not in _DEFAULT_SELECTOR_OWNERS:
                return np.zeros(len(nodes), dtype=np.int64)
            soft = list(SYSTEM_DEFAULT_SPREAD)
        if not soft:
            return np.zeros(len(nodes), dtype=np.int64)

        def matches(p: PodInfo, c: SpreadConstraint) -> bool:
            if system:
                return p.owner == pod.owner and p.namespace == pod.namespace
            return p.namespace == pod.namespace and self._constraint_selector(pod, c).matches(p.labels)

        ignored = [(not system) and any(c.topology_key not in n.labels for c in soft) for n in nodes]
        raw = np.zeros(len(nodes), dtype=np.int64)
        if system:
            cand = [k for k in self._labels_of(index).by_ns.get(pod.namespace, ()) if pods.get(k) is not None]
            matched = [k for k in cand if matches(pods[k], soft[0])]
        for c in soft:
            if not system:
                matched = self._labels_of(index).matching((pod.namespace,), self._constraint_selector(pod, c), pods)
            counts: dict[str, int] = {}
            for k in matched:
                n = self._node_of(k, pod, index, pods)
                if n is not None and c.topology_key in n.labels and node_matches_required(pod, terms, n.labels):
                    v = n.name if c.topology_key == LABEL_HOSTNAME else n.labels[c.topology_key]
                    counts[v] = counts.get(v, 0) + 1
            values = {n.labels.get(c.topology_key, "") for n, g in zip(nodes, ignored) if not g}
            size = sum(1 for g in ignored if not g) if c.topology_key == LABEL_HOSTNAME else len(values)
            weight = math.log(size + 2)
            fl = np.array(
                [
                    0.0
                    if ignored[j] or c.topology_key not in n.labels
                    else counts.get(n.name if c.topology_key == LABEL_HOSTNAME else n.labels[c.topology_key], 0)
                    * weight
                    + (c.max_skew - 1)
                    for j, n in enumerate(nodes)
                ]
            )
            raw = raw.astype(np.float64) + fl
        raw_i = np.floor(raw + 0.5).astype(np.int64)
        valid = [not g for g in ignored]
        if not any(valid):
            return np.zeros(len(nodes), dtype=np.int64)
        vals = [int(r) for r, v in zip(raw_i.tolist(), valid) if v]
        lo, hi = min(vals), max(vals)
        out = np.zeros(len(nodes), dtype=np.int64)
        for j in range(len(nodes)):
            if valid[j]:
                out[j] = MAX_NODE_SCORE if hi == 0 else MAX_NODE_SCORE * (hi + lo - int(raw_i[j])) // hi
        return out

    def _affinity_scores(
        self, pod: PodInfo, nodes: list[NodeInfo], index: ClusterIndex, pods: Mapping[str, PodInfo]
    ) -> np.ndarray:
        own = pod.terms
        labels_ix = self._labels_of(index)
        topo: dict[str, dict[str, int]] = {}

        def add(key: str, labels: Mapping[str, str], wt: int) -> None:
            if key in labels:
                d = topo.setdefault(key, {})
                d[labels[key]] = d.get(labels[key], 0) + wt

        for wt in own.preferred_affinity:
            for k in self._term_pods(pod, wt.term, index, pods):
                n = self._node_of(k, pod, index, pods)
                if n is not None:
                    add(wt.term.topology_key, n.labels, wt.weight)
        for wt in own.preferred_anti_affinity:
            for k in self._term_pods(pod, wt.term, index, pods):
                n = self._node_of(k, pod, index, pods)
                if n is not None:
                    add(wt.term.topology_key, n.labels, -wt.weight)
        for k in labels_ix.with_terms:
            e = pods.get(k)
            n = self._node_of(k, pod, index, pods)
            if e is None or n is None:
                continue
            for t in e.terms.required_affinity:
                if t.matches(pod, e.namespace):
                    add(t.topology_key, n.labels, 1)
            for wt in e.terms.preferred_affinity:
                if wt.term.matches(pod, e.namespace):
                    add(wt.term.topology_key, n.labels, wt.weight)
            for wt in e.terms.preferred_anti_affinity:
                if wt.term.matches(pod, e.namespace):
                    add(wt.term.topology_key, n.labels, -wt.weight)
        if not topo:
            return np.zeros(len(nodes), dtype=np.int64)
        raw = [sum(vals.get(n.labels[k], 0) for k, vals in topo.items() if k in n.labels) for n in nodes]
        lo, hi = min(raw), max(raw)
        if hi - lo <= 0:
            return np.zeros(len(nodes), dtype=np.int64)
        return np.array([int(MAX_NODE_SCORE * ((s - lo) / (hi - lo))) for s in raw], dtype=np.int64)


def _least(requested: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    requested = requested.astype(np.int64)
    capacity = capacity.astype(np.int64)
    out = np.zeros_like(requested)
    ok = (capacity > 0) & (requested <= capacity)
    out[ok] = ((capacity[ok] - requested[ok]) * MAX_NODE_SCORE) // capacity[ok]
    return out


def _balanced(req_cpu, req_mem, a_cpu, a_mem) -> np.ndarray:
    f_cpu = np.where(a_cpu > 0, np.minimum(req_cpu / np.maximum(a_cpu, 1), 1.0), np.nan)
    f_mem = np.where(a_mem > 0, np.minimum(req_mem / np.maximum(a_mem, 1), 1.0), np.nan)
    both = ~np.isnan(f_cpu) & ~np.isnan(f_mem)
    std = np.where(both, np.abs(np.nan_to_num(f_cpu) - np.nan_to_num(f_mem)) / 2.0, 0.0)
    return ((1.0 - std) * MAX_NODE_SCORE).astype(np.int64)


def _normalize(scores: np.ndarray, reverse: bool) -> np.ndarray:
    mx = int(scores.max(initial=0))
    if mx == 0:
        return np.full(len(scores), MAX_NODE_SCORE if reverse else 0, dtype=np.int64)
    out = MAX_NODE_SCORE * scores // mx
    return MAX_NODE_SCORE - out if reverse else out
