"""Applications for the simulator: real manifests (replicas, requests/limits), a call graph, and per-service
performance parameters calibrated from real measurements.

An application lives in a folder with an ``app.yaml`` (kind ``App``, see :class:`AppFile`) next to its
manifests; the built-in ones are under ``policy/data/apps/<name>/``. A user adds an app by pointing
``--app`` at their own folder or ``app.yaml``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field

from ..config import ConfigError, ConfigModel, load_config
from ..observe import load_objects, parse_workload
from ..state import ServiceEdge, ServiceGraph, WorkloadInfo


class ServiceParams(ConfigModel):
    """Per-service performance parameters (one visit = one request served by one pod).

    ``cpu_ms_per_request``: CPU time per request (ms of one core); ``latency_p50_ms`` / ``latency_mean_ms``:
    the service's own time per request outside CPU queueing (I/O, waits, work not modelled as CPU), a
    lognormal with this median and mean (mean >= median); ``working_set_mi``: memory in use per pod (MiB).
    """

    cpu_ms_per_request: float = Field(0.2, ge=0)
    latency_p50_ms: float = Field(1.0, gt=0)
    latency_mean_ms: float = Field(1.2, gt=0)
    working_set_mi: float = Field(64.0, ge=0)


class EdgeParams(ConfigModel):
    """Per-edge call parameters: ``calls_per_request`` (mean calls to the callee per request the caller
    serves) and whether the caller issues them in parallel (``parallel``) or one after another."""

    caller: str
    callee: str
    calls_per_request: float = Field(1.0, ge=0)
    parallel: bool = False


class AppFile(ConfigModel):
    """``app.yaml`` (``apiVersion: hrl-scheduler.io/v1alpha1``, ``kind: App``)."""

    name: str
    manifests: str = Field(description="manifest file or folder, relative to app.yaml")
    graph: str = Field("manifests", description="'manifests' (env vars/annotations) or an edge CSV/JSON file")
    entry: dict[str, float] = Field(description="entry service -> share of user requests")
    slo_p95_ms: float = Field(gt=0)
    timeout_ms: float = Field(gt=0)
    defaults: ServiceParams = ServiceParams()
    services: dict[str, ServiceParams] = Field(default_factory=dict)
    edges: list[EdgeParams] = Field(default_factory=list)
    description: str = ""


@dataclass(frozen=True)
class AppSpec:
    """A simulated application: workloads (from real manifests), the call graph with per-edge call
    multiplicities, performance parameters per service, entry shares, SLO and timeout."""

    name: str
    workloads: tuple[WorkloadInfo, ...]
    deployments: tuple[Mapping[str, Any], ...] = field(repr=False)
    graph: ServiceGraph
    params: Mapping[str, ServiceParams]
    entry: Mapping[str, float]
    slo_p95_ms: float
    timeout_ms: float
    source: str = ""

    @property
    def services(self) -> tuple[str, ...]:
        return tuple(w.service for w in self.workloads)


def builtin_apps_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "data" / "apps"


def builtin_apps() -> list[str]:
    d = builtin_apps_dir()
    return sorted(p.name for p in d.iterdir() if (p / "app.yaml").is_file()) if d.is_dir() else []


def load_app(name_or_path: str) -> AppSpec:
    """Load a built-in app by name (``online-boutique``, ...) or an ``app.yaml`` / its folder.

    Raises :class:`~policy.config.ConfigError` (invalid app.yaml) or ``ValueError`` with a one-line message
    (unknown app, entry service not in the manifests, ...).
    """
    p = Path(name_or_path)
    if not p.exists():
        cand = builtin_apps_dir() / name_or_path
        if not (cand / "app.yaml").is_file():
            raise ValueError(f"app: unknown app {name_or_path!r} (built-in: {', '.join(builtin_apps())}; "
                             "or a path to an app.yaml or its folder)")
        p = cand
    if p.is_dir():
        p = p / "app.yaml"
    spec = load_config(AppFile, "App", p)
    base = p.parent
    objs = load_objects(base / spec.manifests)
    deployments = tuple(o for o in objs if o.get("kind") in ("Deployment", "StatefulSet"))
    if not deployments:
        raise ValueError(f"{p}: manifests: no Deployment or StatefulSet in {spec.manifests!r}")
    workloads = tuple(parse_workload(o) for o in deployments)
    names = {w.service for w in workloads}
    if spec.graph == "manifests":
        from ..topology.sources import load_graph

        graph, _warnings = load_graph([str(base / spec.manifests)], "manifests")
    else:
        from ..topology.sources import load_graph

        graph, _warnings = load_graph([str(base / spec.graph)])
    overrides = {(e.caller, e.callee): e for e in spec.edges}
    problems = [(f"edges[{i}]", f"{e.caller} -> {e.callee} is not an edge of the call graph")
                for i, e in enumerate(spec.edges) if graph.edge(e.caller, e.callee) is None]
    problems += [(f"entry.{s}", "not a service of the manifests") for s in spec.entry if s not in names]
    problems += [(f"services.{s}", "not a service of the manifests") for s in spec.services if s not in names]
    if problems:
        raise ConfigError(str(p), problems)
    edges = []
    for e in graph.edges:
        o = overrides.get((e.caller, e.callee))
        edges.append(ServiceEdge(e.caller, e.callee, rps=None,
                                 calls_per_request=o.calls_per_request if o else 1.0,
                                 parallel=o.parallel if o else False))
    graph = ServiceGraph.build(names, edges, source=f"app:{spec.name}")
    params = {s: spec.services.get(s, spec.defaults) for s in sorted(names)}
    total = sum(spec.entry.values())
    if total <= 0 or not all(math.isfinite(v) and v >= 0 for v in spec.entry.values()):
        raise ConfigError(str(p), [("entry", f"shares must be >= 0 and sum > 0 (got {dict(spec.entry)})")])
    entry = {s: v / total for s, v in spec.entry.items()}
    return AppSpec(spec.name, workloads, deployments, graph, params, entry, spec.slo_p95_ms, spec.timeout_ms,
                   source=str(p))
