"""The probes' own listener (``listen.healthPort``, extender.server.HealthListener) over real sockets on 127.0.0.1:
``/livez``, ``/healthz`` and ``/readyz`` answer there while the event loop serving the verbs is provably held (a
handler stuck in the policy, issue 26 item 2: under overload the serving port's probes took 2 s, the chart's
liveness timeout), with the serving port's readiness; once that loop has not turned for
``limits.maxLoopStallSeconds`` both answer 503; nothing but the probes is served there; ``hrl-extender`` refuses
a health port it cannot bind (exit 4, one line)."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
from http_helpers import ARGS, EXPECTED, NAMES, loaded, post, read_reply, sample

from extender.config import load_extender_config
from extender.server import ExtenderServer
from extender.wire import decode_host_priorities
from policy.lowlevel import TopologyHeuristic

ROOT = Path(__file__).resolve().parents[2]


def health_config(**limits):
    return load_extender_config(
        {
            "apiVersion": "hrl-scheduler.io/v1alpha1",
            "kind": "ExtenderConfiguration",
            "listen": {"host": "127.0.0.1", "port": 0, "healthPort": 0},
            "limits": limits,
            "precompute": {"enabled": False},  # the policy is called on the loop for every prioritize
        }
    )


class Held(TopologyHeuristic):
    """The heuristic, holding the event loop inside its first ``score`` until ``release`` is set (at most 60 s):
    between ``entered`` and ``returned`` the loop serving the verbs runs nothing else."""

    def __init__(self):
        super().__init__()
        for name in ("entered", "release", "returned"):
            object.__setattr__(self, name, threading.Event())

    def score(self, pod, candidates, index, intent=None):
        if not self.returned.is_set():
            self.entered.set()
            self.release.wait(60)
        try:
            return super().score(pod, candidates, index, intent)
        finally:
            self.returned.set()


def hold_the_loop(server: ExtenderServer, policy: Held) -> socket.socket:
    """Send a prioritize that the loop handles inside ``policy`` and return once the loop is in it."""
    s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    s.sendall(post("/scheduler/prioritize", ARGS))
    assert policy.entered.wait(30), "the prioritize never reached the policy"
    return s


def test_the_probes_answer_on_the_health_port_while_the_serving_loop_is_held():
    policy = Held()
    with loaded(ExtenderServer(health_config(), policy=policy)) as server:
        assert server.health_port not in (None, 0, server.port)
        held = hold_the_loop(server, policy)
        main = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        try:
            main.sendall(b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")  # waits for the loop: answered after the release
            with httpx.Client(base_url=server.health_url, timeout=10) as c:
                replies = [(p, c.get(p)) for p in ("/livez", "/healthz", "/readyz")]
                head = c.head("/livez")
            assert not policy.returned.is_set()  # every probe answered while the loop was inside the policy
            assert [(p, r.status_code, r.text) for p, r in replies] == [
                ("/livez", 200, "ok\n"),
                ("/healthz", 200, "ok\n"),
                ("/readyz", 200, "ok\n"),  # the snapshot is loaded: ready, as the serving port says below
            ]
            assert head.status_code == 200 and head.content == b""
        finally:
            policy.release.set()
        status, _, body, _ = read_reply(held)
        assert status == 200 and decode_host_priorities(body, NAMES) == EXPECTED  # scored, not shed
        assert read_reply(main)[:3:2] == (200, b"ok\n")
        held.close()
        main.close()
        assert httpx.get(server.base_url + "/readyz", timeout=10).text == "ok\n"
        assert sample(server, "hrl_extender_prioritize_total", outcome="ok") == 1


def test_the_health_port_answers_503_once_the_serving_loop_has_not_turned_for_max_loop_stall_seconds():
    policy = Held()
    with loaded(ExtenderServer(health_config(maxLoopStallSeconds=0.3), policy=policy)) as server:
        with httpx.Client(base_url=server.health_url, timeout=10) as c:
            assert c.get("/livez").status_code == 200  # a free loop turns (its sweep) well within 0.3 s
            held = hold_the_loop(server, policy)
            try:
                deadline = time.monotonic() + 20
                while (r := c.get("/livez")).status_code == 200 and time.monotonic() < deadline:
                    time.sleep(0.05)
                ready = c.get("/readyz")
                assert not policy.returned.is_set()
            finally:
                policy.release.set()
            assert r.status_code == 503, r.text
            assert r.text.startswith("not live: the event loop serving the verbs has not turned for ")
            assert r.text.endswith("(> limits.maxLoopStallSeconds 0.3)\n")
            assert ready.status_code == 503 and ready.text.startswith("not ready: the event loop")
            assert read_reply(held)[0] == 200
            held.close()
            deadline = time.monotonic() + 20
            while (r := c.get("/livez")).status_code != 200 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert (r.status_code, r.text) == (200, "ok\n")  # the loop turns again: live


def test_the_health_port_serves_the_probes_only_with_the_serving_ports_readiness():
    with ExtenderServer(health_config()) as server, httpx.Client(timeout=10) as c:
        # no snapshot: not ready on either port, the same reason
        main, health = c.get(server.base_url + "/readyz"), c.get(server.health_url + "/readyz")
        expected = (503, "not ready: no cluster snapshot loaded yet\n")
        assert (health.status_code, health.text) == (main.status_code, main.text) == expected
        for path in ("/scheduler/prioritize", "/scheduler/filter", "/metrics", "/"):
            url = server.health_url + path
            r = c.post(url, content=ARGS) if "scheduler" in path else c.get(url)
            assert r.status_code == 404 and "serves /livez, /healthz and /readyz only" in r.text, path
        r = c.post(server.health_url + "/livez")
        assert r.status_code == 405 and r.headers["allow"] == "GET"
        for outcome in ("ok", "invalid", "neutral_overload", "neutral_deadline", "neutral_error"):
            assert sample(server, "hrl_extender_prioritize_total", outcome=outcome) == 0  # no verb there


def test_without_a_health_port_the_probes_are_on_the_serving_port_only():
    with ExtenderServer(port=0) as server:
        assert server.health is None and server.health_port is None and server.health_url is None
        assert httpx.get(server.base_url + "/livez", timeout=10).text == "ok\n"


def test_hrl_extender_exits_4_with_one_line_when_its_health_port_is_taken(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        cfg = tmp_path / "extender.yaml"
        cfg.write_text(
            "apiVersion: hrl-scheduler.io/v1alpha1\nkind: ExtenderConfiguration\n"
            f"listen: {{host: 127.0.0.1, port: 0, healthPort: {port}}}\n"
        )
        r = subprocess.run(
            [sys.executable, "-m", "extender", "--config", str(cfg)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert r.returncode == 4
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines[-1] == f"hrl-extender: error: listen.healthPort: cannot bind 127.0.0.1:{port}: Address already in use"
    assert "serving on" not in r.stderr
