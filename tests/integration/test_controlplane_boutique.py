"""The extender registered in a real kube-scheduler (issue 3, item 4a): Online Boutique's real manifests on
kwok nodes, every pod bound by the ``hrl-scheduler`` profile after a prioritize call to our extender, and a
designed scenario where the extender's scores, not default scoring, decide the node."""

from __future__ import annotations

import copy

import pytest
import yaml
from cp_helpers import (
    BOUTIQUE,
    DEFAULT,
    HRL,
    apply,
    deployment,
    extender_synced,
    metric,
    metrics,
    node_of,
    scheduled_by,
    wait_running,
)

pytestmark = pytest.mark.controlplane

HOSTNAME = "kubernetes.io/hostname"


def boutique_objects(scheduler: str) -> list[dict]:
    """The Online Boutique manifests as shipped, each Deployment's pods opting in to ``scheduler``."""
    objs = [o for o in yaml.safe_load_all(BOUTIQUE.read_text()) if o]
    out = []
    for o in objs:
        o = copy.deepcopy(o)
        if o["kind"] == "Deployment":
            o["spec"]["template"]["spec"]["schedulerName"] = scheduler
        out.append(o)
    return out


def test_online_boutique_is_bound_pod_by_pod_by_hrl_scheduler_after_asking_the_extender(
    control_plane, namespace, kwok_nodes
):
    nodes = kwok_nodes(8)
    objs = boutique_objects(HRL)
    deployments = [o for o in objs if o["kind"] == "Deployment"]
    expected = sum(int(d["spec"].get("replicas", 1)) for d in deployments)
    assert len(deployments) == 12 and expected == 12
    extender_synced(control_plane)
    before = metrics(control_plane.extender_base_url)

    apply(control_plane, namespace, objs)
    pods = wait_running(control_plane, namespace, expected, timeout_s=90)

    assert {node_of(p) for p in pods} <= set(nodes)
    assert {p["spec"]["schedulerName"] for p in pods} == {HRL}
    assert all(scheduled_by(control_plane, namespace, p["metadata"]["name"]) == HRL for p in pods)
    after = metrics(control_plane.extender_base_url)
    # One scheduling cycle per pod, each with a prioritize call scored by the policy (outcome "ok": the
    # snapshot was fresh and the pod's service is in the call graph read from the same manifests), and no
    # filter call: the shipped registration is prioritize only.
    name = "hrl_extender_prioritize_total"
    assert metric(after, name, outcome="ok") - metric(before, name, outcome="ok") >= expected
    assert metric(after, name) - metric(before, name) == metric(after, name, outcome="ok") - metric(
        before, name, outcome="ok"
    )
    assert metric(after, "hrl_extender_filter_total") - metric(before, "hrl_extender_filter_total") == 0
    assert metric(after, "hrl_extender_requests_invalid_total") == 0


def test_a_caller_lands_next_to_its_callee_with_the_extender_and_elsewhere_with_default_scoring(
    control_plane, namespace, kwok_nodes
):
    """Node X holds productcatalogservice and a 2-CPU filler, so it is the most loaded of four nodes and
    default scoring (NodeResourcesFit LeastAllocated + BalancedAllocation) ranks it last, by about 50 points.
    recommendationservice calls productcatalogservice: the extender scores X 5 of 10 (half of its call weight
    sits there, X stays under the 0.7 target utilisation), times weight 2 and 10 = 100 points for X."""
    x, *others = kwok_nodes(4)
    apply(
        control_plane,
        namespace,
        [
            deployment("filler", app="filler", cpu="2", scheduler=DEFAULT, node_selector={HOSTNAME: x}),
            deployment("productcatalogservice", scheduler=DEFAULT, node_selector={HOSTNAME: x}),
        ],
    )
    wait_running(control_plane, namespace, 2)
    extender_synced(control_plane)

    apply(
        control_plane, namespace, [deployment("recommendation-default", app="recommendationservice", scheduler=DEFAULT)]
    )
    (by_default,) = wait_running(control_plane, namespace, 1, "hrl-test/deployment=recommendation-default")
    assert node_of(by_default) in others

    extender_synced(control_plane)
    apply(control_plane, namespace, [deployment("recommendation-hrl", app="recommendationservice", scheduler=HRL)])
    (by_hrl,) = wait_running(control_plane, namespace, 1, "hrl-test/deployment=recommendation-hrl")
    assert node_of(by_hrl) == x
    assert scheduled_by(control_plane, namespace, by_hrl["metadata"]["name"]) == HRL
