"""Scalers: the descheduler changes a Deployment's replica count only through its scale subresource.

A :class:`Scaler` sets one Deployment's replicas and says what happened as a :class:`ScaleResult`:

- ``scaled``: ``deployments/scale`` accepted the new ``spec.replicas``;
- ``unchanged``: the Deployment already has that many replicas (nothing sent);
- ``refused_hpa``: a HorizontalPodAutoscaler (autoscaling/v2) targets the same Deployment: we refuse to
  fight it and leave that Deployment alone (nothing sent; the cycle report and
  ``hrl_descheduler_scale_total{outcome="refused_hpa"}`` say so);
- ``not_found``: no such Deployment (404);
- ``error``: anything else (an API error, a conflicting concurrent write, no answer); nothing is retried;
- ``dry_run``: it would have been scaled; nothing changed.

The loop (:func:`descheduler.loop.run_once`) adds two outcomes of its own, decided before any scaler call:
``blocked`` (the workload is in an excluded namespace, or is not a Deployment) and ``skipped`` (the cycle could
not re-read the cluster). It also bounds every target first (:func:`bound_target`: ``minReplicas`` /
``maxReplicas`` and the per-cycle step ``maxStepPerCycle`` of the ``scaling`` configuration).

Implementations: :class:`ApiScaler` over a small :class:`ScaleApi` (the real one is
``descheduler.kube.KubeScaler``: autoscaling/v2 HPAs + ``deployments/scale``); :class:`DryRunScaler`;
the simulator's (``policy.sim.subresources.SimScaler``) is on the simulation side. A scaler that can do a
read-only pass (check for an HPA, read the current scale, write nothing) offers it as ``dry_run_twin()``;
:func:`dry_run_scaler` picks it, else a :class:`DryRunScaler`. Scaling fails closed: :func:`safe_scale` turns an
exception or a malformed answer into ``error``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, get_args, runtime_checkable

__all__ = [
    "ScaleOutcome",
    "SCALER_OUTCOMES",
    "SCALE_OUTCOMES",
    "ScaleResult",
    "Scaler",
    "ScaleApi",
    "ScaleApiError",
    "ApiScaler",
    "DryRunScaler",
    "bound_target",
    "hpa_targeting",
    "dry_run_scaler",
    "safe_scale",
    "GatedScaler",
]

ScaleOutcome = Literal["scaled", "unchanged", "refused_hpa", "not_found", "error", "dry_run", "blocked", "skipped"]
#: What a :class:`Scaler` may answer.
SCALER_OUTCOMES: tuple[str, ...] = ("scaled", "unchanged", "refused_hpa", "not_found", "error", "dry_run")
#: Every scaling outcome of a cycle: the scaler's six, plus the loop's ``blocked`` and ``skipped`` (also the
#: values of the ``outcome`` label of ``hrl_descheduler_scale_total``).
SCALE_OUTCOMES: tuple[str, ...] = get_args(ScaleOutcome)


@dataclass(frozen=True, slots=True)
class ScaleResult:
    """What became of one replica target: ``workload`` (``namespace/name``), ``outcome`` (one of
    :data:`SCALE_OUTCOMES`), ``current`` (replicas before, when known), ``target`` (the replicas asked of the
    scaler, after the bounds; ``None`` when none was computed), ``planned`` (the planner's raw target) and a
    one-line ``message``."""

    workload: str
    outcome: ScaleOutcome
    current: int | None = None
    target: int | None = None
    planned: int | None = None
    message: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "outcome": self.outcome,
            "current_replicas": self.current,
            "target_replicas": self.target,
            "planned_replicas": self.planned,
            "message": self.message,
        }


@runtime_checkable
class Scaler(Protocol):
    """Set ``workload``'s (``namespace/name`` of a Deployment) ``spec.replicas`` to ``replicas`` (>= 0)."""

    def scale(self, workload: str, replicas: int) -> ScaleResult: ...


def split_key(workload: str) -> tuple[str, str]:
    """``namespace/name`` → ``(namespace, name)``. Raises ValueError naming the value otherwise."""
    ns, sep, name = workload.partition("/")
    if not sep or not ns or not name or "/" in name:
        raise ValueError(f"workload: expected namespace/name, got {workload!r}")
    return ns, name


def bound_target(current: int, planned: int, min_replicas: int, max_replicas: int, max_step: int | None) -> int:
    """The replicas to ask for: ``planned`` clipped to ``[min_replicas, max_replicas]``, then to at most
    ``max_step`` away from ``current`` (``None``: no step cap). A current count outside the range moves
    towards it by at most ``max_step`` too."""
    want = min(max(int(planned), int(min_replicas)), int(max_replicas))
    if max_step is not None:
        want = min(max(want, current - int(max_step)), current + int(max_step))
    return int(want)


def hpa_targeting(hpas: Iterable[Mapping[str, Any]], name: str) -> str | None:
    """The name of the first HorizontalPodAutoscaler (any API version's JSON) among ``hpas`` whose
    ``spec.scaleTargetRef`` is the Deployment ``name`` (kind ``Deployment``, apiVersion in group ``apps`` or
    ``extensions``, or none), else ``None``. Being deleted does not matter: it still owns the Deployment
    until it is gone."""
    for h in sorted(hpas, key=lambda h: str((h.get("metadata") or {}).get("name", ""))):
        ref = (h.get("spec") or {}).get("scaleTargetRef") or {}
        api_version = str(ref.get("apiVersion") or "")
        group = api_version.split("/")[0] if "/" in api_version else ""
        if ref.get("kind") == "Deployment" and ref.get("name") == name and group in ("", "apps", "extensions"):
            return str((h.get("metadata") or {}).get("name", "?"))
    return None


class ScaleApiError(Exception):
    """A :class:`ScaleApi` call failed: ``status`` is the HTTP status (``None``: no answer) and ``message`` one
    line."""

    def __init__(self, status: int | None, message: str):
        super().__init__(f"{status}: {message}" if status is not None else message)
        self.status = status
        self.message = message


class ScaleApi(Protocol):
    """The slice of the Kubernetes API a scaler uses (raw camelCase JSON). Each call raises
    :class:`ScaleApiError` on failure.

    - ``list_hpas(namespace)``: the HorizontalPodAutoscaler objects of the namespace (autoscaling/v2 list);
    - ``read_scale(namespace, name)``: the Deployment's ``Scale`` (autoscaling/v1 kind served by
      ``deployments/scale``: ``metadata.resourceVersion``, ``spec.replicas``, ``status.replicas``);
    - ``replace_scale(namespace, name, body)``: PUT ``deployments/scale`` with ``body`` (a ``Scale`` carrying
      the ``resourceVersion`` read: the API server answers 409 when the scale changed in between).
    """

    def list_hpas(self, namespace: str) -> list[dict[str, Any]]: ...

    def read_scale(self, namespace: str, name: str) -> dict[str, Any]: ...

    def replace_scale(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]: ...


class ApiScaler:
    """A :class:`Scaler` over a :class:`ScaleApi` (see the module docstring); ``dry_run=True`` reads (HPAs,
    the current scale) and writes nothing. ``calls``: ``(workload, outcome)`` of every call, in order.

    For each call: list the namespace's HPAs (failure → ``error``: without knowing, we do not touch it); an HPA
    targeting the Deployment → ``refused_hpa``; read the scale (404 → ``not_found``); ``expect`` given and
    ``spec.replicas`` not that count → ``error`` (someone changed it since it was observed; nothing written: a
    relative change such as a make-before-break surge must not be applied to another count); equal →
    ``unchanged``; dry run → ``dry_run``; else replace ``spec.replicas`` with the ``resourceVersion`` read (409 →
    ``error``, not retried this cycle; 404 → ``not_found``). Sources: k8s.io/api autoscaling/v1 ``Scale``; the HPA
    controller owns ``spec.replicas`` of its target (pkg/controller/podautoscaler/horizontal.go), so two writers
    would fight.
    """

    def __init__(self, api: ScaleApi, *, dry_run: bool = False):
        self.api = api
        self.dry_run = dry_run
        self.calls: list[tuple[str, str]] = []

    def dry_run_twin(self) -> ApiScaler:
        """The same scaler, reading only."""
        twin = ApiScaler(self.api, dry_run=True)
        twin.calls = self.calls
        return twin

    def scale(self, workload: str, replicas: int, *, expect: int | None = None) -> ScaleResult:
        res = self._scale(workload, int(replicas), expect)
        self.calls.append((workload, res.outcome))
        return res

    def _scale(self, workload: str, replicas: int, expect: int | None = None) -> ScaleResult:
        ns, name = split_key(workload)
        try:
            owner = hpa_targeting(self.api.list_hpas(ns), name)
        except ScaleApiError as exc:
            return ScaleResult(
                workload,
                "error",
                None,
                replicas,
                message=f"cannot check for a HorizontalPodAutoscaler (not scaled): {exc}",
            )
        if owner is not None:
            return ScaleResult(
                workload,
                "refused_hpa",
                None,
                replicas,
                message=f"HorizontalPodAutoscaler {ns}/{owner} owns this Deployment; left alone",
            )
        try:
            sc = self.api.read_scale(ns, name)
        except ScaleApiError as exc:
            if exc.status == 404:
                return ScaleResult(workload, "not_found", None, replicas, message=f"no Deployment: {exc.message}")
            return ScaleResult(workload, "error", None, replicas, message=f"cannot read deployments/scale: {exc}")
        try:
            current = int((sc.get("spec") or {}).get("replicas", 0) or 0)
        except (TypeError, ValueError):
            return ScaleResult(workload, "error", None, replicas, message="deployments/scale has no spec.replicas")
        if expect is not None and current != int(expect):
            return ScaleResult(
                workload,
                "error",
                current,
                replicas,
                message=f"spec.replicas is {current}, not the {expect} observed: changed meanwhile, not scaled",
            )
        if current == replicas:
            return ScaleResult(workload, "unchanged", current, replicas, message=f"already {current} replicas")
        if self.dry_run:
            return ScaleResult(
                workload, "dry_run", current, replicas, message=f"dry run: would scale {current} -> {replicas}"
            )
        meta = sc.get("metadata") or {}
        body: dict[str, Any] = {
            "apiVersion": "autoscaling/v1",
            "kind": "Scale",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": meta.get("resourceVersion")},
            "spec": {"replicas": replicas},
        }
        if not body["metadata"]["resourceVersion"]:
            del body["metadata"]["resourceVersion"]
        try:
            self.api.replace_scale(ns, name, body)
        except ScaleApiError as exc:
            if exc.status == 404:
                return ScaleResult(workload, "not_found", current, replicas, message=f"gone: {exc.message}")
            if exc.status == 409:
                return ScaleResult(
                    workload,
                    "error",
                    current,
                    replicas,
                    message=f"the scale changed since it was read (409); not retried: {exc.message}",
                )
            return ScaleResult(workload, "error", current, replicas, message=f"deployments/scale update failed: {exc}")
        return ScaleResult(
            workload, "scaled", current, replicas, message=f"scaled {current} -> {replicas} through deployments/scale"
        )


@dataclass
class DryRunScaler:
    """Changes nothing and reads nothing: answers ``dry_run`` and remembers ``(workload, replicas)``."""

    calls: list[tuple[str, int]] = field(default_factory=list)
    dry_run: bool = True

    def scale(self, workload: str, replicas: int) -> ScaleResult:
        self.calls.append((workload, int(replicas)))
        return ScaleResult(workload, "dry_run", None, int(replicas), message=f"dry run: would scale to {replicas}")


def dry_run_scaler(scaler: Scaler) -> Scaler:
    """``scaler`` itself when it is already a dry run, its ``dry_run_twin()`` when it has one, else a
    :class:`DryRunScaler`."""
    if getattr(scaler, "dry_run", False) is True:
        return scaler
    twin = getattr(scaler, "dry_run_twin", None)
    return twin() if callable(twin) else DryRunScaler()


def safe_scale(
    scaler: Scaler, workload: str, replicas: int, *, current: int | None = None, planned: int | None = None
) -> ScaleResult:
    """Call ``scaler.scale`` and make the answer trustworthy: an exception, a result that is not a
    :class:`ScaleResult`, about another workload or with an unknown outcome becomes ``error``. ``current`` /
    ``planned`` fill the result's fields when the scaler left them empty."""
    try:
        res = scaler.scale(workload, replicas)
    except Exception as exc:  # noqa: BLE001 - fail closed on anything the scaler throws
        return ScaleResult(
            workload,
            "error",
            current,
            replicas,
            planned,
            f"scaler raised {type(exc).__name__}: {' '.join(str(exc).split())[:300]}",
        )
    if not isinstance(res, ScaleResult):
        return ScaleResult(
            workload, "error", current, replicas, planned, f"scaler returned {type(res).__name__}, not a ScaleResult"
        )
    if res.outcome not in SCALER_OUTCOMES:
        return ScaleResult(
            workload, "error", current, replicas, planned, f"scaler returned unknown outcome {res.outcome!r}"
        )
    if res.workload != workload:
        return ScaleResult(
            workload, "error", current, replicas, planned, f"scaler answered about {res.workload!r}, not {workload!r}"
        )
    return ScaleResult(
        workload,
        res.outcome,
        res.current if res.current is not None else current,
        res.target if res.target is not None else replicas,
        planned,
        res.message,
    )


class GatedScaler:
    """A :class:`Scaler` that scales only while ``allowed()`` is true (e.g. ``elector.is_leader``); otherwise
    it answers ``error`` with ``why`` and calls nothing (fail closed, as
    :class:`descheduler.leader.LeaderGatedEvictor` does for evictions)."""

    def __init__(self, inner: Scaler, allowed: Any, why: str = "not the leader any more"):
        self.inner = inner
        self.allowed = allowed
        self.why = why
        self.dry_run = bool(getattr(inner, "dry_run", False))

    def dry_run_twin(self) -> Scaler:
        return GatedScaler(dry_run_scaler(self.inner), self.allowed, self.why)

    def scale(self, workload: str, replicas: int) -> ScaleResult:
        if not self.allowed():
            return ScaleResult(workload, "error", None, int(replicas), message=f"not scaled: {self.why}")
        return self.inner.scale(workload, replicas)
