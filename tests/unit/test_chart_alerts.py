"""The chart's alerts (files/alerts.yaml, the PrometheusRule) and dashboard, checked with the real promtool
(hack/install-prometheus.sh): every rule parses, names only metrics the code exports, carries a runbook_url to its
own page under docs/runbooks/ (and every page there belongs to an alert), and behaves: `promtool test rules` feeds
series and checks which alerts fire, including the absent() companions of HrlExtenderDown, HrlDeschedulerNoLeader and
HrlDeschedulerRunsMissing, which fire when no replica (or no run) exports the series at all."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from chart_helpers import CHART, NS, ROOT, one, render

RUNBOOKS = ROOT / "docs" / "runbooks"
BASE = "https://github.com/hrl-scheduler/hrl-scheduler/blob/main/docs/runbooks"
#: The two renders that hold every alert between them (the leader alert in interval mode, the runs alert with a
#: Pushgateway in CronJob mode).
RENDERS = {
    "cronjob": {"metrics": {"prometheusRule": {"enabled": True}, "pushgateway": {"url": "http://pg:9091"}}},
    "interval": {"metrics": {"prometheusRule": {"enabled": True}}, "descheduler": {"mode": "interval"}},
}


def exported_metric_names() -> set[str]:
    """Every sample name the extender, the descheduler and the cache export (their collectors instantiated on
    fresh registries, with the process metrics), plus what the Pushgateway adds to pushed groups."""
    from prometheus_client import CollectorRegistry

    from descheduler.metrics import DeschedulerMetrics
    from extender.metrics import ExtenderMetrics
    from policy.cache import CacheServer
    from policy.cache.metrics import CacheClientMetrics
    from policy.telemetry import register_process_metrics

    names: set[str] = set()
    regs = []
    r = CollectorRegistry()
    ExtenderMetrics(r)
    CacheClientMetrics(r)
    register_process_metrics(r, "hrl-extender")
    regs.append(r)
    d = DeschedulerMetrics()
    d.leader.labels(name="hrl-descheduler").set(1)
    regs.append(d.registry)
    server = CacheServer("127.0.0.1:0")
    regs.append(server.registry)
    for reg in regs:
        for fam in reg.collect():
            names.add(fam.name)
            names.update(s.name for s in fam.samples)
    # histogram / counter families list their sample names only when a child exists: add the standard suffixes
    for fam in list(names):
        names.update({f"{fam}_bucket", f"{fam}_count", f"{fam}_sum", f"{fam}_total"})
    return names | {"push_time_seconds", "push_failure_time_seconds"}  # added by the Pushgateway


PROMQL_FUNCS = {
    "sum", "rate", "increase", "max", "min", "by", "clamp_min", "histogram_quantile", "time", "count", "le",
    "without", "on", "ignoring", "and", "or", "unless", "avg", "label_values", "absent",
}  # fmt: skip


def metric_names_in(expr: str) -> set[str]:
    """Identifiers of an expression that are metric names: outside {...} label matchers and quotes, not
    functions, keywords, label names after by/without, or durations."""
    e = re.sub(r'"[^"]*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", "", e)
    e = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", e)
    e = re.sub(r"\[[^\]]*\]", "", e)
    idents = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", e))
    return {i for i in idents if i not in PROMQL_FUNCS and not re.fullmatch(r"\d+[smhd]?", i) and "_" in i}


def alert_groups(mode: str = "cronjob") -> list[dict[str, Any]]:
    return one(render(RENDERS[mode]), "PrometheusRule", "hrl-scheduler")["spec"]["groups"]


def alerts() -> dict[str, dict[str, Any]]:
    """Every alert rule of both renders, by name."""
    return {r["alert"]: r for mode in RENDERS for g in alert_groups(mode) for r in g["rules"]}


def dashboard_exprs() -> list[str]:
    dash = json.loads((CHART / "files" / "grafana-dashboard.json").read_text())
    return [t["expr"] for p in dash["panels"] for t in p["targets"]]


@cache
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        out = subprocess.run([str(ROOT / "hack" / "install-prometheus.sh")], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        path = str(Path(out.stdout.strip().splitlines()[-1]).parent / "promtool")
    return path


def test_the_alert_rules_pass_promtool(tmp_path):
    for mode in RENDERS:
        rules = tmp_path / f"rules-{mode}.yaml"
        rules.write_text(yaml.safe_dump({"groups": alert_groups(mode)}))
        out = subprocess.run([promtool(), "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
    assert set(alerts()) == {
        "HrlExtenderNeutralAnswers", "HrlExtenderSnapshotStale", "HrlExtenderDown", "HrlDeschedulerEvictionFailures",
        "HrlDeschedulerCyclesFailing", "HrlDeschedulerLoopHold", "HrlDeschedulerNoLeader", "HrlDeschedulerRunsMissing",
    }  # fmt: skip


def test_the_mode_specific_alerts_are_rendered_only_where_their_series_can_exist():
    cron = {r["alert"] for g in alert_groups("cronjob") for r in g["rules"]}
    interval = {r["alert"] for g in alert_groups("interval") for r in g["rules"]}
    assert "HrlDeschedulerRunsMissing" in cron and "HrlDeschedulerNoLeader" not in cron
    assert "HrlDeschedulerNoLeader" in interval and "HrlDeschedulerRunsMissing" not in interval
    no_pushgateway = one(render({"metrics": {"prometheusRule": {"enabled": True}}}), "PrometheusRule", "hrl-scheduler")
    assert "HrlDeschedulerRunsMissing" not in {r["alert"] for g in no_pushgateway["spec"]["groups"] for r in g["rules"]}


def test_every_alert_has_a_runbook_page_and_every_page_an_alert():
    pages = {p.stem for p in RUNBOOKS.glob("*.md") if p.name != "README.md"}
    for name, rule in alerts().items():
        assert rule["annotations"]["runbook_url"] == f"{BASE}/{name}.md", name
        text = (RUNBOOKS / f"{name}.md").read_text()
        assert text.startswith(f"# {name}\n"), name
        for section in ("## Meaning", "## Impact", "## Diagnosis", "## Mitigation"):
            assert section in text, (name, section)
    assert pages == set(alerts())
    index = (RUNBOOKS / "README.md").read_text()
    assert all(f"[{name}]({name}.md)" in index for name in alerts())
    url = "https://wiki.example/runbooks"
    values = {"metrics": {**RENDERS["cronjob"]["metrics"], "prometheusRule": {"enabled": True, "runbookBaseURL": url}}}
    custom = one(render(values), "PrometheusRule", "hrl-scheduler")
    assert {r["annotations"]["runbook_url"] for g in custom["spec"]["groups"] for r in g["rules"]} == {
        f"{url}/{r['alert']}.md" for g in custom["spec"]["groups"] for r in g["rules"]
    }


def test_every_dashboard_expression_parses_with_promtool(tmp_path):
    # promtool has no "check expression"; a recording rule per expression checks the same parser.
    rules = [
        {"record": f"hrl:dashboard:{i}", "expr": e.replace("$namespace", "x")} for i, e in enumerate(dashboard_exprs())
    ]
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    out = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_alert_and_dashboard_expression_names_only_metrics_the_code_exports():
    exported = exported_metric_names()
    exprs = [r["expr"] for r in alerts().values()] + dashboard_exprs()
    used = set().union(*(metric_names_in(e) for e in exprs))
    assert used, "no metric names found: the extraction is broken"
    assert sorted(used - exported) == []


def test_the_metric_name_check_catches_a_name_the_code_does_not_export():
    assert "hrl_extender_prioritize_totl" in metric_names_in('sum(rate(hrl_extender_prioritize_totl{a="b"}[5m]))')
    assert "hrl_extender_prioritize_totl" not in exported_metric_names()


def _rules_test(tmp_path: Path, mode: str, series: list[dict[str, str]], expect: list[dict[str, Any]]) -> str:
    """`promtool test rules` of the render ``mode`` with input ``series``; returns promtool's output (asserted 0)."""
    rules = tmp_path / f"rules-{mode}.yaml"
    rules.write_text(yaml.safe_dump({"groups": alert_groups(mode)}))
    test = tmp_path / f"test-{mode}.yaml"
    case = {"interval": "1m", "input_series": series, "alert_rule_test": expect}
    test.write_text(yaml.safe_dump({"rule_files": [rules.name], "evaluation_interval": "1m", "tests": [case]}))
    out = subprocess.run([promtool(), "test", "rules", test.name], capture_output=True, text=True, timeout=60,
                         cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def _firing(alert: str, at: str, labels: dict[str, str] | None) -> dict[str, Any]:
    """An expected alert at ``at`` with ``labels`` (besides its severity), or none when ``labels`` is None."""
    if labels is None:
        return {"eval_time": at, "alertname": alert, "exp_alerts": []}
    rule = alerts()[alert]
    exp = [{"exp_labels": {**labels, **rule["labels"]}, "exp_annotations": rule["annotations"]}]
    return {"eval_time": at, "alertname": alert, "exp_alerts": exp}


def test_no_leader_fires_when_no_replica_leads_and_when_no_replica_exports_the_gauge(tmp_path):
    gauge = f'leader_election_master_status{{name="hrl-descheduler", namespace="{NS}", pod="p0"}}'
    # the absent() companion: not a single series for 10 minutes -> firing after its 5 minutes
    _rules_test(tmp_path, "interval", [{"series": 'up{job="x"}', "values": "1x10"}],
                [_firing("HrlDeschedulerNoLeader", "2m", None),
                 _firing("HrlDeschedulerNoLeader", "7m", {"name": "hrl-descheduler", "namespace": NS})])  # fmt: skip
    # replicas there, none leading
    _rules_test(tmp_path, "interval", [{"series": gauge, "values": "0x10"}],
                [_firing("HrlDeschedulerNoLeader", "7m", {"namespace": NS})])  # fmt: skip
    # a leader: quiet
    _rules_test(tmp_path, "interval", [{"series": gauge, "values": "1x10"}],
                [_firing("HrlDeschedulerNoLeader", "7m", None)])  # fmt: skip


def test_runs_missing_fires_when_the_last_push_is_old_and_when_no_run_ever_pushed(tmp_path):
    pushed = f'push_time_seconds{{job="hrl-descheduler", namespace="{NS}", instance=""}}'
    # never pushed: the absent() companion
    _rules_test(tmp_path, "cronjob", [{"series": 'up{job="x"}', "values": "1x10"}],
                [_firing("HrlDeschedulerRunsMissing", "7m", {"job": "hrl-descheduler", "namespace": NS})])  # fmt: skip
    # the last push at t=0 (value 0 s), evaluated 40 minutes later: 2,400 s > 1,800 s
    _rules_test(tmp_path, "cronjob", [{"series": pushed, "values": "0x45"}],
                [_firing("HrlDeschedulerRunsMissing", "40m", {"job": "hrl-descheduler", "namespace": NS}),
                 _firing("HrlDeschedulerRunsMissing", "20m", None)])  # fmt: skip
    # a push every minute (its own time): quiet
    _rules_test(tmp_path, "cronjob", [{"series": pushed, "values": "0+60x45"}],
                [_firing("HrlDeschedulerRunsMissing", "40m", None)])  # fmt: skip


def test_extender_down_fires_when_a_replica_cannot_be_scraped_and_when_no_extender_series_exists(tmp_path):
    def up(pod: str) -> str:  # as the Prometheus Operator labels a target of the extender port
        return f'up{{namespace="{NS}", pod="{pod}", endpoint="extender", job="hrl-scheduler-metrics"}}'

    def age(pod: str) -> str:
        return f'hrl_extender_snapshot_age_seconds{{namespace="{NS}", pod="{pod}", endpoint="extender"}}'

    # no extender series at all (no replica, no monitor selecting it): the absent() companion, after its 5 minutes
    for mode in RENDERS:
        _rules_test(tmp_path, mode, [{"series": 'up{job="x"}', "values": "1x10"}],
                    [_firing("HrlExtenderDown", "2m", None),
                     _firing("HrlExtenderDown", "7m", {"namespace": NS})])  # fmt: skip
    # one of two replicas fails its scrapes (its own series gone): fires for that pod only
    _rules_test(tmp_path, "cronjob",
                [{"series": up("e0"), "values": "0x10"}, {"series": up("e1"), "values": "1x10"},
                 {"series": age("e1"), "values": "3x10"}],
                [_firing("HrlExtenderDown", "2m", None),
                 _firing("HrlExtenderDown", "7m", {"namespace": NS, "pod": "e0"})])  # fmt: skip
    # every replica scraped, with or without a snapshot yet (NaN): quiet
    _rules_test(tmp_path, "cronjob",
                [{"series": up("e0"), "values": "1x10"}, {"series": age("e0"), "values": "NaN 3x9"},
                 {"series": up("e1"), "values": "1x10"}, {"series": age("e1"), "values": "3x10"}],
                [_firing("HrlExtenderDown", "7m", None)])  # fmt: skip


def test_neutral_answers_counts_only_neutral_outcomes_not_shadow_or_refused_requests(tmp_path):
    def answers(outcome: str, per_minute: int) -> dict[str, str]:
        name = f'hrl_extender_prioritize_total{{namespace="{NS}", pod="e0", outcome="{outcome}"}}'
        return {"series": name, "values": f"0+{per_minute}x40"}

    # shadow mode: every answer is outcome="shadow" (neutral by design), plus many invalid client requests: quiet
    _rules_test(tmp_path, "cronjob",
                [answers("shadow", 60), answers("invalid", 600)],
                [_firing("HrlExtenderNeutralAnswers", "35m", None)])  # fmt: skip
    # active mode, most answers neutral_stale: fires
    _rules_test(tmp_path, "cronjob",
                [answers("ok", 10), answers("neutral_stale", 60)],
                [_firing("HrlExtenderNeutralAnswers", "35m", {"namespace": NS})])  # fmt: skip
    # active mode, ok answers and a flood of invalid requests: quiet
    _rules_test(tmp_path, "cronjob",
                [answers("ok", 60), answers("invalid", 600)],
                [_firing("HrlExtenderNeutralAnswers", "35m", None)])  # fmt: skip


def test_runs_missing_threshold_follows_the_value(tmp_path, monkeypatch):
    pushed = f'push_time_seconds{{job="hrl-descheduler", namespace="{NS}", instance=""}}'
    hourly = {"metrics": {**RENDERS["cronjob"]["metrics"],
                          "prometheusRule": {"enabled": True, "runsMissingSeconds": 5400}},
              "descheduler": {"schedule": "0 * * * *"}}  # fmt: skip
    default = {r["alert"]: r for g in alert_groups("cronjob") for r in g["rules"]}["HrlDeschedulerRunsMissing"]
    assert "> 1800)" in default["expr"]  # the default keeps 30 minutes
    monkeypatch.setitem(RENDERS, "hourly", hourly)
    # an hourly schedule: the last push 40 minutes ago is on time with 5400 s, late after 95 minutes
    _rules_test(tmp_path, "hourly", [{"series": pushed, "values": "0x100"}],
                [_firing("HrlDeschedulerRunsMissing", "40m", None),
                 _firing("HrlDeschedulerRunsMissing", "97m", {"job": "hrl-descheduler", "namespace": NS})])  # fmt: skip
