"""The recording directory: what ``hrl-policy record`` writes and ``hrl-policy whatif`` reads (format version
:data:`FORMAT_VERSION`; docs/shadow-mode.md, "The recording").

Layout::

    RECORDING/
      recording.json            the manifest (:class:`Manifest`): kind Recording, formatVersion, when, the step and
                                window, the sources, the steps completed, status (recording | complete), warnings
      objects/000000.json.gz    the cluster's API objects at the start of each step (gzip JSON, a Kubernetes
      objects/000001.json.gz    List with ``metadata.timeS``): Nodes and Pods of the whole cluster; Deployments,
      ...                       StatefulSets, DaemonSets, ReplicaSets, HorizontalPodAutoscalers, PodDisruptionBudgets
                                of the recorded namespaces (all when none is named); redacted (below)
      metrics/pods.csv          per step and pod (every namespace): time_s,namespace,pod,service,node,cpu_m,
                                memory_mi,rps
      metrics/services.csv      per step and service: time_s,service,served_rps,entry_rps,latency_p50_ms,
                                latency_p95_ms,latency_p99_ms,success_pct
      metrics/edges.csv         per step and call edge: time_s,caller,callee,rps,calls_per_request,latency_p50_ms,
                                latency_p95_ms,latency_p99_ms,latency_mean_ms,error_rate
      shadow/extender.jsonl     the extender's decision records (its shadow log) of the window, when given
      shadow/descheduler.jsonl  the descheduler's shadow records (one per dry-run cycle) of the window, when given

Step ``k`` covers ``(start + k·step, start + (k+1)·step]``: its objects are read at the step's start, its metrics
at its end (``time_s``; rates over the step). Units: millicores, MiB, requests/s, ms, % (success), a fraction
(error rate). An empty cell is a value that was not measured. ``pods.csv``'s ``rps`` is the service's served rate
divided evenly over its pods (meshes report rates per workload); ``entry_rps`` is what a service served from
outside the call graph (users, an ingress gateway). The CSV files are the *simple layout* ``hrl-policy app build
--metrics`` reads (:mod:`policy.sim.measurements`; extra columns are ignored).

**Redaction** (:func:`redact`): nothing is read from Secrets or ConfigMaps (they are never listed); in every pod
and pod template: ``env[].value`` is replaced by ``"<redacted>"`` unless the variable's name says it is an address
(:data:`ADDRESS_ENV`: the call graph's ``*_ADDR`` variables and their kin), ``command`` / ``args`` are dropped, as
are ``metadata.managedFields`` and the ``kubectl.kubernetes.io/last-applied-configuration`` annotation (a copy of
the whole object, environment included).

**Resuming**: the manifest is rewritten (atomically) after every step; ``hrl-policy record --resume`` continues
at the first step not completed. Metrics of steps missed while the recorder was down are read from Prometheus's
history at their own times; their objects are read when the recorder resumes (``lateObjects`` lists those steps).

**Reading** (:class:`Recording`): a recording is a file handed over (``hrl-policy whatif`` / ``explain`` read one
made elsewhere), so every file of it is read through the hardened reader (:mod:`policy.documents`): gzip data that
is corrupt (bad deflate data, a CRC mismatch) or truncated, text that is not UTF-8, JSON with a duplicate key or
nested too deep, malformed CSV and a file over its bound (:data:`MAX_MANIFEST_BYTES`, :data:`MAX_STEP_BYTES`) are a
:class:`RecordingError`: one line naming the file, never a traceback.
"""

from __future__ import annotations

import csv
import gzip
import json
import math
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from policy.documents import MAX_TEXT_BYTES, DocumentError, FileError, load_json, open_text, read_text
from policy.state import ServiceEdge, ServiceGraph

__all__ = [
    "FORMAT_VERSION",
    "KIND",
    "POD_COLUMNS",
    "SERVICE_COLUMNS",
    "EDGE_COLUMNS",
    "ADDRESS_ENV",
    "RecordingError",
    "Manifest",
    "redact",
    "RecordingWriter",
    "Recording",
    "MAX_MANIFEST_BYTES",
    "MAX_STEP_BYTES",
]

FORMAT_VERSION = 1
KIND = "Recording"
API_VERSION = "hrl-scheduler.io/v1alpha1"

POD_COLUMNS = ("time_s", "namespace", "pod", "service", "node", "cpu_m", "memory_mi", "rps")
SERVICE_COLUMNS = (
    "time_s",
    "service",
    "served_rps",
    "entry_rps",
    "latency_p50_ms",
    "latency_p95_ms",
    "latency_p99_ms",
    "success_pct",
)
EDGE_COLUMNS = (
    "time_s",
    "caller",
    "callee",
    "rps",
    "calls_per_request",
    "latency_p50_ms",
    "latency_p95_ms",
    "latency_p99_ms",
    "latency_mean_ms",
    "error_rate",
)
_FILES = {"pods": POD_COLUMNS, "services": SERVICE_COLUMNS, "edges": EDGE_COLUMNS}

#: The most text read from ``recording.json`` (bytes): the manifest is a few kB (its warnings grow with the steps).
MAX_MANIFEST_BYTES = 16 << 20
#: The most JSON one step's ``objects/*.json.gz`` decompresses to (bytes): the project's bound for one file (a
#: 5,000-node cluster's Nodes, Pods and workloads are a few hundred MB; a gzip bomb stops here).
MAX_STEP_BYTES = MAX_TEXT_BYTES

#: Environment variables whose values are kept: addresses of other services (the call graph reads them).
ADDRESS_ENV = re.compile(r"(_ADDR|_ADDRESS|_HOST|_PORT|_SERVICE_HOST|_SERVICE_PORT)$")
REDACTED = "<redacted>"
_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


class RecordingError(ValueError):
    """A recording directory that cannot be read or continued: one line naming the file and the problem."""


@dataclass
class Manifest:
    """``recording.json``. Times in unix seconds; ``namespaces``: the namespaces recorded (empty: all);
    ``prometheus``: ``{url, flavor, namespace}`` or ``None``; ``steps``: completed steps; ``status``:
    ``recording`` or ``complete``; ``late_objects``: steps whose objects were read after the step started (a
    resumed recording); ``sources``: what each signal came from (``pod_usage``: ``prometheus-cadvisor`` / ``none``,
    ...); ``shadow``: the shadow-log files copied; ``warnings``: one line each."""

    started_at_s: float
    step_s: float
    window_s: float
    namespaces: list[str] = field(default_factory=list)
    prometheus: dict[str, Any] | None = None
    cluster: str = ""
    steps: int = 0
    status: str = "recording"
    late_objects: list[int] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)
    shadow: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    format_version: int = FORMAT_VERSION

    @property
    def total_steps(self) -> int:
        return max(1, int(round(self.window_s / self.step_s)))

    def step_start_s(self, k: int) -> float:
        return self.started_at_s + k * self.step_s

    def step_end_s(self, k: int) -> float:
        return self.started_at_s + (k + 1) * self.step_s

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "formatVersion": d.pop("format_version"),
            **{_camel(k): v for k, v in d.items()},
        }

    @staticmethod
    def from_json(doc: Any, where: str) -> Manifest:
        """Raises :class:`RecordingError` naming ``where`` and the field for a manifest that is not one."""
        if not isinstance(doc, Mapping) or doc.get("kind") != KIND:
            raise RecordingError(f"{where}: not a recording manifest (kind: {KIND} expected)")
        v = doc.get("formatVersion")
        if v != FORMAT_VERSION:
            raise RecordingError(f"{where}: formatVersion: this version reads {FORMAT_VERSION}, found {v!r}")
        kw: dict[str, Any] = {}
        for f in Manifest.__dataclass_fields__:
            if f == "format_version":
                continue
            k = _camel(f)
            if k in doc:
                kw[f] = doc[k]
        for f, kind in (("started_at_s", (int, float)), ("step_s", (int, float)), ("window_s", (int, float))):
            if not isinstance(kw.get(f), kind) or isinstance(kw.get(f), bool) or not math.isfinite(kw[f]):
                raise RecordingError(f"{where}: {_camel(f)}: expected a number, found {kw.get(f)!r}")
        if kw["step_s"] <= 0 or kw["window_s"] <= 0:
            raise RecordingError(f"{where}: stepS and windowS must be > 0")
        if not isinstance(kw.get("steps", 0), int) or kw.get("steps", 0) < 0:
            raise RecordingError(f"{where}: steps: expected an integer >= 0, found {kw.get('steps')!r}")
        return Manifest(**kw)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


# ---- redaction --------------------------------------------------------------------------------------------------


def _redact_containers(containers: Any) -> None:
    if not isinstance(containers, list):
        return
    for c in containers:
        if not isinstance(c, dict):
            continue
        c.pop("command", None)
        c.pop("args", None)
        for e in c.get("env") or ():
            if isinstance(e, dict) and "value" in e and not ADDRESS_ENV.search(str(e.get("name", ""))):
                e["value"] = REDACTED


def _redact_pod_spec(spec: Any) -> None:
    if isinstance(spec, dict):
        for k in ("containers", "initContainers", "ephemeralContainers"):
            _redact_containers(spec.get(k))


def redact(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` (an API object, changed in place and returned) without what a recording never keeps (module
    docstring): managed fields, the last-applied annotation, environment values that are not addresses, commands
    and arguments of every container of a Pod or a workload's pod template."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
        ann = meta.get("annotations")
        if isinstance(ann, dict):
            ann.pop(_LAST_APPLIED, None)
    spec = obj.get("spec")
    if obj.get("kind") == "Pod":
        _redact_pod_spec(spec)
    elif isinstance(spec, dict) and isinstance(spec.get("template"), dict):
        _redact_pod_spec(spec["template"].get("spec"))
    return obj


# ---- writing ----------------------------------------------------------------------------------------------------


def _time_cell(v: Any) -> str:
    """A unix time in seconds, to the millisecond (``.6g`` would round it to 10 s)."""
    return "" if v is None else f"{float(v):.3f}"


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return "" if not math.isfinite(v) else f"{v:.6g}"
    return str(v)


class RecordingWriter:
    """Writes one recording directory (module docstring), a step at a time: nothing of a step is kept in memory
    once written. ``open`` a new one or ``resume`` an existing one."""

    def __init__(self, root: Path, manifest: Manifest):
        self.root = root
        self.manifest = manifest

    @staticmethod
    def create(root: str | Path, manifest: Manifest) -> RecordingWriter:
        """A new recording at ``root`` (created; it must not hold a manifest yet: raises
        :class:`RecordingError`, use :meth:`resume`)."""
        r = Path(root)
        if (r / "recording.json").exists():
            raise RecordingError(f"{r / 'recording.json'}: exists; pass --resume to continue it, or another --out")
        for sub in ("objects", "metrics", "shadow"):
            (r / sub).mkdir(parents=True, exist_ok=True)
        for name, cols in _FILES.items():
            with open(r / "metrics" / f"{name}.csv", "w", newline="", encoding="utf-8") as f:
                csv.writer(f).writerow(cols)
        w = RecordingWriter(r, manifest)
        w.save()
        return w

    @staticmethod
    def resume(root: str | Path) -> RecordingWriter:
        """The recording at ``root`` to continue; the rows of a step that was being written when it stopped (after
        the manifest's last completed step) are dropped. Raises :class:`RecordingError`."""
        rec = Recording(root)
        m = rec.manifest
        if m.status == "complete":
            raise RecordingError(f"{rec.root / 'recording.json'}: the recording is complete ({m.steps} steps)")
        cut = m.step_end_s(m.steps - 1) if m.steps else -math.inf
        for name, cols in _FILES.items():
            path = rec.root / "metrics" / f"{name}.csv"
            rows = [r for r in rec.rows(name) if float(r["time_s"]) <= cut + 1e-6] if path.exists() else []
            tmp = path.with_suffix(".csv.tmp")
            with open(tmp, "w", newline="", encoding="utf-8") as f:
                w = csv.writer(f)
                w.writerow(cols)
                for r in rows:
                    w.writerow([r.get(c, "") for c in cols])
            os.replace(tmp, path)
        for sub in ("objects", "metrics", "shadow"):
            (rec.root / sub).mkdir(parents=True, exist_ok=True)
        return RecordingWriter(rec.root, m)

    def save(self) -> None:
        """Rewrite ``recording.json`` atomically."""
        tmp = self.root / "recording.json.tmp"
        tmp.write_text(json.dumps(self.manifest.to_json(), indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, self.root / "recording.json")

    def write_objects(self, k: int, items: Sequence[Mapping[str, Any]], time_s: float) -> Path:
        """Step ``k``'s objects (redacted by the caller), gzip JSON, written atomically."""
        path = self.root / "objects" / f"{k:06d}.json.gz"
        tmp = path.with_suffix(".tmp")
        doc = {"apiVersion": "v1", "kind": "List", "metadata": {"timeS": time_s}, "items": list(items)}
        with gzip.open(tmp, "wt", encoding="utf-8") as f:
            json.dump(doc, f, separators=(",", ":"))
        os.replace(tmp, path)
        return path

    def append_rows(self, name: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """Append rows (dicts keyed by the file's columns) to ``metrics/<name>.csv``."""
        cols = _FILES[name]
        with open(self.root / "metrics" / f"{name}.csv", "a", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            for r in rows:
                w.writerow([_time_cell(r.get(c)) if c == "time_s" else _cell(r.get(c)) for c in cols])

    def step_done(self, late: bool = False) -> None:
        """Count one more completed step (``late``: its objects were read after it started) and save."""
        m = self.manifest
        if late:
            m.late_objects.append(m.steps)
        m.steps += 1
        if m.steps >= m.total_steps:
            m.status = "complete"
        self.save()


# ---- reading ----------------------------------------------------------------------------------------------------


def _float(v: str) -> float | None:
    v = (v or "").strip()
    if not v:
        return None
    try:
        x = float(v)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


class Recording:
    """A recording directory opened for reading (:meth:`objects`, :meth:`rows`, :meth:`numeric_rows`,
    :meth:`shadow_records`). Raises :class:`RecordingError` (one line naming the file) when ``root`` is not one."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        path = self.root / "recording.json"
        if not path.is_file():
            raise RecordingError(f"{self.root}: not a recording (no recording.json)")
        doc = _read_json(path, MAX_MANIFEST_BYTES, "the manifest")
        self.manifest = Manifest.from_json(doc, str(path))

    @property
    def steps(self) -> int:
        return self.manifest.steps

    def objects(self, k: int) -> list[dict[str, Any]]:
        """The API objects of step ``k`` (0 ≤ k < :attr:`steps`). Raises :class:`RecordingError`."""
        path = self.root / "objects" / f"{k:06d}.json.gz"
        doc = _read_json(path, MAX_STEP_BYTES, f"step {k}'s objects")
        items = doc.get("items") if isinstance(doc, Mapping) else None
        if not isinstance(items, list):
            raise RecordingError(f"{path}: not a List of objects")
        return items

    def rows(self, name: str) -> Iterator[dict[str, str]]:
        """The rows of ``metrics/<name>.csv`` (``pods``, ``services``, ``edges``) as dicts of text cells. Raises
        :class:`RecordingError` naming the file (and the line) for a file that is not UTF-8 or not CSV."""
        path = self.root / "metrics" / f"{name}.csv"
        if not path.exists():
            return
        try:
            with open_text(path) as f:
                reader = csv.DictReader(f)
                try:
                    yield from reader
                except csv.Error as exc:
                    raise RecordingError(f"{path}:{reader.reader.line_num}: not CSV: {exc}") from None
        except FileError as exc:
            raise RecordingError(str(exc)) from None

    def numeric_rows(self, name: str) -> list[dict[str, Any]]:
        """:meth:`rows` with the numeric cells as floats (``None`` for empty ones)."""
        text = {"namespace", "pod", "service", "node", "caller", "callee"}
        return [{k: (v if k in text else _float(v)) for k, v in r.items()} for r in self.rows(name)]

    def graph(self, k: int) -> ServiceGraph:
        """The call graph of step ``k`` (its edges with their rates and latencies, from ``metrics/edges.csv``)."""
        t = self.manifest.step_end_s(k)
        edges = []
        for r in self.numeric_rows("edges"):
            if r["time_s"] is None or abs(r["time_s"] - t) > 1e-3 or r["rps"] is None:
                continue
            edges.append(
                ServiceEdge(
                    r["caller"],
                    r["callee"],
                    rps=r["rps"],
                    calls_per_request=r["calls_per_request"],
                    latency_p50_ms=r["latency_p50_ms"],
                    latency_p95_ms=r["latency_p95_ms"],
                    latency_p99_ms=r["latency_p99_ms"],
                    latency_mean_ms=r["latency_mean_ms"],
                    error_rate=r["error_rate"],
                )
            )
        services = {e.caller for e in edges} | {e.callee for e in edges}
        return ServiceGraph.build(services, edges, f"{self.root} step {k}")

    def shadow_records(self, component: str) -> list[dict[str, Any]]:
        """The JSON records of ``shadow/<component>.jsonl`` (``extender``, ``descheduler``); lines that are not
        JSON objects (invalid, a duplicate key, nested too deep) are skipped. Raises :class:`RecordingError` naming
        the file when it cannot be read as UTF-8 text."""
        path = self.root / "shadow" / f"{component}.jsonl"
        out: list[dict[str, Any]] = []
        if not path.exists():
            return out
        try:
            with open_text(path) as f:
                for line in f:
                    try:
                        d = load_json(line)
                    except DocumentError:
                        continue
                    if isinstance(d, dict):
                        out.append(d)
        except FileError as exc:
            raise RecordingError(str(exc)) from None
        return out


def _read_json(path: Path, max_bytes: int, what: str) -> Any:
    """The JSON document of file ``path`` (gzip-decompressed for ``.gz``; at most ``max_bytes`` of text) through
    the hardened reader; :class:`RecordingError` (one line naming the file and ``what`` it holds) otherwise."""
    try:
        return load_json(read_text(path, max_bytes=max_bytes))
    except FileError as exc:
        raise RecordingError(f"{exc} ({what})") from None
    except DocumentError as exc:
        raise RecordingError(f"{path}: {what}: {exc.problems[0]}") from None
