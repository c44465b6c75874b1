"""Call graph from live service-mesh / tracing metrics in Prometheus, through its HTTP API (instant queries on
``GET /api/v1/query``; https://prometheus.io/docs/prometheus/latest/querying/api/).

Flavors (the series each one reads; ``W`` = the rate window, ``BY`` = the flavor's caller/callee labels):

- ``istio`` (Istio standard metrics, https://istio.io/latest/docs/reference/config/metrics/): caller =
  ``source_workload``, callee = ``destination_workload`` (+ ``*_workload_namespace``), one ``reporter``
  (default ``destination``: the server-side proxy, so latencies are callee-side like the span tables' and every
  request is counted once):

  - rps: ``sum by (BY) (rate(istio_requests_total{reporter="destination"}[W]))``
  - errors: the same with ``response_code=~"5.."`` (HTTP 5xx; a gRPC error answered with HTTP 200 is not counted)
  - latency: ``histogram_quantile(q, sum by (le, BY) (rate(istio_request_duration_milliseconds_bucket[W])))``
    for q = 0.5, 0.95, 0.99; mean = ``rate(_sum) / rate(_count)``
- ``linkerd`` (Linkerd proxy metrics, https://linkerd.io/2/reference/proxy-metrics/): the caller's proxy reports
  ``direction="outbound"`` with the caller in ``deployment`` / ``namespace`` (Kubernetes labels added at
  collection) and the callee in ``dst_deployment`` / ``dst_namespace``:

  - rps: ``request_total``; error rate: ``response_total{classification="failure"}`` / ``response_total``
  - latency: ``response_latency_ms_bucket`` (time to first byte, ms)
  - only Deployments by default: other workload kinds use ``statefulset`` / ``dst_statefulset`` etc.; set
    ``caller_label`` / ``callee_label`` for them.
- ``otel`` (OpenTelemetry Collector service-graph connector, ``connector/servicegraphconnector/README.md`` in
  opentelemetry-collector-contrib): caller = ``client``, callee = ``server`` (``service.name`` of each side):

  - rps: ``traces_service_graph_request_total``; errors: ``traces_service_graph_request_failed_total``
  - series with ``connection_type="virtual_node"`` (a side the connector could not pair, e.g. ``client="user"``
    for requests entering the system, ``server="unknown"``) give no edge; they count in the callee's inbound rate
  - latency: ``traces_service_graph_request_server_seconds_bucket`` (callee side; ``latency_side="client"`` reads
    ``..._client_seconds_bucket``), in seconds since collector v0.89.0; the deprecated feature gate
    ``connector.servicegraph.legacyLatencyUnitMs`` reports milliseconds under the same name
    (``latency_unit="ms"``). The connector's series carry no namespace: ``namespace`` is refused.

Per edge: ``rps`` (calls/s averaged over W), ``latency_p50/p95/p99_ms`` (``None`` when the histogram has no
observations in W), ``latency_mean_ms``, ``error_rate`` (0..1, ``None`` when rps is 0), ``calls_per_request`` =
rps / the requests the caller served (its inbound rate from every source, mesh-external ones included; ``None``
when that is 0). A side named ``""`` or ``unknown`` (Istio's name for a caller outside the mesh) gives no edge; it
still counts in the callee's inbound rate. Services are flat names: without ``namespace``, a workload name used
in two namespaces is one service (a warning says so).

Errors: :class:`SourceUnavailable` (a :class:`TopologyError`) when Prometheus cannot be reached, times out or
answers 5xx; :class:`TopologyError` for a query it rejects or a malformed answer.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal, get_args
from urllib.parse import urlsplit

import httpx

from policy.state import ServiceEdge, ServiceGraph, ServiceSignals

from .common import TopologyError, format_duration, parse_duration_s, split_source_uri

__all__ = [
    "Flavor",
    "FLAVORS",
    "SourceUnavailable",
    "PrometheusApi",
    "tagged_union",
    "split_tagged",
    "PrometheusSource",
    "parse_duration_s",
    "format_duration",
    "is_prometheus_uri",
    "source_from_uri",
]

Flavor = Literal["istio", "linkerd", "otel"]
FLAVORS: tuple[str, ...] = get_args(Flavor)
URI_SCHEMES = tuple(f"prometheus+{f}" for f in FLAVORS) + tuple(f"prometheus+{f}+https" for f in FLAVORS)
QUANTILES = (("latency_p50_ms", 0.5), ("latency_p95_ms", 0.95), ("latency_p99_ms", 0.99))
_NO_NAME = frozenset({"", "unknown"})
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


class SourceUnavailable(TopologyError):
    """A live source could not be read now (connection refused, timeout, HTTP 5xx): worth retrying later."""


def _quote(v: str) -> str:
    return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True)
class _FlavorSpec:
    requests: str  # counter of calls
    errors: str  # counter of failed calls, or the requests counter with an error matcher
    error_matcher: str  # extra label matcher for errors ("" = none)
    error_total: str  # the counter the error ratio divides by ("" = requests)
    histogram: str  # histogram base name (without _bucket/_sum/_count)
    to_ms: float  # histogram unit → ms
    caller: str
    callee: str
    caller_ns: str | None
    callee_ns: str | None
    base_matchers: tuple[str, ...] = field(default_factory=tuple)
    inbound_matchers: tuple[str, ...] = field(default_factory=tuple)
    inbound_requests: str = ""  # counter whose rate by callee is the requests each service served
    inbound_service: str = ""
    inbound_ns: str | None = None
    external_label: str | None = None  # a label whose value external_value marks a mesh-external side
    external_value: str = ""


class PrometheusApi:
    """The slice of Prometheus' HTTP API every live source reads: instant queries (``GET /api/v1/query``,
    https://prometheus.io/docs/prometheus/latest/querying/api/#instant-queries).

    ``url``: base URL (``http(s)://host[:port][/prefix]``); ``name``: how messages name the source; ``timeout_s``:
    per request (> 0); ``client``: an ``httpx.Client`` to use (default: one owned by this object, closed by
    :meth:`close`). Raises ``ValueError`` for a URL that is not http(s) with a host."""

    def __init__(self, url: str, name: str, timeout_s: float = 5.0, client: httpx.Client | None = None):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"url: expected http(s)://host[:port][/prefix], got {url!r}")
        self.url = url.rstrip("/")
        self.name = name
        self.timeout_s = parse_duration_s(timeout_s, "timeout")
        self._own_client = client is None
        self._client = client if client is not None else httpx.Client(timeout=self.timeout_s)

    def query(self, promql: str, time_s: float | None = None) -> list[tuple[dict[str, str], float | None]]:
        """Run one instant query (one HTTP round trip); ``[(labels, value)]`` with ``None`` for NaN/±Inf values.
        Raises :class:`SourceUnavailable` when Prometheus cannot be reached, times out or answers 5xx/429, and
        :class:`TopologyError` for a query it rejects or an answer that is not an instant vector."""
        params: dict[str, str] = {"query": promql}
        if time_s is not None:
            params["time"] = f"{time_s:.3f}"
        endpoint = f"{self.url}/api/v1/query"
        try:
            r = self._client.get(endpoint, params=params, timeout=self.timeout_s)
        except httpx.TimeoutException as exc:
            raise SourceUnavailable(
                f"{self.name}: no answer within {self.timeout_s:g} s ({type(exc).__name__})"
            ) from exc
        except httpx.HTTPError as exc:
            raise SourceUnavailable(f"{self.name}: cannot reach Prometheus: {exc}") from exc
        try:
            body = r.json()
        except ValueError:
            body = None
        if r.status_code >= 500 or r.status_code == 429:
            detail = body.get("error") if isinstance(body, Mapping) else r.text[:200]
            raise SourceUnavailable(
                f"{self.name}: HTTP {r.status_code} from {endpoint}: {' '.join(str(detail).split())}"
            )
        if not isinstance(body, Mapping):
            raise TopologyError(
                f"{self.name}: HTTP {r.status_code} from {endpoint}: not a Prometheus API answer "
                f"(expected JSON, got {r.text[:80]!r})"
            )
        if body.get("status") != "success":
            raise TopologyError(
                f"{self.name}: query rejected (HTTP {r.status_code}, {body.get('errorType')}): "
                f"{body.get('error')}; query: {promql}"
            )
        data = body.get("data")
        if (
            not isinstance(data, Mapping)
            or data.get("resultType") != "vector"
            or not isinstance(data.get("result"), list)
        ):
            raise TopologyError(
                f"{self.name}: expected an instant vector in data.result, got {str(data)[:120]!r}; query: {promql}"
            )
        out = []
        for i, sample in enumerate(data["result"]):
            try:
                labels = {str(k): str(v) for k, v in sample["metric"].items()}
                raw = sample["value"][1]
                v = float(raw)
            except (KeyError, TypeError, ValueError, IndexError, AttributeError):
                raise TopologyError(
                    f'{self.name}: data.result[{i}]: expected {{metric: {{...}}, value: [t, "x"]}}, '
                    f"got {str(sample)[:120]!r}"
                ) from None
            out.append((labels, v if math.isfinite(v) else None))
        return out

    def close(self) -> None:
        """Close the HTTP client (when this object created it)."""
        if self._own_client:
            self._client.close()


def tagged_union(queries: Mapping[str, str], label: str = "hrl_measure") -> str:
    """One PromQL expression answering every query of ``queries`` (role → expression) at once: each result is
    tagged with ``label="<role>"`` (``label_replace``) and the tagged vectors are joined with ``or`` (their label
    sets differ by the tag, so nothing is dropped). One HTTP round trip instead of one per role; read the answer
    back with :func:`split_tagged`. ``label`` must not be a label of the results already."""
    parts = [f'label_replace({q}, "{label}", "{role}", "", "")' for role, q in queries.items()]
    return "\n  or ".join(parts)


def split_tagged(
    rows: list[tuple[dict[str, str], float | None]], roles: Iterable[str], label: str = "hrl_measure"
) -> dict[str, list[tuple[dict[str, str], float | None]]]:
    """The answer of a :func:`tagged_union` query split back by role (the tag removed from the labels); every role
    of ``roles`` present (an empty list when it had no result); results of another tag are dropped."""
    out: dict[str, list[tuple[dict[str, str], float | None]]] = {r: [] for r in roles}
    for labels, v in rows:
        role = labels.pop(label, None)
        if role in out:
            out[role].append((labels, v))
    return out


class PrometheusSource:
    """One live call-graph source: a Prometheus server and the flavor of metrics it holds.

    ``url``: base URL of Prometheus (``http://host:9090``, a path prefix allowed); ``flavor``: ``istio``,
    ``linkerd`` or ``otel``; ``window_s``: the ``rate()`` window in seconds (> 0; at least 4 scrape intervals is
    the usual advice); ``namespace``: keep only calls whose both sides are in this Kubernetes namespace (istio,
    linkerd); ``timeout_s``: per HTTP request. Keyword options: ``reporter`` (istio: ``destination`` or
    ``source``), ``latency_side`` (otel: ``server`` or ``client``), ``latency_unit`` (otel: ``s`` or ``ms``),
    ``caller_label`` / ``callee_label`` (linkerd: e.g. ``statefulset`` / ``dst_statefulset``), ``client`` (an
    ``httpx.Client`` to use; default: one owned by this object), ``name`` (a short label for metrics and
    messages; default the URI form ``prometheus+FLAVOR://host:port``).

    Raises ``ValueError`` naming the bad argument.
    """

    def __init__(
        self,
        url: str,
        flavor: Flavor,
        window_s: float = 300.0,
        namespace: str | None = None,
        timeout_s: float = 5.0,
        *,
        reporter: str = "destination",
        latency_side: str = "server",
        latency_unit: str = "s",
        caller_label: str | None = None,
        callee_label: str | None = None,
        client: httpx.Client | None = None,
        name: str | None = None,
    ):
        if flavor not in FLAVORS:
            raise ValueError(f"flavor: expected one of {', '.join(FLAVORS)}, got {flavor!r}")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"url: expected http(s)://host[:port][/prefix], got {url!r}")
        self.window_s = parse_duration_s(window_s, "window")
        self.timeout_s = parse_duration_s(timeout_s, "timeout")
        if namespace is not None and (not namespace or '"' in namespace):
            raise ValueError(f"namespace: not a namespace name: {namespace!r}")
        if namespace is not None and flavor == "otel":
            raise ValueError(
                "namespace: the otel service-graph series carry no namespace label; drop the filter "
                "or use a collector 'dimensions' setting and another flavor"
            )
        if reporter not in ("destination", "source"):
            raise ValueError(f"reporter: expected destination or source, got {reporter!r}")
        if latency_side not in ("server", "client"):
            raise ValueError(f"latency: expected server or client, got {latency_side!r}")
        if latency_unit not in ("s", "ms"):
            raise ValueError(f"latency_unit: expected s or ms, got {latency_unit!r}")
        for what, lab in (("caller_label", caller_label), ("callee_label", callee_label)):
            if lab is not None and not _LABEL_NAME.match(lab):
                raise ValueError(f"{what}: not a Prometheus label name: {lab!r}")
        self.url = url.rstrip("/")
        self.flavor: Flavor = flavor
        self.namespace = namespace
        self.reporter = reporter
        self.latency_side = latency_side
        self.latency_unit = latency_unit
        host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
        netloc = f"{host}:{parts.port}" if parts.port else host
        tls = "+https" if parts.scheme == "https" else ""
        self.name = name or f"prometheus+{flavor}{tls}://{netloc}{parts.path.rstrip('/')}"
        self._spec = self._make_spec(caller_label, callee_label)
        self.api = PrometheusApi(self.url, self.name, self.timeout_s, client)

    # ---- queries ----------------------------------------------------------------------------------
    def _make_spec(self, caller_label: str | None, callee_label: str | None) -> _FlavorSpec:
        ns = self.namespace
        if self.flavor == "istio":
            m = [f"reporter={_quote(self.reporter)}"]
            inbound = list(m)
            if ns is not None:
                m += [f"source_workload_namespace={_quote(ns)}", f"destination_workload_namespace={_quote(ns)}"]
                inbound += [f"destination_workload_namespace={_quote(ns)}"]
            return _FlavorSpec(
                "istio_requests_total",
                "istio_requests_total",
                'response_code=~"5.."',
                "",
                "istio_request_duration_milliseconds",
                1.0,
                "source_workload",
                "destination_workload",
                "source_workload_namespace",
                "destination_workload_namespace",
                tuple(m),
                tuple(inbound),
                "istio_requests_total",
                "destination_workload",
                "destination_workload_namespace",
            )
        if self.flavor == "linkerd":
            caller = caller_label or "deployment"
            callee = callee_label or "dst_deployment"
            m = ['direction="outbound"']
            inbound = ['direction="inbound"']
            if ns is not None:
                m += [f"namespace={_quote(ns)}", f"dst_namespace={_quote(ns)}"]
                inbound += [f"namespace={_quote(ns)}"]
            return _FlavorSpec(
                "request_total",
                "response_total",
                'classification="failure"',
                "response_total",
                "response_latency_ms",
                1.0,
                caller,
                callee,
                "namespace",
                "dst_namespace",
                tuple(m),
                tuple(inbound),
                "request_total",
                caller,
                "namespace",
            )
        side = self.latency_side
        return _FlavorSpec(
            "traces_service_graph_request_total",
            "traces_service_graph_request_failed_total",
            "",
            "",
            f"traces_service_graph_request_{side}_seconds",
            1.0 if self.latency_unit == "ms" else 1000.0,
            "client",
            "server",
            None,
            None,
            (),
            (),
            "traces_service_graph_request_total",
            "server",
            None,
            "connection_type",
            "virtual_node",
        )

    def _by(self) -> str:
        s = self._spec
        labels = (
            [s.caller] + ([s.caller_ns] if s.caller_ns else []) + [s.callee] + ([s.callee_ns] if s.callee_ns else [])
        )
        if s.external_label:
            labels.append(s.external_label)
        return ", ".join(labels)

    @staticmethod
    def _sel(*matchers: str) -> str:
        ms = [m for m in matchers if m]
        return "{" + ",".join(ms) + "}" if ms else ""

    def queries(self) -> dict[str, str]:
        """The PromQL instant queries :meth:`fetch` runs, by role: ``rps``, ``errors``, ``error_total``,
        ``latency_p50_ms`` / ``latency_p95_ms`` / ``latency_p99_ms`` (in the histogram's unit), ``latency_sum``,
        ``latency_count``, ``inbound``."""
        s = self._spec
        w = format_duration(self.window_s)
        by = self._by()
        base = s.base_matchers
        q = {
            "rps": f"sum by ({by}) (rate({s.requests}{self._sel(*base)}[{w}]))",
            "errors": f"sum by ({by}) (rate({s.errors}{self._sel(*base, s.error_matcher)}[{w}]))",
            "error_total": f"sum by ({by}) (rate({s.error_total or s.requests}{self._sel(*base)}[{w}]))",
            "latency_sum": f"sum by ({by}) (rate({s.histogram}_sum{self._sel(*base)}[{w}]))",
            "latency_count": f"sum by ({by}) (rate({s.histogram}_count{self._sel(*base)}[{w}]))",
        }
        for key, quant in QUANTILES:
            q[key] = (
                f"histogram_quantile({quant}, sum by (le, {by}) (rate({s.histogram}_bucket{self._sel(*base)}[{w}])))"
            )
        in_by = s.inbound_service + (f", {s.inbound_ns}" if s.inbound_ns else "")
        q["inbound"] = f"sum by ({in_by}) (rate({s.inbound_requests}{self._sel(*s.inbound_matchers)}[{w}]))"
        return q

    # ---- HTTP -------------------------------------------------------------------------------------
    def query(self, promql: str, time_s: float | None = None) -> list[tuple[dict[str, str], float | None]]:
        """Run one instant query (:meth:`PrometheusApi.query`)."""
        return self.api.query(promql, time_s)

    def close(self) -> None:
        """Close the HTTP client (when this object created it)."""
        self.api.close()

    def __enter__(self) -> PrometheusSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- graph ------------------------------------------------------------------------------------
    def latest_sample_time(self) -> float | None:
        """Unix seconds of the newest sample of the flavor's request counter (``None`` when there is none).

        :meth:`fetch` evaluates every query of one fetch at this time, not at the server's "now": the queries
        then see the same completed scrapes (the error ratio and the calls per request divide numbers from
        one instant), and the rate window ends on a sample, so ``rate()`` does not under-extrapolate while a
        scrape is still being written (up to (interval - interval/2) / window low otherwise)."""
        s = self._spec
        rows = self.query(f"max(timestamp({s.requests}{self._sel(*s.base_matchers)}))")
        return rows[0][1] if rows and rows[0][1] is not None else None

    def fetch(self, time_s: float | None = None) -> ServiceGraph:
        """Query Prometheus (at ``time_s``, unix seconds; default: its newest sample) and build the graph.
        See :meth:`fetch_with_warnings`."""
        return self.fetch_with_warnings(time_s)[0]

    def fetch_with_warnings(self, time_s: float | None = None) -> tuple[ServiceGraph, list[str]]:
        """``(graph, warnings)`` of one round of queries (:meth:`queries`), all evaluated at ``time_s`` (default:
        :meth:`latest_sample_time`). Raises :class:`SourceUnavailable` or :class:`TopologyError`; nothing is
        cached here (see :class:`policy.topology.live.TopologyRefresher`)."""
        s = self._spec
        q = self.queries()
        warnings: list[str] = []
        ns_of: dict[str, set[str]] = {}
        if time_s is None:
            time_s = self.latest_sample_time()

        def key(labels: Mapping[str, str]) -> tuple[str, str] | None:
            a, b = labels.get(s.caller, ""), labels.get(s.callee, "")
            if a in _NO_NAME or b in _NO_NAME:
                return None
            if s.external_label and labels.get(s.external_label) == s.external_value:
                return None
            for name, nsl in ((a, s.caller_ns), (b, s.callee_ns)):
                if nsl:
                    ns_of.setdefault(name, set()).add(labels.get(nsl, ""))
            return a, b

        def by_edge(role: str, combine=lambda a, b: a + b) -> dict[tuple[str, str], float | None]:
            # the same names in two namespaces are one service: rates add up, quantiles take the max
            out: dict[tuple[str, str], float | None] = {}
            for labels, v in self.query(q[role], time_s):
                k = key(labels)
                if k is None:
                    continue
                prev = out.get(k)
                out[k] = v if prev is None else (prev if v is None else combine(prev, v))
            return out

        rps = by_edge("rps")
        errors = by_edge("errors")
        err_total = by_edge("error_total") if s.error_total else rps
        lsum = by_edge("latency_sum")
        lcount = by_edge("latency_count")
        quants = {k: by_edge(k, max) for k, _ in QUANTILES}
        inbound: dict[str, float] = {}
        for labels, v in self.query(q["inbound"], time_s):
            name = labels.get(s.inbound_service, "")
            if name and v is not None:
                inbound[name] = inbound.get(name, 0.0) + v

        edges = []
        for (a, b), r in rps.items():
            if r is None:
                continue
            r = max(0.0, r)
            mean = None
            if lcount.get((a, b)) and lsum.get((a, b)) is not None:
                mean = lsum[(a, b)] / lcount[(a, b)] * s.to_ms
            lat = {}
            for k, _ in QUANTILES:
                v = quants[k].get((a, b))
                lat[k] = None if v is None else v * s.to_ms
            tot = err_total.get((a, b))
            err = None
            if tot:
                err = min(1.0, max(0.0, (errors.get((a, b)) or 0.0) / tot))
            cpr = r / inbound[a] if inbound.get(a) else None
            edges.append(ServiceEdge(a, b, rps=r, calls_per_request=cpr, latency_mean_ms=mean, error_rate=err, **lat))
        multi = sorted(n for n, spaces in ns_of.items() if len(spaces) > 1)
        if multi:
            warnings.append(
                f"{self.name}: workload name(s) {', '.join(multi)} occur in several namespaces and are "
                f"merged into one service each; set a namespace to keep one"
            )
        services = set(inbound) - _NO_NAME
        return ServiceGraph.build(services, edges, self.name), warnings

    # ---- per-service signals --------------------------------------------------------------------------
    def service_queries(self) -> dict[str, str]:
        """The PromQL of the per-service signals (:meth:`fetch_service_signals`), by role, over the series the call
        graph reads, grouped by the serving side (the flavor's inbound series: Istio's ``destination_workload``
        reported by ``reporter``, Linkerd's ``direction="inbound"`` series by ``deployment``, the OpenTelemetry
        connector's ``server``, entry requests from a virtual node included): ``rps``, ``errors``, ``error_total``,
        ``latency_sum``, ``latency_count``, ``latency_p95`` (in the histogram's unit) and ``last`` (the newest
        sample's time, unix seconds)."""
        s = self._spec
        w = format_duration(self.window_s)
        by = s.inbound_service + (f", {s.inbound_ns}" if s.inbound_ns else "")
        sel = s.inbound_matchers
        return {
            "rps": f"sum by ({by}) (rate({s.inbound_requests}{self._sel(*sel)}[{w}]))",
            "errors": f"sum by ({by}) (rate({s.errors}{self._sel(*sel, s.error_matcher)}[{w}]))",
            "error_total": f"sum by ({by}) (rate({s.error_total or s.inbound_requests}{self._sel(*sel)}[{w}]))",
            "latency_sum": f"sum by ({by}) (rate({s.histogram}_sum{self._sel(*sel)}[{w}]))",
            "latency_count": f"sum by ({by}) (rate({s.histogram}_count{self._sel(*sel)}[{w}]))",
            "latency_p95": (
                f"histogram_quantile(0.95, sum by (le, {by}) (rate({s.histogram}_bucket{self._sel(*sel)}[{w}])))"
            ),
            "last": f"max by ({by}) (timestamp({s.inbound_requests}{self._sel(*sel)}))",
        }

    def fetch_service_signals(self, time_s: float | None = None) -> tuple[dict[str, ServiceSignals], float | None]:
        """Per-service :class:`~policy.state.ServiceSignals` over the last ``window_s``, in ONE HTTP round trip (every
        query of :meth:`service_queries` joined by :func:`tagged_union`), evaluated at ``time_s`` (default: the
        server's now). Returns ``(signals by service name, newest sample time in unix seconds or None)``.

        Per service: ``rps`` = arrivals/s (every caller, mesh-external ones included); ``latency_mean_ms`` =
        ``rate(_sum) / rate(_count)`` and ``latency_p95_ms`` = ``histogram_quantile(0.95, ...)`` of the serving
        side's histogram (``None`` without observations in the window; the mean is 0 for a service whose arrivals
        were 0 in the window, as the simulator reports a service nobody visits); ``refused_frac`` = failed / all
        responses (``error_rate`` of the flavor: Istio 5xx, Linkerd ``classification="failure"``, the connector's failed
        requests), 0 when the service answered nothing. A name used in several namespaces (no ``namespace``
        filter) is one service: rates and sums add up, the p95 is the largest. Raises :class:`SourceUnavailable`
        / :class:`TopologyError` as :meth:`query`."""
        queries = self.service_queries()
        rows = split_tagged(self.query(tagged_union(queries), time_s), queries)
        name_label = self._spec.inbound_service
        acc: dict[str, dict[str, float]] = {}
        last: float | None = None
        for role, found in rows.items():
            for labels, v in found:
                name = labels.get(name_label, "")
                if name in _NO_NAME or v is None:
                    continue
                if role == "last":
                    last = v if last is None else max(last, v)
                    continue
                d = acc.setdefault(name, {})
                d[role] = max(d[role], v) if role == "latency_p95" and role in d else d.get(role, 0.0) + v
        to_ms = self._spec.to_ms
        out: dict[str, ServiceSignals] = {}
        for name, d in sorted(acc.items()):
            rps = max(0.0, d["rps"]) if "rps" in d else None
            count, total = d.get("latency_count", 0.0), d.get("error_total", 0.0)
            mean = d["latency_sum"] / count * to_ms if count > 0 and "latency_sum" in d else None
            if mean is None and rps == 0.0:  # nobody called it in the window: no visit, no latency (the simulator's 0)
                mean = 0.0
            p95 = d["latency_p95"] * to_ms if "latency_p95" in d else None
            if total > 0:
                refused: float | None = min(1.0, max(0.0, d.get("errors", 0.0) / total))
            else:
                refused = 0.0 if rps is not None else None
            out[name] = ServiceSignals(rps, mean, refused, p95)
        return out, last

    def __repr__(self) -> str:
        return (
            f"PrometheusSource({self.url!r}, {self.flavor!r}, window_s={self.window_s:g}, namespace={self.namespace!r})"
        )


# ---- URIs -----------------------------------------------------------------------------------------------


def is_prometheus_uri(text: str) -> bool:
    """True for a ``prometheus+FLAVOR://`` or ``prometheus+FLAVOR+https://`` source string (any flavor name, so a
    misspelt one gets a clear error from :func:`source_from_uri`)."""
    return bool(re.match(r"^prometheus\+[A-Za-z0-9+.-]*://", str(text)))


_URI_PARAMS = ("window", "namespace", "timeout", "reporter", "latency", "latency_unit", "caller_label", "callee_label")


def source_from_uri(uri: str, client: httpx.Client | None = None, *, default_window: str = "5m") -> PrometheusSource:
    """A :class:`PrometheusSource` from a source string::

        prometheus+istio://HOST:PORT[/PREFIX][?window=5m&namespace=NS&timeout=5s&reporter=destination]
        prometheus+linkerd://HOST:PORT[?window=...&namespace=...&caller_label=deployment&callee_label=dst_deployment]
        prometheus+otel://HOST:PORT[?window=...&latency=server|client&latency_unit=s|ms]
        prometheus+FLAVOR+https://...      (HTTPS)

    Defaults: window ``default_window`` (5m), timeout 5s, no namespace filter. Raises ``ValueError`` naming the URI
    and the bad part.
    """
    u = split_source_uri(
        uri,
        URI_SCHEMES,
        _URI_PARAMS,
        f"prometheus+FLAVOR:// or prometheus+FLAVOR+https:// with FLAVOR one of {', '.join(FLAVORS)}",
    )
    flavor, base, params = u.scheme.split("+")[1], u.base, u.params
    try:
        return PrometheusSource(
            base,
            flavor,
            window_s=parse_duration_s(params.get("window", default_window), "window"),
            namespace=params.get("namespace"),
            timeout_s=parse_duration_s(params.get("timeout", "5s"), "timeout"),
            reporter=params.get("reporter", "destination"),
            latency_side=params.get("latency", "server"),
            latency_unit=params.get("latency_unit", "s"),
            caller_label=params.get("caller_label"),
            callee_label=params.get("callee_label"),
            client=client,
        )
    except ValueError as exc:
        raise ValueError(f"{uri}: {exc}") from None
