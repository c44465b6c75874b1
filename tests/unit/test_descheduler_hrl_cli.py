"""``hrl-descheduler`` with the hierarchical planner: configuration, learned bundles that are missing, and the
planner state in the state file."""

from __future__ import annotations

import json
from pathlib import Path

from descheduler.__main__ import main

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "descheduler" / "cluster-list.json"
HEAD = "apiVersion: hrl-scheduler.io/v1alpha1\nkind: DeschedulerConfiguration\n"


def run(capsys, tmp_path: Path, body: str, *extra: str) -> tuple[int, str, str]:
    cfg = tmp_path / "d.yaml"
    cfg.write_text(HEAD + body)
    rc = main(["--config", str(cfg), "--snapshot", str(FIXTURE), "--once", "--json", *extra])
    out, err = capsys.readouterr()
    return rc, out, err


def test_a_snapshot_run_of_the_hierarchical_planner_reports_its_intent_and_writes_no_state(capsys, tmp_path):
    state = tmp_path / "state.json"
    rc, out, err = run(capsys, tmp_path, f"planner: {{name: hierarchical}}\nstateFile: {state}\n")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["planner"] == "hierarchical" and doc["dry_run"] is True
    assert len(doc["intent"]) == 2 and doc["intent_names"] == ["locality_weight", "balance_weight"]
    assert doc["scaling"] == [] and set(doc["scale_counts"]) >= {"scaled", "refused_hpa"}
    assert not state.exists()  # a dry run changes nothing, the planner state included


def test_a_missing_learned_bundle_is_a_configuration_error_naming_the_path(capsys, tmp_path):
    rc, _out, err = run(
        capsys, tmp_path, f"planner: {{name: hierarchical, autoscaler: {{name: drpc, bundle: {tmp_path / 'nope'}}}}}\n"
    )
    # a path the user wrote: the line names the field, and `make train` (which builds the defaults) is no advice
    assert rc == 2 and str(tmp_path / "nope") in err and "planner.autoscaler.bundle: " in err
    assert "make train" not in err
    rc, _out, err = run(capsys, tmp_path, f"placement: {{name: learned, bundle: {tmp_path / 'low'}}}\n")
    assert rc == 2 and str(tmp_path / "low") in err


def test_a_malformed_planner_state_is_dropped_with_one_warning_and_the_cycle_runs(capsys, tmp_path):
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"version": 1, "evictions": [], "planner": {"version": 99}}))
    rc, out, err = run(capsys, tmp_path, f"planner: {{name: hierarchical}}\nstateFile: {state}\n")
    assert rc == 0 and json.loads(out)["planner"] == "hierarchical"
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "planner state: version" in warnings[0] and str(state) in warnings[0]
