"""The Helm chart on the real control plane, on both supported Kubernetes minors (the version-skew subset: the
newest minor's cluster is the session's, the previous minor's is brought up for this module from the binaries
`hack/build-controlplane.sh --kube 1.35` builds):

- one command installs it on a fresh cluster (`helm install --wait ... --create-namespace`): Helm waits until every
  Deployment is available on kwok nodes and the descheduler's claim is bound, and the second scheduler runs the
  kube-scheduler image of the cluster's version;
- a second release with nothing but the defaults installs in the `default` namespace (no `-n`), next to the first
  (`nameOverride` keeps the cluster-wide names apart);
- an upgrade to the learned policies (the embedding cache's own Deployment) + interval mode + TLS starts as well;
- every combination of its modes passes `kubectl apply --dry-run=server` without a warning (Pod Security
  "restricted" included; the PodDisruptionBudgets, NetworkPolicies and the system-cluster-critical priority too);
- the installed RBAC, asked of the real authorizer: the descheduler evicts and scales only in the namespaces it
  manages, never in kube-system, its own namespace or another one; it cannot delete pods or list replicasets;
- the second scheduler's command line (kwok runs no container, so nothing above runs it) is one the kube-scheduler of
  each minor, and the HRLScore build, accept: with the chart's logFormat json they log JSON.
"""

from __future__ import annotations

import itertools
import json
import subprocess

import pytest
import yaml
from chart_helpers import one, pod_spec, render
from cp_helpers import BOUTIQUE, ROOT, cpmod, wait_for

pytestmark = pytest.mark.controlplane

CHART = ROOT / "manifests" / "charts" / "hrl-scheduler"
RELEASE_NS = "hrl-chart"
MANAGED = "chart-managed"
MINORS = cpmod.kube_minors()
#: Monitoring objects need the Prometheus Operator's CRDs, which this cluster does not have.
NO_MONITORS = {"metrics": {"serviceMonitor": {"enabled": False}, "podMonitor": {"enabled": False}}}


@pytest.fixture(scope="module")
def helm_bin() -> str:
    out = subprocess.run([str(ROOT / "hack" / "build-helm.sh")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module", params=MINORS)
def cluster(request, control_plane, tmp_path_factory):
    """The session's control plane for the newest minor; a second one, with its own kwok nodes, for the other."""
    minor = request.param
    if minor == MINORS[0]:
        cp = control_plane
    else:
        cp = cpmod.ControlPlane(tmp_path_factory.mktemp(f"cp-{minor}"), cpmod.resolve_bin_dir(kube_minor=minor))
        try:
            cp.up(extender_config={"topology": {"sources": [str(BOUTIQUE)]}, "logLevel": "INFO"})
        except cpmod.ControlPlaneError as exc:
            cp.down()
            pytest.fail(f"the {minor} control plane did not come up: {exc}", pytrace=False)
    version = json.loads(cp.kubectl("version", "-o", "json").stdout)["serverVersion"]["gitVersion"]
    assert version.startswith(f"v{minor}."), version
    nodes = [cpmod.fake_node(f"chart-{minor.replace('.', '-')}-n{i}", "8", "32Gi", 110, None) for i in range(3)]
    cp.create_nodes(nodes, wait_s=120)
    cp.kubectl("create", "namespace", MANAGED)
    yield cp, version
    cp.kubectl("delete", "namespace", MANAGED, "--wait=false", check=False)
    if minor == MINORS[0]:
        cp.delete_nodes([n["metadata"]["name"] for n in nodes])
    else:
        cp.down()


def helm(helm_bin: str, cp, *args: str, values: dict | None = None, check: bool = True):
    cmd = [helm_bin, "--kubeconfig", str(cp.kubeconfig), *args]
    if values is not None:
        cmd += ["-f", "-"]
    out = subprocess.run(cmd, input=yaml.safe_dump(values or {}), capture_output=True, text=True, timeout=300)
    if check:
        assert out.returncode == 0, f"helm {' '.join(args)}: {out.stdout}\n{out.stderr}"
    return out


def available(cp, ns: str, name: str, replicas: int) -> bool:
    res = cp.kubectl("get", "deployment", name, "-n", ns, "-o", "json", check=False)
    if res.returncode != 0:
        return False
    st = json.loads(res.stdout).get("status", {})
    return st.get("availableReplicas", 0) == replicas and st.get("updatedReplicas", 0) == replicas


LEARNED = {"off": {"enabled": False}, "deployment": {"enabled": True},
           "sidecar": {"enabled": True, "cache": {"mode": "sidecar"}}}  # fmt: skip
COMBOS = list(itertools.product(["second", "dropin", "none"], ["cronjob", "interval"], list(LEARNED), [False, True]))


def test_every_combination_of_modes_passes_server_side_dry_run_without_warnings(cluster, helm_bin, tmp_path):
    """Runs before the release is installed (file order): `kubectl apply` over the release's own cluster-scoped
    objects would warn about their missing last-applied annotation."""
    cp, version = cluster
    ns = f"chart-dry-run-{version.split('.')[1]}"
    cp.kubectl("create", "namespace", ns)
    cp.kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted",
               "pod-security.kubernetes.io/warn=restricted")  # fmt: skip
    try:
        for scheduler, descheduler, learned, tls in COMBOS:
            values = {
                "metrics": {**NO_MONITORS["metrics"], "prometheusRule": {"enabled": False}},
                "scheduler": {"mode": scheduler},
                "descheduler": {"mode": descheduler, "namespaces": [MANAGED]},
                "learnedPolicies": LEARNED[learned],
                "tls": {"enabled": tls},
            }
            docs = helm(helm_bin, cp, "template", "hrl", str(CHART), "--namespace", ns, "--kube-version",
                        version.lstrip("v"), values=values).stdout  # fmt: skip
            count = sum(1 for d in yaml.safe_load_all(docs) if d)
            res = cp.kubectl("apply", "--dry-run=server", "-f", "-", input=docs, check=False)
            where = (scheduler, descheduler, learned, tls)
            assert res.returncode == 0, (where, res.stderr)
            lines = [ln for ln in res.stdout.splitlines() if ln.strip()]
            assert len(lines) == count and all(ln.endswith("(server dry run)") for ln in lines), (where, res.stdout)
            assert "Warning" not in res.stderr, (where, res.stderr)
    finally:
        cp.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_a_pod_security_violation_would_show_in_the_dry_run(cluster, helm_bin):
    """The dry run's warning check can fail: a container allowed to escalate privileges draws Pod Security's
    warning for "restricted" on its Deployment."""
    cp, version = cluster
    docs = helm(helm_bin, cp, "template", "hrl", str(CHART), "--namespace", "kube-public", values=NO_MONITORS).stdout
    docs = docs.replace("allowPrivilegeEscalation: false", "allowPrivilegeEscalation: true")
    ns = f"chart-psa-{version.split('.')[1]}"
    cp.kubectl("create", "namespace", ns)
    cp.kubectl("label", "namespace", ns, "pod-security.kubernetes.io/warn=restricted")
    try:
        docs = docs.replace("namespace: kube-public", f"namespace: {ns}")
        res = cp.kubectl("apply", "--dry-run=server", "-f", "-", input=docs, check=False)
        assert "Warning" in res.stderr and "allowPrivilegeEscalation" in res.stderr, res.stderr
    finally:
        cp.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def volume(name: str) -> dict:
    """A PersistentVolume for the CronJob's claim (the test cluster has no StorageClass, so a claim without one binds
    a volume without one); kwok mounts nothing, the path is never used."""
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"capacity": {"storage": "64Mi"}, "accessModes": ["ReadWriteOnce"],
                     "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": f"/tmp/{name}"}}}  # fmt: skip


@pytest.fixture(scope="module")
def release(cluster, helm_bin):
    """`helm install --wait` with the defaults plus the one managed namespace, in ONE command (namespace included):
    Helm returns when every Deployment is available and the claim is bound."""
    cp, version = cluster
    pvs = [f"hrl-chart-{version.split('.')[1]}-{i}" for i in range(2)]
    for pv in pvs:
        cp.kubectl("apply", "-f", "-", input=json.dumps(volume(pv)))
    helm(helm_bin, cp, "install", "hrl", str(CHART), "--namespace", RELEASE_NS, "--create-namespace", "--wait",
         "--timeout", "5m", values={"descheduler": {"namespaces": [MANAGED]}})  # fmt: skip
    yield cp, version
    helm(helm_bin, cp, "uninstall", "hrl", "--namespace", RELEASE_NS, check=False)
    cp.kubectl("delete", "namespace", RELEASE_NS, "--wait=false", check=False)
    cp.kubectl("delete", "pv", *pvs, "--wait=false", check=False)

    def gone() -> bool:
        res = cp.kubectl("get", "namespace", RELEASE_NS, "-o", "name", check=False)
        return res.returncode != 0

    wait_for(gone, 120, f"namespace {RELEASE_NS} to be deleted", 0.5)


def test_one_command_installs_the_chart_and_its_deployments_become_available(release):
    cp, version = release
    # `helm install --wait` returned: no waiting here
    assert available(cp, RELEASE_NS, "hrl-extender", 2) and available(cp, RELEASE_NS, "hrl-scheduler", 2)
    claim = json.loads(cp.kubectl("get", "pvc", "hrl-descheduler-state", "-n", RELEASE_NS, "-o", "json").stdout)
    assert claim["status"]["phase"] == "Bound"
    for name in ("hrl-extender", "hrl-scheduler"):
        pod = json.loads(cp.kubectl("get", "pods", "-n", RELEASE_NS, "-l", f"app.kubernetes.io/name={name}",
                                    "-o", "json").stdout)["items"][0]  # fmt: skip
        assert pod["spec"]["priorityClassName"] == "system-cluster-critical" and pod["spec"]["priority"] > 10**9
    kinds = {(o["kind"], o["metadata"]["name"]) for o in json.loads(cp.kubectl(
        "get", "networkpolicy,pdb", "-n", RELEASE_NS, "-o", "json").stdout)["items"]}  # fmt: skip
    assert {("NetworkPolicy", "hrl-extender"), ("PodDisruptionBudget", "hrl-extender"),
            ("PodDisruptionBudget", "hrl-scheduler")} <= kinds  # fmt: skip
    dep = json.loads(cp.kubectl("get", "deployment", "hrl-scheduler", "-n", RELEASE_NS, "-o", "json").stdout)
    image = dep["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"registry.k8s.io/kube-scheduler:{version.split('+')[0].split('-')[0]}"
    assert cp.kubectl("get", "cronjob", "hrl-descheduler", "-n", RELEASE_NS, "-o", "name").stdout.strip()


SA = f"system:serviceaccount:{RELEASE_NS}:hrl-descheduler"


def can_i(cp, verb: str, resource: str, namespace: str | None, subresource: str | None = None) -> bool:
    args = ["auth", "can-i", verb, resource, f"--as={SA}"]
    args += [f"--subresource={subresource}"] if subresource else []
    args += ["--all-namespaces"] if namespace is None else ["-n", namespace]
    answer = cp.kubectl(*args, check=False).stdout.strip()
    assert answer in ("yes", "no"), args
    return answer == "yes"


@pytest.mark.parametrize(
    "verb,resource,subresource",
    [("create", "pods", "eviction"), ("update", "deployments.apps", "scale"), ("get", "deployments.apps", "scale")],
)
def test_the_installed_descheduler_evicts_and_scales_only_in_its_managed_namespaces(
    release, verb, resource, subresource
):
    cp, _ = release
    assert can_i(cp, verb, resource, MANAGED, subresource)
    for ns in ("kube-system", RELEASE_NS, "default", None):
        assert not can_i(cp, verb, resource, ns, subresource), ns


def test_the_installed_descheduler_cannot_delete_pods_nor_read_what_it_does_not_use(release):
    cp, _ = release
    for verb, resource in [("delete", "pods"), ("list", "replicasets.apps"), ("watch", "secrets"), ("get", "secrets")]:
        assert not can_i(cp, verb, resource, MANAGED), (verb, resource)
    # list + watch to observe (a watch cache in interval mode), get for the re-read before each eviction
    for verb in ("list", "watch", "get"):
        assert can_i(cp, verb, "pods", None) and can_i(cp, verb, "nodes", None), verb
    assert can_i(cp, "get", "replicasets.apps", None)  # the owner re-read
    assert can_i(cp, "create", "events.events.k8s.io", MANAGED)  # one Event per eviction, scale, loop hold


def test_a_second_release_with_only_the_defaults_installs_in_the_default_namespace(release, helm_bin):
    """No `-n`: the release goes to the kubeconfig's namespace, `default`; `nameOverride` is the one value needed to
    share a cluster with the first release (its cluster-wide objects are named hrl-scheduler:*)."""
    cp, _ = release
    helm(helm_bin, cp, "install", "other", str(CHART), "--wait", "--timeout", "5m", values={"nameOverride": "other"})
    try:
        assert available(cp, "default", "other-extender", 2) and available(cp, "default", "other-scheduler", 2)
        assert cp.kubectl("get", "cronjob", "other-descheduler", "-n", "default", "-o", "name").stdout.strip()
        assert cp.kubectl("get", "clusterrole", "other:extender", "-o", "name").stdout.strip()
    finally:
        helm(helm_bin, cp, "uninstall", "other", check=False)


def test_an_upgrade_to_learned_policies_interval_mode_and_tls_starts(release, helm_bin):
    cp, _ = release
    cp.kubectl("create", "secret", "generic", "hrl-extender-tls", "-n", RELEASE_NS,
               "--from-literal=tls.crt=x", "--from-literal=tls.key=x", "--from-literal=ca.crt=x")  # fmt: skip
    values = {
        "descheduler": {"namespaces": [MANAGED], "mode": "interval"},
        "learnedPolicies": {"enabled": True},
        "tls": {"enabled": True},
    }
    helm(helm_bin, cp, "upgrade", "hrl", str(CHART), "--namespace", RELEASE_NS, "--wait", "--timeout", "5m",
         values=values)  # fmt: skip
    assert available(cp, RELEASE_NS, "hrl-descheduler", 2) and available(cp, RELEASE_NS, "hrl-embedding-cache", 1)
    assert available(cp, RELEASE_NS, "hrl-extender", 2)  # learned mode keeps the extender's replicas
    assert cp.kubectl("get", "cronjob", "-n", RELEASE_NS, "-o", "name").stdout.strip() == ""
    assert can_i(cp, "update", "leases.coordination.k8s.io", RELEASE_NS, None) is False  # only its named Lease


@pytest.mark.parametrize("build", [*MINORS, "plugin"])
def test_the_second_schedulers_command_line_parses_and_logs_json_in_each_kube_scheduler(build, tmp_path):
    if build == "plugin":
        values = {"scheduler": {"scoring": {"mode": "plugin"}}}
        out = subprocess.run([str(ROOT / "hack" / "build-scheduler-plugin.sh")], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr[-3000:]
        binary = f"{out.stdout.strip().splitlines()[-1]}/kube-scheduler"
    else:
        values, binary = {}, str(cpmod.resolve_bin_dir(kube_minor=build) / "kube-scheduler")
    (container,) = pod_spec(one(render(values), "Deployment", "hrl-scheduler"))["containers"]
    argv = container["command"]
    assert argv[0] == "kube-scheduler" and "--logging-format=json" in argv
    # every flag as the chart gives it, the configuration file absent: the flags parse, then the file is missing
    missing = tmp_path / "missing.yaml"
    argv = [f"--config={missing}" if a.startswith("--config=") else a for a in argv[1:]]
    out = subprocess.run([binary, *argv], capture_output=True, text=True, timeout=60)
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert out.returncode != 0 and lines, out.stderr
    records = [json.loads(ln) for ln in lines]  # component-base's JSON: one object per line, no plain line
    assert str(missing) in records[-1]["err"], records[-1]
