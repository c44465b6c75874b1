#!/usr/bin/env bash
# Make a Prometheus Pushgateway binary available for the descheduler's push test
# (tests/integration/test_pushgateway.py) and print its path on the last line of stdout. Idempotent and
# non-interactive; nothing is started. The same steps as hack/install-prometheus.sh, for Debian's package
# `prometheus-pushgateway`.
#
#   hack/install-pushgateway.sh           find or install; print the binary's path
#   hack/install-pushgateway.sh --print   print the binary's path if one is found, else exit 1 (installs nothing)
#   HRL_PUSHGATEWAY=/path/to/pushgateway use this binary (checked with --version)
#   HRL_CP_CACHE=/path                   cache root for the unprivileged install
#                                        (default ${XDG_CACHE_HOME:-$HOME/.cache}/hrl-scheduler)
#
# Order: $HRL_PUSHGATEWAY; `prometheus-pushgateway` (or `pushgateway`) on PATH or in /usr/bin; a copy unpacked
# earlier into the cache; then the Debian package `prometheus-pushgateway`:
#   - as root (or with password-less sudo): `apt-get install -y --no-install-recommends prometheus-pushgateway`
#     (`apt-get update` first when the package is unknown). Debian's maintainer scripts enable the
#     prometheus-pushgateway.service unit where systemd runs; the tests never use it (they start their own server on a
#     free 127.0.0.1 port with a temporary configuration and storage directory).
#   - otherwise: `apt-get download prometheus-pushgateway` and `dpkg-deb -x` into the cache (no root, no service).
# Exit status: 0 found/installed, 1 not found (--print), 3 cannot install (the reason on stderr).
set -euo pipefail

log() { printf '[install-pushgateway] %s\n' "$*" >&2; }
works() { [ -n "${1:-}" ] && [ -x "$1" ] && "$1" --version >/dev/null 2>&1; }

cache_root=${HRL_CP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hrl-scheduler}
unpacked="$cache_root/pushgateway-deb"
cached_bin="$unpacked/usr/bin/prometheus-pushgateway"

find_existing() {
  if [ -n "${HRL_PUSHGATEWAY:-}" ]; then
    if works "$HRL_PUSHGATEWAY"; then echo "$HRL_PUSHGATEWAY"; return 0; fi
    log "HRL_PUSHGATEWAY=$HRL_PUSHGATEWAY is not a working pushgateway binary"; return 1
  fi
  local p
  for p in "$(command -v prometheus-pushgateway 2>/dev/null || true)" "$(command -v pushgateway 2>/dev/null || true)" \
           /usr/bin/prometheus-pushgateway "$cached_bin"; do
    if works "$p"; then echo "$p"; return 0; fi
  done
  return 1
}

if found=$(find_existing); then echo "$found"; exit 0; fi
if [ "${1:-}" = "--print" ]; then exit 1; fi
if [ -n "${HRL_PUSHGATEWAY:-}" ]; then exit 3; fi

command -v apt-get >/dev/null 2>&1 || {
  log "no pushgateway binary and no apt-get: install the Prometheus Pushgateway and set HRL_PUSHGATEWAY"
  exit 3; }

export DEBIAN_FRONTEND=noninteractive
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; fi
fi

if [ "$(id -u)" -eq 0 ] || [ -n "$SUDO" ]; then
  if ! apt-cache show prometheus-pushgateway >/dev/null 2>&1; then
    log "apt-get update (the package index does not list prometheus-pushgateway)"
    $SUDO apt-get update -qq >&2
  fi
  log "apt-get install prometheus-pushgateway"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold prometheus-pushgateway >&2
else
  apt-cache show prometheus-pushgateway >/dev/null 2>&1 || {
    log "not root, no password-less sudo, and the apt package index does not list prometheus-pushgateway; run as root:"
    log "  apt-get update && apt-get install -y prometheus-pushgateway   (or set HRL_PUSHGATEWAY)"
    exit 3; }
  log "not root: apt-get download prometheus-pushgateway and unpack it into $unpacked"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && apt-get download -qq prometheus-pushgateway >&2)
  rm -rf "$unpacked.new" && mkdir -p "$unpacked.new"
  dpkg-deb -x "$tmp"/prometheus-pushgateway_*.deb "$unpacked.new"
  rm -rf "$unpacked" && mv "$unpacked.new" "$unpacked"
fi

if found=$(find_existing); then
  log "$("$found" --version 2>&1 | head -n1)"
  echo "$found"; exit 0
fi
log "prometheus-pushgateway was installed but no working binary was found"
exit 3
