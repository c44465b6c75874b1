"""hack/check-complexity.py: the complexity budget of `make lint` (ruff C901 and PLR0913 against an allow-list that
only shrinks) fails on a new offender and on a listed function that no longer offends."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("check_complexity", ROOT / "hack" / "check-complexity.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_committed_allow_list_is_exactly_todays_offenders():
    mod = _script()
    found = mod.offenders(str(Path(sys.executable).with_name("ruff")))
    assert "policy/sim/engine.py:Simulation.finish_minute C901" in found  # a real one, by its qualified name
    assert found == mod.read_allowlist()


def test_a_new_offender_and_a_stale_entry_both_fail_the_check(tmp_path, monkeypatch, capsys):
    mod = _script()
    today = {"a.py:f C901", "b.py:C.g PLR0913"}
    monkeypatch.setattr(mod, "offenders", lambda ruff: set(today))
    allow = tmp_path / "allow.txt"
    monkeypatch.setattr(mod, "ALLOWLIST", allow)
    allow.write_text("# header\na.py:f C901\nb.py:C.g PLR0913\n")
    assert mod.main([]) == 0
    allow.write_text("a.py:f C901\n")  # b.py:C.g is new
    assert mod.main([]) == 1
    assert "b.py:C.g PLR0913: over the budget" in capsys.readouterr().err
    allow.write_text("a.py:f C901\nb.py:C.g PLR0913\nc.py:h C901\n")  # c.py:h was refactored
    assert mod.main([]) == 1
    assert "c.py:h C901: no longer over the budget; delete its line" in capsys.readouterr().err
