"""The live call-graph source against a REAL Prometheus server (marker ``prometheus``).

Setup (module scope): ``hack/install-prometheus.sh`` finds or installs the Debian package ``prometheus`` (the test
FAILS with the script's message when it cannot: these tests never skip); an exporter in this process
(``prom_exporter.py``) replays the Online Boutique spans as Istio, Linkerd and OpenTelemetry service-graph series,
100x accelerated; Prometheus runs on a free 127.0.0.1 port with a temporary configuration and storage directory,
scraping it every 500 ms; the tests start once every series covers the 4 s rate window.

Expected values come from ``tests/fixtures/online-boutique-spans/PROVENANCE.md`` (spans per edge, caller
requests, mean latency, percentiles), independently of the code under test: rps = 100 x spans / 108.100294386 s.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest
from proc_helpers import free_port
from prom_exporter import ISTIO_BUCKETS_MS, LINKERD_BUCKETS_MS, OTEL_BUCKETS_S, ReplayCollector, ReplayTable, serve

from extender.server import ExtenderServer
from policy.topology.live import TopologyRefresher
from policy.topology.prometheus import PrometheusSource

pytestmark = pytest.mark.prometheus

ROOT = Path(__file__).resolve().parents[2]
SPANS_DIR = ROOT / "tests/fixtures/online-boutique-spans"
MANIFESTS = ROOT / "tests/fixtures/online-boutique-manifests"
CLUSTER = ROOT / "tests/fixtures/extender/cluster-list.json"
TABLE_WINDOW_S = 108.100294386  # PROVENANCE.md: min start .. max end of the excerpt
SPEED = 100.0
WINDOW = "4s"
SCRAPE = "500ms"
NAMESPACE = "boutique"
DECOY_NS, DECOY_RPS = "staging", 5.0
FAILING_EDGE, FAILING_SHARE = ("checkoutservice", "paymentservice"), 0.25
RATE_TOLERANCE = 0.02  # timing of scrapes vs the exporter's clock: well under 1 % in practice
BUCKETS_MS = {
    "istio": ISTIO_BUCKETS_MS,
    "linkerd": LINKERD_BUCKETS_MS,
    "otel": tuple(b * 1000.0 for b in OTEL_BUCKETS_S),
}


def provenance_table() -> dict[tuple[str, str], dict[str, float]]:
    text = (SPANS_DIR / "PROVENANCE.md").read_text()
    out = {}
    row = r"^\| ([a-z]+) \| ([a-z]+) \| (\d+) \| (\d+) \|" + r" ([\d.]+) \|" * 4
    for m in re.finditer(row, text, flags=re.M):
        caller, callee, spans, req, mean, p50, p95, p99 = m.groups()
        out[(caller, callee)] = {
            "spans": int(spans),
            "requests": int(req),
            "mean": float(mean),
            "p50": float(p50),
            "p95": float(p95),
            "p99": float(p99),
        }
    assert len(out) == 13
    return out


EXPECTED = provenance_table()


def expected_rps(edge: tuple[str, str]) -> float:
    return SPEED * EXPECTED[edge]["spans"] / TABLE_WINDOW_S


# ---- the server ----------------------------------------------------------------------------------------


def prometheus_binary() -> str:
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


class PrometheusServer:
    """``prometheus`` on 127.0.0.1:``port`` with its configuration and storage under ``workdir``."""

    def __init__(self, binary: str, workdir: Path, target: str):
        self.binary = binary
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = workdir / "prometheus.yml"
        self.config.write_text(
            "global:\n"
            f"  scrape_interval: {SCRAPE}\n"
            "  scrape_timeout: 450ms\n"
            "scrape_configs:\n"
            "  - job_name: replay\n"
            "    honor_labels: true\n"
            "    static_configs:\n"
            f"      - targets: ['{target}']\n"
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

    def query(self, promql: str) -> list:
        r = httpx.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=5)
        r.raise_for_status()
        return r.json()["data"]["result"]

    def wait_for_window(self, timeout_s: float = 45.0) -> None:
        """Until every replayed series has samples over more than the rate window."""
        need = 2 * int(WINDOW[:-1]) + 1  # samples in WINDOW+1s at 2 per second, minus one
        q = f"min(count_over_time(traces_service_graph_request_total[{int(WINDOW[:-1]) + 1}s]))"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            res = self.query(q)
            if res and float(res[0]["value"][1]) >= need:
                return
            time.sleep(0.25)
        pytest.fail(f"prometheus has not scraped the exporter for {WINDOW} within {timeout_s:g} s:\n{self.log_tail()}")

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else "(no log)"


@pytest.fixture(scope="module")
def replay():
    collector = ReplayCollector(
        ReplayTable.from_spans(SPANS_DIR),
        speed=SPEED,
        namespace=NAMESPACE,
        errors={FAILING_EDGE: FAILING_SHARE},
        decoy_namespace=DECOY_NS,
        decoy_rps=DECOY_RPS,
    )
    httpd = serve(collector)
    yield collector, f"127.0.0.1:{httpd.server_port}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def prom(replay):
    binary = prometheus_binary()
    workdir = Path(tempfile.mkdtemp(prefix="hrl-prometheus-"))
    server = PrometheusServer(binary, workdir, replay[1])
    try:
        server.start()
        server.wait_for_window()
        yield server
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def fetch(prom: PrometheusServer, flavor: str, namespace: str | None = NAMESPACE):
    with PrometheusSource(
        prom.url, flavor, window_s=WINDOW, namespace=None if flavor == "otel" else namespace, timeout_s=5
    ) as src:
        return src.fetch_with_warnings()


def bucket_range(bounds: tuple[float, ...], value: float) -> tuple[float, float]:
    """The interval histogram_quantile may answer for a true quantile ``value``: from the lower bound of the bucket
    below the one holding ``value`` to the upper bound of the bucket above it (the quantile rank of a bucketed
    histogram can fall on a neighbour observation), clamped to the finite bounds."""
    i = next((k for k, b in enumerate(bounds) if value <= b), len(bounds))
    lo = bounds[i - 2] if i >= 2 else 0.0
    hi = bounds[min(i + 1, len(bounds) - 1)]
    return lo, hi


# ---- tests ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("flavor", ["istio", "linkerd", "otel"])
def test_the_graph_read_back_through_promql_has_the_13_span_edges_at_the_replayed_rates(prom, replay, flavor):
    graph, warnings = fetch(prom, flavor)
    assert warnings == []
    assert {(e.caller, e.callee) for e in graph.edges} == set(EXPECTED)
    assert len(graph.services) == 10
    for e in graph.edges:
        key = (e.caller, e.callee)
        assert e.rps == pytest.approx(expected_rps(key), rel=RATE_TOLERANCE), key
        assert e.rps == pytest.approx(replay[0].rps(*key), rel=RATE_TOLERANCE), key
        exp = EXPECTED[key]
        assert e.calls_per_request == pytest.approx(exp["spans"] / exp["requests"], rel=RATE_TOLERANCE), key


@pytest.mark.parametrize("flavor", ["istio", "linkerd", "otel"])
def test_latencies_read_back_are_the_spans_mean_and_plausible_bucketed_quantiles(prom, flavor):
    graph, _ = fetch(prom, flavor)
    bounds = BUCKETS_MS[flavor]
    for e in graph.edges:
        exp = EXPECTED[(e.caller, e.callee)]
        assert e.latency_mean_ms == pytest.approx(exp["mean"], rel=RATE_TOLERANCE, abs=1e-3), (e.caller, e.callee)
        for field, q in (("latency_p50_ms", "p50"), ("latency_p95_ms", "p95"), ("latency_p99_ms", "p99")):
            got = getattr(e, field)
            lo, hi = bucket_range(bounds, exp[q])
            assert got is not None and lo - 1e-9 <= got <= hi + 1e-9, (e.caller, e.callee, q, exp[q], got, lo, hi)
        assert e.latency_p50_ms <= e.latency_p95_ms <= e.latency_p99_ms


@pytest.mark.parametrize("flavor", ["istio", "linkerd", "otel"])
def test_the_error_rate_is_the_injected_failing_share(prom, flavor):
    graph, _ = fetch(prom, flavor)
    for e in graph.edges:
        want = FAILING_SHARE if (e.caller, e.callee) == FAILING_EDGE else 0.0
        assert e.error_rate == pytest.approx(want, abs=0.005), (e.caller, e.callee)


@pytest.mark.parametrize("flavor", ["istio", "linkerd"])
def test_a_namespace_keeps_one_namespace_and_without_it_equal_names_merge(prom, flavor):
    edge = ("frontend", "productcatalogservice")
    kept, _ = fetch(prom, flavor, NAMESPACE)
    assert kept.edge(*edge).rps == pytest.approx(expected_rps(edge), rel=RATE_TOLERANCE)
    merged, warnings = fetch(prom, flavor, None)
    assert merged.edge(*edge).rps == pytest.approx(expected_rps(edge) + DECOY_RPS, rel=RATE_TOLERANCE)
    assert len(warnings) == 1 and "frontend, productcatalogservice occur in several namespaces" in warnings[0]


@pytest.mark.parametrize("flavor", ["istio", "linkerd", "otel"])
def test_hrl_policy_graph_on_a_live_uri_prints_the_replayed_edges(prom, flavor):
    exe = Path(sys.executable).parent / "hrl-policy"
    ns = "" if flavor == "otel" else f"&namespace={NAMESPACE}"
    uri = f"prometheus+{flavor}://127.0.0.1:{prom.port}?window={WINDOW}{ns}"
    p = subprocess.run([str(exe), "graph", uri, "--json"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert {(e["caller"], e["callee"]) for e in doc["edges"]} == set(EXPECTED)
    for e in doc["edges"]:
        assert e["rps"] == pytest.approx(expected_rps((e["caller"], e["callee"])), rel=RATE_TOLERANCE)


def test_hrl_policy_graph_combines_declared_manifest_edges_with_observed_rates(prom):
    exe = Path(sys.executable).parent / "hrl-policy"
    uri = f"prometheus+istio://127.0.0.1:{prom.port}?window={WINDOW}&namespace={NAMESPACE}"
    p = subprocess.run(
        [str(exe), "graph", str(MANIFESTS), uri, "--json"], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    edges = {(e["caller"], e["callee"]): e for e in doc["edges"]}
    assert len(doc["services"]) == 12 and len(edges) == 16  # the manifests' graph ...
    for key in EXPECTED:  # ... with the 13 observed rates
        assert edges[key]["rps"] == pytest.approx(expected_rps(key), rel=RATE_TOLERANCE)
    assert {k for k, e in edges.items() if e["rps"] is None} == {
        ("loadgenerator", "frontend"),
        ("checkoutservice", "currencyservice"),
        ("cartservice", "redis-cart"),
    }


def test_when_prometheus_goes_away_the_extender_keeps_the_last_good_graph_and_readyz_says_it_is_stale(prom):
    uri = f"prometheus+istio://127.0.0.1:{prom.port}?window={WINDOW}&namespace={NAMESPACE}&timeout=2s"
    refresher, _ = TopologyRefresher.from_sources([str(MANIFESTS), uri], refresh_s=3600, stale_after_s=0)
    with ExtenderServer(port=0, topology=refresher) as server:
        refresher.on_update = server.store.set_graph
        server.store.load_file(CLUSTER)
        with httpx.Client(base_url=server.base_url, timeout=5) as c:
            st = refresher.refresh_once()
            assert not st.stale
            graph = server.store.get().graph
            assert graph.edge("frontend", "productcatalogservice").rps == pytest.approx(
                expected_rps(("frontend", "productcatalogservice")), rel=RATE_TOLERANCE
            )
            assert graph.edge("loadgenerator", "frontend").rps is None  # declared only
            r = c.get("/readyz")
            assert (r.status_code, r.text) == (200, "ok\n")

            prom.stop()
            try:
                st = refresher.refresh_once()
                assert st.stale and "cannot reach Prometheus" in st.reason
                assert server.store.get().graph == graph  # the last good graph, unchanged
                r = c.get("/readyz")
                assert r.status_code == 200 and "warning: call graph stale" in r.text
                metrics = c.get("/metrics").text
                assert "hrl_topology_graph_stale 1.0" in metrics
                assert (
                    f'hrl_topology_source_errors_total{{source="prometheus+istio://127.0.0.1:{prom.port}"}} 1.0'
                    in metrics
                )
                assert "hrl_topology_graph_edges 16.0" in metrics
            finally:
                prom.start()

            # back: the next refreshes recover (a restarted Prometheus may answer before its first scrape)
            deadline = time.monotonic() + 30
            while (st := refresher.refresh_once()).stale and time.monotonic() < deadline:
                time.sleep(0.5)
            assert not st.stale, st.reason
            assert c.get("/readyz").text == "ok\n"
            assert "hrl_topology_graph_stale 0.0" in c.get("/metrics").text
    refresher.stop()


def test_hrl_extender_with_a_live_source_in_its_configuration_serves_the_observed_graph(prom, tmp_path):
    port = free_port()
    cfg = tmp_path / "extender.yaml"
    cfg.write_text(
        "apiVersion: hrl-scheduler.io/v1alpha1\nkind: ExtenderConfiguration\n"
        "topology:\n"
        f"  sources: ['{MANIFESTS}', 'prometheus+otel://127.0.0.1:{prom.port}?window={WINDOW}']\n"
        "  refreshSeconds: 1\n"
    )
    exe = Path(sys.executable).parent / "hrl-extender"
    # ``with``: the pipe is closed and the process reaped on the way out
    with subprocess.Popen(
        [str(exe), "--config", str(cfg), "--snapshot", str(CLUSTER), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as proc:
        try:
            deadline = time.monotonic() + 20
            ready = None
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1)
                    break
                except httpx.HTTPError:
                    time.sleep(0.1)
            assert ready is not None, proc.stdout.read() if proc.poll() is not None else "no answer"
            assert (ready.status_code, ready.text) == (200, "ok\n")
            metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
            assert "hrl_topology_graph_stale 0.0" in metrics and "hrl_topology_graph_edges 16.0" in metrics
            assert (
                f'hrl_topology_source_errors_total{{source="prometheus+otel://127.0.0.1:{prom.port}"}} 0.0' in metrics
            )
        finally:
            proc.terminate()
            try:
                proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
