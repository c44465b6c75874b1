"""descheduler.leader: Lease-based leader election (client-go's algorithm), driven step by step with a fake
Lease store and fake clocks (no sleeping, no timed assertions)."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from descheduler.config import load_descheduler_config
from descheduler.evict import DryRunEvictor
from descheduler.leader import (
    LeaderElector,
    LeaderGatedEvictor,
    LeaseConflict,
    LeaseError,
    LeaseRecord,
    lead,
    micro_time,
)
from policy.config import ConfigError
from policy.state import PodInfo, Resources


class FakeLease:
    """One Lease with the API server's optimistic concurrency: create fails if it exists, update fails
    unless the resourceVersion matches; every write bumps the version."""

    def __init__(self):
        self.record: LeaseRecord | None = None
        self.version = 0
        self.fail_next: list[Exception] = []
        self.writes = 0

    def _maybe_fail(self):
        if self.fail_next:
            raise self.fail_next.pop(0)

    def get(self):
        self._maybe_fail()
        return self.record

    def create(self, record):
        self._maybe_fail()
        if self.record is not None:
            raise LeaseConflict("already exists")
        return self._store(record)

    def update(self, record):
        self._maybe_fail()
        if self.record is None or record.resource_version != self.record.resource_version:
            raise LeaseConflict("resourceVersion mismatch")
        return self._store(record)

    def _store(self, record):
        self.version += 1
        self.writes += 1
        self.record = replace(record, resource_version=str(self.version))
        return self.record


class Clock:
    def __init__(self, t=1000.0):
        self.t = t

    def __call__(self):
        return self.t


def elector(lease, name, clock, **kw):
    return LeaderElector(lease, name, clock=clock, wall=lambda: 1.7e9 + clock.t, **kw)


def test_the_first_candidate_creates_the_lease_and_leads():
    lease, clock = FakeLease(), Clock()
    a = elector(lease, "a", clock)
    assert a.try_acquire_or_renew() is True
    assert a.is_leader()
    assert lease.record.holder == "a" and lease.record.lease_duration_s == 15 and lease.record.transitions == 0


def test_a_second_candidate_waits_while_the_lease_is_renewed():
    lease, clock = FakeLease(), Clock()
    a, b = elector(lease, "a", clock), elector(lease, "b", clock)
    assert a.try_acquire_or_renew()
    for _ in range(20):  # 40 s of renewals every 2 s: b never sees the same record for 15 s
        clock.t += 2
        assert a.try_acquire_or_renew()
        assert b.try_acquire_or_renew() is False
        assert not b.is_leader() and b.leader == "a"


def test_a_standby_takes_over_only_after_seeing_the_same_record_for_a_whole_lease_duration():
    lease, clock = FakeLease(), Clock()
    a, b = elector(lease, "a", clock), elector(lease, "b", clock)
    a.try_acquire_or_renew()
    clock.t += 1
    assert b.try_acquire_or_renew() is False  # first sight of a's record at t=1001
    clock.t += 14.9
    assert b.try_acquire_or_renew() is False  # 14.9 s < 15 s since b first saw it
    clock.t += 0.2
    assert b.try_acquire_or_renew() is True
    assert lease.record.holder == "b" and lease.record.transitions == 1
    assert a.is_leader() is False  # a's renewals stopped 16 s ago, beyond its renewDeadline


def test_the_leader_stops_counting_itself_leader_after_the_renew_deadline_without_a_renewal():
    lease, clock = FakeLease(), Clock()
    a = elector(lease, "a", clock)
    a.try_acquire_or_renew()
    lease.fail_next = [LeaseError("apiserver down")] * 10
    clock.t += 9.9
    assert a.try_acquire_or_renew() is False
    assert a.is_leader()  # still inside renewDeadline: nobody can have taken over
    clock.t += 0.2
    assert a.is_leader() is False


def test_of_two_candidates_racing_for_a_released_lease_only_one_wins_and_the_other_gets_a_conflict():
    lease, clock = FakeLease(), Clock()
    a, b, c = elector(lease, "a", clock), elector(lease, "b", clock), elector(lease, "c", clock)
    a.try_acquire_or_renew()
    a.release()
    real_get, raced = lease.get, []

    def get_then_c_writes():
        rec = real_get()
        if not raced:  # c's write lands between b's read and b's write
            raced.append(True)
            assert c.try_acquire_or_renew()
        return rec

    lease.get = get_then_c_writes
    assert b.try_acquire_or_renew() is False  # the update carried a stale resourceVersion: 409
    assert lease.record.holder == "c" and not b.is_leader() and c.is_leader()


def test_release_lets_a_standby_take_over_at_its_next_retry():
    lease, clock = FakeLease(), Clock()
    a, b = elector(lease, "a", clock), elector(lease, "b", clock)
    a.try_acquire_or_renew()
    assert b.try_acquire_or_renew() is False
    assert a.release() is True
    assert lease.record.holder == "" and lease.record.lease_duration_s == 1
    assert a.is_leader() is False
    assert b.try_acquire_or_renew() is True
    assert lease.record.holder == "b" and lease.record.transitions == 1


def test_release_by_a_non_holder_changes_nothing():
    lease, clock = FakeLease(), Clock()
    a, b = elector(lease, "a", clock), elector(lease, "b", clock)
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    writes = lease.writes
    assert b.release() is False
    assert lease.writes == writes and lease.record.holder == "a"


def test_renewal_keeps_the_acquire_time_and_moves_the_renew_time():
    lease, clock = FakeLease(), Clock()
    a = elector(lease, "a", clock)
    a.try_acquire_or_renew()
    first = lease.record
    clock.t += 2.5
    a.try_acquire_or_renew()
    assert lease.record.acquire_time == first.acquire_time
    assert lease.record.renew_time == micro_time(1.7e9 + clock.t) != first.renew_time
    assert lease.record.transitions == 0


def test_micro_time_always_has_six_fractional_digits():
    assert micro_time(0) == "1970-01-01T00:00:00.000000Z"
    assert micro_time(1.5) == "1970-01-01T00:00:01.500000Z"


@pytest.mark.parametrize(
    "kw,field",
    [
        ({"lease_duration_s": 10, "renew_deadline_s": 10}, "leaseDurationSeconds"),
        ({"renew_deadline_s": 2.4, "retry_period_s": 2}, "renewDeadlineSeconds"),
        ({"retry_period_s": 0}, "retryPeriodSeconds"),
    ],
)
def test_impossible_timings_are_refused_with_the_field_named(kw, field):
    with pytest.raises(ValueError, match=f"^{field}: "):
        LeaderElector(FakeLease(), "a", **kw)


def test_the_configuration_checks_the_same_timing_rules():
    head = {"apiVersion": "hrl-scheduler.io/v1alpha1", "kind": "DeschedulerConfiguration"}
    with pytest.raises(ConfigError, match=r"leaderElection: .*renewDeadlineSeconds \(3\) must be > 1.2 x"):
        load_descheduler_config({**head, "leaderElection": {"renewDeadlineSeconds": 3, "retryPeriodSeconds": 3}})
    with pytest.raises(ConfigError, match=r"leaderElection.leaseName: "):
        load_descheduler_config({**head, "leaderElection": {"leaseName": "Not_A_Name"}})
    le = load_descheduler_config(None).leader_election
    assert (
        le.enabled,
        le.lease_name,
        le.lease_duration_seconds,
        le.renew_deadline_seconds,
        le.retry_period_seconds,
    ) == (True, "hrl-descheduler", 15, 10, 2)


POD = PodInfo(name="p", namespace="ns", service="svc", requests=Resources(100, 1 << 20), node_name="n1")


def test_the_gated_evictor_evicts_only_while_leading():
    lease, clock = FakeLease(), Clock()
    a = elector(lease, "a", clock)
    inner = DryRunEvictor()
    gated = LeaderGatedEvictor(inner, a)
    res = gated.evict(POD, "why")
    assert res.outcome == "error" and "does not hold the leader-election lease" in res.message
    assert inner.calls == []
    a.try_acquire_or_renew()
    assert gated.evict(POD, "why").outcome == "dry_run"
    clock.t += 11  # no renewal for longer than renewDeadline
    assert gated.evict(POD, "why").outcome == "error"
    assert len(inner.calls) == 1


def test_lead_runs_the_work_while_leading_and_releases_the_lease_when_stopped():
    lease = FakeLease()
    a = LeaderElector(lease, "a", lease_duration_s=15, renew_deadline_s=10, retry_period_s=2)
    stop = threading.Event()
    seen = []

    def work(over):
        seen.append((a.is_leader(), lease.record.holder))
        stop.set()  # e.g. SIGTERM arrives while working
        assert over.wait(10), "the renewer did not relay stop"

    assert lead(a, work, stop) == "stopped"
    assert seen == [(True, "a")]
    assert lease.record.holder == ""  # released on the way out


def test_lead_does_not_run_the_work_when_stopped_before_acquiring():
    lease = FakeLease()
    lease.record = LeaseRecord("someone-else", 15, resource_version="7")
    a = LeaderElector(lease, "a")
    stop = threading.Event()
    stop.set()
    assert lead(a, lambda over: pytest.fail("must not run"), stop) == "stopped"
    assert lease.record.holder == "someone-else"
