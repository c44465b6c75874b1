"""The live inputs (policy.live): the Metrics API's PodMetricsList read as metrics-server reports it, a reading put on
a snapshot exactly as the simulator puts its minute on one, freshness (stale readings dropped, a failed read keeping
the last good one until then), the states and the one log line per change, the metrics, and the descheduler's rule:
no move and no resize without the measured use it is configured to read."""

from __future__ import annotations

import json
import logging
import math
import re
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from descheduler.config import load_descheduler_config
from descheduler.inputs import GatedInputsGuard, InputsGuard, guard_planner, live_inputs
from descheduler.loop import CycleDeps, run_once
from policy.config import ConfigError
from policy.highlevel import RebalanceHeuristic
from policy.live import (
    METRICS_API,
    ApplyStats,
    InputMetrics,
    LiveInputs,
    SignalsInput,
    UsageApplier,
    UsageInput,
    UsageReading,
    UsageUnavailable,
    open_usage_source,
    parse_pod_metrics,
    parse_usage_uri,
)
from policy.lowlevel import TopologyHeuristic
from policy.sim.scenario import build
from policy.sim.stacks import StackContext, build_stack
from policy.state import ClusterSnapshot, NodeInfo, OwnerRef, PodInfo, Resources, ServiceSignals, WorkloadInfo

HEADER = {"apiVersion": "hrl-scheduler.io/v1alpha1", "kind": "DeschedulerConfiguration"}


def pod_metrics(ns, name, containers, ts="2026-12-03T10:00:00Z", window="15.012s"):
    return {
        "metadata": {"namespace": ns, "name": name},
        "timestamp": ts,
        "window": window,
        "containers": [{"name": c, "usage": u} for c, u in containers.items()],
    }


def test_the_metrics_api_list_is_read_per_pod_with_its_sidecars_summed_as_metrics_server_counts_them():
    doc = {
        "kind": "PodMetricsList",
        "items": [
            pod_metrics(
                "shop",
                "web-1",
                {"app": {"cpu": "250000000n", "memory": "64Mi"}, "istio-proxy": {"cpu": "12m", "memory": "40Mi"}},
            ),
            pod_metrics("shop", "db-0", {"db": {"cpu": "1", "memory": "1Gi"}}, ts="2026-12-03T10:00:05Z", window="30s"),
            pod_metrics("shop", "bad", {"app": {"cpu": "lots"}}),
            {"metadata": {"name": "no-namespace"}, "containers": []},
        ],
    }
    r = parse_pod_metrics(doc)
    assert r.cpu_m == {"shop/web-1": pytest.approx(262.0), "shop/db-0": pytest.approx(1000.0)}
    assert r.memory_bytes == {"shop/web-1": (64 + 40) * 2**20, "shop/db-0": 2**30}
    assert r.rejected == 2  # a bad quantity and an item without a namespace: left out, counted
    newest = datetime(2026, 12, 3, 10, 0, 5, tzinfo=UTC).timestamp()
    assert r.taken_at_s == pytest.approx(newest)  # the newest scrape
    assert r.window_s in (15.012, 30.0)
    with pytest.raises(UsageUnavailable, match="expected a PodMetricsList"):
        parse_pod_metrics({"kind": "Status", "message": "the server could not find the requested resource"})


@pytest.mark.parametrize(
    "uri,problem",
    [
        ("metrics-server", "expected metrics-api or prometheus+cadvisor"),
        ("prometheus+cadvisor://", "no host"),
        ("prometheus+cadvisor://p:9090?window=soon", "window: not a duration"),
        ("prometheus+cadvisor://p:9090?step=1m", "unknown parameter 'step'"),
        ("prometheus+cadvisor://p:9090?match=job=kubelet", "match: expected PromQL label matchers"),
    ],
)
def test_a_bad_resource_usage_uri_is_one_line_naming_the_part(uri, problem):
    with pytest.raises(ValueError, match=re.escape(problem)):
        parse_usage_uri(uri)


def test_a_good_resource_usage_uri_keeps_its_window_timeout_and_matchers():
    u = parse_usage_uri("prometheus+cadvisor+https://prom.monitoring:9090/p?window=2m&match=job%3D%22kubelet%22")
    assert (u.kind, u.base, u.name, u.window_s, u.timeout_s, u.match) == (
        "prometheus",
        "https://prom.monitoring:9090/p",
        "prometheus+cadvisor+https://prom.monitoring:9090/p",
        120.0,
        5.0,
        'job="kubelet"',
    )
    assert parse_usage_uri(METRICS_API).kind == METRICS_API


def test_the_configurations_refuse_a_bad_source_with_one_line_each():
    with pytest.raises(ConfigError) as exc:
        load_descheduler_config(
            {
                **HEADER,
                "metricsSources": {
                    "resourceUsage": {"uri": "prometheus+cadvisor://p:9090?window=0s", "maxAgeSeconds": 0},
                    "serviceSignals": {"uri": "prometheus+zipkin://p:9090"},
                },
            }
        )
    lines = exc.value.lines()
    assert len(lines) == 3, lines
    assert any("metricsSources.resourceUsage.uri: window: must be a positive duration" in x for x in lines)
    assert any("metricsSources.resourceUsage.maxAgeSeconds" in x for x in lines)
    assert any("metricsSources.serviceSignals.uri" in x and "unknown scheme" in x for x in lines)


# ---- the simulator's rule, on a live snapshot ------------------------------------------------------------------


@pytest.fixture(scope="module")
def sim():
    run = build("baseline-2026-11", app="online-boutique", minutes=3, seed=0, offset_min=300, n_samples=100)
    built = build_stack("default-kube-scheduler", StackContext(run.app, run.cluster, 0, run.config))
    s = built.simulation(run.app, run.rps, run.cluster, run.config)
    s.advance()
    s.advance()
    return s


def test_a_reading_of_the_simulated_minute_puts_on_the_objects_exactly_the_use_the_simulator_observes(sim):
    # the simulator's observation vs its bare objects + the same per-pod use through the live applier
    expected = sim.observe()
    bare = sim.cluster.snapshot(sim.now_s, graph=expected.graph)
    assert all(p.usage is None for p in bare.pods) and all(n.usage is None for n in bare.nodes)
    reading = UsageReading(dict(sim.pod_cpu_usage_m), {}, sim.now_s, 60.0)
    got, stats = UsageApplier().apply(bare, reading)
    assert [p.usage for p in got.pods] == [p.usage for p in expected.pods]
    assert [n.usage for n in got.nodes] == [n.usage for n in expected.nodes]
    assert stats.measured == sum(1 for p in expected.pods if p.usage is not None) > 0


def test_a_pod_bound_since_the_window_is_not_measured_and_its_node_counts_only_the_measured_pods():
    nodes = (NodeInfo("n1", Resources(4000, 2**34)), NodeInfo("n2", Resources(4000, 2**34)))
    old = PodInfo("web-1", "shop", "web", Resources(500), node_name="n1", phase="Running", created_s=100.0)
    new = PodInfo("web-2", "shop", "web", Resources(500), node_name="n1", phase="Running", created_s=990.0)
    lost = PodInfo("web-3", "shop", "web", Resources(500), node_name="n2", phase="Running", created_s=100.0)
    pending = PodInfo("web-4", "shop", "web", Resources(500))
    snap = ClusterSnapshot(nodes, (old, new, lost, pending))
    reading = UsageReading({"shop/web-1": 321.4, "shop/gone": 5.0}, {"shop/web-1": 2**20}, 1000.0, 60.0)
    app = UsageApplier()
    got, stats = app.apply(snap, reading)
    use = {p.name: p.usage for p in got.pods}
    assert use == {"web-1": Resources(321, 0), "web-2": None, "web-3": None, "web-4": None}  # memory kept out
    assert [n.usage for n in got.nodes] == [Resources(321, 0), Resources(0, 0)]
    # web-3 runs since long before the window yet has no measurement: missing (partial); web-2 is just new
    assert (stats.measured, stats.missing, stats.unknown) == (1, 1, 1)
    again, _ = app.apply(snap, reading)
    assert all(a is b for a, b in zip(again.pods, got.pods)) and all(a is b for a, b in zip(again.nodes, got.nodes))
    with_memory, _ = UsageApplier(memory=True).apply(snap, reading)
    assert with_memory.pods[0].usage == Resources(321, 2**20)
    off, _ = app.apply(got, None)
    assert all(p.usage is None for p in off.pods) and all(n.usage is None for n in off.nodes)
    # the source off (or stale) on a snapshot that has no use: the snapshot itself, nothing copied
    unchanged, stats = app.apply(off, None)
    assert unchanged is off and stats == ApplyStats()
    assert app.apply(snap, None)[0] is snap


# ---- freshness, states, logs, metrics --------------------------------------------------------------------------


class Clock:
    def __init__(self, t=1000.0):
        self.t = t

    def __call__(self):
        return self.t


class FakeUsage:
    """A resource-use source whose next answers are scripted (a reading, or an exception)."""

    name = "fake://usage"

    def __init__(self, *answers):
        self.answers = list(answers)
        self.reads = 0

    def read(self):
        self.reads += 1
        a = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(a, Exception):
            raise a
        return a

    def close(self):
        pass


def small_snapshot(t=1000.0):
    n = NodeInfo("n1", Resources(4000, 2**34))
    p = PodInfo("web-1", "shop", "web", Resources(500), node_name="n1", phase="Running", created_s=10.0)
    return ClusterSnapshot((n,), (p,), taken_at_s=t)


def test_a_reading_is_used_until_it_is_max_age_old_and_a_failed_read_keeps_it_until_then(caplog):
    clock = Clock()
    reg = CollectorRegistry()
    caplog.set_level(logging.INFO, logger="policy.live")
    src = FakeUsage(UsageReading({"shop/web-1": 400.0}, {}, 995.0, 60.0), UsageUnavailable("fake: down"))
    ui = UsageInput(src, max_age_s=30.0, clock=clock, metrics=InputMetrics(reg))
    assert ui.health.status.state == "pending"
    assert ui.refresh() and ui.apply(small_snapshot()).pods[0].usage == Resources(400, 0)
    assert ui.health.status.state == "ok"
    clock.t = 1020.0
    assert not ui.refresh()  # down: the last good reading (25 s old) is still used
    assert ui.apply(small_snapshot()).pods[0].usage == Resources(400, 0)
    st = ui.health.status
    assert st.state == "ok" and "last read failed: fake: down" in st.detail
    clock.t = 1026.0  # 31 s old: stale, dropped
    snap = ui.apply(small_snapshot())
    assert snap.pods[0].usage is None and snap.nodes[0].usage is None
    st = ui.health.status
    assert st.state == "stale" and not st.usable and st.age_s(clock.t) == pytest.approx(31.0)
    assert reg.get_sample_value("hrl_metrics_source_state", {"source": "resource_usage", "state": "stale"}) == 1.0
    assert reg.get_sample_value("hrl_metrics_source_state", {"source": "resource_usage", "state": "ok"}) == 0.0
    assert reg.get_sample_value("hrl_metrics_source_age_seconds", {"source": "resource_usage"}) == pytest.approx(31.0)
    assert reg.get_sample_value("hrl_metrics_source_reads_total", {"source": "resource_usage", "outcome": "error"}) == 1
    assert reg.get_sample_value("hrl_metrics_source_reads_total", {"source": "resource_usage", "outcome": "ok"}) == 1
    ui.apply(small_snapshot())
    ui.apply(small_snapshot())
    lines = [r.getMessage() for r in caplog.records]
    # one line per change of state, not per read (five applies): ok, then stale
    assert [line.split(": ")[0].split()[-1] for line in lines] == ["resource_usage"] * 2
    assert [line.split(": ", 1)[1].split()[0] for line in lines] == ["ok", "stale"]
    assert [r.levelno for r in caplog.records] == [logging.INFO, logging.WARNING]


def test_an_input_that_never_read_is_an_error_and_one_without_a_source_is_off():
    clock = Clock()
    ui = UsageInput(
        FakeUsage(UsageUnavailable("metrics-api: GET /apis/metrics.k8s.io/v1beta1/pods: not served")), clock=clock
    )
    ui.refresh()
    assert ui.apply(small_snapshot()).pods[0].usage is None
    st = ui.health.status
    assert st.state == "error" and "not served" in st.detail and math.isinf(st.age_s(clock.t))
    off = UsageInput(None, clock=clock)
    assert off.health.status.state == "off" and not off.refresh()
    assert "requests stand in for CPU use" in off.health.status.line(clock.t)
    assert math.isnan(off.health.status.age_s(clock.t))


def test_a_pod_running_since_long_without_measurement_makes_the_input_partial():
    clock = Clock()
    ui = UsageInput(FakeUsage(UsageReading({}, {}, 999.0, 60.0)), clock=clock)
    ui.refresh()
    ui.apply(small_snapshot())
    st = ui.health.status
    assert (st.state, st.usable, st.missing) == ("partial", True, 1)
    assert "1 running pod(s) older than the window have no measurement" in st.detail


class FakeSignals:
    name = "fake://signals"

    def __init__(self, signals, last):
        self.signals, self.last, self.calls = signals, last, 0

    def fetch_service_signals(self, time_s=None):
        self.calls += 1
        return dict(self.signals), self.last

    def close(self):
        pass


class Reader:
    signals = "unset"


def test_live_inputs_read_each_source_once_per_cycle_and_hand_the_signals_to_their_readers():
    clock = Clock()
    usage = UsageInput(FakeUsage(UsageReading({"shop/web-1": 250.0}, {}, 999.0, 60.0)), clock=clock)
    sig_src = FakeSignals({"web": ServiceSignals(12.0, 40.0, 0.01, 90.0)}, 998.0)
    signals = SignalsInput(sig_src, clock=clock)
    readers = [Reader(), Reader()]
    live = LiveInputs(usage, signals, readers)
    snap = replace(small_snapshot(), workloads=(WorkloadInfo("web", "shop", "web", pod_requests=Resources(500)),))
    out = live.wrap(lambda: snap)()
    assert out.pods[0].usage == Resources(250, 0)
    assert all(r.signals == {"web": ServiceSignals(12.0, 40.0, 0.01, 90.0)} for r in readers)
    assert [s.state for s in live.statuses()] == ["ok", "ok"]
    live.expect_reread()  # the re-read before resizes, same cycle: no second round trip
    live.observe(snap)
    assert (usage.source.reads, sig_src.calls) == (1, 1)
    live.observe(snap)  # the next cycle reads again
    assert (usage.source.reads, sig_src.calls) == (2, 2)
    clock.t = 2000.0  # both stale: no signals for the readers, no use on the pods
    live.observe(snap)
    assert all(r.signals is None for r in readers) and live.last_signals is None
    assert [s.state for s in live.statuses()] == ["stale", "stale"]


def test_signals_missing_for_a_managed_service_make_the_input_partial():
    clock = Clock()
    signals = SignalsInput(FakeSignals({"web": ServiceSignals(1.0)}, 999.0), clock=clock)
    signals.refresh()
    snap = ClusterSnapshot(
        workloads=(
            WorkloadInfo("web", "shop", "web", pod_requests=Resources(100)),
            WorkloadInfo("cart", "shop", "cart", pod_requests=Resources(100)),
        )
    )
    assert signals.signals(snap) is not None
    st = signals.health.status
    assert (st.state, st.measured, st.missing) == ("partial", 1, 1) and "cart" in st.detail


# ---- the descheduler's rule ------------------------------------------------------------------------------------


def hot_cluster() -> ClusterSnapshot:
    """Two nodes; n1 is overloaded by its measured pods' use, so the rebalance heuristic plans an overload move."""
    nodes = (NodeInfo("n1", Resources(2000, 2**33)), NodeInfo("n2", Resources(2000, 2**33)))
    owner = OwnerRef("ReplicaSet", "web-abc", "u1")
    pods = tuple(
        PodInfo(
            f"web-{i}",
            "shop",
            "web",
            Resources(400, 2**26),
            uid=f"p{i}",
            node_name="n1",
            phase="Running",
            owner=owner,
            labels={"app": "web"},
            created_s=10.0,
        )
        for i in range(4)
    )
    return ClusterSnapshot(nodes, pods, taken_at_s=1000.0)


class Plain:
    name = "plain"

    def __init__(self, inner):
        self.inner = inner

    def plan(self, snapshot, index, placement):
        return self.inner.plan(snapshot, index, placement)


def cycle(live: LiveInputs, planner):
    cfg = load_descheduler_config({**HEADER, "dryRun": True, "caps": {"perNode": 5, "total": 5}})
    guarded = guard_planner(planner, live)
    observe = live.wrap(hot_cluster)
    return run_once(CycleDeps(observe, None, guarded, TopologyHeuristic(), cfg), 1000.0), guarded  # type: ignore[arg-type]


@pytest.mark.parametrize("gated", [True, False])
def test_without_the_configured_measured_use_a_cycle_plans_no_move_and_says_so(gated, caplog):
    clock = Clock()
    use = {f"shop/web-{i}": 480.0 for i in range(4)}  # 1920 m of 2000: above the 0.85 overload threshold
    heuristic = RebalanceHeuristic(overload_threshold=0.85)
    planner = heuristic if gated else Plain(heuristic)  # the same planner behind a plain plan() (no move gate)
    fresh = LiveInputs(UsageInput(FakeUsage(UsageReading(use, {}, 999.0, 60.0)), clock=clock), SignalsInput(None))
    report, guard = cycle(fresh, planner)
    assert isinstance(guard, GatedInputsGuard if gated else InputsGuard)
    # planned on the measured use (the move cost model may still hold them back: that is the executor's call)
    assert {m.reason for m in report.planned_moves} == {"overload"} and sum(report.counts.values()) >= 1
    assert guard.withheld == {"moves": False, "resizes": 0}
    stale = LiveInputs(UsageInput(FakeUsage(UsageReading(use, {}, 100.0, 60.0)), clock=clock), SignalsInput(None))
    caplog.set_level(logging.WARNING, logger="descheduler.inputs")
    report, guard = cycle(stale, planner)
    assert report.planned_moves == () and report.counts["dry_run"] == 0
    assert guard.withheld == {"moves": True, "resizes": 0} and guard.blocked_cycles == 1
    assert any(
        "no move and no resize planned this cycle" in r.getMessage() and "stale" in r.getMessage()
        for r in caplog.records
    )


def test_with_measured_use_off_the_cycle_plans_on_requests_as_documented():
    # no source configured: nothing withheld (the heuristic reads requests: 1600 m of 2000 is under 0.85, no move)
    off = LiveInputs(UsageInput(None), SignalsInput(None))
    report, guard = cycle(off, RebalanceHeuristic(overload_threshold=0.85))
    assert guard.withheld == {"moves": False, "resizes": 0} and not guard.blocked()
    assert all(p.usage is None for p in hot_cluster().pods)
    assert report.planned_moves == ()


def test_the_descheduler_builds_its_inputs_from_the_configuration_and_names_a_field_it_cannot_build():
    cfg = load_descheduler_config(
        {**HEADER, "metricsSources": {"resourceUsage": {"uri": "metrics-api"}, "serviceSignals": {"uri": None}}}
    )
    with pytest.raises(
        ValueError, match=r"metricsSources.resourceUsage.uri: metrics-api: the Metrics API is read through"
    ):
        live_inputs(cfg, RebalanceHeuristic(), metrics_api=None)
    live = live_inputs(cfg, RebalanceHeuristic(), metrics_api=lambda: {"kind": "PodMetricsList", "items": []})
    assert [s.state for s in live.statuses()] == ["pending", "off"]


# ---- the Metrics API through the real Kubernetes client, against a small fake API server on 127.0.0.1 ----------


class FakeMetricsApi:
    """An HTTP server answering ``GET /apis/metrics.k8s.io/v1beta1/pods`` with ``status`` and ``body``."""

    def __init__(self):
        import http.server
        import threading

        self.status, self.body, self.paths = 200, {"kind": "PodMetricsList", "items": []}, []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.paths.append(self.path)
                data = json.dumps(outer.body).encode()
                self.send_response(outer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def metrics_api():
    server = FakeMetricsApi()
    yield server
    server.close()


def test_the_metrics_api_reader_lists_every_namespace_once_and_names_what_is_wrong(metrics_api):
    from kubernetes import client as kclient

    from policy.kube import MetricsApiReader

    cfg = kclient.Configuration()
    cfg.host = metrics_api.url
    api = kclient.ApiClient(cfg)
    metrics_api.body = {"kind": "PodMetricsList", "items": [pod_metrics("shop", "web-1", {"app": {"cpu": "5m"}})]}
    usage = UsageInput(open_usage_source("metrics-api", MetricsApiReader(api)))
    assert usage.refresh() and usage.reading.cpu_m == {"shop/web-1": pytest.approx(5.0)}
    assert [p.split("?")[0] for p in metrics_api.paths] == ["/apis/metrics.k8s.io/v1beta1/pods"]
    for status, hint in (
        (404, "is metrics-server installed?"),
        (503, "its APIService v1beta1.metrics.k8s.io is not Available"),
        (403, "needs get, list on pods.metrics.k8s.io"),
    ):
        metrics_api.status, metrics_api.body = status, {"kind": "Status", "code": status}
        assert not usage.refresh()
        assert usage.error.startswith("metrics-api: GET /apis/metrics.k8s.io/v1beta1/pods: ") and hint in usage.error
    metrics_api.close()
    assert not usage.refresh() and "metrics-api: GET" in usage.error  # nothing listening: one line too
    api.close()


def test_the_descheduler_reports_its_inputs_and_withholds_without_the_measured_use_it_is_configured_to_read(
    tmp_path, capsys
):
    from descheduler.__main__ import main

    dead = f"http://127.0.0.1:{_free_port()}"
    cfg = tmp_path / "d.yaml"
    cfg.write_text(
        "apiVersion: hrl-scheduler.io/v1alpha1\nkind: DeschedulerConfiguration\n"
        "metricsSources:\n"
        f"  resourceUsage: {{uri: 'prometheus+cadvisor://{dead.removeprefix('http://')}?timeout=1s'}}\n"
    )
    snapshot = Path(__file__).resolve().parents[1] / "fixtures" / "descheduler" / "cluster-list.json"
    rc = main(["--config", str(cfg), "--snapshot", str(snapshot), "--json"])
    out, err = capsys.readouterr()
    assert rc == 0
    doc = json.loads(out)
    usage, signals = doc["inputs"]
    assert (usage["input"], usage["state"], usage["usable"]) == ("resource_usage", "error", False)
    assert "cannot reach Prometheus" in usage["detail"] and signals["state"] == "off"
    assert doc["inputs_withheld"]["moves"] is True and doc["planned_moves"] == []
    assert "no move and no resize planned this cycle" in err


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
