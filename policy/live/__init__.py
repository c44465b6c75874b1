"""What the policies see on a live cluster, from the cluster's own metrics: measured pod (and node) CPU and memory
use, and per-service request rates, latency and refused share: the live sources of the inputs the simulator produces
when it trains and benchmarks them (:data:`policy.contract.FEATURE_CONTRACT` says which input comes from where).

- :mod:`.usage`: :class:`UsageReading`, the Metrics API source (:class:`MetricsApiUsage`, metrics-server), the
  ``resourceUsage.uri`` grammar (:func:`parse_usage_uri`) and :class:`UsageApplier` (a reading on a snapshot, with
  the simulator's "not measured yet" rule); :mod:`.prometheus`: the cAdvisor source
  (:class:`~.prometheus.PrometheusUsage`; imported when used: it loads httpx). The per-service signals come from
  the call-graph source's series (:meth:`policy.topology.prometheus.PrometheusSource.fetch_service_signals`);
- :mod:`.inputs`: :class:`UsageInput` / :class:`SignalsInput` (freshness, last good reading), :class:`LiveInputs`
  (the descheduler: one read per cycle), :class:`UsageRefresher` (the extender: a background reader feeding the
  watch's snapshot builder), :func:`open_usage_source`, :func:`open_signals_source`;
- :mod:`.health`: :class:`InputStatus` (off, pending, ok, partial, stale, error), :class:`InputMetrics`
  (``hrl_metrics_source_*``), :class:`InputHealth` (one log line per change);
- :mod:`.config`: the ``metricsSources`` configuration section.
"""

from .config import ExtenderMetricsSourcesConfig, MetricsSourcesConfig, ResourceUsageConfig, ServiceSignalsConfig
from .health import INPUTS, STATES, InputHealth, InputMetrics, InputStatus
from .inputs import (
    LiveInputs,
    SignalsInput,
    SignalsSource,
    UsageInput,
    UsageRefresher,
    open_signals_source,
    open_usage_source,
    signal_readers,
)
from .usage import (
    METRICS_API,
    ApplyStats,
    MetricsApiUsage,
    UsageApplier,
    UsageReading,
    UsageSource,
    UsageUnavailable,
    UsageUri,
    parse_pod_metrics,
    parse_usage_uri,
)

__all__ = [
    "ExtenderMetricsSourcesConfig",
    "MetricsSourcesConfig",
    "ResourceUsageConfig",
    "ServiceSignalsConfig",
    "INPUTS",
    "STATES",
    "InputHealth",
    "InputMetrics",
    "InputStatus",
    "LiveInputs",
    "SignalsInput",
    "SignalsSource",
    "UsageInput",
    "UsageRefresher",
    "open_signals_source",
    "open_usage_source",
    "signal_readers",
    "METRICS_API",
    "ApplyStats",
    "MetricsApiUsage",
    "UsageApplier",
    "UsageReading",
    "UsageSource",
    "UsageUnavailable",
    "UsageUri",
    "parse_pod_metrics",
    "parse_usage_uri",
]
