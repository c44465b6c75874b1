"""The gRPC embedding cache on real sockets (127.0.0.1): round trip, health, the `cache serve` command, and
the extender/descheduler links (a killed cache server leaves the extender serving from its copy)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from proc_helpers import free_port
from prometheus_client import CollectorRegistry
from waiting import wait_until

from extender.store import SnapshotStore
from policy.cache import (
    SERVICE_NAME,
    CacheClientMetrics,
    CacheRefresher,
    CacheServer,
    CacheTimeout,
    CacheUnavailable,
    GrpcEmbeddingCache,
    fingerprint,
)
from policy.intent import Intent, PendingMove
from policy.state import ServiceEdge, ServiceGraph

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "extender"
ARGS = (FIX / "args-nodecachecapable.json").read_bytes()
NAMES = ["boutique-worker", "boutique-worker2", "boutique-worker3"]


@pytest.fixture()
def server():
    with CacheServer("127.0.0.1:0") as s:
        yield s


def test_embeddings_round_trip_exactly_over_grpc(server):
    reg = CollectorRegistry()
    m = np.random.default_rng(0).normal(size=(1000, 32)).astype(np.float32)
    names = [f"svc-{i}" for i in range(1000)]
    with GrpcEmbeddingCache(server.address, 5.0, CacheClientMetrics(reg)) as c:
        assert not c.get("f" * 32).found
        stored = c.put("f" * 32, names, m, encoder_version="enc-9", timestamp_s=1234.5)
        got = c.get("f" * 32).entry
        assert got.services == tuple(names) and got.version == stored.version >= 1
        np.testing.assert_array_equal(got.matrix, m)
        assert (got.timestamp_s, got.encoder_version) == (1234.5, "enc-9") and got.stored_at_s > 0
        assert c.get("", known_version=got.version).not_modified  # latest, unchanged: no matrix sent
        c.put_intent([1.5, 0.25], ["locality_weight", "balance_weight"], source="test", timestamp_s=99.0)
        it = c.get_intent().entry
        assert (it.values, it.names, it.source, it.timestamp_s) == (
            (1.5, 0.25),
            ("locality_weight", "balance_weight"),
            "test",
            99.0,
        )
    assert reg.get_sample_value("hrl_cache_client_requests_total", {"method": "Get", "outcome": "miss"}) == 1
    assert reg.get_sample_value("hrl_cache_client_requests_total", {"method": "Get", "outcome": "not_modified"}) == 1
    assert reg.get_sample_value("hrl_cache_client_request_duration_seconds_count", {"method": "Put"}) == 1
    srv = server.registry
    assert srv.get_sample_value("hrl_cache_grpc_requests_total", {"method": "Get", "outcome": "ok"}) == 3
    assert srv.get_sample_value("hrl_cache_entries") == 1


def test_pending_moves_travel_with_the_intent_over_grpc_into_the_extenders_store(server):
    moves = (
        PendingMove("shop", "api", "api", "node-3", 1234.5, "api-7d9f8c6b5-aaaaa"),
        PendingMove("shop", "db", "db", "node-1", 99.25),
    )
    store = SnapshotStore(clock=lambda: 0.0)
    with GrpcEmbeddingCache(server.address, 5.0) as c:
        c.put_intent([1.0, 1.0], ["locality_weight", "balance_weight"], source="test", pending_moves=moves)
        it = c.get_intent().entry
        assert it.pending_moves == moves  # every field, doubles bit-exact
        refresher = CacheRefresher(
            c,
            1.0,
            on_intent=lambda e: store.set_intent(Intent.from_wire(e.names, e.values), e.version, e.pending_moves),
        )
        assert refresher.refresh_once()["intent"] == "ok"
        assert store.get().pending_moves[("shop", "api")].target_node == "node-3"
        c.put_intent([1.0, 1.0], ["locality_weight", "balance_weight"], source="test")  # the moves are done
        refresher.refresh_once()
        assert dict(store.get().pending_moves) == {}
        # a malformed record sent by another client is refused whole by the server (INVALID_ARGUMENT)
        with pytest.raises(ValueError, match="target_node"):
            c._call(
                "PutIntent",
                c._pb2.PutIntentRequest(
                    values=[1.0],
                    pending_moves=[c._pb2.PendingMove(namespace="shop", service="api", workload="api", target_node="")],
                ),
            )


def test_the_health_service_reports_serving_and_then_not_serving_on_shutdown():
    s = CacheServer("127.0.0.1:0").start()
    c = GrpcEmbeddingCache(s.address, 2.0)
    try:
        assert c.health("") == "SERVING"
        assert c.health(SERVICE_NAME) == "SERVING"
        with pytest.raises(CacheUnavailable, match="NOT_FOUND"):
            c.health("no.such.Service")
    finally:
        s.stop()
    with pytest.raises(CacheUnavailable):
        c.health("")
    c.close()


def test_the_server_refuses_a_malformed_matrix_with_invalid_argument(server):
    import grpc

    from policy.cache.proto import embeddings_pb2, embeddings_pb2_grpc

    with grpc.insecure_channel(server.address) as ch:
        stub = embeddings_pb2_grpc.EmbeddingCacheStub(ch)
        bad = embeddings_pb2.PutRequest(
            fingerprint="fp", services=["a", "b"], embeddings=embeddings_pb2.Matrix(rows=2, cols=4, data=b"\0" * 12)
        )
        with pytest.raises(grpc.RpcError) as e:
            stub.Put(bad, timeout=2)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "needs 32 bytes" in e.value.details()
    assert (
        server.registry.get_sample_value("hrl_cache_grpc_requests_total", {"method": "Put", "outcome": "invalid"}) == 1
    )


def test_a_client_of_a_dead_or_silent_server_fails_fast_with_one_line():
    with GrpcEmbeddingCache(f"127.0.0.1:{free_port()}", 0.5) as c:
        t0 = time.monotonic()
        with pytest.raises(CacheUnavailable) as e:
            c.get("x")
        assert time.monotonic() - t0 < 5 and "\n" not in str(e.value)
    silent = socket.socket()  # accepts TCP but never speaks HTTP/2
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        with GrpcEmbeddingCache(f"127.0.0.1:{silent.getsockname()[1]}", 0.3) as c:
            with pytest.raises(CacheUnavailable):  # CacheTimeout or UNAVAILABLE, never a hang
                c.get("x")
    finally:
        silent.close()
    assert issubclass(CacheTimeout, CacheUnavailable)


def test_the_server_keeps_nothing_across_a_restart_and_the_client_reconnects():
    port = free_port()
    with CacheServer(f"127.0.0.1:{port}") as s, GrpcEmbeddingCache(s.address, 2.0) as c:
        c.put("fp", ["a"], np.ones((1, 2)))
        s.stop()
        with CacheServer(f"127.0.0.1:{port}"):
            deadline = time.monotonic() + 10
            while True:
                try:
                    assert not c.get("fp").found
                    break
                except CacheUnavailable:
                    assert time.monotonic() < deadline
                    time.sleep(0.1)


def test_a_second_server_on_a_taken_port_fails_to_start():
    with CacheServer("127.0.0.1:0") as s:
        with pytest.raises(OSError, match="cannot listen"):
            CacheServer(s.address).start()


# ---- the command -----------------------------------------------------------------------------------


def _cli(*args: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "policy.cli", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def test_cache_serve_reports_serving_within_10_seconds_and_stops_cleanly_on_sigterm():
    port = free_port()
    t0 = time.monotonic()
    with _cli("cache", "serve", "--listen", f"127.0.0.1:{port}") as proc:  # closes the pipes, reaps it
        try:
            status = None
            with GrpcEmbeddingCache(f"127.0.0.1:{port}", 0.5) as c:
                while time.monotonic() - t0 < 10:
                    try:
                        status = c.health("")
                        break
                    except CacheUnavailable:
                        time.sleep(0.05)
                assert status == "SERVING", proc.stderr.read() if proc.poll() is not None else "no answer"
                elapsed = time.monotonic() - t0
                assert c.put("fp", ["a"], np.ones((1, 3))).version == 1
            proc.send_signal(signal.SIGTERM)
            _out, err = proc.communicate(timeout=10)
            assert proc.returncode == 0, err
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert elapsed < 10


def test_cache_serve_on_a_taken_port_exits_2_with_one_line():
    with CacheServer("127.0.0.1:0") as s:
        proc = _cli("cache", "serve", "--listen", s.address)
        _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert "hrl-policy cache serve: error: cannot listen on" in err


def test_cache_serve_on_a_taken_port_under_log_format_json_writes_only_json_records(monkeypatch):
    # gRPC's C-core line (E1206 ... add_port.cc:83] Failed to add port ...) stays out; our own ERROR record is there
    monkeypatch.delenv("GRPC_VERBOSITY", raising=False)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        proc = _cli("--log-format", "json", "cache", "serve", "--listen", address)
        _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2, err
    records = [json.loads(ln) for ln in err.splitlines() if ln.strip()]  # a plain line fails here
    (error,) = [r for r in records if r["level"] == "ERROR"]
    assert error["component"] == "hrl-policy" and error["message"].startswith(
        f"cache serve: cannot listen on {address}"
    )


def test_cache_encode_then_get_through_the_command_line(server, tmp_path):
    src = str(ROOT / "policy" / "data" / "apps" / "online-boutique" / "kubernetes-manifests.yaml")
    out = subprocess.run(
        [sys.executable, "-m", "policy.cli", "cache", "encode", src, "--address", server.address, "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["services"] >= 11 and d["dim"] == 32 and d["version"] == 1 and len(d["fingerprint"]) == 32
    got = subprocess.run(
        [
            sys.executable,
            "-m",
            "policy.cli",
            "cache",
            "get",
            "--address",
            server.address,
            "--fingerprint",
            d["fingerprint"],
            "--json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert got.returncode == 0, got.stderr
    g = json.loads(got.stdout)
    assert g["fingerprint"] == d["fingerprint"] and len(g["embeddings"]) == d["services"]
    miss = subprocess.run(
        [sys.executable, "-m", "policy.cli", "cache", "get", "--address", server.address, "--intent"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert miss.returncode == 1 and "nothing stored" in miss.stderr


# ---- the extender's copy ---------------------------------------------------------------------------------


def boutique_graph() -> ServiceGraph:
    d = json.loads((FIX / "online-boutique-graph.json").read_text())
    return ServiceGraph.build(d["services"], [ServiceEdge(e["caller"], e["callee"], e["rps"]) for e in d["edges"]])


def prioritize(c: httpx.Client) -> tuple[dict, str]:
    r = c.post("/scheduler/prioritize", content=ARGS, headers={"Content-Type": "application/json"})
    assert r.status_code == 200
    return {h["Host"]: h["Score"] for h in r.json()}, r


def outcome_count(ext, outcome: str) -> float:
    return ext.registry.get_sample_value("hrl_extender_prioritize_total", {"outcome": outcome}) or 0.0


def test_the_extender_scores_from_its_copy_and_keeps_serving_when_the_cache_dies(tmp_path):
    from extender.cache import start_cache_link
    from extender.config import CacheConfig
    from extender.server import ExtenderServer

    g = boutique_graph()
    cache = CacheServer("127.0.0.1:0").start()
    ext = ExtenderServer(port=0).start()
    link = None
    try:
        ext.store.set_graph(g)
        ext.store.load_file(FIX / "cluster-list.json")
        cfg = CacheConfig(address=cache.address, refresh_seconds=0.1, timeout_seconds=0.5, max_age_seconds=3.0)
        link = start_cache_link(cfg, ext.store, ext.registry)
        with httpx.Client(base_url=ext.base_url, timeout=5) as c:
            scores, _ = prioritize(c)
            assert set(scores.values()) == {0} and outcome_count(ext, "neutral_embeddings_missing") == 1
            # the descheduler (or `cache encode`) stores embeddings of this graph, but without the pod's service
            with GrpcEmbeddingCache(cache.address, 2.0) as w:
                others = [s for s in g.services if s != "frontend"]  # the pod in ARGS is a frontend
                w.put(fingerprint(g), others, np.ones((len(others), 4)), timestamp_s=time.time())
                _wait(lambda: ext.store.get().embeddings is not None)
                prioritize(c)
                assert outcome_count(ext, "neutral_embeddings_missing") == 2
                w.put(fingerprint(g), list(g.services), np.ones((len(g.services), 4)), timestamp_s=time.time())
                w.put_intent([1.0, 1.0], ["locality_weight", "balance_weight"], timestamp_s=time.time())
                _wait(lambda: (e := ext.store.get().embeddings) is not None and len(e.services) == len(g.services))
                _wait(lambda: ext.store.get().intent == (1.0, 1.0))
            good, _ = prioritize(c)
            assert outcome_count(ext, "ok") == 1 and set(good.values()) != {0}
            # the cache dies: the refresher counts its failures, and requests go on from the copy
            cache.stop()
            _wait(
                lambda: (
                    (
                        ext.registry.get_sample_value(
                            "hrl_cache_refresh_total", {"kind": "embeddings", "outcome": "error"}
                        )
                        or 0
                    )
                    >= 1
                )
            )
            again, _ = prioritize(c)
            assert again == good and outcome_count(ext, "ok") == 2
            # until the copy is older than maxAgeSeconds: then neutral, counted as stale
            _wait(lambda: prioritize(c)[0] == dict.fromkeys(NAMES, 0), timeout_s=10)
            assert outcome_count(ext, "neutral_embeddings_stale") >= 1
            _wait(lambda: ext.store.get().intent is None)  # the stale intent is dropped too (defaults apply)
            m = c.get("/metrics").text
            assert 'hrl_extender_prioritize_total{outcome="neutral_embeddings_stale"}' in m
            assert "hrl_cache_copy_age_seconds" in m
    finally:
        if link is not None:
            link.stop()
        ext.stop()
        cache.stop()


def _wait(cond, timeout_s: float = 5.0) -> None:
    wait_until(cond, timeout_s, interval_s=0.02)


def test_the_descheduler_link_stores_embeddings_of_its_snapshot_and_publishes_its_intent(server):
    from descheduler.cache import cache_link_from_config
    from descheduler.config import CacheConfig
    from descheduler.snapshot import load_snapshot_file

    snap = load_snapshot_file(FIX / "cluster-list.json", boutique_graph())
    reg = CollectorRegistry()
    link = cache_link_from_config(CacheConfig(address=server.address, reencode_after_seconds=300), reg)
    e, warnings = link.embeddings_for(snap)
    assert warnings == [] and e.version == 1 and e.fingerprint == fingerprint(snap.graph)
    assert e.dim == 32 and set(e.services) == set(snap.graph.services)
    again, _ = link.embeddings_for(snap)  # fresh in the cache: read, not re-encoded
    assert again.version == 1
    assert reg.get_sample_value("hrl_encoder_duration_seconds_count") == 1
    assert link.publish_intent(Intent((2.0, 0.5)), dry_run=True) == []
    with GrpcEmbeddingCache(server.address, 2.0) as c:
        assert not c.get_intent().found  # a dry run publishes nothing
        assert link.publish_intent(Intent((2.0, 0.5)), dry_run=False) == []
        it = c.get_intent().entry
    assert (
        it.values == (2.0, 0.5) and it.names == ("locality_weight", "balance_weight") and it.source == "hrl-descheduler"
    )
    server.stop()
    _e, warnings = link.embeddings_for(snap)
    assert any("could not store" in w or "UNAVAILABLE" in w for w in warnings)
    assert link.publish_intent(Intent((1.0, 1.0)), dry_run=False)[0].startswith("cache: could not publish the intent")


# ---- the commands, wired end to end ------------------------------------------------------------------------


def test_hrl_extender_with_a_cache_section_copies_embeddings_and_intent_in_the_background(tmp_path, server):
    src = ROOT / "policy" / "data" / "apps" / "online-boutique" / "kubernetes-manifests.yaml"
    from policy.topology.sources import load_graph

    g, _ = load_graph([str(src)])
    port = free_port()
    cfg = tmp_path / "extender.yaml"
    cfg.write_text(
        "apiVersion: hrl-scheduler.io/v1alpha1\nkind: ExtenderConfiguration\n"
        f"listen: {{port: {port}}}\nlogLevel: warning\ntopology: {{sources: [{json.dumps(str(src))}]}}\n"
        f"cache: {{address: '{server.address}', refreshSeconds: 0.2, timeoutSeconds: 1}}\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "extender", "--config", str(cfg), "--snapshot", str(FIX / "cluster-list.json")],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait(lambda: _up(base, proc), timeout_s=30)
        with httpx.Client(base_url=base, timeout=5) as c:
            prioritize(c)
            assert 'hrl_extender_prioritize_total{outcome="neutral_embeddings_missing"} 1.0' in c.get("/metrics").text
            with GrpcEmbeddingCache(server.address, 2.0) as w:
                w.put(fingerprint(g), list(g.services), np.ones((len(g.services), 8)), timestamp_s=time.time())
                w.put_intent([1.0, 1.0], timestamp_s=time.time())
            _wait(lambda: 'hrl_cache_refresh_total{kind="embeddings",outcome="ok"} 1.0' in c.get("/metrics").text)
            prioritize(c)
            m = c.get("/metrics").text
            assert 'hrl_extender_prioritize_total{outcome="ok"} 1.0' in m
            assert 'hrl_cache_client_requests_total{method="GetIntent",outcome="ok"} 1.0' in m
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    assert proc.returncode == 0, err


def _up(base: str, proc: subprocess.Popen) -> bool:
    assert proc.poll() is None, proc.stderr.read() if proc.stderr else "exited"
    try:
        return httpx.get(base + "/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def test_hrl_descheduler_with_a_cache_section_stores_embeddings_and_a_dry_run_publishes_no_intent(
    tmp_path, server, capsys
):
    from descheduler.__main__ import main

    cfg = tmp_path / "descheduler.yaml"
    cfg.write_text(
        "apiVersion: hrl-scheduler.io/v1alpha1\nkind: DeschedulerConfiguration\n"
        f"cache: {{address: '{server.address}', timeoutSeconds: 5}}\n"
    )
    snap = ROOT / "tests" / "fixtures" / "descheduler" / "cluster-list.json"
    assert main(["--config", str(cfg), "--snapshot", str(snap), "--once", "--json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["dry_run"] is True
    with GrpcEmbeddingCache(server.address, 2.0) as c:
        e = c.get().entry
        assert e is not None and e.dim == 32 and e.version == 1 and e.encoder_version
        assert not c.get_intent().found
    # the cache gone: the cycle still runs and says why on stderr
    addr = server.address
    server.stop()
    cfg.write_text(
        "apiVersion: hrl-scheduler.io/v1alpha1\nkind: DeschedulerConfiguration\n"
        f"cache: {{address: '{addr}', timeoutSeconds: 0.5}}\n"
    )
    assert main(["--config", str(cfg), "--snapshot", str(snap), "--once", "--json"]) == 0
    assert "warning: cache:" in capsys.readouterr().err
