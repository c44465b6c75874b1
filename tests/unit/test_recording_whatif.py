"""policy.recording and policy.whatif on a recording whose truth is known: Online Boutique's objects on three nodes,
and signals made by the simulator's own model of it (rates from its call graph, latency from its visit latency, CPU
from its CPU per request). The recorder writes the documented directory (redacted, resumable); the what-if report
builds the app back from it and replays it with a small error."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from policy.observe import load_objects, parse_workload
from policy.recording import FORMAT_VERSION, Recording, RecordingError, RecordOptions, record, redact
from policy.recording.signals import StepSignals
from policy.sim.app import load_app
from policy.sim.calibrate import simulate_services
from policy.sim.model import PerfModel
from policy.state import ServiceEdge, ServiceGraph
from policy.whatif import WhatIfOptions, read_inputs, whatif

BOUTIQUE = Path(__file__).resolve().parents[2] / "policy" / "data" / "apps" / "online-boutique"
NS = "shop"
NODES = ("w1", "w2", "w3")
STEP = 60.0
LAM = 8.0  # user requests/s at the frontend
T0 = 1_796_315_805.206  # a unix time of 2026, to the millisecond (the CSV files must keep every digit)


def node(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "type": "kwok"}},
        "status": {
            "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def cluster_objects() -> list[dict]:
    objs = [node(n) for n in NODES]
    k = 0
    for o in load_objects(BOUTIQUE / "kubernetes-manifests.yaml"):
        if o.get("kind") != "Deployment":
            continue
        d = json.loads(json.dumps(o))
        d["metadata"]["namespace"] = NS
        d["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": "{...the whole object}"}
        objs.append(d)
        w = parse_workload(d)
        tmpl = d["spec"]["template"]
        for i in range(max(1, w.replicas)):
            spec = json.loads(json.dumps(tmpl["spec"]))
            spec["nodeName"] = NODES[k % len(NODES)]
            spec["containers"][0].setdefault("env", []).append({"name": "DB_PASSWORD", "value": "hunter2"})
            k += 1
            objs.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"{w.name}-5d8f7c9b4-{i:05d}",
                        "namespace": NS,
                        "labels": dict(tmpl["metadata"].get("labels") or {}),
                        "ownerReferences": [{"kind": "ReplicaSet", "name": f"{w.name}-5d8f7c9b4", "controller": True}],
                        "managedFields": [{"manager": "kubectl"}],
                    },
                    "spec": spec,
                    "status": {"phase": "Running"},
                }
            )
    objs.append(  # another tenant's pod on w1
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "batch-1", "namespace": "tenants", "labels": {"app": "batch"}},
            "spec": {"nodeName": "w1", "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Running"},
        }
    )
    return objs


class Objects:
    def __init__(self, fail_at: int | None = None):
        self.calls = 0
        self.fail_at = fail_at

    def list_all(self):
        self.calls += 1
        if self.fail_at is not None and self.calls == self.fail_at:
            raise OSError("connection refused")
        return [redact(o) for o in cluster_objects()], []


class ModelSignals:
    """Signals of Online Boutique at LAM user req/s as the simulator's model computes them."""

    pod_usage = "prometheus-cadvisor"

    def __init__(self):
        self.app = load_app("online-boutique")
        self.model = PerfModel(self.app)
        reps = {w.service: max(1, w.replicas) for w in self.app.workloads}
        self.lat = simulate_services(self.app, LAM, seed=3, replicas=reps)
        self.reps = reps

    def step(self, t: float) -> StepSignals:
        m = self.model
        served = {s: LAM * float(m.visits[m.pos[s]]) for s in m.services}
        edges = [
            ServiceEdge(m.services[a], m.services[b], rps=LAM * float(m.visits[a]) * cpr)
            for a, b, cpr, _par in m.edges
            if cpr > 0
        ]
        services = {}
        for s in m.services:
            lat = self.lat.get(s)
            services[s] = {
                "served_rps": served[s],
                "entry_rps": LAM if s == "frontend" else 0.0,
                "latency_p50_ms": lat[0] if lat else None,
                "latency_p95_ms": lat[1] if lat else None,
                "latency_p99_ms": lat[2] if lat else None,
                "success_pct": 100.0,
            }
        pods = {}
        for o in cluster_objects():
            if o["kind"] == "Pod" and o["metadata"]["namespace"] == NS:
                svc = o["metadata"]["labels"]["app"]
                p = self.app.params.get(svc)
                cpu = (p.cpu_ms_per_request if p else 0.05) * served.get(svc, 0.0) / self.reps.get(svc, 1)
                pods[(NS, o["metadata"]["name"])] = (cpu, p.working_set_mi if p else 64.0)
        pods[("tenants", "batch-1")] = (400.0, 100.0)
        return StepSignals(ServiceGraph.build(m.services, edges), services, pods)


def run(tmp_path: Path, steps: int = 4, objects=None, resume: bool = False, logs=None):
    t = [T0]
    opts = RecordOptions(tmp_path / "rec", steps * STEP, STEP, (NS,), 0.0, resume, logs or {}, None, "fake")
    return record(
        opts,
        objects or Objects(),
        ModelSignals(),
        clock=lambda: t[0],
        sleep=lambda s: t.__setitem__(0, t[0] + s),
    )


def test_the_recording_directory_is_documented_complete_and_redacted(tmp_path):
    m = run(tmp_path)
    assert m.status == "complete" and m.steps == 4 and m.format_version == FORMAT_VERSION
    rec = Recording(tmp_path / "rec")
    doc = json.loads((tmp_path / "rec" / "recording.json").read_text())
    assert doc["kind"] == "Recording" and doc["formatVersion"] == 1 and doc["stepS"] == STEP
    objs = rec.objects(0)
    pods = [o for o in objs if o["kind"] == "Pod" and o["metadata"]["namespace"] == NS]
    env = {e["name"]: e["value"] for e in pods[0]["spec"]["containers"][0]["env"]}
    assert env["DB_PASSWORD"] == "<redacted>"
    assert any(k.endswith("_ADDR") and v != "<redacted>" for k, v in env.items())  # the call graph's addresses
    assert "managedFields" not in pods[0]["metadata"]
    dep = next(o for o in objs if o["kind"] == "Deployment")
    assert "kubectl.kubernetes.io/last-applied-configuration" not in dep["metadata"]["annotations"]
    rows = rec.numeric_rows("pods")
    assert {r["time_s"] for r in rows} == {m.step_end_s(k) for k in range(4)}
    assert all(r["cpu_m"] is not None and r["node"] in NODES for r in rows)
    # the other tenants' pods too: they load the nodes the app runs on
    assert {r["cpu_m"] for r in rows if r["namespace"] == "tenants"} == {400.0}
    assert len(list(rec.rows("edges"))) == 4 * len(list(rec.graph(0).edges))
    fe = next(r for r in rec.numeric_rows("services") if r["service"] == "frontend")
    assert fe["entry_rps"] == pytest.approx(LAM) and fe["latency_p95_ms"] > fe["latency_p50_ms"] > 0


def test_an_interrupted_recording_resumes_where_it_stopped_and_refuses_other_settings(tmp_path):
    with pytest.raises(OSError):
        run(tmp_path, objects=Objects(fail_at=3))  # the third step's listing fails
    assert Recording(tmp_path / "rec").steps == 2
    with pytest.raises(RecordingError, match="--resume"):
        run(tmp_path)
    m = run(tmp_path, resume=True)
    assert m.steps == 4 and m.status == "complete"
    rec = Recording(tmp_path / "rec")
    times = sorted({r["time_s"] for r in rec.numeric_rows("services")})
    assert times == [m.step_end_s(k) for k in range(4)]  # no step twice, none missing
    with pytest.raises(RecordingError, match="complete"):
        run(tmp_path, resume=True)


def test_the_shadow_logs_of_the_window_are_copied_with_their_rotated_files(tmp_path):
    log = tmp_path / "decisions.jsonl"
    t0 = T0
    (tmp_path / "decisions.jsonl.1").write_text(json.dumps({"decided_at_s": t0 + 10, "pod": "old-rotated"}) + "\n")
    log.write_text(
        "\n".join(json.dumps({"decided_at_s": t0 + dt, "pod": f"p{dt}"}) for dt in (-100, 30, 200, 9999))
        + "\nnot json\n"
    )
    m = run(tmp_path, logs={"extender": str(log)})
    got = [r["pod"] for r in Recording(tmp_path / "rec").shadow_records("extender")]
    assert got == ["old-rotated", "p30", "p200"] and "3 records" in m.shadow["extender"]


def test_the_inputs_read_back_the_app_the_cluster_and_the_load(tmp_path):
    run(tmp_path)
    inp = read_inputs(tmp_path / "rec")
    assert inp.namespaces == [NS] and len(inp.workloads) == 12
    assert inp.steps == 4 and np.allclose(inp.load_rps, LAM)
    assert inp.entry == {"frontend": 1.0}
    assert len(inp.cluster.objects) == 3 and [b.node for b in inp.cluster.background] == [0]
    assert inp.cluster.background[0].cpu_use_m == pytest.approx(400.0)
    assert sum(len(v) for v in inp.placement.values()) == len([o for o in cluster_objects() if o["kind"] == "Pod"]) - 1
    assert np.isfinite(inp.cpu_cores).all() and inp.cpu_cores[0] > 0


def test_whatif_builds_the_app_back_replays_it_with_a_small_error_and_writes_the_report(tmp_path):
    run(tmp_path, steps=4)
    out = tmp_path / "report"
    w = whatif(tmp_path / "rec", out, WhatIfOptions(stacks=("hrl-scheduler",), seeds=1, front=False, iterations=8,
                                                    samples=1500))  # fmt: skip
    doc = json.loads((out / "report.json").read_text())
    err = doc["replay_error"]["median_abs_error_pct"]
    # the recording is the model's own output: built back and replayed, the error is the fit's and the sampling's
    assert err["p50"] < 15 and err["p95"] < 15, err
    assert doc["replay_error"]["cpu"]["error_pct"] < 15
    assert set(doc["results"]) == {"default-kube-scheduler", "hrl-scheduler"}
    md = (out / "report.md").read_text()
    assert "Replay error" in md and "What each stack would have done" in md and "hrl-scheduler" in md
    assert (out / "app" / "calibration.md").exists() and w.baseline == "default-kube-scheduler"
    for p in doc["plots"]:
        assert (out / p).stat().st_size > 1000
    assert math.isfinite(doc["results"]["hrl-scheduler"]["latency_p95_ms"])


def test_whatif_refuses_an_unknown_stack_and_a_directory_that_is_not_a_recording(tmp_path):
    with pytest.raises(ValueError, match="unknown stack"):
        whatif(tmp_path, tmp_path / "out", WhatIfOptions(stacks=("nope",)))
    with pytest.raises(RecordingError, match="not a recording"):
        whatif(tmp_path, tmp_path / "out", WhatIfOptions(stacks=("default-kube-scheduler",)))
    assert replace(WhatIfOptions(), seeds=2).seeds == 2
