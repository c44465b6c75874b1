#!/usr/bin/env bash
# Make the image tools `make images` and the image tests use available, without Docker and without any registry
# of base images: mmdebstrap (the Debian base, built here), podman (build with --isolation=chroot, run with runc),
# and runc itself, from the Debian packages; then write the containers.conf this machine's kernel needs.
# Idempotent and non-interactive; prints the podman binary's path on the last line of stdout.
#
#   hack/install-image-tools.sh           find or install; write containers.conf when missing; print podman's path
#   hack/install-image-tools.sh --print   print podman's path if podman, mmdebstrap and runc are all there, else
#                                         exit 1 (installs nothing, writes nothing)
#
# containers.conf (${CONTAINERS_CONF:-/etc/containers/containers.conf} as root, else
# ${XDG_CONFIG_HOME:-$HOME/.config}/containers/containers.conf), written only when it does not exist yet:
#   runtime = "runc"      crun fails to create containers under a hybrid cgroup hierarchy (cgroup v1 controllers
#                         with a v2 unified mount), which is what many CI kernels have;
#   default_ulimits       podman otherwise asks the runtime for RLIMIT_NOFILE above this process's hard limit and
#                         RLIMIT_NPROC=unlimited, which needs CAP_SYS_RESOURCE inside unprivileged containers: the
#                         hard nofile limit of this shell and nproc=32768:32768 instead;
#   cgroup_manager = "cgroupfs", events_logger = "file"   no systemd here.
# Exit status: 0 ready, 1 not found (--print), 3 cannot install (the reason on stderr).
set -euo pipefail

log() { printf '[install-image-tools] %s\n' "$*" >&2; }
PACKAGES=(mmdebstrap podman buildah skopeo runc uidmap fuse-overlayfs)

have_all() { command -v podman >/dev/null 2>&1 && command -v mmdebstrap >/dev/null 2>&1 && command -v runc >/dev/null 2>&1; }

conf_path() {
  if [ -n "${CONTAINERS_CONF:-}" ]; then echo "$CONTAINERS_CONF"
  elif [ "$(id -u)" -eq 0 ]; then echo /etc/containers/containers.conf
  else echo "${XDG_CONFIG_HOME:-$HOME/.config}/containers/containers.conf"; fi
}

write_conf() {
  local conf nofile
  conf=$(conf_path)
  [ -e "$conf" ] && return 0
  nofile=$(ulimit -Hn)
  [ "$nofile" = unlimited ] && nofile=1048576
  mkdir -p "$(dirname "$conf")"
  cat >"$conf" <<EOF
# Written by hrl-scheduler's hack/install-image-tools.sh (the reasons are in that script's header).
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=32768:32768"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
  log "wrote $conf (runtime runc, nofile=$nofile:$nofile, nproc=32768:32768)"
}

if [ "${1:-}" = "--print" ]; then
  have_all && command -v podman && exit 0
  exit 1
fi
[ -z "${1:-}" ] || { echo "install-image-tools: unknown argument '$1' (expected --print)" >&2; exit 2; }

if ! have_all; then
  command -v apt-get >/dev/null 2>&1 || {
    log "podman, mmdebstrap or runc missing and no apt-get: install ${PACKAGES[*]} with your package manager"; exit 3; }
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"
    else log "podman, mmdebstrap or runc missing; not root and no password-less sudo: apt-get install ${PACKAGES[*]}"; exit 3; fi
  fi
  if ! apt-cache show mmdebstrap podman runc >/dev/null 2>&1; then
    log "apt-get update (the package index does not list mmdebstrap, podman or runc)"
    $SUDO apt-get update -qq >&2
  fi
  log "apt-get install ${PACKAGES[*]}"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "${PACKAGES[@]}" >&2
  have_all || { log "installed, but podman, mmdebstrap or runc is still not on PATH"; exit 3; }
fi
write_conf
log "$(podman --version)"
command -v podman
