"""The bench's targets on the objective (the oracle, the best baseline, the best constant, the shares of the oracle's
gain, the cells where the oracle loses) and the spread across training seeds with the ablation verdicts, on
hand-computed values."""

import math

import pytest

from policy.bench.spread import ablation_verdict, seed_spread, spreads_of_cell, training_seed_of, with_training_seed
from policy.bench.targets import (
    LOSS_REASONS,
    best_baseline,
    cell_targets,
    gain_floor,
    oracle_loss,
    oracle_share,
    paired,
)

T2 = 12.706  # Student t(0.975, 1)
T3 = 4.303  # Student t(0.975, 2)


def by_seed(*values):
    return dict(enumerate(values))


def test_the_share_is_zero_at_the_constant_one_at_the_oracle_and_linear_between():
    assert oracle_share(5.0, 3.0, 5.0) == 0.0
    assert oracle_share(5.0, 3.0, 3.0) == 1.0
    assert oracle_share(5.0, 3.0, 4.5) == pytest.approx(0.25)
    assert oracle_share(5.0, 3.0, 6.0) == pytest.approx(-0.5)  # worse than the constant
    assert oracle_share(5.0, 3.0, 2.0) == pytest.approx(1.5)  # better than the oracle


def test_no_share_where_the_oracle_gains_less_than_the_floor():
    assert gain_floor(5.0) == pytest.approx(0.1)  # 2 % of the constant's objective
    assert gain_floor(0.5) == pytest.approx(0.02)  # the absolute floor
    assert oracle_share(5.0, 4.95, 4.9) is None  # a gain of 0.05 < 0.1: the share would divide by noise
    assert oracle_share(5.0, 4.8, 4.9) == pytest.approx(0.5)  # above the floor: reported
    assert oracle_share(5.0, 6.0, 4.0) is None  # the oracle is worse than the constant: no gain to share


def test_the_best_baseline_is_the_setting_of_least_mean_objective_the_first_of_equals():
    obj = {"a": by_seed(3.0, 5.0), "b": by_seed(4.0, 3.0), "c": by_seed(3.5, 3.5), "hrl": by_seed(0.1, 0.1)}
    assert best_baseline(obj, ["a", "b", "c"]) == "b"  # means 4.0, 3.5, 3.5: b comes first
    assert best_baseline(obj, ["c", "b"]) == "c"
    assert best_baseline(obj, ["a", "not-run"]) == "a"
    assert best_baseline(obj, ["not-run"]) is None  # a contender is never the best baseline


def test_the_targets_of_a_cell_pair_the_seeds_and_share_every_contender():
    obj = {
        "hpa@0.6": by_seed(4.0, 4.4),
        "hpa": by_seed(4.5, 4.5),
        "hrl-constant": by_seed(5.0, 5.2),
        "lookahead-oracle": by_seed(3.0, 3.4),
        "hrl-scheduler": by_seed(4.0, 4.2),
        "drpc": by_seed(5.1, 5.1),
    }
    t = cell_targets(
        obj, ["hpa@0.6", "hpa"], ["hrl-scheduler", "drpc", "hrl-constant", "lookahead-oracle"], "lookahead-oracle"
    )
    assert t["oracle"] == {
        "stack": "lookahead-oracle",
        "objective": {"mean": pytest.approx(3.2), "ci95": pytest.approx(T2 * 0.2)},
    }
    assert t["best_constant"]["stack"] == "hrl-constant" and t["best_constant"]["objective"]["mean"] == 5.1
    assert t["best_baseline"]["stack"] == "hpa@0.6"
    # constant − oracle per seed: 2.0 and 1.8
    assert t["oracle_gain"] == {"mean": pytest.approx(1.9), "ci95": pytest.approx(T2 * 0.1)}
    # (5.1 − 4.1) / (5.1 − 3.2), (5.1 − 5.1) / 1.9; the targets themselves are not listed
    assert t["share"] == {"hrl-scheduler": pytest.approx(1.0 / 1.9), "drpc": pytest.approx(0.0)}
    assert t["best_baseline"]["share"] == pytest.approx((5.1 - 4.2) / 1.9)
    # without an oracle run there is no target to share
    t = cell_targets(obj, ["hpa"], ["hrl-scheduler"], None)
    assert t["oracle"] is None and t["oracle_gain"] is None and t["share"] == {}
    assert t["best_baseline"]["share"] is None


def test_a_cell_where_the_oracle_loses_to_a_baseline_is_listed_with_both_objectives_the_difference_and_why():
    obj = {"hpa": by_seed(2.0, 2.2), "lookahead-oracle": by_seed(3.0, 3.4), "hrl-constant": by_seed(4.0, 4.0)}
    loss = oracle_loss(obj, "hpa", "lookahead-oracle")
    assert loss["baseline"] == "hpa"
    assert loss["oracle_objective"]["mean"] == pytest.approx(3.2)
    assert loss["baseline_objective"]["mean"] == pytest.approx(2.1)
    assert loss["difference"] == {"mean": pytest.approx(1.1), "ci95": pytest.approx(T2 * 0.1)}
    assert loss["reason"] == LOSS_REASONS["stack"].format(baseline="hpa")  # it beats the constant: the stack's gap
    obj["hrl-constant"] = by_seed(2.5, 2.5)
    assert oracle_loss(obj, "hpa", "lookahead-oracle")["reason"] == LOSS_REASONS["search"]
    del obj["hrl-constant"]
    assert oracle_loss(obj, "hpa", "lookahead-oracle")["reason"] == LOSS_REASONS["unknown"]
    obj["hpa"] = by_seed(3.2, 3.2)  # equal means: no loss
    assert oracle_loss(obj, "hpa", "lookahead-oracle") is None
    assert oracle_loss(obj, None, "lookahead-oracle") is None and oracle_loss(obj, "hpa", None) is None


def test_paired_differences_use_the_seeds_both_ran():
    assert paired({0: 3.0, 1: 5.0, 2: 9.0}, {1: 4.0, 2: 6.0, 3: 0.0}) == {
        "mean": pytest.approx(2.0),
        "ci95": pytest.approx(T2 * math.sqrt(2.0) / math.sqrt(2.0)),
    }
    assert paired({0: 1.0}, {1: 1.0}) is None


def test_training_seed_names_round_trip():
    assert with_training_seed("hrl-scheduler", 2) == "hrl-scheduler@tseed=2"
    assert with_training_seed("hrl-scheduler@tseed=2", 0) == "hrl-scheduler"
    assert with_training_seed("lookahead-oracle@horizon=5", 1) == "lookahead-oracle@horizon=5,tseed=1"
    assert training_seed_of("lookahead-oracle@horizon=5,tseed=1") == ("lookahead-oracle@horizon=5", 1)
    assert training_seed_of("drpc") == ("drpc", 0)


def test_the_spread_across_training_seeds_sits_next_to_the_spread_across_evaluation_seeds():
    # y[t][s]: training seeds 0..2, evaluation seeds 0..1
    y = {0: {0: 1.0, 1: 3.0}, 1: {0: 2.0, 1: 4.0}, 2: {0: 3.0, 1: 5.0}}
    sp = seed_spread(y)
    assert sp["per_training_seed"] == [2.0, 3.0, 4.0]
    # over training seeds: mean 3, sd 1, n 3
    assert sp["training"] == {"mean": 3.0, "ci95": pytest.approx(T3 / math.sqrt(3))}
    # over evaluation seeds of mean_t y[t][s]: 2 and 4, sd sqrt(2), n 2
    assert sp["evaluation"] == {"mean": 3.0, "ci95": pytest.approx(T2 * math.sqrt(2) / math.sqrt(2))}
    with pytest.raises(ValueError, match="every training seed needs values"):
        seed_spread({0: {}})


def spread(mean, train_ci, eval_ci):
    return {"training": {"mean": mean, "ci95": train_ci}, "evaluation": {"mean": mean, "ci95": eval_ci}}


@pytest.mark.parametrize(
    ("hrl", "ablation", "verdict"),
    [
        (spread(3.0, 0.2, 0.3), spread(4.0, 0.2, 0.3), "better"),  # 1.0 > 0.4 and > 0.6
        (spread(4.0, 0.2, 0.3), spread(3.0, 0.2, 0.3), "worse"),
        (spread(3.0, 0.6, 0.1), spread(4.0, 0.6, 0.1), "within"),  # apart across evaluation seeds only
        (spread(3.0, 0.1, 0.6), spread(4.0, 0.1, 0.6), "within"),  # apart across training seeds only
        (spread(3.0, 0.5, 0.5), spread(4.0, 0.5, 0.5), "within"),  # touching is not outside
    ],
)
def test_an_ablation_verdict_counts_only_outside_both_intervals(hrl, ablation, verdict):
    v = ablation_verdict(hrl, ablation, 3, 3, "hrl-flat")
    assert v == {
        "verdict": verdict,
        "difference": pytest.approx(ablation["training"]["mean"] - hrl["training"]["mean"]),
        "why": None,
    }


def test_no_verdict_without_two_training_seeds_on_each_side():
    v = ablation_verdict(spread(3.0, 0.0, 0.1), spread(9.0, 0.0, 0.1), 3, 1, "hrl-flat")
    assert v["verdict"] is None and v["difference"] == pytest.approx(6.0)
    assert v["why"] == "hrl-flat ran 1 training seed: no training spread to be outside of"
    assert "hrl-scheduler ran 1" in ablation_verdict(spread(3.0, 0, 0), spread(3.0, 0, 0), 1, 3)["why"]


def run(stack, seed, objective):
    return {
        "policy": stack,
        "seed": seed,
        "metrics": {
            "objective": objective,
            "latency_p95_ms": 10.0 * objective,
            "failed_pct": 0.0,
            "cpu_core_hours": 1.0,
        },
    }


def test_a_cells_spreads_group_the_training_seeds_of_each_learned_stack():
    runs = {
        "hrl-scheduler": [run("hrl-scheduler", 0, 1.0), run("hrl-scheduler", 1, 3.0)],
        "hrl-scheduler@tseed=1": [run("hrl-scheduler@tseed=1", 0, 2.0), run("hrl-scheduler@tseed=1", 1, 4.0)],
        "drpc@tseed=1": [run("drpc@tseed=1", 0, 2.0)],  # no training seed 0: not reported
        "hpa": [run("hpa", 0, 1.0)],
    }
    sp = spreads_of_cell(runs, ["hrl-scheduler", "drpc"])
    assert list(sp) == ["hrl-scheduler"]
    assert sp["hrl-scheduler"]["training_seeds"] == [0, 1]
    assert sp["hrl-scheduler"]["objective"]["per_training_seed"] == [2.0, 3.0]
    assert sp["hrl-scheduler"]["latency_p95_ms"]["training"]["mean"] == pytest.approx(25.0)
