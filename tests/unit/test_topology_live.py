"""Keeping the call graph current: rate smoothing, the refresher's last-good-graph and staleness rules, its
metrics, and how the extender reports a stale graph (config, /readyz, /metrics)."""

from __future__ import annotations

import asyncio
import math

import httpx
import pytest
from prometheus_client import CollectorRegistry
from waiting import wait_until

from extender.config import load_extender_config, topology_refresher
from extender.server import make_app, readiness
from extender.store import SnapshotStore
from policy.config import ConfigError
from policy.lowlevel import TopologyHeuristic
from policy.state import ServiceEdge, ServiceGraph
from policy.topology.common import TopologyError
from policy.topology.live import RateSmoother, TopologyMetrics, TopologyRefresher, combine_graphs, graph_fingerprint
from policy.topology.prometheus import SourceUnavailable


def g(*edges: tuple[str, str, float | None], services=()) -> ServiceGraph:
    return ServiceGraph.build(services, [ServiceEdge(a, b, rps=r) for a, b, r in edges])


class FakeSource:
    """A live source answering from a script: a graph, or an exception to raise."""

    def __init__(self, name: str, *answers):
        self.name = name
        self.answers = list(answers)
        self.calls = 0
        self.closed = False

    def fetch_with_warnings(self):
        self.calls += 1
        a = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(a, Exception):
            raise a
        return a, [f"{self.name}: note"]

    def close(self):
        self.closed = True


class Clock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def sample(registry: CollectorRegistry, name: str, **labels) -> float | None:
    return registry.get_sample_value(name, labels)


# ---- smoothing ------------------------------------------------------------------------------------------


def test_after_one_half_life_the_smoothed_rate_is_halfway_to_the_new_observation():
    s = RateSmoother(half_life_s=60)
    assert s.update(g(("a", "b", 10.0)), 0.0).edge("a", "b").rps == 10.0  # the first value is taken as is
    assert s.update(g(("a", "b", 20.0)), 60.0).edge("a", "b").rps == pytest.approx(15.0)
    assert s.update(g(("a", "b", 20.0)), 180.0).edge("a", "b").rps == pytest.approx(15.0 + 5.0 * 0.75)


def test_latencies_and_error_rates_are_smoothed_too_and_unknown_values_keep_the_last_known():
    s = RateSmoother(half_life_s=10)
    s.update(ServiceGraph.build([], [ServiceEdge("a", "b", rps=1, latency_p95_ms=100, error_rate=0.0)]), 0)
    out = s.update(ServiceGraph.build([], [ServiceEdge("a", "b", rps=1, latency_p95_ms=200, error_rate=None)]), 10)
    e = out.edge("a", "b")
    assert e.latency_p95_ms == pytest.approx(150) and e.error_rate == 0.0


def test_an_edge_that_disappears_decays_and_is_dropped_below_the_threshold():
    s = RateSmoother(half_life_s=1, drop_below_rps=0.3)
    s.update(g(("a", "b", 1.0), ("a", "c", 1.0)), 0)
    assert s.update(g(("a", "c", 1.0)), 1).edge("a", "b").rps == pytest.approx(0.5)
    assert s.update(g(("a", "c", 1.0)), 2).edge("a", "b") is None  # 0.25 < 0.3
    assert s.update(g(("a", "c", 1.0)), 3).edge("a", "c").rps == pytest.approx(1.0)


def test_a_new_edge_starts_at_its_observed_value_and_no_smoothing_passes_graphs_through():
    s = RateSmoother(half_life_s=100)
    s.update(g(("a", "b", 1.0)), 0)
    assert s.update(g(("a", "b", 1.0), ("b", "c", 7.0)), 1).edge("b", "c").rps == 7.0
    raw = g(("x", "y", 3.0))
    assert RateSmoother(0).update(raw, 5) is raw
    with pytest.raises(ValueError, match="half_life_s"):
        RateSmoother(-1)


# ---- combining ------------------------------------------------------------------------------------------


def test_declared_edges_take_the_observed_rate_and_observed_rates_add_up():
    static = g(("a", "b", None), services=["a", "b", "z"])
    out = combine_graphs([static, g(("a", "b", 2.0), ("b", "c", 1.0)), g(("b", "c", 0.5))])
    assert out.edge("a", "b").rps == 2.0 and out.edge("b", "c").rps == 1.5
    assert set(out.services) == {"a", "b", "c", "z"}


def test_the_fingerprint_changes_with_the_edge_set_not_with_the_rates():
    assert graph_fingerprint(g(("a", "b", 1.0))) == graph_fingerprint(g(("a", "b", 9.0)))
    assert graph_fingerprint(g(("a", "b", 1.0))) != graph_fingerprint(g(("a", "b", 1.0), ("b", "c", 1.0)))


# ---- the refresher -------------------------------------------------------------------------------------


def test_an_unreachable_source_keeps_its_last_good_graph_and_marks_it_stale_until_it_recovers():
    clock = Clock()
    reg = CollectorRegistry()
    good = g(("web", "db", 5.0))
    src = FakeSource(
        "prometheus+istio://p:9090",
        good,
        SourceUnavailable("prometheus+istio://p:9090: cannot reach Prometheus: connection refused"),
        good,
    )
    published = []
    r = TopologyRefresher(
        g(("web", "cache", None)),
        [src],
        refresh_s=30,
        metrics=TopologyMetrics(reg),
        on_update=published.append,
        clock=clock,
    )
    assert r.status().stale and "not fetched yet" in r.status().reason
    assert sample(reg, "hrl_topology_graph_stale") == 1.0 and math.isnan(sample(reg, "hrl_topology_graph_age_seconds"))

    st = r.refresh_once()
    assert not st.stale and st.reason == "" and st.updated_at_s == 1000.0
    assert {(e.caller, e.callee) for e in st.graph.edges} == {("web", "db"), ("web", "cache")}
    assert len(published) == 1 and published[0] == st.graph
    assert sample(reg, "hrl_topology_graph_edges") == 2 and sample(reg, "hrl_topology_graph_services") == 3
    assert st.warnings == ("prometheus+istio://p:9090: note",)

    clock.t += 30
    st = r.refresh_once()
    assert st.stale and st.graph == published[0]  # the last good graph stays in use
    assert "connection refused" in st.reason and "keeping its graph from 30 s ago" in st.reason
    assert st.errors == {
        "prometheus+istio://p:9090": "prometheus+istio://p:9090: cannot reach Prometheus: connection refused"
    }
    assert sample(reg, "hrl_topology_source_errors_total", source="prometheus+istio://p:9090") == 1
    assert sample(reg, "hrl_topology_graph_stale") == 1.0
    assert sample(reg, "hrl_topology_graph_age_seconds") == 30.0
    assert len(published) == 1  # nothing new published

    clock.t += 30
    st = r.refresh_once()
    assert not st.stale and st.updated_at_s == 1060.0 and sample(reg, "hrl_topology_graph_stale") == 0.0
    assert len(published) == 1  # same graph again: not republished


def test_a_graph_not_refreshed_for_longer_than_stale_after_is_stale():
    clock = Clock()
    r = TopologyRefresher(None, [FakeSource("s", g(("a", "b", 1.0)))], refresh_s=10, clock=clock)
    r.refresh_once()
    clock.t += 30
    assert not r.status().stale
    clock.t += 1
    st = r.status()
    assert st.stale and "not refreshed for 31 s (> 30 s)" in st.reason
    never = TopologyRefresher(None, [FakeSource("s", g(("a", "b", 1.0)))], refresh_s=10, stale_after_s=0, clock=clock)
    never.refresh_once()
    clock.t += 10_000
    assert not never.status().stale


def test_a_source_that_never_succeeded_is_stale_with_no_graph_from_it():
    r = TopologyRefresher(g(("a", "b", None)), [FakeSource("s", TopologyError("s: query rejected"))])
    st = r.refresh_once()
    assert st.stale and "(no graph from it yet)" in st.reason and st.graph.edges == g(("a", "b", None)).edges
    assert st.updated_at_s is None


def test_a_bug_in_a_source_is_recorded_like_a_failure_and_refreshing_goes_on():
    r = TopologyRefresher(None, [FakeSource("s", RuntimeError("boom")), FakeSource("t", g(("a", "b", 1.0)))])
    st = r.refresh_once()
    assert st.stale and "RuntimeError: boom" in st.errors["s"] and st.graph.edge("a", "b").rps == 1.0


def test_fingerprint_changes_are_counted_when_the_edge_set_changes():
    reg = CollectorRegistry()
    src = FakeSource("s", g(("a", "b", 1.0)), g(("a", "b", 2.0)), g(("a", "b", 2.0), ("b", "c", 1.0)))
    r = TopologyRefresher(None, [src], metrics=TopologyMetrics(reg))
    for _ in range(3):
        r.refresh_once()
    # empty -> {a->b} (1), rate change (no), {a->b, b->c} (2)
    assert sample(reg, "hrl_topology_fingerprint_changes_total") == 2


def test_smoothing_applies_per_source_across_refreshes():
    clock = Clock(0)
    src = FakeSource("s", g(("a", "b", 10.0)), g(("a", "b", 20.0)))
    r = TopologyRefresher(None, [src], half_life_s=60, clock=clock)
    r.refresh_once()
    clock.t = 60
    assert r.refresh_once().graph.edge("a", "b").rps == pytest.approx(15.0)


def test_the_background_thread_refreshes_and_stop_closes_the_sources():
    src = FakeSource("s", g(("a", "b", 1.0)))
    r = TopologyRefresher(None, [src], refresh_s=0.05)
    with r:
        wait_until(lambda: src.calls >= 3, 5, what="three background refreshes")
    assert src.calls >= 3 and src.closed


def test_from_sources_reads_files_now_and_makes_uris_live_sources(tmp_path):
    r, warnings = TopologyRefresher.from_sources(
        ["tests/fixtures/online-boutique-manifests", "prometheus+istio://127.0.0.1:1?window=1m"], refresh_s=5
    )
    assert len(r.static.edges) == 16 and r.source_names == ["prometheus+istio://127.0.0.1:1"]
    assert any("SHOPPING_ASSISTANT" in w for w in warnings)
    with pytest.raises(ValueError, match="unknown scheme"):
        TopologyRefresher.from_sources(["prometheus+zipkin://p:1"])
    with pytest.raises(ValueError, match="names must differ"):
        TopologyRefresher(None, [FakeSource("s", g()), FakeSource("s", g())])


# ---- the extender --------------------------------------------------------------------------------------


def test_the_extender_configuration_accepts_live_sources_and_refresh_settings():
    cfg = load_extender_config(
        {
            "apiVersion": "hrl-scheduler.io/v1alpha1",
            "kind": "ExtenderConfiguration",
            "topology": {
                "sources": ["prometheus+linkerd://prom:9090?window=1m"],
                "refreshSeconds": 15,
                "smoothingHalfLifeSeconds": 120,
                "staleAfterSeconds": 60,
            },
        }
    )
    t = cfg.topology
    assert (t.refresh_seconds, t.smoothing_half_life_seconds, t.stale_after_seconds) == (15, 120, 60)
    with pytest.raises(ConfigError, match="topology.refreshSeconds"):
        load_extender_config(
            {
                "apiVersion": "hrl-scheduler.io/v1alpha1",
                "kind": "ExtenderConfiguration",
                "topology": {"refreshSeconds": 0},
            }
        )


def test_without_live_sources_there_is_no_refresher_and_an_unreachable_one_starts_stale():
    assert topology_refresher(load_extender_config(None)) == (None, [])
    cfg = load_extender_config(
        {
            "apiVersion": "hrl-scheduler.io/v1alpha1",
            "kind": "ExtenderConfiguration",
            "topology": {"sources": ["prometheus+istio://127.0.0.1:1?timeout=1s"]},
        }
    )
    r, _ = topology_refresher(cfg)
    try:
        assert r.status().stale and "cannot reach Prometheus" in r.status().reason
    finally:
        r.stop()


def test_readyz_stays_ready_on_a_stale_graph_and_says_so_and_metrics_show_it():
    clock = Clock()
    store = SnapshotStore(clock=clock)
    from policy.state import ClusterSnapshot

    store.update(ClusterSnapshot(nodes=(), pods=(), pdbs=(), workloads=(), graph=ServiceGraph()))
    src = FakeSource(
        "prometheus+istio://p:9090",
        g(("a", "b", 1.0)),
        SourceUnavailable("prometheus+istio://p:9090: cannot reach Prometheus: refused"),
    )
    r = TopologyRefresher(None, [src], clock=clock, on_update=store.set_graph)
    cfg = load_extender_config(None)
    r.refresh_once()
    assert readiness(store, cfg, topology=r) == (True, "ok")
    assert store.get().graph.edge("a", "b") is not None
    clock.t += 42
    r.refresh_once()
    ok, reason = readiness(store, cfg, topology=r)
    assert ok and reason.startswith(
        "ok (warning: call graph stale, age 42 s: prometheus+istio://p:9090: cannot "
        "reach Prometheus: refused (keeping its graph from 42 s ago)"
    )
    app = make_app(cfg, store, TopologyHeuristic(), CollectorRegistry(), topology=r)

    async def get(path: str) -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://x.test") as c:
            return await c.get(path)

    resp = asyncio.run(get("/readyz"))
    assert resp.status_code == 200 and "call graph stale" in resp.text
    text = asyncio.run(get("/metrics")).text
    assert "hrl_topology_graph_stale 1.0" in text
    assert 'hrl_topology_source_errors_total{source="prometheus+istio://p:9090"} 1.0' in text
    assert "hrl_topology_graph_age_seconds 42.0" in text
