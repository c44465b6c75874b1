"""The ``metricsSources`` section of the extender's and the descheduler's configurations (docs/operations.md
section 5): where the live inputs come from and how old they may be. Validated without touching the network."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import Field, field_validator

from policy.config import ConfigModel

from .usage import parse_usage_uri

__all__ = ["ResourceUsageConfig", "ServiceSignalsConfig", "MetricsSourcesConfig", "ExtenderMetricsSourcesConfig"]


def _checked(v: str | None, check: Callable[[str], object]) -> str | None:
    """``v`` once ``check`` accepts it (``None`` passes); its ``ValueError`` without the value it starts with (the
    configuration's line names the field and the value already)."""
    if v is not None:
        try:
            check(v)
        except ValueError as exc:
            raise ValueError(str(exc).removeprefix(f"{v}: ")) from None
    return v


class ResourceUsageConfig(ConfigModel):
    """Pod (and node) CPU and memory use: ``uri`` ``metrics-api`` (metrics-server) or
    ``prometheus+cadvisor[+https]://HOST:PORT[/PREFIX]?window=1m&timeout=5s&match=...``; null = off."""

    uri: str | None = Field(
        None,
        min_length=1,
        description="metrics-api (the Metrics API, metrics.k8s.io, served by metrics-server) or "
        "prometheus+cadvisor[+https]://HOST:PORT[/PREFIX]?window=1m&timeout=5s&match=LABEL_MATCHERS (cAdvisor's or "
        "the kubelet's container_cpu_usage_seconds_total and container_memory_working_set_bytes); null = off: no "
        "measured use, requests stand in for it (policy.contract). Default null.",
    )
    refresh_seconds: float = Field(
        30.0,
        gt=0.0,
        description="Extender: seconds between reads in the background (the watch side; never on a request). "
        "The descheduler reads once per cycle. Default 30.",
    )
    max_age_seconds: float = Field(
        120.0,
        gt=0.0,
        description="A reading whose newest measurement is older than this is stale and not used (every pod "
        "counts as not measured; the descheduler then plans no move and no resize). Default 120.",
    )

    @field_validator("uri")
    @classmethod
    def _uri(cls, v: str | None) -> str | None:
        return _checked(v, parse_usage_uri)


class ServiceSignalsConfig(ConfigModel):
    """Per-service request rate, latency (mean, p95) and refused share: ``uri`` in the call-graph source's form
    ``prometheus+istio|linkerd|otel[+https]://HOST:PORT[/PREFIX]?window=1m&namespace=NS``; null = off."""

    uri: str | None = Field(
        None,
        min_length=1,
        description="prometheus+istio|linkerd|otel[+https]://HOST:PORT[/PREFIX]?window=1m&namespace=NS (the "
        "series of the call-graph source, grouped by the serving side; one query per cycle); null = off: "
        "arrivals from the call graph's rates, latency and refused share unknown to the policies. Default null.",
    )
    max_age_seconds: float = Field(
        120.0, gt=0.0, description="A reading older than this is stale and not used. Default 120."
    )

    @field_validator("uri")
    @classmethod
    def _uri(cls, v: str | None) -> str | None:
        return _checked(v, _check_signals_uri)


def _check_signals_uri(uri: str) -> None:
    # the call-graph source's own parser (the same grammar and messages); a set URI means the process reads
    # Prometheus, so loading httpx for the check costs nothing it would not pay anyway
    from policy.topology.prometheus import source_from_uri  # deferred: httpx, only with a Prometheus source

    source_from_uri(uri, default_window="1m").close()


class MetricsSourcesConfig(ConfigModel):
    """The descheduler's live inputs (``metricsSources``): ``resourceUsage`` and ``serviceSignals``."""

    resource_usage: ResourceUsageConfig = ResourceUsageConfig()
    service_signals: ServiceSignalsConfig = ServiceSignalsConfig()


class ExtenderMetricsSourcesConfig(ConfigModel):
    """The extender's live input (``metricsSources``): ``resourceUsage`` (its placement policy reads no service
    signal)."""

    resource_usage: ResourceUsageConfig = ResourceUsageConfig()
