"""Fixtures of the kind end-to-end tests (marker ``kind``, deselected by default; run by hack/e2e-kind.sh).

The scenarios of tests/integration run unchanged: this module provides the same fixtures they use
(``control_plane``, ``kwok_nodes``, ``namespace``) on the cluster that ``KUBECONFIG`` names, which
``hack/kind-up.sh --e2e`` set up (the second-scheduler manifests, kwok, an audit log of the descheduler's
requests). ``control_plane`` is a :class:`KindCluster`: hack/controlplane.py's ``ControlPlane`` API with its
processes replaced by the cluster's, namely

- ``kubectl(...)`` runs ``kubectl`` from PATH (or ``$KUBECTL``) with ``KUBECONFIG``;
- ``kubeconfigs[identity]`` / ``api(identity)``: the shipped ServiceAccounts ``hrl-descheduler`` and
  ``hrl-extender`` (bound tokens from ``kubectl create token``), instead of the test control plane's
  static-token users of the same names and the same permissions;
- ``extender_base_url``: a ``kubectl port-forward`` to the extender Deployment (one replica);
- ``audit_events(user)``: the API server's audit log read from the control-plane container
  (``docker exec $HRL_KIND_NODE``), ``user`` mapped to the ServiceAccount's user name.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))  # cp_helpers and the scenario modules


cpmod = load_script("hrl_controlplane", ROOT / "hack" / "controlplane.py")
_integration = load_script("hrl_integration_conftest", ROOT / "tests" / "integration" / "conftest.py")
kwok_nodes = _integration.kwok_nodes  # the same per-test fixtures, on top of the control_plane below
namespace = _integration.namespace

NS = "hrl-scheduler-system"
IDENTITIES = ("hrl-descheduler", "hrl-extender")
AUDIT_LOG = "/var/log/kubernetes/kube-apiserver-audit.log"


class KindCluster(cpmod.ControlPlane):
    """The ``ControlPlane`` API (see hack/controlplane.py) on an existing cluster; starts no process except
    a port-forward to the extender."""

    def __init__(self, workdir: Path, kubeconfig: Path, kubectl: Path, audit_node: str):
        super().__init__(workdir, bin_dir=kubectl.parent)
        self.kubeconfig = kubeconfig
        self.audit_node = audit_node
        self.server = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        self._port_forward: subprocess.Popen | None = None

    def service_account_kubeconfig(self, name: str) -> Path:
        token = self.kubectl("create", "token", name, "-n", NS, "--duration=2h").stdout.strip()
        doc = yaml.safe_load(self.kubeconfig.read_text())
        for u in doc["users"]:
            u["user"] = {"token": token}
        path = self.workdir / f"{name}.kubeconfig"
        path.write_text(yaml.safe_dump(doc))
        return path

    def forward_extender(self) -> None:
        port = cpmod.free_ports(1)[0]
        with open(self.logs_dir / "port-forward.log", "w") as log:  # the child keeps its own descriptor
            self._port_forward = subprocess.Popen(
                [
                    str(self.bin_dir / "kubectl"),
                    f"--kubeconfig={self.kubeconfig}",
                    "-n",
                    NS,
                    "port-forward",
                    "deploy/hrl-extender",
                    f"{port}:8888",
                ],
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        self.extender_base_url = f"http://127.0.0.1:{port}"
        self.extender_url = f"{self.extender_base_url}/scheduler"

        def ready() -> bool:
            try:
                with urllib.request.urlopen(f"{self.extender_base_url}/readyz", timeout=5) as r:
                    return r.status == 200
            except urllib.error.HTTPError as exc:
                exc.close()  # it holds the open response (and its socket)
                raise

        cpmod.wait_for(ready, 60, "the extender's /readyz through kubectl port-forward")

    def audit_events(self, user: str | None = None) -> list[dict[str, Any]]:
        text = subprocess.run(
            ["docker", "exec", self.audit_node, "cat", AUDIT_LOG],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        (self.logs_dir / "audit.log").write_text(text)
        if user in IDENTITIES:
            user = f"system:serviceaccount:{NS}:{user}"
        return super().audit_events(user)

    def down(self, grace_s: float = 10.0) -> None:
        if self._port_forward is not None and self._port_forward.poll() is None:
            self._port_forward.terminate()
            try:
                self._port_forward.wait(grace_s)
            except subprocess.TimeoutExpired:
                self._port_forward.kill()
                self._port_forward.wait()
        super().down(grace_s)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory):
    kubeconfig = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    if not kubeconfig:
        pytest.fail(
            "the kind tests need KUBECONFIG naming a cluster set up by hack/kind-up.sh --e2e "
            "(hack/e2e-kind.sh does both)",
            pytrace=False,
        )
    kubectl = shutil.which(os.environ.get("KUBECTL", "kubectl"))
    if kubectl is None:
        pytest.fail("kubectl not found on PATH (or $KUBECTL)", pytrace=False)
    node = os.environ.get("HRL_KIND_NODE") or f"{os.environ.get('KIND_CLUSTER_NAME', 'hrl-e2e')}-control-plane"
    cp = KindCluster(tmp_path_factory.mktemp("kind"), Path(kubeconfig), Path(kubectl), node)
    try:
        for identity in IDENTITIES:
            cp.kubeconfigs[identity] = cp.service_account_kubeconfig(identity)
        cp.forward_extender()
    except Exception:
        cp.down()
        raise
    yield cp
    cp.down()


def pytest_collection_modifyitems(config, items):
    """The kind tests carry the marker ``kind`` only. tests/integration/conftest.py marks every test using a
    ``control_plane`` fixture ``controlplane``, these included when both directories are collected; undo it
    here (this conftest is registered first, so its hook runs after that one and before `-m` deselects), so
    that ``-m controlplane`` never selects a test that needs a kind cluster."""
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.own_markers[:] = [m for m in item.own_markers if m.name != "controlplane"]
