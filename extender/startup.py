"""Everything ``hrl-extender`` checks and loads before it serves, in one place: :func:`prepare` (the command runs
it, and so does ``hrl-policy config check`` through :func:`startup_problems`, without serving or connecting).

Beyond the configuration's schema (:func:`extender.config.load_extender_config`), a start loads: the TLS pair
(``listen.tls``), the placement policy and its bundle (``policy``), the call-graph sources (``topology.sources``:
files read, live URIs parsed; with ``connect`` the live sources are fetched once too), the Kubernetes client
configuration (``kubernetes.kubeconfig``), and the static snapshot (``snapshotFile`` or ``--snapshot``, exclusive
with ``kubernetes.enabled``). Every problem is collected, one line each, ``dotted.path: problem``, and raised
together as :class:`StartupError`.

Snapshot mode: the call graph is the sources' graph, or without sources (``sources: []``) the one the pods'
``hrl-scheduler.io/depends-on`` annotations declare (:func:`extender.store.graph_with_annotations`), as
``topology.sources`` documents.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from policy.lowlevel import PlacementPolicy
from policy.observe import ObjectError
from policy.state import ServiceGraph

from .config import ExtenderConfiguration, build_policy, load_topology, tls_context, topology_refresher
from .store import SnapshotStore, graph_with_annotations

__all__ = ["Startup", "StartupError", "prepare", "startup_problems"]


class StartupError(ValueError):
    """What a start would refuse: ``problems``, one line each (``dotted.path: problem``)."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


@dataclass
class Startup:
    """What :func:`prepare` loaded: ``ssl_context`` (``None``: plain HTTP), ``policy``, ``refresher`` (a
    :class:`policy.topology.live.TopologyRefresher` for live sources, else ``None``), ``graph`` (the sources'
    graph, ``None`` without sources), ``warnings`` (the sources', one line each), ``api`` (the Kubernetes client
    with ``kubernetes.enabled``), ``snapshot_path`` (the static snapshot loaded into the store, or ``None``)."""

    ssl_context: Any = None
    policy: PlacementPolicy | None = None
    refresher: Any = None
    graph: ServiceGraph | None = None
    warnings: list[str] = field(default_factory=list)
    api: Any = None
    snapshot_path: str | None = None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def prepare(
    config: ExtenderConfiguration, store: SnapshotStore, *, snapshot: str | None = None, connect: bool = True
) -> Startup:
    """Load what ``config`` names (module docstring) and put a static snapshot into ``store``. ``snapshot``: the
    ``--snapshot`` path (overrides ``snapshotFile``). ``connect``: fetch live topology sources once and build the
    Kubernetes client even from the in-cluster account (``False``: offline checks only, as ``config check``).
    Raises :class:`StartupError` with every problem."""
    problems: list[str] = []
    out = Startup()
    try:
        out.ssl_context = tls_context(config)
    except ValueError as exc:
        problems.append(_one_line(exc))
    try:
        out.policy = build_policy(config)
    except ValueError as exc:  # a learned policy's bundle that cannot be loaded (BundleError)
        problems.append(f"policy.bundle: {_one_line(exc)}")
    try:  # live sources (prometheus+...://) -> a background refresher; files only -> read once
        out.refresher, out.warnings = topology_refresher(config, refresh=connect)
        if out.refresher is not None:
            out.graph = out.refresher.graph
        else:
            out.graph, more = load_topology(config)
            out.warnings += more
    except ImportError as exc:
        problems.append(f"topology.sources: the call-graph loader is unavailable ({exc})")
    except Exception as exc:  # noqa: BLE001 - the loaders' own one-line errors (unreadable file, bad content, URI)
        problems.append(f"topology.sources: {_one_line(exc)}")
    kube = config.kubernetes
    path = snapshot or config.snapshot_file
    field_name = "--snapshot" if snapshot else "snapshotFile"
    if kube.enabled and snapshot:
        problems.append("kubernetes.enabled: exclusive with --snapshot (a file or the live cluster)")
    elif kube.enabled and (connect or kube.kubeconfig):
        try:
            from .kube import load_api_client

            out.api = load_api_client(kube.kubeconfig)
        except Exception as exc:  # noqa: BLE001 - ConfigException, OSError: one line
            problems.append(f"kubernetes.kubeconfig: cannot load a client configuration: {_one_line(exc)}")
    elif path and not kube.enabled:
        try:
            view = store.load_file(path)
        except ObjectError as exc:
            problems.append(f"{field_name}: {_one_line(exc)}")
        else:
            assert view.snapshot is not None
            out.snapshot_path = str(path)
            if out.graph is not None:
                store.set_graph(out.graph)
            else:  # no sources: the graph comes from the snapshot, its pods' depends-on annotations
                store.set_graph(graph_with_annotations(None, view.snapshot.pods))
    if problems:
        if out.refresher is not None:
            out.refresher.stop()
        raise StartupError(problems)
    return out


def startup_problems(config: ExtenderConfiguration) -> list[str]:
    """What ``hrl-extender`` would refuse at start with ``config`` beyond its schema (``dotted.path: problem``
    lines; ``[]`` when it would start), checked offline (:func:`prepare` with ``connect=False``): registered as
    the start-up check of ``ExtenderConfiguration`` for ``hrl-policy config check``."""
    try:
        prepare(config, SnapshotStore(), connect=False)
    except StartupError as exc:
        return exc.problems
    return []
