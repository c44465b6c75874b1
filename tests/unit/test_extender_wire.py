"""The extender wire format (k8s.io/kube-scheduler/extender/v1) as kube-scheduler sends and reads it."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender import wire
from extender.wire import (
    ParsedArgs,
    WireError,
    build_filter_result,
    build_host_priorities,
    decode_candidate_names,
    decode_extender_args,
    decode_filter_result,
    decode_host_priorities,
    encode_host_scores,
    encode_json,
    make_extender_args,
    neutral_host_priorities,
    parse_extender_args,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "extender"
NAMES = ["boutique-worker", "boutique-worker2", "boutique-worker3"]


def load(name: str) -> dict:
    return json.loads((FIX / name).read_text())


def raw(name: str) -> bytes:
    return (FIX / name).read_bytes()


# ---- requests in both nodeCacheCapable modes ----------------------------------------------------------


def test_node_cache_capable_request_parses_pod_and_node_names():
    p = parse_extender_args(raw("args-nodecachecapable.json"))
    assert p.mode == "NodeNames"
    assert p.node_names == NAMES
    assert p.nodes is None and p.node_items is None
    assert p.pod.name == "frontend-6b8f7c9d4d-x7k2p"
    assert p.pod.namespace == "default"
    assert p.pod.service == "frontend"
    assert p.pod.node_name is None and p.pod.phase == "Pending"
    assert p.pod.owner is not None and (p.pod.owner.kind, p.pod.owner.name) == ("ReplicaSet", "frontend-6b8f7c9d4d")
    assert (p.pod.requests.cpu_m, p.pod.requests.memory_bytes) == (100, 64 * 2**20)
    assert p.pod.scheduler_name == "default-scheduler"
    assert {t.key for t in p.pod.tolerations} == {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}


def test_node_list_request_parses_full_node_objects():
    p = parse_extender_args(raw("args-nodelist.json"))
    assert p.mode == "Nodes"
    assert p.node_names == NAMES
    assert p.nodes is not None and [n.name for n in p.nodes] == NAMES
    assert p.nodes[0].allocatable.cpu_m == 4000
    assert p.nodes[2].zone == "zone-b"
    assert all(n.ready for n in p.nodes)
    assert p.node_items is not None and len(p.node_items) == 3
    assert p.nodes_metadata == {}


def test_both_modes_parse_the_same_pod():
    a = parse_extender_args(raw("args-nodecachecapable.json"))
    b = parse_extender_args(raw("args-nodelist.json"))
    assert a.pod == b.pod and a.node_names == b.node_names


def test_keys_in_any_casing_are_accepted_as_go_does():
    p = parse_extender_args(raw("args-mixed-case.json"))
    assert p.mode == "NodeNames" and p.node_names == NAMES and p.pod.service == "frontend"


@pytest.mark.parametrize(
    "pod_key,names_key,nodes_key",
    [
        ("pod", "nodenames", "nodes"),
        ("POD", "NODENAMES", "NODES"),
        ("pOd", "nodeNames", "Nodes"),
    ],
)
def test_every_casing_of_every_top_level_key_is_accepted(pod_key, names_key, nodes_key):
    d = load("args-nodecachecapable.json")
    body = {pod_key: d["Pod"], nodes_key: None, names_key: NAMES}
    assert parse_extender_args(json.dumps(body).encode()).node_names == NAMES


def test_node_list_items_key_casing_is_accepted_too():
    d = load("args-nodelist.json")
    body = {"Pod": d["Pod"], "Nodes": {"metadata": {}, "Items": d["Nodes"]["items"]}, "NodeNames": None}
    assert parse_extender_args(body).node_names == NAMES


def test_a_later_duplicate_key_in_another_casing_overwrites_the_earlier_one_as_in_go():
    # Go's encoding/json assigns every key that matches a field; the later one overwrites.
    pod = load("args-nodecachecapable.json")["Pod"]
    text = json.dumps({"Pod": pod, "NodeNames": ["a"], "nodenames": ["b", "c"], "Nodes": None})
    assert parse_extender_args(text).node_names == ["b", "c"]


def test_absent_other_field_counts_as_null():
    pod = load("args-nodecachecapable.json")["Pod"]
    assert parse_extender_args({"Pod": pod, "NodeNames": ["n1"]}).mode == "NodeNames"
    assert parse_extender_args({"Pod": pod, "Nodes": {"items": []}}).mode == "Nodes"


def test_node_list_without_items_means_no_candidates():
    pod = load("args-nodecachecapable.json")["Pod"]
    p = parse_extender_args({"Pod": pod, "Nodes": {"metadata": {}, "items": None}, "NodeNames": None})
    assert p.mode == "Nodes" and p.node_names == [] and p.nodes == []


def test_unknown_top_level_keys_are_ignored():
    d = load("args-nodecachecapable.json")
    d["Extra"] = {"anything": 1}
    assert parse_extender_args(d).node_names == NAMES


def test_a_str_body_parses_like_bytes():
    assert parse_extender_args(raw("args-nodecachecapable.json").decode()).node_names == NAMES


# ---- malformed requests: one line naming the field and value ------------------------------------------


def _pod() -> dict:
    return load("args-nodecachecapable.json")["Pod"]


BAD = [
    ("invalid JSON", b'{"Pod": ', "body: invalid JSON at line 1 column 9"),
    ("truncated JSON", b'{"Po', "body: invalid JSON at line 1 column 2"),
    ("empty body", b"", "body: empty"),
    ("not UTF-8", b'{"Pod": "\xff"}', "body: not UTF-8"),
    ("a list body", b"[1, 2]", "body: expected a JSON object (ExtenderArgs), got a list of 2"),
    ("missing Pod", {"NodeNames": ["n1"]}, "Pod: missing"),
    ("null Pod", {"Pod": None, "NodeNames": ["n1"]}, "Pod: null"),
    ("Pod not an object", {"Pod": "frontend", "NodeNames": ["n1"]}, 'Pod: expected an object, got "frontend"'),
    ("Pod without a name", {"Pod": {"metadata": {}}, "NodeNames": ["n1"]}, "Pod: object: metadata.name missing"),
    (
        "Pod with a bad quantity",
        "badqty",
        "Pod: Pod default/frontend-6b8f7c9d4d-x7k2p: spec.containers[0].resources.requests.cpu: "
        "invalid quantity 'lots'",
    ),
    (
        "NodeNames not a list",
        {"Pod": "POD", "NodeNames": "n1,n2"},
        'NodeNames: expected a list of strings, got "n1,n2"',
    ),
    (
        "NodeNames an object",
        {"Pod": "POD", "NodeNames": {"n1": 1}},
        "NodeNames: expected a list of strings, got an object",
    ),
    ("node entry not a string", {"Pod": "POD", "NodeNames": ["a", "b", 5]}, "NodeNames[2]: expected a string, got 5"),
    ("node entry null", {"Pod": "POD", "NodeNames": [None]}, "NodeNames[0]: expected a string, got null"),
    ("node entry empty", {"Pod": "POD", "NodeNames": ["a", ""]}, 'NodeNames[1]: empty node name ""'),
    (
        "both node fields null",
        {"Pod": "POD", "Nodes": None, "NodeNames": None},
        "NodeNames, Nodes: both null or missing",
    ),
    ("both node fields missing", {"Pod": "POD"}, "NodeNames, Nodes: both null or missing"),
    ("both node fields set", {"Pod": "POD", "Nodes": {"items": []}, "NodeNames": []}, "NodeNames, Nodes: both set"),
    (
        "Nodes not an object",
        {"Pod": "POD", "Nodes": ["n1"], "NodeNames": None},
        "Nodes: expected a NodeList object, got a list of 1",
    ),
    (
        "Nodes.items not a list",
        {"Pod": "POD", "Nodes": {"items": "n1"}},
        'Nodes.items: expected a list of Node objects, got "n1"',
    ),
    (
        "Nodes item not an object",
        {"Pod": "POD", "Nodes": {"items": ["n1"]}},
        'Nodes.items[0]: expected a Node object, got "n1"',
    ),
    (
        "Nodes item without a name",
        {"Pod": "POD", "Nodes": {"items": [{"metadata": {"labels": {}}}]}},
        "Nodes.items[0]: object: metadata.name missing",
    ),
]


@pytest.mark.parametrize("case,body,reason", BAD, ids=[c[0] for c in BAD])
def test_a_malformed_request_is_rejected_with_a_one_line_reason_naming_the_field(case, body, reason):
    if body == "badqty":
        body = load("args-nodecachecapable.json")
        body["Pod"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    elif isinstance(body, dict) and body.get("Pod") == "POD":
        body = {**body, "Pod": _pod()}
    if isinstance(body, dict):
        body = json.dumps(body).encode()
    with pytest.raises(WireError) as ei:
        parse_extender_args(body)
    msg = str(ei.value)
    assert "\n" not in msg
    assert msg.startswith(reason), msg


def test_a_pod_of_unexpected_shape_is_a_wire_error_not_a_crash():
    d = load("args-nodecachecapable.json")
    d["Pod"]["spec"]["containers"] = [["not", "a", "container"]]
    with pytest.raises(WireError, match=r"^Pod: "):
        parse_extender_args(d)


def test_a_non_json_value_type_is_rejected():
    with pytest.raises(WireError, match="body: expected JSON bytes or an object, got int"):
        parse_extender_args(5)  # type: ignore[arg-type]


# ---- filter replies ---------------------------------------------------------------------------------------


def test_filter_reply_in_node_names_mode_uses_node_names_and_keeps_request_order():
    p = parse_extender_args(raw("args-nodecachecapable.json"))
    r = build_filter_result(p, {"boutique-worker2": "Insufficient cpu"})
    assert r == {
        "Nodes": None,
        "NodeNames": ["boutique-worker", "boutique-worker3"],
        "FailedNodes": {"boutique-worker2": "Insufficient cpu"},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }
    assert decode_filter_result(json.dumps(r), NAMES, node_cache_capable=True) == (
        ["boutique-worker", "boutique-worker3"],
        {"boutique-worker2": "Insufficient cpu"},
        {},
    )


def test_filter_reply_in_node_list_mode_echoes_the_passing_node_objects_unchanged():
    d = load("args-nodelist.json")
    p = parse_extender_args(d)
    r = build_filter_result(p, {"boutique-worker": "cordoned"}, {"boutique-worker3": "NotReady"})
    assert r["NodeNames"] is None
    assert r["Nodes"] == {"metadata": {}, "items": [d["Nodes"]["items"][1]]}
    assert r["FailedAndUnresolvableNodes"] == {"boutique-worker3": "NotReady"}
    passed, failed, unres = decode_filter_result(json.dumps(r), NAMES, node_cache_capable=False)
    assert passed == ["boutique-worker2"] and failed == {"boutique-worker": "cordoned"}


def test_filter_reply_where_nothing_fits_has_an_empty_list_and_every_reason():
    p = parse_extender_args(raw("args-nodecachecapable.json"))
    r = build_filter_result(p, dict.fromkeys(NAMES, "Insufficient memory"))
    assert r["NodeNames"] == [] and set(r["FailedNodes"]) == set(NAMES) and r["Error"] == ""


def test_filter_reply_drops_reasons_for_nodes_that_were_not_candidates():
    p = parse_extender_args(raw("args-nodecachecapable.json"))
    r = build_filter_result(p, {"some-other-node": "x"})
    assert r["FailedNodes"] == {} and r["NodeNames"] == NAMES


def test_the_scheduler_side_decoder_rejects_a_name_that_was_not_in_the_request():
    with pytest.raises(WireError, match="not in the request's candidates"):
        decode_filter_result({"NodeNames": ["elsewhere"], "Error": ""}, NAMES, node_cache_capable=True)


def test_the_scheduler_side_decoder_reads_a_non_empty_error_as_a_failure():
    with pytest.raises(WireError, match="Error"):
        decode_filter_result({"NodeNames": NAMES, "Error": "boom"}, NAMES, node_cache_capable=True)


# ---- prioritize replies -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "scores,expected",
    [
        ([0.0, 5.0, 10.0], [0, 5, 10]),
        ([4.4, 4.5, 9.49], [4, 5, 9]),  # rounded half up
        ([-3.0, 15.0, 10.6], [0, 10, 10]),  # clamped to 0..10
        ([math.nan, math.inf, -math.inf], [0, 0, 0]),
    ],
)
def test_prioritize_reply_has_integer_scores_clamped_to_0_10_one_per_candidate(scores, expected):
    r = build_host_priorities(NAMES, scores)
    assert [h["Host"] for h in r] == NAMES
    assert [h["Score"] for h in r] == expected
    assert all(type(h["Score"]) is int for h in r)
    assert decode_host_priorities(json.dumps(r), NAMES) == dict(zip(NAMES, expected))


def test_prioritize_reply_length_must_match_the_candidates():
    with pytest.raises(ValueError, match="expected 3 values"):
        build_host_priorities(NAMES, [1.0, 2.0])


def test_neutral_reply_scores_every_candidate_zero():
    assert neutral_host_priorities(NAMES) == [{"Host": n, "Score": 0} for n in NAMES]


@pytest.mark.parametrize(
    "reply,match",
    [
        ([{"Host": "boutique-worker", "Score": 5.5}], "expected an integer"),
        ([{"Host": "boutique-worker", "Score": "5"}], "expected an integer"),
        ({"Host": "boutique-worker", "Score": 5}, "expected a list"),
    ],
)
def test_the_scheduler_side_decoder_rejects_what_go_cannot_decode(reply, match):
    with pytest.raises(WireError, match=match):
        decode_host_priorities(json.dumps(reply))


def test_the_scheduler_side_decoder_reads_reply_keys_case_insensitively():
    assert decode_host_priorities('[{"host": "a", "SCORE": 3}]') == {"a": 3}


# ---- building requests as kube-scheduler does ---------------------------------------------------------------


def test_make_extender_args_reproduces_the_fixture_in_both_modes():
    d = load("args-nodelist.json")
    pod = {"apiVersion": "v1", "kind": "Pod", **d["Pod"]}
    nodes = [{"apiVersion": "v1", "kind": "Node", **n} for n in d["Nodes"]["items"]]
    assert make_extender_args(pod, nodes=nodes) == d
    assert make_extender_args(pod, node_names=NAMES) == load("args-nodecachecapable.json")
    with pytest.raises(ValueError):
        make_extender_args(pod)


def test_parsed_args_is_frozen():
    p = parse_extender_args(raw("args-nodecachecapable.json"))
    assert isinstance(p, ParsedArgs)
    with pytest.raises(AttributeError):
        p.mode = "Nodes"  # type: ignore[misc]
    assert copy.copy(p) == p


# ---- the fast decoder gives the reference's result, and the reference's error -----------------------------


@pytest.mark.parametrize("name", ["args-nodecachecapable.json", "args-nodelist.json", "args-mixed-case.json"])
def test_the_fast_decoder_reads_what_the_reference_parser_reads(name):
    ref = parse_extender_args(raw(name))
    fast = decode_extender_args(raw(name))
    assert (fast.pod, fast.node_names, fast.mode) == (ref.pod, ref.node_names, ref.mode)
    assert fast.pod.labels == ref.pod.labels and fast.pod.annotations == ref.pod.annotations
    assert fast.nodes is None  # the Node objects are not parsed: scoring reads the snapshot's
    if ref.mode == "Nodes":
        echoed = json.loads(encode_json(build_filter_result(fast, {})))["Nodes"]
        assert echoed == {"metadata": ref.nodes_metadata, "items": ref.node_items}  # verbatim
        assert decode_extender_args(raw(name), echo_nodes=False).node_items is None


@pytest.mark.parametrize("case,body,reason", BAD, ids=[c[0] for c in BAD])
def test_the_fast_decoder_rejects_what_the_reference_rejects_with_the_same_line(case, body, reason):
    if body == "badqty":
        body = load("args-nodecachecapable.json")
        body["Pod"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    elif isinstance(body, dict) and body.get("Pod") == "POD":
        body = {**body, "Pod": _pod()}
    if isinstance(body, dict):
        body = json.dumps(body).encode()
    with pytest.raises(WireError) as ref:
        parse_extender_args(body)
    with pytest.raises(WireError) as fast:
        decode_extender_args(body)
    assert str(fast.value) == str(ref.value)


def test_the_fast_decoder_follows_go_for_key_case_and_duplicates():
    pod = json.dumps(_pod())
    body = ('{"nodenames": ["a"], "POD": ' + pod + ', "NodeNames": ["b", "c"], "pod": ' + pod + "}").encode()
    ref, fast = parse_extender_args(body), decode_extender_args(body)
    assert fast.node_names == ref.node_names == ["b", "c"] and fast.pod == ref.pod
    body = ('{"Pod": ' + pod + ', "Nodes": {"Items": [{"metadata": {"name": "x"}}], "items": null}}').encode()
    assert decode_extender_args(body).node_names == parse_extender_args(body).node_names == []


def test_one_encoder_writes_every_reply_even_with_lone_surrogates():
    names = ["\ud83d", 'a"b', "\udc00x", "é"]
    for reply in (
        build_host_priorities(names, [1, 2, 3, 4]),
        neutral_host_priorities(names),  # the fallback reply of prioritize
        build_filter_result(
            ParsedArgs(
                pod=parse_extender_args(raw("args-nodecachecapable.json")).pod, node_names=names, mode="NodeNames"
            ),
            {"\udc00x": "why \ud83d"},
        ),
    ):
        out = encode_json(reply)
        assert json.loads(out) == reply  # escapes round-trip exactly
    assert encode_host_scores(names, [1, 2, 3, 4]) == encode_json(build_host_priorities(names, [1, 2, 3, 4]))
    assert encode_host_scores([], []) == b"[]"
    with pytest.raises(ValueError):
        encode_host_scores(["a"], [11])


_NAME_CHARS = st.one_of(st.characters(), st.sampled_from(["\ud800", "\udfff", '"', "\\", "\n", "é", "\u2028"]))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.text(_NAME_CHARS, max_size=12), st.integers(0, 10)), max_size=30, unique_by=lambda t: t[0]),
    st.sampled_from([None, "int64", "int32", "int8", "uint8", "uint64"]),
    st.booleans(),
)
def test_the_prioritize_reply_is_the_generic_encoders_bytes_whatever_the_names_and_the_cache(entries, dtype, tiny):
    """Names of any text (quotes, escapes, lone surrogates), scores 0..10 as a list or an integer array of any width,
    with the cache of names' bytes as it is or emptied at every second name it adds: the bytes the generic encoder
    writes."""
    names = [n for n, _ in entries]
    scores = [v for _, v in entries]
    expected = encode_json(build_host_priorities(names, scores))
    with pytest.MonkeyPatch.context() as mp:
        if tiny:
            mp.setattr(wire, "HOST_PREFIX_CACHE_SIZE", 2)
        got = encode_host_scores(names, scores if dtype is None else np.array(scores, dtype=dtype))
    assert got == expected
    assert json.loads(got) == build_host_priorities(names, scores)  # escapes round-trip


def test_the_prioritize_reply_refuses_scores_out_of_range_or_not_integers():
    bad_scores = ([11], [-1], [3.5], np.array([11]), np.array([-1]), np.array([3.0]), np.array([True]), np.array([[3]]))
    for bad in bad_scores:
        with pytest.raises(ValueError, match="scores: expected integers in 0..10"):
            encode_host_scores(["a"], bad)
    with pytest.raises(ValueError, match="expected 2 values"):
        encode_host_scores(["a", "b"], [1])


def test_the_prioritize_reply_keeps_no_name_longer_than_a_node_name():
    """What a client sends cannot grow the cache of names' bytes: a name past 253 characters is written, not kept."""
    long_name, node_name = "n" * (wire.NODE_NAME_MAX_LENGTH + 1), "m" * wire.NODE_NAME_MAX_LENGTH
    got = encode_host_scores([long_name, node_name], [1, 2])
    assert got == encode_json(build_host_priorities([long_name, node_name], [1, 2]))
    assert long_name not in wire._HOST_PREFIXES and node_name in wire._HOST_PREFIXES


def test_the_fast_decoder_answers_a_deeply_nested_body_with_the_reference_error():
    """msgspec raises RecursionError past its nesting limit: the reference parser decides (a 400, never a 500)."""
    body = b'{"Pod": ' + b"[" * 200_000 + b"]" * 200_000 + b', "NodeNames": ["a"]}'
    with pytest.raises(WireError, match="nested too deeply"):
        decode_extender_args(body)


@pytest.mark.parametrize(
    "body",
    [
        b'{"NodeNames": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"Nodes": {"items": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}",
        b'{"Pod": ' + b'{"a": ' * 50_000 + b"1" + b"}" * 50_000 + b', "NodeNames": ["n1"]}',
    ],
    ids=["names", "items", "pod"],
)
def test_the_candidate_names_of_a_body_nested_past_the_stack_are_unknown_never_an_exception(body):
    # issue 26 item 3: RecursionError from msgspec on the shed path became an HTTP 500
    assert decode_candidate_names(body) is None or decode_candidate_names(body) == ["n1"]
    with pytest.raises(WireError, match="nested too deeply"):
        decode_extender_args(body)
