"""Policy bundles (DESIGN.md section 7): save/load round trip, and refusal of anything that does not match."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile

import numpy as np
import pytest

from policy.bundle import SCHEMA_VERSION, BundleError, PolicyBundle
from policy.features import FeatureSpec, FeatureSpecError

OBS = FeatureSpec.of([("cpu_util", "fraction"), ("log_rps", "log1p(rps)")])


def bundle(**kw) -> PolicyBundle:
    args = {
        "level": "low",
        "policy_version": "test-1",
        "feature_spec": {"obs": OBS},
        "dims": {"hidden": 4},
        "architecture": {"type": "mlp"},
        "weights": {"fc.weight": np.arange(8, dtype=np.float32).reshape(4, 2), "fc.bias": np.zeros(4, np.float32)},
        "normalization": {"obs": {"mean": [0.0, 1.0], "std": [1.0, 2.0]}},
        "action_bounds": {"low": [-1.0], "high": [1.0]},
        "metadata": {"seed": 3},
    }
    args.update(kw)
    return PolicyBundle(**args)


def test_a_saved_bundle_loads_back_identical(tmp_path):
    b = bundle()
    b.save(tmp_path / "b")
    got = PolicyBundle.load(tmp_path / "b", level="low", feature_spec={"obs": OBS}, architecture_type="mlp")
    assert got.policy_version == "test-1" and got.level == "low" and got.schema_version == SCHEMA_VERSION
    assert got.feature_spec == {"obs": OBS}
    assert dict(got.dims) == {"hidden": 4}
    assert set(got.weights) == {"fc.weight", "fc.bias"}
    np.testing.assert_array_equal(got.array("fc.weight"), b.array("fc.weight"))
    assert got.array("fc.weight").dtype == np.float32
    mean, std = got.norm("obs", 2)
    np.testing.assert_array_equal(mean, [0.0, 1.0])
    np.testing.assert_array_equal(std, [1.0, 2.0])
    assert got.action_bounds == {"low": [-1.0], "high": [1.0]}
    assert got.metadata["seed"] == 3


def test_the_manifest_is_plain_json_naming_every_array_and_its_shape(tmp_path):
    bundle().save(tmp_path)
    m = json.loads((tmp_path / "manifest.json").read_text())
    assert m["schema_version"] == SCHEMA_VERSION
    assert m["feature_spec"] == {"obs": {"names": ["cpu_util", "log_rps"], "units": ["fraction", "log1p(rps)"]}}
    assert m["weights"]["arrays"] == {"fc.bias": [4], "fc.weight": [4, 2]}
    assert len(m["weights"]["sha256"]) == 64


def test_weights_are_read_only_after_loading(tmp_path):
    bundle().save(tmp_path)
    w = PolicyBundle.load(tmp_path).array("fc.weight")
    with pytest.raises(ValueError):
        w[0, 0] = 1.0


@pytest.mark.parametrize(
    "expected,needle",
    [
        (
            FeatureSpec.of([("cpu_util", "fraction"), ("log_rps", "log1p(rps)"), ("extra", "flag")]),
            "first difference at column 2: expected extra (flag), found nothing",
        ),
        (
            FeatureSpec.of([("cpu_util", "fraction"), ("rps", "rps")]),
            "first difference at column 1: expected rps (rps), found log_rps (log1p(rps))",
        ),
        (
            FeatureSpec.of([("cpu_util", "percent"), ("log_rps", "log1p(rps)")]),
            "expected cpu_util (percent), found cpu_util (fraction)",
        ),
    ],
)
def test_a_feature_spec_mismatch_is_refused_with_both_sides_named(tmp_path, expected, needle):
    bundle().save(tmp_path)
    with pytest.raises(BundleError) as e:
        PolicyBundle.load(tmp_path, feature_spec={"obs": expected})
    msg = str(e.value)
    assert "\n" not in msg
    assert needle in msg
    assert "expected" in msg and "found" in msg and str(tmp_path) in msg


def test_a_bundle_with_other_inputs_is_refused(tmp_path):
    bundle().save(tmp_path)
    with pytest.raises(BundleError, match=r"expected inputs \['node'\], found \['obs'\]"):
        PolicyBundle.load(tmp_path, feature_spec={"node": OBS})


def test_another_schema_version_is_refused_naming_both(tmp_path):
    bundle().save(tmp_path)
    m = json.loads((tmp_path / "manifest.json").read_text())
    m["schema_version"] = 99
    (tmp_path / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(BundleError, match=f"schema_version: expected {SCHEMA_VERSION}, found 99"):
        PolicyBundle.load(tmp_path)


@pytest.mark.parametrize(
    "kw,needle",
    [
        ({"level": "high"}, "level: expected 'high', found 'low'"),
        ({"architecture_type": "gru"}, "architecture.type: expected 'gru', found 'mlp'"),
    ],
)
def test_another_level_or_architecture_is_refused(tmp_path, kw, needle):
    bundle().save(tmp_path)
    with pytest.raises(BundleError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        PolicyBundle.load(tmp_path, **kw)


def test_tampered_weights_fail_the_checksum(tmp_path):
    bundle().save(tmp_path)
    data = bytearray((tmp_path / "weights.npz").read_bytes())
    data[-30] ^= 0xFF
    (tmp_path / "weights.npz").write_bytes(bytes(data))
    with pytest.raises(BundleError, match="sha256 mismatch"):
        PolicyBundle.load(tmp_path)


def test_pickled_object_arrays_are_never_loaded(tmp_path):
    bundle().save(tmp_path)
    buf = io.BytesIO()
    np.savez(buf, **{"fc.weight": np.array([{"evil": 1}], dtype=object), "fc.bias": np.zeros(4)})
    (tmp_path / "weights.npz").write_bytes(buf.getvalue())
    m = json.loads((tmp_path / "manifest.json").read_text())
    m["weights"]["sha256"] = hashlib.sha256(buf.getvalue()).hexdigest()  # a matching checksum: no other trip
    (tmp_path / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(BundleError, match="without pickles"):
        PolicyBundle.load(tmp_path)


def test_a_shape_different_from_the_manifest_is_refused(tmp_path):
    bundle().save(tmp_path)
    m = json.loads((tmp_path / "manifest.json").read_text())
    m["weights"]["arrays"]["fc.weight"] = [2, 4]
    (tmp_path / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(BundleError, match=r"weights\['fc.weight'\]: expected shape \[2, 4\], found \[4, 2\]"):
        PolicyBundle.load(tmp_path)


def test_missing_files_and_broken_json_give_one_line_errors(tmp_path):
    with pytest.raises(BundleError, match="cannot read manifest.json"):
        PolicyBundle.load(tmp_path / "nope")
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(BundleError, match="manifest.json: not JSON"):
        PolicyBundle.load(tmp_path)


@pytest.mark.parametrize(
    "kw,needle",
    [
        ({"level": "middle"}, "level: expected one of low, high, encoder"),
        ({"policy_version": " "}, "policy_version"),
        ({"weights": {"w": np.array([np.nan])}}, "NaN or infinity"),
        ({"normalization": {"obs": {"mean": [float("inf")]}}}, "normalization.obs.mean[0]: expected a finite number"),
        ({"dims": {"hidden": -1}}, "dims.hidden"),
        ({"architecture": {}}, "architecture.type"),
    ],
)
def test_invalid_bundles_cannot_be_built(kw, needle):
    with pytest.raises(BundleError) as e:
        bundle(**kw)
    assert needle in str(e.value)


def test_feature_specs_reject_repeated_names_and_unit_count_mismatch():
    with pytest.raises(FeatureSpecError, match="appears twice"):
        FeatureSpec(("a", "a"), ("x", "y"))
    with pytest.raises(FeatureSpecError, match="2 names but 1 units"):
        FeatureSpec(("a", "b"), ("x",))


def test_saving_again_replaces_the_files_atomically(tmp_path):
    bundle().save(tmp_path)
    bundle(policy_version="test-2").save(tmp_path)
    assert PolicyBundle.load(tmp_path).policy_version == "test-2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json", "weights.npz"]
    with zipfile.ZipFile(tmp_path / "weights.npz") as z:
        assert sorted(z.namelist()) == ["fc.bias.npy", "fc.weight.npy"]
