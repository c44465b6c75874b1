"""Helpers shared by the integration tests that run our servers as processes on 127.0.0.1."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class ExtenderProcess:
    """A running ``python -m extender``: ``base_url``, the ``ready`` answer of its first ``/readyz``; after the
    context exits, ``returncode`` and ``stderr``."""

    proc: subprocess.Popen
    base_url: str
    ready: httpx.Response | None = None
    returncode: int | None = None
    stderr: str = ""


@contextmanager
def extender_process(config: Path, port: int, *args: str, start_timeout_s: float = 30.0) -> Iterator[ExtenderProcess]:
    """Run ``python -m extender --config CONFIG ARGS...`` (its configuration listens on ``port``) until its
    ``/readyz`` answers; fails the test with its stderr when it exits first, or after ``start_timeout_s``.
    On exit: SIGTERM, then wait up to 15 s (kill after that) and record ``returncode`` and ``stderr``."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "extender", "--config", str(config), *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    ext = ExtenderProcess(proc, f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + start_timeout_s
        while True:
            try:
                ext.ready = httpx.get(ext.base_url + "/readyz", timeout=1)
                break
            except httpx.TransportError:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                assert time.monotonic() < deadline, "hrl-extender did not start"
                time.sleep(0.1)
        yield ext
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, ext.stderr = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, ext.stderr = proc.communicate()
        ext.returncode = proc.returncode
