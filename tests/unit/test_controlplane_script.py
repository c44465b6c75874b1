"""The pure parts of hack/controlplane.py: the configurations it writes, and its refusal to go on without the
binaries and without Go (the controlplane tests then fail with that message; they never skip)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from scripts import load_script

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cpmod():
    return load_script("hrl_controlplane", ROOT / "hack" / "controlplane.py")


def test_the_hrl_scheduler_configuration_has_one_profile_no_leader_election_and_the_kubeconfig_inside(cpmod):
    reg = cpmod.extender_registration("http://127.0.0.1:1/scheduler")
    cfg = cpmod.scheduler_config(Path("/w/admin.kubeconfig"), "hrl-scheduler", [reg])
    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1" and cfg["kind"] == "KubeSchedulerConfiguration"
    assert cfg["clientConnection"]["kubeconfig"] == "/w/admin.kubeconfig"
    assert cfg["leaderElection"] == {"leaderElect": False}
    assert cfg["profiles"] == [{"schedulerName": "hrl-scheduler"}]
    assert cfg["extenders"] == [reg]
    assert "extenders" not in cpmod.scheduler_config(Path("/k"), "default-scheduler")


def test_the_extender_registration_is_the_shipped_one_and_a_none_override_removes_a_field(cpmod):
    reg = cpmod.extender_registration("http://x/scheduler")
    assert reg == {
        "urlPrefix": "http://x/scheduler",
        "prioritizeVerb": "prioritize",
        "weight": 2,
        "nodeCacheCapable": True,
        "enableHTTPS": False,
        "httpTimeout": "300ms",
        "ignorable": True,
    }
    strict = cpmod.extender_registration("http://x/scheduler", ignorable=False, prioritizeVerb=None, weight=None)
    assert strict["ignorable"] is False and "prioritizeVerb" not in strict and "weight" not in strict


def test_a_fake_node_is_managed_by_kwok_and_carries_its_capacity_and_labels(cpmod):
    n = cpmod.fake_node("n1", cpu="8", memory="32Gi", pods=50, labels={"zone": "a"})
    assert n["metadata"]["annotations"][cpmod.KWOK_ANNOTATION[0]] == cpmod.KWOK_ANNOTATION[1]
    assert n["status"]["allocatable"] == n["status"]["capacity"] == {"cpu": "8", "memory": "32Gi", "pods": "50"}
    assert n["metadata"]["labels"]["kubernetes.io/hostname"] == "n1" and n["metadata"]["labels"]["zone"] == "a"
    assert n["spec"] == {}  # no taint


def test_free_ports_are_distinct_and_bindable_on_loopback(cpmod):
    ports = cpmod.free_ports(5)
    assert len(set(ports)) == 5
    for p in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


def test_the_audit_policy_records_only_the_identities_under_test(cpmod):
    pol = cpmod._audit_policy(["hrl-descheduler", "hrl-extender"])
    assert pol["rules"] == [{"level": "Metadata", "users": ["hrl-descheduler", "hrl-extender"]}, {"level": "None"}]


def test_the_descheduler_identity_may_evict_but_never_delete(cpmod):
    rules = cpmod.IDENTITIES["hrl-descheduler"]
    verbs = {(r, v) for rule in rules for r in rule["resources"] for v in rule["verbs"]}
    assert ("pods/eviction", "create") in verbs
    # patch: the pod-deletion-cost annotation of a make-before-break move; never create, update or delete
    assert not {v for r, v in verbs if r == "pods"} - {"get", "list", "watch", "patch"}


def test_the_descheduler_identity_has_the_shipped_scaling_and_resize_rights_and_no_more(cpmod):
    rules = cpmod.IDENTITIES["hrl-descheduler"]
    verbs = {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    assert {("apps", "deployments/scale", v) for v in ("get", "update", "patch")} <= verbs
    assert {v for g, r, v in verbs if r == "horizontalpodautoscalers"} == {"list", "watch"}
    assert {(g, v) for g, r, v in verbs if r == "verticalpodautoscalers"} == {
        ("autoscaling.k8s.io", "get"),
        ("autoscaling.k8s.io", "list"),
    }
    writes = {(r, v) for _g, r, v in verbs if v not in ("get", "list", "watch")}
    assert writes == {
        ("pods/eviction", "create"),
        ("deployments/scale", "update"),
        ("deployments/scale", "patch"),
        ("pods/resize", "patch"),
        ("pods", "patch"),  # make-before-break moves: the pod-deletion-cost annotation
        ("events", "create"),  # events.k8s.io: one per eviction, scale and loop hold
    }
    assert ("", "resourcequotas", "list") in verbs  # before a surge: room for one more pod


def test_missing_binaries_without_go_is_a_clear_error_not_a_skip(cpmod, tmp_path, monkeypatch):
    monkeypatch.setenv("HRL_CP_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no Go here (it lives in /usr/local/go/bin)
    with pytest.raises(cpmod.ControlPlaneError, match="Go is not installed"):
        cpmod.resolve_bin_dir(build=True)


def test_missing_binaries_are_reported_by_name_when_building_is_not_asked_for(cpmod, tmp_path, monkeypatch):
    monkeypatch.setenv("HRL_CP_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(cpmod.ControlPlaneError, match="kube-apiserver.*run hack/build-controlplane.sh"):
        cpmod.resolve_bin_dir(build=False)


def test_the_plugin_build_without_go_is_a_clear_error_and_names_what_is_missing(cpmod, tmp_path, monkeypatch):
    monkeypatch.setenv("HRL_CP_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(
        cpmod.ControlPlaneError, match="kube-scheduler, hrl-score-check.*run hack/build-scheduler-plugin"
    ):
        cpmod.plugin_bin_dir(build=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    with pytest.raises(cpmod.ControlPlaneError, match="the plugin's binaries are missing .* Go is not installed"):
        cpmod.plugin_bin_dir(build=True)


def test_wait_for_returns_the_value_or_names_what_timed_out(cpmod):
    assert cpmod.wait_for(lambda: 42, 1, "the answer") == 42
    with pytest.raises(cpmod.ControlPlaneError, match="timed out after 0.1 s waiting for nothing"):
        cpmod.wait_for(lambda: None, 0.1, "nothing", 0.02)


def test_tail_returns_the_last_lines_or_nothing(cpmod, tmp_path):
    f = tmp_path / "x.log"
    f.write_text("".join(f"line {i}\n" for i in range(100)))
    assert cpmod.tail(f, 2) == "line 98\nline 99"
    assert cpmod.tail(tmp_path / "missing.log") == ""


def test_a_state_file_is_needed_to_attach(cpmod, tmp_path):
    with pytest.raises(cpmod.ControlPlaneError, match="no control plane recorded"):
        cpmod.ControlPlane.attach(tmp_path)
    assert os.listdir(tmp_path) == ["logs"]
