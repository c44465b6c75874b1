"""Leader election on a ``coordination.k8s.io/v1`` Lease, for the descheduler's ``--interval`` mode.

With two or more replicas of the interval-mode Deployment, exactly one runs cycles: the holder of the
Lease. The algorithm is client-go's ``tools/leaderelection`` (``leaderelection.go``,
``resourcelock/leaselock.go``), reimplemented small:

- a candidate reads the Lease; absent → it creates it holding it; held by someone else → it waits until
  it has seen the *same* record unchanged for ``leaseDurationSeconds`` on its own clock (clock skew between
  machines does not matter: only locally observed durations are compared); empty holder (a released
  lease) → it takes it at once;
- every write is a create or an update carrying the ``resourceVersion`` read (optimistic concurrency): of
  two candidates racing, the API server accepts one and answers 409 Conflict to the other;
- the leader renews every ``retryPeriodSeconds``; when no renewal has succeeded for
  ``renewDeadlineSeconds`` it stops leading (``renewDeadline < leaseDuration``, so it stops before anyone
  else may take over). :meth:`LeaderElector.is_leader` is only true inside that window, and
  :class:`LeaderGatedEvictor` checks it before every eviction;
- on a clean stop the leader releases the Lease (empty holder, ``leaseDurationSeconds: 1``), so a
  standby takes over at its next retry instead of after a whole lease duration.

:func:`lead` ties it together: block until leading, run the work with an event that is set when
leadership is lost or the process is stopped, release. Like kube-scheduler and kube-controller-manager,
the descheduler exits after losing the lease and lets the Deployment restart it as a fresh candidate.

:class:`KubeLeaseBackend` is the Lease API through the ``kubernetes`` client (this module and the
``kube.py`` modules are the only ones importing it; see tests/unit/test_layering.py). Tests use any
object with the :class:`LeaseBackend` methods.
"""

from __future__ import annotations

import json
import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from policy.state import EvictionResult, PodInfo

from .evict import Evictor

__all__ = [
    "LeaseRecord",
    "LeaseError",
    "LeaseConflict",
    "LeaseBackend",
    "LeaderElector",
    "LeaderGatedEvictor",
    "lead",
    "elector_from_config",
    "KubeLeaseBackend",
    "default_identity",
    "default_lease_namespace",
    "JITTER_FACTOR",
]

log = logging.getLogger(__name__)

#: client-go's ``JitterFactor``: retries sleep ``retryPeriod * (1 + U[0, 1.2))``; also the validation
#: rule ``renewDeadline > JITTER_FACTOR * retryPeriod``.
JITTER_FACTOR = 1.2

SERVICEACCOUNT_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


class LeaseError(RuntimeError):
    """The Lease could not be read or written (network, authorization, server error)."""


class LeaseConflict(LeaseError):
    """A create found the Lease already there, or an update carried a stale ``resourceVersion`` (409)."""


@dataclass(frozen=True)
class LeaseRecord:
    """The election fields of a Lease's spec.

    ``holder``: ``holderIdentity`` (``""`` = released / nobody); ``lease_duration_s``:
    ``leaseDurationSeconds`` (whole seconds on the wire); ``acquire_time`` / ``renew_time``: RFC 3339
    micro-time strings as stored (informational: candidates compare their own clock, never these);
    ``transitions``: ``leaseTransitions``; ``resource_version``: the object's ``resourceVersion`` as read
    (``None`` for a record not yet written).
    """

    holder: str
    lease_duration_s: int
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0
    resource_version: str | None = None

    def same_election_state(self, other: LeaseRecord | None) -> bool:
        """True when ``other`` is the same write (the same resourceVersion, or the same fields)."""
        if other is None:
            return False
        if self.resource_version is not None and other.resource_version is not None:
            return self.resource_version == other.resource_version
        return replace(self, resource_version=None) == replace(other, resource_version=None)


class LeaseBackend(Protocol):
    """The slice of the Lease API the elector uses (one named Lease, ``namespace/name``)."""

    namespace: str
    name: str

    def get(self) -> LeaseRecord | None:
        """The Lease's record, or ``None`` when it does not exist. Raises :class:`LeaseError`."""
        ...

    def create(self, record: LeaseRecord) -> LeaseRecord:
        """Create the Lease; returns it as stored. Raises :class:`LeaseConflict` if it exists."""
        ...

    def update(self, record: LeaseRecord) -> LeaseRecord:
        """Replace the Lease's spec, only if its resourceVersion is still ``record.resource_version``;
        returns it as stored. Raises :class:`LeaseConflict` otherwise."""
        ...


def micro_time(t_s: float) -> str:
    """A unix time as a Kubernetes ``MicroTime`` (``2006-01-02T15:04:05.000000Z``, always 6 digits)."""
    return datetime.fromtimestamp(t_s, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """One candidate in the election for one Lease.

    ``backend``: the Lease (see :class:`LeaseBackend`); ``identity``: this candidate's unique id (see
    :func:`default_identity`); ``lease_duration_s`` (> ``renew_deadline_s``), ``renew_deadline_s``
    (> ``JITTER_FACTOR * retry_period_s``), ``retry_period_s`` (> 0): client-go's meanings and defaults
    (15 s, 10 s, 2 s). ``clock``: monotonic seconds, for every duration; ``wall``: unix seconds, only
    for the times written into the Lease. Raises ``ValueError`` for an impossible timing.
    """

    def __init__(
        self,
        backend: LeaseBackend,
        identity: str,
        *,
        lease_duration_s: float = 15.0,
        renew_deadline_s: float = 10.0,
        retry_period_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ):
        if not identity:
            raise ValueError("identity: must not be empty")
        if not retry_period_s > 0:
            raise ValueError(f"retryPeriodSeconds: must be > 0 (got {retry_period_s!r})")
        if not renew_deadline_s > JITTER_FACTOR * retry_period_s:
            raise ValueError(
                f"renewDeadlineSeconds: must be > {JITTER_FACTOR} x retryPeriodSeconds "
                f"(got {renew_deadline_s!r} with retryPeriodSeconds {retry_period_s!r})"
            )
        if not lease_duration_s > renew_deadline_s:
            raise ValueError(
                f"leaseDurationSeconds: must be > renewDeadlineSeconds "
                f"(got {lease_duration_s!r} with renewDeadlineSeconds {renew_deadline_s!r})"
            )
        self.backend = backend
        self.identity = identity
        self.lease_duration_s = lease_duration_s
        self.renew_deadline_s = renew_deadline_s
        self.retry_period_s = retry_period_s
        self.clock = clock
        self.wall = wall
        self._observed: LeaseRecord | None = None
        self._observed_at: float = 0.0
        self._renewed_at: float | None = None  # clock() just before the last successful write
        self._lock = threading.Lock()

    # -- one step -------------------------------------------------------------------------------------

    @property
    def observed(self) -> LeaseRecord | None:
        """The last Lease record read or written."""
        return self._observed

    @property
    def leader(self) -> str | None:
        """The holder of the last record observed (``None`` if none, ``""`` if released)."""
        return self._observed.holder if self._observed is not None else None

    def is_leader(self) -> bool:
        """True while this candidate holds the Lease and its last successful renewal is younger than
        ``renew_deadline_s``: inside that window no other candidate can have taken the Lease."""
        with self._lock:
            return (
                self._renewed_at is not None
                and self._observed is not None
                and self._observed.holder == self.identity
                and self.clock() - self._renewed_at < self.renew_deadline_s
            )

    def try_acquire_or_renew(self) -> bool:
        """One round of client-go's ``tryAcquireOrRenew``: read the Lease and take or renew it when
        allowed. Returns True when this candidate holds it afterwards. A conflict (another writer was
        faster) or any :class:`LeaseError` returns False (logged); nothing is retried here."""
        with self._lock:
            now = self.clock()
            try:
                current = self.backend.get()
                if current is None:
                    t = micro_time(self.wall())
                    stored = self.backend.create(LeaseRecord(self.identity, _whole_s(self.lease_duration_s), t, t, 0))
                    self._note_written(stored, now)
                    return True
                if not current.same_election_state(self._observed):
                    self._observed, self._observed_at = current, now
                held_by_other = current.holder not in ("", self.identity)
                if held_by_other and self._observed_at + current.lease_duration_s > now:
                    return False
                t = micro_time(self.wall())
                if current.holder == self.identity:
                    new = replace(current, lease_duration_s=_whole_s(self.lease_duration_s), renew_time=t)
                else:
                    new = replace(
                        current,
                        holder=self.identity,
                        lease_duration_s=_whole_s(self.lease_duration_s),
                        acquire_time=t,
                        renew_time=t,
                        transitions=current.transitions + 1,
                    )
                stored = self.backend.update(new)
                self._note_written(stored, now)
                if current.holder != self.identity:
                    log.info("leader election: %s acquired lease (was %r)", self.identity, current.holder)
                return True
            except LeaseConflict as exc:
                log.info("leader election: %s lost a race for the lease: %s", self.identity, exc)
                return False
            except LeaseError as exc:
                log.warning("leader election: %s could not read or write the lease: %s", self.identity, exc)
                return False

    def _note_written(self, stored: LeaseRecord, now: float) -> None:
        self._observed, self._observed_at, self._renewed_at = stored, now, now

    def release(self) -> bool:
        """Give the Lease up if this candidate holds it (holder ``""``, ``leaseDurationSeconds: 1``), so a
        standby takes it at once. Returns True when released; False when not held or the write failed."""
        with self._lock:
            held = self._observed is not None and self._observed.holder == self.identity
            self._renewed_at = None
            if not held:
                return False
            assert self._observed is not None
            t = micro_time(self.wall())
            try:
                stored = self.backend.update(replace(self._observed, holder="", lease_duration_s=1, renew_time=t))
            except LeaseError as exc:
                log.warning("leader election: %s could not release the lease: %s", self.identity, exc)
                return False
            self._observed, self._observed_at = stored, self.clock()
            log.info("leader election: %s released the lease", self.identity)
            return True

    # -- loops ----------------------------------------------------------------------------------------

    def acquire(self, stop: threading.Event) -> bool:
        """Try every ``retry_period_s`` (jittered) until this candidate leads (True) or ``stop`` is set
        (False)."""
        logged = False
        while not stop.is_set():
            if self.try_acquire_or_renew():
                return True
            if not logged:
                log.info("leader election: %s is a standby; the lease is held by %r", self.identity, self.leader)
                logged = True
            stop.wait(self.retry_period_s * (1.0 + random.random() * JITTER_FACTOR))
        return False

    def renew_until_lost(self, stop: threading.Event, done: threading.Event | None = None) -> bool:
        """Renew every ``retry_period_s`` while leading. Returns True when leadership was lost (no
        successful renewal for ``renew_deadline_s``, or someone else holds the Lease); False when ``stop``
        was set (noticed at once) or ``done`` was set (noticed at the next renewal) first."""
        while not stop.wait(self.retry_period_s):
            if done is not None and done.is_set():
                return False
            if self.try_acquire_or_renew():
                continue
            if not self.is_leader():
                log.error("leader election: %s lost the lease (holder now %r)", self.identity, self.leader)
                return True
        return False


LeadOutcome = Literal["stopped", "lost"]


def lead(elector: LeaderElector, work: Callable[[threading.Event], None], stop: threading.Event) -> LeadOutcome:
    """Block until ``elector`` leads (or ``stop`` is set: ``"stopped"``), then call ``work(leading_over)``
    in this thread while a daemon thread renews the Lease. ``leading_over`` is set when the Lease is lost
    or ``stop`` is set; ``work`` must return soon after. Then the Lease is released (if still held).
    Returns ``"lost"`` when leadership was lost (the caller should exit), else ``"stopped"``."""
    if not elector.acquire(stop):
        return "stopped"
    over = threading.Event()
    lost = threading.Event()

    def renew() -> None:
        if elector.renew_until_lost(stop, over):
            lost.set()
        over.set()

    renewer = threading.Thread(target=renew, name="hrl-leader-renew", daemon=True)
    renewer.start()
    log.info("leader election: %s started leading", elector.identity)
    try:
        work(over)
    finally:
        over.set()
        renewer.join(elector.retry_period_s + elector.renew_deadline_s)
        if not lost.is_set():
            elector.release()
    return "lost" if lost.is_set() else "stopped"


@dataclass
class LeaderGatedEvictor:
    """An :class:`~descheduler.evict.Evictor` that evicts only while ``elector.is_leader()``; otherwise it
    answers ``error`` ("not the leader") without calling ``inner``: a replica that may have lost the
    Lease evicts nothing (fail closed)."""

    inner: Evictor
    elector: LeaderElector

    def evict(self, pod: PodInfo, reason: str) -> EvictionResult:
        if not self.elector.is_leader():
            return EvictionResult(
                pod.key,
                "error",
                f"not evicted: {self.elector.identity} does not hold the leader-election lease any more",
            )
        return self.inner.evict(pod, reason)


def _whole_s(seconds: float) -> int:
    return max(1, int(round(seconds)))


def default_identity() -> str:
    """``<hostname>_<8 hex>``: the pod name (a Pod's hostname) plus a random suffix, as client-go
    components do, so two processes on one host never share an identity."""
    host = os.environ.get("POD_NAME") or socket.gethostname() or "hrl-descheduler"
    return f"{host}_{uuid.uuid4().hex[:8]}"


def default_lease_namespace() -> str:
    """``$POD_NAMESPACE``, else the namespace of the Pod's ServiceAccount
    (``/var/run/secrets/kubernetes.io/serviceaccount/namespace``), else ``default``."""
    ns = os.environ.get("POD_NAMESPACE", "").strip()
    if ns:
        return ns
    try:
        ns = Path(SERVICEACCOUNT_NAMESPACE_FILE).read_text(encoding="utf-8").strip()
    except OSError:
        ns = ""
    return ns or "default"


def elector_from_config(config: Any, api_client: Any = None) -> LeaderElector:
    """The :class:`LeaderElector` a :class:`descheduler.config.LeaderElectionConfig` describes, on a
    :class:`KubeLeaseBackend` through ``api_client`` (``leaseNamespace: null`` → :func:`default_lease_namespace`,
    ``identity: null`` → :func:`default_identity`)."""
    namespace = config.lease_namespace or default_lease_namespace()
    backend = KubeLeaseBackend(namespace, config.lease_name, api_client)
    return LeaderElector(
        backend,
        config.identity or default_identity(),
        lease_duration_s=config.lease_duration_seconds,
        renew_deadline_s=config.renew_deadline_seconds,
        retry_period_s=config.retry_period_seconds,
    )


# -- the Lease API through the kubernetes client ---------------------------------------------------------


class KubeLeaseBackend:
    """:class:`LeaseBackend` for the Lease ``namespace/name`` through ``kubernetes.client.CoordinationV1Api``.

    ``api_client``: a ``kubernetes.client.ApiClient`` (e.g. from ``kubernetes.config.new_client_from_config``
    or in-cluster configuration); ``None`` = the client library's default configuration. Requests carry a
    ``request_timeout_s`` timeout. Needs RBAC ``get, update`` on the named Lease and ``create`` on leases in
    the namespace (manifests/base/descheduler/rbac.yaml). Times are written as ``MicroTime`` strings
    (6 fractional digits, as the API server requires).
    """

    def __init__(self, namespace: str, name: str, api_client: Any = None, *, request_timeout_s: float = 5.0):
        from kubernetes import client

        self.namespace = namespace
        self.name = name
        self.request_timeout_s = request_timeout_s
        self._api = client.CoordinationV1Api(api_client)

    def _call(self, what: str, fn: Callable[..., Any], *args: Any) -> dict[str, Any]:
        from kubernetes.client.exceptions import ApiException

        try:
            resp = fn(*args, _preload_content=False, _request_timeout=self.request_timeout_s)
            return json.loads(resp.data)
        except ApiException as exc:
            if exc.status == 404 and what == "get":
                return {}
            reason = _api_reason(exc)
            if exc.status == 409:
                raise LeaseConflict(f"{what} lease {self.namespace}/{self.name}: conflict: {reason}") from exc
            raise LeaseError(f"{what} lease {self.namespace}/{self.name}: HTTP {exc.status}: {reason}") from exc
        except (OSError, ValueError) as exc:  # connection errors (urllib3 errors are OSError/ValueError)
            raise LeaseError(f"{what} lease {self.namespace}/{self.name}: {type(exc).__name__}: {exc}") from exc
        except Exception as exc:
            raise LeaseError(f"{what} lease {self.namespace}/{self.name}: {type(exc).__name__}: {exc}") from exc

    def get(self) -> LeaseRecord | None:
        obj = self._call("get", self._api.read_namespaced_lease, self.name, self.namespace)
        return _record(obj) if obj else None

    def create(self, record: LeaseRecord) -> LeaseRecord:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": _spec(record),
        }
        return _record(self._call("create", self._api.create_namespaced_lease, self.namespace, body))

    def update(self, record: LeaseRecord) -> LeaseRecord:
        if record.resource_version is None:
            raise LeaseConflict(f"update lease {self.namespace}/{self.name}: no resourceVersion to update from")
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace, "resourceVersion": record.resource_version},
            "spec": _spec(record),
        }
        return _record(self._call("update", self._api.replace_namespaced_lease, self.name, self.namespace, body))


def _spec(r: LeaseRecord) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "holderIdentity": r.holder,
        "leaseDurationSeconds": int(r.lease_duration_s),
        "leaseTransitions": int(r.transitions),
    }
    if r.acquire_time:
        spec["acquireTime"] = r.acquire_time
    if r.renew_time:
        spec["renewTime"] = r.renew_time
    return spec


def _record(obj: dict[str, Any]) -> LeaseRecord:
    spec = obj.get("spec") or {}
    return LeaseRecord(
        holder=str(spec.get("holderIdentity") or ""),
        lease_duration_s=int(spec.get("leaseDurationSeconds") or 0),
        acquire_time=spec.get("acquireTime"),
        renew_time=spec.get("renewTime"),
        transitions=int(spec.get("leaseTransitions") or 0),
        resource_version=(obj.get("metadata") or {}).get("resourceVersion"),
    )


def _api_reason(exc: Any) -> str:
    try:
        return str(json.loads(exc.body).get("message") or exc.reason)
    except (TypeError, ValueError, AttributeError):
        return str(getattr(exc, "reason", "") or exc)
