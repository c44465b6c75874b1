"""The extender's live snapshot source: list + watch Nodes and Pods through the ``kubernetes`` client and keep
the :class:`~extender.store.SnapshotStore` fresh, off the request path (DESIGN.md section 2).

This is the only module of ``extender`` that imports ``kubernetes``. It needs get/list/watch on ``nodes`` and
``pods`` and nothing else (the least-privilege RBAC of the shipped manifests).

How it works (the reflector pattern of client-go's ``tools/cache``, reduced to what the extender needs):

- one thread per resource (Nodes; Pods not ``Succeeded``/``Failed``, by field selector as kube-scheduler's
  cache does): **list** (paginated, raw JSON) → keep every object parsed by :mod:`policy.observe` (the one
  parser), remember the list's ``resourceVersion`` → **watch** from it with bookmarks, applying
  ADDED/MODIFIED/DELETED and following the ``resourceVersion`` of every event and bookmark. A watch that
  ends normally (server timeout) is re-opened from the last ``resourceVersion``; **410 Gone** (expired
  resourceVersion) or any error → list again (with a capped exponential back-off after errors). Every
  ``resyncSeconds`` a full re-list guards against anything missed.
- one builder thread: after a change, waits ``debounceSeconds`` (coalescing bursts), builds the
  :class:`~policy.state.ClusterSnapshot` from the parsed objects and calls :meth:`SnapshotStore.update`
  (which builds the index). Rebuilds are at least ``2 ×`` the last build's duration apart, so a large
  cluster under churn never takes more than about a third of a core. While nothing changes and every watch
  is connected it calls :meth:`SnapshotStore.touch` about once a second, so ``maxSnapshotAgeSeconds``
  measures the watch's health: when the API server is unreachable, the snapshot goes stale and the extender
  answers neutral scores (fail open).
- the call graph: ``graph`` (from ``topology.sources``) merged with the ``hrl-scheduler.io/depends-on``
  annotations of the pods (edge: pod's service → each named service).

An object that :mod:`policy.observe` cannot parse is logged once and left out; it does not stop the watch.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import msgspec
from kubernetes import client as kclient
from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines

from policy.kube import POD_FIELD_SELECTOR, load_api_client
from policy.observe import ObjectError, parse_node, parse_pod
from policy.state import ANNOTATION_DEPENDS_ON, ClusterSnapshot, ServiceEdge, ServiceGraph

from .store import SnapshotStore

__all__ = ["load_api_client", "graph_with_annotations", "KubeSnapshotSource", "POD_FIELD_SELECTOR"]

log = logging.getLogger(__name__)


def graph_with_annotations(graph: ServiceGraph | None, pods) -> ServiceGraph:
    """``graph`` (may be ``None``) united with the edges declared by the pods' ``hrl-scheduler.io/depends-on:
    "svc-a,svc-b"`` annotations; every pod's service becomes a vertex. Mirrors
    ``descheduler.snapshot.graph_from_annotations`` (the two apps may not import each other)."""
    services = set(graph.services) if graph is not None else set()
    edges = list(graph.edges) if graph is not None else []
    for p in pods:
        services.add(p.service)
        for dep in p.annotations.get(ANNOTATION_DEPENDS_ON, "").split(","):
            if dep.strip():
                edges.append(ServiceEdge(p.service, dep.strip()))
    source = graph.source if graph is not None and graph.source else ""
    return ServiceGraph.build(services, edges, source=(source + "; annotations").lstrip("; "))


def _loads(data: bytes | str) -> Any:
    """JSON from the API server: msgspec (about twice as fast as ``json`` on Pod and Node objects, which matters
    while a burst of pods is bound), ``json`` for anything msgspec refuses (same result otherwise)."""
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError:
        return json.loads(data)


class _Gone(Exception):
    """The watch's resourceVersion expired (HTTP 410): list again."""


class _Reflector:
    """List + watch one resource into ``items`` (key → parsed object). Runs in its own thread."""

    def __init__(
        self,
        kind: str,
        list_fn: Callable[..., Any],
        parse: Callable[[Mapping[str, Any]], Any],
        owner: KubeSnapshotSource,
        field_selector: str | None = None,
    ):
        self.kind = kind
        self.list_fn = list_fn
        self.parse = parse
        self.owner = owner
        self.field_selector = field_selector
        self.items: dict[str, Any] = {}
        self.resource_version = ""
        self.synced = False  # the first list completed
        self.healthy = False  # listed and watching, no error since
        self.lists = 0
        self.events = 0
        self.errors = 0
        self._resp = None
        self._bad: set[str] = set()

    # -- helpers --
    def _kw(self) -> dict[str, Any]:
        return {"field_selector": self.field_selector} if self.field_selector else {}

    @staticmethod
    def _key(obj: Mapping[str, Any]) -> str:
        m = obj.get("metadata") or {}
        ns = m.get("namespace")
        return f"{ns}/{m.get('name')}" if ns else str(m.get("name"))

    def _parsed(self, obj: Mapping[str, Any]) -> Any | None:
        try:
            return self.parse(obj)
        except ObjectError as exc:
            key = self._key(obj)
            if key not in self._bad:
                self._bad.add(key)
                log.warning("watch %s: ignoring %s: %s", self.kind, key, exc)
            return None

    # -- list --
    def list(self) -> None:
        items: dict[str, Any] = {}
        cont = None
        while True:
            kw = dict(
                self._kw(),
                limit=self.owner.page_size,
                _preload_content=False,
                _request_timeout=self.owner.request_timeout_s,
            )
            if cont:
                kw["_continue"] = cont
            resp = self.list_fn(**kw)
            doc = _loads(resp.data)
            for obj in doc.get("items") or ():
                obj = {**obj, "kind": self.kind}
                info = self._parsed(obj)
                if info is not None:
                    items[self._key(obj)] = info
            meta = doc.get("metadata") or {}
            cont = meta.get("continue")
            if not cont:
                rv = meta.get("resourceVersion", "")
                break
        with self.owner.lock:
            self.items = items
            self.resource_version = rv
        self.lists += 1
        self.synced = True
        self.owner.changed()

    # -- watch --
    def watch(self, until: float) -> None:
        """Watch from ``resource_version`` until the server ends the watch, ``until`` (monotonic) passes,
        or the source stops. Raises :class:`_Gone` on 410, ``ApiException`` / urllib3 errors otherwise."""
        stop = self.owner.stop_event
        while not stop.is_set() and time.monotonic() < until:
            timeout = max(1, min(self.owner.watch_timeout_s, int(until - time.monotonic())))
            resp = self.list_fn(
                **self._kw(),
                watch=True,
                resource_version=self.resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout,
                _preload_content=False,
                _request_timeout=(self.owner.request_timeout_s, timeout + 30),
            )
            self._resp = resp
            self.healthy = True
            opened, seen = time.monotonic(), self.events
            try:
                for line in iter_resp_lines(resp):
                    if stop.is_set():
                        return
                    if not line:
                        continue
                    self._event(_loads(line))
            finally:
                self._resp = None
                resp.release_conn()
            if self.events == seen and time.monotonic() - opened < 0.5:
                stop.wait(0.5)  # a watch closed at once without news (a proxy?): do not spin

    def _event(self, ev: Mapping[str, Any]) -> None:
        typ = ev.get("type")
        obj = ev.get("object") or {}
        if typ == "ERROR":
            code = obj.get("code")
            if code == 410:
                raise _Gone(obj.get("message", "resourceVersion too old"))
            raise ApiException(status=code or 500, reason=f"watch {self.kind}: {obj.get('message', obj)}")
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if typ == "BOOKMARK":
            if rv:
                self.resource_version = rv
            return
        obj = {**obj, "kind": self.kind}
        key = self._key(obj)
        self.events += 1
        if typ in ("ADDED", "MODIFIED"):
            info = self._parsed(obj)
            with self.owner.lock:
                if info is None:
                    self.items.pop(key, None)
                else:
                    self.items[key] = info
                if rv:
                    self.resource_version = rv
        elif typ == "DELETED":
            with self.owner.lock:
                self.items.pop(key, None)
                if rv:
                    self.resource_version = rv
        self.owner.changed()

    def interrupt(self) -> None:
        """Unblock a watch read from another thread (used by :meth:`KubeSnapshotSource.stop`)."""
        resp = self._resp
        if resp is not None:
            try:
                resp.shutdown()
            except Exception:  # noqa: BLE001 - best effort; the read timeout ends it otherwise
                pass

    def run(self) -> None:
        stop = self.owner.stop_event
        backoff = 0.0
        while not stop.is_set():
            try:
                self.list()
                backoff = 0.0
                self.watch(time.monotonic() + self.owner.resync_s)
            except _Gone as exc:
                self.healthy = False
                log.info("watch %s: %s; listing again", self.kind, exc)
            except Exception as exc:  # noqa: BLE001 - API server down, network, 5xx: retry with back-off
                self.healthy = False
                if stop.is_set():
                    break
                self.errors += 1
                backoff = min(max(0.5, backoff * 2), 30.0)
                log.warning(
                    "watch %s failed (%s: %s); retrying in %.1f s",
                    self.kind,
                    type(exc).__name__,
                    " ".join(str(exc).split())[:300],
                    backoff,
                )
                stop.wait(backoff * (0.8 + 0.4 * random.random()))
        self.healthy = False


class KubeSnapshotSource:
    """Keeps ``store`` fed from the API server (see the module docstring); a context manager.

    ``api_client``: a ``kubernetes.client.ApiClient`` (see :func:`load_api_client`); ``core``: instead of it, any
    object with the two ``CoreV1Api`` methods used (``list_node``, ``list_pod_for_all_namespaces``, called with
    ``_preload_content=False``; for tests); ``graph``: the static call
    graph (``None``: annotations only); ``resync_s``: full re-list period, > 0; ``debounce_s``: wait after a
    change before rebuilding, >= 0; ``touch_interval_s``: how often an idle, healthy source touches the store;
    ``watch_timeout_s``: server-side timeout of one watch request; ``page_size``: list page size.

    Attributes for tests and logs: ``rebuilds``, ``last_build_s``, ``synced`` (both lists done),
    ``healthy`` (both watches connected), and per resource ``lists`` / ``events`` / ``errors``
    via :meth:`stats`.
    """

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
    ):
        if not resync_s > 0:
            raise ValueError(f"resync_s: must be > 0, got {resync_s!r}")
        if not debounce_s >= 0:
            raise ValueError(f"debounce_s: must be >= 0, got {debounce_s!r}")
        self.store = store
        self.graph = graph
        self.resync_s = float(resync_s)
        self.debounce_s = float(debounce_s)
        self.touch_interval_s = float(touch_interval_s)
        self.watch_timeout_s = int(watch_timeout_s)
        self.request_timeout_s = float(request_timeout_s)
        self.page_size = int(page_size)
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self._dirty = threading.Event()
        if core is None:
            if api_client is None:
                raise ValueError("api_client or core is required")
            core = kclient.CoreV1Api(api_client)
        self.nodes = _Reflector("Node", core.list_node, parse_node, self)
        self.pods = _Reflector(
            "Pod", core.list_pod_for_all_namespaces, parse_pod, self, field_selector=POD_FIELD_SELECTOR
        )
        self.rebuilds = 0
        self.last_build_s = 0.0
        self._threads: list[threading.Thread] = []

    # -- state --
    @property
    def synced(self) -> bool:
        return self.nodes.synced and self.pods.synced

    @property
    def healthy(self) -> bool:
        return self.nodes.healthy and self.pods.healthy

    def stats(self) -> dict[str, Any]:
        """Counters, for logs and tests."""
        return {
            "rebuilds": self.rebuilds,
            "last_build_s": round(self.last_build_s, 4),
            **{
                f"{r.kind.lower()}_{k}": getattr(r, k)
                for r in (self.nodes, self.pods)
                for k in ("lists", "events", "errors")
            },
        }

    def changed(self) -> None:
        self._dirty.set()

    # -- lifecycle --
    def start(self) -> KubeSnapshotSource:
        """Start the watch and builder threads (daemon threads); returns at once. The store gets its first
        snapshot once both lists completed (see :meth:`wait_synced`)."""
        if self._threads:
            raise RuntimeError("KubeSnapshotSource already started")
        for target, name in (
            (self.nodes.run, "watch-nodes"),
            (self.pods.run, "watch-pods"),
            (self._build_loop, "snapshot-builder"),
        ):
            t = threading.Thread(target=target, name=f"hrl-extender:{name}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def wait_synced(self, timeout_s: float) -> bool:
        """Wait until the store holds a snapshot built from both lists; ``False`` after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.synced and self.rebuilds > 0:
                return True
            time.sleep(0.02)
        return False

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop every thread (interrupting open watches) and wait for them up to ``timeout_s``. Idempotent."""
        self.stop_event.set()
        self._dirty.set()
        for r in (self.nodes, self.pods):
            r.interrupt()
        deadline = time.monotonic() + timeout_s
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self._threads = [t for t in self._threads if t.is_alive()]

    def __enter__(self) -> KubeSnapshotSource:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- building --
    def build_snapshot(self) -> ClusterSnapshot:
        """The snapshot of what the watches hold now (nodes and pods sorted by name / key)."""
        with self.lock:
            nodes = tuple(self.nodes.items[k] for k in sorted(self.nodes.items))
            pods = tuple(self.pods.items[k] for k in sorted(self.pods.items))
        graph = graph_with_annotations(self.graph, pods)
        return ClusterSnapshot(
            nodes=nodes, pods=pods, pdbs=(), workloads=(), graph=graph, taken_at_s=self.store.clock()
        )

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
                    snap = self.build_snapshot()
                    self.store.update(snap)
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
