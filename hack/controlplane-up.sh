#!/usr/bin/env bash
# Bring the test control plane up (etcd, kube-apiserver, kube-controller-manager, two kube-schedulers, the
# extender, kwok; all on 127.0.0.1). A thin wrapper: hack/controlplane.py up --help lists the options.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
py=${PYTHON:-$root/.venv/bin/python}
[ -x "$py" ] || py=python3
exec "$py" "$root/hack/controlplane.py" up "$@"
