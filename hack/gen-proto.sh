#!/usr/bin/env bash
# Regenerate the Python gRPC stubs of policy/cache/proto/*.proto into policy/cache/proto/ (or into $1, for verify-proto.sh).
# Uses grpcio-tools (the [test] extra) from ./.venv, or $PYTHON. The stubs are committed; run this after
# editing a .proto, then hack/verify-proto.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$ROOT}"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PY" ] || PY=python3
cd "$ROOT"
"$PY" -c "import grpc_tools" 2>/dev/null || { echo "gen-proto: grpcio-tools is missing (pip install grpcio-tools)" >&2; exit 2; }
mkdir -p "$OUT/policy/cache/proto"
# -I. keeps the package path in the generated imports: "from policy.cache.proto import embeddings_pb2".
"$PY" -m grpc_tools.protoc -I. --python_out="$OUT" --pyi_out="$OUT" --grpc_python_out="$OUT" policy/cache/proto/*.proto
