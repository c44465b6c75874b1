"""The pods of an unreachable node, replaced sooner than the taint manager would.

When a node stops reporting, the node lifecycle controller (k8s.io/kubernetes pkg/controller/nodelifecycle) sets
its ``Ready`` condition to Unknown after ``--node-monitor-grace-period`` and taints it
``node.kubernetes.io/unreachable`` (``node.kubernetes.io/not-ready`` when the kubelet reports NotReady) with effects
NoSchedule and NoExecute, stamping the NoExecute taint's ``timeAdded``. The taint manager (pkg/controller/
tainteviction) deletes each pod ``tolerationSeconds`` after that (300 s: what the DefaultTolerationSeconds
admission plugin gives every pod). Until then the pods serve nothing (the endpoints controller took them out of
their Services) and their ReplicaSets create no replacement, so a service whose pods all sat there is down for
five minutes.

Each cycle (:func:`node_loss_moves`), the descheduler evicts those pods early, through the Eviction API: the pod
becomes terminating (the kubelet that would confirm is gone), the ReplicaSet controller, which counts only active
pods (``controller.FilterActivePods``), creates its replacement at once, and kube-scheduler puts it on a Ready node
(the NoSchedule taint keeps it off the lost one). Fail closed:

- a node counts as lost only while it carries such a NoExecute taint with a ``timeAdded`` at least
  ``nodeLoss.afterSeconds`` old (none without ``timeAdded``: since when is unknown), and kube-scheduler keeps new
  pods off it: a lost-node NoSchedule taint or ``spec.unschedulable`` (the controller adds the NoSchedule taint from
  another queue than the NoExecute one; in between, a replacement could land back on the lost node);
- nothing is evicted while more than ``nodeLoss.maxLostFraction`` of the nodes look lost (not Ready, or tainted
  so, however recently): that looks like the control plane cut off, not the nodes down (the node lifecycle
  controller stops its own evictions then: ``--unhealthy-zone-threshold``, ``--large-cluster-size-threshold``);
- only pods a ReplicaSet controls (a StatefulSet re-creates a pod only once the old one is gone, so an early
  eviction gains nothing there; a DaemonSet's pod belongs to its node), and that tolerate the taint for a finite
  time no longer than ``nodeLoss.maxTolerationSeconds`` (a pod that asked to wait longer is left to wait);
- then every guard of an eviction but the rebalancing caps, the cooldown and the loop holds
  (:data:`NODE_LOSS_GUARDS`, on the re-read pod, owner and PodDisruptionBudgets: an unready pod goes while the
  budget's healthy pods are at least its desired count, and a budget below it refuses, as the Eviction API does
  under its default ``unhealthyPodEvictionPolicy: IfHealthyBudget``; pods with local storage stay unless
  ``nodeLoss.evictLocalStoragePods`` (default: the top-level ``evictLocalStoragePods``) says otherwise, and
  system-critical pods stay);
- at most ``nodeLoss.maxPerCycle`` per cycle, the pods of services left with no serving pod first.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from policy.state import ClusterSnapshot, Move, NodeInfo, PodInfo, noexecute_toleration_s

from .config import NodeLossConfig
from .guards import GUARD_NAMES

__all__ = [
    "LOST_NODE_TAINTS",
    "NODE_LOSS_GUARDS",
    "NODE_LOSS_SKIPPED_GUARDS",
    "LostNode",
    "NodeLossPlan",
    "lost_nodes",
    "node_loss_moves",
]

#: The taints the node lifecycle controller puts on a node that stopped reporting or reports NotReady, each with the
#: effects NoSchedule and NoExecute (the key follows the Ready condition: Unknown unreachable, False not-ready).
LOST_NODE_TAINTS: tuple[str, ...] = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")

#: The guards a node-loss eviction skips: the caps, the cooldown and the loop holds ration rebalancing disruptions
#: (these pods serve nothing), and a replacement needs no target the feasibility guard could judge.
NODE_LOSS_SKIPPED_GUARDS: tuple[str, ...] = (
    "cap_node",
    "cap_namespace",
    "cap_total",
    "cooldown",
    "loop_hold",
    "infeasible",
)
#: The guards (:data:`descheduler.guards.GUARD_NAMES`, in their order) a node-loss eviction passes.
NODE_LOSS_GUARDS: tuple[str, ...] = tuple(g for g in GUARD_NAMES if g not in NODE_LOSS_SKIPPED_GUARDS)


@dataclass(frozen=True, slots=True)
class LostNode:
    """Node ``name`` has carried NoExecute taint ``taint`` since ``since_s`` (its ``timeAdded``, unix s)."""

    name: str
    taint: str
    since_s: float


@dataclass(frozen=True)
class NodeLossPlan:
    """One cycle's node-loss evictions: ``lost`` (nodes lost for at least ``afterSeconds``), ``moves`` (one per pod
    to evict, in order, ``to_node`` None, reason ``node-lost``), ``held`` (a one-line reason nothing is evicted
    although nodes are lost, e.g. too many lost; ``""`` otherwise), ``skipped`` (pods on lost nodes left alone, by
    reason: ``not_replicaset``, ``tolerates``, ``max_per_cycle``, and ``node_open``: on a node tainted lost for
    ``afterSeconds`` but still open to new pods, so not lost yet)."""

    lost: tuple[LostNode, ...] = ()
    moves: tuple[Move, ...] = ()
    held: str = ""
    skipped: Mapping[str, int] = field(default_factory=dict)


def _closed(node: NodeInfo) -> bool:
    """Whether kube-scheduler keeps new pods off ``node``: a lost-node NoSchedule taint (either key: the controller
    swaps them as the Ready condition moves between False and Unknown) or ``spec.unschedulable``."""
    return node.unschedulable or any(t.effect == "NoSchedule" and t.key in LOST_NODE_TAINTS for t in node.taints)


def _lost_taint(node: NodeInfo) -> tuple[str, float] | None:
    """The oldest lost-node NoExecute taint with a ``timeAdded`` (key, time), or None."""
    found = [
        (t.time_added_s, t.key)
        for t in node.taints
        if t.effect == "NoExecute" and t.key in LOST_NODE_TAINTS and t.time_added_s is not None
    ]
    if not found:
        return None
    since, key = min(found)
    return key, float(since)


def lost_nodes(snapshot: ClusterSnapshot, now_s: float, after_s: float) -> tuple[LostNode, ...]:
    """The nodes of ``snapshot`` tainted lost (:data:`LOST_NODE_TAINTS`, NoExecute, with ``timeAdded``) for at least
    ``after_s`` seconds at ``now_s`` (unix s) and closed to new pods (a lost-node NoSchedule taint or cordoned), in
    node order."""
    return tuple(x for x, closed in _tainted_nodes(snapshot, now_s, after_s) if closed)


def _tainted_nodes(snapshot: ClusterSnapshot, now_s: float, after_s: float) -> list[tuple[LostNode, bool]]:
    """The nodes tainted lost for at least ``after_s`` seconds at ``now_s``, each with whether it is closed to new
    pods (:func:`_closed`), in node order."""
    out = []
    for n in snapshot.nodes:
        t = _lost_taint(n)
        if t is not None and now_s - t[1] >= after_s:
            out.append((LostNode(n.name, t[0], t[1]), _closed(n)))
    return out


def _unreachable(node: NodeInfo) -> bool:
    """Whether ``node`` looks lost now, however briefly: not Ready, or tainted with a lost-node NoExecute taint."""
    return not node.ready or any(t.effect == "NoExecute" and t.key in LOST_NODE_TAINTS for t in node.taints)


def node_loss_moves(
    snapshot: ClusterSnapshot, now_s: float, cfg: NodeLossConfig, excluded_namespaces: Collection[str] = ()
) -> NodeLossPlan:
    """This cycle's node-loss evictions (the module docstring's rules before the guards). Pods of services with no
    serving pod on a node that is not lost come first, then by node and pod name. ``excluded_namespaces`` are not
    even proposed."""
    if not cfg.enabled:
        return NodeLossPlan()
    tainted = _tainted_nodes(snapshot, now_s, cfg.after_seconds)
    lost = tuple(x for x, closed in tainted if closed)
    # a node tainted lost but still open to new pods waits for its NoSchedule taint: a replacement could land there
    open_nodes = {x.name for x, closed in tainted if not closed}
    waiting = sum(
        1
        for p in snapshot.pods
        if p.node_name in open_nodes and not p.terminating and p.namespace not in excluded_namespaces
    )
    if not lost:
        return NodeLossPlan(skipped={"node_open": waiting} if waiting else {})
    n_nodes = max(1, len(snapshot.nodes))
    # every node that looks lost counts, however recently: the node lifecycle controller taints a partition's
    # nodes one by one (--node-eviction-rate), so their timeAdded spread out
    n_lost = sum(1 for n in snapshot.nodes if _unreachable(n))
    if n_lost / n_nodes > cfg.max_lost_fraction:
        held = (
            f"{n_lost} of {len(snapshot.nodes)} nodes not Ready or tainted unreachable / not-ready, more than "
            f"nodeLoss.maxLostFraction {cfg.max_lost_fraction:g}: the control plane may be cut off, nothing evicted"
        )
        return NodeLossPlan(lost, (), held, {})
    by_name = {x.name: x for x in lost}
    skipped: Counter[str] = Counter({"node_open": waiting} if waiting else {})
    serving: Counter[tuple[str, str]] = Counter(
        (p.namespace, p.service)
        for p in snapshot.pods
        if p.node_name is not None and p.node_name not in by_name and not p.terminating and p.ready is not False
    )
    cands: list[tuple[int, str, str, PodInfo]] = []
    for p in snapshot.pods:
        node = by_name.get(p.node_name or "")
        if node is None or p.terminating or p.namespace in excluded_namespaces:
            continue
        if p.owner is None or p.owner.kind != "ReplicaSet":
            skipped["not_replicaset"] += 1
            continue
        tol = noexecute_toleration_s(p, node.taint)
        if tol is None or tol > cfg.max_toleration_seconds:
            skipped["tolerates"] += 1
            continue
        down = serving[(p.namespace, p.service)] == 0
        cands.append((0 if down else 1, node.name, p.key, p))
    cands.sort(key=lambda c: c[:3])
    if len(cands) > cfg.max_per_cycle:
        skipped["max_per_cycle"] += len(cands) - cfg.max_per_cycle
        cands = cands[: cfg.max_per_cycle]
    moves = tuple(Move(p.key, node, None, "node-lost", 0.0) for _d, node, _k, p in cands)
    return NodeLossPlan(lost, moves, "", dict(sorted(skipped.items())))
