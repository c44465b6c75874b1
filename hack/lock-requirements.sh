#!/usr/bin/env bash
# Regenerate manifests/images/requirements.lock, the images' exact runtime dependencies (pyproject.toml's
# `dependencies`, no extras: no torch), with hashes, for CPython 3.11 on Linux, with uv (installed into ./.venv
# when missing). Run after changing the dependencies; tests/unit/test_images.py checks the lock still matches.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
uv="$root/.venv/bin/uv"
[ -x "$uv" ] || "$root/.venv/bin/python" -m pip install -q 'uv==0.13.8'
cd "$root"
"$uv" pip compile pyproject.toml --python-version 3.11 --python-platform linux --generate-hashes -q \
  -o manifests/images/requirements.lock
echo "lock-requirements: wrote manifests/images/requirements.lock" >&2
