"""The layering of DESIGN.md section 3, checked on the source and on what the servers load."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRAINING_MODULES = {"nn", "td3", "train", "export", "hrl_train", "drpc_train", "encoder_train", "torch_utils",
                    "placement_train"}


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def modules(pkg: str):
    return sorted((ROOT / pkg).rglob("*.py"))


@pytest.mark.parametrize("pkg,forbidden", [
    ("policy", ("extender", "descheduler")),
    ("extender", ("descheduler",)),
    ("descheduler", ("extender",)),
])
def test_packages_import_only_what_the_layering_allows(pkg, forbidden):
    bad = [(str(p.relative_to(ROOT)), m) for p in modules(pkg) for m in imports_of(p)
           if m.split(".")[0] in forbidden]
    assert bad == []


#: Besides the ``kube.py`` modules (extender, descheduler, and policy/kube.py with what both share), the
#: Kubernetes client may be imported by these adapters only:
#: the descheduler's Lease-based leader election (its Lease API calls sit next to the elector).
KUBERNETES_ADAPTERS = {"descheduler/leader.py"}


def test_only_the_kube_modules_import_the_kubernetes_client():
    bad = [str(p.relative_to(ROOT)) for pkg in ("policy", "extender", "descheduler") for p in modules(pkg)
           if any(m.split(".")[0] == "kubernetes" for m in imports_of(p)) and p.name != "kube.py"
           and p.relative_to(ROOT).as_posix() not in KUBERNETES_ADAPTERS]
    assert bad == []


def test_torch_is_imported_only_by_training_modules():
    bad = [str(p.relative_to(ROOT)) for pkg in ("policy", "extender", "descheduler") for p in modules(pkg)
           if any(m.split(".")[0] == "torch" for m in imports_of(p))
           and not (p.parent.name == "train" or p.stem in TRAINING_MODULES)]
    assert bad == []


def test_the_servers_and_the_cli_run_without_loading_torch():
    code = ("import sys, extender.server, extender.__main__, descheduler.loop, descheduler.__main__, "
            "policy.cli, policy.sim.engine, policy.lowlevel, policy.bench.placement; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
