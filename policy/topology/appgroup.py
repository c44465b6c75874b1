"""The scheduler-plugins ``AppGroup`` custom resource (``appgroup.diktyo.x-k8s.io/v1alpha1``): read it as a call
graph, and write a :class:`~policy.state.ServiceGraph` as one, for users of the NetworkAware plugins
(TopologicalSort, NetworkOverhead).

Schema (kubernetes-sigs/scheduler-plugins ``manifests/appgroup/crd.yaml``, commit 93126ea of 2025-05-25; the Go
types in diktyo-io/appgroup-api ``pkg/apis/appgroup/v1alpha1/types.go``)::

    apiVersion: appgroup.diktyo.x-k8s.io/v1alpha1
    kind: AppGroup
    metadata: {name: online-boutique, namespace: default}
    spec:
      numMembers: 11                       # required, int32 >= 1: Pods in the group
      topologySortingAlgorithm: KahnSort   # required string (KahnSort, TarjanSort, ReverseKahn, ReverseTarjan,
                                           #   AlternateKahn, AlternateTarjan)
      workloads:                           # required list
      - workload: {kind: Deployment, name: frontend, selector: frontend,   # kind, name, selector required
                   apiVersion: apps/v1, namespace: default}                # optional
        dependencies:                      # optional list
        - workload: {kind: Deployment, name: cartservice, selector: cartservice}   # required
          minBandwidth: 100Mi              # optional Kubernetes quantity (int or string)
          maxNetworkCost: 80               # optional int64 0..10000 (default 0)

The NetworkAware plugins find a workload's Pods by the label ``appgroup.diktyo.x-k8s.io.workload: <selector>``
(and the group by ``appgroup.diktyo.x-k8s.io: <AppGroup name>``).

Reading rules:

- each ``spec.workloads[i]`` is a service named by its ``workload.selector`` (the pod-label value that identifies
  its Pods); each ``dependencies[j]`` is a declared edge ``workload → dependency`` (``rps=None``). AppGroup
  dependencies say "these two talk" and are often listed both ways (the upstream Online Boutique example lists
  ``cartservice → frontend`` as well as ``frontend → cartservice``); they are read as written;
- when the AppGroup is read together with Kubernetes manifests (:func:`policy.topology.manifests.graph_from_objects`),
  a selector resolves to the workload whose pod template carries ``appgroup.diktyo.x-k8s.io.workload: <selector>``,
  else to the workload named ``workload.name``, else to a service of that name; unresolved ones are warnings;
- the annotation ``hrl-scheduler.io/call-graph`` (written by :func:`appgroup_from_graph`) holds the edges'
  measured fields as JSON (``[{"caller", "callee", "rps", "latency_p95_ms", ...}]``, the shape of
  :meth:`ServiceGraph.to_json`); when present, those fields are restored on the edges the spec declares, so a
  graph survives a round trip through an AppGroup. Entries for edges the spec does not declare are warnings;
- the legacy group ``appgroup.diktyo.k8s.io`` (the first diktyo CRD) is read too, with a warning.

Errors: :class:`TopologyError` ``file:line: field.path: problem`` (a required field missing, a wrong type, a
value out of the CRD's range), or ``file:line: invalid YAML: ...`` for a syntax error.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from policy.documents import (
    DocumentError,
    FileError,
    dump_yaml,
    load_json,
    load_yaml_all,
    read_exponent_floats,
    read_text,
)
from policy.state import EDGE_MEASURES, ServiceEdge, ServiceGraph

from .common import TopologyError

__all__ = [
    "API_GROUP",
    "API_VERSION",
    "LEGACY_API_GROUP",
    "KIND",
    "LABEL_APPGROUP",
    "LABEL_WORKLOAD",
    "ANNOTATION_CALL_GRAPH",
    "SORTING_ALGORITHMS",
    "AppGroupWorkload",
    "AppGroupDependency",
    "AppGroup",
    "WorkloadRef",
    "is_appgroup",
    "load_yaml_with_lines",
    "parse_appgroup",
    "read_appgroups",
    "graph_from_appgroups",
    "load_appgroup",
    "appgroup_from_graph",
    "dump_appgroup",
]

API_GROUP = "appgroup.diktyo.x-k8s.io"
LEGACY_API_GROUP = "appgroup.diktyo.k8s.io"
API_VERSION = f"{API_GROUP}/v1alpha1"
KIND = "AppGroup"
LABEL_APPGROUP = API_GROUP
"""Pod label naming the AppGroup a Pod belongs to (appgroup-api ``AppGroupLabel``)."""
LABEL_WORKLOAD = API_GROUP + ".workload"
"""Pod label whose value is the ``selector`` of the Pod's workload (appgroup-api ``AppGroupSelectorLabel``)."""
ANNOTATION_CALL_GRAPH = "hrl-scheduler.io/call-graph"
SORTING_ALGORITHMS = ("KahnSort", "TarjanSort", "ReverseKahn", "ReverseTarjan", "AlternateKahn", "AlternateTarjan")
"""The values appgroup-api defines for ``topologySortingAlgorithm`` (the CRD schema itself accepts any string)."""

# resource.Quantity, as the CRD's pattern for minBandwidth
_QUANTITY = re.compile(
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)


# ---- YAML with line numbers ----------------------------------------------------------------------------


class _Map(dict):
    """A YAML mapping that remembers the 1-based line of itself (``line``) and of each key (``key_lines``)."""

    line: int = 0
    key_lines: dict[str, int]


class _Seq(list):
    """A YAML sequence that remembers its line (``line``) and each item's line (``item_lines``)."""

    line: int = 0
    item_lines: list[int]


@read_exponent_floats
class _LineLoader(yaml.SafeLoader):
    """PyYAML's (pure-Python) safe loader whose maps and sequences remember their lines; read through
    :func:`policy.documents.load_yaml_all`, which refuses duplicate keys, depth and alias bombs first."""


def _construct_map(loader: _LineLoader, node: yaml.MappingNode) -> _Map:
    loader.flatten_mapping(node)
    m = _Map()
    m.line = node.start_mark.line + 1
    m.key_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark, "found an unhashable key", key_node.start_mark
            ) from None
        m[key] = loader.construct_object(value_node, deep=True)
        if isinstance(key, str):
            m.key_lines[key] = key_node.start_mark.line + 1
    return m


def _construct_seq(loader: _LineLoader, node: yaml.SequenceNode) -> _Seq:
    s = _Seq(loader.construct_object(child, deep=True) for child in node.value)
    s.line = node.start_mark.line + 1
    s.item_lines = [child.start_mark.line + 1 for child in node.value]
    return s


_LineLoader.add_constructor("tag:yaml.org,2002:map", _construct_map)
_LineLoader.add_constructor("tag:yaml.org,2002:seq", _construct_seq)


def load_yaml_with_lines(path: str | Path) -> list[Any]:
    """The documents of a YAML (or JSON) file, mappings and sequences carrying the line numbers of their keys
    and items (``_Map.key_lines``, ``_Seq.item_lines``; 1-based). Raises :class:`TopologyError`
    ``file:line: invalid YAML|JSON: problem`` for a syntax error and ``file: cannot read`` for I/O errors."""
    p = Path(path)
    try:
        text = read_text(p)
    except FileError as exc:
        raise TopologyError(str(exc)) from None
    try:
        if p.suffix.lower() == ".json":
            load_json(text)  # JSON's own errors (with their line) before YAML reads it
        return [d for d in load_yaml_all(text, _LineLoader) if d is not None]
    except DocumentError as exc:
        first = exc.problems[0]
        line = f":{first.line}" if first.line is not None else ""
        what = f"{first.path}: {first.message}" if first.path else first.message
        raise TopologyError(f"{p}{line}: {what}") from None


def _line_of(container: Any, key: str | int | None = None) -> int:
    if key is not None:
        if isinstance(container, _Map) and isinstance(key, str) and key in container.key_lines:
            return container.key_lines[key]
        if isinstance(container, _Seq) and isinstance(key, int) and 0 <= key < len(container.item_lines):
            return container.item_lines[key]
    return getattr(container, "line", 0)


# ---- the object model ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WorkloadRef:
    """``AppGroupWorkloadInfo``: ``kind``, ``name``, ``selector`` (required), ``api_version``, ``namespace``
    (optional, ``""`` when absent)."""

    kind: str
    name: str
    selector: str
    api_version: str = ""
    namespace: str = ""

    def to_json(self) -> dict[str, str]:
        d = {"kind": self.kind, "name": self.name, "selector": self.selector}
        if self.api_version:
            d["apiVersion"] = self.api_version
        if self.namespace:
            d["namespace"] = self.namespace
        return d


@dataclass(frozen=True, slots=True)
class AppGroupDependency:
    """``DependenciesInfo``: the workload depended on, ``min_bandwidth`` (a quantity string, ``None`` when
    absent) and ``max_network_cost`` (0..10000, ``None`` when absent; the CRD defaults it to 0)."""

    workload: WorkloadRef
    min_bandwidth: str | None = None
    max_network_cost: int | None = None
    line: int = 0


@dataclass(frozen=True, slots=True)
class AppGroupWorkload:
    """``AppGroupWorkload``: a workload and its dependencies."""

    workload: WorkloadRef
    dependencies: tuple[AppGroupDependency, ...] = ()
    line: int = 0


@dataclass(frozen=True, slots=True)
class AppGroup:
    """One parsed AppGroup object. ``call_graph``: the edges of the ``hrl-scheduler.io/call-graph`` annotation
    keyed by (caller, callee) (empty when absent); ``path`` and ``line``: where the object starts (line 0 when
    unknown)."""

    name: str
    namespace: str
    num_members: int
    topology_sorting_algorithm: str
    workloads: tuple[AppGroupWorkload, ...]
    call_graph: Mapping[tuple[str, str], ServiceEdge]
    path: str = ""
    line: int = 0

    def where(self, line: int | None = None) -> str:
        """``path:line: AppGroup namespace/name`` (the object's own line when ``line`` is not given)."""
        n = self.line if line is None else line
        return (
            f"{self.path}:{n}: AppGroup {self.namespace}/{self.name}"
            if n
            else f"{self.path}: AppGroup {self.namespace}/{self.name}"
        )


def is_appgroup(obj: Any) -> bool:
    """True for a mapping with ``kind: AppGroup`` whose ``apiVersion`` is in the AppGroup API group (current
    ``appgroup.diktyo.x-k8s.io`` or legacy ``appgroup.diktyo.k8s.io``)."""
    if not isinstance(obj, Mapping) or obj.get("kind") != KIND:
        return False
    group = str(obj.get("apiVersion") or "").split("/")[0]
    return group in (API_GROUP, LEGACY_API_GROUP)


class _Ctx:
    """Builds ``file:line: path: problem`` messages."""

    def __init__(self, path: str):
        self.path = path

    def fail(self, container: Any, key: str | int | None, field_path: str, problem: str) -> TopologyError:
        line = _line_of(container, key)
        where = f"{self.path}:{line}" if line else self.path
        return TopologyError(f"{where}: {field_path}: {problem}")


def _req_str(ctx: _Ctx, m: Any, key: str, fpath: str) -> str:
    if key not in m or m[key] is None:
        raise ctx.fail(m, None, f"{fpath}.{key}", "required field missing")
    v = m[key]
    if not isinstance(v, str) or not v.strip():
        raise ctx.fail(m, key, f"{fpath}.{key}", f"expected a non-empty string, got {v!r}")
    return v.strip()


def _opt_str(ctx: _Ctx, m: Any, key: str, fpath: str) -> str:
    v = m.get(key)
    if v is None:
        return ""
    if not isinstance(v, str):
        raise ctx.fail(m, key, f"{fpath}.{key}", f"expected a string, got {v!r}")
    return v.strip()


def _map(ctx: _Ctx, parent: Any, key: str | int, fpath: str, required: bool = True) -> Mapping[str, Any] | None:
    v = parent[key] if isinstance(key, int) else parent.get(key)
    if v is None:
        if required:
            if isinstance(key, int):
                raise ctx.fail(parent, key, fpath, "expected a map, got null")
            raise ctx.fail(parent, None, fpath, "required field missing")
        return None
    if not isinstance(v, Mapping):
        raise ctx.fail(parent, key, fpath, f"expected a map, got {v!r}")
    return v


def _list(ctx: _Ctx, parent: Any, key: str, fpath: str, required: bool) -> Sequence[Any]:
    v = parent.get(key)
    if v is None:
        if required:
            raise ctx.fail(parent, None, fpath, "required field missing")
        return ()
    if not isinstance(v, list):
        raise ctx.fail(parent, key, fpath, f"expected a list, got {v!r}")
    return v


def _workload_ref(ctx: _Ctx, parent: Any, key: str, fpath: str) -> WorkloadRef:
    m = _map(ctx, parent, key, fpath)
    assert m is not None
    for k in m:
        if k not in ("kind", "name", "selector", "apiVersion", "namespace"):
            raise ctx.fail(m, k, f"{fpath}.{k}", "unknown field (expected kind, name, selector, apiVersion, namespace)")
    return WorkloadRef(
        kind=_req_str(ctx, m, "kind", fpath),
        name=_req_str(ctx, m, "name", fpath),
        selector=_req_str(ctx, m, "selector", fpath),
        api_version=_opt_str(ctx, m, "apiVersion", fpath),
        namespace=_opt_str(ctx, m, "namespace", fpath),
    )


def _int_field(ctx: _Ctx, m: Any, key: str, fpath: str, lo: int, hi: int) -> int:
    v = m[key]
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        else:
            raise ctx.fail(m, key, fpath, f"expected an integer, got {v!r}")
    if not lo <= v <= hi:
        raise ctx.fail(m, key, fpath, f"out of range {lo}..{hi}: {v}")
    return v


def _call_graph(ctx: _Ctx, meta: Mapping[str, Any], warnings: list[str]) -> dict[tuple[str, str], ServiceEdge]:
    ann = meta.get("annotations")
    if not isinstance(ann, Mapping) or ANNOTATION_CALL_GRAPH not in ann:
        return {}
    fpath = f"metadata.annotations[{ANNOTATION_CALL_GRAPH!r}]"
    raw = ann[ANNOTATION_CALL_GRAPH]
    try:
        data = json.loads(raw) if isinstance(raw, str) else None
    except json.JSONDecodeError as exc:
        raise ctx.fail(ann, ANNOTATION_CALL_GRAPH, fpath, f"invalid JSON: {exc.msg} (column {exc.colno})") from exc
    if not isinstance(data, list):
        raise ctx.fail(
            ann, ANNOTATION_CALL_GRAPH, fpath, 'expected a JSON list of edges [{"caller", "callee", "rps", ...}]'
        )
    out: dict[tuple[str, str], ServiceEdge] = {}
    for i, e in enumerate(data):
        if not isinstance(e, Mapping) or not isinstance(e.get("caller"), str) or not isinstance(e.get("callee"), str):
            raise ctx.fail(
                ann,
                ANNOTATION_CALL_GRAPH,
                f"{fpath}[{i}]",
                f"expected {{'caller': str, 'callee': str, ...}}, got {e!r}",
            )
        kw: dict[str, float | None] = {}
        for name in EDGE_MEASURES:
            v = e.get(name)
            if v is None:
                kw[name] = None
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ctx.fail(
                    ann,
                    ANNOTATION_CALL_GRAPH,
                    f"{fpath}[{i}].{name}",
                    f"expected a finite number >= 0 or null, got {v!r}",
                )
            kw[name] = float(v)
        key = (e["caller"], e["callee"])
        if key in out:
            warnings.append(f"{ctx.path}: {fpath}: edge {key[0]} -> {key[1]} listed twice; the first is kept")
            continue
        out[key] = ServiceEdge(key[0], key[1], **kw)
    return out


def parse_appgroup(obj: Mapping[str, Any], path: str = "", warnings: list[str] | None = None) -> AppGroup:
    """Validate one AppGroup object (a mapping, ideally from :func:`load_yaml_with_lines` so errors carry lines)
    against the CRD schema and return an :class:`AppGroup`. Appends notes (legacy group, unknown sorting
    algorithm) to ``warnings``. Raises :class:`TopologyError` ``path:line: field.path: problem``."""
    warnings = warnings if warnings is not None else []
    ctx = _Ctx(path or "<AppGroup>")
    api = str(obj.get("apiVersion") or "")
    group, _, version = api.partition("/")
    if group not in (API_GROUP, LEGACY_API_GROUP) or obj.get("kind") != KIND:
        raise ctx.fail(
            obj, "apiVersion", "apiVersion", f"expected {API_VERSION} kind {KIND}, got {api!r} kind {obj.get('kind')!r}"
        )
    if version != "v1alpha1":
        raise ctx.fail(obj, "apiVersion", "apiVersion", f"unsupported version {version!r} (expected v1alpha1)")
    meta = _map(ctx, obj, "metadata", "metadata")
    assert meta is not None
    name = _req_str(ctx, meta, "name", "metadata")
    namespace = _opt_str(ctx, meta, "namespace", "metadata") or "default"
    line0 = getattr(obj, "line", 0)
    where = f"{ctx.path}:{line0}: AppGroup {namespace}/{name}" if line0 else f"{ctx.path}: AppGroup {namespace}/{name}"
    if group == LEGACY_API_GROUP:
        warnings.append(f"{where}: legacy API group {LEGACY_API_GROUP} (current: {API_GROUP})")
    spec = _map(ctx, obj, "spec", "spec")
    assert spec is not None
    if "numMembers" not in spec:
        raise ctx.fail(spec, None, "spec.numMembers", "required field missing")
    num = _int_field(ctx, spec, "numMembers", "spec.numMembers", 1, 2**31 - 1)
    algo = _req_str(ctx, spec, "topologySortingAlgorithm", "spec")
    if algo not in SORTING_ALGORITHMS:
        warnings.append(
            f"{where}: spec.topologySortingAlgorithm {algo!r} is not one of {', '.join(SORTING_ALGORITHMS)}"
        )
    items = _list(ctx, spec, "workloads", "spec.workloads", required=True)
    workloads: list[AppGroupWorkload] = []
    for i, item in enumerate(items):
        ipath = f"spec.workloads[{i}]"
        if not isinstance(item, Mapping):
            raise ctx.fail(items, i, ipath, f"expected a map with 'workload' and 'dependencies', got {item!r}")
        ref = _workload_ref(ctx, item, "workload", f"{ipath}.workload")
        deps: list[AppGroupDependency] = []
        dep_items = _list(ctx, item, "dependencies", f"{ipath}.dependencies", required=False)
        for j, d in enumerate(dep_items):
            dpath = f"{ipath}.dependencies[{j}]"
            if not isinstance(d, Mapping):
                raise ctx.fail(dep_items, j, dpath, f"expected a map with 'workload', got {d!r}")
            dref = _workload_ref(ctx, d, "workload", f"{dpath}.workload")
            bw = d.get("minBandwidth")
            if isinstance(bw, float) and math.isfinite(bw):  # `1e3` is a number in YAML 1.2, a quantity to the API
                bw = str(int(bw)) if bw.is_integer() and abs(bw) < 1e18 else repr(bw)
            if bw is not None:
                if isinstance(bw, bool) or not isinstance(bw, (int, str)) or not _QUANTITY.match(str(bw).strip()):
                    raise ctx.fail(
                        d,
                        "minBandwidth",
                        f"{dpath}.minBandwidth",
                        f"expected a Kubernetes quantity such as 100Mi, got {bw!r}",
                    )
                bw = str(bw).strip()
            cost = None
            if d.get("maxNetworkCost") is not None:
                cost = _int_field(ctx, d, "maxNetworkCost", f"{dpath}.maxNetworkCost", 0, 10000)
            deps.append(AppGroupDependency(dref, bw, cost, _line_of(dep_items, j)))
        workloads.append(AppGroupWorkload(ref, tuple(deps), _line_of(items, i)))
    call_graph = _call_graph(ctx, meta, warnings)
    return AppGroup(name, namespace, num, algo, tuple(workloads), call_graph, ctx.path, getattr(obj, "line", 0))


def _iter_objects(doc: Any) -> Iterable[Any]:
    """Objects of one document; a ``List`` / ``AppGroupList`` yields its items."""
    if isinstance(doc, list):
        for d in doc:
            yield from _iter_objects(d)
    elif isinstance(doc, Mapping):
        if isinstance(doc.get("items"), list) and str(doc.get("kind", "")).endswith("List"):
            yield from _iter_objects(doc["items"])
        else:
            yield doc


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(f for f in path.rglob("*") if f.is_file() and f.suffix.lower() in (".yaml", ".yml", ".json"))
    if not path.exists():
        raise TopologyError(f"{path}: no such file or directory")
    return [path]


def read_appgroups(path: str | Path, warnings: list[str] | None = None) -> list[AppGroup]:
    """Every AppGroup object in a YAML/JSON file or in the ``*.yaml|*.yml|*.json`` files below a directory
    (other kinds are skipped). Raises :class:`TopologyError` with file, line and field for malformed input."""
    warnings = warnings if warnings is not None else []
    out = []
    for f in _files(Path(path)):
        for doc in load_yaml_with_lines(f):
            for obj in _iter_objects(doc):
                if is_appgroup(obj):
                    out.append(parse_appgroup(obj, str(f), warnings))
                elif isinstance(obj, Mapping) and obj.get("kind") == KIND:
                    warnings.append(
                        f"{f}:{_line_of(obj)}: kind {KIND} with apiVersion {obj.get('apiVersion')!r} "
                        f"is not a scheduler-plugins AppGroup ({API_VERSION}); skipped"
                    )
    return out


def graph_from_appgroups(
    groups: Sequence[AppGroup], resolve=None, source: str = "appgroup"
) -> tuple[ServiceGraph, list[str]]:
    """The call graph of parsed AppGroups (see the module docstring for the rules).

    ``resolve(ref: WorkloadRef) -> list[str]``: the services a workload reference names (used with manifests);
    ``None`` = the reference's ``selector``. A reference resolving to nothing is a warning, not an edge.
    Returns ``(graph, warnings)``.
    """
    warnings: list[str] = []
    services: list[str] = []
    edges: list[ServiceEdge] = []

    def names(ref: WorkloadRef, group: AppGroup, line: int) -> list[str]:
        if resolve is None:
            return [ref.selector]
        got = list(resolve(ref))
        if not got:
            warnings.append(
                f"{group.where(line)}: workload {ref.kind} {ref.name} (selector {ref.selector!r}) "
                f"matches no workload in the input; not an edge"
            )
        return got

    for g in groups:
        declared = {w.workload.selector for w in g.workloads}
        seen_edges: set[tuple[str, str]] = set()
        for w in g.workloads:
            callers = names(w.workload, g, w.line)
            services.extend(callers)
            for d in w.dependencies:
                if d.workload.selector not in declared:
                    warnings.append(
                        f"{g.where(d.line)}: workload {w.workload.selector!r} depends on "
                        f"{d.workload.selector!r}, which is not among spec.workloads"
                    )
                callees = names(d.workload, g, d.line)
                services.extend(callees)
                for c in callers:
                    for t in callees:
                        key = (c, t)
                        if key in seen_edges:
                            continue
                        seen_edges.add(key)
                        measured = g.call_graph.get(key)
                        edges.append(measured if measured is not None else ServiceEdge(c, t))
        for key in g.call_graph:
            if key not in seen_edges:
                warnings.append(
                    f"{g.where()}: annotation {ANNOTATION_CALL_GRAPH} lists {key[0]} -> {key[1]}, "
                    f"which spec.workloads does not declare; ignored"
                )
    return ServiceGraph.build(services, edges, source), list(dict.fromkeys(warnings))


def load_appgroup(path: str | Path) -> tuple[ServiceGraph, list[str]]:
    """Read the AppGroup(s) of a file or directory as one call graph; ``(graph, warnings)``.
    Raises :class:`TopologyError` (file, line, field) for malformed input or when there is no AppGroup."""
    warnings: list[str] = []
    groups = read_appgroups(path, warnings)
    if not groups:
        raise TopologyError(f"{path}: no {KIND} object ({API_VERSION}) found")
    graph, w = graph_from_appgroups(groups, source=f"appgroup:{path}")
    return graph, warnings + w


# ---- export --------------------------------------------------------------------------------------------


def appgroup_from_graph(
    graph: ServiceGraph,
    name: str,
    namespace: str = "default",
    *,
    workloads: Mapping[str, WorkloadRef] | None = None,
    topology_sorting_algorithm: str = "KahnSort",
    num_members: int | None = None,
    max_network_cost: int | None = None,
    min_bandwidth: str | None = None,
    include_call_graph: bool = True,
) -> dict[str, Any]:
    """``graph`` as an AppGroup object (a plain dict, ready for YAML/JSON).

    - one ``spec.workloads`` entry per service, in ``graph.services`` order, with ``dependencies`` = its
      callees (self-edges dropped: NetworkAware has no use for them);
    - ``workloads``: the reference of each service (kind, workload name, apiVersion, namespace; ``selector`` is
      always the service name); a service not in it is ``Deployment <service>`` in ``apps/v1`` and ``namespace``;
    - ``num_members``: Pods in the group (default: the number of services, i.e. one Pod each, at least 1);
    - ``max_network_cost`` (0..10000) and ``min_bandwidth`` (a quantity such as ``100Mi``): written on every
      dependency when given (the CRD defaults maxNetworkCost to 0, which NetworkOverhead reads as "same host only";
      pass e.g. 100, the plugin's MaxCost, to constrain nothing);
    - ``include_call_graph``: write the measured edge fields to the ``hrl-scheduler.io/call-graph`` annotation
      (the CRD has no field for them), so :func:`load_appgroup` restores them.

    Pods must carry ``appgroup.diktyo.x-k8s.io: <name>`` and ``appgroup.diktyo.x-k8s.io.workload: <service>`` for
    the NetworkAware plugins to find them. Raises ``ValueError`` naming the bad argument.
    """
    if not name or not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name) or len(name) > 253:
        raise ValueError(f"name: not a Kubernetes object name: {name!r}")
    if topology_sorting_algorithm not in SORTING_ALGORITHMS:
        raise ValueError(
            f"topology_sorting_algorithm: expected one of {', '.join(SORTING_ALGORITHMS)}, "
            f"got {topology_sorting_algorithm!r}"
        )
    if max_network_cost is not None and not 0 <= max_network_cost <= 10000:
        raise ValueError(f"max_network_cost: out of range 0..10000: {max_network_cost}")
    if min_bandwidth is not None and not _QUANTITY.match(str(min_bandwidth)):
        raise ValueError(f"min_bandwidth: not a Kubernetes quantity: {min_bandwidth!r}")
    if num_members is not None and num_members < 1:
        raise ValueError(f"num_members: must be >= 1, got {num_members}")
    workloads = workloads or {}

    def ref(service: str) -> dict[str, str]:
        r = workloads.get(service)
        if r is None:
            r = WorkloadRef("Deployment", service, service, "apps/v1", namespace)
        return WorkloadRef(r.kind, r.name, service, r.api_version or "apps/v1", r.namespace or namespace).to_json()

    items = []
    for s in graph.services:
        deps = []
        for e in graph.callees(s):
            if e.callee == s:
                continue
            d: dict[str, Any] = {"workload": ref(e.callee)}
            if min_bandwidth is not None:
                d["minBandwidth"] = str(min_bandwidth)
            if max_network_cost is not None:
                d["maxNetworkCost"] = int(max_network_cost)
            deps.append(d)
        item: dict[str, Any] = {"workload": ref(s)}
        if deps:
            item["dependencies"] = deps
        items.append(item)
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    measured = [
        e
        for e in graph.to_json()["edges"]
        if e["caller"] != e["callee"] and any(e.get(k) is not None for k in EDGE_MEASURES)
    ]
    if include_call_graph and measured:
        meta["annotations"] = {ANNOTATION_CALL_GRAPH: json.dumps(measured, separators=(",", ":"))}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": meta,
        "spec": {
            "numMembers": int(num_members if num_members is not None else max(1, len(graph.services))),
            "topologySortingAlgorithm": topology_sorting_algorithm,
            "workloads": items,
        },
    }


def dump_appgroup(obj: Mapping[str, Any]) -> str:
    """An AppGroup dict as a YAML document (keys in the order written, block style)."""
    return dump_yaml(dict(obj), sort_keys=False, default_flow_style=False, width=120)
