"""Call graph from OpenTelemetry-style span tables (one CSV row per span).

Columns (header names, any order; extra columns ignored):

- ``TraceID``, ``SpanID``, ``ParentID`` (``root``, empty or all zeros for a trace's entry span),
  ``PodName`` (the pod that recorded the span), ``StartTimeUnixNano``, ``EndTimeUnixNano`` (integers, ns);
- optional ``Duration`` (microseconds; when absent the duration is End - Start), ``OperationName``;
- optional status column ``StatusCode`` / ``Status`` / ``status_code`` / ``otel.status_code``: a span is an
  error when its value is ``ERROR``, ``STATUS_CODE_ERROR`` or ``2`` (OpenTelemetry ``Status.StatusCode``),
  any case; without such a column ``error_rate`` is ``None``.

This is the layout of the TraStrainer Online Boutique spans (FSE'24 artifact, see
``tests/fixtures/online-boutique-spans/PROVENANCE.md``), the same information as OTLP / Jaeger spans.

Rules:

- a span's service is its ``PodName`` without the last two dash-separated parts (ReplicaSet hash and pod
  suffix: ``frontend-579b9bff58-t2dbm`` → ``frontend``), as :func:`policy.observe.service_of` does for a
  pod with no labels;
- for every span whose parent span is in the table: caller = the parent span's service, callee = the
  span's service, counted when they differ (client spans sit in the caller's pod, server spans in the
  callee's); the latency of the call is the duration of that child (callee-side) span;
- a directory is ONE table: every ``*.csv`` directly inside it is read and the spans are joined across
  files, so a parent in another file resolves;
- a span repeated with the same (TraceID, SpanID) counts once (the TraStrainer minute files repeat some
  spans byte for byte); the first row wins, and repeats are reported in the warnings;
- requests a service served = its spans whose parent is an entry (``root``), missing from the table, or in
  another service. ``calls_per_request`` of an edge = its calls / the caller's requests;
- ``rps`` = calls / table window, the window being max(End) - min(Start) over all spans, in seconds.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from policy.observe import service_of
from policy.state import ServiceGraph

from .common import Observations, TopologyError, csv_files, iter_csv_rows, parse_float, parse_int

__all__ = ["SPAN_COLUMNS", "STATUS_COLUMNS", "service_of_pod", "read_spans", "load_spans"]

SPAN_COLUMNS = ("TraceID", "SpanID", "ParentID", "PodName", "StartTimeUnixNano", "EndTimeUnixNano")
"""Columns a span table must have (``Duration``, ``OperationName`` and a status column are optional)."""

STATUS_COLUMNS = ("StatusCode", "Status", "status_code", "otel.status_code")
_ERROR_VALUES = frozenset({"error", "status_code_error", "2"})
_EXPECTED = "a span table needs TraceID,SpanID,ParentID,PodName,StartTimeUnixNano,EndTimeUnixNano"


def service_of_pod(pod_name: str) -> str:
    """``PodName`` → service: the name without its last two dash-separated parts (names with fewer parts
    are kept whole), the fallback rule of :func:`policy.observe.service_of`."""
    return service_of({}, {}, None, pod_name)


def _is_root(parent: str) -> bool:
    p = parent.strip()
    return not p or p.lower() == "root" or set(p) == {"0"}


def read_spans(path: str | Path) -> Observations:
    """Read a span CSV file, or every ``*.csv`` of a directory as one table, into :class:`Observations`.

    Returns per-edge call counts, callee-side durations (ms), error counts (when a status column exists),
    the requests each service served, and the window in seconds.
    Raises :class:`TopologyError` ``file:line: field: problem`` for a malformed row (non-integer timestamp,
    negative duration, end before start, empty id) and ``file:line: missing column(s) ...`` for a file
    that is not a span table.
    """
    files = csv_files(path)
    obs = Observations(path=str(path))
    # (trace, span) -> (service, parent, duration_ms, error or None, operation, row); the first row wins
    spans: dict[tuple[str, str], tuple[str, str, float, bool | None, str, tuple[str, ...]]] = {}
    intern: dict[str, str] = {}
    repeats = conflicts = 0
    t_min: int | None = None
    t_max: int | None = None
    has_status = False
    for f in files:
        for line, col, row in iter_csv_rows(f, SPAN_COLUMNS, _EXPECTED):
            trace = row[col["TraceID"]].strip()
            span_id = row[col["SpanID"]].strip()
            pod = row[col["PodName"]].strip()
            for name, value in (("TraceID", trace), ("SpanID", span_id), ("PodName", pod)):
                if not value:
                    raise TopologyError(f"{f}:{line}: {name}: empty")
            start = parse_int(row[col["StartTimeUnixNano"]], f, line, "StartTimeUnixNano")
            end = parse_int(row[col["EndTimeUnixNano"]], f, line, "EndTimeUnixNano")
            if end < start:
                raise TopologyError(f"{f}:{line}: EndTimeUnixNano: {end} is before StartTimeUnixNano {start}")
            if "Duration" in col:
                dur_us = parse_float(row[col["Duration"]], f, line, "Duration")
                if dur_us < 0:
                    raise TopologyError(f"{f}:{line}: Duration: negative: {row[col['Duration']]!r}")
                dur_ms = dur_us / 1000.0
            else:
                dur_ms = (end - start) / 1e6
            err: bool | None = None
            for sc in STATUS_COLUMNS:
                if sc in col:
                    has_status = True
                    err = row[col[sc]].strip().lower() in _ERROR_VALUES
                    break
            obs.rows += 1
            t_min = start if t_min is None else min(t_min, start)
            t_max = end if t_max is None else max(t_max, end)
            key = (trace, span_id)
            prev = spans.get(key)
            if prev is not None:
                if prev[5] == tuple(row):
                    repeats += 1
                else:
                    conflicts += 1
                continue
            svc = service_of_pod(pod)
            svc = intern.setdefault(svc, svc)
            op = row[col["OperationName"]].strip() if "OperationName" in col else ""
            spans[key] = (svc, row[col["ParentID"]].strip(), dur_ms, err, op, tuple(row))

    requests: Counter[str] = Counter()
    orphans = 0
    for (trace, _), (svc, parent, dur_ms, err, op, _row) in spans.items():
        obs.services.add(svc)
        parent_span = None if _is_root(parent) else spans.get((trace, parent))
        if parent_span is None:
            if not _is_root(parent):
                orphans += 1
            requests[svc] += 1
            continue
        caller = parent_span[0]
        if caller == svc:
            continue
        requests[svc] += 1
        e = obs.edge(caller, svc)
        e.calls += 1
        e.latencies_ms.append(dur_ms)
        if op:
            e.kinds[op] += 1
        if has_status:
            e.errors = (e.errors or 0) + (1 if err else 0)
    obs.requests = dict(requests)
    obs.dropped_rows = repeats + conflicts
    if t_min is not None and t_max is not None and t_max > t_min:
        obs.window_s = (t_max - t_min) / 1e9
    if repeats:
        obs.warnings.append(f"{path}: {repeats} span row(s) repeat an earlier (TraceID, SpanID) exactly; counted once")
    if conflicts:
        obs.warnings.append(
            f"{path}: {conflicts} span row(s) reuse an earlier (TraceID, SpanID) with different "
            f"values; the first row was kept"
        )
    if orphans:
        obs.warnings.append(
            f"{path}: {orphans} span(s) have a ParentID not found in the table; treated as entry spans (no caller edge)"
        )
    if not spans:
        obs.warnings.append(f"{path}: no spans")
    return obs


def load_spans(path: str | Path) -> tuple[ServiceGraph, list[str]]:
    """The :class:`ServiceGraph` of a span table (file or directory) and the warnings; see :func:`read_spans`."""
    obs = read_spans(path)
    return obs.to_graph(f"spans:{path}"), obs.warnings
