#!/usr/bin/env bash
# Build the three images of manifests/images/Dockerfile (targets extender, descheduler, kube-scheduler: the
# scheduler with the HRLScore plugin) with the first image builder found: docker (BuildKit), podman, buildah or
# nerdctl. `make images` runs it.
#
#   hack/build-images.sh                   build ${IMAGE_REGISTRY}/hrl-extender:${TAG}, .../hrl-descheduler:${TAG} and
#                                          .../hrl-kube-scheduler:${TAG}
#   IMAGE_REGISTRY=registry.example/team   where the names point (default ghcr.io/hrl-scheduler, as the chart's)
#   TAG=0.1.0                              default: the version in pyproject.toml
#   BUILDER=podman                         use this builder instead of the first one found
# Exit status: 0 built, 3 no image builder on this machine (the message says which ones were looked for).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
registry=${IMAGE_REGISTRY:-ghcr.io/hrl-scheduler}
tag=${TAG:-$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/pyproject.toml" | head -n1)}
builder=${BUILDER:-}
if [ -z "$builder" ]; then
  for b in docker podman buildah nerdctl; do
    if command -v "$b" >/dev/null 2>&1; then builder=$b; break; fi
  done
fi
if [ -z "$builder" ]; then
  echo "build-images: no image builder on this machine (looked for docker, podman, buildah, nerdctl); install one," >&2
  echo "build-images: or build elsewhere: docker build -f manifests/images/Dockerfile --target extender ." >&2
  exit 3
fi
if [ "$builder" = docker ] && ! docker info >/dev/null 2>&1; then
  echo "build-images: docker is installed but its engine is not reachable (docker info failed)" >&2; exit 3
fi
revision=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
created=$(date -u +%Y-%m-%dT%H:%M:%SZ)
# the kube-scheduler image's binary: built (or taken from the cache) by hack/build-scheduler-plugin.sh
plugin_bin=$("$root/hack/build-scheduler-plugin.sh" | tail -n1)
mkdir -p "$root/out/images"
cp "$plugin_bin/kube-scheduler" "$root/out/images/kube-scheduler"
for target in extender descheduler kube-scheduler; do
  image="$registry/hrl-$target:$tag"
  echo "build-images: $builder building $image" >&2
  args=(-f "$root/manifests/images/Dockerfile" --target "$target" -t "$image"
        --build-arg "VERSION=$tag" --build-arg "REVISION=$revision" --build-arg "CREATED=$created")
  case "$builder" in
    docker) DOCKER_BUILDKIT=1 docker build "${args[@]}" "$root" ;;
    buildah) buildah bud --layers "${args[@]}" "$root" ;;
    *) "$builder" build "${args[@]}" "$root" ;;
  esac
done
