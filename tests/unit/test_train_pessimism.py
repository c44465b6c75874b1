"""``hrl-policy train pessimism`` (policy.train.pessimism): the grid search over the intent ensemble's pessimism on
training episodes writes a file the served ensemble loads, judges every value on the same episodes, and refuses a
bad grid with one line naming the option."""

from __future__ import annotations

import json

import pytest

from policy.bundle import DEFAULT_BUNDLES
from policy.cli.core import main
from policy.highlevel import load_intent_policy
from policy.highlevel.tuned import tuned_pessimism
from policy.sim.app import load_app
from policy.sim.engine import ClusterSpec
from policy.sim.stacks import StackContext, build_stack
from policy.train.pessimism import PessimismSearchConfig, stack_name


def test_the_quick_search_writes_a_pessimism_the_served_ensemble_loads(tmp_path, capsys):
    out = tmp_path / "high" / "pessimism.json"
    assert main(["train", "pessimism", "--quick", "--values", "0,1", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    grid = {g["pessimism"]: g for g in doc["grid"]}
    assert set(grid) == {0.0, 1.0} and doc["episodes"] == 2
    best = min(grid.values(), key=lambda g: (g["objective"], g["pessimism"]))
    assert doc["pessimism"] == best["pessimism"] and grid[doc["pessimism"]]["paired_gap"] == 0.0
    for g in grid.values():  # each value's per-episode costs, on the same episodes
        assert len(g["episode_objectives"]) == 2
        assert g["objective"] == pytest.approx(sum(g["episode_objectives"]) / 2, abs=1e-5)
    assert json.loads(capsys.readouterr().out)["pessimism"] == doc["pessimism"]
    # beside an ensemble file, the served ensemble runs at the value chosen
    (out.parent / "ensemble.json").write_text(
        json.dumps({"kind": "Ensemble", "level": "high", "members": [str(DEFAULT_BUNDLES / "hrl-scheduler" / "high")]})
    )
    assert load_intent_policy(out.parent).pessimism == tuned_pessimism(out.parent) == doc["pessimism"]


@pytest.mark.parametrize("values", ["a,b", ",", "-0.5", "nan", "inf"])
def test_a_bad_grid_is_refused_naming_the_option(values, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["train", "pessimism", "--quick", "--values", values])
    assert exc.value.code == 2
    assert "--values: expected comma-separated numbers" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--values", "2"], "--values: expected numbers in [0, 1] for knob pessimism, got 2.0"),
        (["--knob", "weight", "--values", "2.5"], "--values: expected integers in 1..100 for knob weight, got 2.5"),
        (
            ["--knob", "forecast_min", "--values", "0.4"],
            "--values: expected numbers in [0.5, 1] for knob forecast_min, got 0.4",
        ),
        (["--episodes", "0"], "--episodes, --workers: expected integers >= 1"),
    ],
)
def test_a_grid_outside_the_knobs_range_is_one_line_naming_the_option(argv, message, capsys):
    assert main(["train", "pessimism", "--quick", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_an_output_directory_is_refused_before_the_search(tmp_path, capsys):
    assert main(["train", "pessimism", "--quick", "--out", str(tmp_path)]) == 2
    assert f"--out: {tmp_path} is a directory" in capsys.readouterr().err


def test_the_weight_knob_is_searched_and_printed_not_served(tmp_path, capsys):
    assert main(["train", "pessimism", "--quick", "--knob", "weight", "--values", "2,10"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["knob"] == "weight" and doc["weight"] in (2.0, 10.0)
    assert [g["weight"] for g in doc["grid"]] == [2.0, 10.0] and "pessimism" not in doc


def test_the_forecast_min_knob_is_searched_and_printed_not_served(tmp_path, capsys):
    assert main(["train", "pessimism", "--quick", "--knob", "forecast_min"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["knob"] == "forecast_min" and [g["forecast_min"] for g in doc["grid"]] == [0.5, 1.0]
    # each grid point runs the served stack with that knob, which reaches its autoscaler
    assert stack_name("forecast_min", 1.0) == "hrl-ensemble@forecast_min=1.0"
    ctx = StackContext(app=load_app("online-boutique"), cluster=ClusterSpec())
    assert build_stack(stack_name("forecast_min", 1.0), ctx).handles["planner"].autoscaler.forecast_min == 1.0
    # a research grid never lands where a served ensemble reads its pessimism
    assert (
        main(["train", "pessimism", "--quick", "--knob", "forecast_min", "--out", str(tmp_path / "pessimism.json")])
        == 2
    )
    assert "--out: " in capsys.readouterr().err and not (tmp_path / "pessimism.json").exists()


def test_the_autoscaler_knobs_are_searched_and_reach_the_autoscaler(capsys):
    assert main(["train", "pessimism", "--quick", "--knob", "entry_forecast"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["knob"] == "entry_forecast" and [g["entry_forecast"] for g in doc["grid"]] == [0, 1]
    assert all(type(g["entry_forecast"]) is int for g in doc["grid"])  # an integer knob prints as one
    # --quick runs a knob's first and last default value, as it does for pessimism
    assert main(["train", "pessimism", "--quick", "--knob", "limit_target"]) == 0
    assert [g["limit_target"] for g in json.loads(capsys.readouterr().out)["grid"]] == [0.0, 0.3]
    assert stack_name("entry_forecast", 1.0) == "hrl-ensemble@entry_forecast=1"
    ctx = StackContext(app=load_app("online-boutique"), cluster=ClusterSpec())
    assert build_stack(stack_name("entry_forecast", 1.0), ctx).handles["planner"].autoscaler.entry_forecast is True
    with pytest.raises(ValueError, match="expected integers in 0..1 for knob entry_forecast"):
        PessimismSearchConfig(knob="entry_forecast", pessimism_values=(0.5,))
    # the burst share too: a fraction, written exactly
    assert stack_name("burst", 0.25) == "hrl-ensemble@burst=0.25"
    assert build_stack(stack_name("burst", 0.25), ctx).handles["planner"].autoscaler.burst == 0.25
    with pytest.raises(ValueError, match=r"expected numbers in \[0, 1\] for knob burst"):
        PessimismSearchConfig(knob="burst", pessimism_values=(1.5,))
    assert build_stack("hrl-ensemble@limit_target=0.2", ctx).handles["planner"].autoscaler.limit_target == 0.2
    with pytest.raises(ValueError, match=r"expected numbers in \[0, 0.9\] for knob limit_target"):
        PessimismSearchConfig(knob="limit_target", pessimism_values=(0.95,))


def test_the_config_refuses_an_empty_or_out_of_range_grid():
    with pytest.raises(ValueError, match="pessimism_values: expected at least one value"):
        PessimismSearchConfig(pessimism_values=())
    with pytest.raises(ValueError, match="pessimism_values: expected numbers in"):
        PessimismSearchConfig(pessimism_values=(1.2,))
    with pytest.raises(ValueError, match="knob: expected one of pessimism, weight, forecast_min"):
        PessimismSearchConfig(knob="tseed")


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--minutes", "0"], "--minutes: expected at least 10, got 0"),
        (["--episodes", "0"], "--episodes, --workers: expected integers >= 1, got 0"),
    ],
)
def test_train_constant_names_the_option_of_a_bad_value_too(argv, message, capsys):
    assert main(["train", "constant", "--quick", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "episode_minutes" not in err and len(err.strip().splitlines()) == 1
