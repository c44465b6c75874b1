"""The recorder's Kubernetes adapter (the only module of :mod:`policy.recording` that imports ``kubernetes``): one
paginated LIST per kind, raw JSON, redacted before anything else sees it.

Kinds read (and so the RBAC a recording needs, verbs ``list``): ``nodes``, ``pods``, ``apps`` ``deployments``,
``statefulsets``, ``daemonsets``, ``replicasets``, ``autoscaling`` ``horizontalpodautoscalers`` (v2),
``policy`` ``poddisruptionbudgets``. Never Secrets, ConfigMaps or anything else: the recorder has no code path
that lists them, and its least-privilege role (docs/shadow-mode.md) does not allow them. A kind the caller may not
list (403) or the server does not serve (404) is left out with a warning; other errors propagate.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

from kubernetes import client as kclient
from kubernetes.client.rest import ApiException

from policy.kube import load_api_client

from .format import redact

__all__ = ["KINDS", "KubeObjects", "load_api_client"]

log = logging.getLogger(__name__)

#: ``(kind, list all namespaces, list one namespace)`` of every kind recorded, as client method names.
KINDS: tuple[tuple[str, str, str, str], ...] = (
    ("Node", "CoreV1Api", "list_node", ""),
    ("Pod", "CoreV1Api", "list_pod_for_all_namespaces", "list_namespaced_pod"),
    ("Deployment", "AppsV1Api", "list_deployment_for_all_namespaces", "list_namespaced_deployment"),
    ("StatefulSet", "AppsV1Api", "list_stateful_set_for_all_namespaces", "list_namespaced_stateful_set"),
    ("DaemonSet", "AppsV1Api", "list_daemon_set_for_all_namespaces", "list_namespaced_daemon_set"),
    ("ReplicaSet", "AppsV1Api", "list_replica_set_for_all_namespaces", "list_namespaced_replica_set"),
    (
        "HorizontalPodAutoscaler",
        "AutoscalingV2Api",
        "list_horizontal_pod_autoscaler_for_all_namespaces",
        "list_namespaced_horizontal_pod_autoscaler",
    ),
    (
        "PodDisruptionBudget",
        "PolicyV1Api",
        "list_pod_disruption_budget_for_all_namespaces",
        "list_namespaced_pod_disruption_budget",
    ),
)
_API_VERSION = {
    "Node": "v1",
    "Pod": "v1",
    "Deployment": "apps/v1",
    "StatefulSet": "apps/v1",
    "DaemonSet": "apps/v1",
    "ReplicaSet": "apps/v1",
    "HorizontalPodAutoscaler": "autoscaling/v2",
    "PodDisruptionBudget": "policy/v1",
}


class KubeObjects:
    """Lists the recorded kinds (:data:`KINDS`) through ``api_client``, ``page`` objects per request: Nodes and Pods
    cluster-wide (every pod occupies its node: the replay needs the other tenants too), the other kinds in
    ``namespaces`` (the app's; empty: all). :meth:`list_all` returns the redacted objects and the warnings."""

    def __init__(self, api_client: kclient.ApiClient, namespaces: Sequence[str] = (), page: int = 500, timeout_s=30.0):
        self.api_client = api_client
        self.namespaces = tuple(namespaces)
        self.page = page
        self.timeout_s = timeout_s
        self._apis: dict[str, Any] = {}
        self.skipped: dict[str, str] = {}

    @property
    def server(self) -> str:
        return str(self.api_client.configuration.host)

    def _api(self, name: str) -> Any:
        if name not in self._apis:
            self._apis[name] = getattr(kclient, name)(self.api_client)
        return self._apis[name]

    def _pages(self, fn: Callable[..., Any], *args: Any) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        token = None
        while True:
            kw: dict[str, Any] = {"limit": self.page, "_preload_content": False, "_request_timeout": self.timeout_s}
            if token:
                kw["_continue"] = token
            resp = fn(*args, **kw)
            doc = json.loads(resp.data)
            out.extend(doc.get("items") or [])
            token = (doc.get("metadata") or {}).get("continue")
            if not token:
                return out

    def list_all(self) -> tuple[list[dict[str, Any]], list[str]]:
        """Every recorded object (``kind`` and ``apiVersion`` set on each item, :func:`policy.recording.redact`
        applied) and one warning per kind that could not be listed (403 / 404), reported once per recorder."""
        items: list[dict[str, Any]] = []
        warnings: list[str] = []
        for kind, api, all_ns, one_ns in KINDS:
            if kind in self.skipped:
                continue
            try:
                if not one_ns or not self.namespaces or kind == "Pod":
                    objs = self._pages(getattr(self._api(api), all_ns))
                else:
                    objs = [o for ns in self.namespaces for o in self._pages(getattr(self._api(api), one_ns), ns)]
            except ApiException as exc:
                if exc.status in (403, 404):
                    why = "forbidden (RBAC)" if exc.status == 403 else "not served by this API server"
                    self.skipped[kind] = why
                    warnings.append(f"{kind}: not recorded: {why}")
                    continue
                raise
            for o in objs:
                o.setdefault("kind", kind)
                o.setdefault("apiVersion", _API_VERSION[kind])
                items.append(redact(o))
        return items, warnings
