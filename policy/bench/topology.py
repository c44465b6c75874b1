"""``make bench-topology``: the graph encoder and the embedding cache, measured → section ``topology`` of
BENCHMARKS.md (and ``benchmarks/topology.json``).

1. **Encoder time vs graph size** (100 → 20,000 services, Alibaba-like: heavy-tailed fan-out, about three
   calls per service, every service and call measured), numpy on one core (BLAS threads pinned to 1):
   featurize, encode, fingerprint, median of ``--repeats`` runs.
2. **gRPC Get latency** for 1,000 services × 32 dims against ``hrl-policy cache serve`` in its own process:
   full reads, not-modified reads, puts; p50/p99 over ``--calls`` calls.
3. **Held-out error of the pre-training objective** of the committed encoder bundle, recomputed here with
   numpy on freshly generated held-out scenarios (same seeds as training: new synthetic graphs, and the
   applications never seen in training), next to predicting the training mean and (from the bundle's
   training record) the same network without message passing.

No torch needed. ``python -m policy.bench.topology [--quick] [--no-write]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["ROOT", "SIZES", "alibaba_like_graph", "bench_encoder", "bench_grpc", "bench_heldout", "markdown", "main"]

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # one core, before numpy loads
    os.environ.setdefault(_v, "1")


import numpy as np  # noqa: E402
from tabulate import tabulate  # noqa: E402

from policy.cache import CacheUnavailable, GrpcEmbeddingCache, fingerprint  # noqa: E402
from policy.encoder import DEFAULT_ENCODER_BUNDLE, GraphEncoder, ServiceStats, featurize_graph  # noqa: E402
from policy.state import ServiceEdge, ServiceGraph  # noqa: E402
from policy.train.encoder_data import error_table, heldout_sets, load_builtin_apps  # noqa: E402

from .markdown import write_section  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SIZES = (100, 1000, 5000, 20000)


def alibaba_like_graph(n: int, seed: int = 0) -> tuple[ServiceGraph, dict[str, ServiceStats]]:
    """``n`` services, each (but the ~2% entries) called by 1 + Poisson-ish extra callers drawn with a
    heavy-tailed preference (a few hubs, as in the Alibaba traces), ~3 calls per service; every edge and
    service measured."""
    rng = np.random.default_rng(seed)
    names = [f"ms-{i:05d}" for i in range(n)]
    pop = rng.pareto(1.2, n) + 1.0
    n_entry = max(1, n // 50)
    edges = []
    for b in range(n_entry, n):
        k = 1 + rng.poisson(2.0)
        p = pop[:b] / pop[:b].sum()
        for a in set(rng.choice(b, size=min(k, b), p=p).tolist()):
            edges.append(
                ServiceEdge(
                    names[a],
                    names[b],
                    rps=float(rng.lognormal(2, 1)),
                    calls_per_request=float(rng.lognormal(0, 0.5)),
                    latency_p95_ms=float(rng.lognormal(1.5, 1)),
                    error_rate=float(rng.beta(1, 200)),
                )
            )
    g = ServiceGraph.build(names, edges, source="bench")
    stats = {
        s: ServiceStats(
            replicas=float(rng.integers(1, 6)),
            cpu_request_m=200.0,
            memory_request_bytes=2.0**28,
            cpu_limit_m=1000.0,
            cpu_usage_m=float(rng.lognormal(4, 1)),
            slo_p95_ms=500.0,
        )
        for s in names
    }
    return g, stats


def bench_encoder(enc: GraphEncoder, sizes, repeats: int) -> list[dict[str, Any]]:
    rows = []
    for n in sizes:
        g, stats = alibaba_like_graph(n)
        tf, te, tp = [], [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            a = featurize_graph(g, stats)
            t1 = time.perf_counter()
            z = enc.encode(a)
            t2 = time.perf_counter()
            fingerprint(g)
            t3 = time.perf_counter()
            tf.append(t1 - t0)
            te.append(t2 - t1)
            tp.append(t3 - t2)
        assert z.shape == (n, enc.embedding_dim) and np.all(np.isfinite(z))
        rows.append(
            {
                "services": n,
                "edges": len(g.edges),
                "featurize_s": float(np.median(tf)),
                "encode_s": float(np.median(te)),
                "total_s": float(np.median(np.add(tf, te))),
                "fingerprint_s": float(np.median(tp)),
            }
        )
        print(
            f"encoder: {n} services, {len(g.edges)} edges: featurize {rows[-1]['featurize_s']:.3f} s, "
            f"encode {rows[-1]['encode_s']:.3f} s",
            file=sys.stderr,
        )
    return rows


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bench_grpc(n_services: int = 1000, dim: int = 32, calls: int = 1000) -> dict[str, Any]:
    port = _free_port()
    addr = f"127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "policy.cli", "cache", "serve", "--listen", addr, "--log-level", "WARNING"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        t0 = time.monotonic()
        with GrpcEmbeddingCache(addr, 5.0) as c:
            while True:
                try:
                    c.health()
                    break
                except CacheUnavailable:
                    if time.monotonic() - t0 > 10 or proc.poll() is not None:
                        raise RuntimeError("cache serve did not come up") from None
                    time.sleep(0.05)
            startup_s = time.monotonic() - t0
            m = np.random.default_rng(0).normal(size=(n_services, dim)).astype(np.float32)
            names = [f"svc-{i:04d}" for i in range(n_services)]
            put, get, nm = [], [], []
            for _ in range(20):  # warm up the channel
                c.put("bench", names, m)
                c.get("bench")
            for _ in range(max(1, calls // 10)):
                t = time.perf_counter()
                e = c.put("bench", names, m)
                put.append(time.perf_counter() - t)
            for _ in range(calls):
                t = time.perf_counter()
                r = c.get("bench")
                get.append(time.perf_counter() - t)
            assert r.entry is not None and r.entry.matrix.shape == (n_services, dim)
            for _ in range(calls):
                t = time.perf_counter()
                c.get("bench", known_version=e.version)
                nm.append(time.perf_counter() - t)
    finally:
        proc.terminate()
        proc.wait(10)

    def pct(xs, q):
        return float(np.percentile(np.array(xs) * 1000.0, q))

    return {
        "services": n_services,
        "dim": dim,
        "calls": calls,
        "payload_bytes": n_services * dim * 4,
        "startup_to_serving_s": startup_s,
        "get_p50_ms": pct(get, 50),
        "get_p99_ms": pct(get, 99),
        "get_not_modified_p50_ms": pct(nm, 50),
        "get_not_modified_p99_ms": pct(nm, 99),
        "put_p50_ms": pct(put, 50),
        "put_p99_ms": pct(put, 99),
    }


def bench_heldout(enc: GraphEncoder, quick: bool) -> dict[str, Any]:

    meta = enc.bundle.metadata
    cfg = meta.get("config", {})
    held = load_builtin_apps(only=tuple(meta.get("holdout_apps", ())))
    n_syn = 60 if quick else int(cfg.get("n_val_synthetic", 300))
    n_app = 30 if quick else int(cfg.get("n_val_per_app", 150))
    sets = heldout_sets(int(cfg.get("seed", 0)), n_syn, n_app, held, tuple(cfg.get("size_range", (4, 40))))
    mean = np.array(enc.target_mean, np.float32)
    out: dict[str, Any] = {"encoder": {}, "mean": {}, "rows": {}}
    for name, ss in sets.items():
        preds = [enc.predict(s.arrays) for s in ss]
        means = [np.broadcast_to(mean, s.targets.shape) for s in ss]
        out["rows"][name] = int(sum(len(s.targets) for s in ss))
        for subset in ("all", "unmeasured"):
            out["encoder"][f"{name}/{subset}"] = error_table(preds, ss, subset)
            out["mean"][f"{name}/{subset}"] = error_table(means, ss, subset)
    out["no_graph_from_training"] = meta.get("ablation_no_graph")
    return out


def markdown(enc: GraphEncoder, enc_rows, grpc_res, held) -> str:

    meta = enc.bundle.metadata
    lines = [
        "Graph encoder and topology embedding cache (`make bench-topology`, `python -m policy.bench.topology`).",
        f"Machine: {platform.machine()}, Python {platform.python_version()}, numpy {np.__version__}, one core "
        "(BLAS threads = 1). Encoder bundle `policy/bundles/encoder` "
        f"({enc.version}, {meta.get('parameters', '?')} parameters, {enc.layers} message-passing layers, "
        f"{enc.embedding_dim} dims).",
        "",
        "**Encoder time vs graph size** (Alibaba-like graphs, every service and call measured; median of runs):",
        "",
        tabulate(
            [
                [
                    r["services"],
                    r["edges"],
                    f"{r['featurize_s']:.3f}",
                    f"{r['encode_s']:.3f}",
                    f"{r['total_s']:.3f}",
                    f"{r['fingerprint_s']:.3f}",
                ]
                for r in enc_rows
            ],
            headers=["services", "edges", "featurize s", "encode s", "total s", "fingerprint s"],
            tablefmt="github",
            disable_numparse=True,
        ),
        "",
        f"**gRPC cache latency** ({grpc_res['services']} services x {grpc_res['dim']} dims = "
        f"{grpc_res['payload_bytes'] // 1024} KiB per entry; `hrl-policy cache serve` in its own process on "
        f"127.0.0.1, {grpc_res['calls']} calls; serving {grpc_res['startup_to_serving_s']:.2f} s after start):",
        "",
        tabulate(
            [
                ["Get (full entry)", f"{grpc_res['get_p50_ms']:.2f}", f"{grpc_res['get_p99_ms']:.2f}"],
                [
                    "Get (not modified)",
                    f"{grpc_res['get_not_modified_p50_ms']:.2f}",
                    f"{grpc_res['get_not_modified_p99_ms']:.2f}",
                ],
                ["Put", f"{grpc_res['put_p50_ms']:.2f}", f"{grpc_res['put_p99_ms']:.2f}"],
            ],
            headers=["call", "p50 ms", "p99 ms"],
            tablefmt="github",
            disable_numparse=True,
        ),
        "",
        "**Pre-training objective, held-out error** (numpy serving on new scenarios; apps never seen in training: "
        f"{', '.join(meta.get('holdout_apps', [])) or 'none'}; trained on "
        f"{', '.join(meta.get('train_apps', [])) or 'no built-in app'} + synthetic graphs). Per service, "
        "targets in log1p units: CPU millicores and mean response time (ms, calls included) now, at 1.5x load, "
        "and with every call on one node. MAE = mean |error| in log1p units (0.1 ~ 10%); rel = median relative "
        "error; `unmeasured` = services whose own metrics the encoder did not see.",
        "",
    ]
    rows = []
    abl = held.get("no_graph_from_training") or {}
    for key, table in held["encoder"].items():
        for t, m in table.items():
            b = held["mean"][key][t]
            a = abl.get(key, {}).get(t) if isinstance(abl, dict) else None
            rows.append(
                [
                    key,
                    t,
                    f"{m['mae_log']:.3f}",
                    f"{100 * m['median_rel_err']:.0f}%",
                    f"{m['r2']:.2f}",
                    f"{a['mae_log']:.3f}" if a else "-",
                    f"{b['mae_log']:.3f}",
                ]
            )
    lines.append(
        tabulate(
            rows,
            headers=["held-out set", "target", "MAE", "rel", "R2", "no-graph MAE", "mean-pred MAE"],
            tablefmt="github",
            disable_numparse=True,
        )
    )
    lines.append("")
    lines.append(
        "`no-graph` = the same network with 0 message-passing layers trained on the same data (from the "
        "bundle's training record); `mean-pred` = predicting the training mean."
    )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m policy.bench.topology", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer repeats and held-out scenarios")
    p.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    p.add_argument("--bundle", default=str(DEFAULT_ENCODER_BUNDLE))
    a = p.parse_args(argv)
    enc = GraphEncoder.load(a.bundle)
    enc_rows = bench_encoder(enc, SIZES, 1 if a.quick else 3)
    grpc_res = bench_grpc(calls=200 if a.quick else 1000)
    print(f"grpc: get p50 {grpc_res['get_p50_ms']:.2f} ms, p99 {grpc_res['get_p99_ms']:.2f} ms", file=sys.stderr)
    held = bench_heldout(enc, a.quick)
    md = markdown(enc, enc_rows, grpc_res, held)
    print(md)
    if not a.no_write:
        write_section("topology", md)
        out = ROOT / "benchmarks"
        out.mkdir(exist_ok=True)
        (out / "topology.json").write_text(
            json.dumps({"encoder": enc_rows, "grpc": grpc_res, "heldout": held}, indent=1) + "\n", encoding="utf-8"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
