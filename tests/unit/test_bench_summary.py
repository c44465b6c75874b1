"""summary.json schema 4: validate_summary accepts what build_summary makes from run records, and refuses each
malformed field with a line naming it; the targets, the oracle's losses, the training-seed spreads and the ablation
verdicts land where docs/benchmarks.md says."""

import copy

import pytest

from policy.bench.common import RESULT_KEYS, Mode, StackRoles
from policy.bench.plan import Cell
from policy.bench.summary import SUMMARY_KEYS, build_summary, validate_summary
from policy.sim.engine import METRIC_KEYS

SCN, APP, TRACE = "baseline-2026-11", "online-boutique", "nasa"
CELL = Cell(SCN, APP, TRACE, 30, 330, SCN, "baseline", APP, TRACE, (APP,), "training")
SEEDS = (0, 1, 2)


def record(policy, seed, objective, cpu=1.0):
    metrics = dict.fromkeys(METRIC_KEYS, 1.0) | {"cpu_core_hours": cpu, "latency_p95_ms": 100.0 * objective}
    return {
        "scenario": SCN,
        "app": APP,
        "trace": TRACE,
        "policy": policy,
        "seed": seed,
        "samples": 1000,
        "nodes": 8,
        "metrics": {**metrics, "objective": objective},
        "node_cpu_util_pct": {"mean": 40.0, "p50": 38.0, "p95": 70.0, "max": 90.0},
        "counters": {"oracle_rollouts": 30.0} if policy.startswith("lookahead") else {},
    }


#: Per stack, its objective per evaluation seed (the cell's objective is constant − s/10 ...).
OBJECTIVE = {
    "default-kube-scheduler+hpa": (2.0, 2.1, 2.2),
    "default-kube-scheduler+hpa@target=0.6": (1.5, 1.6, 1.7),  # the best baseline; beats the oracle
    "hrl-constant": (3.0, 3.0, 3.0),
    "lookahead-oracle@coordinate=0": (2.0, 2.0, 2.0),
    "hrl-scheduler": (2.5, 2.5, 2.5),
    "hrl-scheduler@tseed=1": (2.6, 2.6, 2.6),
    "hrl-scheduler@tseed=2": (2.4, 2.4, 2.4),
    "hrl-no-resize": (4.0, 4.1, 4.2),
    "hrl-no-resize@tseed=1": (4.1, 4.2, 4.3),
    "hrl-no-resize@tseed=2": (4.0, 4.1, 4.2),
    "hrl-flat": (2.5, 2.6, 2.4),  # one training seed only
}
ROLES = StackRoles(
    policies=(
        "default-kube-scheduler+hpa",
        "hrl-scheduler",
        "hrl-no-resize",
        "hrl-flat",
        "hrl-constant",
        "lookahead-oracle@coordinate=0",
    ),
    baselines=("default-kube-scheduler+hpa", "default-kube-scheduler+hpa@target=0.6"),
    contenders=("hrl-scheduler", "hrl-no-resize", "hrl-flat", "hrl-constant", "lookahead-oracle@coordinate=0"),
    oracle="lookahead-oracle@coordinate=0",
    learned=("hrl-scheduler", "hrl-no-resize", "hrl-flat"),
    order=tuple(OBJECTIVE),
)
SKIPPED = [{"stack": "hrl-flat", "training_seed": 1, "reason": "no policy bundle of training seed 1 at /x"}]


@pytest.fixture(scope="module")
def made():
    runs = [record(p, s, v) for p, vs in OBJECTIVE.items() for s, v in zip(SEEDS, vs)]
    mode = Mode("quick", SEEDS, 30, 1000, "quick", "policy/data/bench/plan.yaml", (0, 1, 2), ROLES.oracle)
    floors = [
        {"scenario": SCN, "app": APP, "trace": TRACE, "seed": s, "latency_p50_ms": 40.0, "latency_p95_ms": 90.0 + s,
         "failed_pct": 0.5}
        for s in SEEDS
    ]  # fmt: skip
    return build_summary(list(reversed(runs)), mode, [CELL], ROLES, SKIPPED, floors)


def test_what_build_summary_makes_is_valid_and_has_every_part(made):
    validate_summary(made)
    assert tuple(made) == SUMMARY_KEYS and made["schema"] == 4
    assert made["mode"]["training_seeds"] == [0, 1, 2] and made["mode"]["oracle"] == "lookahead-oracle@coordinate=0"
    res = made["results"][SCN][APP][TRACE]
    assert list(res) == list(OBJECTIVE)  # table order, whatever order the runs came in
    assert set(res["hrl-scheduler"]) == set(RESULT_KEYS) and res["hrl-scheduler"]["objective"]["mean"] == 2.5
    assert "offline-reference" not in str(made) and "reference" not in made["fronts"][SCN][APP][TRACE]["failed_pct"]


def test_the_cell_s_latency_floor_is_the_mean_over_seeds_and_may_be_absent(made):
    floor = made["cells"][SCN][APP][TRACE]["floor"]
    assert floor["latency_p95_ms"]["mean"] == pytest.approx(91.0) and floor["latency_p95_ms"]["ci95"] > 0
    assert floor["failed_pct"] == {"mean": 0.5, "ci95": 0.0} and floor["latency_p50_ms"]["mean"] == 40.0
    runs = [record(p, s, v) for p, vs in OBJECTIVE.items() for s, v in zip(SEEDS, vs)]
    mode = Mode("quick", SEEDS, 30, 1000, "quick", "policy/data/bench/plan.yaml", (0, 1, 2), ROLES.oracle)
    without = build_summary(runs, mode, [CELL], ROLES, SKIPPED)
    validate_summary(without)
    assert without["cells"][SCN][APP][TRACE]["floor"] is None
    del without["cells"][SCN][APP][TRACE]["floor"]  # a summary written before the floor existed
    validate_summary(without)


def test_the_targets_name_the_oracle_the_best_baseline_setting_and_the_best_constant(made):
    t = made["targets"][SCN][APP][TRACE]
    assert t["oracle"]["stack"] == "lookahead-oracle@coordinate=0" and t["oracle"]["objective"]["mean"] == 2.0
    assert t["best_baseline"]["stack"] == "default-kube-scheduler+hpa@target=0.6"
    assert t["best_baseline"]["objective"]["mean"] == pytest.approx(1.6)
    assert t["best_constant"] == {"stack": "hrl-constant", "objective": {"mean": 3.0, "ci95": 0.0}}
    assert t["oracle_gain"] == {"mean": 1.0, "ci95": 0.0}
    # (3 − 2.5) / (3 − 2); (3 − 4.1) / 1; the targets themselves are not shared; tseed variants are not contenders
    assert t["share"] == {
        "hrl-scheduler": pytest.approx(0.5),
        "hrl-no-resize": pytest.approx(-1.1),
        "hrl-flat": pytest.approx(0.5),
    }
    assert t["best_baseline"]["share"] == pytest.approx(1.4)


def test_the_oracle_losing_to_a_baseline_is_listed(made):
    (loss,) = made["oracle_losses"]
    assert (loss["scenario"], loss["app"], loss["trace"]) == (SCN, APP, TRACE)
    assert loss["baseline"] == "default-kube-scheduler+hpa@target=0.6"
    assert loss["difference"]["mean"] == pytest.approx(0.4) and "beats the best constant" in loss["reason"]


def test_the_training_seed_spread_and_the_ablation_verdicts(made):
    sp = made["training_seeds"][SCN][APP][TRACE]
    assert list(sp) == ["hrl-scheduler", "hrl-no-resize", "hrl-flat"]
    assert sp["hrl-scheduler"]["training_seeds"] == [0, 1, 2]
    assert sp["hrl-scheduler"]["objective"]["per_training_seed"] == pytest.approx([2.5, 2.6, 2.4])
    assert sp["hrl-scheduler"]["objective"]["training"]["mean"] == pytest.approx(2.5)
    assert sp["hrl-scheduler"]["objective"]["evaluation"]["ci95"] == 0.0  # every evaluation seed alike
    assert sp["hrl-flat"]["training_seeds"] == [0]
    v = made["ablations"][SCN][APP][TRACE]
    assert v["hrl-no-resize"]["verdict"] == "better"  # 4.13 vs 2.5, apart under both spreads
    assert v["hrl-no-resize"]["difference"] == pytest.approx(4.1333333 - 2.5)
    assert v["hrl-flat"]["verdict"] is None and "hrl-flat ran 1 training seed" in v["hrl-flat"]["why"]
    assert made["skipped_training_seeds"] == SKIPPED


def at(s, *path):
    for k in path[:-1]:
        s = s[k]
    return s, path[-1]


def set_(path, value):
    def mutate(s):
        d, k = at(s, *path)
        d[k] = value

    return mutate


def drop(path):
    def mutate(s):
        d, k = at(s, *path)
        del d[k]

    return mutate


C = (SCN, APP, TRACE)


@pytest.mark.parametrize(
    ("mutate", "where"),
    [
        (set_(("schema",), 3), "summary.schema"),
        (set_(("reference_share",), {}), "summary: keys must be exactly"),
        (drop(("mode", "training_seeds")), "summary.mode"),
        (set_(("mode", "training_seeds"), [1, 2]), "summary.mode.training_seeds"),
        (set_(("mode", "oracle"), None), "summary.mode.oracle"),
        (drop(("results", *C, "hrl-scheduler", "objective")), "summary.results.baseline-2026-11"),
        (set_(("results", *C, "hrl-scheduler", "objective", "mean"), float("nan")), ".objective.mean"),
        (set_(("fronts", *C, "failed_pct", "reference"), []), ".failed_pct: keys must be exactly"),
        (set_(("targets", *C, "oracle", "stack"), ""), ".oracle.stack"),
        (set_(("targets", *C, "oracle", "objective", "ci95"), -1.0), ".oracle.objective.ci95"),
        (drop(("targets", *C, "best_baseline", "share")), ".best_baseline: keys must be exactly"),
        (set_(("targets", *C, "best_constant"), {"stack": "hrl-constant"}), ".best_constant: keys must be exactly"),
        (set_(("targets", *C, "oracle"), None), ".oracle_gain: must be null without both"),
        (set_(("targets", *C, "share", "hrl-scheduler"), "half"), ".share.hrl-scheduler"),
        (set_(("targets", "elsewhere"), {"a": {"t": {}}}), "summary.targets.elsewhere.a.t: a target cell"),
        (set_(("oracle_losses",), {}), "summary.oracle_losses: must be a list"),
        (set_(("oracle_losses", 0, "reason"), ""), "summary.oracle_losses[0].reason"),
        (set_(("oracle_losses", 0, "oracle_objective", "mean"), 1.0), "summary.oracle_losses[0]: the oracle does not"),
        (set_(("oracle_losses", 0, "trace"), "twitter"), "summary.oracle_losses[0]: a cell"),
        (set_(("training_seeds", *C, "hrl-scheduler", "training_seeds"), [0, 0]), ".training_seeds: must be a list"),
        (
            set_(("training_seeds", *C, "hrl-scheduler", "objective", "per_training_seed"), [1.0]),
            ".objective.per_training_seed: must hold one mean per training seed",
        ),
        (drop(("training_seeds", *C, "hrl-scheduler", "objective", "evaluation")), ".objective: keys must be"),
        (set_(("ablations", *C, "hrl-no-resize", "verdict"), "great"), ".hrl-no-resize.verdict"),
        (set_(("ablations", *C, "hrl-flat", "why"), None), ".hrl-flat.why: a missing verdict must say why"),
        (set_(("ablations", *C, "hrl-no-resize", "difference"), None), ".hrl-no-resize.difference"),
        (set_(("skipped_training_seeds", 0, "training_seed"), 0), "summary.skipped_training_seeds[0].training_seed"),
        (set_(("cells", *C, "reference_not_run"), None), "summary.cells.baseline-2026-11.online-boutique.nasa: keys"),
        (drop(("cells", *C, "floor", "failed_pct")), "summary.cells.baseline-2026-11.online-boutique.nasa.floor: keys"),
        (set_(("cells", *C, "floor", "latency_p95_ms", "mean"), float("inf")), ".floor.latency_p95_ms.mean"),
        (
            set_(("cells", *C, "floor", "latency_p50_ms", "mean"), -1.0),
            ".floor.latency_p50_ms.mean: must be in [0, inf]",
        ),
        (set_(("cells", *C, "floor", "failed_pct", "mean"), 101.0), ".floor.failed_pct.mean: must be in [0, 100]"),
    ],
)
def test_a_malformed_field_is_refused_naming_it(made, mutate, where):
    s = copy.deepcopy(made)
    mutate(s)
    with pytest.raises(ValueError) as e:
        validate_summary(s)
    assert where in str(e.value), str(e.value)
