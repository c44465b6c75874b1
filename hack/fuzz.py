#!/usr/bin/env python3
"""``make fuzz``: generated hostile inputs against a running ``hrl-extender`` (over HTTP only) and every input
parser (configurations, snapshots, span and Alibaba tables, call-graph sources, policy bundles), reporting 5xx
answers, crashes (a dead extender, a parser raising anything but its documented one-line error), hangs (no
answer within ``--timeout`` seconds) and the slowest inputs. The figures go to the ``fuzz`` section of
BENCHMARKS.md (``policy.bench.markdown.write_section``) unless ``--no-write``.

Usage: ``hack/fuzz.py [--total N] [--seed S] [--timeout S] [--connection-seconds S] [--connections N,N...]
[--only TARGET,...] [--no-uvicorn] [--no-write] [--json PATH]``.
``--total`` (default 100,000) is split 60 % HTTP requests, 40 % files for the parsers (configurations, snapshots,
tables, 30 % of them gzip-compressed and often damaged, call-graph sources, bundles, and ``app build`` on a small
app whose files are damaged). The inputs are mutations of the repository's own fixtures (tests/fuzzing.py: wrong
types, huge and non-finite numbers, lone surrogates, deep nesting, cut and duplicated text, bytes that are not
UTF-8) plus raw random bytes, other paths and methods. Then the connection phases (``--connection-seconds`` each,
0 = none; :func:`fuzz_connections`): held connections (a body or headers that never end) and 32-512 keep-alive
connections at 10x the extender's sequential capacity, from ``hack/extender-load`` (Go; built into the cache),
with the liveness probe on the extender's health port (``listen.healthPort``, where the chart's probes go; the
serving port's ``/livez`` is measured beside it); their requests are counted too. ``--only`` runs some targets
(http, configs, snapshots, tables, graph, bundles, app, connections; the others are skipped, ``--total`` still
split as above), ``--connections`` the overload phases at these connection counts only. Exit status 0 when nothing
beyond the documented 4xx was found, 1 otherwise.
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
from dataclasses import dataclass
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
    check_app_build,
    check_bundle,
    check_config,
    check_graph_source,
    check_reply,
    check_snapshot,
    check_table,
    damage_gzip,
    mutate,
    mutate_text,
    random_json,
    write_small_app,
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


def start_extender(workdir: Path, snapshot: Path | None = None) -> tuple[subprocess.Popen, str, str]:
    """``hrl-extender`` with the shipped limits on a free port of 127.0.0.1 and its probes' listener
    (``listen.healthPort``, as the chart ships it) on another, serving ``snapshot`` (default: the Online Boutique
    fixture); returns ``(process, serving URL, health URL)`` once ``/readyz`` answers 200. One limit differs:
    ``maxConnectionsPerClient: 0`` (no per-address bound; shipped: 64), since every connection of the load comes
    from 127.0.0.1, standing for many clients."""
    port, health = _free_port(), _free_port()
    while health == port:
        health = _free_port()
    cfg = workdir / "extender.yaml"
    snap = snapshot or ROOT / "tests" / "fixtures" / "extender" / "cluster-list.json"
    cfg.write_text(
        "apiVersion: hrl-scheduler.io/v1alpha1\nkind: ExtenderConfiguration\n"
        f"listen: {{host: 127.0.0.1, port: {port}, healthPort: {health}}}\n"
        f"snapshotFile: {snap}\nlogLevel: ERROR\nlimits: {{maxConnectionsPerClient: 0}}\n"
    )
    proc, url = _spawn(
        "hrl-extender", [sys.executable, "-m", "extender", "--config", str(cfg)], workdir / "extender.log", port
    )
    return proc, url, f"http://127.0.0.1:{health}"


def _spawn(
    name: str, cmd: list[str], log: Path, port: int, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen, str]:
    """Start ``cmd`` (the server ``name`` on ``port`` of 127.0.0.1, stderr to ``log``) and wait until its
    ``/readyz`` answers 200; exits the harness with the log's end when it dies or takes over a minute."""
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{name} did not start: {log.read_text()[-2000:]}")
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
    proc, url, _ = start_extender(workdir)
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
                        proc, url, _ = start_extender(workdir)
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
        if "charts" in f.parts:  # the chart's templates and files are Helm templates: base/, overlays/ are rendered
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

    rep = Report("call-graph tables (span CSV, Alibaba CSV; 30 % gzip, intact or damaged)")
    seeds = []
    for reader, folder in ((read_spans, "online-boutique-spans"), (read_alibaba, "alibaba")):
        for f in sorted((ROOT / "tests" / "fixtures" / folder).rglob("*.csv")):
            lines = f.read_text(encoding="utf-8").splitlines()[:40]
            if len(lines) > 1:
                seeds.append((reader, lines))
    for i in range(n):
        reader, lines = rng.choice(seeds)
        raw = _table_text(rng, lines)
        what = f"{reader.__name__} #{i}"
        if rng.random() < 0.3:  # gzip-compressed, intact or damaged (issue 26 item 4)
            raw, how = damage_gzip(raw, rng)
            f = d / f"t{i % 4}.csv.gz"
            what += f" (gzip, {how})"
            rep.outcomes["of which gzip"] += 1
        else:
            f = d / f"t{i % 4}.csv"
        f.write_bytes(raw)
        run_parser(rep, lambda f=f, r=reader: check_table(r, f), what, timeout_s)
        f.unlink()
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


_APP_CELLS = ["", "x", "-1", "-5", "0", "1e308", "1e400", "inf", "-inf", "nan", "1" + "0" * 60, "9" * 30, "1e-300", "é"]


def _mutate_csv(path: Path, rng: random.Random) -> str:
    """One change to a CSV file of the app: a cell, a row dropped or doubled, a header renamed. Returns what."""
    lines = path.read_text(encoding="utf-8").splitlines()
    r = rng.random()
    if r < 0.7 and len(lines) > 1:
        i = rng.randrange(1, len(lines))
        cells = lines[i].split(",")
        j = rng.randrange(len(cells))
        cells[j] = rng.choice(_APP_CELLS)
        lines[i] = ",".join(cells)
        what = f"{path.name}:{i + 1} cell {j} = {cells[j][:20]!r}"
    elif r < 0.85 and len(lines) > 2:
        i = rng.randrange(1, len(lines))
        what = f"{path.name}: row {i + 1} " + ("dropped" if rng.random() < 0.5 else "doubled")
        lines = lines[:i] + ([] if "dropped" in what else [lines[i], lines[i]]) + lines[i + 1 :]
    else:
        cells = lines[0].split(",")
        j = rng.randrange(len(cells))
        cells[j] = cells[j] + "_x"
        lines[0] = ",".join(cells)
        what = f"{path.name}: header {j} renamed"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return what


def fuzz_app_build(n: int, rng: random.Random, d: Path, timeout_s: float) -> Report:
    """``hrl-policy app build`` on a small app whose manifests, spans and metrics are damaged (cells, rows,
    headers, gzip), checked by ``check_app_build``: a loadable app, or one-line errors naming a file and nothing
    left behind (issue 26 item 5)."""
    import yaml

    rep = Report("app build inputs (manifests, spans, metrics; cells, rows, headers, gzip)")
    seed = d / "app-seed"
    write_small_app(seed)
    for i in range(n):
        w = d / f"app{i % 2}"
        shutil.rmtree(w, ignore_errors=True)
        shutil.copytree(seed, w)
        inputs = {"manifests": w / "manifests", "spans": w / "spans", "metrics": w / "metrics"}
        whats = []
        for _ in range(rng.randint(1, 3)):
            r = rng.random()
            if r < 0.75:
                f = rng.choice([w / "spans/spans.csv", w / "metrics/pods.csv", w / "metrics/latency.csv"])
                if f.exists():
                    whats.append(_mutate_csv(f, rng))
            elif r < 0.85:
                f = rng.choice([w / "spans/spans.csv", w / "metrics/pods.csv"])
                if f.exists():
                    raw, how = damage_gzip(f.read_bytes(), rng)
                    f.with_name(f.name + ".gz").write_bytes(raw)
                    f.unlink()
                    whats.append(f"{f.name}.gz {how}")
            elif r < 0.95:
                m = w / "manifests/app.yaml"
                docs = [x for x in yaml.safe_load_all(m.read_text()) if x is not None]
                docs = [mutate(x, rng, 1) for x in docs]
                m.write_text(yaml.safe_dump_all(docs, allow_unicode=True))
                whats.append("manifests mutated")
            else:
                inputs.pop("metrics", None)  # several mutations of one input may each drop it
                whats.append("no metrics")
        out = w / "out" / "app"
        out.parent.mkdir()
        what = f"app build #{i}: " + "; ".join(whats)
        run_parser(
            rep,
            lambda inputs=inputs, out=out: check_app_build(inputs, out, iterations=1, checks=False),
            what,
            timeout_s,
        )
    return rep


# ---- the extender under load: held connections, 32-512 connections (issue 26 items 1 and 2) -------------------------

#: Connections of the overload phases; each sends LOAD_FACTOR x the sequential capacity.
CONNECTIONS = (32, 64, 128, 256, 512)
LOAD_FACTOR = 10
#: What ``--only`` names (the first word of each target).
TARGETS = ("http", "configs", "snapshots", "tables", "graph", "bundles", "app", "connections")
#: kube-scheduler's httpTimeout as shipped, and the chart's liveness probe timeout.
HTTP_TIMEOUT_S = 0.3
PROBE_TIMEOUT_S = 2.0


def build_load_generator() -> Path:
    """hack/extender-load (Go standard library only), built into the cache ($HRL_CP_CACHE or
    ~/.cache/hrl-scheduler) under the hash of its source, so that checkouts of other versions never share a binary."""
    import hashlib

    src = ROOT / "hack" / "extender-load"
    digest = hashlib.sha256(b"".join(f.read_bytes() for f in sorted(src.iterdir()) if f.is_file())).hexdigest()[:12]
    cache = Path(os.environ.get("HRL_CP_CACHE") or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")))
    base = cache if os.environ.get("HRL_CP_CACHE") else cache / "hrl-scheduler"
    out = base / f"extender-load-{digest}" / "extender-load"
    if out.exists():
        return out
    if shutil.which("go") is None:
        raise SystemExit("fuzz: the connection phases need Go to build hack/extender-load (make controlplane needs it)")
    out.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
    subprocess.run(["go", "build", "-trimpath", "-o", str(out), "."], cwd=src, env=env, check=True)
    return out


def overload_cluster(workdir: Path) -> tuple[Path, Path]:
    """A 500-node synthetic snapshot (policy.bench.synthetic_cluster: 2,000 pods of 400 services calling each other
    through depends-on annotations) and 64 prioritize bodies, each a pending pod of the snapshot's services with 230
    candidates drawn at random (the issue's case)."""
    from extender.wire import encode_json
    from policy.bench.synthetic_cluster import SyntheticCluster, write_snapshot

    snap = write_snapshot(
        SyntheticCluster(nodes=500, pods_per_node=4, pods_per_service=5, seed=3), workdir / "s500.json"
    )
    doc = json.loads(snap.read_text())
    nodes = [o["metadata"]["name"] for o in doc["items"] if o["kind"] == "Node"]
    pods = [o for o in doc["items"] if o["kind"] == "Pod"]
    rng = random.Random(1)
    bodies = workdir / "req230.jsonl"
    with bodies.open("wb") as f:
        for k in range(64):
            p = json.loads(json.dumps(rng.choice(pods)))
            p.pop("kind", None)
            p.pop("apiVersion", None)
            p["metadata"]["name"] += f"-new{k}"
            p["metadata"]["uid"] += f"-new{k}"
            p["spec"].pop("nodeName")
            p["status"] = {"phase": "Pending"}
            f.write(encode_json({"Pod": p, "Nodes": None, "NodeNames": rng.sample(nodes, 230)}) + b"\n")
    return snap, bodies


def _outcomes(url: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(httpx.get(url + "/metrics", timeout=30).text):
        for smp in fam.samples:
            if smp.name == "hrl_extender_prioritize_total":
                out[smp.labels["outcome"]] = smp.value
            elif smp.name == "hrl_extender_http_responses_total":
                out["code_" + smp.labels["code"]] = smp.value
            elif smp.name == "hrl_extender_http_connections_closed_total":
                out["closed_" + smp.labels["reason"]] = smp.value
    return out


def _delta(after: dict[str, float], before: dict[str, float]) -> dict[str, int]:
    return {k: int(v - before.get(k, 0.0)) for k, v in after.items() if v - before.get(k, 0.0)}


def _load(gen: Path, url: str, bodies: Path, *args: str) -> dict:
    r = subprocess.run(
        [str(gen), "-url", url + "/scheduler/prioritize", "-bodies", str(bodies), *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if r.returncode != 0:
        raise SystemExit(f"fuzz: extender-load failed: {r.stderr[-500:]}")
    return json.loads(r.stdout)


UVICORN_SCRIPT = """
import sys
import uvicorn
from prometheus_client import CollectorRegistry
from extender.config import load_extender_config
from extender.server import make_app, uvicorn_config
from extender.startup import prepare
from extender.store import SnapshotStore

config = load_extender_config(sys.argv[1])
store = SnapshotStore()
startup = prepare(config, store)
app = make_app(config, store, startup.policy, CollectorRegistry())
uvicorn.Server(uvicorn_config(app, host="127.0.0.1", port=config.listen.port, log_level="error")).run()
"""


def start_uvicorn(workdir: Path, snapshot: Path) -> tuple[subprocess.Popen, str]:
    """The extender's application with the same configuration, served by uvicorn through its public interface
    (:func:`extender.server.uvicorn_config`: the stack before extender.http), for the comparison."""
    port = _free_port()
    cfg = workdir / "extender-uvicorn.yaml"
    cfg.write_text(
        "apiVersion: hrl-scheduler.io/v1alpha1\nkind: ExtenderConfiguration\n"
        f"listen: {{host: 127.0.0.1, port: {port}}}\nsnapshotFile: {snapshot}\nlogLevel: ERROR\n"
    )
    script = workdir / "uvicorn_extender.py"
    script.write_text(UVICORN_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return _spawn("uvicorn", [sys.executable, str(script), str(cfg)], workdir / "uvicorn.log", port, env)


def _stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def fuzz_connections(
    n: int,
    rng: random.Random,
    workdir: Path,
    durations_s: float,
    phases: list[dict],
    compare: bool = True,
    connections: tuple[int, ...] = CONNECTIONS,
) -> Report:
    """The extender (``hrl-extender`` on the 500-node snapshot) under hostile connections, over the real socket:
    200 connections that declare a 100 kB body, send one byte and stall, then 200 whose headers never end, each
    while real requests are sent (they must be scored, not shed); then ``LOAD_FACTOR`` x the sequential capacity
    over each of ``connections`` keep-alive connections with the liveness probe meanwhile, on the extender's
    health port (where the chart's probes go) and, for the figures only, on its serving port. Findings: a 5xx; a
    reply later than :data:`HTTP_TIMEOUT_S` (client timeouts included); a health-port probe failing or over
    :data:`PROBE_TIMEOUT_S`; a held connection not cut (408) within its timeout; real requests shed while only held
    connections load the server; fewer requests counted by the extender than answered. ``n``: about how many
    requests to send in all. Each phase's figures are appended to ``phases``; with ``compare``, the same phases
    against the application served by uvicorn (:func:`start_uvicorn`; no health port: the probe on its serving
    port) follow, figures only (no findings: uvicorn has no read timeouts and cannot see the time a request waited
    in its socket)."""
    rep = Report("extender connections (held: slow body, slow headers; 32-512 connections at 10x capacity)")
    gen = build_load_generator()
    snap, bodies = overload_cluster(workdir)
    load = _Load(gen, bodies, n, durations_s, connections)
    proc, url, health = start_extender(workdir, snapshot=snap)
    try:
        _connection_phases(rep, load, url, health, phases, "hrl-extender (extender.http)")
        if proc.poll() is not None:
            rep.finding("crash", f"hrl-extender exited with {proc.returncode}")
    finally:
        _stop(proc)
    if compare:
        proc, url = start_uvicorn(workdir, snap)
        try:
            _connection_phases(Report("uvicorn"), load, url, None, phases, "uvicorn (public API)")
        finally:
            _stop(proc)
    return rep


@dataclass(frozen=True)
class _Load:
    """What the connection phases send: the load generator, the request bodies, about ``n`` requests in all,
    ``durations_s`` per phase at most, the overload phases' ``connections``."""

    gen: Path
    bodies: Path
    n: int
    durations_s: float
    connections: tuple[int, ...]


def _connection_phases(rep: Report, load: _Load, url: str, health: str | None, phases: list[dict], server: str) -> None:
    """The phases of :func:`fuzz_connections` against one server (``url``; ``health``: its probes' listener, or
    ``None`` when it has none: the probe then goes to ``url``), each phase's figures appended to ``phases``."""
    gen, bodies, n, durations_s, connections = load.gen, load.bodies, load.n, load.durations_s, load.connections
    before = _outcomes(url)
    seq = _load(gen, url, bodies, "-mode", "seq", "-n", "1000", "-warmup", "100")
    out = _delta(_outcomes(url), before)
    rep.inputs += seq["count"] + 100
    capacity = seq["rps"]
    _judge(rep, "sequential", seq, out)
    phases.append(
        {"server": server, "phase": "sequential (the capacity)", "connections": 1, "rps_offered": None}
        | _summary(seq, out)
    )
    per_phase = max(200, n // (2 + len(connections)))
    for stall in ("body", "headers"):
        before = _outcomes(url)
        rps = max(20.0, 0.3 * capacity)
        dur = max(4.0, min(durations_s, per_phase / rps))
        res = _load(gen, url, bodies, "-mode", "slowloris", "-stall", stall, "-conns", "200",
                    "-declared", "100000", "-send", "1", "-rps", f"{rps:.0f}", "-workers", "4",
                    "-duration", f"{dur:.1f}s", "-timeout", f"{HTTP_TIMEOUT_S}s")  # fmt: skip
        out = _delta(_outcomes(url), before)
        sl = res["slowloris"]
        rep.inputs += res["count"] + sl["conns"]
        _judge(rep, f"held ({stall})", res, out)
        shed = out.get("neutral_overload", 0) + out.get("neutral_deadline", 0)
        if shed > 0.01 * max(1, res["count"]):  # scoring switched off (a stray shed: a CPU-starved moment)
            rep.finding("crash", f"held ({stall}): {shed} real requests shed while only held connections loaded it")
        closed = sl["closed_by_server"]
        if closed != sl["conns"] or sl["closed_after_s"]["max"] > 2.0 + 1.0:
            rep.finding(
                "hang",
                f"held ({stall}): {closed}/{sl['conns']} cut, the last after {sl['closed_after_s']['max']:.1f} s",
            )
        rep.outcomes[f"held {stall}: 408"] += sl["answers"].get("HTTP/1.1 408 Request Timeout", 0)
        phases.append({"server": server, "phase": f"held ({stall}): 200 stalled connections", "connections": 4 + 200,
                       "rps_offered": round(rps), **_summary(res, out), "held_cut": closed,
                       "held_cut_after_s": round(sl["closed_after_s"]["max"], 2)})  # fmt: skip
    probes = ([health + "/livez"] if health else []) + [url + "/livez"]  # the kubelet's first, then the serving port
    for conns in connections:
        before = _outcomes(url)
        rps = LOAD_FACTOR * capacity
        dur = max(4.0, min(durations_s, per_phase / rps))
        res = _load(gen, url, bodies, "-mode", "rate", "-rps", f"{rps:.0f}", "-workers", str(conns),
                    "-duration", f"{dur:.1f}s", "-timeout", f"{HTTP_TIMEOUT_S}s",
                    *[a for u in probes for a in ("-probe", u)],
                    "-probe-interval", "100ms", "-probe-timeout", f"{PROBE_TIMEOUT_S}s")  # fmt: skip
        out = _delta(_outcomes(url), before)
        by_url = {pr["url"]: pr for pr in res["probes"]}
        rep.inputs += res["count"] + sum(pr["count"] for pr in by_url.values())
        _judge(rep, f"{conns} connections", res, out)
        kubelet = by_url[probes[0]]  # where the chart's probes go: the health port (the serving port without one)
        where = "the health port" if health else "the serving port"
        if kubelet["failed"] or kubelet["latency_ms"]["max"] > 1000 * PROBE_TIMEOUT_S:
            rep.finding(
                "hang",
                f"{conns} connections: /livez on {where} {kubelet['failed']} failed, "
                f"max {kubelet['latency_ms']['max']:.0f} ms",
            )
        row = {"server": server, "phase": f"{LOAD_FACTOR}x capacity", "connections": conns, "rps_offered": round(rps),
               **_summary(res, out)}  # fmt: skip
        for key, pr in (("livez_health", by_url.get(f"{health}/livez")), ("livez_serving", by_url[url + "/livez"])):
            if pr is not None:
                lat = pr["latency_ms"]
                row |= {f"{key}_p50_ms": round(lat["p50"], 1), f"{key}_p99_ms": round(lat["p99"], 1),
                        f"{key}_max_ms": round(lat["max"], 1), f"{key}_failed": pr["failed"]}  # fmt: skip
        phases.append(row)


def _summary(res: dict, out: dict[str, int]) -> dict:
    """One phase's figures: replies, achieved rate, late, the extender's outcomes, and ``dropped``: requests the
    load client did not send because every one of its connections was waiting for a reply (the offered rate then
    not reached)."""
    return {
        "replies": res["count"],
        "dropped": res.get("dropped", 0),
        "rps": round(res["rps"], 1),
        "late": res["over_timeout"],
        "status": res["status"],
        "scored": out.get("ok", 0),
        "shed": out.get("neutral_overload", 0) + out.get("neutral_deadline", 0),
        "counted": sum(v for k, v in out.items() if not k.startswith(("code_", "closed_"))),
        "p50_ms": round(res["latency_ms"]["p50"], 2),
        "p99_ms": round(res["latency_ms"]["p99"], 2),
        "load_1min": round(os.getloadavg()[0], 1),
    }


def _judge(rep: Report, phase: str, res: dict, out: dict[str, int]) -> None:
    for code, k in res["status"].items():
        rep.outcomes[code] += k
        if code.startswith("5"):
            rep.finding("5xx", f"{phase}: {k} replies {code}")
    if res["over_timeout"]:
        rep.finding("hang", f"{phase}: {res['over_timeout']} of {res['count']} replies later than {HTTP_TIMEOUT_S} s")
    if res["invalid"]:
        rep.finding("crash", f"{phase}: {res['invalid']} malformed 200 replies")
    answered = sum(res["status"].values())
    counted = sum(v for k, v in out.items() if not k.startswith(("code_", "closed_")))
    if counted < answered:
        rep.finding("crash", f"{phase}: the extender counted {counted} requests, the client got {answered} replies")


# ---- report -------------------------------------------------------------------------------------------------------


def phase_table(phases: list[dict]) -> list[str]:
    """The connection phases as a markdown table (:func:`fuzz_connections`)."""
    if not phases:
        return []
    lines = [
        "",
        f"**The extender under load** (`hrl-extender` as shipped on a 500-node snapshot, prioritize requests with "
        f"230 candidates from `hack/extender-load`: Go net/http keep-alive clients with kube-scheduler's "
        f"`httpTimeout` of {HTTP_TIMEOUT_S * 1000:.0f} ms, every connection from 127.0.0.1, so with "
        "`limits.maxConnectionsPerClient: 0`; the liveness probe GETs `/livez` on a fresh connection "
        f"every 100 ms with the chart's {PROBE_TIMEOUT_S:.0f} s timeout, on the extender's health port "
        "(`listen.healthPort`: its own thread and event loop, where the chart's probes go) and, for comparison, on "
        "its serving port, which the verbs load; *failed*: probes not answered 200 within the timeout). "
        "*dropped*: requests the load client did not send because every one of its connections was waiting for a "
        f"reply (the offered rate not reached); *late*: replies after {HTTP_TIMEOUT_S:g} s "
        "(client timeouts included); *scored* / *shed*: the extender's own counts of the phase (shed: answered "
        "neutral at once, `neutral_overload` + `neutral_deadline`); *counted*: requests the extender counted by "
        "outcome. Rows `uvicorn (public API)`: the same application and configuration served by uvicorn through its "
        "public options (`extender.server.uvicorn_config`, the stack before `extender/http.py`), for comparison "
        "only (no findings).",
        "",
        "| server | phase | connections | offered req/s | replies | dropped | req/s | late | 5xx | scored | shed | "
        "counted | p50 / p99 (ms) | /livez, health port: p50 / p99 / max (ms), failed | "
        "/livez, serving port: p50 / p99 / max (ms), failed | load (1 min) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|---:|",
    ]
    for ph in phases:
        fivexx = sum(v for k, v in ph["status"].items() if k.startswith("5"))
        livez = {
            key: f"{ph[key + '_p50_ms']:.0f} / {ph[key + '_p99_ms']:.0f} / {ph[key + '_max_ms']:.0f}, "
            f"{ph[key + '_failed']}"
            if key + "_p50_ms" in ph
            else "-"
            for key in ("livez_health", "livez_serving")
        }
        held = f" (cut {ph['held_cut']}/200, the last after {ph['held_cut_after_s']} s)" if "held_cut" in ph else ""
        offered = f"{ph['rps_offered']:,}" if ph["rps_offered"] is not None else "-"
        lines.append(
            f"| {ph.get('server', '')} | {ph['phase']}{held} | {ph['connections']} | {offered} | {ph['replies']:,} | "
            f"{ph.get('dropped', 0):,} | {ph['rps']:,.0f} | "
            f"{ph['late']:,} | {fivexx} | {ph['scored']:,} | {ph['shed']:,} | {ph['counted']:,} | "
            f"{ph['p50_ms']:.1f} / {ph['p99_ms']:.1f} | {livez['livez_health']} | {livez['livez_serving']} | "
            f"{ph['load_1min']} |"
        )
    return lines


def markdown(
    reports: list[Report], seed: int, wall_s: float, load: tuple[float, float, float], phases: list[dict] | None = None
) -> str:
    total = sum(r.inputs for r in reports)
    bad = sum(r.server_errors + r.crashes + r.hangs for r in reports)
    lines = [
        "## Fuzzing (`make fuzz`)",
        "",
        f"{total:,} generated inputs (seed {seed}) in {wall_s / 60:.1f} min: a running `hrl-extender` over HTTP "
        "(hostile requests, held connections, 32-512 connections at 10x its capacity) and every input parser "
        "in-process, `app build` included (`hack/fuzz.py`; inputs and oracles in `tests/fuzzing.py`). "
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
        "lines, does not name the file, or (snapshots) is the generic safety-net line instead of naming the field; "
        "for `app build`, also a failed build that leaves anything behind. "
        "HTTP: any 5xx, a dropped connection, no answer within the timeout, or a malformed 200 reply; under load, "
        f"any reply later than {HTTP_TIMEOUT_S:g} s, a liveness probe on the health port failing or slower than "
        f"{PROBE_TIMEOUT_S:g} s, "
        "a held connection not cut within its timeout, a real request shed while only held connections load the "
        "extender, or fewer requests counted by the extender than replies received.",
    ]
    lines += phase_table(phases or [])
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="hack/fuzz.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--total", type=int, default=100_000, help="hostile requests and files (60 %% HTTP, 40 %% files)")
    p.add_argument("--seed", type=int, default=13)
    p.add_argument("--timeout", type=float, default=10.0, help="seconds before an input counts as a hang")
    p.add_argument(
        "--connection-seconds",
        type=float,
        default=8.0,
        help="seconds of each connection phase (held connections, 32-512 connections at 10x); 0 = skip them",
    )
    p.add_argument(
        "--connections",
        default=",".join(map(str, CONNECTIONS)),
        metavar="N,N...",
        help="connection counts of the overload phases (default %(default)s)",
    )
    p.add_argument(
        "--only",
        metavar="TARGET,...",
        help=f"run only these targets ({', '.join(TARGETS)}); default: all",
    )
    p.add_argument(
        "--no-uvicorn", action="store_true", help="skip the connection phases against the application under uvicorn"
    )
    p.add_argument("--no-write", action="store_true", help="do not rewrite the fuzz section of BENCHMARKS.md")
    p.add_argument("--json", metavar="PATH", help="write the reports as JSON")
    args = p.parse_args(argv)
    try:
        connections = tuple(int(x) for x in args.connections.split(","))
    except ValueError:
        p.error(f"--connections: expected comma-separated integers, got {args.connections!r}")
    if not connections or min(connections) < 1:
        p.error(f"--connections: every count must be >= 1, got {args.connections!r}")
    only = set(TARGETS) if args.only is None else {x.strip() for x in args.only.split(",")}
    if only - set(TARGETS):
        p.error(f"--only: unknown target(s) {sorted(only - set(TARGETS))}; expected some of {', '.join(TARGETS)}")
    rng = random.Random(args.seed)
    n_http = int(args.total * 0.6)
    rest = args.total - n_http
    shares = {"configs": 0.33, "snapshots": 0.25, "tables": 0.22, "graph": 0.1, "bundles": 0.0875, "app": 0.0125}
    counts = {k: int(rest * v) for k, v in shares.items()}
    counts["configs"] += rest - sum(counts.values())
    t0 = time.monotonic()
    reports = []
    phases: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="hrl-fuzz-") as tmp:
        d = Path(tmp)
        targets: list[tuple[str, Callable[[], Report]]] = [
            ("http", lambda: fuzz_http(n_http, rng, d, args.timeout)),
            ("configs", lambda: fuzz_configs(counts["configs"], rng, d, args.timeout)),
            ("snapshots", lambda: fuzz_snapshots(counts["snapshots"], rng, d, args.timeout)),
            ("tables", lambda: fuzz_tables(counts["tables"], rng, d, args.timeout)),
            ("graph", lambda: fuzz_graph_sources(counts["graph"], rng, d, args.timeout)),
            ("bundles", lambda: fuzz_bundles(counts["bundles"], rng, d, args.timeout)),
            ("app build", lambda: fuzz_app_build(counts["app"], rng, d, args.timeout)),
        ]
        if args.connection_seconds > 0:
            targets.append(
                (
                    "connections",
                    lambda: fuzz_connections(
                        int(args.connection_seconds * 4000),
                        rng,
                        d,
                        args.connection_seconds,
                        phases,
                        compare=not args.no_uvicorn,
                        connections=connections,
                    ),
                )
            )
        targets = [(name, fn) for name, fn in targets if name.split()[0] in only]
        for name, fn in targets:
            t = time.monotonic()
            rep = fn()
            reports.append(rep)
            bad = rep.server_errors + rep.crashes + rep.hangs
            print(
                f"fuzz: {name}: {rep.inputs} inputs, {bad} finding(s) in {time.monotonic() - t:.0f} s", file=sys.stderr
            )
    wall = time.monotonic() - t0
    text = markdown(reports, args.seed, wall, os.getloadavg(), phases)
    print(text)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                [{**r.to_json(), "phases": phases if r.name.startswith("extender conn") else None} for r in reports],
                indent=1,
            )
        )
    if not args.no_write:
        from policy.bench.markdown import write_section

        write_section("fuzz", text)
    return 1 if any(r.server_errors + r.crashes + r.hangs for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
