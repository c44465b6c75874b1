"""The node-score table the cache relays from its producer (the extender) to the kube-scheduler plugin
(``scheduler-plugin/``; DESIGN.md section 2):

- :class:`LoadTerm`, :class:`ScoreRow`, :class:`ScoreTable`: the record (``ScoreTable`` in
  ``policy/cache/proto/embeddings.proto``, where the per-pod formula the plugin applies is written out);
  :func:`table_to_pb` / :func:`table_from_pb`; :func:`check_table_pb`: the checks the server applies before it stores
  one (sizes, finiteness, duplicates), each problem one line naming the field;
- :class:`ScoreTableHub`: the server's copy of the newest table and its watchers: a publish or a heartbeat wakes every
  watch stream, a watcher slower than the producer gets the newest table (those in between are skipped, never
  queued), and a stream with nothing new sends a heartbeat every ``heartbeat_s`` seconds with the snapshot's age as
  it grows.

Ages, not timestamps, cross machines: a table carries its snapshot's age when sent (``snapshot_age_s``), the hub adds
the time it has held it, and the plugin adds the time since it arrived, so that no two clocks need agree.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "LoadTerm",
    "ScoreRow",
    "ScoreTable",
    "table_to_pb",
    "table_from_pb",
    "check_table_pb",
    "ScoreTableHub",
    "WatchersExhausted",
]


@dataclass(frozen=True)
class LoadTerm:
    """How the plugin applies the per-pod load term (the formula of ``ScoreTable`` in the proto file;
    :func:`policy.lowlevel.apply_load_term` is its reference): ``scale · clip(base · (1 − weight · over), 0, cap)``
    with ``over = clip((frac − from_frac) / (1 − from_frac), 0, 1)``. ``frac_float32``: round the CPU fraction to
    float32 first (the learned policy reads it as a float32 feature). Raises ``ValueError`` for ``from_frac``
    outside [0, 1) or a non-finite ``scale`` / ``cap``."""

    scale: float
    from_frac: float
    cap: float
    frac_float32: bool = False

    def __post_init__(self) -> None:
        if not 0.0 <= self.from_frac < 1.0:
            raise ValueError(f"load_term.from_frac: expected 0 <= x < 1, got {self.from_frac!r}")
        if not (math.isfinite(self.scale) and math.isfinite(self.cap)):
            raise ValueError(f"load_term: scale and cap must be finite, got {self.scale!r} and {self.cap!r}")


@dataclass(frozen=True)
class ScoreRow:
    """One (service, requests) row: ``base`` (N,) float64, read-only, in the table's node order; ``weight`` of the
    load term (0: ``base`` is the score). ``cpu_m = memory_bytes = -1``: the row of every pod of the service."""

    service: str
    cpu_m: int
    memory_bytes: int
    weight: float
    base: np.ndarray = field(repr=False)

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.service, self.cpu_m, self.memory_bytes)


@dataclass(frozen=True)
class ScoreTable:
    """A node-score table: every per-node array is (N,) float64 in ``nodes`` order. ``cpu_used_m``: CPU in use
    before the pod as the policy counts it; ``requested_cpu_m``: requested CPU as kube-scheduler counts it (the plugin
    adds what it placed since, the difference with its own count). ``generation``: the producer's counter;
    ``version``: the cache's (0 before it is stored); ``computed_at_s``: unix seconds on the producer's clock;
    ``snapshot_age_s``: the cluster snapshot's age when sent."""

    generation: int
    producer: str
    policy: str
    computed_at_s: float
    snapshot_age_s: float
    nodes: tuple[str, ...]
    alloc_cpu_m: np.ndarray = field(repr=False)
    cpu_used_m: np.ndarray = field(repr=False)
    requested_cpu_m: np.ndarray = field(repr=False)
    load_term: LoadTerm
    rows: tuple[ScoreRow, ...] = ()
    version: int = 0

    def row(self, service: str, cpu_m: int, memory_bytes: int) -> ScoreRow | None:
        """The row a pod of ``service`` with these requests is scored with (its own, else its service's for any
        requests), as the plugin looks it up; ``None`` when there is none."""
        any_row = None
        for r in self.rows:
            if r.key == (service, cpu_m, memory_bytes):
                return r
            if r.key == (service, -1, -1):
                any_row = r
        return any_row

    @property
    def nbytes(self) -> int:
        """Bytes of float64 payload (per-node arrays and rows)."""
        return 8 * len(self.nodes) * (3 + len(self.rows))


def _f64(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a, dtype="<f8").tobytes()


def _from_f64(b: bytes, n: int, where: str) -> np.ndarray:
    if len(b) != 8 * n:
        raise ValueError(f"{where}: {n} nodes need {8 * n} bytes of float64, got {len(b)}")
    a = np.frombuffer(b, dtype="<f8").astype(np.float64)
    a.setflags(write=False)
    return a


def table_to_pb(pb2, t: ScoreTable):
    """The ``ScoreTable`` message of ``t`` (arrays as little-endian float64 bytes)."""
    lt = t.load_term
    return pb2.ScoreTable(
        generation=t.generation,
        producer=t.producer,
        policy=t.policy,
        computed_at_s=t.computed_at_s,
        snapshot_age_s=t.snapshot_age_s,
        nodes=list(t.nodes),
        alloc_cpu_m=_f64(t.alloc_cpu_m),
        cpu_used_m=_f64(t.cpu_used_m),
        requested_cpu_m=_f64(t.requested_cpu_m),
        load_term=pb2.LoadTerm(scale=lt.scale, from_frac=lt.from_frac, cap=lt.cap, frac_float32=lt.frac_float32),
        rows=[
            pb2.ScoreRow(
                service=r.service, cpu_m=r.cpu_m, memory_bytes=r.memory_bytes, weight=r.weight, base=_f64(r.base)
            )
            for r in t.rows
        ],
        version=t.version,
    )


def table_from_pb(p) -> ScoreTable:
    """The :class:`ScoreTable` of message ``p``; raises ``ValueError`` (one line naming the field) when malformed."""
    check_table_pb(p)
    n = len(p.nodes)
    lt = p.load_term
    return ScoreTable(
        generation=int(p.generation),
        producer=p.producer,
        policy=p.policy,
        computed_at_s=float(p.computed_at_s),
        snapshot_age_s=float(p.snapshot_age_s),
        nodes=tuple(p.nodes),
        alloc_cpu_m=_from_f64(p.alloc_cpu_m, n, "alloc_cpu_m"),
        cpu_used_m=_from_f64(p.cpu_used_m, n, "cpu_used_m"),
        requested_cpu_m=_from_f64(p.requested_cpu_m, n, "requested_cpu_m"),
        load_term=LoadTerm(float(lt.scale), float(lt.from_frac), float(lt.cap), bool(lt.frac_float32)),
        rows=tuple(
            ScoreRow(
                r.service, int(r.cpu_m), int(r.memory_bytes), float(r.weight), _from_f64(r.base, n, f"rows[{i}].base")
            )
            for i, r in enumerate(p.rows)
        ),
        version=int(p.version),
    )


def check_table_pb(p) -> None:
    """Raise ``ValueError`` (one line naming the field and the value) unless ``ScoreTable`` message ``p`` is one the
    plugin accepts: a generation >= 1, distinct non-empty node names, arrays of one float64 per node, a load term with
    0 <= from_frac < 1, distinct rows with a service, requests >= 0 (or both -1: any), finite weights and bases, a
    snapshot age >= 0."""
    if p.generation < 1:
        raise ValueError(f"table.generation: expected >= 1, got {p.generation}")
    n = _check_nodes_pb(p)
    if not p.HasField("load_term"):
        raise ValueError("table.load_term: missing")
    LoadTerm(p.load_term.scale, p.load_term.from_frac, p.load_term.cap)  # raises for a bad one
    if not (p.snapshot_age_s >= 0 and math.isfinite(p.snapshot_age_s)):
        raise ValueError(f"table.snapshot_age_s: expected a finite number >= 0, got {p.snapshot_age_s!r}")
    _check_rows_pb(p.rows, n)


def _check_nodes_pb(p) -> int:
    """The number of nodes of ``p``, its names distinct and non-empty and its per-node arrays one float64 each."""
    n = len(p.nodes)
    seen: set[str] = set()
    for i, name in enumerate(p.nodes):
        if not name:
            raise ValueError(f"table.nodes[{i}]: expected a node name, got ''")
        if name in seen:
            raise ValueError(f"table.nodes[{i}]: {name!r} appears twice")
        seen.add(name)
    for fname in ("alloc_cpu_m", "cpu_used_m", "requested_cpu_m"):
        b = getattr(p, fname)
        if len(b) != 8 * n:
            raise ValueError(f"table.{fname}: {n} nodes need {8 * n} bytes of float64, got {len(b)}")
    return n


def _check_rows_pb(rows, n: int) -> None:
    """Rows with a service, requests >= 0 (or both -1), distinct keys, a finite weight and ``n`` finite floats."""
    keys: set[tuple[str, int, int]] = set()
    for i, r in enumerate(rows):
        if not r.service:
            raise ValueError(f"table.rows[{i}].service: expected a service name, got ''")
        if (r.cpu_m < 0 or r.memory_bytes < 0) and not r.cpu_m == r.memory_bytes == -1:
            raise ValueError(
                f"table.rows[{i}]: requests must be >= 0 (or both -1: any), got {r.cpu_m}m and {r.memory_bytes} bytes"
            )
        k = (r.service, r.cpu_m, r.memory_bytes)
        if k in keys:
            raise ValueError(f"table.rows[{i}]: row {k} appears twice")
        keys.add(k)
        if not math.isfinite(r.weight):
            raise ValueError(f"table.rows[{i}].weight: expected a finite number, got {r.weight!r}")
        if len(r.base) != 8 * n:
            raise ValueError(f"table.rows[{i}].base: {n} nodes need {8 * n} bytes of float64, got {len(r.base)}")
        if n and not np.all(np.isfinite(np.frombuffer(r.base, dtype="<f8"))):
            raise ValueError(f"table.rows[{i}].base: contains NaN or infinity")


class WatchersExhausted(RuntimeError):
    """Every watch slot of the hub is taken (the server answers RESOURCE_EXHAUSTED)."""


class _Held:
    """The stored table: the message, and the snapshot's age at ``since`` (monotonic seconds)."""

    __slots__ = ("msg", "age_s", "since")

    def __init__(self, msg, age_s: float, since: float):
        self.msg, self.age_s, self.since = msg, age_s, since

    def age_now(self, now: float) -> float:
        return self.age_s + max(0.0, now - self.since)


class ScoreTableHub:
    """The newest score table and its watchers (thread-safe). ``heartbeat_s``: a watch stream with nothing new sends
    a heartbeat this often (> 0); ``max_watchers``: open streams at most (>= 1; :meth:`watch` raises
    :class:`WatchersExhausted` beyond); ``clock``: monotonic seconds. ``on_event(kind)``: called for every event sent
    (``table`` or ``heartbeat``), for metrics."""

    def __init__(
        self,
        heartbeat_s: float = 2.0,
        max_watchers: int = 4,
        clock: Callable[[], float] = time.monotonic,
        on_event: Callable[[str], None] | None = None,
    ):
        if not heartbeat_s > 0:
            raise ValueError(f"heartbeat_s: expected > 0, got {heartbeat_s!r}")
        if max_watchers < 1:
            raise ValueError(f"max_watchers: expected >= 1, got {max_watchers!r}")
        self.heartbeat_s = float(heartbeat_s)
        self.max_watchers = int(max_watchers)
        self.clock = clock
        self.on_event = on_event
        self._cond = threading.Condition()
        self._held: _Held | None = None
        self._seq = 0  # every publish or touch
        self._version = 0
        self._watchers = 0
        self._closed = False

    @property
    def watchers(self) -> int:
        return self._watchers

    @property
    def current(self):
        """The stored message (``None`` before the first publish); do not modify it."""
        h = self._held
        return None if h is None else h.msg

    def publish(self, msg) -> tuple[int, int]:
        """Store ``ScoreTable`` message ``msg`` (checked: ``ValueError`` naming the field) as the newest table with a
        new cache version, and wake the watchers. Returns ``(version, watchers)``."""
        check_table_pb(msg)
        with self._cond:
            self._version += 1
            msg.version = self._version
            self._held = _Held(msg, float(msg.snapshot_age_s), self.clock())
            self._seq += 1
            self._cond.notify_all()
            return self._version, self._watchers

    def touch(self, generation: int, snapshot_age_s: float) -> bool:
        """The producer's snapshot of table ``generation`` is ``snapshot_age_s`` old now: wake the watchers with a
        heartbeat. False (nothing changes) when the stored table is another generation or there is none."""
        if not (snapshot_age_s >= 0 and math.isfinite(snapshot_age_s)):
            raise ValueError(f"snapshot_age_s: expected a finite number >= 0, got {snapshot_age_s!r}")
        with self._cond:
            h = self._held
            if h is None or h.msg.generation != generation:
                return False
            h.age_s, h.since = float(snapshot_age_s), self.clock()
            self._seq += 1
            self._cond.notify_all()
            return True

    def close(self) -> None:
        """End every watch stream (server shutdown)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def wake(self) -> None:
        """Wake the watch loops (one of them may have ended: they check ``is_active``)."""
        with self._cond:
            self._cond.notify_all()

    def watch(self, pb2, known_generation: int = 0, is_active: Callable[[], bool] = lambda: True) -> Iterator:
        """``ScoreTableEvent`` messages for one watcher until ``is_active()`` turns false or :meth:`close`: the
        newest table unless its generation is ``known_generation``, then each newer table, and heartbeats (the
        snapshot's age, growing) on every producer heartbeat and at least every ``heartbeat_s`` (of generation 0
        while there is no table: the stream is up, nothing to score with yet). Raises
        :class:`WatchersExhausted` when ``max_watchers`` streams are open already."""
        with self._cond:
            if self._watchers >= self.max_watchers:
                raise WatchersExhausted(f"{self._watchers} score-table watchers already (max_watchers)")
            self._watchers += 1
        try:
            yield from self._events(pb2, int(known_generation), is_active)
        finally:
            with self._cond:
                self._watchers -= 1

    def _events(self, pb2, sent_generation: int, is_active: Callable[[], bool]) -> Iterator:
        seen_seq = -1
        while True:
            with self._cond:
                if seen_seq == self._seq and not self._closed:
                    self._cond.wait(self.heartbeat_s)
                if self._closed or not is_active():
                    return
                seen_seq = self._seq
                h = self._held
                if h is None:  # nothing to send yet: a heartbeat of generation 0 says the stream is up
                    msg, age = None, 0.0
                else:
                    msg, age = h.msg, h.age_now(self.clock())
            if msg is None:
                ev = pb2.ScoreTableEvent(heartbeat=pb2.ScoreTableHeartbeat(generation=0, snapshot_age_s=0.0))
                kind = "heartbeat"
            elif msg.generation != sent_generation:
                ev = pb2.ScoreTableEvent(table=msg)
                ev.table.snapshot_age_s = age
                sent_generation = msg.generation
                kind = "table"
            else:
                ev = pb2.ScoreTableEvent(
                    heartbeat=pb2.ScoreTableHeartbeat(generation=msg.generation, snapshot_age_s=age)
                )
                kind = "heartbeat"
            if self.on_event is not None:
                self.on_event(kind)
            yield ev
