"""The bench in the scenario families: a cell of any scenario runs exactly as the command the report prints, a
held-out app is run and labelled, a scenario of several apps is one cell, the oracle runs in every cell (a scenario
of several apps included) and the MIP reference in none, the learned stacks' guardrail counters reach summary.json
(and a malformed counters entry is refused), and BENCHMARKS.md gets a part per scenario."""

import copy
import json
import shlex

import pytest

from policy.bench.stacks import main, validate_summary
from policy.cli.core import main as hrl_policy
from policy.sim.hrl_stacks import MOVE_COUNTERS


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny bench of two scenario families: a held-out app at the edge and the shared cluster (several apps),
    the highlighted learned stack and the oracle against default scoring, 2 seeds of 2 minutes, no sweep, the
    committed bundles only."""
    out = tmp_path_factory.mktemp("bench")
    args = [
        "--quick",
        "--scenarios",
        "network-edge,shared-cluster",
        "--apps",
        "dsb-media-microservices",
        "--policies",
        "default-kube-scheduler,hrl-scheduler,lookahead-oracle@horizon=2,coordinate=0",
        "--seeds",
        "2",
        "--training-seeds",
        "0",
        "--minutes",
        "2",
        "--no-sweep",
        "--no-ray",
        "--out",
        str(out),
    ]
    assert main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    runs = [r for line in (out / "runs-quick.jsonl").read_text().splitlines() for r in json.loads(line)["runs"]]
    return out, summary, runs


EDGE = ("network-edge", "dsb-media-microservices", "nasa")
SHARED = ("shared-cluster", "online-boutique+sock-shop+dsb-hotel-reservation", "nasa+twitter+bursty")


def at(d, key):
    for k in key:
        d = d[k]
    return d


def test_each_scenario_cell_runs_exactly_as_the_command_the_report_prints(tiny, capsys):
    _out, s, runs = tiny
    validate_summary(s)
    assert list(s["results"]) == ["shared-cluster", "network-edge"]  # the plan's order
    for key in (EDGE, SHARED):
        cmd = at(s["cells"], key)["command"].replace("{stack}", "hrl-scheduler").replace("{seed}", "1")
        argv = shlex.split(cmd)
        assert argv[:2] == ["hrl-policy", "simulate"]
        capsys.readouterr()
        assert hrl_policy(argv[1:]) == 0
        got = json.loads(capsys.readouterr().out)
        (run,) = [
            r
            for r in runs
            if (r["scenario"], r["app"], r["trace"]) == key and r["policy"] == "hrl-scheduler" and r["seed"] == 1
        ]
        assert {k: got[k] for k in run["metrics"]} == run["metrics"]
        assert got["scenario"] == key[0] and got["app"] == key[1] and got["trace"] == key[2]


def test_a_held_out_app_is_run_in_a_scenario_family_and_labelled_so(tiny):
    out, s, _runs = tiny
    cell = at(s["cells"], EDGE)
    assert cell["role"] == "held-out" and cell["nodes"] == 12 and cell["minutes"] == 2
    assert set(at(s["results"], EDGE)) == {
        "default-kube-scheduler",
        "hrl-scheduler",
        "lookahead-oracle@horizon=2,coordinate=0",
    }
    md = (out / "BENCHMARKS-policy.md").read_text()
    assert "#### dsb-media-microservices (held-out app: never seen in training): equal CPU" in md


def test_a_scenario_of_several_apps_is_one_cell_with_each_apps_figures_in_its_runs(tiny):
    _out, s, runs = tiny
    cell = at(s["cells"], SHARED)
    assert cell["apps"] == ["online-boutique", "sock-shop", "dsb-hotel-reservation"]
    assert cell["role"] == "training"  # every app of the shared cluster is a training app
    shared = [r for r in runs if r["scenario"] == "shared-cluster"]
    assert len(shared) == 6  # 3 stacks x 2 seeds
    assert all(set(r["apps"]) == set(cell["apps"]) for r in shared)
    assert all({"latency_p95_ms", "failed_pct", "slo_violation_pct"} <= set(r["apps"]["sock-shop"]) for r in shared)


def test_the_learned_stacks_guardrail_counters_reach_the_summary(tiny):
    _out, s, runs = tiny
    for key in (EDGE, SHARED):
        counters = at(s["counters"], key)
        # default scoring keeps no counters
        assert list(counters) == ["hrl-scheduler", "lookahead-oracle@horizon=2,coordinate=0"]
        names = set(counters["hrl-scheduler"])
        assert {
            "guardrail_saturation_shield",
            "guardrail_stabilization",
            "extender_failed_open",
            "intent_fallbacks",
            *MOVE_COUNTERS,
        } <= names
        assert all(n.split(":")[0] in MOVE_COUNTERS for n in names if ":" in n)  # the moves' reasons
        assert counters["lookahead-oracle@horizon=2,coordinate=0"]["oracle_decisions"]["mean"] == 1.0  # at t = 0
        per_run = [
            r["counters"]["guardrail_stabilization"]
            for r in runs
            if r["policy"] == "hrl-scheduler" and (r["scenario"], r["app"], r["trace"]) == key
        ]
        assert counters["hrl-scheduler"]["guardrail_stabilization"]["mean"] == sum(per_run) / len(per_run)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda c: c["hrl-scheduler"]["guardrail_stabilization"].update(mean=-1.0),
        lambda c: c["hrl-scheduler"]["guardrail_stabilization"].pop("ci95"),
        lambda c: c["hrl-scheduler"]["guardrail_stabilization"].update(ci95=float("nan")),
        lambda c: c["hrl-scheduler"].update({"Bad Name": {"mean": 1.0, "ci95": 0.0}}),
        lambda c: c["hrl-scheduler"].clear(),
        lambda c: c.update({"default-kube-scheduler": [1, 2]}),
    ],
)
def test_a_malformed_counters_entry_is_refused(tiny, mutate):
    _out, s, _runs = tiny
    bad = copy.deepcopy(s)
    mutate(at(bad["counters"], EDGE))
    with pytest.raises(ValueError, match=r"summary\.counters\.network-edge\.dsb-media-microservices\.nasa"):
        validate_summary(bad)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda s: s.pop("counters"),
        lambda s: s.update(schema=2),
        lambda s: at(s["cells"], EDGE).update(role="test"),
        lambda s: at(s["cells"], EDGE).update(command="hrl-policy simulate"),
        lambda s: s["cells"]["network-edge"].pop("dsb-media-microservices"),
        lambda s: s["scenarios"].pop("network-edge"),
        lambda s: at(s["results"], EDGE)["hrl-scheduler"]["failed_pct"].update(ci95=-1.0),
    ],
)
def test_a_malformed_summary_is_refused(tiny, mutate):
    _out, s, _runs = tiny
    bad = copy.deepcopy(s)
    mutate(bad)
    with pytest.raises(ValueError):
        validate_summary(bad)


def test_benchmarks_md_has_a_part_per_scenario_with_its_plots(tiny):
    out, _s, _runs = tiny
    md = (out / "BENCHMARKS-policy.md").read_text()
    assert md.index("### Scenario `shared-cluster`") < md.index("### Scenario `network-edge`")
    edge = md[md.index("### Scenario `network-edge`") :]
    assert "**Guardrails** (per run):" in edge and "guardrail_saturation_shield" in edge
    assert "hrl-policy simulate --scenario network-edge --app dsb-media-microservices --trace nasa" in edge
    shared = md[md.index("### Scenario `shared-cluster`") : md.index("### Scenario `network-edge`")]
    assert "**Each app's own figures**" in shared and "**Targets on the objective**" in shared
    for scn, app in (("network-edge", "dsb-media-microservices"), ("shared-cluster", SHARED[1])):
        for png in (f"pareto_{app}.png", "objective.png", "latency_p95.png", "failed_pct.png", "cpu_core_hours.png"):
            assert (out / scn / png).stat().st_size > 10_000, (scn, png)
            assert f"{scn}/{png}" in md


def test_the_oracle_runs_in_every_cell_the_scenario_of_several_apps_included(tiny):
    _out, s, _runs = tiny
    for key in (EDGE, SHARED):
        t = at(s["targets"], key)
        assert t["oracle"]["stack"] == "lookahead-oracle@horizon=2,coordinate=0"
        assert t["best_constant"] is None  # hrl-constant was not asked for: no gain, no shares
        assert t["oracle_gain"] is None and t["share"] == {}
        assert t["best_baseline"]["stack"] == "default-kube-scheduler"  # --no-sweep: the one baseline run
        assert set(at(s["results"], key)["hrl-scheduler"]) >= {"objective", "failed_pct"}


def test_the_mip_reference_runs_in_no_sweep_and_no_plan_cell(tmp_path):
    args = [
        "--quick",
        "--scenarios",
        "baseline-2026-11",
        "--apps",
        "online-boutique",
        "--policies",
        "default-kube-scheduler+hpa",
        "--seeds",
        "1",
        "--minutes",
        "1",
        "--no-ray",
        "--out",
        str(tmp_path),
    ]
    assert main(args) == 0
    s = json.loads((tmp_path / "summary.json").read_text())
    results = s["results"]["baseline-2026-11"]["online-boutique"]["nasa"]
    assert not any(p.startswith("offline-reference") for p in results)
    assert "default-kube-scheduler+hpa@target=0.4" in results  # the sweep still runs
    assert set(s["fronts"]["baseline-2026-11"]["online-boutique"]["nasa"]["latency_p95_ms"]) == {"baselines", "hpa"}
    assert "reference_share" not in s and "reference_mip" not in s
