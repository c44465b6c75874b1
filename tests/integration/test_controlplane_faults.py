"""Extender faults seen from a real kube-scheduler (issue 3, item 4c).

With the shipped registration (``ignorable: true``) a scheduler whose extenders are down or slower than
``httpTimeout`` still places pods: scoring fails open. With ``filterVerb`` and ``ignorable: false`` the pod
stays Pending and the extender's error is in its events, until the extender answers again: that is why the
shipped configuration is ignorable. Each case runs its own kube-scheduler (``extenders`` is global to a
scheduler configuration), next to the session's two.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from cp_helpers import apply, cpmod, deployment, events, pods, scheduled_by, wait_for, wait_running

pytestmark = pytest.mark.controlplane


class FakeExtender:
    """A small stand-in for the extender's HTTP slice: every node passes ``filter``, every node scores 0 in
    ``prioritize``; each answer is delayed by ``delay_s``. Counts the requests per verb."""

    def __init__(self, port: int = 0, delay_s: float = 0.0):
        self.delay_s = delay_s
        self.calls = {"filter": 0, "prioritize": 0}
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                verb = self.path.rsplit("/", 1)[-1]
                fake.calls[verb] = fake.calls.get(verb, 0) + 1
                time.sleep(fake.delay_s)
                names = body.get("NodeNames") or []
                if verb == "filter":
                    reply = {"NodeNames": names, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": ""}
                else:
                    reply = [{"Host": n, "Score": 0} for n in names]
                data = json.dumps(reply).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the scheduler gave up waiting (httpTimeout)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/scheduler"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def test_with_ignorable_extenders_down_or_too_slow_pods_still_schedule(control_plane, namespace, kwok_nodes):
    cp, ns = control_plane, namespace
    kwok_nodes(3)
    down_url = f"http://127.0.0.1:{cpmod.free_ports(1)[0]}/scheduler"
    with FakeExtender(delay_s=2.0) as slow:  # httpTimeout is 300ms
        regs = [
            cpmod.extender_registration(down_url, filterVerb="filter"),
            cpmod.extender_registration(slow.url, filterVerb="filter"),
        ]
        assert all(r["ignorable"] is True for r in regs)
        with cp.scheduler("hrl-faulty", regs):
            apply(cp, ns, [deployment("web", replicas=3, scheduler="hrl-faulty")])
            ps = wait_running(cp, ns, 3, timeout_s=60)
        assert slow.calls["filter"] >= 3  # it was asked, and not waited for
    assert all(scheduled_by(cp, ns, p["metadata"]["name"]) == "hrl-faulty" for p in ps)


def test_with_a_non_ignorable_filter_extender_down_the_pod_stays_pending_with_the_error_in_its_events(
    control_plane, namespace, kwok_nodes
):
    cp, ns = control_plane, namespace
    kwok_nodes(2)
    port = cpmod.free_ports(1)[0]
    url = f"http://127.0.0.1:{port}/scheduler"
    reg = cpmod.extender_registration(url, ignorable=False, prioritizeVerb=None, weight=None, filterVerb="filter")
    assert reg["filterVerb"] == "filter" and reg["ignorable"] is False
    with cp.scheduler("hrl-strict", [reg]):
        apply(cp, ns, [deployment("web", scheduler="hrl-strict")])

        def failed_event():
            ps = pods(cp, ns)
            if len(ps) != 1:
                return None
            evs = [e for e in events(cp, ns, ps[0]["metadata"]["name"]) if e["reason"] == "FailedScheduling"]
            return (ps[0], evs) if evs else None

        pod, evs = wait_for(failed_event, 60, "a FailedScheduling event")
        assert not pod["spec"].get("nodeName") and pod["status"]["phase"] == "Pending"
        message = " ".join(e.get("message", "") for e in evs)
        assert f"127.0.0.1:{port}/scheduler/filter" in message and "connection refused" in message

        # The same pod is scheduled as soon as the extender answers: the extender was the only obstacle.
        with FakeExtender(port=port) as ext:
            (bound,) = wait_running(cp, ns, 1, timeout_s=60)
            assert ext.calls["filter"] >= 1
        assert bound["metadata"]["name"] == pod["metadata"]["name"]
        assert scheduled_by(cp, ns, bound["metadata"]["name"]) == "hrl-strict"
