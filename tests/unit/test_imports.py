"""The import structure of policy, extender and descheduler (DESIGN.md section 3): no module cycle, and an import
inside a function only where it defers a dependency a process may not have or need. Read from the source (AST), so
an import hidden in a function or under ``TYPE_CHECKING`` counts like any other."""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("policy", "extender", "descheduler")

#: The optional extras: not installed by `make demo` nor in the serving images, so imported where they are used.
OPTIONAL = {
    "torch": "[train]",
    "gymnasium": "[train], [bench]",
    "matplotlib": "[train], [bench]",
    "simpy": "[train], [bench]",
    "ray": "[train], [bench]",
    "highspy": "[bench]",
    "granian": "[bench]",
    "orjson": "[bench]",
    "uvicorn": "[test], [bench]",
    "stable_baselines3": "[test]",
    "sb3_contrib": "[test]",
}
#: Installed everywhere, but loaded only by a process that uses them (the servers' start-up time and memory).
DEFERRED = {
    "kubernetes": "only a process that talks to an API server (the extender reading a snapshot file never does)",
    "grpc": "only a process that talks to or serves the embedding cache",
    "grpc_health": "only a process that talks to or serves the embedding cache",
    "py_grpc_prometheus": "only the embedding cache's server",
    "httpx": "only live Prometheus sources and the simulator's HTTP extender",
    "networkx": "graph algorithms, never on the servers' path (ServiceGraph.to_networkx)",
    "uvloop": "only the process that serves HTTP (extender.http.HttpServer.run); not installed on Windows",
    "tqdm": "only a command drawing a progress bar on a terminal (policy.telemetry.progress); never the servers",
}
#: Commands load what the subcommand they run needs, on dispatch: `hrl-policy cache serve` (the embedding cache's
#: sidecar) loads no simulator, `hrl-extender --version` no server. Their imports of first-party modules may wait.
COMMAND_MODULES = ("policy/cli/", "extender/__main__.py", "descheduler/__main__.py")


@dataclass
class Module:
    path: str
    top: set[str] = field(default_factory=set)  # first-party modules imported at module level
    top_external: set[str] = field(default_factory=set)  # external top-level package names, module level
    edges: set[str] = field(default_factory=set)  # every first-party import (module level, functions, TYPE_CHECKING)
    lazy: list[tuple[int, set[str], set[str]]] = field(default_factory=list)  # (line, first-party, external)


def _files() -> dict[str, str]:
    out = {}
    for pkg in PACKAGES:
        for p in sorted((ROOT / pkg).rglob("*.py")):
            rel = p.relative_to(ROOT).as_posix()
            name = rel.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
            out[name] = rel
    return out


def _targets(module: str, is_pkg: bool, node: ast.Import | ast.ImportFrom, names: set[str]):
    def known(n: str) -> str:
        while n and n not in names:
            n = n.rpartition(".")[0]
        return n

    first, external = set(), set()
    if isinstance(node, ast.Import):
        for a in node.names:
            (first.add(known(a.name)) if a.name.split(".")[0] in PACKAGES else external.add(a.name.split(".")[0]))
        return first - {""}, external
    base = node.module or ""
    if node.level:
        parts = module.split(".")[: None if is_pkg else -1]
        parts = parts[: len(parts) - node.level + 1]
        base = ".".join([*parts, base] if base else parts)
    if base.split(".")[0] not in PACKAGES:
        return set(), {base.split(".")[0]}
    for a in node.names:
        first.add(known(f"{base}.{a.name}") if f"{base}.{a.name}" in names else known(base))
    return first - {"", module}, external


def _is_type_checking(node: ast.AST) -> bool:
    t = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING")
        or (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")
    )


def scan() -> dict[str, Module]:
    files = _files()
    mods: dict[str, Module] = {}
    for name, rel in files.items():
        m = mods[name] = Module(rel)
        is_pkg = rel.endswith("__init__.py")

        def visit(node: ast.AST, in_function: bool, m: Module = m, name: str = name, is_pkg: bool = is_pkg) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.Import | ast.ImportFrom):
                    first, external = _targets(name, is_pkg, child, set(files))
                    m.edges |= first
                    if in_function:
                        m.lazy.append((child.lineno, first, external))
                    else:
                        m.top |= first
                        m.top_external |= external
                elif _is_type_checking(child):
                    for sub in ast.walk(child):
                        if isinstance(sub, ast.Import | ast.ImportFrom):
                            m.edges |= _targets(name, is_pkg, sub, set(files))[0]
                else:
                    fn = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
                    visit(child, in_function or fn)

        visit(ast.parse((ROOT / rel).read_text(), rel), False)
    return mods


def deferring(mods: dict[str, Module]) -> set[str]:
    """The first-party modules whose module-level imports (transitively) load an optional or deferred package."""
    out = {n for n, m in mods.items() if m.top_external & (OPTIONAL.keys() | DEFERRED.keys())}
    grew = True
    while grew:
        grew = False
        for n, m in mods.items():
            if n not in out and m.top & out:
                out.add(n)
                grew = True
    return out


def cycles(mods: dict[str, Module]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), over every import edge."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(mods[v].edges):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(mods):
        if v not in index:
            connect(v)
    return out


def lazy_imports_not_allowed(mods: dict[str, Module]) -> list[str]:
    defer = deferring(mods)
    bad = []
    for m in mods.values():
        command = m.path.startswith(COMMAND_MODULES)
        for line, first, external in m.lazy:
            if external & (OPTIONAL.keys() | DEFERRED.keys()) or first & defer:
                continue
            if command and first and not external:
                continue
            bad.append(f"{m.path}:{line}: {', '.join(sorted(first | external))}")
    return bad


def test_no_module_imports_itself_back_through_others():
    assert cycles(scan()) == []


def test_imports_inside_functions_only_defer_an_optional_or_deferred_dependency():
    assert lazy_imports_not_allowed(scan()) == []


def test_the_scan_sees_a_cycle_and_a_lazy_import_of_a_plain_module():
    # the two checks above can fail: a hidden cycle and a function-level import of a first-party module
    mods = scan()
    mods["policy.state"].edges.add("policy.index")
    mods["policy.state"].lazy.append((1, {"policy.index"}, set()))
    mods["policy.index"].lazy.append((2, set(), {"tabulate"}))
    assert ["policy.index", "policy.state"] in cycles(mods)
    assert set(lazy_imports_not_allowed(mods)) == {"policy/state.py:1: policy.index", "policy/index.py:2: tabulate"}
    mods["policy.index"].lazy[-1] = (2, set(), {"torch"})
    assert lazy_imports_not_allowed(mods) == ["policy/state.py:1: policy.index"]


def test_the_servers_load_neither_the_simulator_nor_the_deferred_packages():
    code = (
        "import sys, extender.server, extender.__main__, extender.scoring, descheduler.loop, descheduler.__main__, "
        "policy.cli, policy.cache, policy.lowlevel, policy.highlevel; "
        "print(sorted({m.split('.')[0] if not m.startswith('policy.') else '.'.join(m.split('.')[:2]) "
        "for m in sys.modules}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    loaded = set(ast.literal_eval(out.stdout.strip()))
    unwanted = {"policy.sim", "policy.train", "policy.bench", "policy.baselines", *OPTIONAL, *DEFERRED}
    assert loaded & unwanted == set()
