"""Malformed snapshot files (issue 13 item 4): each of the four values that raised a traceback, and the other
shapes of their class, is one line naming the file, the object and the field, exit status 2, through the real
command ``hrl-descheduler --once --dry-run --snapshot FILE``; the extender's ``--snapshot`` says the same."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from policy.observe import ObjectError, parse_quantity, snapshot_from_objects

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "descheduler" / "cluster-list.json"
BASE = json.loads(FIXTURE.read_text())


def first(doc: dict, kind: str) -> dict:
    return next(i for i in doc["items"] if i["kind"] == kind)


def deep_annotation(doc: dict) -> None:
    v: dict = {}
    cur = v
    for _ in range(5000):
        cur["a"] = {}
        cur = cur["a"]
    first(doc, "Pod")["metadata"].setdefault("annotations", {})["deep"] = v


def dumps_deep(doc: dict) -> str:
    """json.dumps of a document nested 5,000 deep (the encoder recurses; raise the limit for it only)."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(30_000)
    try:
        return json.dumps(doc)
    finally:
        sys.setrecursionlimit(old)


def setter(kind: str, *path: str, value) -> Callable[[dict], None]:
    def edit(doc: dict) -> None:
        o = first(doc, kind)
        for k in path[:-1]:
            o = o.setdefault(k, {})
        o[path[-1]] = value

    return edit


# (edit, what the one line must name) — the first four are the tracebacks of the issue
CASES = {
    "disruptionsAllowed-lots": (
        setter("PodDisruptionBudget", "status", "disruptionsAllowed", value="lots"),
        "status.disruptionsAllowed: expected an integer, got 'lots'",
    ),
    "cpu-1e400": (
        setter("Node", "status", "allocatable", "cpu", value="1e400"),
        "status.allocatable.cpu: quantity too large '1e400'",
    ),
    "containers-object": (
        setter("Pod", "spec", "containers", value={"name": "c"}),
        "spec.containers: expected a list, got {'name': 'c'}",
    ),
    "annotation-5000-deep": (deep_annotation, "items[4].metadata.annotations.deep"),
    "priority-text": (setter("Pod", "spec", "priority", value="high"), "spec.priority: expected an integer"),
    "priority-float-overflow": (setter("Pod", "spec", "priority", value=1e308), "spec.priority: expected an integer"),
    "nodeName-number": (setter("Pod", "spec", "nodeName", value=["n"]), "spec.nodeName: expected a string"),
    "label-map": (setter("Node", "metadata", "labels", value={"a": {"b": 1}}), "metadata.labels.a: expected a string"),
    "taints-string": (setter("Node", "spec", "taints", value="NoSchedule"), "spec.taints: expected a list"),
    "unschedulable-text": (setter("Node", "spec", "unschedulable", value="false"), "spec.unschedulable"),
    "minAvailable-map": (setter("PodDisruptionBudget", "spec", "minAvailable", value={}), "spec.minAvailable"),
    "selector-expr-list": (
        setter("PodDisruptionBudget", "spec", "selector", value={"matchExpressions": ["x"]}),
        "spec.selector.matchExpressions[0]: expected a map",
    ),
    "quantity-huge-exponent": (
        setter("Node", "status", "allocatable", "memory", value="1e999999999"),
        "status.allocatable.memory: quantity too large",
    ),
    "quantity-nan": (setter("Node", "status", "allocatable", "cpu", value=float("nan")), "invalid quantity"),
    "duplicate-key": (None, "duplicate key"),
}


def snapshot_text(name: str) -> str:
    edit, _ = CASES[name]
    if edit is None:  # a duplicate key cannot be built through json.dumps
        return json.dumps(BASE)[:-1] + ', "kind": "List"}'
    doc = copy.deepcopy(BASE)
    edit(doc)
    return dumps_deep(doc)


@pytest.mark.parametrize("name", list(CASES))
def test_a_malformed_snapshot_value_is_one_line_naming_file_and_field_exit_2(tmp_path, name):
    f = tmp_path / "snapshot.json"
    f.write_text(snapshot_text(name), encoding="utf-8")
    p = subprocess.run(
        [sys.executable, "-m", "descheduler", "--once", "--dry-run", "--snapshot", str(f)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and p.stdout == "" and "Traceback" not in p.stderr, p.stderr[-2000:]
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"hrl-descheduler: {f}") and CASES[name][1] in lines[0], lines


@pytest.mark.parametrize("name", ["disruptionsAllowed-lots", "cpu-1e400", "containers-object", "annotation-5000-deep"])
def test_the_extender_refuses_the_same_snapshots_in_one_line(tmp_path, name):
    f = tmp_path / "snapshot.json"
    f.write_text(snapshot_text(name), encoding="utf-8")
    p = subprocess.run(
        [sys.executable, "-m", "extender", "--snapshot", str(f), "--port", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr[-2000:]
    errors = [x for x in p.stderr.splitlines() if "error" in x]
    assert len(errors) == 1 and str(f) in errors[0] and CASES[name][1] in errors[0], p.stderr


@pytest.mark.parametrize(
    "value,millicores",
    [("100m", 100), ("0.5", 500), ("1e3", 1_000_000), (2, 2000), ("1e-50", 1), (0.25, 250)],
)
def test_valid_quantities_still_parse(value, millicores):
    from policy.observe import parse_cpu_m

    assert parse_cpu_m(value) == millicores


def test_the_quantity_bound_is_the_64_bit_milli_value():
    from policy.observe import MAX_QUANTITY

    assert parse_quantity(str(int(MAX_QUANTITY))) == int(MAX_QUANTITY)
    with pytest.raises(ObjectError, match="too large"):
        parse_quantity(str(int(MAX_QUANTITY) + 1))


def test_a_non_object_item_is_an_error_not_a_crash():
    with pytest.raises(ObjectError, match=r"items\[1\]: expected a Kubernetes object"):
        snapshot_from_objects([first(BASE, "Node"), 5])  # type: ignore[list-item]
