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

from policy.config import ConfigError, ConfigModel, load_config
from policy.observe import ObjectError, load_objects, parse_workload
from policy.state import ServiceEdge, ServiceGraph, WorkloadInfo
from policy.topology.manifests import graph_from_objects, is_appgroup
from policy.topology.sources import load_graph

__all__ = [
    "ServiceParams",
    "CallParams",
    "EdgeParams",
    "AppFile",
    "AppPart",
    "AppSpec",
    "builtin_apps_dir",
    "builtin_apps",
    "load_app",
]


class ServiceParams(ConfigModel):
    """Per-service performance parameters (one visit = one request served by one pod).

    - ``cpu_ms_per_request``: mean CPU work per request (ms of one core);
    - ``cpu_cv``: coefficient of variation of that work (gamma distributed; 0 = every request the same,
      1 = exponential);
    - ``latency_p50_ms`` / ``latency_mean_ms``: the service's own time per request outside the CPU
      (I/O, locks, work not modelled as CPU), a lognormal with this median and mean (mean >= median);
    - ``max_inflight``: requests a pod admits into its CPU run queue at once; an arrival that finds it
      full fails at once (a full accept queue; Envoy's circuit breaker ``max_requests`` defaults to 1024);
    - ``working_set_mi``: memory in use per pod at rest (MiB); ``memory_mi_per_inflight``: extra MiB
      per request in flight on the pod (buffers, so the working set grows with load). Over the
      container's memory limit the pod is OOM-killed and restarted (see the engine).
    """

    cpu_ms_per_request: float = Field(0.2, ge=0)
    cpu_cv: float = Field(1.0, ge=0, le=10)
    latency_p50_ms: float = Field(1.0, gt=0)
    latency_mean_ms: float = Field(1.2, gt=0)
    max_inflight: int = Field(1024, ge=1, le=1_000_000)
    working_set_mi: float = Field(64.0, ge=0)
    memory_mi_per_inflight: float = Field(0.0, ge=0)


class CallParams(ConfigModel):
    """How one caller calls one callee (the defaults of every edge; ``edgeDefaults`` in app.yaml).

    - ``request_bytes`` / ``response_bytes``: mean payload per call (bytes), charged at the link's
      per-byte cost (:class:`~policy.sim.model.NetworkModel`);
    - ``timeout_ms``: per-try timeout (gRPC deadline per attempt / Envoy ``per_try_timeout``), None = none;
    - ``retries``: extra attempts after a failed or timed-out one (Envoy ``num_retries``; 0 = none);
    - ``retry_backoff_ms``: wait before each retry (Envoy's default base interval is 25 ms).
    A timed-out attempt is abandoned by the caller but its work goes on at the callee (no cancellation),
    so retries add load.
    """

    request_bytes: float = Field(0.0, ge=0)
    response_bytes: float = Field(0.0, ge=0)
    timeout_ms: float | None = Field(None, gt=0)
    retries: int = Field(0, ge=0, le=10)
    retry_backoff_ms: float = Field(25.0, ge=0)


class EdgeParams(ConfigModel):
    """Per-edge call parameters: ``calls_per_request`` (mean calls to the callee per request the caller
    serves), whether the caller issues them in parallel (``parallel``) or one after another, and any
    :class:`CallParams` field (unset = ``edgeDefaults``)."""

    caller: str
    callee: str
    calls_per_request: float = Field(1.0, ge=0)
    parallel: bool = False
    request_bytes: float | None = Field(None, ge=0)
    response_bytes: float | None = Field(None, ge=0)
    timeout_ms: float | None = Field(None, gt=0)
    retries: int | None = Field(None, ge=0, le=10)
    retry_backoff_ms: float | None = Field(None, ge=0)

    def call_params(self, defaults: CallParams) -> CallParams:
        """These overrides on top of ``defaults``."""
        over = {k: getattr(self, k) for k in CallParams.model_fields if getattr(self, k) is not None}
        return defaults.model_copy(update=over)


class AppFile(ConfigModel):
    """``app.yaml`` (``apiVersion: hrl-scheduler.io/v1alpha1``, ``kind: App``), camelCase keys::

        name: my-app
        manifests: k8s/                    # Deployments/StatefulSets: replicas, requests, limits
        graph: manifests                   # one source or a list: manifests, span CSV (dir), edge CSV/JSON, ...
        entry: {frontend: 1.0}             # entry service -> share of user requests
        sloP95Ms: 200                      # p95 target of the user requests (ms)
        timeoutMs: 2000                    # the user's end-to-end timeout (ms): slower requests fail
        defaults: {cpuMsPerRequest: 0.5, cpuCv: 1.0, latencyP50Ms: 1.0, latencyMeanMs: 1.3,
                   maxInflight: 1024, workingSetMi: 64, memoryMiPerInflight: 0}
        services: {db: {cpuMsPerRequest: 0.4}}      # per-service ServiceParams (unset fields: defaults' built-ins)
        edgeDefaults: {requestBytes: 0, responseBytes: 0, timeoutMs: null, retries: 0, retryBackoffMs: 25}
        edges:                             # per edge: calls per request, parallel fan-out, any CallParams field
          - {caller: frontend, callee: db, callsPerRequest: 2.0, parallel: false, timeoutMs: 100, retries: 2}

    See :class:`ServiceParams` and :class:`CallParams` for the units and meaning of each field.

    ``graph``: one call-graph source or a list of them, each ``manifests`` (the env vars, annotations and
    AppGroups of the ``manifests`` above) or a path relative to app.yaml of any kind ``hrl-policy graph`` reads:
    a span table (file or folder), an edge list (the JSON of ``hrl-policy graph --json`` or a CSV with
    ``caller,callee`` columns), an Alibaba call-graph CSV, an AppGroup. The sources are merged as
    :func:`policy.topology.sources.load_graph` merges them (``[manifests, spans/]``: the declared edges plus the
    observed ones, with the observed calls per request and parallel fan-out). A service of the graph with no
    workload in the manifests is dropped with its edges (a warning in :attr:`AppSpec.warnings`): the simulator
    has no pod to run it. An edge's ``callsPerRequest`` / ``parallel`` come from ``edges`` when given there,
    else from the graph (a span table measures them), else 1 and sequential.
    """

    name: str
    manifests: str = Field(description="manifest file or folder, relative to app.yaml")
    graph: str | list[str] = Field(
        "manifests", description="'manifests' (env vars/annotations) or a path to another source, or a list of them"
    )
    entry: dict[str, float] = Field(description="entry service -> share of user requests")
    slo_p95_ms: float = Field(gt=0)
    timeout_ms: float = Field(gt=0)
    defaults: ServiceParams = ServiceParams()
    services: dict[str, ServiceParams] = Field(default_factory=dict)
    edge_defaults: CallParams = CallParams()
    edges: list[EdgeParams] = Field(default_factory=list)
    description: str = ""


@dataclass(frozen=True)
class AppPart:
    """One application of a composite :class:`AppSpec` (several apps sharing one cluster, built by
    :func:`policy.sim.scenario.compose_apps`): its ``name``, ``namespace``, its ``services`` (names in the
    composite graph), ``entry`` (service → share of this app's user requests), its own SLO and timeout (ms)
    and the ``source`` app.yaml."""

    name: str
    namespace: str
    services: tuple[str, ...]
    entry: Mapping[str, float]
    slo_p95_ms: float
    timeout_ms: float
    source: str = ""


@dataclass(frozen=True)
class AppSpec:
    """A simulated application: workloads (from real manifests), the call graph with per-edge call
    multiplicities, performance parameters per service, entry shares, SLO and timeout (ms, end to end,
    as the user's client sees it). ``calls`` holds each edge's :class:`CallParams` (bytes, per-try
    timeout, retries); an edge missing from it uses ``CallParams()``. ``warnings``: one-line notes from
    reading the call graph (unresolved hosts, services without a workload dropped, no edges). ``parts``: the
    applications of a composite app (several apps on one cluster, each with its own load, SLO and timeout);
    empty for one app."""

    name: str
    workloads: tuple[WorkloadInfo, ...]
    deployments: tuple[Mapping[str, Any], ...] = field(repr=False)
    graph: ServiceGraph
    params: Mapping[str, ServiceParams]
    entry: Mapping[str, float]
    slo_p95_ms: float
    timeout_ms: float
    source: str = ""
    calls: Mapping[tuple[str, str], CallParams] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    parts: tuple[AppPart, ...] = ()

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
            raise ValueError(
                f"app: unknown app {name_or_path!r} (built-in: {', '.join(builtin_apps())}; "
                "or a path to an app.yaml or its folder)"
            )
        p = cand
    if p.is_dir():
        p = p / "app.yaml"
    spec = load_config(AppFile, "App", p)
    base = p.parent
    objs = load_objects(base / spec.manifests)
    deployments = tuple(o for o in objs if o.get("kind") in ("Deployment", "StatefulSet"))
    if not deployments:
        raise ValueError(f"{p}: manifests: no Deployment or StatefulSet in {spec.manifests!r}")
    try:
        workloads = tuple(parse_workload(o) for o in deployments)
    except ObjectError as exc:
        raise ValueError(f"{p}: manifests ({spec.manifests}): {exc}") from None
    names = {w.service for w in workloads}
    sources = [spec.graph] if isinstance(spec.graph, str) else list(spec.graph)
    if not sources:
        raise ConfigError(str(p), [("graph", "empty list: name at least one source (e.g. manifests)")])
    if sources == ["manifests"]:
        if any(is_appgroup(o) for o in objs):  # AppGroups: re-read with line numbers for their errors
            graph, warnings = load_graph([str(base / spec.manifests)], "manifests")
        else:  # the objects are already parsed: build the graph from them (no second YAML parse)
            graph, warnings = graph_from_objects(objs, str(base / spec.manifests))
    else:
        paths = []
        for i, src in enumerate(sources):
            path = base / (spec.manifests if src == "manifests" else src)
            if not path.exists():
                where = "graph" if isinstance(spec.graph, str) else f"graph[{i}]"
                raise ConfigError(str(p), [(where, f"no such file or directory: {src!r} (relative to app.yaml)")])
            paths.append(str(path))
        graph, warnings = load_graph(paths)
    graph, dropped = _only_workloads(graph, names)
    warnings = list(warnings) + dropped
    overrides = {(e.caller, e.callee): e for e in spec.edges}
    problems = [
        (f"edges[{i}]", f"{e.caller} -> {e.callee} is not an edge of the call graph")
        for i, e in enumerate(spec.edges)
        if graph.edge(e.caller, e.callee) is None
    ]
    problems += [(f"entry.{s}", "not a service of the manifests") for s in spec.entry if s not in names]
    problems += [(f"services.{s}", "not a service of the manifests") for s in spec.services if s not in names]
    if problems:
        raise ConfigError(str(p), problems)
    edges = []
    for e in graph.edges:
        o = overrides.get((e.caller, e.callee))
        given = o.model_fields_set if o else set()
        cpr = e.calls_per_request if e.calls_per_request is not None else 1.0
        edges.append(
            ServiceEdge(
                e.caller,
                e.callee,
                rps=None,
                calls_per_request=o.calls_per_request if o and "calls_per_request" in given else cpr,
                parallel=o.parallel if o and "parallel" in given else e.parallel,
            )
        )
    graph = ServiceGraph.build(names, edges, source=f"app:{spec.name}")
    params = {s: spec.services.get(s, spec.defaults) for s in sorted(names)}
    calls = {
        (e.caller, e.callee): (
            overrides[(e.caller, e.callee)].call_params(spec.edge_defaults)
            if (e.caller, e.callee) in overrides
            else spec.edge_defaults
        )
        for e in graph.edges
    }
    total = sum(spec.entry.values())
    if total <= 0 or not all(math.isfinite(v) and v >= 0 for v in spec.entry.values()):
        raise ConfigError(str(p), [("entry", f"shares must be >= 0 and sum > 0 (got {dict(spec.entry)})")])
    entry = {s: v / total for s, v in spec.entry.items()}
    return AppSpec(
        spec.name,
        workloads,
        deployments,
        graph,
        params,
        entry,
        spec.slo_p95_ms,
        spec.timeout_ms,
        source=str(p),
        calls=calls,
        warnings=tuple(dict.fromkeys(warnings)),
    )


def _only_workloads(graph: ServiceGraph, names: set[str]) -> tuple[ServiceGraph, list[str]]:
    """``graph`` without the services that have no workload in ``names`` (and their edges), and one warning
    naming them."""
    extra = sorted(set(graph.services) - names)
    if not extra:
        return graph, []
    lost = [e for e in graph.edges if e.caller in extra or e.callee in extra]
    kept = [e for e in graph.edges if e.caller not in extra and e.callee not in extra]
    shown = ", ".join(extra[:8]) + (f", ... ({len(extra)} in all)" if len(extra) > 8 else "")
    note = (
        f"graph: {len(extra)} service(s) of the call graph have no workload in the manifests and are dropped with "
        f"their {len(lost)} edge(s): {shown}"
    )
    return ServiceGraph.build(sorted(names & set(graph.services)) or names, kept, graph.source), [note]
