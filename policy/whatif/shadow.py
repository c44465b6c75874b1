"""The shadow logs of a recording, summarised, and the extender's shadow decisions compared with the simulator's.

- :func:`extender_summary`: decisions by result, agreement with kube-scheduler (agree / (agree + disagree)), the
  score gap, the services disagreed on most, and the largest disagreements with their top contributions;
- :func:`descheduler_summary`: dry-run cycles, the moves, scale changes and resizes proposed, how many replacement
  pods would land where planned, the predicted effect on cross-node calls, and the guards that blocked moves;
- :func:`compare_with_simulator`: each scored shadow decision replayed through the simulator's copy of the placement
  policy (the same code the extender serves, :mod:`policy.lowlevel`) on the recorded cluster at the time of the
  decision (the step's objects, the pod's own spec, the step's call graph with its rates): the share of decisions
  where the simulator's best node is one of the extender's best. Disagreement means the live extender saw another
  cluster or graph than the recording (rates, the intent, embeddings, a different bundle), and so bounds how far the
  replay's placements can be trusted.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from policy.bundle import DEFAULT_BUNDLES, SERVED_PLACEMENT_BUNDLE
from policy.index import ClusterIndex
from policy.lowlevel import PlacementPolicy, TopologyHeuristic, load_placement
from policy.observe import ObjectError, parse_pod, snapshot_from_objects
from policy.recording import Recording

__all__ = ["extender_summary", "descheduler_summary", "compare_with_simulator", "policy_for"]


def _r(v: float | None, d: int = 3) -> float | None:
    return None if v is None or not math.isfinite(v) else round(float(v), d)


def extender_summary(records: Sequence[dict[str, Any]], top: int = 5) -> dict[str, Any]:
    """The extender's decision records summarised (module docstring)."""
    results = Counter(str(r.get("result")) for r in records)
    scored = [r for r in records if r.get("result") in ("agree", "disagree")]
    agree = sum(1 for r in scored if r["result"] == "agree")
    gaps = [float(r["score_gap"]) for r in scored if isinstance(r.get("score_gap"), (int, float))]
    by_service: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in scored:
        by_service[str(r.get("service"))][r["result"] == "disagree"] += 1
    worst = sorted((r for r in scored if r["result"] == "disagree"), key=lambda r: -float(r.get("score_gap") or 0))
    examples = []
    for r in worst[:top]:
        ex = r.get("explanation") or {}
        examples.append(
            {
                "pod": r.get("pod"),
                "bound_node": r.get("bound_node"),
                "our_choice": r.get("our_choice"),
                "score_gap": r.get("score_gap"),
                "why_ours": [t["name"] + f" {t['points']:+.2f}" for t in ((ex.get("best") or {}).get("top") or [])],
                "why_not_bound": [
                    t["name"] + f" {t['points']:+.2f}" for t in ((ex.get("bound") or {}).get("top") or [])
                ],
            }
        )
    return {
        "decisions": len(records),
        "results": dict(sorted(results.items())),
        "scored": len(scored),
        "agreement_pct": _r(100.0 * agree / len(scored)) if scored else None,
        "score_gap_mean": _r(float(np.mean(gaps))) if gaps else None,
        "score_gap_p95": _r(float(np.percentile(gaps, 95))) if gaps else None,
        "by_service": {s: {"agree": a, "disagree": d} for s, (a, d) in sorted(by_service.items())},
        "largest_disagreements": examples,
        "policy": sorted({f"{r.get('policy', '')} {r.get('policy_version', '')}".strip() for r in records}),
    }


def descheduler_summary(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The descheduler's shadow records (one per dry-run cycle) summarised (module docstring)."""
    moves = [m for r in records for m in r.get("moves") or ()]
    blocked = Counter(g["guard"] for r in records for b in r.get("blocked") or () for g in b.get("blocked_by") or ())
    scales = [s for r in records for s in r.get("scaling") or () if s.get("outcome") == "dry_run"]
    resizes = [s for r in records for s in r.get("resizes") or () if s.get("outcome") == "dry_run"]
    effects = [r.get("effect") or {} for r in records]
    before = [e.get("cross_node_call_pct_before") for e in effects if e.get("cross_node_call_pct_before") is not None]
    after = [e.get("cross_node_call_pct_after") for e in effects if e.get("cross_node_call_pct_after") is not None]
    return {
        "cycles": len(records),
        "moves": len(moves),
        "moves_landing_as_planned": sum(1 for m in moves if m.get("lands_as_planned")),
        "moves_by_reason": dict(Counter(str(m.get("reason")) for m in moves)),
        "scale_changes": [
            {k: s.get(k) for k in ("workload", "replicas_before", "replicas_after", "pod_cpu_util_after")}
            for s in scales
        ],
        "resizes": len(resizes),
        "blocked_by_guard": dict(blocked.most_common()),
        "cross_node_call_pct_before": _r(float(np.mean(before))) if before else None,
        "cross_node_call_pct_after": _r(float(np.mean(after))) if after else None,
        "example_moves": [
            {
                k: m.get(k)
                for k in ("pod", "from_node", "predicted_node", "why", "colocation_before", "colocation_after")
            }
            for m in moves[:5]
        ],
    }


def policy_for(records: Sequence[dict[str, Any]]) -> tuple[PlacementPolicy, str]:
    """The placement policy the simulator scores the decisions with: the one the records name (the heuristic, or the
    learned placement a ``null`` bundle serves, :data:`policy.bundle.SERVED_PLACEMENT_BUNDLE`, or the committed
    single bundle of training seed 0 when the records name its version alone), and a note when the records' bundle
    version differs from the one scored with."""
    names = {str(r.get("policy", "")) for r in records}
    if "topology-heuristic" in names and "learned" not in names:
        return TopologyHeuristic(), ""
    versions = {str(r.get("policy_version", "")) for r in records if r.get("policy") == "learned"} - {""}
    p = load_placement(SERVED_PLACEMENT_BUNDLE)
    if versions and versions != {p.version}:
        single = load_placement(DEFAULT_BUNDLES / "hrl-scheduler" / "low")
        if versions == {single.version}:
            p = single
    note = ""
    if versions and versions != {p.version}:
        note = f"the extender served {', '.join(sorted(versions))}; the simulator scores with {p.version}"
    return p, note


def compare_with_simulator(
    rec: Recording, records: Sequence[dict[str, Any]], policy: PlacementPolicy
) -> dict[str, Any]:
    """Each scored shadow decision against the simulator's (module docstring): ``compared``, ``same_choice_pct``,
    ``skipped`` (with why), per service."""
    m = rec.manifest
    cache: dict[int, tuple[ClusterIndex, dict[str, Any]]] = {}

    def at(k: int) -> tuple[ClusterIndex, dict[str, Any]]:
        if k not in cache:
            objs = rec.objects(k)
            pods = {f"{(o.get('metadata') or {}).get('namespace')}/{(o.get('metadata') or {}).get('name')}": o
                    for o in objs if o.get("kind") == "Pod"}  # fmt: skip
            snap = snapshot_from_objects(objs, graph=rec.graph(k))
            cache.clear()
            cache[k] = (ClusterIndex.build(snap), pods)
        return cache[k]

    same = 0
    compared = 0
    skipped: Counter[str] = Counter()
    per: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in sorted(records, key=lambda r: float(r.get("decided_at_s") or 0)):
        if r.get("result") not in ("agree", "disagree") or not r.get("candidates"):
            continue
        t = float(r.get("decided_at_s") or 0)
        k = min(max(int((t - m.started_at_s) // m.step_s), 0), m.steps - 1)
        index, pods = at(k)
        obj = pods.get(str(r.get("pod"))) or at(min(k + 1, m.steps - 1))[1].get(str(r.get("pod")))
        if obj is None:
            skipped["pod not in the recording"] += 1
            continue
        try:
            pod = replace(parse_pod(obj), node_name=None)
        except ObjectError:
            skipped["pod not readable"] += 1
            continue
        cands = [c["node"] for c in r["candidates"] if c.get("node") in index.node_pos]
        if not cands:
            skipped["candidates not in the recording"] += 1
            continue
        try:
            s = np.asarray(policy.score(pod, cands, index, r.get("intent")), dtype=np.float64)
        except ValueError as exc:
            skipped[f"not scored: {exc}"[:80]] += 1
            continue
        best = {c for c, v in zip(cands, s) if v >= s.max() - 1e-9}
        ok = bool(best & set(r.get("our_choice") or ()))
        compared += 1
        same += ok
        per[str(r.get("service"))][0 if ok else 1] += 1
    return {
        "compared": compared,
        "same_choice_pct": _r(100.0 * same / compared) if compared else None,
        "skipped": dict(skipped),
        "by_service": {s: {"same": a, "different": b} for s, (a, b) in sorted(per.items())},
    }
