"""A seeded synthetic cluster for the descheduler's scale benchmark (``make bench-descheduler``): Kubernetes
API objects (camelCase JSON, as ``kubectl get nodes,pods,pdb,deployments -A -o json`` prints them).

Shape (every size a parameter, the same seed gives the same objects):

- ``nodes`` nodes of ``node_cpu`` cores / ``node_memory_gi`` GiB, ``allocatable pods`` 110, spread round-robin
  over ``zones`` zones (labels ``topology.kubernetes.io/zone`` and ``kubernetes.io/hostname``);
- ``nodes × pods_per_node`` pods in Deployments of ``pods_per_service`` replicas (one service per Deployment,
  label ``app``), each pod owned by its Deployment's ReplicaSet (``<name>-<hash>``), Running and Ready;
- each service calls up to ``max_callees`` other services (annotation ``hrl-scheduler.io/depends-on`` on the
  Deployment's pod template and on its pods), drawn uniformly;
- a ``hot_share`` of the pods sits on the hottest ``hot_fraction`` of the nodes (the rest uniformly), so some
  nodes are over the planner's overload threshold and locality is poor: the descheduler has work to do;
- CPU requests 100-500 m, memory 128-512 MiB per pod (drawn per service); every ``pdb_every``-th service has a
  PodDisruptionBudget ``minAvailable: 50%`` with its status filled as the disruption controller would.

:func:`synthetic_objects` returns the objects; :func:`write_snapshot` writes them as one ``List`` JSON file.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from policy.state import ANNOTATION_DEPENDS_ON, LABEL_HOSTNAME, LABEL_ZONE

__all__ = ["SyntheticCluster", "synthetic_objects", "write_snapshot"]

NAMESPACES = ("shop", "media", "social", "hotel")


@dataclass(frozen=True)
class SyntheticCluster:
    """The generator's parameters (see the module docstring); ``seed`` fixes every draw."""

    nodes: int = 100
    pods_per_node: int = 30
    pods_per_service: int = 10
    max_callees: int = 3
    zones: int = 3
    node_cpu: int = 16
    node_memory_gi: int = 64
    hot_fraction: float = 0.1
    hot_share: float = 0.3
    pdb_every: int = 5
    seed: int = 0

    def __post_init__(self) -> None:
        for f in ("nodes", "pods_per_node", "pods_per_service", "zones", "node_cpu", "node_memory_gi", "pdb_every"):
            v = getattr(self, f)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"SyntheticCluster.{f}: must be an integer >= 1 (got {v!r})")
        if not 0.0 <= self.hot_fraction <= 1.0 or not 0.0 <= self.hot_share <= 1.0:
            raise ValueError(
                f"SyntheticCluster.hot_fraction / hot_share: must be in [0, 1] (got {self.hot_fraction!r}, "
                f"{self.hot_share!r})"
            )

    @property
    def pods(self) -> int:
        return self.nodes * self.pods_per_node

    @property
    def services(self) -> int:
        return -(-self.pods // self.pods_per_service)


def _hash(rng: np.random.Generator, n: int) -> str:
    return "".join(rng.choice(list("bcdfghjklmnpqrstvwxz2456789"), n))


def synthetic_objects(spec: SyntheticCluster) -> Iterator[dict[str, Any]]:
    """Nodes, then per service its Deployment, its PodDisruptionBudget (every ``pdb_every``-th) and its pods."""
    rng = np.random.default_rng(spec.seed)
    node_names = [f"node-{i:05d}" for i in range(spec.nodes)]
    for i, name in enumerate(node_names):
        yield {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "uid": f"uid-{name}",
                "labels": {LABEL_HOSTNAME: name, LABEL_ZONE: f"zone-{i % spec.zones}"},
            },
            "spec": {},
            "status": {
                "allocatable": {"cpu": str(spec.node_cpu), "memory": f"{spec.node_memory_gi}Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    n_hot = max(1, int(round(spec.nodes * spec.hot_fraction)))
    hot = rng.choice(spec.nodes, n_hot, replace=False)
    total = spec.pods
    placement = np.where(
        rng.random(total) < spec.hot_share, hot[rng.integers(0, n_hot, total)], rng.integers(0, spec.nodes, total)
    )
    n_services = spec.services
    svc_names = [f"svc-{i:05d}" for i in range(n_services)]
    k = 0
    for s, svc in enumerate(svc_names):
        ns = NAMESPACES[s % len(NAMESPACES)]
        replicas = min(spec.pods_per_service, total - k)
        n_callees = int(rng.integers(0, spec.max_callees + 1)) if n_services > 1 else 0
        callees = sorted({svc_names[int(j)] for j in rng.integers(0, n_services, n_callees)} - {svc})
        cpu_m = int(rng.integers(1, 6)) * 100
        mem_mi = int(rng.integers(1, 5)) * 128
        ann = {ANNOTATION_DEPENDS_ON: ",".join(callees)} if callees else {}
        labels = {"app": svc}
        container = {
            "name": "app",
            "image": "registry.invalid/app:1",
            "resources": {
                "requests": {"cpu": f"{cpu_m}m", "memory": f"{mem_mi}Mi"},
                "limits": {"cpu": f"{2 * cpu_m}m", "memory": f"{mem_mi}Mi"},
            },
        }
        rs_hash = _hash(rng, 10)
        rs = f"{svc}-{rs_hash}"
        yield {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": svc, "namespace": ns, "uid": f"uid-dep-{svc}", "generation": 1},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels, "annotations": ann},
                    "spec": {"containers": [container]},
                },
            },
            "status": {"replicas": replicas, "readyReplicas": replicas, "observedGeneration": 1},
        }
        if s % spec.pdb_every == 0:
            desired = -(-replicas // 2)
            yield {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": svc, "namespace": ns, "uid": f"uid-pdb-{svc}", "generation": 1},
                "spec": {"minAvailable": "50%", "selector": {"matchLabels": labels}},
                "status": {
                    "observedGeneration": 1,
                    "currentHealthy": replicas,
                    "desiredHealthy": desired,
                    "expectedPods": replicas,
                    "disruptionsAllowed": replicas - desired,
                },
            }
        for r in range(replicas):
            name = f"{rs}-{_hash(rng, 5)}"
            yield {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": ns,
                    "uid": f"uid-{ns}-{name}",
                    "labels": {**labels, "pod-template-hash": rs_hash},
                    "annotations": ann,
                    "creationTimestamp": "2026-01-01T00:00:00Z",
                    "ownerReferences": [
                        {
                            "apiVersion": "apps/v1",
                            "kind": "ReplicaSet",
                            "name": rs,
                            "uid": f"uid-rs-{rs}",
                            "controller": True,
                        }
                    ],
                },
                "spec": {
                    "nodeName": node_names[int(placement[k + r])],
                    "schedulerName": "default-scheduler",
                    "containers": [container],
                },
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
            }
        k += replicas


def write_snapshot(spec: SyntheticCluster, path: str | Path) -> Path:
    """Write :func:`synthetic_objects` as one ``{"apiVersion": "v1", "kind": "List", "items": [...]}`` JSON file
    (streamed: one object at a time). Returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("w", encoding="utf-8") as f:
        f.write('{"apiVersion": "v1", "kind": "List", "items": [\n')
        for i, obj in enumerate(synthetic_objects(spec)):
            if i:
                f.write(",\n")
            f.write(json.dumps(obj, separators=(",", ":")))
        f.write("\n]}\n")
    return p
