"""Property-based test (hypothesis) of the extender's endpoints over a real socket: a running ``hrl-extender``
process, driven only through HTTP, answers any request (mutated ExtenderArgs, damaged JSON text, random bytes,
other paths and methods) with a documented status (200, or a 4xx for a bad request / path / method), never a 5xx
nor a dropped connection, and a 200 to prioritize is a list of ``{Host, Score 0..10}``. ``make fuzz`` runs the same
oracle (``tests/fuzzing.py``) on 60,000 requests, lone UTF-16 surrogates included (issue 13 item 3, the JSON
encoder, is another change: they are left out here)."""

from __future__ import annotations

import json
import random

import httpx
import pytest
from fuzzing import ARGS_LIST_SEED, ARGS_SEED, check_reply, mutate, mutate_text
from hypothesis import given, settings
from hypothesis import strategies as st
from proc_helpers import ROOT, extender_process, free_port

SEEDS = [json.loads(ARGS_SEED.read_text()), json.loads(ARGS_LIST_SEED.read_text())]


@pytest.fixture(scope="module")
def extender(tmp_path_factory):
    port = free_port()
    cfg = tmp_path_factory.mktemp("ext") / "extender.yaml"
    cfg.write_text(
        "apiVersion: hrl-scheduler.io/v1alpha1\nkind: ExtenderConfiguration\n"
        f"listen: {{host: 127.0.0.1, port: {port}}}\n"
        f"snapshotFile: {ROOT / 'tests' / 'fixtures' / 'extender' / 'cluster-list.json'}\nlogLevel: ERROR\n"
    )
    with extender_process(cfg, port) as ext, httpx.Client(base_url=ext.base_url, timeout=10) as client:
        assert ext.ready is not None and ext.ready.status_code == 200
        yield ext, client
        assert ext.proc.poll() is None, "hrl-extender died during the test"


@settings(max_examples=400)
@given(
    seed=st.integers(0, 2**32),
    kind=st.sampled_from(["mutated", "text", "bytes", "other"]),
    verb=st.sampled_from(["prioritize", "filter"]),
)
def test_any_request_gets_a_documented_answer_never_a_5xx(extender, seed, kind, verb):
    _ext, client = extender
    rng = random.Random(seed)
    method, path, doc = "POST", f"/scheduler/{verb}", None
    if kind == "mutated":
        doc = mutate(rng.choice(SEEDS), rng, rng.randint(1, 4))
        body = json.dumps(doc).encode()
    elif kind == "text":
        body = mutate_text(json.dumps(rng.choice(SEEDS)), rng).encode("utf-8", "surrogatepass")
    elif kind == "bytes":
        body = rng.randbytes(rng.randint(0, 2000))
    else:
        method = rng.choice(["GET", "PUT", "DELETE", "POST"])
        path = rng.choice(["/scheduler/prioritize", "/healthz", "/readyz", "/metrics", "/", "/nope"])
        body = b"{}"
    resp = client.request(method, path, content=body, headers={"Content-Type": "application/json"})
    assert check_reply(verb if method == "POST" else "", resp.status_code, resp.content, doc) is None
