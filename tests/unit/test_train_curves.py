"""The high level's learning curves in one plot: DAgger's progress.csv and PPO's validation.csv are read by their
columns, a directory with neither is refused naming it."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")

from policy.train.curves import main, plot_curves, read_curve


def test_both_trainers_curves_are_read_and_drawn(tmp_path):
    dagger = tmp_path / "dagger-hrl-scheduler"
    dagger.mkdir()
    (dagger / "progress.csv").write_text("iteration,validation_objective,cpu_minutes\n1,4.5,3.0\n2,4.1,6.5\n")
    ppo = tmp_path / "hierarchy-hrl-scheduler"
    ppo.mkdir()
    (ppo / "progress.csv").write_text("iteration,objective\n1,5.0\n")  # PPO's training rows: not the curve
    (ppo / "validation.csv").write_text("iteration,cpu_minutes,objective\n5,10.0,4.9\n10,20.0,4.8\n")
    assert read_curve(dagger) == ("DAgger (dagger-hrl-scheduler)", [3.0, 6.5], [4.5, 4.1])
    assert read_curve(ppo) == ("PPO (hierarchy-hrl-scheduler)", [10.0, 20.0], [4.9, 4.8])
    out = plot_curves([dagger, ppo], tmp_path / "curves.png", constant=4.3)
    assert out.stat().st_size > 5000


def test_a_directory_without_a_curve_is_refused_in_one_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no progress.csv"):
        read_curve(tmp_path / "empty")
    assert main([str(tmp_path / "empty"), "-o", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(tmp_path / "empty") in err
