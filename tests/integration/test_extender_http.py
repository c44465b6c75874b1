"""The extender over a real HTTP socket on 127.0.0.1: ExtenderServer (extender.http on uvloop in a thread) and the
hrl-extender command, driven with httpx exactly as kube-scheduler drives it."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import httpx
import pytest
from proc_helpers import extender_process, free_port
from prometheus_client.parser import text_string_to_metric_families

from extender.server import ExtenderServer
from extender.wire import decode_filter_result, decode_host_priorities
from policy.state import ServiceEdge, ServiceGraph

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "extender"
NAMES = ["boutique-worker", "boutique-worker2", "boutique-worker3"]
ARGS = (FIX / "args-nodecachecapable.json").read_bytes()
ARGS_LIST = (FIX / "args-nodelist.json").read_bytes()
ARGS_MIXED = (FIX / "args-mixed-case.json").read_bytes()


def boutique_graph() -> ServiceGraph:
    d = json.loads((FIX / "online-boutique-graph.json").read_text())
    return ServiceGraph.build(d["services"], [ServiceEdge(e["caller"], e["callee"], e["rps"]) for e in d["edges"]])


def samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def total(metrics: dict, name: str) -> float:
    return sum(v for (n, _), v in metrics.items() if n == name)


@pytest.fixture()
def server():
    with ExtenderServer(port=0) as s:
        yield s


def test_the_server_binds_a_real_port_and_reports_its_url(server):
    assert server.port > 0
    assert server.url == f"http://127.0.0.1:{server.port}/scheduler"
    with socket.create_connection(("127.0.0.1", server.port), timeout=2):
        pass


def test_health_readiness_and_scoring_before_and_after_a_snapshot(server):
    with httpx.Client(base_url=server.base_url, timeout=5) as c:
        assert c.get("/healthz").status_code == 200
        r = c.get("/readyz")
        assert r.status_code == 503 and "no cluster snapshot" in r.text
        r = c.post("/scheduler/prioritize", content=ARGS, headers={"Content-Type": "application/json"})
        assert r.status_code == 200 and decode_host_priorities(r.content, NAMES) == dict.fromkeys(NAMES, 0)

        server.store.set_graph(boutique_graph())
        server.store.load_file(FIX / "cluster-list.json")
        assert c.get("/readyz").status_code == 200
        for body in (ARGS, ARGS_LIST, ARGS_MIXED):
            r = c.post("/scheduler/prioritize", content=body, headers={"Content-Type": "application/json"})
            assert r.status_code == 200
            assert decode_host_priorities(r.content, NAMES) == {
                "boutique-worker": 1,
                "boutique-worker2": 5,
                "boutique-worker3": 2,
            }
        r = c.post("/scheduler/filter", content=ARGS_LIST)
        assert r.status_code == 200 and r.json()["NodeNames"] is None
        assert decode_filter_result(r.content, NAMES, node_cache_capable=False)[0] == NAMES


def test_metrics_counters_move_by_exactly_the_number_of_calls(server):
    server.store.set_graph(boutique_graph())
    server.store.load_file(FIX / "cluster-list.json")
    with httpx.Client(base_url=server.base_url, timeout=5) as c:
        before = samples(c.get("/metrics").text)
        for _ in range(7):
            assert c.post("/scheduler/prioritize", content=ARGS).status_code == 200
        for _ in range(3):
            assert c.post("/scheduler/filter", content=ARGS).status_code == 200
        for _ in range(2):
            assert c.post("/scheduler/prioritize", content=b'{"Pod": null}').status_code == 400
        assert c.post("/scheduler/filter", content=b"not json").status_code == 400
        assert c.get("/scheduler/prioritize").status_code == 405
        after = samples(c.get("/metrics").text)

    def delta(name, **labels):
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert delta("hrl_extender_prioritize_total", outcome="ok") == 7
    assert delta("hrl_extender_prioritize_total", outcome="invalid") == 2
    # every verb request answered is counted once, by its outcome (the 405 is no verb request)
    assert total(after, "hrl_extender_prioritize_total") - total(before, "hrl_extender_prioritize_total") == 9
    assert delta("hrl_extender_prioritize_duration_seconds_count") == 7
    assert delta("hrl_extender_filter_total", outcome="ok") == 3
    assert delta("hrl_extender_filter_total", outcome="invalid") == 1
    assert delta("hrl_extender_filter_duration_seconds_count") == 3
    assert delta("hrl_extender_requests_invalid_total", verb="prioritize") == 2
    assert delta("hrl_extender_requests_invalid_total", verb="filter") == 1
    assert delta("hrl_extender_http_responses_total", code="200") == 10 + 1  # the verbs and the first /metrics
    assert delta("hrl_extender_http_responses_total", code="400") == 3
    assert delta("hrl_extender_http_responses_total", code="405") == 1
    assert after[("hrl_extender_snapshot_nodes", ())] == 3
    assert server.metrics.prioritize_calls() == 9 and server.metrics.filter_calls() == 4


def test_concurrent_clients_each_get_a_complete_reply(server):
    server.store.set_graph(boutique_graph())
    server.store.load_file(FIX / "cluster-list.json")
    errors: list[str] = []

    def worker():
        with httpx.Client(base_url=server.base_url, timeout=10) as c:
            for _ in range(10):
                r = c.post("/scheduler/prioritize", content=ARGS)
                if r.status_code == 200 and r.content == b"[]":  # shed at the deadline (a loaded machine): complete
                    continue
                if r.status_code != 200 or decode_host_priorities(r.content, NAMES)["boutique-worker2"] != 5:
                    errors.append(f"{r.status_code} {r.text[:80]}")

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert server.metrics.prioritize_calls() == 40


def test_stopping_the_server_closes_the_port_and_ends_its_thread():
    s = ExtenderServer(port=0).start()
    port, thread = s.port, s._thread
    assert httpx.get(f"{s.base_url}/healthz", timeout=5).status_code == 200
    s.stop()
    assert thread is not None and not thread.is_alive()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    s.stop()  # idempotent


def test_a_port_in_use_is_an_os_error_from_start():
    with ExtenderServer(port=0) as a:
        with pytest.raises(OSError):
            ExtenderServer(port=a.port).start()


# ---- the hrl-extender command ---------------------------------------------------------------------------


def test_the_command_serves_a_snapshot_file_and_shuts_down_cleanly_on_sigterm(tmp_path):
    port = free_port()
    cfg = tmp_path / "extender.yaml"
    cfg.write_text(
        "apiVersion: hrl-scheduler.io/v1alpha1\nkind: ExtenderConfiguration\n"
        f"listen: {{port: {port}}}\nurlPrefix: /hrl\nlogLevel: warning\n"
    )
    with extender_process(cfg, port, "--snapshot", str(FIX / "cluster-list.json")) as ext:
        assert ext.ready.status_code == 200
        r = httpx.post(ext.base_url + "/hrl/prioritize", content=ARGS, timeout=5)
        # No source is configured and the file's pods declare no depends-on: a graph of services without calls, so
        # every node scores 0, in a valid reply
        assert r.status_code == 200 and decode_host_priorities(r.content, NAMES) == dict.fromkeys(NAMES, 0)
        assert 'hrl_extender_prioritize_total{outcome="ok"} 1.0' in httpx.get(ext.base_url + "/metrics", timeout=5).text
    assert ext.returncode == 0, ext.stderr
    assert "Traceback" not in ext.stderr


def test_in_snapshot_mode_without_sources_the_pods_depends_on_annotations_are_the_call_graph(tmp_path):
    # issue 26 item 8: `sources: []` with a snapshotFile ignored the annotations (every pod: neutral_unknown_service)
    from extender.wire import encode_json, make_extender_args
    from policy.bench.synthetic_cluster import SyntheticCluster, write_snapshot

    snap = write_snapshot(SyntheticCluster(nodes=10, pods_per_node=4, pods_per_service=5, seed=5), tmp_path / "s.json")
    doc = json.loads(snap.read_text())
    nodes = [o["metadata"]["name"] for o in doc["items"] if o["kind"] == "Node"]
    pod = next(o for o in doc["items"] if o["kind"] == "Pod" and o["metadata"]["annotations"])
    pod["spec"].pop("nodeName")
    pod["metadata"]["name"] += "-new"
    port = free_port()
    cfg = tmp_path / "extender.yaml"
    cfg.write_text(
        "apiVersion: hrl-scheduler.io/v1alpha1\nkind: ExtenderConfiguration\n"
        f"listen: {{host: 127.0.0.1, port: {port}}}\nsnapshotFile: {snap}\n"
    )
    with extender_process(cfg, port) as ext:
        r = httpx.post(ext.base_url + "/scheduler/prioritize", content=encode_json(make_extender_args(pod, nodes)))
        m = samples(httpx.get(ext.base_url + "/metrics").text)
    scores = decode_host_priorities(r.content, nodes)
    assert max(scores.values()) > 0  # nodes with the pod's callees' pods score above the others
    assert m[("hrl_extender_prioritize_total", (("outcome", "ok"),))] == 1
    assert m[("hrl_extender_prioritize_total", (("outcome", "neutral_unknown_service"),))] == 0
    assert "call graph from the pods' depends-on annotations" in ext.stderr
