#!/usr/bin/env bash
# Regenerate the images' lock files with uv (installed into ./.venv when missing), for CPython 3.11 on Linux (the
# interpreter of the images' Debian base, hack/build-base.sh), with hashes:
#   manifests/images/requirements.lock        the runtime: pyproject.toml's `dependencies`, no extras (no torch)
#   manifests/images/build-requirements.lock  the build stage's tools (build-requirements.in: pip, setuptools, wheel)
# Run after changing the dependencies; tests/unit/test_image_inputs.py fails when the runtime lock no longer satisfies
# pyproject.toml.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
uv="$root/.venv/bin/uv"
[ -x "$uv" ] || "$root/.venv/bin/python" -m pip install -q 'uv==0.13.8'
cd "$root"
common=(--python-version 3.11 --python-platform linux --generate-hashes -q)
"$uv" pip compile pyproject.toml "${common[@]}" -o manifests/images/requirements.lock
"$uv" pip compile manifests/images/build-requirements.in "${common[@]}" -o manifests/images/build-requirements.lock
echo "lock-requirements: wrote manifests/images/requirements.lock, manifests/images/build-requirements.lock" >&2
