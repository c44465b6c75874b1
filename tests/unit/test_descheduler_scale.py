"""Scaling through the scale subresource: the scaler over a small fake of the API slice (HPAs, deployments/scale),
the refusal to fight an HPA, the bounds, and the loop applying a plan's replica targets after its evictions."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from prometheus_client import CollectorRegistry

from descheduler.config import load_descheduler_config
from descheduler.guards import EvictionHistory
from descheduler.loop import CycleDeps, run_once
from descheduler.metrics import DeschedulerMetrics
from descheduler.scale import (
    SCALE_OUTCOMES,
    ApiScaler,
    DryRunScaler,
    GatedScaler,
    ScaleApiError,
    ScaleResult,
    bound_target,
    dry_run_scaler,
    hpa_targeting,
    safe_scale,
)
from policy.highlevel import HierarchicalPolicy, HrlState
from policy.intent import Intent
from policy.lowlevel import TopologyHeuristic
from policy.sim.subresources import SimScaler
from policy.state import (
    ClusterSnapshot,
    EvictionResult,
    LabelSelector,
    Move,
    NodeInfo,
    OwnerRef,
    Plan,
    PodInfo,
    Resources,
    WorkloadInfo,
    frozen_map,
)

GI = 1024**3


def hpa(name: str, target: str, kind: str = "Deployment", api_version: str = "apps/v1") -> dict:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name},
        "spec": {
            "scaleTargetRef": {"apiVersion": api_version, "kind": kind, "name": target},
            "minReplicas": 1,
            "maxReplicas": 5,
        },
    }


class FakeScaleApi:
    """The slice of the API server a scaler uses: HPAs per namespace and each Deployment's scale (with a
    resourceVersion bumped on every write). ``calls`` records every request as ``(verb, namespace, name)``."""

    def __init__(self, replicas: dict[str, int], hpas: dict[str, list[dict]] | None = None):
        self.replicas = dict(replicas)
        self.rv = dict.fromkeys(replicas, 1)
        self.hpas = hpas or {}
        self.calls: list[tuple[str, str, str]] = []
        self.fail: dict[str, ScaleApiError] = {}  # verb -> error to raise
        self.bump_before_write = False

    def list_hpas(self, namespace):
        self.calls.append(("list_hpas", namespace, ""))
        if "list_hpas" in self.fail:
            raise self.fail["list_hpas"]
        return list(self.hpas.get(namespace, []))

    def read_scale(self, namespace, name):
        self.calls.append(("read_scale", namespace, name))
        key = f"{namespace}/{name}"
        if key not in self.replicas:
            raise ScaleApiError(404, f'deployments.apps "{name}" not found')
        return {
            "apiVersion": "autoscaling/v1",
            "kind": "Scale",
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": str(self.rv[key])},
            "spec": {"replicas": self.replicas[key]},
            "status": {"replicas": self.replicas[key]},
        }

    def replace_scale(self, namespace, name, body):
        self.calls.append(("replace_scale", namespace, name))
        key = f"{namespace}/{name}"
        if self.bump_before_write:
            self.rv[key] += 1
        if "replace_scale" in self.fail:
            raise self.fail["replace_scale"]
        if body["metadata"].get("resourceVersion") != str(self.rv[key]):
            raise ScaleApiError(409, "the object has been modified; please apply your changes to the latest version")
        assert body["kind"] == "Scale" and body["apiVersion"] == "autoscaling/v1"
        self.replicas[key] = body["spec"]["replicas"]
        self.rv[key] += 1
        return body

    def writes(self) -> list[tuple[str, str, str]]:
        return [c for c in self.calls if c[0] == "replace_scale"]


# ---- the scaler ------------------------------------------------------------------------------------------


def test_it_scales_through_the_scale_subresource_with_the_resource_version_it_read():
    api = FakeScaleApi({"shop/api": 2})
    s = ApiScaler(api)
    res = s.scale("shop/api", 4)
    assert (res.outcome, res.current, res.target) == ("scaled", 2, 4) and api.replicas["shop/api"] == 4
    assert [c[0] for c in api.calls] == ["list_hpas", "read_scale", "replace_scale"]
    assert s.scale("shop/api", 4).outcome == "unchanged" and len(api.writes()) == 1
    assert s.calls == [("shop/api", "scaled"), ("shop/api", "unchanged")]


def test_a_deployment_an_hpa_targets_is_refused_and_never_written():
    api = FakeScaleApi(
        {"shop/api": 2, "shop/web": 1}, hpas={"shop": [hpa("other", "web-canary"), hpa("api-hpa", "api")]}
    )
    s = ApiScaler(api)
    res = s.scale("shop/api", 5)
    assert res.outcome == "refused_hpa" and "shop/api-hpa" in res.message and "left alone" in res.message
    assert api.writes() == [] and api.replicas["shop/api"] == 2
    assert not [c for c in api.calls if c[0] == "read_scale"]  # not even read: it is the HPA's
    assert s.scale("shop/web", 3).outcome == "scaled"  # an HPA on another Deployment changes nothing here


@pytest.mark.parametrize(
    "objs, name, want",
    [
        ([hpa("h", "api")], "api", "h"),
        ([hpa("h", "api", api_version="extensions/v1beta1")], "api", "h"),
        ([hpa("h", "api", kind="StatefulSet")], "api", None),
        ([hpa("h", "api", api_version="example.com/v1")], "api", None),
        ([hpa("h", "apiserver")], "api", None),
        ([hpa("b", "api"), hpa("a", "api")], "api", "a"),
        ([{"metadata": {"name": "broken"}}], "api", None),
    ],
)
def test_hpa_targeting_matches_the_scale_target_ref(objs, name, want):
    assert hpa_targeting(objs, name) == want


def test_without_knowing_about_hpas_nothing_is_scaled():
    api = FakeScaleApi({"shop/api": 1})
    api.fail["list_hpas"] = ScaleApiError(403, "horizontalpodautoscalers.autoscaling is forbidden")
    res = ApiScaler(api).scale("shop/api", 3)
    assert res.outcome == "error" and "cannot check for a HorizontalPodAutoscaler" in res.message
    assert api.writes() == [] and not [c for c in api.calls if c[0] == "read_scale"]


@pytest.mark.parametrize(
    "setup, outcome, text",
    [
        (lambda api: api.replicas.pop("shop/api"), "not_found", "no Deployment"),
        (lambda api: setattr(api, "bump_before_write", True), "error", "changed since it was read (409)"),
        (lambda api: api.fail.update(replace_scale=ScaleApiError(500, "etcd timeout")), "error", "update failed"),
        (lambda api: api.fail.update(replace_scale=ScaleApiError(None, "no answer")), "error", "no answer"),
    ],
)
def test_api_failures_are_outcomes_and_nothing_is_retried(setup, outcome, text):
    api = FakeScaleApi({"shop/api": 1})
    setup(api)
    res = ApiScaler(api).scale("shop/api", 3)
    assert res.outcome == outcome and text in res.message
    assert len(api.writes()) <= 1


def test_the_dry_run_twin_reads_and_refuses_like_the_real_one_but_writes_nothing():
    api = FakeScaleApi({"shop/api": 1, "shop/web": 2}, hpas={"shop": [hpa("h", "web")]})
    real = ApiScaler(api)
    dry = dry_run_scaler(real)
    assert dry is not real and dry.dry_run and dry_run_scaler(dry) is dry
    assert dry.scale("shop/api", 3).outcome == "dry_run"
    assert dry.scale("shop/web", 3).outcome == "refused_hpa"
    assert dry.scale("shop/api", 1).outcome == "unchanged"
    assert api.writes() == [] and api.replicas == {"shop/api": 1, "shop/web": 2}
    assert isinstance(dry_run_scaler(object()), DryRunScaler)


@pytest.mark.parametrize(
    "current, planned, lo, hi, step, want",
    [
        (2, 9, 1, 10, 4, 6),
        (8, 1, 1, 10, 4, 4),
        (3, 3, 1, 10, 4, 3),
        (2, 50, 1, 10, None, 10),
        (2, 0, 1, 10, None, 1),
        (12, 12, 1, 10, 1, 11),
        (0, 5, 1, 10, 2, 2),
        (5, 7, 0, 6, 4, 6),
    ],
)
def test_targets_are_clipped_to_the_bounds_and_the_step(current, planned, lo, hi, step, want):
    assert bound_target(current, planned, lo, hi, step) == want


def test_safe_scale_turns_anything_odd_into_an_error():
    class Raises:
        def scale(self, w, r):
            raise ConnectionError("reset")

    class Odd:
        def __init__(self, answer):
            self.answer = answer

        def scale(self, w, r):
            return self.answer

    assert "ConnectionError" in safe_scale(Raises(), "shop/a", 2).message
    assert safe_scale(Odd("yes"), "shop/a", 2).outcome == "error"
    assert safe_scale(Odd(ScaleResult("shop/b", "scaled")), "shop/a", 2).outcome == "error"
    assert safe_scale(Odd(ScaleResult("shop/a", "blocked")), "shop/a", 2).outcome == "error"
    ok = safe_scale(Odd(ScaleResult("shop/a", "scaled")), "shop/a", 2, current=1, planned=7)
    assert (ok.outcome, ok.current, ok.target, ok.planned) == ("scaled", 1, 2, 7)


def test_a_gated_scaler_scales_only_while_allowed():
    api = FakeScaleApi({"shop/api": 1})
    leading = {"now": False}
    g = GatedScaler(ApiScaler(api), lambda: leading["now"], "lost the lease")
    assert g.scale("shop/api", 2).outcome == "error" and api.calls == []
    leading["now"] = True
    assert g.scale("shop/api", 2).outcome == "scaled"


def test_the_simulators_scaler_uses_its_scale_subresource():
    class Cluster:
        replicas = {"default/api": 1}

    class Sim:
        cluster = Cluster()
        scaled: list = []

        def scale(self, w, r):
            self.scaled.append((w, r))
            self.cluster.replicas[w] = r

    sim = Sim()
    assert SimScaler(sim).scale("default/api", 3).outcome == "scaled" and sim.scaled == [("default/api", 3)]
    assert SimScaler(sim).scale("default/api", 3).outcome == "unchanged"
    assert SimScaler(sim).scale("default/nope", 3).outcome == "not_found"
    assert dry_run_scaler(SimScaler(sim)).scale("default/api", 5).outcome == "dry_run" and sim.scaled == [
        ("default/api", 3)
    ]


# ---- the loop ----------------------------------------------------------------------------------------------


def node(name: str) -> NodeInfo:
    return NodeInfo(name, Resources(8000, 32 * GI))


def pod(svc: str, node_name: str, ns: str = "shop") -> PodInfo:
    return PodInfo(
        name=f"{svc}-x",
        namespace=ns,
        service=svc,
        requests=Resources(100, GI),
        uid=f"u-{svc}",
        node_name=node_name,
        phase="Running",
        owner=OwnerRef("ReplicaSet", f"{svc}-rs"),
        labels=frozen_map({"app": svc}),
    )


def wl(name: str, replicas: int, ns: str = "shop", kind: str = "Deployment") -> WorkloadInfo:
    return WorkloadInfo(
        name,
        ns,
        name,
        kind=kind,
        replicas=replicas,
        selector=LabelSelector(frozen_map({"app": name})),
        pod_requests=Resources(100, GI),
    )


class Cluster:
    def __init__(self, api: FakeScaleApi, extra_workloads=()):
        self.api = api
        self.extra = tuple(extra_workloads)
        self.reads = 0
        self.pods = [pod("api", "n1"), pod("web", "n2")]
        self.events: list[str] = []

    def observe(self) -> ClusterSnapshot:
        self.reads += 1
        ws = tuple(wl(k.split("/")[1], r, k.split("/")[0]) for k, r in sorted(self.api.replicas.items()))
        return ClusterSnapshot(
            nodes=(node("n1"), node("n2"), node("n3")),
            pods=tuple(self.pods),
            workloads=ws + self.extra,
            taken_at_s=100.0,
        )


class Evictor:
    def __init__(self, cluster: Cluster):
        self.cluster = cluster

    def evict(self, p, reason):
        self.cluster.events.append(f"evict {p.key}")
        return EvictionResult(p.key, "evicted", "ok")


class RecordingApi(FakeScaleApi):
    def __init__(self, cluster_events, *a, **k):
        super().__init__(*a, **k)
        self.events = cluster_events

    def replace_scale(self, namespace, name, body):
        self.events.append(f"scale {namespace}/{name}")
        return super().replace_scale(namespace, name, body)


class Planner:
    name = "scripted"

    def __init__(self, targets, moves=()):
        self.targets, self.moves = targets, tuple(moves)

    def plan(self, snapshot, index, placement):
        return Plan(moves=self.moves, replica_targets=dict(self.targets), intent=Intent((1.0, 1.0)))


def config(**kw):
    base = {
        "apiVersion": "hrl-scheduler.io/v1alpha1",
        "kind": "DeschedulerConfiguration",
        "caps": {"perNode": None, "perNamespace": None, "total": None},
        "schedulerPrediction": {"enabled": False},
        "moves": {"costModel": {"enabled": False}},  # the scaling's mechanics; the cost model has tests of its own
    }
    base.update(kw)
    return load_descheduler_config(base)


def cycle(cluster, planner, scaler, cfg=None, metrics=None):
    return run_once(
        CycleDeps(
            cluster.observe,
            Evictor(cluster),
            planner,
            TopologyHeuristic(),
            cfg or config(),
            history=None,
            scaler=scaler,
            metrics=metrics,
        ),
        100.0,
    )


def test_the_loop_scales_after_its_evictions_within_the_bounds_and_reports_every_target():
    events: list[str] = []
    api = RecordingApi(
        events, {"shop/api": 2, "shop/web": 1, "shop/db": 3, "kube-system/dns": 1}, hpas={"shop": [hpa("db-hpa", "db")]}
    )
    cluster = Cluster(api, extra_workloads=[wl("cache", 1, kind="StatefulSet")])
    cluster.events = events
    move = Move("shop/web-x", "n2", "n1", "locality", 3.0)
    targets = {"shop/api": 20, "shop/web": 1, "shop/db": 5, "kube-system/dns": 3, "shop/cache": 2, "shop/gone": 2}
    registry = CollectorRegistry()
    report = cycle(
        cluster,
        Planner(targets, [move]),
        ApiScaler(api),
        config(scaling={"maxStepPerCycle": 3, "maxReplicas": 10}),
        DeschedulerMetrics(registry),
    )
    assert events == ["evict shop/web-x", "scale shop/api"]  # evictions first, then scaling
    got = {r.workload: (r.outcome, r.current, r.target, r.planned) for r in report.scaling}
    assert got == {
        "kube-system/dns": ("blocked", None, None, 3),
        "shop/api": ("scaled", 2, 5, 20),
        "shop/cache": ("blocked", 1, None, 2),
        "shop/db": ("refused_hpa", 3, 5, 5),
        "shop/gone": ("not_found", None, None, 2),
        "shop/web": ("unchanged", 1, 1, 1),
    }
    assert [r.workload for r in report.scaling] == sorted(targets)
    assert api.replicas == {"shop/api": 5, "shop/web": 1, "shop/db": 3, "kube-system/dns": 1}
    assert cluster.reads == 1  # one observation: the eviction re-reads its pod, the scaler its scale subresource
    doc = json.loads(json.dumps(report.to_json()))
    assert set(doc["scale_counts"]) == set(SCALE_OUTCOMES) and doc["scale_counts"]["refused_hpa"] == 1
    assert doc["scaling"][1] == {
        "workload": "shop/api",
        "outcome": "scaled",
        "current_replicas": 2,
        "target_replicas": 5,
        "planned_replicas": 20,
        "message": "scaled 2 -> 5 through deployments/scale",
    }
    v = registry.get_sample_value
    assert v("hrl_descheduler_scale_total", {"outcome": "refused_hpa", "dry_run": "false"}) == 1
    assert v("hrl_descheduler_scale_total", {"outcome": "scaled", "dry_run": "false"}) == 1
    assert v("hrl_descheduler_hpa_conflicts") == 1


def test_a_dry_run_goes_through_the_same_bounds_and_hpa_check_and_writes_nothing():
    api = FakeScaleApi({"shop/api": 2, "shop/db": 3}, hpas={"shop": [hpa("db-hpa", "db")]})
    cluster = Cluster(api)
    report = cycle(
        cluster,
        Planner({"shop/api": 9, "shop/db": 1}),
        ApiScaler(api),
        config(dryRun=True, scaling={"maxStepPerCycle": 2}),
    )
    assert [(r.workload, r.outcome, r.target) for r in report.scaling] == [
        ("shop/api", "dry_run", 4),
        ("shop/db", "refused_hpa", 1),
    ]
    assert api.writes() == [] and report.dry_run


def test_without_a_scaler_or_with_scaling_disabled_targets_are_only_reported():
    api = FakeScaleApi({"shop/api": 2})
    cluster = Cluster(api)
    r1 = cycle(cluster, Planner({"shop/api": 4}), None)
    r2 = cycle(cluster, Planner({"shop/api": 4}), ApiScaler(api), config(scaling={"enabled": False}))
    assert r1.scaling == () == r2.scaling and dict(r1.replica_targets) == {"shop/api": 4}
    assert api.calls == [] and cluster.reads == 2  # one planning read each, no re-read for scaling


def test_scaling_works_from_the_cycles_one_observation():
    api = FakeScaleApi({"shop/api": 2})
    cluster = Cluster(api)
    report = cycle(cluster, Planner({"shop/api": 4}), ApiScaler(api))
    assert [(r.outcome, r.current, r.target) for r in report.scaling] == [("scaled", 2, 4)]
    assert cluster.reads == 1


def test_the_hierarchical_planner_and_the_loop_leave_an_hpa_owned_deployment_alone_cycle_after_cycle():
    api = FakeScaleApi({"shop/api": 1}, hpas={"shop": [hpa("api", "api")]})
    cluster = Cluster(api)
    cluster.pods = [replace(pod("api", "n1"), usage=Resources(100, 0))]  # 100 % of requests: wants more

    class Auto:
        name = "always-more"

        def replica_targets(self, snapshot, state):
            return {"shop/api": 3}

    planner = HierarchicalPolicy(autoscaler=Auto(), rebalance=False)
    for _ in range(3):
        report = cycle(cluster, planner, ApiScaler(api))
        assert [(r.outcome, r.current) for r in report.scaling] == [("refused_hpa", 1)]
    assert api.writes() == [] and api.replicas["shop/api"] == 1


def test_the_planner_state_lives_in_the_state_file_next_to_the_eviction_history(tmp_path):
    path = tmp_path / "state.json"
    h = EvictionHistory.load(path)
    h.record(pod("api", "n1"), "n1", 10.0)
    st = HrlState(last_intent=(1.2, 0.9), last_targets={"shop/api": 2})
    h.set_section("planner", st.to_json())
    again = EvictionHistory.load(path)
    assert HrlState.from_json(again.sections["planner"]) == st and len(again.records) == 1
    again.record(pod("web", "n2"), "n2", 20.0)  # a later eviction keeps the planner's section
    third = EvictionHistory.load(path)
    assert third.sections["planner"] == st.to_json() and len(third.records) == 2
    with pytest.raises(ValueError, match="reserved"):
        third.set_section("evictions", [])
