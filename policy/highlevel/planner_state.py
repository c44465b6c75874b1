"""What the hierarchical planner carries from one period to the next (:class:`HrlState`), JSON round-trip
included: the descheduler may run as a CronJob (a fresh process each cycle) and keeps it in its state file."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from policy.lowlevel import INTENT_SPEC
from policy.state import ServiceGraph

from .drpc import DrpcState

__all__ = ["STATE_VERSION", "HrlState", "service_rates_rps"]


#: Version of :meth:`HrlState.to_json`'s document.
STATE_VERSION = 1


# ---- state kept between periods -----------------------------------------------------------------------


@dataclass
class HrlState:
    """Everything :class:`HierarchicalPolicy` carries from one period to the next (JSON-serialisable).

    - ``rate_times_s``: (T,) times (snapshot ``taken_at_s``) of the recorded rates, oldest first;
    - ``rates_rps``: service → (T,) inbound request rate (requests/s, >= 0) at those times: the sum of the
      measured ``rps`` of the edges calling it (:func:`service_rates_rps`); a service first seen later is
      left-padded with its first value (as the predictor pads a short window);
    - ``last_intent``: the intent of the last plan (``None`` before the first), smoothed against by
      :class:`UtilizationIntent`;
    - ``last_moves_s`` / ``last_targets_s``: when moves / replica targets were last planned (``None``: never);
    - ``last_targets``: the last replica targets (``namespace/name`` → replicas);
    - ``recommendations``: ``namespace/name`` → ``[[t_s, replicas], ...]``, the stand-in autoscaler's
      scale-down stabilisation window;
    - ``autoscaler``: an opaque JSON object the pluggable autoscaler may read and write (e.g. DRPC's
      predictor or actor state);
    - the last intent's detail, kept until the next one (the high level acts once per period, the low levels
      every cycle): ``last_intent_s`` (when it was computed; ``None``: never), ``capacity_targets``
      (service → target CPU utilization of its pods for its autoscaler, in (0, 1]; absent: the autoscaler's
      default), ``colocation_priority`` (service → multiplier >= 0 of ``locality_weight`` for its pods; absent:
      1) and ``move_budget_frac`` (share of the planner's ``max_moves`` it may plan, in [0, 1]);
    - ``last_resizes_s``: when in-place resizes were last planned (``None``: never).
    """

    rate_times_s: list[float] = field(default_factory=list)
    rates_rps: dict[str, list[float]] = field(default_factory=dict)
    last_intent: tuple[float, ...] | None = None
    last_moves_s: float | None = None
    last_targets_s: float | None = None
    last_targets: dict[str, int] = field(default_factory=dict)
    recommendations: dict[str, list[list[float]]] = field(default_factory=dict)
    autoscaler: dict[str, Any] = field(default_factory=dict)
    last_intent_s: float | None = None
    capacity_targets: dict[str, float] = field(default_factory=dict)
    colocation_priority: dict[str, float] = field(default_factory=dict)
    move_budget_frac: float = 1.0
    last_resizes_s: float | None = None

    # ---- rate history --------------------------------------------------------------------------------

    def record_rates(self, graph: ServiceGraph, t_s: float, max_len: int) -> bool:
        """Append the inbound rates of ``graph`` at time ``t_s`` (a second record at the same time replaces
        the first); keeps the last ``max_len`` (>= 1) records. A graph without any measured rate records
        nothing. Returns whether a record was made."""
        rates = service_rates_rps(graph)
        if not rates:
            return False
        if self.rate_times_s and self.rate_times_s[-1] == t_s:
            self.rate_times_s.pop()
            for series in self.rates_rps.values():
                series.pop()
        n = len(self.rate_times_s)
        self.rate_times_s.append(float(t_s))
        for svc, series in self.rates_rps.items():
            series.append(float(rates.get(svc, 0.0)))
        for svc, r in rates.items():
            if svc not in self.rates_rps:
                self.rates_rps[svc] = [float(r)] * (n + 1)
        if len(self.rate_times_s) > max_len:
            cut = len(self.rate_times_s) - max_len
            del self.rate_times_s[:cut]
            for series in self.rates_rps.values():
                del series[:cut]
        return True

    def rates(self, service: str) -> np.ndarray:
        """(T,) float64 recorded inbound rates of ``service`` (requests/s); empty when never measured."""
        return np.asarray(self.rates_rps.get(service, ()), dtype=np.float64)

    def total_rates(self) -> np.ndarray:
        """(T,) float64 sum of every service's recorded inbound rate (requests/s)."""
        if not self.rates_rps:
            return np.zeros(len(self.rate_times_s))
        return np.sum([np.asarray(v, dtype=np.float64) for v in self.rates_rps.values()], axis=0)

    # ---- JSON ------------------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (``{"version": 1, ...}``; every float finite)."""
        return {
            "version": STATE_VERSION,
            "rate_times_s": list(self.rate_times_s),
            "rates_rps": {k: list(v) for k, v in sorted(self.rates_rps.items())},
            "last_intent": None if self.last_intent is None else list(self.last_intent),
            "last_moves_s": self.last_moves_s,
            "last_targets_s": self.last_targets_s,
            "last_targets": dict(sorted(self.last_targets.items())),
            "recommendations": {k: [list(x) for x in v] for k, v in sorted(self.recommendations.items())},
            "autoscaler": self.autoscaler,
            "last_intent_s": self.last_intent_s,
            "capacity_targets": dict(sorted(self.capacity_targets.items())),
            "colocation_priority": dict(sorted(self.colocation_priority.items())),
            "move_budget_frac": self.move_budget_frac,
            "last_resizes_s": self.last_resizes_s,
        }

    @staticmethod
    def from_json(doc: Any) -> HrlState:
        """Parse :meth:`to_json`'s document. Raises ``ValueError`` naming the field and the value for anything
        else: another ``version``, a field :meth:`to_json` does not write, a wrong type, a non-finite number,
        a ``last_intent`` that is not ``len(INTENT_SPEC)`` finite weights >= 0, and an ``autoscaler.drpc``
        section that :meth:`policy.highlevel.DrpcState.from_dict` refuses (e.g. an older layout without
        ``version``). The descheduler drops such a state with a warning and starts fresh."""
        if not isinstance(doc, Mapping):
            raise ValueError(f"planner state: expected an object, got {type(doc).__name__}")
        if doc.get("version") != STATE_VERSION:
            raise ValueError(f"planner state: version: expected {STATE_VERSION}, got {doc.get('version')!r}")
        unknown = sorted(str(k) for k in doc if k not in HrlState().to_json())
        if unknown:
            raise ValueError(
                f"planner state: unknown field(s) {', '.join(unknown)} (got {doc[unknown[0]]!r} for {unknown[0]})"
            )

        def num(v: Any, where: str) -> float:
            if isinstance(v, bool):
                raise ValueError(f"planner state: {where}: expected a number, got {v!r}")
            try:
                x = float(v)
            except (TypeError, ValueError):
                raise ValueError(f"planner state: {where}: expected a number, got {v!r}") from None
            if not math.isfinite(x):
                raise ValueError(f"planner state: {where}: expected a finite number, got {v!r}")
            return x

        def opt(v: Any, where: str) -> float | None:
            return None if v is None else num(v, where)

        def seq(where: str) -> list[Any]:
            v = doc.get(where)
            if v is None:
                return []
            if not isinstance(v, list):
                raise ValueError(f"planner state: {where}: expected a list, got {v!r}")
            return v

        def obj(where: str) -> Mapping[str, Any]:
            v = doc.get(where)
            if v is None:
                return {}
            if not isinstance(v, Mapping):
                raise ValueError(f"planner state: {where}: expected an object, got {v!r}")
            return v

        times = [num(v, f"rate_times_s[{i}]") for i, v in enumerate(seq("rate_times_s"))]
        rates: dict[str, list[float]] = {}
        for svc, series in obj("rates_rps").items():
            if series is not None and not isinstance(series, list):
                raise ValueError(f"planner state: rates_rps.{svc}: expected a list of rates, got {series!r}")
            vals = [num(v, f"rates_rps.{svc}[{i}]") for i, v in enumerate(series or [])]
            if len(vals) != len(times):
                raise ValueError(f"planner state: rates_rps.{svc}: {len(vals)} values for {len(times)} times")
            rates[str(svc)] = vals
        li = doc.get("last_intent")
        intent = None
        if li is not None:  # as planner.intent of the configuration: [locality_weight, balance_weight]
            if not isinstance(li, list) or len(li) != len(INTENT_SPEC):
                raise ValueError(
                    f"planner state: last_intent: expected {len(INTENT_SPEC)} weights "
                    f"[{', '.join(n for n, _d, _v in INTENT_SPEC)}], got {li!r}"
                )
            intent = tuple(num(v, f"last_intent[{i}]") for i, v in enumerate(li))
            if min(intent) < 0:
                raise ValueError(f"planner state: last_intent: expected weights >= 0, got {li!r}")
        targets = {}
        for k, v in obj("last_targets").items():
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"planner state: last_targets.{k}: expected an integer >= 0, got {v!r}")
            targets[str(k)] = v
        recs: dict[str, list[list[float]]] = {}
        for k, v in obj("recommendations").items():
            if v is not None and not isinstance(v, list):
                raise ValueError(f"planner state: recommendations.{k}: expected a list, got {v!r}")
            rows = []
            for i, row in enumerate(v or []):
                if not isinstance(row, (list, tuple)) or len(row) != 2:
                    raise ValueError(f"planner state: recommendations.{k}[{i}]: expected [t_s, replicas], got {row!r}")
                rows.append([num(row[0], f"recommendations.{k}[{i}][0]"), num(row[1], f"recommendations.{k}[{i}][1]")])
            recs[str(k)] = rows
        auto = obj("autoscaler")
        if "drpc" in auto:  # DrpcReplicaAutoscaler's own state: refuse it here, not at every cycle
            try:
                DrpcState.from_dict(auto["drpc"])
            except ValueError as exc:  # names the field: "drpc state.version: expected 1, got None"
                raise ValueError(f"planner state: autoscaler: {' '.join(str(exc).split())}") from None
            except (TypeError, AttributeError) as exc:  # e.g. "history": "zz"
                raise ValueError(
                    f"planner state: autoscaler: drpc state: malformed ({exc}): {str(auto['drpc'])[:80]}"
                ) from None
        capacity = {}
        for k, v in obj("capacity_targets").items():
            x = num(v, f"capacity_targets.{k}")
            if not 0.0 < x <= 1.0:
                raise ValueError(f"planner state: capacity_targets.{k}: expected a number in (0, 1], got {v!r}")
            capacity[str(k)] = x
        colocation = {}
        for k, v in obj("colocation_priority").items():
            x = num(v, f"colocation_priority.{k}")
            if x < 0:
                raise ValueError(f"planner state: colocation_priority.{k}: expected a number >= 0, got {v!r}")
            colocation[str(k)] = x
        budget = num(doc.get("move_budget_frac", 1.0), "move_budget_frac")
        if not 0.0 <= budget <= 1.0:
            raise ValueError(f"planner state: move_budget_frac: expected a number in [0, 1], got {budget!r}")
        return HrlState(
            times,
            rates,
            intent,
            opt(doc.get("last_moves_s"), "last_moves_s"),
            opt(doc.get("last_targets_s"), "last_targets_s"),
            targets,
            recs,
            dict(auto),
            opt(doc.get("last_intent_s"), "last_intent_s"),
            capacity,
            colocation,
            budget,
            opt(doc.get("last_resizes_s"), "last_resizes_s"),
        )


def service_rates_rps(graph: ServiceGraph) -> dict[str, float]:
    """Inbound request rate of every service that has at least one caller edge with a measured ``rps``:
    the sum of those rates (requests/s). Services without a measured inbound edge are absent."""
    out: dict[str, float] = {}
    for e in graph.edges:
        if e.rps is not None and math.isfinite(e.rps) and e.rps >= 0:
            out[e.callee] = out.get(e.callee, 0.0) + float(e.rps)
    return out
