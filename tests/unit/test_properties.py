"""Property-based tests (hypothesis) of every input parser: whatever the file holds, the parser returns a value or
raises its documented one-line error naming the file (configurations: every line ``FILE: dotted.path: ...`` in
our own words; snapshots, call-graph tables and sources, bundles). The oracles are in ``tests/fuzzing.py``, shared
with ``make fuzz`` (``hack/fuzz.py``), which runs the same checks on >= 100,000 inputs."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
import yaml
from fuzzing import (
    LOW_BUNDLE,
    NASTY,
    SNAPSHOT_SEED,
    check_bundle,
    check_config,
    check_graph_source,
    check_snapshot,
    check_table,
    deep_json_text,
    mutate,
    mutate_text,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from descheduler.config import load_descheduler_config
from extender.config import load_extender_config
from policy.topology.alibaba import V2021_COLUMNS, V2022_COLUMNS, read_alibaba
from policy.topology.spans import SPAN_COLUMNS, read_spans

SNAPSHOT = json.loads(SNAPSHOT_SEED.read_text())
HEAD = {"apiVersion": "hrl-scheduler.io/v1alpha1"}

scalars = st.one_of(
    st.sampled_from(NASTY),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.booleans(),
    st.none(),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)

# every field name of both configurations, so generated documents reach the validators, not only "unknown field"
EXT_KEYS = ["listen", "host", "port", "tls", "certFile", "keyFile", "urlPrefix", "policy", "name", "bundle",
            "targetUtilization", "topology", "sources", "refreshSeconds", "snapshotFile", "kubernetes", "enabled",
            "kubeconfig", "maxSnapshotAgeSeconds", "cache", "address", "match", "logLevel"]  # fmt: skip
DES_KEYS = ["dryRun", "intervalSeconds", "caps", "perNode", "perNamespace", "total", "excludedNamespaces",
            "cooldownSeconds", "stateFile", "planner", "name", "intent", "autoscaler", "workloads", "intentPolicy",
            "placement", "bundle", "scaling", "minReplicas", "maxReplicas", "metrics", "listen", "leaderElection",
            "leaseName", "leaseDurationSeconds", "cache", "address", "dry_run", "cooldown_seconds"]  # fmt: skip


def config_docs(keys: list[str]) -> st.SearchStrategy:
    leaf = json_values
    section = st.dictionaries(st.sampled_from(keys), leaf, max_size=4)
    return st.dictionaries(st.sampled_from(keys), leaf | section, max_size=6)


@pytest.mark.parametrize(
    "load,kind,keys",
    [
        (load_extender_config, "ExtenderConfiguration", EXT_KEYS),
        (load_descheduler_config, "DeschedulerConfiguration", DES_KEYS),
    ],
    ids=["extender", "descheduler"],
)
@settings(max_examples=250)
@given(data=st.data())
def test_any_configuration_document_loads_or_is_one_line_per_problem(tmp_path, load, kind, keys, data):
    doc = {**HEAD, "kind": kind, **data.draw(config_docs(keys))}
    text = yaml.safe_dump(doc, allow_unicode=True)
    if data.draw(st.booleans()):
        text = mutate_text(text, random.Random(data.draw(st.integers(0, 2**32))))
    f = tmp_path / "c.yaml"
    f.write_text(text, encoding="utf-8", errors="surrogatepass")
    assert check_config(load, f) is None


@settings(max_examples=100)
@given(raw=st.binary(max_size=300))
def test_any_bytes_as_a_configuration_are_one_line_per_problem(tmp_path, raw):
    f = tmp_path / "c.yaml"
    f.write_bytes(raw)
    assert check_config(load_descheduler_config, f) is None


@settings(max_examples=300)
@given(seed=st.integers(0, 2**32), n=st.integers(1, 4), textual=st.booleans())
def test_any_damaged_snapshot_reads_or_is_one_line_naming_file_and_field(tmp_path, seed, n, textual):
    rng = random.Random(seed)
    text = json.dumps(mutate(SNAPSHOT, rng, n))
    if textual:
        text = mutate_text(text, rng)
    f = tmp_path / "s.json"
    f.write_text(text)
    assert check_snapshot(f) is None


@settings(max_examples=150)
@given(value=json_values, pick=st.integers(0, 10**6))
def test_any_value_in_any_snapshot_field_is_read_or_named(tmp_path, value, pick):
    from fuzzing import paths, set_at

    doc = json.loads(json.dumps(SNAPSHOT))
    ps = [p for p in paths(doc) if p]
    doc = set_at(doc, ps[pick % len(ps)], value)
    f = tmp_path / "s.json"
    f.write_text(json.dumps(doc, allow_nan=True))
    assert check_snapshot(f) is None


@settings(max_examples=20)
@given(depth=st.integers(90, 3000), where=st.sampled_from(["annotations", "labels", "ownerReferences"]))
def test_deep_nesting_anywhere_is_one_line(tmp_path, depth, where):
    doc = json.loads(json.dumps(SNAPSHOT))
    pod = next(i for i in doc["items"] if i["kind"] == "Pod")
    pod["metadata"][where] = "__deep__"
    f = tmp_path / "s.json"
    f.write_text(json.dumps(doc).replace('"__deep__"', deep_json_text(depth), 1))
    assert check_snapshot(f) is None


cells = st.one_of(
    st.sampled_from(["", "0", "1", "-1", "1e400", "nan", "root", "frontend-579b9bff58-t2dbm", "x" * 200, '"', "a,b"]),
    st.text(max_size=12),
    st.integers().map(str),
)


@pytest.mark.parametrize(
    "reader,columns",
    [
        (read_spans, SPAN_COLUMNS + ("Duration", "StatusCode")),
        (read_alibaba, V2021_COLUMNS),
        (read_alibaba, V2022_COLUMNS),
    ],
    ids=["spans", "alibaba-v2021", "alibaba-v2022"],
)
@settings(max_examples=150)
@given(data=st.data())
def test_any_call_table_reads_or_is_one_line_naming_the_file(tmp_path, reader, columns, data):
    cols = list(data.draw(st.permutations(columns)))
    if data.draw(st.booleans()):
        cols = cols[: data.draw(st.integers(0, len(cols)))]
    rows = data.draw(st.lists(st.lists(cells, min_size=len(cols), max_size=len(cols) + 1), max_size=6))
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(cols)
    w.writerows(rows)
    raw = buf.getvalue().encode("utf-8", "surrogatepass")
    if data.draw(st.booleans()):  # bytes that are not UTF-8, NUL bytes, a cut
        i = data.draw(st.integers(0, len(raw)))
        raw = raw[:i] + data.draw(st.sampled_from([b"\xff", b"\x00", b"\xe9", b"\r", b""])) + raw[i:]
    f = tmp_path / "t.csv"
    f.write_bytes(raw)
    assert check_table(reader, f) is None


def _graph_seeds() -> list[list]:
    """The documents of the AppGroup and manifest fixtures that parse (some fixtures are broken on purpose)."""
    fixtures = Path(__file__).resolve().parents[1] / "fixtures"
    out = []
    for f in sorted(
        [*(fixtures / "appgroup").glob("*.yaml"), *(fixtures / "online-boutique-manifests").glob("*.yaml")]
    ):
        try:
            docs = [d for d in yaml.safe_load_all(f.read_text()) if d is not None]
        except yaml.YAMLError:
            continue
        if docs:
            out.append(docs)
    return out


GRAPH_SEEDS = _graph_seeds()


@settings(max_examples=150)
@given(seed=st.integers(0, 2**32), suffix=st.sampled_from([".yaml", ".json", ".csv", ""]))
def test_any_call_graph_source_file_loads_or_is_one_line(tmp_path, seed, suffix):
    rng = random.Random(seed)
    docs = [mutate(d, rng, rng.randint(1, 3)) for d in rng.choice(GRAPH_SEEDS)]
    text = yaml.safe_dump_all(docs) if suffix != ".json" else json.dumps(docs[0] if docs else None)
    if rng.random() < 0.3:
        text = mutate_text(text, rng)
    f = tmp_path / f"g{suffix}"
    f.write_text(text, encoding="utf-8", errors="surrogatepass")
    assert check_graph_source(f) is None


@settings(max_examples=80)
@given(seed=st.integers(0, 2**32), n=st.integers(1, 3))
def test_any_damaged_bundle_manifest_loads_or_is_one_line_naming_the_bundle(tmp_path_factory, seed, n):
    d = tmp_path_factory.mktemp("b") / "low"
    shutil.copytree(LOW_BUNDLE, d)
    m = json.loads((d / "manifest.json").read_text())
    rng = random.Random(seed)
    (d / "manifest.json").write_text(json.dumps(mutate(m, rng, n), allow_nan=True))
    assert check_bundle(d) is None


# ---- found by make fuzz -------------------------------------------------------------------------------------------


def test_a_csv_header_with_a_quoted_line_break_is_still_a_one_line_error(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text('traceid,"time\nstamp",um,dm,rt\n1,2,a,b,3\n')
    assert check_table(read_alibaba, f) is None
    assert check_table(read_spans, f) is None


def test_normalization_beyond_float32_is_refused_without_a_warning(tmp_path):
    d = tmp_path / "low"
    shutil.copytree(LOW_BUNDLE, d)
    m = json.loads((d / "manifest.json").read_text())
    key = next(iter(m["normalization"]))
    m["normalization"][key]["std"] = [1e39] * len(m["normalization"][key]["std"])
    (d / "manifest.json").write_text(json.dumps(m))
    from policy.lowlevel import LearnedPlacement

    with pytest.raises(ValueError, match="float32 range"):
        LearnedPlacement.load(d)
