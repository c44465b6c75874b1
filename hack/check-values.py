#!/usr/bin/env python3
"""Check values files for the hrl-scheduler chart before `helm install -f FILE`: what Helm itself lets through.

Helm reads values files with a YAML decoder that keeps the last of two equal keys (helm/helm#4107), so a duplicated
key silently drops configuration before the chart or its values.schema.json ever sees it. This reads each file as
the components read their own configuration files (policy.documents: duplicate keys, alias bombs and nesting
refused, each problem with its line), then validates the chart's values.yaml with the files merged over it, in order
(as Helm merges them: maps key by key, null removes a key), against the chart's values.schema.json (jsonschema,
from the [test] extra), every problem on one line:

    hack/check-values.py my-values.yaml [more.yaml ...]      exit 0: fine; 1: a problem (printed); 2: bad usage

    my-values.yaml: descheduler.caps: line 7: duplicate key (first at line 5); each key may appear once
    my-values.yaml: extender.config.listen.port: 70000 is greater than the maximum of 65535
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from policy.documents import DocumentError, load_yaml

CHART = ROOT / "manifests" / "charts" / "hrl-scheduler"


def read(path: Path) -> tuple[dict | None, list[str]]:
    """The values file at ``path`` and its problems, one line each."""
    try:
        doc = load_yaml(path.read_text(encoding="utf-8"))
    except OSError as exc:
        return None, [f"{path}: cannot read: {exc.strerror}"]
    except UnicodeDecodeError:
        return None, [f"{path}: not UTF-8 text"]
    except DocumentError as exc:
        return None, [f"{path}: {p}" for p in exc.problems]
    if doc is None:
        return {}, []
    if not isinstance(doc, dict):
        return None, [f"{path}: expected a mapping of values, got {type(doc).__name__}"]
    return doc, []


def merge(base: dict, over: dict) -> dict:
    """``over`` merged into ``base`` as Helm merges values files: maps key by key, null removes the key."""
    out = dict(base)
    for k, v in over.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = v
    return out


def problems(files: list[Path]) -> list[str]:
    """Every problem of the values files (in ``helm -f`` order), one line each (empty: fine)."""
    values, out = read(CHART / "values.yaml")
    for f in files:
        doc, found = read(f)
        out += found
        if doc is not None and values is not None:
            values = merge(values, doc)
    if out or values is None:
        return out
    try:
        import jsonschema
    except ImportError:
        return ["check-values: jsonschema is not installed (pip install jsonschema, or the [test] extra)"]
    validator = jsonschema.Draft7Validator(json.loads((CHART / "values.schema.json").read_text()))
    where = ", ".join(map(str, files))
    for err in sorted(validator.iter_errors(values), key=lambda e: list(map(str, e.absolute_path))):
        path = ".".join(str(p) for p in err.absolute_path) or "(top level)"
        out.append(f"{where}: {path}: {err.message}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", type=Path, help="values files, as given to helm -f")
    args = ap.parse_args(argv)
    found = problems(args.files)
    for line in found:
        print(line, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
