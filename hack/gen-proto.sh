#!/usr/bin/env bash
# Regenerate the gRPC stubs of policy/cache/proto/*.proto: the Python ones into policy/cache/proto/ and the Go ones
# of the scheduler plugin into scheduler-plugin/pkg/proto/embeddingsv1/ (or both under $1, for verify-proto.sh).
# Uses grpcio-tools (the [test] extra) from ./.venv, or $PYTHON, for protoc; the Go code generators
# (protoc-gen-go, protoc-gen-go-grpc) are built from the tool module hack/controlplane/protoc-gen (go.mod + go.sum,
# versions pinned there) into the cache next to the control plane's binaries. The stubs are committed; run this
# after editing a .proto, then hack/verify-proto.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$ROOT}"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PY" ] || PY=python3
cd "$ROOT"
"$PY" -c "import grpc_tools" 2>/dev/null || { echo "gen-proto: grpcio-tools is missing (pip install grpcio-tools)" >&2; exit 2; }
command -v go >/dev/null 2>&1 || { echo "gen-proto: Go is not installed (need go >= 1.26 on PATH for the Go stubs)" >&2; exit 3; }
mkdir -p "$OUT/policy/cache/proto" "$OUT/scheduler-plugin"
# -I. keeps the package path in the generated imports: "from policy.cache.proto import embeddings_pb2".
"$PY" -m grpc_tools.protoc -I. --python_out="$OUT" --pyi_out="$OUT" --grpc_python_out="$OUT" policy/cache/proto/*.proto

gen="$ROOT/hack/controlplane/protoc-gen"
key=$(cat "$gen/go.mod" "$gen/go.sum" | sha256sum | cut -c1-12)
bin="${HRL_CP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hrl-scheduler}/protoc-gen-$key"
if [ ! -x "$bin/protoc-gen-go" ] || [ ! -x "$bin/protoc-gen-go-grpc" ]; then
  mkdir -p "$bin"
  (cd "$gen" && GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -o "$bin/" \
      google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc)
fi
mod=github.com/hrl-scheduler/hrl-scheduler/scheduler-plugin
"$PY" -m grpc_tools.protoc -I. \
  --plugin=protoc-gen-go="$bin/protoc-gen-go" --plugin=protoc-gen-go-grpc="$bin/protoc-gen-go-grpc" \
  --go_out="$OUT/scheduler-plugin" --go_opt=module=$mod \
  --go-grpc_out="$OUT/scheduler-plugin" --go-grpc_opt=module=$mod \
  policy/cache/proto/*.proto
