"""Configuration values that used to be accepted and broke the processes later: the intent vector, the
intent policy's ranges, unbounded or non-finite seconds, empty or ignored bundles, and files that are not
UTF-8. Each is refused at load time with one line per problem naming the field and the value."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from descheduler.config import DeschedulerConfiguration, load_descheduler_config
from extender.config import ExtenderConfiguration, load_extender_config
from policy.config import MAX_SECONDS, ConfigError, describe_utf8_error

HEAD = "apiVersion: hrl-scheduler.io/v1alpha1\n"
D = {"apiVersion": "hrl-scheduler.io/v1alpha1", "kind": "DeschedulerConfiguration"}
E = {"apiVersion": "hrl-scheduler.io/v1alpha1", "kind": "ExtenderConfiguration"}


def problems(load, doc: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as ei:
        load(doc)
    return ei.value.problems


# ---- M3: planner.intent and intentPolicy ----------------------------------------------------------------


@pytest.mark.parametrize("name", ["hierarchical", "rebalance-heuristic"])
@pytest.mark.parametrize(
    "intent",
    [
        [float("nan"), 1.0],
        [1.0, float("inf")],
        [1, 2, 3],
        [],
        [1],
        [-5, -1],
        [1, -0.5],
    ],
    ids=["nan", "inf", "three", "empty", "one", "negative", "one-negative"],
)
def test_planner_intent_must_be_two_finite_weights_at_least_zero(name, intent):
    got = problems(load_descheduler_config, {**D, "planner": {"name": name, "intent": intent}})
    assert len(got) == 1 and got[0][0].startswith("planner.intent")
    assert "finite" in got[0][1]


@pytest.mark.parametrize("intent", [[2.0, 0.5], [0, 0], [1, 1]])
def test_a_planner_intent_of_two_weights_at_least_zero_is_kept_as_written(intent):
    cfg = load_descheduler_config({**D, "planner": {"name": "hierarchical", "intent": intent}})
    assert cfg.planner.intent == tuple(float(x) for x in intent)


@pytest.mark.parametrize(
    "ip,field",
    [
        ({"localityMin": 5, "localityMax": 1}, "localityMin (5) must be <= localityMax (1)"),
        ({"balanceMin": 3, "balanceMax": 2}, "balanceMin (3) must be <= balanceMax (2)"),
    ],
)
def test_intent_policy_minimums_may_not_exceed_their_maximums(ip, field):
    got = problems(load_descheduler_config, {**D, "planner": {"name": "hierarchical", "intentPolicy": ip}})
    assert got == [("planner.intentPolicy", field)]


def test_equal_intent_policy_bounds_are_a_constant_weight():
    cfg = load_descheduler_config({**D, "planner": {"intentPolicy": {"localityMin": 1, "localityMax": 1}}})
    assert cfg.planner.intent_policy.locality_min == cfg.planner.intent_policy.locality_max == 1


# ---- M6: every *Seconds field is bounded, every float finite -----------------------------------------------


def seconds_paths(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Alias paths of every field named ``*_seconds`` in ``model`` and its sections."""
    out = []
    for name, f in model.model_fields.items():
        path = (*prefix, f.alias or name)
        if name.endswith("_seconds"):
            out.append(path)
        for a in typing.get_args(f.annotation) or (f.annotation,):
            if isinstance(a, type) and issubclass(a, BaseModel):
                out.extend(seconds_paths(a, path))
    return out


def nested(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {path[-1]: value}
    for part in reversed(path[:-1]):
        doc = {part: doc}
    return doc


REQUIRED = {"cache": {"address": "127.0.0.1:50051"}}  # a section with a required field


def with_required(doc: dict[str, Any]) -> dict[str, Any]:
    if "cache" in doc:
        doc = {**doc, "cache": {**REQUIRED["cache"], **doc["cache"]}}
    return doc


SECONDS_CASES = [(load_extender_config, E, p) for p in seconds_paths(ExtenderConfiguration)] + [
    (load_descheduler_config, D, p) for p in seconds_paths(DeschedulerConfiguration)
]


def test_the_walk_finds_the_seconds_fields_that_killed_threads():
    found = {".".join(p) for _l, _h, p in SECONDS_CASES}
    assert {
        "policy.embeddingRefreshSeconds",
        "cache.refreshSeconds",
        "intervalSeconds",
        "kubernetes.resyncSeconds",
        "leaderElection.leaseDurationSeconds",
    } <= found


@pytest.mark.parametrize("load,head,path", SECONDS_CASES, ids=[".".join(c[2]) for c in SECONDS_CASES])
def test_every_seconds_field_is_at_most_one_year(load, head, path):
    got = problems(load, {**head, **with_required(nested(path, 1e300))})
    assert [p for p, _m in got] == [".".join(path)]
    got = problems(load, {**head, **with_required(nested(path, float(MAX_SECONDS) + 1))})
    assert [p for p, _m in got] == [".".join(path)]


def test_a_year_is_still_a_valid_period():
    cfg = load_descheduler_config({**D, "intervalSeconds": MAX_SECONDS, "cooldownSeconds": MAX_SECONDS})
    assert cfg.interval_seconds == cfg.cooldown_seconds == MAX_SECONDS


@pytest.mark.parametrize(
    "doc,path",
    [
        ({**D, "planner": {"autoscaler": {"tolerance": float("inf")}}}, "planner.autoscaler.tolerance"),
        ({**D, "planner": {"intentPolicy": {"localityMax": float("nan")}}}, "planner.intentPolicy.localityMax"),
        ({**E, "policy": {"targetUtilization": float("nan")}}, "policy.targetUtilization"),
    ],
)
def test_non_finite_numbers_are_refused_everywhere(doc, path):
    load = load_descheduler_config if doc["kind"] == "DeschedulerConfiguration" else load_extender_config
    got = problems(load, doc)
    assert [p for p, _m in got] == [path] and "finite" in got[0][1]


# ---- L2: bundles -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "load,doc,path",
    [
        (
            load_descheduler_config,
            {**D, "planner": {"name": "hierarchical", "autoscaler": {"name": "drpc", "bundle": ""}}},
            "planner.autoscaler.bundle",
        ),
        (load_descheduler_config, {**D, "placement": {"name": "learned", "bundle": ""}}, "placement.bundle"),
        (
            load_descheduler_config,
            {**D, "cache": {"address": "127.0.0.1:1", "encoderBundle": ""}},
            "cache.encoderBundle",
        ),
        (load_extender_config, {**E, "policy": {"name": "learned", "bundle": ""}}, "policy.bundle"),
    ],
    ids=["autoscaler", "placement", "cache-encoder", "extender"],
)
def test_an_empty_bundle_path_is_refused_in_both_binaries(load, doc, path):
    got = problems(load, doc)
    assert [p for p, _m in got] == [path]


@pytest.mark.parametrize(
    "load,doc,path",
    [
        (
            load_descheduler_config,
            {**D, "planner": {"name": "hierarchical", "autoscaler": {"name": "utilization-target", "bundle": "/b"}}},
            "planner.autoscaler",
        ),
        (load_descheduler_config, {**D, "placement": {"name": "topology-heuristic", "bundle": "/b"}}, "placement"),
        (load_extender_config, {**E, "policy": {"name": "topology-heuristic", "bundle": "/b"}}, "policy"),
    ],
    ids=["autoscaler", "placement", "extender"],
)
def test_a_bundle_next_to_a_heuristic_is_refused_not_ignored(load, doc, path):
    got = problems(load, doc)
    assert len(got) == 1 and got[0][0] == path
    assert "'/b'" in got[0][1] and "only read by" in got[0][1] and "Value error" not in got[0][1]


def test_a_bundle_with_the_learned_name_is_accepted():
    cfg = load_descheduler_config(
        {
            **D,
            "placement": {"name": "learned", "bundle": "/b"},
            "planner": {"autoscaler": {"name": "drpc", "bundle": "/h"}},
        }
    )
    assert cfg.placement.bundle == "/b" and cfg.planner.autoscaler.bundle == "/h"


# ---- M4: files that are not UTF-8 -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "load,kind",
    [(load_extender_config, "ExtenderConfiguration"), (load_descheduler_config, "DeschedulerConfiguration")],
)
@pytest.mark.parametrize(
    "content,where",
    [
        (b"\xff\xfe\x00", "line 1, column 1 (offset 0)"),
        (None, "line 3, column 6"),  # a valid file with one Latin-1 byte in a comment
    ],
    ids=["binary", "latin-1"],
)
def test_a_config_file_that_is_not_utf8_is_one_problem_naming_the_file_and_position(
    tmp_path, load, kind, content, where
):
    f = tmp_path / "c.yaml"
    f.write_bytes(content if content is not None else (HEAD + f"kind: {kind}\n# caf\xe9\n").encode("latin-1"))
    with pytest.raises(ConfigError) as ei:
        load(f)
    assert len(str(ei.value).splitlines()) == 1
    assert str(f) in str(ei.value) and "not UTF-8" in str(ei.value) and where in str(ei.value)


def test_a_yaml_reader_error_is_still_one_line(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text(HEAD + 'kind: ExtenderConfiguration\nurlPrefix: "/a\x07"\n')
    with pytest.raises(ConfigError) as ei:
        load_extender_config(f)
    assert len(str(ei.value).splitlines()) == 1 and "invalid YAML" in str(ei.value)


def test_describe_utf8_error_counts_lines_and_columns_in_bytes():
    raw = b"ab\ncd\xe9f"
    with pytest.raises(UnicodeDecodeError) as ei:
        raw.decode("utf-8")
    assert describe_utf8_error(raw, ei.value) == "not UTF-8 text: byte 0xe9 at line 2, column 3 (offset 5)"


def test_the_repository_example_configs_still_load():
    root = Path(__file__).resolve().parents[2] / "manifests"
    loaded = 0
    for f in sorted(root.rglob("*.yaml")):
        text = f.read_text()
        if "kind: ExtenderConfiguration" not in text and "kind: DeschedulerConfiguration" not in text:
            continue
        import yaml

        for doc in yaml.safe_load_all(text):
            for inner in _embedded_configs(doc):
                load = load_extender_config if inner["kind"] == "ExtenderConfiguration" else load_descheduler_config
                load(inner)
                loaded += 1
    assert loaded >= 2


def _embedded_configs(doc: Any):
    """Configuration documents in a manifest: the document itself or the YAML values of a ConfigMap."""
    import yaml

    if not isinstance(doc, dict):
        return
    if doc.get("kind") in ("ExtenderConfiguration", "DeschedulerConfiguration"):
        yield doc
    for v in (doc.get("data") or {}).values() if doc.get("kind") == "ConfigMap" else ():
        inner = yaml.safe_load(v)
        if isinstance(inner, dict) and inner.get("kind") in ("ExtenderConfiguration", "DeschedulerConfiguration"):
            yield inner
