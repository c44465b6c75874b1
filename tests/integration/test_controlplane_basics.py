"""The control plane itself (hack/controlplane.py, the session fixture) and the extender's watch on it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request

import pytest
from cp_helpers import ROOT, apply, cpmod, deployment, metric, metrics, wait_for, wait_running

from extender.kube import KubeSnapshotSource
from extender.store import SnapshotStore

pytestmark = pytest.mark.controlplane


def test_every_component_runs_on_loopback_and_the_api_server_is_the_built_version(control_plane):
    cp = control_plane
    names = [n for n, _pid, alive in cp.status() if alive]
    assert names == [
        "etcd",
        "kube-apiserver",
        "hrl-extender",
        "kube-controller-manager",
        "kube-scheduler-default-scheduler",
        "kube-scheduler-hrl-scheduler",
        "kwok",
    ]
    assert cp.server.startswith("https://127.0.0.1:")
    assert cp.extender_url.startswith("http://127.0.0.1:")
    assert all(c.ready_url.startswith(("http://127.0.0.1:", "https://127.0.0.1:")) for c in cp.components)
    version = json.loads(cp.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"] == version["clientVersion"]["gitVersion"] == "v1.36.3"
    assert cp.kubeconfig.is_file() and (cp.logs_dir / "kube-apiserver.log").is_file()
    with urllib.request.urlopen(f"{cp.extender_base_url}/readyz", timeout=5) as r:
        assert r.status == 200


@pytest.mark.parametrize(
    "identity,verb,resource,allowed",
    [
        ("hrl-extender", "watch", "pods", True),
        ("hrl-extender", "list", "nodes", True),
        ("hrl-extender", "create", "pods", False),
        ("hrl-extender", "list", "secrets", False),
        ("hrl-descheduler", "create", "pods --subresource=eviction", True),
        ("hrl-descheduler", "list", "poddisruptionbudgets.policy", True),
        ("hrl-descheduler", "delete", "pods", False),
        # make-before-break moves set controller.kubernetes.io/pod-deletion-cost on the pod a scale-down removes
        # (descheduler/surge.py; the chart's descheduler-rbac.yaml grants the same)
        ("hrl-descheduler", "patch", "pods", True),
        ("hrl-descheduler", "update", "pods", False),
        ("hrl-descheduler", "list", "secrets", False),
    ],
)
def test_the_test_identities_hold_only_what_their_component_needs(control_plane, identity, verb, resource, allowed):
    res = control_plane.kubectl(
        "auth", "can-i", verb, *resource.split(), "-A", kubeconfig=control_plane.kubeconfigs[identity], check=False
    )
    assert res.stdout.strip() == ("yes" if allowed else "no")


def test_the_extenders_watch_follows_nodes_and_pods_as_they_come_and_go(control_plane, namespace, kwok_nodes):
    cp = control_plane
    base = metrics(cp.extender_base_url)
    nodes0, pods0 = metric(base, "hrl_extender_snapshot_nodes"), metric(base, "hrl_extender_snapshot_pods")
    kwok_nodes(2)
    apply(cp, namespace, [deployment("web", replicas=3)])
    wait_running(cp, namespace, 3)

    def seen(n, p):
        m = metrics(cp.extender_base_url)
        return metric(m, "hrl_extender_snapshot_nodes") == n and metric(m, "hrl_extender_snapshot_pods") == p

    wait_for(lambda: seen(nodes0 + 2, pods0 + 3), 15, "the extender to see 2 more nodes and 3 more pods")
    cp.kubectl("scale", "deployment", "web", "-n", namespace, "--replicas=1")
    wait_for(lambda: seen(nodes0 + 2, pods0 + 1), 15, "the extender to see 2 pods go")
    assert metric(metrics(cp.extender_base_url), "hrl_extender_snapshot_age_seconds") < 5


def test_the_watch_source_in_process_mirrors_the_api_server_and_stops_at_once(control_plane, namespace, kwok_nodes):
    cp = control_plane
    (n,) = kwok_nodes(1)
    src = KubeSnapshotSource(SnapshotStore(), cp.api("hrl-extender"), debounce_s=0.05)
    with src:
        assert src.wait_synced(15)
        apply(cp, namespace, [deployment("solo", app="solo-svc", depends_on=["db"], scheduler="default-scheduler")])
        (p,) = wait_running(cp, namespace, 1)

        def bound():
            snap = src.store.get().snapshot
            mine = [q for q in snap.pods if q.namespace == namespace]
            return mine if mine and mine[0].node_name == n else None

        (info,) = wait_for(bound, 15, "the pod, bound, in the watched snapshot")
        assert info.name == p["metadata"]["name"] and info.service == "solo-svc"
        assert ("solo-svc", "db") in {(e.caller, e.callee) for e in src.store.get().graph.edges}
        assert src.healthy and src.stats()["pod_errors"] == 0
        t0 = time.monotonic()
    assert time.monotonic() - t0 < 3 and src._threads == []


def test_the_script_brings_a_control_plane_up_and_down_by_recorded_pids(tmp_path):
    """``hack/controlplane.py up`` (detached) → ``status`` → ``down``: every recorded PID is gone after."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = [sys.executable, str(ROOT / "hack" / "controlplane.py")]
    up = subprocess.run(
        [*run, "up", "--dir", str(tmp_path), "--no-extender", "--nodes", "1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )
    state = json.loads((tmp_path / "state.json").read_text()) if (tmp_path / "state.json").exists() else {}
    pids = [c["pid"] for c in state.get("components", [])]
    try:
        assert up.returncode == 0, up.stderr
        assert "export KUBECONFIG=" in up.stdout
        status = subprocess.run([*run, "status", "--dir", str(tmp_path)], capture_output=True, text=True, timeout=60)
        assert status.stdout.count("running") == 6, status.stdout
        kubectl = [str(cpmod.resolve_bin_dir(build=False) / "kubectl"), f"--kubeconfig={tmp_path / 'admin.kubeconfig'}"]
        nodes = json.loads(
            subprocess.run(
                [*kubectl, "get", "nodes", "-o", "json"], capture_output=True, text=True, timeout=60, check=True
            ).stdout
        )["items"]
        assert [n["metadata"]["name"] for n in nodes] == ["kwok-node-0"]
    finally:
        down = subprocess.run([*run, "down", "--dir", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stderr
    assert pids and not [p for p in pids if os.path.exists(f"/proc/{p}") and cpmod._pid_alive(p)]
    assert (tmp_path / "logs" / "kube-apiserver.log").is_file()  # logs are kept


def test_the_hrl_scheduler_registers_the_extender_exactly_as_the_shipped_manifests_do(control_plane):
    """The fixture's hrl-scheduler must test what users install: same registration, only urlPrefix differs."""
    import yaml

    docs = yaml.safe_load_all((ROOT / "manifests" / "overlays" / "second-scheduler" / "hrl-scheduler.yaml").read_text())
    (config,) = [
        yaml.safe_load(d["data"]["config.yaml"])
        for d in docs
        if d and d["kind"] == "ConfigMap" and "KubeSchedulerConfiguration" in d.get("data", {}).get("config.yaml", "")
    ]
    shipped = config["extenders"]
    ours = yaml.safe_load((control_plane.workdir / "scheduler-hrl-scheduler.yaml").read_text())["extenders"]
    assert len(shipped) == len(ours) == 1
    drop = lambda reg: {k: v for k, v in reg.items() if k != "urlPrefix"}  # noqa: E731
    assert drop(ours[0]) == drop(shipped[0]) == cpmod.SHIPPED_EXTENDER
    assert ours[0]["urlPrefix"] == control_plane.extender_url
