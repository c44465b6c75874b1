"""Every eviction guard: a pod only that guard blocks, and the same pod passing without it."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from descheduler.config import DeschedulerConfiguration, load_descheduler_config
from descheduler.guards import (
    GUARD_NAMES,
    GUARDS,
    CycleLedger,
    EvictionHistory,
    GuardContext,
    HistoryError,
    PdbView,
    check_guards,
    eviction_blockers,
    pdb_budget,
    workload_key,
)
from descheduler.reread import OwnerInfo
from policy.lowlevel import TopologyHeuristic
from policy.state import (
    ClusterSnapshot,
    LabelSelector,
    NodeInfo,
    OwnerRef,
    PodDisruptionBudgetInfo,
    PodInfo,
    Resources,
    Taint,
    frozen_map,
)

GI = 1024**3
NOW_S = 1_000_000.0


def node(name: str, cpu_m: int = 4000, **kw) -> NodeInfo:
    return NodeInfo(name, Resources(cpu_m, 16 * GI), **kw)


def pod(
    name: str = "api-5d8f6c7b9c-abcde",
    node_name: str | None = "n1",
    ns: str = "shop",
    cpu_m: int = 500,
    owner: OwnerRef | None = OwnerRef("ReplicaSet", "api-5d8f6c7b9c"),
    **kw,
) -> PodInfo:
    labels = kw.pop("labels", {"app": "api"})
    return PodInfo(
        name=name,
        namespace=ns,
        service=labels.get("app", name),
        requests=Resources(cpu_m, GI),
        node_name=node_name,
        phase="Running",
        owner=owner,
        labels=frozen_map(labels),
        **{"ready": True, **kw},
    )


def base_snapshot(*extra_pods: PodInfo, pdbs=(), nodes=None) -> ClusterSnapshot:
    return ClusterSnapshot(nodes=tuple(nodes or (node("n1"), node("n2"))), pods=tuple(extra_pods), pdbs=tuple(pdbs))


def config(**kw) -> DeschedulerConfiguration:
    return load_descheduler_config(
        {"apiVersion": "hrl-scheduler.io/v1alpha1", "kind": "DeschedulerConfiguration", **kw}
    )


def ctx_for(
    target: PodInfo,
    *,
    snapshot: ClusterSnapshot | None = None,
    cfg=None,
    ledger=None,
    history=None,
    to_node=None,
    **fresh,
) -> GuardContext:
    snap = snapshot if snapshot is not None else base_snapshot(target)
    return GuardContext(
        snap, cfg or config(), ledger or CycleLedger(), history, NOW_S, TopologyHeuristic(), None, to_node, **fresh
    )


def _ledger_with(*evicted: PodInfo, pdbs=()) -> CycleLedger:
    ledger = CycleLedger()
    for p in evicted:
        ledger.record_eviction(p, pdbs)
    return ledger


def _history(*records: tuple[PodInfo, str, float]) -> EvictionHistory:
    h = EvictionHistory()
    for p, n, at in records:
        h.record(p, n, at)
    return h


PDB0 = PodDisruptionBudgetInfo(
    "api", "shop", LabelSelector(frozen_map({"app": "api"})), min_available=1, disruptions_allowed=0
)
PDB1 = replace(PDB0, disruptions_allowed=1)
OTHER_NS_POD = pod("web-1", ns="other", labels={"app": "web"}, owner=OwnerRef("ReplicaSet", "web-1"))
OTHER_NODE_POD = pod("web-2", node_name="n2", labels={"app": "web"}, owner=OwnerRef("ReplicaSet", "web-2"))
FILLER_N2 = pod("filler", node_name="n2", cpu_m=3800, labels={"app": "filler"}, owner=OwnerRef("ReplicaSet", "f"))
P = pod()
P2 = pod("api-5d8f6c7b9c-fghij", node_name="n2")
RS = OwnerInfo("ReplicaSet", "api-5d8f6c7b9c", "", 3)

# guard name -> (blocked context, the same pod passing without that one thing)
CASES = {
    "mirror": (
        lambda: ctx_for(
            pod(annotations=frozen_map({"kubernetes.io/config.mirror": "abc"}), owner=OwnerRef("Node", "n1"))
        )
    ),
    "daemonset": (lambda: ctx_for(pod(owner=OwnerRef("DaemonSet", "agent")))),
    "no_controller": (lambda: ctx_for(pod(owner=None))),
    "excluded_namespace": (lambda: ctx_for(pod(ns="kube-system"))),
    "system_critical": (lambda: ctx_for(pod(priority=2_000_000_000))),
    "local_storage": (lambda: ctx_for(pod(local_storage=True))),
    "terminating": (lambda: ctx_for(pod(terminating=True))),
    "unbound": (lambda: ctx_for(pod(node_name=None))),
    "pdb": (lambda: ctx_for(P, snapshot=base_snapshot(P, pdbs=[PDB0]))),
    "pdb_refused": (lambda: ctx_for(P, ledger=_refused(P))),
    "cap_node": (
        lambda: ctx_for(
            P, cfg=config(caps={"perNode": 1, "perNamespace": None, "total": None}), ledger=_ledger_with(OTHER_NS_POD)
        )
    ),
    "cap_namespace": (
        lambda: ctx_for(
            P, cfg=config(caps={"perNode": None, "perNamespace": 1, "total": None}), ledger=_ledger_with(OTHER_NODE_POD)
        )
    ),
    "cap_total": (
        lambda: ctx_for(
            P,
            cfg=config(caps={"perNode": None, "perNamespace": None, "total": 1}),
            ledger=_ledger_with(replace(OTHER_NS_POD, node_name="n2")),
        )
    ),
    "cooldown": (lambda: ctx_for(P, history=_history((pod(name="api-5d8f6c7b9c-old"), "n1", NOW_S - 60)))),
    "infeasible": (lambda: ctx_for(P, snapshot=base_snapshot(P, FILLER_N2))),
    "owner": (lambda: ctx_for(P, owner=None)),
    "loop_hold": (lambda: ctx_for(P, holds={workload_key(P): "eviction loop: came back"})),
}

# The same pod, with only the blocking fact removed.
PASSING = {
    "mirror": lambda: ctx_for(pod(owner=OwnerRef("Node", "n1"))),
    "daemonset": lambda: ctx_for(pod(owner=OwnerRef("ReplicaSet", "agent"))),
    "no_controller": lambda: ctx_for(pod()),
    "excluded_namespace": lambda: ctx_for(pod(ns="shop")),
    "system_critical": lambda: ctx_for(pod(priority=1_000_000_000)),
    "local_storage": lambda: ctx_for(pod(local_storage=True), cfg=config(evictLocalStoragePods=True)),
    "terminating": lambda: ctx_for(pod(terminating=False)),
    "unbound": lambda: ctx_for(pod()),
    "pdb": lambda: ctx_for(P, snapshot=base_snapshot(P, P2, pdbs=[PDB1])),
    "pdb_refused": lambda: ctx_for(P, ledger=CycleLedger()),
    "cap_node": lambda: ctx_for(
        P, cfg=config(caps={"perNode": 2, "perNamespace": None, "total": None}), ledger=_ledger_with(OTHER_NS_POD)
    ),
    "cap_namespace": lambda: ctx_for(
        P, cfg=config(caps={"perNode": None, "perNamespace": 2, "total": None}), ledger=_ledger_with(OTHER_NODE_POD)
    ),
    "cap_total": lambda: ctx_for(
        P,
        cfg=config(caps={"perNode": None, "perNamespace": None, "total": 2}),
        ledger=_ledger_with(replace(OTHER_NS_POD, node_name="n2")),
    ),
    "cooldown": lambda: ctx_for(P, history=_history((pod(name="api-5d8f6c7b9c-old"), "n1", NOW_S - 3600))),
    "infeasible": lambda: ctx_for(P, snapshot=base_snapshot(P, replace(FILLER_N2, requests=Resources(3000, GI)))),
    "owner": lambda: ctx_for(P, owner=RS),
    "loop_hold": lambda: ctx_for(P, holds={}),
}


def _refused(p: PodInfo) -> CycleLedger:
    ledger = CycleLedger()
    ledger.record_refusal(pod(name="api-5d8f6c7b9c-other"))
    return ledger


def _target(ctx: GuardContext) -> PodInfo:
    return ctx.snapshot.pods[0]


def test_every_guard_has_a_blocking_and_a_passing_case():
    assert set(CASES) == set(GUARD_NAMES) == set(PASSING)
    assert [n for n, _ in GUARDS] == list(GUARD_NAMES)


@pytest.mark.parametrize("guard", GUARD_NAMES)
def test_a_pod_only_this_guard_blocks_is_blocked_by_exactly_this_guard(guard):
    ctx = CASES[guard]()
    blockers = check_guards(_target(ctx), ctx)
    assert [b.guard for b in blockers] == [guard], blockers
    assert blockers[0].reason and "\n" not in blockers[0].reason


@pytest.mark.parametrize("guard", GUARD_NAMES)
def test_the_same_pod_without_the_blocking_fact_passes_every_guard(guard):
    ctx = PASSING[guard]()
    assert check_guards(_target(ctx), ctx) == []


@pytest.mark.parametrize("cls", ["system-cluster-critical", "system-node-critical"])
def test_system_critical_priority_classes_block_whatever_the_priority_value(cls):
    ctx = ctx_for(pod(priority_class_name=cls, priority=0))
    assert [b.guard for b in check_guards(_target(ctx), ctx)] == ["system_critical"]


def test_excluded_namespaces_are_configurable():
    ctx = ctx_for(pod(ns="batch"), cfg=config(excludedNamespaces=["batch"]))
    assert [b.guard for b in check_guards(_target(ctx), ctx)] == ["excluded_namespace"]
    ctx = ctx_for(pod(ns="kube-system"), cfg=config(excludedNamespaces=[]))
    assert check_guards(_target(ctx), ctx) == []


def test_a_pdb_without_status_counts_as_allowing_nothing():
    unknown = replace(PDB0, disruptions_allowed=None)
    ctx = ctx_for(P, snapshot=base_snapshot(P, pdbs=[unknown]))
    blockers = check_guards(P, ctx)
    assert [b.guard for b in blockers] == ["pdb"]
    assert "disruptionsAllowed" in blockers[0].reason


def test_a_pdb_allowing_one_disruption_blocks_the_second_eviction_of_the_cycle():
    sibling = pod(name="api-5d8f6c7b9c-zzzzz", node_name="n2")
    ledger = _ledger_with(sibling, pdbs=[PDB1])
    ctx = ctx_for(P, snapshot=base_snapshot(P, sibling, pdbs=[PDB1]), ledger=ledger)
    assert [b.guard for b in check_guards(P, ctx)] == ["pdb"]


def test_a_pod_covered_by_two_pdbs_is_blocked_because_the_eviction_api_refuses_it():
    other = replace(PDB1, name="api-too")
    ctx = ctx_for(P, snapshot=base_snapshot(P, pdbs=[PDB1, other]))
    blockers = check_guards(P, ctx)
    assert [b.guard for b in blockers] == ["pdb"] and "more than one" in blockers[0].reason


def test_a_pdb_in_another_namespace_or_selecting_other_pods_does_not_apply():
    elsewhere = replace(PDB0, namespace="other")
    others = replace(PDB0, selector=LabelSelector(frozen_map({"app": "web"})))
    ctx = ctx_for(P, snapshot=base_snapshot(P, pdbs=[elsewhere, others]))
    assert check_guards(P, ctx) == []


def test_cooldown_blocks_a_move_back_to_a_node_the_workload_just_left():
    h = _history((pod(name="api-5d8f6c7b9c-old", node_name="n2"), "n2", NOW_S - 60))
    ctx = ctx_for(P, history=h, to_node="n2")
    blockers = check_guards(P, ctx)
    assert [b.guard for b in blockers] == ["cooldown"] and "back to n2" in blockers[0].reason
    assert check_guards(P, ctx_for(P, history=h, to_node=None)) == []


def test_cooldown_zero_disables_the_history_check():
    h = _history((pod(name="api-5d8f6c7b9c-old"), "n1", NOW_S - 1))
    assert check_guards(P, ctx_for(P, history=h, cfg=config(cooldownSeconds=0))) == []


def test_cooldown_sees_evictions_of_the_same_workload_from_the_same_node_earlier_this_cycle():
    ledger = CycleLedger()
    ledger.record_eviction(pod(name="api-5d8f6c7b9c-first"), [])
    ctx = ctx_for(P, ledger=ledger)
    assert [b.guard for b in check_guards(P, ctx)] == ["cooldown"]


@pytest.mark.parametrize(
    "n2, why",
    [
        (node("n2", unschedulable=True), "cordoned"),
        (node("n2", ready=False), "not Ready"),
        (node("n2", taints=(Taint("dedicated", "gpu", "NoSchedule"),)), "taint"),
        (node("n2", allocatable_pods=0), "too many pods"),
    ],
)
def test_feasibility_respects_cordon_readiness_taints_and_pod_count(n2, why):
    ctx = ctx_for(P, snapshot=base_snapshot(P, nodes=[node("n1"), n2]))
    blockers = check_guards(P, ctx)
    assert [b.guard for b in blockers] == ["infeasible"] and why in blockers[0].reason


def test_feasibility_respects_the_node_selector():
    picky = pod(node_selector=frozen_map({"disk": "ssd"}))
    ctx = ctx_for(picky, snapshot=base_snapshot(picky, nodes=[node("n1"), node("n2")]))
    assert [b.guard for b in check_guards(picky, ctx)] == ["infeasible"]
    ssd = node("n2", labels=frozen_map({"disk": "ssd"}))
    ctx = ctx_for(picky, snapshot=base_snapshot(picky, nodes=[node("n1"), ssd]))
    assert check_guards(picky, ctx) == []


def test_feasibility_applies_our_placement_policys_filter():
    class RejectAll:
        name = "reject-all"

        def filter(self, pod, candidates, index):
            return dict.fromkeys(candidates, "policy says no")

        def score(self, pod, candidates, index, intent=None):  # pragma: no cover - not called
            raise AssertionError

    ctx = replace(ctx_for(P), placement=RejectAll())
    blockers = check_guards(P, ctx)
    assert [b.guard for b in blockers] == ["infeasible"] and "policy says no" in blockers[0].reason


def test_a_guard_that_raises_blocks_the_eviction():
    class Broken:
        name = "broken"

        def filter(self, pod, candidates, index):
            raise RuntimeError("boom")

    ctx = replace(ctx_for(P), placement=Broken())
    blockers = check_guards(P, ctx)
    assert [b.guard for b in blockers] == ["infeasible"] and "boom" in blockers[0].reason


def test_eviction_blockers_lists_every_reason_as_guard_prefixed_strings():
    bad = pod(owner=None, ns="kube-system", terminating=True)
    reasons = eviction_blockers(bad, base_snapshot(bad), config(), CycleLedger())
    assert [r.split(":")[0] for r in reasons] == ["no_controller", "excluded_namespace", "terminating"]
    assert eviction_blockers(P, base_snapshot(P), config(), CycleLedger(), placement=TopologyHeuristic()) == []


def test_workload_key_names_the_controller_owner_or_the_bare_pod():
    assert workload_key(P) == "shop/ReplicaSet/api-5d8f6c7b9c"
    assert workload_key(pod(name="solo", owner=None)) == "shop/Pod/solo"


def test_eviction_history_survives_a_round_trip_through_its_state_file(tmp_path):
    path = tmp_path / "state" / "history.json"
    h = EvictionHistory(path=path)
    h.record(P, "n1", NOW_S)
    assert json.loads(path.read_text())["evictions"][0]["node"] == "n1"
    again = EvictionHistory.load(path)
    assert again.last_eviction(workload_key(P), "n1", NOW_S - 1) is not None
    assert again.last_eviction(workload_key(P), "n2", NOW_S - 1) is None
    again.prune(NOW_S + 1)
    assert again.records == ()


def test_a_missing_state_file_is_an_empty_history(tmp_path):
    assert EvictionHistory.load(tmp_path / "nope.json").records == ()


@pytest.mark.parametrize(
    "text", ["{not json", '{"version": 2, "evictions": []}', '{"version": 1, "evictions": [{"node": "n1"}]}']
)
def test_a_malformed_state_file_fails_closed_with_a_one_line_error(tmp_path, text):
    path = tmp_path / "history.json"
    path.write_text(text)
    with pytest.raises(HistoryError) as exc:
        EvictionHistory.load(path)
    assert str(path) in str(exc.value) and "\n" not in str(exc.value)


# ---- the PodDisruptionBudget counted as the disruption controller does (issue 13, item 2) ----------------


def _api(i: int, **kw) -> PodInfo:
    return pod(f"api-5d8f6c7b9c-{i:05d}", node_name="n1", **kw)


@pytest.mark.parametrize(
    "spec, pods, scale, want",
    [
        ({"min_available": 3}, [_api(i) for i in range(4)], None, 1),
        ({"min_available": 3}, [_api(0), _api(1), _api(2), _api(3, ready=False)], None, 0),
        ({"min_available": 3}, [_api(0), _api(1), _api(2), _api(3, terminating=True)], None, 0),
        ({"min_available": "50%"}, [_api(i) for i in range(4)], 4, 2),
        ({"min_available": "50%"}, [_api(i) for i in range(3)], 3, 1),  # ceil(1.5) = 2 desired
        ({"min_available": "50%"}, [_api(i) for i in range(4)], None, None),  # scale unknown: cannot count
        ({"max_unavailable": 1}, [_api(i) for i in range(4)], 4, 1),
        ({"max_unavailable": 1}, [_api(i) for i in range(3)], 4, 0),  # one already missing
        ({"max_unavailable": "25%"}, [_api(i) for i in range(8)], 8, 2),
        ({"max_unavailable": "30%"}, [_api(i) for i in range(10)], 10, 3),  # rounded up
        ({}, [_api(i) for i in range(4)], 4, 0),  # neither: the controller allows nothing
        ({"min_available": "lots"}, [_api(i) for i in range(4)], 4, None),
    ],
)
def test_the_pdb_budget_is_counted_from_the_pods_as_the_disruption_controller_does(spec, pods, scale, want):
    b = PodDisruptionBudgetInfo("api", "shop", LabelSelector(frozen_map({"app": "api"})), disruptions_allowed=9, **spec)
    got, _how = pdb_budget(PdbView(b, tuple(pods), scale))
    assert got == want


def test_pods_the_api_server_already_disrupted_are_not_counted_healthy():
    pods = tuple(_api(i) for i in range(4))
    b = PodDisruptionBudgetInfo(
        "api", "shop", LabelSelector(frozen_map({"app": "api"})), min_available=3, disrupted_pods=(pods[0].name,)
    )
    assert pdb_budget(PdbView(b, pods, None))[0] == 0


def _pdb_ctx(b: PodDisruptionBudgetInfo, pods, ledger=None) -> GuardContext:
    return ctx_for(pods[0], pdbs=(PdbView(b, tuple(pods), len(pods)),), ledger=ledger)


def test_a_lagging_disruption_controller_cannot_over_spend_the_budget():
    """kube-controller-manager paused: the status still says 1, but the ready pods are already at minAvailable."""
    pods = [_api(0), _api(1), _api(2), _api(3, ready=False)]
    b = PodDisruptionBudgetInfo(
        "api", "shop", LabelSelector(frozen_map({"app": "api"})), min_available=3, disruptions_allowed=1
    )
    (blocker,) = check_guards(pods[0], _pdb_ctx(b, pods))
    assert blocker.guard == "pdb" and "counted 0" in blocker.reason and "disruptionsAllowed 1" in blocker.reason
    healthy = [_api(0), _api(1), _api(2), _api(3)]
    assert check_guards(healthy[0], _pdb_ctx(b, healthy)) == []


def test_the_stricter_of_status_and_count_wins_and_this_cycles_evictions_count():
    pods = [_api(i) for i in range(6)]
    b = PodDisruptionBudgetInfo(
        "api", "shop", LabelSelector(frozen_map({"app": "api"})), min_available=3, disruptions_allowed=1
    )
    assert check_guards(pods[0], _pdb_ctx(b, pods)) == []  # counted 3, status 1: 1 left
    ledger = _ledger_with(replace(pods[5], node_name="n2"), pdbs=[b])
    assert [x.guard for x in check_guards(pods[0], _pdb_ctx(b, pods, ledger))] == ["pdb"]


@pytest.mark.parametrize("observed, blocked", [(None, True), (1, True), (2, False), (3, False)])
def test_a_pdb_status_computed_for_an_older_spec_blocks(observed, blocked):
    pods = [_api(i) for i in range(4)]
    b = PodDisruptionBudgetInfo(
        "api",
        "shop",
        LabelSelector(frozen_map({"app": "api"})),
        min_available=1,
        disruptions_allowed=3,
        generation=2,
        observed_generation=observed,
    )
    got = check_guards(pods[0], _pdb_ctx(b, pods))
    assert ([x.guard for x in got] == ["pdb"]) is blocked
    if blocked:
        assert "observedGeneration" in got[0].reason


def test_the_owner_guard_blocks_a_replaced_or_deleted_or_unreadable_controller():
    ok = OwnerInfo("ReplicaSet", "api-5d8f6c7b9c", "uid-rs", 3)
    p = pod(owner=OwnerRef("ReplicaSet", "api-5d8f6c7b9c", "uid-rs"))
    assert check_guards(p, ctx_for(p, owner=ok)) == []
    for own, why in (
        (replace(ok, uid="uid-other"), "re-created"),
        (replace(ok, terminating=True), "being deleted"),
        (replace(ok, replicas=0), "scaled to 0"),
        (None, "is gone"),
    ):
        (b,) = check_guards(p, ctx_for(p, owner=own))
        assert b.guard == "owner" and why in b.reason
    custom = pod(owner=OwnerRef("CloneSet", "api"))
    (b,) = check_guards(custom, ctx_for(custom, owner=None))
    assert b.guard == "owner" and "not re-read" in b.reason


def test_loop_detection_holds_a_workload_whose_pod_came_back_to_the_node_it_was_evicted_from():
    from descheduler.guards import detect_loops

    old = pod("api-5d8f6c7b9c-old", node_name="n1", created_s=NOW_S - 7200)
    h = _history((old, "n1", NOW_S - 600))
    back = pod("api-5d8f6c7b9c-new", node_name="n1", created_s=NOW_S - 590)
    elsewhere = pod("api-5d8f6c7b9c-new", node_name="n2", created_s=NOW_S - 590)
    before = pod("api-5d8f6c7b9c-kept", node_name="n1", created_s=NOW_S - 7000)  # was there before the eviction
    (hold,) = detect_loops(base_snapshot(back), h, NOW_S, 3600, 1800)
    assert (hold.workload, hold.node, hold.pod, hold.until_s) == (workload_key(back), "n1", back.key, NOW_S + 1800)
    assert "came back to n1" in hold.reason(NOW_S)
    assert detect_loops(base_snapshot(elsewhere), h, NOW_S, 3600, 1800) == []
    assert detect_loops(base_snapshot(before), h, NOW_S, 3600, 1800) == []
    assert detect_loops(base_snapshot(back), h, NOW_S, 300, 1800) == []  # outside the window
    h.sections["loopHolds"] = [
        {"workload": hold.workload, "node": "n1", "evicted_at_s": 1.0, "pod": back.key, "until_s": NOW_S + 60}
    ]
    assert [x.workload for x in detect_loops(base_snapshot(elsewhere), h, NOW_S, 3600, 1800)] == [hold.workload]
    assert detect_loops(base_snapshot(elsewhere), h, NOW_S + 61, 3600, 1800) == []
