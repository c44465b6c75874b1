#!/usr/bin/env python3
"""A real Kubernetes control plane on 127.0.0.1, for the ``controlplane`` tests, ``make bench-scheduler``
and by hand: etcd, kube-apiserver, kube-controller-manager, two kube-schedulers (``default-scheduler``
without our extender, ``hrl-scheduler`` with it), the extender itself, and kwok (fake nodes).

Usage (the binaries come from ``hack/build-controlplane.sh``, which this builds first when they are missing)::

    hack/controlplane.py up     [--dir DIR] [--extender-url URL | --no-extender] [--extender-config FILE]
                                [--topology SOURCE] [--nodes N]
    hack/controlplane.py status [--dir DIR]
    hack/controlplane.py down   [--dir DIR]
    export KUBECONFIG=DIR/admin.kubeconfig

``DIR`` defaults to ``out/controlplane``. ``up`` writes ``DIR/state.json`` (ports, PIDs, paths), the
kubeconfigs, the component configurations and ``DIR/logs/<component>.log``; ``down`` stops the recorded
PIDs one by one in reverse start order (SIGTERM, then SIGKILL after a grace period; a PID whose command line
is no longer the recorded binary is left alone) and removes etcd's data directory; the logs stay.

Start order: etcd → kube-apiserver (``/readyz``) → RBAC for the test identities → the extender
(``hrl-extender`` fed by a watch, ``/readyz``) → kube-controller-manager, the two kube-schedulers, kwok
(``/healthz`` each). Every port is a free port of 127.0.0.1; nothing listens elsewhere. etcd keeps its data
on ``/dev/shm`` when it exists, with ``--unsafe-no-fsync``.

From Python (tests/integration/conftest.py, hack/bench-scheduler.py)::

    cp = ControlPlane(workdir)            # bin_dir=None: hack/build-controlplane.sh --print (built if missing)
    cp.up()                               # or cp.up(extender_url="http://127.0.0.1:PORT/scheduler")
    cp.kubectl("get", "nodes")            # CompletedProcess; raises ControlPlaneError when check=True fails
    cp.api()                              # kubernetes.client.ApiClient (admin)
    cp.down()

Recipe, flags and what had to change from it: docs/control-plane.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = ROOT / "hack" / "build-controlplane.sh"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok")
PLUGIN_BUILD_SCRIPT = ROOT / "hack" / "build-scheduler-plugin.sh"
PLUGIN_BINARIES = ("kube-scheduler", "hrl-score-check")
STAGES = (
    "node-initialize.yaml",
    "node-heartbeat-with-lease.yaml",
    "pod-ready.yaml",
    "pod-complete.yaml",
    "pod-delete.yaml",
)
#: Our own kwok configuration, committed (not part of kwok's module), passed with ``--config`` after :data:`STAGES`:
#: ``pod-resize.yaml`` reports running containers' resources and completes in-place resizes (``pods/resize``);
#: ``metrics-resource.yaml`` serves each fake node's kubelet resource metrics
#: (``/metrics/nodes/<node>/metrics/resource`` on kwok's server address: :meth:`ControlPlane.kwok_metrics_path`)
#: from the use ``usage-from-annotation.yaml`` emulates (per container, from the pod's
#: ``usage.hrl-scheduler.io/cpu-<container>`` annotations).
OWN_STAGES = tuple(
    ROOT / "hack" / "controlplane" / "stages" / f
    for f in ("pod-resize.yaml", "metrics-resource.yaml", "usage-from-annotation.yaml")
)
#: The pod annotation prefixes kwok's emulated use reads (usage-from-annotation.yaml), per container.
USAGE_CPU_ANNOTATION = "usage.hrl-scheduler.io/cpu-"
USAGE_MEMORY_ANNOTATION = "usage.hrl-scheduler.io/memory-"

#: kwok manages only the nodes carrying this annotation (``--manage-nodes-with-annotation-selector``).
KWOK_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
#: The scheduler name of the profile that uses our extender; pods opt in with ``spec.schedulerName``.
HRL_SCHEDULER = "hrl-scheduler"
DEFAULT_SCHEDULER = "default-scheduler"

#: The extender registration (KubeSchedulerConfiguration v1 ``extenders[]``) minus ``urlPrefix``: the values
#: the shipped manifests use (DESIGN.md section 5): prioritize only (no hard constraint of ours needs filter;
#: measured in BENCHMARKS.md, section scheduler). ``extender_registration(url, filterVerb="filter")`` adds it.
SHIPPED_EXTENDER: dict[str, Any] = {
    "prioritizeVerb": "prioritize",
    "weight": 2,
    "nodeCacheCapable": True,
    "enableHTTPS": False,
    "httpTimeout": "300ms",
    "ignorable": True,
}

#: Identities besides the admin (static tokens; RBAC created by :meth:`ControlPlane.up`), least privilege.
IDENTITIES: dict[str, list[dict[str, Any]]] = {
    "hrl-extender": [
        {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get", "list", "watch"]},
    ],
    "hrl-descheduler": [
        {
            "apiGroups": [""],
            "resources": ["nodes", "pods", "persistentvolumes", "persistentvolumeclaims"],
            "verbs": ["get", "list", "watch"],
        },
        {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["apps"], "resources": ["deployments", "statefulsets"], "verbs": ["get", "list", "watch"]},
        # the owner re-read before an eviction (descheduler/reread.py)
        {"apiGroups": ["apps"], "resources": ["replicasets"], "verbs": ["get"]},
        {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"], "verbs": ["list", "watch"]},
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
        {"apiGroups": ["apps"], "resources": ["deployments/scale"], "verbs": ["get", "update", "patch"]},
        # in-place resizes (descheduler/resize.py): the resize subresource, and VPAs to leave their pods alone
        {"apiGroups": [""], "resources": ["pods/resize"], "verbs": ["patch"]},
        # make-before-break moves (descheduler/surge.py): the pod-deletion-cost annotation, the namespace's quotas
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]},
        {"apiGroups": [""], "resources": ["resourcequotas"], "verbs": ["list"]},
        {"apiGroups": ["autoscaling.k8s.io"], "resources": ["verticalpodautoscalers"], "verbs": ["get", "list"]},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
    ],
    # an extender whose decision record posts Events on pods (decisions.events, docs/shadow-mode.md)
    "hrl-extender-events": [
        {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
    ],
    # hrl-policy record (policy/recording/kube.py): list, nothing else, never Secrets or ConfigMaps
    "hrl-recorder": [
        {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["list"]},
        {
            "apiGroups": ["apps"],
            "resources": ["deployments", "statefulsets", "daemonsets", "replicasets"],
            "verbs": ["list"],
        },
        {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"], "verbs": ["list"]},
        {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["list"]},
    ],
}


class ControlPlaneError(RuntimeError):
    """A component did not start, a binary is missing, or a command failed; the message says which, and
    where its log is."""


# ---- small helpers ----------------------------------------------------------------------------------


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct free TCP ports of ``host`` (bound together, then released)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def wait_for(
    predicate: Callable[[], Any],
    timeout_s: float,
    what: str,
    interval_s: float = 0.2,
    on_timeout: Callable[[], str] | None = None,
) -> Any:
    """Call ``predicate`` until it returns something truthy (returned) or ``timeout_s`` passes
    (:class:`ControlPlaneError` naming ``what``, plus ``on_timeout()``'s text). Exceptions count as falsy."""
    deadline = time.monotonic() + timeout_s
    last_exc: BaseException | None = None
    while True:
        try:
            v = predicate()
            if v:
                return v
        except Exception as exc:  # noqa: BLE001 - keep polling; report the last one
            last_exc = exc
        if time.monotonic() > deadline:
            extra = f" (last error: {type(last_exc).__name__}: {last_exc})" if last_exc else ""
            more = f"\n{on_timeout()}" if on_timeout else ""
            raise ControlPlaneError(f"timed out after {timeout_s:g} s waiting for {what}{extra}{more}")
        time.sleep(interval_s)


def tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a text file ('' when it does not exist)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


def kube_minors() -> list[str]:
    """The Kubernetes minors the build script supports, newest first (``hack/build-controlplane.sh --minors``)."""
    out = subprocess.run([str(BUILD_SCRIPT), "--minors"], capture_output=True, text=True, check=True)
    return out.stdout.split()


def resolve_bin_dir(
    build: bool = True, log: Callable[[str], None] | None = None, kube_minor: str | None = None
) -> Path:
    """The cached binary directory (``hack/build-controlplane.sh --print``) of Kubernetes ``kube_minor``
    (``None``: the newest, e.g. ``"1.35"`` for the version-skew tests). With ``build``, runs the build script
    when a binary or a kwok stage is missing (a no-op when cached; ~5 min cold on 2 cores per minor).
    Raises :class:`ControlPlaneError` when Go is not installed or the build fails."""
    minor_args = ["--kube", kube_minor] if kube_minor else []
    return _cached_build(
        BUILD_SCRIPT,
        minor_args,
        [*BINARIES, *(f"stages/{s}" for s in STAGES)],
        build,
        log,
        "the control-plane binaries",
    )


def plugin_bin_dir(build: bool = True, log: Callable[[str], None] | None = None) -> Path:
    """The cached binary directory of kube-scheduler with the HRLScore plugin and ``hrl-score-check``
    (``hack/build-scheduler-plugin.sh --print``, keyed by the Kubernetes version and the plugin's source). With
    ``build``, runs the build script when a binary is missing (a no-op when cached; about 20 s after the control
    plane's build on 2 cores, the Kubernetes packages coming from the Go build cache). Raises
    :class:`ControlPlaneError` when Go is not installed or the build fails."""
    return _cached_build(PLUGIN_BUILD_SCRIPT, [], list(PLUGIN_BINARIES), build, log, "the plugin's binaries")


def _cached_build(
    script: Path, args: list[str], files: list[str], build: bool, log: Callable[[str], None] | None, what: str
) -> Path:
    """``script --print ARGS``'s directory once it holds ``files`` (executables; ``stages/...``: plain files),
    running ``script ARGS`` first when one is missing and ``build`` is set."""
    out = subprocess.run([str(script), "--print", *args], capture_output=True, text=True, check=True)
    bin_dir = Path(out.stdout.strip().splitlines()[-1])

    def missing() -> list[str]:
        return [
            f
            for f in files
            if not ((bin_dir / f).is_file() if f.startswith("stages/") else os.access(bin_dir / f, os.X_OK))
        ]

    absent = missing()
    if absent and build:
        if shutil.which("go") is None:
            raise ControlPlaneError(
                f"{what} are missing ({', '.join(absent)} in {bin_dir}) and Go is not installed: install Go >= 1.26 "
                f"(https://go.dev/dl/) and run {script.relative_to(ROOT)}"
            )
        if log:
            log(f"building {what} ({', '.join(absent)} missing): {script}")
        res = subprocess.run([str(script), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if res.returncode != 0:
            raise ControlPlaneError(f"{script} failed (exit {res.returncode}):\n{res.stdout[-4000:]}")
        absent = missing()
    if absent:
        raise ControlPlaneError(f"{what} missing in {bin_dir}: {', '.join(absent)} (run {script.relative_to(ROOT)})")
    return bin_dir


def hrl_score_profile(cache_address: str, weight: int = 2, max_table_age_s: float = 30.0) -> dict[str, Any]:
    """The profile fields that score with the HRLScore plugin instead of the extender (the chart's plugin mode):
    the plugin at ``weight`` (the extender's weight as shipped: equal totals) reading ``cache_address``."""
    return {
        "plugins": {"multiPoint": {"enabled": [{"name": "HRLScore", "weight": weight}]}},
        "pluginConfig": [
            {"name": "HRLScore", "args": {"cacheAddress": cache_address, "maxTableAgeSeconds": max_table_age_s}}
        ],
    }


def _openssl(*args: str) -> None:
    res = subprocess.run(["openssl", *args], capture_output=True, text=True)
    if res.returncode != 0:
        raise ControlPlaneError(f"openssl {' '.join(args[:2])} failed: {res.stderr.strip()[-800:]}")


def make_pki(pki: Path) -> None:
    """A tiny CA and one serving certificate for 127.0.0.1 / localhost (used by kube-apiserver,
    kube-controller-manager and the schedulers), and the service-account key pair; ECDSA P-256 keys
    throughout (RSA key generation alone took about a second on the 2-core machine). Needs ``openssl``."""
    pki.mkdir(parents=True, exist_ok=True)
    if shutil.which("openssl") is None:
        raise ControlPlaneError("openssl is not installed (Debian package openssl); it makes the test PKI")
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1")  # P-256: fast to generate
    _openssl(
        "req",
        "-x509",
        *ec,
        "-nodes",
        "-days",
        "3650",
        "-subj",
        "/CN=hrl-test-ca",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
        "-keyout",
        str(pki / "ca.key"),
        "-out",
        str(pki / "ca.crt"),
    )
    _openssl(
        "req",
        *ec,
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        str(pki / "serving.key"),
        "-out",
        str(pki / "serving.csr"),
    )
    ext = pki / "serving.ext"
    ext.write_text(
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n"
    )
    _openssl(
        "x509",
        "-req",
        "-in",
        str(pki / "serving.csr"),
        "-CA",
        str(pki / "ca.crt"),
        "-CAkey",
        str(pki / "ca.key"),
        "-CAcreateserial",
        "-days",
        "3650",
        "-extfile",
        str(ext),
        "-out",
        str(pki / "serving.crt"),
    )
    _openssl(
        "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-out", str(pki / "sa.key")
    )  # service-account tokens are signed ES256
    _openssl("pkey", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))


def kubeconfig_doc(server: str, ca_file: Path, user: str, token: str) -> dict[str, Any]:
    """A kubeconfig (one cluster, one user with a bearer token, TLS verified against ``ca_file``)."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "hrl-test", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": "hrl-test", "user": user}}],
        "current-context": user,
    }


def scheduler_config(
    kubeconfig: Path,
    scheduler_name: str,
    extenders: Sequence[Mapping[str, Any]] = (),
    qps: float = 500.0,
    burst: int = 1000,
    profile: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A KubeSchedulerConfiguration v1 with one profile ``scheduler_name`` (``profile``: more fields of it, e.g.
    ``plugins`` and ``pluginConfig``), leader election off, the kubeconfig in ``clientConnection`` (``--kubeconfig``
    is ignored when ``--config`` is given) and the given ``extenders`` (global to the configuration, not per
    profile)."""
    doc: dict[str, Any] = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig), "qps": qps, "burst": burst},
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": scheduler_name, **(profile or {})}],
    }
    if extenders:
        doc["extenders"] = [dict(e) for e in extenders]
    return doc


def extender_registration(url_prefix: str, **overrides: Any) -> dict[str, Any]:
    """:data:`SHIPPED_EXTENDER` with ``urlPrefix`` and any field overridden (``None`` removes a field)."""
    reg = {"urlPrefix": url_prefix, **SHIPPED_EXTENDER, **overrides}
    return {k: v for k, v in reg.items() if v is not None}


def fake_node(
    name: str, cpu: str = "4", memory: str = "16Gi", pods: int = 110, labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A Node object kwok manages (annotation :data:`KWOK_ANNOTATION`), with the given capacity; no taint
    (the kwok docs' example taints it; there are no real nodes here to protect)."""
    alloc = {"cpu": cpu, "memory": memory, "pods": str(pods)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", KWOK_ANNOTATION[0]: KWOK_ANNOTATION[1]},
            "labels": {
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux",
                "kubernetes.io/hostname": name,
                "type": "kwok",
                **(labels or {}),
            },
        },
        "spec": {},
        "status": {
            "allocatable": alloc,
            "capacity": alloc,
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": "fake",
                "kubeProxyVersion": "fake",
                "bootID": "",
                "containerRuntimeVersion": "",
                "kernelVersion": "",
                "machineID": "",
                "osImage": "",
                "systemUUID": "",
            },
            "phase": "Running",
        },
    }


def _pid_cmd(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]


def _pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"  # a zombie has exited


# ---- components -------------------------------------------------------------------------------------


@dataclass
class Component:
    """One process of the control plane: ``argv``, its log file, its PID once started, and the URL that
    says it is ready (``None``: running is enough)."""

    name: str
    argv: list[str]
    log_path: Path
    ready_url: str | None = None
    ready_body: str | None = None
    env: dict[str, str] | None = None
    pid: int = 0
    proc: subprocess.Popen | None = field(default=None, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "pid": self.pid,
            "argv": self.argv,
            "log": str(self.log_path),
            "ready_url": self.ready_url,
        }

    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        return self.pid > 0 and _pid_alive(self.pid) and self._is_ours()

    def _is_ours(self) -> bool:
        cmd = _pid_cmd(self.pid)
        return bool(cmd) and cmd[0] == self.argv[0]


class ControlPlane:
    """The control plane of one test session (or one ``hack/controlplane.py up``).

    ``workdir``: where configs, kubeconfigs, PKI, ``state.json`` and ``logs/`` go (created);
    ``bin_dir``: the binaries (default: :func:`resolve_bin_dir`, which builds them when missing);
    ``detach``: the processes outlive this Python process (CLI ``up``); otherwise they get SIGKILL when it
    dies (Linux ``PR_SET_PDEATHSIG``), so a crashed test session leaves no process behind (and the next
    :meth:`up` removes the etcd data directories of dead sessions from ``/dev/shm``);
    ``log``: progress messages (default: stderr).

    Attributes once :meth:`up` ran: ``server`` (``https://127.0.0.1:PORT``), ``kubeconfig`` (admin),
    ``kubeconfigs`` (identity → path, see :data:`IDENTITIES`), ``ca_file``, ``ports``, ``extender_url``
    (the hrl-scheduler's ``urlPrefix``), ``components`` (start order), ``startup_s`` (per phase, seconds).
    """

    def __init__(
        self,
        workdir: str | Path,
        bin_dir: str | Path | None = None,
        *,
        detach: bool = False,
        log: Callable[[str], None] | None = None,
        verbosity: int = 1,
    ):
        self.workdir = Path(workdir).resolve()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.logs_dir = self.workdir / "logs"
        self.logs_dir.mkdir(exist_ok=True)
        self.pki = self.workdir / "pki"
        self.ca_file = self.pki / "ca.crt"
        self.kubeconfig = self.workdir / "admin.kubeconfig"
        self.kubeconfigs: dict[str, Path] = {}
        self.bin_dir = Path(bin_dir) if bin_dir is not None else None
        self.detach = detach
        self.verbosity = verbosity
        self._log = log or (lambda m: print(f"[controlplane] {m}", file=sys.stderr, flush=True))
        self.components: list[Component] = []
        self.ports: dict[str, int] = {}
        self.server = ""
        self.token = ""
        self.extender_url: str | None = None
        self.extender_base_url: str | None = None
        self.data_dir: Path | None = None
        self.startup_s: dict[str, float] = {}
        self._api_client = None
        self._identity_clients: list = []

    # ---- state -------------------------------------------------------------------------------------
    @property
    def state_file(self) -> Path:
        return self.workdir / "state.json"

    def _save_state(self) -> None:
        state = {
            "server": self.server,
            "kubeconfig": str(self.kubeconfig),
            "ca_file": str(self.ca_file),
            "kubeconfigs": {k: str(v) for k, v in self.kubeconfigs.items()},
            "bin_dir": str(self.bin_dir),
            "ports": self.ports,
            "extender_url": self.extender_url,
            "extender_base_url": self.extender_base_url,
            "data_dir": str(self.data_dir) if self.data_dir else None,
            "logs_dir": str(self.logs_dir),
            "startup_s": self.startup_s,
            "components": [c.to_json() for c in self.components],
        }
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1))
        os.replace(tmp, self.state_file)

    @classmethod
    def attach(cls, workdir: str | Path, log: Callable[[str], None] | None = None) -> ControlPlane:
        """A :class:`ControlPlane` for the processes recorded in ``workdir/state.json`` (``down``/``status``
        from another process). Raises :class:`ControlPlaneError` when there is no state file."""
        cp = cls(workdir, detach=True, log=log)
        try:
            st = json.loads(cp.state_file.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ControlPlaneError(f"{cp.state_file}: no control plane recorded here ({exc})") from exc
        cp.server = st["server"]
        cp.bin_dir = Path(st["bin_dir"])
        cp.ports = dict(st["ports"])
        cp.kubeconfigs = {k: Path(v) for k, v in st.get("kubeconfigs", {}).items()}
        cp.extender_url = st.get("extender_url")
        cp.extender_base_url = st.get("extender_base_url")
        cp.data_dir = Path(st["data_dir"]) if st.get("data_dir") else None
        cp.startup_s = st.get("startup_s", {})
        cp.components = [
            Component(c["name"], c["argv"], Path(c["log"]), c.get("ready_url"), pid=c["pid"]) for c in st["components"]
        ]
        return cp

    # ---- processes ---------------------------------------------------------------------------------
    def _ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def fetch(self, url: str, timeout_s: float = 10.0) -> str:
        """GET ``url`` (a component's endpoint: ``https`` verified against the test CA) and return the body.
        Raises ``urllib.error.URLError`` / ``HTTPError``."""
        ctx = self._ssl_context() if url.startswith("https:") else None
        try:
            with urllib.request.urlopen(url, timeout=timeout_s, context=ctx) as r:
                return r.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            exc.close()  # an HTTPError holds the open response (and its socket) until closed
            raise

    def _probe(self, url: str, body: str | None = None) -> bool:
        ctx = self._ssl_context() if url.startswith("https:") else None
        try:
            with urllib.request.urlopen(url, timeout=2, context=ctx) as r:
                text = r.read().decode("utf-8", "replace")
                return r.status == 200 and (body is None or body in text)
        except urllib.error.HTTPError as exc:
            exc.close()  # not ready yet (e.g. 503): close the response it holds, or its socket leaks
            raise

    def start(self, comp: Component, timeout_s: float = 60.0) -> Component:
        """Start ``comp`` (stdout+stderr to its log), record its PID, wait until its ``ready_url`` answers 200
        (or, without one, that it is still running). Raises :class:`ControlPlaneError` with the tail of its
        log when it exits or does not get ready in ``timeout_s``."""
        self.spawn(comp)
        return self.wait_ready(comp, timeout_s)

    def spawn(self, comp: Component) -> Component:
        """Start ``comp``'s process and record its PID (in ``state.json`` too); does not wait."""
        comp.log_path.parent.mkdir(parents=True, exist_ok=True)
        preexec = None if self.detach else _die_with_parent
        env = {**os.environ, **(comp.env or {})}
        with open(comp.log_path, "ab") as logf:
            try:
                comp.proc = subprocess.Popen(
                    comp.argv,
                    stdout=logf,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    cwd=self.workdir,
                    env=env,
                    start_new_session=self.detach,
                    preexec_fn=preexec,
                )
            except OSError as exc:
                raise ControlPlaneError(f"{comp.name}: cannot start {comp.argv[0]}: {exc}") from exc
        comp.pid = comp.proc.pid
        self.components.append(comp)
        self._save_state()
        return comp

    def wait_ready(self, comp: Component, timeout_s: float = 60.0) -> Component:
        """Wait until ``comp``'s ``ready_url`` answers 200 (see :meth:`start`)."""

        def ready() -> bool:
            if comp.proc is not None and comp.proc.poll() is not None:
                raise _Exited(comp.proc.returncode)
            if comp.ready_url is None:
                return True
            return self._probe(comp.ready_url, comp.ready_body)

        def exited() -> ControlPlaneError:
            code = comp.proc.returncode if comp.proc is not None else "?"
            return ControlPlaneError(
                f"{comp.name} exited with status {code} at start; log {comp.log_path}:\n{tail(comp.log_path)}"
            )

        try:
            wait_for(ready, timeout_s, f"{comp.name} to get ready ({comp.ready_url or 'running'})", 0.2)
        except _Exited:
            raise exited() from None
        except ControlPlaneError as exc:
            if comp.proc is not None and comp.proc.poll() is not None:
                raise exited() from None
            raise ControlPlaneError(f"{exc}; log {comp.log_path}:\n{tail(comp.log_path)}") from None
        return comp

    def stop_component(self, comp: Component, grace_s: float = 10.0) -> None:
        """SIGTERM ``comp``'s PID (only if it is still the recorded binary), wait up to ``grace_s``, then
        SIGKILL; forget it."""
        if comp.pid > 0 and comp.alive():
            try:
                os.kill(comp.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + grace_s
            while comp.alive() and time.monotonic() < deadline:
                time.sleep(0.05)
            if comp.alive():
                self._log(f"{comp.name} (pid {comp.pid}) ignored SIGTERM for {grace_s:g} s: SIGKILL")
                try:
                    os.kill(comp.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if comp.proc is not None:
            try:
                comp.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if comp in self.components:
            self.components.remove(comp)
        self._save_state()

    def component(self, name: str) -> Component:
        for c in self.components:
            if c.name == name:
                return c
        raise KeyError(name)

    # ---- bring-up ----------------------------------------------------------------------------------
    def up(
        self,
        extender_url: str | None = None,
        *,
        extender: bool = True,
        extender_config: Mapping[str, Any] | None = None,
        timeout_s: float = 120.0,
    ) -> ControlPlane:
        """Start everything (see the module docstring). ``extender_url``: the ``urlPrefix`` the
        hrl-scheduler calls (an extender you run yourself); ``None`` with ``extender=True``: start
        ``hrl-extender`` here with ``extender_config`` merged into its generated configuration (a watch on
        this API server as the ``hrl-extender`` identity); ``extender=False`` and no URL: the hrl-scheduler
        points at a closed port (fail-open tests). On any failure everything started is stopped again."""
        t0 = time.monotonic()
        try:
            self._up(extender_url, extender, extender_config, timeout_s)
        except BaseException:
            self.down()
            raise
        self.startup_s["total"] = round(time.monotonic() - t0, 2)
        self._save_state()
        return self

    def _phase(self, name: str, t0: float) -> None:
        self.startup_s[name] = round(time.monotonic() - t0, 2)

    def _up(
        self, extender_url: str | None, extender: bool, extender_config: Mapping[str, Any] | None, timeout_s: float
    ) -> None:
        if self.bin_dir is None:
            self.bin_dir = resolve_bin_dir(build=True, log=self._log)
        b = self.bin_dir
        names = ["etcd", "etcd_peer", "apiserver", "kcm", "sched_default", "sched_hrl", "kwok", "extender"]
        self.ports = dict(zip(names, free_ports(len(names))))
        p = self.ports
        t = time.monotonic()
        make_pki(self.pki)
        self.token = os.urandom(24).hex()
        tokens = [f'{self.token},admin,admin-uid,"system:masters"']
        ident_tokens = {}
        for ident in IDENTITIES:
            ident_tokens[ident] = os.urandom(24).hex()
            tokens.append(f"{ident_tokens[ident]},{ident},{ident}-uid")
        (self.pki / "tokens.csv").write_text("\n".join(tokens) + "\n")
        self.server = f"https://127.0.0.1:{p['apiserver']}"
        self._write_yaml(self.kubeconfig, kubeconfig_doc(self.server, self.ca_file, "admin", self.token))
        for ident, tok in ident_tokens.items():
            path = self.workdir / f"{ident}.kubeconfig"
            self._write_yaml(path, kubeconfig_doc(self.server, self.ca_file, ident, tok))
            self.kubeconfigs[ident] = path
        self._write_yaml(self.workdir / "audit-policy.yaml", _audit_policy(IDENTITIES))
        self._phase("pki", t)

        # etcd: data on tmpfs when there is one.
        shm = Path("/dev/shm")
        base = shm if shm.is_dir() and os.access(shm, os.W_OK) else self.workdir
        _remove_orphaned_data_dirs(base)
        self.data_dir = Path(tempfile.mkdtemp(prefix="hrl-etcd-", dir=base))
        (self.data_dir / "owner.pid").write_text(str(os.getpid()))
        t = time.monotonic()
        etcd_url = f"http://127.0.0.1:{p['etcd']}"
        peer_url = f"http://127.0.0.1:{p['etcd_peer']}"
        self.start(
            Component(
                "etcd",
                [
                    str(b / "etcd"),
                    "--name=node0",
                    f"--data-dir={self.data_dir / 'etcd'}",
                    f"--listen-client-urls={etcd_url}",
                    f"--advertise-client-urls={etcd_url}",
                    f"--listen-peer-urls={peer_url}",
                    f"--initial-advertise-peer-urls={peer_url}",
                    f"--initial-cluster=node0={peer_url}",
                    "--unsafe-no-fsync=true",
                    "--auto-compaction-mode=periodic",
                    "--auto-compaction-retention=5m",
                    "--log-level=warn",
                ],
                self.logs_dir / "etcd.log",
                f"{etcd_url}/health",
                '"health":"true"',
            ),
            timeout_s,
        )
        self._phase("etcd", t)

        t = time.monotonic()
        pki = self.pki
        self.start(
            Component(
                "kube-apiserver",
                [
                    str(b / "kube-apiserver"),
                    f"--etcd-servers={etcd_url}",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={p['apiserver']}",
                    "--advertise-address=127.0.0.1",
                    "--endpoint-reconciler-type=none",
                    f"--cert-dir={pki}",
                    f"--tls-cert-file={pki / 'serving.crt'}",
                    f"--tls-private-key-file={pki / 'serving.key'}",
                    "--service-cluster-ip-range=10.96.0.0/16",
                    "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                    f"--service-account-key-file={pki / 'sa.pub'}",
                    f"--service-account-signing-key-file={pki / 'sa.key'}",
                    f"--token-auth-file={pki / 'tokens.csv'}",
                    "--authorization-mode=RBAC",
                    "--allow-privileged=true",
                    "--disable-admission-plugins=ServiceAccount",
                    f"--audit-policy-file={self.workdir / 'audit-policy.yaml'}",
                    f"--audit-log-path={self.logs_dir / 'audit.log'}",
                    "--audit-log-format=json",
                    "--audit-log-mode=blocking",
                    f"--v={self.verbosity}",
                ],
                self.logs_dir / "kube-apiserver.log",
                f"{self.server}/readyz",
            ),
            timeout_s,
        )
        self._phase("kube-apiserver", t)

        t = time.monotonic()
        self.kubectl("apply", "-f", "-", input=_rbac_yaml(IDENTITIES))
        self._phase("rbac", t)

        t = time.monotonic()
        if extender_url is None and extender:
            self.start_extender(extender_config or {}, timeout_s)
        elif extender_url is None:
            extender_url = f"http://127.0.0.1:{free_ports(1)[0]}/scheduler"  # nobody listens: fail open
        if extender_url is not None:
            self.extender_url = extender_url
        self._phase("extender", t)

        t = time.monotonic()
        assert self.extender_url is not None
        kcm = Component(
            "kube-controller-manager",
            [
                str(b / "kube-controller-manager"),
                f"--kubeconfig={self.kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={p['kcm']}",
                "--leader-elect=false",
                f"--tls-cert-file={pki / 'serving.crt'}",
                f"--tls-private-key-file={pki / 'serving.key'}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={self.ca_file}",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--kube-api-qps=500",
                "--kube-api-burst=1000",
                "--concurrent-deployment-syncs=10",
                "--concurrent-replicaset-syncs=10",
                f"--v={self.verbosity}",
            ],
            self.logs_dir / "kube-controller-manager.log",
            f"https://127.0.0.1:{p['kcm']}/healthz",
        )
        scheds = [
            self._scheduler_component(DEFAULT_SCHEDULER, p["sched_default"], ()),
            self._scheduler_component(HRL_SCHEDULER, p["sched_hrl"], [extender_registration(self.extender_url)]),
        ]
        kwok = Component(
            "kwok",
            [
                str(b / "kwok"),
                f"--kubeconfig={self.kubeconfig}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION[0]}={KWOK_ANNOTATION[1]}",
                "--node-ip=127.0.0.1",
                "--node-name=localhost",
                f"--node-port={p['kwok']}",
                f"--server-address=127.0.0.1:{p['kwok']}",
                "--cidr=10.244.0.0/16",
                "--node-lease-duration-seconds=40",
                *[f"--config={b / 'stages' / s}" for s in STAGES],
                *[f"--config={s}" for s in OWN_STAGES],
            ],
            self.logs_dir / "kwok.log",
            f"http://127.0.0.1:{p['kwok']}/healthz",
        )
        # Start the four together, then wait for each: they do not depend on one another.
        for comp in (kcm, *scheds, kwok):
            self.spawn(comp)
        for comp in (kcm, *scheds, kwok):
            self.wait_ready(comp, timeout_s)
        self._phase("kcm+schedulers+kwok", t)

    def _scheduler_component(
        self,
        name: str,
        port: int,
        extenders: Sequence[Mapping[str, Any]],
        qps: float = 500.0,
        burst: int = 1000,
        binary: str | Path | None = None,
        profile: Mapping[str, Any] | None = None,
    ) -> Component:
        cfg = self.workdir / f"scheduler-{name}.yaml"
        self._write_yaml(cfg, scheduler_config(self.kubeconfig, name, extenders, qps, burst, profile))
        assert self.bin_dir is not None
        pki = self.pki
        return Component(
            f"kube-scheduler-{name}",
            [
                str(binary or self.bin_dir / "kube-scheduler"),
                f"--config={cfg}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--tls-cert-file={pki / 'serving.crt'}",
                f"--tls-private-key-file={pki / 'serving.key'}",
                "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics,/debug/pprof/*",  # loopback only
                f"--v={max(self.verbosity, 2)}",
            ],
            self.logs_dir / f"kube-scheduler-{name}.log",
            f"https://127.0.0.1:{port}/healthz",
        )

    @property
    def kwok_address(self) -> str:
        """``127.0.0.1:PORT`` of kwok's server, which serves the fake nodes' metrics endpoints."""
        return f"127.0.0.1:{self.ports['kwok']}"

    @staticmethod
    def kwok_metrics_path(node: str) -> str:
        """The path of ``node``'s kubelet resource metrics on kwok's server (stages/metrics-resource.yaml)."""
        return f"/metrics/nodes/{node}/metrics/resource"

    def start_scheduler(
        self,
        name: str,
        extenders: Sequence[Mapping[str, Any]] = (),
        timeout_s: float = 60.0,
        *,
        binary: str | Path | None = None,
        profile: Mapping[str, Any] | None = None,
    ) -> Component:
        """Start one more kube-scheduler whose only profile is ``name`` (pods opt in with
        ``spec.schedulerName: name``) with the given ``extenders`` registrations (see
        :func:`extender_registration`). ``binary``: another kube-scheduler build (e.g. the one with the HRLScore
        plugin, hack/build-scheduler-plugin.sh); ``profile``: more fields of the profile (``plugins``,
        ``pluginConfig``). Stop it with :meth:`stop_component` or use :meth:`scheduler`."""
        comp = self._scheduler_component(name, free_ports(1)[0], extenders, binary=binary, profile=profile)
        return self.start(comp, timeout_s)

    @contextmanager
    def scheduler(
        self,
        name: str,
        extenders: Sequence[Mapping[str, Any]] = (),
        *,
        binary: str | Path | None = None,
        profile: Mapping[str, Any] | None = None,
    ):
        """:meth:`start_scheduler` as a context manager (stopped on exit)."""
        comp = self.start_scheduler(name, extenders, binary=binary, profile=profile)
        try:
            yield comp
        finally:
            self.stop_component(comp)

    def start_extender(self, overrides: Mapping[str, Any], timeout_s: float = 60.0) -> Component:
        """Start ``hrl-extender`` (this repository's, from the running Python) on a free port with a watch
        on this API server as the ``hrl-extender`` identity; ``overrides`` are merged into its
        ExtenderConfiguration (e.g. ``{"topology": {"sources": [...]}}``)."""
        port = self.ports.get("extender") or free_ports(1)[0]
        cfg: dict[str, Any] = {
            "apiVersion": "hrl-scheduler.io/v1alpha1",
            "kind": "ExtenderConfiguration",
            "listen": {"host": "127.0.0.1", "port": port},
            "kubernetes": {"enabled": True, "kubeconfig": str(self.kubeconfigs["hrl-extender"])},
            "maxSnapshotAgeSeconds": 120,
        }
        for k, v in overrides.items():
            if isinstance(v, Mapping) and isinstance(cfg.get(k), Mapping):
                cfg[k] = {**cfg[k], **v}
            else:
                cfg[k] = v
        path = self.workdir / "extender.yaml"
        self._write_yaml(path, cfg)
        self.extender_base_url = f"http://127.0.0.1:{port}"
        self.extender_url = f"{self.extender_base_url}{cfg.get('urlPrefix', '/scheduler')}"
        return self.start(
            Component(
                "hrl-extender",
                [sys.executable, "-m", "extender", "--config", str(path)],
                self.logs_dir / "hrl-extender.log",
                f"{self.extender_base_url}/readyz",
                env={"PYTHONUNBUFFERED": "1"},
            ),
            timeout_s,
        )

    # ---- teardown ----------------------------------------------------------------------------------
    def down(self, grace_s: float = 10.0) -> None:
        """Stop every recorded component one by one, in reverse start order; remove etcd's data directory
        (the logs and configurations stay in ``workdir``). Idempotent."""
        for client in [self._api_client, *self._identity_clients]:
            if client is not None:
                try:
                    client.close()
                except Exception:  # noqa: BLE001 - best effort
                    pass
        self._api_client, self._identity_clients = None, []
        for comp in list(reversed(self.components)):
            self.stop_component(comp, grace_s)
        if self.data_dir is not None and self.data_dir.exists():
            shutil.rmtree(self.data_dir, ignore_errors=True)
        self._save_state()

    def status(self) -> list[tuple[str, int, bool]]:
        """``(component, pid, alive)`` per recorded component, in start order."""
        return [(c.name, c.pid, c.alive()) for c in self.components]

    # ---- clients -----------------------------------------------------------------------------------
    def kubectl(
        self,
        *args: str,
        input: str | bytes | None = None,
        check: bool = True,
        timeout_s: float = 120.0,
        kubeconfig: Path | None = None,
    ) -> subprocess.CompletedProcess:
        """Run the cached kubectl with the admin kubeconfig (or ``kubeconfig``); text in/out. With
        ``check``, a non-zero exit raises :class:`ControlPlaneError` with the command and its stderr."""
        assert self.bin_dir is not None
        cmd = [str(self.bin_dir / "kubectl"), f"--kubeconfig={kubeconfig or self.kubeconfig}", *args]
        data = input.decode() if isinstance(input, bytes) else input
        res = subprocess.run(cmd, input=data, capture_output=True, text=True, timeout=timeout_s)
        if check and res.returncode != 0:
            raise ControlPlaneError(
                f"kubectl {' '.join(args)} failed (exit {res.returncode}): {res.stderr.strip()[-2000:]}"
            )
        return res

    def api(self, identity: str | None = None):
        """A ``kubernetes.client.ApiClient`` for the admin (default, cached) or one of :data:`IDENTITIES` (a new
        one per call). Every client stays referenced until :meth:`down` closes it: one a test drops would
        otherwise be collected with its TLS sockets open, and the ``ResourceWarning`` surfaces in whichever
        test runs the garbage collector."""
        from kubernetes import config as kconfig

        if identity is None:
            if self._api_client is None:
                self._api_client = kconfig.new_client_from_config(config_file=str(self.kubeconfig))
            return self._api_client
        client = kconfig.new_client_from_config(config_file=str(self.kubeconfigs[identity]))
        self._identity_clients.append(client)
        return client

    # ---- nodes ---------------------------------------------------------------------------------------
    def create_nodes(self, nodes: Iterable[Mapping[str, Any]], wait_s: float = 120.0) -> list[str]:
        """Create fake nodes (see :func:`fake_node`) and wait until each is Ready and free of the
        ``node.kubernetes.io/not-ready`` taint. Returns their names."""
        nodes = list(nodes)
        names = [n["metadata"]["name"] for n in nodes]
        doc = {"apiVersion": "v1", "kind": "List", "items": nodes}
        self.kubectl("create", "-f", "-", input=json.dumps(doc), timeout_s=max(120.0, wait_s))
        self.wait_nodes_ready(names, wait_s)
        return names

    def wait_nodes_ready(self, names: Sequence[str], wait_s: float = 120.0) -> None:
        want = set(names)

        def ready() -> bool:
            out = self.kubectl("get", "nodes", "-o", "json").stdout
            ok = set()
            for n in json.loads(out)["items"]:
                conds = {c["type"]: c["status"] for c in n.get("status", {}).get("conditions") or ()}
                taints = n.get("spec", {}).get("taints") or ()
                if conds.get("Ready") == "True" and not taints:
                    ok.add(n["metadata"]["name"])
            return want <= ok

        wait_for(ready, wait_s, f"{len(want)} node(s) Ready and untainted", 0.5)

    def delete_nodes(self, names: Sequence[str]) -> None:
        if names:
            self.kubectl("delete", "node", "--wait=false", "--ignore-not-found", *names)

    # ---- misc ----------------------------------------------------------------------------------------
    def logs(self) -> dict[str, Path]:
        """Component name → log file, for every log in ``logs_dir``."""
        return {p.stem: p for p in sorted(self.logs_dir.glob("*.log"))}

    def audit_events(self, user: str | None = None) -> list[dict[str, Any]]:
        """The API server's audit events (JSON lines of ``logs/audit.log``), optionally of one user only.
        The audit policy records the requests of the identities in :data:`IDENTITIES` at Metadata level."""
        out = []
        path = self.logs_dir / "audit.log"
        if not path.exists():
            return out
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                ev = json.loads(line)
            except json.JSONDecodeError:
                continue
            if user is None or ev.get("user", {}).get("username") == user:
                out.append(ev)
        return out

    @staticmethod
    def _write_yaml(path: Path, doc: Any) -> None:
        path.write_text(yaml.safe_dump(doc, sort_keys=False))

    def __enter__(self) -> ControlPlane:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()


class _Exited(Exception):
    def __init__(self, code: int | None):
        super().__init__(code)
        self.code = code


def _load_prctl():
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux/glibc: no parent-death signal
        return None


_PRCTL = _load_prctl()  # resolved here: the child must not import anything between fork and exec


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask Linux to SIGKILL this child when the parent dies (prctl PR_SET_PDEATHSIG = 1). SIGKILL, not
    SIGTERM: terminated all at once, kube-apiserver's graceful shutdown hangs once etcd is gone."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGKILL)


def _remove_orphaned_data_dirs(base: Path) -> None:
    """Remove ``hrl-etcd-*`` directories under ``base`` whose owner (``owner.pid``, the Python process that
    started that control plane) is gone and whose etcd no longer runs (a crashed session's tmpfs data)."""
    for d in base.glob("hrl-etcd-*"):
        try:
            owner = int((d / "owner.pid").read_text())
        except (OSError, ValueError):
            continue  # not ours to judge
        if _pid_alive(owner):
            continue
        if any(str(d) in " ".join(_pid_cmd(int(p)) or ()) for p in os.listdir("/proc") if p.isdigit()):
            continue  # a detached control plane of a process that has exited: still running
        shutil.rmtree(d, ignore_errors=True)


def _rbac_yaml(identities: Mapping[str, list[dict[str, Any]]]) -> str:
    docs = []
    for ident, rules in identities.items():
        docs.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": f"{ident}-test"},
                "rules": rules,
            }
        )
        docs.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": f"{ident}-test"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"{ident}-test"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": ident}],
            }
        )
    return yaml.safe_dump_all(docs, sort_keys=False)


def _audit_policy(identities: Iterable[str]) -> dict[str, Any]:
    return {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [{"level": "Metadata", "users": sorted(identities)}, {"level": "None"}],
    }


# ---- command line ---------------------------------------------------------------------------------------


def extender_overrides(path: Path) -> dict[str, Any]:
    """The fields of an ExtenderConfiguration file (``--extender-config``) to merge into the started extender's,
    its relative paths (``topology.sources``, ``decisions.log``) made relative to the file, as in the extender's own
    configuration files. Raises ``ValueError`` for a file that is not a mapping."""
    doc = yaml.safe_load(path.read_text()) or {}
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a mapping")
    out = {k: v for k, v in doc.items() if k not in ("apiVersion", "kind")}
    base = path.resolve().parent
    topo = out.get("topology")
    if isinstance(topo, dict) and isinstance(topo.get("sources"), list):
        topo["sources"] = [s if "://" in str(s) else str(base / str(s)) for s in topo["sources"]]
    dec = out.get("decisions")
    if isinstance(dec, dict) and isinstance(dec.get("log"), str):
        dec["log"] = str(base / dec["log"])
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="hack/controlplane.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name, help_ in (("up", "start the control plane"), ("down", "stop it"), ("status", "show it")):
        sp = sub.add_parser(name, help=help_)
        sp.add_argument(
            "--dir", default=str(ROOT / "out" / "controlplane"), help="working directory (default out/controlplane)"
        )
        if name == "up":
            g = sp.add_mutually_exclusive_group()
            g.add_argument("--extender-url", help="urlPrefix of an extender you run yourself")
            g.add_argument(
                "--no-extender",
                action="store_true",
                help="start no extender (the hrl-scheduler then calls a closed port)",
            )
            sp.add_argument(
                "--topology",
                action="append",
                default=[],
                help="call-graph source for the started extender (repeatable)",
            )
            sp.add_argument(
                "--extender-config",
                metavar="FILE",
                help="YAML merged into the started extender's ExtenderConfiguration (e.g. mode: shadow)",
            )
            sp.add_argument("--nodes", type=int, default=0, help="create this many fake nodes (4 CPU, 16Gi)")
    args = ap.parse_args(argv)
    workdir = Path(args.dir)
    if args.cmd == "up":
        if (workdir / "state.json").exists():
            old = ControlPlane.attach(workdir)
            if any(alive for _n, _p, alive in old.status()):
                print(f"a control plane is already running from {workdir}; run 'down' first", file=sys.stderr)
                return 1
        cp = ControlPlane(workdir, detach=True)
        overrides: dict[str, Any] = {}
        if args.extender_config:
            try:
                overrides = extender_overrides(Path(args.extender_config))
            except ValueError as exc:
                print(f"--extender-config: {exc}", file=sys.stderr)
                return 2
        if args.topology:
            overrides["topology"] = {"sources": [str(Path(s).resolve()) for s in args.topology]}
        try:
            cp.up(args.extender_url, extender=not args.no_extender, extender_config=overrides)
            if args.nodes:
                cp.create_nodes(fake_node(f"kwok-node-{i}") for i in range(args.nodes))
        except ControlPlaneError as exc:
            print(f"hack/controlplane.py: {exc}", file=sys.stderr)
            return 1
        print(f"control plane up in {cp.startup_s['total']:.1f} s: {cp.server}")
        print(f"phases (s): {json.dumps(cp.startup_s)}")
        print(f"extender urlPrefix: {cp.extender_url}")
        print(f"logs: {cp.logs_dir}")
        print(f"export KUBECONFIG={cp.kubeconfig}")
        return 0
    try:
        cp = ControlPlane.attach(workdir)
    except ControlPlaneError as exc:
        print(f"hack/controlplane.py: {exc}", file=sys.stderr)
        return 1
    if args.cmd == "status":
        for name, pid, alive in cp.status():
            print(f"{name:32s} pid {pid:<8d} {'running' if alive else 'stopped'}")
        return 0
    cp.down()
    print(f"control plane stopped; logs kept in {cp.logs_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
