"""The live inputs as the components hold them: :class:`UsageInput` (pod CPU and memory use, applied to every
snapshot), :class:`SignalsInput` (per-service request rate, latency and refused share), :class:`LiveInputs` (both, read
once per descheduling cycle) and :class:`UsageRefresher` (the extender's background reader: use reaches the index
through the watch side, never a request).

Freshness: a reading is used while its newest measurement is at most ``max_age_s`` old (``maxAgeSeconds``); a read
that fails keeps the last good reading until then. An unusable input (``stale``, ``error``) is dropped, not guessed:
no pod gets a use and no service a signal, and the consumers fall back as :data:`policy.contract.FEATURE_CONTRACT`
documents (the requests stand in for use; the call graph's rates for arrivals; the latency and refused features read
0 with ``metrics_known`` 0). What the descheduler refuses to plan without them is ``descheduler.inputs``' business.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from policy.state import ClusterSnapshot, ServiceSignals
from policy.topology.common import TopologyError

from .health import InputHealth, InputMetrics, InputStatus
from .usage import (
    METRICS_API,
    MetricsApiUsage,
    UsageApplier,
    UsageReading,
    UsageSource,
    UsageUnavailable,
    parse_usage_uri,
)

__all__ = [
    "open_usage_source",
    "open_signals_source",
    "SignalsSource",
    "UsageInput",
    "SignalsInput",
    "LiveInputs",
    "UsageRefresher",
    "signal_readers",
]

log = logging.getLogger("policy.live")

#: What an input without a source says (the components log it once, /readyz and the reports show it).
OFF_USAGE = "no source configured (metricsSources.resourceUsage.uri): requests stand in for CPU use"
OFF_SIGNALS = (
    "no source configured (metricsSources.serviceSignals.uri): arrivals from the call graph, "
    "latency and refused share unknown"
)


class SignalsSource(Protocol):
    """What :class:`SignalsInput` reads: :class:`policy.topology.prometheus.PrometheusSource` (one round trip per
    :meth:`fetch_service_signals`)."""

    name: str

    def fetch_service_signals(self, time_s: float | None = None) -> tuple[dict[str, ServiceSignals], float | None]: ...

    def close(self) -> None: ...


def open_usage_source(uri: str, metrics_api: Callable[[], Any] | None = None, client: Any = None) -> UsageSource:
    """The source of a ``resourceUsage.uri`` (:func:`policy.live.parse_usage_uri`): ``metrics-api`` reads through
    ``metrics_api`` (the Metrics API's fetch callable, :class:`policy.kube.MetricsApiReader`; required then), a
    ``prometheus+cadvisor://`` URI through :class:`policy.live.prometheus.PrometheusUsage` (``client``: an
    ``httpx.Client``). Raises ``ValueError`` naming the URI and the bad part."""
    parsed = parse_usage_uri(uri)
    if parsed.kind == METRICS_API:
        if metrics_api is None:
            raise ValueError(f"{uri}: the Metrics API is read through the Kubernetes client (kubernetes.enabled)")
        return MetricsApiUsage(metrics_api)
    from .prometheus import prometheus_usage  # deferred: httpx, only for a Prometheus source

    return prometheus_usage(parsed, client)


def open_signals_source(uri: str, client: Any = None) -> SignalsSource:
    """The source of a ``serviceSignals.uri``: the call-graph source's URI form
    (``prometheus+istio|linkerd|otel[+https]://HOST:PORT[/PREFIX]?window=1m&namespace=NS``,
    :func:`policy.topology.prometheus.source_from_uri`), with the window defaulting to 1m (the simulator's minute).
    Raises ``ValueError`` naming the URI and the bad part."""
    from policy.topology.prometheus import source_from_uri  # deferred: httpx, only for a Prometheus source

    return source_from_uri(uri, client, default_window="1m")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]


class _Input:
    """What both inputs share: the source (``None``: off), the age past which a reading is not used, the clock and the
    health (off from the start without a source)."""

    input = ""
    off_detail = ""

    def __init__(
        self,
        source: Any,
        *,
        max_age_s: float = 120.0,
        clock: Callable[[], float] = time.time,
        logger: logging.Logger | None = None,
        metrics: InputMetrics | None = None,
    ):
        if not (math.isfinite(max_age_s) and max_age_s > 0):
            raise ValueError(f"max_age_s: expected a number of seconds > 0, got {max_age_s!r}")
        self.source = source
        self.max_age_s = float(max_age_s)
        self.clock = clock
        name = source.name if source is not None else ""
        self.health = InputHealth(self.input, name, logger=logger, metrics=metrics, clock=clock)
        self.error = ""
        self.reads = 0
        if source is None:
            self.health.set(InputStatus(self.input, "", "off", detail=self.off_detail))

    @property
    def configured(self) -> bool:
        return self.source is not None

    def _attempt(self, read: Callable[[], Any], errors: type[Exception] | tuple[type[Exception], ...]) -> Any:
        """One read (one round trip): its answer, or ``None`` after a failure (``errors``), which is kept in ``error``
        and counted."""
        self.reads += 1
        try:
            out = read()
        except errors as exc:
            self.error = _one_line(exc)
            self.health.read(False)
            return None
        self.error = ""
        self.health.read(True)
        return out

    def _unusable(self, taken_at_s: float | None, have_reading: bool) -> InputStatus:
        """The status without a usable reading: stale (one too old), error (a failed read, nothing to use), pending."""
        name = self.source.name if self.source is not None else ""
        failing = f"last read failed: {self.error}" if self.error else ""
        if have_reading:
            detail = f"newest measurement older than maxAgeSeconds {self.max_age_s:g}: not used"
            return InputStatus(self.input, name, "stale", taken_at_s, "; ".join(x for x in (detail, failing) if x))
        if self.error:
            return InputStatus(self.input, name, "error", None, failing + ": not used")
        return InputStatus(self.input, name, "pending", None, "not read yet")

    def close(self) -> None:
        if self.source is not None:
            self.source.close()


class UsageInput(_Input):
    """Pod CPU and memory use from ``source`` (``None``: off), applied to snapshots.

    :meth:`refresh` reads the source once (one round trip); :meth:`apply` puts the newest usable reading on a snapshot
    (:class:`policy.live.UsageApplier`) and sets :attr:`health` from what it found. ``max_age_s``: a reading whose
    newest measurement is older is not used (> 0). ``clock``: unix seconds. Thread-safe for one refreshing thread and
    one applying thread."""

    input = "resource_usage"
    off_detail = OFF_USAGE

    def __init__(self, source: UsageSource | None, **kw: Any):
        super().__init__(source, **kw)
        self.source: UsageSource | None = source
        self.applier = UsageApplier()
        self.reading: UsageReading | None = None
        self.read_at_s: float | None = None

    def refresh(self) -> bool:
        """Read the source once; ``True`` on success. A failure keeps the last good reading (used until it is
        ``max_age_s`` old) and is shown in the status."""
        if self.source is None:
            return False
        now = self.clock()
        reading = self._attempt(self.source.read, UsageUnavailable)
        if reading is None:
            return False
        if reading.taken_at_s is None:  # an answer measuring nothing is current: every pod is not measured yet
            reading = UsageReading(reading.cpu_m, reading.memory_bytes, now, reading.window_s, reading.rejected)
        self.reading, self.read_at_s = reading, now
        return True

    def usable_reading(self, now_s: float | None = None) -> UsageReading | None:
        """The reading in use at ``now_s``: the last good one when at most ``max_age_s`` old, else ``None``."""
        r = self.reading
        if r is None or r.taken_at_s is None:
            return None
        now = self.clock() if now_s is None else now_s
        return r if now - r.taken_at_s <= self.max_age_s else None

    def apply(self, snapshot: ClusterSnapshot) -> ClusterSnapshot:
        """``snapshot`` with the usable reading's use on its pods and nodes (none when off, stale or failing)."""
        if self.source is None:
            return self.applier.apply(snapshot, None)[0]
        now = self.clock()
        reading = self.reading
        usable = self.usable_reading(now)
        out, stats = self.applier.apply(snapshot, usable)
        name = self.source.name
        failing = f"last read failed: {self.error}" if self.error else ""
        if usable is not None:
            notes = []
            if stats.missing:
                notes.append(f"{stats.missing} running pod(s) older than the window have no measurement")
            if usable.rejected:
                notes.append(f"{usable.rejected} item(s) of the answer could not be read")
            if failing:
                notes.append(failing)
            state = "partial" if stats.missing or usable.rejected else "ok"
            st = InputStatus(
                "resource_usage", name, state, usable.taken_at_s, "; ".join(notes), stats.measured, stats.missing
            )
        else:
            st = self._unusable(reading.taken_at_s if reading is not None else None, reading is not None)
        self.health.set(st)
        return out


class SignalsInput(_Input):
    """Per-service :class:`~policy.state.ServiceSignals` from ``source`` (``None``: off): :meth:`refresh` reads once
    (one round trip), :meth:`signals` gives the usable ones for a snapshot (``None`` when off, stale or failing) and
    sets :attr:`health`: ``partial`` when a managed Deployment's service has no arrivals in the answer."""

    input = "service_signals"
    off_detail = OFF_SIGNALS

    def __init__(self, source: SignalsSource | None, **kw: Any):
        super().__init__(source, **kw)
        self.source: SignalsSource | None = source
        self.reading: dict[str, ServiceSignals] | None = None
        self.taken_at_s: float | None = None

    def refresh(self) -> bool:
        """Read the source once; ``True`` on success (a failure keeps the last good reading until it is stale)."""
        if self.source is None:
            return False
        now = self.clock()
        got = self._attempt(self.source.fetch_service_signals, TopologyError)  # SourceUnavailable included
        if got is None:
            return False
        signals, last = got
        self.reading, self.taken_at_s = signals, (last if last is not None else now)
        return True

    def signals(self, snapshot: ClusterSnapshot) -> dict[str, ServiceSignals] | None:
        """The usable signals now (``None``: off, stale or failing), with the status set from the services of
        ``snapshot``'s Deployments that have a CPU request (those the autoscalers manage)."""
        if self.source is None:
            return None
        now = self.clock()
        name = self.source.name
        failing = f"last read failed: {self.error}" if self.error else ""
        r, t = self.reading, self.taken_at_s
        if r is not None and t is not None and now - t <= self.max_age_s:
            wanted = {w.service for w in snapshot.workloads if w.kind == "Deployment" and w.pod_requests.cpu_m > 0}
            absent = sorted(s for s in wanted if s not in r or r[s].rps is None)
            notes = []
            if absent:
                shown = ", ".join(absent[:5]) + (", ..." if len(absent) > 5 else "")
                notes.append(f"no arrivals for {len(absent)} managed service(s): {shown}")
            if failing:
                notes.append(failing)
            measured = sum(1 for s in r.values() if s.rps is not None)
            st = InputStatus(
                "service_signals", name, "partial" if absent else "ok", t, "; ".join(notes), measured, len(absent)
            )
            self.health.set(st)
            return r
        self.health.set(self._unusable(t, r is not None))
        return None


def signal_readers(planner: Any) -> list[Any]:
    """The parts of a high-level ``planner`` that read per-service signals (an attribute ``signals`` set before each
    cycle): its autoscaler (the DRPC students, the intent autoscaler) and its intent policy (the learned high level),
    each when present."""
    out = []
    for x in (getattr(planner, "autoscaler", None), getattr(planner, "intent_policy", None)):
        if x is not None and hasattr(x, "signals"):
            out.append(x)
    return out


class LiveInputs:
    """The descheduler's live inputs: ``usage`` and ``signals`` (each possibly off), read once per cycle.

    :meth:`observe` takes a fresh observation of the cluster, reads each configured source once (one round trip
    each; except when :meth:`expect_reread` announced a second observation in the same cycle, which reuses the
    readings), applies the use and hands the signals to ``readers`` (see :func:`signal_readers`; ``None`` when
    unusable). ``last_signals`` and :meth:`statuses` tell what the last observation had."""

    def __init__(self, usage: UsageInput, signals: SignalsInput, readers: Iterable[Any] = ()):
        self.usage = usage
        self.signals = signals
        self.readers = list(readers)
        self.last_signals: Mapping[str, ServiceSignals] | None = None
        self._reuse_next = False

    def expect_reread(self) -> None:
        """The next :meth:`observe` belongs to the same cycle (the re-read before in-place resizes): it reuses the
        readings instead of reading the sources again."""
        self._reuse_next = True

    def observe(self, snapshot: ClusterSnapshot) -> ClusterSnapshot:
        """``snapshot`` (the cluster's objects) with the live inputs applied (see the class docstring)."""
        if self._reuse_next:
            self._reuse_next = False
        else:
            self.usage.refresh()
            self.signals.refresh()
        out = self.usage.apply(snapshot)
        sig = self.signals.signals(out)
        self.last_signals = sig
        for r in self.readers:
            r.signals = sig
        return out

    def wrap(self, observe: Callable[[], ClusterSnapshot]) -> Callable[[], ClusterSnapshot]:
        """``observe`` followed by :meth:`observe` (what a descheduling cycle calls)."""

        def observe_live() -> ClusterSnapshot:
            return self.observe(observe())

        return observe_live

    @property
    def usage_usable(self) -> bool:
        """Whether the last observation carried measured use."""
        return self.usage.health.status.usable

    def statuses(self) -> tuple[InputStatus, ...]:
        return (self.usage.health.status, self.signals.health.status)

    def to_json(self, now_s: float | None = None) -> list[dict[str, Any]]:
        """Both inputs' :meth:`InputStatus.to_json` (the descheduler's report key ``inputs``)."""
        now = self.usage.clock() if now_s is None else now_s
        return [s.to_json(now) for s in self.statuses()]

    def close(self) -> None:
        self.usage.close()
        self.signals.close()


class UsageRefresher:
    """Reads ``usage`` every ``refresh_s`` seconds in a daemon thread (the extender's watch side) and calls
    ``on_update()`` after each attempt, so the snapshot builder re-applies it (a stale reading is dropped on the
    next build too). Requests never wait for it. A context manager; :meth:`stop` joins the thread."""

    def __init__(self, usage: UsageInput, refresh_s: float = 30.0, on_update: Callable[[], None] | None = None):
        if not (math.isfinite(refresh_s) and refresh_s > 0):
            raise ValueError(f"refresh_s: expected a number of seconds > 0, got {refresh_s!r}")
        self.usage = usage
        self.refresh_s = float(refresh_s)
        self.on_update = on_update
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> UsageRefresher:
        if self._thread is None and self.usage.configured:
            self._thread = threading.Thread(target=self._run, name="hrl-usage-refresher", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.usage.refresh()
            if self.on_update is not None:
                try:
                    self.on_update()
                except Exception as exc:  # noqa: BLE001 - the next tick tries again
                    log.warning("usage refresher: on_update failed: %s: %s", type(exc).__name__, exc)
            self._stop.wait(self.refresh_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        self.usage.close()

    def __enter__(self) -> UsageRefresher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
