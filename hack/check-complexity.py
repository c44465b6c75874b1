#!/usr/bin/env python3
"""The complexity budget of `make lint`: ruff's C901 (McCabe complexity above ``max-complexity``) and PLR0913 (more
than ``max-args`` parameters), both set in pyproject.toml, against an allow-list that only shrinks
(hack/complexity-allowlist.txt: one ``path:function RULE`` per line, the offenders of the day the budget began).

Fails (exit 1) on an offender the list does not name (refactor it: a function that needs more is two functions, or
its collaborators one value) and on a listed entry that no longer offends (delete the line: the budget shrank).

    hack/check-complexity.py            # the check (make lint)
    hack/check-complexity.py --list     # print today's offenders in the allow-list's format
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ALLOWLIST = ROOT / "hack" / "complexity-allowlist.txt"
RULES = ("C901", "PLR0913")


def _qualnames(path: Path) -> dict[int, str]:
    """Line of each function's ``def`` → its qualified name (``Class.method``, ``outer.inner``)."""
    out: dict[int, str] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    out[child.lineno] = name
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text(), str(path)), "")
    return out


def offenders(ruff: str) -> set[str]:
    """``path:function RULE`` for every function ruff reports under :data:`RULES`."""
    out = subprocess.run(
        [ruff, "check", "--select", ",".join(RULES), "--output-format", "json", "--exit-zero", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    found = set()
    names: dict[str, dict[int, str]] = {}
    for d in json.loads(out.stdout):
        rel = Path(d["filename"]).resolve().relative_to(ROOT).as_posix()
        if rel not in names:
            names[rel] = _qualnames(ROOT / rel)
        row = d["location"]["row"]
        found.add(f"{rel}:{names[rel].get(row, f'line {row}')} {d['code']}")
    return found


def read_allowlist() -> set[str]:
    lines = ALLOWLIST.read_text().splitlines() if ALLOWLIST.is_file() else []
    return {s.strip() for s in lines if s.strip() and not s.lstrip().startswith("#")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--list", action="store_true", help="print today's offenders in the allow-list's format")
    ap.add_argument("--ruff", default=str(Path(sys.executable).with_name("ruff")), help="the ruff executable")
    args = ap.parse_args(argv)
    found = offenders(args.ruff)
    if args.list:
        print("\n".join(sorted(found)))
        return 0
    allowed = read_allowlist()
    new, gone = sorted(found - allowed), sorted(allowed - found)
    for entry in new:
        print(f"check-complexity: {entry}: over the budget and not in {ALLOWLIST.name}", file=sys.stderr)
    for entry in gone:
        print(
            f"check-complexity: {entry}: no longer over the budget; delete its line from {ALLOWLIST.name}",
            file=sys.stderr,
        )
    if not new and not gone:
        print(f"check-complexity: {len(found)} allowed offenders ({ALLOWLIST.name}), no new one")
    return 1 if new or gone else 0


if __name__ == "__main__":
    sys.exit(main())
