"""What every hrl-scheduler process shares for operations: its version, its logs and its standard metrics.

- :func:`version_string` / :func:`add_version_argument`: ``--version`` of ``hrl-extender``, ``hrl-descheduler``
  and ``hrl-policy`` (``PROG VERSION (Python X.Y.Z)``; the version is the installed distribution's).
- :func:`configure_logging`: stdlib :mod:`logging` on stderr in one of two formats (``--log-format``):

  - ``text``: ``2026-11-30T12:00:00.123Z INFO hrl-extender extender: message key=value ...``;
  - ``json``: one object per line (python-json-logger), with ``timestamp`` (RFC 3339, UTC), ``level``,
    ``component``, ``logger``, ``message``, and every structured field passed as ``extra={...}``
    (``exc_info`` as ``exc_info``).

  Replaces the root logger's handlers (so a second call, e.g. in tests, writes to the current ``sys.stderr``).
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
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from prometheus_client import Info, gc_collector, platform_collector, process_collector
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
    "register_process_metrics",
    "JsonLinesLog",
]

#: The values of ``--log-format``.
LOG_FORMATS: tuple[str, ...] = ("text", "json")

#: The distribution whose version ``--version`` reports.
DISTRIBUTION = "hrl-scheduler"

LogFormat = Literal["text", "json"]

# LogRecord attributes that are not structured fields (everything else in record.__dict__ came from extra=).
_RECORD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "component"}


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
    return logging.getLogger(component)


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
