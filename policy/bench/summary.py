"""The policy benchmark's runs aggregated into ``benchmarks/summary.json`` (schema 4, docs/benchmarks.md):
:func:`summarize` (per-seed metrics → mean and ci95), :func:`comparisons` (fronts and equal-CPU comparisons),
:func:`build_summary` (with the targets of :mod:`.targets` and the training-seed spread of :mod:`.spread`), and
:func:`validate_summary` (the schema, checked field by field)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from policy.sim.engine import METRIC_KEYS
from policy.sim.floor import FLOOR_KEYS
from policy.sim.hrl_stacks import VARIANTS
from policy.sim.scenario import BASELINE as BASELINE_SCENARIO

from .cells import UTIL_KEYS, cached_scenario, simulate_command
from .common import RESULT_KEYS, SCHEMA, Mode, StackRoles, mean_ci95
from .pareto import FRONT_METRICS, at_equal_cpu, cell_fronts
from .plan import Cell
from .spread import SPREAD_METRICS, VERDICTS, ablation_verdict, spreads_of_cell
from .targets import CONSTANT_STACK, cell_targets, oracle_loss

__all__ = [
    "SUMMARY_KEYS",
    "MODE_KEYS",
    "CELL_KEYS",
    "TARGET_KEYS",
    "HRL",
    "ABLATIONS",
    "runs_per_stack",
    "summarize",
    "comparisons",
    "build_summary",
    "validate_summary",
]


# ---- aggregation ---------------------------------------------------------------------------------------------

CellKey = tuple[str, str, str]

#: The stack the ablations are judged against, and its ablations (:data:`policy.sim.hrl_stacks.VARIANTS`).
HRL = "hrl-scheduler"
ABLATIONS = tuple(v for v in VARIANTS if v != HRL)


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


def _result(rs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """``{key: {"mean", "ci95"}}`` over the runs' seeds for every key of :data:`RESULT_KEYS`."""
    return {k: mean_ci95([r["metrics"][k] for r in rs]) for k in RESULT_KEYS}


def summarize(results: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """``{scenario: {app: {trace: {policy: {metric: {"mean", "ci95"}}}}}}`` from run records (any order): the eight
    metrics and the objective. Each cell's seeds are aggregated in seed order, so the same runs give the same bits in
    any order."""
    return _nest({key: _result(rs) for key, rs in runs_per_stack(results).items()})


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
    results: Sequence[Mapping[str, Any]], baselines: Sequence[str], contenders: Sequence[str]
) -> dict[str, Any]:
    """``{"fronts", "equal_cpu"}`` per scenario, app and trace (:mod:`policy.bench.pareto`)."""
    per = runs_per_stack(results)
    cells = list(dict.fromkeys(k[:3] for k in per))
    fronts: dict[CellKey, Any] = {}
    equal: dict[tuple[str, str, str, str], Any] = {}
    for cell in cells:
        runs = {k[3]: [r["metrics"] for r in rs] for k, rs in per.items() if k[:3] == cell}
        fr = cell_fronts(runs, baselines)
        fronts[cell] = {m: {k: _front_json(v) for k, v in fr[m].items()} for m in FRONT_METRICS}
        for stack in contenders:
            if stack not in runs:
                continue
            cpu = [m["cpu_core_hours"] for m in runs[stack]]
            eq = {}
            for m in FRONT_METRICS:
                front = fr[m]["baselines"]
                per_seed = {p.stack: [x[m] for x in runs[p.stack]] for p in front}
                eq[m] = at_equal_cpu(front, cpu, [x[m] for x in runs[stack]], per_seed)
            equal[(*cell, stack)] = eq
    return {"fronts": _nest(fronts), "equal_cpu": _nest(equal)}


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
    "targets",
    "oracle_losses",
    "training_seeds",
    "ablations",
    "skipped_training_seeds",
    "counters",
)

#: The keys of summary.json ``mode``.
MODE_KEYS = ("name", "plan", "minutes", "n_samples", "seeds", "sweep", "training_seeds", "oracle")

#: The keys of each entry of summary.json ``cells``.
CELL_KEYS = ("apps", "role", "minutes", "offset_min", "samples", "nodes", "command", "floor")

#: The keys of each entry of summary.json ``targets`` (:func:`policy.bench.targets.cell_targets`).
TARGET_KEYS = ("oracle", "best_baseline", "best_constant", "oracle_gain", "share")


def _objectives(rs_by_stack: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, dict[int, float]]:
    return {s: {int(r["seed"]): float(r["metrics"]["objective"]) for r in rs} for s, rs in rs_by_stack.items()}


def _targets_and_spread(
    per: Mapping[tuple[str, str, str, str], Sequence[Mapping[str, Any]]], cells: Sequence[CellKey], roles: StackRoles
) -> dict[str, Any]:
    """``{"targets", "oracle_losses", "training_seeds", "ablations"}`` of the summary."""
    oracle = roles.oracle or None
    targets: dict[CellKey, Any] = {}
    losses: list[dict[str, Any]] = []
    spreads: dict[tuple[str, str, str, str], Any] = {}
    verdicts: dict[tuple[str, str, str, str], Any] = {}
    for cell in cells:
        rs_by_stack = {k[3]: rs for k, rs in per.items() if k[:3] == cell}
        obj = _objectives(rs_by_stack)
        t = cell_targets(obj, roles.baselines, roles.contenders, oracle, CONSTANT_STACK)
        targets[cell] = t
        loss = oracle_loss(obj, (t["best_baseline"] or {}).get("stack"), oracle, CONSTANT_STACK)
        if loss is not None:
            losses.append({"scenario": cell[0], "app": cell[1], "trace": cell[2], **loss})
        sp = spreads_of_cell(rs_by_stack, roles.learned)
        for stack, entry in sp.items():
            spreads[(*cell, stack)] = entry
        if HRL in sp:
            for a in ABLATIONS:
                if a in sp:
                    verdicts[(*cell, a)] = ablation_verdict(
                        sp[HRL]["objective"],
                        sp[a]["objective"],
                        len(sp[HRL]["training_seeds"]),
                        len(sp[a]["training_seeds"]),
                        a,
                    )
    return {
        "targets": _nest(targets),
        "oracle_losses": losses,
        "training_seeds": _nest(spreads),
        "ablations": _nest(verdicts),
    }


def build_summary(
    results: Sequence[Mapping[str, Any]],
    mode: Mode,
    cells: Sequence[Cell],
    roles: StackRoles,
    skipped_training_seeds: Sequence[Mapping[str, Any]] = (),
    floors: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The whole summary.json object (schema 4, docs/benchmarks.md) from run records (any order): cells in the
    order of ``cells``, stacks in the order of ``roles.order`` (then as first seen). ``roles``: the baselines (the
    fronts, the best baseline), the contenders (equal CPU, shares of the oracle's gain), the oracle run, the learned
    stacks whose spread across training seeds is reported (:class:`~policy.bench.common.StackRoles`);
    ``skipped_training_seeds``: ``{"stack", "training_seed", "reason"}`` of every training seed the plan let the bench
    skip; ``floors``: the cells' latency-floor records (:func:`policy.bench.cells.floor_seeds`; a cell without any
    has ``floor`` null)."""
    per = runs_per_stack(results)
    floor_runs: dict[CellKey, list[Mapping[str, Any]]] = {}
    for f in floors:
        floor_runs.setdefault((f["scenario"], f["app"], f["trace"]), []).append(f)
    order = list(dict.fromkeys([*roles.order, *(k[3] for k in per)]))
    keys = sorted(per, key=lambda k: ([c.key for c in cells].index(k[:3]), order.index(k[3])))
    per = {k: per[k] for k in keys}
    present = {k[:3] for k in per}
    res, util, counters = {}, {}, {}
    for key, rs in per.items():
        res[key] = _result(rs)
        util[key] = [{"seed": int(r["seed"]), **r["node_cpu_util_pct"]} for r in rs]
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
            "command": simulate_command(c, "{stack}", "{seed}", mode.n_samples, mode.bundles),
            "floor": (
                {k: mean_ci95([float(f[k]) for f in floor_runs[c.key]]) for k in FLOOR_KEYS}
                if c.key in floor_runs
                else None
            ),
        }
    flat = [r for rs in per.values() for r in rs]
    comp = comparisons(flat, roles.baselines, roles.contenders)
    extra = _targets_and_spread(per, [c.key for c in cells if c.key in present], roles)
    return {
        "schema": SCHEMA,
        "mode": {
            "name": mode.name,
            "plan": mode.plan,
            "minutes": mode.minutes,
            "n_samples": mode.n_samples,
            "seeds": list(mode.seeds),
            "sweep": mode.sweep,
            "training_seeds": list(mode.training_seeds),
            "oracle": mode.oracle,
        },
        "seeds": len(mode.seeds),
        "scenarios": scenarios,
        "cells": _nest(cell_info),
        "results": _nest(res),
        "node_cpu_util_pct": _nest(util),
        **comp,
        **extra,
        "skipped_training_seeds": [dict(x) for x in skipped_training_seeds],
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


def _described(obj: Mapping[str, Any], name: str, described: set, what: str = "a cell"):
    """``(where, value)`` of every cell of ``obj[name]``; ValueError for one that summary.cells does not describe."""
    for where, key, v in _walk(obj[name], f"summary.{name}", 3):
        if key not in described:
            raise ValueError(f"{where}: {what} that summary.cells does not describe")
        yield where, v


def _validate_results(obj: Mapping[str, Any], described: set) -> None:
    for where, policies in _described(obj, "results", described, "a result cell"):
        for policy, metrics in _obj(policies, where).items():
            _exact(metrics, RESULT_KEYS, f"{where}.{policy}")
            for k, v in metrics.items():
                _mean_ci(v, f"{where}.{policy}.{k}")


def _validate_util(obj: Mapping[str, Any]) -> None:
    for where, policies in _cells(obj["node_cpu_util_pct"], "summary.node_cpu_util_pct"):
        for policy, runs in _obj(policies, where).items():
            if not isinstance(runs, list) or len(runs) != obj["seeds"]:
                raise ValueError(f"{where}.{policy}: must be a list of one entry per seed")
            for i, r in enumerate(runs):
                _exact(r, ("seed", *UTIL_KEYS), f"{where}.{policy}[{i}]")
                for k in UTIL_KEYS:
                    _num(r[k], f"{where}.{policy}[{i}].{k}")


def _validate_fronts(obj: Mapping[str, Any]) -> None:
    for where, metrics in _cells(obj["fronts"], "summary.fronts"):
        _exact(metrics, FRONT_METRICS, where)
        for m, fr in metrics.items():
            _exact(fr, ("baselines", "hpa"), f"{where}.{m}")
            for name, pts in fr.items():
                if not isinstance(pts, list):
                    raise ValueError(f"{where}.{m}.{name}: must be a list of front points")
                for i, p in enumerate(pts):
                    _exact(p, ("stack", "cpu_core_hours", "value"), f"{where}.{m}.{name}[{i}]")
                    _num(p["cpu_core_hours"], f"{where}.{m}.{name}[{i}].cpu_core_hours")
                    _num(p["value"], f"{where}.{m}.{name}[{i}].value")


def _validate_equal_cpu(obj: Mapping[str, Any]) -> None:
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


def _named(v: Any, where: str, extra: Sequence[str] = ()) -> None:
    """``{"stack": NAME, "objective": {mean, ci95}, *extra}`` or null."""
    if v is None:
        return
    _exact(v, ("stack", "objective", *extra), where)
    if not isinstance(v["stack"], str) or not v["stack"]:
        raise ValueError(f"{where}.stack: must be a stack name, got {v['stack']!r}")
    _mean_ci(v["objective"], f"{where}.objective")


def _mean_ci_or_null(v: Any, where: str, nullable: bool = False) -> None:
    if v is None and nullable:
        return
    _mean_ci(v, where)


def _validate_targets(obj: Mapping[str, Any], described: set) -> None:
    for where, t in _described(obj, "targets", described, "a target cell"):
        _exact(t, TARGET_KEYS, where)
        _named(t["oracle"], f"{where}.oracle")
        _named(t["best_baseline"], f"{where}.best_baseline", ("share",))
        if t["best_baseline"] is not None:
            _num(t["best_baseline"]["share"], f"{where}.best_baseline.share", nullable=True)
        _named(t["best_constant"], f"{where}.best_constant")
        _mean_ci_or_null(t["oracle_gain"], f"{where}.oracle_gain", nullable=True)
        if t["oracle_gain"] is not None and (t["oracle"] is None or t["best_constant"] is None):
            raise ValueError(f"{where}.oracle_gain: must be null without both the oracle and the best constant")
        for stack, v in _obj(t["share"], f"{where}.share").items():
            _num(v, f"{where}.share.{stack}", nullable=True)
            if v is not None and t["oracle_gain"] is None:
                raise ValueError(f"{where}.share.{stack}: a share needs the oracle's gain (oracle_gain is null)")
    loss_keys = (
        "scenario",
        "app",
        "trace",
        "baseline",
        "oracle_objective",
        "baseline_objective",
        "difference",
        "reason",
    )
    if not isinstance(obj["oracle_losses"], list):
        raise ValueError("summary.oracle_losses: must be a list")
    for i, x in enumerate(obj["oracle_losses"]):
        w = f"summary.oracle_losses[{i}]"
        _exact(x, loss_keys, w)
        if (x["scenario"], x["app"], x["trace"]) not in described:
            raise ValueError(f"{w}: a cell that summary.cells does not describe")
        for f in ("oracle_objective", "baseline_objective"):
            _mean_ci(x[f], f"{w}.{f}")
        _mean_ci_or_null(x["difference"], f"{w}.difference", nullable=True)
        if not isinstance(x["reason"], str) or not x["reason"]:
            raise ValueError(f"{w}.reason: must say why, got {x['reason']!r}")
        if not x["oracle_objective"]["mean"] > x["baseline_objective"]["mean"]:
            raise ValueError(f"{w}: the oracle does not lose there (objective {x['oracle_objective']['mean']!r})")


def _validate_training_seeds(obj: Mapping[str, Any], described: set) -> None:
    for where, stacks in _described(obj, "training_seeds", described):
        for stack, e in _obj(stacks, where).items():
            w = f"{where}.{stack}"
            _exact(e, ("training_seeds", *SPREAD_METRICS), w)
            ts = e["training_seeds"]
            if not isinstance(ts, list) or not ts or len(set(ts)) != len(ts):
                raise ValueError(f"{w}.training_seeds: must be a list of distinct training seeds, got {ts!r}")
            for t in ts:
                _int(t, f"{w}.training_seeds", 0)
            for m in SPREAD_METRICS:
                _exact(e[m], ("per_training_seed", "training", "evaluation"), f"{w}.{m}")
                per = e[m]["per_training_seed"]
                if not isinstance(per, list) or len(per) != len(ts):
                    raise ValueError(f"{w}.{m}.per_training_seed: must hold one mean per training seed")
                for x in per:
                    _num(x, f"{w}.{m}.per_training_seed")
                _mean_ci(e[m]["training"], f"{w}.{m}.training")
                _mean_ci(e[m]["evaluation"], f"{w}.{m}.evaluation")


def _validate_ablations(obj: Mapping[str, Any], described: set) -> None:
    for where, stacks in _described(obj, "ablations", described):
        for stack, v in _obj(stacks, where).items():
            w = f"{where}.{stack}"
            _exact(v, ("verdict", "difference", "why"), w)
            _num(v["difference"], f"{w}.difference")
            if v["verdict"] is None:
                if not isinstance(v["why"], str) or not v["why"]:
                    raise ValueError(f"{w}.why: a missing verdict must say why, got {v['why']!r}")
            elif v["verdict"] not in VERDICTS or v["why"] is not None:
                raise ValueError(
                    f"{w}.verdict: must be one of {list(VERDICTS)} (why null) or null, got {v['verdict']!r}"
                )
    if not isinstance(obj["skipped_training_seeds"], list):
        raise ValueError("summary.skipped_training_seeds: must be a list")
    for i, x in enumerate(obj["skipped_training_seeds"]):
        w = f"summary.skipped_training_seeds[{i}]"
        _exact(x, ("stack", "training_seed", "reason"), w)
        _int(x["training_seed"], f"{w}.training_seed", 1)
        if not isinstance(x["stack"], str) or not isinstance(x["reason"], str) or not x["reason"]:
            raise ValueError(f"{w}: stack and reason must be text")


def _validate_floor(floor: Any, where: str) -> None:
    """A cell's ``floor``: exactly :data:`FLOOR_KEYS`, each a mean ± ci95, latencies >= 0, the failed share 0..100."""
    _exact(floor, FLOOR_KEYS, where)
    for k, v in floor.items():
        _mean_ci(v, f"{where}.{k}")
        top = 100.0 if k == "failed_pct" else math.inf
        if not 0.0 <= v["mean"] <= top:
            raise ValueError(f"{where}.{k}.mean: must be in [0, {top:g}], got {v['mean']!r}")


def validate_summary(obj: Any) -> None:
    """Raise ValueError (naming the first offending field and its value) unless ``obj`` has exactly the
    summary.json shape of docs/benchmarks.md (schema 4), every number finite, every interval and counter >= 0 and
    every cell described in ``cells``. A summary of the first schema (``{"seeds", "results"}``, per app and
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
    _exact(obj["mode"], MODE_KEYS, "summary.mode")
    ts = obj["mode"]["training_seeds"]
    if not isinstance(ts, list) or 0 not in ts:
        raise ValueError(f"summary.mode.training_seeds: must be a list holding 0, got {ts!r}")
    if not isinstance(obj["mode"]["oracle"], str):
        raise ValueError(f"summary.mode.oracle: must be a stack name or '', got {obj['mode']['oracle']!r}")
    _int(obj["seeds"], "summary.seeds", 1)
    for name, s in _obj(obj["scenarios"], "summary.scenarios").items():
        _exact(s, ("family", "description"), f"summary.scenarios.{name}")
    described = set()
    for where, key, c in _walk(obj["cells"], "summary.cells", 3):
        _exact(c, CELL_KEYS if "floor" in c else CELL_KEYS[:-1], where)  # floor: absent in older summaries
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
        if c.get("floor") is not None:
            _validate_floor(c["floor"], f"{where}.floor")
    _validate_results(obj, described)
    _validate_util(obj)
    _validate_fronts(obj)
    _validate_equal_cpu(obj)
    _validate_targets(obj, described)
    _validate_training_seeds(obj, described)
    _validate_ablations(obj, described)
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
