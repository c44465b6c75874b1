#!/usr/bin/env bash
# Check the committed gRPC stubs in policy/cache/proto/ are what hack/gen-proto.sh generates from the .proto files.
# Exit 0 when identical; 1 with a diff when stale (run hack/gen-proto.sh); 2 when grpcio-tools is missing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
"$ROOT/hack/gen-proto.sh" "$TMP"
status=0
for f in "$TMP"/policy/cache/proto/*; do
  name="$(basename "$f")"
  if ! diff -u "$ROOT/policy/cache/proto/$name" "$f" >"$TMP/diff" 2>&1; then
    echo "verify-proto: policy/cache/proto/$name is stale; run hack/gen-proto.sh" >&2
    cat "$TMP/diff" >&2
    status=1
  fi
done
[ $status -eq 0 ] && echo "verify-proto: policy/cache/proto stubs are up to date"
exit $status
