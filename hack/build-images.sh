#!/usr/bin/env bash
# Build the hrl-scheduler images with podman, from a Debian base built on this machine (no registry of base images
# is needed), reproducibly, and write each one as an OCI archive under out/images/. `make images` runs it.
#
#   hack/build-images.sh                     build every image of IMAGES below
#   hack/build-images.sh hrl-extender ...    build only these
#   hack/build-images.sh --check-reproducible  build, then build again with no layer cache; exit 1 when a digest differs
#   IMAGE_REGISTRY=registry.example/team     where the names point (default ghcr.io/hrl-scheduler, as the chart's)
#   TAG=0.1.0                                default: the version in pyproject.toml
#   SOURCE_DATE_EPOCH=N                      the label org.opencontainers.image.created; default: the time of the
#                                            last commit (git log -1 --format=%ct)
#   HRL_IMAGE_CACHE=/path                    base tarballs and wheels (default ~/.cache/hrl-scheduler/images)
#
# Steps: hack/install-image-tools.sh (podman, mmdebstrap, runc, containers.conf); hack/build-base.sh (the Debian
# rootfs, cached by content hash) -> the base image localhost/hrl-scheduler/base:KEY (FROM scratch + ADD, with the
# base's fixed timestamp, so its layer digest depends on the rootfs alone); every wheel of the two lock files
# downloaded once into the cache by pip on this machine (--require-hashes, for the base's CPython and glibc) and
# mounted read-only at /wheels, so `podman build` fetches nothing (PIP_NO_INDEX; --network=host only because chroot
# isolation has no network namespace of its own) and needs no certificates; `podman build --isolation=chroot
# --timestamp=BASE_EPOCH` (one fixed time for every file of every layer and the image's created time, whatever the
# commit: a layer reused from the cache is then the layer a cold build makes, so warm and cold builds of a tree give
# the same digests; the commit's time is the label org.opencontainers.image.created; .pyc files hash-based) of
# manifests/images/Dockerfile from a context of the
# tracked and untracked-but-not-ignored files it copies; `podman save --format oci-archive`.
# Writes out/images/NAME-TAG.oci.tar and out/images/images.json ({name: {image, id, digest, archive, size_bytes}}:
# `id` is the config digest, `digest` the manifest digest of the archive, what a registry would serve).
# Exit status: 0 built, 1 not reproducible (--check-reproducible), 3 the tools are missing and cannot be installed.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
log() { printf '[build-images] %s\n' "$*" >&2; }

# name                 Dockerfile stage (a stage `FROM runtime AS NAME` is built over the shared runtime stage; one
#                                        `FROM ${BASE_IMAGE} AS NAME` over the Debian base alone)
IMAGES=(
  "hrl-extender        extender"
  "hrl-descheduler     descheduler"
  "hrl-embedding-cache embedding-cache"
  "hrl-kube-scheduler  kube-scheduler"
)
# A hook for images whose inputs are built outside the Dockerfile; $1 = image name, $2 = the build context.
# hrl-kube-scheduler: kube-scheduler with the HRLScore plugin, built (or taken from its cache) by
# hack/build-scheduler-plugin.sh, copied to out/images/kube-scheduler of the context.
prebuild() {
  if [ "$1" = hrl-kube-scheduler ]; then
    local bin
    bin=$("$root/hack/build-scheduler-plugin.sh" | tail -n1)
    mkdir -p "$2/out/images"
    cp "$bin/kube-scheduler" "$2/out/images/kube-scheduler"
  fi
}

check_repro=0
wanted=()
for arg in "$@"; do
  case "$arg" in
    --check-reproducible) check_repro=1 ;;
    -*) echo "build-images: unknown option $arg" >&2; exit 2 ;;
    *) wanted+=("$arg") ;;
  esac
done

registry=${IMAGE_REGISTRY:-ghcr.io/hrl-scheduler}
tag=${TAG:-$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/pyproject.toml" | head -n1)}
revision=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
commit_epoch=${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)}
created=$(date -u -d "@$commit_epoch" +%Y-%m-%dT%H:%M:%SZ)
cache=${HRL_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hrl-scheduler/images}
out="$root/out/images"
export HRL_IMAGE_CACHE=$cache

t_start=$(date +%s)
"$root/hack/install-image-tools.sh" >/dev/null
rootfs=$("$root/hack/build-base.sh" | tail -n1)
base_key=$(basename "$rootfs" .tar)
base_image="localhost/hrl-scheduler/base:${base_key#debian-}"
base_epoch=$(sed -n 's/^BASE_EPOCH=\([0-9]*\).*/\1/p' "$root/hack/build-base.sh")
base_sha=$(sha256sum "$rootfs" | cut -d' ' -f1)

# ---- the base image: the rootfs as one layer -------------------------------------------------------------------
if ! podman image exists "$base_image"; then
  ctx=$(mktemp -d "$cache/.base-ctx-XXXXXX")
  ln "$rootfs" "$ctx/rootfs.tar" 2>/dev/null || cp "$rootfs" "$ctx/rootfs.tar"
  printf 'FROM scratch\nADD rootfs.tar /\n' > "$ctx/Containerfile"
  log "importing the base $base_image"
  podman build -q --isolation=chroot --network=host --identity-label=false --timestamp="$base_epoch" \
    -t "$base_image" -f "$ctx/Containerfile" "$ctx" >/dev/null
  rm -rf "$ctx"
fi

# ---- the wheels of both lock files, for the base's interpreter -------------------------------------------------
wheels="$cache/wheels"
mkdir -p "$wheels"
arch=$(uname -m)
glibc=$(sed -n 's/^libc6 \([0-9]*\)\.\([0-9]*\).*/\1 \2/p' "$rootfs.packages")
read -r gmaj gmin <<<"$glibc"
platforms=(--platform "linux_$arch")
for ((m = 17; m <= gmin; m++)); do platforms+=(--platform "manylinux_${gmaj}_${m}_$arch"); done
platforms+=(--platform "manylinux2014_$arch")
pybin="$root/.venv/bin/python"; [ -x "$pybin" ] || pybin=python3
for lock in build-requirements.lock requirements.lock; do
  stamp="$wheels/.$(sha256sum "$root/manifests/images/$lock" | cut -c1-16)-$glibc"
  stamp=${stamp// /.}
  [ -e "$stamp" ] && continue
  log "pip download: the wheels of manifests/images/$lock into $wheels"
  "$pybin" -m pip download -q --disable-pip-version-check --no-deps --require-hashes --only-binary=:all: \
    --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none "${platforms[@]}" \
    -d "$wheels" -r "$root/manifests/images/$lock" >&2
  touch "$stamp"
done

# ---- the build context: what the Dockerfile copies, tracked or new, never ignored files -------------------------
ctx=$(mktemp -d "${TMPDIR:-/tmp}/hrl-images-ctx-XXXXXX")
trap 'rm -rf "$ctx"' EXIT
(cd "$root" && git ls-files -z -co --exclude-standard -- pyproject.toml README.md policy extender descheduler \
   manifests/images | tar --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -xf - -C "$ctx")

common=(--isolation=chroot --network=host --identity-label=false --timestamp="$base_epoch")
runtime_image="localhost/hrl-scheduler/runtime:$tag"

build_all() {  # $1: extra podman build options
  local line name stage image id t0
  mkdir -p "$out"
  : > "$ctx/.built"
  # The shared stages once (the venv's layers: cache checks hash 300 MB, so not once per image) ...
  t0=$(date +%s)
  # shellcheck disable=SC2086
  podman build -q $1 "${common[@]}" -v "$wheels:/wheels:ro" -f "$ctx/manifests/images/Dockerfile" --target runtime \
    -t "$runtime_image" --build-arg BASE_IMAGE="$base_image" --build-arg SOURCE_DATE_EPOCH="$base_epoch" \
    --build-arg BASE_DIGEST="$base_sha" "$ctx" >/dev/null
  log "$runtime_image: built in $(( $(date +%s) - t0 )) s"
  # ... then each image's own stage of the Dockerfile (its FROM runtime ... up to the next FROM) over it.
  for line in "${IMAGES[@]}"; do
    read -r name stage <<<"$line"
    if [ ${#wanted[@]} -gt 0 ] && [[ ! " ${wanted[*]} " == *" $name "* ]]; then continue; fi
    image="$registry/$name:$tag"
    prebuild "$name" "$ctx"
    t0=$(date +%s)
    awk -v stage="$stage" -v from="FROM $runtime_image" '
      BEGIN { print "ARG BASE_IMAGE" }
      /^FROM / { on = ($0 ~ (" AS " stage "$")); if (on) { print ($2 == "runtime" ? from : $0); next } }
      on' "$ctx/manifests/images/Dockerfile" > "$ctx/Containerfile.$stage"
    [ "$(wc -l < "$ctx/Containerfile.$stage")" -gt 1 ] || { echo "build-images: no stage '$stage' in the Dockerfile" >&2; exit 2; }
    # The version, the commit's time and revision: the stage's last step, a LABEL with the values written out. Not
    # a LABEL "${REVISION}" of the Dockerfile (buildah's layer cache keys a step on its text before the ARGs are
    # expanded: it would reuse an earlier commit's step, whose ID every later step records in the image's history,
    # so a warm and a cold build of one commit would differ), and not `podman build --label` (not in the cache key
    # either, and set on every step a cold build makes: the same effect).
    printf 'LABEL org.opencontainers.image.version="%s" org.opencontainers.image.revision="%s" org.opencontainers.image.created="%s"\n' \
      "$tag" "$revision" "$created" >> "$ctx/Containerfile.$stage"
    # shellcheck disable=SC2086
    podman build -q $1 "${common[@]}" -f "$ctx/Containerfile.$stage" -t "$image" --build-arg BASE_IMAGE="$base_image" \
      --build-arg BASE_DIGEST="$base_sha" "$ctx" >/dev/null
    id=$(podman image inspect --format '{{.Id}}' "$image")
    local archive="$out/$name-$tag.oci.tar"
    if [ -s "$archive" ] && [ "$(cat "$archive.id" 2>/dev/null)" = "$id" ]; then
      log "$image: built in $(( $(date +%s) - t0 )) s (id sha256:${id:0:12}, unchanged: $archive kept)"
    else
      rm -f "$archive" "$archive.id"
      podman save -q --format oci-archive -o "$archive" "$image"
      echo "$id" > "$archive.id"
      log "$image: built and saved in $(( $(date +%s) - t0 )) s (id sha256:${id:0:12})"
    fi
    echo "$name $image $id" >> "$ctx/.built"
  done
}

summary() {  # out/images/images.json from the archives
  "$pybin" - "$out" "$tag" "$ctx/.built" <<'EOF'
import json, sys, tarfile
from pathlib import Path
out, tag, built = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
index = json.loads((out / "images.json").read_text()) if (out / "images.json").exists() else {}
for line in built.read_text().split("\n"):
    if not line.strip():
        continue
    name, image, image_id = line.split()
    archive = out / f"{name}-{tag}.oci.tar"
    with tarfile.open(archive) as tf:
        manifest = json.load(tf.extractfile("index.json"))["manifests"][0]
    index[name] = {"image": image, "id": f"sha256:{image_id}", "digest": manifest["digest"],
                   "archive": str(archive.relative_to(out.parent.parent)), "size_bytes": archive.stat().st_size}
(out / "images.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
for name, v in sorted(index.items()):
    print(f"{v['image']}  {v['digest']}  {v['size_bytes'] / 1e6:.1f} MB  {v['archive']}")
EOF
}

build_all ""
summary
if [ $check_repro -eq 1 ]; then
  cp "$out/images.json" "$ctx/first.json"
  log "--check-reproducible: building again with no layer cache"
  build_all "--no-cache"
  summary >/dev/null
  if "$pybin" - "$ctx/first.json" "$out/images.json" <<'EOF'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
bad = [n for n in a if (a[n]["id"], a[n]["digest"]) != (b[n]["id"], b[n]["digest"])]
for n in bad:
    print(f"[build-images] {n}: not reproducible: {a[n]['digest']} then {b[n]['digest']}", file=sys.stderr)
sys.exit(1 if bad else 0)
EOF
  then log "reproducible: the rebuild gave the same digests"; else exit 1; fi
fi
log "done in $(( $(date +%s) - t_start )) s"
