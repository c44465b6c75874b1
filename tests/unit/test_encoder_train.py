"""`hrl-policy train encoder` (policy/train/encoder.py): a quick run never overwrites the committed bundle, every
argument is checked before training, and a trained bundle's version names its weights (and says -quick)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from policy.bundle import PolicyBundle
from policy.cli.core import main
from policy.encoder import DEFAULT_ENCODER_BUNDLE
from policy.train import encoder as encoder_train

torch = pytest.importorskip("torch")


def fake_train(seen: dict):
    def train(cfg, out, **kw):
        seen.update(cfg=cfg, out=out)
        return None, {"heldout": {}, "baseline_mean": {}, "policy_version": "encoder-x-quick-00000000"}

    return train


def test_a_quick_run_without_out_writes_under_runs_and_says_where(monkeypatch, capsys):
    seen: dict = {}
    monkeypatch.setattr(encoder_train, "train_encoder", fake_train(seen))
    assert main(["train", "encoder", "--quick"]) == 0
    out = Path(seen["out"]).resolve()
    assert out != DEFAULT_ENCODER_BUNDLE.resolve() and DEFAULT_ENCODER_BUNDLE.resolve() not in out.parents
    assert out.parent.parent.name == "runs" and seen["cfg"].quick
    cap = capsys.readouterr()
    assert f"bundle written to {seen['out']} (quick run)" in cap.out + cap.err
    seen.clear()
    assert encoder_train.main(["--quick"]) == 0  # python -m policy.train.encoder: the same default
    assert Path(seen["out"]).resolve() == out


def test_without_quick_the_default_is_still_the_committed_bundle(monkeypatch):
    seen: dict = {}
    monkeypatch.setattr(encoder_train, "train_encoder", fake_train(seen))
    assert main(["train", "encoder"]) == 0
    assert Path(seen["out"]).resolve() == DEFAULT_ENCODER_BUNDLE.resolve() and not seen["cfg"].quick


@pytest.mark.parametrize(
    "argv,flag,value",
    [
        (["--epochs", "0"], "--epochs", "0"),
        (["--layers", "-1"], "--layers", "-1"),
        (["--seed", "-2"], "--seed", "-2"),
        (["--checkpoint", "/nonexistent/dir/enc.pt"], "--checkpoint", "/nonexistent/dir"),
        (["--json", "/nonexistent/dir/r.json"], "--json", "/nonexistent/dir"),
    ],
)
def test_a_bad_argument_is_one_line_exit_2_before_any_training(tmp_path, monkeypatch, capsys, argv, flag, value):
    seen: dict = {}
    monkeypatch.setattr(encoder_train, "train_encoder", fake_train(seen))
    rc = main(["train", "encoder", "--quick", "--out", str(tmp_path / "b"), *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and seen == {} and len(err) == 1
    assert err[0].startswith(f"hrl-policy train encoder: error: {flag}: ") and value in err[0]


def test_a_quick_encoders_version_names_its_weights_and_differs_from_the_committed_one(tmp_path):
    cfg = encoder_train.EncoderTrainConfig(
        n_train=16,
        n_val_synthetic=4,
        n_val_per_app=1,
        epochs=1,
        hidden=8,
        embedding=8,
        head_hidden=8,
        batch_graphs=8,
        size_range=(4, 8),
        holdout_apps=("online-boutique",),
        apps=("online-boutique",),
        quick=True,
    )
    _net, report = encoder_train.train_encoder(cfg, tmp_path, log=lambda m: None, progress=False)
    b = PolicyBundle.load(tmp_path)
    sha = json.loads((tmp_path / "manifest.json").read_text())["weights"]["sha256"]
    assert re.fullmatch(rf"encoder-\d{{8}}-s0-l3-quick-{sha[:8]}", b.policy_version)
    assert report["policy_version"] == b.policy_version
    committed = PolicyBundle.load(DEFAULT_ENCODER_BUNDLE).policy_version
    assert b.policy_version != committed  # the serving cross-checks (encoder_version equality) tell them apart
