"""The Helm chart manifests/charts/hrl-scheduler, checked without a cluster, with Helm built from its Go module
(hack/build-helm.sh): `helm lint`, `helm template` over the matrix of its modes (every combination renders, its
configurations load with our own loaders and agree with the objects around them), the values every adopter sets
(priority, placement, labels, annotations, extra env and volumes, ServiceAccount annotations, nameOverride) on every
workload, PodDisruptionBudgets, the NetworkPolicy, bundles from a volume, NOTES.txt, `helm package`, the images
being what `make images` builds, installing in any namespace, and the generated files (kustomize manifests, values
schema, the RBAC table of docs/operations.md) in step with the chart. The values schema's refusals are in
test_chart_schema.py, the alerts in test_chart_alerts.py, the server-side checks in
tests/integration/test_chart_controlplane.py."""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_helpers import (
    CHART,
    NS,
    ROOT,
    config_of,
    find,
    helm,
    one,
    pod_spec,
    pod_template,
    render,
    selects,
    template,
    workloads,
)

from descheduler.config import load_descheduler_config, placement_from_config, planner_from_config
from extender.config import build_policy, load_extender_config

#: learnedPolicies: off, on with the cache Deployment (the default), on with the cache as a sidecar
LEARNED = {
    "off": {"enabled": False},
    "deployment": {"enabled": True},
    "sidecar": {"enabled": True, "cache": {"mode": "sidecar"}},
}
MODES = list(itertools.product(["second", "dropin", "none"], ["cronjob", "interval"], list(LEARNED), [False, True]))


def values_of(scheduler: str, descheduler: str, learned: str, tls: bool) -> dict[str, Any]:
    return {
        "scheduler": {"mode": scheduler},
        "descheduler": {"mode": descheduler},
        "learnedPolicies": LEARNED[learned],
        "tls": {"enabled": tls},
        "metrics": {
            "serviceMonitor": {"enabled": True},
            "podMonitor": {"enabled": True},
            "prometheusRule": {"enabled": True},
            "grafanaDashboard": {"enabled": True},
        },
    }


def test_helm_lint_passes_with_the_defaults_and_with_every_option_on():
    everything = values_of("second", "interval", "deployment", True)
    everything["descheduler"].update(
        namespaces=["shop"], podLabels={"team": "sched"}, extraEnv=[{"name": "A", "value": "1"}]
    )
    everything["learnedPolicies"]["bundles"] = {"volume": {"configMap": {"name": "b"}}, "placement": "low"}
    for values in ({}, everything, {"nameOverride": "acme"}):
        out = subprocess.run(
            [helm(), "lint", "--strict", str(CHART), "--namespace", NS, "-f", "-"],
            input=yaml.safe_dump(values),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("scheduler,descheduler,learned,tls", MODES)
def test_every_combination_renders_configurations_our_loaders_accept_and_the_objects_agree(
    scheduler, descheduler, learned, tls
):
    objs = render(values_of(scheduler, descheduler, learned, tls))
    ext = load_extender_config(config_of(objs, "hrl-extender-config"))
    des = load_descheduler_config(config_of(objs, "hrl-descheduler-config"))
    # the extender: TLS and the learned policy together, probes on the configured scheme
    assert bool(ext.listen.tls) == tls and (ext.policy.name == "learned") == (learned != "off")
    dep = one(objs, "Deployment", "hrl-extender")
    containers = {c["name"]: c for c in pod_spec(dep)["containers"]}
    scheme = "HTTPS" if tls else "HTTP"
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):  # on the health listener, its TLS
        get = containers["extender"][probe]["httpGet"]
        assert (get["port"], get["scheme"]) == ("health", scheme), probe
    health = {p["name"]: p["containerPort"] for p in containers["extender"]["ports"]}["health"]
    assert health == ext.listen.health_port != ext.listen.port
    assert ("embedding-cache" in containers) == (learned == "sidecar")
    assert dep["spec"]["replicas"] == (1 if learned == "sidecar" else 2)
    if learned == "sidecar":
        port = ext.cache.address.rpartition(":")[2]
        assert ext.cache.address == f"127.0.0.1:{port}"
        assert [p["containerPort"] for p in containers["embedding-cache"]["ports"]][0] == int(port)
        assert des.cache.address == f"hrl-extender.{NS}.svc:{port}" and des.planner.name == "hierarchical"
        assert not find(objs, "Deployment", "hrl-embedding-cache")
    elif learned == "deployment":
        cache = one(objs, "Deployment", "hrl-embedding-cache")
        svc = one(objs, "Service", "hrl-embedding-cache")
        (c,) = pod_spec(cache)["containers"]
        assert c["image"] == "ghcr.io/hrl-scheduler/hrl-embedding-cache:0.1.0"
        assert selects(svc["spec"]["selector"], pod_template(cache)["metadata"]["labels"])
        (grpc,) = [p for p in svc["spec"]["ports"] if p["name"] == "grpc-cache"]
        address = f"hrl-embedding-cache.{NS}.svc:{grpc['port']}"
        assert ext.cache.address == des.cache.address == address and des.planner.name == "hierarchical"
        assert pod_spec(cache)["automountServiceAccountToken"] is False
    else:
        assert ext.cache is None and des.cache is None
    # the descheduler: CronJob with its state on the PVC, or the interval Deployment with leader election
    if descheduler == "cronjob":
        cj = one(objs, "CronJob", "hrl-descheduler")
        spec = pod_spec(cj)
        mounts = {m["mountPath"]: m["name"] for m in spec["containers"][0]["volumeMounts"]}
        vols = {v["name"]: v for v in spec["volumes"]}
        claim = vols[mounts[str(Path(des.state_file).parent)]]["persistentVolumeClaim"]["claimName"]
        assert one(objs, "PersistentVolumeClaim", claim) and "--once" in spec["containers"][0]["args"]
        assert not find(objs, "Deployment", "hrl-descheduler")
    else:
        d = one(objs, "Deployment", "hrl-descheduler")
        c = pod_spec(d)["containers"][0]
        assert des.state_file is None and des.leader_election.enabled and "--interval" in c["args"]
        assert des.leader_election.lease_name == "hrl-descheduler"
        assert {p["containerPort"] for p in c["ports"]} == {int(des.metrics.listen.rpartition(":")[2])}
        assert c["livenessProbe"]["httpGet"]["port"] == "metrics"
        assert not find(objs, "CronJob") and not find(objs, "PersistentVolumeClaim")
        assert one(objs, "Role", "hrl-scheduler:descheduler-leader-election")
    # every Deployment has a PDB that selects its pods and lets a drain take one at a time
    for w in find(objs, "Deployment"):
        pdb = one(objs, "PodDisruptionBudget", w["metadata"]["name"])
        assert pdb["spec"]["maxUnavailable"] == 1 and selects(
            pdb["spec"]["selector"], pod_template(w)["metadata"]["labels"]
        )
    assert len(find(objs, "PodDisruptionBudget")) == len(find(objs, "Deployment"))
    # the scheduler: its extenders[] entry reaches the extender on the right scheme, port and prefix
    if scheduler == "none":
        assert not find(objs, "Deployment", "hrl-scheduler")
        return
    cm = "hrl-scheduler-config" if scheduler == "second" else "hrl-scheduler-dropin"
    key = "config.yaml" if scheduler == "second" else "kube-scheduler-config.yaml"
    (reg,) = config_of(objs, cm, key)["extenders"]
    assert reg["urlPrefix"] == f"{scheme.lower()}://hrl-extender.{NS}.svc:{ext.listen.port}{ext.url_prefix}"
    assert reg["enableHTTPS"] is tls and reg["ignorable"] is True and reg["nodeCacheCapable"] is True
    if tls:
        assert reg["tlsConfig"] == {"caFile": "/etc/hrl-scheduler-tls/ca.crt"}


@pytest.mark.parametrize(
    "kube,tag",
    [("1.36.3", "v1.36.3"), ("1.35.4", "v1.35.4"), ("v1.35.2+k3s1", "v1.35.2"), ("1.36.0-gke.100", "v1.36.0")],
)
def test_the_second_scheduler_runs_the_kube_scheduler_of_the_clusters_version(kube, tag):
    dep = one(render({}, kube), "Deployment", "hrl-scheduler")
    assert pod_spec(dep)["containers"][0]["image"] == f"registry.k8s.io/kube-scheduler:{tag}"


def test_images_are_fully_qualified_and_set_by_repository_tag_or_digest():
    digest = "sha256:" + "ab" * 32
    objs = render(
        {
            "extender": {"image": {"repository": "registry.example/team/ext", "tag": "1.2.3"}},
            "descheduler": {"image": {"repository": "registry.example/team/des", "tag": "9", "digest": digest}},
            "scheduler": {"image": {"tag": "v1.35.9"}},
        }
    )
    assert (
        pod_spec(one(objs, "Deployment", "hrl-extender"))["containers"][0]["image"] == "registry.example/team/ext:1.2.3"
    )
    assert (
        pod_spec(one(objs, "CronJob", "hrl-descheduler"))["containers"][0]["image"]
        == f"registry.example/team/des@{digest}"
    )
    image = pod_spec(one(objs, "Deployment", "hrl-scheduler"))["containers"][0]["image"]
    assert image == "registry.k8s.io/kube-scheduler:v1.35.9"


def built_images() -> dict[str, str]:
    """The images hack/build-images.sh builds by default: stage -> ghcr.io/hrl-scheduler/NAME:<pyproject version>."""
    text = (ROOT / "hack" / "build-images.sh").read_text()
    registry = re.search(r"registry=\$\{IMAGE_REGISTRY:-([^}]+)\}", text)[1]
    block = re.search(r"IMAGES=\(\n(.*?)\n\)", text, re.S)[1]
    version = re.search(r'^version = "(.*)"', (ROOT / "pyproject.toml").read_text(), re.M)[1]
    pairs = [ln.split()[:2] for ln in block.splitlines() if ln.strip().startswith('"')]
    return {stage.strip('"'): f"{registry}/{name.strip(chr(34))}:{version}" for name, stage in pairs}


def test_the_default_images_are_the_ones_make_images_builds():
    images = built_images()
    assert set(images) == {"extender", "descheduler", "embedding-cache", "kube-scheduler"}
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert images["extender"].endswith(f":{chart['appVersion']}")  # the tag the chart defaults to
    objs = render({"learnedPolicies": {"enabled": True}, "descheduler": {"mode": "interval"}})
    used = {c["name"]: c["image"] for w in workloads(objs) for c in pod_spec(w)["containers"]}
    assert used["extender"] == images["extender"] and used["descheduler"] == images["descheduler"]
    assert used["embedding-cache"] == images["embedding-cache"]
    sidecar = render({"learnedPolicies": {"enabled": True, "cache": {"mode": "sidecar"}}})
    containers = {c["name"]: c["image"] for c in pod_spec(one(sidecar, "Deployment", "hrl-extender"))["containers"]}
    assert containers["embedding-cache"] == images["embedding-cache"]
    plugin = render({"scheduler": {"scoring": {"mode": "plugin"}}})  # the scheduler with HRLScore (issue 22)
    assert pod_spec(one(plugin, "Deployment", "hrl-scheduler"))["containers"][0]["image"] == images["kube-scheduler"]


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_every_process_of_the_release_logs_in_the_charts_log_format_the_second_scheduler_included(fmt):
    renders = [
        render({"logFormat": fmt} if fmt != "json" else {}),  # json: the default
        render({"logFormat": fmt, "learnedPolicies": {"enabled": True}, "descheduler": {"mode": "interval"}}),
        render({"logFormat": fmt, "learnedPolicies": {"enabled": True, "cache": {"mode": "sidecar"}}}),
        render({"logFormat": fmt, "scheduler": {"scoring": {"mode": "plugin"}}}),
    ]
    seen = set()
    for objs in renders:
        for w in workloads(objs):
            for c in pod_spec(w)["containers"]:
                argv = [*c.get("command", []), *c.get("args", [])]
                flag = "--logging-format" if c["name"] == "kube-scheduler" else "--log-format"  # component-base's
                given = [a.split("=", 1)[1] for a in argv if a.startswith(f"{flag}=")]
                given += [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]
                assert given == [fmt], (w["metadata"]["name"], c["name"], argv)
                seen.add(c["name"])
    assert seen == {"extender", "descheduler", "embedding-cache", "kube-scheduler"}


def test_the_chart_installs_with_its_defaults_in_any_namespace():
    for ns in ("default", "hrl-scheduler-system", "kube-public"):
        objs = render({}, namespace=ns)
        des = load_descheduler_config(config_of(objs, "hrl-descheduler-config"))
        assert {"kube-system", ns} <= set(des.excluded_namespaces)
        # no namespace is managed by default: no RoleBinding to act anywhere (NOTES.txt says how to name them)
        assert not [b for b in find(objs, "RoleBinding") if b["roleRef"]["name"] == "hrl-scheduler:descheduler-act"]
    bad = template({"descheduler": {"namespaces": ["default"]}}, check=False, namespace="default")
    assert bad.returncode != 0 and 'descheduler.namespaces: "default" is not allowed' in bad.stderr


def test_the_descheduler_gets_one_rolebinding_per_managed_namespace_or_an_explicit_cluster_wide_binding():
    objs = render({"descheduler": {"namespaces": ["shop", "payments"]}})
    act = [b for b in find(objs, "RoleBinding") if b["roleRef"]["name"] == "hrl-scheduler:descheduler-act"]
    assert sorted(b["metadata"]["namespace"] for b in act) == ["payments", "shop"]
    assert not [b for b in find(objs, "ClusterRoleBinding") if b["roleRef"]["name"] == "hrl-scheduler:descheduler-act"]
    wide = render({"descheduler": {"clusterWide": True}})
    assert [b["metadata"]["name"] for b in find(wide, "ClusterRoleBinding") if "act" in b["roleRef"]["name"]] == [
        "hrl-scheduler:descheduler-act"
    ]
    assert not [b for b in find(wide, "RoleBinding") if b["roleRef"]["name"] == "hrl-scheduler:descheduler-act"]


def test_the_cronjob_pushes_to_the_pushgateway_under_the_release_group_when_one_is_configured():
    cfg = load_descheduler_config(
        config_of(render({"metrics": {"pushgateway": {"url": "http://pg.monitoring:9091"}}}), "hrl-descheduler-config")
    )
    assert (cfg.metrics.pushgateway, cfg.metrics.job) == ("http://pg.monitoring:9091", "hrl-descheduler")
    assert cfg.metrics.grouping_key == {"namespace": NS} and cfg.state_file  # the counters carry over in it
    assert load_descheduler_config(config_of(render({}), "hrl-descheduler-config")).metrics.pushgateway is None


def test_shadow_mode_answers_neutral_and_logs_its_decisions_to_a_volume_of_the_extender():
    objs = render({"extender": {"mode": "shadow"}})
    ext = load_extender_config(config_of(objs, "hrl-extender-config"))
    assert ext.mode == "shadow" and ext.records_decisions
    assert ext.decisions.log == "/var/log/hrl-extender/decisions.jsonl"
    spec = pod_spec(one(objs, "Deployment", "hrl-extender"))
    (c,) = [c for c in spec["containers"] if c["name"] == "extender"]
    assert {"name": "decisions", "mountPath": "/var/log/hrl-extender"} in c["volumeMounts"]
    assert any(v["name"] == "decisions" and "emptyDir" in v for v in spec["volumes"])
    active = load_extender_config(config_of(render(), "hrl-extender-config"))
    assert active.mode == "active" and not active.records_decisions
    out = template({"extender": {"mode": "dry"}}, check=False)
    assert out.returncode != 0 and "/extender/mode" in out.stderr


def test_without_a_health_port_the_probes_go_to_the_extenders_port():
    objs = render({"extender": {"healthPort": None}})
    ext = load_extender_config(config_of(objs, "hrl-extender-config"))
    (c,) = [c for c in pod_spec(one(objs, "Deployment", "hrl-extender"))["containers"] if c["name"] == "extender"]
    assert ext.listen.health_port is None and [p["name"] for p in c["ports"]] == ["extender"]
    assert {c[p]["httpGet"]["port"] for p in ("startupProbe", "livenessProbe", "readinessProbe")} == {"extender"}


def test_config_values_are_merged_over_the_generated_files():
    objs = render(
        {
            "extender": {"config": {"maxSnapshotAgeSeconds": 60, "policy": {"targetUtilization": 0.5}}},
            "descheduler": {"config": {"caps": {"total": 3}}},
        }
    )
    ext = load_extender_config(config_of(objs, "hrl-extender-config"))
    des = load_descheduler_config(config_of(objs, "hrl-descheduler-config"))
    assert ext.max_snapshot_age_seconds == 60 and ext.policy.target_utilization == 0.5
    assert des.caps.total == 3 and des.caps.per_node == 2


def test_small_and_large_numbers_helm_writes_in_exponent_notation_reach_the_components_as_numbers(tmp_path):
    # Helm's toYaml writes 0.00005 as 5e-05: a string to a YAML 1.1 reader, a number to kubectl, Helm and ours
    objs = render(
        {
            "extender": {"config": {"limits": {"requestDeadlineSeconds": 0.00005, "maxLoopBusySeconds": 0.00001}}},
            "descheduler": {"config": {"planner": {"autoscaler": {"targetUtilization": 0.00005}}}},
        }
    )
    text = one(objs, "ConfigMap", "hrl-extender-config")["data"]["config.yaml"]
    assert "5e-05" in text
    (tmp_path / "extender.yaml").write_text(text)
    (tmp_path / "descheduler.yaml").write_text(one(objs, "ConfigMap", "hrl-descheduler-config")["data"]["config.yaml"])
    ext = load_extender_config(tmp_path / "extender.yaml")  # from the file, as the extender reads its ConfigMap
    assert (ext.limits.request_deadline_seconds, ext.limits.max_loop_busy_seconds) == (0.00005, 0.00001)
    des = load_descheduler_config(tmp_path / "descheduler.yaml")
    assert des.planner.autoscaler.target_utilization == 0.00005


def test_the_metrics_service_exposes_every_metrics_port_of_the_release():
    for learned in ("deployment", "sidecar"):
        objs = render(values_of("second", "interval", learned, False))
        svc = one(objs, "Service", "hrl-scheduler-metrics")
        assert {p["name"]: p["targetPort"] for p in svc["spec"]["ports"]} == {
            "extender": "extender",
            "cache-metrics": "cache-metrics",
            "descheduler-metrics": "metrics",
        }
        sm = one(objs, "ServiceMonitor", "hrl-scheduler")
        assert [e["port"] for e in sm["spec"]["endpoints"]] == ["extender", "cache-metrics", "descheduler-metrics"]
        pm = one(objs, "PodMonitor", "hrl-scheduler")
        named = {
            p["name"] for w in find(objs, "Deployment") for c in pod_spec(w)["containers"] for p in c.get("ports", [])
        }
        assert {e["port"] for e in pm["spec"]["podMetricsEndpoints"]} <= named
        # the Service selects every pod with a metrics port: the cache's own Deployment too
        with_ports = [w for w in find(objs, "Deployment") if w["metadata"]["name"] != "hrl-scheduler"]
        assert all(selects(svc["spec"]["selector"], pod_template(w)["metadata"]["labels"]) for w in with_ports)


# ---- what adopters set on every workload ---------------------------------------------------------------------


POD_VALUES = {
    "priorityClassName": "team-critical",
    "nodeSelector": {"pool": "system"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "system", "effect": "NoSchedule"}],
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["system"]}]}]}}},
    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                   "whenUnsatisfiable": "ScheduleAnyway"}],
    "podLabels": {"team": "platform", "app.kubernetes.io/name": "overridden?"},
    "podAnnotations": {"example.com/owner": "platform"},
    "extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}],
    "extraVolumes": [{"name": "extra-ca", "configMap": {"name": "corporate-ca"}}],
    "extraVolumeMounts": [{"name": "extra-ca", "mountPath": "/etc/extra-ca", "readOnly": True}],
}  # fmt: skip
#: workload -> (the values key, its main container)
WORKLOADS = {
    ("Deployment", "hrl-extender"): ("extender", "extender"),
    ("CronJob", "hrl-descheduler"): ("descheduler", "descheduler"),
    ("Deployment", "hrl-scheduler"): ("scheduler", "kube-scheduler"),
    ("Deployment", "hrl-embedding-cache"): ("learnedPolicies.cache", "embedding-cache"),
}


def _set(values: dict, dotted: str, sub: dict) -> dict:
    node = values
    *parents, last = dotted.split(".")
    for p in parents:
        node = node.setdefault(p, {})
    node.setdefault(last, {}).update(sub)
    return values


def test_every_workload_takes_priority_placement_labels_annotations_extra_env_and_volumes():
    values: dict = {"learnedPolicies": {"enabled": True}}
    for key, _ in WORKLOADS.values():
        _set(values, key, POD_VALUES)
    objs = render(values)
    for (kind, name), (_, container) in WORKLOADS.items():
        tmpl = pod_template(one(objs, kind, name))
        spec = tmpl["spec"]
        where = f"{kind}/{name}"
        assert spec["priorityClassName"] == "team-critical", where
        assert spec["nodeSelector"] == POD_VALUES["nodeSelector"] and spec["tolerations"] == POD_VALUES["tolerations"]
        assert spec["affinity"] == POD_VALUES["affinity"], where  # replaces the default anti-affinity
        assert spec["topologySpreadConstraints"] == POD_VALUES["topologySpreadConstraints"], where
        labels = tmpl["metadata"]["labels"]
        assert labels["team"] == "platform" and labels["app.kubernetes.io/name"] == name, where  # the chart's win
        assert tmpl["metadata"]["annotations"]["example.com/owner"] == "platform", where
        (c,) = [c for c in spec["containers"] if c["name"] == container]
        assert {"name": "HTTPS_PROXY", "value": "http://proxy:3128"} in c["env"], where
        assert {"name": "extra-ca", "mountPath": "/etc/extra-ca", "readOnly": True} in c["volumeMounts"], where
        assert {"name": "extra-ca", "configMap": {"name": "corporate-ca"}} in spec["volumes"], where
    # the interval descheduler keeps its own env next to the extra one
    interval = render(_set({"descheduler": {"mode": "interval"}}, "descheduler", {"extraEnv": POD_VALUES["extraEnv"]}))
    env = [e["name"] for e in pod_spec(one(interval, "Deployment", "hrl-descheduler"))["containers"][0]["env"]]
    assert env == ["POD_NAME", "POD_NAMESPACE", "HTTPS_PROXY"]


def test_the_defaults_are_system_cluster_critical_and_one_replica_per_node_preferred():
    objs = render({"learnedPolicies": {"enabled": True}})
    for kind, name in WORKLOADS:
        spec = pod_spec(one(objs, kind, name))
        assert spec["priorityClassName"] == "system-cluster-critical", name  # as the upstream descheduler's chart
        (term,) = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == {"app.kubernetes.io/name": name}
        assert "tolerations" not in spec and "topologySpreadConstraints" not in spec
    assert "priorityClassName" not in pod_spec(
        one(render({"extender": {"priorityClassName": ""}}), "Deployment", "hrl-extender")
    )


def test_service_accounts_carry_their_annotations():
    ann = {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/x"}
    objs = render({k: {"serviceAccount": {"annotations": ann}} for k in ("extender", "descheduler", "scheduler")})
    for name in ("hrl-extender", "hrl-descheduler", "hrl-scheduler"):
        assert one(objs, "ServiceAccount", name)["metadata"]["annotations"] == ann
    assert "annotations" not in one(render({}), "ServiceAccount", "hrl-extender")["metadata"]


def test_name_override_renames_every_object_and_keeps_every_reference_consistent():
    values = {"nameOverride": "acme", "learnedPolicies": {"enabled": True}, "descheduler": {"mode": "interval",
              "namespaces": ["shop"]}, "metrics": {"serviceMonitor": {"enabled": True}}}  # fmt: skip
    objs = render(values)
    names = {o["metadata"]["name"] for o in objs}
    assert not [n for n in names if n.startswith("hrl-") or n.startswith("hrl-scheduler:")], sorted(names)
    assert {"acme-extender", "acme-descheduler", "acme-scheduler", "acme-embedding-cache", "acme-metrics",
            "acme:extender", "acme:descheduler", "acme:descheduler-act"} <= names  # fmt: skip
    ext = load_extender_config(config_of(objs, "acme-extender-config"))
    des = load_descheduler_config(config_of(objs, "acme-descheduler-config"))
    assert ext.cache.address == des.cache.address == f"acme-embedding-cache.{NS}.svc:50051"
    assert des.leader_election.lease_name == "acme-descheduler"
    sched = config_of(objs, "acme-scheduler-config")
    assert sched["extenders"][0]["urlPrefix"].startswith(f"http://acme-extender.{NS}.svc:")
    assert sched["leaderElection"]["resourceName"] == "acme-scheduler"
    # every Service, PDB and binding points at objects of this release
    pods = {w["metadata"]["name"]: pod_template(w)["metadata"]["labels"] for w in workloads(objs)}
    for svc in find(objs, "Service"):
        assert any(selects(svc["spec"]["selector"], labels) for labels in pods.values()), svc["metadata"]["name"]
    for pdb in find(objs, "PodDisruptionBudget"):
        assert selects(pdb["spec"]["selector"], pods[pdb["metadata"]["name"]])
    accounts = {o["metadata"]["name"] for o in find(objs, "ServiceAccount")}
    roles = {o["metadata"]["name"] for o in find(objs, "ClusterRole") + find(objs, "Role")}
    for b in find(objs, "RoleBinding") + find(objs, "ClusterRoleBinding"):
        assert all(s["name"] in accounts for s in b["subjects"]), b["metadata"]["name"]
        assert b["roleRef"]["name"] in roles or b["roleRef"]["name"].startswith(("system:", "extension-")), b
    for w in workloads(objs):
        sa = pod_spec(w).get("serviceAccountName")
        assert sa is None or sa in accounts


# ---- disruption and network policy ---------------------------------------------------------------------------


def test_no_pdb_blocks_a_drain_and_they_can_be_turned_off():
    objs = render({"learnedPolicies": {"enabled": True, "cache": {"mode": "sidecar"}}})
    pdb = one(objs, "PodDisruptionBudget", "hrl-extender")
    assert one(objs, "Deployment", "hrl-extender")["spec"]["replicas"] == 1
    # one replica and maxUnavailable 1: the drain evicts it (kube-scheduler goes on without the ignorable extender)
    assert pdb["spec"] == {**pdb["spec"], "maxUnavailable": 1, "unhealthyPodEvictionPolicy": "AlwaysAllow"}
    assert not find(render({"podDisruptionBudgets": {"enabled": False}}), "PodDisruptionBudget")


def _policy(objs, name: str) -> dict[str, Any]:
    return one(objs, "NetworkPolicy", name)["spec"]


def test_the_network_policy_lets_only_the_scheduler_call_the_extender_and_the_metrics_namespace_scrape():
    objs = render({"learnedPolicies": {"enabled": True}, "descheduler": {"mode": "interval"}})
    labels = {w["metadata"]["name"]: pod_template(w)["metadata"]["labels"] for w in workloads(objs)}
    ext = _policy(objs, "hrl-extender")
    assert selects(ext["podSelector"], labels["hrl-extender"]) and ext["policyTypes"] == ["Ingress"]
    (rule,) = ext["ingress"]
    assert rule["ports"] == [{"port": "extender", "protocol": "TCP"}]
    peers = rule["from"]
    pod_peers = [p for p in peers if "podSelector" in p]
    assert len(pod_peers) == 1 and selects(pod_peers[0]["podSelector"], labels["hrl-scheduler"])
    assert not any(selects(p["podSelector"], labels[n]) for p in pod_peers for n in labels if n != "hrl-scheduler")
    assert [p for p in peers if "namespaceSelector" in p] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]
    cache = _policy(objs, "hrl-embedding-cache")
    grpc = next(r for r in cache["ingress"] if r["ports"][0]["port"] == "grpc-cache")
    allowed = {n for n in labels for p in grpc["from"] if selects(p["podSelector"], labels[n])}
    assert allowed == {"hrl-extender", "hrl-descheduler"}
    des = _policy(objs, "hrl-descheduler")
    assert [r["ports"] for r in des["ingress"]] == [[{"port": "metrics", "protocol": "TCP"}]]
    # a CronJob run accepts nothing; no metrics namespace: no metrics peers at all
    quiet = render({"networkPolicy": {"metricsNamespace": ""}})
    assert _policy(quiet, "hrl-descheduler")["ingress"] == []
    assert [p for p in _policy(quiet, "hrl-extender")["ingress"][0]["from"] if "namespaceSelector" in p] == []
    assert not find(render({"networkPolicy": {"enabled": False}}), "NetworkPolicy")


def test_a_dropin_extender_takes_its_callers_from_extender_from_and_is_open_without_them():
    peer = {"ipBlock": {"cidr": "10.0.0.0/24"}}
    objs = render({"scheduler": {"mode": "dropin"}, "networkPolicy": {"extenderFrom": [peer]}})
    (rule,) = _policy(objs, "hrl-extender")["ingress"]
    assert rule["from"][0] == peer and not [p for p in rule["from"] if "podSelector" in p]
    (open_rule,) = _policy(render({"scheduler": {"mode": "dropin"}}), "hrl-extender")["ingress"]
    assert "from" not in open_rule  # any source, and NOTES.txt warns about it (test below)


# ---- bundles, NOTES, package ---------------------------------------------------------------------------------


def test_bundles_from_a_volume_reach_both_components_and_load(tmp_path):
    volume = {"configMap": {"name": "trained", "items": [{"key": "low.manifest.json", "path": "low/manifest.json"}]}}
    bundles = {"volume": volume, "placement": "v2/low", "highLevel": "v2/high", "encoder": "v2/encoder"}
    objs = render({"learnedPolicies": {"enabled": True, "bundles": bundles}})
    for kind, name in (("Deployment", "hrl-extender"), ("CronJob", "hrl-descheduler")):
        spec = pod_spec(one(objs, kind, name))
        assert {"name": "bundles", **volume} in spec["volumes"], name
        assert {"name": "bundles", "mountPath": "/etc/hrl-bundles", "readOnly": True} in spec["containers"][0][
            "volumeMounts"
        ]
    ext_doc, des_doc = config_of(objs, "hrl-extender-config"), config_of(objs, "hrl-descheduler-config")
    assert ext_doc["policy"]["bundle"] == des_doc["placement"]["bundle"] == "/etc/hrl-bundles/v2/low"
    assert des_doc["planner"]["intentPolicy"]["bundle"] == "/etc/hrl-bundles/v2/high"
    assert "bundle" not in des_doc["planner"]["autoscaler"]  # the intent autoscaler carries the high level's targets
    assert des_doc["cache"]["encoderBundle"] == "/etc/hrl-bundles/v2/encoder"
    # the same layout on disk (what the volume would hold): the components load every bundle from it
    root = tmp_path / "etc-hrl-bundles"
    shutil.copytree(ROOT / "policy" / "bundles" / "hrl-scheduler", root / "v2")
    shutil.copytree(ROOT / "policy" / "bundles" / "encoder", root / "v2" / "encoder")
    text = yaml.safe_dump(ext_doc).replace("/etc/hrl-bundles", str(root))
    ext = load_extender_config(yaml.safe_load(text), check_files=True)
    des = load_descheduler_config(yaml.safe_load(yaml.safe_dump(des_doc).replace("/etc/hrl-bundles", str(root))),
                                  check_files=True)  # fmt: skip
    assert type(build_policy(ext)).__name__ == type(placement_from_config(des)).__name__ == "LearnedPlacement"
    assert type(planner_from_config(des).intent_policy).__name__ == "LearnedIntent"  # v2/high's, not the image's
    # the application's SLO reaches every member of the served high level
    slo = config_of(render({"learnedPolicies": {"enabled": True, "sloP95Ms": 250}}), "hrl-descheduler-config")
    members = planner_from_config(load_descheduler_config(slo)).intent_policy.members
    assert slo["planner"]["intentPolicy"]["sloP95Ms"] == 250 and {m.featurizer.slo_p95_ms for m in members} == {250}
    # without a volume the image's bundles are used; naming directories without one is refused
    plain = config_of(render({"learnedPolicies": {"enabled": True}}), "hrl-extender-config")
    assert plain["policy"]["bundle"] is None
    bad = template({"learnedPolicies": {"bundles": {"placement": "low"}}}, check=False)
    assert bad.returncode != 0 and "learnedPolicies.bundles.volume, which is not set" in bad.stderr


def notes(values: dict[str, Any], namespace: str = NS) -> str:
    out = subprocess.run(
        [helm(), "install", "hrl", str(CHART), "--dry-run=client", "--namespace", namespace, "-f", "-"],
        input=yaml.safe_dump(values),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split("NOTES:", 1)[1]


def test_the_notes_say_how_to_opt_in_whether_it_is_a_dry_run_and_what_is_not_configured_yet():
    text = notes({})
    assert "schedulerName: hrl-scheduler" in text and "a DRY RUN" in text
    assert "descheduler.namespaces is empty" in text and "networkPolicy.extenderFrom is empty" not in text
    live = notes({"descheduler": {"dryRun": False, "namespaces": ["shop", "web"]}, "scheduler": {"mode": "dropin"}})
    assert "DRY RUN" not in live and "It may evict and scale in: shop, web." in live
    assert "hrl-scheduler-dropin" in live and "networkPolicy.extenderFrom is empty" in live


def test_helm_package_makes_an_installable_archive_with_a_real_home(tmp_path):
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["home"].startswith("https://") and ".invalid" not in chart["home"]
    out = subprocess.run(
        [helm(), "package", str(CHART), "-d", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    (tgz,) = tmp_path.glob("hrl-scheduler-*.tgz")
    with tarfile.open(tgz) as tf:
        members = set(tf.getnames())
    for f in ("values.schema.json", "templates/NOTES.txt", "files/alerts.yaml", "templates/networkpolicy.yaml"):
        assert f"hrl-scheduler/{f}" in members, f
    rendered = subprocess.run(
        [helm(), "template", "hrl", str(tgz), "-n", NS], capture_output=True, text=True, timeout=120
    )
    assert rendered.returncode == 0 and "kind: NetworkPolicy" in rendered.stdout, rendered.stderr
    assert "chart:" in (ROOT / "Makefile").read_text()  # `make chart` runs helm package into out/charts


def test_the_generated_files_match_the_chart():
    """The kustomize manifests, values.schema.json and the RBAC table of docs/operations.md (hack/gen-manifests.py)."""
    out = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "hack" / "gen-manifests.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr


def test_the_metrics_sources_reach_both_configurations_and_the_metrics_api_is_granted_only_when_read():
    uri = "prometheus+istio://prometheus.istio-system:9090?window=1m&namespace=shop"
    objs = render({"metricsSources": {"resourceUsage": {"uri": "metrics-api"}, "serviceSignals": {"uri": uri}}})
    ext = load_extender_config(config_of(objs, "hrl-extender-config"))
    des = load_descheduler_config(config_of(objs, "hrl-descheduler-config"))
    assert (
        ext.metrics_sources.resource_usage.uri == "metrics-api"
        and ext.metrics_sources.resource_usage.refresh_seconds == 30
    )
    assert des.metrics_sources.resource_usage.uri == "metrics-api" and des.metrics_sources.service_signals.uri == uri
    for role in ("hrl-scheduler:extender", "hrl-scheduler:descheduler"):
        rules = one(objs, "ClusterRole", role)["rules"]
        assert {"apiGroups": ["metrics.k8s.io"], "resources": ["pods"], "verbs": ["get", "list"]} in rules
    prom = render({"metricsSources": {"resourceUsage": {"uri": "prometheus+cadvisor://prometheus.monitoring:9090"}}})
    assert load_extender_config(config_of(prom, "hrl-extender-config")).metrics_sources.resource_usage.uri.startswith(
        "prometheus+cadvisor://"
    )
    off = render({})
    assert load_extender_config(config_of(off, "hrl-extender-config")).metrics_sources.resource_usage.uri is None
    for role in ("hrl-scheduler:extender", "hrl-scheduler:descheduler"):
        assert not any("metrics.k8s.io" in r["apiGroups"] for r in one(off, "ClusterRole", role)["rules"])
    bad = template({"metricsSources": {"resourceUsage": {"uri": "metrics-server"}}}, check=False)
    assert bad.returncode != 0 and "/metricsSources/resourceUsage/uri" in bad.stderr


def test_the_rbac_table_lists_every_rule_of_the_chart():
    text = (ROOT / "docs" / "operations.md").read_text()
    table = text.split("<!-- rbac:begin", 1)[1].split("<!-- rbac:end -->", 1)[0]
    objs = render({"descheduler": {"namespaces": ["shop"]}})
    for role in find(objs, "ClusterRole") + find(objs, "Role"):
        for rule in role["rules"]:
            for res in rule["resources"]:
                line = [ln for ln in table.splitlines() if f"`{role['metadata']['name']}`" in ln and res in ln]
                assert any(all(v in ln for v in rule["verbs"]) for ln in line), (role["metadata"]["name"], res)
