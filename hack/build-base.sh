#!/usr/bin/env bash
# Build the Debian base of the hrl-scheduler images here, with mmdebstrap (no registry of base images is needed),
# into a cache outside the repository keyed by the hash of everything that decides its content: the suite, the
# mirror, the epoch and mmdebstrap's options (the package list and the hooks among them). A no-op when that tarball is cached. Prints the tarball's path on the
# last line of stdout; `hack/build-images.sh` turns it into the image layer of every stage (FROM scratch + ADD,
# so the layer is as reproducible as the tarball).
#
#   hack/build-base.sh            build when missing, print the tarball's path
#   hack/build-base.sh --print    print the path it would have, build nothing
#   HRL_DEBIAN_MIRROR=URL         the Debian mirror (default http://deb.debian.org/debian)
#   HRL_IMAGE_CACHE=/path         cache directory (default ${XDG_CACHE_HOME:-$HOME/.cache}/hrl-scheduler/images)
#
# What is in it: Debian's Essential set (variant essential: no apt, no init) plus python3 (CPython 3.11 of the suite,
# the interpreter the lock file manifests/images/requirements.lock is compiled for), /usr merged without the
# usrmerge package (and so without perl's 45 MB), no documentation, manual pages or locales (dpkg path-exclude;
# copyright files kept), the user nonroot (65532:65532) the images run as, empty /etc/hostname and /etc/resolv.conf
# (the container runtime mounts its own; mmdebstrap would copy the build host's). Reproducible: SOURCE_DATE_EPOCH
# is fixed below, so the same mirror content gives the same bytes; the package versions are written beside the
# tarball (NAME.packages) and into the images' labels.
set -euo pipefail

SUITE=bookworm
PACKAGES=python3,libstdc++6   # libstdc++: numpy's and grpcio's wheels link it
# A fixed epoch for mmdebstrap's own reproducibility (file times, removed logs); the images' layers get the
# build's SOURCE_DATE_EPOCH from hack/build-images.sh (podman build --timestamp).
BASE_EPOCH=1735689600   # 2025-01-01T00:00:00Z
mirror=${HRL_DEBIAN_MIRROR:-http://deb.debian.org/debian}
cache=${HRL_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hrl-scheduler/images}
# Everything that decides the rootfs' bytes, besides the suite, the mirror and the epoch: the cache key hashes them.
opts=(--mode=root --variant=essential --format=tar
  --include="$PACKAGES"
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
  --dpkgopt='path-exclude=/usr/share/man/*'
  --dpkgopt='path-exclude=/usr/share/doc/*'
  --dpkgopt='path-include=/usr/share/doc/*/copyright'
  --dpkgopt='path-exclude=/usr/share/locale/*'
  --dpkgopt='path-exclude=/usr/share/info/*'
  --customize-hook='echo "nonroot:x:65532:65532:nonroot:/tmp:/usr/sbin/nologin" >> "$1/etc/passwd"'
  --customize-hook='echo "nonroot:x:65532:" >> "$1/etc/group"'
  --customize-hook=': > "$1/etc/hostname"; : > "$1/etc/resolv.conf"')
key=$(printf '%s\n' "$SUITE" "$mirror" "$BASE_EPOCH" "${opts[@]}" | sha256sum | cut -c1-16)
tarball="$cache/debian-$SUITE-$key.tar"
log() { printf '[build-base] %s\n' "$*" >&2; }

case "${1:-}" in
  --print) echo "$tarball"; exit 0 ;;
  "") ;;
  *) echo "build-base: unknown argument '$1' (expected --print)" >&2; exit 2 ;;
esac

if [ -s "$tarball" ] && [ -s "$tarball.packages" ]; then
  log "cached: $tarball ($(du -m "$tarball" | cut -f1) MB)"
  echo "$tarball"; exit 0
fi
command -v mmdebstrap >/dev/null 2>&1 || {
  echo "build-base: mmdebstrap is not installed (hack/install-image-tools.sh installs it)" >&2; exit 3; }
[ "$(id -u)" -eq 0 ] || {
  echo "build-base: mmdebstrap needs root here (its unshare mode needs subuids); run as root" >&2; exit 3; }
mkdir -p "$cache"
work=$(mktemp -d "$cache/.build-XXXXXX")
trap 'rm -rf "$work"' EXIT
log "mmdebstrap $SUITE ($PACKAGES) from $mirror (cold: about 1-3 min, mostly downloads)"
t0=$(date +%s)
SOURCE_DATE_EPOCH=$BASE_EPOCH mmdebstrap "${opts[@]}" "$SUITE" "$work/rootfs.tar" "$mirror" \
    >"$work/mmdebstrap.log" 2>&1 || {
  tail -n 40 "$work/mmdebstrap.log" >&2
  echo "build-base: mmdebstrap failed (the end of its log is above)" >&2; exit 1; }
# the package versions, from the rootfs' own dpkg database
tar -xOf "$work/rootfs.tar" ./var/lib/dpkg/status | awk '/^Package:/ {p = $2} /^Version:/ {print p " " $2}' \
  | LC_ALL=C sort > "$work/packages"
mv "$work/packages" "$tarball.packages"
mv "$work/rootfs.tar" "$tarball"
log "built $tarball in $(( $(date +%s) - t0 )) s: $(du -m "$tarball" | cut -f1) MB, $(wc -l < "$tarball.packages") packages"
echo "$tarball"
