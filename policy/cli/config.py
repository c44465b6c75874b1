"""``hrl-policy config schema KIND`` and ``hrl-policy config check FILE...``: the configuration kinds as JSON
Schema (for editor validation, e.g. the YAML language server's ``# yaml-language-server: $schema=FILE``), and the
offline check of configuration files with what the components run at start: the loader (the schema, the files it
names), then the component's start-up check (entry points of group
:data:`policy.config.STARTUP_CHECK_ENTRY_POINTS`: the sources read, bundles and TLS files loaded, exclusive
options, without serving or contacting a cluster).

The kinds are the entry points of group ``hrl_scheduler.configs`` (:data:`policy.config.CONFIG_ENTRY_POINTS`):
``ExtenderConfiguration`` and ``DeschedulerConfiguration`` (registered by the extender and the descheduler, so
``policy`` never imports them), ``App`` and ``ThresholdAutoscaler`` (the simulator's files).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path

from policy.config import (
    CONFIG_ENTRY_POINTS,
    STARTUP_CHECK_ENTRY_POINTS,
    ConfigError,
    ConfigModel,
    json_schema,
    load_config,
    read_config_file,
)
from policy.telemetry import say

PROG = "hrl-policy"

__all__ = ["config_kinds", "startup_checks", "run_schema", "run_check"]


def config_kinds() -> dict[str, type[ConfigModel]]:
    """Installed configuration kinds: kind → model class, sorted by kind. Raises ``ValueError`` when none is
    registered (the distribution's entry points are not installed: ``pip install -e .``)."""
    kinds = {ep.name: ep.load() for ep in entry_points(group=CONFIG_ENTRY_POINTS)}
    if not kinds:
        raise ValueError(
            f"no configuration kinds registered (entry points {CONFIG_ENTRY_POINTS}: reinstall the package)"
        )
    return dict(sorted(kinds.items()))


def startup_checks() -> dict[str, Callable[[ConfigModel], list[str]]]:
    """The installed start-up checks: kind → function (the loaded model → ``dotted.path: problem`` lines)."""

    return {ep.name: ep.load() for ep in entry_points(group=STARTUP_CHECK_ENTRY_POINTS)}


def _problem(line: str) -> tuple[str, str]:
    """``"policy.bundle: no such file"`` → ``("policy.bundle", "no such file")`` (a line without a path: ``""``)."""
    head, sep, rest = line.partition(": ")
    if sep and head and " " not in head:
        return head, rest
    return "", line


def run_schema(args: argparse.Namespace) -> int:
    """Print (or write to ``--out``) the JSON Schema of ``args.kind``; ``ValueError`` for an unknown kind."""
    kinds = config_kinds()
    if args.kind not in kinds:
        raise ValueError(f"unknown kind {args.kind!r} (known: {', '.join(kinds)})")
    text = json.dumps(json_schema(args.kind, kinds[args.kind]), indent=2) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def run_check(args: argparse.Namespace) -> int:
    """Load every file with its own ``kind``'s model (the files it names checked too), then run the kind's start-up
    check; print ``ok: KIND (FILE)`` per good file and every problem of the bad ones, one line each
    (``FILE: dotted.path: problem``). Exit 0 when all are good, else 2."""
    kinds = config_kinds()
    checks = startup_checks()
    bad = 0
    for f in args.files:
        try:
            doc = read_config_file(f)
            kind = doc.get("kind") if isinstance(doc, dict) else None
            if kind not in kinds:
                got = "an empty file" if doc is None else repr(kind)
                raise ConfigError(f, [("kind", f"must be one of {', '.join(kinds)} (got {got})")])
            model = load_config(kinds[kind], kind, f, check_files=True)
            check = checks.get(kind)
            problems = check(model) if check is not None else []
            if problems:
                raise ConfigError(f, [_problem(p) for p in problems])
        except ConfigError as exc:
            bad += 1
            for line in exc.lines():
                say(line, logging.ERROR, prog=PROG)
            continue
        print(f"ok: {kind} ({f})")
    return 2 if bad else 0
