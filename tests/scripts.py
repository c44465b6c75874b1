"""The repository's scripts (``hack/*.py``: not a package, names with dashes) as modules, for the tests of every
directory (``tests/`` is on ``sys.path``: tests/conftest.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_script(name: str, path: Path):
    """The script at ``path`` (e.g. ``ROOT / "hack" / "controlplane.py"``) as module ``name``, loaded once: a later
    call with the same ``name`` returns the module in ``sys.modules``."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]
