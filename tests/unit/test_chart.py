"""The Helm chart manifests/charts/hrl-scheduler, checked without a cluster, with Helm built from its Go module
(hack/build-helm.sh): `helm lint`, `helm template` over the matrix of its modes (every combination renders, its
configurations load with our own loaders and agree with the objects around them), values.schema.json and the
chart's own checks refusing bad values with one line naming the value, the kube-scheduler image following the
cluster's version, images by repository/tag/digest, the generated kustomize manifests in step with the chart,
and every PromQL expression of the alerts and the dashboard accepted by promtool and naming only metrics the
code exports. The server-side checks are in tests/integration/test_chart_controlplane.py."""

from __future__ import annotations

import itertools
import json
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from descheduler.config import load_descheduler_config
from extender.config import load_extender_config

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "manifests" / "charts" / "hrl-scheduler"
NS = "hrl-system"


@cache
def helm() -> str:
    out = subprocess.run([str(ROOT / "hack" / "build-helm.sh")], capture_output=True, text=True)
    assert out.returncode == 0, f"hack/build-helm.sh failed:\n{out.stderr[-3000:]}"
    return out.stdout.strip().splitlines()[-1]


def template(values: dict[str, Any] | None = None, *extra: str, check: bool = True) -> subprocess.CompletedProcess:
    cmd = [helm(), "template", "hrl", str(CHART), "--namespace", NS, "-f", "-", *extra]
    out = subprocess.run(cmd, input=yaml.safe_dump(values or {}), capture_output=True, text=True, timeout=120)
    if check:
        assert out.returncode == 0, out.stderr
    return out


@cache
def _render(values_json: str, kube: str) -> tuple[dict[str, Any], ...]:
    out = template(json.loads(values_json), "--kube-version", kube)
    return tuple(d for d in yaml.safe_load_all(out.stdout) if d)


def render(values: dict[str, Any] | None = None, kube: str = "1.36.3") -> tuple[dict[str, Any], ...]:
    return _render(json.dumps(values or {}, sort_keys=True), kube)


def find(objs, kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def one(objs, kind: str, name: str) -> dict[str, Any]:
    (o,) = find(objs, kind, name)
    return o


def pod_spec(o: dict[str, Any]) -> dict[str, Any]:
    return (
        o["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        if o["kind"] == "CronJob"
        else o["spec"]["template"]["spec"]
    )


def config_of(objs, name: str, key: str = "config.yaml") -> dict[str, Any]:
    return yaml.safe_load(one(objs, "ConfigMap", name)["data"][key])


MODES = list(itertools.product(["second", "dropin", "none"], ["cronjob", "interval"], [False, True], [False, True]))


def values_of(scheduler: str, descheduler: str, learned: bool, tls: bool) -> dict[str, Any]:
    return {
        "scheduler": {"mode": scheduler},
        "descheduler": {"mode": descheduler},
        "learnedPolicies": {"enabled": learned},
        "tls": {"enabled": tls},
        "metrics": {
            "serviceMonitor": {"enabled": True},
            "podMonitor": {"enabled": True},
            "prometheusRule": {"enabled": True},
            "grafanaDashboard": {"enabled": True},
        },
    }


def test_helm_lint_passes_with_the_defaults_and_with_every_option_on():
    for values in ({}, values_of("second", "interval", True, True)):
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
    assert bool(ext.listen.tls) == tls and (ext.policy.name == "learned") == learned
    dep = one(objs, "Deployment", "hrl-extender")
    containers = {c["name"]: c for c in pod_spec(dep)["containers"]}
    scheme = "HTTPS" if tls else "HTTP"
    assert containers["extender"]["readinessProbe"]["httpGet"]["scheme"] == scheme
    assert ("embedding-cache" in containers) == learned and (dep["spec"]["replicas"] == 1 if learned else True)
    if learned:
        port = ext.cache.address.rpartition(":")[2]
        assert [p["containerPort"] for p in containers["embedding-cache"]["ports"]][0] == int(port)
        assert des.cache.address == f"hrl-extender.{NS}.svc:{port}" and des.planner.name == "hierarchical"
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
        assert {p["containerPort"] for p in c["ports"]} == {int(des.metrics.listen.rpartition(":")[2])}
        assert c["livenessProbe"]["httpGet"]["port"] == "metrics"
        assert not find(objs, "CronJob") and not find(objs, "PersistentVolumeClaim")
        assert one(objs, "Role", "hrl-scheduler:descheduler-leader-election")
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
    defaults = render({})
    assert pod_spec(one(defaults, "Deployment", "hrl-extender"))["containers"][0]["image"] == (
        "ghcr.io/hrl-scheduler/hrl-extender:0.1.0"
    )


@pytest.mark.parametrize(
    "values,message",
    [
        ({"descheduler": {"mode": "weekly"}}, "/descheduler/mode"),
        ({"extender": {"image": {"digest": "latest"}}}, "/extender/image/digest"),
        ({"extender": {"port": 0}}, "/extender/port"),
        ({"extender": {"replica": 2}}, "replica"),
        ({"descheduler": {"namespaces": ["kube-system"]}}, 'descheduler.namespaces: "kube-system" is not allowed'),
        ({"descheduler": {"namespaces": [NS]}}, f'descheduler.namespaces: "{NS}" is not allowed'),
        (
            {"descheduler": {"mode": "interval"}, "metrics": {"pushgateway": {"url": "http://pg:9091"}}},
            "metrics.pushgateway.url",
        ),
    ],
)
def test_bad_values_are_refused_with_a_message_naming_the_value(values, message):
    out = template(values, check=False)
    assert out.returncode != 0 and message in out.stderr, out.stderr


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
    cfg = load_descheduler_config(config_of(render({}), "hrl-descheduler-config"))
    assert {"kube-system", NS} <= set(cfg.excluded_namespaces)


def test_the_cronjob_pushes_to_the_pushgateway_when_one_is_configured():
    cfg = load_descheduler_config(
        config_of(render({"metrics": {"pushgateway": {"url": "http://pg.monitoring:9091"}}}), "hrl-descheduler-config")
    )
    assert (cfg.metrics.pushgateway, cfg.metrics.job) == ("http://pg.monitoring:9091", "hrl-descheduler")
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


def test_the_metrics_service_exposes_every_metrics_port_of_the_release():
    objs = render(values_of("second", "interval", True, False))
    svc = one(objs, "Service", "hrl-scheduler-metrics")
    assert {p["name"]: p["targetPort"] for p in svc["spec"]["ports"]} == {
        "extender": "extender",
        "cache-metrics": "cache-metrics",
        "descheduler-metrics": "metrics",
    }
    sm = one(objs, "ServiceMonitor", "hrl-scheduler")
    assert [e["port"] for e in sm["spec"]["endpoints"]] == ["extender", "cache-metrics", "descheduler-metrics"]
    pm = one(objs, "PodMonitor", "hrl-scheduler")
    ports = {
        c["name"]: {p["name"] for p in c.get("ports", [])}
        for w in find(objs, "Deployment")
        for c in pod_spec(w)["containers"]
    }
    named = set().union(*ports.values())
    assert {e["port"] for e in pm["spec"]["podMetricsEndpoints"]} <= named


def test_the_generated_kustomize_manifests_match_the_chart():
    out = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "hack" / "gen-manifests.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr


# ---- the alerts and the dashboard: promtool, and the metric names the code exports ---------------------------


def exported_metric_names() -> set[str]:
    """Every sample name the extender, the descheduler and the cache export (their collectors instantiated on
    fresh registries, with the process metrics), plus what the Pushgateway adds to pushed groups."""
    from prometheus_client import CollectorRegistry

    from descheduler.metrics import DeschedulerMetrics
    from extender.metrics import ExtenderMetrics
    from policy.cache import CacheServer
    from policy.cache.metrics import CacheClientMetrics
    from policy.telemetry import register_process_metrics

    names: set[str] = set()
    regs = []
    r = CollectorRegistry()
    ExtenderMetrics(r)
    CacheClientMetrics(r)
    register_process_metrics(r, "hrl-extender")
    regs.append(r)
    d = DeschedulerMetrics()
    d.leader.labels(name="hrl-descheduler").set(1)
    regs.append(d.registry)
    server = CacheServer("127.0.0.1:0")
    regs.append(server.registry)
    for reg in regs:
        for fam in reg.collect():
            names.add(fam.name)
            names.update(s.name for s in fam.samples)
    # histogram / counter families list their sample names only when a child exists: add the standard suffixes
    for fam in list(names):
        names.update({f"{fam}_bucket", f"{fam}_count", f"{fam}_sum", f"{fam}_total"})
    return names | {"push_time_seconds", "push_failure_time_seconds"}  # added by the Pushgateway


PROMQL_FUNCS = {
    "sum", "rate", "increase", "max", "min", "by", "clamp_min", "histogram_quantile", "time", "count", "le",
    "without", "on", "ignoring", "and", "or", "unless", "avg", "label_values",
}  # fmt: skip


def metric_names_in(expr: str) -> set[str]:
    """Identifiers of an expression that are metric names: outside {...} label matchers and quotes, not
    functions, keywords, label names after by/without, or durations."""
    e = re.sub(r'"[^"]*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", "", e)
    e = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", e)
    e = re.sub(r"\[[^\]]*\]", "", e)
    idents = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", e))
    return {i for i in idents if i not in PROMQL_FUNCS and not re.fullmatch(r"\d+[smhd]?", i) and "_" in i}


def alert_groups() -> list[dict[str, Any]]:
    objs = render({"metrics": {"prometheusRule": {"enabled": True}}})
    return one(objs, "PrometheusRule", "hrl-scheduler")["spec"]["groups"]


def dashboard_exprs() -> list[str]:
    dash = json.loads((CHART / "files" / "grafana-dashboard.json").read_text())
    return [t["expr"] for p in dash["panels"] for t in p["targets"]]


@cache
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        out = subprocess.run([str(ROOT / "hack" / "install-prometheus.sh")], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        path = str(Path(out.stdout.strip().splitlines()[-1]).parent / "promtool")
    return path


def test_the_alert_rules_pass_promtool(tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": alert_groups()}))
    out = subprocess.run([promtool(), "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    names = {r["alert"] for g in alert_groups() for r in g["rules"]}
    assert {"HrlExtenderNeutralAnswers", "HrlDeschedulerEvictionFailures", "HrlExtenderSnapshotStale",
            "HrlDeschedulerLoopHold"} <= names  # fmt: skip


def test_every_dashboard_expression_parses_with_promtool(tmp_path):
    # promtool has no "check expression"; a recording rule per expression checks the same parser.
    rules = [
        {"record": f"hrl:dashboard:{i}", "expr": e.replace("$namespace", "x")} for i, e in enumerate(dashboard_exprs())
    ]
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    out = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_alert_and_dashboard_expression_names_only_metrics_the_code_exports():
    exported = exported_metric_names()
    exprs = [r["expr"] for g in alert_groups() for r in g["rules"]] + dashboard_exprs()
    used = set().union(*(metric_names_in(e) for e in exprs))
    assert used, "no metric names found: the extraction is broken"
    assert sorted(used - exported) == []


def test_the_metric_name_check_catches_a_name_the_code_does_not_export():
    assert "hrl_extender_prioritize_totl" in metric_names_in('sum(rate(hrl_extender_prioritize_totl{a="b"}[5m]))')
    assert "hrl_extender_prioritize_totl" not in exported_metric_names()
