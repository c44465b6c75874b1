"""The list + watch code the extender and the descheduler share (policy/kube.py): :class:`Reflector`'s hooks
(change callback, JSON decoder, which parse errors leave an object out, logger), events of an unknown type, and
:class:`ReflectorGroup` (threads, stop, counters), against a small fake of one ``kubernetes`` list method.
The extender's source on top of it: tests/unit/test_extender_kube.py; the real API server:
tests/integration/test_controlplane_basics.py and test_controlplane_descheduler_scale.py."""

from __future__ import annotations

import json
import logging
import time

import pytest
from test_extender_kube import ListResponse, WatchResponse  # the API server's list and watch responses, faked
from waiting import wait_until

from extender.kube import KubeSnapshotSource
from extender.store import SnapshotStore
from policy.kube import Gone, Reflector, ReflectorGroup
from policy.observe import ObjectError


def obj(name, rv="1"):
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}}


class FakeList:
    """One list method (``list_node``-like): hands out ``script`` in order, the last item repeated (a watch
    the server ends is re-opened until the deadline, so scripts end with an empty one)."""

    def __init__(self, *script):
        self.script = list(script)
        self.calls = []

    def __call__(self, **kw):
        self.calls.append(kw)
        item = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(item, Exception):
            raise item
        return item


def name_of(o):
    return o["metadata"]["name"]


def test_on_change_runs_after_the_list_and_every_event_but_not_a_bookmark():
    events = [
        {"type": "ADDED", "object": obj("b", "8")},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}},
        {"type": "DELETED", "object": obj("a", "10")},
    ]
    calls = []
    r = Reflector("Thing", FakeList(ListResponse([obj("a")], "7"), WatchResponse(events), WatchResponse([])), name_of)
    r.on_change = lambda: calls.append(sorted(r.items))
    r.list()
    r.watch(time.monotonic() + 0.2)
    assert calls == [["ns/a"], ["ns/a", "ns/b"], ["ns/b"]]
    assert r.resource_version == "10" and r.events == 2


def test_an_event_that_changes_nothing_the_consumer_reads_is_stored_without_calling_on_change():
    def parse(o):
        return (name_of(o), o.get("spec", {}).get("node"), o["metadata"]["resourceVersion"])

    def with_node(name, rv, node=None):
        return {**obj(name, rv), "spec": {"node": node} if node else {}}

    events = [
        {"type": "MODIFIED", "object": with_node("a", "8")},  # only the resourceVersion moved: stored, no callback
        {"type": "MODIFIED", "object": with_node("a", "9", "n1")},  # what the consumer reads changed
        {"type": "ADDED", "object": with_node("b", "10")},
        {"type": "DELETED", "object": with_node("b", "11")},
    ]
    calls = []
    fake = FakeList(ListResponse([with_node("a", "7")], "7"), WatchResponse(events), WatchResponse([]))
    r = Reflector("Thing", fake, parse, reads=lambda v: v[:2])
    r.on_change = lambda: calls.append(dict(r.items))
    r.list()
    r.watch(time.monotonic() + 0.2)
    assert [c.get("ns/a") for c in calls] == [("a", None, "7"), ("a", "n1", "9"), ("a", "n1", "9"), ("a", "n1", "9")]
    assert r.events == 4 and r.unchanged == 1 and r.resource_version == "11"
    assert r.items == {"ns/a": ("a", "n1", "9")}


def test_the_decoder_given_reads_every_list_page_and_watch_line():
    seen = []

    def loads(data):
        seen.append(data)
        return json.loads(data)

    fake = FakeList(
        ListResponse([obj("a")], "5", cont="p2"),
        ListResponse([obj("b")], "7"),
        WatchResponse([{"type": "ADDED", "object": obj("c", "8")}]),
        WatchResponse([]),
    )
    r = Reflector("Thing", fake, name_of, loads=loads)
    r.list()
    r.watch(time.monotonic() + 0.2)
    assert sorted(r.items) == ["ns/a", "ns/b", "ns/c"]
    assert len(seen) == 3  # two list pages, one watch line


def test_only_the_rejected_exceptions_leave_an_object_out_anything_else_fails_the_list():
    def parse(o):
        if name_of(o) == "bad-object":
            raise ObjectError("ns/bad-object: spec.x: not a number (got 'y')")
        if name_of(o) == "bug":
            raise ValueError("a parser bug, not a bad object")
        return name_of(o)

    strict = Reflector("Thing", FakeList(ListResponse([obj("ok"), obj("bad-object")], "7")), parse)
    strict.list()
    assert list(strict.items) == ["ns/ok"]

    only_objects = Reflector("Thing", FakeList(ListResponse([obj("ok"), obj("bug")], "7")), parse, rejected=ObjectError)
    with pytest.raises(ValueError, match="parser bug"):
        only_objects.list()
    assert only_objects.items == {} and not only_objects.synced  # nothing half-applied

    default = Reflector("Thing", FakeList(ListResponse([obj("ok"), obj("bug")], "7")), parse)
    default.list()
    assert list(default.items) == ["ns/ok"]


def test_a_left_out_object_is_logged_once_on_the_logger_given(caplog):
    mine = logging.getLogger("tests.reflector")

    def parse(o):
        raise ValueError(f"{name_of(o)}: refused")

    modified = WatchResponse([{"type": "MODIFIED", "object": obj("x", "8")}])
    fake = FakeList(ListResponse([obj("x")], "7"), modified, WatchResponse([]))
    r = Reflector("Thing", fake, parse, logger=mine)
    with caplog.at_level(logging.WARNING):
        r.list()
        r.watch(time.monotonic() + 0.2)
    lines = [(rec.name, rec.getMessage()) for rec in caplog.records]
    assert lines == [("tests.reflector", "watch Thing: ignoring ns/x: x: refused")]


def test_an_event_of_an_unknown_type_is_counted_and_changes_nothing():
    events = [{"type": "SOMETHING-NEW", "object": obj("a", "12")}]
    r = Reflector("Thing", FakeList(ListResponse([obj("a")], "7"), WatchResponse(events), WatchResponse([])), name_of)
    r.list()
    r.watch(time.monotonic() + 0.2)
    assert list(r.items) == ["ns/a"] and r.events == 1 and r.resource_version == "7"


def test_a_410_in_a_watch_is_gone():
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old resource version"}}
    r = Reflector("Thing", FakeList(ListResponse([], "7"), WatchResponse([gone])), name_of)
    r.list()
    with pytest.raises(Gone, match="too old"):
        r.watch(time.monotonic() + 1)


class Group(ReflectorGroup):
    thread_prefix = "test-group"

    def __init__(self, **fakes):
        super().__init__()
        for kind, fake in fakes.items():
            self.add(kind, fake, name_of)


def test_a_group_runs_one_named_thread_per_reflector_and_stops_them_all_at_once():
    held = {k: FakeList(ListResponse([obj(k.lower())], "3"), WatchResponse([], hold=True)) for k in ("Alpha", "Beta")}
    g = Group(**held)
    assert not g.synced and not g.healthy
    with g:
        assert {t.name for t in g._threads} == {"test-group:watch-Alpha", "test-group:watch-Beta"}
        with pytest.raises(RuntimeError, match="Group already started"):
            g.start()
        wait_until(lambda: g.synced and g.healthy, 5, what="both reflectors to list and watch")
        assert g.reflectors["Alpha"].lock is g.lock and g.reflectors["Beta"].stop_event is g.stop_event
        assert g.stats() == {
            "alpha_lists": 1,
            "alpha_events": 0,
            "alpha_unchanged": 0,
            "alpha_errors": 0,
            "beta_lists": 1,
            "beta_events": 0,
            "beta_unchanged": 0,
            "beta_errors": 0,
        }
        t0 = time.monotonic()
    assert time.monotonic() - t0 < 3 and g._threads == []  # the held watches were interrupted
    assert not g.healthy


def test_the_extenders_source_keeps_its_thread_names_and_logs_on_its_own_logger(caplog):
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old resource version"}}

    class Core:
        list_node = FakeList(ListResponse([], "1"), WatchResponse([], hold=True))
        list_pod_for_all_namespaces = FakeList(
            ListResponse([], "7"), WatchResponse([gone]), ListResponse([], "9"), WatchResponse([], hold=True)
        )

    src = KubeSnapshotSource(SnapshotStore(), core=Core(), debounce_s=0.0)
    with caplog.at_level(logging.INFO, logger="extender.kube"), src:
        assert sorted(t.name for t in src._threads) == [
            "hrl-extender:snapshot-builder",
            "hrl-extender:watch-nodes",
            "hrl-extender:watch-pods",
        ]
        wait_until(lambda: src.pods.lists >= 2, 5, what="the pod reflector to list again after the 410")
    assert src._threads == []
    relist = [r for r in caplog.records if "listing again" in r.getMessage()]
    assert [(r.name, r.levelname, r.getMessage()) for r in relist] == [
        ("extender.kube", "INFO", "watch Pod: too old resource version; listing again")
    ]


def test_stopping_the_extenders_source_wakes_its_idle_builder():
    class Core:
        list_node = FakeList(ListResponse([], "1"), WatchResponse([], hold=True))
        list_pod_for_all_namespaces = FakeList(ListResponse([], "7"), WatchResponse([], hold=True))

    # idle and healthy, the builder waits touch_interval_s for a change: stop() must not wait that long
    src = KubeSnapshotSource(SnapshotStore(), core=Core(), debounce_s=0.0, touch_interval_s=60.0).start()
    try:
        assert src.wait_synced(5)
        wait_until(lambda: not src._dirty.is_set(), 5, what="the builder to take the last change")
        # past the throttle after the last build (twice its duration), the builder waits for a change
        wait_until(
            lambda: src.store.clock() - src.store.get().updated_at_s > 3 * src.last_build_s + 0.05,
            5,
            what="the builder to be idle",
        )
    finally:
        t0 = time.monotonic()
        src.stop(timeout_s=10)
    assert src._threads == [] and time.monotonic() - t0 < 3
