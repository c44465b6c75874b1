"""One entry point for every call-graph source: detect a source's kind from its content and combine several
sources into one :class:`policy.state.ServiceGraph` (what ``hrl-policy graph`` prints).

Kinds (:data:`FORMATS`):

- ``manifests``: Kubernetes objects in YAML or JSON (:mod:`policy.topology.manifests`);
- ``appgroup``: a YAML/JSON file holding only scheduler-plugins ``AppGroup`` objects
  (``appgroup.diktyo.x-k8s.io/v1alpha1``, :mod:`policy.topology.appgroup`). Given together with manifests, an
  AppGroup file joins the manifests input, so its workload references resolve to the manifests' services;
- ``spans``: an OpenTelemetry-style span CSV with TraceID, SpanID, ParentID, PodName (or ServiceName) columns
  (:mod:`policy.topology.spans`; other header names through ``span_columns``);
- ``alibaba``: an Alibaba MSCallGraph CSV with um and dm columns (:mod:`policy.topology.alibaba`);
- ``edges``: an edge list, the JSON ``hrl-policy graph --json`` writes or a CSV with caller and callee columns
  (:mod:`policy.topology.edges`).

CSV tables may be gzip-compressed (``*.csv.gz``). A directory is detected from its files: ``*.csv`` /
``*.csv.gz`` directly inside → the kind of the first one's header;
otherwise ``*.yaml`` / ``*.yml`` / ``*.json`` anywhere below → ``appgroup`` when they hold AppGroups only, else
``manifests`` (AppGroups among them are read too).

Live sources are URIs (:mod:`policy.topology.prometheus`), read once by :func:`load_graph` (for a graph kept
current in the background, see :class:`policy.topology.live.TopologyRefresher`)::

    prometheus+istio://HOST:PORT[/PREFIX][?window=5m&namespace=NS&timeout=5s&reporter=destination|source]
    prometheus+linkerd://HOST:PORT[?window=..&namespace=..&caller_label=deployment&callee_label=dst_deployment]
    prometheus+otel://HOST:PORT[?window=..&latency=server|client&latency_unit=s|ms]
    prometheus+FLAVOR+https://...   (HTTPS)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, get_args

from policy.documents import DocumentError, FileError, load_json, load_yaml_all, read_text
from policy.observe import ObjectError, load_objects
from policy.state import ServiceEdge, ServiceGraph

from .alibaba import alibaba_version, load_alibaba
from .appgroup import WorkloadRef, is_appgroup, load_appgroup
from .common import TopologyError, is_csv_file, read_csv_header
from .edges import is_edges_json, load_edges
from .manifests import WORKLOAD_KINDS, load_manifests, workload_refs
from .spans import SPAN_ROLES, load_spans

__all__ = [
    "Format",
    "FORMATS",
    "TopologyError",
    "detect_format",
    "load_graph",
    "is_live_source",
    "workload_refs_from_sources",
]

Format = Literal["manifests", "spans", "alibaba", "appgroup", "edges"]
FORMATS: tuple[str, ...] = get_args(Format)

_SPAN_KEYS = ("TraceID", "SpanID", "ParentID", "PodName")
_SPAN_WHO = ("PodName", "ServiceName")
_MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
_MAX_SNIFF_BYTES = 16 * 2**20  # files without a YAML/JSON suffix larger than this are not parsed as YAML
_EXPECTED = (
    "expected Kubernetes YAML/JSON objects with a 'kind' (manifests or AppGroups), a span CSV with columns "
    + ",".join(_SPAN_KEYS)
    + " (or ServiceName), an Alibaba MSCallGraph CSV with columns um,dm,timestamp,rt, an edge list (CSV with "
    "caller,callee columns or the JSON of `hrl-policy graph --json`), or a prometheus+FLAVOR://HOST:PORT URI"
)


_LIVE_URI = re.compile(r"^prometheus\+[A-Za-z0-9+.-]*://")


def is_live_source(source: str | Path) -> bool:
    """True for a live source URI (``prometheus+istio://...`` and the other flavors), False for a path."""
    return isinstance(source, str) and bool(_LIVE_URI.match(source))


def _csv_kind(header: list[str], span_columns: dict[str, str] | None = None) -> Format | None:
    span_ids = [(span_columns or {}).get(role, SPAN_ROLES[role][0]) for role in ("trace_id", "span_id", "parent_id")]
    who = [(span_columns or {})[r] for r in ("pod", "service") if r in (span_columns or {})] or list(_SPAN_WHO)
    if all(k in header for k in span_ids) and any(k in header for k in who):
        return "spans"
    if alibaba_version(header) is not None:
        return "alibaba"
    if "caller" in header and "callee" in header:
        return "edges"
    return None


def _is_edges_json_file(path: Path) -> bool:
    """True when ``path`` is a JSON file (by suffix or a leading ``{``) holding an edge list."""
    try:
        if path.suffix.lower() != ".json":
            with open(path, "rb") as fh:
                if not fh.read(4096).lstrip().startswith(b"{"):
                    return False
        doc = load_json(read_text(path))
    except (OSError, FileError, DocumentError):
        return False
    return is_edges_json(doc)


def _objects_kind(path: Path) -> Format | None:
    """``"appgroup"`` when the file parses as YAML/JSON whose objects are AppGroups and no workloads,
    ``"manifests"`` when it holds other mappings with a ``kind``, else ``None``.
    Raises :class:`TopologyError` with file and line for a syntax error in a ``.yaml/.yml/.json`` file."""
    named = path.suffix.lower() in _MANIFEST_SUFFIXES
    try:
        if not named and path.stat().st_size > _MAX_SNIFF_BYTES:
            return None
        text = read_text(path)
    except FileError as exc:
        if not named and "not UTF-8" in str(exc):
            return None
        raise TopologyError(str(exc)) from None
    except OSError as exc:
        raise TopologyError(f"{path}: cannot read: {exc.strerror}") from exc
    try:  # duplicate keys, depth and alias bombs refused (policy.documents)
        if path.suffix.lower() == ".json" or text.lstrip().startswith(("{", "[")):
            docs = [load_json(text)]
        else:
            docs = load_yaml_all(text)
    except DocumentError as exc:
        if not named:
            return None
        first = exc.problems[0]
        line = f":{first.line}" if first.line is not None else ""
        what = f"{first.path}: {first.message}" if first.path else first.message
        raise TopologyError(f"{path}{line}: {what}") from None

    objs: list[dict] = []

    def collect(d: object) -> None:
        if isinstance(d, dict):
            if "kind" in d:
                objs.append(d)
            if isinstance(d.get("items"), list):
                collect(d["items"])
        elif isinstance(d, list):
            for x in d:
                collect(x)

    for d in docs:
        collect(d)
    if not objs:
        return None
    groups = [o for o in objs if is_appgroup(o)]
    if groups and not any(o.get("kind") in WORKLOAD_KINDS for o in objs):
        return "appgroup"
    return "manifests"


def _looks_like_objects(path: Path) -> bool:
    """True when the file parses as YAML or JSON holding at least one mapping with a ``kind``."""
    return _objects_kind(path) is not None


def detect_format(path: str | Path, span_columns: dict[str, str] | None = None) -> Format:
    """The kind of the source at ``path`` (a file or a directory), judged by content:

    - a CSV header holding TraceID, SpanID, ParentID and PodName or ServiceName (or the headers named by
      ``span_columns``, role → header) → ``"spans"``;
    - a CSV header holding um, dm and timestamp (Alibaba v2021 or v2022) → ``"alibaba"``;
    - a CSV header holding caller and callee, or a JSON object with an ``edges`` list and no ``kind`` →
      ``"edges"``;
    - a YAML or JSON file whose objects include an AppGroup and no workload → ``"appgroup"``;
    - YAML or JSON whose documents are objects with a ``kind`` (or lists of them) → ``"manifests"``.

    Raises :class:`TopologyError` naming the file and what was expected when it is none of these, when
    it does not exist, or (with the line) when a YAML/JSON file does not parse.
    """
    p = Path(path)
    try:
        p.stat()
    except FileNotFoundError:
        raise TopologyError(f"{p}: no such file or directory") from None
    except OSError as exc:  # a name too long, a loop of symbolic links, no permission
        raise TopologyError(f"{p}: cannot read: {exc.strerror or exc}") from None
    if p.is_dir():
        csvs = sorted(f for f in p.iterdir() if is_csv_file(f))
        if csvs:
            header = read_csv_header(csvs[0])
            kind = _csv_kind(header, span_columns)
            if kind is None:
                raise TopologyError(f"{csvs[0]}: unknown format (header {','.join(header)!r}); {_EXPECTED}")
            return kind
        docs = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in _MANIFEST_SUFFIXES)
        if docs:
            kinds = {_objects_kind(f) for f in docs} - {None}
            return "appgroup" if kinds == {"appgroup"} else "manifests"
        raise TopologyError(f"{p}: directory holds no *.csv, *.yaml, *.yml or *.json file; {_EXPECTED}")
    try:
        header = read_csv_header(p)
    except TopologyError:
        header = []
    kind = _csv_kind(header, span_columns)
    if kind is not None:
        return kind
    if _is_edges_json_file(p):
        return "edges"
    if p.suffix.lower() != ".csv":
        kind_of_objects = _objects_kind(p)
        if kind_of_objects is not None:
            return kind_of_objects
    first = ",".join(header)[:80] if header else ""
    seen = f" (first line {first!r})" if first else ""
    raise TopologyError(f"{p}: unknown format{seen}; {_EXPECTED}")


def load_graph(
    paths: str | Path | Sequence[str | Path], fmt: Format | None = None, span_columns: dict[str, str] | None = None
) -> tuple[ServiceGraph, list[str]]:
    """Read one or more sources and combine them into one graph.

    A source is a path (file or directory) or a live URI (``prometheus+FLAVOR://...``, fetched once here; see
    the module docstring). ``fmt`` forces the kind of every path; ``None`` detects each with
    :func:`detect_format`; ``span_columns`` (role → header, :data:`policy.topology.spans.SPAN_ROLES`) names the
    columns of span tables whose headers differ from the defaults. All manifest sources together form ONE input
    (a Service in one file resolves hosts named in another), and AppGroup files join it when there is one; each
    span, Alibaba, edge-list or lone AppGroup source is read on its own (a directory is one table). The graphs are
    merged with :meth:`ServiceGraph.build`:
    services are united; an edge seen in several sources is one edge whose ``rps`` is the sum of the known
    rates (a declared edge, ``rps=None``, takes the observed rate) and whose other fields keep the first known
    value (sources in the order given, manifests first, live sources last).

    Returns ``(graph, warnings)``; ``graph.source`` lists ``kind:path`` of each source (the URI form of a live
    one). Raises :class:`TopologyError` for an unknown ``fmt``, an undetectable source, a malformed file, a bad
    URI or a live source that cannot be read now (:class:`~policy.topology.prometheus.SourceUnavailable`).
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    if not paths:
        raise TopologyError("no source given")
    if fmt is not None and fmt not in FORMATS:
        raise TopologyError(f"unknown format {fmt!r}: expected one of {', '.join(FORMATS)}")
    uris = [str(p) for p in paths if is_live_source(p)]
    kinds = [(Path(p), fmt or detect_format(p, span_columns)) for p in paths if not is_live_source(p)]
    services: set[str] = set()
    edges: list[ServiceEdge] = []
    warnings: list[str] = []
    manifests = [p for p, k in kinds if k == "manifests"]
    if manifests:
        manifests += [p for p, k in kinds if k == "appgroup"]
        g, w = load_manifests(manifests)
        services.update(g.services)
        edges.extend(g.edges)
        warnings.extend(w)
    for p, k in kinds:
        if k == "manifests" or (k == "appgroup" and manifests):
            continue
        if k == "spans":
            g, w = load_spans(p, span_columns)
        else:
            loader = {"alibaba": load_alibaba, "appgroup": load_appgroup, "edges": load_edges}[k]
            g, w = loader(p)
        services.update(g.services)
        edges.extend(g.edges)
        warnings.extend(w)
    if manifests and any(e.caller != e.callee for e in edges):
        # another source supplies the edges the manifests do not declare: their "no call edges" note is moot
        warnings = [w for w in warnings if "no call edges among" not in w]
    names = [f"{k}:{p}" for p, k in kinds]
    if uris:
        from .prometheus import source_from_uri  # deferred: httpx, only for live sources
    for uri in uris:
        try:
            src = source_from_uri(uri)
        except ValueError as exc:
            raise TopologyError(str(exc)) from exc
        with src:
            g, w = src.fetch_with_warnings()
        services.update(g.services)
        edges.extend(g.edges)
        warnings.extend(w)
        names.append(src.name)
    return ServiceGraph.build(services, edges, "; ".join(names)), warnings


def workload_refs_from_sources(paths: Sequence[str | Path]) -> dict[str, WorkloadRef]:
    """The AppGroup workload reference (kind, name, namespace) of each service defined by the manifest sources
    among ``paths`` (others are skipped), for :func:`policy.topology.appgroup.appgroup_from_graph`.
    Raises :class:`TopologyError` for a malformed manifest."""
    objs = []
    for p in paths:
        if is_live_source(p) or detect_format(p) != "manifests":
            continue
        try:
            objs.extend(load_objects(p))
        except ObjectError as exc:
            raise TopologyError(str(exc)) from exc
    return workload_refs(objs)
