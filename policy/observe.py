"""Kubernetes API objects (camelCase JSON/YAML, exactly as the API server and kube-scheduler send them)
→ the domain types of :mod:`policy.state`. One parser, used by the extender, the descheduler, the
simulator and the tests.

Errors: every parser raises :class:`ObjectError` with a one-line message naming the object, the
field path and the offending value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from .documents import DocumentError, FileError, load_json, load_yaml_all, read_text, short_repr
from .state import (
    ANNOTATION_DEPENDS_ON,
    ANNOTATION_SERVICE,
    NO_TERMS,
    AffinityTerm,
    ClusterSnapshot,
    LabelSelector,
    NodeInfo,
    NodeSelectorTerm,
    OwnerRef,
    PodDisruptionBudgetInfo,
    PodInfo,
    PodTerms,
    Resources,
    ServiceGraph,
    SpreadConstraint,
    Taint,
    Toleration,
    WeightedAffinityTerm,
    WorkloadInfo,
    frozen_map,
)

__all__ = [
    "ObjectError",
    "MAX_QUANTITY",
    "parse_quantity",
    "parse_cpu_m",
    "parse_memory_bytes",
    "parse_node",
    "parse_pod",
    "parse_pdb",
    "parse_workload",
    "snapshot_from_objects",
    "iter_objects",
    "load_objects",
    "load_snapshot_objects",
    "snapshot_warnings",
    "service_of",
    "parse_pod_terms",
    "NODE_SELECTOR_OPERATORS",
    "local_pvc_names",
    "load_snapshot",
    "STREAM_MIN_BYTES",
]

NODE_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


class ObjectError(ValueError):
    """A Kubernetes object could not be parsed; the message names object, field and value."""


# ---- quantities (k8s.io/apimachinery/pkg/api/resource/quantity.go) -------------------------------

_SUFFIX = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}
_QTY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?)$")
#: The largest quantity accepted, in base units (cores, bytes, pods): its milli-value must fit in 64 bits, as
#: ``resource.Quantity.MilliValue()`` returns it (about 9.2e15: 9.2 peta-cores or 8 PiB).
MAX_QUANTITY = Decimal(2**63 - 1) / 1000
_MAX_TEXT = 1000  # characters of a quantity string (the API server's longest is far shorter)


def parse_quantity(value: Any, field: str = "quantity") -> Decimal:
    """Parse a Kubernetes resource.Quantity ("100m", "0.5", "64Mi", "1e3", 2) into a Decimal in base units.

    Raises :class:`ObjectError` naming ``field`` and the value when it is not a valid quantity, is negative,
    or is larger than :data:`MAX_QUANTITY` (its milli-value would not fit in 64 bits).
    """
    if isinstance(value, bool):
        raise ObjectError(f"{field}: invalid quantity {short_repr(value)}")
    if isinstance(value, int):
        if abs(value) > MAX_QUANTITY:
            raise ObjectError(f"{field}: quantity too large {short_repr(value)} (at most {MAX_QUANTITY:.3e})")
        d = Decimal(value)
    elif isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ObjectError(f"{field}: invalid quantity {short_repr(value)}")
        d = Decimal(repr(value))
    elif isinstance(value, str) and len(value) <= _MAX_TEXT:
        m = _QTY.match(value.strip())
        if not m:
            raise ObjectError(f"{field}: invalid quantity {short_repr(value)}")
        num = Decimal(m.group(1))
        if m.group(2):
            exp = int(m.group(2)[1:])
            if exp > 40 and num != 0:
                raise ObjectError(f"{field}: quantity too large {short_repr(value)} (at most {MAX_QUANTITY:.3e})")
            d = num.scaleb(max(exp, -40))
        else:
            d = num * _SUFFIX[m.group(3) or ""]
    else:
        raise ObjectError(f"{field}: invalid quantity {short_repr(value)}")
    if d < 0:
        raise ObjectError(f"{field}: negative quantity {short_repr(value)}")
    if d > MAX_QUANTITY:
        raise ObjectError(f"{field}: quantity too large {short_repr(value)} (at most {MAX_QUANTITY:.3e})")
    return d


# The value of each quantity string parsed lately (a cluster's pods repeat a handful: "100m", "128Mi"): a watch
# event parses its pod's requests and limits again, the Decimal arithmetic was a third of a pod's parse. Only
# strings that parsed are kept (a bad one raises, naming its field, every time); cleared when full.
_CPU_M: dict[str, int] = {}
_MEMORY_BYTES: dict[str, int] = {}
_QTY_CACHE_MAX = 4096


def _remember(cache: dict[str, int], value: Any, result: int) -> int:
    if type(value) is str:
        if len(cache) >= _QTY_CACHE_MAX:
            cache.clear()
        cache[value] = result
    return result


def parse_cpu_m(value: Any, field: str = "cpu") -> int:
    """CPU quantity → millicores, rounded up as the API server does (``"0.1"`` → 100, ``"1"`` → 1000)."""
    if type(value) is str and (hit := _CPU_M.get(value)) is not None:
        return hit
    d = parse_quantity(value, field) * 1000
    return _remember(_CPU_M, value, int(d.to_integral_value(rounding="ROUND_CEILING")))


def parse_memory_bytes(value: Any, field: str = "memory") -> int:
    """Memory quantity → bytes, rounded up (``"64Mi"`` → 67108864)."""
    if type(value) is str and (hit := _MEMORY_BYTES.get(value)) is not None:
        return hit
    d = parse_quantity(value, field)
    return _remember(_MEMORY_BYTES, value, int(d.to_integral_value(rounding="ROUND_CEILING")))


def _resources(rl: Any, path: str) -> Resources:
    if rl is None:
        return Resources()
    if type(rl) is not dict and not isinstance(rl, Mapping):
        raise ObjectError(f"{path}: expected a map of resources, got {short_repr(rl)}")
    cpu = parse_cpu_m(rl["cpu"], f"{path}.cpu") if "cpu" in rl else 0
    mem = parse_memory_bytes(rl["memory"], f"{path}.memory") if "memory" in rl else 0
    return Resources(cpu, mem)


# ---- typed access: every field read through these, so a wrong JSON type is one line naming the field ----------


def _map(v: Any, path: str) -> Mapping[str, Any]:
    """``v`` when it is a map, ``{}`` for null/absent; else :class:`ObjectError` naming ``path``."""
    if v is None:
        return {}
    if type(v) is not dict and not isinstance(v, Mapping):  # the exact type first: an ABC check is slow
        raise ObjectError(f"{path}: expected a map, got {short_repr(v)}")
    return v


def _list(v: Any, path: str) -> list[Any] | tuple[Any, ...]:
    """``v`` when it is a list, ``[]`` for null/absent; else :class:`ObjectError` naming ``path``."""
    if v is None:
        return []
    if not isinstance(v, (list, tuple)):
        raise ObjectError(f"{path}: expected a list, got {short_repr(v)}")
    return v


def _maps(v: Any, path: str) -> list[Mapping[str, Any]]:
    """A list of maps (``containers``, ``taints``, ...); :class:`ObjectError` naming the item otherwise."""
    items = _list(v, path)
    for i, it in enumerate(items):
        if type(it) is not dict and not isinstance(it, Mapping):
            raise ObjectError(f"{path}[{i}]: expected a map, got {short_repr(it)}")
    return list(items)


def _text(v: Any, path: str, default: str = "") -> str:
    """A scalar as text (``default`` for null/absent; numbers and booleans as JSON writes them); a map or a
    list is an :class:`ObjectError` naming ``path``."""
    if v is None:
        return default
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, int) and v.bit_length() <= 256:
        return str(v)
    raise ObjectError(f"{path}: expected a string, got {short_repr(v) if not isinstance(v, int) else 'a huge number'}")


def _flag(v: Any, path: str) -> bool:
    """A JSON boolean (``false`` for null/absent); anything else is an :class:`ObjectError`."""
    if v is None:
        return False
    if not isinstance(v, bool):
        raise ObjectError(f"{path}: expected true or false, got {short_repr(v)}")
    return v


def _int(v: Any, path: str, default: int = 0, lo: int = -(2**31), hi: int = 2**31 - 1) -> int:
    """A JSON integer in ``lo..hi`` (int32 by default, as the API's ``int32`` fields); ``default`` for
    null/absent; anything else is an :class:`ObjectError` naming ``path``."""
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise ObjectError(f"{path}: expected an integer, got {short_repr(v)}")
    if not lo <= v <= hi:
        raise ObjectError(f"{path}: expected an integer in {lo}..{hi}, got {short_repr(v)}")
    return v


# ---- helpers -------------------------------------------------------------------------------------


def _what(obj: Mapping[str, Any]) -> str:
    kind = obj.get("kind")
    return kind if isinstance(kind, str) and kind else "object"


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    m = obj.get("metadata") or {}
    if type(m) is not dict and not isinstance(m, Mapping):
        raise ObjectError(f"{_what(obj)}: metadata must be a map, got {short_repr(m)}")
    return m


def _name(obj: Mapping[str, Any]) -> str:
    n = _meta(obj).get("name")
    if not isinstance(n, str) or not n:
        raise ObjectError(f"{_what(obj)}: metadata.name missing or not a string: {short_repr(n)}")
    return n


def _namespace(obj: Mapping[str, Any], where: str) -> str:
    ns = _meta(obj).get("namespace")
    if ns is None or ns == "":
        return "default"
    if not isinstance(ns, str):
        raise ObjectError(f"{where}: metadata.namespace: expected a string, got {short_repr(ns)}")
    return ns


def _str_map(m: Any, path: str) -> dict[str, str]:
    """A map of strings (labels, annotations, nodeSelector): keys and values must be scalars (values as
    :func:`_text` reads them); a nested map or list is an :class:`ObjectError` naming the key."""
    if m is None:
        return {}
    if type(m) is not dict and not isinstance(m, Mapping):
        raise ObjectError(f"{path}: expected a map, got {short_repr(m)}")
    out = {}
    for k, v in m.items():  # strings as they are: a value's path is only made for one that is not
        key = k if type(k) is str else _text(k, path)
        out[key] = v if type(v) is str else _text(v, f"{path}.{key}")
    return out


def _optional_timestamp_s(ts: Any, path: str) -> float | None:
    """An RFC 3339 time (``2026-01-02T03:04:05Z``) → unix s; ``None`` when absent. Raises :class:`ObjectError` for
    anything else."""
    if ts is None or ts == "":
        return None
    if isinstance(ts, str):
        try:
            return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
        except (ValueError, OverflowError, OSError):
            pass
    raise ObjectError(f"{path}: must be an RFC 3339 time, got {ts!r}")


def _timestamp_s(ts: Any) -> float:
    if not ts or not isinstance(ts, str):
        return 0.0
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except (ValueError, OverflowError, OSError):
        return 0.0


def parse_selector(sel: Any, path: str) -> LabelSelector:
    """metav1.LabelSelector JSON → :class:`LabelSelector`."""
    if sel is None:
        return LabelSelector()
    if not isinstance(sel, Mapping):
        raise ObjectError(f"{path}: expected a label selector map, got {short_repr(sel)}")
    exprs = []
    for i, e in enumerate(_maps(sel.get("matchExpressions"), f"{path}.matchExpressions")):
        where = f"{path}.matchExpressions[{i}]"
        op = e.get("operator")
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise ObjectError(f"{where}.operator: unknown operator {short_repr(op)}")
        values = tuple(_text(v, f"{where}.values[{j}]") for j, v in enumerate(_list(e.get("values"), where)))
        exprs.append((_text(e.get("key"), f"{where}.key"), op, values))
    return LabelSelector(frozen_map(_str_map(sel.get("matchLabels"), f"{path}.matchLabels")), tuple(exprs))


# ---- service identity -----------------------------------------------------------------------------

_RS_HASH = re.compile(r"^(?P<base>.+)-[0-9a-z]{5,10}$")


def service_of(
    labels: Mapping[str, str], annotations: Mapping[str, str], owner: OwnerRef | None, pod_name: str = ""
) -> str:
    """The call-graph service a pod belongs to, first match wins:

    1. annotation ``hrl-scheduler.io/service``;
    2. label ``app.kubernetes.io/name``, then ``app`` (what Online Boutique, Sock Shop, Bookinfo,
       DeathStarBench and Istio use; Istio's telemetry keys workloads the same way);
    3. the owning Deployment (a ReplicaSet owner ``name-<hash>`` → ``name``) or other controller's name;
    4. the pod name without its last two dash-separated parts (ReplicaSet hash and pod suffix).
    """
    if annotations.get(ANNOTATION_SERVICE):
        return annotations[ANNOTATION_SERVICE]
    for key in ("app.kubernetes.io/name", "app"):
        if labels.get(key):
            return labels[key]
    if owner is not None:
        if owner.kind == "ReplicaSet":
            m = _RS_HASH.match(owner.name)
            return m.group("base") if m else owner.name
        return owner.name
    parts = pod_name.split("-")
    return "-".join(parts[:-2]) if len(parts) > 2 else pod_name


# ---- nodes -----------------------------------------------------------------------------------------


def parse_node(obj: Mapping[str, Any]) -> NodeInfo:
    """core/v1 Node JSON → :class:`NodeInfo` (allocatable falls back to capacity). Raises :class:`ObjectError`
    (one line: ``Node NAME: field.path: problem, got VALUE``) for any field of the wrong type or value."""
    name = _name(obj)
    meta = _meta(obj)
    where = f"Node {name}"
    spec = _map(obj.get("spec"), f"{where}: spec")
    status = _map(obj.get("status"), f"{where}: status")
    which = "allocatable" if status.get("allocatable") else "capacity"
    path = f"{where}: status.{which}"
    alloc_src = _map(status.get(which), path)
    alloc = _resources(alloc_src, path)
    n_pods = int(parse_quantity(alloc_src.get("pods", 110), f"{path}.pods"))
    taints = tuple(
        Taint(
            _text(t.get("key"), f"{where}: spec.taints[{i}].key"),
            _text(t.get("value"), f"{where}: spec.taints[{i}].value"),
            _text(t.get("effect"), f"{where}: spec.taints[{i}].effect", "NoSchedule") or "NoSchedule",
            _optional_timestamp_s(t.get("timeAdded"), f"{where}: spec.taints[{i}].timeAdded"),
        )
        for i, t in enumerate(_maps(spec.get("taints"), f"{where}: spec.taints"))
    )
    ready = True
    conds = _maps(status.get("conditions"), f"{where}: status.conditions")
    if conds:
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)
    return NodeInfo(
        name=name,
        allocatable=alloc,
        allocatable_pods=n_pods,
        labels=frozen_map(_str_map(meta.get("labels"), f"{where}: metadata.labels")),
        taints=taints,
        unschedulable=_flag(spec.get("unschedulable"), f"{where}: spec.unschedulable"),
        ready=ready,
    )


# ---- pods ------------------------------------------------------------------------------------------


def _controller_owner(meta: Mapping[str, Any], where: str) -> OwnerRef | None:
    for i, o in enumerate(_maps(meta.get("ownerReferences"), f"{where}: metadata.ownerReferences")):
        p = f"{where}: metadata.ownerReferences[{i}]"
        if _flag(o.get("controller"), f"{p}.controller"):
            return OwnerRef(
                _text(o.get("kind"), f"{p}.kind"), _text(o.get("name"), f"{p}.name"), _text(o.get("uid"), f"{p}.uid")
            )
    return None


def _pod_spec_resources(spec: Mapping[str, Any], path: str) -> tuple[Resources, Resources]:
    """Effective pod requests/limits: sum over containers, max with each init container
    (k8s.io/component-helpers/resource PodRequests), plus spec.overhead."""
    req = Resources()
    lim = Resources()
    for i, c in enumerate(_maps(spec.get("containers"), f"{path}.containers")):
        p = f"{path}.containers[{i}].resources"
        r = _map(c.get("resources"), p)
        rq = _map(r.get("requests"), f"{p}.requests")
        lm = _map(r.get("limits"), f"{p}.limits")
        # API defaulting: a limit without a request sets the request to the limit.
        eff = {**{k: v for k, v in lm.items() if k in ("cpu", "memory")}, **rq}
        req = req + _resources(eff, f"{p}.requests")
        lim = lim + _resources(lm, f"{p}.limits")
    for i, c in enumerate(_maps(spec.get("initContainers"), f"{path}.initContainers")):
        p = f"{path}.initContainers[{i}].resources"
        r = _map(c.get("resources"), p)
        ir = _resources(r.get("requests"), f"{p}.requests")
        req = Resources(max(req.cpu_m, ir.cpu_m), max(req.memory_bytes, ir.memory_bytes))
    req = req + _resources(spec.get("overhead"), f"{path}.overhead")
    return req, lim


_LOCAL_VOLUME_KEYS = ("emptyDir", "hostPath")


def _has_local_storage(spec: Mapping[str, Any], local_pvcs: frozenset[str], path: str) -> bool:
    for i, v in enumerate(_maps(spec.get("volumes"), f"{path}.volumes")):
        if any(k in v for k in _LOCAL_VOLUME_KEYS):
            return True
        p = f"{path}.volumes[{i}].persistentVolumeClaim"
        pvc = _text(_map(v.get("persistentVolumeClaim"), p).get("claimName"), f"{p}.claimName")
        if pvc and pvc in local_pvcs:
            return True
    return False


def parse_pod(obj: Mapping[str, Any], local_pvcs: frozenset[str] = frozenset()) -> PodInfo:
    """core/v1 Pod JSON → :class:`PodInfo`.

    ``local_pvcs``: names (``namespace/claim``) of PersistentVolumeClaims bound to local PersistentVolumes,
    so pods using them count as having local storage. Raises :class:`ObjectError` (one line:
    ``Pod NS/NAME: field.path: problem, got VALUE``) for any field of the wrong type or value.
    """
    name = _name(obj)
    meta = _meta(obj)
    ns = _namespace(obj, f"Pod {name}")
    where = f"Pod {ns}/{name}"
    spec = _map(obj.get("spec"), f"{where}: spec")
    status = _map(obj.get("status"), f"{where}: status")
    path = f"{where}: spec"
    labels = _str_map(meta.get("labels"), f"{where}: metadata.labels")
    annotations = _str_map(meta.get("annotations"), f"{where}: metadata.annotations")
    owner = _controller_owner(meta, where)
    req, lim = _pod_spec_resources(spec, path)
    tols = []
    for i, t in enumerate(_maps(spec.get("tolerations"), f"{path}.tolerations")):
        p = f"{path}.tolerations[{i}]"
        tols.append(
            Toleration(
                _text(t.get("key"), f"{p}.key"),
                _text(t.get("operator"), f"{p}.operator") or "Equal",
                _text(t.get("value"), f"{p}.value"),
                _text(t.get("effect"), f"{p}.effect"),
                None
                if t.get("tolerationSeconds") is None
                else _int(t.get("tolerationSeconds"), f"{p}.tolerationSeconds", lo=-(2**62), hi=2**62),
            )
        )
    ns_pvcs = frozenset(p.split("/", 1)[1] for p in local_pvcs if p.startswith(ns + "/"))
    return PodInfo(
        name=name,
        namespace=ns,
        service=service_of(labels, annotations, owner, name),
        requests=req,
        limits=lim,
        uid=_text(meta.get("uid"), f"{where}: metadata.uid"),
        node_name=_text(spec.get("nodeName"), f"{path}.nodeName") or None,
        phase=_text(status.get("phase"), f"{where}: status.phase") or "Pending",
        labels=_shared_map(labels),
        annotations=_shared_map(annotations),
        owner=owner,
        scheduler_name=_text(spec.get("schedulerName"), f"{path}.schedulerName") or "default-scheduler",
        priority=_int(spec.get("priority"), f"{path}.priority"),
        priority_class_name=_text(spec.get("priorityClassName"), f"{path}.priorityClassName"),
        terminating=bool(meta.get("deletionTimestamp")),
        local_storage=_has_local_storage(spec, ns_pvcs, path),
        tolerations=tuple(tols),
        node_selector=frozen_map(_str_map(spec.get("nodeSelector"), f"{path}.nodeSelector")),
        created_s=_timestamp_s(meta.get("creationTimestamp")),
        ready=_pod_ready(status),
        resource_version=str(meta.get("resourceVersion") or ""),
        terms=parse_pod_terms(spec, path) if _has_terms(spec) else NO_TERMS,
        **_restarts(status, f"{where}: status.containerStatuses"),
    )


def _restarts(status: Mapping[str, Any], path: str) -> dict[str, Any]:
    """``restarts`` (Σ ``restartCount``) and ``last_terminated_s`` of a Pod's ``status.containerStatuses`` (k8s.io/api
    core/v1 ContainerStatus); {} when it has none. A container's last termination is its ``lastState.terminated.
    finishedAt``; where that is absent or unreadable but the container has restarted (the kubelet reports a lost
    container as ``ContainerStatusUnknown`` without a time), its current run's ``state.running.startedAt`` stands in
    (the restart came after the termination); ``last_terminated_s`` is the latest such time over the containers, None
    when none is known."""
    statuses = status.get("containerStatuses")
    if not statuses:
        return {}
    count, last = 0, None
    for i, c in enumerate(_maps(statuses, path)):
        n = _int(c.get("restartCount"), f"{path}[{i}].restartCount", lo=0)
        count += n
        p = f"{path}[{i}].lastState"
        term = _map(_map(c.get("lastState"), p).get("terminated"), f"{p}.terminated")
        t = _timestamp_s(term.get("finishedAt")) if term else 0.0
        if t <= 0 and n > 0:
            running = _map(_map(c.get("state"), f"{path}[{i}].state").get("running"), f"{path}[{i}].state.running")
            t = _timestamp_s(running.get("startedAt")) if running else 0.0
        if t > 0 and (last is None or t > last):
            last = t
    return {"restarts": count, "last_terminated_s": last}


def _has_terms(spec: Mapping[str, Any]) -> bool:
    return bool(spec.get("affinity") or spec.get("topologySpreadConstraints"))


_SHARED_MAPS: dict[tuple[tuple[str, str], ...], Mapping[str, str]] = {}
_SHARED_MAX = 200_000


def _shared_map(m: dict[str, str]) -> Mapping[str, str]:
    """:func:`frozen_map` of ``m``, one read-only map per distinct content: the pods of one ReplicaSet carry the
    same labels and annotations, so a cluster of P pods holds about P / replicas copies instead of P (a fifth
    less memory for a large snapshot). The table is cleared past ``_SHARED_MAX`` entries."""
    if not m:
        return frozen_map(m)
    key = tuple(m.items())
    hit = _SHARED_MAPS.get(key)
    if hit is None:
        if len(_SHARED_MAPS) >= _SHARED_MAX:
            _SHARED_MAPS.clear()
        hit = _SHARED_MAPS[key] = frozen_map(m)
    return hit


def _pod_ready(status: Mapping[str, Any]) -> bool:
    """The pod's ``Ready`` condition is ``True`` (k8s.io/kubernetes pkg/api/v1/pod IsPodReady)."""
    conds = status.get("conditions") if isinstance(status, Mapping) else None
    if not isinstance(conds, list):
        return False
    return any(isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


# ---- scheduling terms (affinity, topology spread) ------------------------------------------------------
# k8s.io/api core/v1 Affinity, PodAffinityTerm, WeightedPodAffinityTerm, PreferredSchedulingTerm,
# NodeSelectorRequirement, TopologySpreadConstraint.


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
        md = c.get("minDomains")
        if md is not None and (not isinstance(md, int) or isinstance(md, bool) or md < 1):
            raise ObjectError(f"{p}.minDomains: must be an integer >= 1, got {md!r}")
        spread.append(
            SpreadConstraint(
                skew,
                str(c["topologyKey"]),
                when,
                parse_selector(c.get("labelSelector"), f"{p}.labelSelector"),
                tuple(str(k) for k in c.get("matchLabelKeys") or ()),
                md,
                str(c.get("nodeAffinityPolicy") or "Honor"),
                str(c.get("nodeTaintsPolicy") or "Ignore"),
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


# ---- PDBs and workloads ----------------------------------------------------------------------------

_PERCENT = re.compile(r"^[0-9]{1,9}%$")


def _int_or_percent(v: Any, path: str) -> int | str | None:
    """An ``IntOrString`` of a PodDisruptionBudget: an integer >= 0 or a percentage ``"N%"``."""
    if v is None:
        return None
    if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 2**31 - 1:
        return v
    if isinstance(v, str) and _PERCENT.match(v):
        return v
    raise ObjectError(f"{path}: expected an integer >= 0 or a percentage like '50%', got {short_repr(v)}")


def parse_pdb(obj: Mapping[str, Any]) -> PodDisruptionBudgetInfo:
    """policy/v1 PodDisruptionBudget JSON → :class:`PodDisruptionBudgetInfo`. Raises :class:`ObjectError`
    (one line naming the PDB, the field and the value) for a field of the wrong type or value."""
    name = _name(obj)
    ns = _namespace(obj, f"PodDisruptionBudget {name}")
    where = f"PodDisruptionBudget {ns}/{name}"
    spec = _map(obj.get("spec"), f"{where}: spec")
    status = _map(obj.get("status"), f"{where}: status")
    allowed = None
    observed = None
    disrupted: tuple[str, ...] = ()
    if status.get("disruptionsAllowed") is not None:
        allowed = _int(status["disruptionsAllowed"], f"{where}: status.disruptionsAllowed", lo=0)
    if status.get("observedGeneration") is not None:
        observed = _int(status["observedGeneration"], f"{where}: status.observedGeneration", lo=0)
    dp = status.get("disruptedPods")
    if isinstance(dp, Mapping):
        disrupted = tuple(sorted(str(k) for k in dp))
    generation = _meta(obj).get("generation")
    return PodDisruptionBudgetInfo(
        name=name,
        namespace=ns,
        selector=parse_selector(spec.get("selector"), f"{where}: spec.selector"),
        min_available=_int_or_percent(spec.get("minAvailable"), f"{where}: spec.minAvailable"),
        max_unavailable=_int_or_percent(spec.get("maxUnavailable"), f"{where}: spec.maxUnavailable"),
        disruptions_allowed=allowed,
        generation=None if generation is None else _int(generation, f"{where}: metadata.generation", lo=0),
        observed_generation=observed,
        disrupted_pods=disrupted,
    )


def _split_names(v: str) -> tuple[str, ...]:
    return tuple(s.strip() for s in v.split(",") if s.strip())


def parse_workload(obj: Mapping[str, Any]) -> WorkloadInfo:
    """apps/v1 Deployment / StatefulSet JSON → :class:`WorkloadInfo`. Raises :class:`ObjectError` (one line
    naming the workload, the field and the value) for a field of the wrong type or value."""
    name = _name(obj)
    meta = _meta(obj)
    kind = _text(obj.get("kind"), f"{name}: kind") or "Deployment"
    ns = _namespace(obj, f"{kind} {name}")
    path = f"{kind} {ns}/{name}"
    spec = _map(obj.get("spec"), f"{path}: spec")
    tmpl = _map(spec.get("template"), f"{path}: spec.template")
    tmeta = _map(tmpl.get("metadata"), f"{path}: spec.template.metadata")
    tspec = _map(tmpl.get("spec"), f"{path}: spec.template.spec")
    replicas = spec.get("replicas", 1)
    if replicas is None:
        replicas = 1
    if not isinstance(replicas, int) or isinstance(replicas, bool) or not 0 <= replicas <= 2**31 - 1:
        raise ObjectError(f"{path}: spec.replicas must be a non-negative integer, got {short_repr(replicas)}")
    tlabels = _str_map(tmeta.get("labels"), f"{path}: spec.template.metadata.labels")
    annotations = _str_map(meta.get("annotations"), f"{path}: metadata.annotations")
    tannotations = _str_map(tmeta.get("annotations"), f"{path}: spec.template.metadata.annotations")
    req, lim = _pod_spec_resources(tspec, f"{path}: spec.template.spec")
    deps = _split_names(annotations.get(ANNOTATION_DEPENDS_ON, "")) + _split_names(
        tannotations.get(ANNOTATION_DEPENDS_ON, "")
    )
    all_ann = {**tannotations, **annotations}
    service = service_of(tlabels, all_ann, OwnerRef(kind, name), name)
    return WorkloadInfo(
        name=name,
        namespace=ns,
        service=service,
        kind=kind,
        replicas=replicas,
        selector=parse_selector(spec.get("selector"), f"{path}: spec.selector"),
        pod_requests=req,
        pod_limits=lim,
        template_labels=frozen_map(tlabels),
        annotations=frozen_map(all_ann),
        depends_on=tuple(dict.fromkeys(deps)),
    )


# ---- object streams ----------------------------------------------------------------------------------


def iter_objects(doc: Any) -> Iterator[Mapping[str, Any]]:
    """Flatten a parsed document: a single object, a ``List`` / ``*List`` with ``items``, or a list of
    those. Kind-less items of a typed list (``NodeList``) get the element kind."""
    if doc is None:
        return
    if isinstance(doc, list):
        for d in doc:
            yield from iter_objects(d)
        return
    if not isinstance(doc, Mapping):
        raise ObjectError(f"expected a Kubernetes object (a map), got {type(doc).__name__}")
    kind = str(doc.get("kind") or "")
    if kind.endswith("List") and isinstance(doc.get("items"), list):
        elem = kind[:-4] if kind != "List" else ""
        for it in doc["items"]:
            if isinstance(it, Mapping) and elem and not it.get("kind"):
                it = {**it, "kind": elem}
            yield from iter_objects(it)
        return
    yield doc


def _is_dir(p: Path) -> bool:
    """``p.is_dir()``; :class:`ObjectError` naming ``p`` when the path cannot even be looked at (too long, ...)."""
    try:
        p.stat()
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise ObjectError(f"{p}: cannot read: {exc.strerror or exc}") from None
    return p.is_dir()


def _read_text(p: Path) -> str:
    """The UTF-8 text of file ``p`` (:func:`policy.documents.read_text`: gzip-decompressed for ``*.gz``, bounded);
    :class:`ObjectError` naming the file (and the first bad byte's position)."""
    try:
        return read_text(p)
    except FileError as exc:
        raise ObjectError(str(exc)) from None


def _read_docs(p: Path) -> list[Any]:
    """The parsed documents of one JSON or (multi-document) YAML file; :class:`ObjectError` naming the file
    (and line) when it cannot be read or parsed, holds a duplicate key, or nests deeper than
    :data:`policy.documents.MAX_DEPTH` (:mod:`policy.documents`)."""
    text = _read_text(p)
    try:
        if p.suffix == ".json" or text.lstrip().startswith("{"):
            return [load_json(text)]
        return load_yaml_all(text)
    except DocumentError as exc:
        first = exc.problems[0]
        line = f":{first.line}" if first.line is not None else ""
        what = f"{first.path}: {first.message}" if first.path else first.message
        more = f" (and {len(exc.problems) - 1} more)" if len(exc.problems) > 1 else ""
        raise ObjectError(f"{p}{line}: {what}{more}") from None


def load_objects(path: str | Path) -> list[Mapping[str, Any]]:
    """Read Kubernetes objects from a JSON or (multi-document) YAML file, or from every ``*.yaml``,
    ``*.yml`` and ``*.json`` file under a directory (sorted). Raises :class:`ObjectError` naming the
    file (and line, for YAML syntax errors; line and column of the first byte that is not UTF-8)."""
    p = Path(path)
    if _is_dir(p):
        out: list[Mapping[str, Any]] = []
        for f in sorted(p.rglob("*")):
            if f.is_file() and f.suffix in (".yaml", ".yml", ".json"):
                out.extend(load_objects(f))
        return out
    out = []
    for d in _read_docs(p):
        try:
            out.extend(o for o in iter_objects(d) if isinstance(o, Mapping))
        except ObjectError as exc:
            raise ObjectError(f"{p}: {exc}") from None
    return out


def _snapshot_list(doc: Any, where: str) -> list[Mapping[str, Any]]:
    """The objects of one Kubernetes List document (strict; see :func:`load_snapshot_objects`)."""
    if not isinstance(doc, Mapping):
        shown = "null" if doc is None else type(doc).__name__
        raise ObjectError(
            f"{where}: expected a Kubernetes List (an object with an items list, as `kubectl get "
            f"nodes,pods -A -o json` prints), got {shown}"
        )
    kind = doc.get("kind")
    items = doc.get("items")
    if not isinstance(items, list) or (kind is not None and not (isinstance(kind, str) and kind.endswith("List"))):
        got = (f"kind {_short(kind)}" if kind is not None else "an object without kind") + (
            " and no items" if "items" not in doc else f" and items {_short(items)}"
        )
        raise ObjectError(
            f"{where}: expected a Kubernetes List (an object with an items list, as `kubectl get "
            f"nodes,pods -A -o json` prints), got {got}"
        )
    elem = kind[:-4] if isinstance(kind, str) and kind != "List" else ""
    out: list[Mapping[str, Any]] = []
    for i, it in enumerate(items):
        if not isinstance(it, Mapping):
            raise ObjectError(
                f"{where}: items[{i}]: expected a Kubernetes object, got {'null' if it is None else type(it).__name__}"
            )
        it_kind = it.get("kind") or elem
        if not isinstance(it_kind, str) or not it_kind:
            raise ObjectError(
                f"{where}: items[{i}]: expected a Kubernetes object with a kind, got kind {it.get('kind')!r}"
            )
        if isinstance(it.get("items"), list) and it_kind.endswith("List"):  # a List nested in a List
            out.extend(_snapshot_list({**it, "kind": it_kind}, f"{where}: items[{i}]"))
        else:
            out.append(it if it.get("kind") else {**it, "kind": it_kind})
    return out


def _short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "..."


def load_snapshot_objects(path: str | Path) -> list[Mapping[str, Any]]:
    """Read a saved cluster state strictly: the objects of the Kubernetes ``List`` document(s) of a JSON or
    YAML file, as ``kubectl get nodes,pods,pdb,deployments -A -o json`` (or ``-o yaml``) prints them, or of
    every ``*.json`` / ``*.yaml`` / ``*.yml`` file under a directory (sorted).

    A List is an object whose ``items`` is a list (``kind`` ``List`` or ``<Kind>List``, or no ``kind``);
    an empty ``items: []`` is an empty cluster. Anything else (``null``, ``[]``, ``{}``, ``items: 5``, an
    item that is not an object with a ``kind``, an empty file, a directory without such files) raises
    :class:`ObjectError` naming the file (and the item), as do unreadable, non-UTF-8 and unparsable files:
    a malformed snapshot is never read as an empty cluster."""
    p = Path(path)
    if _is_dir(p):
        files = [f for f in sorted(p.rglob("*")) if f.is_file() and f.suffix in (".yaml", ".yml", ".json")]
        if not files:
            raise ObjectError(f"{p}: directory holds no *.json, *.yaml or *.yml file with a Kubernetes List")
        out: list[Mapping[str, Any]] = []
        for f in files:
            out.extend(load_snapshot_objects(f))
        return out
    docs = _read_docs(p)
    present = [(i, d) for i, d in enumerate(docs) if d is not None]
    if not present:  # an empty file, or JSON/YAML null
        raise ObjectError(
            f"{p}: expected a Kubernetes List (an object with an items list, as `kubectl get "
            f"nodes,pods -A -o json` prints), got {'an empty file' if not docs else 'null'}"
        )
    out = []
    for i, d in present:
        out.extend(_snapshot_list(d, str(p) if len(docs) == 1 else f"{p}: document {i + 1}"))
    return out


#: Snapshot files at least this large are parsed as a stream (one object at a time), see :func:`load_snapshot`.
STREAM_MIN_BYTES = 8 * 1024 * 1024


class _NotStreamable(Exception):
    """The file is not a plain JSON List the streaming reader handles: read it the strict way."""


_WS = re.compile(r"[ \t\n\r]*")


def _pairs_once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's pairs as a dict; a duplicate key hands the file to the strict reader, which names it."""
    d = dict(pairs)
    if len(d) != len(pairs):
        raise _NotStreamable
    return d


def _json_list_items(text: str, top: dict[str, Any]) -> Iterator[Any]:
    """Yield the elements of the top-level ``items`` array of the JSON object in ``text`` one at a time (the
    stdlib decoder on each element: the whole document is never in memory as objects); the other top-level keys
    go to ``top``. Raises :class:`_NotStreamable` for anything but a single JSON object."""
    dec = json.JSONDecoder(object_pairs_hook=_pairs_once)

    def ws(i: int) -> int:
        return _WS.match(text, i).end()

    def expect(i: int, ch: str) -> int:
        if text[i : i + 1] != ch:
            raise _NotStreamable
        return i + 1

    try:
        i = expect(ws(0), "{")
        if text[ws(i) : ws(i) + 1] == "}":
            i = ws(i) + 1
        else:
            while True:
                key, i = dec.raw_decode(text, ws(i))
                if not isinstance(key, str):
                    raise _NotStreamable
                i = ws(expect(ws(i), ":"))
                if key == "items" and text[i : i + 1] == "[":
                    top["items"] = []
                    i = ws(i + 1)
                    if text[i : i + 1] == "]":
                        i += 1
                    else:
                        while True:
                            obj, i = dec.raw_decode(text, ws(i))
                            yield obj
                            i = ws(i)
                            if text[i : i + 1] == ",":
                                i += 1
                                continue
                            i = expect(i, "]")
                            break
                else:
                    top[key], i = dec.raw_decode(text, i)
                i = ws(i)
                if text[i : i + 1] == ",":
                    i += 1
                    continue
                i = expect(i, "}")
                break
        if text[ws(i) :]:
            raise _NotStreamable
    except (json.JSONDecodeError, ValueError, RecursionError) as exc:
        raise _NotStreamable from exc


def _stream_snapshot(p: Path, graph: ServiceGraph | None, taken_at_s: float) -> ClusterSnapshot:
    """:func:`load_snapshot` for one large JSON List file, one object at a time (see there)."""
    text = _read_text(p)
    top: dict[str, Any] = {}
    nodes, pods, pdbs, workloads, volumes = [], [], [], [], []
    claims: list[tuple[int, tuple[str, ...]]] = []
    kindless: list[Any] = []
    for obj in _json_list_items(text, top):
        if not isinstance(obj, Mapping) or (
            isinstance(obj.get("items"), list) and str(obj.get("kind", "")).endswith("List")
        ):
            raise _NotStreamable  # the strict reader names the bad item
        kind = obj.get("kind")
        if not kind:
            kindless.append(obj)
            continue
        _collect(obj, kind, nodes, pods, pdbs, workloads, volumes, claims)
    del text
    kind = top.get("kind")
    if "items" not in top or (kind is not None and not (isinstance(kind, str) and kind.endswith("List"))):
        raise _NotStreamable
    elem = kind[:-4] if isinstance(kind, str) and kind != "List" else ""
    if kindless and not elem:
        raise _NotStreamable
    for obj in kindless:
        _collect({**obj, "kind": elem}, elem, nodes, pods, pdbs, workloads, volumes, claims)
    local = local_pvc_names(volumes)
    for k, names in claims:
        if any(f"{pods[k].namespace}/{c}" in local for c in names):
            pods[k] = replace(pods[k], local_storage=True)
    return ClusterSnapshot(
        tuple(nodes), tuple(pods), tuple(pdbs), tuple(workloads), graph or ServiceGraph(), taken_at_s
    )


def _collect(obj, kind, nodes, pods, pdbs, workloads, volumes, claims) -> None:
    if kind == "Node":
        nodes.append(parse_node(obj))
    elif kind == "Pod":
        names = tuple(
            str((v.get("persistentVolumeClaim") or {}).get("claimName"))
            for v in (obj.get("spec") or {}).get("volumes") or ()
            if isinstance(v, Mapping) and (v.get("persistentVolumeClaim") or {}).get("claimName")
        )
        if names:
            claims.append((len(pods), names))
        pods.append(parse_pod(obj))
    elif kind == "PodDisruptionBudget":
        pdbs.append(parse_pdb(obj))
    elif kind in ("Deployment", "StatefulSet"):
        workloads.append(parse_workload(obj))
    elif kind in ("PersistentVolume", "PersistentVolumeClaim"):
        volumes.append(obj)


def load_snapshot(path: str | Path, graph: ServiceGraph | None = None, taken_at_s: float = 0.0) -> ClusterSnapshot:
    """:func:`snapshot_from_objects` of :func:`load_snapshot_objects` (same rules, same errors). A JSON file of
    at least :data:`STREAM_MIN_BYTES` that is one plain List is read as a stream: each item decoded, parsed and
    dropped in turn, so peak memory is the file's text plus the parsed snapshot, not every raw object at once
    (a 150,000-pod List would otherwise take several GB); anything unusual falls back to the strict reader."""
    p = Path(path)
    try:
        if p.is_file() and p.stat().st_size >= STREAM_MIN_BYTES:
            return _stream_snapshot(p, graph, taken_at_s)
    except _NotStreamable:
        pass
    except ObjectError as exc:
        raise ObjectError(f"{p}: {exc}") from None
    except (TypeError, AttributeError, ValueError, KeyError, IndexError, OverflowError, ArithmeticError):
        pass  # a shape the parsers did not anticipate: the strict reader below says which, in one line
    return snapshot_from_objects(load_snapshot_objects(p), graph, taken_at_s, str(p), consume=True)


def snapshot_warnings(snapshot: ClusterSnapshot, limit: int = 3) -> list[str]:
    """Inconsistencies of a saved cluster state that do not stop reading it, one line per kind, counted:
    pods bound to a node that is not in the snapshot (the planner sees them on no node), and duplicate pods
    or nodes (the same ``namespace/name`` / name more than once; a real API server has one of each). Each line
    shows up to ``limit`` examples. ``[]`` when consistent."""
    out: list[str] = []
    names = {n.name for n in snapshot.nodes}
    dangling = [p for p in snapshot.pods if p.node_name is not None and p.node_name not in names]
    if dangling:
        eg = ", ".join(f"{p.key} on {p.node_name}" for p in dangling[:limit])
        out.append(f"{len(dangling)} pod(s) bound to nodes not in the snapshot (e.g. {eg})")
    for what, keys in (("pod(s)", [p.key for p in snapshot.pods]), ("node(s)", [n.name for n in snapshot.nodes])):
        seen: set[str] = set()
        dup: dict[str, None] = {}
        for k in keys:
            if k in seen:
                dup[k] = None
            seen.add(k)
        if dup:
            extra = len(keys) - len(seen)
            out.append(
                f"{len(dup)} duplicate {what} ({extra} extra object(s) with the same "
                f"{'namespace/name' if what == 'pod(s)' else 'name'}; e.g. {', '.join(list(dup)[:limit])})"
            )
    return out


def local_pvc_names(objs: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """``namespace/claim`` of the PersistentVolumeClaims among ``objs`` bound to a ``local`` or ``hostPath``
    PersistentVolume among ``objs`` (their pods lose their data when evicted). Raises :class:`ObjectError` for
    a PersistentVolume or claim of the wrong shape."""
    objs = list(objs)
    local_pvs = {
        _name(o)
        for o in objs
        if o.get("kind") == "PersistentVolume"
        and any(k in _map(o.get("spec"), f"PersistentVolume {_name(o)}: spec") for k in ("local", "hostPath"))
    }
    return frozenset(
        f"{_namespace(o, f'PersistentVolumeClaim {_name(o)}')}/{_name(o)}"
        for o in objs
        if o.get("kind") == "PersistentVolumeClaim"
        and _map(o.get("spec"), f"PersistentVolumeClaim {_name(o)}: spec").get("volumeName") in local_pvs
    )


def snapshot_from_objects(
    objs: Iterable[Mapping[str, Any]],
    graph: ServiceGraph | None = None,
    taken_at_s: float = 0.0,
    source: str = "",
    *,
    consume: bool = False,
) -> ClusterSnapshot:
    """Build a :class:`ClusterSnapshot` from Nodes, Pods, PodDisruptionBudgets, Deployments,
    StatefulSets, PersistentVolumes and PersistentVolumeClaims (other kinds are ignored).

    Pods using a PVC bound to a ``local`` PersistentVolume are marked ``local_storage``. ``consume``: ``objs`` is
    a list the caller no longer needs; each entry is replaced by ``None`` once parsed, so the raw objects of a
    large cluster are freed while the parsed ones are built (peak memory: about the larger of the two, not both).
    Raises :class:`ObjectError`, one line naming ``source`` (the file, when given), the object, the field and
    the value, for any object of the wrong shape; nothing else escapes (an error no parser anticipated is still
    one line naming the object).
    """
    objs = objs if consume and isinstance(objs, list) else list(objs)
    try:
        return _snapshot_from_objects(objs, graph, taken_at_s, consume)
    except ObjectError as exc:
        if source:
            raise ObjectError(f"{source}: {exc}") from None
        raise
    except (TypeError, AttributeError, ValueError, KeyError, IndexError, OverflowError, ArithmeticError) as exc:
        # a shape no parser above anticipated: still one line, never a traceback (the fuzz tests count these)
        where = f"{source}: " if source else ""
        raise ObjectError(
            f"{where}malformed object ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})"
        ) from None


def _snapshot_from_objects(
    objs: list[Any], graph: ServiceGraph | None, taken_at_s: float, consume: bool
) -> ClusterSnapshot:
    for i, o in enumerate(objs):
        if not isinstance(o, Mapping):
            raise ObjectError(f"items[{i}]: expected a Kubernetes object (a map), got {short_repr(o)}")
    local_pvcs = local_pvc_names(objs)
    nodes, pods, pdbs, workloads = [], [], [], []
    for i, o in enumerate(objs):
        if consume:
            objs[i] = None
        kind = o.get("kind")
        if kind == "Node":
            nodes.append(parse_node(o))
        elif kind == "Pod":
            pods.append(parse_pod(o, local_pvcs))
        elif kind == "PodDisruptionBudget":
            pdbs.append(parse_pdb(o))
        elif kind in ("Deployment", "StatefulSet"):
            workloads.append(parse_workload(o))
    return ClusterSnapshot(
        nodes=tuple(nodes),
        pods=tuple(pods),
        pdbs=tuple(pdbs),
        workloads=tuple(workloads),
        graph=graph or ServiceGraph(),
        taken_at_s=taken_at_s,
    )
