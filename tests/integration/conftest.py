"""Fixtures of the integration tests that need the real control plane (marker ``controlplane``).

- ``control_plane`` (session): etcd, kube-apiserver, kube-controller-manager, two kube-schedulers
  (``default-scheduler``, ``hrl-scheduler`` with our extender), ``hrl-extender`` fed by a watch (call graph:
  the Online Boutique manifests plus pod annotations) and kwok, all on 127.0.0.1, brought up once per session
  by ``hack/controlplane.py`` and stopped at the end. The binaries are built when missing
  (``hack/build-controlplane.sh``); without Go the tests FAIL with a message saying so, they never skip.
  API: ``.kubeconfig`` (Path, admin), ``.kubeconfigs`` (identity → Path: ``hrl-extender``, ``hrl-descheduler``),
  ``.bin_dir``, ``.server`` (URL), ``.kubectl(*args, input=None, check=True)`` → ``CompletedProcess``,
  ``.api(identity=None)`` → ``kubernetes.client.ApiClient``, ``.extender_url`` (the hrl-scheduler's
  ``urlPrefix``), ``.extender_base_url``, ``.logs_dir``, ``.audit_events(user)``, ``.scheduler(name,
  extenders)`` (one more kube-scheduler, a context manager), ``.startup_s`` (seconds per phase).
- ``kwok_nodes`` (per test): ``make(count, cpu="4", memory="16Gi", labels=None)`` → node names; creates
  fake nodes (named after the test) and waits until they are Ready and untainted; deletes them afterwards.
- ``namespace`` (per test): a fresh namespace, deleted afterwards (waiting until its pods are gone, so the next
  test starts from a quiet cluster), before the test's nodes are deleted.
- ``cache_and_extender`` (per test): a real ``hrl-policy cache serve`` and one more ``hrl-extender`` watching the API
  server that copies embeddings, intent and pending moves from that cache every 0.2 s; yields ``(cache address,
  extender base URL)``.

When a test that uses the control plane fails, the tail of every component's log is attached to its report.
"""

from __future__ import annotations

import json
import re
import sys
import time

import httpx
import pytest
import yaml
from cp_helpers import BOUTIQUE, cpmod, spawn, stop, wait_for


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("controlplane")
    cp = cpmod.ControlPlane(workdir)
    try:
        cp.up(extender_config={"topology": {"sources": [str(BOUTIQUE)]}, "logLevel": "INFO"})
    except cpmod.ControlPlaneError as exc:
        cp.down()
        pytest.fail(f"the control plane did not come up: {exc}", pytrace=False)
    print(
        f"\ncontrol plane up in {cp.startup_s.get('total', 0):.1f} s ({json.dumps(cp.startup_s)}); "
        f"logs in {cp.logs_dir}",
        file=sys.stderr,
    )
    yield cp
    cp.down()


def _slug(text: str, limit: int = 30) -> str:
    s = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return s[:limit].rstrip("-") or "t"


@pytest.fixture
def kwok_nodes(control_plane, request):
    created: list[str] = []
    prefix = f"{_slug(request.node.name, 24)}-{int(time.time() * 1000) % 100000}"

    def make(
        count: int, cpu: str = "4", memory: str = "16Gi", labels: dict | None = None, pods: int = 110
    ) -> list[str]:
        start = len(created)
        nodes = [cpmod.fake_node(f"{prefix}-n{start + i}", cpu, memory, pods, labels) for i in range(count)]
        names = [n["metadata"]["name"] for n in nodes]
        created.extend(names)
        control_plane.create_nodes(nodes, wait_s=90)
        return names

    yield make
    if created:
        control_plane.delete_nodes(created)

        def gone() -> bool:
            out = control_plane.kubectl("get", "nodes", "-o", "name").stdout
            return not any(f"node/{n}" in out.split() for n in created)

        cpmod.wait_for(gone, 60, f"nodes {created} to be deleted")


@pytest.fixture
def namespace(control_plane, kwok_nodes, request):
    ns = f"{_slug(request.node.name, 40)}-{int(time.time() * 1000) % 100000}"
    control_plane.kubectl("create", "namespace", ns)
    yield ns
    # Release anything a test held back (finalizers), then delete and wait: pods must be gone before the
    # test's nodes are (kwok only deletes pods on the nodes it manages).
    pods = json.loads(control_plane.kubectl("get", "pods", "-n", ns, "-o", "json").stdout)["items"]
    for p in pods:
        if p["metadata"].get("finalizers"):
            control_plane.kubectl(
                "patch",
                "pod",
                p["metadata"]["name"],
                "-n",
                ns,
                "--type=merge",
                "-p",
                '{"metadata":{"finalizers":null}}',
                check=False,
            )
    # The namespace controller waits a fixed 5 s (namespaceDeletionGracePeriod) before it even starts, so
    # do not wait for it: mark the namespace Terminating (no new pod can be created in it any more), delete
    # its pods at once (grace 0, as kwok would) and wait only until none is left; the namespace object goes
    # away in the background.
    control_plane.kubectl("delete", "namespace", ns, "--wait=false")

    def no_pods() -> bool:
        control_plane.kubectl(
            "delete", "pods", "--all", "-n", ns, "--grace-period=0", "--force", "--wait=false", check=False
        )
        return control_plane.kubectl("get", "pods", "-n", ns, "-o", "name").stdout.strip() == ""

    cpmod.wait_for(no_pods, 60, f"the pods of namespace {ns} to be deleted", 0.3)


@pytest.fixture
def cache_and_extender(control_plane, tmp_path):
    """A real ``hrl-policy cache serve`` and an ``hrl-extender`` watching the API server (as the
    ``hrl-extender`` identity) that copies embeddings and intent from that cache every 0.2 s."""
    cache_port, ext_port = cpmod.free_ports(2)
    cache_addr = f"127.0.0.1:{cache_port}"
    procs = [
        spawn([sys.executable, "-m", "policy.cli", "cache", "serve", "--listen", cache_addr], tmp_path / "cache.log")
    ]
    cfg = {
        "apiVersion": "hrl-scheduler.io/v1alpha1",
        "kind": "ExtenderConfiguration",
        "listen": {"host": "127.0.0.1", "port": ext_port},
        "logLevel": "WARNING",
        "kubernetes": {"enabled": True, "kubeconfig": str(control_plane.kubeconfigs["hrl-extender"])},
        "maxSnapshotAgeSeconds": 120,
        "cache": {"address": cache_addr, "refreshSeconds": 0.2, "timeoutSeconds": 1, "match": "latest"},
    }
    (tmp_path / "extender.yaml").write_text(yaml.safe_dump(cfg))
    procs.append(
        spawn(
            [sys.executable, "-m", "extender", "--config", str(tmp_path / "extender.yaml")], tmp_path / "extender.log"
        )
    )
    base = f"http://127.0.0.1:{ext_port}"

    def ready():
        for p, name in zip(procs, ("cache", "extender")):
            assert p.poll() is None, f"{name} exited: {(tmp_path / f'{name}.log').read_text()[-2000:]}"
        return httpx.get(base + "/readyz", timeout=1).status_code == 200

    try:
        wait_for(ready, 60, "the cache server and the extender to be ready")
        yield cache_addr, base
    finally:
        for p in reversed(procs):
            stop(p)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if not rep.failed or "control_plane" not in getattr(item, "fixturenames", ()):
        return
    cp = getattr(item, "funcargs", {}).get("control_plane")
    if cp is None:
        return
    for name, path in cp.logs().items():
        if name == "audit":
            continue
        rep.sections.append((f"control plane log: {name} ({path})", cpmod.tail(path, 15)))


def pytest_collection_modifyitems(config, items):
    """Every test that uses the control plane carries the ``controlplane`` marker (so ``-m`` selects it)."""
    for item in items:
        if "control_plane" in getattr(item, "fixturenames", ()) and not item.get_closest_marker("controlplane"):
            item.add_marker(pytest.mark.controlplane)
