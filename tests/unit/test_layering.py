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
    "policy/train/intent_critic.py",
    "policy/train/intent_net.py",
    "policy/train/dagger.py",
    "policy/train/tensorboard.py",
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
        ("policy", ("extender",)),
        ("extender", ("descheduler",)),
        ("descheduler", ("extender",)),
    ],
)
def test_packages_import_only_what_the_layering_allows(pkg, forbidden):
    bad = [(str(p.relative_to(ROOT)), m) for p in modules(pkg) for m in imports_of(p) if m.split(".")[0] in forbidden]
    assert bad == []


#: The simulation side of policy: the only part that may import the descheduler (to run its cycle as a library).
SIMULATION_SIDE = {"sim", "train", "bench", "whatif", "cli"}


def _contract(name_start: str) -> dict:
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    return next(c for c in contracts if c["name"].startswith(name_start))


def test_the_core_contracts_name_every_module_of_policy_outside_the_simulation_side():
    # a new module of policy is either on the simulation side or in the core lists of the contracts, never neither
    everything = {
        p.name.removesuffix(".py")
        for p in (ROOT / "policy").iterdir()
        if p.suffix == ".py" or (p / "__init__.py").is_file()
    }
    core = everything - SIMULATION_SIDE - {"__init__", "baselines"}
    no_servers = {
        m.removeprefix("policy.") for m in _contract("the policy core never imports the servers")["source_modules"]
    }
    no_sim = {
        m.removeprefix("policy.") for m in _contract("the serving packages and the policy core")["source_modules"]
    }
    assert no_servers == core | {"baselines"}
    assert no_sim == core | {"extender", "descheduler"}
    assert "policy.baselines" in _contract("the serving packages and the policy core")["forbidden_modules"]


def test_the_core_imports_neither_server():
    core = set(_contract("the policy core never")["source_modules"])
    bad = [
        (p.relative_to(ROOT).as_posix(), m)
        for p in modules("policy")
        if ".".join(p.relative_to(ROOT).with_suffix("").parts[:2]) in core
        for m in imports_of(p)
        if m.split(".")[0] in ("extender", "descheduler")
    ]
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


def test_the_headline_stacks_are_built_in_simulator_stacks_that_run_the_descheduler_as_a_library():
    # DESIGN.md section 3: the simulation side imports the descheduler's cycle; the descheduler imports no simulator
    from importlib import metadata

    from policy.sim.stacks import ENTRY_POINT_GROUP, available_stacks

    assert not [ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.value.startswith("descheduler")]
    stacks = available_stacks()
    assert stacks["hrl-scheduler"].origin == "builtin" and stacks["drpc"].origin == "builtin"
    assert stacks["hrl-scheduler"].factory.__module__ == "policy.sim.hrl_stacks"
    importers = {
        p.relative_to(ROOT).as_posix()
        for p in modules("policy")
        if any(m.split(".")[0] == "descheduler" for m in imports_of(p))
    }
    assert importers == {"policy/sim/hrl_stacks.py", "policy/sim/subresources.py"}
    assert not [
        p
        for pkg in ("descheduler", "extender")
        for p in modules(pkg)
        if any(m.startswith("policy.sim") for m in imports_of(p))
    ]


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
