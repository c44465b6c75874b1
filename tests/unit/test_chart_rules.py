"""The chart refuses the combinations the components refuse (issue 26 item 7): for every cross-field check of
ExtenderConfiguration and DeschedulerConfiguration (hack/chart_rules.py, rendered into the chart's generated
templates/_validate.tpl), `helm template` of the rule's ``refused`` values fails with the very line the component's
loader gives for the configuration file the chart would render from them, and both accept the rule's ``accepted``
values and the defaults; no validator of the two models is left without a rule."""

from __future__ import annotations

import copy
import sys

import pytest
from chart_helpers import NS, ROOT, config_of, render, template

from descheduler.config import load_descheduler_config
from extender.config import load_extender_config
from policy.config import ConfigError

sys.path.insert(0, str(ROOT / "hack"))
import chart_rules

LOADERS = {"extender": load_extender_config, "descheduler": load_descheduler_config}


def merged(base: dict, over: dict) -> dict:
    """The chart's mustMergeOverwrite of `config` over the generated file."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def loader_lines(component: str, values: dict) -> list[str]:
    """The component loader's problems with the file the chart renders from ``values`` (its ``config`` merged over
    the file rendered without it), ``<config>`` named as the chart's value; ``[]`` when it loads."""
    values = copy.deepcopy(values)
    override = values[component].pop("config", {})
    base = config_of(render(values), f"hrl-{component}-config")
    try:
        LOADERS[component](merged(base, override))
    except ConfigError as exc:
        return [line.replace("<config>", f"{component}.config", 1) for line in exc.lines()]
    return []


def rule_id(rule: chart_rules.Rule) -> str:
    return f"{rule.component}-{rule.validator}-{rule.message[:30]}"


@pytest.mark.parametrize("rule", chart_rules.RULES, ids=rule_id)
def test_helm_template_refuses_a_combination_with_the_components_own_line(rule):
    lines = loader_lines(rule.component, rule.refused)
    assert len(lines) == 1, lines  # the component refuses it, for this reason alone
    out = template(rule.refused, check=False)
    assert out.returncode != 0, f"helm template accepted what {rule.component} refuses: {lines[0]}"
    assert lines[0] in out.stderr, (lines[0], out.stderr)
    assert "Traceback" not in out.stderr and "nil pointer" not in out.stderr


@pytest.mark.parametrize("rule", chart_rules.RULES, ids=rule_id)
def test_both_accept_the_values_next_to_each_rule(rule):
    assert loader_lines(rule.component, rule.accepted) == []
    out = template(rule.accepted, check=False)
    assert out.returncode == 0, out.stderr


def test_both_accept_the_defaults_and_every_cross_field_validator_has_a_rule():
    objs = render({"learnedPolicies": {"enabled": True}, "descheduler": {"mode": "interval"}})
    load_extender_config(config_of(objs, "hrl-extender-config"))
    load_descheduler_config(config_of(objs, "hrl-descheduler-config"))
    assert chart_rules.uncovered() == []
    found = chart_rules.cross_field_validators()
    assert ("extender", "LimitsConfig._busy_within_deadline") in found
    assert ("extender", "ListenConfig._health_port_differs") in found  # a field validator reading another field
    assert ("descheduler", "ScalingConfig._bounds") in found


def test_the_committed_template_is_the_rules():
    assert (ROOT / "manifests" / "charts" / "hrl-scheduler" / "templates" / "_validate.tpl").read_text() == (
        chart_rules.template()
    )


def test_the_rules_read_the_configuration_not_only_the_chart_values():
    # the same rule reached through a chart value (extender.mode) and through the configuration itself
    for values in ({"extender": {"mode": "shadow", "config": {"decisions": {"enabled": False}}}},
                   {"extender": {"config": {"mode": "shadow", "decisions": {"enabled": False}}}}):  # fmt: skip
        out = template(values, check=False)
        assert "extender.config: decisions.enabled: false and mode: shadow" in out.stderr, out.stderr
    # with the descheduler off, its configuration is not rendered and not checked
    off = {"descheduler": {"enabled": False, "config": {"scaling": {"minReplicas": 5, "maxReplicas": 2}}}}
    assert template(off, check=False).returncode == 0


def test_make_chart_reads_the_shipped_values_as_a_values_file_and_they_pass():
    import subprocess

    dry = subprocess.run(["make", "-n", "chart"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert "hack/check-values.py manifests/charts/hrl-scheduler/values.yaml" in dry.stdout, dry.stdout
    assert dry.stdout.index("check-values.py") < dry.stdout.index(" package ")  # before the package is written
    out = subprocess.run([sys.executable, str(ROOT / "hack" / "check-values.py"),
                          str(ROOT / "manifests" / "charts" / "hrl-scheduler" / "values.yaml")],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr


OWNED = [(c, path) for c, fields in chart_rules.OWNED.items() for path, _ in fields]


def _nested(path: str, value) -> dict:
    out = value
    for part in reversed(path.split(".")):
        out = {part: out}
    return out


@pytest.mark.parametrize("component,path", OWNED, ids=[f"{c}-{p}" for c, p in OWNED])
def test_a_field_the_chart_owns_is_refused_in_the_config_naming_the_chart_value(component, path):
    sample = {"listen.port": 1234, "listen.healthPort": 9999, "listen.host": "127.0.0.1", "listen.tls": {},
              "urlPrefix": "/other", "stateFile": "/data/h.json", "intervalSeconds": 60, "dryRun": True,
              "cooldownSeconds": 60, "excludedNamespaces": [], "metrics.listen": "0.0.0.0:9999",
              "metrics.pushgateway": "http://pg:9091", "leaderElection.leaseName": "other",
              "leaderElection.leaseNamespace": "other"}[path]  # fmt: skip
    values = {component: {"config": _nested(path, sample)}}
    out = template(values, check=False)
    assert out.returncode != 0, out.stderr
    hint = dict(chart_rules.OWNED[component])[path]
    assert f"{component}.config.{path}: set by the chart, not here; {hint}" in out.stderr, out.stderr


def test_excluded_namespaces_stay_excluded_cluster_wide():
    values = {"descheduler": {"clusterWide": True, "config": {"excludedNamespaces": []}}}
    out = template(values, check=False)
    assert out.returncode != 0 and "descheduler.config.excludedNamespaces" in out.stderr, out.stderr
    objs = render({"descheduler": {"clusterWide": True, "excludedNamespaces": ["other"]}})
    assert load_descheduler_config(config_of(objs, "hrl-descheduler-config")).excluded_namespaces[:2] == (
        "kube-system",
        NS,
    )


def test_every_one_field_validator_is_in_the_schema_or_explained():
    found = chart_rules.field_validators()
    assert ("descheduler", "AutoscalerConfig._keys") in found and ("extender", "CacheConfig._host_port") in found
    assert [u for u in chart_rules.uncovered() if "FIELD_CHECKS" in u] == []


@pytest.mark.parametrize(
    "key,name",
    [("extender", "config"), ("extender", "tls"), ("descheduler", "state"), ("scheduler", "extender-ca"),
     ("learnedPolicies.cache", "tmp")],
)  # fmt: skip
def test_extra_volumes_may_not_reuse_a_volume_name_of_the_chart(key, name):
    vols = {"extraVolumes": [{"name": name, "emptyDir": {}}]}
    values = {"learnedPolicies": {"cache": vols}} if key == "learnedPolicies.cache" else {key: vols}
    out = template(values, check=False)
    assert out.returncode != 0 and f'{key}.extraVolumes[0]: the name "{name}" is a volume of the chart' in out.stderr
    ok = (
        {"learnedPolicies": {"cache": {"extraVolumes": [{"name": "mine", "emptyDir": {}}]}}}
        if "." in key
        else {key: {"extraVolumes": [{"name": "mine", "emptyDir": {}}]}}
    )
    assert template(ok, check=False).returncode == 0
