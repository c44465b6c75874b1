"""Issue 3's control-plane scenarios on kind, through the same test code: 4a (tests/integration/
test_controlplane_boutique.py: the extender registered in a real kube-scheduler) and 4b
(test_controlplane_descheduler.py: the descheduler against the real API). The test functions are imported
unchanged; tests/e2e/conftest.py gives them the fixtures they expect on the cluster ``KUBECONFIG`` names.

Marker ``kind``: deselected by default (pyproject addopts); ``hack/e2e-kind.sh`` creates the cluster and runs
``pytest -m kind tests/e2e``."""

from __future__ import annotations

import pytest
import test_controlplane_boutique as _boutique  # tests/integration, on sys.path through conftest.py
import test_controlplane_descheduler as _descheduler

pytestmark = pytest.mark.kind

SCENARIO_MODULES = (_boutique, _descheduler)

for _module in SCENARIO_MODULES:
    for _name in dir(_module):
        if _name.startswith("test_"):
            globals()[_name] = getattr(_module, _name)
del _module, _name
