#!/usr/bin/env bash
# `pytest` (what contributors and IDEs run) and `python -m pytest` (what `make test` runs) collect the same suite
# from the repository root: same count, no collection error. Run by `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
count() { "$@" --collect-only -q 2>&1 | tail -n 1 | sed -E 's/ in [0-9.]+s.*$//'; }
bare=$(count "$VENV/bin/pytest")
module=$(count "$VENV/bin/python" -m pytest)
echo "pytest: $bare; python -m pytest: $module"
case "$bare" in *error*|*rror*|*"no tests"*) echo "check-collection: bare pytest failed to collect: $bare" >&2; exit 1;; esac
if [ "$bare" != "$module" ]; then
  echo "check-collection: pytest and python -m pytest collect different suites ($bare vs $module)" >&2
  exit 1
fi
