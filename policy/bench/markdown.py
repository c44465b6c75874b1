"""Rewrite one marked section of BENCHMARKS.md, leaving every other section as it is.

Each ``make bench*`` target owns one section, delimited by ``<!-- BEGIN <name> -->`` and
``<!-- END <name> -->``; a missing section is appended at the end of the file.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["ROOT", "BENCHMARKS_MD", "write_section"]

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS_MD = ROOT / "BENCHMARKS.md"


def write_section(name: str, markdown: str, path: Path | str = BENCHMARKS_MD) -> None:
    """Replace the body of section ``name`` (letters, digits, dashes) with ``markdown``.

    Raises ``ValueError`` for an invalid name or markers that appear unbalanced in the file.
    """
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", name):
        raise ValueError(f"section name: must be lowercase letters, digits and dashes, got {name!r}")
    p = Path(path)
    text = p.read_text(encoding="utf-8") if p.exists() else "# Benchmarks\n"
    begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
    block = f"{begin}\n{markdown.strip()}\n{end}"
    nb, ne = text.count(begin), text.count(end)
    if (nb, ne) == (0, 0):
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    elif (nb, ne) == (1, 1) and text.index(begin) < text.index(end):
        i, j = text.index(begin), text.index(end) + len(end)
        text = text[:i] + block + text[j:]
    else:
        raise ValueError(f"{p}: section {name!r} markers are unbalanced ({nb} BEGIN, {ne} END)")
    p.write_text(text, encoding="utf-8")
