"""``ExtenderConfiguration``: the extender's versioned YAML configuration (DESIGN.md section 6).

Every field is optional; an empty file (or no ``--config``) gives the defaults below::

    apiVersion: hrl-scheduler.io/v1alpha1
    kind: ExtenderConfiguration
    listen:
      host: 127.0.0.1          # address to bind; 0.0.0.0 to serve other hosts (e.g. in a Pod)
      port: 8888               # TCP port, 0..65535 (0 = any free port)
    urlPrefix: /scheduler      # the extender's urlPrefix in KubeSchedulerConfiguration.extenders
    policy:
      name: topology-heuristic # the low-level placement policy
      targetUtilization: 0.7   # CPU utilisation above which a node counts as hot, 0 < x < 1
    topology:
      sources: []              # call-graph sources: manifest files/dirs, span CSVs, Alibaba CSVs, ...
    snapshotFile: null         # optional `kubectl get nodes,pods,pdb -A -o json` output to load at start
    maxSnapshotAgeSeconds: 0   # older snapshots → neutral scores and /readyz 503; 0 = never stale
    logLevel: INFO             # DEBUG, INFO, WARNING or ERROR

Relative paths are relative to the working directory of the process. The matching kube-scheduler side
(``KubeSchedulerConfiguration.extenders[]``) is documented in DESIGN.md section 5: ``urlPrefix:
http://HOST:PORT/scheduler``, ``prioritizeVerb: prioritize``, ``filterVerb: filter`` (optional),
``nodeCacheCapable: true``, ``ignorable: true``, ``weight``, ``httpTimeout``.

Load with :func:`load_extender_config`; every problem is reported at once with its dotted path in a
:class:`policy.config.ConfigError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from policy.config import ConfigModel, load_config
from policy.lowlevel import PlacementPolicy, TopologyHeuristic
from policy.state import ServiceGraph

__all__ = [
    "KIND",
    "ListenConfig",
    "PolicyConfig",
    "TopologyConfig",
    "ExtenderConfiguration",
    "load_extender_config",
    "build_policy",
    "load_topology",
]

KIND = "ExtenderConfiguration"


class ListenConfig(ConfigModel):
    """Where the HTTP server listens."""

    host: str = Field("127.0.0.1", min_length=1,
                      description="Address to bind (IPv4/IPv6 literal or host name). Default 127.0.0.1.")
    port: int = Field(8888, ge=0, le=65535,
                      description="TCP port, 0..65535; 0 = any free port. Default 8888.")


class PolicyConfig(ConfigModel):
    """The low-level placement policy that scores nodes."""

    name: Literal["topology-heuristic"] = Field(
        "topology-heuristic",
        description="Policy name. topology-heuristic: prefer nodes hosting the pod's callers and callees "
                    "(weighted by call rate), penalise nodes above targetUtilization "
                    "(policy.lowlevel.TopologyHeuristic).")
    target_utilization: float = Field(
        0.7, gt=0.0, lt=1.0,
        description="CPU utilisation (requested or measured, with the pod added) above which a node is "
                    "penalised, as a fraction 0 < x < 1. Default 0.7.")


class TopologyConfig(ConfigModel):
    """Where the call graph comes from."""

    sources: tuple[str, ...] = Field(
        (), description="Paths read by policy.topology.sources.load_graph (Kubernetes manifests, span "
                        "tables, Alibaba MSCallGraph CSVs; kind detected from content). Empty: the graph "
                        "comes from the snapshot source, else is empty (neutral scores).")


class ExtenderConfiguration(ConfigModel):
    """The whole ``kind: ExtenderConfiguration`` document (see the module docstring for a full example)."""

    listen: ListenConfig = Field(default_factory=ListenConfig, description="HTTP listen address.")
    url_prefix: str = Field(
        "/scheduler",
        description="Path prefix of the verbs: POST {urlPrefix}/filter and {urlPrefix}/prioritize. Must "
                    "start with '/'; a trailing '/' is dropped. Default /scheduler.")
    policy: PolicyConfig = Field(default_factory=PolicyConfig, description="Placement policy.")
    topology: TopologyConfig = Field(default_factory=TopologyConfig, description="Call-graph sources.")
    snapshot_file: str | None = Field(
        None, description="Optional static cluster state loaded at start: a Kubernetes List as printed by "
                          "`kubectl get nodes,pods,pdb -A -o json` (or any file/dir policy.observe reads). "
                          "The --snapshot flag overrides it.")
    max_snapshot_age_seconds: float = Field(
        0.0, ge=0.0,
        description="A snapshot not updated for longer than this many seconds is stale: scores turn "
                    "neutral, filter passes every node and /readyz answers 503. 0 = never stale "
                    "(right for a static snapshotFile; set it, e.g. 120, with a live watch).")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="Log level of the process (stderr). Case-insensitive. Default INFO.")

    @field_validator("url_prefix")
    @classmethod
    def _check_prefix(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError("must start with '/'")
        if any(c.isspace() for c in v) or "?" in v or "#" in v:
            raise ValueError("must be a plain URL path (no spaces, '?' or '#')")
        v = v.rstrip("/")
        return v

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, v: Any) -> Any:
        return v.upper() if isinstance(v, str) else v


def load_extender_config(source: str | Path | Mapping[str, Any] | None) -> ExtenderConfiguration:
    """Load an ``ExtenderConfiguration`` from a YAML file path, a mapping, or ``None`` (all defaults).
    Raises :class:`policy.config.ConfigError` listing every problem with its dotted path."""
    return load_config(ExtenderConfiguration, KIND, source)


def build_policy(config: ExtenderConfiguration) -> PlacementPolicy:
    """The placement policy ``config.policy`` names, configured."""
    p = config.policy
    if p.name == "topology-heuristic":
        return TopologyHeuristic(target_utilization=p.target_utilization)
    raise ValueError(f"policy.name: unknown policy {p.name!r}")  # pragma: no cover - Literal guards this


def load_topology(config: ExtenderConfiguration) -> tuple[ServiceGraph | None, list[str]]:
    """The call graph from ``config.topology.sources`` and the loader's warnings, or ``(None, [])``
    when no sources are configured. Uses ``policy.topology.sources.load_graph(paths)`` (imported here,
    lazily, so the extender starts without it when no sources are configured); its errors propagate."""
    if not config.topology.sources:
        return None, []
    from policy.topology.sources import load_graph  # lazy: optional at import time

    graph, warnings = load_graph(list(config.topology.sources))
    return graph, [str(w) for w in warnings]
