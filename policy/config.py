"""Versioned YAML configuration files (DESIGN.md section 6), validated with pydantic into frozen models.

Every component's configuration file looks like::

    apiVersion: hrl-scheduler.io/v1alpha1
    kind: ExtenderConfiguration        # or DeschedulerConfiguration, App, ...
    <fields of the component's model, camelCase or snake_case>

:func:`load_config` reads such a file (or a mapping) and reports **every** problem at once in one
:class:`ConfigError`, one line each, in one format for every component::

    FILE: dotted.path: problem (got VALUE)

e.g. ``extender.yaml: listen.prot: unknown field (did you mean port?)``, ``d.yaml: caps.perNode: must be an
integer (got true)``, ``d.yaml: dryRun: line 4: duplicate key (first at line 3); each key may appear once``.
Values are typed strictly, as Kubernetes' own decoders do: an integer field takes only integers (``true``,
``1.5``, ``"2"`` are refused), a number field integers or decimals, a boolean only ``true`` / ``false``, a text
field only text, a list field only a list. An empty file, a file that is not UTF-8 or not YAML, duplicate keys,
a field given twice (``dryRun`` and ``dry_run``), unknown fields and every out-of-range value are errors.
Nothing is half-applied: on error no configuration object exists.

File references (``kubeconfig``, TLS files, snapshot files, bundles, topology sources) are checked for existence
when the caller asks (``check_files=True``, the components' command lines do), in the same pass, so they are
reported together with the other problems (:func:`check_path`).

:func:`json_schema` exports a kind's JSON Schema for editor validation (``hrl-policy config schema KIND``; the
kinds are registered as entry points of group :data:`CONFIG_ENTRY_POINTS`, so ``policy`` never imports the
extender's or the descheduler's models).
"""

from __future__ import annotations

import difflib
import re
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from .documents import DocumentError, FileError, describe_utf8_error, dotted, load_yaml, read_text, short_repr

__all__ = [
    "API_VERSION",
    "HOST_PORT",
    "LISTEN_ADDRESS",
    "NAMESPACED_NAME",
    "URL_PATH",
    "matches",
    "pattern_schema",
    "MAX_SECONDS",
    "MAX_CONFIG_BYTES",
    "CONFIG_ENTRY_POINTS",
    "STARTUP_CHECK_ENTRY_POINTS",
    "describe_utf8_error",
    "ConfigError",
    "ConfigModel",
    "M",
    "load_config",
    "read_config_file",
    "check_path",
    "ExistingFile",
    "ExistingPath",
    "ExistingBundle",
    "json_schema",
]

API_VERSION = "hrl-scheduler.io/v1alpha1"

#: Upper bound of every ``*Seconds`` field of every configuration (periods, timeouts, windows, ages):
#: 365 days. Larger values only overflow timers (``threading.Event.wait``) and kill background threads.
MAX_SECONDS = 365 * 86400
#: The largest configuration file read (the shipped ones are under 4 KB).
MAX_CONFIG_BYTES = 1 << 20
#: The entry-point group where components register their configuration kinds (``KIND = "module:Model"``).
CONFIG_ENTRY_POINTS = "hrl_scheduler.configs"
#: The entry-point group of the components' start-up checks (``KIND = "module:function"``, the function taking the
#: loaded model and returning ``dotted.path: problem`` lines): what a component refuses at start beyond the schema.
STARTUP_CHECK_ENTRY_POINTS = "hrl_scheduler.startup_checks"


class ConfigError(ValueError):
    """A configuration file is invalid. ``problems`` lists ``(dotted_path, message)`` pairs; ``str()``
    gives them all, one line each: ``SOURCE: dotted.path: message`` (``SOURCE: message`` for the whole file).
    ``lines()`` returns those lines."""

    def __init__(self, source: str, problems: list[tuple[str, str]]):
        self.source = source
        self.problems = problems
        super().__init__("\n".join(self.lines()))

    def lines(self) -> list[str]:
        """One line per problem, ``SOURCE: path: message``."""
        return [
            f"{self.source}: {path}: {_one_line(msg)}" if path else f"{self.source}: {_one_line(msg)}"
            for path, msg in self.problems
        ]


def _one_line(s: str) -> str:
    return " ".join(str(s).split())


def _tuple_fields(cls: type[BaseModel]) -> frozenset[str]:
    """Names of the fields of ``cls`` whose type is a tuple (or a tuple or None)."""
    cached = cls.__dict__.get("_hrl_tuple_fields")
    if cached is not None:
        return cached
    out = set()
    for name, f in cls.model_fields.items():
        ann = f.annotation
        kinds = [typing.get_origin(a) or a for a in (typing.get_args(ann) or (ann,))] + [typing.get_origin(ann)]
        if tuple in kinds:
            out.add(name)
    frozen = frozenset(out)
    type.__setattr__(cls, "_hrl_tuple_fields", frozen)
    return frozen


class ConfigModel(BaseModel):
    """Base for configuration sections: immutable, unknown keys rejected, camelCase or snake_case keys (not
    both for one field), strict types (see the module docstring; a YAML list is accepted for a tuple field),
    every float finite (``.nan`` / ``.inf`` rejected), and every field named ``*_seconds`` at most
    :data:`MAX_SECONDS` (365 days)."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        allow_inf_nan=False,
        strict=True,
    )

    @model_validator(mode="before")
    @classmethod
    def _one_spelling_per_field(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            for name, f in cls.model_fields.items():
                if f.alias and f.alias != name and f.alias in data and name in data:
                    raise ValueError(f"{f.alias} and {name} are the same field; give it once")
        return data

    @field_validator("*", mode="before")
    @classmethod
    def _lists_for_tuples(cls, v: Any, info: ValidationInfo) -> Any:
        if isinstance(v, list) and info.field_name in _tuple_fields(cls):
            return tuple(v)
        return v

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


# ---- text patterns a field validator and the JSON Schema share -------------------------------------------------
# Each is the whole rule of its field: the validator refuses exactly what ``fullmatch`` refuses, with a message of
# its own, and the field's JSON Schema carries the same expression as ``pattern`` (``json_schema_extra``), so the
# Helm chart's values.schema.json (hack/chart_schema.py) refuses what the component refuses. They are written in
# the syntax Python's ``re`` and Go's RE2 (Helm's schema validator) read alike: no look-around, no ``\\d`` or ``\\s``
# (their classes differ).

#: A TCP port 1..65535 (leading zeros allowed, as ``int()`` reads them).
_PORT = r"0*([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
#: host:port, the host not empty (the text before the last ':').
HOST_PORT = rf"^.+:{_PORT}$"
#: [host]:port, the host may be empty (every interface).
LISTEN_ADDRESS = rf"^.*:{_PORT}$"
#: namespace/name (exactly one '/', neither side empty).
NAMESPACED_NAME = r"^[^/]+/[^/]+$"
#: Every character ``str.isspace`` calls whitespace, as literal characters (both engines read them in a class).
_SPACE = "\t\n\v\f\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
#: A URL path: '/' then no whitespace, '?' or '#'.
URL_PATH = f"^/[^{_SPACE}?#]*$"


def matches(pattern: str, value: str) -> bool:
    """Whether ``value`` matches one of the shared patterns (as the JSON Schema validator reads it)."""
    return re.fullmatch(pattern, value) is not None


def pattern_schema(pattern: str, *, items: bool = False) -> dict[str, Any]:
    """``json_schema_extra`` of a field whose validator is ``matches(pattern, ...)``: ``pattern`` (applies to a
    string; an optional field's null passes), or with ``items`` the same for each item of a list."""
    return {"items": {"pattern": pattern}} if items else {"pattern": pattern}


def check_path(value: str | None, info: ValidationInfo, what: str = "file") -> str | None:
    """For a field validator: when the validation context has ``check_files`` (the command lines set it), raise
    ``ValueError`` unless ``value`` names an existing ``what``: ``"file"``, ``"directory"``, ``"file or
    directory"``, or ``"bundle"`` (a directory with a ``manifest.json`` or an ``ensemble.json``, or with
    subdirectories that have a ``manifest.json``: a high level's ``intent/`` or ``student/`` and ``predictor/``).
    ``None`` and URIs (``scheme://...``)
    pass unchecked. Returns ``value``."""
    ctx = info.context or {}
    if value is None or not ctx.get("check_files") or "://" in value:
        return value
    try:
        return _check_path(value, info, what)
    except OSError as exc:  # a name too long, a loop of symbolic links, no permission
        raise ValueError(f"cannot be checked: {exc.strerror or exc}") from None


def _check_path(value: str, info: ValidationInfo, what: str) -> str:
    p = Path(value)
    if what == "bundle":
        if (info.data or {}).get("name") not in (None, "learned", "drpc"):
            return value  # a bundle next to a heuristic is the section's own error (it names both)
        if not p.is_dir():
            raise ValueError("no such bundle directory")
        if (
            not (p / "manifest.json").is_file()
            and not (p / "ensemble.json").is_file()
            and not any((c / "manifest.json").is_file() for c in p.iterdir())
        ):
            # a high level's bundle is a directory of bundles (intent/ or student/, and predictor/)
            raise ValueError("not a policy bundle (no manifest.json or ensemble.json in it, nor a subdirectory's)")
        return value
    ok = {"file": p.is_file(), "directory": p.is_dir(), "file or directory": p.exists()}[what]
    if not ok:
        raise ValueError(f"no such {what}" if not p.exists() else f"not a {what}")
    return value


def _exists(what: str) -> AfterValidator:
    return AfterValidator(lambda v, info: check_path(v, info, what))


#: Text naming an existing file, a file or directory, or a policy bundle directory: checked when the validation
#: context has ``check_files`` (see :func:`check_path`); plain text otherwise (and in the JSON Schema).
ExistingFile = Annotated[str, _exists("file")]
ExistingPath = Annotated[str, _exists("file or directory")]
ExistingBundle = Annotated[str, _exists("bundle")]


# ---- messages --------------------------------------------------------------------------------------------------


def _show(v: Any) -> str:
    """A value as the user wrote it in YAML, shortened: ``true``, ``null``, ``1.5``, ``'text'``, a mapping."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v).replace("inf", ".inf").replace("nan", ".nan")
    if isinstance(v, Mapping):
        return "a mapping"
    return short_repr(v)


def _bound_text(ctx: Mapping[str, Any]) -> str:
    for key, op in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
        if key in ctx:
            return f"must be {op} {ctx[key]}"
    return "out of range"


def _message(err: Mapping[str, Any]) -> str:
    """Our wording for one pydantic error (no pydantic phrasing leaks into the messages)."""
    t = err["type"]
    ctx = err.get("ctx") or {}
    if t in ("int_type", "int_parsing", "int_from_float"):
        return "must be an integer"
    if t in ("float_type", "float_parsing"):
        return "must be a number"
    if t == "finite_number":
        return "must be a finite number"
    if t in ("bool_type", "bool_parsing"):
        return "must be true or false"
    if t in ("string_type", "string_unicode"):
        return "must be text (a string)"
    if t in ("tuple_type", "list_type", "set_type", "iterable_type"):
        return "must be a list"
    if t in ("dict_type", "model_type", "model_attributes_type", "mapping_type"):
        return "must be a mapping of fields"
    if t == "literal_error":
        return f"must be one of {ctx.get('expected', '?')}"
    if t in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        return _bound_text(ctx)
    if t == "string_too_short":
        n = ctx.get("min_length", 1)
        return "must not be empty" if n == 1 else f"must be at least {n} characters"
    if t == "string_too_long":
        return f"must be at most {ctx.get('max_length')} characters"
    if t == "string_pattern_mismatch":
        return f"must match {ctx.get('pattern')}"
    if t == "too_short":
        return f"must have at least {ctx.get('min_length')} item(s)"
    if t == "too_long":
        return f"must have at most {ctx.get('max_length')} item(s)"
    if t == "missing":
        return "required field missing"
    if t in ("value_error", "assertion_error"):
        return str(err["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    if t in ("int_too_big",):
        return "must be an integer of at most 64 bits"
    return str(err["msg"])  # pragma: no cover - a type none of our models produces


def _model_at(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model class of the section at ``loc`` (alias or field names), or ``None``."""
    cur: type[BaseModel] | None = model
    for part in loc:
        if cur is None or not isinstance(part, str):
            return None
        field = None
        for name, f in cur.model_fields.items():
            if part in (name, f.alias):
                field = f
                break
        if field is None:
            return None
        nxt = None
        for a in typing.get_args(field.annotation) or (field.annotation,):
            if isinstance(a, type) and issubclass(a, BaseModel):
                nxt = a
        cur = nxt
    return cur


def _did_you_mean(model: type[BaseModel], loc: tuple[Any, ...]) -> str:
    section = _model_at(model, loc[:-1])
    key = loc[-1]
    if section is None or not isinstance(key, str):
        return ""
    names = [f.alias or n for n, f in section.model_fields.items()]
    by_lower = {n.lower(): n for n in names}
    if key.lower().replace("_", "") in by_lower:
        return f" (did you mean {by_lower[key.lower().replace('_', '')]}?)"
    close = difflib.get_close_matches(key.lower(), list(by_lower), n=1, cutoff=0.6)
    return f" (did you mean {by_lower[close[0]]}?)" if close else ""


def _problems(model: type[BaseModel], exc: ValidationError) -> list[tuple[str, str]]:

    out: list[tuple[str, str]] = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        got = err.get("input")
        if err["type"] == "extra_forbidden":
            out.append((dotted(loc), f"unknown field{_did_you_mean(model, loc)}"))
            continue
        # a section-level check (model validator) names its values itself: the whole mapping is noise
        quiet = err["type"] == "missing" or (isinstance(got, Mapping) and err["type"] == "value_error")
        shown = "" if quiet else f" (got {_show(got)})"
        out.append((dotted(loc), f"{_message(err)}{shown}"))
    return out


def read_config_file(source: str | Path) -> Any:
    """The parsed YAML document of configuration file ``source`` (``None`` when empty), not yet validated.
    Raises :class:`ConfigError` (unreadable, larger than :data:`MAX_CONFIG_BYTES`, not UTF-8, not YAML,
    duplicate keys)."""
    return _read(source)[1]


def _read(source: str | Path) -> tuple[str, Any]:
    name = str(source)
    try:  # the hardened reader (policy.documents): bounded, UTF-8
        text = read_text(source, max_bytes=MAX_CONFIG_BYTES)
    except FileError as exc:
        problem = str(exc).removeprefix(f"{name}: ")
        if "more than" in problem:
            problem = f"larger than {MAX_CONFIG_BYTES} bytes (not a configuration file)"
        raise ConfigError(name, [("", problem)]) from None
    try:
        return name, load_yaml(text)
    except DocumentError as exc:
        raise ConfigError(
            name, [(p.path, f"line {p.line}: {p.message}" if p.line else p.message) for p in exc.problems]
        ) from None


def load_config(
    model: type[M], kind: str, source: str | Path | Mapping[str, Any] | None, *, check_files: bool = False
) -> M:
    """Load and validate a configuration of ``kind`` into ``model``.

    ``source``: a YAML file path (an empty file is an error), an already-parsed mapping, or ``None`` for all
    defaults. ``check_files``: also check that the files the configuration names exist (:func:`check_path`).
    Raises :class:`ConfigError` with every problem (unreadable, not UTF-8 or invalid YAML, duplicate keys, wrong
    apiVersion/kind, unknown or doubly given fields, wrongly typed or out-of-range values, missing files).
    """
    if source is None:
        return model()
    if isinstance(source, Mapping):
        name, data = "<config>", dict(source)
    else:
        name, data = _read(source)
        if data is None:
            raise ConfigError(
                name, [("", f"empty file: expected apiVersion: {API_VERSION}, kind: {kind} and its fields")]
            )
        if not isinstance(data, Mapping):
            raise ConfigError(name, [("", f"expected a mapping of fields at the top level (got {_show(data)})")])
        data = dict(data)
    problems: list[tuple[str, str]] = []
    api = data.pop("apiVersion", None)
    k = data.pop("kind", None)
    if api != API_VERSION:
        problems.append(("apiVersion", f"must be {API_VERSION} (got {_show(api)})"))
    if k != kind:
        problems.append(("kind", f"must be {kind} (got {_show(k)})"))
    try:
        cfg = model.model_validate(data, context={"check_files": check_files})
    except ValidationError as exc:
        problems.extend(_problems(model, exc))
        cfg = None
    if problems:
        raise ConfigError(name, problems)
    assert cfg is not None
    return cfg


# ---- kinds and schemas -----------------------------------------------------------------------------------------


def json_schema(kind: str, model: type[BaseModel]) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a ``kind`` document: ``apiVersion`` and ``kind`` fixed, the fields by
    their camelCase names, unknown fields refused (``additionalProperties: false``), and every ``*Seconds``
    number at most :data:`MAX_SECONDS` (what :class:`ConfigModel` enforces for every ``*_seconds`` field). The
    Helm chart's values.schema.json embeds these (hack/chart_schema.py)."""
    schema = model.model_json_schema(by_alias=True, mode="validation")
    _drop_titles(schema)
    _bound_seconds(schema)
    props = schema.setdefault("properties", {})
    schema["properties"] = {
        "apiVersion": {"const": API_VERSION, "description": "Schema version of this file."},
        "kind": {"const": kind},
        **props,
    }
    schema["required"] = ["apiVersion", "kind", *schema.get("required", ())]
    schema["title"] = kind
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def _bound_seconds(node: Any) -> None:
    """Add ``maximum: MAX_SECONDS`` to every numeric property named ``*Seconds`` (or tighten none: a smaller
    maximum stays), in place, at any depth."""
    if isinstance(node, dict):
        for name, prop in (node.get("properties") or {}).items():
            if name.endswith("Seconds") and isinstance(prop, dict):
                for branch in prop.get("anyOf", [prop]):
                    if isinstance(branch, dict) and branch.get("type") in ("number", "integer"):
                        branch["maximum"] = min(branch.get("maximum", MAX_SECONDS), MAX_SECONDS)
        for v in node.values():
            _bound_seconds(v)
    elif isinstance(node, list):
        for v in node:
            _bound_seconds(v)


def _drop_titles(node: Any) -> None:
    """Remove pydantic's generated ``title`` of every property ("Refreshseconds"): descriptions say more."""
    if isinstance(node, dict):
        props = node.get("properties")
        if isinstance(props, dict):
            for v in props.values():
                if isinstance(v, dict):
                    v.pop("title", None)
        for v in node.values():
            _drop_titles(v)
    elif isinstance(node, list):
        for v in node:
            _drop_titles(v)
