"""Core domain types shared by the extender, the descheduler, the simulator and training.

These frozen dataclasses are the contract between the layers of hrl-scheduler (DESIGN.md section 3):
every source of cluster state (the Kubernetes API through :mod:`policy.observe`, a ``kubectl get -o json``
List, the simulator) produces them, and every policy reads them. Extend them; never fork them.

Units are in the field names: ``_m`` millicores, ``_bytes`` bytes, ``_rps`` requests per second,
``_ms`` milliseconds, ``_s`` seconds. ``None`` means "not known" (never "zero").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, Literal

from .intent import NO_INTENT, Intent

__all__ = [
    "ANNOTATION_DEPENDS_ON",
    "ANNOTATION_SERVICE",
    "LABEL_ZONE",
    "LABEL_REGION",
    "LABEL_HOSTNAME",
    "LABEL_CPU_SPEED",
    "ANNOTATION_MIRROR",
    "EDGE_MEASURES",
    "EDGE_FIELDS",
    "frozen_map",
    "Resources",
    "Taint",
    "Toleration",
    "noexecute_toleration_s",
    "NodeInfo",
    "OwnerRef",
    "PodInfo",
    "LabelSelector",
    "AffinityTerm",
    "WeightedAffinityTerm",
    "NodeSelectorTerm",
    "SpreadConstraint",
    "PodTerms",
    "NO_TERMS",
    "node_matches_required",
    "selector_from_labels",
    "PodDisruptionBudgetInfo",
    "WorkloadInfo",
    "ServiceEdge",
    "ServiceGraph",
    "ServiceSignals",
    "ClusterSnapshot",
    "MoveReason",
    "Move",
    "Resize",
    "Plan",
    "EvictionOutcome",
    "EvictionResult",
]

# Annotations and labels hrl-scheduler reads or writes (documented in docs/operations.md).
ANNOTATION_DEPENDS_ON = "hrl-scheduler.io/depends-on"
ANNOTATION_SERVICE = "hrl-scheduler.io/service"
LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_REGION = "topology.kubernetes.io/region"
LABEL_HOSTNAME = "kubernetes.io/hostname"
#: A node's per-core CPU speed relative to a reference core (a positive number, e.g. "1.2"), set by the operator per
#: instance type or from a benchmark (as Koordinator's cpu-normalization-ratio or Ganeti's cpu_speed): the placement
#: policy's ``node_log_speed`` input (policy/lowlevel/features.py).
LABEL_CPU_SPEED = "hrl-scheduler.io/cpu-speed"
ANNOTATION_MIRROR = "kubernetes.io/config.mirror"

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def frozen_map(m: Mapping[str, str] | None) -> Mapping[str, str]:
    """Return a read-only copy of ``m`` (``None`` → empty) for use inside frozen dataclasses."""
    if not m:
        return _EMPTY
    return MappingProxyType(dict(m))


@dataclass(frozen=True, slots=True)
class Resources:
    """A CPU + memory amount. ``cpu_m`` in millicores (1000 = one core), ``memory_bytes`` in bytes; both >= 0."""

    cpu_m: int = 0
    memory_bytes: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.cpu_m + other.cpu_m, self.memory_bytes + other.memory_bytes)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.cpu_m - other.cpu_m, self.memory_bytes - other.memory_bytes)

    def fits_in(self, free: Resources) -> bool:
        """True when both dimensions are <= those of ``free``."""
        return self.cpu_m <= free.cpu_m and self.memory_bytes <= free.memory_bytes


@dataclass(frozen=True, slots=True)
class Taint:
    """A node taint (core/v1 Taint). ``effect`` is NoSchedule, PreferNoSchedule or NoExecute; ``time_added_s``: its
    ``timeAdded`` (unix s; set by the node lifecycle controller on the NoExecute taints it adds, ``None`` when
    absent)."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"
    time_added_s: float | None = None


@dataclass(frozen=True, slots=True)
class Toleration:
    """A pod toleration (core/v1 Toleration). ``operator`` is Equal or Exists; empty ``effect`` matches all;
    ``seconds``: ``tolerationSeconds`` (how long a NoExecute taint is tolerated; ``None`` = forever)."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    seconds: float | None = None

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes semantics (k8s.io/api/core/v1/toleration.go ToleratesTaint)."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.value == taint.value and bool(self.key)


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A node as the schedulers see it.

    ``allocatable`` is what pods may request (status.allocatable); ``usage`` is measured use when known
    (metrics, simulator), else ``None``. ``zone`` / ``region`` come from the well-known topology labels.
    """

    name: str
    allocatable: Resources
    allocatable_pods: int = 110
    labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY, compare=False)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    ready: bool = True
    usage: Resources | None = None

    @property
    def zone(self) -> str:
        return self.labels.get(LABEL_ZONE, "")

    @property
    def region(self) -> str:
        return self.labels.get(LABEL_REGION, "")


@dataclass(frozen=True, slots=True)
class OwnerRef:
    """The controller owner of a pod (metadata.ownerReferences with controller=true)."""

    kind: str
    name: str
    uid: str = ""


@dataclass(frozen=True, slots=True)
class PodInfo:
    """A pod.

    ``service`` is the call-graph service the pod belongs to (see :func:`policy.observe.service_of`).
    ``requests`` / ``limits`` are the sums over the pod's containers (init containers: the max, as the
    scheduler does); ``limits`` fields are 0 where unset. ``node_name`` is ``None`` while Pending.
    ``local_storage`` is True when the pod mounts emptyDir, hostPath or a local PersistentVolume the
    descheduler would lose by evicting it. ``ready``: the pod's ``Ready`` condition (``None`` when not known:
    a PodDisruptionBudget count treats it as not healthy). ``resource_version``: ``metadata.resourceVersion``
    as read ("" when unknown). ``restarts``: the sum of its containers' ``status.containerStatuses[*].restartCount``
    (the kubelet's count; 0 when unknown); ``last_terminated_s``: the latest ``lastState.terminated.finishedAt`` among
    them, seconds since the epoch (``None``: no container has terminated, or the time is unknown).
    """

    name: str
    namespace: str
    service: str
    requests: Resources
    limits: Resources = Resources()
    uid: str = ""
    node_name: str | None = None
    phase: str = "Pending"
    labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY, compare=False)
    annotations: Mapping[str, str] = field(default_factory=lambda: _EMPTY, compare=False)
    owner: OwnerRef | None = None
    scheduler_name: str = "default-scheduler"
    priority: int = 0
    priority_class_name: str = ""
    terminating: bool = False
    local_storage: bool = False
    tolerations: tuple[Toleration, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=lambda: _EMPTY, compare=False)
    created_s: float = 0.0
    usage: Resources | None = None
    ready: bool | None = None
    resource_version: str = ""
    terms: PodTerms = field(default_factory=lambda: NO_TERMS, compare=False)
    restarts: int = 0
    last_terminated_s: float | None = None

    @property
    def key(self) -> str:
        """``namespace/name``, the usual Kubernetes object key."""
        return f"{self.namespace}/{self.name}"

    @property
    def is_mirror(self) -> bool:
        """Static pods appear in the API as mirror pods carrying this annotation."""
        return ANNOTATION_MIRROR in self.annotations

    @property
    def is_daemonset(self) -> bool:
        return self.owner is not None and self.owner.kind == "DaemonSet"

    @property
    def is_bound(self) -> bool:
        return self.node_name is not None


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A metav1.LabelSelector: ``match_labels`` AND every expression ``(key, operator, values)``.

    An empty selector matches everything (as for a PodDisruptionBudget in policy/v1).
    """

    match_labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY, compare=False)
    match_expressions: tuple[tuple[str, str, tuple[str, ...]], ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        for k, v in self.match_labels.items():
            if labels.get(k) != v:
                return False
        for key, op, values in self.match_expressions:
            present = key in labels
            if op == "In" and not (present and labels[key] in values):
                return False
            if op == "NotIn" and present and labels[key] in values:
                return False
            if op == "Exists" and not present:
                return False
            if op == "DoesNotExist" and present:
                return False
        return True


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
    min_domains: int | None = None
    node_affinity_policy: str = "Honor"
    node_taints_policy: str = "Ignore"


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


NO_TERMS: PodTerms = PodTerms()


def node_matches_required(pod: PodInfo, terms: PodTerms, labels: Mapping[str, str]) -> bool:
    """The pod's required node affinity: ``nodeSelector`` AND (any required NodeSelectorTerm, if set)."""
    if any(labels.get(k) != v for k, v in pod.node_selector.items()):
        return False
    if terms.required_node_affinity and not any(t.matches(labels) for t in terms.required_node_affinity):
        return False
    return True


def noexecute_toleration_s(pod: PodInfo, taint_key: str) -> float | None:
    """Seconds ``pod`` stays on a node with NoExecute taint ``taint_key`` (no value), as the taint manager reads its
    tolerations (k8s.io/kubernetes pkg/controller/tainteviction: the first toleration that matches,
    ``GetMatchingTolerations``; its ``tolerationSeconds``, negative counting as 0, ``getMinTolerationTime``):
    ``None`` = forever (the matching toleration has no seconds), 0 = none matches (deleted at once)."""
    t = Taint(taint_key, "", "NoExecute")
    tol = next((x for x in pod.tolerations if x.tolerates(t)), None)
    if tol is None:
        return 0.0
    return None if tol.seconds is None else max(0.0, float(tol.seconds))


def selector_from_labels(keys: Sequence[str], labels: Mapping[str, str]) -> dict[str, str]:
    """matchLabelKeys: the pod's own values of ``keys`` (missing keys skipped)."""
    return {k: labels[k] for k in keys if k in labels}


@dataclass(frozen=True, slots=True)
class PodDisruptionBudgetInfo:
    """A policy/v1 PodDisruptionBudget. ``disruptions_allowed`` is status.disruptionsAllowed as written by
    the disruption controller (``None`` when the status is missing: treat as "unknown", i.e. do not evict).
    ``min_available`` / ``max_unavailable`` keep the spec value as given (int or "50%"). ``generation`` /
    ``observed_generation``: ``metadata.generation`` and ``status.observedGeneration`` (``None`` when absent;
    a status computed for an older spec is not trusted); ``disrupted_pods``: names in
    ``status.disruptedPods`` (evictions the API server accepted that the controller has not seen go yet)."""

    name: str
    namespace: str
    selector: LabelSelector
    min_available: int | str | None = None
    max_unavailable: int | str | None = None
    disruptions_allowed: int | None = None
    generation: int | None = None
    observed_generation: int | None = None
    disrupted_pods: tuple[str, ...] = ()

    def covers(self, pod: PodInfo) -> bool:
        return pod.namespace == self.namespace and self.selector.matches(pod.labels)


@dataclass(frozen=True, slots=True)
class WorkloadInfo:
    """A scalable workload (apps/v1 Deployment or StatefulSet) and its pod template's needs.

    ``replicas`` is spec.replicas; ``pod_requests`` / ``pod_limits`` are per pod. ``depends_on`` lists the
    services named by the ``hrl-scheduler.io/depends-on`` annotation (on the workload or its template).
    """

    name: str
    namespace: str
    service: str
    kind: str = "Deployment"
    replicas: int = 1
    selector: LabelSelector = LabelSelector()
    pod_requests: Resources = Resources()
    pod_limits: Resources = Resources()
    template_labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY, compare=False)
    annotations: Mapping[str, str] = field(default_factory=lambda: _EMPTY, compare=False)
    depends_on: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ServiceEdge:
    """A caller → callee dependency of the call graph.

    ``rps``: calls per second from caller to callee (``None`` when only declared, not measured).
    ``calls_per_request``: mean calls to the callee per request the caller serves (multiplicity, >= 0).
    Latencies are of the callee side, in ms; ``error_rate`` is a fraction 0..1.
    """

    caller: str
    callee: str
    rps: float | None = None
    calls_per_request: float | None = None
    latency_mean_ms: float | None = None
    latency_p50_ms: float | None = None
    latency_p95_ms: float | None = None
    latency_p99_ms: float | None = None
    error_rate: float | None = None
    parallel: bool = False


#: The measured values of a :class:`ServiceEdge` (numbers; ``None`` when unknown), in field order: ``rps``,
#: ``calls_per_request``, the callee-side latencies and ``error_rate``. Every reader, writer and merger of edges
#: iterates this list.
EDGE_MEASURES: tuple[str, ...] = tuple(
    f.name for f in fields(ServiceEdge) if f.name not in ("caller", "callee", "parallel")
)
#: The optional fields of an edge besides ``caller`` and ``callee``: the measures and ``parallel``.
EDGE_FIELDS: tuple[str, ...] = (*EDGE_MEASURES, "parallel")


@dataclass(frozen=True, slots=True)
class ServiceGraph:
    """The services' call topology: a directed multigraph-free graph of :class:`ServiceEdge`.

    ``services`` is sorted and includes every endpoint of every edge; ``edges`` is sorted by
    (caller, callee) and holds at most one edge per pair. Self-edges are allowed (Alibaba traces record them).
    Build with :meth:`build`, which enforces these invariants.
    """

    services: tuple[str, ...] = ()
    edges: tuple[ServiceEdge, ...] = ()
    source: str = ""

    @staticmethod
    def build(services: Iterable[str], edges: Iterable[ServiceEdge], source: str = "") -> ServiceGraph:
        """Normalise: union the edge endpoints into ``services``, merge duplicate (caller, callee) pairs
        (rates add up; ``parallel`` when any says so; other fields keep the first known value), sort both."""
        merged: dict[tuple[str, str], ServiceEdge] = {}
        for e in edges:
            k = (e.caller, e.callee)
            if k in merged:
                merged[k] = _merge_edges(merged[k], e)
            else:
                merged[k] = e
        names = set(services)
        for c, d in merged:
            names.add(c)
            names.add(d)
        return ServiceGraph(
            services=tuple(sorted(names)),
            edges=tuple(merged[k] for k in sorted(merged)),
            source=source,
        )

    def edge(self, caller: str, callee: str) -> ServiceEdge | None:
        for e in self.edges:
            if e.caller == caller and e.callee == callee:
                return e
        return None

    def callees(self, service: str) -> tuple[ServiceEdge, ...]:
        return tuple(e for e in self.edges if e.caller == service)

    def callers(self, service: str) -> tuple[ServiceEdge, ...]:
        return tuple(e for e in self.edges if e.callee == service)

    def neighbor_weights(self, service: str, default_rps: float = 1.0) -> dict[str, float]:
        """Call rate (rps, both directions summed) between ``service`` and each neighbour, self excluded.
        Edges without a measured rate count ``default_rps``."""
        w: dict[str, float] = {}
        for e in self.edges:
            if e.caller == e.callee:
                continue
            r = default_rps if e.rps is None else e.rps
            if e.caller == service:
                w[e.callee] = w.get(e.callee, 0.0) + r
            elif e.callee == service:
                w[e.caller] = w.get(e.caller, 0.0) + r
        return w

    def entry_services(self) -> tuple[str, ...]:
        """Services no other service calls (self-calls ignored): where user requests enter."""
        called = {e.callee for e in self.edges if e.caller != e.callee}
        return tuple(s for s in self.services if s not in called)

    def with_edges(self, edges: Iterable[ServiceEdge]) -> ServiceGraph:
        return ServiceGraph.build(self.services, edges, self.source)

    def to_json(self) -> dict:
        """The ``hrl-policy graph --json`` shape: ``{"services": [...], "edges": [{"caller", "callee", "rps", ...}]}``.
        Unknown values are omitted except ``rps`` (``null`` when unknown); ``parallel`` only when true.
        :func:`policy.topology.edges.load_edges` reads it back."""
        out_edges = []
        for e in self.edges:
            d: dict[str, object] = {"caller": e.caller, "callee": e.callee, "rps": _round(e.rps)}
            for name in EDGE_MEASURES[1:]:  # rps first, null when unknown
                v = getattr(e, name)
                if v is not None:
                    d[name] = _round(v)
            if e.parallel:
                d["parallel"] = True
            out_edges.append(d)
        return {"services": list(self.services), "edges": out_edges}

    def to_networkx(self):
        """A ``networkx.DiGraph`` with the edge fields as edge attributes."""
        import networkx as nx  # deferred: the servers never build one

        g = nx.DiGraph()
        g.add_nodes_from(self.services)
        for e in self.edges:
            g.add_edge(
                e.caller, e.callee, rps=e.rps, calls_per_request=e.calls_per_request, latency_p95_ms=e.latency_p95_ms
            )
        return g


def _round(v: float | None) -> float | None:
    if v is None or not math.isfinite(v):
        return None
    return round(float(v), 6)


def _merge_edges(a: ServiceEdge, b: ServiceEdge) -> ServiceEdge:
    rps = a.rps if b.rps is None else (b.rps if a.rps is None else a.rps + b.rps)
    kw: dict[str, Any] = {"rps": rps, "parallel": a.parallel or b.parallel}
    for name in EDGE_MEASURES[1:]:  # rps summed above
        if getattr(a, name) is None and getattr(b, name) is not None:
            kw[name] = getattr(b, name)
    return replace(a, **kw)


@dataclass(frozen=True, slots=True)
class ServiceSignals:
    """What service metrics (a mesh or OpenTelemetry span metrics in Prometheus, :mod:`policy.topology.prometheus`;
    or the simulator, ``policy.sim.drpc.signals_from_sim``) say about one service over the last window:
    ``rps`` arrivals (requests/s, retries included, >= 0), ``latency_mean_ms`` / ``latency_p95_ms`` the mean and
    95th percentile of its visit latency (its own calls included, ms), ``refused_frac`` the share of arrivals
    refused or failed at the service (0..1). ``None`` = unknown."""

    rps: float | None = None
    latency_mean_ms: float | None = None
    refused_frac: float | None = None
    latency_p95_ms: float | None = None


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """Everything a scheduling decision reads, at one instant ``taken_at_s`` (unix seconds or sim time).

    ``pods`` includes Pending pods (``node_name is None``); ``graph`` may be empty when unknown.
    """

    nodes: tuple[NodeInfo, ...] = ()
    pods: tuple[PodInfo, ...] = ()
    pdbs: tuple[PodDisruptionBudgetInfo, ...] = ()
    workloads: tuple[WorkloadInfo, ...] = ()
    graph: ServiceGraph = ServiceGraph()
    taken_at_s: float = 0.0

    def node(self, name: str) -> NodeInfo | None:
        for n in self.nodes:
            if n.name == name:
                return n
        return None

    def pods_on(self, node_name: str) -> tuple[PodInfo, ...]:
        return tuple(p for p in self.pods if p.node_name == node_name and not p.terminating)

    def requested_on(self, node_name: str) -> Resources:
        """Sum of the requests of the non-terminating pods bound to ``node_name``."""
        total = Resources()
        for p in self.pods_on(node_name):
            total = total + p.requests
        return total

    def requested_by_node(self) -> dict[str, Resources]:
        out = {n.name: Resources() for n in self.nodes}
        for p in self.pods:
            if p.node_name in out and not p.terminating:
                out[p.node_name] = out[p.node_name] + p.requests
        return out

    def pods_of_service(self, service: str) -> tuple[PodInfo, ...]:
        return tuple(p for p in self.pods if p.service == service and not p.terminating)

    def with_graph(self, graph: ServiceGraph) -> ClusterSnapshot:
        return replace(self, graph=graph)


# ---- what the high-level policy decides -------------------------------------------------------------

MoveReason = Literal["locality", "overload", "balance", "policy", "node-lost"]


@dataclass(frozen=True, slots=True)
class Move:
    """Evict ``pod`` (namespace/name) from ``from_node`` so the scheduler re-places it; ``to_node`` is
    where the planner expects it to land (advice, the scheduler decides). ``gain`` is the planner's own
    estimate of the benefit (unitless, > 0)."""

    pod: str
    from_node: str
    to_node: str | None
    reason: MoveReason
    gain: float = 0.0


@dataclass(frozen=True, slots=True)
class Resize:
    """Resize ``pod`` (namespace/name) in place (Kubernetes in-place pod resize, the ``pods/resize`` subresource,
    KEP-1287): every container's CPU request and limit scaled so the pod's total request becomes
    ``cpu_request_m`` (millicores; the limit keeps its ratio to the request, none stays none). ``from_cpu_request_m``
    is the pod's total request the plan saw (the executor refuses a pod that changed since); ``reason`` why
    (``burst``: above its capacity target with room on its node; ``release``: back toward its template's request);
    ``gain`` the planner's estimate of the benefit (unitless, > 0)."""

    pod: str
    from_cpu_request_m: int
    cpu_request_m: int
    reason: str
    gain: float = 0.0


@dataclass(frozen=True, slots=True)
class Plan:
    """One descheduling cycle's plan: moves (evictions), per-workload replica targets (``namespace/name`` →
    replicas), the :class:`~policy.intent.Intent` passed down to the extender (its vector and per-service
    co-location priorities; its capacity targets, the target CPU utilization each autoscaler worked to, for
    reports), and ``resizes``: in-place pod resizes (the low level's fine-grained allocation)."""

    moves: tuple[Move, ...] = ()
    replica_targets: Mapping[str, int] = field(default_factory=lambda: _EMPTY, compare=False)
    intent: Intent = NO_INTENT
    resizes: tuple[Resize, ...] = ()


EvictionOutcome = Literal["evicted", "refused", "not_found", "error", "dry_run"]


@dataclass(frozen=True, slots=True)
class EvictionResult:
    """What an evictor (real Eviction API, dry run, simulator) did with one pod.

    ``outcome``: ``evicted`` (accepted), ``refused`` (a PodDisruptionBudget said no: HTTP 429, an outcome not
    an error), ``not_found`` (already gone: 404), ``error`` (anything else; the pod is left alone), ``dry_run``
    (would have evicted; nothing changed). ``message`` is a one-line human explanation.
    """

    pod: str
    outcome: EvictionOutcome
    message: str = ""
