"""Policy bundles: a trained network as plain files that numpy can serve (DESIGN.md section 7).

A bundle is a directory::

    <bundle>/manifest.json   what the weights mean (below)
    <bundle>/weights.npz     the arrays, named like the torch ``state_dict`` keys ("layers.0.self.weight")

``manifest.json`` (UTF-8 JSON object, keys sorted when written)::

    {
      "schema_version": 1,                  # this module's SCHEMA_VERSION; any other value is refused
      "policy_version": "encoder-20250101-1a2b3c4d",   # free text naming the trained artefact
      "level": "encoder",                   # "low" (extender actor), "high" (descheduler), "encoder" (GNN)
      "feature_spec": {                     # one FeatureSpec per named input, columns in order
        "node": {"names": [...], "units": [...]},
        "edge": {"names": [...], "units": [...]}
      },
      "dims": {"hidden": 64, "embedding": 32, ...},     # integers the architecture needs
      "action_bounds": null,                # or {"low": [...], "high": [...]} for continuous actions
      "normalization": {"node": {"mean": [...], "std": [...]}, ...},  # input/target scaling, numbers only
      "architecture": {"type": "mpnn-v1", ...},          # what serving code builds (type decides the class)
      "metadata": {...},                    # free-form provenance: objective, data, seed, metrics, date
      "weights": {"file": "weights.npz", "sha256": "<hex>", "arrays": {"name": [shape...], ...}}
    }

Loading reads ``weights.npz`` without pickles (no code runs from a bundle) and, before decompressing anything,
checks its size (:data:`MAX_WEIGHTS_FILE_BYTES`), the SHA-256, and every array's ``.npy`` header: numeric dtype,
the shape the manifest lists, and the total size once decompressed (:data:`MAX_WEIGHTS_BYTES`; a zip bomb is
refused from its headers), and — when the caller says what it expects —
refuses a different level, schema or feature specification with one line naming both (expected vs found).
Every field's JSON type is checked while loading (before anything is built from it): ``weights.sha256`` must
be the 64-hex-digit digest (an empty or missing one is refused, never a skipped check), every listed shape a
list of integers >= 0, every ``dims`` value an integer in 0..:data:`MAX_DIM`, ``normalization`` an object of
``{"mean": [numbers], "std": [numbers]}`` objects, ``metadata`` an object, ``action_bounds`` null or an
object; ``manifest.json`` must be UTF-8 text of at most :data:`MAX_MANIFEST_BYTES`. Bad bundles raise
:class:`BundleError` (a ``ValueError``): one line naming the bundle directory and the field. What an
architecture's own fields mean (``temperature``, ``layers`` against the arrays present, ...) is checked by
the code that serves it (:class:`policy.lowlevel.LearnedPlacement`, :class:`policy.highlevel.StudentActor`, ...),
also when the bundle is loaded.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import re
import tempfile
import zipfile
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

import numpy as np

from .documents import DocumentError, load_json, short_repr
from .features import FeatureSpec, FeatureSpecError, check_specs

__all__ = [
    "SCHEMA_VERSION",
    "LEVELS",
    "BundleError",
    "PolicyBundle",
    "MANIFEST",
    "WEIGHTS",
    "MAX_DIM",
    "MAX_MANIFEST_BYTES",
    "MAX_WEIGHTS_FILE_BYTES",
    "MAX_WEIGHTS_BYTES",
    "located",
    "DEFAULT_BUNDLES",
    "SEED_BUNDLES",
    "SERVED_STACK",
    "SERVED_PLACEMENT_BUNDLE",
    "SERVED_INTENT_BUNDLE",
    "training_seed_root",
    "bundles_root_arg",
    "require_seed_bundle",
    "BundleMissing",
    "require_bundle",
    "bundle_error_line",
    "weights_sha256",
    "content_version",
    "ENSEMBLE",
    "MAX_ENSEMBLE_MEMBERS",
    "is_ensemble",
    "ensemble_members",
    "ensemble_member_error",
    "check_distinct_members",
]

#: Where the committed bundles live: ``policy/bundles/<stack>/{low,high}``, ``policy/bundles/encoder``.
DEFAULT_BUNDLES = Path(__file__).resolve().parent / "bundles"
#: Where the bundles of other training seeds live: ``policy/bundles/seeds/<N>/<stack>/{low,high}`` (and
#: ``seeds/<N>/encoder``), laid out as :data:`DEFAULT_BUNDLES` (training seed 0).
SEED_BUNDLES = DEFAULT_BUNDLES / "seeds"
#: The stack whose bundles the extender and the descheduler serve when their configuration names none: ``hrl-ensemble``,
#: the mean of ``hrl-scheduler``'s networks of training seeds 0, 1 and 2 (an ``ensemble.json`` per level), which beat
#: the single training seed in the quick bench of 2026-12-07 (BENCHMARKS.md, section "What moved": the best constant
#: beaten in 13 of 17 cells against 10, a mean objective of 3.15 against 3.34).
SERVED_STACK = "hrl-ensemble"
#: The placement served by default (extender ``policy.bundle``, descheduler ``placement.bundle``).
SERVED_PLACEMENT_BUNDLE = DEFAULT_BUNDLES / SERVED_STACK / "low"
#: The high level served by default (descheduler ``planner.intentPolicy.bundle``).
SERVED_INTENT_BUNDLE = DEFAULT_BUNDLES / SERVED_STACK / "high"

SCHEMA_VERSION = 1
LEVELS = ("low", "high", "encoder")
MANIFEST = "manifest.json"
WEIGHTS = "weights.npz"
#: The largest value a ``dims`` entry may have (sizes, layer counts, ...): anything larger is a malformed
#: manifest, refused before a loader sizes anything by it.
MAX_DIM = 1 << 16
#: The largest ``manifest.json`` read (the committed ones are under 20 KB).
MAX_MANIFEST_BYTES = 16 << 20
#: The largest ``weights.npz`` read (compressed), and the most bytes its arrays may take once decompressed
#: (checked from the ``.npy`` headers before anything is decompressed); the committed bundles are under 1 MB.
MAX_WEIGHTS_FILE_BYTES = 256 << 20
MAX_WEIGHTS_BYTES = 256 << 20
_SHA256 = re.compile(r"[0-9a-f]{64}")

Level = Literal["low", "high", "encoder"]


class BundleError(ValueError):
    """A bundle is missing, malformed, or not what the caller expects (one line, naming the bundle)."""


def located(exc: BaseException, path: str | Path | None) -> BundleError:
    """``exc`` as a one-line :class:`BundleError` that names bundle directory ``path`` (prefixed with
    ``bundle <path>: `` unless its message already names it; unchanged when ``path`` is empty)."""
    msg = " ".join(str(exc).split()) or type(exc).__name__
    if path and str(path) not in msg:
        msg = f"bundle {path}: {msg}"
    return BundleError(msg)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _check_normalization(norm: Mapping[str, Any]) -> None:
    """Every ``normalization`` entry is an object whose ``mean`` / ``std`` (when present) are lists of numbers."""
    for k, n in norm.items():
        if not isinstance(n, Mapping):
            raise BundleError(
                f"normalization.{k}: expected an object {{mean: [...], std: [...]}}, "
                f"found {type(n).__name__} {_short(n)}"
            )
        for part in ("mean", "std"):
            v = n.get(part)
            if v is not None and not (isinstance(v, (list, tuple)) and all(_is_number(x) for x in v)):
                raise BundleError(f"normalization.{k}.{part}: expected a list of numbers, found {_short(v)}")


def _short(v: Any, limit: int = 60) -> str:
    r = repr(v)
    return r if len(r) <= limit else r[: limit - 3] + "..."


def _freeze(m: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(m or {}))


def _json_safe(v: Any, where: str) -> Any:
    """Check ``v`` is JSON data with finite numbers (no NaN: the manifest must stay portable)."""
    if isinstance(v, Mapping):
        return {str(k): _json_safe(x, f"{where}.{k}") for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x, f"{where}[{i}]") for i, x in enumerate(v)]
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating, float)):
        f = float(v)
        if not math.isfinite(f):
            raise BundleError(f"{where}: expected a finite number, got {v!r}")
        return f
    if v is None or isinstance(v, (str, bool, int)):
        return v
    if isinstance(v, np.ndarray):
        return _json_safe(v.tolist(), where)
    raise BundleError(f"{where}: not JSON data ({type(v).__name__})")


@dataclass(frozen=True)
class PolicyBundle:
    """A trained policy or encoder, ready to save as / loaded from a bundle directory.

    ``level``: ``"low"``, ``"high"`` or ``"encoder"``; ``policy_version``: non-empty text;
    ``feature_spec``: input name → :class:`FeatureSpec`; ``dims``: name → int; ``architecture``: JSON data
    with at least ``"type"``; ``weights``: name → numpy array (float32/float64/int; any shape);
    ``normalization`` / ``action_bounds`` / ``metadata``: JSON data (finite numbers only).
    Raises :class:`BundleError` on construction when a field is invalid.
    """

    level: Level
    policy_version: str
    feature_spec: Mapping[str, FeatureSpec]
    dims: Mapping[str, int]
    architecture: Mapping[str, Any]
    weights: Mapping[str, np.ndarray] = field(repr=False)
    normalization: Mapping[str, Any] = field(default_factory=dict)
    action_bounds: Mapping[str, Any] | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION
    #: the directory it was loaded from ("" when built in memory); named in the errors of the code serving it
    source: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise BundleError(f"level: expected one of {', '.join(LEVELS)}, got {self.level!r}")
        if not isinstance(self.policy_version, str) or not self.policy_version.strip():
            raise BundleError(f"policy_version: expected non-empty text, got {self.policy_version!r}")
        for k, s in self.feature_spec.items():
            if not isinstance(s, FeatureSpec):
                raise BundleError(f"feature_spec.{k}: expected a FeatureSpec, got {type(s).__name__}")
        for k, d in self.dims.items():
            if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or not 0 <= d <= MAX_DIM:
                raise BundleError(f"dims.{k}: expected an integer in 0..{MAX_DIM}, got {_short(d)}")
        if not isinstance(self.architecture.get("type"), str):
            raise BundleError(f"architecture.type: expected text, got {self.architecture.get('type')!r}")
        arrays = {}
        for k, w in self.weights.items():
            a = np.asarray(w)
            if a.dtype == object or a.dtype.kind not in "fiub":
                raise BundleError(f"weights[{k!r}]: expected a numeric array, got dtype {a.dtype}")
            if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
                raise BundleError(f"weights[{k!r}]: contains NaN or infinity")
            a = a.copy()
            a.setflags(write=False)
            arrays[str(k)] = a
        object.__setattr__(self, "weights", MappingProxyType(arrays))
        object.__setattr__(self, "feature_spec", _freeze(self.feature_spec))
        object.__setattr__(self, "dims", MappingProxyType({str(k): int(v) for k, v in self.dims.items()}))
        object.__setattr__(self, "architecture", _freeze(_json_safe(self.architecture, "architecture")))
        object.__setattr__(self, "normalization", _freeze(_json_safe(self.normalization, "normalization")))
        _check_normalization(self.normalization)
        if self.action_bounds is not None:
            object.__setattr__(self, "action_bounds", _freeze(_json_safe(self.action_bounds, "action_bounds")))
        object.__setattr__(self, "metadata", _freeze(_json_safe(self.metadata, "metadata")))

    # ---- manifest ----------------------------------------------------------------------------------
    def manifest(self, weights_sha256: str = "") -> dict[str, Any]:
        """The ``manifest.json`` object (see the module docstring)."""
        return {
            "schema_version": self.schema_version,
            "policy_version": self.policy_version,
            "level": self.level,
            "feature_spec": {k: s.to_json() for k, s in sorted(self.feature_spec.items())},
            "dims": dict(sorted(self.dims.items())),
            "action_bounds": None if self.action_bounds is None else _plain(self.action_bounds),
            "normalization": _plain(self.normalization),
            "architecture": _plain(self.architecture),
            "metadata": _plain(self.metadata),
            "weights": {
                "file": WEIGHTS,
                "sha256": weights_sha256,
                "arrays": {k: list(a.shape) for k, a in sorted(self.weights.items())},
            },
        }

    def array(self, name: str) -> np.ndarray:
        """Weight ``name``; raises :class:`BundleError` naming it and the policy when absent."""
        try:
            return self.weights[name]
        except KeyError:
            raise BundleError(f"{self.where}: weights: no array {name!r}") from None

    @property
    def where(self) -> str:
        """``bundle <source directory>`` (``bundle <policy_version>`` when built in memory), for messages."""
        return f"bundle {self.source or self.policy_version}"

    def norm(self, key: str, dim: int) -> tuple[np.ndarray, np.ndarray]:
        """``(mean, std)`` float32 vectors of length ``dim`` from ``normalization[key]`` (std floored at
        1e-6); identity (0, 1) when the key is absent. Raises :class:`BundleError` on a length mismatch."""
        n = self.normalization.get(key)
        if n is None:
            return np.zeros(dim, np.float32), np.ones(dim, np.float32)
        if not isinstance(n, Mapping) or not all(isinstance(n.get(p), (list, tuple)) for p in ("mean", "std")):
            raise BundleError(
                f"{self.where}: normalization.{key}: expected {{mean: [{dim} numbers], "
                f"std: [{dim} numbers]}}, found {_short(_plain(n))}"
            )
        try:
            with np.errstate(over="ignore"):  # a value beyond float32 becomes inf: refused just below
                mean = np.asarray(n["mean"], dtype=np.float32)
                std = np.asarray(n["std"], dtype=np.float32)
        except (TypeError, ValueError, OverflowError):
            raise BundleError(
                f"{self.where}: normalization.{key}: expected numbers, found {_short(_plain(n))}"
            ) from None
        if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(std))):
            raise BundleError(
                f"{self.where}: normalization.{key}: expected numbers within float32 range, found {_short(_plain(n))}"
            )
        if mean.shape != (dim,) or std.shape != (dim,):
            raise BundleError(
                f"{self.where}: normalization.{key}: expected mean and std of length {dim}, "
                f"found {mean.shape} and {std.shape}"
            )
        return mean, np.maximum(std, 1e-6)

    # ---- save / load -------------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write the bundle into directory ``path`` (created if missing; existing ``manifest.json`` and
        ``weights.npz`` are replaced atomically, weights first). Returns the directory."""
        d = Path(path)
        d.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        np.savez_compressed(buf, **{k: np.asarray(v) for k, v in sorted(self.weights.items())})
        data = buf.getvalue()
        digest = hashlib.sha256(data).hexdigest()
        text = json.dumps(self.manifest(digest), indent=1, sort_keys=True) + "\n"
        _atomic_write(d / WEIGHTS, data)
        _atomic_write(d / MANIFEST, text.encode("utf-8"))
        return d

    @staticmethod
    def load(
        path: str | Path,
        *,
        level: Level | None = None,
        feature_spec: Mapping[str, FeatureSpec] | None = None,
        architecture_type: str | None = None,
    ) -> PolicyBundle:
        """Read the bundle in directory ``path``.

        ``level`` / ``feature_spec`` / ``architecture_type``: what the caller's code was written for; a
        bundle that differs is refused. Raises :class:`BundleError` (one line: the bundle path, the field,
        expected vs found) for a missing or unreadable file, a manifest that is not UTF-8 JSON or whose fields
        have the wrong JSON type (see the module docstring), a schema_version other than
        :data:`SCHEMA_VERSION`, a missing or mismatched SHA-256, a shape mismatch, or a different level /
        feature spec / architecture type.
        """
        d = Path(path)
        where = f"bundle {d}"
        m = _read_manifest(d, where)
        sv = m.get("schema_version")
        if sv != SCHEMA_VERSION or isinstance(sv, bool):
            raise BundleError(f"{where}: schema_version: expected {SCHEMA_VERSION}, found {_short(sv)}")
        found_level, pv, arch = _identity(m, where, level, architecture_type)
        specs = _feature_specs(m, where, feature_spec)
        dims = _dims(m, where)
        sections: dict[str, Any] = {}
        for key in ("normalization", "metadata", "action_bounds"):
            v = m.get(key)
            if v is not None and not isinstance(v, dict):
                raise BundleError(f"{where}: {key}: expected an object or null, found {type(v).__name__} {_short(v)}")
            sections[key] = v
        weights = _read_weights(d, m, where)
        try:
            return PolicyBundle(
                level=found_level,
                policy_version=pv,
                feature_spec=specs,
                dims=dims,
                architecture=arch,
                weights=weights,
                normalization=sections["normalization"] or {},
                action_bounds=sections["action_bounds"],
                metadata=sections["metadata"] or {},
                schema_version=sv,
                source=str(d),
            )
        except BundleError as exc:
            raise BundleError(f"{where}: {exc}") from None


def _read_manifest(d: Path, where: str) -> dict[str, Any]:
    """``manifest.json`` of bundle directory ``d``, read through :mod:`policy.documents` (size, UTF-8, duplicate
    keys and depth checked). Raises :class:`BundleError` (one line starting with ``where``)."""
    mpath = d / MANIFEST
    try:
        with open(mpath, "rb") as f:
            blob = f.read(MAX_MANIFEST_BYTES + 1)
    except OSError as exc:
        raise BundleError(f"{where}: cannot read {MANIFEST}: {exc.strerror or exc}") from None
    if len(blob) > MAX_MANIFEST_BYTES:
        raise BundleError(f"{where}: {MANIFEST}: larger than {MAX_MANIFEST_BYTES} bytes (not a manifest)")
    try:
        raw = blob.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BundleError(
            f"{where}: {MANIFEST}: not UTF-8 text (byte {exc.start}: {blob[exc.start : exc.start + 1]!r})"
        ) from None
    return _json_object(raw, f"{where}: {MANIFEST}", "not JSON")


def _json_object(text: str, where: str, invalid: str) -> dict[str, Any]:
    """The JSON object of ``text`` (duplicate keys and nesting deeper than policy.documents.MAX_DEPTH refused);
    else :class:`BundleError` ``<where>: <invalid> (<the first problem> at line N)`` or ``<where>: expected a JSON
    object, found <type>``."""
    try:
        m = load_json(text)
    except DocumentError as exc:
        first = exc.problems[0]
        at = f" at line {first.line}" if first.line is not None else ""
        what = f"{first.path}: {first.message}" if first.path else first.message
        raise BundleError(f"{where}: {invalid} ({what}{at})") from None
    if not isinstance(m, dict):
        raise BundleError(f"{where}: expected a JSON object, found {type(m).__name__}")
    return m


def _identity(
    m: Mapping[str, Any], where: str, level: Level | None, architecture_type: str | None
) -> tuple[Any, str, dict[str, Any]]:
    """``(level, policy_version, architecture)`` of manifest ``m``, checked against what the caller expects."""
    found_level = m.get("level")
    if found_level not in LEVELS:
        raise BundleError(f"{where}: level: expected one of {', '.join(LEVELS)}, found {_short(found_level)}")
    if level is not None and found_level != level:
        raise BundleError(f"{where}: level: expected {level!r}, found {found_level!r}")
    pv = m.get("policy_version")
    if not isinstance(pv, str) or not pv.strip():
        raise BundleError(f"{where}: policy_version: expected non-empty text, found {_short(pv)}")
    arch = m.get("architecture")
    if not isinstance(arch, dict) or not isinstance(arch.get("type"), str):
        raise BundleError(f"{where}: architecture.type: expected text, found {_short(arch)}")
    if architecture_type is not None and arch["type"] != architecture_type:
        raise BundleError(f"{where}: architecture.type: expected {architecture_type!r}, found {arch['type']!r}")
    return found_level, pv, arch


def _feature_specs(
    m: Mapping[str, Any], where: str, expected: Mapping[str, FeatureSpec] | None
) -> dict[str, FeatureSpec]:
    """The manifest's feature specs by input name, checked against ``expected`` (when given)."""
    fs_raw = m.get("feature_spec")
    if not isinstance(fs_raw, dict):
        raise BundleError(f"{where}: feature_spec: expected an object, found {_short(fs_raw)}")
    try:
        specs = {k: FeatureSpec.from_json(v, f"feature_spec.{k}") for k, v in fs_raw.items()}
        if expected is not None:
            check_specs(expected, specs)
    except FeatureSpecError as exc:
        raise BundleError(f"{where}: {exc}") from None
    return specs


def _dims(m: Mapping[str, Any], where: str) -> dict[str, int]:
    """The manifest's ``dims`` (absent: none), each an integer in 0..MAX_DIM."""
    dims = m.get("dims")
    dims = {} if dims is None else dims
    if not isinstance(dims, dict):
        raise BundleError(f"{where}: dims: expected an object of integers, found {_short(dims)}")
    for k, v in dims.items():
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_DIM:
            raise BundleError(f"{where}: dims.{k}: expected an integer in 0..{MAX_DIM}, found {_short(v)}")
    return dims


def _read_weights(d: Path, m: Mapping[str, Any], where: str) -> dict[str, np.ndarray]:
    """The arrays of the weights file the manifest ``m`` names: its listed shapes, file name and SHA-256 checked,
    then :func:`_read_npz`."""
    wmeta = m.get("weights")
    if not isinstance(wmeta, dict) or not isinstance(wmeta.get("arrays"), dict):
        raise BundleError(f"{where}: weights: expected {{file, sha256, arrays}}, found {_short(wmeta)}")
    listed = wmeta["arrays"]
    for k, shape in listed.items():
        if not (
            isinstance(shape, list) and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)
        ):
            raise BundleError(
                f"{where}: weights.arrays[{k!r}]: expected a shape (a list of integers >= 0), found {_short(shape)}"
            )
    wfile = wmeta.get("file", WEIGHTS)
    if not isinstance(wfile, str) or not wfile or Path(wfile).name != wfile:
        raise BundleError(f"{where}: weights.file: expected a file name in the bundle, found {_short(wfile)}")
    want = wmeta.get("sha256")
    if not isinstance(want, str) or not _SHA256.fullmatch(want.lower()):
        raise BundleError(
            f"{where}: weights.sha256: expected the SHA-256 of {wfile} (64 hex digits), found {_short(want)}"
        )
    try:
        with open(d / wfile, "rb") as f:
            data = f.read(MAX_WEIGHTS_FILE_BYTES + 1)
    except OSError as exc:
        raise BundleError(f"{where}: cannot read {wfile}: {exc.strerror or exc}") from None
    if len(data) > MAX_WEIGHTS_FILE_BYTES:
        raise BundleError(f"{where}: {wfile}: larger than {MAX_WEIGHTS_FILE_BYTES} bytes (refused unread)")
    got = hashlib.sha256(data).hexdigest()
    if want.lower() != got:
        raise BundleError(f"{where}: {wfile}: sha256 mismatch: manifest says {want}, file is {got}")
    return _read_npz(data, listed, f"{where}: {wfile}")


def _read_npz(data: bytes, listed: Mapping[str, list[int]], where: str) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` (``data``: the file's bytes) whose names and shapes the manifest lists, read so
    that a zip bomb costs nothing: the member names are compared with ``listed`` first, then every member's
    ``.npy`` header (the first bytes of each member) is read and its dtype (numbers only), shape (the listed
    one) and size checked, and the sum of the arrays' sizes held to :data:`MAX_WEIGHTS_BYTES`, all before
    any array data is decompressed; then each array is read, exactly its header's size (no pickles).
    Raises :class:`BundleError` (one line starting with ``where``) otherwise."""
    fmt = np.lib.format
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError) as exc:
        raise BundleError(f"{where}: not a readable npz (not a zip file: {' '.join(str(exc).split())})") from None
    with zf:
        members: dict[str, zipfile.ZipInfo] = {}
        for info in zf.infolist():
            name = info.filename.removesuffix(".npy")
            if name in members or not info.filename.endswith(".npy"):
                raise BundleError(
                    f"{where}: unexpected member {short_repr(info.filename)} (an npz holds one .npy per array)"
                )
            members[name] = info
        if set(listed) != set(members):
            missing = sorted(set(listed) - set(members))
            extra = sorted(set(members) - set(listed))
            raise BundleError(f"{where}: arrays differ from the manifest (missing {missing}, unlisted {extra})")
        total = 0
        try:
            for name, info in members.items():
                with zf.open(info) as f:
                    version = fmt.read_magic(f)
                    if version == (1, 0):
                        shape, _fortran, dtype = fmt.read_array_header_1_0(f)
                    elif version == (2, 0):
                        shape, _fortran, dtype = fmt.read_array_header_2_0(f)
                    else:
                        raise BundleError(f"{where}: weights[{name!r}]: unsupported .npy format {version}")
                if dtype.hasobject or dtype.kind not in "fiub" or dtype.fields is not None:
                    raise BundleError(
                        f"{where}: weights[{name!r}]: expected a numeric array without pickles, found dtype {dtype}"
                    )
                if list(shape) != list(listed[name]):
                    raise BundleError(
                        f"{where}: weights[{name!r}]: expected shape {list(listed[name])}, found {list(shape)}"
                    )
                nbytes = math.prod(shape) * dtype.itemsize
                total += nbytes
                if total > MAX_WEIGHTS_BYTES:
                    raise BundleError(
                        f"{where}: the arrays would take more than {MAX_WEIGHTS_BYTES} bytes once decompressed "
                        f"(at weights[{name!r}], shape {list(shape)} {dtype}); refused before decompressing"
                    )
                if info.file_size < nbytes:
                    raise BundleError(f"{where}: weights[{name!r}]: truncated ({info.file_size} bytes hold {nbytes})")
            weights = {}
            for name, info in members.items():
                with zf.open(info) as f:
                    weights[name] = fmt.read_array(f, allow_pickle=False)
        except BundleError:
            raise
        except (
            ValueError,
            OSError,
            EOFError,
            zlib.error,
            zipfile.BadZipFile,
            NotImplementedError,
            RuntimeError,
        ) as exc:
            # a corrupt member, a bad CRC, an unsupported compression, an encrypted member
            raise BundleError(
                f"{where}: not a readable npz without pickles ({type(exc).__name__}: {' '.join(str(exc).split())})"
            ) from None
    return weights


def _plain(v: Any) -> Any:
    """Mapping proxies → dicts, tuples → lists (for json.dumps)."""
    if isinstance(v, Mapping):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# ---- helpers the trainers share (no torch) ------------------------------------------------------------------


def weights_sha256(weights: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the ``weights.npz`` :meth:`policy.bundle.PolicyBundle.save` writes for ``weights``
    (name → array): the same bytes (``np.savez_compressed`` of the arrays in name order; its zip entries carry a
    fixed timestamp, so the bytes depend only on the arrays), hence the digest the manifest records under
    ``weights.sha256``."""
    buf = io.BytesIO()
    np.savez_compressed(buf, **{str(k): np.asarray(v) for k, v in sorted(weights.items())})
    return hashlib.sha256(buf.getvalue()).hexdigest()


def content_version(base: str, weights: Mapping[str, Any], *, quick: bool = False) -> str:
    """A bundle's ``policy_version``: ``base`` (e.g. ``encoder-20261130-s0-l3``), ``-quick`` for a smoke-test run,
    and ``-`` + the first 8 hex digits of :func:`weights_sha256` (what the manifest records), so bundles with
    different weights never share a version (``encoder-20261130-s0-l3-quick-1a2b3c4d``)."""
    return f"{base}{'-quick' if quick else ''}-{weights_sha256(weights)[:8]}"


# ---- the learned parts, by bundle ---------------------------------------------------------------------------


class BundleMissing(ValueError):
    """A learned stack's bundle directory (or its ``manifest.json``) does not exist; the message names the path
    and says how to make it (``make train``). ``path``: the directory without a bundle; ``hint``: what the
    caller probably meant instead ("" when nothing better than ``make train`` is known)."""

    def __init__(self, message: str, path: str | Path | None = None, hint: str = ""):
        super().__init__(message)
        self.path = None if path is None else Path(path)
        self.hint = hint


def require_bundle(path: str | Path, what: str, hint: str = "") -> Path:
    """``path`` as a ``Path`` when it holds a bundle (``manifest.json``) or an ensemble of bundles
    (:data:`ENSEMBLE`); else :class:`BundleMissing` naming ``what`` (e.g. ``"low-level placement"``) and, when given,
    ``hint`` instead of the default advice."""
    p = Path(path)
    if not (p / "manifest.json").is_file() and not is_ensemble(p):
        if hint:
            raise BundleMissing(f"{what}: {hint}", p, hint)
        raise BundleMissing(f"{what}: no policy bundle at {p} (missing {p / 'manifest.json'}; run `make train`)", p)
    return p


def training_seed_root(training_seed: int, root: str | Path | None = None) -> Path:
    """The bundles root of training seed ``training_seed`` (an integer >= 0): 0 is ``root`` (default
    :data:`DEFAULT_BUNDLES`, the committed bundles), N >= 1 is ``<root>/seeds/<N>`` (default ``SEED_BUNDLES/<N>``).
    Nothing is checked on disk (:func:`require_seed_bundle` does). Raises ValueError for a negative or non-integer
    seed."""
    if isinstance(training_seed, bool) or not isinstance(training_seed, int) or training_seed < 0:
        raise ValueError(f"training seed: expected an integer >= 0, got {training_seed!r}")
    if training_seed == 0:
        return Path(root) if root is not None else DEFAULT_BUNDLES
    return (Path(root) / "seeds" if root is not None else SEED_BUNDLES) / str(training_seed)


def bundles_root_arg(value: str | Path, flag: str = "--bundles") -> Path:
    """The bundles root a command line names (``--bundles DIR`` of ``hrl-policy simulate`` and ``python -m
    policy.bench``), absolute: a directory laid out like :data:`DEFAULT_BUNDLES` (``<stack>/{low,high}``, ``drpc``,
    ``encoder``, ``seeds/<N>/...``), e.g. the ``out/train/<app>/bundles`` of ``hrl-policy train --app``. Raises
    ValueError, one line naming ``flag`` and the value, when it is not a directory or holds no bundle (no
    ``manifest.json`` one to four levels down). Which bundles a stack needs is checked when the stack is built
    (:class:`BundleMissing` naming the path)."""
    p = Path(value).expanduser()
    if not p.is_dir():
        raise ValueError(
            f"{flag}: {'not a directory' if p.exists() else 'no such directory'} (got {str(value)!r}); expected a "
            "bundles root laid out like policy/bundles"
        )
    if not any(next(p.glob("*/" * depth + MANIFEST), None) for depth in range(1, 5)):
        raise ValueError(
            f"{flag}: no policy bundle in {str(value)!r} (expected <stack>/low/{MANIFEST} and the others, laid out "
            "like policy/bundles)"
        )
    return p.resolve()


def require_seed_bundle(path: str | Path, what: str, training_seed: int) -> Path:
    """:func:`require_bundle` for a bundle of training seed ``training_seed``: seed 0 as :func:`require_bundle`; for a
    seed >= 1 the :class:`BundleMissing` names the path and the layout of the seeds' bundles (never a silent fallback
    to the committed bundles)."""
    if training_seed == 0:
        return require_bundle(path, what)
    p = Path(path)
    if not (p / "manifest.json").is_file() and not is_ensemble(p):
        raise BundleMissing(
            f"{what}: no policy bundle of training seed {training_seed} at {p} (missing {p / 'manifest.json'}; the "
            f"bundles of training seed N live under policy/bundles/seeds/N/<stack>/, seed 0 is policy/bundles/<stack>)",
            p,
        )
    return p


def bundle_error_line(field: str, exc: ValueError, *, default: bool) -> str:
    """One line for configuration field ``field`` (``placement.bundle``, ``planner.autoscaler.bundle``) whose
    bundle did not load with ``exc`` (:class:`BundleMissing`, :class:`policy.bundle.BundleError`, ...):
    ``<field>: <what is wrong>``. ``default``: the field was null, so the path is the committed default: only
    then is ``make train`` suggested for a missing bundle (a path the user wrote is more likely a typo)."""
    if isinstance(exc, BundleMissing) and exc.path is not None:
        if exc.hint:
            return f"{field}: {exc.hint}"
        advice = f"run `make train` to build the default bundles, or set {field}" if default else "check the path"
        return f"{field}: no policy bundle at {exc.path} (missing {exc.path / 'manifest.json'}; {advice})"
    return f"{field}: {' '.join(str(exc).split())}"


# ---- ensembles of bundles -------------------------------------------------------------------------------------

#: The file that makes a directory an ensemble of bundles instead of a bundle.
ENSEMBLE = "ensemble.json"

#: The most members an ensemble may list.
MAX_ENSEMBLE_MEMBERS = 16

_ENSEMBLE_KEYS = ("kind", "level", "combine", "members", "description")


def is_ensemble(path: str | Path) -> bool:
    """True when directory ``path`` holds an :data:`ENSEMBLE` file (an ensemble of bundles, not a bundle)."""
    return (Path(path) / ENSEMBLE).is_file()


def check_distinct_members(versions: Sequence[str], where: str) -> None:
    """Raise :class:`BundleError` (``<where>: members[i]: the same network as members[j] (version)``) when two
    members of an ensemble carry the same network version (an empty version is not compared)."""
    seen: dict[str, int] = {}
    for i, v in enumerate(versions):
        if v and v in seen:
            raise BundleError(f"{where}: members[{i}]: the same network as members[{seen[v]}] ({v!r})")
        seen.setdefault(v, i)


def ensemble_member_error(path: str | Path, i: int, member: str | Path, exc: BaseException) -> BundleError:
    """A member's load error ``exc`` as one line naming the ensemble file and ``members[i]``."""
    return BundleError(f"ensemble {Path(path) / ENSEMBLE}: members[{i}] ({member}): {' '.join(str(exc).split())}")


def ensemble_members(path: str | Path, level: str) -> tuple[Path, ...]:
    """The member directories of the ensemble at ``path`` (its :data:`ENSEMBLE` file), resolved against ``path``.

    ``ensemble.json`` is a JSON object (at most 64 KiB)::

        {"kind": "Ensemble", "level": "low", "combine": "mean",
         "members": ["../../hrl-scheduler/low", "../../seeds/1/hrl-scheduler/low"],
         "description": "free text"}

    ``kind`` must be ``Ensemble``; ``level`` the level the caller serves (``low``: placement bundles, ``high``: the
    high level's ``intent/`` + ``predictor/`` directories); ``combine`` ``mean`` (the default, the only rule);
    ``members``: 1 to :data:`MAX_ENSEMBLE_MEMBERS` distinct paths, relative to ``path`` or absolute, none of them an
    ensemble itself (a high level's ``DIR/intent`` counts as ``DIR``). Members are checked for existence by their
    loaders, not here. A directory holding both ``ensemble.json`` and ``manifest.json`` is refused.

    Raises :class:`BundleError`, one line naming the file and the field, for anything else (not JSON, a duplicate
    key, nesting too deep, an unknown key, a wrong kind or level, a bad member list)."""
    f = Path(path) / ENSEMBLE
    where = f"ensemble {f}"
    if (Path(path) / MANIFEST).exists():
        raise BundleError(f"{where}: the directory holds a {MANIFEST} too: a bundle or an ensemble, not both")
    m = _read_ensemble_file(f, where)
    unknown = sorted(set(m) - set(_ENSEMBLE_KEYS))
    if unknown:
        raise BundleError(f"{where}: unknown key {unknown[0]!r} (expected {', '.join(_ENSEMBLE_KEYS)})")
    if m.get("kind") != "Ensemble":
        raise BundleError(f"{where}: kind: expected 'Ensemble', found {_short(m.get('kind'))}")
    if m.get("level") != level:
        raise BundleError(f"{where}: level: expected {level!r}, found {_short(m.get('level'))}")
    if m.get("combine", "mean") != "mean":
        raise BundleError(f"{where}: combine: expected 'mean', found {_short(m.get('combine'))}")
    members = m.get("members")
    if (
        not isinstance(members, list)
        or not 1 <= len(members) <= MAX_ENSEMBLE_MEMBERS
        or not all(isinstance(x, str) and x.strip() for x in members)
    ):
        raise BundleError(
            f"{where}: members: expected a list of 1 to {MAX_ENSEMBLE_MEMBERS} directory paths, found {_short(members)}"
        )
    return _member_dirs(Path(path), members, level, where)


def _read_ensemble_file(f: Path, where: str) -> dict[str, Any]:
    """The JSON object of ensemble file ``f`` (at most 64 KiB, UTF-8, read as strictly as a manifest)."""
    try:
        raw = f.read_bytes()
    except OSError as exc:
        raise BundleError(f"{where}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > 64 << 10:
        raise BundleError(f"{where}: expected at most 64 KiB, found {len(raw)} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BundleError(f"{where}: not UTF-8 text (byte {exc.start})") from None
    return _json_object(text, where, "not valid JSON")  # as strictly as a manifest.json


def _member_dirs(base: Path, members: list[str], level: str, where: str) -> tuple[Path, ...]:
    """``members`` resolved against ``base``: distinct, none an ensemble (a high level's ``DIR/intent`` is ``DIR``)."""
    out: list[Path] = []
    for i, x in enumerate(members):
        try:
            d = (base / x).resolve()
            if level == "high" and d.name == "intent" and (d / MANIFEST).is_file():
                d = d.parent  # the high level's loader reads DIR/intent when given DIR or DIR/intent
        except (OSError, ValueError) as exc:
            raise BundleError(f"{where}: members[{i}]: {x!r} is not a usable path ({exc})") from None
        if d in out:
            raise BundleError(f"{where}: members[{i}]: {x!r} is listed twice")
        if is_ensemble(d):
            raise BundleError(f"{where}: members[{i}]: {x!r} is an ensemble itself (members must be bundles)")
        out.append(d)
    return tuple(out)
