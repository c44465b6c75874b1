"""The kube-scheduler extender wire format (k8s.io/kube-scheduler/extender/v1, ``types.go``), as
kube-scheduler's ``HTTPExtender`` (``pkg/scheduler/extender.go``) sends and reads it.

Facts this module implements (DESIGN.md section 5):

- The Go structs carry no json tags, so the keys are the Go field names: a request is
  ``{"Pod": <core/v1 Pod>, "Nodes": <core/v1 NodeList> | null, "NodeNames": [str] | null}``.
  ``NodeNames`` is filled when the extender is configured ``nodeCacheCapable: true``, ``Nodes``
  (``{"metadata": {}, "items": [<Node>, ...]}``) when ``false``; the other one is ``null``.
- Go's ``encoding/json`` matches keys case-insensitively (exact match first, else Unicode case
  folding; a later duplicate overwrites an earlier one). We accept any casing of the top-level keys
  and of the NodeList's ``items`` the same way. The embedded Pod and Node objects are ordinary
  camelCase API JSON (their structs do have json tags) and go through :mod:`policy.observe`.
- A filter reply is ``{"Nodes": ..., "NodeNames": ..., "FailedNodes": {node: reason},
  "FailedAndUnresolvableNodes": {node: reason}, "Error": ""}`` with the feasible subset in the same
  field the request used (the scheduler reads ``NodeNames`` when ``nodeCacheCapable``, else
  ``Nodes``); a name the request did not carry is an error to the scheduler.
- A prioritize reply is ``[{"Host": node, "Score": int}]`` (``HostPriorityList``, ``Score int64``:
  a JSON number with a fraction fails Go's decoder). kube-scheduler does not clamp; the range is
  ``MinExtenderPriority`` 0 .. ``MaxExtenderPriority`` 10, so we clamp.

Two decoders give the same result: :func:`parse_extender_args`, the reference (the standard library's
``json``, every field checked, every Node object parsed), and :func:`decode_extender_args`, the one the server
uses: msgspec (PyPI ``msgspec``; chosen over ``orjson`` and ``json`` by measurement, docs/operations.md) reads
the top level as raw slices, decodes only the Pod fields :func:`policy.observe.parse_pod` reads and only the
names of the candidate nodes, and falls back to the reference for anything it does not accept, so a malformed
request gets the reference's error. One encoder, :func:`encode_json`, writes every reply; it cannot fail on a
string (a lone UTF-16 surrogate is written as its ``\\uXXXX`` escape).

Errors: :class:`WireError`, one line naming the field and the offending value, e.g.
``NodeNames[2]: expected a string, got 5``. The server maps it to HTTP 400.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypedDict, cast

import msgspec
import numpy as np

from policy.lowlevel import MAX_EXTENDER_PRIORITY
from policy.observe import ObjectError, parse_node, parse_pod
from policy.state import NodeInfo, PodInfo

__all__ = [
    "MIN_EXTENDER_PRIORITY",
    "MAX_EXTENDER_PRIORITY",
    "WireError",
    "NodeListJSON",
    "ExtenderArgs",
    "ExtenderFilterResult",
    "HostPriority",
    "ParsedArgs",
    "Mode",
    "parse_extender_args",
    "decode_extender_args",
    "decode_candidate_names",
    "build_filter_result",
    "build_host_priorities",
    "neutral_host_priorities",
    "make_extender_args",
    "decode_filter_result",
    "decode_host_priorities",
    "encode_json",
    "encode_host_scores",
]

MIN_EXTENDER_PRIORITY = 0  # k8s.io/kube-scheduler/extender/v1 MinExtenderPriority

Mode = Literal["NodeNames", "Nodes"]


class WireError(ValueError):
    """A request (or, on the client side, a reply) does not follow the extender wire format.
    ``str()`` is one line: ``<field>: <problem>, got <value>``."""


# ---- wire JSON shapes (TypedDicts: DESIGN.md section 6) --------------------------------------------


class NodeListJSON(TypedDict, total=False):
    """core/v1 NodeList as Go's encoding/json writes it: ``{"metadata": {}, "items": [Node, ...]}``."""

    metadata: dict[str, Any]
    items: list[dict[str, Any]]


class ExtenderArgs(TypedDict):
    """extenderv1.ExtenderArgs: the body of ``POST {urlPrefix}/filter`` and ``/prioritize``
    (Go field names as keys; exactly one of ``Nodes`` / ``NodeNames`` is non-null)."""

    Pod: dict[str, Any]
    Nodes: NodeListJSON | None
    NodeNames: list[str] | None


class ExtenderFilterResult(TypedDict):
    """extenderv1.ExtenderFilterResult: the reply to ``filter``. The feasible subset goes in the field
    the request used; ``FailedNodes`` / ``FailedAndUnresolvableNodes`` map node → reason; ``Error`` is
    ``""`` unless the whole call failed."""

    Nodes: NodeListJSON | None
    NodeNames: list[str] | None
    FailedNodes: dict[str, str]
    FailedAndUnresolvableNodes: dict[str, str]
    Error: str


class HostPriority(TypedDict):
    """extenderv1.HostPriority: one element of the reply to ``prioritize``; ``Score`` an int in 0..10."""

    Host: str
    Score: int


@dataclass(frozen=True)
class ParsedArgs:
    """A validated ``ExtenderArgs``.

    - ``pod``: the pod being scheduled (:func:`policy.observe.parse_pod` of ``Pod``);
    - ``node_names``: the candidate node names in request order (from ``NodeNames``, or from
      ``Nodes.items[*].metadata.name``);
    - ``mode``: which field carried the candidates, ``"NodeNames"`` (nodeCacheCapable: true) or
      ``"Nodes"`` (false); replies use the same field;
    - ``nodes``: the parsed candidate Node objects in ``Nodes`` mode, else ``None``;
    - ``node_items``: the raw Node JSON objects in ``Nodes`` mode (echoed in filter replies), else ``None``;
    - ``nodes_metadata``: the NodeList's ``metadata`` as sent (echoed), ``{}`` when absent.
    """

    pod: PodInfo
    node_names: list[str]
    mode: Mode
    nodes: list[NodeInfo] | None = None
    node_items: list[Mapping[str, Any]] | None = None
    nodes_metadata: Mapping[str, Any] | None = None


# ---- helpers ---------------------------------------------------------------------------------------


def _show(v: Any, limit: int = 60) -> str:
    """A short one-line rendering of a JSON value for error messages."""
    if isinstance(v, Mapping):
        return "an object"
    if isinstance(v, list):
        return f"a list of {len(v)}"
    s = json.dumps(v, ensure_ascii=True) if isinstance(v, (str, int, float, bool)) or v is None else repr(v)
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _fold_lookup(obj: Mapping[str, Any], fields: Sequence[str]) -> dict[str, tuple[bool, Any]]:
    """Go encoding/json field matching: for each JSON key in document order, an exact match of a field
    name wins, else a case-folded match; a later key for the same field overwrites an earlier one.
    Returns ``{field: (present, value)}`` for every name in ``fields``."""
    exact = {f: f for f in fields}
    folded = {f.casefold(): f for f in fields}
    out: dict[str, tuple[bool, Any]] = dict.fromkeys(fields, (False, None))
    for k, v in obj.items():
        if not isinstance(k, str):
            continue
        f = exact.get(k) or folded.get(k.casefold())
        if f is not None:
            out[f] = (True, v)
    return out


def _one_line(msg: object) -> str:
    return " ".join(str(msg).split())


def _load_body(body: bytes | bytearray | str | Mapping[str, Any]) -> Mapping[str, Any]:
    if isinstance(body, Mapping):
        return body
    if isinstance(body, (bytes, bytearray)):
        if not body.strip():
            raise WireError("body: empty; expected a JSON ExtenderArgs object")
        try:
            text = bytes(body).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise WireError(f"body: not UTF-8 (invalid byte at offset {exc.start})") from None
    elif isinstance(body, str):
        text = body
        if not text.strip():
            raise WireError("body: empty; expected a JSON ExtenderArgs object")
    else:
        raise WireError(f"body: expected JSON bytes or an object, got {type(body).__name__}")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WireError(f"body: invalid JSON at line {exc.lineno} column {exc.colno} ({exc.msg})") from None
    except RecursionError:
        raise WireError("body: invalid JSON (nested too deeply)") from None
    if not isinstance(doc, Mapping):
        raise WireError(f"body: expected a JSON object (ExtenderArgs), got {_show(doc)}")
    return doc


# ---- requests ----------------------------------------------------------------------------------------


def parse_extender_args(body: bytes | bytearray | str | Mapping[str, Any]) -> ParsedArgs:
    """Validate and parse an ``ExtenderArgs`` request body.

    ``body``: the raw HTTP body (UTF-8 JSON bytes or str) or an already-decoded object. Top-level keys
    ``Pod``, ``Nodes``, ``NodeNames`` in any casing; unknown keys are ignored (as Go does).
    Exactly one of ``Nodes`` / ``NodeNames`` must be non-null.

    Raises :class:`WireError` (one line naming the field and value) for: invalid JSON, a non-object
    body, ``Pod`` missing/null/not an object/unparseable, ``NodeNames`` not a list or an entry not a
    non-empty string, ``Nodes`` not a NodeList object or an item not a parseable Node, both node fields
    null/absent, or both set.
    """
    doc = _load_body(body)
    f = _fold_lookup(doc, ("Pod", "Nodes", "NodeNames"))

    has_pod, pod_obj = f["Pod"]
    if not has_pod:
        raise WireError("Pod: missing")
    if pod_obj is None:
        raise WireError("Pod: null; expected the Pod being scheduled")
    if not isinstance(pod_obj, Mapping):
        raise WireError(f"Pod: expected an object, got {_show(pod_obj)}")
    try:
        pod = parse_pod(pod_obj)
    except ObjectError as exc:
        raise WireError(f"Pod: {_one_line(exc)}") from None
    except Exception as exc:  # noqa: BLE001 - a shape parse_pod did not anticipate (a list where a map belongs)
        raise WireError(f"Pod: cannot parse: {type(exc).__name__}: {_one_line(exc)}") from None

    _, names_val = f["NodeNames"]
    _, nodes_val = f["Nodes"]
    if names_val is None and nodes_val is None:
        raise WireError(
            "NodeNames, Nodes: both null or missing; exactly one must carry the candidate "
            "nodes (NodeNames when nodeCacheCapable is true, Nodes otherwise)"
        )
    if names_val is not None and nodes_val is not None:
        raise WireError("NodeNames, Nodes: both set; exactly one must carry the candidate nodes")

    if names_val is not None:
        if not isinstance(names_val, list):
            raise WireError(f"NodeNames: expected a list of strings, got {_show(names_val)}")
        names: list[str] = []
        for i, n in enumerate(names_val):
            if not isinstance(n, str):
                raise WireError(f"NodeNames[{i}]: expected a string, got {_show(n)}")
            if not n:
                raise WireError(f'NodeNames[{i}]: empty node name ""')
            names.append(n)
        return ParsedArgs(pod=pod, node_names=names, mode="NodeNames")

    if not isinstance(nodes_val, Mapping):
        raise WireError(f"Nodes: expected a NodeList object, got {_show(nodes_val)}")
    lf = _fold_lookup(nodes_val, ("items", "metadata"))
    _, items = lf["items"]
    _, meta = lf["metadata"]
    if items is None:
        items = []  # Go: a NodeList without items decodes to zero candidates
    if not isinstance(items, list):
        raise WireError(f"Nodes.items: expected a list of Node objects, got {_show(items)}")
    nodes: list[NodeInfo] = []
    for i, it in enumerate(items):
        if not isinstance(it, Mapping):
            raise WireError(f"Nodes.items[{i}]: expected a Node object, got {_show(it)}")
        try:
            nodes.append(parse_node(it))
        except ObjectError as exc:
            raise WireError(f"Nodes.items[{i}]: {_one_line(exc)}") from None
        except Exception as exc:  # noqa: BLE001 - a shape parse_node did not anticipate
            raise WireError(f"Nodes.items[{i}]: cannot parse: {type(exc).__name__}: {_one_line(exc)}") from None
    return ParsedArgs(
        pod=pod,
        node_names=[n.name for n in nodes],
        mode="Nodes",
        nodes=nodes,
        node_items=list(items),
        nodes_metadata=dict(meta) if isinstance(meta, Mapping) else {},
    )


# ---- the fast decoder (msgspec) ---------------------------------------------------------------------------


class _PodMetaFields(TypedDict, total=False):
    name: Any
    namespace: Any
    uid: Any
    labels: Any
    annotations: Any
    ownerReferences: Any
    deletionTimestamp: Any
    creationTimestamp: Any
    resourceVersion: Any


class _ContainerFields(TypedDict, total=False):
    resources: Any


class _PodSpecFields(TypedDict, total=False):
    containers: list[_ContainerFields] | None
    initContainers: list[_ContainerFields] | None
    overhead: Any
    tolerations: Any
    nodeName: Any
    schedulerName: Any
    priority: Any
    priorityClassName: Any
    volumes: Any
    nodeSelector: Any
    affinity: Any
    topologySpreadConstraints: Any


class _PodStatusFields(TypedDict, total=False):
    phase: Any
    conditions: Any


class _PodFields(TypedDict, total=False):
    """The fields of a core/v1 Pod that :func:`policy.observe.parse_pod` reads; msgspec skips the rest
    (managedFields, probes, env, ...) without building them."""

    kind: Any
    metadata: _PodMetaFields
    spec: _PodSpecFields
    status: _PodStatusFields


class _NodeNameOnly(TypedDict):
    name: str


class _NodeItemName(TypedDict):
    metadata: _NodeNameOnly


_RAW_OBJECT = msgspec.json.Decoder(dict[str, msgspec.Raw])
_POD_FIELDS = msgspec.json.Decoder(_PodFields)
_NAME_LIST = msgspec.json.Decoder(list[str])
_ITEM_NAMES = msgspec.json.Decoder(list[_NodeItemName] | None)
_RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw] | None)
_ANY = msgspec.json.Decoder()


class _Fallback(Exception):
    """The fast decoder does not accept this request: the reference parser decides (and names the error)."""


def _fast_args(body: bytes, echo_nodes: bool) -> ParsedArgs:
    try:
        top = _RAW_OBJECT.decode(body)
    except (msgspec.DecodeError, TypeError):
        raise _Fallback from None
    f = _fold_lookup(top, ("Pod", "Nodes", "NodeNames"))
    has_pod, pod_raw = f["Pod"]
    if not has_pod:
        raise _Fallback
    try:
        pod = parse_pod(_POD_FIELDS.decode(pod_raw))
    except Exception:  # noqa: BLE001 - null, wrong shapes, bad values: the reference parser names the problem
        raise _Fallback from None
    names_raw, nodes_raw = f["NodeNames"][1], f["Nodes"][1]
    names_null = names_raw is None or bytes(names_raw) == b"null"
    nodes_null = nodes_raw is None or bytes(nodes_raw) == b"null"
    if names_null == nodes_null:
        raise _Fallback
    try:
        if not names_null:
            names = _NAME_LIST.decode(names_raw)
            if not all(names):
                raise _Fallback
            return ParsedArgs(pod=pod, node_names=names, mode="NodeNames")
        lf = _fold_lookup(_RAW_OBJECT.decode(nodes_raw), ("items", "metadata"))
        items_raw, meta_raw = lf["items"][1], lf["metadata"][1]
        items = _ITEM_NAMES.decode(items_raw) if items_raw is not None else None
        node_names = [it["metadata"]["name"] for it in items or ()]
        if not all(node_names):
            raise _Fallback
        raw_items: list[Any] | None = None
        meta: Any = {}
        if echo_nodes:
            raw_items = list(_RAW_LIST.decode(items_raw) or ()) if items_raw is not None else []
            meta = _ANY.decode(meta_raw) if meta_raw is not None else {}
    except (msgspec.DecodeError, msgspec.ValidationError, TypeError):
        raise _Fallback from None
    return ParsedArgs(
        pod=pod,
        node_names=node_names,
        mode="Nodes",
        nodes=None,
        node_items=raw_items,
        nodes_metadata=dict(meta) if isinstance(meta, Mapping) else {},
    )


def decode_candidate_names(body: bytes | bytearray | memoryview) -> list[str] | None:
    """Only the candidate node names of an ``ExtenderArgs`` body (``NodeNames``, or the names of ``Nodes.items``),
    without the Pod: what a reply that does not score needs. ``None`` when the fast decoder cannot read them (the
    caller then answers without them), nesting too deep included; never raises. A few microseconds for 230 names."""
    try:
        top = _RAW_OBJECT.decode(body)
        f = _fold_lookup(top, ("NodeNames", "Nodes"))
        names_raw, nodes_raw = f["NodeNames"][1], f["Nodes"][1]
        if names_raw is not None and bytes(names_raw) != b"null":
            names = _NAME_LIST.decode(names_raw)
        elif nodes_raw is not None:
            items_raw = _fold_lookup(_RAW_OBJECT.decode(nodes_raw), ("items",))["items"][1]
            items = _ITEM_NAMES.decode(items_raw) if items_raw is not None else None
            names = [it["metadata"]["name"] for it in items or ()]
        else:
            return None
    except (msgspec.DecodeError, msgspec.ValidationError, TypeError, RecursionError):  # nesting past the stack
        return None
    return names if all(names) else None


def decode_extender_args(body: bytes | bytearray | memoryview, *, echo_nodes: bool = True) -> ParsedArgs:
    """Decode an ``ExtenderArgs`` request body the fast way: the same :class:`ParsedArgs` as
    :func:`parse_extender_args` (the same ``pod``, ``node_names``, ``mode``, and the same :class:`WireError` for
    a malformed request), except that in ``Nodes`` mode the Node objects are not parsed (``nodes`` is ``None``:
    scoring reads the nodes from the snapshot, not from the request) and ``node_items`` holds them as raw JSON
    slices (``msgspec.Raw``, echoed verbatim by :func:`encode_json`), or ``None`` when ``echo_nodes`` is false
    (prioritize never echoes them).

    ``body``: the raw HTTP body. Only the Pod fields :func:`policy.observe.parse_pod` reads are decoded; for the
    candidates, only their names. Anything the fast path does not accept (invalid JSON, a lone surrogate escape,
    a wrong shape anywhere it reads, ``Nodes`` and ``NodeNames`` both set or both null) is decided by
    :func:`parse_extender_args`, which raises the error. Cost: about 10 µs for a 5 KB Pod and 100 names
    (BENCHMARKS.md, section ``scheduler``)."""
    try:
        return _fast_args(bytes(body), echo_nodes)
    except (_Fallback, RecursionError):  # RecursionError: msgspec on nesting deeper than its stack allows
        return parse_extender_args(bytes(body))


def make_extender_args(
    pod: Mapping[str, Any], node_names: Sequence[str] | None = None, nodes: Sequence[Mapping[str, Any]] | None = None
) -> ExtenderArgs:
    """The ``ExtenderArgs`` kube-scheduler would send for ``pod`` and exactly one of ``node_names``
    (nodeCacheCapable: true) or ``nodes`` (full Node objects; false).

    As in kube-scheduler, the objects come from typed informers, so ``kind`` / ``apiVersion`` are
    dropped from the Pod and from each Node; the NodeList is ``{"metadata": {}, "items": [...]}``.
    Raises ``ValueError`` when both or neither of ``node_names`` / ``nodes`` are given.
    """
    if (node_names is None) == (nodes is None):
        raise ValueError("make_extender_args: give exactly one of node_names or nodes")
    strip = ("kind", "apiVersion")
    pod_json = {k: v for k, v in pod.items() if k not in strip}
    if node_names is not None:
        return {"Pod": pod_json, "Nodes": None, "NodeNames": [str(n) for n in node_names]}
    items = [{k: v for k, v in n.items() if k not in strip} for n in nodes or ()]
    return {"Pod": pod_json, "Nodes": {"metadata": {}, "items": items}, "NodeNames": None}


# ---- replies -----------------------------------------------------------------------------------------


def build_filter_result(
    parsed: ParsedArgs, failed: Mapping[str, str], unresolvable: Mapping[str, str] | None = None, error: str = ""
) -> ExtenderFilterResult:
    """The filter reply for ``parsed``: every candidate not in ``failed`` or ``unresolvable`` passes,
    in request order, in the same field the request used (``NodeNames`` or ``Nodes`` with the passing
    Node objects exactly as received); the other field is ``null``.

    ``failed`` / ``unresolvable``: ``{node: reason}``; names that were not candidates are dropped
    (kube-scheduler only knows its candidates). ``FailedAndUnresolvableNodes`` is ``{}`` when none.
    """
    cand = set(parsed.node_names)
    fail = {str(k): str(v) for k, v in failed.items() if k in cand}
    unres = {str(k): str(v) for k, v in (unresolvable or {}).items() if k in cand}
    rejected = fail.keys() | unres.keys()
    out: ExtenderFilterResult = {
        "Nodes": None,
        "NodeNames": None,
        "FailedNodes": fail,
        "FailedAndUnresolvableNodes": unres,
        "Error": str(error),
    }
    if parsed.mode == "NodeNames":
        out["NodeNames"] = [n for n in parsed.node_names if n not in rejected]
    else:
        items = parsed.node_items or []
        kept = [cast(dict[str, Any], it) for it, name in zip(items, parsed.node_names) if name not in rejected]
        out["Nodes"] = NodeListJSON(metadata=dict(parsed.nodes_metadata or {}), items=kept)
    return out


def _to_int_score(x: float) -> int:
    if not math.isfinite(x):
        return MIN_EXTENDER_PRIORITY
    v = math.floor(x + 0.5)  # round half up
    return int(min(MAX_EXTENDER_PRIORITY, max(MIN_EXTENDER_PRIORITY, v)))


def build_host_priorities(node_names: Sequence[str], scores: Sequence[float] | np.ndarray) -> list[HostPriority]:
    """The prioritize reply: one ``{"Host", "Score"}`` per candidate, in order. ``scores`` (any real
    numbers, one per name) are rounded half up to integers and clamped to 0..10; NaN/inf become 0.
    Raises ``ValueError`` when the lengths differ."""
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    if len(s) != len(node_names):
        raise ValueError(f"scores: expected {len(node_names)} values (one per candidate), got {len(s)}")
    return [{"Host": str(n), "Score": _to_int_score(float(v))} for n, v in zip(node_names, s)]


def neutral_host_priorities(node_names: Sequence[str]) -> list[HostPriority]:
    """Every candidate scored 0: the neutral answer (kube-scheduler's own plugins decide alone)."""
    return [{"Host": str(n), "Score": MIN_EXTENDER_PRIORITY} for n in node_names]


_ENCODER = msgspec.json.Encoder()


def _raw_to_json(o: Any) -> Any:
    if isinstance(o, msgspec.Raw):
        return json.loads(bytes(o))
    raise TypeError(f"cannot encode {type(o).__name__}")


def encode_json(reply: Any) -> bytes:
    """Compact UTF-8 JSON of a reply: the one encoder of every reply the extender sends (success, neutral,
    shed and error replies alike). Values: dicts with string keys, lists, strings, integers, ``None``, and
    ``msgspec.Raw`` slices (written verbatim). msgspec writes it; a string it cannot write as UTF-8 (a lone
    UTF-16 surrogate, which only a ``\\ud83d``-style escape in a request can produce) makes the whole reply go
    through ``json.dumps(ensure_ascii=True)``, which writes such a character as its escape, so the name
    round-trips exactly. Never raises for any string; raises ``TypeError`` / ``ValueError`` only for a value of
    another type or a non-finite float, which replies never carry."""
    try:
        return _ENCODER.encode(reply)
    except UnicodeEncodeError:
        return json.dumps(
            reply, separators=(",", ":"), ensure_ascii=True, allow_nan=False, default=_raw_to_json
        ).encode("ascii")


class _HostPrefixes(dict):
    """Node name -> the bytes ``{"Host":<name as JSON>,"Score":`` of its entry in a prioritize reply, made on first
    use (msgspec writes the name) and kept: the candidates are the cluster's nodes, the same names request after
    request. Emptied when it holds :data:`HOST_PREFIX_CACHE_SIZE` names (a cluster's churn of node names); a name
    longer than a node's name may be (:data:`NODE_NAME_MAX_LENGTH`) is written and not kept, so what a client sends
    cannot grow it past about 10 MB. A name msgspec cannot write (a lone UTF-16 surrogate) raises
    ``UnicodeEncodeError`` and is not kept."""

    def __missing__(self, name: str) -> bytes:
        prefix = b'{"Host":' + _ENCODER.encode(name) + b',"Score":'
        if len(name) > NODE_NAME_MAX_LENGTH:
            return prefix
        if len(self) >= HOST_PREFIX_CACHE_SIZE:
            self.clear()
        self[name] = prefix
        return prefix


#: How many node names :func:`encode_host_scores` keeps the reply bytes of (a 5,000-node cluster: about 1 MB).
HOST_PREFIX_CACHE_SIZE = 20_000
#: A node's name is a DNS subdomain: at most 253 characters (Kubernetes, "Object Names and IDs").
NODE_NAME_MAX_LENGTH = 253
_HOST_PREFIXES = _HostPrefixes()
#: An entry's end for each score 0..10, with the comma that separates it from the next.
_SCORE_ENDS = [f"{v}}},".encode() for v in range(MAX_EXTENDER_PRIORITY + 1)]


def encode_host_scores(node_names: Sequence[str], scores: Sequence[int] | np.ndarray) -> bytes:
    """The prioritize reply's bytes for integer ``scores`` already in 0..10 (one per name, in order): the same
    bytes as ``encode_json(build_host_priorities(node_names, scores))``, about seven times faster at 500 names
    (each name's ``{"Host":...,"Score":`` written once per process, :class:`_HostPrefixes`; the reply joined from
    those and the scores' endings). ``scores``: a 1-D array of integers (signed or unsigned), or a sequence of
    integral numbers (``True`` counts 1). Raises ``ValueError`` when the lengths differ, a score is outside 0..10
    or is not an integer (a float or bool array, a fractional number), or the array is not 1-D."""
    if len(scores) != len(node_names):
        raise ValueError(f"scores: expected {len(node_names)} values (one per candidate), got {len(scores)}")
    if not len(node_names):
        return b"[]"
    if isinstance(scores, np.ndarray):  # numpy's min and max: a sixth of the builtins' time on a list of 500
        if scores.dtype.kind not in "iu" or scores.ndim != 1:
            raise ValueError(f"scores: expected integers in 0..10, got a {scores.ndim}-D array of {scores.dtype}")
        values, lo, hi = scores.tolist(), scores.min(), scores.max()
    else:
        values = [int(v) for v in scores]
        if any(v != s for v, s in zip(values, scores)):
            raise ValueError("scores: expected integers in 0..10, got a fractional number")
        lo, hi = min(values), max(values)
    if not (MIN_EXTENDER_PRIORITY <= lo and hi <= MAX_EXTENDER_PRIORITY):
        raise ValueError("scores: expected integers in 0..10")
    try:
        parts: list[bytes] = [b""] * (2 * len(values))
        parts[0::2] = map(_HOST_PREFIXES.__getitem__, node_names)
        parts[1::2] = map(_SCORE_ENDS.__getitem__, values)
    except UnicodeEncodeError:  # a lone surrogate: the generic encoder escapes it
        return encode_json([{"Host": n, "Score": v} for n, v in zip(node_names, values)])
    parts[-1] = parts[-1][:-1]  # no comma after the last entry
    return b"[" + b"".join(parts) + b"]"


# ---- the scheduler's side: how HTTPExtender reads replies (used by tests and the demo) ---------------


def _decode_doc(body: bytes | str | Any, what: str) -> Any:
    if isinstance(body, (bytes, bytearray, str)):
        try:
            return json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise WireError(f"{what}: invalid JSON ({_one_line(exc)})") from None
    return body


def _go_int64(v: Any, field: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise WireError(f"{field}: expected an integer (Go int64), got {_show(v)}")
    if not -(2**63) <= v < 2**63:
        raise WireError(f"{field}: integer out of int64 range, got {v}")
    return v


def decode_host_priorities(body: bytes | str | Any, candidates: Sequence[str] | None = None) -> dict[str, int]:
    """Read a prioritize reply the way kube-scheduler does (case-insensitive keys, ``Score`` a Go int64)
    and return ``{host: score}``. With ``candidates``, also check what we promise beyond the scheduler's
    own checks: exactly one entry per candidate, scores in 0..10. Raises :class:`WireError`."""
    doc = _decode_doc(body, "prioritize reply")
    if not isinstance(doc, list):
        raise WireError(f"prioritize reply: expected a list of HostPriority, got {_show(doc)}")
    out: dict[str, int] = {}
    for i, hp in enumerate(doc):
        if not isinstance(hp, Mapping):
            raise WireError(f"prioritize reply[{i}]: expected an object, got {_show(hp)}")
        f = _fold_lookup(hp, ("Host", "Score"))
        host = f["Host"][1]
        if not isinstance(host, str):
            raise WireError(f"prioritize reply[{i}].Host: expected a string, got {_show(host)}")
        score = _go_int64(f["Score"][1] if f["Score"][0] else 0, f"prioritize reply[{i}].Score")
        if candidates is not None:
            if host in out:
                raise WireError(f"prioritize reply[{i}].Host: duplicate host {host!r}")
            if not MIN_EXTENDER_PRIORITY <= score <= MAX_EXTENDER_PRIORITY:
                raise WireError(f"prioritize reply[{i}].Score: outside 0..10, got {score}")
        out[host] = score
    if candidates is not None and set(out) != set(candidates):
        missing = sorted(set(candidates) - set(out))
        extra = sorted(set(out) - set(candidates))
        raise WireError(f"prioritize reply: hosts differ from the candidates (missing {missing}, extra {extra})")
    return out


def decode_filter_result(
    body: bytes | str | Any, candidates: Sequence[str], node_cache_capable: bool
) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """Read a filter reply the way kube-scheduler's ``HTTPExtender.Filter`` does and return
    ``(passing node names, FailedNodes, FailedAndUnresolvableNodes)``.

    Rules (pkg/scheduler/extender.go): a non-empty ``Error`` is an error; when ``node_cache_capable`` and
    ``NodeNames`` is non-null it is the result, else a non-null ``Nodes`` is (``items[*].metadata.name``);
    every returned name must be one of ``candidates``; both null means nothing passes.
    Raises :class:`WireError`."""
    doc = _decode_doc(body, "filter reply")
    if not isinstance(doc, Mapping):
        raise WireError(f"filter reply: expected an ExtenderFilterResult object, got {_show(doc)}")
    f = _fold_lookup(doc, ("Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"))
    err = f["Error"][1]
    if err not in (None, ""):
        raise WireError(f"filter reply.Error: {_show(err)}")
    cand = set(candidates)
    passed: list[str] = []
    names, nodes = f["NodeNames"][1], f["Nodes"][1]
    if node_cache_capable and names is not None:
        if not isinstance(names, list):
            raise WireError(f"filter reply.NodeNames: expected a list, got {_show(names)}")
        for i, n in enumerate(names):
            if not isinstance(n, str):
                raise WireError(f"filter reply.NodeNames[{i}]: expected a string, got {_show(n)}")
            passed.append(n)
    elif nodes is not None:
        if not isinstance(nodes, Mapping):
            raise WireError(f"filter reply.Nodes: expected a NodeList object, got {_show(nodes)}")
        items = _fold_lookup(nodes, ("items",))["items"][1] or []
        if not isinstance(items, list):
            raise WireError(f"filter reply.Nodes.items: expected a list, got {_show(items)}")
        for i, it in enumerate(items):
            name = ((it or {}).get("metadata") or {}).get("name") if isinstance(it, Mapping) else None
            if not isinstance(name, str):
                raise WireError(f"filter reply.Nodes.items[{i}].metadata.name: expected a string, got {_show(name)}")
            passed.append(name)
    for i, n in enumerate(passed):
        if n not in cand:
            raise WireError(f"filter reply: node {n!r} (entry {i}) was not in the request's candidates")
    maps: list[dict[str, str]] = []
    for key in ("FailedNodes", "FailedAndUnresolvableNodes"):
        m = f[key][1]
        if m is None:
            maps.append({})
            continue
        if not isinstance(m, Mapping) or not all(isinstance(v, str) for v in m.values()):
            raise WireError(f"filter reply.{key}: expected an object of node → reason strings, got {_show(m)}")
        maps.append(dict(m))
    return passed, maps[0], maps[1]
