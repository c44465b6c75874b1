"""Resizers: the descheduler changes a running pod's CPU request in place only through the ``pods/resize``
subresource (Kubernetes in-place pod resize, KEP-1287 "In-place Update of Pod Resources": beta in 1.33, GA in 1.35;
kubernetes.io/docs/tasks/configure-pod-container/resize-container-resources).

The plan's :class:`policy.state.Resize` orders (``policy.highlevel.ResizePlanner``) are carried out after the
cycle's evictions and scaling by :func:`execute_resizes`, behind guards that fail closed (when unsure, don't):

    observe() once more (fails: every resize ``skipped``); the cooldown record of the state file (unreadable:
    every resize ``skipped``); then per planned resize, in plan order (largest relative change first):
        excluded namespace, or not a pod of a Deployment (ReplicaSet owner)       -> blocked
        not in the cluster any more                                               -> not_found
        terminating, not Running or unbound                                       -> not_running
        re-created (another UID) or its CPU request is not ``from_cpu_request_m``  -> changed
        resized less than ``resize.cooldownSeconds`` ago (real resizes only)      -> cooldown
        ``resize.maxPerCycle`` resizes (or dry-run resizes) made this cycle       -> capped
        :func:`bound_resize` (``maxStep``, ``maxBurst``, ``minChange``) leaves it  -> unchanged
        its node has less free CPU (allocatable - requests, minus this cycle's
        earlier resizes) than the increase                                        -> no_room
        resizer.resize(order)          resized / unchanged / refused_vpa / refused_restart / changed /
                                       not_running / not_found / unsupported / error / dry_run

A :class:`Resizer` says what it did as a :class:`ResizeResult`; its outcomes (:data:`RESIZER_OUTCOMES`):

- ``resized``: the API server accepted the new requests (and answered with them);
- ``unchanged``: the pod's containers already have those requests (nothing sent);
- ``refused_vpa``: a VerticalPodAutoscaler (``autoscaling.k8s.io/v1``) whose ``spec.targetRef`` names the pod's
  Deployment (or its ReplicaSet), with an ``updatePolicy.updateMode`` other than ``Off``, owns the pod's requests:
  we refuse to fight it and leave the pod alone (as the scaler does for an HPA, ``refused_hpa``);
- ``refused_restart``: a container whose CPU would change has ``resizePolicy`` ``RestartContainer`` for CPU: the
  resize would restart it, which is a disruption the descheduler does not cause this way;
- ``changed``: the pod is not the one planned for any more (re-created, or its request changed, or the API server
  answered 409 Conflict to the ``resourceVersion`` precondition); ``not_running``: terminating / not Running;
- ``not_found``: no such pod (404); ``unsupported``: the cluster or the pod cannot be resized in place (the API
  server has no ``pods/resize`` or answers "Pod running on node without support for resize"; pod-level
  ``spec.resources``; an init container or overhead that makes the pod's request other than its containers' sum;
  a simulator without ``resize``);
- ``no_room``: the node cannot take the new request (the API server's ``PodResizeValidator`` admission answers 403
  "node didn't have enough allocatable resources"; :func:`execute_resizes` decides it first, from the node's free
  CPU, which is stricter);
- ``error``: anything else (API errors, RBAC, no answer, an answer without the new request); nothing is retried;
- ``dry_run``: it would have been resized; nothing changed.

:func:`execute_resizes` adds ``blocked``, ``capped``, ``cooldown`` and ``skipped`` (:data:`RESIZE_OUTCOMES`: all
of them, the ``outcome`` label values of ``hrl_descheduler_resizes_total``).

The request: every container's CPU request is scaled by the same factor so that the containers' total becomes the
target (integer millicores, the remainder to the largest fractional parts, each >= 1m); a CPU limit keeps its ratio
to the request (a limit equal to the request stays equal, so the QoS class never changes; a limit above it stays
above it), a container without a CPU request or limit keeps none; memory is never touched
(:func:`split_cpu_request`). The PATCH is a strategic-merge patch of ``spec.containers[].resources`` carrying the
``metadata.resourceVersion`` the resizer just read (the API server answers 409 when the pod changed in between).

Implementations: :class:`ApiResizer` over a small :class:`ResizeApi` (the real one is
``descheduler.kube.KubeResizer``: VPAs through the custom-objects API, GET pod, PATCH ``pods/{name}/resize``);
:class:`DryRunResizer`; and
:class:`GatedResizer` (leader election). A resizer that can do a read-only pass offers it as ``dry_run_twin()``;
:func:`dry_run_resizer` picks it, else a :class:`DryRunResizer`. :func:`safe_resize` turns an exception or a
malformed answer into ``error``. The simulator's (``policy.sim.subresources.SimResizer``) lives on the simulation side.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, get_args, runtime_checkable

from policy.observe import ObjectError, parse_cpu_m, parse_pod
from policy.state import ClusterSnapshot, PodInfo, Resize, WorkloadInfo

from .guards import EvictionHistory, HistoryError
from .scale import split_key

if TYPE_CHECKING:
    from .config import DeschedulerConfiguration

__all__ = [
    "ResizeOutcome",
    "RESIZER_OUTCOMES",
    "RESIZE_OUTCOMES",
    "RESIZE_SECTION",
    "ResizeOrder",
    "ResizeResult",
    "Resizer",
    "ResizeApi",
    "ResizeApiError",
    "ResizeRefused",
    "ContainerCpu",
    "ApiResizer",
    "DryRunResizer",
    "GatedResizer",
    "container_cpu",
    "split_cpu_request",
    "resize_patch",
    "vpa_targeting",
    "bound_resize",
    "deployment_of",
    "node_free_cpu_m",
    "dry_run_resizer",
    "safe_resize",
    "execute_resizes",
]

ResizeOutcome = Literal[
    "resized",
    "unchanged",
    "refused_vpa",
    "refused_restart",
    "changed",
    "not_running",
    "not_found",
    "unsupported",
    "error",
    "dry_run",
    "blocked",
    "no_room",
    "capped",
    "cooldown",
    "skipped",
]
#: What a :class:`Resizer` may answer.
RESIZER_OUTCOMES: tuple[str, ...] = (
    "resized",
    "unchanged",
    "refused_vpa",
    "refused_restart",
    "changed",
    "not_running",
    "not_found",
    "unsupported",
    "error",
    "dry_run",
    "no_room",
)
#: Every resize outcome of a cycle: the resizer's eleven and :func:`execute_resizes`'s ``blocked``, ``capped``,
#: ``cooldown`` and ``skipped`` (the ``outcome`` label values of ``hrl_descheduler_resizes_total``).
RESIZE_OUTCOMES: tuple[str, ...] = get_args(ResizeOutcome)
#: The state-file section (:class:`descheduler.guards.EvictionHistory`) holding the last real resize of each pod:
#: ``{"version": 1, "pods": {"namespace/name": unix seconds}}``.
RESIZE_SECTION = "resizes"


@dataclass(frozen=True, slots=True)
class ResizeOrder:
    """One resize to carry out: ``pod`` (``namespace/name``; ``uid`` when known: another UID is another pod),
    ``workload`` (``namespace/name`` of its Deployment; ``replica_set``: the name of its ReplicaSet), the pod's
    total CPU request now (``from_cpu_request_m``, millicores > 0) and the one asked for (``cpu_request_m`` > 0),
    and the planner's ``reason`` (``burst`` / ``release``)."""

    pod: str
    from_cpu_request_m: int
    cpu_request_m: int
    workload: str = ""
    replica_set: str = ""
    uid: str = ""
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ResizeResult:
    """What became of one planned resize: ``pod``, ``outcome`` (one of :data:`RESIZE_OUTCOMES`), the pod's CPU
    request before (``from_cpu_request_m``, millicores, when known), the request asked of the resizer after the
    bounds (``cpu_request_m``; ``None`` when none was computed), the planner's raw target (``planned``), its
    ``reason``, the ``workload`` (Deployment ``namespace/name``, when known) and a one-line ``message``."""

    pod: str
    outcome: ResizeOutcome
    from_cpu_request_m: int | None = None
    cpu_request_m: int | None = None
    planned: int | None = None
    reason: str = ""
    workload: str = ""
    message: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "workload": self.workload,
            "reason": self.reason,
            "outcome": self.outcome,
            "from_cpu_request_m": self.from_cpu_request_m,
            "cpu_request_m": self.cpu_request_m,
            "planned_cpu_request_m": self.planned,
            "message": self.message,
        }


@runtime_checkable
class Resizer(Protocol):
    """Resize one running pod's CPU request in place (see :class:`ResizeOrder`, the module docstring)."""

    def resize(self, order: ResizeOrder) -> ResizeResult: ...


# ---- the request: pure functions --------------------------------------------------------------------------------


class ResizeRefused(ValueError):
    """The pod cannot be resized as asked: ``outcome`` (``unsupported`` / ``refused_restart``) and a one-line
    message."""

    def __init__(self, outcome: ResizeOutcome, message: str):
        super().__init__(message)
        self.outcome: ResizeOutcome = outcome


@dataclass(frozen=True, slots=True)
class ContainerCpu:
    """One container's CPU: ``request_m`` (0: none) and ``limit_m`` (``None``: none), millicores."""

    name: str
    request_m: int
    limit_m: int | None = None


def container_cpu(pod: Mapping[str, Any]) -> list[ContainerCpu]:
    """The CPU request and limit of every container of ``pod`` (core/v1 Pod JSON), in spec order. A limit without
    a request counts as both (API defaulting, as :func:`policy.observe.parse_pod`). Raises
    :class:`policy.observe.ObjectError` naming the field for a malformed quantity."""
    out = []
    for i, c in enumerate((pod.get("spec") or {}).get("containers") or ()):
        res = c.get("resources") or {}
        path = f"spec.containers[{i}].resources"
        lim = (res.get("limits") or {}).get("cpu")
        req = (res.get("requests") or {}).get("cpu", lim)
        out.append(
            ContainerCpu(
                str(c.get("name", "")),
                parse_cpu_m(req, f"{path}.requests.cpu") if req is not None else 0,
                parse_cpu_m(lim, f"{path}.limits.cpu") if lim is not None else None,
            )
        )
    return out


def split_cpu_request(containers: Sequence[ContainerCpu], target_m: int) -> list[ContainerCpu]:
    """``containers`` with their CPU requests scaled by one factor so that they sum to ``target_m`` millicores
    (> 0): floors of ``request × target / total``, the remainder going one millicore at a time to the largest
    fractional parts (ties: the first container); every requesting container keeps >= 1m. A limit keeps its ratio
    to the request (``round(limit × new / old)``): equal stays equal, above stays at least 1m above; no limit stays
    none; a container without a request keeps none. Raises ValueError when no container requests CPU or when
    ``target_m`` is below one millicore per requesting container."""
    idx = [i for i, c in enumerate(containers) if c.request_m > 0]
    total = sum(containers[i].request_m for i in idx)
    if not idx:
        raise ValueError("no container has a CPU request")
    if target_m < len(idx):
        raise ValueError(f"target {target_m}m is below 1m per container requesting CPU ({len(idx)})")
    share = {i: containers[i].request_m * target_m for i in idx}  # / total
    new = {i: share[i] // total for i in idx}
    left = target_m - sum(new.values())
    for i in sorted(idx, key=lambda i: (-(share[i] % total), i))[:left]:
        new[i] += 1
    for i in idx:  # >= 1m each: take from the largest
        while new[i] < 1:
            j = max(idx, key=lambda k: (new[k], -k))
            new[j] -= 1
            new[i] += 1
    out = list(containers)
    for i in idx:
        c = containers[i]
        lim = c.limit_m
        if lim is not None:
            if lim == c.request_m:
                lim = new[i]
            else:
                lim = (lim * new[i] * 2 + c.request_m) // (2 * c.request_m)  # round half up
                if c.limit_m is not None and c.limit_m > c.request_m:
                    lim = max(lim, new[i] + 1)
        out[i] = ContainerCpu(c.name, new[i], lim)
    return out


def _restart_on_cpu(container: Mapping[str, Any]) -> bool:
    for p in container.get("resizePolicy") or ():
        if p.get("resourceName") == "cpu" and p.get("restartPolicy") == "RestartContainer":
            return True
    return False


def resize_patch(pod: Mapping[str, Any], target_m: int) -> dict[str, Any] | None:
    """The strategic-merge patch of ``pods/{name}/resize`` that makes ``pod``'s (core/v1 Pod JSON, as read) total
    CPU request ``target_m`` millicores (see :func:`split_cpu_request`), carrying the pod's
    ``metadata.resourceVersion`` as a precondition; ``None`` when no container's CPU would change.

    Raises :class:`ResizeRefused`: ``unsupported`` for pod-level ``spec.resources``, for a pod whose effective
    request (:func:`policy.observe.parse_pod`: init containers, overhead) is not its containers' sum plus overhead,
    or for a target not above the overhead; ``refused_restart`` when a container whose CPU changes has the resize
    policy ``RestartContainer`` for CPU. Raises :class:`policy.observe.ObjectError` for a malformed pod."""
    spec = pod.get("spec") or {}
    if (spec.get("resources") or {}).get("requests") or (spec.get("resources") or {}).get("limits"):
        raise ResizeRefused("unsupported", "pod-level spec.resources: only container resources are resized")
    cpus = container_cpu(pod)
    overhead = (spec.get("overhead") or {}).get("cpu")
    overhead_m = parse_cpu_m(overhead, "spec.overhead.cpu") if overhead is not None else 0
    effective = parse_pod(pod).requests.cpu_m
    if effective != sum(c.request_m for c in cpus) + overhead_m:
        raise ResizeRefused(
            "unsupported",
            f"the pod's CPU request ({effective}m) is not its containers' sum (init containers or overhead decide it)",
        )
    try:
        new = split_cpu_request(cpus, target_m - overhead_m)
    except ValueError as exc:
        raise ResizeRefused("unsupported", str(exc)) from None
    containers = []
    for c_json, old, c in zip(spec.get("containers") or (), cpus, new, strict=True):
        if (old.request_m, old.limit_m) == (c.request_m, c.limit_m):
            continue
        if _restart_on_cpu(c_json):
            raise ResizeRefused(
                "refused_restart", f"container {c.name!r} restarts on a CPU resize (resizePolicy RestartContainer)"
            )
        res: dict[str, Any] = {}
        if old.request_m > 0:
            res["requests"] = {"cpu": f"{c.request_m}m"}
        if c.limit_m is not None:
            res["limits"] = {"cpu": f"{c.limit_m}m"}
        containers.append({"name": c.name, "resources": res})
    if not containers:
        return None
    meta = pod.get("metadata") or {}
    body: dict[str, Any] = {"spec": {"containers": containers}}
    if meta.get("resourceVersion"):
        body["metadata"] = {"resourceVersion": str(meta["resourceVersion"])}
    return body


def vpa_targeting(vpas: Iterable[Mapping[str, Any]], deployment: str, replica_set: str = "") -> str | None:
    """The name of the first VerticalPodAutoscaler (``autoscaling.k8s.io/v1`` JSON) among ``vpas`` that owns the
    pods of Deployment ``deployment`` (its name): ``spec.targetRef`` names it (kind ``Deployment``, apiVersion in
    group ``apps`` / ``extensions`` or none) or its ReplicaSet ``replica_set`` (kind ``ReplicaSet``), and its
    ``spec.updatePolicy.updateMode`` is not ``Off`` (absent: the VPA default ``Auto``, which acts). Any other
    mode (``Initial``, ``Recreate``, ``Auto``, ``InPlaceOrRecreate``, or one unknown to us) counts as owning,
    whatever its ``resourcePolicy``: fail closed. Source: the VPA CRD (kubernetes/autoscaler
    vertical-pod-autoscaler/deploy/vpa-v1-crd-gen.yaml, ``targetRef``: CrossVersionObjectReference)."""
    for v in sorted(vpas, key=lambda v: str((v.get("metadata") or {}).get("name", ""))):
        spec = v.get("spec") or {}
        mode = str((spec.get("updatePolicy") or {}).get("updateMode") or "Auto")
        if mode == "Off":
            continue
        ref = spec.get("targetRef") or {}
        api_version = str(ref.get("apiVersion") or "")
        group = api_version.split("/")[0] if "/" in api_version else ""
        kind, name = ref.get("kind"), ref.get("name")
        if group not in ("", "apps", "extensions"):
            continue
        if (kind == "Deployment" and name == deployment) or (
            kind == "ReplicaSet" and replica_set and name == replica_set
        ):
            return str((v.get("metadata") or {}).get("name", "?"))
    return None


def bound_resize(
    current_m: int, planned_m: int, template_m: int, *, max_step: float, max_burst: float, min_change: float
) -> int | None:
    """The CPU request (millicores) to ask for, or ``None`` when it would not change enough: ``planned_m``
    within ``max_step`` (a fraction of ``current_m``) of ``current_m``; a growth at most ``template_m ×
    max_burst`` (the template's request; 0: unknown, no such bound) and never taking a pod already above that
    further up; a shrink never below ``template_m`` (scaling in is the horizontal autoscaler's job) unless the
    pod is already below it. ``None`` when the change is under ``current_m × min_change / 2`` (the planner's
    threshold, :class:`policy.highlevel.ResizePlanner`)."""
    cur, want = int(current_m), int(planned_m)
    if want > cur:
        hi = math.floor(cur * (1 + max_step))
        if template_m > 0:
            hi = min(hi, max(cur, math.floor(template_m * max_burst)))
        target = min(want, hi)
    elif want < cur:
        lo = math.ceil(cur * (1 - max_step))
        if template_m > 0:
            lo = max(lo, min(cur, int(template_m)))
        target = max(want, max(lo, 1))
    else:
        target = cur
    if abs(target - cur) < cur * min_change / 2 or target == cur:
        return None
    return int(target)


def deployment_of(pod: PodInfo, snapshot: ClusterSnapshot) -> WorkloadInfo | None:
    """The Deployment whose pod ``pod`` is: its controller owner is a ReplicaSet named ``<deployment>-<hash>`` and
    the Deployment's (non-empty) selector matches its labels; ``None`` otherwise (a bare pod, a StatefulSet's)."""
    if pod.owner is None or pod.owner.kind != "ReplicaSet":
        return None
    for w in snapshot.workloads:
        if (
            w.kind == "Deployment"
            and w.namespace == pod.namespace
            and pod.owner.name.startswith(f"{w.name}-")
            and (w.selector.match_labels or w.selector.match_expressions)
            and w.selector.matches(pod.labels)
        ):
            return w
    return None


def node_free_cpu_m(snapshot: ClusterSnapshot) -> dict[str, int]:
    """Node → allocatable CPU minus the requests of the non-terminating pods bound to it (millicores; may be
    negative on an over-committed node)."""
    free = {n.name: int(n.allocatable.cpu_m) for n in snapshot.nodes}
    for p in snapshot.pods:
        if p.node_name in free and not p.terminating:
            free[p.node_name] -= int(p.requests.cpu_m)
    return free


# ---- the API resizer ----------------------------------------------------------------------------------------------


class ResizeApiError(Exception):
    """A :class:`ResizeApi` call failed: ``status`` is the HTTP status (``None``: no answer), ``message`` one line,
    ``kind`` the ``details.kind`` of the API server's Status (``pods`` for a missing pod), when it said."""

    def __init__(self, status: int | None, message: str, kind: str = ""):
        super().__init__(f"{status}: {message}" if status is not None else message)
        self.status = status
        self.message = message
        self.kind = kind


class ResizeApi(Protocol):
    """The slice of the Kubernetes API a resizer uses (raw camelCase JSON). Each call raises
    :class:`ResizeApiError` on failure.

    - ``list_vpas(namespace)``: the ``autoscaling.k8s.io/v1`` VerticalPodAutoscalers of the namespace (404 when the
      API is not served: no VPA can exist then);
    - ``read_pod(namespace, name)``: the Pod (GET);
    - ``patch_pod_resize(namespace, name, body)``: PATCH ``pods/{name}/resize`` with ``body`` as a strategic-merge
      patch; answers the Pod after it.
    """

    def list_vpas(self, namespace: str) -> list[dict[str, Any]]: ...

    def read_pod(self, namespace: str, name: str) -> dict[str, Any]: ...

    def patch_pod_resize(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]: ...


_UNSUPPORTED_MARK = "without support for resize"
#: kube-apiserver's PodResizeValidator admission plugin (plugin/pkg/admission/podresize, 1.36): 403 Forbidden with
#: the cause NodeCapacity (the new requests exceed the node's allocatable) or UnsupportedPlatform (not Linux).
_NODE_CAPACITY_MARK = "node didn't have enough allocatable resources"
_PLATFORM_MARK = "pod resize is only supported on linux nodes"


class ApiResizer:
    """A :class:`Resizer` over a :class:`ResizeApi` (see the module docstring); ``dry_run=True`` reads (VPAs, the
    pod) and writes nothing. ``calls``: ``(pod, outcome)`` of every call, in order.

    For each order: list the namespace's VPAs (404: the VPA API is not served, so none exists; any other failure →
    ``error``: without knowing, we do not touch it); a VPA owning the Deployment (:func:`vpa_targeting`) →
    ``refused_vpa``; an order without a ``workload`` → ``error`` (the VPA check needs it). GET the pod (404 →
    ``not_found``); another UID → ``changed``; a deletionTimestamp, a phase other than Running or no node →
    ``not_running``; a total CPU request (:func:`policy.observe.parse_pod`) other than ``from_cpu_request_m`` →
    ``changed``; :func:`resize_patch` (its refusals → their outcome; no change → ``unchanged``); dry run →
    ``dry_run``; else PATCH with the ``resourceVersion`` read: 409 → ``changed`` (not retried this cycle); 404 for
    the pod → ``not_found``, any other 404 (no ``pods/resize``) → ``unsupported``; 422 "Pod running on node
    without support for resize" → ``unsupported``; anything else → ``error``; an answer whose request is not the
    target → ``error``. Sources: k8s.io/kubernetes pkg/registry/core/pod/strategy.go (``podResizeStrategy``: only
    container resources and resize policies change) and pkg/apis/core/validation ``ValidatePodResize`` (the
    QoS class may not change; requests and limits may not be removed; a running pod needs
    ``status.containerStatuses[].resources``).
    """

    def __init__(self, api: ResizeApi, *, dry_run: bool = False):
        self.api = api
        self.dry_run = dry_run
        self.calls: list[tuple[str, str]] = []

    def dry_run_twin(self) -> ApiResizer:
        """The same resizer, reading only."""
        twin = ApiResizer(self.api, dry_run=True)
        twin.calls = self.calls
        return twin

    def resize(self, order: ResizeOrder) -> ResizeResult:
        res = self._resize(order)
        self.calls.append((order.pod, res.outcome))
        return res

    def _resize(self, o: ResizeOrder) -> ResizeResult:
        def out(outcome: ResizeOutcome, message: str, current: int | None = o.from_cpu_request_m) -> ResizeResult:
            return ResizeResult(o.pod, outcome, current, o.cpu_request_m, None, o.reason, o.workload, message)

        ns, name = split_key(o.pod)
        if not o.workload:
            return out("error", "no Deployment named: cannot check for a VerticalPodAutoscaler (not resized)")
        _wns, deployment = split_key(o.workload)
        try:
            vpas = self.api.list_vpas(ns)
        except ResizeApiError as exc:
            if exc.status != 404:
                return out("error", f"cannot check for a VerticalPodAutoscaler (not resized): {exc}")
            vpas = []  # the VPA API is not served: no VPA exists
        owner = vpa_targeting(vpas, deployment, o.replica_set)
        if owner is not None:
            return out("refused_vpa", f"VerticalPodAutoscaler {ns}/{owner} owns Deployment {o.workload}; left alone")
        try:
            pod = self.api.read_pod(ns, name)
        except ResizeApiError as exc:
            if exc.status == 404:
                return out("not_found", f"no such pod: {exc.message}", None)
            return out("error", f"cannot read the pod: {exc}", None)
        try:
            info = parse_pod(pod)
        except ObjectError as exc:
            return out("error", f"cannot read the pod: {exc}", None)
        if o.uid and info.uid and info.uid != o.uid:
            return out("changed", f"{o.pod} was re-created since planning (uid {info.uid})", None)
        if info.terminating or info.phase != "Running" or info.node_name is None:
            state = "terminating" if info.terminating else f"phase {info.phase}, node {info.node_name or '-'}"
            return out("not_running", f"{o.pod} is not running ({state})", info.requests.cpu_m)
        current = info.requests.cpu_m
        if current != o.from_cpu_request_m:
            return out(
                "changed", f"CPU request is {current}m, not the {o.from_cpu_request_m}m planned from; left", current
            )
        try:
            body = resize_patch(pod, o.cpu_request_m)
        except ResizeRefused as exc:
            return out(exc.outcome, str(exc), current)
        except ObjectError as exc:
            return out("error", f"cannot read the pod: {exc}", current)
        if body is None:
            return out("unchanged", f"CPU request already {current}m", current)
        change = f"{current}m -> {o.cpu_request_m}m CPU request"
        if self.dry_run:
            return out("dry_run", f"dry run: would resize in place {change}", current)
        try:
            answer = self.api.patch_pod_resize(ns, name, body)
        except ResizeApiError as exc:
            if exc.status == 409:
                return out("changed", f"the pod changed since it was read (409); not retried: {exc.message}", current)
            if exc.status == 404:
                if exc.kind == "pods" or f'"{name}" not found' in exc.message:
                    return out("not_found", f"gone: {exc.message}", current)
                return out("unsupported", f"the API server has no pods/resize: {exc.message}", current)
            if exc.status == 422 and _UNSUPPORTED_MARK in exc.message:
                return out("unsupported", f"the pod's node cannot resize in place: {exc.message}", current)
            if exc.status == 403 and _NODE_CAPACITY_MARK in exc.message:
                return out("no_room", f"the API server refused: {exc.message}", current)
            if exc.status == 403 and _PLATFORM_MARK in exc.message:
                return out("unsupported", f"the API server refused: {exc.message}", current)
            return out("error", f"pods/resize failed: {exc}", current)
        try:
            got = parse_pod(answer).requests.cpu_m
        except (ObjectError, AttributeError, TypeError) as exc:
            return out("error", f"pods/resize answered something that is not a pod: {exc}", current)
        if got != o.cpu_request_m:
            return out("error", f"pods/resize answered a CPU request of {got}m, not {o.cpu_request_m}m", current)
        return out("resized", f"resized in place through pods/resize: {change} (limits keep their ratio)", current)


@dataclass
class DryRunResizer:
    """Changes nothing and reads nothing: answers ``dry_run`` and remembers every order."""

    calls: list[ResizeOrder] = field(default_factory=list)
    dry_run: bool = True

    def resize(self, order: ResizeOrder) -> ResizeResult:
        self.calls.append(order)
        return ResizeResult(
            order.pod,
            "dry_run",
            order.from_cpu_request_m,
            order.cpu_request_m,
            None,
            order.reason,
            order.workload,
            f"dry run: would resize in place {order.from_cpu_request_m}m -> {order.cpu_request_m}m CPU request",
        )


class GatedResizer:
    """Asks ``allowed()`` before every resize; when it says no, answers ``error`` with ``why`` and calls nothing
    (fail closed, as :class:`descheduler.scale.GatedScaler` does for scaling)."""

    def __init__(self, inner: Resizer, allowed: Callable[[], bool], why: str = "not the leader any more"):
        self.inner = inner
        self.allowed = allowed
        self.why = why
        self.dry_run = bool(getattr(inner, "dry_run", False))

    def dry_run_twin(self) -> Resizer:
        return GatedResizer(dry_run_resizer(self.inner), self.allowed, self.why)

    def resize(self, order: ResizeOrder) -> ResizeResult:
        if not self.allowed():
            return ResizeResult(
                order.pod,
                "error",
                order.from_cpu_request_m,
                order.cpu_request_m,
                None,
                order.reason,
                order.workload,
                f"not resized: {self.why}",
            )
        return self.inner.resize(order)


def dry_run_resizer(resizer: Resizer) -> Resizer:
    """``resizer`` itself when it is already a dry run, its ``dry_run_twin()`` when it has one, else a
    :class:`DryRunResizer`."""
    if getattr(resizer, "dry_run", False) is True:
        return resizer
    twin = getattr(resizer, "dry_run_twin", None)
    return twin() if callable(twin) else DryRunResizer()


def safe_resize(resizer: Resizer, order: ResizeOrder, *, planned: int | None = None) -> ResizeResult:
    """Call ``resizer.resize`` and make the answer trustworthy: an exception, a result that is not a
    :class:`ResizeResult`, about another pod or with an outcome a resizer may not give becomes ``error`` (the pod
    may or may not have been resized; it is counted as not resized). ``planned`` fills the result's field."""

    def err(message: str) -> ResizeResult:
        return ResizeResult(
            order.pod,
            "error",
            order.from_cpu_request_m,
            order.cpu_request_m,
            planned,
            order.reason,
            order.workload,
            message,
        )

    try:
        res = resizer.resize(order)
    except Exception as exc:  # noqa: BLE001 - fail closed on anything the resizer throws
        return err(f"resizer raised {type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
    if not isinstance(res, ResizeResult):
        return err(f"resizer returned {type(res).__name__}, not a ResizeResult")
    if res.outcome not in RESIZER_OUTCOMES:
        return err(f"resizer returned outcome {res.outcome!r}, which a resizer may not give")
    if res.pod != order.pod:
        return err(f"resizer answered about {res.pod!r}, not {order.pod!r}")
    return ResizeResult(
        order.pod,
        res.outcome,
        res.from_cpu_request_m if res.from_cpu_request_m is not None else order.from_cpu_request_m,
        res.cpu_request_m if res.cpu_request_m is not None else order.cpu_request_m,
        planned,
        order.reason,
        order.workload,
        res.message,
    )


# ---- the executor: guards, caps, cooldown ------------------------------------------------------------------------


def _last_resizes(history: EvictionHistory | None) -> dict[str, float]:
    """The state file's resize record (pod → unix s); raises HistoryError for a malformed one."""
    if history is None:
        return {}
    doc = history.sections.get(RESIZE_SECTION)
    if doc is None:
        return {}
    where = f"{history.path or 'state'}: section {RESIZE_SECTION!r}"
    if not isinstance(doc, dict) or doc.get("version") != 1 or not isinstance(doc.get("pods"), dict):
        raise HistoryError(f'{where}: must be {{"version": 1, "pods": {{pod: unix seconds}}}}, got {doc!r}'[:300])
    out = {}
    for k, v in doc["pods"].items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise HistoryError(f"{where}: pods[{k!r}]: must be a finite number of seconds, got {v!r}")
        out[str(k)] = float(v)
    return out


def execute_resizes(
    resizes: Sequence[Resize],
    resizer: Resizer,
    config: DeschedulerConfiguration,
    observe: Callable[[], ClusterSnapshot],
    history: EvictionHistory | None,
    now_s: float,
    *,
    planned_uids: Mapping[str, str] | None = None,
) -> tuple[ResizeResult, ...]:
    """Carry out the plan's ``resizes`` (the module docstring: guards, then ``resizer``), one
    :class:`ResizeResult` each, in plan order. ``config.resize`` gives ``maxPerCycle``, ``cooldownSeconds``,
    ``maxStep``, ``maxBurst``, ``minChange``; ``config.excludedNamespaces`` the namespaces left alone.
    ``history``: where real resizes are recorded for the cooldown (section :data:`RESIZE_SECTION`, saved at once
    when it is bound to a file; ``None``: this cycle only); ``now_s``: the time recorded and compared (unix s, or
    simulated); ``planned_uids``: pod key → UID when the plan was made (another UID now → ``changed``).
    A dry-run resizer (``dry_run`` true) goes through every guard and the caps but records nothing. Never raises
    for the cluster: a failed ``observe()`` or an unreadable record skips every resize; a record that cannot be
    saved skips the rest."""
    if not resizes:
        return ()
    rc = config.resize
    dry = bool(getattr(resizer, "dry_run", False))

    def res(rz: Resize, outcome: ResizeOutcome, message: str, **kw: Any) -> ResizeResult:
        return ResizeResult(
            rz.pod,
            outcome,
            kw.get("current", rz.from_cpu_request_m),
            kw.get("target"),
            rz.cpu_request_m,
            rz.reason,
            kw.get("workload", ""),
            message,
        )

    try:
        fresh = observe()
        last = _last_resizes(history)
    except HistoryError as exc:
        return tuple(res(rz, "skipped", f"resizes stopped: {exc}") for rz in resizes)
    except Exception as exc:  # noqa: BLE001 - no resize without a fresh view
        why = f"resizes stopped: could not re-read the cluster: {type(exc).__name__}: {' '.join(str(exc).split())}"
        return tuple(res(rz, "skipped", why[:400]) for rz in resizes)
    pods = {p.key: p for p in fresh.pods}
    free = node_free_cpu_m(fresh)
    done = 0
    stop = ""
    out: list[ResizeResult] = []
    for rz in resizes:
        if stop:
            out.append(res(rz, "skipped", stop))
            continue
        ns = rz.pod.split("/", 1)[0]
        pod = pods.get(rz.pod)
        if ns in config.excluded_namespaces:
            out.append(res(rz, "blocked", f"namespace {ns} is excluded (excludedNamespaces)"))
            continue
        if pod is None:
            out.append(res(rz, "not_found", f"{rz.pod} is gone since planning", current=None))
            continue
        w = deployment_of(pod, fresh)
        wkey = f"{w.namespace}/{w.name}" if w is not None else ""
        if w is None:
            out.append(res(rz, "blocked", "not a Deployment's pod: only Deployments' pods are resized"))
            continue
        cur = int(pod.requests.cpu_m)
        if pod.terminating or pod.phase != "Running" or pod.node_name is None:
            out.append(res(rz, "not_running", f"{rz.pod} is not running", current=cur, workload=wkey))
            continue
        uid0 = (planned_uids or {}).get(rz.pod)
        if uid0 and pod.uid and uid0 != pod.uid:
            out.append(res(rz, "changed", f"{rz.pod} was re-created since planning", current=cur, workload=wkey))
            continue
        if cur != rz.from_cpu_request_m:
            out.append(
                res(
                    rz,
                    "changed",
                    f"CPU request is {cur}m, not the {rz.from_cpu_request_m}m planned from",
                    current=cur,
                    workload=wkey,
                )
            )
            continue
        at = last.get(rz.pod)
        if rc.cooldown_seconds > 0 and at is not None and now_s - at < rc.cooldown_seconds:
            out.append(
                res(
                    rz,
                    "cooldown",
                    f"resized {now_s - at:.0f} s ago (cooldownSeconds {rc.cooldown_seconds:g})",
                    current=cur,
                    workload=wkey,
                )
            )
            continue
        if done >= rc.max_per_cycle:
            out.append(
                res(rz, "capped", f"maxPerCycle ({rc.max_per_cycle}) resizes this cycle", current=cur, workload=wkey)
            )
            continue
        target = bound_resize(
            cur,
            rz.cpu_request_m,
            int(w.pod_requests.cpu_m),
            max_step=rc.max_step,
            max_burst=rc.max_burst,
            min_change=rc.min_change,
        )
        if target is None:
            out.append(
                res(
                    rz,
                    "unchanged",
                    f"{cur}m (planned {rz.cpu_request_m}m; within maxStep/maxBurst/minChange: no change)",
                    current=cur,
                    workload=wkey,
                )
            )
            continue
        delta = target - cur
        node = pod.node_name
        if delta > 0 and free.get(node, 0) < delta:
            out.append(
                res(
                    rz,
                    "no_room",
                    f"node {node} has {free.get(node, 0)}m CPU free, the resize needs {delta}m more",
                    current=cur,
                    target=target,
                    workload=wkey,
                )
            )
            continue
        order = ResizeOrder(rz.pod, cur, target, wkey, pod.owner.name if pod.owner else "", pod.uid, rz.reason)
        r = safe_resize(resizer, order, planned=rz.cpu_request_m)
        out.append(r)
        if r.outcome in ("resized", "dry_run"):
            done += 1
            free[node] = free.get(node, 0) - delta
        if r.outcome == "resized" and not dry:
            last[rz.pod] = float(now_s)
            if history is not None:
                keep = {k: v for k, v in last.items() if now_s - v < max(rc.cooldown_seconds, 1.0)}
                try:
                    history.set_section(RESIZE_SECTION, {"version": 1, "pods": keep})
                except HistoryError as exc:
                    stop = f"resizes stopped: {exc}"
    return tuple(out)
