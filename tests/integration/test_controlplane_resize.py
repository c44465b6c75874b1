"""In-place resizes on the real control plane (issue 11, deliverable 2): the descheduler's loop with the real
:class:`descheduler.kube.KubeObserver` and :class:`descheduler.kube.KubeResizer`, as the ``hrl-descheduler``
identity (``patch`` on ``pods/resize``, get/list on VerticalPodAutoscalers, nothing else that writes pods), changes a
running pod's CPU request through ``pods/{name}/resize`` (kube-apiserver v1.36.3); kwok's ``pod-resize`` stage
(hack/controlplane/stages/pod-resize.yaml) plays the kubelet: it reports the containers' resources, which the API
server requires before it accepts a resize ("Pod running on node without support for resize"), and completes the
resize in the pod's status. A Deployment a VerticalPodAutoscaler targets is refused and reported (the VPA CRD is
installed from tests/fixtures/vpa; no VPA controller is needed); without the CRD no VPA exists; a dry run changes
nothing. The audit log is the witness of every request.

The live observer reads no CPU use, so the planner here is a small fake of the high-level policy that plans the
resizes (the guards, the re-read, the resizer and the API are the real ones)."""

from __future__ import annotations

import json

import pytest
from cp_helpers import DEFAULT, ROOT, apply, deployment, get_json, wait_for, wait_running
from prometheus_client import CollectorRegistry

from descheduler.config import load_descheduler_config
from descheduler.guards import EvictionHistory
from descheduler.kube import KubeEvictor, KubeObserver, KubeResizer
from descheduler.loop import CycleDeps, run_once
from descheduler.metrics import DeschedulerMetrics
from descheduler.resize import RESIZE_SECTION, ResizeOrder
from policy.highlevel import default_intent
from policy.intent import Intent
from policy.lowlevel import TopologyHeuristic
from policy.state import Plan, Resize

pytestmark = pytest.mark.controlplane

USER = "hrl-descheduler"
VPA_CRD = ROOT / "tests" / "fixtures" / "vpa" / "vpa-crd.yaml"
CRD_NAME = "verticalpodautoscalers.autoscaling.k8s.io"
HEADER = {"apiVersion": "hrl-scheduler.io/v1alpha1", "kind": "DeschedulerConfiguration"}


def config(dry_run: bool = False):
    return load_descheduler_config(
        {
            **HEADER,
            "dryRun": dry_run,
            "planner": {"name": "hierarchical"},
            "resize": {"enabled": True, "cooldownSeconds": 600},
        }
    )


class FixedResizes:
    """Plans a resize of every pod of the given Deployments (label ``hrl-test/deployment``) to ``cpu_m``."""

    name = "fixed-resizes"

    def __init__(self, targets: dict[str, int]):
        self.targets = targets

    def plan(self, snapshot, index, placement):
        rz = tuple(
            Resize(p.key, p.requests.cpu_m, self.targets[p.labels.get("hrl-test/deployment", "")], "burst", 0.5)
            for p in sorted(snapshot.pods, key=lambda p: p.key)
            if p.labels.get("hrl-test/deployment") in self.targets
        )
        return Plan(resizes=rz, intent=Intent(default_intent()))


def burstable(name: str) -> dict:
    """A Deployment of one pod asking 200m CPU (limit 400m) and 64Mi memory (limit 128Mi): Burstable."""
    d = deployment(name, scheduler=DEFAULT, cpu="200m")
    d["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "400m", "memory": "128Mi"}
    return d


def reported(cp, ns: str, name: str) -> dict:
    """The pod once kwok's pod-resize stage has reported its containers' resources for its current generation."""

    def ok():
        p = get_json(cp, "pod", name, "-n", ns)
        cs = (p.get("status") or {}).get("containerStatuses") or []
        spec_res = p["spec"]["containers"][0]["resources"]
        done = cs and cs[0].get("resources") == spec_res
        return p if done and p["status"].get("observedGeneration") == p["metadata"]["generation"] else None

    return wait_for(ok, 30, f"the status of pod {ns}/{name} to report its resources")


def resize_requests(cp, ns: str) -> list[dict]:
    """Audit events of the descheduler's writes to ``pods/resize`` in ``ns``."""
    return [
        e
        for e in cp.audit_events(USER)
        if (e.get("objectRef") or {}).get("subresource") == "resize"
        and (e.get("objectRef") or {}).get("namespace") == ns
        and e.get("verb") not in ("get", "list", "watch")
    ]


def cycle(cp, targets, cfg, history=None, metrics=None):
    api = cp.api(USER)
    resizer = KubeResizer(api, dry_run=cfg.dry_run)
    rep = run_once(
        CycleDeps(
            KubeObserver(api),
            KubeEvictor(api),
            FixedResizes(targets),
            TopologyHeuristic(),
            cfg,
            history=history,
            resizer=resizer,
            metrics=metrics,
        ),
        1000.0,
    )
    return rep, resizer


@pytest.fixture
def vpa_crd(control_plane):
    cp = control_plane
    cp.kubectl("apply", "-f", str(VPA_CRD))
    cp.kubectl("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=60s")
    wait_for(
        lambda: "verticalpodautoscalers" in cp.kubectl("api-resources", "--api-group=autoscaling.k8s.io").stdout,
        30,
        "the VPA API to be served",
    )
    yield
    cp.kubectl("delete", "-f", str(VPA_CRD), "--wait=true", "--timeout=60s")


def vpa(name: str, target: str, mode: str) -> dict:
    return {
        "apiVersion": "autoscaling.k8s.io/v1",
        "kind": "VerticalPodAutoscaler",
        "metadata": {"name": name},
        "spec": {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
            "updatePolicy": {"updateMode": mode},
        },
    }


def test_a_running_pod_is_resized_in_place_through_pods_resize_and_a_dry_run_changes_nothing(
    control_plane, namespace, kwok_nodes, tmp_path
):
    cp, ns = control_plane, namespace
    assert CRD_NAME not in cp.kubectl("get", "crd", "-o", "name").stdout  # the VPA API is not served: no VPA
    kwok_nodes(1)
    apply(cp, ns, [burstable("web")])
    (p,) = wait_running(cp, ns, 1)
    name, uid = p["metadata"]["name"], p["metadata"]["uid"]
    before = reported(cp, ns, name)
    assert before["metadata"]["generation"] == 1

    # A dry run: the same guards and the same resizer, reading only; nothing is written.
    dry, resizer = cycle(cp, {"web": 300}, config(dry_run=True))
    assert [(r.pod, r.outcome, r.from_cpu_request_m, r.cpu_request_m) for r in dry.resizes] == [
        (f"{ns}/{name}", "dry_run", 200, 300)
    ]
    assert resizer.calls == [(f"{ns}/{name}", "dry_run")] and resize_requests(cp, ns) == []
    assert get_json(cp, "pod", name, "-n", ns)["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]

    history = EvictionHistory.load(tmp_path / "state.json")
    metrics = DeschedulerMetrics(CollectorRegistry())
    rep, _ = cycle(cp, {"web": 300}, config(), history, metrics)
    (res,) = rep.resizes
    assert (res.outcome, res.workload, res.from_cpu_request_m, res.cpu_request_m) == ("resized", f"{ns}/web", 200, 300)
    assert (
        metrics.registry.get_sample_value("hrl_descheduler_resizes_total", {"outcome": "resized", "dry_run": "false"})
        == 1
    )
    (req,) = resize_requests(cp, ns)
    assert (req["verb"], req["objectRef"]["name"], req["responseStatus"]["code"]) == ("patch", name, 200)

    after = reported(cp, ns, name)  # the spec and, once kwok (the kubelet) completed it, the status
    c = after["spec"]["containers"][0]["resources"]
    assert c == {"requests": {"cpu": "300m", "memory": "64Mi"}, "limits": {"cpu": "600m", "memory": "128Mi"}}
    st = after["status"]["containerStatuses"][0]
    assert st["resources"] == c and st["allocatedResources"] == {"cpu": "300m", "memory": "64Mi"}
    assert st["restartCount"] == 0 and after["metadata"]["uid"] == uid  # in place: the same pod, no restart
    assert after["metadata"]["generation"] == 2 == after["status"]["observedGeneration"]
    types = {c["type"] for c in after["status"]["conditions"]}
    assert not types & {"PodResizePending", "PodResizeInProgress"} and after["status"]["qosClass"] == "Burstable"
    template = get_json(cp, "deployment", "web", "-n", ns)["spec"]["template"]["spec"]["containers"][0]
    assert template["resources"]["requests"]["cpu"] == "200m"  # no rollout: the template is untouched
    assert json.loads((tmp_path / "state.json").read_text())[RESIZE_SECTION]["pods"] == {f"{ns}/{name}": 1000.0}

    # Within cooldownSeconds (the record in the state file) the same pod is not resized again.
    again, _ = cycle(cp, {"web": 400}, config(), history)
    assert [r.outcome for r in again.resizes] == ["cooldown"] and len(resize_requests(cp, ns)) == 1


def test_a_deployment_a_vpa_targets_is_refused_and_reported_while_one_whose_vpa_is_off_is_resized(
    control_plane, namespace, kwok_nodes, vpa_crd
):
    cp, ns = control_plane, namespace
    kwok_nodes(1)
    apply(cp, ns, [burstable("owned"), burstable("advised")])
    apply(cp, ns, [vpa("owned-vpa", "owned", "InPlaceOrRecreate"), vpa("advised-vpa", "advised", "Off")])
    pods = {p["metadata"]["labels"]["hrl-test/deployment"]: p["metadata"]["name"] for p in wait_running(cp, ns, 2)}
    for name in pods.values():
        reported(cp, ns, name)
    metrics = DeschedulerMetrics(CollectorRegistry())
    rep, resizer = cycle(cp, {"owned": 300, "advised": 300}, config(), metrics=metrics)
    got = {r.pod.split("/", 1)[1]: r for r in rep.resizes}
    owned, advised = got[pods["owned"]], got[pods["advised"]]
    assert owned.outcome == "refused_vpa" and f"VerticalPodAutoscaler {ns}/owned-vpa" in owned.message
    assert advised.outcome == "resized"
    assert rep.to_json()["resize_counts"]["refused_vpa"] == 1
    assert metrics.registry.get_sample_value("hrl_descheduler_vpa_conflicts") == 1
    assert (
        metrics.registry.get_sample_value(
            "hrl_descheduler_resizes_total", {"outcome": "refused_vpa", "dry_run": "false"}
        )
        == 1
    )
    # left alone: never written, its request and generation as created
    assert [e["objectRef"]["name"] for e in resize_requests(cp, ns)] == [pods["advised"]]
    p = get_json(cp, "pod", pods["owned"], "-n", ns)
    assert p["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "200m" and p["metadata"]["generation"] == 1
    assert reported(cp, ns, pods["advised"])["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "300m"


def test_the_api_server_refuses_a_resize_until_the_node_reports_the_containers_resources(control_plane, namespace):
    """Why the kwok stage exists: on a node no kubelet (nor kwok) runs, a Running pod whose container status has no
    ``resources`` cannot be resized ("Pod running on node without support for resize": the resizer answers
    ``unsupported`` and nothing changes); once its status reports them, as a kubelet >= 1.33 does, it can."""
    cp, ns = control_plane, namespace
    node = f"no-kubelet-{ns}"[:60]
    cp.kubectl("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}))
    try:
        cap = {"cpu": "4", "memory": "16Gi", "pods": "110"}  # the API server checks a resize against allocatable
        status = json.dumps({"status": {"capacity": cap, "allocatable": cap}})
        cp.kubectl("patch", "node", node, "--subresource=status", "--type=merge", "-p", status)
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "bare"},
            "spec": {
                "nodeName": node,
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {"name": "app", "image": "registry.invalid/fake:1", "resources": {"requests": {"cpu": "200m"}}}
                ],
            },
        }
        apply(cp, ns, [pod])
        running = {
            "name": "app",
            "image": "registry.invalid/fake:1",
            "imageID": "",
            "ready": True,
            "restartCount": 0,
            "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
        }

        def set_status(container_status: dict) -> None:
            body = {"status": {"phase": "Running", "containerStatuses": [container_status]}}
            cp.kubectl("patch", "pod", "bare", "-n", ns, "--subresource=status", "--type=merge", "-p", json.dumps(body))

        set_status(running)
        resizer = KubeResizer(cp.api(USER))
        o = ResizeOrder(f"{ns}/bare", 200, 300, f"{ns}/bare", "", "", "burst")
        res = resizer.resize(o)
        assert res.outcome == "unsupported" and "Pod running on node without support for resize" in res.message
        assert get_json(cp, "pod", "bare", "-n", ns)["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "200m"
        set_status({**running, "resources": {"requests": {"cpu": "200m"}}})
        res = resizer.resize(o)
        assert res.outcome == "resized", res.message
        assert get_json(cp, "pod", "bare", "-n", ns)["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "300m"
    finally:
        cp.kubectl("delete", "pod", "bare", "-n", ns, "--grace-period=0", "--force", "--ignore-not-found")
        cp.delete_nodes([node])
