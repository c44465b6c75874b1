#!/usr/bin/env bash
# Check the committed gRPC stubs (policy/cache/proto/, scheduler-plugin/pkg/proto/embeddingsv1/) are what
# hack/gen-proto.sh generates from the .proto files.
# Exit 0 when identical; 1 with a diff when stale (run hack/gen-proto.sh); 2 when grpcio-tools is missing, 3 without Go.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
"$ROOT/hack/gen-proto.sh" "$TMP"
status=0
for f in "$TMP"/policy/cache/proto/* "$TMP"/scheduler-plugin/pkg/proto/embeddingsv1/*; do
  rel="${f#"$TMP"/}"
  if ! diff -u "$ROOT/$rel" "$f" >"$TMP/diff" 2>&1; then
    echo "verify-proto: $rel is stale; run hack/gen-proto.sh" >&2
    cat "$TMP/diff" >&2
    status=1
  fi
done
[ $status -eq 0 ] && echo "verify-proto: policy/cache/proto and scheduler-plugin/pkg/proto stubs are up to date"
exit $status
