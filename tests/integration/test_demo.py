"""`make demo`'s job end to end (shortened): the real extender over HTTP, the real descheduler, the simulator."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KEYS = {"latency_mean_ms", "latency_p95_ms", "latency_p99_ms", "failed_pct", "slo_violation_pct",
        "cpu_core_hours", "evictions", "cross_node_call_pct"}


def test_the_demo_writes_its_json_and_the_extender_saw_every_pod(tmp_path):
    out = tmp_path / "demo.json"
    proc = subprocess.run([sys.executable, str(ROOT / "hack" / "demo.py"), "--minutes", "10", "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "hrl-scheduler" in proc.stdout and "default-kube-scheduler" in proc.stdout
    d = json.loads(out.read_text())
    assert {k: d[k] for k in ("app", "trace", "nodes", "minutes", "seed")} == {
        "app": "online-boutique", "trace": "nasa", "nodes": 8, "minutes": 10, "seed": 0}
    base, hrl = d["policies"]["default-kube-scheduler"], d["policies"]["hrl-scheduler"]
    assert set(base) == KEYS
    assert set(hrl) == KEYS | {"pods_placed", "extender_prioritize_calls"}
    # every placement went through the extender's prioritize verb (counted by the extender itself)
    assert hrl["pods_placed"] >= 12
    assert hrl["extender_prioritize_calls"] == hrl["pods_placed"]
    assert hrl["cross_node_call_pct"] < base["cross_node_call_pct"]
    assert all(isinstance(v, (int, float)) for v in {**base, **hrl}.values())
