"""descheduler.shadow: a dry run's simulated outcome (where each evicted pod lands, the predicted effect, why, what
blocked the rest), the shadow log, and the dry_run label on the metrics."""

from __future__ import annotations

import json
from pathlib import Path

from prometheus_client import CollectorRegistry

from descheduler.__main__ import main
from descheduler.config import load_descheduler_config
from descheduler.evict import DryRunEvictor
from descheduler.loop import CycleDeps, CycleReport, MoveResult, run_once
from descheduler.metrics import DeschedulerMetrics
from descheduler.shadow import analyze_cycle, colocation_share, cross_node_call_share
from descheduler.snapshot import load_snapshot_file
from policy.highlevel import RebalanceHeuristic, SchedulerModel
from policy.index import ClusterIndex
from policy.intent import Intent
from policy.lowlevel import TopologyHeuristic
from policy.state import ClusterSnapshot, Move, NodeInfo, OwnerRef, PodInfo, Resources, ServiceEdge, ServiceGraph

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "fixtures" / "descheduler" / "cluster-list.json"
HEAD = "apiVersion: hrl-scheduler.io/v1alpha1\nkind: DeschedulerConfiguration\n"
# the fixture has no measured rates, so the move cost model (tests/unit/test_move_cost.py) would block every move as
# unpriced: the shadow analysis is tested on the moves the guards let through
DROPIN = "schedulerPrediction: {extenderSchedulers: [default-scheduler]}\nmoves: {costModel: {enabled: false}}\n"
CHECKOUT = "boutique/checkoutservice-7f5c9d6b8d-q7rtz"
CURRENCY = "boutique/currencyservice-7c8d5f9b6c-h9zdx"


def test_a_dry_run_reports_where_each_evicted_pod_lands_its_effect_and_what_blocked_the_others(capsys, tmp_path):
    log = tmp_path / "shadow" / "descheduler.jsonl"
    cfg = tmp_path / "d.yaml"
    cfg.write_text(HEAD + DROPIN + f"shadow: {{log: {log}}}\n")
    rc = main(["--config", str(cfg), "--once", "--dry-run", "--snapshot", str(FIXTURE), "--json"])
    out = capsys.readouterr().out
    assert rc == 0
    doc = json.loads(out)
    sh = doc["shadow"]
    assert sh["kind"] == "DeschedulerShadowCycle" and sh["version"] == 1
    moves = {m["pod"]: m for m in sh["moves"]}
    m = moves[CHECKOUT]
    assert m["planned_to_node"] == "hrl-worker" and m["predicted_node"] == "hrl-worker" and m["lands_as_planned"]
    assert m["why"].startswith("locality") and m["colocation_after"] > m["colocation_before"]
    assert m["feasible_nodes"] >= 1 and m["to_node_cpu_util_after"] > m["to_node_cpu_util_before"]
    blocked = {b["pod"]: b for b in sh["blocked"]}
    assert [g["guard"] for g in blocked[CURRENCY]["blocked_by"]] == ["pdb"]
    e = sh["effect"]
    assert e["moves"] == len(sh["moves"]) and e["cross_node_call_pct_after"] < e["cross_node_call_pct_before"]
    [line] = log.read_text().splitlines()  # the same record, in the shadow log
    assert json.loads(line)["moves"] == sh["moves"]


def test_the_text_report_ends_with_the_shadow_summary(capsys, tmp_path):
    cfg = tmp_path / "d.yaml"
    cfg.write_text(HEAD + DROPIN)
    assert main(["--config", str(cfg), "--once", "--snapshot", str(FIXTURE)]) == 0
    out = capsys.readouterr().out
    assert "shadow: " in out and "landing where planned" in out and "cross-node calls" in out


def test_a_live_run_gets_no_shadow_record_and_its_metrics_say_dry_run_false():
    snap = load_snapshot_file(FIXTURE)
    cfg = load_descheduler_config({"apiVersion": "hrl-scheduler.io/v1alpha1", "kind": "DeschedulerConfiguration"})
    reg = CollectorRegistry()
    m = DeschedulerMetrics(reg, dry_run=True)
    report = run_once(
        CycleDeps(lambda: snap, DryRunEvictor(), RebalanceHeuristic(), TopologyHeuristic(), cfg, metrics=m), 1.0
    )
    assert report.dry_run
    assert reg.get_sample_value("hrl_descheduler_cycles_total", {"result": "ok", "dry_run": "true"}) == 1
    assert reg.get_sample_value("hrl_descheduler_cycles_total", {"result": "ok", "dry_run": "false"}) is None
    dry = reg.get_sample_value("hrl_descheduler_evictions_total", {"outcome": "dry_run", "dry_run": "true"})
    assert dry == report.counts["dry_run"]


def pod(name, service, node, cpu=500):
    return PodInfo(name, "ns", service, Resources(cpu, 2**28), node_name=node, phase="Running",
                   owner=OwnerRef("ReplicaSet", f"{service}-x"))  # fmt: skip


def test_moves_are_simulated_in_order_each_on_the_cluster_the_earlier_ones_left():
    # two pods of b want to join a on n0; n0 has room for one more pod's CPU only
    nodes = (NodeInfo("n0", Resources(1100, 2**32)), NodeInfo("n1", Resources(4000, 2**32)),
             NodeInfo("n2", Resources(4000, 2**32)))  # fmt: skip
    g = ServiceGraph.build(["a", "b"], [ServiceEdge("a", "b", 50.0)])
    pods = (pod("a-1", "a", "n0"), pod("b-1", "b", "n1"), pod("b-2", "b", "n2"))
    snap = ClusterSnapshot(nodes, pods, graph=g)
    ix = ClusterIndex.build(snap)
    assert cross_node_call_share(ix) == 1.0
    assert colocation_share(pods[1], "n0", ix) == 1.0 and colocation_share(pods[1], "n1", ix) == 0.0

    moves = (Move("ns/b-1", "n1", "n0", "locality", 1.0), Move("ns/b-2", "n2", "n0", "locality", 1.0))
    report = CycleReport(
        1.0, True, "test", moves, tuple(MoveResult(m, "dry_run") for m in moves), {}, {}, {}, Intent(()), 0.0
    )
    model = SchedulerModel(TopologyHeuristic(), 2, frozenset({"default-scheduler"}))
    sh = analyze_cycle(report, snap, model)
    first, second = sh.moves
    assert first["predicted_node"] == "n0" and first["lands_as_planned"]
    # n0 is full after the first: the second replacement cannot land there
    assert second["predicted_node"] != "n0" and not second["lands_as_planned"]
    assert sh.effect["cross_node_call_pct_after"] < 100.0
