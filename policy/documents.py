"""One reader for every JSON and YAML document the components load from files they do not control:
configurations, cluster snapshots, manifests, AppGroups.

- YAML: PyYAML's safe loader (libyaml's C parser when PyYAML was built with it), composed into nodes first
  and checked before anything is constructed: a **duplicate mapping key** is refused (YAML 1.2 requires
  unique keys; PyYAML silently keeps the last one, so ``dryRun: true`` then ``dryRun: false`` read as false),
  as is nesting deeper than :data:`MAX_DEPTH` and a document whose aliases expand to more than
  :data:`MAX_ALIAS_EXPANSION` times its own size ("billion laughs"). Merge keys (``<<: *base``) keep their
  YAML meaning (an override is not a duplicate).
- JSON: :mod:`json` with a duplicate object key refused and the same nesting limit (``RecursionError`` of the
  C scanner included).

Every problem is a :class:`DocumentProblem` ``(path, line, message)``: ``path`` the dotted path of the key
(``caps.perNode``, ``items[3].metadata.name``; ``""`` at the top), ``line`` 1-based or ``None``. A file's
problems are all collected (every duplicate of the file, not only the first) and raised together as one
:class:`DocumentError` (a ``ValueError``); callers turn them into their own one-line errors naming the file.
"""

from __future__ import annotations

import json
import re
import reprlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

__all__ = [
    "MAX_DEPTH",
    "MAX_ALIAS_EXPANSION",
    "DocumentProblem",
    "DocumentError",
    "UniqueKeyLoader",
    "load_yaml",
    "load_yaml_all",
    "load_json",
    "dotted",
    "short_repr",
]

#: The deepest nesting of mappings and sequences accepted (Kubernetes objects nest about 20 deep, CRD schemas
#: about 40). Deeper documents are refused before anything walks them recursively.
MAX_DEPTH = 100
#: A YAML document may expand its aliases to at most this many times its own node count (plus 10,000 nodes):
#: a few reused anchors pass, exponential alias chains do not.
MAX_ALIAS_EXPANSION = 10

_BASE_LOADER: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MERGE_TAG = "tag:yaml.org,2002:merge"

_short = reprlib.Repr()
_short.maxstring = 200
_short.maxother = 80
_short.maxlevel = 3
_short.maxdict = _short.maxlist = _short.maxtuple = 4


def short_repr(value: Any) -> str:
    """``repr`` of ``value`` shortened for a one-line message (at most about 200 characters per string (paths stay
    whole), 3 levels, 4 items per container; safe on any depth)."""
    return _short.repr(value).replace("\n", "\\n")


def dotted(parts: tuple[Any, ...] | list[Any]) -> str:
    """``("caps", "perNode")`` → ``"caps.perNode"``; integers are indices: ``("items", 3, "kind")`` →
    ``"items[3].kind"``."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


@dataclass(frozen=True)
class DocumentProblem:
    """One problem of a document: ``path`` (dotted, ``""`` for the whole document), ``line`` (1-based, or
    ``None`` when unknown), ``message`` (one line, no trailing period)."""

    path: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line is not None else ""
        return f"{self.path}: {where}{self.message}" if self.path else f"{where}{self.message}"


class DocumentError(ValueError):
    """A document is not acceptable JSON or YAML; ``problems`` lists every :class:`DocumentProblem` found
    (``str()``: one per line)."""

    def __init__(self, problems: list[DocumentProblem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class UniqueKeyLoader(_BASE_LOADER):  # type: ignore[misc, valid-type]
    """PyYAML's safe loader (the C one when available) whose documents are checked by :func:`check_node`
    before construction: use it through :func:`load_yaml` / :func:`load_yaml_all`, which do the check."""


def _key_text(node: Node) -> str:
    if isinstance(node, ScalarNode):
        return str(node.value)
    return short_repr(f"<{type(node).__name__}>")


def _scalar_key(loader: Any, node: Node) -> Any:
    """A hashable identity of a mapping key node: the constructed scalar (so ``1`` and ``"1"`` differ and
    ``true`` equals ``True``), or the node itself for a complex key."""
    if isinstance(node, ScalarNode):
        try:
            value = loader.construct_object(node)
            hash(value)
            return (type(value).__name__, value)
        except Exception:  # noqa: BLE001 - a scalar PyYAML cannot build is reported when the document is built
            return ("text", node.tag, node.value)
    return ("node", id(node))


def check_node(loader: Any, root: Node) -> list[DocumentProblem]:
    """Every duplicate key of the node tree ``root`` (with its dotted path and line), or the first nesting or
    alias-expansion problem; ``[]`` when the document is acceptable. Iterative: safe on any depth."""
    problems: list[DocumentProblem] = []
    size: dict[int, int] = {}  # node id -> node count of its expanded subtree (aliases counted each time)
    distinct = 0
    # (node, path, depth, children done?) — post-order, so sizes of children are known when a parent closes
    stack: list[tuple[Node, tuple[Any, ...], int, bool]] = [(root, (), 1, False)]
    while stack:
        node, path, depth, done = stack.pop()
        nid = id(node)
        if done:
            total = 1
            if isinstance(node, MappingNode):
                for k, v in node.value:
                    total += size.get(id(k), 1) + size.get(id(v), 1)
            elif isinstance(node, SequenceNode):
                for v in node.value:
                    total += size.get(id(v), 1)
            size[nid] = total
            continue
        if nid in size:  # an alias of a node already measured
            continue
        distinct += 1
        if depth > MAX_DEPTH:
            shown = dotted(path[:8]) + ("..." if len(path) > 8 else "")
            return [DocumentProblem(shown, node.start_mark.line + 1, f"nested deeper than {MAX_DEPTH} levels")]
        if isinstance(node, MappingNode):
            stack.append((node, path, depth, True))
            first: dict[Any, int] = {}
            for k, v in node.value:
                if k.tag == _MERGE_TAG:
                    stack.append((v, path, depth + 1, False))
                    continue
                key = _scalar_key(loader, k)
                line = k.start_mark.line + 1
                if key in first:
                    problems.append(
                        DocumentProblem(
                            dotted((*path, _key_text(k))),
                            line,
                            f"duplicate key (first at line {first[key]}); each key may appear once",
                        )
                    )
                else:
                    first[key] = line
                stack.append((v, (*path, _key_text(k)), depth + 1, False))
        elif isinstance(node, SequenceNode):
            stack.append((node, path, depth, True))
            for i, v in enumerate(node.value):
                stack.append((v, (*path, i), depth + 1, False))
        else:
            size[nid] = 1
    problems.sort(key=lambda p: p.line or 0)
    if not problems and size.get(id(root), 1) > MAX_ALIAS_EXPANSION * distinct + 10_000:
        problems.append(
            DocumentProblem(
                "",
                None,
                f"aliases expand to {size[id(root)]} nodes from {distinct} (more than {MAX_ALIAS_EXPANSION} "
                "times the document; refused as an alias bomb)",
            )
        )
    return problems


def _yaml_problem(exc: yaml.YAMLError) -> DocumentProblem:
    mark = getattr(exc, "problem_mark", None)
    what = " ".join(str(getattr(exc, "problem", None) or exc).split())
    return DocumentProblem("", mark.line + 1 if mark is not None else None, f"invalid YAML: {what}")


def _iter_yaml(text: str, loader_class: type) -> Iterator[Any]:
    loader = loader_class(text)
    try:
        while True:
            try:
                if not loader.check_node():
                    return
                node = loader.get_node()
            except yaml.YAMLError as exc:
                raise DocumentError([_yaml_problem(exc)]) from None
            except RecursionError:  # the pure-Python composer (no libyaml) recurses per level
                raise DocumentError([DocumentProblem("", None, f"nested deeper than {MAX_DEPTH} levels")]) from None
            if node is None:
                yield None
                continue
            problems = check_node(loader, node)
            if problems:
                raise DocumentError(problems)
            try:
                yield loader.construct_document(node)
            except yaml.YAMLError as exc:
                raise DocumentError([_yaml_problem(exc)]) from None
            except RecursionError:
                raise DocumentError([DocumentProblem("", None, f"nested deeper than {MAX_DEPTH} levels")]) from None
            except (ValueError, OverflowError, TypeError) as exc:  # a date PyYAML cannot build, an unhashable key
                raise DocumentError([DocumentProblem("", None, f"invalid YAML value: {_one_line(exc)}")]) from None
    finally:
        loader.dispose()


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def load_yaml_all(text: str, loader_class: type = UniqueKeyLoader) -> list[Any]:
    """Every document of a (multi-document) YAML text, as plain Python data (``None`` for an empty document).
    ``loader_class``: :class:`UniqueKeyLoader` or another PyYAML safe loader class (own constructors, e.g. ones
    recording lines); the checks are the same.
    Raises :class:`DocumentError` with every duplicate key, or the syntax, nesting or alias problem."""
    return list(_iter_yaml(text, loader_class))


def load_yaml(text: str) -> Any:
    """The single document of a YAML text (``None`` when empty). Raises :class:`DocumentError` as
    :func:`load_yaml_all`, and for a text with more than one document."""
    docs = load_yaml_all(text)
    if len(docs) > 1:
        raise DocumentError([DocumentProblem("", None, f"expected one YAML document, found {len(docs)}")])
    return docs[0] if docs else None


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d = dict(pairs)
    if len(d) != len(pairs):
        seen: set[str] = set()
        dups = [k for k, _ in pairs if k in seen or seen.add(k)]  # type: ignore[func-returns-value]
        raise _DuplicateKey(dups[0], d)
    return d


class _DuplicateKey(Exception):
    def __init__(self, key: str, obj: dict[str, Any]):
        self.key = key
        self.obj = obj


def _json_depth_ok(doc: Any) -> bool:
    stack = [(doc, 1)]
    while stack:
        v, depth = stack.pop()
        if depth > MAX_DEPTH:
            return False
        if isinstance(v, dict):
            stack.extend((x, depth + 1) for x in v.values() if isinstance(x, (dict, list)))
        elif isinstance(v, list):
            stack.extend((x, depth + 1) for x in v if isinstance(x, (dict, list)))
    return True


_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\],:]')


def _too_deep_json(text: str) -> DocumentProblem:
    """The first place where ``text`` (JSON) nests deeper than :data:`MAX_DEPTH`: its dotted path and line
    (a tokenizer over strings and brackets; used on the error path only)."""
    stack: list[list[Any]] = []  # per open container: [kind, current key or index]
    pending_key: str | None = None
    for m in _JSON_TOKEN.finditer(text):
        tok = m.group()
        if tok in "{[":
            if stack:
                top = stack[-1]
                if top[0] == "{" and pending_key is not None:
                    top[1] = pending_key
            stack.append([tok, 0 if tok == "[" else None])
            pending_key = None
            if len(stack) > MAX_DEPTH:
                path = tuple(c[1] for c in stack[:-1] if c[1] is not None)
                line = text.count("\n", 0, m.start()) + 1
                shown = dotted(path[:8]) + ("..." if len(path) > 8 else "")
                return DocumentProblem(shown, line, f"nested deeper than {MAX_DEPTH} levels")
        elif tok in "}]":
            if stack:
                stack.pop()
        elif tok == ",":
            if stack and stack[-1][0] == "[":
                stack[-1][1] += 1
        elif tok.startswith('"') and stack and stack[-1][0] == "{":
            nxt = text[m.end() : m.end() + 64].lstrip()
            if nxt.startswith(":"):
                try:
                    pending_key = json.loads(tok)
                except ValueError:
                    pending_key = tok[1:-1]
                stack[-1][1] = pending_key
    return DocumentProblem("", None, f"nested deeper than {MAX_DEPTH} levels")


def load_json(text: str) -> Any:
    """The JSON document of ``text``. Raises :class:`DocumentError` for invalid JSON (with its line), a
    duplicate key in an object (named, with the object's ``name`` / ``metadata.name`` when it has one), or
    nesting deeper than :data:`MAX_DEPTH`."""
    try:
        doc = json.loads(text, object_pairs_hook=_unique_pairs)
    except json.JSONDecodeError as exc:
        raise DocumentError([DocumentProblem("", exc.lineno, f"invalid JSON: {exc.msg}")]) from None
    except RecursionError:
        raise DocumentError([_too_deep_json(text)]) from None
    except _DuplicateKey as dup:
        name = dup.obj.get("name")
        meta = dup.obj.get("metadata")
        if not isinstance(name, str) and isinstance(meta, dict) and isinstance(meta.get("name"), str):
            name = meta["name"]
        within = f" in the object named {short_repr(name)}" if isinstance(name, str) else ""
        raise DocumentError(
            [DocumentProblem(str(dup.key), None, f"duplicate key{within}; each key may appear once")]
        ) from None
    except ValueError as exc:  # int() of a number literal longer than sys.get_int_max_str_digits()
        raise DocumentError([DocumentProblem("", None, f"invalid JSON: {_one_line(exc)}")]) from None
    if not _json_depth_ok(doc):
        raise DocumentError([_too_deep_json(text)])
    return doc
