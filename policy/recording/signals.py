"""What a recording reads from Prometheus at the end of each step: the call graph (through
:class:`policy.topology.prometheus.PrometheusSource`, the extender's live reader, with the rate window set to the
step), each service's served and entering request rates, latency percentiles and success rate (the same series,
aggregated per callee), and each pod's CPU and memory use from the kubelet's cAdvisor series.

Per-service queries (``W`` the step, ``S`` the flavor's callee label, matchers as the flavor's edge queries):

- istio: ``histogram_quantile(q, sum by (le, destination_workload) (rate(istio_request_duration_milliseconds_bucket
  {reporter="destination"}[W])))``; success = 1 − rate of ``response_code=~"5.."`` / rate of all;
- linkerd: the inbound side, ``response_latency_ms_bucket{direction="inbound"}`` by ``deployment``; success =
  ``response_total{classification="success"}`` / ``response_total``;
- otel: ``traces_service_graph_request_server_seconds_bucket`` by ``server`` (× 1000 to ms); success = 1 −
  ``..._failed_total`` / ``..._request_total``.

Served rate: the flavor's inbound query (``PrometheusSource.queries()["inbound"]``); entering rate: served minus
the rates of the edges into the service (what came from outside the call graph).

Pod use (cAdvisor, as kubelets export it and kube-prometheus scrapes it): CPU ``sum by (namespace, pod)
(rate(container_cpu_usage_seconds_total{container!="",container!="POD"}[W]))`` × 1000 (millicores); memory
``sum by (namespace, pod) (container_memory_working_set_bytes{container!="",container!="POD"})`` / 2²⁰ (MiB).
Without those series (no cAdvisor scrape) pods have no measured use, and the manifest says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from policy.state import ServiceGraph
from policy.topology.prometheus import PrometheusSource, format_duration, source_from_uri

__all__ = ["StepSignals", "Signals", "source_with_window"]

_CALLEE = {"istio": "destination_workload", "linkerd": "deployment", "otel": "server"}
_QUANTS = (("latency_p50_ms", 0.5), ("latency_p95_ms", 0.95), ("latency_p99_ms", 0.99))


def source_with_window(uri: str, window_s: float) -> PrometheusSource:
    """:func:`policy.topology.prometheus.source_from_uri` of ``uri`` with its rate window set to ``window_s``
    (the recording's step). Raises ``ValueError`` naming the URI."""
    parts = urlsplit(uri)
    q = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "window"]
    q.append(("window", format_duration(window_s)))
    return source_from_uri(urlunsplit(parts._replace(query=urlencode(q))))


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass
class StepSignals:
    """One step's signals: the call graph (edges with rates, latencies, error rates), per service ``served_rps``,
    ``entry_rps``, ``latency_p50/p95/p99_ms``, ``success_pct`` (``None`` = not measured), per ``(namespace, pod)``
    ``(cpu_m, memory_mi)`` (either ``None``), and warnings."""

    graph: ServiceGraph
    services: dict[str, dict[str, float | None]] = field(default_factory=dict)
    pods: dict[tuple[str, str], tuple[float | None, float | None]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


class Signals:
    """Reads :class:`StepSignals` from the Prometheus of ``uri`` (a ``prometheus+FLAVOR://`` source, as
    ``topology.sources`` takes it) with rate window ``step_s``; ``namespaces``: the pods' namespaces (empty: all)."""

    def __init__(self, uri: str, step_s: float, namespaces: Sequence[str] = ()):
        self.source = source_with_window(uri, step_s)
        self.uri = uri
        self.namespaces = tuple(namespaces)
        self.pod_usage = "unknown"

    def close(self) -> None:
        self.source.close()

    @property
    def _w(self) -> str:
        return format_duration(self.source.window_s)

    def service_queries(self) -> dict[str, str]:
        """The per-service PromQL (module docstring), by role: the three latency percentiles, ``ok`` and ``all``
        (request rates for the success ratio)."""
        s, w, f = self.source, self._w, self.source.flavor
        by = _CALLEE[f]
        ns = s.namespace
        if f == "istio":
            m = 'reporter="destination"' + (f",destination_workload_namespace={_q(ns)}" if ns else "")
            hist, scale = f"istio_request_duration_milliseconds_bucket{{{m}}}", 1.0
            ok = f'sum by ({by}) (rate(istio_requests_total{{{m},response_code!~"5.."}}[{w}]))'
            total = f"sum by ({by}) (rate(istio_requests_total{{{m}}}[{w}]))"
        elif f == "linkerd":
            m = 'direction="inbound"' + (f",namespace={_q(ns)}" if ns else "")
            hist, scale = f"response_latency_ms_bucket{{{m}}}", 1.0
            ok = f'sum by ({by}) (rate(response_total{{{m},classification="success"}}[{w}]))'
            total = f"sum by ({by}) (rate(response_total{{{m}}}[{w}]))"
        else:
            unit = 1.0 if s.latency_unit == "ms" else 1000.0
            hist, scale = "traces_service_graph_request_server_seconds_bucket", unit
            ok = (
                f"sum by ({by}) (rate(traces_service_graph_request_total[{w}])) - "
                f"sum by ({by}) (rate(traces_service_graph_request_failed_total[{w}]))"
            )
            total = f"sum by ({by}) (rate(traces_service_graph_request_total[{w}]))"
        q = {k: f"({scale:g} * histogram_quantile({p}, sum by (le, {by}) (rate({hist}[{w}]))))" for k, p in _QUANTS}
        q["ok"], q["all"] = ok, total
        return q

    def pod_queries(self) -> dict[str, str]:
        """CPU (millicores) and working set (MiB) of every pod (every namespace: the other tenants load the nodes)."""
        m = 'container!="",container!="POD"'
        return {
            "cpu_m": f"1000 * sum by (namespace, pod) (rate(container_cpu_usage_seconds_total{{{m}}}[{self._w}]))",
            "memory_mi": f"sum by (namespace, pod) (container_memory_working_set_bytes{{{m}}}) / 1048576",
        }

    def _by(self, promql: str, label: str, t: float) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        for labels, v in self.source.query(promql, t):
            name = labels.get(label, "")
            if name and name != "unknown":
                out[name] = v
        return out

    def step(self, t: float) -> StepSignals:
        """The signals at unix time ``t`` (the step's end; rates over the step before it). Raises
        :class:`policy.topology.prometheus.SourceUnavailable` / ``TopologyError`` when Prometheus fails."""
        graph, warnings = self.source.fetch_with_warnings(t)
        by = _CALLEE[self.source.flavor]
        served = self._by(self.source.queries()["inbound"], by, t)
        q = self.service_queries()
        lat = {k: self._by(q[k], by, t) for k, _p in _QUANTS}
        ok, total = self._by(q["ok"], by, t), self._by(q["all"], by, t)
        inbound_edges: dict[str, float] = {}
        for e in graph.edges:
            inbound_edges[e.callee] = inbound_edges.get(e.callee, 0.0) + (e.rps or 0.0)
        services: dict[str, dict[str, float | None]] = {}
        for svc in sorted(set(served) | set(graph.services)):
            r = served.get(svc)
            tot = total.get(svc)
            services[svc] = {
                "served_rps": r,
                "entry_rps": None if r is None else max(0.0, r - inbound_edges.get(svc, 0.0)),
                **{k: lat[k].get(svc) for k, _p in _QUANTS},
                "success_pct": None if not tot else 100.0 * max(0.0, min(1.0, (ok.get(svc) or 0.0) / tot)),
            }
        pq = self.pod_queries()
        cpu = self.source.query(pq["cpu_m"], t)
        mem = self.source.query(pq["memory_mi"], t)
        got: dict[tuple[str, str], list[float | None]] = {}
        for labels, v in cpu:
            got.setdefault((labels.get("namespace", ""), labels.get("pod", "")), [None, None])[0] = v
        for labels, v in mem:
            got.setdefault((labels.get("namespace", ""), labels.get("pod", "")), [None, None])[1] = v
        pods = {k: (a, b) for k, (a, b) in got.items() if k[1]}
        self.pod_usage = "prometheus-cadvisor" if pods else "none"
        return StepSignals(graph, services, pods, warnings)
