"""Call graph from the Alibaba microservice traces' call-graph table (MSCallGraph / CallGraph CSV).

Two schemas, told apart by the header (alibaba/clusterdata, ``cluster-trace-microservices-v2021/README.md``
and ``cluster-trace-microservices-v2022/README.md``):

- v2021 ``traceid,timestamp,rpcid,um,rpctype,dm,interface,rt``, optionally after a leading unnamed column
  (the pandas index that excerpts written with ``DataFrame.to_csv`` carry);
- v2022 ``timestamp,traceid,service,rpc_id,rpctype,um,uminstanceid,interface,dm,dminstanceid,rt``.

Each row is one call from the upstream microservice ``um`` to the downstream one ``dm``; ``timestamp`` is in
ms from the start of the trace, ``rt`` the response time in ms (recorded positive at the UM and negative
at the DM, so RPC calls can appear twice; < 1 ms is recorded as 0).

Rules (the method of the derived edge lists in ``tests/fixtures/alibaba/PROVENANCE.md``):

- edge ``um → dm`` for every row; every rpctype is kept (rpc, mc, db, mq, http, userDefined, and any
  other value); self-edges (um == dm, e.g. local or userDefined calls) are kept;
- a row whose ``um`` or ``dm`` is empty, ``(?)``, ``NaN``, ``UNKNOWN`` or ``UNAVAILABLE`` (any case) is
  dropped: it gives no edge (its named side, if any, still counts as a service of the graph);
- per edge: ``rps`` = rows / window, the window being max - min ``timestamp`` over all rows of the table
  (dropped rows included), in seconds. The call-graph table is a 0.5 % SAMPLE of the calls (v2021 README:
  "we sample the call graph based on the rate of 0.5%"); rates are NOT rescaled, so they are rates of
  sampled calls (multiply by 200 for an estimate of the full rate). Latency mean/p50/p95/p99 are of
  ``|rt|`` in ms over the rows whose ``rt`` is present; ``calls_per_request`` and ``error_rate`` are
  ``None`` (the table has no status and the rpcid trees are often inconsistent, see CASPER, ICPE'24).

A directory is read as one table (every ``*.csv`` directly inside it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from policy.state import ServiceGraph

from .common import Observations, csv_files, is_missing, iter_csv_rows, parse_float

__all__ = ["V2021_COLUMNS", "V2022_COLUMNS", "MISSING_NAMES", "alibaba_version", "read_alibaba", "load_alibaba"]

V2021_COLUMNS = ("traceid", "timestamp", "rpcid", "um", "rpctype", "dm", "interface", "rt")
V2022_COLUMNS = (
    "timestamp",
    "traceid",
    "service",
    "rpc_id",
    "rpctype",
    "um",
    "uminstanceid",
    "interface",
    "dm",
    "dminstanceid",
    "rt",
)
MISSING_NAMES = frozenset({"", "(?)", "nan", "unknown", "unavailable"})
"""um/dm values (compared stripped and lower-cased) that name no microservice: such rows are dropped."""

_REQUIRED = ("timestamp", "um", "dm", "rt")
_EXPECTED = (
    "an Alibaba call-graph table needs columns "
    + ",".join(V2021_COLUMNS)
    + " (v2021) or "
    + ",".join(V2022_COLUMNS)
    + " (v2022)"
)


def alibaba_version(header: list[str]) -> Literal["v2021", "v2022"] | None:
    """``"v2021"`` or ``"v2022"`` for a call-graph header (column names, stripped), ``None`` otherwise.
    A leading unnamed column (pandas index) is ignored."""
    cols = set(header) - {""}
    if {"um", "dm"} <= cols and "timestamp" in cols:
        if "rpc_id" in cols or "dminstanceid" in cols:
            return "v2022"
        return "v2021"
    return None


def read_alibaba(path: str | Path) -> Observations:
    """Read an MSCallGraph CSV (or every ``*.csv`` of a directory, as one table) into :class:`Observations`:
    per-edge row counts (``calls``), ``|rt|`` in ms (``latencies_ms``), rpctype counts (``kinds``), and the
    table window in seconds.

    Raises :class:`TopologyError` ``file:line: field: problem`` for a non-numeric ``timestamp`` or ``rt``,
    and ``file:line: missing column(s) ...`` for a file without the call-graph columns.
    """
    obs = Observations(path=str(path))
    t_min: float | None = None
    t_max: float | None = None
    for f in csv_files(path):
        for line, col, row in iter_csv_rows(f, _REQUIRED, _EXPECTED):
            ts = parse_float(row[col["timestamp"]], f, line, "timestamp")
            obs.rows += 1
            t_min = ts if t_min is None else min(t_min, ts)
            t_max = ts if t_max is None else max(t_max, ts)
            um = row[col["um"]].strip()
            dm = row[col["dm"]].strip()
            um_ok = um.lower() not in MISSING_NAMES
            dm_ok = dm.lower() not in MISSING_NAMES
            if not (um_ok and dm_ok):
                if um_ok:
                    obs.services.add(um)
                if dm_ok:
                    obs.services.add(dm)
                obs.dropped_rows += 1
                continue
            rt_raw = row[col["rt"]]
            e = obs.edge(um, dm)
            e.calls += 1
            if not is_missing(rt_raw):
                e.latencies_ms.append(abs(parse_float(rt_raw, f, line, "rt")))
            if "rpctype" in col:
                e.kinds[row[col["rpctype"]].strip() or "(empty)"] += 1
            obs.services.add(um)
            obs.services.add(dm)
    if t_min is not None and t_max is not None and t_max > t_min:
        obs.window_s = (t_max - t_min) / 1000.0
    if obs.rows == 0:
        obs.warnings.append(f"{path}: no call rows")
    elif not obs.edges:
        obs.warnings.append(f"{path}: all {obs.rows} rows lack a um or dm name; no edge")
    elif obs.window_s is None:
        obs.warnings.append(f"{path}: all rows share one timestamp; call rates unknown")
    return obs


def load_alibaba(path: str | Path) -> tuple[ServiceGraph, list[str]]:
    """The :class:`ServiceGraph` of an Alibaba call-graph table and the warnings; see :func:`read_alibaba`."""
    obs = read_alibaba(path)
    return obs.to_graph(f"alibaba:{path}"), obs.warnings
