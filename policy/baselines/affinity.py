"""The scheduling terms of a pod spec that :class:`~policy.state.PodInfo` does not carry: inter-pod
(anti-)affinity, preferred node affinity and topology spread constraints, parsed from core/v1 Pod (or pod
template) JSON, and the matching rules kube-scheduler applies to them.

Sources: k8s.io/api core/v1 types (Affinity, PodAffinityTerm, WeightedPodAffinityTerm,
PreferredSchedulingTerm, NodeSelectorRequirement, TopologySpreadConstraint);
k8s.io/kubernetes v1.36.3 pkg/scheduler/framework/types.go (AffinityTerm.Matches: an empty ``namespaces``
list means the namespace of the pod that carries the term) and
k8s.io/component-helpers/scheduling/corev1/nodeaffinity (node selector operators In, NotIn, Exists,
DoesNotExist, Gt, Lt). ``namespaceSelector`` is not modelled (a term with one matches only the namespaces
it lists, or its own pod's namespace).

The score plugins of :mod:`policy.baselines.kube_default` receive a :class:`PodInfo`; they find a pod's
terms through a :data:`TermsLookup` (``PodInfo -> PodTerms``). :func:`terms_by_service` builds one from
the workloads' pod templates (every pod of a workload has its template's terms), which is exact in the
simulator and for Deployments in general.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from policy.observe import ObjectError, parse_selector
from policy.state import LabelSelector, PodInfo

__all__ = [
    "NODE_SELECTOR_OPERATORS",
    "AffinityTerm",
    "WeightedAffinityTerm",
    "NodeSelectorTerm",
    "SpreadConstraint",
    "PodTerms",
    "NO_TERMS",
    "TermsLookup",
    "no_terms",
    "parse_pod_terms",
    "terms_by_service",
    "node_matches_required",
    "selector_from_labels",
]

NODE_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


@dataclass(frozen=True)
class AffinityTerm:
    """A PodAffinityTerm: pods matched by ``selector`` in ``namespaces`` (empty = the namespace of the pod
    carrying the term), co-located (or not) within the same value of node label ``topology_key``."""

    selector: LabelSelector
    topology_key: str
    namespaces: tuple[str, ...] = ()

    def matches(self, pod: PodInfo, owner_namespace: str) -> bool:
        """True when ``pod`` is selected by this term carried by a pod of ``owner_namespace``."""
        namespaces = self.namespaces or (owner_namespace,)
        return pod.namespace in namespaces and self.selector.matches(pod.labels)


@dataclass(frozen=True)
class WeightedAffinityTerm:
    """A WeightedPodAffinityTerm (``weight`` 1..100)."""

    weight: int
    term: AffinityTerm


@dataclass(frozen=True)
class NodeSelectorTerm:
    """A NodeSelectorTerm: every requirement ``(key, operator, values)`` must hold (AND)."""

    match_expressions: tuple[tuple[str, str, tuple[str, ...]], ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """nodeaffinity semantics: an empty term matches nothing; Gt/Lt compare integers."""
        if not self.match_expressions:
            return False
        for key, op, values in self.match_expressions:
            present = key in labels
            v = labels.get(key)
            if op == "In" and not (present and v in values):
                return False
            if op == "NotIn" and present and v in values:
                return False
            if op == "Exists" and not present:
                return False
            if op == "DoesNotExist" and present:
                return False
            if op in ("Gt", "Lt"):
                try:
                    lhs, rhs = int(v or ""), int(values[0])
                except (ValueError, IndexError):
                    return False
                if (op == "Gt" and not lhs > rhs) or (op == "Lt" and not lhs < rhs):
                    return False
        return True


@dataclass(frozen=True)
class SpreadConstraint:
    """A TopologySpreadConstraint (``when_unsatisfiable``: DoNotSchedule or ScheduleAnyway)."""

    max_skew: int
    topology_key: str
    when_unsatisfiable: str
    selector: LabelSelector
    match_label_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class PodTerms:
    """What a pod spec says about where it prefers to run, beyond requests, taints and nodeSelector."""

    required_affinity: tuple[AffinityTerm, ...] = ()
    required_anti_affinity: tuple[AffinityTerm, ...] = ()
    preferred_affinity: tuple[WeightedAffinityTerm, ...] = ()
    preferred_anti_affinity: tuple[WeightedAffinityTerm, ...] = ()
    preferred_node_affinity: tuple[tuple[int, NodeSelectorTerm], ...] = ()
    required_node_affinity: tuple[NodeSelectorTerm, ...] = ()
    spread_constraints: tuple[SpreadConstraint, ...] = ()

    @property
    def has_pod_affinity(self) -> bool:
        """True when any inter-pod (anti-)affinity term is set (kube-scheduler's PodsWithAffinity)."""
        return bool(
            self.required_affinity
            or self.required_anti_affinity
            or self.preferred_affinity
            or self.preferred_anti_affinity
        )


NO_TERMS = PodTerms()

#: Finds the terms of a pod (its template's); must return :data:`NO_TERMS` when there are none.
TermsLookup = Callable[[PodInfo], PodTerms]


def no_terms(_pod: PodInfo) -> PodTerms:
    """The lookup for clusters whose pods carry no affinity or spread terms."""
    return NO_TERMS


def _terms(items: Any, path: str) -> tuple[AffinityTerm, ...]:
    out = []
    for i, t in enumerate(items or ()):
        if not isinstance(t, Mapping):
            raise ObjectError(f"{path}[{i}]: expected a PodAffinityTerm map, got {t!r}")
        key = t.get("topologyKey")
        if not key:
            raise ObjectError(f"{path}[{i}].topologyKey: required, got {key!r}")
        out.append(
            AffinityTerm(
                parse_selector(t.get("labelSelector"), f"{path}[{i}].labelSelector"),
                str(key),
                tuple(str(n) for n in t.get("namespaces") or ()),
            )
        )
    return tuple(out)


def _weighted(items: Any, path: str) -> tuple[WeightedAffinityTerm, ...]:
    out = []
    for i, t in enumerate(items or ()):
        if not isinstance(t, Mapping):
            raise ObjectError(f"{path}[{i}]: expected a WeightedPodAffinityTerm map, got {t!r}")
        w = t.get("weight")
        if not isinstance(w, int) or isinstance(w, bool) or not 1 <= w <= 100:
            raise ObjectError(f"{path}[{i}].weight: must be an integer 1..100, got {w!r}")
        (term,) = _terms([t.get("podAffinityTerm")], f"{path}[{i}].podAffinityTerm")
        out.append(WeightedAffinityTerm(w, term))
    return tuple(out)


def _node_term(t: Any, path: str) -> NodeSelectorTerm:
    if not isinstance(t, Mapping):
        raise ObjectError(f"{path}: expected a NodeSelectorTerm map, got {t!r}")
    exprs = []
    for i, e in enumerate(t.get("matchExpressions") or ()):
        op = e.get("operator")
        if op not in NODE_SELECTOR_OPERATORS:
            raise ObjectError(f"{path}.matchExpressions[{i}].operator: unknown operator {op!r}")
        exprs.append((str(e.get("key", "")), op, tuple(str(v) for v in e.get("values") or ())))
    return NodeSelectorTerm(tuple(exprs))


def parse_pod_terms(pod_spec: Mapping[str, Any] | None, path: str = "spec") -> PodTerms:
    """core/v1 PodSpec JSON (``spec`` of a Pod or of a pod template) → :class:`PodTerms`.

    Raises :class:`~policy.observe.ObjectError` naming the field for a malformed term.
    """
    spec = pod_spec or {}
    aff = spec.get("affinity") or {}
    pa = aff.get("podAffinity") or {}
    paa = aff.get("podAntiAffinity") or {}
    na = aff.get("nodeAffinity") or {}
    pref_nodes = []
    for i, p in enumerate(na.get("preferredDuringSchedulingIgnoredDuringExecution") or ()):
        w = p.get("weight")
        if not isinstance(w, int) or isinstance(w, bool) or not 1 <= w <= 100:
            raise ObjectError(f"{path}.affinity.nodeAffinity.preferred[{i}].weight: must be 1..100, got {w!r}")
        pref_nodes.append((w, _node_term(p.get("preference"), f"{path}.affinity.nodeAffinity.preferred[{i}]")))
    req_nodes = tuple(
        _node_term(t, f"{path}.affinity.nodeAffinity.required.nodeSelectorTerms[{i}]")
        for i, t in enumerate(
            (na.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or ()
        )
    )
    spread = []
    for i, c in enumerate(spec.get("topologySpreadConstraints") or ()):
        p = f"{path}.topologySpreadConstraints[{i}]"
        skew = c.get("maxSkew")
        if not isinstance(skew, int) or isinstance(skew, bool) or skew < 1:
            raise ObjectError(f"{p}.maxSkew: must be an integer >= 1, got {skew!r}")
        when = c.get("whenUnsatisfiable")
        if when not in ("DoNotSchedule", "ScheduleAnyway"):
            raise ObjectError(f"{p}.whenUnsatisfiable: must be DoNotSchedule or ScheduleAnyway, got {when!r}")
        if not c.get("topologyKey"):
            raise ObjectError(f"{p}.topologyKey: required")
        spread.append(
            SpreadConstraint(
                skew,
                str(c["topologyKey"]),
                when,
                parse_selector(c.get("labelSelector"), f"{p}.labelSelector"),
                tuple(str(k) for k in c.get("matchLabelKeys") or ()),
            )
        )
    rpath = "requiredDuringSchedulingIgnoredDuringExecution"
    ppath = "preferredDuringSchedulingIgnoredDuringExecution"
    return PodTerms(
        required_affinity=_terms(pa.get(rpath), f"{path}.affinity.podAffinity.{rpath}"),
        required_anti_affinity=_terms(paa.get(rpath), f"{path}.affinity.podAntiAffinity.{rpath}"),
        preferred_affinity=_weighted(pa.get(ppath), f"{path}.affinity.podAffinity.{ppath}"),
        preferred_anti_affinity=_weighted(paa.get(ppath), f"{path}.affinity.podAntiAffinity.{ppath}"),
        preferred_node_affinity=tuple(pref_nodes),
        required_node_affinity=req_nodes,
        spread_constraints=tuple(spread),
    )


def terms_by_service(
    workloads: Iterable[Mapping[str, Any]], service_of_workload: Callable[[Mapping[str, Any]], str]
) -> TermsLookup:
    """A lookup from the pod templates of ``workloads`` (apps/v1 Deployment / StatefulSet JSON), keyed by the
    service each workload's pods belong to (``service_of_workload(obj)``). Pods of unknown services get
    :data:`NO_TERMS`."""
    table: dict[str, PodTerms] = {}
    for w in workloads:
        tmpl = ((w.get("spec") or {}).get("template") or {}).get("spec") or {}
        terms = parse_pod_terms(
            tmpl, f"{w.get('kind', 'Deployment')} {(w.get('metadata') or {}).get('name')}: spec.template.spec"
        )
        if terms != NO_TERMS:
            table[service_of_workload(w)] = terms
    if not table:
        return no_terms
    return lambda pod: table.get(pod.service, NO_TERMS)


def node_matches_required(pod: PodInfo, terms: PodTerms, labels: Mapping[str, str]) -> bool:
    """The pod's required node affinity: ``nodeSelector`` AND (any required NodeSelectorTerm, if set)."""
    if any(labels.get(k) != v for k, v in pod.node_selector.items()):
        return False
    if terms.required_node_affinity and not any(t.matches(labels) for t in terms.required_node_affinity):
        return False
    return True


def selector_from_labels(keys: Sequence[str], labels: Mapping[str, str]) -> dict[str, str]:
    """matchLabelKeys: the pod's own values of ``keys`` (missing keys skipped)."""
    return {k: labels[k] for k in keys if k in labels}
