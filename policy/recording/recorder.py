"""``hrl-policy record``: capture a live cluster over a window into a recording directory
(:mod:`policy.recording.format`), one step at a time.

Each step ``k`` (``start + k·step`` to ``start + (k+1)·step``): list the cluster's objects (the
:class:`ObjectSource`, :class:`policy.recording.kube.KubeObjects` on a live cluster) and write them; wait for the
step's end plus ``lag`` (so that Prometheus has scraped the step's last samples); read the step's signals
(:class:`policy.recording.signals.Signals`) evaluated at the step's end and append the pod, service and edge rows;
count the step in the manifest. At the end (or when interrupted) the shadow logs given are copied: the records
whose time falls in the window, from the log and its rotated files.

Memory: one step's objects and rows at a time, whatever the window (bounded by the cluster's size, not the
window's length). A step whose signals cannot be read (Prometheus down) is recorded without them, with a warning;
objects that cannot be listed stop the recording (the manifest keeps the completed steps: ``--resume``).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from policy.observe import ObjectError, parse_pod
from policy.state import PodInfo
from policy.topology.common import TopologyError

from .format import Manifest, Recording, RecordingError, RecordingWriter

__all__ = [
    "ObjectSource",
    "SignalSource",
    "RecordOptions",
    "record",
    "copy_shadow_log",
    "recording_summary",
    "bound_pods",
]

log = logging.getLogger(__name__)


class ObjectSource(Protocol):
    """Lists the cluster's objects: ``(redacted objects, warnings)``."""

    def list_all(self) -> tuple[list[dict[str, Any]], list[str]]: ...


class SignalSource(Protocol):
    """Reads one step's signals at unix time ``t`` (:class:`policy.recording.signals.Signals`)."""

    pod_usage: str

    def step(self, t: float) -> Any: ...


@dataclass
class RecordOptions:
    """What to record: ``out`` (the directory), ``window_s`` / ``step_s`` (seconds, the step divides the window),
    ``namespaces`` (empty: all), ``lag_s`` (wait after each step's end before reading Prometheus), ``resume``,
    ``shadow_logs`` (component → the log file to copy: ``extender``, ``descheduler``), ``prometheus`` and
    ``cluster`` (descriptions for the manifest)."""

    out: Path
    window_s: float
    step_s: float
    namespaces: Sequence[str] = ()
    lag_s: float = 5.0
    resume: bool = False
    shadow_logs: Mapping[str, str] = field(default_factory=dict)
    prometheus: dict[str, Any] | None = None
    cluster: str = ""


def _check(o: RecordOptions) -> None:
    for name, v in (("--window", o.window_s), ("--step", o.step_s)):
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"{name}: must be a positive duration, got {v!r}")
    if o.step_s > o.window_s:
        raise ValueError(f"--step ({o.step_s:g} s) is longer than --window ({o.window_s:g} s)")
    n = o.window_s / o.step_s
    if abs(n - round(n)) > 1e-6:
        raise ValueError(f"--step ({o.step_s:g} s) must divide --window ({o.window_s:g} s) into whole steps")
    if not (math.isfinite(o.lag_s) and o.lag_s >= 0):
        raise ValueError(f"--lag: must be >= 0 s, got {o.lag_s!r}")
    for comp, path in o.shadow_logs.items():
        if comp not in ("extender", "descheduler"):
            raise ValueError(f"shadow log: unknown component {comp!r}")
        if not Path(path).exists():
            raise ValueError(f"--{comp}-log: {path}: no such file")


def _open(o: RecordOptions, now_s: float) -> RecordingWriter:
    if o.resume:
        w = RecordingWriter.resume(o.out)
        m = w.manifest
        if abs(m.step_s - o.step_s) > 1e-9 or abs(m.window_s - o.window_s) > 1e-9:
            raise RecordingError(
                f"{o.out / 'recording.json'}: --resume with another step or window (recorded: step {m.step_s:g} s, "
                f"window {m.window_s:g} s; given: {o.step_s:g} s, {o.window_s:g} s)"
            )
        return w
    m = Manifest(
        started_at_s=round(now_s, 3),
        step_s=o.step_s,
        window_s=o.window_s,
        namespaces=list(o.namespaces),
        prometheus=o.prometheus,
        cluster=o.cluster,
    )
    return RecordingWriter.create(o.out, m)


def bound_pods(items: Sequence[Mapping[str, Any]]) -> list[PodInfo]:
    """The pods among the API objects ``items`` that are bound, not terminating and not finished (the ones that
    occupy a node); objects that are not readable Pods are skipped."""
    out = []
    for o in items:
        if o.get("kind") != "Pod":
            continue
        try:
            p = parse_pod(o)
        except ObjectError:
            continue
        if p.node_name is None or p.terminating or p.phase in ("Succeeded", "Failed"):
            continue
        out.append(p)
    return out


def _pod_rows(items: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """namespace, pod, service, node of the bound pods among ``items`` (every namespace: the other tenants' use
    loads the nodes too)."""
    return [
        {"namespace": p.namespace, "pod": p.name, "service": p.service, "node": p.node_name} for p in bound_pods(items)
    ]


def _rows(t: float, pods: list[dict[str, Any]], sig: Any) -> tuple[list[dict], list[dict], list[dict]]:
    """The step's pod, service and edge rows from the pods running at its start and its signals."""
    per_service: dict[str, int] = {}
    for p in pods:
        per_service[p["service"]] = per_service.get(p["service"], 0) + 1
    pod_rows = []
    for p in pods:
        cpu, mem = sig.pods.get((p["namespace"], p["pod"]), (None, None)) if sig is not None else (None, None)
        served = (sig.services.get(p["service"]) or {}).get("served_rps") if sig is not None else None
        rps = None if served is None else served / per_service[p["service"]]
        pod_rows.append({"time_s": t, **p, "cpu_m": cpu, "memory_mi": mem, "rps": rps})
    if sig is None:
        return pod_rows, [], []
    svc_rows = [{"time_s": t, "service": s, **v} for s, v in sorted(sig.services.items())]
    edge_rows = [
        {
            "time_s": t,
            "caller": e.caller,
            "callee": e.callee,
            "rps": e.rps,
            "calls_per_request": e.calls_per_request,
            "latency_p50_ms": e.latency_p50_ms,
            "latency_p95_ms": e.latency_p95_ms,
            "latency_p99_ms": e.latency_p99_ms,
            "latency_mean_ms": e.latency_mean_ms,
            "error_rate": e.error_rate,
        }
        for e in sig.graph.edges
    ]
    return pod_rows, svc_rows, edge_rows


def _record_time(d: Mapping[str, Any]) -> float | None:
    for k in ("decided_at_s", "started_at_s", "time_s"):
        v = d.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            return float(v)
    return None


def copy_shadow_log(src: str | Path, dst: Path, start_s: float, end_s: float) -> int:
    """Copy the JSON records of ``src`` and its rotated files (``src.N``, oldest first) whose time (``decided_at_s``,
    ``started_at_s`` or ``time_s``) is in ``[start_s, end_s]`` into ``dst`` (rewritten), line by line (bounded
    memory). Returns the number copied."""
    src = Path(src)
    files = sorted(src.parent.glob(src.name + ".*"), key=lambda p: -int(p.suffix[1:]) if p.suffix[1:].isdigit() else 0)
    files = [f for f in files if f.suffix[1:].isdigit()] + [src]
    n = 0
    tmp = dst.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as out:
        for f in files:
            if not f.exists():
                continue
            with open(f, encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    try:
                        d = json.loads(line)
                    except (ValueError, RecursionError):  # not JSON, or nested past the parser's stack: skipped
                        continue
                    t = _record_time(d) if isinstance(d, dict) else None
                    if t is not None and start_s <= t <= end_s:
                        out.write(json.dumps(d, separators=(",", ":")) + "\n")
                        n += 1
    tmp.replace(dst)
    return n


def record(
    options: RecordOptions,
    objects: ObjectSource,
    signals: SignalSource | None,
    *,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    progress: Callable[[int, int], None] | None = None,
) -> Manifest:
    """Record (module docstring) and return the final manifest. ``progress(done, total)`` after each step.
    Raises ``ValueError`` for bad options, :class:`RecordingError` for a directory that cannot be created or
    resumed; an exception from ``objects`` propagates (the completed steps stay in the manifest)."""
    _check(options)
    w = _open(options, clock())
    m = w.manifest
    seen: set[str] = set(m.warnings)

    def warn(text: str) -> None:
        if text not in seen:
            seen.add(text)
            m.warnings.append(text)
            log.warning("%s", text)

    try:
        for k in range(m.steps, m.total_steps):
            start = m.step_start_s(k)
            now = clock()
            if now < start:
                sleep(start - now)
            late = clock() > start + max(1.0, 0.1 * m.step_s)
            items, warnings = objects.list_all()
            for text in warnings:
                warn(text)
            w.write_objects(k, items, round(clock(), 3))
            pods = _pod_rows(items)
            del items
            end = m.step_end_s(k)
            wait = end + options.lag_s - clock()
            if wait > 0:
                sleep(wait)
            sig = None
            if signals is not None:
                try:
                    sig = signals.step(end)
                except (TopologyError, OSError) as exc:
                    warn(f"step {k}: Prometheus not read ({' '.join(str(exc).split())[:200]}); its metrics are empty")
                if sig is not None:
                    for text in sig.warnings:
                        warn(text)
                    m.sources["pod_usage"] = signals.pod_usage
                    if signals.pod_usage == "none":
                        warn("no cAdvisor series (container_cpu_usage_seconds_total) in Prometheus: pods have no use")
            pod_rows, svc_rows, edge_rows = _rows(end, pods, sig)
            w.append_rows("pods", pod_rows)
            w.append_rows("services", svc_rows)
            w.append_rows("edges", edge_rows)
            w.step_done(late=late)
            if progress is not None:
                progress(m.steps, m.total_steps)
    finally:
        end_s = m.step_end_s(m.steps - 1) if m.steps else m.started_at_s
        for comp, path in options.shadow_logs.items():
            n = copy_shadow_log(path, w.root / "shadow" / f"{comp}.jsonl", m.started_at_s, end_s + m.step_s)
            m.shadow[comp] = f"shadow/{comp}.jsonl ({n} records from {path})"
        w.save()
    return m


def recording_summary(root: str | Path) -> dict[str, Any]:
    """The manifest of the recording at ``root`` and its row counts (for ``hrl-policy record --json``)."""
    r = Recording(root)
    counts = {name: sum(1 for _ in r.rows(name)) for name in ("pods", "services", "edges")}
    return {**r.manifest.to_json(), "rows": counts, "path": str(r.root)}
