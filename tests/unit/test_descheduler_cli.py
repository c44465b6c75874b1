"""``hrl-descheduler`` on a ``kubectl get nodes,pods,pdb,deployments -A -o json`` dump."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from descheduler.__main__ import main
from descheduler.snapshot import graph_from_annotations, load_snapshot_file
from policy.state import ServiceGraph

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "descheduler" / "cluster-list.json"
ROOT = Path(__file__).resolve().parents[2]
HEAD = "apiVersion: hrl-scheduler.io/v1alpha1\nkind: DeschedulerConfiguration\n"
CHECKOUT = "boutique/checkoutservice-7f5c9d6b8d-q7rtz"
CURRENCY = "boutique/currencyservice-7c8d5f9b6c-h9zdx"
# The fixture's pods use the default scheduler: these tests read it as a drop-in install (the default profile
# calls the extender), so kube-scheduler's predicted placement follows the extender's locality scores.
DROPIN = "schedulerPrediction: {extenderSchedulers: [default-scheduler]}\n"
# The dump has no CPU use and no call rates: the move cost model cannot price an eviction and blocks it (fail closed,
# its own test below); these tests read the loop's mechanics, so they turn it off.
DROPIN += "moves: {costModel: {enabled: false}}\n"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def write_config(tmp_path: Path, body: str) -> str:
    f = tmp_path / "descheduler.yaml"
    f.write_text(HEAD + body)
    return str(f)


def test_the_fixture_is_a_kubectl_list_with_nodes_pods_pdbs_and_a_declared_graph():
    doc = json.loads(FIXTURE.read_text())
    assert doc["kind"] == "List" and {i["kind"] for i in doc["items"]} == {"Node", "Pod", "PodDisruptionBudget"}
    snap = load_snapshot_file(FIXTURE)
    assert len(snap.nodes) == 4 and len(snap.pods) == 13 and len(snap.pdbs) == 1
    g = graph_from_annotations(snap)
    assert g.edge("frontend", "cartservice") is not None and g.edge("cartservice", "redis-cart") is not None


def test_without_measured_cpu_use_and_call_rates_no_eviction_is_made_by_default(capsys, tmp_path):
    cfg = write_config(tmp_path, "schedulerPrediction: {extenderSchedulers: [default-scheduler]}\n")
    rc, out, _err = run(capsys, "--config", cfg, "--once", "--dry-run", "--snapshot", str(FIXTURE), "--json")
    doc = json.loads(out)
    by_pod = {r["pod"]: r for r in doc["results"]}
    assert rc == 0 and by_pod[CHECKOUT]["outcome"] == "blocked"
    assert [b["guard"] for b in by_pod[CHECKOUT]["blockers"]] == ["cost"] and "cannot be priced" in by_pod[CHECKOUT][
        "message"
    ]
    assert by_pod[CHECKOUT]["fallback"] == "no_mover"  # a snapshot has no cluster to scale: the eviction path
    assert doc["move_counts"]["refused_by_reason"]["cost"] >= 1


def test_json_output_is_only_the_cycle_report_of_a_dry_run(capsys, tmp_path):
    cfg = write_config(tmp_path, DROPIN)
    rc, out, err = run(capsys, "--config", cfg, "--once", "--dry-run", "--snapshot", str(FIXTURE), "--json")
    # stderr: only the two lines saying the live inputs are off (no metricsSources configured)
    assert rc == 0 and [line.split(": off")[0].rsplit(" ", 1)[-1] for line in err.splitlines()] == [
        "resource_usage",
        "service_signals",
    ]
    doc = json.loads(out)
    assert doc["dry_run"] is True and doc["evictions"] == 0 and doc["nodes"] == 4
    assert [(i["input"], i["state"], i["usable"]) for i in doc["inputs"]] == [
        ("resource_usage", "off", False),
        ("service_signals", "off", False),
    ]
    assert doc["inputs_withheld"] == {"moves": False, "resizes": 0}
    by_pod = {r["pod"]: r for r in doc["results"]}
    assert by_pod[CHECKOUT]["outcome"] == "dry_run" and by_pod[CHECKOUT]["reason"] == "locality"
    assert by_pod[CHECKOUT]["to_node"] == "hrl-worker"
    assert [b["guard"] for b in by_pod[CURRENCY]["blockers"]] == ["pdb"]
    # kube-system, DaemonSet, mirror, bare and local-storage pods are never even planned
    assert all(r["pod"].startswith("boutique/") for r in doc["results"])
    assert not any(r["pod"].startswith("boutique/redis-cart") for r in doc["results"])


def test_snapshot_without_dry_run_implies_it_with_a_note_on_stderr(capsys):
    rc, out, err = run(capsys, "--snapshot", str(FIXTURE), "--json")
    assert rc == 0 and json.loads(out)["dry_run"] is True
    assert "implies --dry-run" in err


def test_the_readable_report_is_a_table_of_moves_and_outcomes(capsys, tmp_path):
    rc, out, _ = run(
        capsys, "--config", write_config(tmp_path, DROPIN), "--once", "--dry-run", "--snapshot", str(FIXTURE)
    )
    assert rc == 0
    assert "dry run" in out.splitlines()[0] and CHECKOUT in out and "PodDisruptionBudget" in out


def test_without_a_snapshot_an_unloadable_kubeconfig_exits_2_with_one_line(capsys, tmp_path):
    rc, out, err = run(capsys, "--once", "--kubeconfig", str(tmp_path / "missing.kubeconfig"))
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "--kubeconfig" in err


def test_a_snapshot_and_a_kubeconfig_together_exit_2(capsys, tmp_path):
    rc, out, err = run(capsys, "--once", "--snapshot", str(FIXTURE), "--kubeconfig", str(tmp_path / "k"))
    assert rc == 2 and out == "" and "exclusive" in err


def test_a_bad_configuration_exits_2_naming_the_field(capsys, tmp_path):
    rc, _, err = run(capsys, "--config", write_config(tmp_path, "caps: {total: -3}\n"), "--snapshot", str(FIXTURE))
    assert rc == 2 and "caps.total" in err


def test_an_unreadable_snapshot_exits_2_with_one_line(capsys, tmp_path):
    # issue 13: a malformed snapshot file is bad input (exit 2), as a bad configuration is
    bad = tmp_path / "dump.json"
    bad.write_text('{"kind": "List", "items": [{"kind": "Pod", "metadata": {}}]}')
    rc, out, err = run(capsys, "--snapshot", str(bad), "--dry-run", "--json")
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1 and "metadata.name" in err


def test_configured_caps_apply_to_the_dry_run(capsys, tmp_path):
    cfg = write_config(tmp_path, "caps: {total: 0}\n")
    rc, out, _ = run(capsys, "--config", cfg, "--snapshot", str(FIXTURE), "--dry-run", "--json")
    doc = json.loads(out)
    assert doc["counts"]["dry_run"] == 0
    assert all("cap_total" in [b["guard"] for b in r["blockers"]] for r in doc["results"])


def test_metrics_go_to_the_textfile_and_the_state_file_is_left_alone(capsys, tmp_path):
    prom = tmp_path / "hrl.prom"
    state = tmp_path / "history.json"
    cfg = write_config(tmp_path, f"metrics: {{textfile: {prom}}}\nstateFile: {state}\n" + DROPIN)
    rc, _, _ = run(capsys, "--config", cfg, "--snapshot", str(FIXTURE), "--dry-run", "--json")
    assert rc == 0
    text = prom.read_text()
    assert 'hrl_descheduler_evictions_total{dry_run="true",outcome="dry_run"} 1.0' in text
    assert 'hrl_descheduler_blocked_total{dry_run="true",guard="pdb"} 1.0' in text
    assert not state.exists()


def test_topology_sources_replace_the_annotations_and_their_warnings_reach_stderr(capsys, tmp_path, monkeypatch):
    import descheduler.snapshot

    seen = {}

    def load_graph(paths):
        seen["paths"] = paths
        return ServiceGraph.build(["frontend"], []), ["host 'x:1' is not a Service; no edge"]

    monkeypatch.setattr(descheduler.snapshot, "load_graph", load_graph)
    cfg = write_config(tmp_path, "topology: {sources: [manifests/]}\n")
    rc, out, err = run(capsys, "--config", cfg, "--snapshot", str(FIXTURE), "--dry-run", "--json")
    assert rc == 0 and seen["paths"] == ["manifests/"]
    doc = json.loads(out)
    assert doc["planned_moves"] == []  # the graph from the sources has no edges
    assert "is not a Service" in err and doc["warnings"] == ["host 'x:1' is not a Service; no edge"]


def test_a_non_positive_interval_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--interval", "0", "--snapshot", str(FIXTURE)])
    assert exc.value.code == 2


def test_the_module_runs_as_a_program_and_keeps_stdout_pure_json():
    proc = subprocess.run(
        [sys.executable, "-m", "descheduler", "--once", "--snapshot", str(FIXTURE), "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["planner"] == "rebalance-heuristic"
    assert "implies --dry-run" in proc.stderr
