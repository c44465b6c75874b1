"""Versioned YAML configuration files (DESIGN.md section 6), validated with pydantic into frozen models.

Every component's configuration file looks like::

    apiVersion: hrl-scheduler.io/v1alpha1
    kind: ExtenderConfiguration        # or DeschedulerConfiguration, ...
    <fields of the component's model, camelCase or snake_case>

:func:`load_config` reads such a file (or a mapping) and reports **every** problem in one
:class:`ConfigError`, each with its dotted path (``caps.perNode: Input should be greater than or equal
to 0 (got -1)``). Nothing is half-applied: on error no configuration object exists.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator
from pydantic.alias_generators import to_camel

__all__ = ["API_VERSION", "MAX_SECONDS", "describe_utf8_error", "ConfigError", "ConfigModel", "M", "load_config"]

API_VERSION = "hrl-scheduler.io/v1alpha1"

#: Upper bound of every ``*Seconds`` field of every configuration (periods, timeouts, windows, ages):
#: 365 days. Larger values only overflow timers (``threading.Event.wait``) and kill background threads.
MAX_SECONDS = 365 * 86400


def describe_utf8_error(raw: bytes, exc: UnicodeDecodeError) -> str:
    """One line locating the first byte of ``raw`` that is not UTF-8 (``exc`` from ``raw.decode("utf-8")``):
    ``"not UTF-8 text: byte 0xff at line 3, column 7 (offset 41)"`` (line and column 1-based, column in bytes)."""
    start = int(exc.start)
    line = raw.count(b"\n", 0, start) + 1
    col = start - (raw.rfind(b"\n", 0, start) + 1) + 1
    return f"not UTF-8 text: byte 0x{raw[start]:02x} at line {line}, column {col} (offset {start})"


class ConfigError(ValueError):
    """A configuration file is invalid. ``problems`` lists ``(dotted_path, message)`` pairs; ``str()``
    gives them all on one line each, prefixed by the file name."""

    def __init__(self, source: str, problems: list[tuple[str, str]]):
        self.source = source
        self.problems = problems
        lines = [f"{source}: {path}: {msg}" if path else f"{source}: {msg}" for path, msg in problems]
        super().__init__("\n".join(lines))


class ConfigModel(BaseModel):
    """Base for configuration sections: immutable, unknown keys rejected, camelCase or snake_case keys,
    every float finite (``.nan`` / ``.inf`` rejected), and every field named ``*_seconds`` at most
    :data:`MAX_SECONDS` (365 days)."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True, allow_inf_nan=False
    )

    @field_validator("*")
    @classmethod
    def _bounded_seconds(cls, v: Any, info: ValidationInfo) -> Any:
        if (
            (info.field_name or "").endswith("_seconds")
            and isinstance(v, (int, float))
            and not isinstance(v, bool)
            and v > MAX_SECONDS
        ):
            raise ValueError(f"must be <= {MAX_SECONDS} seconds (365 days)")
        return v


M = TypeVar("M", bound=ConfigModel)


def _dotted(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def load_config(model: type[M], kind: str, source: str | Path | Mapping[str, Any] | None) -> M:
    """Load and validate a configuration of ``kind`` into ``model``.

    ``source``: a YAML file path, an already-parsed mapping, or ``None`` for all defaults.
    Raises :class:`ConfigError` with every problem (wrong apiVersion/kind, unknown keys, bad values).
    """
    if source is None:
        return model()
    if isinstance(source, Mapping):
        name, data = "<config>", dict(source)
    else:
        name = str(source)
        try:
            raw = Path(source).read_bytes()
            data = yaml.safe_load(raw.decode("utf-8"))
        except OSError as exc:
            raise ConfigError(name, [("", f"cannot read: {exc.strerror}")]) from exc
        except UnicodeDecodeError as exc:
            raise ConfigError(name, [("", describe_utf8_error(raw, exc))]) from exc
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"line {mark.line + 1}: " if mark is not None else ""
            what = " ".join(str(getattr(exc, "problem", None) or exc).split())
            raise ConfigError(name, [("", f"{where}invalid YAML: {what}")]) from exc
        if data is None:
            data = {"apiVersion": API_VERSION, "kind": kind}
        if not isinstance(data, Mapping):
            raise ConfigError(name, [("", f"expected a mapping at the top level, got {type(data).__name__}")])
        data = dict(data)
    problems: list[tuple[str, str]] = []
    api = data.pop("apiVersion", None)
    k = data.pop("kind", None)
    if api != API_VERSION:
        problems.append(("apiVersion", f"must be {API_VERSION!r} (got {api!r})"))
    if k != kind:
        problems.append(("kind", f"must be {kind!r} (got {k!r})"))
    try:
        cfg = model.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            got = err.get("input")
            # a section-level check (model validator) names its values itself: the whole mapping is noise
            quiet = err["type"] in ("missing", "extra_forbidden") or isinstance(got, Mapping)
            shown = "" if quiet else f" (got {got!r})"
            msg = "unknown field" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
            problems.append((_dotted(err["loc"]), f"{msg}{shown}"))
        cfg = None
    if problems:
        raise ConfigError(name, problems)
    assert cfg is not None
    return cfg
