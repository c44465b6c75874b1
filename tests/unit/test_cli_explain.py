"""``hrl-policy explain`` as a user runs it: one pod against a snapshot, every candidate's score as named
contributions that sum to it (exact for the heuristic, integrated gradients for the learned network), the
filtered nodes with why, and one-line errors for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from policy.cli import main

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = ROOT / "tests" / "fixtures" / "descheduler" / "cluster-list.json"
GRAPH = ROOT / "policy" / "data" / "apps" / "online-boutique" / "kubernetes-manifests.yaml"
CHECKOUT = "boutique/checkoutservice-7f5c9d6b8d-q7rtz"


def explain(capsys, *extra: str) -> tuple[int, str, str]:
    rc = main(["explain", "--snapshot", str(SNAPSHOT), "--graph", str(GRAPH), *extra])
    out, err = capsys.readouterr()
    return rc, out, err


def test_the_heuristic_scores_decompose_exactly_into_the_callers_and_callees_on_each_node(capsys):
    rc, out, _ = explain(capsys, "--pod", CHECKOUT, "--policy", "topology-heuristic", "--json")
    assert rc == 0
    doc = json.loads(out)
    assert doc["method"] == "exact" and doc["pod"] == CHECKOUT
    assert {n["node"] for n in doc["nodes"]} == {"hrl-worker", "hrl-worker2", "hrl-worker3"}
    assert doc["filtered"] == {
        "hrl-control-plane": "untolerated taint node-role.kubernetes.io/control-plane=:NoSchedule"
    }
    for n in doc["nodes"]:
        assert sum(c["points"] for c in n["contributions"]) == pytest.approx(n["score"], abs=1e-5)
    best = max(doc["nodes"], key=lambda n: n["score"])
    assert best["score"] > 0
    names = {(c["factor"], c.get("service")) for c in best["contributions"]}
    assert ("callers_on_node", "frontend") in names  # checkout's caller runs there


def test_by_default_the_served_ensemble_is_explained_as_one_term_with_a_note(capsys):
    rc, out, _ = explain(capsys, "--pod", CHECKOUT, "--json")
    assert rc == 0
    doc = json.loads(out)
    assert doc["method"] == "none" and "an ensemble of 3 placement networks" in doc["notes"][0]
    for n in doc["nodes"]:
        assert [c["factor"] for c in n["contributions"]] == ["score"] and n["served"] == round(n["score"])


def test_the_learned_scores_are_attributed_by_integrated_gradients_that_sum_to_each_score(capsys):
    member = ("--bundle", "policy/bundles/hrl-scheduler/low")
    rc, out, _ = explain(capsys, "--pod", CHECKOUT, "--json", *member)
    assert rc == 0
    doc = json.loads(out)
    assert doc["method"] == "integrated-gradients" and doc["max_integration_error_points"] < 1e-3
    for n in doc["nodes"]:
        assert sum(c["points"] for c in n["contributions"]) == pytest.approx(n["score"], abs=1e-3)
        assert any(c["factor"] == "reference" for c in n["contributions"])
    rc, table, _ = explain(capsys, "--pod", CHECKOUT, "--top", "2", *member)
    assert rc == 0 and "top contributions" in table and "integration error at most" in table
    assert "filtered out (1): hrl-control-plane" in table


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--pod", "boutique/nope"), "--pod: 'boutique/nope' is not in"),
        (("--pod", CHECKOUT, "--nodes", "hrl-worker,mars"), "--nodes: not in the snapshot: mars"),
        (("--pod", CHECKOUT, "--intent", "1,x"), "--intent: expected LOCALITY,BALANCE"),
        (("--pod", CHECKOUT, "--top", "0"), "--top: must be >= 1"),
        (
            ("--pod", CHECKOUT, "--policy", "topology-heuristic", "--bundle", "b"),
            "--bundle: only with --policy learned",
        ),
    ],
)
def test_bad_input_is_refused_with_one_line_naming_the_option(capsys, extra, message):
    rc, out, err = explain(capsys, *extra)
    assert rc == 2 and out == ""
    (line,) = [x for x in err.splitlines() if "error" in x]
    assert message in line
