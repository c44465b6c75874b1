"""The Prometheus resource-use source (policy.live.prometheus.PrometheusUsage) against a REAL Prometheus (marker
``prometheus``): an exporter in this process serves cAdvisor-shaped series (``container_cpu_usage_seconds_total``
counters growing at known rates, ``container_memory_working_set_bytes``), including the series a pod's use must NOT
count: cAdvisor's pod-level cgroup (``container=""``) and the pause container (``container="POD"``); the same target
is scraped by two jobs (the query keeps one series per container). A pod whose series start late is not measured until
its series covers a whole window (the simulator's "bound since the last minute" rule)."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import httpx
import pytest
from prom_helpers import PrometheusServer, prometheus_binary, static_scrape
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from policy.live import UsageInput, open_usage_source

pytestmark = pytest.mark.prometheus

WINDOW_S = 4
SCRAPE = "500ms"
#: pod -> container -> (cores, working set bytes); "istio-proxy" is the mesh sidecar, counted as metrics-server does
PODS = {
    ("shop", "web-1"): {"app": (0.25, 100 * 2**20), "istio-proxy": (0.012, 40 * 2**20)},
    ("shop", "web-2"): {"app": (0.5, 120 * 2**20), "istio-proxy": (0.02, 41 * 2**20)},
    ("shop", "db-0"): {"db": (1.25, 2**30)},
}
LATE = ("shop", "web-3")


class CadvisorCollector:
    """cAdvisor's view of :data:`PODS` (and of :data:`LATE` from ``late_at`` on, once a test sets it), counters from
    0 at start."""

    def __init__(self):
        self.start = time.time()
        self.late_at: float | None = None

    def collect(self):
        now = time.time()
        t = now - self.start
        cpu = CounterMetricFamily(
            "container_cpu_usage_seconds_total", "cpu (replay)", labels=["namespace", "pod", "container", "id"]
        )
        mem = GaugeMetricFamily(
            "container_memory_working_set_bytes", "memory (replay)", labels=["namespace", "pod", "container", "id"]
        )
        pods = dict(PODS)
        if self.late_at is not None and now >= self.late_at:
            pods[LATE] = {"app": (0.3, 90 * 2**20)}
        for (ns, pod), cs in pods.items():
            age = t if (ns, pod) != LATE else now - (self.late_at or now)
            for c, (cores, ws) in cs.items():
                cpu.add_metric([ns, pod, c, f"/kubepods/{pod}/{c}"], cores * age, timestamp=now)
                mem.add_metric([ns, pod, c, f"/kubepods/{pod}/{c}"], ws, timestamp=now)
            # the pod's own cgroup (the sum again) and the pause container: never part of a pod's use
            cpu.add_metric([ns, pod, "", f"/kubepods/{pod}"], sum(x for x, _ in cs.values()) * age, timestamp=now)
            cpu.add_metric([ns, pod, "POD", f"/kubepods/{pod}/pause"], 0.001 * age, timestamp=now)
            mem.add_metric([ns, pod, "POD", f"/kubepods/{pod}/pause"], 2**20, timestamp=now)
        yield cpu
        yield mem


@pytest.fixture(scope="module")
def prom():
    registry = CollectorRegistry(auto_describe=False)
    collector = CadvisorCollector()
    registry.register(collector)
    httpd, _thread = start_http_server(0, "127.0.0.1", registry)
    target = f"127.0.0.1:{httpd.server_port}"
    workdir = Path(tempfile.mkdtemp(prefix="hrl-prometheus-usage-"))
    # the same series scraped twice (two jobs, as with cAdvisor and a second scrape of the kubelet)
    configs = static_scrape("cadvisor", [target]) + static_scrape("cadvisor-again", [target])
    server = PrometheusServer(prometheus_binary(), workdir, configs, SCRAPE, "450ms")
    try:
        server.start()
        server.wait_for_window("container_cpu_usage_seconds_total", WINDOW_S)
        server.collector = collector
        yield server
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
        httpd.shutdown()
        httpd.server_close()


def test_a_pod_s_use_is_the_sum_of_its_containers_sidecars_included_and_a_late_pod_waits_a_whole_window(prom):
    requests: list[str] = []
    client = httpx.Client(event_hooks={"request": [lambda r: requests.append(r.url.path)]})
    src = open_usage_source(f"prometheus+cadvisor://127.0.0.1:{prom.port}?window={WINDOW_S}s", client=client)
    prom.collector.late_at = time.time()  # a pod starts now: its series exist from the next scrape on
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not prom.query('container_cpu_usage_seconds_total{pod="web-3"}'):
        time.sleep(0.2)
    r = src.read()
    assert requests == ["/api/v1/query"]  # cpu, memory, coverage and sample time in one query
    for (ns, pod), cs in PODS.items():
        assert r.cpu_m[f"{ns}/{pod}"] == pytest.approx(1000 * sum(c for c, _ in cs.values()), rel=0.03), pod
        assert r.memory_bytes[f"{ns}/{pod}"] == sum(m for _, m in cs.values()), pod
    assert "shop/web-3" not in r.cpu_m  # bound since the window started: not measured yet
    assert r.taken_at_s is not None and abs(time.time() - r.taken_at_s) < 5
    assert r.window_s == WINDOW_S
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and "shop/web-3" not in (r := src.read()).cpu_m:
        time.sleep(0.5)
    assert r.cpu_m["shop/web-3"] == pytest.approx(300.0, rel=0.03)
    src.close()
    client.close()


def test_the_usage_input_names_an_unreachable_prometheus_and_drops_a_reading_gone_stale(prom):
    src = open_usage_source(f"prometheus+cadvisor://127.0.0.1:{prom.port}?window={WINDOW_S}s&timeout=2s")
    ui = UsageInput(src, max_age_s=30)
    assert ui.refresh() and ui.usable_reading() is not None
    prom.stop()
    try:
        assert not ui.refresh()
        assert "cannot reach Prometheus" in ui.error and ui.usable_reading() is not None  # last good one
        ui.max_age_s = 0.001
        assert ui.usable_reading() is None
    finally:
        prom.start()
        ui.close()
