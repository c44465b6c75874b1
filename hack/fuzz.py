#!/usr/bin/env python3
"""``make fuzz``: generated hostile inputs against a running ``hrl-extender`` (over HTTP only) and every input
parser (configurations, snapshots, span and Alibaba tables, call-graph sources, policy bundles), reporting 5xx
answers, crashes (a dead extender, a parser raising anything but its documented one-line error), hangs (no
answer within ``--timeout`` seconds) and the slowest inputs. The figures go to the ``fuzz`` section of
BENCHMARKS.md (``policy.bench.markdown.write_section``) unless ``--no-write``.

Usage: ``hack/fuzz.py [--total N] [--seed S] [--timeout S] [--no-write] [--json PATH]``. ``--total`` (default
100,000) is split 60 % HTTP requests, 40 % files for the parsers. The inputs are mutations of the repository's
own fixtures (tests/fuzzing.py: wrong types, huge and non-finite numbers, lone surrogates, deep nesting, cut and
duplicated text, bytes that are not UTF-8) plus raw random bytes, other paths and methods. Exit status 0 when
nothing beyond the documented 4xx was found, 1 otherwise.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import httpx
from fuzzing import (
    ARGS_LIST_SEED,
    ARGS_SEED,
    LOW_BUNDLE,
    SNAPSHOT_SEED,
    check_bundle,
    check_config,
    check_graph_source,
    check_reply,
    check_snapshot,
    check_table,
    mutate,
    mutate_text,
    random_json,
)


class Report:
    """Counts, findings and the slowest inputs of one target."""

    def __init__(self, name: str):
        self.name = name
        self.inputs = 0
        self.outcomes: Counter[str] = Counter()
        self.findings: list[str] = []
        self.hangs = 0
        self.crashes = 0
        self.server_errors = 0
        self.slowest: list[tuple[float, str]] = []  # min-heap of (seconds, description)
        self.surrogate_5xx = 0  # 5xx answers to requests carrying a lone UTF-16 surrogate (issue 13 item 3)
        self.after_5xx = 0  # connections dropped right after a 5xx on the same connection

    def timed(self, seconds: float, what: str) -> None:
        item = (seconds, what[:120])
        if len(self.slowest) < 5:
            heapq.heappush(self.slowest, item)
        elif seconds > self.slowest[0][0]:
            heapq.heapreplace(self.slowest, item)

    def finding(self, kind: str, what: str) -> None:
        if kind == "5xx":
            self.server_errors += 1
        elif kind == "hang":
            self.hangs += 1
        else:
            self.crashes += 1
        if len(self.findings) < 20:
            self.findings.append(f"{kind}: {what[:300]}")

    def to_json(self) -> dict:
        return {
            "target": self.name,
            "inputs": self.inputs,
            "outcomes": dict(self.outcomes),
            "server_errors_5xx": self.server_errors,
            "of_which_lone_surrogate": self.surrogate_5xx,
            "dropped_after_a_5xx": self.after_5xx,
            "crashes": self.crashes,
            "hangs": self.hangs,
            "slowest_ms": [(round(s * 1000, 1), w) for s, w in sorted(self.slowest, reverse=True)],
            "findings": self.findings,
        }


# ---- the extender, over HTTP -----------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_extender(workdir: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    cfg = workdir / "extender.yaml"
    cfg.write_text(
        "apiVersion: hrl-scheduler.io/v1alpha1\nkind: ExtenderConfiguration\n"
        f"listen: {{host: 127.0.0.1, port: {port}}}\n"
        f"snapshotFile: {ROOT / 'tests' / 'fixtures' / 'extender' / 'cluster-list.json'}\nlogLevel: ERROR\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "extender", "--config", str(cfg)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=open(workdir / "extender.log", "w"),
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"hrl-extender did not start: {(workdir / 'extender.log').read_text()[-2000:]}")
        time.sleep(0.1)


def http_inputs(rng: random.Random, seeds: list[dict]) -> tuple[str, str, bytes, object, str]:
    """One request: (method, path, body, the decoded body sent or None, description)."""
    r = rng.random()
    verb = rng.choice(["prioritize", "filter"])
    if r < 0.70:
        doc = mutate(rng.choice(seeds), rng, rng.randint(1, 4), surrogates=rng.random() < 0.1)
        body = json.dumps(doc).encode()
        sur = " (with a lone surrogate)" if b"\\ud83d" in body else ""
        return "POST", f"/scheduler/{verb}", body, doc, f"{verb}: mutated ExtenderArgs{sur}: {body[:160]!r}"
    if r < 0.85:
        text = mutate_text(json.dumps(rng.choice(seeds)), rng)
        return "POST", f"/scheduler/{verb}", text.encode("utf-8", "surrogatepass"), None, f"{verb}: damaged JSON text"
    if r < 0.95:
        raw = rng.randbytes(rng.randint(0, 2000))
        return "POST", f"/scheduler/{verb}", raw, None, f"{verb}: {len(raw)} random bytes"
    method = rng.choice(["GET", "PUT", "DELETE", "POST"])
    path = rng.choice(["/scheduler/prioritize", "/scheduler/filter", "/healthz", "/readyz", "/metrics", "/", "/x"])
    body = json.dumps(random_json(rng)).encode()
    return method, path, body, None, f"{method} {path}"


def fuzz_http(n: int, rng: random.Random, workdir: Path, timeout_s: float) -> Report:
    rep = Report("extender HTTP (prioritize, filter, other paths)")
    seeds = [json.loads(ARGS_SEED.read_text()), json.loads(ARGS_LIST_SEED.read_text())]
    proc, url = start_extender(workdir)
    try:
        last_5xx = False
        with httpx.Client(base_url=url, timeout=timeout_s) as client:
            for i in range(n):
                if i and i % 10_000 == 0:
                    print(f"fuzz: http: {i} requests", file=sys.stderr, flush=True)
                method, path, body, doc, what = http_inputs(rng, seeds)
                rep.inputs += 1
                t0 = time.perf_counter()
                try:
                    resp = client.request(method, path, content=body, headers={"Content-Type": "application/json"})
                except httpx.TimeoutException:
                    rep.finding("hang", what)
                    continue
                except httpx.TransportError as exc:
                    if last_5xx:  # the server closed the connection after its 5xx: the same finding, not a new one
                        rep.after_5xx += 1
                        last_5xx = False
                        continue
                    rep.finding("crash", f"{what}: {type(exc).__name__}: {exc}")
                    if proc.poll() is not None:
                        rep.finding("crash", f"hrl-extender exited with {proc.returncode}; restarted")
                        proc, url = start_extender(workdir)
                        client.base_url = httpx.URL(url)
                    continue
                dt = time.perf_counter() - t0
                rep.timed(dt, what)
                rep.outcomes[str(resp.status_code)] += 1
                last_5xx = resp.status_code >= 500
                if last_5xx and "lone surrogate" in what:
                    rep.surrogate_5xx += 1
                bad = check_reply(
                    path.rsplit("/", 1)[-1] if method == "POST" else "", resp.status_code, resp.content, doc
                )
                if bad:
                    rep.finding("5xx" if resp.status_code >= 500 else "crash", f"{what}: {bad}")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return rep


# ---- the parsers, in this process (a hang is cut by SIGALRM) ----------------------------------------------------


class _Hang(Exception):
    pass


def _alarm(_signum, _frame):
    raise _Hang()


def run_parser(rep: Report, check: Callable[[], str | None], what: str, timeout_s: float) -> None:
    rep.inputs += 1
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    t0 = time.perf_counter()
    try:
        bad = check()
    except _Hang:
        rep.finding("hang", what)
        return
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    rep.timed(time.perf_counter() - t0, what)
    rep.outcomes["finding" if bad else "ok"] += 1
    if bad:
        rep.finding("crash", f"{what}: {bad}")


def _write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    return path


def fuzz_configs(n: int, rng: random.Random, d: Path, timeout_s: float) -> Report:
    import yaml

    from descheduler.config import load_descheduler_config
    from extender.config import load_extender_config

    rep = Report("configurations (ExtenderConfiguration, DeschedulerConfiguration)")
    seeds = []
    kinds = ("ExtenderConfiguration", "DeschedulerConfiguration")
    for f in sorted((ROOT / "manifests").rglob("*.yaml")):
        if "templates" in f.parts:  # the chart's templates are not YAML until Helm renders them
            continue
        for doc in yaml.safe_load_all(f.read_text()):
            if not isinstance(doc, dict):
                continue
            if doc.get("kind") in kinds:
                seeds.append(doc)
            elif doc.get("kind") == "ConfigMap":  # the rendered manifests carry the configurations in ConfigMaps
                for v in (doc.get("data") or {}).values():
                    inner = yaml.safe_load(v)
                    if isinstance(inner, dict) and inner.get("kind") in kinds:
                        seeds.append(inner)
    if not seeds:
        raise SystemExit("fuzz: no ExtenderConfiguration or DeschedulerConfiguration found under manifests/")
    loaders = {"ExtenderConfiguration": load_extender_config, "DeschedulerConfiguration": load_descheduler_config}
    for i in range(n):
        seed = rng.choice(seeds)
        doc = mutate(seed, rng, rng.randint(1, 4))
        text = yaml.safe_dump(doc, allow_unicode=True) if isinstance(doc, (dict, list)) else str(doc)
        if rng.random() < 0.3:
            text = mutate_text(text, rng)
        f = _write(d / f"c{i % 4}.yaml", text)
        run_parser(rep, lambda f=f, k=seed["kind"]: check_config(loaders[k], f), f"{seed['kind']} #{i}", timeout_s)
    return rep


def fuzz_snapshots(n: int, rng: random.Random, d: Path, timeout_s: float) -> Report:
    rep = Report("snapshots (hrl-descheduler --snapshot, extender snapshotFile)")
    seed = json.loads(SNAPSHOT_SEED.read_text())
    for i in range(n):
        text = json.dumps(mutate(seed, rng, rng.randint(1, 5)), allow_nan=True)
        if rng.random() < 0.3:
            text = mutate_text(text, rng)
        f = _write(d / f"s{i % 4}.json", text)
        run_parser(rep, lambda f=f: check_snapshot(f), f"snapshot #{i}", timeout_s)
    return rep


def _table_text(rng: random.Random, seed_lines: list[str]) -> bytes:
    lines = list(seed_lines)
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(lines))
        cells = lines[i].split(",")
        j = rng.randrange(len(cells))
        cells[j] = rng.choice(["", "x", "-1", "1e400", "nan", '"', "a\x00b", "9" * 5000, "é", "\ud83d", "root"])
        lines[i] = ",".join(cells)
    raw = "\n".join(lines).encode("utf-8", "surrogatepass")
    if rng.random() < 0.2:
        k = rng.randrange(len(raw) + 1)
        raw = raw[:k] + rng.choice([b"\xff", b"\xe9", b"\x00", b"\r\n\r\n"]) + raw[k:]
    return raw


def fuzz_tables(n: int, rng: random.Random, d: Path, timeout_s: float) -> Report:
    from policy.topology.alibaba import read_alibaba
    from policy.topology.spans import read_spans

    rep = Report("call-graph tables (span CSV, Alibaba CSV)")
    seeds = []
    for reader, folder in ((read_spans, "online-boutique-spans"), (read_alibaba, "alibaba")):
        for f in sorted((ROOT / "tests" / "fixtures" / folder).rglob("*.csv")):
            lines = f.read_text(encoding="utf-8").splitlines()[:40]
            if len(lines) > 1:
                seeds.append((reader, lines))
    for i in range(n):
        reader, lines = rng.choice(seeds)
        f = d / f"t{i % 4}.csv"
        f.write_bytes(_table_text(rng, lines))
        run_parser(rep, lambda f=f, r=reader: check_table(r, f), f"{reader.__name__} #{i}", timeout_s)
    return rep


def fuzz_graph_sources(n: int, rng: random.Random, d: Path, timeout_s: float) -> Report:
    import yaml

    rep = Report("call-graph sources (manifests, AppGroups; kind detected from content)")
    seeds = []
    for f in sorted(
        [
            *(ROOT / "tests/fixtures/appgroup").glob("*.yaml"),
            *(ROOT / "tests/fixtures/online-boutique-manifests").glob("*.yaml"),
        ]
    ):
        try:
            docs = [x for x in yaml.safe_load_all(f.read_text()) if x is not None]
        except yaml.YAMLError:
            continue
        if docs:
            seeds.append(docs)
    for i in range(n):
        docs = [mutate(x, rng, rng.randint(1, 3)) for x in rng.choice(seeds)]
        text = yaml.safe_dump_all(docs, allow_unicode=True)
        if rng.random() < 0.3:
            text = mutate_text(text, rng)
        f = _write(d / f"g{i % 4}.yaml", text)
        run_parser(rep, lambda f=f: check_graph_source(f), f"graph source #{i}", timeout_s)
    return rep


def fuzz_bundles(n: int, rng: random.Random, d: Path, timeout_s: float) -> Report:
    rep = Report("policy bundles (manifest.json + weights.npz)")
    b = d / "bundle"
    shutil.copytree(LOW_BUNDLE, b)
    manifest = json.loads((LOW_BUNDLE / "manifest.json").read_text())
    weights = (LOW_BUNDLE / "weights.npz").read_bytes()
    for i in range(n):
        text = json.dumps(mutate(manifest, rng, rng.randint(1, 3)), allow_nan=True)
        if rng.random() < 0.2:
            text = mutate_text(text, rng)
        _write(b / "manifest.json", text)
        if rng.random() < 0.2:  # damaged weights too (the manifest's sha256 then refuses them, or not)
            k = rng.randrange(len(weights))
            (b / "weights.npz").write_bytes(weights[:k] + rng.randbytes(rng.randint(0, 8)) + weights[k + 1 :])
        else:
            (b / "weights.npz").write_bytes(weights)
        run_parser(rep, lambda: check_bundle(b), f"bundle #{i}", timeout_s)
    return rep


# ---- report -------------------------------------------------------------------------------------------------------


def markdown(reports: list[Report], seed: int, wall_s: float, load: tuple[float, float, float]) -> str:
    total = sum(r.inputs for r in reports)
    bad = sum(r.server_errors + r.crashes + r.hangs for r in reports)
    lines = [
        "## Fuzzing (`make fuzz`)",
        "",
        f"{total:,} generated inputs (seed {seed}) in {wall_s / 60:.1f} min: a running `hrl-extender` over HTTP and "
        "every input parser, in-process (`hack/fuzz.py`; inputs and oracles in `tests/fuzzing.py`). "
        f"Machine: {os.cpu_count()} CPUs, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} at the end "
        "(shared with other work: latencies are noisy).",
        "",
        "| target | inputs | outcomes | 5xx | crashes | hangs | slowest input (ms) |",
        "|---|---:|---|---:|---:|---:|---|",
    ]
    for r in reports:
        outcomes = ", ".join(f"{k}: {v:,}" for k, v in sorted(r.outcomes.items()))
        slow = sorted(r.slowest, reverse=True)
        slowest = f"{slow[0][0] * 1000:.0f} ({slow[0][1]})" if slow else "-"
        lines.append(
            f"| {r.name} | {r.inputs:,} | {outcomes} | {r.server_errors} | {r.crashes} | {r.hangs} | {slowest} |"
        )
    lines += ["", f"**{bad} finding(s)** beyond the documented 4xx answers and one-line errors."]
    for r in reports:
        if r.server_errors:
            lines.append(
                f"- {r.name}: {r.server_errors} HTTP 5xx, of which {r.surrogate_5xx} to requests carrying a lone "
                f"UTF-16 surrogate (issue 13 item 3, the extender's JSON encoder); {r.after_5xx} connection(s) "
                "dropped right after such a 5xx (not counted again)."
            )
    for r in reports:
        for f in r.findings[:5]:
            shown = f.replace("`", "'")[:250]
            lines.append(f"- {r.name}: `{shown}`")
    lines += [
        "",
        "A parser finding is any exception other than its documented one-line error, or a message that spans "
        "lines, does not name the file, or (snapshots) is the generic safety-net line instead of naming the field. "
        "HTTP: any 5xx, a dropped connection, no answer within the timeout, or a malformed 200 reply.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="hack/fuzz.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--total", type=int, default=100_000, help="inputs in all (60 %% HTTP, 40 %% files)")
    p.add_argument("--seed", type=int, default=13)
    p.add_argument("--timeout", type=float, default=10.0, help="seconds before an input counts as a hang")
    p.add_argument("--no-write", action="store_true", help="do not rewrite the fuzz section of BENCHMARKS.md")
    p.add_argument("--json", metavar="PATH", help="write the reports as JSON")
    args = p.parse_args(argv)
    rng = random.Random(args.seed)
    n_http = int(args.total * 0.6)
    rest = args.total - n_http
    shares = {"configs": 0.35, "snapshots": 0.25, "tables": 0.2, "graph": 0.1, "bundles": 0.1}
    counts = {k: int(rest * v) for k, v in shares.items()}
    counts["configs"] += rest - sum(counts.values())
    t0 = time.monotonic()
    reports = []
    with tempfile.TemporaryDirectory(prefix="hrl-fuzz-") as tmp:
        d = Path(tmp)
        for name, fn, n in (
            ("http", lambda: fuzz_http(n_http, rng, d, args.timeout), n_http),
            ("configs", lambda: fuzz_configs(counts["configs"], rng, d, args.timeout), counts["configs"]),
            ("snapshots", lambda: fuzz_snapshots(counts["snapshots"], rng, d, args.timeout), counts["snapshots"]),
            ("tables", lambda: fuzz_tables(counts["tables"], rng, d, args.timeout), counts["tables"]),
            ("graph", lambda: fuzz_graph_sources(counts["graph"], rng, d, args.timeout), counts["graph"]),
            ("bundles", lambda: fuzz_bundles(counts["bundles"], rng, d, args.timeout), counts["bundles"]),
        ):
            t = time.monotonic()
            rep = fn()
            reports.append(rep)
            bad = rep.server_errors + rep.crashes + rep.hangs
            print(
                f"fuzz: {name}: {rep.inputs} inputs, {bad} finding(s) in {time.monotonic() - t:.0f} s", file=sys.stderr
            )
            del n
    wall = time.monotonic() - t0
    text = markdown(reports, args.seed, wall, os.getloadavg())
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps([r.to_json() for r in reports], indent=1))
    if not args.no_write:
        from policy.bench.markdown import write_section

        write_section("fuzz", text)
    return 1 if any(r.server_errors + r.crashes + r.hangs for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
