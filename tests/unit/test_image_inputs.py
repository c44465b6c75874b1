"""The inputs of `make images`, checked without building (tests/integration/test_images.py builds and runs them):
the lock files pin every package with hashes and satisfy pyproject.toml's runtime dependencies (so an image built
from them has what the code imports, and no torch), the build lock has the build stage's tools, and the scripts
parse and name their inputs."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "manifests" / "images"


def pins(lock: Path) -> dict[str, tuple[str, int]]:
    """package -> (version, number of hashes) of a `uv pip compile --generate-hashes` lock file."""
    text = re.sub(r"\\\n\s*", " ", lock.read_text())
    out = {}
    for line in text.splitlines():
        if line and not line.startswith(("#", " ")):
            m = re.match(r"([A-Za-z0-9_.-]+)==(\S+)", line)
            assert m, f"{lock.name}: not a pinned requirement: {line[:80]}"
            out[canonicalize_name(m[1])] = (m[2], line.count("--hash=sha256:"))
    return out


def test_the_runtime_lock_satisfies_every_runtime_dependency_of_pyproject_and_has_no_torch():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    locked = pins(IMAGES / "requirements.lock")
    env = {"sys_platform": "linux", "python_version": "3.11", "platform_system": "Linux"}
    for dep in map(Requirement, deps):
        if dep.marker is not None and not dep.marker.evaluate(env):
            continue
        name = canonicalize_name(dep.name)
        assert name in locked, (
            f"{dep.name} is a dependency but not in requirements.lock (run hack/lock-requirements.sh)"
        )
        assert dep.specifier.contains(locked[name][0], prereleases=True), (dep, locked[name][0])
    assert "torch" not in locked and all(n >= 1 for _, n in locked.values())


def test_the_build_lock_pins_the_build_stages_tools_with_hashes():
    locked = pins(IMAGES / "build-requirements.lock")
    assert {"pip", "setuptools", "wheel"} <= set(locked) and all(n >= 1 for _, n in locked.values())
    backend = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    for req in map(Requirement, backend):
        assert req.specifier.contains(locked[canonicalize_name(req.name)][0]), req


def test_the_check_catches_a_lock_that_misses_a_dependency(tmp_path):
    broken = tmp_path / "requirements.lock"
    broken.write_text(re.sub(r"(?ms)^msgspec==.*?(?=^\S)", "", (IMAGES / "requirements.lock").read_text()))
    assert "msgspec" in pins(IMAGES / "requirements.lock") and "msgspec" not in pins(broken)


@pytest.mark.parametrize(
    "script", ["build-images.sh", "build-base.sh", "install-image-tools.sh", "lock-requirements.sh"]
)
def test_the_image_scripts_parse_and_are_executable(script):
    path = ROOT / "hack" / script
    assert path.stat().st_mode & 0o111, f"{script} is not executable"
    out = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_the_base_is_keyed_by_the_content_that_decides_it_and_cached_outside_the_repository(tmp_path):
    out = subprocess.run([str(ROOT / "hack" / "build-base.sh"), "--print"], capture_output=True, text=True,
                         env={"HRL_IMAGE_CACHE": str(tmp_path), "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert out.returncode == 0, out.stderr
    path = Path(out.stdout.strip())
    assert path.parent == tmp_path and re.fullmatch(r"debian-bookworm-[0-9a-f]{16}\.tar", path.name)
    other = subprocess.run([str(ROOT / "hack" / "build-base.sh"), "--print"], capture_output=True, text=True,
                           env={"HRL_IMAGE_CACHE": str(tmp_path), "PATH": "/usr/bin:/bin",
                                "HRL_DEBIAN_MIRROR": "http://mirror.example/debian"})  # fmt: skip
    assert Path(other.stdout.strip()).name != path.name  # another mirror, another base
