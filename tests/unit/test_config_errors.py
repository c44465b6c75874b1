"""The configuration error format of every component (issue 14, CLIs and logs; issue 13 item 5): every problem of
a file at once, one line each, ``FILE: dotted.path: problem (got VALUE)``, in our own words (no pydantic
phrasing), "did you mean" for unknown fields; duplicate keys, doubly given fields and non-integer integers
refused; an empty file and a missing kubeconfig are errors; the JSON Schema of each kind agrees with the loader."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from descheduler.config import DeschedulerConfiguration, load_descheduler_config
from extender.config import load_extender_config
from policy.cli.core import main as policy_main
from policy.config import ConfigError

ROOT = Path(__file__).resolve().parents[2]
API = "apiVersion: hrl-scheduler.io/v1alpha1\n"
D = API + "kind: DeschedulerConfiguration\n"
E = API + "kind: ExtenderConfiguration\n"
#: one problem line of the common format
LINE = re.compile(r"^(?P<file>[^:]+): (?P<path>[A-Za-z][\w]*(\.[A-Za-z]\w*|\[\d+\])*): (?P<msg>\S.*)$")


def write(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    f = tmp_path / name
    f.write_text(text)
    return f


def cli(module: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)


# ---- duplicate keys -----------------------------------------------------------------------------------------


def test_a_duplicate_key_is_refused_not_last_one_wins(tmp_path):
    f = write(tmp_path, D + "dryRun: true\ndryRun: false\n")
    with pytest.raises(ConfigError) as ei:
        load_descheduler_config(f)
    assert ei.value.lines() == [f"{f}: dryRun: line 4: duplicate key (first at line 3); each key may appear once"]


def test_every_duplicate_of_a_file_is_reported_with_its_path(tmp_path):
    f = write(tmp_path, D + "caps:\n  perNode: 1\n  total: 2\n  perNode: 3\nplanner: {name: hierarchical, name: x}\n")
    with pytest.raises(ConfigError) as ei:
        load_descheduler_config(f)
    assert [p for p, _m in ei.value.problems] == ["caps.perNode", "planner.name"]


def test_a_field_given_in_both_spellings_is_refused(tmp_path):
    f = write(tmp_path, D + "dryRun: true\ndry_run: false\n")
    with pytest.raises(ConfigError, match="dryRun and dry_run are the same field"):
        load_descheduler_config(f)


def test_anchors_and_merge_keys_keep_their_yaml_meaning(tmp_path):
    f = write(tmp_path, D + "caps: &c {perNode: 1, total: 3}\nplanner: {maxMoves: 7}\n")
    assert load_descheduler_config(f).caps.total == 3
    f = write(tmp_path, E + "listen: {<<: {host: 0.0.0.0, port: 1}, port: 2}\n")
    assert load_extender_config(f).listen.port == 2  # an override through a merge key is not a duplicate


def test_an_alias_bomb_is_refused(tmp_path):
    lol = "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 9))
    f = write(tmp_path, D + "x0: &l0 [lol]\n" + lol)
    with pytest.raises(ConfigError, match="alias bomb"):
        load_descheduler_config(f)


# ---- strict types -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,path,got",
    [
        ("caps: {perNode: true}\n", "caps.perNode", "true"),
        ("caps: {perNode: 1.5}\n", "caps.perNode", "1.5"),
        ("caps: {perNode: '2'}\n", "caps.perNode", "'2'"),
        ("planner: {maxMoves: 3.0}\n", "planner.maxMoves", "3.0"),
        ("scaling: {maxStepPerCycle: false}\n", "scaling.maxStepPerCycle", "false"),
    ],
)
def test_an_integer_field_takes_only_integers(tmp_path, text, path, got):
    f = write(tmp_path, D + text)
    with pytest.raises(ConfigError) as ei:
        load_descheduler_config(f)
    assert ei.value.lines() == [f"{f}: {path}: must be an integer (got {got})"]


@pytest.mark.parametrize(
    "text,line",
    [
        ("dryRun: 'yes'\n", "dryRun: must be true or false (got 'yes')"),
        ("dryRun: 1\n", "dryRun: must be true or false (got 1)"),
        ("cooldownSeconds: true\n", "cooldownSeconds: must be a number (got true)"),
        ("excludedNamespaces: kube-system\n", "excludedNamespaces: must be a list (got 'kube-system')"),
        ("planner: {intent: foo}\n", "planner.intent: must be a list (got 'foo')"),
        ("leaderElection: {identity: 7}\n", "leaderElection.identity: must be text (a string) (got 7)"),
        ("caps: 3\n", "caps: must be a mapping of fields (got 3)"),
        (
            "planner: {name: magic}\n",
            "planner.name: must be one of 'rebalance-heuristic' or 'hierarchical' (got 'magic')",
        ),
        ("caps: {perNode: -1}\n", "caps.perNode: must be >= 0 (got -1)"),
        ("cache: {}\n", "cache.address: required field missing"),
    ],
)
def test_each_problem_is_in_our_words(tmp_path, text, line):
    f = write(tmp_path, D + text)
    with pytest.raises(ConfigError) as ei:
        load_descheduler_config(f)
    assert ei.value.lines() == [f"{f}: {line}"]


def test_valid_values_of_every_type_still_load(tmp_path):
    f = write(
        tmp_path,
        D + "dryRun: true\ncooldownSeconds: 60\ncaps: {perNode: 0, total: null}\n"
        "excludedNamespaces: [a, b]\nplanner: {intent: [1, 0.5]}\n",
    )
    c = load_descheduler_config(f)
    assert (c.dry_run, c.cooldown_seconds, c.caps.per_node, c.caps.total) == (True, 60.0, 0, None)
    assert c.excluded_namespaces == ("a", "b") and c.planner.intent == (1.0, 0.5)


@pytest.mark.parametrize("text,want", [("5e-05", 5e-05), ("1e2", 100.0), ("1.5E+2", 150.0), (".5e2", 50.0)])
def test_a_number_in_exponent_notation_is_a_number_as_kubectl_and_helm_read_it(tmp_path, text, want):
    # Helm's toYaml writes 0.00005 as 5e-05, which YAML 1.1 (PyYAML's default) would read as text
    f = write(tmp_path, D + f"cooldownSeconds: {text}\nplanner: {{intent: [{text}, 1]}}\n")
    c = load_descheduler_config(f)
    assert c.cooldown_seconds == want and c.planner.intent == (want, 1.0)
    f = write(tmp_path, D + f"cooldownSeconds: '{text}'\n")  # quoted: text, as everywhere
    with pytest.raises(ConfigError, match=rf"cooldownSeconds: must be a number \(got '{re.escape(text)}'\)"):
        load_descheduler_config(f)
    f = write(tmp_path, D + "caps: {perNode: 1e2}\n")  # an integer field still takes only integers
    with pytest.raises(ConfigError, match=r"caps.perNode: must be an integer \(got 100.0\)"):
        load_descheduler_config(f)


# ---- all problems at once, one format, did you mean ----------------------------------------------------------


def test_unknown_fields_get_did_you_mean(tmp_path):
    f = write(tmp_path, D + "dryrun: true\ncaps: {pernode: 1, totl: 2, colour: 3}\n")
    with pytest.raises(ConfigError) as ei:
        load_descheduler_config(f)
    assert sorted(ei.value.lines()) == sorted(
        [
            f"{f}: dryrun: unknown field (did you mean dryRun?)",
            f"{f}: caps.pernode: unknown field (did you mean perNode?)",
            f"{f}: caps.totl: unknown field (did you mean total?)",
            f"{f}: caps.colour: unknown field",
        ]
    )


BAD_BOTH = {
    "extender": E + "listen: {prot: 1, port: true}\nkubernetes: {kubeconfig: /nonexistent/kubeconfig}\n"
    "topology: {sources: [/nonexistent/spans.csv]}\nlogLevel: loud\n",
    "descheduler": D + "dryrun: true\ncaps: {perNode: 1.5}\ntopology: {sources: [/nonexistent/spans.csv]}\n"
    "placement: {name: learned, bundle: /nonexistent/bundle}\n",
}


EXPECTED_PATHS = {
    "extender": {"listen.prot", "listen.port", "kubernetes.kubeconfig", "topology.sources[0]", "logLevel"},
    "descheduler": {"dryrun", "caps.perNode", "topology.sources[0]", "placement.bundle"},
}


@pytest.mark.parametrize("module", ["extender", "descheduler"])
def test_both_binaries_print_every_problem_at_once_one_line_each_in_one_format(tmp_path, module):
    f = write(tmp_path, BAD_BOTH[module])
    extra = ("--once", "--snapshot", str(ROOT / "tests/fixtures/descheduler/cluster-list.json"))
    p = cli(module, "--config", str(f), *(extra if module == "descheduler" else ()))
    lines = p.stderr.splitlines()
    assert p.returncode == 2 and p.stdout == "", p.stderr
    for line in lines:
        m = LINE.match(line)
        assert m and m["file"] == str(f), line
        assert "Input should" not in line and "Value error" not in line and "Field required" not in line
    # schema problems and missing files, all in the same run
    assert sorted(LINE.match(x)["path"] for x in lines) == sorted(EXPECTED_PATHS[module]), p.stderr


@pytest.mark.parametrize("module", ["extender", "descheduler"])
def test_an_empty_config_file_is_an_error_in_both_binaries(tmp_path, module):
    f = write(tmp_path, "")
    p = cli(module, "--config", str(f), "--once") if module == "descheduler" else cli(module, "--config", str(f))
    assert p.returncode == 2 and p.stderr.splitlines() == [
        f"{f}: empty file: expected apiVersion: hrl-scheduler.io/v1alpha1, kind: "
        f"{'ExtenderConfiguration' if module == 'extender' else 'DeschedulerConfiguration'} and its fields"
    ]


def test_a_missing_kubeconfig_says_so(tmp_path):
    f = write(tmp_path, E + "kubernetes: {enabled: true, kubeconfig: /nonexistent}\n")
    p = cli("extender", "--config", str(f))
    assert p.returncode == 2 and p.stderr.splitlines() == [
        f"{f}: kubernetes.kubeconfig: no such file (got '/nonexistent')"
    ]
    p = cli("descheduler", "--once", "--kubeconfig", "/nonexistent")
    assert p.returncode == 2 and "no such kubeconfig file '/nonexistent'" in p.stderr
    assert "No configuration found" not in p.stderr


# ---- JSON Schema -----------------------------------------------------------------------------------------------


def test_every_kind_is_registered_and_exports_a_schema(capsys):
    from policy.cli.config import config_kinds

    assert set(config_kinds()) == {"ExtenderConfiguration", "DeschedulerConfiguration", "App", "ThresholdAutoscaler"}
    for kind in config_kinds():
        assert policy_main(["config", "schema", kind]) == 0
        schema = json.loads(capsys.readouterr().out)
        assert schema["properties"]["kind"] == {"const": kind} and schema["additionalProperties"] is False
    assert policy_main(["config", "schema", "Nope"]) == 2
    assert "unknown kind 'Nope'" in capsys.readouterr().err


def _shipped_configs() -> list[dict]:
    import yaml

    from policy.cli.config import config_kinds

    out = []
    # the rendered manifests (the chart's templates are not YAML until Helm renders them)
    for f in sorted((ROOT / "manifests").rglob("*.yaml")):
        if "charts" in f.parts:  # the chart's templates and files are not YAML until Helm renders them
            continue
        for doc in yaml.safe_load_all(f.read_text()):
            if isinstance(doc, dict) and doc.get("kind") in config_kinds():
                out.append(doc)
            if isinstance(doc, dict) and doc.get("kind") == "ConfigMap":
                for v in (doc.get("data") or {}).values():
                    inner = yaml.safe_load(v)
                    if isinstance(inner, dict) and inner.get("kind") in config_kinds():
                        out.append(inner)
    return out


def test_the_schema_accepts_the_shipped_configs_and_refuses_what_the_loader_refuses():
    import jsonschema

    from policy.cli.config import config_kinds
    from policy.config import json_schema

    shipped = _shipped_configs()
    assert len(shipped) >= 2
    kinds = config_kinds()
    for doc in shipped:
        jsonschema.Draft202012Validator(json_schema(doc["kind"], kinds[doc["kind"]])).validate(doc)
    v = jsonschema.Draft202012Validator(json_schema("DeschedulerConfiguration", DeschedulerConfiguration))
    for bad in ({"caps": {"perNode": True}}, {"dryrun": True}, {"caps": {"perNode": 1.5}}, {"kind": "Other"}):
        doc = {"apiVersion": "hrl-scheduler.io/v1alpha1", "kind": "DeschedulerConfiguration", **bad}
        assert not v.is_valid(doc), bad


def test_config_check_reports_in_the_same_format(tmp_path, capsys):
    good = write(tmp_path, D + "dryRun: true\n", "good.yaml")
    bad = write(tmp_path, E + "listen: {port: 99999}\n", "bad.yaml")
    assert policy_main(["config", "check", str(good), str(bad)]) == 2
    out, err = capsys.readouterr()
    assert out == f"ok: DeschedulerConfiguration ({good})\n"
    assert err.splitlines() == [f"{bad}: listen.port: must be <= 65535 (got 99999)"]


def test_the_extender_reports_every_file_that_does_not_load_at_once(tmp_path):
    # the files exist (so the configuration validates) but do not load: a certificate that is not PEM, a bundle
    # whose manifest is empty, a span table without its columns; one run, one line each
    (tmp_path / "tls.crt").write_text("not a certificate\n")
    (tmp_path / "tls.key").write_text("not a key\n")
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "manifest.json").write_text("{}")
    (tmp_path / "spans.csv").write_text("a,b\n1,2\n")
    f = write(
        tmp_path,
        E
        + f"listen: {{tls: {{certFile: {tmp_path}/tls.crt, keyFile: {tmp_path}/tls.key}}}}\n"
        + f"policy: {{name: learned, bundle: {bundle}}}\ntopology: {{sources: [{tmp_path}/spans.csv]}}\n",
    )
    p = cli("extender", "--config", str(f))
    lines = p.stderr.splitlines()
    assert p.returncode == 2 and len(lines) == 3, p.stderr
    assert [x.split(": ")[1] for x in lines] == ["listen.tls", "policy.bundle", "topology.sources"]
    assert all(x.startswith(f"{f}: ") for x in lines)


def test_a_path_that_cannot_even_be_looked_at_is_a_problem_line_not_a_crash():
    # found by make fuzz: a 5,000-character source path raised OSError (File name too long) from Path.exists
    doc = {"apiVersion": "hrl-scheduler.io/v1alpha1", "kind": "DeschedulerConfiguration"}
    with pytest.raises(ConfigError) as ei:
        load_descheduler_config({**doc, "topology": {"sources": ["a" * 5000]}}, check_files=True)
    assert [p for p, _m in ei.value.problems] == ["topology.sources[0]"]
    assert "cannot be checked: File name too long" in ei.value.problems[0][1]
