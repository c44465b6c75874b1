"""The hand-written high-level rebalancer (:class:`RebalanceHeuristic`: bring chatty services together, take
load off hot nodes) and the greedy move selection (:func:`greedy_moves`) every planner shares.

:class:`PlanView` is the cluster as planned so far; :class:`Proposal` one candidate move; :func:`finite_scores`
and :func:`util_after_add` the checks both planners apply to a low-level policy's scores and a target node.
"""

from __future__ import annotations

import heapq
import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from policy.index import ClusterIndex, estimated_cpu_m
from policy.intent import Intent
from policy.lowlevel import PlacementPolicy, admission_mask, neighbor_weights
from policy.state import ClusterSnapshot, Move, NodeInfo, Plan, PodInfo, Resources

from .interface import (
    SYSTEM_CRITICAL_CLASSES,
    SYSTEM_CRITICAL_PRIORITY,
    MoveGate,
    default_intent,
    node_cpu_utilization,
    structurally_movable,
)

__all__ = [
    "RebalanceHeuristic",
    "PlanView",
    "Proposal",
    "greedy_moves",
    "planner_accepts_gate",
    "admissible_positions",
    "finite_scores",
    "util_after_add",
]


@dataclass(frozen=True, order=True)
class Proposal:
    """One candidate move: ``sort_key`` orders proposals (smallest first: the planners put ``-gain`` first)."""

    sort_key: tuple
    move: Move


@dataclass(frozen=True)
class RebalanceHeuristic:
    """A hand-written high-level policy: bring chatty services together, take load off hot nodes.

    **Locality.** For a movable pod of service *s* whose chatty neighbours (callers and callees with call
    rate ``>= min_pair_rps``, from :meth:`ServiceGraph.neighbor_weights`; an unknown rate counts
    ``default_rps``) have pods on other nodes, the candidate targets are the nodes hosting those neighbours'
    pods. A target must pass ``placement.filter`` and :func:`node_admits`, must stay below
    ``overload_threshold`` with the pod added (so a locality move never creates an overload), and must
    score, by ``placement.score`` under :attr:`intent`, strictly more than ``locality_margin`` points
    (scores are 0..10) above the pod's current node. ``gain`` = score(target) − score(current).

    **Overload.** A node is overloaded when its CPU utilisation (measured ``NodeInfo.usage`` when known, else
    the sum of requests, over allocatable) is above ``overload_threshold``. Its movable pods may move to a
    node that passes the same filters and stays *strictly below* the threshold with the pod added (the pod
    adds its measured use when known, else its CPU request); among those, the best ``placement.score`` wins.
    ``gain`` = 10 · min(pod CPU, excess CPU) / (allocatable · (1 − threshold)), capped at 10: relieving the
    whole band between the threshold and full is worth as much as the best locality move.

    **Selection.** Greedy by gain with re-evaluation (lazy greedy): after each accepted move the planner
    applies it to a virtual copy of the cluster and re-checks the next proposal there, so two pods of a pair
    never swap places and a node is not relieved twice. At most one move per pod, at most
    ``max_moves_per_service`` per service (replicas rebalance gradually), at most ``max_moves`` in all.
    Sorted by gain (descending), ties by pod key; an empty :class:`Plan` when nothing is worth it.

    Parameters (all finite):

    - ``overload_threshold``: CPU utilisation fraction, in (0, 1]; default 0.85 of allocatable;
    - ``locality_margin``: score points (0..10 scale) a target must beat the current node by, >= 0; default 1;
    - ``min_pair_rps``: call rate (requests/s, both directions summed) below which a pair is not chatty, >= 0;
    - ``default_rps``: rate assumed for a dependency with no measured rate, > 0; default 1;
    - ``max_moves_per_service``: >= 1; default 1;
    - ``max_moves``: >= 0, bounds the planning work and the plan; default 50;
    - ``intent``: the intent vector to score with and to pass down; ``None`` = :func:`default_intent`;
    - ``excluded_namespaces``, ``evict_local_storage_pods``: pods the descheduler's guards would always refuse
      (see :meth:`movable`) are not planned, so a move that can never happen does not shape the plan.

    Raises ``ValueError`` (naming the parameter and value) on construction when a parameter is out of range.
    """

    name: str = "rebalance-heuristic"
    overload_threshold: float = 0.85
    locality_margin: float = 1.0
    min_pair_rps: float = 0.0
    default_rps: float = 1.0
    max_moves_per_service: int = 1
    max_moves: int = 50
    intent: tuple[float, ...] | None = None
    excluded_namespaces: tuple[str, ...] = ("kube-system",)
    evict_local_storage_pods: bool = False

    def __post_init__(self) -> None:
        def bad(field: str, value: object, want: str) -> ValueError:
            return ValueError(f"RebalanceHeuristic.{field}: must be {want} (got {value!r})")

        if not (math.isfinite(self.overload_threshold) and 0.0 < self.overload_threshold <= 1.0):
            raise bad("overload_threshold", self.overload_threshold, "in (0, 1]")
        if not (math.isfinite(self.locality_margin) and self.locality_margin >= 0.0):
            raise bad("locality_margin", self.locality_margin, "a finite number >= 0")
        if not (math.isfinite(self.min_pair_rps) and self.min_pair_rps >= 0.0):
            raise bad("min_pair_rps", self.min_pair_rps, "a finite number >= 0")
        if not (math.isfinite(self.default_rps) and self.default_rps > 0.0):
            raise bad("default_rps", self.default_rps, "a finite number > 0")
        if self.max_moves_per_service < 1:
            raise bad("max_moves_per_service", self.max_moves_per_service, ">= 1")
        if self.max_moves < 0:
            raise bad("max_moves", self.max_moves, ">= 0")
        if self.intent is not None:
            if not all(math.isfinite(float(x)) for x in self.intent):
                raise bad("intent", self.intent, "finite numbers")
            object.__setattr__(self, "intent", tuple(float(x) for x in self.intent))
        object.__setattr__(self, "excluded_namespaces", tuple(self.excluded_namespaces))

    def movable(self, pod: PodInfo) -> bool:
        """Whether the planner considers ``pod`` at all: :func:`structurally_movable`, not system-critical
        (priority >= 2000000000 or a ``system-*-critical`` class), not in ``excluded_namespaces``, and without
        local storage unless ``evict_local_storage_pods``. PodDisruptionBudgets, caps and cooldown are left to
        the guards (they change from one eviction to the next)."""
        return (
            structurally_movable(pod)
            and pod.priority < SYSTEM_CRITICAL_PRIORITY
            and pod.priority_class_name not in SYSTEM_CRITICAL_CLASSES
            and pod.namespace not in self.excluded_namespaces
            and (self.evict_local_storage_pods or not pod.local_storage)
        )

    # ---- public -----------------------------------------------------------------------------------

    def resolved_intent(self) -> tuple[float, ...]:
        """:attr:`intent`, with missing trailing components filled from :data:`INTENT_SPEC`."""
        base = list(default_intent())
        if self.intent is not None:
            for i, v in enumerate(self.intent[: len(base)]):
                base[i] = float(v)
        return tuple(base)

    def plan(
        self,
        snapshot: ClusterSnapshot,
        index: ClusterIndex,
        placement: PlacementPolicy,
        *,
        gate: MoveGate | None = None,
    ) -> Plan:
        """Plan this cycle's moves (see the class docstring). Pure but for ``gate`` (the descheduler's guards
        and evictor, consulted before each move is accepted; see :func:`greedy_moves`).

        Complexity per cycle (P pods, N nodes, M moves, d = chatty neighbours per service, h = nodes hosting
        them): O(P · (d · N / 64 + h)) numpy work for the locality proposals (one per movable pod), O(1) per pod on
        an overloaded node (its target search, O(N), runs only when it reaches the top of the queue), and
        O(M · (N + S)) to update the planning view after each accepted move."""
        intent = self.resolved_intent()
        if self.max_moves == 0 or len(snapshot.nodes) < 2:
            return Plan(moves=(), replica_targets={}, intent=Intent(intent))
        pods = sorted(
            (p for p in snapshot.pods if self.movable(p) and p.node_name in index.node_pos), key=lambda p: p.key
        )
        moves = greedy_moves(
            pods,
            index,
            lambda key, view: self._propose(key, view, placement, intent),
            self.max_moves,
            self.max_moves_per_service,
            gate=gate,
            estimate=lambda key, view: self._estimate(key, view, placement, intent),
        )
        return Plan(moves=moves, replica_targets={}, intent=Intent(intent))

    # ---- internals --------------------------------------------------------------------------------

    def _propose(
        self, pod_key: str, view: PlanView, placement: PlacementPolicy, intent: tuple[float, ...]
    ) -> Proposal | None:
        """The best proposal for pod ``pod_key`` in ``view`` (the cluster as planned so far), or ``None``."""
        current = view.pods.get(pod_key)
        if current is None or current.node_name is None or current.node_name not in view.index.node_pos:
            return None
        best: Proposal | None = None
        for prop in (
            self._locality(current, view, placement, intent),
            self._overload(current, view, placement, intent),
        ):
            if prop is not None and (best is None or prop.sort_key < best.sort_key):
                best = prop
        return best

    def _estimate(
        self, pod_key: str, view: PlanView, placement: PlacementPolicy, intent: tuple[float, ...]
    ) -> tuple | None:
        """A lower bound of :meth:`_propose`'s ``sort_key``: the locality proposal's key (exact), or the overload
        key of a pod on an overloaded node (exact when some node can take the pod, which only the O(N) search
        tells; it runs when the pod reaches the top of the queue)."""
        current = view.pods.get(pod_key)
        if current is None or current.node_name is None or current.node_name not in view.index.node_pos:
            return None
        loc = self._locality(current, view, placement, intent)
        keys = [] if loc is None else [loc.sort_key]
        ovl = self._overload_key(current, view)
        if ovl is not None:
            keys.append(ovl[0])
        return min(keys) if keys else None

    def _overload_key(self, pod: PodInfo, view: PlanView) -> tuple[tuple, float] | None:
        """``(sort_key, gain)`` of an overload move of ``pod`` (if some node can take it), or ``None`` when its
        node is not overloaded or moving it relieves nothing."""
        index, util = view.index, view.util
        i = index.node_pos[pod.node_name]
        if not (util[i] > self.overload_threshold) or not math.isfinite(util[i]):
            return None
        alloc = float(index.alloc_cpu_m[i])
        excess_m = (util[i] - self.overload_threshold) * alloc
        pod_m = float(_pod_cpu_contribution(pod, index, i))
        if pod_m <= 0:
            return None  # moving it would not relieve anything
        band = max(1.0 - self.overload_threshold, 1e-9) * alloc
        gain = min(10.0, 10.0 * min(pod_m, excess_m) / band)
        return (-gain, 0, pod_m, pod.key), gain

    def _admissible(
        self, pod: PodInfo, candidates: Sequence[str], view: PlanView, placement: PlacementPolicy
    ) -> list[str]:
        """Candidates (other than the pod's node) that pass placement.filter and node_admits and stay strictly
        below the overload threshold with the pod added."""
        index = view.index
        pos = np.fromiter((index.node_pos.get(c, -1) for c in candidates), dtype=np.int64, count=len(candidates))
        keep = admissible_positions(pod, pos[pos >= 0], index, placement, self.overload_threshold)
        names = index.node_names
        return [names[i] for i in keep.tolist()]

    def _locality(
        self, pod: PodInfo, view: PlanView, placement: PlacementPolicy, intent: tuple[float, ...]
    ) -> Proposal | None:
        index = view.index
        weights = neighbor_weights(index.snapshot.graph, pod.service, self.default_rps)
        chatty = [s for s, w in sorted(weights.items()) if w > 0 and w >= self.min_pair_rps]
        here = index.node_pos[pod.node_name]
        mask = None
        for s in chatty:
            counts = index.service_nodes.get(s)
            if counts is not None:
                mask = counts > 0 if mask is None else mask | (counts > 0)
        if mask is None:
            return None
        mask[here] = False
        hosts = np.flatnonzero(mask)
        if not len(hosts):
            return None  # no chatty neighbour sits on another node
        keep = admissible_positions(pod, hosts, index, placement, self.overload_threshold)
        if not len(keep):
            return None
        names = index.node_names
        targets = [names[i] for i in keep.tolist()]
        scores = finite_scores(placement.score(pod, [pod.node_name, *targets], index, intent))
        cur = float(scores[0])
        if not math.isfinite(cur):
            return None  # the policy cannot rate where the pod is now: no basis for a move
        j = int(np.argmax(scores[1:]))  # first maximum: node order of the index breaks ties
        best = float(scores[1 + j])
        if not (best > cur + self.locality_margin):
            return None
        gain = best - cur
        return Proposal((-gain, 1, pod.key), Move(pod.key, pod.node_name, targets[j], "locality", gain))

    def _overload(
        self, pod: PodInfo, view: PlanView, placement: PlacementPolicy, intent: tuple[float, ...]
    ) -> Proposal | None:
        index = view.index
        ok = self._overload_key(pod, view)
        if ok is None:
            return None
        key, gain = ok
        targets = self._admissible(pod, index.node_names, view, placement)
        if not targets:
            return None
        scores = finite_scores(placement.score(pod, targets, index, intent))
        after = np.array([util_after_add(pod, index, index.node_pos[t]) for t in targets])
        # Best score, then the coolest node after the move, then node order.
        j = min(range(len(targets)), key=lambda k: (-scores[k], after[k], k))
        return Proposal(key, Move(pod.key, pod.node_name, targets[j], "overload", gain))


# ---- helpers ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanView:
    """The cluster as planned so far: its index, per-node CPU utilisation (``util``, (N,) float64) and lookups
    (``pods``: key → pod, ``nodes``: name → node).

    :meth:`of` builds the first view of a cycle (O(P + N)); :meth:`apply_move` derives the next one after an
    accepted move without re-reading the pods: the index's arrays are copied and changed at the two nodes
    concerned (O(N + S) numpy and dict copies, S services, plus an O(P) copy of the pod tuple at C speed), so
    a plan of M moves costs O(P + M · (N + S + P/100)) instead of M full rebuilds. The result is exactly
    ``PlanView.of(ClusterIndex.build(snapshot with the pod re-bound))`` (tested)."""

    index: ClusterIndex
    util: np.ndarray
    pods: dict[str, PodInfo]
    nodes: dict[str, NodeInfo]
    pod_pos: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    @staticmethod
    def of(index: ClusterIndex) -> PlanView:
        snap = index.snapshot
        return PlanView(
            index,
            node_cpu_utilization(index),
            {p.key: p for p in snap.pods},
            {n.name: n for n in snap.nodes},
            {p.key: i for i, p in enumerate(snap.pods)},
        )

    def apply_move(self, pod_key: str, to_node: str | None) -> PlanView:
        """The view with pod ``pod_key`` re-bound to ``to_node`` (``None`` or an unknown node: unbound); the
        measured node usage follows it (as :func:`_apply_move`). Raises ``KeyError`` for an unknown pod."""
        ix = self.index
        pod = self.pods[pod_key]
        snap = ix.snapshot
        src = pod.node_name
        moved_m = pod.usage.cpu_m if pod.usage is not None else pod.requests.cpu_m
        moved_mem = pod.usage.memory_bytes if pod.usage is not None else pod.requests.memory_bytes
        a = ix.node_pos.get(src) if src is not None else None
        t = ix.node_pos.get(to_node) if to_node is not None else None
        nodes = list(snap.nodes)
        node_map = dict(self.nodes)
        for i, sign in ((a, -1), (t, 1)):
            if i is None or nodes[i].usage is None:
                continue
            n = nodes[i]
            if sign < 0:
                u = Resources(max(0, n.usage.cpu_m - moved_m), max(0, n.usage.memory_bytes - moved_mem))
            else:
                u = n.usage + Resources(moved_m, moved_mem)
            nodes[i] = replace(n, usage=u)
            node_map[n.name] = nodes[i]
        moved = replace(pod, node_name=to_node)
        pods_list = list(snap.pods)
        pos = self.pod_pos.get(pod_key)
        if pos is None or pods_list[pos].key != pod_key:
            pos = next(k for k, p in enumerate(pods_list) if p.key == pod_key)
        pods_list[pos] = moved
        new_snap = replace(snap, nodes=tuple(nodes), pods=tuple(pods_list))
        req_cpu, req_mem, count = ix.req_cpu_m.copy(), ix.req_mem_bytes.copy(), ix.pod_count.copy()
        usage = ix.usage_cpu_m.copy()
        svc_nodes = dict(ix.service_nodes)
        svc_total = ix.service_total
        counted = not pod.terminating
        arr = svc_nodes.get(pod.service)
        if counted and arr is not None:
            arr = svc_nodes[pod.service] = arr.copy()
        if a is not None:
            if counted:
                req_cpu[a] -= pod.requests.cpu_m
                req_mem[a] -= pod.requests.memory_bytes
                count[a] -= 1
                if arr is not None:
                    arr[a] -= 1.0
            if not np.isnan(usage[a]):
                usage[a] = float(nodes[a].usage.cpu_m)
        if t is not None:
            if counted:
                req_cpu[t] += pod.requests.cpu_m
                req_mem[t] += pod.requests.memory_bytes
                count[t] += 1
                if arr is None:
                    arr = svc_nodes[pod.service] = np.zeros(len(ix.node_names))
                arr[t] += 1.0
            if not np.isnan(usage[t]):
                usage[t] = float(nodes[t].usage.cpu_m)
        if counted and (a is None) != (t is None):
            svc_total = dict(svc_total)
            svc_total[pod.service] = svc_total.get(pod.service, 0) + (1 if a is None else -1)
            if svc_total[pod.service] == 0 and a is not None:
                del svc_total[pod.service]
                svc_nodes.pop(pod.service, None)
        unmeasured = ix.unmeasured_estimated_cpu_m
        if unmeasured is not None and counted and pod.usage is None and a is not None:
            # it leaves the source's unmeasured estimate; on the target it counts in the usage above
            unmeasured = unmeasured.copy()
            unmeasured[a] -= estimated_cpu_m(pod)
        new_ix = replace(
            ix,
            snapshot=new_snap,
            req_cpu_m=req_cpu,
            req_mem_bytes=req_mem,
            usage_cpu_m=usage,
            pod_count=count,
            service_nodes=svc_nodes,
            service_total=svc_total,
            unmeasured_estimated_cpu_m=unmeasured,
        )
        pods = dict(self.pods)
        pods[pod_key] = moved
        return PlanView(new_ix, node_cpu_utilization(new_ix), pods, node_map, self.pod_pos)


def admissible_positions(
    pod: PodInfo, positions: np.ndarray, index: ClusterIndex, placement: PlacementPolicy, overload_threshold: float
) -> np.ndarray:
    """The node positions among ``positions`` (in order, the pod's own node dropped) where a planner may send
    ``pod``: :func:`policy.lowlevel.admission_mask` (what :func:`~policy.lowlevel.node_admits` and the resource
    fit allow), ``placement``'s filter (``filter_mask`` when it has one, else ``filter``), and CPU utilisation
    with the pod added strictly below ``overload_threshold`` (:func:`util_after_add`). Vectorised: O(len(positions))."""
    positions = np.asarray(positions, dtype=np.int64)
    own = index.node_pos.get(pod.node_name, -1) if pod.node_name is not None else -1
    positions = positions[positions != own]
    if not len(positions):
        return positions
    ok = admission_mask(pod, positions, index)
    fm = getattr(placement, "filter_mask", None)
    if getattr(placement, "filter_is_admission", False):
        pass  # its filter is exactly admission_mask: applied above
    elif fm is not None:
        ok &= np.asarray(fm(pod, positions, index), dtype=bool)
    else:
        names = index.node_names
        failed = placement.filter(pod, [names[i] for i in positions.tolist()], index)
        if failed:
            ok &= np.array([names[i] not in failed for i in positions.tolist()], dtype=bool)
    alloc = index.alloc_cpu_m[positions]
    usage = index.usage_cpu_m[positions]
    known = ~np.isnan(usage)
    base = np.where(known, usage, index.req_cpu_m[positions])
    add = np.where(known & (pod.usage is not None), float(pod.usage.cpu_m) if pod.usage is not None else 0.0, 0.0)
    add = np.where(known & (pod.usage is not None), add, float(pod.requests.cpu_m))
    with np.errstate(divide="ignore", invalid="ignore"):
        util = np.where(alloc > 0, (base + add) / np.where(alloc > 0, alloc, 1.0), np.inf)
    ok &= util < overload_threshold
    return positions[ok]


def finite_scores(scores) -> np.ndarray:
    """A placement policy's scores as float64, with NaN / inf (a misbehaving policy) ranked last."""
    arr = np.asarray(scores, dtype=np.float64).copy()
    arr[~np.isfinite(arr)] = -np.inf
    return arr


def _pod_cpu_contribution(pod: PodInfo, index: ClusterIndex, i: int) -> float:
    """CPU (m) the pod adds to node ``i``'s utilisation as :func:`node_cpu_utilization` measures it."""
    if not np.isnan(index.usage_cpu_m[i]) and pod.usage is not None:
        return float(pod.usage.cpu_m)
    return float(pod.requests.cpu_m)


def util_after_add(pod: PodInfo, index: ClusterIndex, i: int) -> float:
    """CPU utilisation (fraction of allocatable; ``inf`` without allocatable CPU) of node ``i`` with ``pod``
    added, as :func:`node_cpu_utilization` measures it."""
    alloc = float(index.alloc_cpu_m[i])
    if alloc <= 0:
        return math.inf
    base = index.req_cpu_m[i] if np.isnan(index.usage_cpu_m[i]) else index.usage_cpu_m[i]
    return float((base + _pod_cpu_contribution(pod, index, i)) / alloc)


def _apply_move(snapshot: ClusterSnapshot, pod: PodInfo, to_node: str | None) -> ClusterSnapshot:
    """The snapshot as it would be with ``pod`` re-bound to ``to_node`` (measured node usage follows it): the
    reference :meth:`PlanView.apply_move` is tested against."""
    src = pod.node_name
    moved_m = pod.usage.cpu_m if pod.usage is not None else pod.requests.cpu_m
    moved_mem = pod.usage.memory_bytes if pod.usage is not None else pod.requests.memory_bytes
    delta = Resources(moved_m, moved_mem)
    nodes = []
    for n in snapshot.nodes:
        if n.usage is not None and n.name == src:
            n = replace(
                n,
                usage=Resources(max(0, n.usage.cpu_m - delta.cpu_m), max(0, n.usage.memory_bytes - delta.memory_bytes)),
            )
        elif n.usage is not None and n.name == to_node:
            n = replace(n, usage=n.usage + delta)
        nodes.append(n)
    pods = tuple(replace(p, node_name=to_node) if p.key == pod.key else p for p in snapshot.pods)
    return replace(snapshot, nodes=tuple(nodes), pods=pods)


def planner_accepts_gate(planner: object) -> bool:
    """Whether ``planner.plan`` takes the keyword ``gate`` (a :class:`~policy.highlevel.MoveGate`)."""
    fn = getattr(planner, "plan", None)
    if fn is None:
        return False
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "gate" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def greedy_moves(
    pods: Sequence[PodInfo],
    index: ClusterIndex,
    propose: Callable[[str, PlanView], Proposal | None],
    max_moves: int,
    max_moves_per_service: int,
    *,
    gate: MoveGate | None = None,
    estimate: Callable[[str, PlanView], tuple | None] | None = None,
) -> tuple[Move, ...]:
    """Greedy move selection shared by :class:`RebalanceHeuristic` and :class:`policy.highlevel.HierarchicalPolicy`:
    every pod of ``pods`` gets a proposal on the current cluster (``propose(pod_key, view)``, ``None``: stays);
    the best (by ``sort_key``) is accepted, the cluster is updated as if it had moved (:meth:`PlanView.apply_move`),
    and proposals computed before that are re-evaluated before they can be accepted. At most one move per pod,
    ``max_moves_per_service`` per service and ``max_moves`` in all. Returns the moves by gain (descending),
    ties by pod key. Deterministic for the same inputs.

    ``estimate(pod_key, view)``: optional, a cheap lower bound of the pod's ``sort_key`` (``None``: no proposal)
    used for the first ordering instead of ``propose``; a popped pod is always re-proposed, and accepted only
    when its fresh key is the one it was queued with on the current cluster.

    ``gate``: the descheduler's guards (:class:`~policy.highlevel.MoveGate`). Pods it refuses (``may_move``) are
    not proposed; every move about to be accepted is ``admit``-ted: ``"reject"`` drops that pod and leaves its
    service's slot free for its next best pod, ``"stop"`` ends the selection. With a gate the moves come back in
    the order they were admitted.

    Complexity per call, for P pods, N nodes, S services and M accepted moves: one proposal per pod plus one per
    re-evaluation (each O(cost of ``propose``)), O(P log P) heap work and O(P + M · (N + S)) for the views.
    """
    service_of = {p.key: p.service for p in pods}
    view = PlanView.of(index)
    first = estimate if estimate is not None else (lambda key, v: _key(propose(key, v)))
    heap: list[tuple[tuple, int, str]] = []
    for p in pods:
        if gate is not None and not gate.may_move(p):
            continue
        key = first(p.key, view)
        if key is not None:
            heap.append((key, 0, p.key))
    heapq.heapify(heap)
    version = 0
    moves: list[Move] = []
    per_service: dict[str, int] = {}
    while heap and len(moves) < max_moves:
        if gate is not None and gate.exhausted:
            break
        key, ver, pod_key = heapq.heappop(heap)
        service = service_of[pod_key]
        if per_service.get(service, 0) >= max_moves_per_service:
            continue
        if gate is not None and not gate.may_move(view.pods[pod_key]):
            continue
        prop = propose(pod_key, view)
        if prop is None:
            continue
        if ver != version or prop.sort_key != key:  # queued before the last accepted move, or from an estimate
            heapq.heappush(heap, (prop.sort_key, version, pod_key))
            continue
        if gate is not None:
            verdict = gate.admit(prop.move)
            if verdict == "stop":
                break
            if verdict != "accept":
                continue  # blocked or failed: this pod stays; its service may still move another pod
        moves.append(prop.move)
        per_service[service] = per_service.get(service, 0) + 1
        view = view.apply_move(pod_key, prop.move.to_node)
        version += 1
    if gate is None:
        moves.sort(key=lambda m: (-m.gain, m.pod))
    return tuple(moves)


def _key(prop: Proposal | None) -> tuple | None:
    return None if prop is None else prop.sort_key
