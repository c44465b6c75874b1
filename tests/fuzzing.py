"""Inputs and oracles shared by the property-based tests (hypothesis, in ``make test``) and ``make fuzz``
(``hack/fuzz.py``): generators of hostile JSON/YAML/CSV values, mutations of real seed documents, and one
oracle per parser that says what went wrong with an input, or ``None`` when the parser behaved.

A parser behaves when it returns a value or raises its documented one-line error naming the file: a
:class:`policy.config.ConfigError` (every line ``FILE: ...``, none in pydantic's words), a
:class:`policy.observe.ObjectError`, a :class:`policy.topology.TopologyError`, a :class:`policy.bundle.BundleError`.
Anything else (another exception, a multi-line or file-less message, the snapshot safety net's ``malformed
object`` line, which means a field no parser checks) is a finding.

``tests/conftest.py`` puts this directory on ``sys.path``; ``hack/fuzz.py`` does the same.
"""

from __future__ import annotations

import copy
import json
import math
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT_SEED = ROOT / "tests" / "fixtures" / "descheduler" / "cluster-list.json"
ARGS_SEED = ROOT / "tests" / "fixtures" / "extender" / "args-nodecachecapable.json"
ARGS_LIST_SEED = ROOT / "tests" / "fixtures" / "extender" / "args-nodelist.json"
LOW_BUNDLE = ROOT / "policy" / "bundles" / "hrl-scheduler" / "low"
SPANS_SEED = ROOT / "tests" / "fixtures" / "online-boutique-spans"
ALIBABA_SEED = ROOT / "tests" / "fixtures" / "alibaba"

#: Values that broke parsers before (issue 13) or commonly do: wrong types, huge and non-finite numbers,
#: exotic text. ``LONE_SURROGATE`` is kept apart: the extender's JSON encoder is issue 13 item 3.
NASTY: list[Any] = [
    "lots",
    "1e400",
    "1e999999999",
    "-1",
    "",
    " ",
    "\x00",
    "é",
    "🙂",
    "a" * 5000,
    "50%",
    "NaN",
    "Infinity",
    "100m",
    "64Mi",
    0,
    -1,
    1,
    2**31,
    2**63,
    10**30,
    -(10**30),
    1.5,
    1e308,
    -1e308,
    1e-308,
    True,
    False,
    None,
    [],
    {},
    [1, "a", None],
    {"a": {"b": {"c": []}}},
]
LONE_SURROGATE = "\ud83d"


def random_json(rng: random.Random, depth: int = 3, surrogates: bool = False) -> Any:
    """A random JSON value: one of :data:`NASTY`, a random scalar, or a small container of such values."""
    r = rng.random()
    if r < 0.45:
        return copy.deepcopy(rng.choice(NASTY))
    if r < 0.55 and surrogates:
        return "x" + LONE_SURROGATE + rng.choice(["", "y"])
    if r < 0.75 or depth <= 0:
        return rng.choice(
            [
                rng.randint(-(2**70), 2**70),
                rng.uniform(-1e6, 1e6),
                "".join(chr(rng.randint(32, 0x2FFF)) for _ in range(rng.randint(0, 12))),
                rng.random() < 0.5,
            ]
        )
    if r < 0.88:
        return [random_json(rng, depth - 1, surrogates) for _ in range(rng.randint(0, 3))]
    return {
        rng.choice(["a", "name", "kind", "cpu", "items", "metadata", ""]): random_json(rng, depth - 1, surrogates)
        for _ in range(rng.randint(0, 3))
    }


def deep_json_text(depth: int, key: str = "a") -> str:
    """``{"a": {"a": ... {}}}`` nested ``depth`` deep, as text (no recursion to build it)."""
    return f'{{"{key}": ' * depth + "{}" + "}" * depth


def paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path (tuple of keys and indices) into ``doc``, the root ``()`` included."""
    out = [prefix]
    stack = [(doc, prefix)]
    while stack:
        v, p = stack.pop()
        items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
        for k, x in items:
            out.append((*p, k))
            stack.append((x, (*p, k)))
    return out


def set_at(doc: Any, path: tuple, value: Any, delete: bool = False) -> Any:
    """``doc`` with the value at ``path`` replaced by ``value`` (or removed); the root path replaces ``doc``."""
    if not path:
        return value
    cur = doc
    for k in path[:-1]:
        cur = cur[k]
    if delete:
        del cur[path[-1]]
    else:
        cur[path[-1]] = value
    return doc


def mutate(doc: Any, rng: random.Random, n: int = 1, surrogates: bool = False) -> Any:
    """A copy of ``doc`` with ``n`` random mutations: a value replaced by a random or nasty value, deleted, or
    wrapped into a list or a map."""
    doc = copy.deepcopy(doc)
    for _ in range(n):
        ps = paths(doc)
        p = rng.choice(ps)
        op = rng.random()
        if op < 0.7 or not p:
            doc = set_at(doc, p, random_json(rng, surrogates=surrogates))
        elif op < 0.85:
            doc = set_at(doc, p, None, delete=True)
        else:
            cur = doc
            for k in p:
                cur = cur[k]
            doc = set_at(doc, p, [cur] if rng.random() < 0.5 else {"x": cur})
    return doc


def mutate_text(text: str, rng: random.Random) -> str:
    """Text-level damage: a duplicated line, a cut, inserted bytes-as-text, a deep nest spliced in."""
    lines = text.splitlines(keepends=True) or [""]
    op = rng.randrange(5)
    if op == 0:
        i = rng.randrange(len(lines))
        lines.insert(i, lines[i])
        return "".join(lines)
    if op == 1:
        return text[: rng.randrange(len(text) + 1)]
    if op == 2:
        i = rng.randrange(len(text) + 1)
        return (
            text[:i]
            + rng.choice(['"', "{", "]", ":", ",", "\t", "\x00", "\\", "&a", "*a", "!!python/object"])
            + text[i:]
        )
    if op == 3:
        i = rng.randrange(len(text) + 1)
        return text[:i] + deep_json_text(rng.choice([150, 1500])) + text[i:]
    return "".join(rng.sample(lines, len(lines)))


# ---- oracles -----------------------------------------------------------------------------------------------


_PYDANTIC = re.compile(r"Input should|Value error|Field required|validation error")


def _one_line_naming(msg: str, name: str) -> str | None:
    if "\n" in msg:
        return f"message of {msg.count(chr(10)) + 1} lines: {msg[:200]!r}"
    if name not in msg:
        return f"message does not name {name}: {msg[:200]!r}"
    return None


def check_config(load: Callable[..., Any], path: Path) -> str | None:
    """``load(path, check_files=True)`` returns or raises a ConfigError whose every line starts with the file,
    with no pydantic wording; else the finding."""
    from policy.config import ConfigError

    try:
        load(path, check_files=True)
    except ConfigError as exc:
        for line in exc.lines():
            if not line.startswith(f"{path}: ") or "\n" in line:
                return f"bad line: {line[:200]!r}"
            if _PYDANTIC.search(line):
                return f"pydantic wording: {line[:200]!r}"
    except Exception as exc:  # noqa: BLE001 - any other exception is the finding
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    return None


def check_snapshot(path: Path) -> str | None:
    """``load_snapshot_file(path)`` returns or raises a one-line ObjectError naming the file that is not the
    safety net's generic ``malformed object`` line."""
    from descheduler.snapshot import load_snapshot_file
    from policy.observe import ObjectError

    try:
        load_snapshot_file(path)
    except ObjectError as exc:
        msg = str(exc)
        if "malformed object (" in msg:
            return f"unanticipated shape: {msg[:200]}"
        return _one_line_naming(msg, str(path))
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    return None


def check_table(read: Callable[[Path], Any], path: Path) -> str | None:
    """A span or Alibaba table reader returns or raises a one-line TopologyError naming the file."""
    from policy.topology import TopologyError

    try:
        read(path)
    except TopologyError as exc:
        return _one_line_naming(str(exc), str(path))
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    return None


def check_graph_source(path: Path) -> str | None:
    """``load_graph([path])`` (kind detected from content: manifests, AppGroups, tables) returns or raises its
    one-line error (TopologyError / ObjectError / ConfigError) naming the file."""
    from policy.observe import ObjectError
    from policy.topology import TopologyError
    from policy.topology.sources import load_graph

    try:
        load_graph([str(path)])
    except (TopologyError, ObjectError) as exc:
        return _one_line_naming(str(exc), str(path))
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    return None


def check_bundle(directory: Path) -> str | None:
    """The extender's bundle loader returns or raises a one-line ValueError (BundleError) naming the bundle."""
    from policy.lowlevel import LearnedPlacement

    try:
        LearnedPlacement.load(directory)
    except ValueError as exc:
        return _one_line_naming(" ".join(str(exc).split()) if "\n" not in str(exc) else str(exc), str(directory))
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    return None


def check_reply(verb: str, status: int, body: bytes, sent: Any) -> str | None:
    """An extender reply is a documented status (200, or a 4xx for a bad request / wrong method or path), never a
    5xx; a 200 to a well-formed request is a well-formed reply: prioritize a list of ``{Host, Score 0..10}``,
    filter a map with a node list that is a subset of the request's."""
    if status >= 500:
        return f"HTTP {status}: {body[:200]!r}"
    if status != 200 or verb not in ("prioritize", "filter"):
        return None
    try:
        reply = json.loads(body)
    except ValueError:
        return f"200 with a body that is not JSON: {body[:200]!r}"
    if verb == "prioritize":
        ok = isinstance(reply, list) and all(
            isinstance(h, dict)
            and isinstance(h.get("Host"), str)
            and isinstance(h.get("Score"), int)
            and 0 <= h["Score"] <= 10
            for h in reply
        )
        return None if ok else f"malformed prioritize reply: {body[:200]!r}"
    if not isinstance(reply, dict):
        return f"malformed filter reply: {body[:200]!r}"
    return None


# ---- app build inputs -------------------------------------------------------------------------------------

MS = 1_000_000
T0 = 1_700_000_000
SMALL_APP_T0 = T0  # the first minute of write_small_app's measurements (unix s)


def _deployment(name: str, cpu: str, mem: str) -> str:
    return (
        f"apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}}}\nspec:\n  replicas: 1\n"
        f"  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n"
        f"    spec:\n      containers:\n      - name: {name}\n        image: {name}\n"
        f"        env: [{{name: CONFIG_FILE, value: /etc/{name}/config.json}}]\n"
        f"        resources: {{requests: {{cpu: 100m, memory: 32Mi}}, limits: {{cpu: {cpu}, memory: {mem}}}}}\n"
    )


def write_small_app(
    d: Path, headers: dict[str, str] | None = None, cpu_cores: bool = False, gateway: bool = False, web_pods: int = 1
) -> dict[str, Path]:
    """A small app's ``app build`` inputs under ``d`` (the seed of the app build tests and of ``make fuzz``'s app
    build inputs): manifests/ (web, api, db; no env var naming another service), spans/ (60 requests: web calls api
    twice in parallel, then db; db calls cache, which has no workload; with ``gateway`` an ingress gateway without a
    workload is the root), metrics/ (simple layout, 30 minutes; web's load split over ``web_pods`` pods).
    ``headers``: other names for the span columns; ``cpu_cores``: CPU in cores instead of millicores. Returns the
    three input paths by role."""
    h = {"TraceID": "TraceID", "SpanID": "SpanID", "ParentID": "ParentID", "PodName": "PodName",
         "StartTimeUnixNano": "StartTimeUnixNano", "EndTimeUnixNano": "EndTimeUnixNano", **(headers or {})}  # fmt: skip
    rng = np.random.default_rng(7)
    (d / "manifests").mkdir(parents=True)
    (d / "manifests/app.yaml").write_text(
        "---\n".join([_deployment("web", "1", "64Mi"), _deployment("api", "1", "256Mi"), _deployment("db", "1", "1Gi")])
    )
    rows = []
    for i in range(60):
        b = T0 * 10**9 + i * 2 * 10**9
        a1, a2, dd = rng.uniform(8, 12), rng.uniform(8, 12), rng.uniform(3, 5)
        end = 50 + rng.uniform(0, 10)
        t = f"t{i:03d}"
        if gateway:
            rows.append((t, "g", "root", "gateway-aaa11-zz", b - MS, b + (end + 1) * MS))
        rows += [
            (t, "w", "g" if gateway else "root", "web-abc12-x1", b, b + end * MS),
            (t, "c1", "w", "web-abc12-x1", b + 5 * MS, b + (7 + a1) * MS),
            (t, "s1", "c1", "api-def34-y2", b + 6 * MS, b + (6 + a1) * MS),
            (t, "c2", "w", "web-abc12-x1", b + 5 * MS, b + (7 + a2) * MS),
            (t, "s2", "c2", "api-def34-y2", b + 6 * MS, b + (6 + a2) * MS),
            (t, "c3", "w", "web-abc12-x1", b + 30 * MS, b + (32 + dd) * MS),
            (t, "s3", "c3", "db-ghi56-z3", b + 31 * MS, b + (31 + dd) * MS),
            (t, "c4", "s3", "db-ghi56-z3", b + 32 * MS, b + 33 * MS),
            (t, "s4", "c4", "cache-jkl78-q4", b + int(32.2 * MS), b + int(32.8 * MS)),
        ]
    (d / "spans").mkdir()
    cols = ["TraceID", "SpanID", "ParentID", "PodName", "StartTimeUnixNano", "EndTimeUnixNano"]
    (d / "spans/spans.csv").write_text(
        ",".join(h[c] for c in cols)
        + "\n"
        + "".join(",".join(str(int(x) if isinstance(x, float) else x) for x in r) + "\n" for r in rows)  # fmt: skip
    )
    (d / "metrics").mkdir()
    cpu_col = "cpu_cores" if cpu_cores else "cpu_m"
    lines = [f"time_s,pod,{cpu_col},memory_mi,rps"]
    per = {"api-def34-y2": (4.0, 30.0, 20.0), "db-ghi56-z3": (3.0, 50.0, 10.0)}
    for k in range(web_pods):
        per[f"web-abc12-x{k + 1}"] = (5.0 / web_pods, 100.0, 10.0 / web_pods)
    for m in range(30):
        for pod, (cpu, mem, rps) in per.items():
            c = cpu * (1 + 0.05 * math.sin(m + len(pod)))
            t = T0 + 60 * m + rng.uniform(-2, 2)
            lines.append(f"{t:.3f},{pod},{c / 1000 if cpu_cores else c:.6f},{mem + m % 3},{rps * (1 + 0.01 * (m % 5))}")
    (d / "metrics/pods.csv").write_text("\n".join(lines) + "\n")
    lat = ["time_s,service,latency_p50_ms,latency_p95_ms,latency_p99_ms,success_pct"]
    for m in range(30):
        lat.append(f"{T0 + 60 * m + 1},web,{55 + m % 2},{62 + m % 3},{70 + m % 4},0")
    (d / "metrics/latency.csv").write_text("\n".join(lat) + "\n")
    return {"manifests": d / "manifests", "spans": d / "spans", "metrics": d / "metrics"}


# ---- compressed files ------------------------------------------------------------------------------------------


def damage_gzip(raw: bytes, rng: random.Random) -> tuple[bytes, str]:
    """``raw`` gzip-compressed, intact or damaged one way: ``(bytes, what was done)``. The damage: cut anywhere,
    the deflate block type set to the reserved 3, bytes overwritten in the middle, the CRC or the length
    trailer changed, the magic number broken, or another gzip member appended."""
    import gzip

    z = bytearray(gzip.compress(raw, mtime=0))
    how = rng.choice(["intact", "cut", "block_type", "overwrite", "crc", "length", "magic", "two_members"])
    if how == "cut":
        z = z[: rng.randrange(len(z))]
    elif how == "block_type":
        z[10] |= 0x06
    elif how == "overwrite":
        k = rng.randrange(10, max(11, len(z) - 8))
        z[k : k + 8] = rng.randbytes(8)
    elif how == "crc":
        z[-8] ^= 0xFF
    elif how == "length":
        z[-1] ^= 0x01
    elif how == "magic":
        z[0] = 0x1E
    elif how == "two_members":
        z += gzip.compress(raw[: len(raw) // 2], mtime=0)
    return bytes(z), how


# ---- app build ---------------------------------------------------------------------------------------------------


def check_app_build(inputs: dict[str, Path], out: Path, **kw: Any) -> str | None:
    """``build_app`` of ``inputs`` (``write_small_app``'s roles) into ``out`` returns a loadable app, or raises a
    ``ValueError`` whose every line names a file (or an option) and leaves nothing behind: no ``out``, no temporary
    folder beside it. Anything else is the finding."""
    from policy.sim.app import load_app
    from policy.sim.appbuild import build_app

    before = set(out.parent.iterdir())
    try:
        build_app(inputs["manifests"], inputs["spans"], out, inputs.get("metrics"), **kw)
    except ValueError as exc:
        left = set(out.parent.iterdir()) - before
        if left:
            return f"failed build left {sorted(p.name for p in left)}: {str(exc)[:150]}"
        for line in str(exc).splitlines():
            if not (str(out.parent) in line or line.startswith("--") or line.startswith("cannot detect the entry")):
                if not any(str(p) in line for p in inputs.values()):
                    return f"a line naming no file: {line[:200]!r}"
            if _PYDANTIC.search(line):
                return f"pydantic wording: {line[:200]!r}"
        return None
    except Exception as exc:  # noqa: BLE001 - any other exception is the finding
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    try:
        load_app(str(out))
    except Exception as exc:  # noqa: BLE001
        return f"built app does not load: {type(exc).__name__}: {str(exc)[:200]}"
    return None
