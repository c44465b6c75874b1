"""A small Prometheus exporter that replays a span table (the Online Boutique spans of
``tests/fixtures/online-boutique-spans``) as the series of three call-graph flavors at once, for the
real-Prometheus tests of :mod:`policy.topology.prometheus`:

- Istio standard metrics: ``istio_requests_total`` and ``istio_request_duration_milliseconds`` (histogram, ms,
  Envoy's default buckets), reported by the destination proxy and by the source proxy (``reporter`` label), with
  ``source_workload`` / ``destination_workload`` (+ ``*_namespace``) and ``response_code`` ("200" / "503");
  requests entering the mesh come from ``source_workload="unknown"``;
- Linkerd proxy metrics: ``request_total``, ``response_total`` (``classification`` success/failure) and
  ``response_latency_ms`` (histogram, ms), ``direction="outbound"`` with ``deployment`` / ``namespace`` and
  ``dst_deployment`` / ``dst_namespace``, plus ``direction="inbound"`` series per serving deployment (requests of
  every caller, entry requests included; responses and latencies of the calls of the table's edges);
- the OpenTelemetry Collector service-graph connector: ``traces_service_graph_request_total``,
  ``traces_service_graph_request_failed_total`` and ``traces_service_graph_request_{server,client}_seconds``
  (histograms, seconds, the connector's default buckets) with ``client`` / ``server`` (entry requests from the
  virtual node ``client="user"``, ``connection_type="virtual_node"``).

Replay: a fluid, accelerated replay. Each edge's counters grow linearly at ``speed`` times the edge's mean rate in
the table (calls / table window), from 0 when the exporter starts; each histogram bucket grows at the rate of the
calls whose latency is <= its bound, and ``_sum`` at the rate of their summed latency. So ``rate(x[W])`` over any
window inside the run equals ``speed * calls / window_s`` (a span-by-span replay would make short windows noisy:
the slowest edge has one call in 108 s), and ``histogram_quantile`` sees the table's latency distribution.
``errors``: an injected failing fraction per edge (the span table has no status column).

Run standalone: ``python tests/integration/prom_exporter.py [--port 9464] [--speed 100]``; it prints its URL.
"""

from __future__ import annotations

import argparse
import bisect
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

from policy.topology.spans import read_spans

ROOT = Path(__file__).resolve().parents[2]
SPANS = ROOT / "tests" / "fixtures" / "online-boutique-spans"

ISTIO_BUCKETS_MS = (
    0.5,
    1,
    5,
    10,
    25,
    50,
    100,
    250,
    500,
    1000,
    2500,
    5000,
    10000,
    30000,
    60000,
    300000,
    600000,
    1800000,
    3600000,
)
"""Envoy's default histogram buckets (ms), which Istio's istio_request_duration_milliseconds uses."""
LINKERD_BUCKETS_MS = (
    1,
    2,
    3,
    4,
    5,
    10,
    20,
    30,
    40,
    50,
    100,
    200,
    300,
    400,
    500,
    1000,
    2000,
    3000,
    4000,
    5000,
    10000,
    20000,
    30000,
    40000,
    50000,
)
"""Bounds of the Linkerd proxy's response_latency_ms histogram."""
OTEL_BUCKETS_S = (0.002, 0.004, 0.006, 0.008, 0.01, 0.05, 0.1, 0.2, 0.4, 0.8, 1, 1.4, 2, 5, 10, 15)
"""servicegraphconnector ``defaultLatencyHistogramBuckets`` (seconds)."""


@dataclass(frozen=True)
class ReplayEdge:
    """One edge of the replayed table: ``calls`` in the table, their latencies (ms, sorted)."""

    caller: str
    callee: str
    calls: int
    latencies_ms: tuple[float, ...]

    def fraction_le(self, bound_ms: float) -> float:
        """Share of the calls with latency <= ``bound_ms`` (the table's calls without a duration count as 0)."""
        if not self.latencies_ms:
            return 1.0
        return bisect.bisect_right(self.latencies_ms, bound_ms) / len(self.latencies_ms)

    @property
    def mean_ms(self) -> float:
        return sum(self.latencies_ms) / len(self.latencies_ms) if self.latencies_ms else 0.0


@dataclass(frozen=True)
class ReplayTable:
    """What is replayed: the edges, each service's entry requests (from outside the table) and served requests,
    and the table window in seconds."""

    edges: tuple[ReplayEdge, ...]
    entry_requests: Mapping[str, int]
    served_requests: Mapping[str, int]
    window_s: float

    @staticmethod
    def from_spans(path: str | Path = SPANS) -> ReplayTable:
        obs = read_spans(path)
        if not obs.window_s:
            raise ValueError(f"{path}: the span table has no time window")
        edges = tuple(
            ReplayEdge(a, b, e.calls, tuple(sorted(e.latencies_ms))) for (a, b), e in sorted(obs.edges.items())
        )
        served = dict(obs.requests or {})
        inbound: dict[str, int] = {}
        for e in edges:
            inbound[e.callee] = inbound.get(e.callee, 0) + e.calls
        entry = {s: n - inbound.get(s, 0) for s, n in served.items() if n - inbound.get(s, 0) > 0}
        return ReplayTable(edges, entry, served, float(obs.window_s))


class ReplayCollector:
    """A prometheus-client collector computing every series from the time elapsed since ``start_s``.

    ``speed``: acceleration (calls per second = speed * calls / window_s); ``namespace``: the Kubernetes namespace
    of every workload; ``errors``: failing fraction (0..1) per (caller, callee); ``decoy_namespace``: when set,
    one more edge ``frontend -> productcatalogservice`` in that namespace at ``decoy_rps`` (to test namespace
    filters and the merging of equal names); ``clock``: seconds (default ``time.time``).
    """

    def __init__(
        self,
        table: ReplayTable,
        speed: float = 100.0,
        namespace: str = "boutique",
        errors: Mapping[tuple[str, str], float] | None = None,
        decoy_namespace: str | None = None,
        decoy_rps: float = 5.0,
        clock: Callable[[], float] = time.time,
    ):
        self.table = table
        self.speed = speed
        self.namespace = namespace
        self.errors = dict(errors or {})
        self.decoy_namespace = decoy_namespace
        self.decoy_rps = decoy_rps
        self.clock = clock
        self.start_s = clock()

    # expected values, for the tests
    def rps(self, caller: str, callee: str) -> float:
        """The replayed rate of an edge (calls/s)."""
        e = next(e for e in self.table.edges if (e.caller, e.callee) == (caller, callee))
        return self.speed * e.calls / self.table.window_s

    def _edges(self, now: float) -> Iterable[tuple[str, ReplayEdge, float]]:
        """(namespace, edge, calls so far at ``now``)."""
        t = max(0.0, now - self.start_s)
        scale = self.speed * t / self.table.window_s
        for e in self.table.edges:
            yield self.namespace, e, e.calls * scale
        if self.decoy_namespace:
            pc = next(
                (e for e in self.table.edges if (e.caller, e.callee) == ("frontend", "productcatalogservice")), None
            )
            if pc is not None:
                yield self.decoy_namespace, pc, self.decoy_rps * t

    def _entries(self, now: float) -> Iterable[tuple[str, float]]:
        t = max(0.0, now - self.start_s)
        scale = self.speed * t / self.table.window_s
        for s, n in sorted(self.table.entry_requests.items()):
            yield s, n * scale

    @staticmethod
    def _buckets(edge: ReplayEdge, bounds: Iterable[float], to_ms: float, count: float) -> list[tuple[str, float]]:
        out = [(repr(float(b)), edge.fraction_le(b * to_ms) * count) for b in bounds]
        out.append(("+Inf", count))
        return out

    def collect(self) -> Iterable[Metric]:
        # every sample carries the time its value was computed for: Prometheus stores it as the sample's timestamp
        # (honor_timestamps), so rate() is exact however late a scrape is served on a loaded machine
        now = self.clock()
        self._ts = now
        edges = list(self._edges(now))
        entries = list(self._entries(now))
        yield from self._istio(edges, entries)
        yield from self._linkerd(edges, entries)
        yield from self._otel(edges, entries)

    def _split(self, e: ReplayEdge, count: float) -> tuple[float, float]:
        f = self.errors.get((e.caller, e.callee), 0.0)
        return count * (1.0 - f), count * f

    def _istio(self, edges, entries) -> Iterable[Metric]:
        labels = [
            "reporter",
            "source_workload",
            "source_workload_namespace",
            "destination_workload",
            "destination_workload_namespace",
            "response_code",
        ]
        req = CounterMetricFamily("istio_requests", "Requests handled by an Istio proxy (replay).", labels=labels)
        dur = HistogramMetricFamily(
            "istio_request_duration_milliseconds", "Request duration, ms (replay).", labels=labels
        )
        for ns, e, count in edges:
            ok, bad = self._split(e, count)
            for reporter in ("destination", "source"):
                for code, n in (("200", ok), ("503", bad)):
                    if n == 0 and code == "503" and (e.caller, e.callee) not in self.errors:
                        continue
                    lv = [reporter, e.caller, ns, e.callee, ns, code]
                    req.add_metric(lv, n, timestamp=self._ts)
                    if reporter == "destination":  # (the source proxy's histogram is left out: smaller scrapes)
                        dur.add_metric(
                            lv, self._buckets(e, ISTIO_BUCKETS_MS, 1.0, n), e.mean_ms * n, timestamp=self._ts
                        )
        for svc, n in entries:
            lv = ["destination", "unknown", "unknown", svc, self.namespace, "200"]
            req.add_metric(lv, n, timestamp=self._ts)
        yield req
        yield dur

    def _linkerd(self, edges, entries) -> Iterable[Metric]:
        out_labels = ["direction", "deployment", "namespace", "dst_deployment", "dst_namespace", "tls"]
        request = CounterMetricFamily("request", "Requests the proxy received (replay).", labels=out_labels)
        response = CounterMetricFamily(
            "response", "Responses the proxy received (replay).", labels=out_labels + ["classification", "status_code"]
        )
        latency = HistogramMetricFamily(
            "response_latency_ms", "Response latency, ms (replay).", labels=out_labels + ["status_code"]
        )
        served: dict[tuple[str, str], float] = {}
        # the callee's proxy (direction="inbound", by serving deployment) sees every call of its incoming edges:
        # one series per deployment, summed over the edges (ok, failed, bucket counts, latency sum)
        inbound: dict[tuple[str, str], dict] = {}
        for ns, e, count in edges:
            ok, bad = self._split(e, count)
            base = ["outbound", e.caller, ns, e.callee, ns, "true"]
            request.add_metric(base, count, timestamp=self._ts)
            response.add_metric(base + ["success", "200"], ok, timestamp=self._ts)
            if (e.caller, e.callee) in self.errors:
                response.add_metric(base + ["failure", "503"], bad, timestamp=self._ts)
            buckets = self._buckets(e, LINKERD_BUCKETS_MS, 1.0, count)
            latency.add_metric(base + ["200"], buckets, e.mean_ms * count, timestamp=self._ts)
            served[(ns, e.callee)] = served.get((ns, e.callee), 0.0) + count
            acc = inbound.setdefault((ns, e.callee), {"ok": 0.0, "bad": 0.0, "sum": 0.0, "buckets": None})
            acc["ok"] += ok
            acc["bad"] += bad
            acc["sum"] += e.mean_ms * count
            acc["buckets"] = (
                buckets if acc["buckets"] is None else [(b, v + w) for (b, v), (_b, w) in zip(acc["buckets"], buckets)]
            )
        for (ns, svc), acc in sorted(inbound.items()):
            base = ["inbound", svc, ns, "", "", "true"]
            response.add_metric(base + ["success", "200"], acc["ok"], timestamp=self._ts)
            response.add_metric(base + ["failure", "503"], acc["bad"], timestamp=self._ts)
            latency.add_metric(base + ["200"], acc["buckets"], acc["sum"], timestamp=self._ts)
        for svc, n in entries:
            served[(self.namespace, svc)] = served.get((self.namespace, svc), 0.0) + n
        for (ns, svc), n in sorted(served.items()):
            request.add_metric(["inbound", svc, ns, "", "", "true"], n, timestamp=self._ts)
        yield request
        yield response
        yield latency

    def _otel(self, edges, entries) -> Iterable[Metric]:
        labels = ["client", "server", "connection_type"]
        total = CounterMetricFamily(
            "traces_service_graph_request", "Requests between two nodes (replay).", labels=labels
        )
        failed = CounterMetricFamily("traces_service_graph_request_failed", "Failed requests (replay).", labels=labels)
        server = HistogramMetricFamily(
            "traces_service_graph_request_server_seconds",
            "Request time seen from the server, s (replay).",
            labels=labels,
        )
        client = HistogramMetricFamily(
            "traces_service_graph_request_client_seconds",
            "Request time seen from the client, s (replay).",
            labels=labels,
        )
        for ns, e, count in edges:
            if ns != self.namespace:
                continue  # the connector has no namespace label
            _, bad = self._split(e, count)
            lv = [e.caller, e.callee, ""]
            total.add_metric(lv, count, timestamp=self._ts)
            failed.add_metric(lv, bad, timestamp=self._ts)
            for h in (server, client):
                h.add_metric(
                    lv, self._buckets(e, OTEL_BUCKETS_S, 1000.0, count), e.mean_ms / 1000.0 * count, timestamp=self._ts
                )
        for svc, n in entries:
            total.add_metric(["user", svc, "virtual_node"], n, timestamp=self._ts)
        yield total
        yield failed
        yield server
        yield client


def serve(collector: ReplayCollector, port: int = 0, addr: str = "127.0.0.1"):
    """Serve ``collector`` on ``http://addr:port/metrics`` in a daemon thread; returns the ``WSGIServer``
    (``.server_port``; ``.shutdown()`` then ``.server_close()`` to stop and release its socket)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    httpd, _thread = start_http_server(port, addr, registry)
    return httpd


def main() -> None:  # pragma: no cover - manual use
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=9464)
    p.add_argument("--speed", type=float, default=100.0)
    p.add_argument("--spans", default=str(SPANS))
    args = p.parse_args()
    httpd = serve(ReplayCollector(ReplayTable.from_spans(args.spans), args.speed), args.port)
    print(f"http://127.0.0.1:{httpd.server_port}/metrics", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        httpd.shutdown()
        httpd.server_close()


if __name__ == "__main__":  # pragma: no cover
    main()
