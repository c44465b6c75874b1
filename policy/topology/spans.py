"""Call graph from OpenTelemetry-style span tables (one CSV row per span).

Columns (header names, any order; extra columns ignored). Each column has a role; the first header of the
role's list that the table has is used, and ``columns={role: header}`` (``--span-column ROLE=HEADER`` on the
command line) names another header for a role (:data:`SPAN_ROLES`):

==============  ==============================================  ==========================================
role            default headers                                 meaning
==============  ==============================================  ==========================================
``trace_id``    ``TraceID``, ``trace_id``                        trace id (required)
``span_id``     ``SpanID``, ``span_id``                          span id (required)
``parent_id``   ``ParentID``, ``parent_span_id``                 parent span id; ``root``, empty or all
                                                                zeros for a trace's entry span (required)
``pod``         ``PodName``, ``k8s.pod.name``                    the pod that recorded the span
``service``     ``ServiceName``, ``service.name``                the service that recorded it (one of
                                                                ``pod``/``service`` is required; ``service``
                                                                wins when both are present)
``start_ns``    ``StartTimeUnixNano``, ``start_time_unix_nano``  start, integer ns (required)
``end_ns``      ``EndTimeUnixNano``, ``end_time_unix_nano``      end, integer ns (required)
``duration_us`` ``Duration``                                     duration in microseconds (optional: else
                                                                end - start)
``operation``   ``OperationName``                                operation name (optional)
``status``      ``StatusCode``, ``Status``, ``status_code``,     a span is an error when its value is
                ``otel.status_code``                            ``ERROR``, ``STATUS_CODE_ERROR`` or ``2``
                                                                (OpenTelemetry ``Status.StatusCode``), any
                                                                case; without it ``error_rate`` is ``None``
==============  ==============================================  ==========================================

The defaults are the layout of the TraStrainer Online Boutique spans (FSE'24 artifact, see
``tests/fixtures/online-boutique-spans/PROVENANCE.md``), the same information as OTLP / Jaeger spans.

Rules:

- a span's service is its ``service`` value, else its ``pod`` without the last two dash-separated parts
  (ReplicaSet hash and pod suffix: ``frontend-579b9bff58-t2dbm`` → ``frontend``), as
  :func:`policy.observe.service_of` does for a pod with no labels;
- for every span whose parent span is in the table: caller = the parent span's service, callee = the
  span's service, counted when they differ (client spans sit in the caller's pod, server spans in the
  callee's); the latency of the call is the duration of that child (callee-side) span;
- a directory is ONE table: every ``*.csv`` / ``*.csv.gz`` directly inside it is read and the spans are joined
  across files, so a parent in another file resolves;
- a span repeated with the same (TraceID, SpanID) counts once (the TraStrainer minute files repeat some
  spans byte for byte); the first row wins, and repeats are reported in the warnings;
- a *visit* (a request a service served) = a span whose parent is an entry (``root``), missing from the table
  (an orphan, reported), or in another service. ``calls_per_request`` of an edge = its calls / the caller's
  visits;
- a call belongs to the caller's visit reached by walking up its parent chain inside the caller's service.
  Its interval is that of the caller-side (client) span when there is one (the parent span, if it is not the
  visit itself: same clock as its siblings), else of the callee's span. A call *overlaps* when it shares more
  than :data:`OVERLAP_FRACTION` of the shorter of the two intervals with another call of the same visit; an
  edge is ``parallel`` when at least half of its calls overlap (:data:`~policy.topology.common.PARALLEL_SHARE`);
- ``rps`` = calls / table window, the window being max(End) - min(Start) over all spans, in seconds.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from policy.observe import service_of
from policy.state import ServiceGraph

from .common import (
    Observations,
    TopologyError,
    csv_files,
    header_text,
    iter_csv_rows,
    parse_float,
    parse_int,
    read_csv_header,
)

__all__ = [
    "SPAN_COLUMNS",
    "SPAN_ROLES",
    "STATUS_COLUMNS",
    "OVERLAP_FRACTION",
    "Span",
    "SpanTable",
    "service_of_pod",
    "resolve_span_columns",
    "read_span_table",
    "table_warnings",
    "observations_from_table",
    "read_spans",
    "load_spans",
]

SPAN_COLUMNS = ("TraceID", "SpanID", "ParentID", "PodName", "StartTimeUnixNano", "EndTimeUnixNano")
"""The default headers of the required columns (``Duration``, ``OperationName`` and a status column are
optional; ``ServiceName`` may replace ``PodName``)."""

STATUS_COLUMNS = ("StatusCode", "Status", "status_code", "otel.status_code")

SPAN_ROLES: dict[str, tuple[str, ...]] = {
    "trace_id": ("TraceID", "trace_id"),
    "span_id": ("SpanID", "span_id"),
    "parent_id": ("ParentID", "parent_span_id"),
    "pod": ("PodName", "k8s.pod.name"),
    "service": ("ServiceName", "service.name"),
    "start_ns": ("StartTimeUnixNano", "start_time_unix_nano"),
    "end_ns": ("EndTimeUnixNano", "end_time_unix_nano"),
    "duration_us": ("Duration",),
    "operation": ("OperationName",),
    "status": STATUS_COLUMNS,
}
"""Role → the headers tried in order (see the module docstring)."""

_REQUIRED_ROLES = ("trace_id", "span_id", "parent_id", "start_ns", "end_ns")

OVERLAP_FRACTION = 0.1
"""Two calls of one visit overlap when their common time exceeds this share of the shorter one (a margin for
clock skew between pods when only callee-side spans are available)."""

_ERROR_VALUES = frozenset({"error", "status_code_error", "2"})
#: Span times accepted, ns since 1970: OTLP's fixed64 ``time_unix_nano`` within a signed 64-bit range.
MAX_TIME_NS = 2**63
#: The longest span accepted, ns (a day): a request's span, not a job's.
MAX_SPAN_NS = 86_400 * 10**9

_EXPECTED = "a span table needs TraceID,SpanID,ParentID,PodName (or ServiceName),StartTimeUnixNano,EndTimeUnixNano"


def service_of_pod(pod_name: str) -> str:
    """``PodName`` → service: the name without its last two dash-separated parts (names with fewer parts
    are kept whole), the fallback rule of :func:`policy.observe.service_of`."""
    return service_of({}, {}, None, pod_name)


def _is_root(parent: str) -> bool:
    p = parent.strip()
    return not p or p.lower() == "root" or set(p) == {"0"}


def resolve_span_columns(header: list[str], columns: Mapping[str, str] | None = None) -> dict[str, str]:
    """Role → header for a span table with this ``header`` (roles without a column are left out).

    ``columns`` overrides the defaults of :data:`SPAN_ROLES` per role. Raises :class:`TopologyError` for an
    unknown role, or (without the file name; the caller adds it) naming the roles whose column is missing."""
    columns = dict(columns or {})
    unknown = sorted(set(columns) - set(SPAN_ROLES))
    if unknown:
        raise TopologyError(
            f"span columns: unknown role(s) {', '.join(unknown)}; expected one of {', '.join(SPAN_ROLES)}"
        )
    have = set(header)
    out: dict[str, str] = {}
    missing: list[str] = []
    for role, names in SPAN_ROLES.items():
        if role in columns:
            if columns[role] in have:
                out[role] = columns[role]
            else:
                missing.append(columns[role])
            continue
        found = next((n for n in names if n in have), None)
        if found is not None:
            out[role] = found
        elif role in _REQUIRED_ROLES:
            missing.append(names[0])
    if "pod" not in out and "service" not in out:
        missing.insert(3, columns.get("pod", SPAN_ROLES["pod"][0]))
    if missing:
        raise TopologyError(f"missing column(s) {', '.join(missing)}; header is {header_text(header)} ({_EXPECTED})")
    return out


@dataclass(frozen=True, slots=True)
class Span:
    """One span: ``service`` that recorded it, ``parent`` span id (as written), ``start_ns`` / ``end_ns``
    (ns), ``duration_ms``, ``error`` (``None`` without a status column), ``operation`` (``""`` when unknown)."""

    service: str
    parent: str
    start_ns: int
    end_ns: int
    duration_ms: float
    error: bool | None
    operation: str


@dataclass
class SpanTable:
    """A span table read once (every file of a directory joined), each (trace id, span id) kept once.

    ``spans``: (trace id, span id) → :class:`Span`; ``columns``: role → header used; ``window_s``: max(end) -
    min(start) in s (``None`` when not positive); ``rows``: data rows read; ``repeats`` / ``conflicts``: rows
    dropped because their (trace id, span id) came earlier with the same / other values. After
    :meth:`classify`: ``caller`` (span key → the caller service of a visit, ``None`` for an entry or orphan
    visit; only visits are keys), ``roots`` (entry spans per service), ``orphans`` (visits whose parent is
    missing), ``visit_of`` (span key → the key of the visit that contains it, for spans inside a visit).
    """

    path: str
    spans: dict[tuple[str, str], Span] = field(default_factory=dict)
    columns: dict[str, str] = field(default_factory=dict)
    has_status: bool = False
    window_s: float | None = None
    rows: int = 0
    repeats: int = 0
    conflicts: int = 0
    caller: dict[tuple[str, str], str | None] = field(default_factory=dict)
    roots: Counter = field(default_factory=Counter)
    orphans: int = 0

    def classify(self) -> None:
        """Find the visits (see the module docstring) and their callers; idempotent."""
        if self.caller or not self.spans:
            return
        for key, s in self.spans.items():
            if _is_root(s.parent):
                self.caller[key] = None
                self.roots[s.service] += 1
                continue
            p = self.spans.get((key[0], s.parent))
            if p is None:
                self.caller[key] = None
                self.orphans += 1
            elif p.service != s.service:
                self.caller[key] = p.service

    def visit_of(self, key: tuple[str, str]) -> tuple[str, str] | None:
        """The visit containing span ``key``: itself if it is a visit, else the nearest visit up its parent
        chain within its service (``None`` past 10,000 steps, a cycle)."""
        self.classify()
        for _ in range(10_000):
            if key in self.caller:
                return key
            s = self.spans.get(key)
            if s is None:
                return None
            key = (key[0], s.parent)
        return None

    def calls(self) -> list[tuple[tuple[str, str], tuple[str, str], str, str, int, int]]:
        """Every call: ``(callee visit key, caller visit key or None, caller, callee, start_ns, end_ns)``, the
        interval as in the module docstring (the caller-side span when there is one)."""
        self.classify()
        out = []
        for key, caller in self.caller.items():
            if caller is None:
                continue
            s = self.spans[key]
            parent_key = (key[0], s.parent)
            visit = self.visit_of(parent_key)
            if visit is not None and visit != parent_key:
                client = self.spans[parent_key]
                start, end = client.start_ns, client.end_ns
            else:
                start, end = s.start_ns, s.end_ns
            out.append((key, visit, caller, s.service, start, end))
        return out

    def overlapping_calls(self) -> set[tuple[str, str]]:
        """Keys (callee visits) of the calls that overlap another call of the same caller visit."""
        by_visit: dict[tuple[str, str], list[tuple[int, int, tuple[str, str]]]] = defaultdict(list)
        for key, visit, _caller, _callee, start, end in self.calls():
            if visit is not None:
                by_visit[visit].append((start, end, key))
        out: set[tuple[str, str]] = set()
        for group in by_visit.values():
            if len(group) < 2:
                continue
            group.sort()
            for i, (s1, e1, k1) in enumerate(group):
                for s2, e2, k2 in group[i + 1 :]:
                    if s2 >= e1:
                        break
                    common = min(e1, e2) - s2
                    if common > OVERLAP_FRACTION * min(e1 - s1, e2 - s2):
                        out.add(k1)
                        out.add(k2)
        return out


def _span_times(
    row: list[str], col: Mapping[str, int], cols: Mapping[str, str], f: str | Path, line: int
) -> tuple[int, int, float]:
    """``(start_ns, end_ns, duration_ms)`` of one span row, checked: times in 0..2^63 ns (:data:`MAX_TIME_NS`), end
    not before start, at most a day long (:data:`MAX_SPAN_NS`), a duration column (when mapped) in 0..a day of
    microseconds. Raises :class:`TopologyError` ``file:line: field: problem``."""
    start = parse_int(row[col[cols["start_ns"]]], f, line, cols["start_ns"])
    end = parse_int(row[col[cols["end_ns"]]], f, line, cols["end_ns"])
    for name, t in ((cols["start_ns"], start), (cols["end_ns"], end)):
        if not 0 <= t < MAX_TIME_NS:
            raise TopologyError(f"{f}:{line}: {name}: must be ns since 1970 in 0..2^63, got {t}")
    if end < start:
        raise TopologyError(f"{f}:{line}: {cols['end_ns']}: {end} is before {cols['start_ns']} {start}")
    if end - start > MAX_SPAN_NS:
        raise TopologyError(
            f"{f}:{line}: {cols['end_ns']}: the span lasts {(end - start) / 1e9:.6g} s, more than a day "
            f"({cols['start_ns']} {start})"
        )
    if "duration_us" in cols:
        dur_us = parse_float(row[col[cols["duration_us"]]], f, line, cols["duration_us"])
        if not 0 <= dur_us <= MAX_SPAN_NS / 1000:
            cell = row[col[cols["duration_us"]]]
            raise TopologyError(
                f"{f}:{line}: {cols['duration_us']}: must be microseconds in 0..{MAX_SPAN_NS / 1000:g} "
                f"(a day), got {cell!r}"
            )
        dur_ms = dur_us / 1000.0
    else:
        dur_ms = (end - start) / 1e6
    return start, end, dur_ms


def read_span_table(path: str | Path, columns: Mapping[str, str] | None = None) -> SpanTable:
    """Read a span CSV file, or every ``*.csv`` / ``*.csv.gz`` of a directory as one table.

    ``columns``: role → header overrides (:data:`SPAN_ROLES`). Raises :class:`TopologyError`
    ``file:line: field: problem`` for a malformed row (non-integer timestamp, a time outside 0..2^63 ns, a span
    longer than a day (:data:`MAX_SPAN_NS`), end before start, empty id), ``file:1: missing column(s) ...`` for a
    file that is not a span table, and a one-line error for an unknown role.
    """
    files = csv_files(path)
    table = SpanTable(path=str(path))
    rows_seen: dict[tuple[str, str], tuple[str, ...]] = {}
    intern: dict[str, str] = {}
    t_min: int | None = None
    t_max: int | None = None
    for f in files:
        try:
            cols = resolve_span_columns(read_csv_header(f), columns)
        except TopologyError as exc:
            if str(exc).startswith("span columns:"):
                raise
            raise TopologyError(f"{f}:1: {exc}") from None
        if not table.columns:
            table.columns = cols
        required = [cols[r] for r in (*_REQUIRED_ROLES, "pod", "service") if r in cols]
        for line, col, row in iter_csv_rows(f, required, _EXPECTED):
            trace = row[col[cols["trace_id"]]].strip()
            span_id = row[col[cols["span_id"]]].strip()
            who_role = "service" if "service" in cols else "pod"
            who = row[col[cols[who_role]]].strip()
            for name, value in ((cols["trace_id"], trace), (cols["span_id"], span_id), (cols[who_role], who)):
                if not value:
                    raise TopologyError(f"{f}:{line}: {name}: empty")
            start, end, dur_ms = _span_times(row, col, cols, f, line)
            err: bool | None = None
            if "status" in cols:
                table.has_status = True
                err = row[col[cols["status"]]].strip().lower() in _ERROR_VALUES
            table.rows += 1
            t_min = start if t_min is None else min(t_min, start)
            t_max = end if t_max is None else max(t_max, end)
            key = (trace, span_id)
            prev = rows_seen.get(key)
            if prev is not None:
                if prev == tuple(row):
                    table.repeats += 1
                else:
                    table.conflicts += 1
                continue
            rows_seen[key] = tuple(row)
            svc = who if who_role == "service" else service_of_pod(who)
            svc = intern.setdefault(svc, svc)
            op = row[col[cols["operation"]]].strip() if "operation" in cols else ""
            table.spans[key] = Span(svc, row[col[cols["parent_id"]]].strip(), start, end, dur_ms, err, op)
    if t_min is not None and t_max is not None and t_max > t_min:
        table.window_s = (t_max - t_min) / 1e9
    table.classify()
    return table


def table_warnings(table: SpanTable) -> list[str]:
    """One-line notes about a span table: repeated and conflicting rows, orphan spans, no spans, no edges."""
    path = table.path
    out = []
    if table.repeats:
        out.append(f"{path}: {table.repeats} span row(s) repeat an earlier (TraceID, SpanID) exactly; counted once")
    if table.conflicts:
        out.append(
            f"{path}: {table.conflicts} span row(s) reuse an earlier (TraceID, SpanID) with different "
            f"values; the first row was kept"
        )
    if table.orphans:
        out.append(
            f"{path}: {table.orphans} span(s) have a ParentID not found in the table; treated as entry spans "
            f"(no caller edge)"
        )
    if not table.spans:
        out.append(f"{path}: no spans")
    elif not any(c is not None for c in table.caller.values()):
        services = sorted({s.service for s in table.spans.values()})
        out.append(
            f"{path}: no call edges: no span has a parent span recorded by another service ({len(table.spans)} "
            f"spans of {len(services)} service(s): {', '.join(services[:5])}{', ...' if len(services) > 5 else ''}); "
            f"check that each server span's ParentID is the caller's client span and that the pod/service "
            f"column tells the services apart"
        )
    return out


def read_spans(path: str | Path, columns: Mapping[str, str] | None = None) -> Observations:
    """Read a span table (see :func:`read_span_table`) into :class:`Observations`: per-edge call counts,
    callee-side durations (ms), error counts (when a status column exists), overlapping calls (for
    ``parallel``), the visits each service served (``requests``), and the window in seconds.
    Raises :class:`TopologyError` as :func:`read_span_table` does."""
    return observations_from_table(read_span_table(path, columns))


def observations_from_table(table: SpanTable) -> Observations:
    """The :class:`Observations` of a span table already read (see :func:`read_spans`)."""
    table.classify()
    obs = Observations(path=table.path)
    obs.rows = table.rows
    obs.dropped_rows = table.repeats + table.conflicts
    obs.window_s = table.window_s
    overlapping = table.overlapping_calls()
    requests: Counter[str] = Counter()
    for key, s in table.spans.items():
        obs.services.add(s.service)
        if key not in table.caller:
            continue
        requests[s.service] += 1
        caller = table.caller[key]
        if caller is None:
            continue
        e = obs.edge(caller, s.service)
        e.calls += 1
        e.latencies_ms.append(s.duration_ms)
        e.overlapping = (e.overlapping or 0) + (key in overlapping)
        if s.operation:
            e.kinds[s.operation] += 1
        if table.has_status:
            e.errors = (e.errors or 0) + (1 if s.error else 0)
    obs.requests = dict(requests)
    obs.warnings.extend(table_warnings(table))
    return obs


def load_spans(path: str | Path, columns: Mapping[str, str] | None = None) -> tuple[ServiceGraph, list[str]]:
    """The :class:`ServiceGraph` of a span table (file or directory) and the warnings; see :func:`read_spans`."""
    obs = read_spans(path, columns)
    return obs.to_graph(f"spans:{path}"), obs.warnings
