"""How a live input stands (off, ok, partial, stale, failing) and how the components say so: one
:class:`InputStatus` per input, Prometheus metrics per input (:class:`InputMetrics`), and one log line per change of
state (:class:`InputHealth`), never one per read.

States (:data:`STATES`):

========  ==========================================================================================================
``off``   no source configured: the documented fallbacks apply (requests for CPU use, the call graph for rates)
``pending`` configured, not read yet (start-up)
``ok``    the last reading is younger than ``maxAgeSeconds`` and covers what it should
``partial`` fresh, but some pods (services) it should cover are missing: those count as not measured
``stale`` the newest measurement is older than ``maxAgeSeconds`` (the source stopped updating, or reads keep
          failing): the reading is not used
``error`` the source could not be read and there is no usable reading: not used
========  ==========================================================================================================

``ok`` and ``partial`` are usable (:attr:`InputStatus.usable`).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, get_args

from prometheus_client import CollectorRegistry, Counter, Gauge

__all__ = [
    "INPUTS",
    "STATES",
    "InputName",
    "InputState",
    "InputStatus",
    "InputMetrics",
    "InputHealth",
]

InputName = Literal["resource_usage", "service_signals"]
#: The live inputs: pod (and node) CPU and memory use; per-service request rate, latency and refused share.
INPUTS: tuple[str, ...] = get_args(InputName)
InputState = Literal["off", "pending", "ok", "partial", "stale", "error"]
STATES: tuple[str, ...] = get_args(InputState)
_USABLE = ("ok", "partial")


@dataclass(frozen=True)
class InputStatus:
    """Where one live input stands. ``input``: one of :data:`INPUTS`; ``source``: the configured URI (``""`` when
    off); ``state``: one of :data:`STATES`; ``taken_at_s``: unix seconds of the newest measurement in use or last
    seen (``None``: none yet); ``detail``: one line, why (empty when ok); ``measured`` / ``missing``: pods (services)
    measured / expected and absent in the last reading."""

    input: str
    source: str
    state: str
    taken_at_s: float | None = None
    detail: str = ""
    measured: int = 0
    missing: int = 0

    @property
    def usable(self) -> bool:
        """True when the reading is used (``ok`` or ``partial``)."""
        return self.state in _USABLE

    def age_s(self, now_s: float) -> float:
        """Seconds from the newest measurement to ``now_s`` (unix); ``inf`` without one, ``nan`` when off."""
        if self.state == "off":
            return math.nan
        if self.taken_at_s is None:
            return math.inf
        return max(0.0, now_s - self.taken_at_s)

    def line(self, now_s: float) -> str:
        """One line for logs, ``/readyz`` and reports: ``resource_usage: stale (prometheus+cadvisor://p:9090, age
        412 s): ...``."""
        if self.state == "off":
            return f"{self.input}: off ({self.detail})" if self.detail else f"{self.input}: off"
        age = self.age_s(now_s)
        age_text = "never measured" if math.isinf(age) else f"age {age:.0f} s"
        head = f"{self.input}: {self.state} ({self.source}, {age_text}"
        if self.state in _USABLE:
            head += f", {self.measured} measured" + (f", {self.missing} missing" if self.missing else "")
        return head + ")" + (f": {self.detail}" if self.detail else "")

    def to_json(self, now_s: float) -> dict[str, Any]:
        """Stable keys: ``input, source, state, usable, age_s`` (null when never measured or off), ``measured,
        missing, detail``."""
        age = self.age_s(now_s)
        return {
            "input": self.input,
            "source": self.source,
            "state": self.state,
            "usable": self.usable,
            "age_s": None if not math.isfinite(age) else round(age, 3),
            "measured": self.measured,
            "missing": self.missing,
            "detail": self.detail,
        }


class InputMetrics:
    """The live inputs' metrics, registered once in ``registry``:

    - ``hrl_metrics_source_state{source, state}``: 1 for the input's current state, 0 for the others;
    - ``hrl_metrics_source_age_seconds{source}``: seconds since its newest measurement, computed at scrape time
      (+Inf when never measured, NaN when off);
    - ``hrl_metrics_source_reads_total{source, outcome}``: reads (round trips), ``ok`` or ``error``;
    - ``hrl_metrics_source_measured{source}`` / ``hrl_metrics_source_missing{source}``: pods (services) measured /
      missing in the last reading.

    ``source`` is the input's name (``resource_usage``, ``service_signals``)."""

    def __init__(self, registry: CollectorRegistry):
        self.registry = registry
        self.state = Gauge(
            "hrl_metrics_source_state",
            "1 for the current state of each live input (off, pending, ok, partial, stale, error)",
            ["source", "state"],
            registry=registry,
        )
        self.age = Gauge(
            "hrl_metrics_source_age_seconds",
            "Seconds since the newest measurement of each live input (+Inf: never measured, NaN: off)",
            ["source"],
            registry=registry,
        )
        self.reads = Counter(
            "hrl_metrics_source_reads",
            "Reads (one round trip each) of each live input, by outcome (ok, error)",
            ["source", "outcome"],
            registry=registry,
        )
        self.measured = Gauge(
            "hrl_metrics_source_measured",
            "Pods (resource_usage) or services (service_signals) measured in the last reading",
            ["source"],
            registry=registry,
        )
        self.missing = Gauge(
            "hrl_metrics_source_missing",
            "Pods (services) the last reading should have covered and did not",
            ["source"],
            registry=registry,
        )

    def bind(self, health: InputHealth) -> None:
        """Export ``health`` (its age computed at scrape time)."""
        name = health.input
        self.age.labels(source=name).set_function(lambda: health.status.age_s(health.clock()))
        for o in ("ok", "error"):
            self.reads.labels(source=name, outcome=o)
        self.update(health.status)

    def update(self, st: InputStatus) -> None:
        for s in STATES:
            self.state.labels(source=st.input, state=s).set(1.0 if s == st.state else 0.0)
        self.measured.labels(source=st.input).set(st.measured)
        self.missing.labels(source=st.input).set(st.missing)


class InputHealth:
    """The current :class:`InputStatus` of one input, its metrics, and one log line per change of state (WARNING
    into ``stale``/``error``/``partial``; INFO into ``ok``, ``pending`` and ``off``, a configuration choice said once
    at start). ``clock``: unix seconds."""

    def __init__(
        self,
        input: str,
        source: str,
        *,
        logger: logging.Logger | None = None,
        metrics: InputMetrics | None = None,
        clock: Callable[[], float] = time.time,
    ):
        if input not in INPUTS:
            raise ValueError(f"input: expected one of {', '.join(INPUTS)}, got {input!r}")
        self.input = input
        self.source = source
        self.log = logger or logging.getLogger("policy.live")
        self.clock = clock
        self._lock = threading.Lock()
        self.status = InputStatus(input, source, "pending" if source else "off")
        self._logged: str | None = None
        self.changes = 0
        self.metrics: InputMetrics | None = None
        if metrics is not None:
            self.attach(metrics)

    def attach(self, metrics: InputMetrics) -> None:
        """Export through ``metrics`` from now on."""
        self.metrics = metrics
        metrics.bind(self)

    def read(self, ok: bool) -> None:
        """Count one read (``ok`` or not)."""
        if self.metrics is not None:
            self.metrics.reads.labels(source=self.input, outcome="ok" if ok else "error").inc()

    def set(self, status: InputStatus) -> None:
        """Make ``status`` current; log a line when its state differs from the last logged one."""
        with self._lock:
            self.status = status
            changed = status.state != self._logged
            if changed:
                self._logged = status.state
                self.changes += 1
        if self.metrics is not None:
            self.metrics.update(status)
        if changed:
            level = logging.WARNING if status.state in ("stale", "error", "partial") else logging.INFO
            self.log.log(level, "live input %s", status.line(self.clock()))
