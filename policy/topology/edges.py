"""Call graph from an edge list: the JSON that ``hrl-policy graph --json`` writes, or an edge CSV.

JSON: one object ``{"services": [...], "edges": [{"caller": "a", "callee": "b", "rps": 1.5, ...}, ...]}``
(:meth:`policy.state.ServiceGraph.to_json`), so a graph printed with ``--json`` reads back unchanged.
``services`` is optional (the edges' endpoints are services anyway; list isolated services there); a top-level
``source`` string is allowed and ignored.

CSV: a header line, then one row per edge; ``caller`` and ``callee`` are required, the other columns optional,
an empty cell meaning unknown::

    caller,callee,rps,calls_per_request,parallel
    frontend,cart,12.5,0.9,false

Edge fields (both forms; units in the names): ``rps`` (calls/s, >= 0), ``calls_per_request`` (>= 0),
``latency_mean_ms``, ``latency_p50_ms``, ``latency_p95_ms``, ``latency_p99_ms`` (ms, >= 0), ``error_rate``
(0..1), ``parallel`` (``true``/``false``; CSV also ``1``/``0``, ``yes``/``no``). A pair listed twice is
merged as :meth:`policy.state.ServiceGraph.build` merges sources. An unknown field or column is a warning
(it may be a typo), never silently used.

Errors: :class:`TopologyError` naming the file and the field (``graph.json: edges[2].rps: expected a number
>= 0, got 'fast'``) or the file, line and column of a CSV cell.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from policy.documents import DocumentError, FileError, load_json, read_text
from policy.state import EDGE_FIELDS, ServiceEdge, ServiceGraph

from .common import TopologyError, csv_files, is_missing, iter_csv_rows, parse_float

__all__ = ["EDGE_FIELDS", "is_edges_json", "load_edges"]

_EXPECTED_CSV = "an edge CSV needs columns caller,callee (optional: " + ",".join(EDGE_FIELDS) + ")"
_TRUE = frozenset({"true", "1", "yes"})
_FALSE = frozenset({"false", "0", "no"})


def is_edges_json(doc: Any) -> bool:
    """True for a parsed JSON document in the edge-list shape: an object with an ``edges`` list and no
    ``kind`` (which would make it a Kubernetes object)."""
    return isinstance(doc, dict) and isinstance(doc.get("edges"), list) and "kind" not in doc


def _number(v: Any, where: str, name: str) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise TopologyError(f"{where}.{name}: expected a number >= 0 or null, got {v!r}")
    if name == "error_rate" and v > 1:
        raise TopologyError(f"{where}.{name}: expected a fraction 0..1, got {v!r}")
    return float(v)


def _edge_from_json(e: Any, where: str, warnings: list[str]) -> ServiceEdge:
    if not isinstance(e, dict):
        raise TopologyError(f"{where}: expected an object with caller and callee, got {e!r}")
    for k in ("caller", "callee"):
        if not isinstance(e.get(k), str) or not e[k].strip():
            raise TopologyError(f"{where}.{k}: expected a service name, got {e.get(k)!r}")
    kw: dict[str, Any] = {}
    for name in EDGE_FIELDS:
        if name not in e:
            continue
        if name == "parallel":
            if not isinstance(e[name], bool):
                raise TopologyError(f"{where}.parallel: expected true or false, got {e[name]!r}")
            kw[name] = e[name]
        else:
            kw[name] = _number(e[name], where, name)
    extra = sorted(set(e) - {"caller", "callee", *EDGE_FIELDS})
    if extra:
        known = ", ".join(("caller", "callee", *EDGE_FIELDS))
        warnings.append(f"{where}: unknown field(s) {', '.join(extra)} ignored (known: {known})")
    return ServiceEdge(e["caller"].strip(), e["callee"].strip(), **kw)


def _load_json(path: Path) -> tuple[ServiceGraph, list[str]]:
    try:  # the hardened reader: size, gzip, UTF-8; duplicate keys and nesting refused
        doc = load_json(read_text(path))
    except FileError as exc:
        raise TopologyError(str(exc)) from None
    except DocumentError as exc:
        first = exc.problems[0]
        line = f":{first.line}" if first.line is not None else ""
        where = f"{first.path}: " if first.path else ""
        raise TopologyError(f"{path}{line}: {where}{first.message}") from None
    if not is_edges_json(doc):
        raise TopologyError(
            f'{path}: expected an object {{"services": [...], "edges": [...]}} as `hrl-policy graph --json` writes'
        )
    warnings: list[str] = []
    extra = sorted(set(doc) - {"services", "edges", "source"})
    if extra:
        warnings.append(f"{path}: unknown top-level field(s) {', '.join(extra)} ignored")
    services = doc.get("services") or []
    if not isinstance(services, list) or not all(isinstance(s, str) and s.strip() for s in services):
        raise TopologyError(f"{path}: services: expected a list of service names, got {services!r}")
    edges = [_edge_from_json(e, f"{path}: edges[{i}]", warnings) for i, e in enumerate(doc["edges"])]
    return ServiceGraph.build([s.strip() for s in services], edges, f"edges:{path}"), warnings


def _load_csv(path: Path) -> tuple[ServiceGraph, list[str]]:
    warnings: list[str] = []
    edges: list[ServiceEdge] = []
    for f in csv_files(path):
        warned = False
        for line, col, row in iter_csv_rows(f, ("caller", "callee"), _EXPECTED_CSV):
            if not warned:
                extra = [c for c in col if c not in ("caller", "callee", *EDGE_FIELDS)]
                if extra:
                    warnings.append(f"{f}: unknown column(s) {', '.join(extra)} ignored ({_EXPECTED_CSV})")
                warned = True
            names = {}
            for k in ("caller", "callee"):
                names[k] = row[col[k]].strip()
                if not names[k]:
                    raise TopologyError(f"{f}:{line}: {k}: empty")
            kw: dict[str, Any] = {}
            for name in EDGE_FIELDS:
                if name not in col or is_missing(row[col[name]]):
                    continue
                cell = row[col[name]].strip()
                if name == "parallel":
                    if cell.lower() not in _TRUE | _FALSE:
                        raise TopologyError(f"{f}:{line}: parallel: expected true or false, got {cell!r}")
                    kw[name] = cell.lower() in _TRUE
                    continue
                v = parse_float(cell, f, line, name)
                if v < 0 or (name == "error_rate" and v > 1):
                    rng = "a fraction 0..1" if name == "error_rate" else "a number >= 0"
                    raise TopologyError(f"{f}:{line}: {name}: expected {rng}, got {cell!r}")
                kw[name] = v
            edges.append(ServiceEdge(names["caller"], names["callee"], **kw))
    return ServiceGraph.build((), edges, f"edges:{path}"), warnings


def load_edges(path: str | Path) -> tuple[ServiceGraph, list[str]]:
    """Read an edge list (JSON or CSV, see the module docstring) and return ``(graph, warnings)``.
    Raises :class:`TopologyError` for a missing file, invalid JSON/CSV or a bad field (one line, with the
    file and the field)."""
    p = Path(path)
    if not p.exists():
        raise TopologyError(f"{p}: no such file or directory")
    if p.is_file() and (p.suffix.lower() == ".json" or _starts_with_brace(p)):
        return _load_json(p)
    return _load_csv(p)


def _starts_with_brace(p: Path) -> bool:
    try:
        with open(p, "rb") as fh:
            return fh.read(4096).lstrip().startswith(b"{")
    except OSError:
        return False
