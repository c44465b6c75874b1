#!/usr/bin/env bash
# Build the real Kubernetes control plane used by the `controlplane` tests and `make bench-scheduler`:
# kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (k8s.io/kubernetes, one `go build`),
# etcd (go.etcd.io/etcd/server/v3) and kwok (sigs.k8s.io/kwok), from the Go tool modules in
# hack/controlplane/{k8s,k8s-1.35,etcd,kwok} (go.mod + go.sum only), into a cache directory outside the
# repository, keyed by version. A no-op when the binaries are already there and report the expected versions.
#
# Two Kubernetes minors are supported (the version-skew tests run against both): the newest, from
# hack/controlplane/k8s (the default), and the one before it, from hack/controlplane/k8s-<minor>.
#
#   hack/build-controlplane.sh                 build what is missing (default minor), print the bin directory
#   hack/build-controlplane.sh --print         print the bin directory, build nothing
#   hack/build-controlplane.sh --kube 1.35     the same for another minor (a hack/controlplane/k8s* module)
#   hack/build-controlplane.sh --all           build every minor, print one bin directory per line
#   hack/build-controlplane.sh --minors        print the supported minors, newest first, build nothing
#   HRL_KUBE_MINOR=1.35                        the same as --kube 1.35
#   HRL_CP_CACHE=/path                         cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/hrl-scheduler)
#   HRL_CP_TIMINGS=/path/file.tsv              append "component wall_s peak_rss_kb" per build step
#
# Recipe and pitfalls: docs/control-plane.md.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mods="$here/controlplane"

modver() { # module version required by a tools go.mod
  sed -n "s|^[[:space:]]*\(require \)\{0,1\}$2 \(v[^ ]*\).*|\2|p" "$mods/$1/go.mod" | head -n1
}
minor_of() { local v=${1#v}; echo "${v%.*}"; }  # v1.36.3 -> 1.36

# The k8s tool modules, newest minor first: "minor module-dir" per line.
kube_modules() {
  local d v
  for d in "$mods"/k8s "$mods"/k8s-*; do
    [ -f "$d/go.mod" ] || continue
    v=$(modver "$(basename "$d")" k8s.io/kubernetes)
    [ -n "$v" ] && echo "$(minor_of "$v") $(basename "$d")"
  done | sort -t. -k1,1nr -k2,2nr
}

minor=${HRL_KUBE_MINOR:-}
mode=build
while [ $# -gt 0 ]; do
  case "$1" in
    --print) mode=print ;;
    --minors) kube_modules | cut -d' ' -f1; exit 0 ;;
    --all)
      status=0
      for m in $(kube_modules | cut -d' ' -f1); do
        HRL_KUBE_MINOR=$m "${BASH_SOURCE[0]}" | tail -n1 || status=$?
      done
      exit $status ;;
    --kube) [ $# -ge 2 ] || { echo "build-controlplane: --kube needs a minor such as 1.35" >&2; exit 2; }
            minor=$2; shift ;;
    --kube=*) minor=${1#--kube=} ;;
    *) echo "build-controlplane: unknown argument '$1' (expected --print, --kube MINOR, --all or --minors)" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "$minor" ]; then kmod=k8s; else
  kmod=$(kube_modules | awk -v m="$minor" '$1 == m { print $2; exit }')
  [ -n "$kmod" ] || {
    echo "build-controlplane: Kubernetes minor '$minor' is not supported (supported: $(kube_modules | cut -d' ' -f1 | paste -sd' ')); each has a module in $mods/k8s*" >&2
    exit 2; }
fi
KUBE_VERSION=$(modver "$kmod" k8s.io/kubernetes)
ETCD_VERSION=$(modver etcd go.etcd.io/etcd/server/v3)
KWOK_VERSION=$(modver kwok sigs.k8s.io/kwok)
[ -n "$KUBE_VERSION" ] && [ -n "$ETCD_VERSION" ] && [ -n "$KWOK_VERSION" ] || {
  echo "build-controlplane: cannot read the versions from $mods/*/go.mod" >&2; exit 2; }

cache_root=${HRL_CP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hrl-scheduler}
BIN="$cache_root/controlplane-k8s-$KUBE_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION/bin"

if [ "$mode" = print ]; then echo "$BIN"; exit 0; fi

command -v go >/dev/null 2>&1 || {
  echo "build-controlplane: Go is not installed (need go >= 1.26 on PATH to build the control plane)" >&2; exit 3; }

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
mkdir -p "$BIN"
log() { printf '[build-controlplane] %s\n' "$*" >&2; }

# shellcheck source=hack/build-lib.sh
source "$here/build-lib.sh"  # timed NAME CMD...

k8s_ok() {
  for b in kube-apiserver kube-controller-manager kube-scheduler; do
    [ -x "$BIN/$b" ] && "$BIN/$b" --version 2>/dev/null | grep -x "Kubernetes $KUBE_VERSION" >/dev/null || return 1
  done
  [ -x "$BIN/kubectl" ] && "$BIN/kubectl" version --client 2>/dev/null | grep "$KUBE_VERSION" >/dev/null
}
etcd_ok() { [ -x "$BIN/etcd" ] && "$BIN/etcd" --version 2>/dev/null | grep "etcd Version: ${ETCD_VERSION#v}" >/dev/null; }
kwok_ok() { [ -x "$BIN/kwok" ] && [ -f "$BIN/stages/pod-delete.yaml" ] && "$BIN/kwok" --version 2>/dev/null | grep "$KWOK_VERSION" >/dev/null; }

if k8s_ok; then log "kube binaries $KUBE_VERSION: cached in $BIN"; else
  log "building kube-apiserver, kube-controller-manager, kube-scheduler, kubectl $KUBE_VERSION (cold: about 4-5 min on 2 idle cores, BENCHMARKS.md)"
  kminor=${KUBE_VERSION#v1.}; kminor=${kminor%%.*}
  V=k8s.io/component-base/version; C=k8s.io/client-go/pkg/version
  ldf="-s -w"
  for kv in "gitVersion=$KUBE_VERSION" gitMajor=1 "gitMinor=$kminor" gitTreeState=clean buildDate=1970-01-01T00:00:00Z; do
    ldf="$ldf -X $V.$kv -X $C.$kv"
  done
  (cd "$mods/$kmod" && timed "$kmod" go build -p "$(nproc)" -trimpath -tags=selinux,notest,grpcnotrace \
      -ldflags="$ldf" -o "$BIN/" \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl)
  k8s_ok || { echo "build-controlplane: kube binaries do not report $KUBE_VERSION after the build" >&2; exit 1; }
fi

# etcd and kwok do not depend on the Kubernetes minor: take them from another minor's cache entry when one holds
# the same versions (a second minor then costs only its kube binaries)
reuse() {  # reuse FILE...: copy them from a sibling cache entry with the same etcd and kwok versions
  local d
  for d in "$cache_root"/controlplane-k8s-*-etcd-"$ETCD_VERSION"-kwok-"$KWOK_VERSION"/bin; do
    [ "$d" = "$BIN" ] && continue
    local all=1 f
    for f in "$@"; do [ -e "$d/$f" ] || all=0; done
    if [ "$all" = 1 ]; then
      for f in "$@"; do cp -R "$d/$f" "$BIN/"; done
      log "$* $([ $# -gt 1 ] && echo are || echo is) the same as in $d: copied"
      return 0
    fi
  done
  return 1
}
etcd_ok || { reuse etcd && etcd_ok; } || true
kwok_ok || { reuse kwok stages && kwok_ok; } || true

if etcd_ok; then log "etcd $ETCD_VERSION: cached"; else
  log "building etcd $ETCD_VERSION"
  (cd "$mods/etcd" && timed etcd go build -trimpath -ldflags='-s -w' -o "$BIN/etcd" go.etcd.io/etcd/server/v3)
  etcd_ok || { echo "build-controlplane: etcd does not report $ETCD_VERSION after the build" >&2; exit 1; }
fi

if kwok_ok; then log "kwok $KWOK_VERSION: cached"; else
  log "building kwok $KWOK_VERSION"
  (cd "$mods/kwok" && timed kwok go build -trimpath \
      -ldflags="-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION" -o "$BIN/kwok" sigs.k8s.io/kwok/cmd/kwok)
  # The stage YAMLs ship in the module zip; copy them next to the binary so a warm binary cache
  # works without the Go module cache.
  kwokdir=$(cd "$mods/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
  mkdir -p "$BIN/stages"
  cp "$kwokdir/kustomize/stage/node/fast/node-initialize.yaml" \
     "$kwokdir/kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml" \
     "$kwokdir/kustomize/stage/pod/fast/pod-ready.yaml" \
     "$kwokdir/kustomize/stage/pod/fast/pod-complete.yaml" \
     "$kwokdir/kustomize/stage/pod/fast/pod-delete.yaml" "$BIN/stages/"
  chmod u+w "$BIN/stages/"*.yaml
  kwok_ok || { echo "build-controlplane: kwok does not report $KWOK_VERSION after the build" >&2; exit 1; }
fi

echo "$BIN"
