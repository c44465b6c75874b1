"""Training seeds of the learned stacks: ``NAME@tseed=N`` loads policy/bundles/seeds/N/<stack>, seed 0 the committed
bundles, and a missing seed raises BundleMissing naming the path (never a fallback to another seed's bundles); the
oracle's and hrl-constant's base follow the knob, and hrl-constant reads the tuned constant of its bundles."""

import json
import shutil
from pathlib import Path

import pytest

from policy import bundle
from policy.bundle import BundleMissing, training_seed_root
from policy.highlevel.autoscale import LIMIT_TARGET
from policy.sim.scenario import build
from policy.sim.stacks import StackContext, build_stack

LEARNED = (
    "hrl-scheduler",
    "hrl-no-encoder",
    "hrl-flat",
    "hrl-no-rebalance",
    "hrl-no-autoscale",
    "hrl-no-resize",
    "hrl-no-shield",
    "drpc",
    "lookahead-oracle",
    "hrl-constant",
)


@pytest.fixture(scope="module")
def ctx():
    run = build("heterogeneous", app="dsb-hotel-reservation", minutes=2, seed=0, n_samples=100)
    return StackContext(run.app, run.cluster, 0, run.config, rps=run.rps)


def test_the_bundles_root_of_a_training_seed():
    assert training_seed_root(0) == bundle.DEFAULT_BUNDLES
    assert training_seed_root(3) == bundle.SEED_BUNDLES / "3"
    assert training_seed_root(2, "/x") == Path("/x/seeds/2") and training_seed_root(0, "/x") == Path("/x")
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="training seed: expected an integer >= 0"):
            training_seed_root(bad)


@pytest.mark.parametrize("stack", LEARNED)
def test_a_missing_training_seed_raises_bundle_missing_naming_its_path(stack, ctx, tmp_path, monkeypatch):
    monkeypatch.setattr(bundle, "SEED_BUNDLES", tmp_path / "seeds")
    with pytest.raises(BundleMissing) as e:
        build_stack(f"{stack}@tseed=7", ctx)
    assert str(tmp_path / "seeds" / "7") in str(e.value) and "training seed 7" in str(e.value)
    assert str(e.value.path).startswith(str(tmp_path / "seeds" / "7"))


def test_a_training_seeds_bundles_are_the_ones_loaded(ctx, tmp_path, monkeypatch):
    # training seed 5 holds hrl-scheduler's bundles with the placement of hrl-no-encoder: the stack built at tseed 5
    # runs that placement, the committed stack does not
    root = tmp_path / "seeds" / "5"
    shutil.copytree(bundle.DEFAULT_BUNDLES / "hrl-scheduler", root / "hrl-scheduler")
    shutil.rmtree(root / "hrl-scheduler" / "low")
    shutil.copytree(bundle.DEFAULT_BUNDLES / "hrl-no-encoder" / "low", root / "hrl-scheduler" / "low")
    monkeypatch.setattr(bundle, "SEED_BUNDLES", tmp_path / "seeds")
    seeded = build_stack("hrl-scheduler@tseed=5", ctx).handles["placement"]
    committed = build_stack("hrl-scheduler", ctx).handles["placement"]
    flat = build_stack("hrl-no-encoder", ctx).handles["placement"]
    assert seeded.version == flat.version != committed.version


def test_hrl_constant_holds_the_tuned_constant_of_its_bundles_unless_a_knob_says_otherwise(ctx, tmp_path, monkeypatch):
    root = tmp_path / "seeds" / "4"
    shutil.copytree(bundle.DEFAULT_BUNDLES / "hrl-scheduler", root / "hrl-scheduler")
    shutil.copytree(bundle.DEFAULT_BUNDLES / "encoder", root / "encoder")
    (root / "hrl-scheduler" / "high" / "constant.json").write_text(
        json.dumps({"capacity_target": 0.55, "move_budget_frac": 0.25, "burst": 0.5})
    )
    monkeypatch.setattr(bundle, "SEED_BUNDLES", tmp_path / "seeds")
    assert build_stack("hrl-constant@tseed=4", ctx).handles["constant"] == {
        "capacity_target": 0.55,
        "move_budget_frac": 0.25,
        "burst": 0.5,
        "forecast_min": 0.5,
        "entry_forecast": False,
        "limit_target": LIMIT_TARGET,
    }
    assert build_stack("hrl-constant@tseed=4,capacity=0.9", ctx).handles["constant"]["capacity_target"] == 0.9
    knobbed = build_stack("hrl-constant@tseed=4,forecast_min=1,entry_forecast=1,limit_target=0.3", ctx)
    got = knobbed.handles["constant"]
    assert (got["forecast_min"], got["entry_forecast"], got["limit_target"]) == (1.0, True, 0.3)
    assert build_stack("hrl-constant@tseed=4,burst=1", ctx).handles["constant"]["burst"] == 1.0
    # the learned stack's autoscaler serves the same tuned burst share, unless its knob says otherwise
    assert build_stack("hrl-scheduler@tseed=4", ctx).handles["planner"].autoscaler.burst == 0.5
    assert build_stack("hrl-scheduler@tseed=4,burst=0", ctx).handles["planner"].autoscaler.burst == 0.0
    # the committed bundles: their constant.json when one is committed, else capacity 0.7, no moves and burst 0
    committed = bundle.DEFAULT_BUNDLES / "hrl-scheduler" / "high" / "constant.json"
    want = json.loads(committed.read_text()) if committed.is_file() else {"capacity_target": 0.7, "move_budget_frac": 0}
    got = build_stack("hrl-constant", ctx).handles["constant"]
    keys = ("capacity_target", "move_budget_frac", "burst")
    assert {k: got[k] for k in keys} == {k: float(want.get(k, 0.0)) for k in keys}
    # a file of before the burst share was searched: burst 0
    (root / "hrl-scheduler" / "high" / "constant.json").write_text('{"capacity_target": 0.6, "move_budget_frac": 0}')
    assert build_stack("hrl-constant@tseed=4", ctx).handles["constant"]["burst"] == 0.0
    for bad, field in (('{"capacity_target": 2}', "capacity_target"), (_with_burst(1.5), "burst")):
        (root / "hrl-scheduler" / "high" / "constant.json").write_text(bad)
        with pytest.raises(ValueError, match=f"constant.json: {field}: expected a number in"):
            build_stack("hrl-constant@tseed=4", ctx)
    # a key given twice: which value is meant is unknown, refused as in the configuration files
    (root / "hrl-scheduler" / "high" / "constant.json").write_text('{"capacity_target": 0.6, "capacity_target": 0.9}')
    with pytest.raises(ValueError, match="constant.json: not a usable JSON file: capacity_target: duplicate key"):
        build_stack("hrl-constant@tseed=4", ctx)


def _with_burst(burst: float) -> str:
    return json.dumps({"capacity_target": 0.6, "move_budget_frac": 0.0, "burst": burst})


def test_the_intent_autoscalers_knobs_are_refused_where_another_autoscaler_runs(ctx, tmp_path, monkeypatch):
    # bundles without a learned intent: the replica targets come from the DRPC students, which read neither knob
    root = tmp_path / "seeds" / "6"
    shutil.copytree(bundle.DEFAULT_BUNDLES / "hrl-scheduler", root / "hrl-scheduler")
    shutil.copytree(bundle.DEFAULT_BUNDLES / "encoder", root / "encoder")
    shutil.rmtree(root / "hrl-scheduler" / "high" / "intent")
    monkeypatch.setattr(bundle, "SEED_BUNDLES", tmp_path / "seeds")
    auto = build_stack("hrl-scheduler@tseed=6", ctx).handles["planner"].autoscaler
    assert auto is not None and not hasattr(auto, "forecast_min")
    for knob in ("forecast_min=1", "burst=1"):
        with pytest.raises(ValueError, match=rf"^knob {knob.split('=')[0]}: this stack's replica targets do not come"):
            build_stack(f"hrl-scheduler@tseed=6,{knob}", ctx)
