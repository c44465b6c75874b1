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

Loading reads ``weights.npz`` with ``np.load(..., allow_pickle=False)`` (no code runs from a bundle), checks
the SHA-256 and every array's shape against the manifest, and — when the caller says what it expects —
refuses a different level, schema or feature specification with one line naming both (expected vs found).
Bad bundles raise :class:`BundleError` (a ``ValueError``).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

import numpy as np

from .features import FeatureSpec, FeatureSpecError, check_specs

__all__ = ["SCHEMA_VERSION", "LEVELS", "BundleError", "PolicyBundle", "MANIFEST", "WEIGHTS"]

SCHEMA_VERSION = 1
LEVELS = ("low", "high", "encoder")
MANIFEST = "manifest.json"
WEIGHTS = "weights.npz"

Level = Literal["low", "high", "encoder"]


class BundleError(ValueError):
    """A bundle is missing, malformed, or not what the caller expects (one line, naming the bundle)."""


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

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise BundleError(f"level: expected one of {', '.join(LEVELS)}, got {self.level!r}")
        if not isinstance(self.policy_version, str) or not self.policy_version.strip():
            raise BundleError(f"policy_version: expected non-empty text, got {self.policy_version!r}")
        for k, s in self.feature_spec.items():
            if not isinstance(s, FeatureSpec):
                raise BundleError(f"feature_spec.{k}: expected a FeatureSpec, got {type(s).__name__}")
        for k, d in self.dims.items():
            if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0:
                raise BundleError(f"dims.{k}: expected an integer >= 0, got {d!r}")
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
            "weights": {"file": WEIGHTS, "sha256": weights_sha256,
                        "arrays": {k: list(a.shape) for k, a in sorted(self.weights.items())}},
        }

    def array(self, name: str) -> np.ndarray:
        """Weight ``name``; raises :class:`BundleError` naming it and the policy when absent."""
        try:
            return self.weights[name]
        except KeyError:
            raise BundleError(f"bundle {self.policy_version}: weights: no array {name!r}") from None

    def norm(self, key: str, dim: int) -> tuple[np.ndarray, np.ndarray]:
        """``(mean, std)`` float32 vectors of length ``dim`` from ``normalization[key]`` (std floored at
        1e-6); identity (0, 1) when the key is absent. Raises :class:`BundleError` on a length mismatch."""
        n = self.normalization.get(key)
        if n is None:
            return np.zeros(dim, np.float32), np.ones(dim, np.float32)
        mean = np.asarray(n.get("mean"), dtype=np.float32)
        std = np.asarray(n.get("std"), dtype=np.float32)
        if mean.shape != (dim,) or std.shape != (dim,):
            raise BundleError(f"normalization.{key}: expected mean and std of length {dim}, "
                              f"found {mean.shape} and {std.shape}")
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
    def load(path: str | Path, *, level: Level | None = None,
             feature_spec: Mapping[str, FeatureSpec] | None = None,
             architecture_type: str | None = None) -> PolicyBundle:
        """Read the bundle in directory ``path``.

        ``level`` / ``feature_spec`` / ``architecture_type``: what the caller's code was written for; a
        bundle that differs is refused. Raises :class:`BundleError` (one line: the bundle path, the field,
        expected vs found) for a missing or unreadable file, a schema_version other than
        :data:`SCHEMA_VERSION`, a checksum or shape mismatch, or a different level / feature spec /
        architecture type.
        """
        d = Path(path)
        where = f"bundle {d}"
        mpath = d / MANIFEST
        try:
            raw = mpath.read_text(encoding="utf-8")
        except OSError as exc:
            raise BundleError(f"{where}: cannot read {MANIFEST}: {exc.strerror or exc}") from None
        try:
            m = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise BundleError(f"{where}: {MANIFEST}: not JSON ({exc.msg} at line {exc.lineno})") from None
        if not isinstance(m, dict):
            raise BundleError(f"{where}: {MANIFEST}: expected a JSON object, found {type(m).__name__}")
        sv = m.get("schema_version")
        if sv != SCHEMA_VERSION:
            raise BundleError(f"{where}: schema_version: expected {SCHEMA_VERSION}, found {sv!r}")
        found_level = m.get("level")
        if found_level not in LEVELS:
            raise BundleError(f"{where}: level: expected one of {', '.join(LEVELS)}, found {found_level!r}")
        if level is not None and found_level != level:
            raise BundleError(f"{where}: level: expected {level!r}, found {found_level!r}")
        arch = m.get("architecture")
        if not isinstance(arch, dict) or not isinstance(arch.get("type"), str):
            raise BundleError(f"{where}: architecture.type: expected text, found {arch!r}")
        if architecture_type is not None and arch["type"] != architecture_type:
            raise BundleError(f"{where}: architecture.type: expected {architecture_type!r}, "
                              f"found {arch['type']!r}")
        fs_raw = m.get("feature_spec")
        if not isinstance(fs_raw, dict):
            raise BundleError(f"{where}: feature_spec: expected an object, found {fs_raw!r}")
        try:
            specs = {k: FeatureSpec.from_json(v, f"feature_spec.{k}") for k, v in fs_raw.items()}
            if feature_spec is not None:
                check_specs(feature_spec, specs)
        except FeatureSpecError as exc:
            raise BundleError(f"{where}: {exc}") from None
        wmeta = m.get("weights")
        if not isinstance(wmeta, dict) or not isinstance(wmeta.get("arrays"), dict):
            raise BundleError(f"{where}: weights: expected {{file, sha256, arrays}}, found {wmeta!r}")
        wfile = wmeta.get("file", WEIGHTS)
        if not isinstance(wfile, str) or Path(wfile).name != wfile:
            raise BundleError(f"{where}: weights.file: expected a file name in the bundle, found {wfile!r}")
        try:
            data = (d / wfile).read_bytes()
        except OSError as exc:
            raise BundleError(f"{where}: cannot read {wfile}: {exc.strerror or exc}") from None
        want = wmeta.get("sha256")
        got = hashlib.sha256(data).hexdigest()
        if want and want != got:
            raise BundleError(f"{where}: {wfile}: sha256 mismatch: manifest says {want}, file is {got}")
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as z:
                weights = {k: z[k] for k in z.files}
        except (ValueError, OSError, EOFError) as exc:
            raise BundleError(f"{where}: {wfile}: not a readable npz without pickles ({exc})") from None
        listed = wmeta["arrays"]
        if set(listed) != set(weights):
            missing = sorted(set(listed) - set(weights))
            extra = sorted(set(weights) - set(listed))
            raise BundleError(f"{where}: {wfile}: arrays differ from the manifest "
                              f"(missing {missing}, unlisted {extra})")
        for k, shape in listed.items():
            if list(weights[k].shape) != list(shape):
                raise BundleError(f"{where}: weights[{k!r}]: expected shape {list(shape)}, "
                                  f"found {list(weights[k].shape)}")
        dims = m.get("dims") or {}
        if not isinstance(dims, dict):
            raise BundleError(f"{where}: dims: expected an object, found {dims!r}")
        try:
            return PolicyBundle(
                level=found_level,
                policy_version=str(m.get("policy_version", "")),
                feature_spec=specs,
                dims=dims,
                architecture=arch,
                weights=weights,
                normalization=m.get("normalization") or {},
                action_bounds=m.get("action_bounds"),
                metadata=m.get("metadata") or {},
                schema_version=sv,
            )
        except BundleError as exc:
            raise BundleError(f"{where}: {exc}") from None


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
