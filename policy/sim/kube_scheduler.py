"""A model of kube-scheduler's scheduling cycle for the simulator: in-tree filters, a sample of feasible
nodes, extender filter/prioritize calls (over real HTTP when the extender is a server), weighted score
plugins, and selectHost's random tie-break.

Source: k8s.io/kubernetes v1.36.3 pkg/scheduler/schedule_one.go (findNodesThatFitPod,
numFeasibleNodesToFind, prioritizeNodes, selectHost) and pkg/scheduler/framework/extender.go (HTTPExtender).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx
import numpy as np

from policy.baselines.kube_default import MAX_NODE_SCORE, ScorePlugin, default_score_plugins
from policy.index import ClusterIndex
from policy.intent import Intent, pending_move_scores
from policy.lowlevel import MAX_EXTENDER_PRIORITY, TAINT_EFFECTS_THAT_REPEL, PlacementPolicy
from policy.observe import parse_pod
from policy.state import NodeInfo, PodInfo

__all__ = [
    "MIN_FEASIBLE_NODES_TO_FIND",
    "MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND",
    "ExtenderError",
    "Extender",
    "HttpExtender",
    "InProcessExtender",
    "num_feasible_nodes_to_find",
    "ScheduleResult",
    "KubeSchedulerModel",
]

MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5


class ExtenderError(RuntimeError):
    """An extender call failed (transport error, non-200 status, unparsable reply, ``Error`` set)."""


class Extender(Protocol):
    """The slice of kube-scheduler's extender the simulator uses (extender.go: Filter, Prioritize)."""

    weight: int
    ignorable: bool
    has_filter: bool
    has_prioritize: bool

    def filter(
        self, pod_obj: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]]
    ) -> tuple[list[str], dict[str, str]]: ...

    def prioritize(self, pod_obj: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]]) -> dict[str, int]: ...


@dataclass
class HttpExtender:
    """An extender reached over HTTP, called exactly as kube-scheduler's HTTPExtender calls it:
    ``POST {url_prefix}/{verb}`` with ``{"Pod": ..., "Nodes": ..., "NodeNames": ...}`` (Go field names;
    ``NodeNames`` when ``node_cache_capable`` else a NodeList in ``Nodes``), any non-200 status is an error.
    """

    url_prefix: str
    weight: int = 1
    node_cache_capable: bool = True
    ignorable: bool = True
    filter_verb: str | None = "filter"
    prioritize_verb: str | None = "prioritize"
    timeout_s: float = 5.0
    calls: dict[str, int] = field(default_factory=lambda: {"filter": 0, "prioritize": 0})

    def __post_init__(self) -> None:

        self._client = httpx.Client(timeout=self.timeout_s)

    @property
    def has_filter(self) -> bool:
        return bool(self.filter_verb)

    @property
    def has_prioritize(self) -> bool:
        return bool(self.prioritize_verb)

    def _args(self, pod_obj: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        if self.node_cache_capable:
            return {"Pod": pod_obj, "Nodes": None, "NodeNames": [n["metadata"]["name"] for n in nodes]}
        return {"Pod": pod_obj, "Nodes": {"metadata": {}, "items": list(nodes)}, "NodeNames": None}

    def _post(self, verb: str, body: dict[str, Any]) -> Any:

        try:
            r = self._client.post(
                f"{self.url_prefix.rstrip('/')}/{verb}",
                content=json.dumps(body),
                headers={"Content-Type": "application/json"},
            )
        except httpx.HTTPError as exc:
            raise ExtenderError(f"{verb}: {exc}") from exc
        if r.status_code != 200:
            raise ExtenderError(f"{verb}: HTTP {r.status_code}: {r.text[:200]}")
        try:
            return r.json()
        except ValueError as exc:
            raise ExtenderError(f"{verb}: reply is not JSON") from exc

    def filter(self, pod_obj, nodes):
        self.calls["filter"] += 1
        res = _casefold_keys(self._post(self.filter_verb or "filter", self._args(pod_obj, nodes)))
        if res.get("error"):
            raise ExtenderError(f"filter: {res['error']}")
        if self.node_cache_capable:
            names = list(res.get("nodenames") or [])
        else:
            names = [n["metadata"]["name"] for n in ((res.get("nodes") or {}).get("items") or [])]
        failed = {**(res.get("failednodes") or {}), **(res.get("failedandunresolvablenodes") or {})}
        asked = {n["metadata"]["name"] for n in nodes}
        unknown = [n for n in names if n not in asked]
        if unknown:
            raise ExtenderError(f"filter: returned nodes not in the request: {unknown}")
        return names, failed

    def prioritize(self, pod_obj, nodes):
        self.calls["prioritize"] += 1
        res = self._post(self.prioritize_verb or "prioritize", self._args(pod_obj, nodes))
        if not isinstance(res, list):
            raise ExtenderError("prioritize: reply is not a list of HostPriority")
        out: dict[str, int] = {}
        for hp in res:
            hp = _casefold_keys(hp)
            out[str(hp.get("host"))] = int(hp.get("score", 0))
        return out

    def close(self) -> None:
        self._client.close()


def _casefold_keys(obj: Any) -> dict[str, Any]:
    if not isinstance(obj, Mapping):
        raise ExtenderError(f"reply is not a JSON object: {obj!r:.80}")
    return {str(k).lower(): v for k, v in obj.items()}


@dataclass
class InProcessExtender:
    """A :class:`~policy.lowlevel.PlacementPolicy` plugged in as an extender without HTTP (for fast
    benchmarks): same filter/score semantics, same ``score × weight × 10`` combination.

    A policy that raises answers as the served extender does (fail open: no node filtered, equal scores; counted
    in ``calls["failed_open"]``). ``view`` returns ``(index, intent)`` for the current simulated state: ``intent``
    a :class:`policy.intent.Intent` (each pod scored with :meth:`~policy.intent.Intent.for_service`, as the extender
    does), a bare vector, or ``None`` (defaults). ``pending``: returns ``(moves, now_s)``, the descheduler's
    make-before-break moves in progress (:class:`policy.intent.PendingMove`) and the simulated time: a new pod of a
    service with one pending is scored as the extender scores it (:func:`policy.intent.pending_move_scores`: the
    target 10, the others 0; counted in ``calls["pending_move"]``).
    """

    policy: PlacementPolicy
    view: Any
    weight: int = 1
    ignorable: bool = True
    has_filter: bool = True
    has_prioritize: bool = True
    calls: dict[str, int] = field(default_factory=lambda: {"filter": 0, "prioritize": 0})
    pending: Any = None

    def filter(self, pod_obj, nodes):
        self.calls["filter"] += 1
        index = self.view()[0]

        names = [n["metadata"]["name"] for n in nodes]
        try:
            failed = self.policy.filter(parse_pod(pod_obj), names, index)
        except Exception:  # noqa: BLE001 - as the served extender: a policy that cannot judge filters nothing
            self.calls["failed_open"] = self.calls.get("failed_open", 0) + 1
            return names, {}
        return [n for n in names if n not in failed], failed

    def prioritize(self, pod_obj, nodes):
        self.calls["prioritize"] += 1
        index, intent = self.view()
        pod = parse_pod(pod_obj)
        names = [n["metadata"]["name"] for n in nodes]
        if self.pending is not None:
            moves, now_s = self.pending()
            steered = pending_move_scores(names, moves, pod.namespace, pod.service, now_s)
            if steered is not None:
                self.calls["pending_move"] = self.calls.get("pending_move", 0) + 1
                return dict(zip(names, steered))
        if isinstance(intent, Intent):
            intent = intent.for_service(pod.service)
        try:
            s = self.policy.score(pod, names, index, intent)
        except Exception:  # noqa: BLE001 - as the served extender: fail open with neutral (equal) scores
            self.calls["failed_open"] = self.calls.get("failed_open", 0) + 1
            return dict.fromkeys(names, 0)
        s = np.clip(np.nan_to_num(np.rint(s), nan=0.0), 0, MAX_EXTENDER_PRIORITY).astype(int)
        return dict(zip(names, s.tolist()))


def num_feasible_nodes_to_find(num_all_nodes: int, percentage: int = 0) -> int:
    """schedule_one.go numFeasibleNodesToFind with the adaptive default percentage (50 - N/125, >= 5)."""
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all_nodes
    pct = percentage
    if pct == 0:
        pct = max(50 - num_all_nodes // 125, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    n = num_all_nodes * pct // 100
    return max(n, MIN_FEASIBLE_NODES_TO_FIND)


def _tolerated(pod: PodInfo, node: NodeInfo) -> bool:
    for t in node.taints:
        if t.effect not in TAINT_EFFECTS_THAT_REPEL:
            continue
        if not any(tol.tolerates(t) for tol in pod.tolerations):
            return False
    return True


@dataclass(frozen=True)
class ScheduleResult:
    """``node`` is None when no node fits (the pod stays Pending); ``reasons`` explain rejections."""

    node: str | None
    feasible: int
    reasons: Mapping[str, str] = field(default_factory=dict)
    scores: Mapping[str, int] = field(default_factory=dict)


@dataclass
class KubeSchedulerModel:
    """One kube-scheduler profile: ``plugins`` (score plugins with weights) and ``extenders``."""

    plugins: list[ScorePlugin] = field(default_factory=default_score_plugins)
    extenders: list[Extender] = field(default_factory=list)
    percentage_of_nodes_to_score: int = 0
    extender_errors: int = 0
    _next_start: int = 0

    def filter_in_tree(self, pod: PodInfo, index: ClusterIndex) -> tuple[list[str], dict[str, str]]:
        """NodeUnschedulable, NodeName, TaintToleration, NodeAffinity (nodeSelector), NodeResourcesFit."""
        feasible, reasons = [], {}
        nodes = index.snapshot.nodes
        n_all = len(nodes)
        want = num_feasible_nodes_to_find(n_all, self.percentage_of_nodes_to_score)
        start = self._next_start % max(n_all, 1)
        checked = 0
        for k in range(n_all):
            i = (start + k) % n_all
            node = nodes[i]
            checked += 1
            if node.unschedulable:
                reasons[node.name] = "node(s) were unschedulable"
                continue
            if not _tolerated(pod, node):
                reasons[node.name] = "node(s) had untolerated taint"
                continue
            if any(node.labels.get(k2) != v for k2, v in pod.node_selector.items()):
                reasons[node.name] = "node(s) didn't match Pod's node affinity/selector"
                continue
            free_cpu = index.alloc_cpu_m[i] - index.req_cpu_m[i]
            free_mem = index.alloc_mem_bytes[i] - index.req_mem_bytes[i]
            if pod.requests.cpu_m > free_cpu:
                reasons[node.name] = "Insufficient cpu"
                continue
            if pod.requests.memory_bytes > free_mem:
                reasons[node.name] = "Insufficient memory"
                continue
            if index.pod_count[i] + 1 > node.allocatable_pods:
                reasons[node.name] = "Too many pods"
                continue
            feasible.append(node.name)
            if len(feasible) >= want:
                break
        self._next_start = (start + checked) % max(n_all, 1)
        return feasible, reasons

    def schedule(
        self,
        pod: PodInfo,
        pod_obj: Mapping[str, Any],
        index: ClusterIndex,
        node_objs: Mapping[str, Mapping[str, Any]],
        rng: np.random.Generator,
    ) -> ScheduleResult:
        """One scheduling cycle for ``pod``: filter → extenders' filter → score → selectHost."""
        feasible, reasons = self.filter_in_tree(pod, index)
        for ext in self.extenders:
            if not feasible or not ext.has_filter:
                continue
            try:
                names, failed = ext.filter(pod_obj, [node_objs[n] for n in feasible])
            except ExtenderError:
                self.extender_errors += 1
                if ext.ignorable:
                    continue
                return ScheduleResult(None, 0, {**reasons, "*": "extender filter error"})
            keep = set(names)
            reasons.update({n: failed.get(n, "rejected by extender") for n in feasible if n not in keep})
            feasible = [n for n in feasible if n in keep]
        if not feasible:
            return ScheduleResult(None, 0, reasons)
        if len(feasible) == 1:
            return ScheduleResult(feasible[0], 1, reasons)
        total = np.zeros(len(feasible), dtype=np.int64)
        for pl in self.plugins:
            s = np.clip(pl.score(pod, feasible, index), 0, MAX_NODE_SCORE).astype(np.int64)
            total += s * int(pl.weight)
        for ext in self.extenders:
            if not ext.has_prioritize:
                continue
            try:
                ext_scores = ext.prioritize(pod_obj, [node_objs[n] for n in feasible])
            except ExtenderError:
                self.extender_errors += 1
                continue  # prioritize errors are always ignored by kube-scheduler
            factor = MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY
            total += np.array([ext_scores.get(n, 0) * ext.weight * factor for n in feasible], dtype=np.int64)
        best = int(total.max())
        ties = [i for i, v in enumerate(total) if v == best]
        pick = ties[int(rng.integers(0, len(ties)))] if len(ties) > 1 else ties[0]
        return ScheduleResult(feasible[pick], len(feasible), reasons, dict(zip(feasible, total.tolist())))
