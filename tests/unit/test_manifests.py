"""manifests/ (the kustomize base + overlays generated from the Helm chart by hack/gen-manifests.py) and the image
Dockerfile, checked without a cluster: every overlay renders with the cached kubectl (`kubectl kustomize`), its
objects have the structure the docs promise
(least-privilege RBAC, non-root read-only containers, CronJob concurrencyPolicy Forbid, leader election),
the configurations inside the ConfigMaps load with our own loaders, and every shipped
KubeSchedulerConfiguration is accepted by the real kube-scheduler (`--write-config-to` validates and exits).
The server-side checks (dry run, `kubectl auth can-i`) are in tests/integration/test_manifests_controlplane.py.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from descheduler.config import load_descheduler_config, placement_from_config, planner_from_config
from extender.config import build_policy, load_extender_config

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
OVERLAYS = sorted(p.parent.name for p in (MANIFESTS / "overlays").glob("*/kustomization.yaml"))
NAMESPACE = "hrl-scheduler-system"
SCHEDULER_OVERLAYS = {
    "second-scheduler",
    "second-scheduler-tls",
    "default-scheduler-dropin",
    "second-scheduler-learned",
}
#: components/learned-policies: the embedding-cache sidecar's gRPC port (Service port grpc-cache).
CACHE_PORT = 50051

#: DESIGN.md section 5, "Our shipped configuration".
SHIPPED_EXTENDER = {
    "prioritizeVerb": "prioritize",
    "weight": 2,
    "nodeCacheCapable": True,
    "ignorable": True,
}


@cache
def bin_dir() -> Path:
    """The control-plane binaries (kubectl, kube-scheduler): hack/build-controlplane.sh builds them when
    missing (a no-op when cached) and prints the directory on its last line."""
    script = ROOT / "hack" / "build-controlplane.sh"
    d = Path(subprocess.run([str(script), "--print"], capture_output=True, text=True, check=True).stdout.strip())
    if not ((d / "kubectl").exists() and (d / "kube-scheduler").exists()):
        out = subprocess.run([str(script)], capture_output=True, text=True)
        assert out.returncode == 0, f"hack/build-controlplane.sh failed:\n{out.stderr[-3000:]}"
        d = Path(out.stdout.strip().splitlines()[-1])
    return d


@cache
def render(target: str) -> tuple[dict[str, Any], ...]:
    """`kubectl kustomize manifests/<target>` as a tuple of objects."""
    out = subprocess.run(
        [str(bin_dir() / "kubectl"), "kustomize", str(MANIFESTS / target)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, f"kubectl kustomize {target} failed: {out.stderr}"
    return tuple(d for d in yaml.safe_load_all(out.stdout) if d)


def find(objs, kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def one(objs, kind: str, name: str) -> dict[str, Any]:
    found = find(objs, kind, name)
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def configmap_file(objs, prefix: str, key: str) -> dict[str, Any]:
    cms = [o for o in find(objs, "ConfigMap") if o["metadata"]["name"].startswith(prefix)]
    assert len(cms) == 1, f"expected one ConfigMap {prefix}*, found {[c['metadata']['name'] for c in cms]}"
    return yaml.safe_load(cms[0]["data"][key])


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    if obj["kind"] == "CronJob":
        return obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return obj["spec"]["template"]["spec"]


def workloads(objs) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] in ("Deployment", "CronJob", "StatefulSet", "DaemonSet", "Job")]


def targets() -> list[str]:
    return ["base"] + [f"overlays/{o}" for o in OVERLAYS]


def test_the_expected_overlays_exist():
    assert set(OVERLAYS) >= {
        "second-scheduler",
        "second-scheduler-tls",
        "default-scheduler-dropin",
        "descheduler-interval",
        "second-scheduler-learned",
    }


@pytest.mark.parametrize("target", targets())
def test_every_object_lives_in_the_product_namespace_or_is_cluster_scoped(target):
    objs = render(target)
    assert objs
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
    for o in objs:
        ns = o["metadata"].get("namespace")
        where = f"{o['kind']}/{o['metadata']['name']}"
        if o["kind"] in cluster_scoped:
            assert ns is None, where
        elif o["metadata"]["name"] == "hrl-scheduler:extension-apiserver-authentication-reader":
            assert ns == "kube-system", where  # the one object that must live there (Configure Multiple Schedulers)
        elif (o["kind"], o["metadata"]["name"]) == ("RoleBinding", "hrl-scheduler:descheduler-act"):
            assert ns not in ("kube-system", NAMESPACE), where  # a namespace the descheduler manages
        else:
            assert ns == NAMESPACE, where


@pytest.mark.parametrize("target", targets())
def test_every_container_runs_non_root_read_only_without_privileges_and_with_resources(target):
    for w in workloads(render(target)):
        spec = pod_spec(w)
        where = f"{w['kind']}/{w['metadata']['name']}"
        psc = spec["securityContext"]
        assert psc["runAsNonRoot"] is True and psc["runAsUser"] != 0, where
        assert psc["seccompProfile"]["type"] == "RuntimeDefault", where
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True, where
            assert sc["allowPrivilegeEscalation"] is False, where
            assert sc["capabilities"]["drop"] == ["ALL"], where
            assert "cpu" in c["resources"]["requests"] and "memory" in c["resources"]["limits"], where
        assert not spec.get("hostNetwork") and not spec.get("hostPID"), where


def test_the_cronjob_never_runs_two_cycles_at_once_and_runs_one_cycle_per_job():
    cj = one(render("base"), "CronJob", "hrl-descheduler")
    assert cj["spec"]["concurrencyPolicy"] == "Forbid"
    c = pod_spec(cj)["containers"][0]
    assert "--once" in c["args"] and "--interval" not in c["args"]
    assert cj["spec"]["jobTemplate"]["spec"]["backoffLimit"] == 0
    assert pod_spec(cj)["serviceAccountName"] == "hrl-descheduler"


def test_the_cronjob_keeps_its_eviction_history_on_a_persistent_volume():
    objs = render("base")
    cfg = configmap_file(objs, "hrl-descheduler-config", "config.yaml")
    spec = pod_spec(one(objs, "CronJob", "hrl-descheduler"))
    mounts = {m["name"]: m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
    vols = {v["name"]: v for v in spec["volumes"]}
    state_dir = str(Path(cfg["stateFile"]).parent)
    (vol_name,) = [n for n, p in mounts.items() if p == state_dir]
    claim = vols[vol_name]["persistentVolumeClaim"]["claimName"]
    assert one(objs, "PersistentVolumeClaim", claim)


def test_the_interval_overlay_replaces_the_cronjob_by_a_leader_elected_deployment():
    objs = render("overlays/descheduler-interval")
    assert find(objs, "CronJob") == [] and find(objs, "PersistentVolumeClaim") == []
    dep = one(objs, "Deployment", "hrl-descheduler")
    assert dep["spec"]["replicas"] >= 2
    c = pod_spec(dep)["containers"][0]
    assert "--interval" in c["args"] and "--once" not in c["args"]
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in c["env"]}
    assert env["POD_NAMESPACE"] == "metadata.namespace" and env["POD_NAME"] == "metadata.name"
    cfg = load_descheduler_config(configmap_file(objs, "hrl-descheduler-config", "config.yaml"))
    assert cfg.leader_election.enabled and cfg.state_file is None
    role = one(objs, "Role", "hrl-scheduler:descheduler-leader-election")
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert named == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [cfg.leader_election.lease_name],
            "verbs": ["get", "update"],
        }
    ]
    port = cfg.metrics.listen.rpartition(":")[2]
    assert {p["containerPort"] for p in c["ports"]} == {int(port)}


@pytest.mark.parametrize("target", targets())
def test_the_shipped_component_configurations_load_with_our_own_loaders(target):
    objs = render(target)
    ext = load_extender_config(configmap_file(objs, "hrl-extender-config", "config.yaml"))
    assert ext.kubernetes.enabled and ext.listen.host == "0.0.0.0"
    assert ext.max_snapshot_age_seconds > 0  # /readyz turns 503 when the watch goes stale
    des = load_descheduler_config(configmap_file(objs, "hrl-descheduler-config", "config.yaml"))
    assert des.dry_run is True  # shipped as a dry run (docs/operations.md says how to turn it off)
    assert {"kube-system", NAMESPACE} <= set(des.excluded_namespaces)


@pytest.mark.parametrize("target", targets())
def test_the_extender_deployment_probes_healthz_and_readyz_on_its_health_port(target):
    # issue 26 item 2: the probes on the extender's own health listener (listen.healthPort, its own thread), which
    # answers while the scoring loop is saturated; the same TLS as the serving port
    objs = render(target)
    ext = load_extender_config(configmap_file(objs, "hrl-extender-config", "config.yaml"))
    dep = one(objs, "Deployment", "hrl-extender")
    spec = pod_spec(dep)
    c = spec["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ext.listen.health_port not in (None, 0, ext.listen.port)
    assert ports == {"extender": ext.listen.port, "health": ext.listen.health_port}
    scheme = "HTTPS" if ext.listen.tls else "HTTP"
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"), ("startupProbe", "/healthz")):
        get = c[probe]["httpGet"]
        assert (get["path"], get["port"], get.get("scheme", "HTTP")) == (path, "health", scheme), probe
    assert c["livenessProbe"]["timeoutSeconds"] == 2 and c["livenessProbe"]["failureThreshold"] == 3
    assert c["args"][:2] == ["--config", "/etc/hrl-extender/config.yaml"] and "--log-format" in c["args"]
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    vols = {v["name"]: v for v in spec["volumes"]}
    assert vols[mounts["/etc/hrl-extender"]]["configMap"]["name"].startswith("hrl-extender-config")
    if ext.listen.tls:
        tls_dir = str(Path(ext.listen.tls.cert_file).parent)
        assert vols[mounts[tls_dir]]["secret"]["secretName"] == "hrl-extender-tls"
    svc = one(objs, "Service", "hrl-extender")
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    # the learned overlays run the embedding cache as its own Deployment + Service (not on the extender's Service)
    assert [(p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [(ext.listen.port, "extender")]
    assert spec["serviceAccountName"] == "hrl-extender" and "schedulerName" not in spec


def test_the_learned_overlay_runs_the_embedding_cache_as_its_own_deployment_with_grpc_probes():
    objs = render("overlays/second-scheduler-learned")
    # The cache is one Deployment every extender replica reads (docs/embedding-cache.md): the extender keeps its
    # replicas, so a drain never takes scoring down.
    assert one(objs, "Deployment", "hrl-extender")["spec"]["replicas"] == 2
    dep = one(objs, "Deployment", "hrl-embedding-cache")
    assert dep["spec"]["replicas"] == 1
    (cache,) = pod_spec(dep)["containers"]
    assert cache["name"] == "embedding-cache" and cache["image"] == "ghcr.io/hrl-scheduler/hrl-embedding-cache:0.1.0"
    args = cache["args"]
    assert args[args.index("cache") :][:2] == ["cache", "serve"]  # the image's entry point is hrl-policy
    assert f"--listen=0.0.0.0:{CACHE_PORT}" in args and "--metrics-listen=0.0.0.0:9103" in args
    assert [(p["name"], p["containerPort"]) for p in cache["ports"]] == [
        ("grpc-cache", CACHE_PORT),
        ("cache-metrics", 9103),
    ]
    for probe in ("readinessProbe", "livenessProbe"):
        assert cache[probe]["grpc"] == {"port": CACHE_PORT}, probe  # grpc.health.v1, service ""
    svc = one(objs, "Service", "hrl-embedding-cache")
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    assert [(p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [(CACHE_PORT, "grpc-cache")]
    ext = load_extender_config(configmap_file(objs, "hrl-extender-config", "config.yaml"))
    assert ext.cache.address == f"hrl-embedding-cache.{NAMESPACE}.svc:{CACHE_PORT}"


def test_the_learned_overlay_configures_the_learned_policies_and_the_descheduler_reaches_the_cache():
    objs = render("overlays/second-scheduler-learned")
    ext = load_extender_config(configmap_file(objs, "hrl-extender-config", "config.yaml"))
    des = load_descheduler_config(configmap_file(objs, "hrl-descheduler-config", "config.yaml"))
    assert (ext.policy.name, ext.policy.bundle) == ("learned", None)
    assert (des.planner.name, des.planner.autoscaler.name, des.placement.name) == ("hierarchical", "intent", "learned")
    assert (des.planner.intent_policy.name, des.planner.intent_policy.bundle) == ("learned", None)
    assert des.dry_run is True and des.state_file  # the CronJob's PVC keeps the planner's state
    svc = one(objs, "Service", "hrl-embedding-cache")
    (port,) = [p["port"] for p in svc["spec"]["ports"] if p["name"] == "grpc-cache"]
    assert des.cache.address == ext.cache.address == f"hrl-embedding-cache.{NAMESPACE}.svc:{port}"
    # The placement policy of both loads from the bundles committed in the repository (and shipped in the image): the
    # served ensemble of the training seeds.
    assert type(build_policy(ext)).__name__ == type(placement_from_config(des)).__name__ == "PlacementEnsemble"


def test_the_learned_overlay_serves_the_planner_the_policy_bench_measures():
    """Live parity: the chart's learned mode plans as the simulator's stack of the served bundles
    (policy.sim.hrl_stacks.hrl_planner over load_parts), apart from the two differences docs/operations.md names (no
    in-place resizes; the CronJob's period)."""
    from policy.bundle import SERVED_STACK
    from policy.sim.app import load_app
    from policy.sim.engine import ClusterSpec
    from policy.sim.hrl_stacks import VARIANTS, hrl_planner, load_parts, sim_descheduler_config
    from policy.sim.stackbase import StackContext

    des = load_descheduler_config(
        configmap_file(render("overlays/second-scheduler-learned"), "hrl-descheduler-config", "config.yaml")
    )
    live = planner_from_config(des)
    app = load_app("online-boutique")
    ctx = StackContext(app=app, cluster=ClusterSpec())
    variant = VARIANTS[SERVED_STACK]
    sim = hrl_planner(variant, load_parts(variant, ctx), sim_descheduler_config(app), ())
    for part in ("intent_policy", "autoscaler"):
        assert type(getattr(live, part)) is type(getattr(sim, part)), part
    members = [m.actor.version for m in sim.intent_policy.members]
    assert [m.actor.version for m in live.intent_policy.members] == members and len(members) == 3
    for knob in ("burst", "default_target", "tolerance", "stabilization_s", "shield", "min_replicas", "max_replicas"):
        assert getattr(live.autoscaler, knob) == getattr(sim.autoscaler, knob), knob  # burst: the tuned constant's
    assert (live.margin, live.intent_period_s, live.rebalance) == (sim.margin, sim.intent_period_s, sim.rebalance)
    assert live.moves_period_s == sim.moves_period_s  # 5 minutes, also under descheduler.mode interval
    assert live.overload_threshold == sim.overload_threshold and live.resizer is None and sim.resizer is not None
    # the one input the operator gives: the application's SLO (learnedPolicies.sloP95Ms; the simulator: the app's)
    assert {m.featurizer.slo_p95_ms for m in sim.intent_policy.members} == {app.slo_p95_ms}
    assert {m.featurizer.slo_p95_ms for m in live.intent_policy.members} == {None}


def scheduler_configs(target: str) -> list[dict[str, Any]]:
    objs = render(target)
    out = []
    for cm in find(objs, "ConfigMap"):
        for text in cm.get("data", {}).values():
            doc = yaml.safe_load(text)
            if isinstance(doc, dict) and doc.get("kind") == "KubeSchedulerConfiguration":
                out.append(doc)
    return out


def http_timeout_ms(value: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s)", value)
    assert m, value
    return float(m[1]) * (1 if m[2] == "ms" else 1000)


@pytest.mark.parametrize("overlay", sorted(SCHEDULER_OVERLAYS))
def test_the_scheduler_configuration_registers_the_extender_with_the_design_values(overlay):
    target = f"overlays/{overlay}"
    (cfg,) = scheduler_configs(target)
    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    (ext,) = cfg["extenders"]
    assert {k: ext[k] for k in SHIPPED_EXTENDER} == SHIPPED_EXTENDER
    assert "filterVerb" not in ext  # prioritize only: no hard constraint of ours needs filter (BENCHMARKS.md)
    assert 100 <= http_timeout_ms(ext["httpTimeout"]) <= 300
    objs = render(target)
    extender_cfg = load_extender_config(configmap_file(objs, "hrl-extender-config", "config.yaml"))
    scheme = "https" if extender_cfg.listen.tls else "http"
    assert ext["urlPrefix"] == (
        f"{scheme}://hrl-extender.{NAMESPACE}.svc:{extender_cfg.listen.port}{extender_cfg.url_prefix}"
    )
    if extender_cfg.listen.tls:
        assert ext["enableHTTPS"] is True
        tls = ext["tlsConfig"]
        assert not tls.get("insecure") and (tls.get("caFile") or tls.get("caData"))
    else:
        assert ext.get("enableHTTPS", False) is False


def test_the_second_scheduler_has_its_own_profile_lease_and_rbac():
    objs = render("overlays/second-scheduler")
    (cfg,) = scheduler_configs("overlays/second-scheduler")
    assert [p["schedulerName"] for p in cfg["profiles"]] == ["hrl-scheduler"]
    le = cfg["leaderElection"]
    assert le["leaderElect"] is True and le["resourceName"] == "hrl-scheduler"
    assert le["resourceNamespace"] == NAMESPACE
    dep = one(objs, "Deployment", "hrl-scheduler")
    spec = pod_spec(dep)
    assert spec["serviceAccountName"] == "hrl-scheduler"
    assert "--config=/etc/hrl-scheduler/config.yaml" in spec["containers"][0]["command"]
    bindings = find(objs, "ClusterRoleBinding") + find(objs, "RoleBinding")
    bound = {
        (b["roleRef"]["kind"], b["roleRef"]["name"])
        for b in bindings
        if any(s["name"] == "hrl-scheduler" for s in b["subjects"])
    }
    assert bound == {
        ("ClusterRole", "system:kube-scheduler"),
        ("ClusterRole", "system:volume-scheduler"),
        ("Role", "extension-apiserver-authentication-reader"),
        ("Role", "hrl-scheduler:leader-election"),
    }
    role = one(objs, "Role", "hrl-scheduler:leader-election")
    assert [r for r in role["rules"] if r.get("resourceNames")][0]["resourceNames"] == ["hrl-scheduler"]


def test_the_dropin_is_for_the_default_profile_and_keeps_the_kubeadm_kubeconfig():
    (cfg,) = scheduler_configs("overlays/default-scheduler-dropin")
    assert [p["schedulerName"] for p in cfg["profiles"]] == ["default-scheduler"]
    assert cfg["clientConnection"]["kubeconfig"] == "/etc/kubernetes/scheduler.conf"
    assert one(render("overlays/default-scheduler-dropin"), "ConfigMap", "hrl-scheduler-dropin")


@pytest.mark.parametrize("overlay", sorted(SCHEDULER_OVERLAYS))
def test_the_real_kube_scheduler_accepts_the_shipped_configuration(overlay, tmp_path):
    """kube-scheduler decodes strictly (unknown or duplicate fields fail) and validates, then
    --write-config-to writes the effective configuration and exits before contacting the API server."""
    (cfg,) = scheduler_configs(f"overlays/{overlay}")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "unused"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    cfg = {**cfg, "clientConnection": {**cfg.get("clientConnection", {}), "kubeconfig": str(kubeconfig)}}
    ca_file = cfg["extenders"][0].get("tlsConfig", {}).get("caFile")
    if ca_file:  # the Secret's file exists only in the Pod; kube-scheduler reads it when building the client
        (tmp_path / "ca.crt").write_text("")
        cfg["extenders"][0]["tlsConfig"]["caFile"] = str(tmp_path / "ca.crt")
    (tmp_path / "in.yaml").write_text(yaml.safe_dump(cfg))
    out = subprocess.run(
        [
            str(bin_dir() / "kube-scheduler"),
            f"--config={tmp_path / 'in.yaml'}",
            f"--write-config-to={tmp_path / 'out.yaml'}",
            "--authentication-skip-lookup",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    effective = yaml.safe_load((tmp_path / "out.yaml").read_text())
    (ext,) = effective["extenders"]
    assert {k: ext[k] for k in SHIPPED_EXTENDER} == SHIPPED_EXTENDER


def rules_of(objs, kind: str, name: str) -> list[tuple[str, str, str]]:
    """(apiGroup, resource, verb) triples granted by a role."""
    role = one(objs, kind, name)
    return sorted(
        {
            (g, r, v)
            for rule in role["rules"]
            for g in rule["apiGroups"]
            for r in rule["resources"]
            for v in rule["verbs"]
        }
    )


def test_the_extender_may_only_read_nodes_and_pods():
    assert rules_of(render("base"), "ClusterRole", "hrl-scheduler:extender") == sorted(
        ("", r, v) for r in ("nodes", "pods") for v in ("get", "list", "watch")
    )


def test_the_descheduler_observes_cluster_wide_with_reads_only():
    granted = rules_of(render("base"), "ClusterRole", "hrl-scheduler:descheduler")
    # list + watch to observe (a LIST per kind with --once, a watch cache in interval mode), get for the
    # re-read before each eviction (descheduler/reread.py); nothing else cluster-wide
    assert {v for _, _, v in granted} == {"get", "list", "watch"}
    assert {r for _, r, v in granted if v == "get"} - {r for _, r, v in granted if v == "list"} == {"replicasets"}
    assert {r for _, r, v in granted if v == "list"} == {
        "nodes",
        "pods",
        "persistentvolumes",
        "persistentvolumeclaims",
        "poddisruptionbudgets",
        "deployments",
        "statefulsets",
    }


def test_the_descheduler_may_evict_and_scale_but_never_delete_pods():
    granted = rules_of(render("base"), "ClusterRole", "hrl-scheduler:descheduler-act")
    writes = {(g, r, v) for g, r, v in granted if v not in ("get", "list", "watch")}
    assert writes == {
        ("", "pods/eviction", "create"),
        ("apps", "deployments/scale", "update"),
        ("", "pods/resize", "patch"),
        ("", "pods", "patch"),  # make-before-break moves: the pod-deletion-cost annotation, nothing else
        ("events.k8s.io", "events", "create"),  # one per eviction, scale and loop hold
    }
    assert ("apps", "deployments/scale", "get") in granted
    assert ("", "resourcequotas", "list") in granted  # before a surge: room for one more pod
    # Only Deployments are scaled, and HPAs are only listed (a Deployment an HPA targets is left alone).
    assert {(g, v) for g, r, v in granted if r == "horizontalpodautoscalers"} == {("autoscaling", "list")}
    assert not [t for t in granted if t[1].startswith("statefulsets/")]


@pytest.mark.parametrize("target", targets())
def test_the_descheduler_acts_only_in_its_managed_namespaces_never_cluster_wide(target):
    objs = render(target)
    act = [
        b
        for b in find(objs, "RoleBinding") + find(objs, "ClusterRoleBinding")
        if b["roleRef"]["name"] == "hrl-scheduler:descheduler-act"
    ]
    assert [(b["kind"], b["metadata"]["namespace"]) for b in act] == [("RoleBinding", "default")]
    assert act[0]["subjects"] == [{"kind": "ServiceAccount", "name": "hrl-descheduler", "namespace": NAMESPACE}]


def test_the_descheduler_may_resize_pods_in_place_and_only_read_vertical_pod_autoscalers():
    granted = rules_of(render("base"), "ClusterRole", "hrl-scheduler:descheduler-act")
    assert [(g, v) for g, r, v in granted if r == "pods/resize"] == [("", "patch")]
    assert {(g, v) for g, r, v in granted if r == "verticalpodautoscalers"} == {
        ("autoscaling.k8s.io", "get"),
        ("autoscaling.k8s.io", "list"),
    }


@pytest.mark.parametrize("target", targets())
def test_no_role_uses_wildcards(target):
    for o in render(target):
        for rule in o.get("rules", []) if o["kind"] in ("Role", "ClusterRole") else []:
            for key in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule.get(key, []), f"{o['kind']}/{o['metadata']['name']}: {key}"


# ---- the Dockerfile (one file, a stage per image; tests/unit/test_image_inputs.py checks the locks, and
# tests/integration/test_images.py builds and runs the images) -----------------------------------------------------

IMAGES = {
    "extender": ("hrl-extender", "/etc/hrl-extender/config.yaml"),
    "descheduler": ("hrl-descheduler", "/etc/hrl-descheduler/config.yaml"),
}
#: stage -> the image's name (OCI title)
TITLES = {"extender": "hrl-extender", "descheduler": "hrl-descheduler", "embedding-cache": "hrl-embedding-cache"}
DOCKERFILE = MANIFESTS / "images" / "Dockerfile"


def stages() -> dict[str, list[tuple[str, str]]]:
    """Stage name -> its (INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped; the
    instructions before the first FROM under ``""``."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out: dict[str, list[tuple[str, str]]] = {"": []}
    cur = ""
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            instr, _, rest = line.partition(" ")
            if instr.upper() == "FROM":
                cur = rest.split(" AS ")[-1].strip() if " AS " in rest else rest
                out[cur] = []
            out[cur].append((instr.upper(), rest.strip()))
    return out


def stage_instrs(component: str) -> list[tuple[str, str]]:
    """The instructions of ``component``'s stage and of the stages it is built FROM (runtime)."""
    st = stages()
    chain, name = [], component
    while name in st:
        chain = st[name] + chain
        name = st[name][0][1].split()[0]
    return chain


def test_every_stage_builds_on_the_debian_base_made_here_or_on_an_earlier_stage():
    """No registry of base images is needed: BASE_IMAGE is the local image hack/build-images.sh makes from
    hack/build-base.sh's mmdebstrap rootfs; it has no default (a build without it fails at once)."""
    assert ("ARG", "BASE_IMAGE") in stages()[""]
    seen = set()
    for name, st in stages().items():
        if name:
            base = st[0][1].split()[0]
            assert base == "${BASE_IMAGE}" or base in seen, (name, base)
            seen.add(name)
    assert "mmdebstrap" in (ROOT / "hack" / "build-base.sh").read_text()


@pytest.mark.parametrize("component", sorted(TITLES))
def test_the_image_runs_as_a_numeric_non_root_user(component):
    users = [a for i, a in stage_instrs(component) if i == "USER"]
    assert users, "no USER instruction"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0


def test_the_dependencies_come_from_the_lock_files_with_hashes_wheels_only_offline_and_without_torch():
    runs = " ".join(a for i, a in stages()["deps"] + stages()["build"] if i == "RUN")
    assert runs.count("--require-hashes") == 2 and "-r manifests/images/requirements.lock" in runs
    assert "-r manifests/images/build-requirements.lock" in runs and "--only-binary=:all:" in runs
    env = " ".join(a for i, a in stages()["deps"] if i == "ENV")
    assert "PIP_NO_INDEX=1" in env and "PIP_FIND_LINKS=/wheels" in env  # the build fetches nothing
    assert "install -q --no-deps /tmp/dist/hrl_scheduler-*.whl" in runs  # the package itself resolves nothing
    assert "[train" not in runs and not re.search(r"pip install[^&]*torch", runs)
    assert "find_spec('torch') is not None" in runs  # the build fails if torch got in anyway
    assert "venv --without-pip /opt/hrl" in runs  # no pip in the images' venv
    # the runtime image copies the venv only, never the build tools
    copies = [a for i, a in stages()["runtime"] if i == "COPY"]
    assert copies == ["--from=deps /opt/hrl /opt/hrl", "--from=build /stage/ /"]


@pytest.mark.parametrize("component", sorted(IMAGES))
def test_the_image_entrypoint_is_the_console_script_with_the_manifests_config_path(component):
    script, config_path = IMAGES[component]
    instrs = dict(stage_instrs(component))
    assert yaml.safe_load(instrs["ENTRYPOINT"]) == [script]
    assert yaml.safe_load(instrs["CMD"])[:2] == ["--config", config_path]
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(rf'^{script} = "{component}\.__main__:main"$', pyproject, re.M)
    assert "PYTHONDONTWRITEBYTECODE=1" in instrs["ENV"]  # nothing written under a read-only root


def test_the_embedding_cache_image_serves_the_cache_by_default():
    instrs = dict(stage_instrs("embedding-cache"))
    assert yaml.safe_load(instrs["ENTRYPOINT"]) == ["hrl-policy"]
    assert yaml.safe_load(instrs["CMD"])[:2] == ["cache", "serve"]


@pytest.mark.parametrize("component", sorted(TITLES))
def test_the_image_carries_the_oci_labels(component):
    labels = " ".join(a for i, a in stage_instrs(component) if i == "LABEL")
    for key in ("title", "description", "licenses", "base.name", "source"):
        assert f"org.opencontainers.image.{key}=" in labels, key
    assert f'org.opencontainers.image.title="{TITLES[component]}"' in labels
    # the version, the commit's time and revision: a LABEL step hack/build-images.sh appends to each image's stage
    # with the values written out (a LABEL of ARGs would be reused from an earlier commit by buildah's layer cache)
    assert "org.opencontainers.image.version" not in labels
    build = (ROOT / "hack" / "build-images.sh").read_text()
    appended = next(line for line in build.splitlines() if line.lstrip().startswith("printf 'LABEL "))
    for key in ("version", "revision", "created"):
        assert f"org.opencontainers.image.{key}=" in appended, key


def test_the_build_context_holds_only_the_lock_and_the_package_sources():
    ignore = (MANIFESTS / "images" / "Dockerfile.dockerignore").read_text().split()
    allowed = [w for w in ignore if w.startswith("!")]
    assert ignore[ignore.index("*") + 1] == "!manifests/images/requirements.lock"
    assert allowed == [
        "!manifests/images/requirements.lock",
        "!manifests/images/build-requirements.lock",
        "!pyproject.toml",
        "!README.md",
        "!policy",
        "!extender",
        "!descheduler",
        "!out/images/kube-scheduler",  # the plugin's scheduler, built by hack/build-scheduler-plugin.sh
    ]
    copied = [
        w
        for i, a in stages()["deps"] + stages()["build"]
        if i == "COPY" and not a.startswith("--from")
        for w in shlex.split(a)[:-1]
    ]
    assert {c.rstrip("/") for c in copied} == {
        "manifests/images/requirements.lock",
        "manifests/images/build-requirements.lock",
        "pyproject.toml",
        "README.md",
        "policy",
        "extender",
        "descheduler",
    }


@pytest.mark.parametrize("component", sorted(IMAGES))
def test_the_manifests_run_the_fully_qualified_image_of_each_component(component):
    script, _ = IMAGES[component]
    images = {
        c["image"]
        for t in targets()
        for w in workloads(render(t))
        for c in pod_spec(w)["containers"]
        if w["metadata"]["name"] == script
    }
    assert images == {f"ghcr.io/hrl-scheduler/{script}:0.1.0"}


def test_the_kube_scheduler_image_runs_the_plugins_build_as_a_numeric_non_root_user():
    instrs = stage_instrs("kube-scheduler")
    assert ("COPY", "out/images/kube-scheduler /usr/local/bin/kube-scheduler") in instrs
    assert yaml.safe_load(dict(instrs)["ENTRYPOINT"]) == ["kube-scheduler"]
    uid = [a for i, a in instrs if i == "USER"][-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0
    labels = " ".join(a for i, a in instrs if i == "LABEL")
    assert 'org.opencontainers.image.title="hrl-kube-scheduler"' in labels
    script = (ROOT / "hack" / "build-images.sh").read_text()
    assert "hack/build-scheduler-plugin.sh" in script and "out/images/kube-scheduler" in script


# ---- the kind scripts' kustomizations (hack/kind-up.sh, hack/e2e-kind.sh; they cannot run here) --------------


def render_path(path: Path) -> tuple[dict[str, Any], ...]:
    out = subprocess.run(
        [str(bin_dir() / "kubectl"), "kustomize", str(path)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return tuple(d for d in yaml.safe_load_all(out.stdout) if d)


def test_the_kind_dropin_pins_the_extender_service_to_the_ip_the_script_writes_into_the_scheduler_config():
    objs = render_path(ROOT / "hack" / "kind" / "dropin")
    ip = one(objs, "Service", "hrl-extender")["spec"]["clusterIP"]
    script = (ROOT / "hack" / "kind-up.sh").read_text()
    assert re.search(rf"^extender_ip={re.escape(ip)}\b", script, re.M)
    assert "serviceSubnet: 10.96.0.0/16" in script and ip.startswith("10.96.")
    assert one(objs, "Deployment", "hrl-extender")["spec"]["replicas"] == 1


def test_the_kind_e2e_setup_keeps_default_scheduler_plain_and_reads_the_boutique_graph_from_the_image():
    objs = render_path(ROOT / "hack" / "kind" / "e2e")
    assert one(objs, "Deployment", "hrl-scheduler")  # the second scheduler, not the drop-in
    (cfg,) = [
        yaml.safe_load(t)
        for cm in find(objs, "ConfigMap")
        for t in cm.get("data", {}).values()
        if "KubeSchedulerConfiguration" in t
    ]
    assert [p["schedulerName"] for p in cfg["profiles"]] == ["hrl-scheduler"]
    ext = load_extender_config(configmap_file(objs, "hrl-extender-config", "config.yaml"))
    (source,) = ext.topology.sources
    prefix = "/opt/hrl/lib/python3.11/site-packages/"  # the venv of manifests/images/*.Dockerfile
    assert source.startswith(prefix) and (ROOT / source[len(prefix) :]).is_file()
    assert "python3 -m venv --without-pip /opt/hrl" in DOCKERFILE.read_text()
    assert one(objs, "Deployment", "hrl-extender")["spec"]["replicas"] == 1


@pytest.mark.parametrize("script", ["kind-up.sh", "e2e-kind.sh", "gen-extender-certs.sh"])
def test_the_scripts_parse(script):
    path = ROOT / "hack" / script
    assert path.stat().st_mode & 0o111, f"{script} is not executable"
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0
