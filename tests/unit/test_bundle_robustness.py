"""Malformed policy bundles: every one is a one-line :class:`policy.bundle.BundleError` naming the bundle directory
and the manifest field, raised while loading (never a TypeError / AttributeError / BadZipFile / MemoryError from
deep inside), the same in ``hrl-policy bundle check``, ``hrl-extender`` and ``hrl-descheduler`` (exit 2, one line);
the descheduler's line starts with its configuration field; the encoder lookup falls back to the committed
encoder when a sibling ``encoder/`` is broken or another version.

Damaged bundles are copies of the committed ones made in ``tmp_path`` (the committed bundles are never touched)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from descheduler.config import load_descheduler_config, placement_from_config, planner_from_config
from policy.bundle import MAX_DIM, BundleError, BundleMissing, PolicyBundle, bundle_error_line
from policy.cli.bundle import check_bundle
from policy.cli.core import main as policy_main
from policy.encoder import DEFAULT_ENCODER_BUNDLE
from policy.highlevel import load_learned_autoscaler
from policy.lowlevel import LearnedPlacement, encoder_for

ROOT = Path(__file__).resolve().parents[2]
BUNDLES = ROOT / "policy" / "bundles"
LOW = BUNDLES / "hrl-scheduler" / "low"
HIGH = BUNDLES / "hrl-scheduler" / "high"
FIXTURE = ROOT / "tests" / "fixtures" / "descheduler" / "cluster-list.json"
HEAD = {"apiVersion": "hrl-scheduler.io/v1alpha1"}


def copy_bundle(src: Path, dst: Path, edit: Callable[[dict], Any] | None = None) -> Path:
    shutil.copytree(src, dst)
    if edit is not None:
        m = json.loads((dst / "manifest.json").read_text())
        edit(m)
        (dst / "manifest.json").write_text(json.dumps(m))
    return dst


def low_copy(tmp_path: Path, edit: Callable[[dict], Any] | None = None) -> Path:
    """A copy of the committed low bundle at ``tmp_path/stack/low`` (its sibling ``tmp_path/encoder`` absent)."""
    return copy_bundle(LOW, tmp_path / "stack" / "low", edit)


def setter(*path: str, value: Any) -> Callable[[dict], None]:
    def edit(m: dict) -> None:
        o = m
        for k in path[:-1]:
            o = o[k]
        o[path[-1]] = value

    return edit


def deleter(*path: str) -> Callable[[dict], None]:
    def edit(m: dict) -> None:
        o = m
        for k in path[:-1]:
            o = o[k]
        del o[path[-1]]

    return edit


def assert_one_line_naming(msg: str, bundle: Path, *needles: str) -> None:
    assert "\n" not in msg, msg
    assert str(bundle) in msg, msg
    for n in needles:
        assert n in msg, msg


# ---- M1: malformed manifests are BundleErrors naming the bundle and the field -------------------------------

MALFORMED = [
    ("shape given as an integer", setter("weights", "arrays", "net.0.bias", value=64), "weights.arrays['net.0.bias']"),
    ("shape with a float", setter("weights", "arrays", "net.0.bias", value=[64.0]), "weights.arrays['net.0.bias']"),
    ("temperature null", setter("architecture", "temperature", value=None), "architecture.temperature"),
    ("temperature text", setter("architecture", "temperature", value="hot"), "architecture.temperature"),
    ("temperature zero", setter("architecture", "temperature", value=0), "architecture.temperature"),
    ("extender_weight null", setter("architecture", "extender_weight", value=None), "architecture.extender_weight"),
    (
        "extender_weight fractional",
        setter("architecture", "extender_weight", value=2.5),
        "architecture.extender_weight",
    ),
    ("intent_gain text", setter("architecture", "intent_gain", value="3"), "architecture.intent_gain"),
    ("encoder_version a number", setter("architecture", "encoder_version", value=5), "architecture.encoder_version"),
    (
        "service_input flat on an encoder bundle",
        setter("architecture", "service_input", value="flat"),
        "architecture.service_input",
    ),
    ("normalization entry a list", setter("normalization", "candidate", value=[1, 2]), "normalization.candidate"),
    ("normalization entry a string", setter("normalization", "candidate", value="abc"), "normalization.candidate"),
    (
        "normalization mean a string",
        setter("normalization", "candidate", "mean", value="abc"),
        "normalization.candidate.mean",
    ),
    ("normalization mean missing", deleter("normalization", "candidate", "mean"), "normalization.candidate"),
    ("normalization a list", setter("normalization", value=[1]), "normalization"),
    ("metadata a string", setter("metadata", value="x"), "metadata"),
    ("dims beyond any sane size", setter("dims", "layers", value=MAX_DIM + 1), "dims.layers"),
    ("dims.layers above what the arrays hold", setter("dims", "layers", value=MAX_DIM), "dims.layers"),
    ("dims.layers a float", setter("dims", "layers", value=1e9), "dims.layers"),
    ("dims.layers negative", setter("dims", "layers", value=-2), "dims.layers"),
    ("dims.hidden zero", setter("dims", "hidden", value=0), "dims.hidden"),
    ("dims.service_dim disagreeing with the spec", setter("dims", "service_dim", value=60000), "dims.service_dim"),
    ("dims.features disagreeing with the spec", setter("dims", "features", value=7), "dims.features"),
    ("dims a list", setter("dims", value=[1]), "dims"),
    ("policy_version missing", deleter("policy_version"), "policy_version"),
    ("sha256 empty", setter("weights", "sha256", value=""), "weights.sha256"),
    ("sha256 missing", deleter("weights", "sha256"), "weights.sha256"),
    ("sha256 not text", setter("weights", "sha256", value=7), "weights.sha256"),
]


@pytest.mark.parametrize("edit,field", [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_a_malformed_low_bundle_is_refused_at_load_with_one_line_naming_the_bundle_and_the_field(tmp_path, edit, field):
    d = low_copy(tmp_path, edit)
    with pytest.raises(BundleError) as e:
        LearnedPlacement.load(d)
    assert_one_line_naming(str(e.value), d, field)


def test_an_empty_checksum_is_refused_even_when_the_weights_are_truncated(tmp_path):
    d = low_copy(tmp_path, setter("weights", "sha256", value=""))
    data = (d / "weights.npz").read_bytes()
    (d / "weights.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(BundleError) as e:
        PolicyBundle.load(d)
    assert_one_line_naming(str(e.value), d, "weights.sha256", "found ''")


def test_unreadable_weights_with_a_matching_checksum_are_a_bundle_error_not_a_zip_error(tmp_path):
    d = low_copy(tmp_path)
    data = (d / "weights.npz").read_bytes()[:100]
    (d / "weights.npz").write_bytes(data)
    m = json.loads((d / "manifest.json").read_text())
    m["weights"]["sha256"] = hashlib.sha256(data).hexdigest()
    (d / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(BundleError) as e:
        PolicyBundle.load(d)
    assert_one_line_naming(str(e.value), d, "weights.npz: not a readable npz")


def test_a_binary_manifest_is_refused_naming_the_bundle(tmp_path):
    d = low_copy(tmp_path)
    (d / "manifest.json").write_bytes(b"\xff\xfe\x00garbage\x80")
    with pytest.raises(BundleError) as e:
        PolicyBundle.load(d)
    assert_one_line_naming(str(e.value), d, "manifest.json: not UTF-8")


def test_generic_loading_bounds_dims_before_any_loader_sizes_anything_by_them(tmp_path):
    d = low_copy(tmp_path, setter("dims", "layers", value=10**9))
    with pytest.raises(BundleError) as e:
        PolicyBundle.load(d)
    assert_one_line_naming(str(e.value), d, f"dims.layers: expected an integer in 0..{MAX_DIM}")


def test_the_committed_bundles_still_load():
    assert LearnedPlacement.load(LOW).temperature == 20.0
    assert LearnedPlacement.load(BUNDLES / "hrl-no-encoder" / "low").service_input == "flat"
    load_learned_autoscaler(HIGH)
    load_learned_autoscaler(BUNDLES / "drpc")


# ---- high bundles -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "part,edit,field",
    [
        ("student", setter("dims", "layers", value=MAX_DIM), "dims.layers"),
        ("student", setter("metadata", "action_mapping", value=5), "metadata.action_mapping"),
        ("student", setter("weights", "sha256", value=""), "weights.sha256"),
        ("predictor", setter("dims", "hidden", value=31), "weights["),
    ],
    ids=["student layers", "student action mapping", "student checksum", "predictor shape"],
)
def test_a_malformed_high_bundle_names_the_directory_and_the_field(tmp_path, part, edit, field):
    d = tmp_path / "high"
    shutil.copytree(HIGH, d)
    copy = d / part / "manifest.json"
    m = json.loads(copy.read_text())
    edit(m)
    copy.write_text(json.dumps(m))
    with pytest.raises(BundleError) as e:
        load_learned_autoscaler(d)
    assert_one_line_naming(str(e.value), d / part, field)


# ---- M2: hrl-policy bundle check ----------------------------------------------------------------------------


def run_check(capsys, *argv: str) -> tuple[int, str, str]:
    rc = policy_main(["bundle", "check", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize(
    "path,level",
    [
        (LOW, "low"),
        (HIGH, "high"),
        (BUNDLES / "drpc", "high"),
        (DEFAULT_ENCODER_BUNDLE, "encoder"),
        (BUNDLES / "hrl-no-encoder" / "low", "low"),
    ],
)
def test_bundle_check_accepts_the_committed_bundles_naming_level_version_and_path(capsys, path, level):
    rc, out, err = run_check(capsys, str(path))
    assert rc == 0 and err == ""
    assert out.startswith(f"ok: {level} ") and out.endswith(f" ({path})\n") and out.count("\n") == 1


@pytest.mark.parametrize(
    "edit,field",
    [
        (setter("architecture", "encoder_version", value="encoder-other"), "encoder-other"),
        (setter("architecture", "temperature", value=None), "architecture.temperature"),
        (setter("architecture", "service_input", value="flat"), "architecture.service_input"),
        (setter("dims", "hidden", value=-1), "dims.hidden"),
        (setter("architecture", "extender_weight", value=None), "architecture.extender_weight"),
        (setter("normalization", "candidate", value=[1]), "normalization.candidate"),
    ],
    ids=["encoder version", "temperature null", "flat input", "negative dims", "extender weight null", "norm list"],
)
def test_bundle_check_refuses_what_the_extender_refuses_with_one_line_and_exit_2(capsys, tmp_path, edit, field):
    d = low_copy(tmp_path, edit)
    rc, out, err = run_check(capsys, str(d))
    assert rc == 2 and out == ""
    assert err.startswith("hrl-policy bundle check: error: ") and err.count("\n") == 1
    assert_one_line_naming(err.strip(), d, field)


def test_bundle_check_of_a_single_high_bundle_hints_at_its_parent(capsys):
    rc, _out, err = run_check(capsys, str(HIGH / "student"))
    assert rc == 2 and err.count("\n") == 1
    assert "is a single bundle" in err and f"name its parent, {HIGH}" in err and "student/student" not in err


def test_bundle_check_with_a_level_the_manifest_does_not_declare_is_refused(capsys):
    rc, _out, err = run_check(capsys, "--level", "encoder", str(LOW))
    assert rc == 2 and "level: expected 'encoder', found 'low'" in err and str(LOW) in err


def test_bundle_check_of_a_missing_directory_says_so(tmp_path):
    with pytest.raises(BundleError, match="no such directory"):
        check_bundle(tmp_path / "nope")


# ---- L1: the descheduler names the configuration field ------------------------------------------------------


def des_config(**sections: Any):
    return load_descheduler_config({**HEAD, "kind": "DeschedulerConfiguration", **sections})


def test_the_descheduler_names_the_autoscaler_field_and_suggests_make_train_only_for_the_default(tmp_path):
    cfg = des_config(planner={"name": "hierarchical", "autoscaler": {"name": "drpc", "bundle": str(tmp_path / "x")}})
    with pytest.raises(ValueError) as e:
        planner_from_config(cfg)
    msg = str(e.value)
    assert msg.startswith("planner.autoscaler.bundle: ") and str(tmp_path / "x") in msg and "make train" not in msg
    default = bundle_error_line("planner.autoscaler.bundle", BundleMissing("m", tmp_path / "student"), default=True)
    assert default.startswith("planner.autoscaler.bundle: ") and "make train" in default


def test_an_autoscaler_bundle_pointing_at_student_itself_gets_a_hint_naming_the_parent():
    cfg = des_config(
        planner={"name": "hierarchical", "autoscaler": {"name": "drpc", "bundle": str(BUNDLES / "drpc" / "student")}}
    )
    with pytest.raises(ValueError) as e:
        planner_from_config(cfg)
    msg = str(e.value)
    assert msg.startswith("planner.autoscaler.bundle: ") and "student/student" not in msg
    assert f"name its parent, {BUNDLES / 'drpc'}" in msg


def test_a_malformed_placement_bundle_is_reported_under_its_field(tmp_path):
    d = low_copy(tmp_path, setter("architecture", "temperature", value=None))
    with pytest.raises(ValueError) as e:
        placement_from_config(des_config(placement={"name": "learned", "bundle": str(d)}))
    assert str(e.value).startswith("placement.bundle: ")
    assert_one_line_naming(str(e.value), d, "architecture.temperature")


# ---- L4: the encoder lookup falls back to the committed encoder ---------------------------------------------


def test_a_broken_sibling_encoder_falls_back_to_the_committed_one(tmp_path):
    d = low_copy(tmp_path)
    (tmp_path / "encoder").mkdir()
    (tmp_path / "encoder" / "manifest.json").write_text("{")
    p = LearnedPlacement.load(d)
    assert Path(p.encoder.bundle.source) == Path(DEFAULT_ENCODER_BUNDLE).resolve()


def test_a_sibling_encoder_of_another_version_falls_back_to_the_committed_one(tmp_path):
    d = low_copy(tmp_path)
    copy_bundle(DEFAULT_ENCODER_BUNDLE, tmp_path / "encoder", setter("policy_version", value="encoder-other"))
    p = LearnedPlacement.load(d)
    assert Path(p.encoder.bundle.source) == Path(DEFAULT_ENCODER_BUNDLE).resolve()


def test_a_matching_sibling_encoder_is_preferred(tmp_path):
    d = low_copy(tmp_path)
    copy_bundle(DEFAULT_ENCODER_BUNDLE, tmp_path / "encoder")
    assert Path(LearnedPlacement.load(d).encoder.bundle.source) == (tmp_path / "encoder").resolve()


def test_when_no_encoder_matches_the_error_names_every_encoder_path_tried(tmp_path):
    d = low_copy(tmp_path, setter("architecture", "encoder_version", value="encoder-other"))
    (tmp_path / "encoder").mkdir()
    (tmp_path / "encoder" / "manifest.json").write_text("{")
    with pytest.raises(BundleError) as e:
        encoder_for(d, "encoder-other")
    msg = str(e.value)
    assert "\n" not in msg and str((tmp_path / "encoder").resolve()) in msg
    assert str(Path(DEFAULT_ENCODER_BUNDLE).resolve()) in msg and "encoder-other" in msg


# ---- the real command lines ----------------------------------------------------------------------------------


def run_cli(module: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip() and ": note: " not in line]


@pytest.mark.parametrize(
    "edit,field",
    [
        (setter("weights", "arrays", "net.0.bias", value=64), "weights.arrays['net.0.bias']"),
        (setter("architecture", "temperature", value=None), "architecture.temperature"),
    ],
    ids=["integer shape", "temperature null"],
)
def test_hrl_extender_exits_2_with_one_line_naming_the_field_and_the_bundle(tmp_path, edit, field):
    d = low_copy(tmp_path, edit)
    cfg = tmp_path / "extender.yaml"
    cfg.write_text(
        json.dumps(
            {
                **HEAD,
                "kind": "ExtenderConfiguration",
                "listen": {"port": 0},
                "policy": {"name": "learned", "bundle": str(d)},
            }
        )
    )
    r = run_cli("extender", "--config", str(cfg))
    assert r.returncode == 2, r.stderr
    # the configuration error format of every component (issue 14): FILE: policy.bundle: problem
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(f"{cfg}: policy.bundle: ")
    assert_one_line_naming(r.stderr.strip(), d, field)


def test_hrl_descheduler_exits_2_with_one_line_starting_with_the_field(tmp_path):
    d = low_copy(tmp_path, setter("normalization", "candidate", value=[1, 2]))
    cfg = tmp_path / "descheduler.yaml"
    cfg.write_text(
        json.dumps({**HEAD, "kind": "DeschedulerConfiguration", "placement": {"name": "learned", "bundle": str(d)}})
    )
    r = run_cli("descheduler", "--config", str(cfg), "--once", "--snapshot", str(FIXTURE))
    assert r.returncode == 2, r.stderr
    (line,) = error_lines(r.stderr)
    assert line.startswith("hrl-descheduler: placement.bundle: ")
    assert_one_line_naming(line, d, "normalization.candidate")


def test_hrl_policy_bundle_check_exits_2_with_one_line(tmp_path):
    d = low_copy(tmp_path, setter("weights", "sha256", value=""))
    r = run_cli("policy.cli", "bundle", "check", str(d))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("hrl-policy bundle check: error: ")
    assert_one_line_naming(r.stderr.strip(), d, "weights.sha256")


# ---- issue 13: the zip bomb ------------------------------------------------------------------------------------

BOMB_ARRAY = "net.0.weight"
BOMB_SHAPE = [75_000_000]  # float64: 600 MB of zeros, about 0.6 MB once deflated (built here, never committed)


def write_bomb(bundle: Path, manifest_shape: list[int] | None) -> None:
    """Replace array ``BOMB_ARRAY`` of ``bundle``'s weights.npz by 600 MB of zeros (deflated, streamed: never held
    in memory here), update the manifest's sha256 and, when given, the array's listed shape."""
    import zipfile

    import numpy as np

    src = bundle / "weights.npz"
    with np.load(src, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    out = bundle / "weights.bomb"
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for name, a in sorted(arrays.items()):
            with zf.open(f"{name}.npy", "w", force_zip64=True) as f:
                if name != BOMB_ARRAY:
                    np.lib.format.write_array(f, a, allow_pickle=False)
                    continue
                header = {"descr": "<f8", "fortran_order": False, "shape": tuple(BOMB_SHAPE)}
                np.lib.format.write_array_header_1_0(f, header)
                left = BOMB_SHAPE[0] * 8
                chunk = bytes(8 << 20)
                while left > 0:
                    f.write(chunk[: min(left, len(chunk))])
                    left -= len(chunk)
    out.replace(src)
    m = json.loads((bundle / "manifest.json").read_text())
    m["weights"]["sha256"] = hashlib.sha256(src.read_bytes()).hexdigest()
    if manifest_shape is not None:
        m["weights"]["arrays"][BOMB_ARRAY] = manifest_shape
    (bundle / "manifest.json").write_text(json.dumps(m))


_MEASURED = (
    "import sys\n"
    "from policy.cli import main\n"
    "rc = main(sys.argv[1:])\n"
    "hwm = [x for x in open('/proc/self/status') if x.startswith('VmHWM:')][0].split()[1]\n"
    "print(f'peak-rss-kib {hwm}', file=sys.stderr)\n"
    "sys.exit(rc)\n"
)


def run_measured(*argv: str) -> tuple[int, str, int]:
    """``(exit status, stderr without the measurement line, peak RSS in MiB)`` of ``hrl-policy ARGV`` in a child
    process. The peak is the child's own ``VmHWM`` (Linux): its ``ru_maxrss`` would include the test runner's
    memory, inherited across fork and exec."""
    p = subprocess.run([sys.executable, "-c", _MEASURED, *argv], cwd=ROOT, capture_output=True, text=True, timeout=300)
    lines = p.stderr.splitlines()
    kib = int(next(x for x in lines if x.startswith("peak-rss-kib ")).split()[1])
    err = "\n".join(x for x in lines if not x.startswith("peak-rss-kib ")) + "\n"
    return p.returncode, err, kib // 1024


@pytest.mark.parametrize(
    "manifest_shape,says",
    [
        (None, f"weights[{BOMB_ARRAY!r}]: expected shape"),  # the manifest lists the real shape: the header lies
        (BOMB_SHAPE, "refused before decompressing"),  # the manifest agrees with the bomb: the size cap refuses it
    ],
    ids=["shape-from-header", "size-cap"],
)
def test_a_zip_bomb_is_refused_from_its_headers_without_decompressing(tmp_path, manifest_shape, says):
    bundle = low_copy(tmp_path)
    assert BOMB_ARRAY in json.loads((bundle / "manifest.json").read_text())["weights"]["arrays"]
    write_bomb(bundle, manifest_shape)
    assert (bundle / "weights.npz").stat().st_size < 8 << 20  # small on disk
    rc, err, rss_mib = run_measured("bundle", "check", str(bundle))
    assert rc == 2 and len(error_lines(err)) == 1 and says in err and str(bundle) in err, err
    # the 600 MB array was never decompressed: the checking process stays far below its size
    assert rss_mib < 300, f"peak RSS {rss_mib} MiB"
