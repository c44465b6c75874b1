"""`make train` orchestration (policy/train_all.py, ``hrl-policy train --all``) with stand-in trainers: the
stages in order, their wall time, the bundles of every stack, and the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from policy import train_all as ta
from policy.cli import build_parser, main


def fake_bundle(d: Path, tag: str) -> str:
    d.mkdir(parents=True, exist_ok=True)
    (d / "manifest.json").write_text(json.dumps({"tag": tag}))
    return str(d)


def stand_ins(order: list[str], fail: str | None = None):
    """Trainers that record the order they ran in and write fake bundles where the real stages would."""

    def encoder(root, *, quick, seed, log):
        order.append(f"encoder quick={quick} seed={seed}")
        return [fake_bundle(root / "encoder", "enc")]

    def drpc(root, *, quick, seed, log):
        order.append("drpc")
        assert (root / "encoder" / "manifest.json").is_file()  # reads what the encoder stage wrote
        if fail == "drpc":
            raise RuntimeError("TD3 diverged\nat step 3")
        for s in ("drpc", "hrl-scheduler/high", "hrl-no-encoder/high", "hrl-flat/high"):
            fake_bundle(root / s / "predictor", f"{s}-predictor")
            fake_bundle(root / s / "student", f"{s}-student")
        return [str(root / s) for s in ("drpc", "hrl-scheduler/high", "hrl-no-encoder/high", "hrl-flat/high")]

    def placement(root, *, quick, seed, log):
        order.append("placement")
        return [fake_bundle(root / s / "low", f"{s}-low") for s in ("hrl-scheduler", "hrl-no-encoder", "hrl-flat")]

    return {"encoder": encoder, "drpc": drpc, "placement": placement}


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        self.t += 1.5
        return self.t


def test_every_stage_runs_in_order_and_every_stack_gets_its_bundles(tmp_path):
    order: list[str] = []
    report = ta.run_all(tmp_path, quick=True, seed=7, trainers=stand_ins(order), log=lambda m: None, clock=Clock())
    assert order == ["encoder quick=True seed=7", "drpc", "placement"]
    assert report.ok and report.missing == {}
    assert [(s.name, s.status, s.wall_s) for s in report.stages] == [
        ("encoder", "ok", 1.5), ("drpc", "ok", 1.5), ("placement", "ok", 1.5)]
    assert sorted(report.assembled) == ["hrl-no-autoscale/low", "hrl-no-rebalance/high", "hrl-no-rebalance/low"]
    copied = json.loads((tmp_path / "hrl-no-rebalance" / "high" / "student" / "manifest.json").read_text())
    assert copied == {"tag": "hrl-scheduler/high-student"}  # the ablations run hrl-scheduler's trained policies


def test_a_failing_stage_stops_the_pipeline_and_the_report_says_where(tmp_path):
    order: list[str] = []
    report = ta.run_all(tmp_path, trainers=stand_ins(order, fail="drpc"), log=lambda m: None)
    assert order == ["encoder quick=False seed=0", "drpc"]
    assert [(s.name, s.status) for s in report.stages] == [("encoder", "ok"), ("drpc", "failed"), ("placement", "not_run")]
    assert report.stages[1].error == "RuntimeError: TD3 diverged at step 3" and not report.ok
    assert set(report.missing) == set(ta.REQUIRED_BUNDLES)  # nothing of the learned stacks exists
    assert report.missing["hrl-scheduler"] == [str(tmp_path / "hrl-scheduler" / "low"),
                                               str(tmp_path / "hrl-scheduler" / "high")]


def test_a_stage_whose_module_is_missing_is_a_clear_failure(tmp_path):
    stage = ta.Stage("drpc", "policy.no_such_module:train_stage", "x")
    with pytest.raises(ValueError, match="stage drpc: cannot import policy.no_such_module"):
        ta.resolve(stage)
    with pytest.raises(ValueError, match="unknown"):
        ta.run_all(tmp_path, stages=["encoder", "magic"])
    assert [s.name for s in ta.STAGES] == ["encoder", "drpc", "placement"]
    assert ta.resolve(ta.STAGES[0]) is ta.encoder_stage


def test_a_subset_of_stages_runs_in_the_fixed_order(tmp_path):
    order: list[str] = []
    report = ta.run_all(tmp_path, stages=["placement", "encoder"], trainers=stand_ins(order), log=lambda m: None)
    assert order[0].startswith("encoder") and order[1:] == ["placement"]
    assert [s.name for s in report.stages] == ["encoder", "placement"]


def test_the_report_files_and_the_markdown_section(tmp_path):
    report = ta.run_all(tmp_path / "b", trainers=stand_ins([]), log=lambda m: None, clock=Clock())
    j, c = ta.write_reports(report, tmp_path / "r")
    doc = json.loads(j.read_text())
    assert doc["ok"] and [s["stage"] for s in doc["stages"]] == ["encoder", "drpc", "placement"]
    assert doc["stages"][0]["wall_s"] == 1.5 and doc["total_wall_s"] > 0
    rows = c.read_text().splitlines()
    assert rows[0] == "stage,status,wall_s,bundles" and rows[1].startswith("encoder,ok,1.500,")
    md = ta.markdown(report)
    assert md.startswith("## Training") and "| encoder " in md and "| total " in md and "wall s" in md


def test_the_command_line_nests_train_all_next_to_the_stage_commands(tmp_path, monkeypatch, capsys):
    p = build_parser()
    assert p.parse_args(["train", "encoder", "--quick"])._name == "train encoder"
    assert p.parse_args(["train", "--all"])._name == "train"
    assert main(["train"]) == 2 and "give --all" in capsys.readouterr().err
    order: list[str] = []
    monkeypatch.setattr(ta, "resolve", lambda stage: stand_ins(order)[stage.name])
    rc = main(["train", "--all", "--quick", "--out", str(tmp_path / "bundles"), "--report", str(tmp_path / "rep")])
    assert rc == 0, capsys.readouterr().err
    assert len(order) == 3 and (tmp_path / "rep" / "training.json").is_file()
    assert (tmp_path / "bundles" / "hrl-no-autoscale" / "low" / "manifest.json").is_file()


def test_the_orchestrator_the_hierarchy_and_the_learned_stacks_load_no_torch():
    import subprocess
    import sys

    code = ("import sys, policy.train_all, policy.hrl, descheduler.stacks, descheduler.scale; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
