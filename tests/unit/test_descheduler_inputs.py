"""Malformed inputs of ``hrl-descheduler`` (and the shared snapshot reader): snapshots that are not a Kubernetes
List, files that are not UTF-8, a state file with an old or bad planner state, and huge periods. Each ends in
one line on stderr naming the file (or flag), never a traceback, and never in an empty cluster."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from descheduler.__main__ import main
from descheduler.guards import EvictionHistory, HistoryError
from descheduler.snapshot import load_snapshot_file
from policy.highlevel import HrlState
from policy.observe import ObjectError, load_snapshot_objects, snapshot_from_objects, snapshot_warnings

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "descheduler" / "cluster-list.json"
HEAD = "apiVersion: hrl-scheduler.io/v1alpha1\nkind: DeschedulerConfiguration\n"


def cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "descheduler", *argv], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


# ---- M7: the snapshot must be a Kubernetes List ------------------------------------------------------------

NOT_A_LIST = [
    ("null.json", "null", "got null"),
    ("array.json", "[]", "got list"),
    ("object.json", "{}", "without kind and no items"),
    ("items5.json", '{"kind": "List", "items": 5}', "items 5"),
    ("items-null.json", '{"kind": "List", "items": [null]}', "items[0]: expected a Kubernetes object, got null"),
    ("items-int.json", '{"kind": "List", "items": [5]}', "items[0]: expected a Kubernetes object, got int"),
    (
        "kindless.json",
        '{"kind": "List", "items": [{"metadata": {"name": "n"}}]}',
        "items[0]: expected a Kubernetes object with a kind",
    ),
    ("node.json", '{"kind": "Node", "metadata": {"name": "n"}}', "got kind 'Node' and no items"),
    ("empty.json", "", "invalid JSON"),
    ("empty.yaml", "", "got an empty file"),
    ("null.yaml", "null\n", "got null"),
    ("scalar.yaml", "hello\n", "got str"),
    ("two.yaml", "kind: List\nitems: []\n---\nkind: Pod\nmetadata: {name: p}\n", "document 2"),
]


@pytest.mark.parametrize("name,content,says", NOT_A_LIST, ids=[c[0] for c in NOT_A_LIST])
def test_anything_but_a_kubernetes_list_is_an_error_naming_the_file(tmp_path, name, content, says):
    f = tmp_path / name
    f.write_text(content)
    with pytest.raises(ObjectError) as ei:
        load_snapshot_objects(f)
    assert str(f) in str(ei.value) and says in str(ei.value) and len(str(ei.value).splitlines()) == 1


def test_an_empty_directory_is_an_error_not_an_empty_cluster(tmp_path):
    (tmp_path / "notes.txt").write_text("not a snapshot")
    with pytest.raises(ObjectError, match="directory holds no"):
        load_snapshot_objects(tmp_path)


@pytest.mark.parametrize(
    "content,kinds",
    [
        ('{"kind": "List", "items": []}', []),
        ('{"items": [{"kind": "Node", "metadata": {"name": "n"}}]}', ["Node"]),
        ('{"kind": "NodeList", "items": [{"metadata": {"name": "n"}}]}', ["Node"]),
        ('{"kind": "List", "items": [{"kind": "PodList", "items": [{"metadata": {"name": "p"}}]}]}', ["Pod"]),
    ],
    ids=["empty-items", "kindless-list", "typed-list", "nested"],
)
def test_lists_are_read_and_an_empty_items_list_is_an_empty_cluster(tmp_path, content, kinds):
    f = tmp_path / "s.json"
    f.write_text(content)
    assert [o["kind"] for o in load_snapshot_objects(f)] == kinds


def test_a_directory_of_list_files_is_read_in_order(tmp_path):
    (tmp_path / "a.yaml").write_text("kind: NodeList\nitems: [{metadata: {name: n1}}]\n")
    (tmp_path / "b.json").write_text('{"kind": "List", "items": [{"kind": "Node", "metadata": {"name": "n2"}}]}')
    assert [o["metadata"]["name"] for o in load_snapshot_objects(tmp_path)] == ["n1", "n2"]


def test_the_fixture_still_loads():
    assert len(load_snapshot_file(FIXTURE).nodes) == 4


def _with(doc: dict, extra_items: list) -> dict:
    return {**doc, "items": [*doc["items"], *extra_items]}


def test_dangling_bindings_and_duplicate_pods_are_counted_warnings_not_errors(tmp_path):
    doc = json.loads(FIXTURE.read_text())
    pods = [i for i in doc["items"] if i["kind"] == "Pod"]
    ghost = json.loads(json.dumps(pods[0]))
    ghost["metadata"]["name"] = "ghost"
    ghost["spec"]["nodeName"] = "no-such-node"
    f = tmp_path / "s.json"
    f.write_text(json.dumps(_with(doc, [pods[0], pods[1], ghost])))
    got: list[str] = []
    snap = load_snapshot_file(f, warn=got.append)
    assert len(snap.pods) == 16  # read as written: nothing dropped, nothing failed
    assert len(got) == 2 and all(line.startswith(str(f)) for line in got)
    assert "1 pod(s) bound to nodes not in the snapshot" in got[0] and "on no-such-node" in got[0]
    assert "2 duplicate pod(s)" in got[1] and pods[0]["metadata"]["name"] in got[1]
    assert snapshot_warnings(snapshot_from_objects(load_snapshot_objects(FIXTURE))) == []


# ---- M4: files that are not UTF-8 ---------------------------------------------------------------------------


def test_a_snapshot_that_is_not_utf8_names_the_file_and_the_position(tmp_path):
    f = tmp_path / "s.json"
    f.write_bytes(b'{"kind": "List",\n "items": [\xff]}')
    with pytest.raises(ObjectError) as ei:
        load_snapshot_objects(f)
    assert str(ei.value) == f"{f}: not UTF-8 text: byte 0xff at line 2, column 12 (offset 28)"


def test_a_state_file_that_is_not_utf8_fails_closed_naming_the_file(tmp_path):
    f = tmp_path / "state.json"
    f.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(HistoryError) as ei:
        EvictionHistory.load(f)
    assert str(f) in str(ei.value) and "not UTF-8" in str(ei.value)


# ---- M5 / M3: the planner state ----------------------------------------------------------------------------

GOOD_STATE = HrlState(rate_times_s=[1.0], rates_rps={"a": [2.0]}, last_intent=(1.0, 1.0)).to_json()

BAD_STATES = [
    ({"intent": [1]}, "unknown field(s) intent"),
    ({"last_intent": [1]}, "last_intent: expected 2 weights"),
    ({"last_intent": [1, 2, 3]}, "last_intent: expected 2 weights"),
    ({"last_intent": [1, -1]}, "last_intent: expected weights >= 0"),
    ({"last_intent": "ab"}, "last_intent: expected 2 weights"),
    ({"last_intent": [True, 1]}, "last_intent[0]: expected a number"),
    ({"rates_rps": ["a"]}, "rates_rps: expected an object"),
    ({"rates_rps": {"a": "zz"}}, "rates_rps.a: expected a list"),
    ({"rate_times_s": 5}, "rate_times_s: expected a list"),
    ({"recommendations": {"a": 5}}, "recommendations.a: expected a list"),
    ({"autoscaler": 5}, "autoscaler: expected an object"),
    ({"autoscaler": {"drpc": {"history": {}}}}, "drpc state.version: expected 1, got None"),
    ({"autoscaler": {"drpc": {"version": 1, "history": "zz"}}}, "drpc state: malformed"),
    ({"autoscaler": {"drpc": {"version": 1, "history": {"a": [-1]}}}}, "drpc state.history.a[0]"),
]


@pytest.mark.parametrize("change,says", BAD_STATES, ids=[s for _c, s in BAD_STATES])
def test_a_bad_planner_state_is_refused_with_one_line_naming_the_field(change, says):
    with pytest.raises(ValueError) as ei:
        HrlState.from_json({**GOOD_STATE, **change})
    assert says in str(ei.value) and len(str(ei.value).splitlines()) == 1


def test_a_good_planner_state_round_trips_with_an_opaque_and_a_drpc_autoscaler_section():
    doc = {
        **GOOD_STATE,
        "autoscaler": {
            "drpc": {"version": 1, "history": {"a/b": [1.0]}, "last_s": 5.0, "last_scale_s": {}},
            "other": {"anything": [1]},
        },
    }
    st = HrlState.from_json(doc)
    assert st.last_intent == (1.0, 1.0) and st.to_json() == doc


def write_state(tmp_path: Path, planner: object, evictions: object = ()) -> Path:
    f = tmp_path / "state.json"
    f.write_text(json.dumps({"version": 1, "evictions": list(evictions), "planner": planner}))
    return f


@pytest.mark.parametrize(
    "planner",
    [
        {"version": 1, "autoscaler": {"drpc": {"history": {}}}},  # an older DRPC layout: no version
        {"version": 1, "intent": [1]},
        "x",
    ],
    ids=["drpc-without-version", "intent-one", "not-an-object"],
)
def test_hierarchical_drpc_drops_an_unreadable_planner_state_with_one_warning_and_runs(capsys, tmp_path, planner):
    state = write_state(tmp_path, planner)
    cfg = tmp_path / "d.yaml"
    cfg.write_text(HEAD + f"stateFile: {state}\nplanner: {{name: hierarchical, autoscaler: {{name: drpc}}}}\n")
    rc, out, err = run(capsys, "--config", str(cfg), "--snapshot", str(FIXTURE), "--dry-run", "--once", "--json")
    assert rc == 0 and json.loads(out)["planner"] == "hierarchical"
    # besides the two lines saying the live inputs are off (no metricsSources), exactly one warning
    lines = [x for x in err.strip().splitlines() if not ("live input " in x and ": off (" in x)]
    assert len(lines) == 1 and "warning" in lines[0] and str(state) in lines[0] and "planner state" in lines[0]


def test_a_dropped_planner_state_is_replaced_by_the_next_live_save(tmp_path):
    from descheduler.config import load_descheduler_config, planner_from_config

    state = write_state(
        tmp_path, {"version": 1, "intent": [1]}, [{"workload": "ns/Deployment/a", "node": "n1", "at_s": 5.0}]
    )
    history = EvictionHistory.load(state)
    planner = planner_from_config(
        load_descheduler_config(
            {
                "apiVersion": "hrl-scheduler.io/v1alpha1",
                "kind": "DeschedulerConfiguration",
                "planner": {"name": "hierarchical"},
            }
        )
    )
    with pytest.raises(ValueError):
        planner.load_state(history.sections["planner"])
    history.sections.pop("planner")  # what the command does after the warning
    history.set_section("planner", planner.dump_state())
    saved = json.loads(state.read_text())
    assert saved["evictions"][0]["node"] == "n1" and HrlState.from_json(saved["planner"]).last_intent is None


def test_a_corrupt_eviction_history_still_fails_closed_with_exit_1(capsys, tmp_path):
    state = write_state(tmp_path, {"version": 1}, [{"x": 1}])
    cfg = tmp_path / "d.yaml"
    cfg.write_text(HEAD + f"stateFile: {state}\nplanner: {{name: hierarchical}}\n")
    rc, out, err = run(capsys, "--config", str(cfg), "--snapshot", str(FIXTURE), "--dry-run", "--once", "--json")
    assert rc == 1 and out == "" and len(err.strip().splitlines()) == 1 and "evictions[0]" in err


# ---- the real command, as a subprocess --------------------------------------------------------------------


def test_cli_a_binary_config_exits_2_with_one_line(tmp_path):
    f = tmp_path / "x.yaml"
    f.write_bytes(b"\xff\xfe\x00")
    p = cli("--config", str(f), "--snapshot", str(FIXTURE), "--dry-run")
    assert p.returncode == 2 and p.stdout == ""
    assert len(p.stderr.strip().splitlines()) == 1 and str(f) in p.stderr and "not UTF-8" in p.stderr


def test_cli_a_nan_intent_for_the_hierarchical_planner_exits_2_with_one_line(tmp_path):
    f = tmp_path / "d.yaml"
    f.write_text(HEAD + "planner: {name: hierarchical, intent: [.nan, 1]}\n")
    p = cli("--config", str(f), "--snapshot", str(FIXTURE), "--dry-run")
    assert p.returncode == 2 and p.stdout == "" and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "planner.intent[0]" in p.stderr and "nan" in p.stderr


@pytest.mark.parametrize("content", ["null", "{}", "[]", '{"kind":"List","items":5}'])
def test_cli_a_malformed_snapshot_is_one_line_naming_the_file_not_an_empty_cluster(tmp_path, content):
    f = tmp_path / "s.json"
    f.write_text(content)
    p = cli("--snapshot", str(f), "--dry-run", "--json")
    assert p.returncode == 2 and p.stdout == "" and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and str(f) in p.stderr


def test_cli_a_huge_interval_is_a_usage_error_not_a_traceback():
    p = cli("--interval", "1e300", "--snapshot", str(FIXTURE))
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert (
        p.stderr.strip()
        .splitlines()[-1]
        .endswith("must be a number of seconds > 0 and <= 31536000 (365 days) (got '1e300')")
    )
