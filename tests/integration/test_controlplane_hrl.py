"""The hierarchy's plumbing on the real API server (issue 6): the intent path (``hrl-descheduler`` → a real
``hrl-policy cache serve`` → ``hrl-extender`` → its scores), scaling through ``deployments/scale`` (the
Deployment's replicas change, kube-controller-manager creates the pods, hrl-scheduler places them), and the
refusal to touch a Deployment that a HorizontalPodAutoscaler owns (the audit log is the witness).

The descheduler runs as the ``hrl-descheduler`` test identity (the shipped rights: get/update on
``deployments/scale``, list/watch on ``horizontalpodautoscalers``, no pod delete). Where a test needs a
specific replica target, a fixed planner (a small fake of the high-level policy) plans it; the loop, the bounds,
the HPA check and the scale subresource are the real ones.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml
from cp_helpers import (
    DEFAULT,
    HRL,
    ROOT,
    apply,
    deployment,
    get_json,
    pod_spec,
    pods,
    running,
    scheduled_by,
    wait_for,
    wait_running,
)
from prometheus_client import CollectorRegistry

from descheduler.config import load_descheduler_config
from descheduler.kube import KubeEvictor, KubeObserver, KubeScaler
from descheduler.loop import CycleDeps, run_once
from descheduler.metrics import DeschedulerMetrics
from extender.wire import build_host_priorities
from policy.cache import GrpcEmbeddingCache
from policy.highlevel import UtilizationIntent, cluster_cpu_utilization, default_intent
from policy.index import ClusterIndex
from policy.intent import Intent
from policy.lowlevel import TopologyHeuristic
from policy.observe import parse_pod
from policy.state import ANNOTATION_DEPENDS_ON, Plan

pytestmark = pytest.mark.controlplane

USER = "hrl-descheduler"
HOSTNAME = "kubernetes.io/hostname"
HEADER = {"apiVersion": "hrl-scheduler.io/v1alpha1", "kind": "DeschedulerConfiguration"}


# ---- processes of the intent path ----------------------------------------------------------------------------


# cache_and_extender: tests/integration/conftest.py


def prioritize(base: str, probe: dict, nodes: list[str]) -> dict[str, int]:
    body = {"Pod": probe, "NodeNames": nodes, "Nodes": None}
    r = httpx.post(base + "/scheduler/prioritize", json=body, timeout=5)
    assert r.status_code == 200, r.text
    return {h["Host"]: h["Score"] for h in r.json()}


def expected_scores(cp, probe: dict, nodes: list[str], intent) -> dict[str, int]:
    """What the extender's policy (TopologyHeuristic, shipped defaults) answers on the cluster as it is now."""
    snap = KubeObserver(cp.api())()
    raw = TopologyHeuristic().score(parse_pod(probe), nodes, ClusterIndex.build(snap), intent)
    return {h["Host"]: h["Score"] for h in build_host_priorities(nodes, raw)}


def run_descheduler(cp, config_path: Path) -> dict:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "descheduler",
            "--once",
            "--json",
            "--config",
            str(config_path),
            "--kubeconfig",
            str(cp.kubeconfigs[USER]),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "warning: cache" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout)


def test_the_intent_goes_from_the_descheduler_through_the_cache_to_the_extenders_scores(
    control_plane, namespace, kwok_nodes, cache_and_extender, tmp_path
):
    cp, ns = control_plane, namespace
    cache_addr, ext = cache_and_extender
    x, y, z = kwok_nodes(3)  # 4 CPU each
    # The callee sits on x, next to a filler that takes x to 75 % of its CPU; the caller lives on y.
    apply(
        cp,
        ns,
        [
            deployment("callee", app="ip-callee", scheduler=DEFAULT, node_selector={HOSTNAME: x}),
            deployment("filler", app="ip-filler", cpu="2900m", scheduler=DEFAULT, node_selector={HOSTNAME: x}),
            deployment(
                "caller", app="ip-caller", scheduler=DEFAULT, node_selector={HOSTNAME: y}, depends_on=["ip-callee"]
            ),
        ],
    )
    wait_running(cp, ns, 3)
    # A new replica of the caller: where should it go? Next to its callee (x), as far as x's load allows.
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "probe",
            "namespace": ns,
            "labels": {"app": "ip-caller"},
            "annotations": {ANNOTATION_DEPENDS_ON: "ip-callee"},
        },
        "spec": pod_spec(HRL, cpu="100m"),
    }
    nodes = [x, y, z]
    state = tmp_path / "descheduler-state.json"
    cfg = tmp_path / "descheduler.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                **HEADER,
                "stateFile": str(state),
                "cache": {"address": cache_addr, "timeoutSeconds": 5},
                "planner": {"name": "hierarchical", "rebalance": False, "autoscaler": None},
            }
        )
    )

    # 1. A quiet cluster: the descheduler asks for locality (and stores the embeddings the extender needs).
    first = run_descheduler(cp, cfg)
    assert first["planner"] == "hierarchical" and first["dry_run"] is False and first["planned_moves"] == []
    i1 = tuple(first["intent"])
    assert i1 == pytest.approx(UtilizationIntent().target(0.0))  # (1.5, 0.5): below lowUtilization
    wait_for(
        lambda: prioritize(ext, probe, nodes) == expected_scores(cp, probe, nodes, i1),
        30,
        "the extender to score with the first intent",
    )

    # 2. The cluster fills up; the extender still holds the first intent: x, busy but next to the callee, wins.
    apply(
        cp,
        ns,
        [
            deployment("load-y", app="ip-load-y", cpu="3", scheduler=DEFAULT, node_selector={HOSTNAME: y}),
            deployment("load-z", app="ip-load-z", cpu="3", scheduler=DEFAULT, node_selector={HOSTNAME: z}),
        ],
    )
    wait_running(cp, ns, 5)
    s1 = wait_for(
        lambda: (s := prioritize(ext, probe, nodes)) == expected_scores(cp, probe, nodes, i1) and s,
        30,
        "the extender's scores on the loaded cluster, first intent",
    )
    assert s1[x] == 10 and s1[y] == s1[z] == 0

    # 3. The next descheduler run (a fresh process: the CronJob) sees a busy cluster and asks for balance; its
    #    intent is smoothed against the first one, read back from its state file.
    second = run_descheduler(cp, cfg)
    i2 = tuple(second["intent"])
    assert i2[0] < i1[0] and i2[1] > i1[1]
    u = cluster_cpu_utilization(ClusterIndex.build(KubeObserver(cp.api())()))
    target = UtilizationIntent().target(u)
    assert i2 == pytest.approx(tuple(a + 0.5 * (t - a) for a, t in zip(i1, target)))
    assert json.loads(state.read_text())["planner"]["last_intent"] == pytest.approx(list(i2))
    with GrpcEmbeddingCache(cache_addr, 2.0) as c:
        it = c.get_intent().entry
        assert it.values == pytest.approx(i2) and it.source == "hrl-descheduler"
        assert it.names == ("locality_weight", "balance_weight")

    # 4. Nothing else changed in the cluster, yet the extender's score of the busy node x drops.
    s2 = wait_for(
        lambda: (s := prioritize(ext, probe, nodes)) == expected_scores(cp, probe, nodes, i2) and s,
        30,
        "the extender to score with the second intent",
    )
    assert s2[x] < s1[x] and s2[x] == 8 and s2[y] == s2[z] == 0


# ---- scaling ------------------------------------------------------------------------------------------------


@dataclass
class TargetsPlanner:
    """A high-level policy that plans only replica targets (Deployment name → replicas) in ``namespace``."""

    namespace: str
    targets: dict
    name: str = "fixed-targets"

    def plan(self, snapshot, index, placement):
        return Plan(
            moves=(),
            replica_targets={f"{self.namespace}/{k}": v for k, v in self.targets.items()},
            intent=Intent(default_intent()),
        )


def config(**overrides):
    return load_descheduler_config({**HEADER, **overrides})


def scale_writes(cp, ns: str) -> list[dict]:
    """Audit events of the descheduler's requests on ``deployments/scale`` in ``ns`` (any verb)."""
    return [
        e
        for e in cp.audit_events(USER)
        if (e.get("objectRef") or {}).get("resource") == "deployments"
        and (e.get("objectRef") or {}).get("subresource") == "scale"
        and (e.get("objectRef") or {}).get("namespace") == ns
    ]


def replicas_of(cp, ns: str, name: str) -> int:
    return int(get_json(cp, "deployment", name, "-n", ns)["spec"]["replicas"])


def test_replica_targets_go_through_deployments_scale_and_the_new_pods_are_placed_by_hrl_scheduler(
    control_plane, namespace, kwok_nodes
):
    cp, ns = control_plane, namespace
    kwok_nodes(2)
    apply(cp, ns, [deployment("web", app="sc-web", scheduler=HRL)])
    (first,) = wait_running(cp, ns, 1, "app=sc-web")
    api = cp.api(USER)
    observe, evictor, scaler = KubeObserver(api), KubeEvictor(api), KubeScaler(api)
    cfg = config(scaling={"maxStepPerCycle": 2, "maxReplicas": 10})
    metrics = DeschedulerMetrics(CollectorRegistry())

    # A dry run reads (HPAs, the scale) and writes nothing.
    dry = run_once(
        CycleDeps(
            observe,
            evictor,
            TargetsPlanner(ns, {"web": 5}),
            TopologyHeuristic(),
            cfg.model_copy(update={"dry_run": True}),
            history=None,
            scaler=scaler,
        ),
        0.0,
    )
    assert [(r.outcome, r.current, r.target) for r in dry.scaling] == [("dry_run", 1, 3)]
    assert replicas_of(cp, ns, "web") == 1 and not [e for e in scale_writes(cp, ns) if e["verb"] != "get"]

    report = run_once(
        CycleDeps(
            observe,
            evictor,
            TargetsPlanner(ns, {"web": 5}),
            TopologyHeuristic(),
            cfg,
            history=None,
            scaler=scaler,
            metrics=metrics,
        ),
        0.0,
    )
    assert [(r.workload, r.outcome, r.current, r.target, r.planned) for r in report.scaling] == [
        (f"{ns}/web", "scaled", 1, 3, 5)
    ]  # at most maxStepPerCycle per cycle
    assert replicas_of(cp, ns, "web") == 3
    (update,) = [e for e in scale_writes(cp, ns) if e["verb"] in ("update", "patch")]
    assert (update["verb"], update["objectRef"]["name"], update["responseStatus"]["code"]) == ("update", "web", 200)
    assert (
        metrics.registry.get_sample_value("hrl_descheduler_scale_total", {"outcome": "scaled", "dry_run": "false"}) == 1
    )

    # kube-controller-manager creates the pods; hrl-scheduler (with the extender) places them.
    ps = wait_running(cp, ns, 3, "app=sc-web", timeout_s=90)
    for p in ps:
        assert scheduled_by(cp, ns, p["metadata"]["name"]) == HRL
    assert first["metadata"]["name"] in {p["metadata"]["name"] for p in ps}

    again = run_once(
        CycleDeps(
            observe, evictor, TargetsPlanner(ns, {"web": 5}), TopologyHeuristic(), cfg, history=None, scaler=scaler
        ),
        60.0,
    )
    assert [(r.outcome, r.current, r.target) for r in again.scaling] == [("scaled", 3, 5)]
    wait_running(cp, ns, 5, "app=sc-web", timeout_s=90)
    done = run_once(
        CycleDeps(
            observe, evictor, TargetsPlanner(ns, {"web": 5}), TopologyHeuristic(), cfg, history=None, scaler=scaler
        ),
        120.0,
    )
    assert [r.outcome for r in done.scaling] == ["unchanged"]
    assert len([e for e in scale_writes(cp, ns) if e["verb"] in ("update", "patch")]) == 2
    assert not [e for e in cp.audit_events(USER) if e.get("verb") in ("delete", "deletecollection")]


def test_a_deployment_an_hpa_owns_is_left_alone_reported_and_never_written(control_plane, namespace, kwok_nodes):
    cp, ns = control_plane, namespace
    kwok_nodes(2)
    apply(
        cp,
        ns,
        [
            deployment("owned", app="hpa-owned", replicas=2, scheduler=DEFAULT),
            deployment("free", app="hpa-free", scheduler=DEFAULT),
            {
                "apiVersion": "autoscaling/v2",
                "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": "owned"},
                "spec": {
                    "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "owned"},
                    "minReplicas": 1,
                    "maxReplicas": 6,
                    "metrics": [
                        {
                            "type": "Resource",
                            "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}},
                        }
                    ],
                },
            },
        ],
    )
    wait_running(cp, ns, 2, "app=hpa-owned")
    wait_running(cp, ns, 1, "app=hpa-free")
    api = cp.api(USER)
    metrics = DeschedulerMetrics(CollectorRegistry())
    report = run_once(
        CycleDeps(
            KubeObserver(api),
            KubeEvictor(api),
            TargetsPlanner(ns, {"owned": 4, "free": 2}),
            TopologyHeuristic(),
            config(),
            history=None,
            scaler=KubeScaler(api),
            metrics=metrics,
        ),
        0.0,
    )
    got = {r.workload.split("/")[1]: (r.outcome, r.message) for r in report.scaling}
    assert got["owned"][0] == "refused_hpa" and f"HorizontalPodAutoscaler {ns}/owned" in got["owned"][1]
    assert got["free"][0] == "scaled"
    doc = report.to_json()
    assert doc["scale_counts"]["refused_hpa"] == 1
    assert metrics.registry.get_sample_value("hrl_descheduler_hpa_conflicts") == 1
    assert (
        metrics.registry.get_sample_value("hrl_descheduler_scale_total", {"outcome": "refused_hpa", "dry_run": "false"})
        == 1
    )

    # The audit log: the HPAs were listed, the free Deployment's scale was read and updated, and the owned
    # Deployment's scale was neither updated nor patched (not even read).
    touched = [(e["verb"], e["objectRef"].get("name")) for e in scale_writes(cp, ns)]
    assert ("update", "free") in touched
    assert not [t for t in touched if t[1] == "owned"]
    assert [
        e
        for e in cp.audit_events(USER)
        if (e.get("objectRef") or {}).get("resource") == "horizontalpodautoscalers"
        and e["verb"] == "list"
        and e["objectRef"].get("namespace") == ns
    ]
    assert replicas_of(cp, ns, "owned") == 2 and replicas_of(cp, ns, "free") == 2
    assert len(running(pods(cp, ns, "app=hpa-owned"))) == 2
