"""Scenario files: the format and its one-line errors, the baseline reproducing ``hrl-policy simulate`` bit for
bit, several apps on one cluster, flash crowds and rate drift, and every built-in scenario building and
running."""

import json
from pathlib import Path

import numpy as np
import pytest

from policy.cli.core import main
from policy.config import ConfigError
from policy.sim.run import simulate
from policy.sim.scenario import (
    BASELINE,
    FLAT_KEYS,
    build,
    builtin_scenarios,
    load_scenario,
    run_scenario,
    scenario_window_offset,
)
from policy.sim.traces import FlashCrowd, RateDrift, apply_flash_crowds, load_trace

FIXTURE = (
    Path(__file__).resolve().parents[1]
    / "fixtures"
    / "sim"
    / "simulate-online-boutique-nasa-default-kube-scheduler.json"
)


def doc(**over):
    d = {
        "apiVersion": "hrl-scheduler.io/v1alpha1",
        "kind": "Scenario",
        "name": "t",
        "apps": [{"app": "online-boutique"}],
        "cluster": {"appBench": True},
    }
    d.update(over)
    return d


def test_the_baseline_scenario_reproduces_todays_simulate_output_bit_for_bit(capsys):
    # recorded from `hrl-policy simulate --app online-boutique --trace nasa --policy default-kube-scheduler
    # --json -` before scenarios existed
    want = json.loads(FIXTURE.read_text())
    rc = main(["simulate", "--scenario", BASELINE, "--policy", "default-kube-scheduler", "--json", "-"])
    assert rc == 0
    got = json.loads(capsys.readouterr().out)
    assert {k: got[k] for k in want} == want
    rc = main(
        ["simulate", "--app", "online-boutique", "--trace", "nasa", "--policy", "default-kube-scheduler", "--json", "-"]
    )
    assert rc == 0
    assert {k: v for k, v in json.loads(capsys.readouterr().out).items() if k in want} == want


@pytest.mark.parametrize(
    ("app", "trace", "policy", "minutes", "offset"),
    [
        ("sock-shop", "twitter", "default-kube-scheduler+hpa", 6, 100),
        ("dsb-hotel-reservation", "bursty", "trimaran-tlp", 4, 7),
    ],
)
def test_the_baseline_scenario_with_app_and_trace_equals_simulate(app, trace, policy, minutes, offset):
    a, ra = simulate(app, trace, policy, minutes=minutes, seed=2, offset_min=offset, n_samples=500)
    b, rb = run_scenario(
        BASELINE, policy, app=app, trace=trace, minutes=minutes, seed=2, offset_min=offset, n_samples=500
    )
    assert a == b
    assert np.array_equal(ra.latency_samples_ms, rb.latency_samples_ms)
    assert a["samples"] == 500 and a["offset_min"] == offset and set(a) == set(FLAT_KEYS)


@pytest.mark.parametrize("name", builtin_scenarios())
def test_every_builtin_scenario_builds_and_runs(name):
    flat, res = run_scenario(name, "default-kube-scheduler", minutes=3, n_samples=300, seed=1)
    assert flat["scenario"] == name and flat["minutes"] == 3
    assert res.extra["offered_requests"] == pytest.approx(res.extra["served_requests"] + res.extra["failed_requests"])
    assert 0.0 <= flat["node_cpu_util_p10_pct"] <= flat["node_cpu_util_p50_pct"] <= flat["node_cpu_util_p90_pct"]


def test_the_builtin_scenarios_cover_every_family():
    fams = {load_scenario(n).family for n in builtin_scenarios()}
    assert fams == {"baseline", "shared-cluster", "network", "interference", "heterogeneous", "events", "load"}


@pytest.mark.parametrize(
    ("over", "needle"),
    [
        ({"kind": "App"}, "kind: must be Scenario (got 'App')"),
        ({"apps": []}, "apps: must have at least 1 item(s) (got [])"),
        ({"colour": "red"}, "colour: unknown field"),
        ({"family": "weird"}, "family: must be one of 'baseline'"),
        ({"minutes": 0}, "minutes: must be >= 1 (got 0)"),
        (
            {"apps": [{"app": "online-boutique", "load": {"peakUtilization": 1.0, "peakRps": 5}}]},
            "peakRps (5.0): give one",
        ),
        ({"apps": [{"app": "online-boutique", "load": {"peakUtilization": -1}}]}, "apps[0].load.peakUtilization"),
        (
            {
                "apps": [
                    {"app": "online-boutique", "load": {"flashCrowds": [{"atMin": 1, "durationMin": 0, "factor": 2}]}}
                ]
            },
            "apps[0].load.flashCrowds[0].durationMin: must be >= 1 (got 0)",
        ),
        (
            {"apps": [{"app": "online-boutique"}, {"app": "sock-shop"}]},
            "cluster.appBench: needs exactly one app, got 2",
        ),
        (
            {"cluster": {"nodePools": [{"name": "p", "count": -2, "cpuM": 1000, "memoryGiB": 4}]}},
            "cluster.nodePools[0].count: must be >= 0 (got -2)",
        ),
        (
            {"cluster": {"appBench": True, "nodePools": [{"name": "p", "count": 1, "cpuM": 1, "memoryGiB": 1}]}},
            "exactly one",
        ),
        (
            {"network": {"classes": {}, "latency": {}}},
            "network: classes and latency: the classic model or the topology",
        ),
        ({"network": {"latency": {"zoneRttRangeMs": [50, 5]}}}, "zoneRttRangeMs: must be [low, high]"),
        (
            {"network": {"bandwidth": {"nicGbps": 0}}},
            "network.bandwidth.nicGbps: must be > 0.0 (got 0)",
        ),
        (
            {"interference": {"cpu": {"knee": 1.5}}},
            "interference.cpu.knee: must be <= 1.0 (got 1.5)",
        ),
        (
            {"events": [{"type": "explode", "node": "node-000", "atMin": 1}]},
            "events[0].type: must be one of 'nodeFailure' or 'drain' (got 'explode')",
        ),
        (
            {"events": [{"type": "drain", "node": "node-000", "atMin": 1, "recoverAfterMin": 3}]},
            "recoverAfterMin: only for",
        ),
        ({"drift": {"sigma": 5, "tauMin": 10}}, "drift.sigma: must be <= 2.0 (got 5)"),
    ],
)
def test_a_bad_scenario_gets_one_line_per_problem_naming_the_field_and_value(over, needle):
    with pytest.raises(ConfigError) as ei:
        load_scenario(doc(**over))
    msg = str(ei.value)
    assert needle in msg
    assert all(line.startswith("<config>: ") for line in msg.splitlines())


def test_a_bad_file_names_the_file_and_the_line(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("apiVersion: hrl-scheduler.io/v1alpha1\nkind: Scenario\nname: [unclosed\n")
    with pytest.raises(ConfigError) as ei:
        load_scenario(str(p))
    assert str(ei.value).startswith(f"{p}: line ") and "invalid YAML" in str(ei.value)
    assert "\n" not in str(ei.value)


def test_an_event_on_a_node_the_cluster_does_not_have_is_an_error_naming_the_event():
    with pytest.raises(ConfigError) as ei:
        build(load_scenario(doc(events=[{"type": "nodeFailure", "node": "node-099", "atMin": 1}])))
    assert "events[0].node: no node named 'node-099'" in str(ei.value)


def test_unknown_scenario_and_app_override_of_a_several_app_scenario_are_one_line_errors(capsys):
    with pytest.raises(ValueError, match="unknown scenario 'nope'"):
        load_scenario("nope")
    assert (
        main(["simulate", "--scenario", "shared-cluster", "--app", "sock-shop", "--policy", "default-kube-scheduler"])
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--app: scenario 'shared-cluster' has 3 apps" in err
    assert main(["simulate", "--scenario", "heterogeneous", "--nodes", "4", "--policy", "default-kube-scheduler"]) == 2
    assert "node pools; --nodes does not apply" in capsys.readouterr().err


def test_several_apps_share_the_cluster_each_in_its_namespace_with_its_own_load_and_figures():
    d = doc(
        apps=[
            {"app": "online-boutique", "load": {"trace": "nasa", "peakRps": 30.0}},
            {"app": "sock-shop", "namespace": "shop", "load": {"trace": "twitter", "peakRps": 60.0}},
        ],
        cluster={"nodePools": [{"name": "p", "count": 6, "cpuM": 4000, "memoryGiB": 16, "zones": ["a", "b"]}]},
    )
    run = build(load_scenario(d), minutes=4)
    app = run.app
    assert [p.name for p in app.parts] == ["online-boutique", "sock-shop"]
    assert [p.namespace for p in app.parts] == ["online-boutique", "shop"]
    assert "frontend.online-boutique" in app.graph.services and "front-end.shop" in app.graph.services
    assert {w.namespace for w in app.workloads} == {"online-boutique", "shop"}
    assert run.rps.shape == (4, 2)
    for k, (trace, peak) in enumerate((("nasa", 30.0), ("twitter", 60.0))):
        whole = load_trace(trace)
        assert run.rps[:, k] == pytest.approx(whole[:4] * peak / whole.max())
    flat, res = run_scenario(load_scenario(d), "default-kube-scheduler+hpa", minutes=4, n_samples=600)
    apps = flat["apps"]
    assert sum(a["offered_requests"] for a in apps.values()) == pytest.approx(res.extra["offered_requests"])
    assert flat["app"] == "online-boutique+sock-shop" and flat["trace"] == "nasa+twitter"
    failed = sum(a["failed_pct"] / 100 * a["offered_requests"] for a in apps.values())
    assert failed == pytest.approx(res.extra["failed_requests"])


def test_the_window_offset_centres_the_run_on_the_first_apps_peak():
    from policy.sim.sizing import window_offset

    assert scenario_window_offset("shared-cluster", 30) == window_offset("nasa", 30)


def test_a_flash_crowd_ramps_up_holds_and_falls_back():
    m = FlashCrowd(at_min=2, duration_min=3, factor=4.0, ramp_min=1).multiplier(np.arange(7.0))
    assert m.tolist() == [1.0, 1.0, 4.0, 4.0, 4.0, 1.0, 1.0]
    m = FlashCrowd(at_min=1, duration_min=4, factor=3.0, ramp_min=2).multiplier(np.arange(7.0))
    assert m.tolist() == [1.0, 2.0, 3.0, 3.0, 2.0, 1.0, 1.0]
    assert apply_flash_crowds(np.ones(3), [FlashCrowd(0, 1, 2.0)]).tolist() == [2.0, 1.0, 1.0]


def test_rate_drift_is_deterministic_has_mean_one_and_is_applied_to_the_calls():
    d = RateDrift(sigma=0.3, tau_min=20.0, seed=4)
    a, b = d.multipliers(2000, 50), d.multipliers(2000, 50)
    assert np.array_equal(a, b) and a.shape == (2000, 50)
    assert a.mean() == pytest.approx(1.0, abs=0.03)
    assert np.corrcoef(a[:-1].ravel(), a[1:].ravel())[0, 1] == pytest.approx(np.exp(-1 / 20), abs=0.02)
    run = build("load", minutes=3)
    assert run.config.edge_drift is not None
