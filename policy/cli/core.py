"""``hrl-policy``: the command line of the policy layer (DESIGN.md section 4).

Subcommands are registered with :func:`subcommand`, one function each; a name with a space
(``"cache serve"``) becomes a nested subcommand. Command bodies import what they need inside the function,
so ``hrl-policy --help`` and light commands start fast, and torch is imported only by the commands that
train or export::

    @subcommand("simulate", "run one simulation", [
        arg("--app", required=True, help="application name"),
        arg("--json", metavar="PATH", help="write the result as JSON"),
    ])
    def cmd_simulate(args: argparse.Namespace) -> int:
        from .sim import run  # lazy
        ...
        return 0

Exit codes: 0 success; 2 bad input (argparse usage errors, and any ``ValueError`` such as
``TopologyError`` / ``ObjectError`` / ``ConfigError``, or ``OSError`` raised by a command: one line on
stderr; a ``ConfigError`` one line per problem, ``FILE: dotted.path: problem``); 130 interrupted. Anything
else is a bug and shows its traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from policy.telemetry import say

__all__ = ["Subcommand", "arg", "subcommand", "build_parser", "main", "SUBCOMMANDS"]


PROG = "hrl-policy"


@dataclass(frozen=True)
class Subcommand:
    """A registered subcommand: ``path`` (``("graph",)``, ``("cache", "serve")``), one-line ``help``,
    ``arguments`` as ``(flags, kwargs)`` pairs for ``ArgumentParser.add_argument``, and ``run(args) -> int``."""

    path: tuple[str, ...]
    help: str
    arguments: tuple[tuple[tuple[str, ...], dict[str, Any]], ...]
    run: Callable[[argparse.Namespace], int]


SUBCOMMANDS: list[Subcommand] = []
"""Every registered subcommand, in registration order."""


def arg(*flags: str, **kwargs: Any) -> tuple[tuple[str, ...], dict[str, Any]]:
    """One argument of a subcommand: the same parameters as ``ArgumentParser.add_argument``."""
    return flags, kwargs


def subcommand(
    name: str, help: str, arguments: Sequence[tuple[tuple[str, ...], dict[str, Any]]] = ()
) -> Callable[[Callable[[argparse.Namespace], int]], Callable[[argparse.Namespace], int]]:
    """Register the decorated ``fn(args) -> exit code`` as subcommand ``name`` (words separated by spaces
    nest: ``"cache serve"``). Raises ``ValueError`` when the name is already registered."""
    path = tuple(name.split())
    if not path:
        raise ValueError("subcommand name is empty")

    def register(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        if any(c.path == path for c in SUBCOMMANDS):
            raise ValueError(f"subcommand {name!r} registered twice")
        SUBCOMMANDS.append(Subcommand(path, help, tuple(arguments), fn))
        return fn

    return register


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser with every registered subcommand (nested ones under their group)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="hrl-scheduler policy tools: call graphs, simulation, training, bundles, embedding cache.",
    )
    from policy.telemetry import add_log_format_argument, add_version_argument

    add_log_format_argument(parser)
    add_version_argument(parser, PROG)
    top = parser.add_subparsers(title="subcommands", metavar="COMMAND")
    groups: dict[tuple[str, ...], argparse._SubParsersAction] = {(): top}
    parsers: dict[tuple[str, ...], argparse.ArgumentParser] = {(): parser}
    for cmd in SUBCOMMANDS:
        for depth in range(1, len(cmd.path)):
            prefix = cmd.path[:depth]
            if prefix not in parsers:
                group_help = f"{' '.join(prefix)} subcommands"
                p = groups[prefix[:-1]].add_parser(prefix[-1], help=group_help, description=group_help)
                p.set_defaults(_run=None, _parser=p, _name=" ".join(prefix))
                parsers[prefix] = p
            if prefix not in groups:
                groups[prefix] = parsers[prefix].add_subparsers(title="subcommands", metavar="COMMAND")
        if cmd.path in parsers:  # made as the group of nested commands registered earlier: give it a body
            p = parsers[cmd.path]
            p.description = cmd.help
        else:
            p = groups[cmd.path[:-1]].add_parser(cmd.path[-1], help=cmd.help, description=cmd.help)
        for flags, kwargs in cmd.arguments:
            p.add_argument(*flags, **kwargs)
        p.set_defaults(_run=cmd.run, _parser=p, _name=" ".join(cmd.path))
        parsers[cmd.path] = p
    parser.set_defaults(_run=None, _parser=parser, _name="")
    return parser


def _one_line(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, OSError) and exc.strerror and exc.filename:
        text = f"{exc.filename}: {exc.strerror}"
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``hrl-policy`` with ``argv`` (default ``sys.argv[1:]``) and return the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    from policy.telemetry import configure_logging

    # Warnings and errors of the libraries and commands (a long-running command such as `cache serve` sets its
    # own level); the commands' results go to stdout.
    configure_logging(PROG, "WARNING", args.log_format)
    if args._run is None:
        args._parser.print_help(sys.stderr)
        return 2
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except (ValueError, OSError) as exc:
        from policy.config import ConfigError

        if isinstance(exc, ConfigError):  # the configuration error format of every component, one line each
            for line in exc.lines():
                say(line, logging.ERROR, prog=PROG)
            return 2
        say(f"{PROG} {args._name}: error: {_one_line(exc)}", logging.ERROR, prog=PROG)
        return 2
