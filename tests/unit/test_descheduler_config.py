"""DeschedulerConfiguration: documented defaults, camelCase files, every problem reported with its path."""

from __future__ import annotations

import pytest

from descheduler.config import DeschedulerConfiguration, load_descheduler_config, planner_from_config
from policy.config import ConfigError

HEAD = "apiVersion: hrl-scheduler.io/v1alpha1\nkind: DeschedulerConfiguration\n"


def test_no_file_gives_the_documented_defaults():
    cfg = load_descheduler_config(None)
    assert cfg == DeschedulerConfiguration()
    assert (cfg.dry_run, cfg.interval_seconds, cfg.cooldown_seconds, cfg.state_file) == (False, 300.0, 1800.0, None)
    assert (cfg.caps.per_node, cfg.caps.per_namespace, cfg.caps.total) == (2, 5, 10)
    assert cfg.excluded_namespaces == ("kube-system",) and cfg.evict_local_storage_pods is False
    assert cfg.planner.name == "rebalance-heuristic" and cfg.planner.overload_threshold == 0.85
    assert cfg.topology.sources == () and cfg.metrics.textfile is None


@pytest.mark.parametrize("text", ["", "# only a comment\n", "---\n"])
def test_an_empty_file_is_an_error_naming_the_expected_header(tmp_path, text):
    # issue 14: an empty file used to start with every default, silently
    f = tmp_path / "empty.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as ei:
        load_descheduler_config(f)
    assert str(ei.value) == (
        f"{f}: empty file: expected apiVersion: hrl-scheduler.io/v1alpha1, kind: DeschedulerConfiguration "
        "and its fields"
    )


def test_a_camel_case_file_sets_every_section(tmp_path):
    f = tmp_path / "d.yaml"
    f.write_text(
        HEAD
        + """
dryRun: true
intervalSeconds: 60
caps: {perNode: 1, perNamespace: null, total: 3}
excludedNamespaces: [kube-system, monitoring]
evictLocalStoragePods: true
cooldownSeconds: 900
stateFile: /var/lib/hrl/history.json
planner: {name: rebalance-heuristic, overloadThreshold: 0.9, localityMargin: 2, minPairRps: 5,
          maxMovesPerService: 2, intent: [2.0, 0.5]}
topology: {sources: [manifests/, spans.csv]}
metrics: {textfile: /tmp/hrl.prom, listen: "127.0.0.1:9102"}
"""
    )
    cfg = load_descheduler_config(f)
    assert cfg.dry_run and cfg.interval_seconds == 60 and cfg.caps.per_namespace is None
    assert cfg.excluded_namespaces == ("kube-system", "monitoring")
    assert cfg.topology.sources == ("manifests/", "spans.csv")
    planner = planner_from_config(cfg)
    assert (planner.overload_threshold, planner.locality_margin, planner.min_pair_rps) == (0.9, 2.0, 5.0)
    assert planner.intent == (2.0, 0.5) and planner.max_moves_per_service == 2
    assert planner.excluded_namespaces == ("kube-system", "monitoring") and planner.evict_local_storage_pods


def test_every_problem_is_reported_with_its_dotted_path(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text(
        HEAD
        + """
caps: {perNode: -1}
planner: {name: magic, overloadThreshold: 1.5}
cooldownSecs: 10
metrics: {listen: "nowhere"}
"""
    )
    with pytest.raises(ConfigError) as exc:
        load_descheduler_config(f)
    paths = {p for p, _ in exc.value.problems}
    assert {"caps.perNode", "planner.name", "planner.overloadThreshold", "cooldownSecs", "metrics.listen"} <= paths
    assert str(f) in str(exc.value)


def test_the_wrong_kind_is_refused():
    with pytest.raises(ConfigError, match="kind"):
        load_descheduler_config({"apiVersion": "hrl-scheduler.io/v1alpha1", "kind": "ExtenderConfiguration"})


def _intent_config(bundle, **autoscaler) -> dict:
    return {
        "apiVersion": "hrl-scheduler.io/v1alpha1",
        "kind": "DeschedulerConfiguration",
        "planner": {
            "name": "hierarchical",
            "intentPolicy": {"name": "learned", "bundle": str(bundle)},
            "autoscaler": {"name": "intent", **autoscaler},
        },
    }


def test_the_intent_autoscaler_serves_the_tuned_burst_share_beside_its_intent_bundle_as_the_simulator(tmp_path):
    import json
    import shutil

    from policy.bundle import DEFAULT_BUNDLES

    high = tmp_path / "high"
    shutil.copytree(DEFAULT_BUNDLES / "hrl-scheduler" / "high", high)
    doc = {"capacity_target": 0.6, "move_budget_frac": 0.0, "burst": 0.25}
    (high / "constant.json").write_text(json.dumps(doc))
    assert planner_from_config(load_descheduler_config(_intent_config(high))).autoscaler.burst == 0.25
    # an explicit value wins; a file of before the burst share was searched means 0
    assert planner_from_config(load_descheduler_config(_intent_config(high, burst=1.0))).autoscaler.burst == 1.0
    (high / "constant.json").write_text(json.dumps({"capacity_target": 0.6, "move_budget_frac": 0.0}))
    assert planner_from_config(load_descheduler_config(_intent_config(high))).autoscaler.burst == 0.0
    # a malformed one names the field that led to it; burst outside [0, 1] or on another autoscaler is refused
    (high / "constant.json").write_text(json.dumps({**doc, "burst": 2}))
    with pytest.raises(ValueError, match=r"^planner.intentPolicy.bundle: .*constant.json: burst: expected a number"):
        planner_from_config(load_descheduler_config(_intent_config(high)))
    with pytest.raises(ConfigError, match="planner.autoscaler.burst"):
        load_descheduler_config(_intent_config(high, burst=1.5))
    bad = _intent_config(high, burst=0.5)
    bad["planner"]["autoscaler"]["name"] = "utilization-target"
    with pytest.raises(ConfigError, match=r"burst \(0.5\) is only read by name: intent \(got name: utilization-"):
        load_descheduler_config(bad)


def test_a_tolerance_the_drpc_students_would_ignore_is_refused_and_read_by_the_others():
    doc = {
        "apiVersion": "hrl-scheduler.io/v1alpha1",
        "kind": "DeschedulerConfiguration",
        "planner": {"name": "hierarchical", "autoscaler": {"name": "drpc", "tolerance": 0.2}},
    }
    with pytest.raises(ConfigError, match=r"tolerance \(0.2\) is not read by name: drpc") as exc:
        load_descheduler_config(doc)
    assert "\n" not in str(exc.value).strip()
    doc["planner"]["autoscaler"]["name"] = "utilization-target"
    assert planner_from_config(load_descheduler_config(doc)).autoscaler.tolerance == 0.2


def test_the_intent_autoscalers_forecast_floor_is_0_5_as_the_simulator_unless_configured():
    from policy.bundle import DEFAULT_BUNDLES

    high = DEFAULT_BUNDLES / "hrl-scheduler" / "high"
    assert planner_from_config(load_descheduler_config(_intent_config(high))).autoscaler.forecast_min == 0.5
    one = planner_from_config(load_descheduler_config(_intent_config(high, forecastMin=1)))
    assert one.autoscaler.forecast_min == 1.0
    for bad in (0.4, 1.5):
        with pytest.raises(ConfigError, match="planner.autoscaler.forecastMin"):
            load_descheduler_config(_intent_config(high, forecastMin=bad))
    other = _intent_config(high, forecastMin=1)
    other["planner"]["autoscaler"]["name"] = "utilization-target"
    with pytest.raises(ConfigError, match=r"forecastMin \(1\) is only read by name: intent \(got name: utilization-"):
        load_descheduler_config(other)


def test_the_intent_autoscalers_limit_target_is_the_simulators_unless_configured():
    from policy.bundle import DEFAULT_BUNDLES
    from policy.highlevel import IntentAutoscaler

    high = DEFAULT_BUNDLES / "hrl-scheduler" / "high"
    served = planner_from_config(load_descheduler_config(_intent_config(high))).autoscaler.limit_target
    assert served == IntentAutoscaler().limit_target == 0.2  # the value BENCHMARKS.md and the docs give
    for v in (0, 0.5):
        got = planner_from_config(load_descheduler_config(_intent_config(high, limitTarget=v))).autoscaler
        assert got.limit_target == v
    for bad in (-0.1, 0.95, "x"):
        with pytest.raises(ConfigError, match="planner.autoscaler.limitTarget"):
            load_descheduler_config(_intent_config(high, limitTarget=bad))
    other = _intent_config(high, limitTarget=0.2)
    other["planner"]["autoscaler"]["name"] = "utilization-target"
    with pytest.raises(ConfigError, match=r"limitTarget \(0.2\) is only read by name: intent \(got name: utilization-"):
        load_descheduler_config(other)
