"""In-place resizes through pods/resize: the request split, the patch, the VPA refusal, the resizer over a small fake
of the API slice (VPAs, GET pod, PATCH pods/resize), and the loop's guards (excluded namespaces, re-read, node room,
caps, cooldown, bounds, dry run) on a fake cluster whose pods are the same objects the fake API serves."""

from __future__ import annotations

import copy
import json

import pytest
from prometheus_client import CollectorRegistry

from descheduler.config import load_descheduler_config, planner_from_config
from descheduler.guards import EvictionHistory
from descheduler.loop import CycleDeps, run_once
from descheduler.metrics import DeschedulerMetrics
from descheduler.resize import (
    RESIZE_OUTCOMES,
    RESIZE_SECTION,
    ApiResizer,
    ContainerCpu,
    DryRunResizer,
    GatedResizer,
    ResizeApiError,
    ResizeOrder,
    ResizeRefused,
    ResizeResult,
    bound_resize,
    dry_run_resizer,
    resize_patch,
    safe_resize,
    split_cpu_request,
    vpa_targeting,
)
from policy.highlevel import default_intent
from policy.intent import Intent
from policy.lowlevel import TopologyHeuristic
from policy.observe import parse_pod, parse_workload
from policy.state import ClusterSnapshot, NodeInfo, Plan, Resize, Resources

GI = 1024**3

# ---- the request split ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "containers,target,want",
    [
        ([ContainerCpu("a", 100)], 150, [ContainerCpu("a", 150)]),
        # two containers: one factor for both; limits keep their ratio
        (
            [ContainerCpu("a", 100, 200), ContainerCpu("b", 300)],
            800,
            [ContainerCpu("a", 200, 400), ContainerCpu("b", 600)],
        ),
        # a limit equal to the request stays equal (Guaranteed stays Guaranteed)
        ([ContainerCpu("a", 250, 250)], 400, [ContainerCpu("a", 400, 400)]),
        # a container without a request keeps none, and its limit too
        (
            [ContainerCpu("a", 100), ContainerCpu("side", 0, None)],
            130,
            [ContainerCpu("a", 130), ContainerCpu("side", 0)],
        ),
        # the remainder goes to the largest fractional parts: 1/3 each of 100 -> 34, 33, 33 (sum exactly)
        (
            [ContainerCpu("a", 10), ContainerCpu("b", 10), ContainerCpu("c", 10)],
            100,
            [ContainerCpu("a", 34), ContainerCpu("b", 33), ContainerCpu("c", 33)],
        ),
        # every requesting container keeps >= 1m
        ([ContainerCpu("a", 1000), ContainerCpu("b", 1)], 2, [ContainerCpu("a", 1), ContainerCpu("b", 1)]),
        # a limit above the request stays above it after rounding
        ([ContainerCpu("a", 1000, 1001)], 10, [ContainerCpu("a", 10, 11)]),
        # shrinking
        ([ContainerCpu("a", 300, 600)], 200, [ContainerCpu("a", 200, 400)]),
    ],
)
def test_every_containers_cpu_request_is_scaled_by_one_factor_to_the_target(containers, target, want):
    got = split_cpu_request(containers, target)
    assert got == want
    assert sum(c.request_m for c in got) == target


@pytest.mark.parametrize(
    "containers,target,msg",
    [
        ([ContainerCpu("a", 0)], 100, "no container has a CPU request"),
        ([ContainerCpu("a", 5), ContainerCpu("b", 5)], 1, "below 1m"),
    ],
)
def test_an_impossible_split_is_an_error(containers, target, msg):
    with pytest.raises(ValueError, match=msg):
        split_cpu_request(containers, target)


# ---- pods, as the API server serves them ------------------------------------------------------------------------


def pod_json(
    name: str,
    cpu: str | None = "200m",
    *,
    ns: str = "shop",
    app: str = "api",
    deployment: str | None = None,
    node: str | None = "n1",
    limit: str | None = None,
    phase: str = "Running",
    uid: str | None = None,
    extra_containers: list | None = None,
    rv: int = 7,
    owner_kind: str = "ReplicaSet",
) -> dict:
    deployment = deployment or app
    res: dict = {"requests": {"memory": "64Mi"}}
    if cpu is not None:
        res["requests"]["cpu"] = cpu
    if limit is not None:
        res["limits"] = {"cpu": limit, "memory": "128Mi"}
    meta = {
        "name": name,
        "namespace": ns,
        "uid": uid or f"uid-{name}",
        "resourceVersion": str(rv),
        "labels": {"app": app},
        "ownerReferences": [{"kind": owner_kind, "name": f"{deployment}-5f7d", "controller": True, "uid": "rs"}],
    }
    spec = {"containers": [{"name": "app", "image": "x", "resources": res}, *(extra_containers or [])]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": phase}}


def deployment_json(name: str, cpu: str = "200m", ns: str = "shop", app: str | None = None) -> dict:
    app = app or name
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app}},
                "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": cpu}}}]},
            },
        },
    }


def vpa(name: str, target: str, mode: str | None = "Auto", kind: str = "Deployment", api_version: str = "apps/v1"):
    spec: dict = {"targetRef": {"apiVersion": api_version, "kind": kind, "name": target}}
    if mode is not None:
        spec["updatePolicy"] = {"updateMode": mode}
    return {
        "apiVersion": "autoscaling.k8s.io/v1",
        "kind": "VerticalPodAutoscaler",
        "metadata": {"name": name},
        "spec": spec,
    }


def test_the_patch_changes_only_cpu_with_the_resource_version_read():
    p = pod_json(
        "api-1", "200m", limit="400m", extra_containers=[{"name": "log", "resources": {"requests": {"cpu": "100m"}}}]
    )
    body = resize_patch(p, 600)
    assert body == {
        "metadata": {"resourceVersion": "7"},
        "spec": {
            "containers": [
                {"name": "app", "resources": {"requests": {"cpu": "400m"}, "limits": {"cpu": "800m"}}},
                {"name": "log", "resources": {"requests": {"cpu": "200m"}}},
            ]
        },
    }
    assert resize_patch(pod_json("api-1", "200m"), 200) is None  # nothing to change


@pytest.mark.parametrize(
    "change,outcome,text",
    [
        (lambda p: p["spec"].update(resources={"requests": {"cpu": "1"}}), "unsupported", "pod-level"),
        (
            lambda p: p["spec"].update(initContainers=[{"name": "init", "resources": {"requests": {"cpu": "2"}}}]),
            "unsupported",
            "init containers or overhead",
        ),
        (
            lambda p: p["spec"]["containers"][0].update(
                resizePolicy=[{"resourceName": "cpu", "restartPolicy": "RestartContainer"}]
            ),
            "refused_restart",
            "restarts on a CPU resize",
        ),
    ],
)
def test_pods_that_cannot_be_resized_in_place_without_harm_are_refused(change, outcome, text):
    p = pod_json("api-1", "200m")
    change(p)
    with pytest.raises(ResizeRefused, match=text) as exc:
        resize_patch(p, 300)
    assert exc.value.outcome == outcome


def test_overhead_is_kept_and_only_the_containers_share_scales():
    p = pod_json("api-1", "200m")
    p["spec"]["overhead"] = {"cpu": "50m"}
    assert parse_pod(p).requests.cpu_m == 250
    assert resize_patch(p, 450)["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "400m"}


@pytest.mark.parametrize(
    "vpas,want",
    [
        ([vpa("v", "api")], "v"),
        ([vpa("v", "api", mode=None)], "v"),  # no updatePolicy: the default Auto acts
        ([vpa("v", "api", mode="Initial")], "v"),
        ([vpa("v", "api", mode="InPlaceOrRecreate")], "v"),
        ([vpa("v", "api", mode="Off")], None),  # recommendations only: it owns nothing
        ([vpa("v", "web")], None),
        ([vpa("v", "api-5f7d", kind="ReplicaSet")], "v"),
        ([vpa("v", "api", kind="StatefulSet")], None),
        ([vpa("v", "api", api_version="example.com/v1")], None),
        ([vpa("off", "api", mode="Off"), vpa("on", "api")], "on"),
    ],
)
def test_a_vpa_owns_a_deployment_it_targets_unless_its_update_mode_is_off(vpas, want):
    assert vpa_targeting(vpas, "api", "api-5f7d") == want


@pytest.mark.parametrize(
    "current,planned,template,want",
    [
        (200, 300, 200, 300),
        (200, 1000, 200, 300),  # maxStep 0.5
        (300, 450, 200, 400),  # maxBurst 2 x the template's 200m
        (500, 600, 200, None),  # already above the burst bound: never further up
        (400, 100, 200, 200),  # a shrink stops at the template's request ...
        (150, 100, 200, None),  # ... and a pod below it is not shrunk further
        (200, 205, 200, None),  # under minChange / 2
        (200, 200, 200, None),
        (300, 250, 0, 250),  # no template known: only the step bounds
    ],
)
def test_the_bounds_of_a_resize(current, planned, template, want):
    assert bound_resize(current, planned, template, max_step=0.5, max_burst=2.0, min_change=0.1) == want


# ---- the API resizer over a fake API ------------------------------------------------------------------------------


class FakeResizeApi:
    """The slice of the API server a resizer uses: pods (JSON, a resourceVersion bumped on every write) and
    VerticalPodAutoscalers per namespace (``vpas=None``: the VPA API is not served: 404). ``calls`` records
    ``(verb, namespace, name)``; ``fail``: verb -> error to raise."""

    def __init__(self, pods: list[dict], vpas: dict[str, list[dict]] | None = None):
        self.pods = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": copy.deepcopy(p) for p in pods}
        self.vpas = vpas
        self.calls: list[tuple[str, str, str]] = []
        self.fail: dict[str, ResizeApiError] = {}
        self.bump_before_write = False
        self.answer_unchanged = False

    def list_vpas(self, namespace):
        self.calls.append(("list_vpas", namespace, ""))
        if "list_vpas" in self.fail:
            raise self.fail["list_vpas"]
        if self.vpas is None:
            raise ResizeApiError(404, "the server could not find the requested resource")
        return copy.deepcopy(self.vpas.get(namespace, []))

    def read_pod(self, namespace, name):
        self.calls.append(("read_pod", namespace, name))
        if "read_pod" in self.fail:
            raise self.fail["read_pod"]
        key = f"{namespace}/{name}"
        if key not in self.pods:
            raise ResizeApiError(404, f'pods "{name}" not found', "pods")
        return copy.deepcopy(self.pods[key])

    def patch_pod_resize(self, namespace, name, body):
        self.calls.append(("patch_pod_resize", namespace, name))
        key = f"{namespace}/{name}"
        p = self.pods.get(key)
        if self.bump_before_write and p is not None:
            p["metadata"]["resourceVersion"] = str(int(p["metadata"]["resourceVersion"]) + 1)
        if "patch_pod_resize" in self.fail:
            raise self.fail["patch_pod_resize"]
        if p is None:
            raise ResizeApiError(404, f'pods "{name}" not found', "pods")
        if body["metadata"]["resourceVersion"] != p["metadata"]["resourceVersion"]:
            raise ResizeApiError(409, "the object has been modified; please apply your changes to the latest version")
        if self.answer_unchanged:
            return copy.deepcopy(p)
        by_name = {c["name"]: c for c in p["spec"]["containers"]}
        for c in body["spec"]["containers"]:  # strategic merge by container name, resources only
            r = by_name[c["name"]].setdefault("resources", {})
            for kind, vals in c["resources"].items():
                r.setdefault(kind, {}).update(vals)
        p["metadata"]["resourceVersion"] = str(int(p["metadata"]["resourceVersion"]) + 1)
        return copy.deepcopy(p)

    def writes(self):
        return [c for c in self.calls if c[0] == "patch_pod_resize"]

    def cpu_m(self, key: str) -> int:
        return parse_pod(self.pods[key]).requests.cpu_m


def order(pod="shop/api-1", cur=200, target=300, workload="shop/api", rs="api-5f7d", uid="uid-api-1"):
    return ResizeOrder(pod, cur, target, workload, rs, uid, "burst")


def test_it_resizes_through_pods_resize_after_checking_vpas_and_re_reading_the_pod():
    api = FakeResizeApi([pod_json("api-1", "200m", limit="400m")], vpas={})
    r = ApiResizer(api)
    res = r.resize(order())
    assert (res.outcome, res.from_cpu_request_m, res.cpu_request_m) == ("resized", 200, 300)
    assert [c[0] for c in api.calls] == ["list_vpas", "read_pod", "patch_pod_resize"]
    limits = api.pods["shop/api-1"]["spec"]["containers"][0]["resources"]["limits"]
    assert api.cpu_m("shop/api-1") == 300 and limits == {"cpu": "600m", "memory": "128Mi"}
    assert r.calls == [("shop/api-1", "resized")]


def test_a_pod_whose_deployment_a_vpa_owns_is_refused_and_never_read_or_written():
    api = FakeResizeApi([pod_json("api-1")], vpas={"shop": [vpa("api-vpa", "api")]})
    res = ApiResizer(api).resize(order())
    assert res.outcome == "refused_vpa" and "VerticalPodAutoscaler shop/api-vpa" in res.message
    assert api.calls == [("list_vpas", "shop", "")] and api.cpu_m("shop/api-1") == 200


def test_when_the_vpa_api_is_not_served_no_vpa_exists():
    api = FakeResizeApi([pod_json("api-1")], vpas=None)
    assert ApiResizer(api).resize(order()).outcome == "resized" and api.cpu_m("shop/api-1") == 300


@pytest.mark.parametrize(
    "setup,outcome,text",
    [
        (lambda api: api.fail.update(list_vpas=ResizeApiError(403, "forbidden")), "error", "cannot check"),
        (lambda api: api.fail.update(list_vpas=ResizeApiError(None, "no answer")), "error", "cannot check"),
        (lambda api: api.pods.clear(), "not_found", "no such pod"),
        (lambda api: api.fail.update(read_pod=ResizeApiError(500, "boom")), "error", "cannot read"),
        (lambda api: api.pods["shop/api-1"]["metadata"].update(uid="other"), "changed", "re-created"),
        (
            lambda api: api.pods["shop/api-1"]["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z"),
            "not_running",
            "terminating",
        ),
        (lambda api: api.pods["shop/api-1"]["status"].update(phase="Pending"), "not_running", "Pending"),
        (
            lambda api: api.pods["shop/api-1"]["spec"]["containers"][0]["resources"]["requests"].update(cpu="250m"),
            "changed",
            "250m",
        ),
        (lambda api: setattr(api, "bump_before_write", True), "changed", "409"),
        (
            lambda api: api.fail.update(
                patch_pod_resize=ResizeApiError(422, "spec: Forbidden: Pod running on node without support for resize")
            ),
            "unsupported",
            "cannot resize in place",
        ),
        (
            lambda api: api.fail.update(
                patch_pod_resize=ResizeApiError(404, "the server could not find the requested resource")
            ),
            "unsupported",
            "no pods/resize",
        ),
        (
            lambda api: api.fail.update(patch_pod_resize=ResizeApiError(404, 'pods "api-1" not found', "pods")),
            "not_found",
            "gone",
        ),
        (lambda api: api.fail.update(patch_pod_resize=ResizeApiError(403, "forbidden")), "error", "pods/resize failed"),
        (
            lambda api: api.fail.update(
                patch_pod_resize=ResizeApiError(
                    403, "node didn't have enough allocatable resources: cpu, requested: 9000, allocatable: 4000"
                )
            ),
            "no_room",
            "allocatable",
        ),
        (
            lambda api: api.fail.update(
                patch_pod_resize=ResizeApiError(
                    403, 'pod resize is only supported on linux nodes, node "w" is "windows"'
                )
            ),
            "unsupported",
            "linux",
        ),
        (lambda api: setattr(api, "answer_unchanged", True), "error", "answered a CPU request of 200m"),
    ],
)
def test_every_failure_is_an_outcome_and_nothing_is_retried(setup, outcome, text):
    api = FakeResizeApi([pod_json("api-1")], vpas={})
    setup(api)
    res = ApiResizer(api).resize(order())
    assert res.outcome == outcome and text in res.message
    assert len(api.writes()) <= 1


def test_an_order_without_its_deployment_is_not_resized():
    api = FakeResizeApi([pod_json("api-1")], vpas={})
    assert ApiResizer(api).resize(order(workload="")).outcome == "error" and api.calls == []


def test_the_dry_run_twin_reads_and_refuses_like_the_real_one_but_writes_nothing():
    api = FakeResizeApi([pod_json("api-1"), pod_json("web-1", app="web")], vpas={"shop": [vpa("v", "web")]})
    real = ApiResizer(api)
    twin = dry_run_resizer(real)
    assert twin is not real and twin.dry_run is True
    assert twin.resize(order()).outcome == "dry_run"
    assert (
        twin.resize(order("shop/web-1", workload="shop/web", rs="web-5f7d", uid="uid-web-1")).outcome == "refused_vpa"
    )
    assert api.writes() == [] and api.cpu_m("shop/api-1") == 200
    assert real.calls == [("shop/api-1", "dry_run"), ("shop/web-1", "refused_vpa")]  # one record of calls
    assert dry_run_resizer(twin) is twin and isinstance(dry_run_resizer(object()), DryRunResizer)


def test_safe_resize_turns_anything_odd_into_an_error():
    class Raises:
        def resize(self, o):
            raise RuntimeError("kaboom\nsecond line")

    class Answers:
        def __init__(self, answer):
            self.answer = answer

        def resize(self, o):
            return self.answer

    o = order()
    assert safe_resize(Raises(), o).message == "resizer raised RuntimeError: kaboom second line"
    for bad in (
        None,
        ResizeResult("shop/other", "resized"),
        ResizeResult(o.pod, "capped"),
        ResizeResult(o.pod, "nope"),
    ):
        assert safe_resize(Answers(bad), o).outcome == "error"
    ok = safe_resize(Answers(ResizeResult(o.pod, "resized")), o, planned=500)
    assert (ok.outcome, ok.from_cpu_request_m, ok.cpu_request_m, ok.planned, ok.workload) == (
        "resized",
        200,
        300,
        500,
        "shop/api",
    )


def test_a_gated_resizer_resizes_only_while_allowed():
    inner = DryRunResizer()
    allowed = [True]
    g = GatedResizer(inner, lambda: allowed[0], "lost the lease")
    assert g.resize(order()).outcome == "dry_run"
    allowed[0] = False
    res = g.resize(order())
    assert res.outcome == "error" and "lost the lease" in res.message and len(inner.calls) == 1


# ---- the loop ------------------------------------------------------------------------------------------------


class Cluster:
    """A fake cluster: nodes, Deployments, and the pods the fake API serves (so a resize shows in the next
    observation). ``observations`` counts calls; ``broken`` makes observe() raise."""

    def __init__(self, api: FakeResizeApi, nodes_cpu_m: dict[str, int], deployments: list[dict]):
        self.api = api
        self.nodes = [NodeInfo(n, Resources(cpu, 32 * GI)) for n, cpu in nodes_cpu_m.items()]
        self.workloads = [parse_workload(d) for d in deployments]
        self.observations = 0
        self.broken_after: int | None = None

    def observe(self) -> ClusterSnapshot:
        self.observations += 1
        if self.broken_after is not None and self.observations > self.broken_after:
            raise ConnectionError("API server went away")
        pods = tuple(parse_pod(p) for p in self.api.pods.values())
        return ClusterSnapshot(tuple(self.nodes), pods, workloads=tuple(self.workloads), taken_at_s=0.0)


class NoEvictions:
    def evict(self, pod, reason):  # pragma: no cover - no moves are planned here
        raise AssertionError("no eviction expected")


class FixedResizes:
    """A high-level policy planning the given resizes (pod key -> target millicores) from the snapshot's
    requests."""

    name = "fixed-resizes"

    def __init__(self, targets: dict[str, int]):
        self.targets = targets

    def plan(self, snapshot, index, placement):
        by_key = {p.key: p for p in snapshot.pods}
        rz = tuple(
            Resize(k, by_key[k].requests.cpu_m if k in by_key else 100, t, "burst", 0.5)
            for k, t in self.targets.items()
        )
        return Plan(resizes=rz, intent=Intent(default_intent()))


HEADER = {"apiVersion": "hrl-scheduler.io/v1alpha1", "kind": "DeschedulerConfiguration"}


def config(**resize):
    return load_descheduler_config(
        {
            **HEADER,
            "planner": {"name": "hierarchical"},
            "excludedNamespaces": ["kube-system"],
            "resize": {"enabled": True, "cooldownSeconds": 600, **resize},
        }
    )


def world(*pods, node_cpu: int = 4000, vpas=None, deployments=None):
    api = FakeResizeApi(list(pods), vpas={} if vpas is None else vpas)
    deps = deployments or [deployment_json("api"), deployment_json("web"), deployment_json("db")]
    return api, Cluster(api, {"n1": node_cpu, "n2": 4000}, deps)


def cycle(cluster, targets, resizer, cfg=None, history=None, now_s=1000.0, metrics=None):
    return run_once(
        CycleDeps(
            cluster.observe,
            NoEvictions(),
            FixedResizes(targets),
            TopologyHeuristic(),
            cfg or config(),
            history=history,
            resizer=resizer,
            metrics=metrics,
        ),
        now_s,
    )


def outcomes(report):
    return {r.pod: r.outcome for r in report.resizes}


def test_the_loop_resizes_after_re_reading_the_cluster_and_reports_every_planned_resize(tmp_path):
    api, cluster = world(pod_json("api-1"), pod_json("web-1", app="web"))
    history = EvictionHistory.load(tmp_path / "state.json")
    metrics = DeschedulerMetrics(CollectorRegistry())
    rep = cycle(cluster, {"shop/api-1": 300, "shop/web-1": 150}, ApiResizer(api), history=history, metrics=metrics)
    assert outcomes(rep) == {"shop/api-1": "resized", "shop/web-1": "unchanged"}  # 150 < the template's 200m
    assert api.cpu_m("shop/api-1") == 300 and api.cpu_m("shop/web-1") == 200
    assert cluster.observations == 2  # once to plan, once more before resizing
    doc = rep.to_json()
    assert doc["resize_counts"]["resized"] == 1 and set(doc["resize_counts"]) == set(RESIZE_OUTCOMES)
    (first, _second) = doc["resizes"]
    assert {k: first[k] for k in ("pod", "workload", "outcome", "from_cpu_request_m", "cpu_request_m")} == {
        "pod": "shop/api-1",
        "workload": "shop/api",
        "outcome": "resized",
        "from_cpu_request_m": 200,
        "cpu_request_m": 300,
    }
    json.dumps(doc)
    reg = metrics.registry
    assert reg.get_sample_value("hrl_descheduler_resizes_total", {"outcome": "resized", "dry_run": "false"}) == 1
    assert reg.get_sample_value("hrl_descheduler_resizes_total", {"outcome": "unchanged", "dry_run": "false"}) == 1
    assert reg.get_sample_value("hrl_descheduler_resizes_total", {"outcome": "refused_vpa", "dry_run": "false"}) == 0
    saved = json.loads((tmp_path / "state.json").read_text())
    assert saved[RESIZE_SECTION] == {"version": 1, "pods": {"shop/api-1": 1000.0}}


def test_a_vpa_owned_pod_is_refused_counted_and_left_alone_while_others_are_resized():
    api, cluster = world(pod_json("api-1"), pod_json("web-1", app="web"), vpas={"shop": [vpa("web", "web")]})
    metrics = DeschedulerMetrics(CollectorRegistry())
    rep = cycle(cluster, {"shop/api-1": 300, "shop/web-1": 300}, ApiResizer(api), metrics=metrics)
    assert outcomes(rep) == {"shop/api-1": "resized", "shop/web-1": "refused_vpa"}
    assert api.cpu_m("shop/web-1") == 200 and ("patch_pod_resize", "shop", "web-1") not in api.calls
    assert metrics.registry.get_sample_value("hrl_descheduler_vpa_conflicts") == 1
    assert (
        metrics.registry.get_sample_value(
            "hrl_descheduler_resizes_total", {"outcome": "refused_vpa", "dry_run": "false"}
        )
        == 1
    )


def test_the_guards_block_excluded_namespaces_pods_of_no_deployment_gone_changed_and_unbound_pods():
    api, cluster = world(
        pod_json("api-1"),
        pod_json("sys-1", ns="kube-system"),
        pod_json("db-0", app="db", owner_kind="StatefulSet"),
        pod_json("pending-1", node=None, phase="Pending"),
        deployments=[deployment_json("api"), deployment_json("db"), deployment_json("api", ns="kube-system")],
    )
    planner_targets = {
        "shop/api-1": 300,
        "kube-system/sys-1": 300,
        "shop/db-0": 300,
        "shop/pending-1": 300,
        "shop/gone-1": 300,
    }

    class Drifting(FixedResizes):  # the plan saw 150m for api-1, the cluster has 200m
        def plan(self, snapshot, index, placement):
            p = super().plan(snapshot, index, placement)
            return Plan(
                resizes=tuple(
                    Resize(r.pod, 150, r.cpu_request_m, "burst") if r.pod == "shop/api-1" else r for r in p.resizes
                )
            )

    rep = run_once(
        CycleDeps(
            cluster.observe,
            NoEvictions(),
            Drifting(planner_targets),
            TopologyHeuristic(),
            config(),
            history=None,
            resizer=ApiResizer(api),
        ),
        0.0,
    )
    assert outcomes(rep) == {
        "shop/api-1": "changed",
        "kube-system/sys-1": "blocked",
        "shop/db-0": "blocked",
        "shop/pending-1": "not_running",
        "shop/gone-1": "not_found",
    }
    assert api.writes() == [] and api.calls == []  # none reached the resizer
    why = {r.pod: r.message for r in rep.resizes}
    assert "excluded" in why["kube-system/sys-1"] and "not a Deployment's pod" in why["shop/db-0"]


def test_a_node_without_room_for_the_increase_refuses_it_counting_this_cycles_earlier_resizes():
    # n1: 550m allocatable, two pods of 200m: 150m free; the first +100m fits, the second +100m does not
    api, cluster = world(pod_json("api-1"), pod_json("web-1", app="web"), node_cpu=550)
    rep = cycle(cluster, {"shop/api-1": 300, "shop/web-1": 300}, ApiResizer(api))
    assert outcomes(rep) == {"shop/api-1": "resized", "shop/web-1": "no_room"}
    assert rep.resizes[1].message == "node n1 has 50m CPU free, the resize needs 100m more"
    assert api.cpu_m("shop/web-1") == 200 and ("patch_pod_resize", "shop", "web-1") not in api.calls
    # a shrink never needs room
    api, cluster = world(pod_json("api-1", "400m"), node_cpu=400)
    assert outcomes(cycle(cluster, {"shop/api-1": 250}, ApiResizer(api))) == {"shop/api-1": "resized"}


def test_caps_per_cycle_and_the_per_pod_cooldown_hold_across_runs(tmp_path):
    api, cluster = world(pod_json("api-1"), pod_json("web-1", app="web"), pod_json("db-1", app="db"))
    targets = {"shop/api-1": 300, "shop/web-1": 300, "shop/db-1": 300}
    path = tmp_path / "state.json"
    rep = cycle(cluster, targets, ApiResizer(api), cfg=config(maxPerCycle=2), history=EvictionHistory.load(path))
    assert outcomes(rep) == {"shop/api-1": "resized", "shop/web-1": "resized", "shop/db-1": "capped"}
    # a new run (CronJob) reads the record: within cooldownSeconds (600) the same pods are not resized again
    targets2 = {"shop/api-1": 400, "shop/db-1": 300}
    rep = cycle(cluster, targets2, ApiResizer(api), cfg=config(), history=EvictionHistory.load(path), now_s=1300.0)
    assert outcomes(rep) == {"shop/api-1": "cooldown", "shop/db-1": "resized"}
    rep = cycle(cluster, {"shop/api-1": 400}, ApiResizer(api), history=EvictionHistory.load(path), now_s=1700.0)
    assert outcomes(rep) == {"shop/api-1": "resized"} and api.cpu_m("shop/api-1") == 400
    assert (
        cycle(cluster, {"shop/api-1": 300}, ApiResizer(api), cfg=config(maxPerCycle=0)).resizes[0].outcome == "capped"
    )


def test_a_dry_run_goes_through_the_same_guards_and_caps_and_changes_nothing(tmp_path):
    api, cluster = world(
        pod_json("api-1"), pod_json("web-1", app="web"), pod_json("db-1", app="db"), vpas={"shop": [vpa("v", "db")]}
    )
    targets = {"shop/db-1": 300, "shop/api-1": 300, "shop/web-1": 300}  # a refusal does not count against the cap
    history = EvictionHistory.load(tmp_path / "state.json")
    cfg = config(maxPerCycle=1).model_copy(update={"dry_run": True})
    real = ApiResizer(api)
    rep = cycle(cluster, targets, real, cfg=cfg, history=history)
    assert rep.dry_run and outcomes(rep) == {
        "shop/api-1": "dry_run",
        "shop/db-1": "refused_vpa",
        "shop/web-1": "capped",
    }
    assert api.writes() == [] and api.cpu_m("shop/api-1") == 200
    assert not (tmp_path / "state.json").exists() and RESIZE_SECTION not in history.sections
    assert real.calls == [("shop/db-1", "refused_vpa"), ("shop/api-1", "dry_run")]  # the same resizer, reading


def test_without_a_fresh_view_or_a_readable_record_nothing_is_resized(tmp_path):
    api, cluster = world(pod_json("api-1"))
    cluster.broken_after = 1  # planning works, the re-read fails
    rep = cycle(cluster, {"shop/api-1": 300}, ApiResizer(api))
    assert outcomes(rep) == {"shop/api-1": "skipped"} and "could not re-read" in rep.resizes[0].message
    api, cluster = world(pod_json("api-1"))
    history = EvictionHistory(sections={RESIZE_SECTION: {"version": 1, "pods": {"shop/api-1": "yesterday"}}})
    rep = cycle(cluster, {"shop/api-1": 300}, ApiResizer(api), history=history)
    assert outcomes(rep) == {"shop/api-1": "skipped"} and api.calls == []


def test_resizes_are_made_only_with_a_resizer_and_resize_enabled():
    api, cluster = world(pod_json("api-1"))
    assert cycle(cluster, {"shop/api-1": 300}, None).resizes == ()
    off = load_descheduler_config({**HEADER, "planner": {"name": "hierarchical"}})
    assert cycle(cluster, {"shop/api-1": 300}, ApiResizer(api), cfg=off).resizes == () and api.calls == []


def test_the_configuration_wires_the_resize_planner_into_the_hierarchical_planner_only():
    cfg = load_descheduler_config(
        {
            **HEADER,
            "planner": {"name": "hierarchical", "autoscaler": {"targetUtilization": 0.5, "workloads": ["shop/api"]}},
            "resize": {
                "enabled": True,
                "maxPerCycle": 3,
                "cooldownSeconds": 60,
                "maxStep": 0.3,
                "maxBurst": 1.5,
                "minChange": 0.05,
            },
        }
    )
    rp = planner_from_config(cfg).resizer
    assert (
        rp.default_target,
        rp.max_resizes,
        rp.cooldown_s,
        rp.max_step,
        rp.max_burst,
        rp.min_change,
        rp.workloads,
    ) == (
        0.5,
        3,
        60.0,
        0.3,
        1.5,
        0.05,
        ("shop/api",),
    )
    assert planner_from_config(load_descheduler_config({**HEADER, "planner": {"name": "hierarchical"}})).resizer is None


@pytest.mark.parametrize(
    "doc,text",
    [
        ({"resize": {"enabled": True}}, "resize.enabled: true needs planner.name: hierarchical"),
        (
            {"planner": {"name": "hierarchical"}, "resize": {"minChange": 0.5, "maxStep": 0.5}},
            "minChange (0.5) must be < maxStep",
        ),
        ({"resize": {"maxBurst": 0.5}}, "resize.maxBurst"),
        ({"resize": {"maxPerCycle": -1}}, "resize.maxPerCycle"),
        ({"resize": {"maxStep": 1.5}}, "resize.maxStep"),
    ],
)
def test_a_bad_resize_section_is_refused_naming_the_field(doc, text):
    from policy.config import ConfigError

    with pytest.raises(ConfigError, match=text.replace(".", r"\.").replace("(", r"\(").replace(")", r"\)")):
        load_descheduler_config({**HEADER, **doc})


def test_the_readable_report_has_one_line_per_planned_resize():
    from descheduler.__main__ import format_report

    api, cluster = world(pod_json("api-1"), pod_json("web-1", app="web"), vpas={"shop": [vpa("w", "web")]})
    text = format_report(cycle(cluster, {"shop/api-1": 300, "shop/web-1": 300}, ApiResizer(api)))
    assert "resize shop/api-1: resized (resized in place through pods/resize: 200m -> 300m CPU request" in text
    assert "resize shop/web-1: refused_vpa (VerticalPodAutoscaler shop/w owns Deployment shop/web; left alone)" in text
