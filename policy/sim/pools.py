"""Heterogeneous simulated clusters: node pools of different sizes and CPU speeds, spread over regions, zones
and racks.

A :class:`NodePool` is a group of identical nodes (one instance type): ``count`` nodes of ``cpu_m``
millicores and ``memory_bytes``, each core ``speed`` times as fast as the reference core the applications
were calibrated on (1.0; a request's CPU work takes ``x / speed`` seconds on it), spread round-robin over
``zones`` and, inside each zone, over ``racks_per_zone`` racks. :class:`PoolClusterSpec` is a
:class:`~policy.sim.engine.ClusterSpec` made of pools, so every stack and the simulation loop take it where
they take a homogeneous cluster.

Nodes carry the labels a kubelet and a cloud provider set: ``kubernetes.io/hostname``,
``topology.kubernetes.io/zone`` / ``region``, ``node.kubernetes.io/instance-type``, plus
``hrl-scheduler.io/rack`` and ``hrl-scheduler.io/node-pool`` (no upstream label names a rack; Kubernetes
leaves it to the provider, see the well-known labels reference).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from policy.state import LABEL_CPU_SPEED

from .engine import ClusterSpec
from .network import LABEL_RACK
from .objects import node_object

__all__ = ["LABEL_RACK", "LABEL_NODE_POOL", "LABEL_INSTANCE_TYPE", "NodePool", "PoolClusterSpec"]

LABEL_NODE_POOL = "hrl-scheduler.io/node-pool"
LABEL_INSTANCE_TYPE = "node.kubernetes.io/instance-type"


@dataclass(frozen=True)
class NodePool:
    """``count`` identical nodes: ``cpu_m`` millicores, ``memory_bytes``, per-core ``speed`` (relative to the
    calibration machine, > 0), ``max_pods``, round-robin over ``zones`` (empty = one unnamed zone) in
    ``region`` and over ``racks_per_zone`` racks per zone; ``nic_gbps``: the node's network bandwidth per
    direction (Gbit/s; None = the network's default), ``instance_type``: the label value; ``speed_label``: the nodes
    carry their speed as the label :data:`policy.state.LABEL_CPU_SPEED` (as an operator declares it)."""

    name: str
    count: int
    cpu_m: int
    memory_bytes: int
    speed: float = 1.0
    max_pods: int = 110
    zones: tuple[str, ...] = ()
    region: str = ""
    racks_per_zone: int = 1
    nic_gbps: float | None = None
    instance_type: str = ""
    speed_label: bool = True

    def __post_init__(self) -> None:
        if self.count < 0:
            raise ValueError(f"nodePools.{self.name}.count: must be >= 0, got {self.count}")
        if self.cpu_m <= 0:
            raise ValueError(f"nodePools.{self.name}.cpuM: must be > 0, got {self.cpu_m}")
        if not (self.speed > 0 and math.isfinite(self.speed)):
            raise ValueError(f"nodePools.{self.name}.speed: must be a finite number > 0, got {self.speed!r}")
        if self.racks_per_zone < 1:
            raise ValueError(f"nodePools.{self.name}.racksPerZone: must be >= 1, got {self.racks_per_zone}")


@dataclass(frozen=True)
class PoolClusterSpec(ClusterSpec):
    """A cluster of :class:`NodePool` s (in order; nodes are named ``node-000``, ``node-001``, ... across pools).

    The inherited fields describe it as a whole: ``nodes`` the node count, ``zones`` the distinct zones in
    order of appearance, ``cpu_m`` / ``memory_bytes`` those of the first pool (a heterogeneous cluster has no
    single node size: read :attr:`pools` or the node objects). Build it with :meth:`of`.
    """

    pools: tuple[NodePool, ...] = field(default=())

    @staticmethod
    def of(pools: tuple[NodePool, ...], background=(), max_pods: int | None = None) -> PoolClusterSpec:
        """The cluster of these pools (at least one node) with ``background`` tenants."""
        n = sum(p.count for p in pools)
        if n < 1:
            raise ValueError("cluster.nodePools: no nodes (every count is 0)")
        zones = tuple(dict.fromkeys(z for p in pools for z in p.zones))
        first = next(p for p in pools if p.count > 0)
        return PoolClusterSpec(
            nodes=n,
            cpu_m=first.cpu_m,
            memory_bytes=first.memory_bytes,
            zones=zones,
            max_pods=max_pods or first.max_pods,
            background=tuple(background),
            pools=tuple(pools),
        )

    def node_layout(self) -> list[dict[str, Any]]:
        """Per node in order: ``name``, ``pool`` (the NodePool), ``zone``, ``region``, ``rack``."""
        out = []
        i = 0
        for p in self.pools:
            for k in range(p.count):
                zone = p.zones[k % len(p.zones)] if p.zones else ""
                nz = max(len(p.zones), 1)
                rack = f"{zone or 'rack'}-r{(k // nz) % p.racks_per_zone}"
                out.append({"name": f"node-{i:03d}", "pool": p, "zone": zone, "region": p.region, "rack": rack})
                i += 1
        return out

    def node_objects(self) -> list[dict[str, Any]]:
        out = []
        for n in self.node_layout():
            p: NodePool = n["pool"]
            labels = {
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": "amd64",
                LABEL_RACK: n["rack"],
                LABEL_NODE_POOL: p.name,
            }
            if p.instance_type:
                labels[LABEL_INSTANCE_TYPE] = p.instance_type
            if p.speed_label:
                labels[LABEL_CPU_SPEED] = f"{p.speed:g}"
            out.append(
                node_object(
                    n["name"],
                    p.cpu_m,
                    p.memory_bytes,
                    p.max_pods,
                    zone=n["zone"],
                    region=n["region"] if n["zone"] else "",
                    labels=labels,
                )
            )
        return out

    def node_speeds(self) -> np.ndarray | None:
        speeds = np.array([n["pool"].speed for n in self.node_layout()], dtype=np.float64)
        return None if np.all(speeds == 1.0) else speeds

    def node_nic_gbps(self) -> list[float | None]:
        """Per node: its pool's NIC bandwidth (None = the network's default)."""
        return [n["pool"].nic_gbps for n in self.node_layout()]

    def node_racks(self) -> list[str]:
        return [n["rack"] for n in self.node_layout()]
