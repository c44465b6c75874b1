"""``hrl-policy bundle check DIR [--level low|high|encoder]``: the offline check of a policy bundle before it is
shipped (docs/operations.md section 6, Upgrade step 1).

It runs exactly the loaders the serving processes run at start, so a bundle it accepts is one they accept:

- ``low``: :meth:`policy.lowlevel.LearnedPlacement.load` (the extender's ``policy.bundle``, the descheduler's
  ``placement.bundle``), the encoder lookup included (:func:`policy.lowlevel.encoder_for`);
- ``high``: ``DIR`` holds ``intent/`` and ``predictor/``: :meth:`policy.highlevel.LearnedIntent.load` (the
  descheduler's ``planner.intentPolicy.bundle``), and, when it also holds ``student/``,
  :func:`policy.highlevel.load_learned_autoscaler` (``planner.autoscaler.bundle``); a ``DIR`` holding ``student/``
  and ``predictor/`` only: the latter;
- ``encoder``: :meth:`policy.encoder.mpnn.GraphEncoder.load` (``cache.encoderBundle``, and the encoder a ``low``
  bundle reads).

An ensemble directory (``ensemble.json``: :func:`policy.bundle.ensemble_members`) is checked with
:func:`policy.lowlevel.load_placement` (``low``) or :func:`policy.highlevel.load_intent_policy` (``high``), every
member loaded; its version lists the members'.

Without ``--level`` the level is the one ``DIR/ensemble.json`` or ``DIR/manifest.json`` declares (``high`` when
``DIR`` has no manifest but a ``student/manifest.json``). Prints ``ok: <level> <policy_version> (<DIR>)`` and
exits 0, or one line ``hrl-policy bundle check: error: ...`` naming the bundle and the field and exits 2.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from policy.bundle import ENSEMBLE, LEVELS, MANIFEST, BundleError, is_ensemble, located

__all__ = ["detect_level", "check_bundle", "run"]


def detect_level(path: str | Path) -> str:
    """The level of the bundle at ``path``: ``manifest.json``'s ``level`` (``"low"``, ``"high"`` or
    ``"encoder"``), or ``"high"`` for a directory holding ``student/manifest.json``. Raises
    :class:`~policy.bundle.BundleError` when neither says (an unreadable manifest is left to the loader: the
    level is then ``"low"``, the most common bundle, whose loader names the problem)."""
    d = Path(path)
    if is_ensemble(d):
        try:
            level = json.loads((d / ENSEMBLE).read_bytes().decode("utf-8")).get("level")
        except (OSError, ValueError, AttributeError, RecursionError):
            return "low"  # the loader names the problem
        return level if level in ("low", "high") else "low"
    if (d / MANIFEST).is_file():
        try:
            level = json.loads((d / MANIFEST).read_bytes().decode("utf-8")).get("level")
        except (OSError, ValueError, AttributeError, RecursionError):
            return "low"
        return level if level in LEVELS else "low"
    if (d / "student" / MANIFEST).is_file() or (d / "intent" / MANIFEST).is_file():
        return "high"
    hint = ""
    if (d / "low" / MANIFEST).is_file() or (d / "high" / "student" / MANIFEST).is_file():
        hint = f" ({d} holds a stack's bundles: check its low/ or high/ directory)"
    what = (
        "no such directory"
        if not d.exists()
        else f"no {MANIFEST} (level low or encoder) nor student/{MANIFEST} (level high)"
    )
    raise BundleError(f"bundle {d}: {what}{hint}")


def check_bundle(path: str | Path, level: str | None = None) -> tuple[str, str]:
    """Load the bundle at ``path`` with the serving loader of ``level`` (default: :func:`detect_level`);
    returns ``(level, policy_version)`` (for ``high``, the student's). Raises
    :class:`~policy.bundle.BundleError` (a ``ValueError``; one line naming the bundle and the field) when
    the serving code would refuse it."""
    d = Path(path)
    lv = level or detect_level(d)
    if lv not in LEVELS:
        raise ValueError(f"--level: expected one of {', '.join(LEVELS)}, got {lv!r}")
    try:
        if is_ensemble(d) and lv in ("low", "high"):
            return lv, _check_ensemble(d, lv)
        if lv == "low":
            from policy.lowlevel import LearnedPlacement

            return lv, LearnedPlacement.load(d).version
        if lv == "high":
            from policy.highlevel import LearnedIntent, load_learned_autoscaler

            versions = []
            if (d / "intent" / MANIFEST).is_file():
                versions.append(str(LearnedIntent.load(d).actor.version))
            if (d / "student" / MANIFEST).is_file() or not versions:
                auto: Any = load_learned_autoscaler(d)
                versions.append(str(auto.drpc.actor.version))
            return lv, " + ".join(versions)
        from policy.encoder import GraphEncoder

        return lv, GraphEncoder.load(d).version
    except ValueError as exc:  # BundleError, BundleMissing
        raise located(exc, d) from None
    except Exception as exc:  # noqa: BLE001 - a loader bug still gets one line (and the same exit 2)
        raise BundleError(
            f"bundle {d}: cannot be loaded (unexpected {type(exc).__name__}: {' '.join(str(exc).split())})"
        ) from None


def _check_ensemble(d: Path, level: str) -> str:
    if level == "low":
        from policy.lowlevel import load_placement

        return str(load_placement(d).version)
    from policy.highlevel import IntentEnsemble, load_intent_policy

    pol = load_intent_policy(d)
    assert isinstance(pol, IntentEnsemble)
    members = "ensemble(" + ",".join(str(m.actor.version) for m in pol.members) + ")"
    return members + (f" pessimism {pol.pessimism:g}" if pol.pessimism else "")


def run(args: argparse.Namespace) -> int:
    """``hrl-policy bundle check``: prints ``ok: <level> <policy_version> (<dir>)``; errors are raised as
    ``ValueError`` (``hrl-policy`` prints them as one line and exits 2)."""
    level, version = check_bundle(args.dir, args.level)
    print(f"ok: {level} {version} ({args.dir})")
    return 0
