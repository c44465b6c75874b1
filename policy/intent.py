"""The intent: the one value the high level (the descheduler's planner) passes down to the low level (the
extender's scores), DESIGN.md section 1.

- :data:`INTENT_SPEC`: the components of the global vector, in order, with their defaults; :func:`intent_value`
  reads one;
- :class:`Intent`: the vector, the per-service capacity targets (for the autoscalers) and co-location priorities
  (for the scores), the move budget; validated when it is made;
- :meth:`Intent.for_service`: the vector a pod of one service is scored with (its co-location priority applied);
- :meth:`Intent.to_wire` / :meth:`Intent.from_wire`: the one codec between an :class:`Intent` and the embedding
  cache's intent record (names + values, doubles on the wire: bit-exact), used by the descheduler, the extender and
  the simulator alike. On the wire the per-service priorities travel as extra named values
  ``colocation_priority/<service>``; the capacity targets and the move budget stay with the planner;
- :class:`PendingMove`: a make-before-break move in progress (the descheduler scaled a Deployment up by one so that
  the new pod starts on ``target_node`` before the old one goes); it travels next to the intent record, and
  :func:`pending_move_scores` is the one rule both the extender and the simulator's in-process extender apply to
  the new pod (the target node scores :data:`PENDING_MOVE_SCORE`, every other candidate 0).

The intent is validated where it is made (the constructor) and where it enters a process (:meth:`from_wire`, called
by the extender on each record it copies from the cache); everything in between passes the value along.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = [
    "INTENT_SPEC",
    "intent_value",
    "COLOCATION_PREFIX",
    "Intent",
    "NO_INTENT",
    "PENDING_MOVE_SCORE",
    "PendingMove",
    "pending_move_for",
    "pending_move_scores",
]

#: Names (and meaning) of the intent vector's components, in order. Missing components take defaults.
INTENT_SPEC: tuple[tuple[str, str, float], ...] = (
    ("locality_weight", "weight of co-location with callers/callees, >= 0", 1.0),
    ("balance_weight", "weight of the node-overload penalty, >= 0", 1.0),
)

#: Name prefix of a per-service co-location priority in an encoded intent (``colocation_priority/<service>``).
COLOCATION_PREFIX = "colocation_priority/"


def intent_value(intent: Sequence[float] | None, name: str) -> float:
    """Component ``name`` of the vector ``intent``, or its default from :data:`INTENT_SPEC` (missing, or not a finite
    number). Raises ``KeyError`` for a name :data:`INTENT_SPEC` does not have."""
    for i, (n, _doc, default) in enumerate(INTENT_SPEC):
        if n == name:
            if intent is not None and i < len(intent) and math.isfinite(intent[i]):
                return float(intent[i])
            return default
    raise KeyError(name)


def _frozen(m: Mapping[str, float] | None) -> Mapping[str, float]:
    return MappingProxyType({str(k): float(v) for k, v in (m or {}).items()})


@dataclass(frozen=True)
class Intent:
    """The high level's intent for one period (DESIGN.md section 1): what it asks of the levels below.

    - ``values``: the global vector in :data:`INTENT_SPEC` order (``locality_weight``, ``balance_weight``:
      consolidate near callers vs spread load), passed to the placement policy; empty: every default;
    - ``capacity_target``: service → target CPU utilization of its pods, in (0, 1], for its autoscaling
      student (a lower target buys headroom; absent: the autoscaler's own default);
    - ``colocation_priority``: service → multiplier >= 0 of ``locality_weight`` for that service's pods
      (:meth:`for_service`; absent: 1);
    - ``move_budget_frac``: the share, in [0, 1], of the planner's ``max_moves`` it may plan this period.

    Raises ValueError naming the field for a non-finite or out-of-range value.
    """

    values: tuple[float, ...]
    capacity_target: Mapping[str, float] = field(default_factory=dict)
    colocation_priority: Mapping[str, float] = field(default_factory=dict)
    move_budget_frac: float = 1.0

    def __post_init__(self) -> None:
        vals = []
        for i, x in enumerate(self.values):
            try:
                f = float(x)
            except (TypeError, ValueError):
                raise ValueError(f"intent.values[{i}]: expected a number, got {x!r}") from None
            if not (math.isfinite(f) and f >= 0):
                raise ValueError(f"intent.values[{i}]: expected a finite weight >= 0, got {x!r}")
            vals.append(f)
        object.__setattr__(self, "values", tuple(vals))
        cap, col = _frozen(self.capacity_target), _frozen(self.colocation_priority)
        for k, v in cap.items():
            if not (math.isfinite(v) and 0.0 < v <= 1.0):
                raise ValueError(f"intent.capacity_target[{k!r}]: expected a number in (0, 1], got {v!r}")
        for k, v in col.items():
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"intent.colocation_priority[{k!r}]: expected a number >= 0, got {v!r}")
        object.__setattr__(self, "capacity_target", cap)
        object.__setattr__(self, "colocation_priority", col)
        b = float(self.move_budget_frac)
        if not (math.isfinite(b) and 0.0 <= b <= 1.0):
            raise ValueError(f"intent.move_budget_frac: expected a number in [0, 1], got {self.move_budget_frac!r}")
        object.__setattr__(self, "move_budget_frac", b)

    def for_service(self, service: str) -> tuple[float, ...]:
        """The vector a pod of ``service`` is scored with: :attr:`values` with ``locality_weight`` multiplied by the
        service's co-location priority (absent or 1: :attr:`values` unchanged; missing components take their
        defaults first)."""
        prio = self.colocation_priority.get(service)
        if prio is None or prio == 1.0:
            return self.values
        base = [intent_value(self.values, n) for n, _d, _v in INTENT_SPEC]
        base += list(self.values[len(INTENT_SPEC) :])
        base[0] = base[0] * max(prio, 0.0)
        return tuple(base)

    def to_wire(self) -> tuple[list[str], list[float]]:
        """``(names, values)`` for the embedding cache's intent record: the :data:`INTENT_SPEC` components of
        :attr:`values` (in order; components beyond the spec are not sent) followed by one
        ``colocation_priority/<service>`` entry per service (sorted by service). Raises ValueError for a service
        name that is empty or contains whitespace."""
        names = [n for n, _d, _v in INTENT_SPEC][: len(self.values)]
        values = list(self.values[: len(names)])
        for svc, v in sorted(self.colocation_priority.items()):
            if not svc or any(c.isspace() for c in svc):
                raise ValueError(f"intent.colocation_priority: service name {svc!r} is empty or contains whitespace")
            names.append(COLOCATION_PREFIX + svc)
            values.append(v)
        return names, values

    @classmethod
    def from_wire(cls, names: Sequence[str], values: Sequence[float]) -> Intent | None:
        """The inverse of :meth:`to_wire` (``None``: the record holds nothing). Components missing from ``names``
        take their defaults; unknown names are ignored (a newer producer); with no names at all, ``values`` is the
        vector read positionally (an older producer). Raises ValueError naming the entry for a value that is not
        a finite number >= 0, or names and values of different lengths: the record is refused whole."""
        if names and len(names) != len(values):
            raise ValueError(f"intent: {len(names)} names for {len(values)} values")
        spec = [n for n, _d, _v in INTENT_SPEC]
        if not names:
            vec = tuple(values[: len(spec)])
            return cls(vec) if vec else None
        by_name = dict(zip(names, values))
        colocation = {
            n[len(COLOCATION_PREFIX) :]: v
            for n, v in by_name.items()
            if n.startswith(COLOCATION_PREFIX) and len(n) > len(COLOCATION_PREFIX)
        }
        known = [n for n in spec if n in by_name]
        if not known and not colocation:
            return None
        vec = tuple(by_name[n] if n in by_name else d for n, _doc, d in INTENT_SPEC) if known else ()
        return cls(vec, colocation_priority=colocation)


#: The intent of a plan that sets none: every component at its default, no per-service part.
NO_INTENT = Intent(())


#: The extender's score (0..10, MaxExtenderPriority) of a pending move's target node for the moved service's new pod;
#: every other candidate scores 0, so with the shipped weight 2 the target gets 200 points over any other node.
PENDING_MOVE_SCORE = 10


@dataclass(frozen=True)
class PendingMove:
    """A make-before-break move in progress (DESIGN.md section 5, "Moves"): the descheduler scaled the Deployment
    ``workload`` (its name, in ``namespace``) up by one through its scale subresource so that the service's new pod
    starts on ``target_node``; until ``expires_at_s`` (the descheduler's clock: unix seconds, or simulated seconds)
    the extender scores ``target_node`` highest for any new pod of ``service`` in ``namespace``
    (:func:`pending_move_scores`). ``source_pod``: the name of the pod the move replaces (informational).

    Raises ValueError naming the field for an empty name or a non-finite ``expires_at_s``."""

    namespace: str
    service: str
    workload: str
    target_node: str
    expires_at_s: float
    source_pod: str = ""

    def __post_init__(self) -> None:
        for f in ("namespace", "service", "workload", "target_node"):
            v = getattr(self, f)
            if not isinstance(v, str) or not v or any(c.isspace() for c in v):
                raise ValueError(f"pending_move.{f}: expected a non-empty name without whitespace, got {v!r}")
        if not isinstance(self.source_pod, str):
            raise ValueError(f"pending_move.source_pod: expected a name, got {self.source_pod!r}")
        try:
            t = float(self.expires_at_s)
        except (TypeError, ValueError):
            raise ValueError(f"pending_move.expires_at_s: expected seconds, got {self.expires_at_s!r}") from None
        if not math.isfinite(t):
            raise ValueError(f"pending_move.expires_at_s: expected a finite number, got {self.expires_at_s!r}")
        object.__setattr__(self, "expires_at_s", t)

    def to_json(self) -> dict[str, object]:
        return {
            "namespace": self.namespace,
            "service": self.service,
            "workload": self.workload,
            "target_node": self.target_node,
            "expires_at_s": self.expires_at_s,
            "source_pod": self.source_pod,
        }


def pending_move_for(
    moves: Sequence[PendingMove] | Mapping[tuple[str, str], PendingMove], namespace: str, service: str, now_s: float
) -> PendingMove | None:
    """The pending move of ``service`` in ``namespace`` that has not expired at ``now_s`` (the latest to expire when
    several do), or ``None``. ``moves``: a sequence, or a mapping keyed by ``(namespace, service)`` (O(1))."""
    if isinstance(moves, Mapping):
        m = moves.get((namespace, service))
        return m if m is not None and now_s < m.expires_at_s else None
    best = None
    for m in moves:
        if m.namespace == namespace and m.service == service and now_s < m.expires_at_s:
            if best is None or m.expires_at_s > best.expires_at_s:
                best = m
    return best


def pending_move_scores(
    names: Sequence[str],
    moves: Sequence[PendingMove] | Mapping[tuple[str, str], PendingMove],
    namespace: str,
    service: str,
    now_s: float,
) -> list[int] | None:
    """The extender's scores of the candidate nodes ``names`` for a new pod of ``service`` in ``namespace`` while a
    make-before-break move of that service is pending (:func:`pending_move_for`): :data:`PENDING_MOVE_SCORE` for its
    target node, 0 for every other candidate. ``None`` (score as usual) when no move is pending or its target is not
    among the candidates (kube-scheduler filtered it out: the move aborts when the pod lands elsewhere)."""
    if not moves:
        return None
    m = pending_move_for(moves, namespace, service, now_s)
    if m is None or m.target_node not in names:
        return None
    return [PENDING_MOVE_SCORE if n == m.target_node else 0 for n in names]
