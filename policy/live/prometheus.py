"""The Prometheus resource-use source (:class:`PrometheusUsage`: cAdvisor's or the kubelet's
``container_cpu_usage_seconds_total`` and ``container_memory_working_set_bytes``, one instant query per read; the
query and the "not measured yet" rule are documented in :mod:`policy.live.usage`). Imported only by a process that
reads it (it loads ``httpx``)."""

from __future__ import annotations

import httpx

from policy.topology.prometheus import (
    PrometheusApi,
    SourceUnavailable,
    TopologyError,
    format_duration,
    parse_duration_s,
    split_tagged,
    tagged_union,
)

from .usage import MATCHERS, UsageReading, UsageUnavailable, UsageUri

__all__ = ["PrometheusUsage", "prometheus_usage"]


class PrometheusUsage:
    """:class:`UsageSource` over Prometheus' cAdvisor (or kubelet ``/metrics/resource``) series, one instant query per
    read (the module docstring). ``api``: a :class:`policy.topology.prometheus.PrometheusApi`; ``window_s``: the
    ``rate()`` window (> 0; at least 4 scrape intervals); ``match``: extra PromQL label matchers (``job="kubelet"``)
    applied to every series. Raises ``ValueError`` for a bad ``window_s`` or ``match``."""

    def __init__(self, api: PrometheusApi, window_s: float = 60.0, match: str = "", name: str | None = None):
        self.api = api
        self.window_s = parse_duration_s(window_s, "window")
        if match and not MATCHERS.match(match):
            raise ValueError(f'match: expected PromQL label matchers such as job="kubelet", got {match!r}')
        self.match = match.strip()
        self.name = name or api.name

    def queries(self) -> dict[str, str]:
        """The four parts of the query, by role (``cpu`` in cores, ``memory`` in bytes, ``covered``, ``last``)."""
        m = 'container!="",container!="POD"' + (f",{self.match}" if self.match else "")
        w = format_duration(self.window_s)
        cpu = f"container_cpu_usage_seconds_total{{{m}}}"
        mem = f"container_memory_working_set_bytes{{{m}}}"
        return {
            "cpu": f"sum by (namespace, pod) (max by (namespace, pod, container) (rate({cpu}[{w}])))",
            "memory": f"sum by (namespace, pod) (max by (namespace, pod, container) ({mem}))",
            "covered": f"count by (namespace, pod) ({cpu} offset {w})",
            "last": f"max by (namespace, pod) (timestamp({cpu}))",
        }

    def query(self) -> str:
        """The one PromQL expression a read sends."""
        return tagged_union(self.queries())

    def read(self) -> UsageReading:
        q = self.queries()
        try:
            rows = split_tagged(self.api.query(tagged_union(q)), q)
        except (SourceUnavailable, TopologyError) as exc:
            raise UsageUnavailable(str(exc)) from None

        def by_pod(role: str) -> dict[str, float]:
            out: dict[str, float] = {}
            for labels, v in rows[role]:
                ns, pod = labels.get("namespace", ""), labels.get("pod", "")
                if ns and pod and v is not None:
                    out[f"{ns}/{pod}"] = v
            return out

        cpu, mem, covered, last = by_pod("cpu"), by_pod("memory"), by_pod("covered"), by_pod("last")
        cpu_m = {k: max(c, 0.0) * 1000.0 for k, c in cpu.items() if k in covered}
        memory = {k: int(round(max(mem[k], 0.0))) for k in cpu_m if k in mem}
        newest = max((last[k] for k in cpu_m if k in last), default=None)
        return UsageReading(cpu_m, memory, newest, self.window_s)

    def close(self) -> None:
        self.api.close()


def prometheus_usage(uri: UsageUri, client: httpx.Client | None = None) -> PrometheusUsage:
    """The source of a parsed ``prometheus+cadvisor://`` URI (:func:`policy.live.parse_usage_uri`)."""
    return PrometheusUsage(PrometheusApi(uri.base, uri.name, uri.timeout_s, client), uri.window_s, uri.match, uri.name)
