"""The policy benchmark's runs aggregated into ``benchmarks/summary.json`` (schema 3, docs/benchmarks.md):
:func:`summarize` (per-seed metrics → mean and ci95), :func:`comparisons` (equal-CPU comparisons, the reference's
share), :func:`build_summary`, and :func:`validate_summary` (the schema, checked field by field)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from policy.sim.engine import METRIC_KEYS
from policy.sim.scenario import BASELINE as BASELINE_SCENARIO

from .cells import UTIL_KEYS, cached_scenario, simulate_command
from .common import SCHEMA, Mode, mean_ci95
from .pareto import (
    FRONT_METRICS,
    at_equal_cpu,
    cell_fronts,
    reference_share,
)
from .plan import Cell

__all__ = [
    "SUMMARY_KEYS",
    "CELL_KEYS",
    "REFERENCE_ONE_APP",
    "runs_per_stack",
    "summarize",
    "comparisons",
    "build_summary",
    "validate_summary",
]


# ---- aggregation ---------------------------------------------------------------------------------------------

CellKey = tuple[str, str, str]


def _nest(flat: Mapping[tuple[str, ...], Any]) -> dict[str, Any]:
    """``{(a, b, c, ...): v}`` → ``{a: {b: {c: ... v}}}`` (insertion order kept)."""
    out: dict[str, Any] = {}
    for key, v in flat.items():
        d = out
        for k in key[:-1]:
            d = d.setdefault(k, {})
        d[key[-1]] = v
    return out


def runs_per_stack(results: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, str, str], list[Mapping[str, Any]]]:
    """Run records per (scenario, app, trace, policy), each list in seed order."""
    per: dict[tuple[str, str, str, str], list[Mapping[str, Any]]] = {}
    for r in results:
        key = (r.get("scenario", BASELINE_SCENARIO), r["app"], r["trace"], r["policy"])
        per.setdefault(key, []).append(r)
    return {k: sorted(v, key=lambda r: int(r.get("seed", 0))) for k, v in per.items()}


def summarize(results: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """``{scenario: {app: {trace: {policy: {metric: {"mean", "ci95"}}}}}}`` from run records (any order). Each
    cell's seeds are aggregated in seed order, so the same runs give the same bits in any order."""
    return _nest(
        {
            key: {k: mean_ci95([r["metrics"][k] for r in rs]) for k in METRIC_KEYS}
            for key, rs in runs_per_stack(results).items()
        }
    )


def _counters(rs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]] | None:
    """``{name: {"mean", "ci95"}}`` of a stack's counters over its seeds (a name missing in a seed counts 0);
    None for a stack that keeps no counters."""
    names = sorted({n for r in rs for n in (r.get("counters") or {})})
    if not names:
        return None
    return {n: mean_ci95([float((r.get("counters") or {}).get(n, 0.0)) for r in rs]) for n in names}


def _front_json(points) -> list[dict[str, Any]]:
    return [{"stack": p.stack, "cpu_core_hours": p.cpu, "value": p.value} for p in points]


def comparisons(
    results: Sequence[Mapping[str, Any]], baselines: Sequence[str], reference: Sequence[str], contenders: Sequence[str]
) -> dict[str, Any]:
    """``{"fronts", "equal_cpu", "reference_share"}`` per scenario, app and trace (:mod:`policy.bench.pareto`)."""
    per = runs_per_stack(results)
    cells = list(dict.fromkeys(k[:3] for k in per))
    fronts: dict[CellKey, Any] = {}
    equal: dict[tuple[str, str, str, str], Any] = {}
    share: dict[tuple[str, str, str, str], Any] = {}
    for cell in cells:
        runs = {k[3]: [r["metrics"] for r in rs] for k, rs in per.items() if k[:3] == cell}
        fr = cell_fronts(runs, baselines, reference)
        fronts[cell] = {m: {k: _front_json(v) for k, v in fr[m].items()} for m in FRONT_METRICS}
        for stack in contenders:
            if stack not in runs:
                continue
            cpu = [m["cpu_core_hours"] for m in runs[stack]]
            eq, sh = {}, {}
            for m in FRONT_METRICS:
                front = fr[m]["baselines"]
                per_seed = {p.stack: [x[m] for x in runs[p.stack]] for p in front}
                eq[m] = at_equal_cpu(front, cpu, [x[m] for x in runs[stack]], per_seed)
                sh[m] = reference_share(
                    fr[m]["hpa"],
                    fr[m]["reference"],
                    float(np.mean(cpu)),
                    float(np.mean([x[m] for x in runs[stack]])),
                    m,
                )
            equal[(*cell, stack)] = eq
            share[(*cell, stack)] = sh
    return {"fronts": _nest(fronts), "equal_cpu": _nest(equal), "reference_share": _nest(share)}


SUMMARY_KEYS = (
    "schema",
    "mode",
    "seeds",
    "scenarios",
    "cells",
    "results",
    "node_cpu_util_pct",
    "fronts",
    "equal_cpu",
    "reference_share",
    "reference_mip",
    "counters",
)

#: The keys of each entry of summary.json ``cells``.
CELL_KEYS = ("apps", "role", "minutes", "offset_min", "samples", "nodes", "reference_not_run", "command")

#: Why the offline reference is left out of a cell of several apps.
REFERENCE_ONE_APP = (
    "the offline reference plans one application's replicas and placement (policy/sim/reference.py); this "
    "scenario runs {n} side by side"
)


def build_summary(
    results: Sequence[Mapping[str, Any]],
    mode: Mode,
    cells: Sequence[Cell],
    baselines: Sequence[str],
    reference: Sequence[str],
    contenders: Sequence[str],
    stacks: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The whole summary.json object (schema 3, docs/benchmarks.md) from run records (any order): cells in the
    order of ``cells``, stacks in the order of ``stacks`` (default: as first seen)."""
    per = runs_per_stack(results)
    order = list(dict.fromkeys([*(stacks or ()), *(k[3] for k in per)]))
    keys = sorted(per, key=lambda k: ([c.key for c in cells].index(k[:3]), order.index(k[3])))
    per = {k: per[k] for k in keys}
    present = {k[:3] for k in per}
    res, util, mip, counters = {}, {}, {}, {}
    for key, rs in per.items():
        res[key] = {k: mean_ci95([r["metrics"][k] for r in rs]) for k in METRIC_KEYS}
        util[key] = [{"seed": int(r["seed"]), **r["node_cpu_util_pct"]} for r in rs]
        if "reference_mip" in rs[0]:
            mip[key] = rs[0]["reference_mip"]
        c = _counters(rs)
        if c is not None:
            counters[key] = c
    scenarios: dict[str, Any] = {}
    cell_info: dict[CellKey, Any] = {}
    for c in cells:
        if c.key not in present:
            continue
        scn = cached_scenario(c.scenario)
        scenarios.setdefault(c.scenario_name, {"family": c.family, "description": scn.spec.description})
        first = next(rs[0] for k, rs in per.items() if k[:3] == c.key)
        cell_info[c.key] = {
            "apps": list(c.apps),
            "role": c.role,
            "minutes": c.minutes,
            "offset_min": c.offset_min,
            "samples": int(first["samples"]),
            "nodes": int(first["nodes"]),
            "reference_not_run": REFERENCE_ONE_APP.format(n=len(c.apps)) if len(c.apps) > 1 and reference else None,
            "command": simulate_command(c, "{stack}", "{seed}", mode.n_samples),
        }
    comp = comparisons([r for rs in per.values() for r in rs], baselines, reference, contenders)
    return {
        "schema": SCHEMA,
        "mode": {
            "name": mode.name,
            "plan": mode.plan,
            "minutes": mode.minutes,
            "n_samples": mode.n_samples,
            "seeds": list(mode.seeds),
            "sweep": mode.sweep,
        },
        "seeds": len(mode.seeds),
        "scenarios": scenarios,
        "cells": _nest(cell_info),
        "results": _nest(res),
        "node_cpu_util_pct": _nest(util),
        **comp,
        "reference_mip": _nest(mip),
        "counters": _nest(counters),
    }


def _num(x: Any, where: str, nullable: bool = False) -> None:
    if x is None and nullable:
        return
    if not isinstance(x, (int, float)) or isinstance(x, bool) or not math.isfinite(x):
        raise ValueError(f"{where}: must be a finite number, got {x!r}")


def _exact(obj: Any, keys: Iterable[str], where: str) -> None:
    if not isinstance(obj, dict) or set(obj) != set(keys):
        raise ValueError(
            f"{where}: keys must be exactly {sorted(keys)}, got {sorted(obj) if isinstance(obj, dict) else obj!r}"
        )


def _mean_ci(v: Any, where: str) -> None:
    _exact(v, ("mean", "ci95"), where)
    for f in ("mean", "ci95"):
        _num(v[f], f"{where}.{f}")
    if v["ci95"] < 0:
        raise ValueError(f"{where}.ci95: must be >= 0, got {v['ci95']}")


def _obj(obj: Any, where: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: must be an object, got {type(obj).__name__}")
    return obj


def _walk(obj: Any, where: str, depth: int, keys: tuple[str, ...] = ()):
    """``(where, keys, value)`` of every entry ``depth`` levels down (scenario, app, trace), each level an object."""
    if depth == 0:
        yield where, keys, obj
        return
    for k, v in _obj(obj, where).items():
        yield from _walk(v, f"{where}.{k}", depth - 1, (*keys, k))


def _cells(obj: Any, where: str, depth: int = 3):
    """``(where, value)`` of every cell ``depth`` levels down (scenario, app, trace)."""
    for w, _k, v in _walk(obj, where, depth):
        yield w, v


def _int(x: Any, where: str, lo: int) -> None:
    if not isinstance(x, int) or isinstance(x, bool) or x < lo:
        raise ValueError(f"{where}: must be an integer >= {lo}, got {x!r}")


def validate_summary(obj: Any) -> None:
    """Raise ValueError (naming the first offending field and its value) unless ``obj`` has exactly the
    summary.json shape of docs/benchmarks.md (schema 3), every number finite, every interval and counter >= 0 and
    every result cell described in ``cells``. A summary of the first schema (``{"seeds", "results"}``, per app and
    trace) is accepted as it is."""
    legacy = isinstance(obj, dict) and set(obj) == {"seeds", "results"}
    if legacy:
        _int(obj["seeds"], "summary.seeds", 1)
        for where, policies in _cells(obj["results"], "summary.results", 2):
            for policy, metrics in _obj(policies, where).items():
                _exact(metrics, METRIC_KEYS, f"{where}.{policy}")
                for k, v in metrics.items():
                    _mean_ci(v, f"{where}.{policy}.{k}")
        return
    _exact(obj, SUMMARY_KEYS, "summary")
    if obj["schema"] != SCHEMA:
        raise ValueError(f"summary.schema: must be {SCHEMA}, got {obj['schema']!r}")
    _exact(obj["mode"], ("name", "plan", "minutes", "n_samples", "seeds", "sweep"), "summary.mode")
    _int(obj["seeds"], "summary.seeds", 1)
    for name, s in _obj(obj["scenarios"], "summary.scenarios").items():
        _exact(s, ("family", "description"), f"summary.scenarios.{name}")
    described = set()
    for where, key, c in _walk(obj["cells"], "summary.cells", 3):
        _exact(c, CELL_KEYS, where)
        described.add(key)
        if key[0] not in obj["scenarios"]:
            raise ValueError(f"{where}: scenario {key[0]!r} is not in summary.scenarios")
        for k in ("minutes", "samples", "nodes"):
            _int(c[k], f"{where}.{k}", 1)
        _int(c["offset_min"], f"{where}.offset_min", 0)
        if c["role"] not in ("training", "held-out", ""):
            raise ValueError(f"{where}.role: must be 'training', 'held-out' or '', got {c['role']!r}")
        if not isinstance(c["command"], str) or "{stack}" not in c["command"] or "{seed}" not in c["command"]:
            raise ValueError(f"{where}.command: must be a command with {{stack}} and {{seed}}, got {c['command']!r}")
        if c["reference_not_run"] is not None and not isinstance(c["reference_not_run"], str):
            raise ValueError(f"{where}.reference_not_run: must be a reason or null, got {c['reference_not_run']!r}")
    for where, key, policies in _walk(obj["results"], "summary.results", 3):
        if key not in described:
            raise ValueError(f"{where}: a result cell that summary.cells does not describe")
        for policy, metrics in _obj(policies, where).items():
            _exact(metrics, METRIC_KEYS, f"{where}.{policy}")
            for k, v in metrics.items():
                _mean_ci(v, f"{where}.{policy}.{k}")

    for where, policies in _cells(obj["node_cpu_util_pct"], "summary.node_cpu_util_pct"):
        for policy, runs in _obj(policies, where).items():
            if not isinstance(runs, list) or len(runs) != obj["seeds"]:
                raise ValueError(f"{where}.{policy}: must be a list of one entry per seed")
            for i, r in enumerate(runs):
                _exact(r, ("seed", *UTIL_KEYS), f"{where}.{policy}[{i}]")
                for k in UTIL_KEYS:
                    _num(r[k], f"{where}.{policy}[{i}].{k}")
    for where, metrics in _cells(obj["fronts"], "summary.fronts"):
        _exact(metrics, FRONT_METRICS, where)
        for m, fr in metrics.items():
            _exact(fr, ("baselines", "hpa", "reference"), f"{where}.{m}")
            for name, pts in fr.items():
                for i, p in enumerate(pts):
                    _exact(p, ("stack", "cpu_core_hours", "value"), f"{where}.{m}.{name}[{i}]")
                    _num(p["cpu_core_hours"], f"{where}.{m}.{name}[{i}].cpu_core_hours")
                    _num(p["value"], f"{where}.{m}.{name}[{i}].value")
    eq_keys = ("cpu_core_hours", "position", "bracket", "weight", "front", "stack", "delta", "ratio", "ratio_ci95")
    for where, stacks in _cells(obj["equal_cpu"], "summary.equal_cpu"):
        for stack, metrics in _obj(stacks, where).items():
            _exact(metrics, FRONT_METRICS, f"{where}.{stack}")
            for m, e in metrics.items():
                w = f"{where}.{stack}.{m}"
                if e is None:
                    continue
                _exact(e, eq_keys, w)
                _num(e["cpu_core_hours"], f"{w}.cpu_core_hours")
                _num(e["weight"], f"{w}.weight")
                if e["position"] not in ("inside", "above"):
                    raise ValueError(f"{w}.position: must be 'inside' or 'above', got {e['position']!r}")
                for f in ("front", "stack", "delta"):
                    _mean_ci(e[f], f"{w}.{f}")
                _num(e["ratio"], f"{w}.ratio", nullable=True)
                if e["ratio_ci95"] is not None:
                    if not isinstance(e["ratio_ci95"], list) or len(e["ratio_ci95"]) != 2:
                        raise ValueError(f"{w}.ratio_ci95: must be [lo, hi] or null")
                    for x in e["ratio_ci95"]:
                        _num(x, f"{w}.ratio_ci95")
    for where, stacks in _cells(obj["reference_share"], "summary.reference_share"):
        for stack, metrics in _obj(stacks, where).items():
            _exact(metrics, FRONT_METRICS, f"{where}.{stack}")
            for m, v in metrics.items():
                _num(v, f"{where}.{stack}.{m}", nullable=True)
    mip_keys = ("solves", "unsolved", "mip_gap_max", "mip_gap_mean", "solve_s_total", "relaxed")
    for where, stacks in _cells(obj["reference_mip"], "summary.reference_mip"):
        for stack, v in _obj(stacks, where).items():
            _exact(v, mip_keys, f"{where}.{stack}")
            for k in mip_keys:
                _num(v[k], f"{where}.{stack}.{k}")
    for where, stacks in _cells(obj["counters"], "summary.counters"):
        for stack, names in _obj(stacks, where).items():
            if not _obj(names, f"{where}.{stack}"):
                raise ValueError(f"{where}.{stack}: must name at least one counter (leave a stack without any out)")
            for name, v in names.items():
                if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
                    raise ValueError(f"{where}.{stack}: counter names are snake_case, got {name!r}")
                _mean_ci(v, f"{where}.{stack}.{name}")
                if v["mean"] < 0:
                    raise ValueError(f"{where}.{stack}.{name}.mean: a count must be >= 0, got {v['mean']}")
