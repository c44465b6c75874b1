"""The static extender that ``make bench-scheduler``'s caller-side figures measure (hack/bench-scheduler.py,
``StaticExtender``) is the server that ships: over a real socket it answers as :class:`extender.http.HttpServer`
(whose open-connection gauge uvicorn never sets) with the bytes the extender's app computes in process on the same
snapshot."""

from __future__ import annotations

import http.client
import json
from pathlib import Path

from cp_helpers import ROOT
from prometheus_client import CollectorRegistry
from scripts import load_script

from extender.config import load_extender_config
from extender.kube import graph_with_annotations
from extender.server import make_app
from extender.store import SnapshotStore
from extender.wire import encode_json
from policy.lowlevel import TopologyHeuristic

NODES, PODS, SERVICES = 60, 200, 5


def _in_process(snapshot: Path, body: bytes) -> bytes:
    store = SnapshotStore()
    store.load_file(str(snapshot))
    store.set_graph(graph_with_annotations(None, store.get().snapshot.pods))
    config = load_extender_config(
        {"apiVersion": "hrl-scheduler.io/v1alpha1", "kind": "ExtenderConfiguration", "logLevel": "WARNING"}
    )
    app = make_app(config, store, TopologyHeuristic(), CollectorRegistry())
    try:
        return app._score("prioritize", body)[0]
    finally:
        app.close()


def test_the_caller_side_bench_measures_the_shipped_server_and_its_answers(tmp_path):
    bench = load_script("hrl_bench_scheduler", ROOT / "hack" / "bench-scheduler.py")
    snapshot = tmp_path / "snapshot.json"
    snapshot.write_text(json.dumps(bench.bench_cluster_objects(NODES, PODS, SERVICES, bound_fraction=0.5, seed=1)))
    names = [f"bench-node-{i:04d}" for i in range(NODES)]
    body = encode_json(bench.bench_request(PODS - 7, SERVICES, names[::2]))
    ext = bench.StaticExtender(tmp_path, snapshot)  # the kind the caller-side section uses
    conn = http.client.HTTPConnection("127.0.0.1", ext.port, timeout=30)
    try:
        conn.request("POST", "/scheduler/prioritize", body, {"Content-Type": "application/json"})
        reply = conn.getresponse()
        got = reply.read()
        conn.request("GET", "/metrics")  # on the same keep-alive connection, still open
        metrics = conn.getresponse().read().decode()
    finally:
        conn.close()
        ext.stop()
    assert reply.status == 200
    assert bench.sample_value(metrics, "hrl_extender_http_connections_open") >= 1
    scores = [h["Score"] for h in json.loads(got)]
    assert len(scores) == len(names[::2]) and len(set(scores)) > 1  # scored, not a neutral answer
    assert got == _in_process(snapshot, body)
