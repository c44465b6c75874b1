#!/usr/bin/env bash
# A kind cluster running hrl-scheduler, for machines with Docker (never run by `make test`).
#
#   hack/kind-up.sh          the cluster's own kube-scheduler calls the extender (overlay
#                            default-scheduler-dropin, installed the kubeadm way: --config + a hostPath volume)
#   hack/kind-up.sh --e2e    for hack/e2e-kind.sh: overlay second-scheduler ("default-scheduler" stays plain,
#                            "hrl-scheduler" calls the extender), kwok for fake nodes, an audit log of the
#                            descheduler's requests
#
# Builds the images (hack/build-images.sh: podman), creates the cluster, loads their OCI archives (kind load
# image-archive), applies the
# manifests and waits for them. Writes out/kind/<cluster>/kubeconfig. Environment: KIND_CLUSTER_NAME
# (default hrl, or hrl-e2e with --e2e), KIND_NODE_IMAGE (kindest/node image; default: kind's),
# KWOK_VERSION (default v0.8.0). Needs docker, kind, kubectl and podman (as root) on PATH, and internet access (node image,
# registry.k8s.io/kube-scheduler, kwok's release manifests). Delete with: kind delete cluster --name <cluster>
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mode=dropin
case "${1:-}" in
  "") ;;
  --e2e) mode=e2e ;;
  *) echo "usage: $0 [--e2e]" >&2; exit 2 ;;
esac
cluster=${KIND_CLUSTER_NAME:-$([ $mode = e2e ] && echo hrl-e2e || echo hrl)}
kwok_version=${KWOK_VERSION:-v0.8.0}
extender_ip=10.96.200.200          # pinned in hack/kind/dropin (inside serviceSubnet below)
state="$root/out/kind/$cluster"
log() { printf '[kind-up] %s\n' "$*" >&2; }
for tool in docker kind kubectl; do
  command -v "$tool" >/dev/null || { echo "kind-up: $tool not found on PATH" >&2; exit 3; }
done
mkdir -p "$state/scheduler"

log "building the images (hack/build-images.sh)"
TAG=0.1.0 "$root/hack/build-images.sh" >&2    # the manifests' names: ghcr.io/hrl-scheduler/hrl-*:0.1.0

# The drop-in configuration, with the Service's fixed ClusterIP (static Pods do not resolve cluster DNS).
sed "s#hrl-extender.hrl-scheduler-system.svc#$extender_ip#" \
  "$root/manifests/overlays/default-scheduler-dropin/kube-scheduler-config.yaml" > "$state/scheduler/config.yaml"
cat > "$state/audit-policy.yaml" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    users: ["system:serviceaccount:hrl-scheduler-system:hrl-descheduler"]
  - level: None
EOF
scheduler_patch=""
if [ $mode = dropin ]; then
  scheduler_patch='
    scheduler:
      extraArgs:
        config: /etc/kubernetes/hrl/config.yaml
      extraVolumes:
        - name: hrl-scheduler-config
          hostPath: /etc/kubernetes/hrl
          mountPath: /etc/kubernetes/hrl
          readOnly: true
          pathType: Directory'
fi
# Unversioned kubeadm patches with map-style extraArgs: kind translates them for kubeadm v1beta4 (1.36+).
cat > "$state/kind.yaml" <<EOF
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
networking:
  serviceSubnet: 10.96.0.0/16
nodes:
  - role: control-plane
    extraMounts:
      - {hostPath: "$state/scheduler", containerPath: /etc/kubernetes/hrl, readOnly: true}
      - {hostPath: "$state/audit-policy.yaml", containerPath: /etc/kubernetes/policies/audit-policy.yaml, readOnly: true}
    kubeadmConfigPatches:
      - |
        kind: ClusterConfiguration
        apiServer:
          extraArgs:
            audit-log-path: /var/log/kubernetes/kube-apiserver-audit.log
            audit-policy-file: /etc/kubernetes/policies/audit-policy.yaml
          extraVolumes:
            - {name: audit-policies, hostPath: /etc/kubernetes/policies, mountPath: /etc/kubernetes/policies, readOnly: true, pathType: DirectoryOrCreate}
            - {name: audit-logs, hostPath: /var/log/kubernetes, mountPath: /var/log/kubernetes, readOnly: false, pathType: DirectoryOrCreate}$scheduler_patch
  - role: worker
EOF

if kind get clusters 2>/dev/null | grep -qx "$cluster"; then
  log "cluster $cluster exists; reusing it"
else
  log "creating kind cluster $cluster ($mode)"
  kind create cluster --name "$cluster" --config "$state/kind.yaml" ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"} --wait 180s
fi
kind get kubeconfig --name "$cluster" > "$state/kubeconfig"
export KUBECONFIG="$state/kubeconfig"
# shellcheck disable=SC2086
for a in "$root"/out/images/hrl-*-0.1.0.oci.tar; do kind load image-archive --name "$cluster" "$a"; done

# The second scheduler runs the cluster's own Kubernetes version (a scheduler newer than its API server is
# outside the supported version skew).
version=$(kubectl get nodes -o jsonpath='{.items[0].status.nodeInfo.kubeletVersion}')
kustomization="$root/hack/kind/$mode"
log "applying $kustomization (kube-scheduler $version)"
kubectl kustomize "$kustomization" \
  | sed "s#image: registry.k8s.io/kube-scheduler:v[0-9.]*#image: registry.k8s.io/kube-scheduler:$version#" \
  | kubectl apply -f -
kubectl -n hrl-scheduler-system rollout status deploy/hrl-extender --timeout=180s
if [ $mode = e2e ]; then
  kubectl -n hrl-scheduler-system rollout status deploy/hrl-scheduler --timeout=180s
  log "installing kwok $kwok_version (fake nodes for the scenarios)"
  kubectl apply -f "https://github.com/kubernetes-sigs/kwok/releases/download/$kwok_version/kwok.yaml"
  kubectl apply -f "https://github.com/kubernetes-sigs/kwok/releases/download/$kwok_version/stage-fast.yaml"
  kubectl -n kube-system rollout status deploy/kwok-controller --timeout=180s
fi
log "ready: export KUBECONFIG=$state/kubeconfig"
echo "$state/kubeconfig"
