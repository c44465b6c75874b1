"""Feature specifications: the ordered names and units of every numeric input a learned policy reads.

A :class:`FeatureSpec` travels inside each policy bundle (``manifest.json``, DESIGN.md section 7), so a
bundle trained on one feature layout is never fed another: :meth:`FeatureSpec.check` (called by
:meth:`policy.bundle.PolicyBundle.load`) refuses a mismatch with one line naming both sides.

This module is shared by every featurizer (the graph encoder's :mod:`policy.encoder.graph`, the
Gymnasium environment, the actors); add ``featurize_*`` functions next to it, keep one ``FeatureSpec``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["FeatureSpec", "FeatureSpecError", "check_specs"]


class FeatureSpecError(ValueError):
    """Two feature specifications differ, or a spec is malformed (one line naming both sides)."""


@dataclass(frozen=True, slots=True)
class FeatureSpec:
    """Ordered feature names with their units, e.g. ``FeatureSpec(("log_replicas", "error_rate"),
    ("log1p(count)", "fraction"))``.

    ``names``: unique, non-empty strings, in the column order of the arrays the spec describes;
    ``units``: one per name (free text such as ``ms``, ``log1p(rps)``, ``fraction``, ``flag``).
    Raises :class:`FeatureSpecError` when the lengths differ, a name repeats or is empty.
    """

    names: tuple[str, ...]
    units: tuple[str, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", tuple(str(n) for n in self.names))
        object.__setattr__(self, "units", tuple(str(u) for u in self.units))
        if len(self.names) != len(self.units):
            raise FeatureSpecError(f"feature spec: {len(self.names)} names but {len(self.units)} units")
        seen: set[str] = set()
        for i, n in enumerate(self.names):
            if not n:
                raise FeatureSpecError(f"feature spec: names[{i}] is empty")
            if n in seen:
                raise FeatureSpecError(f"feature spec: name {n!r} appears twice")
            seen.add(n)

    @staticmethod
    def of(pairs: Iterable[tuple[str, str]]) -> FeatureSpec:
        """Build from ``(name, unit)`` pairs."""
        items = list(pairs)
        return FeatureSpec(tuple(n for n, _ in items), tuple(u for _, u in items))

    def __len__(self) -> int:
        return len(self.names)

    def index(self, name: str) -> int:
        """Column of ``name``; raises ``KeyError`` naming it when absent."""
        try:
            return self.names.index(name)
        except ValueError:
            raise KeyError(f"feature {name!r} not in the spec ({', '.join(self.names)})") from None

    def to_json(self) -> dict[str, list[str]]:
        """``{"names": [...], "units": [...]}`` (the manifest.json form)."""
        return {"names": list(self.names), "units": list(self.units)}

    @staticmethod
    def from_json(d: Mapping[str, Any], where: str = "feature_spec") -> FeatureSpec:
        """Parse :meth:`to_json`'s form; raises :class:`FeatureSpecError` naming ``where`` when malformed."""
        if not isinstance(d, Mapping):
            raise FeatureSpecError(f"{where}: expected an object with names and units, found {type(d).__name__}")
        names, units = d.get("names"), d.get("units")
        for key, v in (("names", names), ("units", units)):
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                raise FeatureSpecError(f"{where}.{key}: expected a list of strings, found {v!r}")
        try:
            return FeatureSpec(tuple(names), tuple(units))  # type: ignore[arg-type]
        except FeatureSpecError as exc:
            raise FeatureSpecError(f"{where}: {str(exc).removeprefix('feature spec: ')}") from None

    def describe(self, limit: int = 6) -> str:
        """A short one-line rendering: ``3 features [a (u), b (v), c (w)]`` (the first ``limit``)."""
        shown = ", ".join(f"{n} ({u})" for n, u in zip(self.names[:limit], self.units[:limit]))
        more = ", ..." if len(self.names) > limit else ""
        return f"{len(self.names)} features [{shown}{more}]"

    def check(self, found: FeatureSpec, where: str = "feature_spec") -> None:
        """Raise :class:`FeatureSpecError` unless ``found`` equals this (expected) spec; the message names
        both, and the first column where they differ."""
        if found == self:
            return
        diff = ""
        for i in range(max(len(self), len(found))):
            a = f"{self.names[i]} ({self.units[i]})" if i < len(self) else "nothing"
            b = f"{found.names[i]} ({found.units[i]})" if i < len(found) else "nothing"
            if a != b:
                diff = f"; first difference at column {i}: expected {a}, found {b}"
                break
        raise FeatureSpecError(f"{where}: feature mismatch: expected {self.describe()}, found {found.describe()}{diff}")


def check_specs(
    expected: Mapping[str, FeatureSpec], found: Mapping[str, FeatureSpec], where: str = "feature_spec"
) -> None:
    """Check a mapping of named specs (``{"node": ..., "edge": ...}``): the same keys, each equal.
    Raises :class:`FeatureSpecError` naming both sides."""
    if set(expected) != set(found):
        raise FeatureSpecError(f"{where}: expected inputs {sorted(expected)}, found {sorted(found)}")
    for k in sorted(expected):
        expected[k].check(found[k], f"{where}.{k}")
