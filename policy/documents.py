"""One reader for every file the components load and do not control: configurations, cluster snapshots,
manifests, AppGroups, span and metrics tables (CSV, gzip-compressed or not), traces.

- Files: :func:`open_text` (a stream, for CSV tables) and :func:`read_text` (the whole text): UTF-8 (a byte-order
  mark skipped), gzip-decompressed when the name ends with ``.gz``, at most :data:`MAX_TEXT_BYTES` of text. A
  file that is missing, unreadable, not gzip, corrupt (bad deflate data, a CRC mismatch), truncated, larger than
  the bound or not UTF-8 raises :class:`FileError` (a ``ValueError``): one line naming the file, and the byte
  offset where it applies; never ``zlib.error``, ``EOFError`` or ``UnicodeDecodeError``.

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

import codecs
import gzip
import io
import json
import re
import reprlib
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

__all__ = [
    "MAX_TEXT_BYTES",
    "FileError",
    "describe_utf8_error",
    "open_text",
    "read_text",
    "MAX_DEPTH",
    "MAX_ALIAS_EXPANSION",
    "DocumentProblem",
    "DocumentError",
    "UniqueKeyLoader",
    "read_exponent_floats",
    "YamlDumper",
    "dump_yaml",
    "load_yaml",
    "load_yaml_all",
    "load_json",
    "dotted",
    "short_repr",
]

#: The most text read from one file, bytes (after decompression): a table larger than this is refused (a
#: gzip bomb decompresses to far more than its size; a real span table of this size is tens of millions of spans).
MAX_TEXT_BYTES = 1 << 30


class FileError(ValueError):
    """A file cannot be read as text: one line naming it, e.g. ``spans.csv.gz: corrupt gzip data at byte 812 of
    the compressed file (invalid distance code)``."""


def describe_utf8_error(raw: bytes, exc: UnicodeDecodeError) -> str:
    """One line locating the first byte of ``raw`` that is not UTF-8 (``exc`` from ``raw.decode("utf-8")``):
    ``"not UTF-8 text: byte 0xff at line 3, column 7 (offset 41)"`` (line and column 1-based, column in bytes)."""
    start = int(exc.start)
    line = raw.count(b"\n", 0, start) + 1
    col = start - (raw.rfind(b"\n", 0, start) + 1) + 1
    return f"not UTF-8 text: byte 0x{raw[start]:02x} at line {line}, column {col} (offset {start})"


class _Guarded(io.RawIOBase):
    """The binary stream of a file (decompressed for gzip) that counts what it delivers, stops past the bound, and
    turns the decompressor's failures into :class:`FileError`."""

    def __init__(self, path: Path, raw: IO[bytes], compressed: IO[bytes] | None, limit: int):
        self.path, self.raw, self.compressed, self.limit = path, raw, compressed, limit
        self.delivered = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[no-untyped-def]
        try:
            data = self.raw.read(len(b))
        except gzip.BadGzipFile as exc:
            what = "corrupt gzip data" if "CRC" in str(exc) or "length" in str(exc) else "not a gzip file"
            raise FileError(f"{self.path}: {what} ({exc})") from None
        except zlib.error as exc:
            at = self.compressed.tell() if self.compressed is not None else 0
            detail = str(exc).split(":", 1)[-1].strip()
            raise FileError(
                f"{self.path}: corrupt gzip data near byte {at} of the compressed file ({detail})"
            ) from None
        except EOFError:
            raise FileError(f"{self.path}: truncated gzip file (the compressed data ends early)") from None
        except OSError as exc:
            raise FileError(f"{self.path}: cannot read: {exc.strerror or exc}") from None
        n = len(data)
        self.delivered += n
        if self.delivered > self.limit:
            what = "decompresses to" if self.compressed is not None else "holds"
            raise FileError(f"{self.path}: {what} more than {self.limit} bytes (the most read from one file)")
        b[:n] = data
        return n

    def close(self) -> None:
        try:
            self.raw.close()
            if self.compressed is not None:
                self.compressed.close()
        finally:
            super().close()


_CHUNK = 8192  # what TextIOWrapper decodes at a time: the buffer below delivers as much


class _TextReader:
    """A text stream (iteration, ``read``, ``readline``) whose decoding errors are :class:`FileError` lines."""

    def __init__(self, path: Path, guarded: _Guarded):
        self.path = path
        self._guarded = guarded
        self._text = io.TextIOWrapper(io.BufferedReader(guarded, _CHUNK), encoding="utf-8-sig", newline="")

    def _bad_utf8(self, exc: UnicodeDecodeError) -> FileError:
        near = max(0, self._guarded.delivered - len(exc.object) + exc.start)
        bad = exc.object[exc.start]
        return FileError(f"{self.path}: not UTF-8 text: byte 0x{bad:02x} near offset {near}")

    def __iter__(self) -> _TextReader:
        return self

    def __next__(self) -> str:
        try:
            return next(self._text)
        except UnicodeDecodeError as exc:
            raise self._bad_utf8(exc) from None

    def read(self, size: int = -1) -> str:
        try:
            return self._text.read(size)
        except UnicodeDecodeError as exc:
            raise self._bad_utf8(exc) from None

    def readline(self, size: int = -1) -> str:
        try:
            return self._text.readline(size)
        except UnicodeDecodeError as exc:
            raise self._bad_utf8(exc) from None

    def close(self) -> None:
        self._text.close()

    def __enter__(self) -> _TextReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _open_binary(path: Path, limit: int) -> _Guarded:
    try:
        fh = open(path, "rb")  # closed with the _Guarded stream
    except OSError as exc:
        raise FileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if path.name.lower().endswith(".gz"):
        return _Guarded(path, gzip.GzipFile(fileobj=fh, mode="rb"), fh, limit)
    return _Guarded(path, fh, None, limit)


def open_text(path: str | Path, *, max_bytes: int = MAX_TEXT_BYTES) -> _TextReader:
    """A text stream over file ``path`` (see the module docstring; ``newline=""``, as :mod:`csv` wants): iterate
    its lines, or ``read()`` it. Raises :class:`FileError` when it cannot be opened, and while it is read for bad
    gzip data, more than ``max_bytes`` of text, or bytes that are not UTF-8. Close it (a context manager)."""
    p = Path(path)
    return _TextReader(p, _open_binary(p, max_bytes))


def read_text(path: str | Path, *, max_bytes: int = MAX_TEXT_BYTES) -> str:
    """The whole text of file ``path`` (see :func:`open_text`; newlines as written). Raises :class:`FileError`,
    naming the first byte that is not UTF-8 by its offset."""
    p = Path(path)
    stream = _open_binary(p, max_bytes)
    try:
        raw = stream.read()
    finally:
        stream.close()
    try:
        return raw.decode("utf-8")[1:] if raw.startswith(codecs.BOM_UTF8) else raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileError(f"{p}: {describe_utf8_error(raw, exc)}") from None


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


#: Floats in exponent notation that YAML 1.1 (PyYAML) reads as strings and YAML 1.2, Go's YAML libraries (kubectl,
#: Helm) and JSON read as numbers: ``1e9``, ``1e-05`` (how Helm's ``toYaml`` writes 0.00001), ``1.5E+3``, ``.5e3``.
_EXPONENT_FLOAT = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")


def read_exponent_floats(loader_class: type) -> type:
    """Make ``loader_class`` (a PyYAML loader) read the plain scalars of :data:`_EXPONENT_FLOAT` as floats, as the
    YAML 1.2 core schema and Kubernetes' YAML do (a chart value of 0.00001 reaches the component as ``1e-05``);
    quoted ones stay strings. Returns the class (registered on it alone: PyYAML copies the resolvers per class)."""
    loader_class.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT_FLOAT, list("-+0123456789."))
    return loader_class


@read_exponent_floats
class YamlDumper(yaml.SafeDumper):
    """PyYAML's safe dumper that quotes a string a reader of :func:`read_exponent_floats` would take for a number
    (``"1e5"``): what :func:`dump_yaml` writes reads back as it was, here and in Go's YAML libraries."""


def dump_yaml(data: Any, **kwargs: Any) -> str:
    """``yaml.safe_dump(data, **kwargs)`` through :class:`YamlDumper` (one document; ``sort_keys``,
    ``default_flow_style``, ``width`` ... as PyYAML's)."""
    return yaml.dump(data, Dumper=YamlDumper, **kwargs)


@read_exponent_floats
class UniqueKeyLoader(_BASE_LOADER):  # type: ignore[misc, valid-type]
    """PyYAML's safe loader (the C one when available) whose documents are checked by :func:`check_node`
    before construction: use it through :func:`load_yaml` / :func:`load_yaml_all`, which do the check. Plain
    scalars in exponent notation (``1e-05``) are floats (:func:`read_exponent_floats`)."""


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
