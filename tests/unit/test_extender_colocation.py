"""The learned high level's per-service co-location priorities travel from the descheduler's intent record
(policy.lowlevel.encode_intent) through the embedding cache into the extender's store (extender/cache.py)."""

import pytest
from waiting import wait_until

from extender.cache import start_cache_link
from extender.config import CacheConfig
from extender.store import SnapshotStore
from policy.cache import InMemoryEmbeddingCache
from policy.lowlevel import encode_intent


def test_the_extender_reads_the_intent_and_its_colocation_priorities_from_the_cache():
    cache = InMemoryEmbeddingCache()
    names, values = encode_intent((1.5, 0.5), {"cart": 0.0, "frontend": 3.0})
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


def test_a_bad_priority_is_refused_by_the_store_and_nothing_changes():
    store = SnapshotStore()
    store.set_intent((1.0, 1.0), colocation={"a": 2.0})
    with pytest.raises(ValueError, match=r"colocation\['b'\]: expected a finite number >= 0, got -1"):
        store.set_intent((2.0, 1.0), colocation={"b": -1})
    assert store.get().intent == (1.0, 1.0) and dict(store.get().colocation) == {"a": 2.0}
