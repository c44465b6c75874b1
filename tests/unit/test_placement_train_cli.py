"""`hrl-policy train placement` (policy/train/placement.py): flags that would train nothing are refused before
anything runs, and a trained bundle's version names its weights (and says -quick) so it never equals the committed
bundle's."""

from __future__ import annotations

import json
import re

import pytest

from policy.bundle import PolicyBundle
from policy.cli.core import main
from policy.lowlevel import DEFAULT_PLACEMENT_BUNDLE

torch = pytest.importorskip("torch")
from policy.train.placement import PlacementTrainConfig  # noqa: E402


@pytest.mark.parametrize(
    "argv,flag,value",
    [
        (["--iterations", "0"], "--iterations", "0"),
        (["--iterations", "-3"], "--iterations", "-3"),
        (["--time-budget", "-1"], "--time-budget", "-1"),
        (["--time-budget", "0"], "--time-budget", "0"),
        (["--time-budget", "nan"], "--time-budget", "nan"),
        (["--seed", "-1"], "--seed", "-1"),
    ],
)
def test_flags_that_would_train_nothing_are_refused_on_one_line_with_exit_2(tmp_path, capsys, argv, flag, value):
    out = tmp_path / "bundle"
    rc = main(
        ["train", "placement", "--quick", "--no-eval", "--out", str(out), "--run-dir", str(tmp_path / "run"), *argv]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith(f"hrl-policy train placement: error: {flag}: ") and f"got {value}" in err[0]
    assert not out.exists() and not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "kw,field",
    [
        ({"iterations": 0}, "iterations"),
        ({"time_budget_s": 0.0}, "time_budget_s"),
        ({"time_budget_s": float("inf")}, "time_budget_s"),
        ({"seed": -1}, "seed"),
    ],
)
def test_the_config_refuses_the_same_values_naming_the_field(kw, field):
    with pytest.raises(ValueError, match=f"^{field}: expected"):
        PlacementTrainConfig(**kw)


def test_a_quick_bundles_version_names_its_weights_and_is_not_the_committed_one(tmp_path, capsys):
    out = tmp_path / "bundle"
    assert (
        main(
            [
                "train",
                "placement",
                "--quick",
                "--iterations",
                "1",
                "--no-eval",
                "--out",
                str(out),
                "--run-dir",
                str(tmp_path / "run"),
            ]
        )
        == 0
    )
    b = PolicyBundle.load(out)
    sha = json.loads((out / "manifest.json").read_text())["weights"]["sha256"]
    assert re.fullmatch(rf"placement-encoder-\d{{8}}-s0-quick-{sha[:8]}", b.policy_version)
    assert b.policy_version != PolicyBundle.load(DEFAULT_PLACEMENT_BUNDLE).policy_version
    assert f"{b.policy_version}: bundle written to {out} (quick run)" in capsys.readouterr().err
