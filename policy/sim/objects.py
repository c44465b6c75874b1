"""Kubernetes API objects (camelCase JSON, as the API server serves them) for simulated clusters: Nodes
shaped like kwok's fake nodes and Pods created from a Deployment's template the way the ReplicaSet
controller creates them. The simulator keeps these objects, so the extender receives exactly the JSON
kube-scheduler would send, and every consumer parses them with :mod:`policy.observe`.

Sources: k8s.io/api core/v1 Node and Pod; kube-controller-manager's ReplicaSet controller (pod names
``<replicaset>-<5 chars>``, ``pod-template-hash`` label, controller ownerReference); kwok's node example
(site/content/en/docs/user/kwok-manage-nodes-and-pods.md).
"""

from __future__ import annotations

import copy
import datetime as _dt
import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from policy.state import LABEL_HOSTNAME, LABEL_REGION, LABEL_ZONE

__all__ = ["node_object", "template_hash", "pod_from_template", "qos_class", "bind", "record_restart", "rfc3339"]

# The alphabet kube-controller-manager uses for generated name suffixes (k8s.io/apimachinery rand.String).
_ALNUM = "bcdfghjklmnpqrstvwxz2456789"


def node_object(
    name: str,
    cpu_m: int,
    memory_bytes: int,
    pods: int = 110,
    zone: str = "",
    region: str = "",
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A Ready, schedulable Node with ``allocatable == capacity`` (no system reservations)."""
    lab = {LABEL_HOSTNAME: name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "type": "kwok"}
    if zone:
        lab[LABEL_ZONE] = zone
    if region:
        lab[LABEL_REGION] = region
    lab.update(labels or {})
    res = {"cpu": f"{int(cpu_m)}m", "memory": str(int(memory_bytes)), "pods": str(int(pods))}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": lab,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {},
        "status": {
            "allocatable": dict(res),
            "capacity": dict(res),
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux", "kubeletVersion": "fake"},
            "phase": "Running",
        },
    }


def template_hash(template: Mapping[str, Any]) -> str:
    """A stable stand-in for the ``pod-template-hash`` (kube-controller-manager hashes the template with
    FNV; any stable hash serves here), rendered with the safe-encoding alphabet, 10 chars."""
    h = hashlib.sha256(repr(sorted(_flatten(template))).encode()).digest()
    return "".join(_ALNUM[b % len(_ALNUM)] for b in h[:10])


def _flatten(obj: Any, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(obj, Mapping):
        out = []
        for k, v in obj.items():
            out.extend(_flatten(v, f"{prefix}.{k}"))
        return out
    if isinstance(obj, list):
        out = []
        for i, v in enumerate(obj):
            out.extend(_flatten(v, f"{prefix}[{i}]"))
        return out
    return [(prefix, str(obj))]


def pod_from_template(
    deployment: Mapping[str, Any], rng: np.random.Generator, created_s: float = 0.0, scheduler_name: str | None = None
) -> dict[str, Any]:
    """A Pending Pod as the ReplicaSet controller creates it from ``deployment`` (apps/v1 Deployment JSON).

    ``rng`` draws the 5-character name suffix and the uid (deterministic per seed). ``scheduler_name``
    overrides ``spec.schedulerName`` (default: the template's, else ``default-scheduler``).
    """
    meta = deployment.get("metadata") or {}
    dname = meta["name"]
    ns = meta.get("namespace") or "default"
    tmpl = copy.deepcopy((deployment.get("spec") or {}).get("template") or {})
    phash = template_hash(tmpl)
    rs_name = f"{dname}-{phash}"
    suffix = "".join(_ALNUM[int(i)] for i in rng.integers(0, len(_ALNUM), size=5))
    a, b, c, d, e = (int(rng.integers(0, 2**bits)) for bits in (32, 16, 16, 16, 48))
    uid = f"{a:08x}-{b:04x}-{c:04x}-{d:04x}-{e:012x}"
    tmeta = tmpl.get("metadata") or {}
    labels = dict(tmeta.get("labels") or {})
    labels["pod-template-hash"] = phash
    spec = dict(tmpl.get("spec") or {})
    if scheduler_name is not None:
        spec["schedulerName"] = scheduler_name
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault(
        "tolerations",
        [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            {
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
        ],
    )
    pod_meta: dict[str, Any] = {
        "name": f"{rs_name}-{suffix}",
        "generateName": f"{rs_name}-",
        "namespace": ns,
        "uid": uid,
        "labels": labels,
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": rs_name,
                "uid": "rs-" + hashlib.sha256(f"{ns}/{rs_name}".encode()).hexdigest()[:24],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
        "creationTimestamp": rfc3339(created_s),
    }
    if tmeta.get("annotations"):
        pod_meta["annotations"] = dict(tmeta["annotations"])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": pod_meta,
        "spec": spec,
        "status": {"phase": "Pending", "qosClass": qos_class(spec)},
    }


def qos_class(spec: Mapping[str, Any]) -> str:
    """core/v1 PodQOSClass per the documented rules (Guaranteed / Burstable / BestEffort)."""
    cs = spec.get("containers") or []
    any_set = False
    guaranteed = bool(cs)
    for c in cs:
        r = c.get("resources") or {}
        req, lim = r.get("requests") or {}, r.get("limits") or {}
        if req or lim:
            any_set = True
        for k in ("cpu", "memory"):
            if k not in lim or (k in req and str(req[k]) != str(lim[k])):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def rfc3339(t_s: float) -> str:
    """Simulated time ``t_s`` (s) as an RFC 3339 timestamp of the objects. The simulation's clock is the unix clock
    from 0 (1970-01-01T00:00:00Z), so a parsed timestamp (``creationTimestamp``, a taint's ``timeAdded``) compares
    with the ``now_s`` the simulated descheduler is given and its history records, as a live cluster's do with
    the wall clock."""
    base = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
    return (base + _dt.timedelta(seconds=float(t_s))).strftime("%Y-%m-%dT%H:%M:%SZ")


def bind(pod: Mapping[str, Any], node_name: str, phase: str = "Running") -> dict[str, Any]:
    """The Pod after the scheduler's Binding (``spec.nodeName``) and kwok's pod-ready stage."""
    p = copy.deepcopy(dict(pod))
    p["spec"]["nodeName"] = node_name
    p["status"] = {
        **p.get("status", {}),
        "phase": phase,
        "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "True" if phase == "Running" else "False"},
        ],
    }
    return p


def record_restart(pod: Mapping[str, Any], restart_count: int, reason: str, at_s: float) -> dict[str, Any]:
    """The Pod after the kubelet restarted its containers: ``status.containerStatuses[*].restartCount`` and
    ``lastState.terminated`` (``reason``, e.g. ``OOMKilled``, exit code 137 for a kill)."""
    p = copy.deepcopy(dict(pod))
    names = [c.get("name", f"c{i}") for i, c in enumerate((p.get("spec") or {}).get("containers") or [])] or ["main"]
    p["status"] = {
        **p.get("status", {}),
        "containerStatuses": [
            {
                "name": n,
                "ready": False,
                "restartCount": int(restart_count),
                "lastState": {"terminated": {"reason": reason, "exitCode": 137, "finishedAt": rfc3339(at_s)}},
            }
            for n in names
        ],
    }
    return p
