"""The learned high level's per-service co-location priorities travel from the descheduler's intent record
(policy.intent.Intent.to_wire) through the embedding cache into the extender's store (extender/cache.py)."""

import pytest
from waiting import wait_until

from extender.cache import start_cache_link
from extender.config import CacheConfig
from extender.store import SnapshotStore
from policy.cache import InMemoryEmbeddingCache
from policy.intent import Intent


def test_the_extender_reads_the_intent_and_its_colocation_priorities_from_the_cache():
    cache = InMemoryEmbeddingCache()
    names, values = Intent((1.5, 0.5), colocation_priority={"cart": 0.0, "frontend": 3.0}).to_wire()
    cache.put_intent(values, names, source="hrl-descheduler")
    store = SnapshotStore()
    link = start_cache_link(CacheConfig(address="127.0.0.1:1", refresh_seconds=0.05), store, client=cache)
    try:
        wait_until(lambda: store.get().intent is not None, timeout_s=10)
        view = store.get()
        assert view.intent == (1.5, 0.5)  # the vector, without the priorities appended
        assert dict(view.colocation) == {"cart": 0.0, "frontend": 3.0}
    finally:
        link.stop()


def test_a_bad_priority_is_refused_whole_where_the_intent_enters_and_the_store_keeps_the_last_one():
    cache = InMemoryEmbeddingCache()
    names, values = Intent((1.0, 1.0), colocation_priority={"a": 2.0}).to_wire()
    cache.put_intent(values, names, source="hrl-descheduler")
    store = SnapshotStore()
    link = start_cache_link(CacheConfig(address="127.0.0.1:1", refresh_seconds=0.05), store, client=cache)
    try:
        wait_until(lambda: store.get().intent is not None, timeout_s=10)
        with pytest.raises(ValueError, match=r"intent.colocation_priority\['b'\]: expected a number >= 0, got -1"):
            Intent.from_wire(["locality_weight", "colocation_priority/b"], [2.0, -1.0])
        cache.put_intent([2.0, -1.0], ["locality_weight", "colocation_priority/b"], source="bad")
        wait_until(lambda: link.intent is not None and link.intent.source == "bad", timeout_s=10)
        assert store.get().intent == (1.0, 1.0) and dict(store.get().colocation) == {"a": 2.0}
    finally:
        link.stop()
    with pytest.raises(TypeError, match="intent: expected a policy.intent.Intent or None, got tuple"):
        store.set_intent((2.0, 1.0))
