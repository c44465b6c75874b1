"""A real Prometheus for the integration tests (marker ``prometheus``): the Debian package found or installed by
``hack/install-prometheus.sh`` (the tests FAIL with its message when it cannot: they never skip), run on a free
127.0.0.1 port with a temporary configuration and storage directory."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

import httpx
import pytest
from proc_helpers import free_port

ROOT = Path(__file__).resolve().parents[2]


def prometheus_binary() -> str:
    """The path of the ``prometheus`` binary (installing the Debian package when missing)."""
    script = ROOT / "hack" / "install-prometheus.sh"
    try:
        p = subprocess.run([str(script)], capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        pytest.fail("hack/install-prometheus.sh did not finish within 15 min")
    if p.returncode != 0 or not p.stdout.strip():
        pytest.fail(
            "a real Prometheus server is required and could not be installed by "
            f"hack/install-prometheus.sh (exit {p.returncode}):\n{p.stderr[-2000:]}"
        )
    return p.stdout.strip().splitlines()[-1]


def static_scrape(job: str, targets: Iterable[str], labels: Mapping[str, str] | None = None) -> str:
    """One ``scrape_configs`` entry (YAML) scraping ``targets`` as they are (``honor_labels``); ``labels``: added to
    the targets (``__metrics_path__`` sets the path)."""
    lines = [
        f"  - job_name: {job}",
        "    honor_labels: true",
        "    static_configs:",
        f"      - targets: {list(targets)!r}",
    ]
    if labels:
        lines.append("        labels:")
        lines += [f"          {k}: {v!r}" for k, v in labels.items()]
    return "\n".join(lines) + "\n"


class PrometheusServer:
    """``prometheus`` on 127.0.0.1:``port`` with its configuration and storage under ``workdir``: ``scrape_configs``
    (YAML entries, e.g. :func:`static_scrape`), every ``scrape_interval``."""

    def __init__(
        self, binary: str, workdir: Path, scrape_configs: str, scrape_interval: str = "500ms", timeout: str = "450ms"
    ):
        self.binary = binary
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.scrape_interval = scrape_interval
        self.config = workdir / "prometheus.yml"
        self.config.write_text(
            "global:\n"
            f"  scrape_interval: {scrape_interval}\n"
            f"  scrape_timeout: {timeout}\n"
            "scrape_configs:\n" + scrape_configs
        )
        self.log = workdir / "prometheus.log"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 30.0) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    self.binary,
                    f"--config.file={self.config}",
                    f"--storage.tsdb.path={self.workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--storage.tsdb.retention.time=1h",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"prometheus exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        pytest.fail(f"prometheus not ready on {self.url} within {timeout_s:g} s:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def query(self, promql: str, time_s: float | None = None) -> list:
        params = {"query": promql} if time_s is None else {"query": promql, "time": f"{time_s:.3f}"}
        r = httpx.get(f"{self.url}/api/v1/query", params=params, timeout=5)
        r.raise_for_status()
        return r.json()["data"]["result"]

    def full_window_time(self, metric: str, window_s: float, timeout_s: float = 30.0) -> float:
        """The newest sample time ``T`` (unix seconds) of ``metric`` at which ``rate(metric[window_s])`` is exact for a
        linear counter: over ``[T - window_s, T]`` the first sample lies within Prometheus's extrapolation threshold
        (1.1 x the mean interval between the window's samples) of the window's start. A scrape missed on a loaded
        machine breaks that, and ``rate()`` then extrapolates half an interval only and reads up to interval/window
        low (promql/functions.go, ``extrapolatedRate``). Waits for such a window; fails the test after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        last = "no sample"
        while time.monotonic() < deadline:
            newest = self.query(f"max(timestamp({metric}))")
            if newest:
                t = float(newest[0]["value"][1])
                series = self.query(f"{metric}[{window_s:g}s]", t)
                if series:
                    ts = [float(v[0]) for v in series[0]["values"]]
                    if len(ts) >= 2:
                        mean, gap = (ts[-1] - ts[0]) / (len(ts) - 1), ts[0] - (t - window_s)
                        if gap < 1.1 * mean:
                            return t
                        last = f"{len(ts)} samples, the first {gap:.3f} s after the start, mean interval {mean:.3f} s"
            time.sleep(0.2)
        pytest.fail(
            f"prometheus has no regularly scraped {window_s:g} s window of {metric} within {timeout_s:g} s ({last})"
        )

    def wait_for_window(self, metric: str, window_s: float, timeout_s: float = 45.0) -> None:
        """Until every series of ``metric`` has samples over more than ``window_s`` seconds."""
        interval = (
            float(self.scrape_interval.removesuffix("ms")) / 1000
            if self.scrape_interval.endswith("ms")
            else float(self.scrape_interval.removesuffix("s"))
        )
        need = int((window_s + 1) / interval) - 1
        q = f"min(count_over_time({metric}[{int(window_s) + 1}s]))"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            res = self.query(q)
            if res and float(res[0]["value"][1]) >= need:
                return
            time.sleep(0.25)
        pytest.fail(
            f"prometheus has not scraped {metric} for {window_s:g} s within {timeout_s:g} s:\n{self.log_tail()}"
        )

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else "(no log)"
