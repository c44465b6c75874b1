"""The layering of DESIGN.md section 3, checked on the source and on what the servers load."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Exactly the modules that import torch: all in policy/train (DESIGN.md section 3). A new module importing torch,
#: or one of these no longer importing it, fails the test: keep the list exact.
TORCH_MODULES = {
    "policy/train/td3.py",
    "policy/train/drpc.py",
    "policy/train/placement.py",
    "policy/train/encoder.py",
    "policy/train/hierarchy.py",
}


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


@pytest.mark.parametrize(
    "pkg,forbidden",
    [
        ("policy", ("extender", "descheduler")),
        ("extender", ("descheduler",)),
        ("descheduler", ("extender",)),
    ],
)
def test_packages_import_only_what_the_layering_allows(pkg, forbidden):
    bad = [(str(p.relative_to(ROOT)), m) for p in modules(pkg) for m in imports_of(p) if m.split(".")[0] in forbidden]
    assert bad == []


#: Besides the ``kube.py`` modules (extender, descheduler, and policy/kube.py with what both share), the
#: Kubernetes client may be imported by these adapters only:
#: the descheduler's Lease-based leader election (its Lease API calls sit next to the elector), and the
#: `make bench-descheduler --controlplane` harness that fills a real API server (never imported by a server).
KUBERNETES_ADAPTERS = {"descheduler/leader.py", "policy/bench/descheduler_api.py"}


def test_only_the_kube_modules_import_the_kubernetes_client():
    bad = [
        str(p.relative_to(ROOT))
        for pkg in ("policy", "extender", "descheduler")
        for p in modules(pkg)
        if any(m.split(".")[0] == "kubernetes" for m in imports_of(p))
        and p.name != "kube.py"
        and p.relative_to(ROOT).as_posix() not in KUBERNETES_ADAPTERS
    ]
    assert bad == []


def test_torch_is_imported_by_exactly_the_listed_training_modules():
    found = {
        p.relative_to(ROOT).as_posix()
        for pkg in ("policy", "extender", "descheduler")
        for p in modules(pkg)
        if any(m.split(".")[0] == "torch" for m in imports_of(p))
    }
    assert found == TORCH_MODULES


def test_the_headline_stacks_reach_the_simulator_only_through_entry_points():
    # the deliberate inversion of DESIGN.md section 3: policy.sim.stacks never imports descheduler, yet the
    # learned stacks the descheduler package provides are registered through the hrl_scheduler.stacks group
    from importlib import metadata

    from policy.sim.stacks import ENTRY_POINT_GROUP, available_stacks

    eps = {ep.name: ep.value for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}
    assert eps["hrl-scheduler"] == "descheduler.stacks:hrl_scheduler"
    stacks = available_stacks()
    assert stacks["hrl-scheduler"].origin == "entry point descheduler.stacks:hrl_scheduler"
    assert all(m.split(".")[0] != "descheduler" for p in modules("policy") for m in imports_of(p))


def test_the_import_contracts_hold():
    # the contracts of pyproject.toml [tool.importlinter] (import-linter), the same check `make test` runs first
    code = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(no_cache=True, no_logo=True))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert "Contracts: " in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]


def test_the_servers_and_the_cli_run_without_loading_torch():
    code = (
        "import sys, extender.server, extender.__main__, descheduler.loop, descheduler.__main__, "
        "policy.cli, policy.sim.engine, policy.lowlevel, policy.highlevel, policy.encoder, policy.cache, "
        "policy.bench.placement, policy.bench.stacks; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
