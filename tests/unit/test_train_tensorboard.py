"""TensorBoard logging of the training runs (policy/train/tensorboard.py, ``--tensorboard DIR``): the event files
hold the same numbers as the runs' CSV logs, step for step; off by default; a clear error without the package."""

from __future__ import annotations

import csv
import math
import sys

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from policy.cli.core import main
from policy.train import pipeline as ta
from policy.train.tensorboard import MISSING_TENSORBOARD, TrainingBoard


def scalars(log_dir) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of the event files under ``log_dir``: tag -> [(step, value)]."""
    ea = EventAccumulator(str(log_dir))
    ea.Reload()
    return {t: [(e.step, e.value) for e in ea.Scalars(t)] for t in ea.Tags()["scalars"]}


def test_a_board_writes_every_finite_number_of_a_row_at_its_step_and_nothing_else(tmp_path):
    with TrainingBoard(tmp_path / "tb", {"lr": 0.001}) as board:
        assert board.row(3, {"loss": 0.5, "ok": True, "policy": "drpc", "gap": math.nan, "n": 7}, "run") == 2
        assert board.row(4, {"loss": 0.25}, "run") == 1
    got = scalars(tmp_path / "tb")
    assert got == {"run/loss": [(3, 0.5), (4, 0.25)], "run/n": [(3, 7.0)]}


def test_without_a_directory_a_board_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    board = TrainingBoard(None, {"lr": 1})
    assert board.row(0, {"loss": 1.0}, "run") == 0
    board.close()
    assert list(tmp_path.iterdir()) == []


def test_without_the_tensorboard_package_the_flag_is_refused_with_one_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import raises ImportError
    with pytest.raises(ValueError, match="tensorboard package") as err:
        TrainingBoard(tmp_path / "tb")
    assert str(err.value) == MISSING_TENSORBOARD and "\n" not in MISSING_TENSORBOARD


def test_train_placement_writes_its_log_csv_as_tensorboard_scalars(tmp_path, capsys):
    run, tb = tmp_path / "run", tmp_path / "tb"
    argv = ["train", "placement", "--quick", "--no-eval", "--run-dir", str(run), "--tensorboard", str(tb)]
    assert main(argv) == 0, capsys.readouterr().err
    with (run / "log.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    got = scalars(tb)
    assert len(rows) == 4  # iteration 0 (the untrained policy's evaluation) and 3 updates
    for col in ("train_return", "loss", "entropy", "eval_gain"):
        want = [(int(r["iteration"]), float(r[col])) for r in rows if r[col] != ""]
        assert [(s, pytest.approx(v, rel=1e-6)) for s, v in got[f"placement/{col}"]] == want, col


def test_train_all_hands_each_stage_the_tensorboard_directory(tmp_path):
    seen = {}

    def stage(name):
        def run(root, *, quick, seed, log, tensorboard=None):
            seen[name] = tensorboard
            return []

        return run

    trainers = {s.name: stage(s.name) for s in ta.STAGES}
    ta.run_all(tmp_path / "b", trainers=trainers, log=lambda m: None, options=ta.StageOptions(tensorboard=tmp_path))
    assert seen == {s.name: tmp_path for s in ta.STAGES}
    seen.clear()
    ta.run_all(tmp_path / "b", trainers=trainers, log=lambda m: None)
    assert seen == {s.name: None for s in ta.STAGES}  # off unless asked


def test_train_dagger_writes_its_progress_csv_as_tensorboard_scalars(tmp_path, capsys):
    run, tb = tmp_path / "run", tmp_path / "tb"
    argv = ["train", "dagger", "--quick", "--run-dir", str(run), "--out", str(tmp_path / "b"), "--tensorboard", str(tb)]
    assert main(argv) == 0, capsys.readouterr().err
    with (run / "progress.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    got = scalars(tb)
    for col in ("fit_loss", "validation_objective", "labels"):
        want = [(int(r["iteration"]), float(r[col])) for r in rows]
        assert [(s, pytest.approx(v, rel=1e-6)) for s, v in got[f"dagger/{col}"]] == want, col
