#!/usr/bin/env bash
# Build Helm (the `helm` CLI of helm.sh/helm/v4) from the Go tool module in hack/controlplane/helm (go.mod +
# go.sum only, committed) into a cache directory outside the repository, keyed by version, the way
# hack/build-controlplane.sh builds the control plane. A no-op when the binary is there and reports the version.
# The chart tests (tests/unit/test_chart.py, tests/integration/test_chart_controlplane.py) use it.
#
#   hack/build-helm.sh            build when missing, print the binary's path on the last line
#   hack/build-helm.sh --print    print the binary's path, build nothing
#   HRL_CP_CACHE=/path            cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/hrl-scheduler)
#   HRL_CP_TIMINGS=/path/file.tsv append "helm wall_s peak_rss_kb"
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mod="$here/controlplane/helm"
HELM_VERSION=$(sed -n 's|^[[:space:]]*\(require \)\{0,1\}helm.sh/helm/v4 \(v[^ ]*\).*|\2|p' "$mod/go.mod" | head -n1)
[ -n "$HELM_VERSION" ] || { echo "build-helm: cannot read the helm version from $mod/go.mod" >&2; exit 2; }
cache_root=${HRL_CP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hrl-scheduler}
BIN="$cache_root/helm-$HELM_VERSION/bin/helm"

case "${1:-}" in
  --print) echo "$BIN"; exit 0 ;;
  "") ;;
  *) echo "build-helm: unknown argument '$1' (expected --print)" >&2; exit 2 ;;
esac

ok() { [ -x "$BIN" ] && "$BIN" version --template '{{.Version}}' 2>/dev/null | grep -x "$HELM_VERSION" >/dev/null; }
log() { printf '[build-helm] %s\n' "$*" >&2; }

if ok; then log "helm $HELM_VERSION: cached in $(dirname "$BIN")"; echo "$BIN"; exit 0; fi
command -v go >/dev/null 2>&1 || {
  echo "build-helm: Go is not installed (need go >= 1.26 on PATH to build helm)" >&2; exit 3; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
mkdir -p "$(dirname "$BIN")"
log "building helm $HELM_VERSION (cold: about 2-4 min on 2 cores)"
t0=$(date +%s)
V=helm.sh/helm/v4/internal/version
(cd "$mod" && go build -trimpath \
    -ldflags="-s -w -X $V.version=$HELM_VERSION -X $V.metadata= -X $V.gitTreeState=clean" \
    -o "$BIN" helm.sh/helm/v4/cmd/helm)
wall=$(( $(date +%s) - t0 ))
log "helm built in ${wall}s"
if [ -n "${HRL_CP_TIMINGS:-}" ]; then printf 'helm\t%s\t\n' "$wall" >> "$HRL_CP_TIMINGS"; fi
ok || { echo "build-helm: $BIN does not report $HELM_VERSION after the build" >&2; exit 1; }
echo "$BIN"
