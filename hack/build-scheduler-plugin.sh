#!/usr/bin/env bash
# Build kube-scheduler with hrl-scheduler's HRLScore plugin registered (scheduler-plugin/cmd/kube-scheduler, the
# scheduler-plugins pattern) and the plugin's parity checker (scheduler-plugin/cmd/hrl-score-check) from the Go module
# scheduler-plugin/, into a cache directory outside the repository keyed by the Kubernetes version and a hash of the
# plugin's source. A no-op when both binaries are there and report the expected versions.
#
# The module pins the same k8s.io/kubernetes as the control plane's tool module (hack/controlplane/k8s) and the build
# uses the same flags (-trimpath, tags, CGO_ENABLED=0, GOTOOLCHAIN=local), so every Kubernetes package comes from the
# Go build cache the control-plane build filled: a cold plugin build after the control plane compiles our packages
# and links (figures: BENCHMARKS.md, section controlplane-build). The script refuses to build when the two modules
# select different versions of a module they share (that would recompile everything above it).
#
#   hack/build-scheduler-plugin.sh           build what is missing, print the bin directory
#   hack/build-scheduler-plugin.sh --print   print the bin directory, build nothing
#   hack/build-scheduler-plugin.sh --check   only compare the two modules' versions (exit 1 with the differences)
#   HRL_CP_CACHE=/path                       cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/hrl-scheduler)
#   HRL_CP_TIMINGS=/path/file.tsv            append "component wall_s peak_rss_kb" per build step
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
mod="$root/scheduler-plugin"
cpmod="$here/controlplane/k8s"

modver() { sed -n "s|^[[:space:]]*\(require \)\{0,1\}$2 \(v[^ ]*\).*|\2|p" "$1/go.mod" | head -n1; }
KUBE_VERSION=$(modver "$mod" k8s.io/kubernetes)
CP_VERSION=$(modver "$cpmod" k8s.io/kubernetes)
[ -n "$KUBE_VERSION" ] || { echo "build-scheduler-plugin: cannot read k8s.io/kubernetes from $mod/go.mod" >&2; exit 2; }
if [ "$KUBE_VERSION" != "$CP_VERSION" ]; then
  echo "build-scheduler-plugin: scheduler-plugin/go.mod pins k8s.io/kubernetes $KUBE_VERSION, hack/controlplane/k8s" \
       "pins $CP_VERSION: keep them equal (the builds share the Go build cache)" >&2
  exit 2
fi
# the source's identity: go.mod, go.sum and every .go file but the tests, by content
src_hash=$(cd "$mod" && find . -type f \( -name '*.go' -o -name go.mod -o -name go.sum \) ! -name '*_test.go' -print0 | LC_ALL=C sort -z \
  | xargs -0 sha256sum | sha256sum | cut -c1-12)
cache_root=${HRL_CP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hrl-scheduler}
BIN="$cache_root/scheduler-plugin-k8s-$KUBE_VERSION-$src_hash/bin"

mode=build
case "${1:-}" in
  "") ;;
  --print) echo "$BIN"; exit 0 ;;
  --check) mode=check ;;
  *) echo "build-scheduler-plugin: unknown argument '$1' (expected --print or --check)" >&2; exit 2 ;;
esac

command -v go >/dev/null 2>&1 || {
  echo "build-scheduler-plugin: Go is not installed (need go >= 1.26 on PATH to build the plugin)" >&2; exit 3; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
log() { printf '[build-scheduler-plugin] %s\n' "$*" >&2; }

# Every module both builds select must be at the same version, or the shared build cache does not help.
check_versions() {
  local a b
  a=$(cd "$mod" && go list -m -f '{{.Path}} {{.Version}}{{with .Replace}} {{.Version}}{{end}}' all | sort)
  b=$(cd "$cpmod" && go list -m -f '{{.Path}} {{.Version}}{{with .Replace}} {{.Version}}{{end}}' all | sort)
  local diffs
  diffs=$(join <(echo "$a" | awk '{print $1, $NF}') <(echo "$b" | awk '{print $1, $NF}') | awk '$2 != $3')
  if [ -n "$diffs" ]; then
    echo "build-scheduler-plugin: scheduler-plugin and hack/controlplane/k8s select different versions:" >&2
    echo "$diffs" | sed 's/^/  /' >&2
    return 1
  fi
}
if [ "$mode" = check ]; then check_versions && log "module versions match hack/controlplane/k8s"; exit $?; fi

ok() {
  [ -x "$BIN/kube-scheduler" ] && "$BIN/kube-scheduler" --version 2>/dev/null | grep -x "Kubernetes $KUBE_VERSION" >/dev/null \
    && [ -x "$BIN/hrl-score-check" ]
}
if ok; then log "kube-scheduler with HRLScore ($KUBE_VERSION, source $src_hash): cached in $BIN"; echo "$BIN"; exit 0; fi

check_versions
mkdir -p "$BIN"
# shellcheck source=hack/build-lib.sh
source "$here/build-lib.sh"  # timed NAME CMD...
log "building kube-scheduler $KUBE_VERSION with HRLScore (source $src_hash; the Kubernetes packages come from the Go build cache when the control plane was built)"
kminor=${KUBE_VERSION#v1.}; kminor=${kminor%%.*}
V=k8s.io/component-base/version; C=k8s.io/client-go/pkg/version
ldf="-s -w -X github.com/hrl-scheduler/hrl-scheduler/scheduler-plugin/pkg/hrlscore.Version=$src_hash"
for kv in "gitVersion=$KUBE_VERSION" gitMajor=1 "gitMinor=$kminor" gitTreeState=clean buildDate=1970-01-01T00:00:00Z; do
  ldf="$ldf -X $V.$kv -X $C.$kv"
done
# The same flags as hack/build-controlplane.sh: the compiled packages are shared through GOCACHE.
(cd "$mod" && timed scheduler-plugin go build -p "$(nproc)" -trimpath -tags=selinux,notest,grpcnotrace \
    -ldflags="$ldf" -o "$BIN/" ./cmd/kube-scheduler ./cmd/hrl-score-check)
ok || { echo "build-scheduler-plugin: $BIN/kube-scheduler does not report $KUBE_VERSION after the build" >&2; exit 1; }
echo "$BIN"
