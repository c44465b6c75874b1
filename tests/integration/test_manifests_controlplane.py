"""manifests/ against the real API server (issue 3, item 4d), and the pieces of the shipped RBAC at work:

- every object of `kubectl kustomize` of the base and of each overlay passes `kubectl apply --dry-run=server`
  (schema, defaulting, validation, admission - Pod Security "restricted" included) with no warning;
- least privilege, asked of the real authorizer with `kubectl auth can-i --as=system:serviceaccount:...`
  once the shipped RBAC is applied: the extender can get/list/watch nodes and pods and nothing else, the
  descheduler can create pods/eviction but cannot delete pods;
- the descheduler's leader election (descheduler/leader.py) on the real Lease API, as the descheduler's
  ServiceAccount: one holder, a 409 for a stale write, release and takeover, and two `hrl-descheduler
  --interval` processes of which only the Lease holder runs cycles until it is stopped;
- the extender's HTTPS option with a real kube-scheduler (`enableHTTPS` + `tlsConfig.caFile`): pods are
  scheduled through it, and a scheduler trusting another CA cannot reach it (nothing skips verification).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from cp_helpers import ROOT, apply, events, pod_spec, wait_for

from descheduler.leader import KubeLeaseBackend, LeaderElector, LeaseConflict, LeaseError, LeaseRecord, micro_time
from extender.config import load_extender_config
from extender.server import ExtenderServer

pytestmark = pytest.mark.controlplane

MANIFESTS = ROOT / "manifests"
NS = "hrl-scheduler-system"
TARGETS = ["base"] + sorted(f"overlays/{p.parent.name}" for p in (MANIFESTS / "overlays").glob("*/kustomization.yaml"))
EXTENDER_SA = f"system:serviceaccount:{NS}:hrl-extender"
DESCHEDULER_SA = f"system:serviceaccount:{NS}:hrl-descheduler"
RBAC_KINDS = {"Namespace", "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}


def cpmod():
    return sys.modules["hrl_controlplane"]  # hack/controlplane.py, loaded by conftest.py


def render(cp, target: str) -> str:
    return cp.kubectl("kustomize", str(MANIFESTS / target)).stdout


def objects(cp, target: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(render(cp, target)) if d]


@pytest.fixture(scope="module")
def shipped_rbac(control_plane):
    """The namespace and every ServiceAccount/Role/Binding of the base and all overlays, applied for real
    (the authorizer answers `auth can-i` from stored objects only); deleted at the end of the module."""
    seen: dict[tuple, dict] = {}
    for t in TARGETS:
        for o in objects(control_plane, t):
            if o["kind"] in RBAC_KINDS:
                seen[(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"])] = o
    docs = yaml.safe_dump_all(sorted(seen.values(), key=lambda o: o["kind"] != "Namespace"))
    control_plane.kubectl("apply", "-f", "-", input=docs)
    yield seen
    cluster_scoped = [
        o
        for o in seen.values()
        if o["kind"] in ("ClusterRole", "ClusterRoleBinding") or o["metadata"].get("namespace") == "kube-system"
    ]
    control_plane.kubectl(
        "delete", "--ignore-not-found", "--wait=false", "-f", "-", input=yaml.safe_dump_all(cluster_scoped), check=False
    )
    control_plane.kubectl("delete", "namespace", NS, "--ignore-not-found", "--wait=false", check=False)

    def gone() -> bool:
        res = control_plane.kubectl("get", "namespace", NS, "-o", "name", check=False)
        return res.returncode != 0 and "NotFound" in res.stderr

    wait_for(gone, 90, f"namespace {NS} to be deleted", 0.5)


# ---- 4d: server-side dry run --------------------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_every_object_passes_server_side_dry_run_without_warnings(control_plane, shipped_rbac, target):
    docs = render(control_plane, target)
    count = sum(1 for d in yaml.safe_load_all(docs) if d)
    res = control_plane.kubectl("apply", "--dry-run=server", "-f", "-", input=docs, check=False)
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stdout.splitlines() if ln.strip()]
    assert len(lines) == count and all(ln.endswith("(server dry run)") for ln in lines), res.stdout
    # Pod Security "restricted" (the namespace's warn label), deprecated APIs, unknown fields: all warn here.
    assert "Warning" not in res.stderr, res.stderr


def test_a_broken_object_is_refused_by_the_dry_run(control_plane, shipped_rbac):
    """The dry run really validates: a CronJob with an invalid concurrencyPolicy does not pass."""
    docs = render(control_plane, "base").replace("concurrencyPolicy: Forbid", "concurrencyPolicy: Sometimes")
    res = control_plane.kubectl("apply", "--dry-run=server", "-f", "-", input=docs, check=False)
    assert res.returncode != 0 and "concurrencyPolicy" in res.stderr


# ---- 4d: least privilege -------------------------------------------------------------------------------------


SUBRESOURCES = {"eviction", "binding", "scale", "status", "resize"}


#: Resources of APIs this control plane does not serve (CRDs not installed): kubectl cannot map them and would
#: ask about group "" instead, so :func:`can_i` asks the authorizer with a SubjectAccessReview naming the group.
UNSERVED = {"verticalpodautoscalers.autoscaling.k8s.io"}


def can_i(cp, sa: str, verb: str, resource: str, namespace: str | None = "default") -> bool:
    """`kubectl auth can-i` as ``sa``. ``resource``: ``pods``, ``deployments.apps/scale`` (a subresource:
    passed as --subresource, since kubectl reads ``TYPE/NAME``), ``leases.coordination.k8s.io/NAME``; one of
    :data:`UNSERVED`: a SubjectAccessReview for ``sa`` (what ``auth can-i`` sends, with the group spelled out)."""
    if resource in UNSERVED:
        plural, _, group = resource.partition(".")
        attrs = {"verb": verb, "group": group, "resource": plural, "namespace": namespace or ""}
        sar = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview"}
        sar["spec"] = {"user": sa, "resourceAttributes": attrs}
        out = cp.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(sar)).stdout
        return bool(json.loads(out)["status"].get("allowed"))
    head, _, tail = resource.partition("/")
    if tail in SUBRESOURCES:
        args = ["auth", "can-i", verb, head, f"--subresource={tail}", f"--as={sa}"]
    else:
        args = ["auth", "can-i", verb, resource, f"--as={sa}"]
    args += ["--all-namespaces"] if namespace is None else ["-n", namespace]
    res = cp.kubectl(*args, check=False)
    answer = res.stdout.strip()
    assert answer in ("yes", "no"), f"kubectl {' '.join(args)}: {res.stdout} {res.stderr}"
    return answer == "yes"


READS = [(v, r) for r in ("nodes", "pods") for v in ("get", "list", "watch")]
EXTENDER_FORBIDDEN = [
    ("create", "pods"),
    ("delete", "pods"),
    ("update", "pods"),
    ("patch", "pods"),
    ("create", "pods/eviction"),
    ("create", "pods/binding"),
    ("patch", "pods/resize"),
    ("patch", "nodes"),
    ("delete", "nodes"),
    ("list", "secrets"),
    ("get", "secrets"),
    ("list", "configmaps"),
    ("list", "poddisruptionbudgets.policy"),
    ("list", "deployments.apps"),
    ("update", "deployments.apps/scale"),
    ("create", "leases.coordination.k8s.io"),
    ("create", "events"),
    ("list", "persistentvolumes"),
]
#: Cluster-wide: the descheduler observes (descheduler/kube.py: a LIST per kind with --once, list + watch in
#: interval mode) and re-reads what an eviction depends on (GETs, descheduler/reread.py), nothing more.
DESCHEDULER_OBSERVES = [
    ("get", "pods"),
    ("watch", "pods"),
    ("get", "nodes"),
    ("watch", "nodes"),
    ("get", "poddisruptionbudgets.policy"),
    ("get", "replicasets.apps"),
    ("list", "nodes"),
    ("list", "pods"),
    ("list", "poddisruptionbudgets.policy"),
    ("list", "deployments.apps"),
    ("list", "statefulsets.apps"),
    ("list", "persistentvolumes"),
    ("list", "persistentvolumeclaims"),
]
#: Only in the namespaces it manages (the generated manifests: [default], one RoleBinding each).
DESCHEDULER_ACTS = [
    ("create", "pods/eviction"),
    ("get", "deployments.apps/scale"),
    ("update", "deployments.apps/scale"),
    ("list", "horizontalpodautoscalers.autoscaling"),
    ("patch", "pods/resize"),
    ("patch", "pods"),  # make-before-break moves: the pod-deletion-cost annotation (descheduler/surge.py)
    ("list", "resourcequotas"),
    ("get", "verticalpodautoscalers.autoscaling.k8s.io"),
    ("list", "verticalpodautoscalers.autoscaling.k8s.io"),
    ("create", "events.events.k8s.io"),
]
DESCHEDULER_FORBIDDEN = [
    ("list", "replicasets.apps"),
    ("patch", "deployments.apps/scale"),
    ("watch", "horizontalpodautoscalers.autoscaling"),
    ("delete", "pods"),
    ("deletecollection", "pods"),
    ("create", "pods"),
    ("update", "pods"),
    ("list", "secrets"),
    ("get", "secrets"),
    ("patch", "nodes"),
    ("update", "nodes"),
    ("delete", "nodes"),
    ("create", "pods/binding"),
    ("update", "deployments.apps"),
    ("delete", "deployments.apps"),
    ("update", "statefulsets.apps/scale"),
    ("delete", "poddisruptionbudgets.policy"),
    ("list", "configmaps"),
    ("create", "horizontalpodautoscalers.autoscaling"),
    ("update", "horizontalpodautoscalers.autoscaling"),
    ("delete", "horizontalpodautoscalers.autoscaling"),
    ("patch", "deployments.apps"),
    ("update", "pods/resize"),
    ("create", "verticalpodautoscalers.autoscaling.k8s.io"),
    ("update", "verticalpodautoscalers.autoscaling.k8s.io"),
    ("patch", "verticalpodautoscalers.autoscaling.k8s.io"),
    ("delete", "verticalpodautoscalers.autoscaling.k8s.io"),
]


@pytest.mark.parametrize("verb,resource", READS)
@pytest.mark.parametrize("namespace", ["default", None])
def test_the_extender_can_read_nodes_and_pods(control_plane, shipped_rbac, verb, resource, namespace):
    assert can_i(control_plane, EXTENDER_SA, verb, resource, namespace)


@pytest.mark.parametrize("verb,resource", EXTENDER_FORBIDDEN)
def test_the_extender_can_do_nothing_else(control_plane, shipped_rbac, verb, resource):
    assert not can_i(control_plane, EXTENDER_SA, verb, resource, None)
    assert not can_i(control_plane, EXTENDER_SA, verb, resource, NS)


def listed_rules(cp, sa: str, namespace: str) -> set[tuple[str, str]]:
    """(resource, verbs) rows of `kubectl auth can-i --list` for ``sa``, without the rules every
    authenticated identity has (self-reviews)."""
    out = cp.kubectl("auth", "can-i", "--list", f"--as={sa}", "-n", namespace).stdout.splitlines()
    rows = set()
    for line in out[1:]:
        parts = line.split()
        if not parts or parts[0].startswith("["):  # non-resource URLs (/api, /healthz, ...): discovery roles
            continue
        if parts[0].startswith("selfsubject"):
            continue
        rows.add((parts[0], line[line.rindex("[") :]))
    return rows


def test_the_extender_has_exactly_two_resource_rules(control_plane, shipped_rbac):
    for ns in ("default", NS, "kube-system"):
        assert listed_rules(control_plane, EXTENDER_SA, ns) == {
            ("nodes", "[get list watch]"),
            ("pods", "[get list watch]"),
        }


@pytest.mark.parametrize("verb,resource", DESCHEDULER_OBSERVES)
def test_the_descheduler_can_observe_the_whole_cluster(control_plane, shipped_rbac, verb, resource):
    assert can_i(control_plane, DESCHEDULER_SA, verb, resource, None)


@pytest.mark.parametrize("verb,resource", DESCHEDULER_ACTS)
def test_the_descheduler_can_evict_and_scale_only_in_the_namespaces_it_manages(
    control_plane, shipped_rbac, verb, resource
):
    """issue 13 item 7: never in kube-system or its own namespace, nor in one it does not manage, nor cluster-wide."""
    assert can_i(control_plane, DESCHEDULER_SA, verb, resource, "default")
    for ns in ("kube-system", NS, "unmanaged-namespace"):
        assert not can_i(control_plane, DESCHEDULER_SA, verb, resource, ns), ns
    assert not can_i(control_plane, DESCHEDULER_SA, verb, resource, None)


@pytest.mark.parametrize("verb,resource", DESCHEDULER_FORBIDDEN)
def test_the_descheduler_cannot_delete_pods_nor_touch_anything_else(control_plane, shipped_rbac, verb, resource):
    assert not can_i(control_plane, DESCHEDULER_SA, verb, resource, None)
    assert not can_i(control_plane, DESCHEDULER_SA, verb, resource, NS)


def test_the_descheduler_may_use_its_own_lease_only_in_its_namespace(control_plane, shipped_rbac):
    cp = control_plane
    lease = "leases.coordination.k8s.io"
    assert can_i(cp, DESCHEDULER_SA, "get", f"{lease}/hrl-descheduler", NS)
    assert can_i(cp, DESCHEDULER_SA, "update", f"{lease}/hrl-descheduler", NS)
    assert can_i(cp, DESCHEDULER_SA, "create", lease, NS)
    assert not can_i(cp, DESCHEDULER_SA, "update", f"{lease}/hrl-scheduler", NS)
    assert not can_i(cp, DESCHEDULER_SA, "update", f"{lease}/kube-scheduler", "kube-system")
    assert not can_i(cp, DESCHEDULER_SA, "create", lease, "default")
    assert not can_i(cp, DESCHEDULER_SA, "delete", f"{lease}/hrl-descheduler", NS)


def test_the_second_scheduler_can_schedule_and_hold_its_own_lease(control_plane, shipped_rbac):
    cp, sa = control_plane, f"system:serviceaccount:{NS}:hrl-scheduler"
    assert can_i(cp, sa, "create", "pods/binding", None)
    assert can_i(cp, sa, "list", "pods", None) and can_i(cp, sa, "watch", "nodes", None)
    assert can_i(cp, sa, "update", "leases.coordination.k8s.io/hrl-scheduler", NS)
    assert can_i(cp, sa, "get", "configmaps/extension-apiserver-authentication", "kube-system")
    assert not can_i(cp, sa, "update", "leases.coordination.k8s.io/hrl-descheduler", NS)
    assert not can_i(cp, sa, "list", "secrets", None)


# ---- leader election on the real Lease API, as the descheduler's ServiceAccount ------------------------------


def service_account_kubeconfig(cp, path: Path, namespace: str, name: str) -> Path:
    """A kubeconfig that authenticates as the ServiceAccount ``namespace/name`` with a bound token from the
    TokenRequest API (`kubectl create token`): the real credentials a Pod of that ServiceAccount has."""
    token = cp.kubectl("create", "token", name, "-n", namespace, "--duration=1h").stdout.strip()
    doc = yaml.safe_load(Path(cp.kubeconfig).read_text())
    for u in doc["users"]:
        u["user"] = {"token": token}
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture()
def descheduler_api(control_plane, shipped_rbac, tmp_path):
    from kubernetes import config as kconfig

    kc = service_account_kubeconfig(control_plane, tmp_path / "descheduler.kubeconfig", NS, "hrl-descheduler")
    client = kconfig.new_client_from_config(config_file=str(kc))
    yield client
    client.close()
    control_plane.kubectl("delete", "lease", "hrl-descheduler", "-n", NS, "--ignore-not-found")


def test_one_candidate_holds_the_real_lease_and_a_release_hands_it_over(control_plane, descheduler_api):
    a = LeaderElector(KubeLeaseBackend(NS, "hrl-descheduler", descheduler_api), "replica-a")
    b = LeaderElector(KubeLeaseBackend(NS, "hrl-descheduler", descheduler_api), "replica-b")
    assert a.try_acquire_or_renew() and a.is_leader()
    assert not b.try_acquire_or_renew() and b.leader == "replica-a"
    lease = json.loads(control_plane.kubectl("get", "lease", "hrl-descheduler", "-n", NS, "-o", "json").stdout)
    spec = lease["spec"]
    assert spec["holderIdentity"] == "replica-a" and spec["leaseDurationSeconds"] == 15
    assert spec["renewTime"].endswith("Z") and len(spec["renewTime"]) == len("2026-01-01T00:00:00.000000Z")
    assert a.try_acquire_or_renew()  # a renewal is an update with the current resourceVersion
    assert a.release()
    assert b.try_acquire_or_renew() and b.is_leader()
    spec = json.loads(control_plane.kubectl("get", "lease", "hrl-descheduler", "-n", NS, "-o", "json").stdout)["spec"]
    assert spec["holderIdentity"] == "replica-b" and spec["leaseTransitions"] == 1


def test_a_stale_write_is_a_conflict_and_a_foreign_lease_is_forbidden(control_plane, descheduler_api):
    backend = KubeLeaseBackend(NS, "hrl-descheduler", descheduler_api)
    first = backend.create(LeaseRecord("x", 15, transitions=0))
    second = backend.update(replace(first, renew_time=micro_time(time.time())))
    assert second.resource_version != first.resource_version
    with pytest.raises(LeaseConflict):
        backend.update(replace(first, holder="y"))  # first's resourceVersion is stale now: 409
    with pytest.raises(LeaseConflict):
        backend.create(LeaseRecord("y", 15))  # already exists: 409
    with pytest.raises(LeaseError, match="HTTP 403"):
        KubeLeaseBackend(NS, "hrl-scheduler", descheduler_api).get()  # RBAC names one Lease only


def start_descheduler(tmp_path: Path, kubeconfig: Path, identity: str) -> subprocess.Popen:
    cfg = tmp_path / f"{identity}.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "hrl-scheduler.io/v1alpha1",
                "kind": "DeschedulerConfiguration",
                "dryRun": True,
                "excludedNamespaces": ["kube-system", NS],
                "leaderElection": {
                    "enabled": True,
                    "leaseNamespace": NS,
                    "identity": identity,
                    "leaseDurationSeconds": 4,
                    "renewDeadlineSeconds": 3,
                    "retryPeriodSeconds": 1,
                },
            }
        )
    )
    # the child writes to its own copies of the descriptors; ours are closed once it is started
    with open(tmp_path / f"{identity}.out", "w") as out, open(tmp_path / f"{identity}.err", "w") as err:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "descheduler",
                "--config",
                str(cfg),
                "--kubeconfig",
                str(kubeconfig),
                "--interval",
                "1",
                "--json",
            ],
            stdout=out,
            stderr=err,
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )


def reports(tmp_path: Path, identity: str) -> int:
    return sum(1 for ln in (tmp_path / f"{identity}.out").read_text().splitlines() if ln.startswith("{"))


def test_only_the_lease_holder_runs_cycles_and_a_stopped_leader_hands_over(control_plane, shipped_rbac, tmp_path):
    cp = control_plane
    kc = service_account_kubeconfig(cp, tmp_path / "descheduler.kubeconfig", NS, "hrl-descheduler")
    procs = {name: start_descheduler(tmp_path, kc, name) for name in ("replica-a", "replica-b")}
    try:

        def holder() -> str | None:
            res = cp.kubectl(
                "get", "lease", "hrl-descheduler", "-n", NS, "-o", "jsonpath={.spec.holderIdentity}", check=False
            )
            return res.stdout.strip() or None

        leader = wait_for(lambda: holder() if holder() in procs else None, 60, "a replica to take the lease")
        standby = next(n for n in procs if n != leader)
        wait_for(lambda: reports(tmp_path, leader) >= 2, 60, f"{leader} to run cycles")
        assert reports(tmp_path, standby) == 0  # the standby observed once at start, then only waits
        procs[leader].send_signal(signal.SIGTERM)
        assert procs[leader].wait(30) == 0  # a clean stop: it released the lease
        wait_for(lambda: holder() == standby, 30, f"{standby} to take over the released lease")
        wait_for(lambda: reports(tmp_path, standby) >= 1, 60, f"{standby} to run cycles")
        for name in procs:
            err = (tmp_path / f"{name}.err").read_text()
            assert f"leader election on lease {NS}/hrl-descheduler as {name}" in err
            assert f"{name} holds the lease; running cycles" in err
            assert "cycle failed" not in err and "cannot read the cluster" not in err, err
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        cp.kubectl("delete", "lease", "hrl-descheduler", "-n", NS, "--ignore-not-found")


# ---- the extender's HTTPS option with a real kube-scheduler --------------------------------------------------


@pytest.fixture()
def https_extender(tmp_path):
    pki = tmp_path / "pki"
    subprocess.run(
        [str(ROOT / "hack" / "gen-extender-certs.sh"), str(pki), "localhost", "127.0.0.1"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    config = load_extender_config(
        {
            "apiVersion": "hrl-scheduler.io/v1alpha1",
            "kind": "ExtenderConfiguration",
            "listen": {
                "host": "127.0.0.1",
                "port": 0,
                "tls": {"certFile": str(pki / "tls.crt"), "keyFile": str(pki / "tls.key")},
            },
        }
    )
    with ExtenderServer(config) as server:
        yield server, pki


def filter_calls(server) -> float:
    return sum(
        s.value for fam in server.registry.collect() for s in fam.samples if s.name == "hrl_extender_filter_total"
    )


def test_kube_scheduler_verifies_the_extender_against_the_ca_and_schedules_through_it(
    control_plane, kwok_nodes, namespace, https_extender, tmp_path
):
    cp, (server, pki) = control_plane, https_extender
    kwok_nodes(2)
    other = tmp_path / "other-pki"
    subprocess.run(
        [str(ROOT / "hack" / "gen-extender-certs.sh"), str(other), "localhost"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    # ignorable: false, so that a TLS failure is not papered over: the pod would stay Pending.
    reg = {"enableHTTPS": True, "ignorable": False, "httpTimeout": "5s", "filterVerb": "filter"}
    good = cpmod().extender_registration(server.url, **reg, tlsConfig={"caFile": str(pki / "ca.crt")})
    bad = cpmod().extender_registration(server.url, **reg, tlsConfig={"caFile": str(other / "ca.crt")})
    assert server.url.startswith("https://127.0.0.1:")
    with cp.scheduler("hrl-tls", [good]), cp.scheduler("hrl-tls-wrong-ca", [bad]):
        before = filter_calls(server)
        apply(
            cp,
            namespace,
            [
                {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "via-tls"}, "spec": pod_spec("hrl-tls")},
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "wrong-ca"},
                    "spec": pod_spec("hrl-tls-wrong-ca"),
                },
            ],
        )

        def node(name: str) -> str:
            return cp.kubectl("get", "pod", name, "-n", namespace, "-o", "jsonpath={.spec.nodeName}").stdout

        wait_for(lambda: node("via-tls"), 60, "the pod of the CA-verifying scheduler to be bound")
        assert filter_calls(server) > before  # it went through the extender over HTTPS

        def tls_refused() -> bool:
            msgs = " ".join(e.get("message", "") for e in events(cp, namespace, "wrong-ca"))
            return "x509" in msgs or "certificate" in msgs

        wait_for(tls_refused, 60, "the wrong-CA scheduler to report a certificate error")
        assert node("wrong-ca") == ""
