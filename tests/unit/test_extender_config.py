"""extender.config (ExtenderConfiguration) and the hrl-extender command line's error handling."""

from __future__ import annotations

from pathlib import Path

import pytest

from extender.__main__ import main
from extender.config import ExtenderConfiguration, build_policy, load_extender_config, load_topology
from policy.config import ConfigError
from policy.lowlevel import TopologyHeuristic

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "extender"
HEAD = "apiVersion: hrl-scheduler.io/v1alpha1\nkind: ExtenderConfiguration\n"
HEAD_DICT = {"apiVersion": "hrl-scheduler.io/v1alpha1", "kind": "ExtenderConfiguration"}


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "extender.yaml"
    p.write_text(text)
    return p


def test_defaults_match_the_documentation():
    c = load_extender_config(None)
    assert (c.listen.host, c.listen.port) == ("127.0.0.1", 8888)
    assert c.url_prefix == "/scheduler"
    assert (c.policy.name, c.policy.target_utilization) == ("topology-heuristic", 0.7)
    assert c.topology.sources == () and c.snapshot_file is None
    assert c.max_snapshot_age_seconds == 0 and c.log_level == "INFO"
    assert c.listen.health_port is None and c.limits.max_loop_stall_seconds == 10.0  # probes on listen.port only


def test_an_empty_file_is_an_error_not_the_defaults(tmp_path):
    # issue 14: an empty file used to start silently on 127.0.0.1:8888
    f = write(tmp_path, "")
    with pytest.raises(ConfigError, match="empty file: expected apiVersion") as ei:
        load_extender_config(f)
    assert str(ei.value).startswith(f"{f}: ") and len(str(ei.value).splitlines()) == 1


def test_every_field_is_read_from_camel_case_yaml(tmp_path):
    c = load_extender_config(
        write(
            tmp_path,
            HEAD
            + """
listen: {host: 0.0.0.0, port: 9443}
urlPrefix: /hrl/
policy: {name: topology-heuristic, targetUtilization: 0.8}
topology: {sources: [manifests/, spans.csv]}
snapshotFile: cluster.json
maxSnapshotAgeSeconds: 120
logLevel: debug
""",
        )
    )
    assert (c.listen.host, c.listen.port) == ("0.0.0.0", 9443)
    assert c.url_prefix == "/hrl"  # trailing slash dropped
    assert c.policy.target_utilization == 0.8
    assert c.topology.sources == ("manifests/", "spans.csv")
    assert c.snapshot_file == "cluster.json" and c.max_snapshot_age_seconds == 120
    assert c.log_level == "DEBUG"


def test_every_problem_is_reported_at_once_with_its_dotted_path(tmp_path):
    with pytest.raises(ConfigError) as ei:
        load_extender_config(
            write(
                tmp_path,
                HEAD
                + """
listen: {port: 70000}
urlPrefix: scheduler
policy: {name: magic, targetUtilization: 1.0}
maxSnapshotAgeSeconds: -1
colour: blue
""",
            )
        )
    paths = {p for p, _ in ei.value.problems}
    assert paths == {
        "listen.port",
        "urlPrefix",
        "policy.name",
        "policy.targetUtilization",
        "maxSnapshotAgeSeconds",
        "colour",
    }


def test_the_health_port_and_the_loop_stall_bound_are_read_and_checked():
    c = load_extender_config(
        {
            "apiVersion": "hrl-scheduler.io/v1alpha1",
            "kind": "ExtenderConfiguration",
            "listen": {"port": 8888, "healthPort": 8889},
            "limits": {"maxLoopStallSeconds": 2.5},
        }
    )
    assert (c.listen.port, c.listen.health_port, c.limits.max_loop_stall_seconds) == (8888, 8889, 2.5)
    assert load_extender_config({**HEAD_DICT, "listen": {"port": 0, "healthPort": 0}}).listen.health_port == 0
    for doc, line in (
        ({"listen": {"healthPort": 70000}}, "listen.healthPort: must be <= 65535 (got 70000)"),
        ({"listen": {"healthPort": -1}}, "listen.healthPort: must be >= 0 (got -1)"),
        ({"listen": {"healthPort": "8889"}}, "listen.healthPort: must be an integer (got '8889')"),
        (
            {"listen": {"port": 9000, "healthPort": 9000}},
            "listen.healthPort: must differ from listen.port (9000): the probes' listener binds a port of its own "
            "(got 9000)",
        ),
        ({"listen": {"healthPort": 8888}}, "listen.healthPort: must differ from listen.port (8888)"),  # the default
        ({"limits": {"maxLoopStallSeconds": 0}}, "limits.maxLoopStallSeconds: must be > 0.0 (got 0)"),
        ({"limits": {"maxLoopStallSeconds": 4000}}, "limits.maxLoopStallSeconds: must be <= 3600.0 (got 4000)"),
    ):
        with pytest.raises(ConfigError) as ei:
            load_extender_config({**HEAD_DICT, **doc})
        (got,) = ei.value.lines()
        assert got.startswith(f"<config>: {line}"), got


def test_a_wrong_kind_is_refused():
    with pytest.raises(ConfigError, match="kind"):
        load_extender_config({"apiVersion": "hrl-scheduler.io/v1alpha1", "kind": "DeschedulerConfiguration"})


def test_build_policy_configures_the_topology_heuristic():
    p = build_policy(
        load_extender_config(
            {
                "apiVersion": "hrl-scheduler.io/v1alpha1",
                "kind": "ExtenderConfiguration",
                "policy": {"targetUtilization": 0.6},
            }
        )
    )
    assert isinstance(p, TopologyHeuristic) and p.target_utilization == 0.6


def test_no_topology_sources_means_no_graph_and_no_import():
    assert load_topology(ExtenderConfiguration()) == (None, [])


# ---- the command line: bad input → one line on stderr, exit 2 -----------------------------------------------


@pytest.mark.parametrize(
    "text,needle",
    [
        ("listen: {port: -5}\n", "listen.port"),
        ("listen: {port: 8888, healthPort: 8888}\n", "listen.healthPort: must differ from listen.port (8888)"),
        ("kind: Nope\n", "kind"),
        ("policy: [1, 2\n", "invalid YAML"),
    ],
)
def test_a_bad_config_exits_2_with_one_line(tmp_path, capsys, text, needle):
    body = text if text.startswith("kind") else HEAD + text
    f = write(tmp_path, body)
    assert main(["--config", str(f)]) == 2
    err = capsys.readouterr().err
    # the configuration error format every component prints (issue 14): FILE: dotted.path: problem (got VALUE),
    # one line per problem ("kind: Nope" alone also lacks the apiVersion: two problems)
    lines = err.splitlines()
    assert len(lines) == (2 if text.startswith("kind") else 1) and all(x.startswith(f"{f}: ") for x in lines)
    assert needle in err


def test_a_missing_config_file_exits_2(tmp_path, capsys):
    assert main(["--config", str(tmp_path / "nope.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_a_bad_snapshot_file_exits_2_naming_the_problem(tmp_path, capsys):
    bad = tmp_path / "cluster.json"
    bad.write_text('{"kind": "List", "items": [{"kind": "Node", "metadata": {}}]}')
    assert main(["--snapshot", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "snapshot:" in err and "metadata.name" in err


def test_an_unreadable_topology_source_exits_2(tmp_path, capsys):
    cfg = write(tmp_path, HEAD + f"topology: {{sources: [{tmp_path / 'missing-dir'}]}}\n")
    assert main(["--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "topology.sources" in err


def test_a_port_out_of_range_on_the_command_line_exits_2(capsys):
    assert main(["--port", "70000"]) == 2
    assert "--port" in capsys.readouterr().err


MANIFESTS = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        env: [{name: API_ADDR, value: "api:8080"}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: api}
spec:
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      containers: [{name: api}]
---
apiVersion: v1
kind: Service
metadata: {name: api}
spec:
  selector: {app: api}
  ports: [{port: 8080}]
"""


def test_topology_sources_are_loaded_into_a_call_graph(tmp_path):
    m = tmp_path / "app.yaml"
    m.write_text(MANIFESTS)
    graph, warnings = load_topology(
        load_extender_config(
            {
                "apiVersion": "hrl-scheduler.io/v1alpha1",
                "kind": "ExtenderConfiguration",
                "topology": {"sources": [str(m)]},
            }
        )
    )
    assert graph is not None
    assert [(e.caller, e.callee) for e in graph.edges] == [("web", "api")]
    assert isinstance(warnings, list)
