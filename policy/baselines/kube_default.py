"""kube-scheduler's default score plugins, reimplemented from k8s.io/kubernetes v1.36.3
(pkg/scheduler/framework/plugins/...), with the default profile's weights
(pkg/scheduler/apis/config/v1/default_plugins.go: TaintToleration 3, NodeAffinity 2, NodeResourcesFit 1,
PodTopologySpread 2, InterPodAffinity 2, NodeResourcesBalancedAllocation 1, ImageLocality 1).

Each plugin maps ``(pod, candidates, index)`` to int64 scores in [0, 100] (framework MaxNodeScore), one
per candidate, computed with the same integer arithmetic as the Go code. The plugin's PreScore, Score and
NormalizeScore steps all happen in ``score`` (the candidates are the nodes the scheduling cycle scores); a
plugin whose PreScore would return Skip scores every node 0, as the framework does for skipped plugins.

Pod affinity, preferred node affinity and topology spread constraints are not fields of
:class:`~policy.state.PodInfo`; the plugins that need them read them through a
:data:`~policy.baselines.affinity.TermsLookup` (default: no terms, as for every built-in application).
ImageLocality is not modelled (simulated nodes hold no images, so it scores every node alike).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from policy.index import ClusterIndex
from policy.state import LABEL_HOSTNAME, LABEL_ZONE, LabelSelector, PodInfo, frozen_map

from .affinity import PodTerms, SpreadConstraint, TermsLookup, no_terms, node_matches_required, selector_from_labels

MAX_NODE_SCORE = 100
#: pkg/scheduler/util/pod_resources.go: requests assumed for containers that set none (scoring only).
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024


class ScorePlugin(Protocol):
    """A kube-scheduler score plugin: ``score`` returns (len(candidates),) int64 in [0, 100]."""

    name: str
    weight: int

    def score(self, pod: PodInfo, candidates: Sequence[str], index: ClusterIndex) -> np.ndarray: ...


def _non_zero(v: int, default: int) -> int:
    return v if v > 0 else default


def _node_arrays(candidates: Sequence[str], index: ClusterIndex, nonzero: bool):
    """(alloc_cpu, alloc_mem, req_cpu, req_mem) int64 arrays for the candidates.

    ``nonzero``: use the scheduler's NonZeroRequested accounting (pods without requests count the defaults).
    Unknown candidates get zeros (score 0).
    """
    pos = index.positions(candidates)
    known = pos >= 0
    alloc_cpu = np.zeros(len(candidates), dtype=np.int64)
    alloc_mem = np.zeros(len(candidates), dtype=np.int64)
    req_cpu = np.zeros(len(candidates), dtype=np.int64)
    req_mem = np.zeros(len(candidates), dtype=np.int64)
    alloc_cpu[known] = index.alloc_cpu_m[pos[known]].astype(np.int64)
    alloc_mem[known] = index.alloc_mem_bytes[pos[known]].astype(np.int64)
    if nonzero:
        nz_cpu, nz_mem = _nonzero_requested(index)
        req_cpu[known] = nz_cpu[pos[known]]
        req_mem[known] = nz_mem[pos[known]]
    else:
        req_cpu[known] = index.req_cpu_m[pos[known]].astype(np.int64)
        req_mem[known] = index.req_mem_bytes[pos[known]].astype(np.int64)
    return alloc_cpu, alloc_mem, req_cpu, req_mem


def _nonzero_requested(index: ClusterIndex) -> tuple[np.ndarray, np.ndarray]:
    cpu = np.zeros(len(index.node_names), dtype=np.int64)
    mem = np.zeros(len(index.node_names), dtype=np.int64)
    for p in index.snapshot.pods:
        if p.terminating or p.node_name is None:
            continue
        i = index.node_pos.get(p.node_name)
        if i is None:
            continue
        cpu[i] += _non_zero(p.requests.cpu_m, DEFAULT_MILLI_CPU_REQUEST)
        mem[i] += _non_zero(p.requests.memory_bytes, DEFAULT_MEMORY_REQUEST)
    return cpu, mem


def _least_requested_score(requested: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """least_allocated.go leastRequestedScore: ((capacity - requested) * 100) / capacity, 0 when over."""
    out = np.zeros_like(requested)
    ok = (capacity > 0) & (requested <= capacity)
    out[ok] = ((capacity[ok] - requested[ok]) * MAX_NODE_SCORE) // capacity[ok]
    return out


@dataclass(frozen=True)
class NodeResourcesFitLeastAllocated:
    """NodeResourcesFit with the default ``LeastAllocated`` strategy over cpu and memory (weights 1, 1),
    using NonZeroRequested for the node and the pod (least_allocated.go, resource_allocation.go)."""

    name: str = "NodeResourcesFit"
    weight: int = 1

    def score(self, pod: PodInfo, candidates: Sequence[str], index: ClusterIndex) -> np.ndarray:
        a_cpu, a_mem, r_cpu, r_mem = _node_arrays(candidates, index, nonzero=True)
        own = np.array([c == pod.node_name for c in candidates])
        p_cpu = _non_zero(pod.requests.cpu_m, DEFAULT_MILLI_CPU_REQUEST)
        p_mem = _non_zero(pod.requests.memory_bytes, DEFAULT_MEMORY_REQUEST)
        # the pod itself is not yet on any candidate (a bound pod being re-scored is subtracted)
        r_cpu = r_cpu - own * p_cpu + p_cpu
        r_mem = r_mem - own * p_mem + p_mem
        s_cpu = _least_requested_score(r_cpu, a_cpu)
        s_mem = _least_requested_score(r_mem, a_mem)
        wsum = (a_cpu > 0).astype(np.int64) + (a_mem > 0).astype(np.int64)
        total = s_cpu * (a_cpu > 0) + s_mem * (a_mem > 0)
        return np.where(wsum > 0, total // np.maximum(wsum, 1), 0)


def _balanced_score(req_cpu: np.ndarray, req_mem: np.ndarray, a_cpu: np.ndarray, a_mem: np.ndarray) -> np.ndarray:
    """balanced_allocation.go balancedResourceScore: int((1 - std) * 100), std = |f_cpu - f_mem| / 2 with
    fractions capped at 1; std = 0 when only one resource is allocatable."""
    f_cpu = np.where(a_cpu > 0, np.minimum(req_cpu / np.maximum(a_cpu, 1), 1.0), np.nan)
    f_mem = np.where(a_mem > 0, np.minimum(req_mem / np.maximum(a_mem, 1), 1.0), np.nan)
    both = ~np.isnan(f_cpu) & ~np.isnan(f_mem)
    std = np.where(both, np.abs(np.nan_to_num(f_cpu) - np.nan_to_num(f_mem)) / 2.0, 0.0)
    return ((1.0 - std) * MAX_NODE_SCORE).astype(np.int64)


@dataclass(frozen=True)
class NodeResourcesBalancedAllocation:
    """NodeResourcesBalancedAllocation as of v1.36: scores the change in balance the pod brings,
    ``50 + (50 + score_with_pod - score_without_pod) / 2`` (integer division), using actual requests
    (``useRequested: true``); BestEffort pods score 0 (balanced_allocation.go)."""

    name: str = "NodeResourcesBalancedAllocation"
    weight: int = 1

    def score(self, pod: PodInfo, candidates: Sequence[str], index: ClusterIndex) -> np.ndarray:
        if pod.requests.cpu_m == 0 and pod.requests.memory_bytes == 0:
            return np.zeros(len(candidates), dtype=np.int64)
        a_cpu, a_mem, r_cpu, r_mem = _node_arrays(candidates, index, nonzero=False)
        own = np.array([c == pod.node_name for c in candidates])
        base_cpu = r_cpu - own * pod.requests.cpu_m
        base_mem = r_mem - own * pod.requests.memory_bytes
        with_pod = _balanced_score(base_cpu + pod.requests.cpu_m, base_mem + pod.requests.memory_bytes, a_cpu, a_mem)
        without = _balanced_score(base_cpu, base_mem, a_cpu, a_mem)
        # Go's integer division truncates toward zero; the operand is always >= 0 here.
        return MAX_NODE_SCORE // 2 + (MAX_NODE_SCORE // 2 + with_pod - without) // 2


def default_normalize_score(scores: np.ndarray, reverse: bool) -> np.ndarray:
    """helper/normalize_score.go DefaultNormalizeScore: scale to [0, 100] by the maximum (integer
    division); ``reverse`` turns it into 100 - score; all zero → 0 (or 100 when reversed)."""
    scores = np.asarray(scores, dtype=np.int64)
    mx = int(scores.max(initial=0))
    if mx == 0:
        return np.full(len(scores), MAX_NODE_SCORE if reverse else 0, dtype=np.int64)
    out = MAX_NODE_SCORE * scores // mx
    return MAX_NODE_SCORE - out if reverse else out


def _node_labels(candidates: Sequence[str], index: ClusterIndex) -> list[dict[str, str] | None]:
    nodes = index.snapshot.nodes
    out: list[dict[str, str] | None] = []
    for c in candidates:
        i = index.node_pos.get(c)
        out.append(None if i is None else dict(nodes[i].labels))
    return out


@dataclass(frozen=True)
class TaintToleration:
    """TaintToleration scoring (tainttoleration/taint_toleration.go): counts the node's PreferNoSchedule
    taints the pod does not tolerate (only tolerations with an empty or PreferNoSchedule effect count),
    then DefaultNormalizeScore reversed: fewer intolerable taints score higher; no such taints anywhere →
    100 everywhere. Default weight 3."""

    name: str = "TaintToleration"
    weight: int = 3

    def score(self, pod: PodInfo, candidates: Sequence[str], index: ClusterIndex) -> np.ndarray:
        tols = [t for t in pod.tolerations if t.effect in ("", "PreferNoSchedule")]
        counts = np.zeros(len(candidates), dtype=np.int64)
        nodes = index.snapshot.nodes
        for k, c in enumerate(candidates):
            i = index.node_pos.get(c)
            if i is None:
                continue
            counts[k] = sum(
                1
                for t in nodes[i].taints
                if t.effect == "PreferNoSchedule" and not any(tol.tolerates(t) for tol in tols)
            )
        return default_normalize_score(counts, reverse=True)


@dataclass(frozen=True)
class NodeAffinity:
    """NodeAffinity scoring (nodeaffinity/node_affinity.go): the sum of the weights of the pod's
    preferredDuringScheduling node terms the node matches, then DefaultNormalizeScore; a pod without
    preferred terms skips (0 everywhere). Default weight 2."""

    terms: TermsLookup = no_terms
    name: str = "NodeAffinity"
    weight: int = 2

    def score(self, pod: PodInfo, candidates: Sequence[str], index: ClusterIndex) -> np.ndarray:
        pref = self.terms(pod).preferred_node_affinity
        if not pref:
            return np.zeros(len(candidates), dtype=np.int64)
        raw = np.array(
            [
                0 if lab is None else sum(w for w, t in pref if t.matches(lab))
                for lab in _node_labels(candidates, index)
            ],
            dtype=np.int64,
        )
        return default_normalize_score(raw, reverse=False)


@dataclass(frozen=True)
class InterPodAffinity:
    """InterPodAffinity scoring (interpodaffinity/scoring.go), default weight 2, HardPodAffinityWeight 1,
    IgnorePreferredTermsOfExistingPods false.

    For every existing pod on a node with labels, per topology value of that node:
    + weight of each preferred affinity term of the incoming pod the existing pod matches,
    − weight of each preferred anti-affinity term of the incoming pod it matches,
    + HardPodAffinityWeight for each required affinity term of the existing pod the incoming pod matches,
    + / − weight of each preferred affinity / anti-affinity term of the existing pod the incoming pod matches.
    A node scores the sum over its labels' topology values; NormalizeScore maps [min, max] linearly to
    [0, 100] (``int(100 * (s - min) / (max - min))``, 0 when all equal). When the incoming pod has no
    preferred terms and no existing pod has any affinity term, PreScore skips (0 everywhere).
    """

    terms: TermsLookup = no_terms
    hard_pod_affinity_weight: int = 1
    name: str = "InterPodAffinity"
    weight: int = 2

    def score(self, pod: PodInfo, candidates: Sequence[str], index: ClusterIndex) -> np.ndarray:
        zeros = np.zeros(len(candidates), dtype=np.int64)
        if self.terms is no_terms:
            return zeros  # nobody has affinity terms: PreScore skips
        own = self.terms(pod)
        has_constraints = bool(own.preferred_affinity or own.preferred_anti_affinity)
        nodes = index.snapshot.nodes
        topo: dict[str, dict[str, int]] = {}

        def add(key: str, labels, w: int) -> None:
            if key in labels:
                d = topo.setdefault(key, {})
                d[labels[key]] = d.get(labels[key], 0) + w

        for p in index.snapshot.pods:
            if p.terminating or p.node_name is None or p.key == pod.key:
                continue
            i = index.node_pos.get(p.node_name)
            if i is None or not nodes[i].labels:
                continue
            labels = nodes[i].labels
            ex = self.terms(p)
            if not has_constraints and not ex.has_pod_affinity:
                continue
            for wt in own.preferred_affinity:
                if wt.term.matches(p, pod.namespace):
                    add(wt.term.topology_key, labels, wt.weight)
            for wt in own.preferred_anti_affinity:
                if wt.term.matches(p, pod.namespace):
                    add(wt.term.topology_key, labels, -wt.weight)
            if self.hard_pod_affinity_weight > 0:
                for t in ex.required_affinity:
                    if t.matches(pod, p.namespace):
                        add(t.topology_key, labels, self.hard_pod_affinity_weight)
            for wt in ex.preferred_affinity:
                if wt.term.matches(pod, p.namespace):
                    add(wt.term.topology_key, labels, wt.weight)
            for wt in ex.preferred_anti_affinity:
                if wt.term.matches(pod, p.namespace):
                    add(wt.term.topology_key, labels, -wt.weight)
        if not topo:
            return zeros
        raw = np.array(
            [
                0 if lab is None else sum(vals.get(lab[k], 0) for k, vals in topo.items() if k in lab)
                for lab in _node_labels(candidates, index)
            ],
            dtype=np.int64,
        )
        lo, hi = int(raw.min()), int(raw.max())
        if hi - lo <= 0:
            return zeros
        return np.array([int(MAX_NODE_SCORE * ((s - lo) / (hi - lo))) for s in raw.tolist()], dtype=np.int64)


#: podtopologyspread/plugin.go systemDefaultConstraints (DefaultingType: System, the default).
SYSTEM_DEFAULT_CONSTRAINTS = (
    SpreadConstraint(3, LABEL_HOSTNAME, "ScheduleAnyway", LabelSelector()),
    SpreadConstraint(5, LABEL_ZONE, "ScheduleAnyway", LabelSelector()),
)

_DEFAULT_SELECTOR_OWNERS = ("ReplicaSet", "StatefulSet", "ReplicationController")


@dataclass(frozen=True)
class PodTopologySpread:
    """PodTopologySpread scoring (podtopologyspread/scoring.go, common.go), default weight 2, system default
    constraints (hostname maxSkew 3, zone maxSkew 5, ScheduleAnyway) for pods that set none.

    - Constraints: the pod's ScheduleAnyway ``topologySpreadConstraints`` (selector + ``matchLabelKeys``), or
      else the system defaults with helper.DefaultSelector: the selector of the pod's controller
      (ReplicaSet/StatefulSet/ReplicationController: since a ReplicaSet's selector includes the
      ``pod-template-hash`` label, it selects exactly that controller's pods; Services selecting the pod
      are not modelled). No constraints → skip (0 everywhere).
    - Pod-defined constraints require every topology key on a node (``requireAllTopologies``); candidates
      missing one are ignored (score 0); with system defaults, a node without a zone label still spreads
      by hostname.
    - Per constraint, the topology weight is ``ln(size + 2)`` (size: distinct values among the scored
      nodes, or the number of scored nodes for the hostname key); a node's raw score is
      ``round(Σ count × weight + (maxSkew − 1))`` over the constraints whose key the node has, where count
      is the number of matching pods (same namespace, not terminating) in the node's domain, counted over
      all nodes that match the pod's required node affinity (NodeAffinityPolicy Honor, NodeTaintsPolicy
      Ignore).
    - NormalizeScore: ``100 × (max + min − s) // max`` (100 everywhere when max is 0), ignored nodes 0.
    """

    terms: TermsLookup = no_terms
    default_constraints: tuple[SpreadConstraint, ...] = SYSTEM_DEFAULT_CONSTRAINTS
    system_defaulted: bool = True
    name: str = "PodTopologySpread"
    weight: int = 2

    def _constraints(self, pod: PodInfo, terms: PodTerms) -> list[tuple[SpreadConstraint, Callable[[PodInfo], bool]]]:
        out = []
        if terms.spread_constraints:
            for c in terms.spread_constraints:
                if c.when_unsatisfiable != "ScheduleAnyway":
                    continue
                sel = c.selector
                extra = selector_from_labels(c.match_label_keys, pod.labels)
                if extra:
                    sel = LabelSelector(frozen_map({**dict(sel.match_labels), **extra}), sel.match_expressions)
                out.append((c, lambda p, sel=sel: p.namespace == pod.namespace and sel.matches(p.labels)))
            return out
        owner = pod.owner
        if owner is None or owner.kind not in _DEFAULT_SELECTOR_OWNERS:
            return []

        def same_controller(p: PodInfo) -> bool:
            return p.owner == owner and p.namespace == pod.namespace

        return [(c, same_controller) for c in self.default_constraints if c.when_unsatisfiable == "ScheduleAnyway"]

    def score(self, pod: PodInfo, candidates: Sequence[str], index: ClusterIndex) -> np.ndarray:
        n = len(candidates)
        terms = self.terms(pod)
        cons = self._constraints(pod, terms)
        if not cons or not index.snapshot.nodes:
            return np.zeros(n, dtype=np.int64)
        require_all = bool(terms.spread_constraints) or not self.system_defaulted
        cand_labels = _node_labels(candidates, index)
        ignored = [
            lab is None or (require_all and any(c.topology_key not in lab for c, _ in cons)) for lab in cand_labels
        ]
        # matching pods per node, per constraint (the pod itself excluded if already bound)
        nodes = index.snapshot.nodes
        per_node = np.zeros((len(cons), len(nodes)), dtype=np.int64)
        shared = len({id(m) for _c, m in cons}) == 1  # system defaults: one selector for every constraint
        for p in index.snapshot.pods:
            if p.terminating or p.node_name is None or p.key == pod.key:
                continue
            i = index.node_pos.get(p.node_name)
            if i is None:
                continue
            if shared:
                if cons[0][1](p):
                    per_node[:, i] += 1
                continue
            for k, (_c, match) in enumerate(cons):
                if match(p):
                    per_node[k, i] += 1
        domain_counts: list[dict[str, int]] = []
        weights: list[float] = []
        for k, (c, _m) in enumerate(cons):
            if c.topology_key == LABEL_HOSTNAME:
                domain_counts.append({})
                weights.append(math.log(sum(1 for g in ignored if not g) + 2))
                continue
            values = {lab.get(c.topology_key, "") for lab, g in zip(cand_labels, ignored) if not g}
            counts = dict.fromkeys(values, 0)
            for i, node in enumerate(nodes):
                if not node_matches_required(pod, terms, node.labels):
                    continue
                if require_all and any(cc.topology_key not in node.labels for cc, _ in cons):
                    continue
                v = node.labels.get(c.topology_key, "")
                if v in counts:
                    counts[v] += int(per_node[k, i])
            domain_counts.append(counts)
            weights.append(math.log(len(values) + 2))
        raw = np.zeros(n, dtype=np.int64)
        for j, (cand, lab) in enumerate(zip(candidates, cand_labels)):
            if ignored[j]:
                continue
            s = 0.0
            for k, (c, _m) in enumerate(cons):
                if c.topology_key not in lab:
                    continue
                if c.topology_key == LABEL_HOSTNAME:
                    cnt = int(per_node[k, index.node_pos[cand]])
                else:
                    cnt = domain_counts[k][lab[c.topology_key]]
                s += cnt * weights[k] + (c.max_skew - 1)
            raw[j] = int(math.floor(s + 0.5))  # Go math.Round (half away from zero; s >= 0 here)
        valid = [not g for g in ignored]
        if not any(valid):
            return np.zeros(n, dtype=np.int64)
        lo = int(min(r for r, v in zip(raw.tolist(), valid) if v))
        hi = int(max(r for r, v in zip(raw.tolist(), valid) if v))
        out = np.zeros(n, dtype=np.int64)
        for j in range(n):
            if not valid[j]:
                continue
            out[j] = MAX_NODE_SCORE if hi == 0 else MAX_NODE_SCORE * (hi + lo - int(raw[j])) // hi
        return out


def default_score_plugins(terms: TermsLookup = no_terms) -> list[ScorePlugin]:
    """The default profile's score plugins with their default weights (default_plugins.go):
    TaintToleration 3, NodeAffinity 2, NodeResourcesFit 1 (LeastAllocated), PodTopologySpread 2 (system
    defaults), InterPodAffinity 2, NodeResourcesBalancedAllocation 1. ``terms`` finds each pod's affinity
    and spread terms (:func:`policy.baselines.affinity.terms_by_service`)."""
    return [
        TaintToleration(),
        NodeAffinity(terms),
        NodeResourcesFitLeastAllocated(),
        PodTopologySpread(terms),
        InterPodAffinity(terms),
        NodeResourcesBalancedAllocation(),
    ]


__all__ = [
    "MAX_NODE_SCORE",
    "ScorePlugin",
    "NodeResourcesFitLeastAllocated",
    "NodeResourcesBalancedAllocation",
    "TaintToleration",
    "NodeAffinity",
    "InterPodAffinity",
    "PodTopologySpread",
    "SYSTEM_DEFAULT_CONSTRAINTS",
    "default_score_plugins",
    "default_normalize_score",
]
