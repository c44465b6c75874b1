"""The Kubernetes API client pieces shared by the extender's and the descheduler's ``kube.py`` adapters
(the only modules, with ``descheduler/leader.py``, that import the ``kubernetes`` package; DESIGN.md
section 3)."""

from __future__ import annotations

import os

from kubernetes import client as kclient
from kubernetes import config as kconfig

__all__ = ["load_api_client", "POD_FIELD_SELECTOR"]

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
