"""Every reader of files the components do not control goes through policy.documents (issue 26 items 4 and 6): bad
gzip data (not truncated), a truncated stream, a CRC mismatch, a gzip bomb, bytes that are not UTF-8 are one line
naming the file, in the reader and in every command that reads such a file (hrl-descheduler, hrl-policy graph,
hrl-policy app build, hrl-policy config check), never a traceback; and ``config check`` refuses what the extender
refuses at start."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import pytest
from fuzzing import write_small_app

from policy.documents import FileError, open_text, read_text

ROOT = Path(__file__).resolve().parents[2]
SPANS = ROOT / "tests" / "fixtures" / "online-boutique-spans" / "frontend-spans.csv"
BIN = Path(sys.executable).parent


def gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


def corrupt_deflate(data: bytes) -> bytes:
    """``data`` gzip-compressed, its first deflate block header set to the reserved block type 3: bad deflate data
    (zlib: "invalid block type"), not a cut stream."""
    z = bytearray(gz(data))
    z[10] = 0x07  # after the 10-byte gzip header: BFINAL=1, BTYPE=11
    return bytes(z)


BAD_FILES = {
    "corrupt.csv.gz": (lambda d: corrupt_deflate(d), "corrupt gzip data near byte"),
    "garbled.csv.gz": (lambda d: gz(d)[:200] + b"\xff" * 64 + gz(d)[264:], ""),  # whatever it decodes to: one line
    "truncated.csv.gz": (lambda d: gz(d)[: len(gz(d)) // 2], "truncated gzip file"),
    "crc.csv.gz": (lambda d: gz(d)[:-8] + b"\x00\x00\x00\x00" + gz(d)[-4:], "corrupt gzip data (CRC check failed"),
    "notgzip.csv.gz": (lambda d: d, "not a gzip file"),
    "latin1.csv": (lambda d: d + "x,é\n".encode("latin-1"), "not UTF-8 text: byte 0xe9"),
}


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("bad")
    data = SPANS.read_bytes()
    out = {}
    for name, (make, _) in BAD_FILES.items():
        (d / name).write_bytes(make(data))
        out[name] = d / name
    return out


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_the_reader_names_the_file_and_the_problem_in_one_line(bad_files, name):
    want = BAD_FILES[name][1]
    for read in (lambda p: list(open_text(p)), read_text):
        with pytest.raises(FileError) as exc:
            read(bad_files[name])
        msg = str(exc.value)
        assert msg.startswith(f"{bad_files[name]}: ") and want in msg and "\n" not in msg, msg


def test_a_gzip_bomb_is_refused_past_the_bound_without_holding_it(tmp_path):
    bomb = tmp_path / "bomb.csv.gz"
    bomb.write_bytes(gz(b"a,b\n" + b"1,2\n" * (4 << 20)))  # 16 MiB of text in about 16 KiB
    with pytest.raises(FileError, match=r"bomb\.csv\.gz: decompresses to more than 1048576 bytes"):
        read_text(bomb, max_bytes=1 << 20)
    with (
        pytest.raises(FileError, match=r"decompresses to more than 1048576 bytes"),
        open_text(bomb, max_bytes=1 << 20) as f,
    ):
        for _ in f:
            pass
    assert read_text(tmp_path / "bomb.csv.gz").startswith("a,b\n1,2\n")  # under the default bound: read


def test_a_good_gzip_table_with_a_byte_order_mark_reads_as_its_text(tmp_path):
    f = tmp_path / "t.csv.gz"
    f.write_bytes(gz("\ufeffa,b\n1,é\n".encode()))
    assert read_text(f) == "a,b\n1,é\n" and list(open_text(f)) == ["a,b\n", "1,é\n"]


def run(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*argv], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def one_line(p: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in p.stderr and len(lines) == 1, p.stderr
    return lines[0]


def test_hrl_policy_graph_and_hrl_descheduler_refuse_a_corrupt_gzip_table_in_one_line(bad_files, tmp_path):
    bad = bad_files["corrupt.csv.gz"]
    p = run(str(BIN / "hrl-policy"), "graph", str(bad))
    assert p.returncode == 2 and one_line(p) == f"hrl-policy graph: error: {bad}: " + read_error(bad)
    cfg = tmp_path / "d.yaml"
    cfg.write_text(
        f"apiVersion: hrl-scheduler.io/v1alpha1\nkind: DeschedulerConfiguration\ntopology:\n  sources: [{bad}]\n"
    )
    snap = ROOT / "tests" / "fixtures" / "descheduler" / "cluster-list.json"
    p = run(str(BIN / "hrl-descheduler"), "--config", str(cfg), "--snapshot", str(snap), "--once")
    lines = [ln for ln in p.stderr.splitlines() if "note: --snapshot implies" not in ln and ln.strip()]
    assert p.returncode == 1 and "Traceback" not in p.stderr and len(lines) == 1, p.stderr
    assert lines[0] == f"hrl-descheduler: topology.sources: {bad}: " + read_error(bad)


def read_error(path: Path) -> str:
    with pytest.raises(FileError) as exc:
        read_text(path)
    return str(exc.value).removeprefix(f"{path}: ")


def test_hrl_policy_app_build_refuses_corrupt_compressed_spans_and_metrics_in_one_line(tmp_path):
    inputs = write_small_app(tmp_path)
    metrics = inputs["metrics"] / "pods.csv"
    (inputs["metrics"] / "pods.csv.gz").write_bytes(corrupt_deflate(metrics.read_bytes()))
    metrics.unlink()
    out = tmp_path / "app"
    p = run(str(BIN / "hrl-policy"), "app", "build", "--manifests", str(inputs["manifests"]), "--spans",
            str(inputs["spans"]), "--metrics", str(inputs["metrics"]), "-o", str(out), "--skip-checks")  # fmt: skip
    line = one_line(p)
    assert p.returncode == 2 and line.startswith(f"hrl-policy app build: error: {inputs['metrics'] / 'pods.csv.gz'}")
    assert "corrupt gzip data" in line and not out.exists()
    spans = inputs["spans"] / "spans.csv"
    (inputs["spans"] / "spans.csv.gz").write_bytes(gz(spans.read_bytes())[:-20])
    spans.unlink()
    p = run(str(BIN / "hrl-policy"), "app", "build", "--manifests", str(inputs["manifests"]), "--spans",
            str(inputs["spans"]), "-o", str(out), "--skip-checks")  # fmt: skip
    assert p.returncode == 2 and "spans.csv.gz" in one_line(p) and "truncated gzip file" in p.stderr


def test_config_check_runs_the_extenders_start_up_checks_with_its_sources(tmp_path, bad_files):
    # issue 26 item 6: config check passed files the extender refuses
    snap = ROOT / "tests" / "fixtures" / "extender" / "cluster-list.json"
    broken_snap = tmp_path / "snap.json"
    broken_snap.write_text('{"apiVersion": "v1", "kind": "List", "items": [{"kind": "Pod"}')
    head = "apiVersion: hrl-scheduler.io/v1alpha1\nkind: ExtenderConfiguration\n"
    cases = {
        "both.yaml": (f"snapshotFile: {snap}\nkubernetes: {{enabled: true}}\n", "and kubernetes.enabled are exclusive"),
        "uri.yaml": ('topology: {sources: ["prometheus+istio://host:99999?window=5m"]}\n', "topology.sources: "),
        "gz.yaml": (f"topology: {{sources: [{bad_files['corrupt.csv.gz']}]}}\n", "corrupt gzip data"),
        "snap.yaml": (f"snapshotFile: {broken_snap}\n", f"snapshotFile: {broken_snap}:1: invalid JSON"),
        "desched.yaml": (
            f"topology: {{sources: [{bad_files['truncated.csv.gz']}]}}\n",
            "topology.sources: " + str(bad_files["truncated.csv.gz"]),
        ),
    }
    for name, (body, want) in cases.items():
        f = tmp_path / name
        kind_head = (
            head.replace("ExtenderConfiguration", "DeschedulerConfiguration") if name == "desched.yaml" else head
        )
        f.write_text(kind_head + body)
        p = run(str(BIN / "hrl-policy"), "config", "check", str(f))
        line = one_line(p)
        assert p.returncode == 2 and line.startswith(f"{f}: ") and want in line, (name, line)
        if name != "desched.yaml":  # and the extender refuses the same file at start, with the same line
            e = run(sys.executable, "-m", "extender", "--config", str(f), "--port", "0", timeout=60)
            assert e.returncode == 2 and one_line(e) == line, (name, e.stderr)
    good = tmp_path / "good.yaml"
    good.write_text(head + f"snapshotFile: {snap}\n")
    p = run(str(BIN / "hrl-policy"), "config", "check", str(good))
    assert p.returncode == 0 and p.stdout.strip() == f"ok: ExtenderConfiguration ({good})"


def a_recording(root: Path) -> Path:
    """A recording of one completed step whose objects hold one Node (``policy.recording``'s own writer)."""
    from policy.recording import Manifest, RecordingWriter

    w = RecordingWriter.create(root, Manifest(started_at_s=1_796_315_805.0, step_s=60.0, window_s=60.0))
    w.write_objects(0, [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}], 1_796_315_805.0)
    w.step_done()
    return root


def test_hrl_policy_whatif_refuses_a_recording_with_corrupt_compressed_objects_in_one_line(tmp_path):
    # the recording's reader opened its objects with gzip.open: bad deflate data was a zlib.error traceback
    rec = a_recording(tmp_path / "rec")
    objs = rec / "objects" / "000000.json.gz"
    objs.write_bytes(corrupt_deflate(gzip.decompress(objs.read_bytes())))
    out = tmp_path / "report"
    p = run(str(BIN / "hrl-policy"), "whatif", str(rec), "-o", str(out), "--policy", "default-kube-scheduler")
    assert p.returncode == 2, p.stderr
    line = one_line(p)
    assert line == f"hrl-policy whatif: error: {objs}: {read_error(objs)} (step 0's objects)", line
    assert "corrupt gzip data near byte" in line


def test_every_file_of_a_recording_is_read_through_the_hardened_reader(tmp_path):
    from policy.recording import Recording, RecordingError

    rec = a_recording(tmp_path / "rec")
    r = Recording(rec)
    assert [o["metadata"]["name"] for o in r.objects(0)] == ["n1"] and list(r.rows("pods")) == []
    objs = rec / "objects" / "000000.json.gz"
    cases = {  # file -> (bytes, the one line's end)
        objs: (gz(b'{"items": [], "items": []}'), "step 0's objects: items: duplicate key; each key may appear once"),
        rec / "objects" / "000001.json.gz": (gz(b"[" * 200 + b"]" * 200), "nested deeper than 100 levels"),
        rec / "metrics" / "pods.csv": (b"time_s,pod\n1,caf\xe9\n", "not UTF-8 text: byte 0xe9 near offset"),
        rec / "metrics" / "edges.csv": (b"time_s,caller\n1," + b"x" * (1 << 18) + b"\n", ":2: not CSV: field larger"),
        rec / "shadow" / "extender.jsonl": (b'{"a": 1}\n\xff\n', "not UTF-8 text: byte 0xff"),
    }
    read = {
        objs: lambda: r.objects(0),
        rec / "objects" / "000001.json.gz": lambda: r.objects(1),
        rec / "metrics" / "pods.csv": lambda: list(r.rows("pods")),
        rec / "metrics" / "edges.csv": lambda: r.numeric_rows("edges"),
        rec / "shadow" / "extender.jsonl": lambda: r.shadow_records("extender"),
    }
    for path, (data, want) in cases.items():
        path.write_bytes(data)
        with pytest.raises(RecordingError) as exc:
            read[path]()
        msg = str(exc.value)
        assert msg.startswith(str(path)) and want in msg, msg
        assert "\n" not in msg, msg
    (rec / "shadow" / "descheduler.jsonl").write_bytes(b'{"a": {"a": 1, "a": 2}}\n' + b"[" * 5000 + b"\n{}\n")
    assert r.shadow_records("descheduler") == [{}]  # a duplicate key and a deep line are skipped, as invalid JSON
    (rec / "recording.json").write_text('{"kind": "Recording", "kind": "Recording"}')
    with pytest.raises(RecordingError, match=r"recording\.json: the manifest: kind: duplicate key"):
        Recording(rec)
