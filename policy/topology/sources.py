"""One entry point for every call-graph source: detect a source's kind from its content and combine several
sources into one :class:`policy.state.ServiceGraph` (what ``hrl-policy graph`` prints).

Kinds (:data:`FORMATS`):

- ``manifests``: Kubernetes objects in YAML or JSON (:mod:`policy.topology.manifests`);
- ``spans``: an OpenTelemetry-style span CSV with TraceID, SpanID, ParentID, PodName columns
  (:mod:`policy.topology.spans`);
- ``alibaba``: an Alibaba MSCallGraph CSV with um and dm columns (:mod:`policy.topology.alibaba`).

A directory is detected from its files: ``*.csv`` directly inside → the kind of the first one's header;
otherwise ``*.yaml`` / ``*.yml`` / ``*.json`` anywhere below → ``manifests``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, get_args

import yaml

from ..state import ServiceEdge, ServiceGraph
from .alibaba import alibaba_version, load_alibaba
from .common import TopologyError, read_csv_header
from .manifests import load_manifests
from .spans import load_spans

__all__ = ["Format", "FORMATS", "TopologyError", "detect_format", "load_graph"]

Format = Literal["manifests", "spans", "alibaba"]
FORMATS: tuple[str, ...] = get_args(Format)

_SPAN_KEYS = ("TraceID", "SpanID", "ParentID", "PodName")
_MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
_MAX_SNIFF_BYTES = 16 * 2**20  # files without a YAML/JSON suffix larger than this are not parsed as YAML
_EXPECTED = ("expected Kubernetes YAML/JSON objects with a 'kind', a span CSV with columns "
             + ",".join(_SPAN_KEYS) + ", or an Alibaba MSCallGraph CSV with columns um,dm,timestamp,rt")


def _csv_kind(header: list[str]) -> Format | None:
    if all(k in header for k in _SPAN_KEYS):
        return "spans"
    if alibaba_version(header) is not None:
        return "alibaba"
    return None


def _looks_like_objects(path: Path) -> bool:
    """True when the file parses as YAML or JSON holding at least one mapping with a ``kind``.
    Raises :class:`TopologyError` with file and line for a syntax error in a ``.yaml/.yml/.json`` file."""
    named = path.suffix.lower() in _MANIFEST_SUFFIXES
    try:
        if not named and path.stat().st_size > _MAX_SNIFF_BYTES:
            return False
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return False
    except OSError as exc:
        raise TopologyError(f"{path}: cannot read: {exc.strerror}") from exc
    if path.suffix.lower() == ".json" or text.lstrip().startswith(("{", "[")):
        try:
            docs = [json.loads(text)]
        except json.JSONDecodeError as exc:
            if not named:
                return False
            raise TopologyError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from exc
    else:
        try:
            docs = list(yaml.safe_load_all(text))
        except yaml.YAMLError as exc:
            if not named:
                return False
            mark = getattr(exc, "problem_mark", None)
            line = f":{mark.line + 1}" if mark is not None else ""
            raise TopologyError(f"{path}{line}: invalid YAML: {getattr(exc, 'problem', None) or exc}") from exc

    def has_kind(d: object) -> bool:
        if isinstance(d, dict):
            return "kind" in d
        if isinstance(d, list):
            return any(has_kind(x) for x in d)
        return False

    return any(has_kind(d) for d in docs)


def detect_format(path: str | Path) -> Format:
    """The kind of the source at ``path`` (a file or a directory), judged by content:

    - a CSV header holding TraceID, SpanID, ParentID and PodName → ``"spans"``;
    - a CSV header holding um, dm and timestamp (Alibaba v2021 or v2022) → ``"alibaba"``;
    - YAML or JSON whose documents are objects with a ``kind`` (or lists of them) → ``"manifests"``.

    Raises :class:`TopologyError` naming the file and what was expected when it is none of these, when
    it does not exist, or (with the line) when a YAML/JSON file does not parse.
    """
    p = Path(path)
    if not p.exists():
        raise TopologyError(f"{p}: no such file or directory")
    if p.is_dir():
        csvs = sorted(f for f in p.iterdir() if f.is_file() and f.suffix.lower() == ".csv")
        if csvs:
            header = read_csv_header(csvs[0])
            kind = _csv_kind(header)
            if kind is None:
                raise TopologyError(f"{csvs[0]}: unknown format (header {','.join(header)!r}); {_EXPECTED}")
            return kind
        if any(f.is_file() and f.suffix.lower() in _MANIFEST_SUFFIXES for f in p.rglob("*")):
            return "manifests"
        raise TopologyError(f"{p}: directory holds no *.csv, *.yaml, *.yml or *.json file; {_EXPECTED}")
    try:
        header = read_csv_header(p)
    except TopologyError:
        header = []
    kind = _csv_kind(header)
    if kind is not None:
        return kind
    if p.suffix.lower() != ".csv" and _looks_like_objects(p):
        return "manifests"
    first = ",".join(header)[:80] if header else ""
    seen = f" (first line {first!r})" if first else ""
    raise TopologyError(f"{p}: unknown format{seen}; {_EXPECTED}")


def load_graph(paths: str | Path | Sequence[str | Path],
               fmt: Format | None = None) -> tuple[ServiceGraph, list[str]]:
    """Read one or more sources and combine them into one graph.

    ``fmt`` forces the kind of every source; ``None`` detects each with :func:`detect_format`.
    All manifest sources together form ONE input (a Service in one file resolves hosts named in another);
    each span or Alibaba source is read on its own (a directory is one table). The graphs are merged with
    :meth:`ServiceGraph.build`: services are united; an edge seen in several sources is one edge whose
    ``rps`` is the sum of the known rates (a declared edge, ``rps=None``, takes the observed rate) and whose
    other fields keep the first known value (sources in the order given, manifests first).

    Returns ``(graph, warnings)``; ``graph.source`` lists ``kind:path`` of each source.
    Raises :class:`TopologyError` for an unknown ``fmt``, an undetectable source or a malformed file.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    if not paths:
        raise TopologyError("no source given")
    if fmt is not None and fmt not in FORMATS:
        raise TopologyError(f"unknown format {fmt!r}: expected one of {', '.join(FORMATS)}")
    kinds = [(Path(p), fmt or detect_format(p)) for p in paths]
    services: set[str] = set()
    edges: list[ServiceEdge] = []
    warnings: list[str] = []
    manifests = [p for p, k in kinds if k == "manifests"]
    if manifests:
        g, w = load_manifests(manifests)
        services.update(g.services)
        edges.extend(g.edges)
        warnings.extend(w)
    for p, k in kinds:
        if k == "manifests":
            continue
        g, w = load_spans(p) if k == "spans" else load_alibaba(p)
        services.update(g.services)
        edges.extend(g.edges)
        warnings.extend(w)
    source = "; ".join(f"{k}:{p}" for p, k in kinds)
    return ServiceGraph.build(services, edges, source), warnings
