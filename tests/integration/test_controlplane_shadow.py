"""Shadow mode end to end on the real control plane (markers ``controlplane`` and ``prometheus``), as
docs/shadow-mode.md runs it: Online Boutique on kwok nodes with its mesh and cAdvisor telemetry in a real Prometheus
(``hack/boutique-replay.py``), bound by a kube-scheduler profile registered with an ``hrl-extender`` in
``mode: shadow``; a dry run of the descheduler with its shadow log; ``hrl-policy record`` of the running workload
while pods are scaled (so that the extender decides in the window); ``hrl-policy whatif`` on the recording."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from cp_helpers import BOUTIQUE, ROOT, cpmod, metric, metrics, node_of, wait_for, wait_running
from scripts import load_script

pytestmark = [pytest.mark.controlplane, pytest.mark.prometheus]

SHADOW = "hrl-shadow"  # the kube-scheduler profile whose extender answers in shadow mode
STEP_S = 15
STEPS = 4


def _cli(*args: str, timeout_s: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "policy.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout_s,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def _shadow_extender(cp, tmp_path: Path):
    port = cpmod.free_ports(1)[0]
    log = tmp_path / "shadow" / "decisions.jsonl"
    cfg = {
        "apiVersion": "hrl-scheduler.io/v1alpha1",
        "kind": "ExtenderConfiguration",
        "listen": {"host": "127.0.0.1", "port": port},
        "kubernetes": {"enabled": True, "kubeconfig": str(cp.kubeconfigs["hrl-extender"])},
        "topology": {"sources": [str(BOUTIQUE)]},
        "mode": "shadow",
        "decisions": {"log": str(log), "explain": True},
    }
    path = tmp_path / "extender-shadow.yaml"
    path.write_text(yaml.safe_dump(cfg))
    base = f"http://127.0.0.1:{port}"
    comp = cpmod.Component(
        "hrl-extender-shadow",
        [sys.executable, "-m", "extender", "--config", str(path)],
        cp.logs_dir / "hrl-extender-shadow.log",
        f"{base}/readyz",
        env={"PYTHONUNBUFFERED": "1"},
    )
    return cp.start(comp, 60), base, log


def _records(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def test_shadow_extender_and_descheduler_a_recording_and_a_whatif_report_on_a_running_boutique(
    control_plane, namespace, kwok_nodes, tmp_path
):
    cp, ns = control_plane, namespace
    nodes = kwok_nodes(4)
    br = load_script("hrl_boutique_replay", ROOT / "hack" / "boutique-replay.py")
    ext, base, decisions = _shadow_extender(cp, tmp_path)
    state = None
    try:
        with cp.scheduler(SHADOW, [cpmod.extender_registration(f"{base}/scheduler")]):
            up = subprocess.run(
                [sys.executable, str(ROOT / "hack" / "boutique-replay.py"), "up", f"--kubeconfig={cp.kubeconfig}",
                 f"--namespace={ns}", f"--scheduler={SHADOW}", "--nodes=0", f"--dir={tmp_path / 'boutique'}",
                 "--scrape=2s"],
                capture_output=True, text=True, cwd=ROOT, timeout=300,
            )  # fmt: skip
            assert up.returncode == 0, up.stderr
            state = json.loads((tmp_path / "boutique" / "state.json").read_text())
            source = next(x for x in up.stdout.split() if x.startswith("prometheus+istio://"))
            pods = wait_running(cp, ns, 12, timeout_s=120)
            assert {node_of(p) for p in pods} <= set(nodes)

            # 1. The shadow extender answered neutral scores and logged, per pod, what it would have chosen and
            # the node kube-scheduler bound it to (from its watch).
            def logged(n):
                return lambda: len(_records(decisions)) >= n and _records(decisions)

            recs = wait_for(logged(12), 30, "12 shadow decisions in the log")
            bound = {f"{ns}/{p['metadata']['name']}": node_of(p) for p in pods}
            by_pod = {r["pod"]: r for r in recs}
            assert set(by_pod) == set(bound)
            assert all(by_pod[k]["bound_node"] == v and by_pod[k]["mode"] == "shadow" for k, v in bound.items())
            assert all(r["result"] in ("agree", "disagree", "indifferent", "not_scored", "outside") for r in recs)
            scored = [r for r in recs if r["result"] in ("agree", "disagree")]
            assert scored and all(r["candidates"] and r["our_choice"] for r in scored)
            # each scored record explains our best node: named contributions that sum to its score
            for r in scored:
                best = r["explanation"]["best"]
                # a pod scored before any pod it calls or serves was bound ties every node at 0: nothing to name
                assert best["node"] == r["our_choice"][0] and (best["top"] or r["best_score"] == 0), r
                assert sum(c["points"] for c in best["contributions"]) == pytest.approx(best["score"], abs=1e-3)
            assert any(r["explanation"]["best"]["top"] for r in scored)  # and the others have their parts named
            m = metrics(base)
            assert metric(m, "hrl_extender_prioritize_total", outcome="shadow") >= 12
            agree = metric(m, "hrl_extender_decisions_total", mode="shadow", result="agree")
            disagree = metric(m, "hrl_extender_decisions_total", mode="shadow", result="disagree")
            assert agree + disagree == len(scored)

            # 2. Record the running workload while the frontend is scaled up (two more shadow decisions in the
            # window) and the descheduler makes one dry run with its shadow log.
            desched_log = tmp_path / "shadow" / "descheduler.jsonl"
            dcfg = tmp_path / "descheduler.yaml"
            dcfg.write_text(
                yaml.safe_dump(
                    {
                        "apiVersion": "hrl-scheduler.io/v1alpha1",
                        "kind": "DeschedulerConfiguration",
                        "dryRun": True,
                        "shadow": {"log": str(desched_log)},
                        "topology": {"sources": [str(BOUTIQUE)]},
                        "schedulerPrediction": {"extenderSchedulers": [SHADOW]},
                    }
                )
            )
            desched_log.parent.mkdir(parents=True, exist_ok=True)
            desched_log.touch()
            rec_dir = tmp_path / "rec"
            record = subprocess.Popen(
                [sys.executable, "-m", "policy.cli", "record", "-o", str(rec_dir), f"--window={STEP_S * STEPS}s",
                 f"--step={STEP_S}s", f"--prometheus={source}", f"--namespace={ns}", "--lag=3s",
                 f"--kubeconfig={cp.kubeconfigs['hrl-recorder']}", f"--extender-log={decisions}",
                 f"--descheduler-log={desched_log}"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
            )  # fmt: skip
            try:
                time.sleep(5)
                cp.kubectl("scale", "deployment/frontend", "--replicas=3", "-n", ns)
                wait_running(cp, ns, 14, timeout_s=60)
                d = subprocess.run(
                    [sys.executable, "-m", "descheduler", "--once", "--json", "--config", str(dcfg),
                     "--kubeconfig", str(cp.kubeconfigs["hrl-descheduler"])],
                    capture_output=True, text=True, cwd=ROOT, timeout=120,
                )  # fmt: skip
                assert d.returncode == 0, d.stderr
                report = json.loads(d.stdout)
                out, err = record.communicate(timeout=STEP_S * STEPS + 120)
            finally:
                if record.poll() is None:
                    record.kill()
                    record.wait()
            assert record.returncode == 0, err

        # the dry run planned as the real run does, evicted nothing, and simulated where each move would land
        assert report["dry_run"] is True and report["shadow"]["kind"] == "DeschedulerShadowCycle"
        (cycle,) = _records(desched_log)
        assert all(mv["predicted_node"] in nodes for mv in cycle["moves"])
        evictions = [e for e in cp.audit_events() if (e.get("objectRef") or {}).get("subresource") == "eviction"]
        assert not [e for e in evictions if (e["objectRef"].get("namespace") == ns)]

        # 3. The recording: complete, the app's objects and signals per step, the shadow logs of the window; the
        # recorder only listed, and never read a Secret or a ConfigMap.
        assert f"recorded {STEPS} of {STEPS} steps (complete)" in out, out
        manifest = json.loads((rec_dir / "recording.json").read_text())
        assert manifest["status"] == "complete" and manifest["steps"] == STEPS
        ext_recs = _records(rec_dir / "shadow" / "extender.jsonl")
        assert len(ext_recs) >= 2 and all(r["pod"].startswith(f"{ns}/frontend-") for r in ext_recs)
        assert len(_records(rec_dir / "shadow" / "descheduler.jsonl")) == 1
        audit = cp.audit_events("hrl-recorder")
        assert audit and {e["verb"] for e in audit} == {"list"}
        assert not {(e.get("objectRef") or {}).get("resource") for e in audit} & {"secrets", "configmaps"}

        # 4. What-if: the app built back from the recording, the default stack replayed with its error stated,
        # hrl-scheduler replayed, the shadow decisions compared with the simulator's.
        w = _cli("whatif", str(rec_dir), "--policy", "hrl-scheduler", "-o", str(tmp_path / "report"), "--seeds=1",
                 "--no-front", "--iterations=8", "--samples=1000")  # fmt: skip
        assert w.returncode == 0, w.stderr
        assert "replay error of default-kube-scheduler" in w.stdout and "hrl-scheduler: p95" in w.stdout
        doc = json.loads((tmp_path / "report" / "report.json").read_text())
        assert len(doc["replay_error"]["services"]) >= 10
        err = doc["replay_error"]["median_abs_error_pct"]
        assert err["p50"] <= 15 and err["p95"] <= 15, err  # the bar for the built app's calibration
        assert any("shorter than the simulated descheduler's period" in n for n in doc["notes"])
        assert doc["shadow"]["extender"]["decisions"] == len(ext_recs)
        assert doc["shadow"]["descheduler"]["cycles"] == 1
        # every scored decision of the window is compared with the simulator's or skipped with its reason; a decision
        # where every node tied (indifferent: it depends on where the frontend's callees landed) has nothing to compare
        sim = doc["shadow"]["simulator"]
        scored_in_window = [r for r in ext_recs if r["result"] in ("agree", "disagree") and r.get("candidates")]
        why = (sim, [(r["pod"], r["result"], r.get("decided_at_s")) for r in ext_recs])
        assert sim["compared"] + sum(sim["skipped"].values()) == len(scored_in_window), why
        assert sim["compared"] >= 1 or not scored_in_window, why
        md = (tmp_path / "report" / "report.md").read_text()
        assert "Replay error" in md and "The shadow logs" in md
    finally:
        if state is not None:
            for k in ("prometheus_pid", "exporter_pid"):
                br._stop(int(state[k]))
        cp.stop_component(ext)
