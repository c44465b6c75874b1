"""No request can stall the others, over a real HTTP socket on 127.0.0.1 (ExtenderServer: extender.http on uvloop in
a thread): the body-size limit (413), the per-request deadline counted from the socket (neutral), load shedding
(neutral), a lone UTF-16 surrogate in a node name (both verbs), /livez, and hrl-extender's binding (it binds before
it announces, and exits 4 with one line when the port is taken, one JSON record under --log-format json). The
connection-level limits (read timeouts, the connection bound, pipelining) are in test_extender_connections.py."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from http_helpers import ARGS, EXPECTED, NAMES, ROOT, Slow, config, loaded, pipelined, post, read_reply, sample
from proc_helpers import free_port

from extender.server import ExtenderServer
from extender.wire import decode_filter_result, decode_host_priorities


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
                        if r.content == b"[]":  # shed: neutral past the deadline
                            continue
                        assert decode_host_priorities(r.content, NAMES) == EXPECTED
                        scored += 1
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
        shed = sample(server, "hrl_extender_prioritize_total", outcome="neutral_deadline")
        shed += sample(server, "hrl_extender_prioritize_total", outcome="neutral_overload")
        assert shed == 100 - scored
        assert sample(server, "hrl_extender_prioritize_total", outcome="too_large") == len(statuses)


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
        assert r.status_code == 200 and r.content == b"[]"  # neutral: no candidate gets extender points
        assert took < 0.9, took  # answered at the deadline, not after the policy
        assert sample(server, "hrl_extender_prioritize_total", outcome="neutral_deadline") == 1


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
    assert [b for _, b in rs[1:]] == [b"[]", b"[]"]
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
        scored = [t for r, t in rs if r.content != b"[]" and decode_host_priorities(r.content, NAMES) == EXPECTED]
        shed = [t for r, t in rs if r.content == b"[]"]
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


def test_hrl_extender_under_log_format_json_reports_a_taken_port_as_a_json_record():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        r = subprocess.run(
            [sys.executable, "-m", "extender", "--log-format", "json", "--host", "127.0.0.1", "--port", str(port)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert r.returncode == 4
    records = [json.loads(ln) for ln in r.stderr.splitlines() if ln.strip()]  # a plain line fails here
    last = records[-1]
    assert (last["level"], last["component"]) == ("ERROR", "hrl-extender")
    assert last["message"] == f"listen: cannot bind 127.0.0.1:{port}: Address already in use"
    assert not any("serving on" in r["message"] for r in records)


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


def test_a_request_that_waited_in_its_socket_is_shed_on_the_time_from_the_kernel_not_from_its_read():
    # the policy holds the event loop 0.4 s on the first request; a request sent meanwhile on an open connection,
    # and one on a connection still waiting to be accepted, are read only after it: their bytes have waited in the
    # kernel longer than the deadline, which TCP_INFO tells, so they are answered neutral at once (timed from
    # their read they would look fresh and be scored, late)
    cfg = config(False, requestDeadlineSeconds=0.25, maxLoopBusySeconds=0.25)
    with loaded(ExtenderServer(cfg, policy=Slow(0.4), port=0)) as server:
        a = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        b = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        time.sleep(0.1)  # both accepted, idle
        a.sendall(post("/scheduler/prioritize", ARGS))
        time.sleep(0.05)  # the loop is in the policy now
        b.sendall(post("/scheduler/prioritize", ARGS))
        c = socket.create_connection(("127.0.0.1", server.port), timeout=10)  # in the accept queue meanwhile
        c.sendall(post("/scheduler/prioritize", ARGS))
        try:
            replies = [read_reply(s)[:3:2] for s in (a, b, c)]
        finally:
            for s in (a, b, c):
                s.close()
    assert replies[0][0] == 200 and decode_host_priorities(replies[0][1], NAMES) == EXPECTED
    assert replies[1:] == [(200, b"[]"), (200, b"[]")]
    assert sample(server, "hrl_extender_prioritize_total", outcome="neutral_deadline") == 2
    assert sample(server, "hrl_extender_prioritize_total", outcome="ok") == 1


def test_requests_read_after_the_loop_has_scored_for_max_loop_busy_seconds_are_shed_at_once():
    # eight requests arrive together; scoring takes 50 ms each on the event loop: once the loop has scored for
    # maxLoopBusySeconds since it last read its sockets, the rest of what it read is answered neutral at once,
    # so that none waits for all the others to be scored
    cfg = config(False, requestDeadlineSeconds=1.0, maxLoopBusySeconds=0.06)
    with loaded(ExtenderServer(cfg, policy=Slow(0.05), port=0)) as server:
        socks = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(8)]
        time.sleep(0.1)
        t0 = time.perf_counter()
        for s in socks:
            s.sendall(post("/scheduler/prioritize", ARGS))
        try:
            bodies = [read_reply(s)[2] for s in socks]
        finally:
            for s in socks:
                s.close()
        took = time.perf_counter() - t0
    shed = bodies.count(b"[]")
    assert shed >= 3 and all(decode_host_priorities(b, NAMES) == EXPECTED for b in bodies if b != b"[]")
    assert took < 0.4, took  # eight scorings would take 0.4 s at least
    assert sample(server, "hrl_extender_prioritize_total", outcome="neutral_overload") == shed
    assert sample(server, "hrl_extender_prioritize_total", outcome="ok") == 8 - shed


def test_a_deeply_nested_body_is_never_a_5xx_scored_or_shed():
    # issue 26 item 3: on the shed path the candidates' names were decoded and a RecursionError became a 500
    nested = b'{"Pod": {}, "NodeNames": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    cfg = config(False, requestDeadlineSeconds=0.15, maxLoopBusySeconds=0.15)
    with loaded(ExtenderServer(cfg, policy=Slow(0.3), port=0)) as server:
        rs = pipelined(server.port, "/scheduler/prioritize", [ARGS, nested, nested])  # the 2nd and 3rd are shed
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:  # a filter, shed too
            s.sendall(post("/scheduler/prioritize", ARGS) + post("/scheduler/filter", nested))
            status, _, body, rest = read_reply(s)
            rs.append((status, body))
            rs.append(read_reply(s, rest)[::2])
        with httpx.Client(base_url=server.base_url, timeout=10) as c:  # not shed: a 400 naming the problem
            direct = [c.post(f"/scheduler/{v}", content=nested) for v in ("prioritize", "filter")]
    assert [st for st, _ in rs] == [200] * 5
    assert rs[1][1] == rs[2][1] == b"[]"
    assert json.loads(rs[4][1])["Error"].startswith("hrl-extender: deadline")
    assert [r.status_code for r in direct] == [400, 400] and all("nested too deeply" in r.text for r in direct)
    assert sample(server, "hrl_extender_http_responses_total", code="500") == 0
