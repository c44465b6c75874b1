"""The Kubernetes API client pieces shared by the extender's and the descheduler's ``kube.py`` adapters
(the only modules, with ``descheduler/leader.py``, that import the ``kubernetes`` package; DESIGN.md
section 3): the client loader, :class:`Reflector` (list + watch one kind into a local cache) and
:class:`ReflectorGroup` (reflectors sharing one lock and one stop event, each in a thread of its own). The
extender's snapshot source (``extender.kube.KubeSnapshotSource``) and the descheduler's interval-mode watch cache
(``descheduler.kube.KubeWatchCache``) are both reflector groups."""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Self

from kubernetes import client as kclient
from kubernetes import config as kconfig
from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines

from policy.live.usage import METRICS_API, UsageUnavailable

__all__ = [
    "load_api_client",
    "POD_FIELD_SELECTOR",
    "Reflector",
    "ReflectorGroup",
    "Gone",
    "object_key",
    "MetricsApiReader",
    "event_object",
]

log = logging.getLogger(__name__)

#: Pods that hold no resources any more are not observed (as kube-scheduler's cache and the upstream
#: descheduler's pod lister do).
POD_FIELD_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed"


def load_api_client(kubeconfig: str | None = None) -> kclient.ApiClient:
    """An ``ApiClient`` from ``kubeconfig`` (a path); ``None``: the in-cluster service account when running in
    a Pod (``KUBERNETES_SERVICE_HOST`` set), else ``$KUBECONFIG`` / ``~/.kube/config``.
    Raises ``kubernetes.config.ConfigException`` (or ``OSError``) when none can be loaded; a path that does not
    exist, and no configuration anywhere, are ``FileNotFoundError`` saying which file was looked for (the client
    library's own message is "Invalid kube-config file. No configuration found.")."""
    if kubeconfig:
        if not os.path.isfile(kubeconfig):
            raise FileNotFoundError(f"no such kubeconfig file {str(kubeconfig)!r}")
        return kconfig.new_client_from_config(config_file=str(kubeconfig))
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        cfg = kclient.Configuration()
        kconfig.load_incluster_config(client_configuration=cfg)
        return kclient.ApiClient(cfg)
    env = os.environ.get("KUBECONFIG")
    paths = [p for p in (env or "").split(os.pathsep) if p] or [os.path.expanduser("~/.kube/config")]
    if not any(os.path.isfile(p) for p in paths):
        where = f"$KUBECONFIG ({env})" if env else os.path.expanduser("~/.kube/config")
        raise FileNotFoundError(
            f"no kubeconfig: not running in a Pod (KUBERNETES_SERVICE_HOST unset) and no file at {where}"
        )
    return kconfig.new_client_from_config()


# ---- list + watch (the reflector pattern of client-go's tools/cache) ------------------------------------------


class Gone(Exception):
    """A watch's resourceVersion expired (HTTP 410): list again."""


def object_key(obj: Mapping[str, Any]) -> str:
    """``namespace/name`` of a namespaced object, ``name`` of a cluster-scoped one."""
    m = obj.get("metadata") or {}
    ns = m.get("namespace")
    return f"{ns}/{m.get('name')}" if ns else str(m.get("name"))


class Reflector:
    """List + watch one resource kind into ``items`` (key → ``parse(obj)``), as client-go's reflector does
    (k8s.io/client-go ``tools/cache/reflector.go``): **list** (paginated, raw JSON, ``page_size`` objects a page)
    → remember the list's ``resourceVersion`` → **watch** from it with bookmarks, applying ADDED / MODIFIED /
    DELETED and following the ``resourceVersion`` of every event and bookmark; a watch the server ends is
    re-opened from the last ``resourceVersion``; **410 Gone** or an error → list again (capped exponential
    back-off after errors: 0.5 s doubling up to 30 s, ±20 % jitter); a full re-list every ``resync_s``. An event
    of any other type is counted and changes nothing.

    ``kind``: the object kind (set on every object before ``parse``; keys: ``namespace/name`` or ``name``);
    ``list_fn``: a ``kubernetes`` client list method (``list_node``, ``list_pod_for_all_namespaces``, ...) called
    with ``_preload_content=False``; ``parse``: raw camelCase object → the cached value; it may raise ``rejected``
    (an exception type or tuple, default ``ValueError``) for an object it refuses: that object is left out
    (logged once per key), the watch goes on; any other exception fails the list or watch (back-off, list
    again). ``loads``: the JSON decoder of list bodies and watch lines (bytes → object; default ``json.loads``).
    ``page_size`` > 0; ``request_timeout_s``: per request, seconds; ``watch_timeout_s``: server-side timeout of
    one watch request, seconds; ``resync_s``: full re-list period, seconds. ``lock``: guards ``items`` (shared
    with the reader of several reflectors); ``stop``: ends :meth:`run`; ``on_change()``: called after every
    list and every event that is not a bookmark (outside ``lock``); ``logger``: where the warnings and the
    "listing again" lines go (default this module's). ``reads``: what the consumer reads of a cached value
    (value → any comparable); a MODIFIED event whose new value reads the same as the old one (e.g. a status-only
    update) is stored but does not call ``on_change`` (``None``: every event calls it).

    Counters for logs and tests: ``lists``, ``events``, ``unchanged`` (events ``reads`` found unchanged),
    ``errors``; ``synced`` (first list done) and ``healthy`` (listed and watching, no error since)."""

    def __init__(
        self,
        kind: str,
        list_fn: Callable[..., Any],
        parse: Callable[[Mapping[str, Any]], Any],
        *,
        field_selector: str | None = None,
        page_size: int = 500,
        request_timeout_s: float = 30.0,
        watch_timeout_s: int = 240,
        resync_s: float = 300.0,
        lock: threading.Lock | None = None,
        stop: threading.Event | None = None,
        on_change: Callable[[], None] | None = None,
        loads: Callable[[bytes | str], Any] = json.loads,
        rejected: type[Exception] | tuple[type[Exception], ...] = ValueError,
        logger: logging.Logger | None = None,
        reads: Callable[[Any], Any] | None = None,
    ):
        self.kind = kind
        self.reads = reads
        self.list_fn = list_fn
        self.parse = parse
        self.field_selector = field_selector
        self.page_size = int(page_size)
        self.request_timeout_s = float(request_timeout_s)
        self.watch_timeout_s = int(watch_timeout_s)
        self.resync_s = float(resync_s)
        self.lock = lock if lock is not None else threading.Lock()
        self.stop_event = stop if stop is not None else threading.Event()
        self.on_change = on_change
        self.loads = loads
        self.rejected = rejected
        self.log = logger if logger is not None else log
        self.items: dict[str, Any] = {}
        self.resource_version = ""
        self.synced = False
        self.healthy = False
        self.lists = 0
        self.events = 0
        self.unchanged = 0
        self.errors = 0
        self._resp = None
        self._bad: set[str] = set()

    def _kw(self) -> dict[str, Any]:
        return {"field_selector": self.field_selector} if self.field_selector else {}

    def _parsed(self, obj: Mapping[str, Any]) -> Any | None:
        try:
            return self.parse(obj)
        except self.rejected as exc:
            key = object_key(obj)
            if key not in self._bad:
                self._bad.add(key)
                self.log.warning("watch %s: ignoring %s: %s", self.kind, key, exc)
            return None

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def list(self) -> None:
        """One full (paginated) list; replaces ``items``."""
        items: dict[str, Any] = {}
        cont = None
        rv = ""
        while True:
            kw = dict(self._kw(), limit=self.page_size, _preload_content=False, _request_timeout=self.request_timeout_s)
            if cont:
                kw["_continue"] = cont
            doc = self.loads(self.list_fn(**kw).data)
            for obj in doc.get("items") or ():
                obj = {**obj, "kind": self.kind}
                info = self._parsed(obj)
                if info is not None:
                    items[object_key(obj)] = info
            meta = doc.get("metadata") or {}
            cont = meta.get("continue")
            if not cont:
                rv = meta.get("resourceVersion", "")
                break
        with self.lock:
            self.items = items
            self.resource_version = rv
        self.lists += 1
        self.synced = True
        self._changed()

    def watch(self, until: float) -> None:
        """Watch from ``resource_version`` until the server ends the watch, ``until`` (monotonic) passes, or
        :attr:`stop_event` is set. Raises :class:`Gone` on 410, ``ApiException`` / urllib3 errors otherwise."""
        stop = self.stop_event
        while not stop.is_set() and time.monotonic() < until:
            timeout = max(1, min(self.watch_timeout_s, int(until - time.monotonic())))
            resp = self.list_fn(
                **self._kw(),
                watch=True,
                resource_version=self.resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout,
                _preload_content=False,
                _request_timeout=(self.request_timeout_s, timeout + 30),
            )
            self._resp = resp
            self.healthy = True
            opened, seen = time.monotonic(), self.events
            try:
                for line in iter_resp_lines(resp):
                    if stop.is_set():
                        return
                    if line:
                        self._event(self.loads(line))
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
                raise Gone(obj.get("message", "resourceVersion too old"))
            raise ApiException(status=code or 500, reason=f"watch {self.kind}: {obj.get('message', obj)}")
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if typ == "BOOKMARK":
            if rv:
                self.resource_version = rv
            return
        obj = {**obj, "kind": self.kind}
        key = object_key(obj)
        self.events += 1
        if typ in ("ADDED", "MODIFIED", "DELETED"):
            info = self._parsed(obj) if typ != "DELETED" else None
            with self.lock:
                if info is None:
                    old = self.items.pop(key, None)
                else:
                    old = self.items.get(key)
                    self.items[key] = info
                if rv:
                    self.resource_version = rv
            reads = self.reads
            if reads is not None and info is not None and old is not None and reads(old) == reads(info):
                self.unchanged += 1
                return
        self._changed()

    def interrupt(self) -> None:
        """Unblock a watch read from another thread."""
        resp = self._resp
        if resp is not None:
            try:
                resp.shutdown()
            except Exception:  # noqa: BLE001 - best effort; the read timeout ends it otherwise
                pass

    def run(self) -> None:
        """list → watch → ... until :attr:`stop_event` is set (in a thread of its own)."""
        stop = self.stop_event
        backoff = 0.0
        while not stop.is_set():
            try:
                self.list()
                backoff = 0.0
                self.watch(time.monotonic() + self.resync_s)
            except Gone as exc:
                self.healthy = False
                self.log.info("watch %s: %s; listing again", self.kind, exc)
            except Exception as exc:  # noqa: BLE001 - API server down, network, 5xx: retry with back-off
                self.healthy = False
                if stop.is_set():
                    break
                self.errors += 1
                backoff = min(max(0.5, backoff * 2), 30.0)
                self.log.warning(
                    "watch %s failed (%s: %s); retrying in %.1f s",
                    self.kind,
                    type(exc).__name__,
                    " ".join(str(exc).split())[:300],
                    backoff,
                )
                stop.wait(backoff * (0.8 + 0.4 * random.random()))
        self.healthy = False


class ReflectorGroup:
    """Reflectors sharing one ``lock`` (guarding their ``items``) and one ``stop_event``, each run in a daemon
    thread of its own, with any other thread the owner needs (:meth:`_thread_targets`); a context manager
    (:meth:`start` on entry, :meth:`stop` on exit). Subclasses fill ``reflectors`` (kind → :class:`Reflector`,
    most simply through :meth:`add`) in their ``__init__`` after calling this one.

    ``thread_prefix``: the threads are named ``<thread_prefix>:<name>`` (``watch-<kind>`` for a reflector).
    ``synced``: every reflector listed once; ``healthy``: every one listed and watching, with no error since."""

    thread_prefix = "hrl"

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.reflectors: dict[str, Reflector] = {}
        self._threads: list[threading.Thread] = []

    def add(
        self, kind: str, list_fn: Callable[..., Any], parse: Callable[[Mapping[str, Any]], Any], **kw: Any
    ) -> Reflector:
        """A :class:`Reflector` of ``kind`` on this group's lock and stop event (``kw``: its other keyword
        arguments), kept in ``reflectors[kind]`` and returned."""
        r = Reflector(kind, list_fn, parse, lock=self.lock, stop=self.stop_event, **kw)
        self.reflectors[kind] = r
        return r

    @property
    def synced(self) -> bool:
        return all(r.synced for r in self.reflectors.values())

    @property
    def healthy(self) -> bool:
        return all(r.healthy for r in self.reflectors.values())

    def stats(self) -> dict[str, Any]:
        """``<kind>_lists`` / ``_events`` / ``_errors`` per reflector (kind in lower case), for logs and tests."""
        return {
            f"{r.kind.lower()}_{c}": getattr(r, c)
            for r in self.reflectors.values()
            for c in ("lists", "events", "unchanged", "errors")
        }

    def _thread_targets(self) -> list[tuple[Callable[[], None], str]]:
        """``(target, name)`` of every thread :meth:`start` starts: by default one ``watch-<kind>`` per reflector."""
        return [(r.run, f"watch-{kind}") for kind, r in self.reflectors.items()]

    def _stopping(self) -> None:
        """Called by :meth:`stop` right after ``stop_event`` is set: wake any thread of the owner's own."""

    def start(self) -> Self:
        """Start every thread (daemon threads); returns ``self`` at once. Raises ``RuntimeError`` when started
        already."""
        if self._threads:
            raise RuntimeError(f"{type(self).__name__} already started")
        for target, name in self._thread_targets():
            t = threading.Thread(target=target, name=f"{self.thread_prefix}:{name}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop every thread (interrupting open watches) and wait for them up to ``timeout_s`` seconds in all;
        ``_threads`` keeps those still alive. Idempotent."""
        self.stop_event.set()
        self._stopping()
        for r in self.reflectors.values():
            r.interrupt()
        deadline = time.monotonic() + timeout_s
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self._threads = [t for t in self._threads if t.is_alive()]

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ---- the Metrics API (metrics.k8s.io, metrics-server) -----------------------------------------------------------


class MetricsApiReader:
    """One ``GET /apis/metrics.k8s.io/v1beta1/pods`` (every namespace) per call, decoded: the fetch callable of
    :class:`policy.live.MetricsApiUsage`. Needs ``get, list`` on ``pods.metrics.k8s.io`` (the chart grants it when
    ``metricsSources.resourceUsage.uri`` is ``metrics-api``). Raises :class:`policy.live.UsageUnavailable` with one
    line: the Metrics API not served (404: metrics-server not installed), unavailable (503: its APIService not
    Available), forbidden (403), any other API error, or a connection failure."""

    path = "/apis/metrics.k8s.io/v1beta1/pods"

    def __init__(self, api_client: kclient.ApiClient, timeout_s: float = 5.0):
        self.api = kclient.CustomObjectsApi(api_client)
        self.timeout_s = float(timeout_s)

    def __call__(self) -> Any:
        try:
            resp = self.api.list_cluster_custom_object(
                "metrics.k8s.io", "v1beta1", "pods", _preload_content=False, _request_timeout=self.timeout_s
            )
            return json.loads(resp.data)
        except ApiException as exc:
            hint = {
                404: "the Metrics API is not served (is metrics-server installed? "
                "kubectl get apiservice v1beta1.metrics.k8s.io)",
                503: "the Metrics API is unavailable (its APIService v1beta1.metrics.k8s.io is not Available)",
                403: "forbidden: this identity needs get, list on pods.metrics.k8s.io",
            }.get(exc.status or 0, f"HTTP {exc.status} {exc.reason}")
            raise UsageUnavailable(f"{METRICS_API}: GET {self.path}: {hint}") from None
        except Exception as exc:  # noqa: BLE001 - urllib3 errors, bad JSON: one line
            detail = " ".join(str(exc).split())[:200]
            raise UsageUnavailable(f"{METRICS_API}: GET {self.path}: {type(exc).__name__}: {detail}") from None


def discard_answer(resp: Any) -> None:
    """Read a ``_preload_content=False`` answer (a ``urllib3.HTTPResponse``) to its end and give its connection back
    to the client's pool. An answer dropped unread keeps its TLS connection open until the garbage collector finds it
    (one socket per call that reads nothing back: an Event, an eviction)."""
    resp.drain_conn()
    resp.release_conn()


def event_object(
    regarding: Mapping[str, str],
    type: str,
    reason: str,
    action: str,
    note: str,
    *,
    controller: str,
    instance: str,
    now_s: float,
) -> dict[str, Any]:
    """An ``events.k8s.io/v1`` Event about ``regarding`` (``apiVersion``, ``kind``, ``namespace``, ``name``,
    optional ``uid``), named as client-go's recorder names them (``<object>.<unix ns in hex>``), ``note`` cut to the
    API's 1 kB, reported by ``controller`` / ``instance`` at ``now_s`` (unix s)."""
    ns = regarding.get("namespace") or "default"
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"{str(regarding.get('name', ''))[:200]}.{int(now_s * 1e9):x}", "namespace": ns},
        "eventTime": datetime.fromtimestamp(now_s, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "reportingController": controller,
        "reportingInstance": instance[:128],
        "action": action,
        "reason": reason,
        "type": type,
        "note": note[:1024],
        "regarding": {k: v for k, v in regarding.items() if v or k != "uid"},
    }
