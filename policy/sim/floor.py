"""The latency floor of a run: its user requests served with nothing contended and every call node-local.

The same performance model (:class:`policy.sim.model.PerfModel`), the same minutes, user rates, entry shares of
several apps, call-rate drift, timeouts and retries as the run, but every service on one node of unbounded cores at
the cluster's fastest per-core speed, each pod without a CPU limit, many pods per service (so no run queue fills),
no background tenants and no interference; every call stays on that node, so it costs the run's network's
same-node price: the classic model's same-node delay and bandwidth, or, with a scenario's topology network, its
same-node delay with jitter and the mesh sidecar's latency (no link is crossed). What is left is each request's own
work at full speed (one core, the fastest node), every service's own non-CPU time, the same-node network cost of its
calls, and the timeouts and retries its tails cause: no placement, replica count or resource setting of the
simulated cluster can make a request faster than that, so the floor's percentiles bound every stack's from below in
expectation — among the requests it serves. Both are Monte Carlo estimates (``n_samples`` requests a minute): in one
seed a stack within a few % of the floor may come out below it by sampling noise alone (network-edge /
online-boutique: 14 of 40 seeds, 2.6 ± 2.7 ms above it on average), and the bench compares means over seeds. A stack
that fails more requests than the floor serves a different set of them (the failed ones tend to be the long ones,
with more calls to fail) and may show a lower p95 than the floor; the bench prints both figures.

Accounting is the engine's (:meth:`policy.sim.engine.Simulation.finish_minute`): latencies weighted by the minute's
served requests, the failed share from the sampled requests (per app for several apps,
:func:`policy.sim.engine.part_outcomes`); percentiles over the whole run's weighted samples
(:func:`policy.sim.engine.weighted_percentile`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .app import AppSpec
from .engine import ClusterSpec, SimConfig, Simulation, part_outcomes, weighted_percentile
from .kube_scheduler import KubeSchedulerModel
from .model import PerfModel, PodArrays
from .network import LABEL_RACK

__all__ = ["FLOOR_KEYS", "LatencyFloor", "latency_floor"]

#: Pods per service in the floor's layout: enough that no pod's run queue reaches ``max_inflight`` at the rates the
#: bench simulates (the rate splits evenly over them; nothing else changes with their number, there being no
#: contention).
PODS_PER_SERVICE = 64
#: The floor's node: cores no app uses up.
UNBOUNDED_CORES = 1e6

#: The figures of :class:`LatencyFloor`, in order (the bench's summary keys).
FLOOR_KEYS = ("latency_p50_ms", "latency_p95_ms", "failed_pct")


@dataclass(frozen=True)
class LatencyFloor:
    """A run's floor: ``latency_p50_ms`` / ``latency_p95_ms`` (ms) of its successful user requests, weighted by
    requests served, and ``failed_pct`` (% of user requests failed: timeouts of the own-time tails, their retries
    included)."""

    latency_p50_ms: float
    latency_p95_ms: float
    failed_pct: float


def latency_floor(app: AppSpec, rps: np.ndarray, cluster: ClusterSpec, config: SimConfig) -> LatencyFloor:
    """The floor (module docstring) of the run :func:`policy.sim.stacks.run_stack` would simulate with these
    arguments (``rps`` (minutes,) or (minutes, apps) user requests/s; ``config.seed`` seeds the samples,
    ``config.n_samples`` per minute). Raises ValueError for inputs the simulation refuses (a trace shorter than
    ``config.minutes``, negative rates)."""
    sim = Simulation(app, rps, cluster, KubeSchedulerModel(), config)
    drift = config.edge_drift
    model = PerfModel(app, config.network, m_headroom=drift.max_factor if drift is not None else 1.0)
    net = None
    if config.network_topology is not None:  # one node of the first node's zone, region and rack (no link crossed)
        first = sim.cluster.nodes[0]
        net = config.network_topology.bind([first.zone], [first.region], [first.labels.get(LABEL_RACK, "")], [None])
    S = len(model.services)
    P = S * PODS_PER_SERVICE
    pods = PodArrays(
        service=np.repeat(np.arange(S, dtype=np.int64), PODS_PER_SERVICE),
        node=np.zeros(P, dtype=np.int64),
        limit_cores=np.full(P, math.inf),
        request_cores=np.ones(P),
    )
    cores = np.array([UNBOUNDED_CORES])
    speed = None if sim.node_speed is None else np.array([float(sim.node_speed.max())])
    rng = np.random.default_rng(np.random.SeedSequence(config.seed).spawn(4)[2])  # the run's traffic stream
    parts = sim.parts
    no_loss = np.zeros(len(parts))
    retry_q = None
    lats, weights = [], []
    offered_total = failed_total = 0.0
    for minute in range(config.minutes):
        lam = float(sim.rps[minute])
        share = None if sim.entry_share is None or not sim.entry_share[minute].sum() > 0 else sim.entry_share[minute]
        st = model.step(
            lam,
            pods,
            cores,
            [""],
            rng,
            config.n_samples,
            app.timeout_ms,
            retry_fail_prob=retry_q,
            retry_iterations=config.retry_iterations,
            sample_budget=config.sample_budget,
            net=net,
            node_speed=speed,
            entry=share,
            entry_timeout_ms=sim.entry_timeout_ms,
            edge_scale=None if sim.edge_scale is None else sim.edge_scale[minute],
        )
        retry_q = st.edge_attempt_fail
        offered = lam * config.step_s
        if parts:
            failed_a, w, _ = part_outcomes(st, sim.part_of_service, sim.part_rates(minute) * config.step_s, no_loss)
            failed = float(failed_a.sum())
        else:
            failed = min(offered, offered * st.fail_frac)
            n = len(st.latency_ms)
            w = np.full(n, (offered - failed) / n) if n and offered > failed else np.zeros(n)
        offered_total += offered
        failed_total += failed
        if len(st.latency_ms) and offered > failed:
            lats.append(st.latency_ms)
            weights.append(w)
    lat = np.concatenate(lats) if lats else np.zeros(0)
    wt = np.concatenate(weights) if weights else np.zeros(0)
    return LatencyFloor(
        latency_p50_ms=weighted_percentile(lat, wt, 50),
        latency_p95_ms=weighted_percentile(lat, wt, 95),
        failed_pct=100.0 * failed_total / offered_total if offered_total > 0 else 0.0,
    )
