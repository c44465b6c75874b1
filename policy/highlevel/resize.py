"""Fine-grained resource allocation, the low level's vertical action: in-place pod resizes (Kubernetes in-place
pod resize, the ``pods/resize`` subresource, KEP-1287, beta in 1.33, GA in 1.35) that carry out the intent's
capacity targets faster than a new replica can start (numpy-free, served by the descheduler and run by the
simulator).

Per running, controller-owned pod of a managed Deployment of service *s* with a CPU request (its template's
request ``r0``, its current request ``r``, its measured use ``u``), with ``t`` = the intent's capacity target
for *s* (``state.capacity_targets``; :attr:`ResizePlanner.default_target` without one) and ``k`` = its CPU limit
over its request where :attr:`ResizePlanner.basis` is ``limit`` and the limit is above the request (a Burstable
pod, held against the limit it would throttle at), else 1 (held against its request, as an HPA counts)::

    want  = u / t / k                                    (the request at which the pod would run at its target)
    burst   when want > r · (1 + min_change):  r' = min(want, r · (1 + max_step), r0 · max_burst, r + node room)
    release when want < r · (1 − min_change) and r > r0:  r' = max(want, r0, r · (1 − max_step))

so a pod grows in place while its node has room (``node room`` = allocatable − requested, so the scheduler's
accounting stays valid) and shrinks back to its template's request, never below: scaling out and in stays the
horizontal autoscaler's job (:class:`~policy.highlevel.IntentAutoscaler`, which works on the template's request),
and a resized pod is what a new replica will not be. Limits keep their ratio to the request (none stays none).

At most ``max_resizes`` per cycle, the largest relative changes first; a pod is resized at most once per
``cooldown_s`` (its last resize time in ``state``). Deterministic for the same inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from policy.state import ClusterSnapshot, PodInfo, Resize, WorkloadInfo

from .autoscale import pods_of_workload
from .planner_state import HrlState

__all__ = ["ResizePlanner", "RESIZE_BASES"]

#: What a pod's use is held against (:attr:`ResizePlanner.basis`).
RESIZE_BASES = ("request", "limit")


@dataclass(frozen=True)
class ResizePlanner:
    """Plans in-place resizes (module docstring). Ranges: 0 < ``default_target`` <= 1; 0 < ``min_change`` <
    ``max_step`` <= 1; ``max_burst`` >= 1; ``max_resizes`` >= 0; ``cooldown_s`` >= 0. ``workloads``: the
    Deployments (``namespace/name``) it may resize (None: every Deployment with a CPU request); ``basis``
    (:data:`RESIZE_BASES`): ``limit`` or ``request`` (module docstring). ValueError naming the field otherwise."""

    default_target: float = 0.6
    min_change: float = 0.1
    max_step: float = 0.5
    max_burst: float = 2.0
    max_resizes: int = 10
    cooldown_s: float = 120.0
    workloads: tuple[str, ...] | None = None
    basis: str = "limit"

    def __post_init__(self) -> None:
        if self.basis not in RESIZE_BASES:
            raise ValueError(f"ResizePlanner.basis: expected one of {', '.join(RESIZE_BASES)}, got {self.basis!r}")
        if not (math.isfinite(self.default_target) and 0 < self.default_target <= 1):
            raise ValueError(f"ResizePlanner.default_target: must be in (0, 1], got {self.default_target!r}")
        if not (0 < self.min_change < self.max_step <= 1):
            raise ValueError(
                f"ResizePlanner: need 0 < min_change < max_step <= 1, got {self.min_change!r}, {self.max_step!r}"
            )
        if not (math.isfinite(self.max_burst) and self.max_burst >= 1):
            raise ValueError(f"ResizePlanner.max_burst: must be >= 1, got {self.max_burst!r}")
        if self.max_resizes < 0:
            raise ValueError(f"ResizePlanner.max_resizes: must be >= 0, got {self.max_resizes!r}")
        if not (math.isfinite(self.cooldown_s) and self.cooldown_s >= 0):
            raise ValueError(f"ResizePlanner.cooldown_s: must be >= 0, got {self.cooldown_s!r}")
        if self.workloads is not None:
            object.__setattr__(self, "workloads", tuple(self.workloads))

    def _managed(self, snapshot: ClusterSnapshot) -> list[WorkloadInfo]:
        allowed = None if self.workloads is None else set(self.workloads)
        return [
            w
            for w in sorted(snapshot.workloads, key=lambda w: (w.namespace, w.name))
            if w.kind == "Deployment"
            and w.pod_requests.cpu_m > 0
            and (allowed is None or f"{w.namespace}/{w.name}" in allowed)
        ]

    def plan(self, snapshot: ClusterSnapshot, state: HrlState) -> tuple[Resize, ...]:
        """This cycle's resizes (module docstring). Records the planned pods' times in ``state.autoscaler``
        (``"resized"``: pod → seconds), which the cooldown reads."""
        if self.max_resizes == 0:
            return ()
        now = float(snapshot.taken_at_s)
        last: dict[str, float] = dict(state.autoscaler.get("resized") or {})
        free = {n.name: float(n.allocatable.cpu_m) for n in snapshot.nodes}
        for p in snapshot.pods:
            if p.node_name in free and not p.terminating:
                free[p.node_name] -= float(p.requests.cpu_m)
        proposals: list[tuple[float, str, Resize]] = []
        for w in self._managed(snapshot):
            target = float(state.capacity_targets.get(w.service, self.default_target))
            r0 = float(w.pod_requests.cpu_m)
            for p in pods_of_workload(snapshot, w):
                rz = self._one(p, r0, target, free, last, now)
                if rz is not None:
                    change = abs(rz.cpu_request_m - rz.from_cpu_request_m) / rz.from_cpu_request_m
                    proposals.append((-change, p.key, rz))
        proposals.sort(key=lambda x: (x[0], x[1]))
        out = []
        for _k, key, rz in proposals:
            if len(out) >= self.max_resizes:
                break
            pod_node = next((p.node_name for p in snapshot.pods if p.key == key), None)
            delta = rz.cpu_request_m - rz.from_cpu_request_m
            if pod_node is not None and delta > 0:
                if free.get(pod_node, 0.0) < delta:  # an earlier resize took the room
                    continue
                free[pod_node] -= delta
            out.append(rz)
            last[key] = now
        state.autoscaler["resized"] = {k: v for k, v in last.items() if v > now - 10 * max(self.cooldown_s, 1.0)}
        return tuple(out)

    def _one(
        self, p: PodInfo, r0: float, target: float, free: dict[str, float], last: dict[str, float], now: float
    ) -> Resize | None:
        if (
            p.node_name is None
            or p.terminating
            or p.phase != "Running"
            or p.usage is None
            or p.owner is None
            or p.requests.cpu_m <= 0
            or (p.key in last and now - last[p.key] < self.cooldown_s)
        ):
            return None
        r = float(p.requests.cpu_m)
        # basis "limit": a pod whose CPU limit is above its request is held against its limit (it can burst to it:
        # only there does it throttle), the request following at the same ratio; otherwise against its request
        k = float(p.limits.cpu_m) / r if self.basis == "limit" and p.limits.cpu_m > r else 1.0
        want = float(p.usage.cpu_m) / target / k
        if want > r * (1 + self.min_change):
            room = max(free.get(p.node_name, 0.0), 0.0)
            new = min(want, r * (1 + self.max_step), r0 * self.max_burst, r + room)
            reason = "burst"
        elif want < r * (1 - self.min_change) and r > r0:
            new = max(want, r0, r * (1 - self.max_step))
            reason = "release"
        else:
            return None
        new_m = int(math.floor(new)) if reason == "burst" else int(math.ceil(new))
        if abs(new_m - r) < r * self.min_change / 2 or new_m <= 0:
            return None
        return Resize(p.key, int(r), new_m, reason, gain=abs(new_m - r) / r)
