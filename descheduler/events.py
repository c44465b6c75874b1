"""Kubernetes Events for what the descheduler does: one per eviction (on the pod), per scale (on the Deployment)
and per loop hold (on the workload's controller), with the reason, as ``kubectl describe`` and
``kubectl get events`` show them.

An :class:`EventRecorder` records one event; the real one (``descheduler.kube.KubeEventRecorder``) creates an
``events.k8s.io/v1`` Event (``reportingController: hrl-scheduler.io/descheduler``), as
kubernetes-sigs/descheduler does for its evictions (reason ``Descheduled``). Recording never fails a cycle: a
recorder swallows its own errors (and counts them). Dry runs record nothing: they change nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

__all__ = ["REPORTING_CONTROLLER", "ObjectRef", "EventRecorder", "MemoryRecorder", "NullRecorder"]

REPORTING_CONTROLLER = "hrl-scheduler.io/descheduler"

EventType = Literal["Normal", "Warning"]


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """The object an event is about (``regarding``): API version, kind, namespace, name and UID."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = ""


@runtime_checkable
class EventRecorder(Protocol):
    """Record one event: ``type`` Normal / Warning, ``reason`` (CamelCase, e.g. ``Descheduled``), ``action``
    (what was done, e.g. ``Evict``) and a one-line ``note`` (at most 1 kB is kept)."""

    def record(self, regarding: ObjectRef, type: EventType, reason: str, action: str, note: str) -> None: ...


@dataclass
class MemoryRecorder:
    """Keeps every event in ``events`` as ``(regarding, type, reason, action, note)`` (tests, dry runs)."""

    events: list[tuple[ObjectRef, str, str, str, str]] = field(default_factory=list)

    def record(self, regarding: ObjectRef, type: EventType, reason: str, action: str, note: str) -> None:
        self.events.append((regarding, type, reason, action, note))


class NullRecorder:
    """Records nothing."""

    def record(self, regarding: ObjectRef, type: EventType, reason: str, action: str, note: str) -> None:
        return None
