"""``hrl-policy graph``: the installed console script run as a subprocess on every source kind."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests/fixtures"
RELEASE = ROOT / "policy/data/apps/online-boutique/kubernetes-manifests.yaml"
NASA = ROOT / "policy/data/traces/nasa_requests_per_minute.csv"
SPANS_DIR = FIX / "online-boutique-spans"
ALIBABA_2021 = FIX / "alibaba/v2021-sjlgaga/Callgraph.csv"
ALIBABA_CASPER_2021 = FIX / "alibaba/v2021-casper/2021-shuffled-sample-traces-small.csv"
ALIBABA_2022 = FIX / "alibaba/v2022-casper/2022-shuffled-sample-traces-small.csv"


def hrl_policy() -> str:
    exe = Path(sys.executable).parent / "hrl-policy"
    if exe.exists():
        return str(exe)
    found = shutil.which("hrl-policy")
    assert found, "the hrl-policy console script is not installed (pip install -e .)"
    return found


def run(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([hrl_policy(), *map(str, args)], capture_output=True, text=True, timeout=60, cwd=ROOT)


def check_shape(doc: dict) -> None:
    assert set(doc) == {"services", "edges"}
    assert isinstance(doc["services"], list) and all(isinstance(s, str) for s in doc["services"])
    assert doc["services"] == sorted(doc["services"])
    for e in doc["edges"]:
        assert {"caller", "callee", "rps"} <= set(e)
        assert e["caller"] in doc["services"] and e["callee"] in doc["services"]
        assert e["rps"] is None or (isinstance(e["rps"], float) and e["rps"] > 0)
        assert set(e) <= {
            "caller",
            "callee",
            "rps",
            "calls_per_request",
            "latency_mean_ms",
            "latency_p50_ms",
            "latency_p95_ms",
            "latency_p99_ms",
            "error_rate",
            "parallel",
        }


@pytest.mark.parametrize(
    "source, n_services, n_edges, has_rates",
    [
        (RELEASE, 12, 16, False),
        (FIX / "online-boutique-manifests", 12, 16, False),
        (SPANS_DIR, 10, 13, True),
        (ALIBABA_2021, 100, 140, True),
        (ALIBABA_CASPER_2021, 133, 188, True),
        (ALIBABA_2022, 224, 244, True),
    ],
    ids=["manifest-file", "manifest-dir", "spans-dir", "alibaba-2021", "alibaba-casper-2021", "alibaba-2022"],
)
def test_graph_json_prints_only_the_graph_on_stdout_for_every_source_kind(source, n_services, n_edges, has_rates):
    p = run("graph", source, "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    check_shape(doc)
    assert len(doc["services"]) == n_services
    assert len(doc["edges"]) == n_edges
    assert all((e["rps"] is not None) == has_rates for e in doc["edges"])


def test_warnings_go_to_stderr_and_leave_stdout_pure_json():
    p = run("graph", RELEASE, "--json")
    json.loads(p.stdout)
    assert "shoppingassistantservice" in p.stderr and "warning" in p.stderr
    assert "shoppingassistantservice" not in p.stdout


def test_manifests_and_spans_together_give_declared_edges_with_observed_rates():
    p = run("graph", RELEASE, SPANS_DIR, "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    edges = {(e["caller"], e["callee"]): e for e in doc["edges"]}
    assert len(edges) == 16
    assert edges[("frontend", "checkoutservice")]["rps"] > 0
    assert edges[("checkoutservice", "currencyservice")]["rps"] is None, "declared, never observed"
    assert edges[("loadgenerator", "frontend")]["rps"] is None


def test_format_forces_the_reader_instead_of_detection(tmp_path):
    forced = run("graph", ALIBABA_2021, "--json", "--format", "alibaba")
    assert forced.returncode == 0
    assert json.loads(forced.stdout) == json.loads(run("graph", ALIBABA_2021, "--json").stdout)
    # A table with both header sets is detected as spans; --format alibaba reads it as a call-graph table.
    both = tmp_path / "both.csv"
    both.write_text(
        "TraceID,SpanID,ParentID,PodName,StartTimeUnixNano,EndTimeUnixNano,timestamp,um,dm,rt\n"
        "t,a,root,web-abc12-x1,0,1000,0,web,db,2\n"
        "t,b,a,db-def34-y2,0,500,1000,web,db,4\n"
    )
    as_spans = json.loads(run("graph", both, "--json").stdout)
    as_alibaba = json.loads(run("graph", both, "--json", "--format", "alibaba").stdout)
    assert as_spans["edges"][0]["calls_per_request"] == 1.0
    assert "calls_per_request" not in as_alibaba["edges"][0]
    assert as_alibaba["edges"][0]["rps"] == 2.0 and as_alibaba["edges"][0]["latency_mean_ms"] == 3.0


def test_forcing_the_wrong_format_is_a_one_line_error_with_exit_code_2():
    p = run("graph", ALIBABA_2021, "--json", "--format", "spans")
    assert p.returncode == 2
    assert p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Callgraph.csv:1: missing column(s) TraceID" in lines[0]


@pytest.mark.parametrize(
    "make_source, expected",
    [
        (lambda d: d / "missing.yaml", "missing.yaml: no such file or directory"),
        (lambda d: NASA, "nasa_requests_per_minute.csv: unknown format"),
        (
            lambda d: (d / "bad.yaml").write_text("kind: Deployment\nmetadata: {name: x\n") and d / "bad.yaml",
            "bad.yaml:3: invalid YAML",
        ),
        (
            lambda d: (
                (d / "t.csv").write_text(
                    "TraceID,SpanID,ParentID,PodName,StartTimeUnixNano,EndTimeUnixNano\n"
                    "t,a,root,web-a-b,0,1\nt,b,a,db-c-d,x,1\n"
                )
                and d / "t.csv"
            ),
            "t.csv:3: StartTimeUnixNano: not an integer: 'x'",
        ),
    ],
    ids=["missing-file", "unknown-format", "malformed-yaml", "malformed-span-row"],
)
def test_bad_input_exits_2_with_one_line_on_stderr(tmp_path, make_source, expected):
    p = run("graph", make_source(tmp_path), "--json")
    assert p.returncode == 2
    assert p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("hrl-policy graph: error: ") and expected in lines[0]


def test_without_json_a_readable_table_is_printed():
    p = run("graph", SPANS_DIR)
    assert p.returncode == 0
    header = p.stdout.splitlines()[0].split()
    assert header[:3] == ["caller", "callee", "rps"]
    assert "frontend" in p.stdout and "10 services, 13 edges" in p.stdout


def test_help_lists_every_registered_subcommand():
    from policy.cli.core import SUBCOMMANDS

    p = run("--help")
    assert p.returncode == 0
    assert "graph" in p.stdout
    for cmd in SUBCOMMANDS:
        assert cmd.path[0] in p.stdout
    g = run("graph", "--help")
    assert "--json" in g.stdout and "--format" in g.stdout


def test_no_subcommand_prints_help_and_exits_2():
    p = run()
    assert p.returncode == 2
    assert "graph" in p.stderr


def test_the_cli_imports_neither_torch_nor_the_topology_readers_until_a_command_needs_them():
    code = (
        "import sys\n"
        "import policy.cli as cli\n"
        "assert 'policy.topology.sources' not in sys.modules and 'numpy' not in sys.modules, sorted(sys.modules)\n"
        f"rc = cli.main(['graph', {str(SPANS_DIR)!r}, '--json'])\n"
        "assert rc == 0\n"
        "assert 'torch' not in sys.modules\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 0, p.stderr


def test_main_returns_the_exit_code_in_process(capsys):
    from policy.cli.core import main

    assert main(["graph", str(ALIBABA_2022), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    check_shape(doc)
    assert main(["graph", str(NASA)]) == 2
    assert "unknown format" in capsys.readouterr().err


@pytest.mark.parametrize(
    "source, kind",
    [
        (RELEASE, "manifests"),
        (FIX / "online-boutique-manifests", "manifests"),
        (SPANS_DIR, "spans"),
        (SPANS_DIR / "backend-spans.csv", "spans"),
        (ALIBABA_2021, "alibaba"),
        (FIX / "alibaba/v2022-casper", "alibaba"),
    ],
)
def test_the_source_kind_is_detected_for_files_and_directories(source, kind):
    from policy.topology.sources import detect_format

    assert detect_format(source) == kind


def test_detection_reads_the_content_not_the_file_name(tmp_path):
    from policy.topology.sources import detect_format

    spans = tmp_path / "spans.yaml"
    spans.write_bytes((SPANS_DIR / "frontend-spans.csv").read_bytes())
    manifest = tmp_path / "app.txt"
    manifest.write_bytes(RELEASE.read_bytes())
    assert detect_format(spans) == "spans"
    assert detect_format(manifest) == "manifests"
