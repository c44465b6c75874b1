"""Call graph from Kubernetes manifests (the objects an application is deployed with).

Input: Kubernetes objects (YAML multi-document or JSON, a file or a directory of them, read with
:func:`policy.observe.load_objects`). Several paths together are ONE input: a Service in one file resolves
hosts named in another.

Services of the graph: one per workload, i.e. every Deployment, StatefulSet, DaemonSet, ReplicaSet and Pod
(isolated ones included), named as :func:`policy.observe.service_of` names the workload's pods (annotation
``hrl-scheduler.io/service``, else label ``app.kubernetes.io/name`` / ``app`` of the pod template, else the
workload name).

Edges caller → callee, with ``rps=None`` (declared, not measured):

1. Environment variables of the workload's containers and init containers (``env`` values, ``valueFrom:
   configMapKeyRef`` and ``envFrom: configMapRef`` when the ConfigMap is in the input) that name another
   Service, as Online Boutique does (``PRODUCT_CATALOG_SERVICE_ADDR=productcatalogservice:3550``):

   - a variable whose name ends in ``_ADDR`` (incl. ``*_SERVICE_ADDR``): its value is ``host``,
     ``host:port`` or a URL;
   - any variable whose value looks like ``host:port`` or a URL (``scheme://host[:port][/path]``);
   - a value may list several addresses separated by commas or spaces (``kafka-0:9092,kafka-1:9092``);
   - the host is a Service name in the workload's namespace, or ``name.namespace``,
     ``name.namespace.svc``, ``name.namespace.svc.<cluster-domain>`` (also the per-pod form
     ``pod.name.namespace.svc...`` of headless Services), per the Kubernetes "DNS for Services and Pods"
     documentation;
   - the host counts only if that Service is defined in the same input; the callee is every workload
     whose pod labels the Service's ``spec.selector`` selects (same namespace), named by its service;
   - unresolved hosts (no such Service, or a Service selecting no workload in the input) are returned as
     warnings, never as edges; local addresses (``localhost``, ``127.0.0.1``, ``0.0.0.0``, an empty host
     as in ``:8080``) are listen or sidecar addresses and are ignored.

2. The annotation ``hrl-scheduler.io/depends-on: "svc-a,svc-b"`` on the workload or its pod template (on
   the Pod for a bare Pod): an edge to each named service. A name is matched against the services of the
   input's workloads, then workload names, then Service names (→ the workloads they select); an unknown
   name is a warning, not an edge.

   Manifests of two or more services that declare no edge at all get a warning saying why (no address-like env
   var and no annotation found, or none of them resolved): the app is likely wired through config files.

3. ``AppGroup`` objects (scheduler-plugins ``appgroup.diktyo.x-k8s.io/v1alpha1``, :mod:`policy.topology.appgroup`)
   in the input: an edge for each dependency, the workload references resolved against the input's workloads
   (pod-template label ``appgroup.diktyo.x-k8s.io.workload`` = the reference's ``selector``, else the workload
   name, else the service name); an unresolved reference is a warning, not an edge.

Errors: :class:`TopologyError` naming the file (and line, for YAML/JSON syntax errors and malformed AppGroups) or
the object and field of a malformed workload.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from policy.observe import ObjectError, load_objects, parse_workload, service_of
from policy.state import ANNOTATION_DEPENDS_ON, OwnerRef, ServiceEdge, ServiceGraph

from .appgroup import (
    LABEL_WORKLOAD,
    AppGroup,
    WorkloadRef,
    graph_from_appgroups,
    is_appgroup,
    parse_appgroup,
    read_appgroups,
)
from .common import TopologyError

__all__ = [
    "WORKLOAD_KINDS",
    "graph_from_objects",
    "load_manifests",
    "addresses_in_env",
    "workload_refs",
    "no_edges_reason",
]

WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Pod")
"""Kinds whose pods become services of the graph."""

_DNS_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_HOST_PORT = re.compile(r"^(?P<host>[A-Za-z0-9.-]*|\[[0-9A-Fa-f:.]+\]):(?P<port>\d{1,5})$")
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_LOCAL_HOSTS = frozenset({"", "localhost", "0.0.0.0", "::", "::1", "[::]", "[::1]"})


@dataclass(frozen=True, slots=True)
class _Workload:
    kind: str
    name: str
    namespace: str
    service: str
    labels: Mapping[str, str]
    pod_spec: Mapping[str, Any]
    depends_on: tuple[str, ...]
    spec_path: str = "spec"

    @property
    def ref(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


def _ns(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or "default") if isinstance(meta, Mapping) else "default"


def _str_map(m: Any, where: str) -> dict[str, str]:
    if m is None:
        return {}
    if not isinstance(m, Mapping):
        raise ObjectError(f"{where}: expected a map, got {m!r}")
    return {str(k): "" if v is None else str(v) for k, v in m.items()}


def _map(m: Any, where: str) -> Mapping[str, Any]:
    if m is None:
        return {}
    if not isinstance(m, Mapping):
        raise ObjectError(f"{where}: expected a map, got {m!r}")
    return m


def _workload(obj: Mapping[str, Any]) -> _Workload:
    kind = str(obj.get("kind"))
    if kind == "Pod":
        meta = _map(obj.get("metadata"), "Pod: metadata")
        if not meta.get("name"):
            raise ObjectError(f"Pod: metadata.name missing or empty: {meta.get('name')!r}")
        name = str(meta["name"])
        ns = _ns(obj)
        labels = _str_map(meta.get("labels"), f"Pod {ns}/{name}: metadata.labels")
        ann = _str_map(meta.get("annotations"), f"Pod {ns}/{name}: metadata.annotations")
        owner = None
        for o in meta.get("ownerReferences") or ():
            if isinstance(o, Mapping) and o.get("controller"):
                owner = OwnerRef(str(o.get("kind", "")), str(o.get("name", "")))
        deps = tuple(dict.fromkeys(s.strip() for s in ann.get(ANNOTATION_DEPENDS_ON, "").split(",") if s.strip()))
        spec = _map(obj.get("spec"), f"Pod {ns}/{name}: spec")
        return _Workload(kind, name, ns, service_of(labels, ann, owner, name), labels, spec, deps)
    w = parse_workload(obj)
    where = f"{kind} {w.namespace}/{w.name}: spec.template"
    tmpl = _map(_map(obj.get("spec"), f"{kind} {w.namespace}/{w.name}: spec").get("template"), where)
    spec = _map(tmpl.get("spec"), f"{where}.spec")
    return _Workload(
        kind, w.name, w.namespace, w.service, dict(w.template_labels), spec, w.depends_on, "spec.template.spec"
    )


def _env_of(w: _Workload, configmaps: Mapping[tuple[str, str], Mapping[str, str]]) -> Iterable[tuple[str, str, str]]:
    """(container name, variable name, value) for every resolvable env var of every (init) container."""
    for group in ("initContainers", "containers"):
        containers = w.pod_spec.get(group) or []
        if not isinstance(containers, list):
            raise ObjectError(f"{w.ref}: {w.spec_path}.{group}: expected a list, got {containers!r}")
        for i, c in enumerate(containers):
            if not isinstance(c, Mapping):
                raise ObjectError(f"{w.ref}: {w.spec_path}.{group}[{i}]: expected a container map, got {c!r}")
            cname = str(c.get("name") or f"{group}[{i}]")
            for ef in c.get("envFrom") or ():
                ref = ef.get("configMapRef") if isinstance(ef, Mapping) else None
                if isinstance(ref, Mapping) and ref.get("name"):
                    prefix = str(ef.get("prefix") or "")
                    for k, v in configmaps.get((w.namespace, str(ref["name"])), {}).items():
                        yield cname, prefix + k, v
            env = c.get("env") or []
            if not isinstance(env, list):
                raise ObjectError(f"{w.ref}: {w.spec_path}.{group}[{i}].env: expected a list, got {env!r}")
            for j, e in enumerate(env):
                if not isinstance(e, Mapping) or not e.get("name"):
                    raise ObjectError(
                        f"{w.ref}: {w.spec_path}.{group}[{i}].env[{j}]: expected {{name, value}}, got {e!r}"
                    )
                if "value" in e and e["value"] is not None:
                    yield cname, str(e["name"]), str(e["value"])
                    continue
                ref = (
                    (e.get("valueFrom") or {}).get("configMapKeyRef")
                    if isinstance(e.get("valueFrom"), Mapping)
                    else None
                )
                if isinstance(ref, Mapping) and ref.get("name") and ref.get("key"):
                    v = configmaps.get((w.namespace, str(ref["name"])), {}).get(str(ref["key"]))
                    if v is not None:
                        yield cname, str(e["name"]), v


def _host_of(token: str, addr_var: bool) -> str | None:
    """The host of one address token, lower-cased; ``None`` when the token is not an address."""
    if _URL.match(token):
        try:
            host = urlsplit(token).hostname
        except ValueError:
            return None
        return (host or "").lower()
    m = _HOST_PORT.match(token)
    if m:
        return m.group("host").lower()
    if addr_var:
        return token.lower()
    return None


def addresses_in_env(name: str, value: str) -> list[str]:
    """Hosts an env var names: for ``*_ADDR`` variables every comma/space-separated ``host``, ``host:port``
    or URL of the value; for other variables only ``host:port`` and URL tokens. Lower-cased, local hosts
    (``localhost``, ``0.0.0.0``, loopback, empty) dropped; tokens that are not host names are returned
    as-is for ``*_ADDR`` variables (so they can be reported) and skipped otherwise."""
    addr_var = name.upper().endswith("_ADDR")
    hosts: list[str] = []
    for token in re.split(r"[,\s]+", value.strip()):
        if not token:
            continue
        host = _host_of(token, addr_var)
        if host is None or host in _LOCAL_HOSTS:
            continue
        try:
            if ipaddress.ip_address(host.strip("[]")).is_loopback:
                continue
        except ValueError:
            pass
        if not addr_var and not (_DNS_NAME.match(host) and host[0].isalpha()):
            continue
        hosts.append(host)
    return hosts


def _service_keys(host: str, namespace: str) -> list[tuple[str, str]]:
    """Candidate (namespace, Service name) pairs for a DNS host, most specific first."""
    if not _DNS_NAME.match(host):
        return []
    parts = host.split(".")
    if len(parts) == 1:
        return [(namespace, parts[0])]
    if len(parts) == 2:
        return [(parts[1], parts[0])]
    if parts[2] == "svc":
        return [(parts[1], parts[0])]
    if len(parts) >= 4 and parts[3] == "svc":  # <pod>.<service>.<namespace>.svc.<domain>
        return [(parts[2], parts[1])]
    return []


def _workloads_of(objs: Iterable[Mapping[str, Any]], prefix: str = "") -> list[_Workload]:
    try:
        return [_workload(o) for o in objs if isinstance(o, Mapping) and o.get("kind") in WORKLOAD_KINDS]
    except ObjectError as exc:
        raise TopologyError(f"{prefix}{exc}") from exc


def workload_refs(objs: Iterable[Mapping[str, Any]]) -> dict[str, WorkloadRef]:
    """For each service of the input's workloads, the AppGroup reference of its (first) workload: kind, name,
    ``apps/v1`` (``v1`` for a Pod) and namespace; ``selector`` is the service name. Used to export a graph read
    from manifests as an AppGroup (:func:`policy.topology.appgroup.appgroup_from_graph`)."""
    out: dict[str, WorkloadRef] = {}
    for w in _workloads_of(objs):
        out.setdefault(
            w.service, WorkloadRef(w.kind, w.name, w.service, "v1" if w.kind == "Pod" else "apps/v1", w.namespace)
        )
    return out


def _resolver(workloads: Sequence[_Workload]):
    def resolve(ref: WorkloadRef) -> list[str]:
        def in_ns(ws: Iterable[_Workload]) -> list[_Workload]:
            return [w for w in ws if not ref.namespace or w.namespace == ref.namespace]

        hits = in_ns(w for w in workloads if w.labels.get(LABEL_WORKLOAD) == ref.selector)
        if not hits:
            hits = in_ns(w for w in workloads if w.name == ref.name)
        if not hits:
            hits = in_ns(w for w in workloads if w.service == ref.selector)
        return list(dict.fromkeys(w.service for w in hits))

    return resolve


def graph_from_objects(
    objs: Iterable[Mapping[str, Any]], source: str = "", appgroups: Sequence[AppGroup] | None = None
) -> tuple[ServiceGraph, list[str]]:
    """The call graph declared by Kubernetes objects (see the module docstring for the rules).

    ``appgroups``: the input's AppGroups already parsed with line numbers (:func:`read_appgroups`); ``None`` =
    parse the ``AppGroup`` objects found in ``objs`` (errors then name ``source`` without a line).
    Returns ``(graph, warnings)``: ``graph.services`` holds every workload's service; ``warnings`` holds one
    line per unresolved host or unknown ``depends-on`` name (deduplicated, in input order).
    Raises :class:`TopologyError` for a malformed workload (message names ``source``, object and field); an
    object of a shape none of the checks anticipated is still one line naming ``source``.
    """
    try:
        return _graph_from_objects(objs, source, appgroups)
    except TopologyError:
        raise
    except (TypeError, AttributeError, ValueError, KeyError, IndexError, OverflowError) as exc:
        where = f"{source}: " if source else ""
        detail = " ".join(str(exc).split())[:200]
        raise TopologyError(f"{where}malformed object ({type(exc).__name__}: {detail})") from None


def _graph_from_objects(
    objs: Iterable[Mapping[str, Any]], source: str, appgroups: Sequence[AppGroup] | None
) -> tuple[ServiceGraph, list[str]]:
    prefix = f"{source}: " if source else ""
    objs = [o for o in objs if isinstance(o, Mapping)]
    workloads: list[_Workload] = []
    services: dict[tuple[str, str], Mapping[str, str] | None] = {}
    configmaps: dict[tuple[str, str], dict[str, str]] = {}
    warnings: list[str] = []
    if appgroups is None:
        appgroups = [parse_appgroup(o, source, warnings) for o in objs if is_appgroup(o)]
    try:
        for o in objs:
            kind = o.get("kind")
            if kind in WORKLOAD_KINDS:
                workloads.append(_workload(o))
            elif kind == "Service":
                meta = o.get("metadata") or {}
                name = meta.get("name") if isinstance(meta, Mapping) else None
                if not name:
                    raise ObjectError(f"Service: metadata.name missing: {meta!r}")
                sel = _map(o.get("spec"), f"Service {_ns(o)}/{name}: spec").get("selector")
                if sel is not None and not isinstance(sel, Mapping):
                    raise ObjectError(f"Service {_ns(o)}/{name}: spec.selector: expected a map, got {sel!r}")
                services[(_ns(o), str(name))] = {str(k): str(v) for k, v in sel.items()} if sel else None
            elif kind == "ConfigMap":
                meta = o.get("metadata") or {}
                data = o.get("data") or {}
                if isinstance(meta, Mapping) and meta.get("name") and isinstance(data, Mapping):
                    configmaps[(_ns(o), str(meta["name"]))] = {str(k): str(v) for k, v in data.items()}
    except ObjectError as exc:
        raise TopologyError(f"{prefix}{exc}") from exc

    def selected(key: tuple[str, str]) -> list[_Workload]:
        sel = services.get(key)
        if not sel:
            return []
        return [w for w in workloads if w.namespace == key[0] and all(w.labels.get(k) == v for k, v in sel.items())]

    edges: list[ServiceEdge] = []
    hosts_seen = 0
    try:
        for w in workloads:
            for cname, var, value in _env_of(w, configmaps):
                for host in addresses_in_env(var, value):
                    hosts_seen += 1
                    keys = [k for k in _service_keys(host, w.namespace) if k in services]
                    if not keys:
                        warnings.append(
                            f"{prefix}{w.ref} container {cname}: env {var}={value!r}: host {host!r} "
                            f"is not a Service defined in the input; not an edge"
                        )
                        continue
                    targets = selected(keys[0])
                    if not targets:
                        warnings.append(
                            f"{prefix}{w.ref} container {cname}: env {var}={value!r}: Service "
                            f"{keys[0][0]}/{keys[0][1]} selects no workload in the input; not an edge"
                        )
                    edges.extend(ServiceEdge(w.service, t.service) for t in targets)
    except ObjectError as exc:
        raise TopologyError(f"{prefix}{exc}") from exc

    by_service = {w.service for w in workloads}
    for w in workloads:
        for dep in w.depends_on:
            if dep in by_service:
                edges.append(ServiceEdge(w.service, dep))
                continue
            named = [x for x in workloads if x.name == dep]
            named = [x for x in named if x.namespace == w.namespace] or named
            if not named:
                key = (w.namespace, dep)
                if key not in services:
                    key = next((k for k in services if k[1] == dep), key)
                named = selected(key)
            if not named:
                warnings.append(
                    f"{prefix}{w.ref}: annotation {ANNOTATION_DEPENDS_ON}: unknown service {dep!r} "
                    f"(no workload or Service of that name in the input); not an edge"
                )
                continue
            edges.extend(ServiceEdge(w.service, x.service) for x in named)

    if appgroups:
        ag_graph, ag_warnings = graph_from_appgroups(appgroups, _resolver(workloads))
        edges.extend(ag_graph.edges)
        warnings.extend(ag_warnings)

    graph = ServiceGraph.build((w.service for w in workloads), edges, f"manifests:{source}" if source else "manifests")
    services = {w.service for w in workloads}
    if len(services) >= 2 and not any(e.caller != e.callee for e in graph.edges):
        warnings.append(
            f"{prefix}{no_edges_reason(len(services), hosts_seen, sum(len(w.depends_on) for w in workloads))}"
        )
    return graph, list(dict.fromkeys(warnings))


def no_edges_reason(services: int, hosts: int, depends_on: int) -> str:
    """The warning for manifests that declare no call edge between their ``services`` workloads' services, given
    the addresses found in env vars (``hosts``) and the ``depends-on`` names (``depends_on``)."""
    if hosts or depends_on:
        found = f"{hosts} address(es) in env vars and {depends_on} {ANNOTATION_DEPENDS_ON} name(s) found"
        return f"no call edges among {services} services: {found}, none resolved to another workload (see above)"
    return (
        f"no call edges among {services} services: no `*_ADDR` env vars (or host:port / URL values naming a Service "
        f"of the input) or {ANNOTATION_DEPENDS_ON} annotations found; the app may be wired through config files: "
        f"annotate the workloads, or combine the manifests with a span table or an edge list"
    )


def load_manifests(paths: str | Path | Sequence[str | Path]) -> tuple[ServiceGraph, list[str]]:
    """Read Kubernetes manifests from one or more files or directories (ONE input) and return
    ``(graph, warnings)`` as :func:`graph_from_objects` does.

    Raises :class:`TopologyError` naming the file and line of a YAML/JSON syntax error, or the object and
    field of a malformed workload.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    objs: list[Mapping[str, Any]] = []
    for p in paths:
        if not Path(p).exists():
            raise TopologyError(f"{p}: no such file or directory")
        try:
            objs.extend(load_objects(p))
        except ObjectError as exc:
            raise TopologyError(str(exc)) from exc
    appgroups = None
    if any(is_appgroup(o) for o in objs):
        appgroups = [g for p in paths for g in read_appgroups(p)]  # again, with line numbers for errors
    return graph_from_objects(objs, ", ".join(str(p) for p in paths), appgroups)
