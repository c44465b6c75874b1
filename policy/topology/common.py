"""Shared plumbing of the call-graph sources: the error type, per-edge accumulators, CSV reading with line
numbers, and the conversion of observed calls into :class:`policy.state.ServiceEdge` values.

A CSV table may be gzip-compressed (``*.csv.gz``): it is read as the text it decompresses to. Every file is read
through :mod:`policy.documents` (:func:`policy.documents.open_text`): corrupt or truncated gzip data, text that is
not UTF-8 or larger than :data:`policy.documents.MAX_TEXT_BYTES` is a :class:`TopologyError` naming the file.

Latency percentiles use linear interpolation between closest ranks (``numpy.percentile``'s default method,
Hyndman & Fan type 7, the same as ``statistics.quantiles(..., method="inclusive")``).
"""

from __future__ import annotations

import csv
import math
import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import numpy as np

from policy.documents import FileError
from policy.documents import open_text as _open_untrusted
from policy.state import ServiceEdge, ServiceGraph

__all__ = [
    "PARALLEL_SHARE",
    "TopologyError",
    "EdgeObservations",
    "Observations",
    "csv_files",
    "is_csv_file",
    "open_text",
    "read_csv_header",
    "iter_csv_rows",
    "header_text",
    "parse_int",
    "parse_float",
    "is_missing",
    "parse_duration_s",
    "format_duration",
    "SourceUri",
    "split_source_uri",
]

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "y": 31536000.0}


def parse_duration_s(text: str | float | int, what: str = "duration") -> float:
    """A Prometheus-style duration (``30s``, ``5m``, ``1h30m``, ``1500ms``) or a number of seconds → seconds
    (> 0). Raises ``ValueError`` naming ``what`` and the value."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        v = float(text)
    else:
        s = str(text).strip()
        try:
            v = float(s)
        except ValueError:
            pos, v = 0, 0.0
            for m in _DURATION.finditer(s):
                if m.start() != pos:
                    break
                v += float(m.group(1)) * _UNIT_S[m.group(2)]
                pos = m.end()
            if pos != len(s) or not s:
                raise ValueError(f"{what}: not a duration such as 30s, 5m or 1h: {text!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{what}: must be a positive duration, got {text!r}")
    return v


def format_duration(seconds: float) -> str:
    """Seconds as a PromQL range duration: whole seconds as ``Ns`` (``300s``), else whole milliseconds."""
    if float(seconds).is_integer():
        return f"{int(seconds)}s"
    return f"{max(1, round(seconds * 1000))}ms"


PARALLEL_SHARE = 0.5
"""An edge is ``parallel`` when at least this share of its calls overlapped another call of the same request."""


class TopologyError(ValueError):
    """A call-graph source could not be read. The message is one line naming the file, the line (when it
    is about one row) and the field, e.g. ``trace.csv:17: StartTimeUnixNano: not an integer: 'abc'``."""


@dataclass(slots=True)
class EdgeObservations:
    """What was observed of one caller → callee pair (a mutable accumulator).

    ``calls``: observed calls (span or trace rows); ``latencies_ms``: one callee-side duration (ms) per call
    whose duration is known; ``errors``: calls that failed, ``None`` when the source records no status;
    ``kinds``: call counts per kind (operation name for spans, rpctype for Alibaba); ``overlapping``: calls that
    ran concurrently with another call of the same caller request (span tables only; ``None`` when the source
    cannot tell), from which :meth:`Observations.to_edges` sets ``parallel``.
    """

    calls: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    errors: int | None = None
    kinds: Counter = field(default_factory=Counter)
    overlapping: int | None = None


@dataclass(slots=True)
class Observations:
    """The edges observed in one table (a file, or a directory read as one table).

    ``window_s``: the table's time span in seconds (``None`` when it has no positive length, so rates are
    unknown); ``requests``: requests each service served (``None`` when the source cannot tell), the
    denominator of ``calls_per_request``; ``rows``: data rows read; ``dropped_rows``: rows that yielded no
    edge by rule (not errors); ``warnings``: one-line notes for the user.
    """

    path: str
    edges: dict[tuple[str, str], EdgeObservations] = field(default_factory=dict)
    services: set[str] = field(default_factory=set)
    window_s: float | None = None
    requests: dict[str, int] | None = None
    rows: int = 0
    dropped_rows: int = 0
    warnings: list[str] = field(default_factory=list)

    def edge(self, caller: str, callee: str) -> EdgeObservations:
        """The accumulator for ``caller → callee``, created on first use."""
        key = (caller, callee)
        obs = self.edges.get(key)
        if obs is None:
            obs = self.edges[key] = EdgeObservations()
        return obs

    def to_edges(self) -> list[ServiceEdge]:
        """One :class:`ServiceEdge` per observed pair:

        - ``rps`` = calls / ``window_s`` (``None`` when the window is unknown or zero);
        - ``calls_per_request`` = calls / requests served by the caller (``None`` when unknown);
        - ``latency_mean_ms`` / ``latency_p50_ms`` / ``latency_p95_ms`` / ``latency_p99_ms`` of the
          callee-side durations (``None`` when no duration is known);
        - ``error_rate`` = errors / calls in 0..1 (``None`` when the source has no status);
        - ``parallel`` = at least half of the calls overlapped another call of the same caller request
          (:data:`PARALLEL_SHARE`; ``False`` when the source cannot tell).
        """
        out = []
        for (caller, callee), obs in self.edges.items():
            rps = obs.calls / self.window_s if self.window_s else None
            cpr = None
            if self.requests is not None and self.requests.get(caller):
                cpr = obs.calls / self.requests[caller]
            mean = p50 = p95 = p99 = None
            if obs.latencies_ms:
                lat = np.asarray(obs.latencies_ms, dtype=np.float64)
                mean = float(lat.mean())
                p50, p95, p99 = (float(v) for v in np.percentile(lat, [50.0, 95.0, 99.0]))
            err = obs.errors / obs.calls if obs.errors is not None and obs.calls else None
            parallel = bool(obs.overlapping is not None and obs.calls and obs.overlapping >= PARALLEL_SHARE * obs.calls)
            out.append(
                ServiceEdge(
                    caller,
                    callee,
                    rps=rps,
                    calls_per_request=cpr,
                    latency_mean_ms=mean,
                    latency_p50_ms=p50,
                    latency_p95_ms=p95,
                    latency_p99_ms=p99,
                    error_rate=err,
                    parallel=parallel,
                )
            )
        return out

    def to_graph(self, source: str = "") -> ServiceGraph:
        """The observed :class:`ServiceGraph` (services: every service seen, with or without edges)."""
        return ServiceGraph.build(self.services, self.to_edges(), source or self.path)


# ---- CSV ---------------------------------------------------------------------------------------------


def is_csv_file(path: Path) -> bool:
    """True for a regular file named ``*.csv`` or ``*.csv.gz`` (any case)."""
    name = path.name.lower()
    return path.is_file() and (name.endswith(".csv") or name.endswith(".csv.gz"))


def open_text(path: str | Path):
    """Open a CSV file for reading as UTF-8 text (a byte-order mark is skipped), decompressing ``*.gz``
    (:func:`policy.documents.open_text`). Raises :class:`TopologyError` naming the file when it cannot be opened;
    reading it raises :class:`policy.documents.FileError` for bad gzip data, oversized or non-UTF-8 text."""
    try:
        return _open_untrusted(path)
    except FileError as exc:
        raise TopologyError(str(exc)) from None


def csv_files(path: str | Path) -> list[Path]:
    """The files of one CSV table: ``path`` itself, or every ``*.csv`` / ``*.csv.gz`` directly inside a directory
    (sorted by name; subdirectories are not read). Raises :class:`TopologyError` when there is none or it is
    missing."""
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if is_csv_file(f))
        if not files:
            raise TopologyError(f"{p}: directory holds no *.csv file")
        return files
    if not p.exists():
        raise TopologyError(f"{p}: no such file or directory")
    return [p]


def read_csv_header(path: str | Path) -> list[str]:
    """The stripped column names of the first non-empty line of a CSV file (``[]`` for an empty file)."""
    try:
        with open_text(path) as fh:
            for row in csv.reader(fh):
                if row:
                    return [c.strip() for c in row]
    except FileError as exc:
        raise TopologyError(str(exc)) from None
    except csv.Error as exc:
        raise TopologyError(f"{path}:1: malformed CSV header: {exc}") from exc
    return []


def header_text(header: list[str], limit: int = 200) -> str:
    """The header as one line for a message (cells with line breaks or quotes flattened, at most ``limit`` chars)."""
    text = " ".join(",".join(header).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def iter_csv_rows(
    path: str | Path, required: Sequence[str], expected_hint: str = ""
) -> Iterator[tuple[int, Mapping[str, int], list[str]]]:
    """Yield ``(line_number, column_index, row)`` for each data row of a CSV file with a header line.

    ``line_number`` is the 1-based physical line where the row ends (the header is line 1 for a file
    without leading blank lines); blank lines are skipped. ``column_index`` maps each stripped column name
    to its position. Raises :class:`TopologyError` naming the file when a ``required`` column is missing,
    and the file and line when a row has a different number of fields than the header or is not valid CSV.
    """
    fh = open_text(path)
    with fh:
        reader = csv.reader(fh)
        try:
            header: list[str] | None = None
            for row in reader:
                if not row:
                    continue
                if header is None:
                    header = [c.strip() for c in row]
                    index = {name: i for i, name in enumerate(header)}
                    missing = [c for c in required if c not in index]
                    if missing:
                        hint = f" ({expected_hint})" if expected_hint else ""
                        raise TopologyError(
                            f"{path}:{reader.line_num}: missing column(s) {', '.join(missing)}; "
                            f"header is {header_text(header)}{hint}"
                        )
                    continue
                if len(row) != len(header):
                    raise TopologyError(
                        f"{path}:{reader.line_num}: expected {len(header)} fields as in the header, got {len(row)}"
                    )
                yield reader.line_num, index, row
        except csv.Error as exc:
            raise TopologyError(f"{path}:{reader.line_num}: malformed CSV: {exc}") from exc
        except FileError as exc:  # bad gzip data, oversized or non-UTF-8 text: the line where reading stopped
            where = str(exc).removeprefix(f"{path}: ")
            raise TopologyError(f"{path}:{reader.line_num + 1}: {where}") from None
        if header is None:
            raise TopologyError(f"{path}: empty file, expected a CSV header")


def parse_int(value: str, path: str | Path, line: int, field_name: str) -> int:
    """``value`` as an int, or :class:`TopologyError` ``path:line: field: not an integer: 'value'``."""
    try:
        return int(value.strip())
    except ValueError:
        raise TopologyError(f"{path}:{line}: {field_name}: not an integer: {value!r}") from None


def parse_float(value: str, path: str | Path, line: int, field_name: str) -> float:
    """``value`` as a finite float, or :class:`TopologyError` ``path:line: field: not a number: 'value'``
    (``nan`` and infinities are refused too; test optional cells with :func:`is_missing` first)."""
    try:
        v = float(value.strip())
    except ValueError:
        raise TopologyError(f"{path}:{line}: {field_name}: not a number: {value!r}") from None
    if not math.isfinite(v):
        raise TopologyError(f"{path}:{line}: {field_name}: not a finite number: {value!r}")
    return v


def is_missing(value: str) -> bool:
    """True for an empty cell or a pandas-style ``NaN`` / ``nan``."""
    v = value.strip()
    return not v or v.lower() == "nan"


@dataclass(frozen=True)
class SourceUri:
    """A live source's URI split (:func:`split_source_uri`): ``scheme`` (lower case), ``base`` (the
    ``http(s)://host[:port][/prefix]`` to query), ``netloc`` (``host[:port]``, IPv6 hosts in brackets), ``path``,
    ``params`` (each query parameter once)."""

    scheme: str
    base: str
    netloc: str
    path: str
    params: dict[str, str]


def split_source_uri(uri: str, schemes: Sequence[str], params: Sequence[str], expected: str) -> SourceUri:
    """Split a ``SCHEME[+https]://HOST[:PORT][/PREFIX][?k=v&...]`` source string: ``schemes`` the accepted ones (an
    ending ``+https`` means HTTPS), ``params`` the known query parameters, ``expected`` what to say about a wrong
    scheme. Raises ``ValueError`` naming the URI and the bad part (scheme, no host, bad port, unknown or repeated
    parameter)."""
    parts = urlsplit(str(uri).strip())
    scheme = parts.scheme.lower()
    if scheme not in schemes:
        raise ValueError(f"{uri}: unknown scheme {parts.scheme!r}; expected {expected}")
    if not parts.hostname:
        raise ValueError(f"{uri}: no host (expected {scheme}://HOST:PORT)")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{uri}: bad port") from None
    found: dict[str, str] = {}
    for k, v in parse_qsl(parts.query, keep_blank_values=True):
        if k not in params:
            raise ValueError(f"{uri}: unknown parameter {k!r}; expected {', '.join(params)}")
        if k in found:
            raise ValueError(f"{uri}: parameter {k!r} given twice")
        found[k] = v
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    netloc = f"{host}:{port}" if port else host
    base = f"{'https' if scheme.endswith('+https') else 'http'}://{netloc}{parts.path}"
    return SourceUri(scheme, base, netloc, parts.path, found)
