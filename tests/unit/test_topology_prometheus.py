"""The Prometheus live source without a server: PromQL per flavor, URI syntax, answer parsing and failure modes,
against a small fake of the one endpoint used (``GET /api/v1/query``, through ``httpx.MockTransport``).
The real-server round trip is tests/integration/test_prometheus_source.py."""

from __future__ import annotations

import json
import socket

import httpx
import pytest

from policy.topology import load_graph
from policy.topology.common import TopologyError
from policy.topology.prometheus import (
    PrometheusSource,
    SourceUnavailable,
    format_duration,
    is_prometheus_uri,
    parse_duration_s,
    source_from_uri,
)


class FakePrometheus:
    """Answers instant queries from a table {substring of the query: [(labels, value)]}; the first matching
    key wins (so put the specific ones first). Records the queries it saw."""

    def __init__(self, table: list[tuple[str, list[tuple[dict, str]]]], status: int = 200, body=None):
        self.table = table
        self.status = status
        self.body = body
        self.seen: list[str] = []
        self.times: list[str | None] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/v1/query"
        q = request.url.params["query"]
        self.seen.append(q)
        self.times.append(request.url.params.get("time"))
        if self.body is not None:
            return httpx.Response(self.status, content=self.body)
        for key, rows in self.table:
            if key in q:
                result = [{"metric": labels, "value": [1700000000.0, value]} for labels, value in rows]
                break
        else:
            result = []
        return httpx.Response(
            self.status, json={"status": "success", "data": {"resultType": "vector", "result": result}}
        )


def source(fake: FakePrometheus, flavor="istio", **kw) -> PrometheusSource:
    client = httpx.Client(transport=httpx.MockTransport(fake))
    return PrometheusSource("http://prom.test:9090", flavor, window_s=60, client=client, **kw)


def istio(a: str, b: str, ns: str = "shop", src_ns: str | None = None) -> dict:
    return {
        "source_workload": a,
        "source_workload_namespace": ns if src_ns is None else src_ns,
        "destination_workload": b,
        "destination_workload_namespace": ns,
    }


# ---- PromQL ------------------------------------------------------------------------------------------


def test_the_istio_queries_are_the_documented_promql():
    s = PrometheusSource("http://p:9090", "istio", window_s=300, namespace="shop")
    q = s.queries()
    by = "source_workload, source_workload_namespace, destination_workload, destination_workload_namespace"
    sel = '{reporter="destination",source_workload_namespace="shop",destination_workload_namespace="shop"}'
    assert q["rps"] == f"sum by ({by}) (rate(istio_requests_total{sel}[300s]))"
    assert q["errors"] == f'sum by ({by}) (rate(istio_requests_total{sel[:-1]},response_code=~"5.."}}[300s]))'
    assert q["latency_p95_ms"] == (
        f"histogram_quantile(0.95, sum by (le, {by}) (rate(istio_request_duration_milliseconds_bucket{sel}[300s])))"
    )
    assert q["inbound"] == (
        "sum by (destination_workload, destination_workload_namespace) "
        '(rate(istio_requests_total{reporter="destination",destination_workload_namespace="shop"}'
        "[300s]))"
    )


def test_the_linkerd_queries_read_outbound_deployments_and_failure_classification():
    q = PrometheusSource("http://p:9090", "linkerd", window_s=60).queries()
    assert q["rps"] == (
        'sum by (deployment, namespace, dst_deployment, dst_namespace) (rate(request_total{direction="outbound"}[60s]))'
    )
    assert 'response_total{direction="outbound",classification="failure"}' in q["errors"]
    assert 'rate(response_total{direction="outbound"}[60s])' in q["error_total"]
    assert "response_latency_ms_bucket" in q["latency_p50_ms"]
    assert q["inbound"] == 'sum by (deployment, namespace) (rate(request_total{direction="inbound"}[60s]))'
    q2 = PrometheusSource(
        "http://p:9090", "linkerd", caller_label="statefulset", callee_label="dst_statefulset"
    ).queries()
    assert "sum by (statefulset, namespace, dst_statefulset, dst_namespace)" in q2["rps"]


def test_the_otel_queries_use_the_connector_metric_names_and_seconds():
    q = PrometheusSource("http://p:9090", "otel", window_s=120).queries()
    assert q["rps"] == ("sum by (client, server, connection_type) (rate(traces_service_graph_request_total[120s]))")
    assert "traces_service_graph_request_failed_total[120s]" in q["errors"]
    assert "traces_service_graph_request_server_seconds_bucket" in q["latency_p99_ms"]
    assert (
        "traces_service_graph_request_client_seconds_bucket"
        in PrometheusSource("http://p:9090", "otel", latency_side="client").queries()["latency_p50_ms"]
    )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"flavor": "consul"}, "flavor"),
        ({"url": "prom:9090"}, "url"),
        ({"window_s": 0}, "window"),
        ({"window_s": "soon"}, "window"),
        ({"namespace": ""}, "namespace"),
        ({"flavor": "otel", "namespace": "shop"}, "no namespace label"),
        ({"reporter": "both"}, "reporter"),
        ({"latency_side": "middle"}, "latency"),
        ({"latency_unit": "us"}, "latency_unit"),
        ({"flavor": "linkerd", "caller_label": "bad-label"}, "caller_label"),
    ],
)
def test_bad_source_parameters_are_refused_with_the_parameter_named(kwargs, message):
    args = {"url": "http://p:9090", "flavor": "istio", **kwargs}
    with pytest.raises(ValueError, match=message):
        PrometheusSource(args.pop("url"), args.pop("flavor"), **args)


# ---- URIs and durations --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "uri, url, flavor, window_s, namespace, name",
    [
        ("prometheus+istio://prom:9090", "http://prom:9090", "istio", 300.0, None, "prometheus+istio://prom:9090"),
        (
            "prometheus+linkerd://10.0.0.1:9090/prometheus?window=1m&namespace=shop",
            "http://10.0.0.1:9090/prometheus",
            "linkerd",
            60.0,
            "shop",
            "prometheus+linkerd://10.0.0.1:9090/prometheus",
        ),
        (
            "prometheus+otel+https://prom.example?window=90s&timeout=2s",
            "https://prom.example",
            "otel",
            90.0,
            None,
            "prometheus+otel+https://prom.example",
        ),
        (
            "prometheus+istio://[::1]:9090?window=1h30m",
            "http://[::1]:9090",
            "istio",
            5400.0,
            None,
            "prometheus+istio://[::1]:9090",
        ),
    ],
)
def test_source_uris_give_the_source_they_describe(uri, url, flavor, window_s, namespace, name):
    assert is_prometheus_uri(uri)
    s = source_from_uri(uri)
    assert (s.url, s.flavor, s.window_s, s.namespace, s.name) == (url, flavor, window_s, namespace, name)


@pytest.mark.parametrize(
    "uri, message",
    [
        ("prometheus+consul://p:9090", "unknown scheme"),
        ("prometheus+istio://:9090", "no host"),
        ("prometheus+istio://p:99999", "bad port"),
        ("prometheus+istio://p:9090?window=fast", "window"),
        ("prometheus+istio://p:9090?colour=red", "unknown parameter 'colour'"),
        ("prometheus+istio://p:9090?window=1m&window=2m", "given twice"),
        ("prometheus+otel://p:9090?namespace=x", "no namespace label"),
    ],
)
def test_bad_uris_are_refused_naming_the_uri_and_the_part(uri, message):
    with pytest.raises(ValueError, match=message) as info:
        source_from_uri(uri)
    assert str(info.value).startswith(uri)


def test_load_graph_reports_a_bad_uri_as_a_topology_error():
    with pytest.raises(TopologyError, match="unknown scheme"):
        load_graph(["prometheus+zipkin://p:9090"])


@pytest.mark.parametrize(
    "text, seconds", [("30s", 30), ("5m", 300), ("1h30m", 5400), ("1500ms", 1.5), ("2", 2), (2.5, 2.5), ("1d", 86400)]
)
def test_durations_parse_like_prometheus_durations(text, seconds):
    assert parse_duration_s(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5 m", "m5", "-1s", "0s", "1x", "nan"])
def test_bad_durations_are_refused(text):
    with pytest.raises(ValueError):
        parse_duration_s(text)


def test_windows_are_written_as_whole_seconds_or_milliseconds():
    assert (format_duration(300), format_duration(1.5), format_duration(4)) == ("300s", "1500ms", "4s")


# ---- answers -------------------------------------------------------------------------------------------


def test_an_istio_answer_becomes_edges_with_rates_latencies_errors_and_multiplicity():
    fake = FakePrometheus(
        [
            ("max(timestamp(", [({}, "1700000000.5")]),
            ("histogram_quantile(0.5,", [(istio("web", "db"), "4.5"), (istio("web", "cache"), "NaN")]),
            ("histogram_quantile(0.95,", [(istio("web", "db"), "20")]),
            ("histogram_quantile(0.99,", [(istio("web", "db"), "+Inf")]),
            ("response_code", [(istio("web", "db"), "0.5")]),
            ("_sum", [(istio("web", "db"), "60")]),
            ("_count", [(istio("web", "db"), "10")]),
            (
                "sum by (destination_workload, destination_workload_namespace)",
                [
                    ({"destination_workload": "web", "destination_workload_namespace": "shop"}, "5"),
                    ({"destination_workload": "db", "destination_workload_namespace": "shop"}, "10"),
                ],
            ),
            (
                "istio_requests_total",
                [
                    (istio("web", "db"), "10"),
                    (istio("web", "cache"), "0"),
                    (istio("unknown", "web", src_ns="unknown"), "5"),
                ],
            ),
        ]
    )
    graph, warnings = source(fake).fetch_with_warnings()
    assert warnings == []
    assert graph.services == ("cache", "db", "web")
    db = graph.edge("web", "db")
    assert (db.rps, db.calls_per_request, db.error_rate, db.latency_mean_ms) == (10.0, 2.0, 0.05, 6.0)
    assert (db.latency_p50_ms, db.latency_p95_ms, db.latency_p99_ms) == (4.5, 20.0, None)
    cache = graph.edge("web", "cache")
    assert cache.rps == 0.0 and cache.error_rate is None and cache.latency_p50_ms is None
    assert graph.edge("unknown", "web") is None  # traffic from outside the mesh is no edge
    assert len(fake.seen) == 9  # evaluation time, rps, errors, 3 quantiles, sum, count, inbound
    assert fake.seen[0] == 'max(timestamp(istio_requests_total{reporter="destination"}))'
    assert fake.times[0] is None and set(fake.times[1:]) == {"1700000000.500"}  # one instant for all queries


def test_otel_virtual_nodes_are_no_edges_but_count_as_requests_served():
    def otel(a, b, ct=""):
        return {"client": a, "server": b, "connection_type": ct}

    fake = FakePrometheus(
        [
            ("sum by (server)", [({"server": "web"}, "4"), ({"server": "db"}, "8")]),
            (
                "traces_service_graph_request_total",
                [(otel("user", "web", "virtual_node"), "4"), (otel("web", "db"), "8")],
            ),
            ("_sum", [(otel("web", "db"), "0.16")]),  # seconds
            ("_count", [(otel("web", "db"), "8")]),
        ]
    )
    graph = source(fake, "otel").fetch()
    assert [(e.caller, e.callee) for e in graph.edges] == [("web", "db")]
    e = graph.edges[0]
    assert e.calls_per_request == 2.0 and e.latency_mean_ms == pytest.approx(20.0) and e.error_rate == 0.0


def test_the_same_workload_name_in_two_namespaces_is_merged_with_a_warning():
    fake = FakePrometheus(
        [
            ("histogram", []),
            ("response_code", []),
            ("_sum", []),
            ("_count", []),
            ("sum by (destination_workload,", []),
            ("istio_requests_total", [(istio("web", "db", "a"), "1"), (istio("web", "db", "b"), "2")]),
        ]
    )
    graph, warnings = source(fake).fetch_with_warnings()
    assert graph.edge("web", "db").rps == 3.0
    assert len(warnings) == 1 and "db, web occur in several namespaces" in warnings[0]


def test_an_unreachable_prometheus_is_source_unavailable():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with PrometheusSource(f"http://127.0.0.1:{port}", "istio", timeout_s=2) as src:
        with pytest.raises(SourceUnavailable, match=r"prometheus\+istio://127\.0\.0\.1:\d+: cannot reach Prometheus"):
            src.fetch()
    with pytest.raises(SourceUnavailable):
        load_graph([f"prometheus+istio://127.0.0.1:{port}?timeout=2s"])


@pytest.mark.parametrize(
    "status, body, error, message",
    [
        (
            503,
            json.dumps({"status": "error", "errorType": "unavailable", "error": "TSDB not ready"}),
            SourceUnavailable,
            "HTTP 503.*TSDB not ready",
        ),
        (
            400,
            json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error at char 5"}),
            TopologyError,
            "query rejected.*bad_data.*parse error",
        ),
        (200, "<html>login</html>", TopologyError, "not a Prometheus API answer"),
        (
            200,
            json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}),
            TopologyError,
            "expected an instant vector",
        ),
        (
            200,
            json.dumps({"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}}]}}),
            TopologyError,
            r"data\.result\[0\]",
        ),
    ],
)
def test_bad_answers_are_one_line_errors_and_only_server_trouble_counts_as_unavailable(status, body, error, message):
    src = source(FakePrometheus([], status=status, body=body.encode()))
    with pytest.raises(error, match=message) as info:
        src.fetch()
    assert "\n" not in str(info.value)
    if error is TopologyError:
        assert not isinstance(info.value, SourceUnavailable)
