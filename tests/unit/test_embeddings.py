"""The embedding cache in process: fingerprints, the in-memory cache, and the background copy."""

from __future__ import annotations

import numpy as np
import pytest
from prometheus_client import CollectorRegistry
from waiting import wait_until

from policy.cache import (
    CacheClientMetrics,
    CacheMetrics,
    CacheRefresher,
    CacheUnavailable,
    EmbeddingEntry,
    InMemoryEmbeddingCache,
    IntentEntry,
    fingerprint,
)
from policy.state import ServiceEdge, ServiceGraph

BASE = ServiceGraph.build(
    ["a", "b", "c", "d"],
    [
        ServiceEdge("a", "b", rps=10.0, calls_per_request=1.0),
        ServiceEdge("b", "c", rps=5.0, latency_p95_ms=3.0),
        ServiceEdge("a", "c", rps=1.0),
    ],
)


def graph(services=("a", "b", "c", "d"), edges=(("a", "b", 10.0), ("b", "c", 5.0), ("a", "c", 1.0))) -> ServiceGraph:
    return ServiceGraph.build(services, [ServiceEdge(x, y, rps=r) for x, y, r in edges])


SAME = [
    ("the same graph built again", graph()),
    ("edges listed in another order", graph(edges=(("a", "c", 1.0), ("b", "c", 5.0), ("a", "b", 10.0)))),
    ("services listed in another order", graph(services=("d", "c", "b", "a"))),
    ("other call rates", graph(edges=(("a", "b", 99.0), ("b", "c", 0.1), ("a", "c", 7.0)))),
    ("unknown rates", graph(edges=(("a", "b", None), ("b", "c", None), ("a", "c", None)))),
    (
        "latencies, multiplicities, errors and parallel flags",
        ServiceGraph.build(
            ["a", "b", "c", "d"],
            [
                ServiceEdge("a", "b", 1.0, 3.0, latency_p95_ms=10.0, error_rate=0.5, parallel=True),
                ServiceEdge("b", "c"),
                ServiceEdge("a", "c"),
            ],
            source="other",
        ),
    ),
]

DIFFERENT = [
    ("an added edge", graph(edges=(("a", "b", 10.0), ("b", "c", 5.0), ("a", "c", 1.0), ("c", "d", 1.0)))),
    ("a removed edge", graph(edges=(("a", "b", 10.0), ("b", "c", 5.0)))),
    ("a reversed edge", graph(edges=(("a", "b", 10.0), ("c", "b", 5.0), ("a", "c", 1.0)))),
    ("an edge moved to another callee", graph(edges=(("a", "b", 10.0), ("b", "d", 5.0), ("a", "c", 1.0)))),
    ("a self-call added", graph(edges=(("a", "b", 10.0), ("b", "c", 5.0), ("a", "c", 1.0), ("b", "b", 1.0)))),
    ("an added service without edges", graph(services=("a", "b", "c", "d", "e"))),
    ("a removed service without edges", graph(services=("a", "b", "c"))),
    ("a renamed service", graph(services=("a", "b", "c", "x"))),
]


@pytest.mark.parametrize("what,g", SAME, ids=[w for w, _ in SAME])
def test_the_fingerprint_stays_the_same_for(what, g):
    assert fingerprint(g) == fingerprint(BASE)


@pytest.mark.parametrize("what,g", DIFFERENT, ids=[w for w, _ in DIFFERENT])
def test_the_fingerprint_changes_for(what, g):
    assert fingerprint(g) != fingerprint(BASE)


def test_fingerprints_are_32_hex_digits_and_distinct_across_all_variants():
    fps = {fingerprint(g) for _, g in DIFFERENT} | {fingerprint(BASE)}
    assert len(fps) == len(DIFFERENT) + 1
    assert all(len(f) == 32 and int(f, 16) >= 0 for f in fps)
    # names that would collide if joined without separators stay distinct
    assert fingerprint(graph(services=("ab", "c"), edges=())) != fingerprint(graph(services=("a", "bc"), edges=()))


def matrix(n: int, d: int = 4, v: float = 1.0) -> np.ndarray:
    return np.full((n, d), v, np.float32) + np.arange(n, dtype=np.float32)[:, None]


def test_put_then_get_returns_the_rows_with_a_version_and_timestamps():
    t = [1000.0]
    c = InMemoryEmbeddingCache(clock=lambda: t[0])
    e = c.put("fp1", ["a", "b"], matrix(2), encoder_version="enc-1", timestamp_s=900.0)
    assert (e.version, e.timestamp_s, e.stored_at_s, e.encoder_version) == (1, 900.0, 1000.0, "enc-1")
    got = c.get("fp1").entry
    assert isinstance(got, EmbeddingEntry)
    assert got.services == ("a", "b") and got.dim == 4
    np.testing.assert_array_equal(got.row("b"), matrix(2)[1])
    assert got.row("zzz") is None
    assert got.age_s(1000.0) == 100.0
    with pytest.raises(ValueError):
        got.matrix[0, 0] = 5.0  # read-only


def test_a_timestamp_of_zero_means_now():
    c = InMemoryEmbeddingCache(clock=lambda: 42.0)
    assert c.put("fp", ["a"], matrix(1)).timestamp_s == 42.0
    assert c.put_intent([1.0]).timestamp_s == 42.0


def test_an_empty_fingerprint_reads_the_latest_entry_and_unknown_ones_miss():
    c = InMemoryEmbeddingCache()
    assert not c.get().found
    c.put("fp1", ["a"], matrix(1))
    c.put("fp2", ["b"], matrix(1))
    assert c.get().entry.fingerprint == "fp2"
    assert c.get("fp1").entry.fingerprint == "fp1"
    assert c.get("nope").entry is None and not c.get("nope").found


def test_a_known_version_answers_not_modified_and_a_new_put_bumps_the_version():
    c = InMemoryEmbeddingCache()
    v1 = c.put("fp", ["a"], matrix(1)).version
    r = c.get("fp", known_version=v1)
    assert r.not_modified and r.entry is None and r.found
    v2 = c.put("fp", ["a"], matrix(1, v=2.0)).version
    assert v2 > v1
    r = c.get("fp", known_version=v1)
    assert not r.not_modified and r.entry.version == v2


def test_the_oldest_fingerprints_are_dropped_beyond_max_entries():
    c = InMemoryEmbeddingCache(max_entries=2)
    for fp in ("f1", "f2", "f3"):
        c.put(fp, ["a"], matrix(1))
    assert c.fingerprints() == ["f2", "f3"] and len(c) == 2
    c.put("f2", ["a"], matrix(1))  # re-put refreshes its place
    c.put("f4", ["a"], matrix(1))
    assert c.fingerprints() == ["f2", "f4"]


@pytest.mark.parametrize(
    "fp,services,m,needle",
    [
        ("", ["a"], matrix(1), "fingerprint"),
        ("has space", ["a"], matrix(1), "fingerprint"),
        ("fp", ["a", "a"], matrix(2), "services[1]: 'a' appears twice"),
        ("fp", ["a", ""], matrix(2), "services[1]: expected a non-empty name"),
        ("fp", ["a", "b"], matrix(3), "expected a (2, D) matrix for 2 services"),
        ("fp", ["a"], np.full((1, 2), np.nan), "NaN or infinity"),
        ("fp", ["a"], np.zeros((1, 0)), "width D must be"),
        ("fp", ["a"], np.array([["x"]]), "expected numbers"),
    ],
)
def test_invalid_puts_are_refused_and_change_nothing(fp, services, m, needle):
    c = InMemoryEmbeddingCache()
    with pytest.raises(ValueError) as e:
        c.put(fp, services, m)
    assert needle in str(e.value)
    assert len(c) == 0 and not c.get().found


def test_the_intent_round_trips_and_rejects_bad_values():
    c = InMemoryEmbeddingCache()
    assert not c.get_intent().found
    it = c.put_intent([2.0, 0.5], ["locality_weight", "balance_weight"], source="hrl-descheduler", timestamp_s=5.0)
    got = c.get_intent().entry
    assert isinstance(got, IntentEntry)
    assert got == it and got.values == (2.0, 0.5) and got.source == "hrl-descheduler"
    assert c.get_intent(known_version=it.version).not_modified
    for bad, needle in (([float("nan")], "finite"), (["x"], "expected a number"), ([1.0, 2.0], "names")):
        with pytest.raises(ValueError, match=needle):
            c.put_intent(bad, ["only-one"] if needle == "names" else ())
    assert c.get_intent().entry == it


def test_metrics_count_hits_misses_puts_entries_and_fingerprint_changes():
    reg = CollectorRegistry()
    c = InMemoryEmbeddingCache(metrics=CacheMetrics(reg))
    c.get("x")
    e = c.put("f1", ["a"], matrix(1))
    c.get("f1")
    c.get("f1", known_version=e.version)
    c.put("f1", ["a"], matrix(1))
    c.put("f2", ["a"], matrix(1))
    c.put("f1", ["a"], matrix(1))

    def v(name, **labels):
        return reg.get_sample_value(name, labels)

    assert v("hrl_cache_lookups_total", kind="embeddings", result="miss") == 1
    assert v("hrl_cache_lookups_total", kind="embeddings", result="hit") == 1
    assert v("hrl_cache_lookups_total", kind="embeddings", result="not_modified") == 1
    assert v("hrl_cache_puts_total", kind="embeddings") == 4
    assert v("hrl_cache_fingerprint_changes_total") == 2
    assert v("hrl_cache_entries") == 2


class FlakyCache(InMemoryEmbeddingCache):
    """The in-memory cache, made unreachable on demand (the slice of a gRPC client the refresher uses)."""

    down = False

    def get(self, fingerprint="", known_version=0):
        if self.down:
            raise CacheUnavailable("cache test: UNAVAILABLE")
        return super().get(fingerprint, known_version)

    def get_intent(self, known_version=0):
        if self.down:
            raise CacheUnavailable("cache test: UNAVAILABLE")
        return super().get_intent(known_version)


def test_the_refresher_copies_new_entries_once_and_keeps_its_copy_while_the_cache_is_down():
    now = [1000.0]
    cache = FlakyCache(clock=lambda: now[0])
    seen = []
    reg = CollectorRegistry()
    r = CacheRefresher(
        cache, 1.0, lambda: "fp", on_embeddings=seen.append, metrics=CacheClientMetrics(reg), clock=lambda: now[0]
    )
    assert r.refresh_once() == {"embeddings": "missing", "intent": "missing"}
    cache.put("fp", ["a"], matrix(1))
    assert r.refresh_once()["embeddings"] == "ok"
    assert r.refresh_once()["embeddings"] == "not_modified"
    assert len(seen) == 1
    cache.down = True
    assert r.refresh_once() == {"embeddings": "error", "intent": "error"}
    assert r.embeddings is seen[0]  # the copy stays
    assert reg.get_sample_value("hrl_cache_refresh_total", {"kind": "embeddings", "outcome": "error"}) == 1
    now[0] += 30
    assert reg.get_sample_value("hrl_cache_copy_age_seconds", {"kind": "embeddings"}) == 30.0
    cache.down = False
    assert r.refresh_once()["embeddings"] == "not_modified"


def test_the_refresher_follows_the_fingerprint_it_is_given():
    cache = InMemoryEmbeddingCache()
    cache.put("f1", ["a"], matrix(1))
    cache.put("f2", ["b"], matrix(1))
    fp = ["f1"]
    r = CacheRefresher(cache, 1.0, lambda: fp[0])
    r.refresh_once()
    assert r.embeddings.fingerprint == "f1"
    fp[0] = "f2"
    r.refresh_once()
    assert r.embeddings.fingerprint == "f2"


def test_an_intent_older_than_max_age_is_dropped_even_while_the_cache_is_down():
    now = [100.0]
    cache = FlakyCache(clock=lambda: now[0])
    got = []
    r = CacheRefresher(cache, 1.0, on_intent=got.append, max_age_s=60.0, clock=lambda: now[0])
    cache.put_intent([3.0, 1.0], timestamp_s=100.0)
    r.refresh_once()
    assert got[-1].values == (3.0, 1.0)
    cache.down = True
    now[0] = 150.0
    r.refresh_once()
    assert r.intent is not None
    now[0] = 161.0
    r.refresh_once()
    assert r.intent is None and got[-1] is None


def test_the_refresher_thread_starts_and_stops():
    cache = InMemoryEmbeddingCache()
    cache.put("fp", ["a"], matrix(1))
    r = CacheRefresher(cache, 0.05).start()
    try:
        wait_until(lambda: r.embeddings is not None, 5, what="the refresher thread to copy the embeddings")
        assert r.embeddings is not None
    finally:
        r.stop()
    with pytest.raises(ValueError):
        CacheRefresher(cache, 0.0)
