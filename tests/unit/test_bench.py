"""The policy benchmark's statistics, the exact summary.json shape, and a tiny end-to-end run."""

import dataclasses
import json
import math
import re

import pytest

from policy.bench.common import RESULT_KEYS
from policy.bench.stacks import main, mean_ci95, split_stacks, summarize, t975, validate_summary
from policy.sim.engine import METRIC_KEYS
from policy.sim.sizing import window_offset


def test_the_95_percent_interval_uses_student_t_over_seeds():
    r = mean_ci95([1.0, 2.0, 3.0])
    # sd = 1, t(0.975, 2) = 4.303 -> 4.303 / sqrt(3)
    assert r["mean"] == 2.0
    assert r["ci95"] == pytest.approx(4.303 / math.sqrt(3))
    assert t975(4) == 2.776 and t975(100) == pytest.approx(1.984, abs=0.002)


def test_a_metric_that_cannot_vary_has_a_zero_interval_and_non_finite_values_are_refused():
    assert mean_ci95([0.0, 0.0, 0.0, 0.0, 0.0]) == {"mean": 0.0, "ci95": 0.0}
    assert mean_ci95([5.0]) == {"mean": 5.0, "ci95": 0.0}
    with pytest.raises(ValueError):
        mean_ci95([1.0, float("inf")])


def run(app, trace, policy, seed, **m):
    return {
        "scenario": "baseline-2026-11",
        "app": app,
        "trace": trace,
        "policy": policy,
        "seed": seed,
        "metrics": {k: m.get(k, 1.0 + seed) for k in RESULT_KEYS},
    }


def test_each_cell_is_averaged_in_seed_order_whatever_order_the_runs_finished_in():
    # 0.1 + 0.2 + 0.3 and 0.3 + 0.2 + 0.1 differ in the last bit: the order of aggregation shows
    runs = [run("a", "nasa", "p", s, latency_mean_ms=v) for s, v in enumerate([0.1, 0.2, 0.3])]
    ordered = summarize(runs)
    assert summarize(list(reversed(runs))) == ordered
    assert summarize([runs[1], runs[2], runs[0]]) == ordered
    assert ordered["baseline-2026-11"]["a"]["nasa"]["p"]["latency_mean_ms"]["mean"] == ((0.1 + 0.2) + 0.3) / 3


def legacy_summary():
    # the first schema: {"seeds", "results": {app: {trace: {stack: {metric: {mean, ci95}}}}}}, the eight metrics
    res = summarize([run("a", "nasa", "p", 0), run("a", "nasa", "p", 1)])["baseline-2026-11"]
    res["a"]["nasa"]["p"].pop("objective")
    return {"seeds": 2, "results": res}


def test_a_summary_of_the_first_schema_is_still_accepted():
    s = legacy_summary()
    cell = s["results"]["a"]["nasa"]["p"]
    assert set(cell) == set(METRIC_KEYS)
    assert all(set(v) == {"mean", "ci95"} for v in cell.values())
    validate_summary(s)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda s: s.update(extra=1),
        lambda s: s["results"]["a"]["nasa"]["p"]["failed_pct"].update(ci95=None),
        lambda s: s["results"]["a"]["nasa"]["p"]["failed_pct"].update(mean=float("nan")),
        lambda s: s["results"]["a"]["nasa"]["p"].pop("evictions"),
        lambda s: s.update(seeds=0),
    ],
)
def test_a_malformed_legacy_summary_is_rejected(mutate):
    s = legacy_summary()
    mutate(s)
    with pytest.raises(ValueError):
        validate_summary(s)


def test_short_runs_are_centred_on_the_windows_peak():
    from policy.sim.traces import load_trace

    whole = load_trace("twitter")
    off = window_offset("twitter", 30)
    assert 0 <= off <= len(whole) - 30
    assert whole[off : off + 30].max() == whole.max()
    assert window_offset("twitter", None) == 0


def test_a_tiny_benchmark_writes_the_summary_plots_and_its_own_markdown(tmp_path):
    rc = main(
        [
            "--quick",
            "--scenarios",
            "baseline-2026-11",
            "--apps",
            "online-boutique",
            "--traces",
            "bursty",
            "--policies",
            "default-kube-scheduler,networkaware",
            "--seeds",
            "2",
            "--minutes",
            "3",
            "--no-ray",
            "--out",
            str(tmp_path),
        ]
    )
    assert rc == 0
    s = json.loads((tmp_path / "summary.json").read_text())
    validate_summary(s)
    assert s["seeds"] == 2 and list(s["scenarios"]) == ["baseline-2026-11"]
    assert list(s["results"]["baseline-2026-11"]) == ["online-boutique"]
    b = "baseline-2026-11"
    cell = s["results"][b]["online-boutique"]["bursty"]
    # the stacks asked for and every baseline's sweep; the MIP reference (a plan under a model) is not run
    assert {"default-kube-scheduler", "networkaware", "default-kube-scheduler+hpa@target=0.4"} <= set(cell)
    assert "networkaware@hpa=0.8" in cell and not any(p.startswith("offline-reference") for p in cell)
    assert all(set(v) == set(RESULT_KEYS) for v in cell.values())  # the objective next to the eight metrics
    runs = s["node_cpu_util_pct"][b]["online-boutique"]["bursty"]["networkaware"]
    assert [r["seed"] for r in runs] == [0, 1] and all(0 < r["mean"] <= r["max"] <= 100 for r in runs)
    fronts = s["fronts"][b]["online-boutique"]["bursty"]["latency_p95_ms"]
    assert fronts["baselines"] and fronts["hpa"] and set(fronts) == {"baselines", "hpa"}
    cpus = [p["cpu_core_hours"] for p in fronts["baselines"]]
    assert cpus == sorted(cpus)
    # the best baseline is the setting of least mean objective; no oracle or constant was asked for
    t = s["targets"][b]["online-boutique"]["bursty"]
    best = min(cell, key=lambda k: cell[k]["objective"]["mean"])  # every stack of this cell is a baseline
    assert t["best_baseline"]["stack"] == best and t["oracle"] is None and t["best_constant"] is None
    # every run is a task of its own, and its record carries the objective
    batches = [json.loads(line) for line in (tmp_path / "runs-quick.jsonl").read_text().splitlines()]
    assert {len(t["runs"]) for t in batches} == {1}
    assert all("objective" in t["runs"][0]["metrics"] for t in batches)
    info = s["cells"][b]["online-boutique"]["bursty"]
    assert info["minutes"] == 3 and info["role"] == "training" and "reference_not_run" not in info
    assert "--policy '{stack}'" in info["command"]
    for png in (
        "latency_cdf_bursty.png",
        "failed_pct.png",
        "cpu_core_hours.png",
        "latency_p95.png",
        "pareto_online-boutique.png",
    ):
        assert (tmp_path / "baseline-2026-11" / png).stat().st_size > 10_000
    md = (tmp_path / "BENCHMARKS-policy.md").read_text()
    assert "networkaware" in md and " ± " in md and "offline-reference@price" not in md
    assert "objective.png" in md and (tmp_path / "baseline-2026-11" / "objective.png").stat().st_size > 10_000


def test_a_learned_stack_is_compared_at_equal_cpu_with_the_command_that_reproduces_it(tmp_path):
    from policy.sim.stackbase import _BUILTIN
    from policy.sim.stacks import StackInfo, default_kube_scheduler_hpa

    # a stand-in contender: HPA at 70 % under another name, so it sits on the HPA front it is compared with
    _BUILTIN["zz-contender"] = StackInfo(
        "zz-contender",
        lambda ctx: default_kube_scheduler_hpa(dataclasses.replace(ctx, params={"target": 0.7})),
        "stand-in",
    )
    try:
        args = [
            "--quick",
            "--scenarios",
            "baseline-2026-11",
            "--apps",
            "online-boutique",
            "--traces",
            "nasa",
            "--policies",
            "default-kube-scheduler,zz-contender",
            "--seeds",
            "2",
            "--minutes",
            "4",
            "--no-ray",
            "--out",
            str(tmp_path),
        ]
        assert main(args) == 0
    finally:
        del _BUILTIN["zz-contender"]
    s = json.loads((tmp_path / "summary.json").read_text())
    e = s["equal_cpu"]["baseline-2026-11"]["online-boutique"]["nasa"]["zz-contender"]["latency_p95_ms"]
    same = s["results"]["baseline-2026-11"]["online-boutique"]["nasa"]["default-kube-scheduler+hpa@target=0.7"]
    mine = s["results"]["baseline-2026-11"]["online-boutique"]["nasa"]["zz-contender"]
    assert mine == same  # the same stack under another name gives the same bits
    # on (or above) the front at its own CPU: never better than the front there
    assert e["delta"]["mean"] >= -1e-9
    md = (tmp_path / "BENCHMARKS-policy.md").read_text()
    assert (
        "hrl-policy simulate --scenario baseline-2026-11 --app online-boutique --trace nasa --policy 'zz-contender' "
        "--minutes 4 --offset "
    ) in md


def test_an_interrupted_benchmark_resumes_from_its_journal(tmp_path, capsys):
    args = [
        "--quick",
        "--scenarios",
        "baseline-2026-11",
        "--apps",
        "online-boutique",
        "--traces",
        "nasa",
        "--policies",
        "default-kube-scheduler",
        "--seeds",
        "2",
        "--minutes",
        "2",
        "--no-ray",
        "--no-sweep",
        "--out",
        str(tmp_path),
    ]
    assert main(args) == 0
    journal = tmp_path / "runs-quick.jsonl"
    lines = journal.read_text().splitlines()
    assert len(lines) == 2
    journal.write_text(lines[0] + "\n" + lines[1][:20])  # the second run was cut short
    first = json.loads((tmp_path / "summary.json").read_text())
    capsys.readouterr()
    assert main(args + ["--resume"]) == 0
    assert "resuming, 1 of 2 runs" in capsys.readouterr().err
    assert json.loads((tmp_path / "summary.json").read_text()) == first  # same seeds, same results
    assert "**1 of the 2 simulations were reused** from the journal" in (tmp_path / "BENCHMARKS-policy.md").read_text()
    assert len((tmp_path / "floors-quick.jsonl").read_text().splitlines()) == 2  # the cell's floor, per seed
    assert first["cells"]["baseline-2026-11"]["online-boutique"]["nasa"]["floor"]["latency_p95_ms"]["mean"] > 0


def test_a_registered_stack_that_cannot_be_built_is_skipped_unless_asked_for(tmp_path, monkeypatch, capsys):
    from policy.sim import stackbase, stacks

    def broken(ctx):
        raise ValueError("no policy bundle at /nowhere")

    monkeypatch.setitem(stackbase._BUILTIN, "zz-broken", stacks.StackInfo("zz-broken", broken, "broken"))
    monkeypatch.setattr(stacks, "_entry_points", lambda: [])
    base = [
        "--quick",
        "--scenarios",
        "baseline-2026-11",
        "--apps",
        "online-boutique",
        "--traces",
        "nasa",
        "--seeds",
        "1",
        "--training-seeds",
        "0",
        "--minutes",
        "1",
        "--no-ray",
        "--no-sweep",
        "--out",
        str(tmp_path),
    ]
    assert main(base) == 0
    assert "skipping stack zz-broken: no policy bundle at /nowhere" in capsys.readouterr().err
    s = json.loads((tmp_path / "summary.json").read_text())
    assert "zz-broken" not in s["results"]["baseline-2026-11"]["online-boutique"]["nasa"]
    with pytest.raises(SystemExit, match="zz-broken: no policy bundle"):
        main(base + ["--policies", "default-kube-scheduler,zz-broken"])


def test_stack_names_with_several_knobs_survive_the_comma_separated_list():
    assert split_stacks("a,networkaware@hpa=0.6,weight=20,b") == ["a", "networkaware@hpa=0.6,weight=20", "b"]
    assert split_stacks("lookahead-oracle@horizon=5,coordinate=0") == ["lookahead-oracle@horizon=5,coordinate=0"]
    assert split_stacks(" a , ,b ") == ["a", "b"] and split_stacks(None) is None


def seed_bundles(tmp_path, monkeypatch, seeds):
    """Training seeds ``seeds`` of hrl-scheduler and hrl-no-resize's bundles under ``tmp_path`` (copies of the
    committed ones: they run bit for bit as training seed 0), read through policy.bundle.SEED_BUNDLES."""
    import shutil

    from policy import bundle

    for t in seeds:
        for d in ("hrl-scheduler", "encoder"):
            shutil.copytree(bundle.DEFAULT_BUNDLES / d, tmp_path / "seeds" / str(t) / d)
    monkeypatch.setattr(bundle, "SEED_BUNDLES", tmp_path / "seeds")


def plan_with(tmp_path, skip):
    from policy.bench.plan import DEFAULT_PLAN

    text = re.sub(r"skipMissingTrainingSeeds: \w+", f"skipMissingTrainingSeeds: {skip}", DEFAULT_PLAN.read_text())
    f = tmp_path / f"plan-{skip}.yaml"
    f.write_text(text)
    return f


TINY = [
    "--quick",
    "--scenarios",
    "heterogeneous",
    "--apps",
    "dsb-hotel-reservation",
    "--policies",
    "default-kube-scheduler+hpa,hrl-scheduler,hrl-no-resize",
    "--seeds",
    "2",
    "--minutes",
    "2",
    "--no-sweep",
    "--no-ray",
]


def test_the_learned_stacks_run_at_every_training_seed_and_the_summary_reports_their_spread(tmp_path, monkeypatch):
    seed_bundles(tmp_path, monkeypatch, (1, 2))
    out = tmp_path / "out"
    assert main([*TINY, "--plan", str(plan_with(tmp_path, "false")), "--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    validate_summary(s)
    key = ("heterogeneous", "dsb-hotel-reservation", "nasa")
    res = s["results"][key[0]][key[1]][key[2]]
    assert {"hrl-scheduler@tseed=1", "hrl-scheduler@tseed=2", "hrl-no-resize@tseed=2"} <= set(res)
    assert "default-kube-scheduler+hpa@tseed=1" not in res  # a baseline has no training seeds
    assert res["hrl-scheduler@tseed=1"] == res["hrl-scheduler"]  # the same bundles give the same bits
    sp = s["training_seeds"][key[0]][key[1]][key[2]]
    assert sp["hrl-scheduler"]["training_seeds"] == [0, 1, 2]
    assert sp["hrl-scheduler"]["objective"]["training"]["ci95"] == 0.0  # identical copies: no training spread
    assert s["ablations"][key[0]][key[1]][key[2]]["hrl-no-resize"]["verdict"] in ("better", "worse", "within")
    # the equal-CPU table holds the committed bundles only
    assert set(s["equal_cpu"][key[0]][key[1]][key[2]]) == {"hrl-scheduler", "hrl-no-resize"}
    md = (out / "BENCHMARKS-policy.md").read_text()
    assert "**Training seeds** (objective per minute):" in md and "0, 1, 2" in md


def test_a_missing_training_seed_fails_the_bench_unless_the_plan_skips_it_and_the_report_says_so(
    tmp_path, monkeypatch, capsys
):
    seed_bundles(tmp_path, monkeypatch, (1,))  # training seed 2 is absent
    missing = str(tmp_path / "seeds" / "2" / "hrl-scheduler" / "low")
    with pytest.raises(SystemExit, match="no bundles of training seed 2 for hrl-scheduler, hrl-no-resize") as e:
        main([*TINY, "--plan", str(plan_with(tmp_path, "false")), "--out", str(tmp_path / "a")])
    assert f"no policy bundle of training seed 2 at {missing}" in str(e.value)
    assert "skipMissingTrainingSeeds: true in" in str(e.value) and "\n" not in str(e.value)
    out = tmp_path / "b"
    assert main([*TINY, "--plan", str(plan_with(tmp_path, "true")), "--out", str(out)]) == 0
    assert "skipping training seed 2 of hrl-scheduler" in capsys.readouterr().err
    s = json.loads((out / "summary.json").read_text())
    skipped = {(x["stack"], x["training_seed"]) for x in s["skipped_training_seeds"]}
    assert skipped == {("hrl-scheduler", 2), ("hrl-no-resize", 2)}
    assert all(missing in x["reason"] for x in s["skipped_training_seeds"] if x["stack"] == "hrl-scheduler")
    sp = s["training_seeds"]["heterogeneous"]["dsb-hotel-reservation"]["nasa"]
    assert sp["hrl-scheduler"]["training_seeds"] == [0, 1]
    md = (out / "BENCHMARKS-policy.md").read_text()
    assert "**Training seed 2 of `hrl-scheduler` not run** (the plan's skipMissingTrainingSeeds)" in md


def test_bundles_benches_the_learned_stacks_on_another_root_and_the_cells_commands_say_so(tmp_path):
    import shutil

    from policy.bundle import DEFAULT_BUNDLES

    mine = tmp_path / "bundles"
    shutil.copytree(DEFAULT_BUNDLES, mine, ignore=shutil.ignore_patterns("seeds"))
    constant = mine / "hrl-scheduler" / "high" / "constant.json"
    constant.write_text(json.dumps({**json.loads(constant.read_text()), "capacity_target": 0.9}))

    def bench(out, *extra):
        args = ["--quick", "--scenarios", "baseline-2026-11", "--apps", "online-boutique", "--traces", "nasa",
                "--seeds", "1", "--minutes", "2", "--training-seeds", "0", "--no-sweep", "--no-ray", "--out", str(out),
                *extra]  # fmt: skip
        assert main(args) == 0
        s = json.loads((out / "summary.json").read_text())
        validate_summary(s)
        return s, s["results"]["baseline-2026-11"]["online-boutique"]["nasa"]

    s, own = bench(tmp_path / "own", "--policies", "hrl-constant", "--bundles", str(mine))
    _, knob = bench(tmp_path / "knob", "--policies", "hrl-constant@capacity=0.9")
    assert own["hrl-constant"] == knob["hrl-constant@capacity=0.9"]  # the root's tuned constant, not the committed
    command = s["cells"]["baseline-2026-11"]["online-boutique"]["nasa"]["command"]
    assert f"--bundles {mine}" in command  # the command that reproduces a cell runs on the same bundles
    (task,) = [json.loads(line)["task"] for line in (tmp_path / "own" / "runs-quick.jsonl").read_text().splitlines()]
    assert str(mine) in task
    with pytest.raises(SystemExit, match=r"^policy.bench: --bundles: no such directory \(got '[^']*nope'\)"):
        main(["--quick", "--bundles", str(tmp_path / "nope"), "--no-ray"])
