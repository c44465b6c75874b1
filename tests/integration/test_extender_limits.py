"""No request can stall the others, over a real HTTP socket on 127.0.0.1 (ExtenderServer: uvicorn with httptools
and uvloop in a thread): the body-size limit (413), the per-request deadline (neutral scores), load shedding
(neutral scores), a lone UTF-16 surrogate in a node name (both verbs), /livez, and hrl-extender's binding (it
binds before it announces, and exits 4 with one line when the port is taken)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from proc_helpers import free_port

from extender.config import load_extender_config
from extender.server import ExtenderServer
from extender.wire import decode_filter_result, decode_host_priorities
from policy.lowlevel import TopologyHeuristic
from policy.state import ServiceEdge, ServiceGraph

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "extender"
NAMES = ["boutique-worker", "boutique-worker2", "boutique-worker3"]
ARGS = (FIX / "args-nodecachecapable.json").read_bytes()
EXPECTED = {"boutique-worker": 1, "boutique-worker2": 5, "boutique-worker3": 2}


def boutique_graph() -> ServiceGraph:
    d = json.loads((FIX / "online-boutique-graph.json").read_text())
    return ServiceGraph.build(d["services"], [ServiceEdge(e["caller"], e["callee"], e["rps"]) for e in d["edges"]])


def config(precompute: bool = True, **limits):
    return load_extender_config(
        {
            "apiVersion": "hrl-scheduler.io/v1alpha1",
            "kind": "ExtenderConfiguration",
            "limits": limits,
            "precompute": {"enabled": precompute},  # off where a slow policy must be called per request
        }
    )


def loaded(server: ExtenderServer) -> ExtenderServer:
    server.store.set_graph(boutique_graph())
    server.store.load_file(FIX / "cluster-list.json")
    return server


class Slow(TopologyHeuristic):
    """The heuristic, taking ``delay_s`` longer per score (a policy stuck for a while)."""

    def __init__(self, delay_s: float):
        super().__init__()
        object.__setattr__(self, "delay_s", delay_s)

    def score(self, pod, candidates, index, intent=None):
        time.sleep(self.delay_s)
        return super().score(pod, candidates, index, intent)


def sample(server: ExtenderServer, name: str, **labels: str) -> float:
    return server.registry.get_sample_value(name, labels) or 0.0


def test_an_oversized_body_gets_413_while_concurrent_ordinary_requests_are_answered_within_their_deadline():
    limit = 1024 * 1024
    deadline_s = 0.2
    with loaded(ExtenderServer(config(maxRequestBytes=limit, requestDeadlineSeconds=deadline_s), port=0)) as server:
        big = b'{"Pod": {}, "NodeNames": [' + b'"n",' * (limit // 4) + b'"n"]}'
        assert len(big) > limit
        stop = threading.Event()
        statuses: list[int] = []

        def flood() -> None:  # two clients posting oversized bodies without pause
            with httpx.Client(base_url=server.base_url, timeout=10) as c:
                while not stop.is_set():
                    r = c.post("/scheduler/prioritize", content=big)
                    statuses.append(r.status_code)
                    assert r.status_code == 413
                    assert r.text.count("\n") == 1 and "limits.maxRequestBytes" in r.text

        with ThreadPoolExecutor(2) as pool:
            floods = [pool.submit(flood) for _ in range(2)]
            try:
                worst = 0.0
                scored = 0
                with httpx.Client(base_url=server.base_url, timeout=5) as c:
                    for _ in range(100):
                        t0 = time.perf_counter()
                        r = c.post("/scheduler/prioritize", content=ARGS)
                        worst = max(worst, time.perf_counter() - t0)
                        assert r.status_code == 200
                        got = decode_host_priorities(r.content, NAMES)
                        assert got in (EXPECTED, dict.fromkeys(NAMES, 0))  # scored, or neutral past the deadline
                        scored += got == EXPECTED
            finally:
                stop.set()
                for f in floods:
                    f.result()
        assert statuses and set(statuses) == {413}
        # the caller's round trip, sockets and a loaded machine included, stays within the server's deadline x 5
        assert worst < 5 * deadline_s, worst
        assert sample(server, "hrl_extender_requests_too_large_total", verb="prioritize") == len(statuses)
        assert scored >= 75, scored  # on a machine with spare CPU all 100 are scored; a starved one sheds some
        assert sample(server, "hrl_extender_prioritize_total", outcome="ok") == scored
        assert sample(server, "hrl_extender_prioritize_total", outcome="neutral_deadline") == 100 - scored


def test_a_chunked_body_growing_past_the_limit_gets_413():
    with loaded(ExtenderServer(config(maxRequestBytes=4096), port=0)) as server:

        def chunks():
            for _ in range(10):
                yield b" " * 1024

        with httpx.Client(base_url=server.base_url, timeout=5) as c:
            r = c.post("/scheduler/filter", content=chunks())
        assert r.status_code == 413 and "more than 4096 bytes" in r.text
        assert sample(server, "hrl_extender_requests_too_large_total", verb="filter") == 1


def test_a_request_that_exceeds_the_deadline_gets_neutral_scores():
    cfg = config(False, requestDeadlineSeconds=0.1, offloadRequestBytes=0)  # every body in the worker pool
    with loaded(ExtenderServer(cfg, policy=Slow(1.0), port=0)) as server:
        with httpx.Client(base_url=server.base_url, timeout=5) as c:
            t0 = time.perf_counter()
            r = c.post("/scheduler/prioritize", content=ARGS)
            took = time.perf_counter() - t0
        assert r.status_code == 200
        assert decode_host_priorities(r.content, NAMES) == dict.fromkeys(NAMES, 0)
        assert took < 0.9, took  # answered at the deadline, not after the policy
        assert sample(server, "hrl_extender_prioritize_total", outcome="neutral_deadline") == 1


def pipelined(port: int, path: str, bodies: list[bytes], timeout_s: float = 10.0) -> list[tuple[int, bytes]]:
    """Send ``bodies`` as pipelined HTTP/1.1 POSTs on one connection; return each reply's (status, body)."""
    reqs = b"".join(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(b)}\r\n\r\n".encode() + b for b in bodies)
    out: list[tuple[int, bytes]] = []
    buf = b""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.sendall(reqs)
        while len(out) < len(bodies):
            while b"\r\n\r\n" not in buf:
                chunk = s.recv(65536)
                assert chunk, "connection closed early"
                buf += chunk
            head, buf = buf.split(b"\r\n\r\n", 1)
            lines = head.decode().split("\r\n")
            length = next(int(ln.split(":", 1)[1]) for ln in lines if ln.lower().startswith("content-length:"))
            while len(buf) < length:
                buf += s.recv(65536)
            out.append((int(lines[0].split()[1]), buf[:length]))
            buf = buf[length:]
    return out


def test_a_request_older_than_the_deadline_when_its_turn_comes_is_not_scored():
    # three requests arrive together (pipelined); the policy takes 0.3 s on the event loop: the second and
    # third are past their 0.15 s deadline when their turn comes, and are answered neutral, unscored
    cfg = config(False, requestDeadlineSeconds=0.15)
    with loaded(ExtenderServer(cfg, policy=Slow(0.3), port=0)) as server:
        t0 = time.perf_counter()
        rs = pipelined(server.port, "/scheduler/prioritize", [ARGS, ARGS, ARGS])
        took = time.perf_counter() - t0
    assert [st for st, _ in rs] == [200, 200, 200]
    assert decode_host_priorities(rs[0][1], NAMES) == EXPECTED
    assert [decode_host_priorities(b, NAMES) for _, b in rs[1:]] == [dict.fromkeys(NAMES, 0)] * 2
    assert took < 0.6, took  # one policy call, not three
    assert sample(server, "hrl_extender_prioritize_total", outcome="neutral_deadline") == 2


def test_load_beyond_the_queue_bound_is_shed_with_neutral_answers():
    cfg = config(False, maxQueuedRequests=1, workers=1, offloadRequestBytes=0, requestDeadlineSeconds=5)
    with loaded(ExtenderServer(cfg, policy=Slow(0.3), port=0)) as server:

        def one(_):
            with httpx.Client(base_url=server.base_url, timeout=10) as c:
                t0 = time.perf_counter()
                r = c.post("/scheduler/prioritize", content=ARGS)
                return r, time.perf_counter() - t0

        with ThreadPoolExecutor(6) as pool:
            rs = list(pool.map(one, range(6)))
        assert all(r.status_code == 200 for r, _ in rs)
        scored = [t for r, t in rs if decode_host_priorities(r.content, NAMES) == EXPECTED]
        shed = [t for r, t in rs if decode_host_priorities(r.content, NAMES) == dict.fromkeys(NAMES, 0)]
        assert len(scored) + len(shed) == 6 and shed and scored
        assert sample(server, "hrl_extender_prioritize_total", outcome="neutral_overload") == len(shed)
        assert min(shed) < 0.3  # answered at once, not after the slow one


SURROGATE = '"\\ud83d"'  # a JSON escape of a lone UTF-16 high surrogate


def test_a_lone_surrogate_in_a_node_name_is_answered_200_in_both_verbs():
    pod = json.loads(ARGS)["Pod"]
    body = '{"Pod": ' + json.dumps(pod) + ', "Nodes": null, "NodeNames": [' + SURROGATE + ', "boutique-worker2"]}'
    node = {"metadata": {"name": "\ud83d"}, "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "10"}}}
    nodes_body = json.dumps({"Pod": pod, "Nodes": {"metadata": {}, "items": [node]}, "NodeNames": None})
    assert "\\ud83d" in nodes_body
    with loaded(ExtenderServer(port=0)) as server, httpx.Client(base_url=server.base_url, timeout=5) as c:
        r = c.post("/scheduler/prioritize", content=body.encode())
        assert r.status_code == 200
        assert decode_host_priorities(r.content, ["\ud83d", "boutique-worker2"]) == {
            "\ud83d": 0,
            "boutique-worker2": 5,
        }
        r = c.post("/scheduler/filter", content=body.encode())
        assert r.status_code == 200
        assert decode_filter_result(r.content, ["\ud83d", "boutique-worker2"], True)[0] == [
            "\ud83d",
            "boutique-worker2",
        ]
        r = c.post("/scheduler/filter", content=nodes_body.encode())
        assert r.status_code == 200 and r.json()["Nodes"]["items"] == [node]
        r = c.post("/scheduler/prioritize", content=nodes_body.encode())
        assert r.status_code == 200 and decode_host_priorities(r.content, ["\ud83d"]) == {"\ud83d": 0}


def test_livez_and_healthz_answer_while_the_process_serves():
    with ExtenderServer(port=0) as server, httpx.Client(base_url=server.base_url, timeout=5) as c:
        assert c.get("/livez").status_code == 200 and c.get("/livez").text == "ok\n"
        assert c.get("/healthz").status_code == 200
        assert c.get("/readyz").status_code == 503  # no snapshot: not ready, but alive
        assert c.post("/livez").status_code == 405


def test_hrl_extender_exits_4_with_one_line_when_its_port_is_taken(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        r = subprocess.run(
            [sys.executable, "-m", "extender", "--port", str(port)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert r.returncode == 4
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines[-1] == f"hrl-extender: error: listen: cannot bind 127.0.0.1:{port}: Address already in use"
    assert "serving on" not in r.stderr


def test_hrl_extender_accepts_connections_as_soon_as_it_says_it_serves():
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "extender", "--port", str(port)],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "serving on" in line:
                break
        else:
            pytest.fail(f"no 'serving on' line; exit status {proc.wait()}")
        assert f"http://127.0.0.1:{port}/scheduler" in line
        with socket.create_connection(("127.0.0.1", port), timeout=5):  # no retry: it is bound and listening
            pass
        r = httpx.get(f"http://127.0.0.1:{port}/livez", timeout=10)
        assert r.status_code == 200
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    assert proc.returncode == 0
