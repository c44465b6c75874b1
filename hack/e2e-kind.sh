#!/usr/bin/env bash
# The control-plane scenarios of issue 3 (4a: the extender in a real kube-scheduler; 4b: the descheduler
# against the real API) on a kind cluster, through the same test code (tests/e2e/test_kind.py, marker kind).
#
#   hack/e2e-kind.sh [PYTEST ARGS...]
#
# Without KUBECONFIG: creates the cluster with `hack/kind-up.sh --e2e` (docker, kind, kubectl, internet) and
# uses it. With KUBECONFIG: uses that cluster, which must have been set up by `hack/kind-up.sh --e2e` (the
# second-scheduler manifests, kwok, the audit log); HRL_KIND_NODE names its control-plane container for the
# audit log (default: <KIND_CLUSTER_NAME or hrl-e2e>-control-plane).
# The real nodes are tainted hrl-scheduler.io/e2e=real:NoSchedule once everything runs, so the scenarios'
# pods land only on the fake (kwok) nodes they create, as on the test control plane.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cluster=${KIND_CLUSTER_NAME:-hrl-e2e}
if [ -z "${KUBECONFIG:-}" ]; then
  KUBECONFIG=$(KIND_CLUSTER_NAME=$cluster "$root/hack/kind-up.sh" --e2e | tail -n1)
fi
export KUBECONFIG
export HRL_KIND_NODE=${HRL_KIND_NODE:-$cluster-control-plane}
kubectl taint nodes --all hrl-scheduler.io/e2e=real:NoSchedule --overwrite >/dev/null  # no fake node exists yet
python=${PYTHON:-$root/.venv/bin/python}
[ -x "$python" ] || python=python3
cd "$root"
exec "$python" -m pytest -m kind tests/e2e "$@"
