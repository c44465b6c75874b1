"""The tuned constant intent of a stack's high level: ``<high>/constant.json``, written by ``hrl-policy train
constant`` (policy/train/constant.py) beside the learned intent it is the bar and the fallback of, and read by the
simulator (``hrl-constant``, the learned stacks' autoscaler) and the descheduler alike.

Fields read: ``capacity_target`` in [0.3, 0.95] (every service's capacity target, a fraction of its pods' CPU),
``move_budget_frac`` in [0, 1] (share of the planner's ``maxMoves``) and, optional, ``burst`` in [0, 1] (the share of a
Burstable pod's CPU headroom its replica target counts as capacity, :attr:`IntentAutoscaler.burst`; 0 when absent,
as in files written before it was searched).

An intent ensemble's ``high/`` directory may hold ``pessimism.json`` (written by ``hrl-policy train pessimism``,
policy/train/pessimism.py): field ``pessimism`` in [0, 1], how far each service's capacity target moves from the
members' mean towards their lowest (:func:`policy.highlevel.mean_intent`); :func:`tuned_pessimism` reads it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from policy.bundle import ensemble_members, is_ensemble
from policy.documents import load_json

__all__ = ["CONSTANT_FILE_NAME", "PESSIMISM_FILE_NAME", "load_tuned_constant", "tuned_burst", "tuned_pessimism"]

#: The file's name in a stack's ``high/`` bundle directory.
CONSTANT_FILE_NAME = "constant.json"

#: The tuned pessimism's file in an intent ensemble's ``high/`` directory.
PESSIMISM_FILE_NAME = "pessimism.json"

_FIELDS = (("capacity_target", 0.3, 0.95, True), ("move_budget_frac", 0.0, 1.0, True), ("burst", 0.0, 1.0, False))


def _read_json(p: Path) -> Any:
    """The JSON document at ``p``; ValueError naming the file for an unreadable file, invalid JSON or a key given
    twice (which value is meant is unknown: refused, as in the configuration files)."""
    try:
        return load_json(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        reason = " ".join(str(exc).split())
        raise ValueError(f"{p}: not a usable JSON file: {reason}") from None


def load_tuned_constant(path: str | Path) -> dict[str, Any] | None:
    """The tuned constant intent at ``path`` (a ``constant.json``), None when there is no such file. Raises
    ValueError naming the file and the field for a malformed one (module docstring: the fields and their ranges)."""
    p = Path(path)
    if not p.is_file():
        return None
    doc = _read_json(p)
    if not isinstance(doc, dict):
        raise ValueError(f"{p}: expected a JSON object, got {type(doc).__name__}")
    for k, lo, hi, required in _FIELDS:
        if k not in doc and not required:
            continue
        v = doc.get(k)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
            raise ValueError(f"{p}: {k}: expected a number in [{lo}, {hi}], got {v!r}")
    return doc


def tuned_burst(high: str | Path) -> float:
    """The ``burst`` of the tuned constant in the ``high/`` directory ``high`` (0.0 without a ``constant.json`` or
    without the field); for an ensemble directory (``ensemble.json``) without a ``constant.json`` of its own, its
    first member's (as the intent's autoscaler reads the first member's workload predictor). Raises ValueError for
    a malformed file (:func:`load_tuned_constant`) or ensemble file."""
    d = Path(high)
    if is_ensemble(d) and not (d / CONSTANT_FILE_NAME).is_file():
        d = ensemble_members(d, "high")[0]
    doc = load_tuned_constant(d / CONSTANT_FILE_NAME) or {}
    return float(doc.get("burst", 0.0))


def tuned_pessimism(high: str | Path) -> float:
    """The ``pessimism`` of ``<high>/pessimism.json`` (module docstring); 0.0 (the members' mean) without the file.
    Raises ValueError naming the file and the field for a malformed one."""
    p = Path(high) / PESSIMISM_FILE_NAME
    if not p.is_file():
        return 0.0
    doc = _read_json(p)
    if not isinstance(doc, dict) or "pessimism" not in doc:
        raise ValueError(f"{p}: expected a JSON object with a number 'pessimism' in [0, 1]")
    v = doc["pessimism"]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
        raise ValueError(f"{p}: pessimism: expected a number in [0, 1], got {v!r}")
    return float(v)
