"""Keeping the call graph current from live sources: background refresh, rate smoothing, staleness, metrics.

:class:`TopologyRefresher` combines a static graph (files: manifests, AppGroups, span tables, read once) with
live sources (:class:`policy.topology.prometheus.PrometheusSource`, refreshed every ``refresh_s`` in a daemon
thread). Per live source it keeps the LAST GOOD graph: when a refresh fails (Prometheus unreachable, timeout,
5xx, a rejected query) the previous graph stays in use and the refresher reports itself stale, with the reason
and the age of the graph, until a refresh succeeds again. The combined graph is published to ``on_update`` (the
extender's :meth:`SnapshotStore.set_graph`) whenever it changes; nothing on a request path waits for a refresh.

Staleness: stale when (a) the latest attempt of any live source failed, or a source never succeeded, or (b) the
graph is older than ``stale_after_s`` (default 3 x ``refresh_s``: a refresher that stopped running). The
extender's ``/readyz`` stays 200 on a stale graph and says so (a stale graph is still the best available one,
and an unready extender would be dropped from its Service, which removes it from scheduling entirely; the
``hrl_topology_graph_stale`` gauge is the signal to alert on).

Rate smoothing (:class:`RateSmoother`): an exponentially weighted moving average over successive fetches with a
half-life in seconds. For an edge observed ``x`` at time ``t`` after the previous smoothed value ``s`` at
``t_prev``: ``s <- s + a (x - s)`` with ``a = 1 - 2^(-(t - t_prev) / half_life_s)``, applied to rps,
calls_per_request, the latencies and the error rate. An edge absent from a fetch is observed at 0 rps (its other
fields keep their value) and is dropped once its smoothed rate falls below ``drop_below_rps``; a new edge starts
at its observed value. ``half_life_s = 0`` disables smoothing. Prometheus' own ``rate()`` window already averages
within one fetch; the half-life smooths across fetches (e.g. window 1m, refresh 30 s, half-life 5 min).

Metrics (prometheus-client, registered in a registry passed in; :class:`TopologyMetrics`):

===========================================  =======  ========================================================
``hrl_topology_graph_age_seconds``           gauge    seconds since the oldest live source last succeeded (since
                                                      the static load when there is none; NaN before any)
``hrl_topology_graph_edges``                 gauge    edges of the combined graph
``hrl_topology_graph_services``              gauge    services of the combined graph
``hrl_topology_fingerprint_changes_total``   counter  times the combined graph's fingerprint changed
``hrl_topology_source_errors_total{source}`` counter  failed refreshes per live source (its ``name``)
``hrl_topology_graph_stale``                 gauge    1 when stale (see above), else 0
===========================================  =======  ========================================================
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge

from policy.cache import fingerprint
from policy.state import EDGE_MEASURES, ServiceEdge, ServiceGraph

from .common import TopologyError
from .sources import load_graph

__all__ = [
    "LiveSource",
    "RateSmoother",
    "GraphStatus",
    "TopologyMetrics",
    "TopologyRefresher",
    "graph_fingerprint",
    "combine_graphs",
]

log = logging.getLogger(__name__)


class LiveSource(Protocol):
    """A call-graph source read repeatedly (e.g. :class:`~policy.topology.prometheus.PrometheusSource`)."""

    name: str

    def fetch_with_warnings(self) -> tuple[ServiceGraph, list[str]]: ...

    def close(self) -> None: ...


def graph_fingerprint(graph: ServiceGraph) -> str:
    """The fingerprint of ``graph``: :func:`policy.cache.fingerprint` (its structure, not the rates)."""
    return str(fingerprint(graph))


def combine_graphs(graphs: Sequence[ServiceGraph], source: str = "") -> ServiceGraph:
    """One graph from several, as :func:`policy.topology.sources.load_graph` combines sources: services united;
    an edge in several graphs is one edge whose ``rps`` is the sum of the known rates (a declared edge,
    ``rps=None``, takes the observed rate) and whose other fields keep the first known value."""
    services: set[str] = set()
    edges: list[ServiceEdge] = []
    for g in graphs:
        services.update(g.services)
        edges.extend(g.edges)
    return ServiceGraph.build(services, edges, source or "; ".join(g.source for g in graphs if g.source))


class RateSmoother:
    """EWMA of the edge fields over successive graphs of ONE source (see the module docstring).

    ``half_life_s``: >= 0 (0 = no smoothing: :meth:`update` returns its input); ``drop_below_rps``: an edge
    missing from the latest fetch is removed once its smoothed rps is below this (> 0). Not thread-safe: one
    caller at a time (the refresher's thread). Raises ``ValueError`` for a negative or non-finite half-life.
    """

    def __init__(self, half_life_s: float = 0.0, drop_below_rps: float = 1e-3):
        if not math.isfinite(half_life_s) or half_life_s < 0:
            raise ValueError(f"half_life_s: must be a finite number >= 0, got {half_life_s!r}")
        if not drop_below_rps > 0:
            raise ValueError(f"drop_below_rps: must be > 0, got {drop_below_rps!r}")
        self.half_life_s = float(half_life_s)
        self.drop_below_rps = float(drop_below_rps)
        self._edges: dict[tuple[str, str], ServiceEdge] = {}
        self._t: float | None = None

    def reset(self) -> None:
        """Forget the history (the next :meth:`update` returns its input)."""
        self._edges.clear()
        self._t = None

    def update(self, graph: ServiceGraph, now_s: float) -> ServiceGraph:
        """Fold ``graph`` (observed at ``now_s``, seconds) into the averages; returns the smoothed graph."""
        if self.half_life_s == 0:
            return graph
        if self._t is None or now_s <= self._t:
            a = 1.0 if self._t is None else 0.0
        else:
            a = 1.0 - 0.5 ** ((now_s - self._t) / self.half_life_s)
        seen = {(e.caller, e.callee): e for e in graph.edges}
        out: dict[tuple[str, str], ServiceEdge] = {}
        for k, e in seen.items():
            prev = self._edges.get(k)
            if prev is None:
                out[k] = e
                continue
            kw = {}
            for name in EDGE_MEASURES:
                x, s = getattr(e, name), getattr(prev, name)
                kw[name] = x if s is None else (s if x is None else s + a * (x - s))
            out[k] = replace(e, **kw)
        for k, prev in self._edges.items():
            if k in seen:
                continue
            if prev.rps is None:
                continue  # nothing to decay: it is gone
            r = prev.rps + a * (0.0 - prev.rps)
            if r >= self.drop_below_rps:
                out[k] = replace(prev, rps=r)
        self._edges = out
        self._t = now_s
        return ServiceGraph.build(graph.services, out.values(), graph.source)


@dataclass(frozen=True)
class GraphStatus:
    """One reading of the refresher.

    ``graph``: the combined graph in use; ``updated_at_s``: when the oldest live source last succeeded (the
    static load time without live sources; ``None`` before any success); ``stale``: see the module docstring;
    ``reason``: why it is stale (``""`` when fresh); ``errors``: the latest error per live source that failed
    its latest attempt; ``fingerprint``: :func:`graph_fingerprint` of ``graph``; ``warnings``: the sources'
    latest warnings.
    """

    graph: ServiceGraph
    updated_at_s: float | None
    stale: bool
    reason: str = ""
    errors: dict[str, str] = field(default_factory=dict)
    fingerprint: str = ""
    warnings: tuple[str, ...] = ()

    def age_s(self, now_s: float) -> float:
        """Seconds since ``updated_at_s`` (``inf`` when never updated)."""
        return math.inf if self.updated_at_s is None else max(0.0, now_s - self.updated_at_s)


class TopologyMetrics:
    """The topology collectors (see the module docstring), registered in ``registry`` on construction
    (once per registry). :meth:`bind` makes the age and stale gauges read a refresher at scrape time."""

    def __init__(self, registry: CollectorRegistry):
        self.registry = registry
        self.graph_age_seconds = Gauge(
            "hrl_topology_graph_age_seconds",
            "Seconds since the call graph was last refreshed successfully (NaN before the first success).",
            registry=registry,
        )
        self.graph_edges = Gauge("hrl_topology_graph_edges", "Edges of the call graph in use.", registry=registry)
        self.graph_services = Gauge(
            "hrl_topology_graph_services", "Services of the call graph in use.", registry=registry
        )
        self.fingerprint_changes_total = Counter(
            "hrl_topology_fingerprint_changes_total", "Times the call graph's fingerprint changed.", registry=registry
        )
        self.source_errors_total = Counter(
            "hrl_topology_source_errors_total",
            "Failed refreshes of a live call-graph source, by source.",
            ["source"],
            registry=registry,
        )
        self.graph_stale = Gauge(
            "hrl_topology_graph_stale",
            "1 when the call graph is stale (a live source failed its latest refresh, or no refresh for too long).",
            registry=registry,
        )
        self.graph_age_seconds.set(math.nan)

    def bind(self, refresher: TopologyRefresher) -> None:
        """Compute age and staleness from ``refresher`` at every scrape; pre-create the per-source error series."""

        def age() -> float:
            st = refresher.status()
            return math.nan if st.updated_at_s is None else st.age_s(refresher.clock())

        self.graph_age_seconds.set_function(age)
        self.graph_stale.set_function(lambda: 1.0 if refresher.status().stale else 0.0)
        for name in refresher.source_names:
            self.source_errors_total.labels(source=name)


class TopologyRefresher:
    """The call graph from a static part and live sources, refreshed in the background (module docstring).

    ``static``: the graph read once from files (``ServiceGraph()`` for none); ``live``: the live sources (their
    ``name`` labels metrics and messages; closed by :meth:`stop`); ``refresh_s`` (> 0): seconds between
    refreshes; ``half_life_s`` (>= 0): rate smoothing per source (0 = off); ``stale_after_s``: a graph older than
    this is stale (default ``3 * refresh_s``; ``0`` = only failures make it stale); ``metrics``: a
    :class:`TopologyMetrics` to update (bound here); ``on_update(graph)``: called with every new combined graph
    (in the refreshing thread, or in the caller of :meth:`refresh_once`); ``clock``: seconds (default
    ``time.time``). Raises ``ValueError`` for a bad parameter.
    """

    def __init__(
        self,
        static: ServiceGraph | None = None,
        live: Sequence[LiveSource] = (),
        *,
        refresh_s: float = 30.0,
        half_life_s: float = 0.0,
        stale_after_s: float | None = None,
        metrics: TopologyMetrics | None = None,
        on_update: Callable[[ServiceGraph], None] | None = None,
        clock: Callable[[], float] = time.time,
    ):
        if not (math.isfinite(refresh_s) and refresh_s > 0):
            raise ValueError(f"refresh_s: must be > 0, got {refresh_s!r}")
        if stale_after_s is not None and not (math.isfinite(stale_after_s) and stale_after_s >= 0):
            raise ValueError(f"stale_after_s: must be >= 0, got {stale_after_s!r}")
        names = [s.name for s in live]
        if len(set(names)) != len(names):
            raise ValueError(f"live sources: names must differ, got {names}")
        self.static = static if static is not None else ServiceGraph()
        self.live = list(live)
        self.refresh_s = float(refresh_s)
        self.stale_after_s = 3.0 * self.refresh_s if stale_after_s is None else float(stale_after_s)
        self.clock = clock
        self.on_update = on_update
        self.metrics = metrics
        self._smoothers = {s.name: RateSmoother(half_life_s) for s in self.live}
        self._good: dict[str, ServiceGraph] = {}
        self._good_at: dict[str, float] = {}
        self._errors: dict[str, str] = {}
        self._error_counts: dict[str, int] = {}
        self._warnings: dict[str, list[str]] = {}
        self._lock = threading.Lock()  # serialises refreshes
        self._static_at = clock()
        self._status = self._compose()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if metrics is not None:
            self.attach_metrics(metrics)

    def attach_metrics(self, metrics: TopologyMetrics) -> None:
        """Report to ``metrics`` from now on (binds its age and stale gauges to this refresher); the source
        errors counted before are added to its counter."""
        self.metrics = metrics
        metrics.bind(self)
        for name, n in self._error_counts.items():
            metrics.source_errors_total.labels(source=name).inc(n)
        self._publish_metrics(self._status, changed=False)

    @property
    def source_names(self) -> list[str]:
        return [s.name for s in self.live]

    # ---- reading ----------------------------------------------------------------------------------
    def status(self, now_s: float | None = None) -> GraphStatus:
        """The current :class:`GraphStatus`, with age-based staleness evaluated at ``now_s`` (default: clock)."""
        st = self._status
        if st.stale or not self.live or self.stale_after_s == 0 or st.updated_at_s is None:
            return st
        now = self.clock() if now_s is None else now_s
        age = st.age_s(now)
        if age > self.stale_after_s:
            return replace(
                st, stale=True, reason=f"call graph not refreshed for {age:.0f} s (> {self.stale_after_s:g} s)"
            )
        return st

    @property
    def graph(self) -> ServiceGraph:
        """The combined graph in use."""
        return self._status.graph

    # ---- refreshing -------------------------------------------------------------------------------
    def refresh_once(self) -> GraphStatus:
        """Fetch every live source once (sequentially), keep each one's last good graph, publish the combined
        graph when it changed, update the metrics. Never raises for a source failure (it is recorded)."""
        with self._lock:
            for src in self.live:
                t = self.clock()
                try:
                    g, warnings = src.fetch_with_warnings()
                except TopologyError as exc:
                    self._fail(src.name, str(exc))
                    continue
                except Exception as exc:  # a bug or an unexpected library error: keep the last good graph
                    log.error("topology source %s: %s: %s", src.name, type(exc).__name__, exc, exc_info=True)
                    self._fail(src.name, f"{type(exc).__name__}: {exc}")
                    continue
                self._good[src.name] = self._smoothers[src.name].update(g, t)
                self._good_at[src.name] = t
                self._errors.pop(src.name, None)
                self._warnings[src.name] = list(warnings)
            prev = self._status
            st = self._compose()
            self._status = st
        changed = st.graph != prev.graph
        if changed and self.on_update is not None:
            try:
                self.on_update(st.graph)
            except Exception:  # the consumer's failure must not stop refreshing
                log.exception("topology: on_update failed")
        self._publish_metrics(st, changed=st.fingerprint != prev.fingerprint)
        return self.status()

    def _fail(self, name: str, message: str) -> None:
        one_line = " ".join(message.split())
        if self._errors.get(name) != one_line:
            log.warning("topology: %s (keeping the last good graph of %s)", one_line, name)
        self._errors[name] = one_line
        self._error_counts[name] = self._error_counts.get(name, 0) + 1
        if self.metrics is not None:
            self.metrics.source_errors_total.labels(source=name).inc()

    def _compose(self) -> GraphStatus:
        graphs = [self.static] + [self._good[s.name] for s in self.live if s.name in self._good]
        source = "; ".join(x for x in [self.static.source] + [s.name for s in self.live] if x)
        graph = combine_graphs(graphs, source)
        reasons = []
        for s in self.live:
            if s.name in self._errors:
                if s.name in self._good_at:
                    age = self.clock() - self._good_at[s.name]
                    reasons.append(f"{self._errors[s.name]} (keeping its graph from {age:.0f} s ago)")
                else:
                    reasons.append(f"{self._errors[s.name]} (no graph from it yet)")
            elif s.name not in self._good_at:
                reasons.append(f"{s.name}: not fetched yet")
        if self.live:
            times = [self._good_at.get(s.name) for s in self.live]
            updated = None if any(t is None for t in times) else min(t for t in times if t is not None)
            if updated is None and self._good_at:
                updated = min(self._good_at.values())
        else:
            updated = self._static_at
        warnings = tuple(w for s in self.live for w in self._warnings.get(s.name, ()))
        return GraphStatus(
            graph, updated, bool(reasons), "; ".join(reasons), dict(self._errors), graph_fingerprint(graph), warnings
        )

    def _publish_metrics(self, st: GraphStatus, changed: bool) -> None:
        m = self.metrics
        if m is None:
            return
        m.graph_edges.set(len(st.graph.edges))
        m.graph_services.set(len(st.graph.services))
        if changed:
            m.fingerprint_changes_total.inc()

    # ---- background -------------------------------------------------------------------------------
    def start(self) -> TopologyRefresher:
        """Refresh every ``refresh_s`` in a daemon thread (the first refresh right away). Idempotent."""
        if self._thread is not None or not self.live:
            return self
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="hrl-topology-refresh", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            self.refresh_once()
            self._stop.wait(max(0.0, self.refresh_s - (time.monotonic() - t0)))

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the thread (waits up to ``timeout_s``) and close the live sources. Idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        for s in self.live:
            try:
                s.close()
            except Exception:  # pragma: no cover - closing is best effort
                log.debug("closing %s failed", s.name, exc_info=True)

    def __enter__(self) -> TopologyRefresher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- construction from configuration ------------------------------------------------------------
    @classmethod
    def from_sources(cls, sources: Sequence[str], **kwargs) -> tuple[TopologyRefresher, list[str]]:
        """A refresher for ``topology.sources``-style strings: file paths are read once, together, with
        :func:`policy.topology.sources.load_graph` (errors raise :class:`TopologyError`); live URIs
        (``prometheus+FLAVOR://...``, :func:`policy.topology.prometheus.source_from_uri`; ``ValueError`` for a bad
        one) become live sources, not fetched here (call :meth:`refresh_once` or :meth:`start`). ``kwargs`` go to
        the constructor. Returns ``(refresher, warnings of the static sources)``."""
        from .prometheus import is_prometheus_uri, source_from_uri  # deferred: httpx, only for live sources

        files = [s for s in sources if not is_prometheus_uri(str(s))]
        uris = [str(s) for s in sources if is_prometheus_uri(str(s))]
        static, warnings = load_graph(files) if files else (ServiceGraph(), [])
        live = [source_from_uri(u) for u in uris]
        return cls(static, live, **kwargs), list(warnings)
