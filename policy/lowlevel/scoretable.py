"""The node-score table the kube-scheduler plugin scores from (``scheduler-plugin/``): :func:`build_score_table`.

For one snapshot index and intent, a placement policy's score of every node for a pod of each (service, requests)
row, split into what the policy alone can compute (the row's ``base``, the nodes' ``cpu_used_m``) and the per-pod
**load term** the plugin applies with kube-scheduler's own, newer count of each node's requested CPU
(:func:`apply_load_term`; the formula is written out in ``policy/cache/proto/embeddings.proto``, message
``ScoreTable``)::

    since_m(n) = max(0, requested CPU of n as the scheduler sees it − requested_cpu_m[n])
    frac(n)    = (cpu_used_m[n] + since_m(n) + cpu_m) / max(alloc_cpu_m[n], 1)       (float32 when frac_float32)
    over(n)    = clip((frac(n) − from_frac) / (1 − from_frac), 0, 1)
    score(n)   = scale · clip(base[n] · (1 − weight · over(n)), 0, cap)

With ``since_m = 0`` (the scheduler counts what the snapshot counts) this is **bit for bit** the policy's own
``score`` (tests/unit/test_score_table.py checks it on random clusters, tests/unit/test_plugin_parity.py checks the
plugin's Go code against the extender's replies): for :class:`~policy.lowlevel.TopologyHeuristic` the base is
``locality_weight · locality`` and the term its load penalty (``scale`` 10, ``cap`` 1, ``weight`` the balance
weight); for :class:`~policy.lowlevel.LearnedPlacement` the base is the network's score with the intent adjustment
and the term its saturation guard (``scale`` 1, ``cap`` 10, ``weight`` 1, or 0 without the guard). What the term
adds is the pods kube-scheduler placed since the snapshot (Koordinator's LoadAware estimates the same way), which the
extender only learns from its watch a debounce later.

A policy served this way implements :class:`TablePolicy` (``load_term``, ``score_parts``, ``base_reads_requests``).
A policy whose base does not read the pod's requests (the heuristic: only the load term does) gets one row per
service of the call graph, for any requests (``cpu_m = memory_bytes =`` :data:`ANY_REQUESTS`): every pod of a known
service is scored at once, as the extender would. Otherwise (the learned network reads the requests among its
features) the rows are those of :func:`table_keys`, and a pod of another shape scores neutral until the producer's
watch has seen it pending.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from policy.cache import LoadTerm, ScoreRow, ScoreTable
from policy.index import ClusterIndex
from policy.intent import Intent
from policy.state import PodInfo, Resources

from .precomputed import ScoreKey, score_key

__all__ = [
    "ANY_REQUESTS",
    "TablePolicy",
    "apply_load_term",
    "scheduler_requested_cpu_m",
    "table_keys",
    "build_score_table",
]

#: ``cpu_m`` and ``memory_bytes`` of a row that serves every pod of its service (the base reads no requests).
ANY_REQUESTS = -1


@runtime_checkable
class TablePolicy(Protocol):
    """A placement policy whose ``score`` splits into a base and the load term (see the module docstring).
    ``base_reads_requests``: whether the base depends on the pod's requests (else one row per service serves every
    pod of it)."""

    name: str
    base_reads_requests: bool

    def load_term(self, index: ClusterIndex) -> tuple[LoadTerm, np.ndarray]:
        """The term's constants and ``cpu_used_m`` (N,) float64: each node's CPU in use before the pod, as the
        policy counts it, millicores."""
        ...

    def score_parts(
        self, pod: PodInfo, candidates: Sequence[str], index: ClusterIndex, intent: Sequence[float] | None = None
    ) -> tuple[np.ndarray, float]:
        """``(base (C,) float64, weight)`` of an unbound ``pod`` on ``candidates``; raises like ``score``."""
        ...


def apply_load_term(
    base: np.ndarray,
    weight: float,
    term: LoadTerm,
    alloc_cpu_m: np.ndarray,
    cpu_used_m: np.ndarray,
    cpu_m: float,
    since_m: np.ndarray | float = 0.0,
) -> np.ndarray:
    """(C,) float64 scores in [0, scale · cap] from the row's ``base`` (C,) and the nodes' ``alloc_cpu_m`` and
    ``cpu_used_m`` (C,), for a pod requesting ``cpu_m`` millicores, ``since_m`` (C,) or scalar millicores placed since
    the snapshot (>= 0). The plugin's arithmetic (scheduler-plugin/pkg/scoretable, ``Table.RawScore``), in the same
    order of operations."""
    since = np.maximum(np.asarray(since_m, dtype=np.float64), 0.0)
    frac = (np.asarray(cpu_used_m, dtype=np.float64) + since + float(cpu_m)) / np.maximum(alloc_cpu_m, 1.0)
    if term.frac_float32:
        frac = frac.astype(np.float32).astype(np.float64)
    over = np.clip((frac - term.from_frac) / (1.0 - term.from_frac), 0.0, 1.0)
    return term.scale * np.clip(np.asarray(base, dtype=np.float64) * (1.0 - weight * over), 0.0, term.cap)


def scheduler_requested_cpu_m(index: ClusterIndex) -> np.ndarray:
    """(N,) float64 requested CPU per node as kube-scheduler's cache counts it (its ``NodeInfo.Requested``): every pod
    bound to the node that has not terminated (phase other than Succeeded and Failed), terminating ones included,
    millicores. (:attr:`ClusterIndex.req_cpu_m` leaves terminating pods out: the policies count what stays.)"""
    # From the index's sum (bound, not terminating): take out its finished pods, add the terminating pods still
    # counted. The few pods where the two counts differ are found in one pass; the sums are of whole millicores, so
    # the result is the direct sum's bit for bit.
    out = np.array(index.req_cpu_m, dtype=np.float64, copy=True)
    pos = index.node_pos
    for p in [p for p in index.snapshot.pods if p.terminating == (p.phase not in _FINISHED)]:
        i = pos.get(p.node_name) if p.node_name is not None else None
        if i is not None:
            out[i] += p.requests.cpu_m if p.terminating else -p.requests.cpu_m
    return out


_FINISHED = frozenset(("Succeeded", "Failed"))


def table_keys(index: ClusterIndex, max_keys: int) -> list[ScoreKey]:
    """The rows a table holds for ``index``, at most ``max_keys``: the keys of the pending pods (unbound, not
    terminating, of a service of the call graph: the scheduler's queue as the snapshot sees it), then those of the
    service's running pods, most frequent first (the requests its next replicas will most likely have)."""
    graph = index.snapshot.graph.services
    pending: dict[ScoreKey, None] = {}
    others: Counter[ScoreKey] = Counter()
    for p in index.snapshot.pods:
        if p.terminating or p.service not in graph or p.phase in ("Succeeded", "Failed"):
            continue
        k = score_key(p)
        if p.node_name is None:
            pending[k] = None
        else:
            others[k] += 1
    out = list(pending)
    out += [k for k, _n in others.most_common() if k not in pending]
    return out[: max(int(max_keys), 0)]


def build_score_table(
    policy: TablePolicy,
    index: ClusterIndex,
    intent: Sequence[float] | None,
    keys: Sequence[ScoreKey],
    *,
    colocation: Mapping[str, float] | None = None,
    usable: Callable[[str], bool] | None = None,
    on_error: Callable[[ScoreKey, Exception], None] | None = None,
) -> ScoreTable:
    """The :class:`~policy.cache.ScoreTable` of ``policy`` for ``index`` and ``intent`` (each service's locality
    weight scaled by its ``colocation`` priority, :meth:`policy.intent.Intent.for_service`, as the extender does), one
    row per key of ``keys`` whose service is in the call graph and ``usable`` (default: every one; the extender's
    embedding check); for a policy whose base reads no requests, one row per such service of the graph instead, for
    any requests (``keys`` unused). A key whose ``score_parts`` raises (``on_error(key, exc)`` is told) or is not
    finite gets no row: the plugin then scores that pod neutral, as the extender answers it. The table is stamped
    generation 1 by no producer, computed at 0 of a snapshot of age 0: the producer stamps its own with
    ``dataclasses.replace`` (:class:`extender.publisher.ScoreTablePublisher`). Raises ``TypeError`` for a policy that
    is not a :class:`TablePolicy`."""
    if not isinstance(policy, TablePolicy):
        raise TypeError(
            f"policy {getattr(policy, 'name', type(policy).__name__)!r} cannot be served by the plugin "
            "(it has no load_term / score_parts)"
        )
    term, used = policy.load_term(index)
    services = index.snapshot.graph.services
    if not policy.base_reads_requests:
        keys = [(s, ANY_REQUESTS, ANY_REQUESTS) for s in sorted(services)]
    plan = Intent(tuple(intent or ()), colocation_priority=colocation) if colocation else None
    rows = []
    for key in keys:
        svc, cpu_m, mem = key
        if svc not in services or (usable is not None and not usable(svc)):
            continue
        req = Resources(max(cpu_m, 0), max(mem, 0))
        pod = PodInfo(name="hrl-score-template", namespace="", service=svc, requests=req)
        it = plan.for_service(svc) if plan is not None else intent
        try:
            base, weight = policy.score_parts(pod, index.node_names, index, it)
            base = np.asarray(base, dtype=np.float64)
            if base.shape != (len(index.node_names),):
                raise ValueError(f"score_parts returned shape {base.shape} for {len(index.node_names)} nodes")
        except Exception as exc:  # noqa: BLE001 - see the docstring
            if on_error is not None:
                on_error(key, exc)
            continue
        if not (np.all(np.isfinite(base)) and math.isfinite(weight)):
            continue
        base = base.copy()
        base.setflags(write=False)
        rows.append(ScoreRow(svc, int(cpu_m), int(mem), float(weight), base))
    return ScoreTable(
        generation=1,
        producer="",
        policy=f"{policy.name} {getattr(policy, 'version', '') or ''}".strip(),
        computed_at_s=0.0,
        snapshot_age_s=0.0,
        nodes=tuple(index.node_names),
        alloc_cpu_m=np.asarray(index.alloc_cpu_m, dtype=np.float64),
        cpu_used_m=np.asarray(used, dtype=np.float64),
        requested_cpu_m=scheduler_requested_cpu_m(index),
        load_term=term,
        rows=tuple(rows),
    )
