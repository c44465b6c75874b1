"""BENCHMARKS.md sections: each benchmark rewrites only its own."""

import pytest

from policy.bench.markdown import write_section


def test_a_section_is_appended_then_replaced_without_touching_the_others(tmp_path):
    f = tmp_path / "B.md"
    f.write_text("# Benchmarks\nintro\n")
    write_section("policy", "table v1", f)
    write_section("scheduler", "sched v1", f)
    write_section("policy", "table v2", f)
    text = f.read_text()
    assert "table v1" not in text and "table v2" in text and "sched v1" in text and "intro" in text
    assert text.index("table v2") < text.index("sched v1")


def test_unbalanced_markers_are_refused_and_the_file_is_unchanged(tmp_path):
    f = tmp_path / "B.md"
    f.write_text("<!-- BEGIN policy -->\nold\n")
    with pytest.raises(ValueError, match="unbalanced"):
        write_section("policy", "new", f)
    assert f.read_text() == "<!-- BEGIN policy -->\nold\n"


def test_a_bad_section_name_is_refused():
    with pytest.raises(ValueError, match="section name"):
        write_section("Policy Table", "x")
