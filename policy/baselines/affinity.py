"""The scheduling terms of a pod spec (now :class:`~policy.state.PodTerms`, parsed by
:func:`policy.observe.parse_pod_terms` into ``PodInfo.terms``; re-exported here for the simulator): inter-pod
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

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from policy.observe import parse_pod_terms
from policy.state import (
    NO_TERMS,
    AffinityTerm,
    NodeSelectorTerm,
    PodInfo,
    PodTerms,
    SpreadConstraint,
    WeightedAffinityTerm,
    node_matches_required,
    selector_from_labels,
)

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

from policy.observe import NODE_SELECTOR_OPERATORS

#: Finds the terms of a pod (its template's); must return :data:`NO_TERMS` when there are none.
TermsLookup = Callable[[PodInfo], PodTerms]


def no_terms(_pod: PodInfo) -> PodTerms:
    """The lookup for clusters whose pods carry no affinity or spread terms."""
    return NO_TERMS


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
