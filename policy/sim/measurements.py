"""Measurements of a running application, the input of a calibration: per-minute metrics tables and span tables.

**Metrics** (``--metrics DIR``): every ``*.csv`` / ``*.csv.gz`` directly inside DIR (or one file), a header line
then one row per sample (typically one per minute) of one pod or one service. Each column has a *role*; a role
is read from the first of its default headers that a file has (:data:`METRIC_ROLES`, exact names), or from the
header ``columns`` names for it (``--metrics-column ROLE=HEADER[*FACTOR]``; FACTOR converts the column to the
role's unit, e.g. ``cpu_m=cpu_seconds_rate*1000``). Extra columns are ignored.

==================== =========================================== =========================================
role (unit)          default headers (factor)                    meaning
==================== =========================================== =========================================
``time`` (s)         ``time_s``, ``timestamp``, ``Time``,        sample time: a number (unix s; ms, µs, ns
                     ``TimeStamp``, ``time``                     are recognised by magnitude) or a date-time
                                                                 ``YYYY-MM-DD[ T]HH:MM:SS[.frac][zone]``
                                                                 (UTC without a zone); optional: without it
                                                                 rows are aligned by order
``pod``              ``pod``, ``PodName``, ``pod_name``          the pod measured (its service: the workload
                                                                 whose name prefixes it)
``service``          ``service``, ``ServiceName``,               the service measured (any case), when there
                     ``service_name``                            is no pod column; with neither, the file
                                                                 name without ``.csv[.gz]`` / ``_metric``
``cpu_m`` (m)        ``cpu_m``, ``CpuUsage(m)``,                 CPU used by the pod, millicores
                     ``cpu_cores`` (×1000)
``memory_mi`` (MiB)  ``memory_mi``, ``MemoryUsage(Mi)``,         working set of the pod
                     ``memory_bytes`` (×2^-20)
``rps`` (1/s)        ``rps``, ``PodWorkload(Ops)``               requests the pod served per second
``success_pct`` (%)  ``success_pct``, ``SuccessRate(%)``,        requests that succeeded (any scale: only
                     ``PodSuccessRate(%)``                       compared with its own maximum)
``latency_p50_ms``,  ``latency_p50_ms``, ``LatencyP50(s)``       the service's response-time percentiles
``latency_p95_ms``,  (×1000), same for p95, p99                  in that minute, as its callers see it
``latency_p99_ms``
``pod_latency_p95_ms`` ``pod_latency_p95_ms``,                   a pod's server-side p95 (reported next to
                     ``PodServerLatencyP95(s)`` (×1000)          the spans' p95, never fitted)
==================== =========================================== =========================================

The defaults read the TraStrainer Online Boutique layout (one file per pod plus ``front_service.csv``, see
``policy/data/calibration/online-boutique/PROVENANCE.md``) and the *simple layout* (one long table, one row per
minute and pod: ``time_s,pod,cpu_m,memory_mi,rps``, plus rows or files of ``time_s,service,latency_p50_ms,
latency_p95_ms[,latency_p99_ms][,success_pct]`` for the services whose latency is measured). A required
column: none in general; what a calibration needs is ``cpu_m`` + ``rps`` (CPU per request), ``memory_mi`` (working
set), and ``rps`` of the entry service (the load). Empty cells and ``NaN`` are missing values.

Values: every numeric cell is a number in 0..:data:`MAX_MEASURED` of its role (after the column's factor), every time
within :data:`MAX_TIME_S`; anything else is an error naming the file, line and column. Empty cells and ``NaN`` are
missing values; a column with no value at all in a series is not used (a warning).

Checks (warnings, one line each, grouped): a role column whose values are all equal (*constant*: a column that
is 0 throughout is dropped as "not collected", as is a constant success rate, which can filter nothing; another
constant is used as is); a time column that goes backwards; a pod or service that matches no workload (its rows
are ignored); a file with no known column.

**Alignment.** Samples are put on one grid of steps of ``step_s`` (the median spacing of the time column, at
least 1 s): step index = round((t - phase) / step_s), the phase being the median of ``t mod step_s`` over all
rows, so samples taken a few seconds apart in different files share a step. Without a time column the row
order is the step index.

**Spans** (``--spans DIR``) are read by :func:`policy.topology.spans.read_span_table` (its docstring gives the
columns); :func:`span_stats` turns them into visits, visit durations, calls and overlapping calls per edge.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from policy.topology.common import PARALLEL_SHARE, TopologyError, csv_files, is_missing, iter_csv_rows, read_csv_header
from policy.topology.spans import SpanTable

__all__ = [
    "METRIC_ROLES",
    "MEASURED_ROLES",
    "MAX_MEASURED",
    "MAX_TIME_S",
    "ColumnSpec",
    "parse_column_specs",
    "parse_time",
    "Series",
    "Metrics",
    "read_metrics",
    "SpanStats",
    "span_stats",
]

METRIC_ROLES: dict[str, tuple[tuple[str, float], ...]] = {
    "time": (("time_s", 1.0), ("timestamp", 1.0), ("Time", 1.0), ("TimeStamp", 1.0), ("time", 1.0)),
    "pod": (("pod", 1.0), ("PodName", 1.0), ("pod_name", 1.0)),
    "service": (("service", 1.0), ("ServiceName", 1.0), ("service_name", 1.0)),
    "cpu_m": (("cpu_m", 1.0), ("CpuUsage(m)", 1.0), ("cpu_cores", 1000.0)),
    "memory_mi": (("memory_mi", 1.0), ("MemoryUsage(Mi)", 1.0), ("memory_bytes", 2.0**-20)),
    "rps": (("rps", 1.0), ("PodWorkload(Ops)", 1.0)),
    "success_pct": (("success_pct", 1.0), ("SuccessRate(%)", 1.0), ("PodSuccessRate(%)", 1.0)),
    "latency_p50_ms": (("latency_p50_ms", 1.0), ("LatencyP50(s)", 1000.0)),
    "latency_p95_ms": (("latency_p95_ms", 1.0), ("LatencyP95(s)", 1000.0)),
    "latency_p99_ms": (("latency_p99_ms", 1.0), ("LatencyP99(s)", 1000.0)),
    "pod_latency_p95_ms": (("pod_latency_p95_ms", 1.0), ("PodServerLatencyP95(s)", 1000.0)),
}
"""Role → its default headers with the factor to the role's unit, tried in order (exact names)."""

MEASURED_ROLES = (
    "cpu_m",
    "memory_mi",
    "rps",
    "success_pct",
    "latency_p50_ms",
    "latency_p95_ms",
    "latency_p99_ms",
    "pod_latency_p95_ms",
)
"""The numeric roles (every role but time, pod and service)."""

#: The largest value accepted for each numeric role, in the role's unit: a cell above (or below 0) is refused,
#: naming its file, line and column, as a unit mistake or garbage (100,000 cores for one pod, a day of latency).
MAX_MEASURED: dict[str, float] = {
    "cpu_m": 1e8,
    "memory_mi": 1e9,
    "rps": 1e9,
    "success_pct": 1e9,
    "latency_p50_ms": 8.64e7,
    "latency_p95_ms": 8.64e7,
    "latency_p99_ms": 8.64e7,
    "pod_latency_p95_ms": 8.64e7,
}
#: Sample times accepted, unix seconds (after the ms / µs / ns scaling of :func:`parse_time`): up to the year 2286.
MAX_TIME_S = 1e10

_NAME_ROLES = ("pod", "service")
_DROP_WHEN_CONSTANT = ("success_pct",)


@dataclass(frozen=True)
class ColumnSpec:
    """A role read from ``header``, multiplied by ``factor`` to get the role's unit."""

    header: str
    factor: float = 1.0


def parse_column_specs(items: Sequence[str], roles: Sequence[str], option: str) -> dict[str, ColumnSpec]:
    """``["cpu_m=cpu*1000", "rps=requests"]`` → ``{role: ColumnSpec}``. Raises ``ValueError`` naming ``option``
    and the item for a malformed item, an unknown role, or a factor that is not a finite positive number."""
    out: dict[str, ColumnSpec] = {}
    for item in items:
        role, sep, rest = item.partition("=")
        role, rest = role.strip(), rest.strip()
        if not sep or not role or not rest:
            raise ValueError(f"{option}: expected ROLE=HEADER[*FACTOR], got {item!r}")
        if role not in roles:
            raise ValueError(f"{option}: unknown role {role!r} in {item!r}; expected one of {', '.join(roles)}")
        header, factor = rest, 1.0
        m = re.fullmatch(r"(.+?)\s*\*\s*([0-9.eE+-]+)", rest)
        if m:
            header = m.group(1)
            try:
                factor = float(m.group(2))
            except ValueError:
                raise ValueError(f"{option}: factor of {item!r} is not a number") from None
            if not (math.isfinite(factor) and factor > 0):
                raise ValueError(f"{option}: factor of {item!r} must be a positive number")
        out[role] = ColumnSpec(header, factor)
    return out


_DATETIME = re.compile(
    r"^\s*(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(\.\d+)?\s*(Z|UTC|[+-]\d{2}:?\d{2})?",
)


def parse_time(value: str) -> float:
    """A time cell → unix seconds (float). Numbers are unix time in s, or ms / µs / ns when larger than 1e11 /
    1e14 / 1e17; strings are ``YYYY-MM-DD[ T]HH:MM:SS[.fraction][Z|UTC|±HH[:]MM]`` (anything after is ignored,
    e.g. Go's ``+0000 UTC m=+0.30``), UTC when no zone is given. Raises ``ValueError`` otherwise."""
    v = value.strip()
    try:
        x = float(v)
    except ValueError:
        m = _DATETIME.match(v)
        if not m:
            raise ValueError(f"not a time: {value!r}") from None
        date, hms, frac, zone = m.groups()
        dt = datetime.fromisoformat(f"{date}T{hms}").replace(tzinfo=UTC)
        t = dt.timestamp() + (float(frac) if frac else 0.0)
        if zone and zone not in ("Z", "UTC"):
            sign = -1 if zone[0] == "-" else 1
            digits = zone[1:].replace(":", "")
            t -= sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
        return t
    if not math.isfinite(x):
        raise ValueError(f"not a time: {value!r}")
    for limit, scale in ((1e17, 1e-9), (1e14, 1e-6), (1e11, 1e-3)):
        if abs(x) > limit:
            return x * scale
    return x


@dataclass
class Series:
    """One pod's (or one service's) samples from one file.

    ``service``: the workload's service; ``name``: the pod (or service) as written; ``file``; ``step``: (T,)
    int64 grid step of each sample; ``raw``: role → (T,) float64 column as written (NaN = missing);
    ``columns``: role → the :class:`ColumnSpec` read. :meth:`get` gives a role in its unit.
    """

    service: str
    name: str
    file: str
    step: np.ndarray
    raw: dict[str, np.ndarray]
    columns: dict[str, ColumnSpec]
    is_pod: bool = True

    def has(self, role: str) -> bool:
        return role in self.raw

    def get(self, role: str) -> np.ndarray:
        """(T,) float64: the role's values in its unit. Raises KeyError when the series lacks it."""
        return self.raw[role] * self.columns[role].factor


@dataclass
class Metrics:
    """Every series read (:class:`Series`), the grid step in seconds (``None`` without a time column), the
    warnings, and per role the header used (``columns``, for the report)."""

    series: list[Series] = field(default_factory=list)
    step_s: float | None = None
    warnings: list[str] = field(default_factory=list)
    columns: dict[str, set[str]] = field(default_factory=dict)

    def pods(self, service: str) -> list[Series]:
        """The resource series (with ``cpu_m``, ``memory_mi`` or ``rps``) of ``service``."""
        return [s for s in self.series if s.service == service and any(s.has(r) for r in ("cpu_m", "memory_mi", "rps"))]

    def latency(self, service: str) -> Series | None:
        """The first series of ``service`` with ``latency_p50_ms`` and ``latency_p95_ms``, or ``None``."""
        return next(
            (s for s in self.series if s.service == service and s.has("latency_p50_ms") and s.has("latency_p95_ms")),
            None,
        )

    def services(self) -> list[str]:
        return sorted({s.service for s in self.series})


def _match_service(name: str, is_pod: bool, services: Sequence[str]) -> str | None:
    """The workload service a pod or service name belongs to: exact, then any case; for a pod, the longest
    service ``s`` with ``name == s`` or ``name = s-<1 or 2 parts>`` (StatefulSet ordinal; ReplicaSet hash and
    suffix)."""
    if name in services:
        return name
    lower = {s.lower(): s for s in services}
    if not is_pod:
        return lower.get(name.lower())
    best = None
    for s in services:
        if name.lower().startswith(s.lower() + "-"):
            rest = name[len(s) + 1 :]
            if 1 <= len(rest.split("-")) <= 2 and (best is None or len(s) > len(best)):
                best = s
    if best is not None:
        return best
    return lower.get(name.lower())


def _resolve(header: list[str], columns: Mapping[str, ColumnSpec]) -> dict[str, ColumnSpec]:
    have = set(header)
    out: dict[str, ColumnSpec] = {}
    for role, defaults in METRIC_ROLES.items():
        if role in columns:
            if columns[role].header in have:
                out[role] = columns[role]
            continue
        for h, f in defaults:
            if h in have:
                out[role] = ColumnSpec(h, f)
                break
    return out


def _entity_of_file(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".csv"):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
    return re.sub(r"_metrics?$", "", name)


def read_metrics(path: str | Path, services: Sequence[str], columns: Mapping[str, ColumnSpec] | None = None) -> Metrics:
    """Read the metrics tables at ``path`` (a file or a directory; see the module docstring) for an app whose
    workloads' services are ``services``.

    Returns :class:`Metrics`. Raises :class:`~policy.topology.common.TopologyError` (a ``ValueError``) with
    ``file:line: column: problem`` for a cell that is not a number or time, when ``path`` has no CSV file, or
    when a column named in ``columns`` is in no file.
    """
    columns = dict(columns or {})
    files = csv_files(path)
    out = Metrics()
    unmatched: dict[str, list[str]] = defaultdict(list)
    constant: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    empty: dict[tuple[str, str], list[str]] = defaultdict(list)
    used_override: set[str] = set()
    times: list[np.ndarray | None] = []  # per series, its sample times (s)
    for f in files:
        cols = _resolve(read_csv_header(f), columns)
        used_override.update(r for r in columns if r in cols)
        measured = [r for r in MEASURED_ROLES if r in cols]
        if not measured:
            out.warnings.append(
                f"{f}: no metrics column found (expected some of "
                + ", ".join(METRIC_ROLES[r][0][0] for r in MEASURED_ROLES)
                + " or their TraStrainer names; --metrics-column ROLE=HEADER names others); file ignored"
            )
            continue
        for r, c in cols.items():
            out.columns.setdefault(r, set()).add(c.header)
        who_role = "pod" if "pod" in cols else ("service" if "service" in cols else None)
        rows: dict[str, list[tuple[float, list[float]]]] = defaultdict(list)
        fallback = _entity_of_file(f)
        required = [c.header for c in cols.values()]
        for line, index, row in iter_csv_rows(f, required):
            who = row[index[cols[who_role].header]].strip() if who_role else fallback
            if not who:
                raise TopologyError(f"{f}:{line}: {cols[who_role].header}: empty")  # type: ignore[index]
            t = math.nan
            if "time" in cols:
                cell = row[index[cols["time"].header]]
                if not is_missing(cell):
                    try:
                        t = parse_time(cell)
                        if not -MAX_TIME_S <= t <= MAX_TIME_S:
                            raise ValueError(cell)
                    except ValueError:
                        raise TopologyError(
                            f"{f}:{line}: {cols['time'].header}: not a time (unix seconds, ms, µs or ns up to the "
                            f"year 2286, or YYYY-MM-DD HH:MM:SS): {cell.strip()!r}"
                        ) from None
            vals = []
            for r in measured:
                cell = row[index[cols[r].header]]
                if is_missing(cell):
                    vals.append(math.nan)
                    continue
                try:
                    x = float(cell.strip())
                except ValueError:
                    raise TopologyError(f"{f}:{line}: {cols[r].header}: not a number: {cell.strip()!r}") from None
                if not (math.isfinite(x) and 0.0 <= x * cols[r].factor <= MAX_MEASURED[r]):
                    top = MAX_MEASURED[r] / cols[r].factor
                    unit = f" ({r})" if r != cols[r].header else ""
                    raise TopologyError(
                        f"{f}:{line}: {cols[r].header}: must be a number in 0..{top:g}{unit}, got {cell.strip()!r}"
                    )
                vals.append(x)
            rows[who].append((t, vals))
        for who, samples in rows.items():
            svc = _match_service(who, who_role == "pod", services)
            if svc is None:
                unmatched[who_role or "file"].append(f"{who} ({f.name})")
                continue
            t = np.array([s[0] for s in samples], dtype=np.float64)
            data = np.array([s[1] for s in samples], dtype=np.float64).reshape(len(samples), len(measured))
            raw = {r: data[:, i].copy() for i, r in enumerate(measured)}
            for r in list(raw):
                v = raw[r][np.isfinite(raw[r])]
                if len(v) == 0:  # present, but every value missing: not measured
                    empty[(cols[r].header, r)].append(f.name)
                    del raw[r]
                    continue
                if len(v) >= 3 and np.all(v == v[0]):
                    constant[(cols[r].header, r, f"{v[0]:g}")].append(f.name)
                    if v[0] == 0 or r in _DROP_WHEN_CONSTANT:
                        del raw[r]
            if not raw:
                continue
            back = int(np.sum(np.diff(t[np.isfinite(t)]) < 0))
            if back:
                out.warnings.append(
                    f"{f}: {who}: the time column {cols['time'].header} goes backwards {back} time(s); "
                    f"samples are aligned by their time anyway"
                )
            times.append(t if np.isfinite(t).any() else None)
            out.series.append(
                Series(svc, who, str(f), np.zeros(0, np.int64), raw, {r: cols[r] for r in raw}, who_role == "pod")
            )
    missing = [f"{r}={c.header}" for r, c in columns.items() if r not in used_override]
    if missing:
        raise TopologyError(f"{path}: --metrics-column {', '.join(missing)}: no metrics file has that column")
    for (header, role, value), names in sorted(constant.items()):
        shown = ", ".join(names[:3]) + (f", ... ({len(names)} files)" if len(names) > 3 else "")
        dropped = value == "0" or role in _DROP_WHEN_CONSTANT
        what = "not used (not collected, or it can filter nothing)" if dropped else "used as is"
        out.warnings.append(f"metrics column {header} ({role}) is constant ({value}) in {shown}: {what}")
    for (header, role), names in sorted(empty.items()):
        shown = ", ".join(sorted(set(names))[:3]) + (f", ... ({len(set(names))} files)" if len(set(names)) > 3 else "")
        out.warnings.append(f"metrics column {header} ({role}) has no value (every cell missing) in {shown}: not used")
    for kind, names in unmatched.items():
        shown = ", ".join(names[:5]) + (f", ... ({len(names)} in all)" if len(names) > 5 else "")
        out.warnings.append(f"metrics: {kind}(s) matching no workload of the manifests, rows ignored: {shown}")
    _align(out, times)
    return out


def _align(out: Metrics, times: list[np.ndarray | None]) -> None:
    """Set each series' ``step`` (see the module docstring)."""
    timed = [t[np.isfinite(t)] for t in times if t is not None]
    if not timed:
        for s in out.series:
            s.step = np.arange(len(next(iter(s.raw.values()))), dtype=np.int64)
        if len({len(s.step) for s in out.series}) > 1:
            out.warnings.append(
                "metrics: no time column and the series have different lengths: aligned by row order from the first"
            )
        return
    diffs = np.concatenate([np.diff(np.sort(t)) for t in timed if len(t) > 1] or [np.array([60.0])])
    diffs = diffs[diffs > 0]
    step = max(1.0, float(np.round(np.median(diffs)))) if len(diffs) else 60.0
    allt = np.concatenate(timed)
    phase = float(np.median(np.mod(allt, step)))
    t0 = float(np.min(allt))
    base = int(round((t0 - phase) / step))
    out.step_s = step
    for s, t in zip(out.series, times):
        n = len(next(iter(s.raw.values())))
        if t is None or not np.isfinite(t).any():
            s.step = np.arange(n, dtype=np.int64) + base
            out.warnings.append(f"{s.file}: {s.name}: no time values: aligned by row order")
            continue
        k = np.round((t - phase) / step)
        k[~np.isfinite(k)] = -(2**62)
        s.step = k.astype(np.int64)


# ---- spans --------------------------------------------------------------------------------------------------


@dataclass
class SpanStats:
    """What a calibration reads from spans: visit durations (ms) per service, visits per service, calls and
    overlapping calls per (caller, callee), entry (root) spans per service, the window (s) and the number of
    user requests (entry spans)."""

    durations_ms: dict[str, np.ndarray]
    visits: dict[str, int]
    calls: dict[tuple[str, str], int]
    window_s: float
    user_requests: int
    roots: dict[str, int] = field(default_factory=dict)
    overlapping: dict[tuple[str, str], int] = field(default_factory=dict)

    def calls_per_request(self) -> dict[tuple[str, str], float]:
        """Calls from caller to callee per visit of the caller."""
        return {(a, b): n / self.visits[a] for (a, b), n in self.calls.items() if self.visits.get(a)}

    def parallel(self) -> set[tuple[str, str]]:
        """Edges at least half of whose calls overlapped another call of the same visit
        (:data:`policy.topology.common.PARALLEL_SHARE`)."""
        return {k for k, n in self.calls.items() if n and self.overlapping.get(k, 0) >= PARALLEL_SHARE * n}


def span_stats(table: SpanTable) -> SpanStats:
    """Visits (server spans: entry spans, orphans, spans whose parent is in another service), their durations,
    calls per edge and overlapping calls, from a span table read by
    :func:`policy.topology.spans.read_span_table` (rules in its module docstring)."""
    table.classify()
    dur: dict[str, list[float]] = defaultdict(list)
    visits: dict[str, int] = defaultdict(int)
    calls: dict[tuple[str, str], int] = defaultdict(int)
    overlapping: dict[tuple[str, str], int] = defaultdict(int)
    over = table.overlapping_calls()
    for key, caller in table.caller.items():
        s = table.spans[key]
        dur[s.service].append(s.duration_ms)
        visits[s.service] += 1
        if caller is not None:
            calls[(caller, s.service)] += 1
            overlapping[(caller, s.service)] += key in over
    return SpanStats(
        {s: np.array(v) for s, v in dur.items()},
        dict(visits),
        dict(calls),
        float(table.window_s or 0.0),
        sum(table.roots.values()),
        dict(table.roots),
        dict(overlapping),
    )
