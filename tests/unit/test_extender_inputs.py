"""Malformed inputs of ``hrl-extender``: a configuration that is not UTF-8, huge periods, a bundle next to the
heuristic, and snapshots that are not a Kubernetes List. Each is refused before serving with exit 2 and one
line on stderr (one JSON record under --log-format json); none starts a server on an empty cluster."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from extender.store import SnapshotStore
from policy.observe import ObjectError

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "extender" / "cluster-list.json"
HEAD = "apiVersion: hrl-scheduler.io/v1alpha1\nkind: ExtenderConfiguration\n"


def cli(*argv: str) -> subprocess.CompletedProcess:
    # every case fails before the server starts; --port 0 keeps a regression from colliding on 8888
    return subprocess.run(
        [sys.executable, "-m", "extender", "--port", "0", *argv], capture_output=True, text=True, cwd=ROOT, timeout=30
    )


def one_line_exit_2(p: subprocess.CompletedProcess) -> str:
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    return lines[0]


@pytest.mark.parametrize(
    "content", [b"\xff\xfe\x00", (HEAD + "# caf\xe9\n").encode("latin-1")], ids=["binary", "latin-1"]
)
def test_cli_a_config_that_is_not_utf8_exits_2_with_one_line_naming_the_file(tmp_path, content):
    f = tmp_path / "x.yaml"
    f.write_bytes(content)
    line = one_line_exit_2(cli("--config", str(f)))
    assert str(f) in line and "not UTF-8" in line and "line " in line


@pytest.mark.parametrize(
    "body,path",
    [
        ("policy: {name: learned, embeddingRefreshSeconds: 1.0e+300}\n", "policy.embeddingRefreshSeconds"),
        ("cache: {address: '127.0.0.1:1', refreshSeconds: 1.0e+300}\n", "cache.refreshSeconds"),
        ("policy: {name: topology-heuristic, bundle: /nope}\n", "policy"),
    ],
    ids=["embedding-refresh", "cache-refresh", "bundle-with-heuristic"],
)
def test_cli_config_values_that_broke_threads_or_were_ignored_exit_2(tmp_path, body, path):
    f = tmp_path / "e.yaml"
    f.write_text(HEAD + body)
    line = one_line_exit_2(cli("--config", str(f)))
    assert f"{f}: {path}:" in line


@pytest.mark.parametrize("content", ["null", "{}", "[]", '{"kind":"List","items":5}'])
def test_cli_a_snapshot_that_is_not_a_list_exits_2_instead_of_serving_an_empty_cluster(tmp_path, content):
    f = tmp_path / "s.json"
    f.write_text(content)
    line = one_line_exit_2(cli("--snapshot", str(f)))
    assert line.startswith("hrl-extender: error: --snapshot: ") and str(f) in line


def test_cli_an_empty_snapshot_directory_exits_2(tmp_path):
    line = one_line_exit_2(cli("--snapshot", str(tmp_path)))
    assert str(tmp_path) in line and "directory holds no" in line


def test_store_load_file_refuses_a_non_list_and_changes_nothing(tmp_path):
    store = SnapshotStore()
    f = tmp_path / "s.json"
    f.write_text("{}")
    with pytest.raises(ObjectError):
        store.load_file(f)
    assert not store.get().ready


def test_store_load_file_logs_dangling_bindings_and_duplicates_once_each(tmp_path, caplog):
    doc = json.loads(FIXTURE.read_text())
    pod = next(i for i in doc["items"] if i["kind"] == "Pod")
    ghost = json.loads(json.dumps(pod))
    ghost["metadata"]["name"] = "ghost"
    ghost["spec"]["nodeName"] = "no-such-node"
    f = tmp_path / "s.json"
    f.write_text(json.dumps({**doc, "items": [*doc["items"], pod, ghost]}))
    with caplog.at_level(logging.WARNING, logger="extender.store"):
        view = SnapshotStore().load_file(f)
    assert view.ready
    msgs = [r.getMessage() for r in caplog.records if r.name == "extender.store"]
    assert len(msgs) == 2 and all(str(f) in m for m in msgs)
    assert "1 pod(s) bound to nodes not in the snapshot" in msgs[0] and "1 duplicate pod(s)" in msgs[1]


def test_store_load_file_accepts_an_empty_items_list(tmp_path):
    f = tmp_path / "s.json"
    f.write_text('{"kind": "List", "items": []}')
    view = SnapshotStore().load_file(f)
    assert view.ready and view.snapshot.nodes == () and view.snapshot.pods == ()


def one_json_record_exit_2(p: subprocess.CompletedProcess) -> dict:
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    rec = json.loads(lines[0])  # not a plain line
    assert (rec["level"], rec["component"]) == ("ERROR", "hrl-extender") and {"timestamp", "logger"} <= set(rec)
    return rec


def test_cli_start_up_errors_are_json_records_under_log_format_json(tmp_path):
    bad = tmp_path / "e.yaml"
    bad.write_text(HEAD + "policy: {name: topology-heuristic, bundle: /nope}\n")
    snap = tmp_path / "s.json"
    snap.write_text("{}")
    # a configuration problem: FILE: dotted.path: problem, the whole line as the message (as hrl-policy does)
    assert one_json_record_exit_2(cli("--log-format", "json", "--config", str(bad)))["message"].startswith(
        f"{bad}: policy:"
    )
    assert one_json_record_exit_2(cli("--log-format", "json", "--snapshot", str(snap)))["message"].startswith(
        f"--snapshot: {snap}"
    )
    rec = one_json_record_exit_2(cli("--log-format", "json", "--port", "99999"))
    assert rec["message"] == "--port: must be 0..65535, got 99999"
    # argparse's usage errors too, when --log-format json is on the command line (either spelling)
    for flag in (["--log-format", "json"], ["--log-format=json"]):
        rec = one_json_record_exit_2(cli(*flag, "--port", "abc"))
        assert rec["message"] == "argument --port: invalid int value: 'abc'"
    # text: today's lines, unchanged
    assert one_line_exit_2(cli("--port", "99999")) == "hrl-extender: error: --port: must be 0..65535, got 99999"
    usage = cli("--port", "abc")
    assert usage.returncode == 2 and usage.stderr.startswith("usage: hrl-extender")
    assert usage.stderr.splitlines()[-1] == "hrl-extender: error: argument --port: invalid int value: 'abc'"
