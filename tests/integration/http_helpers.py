"""What the extender's socket-level tests share: the Online Boutique fixture, a configuration with given
``limits``, a policy that takes its time, and a raw HTTP/1.1 client (to send what httpx will not: half requests,
pipelined requests, stalls)."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

from extender.config import load_extender_config
from extender.server import ExtenderServer
from policy.lowlevel import TopologyHeuristic
from policy.state import ServiceEdge, ServiceGraph

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "extender"
NAMES = ["boutique-worker", "boutique-worker2", "boutique-worker3"]
ARGS = (FIX / "args-nodecachecapable.json").read_bytes()
#: The heuristic's scores of ARGS on the fixture cluster.
EXPECTED = {"boutique-worker": 1, "boutique-worker2": 5, "boutique-worker3": 2}


def boutique_graph() -> ServiceGraph:
    d = json.loads((FIX / "online-boutique-graph.json").read_text())
    return ServiceGraph.build(d["services"], [ServiceEdge(e["caller"], e["callee"], e["rps"]) for e in d["edges"]])


def config(precompute: bool = True, **limits):
    """An ExtenderConfiguration with these ``limits`` (camelCase keys); ``precompute`` off where a slow policy
    must be called per request."""
    return load_extender_config(
        {
            "apiVersion": "hrl-scheduler.io/v1alpha1",
            "kind": "ExtenderConfiguration",
            "limits": limits,
            "precompute": {"enabled": precompute},
        }
    )


def loaded(server: ExtenderServer) -> ExtenderServer:
    server.store.set_graph(boutique_graph())
    server.store.load_file(FIX / "cluster-list.json")
    return server


class Slow(TopologyHeuristic):
    """The heuristic, taking ``delay_s`` longer per score (a policy stuck for a while, on the event loop)."""

    def __init__(self, delay_s: float):
        super().__init__()
        object.__setattr__(self, "delay_s", delay_s)

    def score(self, pod, candidates, index, intent=None):
        time.sleep(self.delay_s)
        return super().score(pod, candidates, index, intent)


def sample(server: ExtenderServer, name: str, **labels: str) -> float:
    return server.registry.get_sample_value(name, labels) or 0.0


def post(path: str, body: bytes, extra: bytes = b"") -> bytes:
    """One POST request's bytes (``extra``: more header lines, each ending in CRLF)."""
    return f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n".encode() + extra + b"\r\n" + body


def read_reply(s: socket.socket, buf: bytes = b"") -> tuple[int, dict[str, str], bytes, bytes]:
    """Read one reply from ``s``: ``(status, headers (lower-case names), body, what followed it)``; raises
    ``ConnectionError`` when the server closes before a whole reply."""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before a reply (got {buf[:80]!r})")
        buf += chunk
    head, buf = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(buf) < length:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed within a reply's body")
        buf += chunk
    return int(lines[0].split()[1]), headers, buf[:length], buf[length:]


def closed_by_server(s: socket.socket, within_s: float) -> bool:
    """True when the server closes ``s`` (EOF or reset) within ``within_s`` seconds (whatever it sends first is
    read and dropped)."""
    s.settimeout(within_s)
    end = time.monotonic() + within_s
    try:
        while time.monotonic() < end:
            if not s.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return False


def pipelined(port: int, path: str, bodies: list[bytes], timeout_s: float = 10.0) -> list[tuple[int, bytes]]:
    """Send ``bodies`` as pipelined HTTP/1.1 POSTs on one connection; return each reply's (status, body)."""
    out: list[tuple[int, bytes]] = []
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.sendall(b"".join(post(path, b) for b in bodies))
        rest = b""
        while len(out) < len(bodies):
            status, _, body, rest = read_reply(s, rest)
            out.append((status, body))
    return out
