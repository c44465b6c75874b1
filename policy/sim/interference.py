"""Interference between co-located pods: the more a node's CPU and memory bandwidth are used, the slower
every request on it runs (shared caches, memory controllers, SMT siblings), beyond the CPU-time sharing the
processor-sharing stations already model.

Shape after Erms (Luo et al., "Erms: Efficient Resource Management for Shared Microservices with SLA
Guarantees", ASPLOS 2023), which profiles each microservice's latency as a piecewise-linear function of its
workload, resource usage and the interference of its host (CPU and memory-bandwidth utilisation): here a
request's CPU work on node *n* is multiplied by the node's slowdown

    σ_n = 1 + a_cpu · max(0, U_n − k_cpu) + a_mem · max(0, B_n − k_mem)

with ``U_n`` the node's CPU utilisation (cores in use by app pods, sidecars and background tenants over its
cores, at most 1) and ``B_n`` its memory-bandwidth utilisation (Σ cores in use × bandwidth per busy core of
each, app pods ``app_gbps_per_core``, background tenants ``background_gbps_per_core``, over the node's
``node_gbps``). Below the knees nothing changes; above, the slowdown grows linearly. Because ``U_n`` and
``B_n`` include the slowed work itself, σ is the fixed point of ``σ = f((D σ + B)/C)`` per node (D the app
work at σ = 1), solved by iteration (a contraction while ``a_cpu · D / C < 1``; U is capped at 1).

Parameters (scenario files, PROVENANCE.md): the knees and slopes are documented guesses in the range of the
slowdowns such studies report; a node's memory bandwidth comes from the vendor's channel arithmetic (e.g. 8
DDR4-3200 channels: 8 × 3200 MT/s × 8 B = 204.8 GB/s per socket).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["Interference"]


@dataclass(frozen=True)
class Interference:
    """Slowdown σ_n of the requests on node n (module docstring). ``node_gbps``: memory bandwidth per node
    (GB/s) for a node of ``node_gbps_per_core`` × cores when ``node_gbps`` is None."""

    cpu_knee: float = 0.5
    cpu_slope: float = 0.5
    mem_knee: float = 0.5
    mem_slope: float = 1.0
    node_gbps: float | None = None
    node_gbps_per_core: float = 6.4
    app_gbps_per_core: float = 1.0
    background_gbps_per_core: float = 1.0
    iterations: int = 30

    def __post_init__(self) -> None:
        for k in ("cpu_knee", "mem_knee"):
            v = getattr(self, k)
            if not 0 <= v <= 1:
                raise ValueError(f"interference.{k}: must be in [0, 1], got {v!r}")
        for k in ("cpu_slope", "mem_slope", "app_gbps_per_core", "background_gbps_per_core"):
            v = getattr(self, k)
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"interference.{k}: must be a finite number >= 0, got {v!r}")
        for k in ("node_gbps", "node_gbps_per_core"):
            v = getattr(self, k)
            if v is not None and not (math.isfinite(v) and v > 0):
                raise ValueError(f"interference.{k}: must be a finite number > 0, got {v!r}")

    def slowdown(
        self,
        node_cores: np.ndarray,
        app_cores: np.ndarray,
        other_cores: np.ndarray,
        background_cores: np.ndarray | None = None,
    ) -> np.ndarray:
        """(N,) σ_n. ``app_cores`` (N,): app pods' CPU in use at σ = 1 (it scales with σ); ``other_cores``
        (N,): CPU in use that does not slow down (sidecars; background tenants are ``background_cores``,
        also counted at their memory-bandwidth rate)."""
        C = np.asarray(node_cores, dtype=np.float64)
        D = np.asarray(app_cores, dtype=np.float64)
        bg = np.zeros_like(C) if background_cores is None else np.asarray(background_cores, dtype=np.float64)
        other = np.asarray(other_cores, dtype=np.float64) + bg
        bw = np.full_like(C, self.node_gbps) if self.node_gbps is not None else self.node_gbps_per_core * C
        sigma = np.ones_like(C)
        for _ in range(max(1, self.iterations)):
            used = np.minimum(D * sigma + other, C)
            u = used / C
            app_used = np.maximum(used - other, 0.0)
            b = (app_used * self.app_gbps_per_core + bg * self.background_gbps_per_core) / bw
            new = (
                1.0
                + self.cpu_slope * np.maximum(0.0, u - self.cpu_knee)
                + self.mem_slope * np.maximum(0.0, b - self.mem_knee)
            )
            if np.max(np.abs(new - sigma), initial=0.0) < 1e-9:
                sigma = new
                break
            sigma = new
        return sigma
