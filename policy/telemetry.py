"""What every hrl-scheduler process shares for operations: its version, its logs and its standard metrics.

- :func:`version_string` / :func:`add_version_argument`: ``--version`` of ``hrl-extender``, ``hrl-descheduler``
  and ``hrl-policy`` (``PROG VERSION (Python X.Y.Z)``; the version is the installed distribution's).
- :func:`configure_logging`: stdlib :mod:`logging` on stderr in one of two formats (``--log-format``):

  - ``text``: ``2026-11-30T12:00:00.123Z INFO hrl-extender extender: message key=value ...``;
  - ``json``: one object per line (python-json-logger), with ``timestamp`` (RFC 3339, UTC), ``level``,
    ``component``, ``logger``, ``message``, and every structured field passed as ``extra={...}``
    (``exc_info`` as ``exc_info``).

  The same shape for every record of every library: uvicorn's ``color_message`` (the message again, with ANSI
  colour codes) is dropped, and Python warnings (``warnings.warn``, e.g. numpy's ``RuntimeWarning``) become records
  of logger ``py.warnings``. Replaces the root logger's handlers (so a second call, e.g. in tests, writes to the
  current ``sys.stderr``).
- :func:`say`: one message for the user on stderr: the line as is with ``text``, one record with ``json``.
- :func:`parse_args`: ``parser.parse_args(argv)``, except that with ``--log-format json`` on the command line a
  usage error is one ERROR record (no usage text), as the command's other errors are; exit 2 either way.
- :func:`progress` / :func:`showing_progress`: progress of long loops, for the commands that turn it on: a tqdm
  bar on a terminal, else (a Pod's log, ``--log-format json``, CI) a record every 10 s and one at the end, in the
  log format; :func:`progress_bar` the same for a loop that counts by hand (a training loop's steps, with its
  running loss as structured fields); :func:`note` a line of a long command's progress (a training iteration).
- :func:`register_process_metrics`: ``hrl_build_info{component,version,python_version}`` (always 1) and
  prometheus-client's process (``process_*``: CPU seconds, resident memory, open fds, start time), platform
  (``python_info``) and garbage-collector (``python_gc_*``) collectors, on the registry passed in.
"""

from __future__ import annotations

import argparse
import json
import logging
import logging.handlers
import platform
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn, TypeVar

from prometheus_client import Info, gc_collector, platform_collector, process_collector
from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = [
    "LOG_FORMATS",
    "DISTRIBUTION",
    "version",
    "version_string",
    "add_version_argument",
    "add_log_format_argument",
    "configure_logging",
    "say",
    "parse_args",
    "progress",
    "progress_bar",
    "ProgressBar",
    "note",
    "showing_progress",
    "PROGRESS_LOG_INTERVAL_S",
    "PROGRESS_MIN_S",
    "register_process_metrics",
    "JsonLinesLog",
]

T = TypeVar("T")

#: The values of ``--log-format``.
LOG_FORMATS: tuple[str, ...] = ("text", "json")

#: The distribution whose version ``--version`` reports.
DISTRIBUTION = "hrl-scheduler"

LogFormat = Literal["text", "json"]

# LogRecord attributes that are not structured fields (everything else in record.__dict__ came from extra=), and
# the extras libraries add that repeat the message: uvicorn's color_message (with ANSI escape codes).
_RECORD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message", "asctime", "component", "color_message"
}  # fmt: skip
#: The format configure_logging set last ("text" until it is called).
_format: str = "text"


def version() -> str:
    """The installed ``hrl-scheduler`` version (``0+unknown`` when run from a tree that is not installed)."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "0+unknown"


def version_string(prog: str) -> str:
    """``"PROG VERSION (Python X.Y.Z)"``, what ``--version`` prints."""
    return f"{prog} {version()} (Python {platform.python_version()})"


def add_version_argument(parser: argparse.ArgumentParser, prog: str) -> None:
    """Add ``--version`` (prints :func:`version_string` on stdout, exit 0) to ``parser``."""
    parser.add_argument("--version", action="version", version=version_string(prog))


def add_log_format_argument(parser: argparse.ArgumentParser, default: str = "text") -> None:
    """Add ``--log-format text|json`` (dest ``log_format``) to ``parser``."""
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default=default,
        help=f"log lines on stderr: text (readable) or json (one object per line); default {default}",
    )


def _rfc3339(created: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{int(created % 1 * 1000):03d}Z"


class _ComponentFilter(logging.Filter):
    """Stamps every record with the process's component name."""

    def __init__(self, component: str):
        super().__init__()
        self.component = component

    def filter(self, record: logging.LogRecord) -> bool:
        record.component = self.component
        if record.name == "py.warnings":  # warnings.formatwarning's text ends with a newline
            record.msg, record.args = record.getMessage().strip(), ()
        return True


class TextFormatter(logging.Formatter):
    """``TIMESTAMP LEVEL COMPONENT LOGGER: MESSAGE key=value ...`` (structured fields sorted by key)."""

    def format(self, record: logging.LogRecord) -> str:
        fields = {k: v for k, v in record.__dict__.items() if k not in _RECORD_ATTRS and not k.startswith("_")}
        line = f"{_rfc3339(record.created)} {record.levelname} {getattr(record, 'component', '-')} {record.name}: "
        line += record.getMessage()
        if fields:
            line += " " + " ".join(f"{k}={_text_value(v)}" for k, v in sorted(fields.items()))
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _text_value(v: Any) -> str:
    s = str(v)
    return repr(s) if (not s or any(c.isspace() for c in s) or "=" in s) else s


def _json_formatter() -> logging.Formatter:

    class _Formatter(JsonFormatter):
        def add_fields(self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict) -> None:
            super().add_fields(log_data, record, message_dict)
            log_data["timestamp"] = _rfc3339(record.created)

    return _Formatter(
        "{levelname}{component}{name}{message}",
        style="{",
        rename_fields={"levelname": "level", "name": "logger", "exc_info": "exc_info"},
        reserved_attrs=[*RESERVED_ATTRS, "color_message"],
        json_ensure_ascii=False,
    )


def configure_logging(
    component: str, level: str | int = "INFO", fmt: str = "text", stream: Any = None
) -> logging.Logger:
    """Send every logger's records at ``level`` and above to ``stream`` (default: the current ``sys.stderr``)
    in format ``fmt`` (``text`` | ``json``), each stamped with ``component``; returns the logger named
    ``component``. Raises ``ValueError`` for an unknown format or level."""
    if fmt not in LOG_FORMATS:
        raise ValueError(f"--log-format: expected one of {', '.join(LOG_FORMATS)}, got {fmt!r}")
    if isinstance(level, str):
        lvl = logging.getLevelName(level.upper())
        if not isinstance(lvl, int):
            raise ValueError(f"log level: expected DEBUG, INFO, WARNING or ERROR, got {level!r}")
        level = lvl
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.addFilter(_ComponentFilter(component))
    handler.setFormatter(_json_formatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(True)  # warnings.warn -> logger py.warnings, in this format
    global _format
    _format = fmt
    return logging.getLogger(component)


def say(text: str, level: int = logging.WARNING, prog: str | None = None) -> None:
    """One message for the user on stderr, in the format of :func:`configure_logging`: with ``text`` the line
    as is (``"PROG sub: warning: ..."``, or a configuration problem ``FILE: path: problem``); with ``json`` one
    record at ``level`` of logger ``prog`` (a leading ``"PROG: "`` / ``"PROG SUB: "`` becomes ``""`` / ``"SUB: "``:
    the record's component says the program; a ``warning:`` / ``error:`` / ``note:`` tag after it sets the
    level), shown whatever the command's log level."""
    if _format != "json":
        print(text, file=sys.stderr, flush=True)
        return
    msg = text
    head, sep, rest = text.partition(": ")
    if prog and sep and (head == prog or head.startswith(prog + " ")):
        sub, msg = head[len(prog) :].strip(), rest
        for tag, lvl in (("warning: ", logging.WARNING), ("error: ", logging.ERROR), ("note: ", logging.INFO)):
            if msg.startswith(tag):
                msg, level = msg[len(tag) :], lvl
        msg = f"{sub}: {msg}" if sub else msg
    log = logging.getLogger(prog or "hrl")
    # handle(), not log(): a message for the user is shown whatever the command's log level
    log.handle(log.makeRecord(log.name, level, "(say)", 0, msg, (), None))


def _log_format_in(argv: Sequence[str]) -> str | None:
    """The value of the last ``--log-format`` in ``argv`` (before a ``--``), or ``None``."""
    fmt = None
    for i, a in enumerate(argv):
        if a == "--":
            break
        if a == "--log-format" and i + 1 < len(argv):
            fmt = argv[i + 1]
        elif a.startswith("--log-format="):
            fmt = a.partition("=")[2]
    return fmt


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """``parser.parse_args(argv)`` (default ``sys.argv[1:]``). argparse reports a usage error before the log format
    is known: when ``argv`` asks for ``--log-format json`` the error is one ERROR record of logger ``parser.prog``
    (the message without ``PROG: error: ``, as :func:`say` writes it) instead of the usage text and
    ``PROG: error: ...``; exit 2 either way. Otherwise argparse's own behaviour, unchanged."""
    args = list(sys.argv[1:] if argv is None else argv)
    if _log_format_in(args) != "json":
        return parser.parse_args(args)
    prog = parser.prog

    def error(message: str) -> NoReturn:
        configure_logging(prog, "WARNING", "json")
        say(f"{prog}: error: {' '.join(message.split())}", logging.ERROR, prog=prog)
        raise SystemExit(2)

    parser.error = error  # type: ignore[method-assign]
    return parser.parse_args(args)


_progress_on: ContextVar[bool] = ContextVar("hrl_progress", default=False)
#: Seconds between two progress records when there is no terminal.
PROGRESS_LOG_INTERVAL_S = 10.0
#: A loop over in less than this many seconds gets no final record.
PROGRESS_MIN_S = 1.0


@contextmanager
def showing_progress(enabled: bool = True) -> Iterator[None]:
    """Within this block :func:`progress` reports (a command line turns it on; libraries, tests and the bench
    never see a bar)."""
    token = _progress_on.set(enabled)
    try:
        yield
    finally:
        _progress_on.reset(token)


def progress(iterable: Iterable[T], desc: str, total: int | None = None, unit: str = "it") -> Iterable[T]:
    """``iterable``, reporting its progress when :func:`showing_progress` is on: a tqdm bar on stderr when it is a
    terminal and the log format is text; otherwise a record ``"DESC: N/TOTAL UNIT (S s)"`` of logger
    ``progress`` (structured fields ``done``, ``total``, ``elapsed_s``) every :data:`PROGRESS_LOG_INTERVAL_S` and
    at the end (when the loop took :data:`PROGRESS_MIN_S` or more). Off: ``iterable`` itself, nothing added."""
    if not _progress_on.get():
        return iterable
    if _format != "json" and sys.stderr.isatty():
        from tqdm import tqdm

        return tqdm(iterable, desc=desc, total=total, unit=unit, file=sys.stderr, leave=False)
    return _logged_progress(iterable, desc, total, unit)


def _logged_progress(iterable: Iterable[T], desc: str, total: int | None, unit: str) -> Iterator[T]:
    bar = ProgressBar(desc, total, unit, "records")
    for item in iterable:
        yield item
        bar.update(1)
    bar.close()


class ProgressBar:
    """The progress of a loop that counts by hand (:func:`progress_bar`): ``update(n)`` after each step,
    ``set_postfix(**fields)`` for the running figures (a loss, a return), ``close()`` at the end (or ``with``).
    ``mode``: ``"off"`` (nothing reported), ``"terminal"`` (a tqdm bar on stderr) or ``"records"`` (a record
    ``"DESC: N/TOTAL UNIT (S s) key=value ..."`` of logger ``progress`` every :data:`PROGRESS_LOG_INTERVAL_S` and
    at the end when the loop took :data:`PROGRESS_MIN_S` or more; structured fields ``done``, ``total``,
    ``elapsed_s`` and ``postfix``, the last figures set). ``shown``: whether it reports anything (a loop may log
    its own lines when it does not)."""

    def __init__(self, desc: str, total: int | None, unit: str, mode: Literal["off", "terminal", "records"]):
        self.desc, self.total, self.unit, self.mode = desc, total, unit, mode
        self.shown = mode != "off"
        self.done = 0
        self.postfix: dict[str, str] = {}
        self._t0 = self._last = time.monotonic()
        self._bar: Any = None
        if mode == "terminal":
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=False)

    def update(self, n: int = 1) -> None:
        """``n`` more steps done."""
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
        elif self.mode == "records" and time.monotonic() - self._last >= PROGRESS_LOG_INTERVAL_S:
            self._last = time.monotonic()
            self._record(False)

    def set_postfix(self, **fields: Any) -> None:
        """The running figures shown next to the count (values as text, e.g. ``loss="0.0123"``)."""
        self.postfix = {k: str(v) for k, v in fields.items()}
        if self._bar is not None:
            self._bar.set_postfix(**fields)

    def close(self) -> None:
        """The end: the terminal bar removed, or the final record (a loop under :data:`PROGRESS_MIN_S` has none)."""
        if self._bar is not None:
            self._bar.close()
        elif self.mode == "records" and time.monotonic() - self._t0 >= PROGRESS_MIN_S:
            self._record(True)
        self.mode = "off"  # a second close() says nothing

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _record(self, final: bool) -> None:
        log = logging.getLogger("progress")
        log.setLevel(logging.INFO)  # reported even where the command logs warnings only
        elapsed = time.monotonic() - self._t0
        of = f"/{self.total}" if self.total is not None else ""
        figures = "".join(f" {k}={v}" for k, v in self.postfix.items())
        extra: dict[str, Any] = {"done": self.done, "total": self.total, "elapsed_s": round(elapsed, 1)}
        if self.postfix:
            extra["postfix"] = dict(self.postfix)
        log.info(
            "%s: %d%s %s (%.1f s)%s%s", self.desc, self.done, of, self.unit, elapsed, figures,
            " done" if final else "", extra=extra,
        )  # fmt: skip


def progress_bar(desc: str, total: int | None = None, unit: str = "it", enabled: bool = True) -> ProgressBar:
    """A :class:`ProgressBar` for a loop that counts by hand, reporting as :func:`progress` does: off unless a command
    turned :func:`showing_progress` on (and ``enabled``: the caller's own switch, e.g. a trainer's ``progress``); a
    tqdm bar on a terminal with text logs; else records of logger ``progress`` (JSON ones with ``--log-format
    json``)."""
    if not (enabled and _progress_on.get()):
        return ProgressBar(desc, total, unit, "off")
    return ProgressBar(desc, total, unit, "terminal" if _format != "json" and sys.stderr.isatty() else "records")


def note(text: str) -> None:
    """A line of a long command's progress for the user (a training iteration, an evaluation, a stage's result):
    :func:`say` at INFO as logger ``hrl-policy`` (the line as is with ``text``, one record with ``json``, whatever
    the log level)."""
    say(text, logging.INFO, prog="hrl-policy")


def register_process_metrics(
    registry: CollectorRegistry, component: str, labels: Mapping[str, str] | None = None
) -> None:
    """Register ``hrl_build_info`` (labels ``component``, ``version``, ``python_version`` and ``labels``) and
    the process, platform and GC collectors of prometheus-client on ``registry``. Call once per registry
    (a second call raises ``ValueError`` from prometheus-client: duplicated time series)."""
    info = Info("hrl_build", "Version of the running hrl-scheduler component (always 1).", registry=registry)
    info.info(
        {"component": component, "version": version(), "python_version": platform.python_version(), **(labels or {})}
    )
    process_collector.ProcessCollector(registry=registry)
    platform_collector.PlatformCollector(registry=registry)
    gc_collector.GCCollector(registry=registry)


class JsonLinesLog:
    """A JSON-lines file with size-based rotation (:class:`logging.handlers.RotatingFileHandler`: ``path`` rotates
    at ``max_bytes`` bytes, keeping ``backups`` old files ``path.1`` .. ``path.N``), written through a logger of
    its own (``name``, not propagated: nothing reaches the process's log). Its folder is created. Raises
    ``OSError`` when the file cannot be opened. Used by the extender's decision record and the descheduler's
    shadow log."""

    def __init__(self, path: str | Path, max_bytes: int, backups: int, name: str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._handler: logging.Handler | None = logging.handlers.RotatingFileHandler(
            str(self.path), maxBytes=max_bytes, backupCount=backups, encoding="utf-8"
        )
        self._handler.setFormatter(logging.Formatter("%(message)s"))
        self._logger = logging.getLogger(f"{name}.{id(self)}")
        self._logger.propagate = False
        self._logger.setLevel(logging.INFO)
        self._logger.addHandler(self._handler)

    def write(self, record: Any) -> None:
        """Append ``record`` as one compact JSON line."""
        self._logger.info(json.dumps(record, separators=(",", ":")))

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._handler is not None:
            self._logger.removeHandler(self._handler)
            self._handler.close()
            self._handler = None
