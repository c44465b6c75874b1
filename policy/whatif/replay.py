"""Replaying a recording in the simulator: the recorded load on the recorded cluster, one stack at a time.

:func:`replay` builds a stack (:func:`policy.sim.stacks.build_stack`) and runs the simulation with one step per
recorded step (``SimConfig.step_s`` = the recording's step; the controllers' periods count steps), starting from
the recorded state (``start="recorded"``: every pod of the app bound to the node it ran on at the first step and
already serving; replicas beyond the recorded ones are placed by the stack's scheduler) or from scratch
(``start="fresh"``: the stack's scheduler places every pod, as when the app was installed under it). Background
tenants (the recorded pods of other namespaces) sit on their recorded nodes in both.

:func:`replay_error` compares a replay with the recording, step by step: per service, the simulated visit latency
p50 / p95 against the recorded per-service percentiles (error = simulated / recorded − 1, its median absolute value
over the steps); the app's CPU in use (cores) likewise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from policy.sim.app import AppSpec
from policy.sim.engine import SimConfig, SimResult, Simulation
from policy.sim.stacks import StackContext, build_stack

from .inputs import RecordedInputs

__all__ = ["START_MODES", "Replay", "replay", "replay_error", "ServiceError"]

START_MODES = ("recorded", "fresh")


@dataclass
class Replay:
    """One stack's replay: ``stack``, ``seed``, the :class:`SimResult`, the app's services in the model's order
    (``services``: the columns of ``series["service_latency_ms"]``), the pods bound at the start to their recorded
    nodes (``placed_as_recorded``) and the final placement (``nodes``: service → nodes of its pods)."""

    stack: str
    seed: int
    result: SimResult
    services: list[str]
    placed_as_recorded: int = 0
    nodes: dict[str, list[str]] = field(default_factory=dict)

    def service_latency(self, service: str) -> np.ndarray | None:
        """(T, 2) simulated p50 / p95 visit latency (ms) of ``service`` per step; ``None`` when not simulated."""
        s = self.result.series.get("service_latency_ms")
        if not s or service not in self.services:
            return None
        i = self.services.index(service)
        return np.array([[row[i][0], row[i][1]] for row in s], dtype=np.float64)

    @property
    def metrics(self) -> dict[str, float]:
        return self.result.metrics


def _place_recorded(sim: Simulation, placement: Mapping[str, Sequence[str]]) -> int:
    """Bind the app's pending pods to their recorded nodes (in order, per service), serving from time 0."""
    left = {s: list(v) for s, v in placement.items()}
    known = set(sim.node_objs)
    n = 0
    for pod in list(sim.cluster.pending()):
        if sim.is_background(pod):
            continue
        nodes = left.get(pod.info.service)
        while nodes and nodes[0] not in known:
            nodes.pop(0)
        if not nodes:
            continue
        sim.schedule_one(pod, nodes.pop(0))
        pod.ready_at_s = 0.0
        n += 1
    return n


def replay(
    stack: str,
    app: AppSpec,
    inputs: RecordedInputs,
    *,
    seed: int = 0,
    start: str = "recorded",
    n_samples: int = 2000,
    progress: Callable[[int], None] | None = None,
) -> Replay:
    """Replay ``inputs``' load on its cluster with ``stack`` (module docstring). Raises ``ValueError`` for an unknown
    stack or ``start``."""
    if start not in START_MODES:
        raise ValueError(f"--start: expected one of {', '.join(START_MODES)}, got {start!r}")
    cfg = SimConfig(minutes=inputs.steps, seed=seed, n_samples=n_samples, step_s=inputs.step_s, per_service=True)
    rps = np.asarray(inputs.load_rps, dtype=np.float64)
    built = build_stack(stack, StackContext(app, inputs.cluster, seed, cfg, rps=rps))
    try:
        sim = Simulation(
            app,
            rps,
            inputs.cluster,
            built.scheduler,
            cfg,
            hooks=built.hooks,
            on_change=built.on_change,
            scheduler_name=built.scheduler_name,
        )
        sim.start(schedule=False)
        placed = _place_recorded(sim, inputs.placement) if start == "recorded" else 0
        sim.schedule_pending()
        while sim.minute < cfg.minutes:
            m = sim.minute
            sim.advance()
            if progress is not None:
                progress(m)
        res = sim.result()
        if built.counters is not None:
            res.extra["counters"] = {str(k): float(v) for k, v in built.counters().items()}
        nodes: dict[str, list[str]] = {}
        for p in sim.cluster.live_pods():
            if p.node >= 0 and not sim.is_background(p):
                nodes.setdefault(p.info.service, []).append(sim.cluster.nodes[p.node].name)
        return Replay(stack, seed, res, list(sim.model.services), placed, nodes)
    finally:
        if built.close is not None:
            built.close()


@dataclass(frozen=True)
class ServiceError:
    """One service's replay error: recorded and simulated medians over the steps (ms), the median absolute step
    error (%) at p50 and p95, and the steps compared."""

    service: str
    recorded_p50_ms: float
    recorded_p95_ms: float
    simulated_p50_ms: float
    simulated_p95_ms: float
    error_p50_pct: float
    error_p95_pct: float
    steps: int

    def to_json(self) -> dict[str, Any]:
        def r(v: float) -> float | None:
            return None if not math.isfinite(v) else round(v, 3)

        return {k: (r(v) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


def _med(x: np.ndarray) -> float:
    x = x[np.isfinite(x)]
    return float(np.median(x)) if len(x) else math.nan


def replay_error(run: Replay, inputs: RecordedInputs) -> dict[str, Any]:
    """The replay's error against the recording (module docstring): ``services`` (:class:`ServiceError` per service
    with recorded latency, by name), ``median_abs_error_pct`` (over services: p50, p95; the figure a calibration
    is judged by), ``cpu`` (recorded and simulated median cores, median absolute step error %)."""
    rows: list[ServiceError] = []
    for s, rec in sorted(inputs.latency.items()):
        sim = run.service_latency(s)
        if sim is None or not np.isfinite(rec).any():
            continue
        n = min(len(sim), len(rec))
        a, b = rec[:n], sim[:n]
        with np.errstate(divide="ignore", invalid="ignore"):
            err = 100.0 * (b / a - 1.0)
        ok = np.isfinite(err).all(axis=1)
        if not ok.any():
            continue
        rows.append(
            ServiceError(
                s,
                _med(a[ok, 0]),
                _med(a[ok, 1]),
                _med(b[ok, 0]),
                _med(b[ok, 1]),
                _med(np.abs(err[ok, 0])),
                _med(np.abs(err[ok, 1])),
                int(ok.sum()),
            )
        )
    cpu_sim = np.asarray(run.result.series.get("cpu_cores_used", []), dtype=np.float64)
    cpu_rec = inputs.cpu_cores[: len(cpu_sim)]
    with np.errstate(divide="ignore", invalid="ignore"):
        cerr = 100.0 * (cpu_sim[: len(cpu_rec)] / cpu_rec - 1.0)
    return {
        "services": {r.service: r for r in rows},
        "median_abs_error_pct": {
            "p50": _med(np.array([r.error_p50_pct for r in rows])),
            "p95": _med(np.array([r.error_p95_pct for r in rows])),
        },
        "cpu": {
            "recorded_cores": _med(cpu_rec),
            "simulated_cores": _med(cpu_sim),
            "error_pct": _med(np.abs(cerr)),
        },
    }
