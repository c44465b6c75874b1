"""The simulator's scale and in-place resize subresources as the descheduler's :class:`~descheduler.scale.Scaler`
and :class:`~descheduler.resize.Resizer`: what :func:`descheduler.loop.run_once` calls when the simulation side
(:mod:`policy.sim.hrl_stacks`, ``hack/demo.py``) runs the descheduler's own cycle in a
:class:`~policy.sim.engine.Simulation`."""

from __future__ import annotations

from typing import Any

from descheduler.resize import ResizeOrder, ResizeOutcome, ResizeResult
from descheduler.scale import ScaleResult

__all__ = ["SimScaler", "SimResizer"]


class SimScaler:
    """The simulator's scale subresource (``sim.scale(workload, replicas)``, current value
    ``sim.cluster.replicas[workload]``; duck-typed so the descheduler does not import the simulator). There is
    no HPA object in a simulation, so it never answers ``refused_hpa``. ``dry_run=True`` changes nothing."""

    def __init__(self, sim: Any, *, dry_run: bool = False):
        self.sim = sim
        self.dry_run = dry_run
        self.calls: list[tuple[str, str]] = []

    def dry_run_twin(self) -> SimScaler:
        return SimScaler(self.sim, dry_run=True)

    def scale(self, workload: str, replicas: int) -> ScaleResult:
        replicas = int(replicas)
        cur = self.sim.cluster.replicas.get(workload)
        if cur is None:
            res = ScaleResult(workload, "not_found", None, replicas, message="no such workload in the simulation")
        elif int(cur) == replicas:
            res = ScaleResult(workload, "unchanged", int(cur), replicas, message=f"already {cur} replicas")
        elif self.dry_run:
            res = ScaleResult(
                workload, "dry_run", int(cur), replicas, message=f"dry run: would scale {cur} -> {replicas}"
            )
        else:
            self.sim.scale(workload, replicas)
            res = ScaleResult(workload, "scaled", int(cur), replicas, message=f"scaled {cur} -> {replicas}")
        self.calls.append((workload, res.outcome))
        return res


class SimResizer:
    """The simulator's in-place resize: ``sim.resize(pod_key, cpu_request_m=...)`` (duck-typed, so the descheduler
    does not import the simulator; the simulator scales the pod's containers as :func:`split_cpu_request` does and
    changes its speed without a restart). A simulation without a callable ``resize`` answers ``unsupported`` for
    every order (the run goes on); ``KeyError`` from it → ``not_found``, ``ValueError`` → ``error``. There is no
    VPA in a simulation, so it never answers ``refused_vpa``. ``dry_run=True`` changes nothing."""

    def __init__(self, sim: Any, *, dry_run: bool = False):
        self.sim = sim
        self.dry_run = dry_run
        self.calls: list[tuple[str, str]] = []

    def dry_run_twin(self) -> SimResizer:
        return SimResizer(self.sim, dry_run=True)

    def resize(self, order: ResizeOrder) -> ResizeResult:
        res = self._resize(order)
        self.calls.append((order.pod, res.outcome))
        return res

    def _resize(self, o: ResizeOrder) -> ResizeResult:
        def out(outcome: ResizeOutcome, message: str) -> ResizeResult:
            return ResizeResult(
                o.pod, outcome, o.from_cpu_request_m, o.cpu_request_m, None, o.reason, o.workload, message
            )

        fn = getattr(self.sim, "resize", None)
        if not callable(fn):
            return out("unsupported", "this simulation has no in-place resize (Simulation.resize)")
        change = f"{o.from_cpu_request_m}m -> {o.cpu_request_m}m CPU request"
        if self.dry_run:
            return out("dry_run", f"dry run: would resize in place {change}")
        try:
            fn(o.pod, cpu_request_m=int(o.cpu_request_m))
        except KeyError as exc:
            return out("not_found", f"no such pod in the simulation: {exc}")
        except ValueError as exc:
            return out("error", f"the simulation refused the resize: {' '.join(str(exc).split())[:300]}")
        return out("resized", f"resized in place: {change}")
