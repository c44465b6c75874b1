"""Measured resource use of pods, read from the cluster's own metrics: the sources of ``PodInfo.usage`` and
``NodeInfo.usage`` on a live cluster (the simulator sets them from the minute it simulated, ``policy/sim/engine.py``).

Two sources, one reading shape (:class:`UsageReading`: pod key → CPU millicores and memory bytes, the sum over the
pod's containers, sidecars such as a mesh proxy included, as metrics-server counts them):

- **the Metrics API** (``metrics.k8s.io/v1beta1``, served by metrics-server; :class:`MetricsApiUsage`): one
  ``GET /apis/metrics.k8s.io/v1beta1/pods`` per read (the Kubernetes client call is in ``policy/kube.py``,
  :class:`policy.kube.MetricsApiReader`). Each ``PodMetrics`` item carries its containers' ``usage`` (CPU in
  cores, e.g. ``"12345678n"``; memory working set in bytes, e.g. ``"40Mi"``), the ``timestamp`` of the scrape and
  the ``window`` the CPU rate was taken over (metrics-server's resolution, 15 s by default). metrics-server lists
  a pod only once it has two scrapes of it, so a pod started since is not measured yet (and absent);
- **Prometheus with cAdvisor or the kubelet's resource metrics** (:class:`PrometheusUsage`): one instant query per
  read (the four parts below joined by :func:`policy.topology.prometheus.tagged_union`)::

      cpu      sum by (namespace, pod) (max by (namespace, pod, container) (
                   rate(container_cpu_usage_seconds_total{container!="", container!="POD", MATCH}[W])))
      memory   sum by (namespace, pod) (max by (namespace, pod, container) (
                   container_memory_working_set_bytes{container!="", container!="POD", MATCH}))
      covered  count by (namespace, pod) (container_cpu_usage_seconds_total{...} offset W)
      last     max by (namespace, pod) (timestamp(container_cpu_usage_seconds_total{...}))

  ``container!=""`` drops cAdvisor's pod-level cgroup series and ``container!="POD"`` the pause container, so a
  pod's use is the sum of its containers (sidecars included), as metrics-server reports it; the inner ``max``
  keeps one series per container when the same container is scraped twice (two jobs or two replicas). ``MATCH``:
  extra label matchers of the URI (``match=job="kubelet"``). **Not measured yet**: a pod whose series did not
  exist at the start of the window (``covered`` absent: started or bound since) is left out, as the simulator
  leaves out a pod bound since the last minute; its ``rate()`` would under-count it.

:class:`UsageApplier` puts a reading on a snapshot the way the simulator does
(``policy.sim.cluster.SimCluster.snapshot``): every bound pod the reading has gets ``usage`` (CPU; the memory working
set is read but kept out, see :class:`UsageApplier`), every other one ``usage=None`` (not measured yet: the features
count its requests, :attr:`policy.index.ClusterIndex.unmeasured_cpu_m`), and every node's ``usage`` is the sum over
its measured pods (0 when none is). A node's own metric (the kubelet, the container runtime and the system
daemons, which allocatable already leaves out) is not read: the policies were trained on the sum over pods.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol

from policy.observe import ObjectError, parse_memory_bytes, parse_quantity
from policy.state import ClusterSnapshot, NodeInfo, PodInfo, Resources
from policy.topology.common import parse_duration_s, split_source_uri

__all__ = [
    "METRICS_API",
    "CADVISOR_SCHEMES",
    "UsageUnavailable",
    "UsageReading",
    "UsageSource",
    "parse_pod_metrics",
    "MetricsApiUsage",
    "ApplyStats",
    "UsageApplier",
    "MATCHERS",
    "UsageUri",
    "parse_usage_uri",
]

#: The ``resourceUsage.uri`` of the Metrics API.
METRICS_API = "metrics-api"
CADVISOR_SCHEMES = ("prometheus+cadvisor", "prometheus+cadvisor+https")
#: PromQL label matchers (``job="kubelet",metrics_path=~".*cadvisor"``), the ``match`` of a Prometheus URI.
MATCHERS = re.compile(
    r'^\s*[A-Za-z_][A-Za-z0-9_]*\s*(=|!=|=~|!~)\s*"(?:[^"\\]|\\.)*"\s*(,\s*[A-Za-z_][A-Za-z0-9_]*\s*(=|!=|=~|!~)\s*"(?:[^"\\]|\\.)*"\s*)*$'
)


class UsageUnavailable(Exception):
    """A resource-use source could not be read now (not installed, not reachable, refused, malformed answer):
    one line saying which and why."""


@dataclass(frozen=True)
class UsageReading:
    """One reading of the pods' measured resource use.

    ``cpu_m``: pod key (``namespace/name``) → CPU millicores averaged over the window (unrounded), the sum over the
    pod's containers; only pods measured over a whole window (its keys are the measured pods). ``memory_bytes``: pod
    key → working set (bytes, the sum over its containers), where reported. ``taken_at_s``: unix seconds of the
    newest measurement (``None``: the source measured nothing). ``window_s``: the window the CPU use is averaged
    over (seconds). ``rejected``: items of the answer that could not be read (left out, counted)."""

    cpu_m: Mapping[str, float]
    memory_bytes: Mapping[str, int]
    taken_at_s: float | None
    window_s: float
    rejected: int = 0


class UsageSource(Protocol):
    """What :class:`policy.live.UsageInput` reads: ``name`` (for logs and metrics) and ``read()`` (one round trip;
    raises :class:`UsageUnavailable`)."""

    name: str

    def read(self) -> UsageReading: ...

    def close(self) -> None: ...


def _timestamp_s(v: Any) -> float | None:
    if not isinstance(v, str) or not v:
        return None
    try:
        return datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp()
    except (ValueError, OverflowError, OSError):
        return None


def parse_pod_metrics(doc: Any, source: str = METRICS_API) -> UsageReading:
    """A ``metrics.k8s.io/v1beta1`` ``PodMetricsList`` (the JSON of ``GET /apis/metrics.k8s.io/v1beta1/pods``) →
    :class:`UsageReading`: per item ``metadata.namespace/name``, the sum of ``containers[].usage.cpu`` (→ millicores)
    and ``.memory`` (→ bytes), ``timestamp`` and ``window`` (a Go duration, ``"15.012s"``). An item that cannot be
    read (no name, a bad quantity or duration) is left out and counted in ``rejected``. Raises
    :class:`UsageUnavailable` when ``doc`` is not a PodMetricsList at all."""
    if not isinstance(doc, Mapping) or not isinstance(doc.get("items"), list):
        kind = doc.get("kind") if isinstance(doc, Mapping) else type(doc).__name__
        raise UsageUnavailable(f"{source}: expected a PodMetricsList with items, got {str(kind)[:80]!r}")
    cpu_m: dict[str, float] = {}
    memory: dict[str, int] = {}
    newest: float | None = None
    windows: list[float] = []
    rejected = 0
    for i, item in enumerate(doc["items"]):
        try:
            meta = item.get("metadata") or {}
            ns, name = meta.get("namespace"), meta.get("name")
            if not isinstance(ns, str) or not isinstance(name, str) or not ns or not name:
                raise ObjectError(f"items[{i}].metadata: no namespace/name")
            cpu = 0.0
            mem = 0
            for j, c in enumerate(item.get("containers") or ()):
                u = c.get("usage") or {}
                if "cpu" in u:
                    cpu += float(parse_quantity(u["cpu"], f"items[{i}].containers[{j}].usage.cpu")) * 1000.0
                if "memory" in u:
                    mem += parse_memory_bytes(u["memory"], f"items[{i}].containers[{j}].usage.memory")
            window = parse_duration_s(item.get("window") or "0.001s", f"items[{i}].window")
        except (ObjectError, ValueError, AttributeError, TypeError):
            rejected += 1
            continue
        cpu_m[f"{ns}/{name}"] = cpu
        memory[f"{ns}/{name}"] = int(mem)
        t = _timestamp_s(item.get("timestamp"))
        if t is not None:
            newest = t if newest is None else max(newest, t)
        windows.append(window)
    window_s = sorted(windows)[len(windows) // 2] if windows else 0.0
    return UsageReading(cpu_m, memory, newest, window_s, rejected)


class MetricsApiUsage:
    """:class:`UsageSource` over the Metrics API. ``fetch``: returns the decoded ``PodMetricsList`` of every
    namespace (one ``GET /apis/metrics.k8s.io/v1beta1/pods``; :class:`policy.kube.MetricsApiReader` on a live
    cluster, any callable in tests) and raises :class:`UsageUnavailable` when it cannot."""

    def __init__(self, fetch: Callable[[], Any], name: str = METRICS_API):
        self.fetch = fetch
        self.name = name

    def read(self) -> UsageReading:
        return parse_pod_metrics(self.fetch(), self.name)

    def close(self) -> None:
        close = getattr(self.fetch, "close", None)
        if callable(close):
            close()


@dataclass(frozen=True)
class ApplyStats:
    """What applying a reading found: ``measured`` bound pods given a use; ``missing`` bound, running pods older than
    the window the reading has no use for (metrics lost: their requests count instead); ``unknown`` pods of the
    reading the snapshot does not have (gone since)."""

    measured: int = 0
    missing: int = 0
    unknown: int = 0


@dataclass
class UsageApplier:
    """Puts a :class:`UsageReading` on snapshots (the module docstring's rule), reusing the ``PodInfo`` / ``NodeInfo``
    objects it made while a pod's (or node's) object and use are unchanged, so an index maintained from the pods
    that changed (``extender.kube.updated_index``) sees only those. Not thread-safe: one writer (the snapshot
    builder).

    ``memory``: put the memory working set on ``usage.memory_bytes`` too. Off by default: the simulator measures no
    memory use (its snapshots carry 0), so no policy has seen one, and the graph encoder's ``log_memory_usage_mib``
    would read a value it never met in training (policy.contract)."""

    memory: bool = False
    _pods: dict[str, tuple[PodInfo, Resources | None, PodInfo]] = field(default_factory=dict)
    _nodes: dict[str, tuple[NodeInfo, Resources | None, NodeInfo]] = field(default_factory=dict)

    @staticmethod
    def _with_use(cache: dict, key: str, obj: Any, u: Resources | None) -> Any:
        """``obj`` (a PodInfo or NodeInfo) with ``usage=u``: itself when it has it, the object made last time for
        the same ``obj`` and ``u``, else a new one (remembered under ``key``)."""
        if obj.usage == u:
            return obj
        hit = cache.get(key)
        if hit is not None and hit[0] is obj and hit[1] == u:
            return hit[2]
        made = replace(obj, usage=u)
        cache[key] = (obj, u, made)
        return made

    def _pod(self, p: PodInfo, u: Resources | None, key: str | None = None) -> PodInfo:
        if p.usage == u:  # before the key: most pods keep their use from one snapshot to the next
            return p
        return self._with_use(self._pods, p.key if key is None else key, p, u)

    def _node(self, n: NodeInfo, u: Resources | None) -> NodeInfo:
        return self._with_use(self._nodes, n.name, n, u)

    def apply(self, snapshot: ClusterSnapshot, reading: UsageReading | None) -> tuple[ClusterSnapshot, ApplyStats]:
        """``snapshot`` with ``reading`` applied (``None``: every pod and node without a use: the source is off,
        stale or failing), and what was found. O(pods + nodes). Without a reading, a snapshot none of whose pods and
        nodes has a use is returned itself (the source is off: every snapshot)."""
        if reading is None:
            pods = tuple(p if p.usage is None else self._pod(p, None) for p in snapshot.pods)
            nodes = tuple(n if n.usage is None else self._node(n, None) for n in snapshot.nodes)
            self._prune(snapshot)
            if all(a is b for a, b in zip(pods, snapshot.pods)) and all(a is b for a, b in zip(nodes, snapshot.nodes)):
                return snapshot, ApplyStats()
            return replace(snapshot, pods=pods, nodes=nodes), ApplyStats()
        use, mem = reading.cpu_m, reading.memory_bytes
        names = {n.name for n in snapshot.nodes}
        node_cpu: dict[str, float] = dict.fromkeys(names, 0.0)
        node_mem: dict[str, int] = dict.fromkeys(names, 0)
        started_before = (reading.taken_at_s or 0.0) - reading.window_s
        measured = missing = 0
        out = []
        keys = [p.key for p in snapshot.pods]
        for p, key in zip(snapshot.pods, keys):
            cpu = use.get(key) if p.node_name is not None and not p.terminating else None
            u = None
            if cpu is not None:  # rounded per pod, summed unrounded per node: the simulator's snapshot rule
                m = mem.get(key, 0) if self.memory else 0
                u = Resources(int(round(cpu)), m)
                measured += 1
                if p.node_name in node_cpu:
                    node_cpu[p.node_name] += cpu
                    node_mem[p.node_name] += m
            elif p.node_name is not None and not p.terminating and p.phase == "Running":
                if p.created_s and p.created_s < started_before:
                    missing += 1
            out.append(self._pod(p, u, key))
        known = set(keys)
        nodes = tuple(self._node(n, Resources(int(round(node_cpu[n.name])), node_mem[n.name])) for n in snapshot.nodes)
        self._prune(snapshot)
        stats = ApplyStats(measured, missing, sum(1 for k in use if k not in known))
        return replace(snapshot, pods=tuple(out), nodes=nodes), stats

    def _prune(self, snapshot: ClusterSnapshot) -> None:
        if len(self._pods) > 2 * max(len(snapshot.pods), 64):
            alive = {p.key for p in snapshot.pods}
            self._pods = {k: v for k, v in self._pods.items() if k in alive}
        if len(self._nodes) > 2 * max(len(snapshot.nodes), 16):
            alive = {n.name for n in snapshot.nodes}
            self._nodes = {k: v for k, v in self._nodes.items() if k in alive}


_URI_PARAMS = ("window", "timeout", "match")


@dataclass(frozen=True)
class UsageUri:
    """A parsed ``resourceUsage.uri``: ``kind`` ``metrics-api`` or ``prometheus``; for Prometheus its ``base`` URL,
    the source's ``name`` (``prometheus+cadvisor://host:port``), ``window_s``, ``timeout_s`` and ``match``."""

    kind: str
    name: str
    base: str = ""
    window_s: float = 60.0
    timeout_s: float = 5.0
    match: str = ""


def parse_usage_uri(uri: str) -> UsageUri:
    """Parse a ``resourceUsage.uri`` (no network, no client)::

        metrics-api                                                   the Metrics API (metrics-server)
        prometheus+cadvisor://HOST:PORT[/PREFIX][?window=1m&timeout=5s&match=job%3D%22kubelet%22]
        prometheus+cadvisor+https://...                               (HTTPS)

    Defaults: window 1m (the simulator's minute), timeout 5s, no extra matchers. Raises ``ValueError`` naming the URI
    and the bad part."""
    text = str(uri).strip()
    if text == METRICS_API:
        return UsageUri(METRICS_API, METRICS_API)
    u = split_source_uri(
        text, CADVISOR_SCHEMES, _URI_PARAMS, f"{METRICS_API} or prometheus+cadvisor[+https]://HOST:PORT"
    )
    params = u.params
    match = params.get("match", "").strip()
    try:
        window = parse_duration_s(params.get("window", "1m"), "window")
        timeout = parse_duration_s(params.get("timeout", "5s"), "timeout")
        if match and not MATCHERS.match(match):
            raise ValueError(f'match: expected PromQL label matchers such as job="kubelet", got {match!r}')
    except ValueError as exc:
        raise ValueError(f"{uri}: {exc}") from None
    return UsageUri("prometheus", f"{u.scheme}://{u.netloc}{u.path.rstrip('/')}", u.base, window, timeout, match)
