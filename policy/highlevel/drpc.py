"""DRPC-style distributed autoscaling, served in numpy: one student actor per deployment (shared weights),
acting on its deployment's local state and a GRU forecast of its load (arXiv 2407.10169, "DRPC: Distributed
Reinforcement Learning Approach for Scalable Resource Provisioning in Container-based Clusters", IEEE TSC
2024). Training (TD3 teacher on global state, students distilled by imitation) is :mod:`policy.train.drpc`;
this module is what the descheduler and the simulator's ``drpc`` stack run, and it never imports torch.

**Local observation** (one row per deployment; :data:`DRPC_SPEC`, or :data:`HRL_SPEC` = the same columns plus
the service's 32-dimensional structural embedding from the graph encoder). Every column is scale-free, so
one set of weights serves services and applications of any size:

- ``replicas_frac``: spec.replicas / max_replicas; ``at_min``: 1 when at min_replicas;
- ``measured_frac`` / ``starting_frac``: pods with a CPU metric / pods pending or without a metric, both over
  spec.replicas (capped at 2);
- ``cpu_util_request``: Σ CPU used / Σ CPU requested over the measured pods (capped at 5);
  ``cpu_util_capacity``: Σ CPU used / Σ (CPU limit, or the node's allocatable CPU without one);
  ``capacity_over_request``: that capacity / the request, over 10 (capped at 1);
- ``load_trend_1m`` / ``load_trend_5m``: log of the request rate now over its value 1 minute ago / its mean
  over the 5 minutes before (clipped to ±2);
- ``forecast_ratio``: log of the predictor's peak over the next ``horizon`` minutes over the rate now
  (clipped to ±2); ``forecast_util``: ``cpu_util_request`` × that ratio (the utilisation the forecast peak
  would cause at the current replicas; capped at 5);
- ``latency_slo``: the service's mean visit latency (its calls included) / the application's p95 SLO
  (capped at 5); ``refused_frac``: share of its arrivals refused (0..1); ``metrics_known``: 1 when both come
  from service metrics (a mesh, or the simulator), else 0 and both read 0;
- ``minutes_since_scale``: minutes since this controller last changed the deployment, over 10 (capped at 1).

The request rate of a service comes from ``signals`` (:class:`ServiceSignals`, e.g. a service mesh) when
given, else from the snapshot's call graph (the rates of its incoming calls; for an entry service, its
outgoing calls divided by calls per request), else its CPU use (ratios only, so any proportional load
measure works).

**Action → replicas** (:class:`ActionMapping`; a deviation from the paper, which does not publish its
mapping: we map the continuous action to a *target utilisation*, as the HPA uses, so the policy learns how
much headroom to keep per deployment and when; the forecast enters through the observation)::

    u(a)     = u_min · (u_max / u_min) ** ((a + 1) / 2)              a ∈ [−1, 1] → u ∈ [0.2, 2.0] of the request
    demand   = Σ CPU used (measured pods) / (1 − min(refused, 0.9)) / CPU request per pod    (pods' worth)
    desired  = ceil(demand / u(a))
    replicas = clip(desired, max(ceil(cur · 0.5), min_replicas), min(max(2 · cur, cur + 4), max_replicas))

and the current value when no pod of the deployment has a metric yet.

**State across periods** (:class:`DrpcState`, JSON-serialisable, a few hundred numbers per deployment at
most): the per-minute rate history the predictor reads (``window`` + 8 minutes; gaps between calls are
filled by linear interpolation, so a CronJob every few minutes still feeds a per-minute series) and when
each deployment was last scaled. :meth:`DrpcAutoscaler.replica_targets` updates it in place.

Bundles: ``policy/bundles/drpc/{student,predictor}`` (DRPC baseline, no embeddings) and
``policy/bundles/hrl-scheduler/high/{student,predictor}`` (the hierarchical policy's scaling part, with
embeddings). The student is ``level: high``, ``architecture.type: drpc-student-v1`` (an MLP actor
``obs → ReLU(64) → ReLU(64) → tanh``, weights named like :class:`policy.train.td3.Actor`'s state_dict:
``net.0.weight`` ... ``net.4.bias``), ``feature_spec: {"local": DRPC_SPEC | HRL_SPEC}``, ``action_bounds``
[−1, 1], ``metadata.action_mapping`` the :class:`ActionMapping` it was trained with.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from policy.bundle import DEFAULT_BUNDLES, BundleError, PolicyBundle, located
from policy.cache import fingerprint
from policy.encoder import GraphEncoder
from policy.features import FeatureSpec, FeatureSpecError
from policy.state import ClusterSnapshot, PodInfo, ServiceEdge, ServiceGraph, ServiceSignals, WorkloadInfo

from .forecast import FORECAST_ARCH, FORECAST_SPEC, GruForecaster

if TYPE_CHECKING:  # pragma: no cover
    from policy.encoder import GraphEncoder

__all__ = [
    "STUDENT_ARCH",
    "DRPC_SPEC",
    "HRL_SPEC",
    "EMBEDDING_DIM",
    "SPECS",
    "DEFAULT_DRPC_BUNDLE",
    "DEFAULT_HRL_HIGH_BUNDLE",
    "ActionMapping",
    "ServiceSignals",
    "DrpcState",
    "DrpcObservation",
    "DrpcFeaturizer",
    "StudentActor",
    "DrpcAutoscaler",
    "structural_embeddings",
    "student_weight_shapes",
]


STUDENT_ARCH = "drpc-student-v1"


BUNDLES = DEFAULT_BUNDLES


DEFAULT_DRPC_BUNDLE = BUNDLES / "drpc"


DEFAULT_HRL_HIGH_BUNDLE = BUNDLES / "hrl-scheduler" / "high"


#: The graph encoder's embedding width (policy/bundles/encoder dims.embedding).
EMBEDDING_DIM = 32


DRPC_SPEC = FeatureSpec.of(
    [
        ("replicas_frac", "spec.replicas / max_replicas"),
        ("at_min", "flag: spec.replicas <= min_replicas"),
        ("measured_frac", "pods with a CPU metric / spec.replicas, capped at 2"),
        ("starting_frac", "pods pending or without a metric / spec.replicas, capped at 2"),
        ("cpu_util_request", "CPU used / CPU requested (measured pods), capped at 5"),
        ("cpu_util_capacity", "CPU used / CPU limit or node allocatable (measured pods), capped at 5"),
        ("capacity_over_request", "(CPU limit or node allocatable) / request / 10, capped at 1"),
        ("load_trend_1m", "log(rate now / rate 1 min ago), clipped to [-2, 2]"),
        ("load_trend_5m", "log(rate now / mean rate of the 5 min before), clipped to [-2, 2]"),
        ("forecast_ratio", "log(forecast peak over the horizon / rate now), clipped to [-2, 2]"),
        ("forecast_util", "cpu_util_request x forecast peak / rate now, capped at 5"),
        ("latency_slo", "mean visit latency (calls included) / app SLO p95, capped at 5; 0 unknown"),
        ("refused_frac", "share of arrivals refused, last minute; 0 unknown"),
        ("metrics_known", "flag: latency_slo and refused_frac come from service metrics"),
        ("minutes_since_scale", "minutes since this controller changed the deployment / 10, capped at 1"),
    ]
)


HRL_SPEC = FeatureSpec.of(
    [
        *zip(DRPC_SPEC.names, DRPC_SPEC.units),
        *((f"emb_{i}", "graph encoder embedding (structure only)") for i in range(EMBEDDING_DIM)),
    ]
)


#: The two local observation layouts by name.
SPECS: dict[str, FeatureSpec] = {"drpc": DRPC_SPEC, "hrl": HRL_SPEC}


# ---- action mapping ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ActionMapping:
    """How an action in [−1, 1] becomes a replica count (module docstring). ``u_min`` / ``u_max``: the
    target CPU utilisation (fraction of the request) at a = −1 / +1, 0 < u_min < u_max; ``min_replicas`` /
    ``max_replicas`` bound the result (1 <= min <= max); one step changes replicas by at most ×``max_up_factor``
    or +``max_up_pods`` (whichever is larger) up and ×``max_down_factor`` down."""

    u_min: float = 0.2
    u_max: float = 2.0
    min_replicas: int = 1
    max_replicas: int = 10
    max_up_factor: float = 2.0
    max_up_pods: int = 4
    max_down_factor: float = 0.5

    def __post_init__(self) -> None:
        if not 0 < self.u_min < self.u_max:
            raise ValueError(f"action_mapping: need 0 < u_min < u_max, got {self.u_min}, {self.u_max}")
        if not 1 <= self.min_replicas <= self.max_replicas:
            raise ValueError(
                f"action_mapping: need 1 <= min_replicas <= max_replicas, got {self.min_replicas}, {self.max_replicas}"
            )
        if self.max_up_factor < 1 or not 0 < self.max_down_factor <= 1 or self.max_up_pods < 0:
            raise ValueError("action_mapping: need max_up_factor >= 1, 0 < max_down_factor <= 1, max_up_pods >= 0")

    def target_utilization(self, a: np.ndarray | float) -> np.ndarray:
        """u(a) for actions in [−1, 1] (clipped first)."""
        a = np.clip(np.asarray(a, dtype=np.float64), -1.0, 1.0)
        return self.u_min * (self.u_max / self.u_min) ** ((a + 1.0) / 2.0)

    def replicas(self, action: float, current: int, demand_pods: float | None) -> int:
        """The replica count for one deployment: ``current`` spec.replicas, ``demand_pods`` the CPU in use in
        units of one pod's request (None: no metric yet → ``current``)."""
        if demand_pods is None or not math.isfinite(demand_pods):
            return int(current)
        u = float(self.target_utilization(action))
        desired = math.ceil(max(demand_pods, 0.0) / u - 1e-9)
        cur = max(int(current), 0)
        hi = max(math.ceil(cur * self.max_up_factor), cur + self.max_up_pods)
        lo = math.ceil(cur * self.max_down_factor)
        desired = min(max(desired, lo), hi)
        return int(min(max(desired, self.min_replicas), self.max_replicas))

    @staticmethod
    def from_json(d: Mapping[str, Any] | None, where: str = "action_mapping") -> ActionMapping:
        """Parse :func:`dataclasses.asdict`'s form (missing keys take the defaults). Raises ValueError."""
        if d is None:
            return ActionMapping()
        known = set(ActionMapping.__dataclass_fields__)
        extra = sorted(set(d) - known)
        if extra:
            raise ValueError(f"{where}: unknown keys {extra}")
        try:
            return ActionMapping(**dict(d))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: {exc}") from None


# ---- inputs: service signals, state -------------------------------------------------------------------------


STATE_VERSION = 1


@dataclass
class DrpcState:
    """What the autoscaler carries from one period to the next (JSON-serialisable with :meth:`to_dict`).

    ``history``: workload ``namespace/name`` → per-minute request rates (requests/s), oldest first;
    ``last_s``: the snapshot time of the previous call (seconds; None before the first);
    ``last_scale_s``: workload → when this controller last changed its replicas (seconds).
    """

    history: dict[str, list[float]] = field(default_factory=dict)
    last_s: float | None = None
    last_scale_s: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """``{"version": 1, "history": {...}, "last_s": ..., "last_scale_s": {...}}`` (plain JSON data)."""
        return {
            "version": STATE_VERSION,
            "history": {k: [float(x) for x in v] for k, v in self.history.items()},
            "last_s": self.last_s,
            "last_scale_s": dict(self.last_scale_s),
        }

    @staticmethod
    def from_dict(d: Mapping[str, Any] | None) -> DrpcState:
        """Parse :meth:`to_dict`'s form (None or {} → an empty state). Raises ValueError naming the field
        and the value for anything else (another version, negative or non-finite rates, ...)."""
        if not d:
            return DrpcState()
        if not isinstance(d, Mapping):
            raise ValueError(f"drpc state: expected an object, got {type(d).__name__}")
        if d.get("version") != STATE_VERSION:
            raise ValueError(f"drpc state.version: expected {STATE_VERSION}, got {d.get('version')!r}")
        hist: dict[str, list[float]] = {}
        for k, v in (d.get("history") or {}).items():
            if not isinstance(v, list):
                raise ValueError(f"drpc state.history.{k}: expected a list of rates, got {v!r}")
            xs = []
            for i, x in enumerate(v):
                if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0:
                    raise ValueError(f"drpc state.history.{k}[{i}]: expected a finite rate >= 0, got {x!r}")
                xs.append(float(x))
            hist[str(k)] = xs
        last = d.get("last_s")
        if last is not None and (
            isinstance(last, bool) or not isinstance(last, (int, float)) or not math.isfinite(last)
        ):
            raise ValueError(f"drpc state.last_s: expected seconds or null, got {last!r}")
        scale: dict[str, float] = {}
        for k, v in (d.get("last_scale_s") or {}).items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"drpc state.last_scale_s.{k}: expected seconds, got {v!r}")
            scale[str(k)] = float(v)
        return DrpcState(hist, None if last is None else float(last), scale)

    def record(self, now_s: float, rates: Mapping[str, float], keep: int) -> None:
        """Append this minute's rate per workload, filling a gap of g > 1 minutes since the previous call by
        linear interpolation, replacing the last value when called again within the same minute; keep the
        last ``keep`` values. Workloads absent from ``rates`` are dropped."""
        gap = 1 if self.last_s is None else int(round((now_s - self.last_s) / 60.0))
        for k in [k for k in self.history if k not in rates]:
            del self.history[k]
        for k, r in rates.items():
            h = self.history.setdefault(k, [])
            if h and gap <= 0:
                h[-1] = float(r)
            elif h and gap > 1:
                prev = h[-1]
                g = min(gap, keep)
                h.extend(prev + (r - prev) * i / g for i in range(1, g + 1))
            else:
                h.append(float(r))
            del h[:-keep]
        self.last_s = float(now_s)


# ---- observation -------------------------------------------------------------------------------------------


class DrpcObservation(NamedTuple):
    """One period's observation: ``keys`` (N,) workload ``namespace/name``; ``local`` (N, len(spec)) float32;
    ``replicas`` (N,) int spec.replicas; ``demand_pods`` (N,) float CPU in use in pods' requests after the
    refused correction (NaN: no metric); ``rates`` (N,) the load rates recorded (requests/s, or the CPU
    proxy); ``forecast`` (N, horizon) the predictor's rates."""

    keys: tuple[str, ...]
    local: np.ndarray
    replicas: np.ndarray
    demand_pods: np.ndarray
    rates: np.ndarray
    forecast: np.ndarray


def _wkey(w: WorkloadInfo) -> str:
    return f"{w.namespace}/{w.name}"


def _pods_by_workload(snapshot: ClusterSnapshot, workloads: Iterable[WorkloadInfo]) -> dict[str, list[PodInfo]]:
    by_ns: dict[str, list[PodInfo]] = {}
    for p in snapshot.pods:
        by_ns.setdefault(p.namespace, []).append(p)
    out: dict[str, list[PodInfo]] = {}
    for w in workloads:
        pods = by_ns.get(w.namespace, [])
        if w.selector.match_labels or w.selector.match_expressions:
            out[_wkey(w)] = [p for p in pods if w.selector.matches(p.labels) and not p.terminating]
        else:
            out[_wkey(w)] = [p for p in pods if p.service == w.service and not p.terminating]
    return out


def graph_rates(graph: ServiceGraph) -> dict[str, float]:
    """Per-service arrival rate (requests/s) from a call graph's measured edge rates: the sum of its incoming
    calls (self-calls excluded); for a service nobody calls, the largest ``rps / calls_per_request`` of its
    outgoing calls. Services without any measured rate are absent."""
    inbound: dict[str, float] = {}
    outbound: dict[str, float] = {}
    for e in graph.edges:
        if e.rps is None or e.caller == e.callee:
            continue
        inbound[e.callee] = inbound.get(e.callee, 0.0) + float(e.rps)
        if e.calls_per_request and e.calls_per_request > 0:
            outbound[e.caller] = max(outbound.get(e.caller, 0.0), float(e.rps) / float(e.calls_per_request))
    called = {e.callee for e in graph.edges if e.caller != e.callee}
    out = dict(inbound.items())
    for s, r in outbound.items():
        if s not in called:
            out[s] = r
    return out


def structural_embeddings(encoder: GraphEncoder, graph: ServiceGraph) -> dict[str, np.ndarray]:
    """Per-service embeddings of ``graph``'s structure (services, calls, calls per request, fan-out mode; the
    measured rates and latencies are removed first so the embedding does not move minute to minute)."""
    bare = ServiceGraph.build(
        graph.services,
        [
            ServiceEdge(e.caller, e.callee, calls_per_request=e.calls_per_request, parallel=e.parallel)
            for e in graph.edges
        ],
        graph.source,
    )
    enc = encoder.encode_graph(bare)
    return {s: enc.embeddings[i] for i, s in enumerate(enc.services)}


def _clip(x: float, lo: float, hi: float) -> float:
    return float(min(max(x, lo), hi)) if math.isfinite(x) else (hi if x > 0 else lo)


def _log_ratio(a: float, b: float) -> float:
    return _clip(math.log((a + 1e-6) / (b + 1e-6)), -2.0, 2.0)


class DrpcFeaturizer:
    """Builds the local observations (:data:`DRPC_SPEC` or :data:`HRL_SPEC` rows) from a snapshot, the
    state and optional service signals; the same code feeds training and serving.

    ``predictor``: the GRU forecaster; ``spec``: ``"drpc"`` or ``"hrl"``; ``mapping``: replica bounds;
    ``slo_p95_ms``: the application's p95 SLO (None: latency unknown); ``encoder``: the graph encoder (needed
    for ``"hrl"``)."""

    def __init__(
        self,
        predictor: GruForecaster,
        spec: str = "drpc",
        mapping: ActionMapping = ActionMapping(),
        slo_p95_ms: float | None = None,
        encoder: GraphEncoder | None = None,
    ):
        if spec not in SPECS:
            raise ValueError(f"spec: expected one of {', '.join(SPECS)}, got {spec!r}")
        if spec == "hrl" and encoder is None:
            raise ValueError("spec 'hrl': needs the graph encoder (encoder=GraphEncoder.load())")
        if slo_p95_ms is not None and not slo_p95_ms > 0:
            raise ValueError(f"slo_p95_ms: must be > 0, got {slo_p95_ms!r}")
        self.predictor = predictor
        self.spec_name = spec
        self.spec = SPECS[spec]
        self.mapping = mapping
        self.slo_p95_ms = slo_p95_ms
        self.encoder = encoder
        self._emb_cache: dict[str, dict[str, np.ndarray]] = {}
        self.keep = predictor.window + 8

    def embeddings(self, graph: ServiceGraph) -> dict[str, np.ndarray]:

        fp = fingerprint(graph)
        if fp not in self._emb_cache:
            assert self.encoder is not None
            self._emb_cache = {fp: structural_embeddings(self.encoder, graph)}
        return self._emb_cache[fp]

    def managed(self, snapshot: ClusterSnapshot, workloads: Iterable[str] | None) -> list[WorkloadInfo]:
        """The workloads to scale: those named (``namespace/name``; unknown names raise ValueError), or every
        Deployment with a CPU request."""
        if workloads is None:
            return [w for w in snapshot.workloads if w.kind == "Deployment" and w.pod_requests.cpu_m > 0]
        by_key = {_wkey(w): w for w in snapshot.workloads}
        out = []
        for k in workloads:
            if k not in by_key:
                raise ValueError(f"workloads: {k!r} is not a workload of the snapshot")
            if by_key[k].pod_requests.cpu_m <= 0:
                raise ValueError(f"workloads: {k!r} has no CPU request (utilisation cannot be computed)")
            out.append(by_key[k])
        return out

    def observe(
        self,
        snapshot: ClusterSnapshot,
        state: DrpcState,
        signals: Mapping[str, ServiceSignals] | None = None,
        workloads: Iterable[str] | None = None,
        record: bool = True,
    ) -> DrpcObservation:
        """The observation of every managed workload now (``snapshot.taken_at_s``); with ``record`` (default)
        this minute's rates are appended to ``state.history`` first."""
        now = float(snapshot.taken_at_s)
        ws = self.managed(snapshot, workloads)
        pods = _pods_by_workload(snapshot, ws)
        node_cpu = {n.name: n.allocatable.cpu_m for n in snapshot.nodes}
        g_rates = (
            graph_rates(snapshot.graph)
            if signals is None or any((signals.get(w.service) or ServiceSignals()).rps is None for w in ws)
            else {}
        )
        m = self.mapping
        N, F = len(ws), len(self.spec)
        keys = tuple(_wkey(w) for w in ws)
        local = np.zeros((N, F), np.float32)
        replicas = np.array([w.replicas for w in ws], dtype=np.int64)
        demand = np.full(N, np.nan)
        rates = np.zeros(N)
        used_all = np.zeros(N)
        per_row: list[tuple[float, float, float, float, float, float, float, float, bool]] = []
        for i, w in enumerate(ws):
            req_m = float(w.pod_requests.cpu_m)
            measured = [
                p for p in pods[keys[i]] if p.node_name is not None and p.phase == "Running" and p.usage is not None
            ]
            starting = max(len(pods[keys[i]]) - len(measured), 0)
            used = float(sum(p.usage.cpu_m for p in measured))  # type: ignore[union-attr]
            requested = float(sum(p.requests.cpu_m for p in measured))
            cap = float(sum((p.limits.cpu_m or node_cpu.get(p.node_name or "", 0) or 1000) for p in measured))
            cap_one = float(w.pod_limits.cpu_m or (max(node_cpu.values()) if node_cpu else 1000))
            sig = (signals or {}).get(w.service) or ServiceSignals()
            refused = sig.refused_frac
            if measured and requested > 0:
                corr = 1.0 - min(max(refused or 0.0, 0.0), 0.9)
                demand[i] = used / corr / req_m
            rate = sig.rps if sig.rps is not None else g_rates.get(w.service)
            rates[i] = float(rate) if rate is not None and math.isfinite(rate) and rate >= 0 else used / 1000.0
            used_all[i] = used
            known = sig.latency_mean_ms is not None and sig.refused_frac is not None and self.slo_p95_ms is not None
            lat = (sig.latency_mean_ms or 0.0) / self.slo_p95_ms if known and self.slo_p95_ms else 0.0
            per_row.append(
                (
                    len(measured),
                    starting,
                    used,
                    requested,
                    cap,
                    cap_one / max(req_m, 1.0),
                    lat,
                    float(refused or 0.0) if known else 0.0,
                    known,
                )
            )
        if record:
            state.record(now, dict(zip(keys, rates.tolist())), self.keep)
        hist = [state.history.get(k) or [float(rates[i])] for i, k in enumerate(keys)]
        T = max((len(h) for h in hist), default=1)
        series = np.array([[h[0]] * (T - len(h)) + list(h) for h in hist], dtype=np.float64).reshape(N, T)
        forecast = self.predictor.predict(series) if N else np.zeros((0, self.predictor.horizon))
        emb = self.embeddings(snapshot.graph) if self.spec_name == "hrl" else None
        for i, w in enumerate(ws):
            n_meas, starting, used, requested, cap, cap_ratio, lat, refused, known = per_row[i]
            r = max(int(replicas[i]), 1)
            h = series[i]
            now_rate = h[-1]
            prev = h[-2] if T >= 2 else now_rate
            before = h[-6:-1] if T >= 2 else h[-1:]
            util = used / requested if requested > 0 else 0.0
            peak = float(np.max(forecast[i])) if forecast.shape[1] else now_rate
            fr = (peak + 1e-6) / (now_rate + 1e-6)
            last = state.last_scale_s.get(keys[i])
            since = 1.0 if last is None else _clip((now - last) / 600.0, 0.0, 1.0)
            row = [
                replicas[i] / m.max_replicas,
                float(replicas[i] <= m.min_replicas),
                min(n_meas / r, 2.0),
                min(starting / r, 2.0),
                _clip(util, 0.0, 5.0),
                _clip(used / cap if cap > 0 else 0.0, 0.0, 5.0),
                _clip(cap_ratio / 10.0, 0.0, 1.0),
                _log_ratio(now_rate, prev),
                _log_ratio(now_rate, float(np.mean(before))),
                _clip(math.log(fr), -2.0, 2.0),
                _clip(util * min(fr, 10.0), 0.0, 5.0),
                _clip(lat, 0.0, 5.0),
                _clip(refused, 0.0, 1.0),
                float(known),
                since,
            ]
            local[i, : len(DRPC_SPEC)] = row
            if emb is not None:
                e = emb.get(w.service)
                if e is not None:
                    local[i, len(DRPC_SPEC) :] = e
        return DrpcObservation(keys, local, replicas, demand, rates, forecast)

    def targets(
        self, obs: DrpcObservation, actions: np.ndarray, state: DrpcState | None = None, now_s: float | None = None
    ) -> dict[str, int]:
        """Replica targets from (N,) actions in [−1, 1] (:class:`ActionMapping`); with ``state`` and
        ``now_s``, records when each changed deployment was scaled."""
        a = np.asarray(actions, dtype=np.float64).reshape(-1)
        if len(a) != len(obs.keys):
            raise ValueError(f"actions: expected {len(obs.keys)} values, got {len(a)}")
        out: dict[str, int] = {}
        for i, k in enumerate(obs.keys):
            d = obs.demand_pods[i]
            n = self.mapping.replicas(float(a[i]), int(obs.replicas[i]), None if np.isnan(d) else float(d))
            out[k] = n
            if state is not None and now_s is not None and n != int(obs.replicas[i]):
                state.last_scale_s[k] = float(now_s)
        return out


# ---- the student actor -------------------------------------------------------------------------------------


def student_weight_shapes(obs_dim: int, hidden: int, layers: int = 2, act_dim: int = 1) -> dict[str, tuple[int, ...]]:
    """Every weight of ``drpc-student-v1`` (:class:`policy.train.td3.Actor`'s state_dict layout)."""
    s: dict[str, tuple[int, ...]] = {}
    d = obs_dim
    for i in range(layers):
        s[f"net.{2 * i}.weight"] = (hidden, d)
        s[f"net.{2 * i}.bias"] = (hidden,)
        d = hidden
    s[f"net.{2 * layers}.weight"] = (act_dim, d)
    s[f"net.{2 * layers}.bias"] = (act_dim,)
    return s


class StudentActor:
    """The student network in numpy: ``obs (N, F) → action (N,)`` in [−1, 1]. Built from a ``level: high``,
    ``drpc-student-v1`` bundle whose ``feature_spec.local`` equals the expected spec. Raises
    :class:`~policy.bundle.BundleError` naming both sides on any mismatch."""

    def __init__(self, bundle: PolicyBundle, spec: FeatureSpec | None = None):
        where = f"student {bundle.where}"
        if bundle.level != "high":
            raise BundleError(f"{where}: level: expected 'high', found {bundle.level!r}")
        if bundle.architecture.get("type") != STUDENT_ARCH:
            raise BundleError(
                f"{where}: architecture.type: expected {STUDENT_ARCH!r}, found {bundle.architecture.get('type')!r}"
            )
        found = bundle.feature_spec.get("local")
        if found is None:
            raise BundleError(f"{where}: feature_spec: expected input 'local', found {sorted(bundle.feature_spec)}")
        if spec is not None:
            try:
                spec.check(found, "feature_spec.local")
            except FeatureSpecError as exc:
                raise BundleError(f"{where}: {exc}") from None
        self.spec = found
        try:
            hidden, layers = int(bundle.dims["hidden"]), int(bundle.dims["layers"])
        except KeyError as exc:
            raise BundleError(f"{where}: dims: missing {exc.args[0]!r}") from None
        if hidden < 1:
            raise BundleError(f"{where}: dims.hidden: expected an integer >= 1, found {hidden}")
        if 2 * layers + 2 > len(bundle.weights):  # bound it by the arrays before sizing anything by it
            raise BundleError(
                f"{where}: dims.layers: {layers} hidden layers need {2 * layers + 2} arrays, the "
                f"bundle has {len(bundle.weights)}"
            )
        self.layers = layers
        self.w: dict[str, np.ndarray] = {}
        for k, shape in student_weight_shapes(len(found), hidden, layers).items():
            a = bundle.array(k)
            if a.shape != shape:
                raise BundleError(f"{where}: weights[{k!r}]: expected shape {list(shape)}, found {list(a.shape)}")
            self.w[k] = np.ascontiguousarray(a.T if a.ndim == 2 else a, dtype=np.float32)
        self.mean, self.std = bundle.norm("local", len(found))
        am = bundle.metadata.get("action_mapping")
        if am is not None and not isinstance(am, Mapping):
            raise BundleError(f"{where}: metadata.action_mapping: expected an object, found {type(am).__name__}")
        try:
            self.mapping = ActionMapping.from_json(am, f"{where}: metadata.action_mapping")
        except ValueError as exc:
            raise BundleError(str(exc)) from None
        self.bundle = bundle
        self.version = bundle.policy_version

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        x = (np.asarray(obs, dtype=np.float32) - self.mean) / self.std
        if x.ndim != 2 or x.shape[1] != len(self.spec):
            raise ValueError(f"obs: expected (N, {len(self.spec)}), got {x.shape}")
        for i in range(self.layers):
            x = np.maximum(x @ self.w[f"net.{2 * i}.weight"] + self.w[f"net.{2 * i}.bias"], 0.0)
        k = 2 * self.layers
        return np.tanh(x @ self.w[f"net.{k}.weight"] + self.w[f"net.{k}.bias"])[:, 0].astype(np.float32)


# ---- the autoscaler ----------------------------------------------------------------------------------------


@lru_cache(maxsize=8)
def _load_pair(path: str, spec: str) -> tuple[PolicyBundle, PolicyBundle]:

    d = Path(path)
    student = PolicyBundle.load(
        d / "student", level="high", feature_spec={"local": SPECS[spec]}, architecture_type=STUDENT_ARCH
    )
    predictor = PolicyBundle.load(
        d / "predictor", level="high", feature_spec={"rates": FORECAST_SPEC}, architecture_type=FORECAST_ARCH
    )
    return student, predictor


class DrpcAutoscaler:
    """Per-deployment replica targets from the student actor (shared weights) and the GRU predictor.

    ``student`` / ``predictor``: bundles (see the module docstring); ``spec``: ``"drpc"`` (no embeddings) or
    ``"hrl"`` (with the graph encoder's embeddings; ``encoder`` required); ``slo_p95_ms``: the application's
    p95 SLO for the latency feature (None: unknown); ``mapping``: overrides the bundle's action mapping
    (e.g. other min/max replicas). Raises :class:`~policy.bundle.BundleError` when a bundle does not match
    the spec (the message names expected and found)."""

    def __init__(
        self,
        student: PolicyBundle,
        predictor: PolicyBundle,
        *,
        spec: str = "drpc",
        slo_p95_ms: float | None = None,
        encoder: GraphEncoder | None = None,
        mapping: ActionMapping | None = None,
    ):
        if spec not in SPECS:
            raise ValueError(f"spec: expected one of {', '.join(SPECS)}, got {spec!r}")
        self.actor = StudentActor(student, SPECS[spec])
        try:
            self.forecaster = GruForecaster(predictor)
        except BundleError as exc:  # its messages name the policy version: name the directory too
            raise located(exc, predictor.source) from None
        if spec == "hrl" and encoder is None:
            encoder = GraphEncoder.load()
        self.featurizer = DrpcFeaturizer(self.forecaster, spec, mapping or self.actor.mapping, slo_p95_ms, encoder)
        self.spec = spec

    @staticmethod
    def load(
        path: str | Path | None = None,
        *,
        spec: str = "drpc",
        slo_p95_ms: float | None = None,
        encoder: GraphEncoder | None = None,
        mapping: ActionMapping | None = None,
    ) -> DrpcAutoscaler:
        """Load ``path/student`` and ``path/predictor`` (default: ``policy/bundles/drpc`` for spec drpc,
        ``policy/bundles/hrl-scheduler/high`` for hrl). Raises BundleError when missing or mismatched."""
        if path is None:
            path = DEFAULT_DRPC_BUNDLE if spec == "drpc" else DEFAULT_HRL_HIGH_BUNDLE
        if spec not in SPECS:
            raise ValueError(f"spec: expected one of {', '.join(SPECS)}, got {spec!r}")
        student, predictor = _load_pair(str(Path(path).resolve()), spec)
        return DrpcAutoscaler(student, predictor, spec=spec, slo_p95_ms=slo_p95_ms, encoder=encoder, mapping=mapping)

    @property
    def mapping(self) -> ActionMapping:
        return self.featurizer.mapping

    def observe(
        self,
        snapshot: ClusterSnapshot,
        state: DrpcState,
        signals: Mapping[str, ServiceSignals] | None = None,
        workloads: Iterable[str] | None = None,
    ) -> DrpcObservation:
        """The local observations now (records this minute's rates in ``state``)."""
        return self.featurizer.observe(snapshot, state, signals, workloads)

    def act(self, obs: DrpcObservation) -> np.ndarray:
        """(N,) actions in [−1, 1], one per workload of ``obs``."""
        if not len(obs.keys):
            return np.zeros(0, np.float32)
        return self.actor(obs.local)

    def replica_targets(
        self,
        snapshot: ClusterSnapshot,
        state: DrpcState,
        signals: Mapping[str, ServiceSignals] | None = None,
        workloads: Iterable[str] | None = None,
    ) -> dict[str, int]:
        """``{namespace/name: replicas}`` for every managed workload (``workloads``, or every Deployment with a
        CPU request), unchanged ones included. Updates ``state`` in place (rate history, scale times).
        ``signals``: per-service metrics by service name (optional). Raises ValueError for an unknown
        workload name or one without a CPU request."""
        obs = self.observe(snapshot, state, signals, workloads)
        return self.featurizer.targets(obs, self.act(obs), state, snapshot.taken_at_s)


def mapping_json(m: ActionMapping) -> dict[str, Any]:
    """The ``metadata.action_mapping`` object of a student bundle."""
    return asdict(m)
