"""Small helpers shared by the ``controlplane`` tests: object builders, apply, waits, the extender's metrics."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from scripts import load_script

from policy.state import ANNOTATION_DEPENDS_ON

ROOT = Path(__file__).resolve().parents[2]
BOUTIQUE = ROOT / "policy" / "data" / "apps" / "online-boutique" / "kubernetes-manifests.yaml"
HRL = "hrl-scheduler"
DEFAULT = "default-scheduler"


#: ``hack/controlplane.py``: ControlPlane, fake_node, extender_registration, free_ports, ...
cpmod = load_script("hrl_controlplane", ROOT / "hack" / "controlplane.py")


def spawn(args: list[str], log: Path) -> subprocess.Popen:
    """Start ``args`` in the repository root with stdout and stderr to ``log`` (Python unbuffered)."""
    with log.open("w") as f:  # the child writes to its own copy of the descriptor; ours is closed at once
        return subprocess.Popen(
            args, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM, 15 s to exit, then SIGKILL; a no-op when it has exited."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_for(predicate: Callable[[], Any], timeout_s: float, what: str, interval_s: float = 0.25) -> Any:
    """Poll ``predicate`` until truthy (returned); ``AssertionError`` naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last = None
    while True:
        try:
            v = predicate()
            if v:
                return v
            last = v
        except Exception as exc:  # noqa: BLE001 - keep polling, report the last failure
            last = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what} (last: {last!r})")
        time.sleep(interval_s)


def container(cpu: str = "100m", memory: str = "64Mi") -> dict[str, Any]:
    return {
        "name": "app",
        "image": "registry.invalid/fake:1",
        "resources": {"requests": {"cpu": cpu, "memory": memory}},
    }


def pod_spec(
    scheduler: str = HRL,
    cpu: str = "100m",
    memory: str = "64Mi",
    node_selector: Mapping | None = None,
    volumes: list | None = None,
    **extra: Any,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [container(cpu, memory)],
        "terminationGracePeriodSeconds": 0,
    }
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if volumes:
        spec["volumes"] = volumes
    spec.update(extra)
    return spec


def deployment(
    name: str,
    app: str | None = None,
    replicas: int = 1,
    *,
    scheduler: str = HRL,
    cpu: str = "100m",
    memory: str = "64Mi",
    node_selector: Mapping | None = None,
    depends_on: Iterable[str] = (),
    labels: Mapping | None = None,
    volumes: list | None = None,
    **spec_extra: Any,
) -> dict[str, Any]:
    """An apps/v1 Deployment whose pods belong to service ``app`` (label ``app``; default ``name``), selected by
    ``app`` + ``hrl-test/deployment=name`` (so two Deployments of one service never adopt each other's pods)."""
    app = app or name
    sel = {"app": app, "hrl-test/deployment": name}
    ann = {ANNOTATION_DEPENDS_ON: ",".join(depends_on)} if depends_on else {}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": dict(sel)},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": sel},
            "template": {
                "metadata": {"labels": {**sel, **(labels or {})}, "annotations": ann},
                "spec": pod_spec(scheduler, cpu, memory, node_selector, volumes, **spec_extra),
            },
        },
    }


def pdb(name: str, match_labels: Mapping[str, str], min_available: int) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": dict(match_labels)}},
    }


def apply(cp, ns: str, objs: Iterable[Mapping[str, Any]]) -> None:
    """``kubectl apply`` the objects into namespace ``ns`` (server-side apply is not needed)."""
    doc = {"apiVersion": "v1", "kind": "List", "items": list(objs)}
    cp.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(doc))


def get_json(cp, *args: str) -> dict[str, Any]:
    return json.loads(cp.kubectl("get", *args, "-o", "json").stdout)


def pods(cp, ns: str, selector: str | None = None) -> list[dict[str, Any]]:
    args = ["pods", "-n", ns] + (["-l", selector] if selector else [])
    return get_json(cp, *args)["items"]


def running(pods_: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [
        p
        for p in pods_
        if p.get("status", {}).get("phase") == "Running"
        and p["spec"].get("nodeName")
        and not p["metadata"].get("deletionTimestamp")
    ]


def wait_running(cp, ns: str, count: int, selector: str | None = None, timeout_s: float = 60) -> list[dict]:
    """Wait until exactly ``count`` pods (matching ``selector``) are Running, bound and not terminating, and
    no other pod of the selection exists; returns them."""

    def ok():
        ps = pods(cp, ns, selector)
        r = running(ps)
        return r if len(r) == count and len(ps) == count else None

    return wait_for(ok, timeout_s, f"{count} running pod(s) in {ns} ({selector or 'all'})")


def node_of(p: Mapping[str, Any]) -> str:
    return p["spec"]["nodeName"]


def scheduled_by(cp, ns: str, pod_name: str) -> str | None:
    """The component that reported the pod's ``Scheduled`` event (the scheduler profile's name)."""
    evs = get_json(cp, "events", "-n", ns, "--field-selector", f"involvedObject.name={pod_name},reason=Scheduled")
    for e in evs["items"]:
        return e.get("reportingComponent") or (e.get("source") or {}).get("component")
    return None


def events(cp, ns: str, pod_name: str) -> list[dict[str, Any]]:
    return get_json(cp, "events", "-n", ns, "--field-selector", f"involvedObject.name={pod_name}")["items"]


def metrics(base_url: str) -> dict[tuple[str, tuple], float]:
    """Samples of a Prometheus endpoint: ``(name, sorted label items) -> value``."""
    with urllib.request.urlopen(f"{base_url}/metrics", timeout=5) as r:
        text = r.read().decode()
    out: dict[tuple[str, tuple], float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def metric(samples: Mapping, name: str, **labels: str) -> float:
    """Sum of the samples named ``name`` whose labels include ``labels``."""
    return sum(
        v for (n, ls), v in samples.items() if n == name and all(dict(ls).get(k) == val for k, val in labels.items())
    )


def extender_synced(cp, timeout_s: float = 20) -> None:
    """Wait until the extender's snapshot holds exactly the pods (not Succeeded/Failed) and nodes the API
    server has: the watch caught up."""

    def ok():
        n_pods = len(
            [
                p
                for p in get_json(cp, "pods", "-A")["items"]
                if p.get("status", {}).get("phase") not in ("Succeeded", "Failed")
            ]
        )
        n_nodes = len(get_json(cp, "nodes")["items"])
        m = metrics(cp.extender_base_url)
        return metric(m, "hrl_extender_snapshot_pods") == n_pods and metric(m, "hrl_extender_snapshot_nodes") == n_nodes

    wait_for(ok, timeout_s, "the extender's snapshot to match the API server")
