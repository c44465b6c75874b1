"""The records of the topology embedding cache (DESIGN.md section 2): per-service embeddings keyed by the call
graph's fingerprint, and the descheduler's current intent.

- :func:`fingerprint`: a stable hash of a graph's **structure** — its services and its caller → callee
  pairs. Same structure → same fingerprint; adding, removing or renaming a service or an edge → a new one.
  Rates, latencies, error rates, multiplicities and the parallel flag do **not** change it: they move with
  every scrape, and a key that changed with them would make every reader miss. A fingerprint says which
  rows (services) an embedding matrix has; the embeddings under it are refreshed (a new ``version``) as the
  measurements move, and readers judge freshness by ``timestamp_s``.
- :class:`EmbeddingEntry`, :class:`IntentEntry`: what a cache stores (the intent record carries the descheduler's
  make-before-break moves in progress, :class:`policy.intent.PendingMove`, next to the intent); :class:`Lookup`: what
  a conditional get answers (found, not modified, or the entry); :func:`check_put` / :func:`check_intent` /
  :func:`check_pending_moves`: the validation every store applies.

Versions are assigned by the cache (one counter per server, increasing with every put), timestamps are unix
seconds. A server restarts empty, with versions from 1: readers compare versions for equality, not order.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from policy.intent import PendingMove
from policy.state import ServiceGraph

__all__ = [
    "fingerprint",
    "EmbeddingEntry",
    "IntentEntry",
    "Lookup",
    "MAX_MESSAGE_BYTES",
    "check_put",
    "check_intent",
    "check_pending_moves",
    "MAX_PENDING_MOVES",
    "MAX_DIM",
    "MAX_FINGERPRINT_CHARS",
]


log = logging.getLogger(__name__)


#: gRPC message size limit, both directions (64 MiB: 500,000 services × 32 float32 dims).
MAX_MESSAGE_BYTES = 64 * 1024 * 1024


MAX_DIM = 4096


MAX_FINGERPRINT_CHARS = 128


#: At most this many pending moves in one intent record (a descheduler has at most ``moves.maxPending`` at once).
MAX_PENDING_MOVES = 10_000


# ---- fingerprint ----------------------------------------------------------------------------------------


def fingerprint(graph: ServiceGraph) -> str:
    """The structural fingerprint of ``graph``: 32 lowercase hex digits (128 bits of SHA-256) over the sorted
    services and the sorted (caller, callee) pairs. See the module docstring for what changes it."""
    h = hashlib.sha256()
    h.update(b"hrl-graph-v1\0")
    for s in sorted(set(graph.services)):
        h.update(b"s\0" + s.encode("utf-8") + b"\0")
    for a, b in sorted({(e.caller, e.callee) for e in graph.edges}):
        h.update(b"e\0" + a.encode("utf-8") + b"\0" + b.encode("utf-8") + b"\0")
    return h.hexdigest()[:32]


# ---- records ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EmbeddingEntry:
    """Embeddings of one graph: ``services`` (N,) row names; ``matrix`` (N, D) float32, read-only;
    ``version`` (assigned by the cache, >= 1; 0 before it is stored); ``timestamp_s`` (unix s, when the
    producer computed them); ``encoder_version`` (the encoder bundle's policy_version); ``stored_at_s``."""

    fingerprint: str
    services: tuple[str, ...]
    matrix: np.ndarray = field(repr=False)
    version: int = 0
    timestamp_s: float = 0.0
    encoder_version: str = ""
    stored_at_s: float = 0.0
    _rows: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        m = np.array(self.matrix, dtype=np.float32, copy=True)
        m.setflags(write=False)
        object.__setattr__(self, "matrix", m)
        object.__setattr__(self, "services", tuple(self.services))
        object.__setattr__(self, "_rows", {s: i for i, s in enumerate(self.services)})

    @property
    def dim(self) -> int:
        """D, the embedding width."""
        return int(self.matrix.shape[1]) if self.matrix.ndim == 2 else 0

    def row(self, service: str) -> np.ndarray | None:
        """(D,) float32 embedding of ``service``, ``None`` when the entry lacks it."""
        i = self._rows.get(service)
        return None if i is None else self.matrix[i]

    def age_s(self, now_s: float) -> float:
        """Seconds since the producer computed these embeddings (>= 0)."""
        return max(0.0, now_s - self.timestamp_s)


@dataclass(frozen=True)
class IntentEntry:
    """The high-level intent: ``values`` (:data:`policy.lowlevel.INTENT_SPEC` order), their ``names``
    (empty or one per value), ``version`` (cache-assigned), ``timestamp_s`` (unix s, when decided),
    ``source`` (the writer), ``stored_at_s``, and ``pending_moves``: the make-before-break moves in progress when it
    was written (:class:`policy.intent.PendingMove`)."""

    values: tuple[float, ...]
    names: tuple[str, ...] = ()
    version: int = 0
    timestamp_s: float = 0.0
    source: str = ""
    stored_at_s: float = 0.0
    pending_moves: tuple[PendingMove, ...] = ()

    def age_s(self, now_s: float) -> float:
        return max(0.0, now_s - self.timestamp_s)


class Lookup(NamedTuple):
    """The answer to a get: ``entry`` (``None`` when absent or not modified) and ``not_modified`` (the
    caller's ``known_version`` is still current)."""

    entry: EmbeddingEntry | IntentEntry | None
    not_modified: bool = False

    @property
    def found(self) -> bool:
        return self.entry is not None or self.not_modified


def check_put(fp: str, services: Sequence[str], matrix: np.ndarray) -> tuple[tuple[str, ...], np.ndarray]:
    if not isinstance(fp, str) or not fp or len(fp) > MAX_FINGERPRINT_CHARS or not fp.isprintable() or " " in fp:
        raise ValueError(
            f"fingerprint: expected 1..{MAX_FINGERPRINT_CHARS} printable characters without spaces, got {fp!r}"
        )
    names = tuple(services)
    seen: set[str] = set()
    for i, s in enumerate(names):
        if not isinstance(s, str) or not s:
            raise ValueError(f"services[{i}]: expected a non-empty name, got {s!r}")
        if s in seen:
            raise ValueError(f"services[{i}]: {s!r} appears twice")
        seen.add(s)
    m = np.asarray(matrix)
    if m.ndim != 2 or m.shape[0] != len(names):
        raise ValueError(
            f"embeddings: expected a ({len(names)}, D) matrix for {len(names)} services, got shape {m.shape}"
        )
    if not 1 <= m.shape[1] <= MAX_DIM and len(names):
        raise ValueError(f"embeddings: width D must be 1..{MAX_DIM}, got {m.shape[1]}")
    if m.dtype.kind not in "fiu":
        raise ValueError(f"embeddings: expected numbers, got dtype {m.dtype}")
    m = m.astype(np.float32)
    if not np.all(np.isfinite(m)):
        raise ValueError("embeddings: contain NaN or infinity")
    return names, m


def check_intent(values: Sequence[float], names: Sequence[str]) -> tuple[tuple[float, ...], tuple[str, ...]]:
    vals = []
    for i, v in enumerate(values):
        try:
            f = float(v)
        except (TypeError, ValueError):
            raise ValueError(f"intent.values[{i}]: expected a number, got {v!r}") from None
        if not math.isfinite(f):
            raise ValueError(f"intent.values[{i}]: expected a finite number, got {v!r}")
        vals.append(f)
    nm = tuple(str(n) for n in names)
    if nm and len(nm) != len(vals):
        raise ValueError(f"intent.names: expected {len(vals)} names (one per value) or none, got {len(nm)}")
    return tuple(vals), nm


def check_pending_moves(moves: Sequence[PendingMove] | None) -> tuple[PendingMove, ...]:
    """``moves`` as a tuple of :class:`policy.intent.PendingMove` (validated when made). Raises ValueError naming the
    entry for anything else, and for more than :data:`MAX_PENDING_MOVES`."""
    out = tuple(moves or ())
    if len(out) > MAX_PENDING_MOVES:
        raise ValueError(f"intent.pending_moves: at most {MAX_PENDING_MOVES} moves, got {len(out)}")
    for i, m in enumerate(out):
        if not isinstance(m, PendingMove):
            raise ValueError(f"intent.pending_moves[{i}]: expected a PendingMove, got {type(m).__name__}")
    return out
