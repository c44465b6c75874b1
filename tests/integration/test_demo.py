"""`make demo`'s job end to end (shortened): the real extender over HTTP, the real descheduler, the simulator."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KEYS = {
    "latency_mean_ms",
    "latency_p95_ms",
    "latency_p99_ms",
    "failed_pct",
    "slo_violation_pct",
    "cpu_core_hours",
    "evictions",
    "cross_node_call_pct",
}


def test_the_demo_writes_its_json_and_the_extender_saw_every_pod(tmp_path):
    out = tmp_path / "demo.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "hack" / "demo.py"), "--minutes", "10", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    for row in ("default-kube-scheduler+hpa", "hrl-scheduler", "drpc"):
        assert row in proc.stdout
    d = json.loads(out.read_text())
    assert {k: d[k] for k in ("scenario", "apps", "nodes", "minutes", "seed")} == {
        "scenario": "shared-cluster",
        "apps": ["online-boutique", "sock-shop", "dsb-hotel-reservation"],
        "nodes": 10,
        "minutes": 10,
        "seed": 0,
    }
    pol = d["policies"]
    assert set(pol) == {"default-kube-scheduler", "default-kube-scheduler+hpa", "hrl-scheduler", "drpc"}
    base, hrl = pol["default-kube-scheduler"], pol["hrl-scheduler"]
    assert set(base) == KEYS
    assert set(hrl) == KEYS | {"pods_placed", "extender_prioritize_calls", "scale_updates", "resizes", "learned"}
    # the learned parts are used exactly when their bundles exist (else the stand-ins, said so)
    bundles = ROOT / "policy" / "bundles" / "hrl-scheduler"
    assert hrl["learned"]["placement"] == (bundles / "low" / "manifest.json").is_file()
    assert hrl["learned"]["intent"] == (bundles / "high" / "intent" / "manifest.json").is_file()
    # every placement went through the extender's prioritize verb (counted by the extender itself), new
    # replicas from the scale subresource included
    assert hrl["pods_placed"] >= 30
    assert hrl["extender_prioritize_calls"] == hrl["pods_placed"]
    assert hrl["cross_node_call_pct"] < base["cross_node_call_pct"]
    # the intent changes with the state, and each change is printed
    assert len(d["intents"]) >= 2
    assert proc.stderr.count(" intent: ") == len(d["intents"])
    assert all(isinstance(v, (int, float)) for p in pol.values() for k, v in p.items() if k != "learned")


def test_the_demo_loads_no_torch(tmp_path):
    code = (
        "import importlib.util, sys; spec = importlib.util.spec_from_file_location('demo', 'hack/demo.py'); "
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); "
        "rc = m.main(['--minutes', '2', '--json', sys.argv[1]]); "
        "print('torch' in sys.modules, rc)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "demo.json")], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "False 0"
