"""The learned high level: every period (5 minutes in the simulator and the shipped descheduler), a network
maps the global state to an :class:`~policy.highlevel.intent.Intent` (numpy only; trained with PPO in
:mod:`policy.train.hierarchy`).

**Observation.** One row per managed Deployment (:data:`INTENT_SERVICE_SPEC`): the DRPC students' local features
(:data:`policy.highlevel.drpc.HRL_SPEC`: replicas, CPU utilization against requests and limits, load trends,
the GRU forecast, latency against the SLO, refused share, the graph encoder's embedding of the service's place
in the call graph) plus the service's co-location state (the share of its calls that cross nodes, its call
rate), its size (CPU request) and the intent it had last period; and one global row (:data:`INTENT_GLOBAL_SPEC`):
cluster CPU requested and used, the node-utilization distribution, the total load's trend and forecast, the
application's latency and refused share, the cross-node call share, the CPU price the operator set, and the last
global intent. The ``hrl-no-encoder`` ablation uses :data:`INTENT_SERVICE_SPEC_FLAT` (no embedding columns).

**Network** (``intent-actor-v1``; arrays named like the torch twin's state_dict)::

    x̂_s = ([service row s ; global row] − μ) / σ                  (N, F_s + F_g)
    h_s = tanh(W₂ tanh(W₁ x̂_s + b₁) + b₂)                          (N, H)   one trunk, shared by every service
    z_s = W_s h_s + b_s                                             (N, 2)   per-service pre-activations
    g   = tanh(W_g [mean_s h_s ; ĝ] + b_g);  z_g = W_o g + b_o       (3,)     global pre-activations
    capacity_target_s   = 0.3 + 0.65 · σ(z_s,0)       in (0.30, 0.95)
    colocation_priority_s = 2 · σ(z_s,1)              in (0, 2)
    locality_weight, balance_weight = 3 · σ(z_g,0), 3 · σ(z_g,1)      in (0, 3)
    move_budget_frac = σ(z_g,2)                        in (0, 1)

The trunk is applied to every service with the same weights (DRPC's student structure: any number of services,
any application), the global head reads their mean. Training samples the pre-activations from a Gaussian around
these means; serving takes the means (deterministic). Inputs whose feature spec differs from the bundle's are
refused (:class:`~policy.bundle.BundleError`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from policy.bundle import BundleError, PolicyBundle, located, require_bundle
from policy.encoder import GraphEncoder
from policy.features import FeatureSpec, FeatureSpecError
from policy.index import ClusterIndex
from policy.state import ClusterSnapshot

from .drpc import DRPC_SPEC, HRL_SPEC, ActionMapping, DrpcFeaturizer, DrpcState, ServiceSignals
from .forecast import GruForecaster
from .intent import Intent
from .interface import default_intent, node_cpu_utilization
from .planner_state import HrlState

__all__ = [
    "INTENT_ARCH",
    "INTENT_SERVICE_EXTRA",
    "INTENT_SERVICE_SPEC",
    "INTENT_SERVICE_SPEC_FLAT",
    "INTENT_GLOBAL_SPEC",
    "CAPACITY_RANGE",
    "COLOCATION_MAX",
    "WEIGHT_MAX",
    "DEFAULT_CPU_PRICE",
    "IntentObservation",
    "IntentFeaturizer",
    "intent_weight_shapes",
    "IntentActor",
    "intent_from_outputs",
    "LearnedIntent",
]

INTENT_ARCH = "intent-actor-v1"
#: Range of the capacity targets the network can set: (low, high), fraction of the pods' CPU requests.
CAPACITY_RANGE = (0.3, 0.95)
#: Upper bound of a co-location priority (a multiplier of locality_weight).
COLOCATION_MAX = 2.0
#: Upper bound of locality_weight and balance_weight.
WEIGHT_MAX = 3.0
#: ``capacity_over_request`` at or below which a service's pods have no room to burst (limit = request: 1/10, the
#: feature's scale; a hair above for float32).
NO_BURST_ROOM = 0.1 + 1e-6
#: The CPU price (:class:`policy.sim.objective.Objective`.cpu_price) the policy is told when none is configured.
DEFAULT_CPU_PRICE = 0.5

INTENT_SERVICE_EXTRA: tuple[tuple[str, str], ...] = (
    ("edge_cross_node_frac", "share of the service's call rate (in and out) whose two pods sit on different nodes"),
    ("log_call_rps", "log1p(calls/s in and out of the service) / 10"),
    ("log_cpu_request_cores", "log1p(pod CPU request, cores)"),
    ("prev_capacity_target", "capacity target of the last period (0 before the first)"),
    ("prev_colocation", "co-location priority of the last period (1 before the first)"),
)
#: Per-service rows with the graph encoder's embedding (hrl-scheduler).
INTENT_SERVICE_SPEC = FeatureSpec.of([*zip(HRL_SPEC.names, HRL_SPEC.units), *INTENT_SERVICE_EXTRA])
#: Per-service rows without it (the hrl-no-encoder ablation).
INTENT_SERVICE_SPEC_FLAT = FeatureSpec.of([*zip(DRPC_SPEC.names, DRPC_SPEC.units), *INTENT_SERVICE_EXTRA])
INTENT_GLOBAL_SPEC = FeatureSpec.of(
    [
        ("cpu_requested_frac", "cluster CPU requested / allocatable (Ready, schedulable nodes)"),
        ("cpu_used_frac", "cluster CPU used / allocatable (requested where unmeasured)"),
        ("node_util_p50", "median node CPU utilization, capped at 2"),
        ("node_util_p90", "90th percentile node CPU utilization, capped at 2"),
        ("node_util_max", "largest node CPU utilization, capped at 2"),
        ("log_nodes", "log1p(nodes) / 5"),
        ("deployments_at_max_frac", "share of the managed Deployments at their maximum replicas"),
        ("load_trend_5m", "log(total rate now / mean of the 5 minutes before), clipped to [-2, 2]"),
        ("forecast_ratio", "log(forecast peak of the total rate / now), clipped to [-2, 2]"),
        ("app_latency_slo", "largest mean visit latency of an entry service / SLO p95, capped at 5; 0 unknown"),
        ("refused_frac", "largest share of refused arrivals over the services, last minute; 0 unknown"),
        ("metrics_known", "flag: latency and refused shares come from service metrics"),
        ("cross_node_call_frac", "share of all service-to-service calls crossing nodes"),
        ("cpu_price", "the objective's price of CPU the operator set (cost per manifest-sized allocation-minute)"),
        ("prev_locality_weight", "locality_weight of the last period"),
        ("prev_balance_weight", "balance_weight of the last period"),
        ("prev_move_budget_frac", "move budget of the last period"),
    ]
)


class IntentObservation(NamedTuple):
    """What the network reads: ``keys`` (N,) Deployments ``namespace/name``, ``services`` (N,) their services,
    ``service`` (N, F_s) float32 rows, ``global_`` (F_g,) float32 row."""

    keys: tuple[str, ...]
    services: tuple[str, ...]
    service: np.ndarray
    global_: np.ndarray


def _clip(x: float, lo: float, hi: float) -> float:
    return float(min(max(x, lo), hi)) if math.isfinite(x) else (hi if x > 0 else lo)


def _cross_node_shares(snapshot: ClusterSnapshot) -> tuple[dict[str, float], dict[str, float], float]:
    """Per service: the share of its call rate (in and out) crossing nodes, and its call rate (calls/s); and the
    share over all calls. A call from caller pod to callee pod picks the callee pod at random (kube-proxy), so an
    edge a→b crosses nodes with probability 1 − Σ_n p_a(n) p_b(n), p_x(n) the share of x's pods on node n."""
    where: dict[str, dict[str, float]] = {}
    for p in snapshot.pods:
        if p.node_name is None or p.terminating:
            continue
        d = where.setdefault(p.service, {})
        d[p.node_name] = d.get(p.node_name, 0.0) + 1.0
    share = {s: {n: c / sum(d.values()) for n, c in d.items()} for s, d in where.items()}
    cross_rate: dict[str, float] = {}
    rate: dict[str, float] = {}
    tot = tot_cross = 0.0
    for e in snapshot.graph.edges:
        if e.caller == e.callee:
            continue
        r = float(e.rps) if e.rps is not None and math.isfinite(e.rps) and e.rps > 0 else 1.0
        a, b = share.get(e.caller), share.get(e.callee)
        same = sum(pa * b.get(n, 0.0) for n, pa in a.items()) if a and b else 0.0
        cross = r * (1.0 - same)
        for s in (e.caller, e.callee):
            rate[s] = rate.get(s, 0.0) + r
            cross_rate[s] = cross_rate.get(s, 0.0) + cross
        tot += r
        tot_cross += cross
    frac = {s: cross_rate[s] / rate[s] for s in rate if rate[s] > 0}
    return frac, rate, (tot_cross / tot if tot > 0 else 0.0)


class IntentFeaturizer:
    """Builds :class:`IntentObservation` from a snapshot, the planner's state and optional service signals;
    the same code feeds training and serving.

    ``predictor``: the GRU forecaster of the DRPC students (its window sets the rate history kept);
    ``encoder``: the graph encoder (``None``: the flat rows of the ``hrl-no-encoder`` ablation); ``slo_p95_ms``:
    the application's p95 SLO (None: latency unknown); ``cpu_price``: the objective's CPU price told to the
    policy; ``mapping``: replica bounds (for the replicas feature)."""

    def __init__(
        self,
        predictor: GruForecaster,
        encoder: Any = None,
        slo_p95_ms: float | None = None,
        cpu_price: float = DEFAULT_CPU_PRICE,
        mapping: ActionMapping = ActionMapping(),
    ):
        if not (math.isfinite(cpu_price) and cpu_price >= 0):
            raise ValueError(f"cpu_price: expected a finite number >= 0, got {cpu_price!r}")
        self.local = DrpcFeaturizer(predictor, "hrl" if encoder is not None else "drpc", mapping, slo_p95_ms, encoder)
        self.service_spec = INTENT_SERVICE_SPEC if encoder is not None else INTENT_SERVICE_SPEC_FLAT
        self.global_spec = INTENT_GLOBAL_SPEC
        self.slo_p95_ms = slo_p95_ms
        self.cpu_price = float(cpu_price)

    def record(self, snapshot: ClusterSnapshot, drpc_state: DrpcState, workloads: Sequence[str] | None) -> None:
        """Append this minute's per-Deployment rates to ``drpc_state`` (call every cycle; :meth:`observe` reads
        the history)."""
        self.local.observe(snapshot, drpc_state, None, workloads, record=True)

    def observe(
        self,
        snapshot: ClusterSnapshot,
        index: ClusterIndex,
        state: HrlState,
        drpc_state: DrpcState,
        signals: Mapping[str, ServiceSignals] | None = None,
        workloads: Sequence[str] | None = None,
    ) -> IntentObservation:
        """The observation now (rates already recorded by :meth:`record`)."""
        obs = self.local.observe(snapshot, drpc_state, signals, workloads, record=False)
        ws = self.local.managed(snapshot, workloads)
        services = tuple(w.service for w in ws)
        frac, rate, cross_all = _cross_node_shares(snapshot)
        extra = np.array(
            [
                [
                    frac.get(s, 0.0),
                    math.log1p(rate.get(s, 0.0)) / 10.0,
                    math.log1p(w.pod_requests.cpu_m / 1000.0),
                    float(state.capacity_targets.get(s, 0.0)),
                    float(state.colocation_priority.get(s, 1.0)),
                ]
                for s, w in zip(services, ws)
            ],
            dtype=np.float32,
        ).reshape(len(ws), len(INTENT_SERVICE_EXTRA))
        service = np.concatenate([obs.local, extra], axis=1).astype(np.float32)
        g = self._global(snapshot, index, state, drpc_state, obs, signals, cross_all)
        return IntentObservation(obs.keys, services, service, g)

    def _global(self, snapshot, index, state, drpc_state, obs, signals, cross_all) -> np.ndarray:
        nodes = snapshot.nodes
        ok = np.array([n.ready and not n.unschedulable for n in nodes], dtype=bool) & (index.alloc_cpu_m > 0)
        alloc = float(index.alloc_cpu_m[ok].sum()) if ok.any() else 0.0
        util = node_cpu_utilization(index)[ok] if ok.any() else np.zeros(1)
        util = np.minimum(np.nan_to_num(util, posinf=2.0), 2.0)
        req = float(index.req_cpu_m[ok].sum()) if ok.any() else 0.0
        load = float((util * index.alloc_cpu_m[ok]).sum()) if ok.any() else 0.0
        at_max = float(np.mean(obs.replicas >= self.local.mapping.max_replicas)) if len(obs.replicas) else 0.0
        trend = fr = 0.0
        hist = [drpc_state.history.get(k) or [] for k in obs.keys]
        T = max((len(h) for h in hist), default=0)
        if T:
            total = np.sum([[h[0]] * (T - len(h)) + list(h) for h in hist if h], axis=0)
            now = float(total[-1])
            before = total[-6:-1] if T >= 2 else total[-1:]
            trend = _clip(math.log((now + 1e-6) / (float(np.mean(before)) + 1e-6)), -2.0, 2.0)
            if obs.forecast.size:
                peak = float(np.max(np.sum(obs.forecast, axis=0)))
                fr = _clip(math.log((peak + 1e-6) / (now + 1e-6)), -2.0, 2.0)
        called = {e.callee for e in snapshot.graph.edges if e.caller != e.callee}
        lat = refused = 0.0
        known = bool(signals) and self.slo_p95_ms is not None
        if known:
            sig = dict(signals or {})
            entries = [s for s in snapshot.graph.services if s not in called] or list(sig)
            lats = [sig[s].latency_mean_ms for s in entries if s in sig and sig[s].latency_mean_ms is not None]
            lat = _clip(max(lats) / self.slo_p95_ms, 0.0, 5.0) if lats else 0.0
            refs = [v.refused_frac for v in sig.values() if v.refused_frac is not None]
            refused = _clip(max(refs), 0.0, 1.0) if refs else 0.0
        prev = state.last_intent or default_intent()
        return np.array(
            [
                req / alloc if alloc > 0 else 0.0,
                load / alloc if alloc > 0 else 0.0,
                float(np.percentile(util, 50)),
                float(np.percentile(util, 90)),
                float(np.max(util)),
                math.log1p(len(nodes)) / 5.0,
                at_max,
                trend,
                fr,
                lat,
                refused,
                float(known),
                cross_all,
                self.cpu_price,
                float(prev[0]),
                float(prev[1]),
                float(state.move_budget_frac),
            ],
            dtype=np.float32,
        )


def intent_weight_shapes(service_features: int, global_features: int, hidden: int) -> dict[str, tuple[int, ...]]:
    """The arrays of an ``intent-actor-v1`` bundle and their shapes (torch layout: weight (out, in))."""
    F = service_features + global_features
    return {
        "trunk.0.weight": (hidden, F),
        "trunk.0.bias": (hidden,),
        "trunk.2.weight": (hidden, hidden),
        "trunk.2.bias": (hidden,),
        "service_head.weight": (2, hidden),
        "service_head.bias": (2,),
        "global_body.weight": (hidden, hidden + global_features),
        "global_body.bias": (hidden,),
        "global_head.weight": (3, hidden),
        "global_head.bias": (3,),
    }


class IntentActor:
    """The network of the module docstring in numpy, from a ``level: high``, ``intent-actor-v1`` bundle whose
    feature specs (``service``, ``global``) equal the expected ones. ``__call__(service (N, F_s), global_
    (F_g,)) → (z_s (N, 2), z_g (3,))`` float32 pre-activations. Raises :class:`~policy.bundle.BundleError`
    naming both sides on any mismatch."""

    def __init__(self, bundle: PolicyBundle, service_spec: FeatureSpec | None = None):
        where = f"intent actor {bundle.where}"
        if bundle.level != "high":
            raise BundleError(f"{where}: level: expected 'high', found {bundle.level!r}")
        if bundle.architecture.get("type") != INTENT_ARCH:
            raise BundleError(
                f"{where}: architecture.type: expected {INTENT_ARCH!r}, found {bundle.architecture.get('type')!r}"
            )
        fs, fg = bundle.feature_spec.get("service"), bundle.feature_spec.get("global")
        if fs is None or fg is None:
            raise BundleError(
                f"{where}: feature_spec: expected inputs 'global' and 'service', found {sorted(bundle.feature_spec)}"
            )
        try:
            if service_spec is not None:
                service_spec.check(fs, "feature_spec.service")
            INTENT_GLOBAL_SPEC.check(fg, "feature_spec.global")
        except FeatureSpecError as exc:
            raise BundleError(f"{where}: {exc}") from None
        if fs not in (INTENT_SERVICE_SPEC, INTENT_SERVICE_SPEC_FLAT):
            raise BundleError(
                f"{where}: feature_spec.service: expected the layout with or without embeddings "
                f"({len(INTENT_SERVICE_SPEC)} or {len(INTENT_SERVICE_SPEC_FLAT)} columns), found {len(fs)} columns"
            )
        self.service_spec, self.global_spec = fs, fg
        try:
            hidden = int(bundle.dims["hidden"])
        except KeyError:
            raise BundleError(f"{where}: dims: missing 'hidden'") from None
        if hidden < 1:
            raise BundleError(f"{where}: dims.hidden: expected an integer >= 1, found {hidden}")
        self.w: dict[str, np.ndarray] = {}
        for k, shape in intent_weight_shapes(len(fs), len(fg), hidden).items():
            a = bundle.array(k)
            if a.shape != shape:
                raise BundleError(f"{where}: weights[{k!r}]: expected shape {list(shape)}, found {list(a.shape)}")
            self.w[k] = np.ascontiguousarray(a.T if a.ndim == 2 else a, dtype=np.float32)
        self.s_mean, self.s_std = bundle.norm("service", len(fs))
        self.g_mean, self.g_std = bundle.norm("global", len(fg))
        self.bundle = bundle
        self.version = bundle.policy_version
        self.uses_embeddings = fs == INTENT_SERVICE_SPEC

    def __call__(self, service: np.ndarray, global_: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s = np.asarray(service, dtype=np.float32)
        g = np.asarray(global_, dtype=np.float32).reshape(-1)
        if s.ndim != 2 or s.shape[1] != len(self.service_spec) or g.shape != (len(self.global_spec),):
            raise ValueError(
                f"obs: expected service (N, {len(self.service_spec)}) and global ({len(self.global_spec)},), "
                f"got {s.shape} and {g.shape}"
            )
        w = self.w
        sn = (s - self.s_mean) / self.s_std
        gn = (g - self.g_mean) / self.g_std
        x = np.concatenate([sn, np.broadcast_to(gn, (len(sn), len(gn)))], axis=1)
        h = np.tanh(x @ w["trunk.0.weight"] + w["trunk.0.bias"])
        h = np.tanh(h @ w["trunk.2.weight"] + w["trunk.2.bias"])
        z_s = h @ w["service_head.weight"] + w["service_head.bias"]
        pooled = h.mean(axis=0) if len(h) else np.zeros(h.shape[1], np.float32)
        body = np.tanh(np.concatenate([pooled, gn]) @ w["global_body.weight"] + w["global_body.bias"])
        z_g = body @ w["global_head.weight"] + w["global_head.bias"]
        return z_s.astype(np.float32), z_g.astype(np.float32)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(x, -30.0, 30.0)))


def intent_from_outputs(services: Sequence[str], z_s: np.ndarray, z_g: np.ndarray) -> Intent:
    """The :class:`Intent` of pre-activations ``z_s`` (N, 2) for ``services`` and ``z_g`` (3,) (module
    docstring): the same squashing for the sampled actions of training and the means served."""
    lo, hi = CAPACITY_RANGE
    zs = np.asarray(z_s, dtype=np.float64).reshape(len(services), 2)
    zg = np.asarray(z_g, dtype=np.float64).reshape(3)
    cap = lo + (hi - lo) * _sigmoid(zs[:, 0])
    col = COLOCATION_MAX * _sigmoid(zs[:, 1])
    g = _sigmoid(zg)
    base = list(default_intent())
    base[0], base[1] = WEIGHT_MAX * g[0], WEIGHT_MAX * g[1]
    capacity: dict[str, float] = {}
    colocation: dict[str, float] = {}
    for i, s in enumerate(services):  # several Deployments of one service: the tightest target, the mean priority
        capacity[s] = min(capacity.get(s, 1.0), float(cap[i]))
        colocation.setdefault(s, float(col[i]))
    return Intent(tuple(float(x) for x in base), capacity, colocation, float(g[2]))


#: ``metadata.fallback`` fields of an intent bundle and their ranges: (low, high, low included).
FALLBACK_FIELDS: dict[str, tuple[float, float, bool]] = {
    "capacity_target": (0.0, 1.0, False),
    "move_budget_frac": (0.0, 1.0, True),
    "global_z_max": (0.0, math.inf, True),
    "service_z_max": (0.0, math.inf, True),
    "lean_margin": (0.0, 1.0, True),
    "no_burst_lean_margin": (0.0, 1.0, True),
}


def _check_fallback(bundle: PolicyBundle) -> None:
    """Refuse (:class:`~policy.bundle.BundleError`, one line naming the bundle and the field) a bundle whose
    ``metadata.fallback`` has a field of :data:`FALLBACK_FIELDS` that is not a finite number in its range (absent
    or null fields are fine: that part of the fallback is off)."""
    meta = bundle.metadata if isinstance(bundle.metadata, Mapping) else {}
    fb = meta.get("fallback")
    if fb is None:
        return
    if not isinstance(fb, Mapping):
        raise BundleError(f"intent actor {bundle.where}: metadata.fallback: expected a mapping, got {fb!r}")
    for key, (lo, hi, lo_in) in FALLBACK_FIELDS.items():
        v = fb.get(key)
        if v is None:
            continue
        ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
        ok = ok and (lo <= v if lo_in else lo < v) and v <= hi
        if not ok:
            span = f"{'[' if lo_in else '('}{lo:g}, {hi:g}]"
            raise BundleError(
                f"intent actor {bundle.where}: metadata.fallback.{key}: expected a finite number in {span}, got {v!r}"
            )


class LearnedIntent:
    """:class:`~policy.highlevel.intent.IntentPolicy` served from an ``intent-actor-v1`` bundle.

    ``actor``: the :class:`IntentActor`; ``featurizer``: its :class:`IntentFeaturizer` (the same spec as the
    bundle); ``workloads``: the Deployments (``namespace/name``) it sets capacity targets for (None: every
    Deployment with a CPU request); ``signals``: per-service metrics (a service mesh's, or the simulator's),
    set before each cycle by the caller (None: the snapshot's call graph only). Its rate history lives in the
    planner's state (``HrlState.autoscaler["intent"]``), so a CronJob descheduler keeps it between runs."""

    name = "learned-intent"
    STATE_KEY = "intent"

    def __init__(self, actor: IntentActor, featurizer: IntentFeaturizer, workloads: Sequence[str] | None = None):
        if actor.service_spec != featurizer.service_spec:
            raise ValueError(
                "featurizer: its service rows ("
                + ("with" if featurizer.service_spec == INTENT_SERVICE_SPEC else "without")
                + " embeddings) do not match the actor's bundle"
            )
        _check_fallback(actor.bundle)
        self.actor = actor
        self.featurizer = featurizer
        self.workloads = None if workloads is None else tuple(workloads)
        self.signals: Mapping[str, ServiceSignals] | None = None
        self.last_observation: IntentObservation | None = None
        #: Periods in which the state lay outside the training states and the tuned constant was used.
        self.fallbacks = 0
        self.service_fallbacks = 0
        self.lean_capped = 0
        self.no_burst_capped = 0

    def _drpc_state(self, state: HrlState) -> DrpcState:
        return DrpcState.from_dict(state.autoscaler.get(self.STATE_KEY))

    def _keys(self, snapshot: ClusterSnapshot) -> list[str] | None:
        if self.workloads is None:
            return None
        known = {f"{w.namespace}/{w.name}" for w in snapshot.workloads if w.pod_requests.cpu_m > 0}
        return [k for k in self.workloads if k in known]

    def record(self, snapshot: ClusterSnapshot, index: ClusterIndex, state: HrlState) -> None:
        """Record this cycle's rates (every cycle; the intent itself is computed once per period)."""
        ds = self._drpc_state(state)
        self.featurizer.record(snapshot, ds, self._keys(snapshot))
        state.autoscaler[self.STATE_KEY] = ds.to_dict()

    def observe(self, snapshot: ClusterSnapshot, index: ClusterIndex, state: HrlState) -> IntentObservation:
        """The observation the actor reads now."""
        return self.featurizer.observe(
            snapshot, index, state, self._drpc_state(state), self.signals, self._keys(snapshot)
        )

    def intent(self, snapshot: ClusterSnapshot, index: ClusterIndex, state: HrlState) -> Intent:
        obs = self.observe(snapshot, index, state)
        self.last_observation = obs
        fallback = self.fallback_intent(obs)
        if fallback is not None:
            self.fallbacks += 1
            return fallback
        z_s, z_g = self.actor(obs.service, obs.global_)
        intent = self.service_fallback(obs, intent_from_outputs(obs.services, z_s, z_g))
        return self.lean_cap(self.no_burst_cap(obs, intent))

    def _fallback_meta(self) -> Mapping[str, Any] | None:
        fb = self.actor.bundle.metadata.get("fallback") if isinstance(self.actor.bundle.metadata, Mapping) else None
        if not isinstance(fb, Mapping) or fb.get("capacity_target") is None:
            return None
        return fb

    def fallback_intent(self, obs: IntentObservation) -> Intent | None:
        """The bundle's tuned constant intent when ``obs`` lies outside the states the network was trained on (its
        normalized global row has a component beyond the bundle's ``metadata.fallback.global_z_max``: SPIBB-style,
        Laroche et al. 2019, arXiv 1712.06924), else None. None too for a bundle without a fallback."""
        fb = self._fallback_meta()
        if fb is None or not fb.get("global_z_max"):
            return None
        z = (np.asarray(obs.global_, dtype=np.float32) - self.actor.g_mean) / self.actor.g_std
        if float(np.abs(z).max()) <= float(fb["global_z_max"]):
            return None
        cap = float(fb["capacity_target"])
        return Intent(
            default_intent(),
            capacity_target=dict.fromkeys(obs.services, cap),
            move_budget_frac=float(fb.get("move_budget_frac") or 0.0),
        )

    def lean_cap(self, intent: Intent) -> Intent:
        """``intent`` with every capacity target at most the tuned constant's plus the bundle's
        ``metadata.fallback.lean_margin`` (a fraction of the CPU request, >= 0): the network may always ask for
        more headroom than the baseline, but for less only within that margin. The objective is lopsided (a target
        set too high fails requests, one too low costs CPU), so a safe improvement over the baseline bounds the risky
        direction only (SPIBB's constraint, Laroche et al. 2019, applied to the side where mistakes are dear). Each
        target lowered counts one in ``lean_capped``. ``intent`` itself for a bundle without a margin."""
        fb = self._fallback_meta()
        margin = None if fb is None else fb.get("lean_margin")
        if margin is None or not intent.capacity_target:
            return intent
        top = float(fb["capacity_target"]) + float(margin)
        capped = {s: min(v, top) for s, v in intent.capacity_target.items()}
        n = sum(1 for s, v in intent.capacity_target.items() if v > top)
        if not n:
            return intent
        self.lean_capped += n
        return Intent(
            intent.values,
            capacity_target=capped,
            colocation_priority=intent.colocation_priority,
            move_budget_frac=intent.move_budget_frac,
        )

    def no_burst_cap(self, obs: IntentObservation, intent: Intent) -> Intent:
        """``intent`` with the capacity target of every service whose pods have no room to burst (CPU limit = request:
        Guaranteed QoS; the row's ``capacity_over_request`` at 1/10) at most the tuned constant's plus the bundle's
        ``metadata.fallback.no_burst_lean_margin``. Such a pod cannot use more CPU than it requests: run leaner than
        the baseline it throttles at its limit and queues, and the next burst fails requests before a new replica is
        Ready, while a Burstable pod absorbs it up to its limit. So the network may give these services more headroom
        than the baseline, and less only within the margin (SPIBB's constraint on the side where mistakes are dear,
        as :meth:`lean_cap`, for the services where they are dearest). Each target lowered counts one in
        ``no_burst_capped``. ``intent`` itself for a bundle without that margin."""
        fb = self._fallback_meta()
        margin = None if fb is None else fb.get("no_burst_lean_margin")
        if margin is None or not intent.capacity_target or not len(obs.services):
            return intent
        col = self.actor.service_spec.index("capacity_over_request")
        room = np.asarray(obs.service, dtype=np.float64)[:, col]
        top = float(fb["capacity_target"]) + float(margin)
        tight = {s for s, r in zip(obs.services, room) if r <= NO_BURST_ROOM}
        lowered = {s: top for s in tight if intent.capacity_target.get(s, 0.0) > top}
        if not lowered:
            return intent
        self.no_burst_capped += len(lowered)
        return Intent(
            intent.values,
            capacity_target={**intent.capacity_target, **lowered},
            colocation_priority=intent.colocation_priority,
            move_budget_frac=intent.move_budget_frac,
        )

    def service_fallback(self, obs: IntentObservation, intent: Intent) -> Intent:
        """``intent`` with the tuned constant's capacity target (and a co-location priority of 1) for every service
        whose normalized row has a component beyond the bundle's ``metadata.fallback.service_z_max``: the fallback
        per service, as SPIBB keeps the baseline's action where its data are too few (Laroche et al. 2019). Each
        such service counts one in ``service_fallbacks``. ``intent`` itself for a bundle without that threshold."""
        fb = self._fallback_meta()
        if fb is None or not fb.get("service_z_max") or not len(obs.services):
            return intent
        z = np.abs((np.asarray(obs.service, dtype=np.float32) - self.actor.s_mean) / self.actor.s_std).max(axis=1)
        out = sorted({s for s, zi in zip(obs.services, z) if float(zi) > float(fb["service_z_max"])})
        if not out:
            return intent
        self.service_fallbacks += len(out)
        cap = float(fb["capacity_target"])
        return Intent(
            intent.values,
            capacity_target={**intent.capacity_target, **dict.fromkeys(out, cap)},
            colocation_priority={**intent.colocation_priority, **dict.fromkeys(out, 1.0)},
            move_budget_frac=intent.move_budget_frac,
        )

    @staticmethod
    def load(
        path: str | Path,
        *,
        slo_p95_ms: float | None = None,
        cpu_price: float = DEFAULT_CPU_PRICE,
        workloads: Sequence[str] | None = None,
        encoder: Any = None,
    ) -> LearnedIntent:
        """The policy of bundle directory ``path`` (``path/intent`` + ``path/predictor``, as
        :mod:`policy.train.hierarchy` writes them; a ``path`` that is itself the ``intent`` bundle is accepted
        too). The embedding layout is the one the bundle declares (the committed graph encoder unless
        ``encoder`` is given). Raises :class:`~policy.bundle.BundleMissing` when there is no bundle and
        :class:`~policy.bundle.BundleError` (one line naming the directory and the field) for a bad one."""
        p = Path(path)
        root = p.parent if (p / "manifest.json").is_file() and not (p / "intent").exists() else p
        require_bundle(root / "intent", "high-level intent policy")
        require_bundle(root / "predictor", "high-level intent policy (its workload predictor)")
        try:
            actor = IntentActor(PolicyBundle.load(root / "intent", level="high", architecture_type=INTENT_ARCH))
            predictor = GruForecaster(PolicyBundle.load(root / "predictor"))
        except BundleError as exc:
            raise located(exc, root) from None
        if actor.uses_embeddings and encoder is None:
            encoder = GraphEncoder.load()
        featurizer = IntentFeaturizer(
            predictor, encoder if actor.uses_embeddings else None, slo_p95_ms=slo_p95_ms, cpu_price=cpu_price
        )
        return LearnedIntent(actor, featurizer, workloads)
