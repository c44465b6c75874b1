"""Replica targets for the hierarchy: the :class:`ReplicaAutoscaler` interface, the documented stand-in
(:class:`UtilizationTargetAutoscaler`: the HPA rule made proactive by a forecast) and the DRPC students
(:class:`DrpcReplicaAutoscaler`, with the saturation shield and scale-down stabilisation), loaded from a bundle by
:func:`load_learned_autoscaler`, and the executor of the learned high level's capacity targets
(:class:`IntentAutoscaler`)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from policy.bundle import BundleError, PolicyBundle, located, require_bundle
from policy.state import ClusterSnapshot, PodInfo, WorkloadInfo

from .drpc import SPECS, DrpcAutoscaler, DrpcState
from .forecast import Forecaster, TrendForecaster, forecast_factor
from .planner_state import HrlState

#: The key of :class:`IntentAutoscaler`'s entry services' arrival history in ``HrlState.autoscaler``.
ENTRY_RATES_KEY = "entry_rates"

#: The served :attr:`IntentAutoscaler.limit_target`, chosen on training episodes by ``hrl-policy train pessimism --knob
#: limit_target`` (BENCHMARKS.md, section ``policy-changes``: 0, 0.2 and 0.3 on 300 episodes, 0.2 against 0 on a fresh
#: draw of 600; cheaper in most episodes, never dearer on their mean).
LIMIT_TARGET = 0.2

#: The fewest replicas :attr:`IntentAutoscaler.limit_target` plans a Deployment down to where its request-based target
#: asks at least as many: a lost node or a step of the load then still meets a second pod.
LIMIT_TARGET_MIN_REPLICAS = 2

#: How long (seconds) a container termination of one of its pods (an OOM kill, a crash: the kubelet's
#: ``lastState.terminated.finishedAt``) holds :attr:`IntentAutoscaler.limit_target` off for a Deployment: the kubelet's
#: crash back-off resets after as long without one.
LIMIT_TARGET_QUIET_S = 600.0

__all__ = [
    "ReplicaAutoscaler",
    "UtilizationTargetAutoscaler",
    "pods_of_workload",
    "load_learned_autoscaler",
    "DrpcReplicaAutoscaler",
    "IntentAutoscaler",
]


_POSTINGS: list[tuple[tuple, dict]] = []


def _postings(snapshot: ClusterSnapshot) -> dict:
    """Positions of the snapshot's pods by ``(namespace,)`` and ``(namespace, label, value)``, built once per pod
    tuple (O(P)) so that selecting a workload's pods costs O(its pods) instead of O(P)."""
    pods = snapshot.pods
    for key, table in _POSTINGS:
        if key is pods:
            return table
    table: dict = {}
    for i, p in enumerate(pods):
        table.setdefault((p.namespace,), []).append(i)
        for k, v in p.labels.items():
            table.setdefault((p.namespace, k, v), []).append(i)
    _POSTINGS.insert(0, (pods, table))
    del _POSTINGS[2:]
    return table


def pods_of_workload(snapshot: ClusterSnapshot, w: WorkloadInfo) -> list[PodInfo]:
    """The non-terminating pods of workload ``w``, in snapshot order: same namespace, labels matched by its
    selector (an empty selector matches none here, unlike a PodDisruptionBudget's). O(pods of the namespace
    carrying its first label) after an O(P) index built once per snapshot."""
    sel = w.selector
    if not sel.match_labels and not sel.match_expressions:
        return []
    table = _postings(snapshot)
    if sel.match_labels:
        cands = min(
            (table.get((w.namespace, k, v), ()) for k, v in sel.match_labels.items()),
            key=len,
        )
    else:
        cands = table.get((w.namespace,), ())
    pods = snapshot.pods
    return [pods[i] for i in cands if not pods[i].terminating and sel.matches(pods[i].labels)]


# ---- (a) replica targets ---------------------------------------------------------------------------------


@runtime_checkable
class ReplicaAutoscaler(Protocol):
    """What :class:`HierarchicalPolicy` needs from an autoscaler: ``replica_targets(snapshot, state)`` →
    ``{"namespace/name": replicas >= 0}`` for the Deployments it has an opinion on (absent: no opinion).
    ``state`` is the policy's :class:`HrlState` (rate history in ``rates_rps``; ``state.autoscaler`` is the
    autoscaler's own JSON slot, persisted across CronJob runs). Implementations: the DRPC students
    (``policy.highlevel.DrpcAutoscaler``), :class:`UtilizationTargetAutoscaler` (stand-in)."""

    @property
    def name(self) -> str: ...

    def replica_targets(self, snapshot: ClusterSnapshot, state: HrlState) -> dict[str, int]: ...


@dataclass(frozen=True)
class UtilizationTargetAutoscaler:
    """The stand-in autoscaler (used until a DRPC bundle exists, and in tests): the HPA rule on measured CPU,
    made proactive by the forecast (Kubernetes HPA algorithm, k8s.io/kubernetes
    pkg/controller/podautoscaler/replica_calculator.go, simplified)::

        used_m   = Σ measured CPU of the workload's bound pods (pods without a measurement count 0)
        factor   = forecast_factor(inbound rate of the workload's service)      in [0.5, 2], 1 without rates
        ratio    = used_m · factor / (target_utilization · replicas · cpu_request_m)
        desired  = replicas                                  if |ratio − 1| <= tolerance
                   ceil(used_m · factor / (target_utilization · cpu_request_m))   otherwise
        target   = clip(max(desired, recommendations of the last stabilization_s s), min_replicas, max_replicas)

    (the max over the stabilisation window only holds scale-downs back, as the HPA's default 300 s
    scale-down stabilisation does; recommendations are kept in ``state.recommendations``).

    Only Deployments with a CPU request whose pods carry measured use are scaled (``workloads`` restricts
    them further to ``namespace/name`` keys; ``None`` = all); a workload without any measurement gets no
    target (no opinion). Parameters: ``target_utilization`` in (0, 1]; ``tolerance`` >= 0; ``min_replicas``
    >= 0; ``max_replicas`` >= ``min_replicas``; ``stabilization_s`` >= 0. ValueError naming the field otherwise.
    """

    name: str = "utilization-target"
    target_utilization: float = 0.6
    tolerance: float = 0.1
    min_replicas: int = 1
    max_replicas: int = 10
    stabilization_s: float = 300.0
    workloads: tuple[str, ...] | None = None
    forecaster: Forecaster | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.target_utilization) and 0.0 < self.target_utilization <= 1.0):
            raise ValueError(
                f"UtilizationTargetAutoscaler.target_utilization: must be in (0, 1] (got {self.target_utilization!r})"
            )
        if not (math.isfinite(self.tolerance) and self.tolerance >= 0):
            raise ValueError(f"UtilizationTargetAutoscaler.tolerance: must be >= 0 (got {self.tolerance!r})")
        if self.min_replicas < 0 or self.max_replicas < self.min_replicas:
            raise ValueError(
                f"UtilizationTargetAutoscaler: need 0 <= min_replicas <= max_replicas "
                f"(got {self.min_replicas!r}, {self.max_replicas!r})"
            )
        if not (math.isfinite(self.stabilization_s) and self.stabilization_s >= 0):
            raise ValueError(
                f"UtilizationTargetAutoscaler.stabilization_s: must be >= 0 (got {self.stabilization_s!r})"
            )
        if self.workloads is not None:
            object.__setattr__(self, "workloads", tuple(self.workloads))

    def replica_targets(self, snapshot: ClusterSnapshot, state: HrlState) -> dict[str, int]:
        now = snapshot.taken_at_s
        allowed = None if self.workloads is None else set(self.workloads)
        out: dict[str, int] = {}
        for w in sorted(snapshot.workloads, key=lambda w: (w.namespace, w.name)):
            key = f"{w.namespace}/{w.name}"
            if w.kind != "Deployment" or w.pod_requests.cpu_m <= 0 or (allowed is not None and key not in allowed):
                continue
            pods = [p for p in pods_of_workload(snapshot, w) if p.node_name is not None]
            measured = [p for p in pods if p.usage is not None]
            if not measured:
                continue
            used_m = float(sum(p.usage.cpu_m for p in measured))
            factor = forecast_factor(state.rates(w.service), self.forecaster)
            cur = max(int(w.replicas), 0)
            per_pod = self.target_utilization * w.pod_requests.cpu_m
            ratio = used_m * factor / (per_pod * cur) if cur > 0 else math.inf
            desired = cur if abs(ratio - 1.0) <= self.tolerance else int(math.ceil(used_m * factor / per_pod))
            window = [r for r in state.recommendations.get(key, []) if r[0] > now - self.stabilization_s]
            window.append([float(now), float(desired)])
            state.recommendations[key] = window
            stabilized = max(int(r[1]) for r in window)
            out[key] = int(np.clip(stabilized, self.min_replicas, self.max_replicas))
        return out


class DrpcReplicaAutoscaler:
    """:class:`ReplicaAutoscaler` over the DRPC students (:class:`policy.highlevel.DrpcAutoscaler`): their own state
    (:class:`policy.highlevel.DrpcState`: per-minute rate history for the GRU predictor, last scale times) lives in
    ``HrlState.autoscaler["drpc"]``, so it is persisted with the planner's state. ``workloads``
    (``namespace/name``; ``None``: every Deployment with a CPU request) are the Deployments it manages;
    ``signals`` (service → :class:`policy.highlevel.ServiceSignals`, e.g. a service mesh's or the simulator's
    per-service metrics) may be set before each period; ``None``: the snapshot's call graph only.

    The students' targets pass two guardrails, in the spirit of the HPA's ``behavior`` (they are part of
    hrl-scheduler's planner, not of DRPC: the ``drpc`` baseline stack runs the students bare):

    - **saturation shield**: a Deployment whose measured pods use at least ``saturation`` of their CPU limit
      (of the request where no limit is set), or whose service refuses at least ``refused_frac`` of its
      arrivals (from ``signals``), gets at least the HPA formula's replicas at ``shield_target`` of the request:
      ``max(student, ceil(used_m / (shield_target * request_m)), current + 1)``. A student that never saw an
      application can otherwise hold a saturated service at its replicas (seen on held-out apps in
      ``make bench``: the CPU it uses is capped by its limit, so the student's utilisation target can make a
      saturated service look adequately provisioned);
    - **scale-down stabilisation**: the target is the maximum of the (shielded) targets of the last
      ``stabilization_s`` seconds (HPA's default 300 s), so a target that flips minute to minute does not
      churn pods (kept in ``HrlState.recommendations``).

    ``shield_enabled=False`` turns the shield off (the ``hrl-no-shield`` ablation); ``guardrail_counts`` counts,
    per run, the targets each guardrail changed (``saturation_shield``, ``stabilization``).

    Ranges: 0 < ``saturation`` <= 1, 0 < ``shield_target`` <= 1, 0 < ``refused_frac`` <= 1,
    ``stabilization_s`` >= 0; ValueError naming the parameter otherwise.
    """

    name = "drpc"

    def __init__(
        self,
        drpc: Any,
        workloads: Iterable[str] | None = None,
        *,
        saturation: float = 0.9,
        shield_target: float = 0.8,
        refused_frac: float = 0.01,
        stabilization_s: float = 300.0,
        shield_enabled: bool = True,
    ):
        for f, v in (("saturation", saturation), ("shield_target", shield_target), ("refused_frac", refused_frac)):
            if not (isinstance(v, (int, float)) and math.isfinite(v) and 0 < v <= 1):
                raise ValueError(f"DrpcReplicaAutoscaler.{f}: must be in (0, 1], got {v!r}")
        if not (isinstance(stabilization_s, (int, float)) and math.isfinite(stabilization_s) and stabilization_s >= 0):
            raise ValueError(f"DrpcReplicaAutoscaler.stabilization_s: must be >= 0, got {stabilization_s!r}")
        self.drpc = drpc
        self.workloads = None if workloads is None else tuple(workloads)
        self.signals: Mapping[str, Any] | None = None
        self.saturation = float(saturation)
        self.shield_target = float(shield_target)
        self.refused_frac = float(refused_frac)
        self.stabilization_s = float(stabilization_s)
        self.shield_enabled = bool(shield_enabled)
        self.guardrail_counts: Counter = Counter()

    def shield(self, snapshot: ClusterSnapshot, w: WorkloadInfo, target: int) -> int:
        """The saturation shield for workload ``w`` (see the class docstring): ``target`` or more."""
        pods = [p for p in pods_of_workload(snapshot, w) if p.node_name is not None and p.usage is not None]
        cur = max(int(w.replicas), 0)
        req = float(w.pod_requests.cpu_m)
        if not pods or req <= 0:
            return target
        used = float(sum(p.usage.cpu_m for p in pods))
        cap = float(sum(p.limits.cpu_m if p.limits.cpu_m > 0 else p.requests.cpu_m for p in pods))
        sig = (self.signals or {}).get(w.service)
        refused = getattr(sig, "refused_frac", None)
        saturated = cap > 0 and used >= self.saturation * cap
        if saturated or (refused is not None and refused >= self.refused_frac):
            hpa = int(math.ceil(used / (self.shield_target * req) - 1e-9))
            return max(int(target), hpa, cur + 1)
        return int(target)

    def replica_targets(self, snapshot: ClusterSnapshot, state: HrlState) -> dict[str, int]:

        ds = DrpcState.from_dict(state.autoscaler.get("drpc"))
        by_key = {
            f"{w.namespace}/{w.name}": w
            for w in snapshot.workloads
            if w.kind == "Deployment" and w.pod_requests.cpu_m > 0
        }
        keys = None if self.workloads is None else [k for k in self.workloads if k in by_key]
        targets = self.drpc.replica_targets(snapshot, ds, self.signals, keys)
        state.autoscaler["drpc"] = ds.to_dict()
        now = float(snapshot.taken_at_s)
        hi = int(getattr(self.drpc.mapping, "max_replicas", 10**6))
        out: dict[str, int] = {}
        for k, v in targets.items():
            w = by_key.get(k)
            t = int(v)
            if w is not None and self.shield_enabled:
                t = min(self.shield(snapshot, w, int(v)), max(hi, int(v)))
                if t > int(v):
                    self.guardrail_counts["saturation_shield"] += 1
            window = [r for r in state.recommendations.get(k, []) if r[0] > now - self.stabilization_s]
            window.append([now, float(t)])
            state.recommendations[k] = window
            out[k] = int(max(r[1] for r in window))
            if out[k] > t:
                self.guardrail_counts["stabilization"] += 1
        return out


def load_learned_autoscaler(
    path: str | Path,
    workloads: Iterable[str] | None = None,
    *,
    slo_p95_ms: float | None = None,
    stabilization_s: float = 300.0,
    shield: bool = True,
) -> ReplicaAutoscaler:
    """The DRPC student autoscaler of bundle directory ``path`` (``path/student`` + ``path/predictor``, as
    :meth:`policy.highlevel.DrpcAutoscaler.load` reads them; the observation layout, with the graph encoder's
    embeddings or without, is the one the student's bundle declares), wrapped in
    :class:`DrpcReplicaAutoscaler` for ``workloads``. ``slo_p95_ms``: the application's p95 SLO (a feature of the
    students; ``None``: unknown); ``stabilization_s``: the scale-down stabilisation window of
    :class:`DrpcReplicaAutoscaler`; ``shield``: its saturation shield on (default) or off. Raises
    :class:`BundleMissing` when ``path/student`` has no bundle,
    ``ValueError`` when ``policy.highlevel.drpc`` cannot be imported, and :class:`policy.bundle.BundleError`
    naming expected and found when the bundle matches neither layout (or anything else is wrong with it: one line
    naming the directory and the field). A ``path`` that is itself a bundle (``.../student``) is reported with a
    hint to name its parent."""
    p = Path(path)
    hint = ""
    if (p / "manifest.json").is_file() and not (p / "student").exists():
        hint = f"{p} is a single bundle, not a directory holding student/ and predictor/"
        if (p.parent / "student" / "manifest.json").is_file():
            hint += f": name its parent, {p.parent}"
    elif not (p / "student").exists() and (p / "high" / "student" / "manifest.json").is_file():
        hint = f"{p} holds a stack's bundles, not student/ and predictor/: name its high/ directory, {p / 'high'}"
    require_bundle(p / "student", "autoscaler (DRPC students)", hint)
    # the observation layout the student declares: with the encoder's embeddings ("hrl") or without ("drpc")
    local = PolicyBundle.load(p / "student", level="high").feature_spec.get("local")
    spec = next((k for k, v in SPECS.items() if v == local), None)
    if spec is None:
        spec = "hrl" if local is not None and any(n.startswith("emb_") for n in local.names) else "drpc"
    try:
        return DrpcReplicaAutoscaler(
            DrpcAutoscaler.load(p, spec=spec, slo_p95_ms=slo_p95_ms),
            workloads,
            stabilization_s=stabilization_s,
            shield_enabled=shield,
        )
    except BundleError as exc:
        raise located(exc, p) from None


def _time_series(rows: Any) -> list[list[float]]:
    """``[[t_s, value >= 0], ...]`` of a JSON document as floats, oldest first; ``[]`` for anything else (a
    hand-edited state file: a wrong type, a non-finite or out-of-range number, times out of order)."""
    if not isinstance(rows, list):
        return []
    out: list[list[float]] = []
    try:
        for r in rows:
            if not (isinstance(r, list) and len(r) == 2 and all(type(x) in (int, float) for x in r)):
                return []
            t, v = float(r[0]), float(r[1])
            if not (math.isfinite(t) and math.isfinite(v) and v >= 0) or (out and t <= out[-1][0]):
                return []
            out.append([t, v])
    except OverflowError:  # an integer too large for a float
        return []
    return out


@dataclass
class IntentAutoscaler:
    """Replica targets that carry out the high level's capacity targets (the low level of the hierarchy for
    horizontal scaling; :class:`~policy.highlevel.intent.Intent`). Per managed Deployment of service *s*, each cycle::

        u        = state.capacity_targets[s]          (the intent; default_target without one)
        demand_m = Σ measured CPU of its bound pods / (1 − refused share of s)      (refused: from ``signals``)
        peak     = max forecast rate over the predictor's horizon / rate now     in [forecast_min, 2]; 1 without rates
                   (the service's inbound call-graph rates; with ``entry_forecast``, a service without any: its
                   measured arrivals, ``signals[s].rps``)
        capacity = request_m + burst · room_m
        room_m   = mean over the measured pods of min(limit_m − request_m, their node's unused CPU)
        per_pod  = max(u · capacity, limit_target · (request_m + room_m))   (u · capacity: lt 0, no room, not calm)
        need     = demand_m · peak / per_pod; where limit_target acts at least min(demand_m · peak / (u · capacity), 2)
        desired  = ceil(need)                                       unless within ``tolerance`` of the current
        target   = clip(max(desired, recommendations of the last stabilization_s s),  min_replicas, max_replicas)

    (HPA's formula on a forecast demand, Kubernetes pkg/controller/podautoscaler/replica_calculator.go, with a
    per-service target set from above). ``burst`` (0..1, default 0: the request, as an HPA counts utilization) is the
    share of a Burstable pod's room above its request that counts as capacity: an HPA user sets a target utilization
    above 100 % for such pods for the same reason (a pod may use CPU up to its limit while its node has room). The
    room is the headroom to the template's limit, at most the node's unused CPU (allocatable − measured use; none
    where the node's use is unknown), so a busy node gives none and the rule is HPA's again; a Guaranteed pod
    (limit = request) or one without a limit is unaffected. ``forecast_min`` (0.5..1, default 0.5) is the lowest
    forecast factor: below 1 a predicted fall lowers the target before the rate falls; at 1 the forecast only adds
    capacity to what the measured demand needs (the rule of predictive scaling beside dynamic scaling in AWS EC2
    Auto Scaling, which takes the larger of the two capacities). The scale-down stabilisation
    window holds a target from flapping between periods (recommendations in ``state.recommendations``).

    An entry service (one no other service calls: users' requests reach it) has no inbound call-graph edge, so no
    rate history in ``state`` and a forecast factor of 1. ``entry_forecast`` (default False) forecasts it from its
    measured arrivals instead: each call records ``signals[s].rps`` of every managed service without a recorded
    call-graph rate in ``state.autoscaler["entry_rates"]`` (service → ``[[t_s, requests/s], ...]``, the last
    ``history_len``, a record at the same time replacing the last; a service whose arrivals are unknown this call
    loses its history, and so does one whose last record is more than three of its periods old or in the future, so
    a forecast never spans a gap).

    ``limit_target`` (0..1, default :data:`LIMIT_TARGET`; 0: off) plans each pod with room above its request for at
    least that share of the CPU it can reach (its request plus its room): where a template's limit is far above its
    request (Burstable pods with a limit ten times the request, which an HPA user would serve with a target
    utilization of 300 %) a pod is planned to run above its request, with a headroom of ``1 / limit_target`` to what
    it can reach (never less than its capacity target leaves) for a step of its load; where that is less than the
    capacity target's own share it changes nothing, nor for a pod without room (a Guaranteed pod, no limit, a full
    node). The room of each pod is its node's whole unused CPU (at most its headroom to the limit), even where
    several pods share a node: an optimistic reading when they all rise at once. It never takes a Deployment below
    :data:`LIMIT_TARGET_MIN_REPLICAS` (2) where the request alone asks for 2 or more: fewer, fuller pods otherwise
    lose a larger share of the capacity with a node or meet a step with one pod. It acts only on a **calm** service
    (:meth:`calm`): none of its pods' containers terminated in the last :data:`LIMIT_TARGET_QUIET_S` (a restart
    count without a known time counts as recent), it refuses none of its arrivals, and every node of the cluster
    is Ready and schedulable; elsewhere the service is planned as without it (counted as ``limit_target_held`` in
    ``guardrail_counts`` wherever its pods have room, whether or not the rule would have acted). A restart or a lost
    node is where a fuller pod turns into failed requests. A rising rate does not hold it: a test of a 20 % rise
    over the last three points cost more on the training episodes than it saved (BENCHMARKS.md, section
    ``policy-changes``).

    Guardrail (a last resort, counted in ``guardrail_counts``): the **saturation shield** raises a Deployment whose
    measured pods use at least ``saturation`` of their CPU limit (the request without one) or whose service
    refuses at least ``refused_frac`` of its arrivals to at least ``max(current + 1, ceil(demand_m / (shield_target
    · capacity)))``; ``shield=False`` turns it off (the ``hrl-no-shield`` ablation). ``guardrail_counts`` counts
    ``saturation_shield`` (targets it raised) and ``stabilization`` (scale-downs it held back).

    ``workloads``: ``namespace/name`` keys it manages (None: every Deployment with a CPU request); ``forecaster``:
    the workload predictor (default: :class:`~policy.highlevel.forecast.TrendForecaster`); ``signals``: per-service
    metrics set before each cycle (None: no refused correction). Ranges: 0 < ``default_target``,
    ``saturation``, ``shield_target``, ``refused_frac`` <= 1; ``tolerance`` >= 0; 0 <= ``min_replicas`` <=
    ``max_replicas``; ``stabilization_s`` >= 0; 0 <= ``burst`` <= 1; 0.5 <= ``forecast_min`` <= 1; ``history_len``
    >= 1; 0 <= ``limit_target`` < 1. ValueError naming the field otherwise.
    """

    name: str = "intent"
    default_target: float = 0.6
    tolerance: float = 0.05
    min_replicas: int = 1
    max_replicas: int = 10
    stabilization_s: float = 180.0
    workloads: tuple[str, ...] | None = None
    forecaster: Forecaster | None = None
    shield: bool = True
    saturation: float = 0.9
    shield_target: float = 0.8
    refused_frac: float = 0.01
    signals: Mapping[str, Any] | None = None
    burst: float = 0.0
    forecast_min: float = 0.5
    entry_forecast: bool = False
    history_len: int = 60
    limit_target: float = LIMIT_TARGET
    guardrail_counts: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        ok = isinstance(self.forecast_min, (int, float)) and math.isfinite(self.forecast_min)
        if not (ok and 0.5 <= self.forecast_min <= 1):
            raise ValueError(f"IntentAutoscaler.forecast_min: must be in [0.5, 1], got {self.forecast_min!r}")
        for f in ("default_target", "saturation", "shield_target", "refused_frac"):
            v = getattr(self, f)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and 0 < v <= 1):
                raise ValueError(f"IntentAutoscaler.{f}: must be in (0, 1], got {v!r}")
        if not (isinstance(self.burst, (int, float)) and math.isfinite(self.burst) and 0 <= self.burst <= 1):
            raise ValueError(f"IntentAutoscaler.burst: must be in [0, 1], got {self.burst!r}")
        if not (math.isfinite(self.tolerance) and self.tolerance >= 0):
            raise ValueError(f"IntentAutoscaler.tolerance: must be >= 0, got {self.tolerance!r}")
        if self.min_replicas < 0 or self.max_replicas < self.min_replicas:
            raise ValueError(
                f"IntentAutoscaler: need 0 <= min_replicas <= max_replicas, got {self.min_replicas!r}, "
                f"{self.max_replicas!r}"
            )
        if not (math.isfinite(self.stabilization_s) and self.stabilization_s >= 0):
            raise ValueError(f"IntentAutoscaler.stabilization_s: must be >= 0, got {self.stabilization_s!r}")
        ok = isinstance(self.limit_target, (int, float)) and math.isfinite(self.limit_target)
        if not (ok and 0 <= self.limit_target < 1):
            raise ValueError(f"IntentAutoscaler.limit_target: must be in [0, 1), got {self.limit_target!r}")
        if not isinstance(self.entry_forecast, bool):
            raise ValueError(f"IntentAutoscaler.entry_forecast: must be true or false, got {self.entry_forecast!r}")
        if isinstance(self.history_len, bool) or not isinstance(self.history_len, int) or self.history_len < 1:
            raise ValueError(f"IntentAutoscaler.history_len: must be an integer >= 1, got {self.history_len!r}")
        if self.workloads is not None:
            self.workloads = tuple(self.workloads)

    def _record_entry_rates(self, services: Iterable[str], state: HrlState, now: float) -> dict[str, np.ndarray]:
        """Record the measured arrivals of each of ``services`` (those without a call-graph rate) in
        ``state.autoscaler["entry_rates"]`` (see the class docstring); returns service → (T,) requests/s, oldest
        first, for those with a history. A malformed record (a hand-edited state file) is dropped, not raised."""
        raw = state.autoscaler.get(ENTRY_RATES_KEY)
        book: dict[str, list[list[float]]] = {}
        if isinstance(raw, dict):
            for svc, rows in raw.items():
                parsed = _time_series(rows)
                if parsed:
                    book[str(svc)] = parsed
        sig = self.signals or {}
        out: dict[str, np.ndarray] = {}
        for svc in sorted(set(services)):
            rps = getattr(sig.get(svc), "rps", None)
            if rps is None or not math.isfinite(rps) or rps < 0:
                book.pop(svc, None)
                continue
            rows = book.setdefault(svc, [])
            if rows and rows[-1][0] == now:
                rows.pop()
            if rows and (now < rows[-1][0] or (len(rows) > 1 and now - rows[-1][0] > 3 * (rows[-1][0] - rows[-2][0]))):
                rows.clear()  # time went back, or a gap of more than three periods: the old points are no trend
            rows.append([now, float(rps)])
            del rows[: max(0, len(rows) - self.history_len)]
            out[svc] = np.array([r[1] for r in rows], dtype=np.float64)
        state.autoscaler[ENTRY_RATES_KEY] = {k: book[k] for k in sorted(out)}  # services with a call-graph rate leave
        return out

    def _peak(self, series: np.ndarray) -> float:
        x = np.asarray(series, dtype=np.float64)
        if x.size == 0 or not np.isfinite(x[-1]) or x[-1] < 1e-6:
            return 1.0
        fc = self.forecaster if self.forecaster is not None else TrendForecaster()
        try:
            peak = float(np.max(fc.predict(x[None, :])))
        except (ValueError, FloatingPointError):
            return 1.0
        return float(np.clip(peak / x[-1], self.forecast_min, 2.0)) if math.isfinite(peak) else 1.0

    @staticmethod
    def _burst_room(w: WorkloadInfo, measured: list[PodInfo], free: Mapping[str, float]) -> float:
        """The mean CPU (millicores) a measured pod of ``w`` could use above its request: its headroom to the
        template's limit, at most its node's unused CPU (``free``; 0 where the node's use is unknown)."""
        head = max(0.0, float(w.pod_limits.cpu_m) - float(w.pod_requests.cpu_m))
        if head <= 0.0 or not measured:
            return 0.0
        return sum(min(head, free.get(p.node_name or "", 0.0)) for p in measured) / len(measured)

    @staticmethod
    def calm(pods: Iterable[PodInfo], refused: float, now: float) -> bool:
        """Whether a service is calm enough for :attr:`limit_target` (the class docstring): none of ``pods`` (its bound
        pods) had a container terminate within :data:`LIMIT_TARGET_QUIET_S` s before ``now`` (seconds; a restart
        count without a termination time counts as recent), and ``refused`` (its refused share of arrivals, 0..1)
        is 0."""
        for p in pods:
            t = p.last_terminated_s
            if (p.restarts > 0 and t is None) or (t is not None and now - t < LIMIT_TARGET_QUIET_S):
                return False
        return refused <= 0.0

    def replica_targets(self, snapshot: ClusterSnapshot, state: HrlState) -> dict[str, int]:
        now = float(snapshot.taken_at_s)
        allowed = None if self.workloads is None else set(self.workloads)
        out: dict[str, int] = {}
        free = {
            n.name: max(0.0, float(n.allocatable.cpu_m) - float(n.usage.cpu_m))
            for n in snapshot.nodes
            if n.usage is not None
        }
        managed = [
            w
            for w in sorted(snapshot.workloads, key=lambda w: (w.namespace, w.name))
            if w.kind == "Deployment"
            and w.pod_requests.cpu_m > 0
            and (allowed is None or f"{w.namespace}/{w.name}" in allowed)
        ]
        entry: dict[str, np.ndarray] = {}
        if self.entry_forecast:
            unrated = (w.service for w in managed if not state.rates(w.service).size)
            entry = self._record_entry_rates(unrated, state, now)
        else:  # a history an earlier setting left: nothing reads it, and a later forecast must not span the gap
            state.autoscaler.pop(ENTRY_RATES_KEY, None)
        nodes_ok = all(n.ready and not n.unschedulable for n in snapshot.nodes)
        for w in managed:
            key = f"{w.namespace}/{w.name}"
            pods = [p for p in pods_of_workload(snapshot, w) if p.node_name is not None]
            measured = [p for p in pods if p.usage is not None]
            if not measured:
                continue
            req = float(w.pod_requests.cpu_m)
            used = float(sum(p.usage.cpu_m for p in measured))  # type: ignore[union-attr]
            sig = (self.signals or {}).get(w.service)
            refused = getattr(sig, "refused_frac", None)
            refused = float(refused) if refused is not None and math.isfinite(refused) else 0.0
            demand = used / (1.0 - min(max(refused, 0.0), 0.9))
            u = float(state.capacity_targets.get(w.service, self.default_target))
            cur = max(int(w.replicas), 0)
            room = self._burst_room(w, measured, free) if self.burst or self.limit_target else 0.0
            capacity = req + self.burst * room if self.burst else req
            lt = self.limit_target if room > 0 else 0.0  # a pod without room above its request is planned as before
            rated = state.rates(w.service)
            if lt and not (nodes_ok and self.calm(pods, refused, now)):
                self.guardrail_counts["limit_target_held"] += 1
                lt = 0.0
            per_pod = max(u * capacity, lt * (req + room)) if lt else u * capacity
            peak = self._peak(entry.get(w.service, rated))  # entry: services without a rate, with entry_forecast only
            need = demand * peak / per_pod
            if lt:  # never below LIMIT_TARGET_MIN_REPLICAS on its account
                need = max(need, min(demand * peak / (u * capacity), LIMIT_TARGET_MIN_REPLICAS))
            desired = cur if cur > 0 and abs(need / cur - 1.0) <= self.tolerance else int(math.ceil(need - 1e-9))
            if self.shield:
                cap = float(sum(p.limits.cpu_m if p.limits.cpu_m > 0 else p.requests.cpu_m for p in measured))
                if (cap > 0 and used >= self.saturation * cap) or refused >= self.refused_frac:
                    floor = max(cur + 1, int(math.ceil(demand / (self.shield_target * capacity) - 1e-9)))
                    if floor > desired:
                        self.guardrail_counts["saturation_shield"] += 1
                        desired = floor
            window = [r for r in state.recommendations.get(key, []) if r[0] > now - self.stabilization_s]
            window.append([now, float(desired)])
            state.recommendations[key] = window
            stabilized = max(int(r[1]) for r in window)
            if stabilized > desired:
                self.guardrail_counts["stabilization"] += 1
            out[key] = int(np.clip(stabilized, self.min_replicas, self.max_replicas))
        return out
