"""Cluster events a scenario schedules during a run: a node failure and a node drain.

**Node failure** (:class:`NodeFailure`) at minute ``t`` (the start of that minute), as Kubernetes handles an
unreachable node (k8s.io/kubernetes pkg/controller/nodelifecycle, pkg/controller/tainteviction):

1. the node stops at once: requests in flight on its pods are lost, and every request routed to its pods
   fails until the endpoints controller removes them, i.e. until the node lifecycle controller marks the node
   ``NotReady`` / ``Unknown`` after ``node_monitor_grace_s`` (kube-controller-manager
   ``--node-monitor-grace-period``: 50 s since v1.32, kubernetes/kubernetes#121793) and sets the pods'
   ``Ready`` condition to False. Lost requests: ``Σ_pods rate_p × grace`` (each refused visit fails its user
   request; retries are ignored, an upper bound) plus the pods' in-flight requests (Little's law, as for an
   eviction);
2. the node gets the taints ``node.kubernetes.io/unreachable:NoSchedule`` and ``:NoExecute``: kube-scheduler
   places nothing there any more;
3. the taint manager deletes each pod ``tolerationSeconds`` after the NoExecute taint (the pod's own
   toleration of ``node.kubernetes.io/unreachable``: 300 s, added to every pod by the
   DefaultTolerationSeconds admission plugin; a pod without the toleration goes at once); the ReplicaSet
   controller creates replacements, which kube-scheduler (the stack's placement) puts on other nodes, Ready
   after the start-up delay;
4. with ``recover_after_min`` the node comes back (Ready, untainted, empty) that many minutes later.

**Drain** (:class:`NodeDrain`) at minute ``t``: ``kubectl drain`` = cordon (``spec.unschedulable: true``) then
one eviction per pod through the Eviction API (PodDisruptionBudgets respected: a refused eviction is retried
every minute, as ``kubectl drain`` retries on 429, for at most ``timeout_min``); each evicted pod loses its
in-flight requests and is replaced by its ReplicaSet and placed elsewhere. With ``uncordon_after_min`` the
node is uncordoned that many minutes after the drain. Drain evictions are reported as ``drain_evictions``,
not in the stack's ``evictions`` (the stack did not ask for them).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NODE_MONITOR_GRACE_S", "NodeFailure", "NodeDrain", "NodeEvent"]

#: kube-controller-manager ``--node-monitor-grace-period`` default since Kubernetes v1.32 (was 40 s).
NODE_MONITOR_GRACE_S = 50.0


@dataclass(frozen=True)
class NodeFailure:
    """Node ``node`` (name) fails at the start of minute ``at_min``; see the module docstring."""

    node: str
    at_min: int
    recover_after_min: int | None = None
    node_monitor_grace_s: float = NODE_MONITOR_GRACE_S

    def __post_init__(self) -> None:
        if self.at_min < 0:
            raise ValueError(f"events: nodeFailure.atMin must be >= 0, got {self.at_min}")
        if self.recover_after_min is not None and self.recover_after_min < 1:
            raise ValueError(f"events: nodeFailure.recoverAfterMin must be >= 1, got {self.recover_after_min}")
        if not 0 <= self.node_monitor_grace_s <= 600:
            raise ValueError(f"events: nodeMonitorGraceSeconds must be in [0, 600], got {self.node_monitor_grace_s}")


@dataclass(frozen=True)
class NodeDrain:
    """Node ``node`` is drained at the start of minute ``at_min``; see the module docstring."""

    node: str
    at_min: int
    uncordon_after_min: int | None = None
    timeout_min: int = 10

    def __post_init__(self) -> None:
        if self.at_min < 0:
            raise ValueError(f"events: drain.atMin must be >= 0, got {self.at_min}")
        if self.uncordon_after_min is not None and self.uncordon_after_min < 1:
            raise ValueError(f"events: drain.uncordonAfterMin must be >= 1, got {self.uncordon_after_min}")
        if self.timeout_min < 1:
            raise ValueError(f"events: drain.timeoutMin must be >= 1, got {self.timeout_min}")


NodeEvent = NodeFailure | NodeDrain
