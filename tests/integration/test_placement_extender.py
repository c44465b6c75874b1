"""A placement policy trained for seconds is exported, loaded by the extender and served over a real socket
(127.0.0.1): ExtenderServer in process, and the hrl-extender command with ``policy.name: learned``."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import httpx
import numpy as np
import pytest
from proc_helpers import extender_process, free_port

from extender.config import build_policy, load_extender_config
from extender.server import ExtenderServer
from extender.wire import decode_host_priorities, parse_extender_args
from policy.bundle import BundleError
from policy.lowlevel import LearnedPlacement
from policy.state import ServiceEdge, ServiceGraph

torch = pytest.importorskip("torch")
from policy.cli.core import main as cli_main  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "extender"
NAMES = ["boutique-worker", "boutique-worker2", "boutique-worker3"]
ARGS = (FIX / "args-nodecachecapable.json").read_bytes()


def boutique_graph() -> ServiceGraph:
    d = json.loads((FIX / "online-boutique-graph.json").read_text())
    return ServiceGraph.build(d["services"], [ServiceEdge(e["caller"], e["callee"], e["rps"]) for e in d["edges"]])


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Path]:
    """``hrl-policy train placement --quick`` (seconds of training) into a temporary directory."""
    d = tmp_path_factory.mktemp("placement")
    rc = cli_main(
        ["train", "placement", "--quick", "--no-eval", "--out", str(d / "bundle"), "--run-dir", str(d / "run")]
    )
    assert rc == 0
    return d / "bundle", d / "run"


def test_a_short_training_run_writes_its_log_curves_checkpoint_and_bundle(trained):
    bundle, run = trained
    with (run / "log.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["iteration"]) for r in rows] == list(range(len(rows))) and len(rows) >= 2
    assert all(r["train_return"] for r in rows[1:])
    assert (run / "learning_curves.png").stat().st_size > 1000
    assert (run / "checkpoint.pt").exists() and (run / "report.json").exists()
    assert (bundle / "manifest.json").exists() and sum(f.stat().st_size for f in bundle.iterdir()) < 1_000_000


def test_export_placement_rebuilds_the_bundle_from_the_checkpoint(trained, tmp_path):
    bundle, run = trained
    assert cli_main(["export", "placement", str(run / "checkpoint.pt"), "--out", str(tmp_path / "b")]) == 0
    a, b = LearnedPlacement.load(bundle), LearnedPlacement.load(tmp_path / "b")
    assert a.version == b.version and all(np.array_equal(a.weights[k], b.weights[k]) for k in a.weights)
    assert cli_main(["export", "placement", str(tmp_path / "nothing.pt"), "--out", str(tmp_path / "c")]) == 2


def config_for(bundle: Path, **extra):
    return load_extender_config(
        {
            "apiVersion": "hrl-scheduler.io/v1alpha1",
            "kind": "ExtenderConfiguration",
            "policy": {"name": "learned", "bundle": str(bundle)},
            **extra,
        }
    )


def test_the_extender_serves_the_exported_bundle_over_http_with_integer_scores(trained):
    bundle, _ = trained
    config = config_for(bundle)
    with ExtenderServer(config, port=0) as s:
        assert isinstance(s.policy, LearnedPlacement)
        s.store.set_graph(boutique_graph())
        view = s.store.load_file(FIX / "cluster-list.json")
        with httpx.Client(base_url=s.base_url, timeout=10) as c:
            r = c.post("/scheduler/prioritize", content=ARGS, headers={"Content-Type": "application/json"})
            assert r.status_code == 200
            raw = r.json()
            assert all(isinstance(h["Score"], int) and 0 <= h["Score"] <= 10 for h in raw)
            got = decode_host_priorities(r.content, NAMES)
            metrics = c.get("/metrics").text
    assert 'hrl_extender_prioritize_total{outcome="ok"} 1.0' in metrics
    # what was served is the policy's own score, rounded half up
    pod = parse_extender_args(ARGS).pod
    want = LearnedPlacement.load(bundle).score(pod, NAMES, view.index, None)
    assert got == {n: int(np.floor(v + 0.5)) for n, v in zip(NAMES, want)}


def test_a_failing_policy_answers_neutral_scores_and_is_counted(trained):
    bundle, _ = trained
    with ExtenderServer(config_for(bundle), port=0) as s:
        s.store.set_graph(boutique_graph())
        s.store.load_file(FIX / "cluster-list.json")

        def broken(snapshot):
            raise RuntimeError("encoder exploded")

        s.policy.rows.get = broken  # the one slice of the policy this test breaks
        r = httpx.post(s.url + "/prioritize", content=ARGS, timeout=10)
        assert r.status_code == 200 and decode_host_priorities(r.content, NAMES) == dict.fromkeys(NAMES, 0)
        assert (
            'hrl_extender_prioritize_total{outcome="neutral_error"} 1.0'
            in httpx.get(s.base_url + "/metrics", timeout=5).text
        )


def test_a_missing_bundle_is_a_configuration_error_naming_it(tmp_path):
    with pytest.raises(BundleError, match="nowhere"):
        build_policy(config_for(tmp_path / "nowhere"))


def test_the_command_serves_the_learned_policy_its_configuration_names(trained, tmp_path):
    bundle, _ = trained
    manifests = ROOT / "policy" / "data" / "apps" / "online-boutique" / "kubernetes-manifests.yaml"
    port = free_port()
    cfg = tmp_path / "extender.yaml"
    cfg.write_text(
        "apiVersion: hrl-scheduler.io/v1alpha1\nkind: ExtenderConfiguration\n"
        f"listen: {{port: {port}}}\nlogLevel: warning\n"
        f"policy: {{name: learned, bundle: '{bundle}', embeddingRefreshSeconds: 0.2}}\n"
        f"topology: {{sources: ['{manifests}']}}\n"
    )
    with extender_process(cfg, port, "--snapshot", str(FIX / "cluster-list.json"), start_timeout_s=60) as ext:
        assert ext.ready.status_code == 200
        r = httpx.post(ext.base_url + "/scheduler/prioritize", content=ARGS, timeout=10)
        assert r.status_code == 200
        assert all(isinstance(h["Score"], int) and 0 <= h["Score"] <= 10 for h in r.json())
        assert 'hrl_extender_prioritize_total{outcome="ok"} 1.0' in httpx.get(ext.base_url + "/metrics", timeout=5).text
    assert ext.returncode == 0, ext.stderr
    assert "Traceback" not in ext.stderr
