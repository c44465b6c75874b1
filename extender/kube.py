"""The extender's live snapshot source: list + watch Nodes and Pods through the ``kubernetes`` client and keep
the :class:`~extender.store.SnapshotStore` fresh, off the request path (DESIGN.md section 2).

This is the only module of ``extender`` that imports ``kubernetes``. It needs get/list/watch on ``nodes`` and
``pods`` and nothing else (the least-privilege RBAC of the shipped manifests).

How it works (the reflector pattern of client-go's ``tools/cache``, reduced to what the extender needs):

- one :class:`policy.kube.Reflector` per resource, each in a thread of its own (Nodes; Pods not
  ``Succeeded``/``Failed``, by field selector as kube-scheduler's cache does): **list** (paginated, raw JSON,
  decoded with msgspec) → keep every object parsed by :mod:`policy.observe` (the one parser), remember the
  list's ``resourceVersion`` → **watch** from it with bookmarks, applying ADDED/MODIFIED/DELETED and following
  the ``resourceVersion`` of every event and bookmark. A watch that ends normally (server timeout) is re-opened
  from the last ``resourceVersion``; **410 Gone** (expired resourceVersion) or any error → list again (with a
  capped exponential back-off after errors). Every ``resyncSeconds`` a full re-list guards against anything
  missed. Every list and event wakes the builder.
- one builder thread: after a change, waits ``debounceSeconds`` (coalescing bursts), builds the
  :class:`~policy.state.ClusterSnapshot` from the parsed objects and calls :meth:`SnapshotStore.update`
  (which builds the index). Rebuilds are at least ``2 ×`` the last build's duration apart, so a large
  cluster under churn never takes more than about a third of a core. While nothing changes and every watch
  is connected it calls :meth:`SnapshotStore.touch` about once a second, so ``maxSnapshotAgeSeconds``
  measures the watch's health: when the API server is unreachable, the snapshot goes stale and the extender
  answers neutral scores (fail open).
- the call graph: ``graph`` (from ``topology.sources``) merged with the ``hrl-scheduler.io/depends-on``
  annotations of the pods (edge: pod's service → each named service).
- measured use (``metricsSources.resourceUsage``): ``usage`` (a :class:`policy.live.UsageInput`, read in the
  background by a :class:`policy.live.UsageRefresher` that wakes the builder after each read) is applied to every
  snapshot the builder makes, so requests read it from the index and never wait for a metrics source; the applier
  reuses the pod and node objects whose use did not change, so the index is still updated from the pods that
  changed (a new reading changes every node's use: one full build per reading).

An object that :mod:`policy.observe` cannot parse is logged once and left out; it does not stop the watch.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any, cast

import msgspec
import numpy as np
from kubernetes import client as kclient

from policy.index import ClusterIndex, estimated_cpu_m
from policy.kube import (
    POD_FIELD_SELECTOR,
    Gone,
    MetricsApiReader,
    ReflectorGroup,
    discard_answer,
    event_object,
    load_api_client,
)
from policy.live import InputMetrics, ResourceUsageConfig, UsageInput, open_usage_source
from policy.observe import ObjectError, parse_node, parse_pod
from policy.state import ANNOTATION_DEPENDS_ON, ClusterSnapshot, NodeInfo, PodInfo, ServiceGraph

from .store import SnapshotStore, graph_with_annotations

__all__ = [
    "load_api_client",
    "graph_with_annotations",
    "updated_index",
    "pod_reads",
    "node_reads",
    "KubeSnapshotSource",
    "POD_FIELD_SELECTOR",
    "usage_input",
    "REPORTING_CONTROLLER",
    "KubeEventSink",
]

log = logging.getLogger(__name__)


def _loads(data: bytes | str) -> Any:
    """JSON from the API server: msgspec (about twice as fast as ``json`` on Pod and Node objects, which matters
    while a burst of pods is bound), ``json`` for anything msgspec refuses (same result otherwise)."""
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError:
        return json.loads(data)


def pod_reads(pod: PodInfo) -> tuple:
    """What the extender reads of a cached pod (the index, the score table's pending keys, the call graph's
    annotations, the learned policy's service statistics): an event that changes none of it (kwok's and the
    kubelet's status updates: phase, conditions, IPs, resourceVersion) does not rebuild the snapshot."""
    return (
        pod.service,
        pod.requests,
        pod.limits,
        pod.node_name,
        pod.terminating,
        pod.usage,
        pod.annotations.get(ANNOTATION_DEPENDS_ON),
    )


def node_reads(node: NodeInfo) -> tuple:
    """What the extender reads of a cached node: every field (labels included, which the dataclass's equality
    leaves out); a heartbeat that changes nothing of it does not rebuild the snapshot."""
    return (node, tuple(sorted(node.labels.items())))


def updated_index(
    prev: ClusterIndex, snapshot: ClusterSnapshot, changes: Iterable[tuple[PodInfo | None, PodInfo | None]]
) -> ClusterIndex:
    """``ClusterIndex.build(snapshot)``, computed from ``prev`` (an index of the same nodes, in the same order) and
    the pods that changed since: ``changes`` = ``(old, new)`` pairs (``old`` ``None``: added; ``new`` ``None``:
    deleted). Work proportional to the change (plus copies of the N-long arrays), not to the cluster: a binding
    changes one node's row. Exact: requests are whole millicores and bytes, so the float64 sums are integer sums
    (exact below 2**53) and subtracting a pod's contribution restores the sum without it bit for bit; a service
    whose last bound pod left has no entry, as in a fresh build (the mappings are equal; their order may differ).
    Raises ``ValueError`` when ``snapshot``'s nodes are not ``prev``'s."""
    if len(snapshot.nodes) != len(prev.node_names) or any(n.name != m for n, m in zip(snapshot.nodes, prev.node_names)):
        raise ValueError("updated_index: the snapshot's nodes differ from the previous index's")
    pos = prev.node_pos
    req_cpu = prev.req_cpu_m.copy()
    req_mem = prev.req_mem_bytes.copy()
    count = prev.pod_count.copy()
    n = len(prev.node_names)
    unmeasured = np.zeros(n) if prev.unmeasured_estimated_cpu_m is None else prev.unmeasured_estimated_cpu_m.copy()
    measured = np.zeros(n, np.int64) if prev.measured_pods is None else prev.measured_pods.copy()
    svc_nodes = dict(prev.service_nodes)
    svc_total = dict(prev.service_total)
    copied: set[str] = set()
    for old, new in changes:
        for p, sign in ((old, -1), (new, 1)):
            if p is None or p.terminating or p.node_name is None:
                continue
            i = pos.get(p.node_name)
            if i is None:
                continue
            req_cpu[i] += sign * p.requests.cpu_m
            req_mem[i] += sign * p.requests.memory_bytes
            count[i] += sign
            if p.usage is None:
                unmeasured[i] += sign * estimated_cpu_m(p)
            else:
                measured[i] += sign
            svc = p.service
            arr = svc_nodes.get(svc)
            if arr is None:
                arr = svc_nodes[svc] = np.zeros(n)
                copied.add(svc)
            elif svc not in copied:
                arr = svc_nodes[svc] = arr.copy()
                copied.add(svc)
            arr[i] += sign
            svc_total[svc] = svc_total.get(svc, 0) + sign
    for svc in copied:
        if svc_total.get(svc, 0) == 0:
            svc_nodes.pop(svc, None)
            svc_total.pop(svc, None)
    return replace(
        prev,
        snapshot=snapshot,
        req_cpu_m=req_cpu,
        req_mem_bytes=req_mem,
        pod_count=count,
        service_nodes=svc_nodes,
        service_total=svc_total,
        unmeasured_estimated_cpu_m=unmeasured,
        measured_pods=measured,
    )


#: A watch's 410 Gone: :class:`policy.kube.Gone`, also importable from here.
_Gone = Gone


class KubeSnapshotSource(ReflectorGroup):
    """Keeps ``store`` fed from the API server (see the module docstring); a context manager.

    ``api_client``: a ``kubernetes.client.ApiClient`` (see :func:`load_api_client`); ``core``: instead of it, any
    object with the two ``CoreV1Api`` methods used (``list_node``, ``list_pod_for_all_namespaces``, called with
    ``_preload_content=False``; for tests); ``graph``: the static call
    graph (``None``: annotations only); ``resync_s``: full re-list period, > 0; ``debounce_s``: wait after a
    change before rebuilding, >= 0; ``touch_interval_s``: how often an idle, healthy source touches the store;
    ``watch_timeout_s``: server-side timeout of one watch request; ``page_size``: list page size; ``usage``: measured
    use applied to every snapshot (a :class:`policy.live.UsageInput`; ``None``: none).

    Attributes for tests and logs: ``nodes`` and ``pods`` (the two reflectors), ``rebuilds``, ``last_build_s``,
    ``synced`` (both lists done), ``healthy`` (both watches connected), and per resource ``lists`` / ``events``
    / ``errors`` via :meth:`stats`.
    """

    thread_prefix = "hrl-extender"

    def __init__(
        self,
        store: SnapshotStore,
        api_client: kclient.ApiClient | None = None,
        *,
        core: Any = None,
        graph: ServiceGraph | None = None,
        resync_s: float = 300.0,
        debounce_s: float = 0.2,
        touch_interval_s: float = 1.0,
        watch_timeout_s: int = 240,
        request_timeout_s: float = 30.0,
        page_size: int = 500,
        usage: UsageInput | None = None,
    ):
        if not resync_s > 0:
            raise ValueError(f"resync_s: must be > 0, got {resync_s!r}")
        if not debounce_s >= 0:
            raise ValueError(f"debounce_s: must be >= 0, got {debounce_s!r}")
        super().__init__()
        self.store = store
        self.graph = graph
        self.usage = usage
        self.resync_s = float(resync_s)
        self.debounce_s = float(debounce_s)
        self.touch_interval_s = float(touch_interval_s)
        self.watch_timeout_s = int(watch_timeout_s)
        self.request_timeout_s = float(request_timeout_s)
        self.page_size = int(page_size)
        self._dirty = threading.Event()
        if core is None:
            if api_client is None:
                raise ValueError("api_client or core is required")
            core = kclient.CoreV1Api(api_client)
        kw: dict[str, Any] = {
            "page_size": self.page_size,
            "request_timeout_s": self.request_timeout_s,
            "watch_timeout_s": self.watch_timeout_s,
            "resync_s": self.resync_s,
            "on_change": self.changed,
            "loads": _loads,
            "rejected": ObjectError,
            "logger": log,
        }
        self.nodes = self.add("Node", core.list_node, parse_node, reads=node_reads, **kw)
        self.pods = self.add(
            "Pod", core.list_pod_for_all_namespaces, parse_pod, field_selector=POD_FIELD_SELECTOR, reads=pod_reads, **kw
        )
        self.rebuilds = 0
        self.incremental_builds = 0
        self.last_build_s = 0.0
        self._last_graph: ServiceGraph | None = None
        self._last_index: ClusterIndex | None = None
        self._last_nodes: dict[str, Any] = {}
        self._last_pods: dict[str, Any] = {}

    # -- state --
    def stats(self) -> dict[str, Any]:
        """Counters, for logs and tests."""
        return {
            "rebuilds": self.rebuilds,
            "incremental_builds": self.incremental_builds,
            "last_build_s": round(self.last_build_s, 4),
            **super().stats(),
        }

    def changed(self) -> None:
        """Wake the builder (a reflector listed or saw an event)."""
        self._dirty.set()

    # -- lifecycle --
    def start(self) -> KubeSnapshotSource:
        """Start the watch and builder threads (daemon threads); returns at once. The store gets its first
        snapshot once both lists completed (see :meth:`wait_synced`)."""
        return super().start()

    def _thread_targets(self) -> list[tuple[Callable[[], None], str]]:
        return [(self.nodes.run, "watch-nodes"), (self.pods.run, "watch-pods"), (self._build_loop, "snapshot-builder")]

    def _stopping(self) -> None:
        self._dirty.set()

    def wait_synced(self, timeout_s: float) -> bool:
        """Wait until the store holds a snapshot built from both lists; ``False`` after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.synced and self.rebuilds > 0:
                return True
            time.sleep(0.02)
        return False

    # -- building --
    def build_snapshot(self) -> ClusterSnapshot:
        """The snapshot of what the watches hold now (nodes and pods sorted by name / key)."""
        return self._build()[0]

    def _build(self) -> tuple[ClusterSnapshot, ClusterIndex]:
        """The snapshot of what the watches hold now and its index: updated from the last build's index when the
        nodes are the same objects and at most a quarter of the pods changed (:func:`updated_index`), else built
        afresh. The call graph object is reused while it is equal to the last one."""
        with self.lock:
            node_items = dict(self.nodes.items)
            pod_items = dict(self.pods.items)
        node_keys, pod_keys = sorted(node_items), sorted(pod_items)
        nodes = tuple(node_items[k] for k in node_keys)
        pods = tuple(pod_items[k] for k in pod_keys)
        graph = graph_with_annotations(self.graph, pods)
        if graph == self._last_graph:
            graph = self._last_graph
        snap = ClusterSnapshot(
            nodes=nodes, pods=pods, pdbs=(), workloads=(), graph=graph, taken_at_s=self.store.clock()
        )
        if self.usage is not None:
            applied = self.usage.apply(snap)
            if applied is not snap:  # the same keys in the same order, the objects with their measured use
                snap = applied
                node_items = dict(zip(node_keys, snap.nodes))
                pod_items = dict(zip(pod_keys, snap.pods))
        prev, prev_nodes, prev_pods = self._last_index, self._last_nodes, self._last_pods
        index = None
        if (
            prev is not None
            and len(prev_nodes) == len(node_items)
            and all(prev_nodes.get(k) is v for k, v in node_items.items())
        ):
            changes = [(prev_pods.get(k), v) for k, v in pod_items.items() if prev_pods.get(k) is not v]
            changes += [(v, None) for k, v in prev_pods.items() if k not in pod_items]
            if len(changes) <= max(len(pod_items), len(prev_pods)) // 4:
                index = updated_index(prev, snap, changes)
                self.incremental_builds += 1
        if index is None:
            index = ClusterIndex.build(snap)
        self._last_graph, self._last_index, self._last_nodes, self._last_pods = graph, index, node_items, pod_items
        return snap, index

    def _build_loop(self) -> None:
        stop = self.stop_event
        last_touch = 0.0
        while not stop.is_set():
            woke = self._dirty.wait(self.touch_interval_s)
            if stop.is_set():
                break
            if woke and self.synced:
                if self.debounce_s > 0:
                    stop.wait(self.debounce_s)
                self._dirty.clear()
                t0 = time.perf_counter()
                try:
                    snap, index = self._build()
                    self.store.update(snap, index=index)
                except Exception as exc:
                    log.error("snapshot rebuild failed: %s: %s", type(exc).__name__, exc, exc_info=True)
                    stop.wait(1.0)
                    continue
                self.last_build_s = time.perf_counter() - t0
                self.rebuilds += 1
                if self.rebuilds == 1:
                    log.info(
                        "first snapshot from the API server: %d nodes, %d pods (%.0f ms)",
                        len(snap.nodes),
                        len(snap.pods),
                        self.last_build_s * 1000,
                    )
                last_touch = time.monotonic()
                # Throttle: leave at least twice the build time between builds.
                stop.wait(max(0.0, 2 * self.last_build_s - self.debounce_s))
            elif woke:
                self._dirty.clear()  # not synced yet: the completing list sets it again
            elif self.healthy and self.rebuilds > 0 and time.monotonic() - last_touch >= self.touch_interval_s:
                self.store.touch()
                last_touch = time.monotonic()


def usage_input(
    config: ResourceUsageConfig, api_client: kclient.ApiClient | None, metrics: InputMetrics | None = None
) -> UsageInput:
    """The extender's measured-use input of ``metricsSources.resourceUsage`` (off when its ``uri`` is null): the
    Metrics API through ``api_client``, or Prometheus. Raises ``ValueError`` naming the URI for a bad one."""
    if config.uri is None:
        return UsageInput(None, max_age_s=config.max_age_seconds, logger=log, metrics=metrics)
    reader = MetricsApiReader(api_client) if api_client is not None else None
    source = open_usage_source(config.uri, reader)
    return UsageInput(source, max_age_s=config.max_age_seconds, logger=log, metrics=metrics)


# ---- Events of the decision record (extender/decisions.py) -----------------------------------------------------

#: ``reportingController`` of the extender's Events.
REPORTING_CONTROLLER = "hrl-scheduler.io/extender"


class KubeEventSink:
    """:class:`extender.decisions.EventSink` creating ``events.k8s.io/v1`` Events on pods (needs ``create`` on
    ``events.events.k8s.io``; only with ``decisions.events``). ``instance``: ``reportingInstance`` (default the host
    name). Raises the client's ``ApiException`` (or a connection error) when the create fails: the recorder counts it.
    """

    def __init__(self, api_client: kclient.ApiClient, *, instance: str = "", timeout_s: float = 5.0, clock=time.time):
        self.events = kclient.EventsV1Api(api_client)
        self.instance = instance or socket.gethostname()
        self.timeout_s = timeout_s
        self.clock = clock
        self.created = 0

    def post(self, pod: PodInfo, reason: str, action: str, note: str) -> None:
        ref = {"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace, "name": pod.name, "uid": pod.uid}
        body = event_object(
            ref,
            "Normal",
            reason,
            action,
            note,
            controller=REPORTING_CONTROLLER,
            instance=self.instance,
            now_s=self.clock(),
        )
        resp = self.events.create_namespaced_event(
            pod.namespace or "default",
            cast(Any, body),  # the client sends a dict as it is
            _request_timeout=self.timeout_s,
            _preload_content=False,
        )
        discard_answer(resp)
        self.created += 1
