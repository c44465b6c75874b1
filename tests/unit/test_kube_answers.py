"""The API calls whose answer we do not read (an Event, an eviction) give their connection back: over a real
socket to a small stand-in for the API server's POST endpoints, N calls open one keep-alive connection, not N
(an answer dropped unread kept its connection, and its TLS socket in a cluster, open until garbage collection)."""

from __future__ import annotations

import http.server
import json
import threading

import pytest
from kubernetes import client as kclient

from descheduler.events import ObjectRef
from descheduler.kube import KubeEventRecorder, KubeEvictor
from extender.kube import KubeEventSink
from policy.observe import parse_pod

POD = {
    "metadata": {"name": "web-1", "namespace": "shop", "uid": "u1"},
    "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]},
    "status": {"phase": "Running"},
}


class _Api(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the API server
    connections: set[int] = set()
    posts = 0

    def do_POST(self) -> None:
        type(self).connections.add(id(self.connection))
        type(self).posts += 1
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"kind": "Status", "status": "Success", "padding": "x" * 20_000}).encode()
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def api_client():
    _Api.connections, _Api.posts = set(), 0
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    cfg = kclient.Configuration()
    cfg.host = f"http://127.0.0.1:{server.server_address[1]}"
    c = kclient.ApiClient(cfg)
    yield c
    c.close()
    server.shutdown()
    server.server_close()


CALLS = {
    "descheduler event": lambda c: KubeEventRecorder(c, instance="t").record(
        ObjectRef("v1", "Pod", "shop", "web-1", "u1"), "Normal", "Moved", "Evict", "a note"
    ),
    "extender event": lambda c: KubeEventSink(c, instance="t").post(parse_pod(POD), "Scheduled", "Score", "a note"),
    "eviction": lambda c: KubeEvictor(c).evict(parse_pod(POD), "a test"),
}


@pytest.mark.parametrize("call", CALLS, ids=list(CALLS))
def test_calls_that_read_no_answer_reuse_one_connection(api_client, call):
    for _ in range(5):
        CALLS[call](api_client)
    assert _Api.posts == 5
    assert len(_Api.connections) == 1
