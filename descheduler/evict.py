"""Evictors: the one thing that changes the cluster.

An :class:`Evictor` evicts one pod and says what happened as a :class:`policy.state.EvictionResult`:

- ``evicted``: the Eviction API accepted it (policy/v1 ``pods/eviction`` create returned 201);
- ``refused``: a PodDisruptionBudget said no (HTTP 429 TooManyRequests) - an outcome, not an error;
- ``not_found``: the pod is already gone (404);
- ``error``: anything else; the pod is left alone;
- ``dry_run``: it would have been evicted; nothing changed.

Implementations: :class:`DryRunEvictor` here; the Eviction API evictor in ``descheduler/kube.py`` (a later
issue); the simulator's evictor in ``policy.sim`` (structurally the same Protocol; policy cannot import
descheduler). Eviction fails closed: :func:`safe_evict` turns an exception or a malformed answer into
``error``, never into a success.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, get_args, runtime_checkable

from policy.state import EvictionOutcome, EvictionResult, PodInfo

__all__ = ["Evictor", "DryRunEvictor", "EVICTION_OUTCOMES", "safe_evict"]

#: Every outcome an evictor may report, in a stable order (also the metric label values).
EVICTION_OUTCOMES: tuple[str, ...] = get_args(EvictionOutcome)


@runtime_checkable
class Evictor(Protocol):
    """Evict one pod; ``reason`` is a one-line human explanation (for events and logs)."""

    def evict(self, pod: PodInfo, reason: str) -> EvictionResult: ...


@dataclass
class DryRunEvictor:
    """Changes nothing; remembers ``(pod key, reason)`` for every pod it was asked to evict, and answers
    ``dry_run``. The descheduler runs the same cycle with it as with a real evictor."""

    calls: list[tuple[str, str]] = field(default_factory=list)

    def evict(self, pod: PodInfo, reason: str) -> EvictionResult:
        self.calls.append((pod.key, reason))
        return EvictionResult(pod.key, "dry_run", f"dry run: would evict from {pod.node_name}")


def safe_evict(evictor: Evictor, pod: PodInfo, reason: str) -> EvictionResult:
    """Call ``evictor.evict`` and make the answer trustworthy: an exception, a result that is not an
    :class:`EvictionResult`, a result about another pod or an unknown outcome all become ``error``
    (the pod may or may not have been evicted; the caller counts it as not evicted and moves on)."""
    try:
        res = evictor.evict(pod, reason)
    except Exception as exc:  # noqa: BLE001 - fail closed on anything the evictor throws
        return EvictionResult(pod.key, "error", f"evictor raised {type(exc).__name__}: {exc}")
    if not isinstance(res, EvictionResult):
        return EvictionResult(pod.key, "error", f"evictor returned {type(res).__name__}, not an EvictionResult")
    if res.outcome not in EVICTION_OUTCOMES:
        return EvictionResult(pod.key, "error", f"evictor returned unknown outcome {res.outcome!r}")
    if res.pod != pod.key:
        return EvictionResult(pod.key, "error", f"evictor answered about {res.pod!r}, not {pod.key!r}")
    return res
