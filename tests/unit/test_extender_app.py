"""extender.server.make_app: HTTP status mapping, fail-open replies and metrics, in process (ASGI)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from extender.config import ExtenderConfiguration, load_extender_config
from extender.server import make_app
from extender.store import SnapshotStore
from extender.wire import decode_filter_result, decode_host_priorities
from policy.lowlevel import TopologyHeuristic
from policy.state import ServiceEdge, ServiceGraph

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "extender"
NAMES = ["boutique-worker", "boutique-worker2", "boutique-worker3"]
ARGS = (FIX / "args-nodecachecapable.json").read_bytes()


def boutique_graph() -> ServiceGraph:
    d = json.loads((FIX / "online-boutique-graph.json").read_text())
    return ServiceGraph.build(d["services"], [ServiceEdge(e["caller"], e["callee"], e["rps"]) for e in d["edges"]])


class Raising:
    name = "raising"

    def filter(self, pod, candidates, index):
        raise RuntimeError("bug")

    def score(self, pod, candidates, index, intent=None):
        raise RuntimeError("bug")


class BrokenStore(SnapshotStore):
    """A store whose reads fail: an internal failure of the handler itself, outside the policy."""

    def get(self):
        raise RuntimeError("store exploded")


class Client:
    """A synchronous face on httpx's in-process ASGI transport (no socket; see tests/integration for those)."""

    def __init__(self, app):
        self.app = app

    def request(self, method: str, path: str, **kw) -> httpx.Response:
        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://extender.test") as c:
                return await c.request(method, path, **kw)

        return asyncio.run(go())

    def get(self, path: str, **kw) -> httpx.Response:
        return self.request("GET", path, **kw)

    def post(self, path: str, **kw) -> httpx.Response:
        return self.request("POST", path, **kw)


def client(store=None, policy=None, config=None):
    reg = CollectorRegistry()
    store = store if store is not None else SnapshotStore()
    app = make_app(config or ExtenderConfiguration(), store, policy or TopologyHeuristic(), reg)
    return Client(app), reg, store


def loaded_store(**kw) -> SnapshotStore:
    s = SnapshotStore(**kw)
    s.set_graph(boutique_graph())
    s.load_file(FIX / "cluster-list.json")
    return s


def count(reg, name, **labels) -> float:
    return reg.get_sample_value(name, labels) or 0.0


def test_prioritize_scores_the_candidates_with_the_policy():
    c, reg, _ = client(loaded_store())
    r = c.post("/scheduler/prioritize", content=ARGS)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert decode_host_priorities(r.content, NAMES) == {
        "boutique-worker": 1,
        "boutique-worker2": 5,
        "boutique-worker3": 2,
    }
    assert count(reg, "hrl_extender_prioritize_total", outcome="ok") == 1
    assert count(reg, "hrl_extender_prioritize_duration_seconds_count") == 1


BAD = [
    (b'{"Pod": {', "body: invalid JSON at line 1 column 10"),
    (b'{"NodeNames": ["a"]}', "Pod: missing"),
    (
        json.dumps({"Pod": json.loads(ARGS)["Pod"], "NodeNames": "a"}).encode(),
        'NodeNames: expected a list of strings, got "a"',
    ),
    (
        json.dumps({"Pod": json.loads(ARGS)["Pod"], "NodeNames": ["a", 5]}).encode(),
        "NodeNames[1]: expected a string, got 5",
    ),
    (
        json.dumps({"Pod": json.loads(ARGS)["Pod"], "NodeNames": None, "Nodes": None}).encode(),
        "NodeNames, Nodes: both null",
    ),
]


@pytest.mark.parametrize("verb", ["prioritize", "filter"])
@pytest.mark.parametrize("body,reason", BAD, ids=[b[1].split(":")[0] for b in BAD])
def test_a_malformed_request_is_a_400_with_a_one_line_reason_and_is_counted(verb, body, reason):
    c, reg, _ = client(loaded_store())
    r = c.post(f"/scheduler/{verb}", content=body)
    assert r.status_code == 400
    assert r.text.startswith(reason) and r.text.count("\n") == 1
    assert count(reg, "hrl_extender_requests_invalid_total", verb=verb) == 1
    assert count(reg, f"hrl_extender_{verb}_total", outcome="ok") == 0


def test_a_raising_policy_gives_neutral_scores_and_counts_the_outcome():
    c, reg, _ = client(loaded_store(), policy=Raising())
    r = c.post("/scheduler/prioritize", content=ARGS)
    assert r.status_code == 200
    assert decode_host_priorities(r.content, NAMES) == dict.fromkeys(NAMES, 0)
    assert count(reg, "hrl_extender_prioritize_total", outcome="neutral_error") == 1


def test_a_failure_of_the_handler_itself_still_answers_200_neutral():
    c, reg, _ = client(BrokenStore())
    r = c.post("/scheduler/prioritize", content=ARGS)
    assert r.status_code == 200 and decode_host_priorities(r.content, NAMES) == dict.fromkeys(NAMES, 0)
    assert count(reg, "hrl_extender_prioritize_total", outcome="neutral_error") == 1
    r = c.post("/scheduler/filter", content=ARGS)
    assert r.status_code == 200
    assert decode_filter_result(r.content, NAMES, node_cache_capable=True)[0] == NAMES
    assert count(reg, "hrl_extender_filter_total", outcome="error") == 1


def test_without_a_snapshot_scores_are_neutral_and_filter_passes_everything():
    c, reg, _ = client()
    r = c.post("/scheduler/prioritize", content=ARGS)
    assert r.status_code == 200 and decode_host_priorities(r.content, NAMES) == dict.fromkeys(NAMES, 0)
    assert count(reg, "hrl_extender_prioritize_total", outcome="neutral_no_snapshot") == 1
    r = c.post("/scheduler/filter", content=ARGS)
    assert decode_filter_result(r.content, NAMES, node_cache_capable=True)[0] == NAMES
    assert count(reg, "hrl_extender_filter_total", outcome="no_snapshot") == 1


def test_no_fit_is_a_200_with_failed_nodes():
    d = json.loads(ARGS)
    d["Pod"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "5"  # more than any node has
    c, reg, _ = client(loaded_store())
    r = c.post("/scheduler/filter", content=json.dumps(d))
    assert r.status_code == 200
    passed, failed, unres = decode_filter_result(r.content, NAMES, node_cache_capable=True)
    assert passed == [] and set(failed) == set(NAMES) and unres == {}
    assert all(v.startswith("Insufficient cpu") for v in failed.values())
    assert count(reg, "hrl_extender_filter_total", outcome="no_fit") == 1


def test_filter_in_node_list_mode_answers_in_the_nodes_field():
    c, _, _ = client(loaded_store())
    r = c.post("/scheduler/filter", content=(FIX / "args-nodelist.json").read_bytes())
    body = r.json()
    assert r.status_code == 200 and body["NodeNames"] is None
    assert decode_filter_result(r.content, NAMES, node_cache_capable=False)[0] == NAMES


@pytest.mark.parametrize(
    "method,path",
    [
        ("GET", "/scheduler/prioritize"),
        ("PUT", "/scheduler/filter"),
        ("POST", "/healthz"),
        ("POST", "/metrics"),
    ],
)
def test_a_wrong_method_is_a_405(method, path):
    c, _, _ = client()
    assert c.request(method, path).status_code == 405


def test_an_unknown_path_is_a_404():
    c, _, _ = client()
    assert c.post("/scheduler/bind", content=ARGS).status_code == 404


def test_the_url_prefix_comes_from_the_config():
    cfg = load_extender_config(
        {"apiVersion": "hrl-scheduler.io/v1alpha1", "kind": "ExtenderConfiguration", "urlPrefix": "/hrl/v1"}
    )
    c, _, _ = client(loaded_store(), config=cfg)
    assert c.post("/hrl/v1/prioritize", content=ARGS).status_code == 200
    assert c.post("/scheduler/prioritize", content=ARGS).status_code == 404


def test_health_is_always_ok_and_readiness_follows_the_snapshot_and_its_age():
    class Clock:
        t = 0.0

        def __call__(self):
            return self.t

    clock = Clock()
    cfg = load_extender_config(
        {"apiVersion": "hrl-scheduler.io/v1alpha1", "kind": "ExtenderConfiguration", "maxSnapshotAgeSeconds": 60}
    )
    store = SnapshotStore(clock=clock)
    c, reg, _ = client(store, config=cfg)
    assert c.get("/healthz").status_code == 200
    r = c.get("/readyz")
    assert r.status_code == 503 and "no cluster snapshot" in r.text
    store.set_graph(boutique_graph())
    store.load_file(FIX / "cluster-list.json")
    assert c.get("/readyz").status_code == 200
    clock.t = 61.0
    r = c.get("/readyz")
    assert r.status_code == 503 and "stale" in r.text and "61.0" in r.text
    assert c.get("/healthz").status_code == 200
    r = c.post("/scheduler/prioritize", content=ARGS)
    assert decode_host_priorities(r.content, NAMES) == dict.fromkeys(NAMES, 0)
    assert count(reg, "hrl_extender_prioritize_total", outcome="neutral_stale") == 1


def test_metrics_exposes_the_counters_and_snapshot_gauges_without_node_or_pod_names():
    c, reg, _ = client(loaded_store(clock=lambda: 10.0))
    c.post("/scheduler/prioritize", content=ARGS)
    r = c.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    assert 'hrl_extender_prioritize_total{outcome="ok"} 1.0' in text
    assert "hrl_extender_snapshot_nodes 3.0" in text and "hrl_extender_snapshot_pods 13.0" in text
    assert "hrl_extender_snapshot_age_seconds 0.0" in text
    assert "boutique-worker" not in text and "frontend" not in text


def test_every_outcome_label_exists_before_the_first_request():
    _, reg, _ = client()
    assert reg.get_sample_value("hrl_extender_prioritize_total", {"outcome": "neutral_error"}) == 0.0
    assert reg.get_sample_value("hrl_extender_filter_total", {"outcome": "no_fit"}) == 0.0
    assert reg.get_sample_value("hrl_extender_requests_invalid_total", {"verb": "filter"}) == 0.0


def test_the_serving_code_imports_neither_torch_nor_kubernetes_nor_the_descheduler():
    import subprocess
    import sys

    code = (
        "import sys, extender.server, extender.__main__, extender.scoring, extender.store, extender.config;"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'kubernetes', 'descheduler')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


class FakeTransport:
    """The slice of an asyncio transport extender.http's connections use, recording every write."""

    def __init__(self):
        self.writes: list[bytes] = []
        self.closed = False
        self.reading = True

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def get_extra_info(self, name, default=None):
        return default

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


def test_each_reply_reaches_the_transport_in_one_write_head_and_body_together():
    from extender.http import HttpServer, _Connection

    app = make_app(ExtenderConfiguration(), SnapshotStore(), TopologyHeuristic(), CollectorRegistry())
    request = b"POST /scheduler/prioritize HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(ARGS), ARGS)

    async def go() -> list[bytes]:
        server = HttpServer(app, metrics=app.metrics)
        server.loop = asyncio.get_running_loop()
        conn = _Connection(server)
        t = FakeTransport()
        conn.connection_made(t)
        conn.data_received(request)
        conn.data_received(request[:100])  # the same keep-alive connection, in two reads
        conn.data_received(request[100:])
        await asyncio.sleep(0.01)
        conn.connection_lost(None)
        return t.writes

    writes = asyncio.run(go())
    assert len(writes) == 2 and app.metrics.prioritize_calls() == 2
    for w in writes:
        head, _, body = w.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK\r\n")
        length = int(next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[1])
        assert len(body) == length and [x["Score"] for x in json.loads(body)] == [0, 0, 0]
    assert app.metrics.registry.get_sample_value("hrl_extender_http_connections_total") == 1


def test_readiness_shows_the_measured_use_input_without_making_the_extender_unready():
    from policy.live import UsageInput, UsageReading, UsageUnavailable

    class Src:
        name = "prometheus+cadvisor://p:9090"

        def __init__(self):
            self.answer = UsageReading({}, {}, 0.0, 60.0)

        def read(self):
            if isinstance(self.answer, Exception):
                raise self.answer
            return self.answer

        def close(self):
            pass

    clock = lambda: 100.0  # noqa: E731
    store = loaded_store(clock=clock)
    off = UsageInput(None, clock=clock)
    reg = CollectorRegistry()
    app = make_app(ExtenderConfiguration(), store, TopologyHeuristic(), reg, inputs=(off.health,))
    c = Client(app)
    r = c.get("/readyz")
    assert (r.status_code, r.text) == (200, "ok\n")  # off: said at start and by the metric, not by every probe
    assert reg.get_sample_value("hrl_metrics_source_state", {"source": "resource_usage", "state": "off"}) == 1.0
    src = Src()
    on = UsageInput(src, max_age_s=30, clock=clock)
    app = make_app(ExtenderConfiguration(), store, TopologyHeuristic(), CollectorRegistry(), inputs=(on.health,))
    c = Client(app)
    assert c.get("/readyz").text.startswith("ok (note: resource_usage: pending")
    src.answer = UsageReading({}, {}, 95.0, 60.0)
    on.refresh()
    on.apply(store.get().snapshot)
    assert c.get("/readyz").text.startswith("ok")
    src.answer = UsageUnavailable("prometheus+cadvisor://p:9090: cannot reach Prometheus")
    on.refresh()
    on.reading = UsageReading({}, {}, 50.0, 60.0)  # the last good reading, 50 s old: stale
    on.apply(store.get().snapshot)
    r = c.get("/readyz")
    assert r.status_code == 200 and "warning: resource_usage: stale" in r.text and "cannot reach Prometheus" in r.text


def test_the_extender_serves_through_no_private_interface_of_uvicorn_nor_of_any_other_server():
    # issue 23 item 7: the server subclassed uvicorn's private HttpToolsProtocol. Now extender.http serves it (an
    # asyncio protocol over httptools' public parser, DESIGN.md section 5); uvicorn_config keeps only uvicorn's
    # public options, for comparisons. Fails when a serving module imports a server's internals again.
    import ast
    import inspect

    import extender

    root = Path(extender.__file__).parent
    for f in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for n in names:
                parts = n.split(".")
                assert parts[0] not in ("uvicorn", "granian", "hypercorn") or len(parts) == 1, f"{f.name}: {n}"
                assert not any(p.startswith("_") for p in parts[1:]), f"{f.name}: {n}"
    from extender.server import uvicorn_config

    cfg = uvicorn_config(make_app(ExtenderConfiguration(), SnapshotStore(), TopologyHeuristic(), CollectorRegistry()))
    assert cfg.http == "httptools" and isinstance(cfg.http, str)  # a public option, not a protocol class
    assert "httptools_impl" not in inspect.getsource(uvicorn_config)
