#!/usr/bin/env bash
# Make a Prometheus server binary available for the `prometheus` tests (tests/integration/test_prometheus_source.py)
# and print its path on the last line of stdout. Idempotent and non-interactive; nothing is started.
#
#   hack/install-prometheus.sh           find or install; print the binary's path
#   hack/install-prometheus.sh --print   print the binary's path if one is found, else exit 1 (installs nothing)
#   HRL_PROMETHEUS=/path/to/prometheus   use this binary (checked with --version)
#   HRL_CP_CACHE=/path                   cache root for the unprivileged install
#                                        (default ${XDG_CACHE_HOME:-$HOME/.cache}/hrl-scheduler)
#
# Order: $HRL_PROMETHEUS; `prometheus` on PATH or /usr/bin/prometheus; a copy unpacked earlier into the cache;
# then the Debian package `prometheus`:
#   - as root (or with password-less sudo): `apt-get install -y --no-install-recommends prometheus`
#     (`apt-get update` first when the package is unknown). Debian's maintainer scripts enable the
#     prometheus.service unit where systemd runs; the tests never use it (they start their own server on a
#     free 127.0.0.1 port with a temporary configuration and storage directory).
#   - otherwise: `apt-get download prometheus` and `dpkg-deb -x` into the cache (no root, no service).
# Exit status: 0 found/installed, 1 not found (--print), 3 cannot install (the reason on stderr).
set -euo pipefail

log() { printf '[install-prometheus] %s\n' "$*" >&2; }
works() { [ -n "${1:-}" ] && [ -x "$1" ] && "$1" --version >/dev/null 2>&1; }

cache_root=${HRL_CP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hrl-scheduler}
unpacked="$cache_root/prometheus-deb"
cached_bin="$unpacked/usr/bin/prometheus"

find_existing() {
  if [ -n "${HRL_PROMETHEUS:-}" ]; then
    if works "$HRL_PROMETHEUS"; then echo "$HRL_PROMETHEUS"; return 0; fi
    log "HRL_PROMETHEUS=$HRL_PROMETHEUS is not a working prometheus binary"; return 1
  fi
  local p
  for p in "$(command -v prometheus 2>/dev/null || true)" /usr/bin/prometheus "$cached_bin"; do
    if works "$p"; then echo "$p"; return 0; fi
  done
  return 1
}

if found=$(find_existing); then echo "$found"; exit 0; fi
if [ "${1:-}" = "--print" ]; then exit 1; fi
if [ -n "${HRL_PROMETHEUS:-}" ]; then exit 3; fi

command -v apt-get >/dev/null 2>&1 || {
  log "no prometheus binary and no apt-get: install Prometheus (https://prometheus.io/download/) and set HRL_PROMETHEUS"
  exit 3; }

export DEBIAN_FRONTEND=noninteractive
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; fi
fi

if [ "$(id -u)" -eq 0 ] || [ -n "$SUDO" ]; then
  if ! apt-cache show prometheus >/dev/null 2>&1; then
    log "apt-get update (the package index does not list prometheus)"
    $SUDO apt-get update -qq >&2
  fi
  log "apt-get install prometheus"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold prometheus >&2
else
  apt-cache show prometheus >/dev/null 2>&1 || {
    log "not root, no password-less sudo, and the apt package index does not list prometheus; run as root:"
    log "  apt-get update && apt-get install -y prometheus   (or set HRL_PROMETHEUS)"
    exit 3; }
  log "not root: apt-get download prometheus and unpack it into $unpacked"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && apt-get download -qq prometheus >&2)
  rm -rf "$unpacked.new" && mkdir -p "$unpacked.new"
  dpkg-deb -x "$tmp"/prometheus_*.deb "$unpacked.new"
  rm -rf "$unpacked" && mv "$unpacked.new" "$unpacked"
fi

if found=$(find_existing); then
  log "$("$found" --version 2>&1 | head -n1)"
  echo "$found"; exit 0
fi
log "prometheus was installed but no working binary was found"
exit 3
