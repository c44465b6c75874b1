"""What the policies see on the real control plane is what the simulator shows them (issue 24): a simulated minute of
Online Boutique is replayed on kwok nodes, read back through the live sources, and the features, the extender's scores,
an intent-autoscaler scale change and an in-place resize are the simulator's own for the same state.

The state: the simulator runs Online Boutique (3 nodes of 2 cores, 12 Deployments of one pod each, its trace at 6x so
frontend, currencyservice and productcatalogservice run at their CPU limit) for two minutes; its observation of that
minute (``Simulation.observe``: every pod's measured CPU, its nodes' sums, the call graph with the minute's rates) and
its per-service signals (``signals_from_sim``) are the reference. The same cluster is made on the control plane: three
kwok nodes with the simulator's capacity and zones, the twelve Deployments with the same requests and limits (each pod
an ``app`` container and an ``istio-proxy`` sidecar sharing the pod's request), each pod bound to the node the
simulator put it on (the Binding API: these pods name no scheduler). kwok emulates each container's use from the pod's
annotations (hack/controlplane/stages/usage-from-annotation.yaml: 90 % of the simulated pod's use in the app, 10 % in
the sidecar) and serves it as the kubelet's resource metrics (metrics-resource.yaml), which a real Prometheus scrapes
every second; an exporter in this process serves the simulated minute's per-service signals as Istio series. The call
graph is the simulator's observed graph in both (an edge-list file as ``topology.sources``; its live Prometheus source
is tested in test_prometheus_source.py).

Read back (``window=30s``): every pod's use through ``prometheus+cadvisor://`` (the sidecar summed in), the signals
through ``prometheus+istio://``. Tolerances, from how kwok and Prometheus time the samples (kwok integrates a counter
at each scrape, Prometheus stamps it at the scrape's start; under load the two drift by up to a few hundred ms in a 30 s
window): a pod's use within 1.5 % or 2 m of the simulator's, a node's within 1 % of its allocatable; the signals within
2 % (the exporter stamps its samples, so they are exact in practice); feature columns within 2 % or 5e-3; the extender's
integer scores equal wherever the simulator's score is more than 0.1 away from a rounding boundary (at least two
candidates checked); the planned replica targets and resizes equal. Then every source goes away and the components say
so and fall back as policy.contract documents.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import yaml
from cp_helpers import cpmod, get_json, wait_for
from proc_helpers import extender_process, free_port
from prom_helpers import PrometheusServer, prometheus_binary, static_scrape
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

from descheduler.config import load_descheduler_config
from descheduler.inputs import guard_planner, live_inputs
from descheduler.kube import KubeEvictor, KubeObserver, KubeResizer, KubeScaler
from descheduler.loop import CycleDeps, run_once
from policy.highlevel import (
    DEFAULT_HRL_HIGH_BUNDLE,
    DrpcAutoscaler,
    DrpcState,
    FixedIntent,
    HierarchicalPolicy,
    HrlState,
    IntentAutoscaler,
    LearnedIntent,
    ResizePlanner,
)
from policy.index import ClusterIndex
from policy.live import UsageApplier
from policy.lowlevel import DEFAULT_PLACEMENT_BUNDLE, featurize_candidates, load_learned_placement
from policy.observe import parse_cpu_m
from policy.sim.drpc import signals_from_sim
from policy.sim.scenario import build
from policy.sim.stacks import StackContext, build_stack
from policy.state import ClusterSnapshot, PodInfo, Resources

pytestmark = [pytest.mark.controlplane, pytest.mark.prometheus]

WINDOW_S = 30
LOAD = 6.0
SIDECAR_SHARE = 0.1
PROXY_REQ_M, PROXY_LIM_M, PROXY_MEM = 10, 10, 16 * 2**20
UNSCHEDULED = "hrl-test-no-scheduler"  # no scheduler has this name: the test binds the pods itself
SLO_MS = 500.0
#: Feature columns: within 2 % (the use they are made of is within 1.5 %) or 5e-3 absolute.
FEATURE_RTOL, FEATURE_ATOL = 0.02, 5e-3


def simulated_minute():
    run = build("baseline-2026-11", app="online-boutique", minutes=3, seed=0, offset_min=300, n_samples=100, nodes=3)
    built = build_stack("default-kube-scheduler", StackContext(run.app, run.cluster, 0, run.config))
    sim = built.simulation(run.app, np.asarray(run.rps) * LOAD, run.cluster, run.config)
    sim.advance()
    sim.advance()
    return sim


# ---- the cluster ---------------------------------------------------------------------------------------------


def deployment_of(w, pod: PodInfo) -> dict:
    """The simulator's workload as a Deployment: its pod's request and limit shared by an app container and an
    istio-proxy sidecar; the pods name no scheduler (bound by the test)."""
    req, lim = pod.requests, pod.limits
    containers = [
        {
            "name": "app",
            "image": "registry.invalid/fake:1",
            "resources": {
                "requests": {"cpu": f"{req.cpu_m - PROXY_REQ_M}m", "memory": str(req.memory_bytes - PROXY_MEM)},
                "limits": {"cpu": f"{lim.cpu_m - PROXY_LIM_M}m", "memory": str(lim.memory_bytes - PROXY_MEM)},
            },
        },
        {
            "name": "istio-proxy",
            "image": "registry.invalid/proxy:1",
            "resources": {
                "requests": {"cpu": f"{PROXY_REQ_M}m", "memory": str(PROXY_MEM)},
                "limits": {"cpu": f"{PROXY_LIM_M}m", "memory": str(PROXY_MEM)},
            },
        },
    ]
    labels = {"app": w.service}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": w.name, "labels": dict(labels)},
        "spec": {
            "replicas": w.replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"schedulerName": UNSCHEDULED, "containers": containers, "terminationGracePeriodSeconds": 0},
            },
        },
    }


def bind(cp, ns: str, pod: str, node: str) -> None:
    doc = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod}, "target": {"kind": "Node", "name": node}}
    cp.kubectl(
        "create", "-n", ns, "--raw", f"/api/v1/namespaces/{ns}/pods/{pod}/binding", "-f", "-", input=json.dumps(doc)
    )


def replay_on_the_cluster(cp, ns: str, nodes: list[str], sim) -> tuple[dict[str, str], dict[str, str]]:
    """Make the simulated cluster; returns (simulator node → kwok node, simulator pod key → live pod key)."""
    snap = sim.observe()
    node_map = {n.name: nodes[i] for i, n in enumerate(snap.nodes)}
    pods = {p.service: p for p in snap.pods}
    doc = {"apiVersion": "v1", "kind": "List", "items": [deployment_of(w, pods[w.service]) for w in snap.workloads]}
    cp.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(doc))

    def created():
        items = get_json(cp, "pods", "-n", ns)["items"]
        return items if len(items) == len(snap.pods) else None

    live = {p["metadata"]["labels"]["app"]: p["metadata"]["name"] for p in wait_for(created, 60, "the 12 pods")}
    pod_map = {}
    for svc, p in pods.items():
        name = live[svc]
        use_m = sim.pod_cpu_usage_m[p.key]
        ann = {
            f"{cpmod.USAGE_CPU_ANNOTATION}app": f"{use_m * (1 - SIDECAR_SHARE) / 1000:.9f}",
            f"{cpmod.USAGE_CPU_ANNOTATION}istio-proxy": f"{use_m * SIDECAR_SHARE / 1000:.9f}",
        }
        cp.kubectl("annotate", "pod", name, "-n", ns, *[f"{k}={v}" for k, v in ann.items()])
        bind(cp, ns, name, node_map[p.node_name])
        pod_map[p.key] = f"{ns}/{name}"

    def running():
        items = get_json(cp, "pods", "-n", ns)["items"]
        return all(p.get("status", {}).get("phase") == "Running" for p in items) and len(items) == len(pods)

    wait_for(running, 60, "the bound pods to run")
    return node_map, pod_map


# ---- the mesh: the simulated minute's per-service signals as Istio series ---------------------------------------


class MeshCollector:
    """``istio_requests_total`` and ``istio_request_duration_milliseconds`` reported by each service's proxy
    (``reporter="destination"``) at the simulated minute's arrivals, refused share (as 503s) and mean visit latency,
    counters from 0 at start (every sample stamped with the time it was computed for)."""

    def __init__(self, signals, ns: str):
        self.signals, self.ns = signals, ns
        self.start = time.time()

    def collect(self):
        now = time.time()
        t = now - self.start
        labels = [
            "reporter",
            "source_workload",
            "destination_workload",
            "destination_workload_namespace",
            "response_code",
        ]
        req = CounterMetricFamily("istio_requests", "requests (replay)", labels=labels)
        dur = HistogramMetricFamily("istio_request_duration_milliseconds", "duration (replay)", labels=labels)
        for svc, s in sorted(self.signals.items()):
            for code, share in (("200", 1 - s.refused_frac), ("503", s.refused_frac)):
                n = s.rps * share * t  # a service nobody calls: counters at 0 (rate 0)
                lv = ["destination", "unknown", svc, self.ns, code]
                req.add_metric(lv, n, timestamp=now)
                bound = 10.0 ** math.ceil(math.log10(max(s.latency_mean_ms, 1e-3)) + 1e-9)
                dur.add_metric(lv, [(repr(bound), n), ("+Inf", n)], s.latency_mean_ms * n, timestamp=now)
        yield req
        yield dur


# ---- comparisons -----------------------------------------------------------------------------------------------


def in_sim_names(
    live: ClusterSnapshot, sim: ClusterSnapshot, node_map: dict, pod_map: dict, ns: str
) -> ClusterSnapshot:
    """``live`` with the simulator's node names, pod keys and namespace (the features do not read names, but they are
    compared by them)."""
    from dataclasses import replace

    back_node = {v: k for k, v in node_map.items()}
    back_pod = {v: k for k, v in pod_map.items()}
    sim_ns = sim.pods[0].namespace
    nodes = tuple(replace(n, name=back_node[n.name]) for n in live.nodes if n.name in back_node)
    order = {n.name: i for i, n in enumerate(sim.nodes)}
    nodes = tuple(sorted(nodes, key=lambda n: order[n.name]))
    pods = []
    for p in live.pods:
        if p.key not in back_pod:
            continue
        pod_ns, name = back_pod[p.key].split("/", 1)
        pods.append(replace(p, name=name, namespace=pod_ns, node_name=back_node.get(p.node_name or "", p.node_name)))
    by_key = {p.key: p for p in pods}
    pods = [by_key[p.key] for p in sim.pods if p.key in by_key]
    workloads = tuple(replace(w, namespace=sim_ns) for w in live.workloads if w.namespace == ns)
    return replace(live, nodes=nodes, pods=tuple(pods), workloads=workloads, pdbs=())


def new_pod(service: str, ns: str, requests: Resources) -> PodInfo:
    return PodInfo(f"{service}-new", ns, service, requests, phase="Pending", labels={"app": service})


def pod_json(service: str, ns: str, cpu_m: int, mem: int) -> dict:
    return {
        "metadata": {"name": f"{service}-new", "namespace": ns, "labels": {"app": service}},
        "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": f"{cpu_m}m", "memory": str(mem)}}}]},
    }


def state_planner():
    return HierarchicalPolicy(
        autoscaler=IntentAutoscaler(),
        intent_policy=FixedIntent(),
        rebalance=False,
        resizer=ResizePlanner(cooldown_s=0.0),
        name="parity",
    )


@pytest.fixture
def prometheus_for(tmp_path):
    started: list[PrometheusServer] = []

    def make(scrapes: str) -> PrometheusServer:
        server = PrometheusServer(
            prometheus_binary(), Path(tempfile.mkdtemp(prefix="hrl-prom-cp-")), scrapes, "1s", "900ms"
        )
        server.start()
        started.append(server)
        return server

    yield make
    for s in started:
        s.stop()
        shutil.rmtree(s.workdir, ignore_errors=True)


def test_a_simulated_minute_replayed_on_kwok_is_what_the_live_sources_read_and_the_policies_decide(
    control_plane, kwok_nodes, namespace, prometheus_for, tmp_path
):
    cp = control_plane
    sim = simulated_minute()
    sim_snap = sim.observe()
    sim_signals = signals_from_sim(sim)
    zones = [dict(n.labels) for n in sim_snap.nodes]
    nodes = [
        kwok_nodes(
            1,
            cpu=f"{n.allocatable.cpu_m}m",
            memory=str(n.allocatable.memory_bytes),
            labels={
                "topology.kubernetes.io/zone": z["topology.kubernetes.io/zone"],
                "topology.kubernetes.io/region": z["topology.kubernetes.io/region"],
            },
        )[0]
        for n, z in zip(sim_snap.nodes, zones)
    ]
    node_map, pod_map = replay_on_the_cluster(cp, namespace, nodes, sim)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(MeshCollector(sim_signals, namespace))
    mesh, _ = start_http_server(0, "127.0.0.1", registry)
    scrapes = "".join(
        static_scrape(f"kwok-{i}", [cp.kwok_address], {"__metrics_path__": cp.kwok_metrics_path(n)})
        for i, n in enumerate(nodes)
    ) + static_scrape("mesh", [f"127.0.0.1:{mesh.server_port}"])
    prom = prometheus_for(scrapes)
    usage_uri = f"prometheus+cadvisor://127.0.0.1:{prom.port}?window={WINDOW_S}s"
    signals_uri = f"prometheus+istio://127.0.0.1:{prom.port}?window={WINDOW_S}s&namespace={namespace}"
    graph_file = tmp_path / "graph.json"
    graph_file.write_text(json.dumps(sim_snap.graph.to_json()))

    # the extender as shipped, with the learned placement and the measured use from Prometheus
    port = free_port()
    ext_cfg = tmp_path / "extender.yaml"
    ext_cfg.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "hrl-scheduler.io/v1alpha1",
                "kind": "ExtenderConfiguration",
                "listen": {"port": port},
                # the single bundle whose inputs the test compares (the served default ensembles it with two more)
                "policy": {"name": "learned", "bundle": str(DEFAULT_PLACEMENT_BUNDLE), "embeddingRefreshSeconds": 1},
                "topology": {"sources": [str(graph_file)]},
                "kubernetes": {
                    "enabled": True,
                    "kubeconfig": str(cp.kubeconfigs["hrl-extender"]),
                    "debounceSeconds": 0,
                },
                "metricsSources": {"resourceUsage": {"uri": usage_uri, "refreshSeconds": 1, "maxAgeSeconds": 8}},
            }
        )
    )

    def covered():  # every pod's series covers a whole window, plus the window before it (the coverage test)
        q = f'count(count by (pod) (container_cpu_usage_seconds_total{{namespace="{namespace}"}} offset {WINDOW_S}s))'
        res = prom.query(q)
        return res and int(float(res[0]["value"][1])) == len(pod_map)

    wait_for(covered, WINDOW_S + 60, "Prometheus to hold a whole window of every pod", 1.0)
    time.sleep(3)

    with extender_process(ext_cfg, port) as ext:
        # ---- the measured inputs -------------------------------------------------------------------------------
        api = cp.api("hrl-descheduler")
        cfg = load_descheduler_config(
            {
                "apiVersion": "hrl-scheduler.io/v1alpha1",
                "kind": "DeschedulerConfiguration",
                "planner": {"name": "hierarchical"},
                "resize": {"enabled": True, "cooldownSeconds": 0, "maxStep": 0.5},
                "scaling": {"maxStepPerCycle": 4},
                "excludedNamespaces": ["kube-system"],
                "metricsSources": {
                    "resourceUsage": {"uri": usage_uri, "maxAgeSeconds": 8},
                    "serviceSignals": {"uri": signals_uri, "maxAgeSeconds": 8},
                },
            }
        )
        planner = state_planner()
        live = live_inputs(cfg, planner)
        live_snap = live.observe(KubeObserver(api, sim_snap.graph)())
        assert [s.state for s in live.statuses()] == ["ok", "ok"], [s.line(time.time()) for s in live.statuses()]
        got = in_sim_names(live_snap, sim_snap, node_map, pod_map, namespace)
        for sp, lp in zip(sim_snap.pods, got.pods):
            assert lp.key == sp.key and lp.usage is not None, sp.key
            assert lp.usage.cpu_m == pytest.approx(sp.usage.cpu_m, rel=0.015, abs=2), sp.key  # the sidecar summed in
            assert lp.requests.cpu_m == sp.requests.cpu_m and lp.limits.cpu_m == sp.limits.cpu_m
        for sn, ln in zip(sim_snap.nodes, got.nodes):
            assert ln.usage.cpu_m == pytest.approx(sn.usage.cpu_m, abs=0.01 * sn.allocatable.cpu_m), sn.name
        sig = live.last_signals
        for svc, s in sim_signals.items():
            assert sig[svc].rps == pytest.approx(s.rps, rel=0.02, abs=1e-6), svc
            assert sig[svc].latency_mean_ms == pytest.approx(s.latency_mean_ms, rel=0.02), svc
            assert sig[svc].refused_frac == pytest.approx(s.refused_frac, abs=0.005), svc

        # ---- the features every network reads ------------------------------------------------------------------
        placement = load_learned_placement(DEFAULT_PLACEMENT_BUNDLE)
        sim_ix, got_ix = ClusterIndex.build(sim_snap), ClusterIndex.build(got)
        cands = [n.name for n in sim_snap.nodes]
        probe_svc = "currencyservice"
        probe = new_pod(probe_svc, sim_snap.pods[0].namespace, Resources(100, 64 * 2**20))
        rows_sim = placement.service_rows(sim_ix)
        rows_live = load_learned_placement(DEFAULT_PLACEMENT_BUNDLE).service_rows(got_ix)
        x_sim = featurize_candidates(probe, cands, sim_ix, rows_sim)
        x_live = featurize_candidates(probe, cands, got_ix, rows_live)
        np.testing.assert_allclose(x_live, x_sim, rtol=FEATURE_RTOL, atol=FEATURE_ATOL)
        keys = [f"{w.namespace}/{w.name}" for w in sim_snap.workloads]
        drpc = DrpcAutoscaler.load(DEFAULT_HRL_HIGH_BUNDLE, spec="hrl", slo_p95_ms=SLO_MS)
        o_sim = drpc.featurizer.observe(sim_snap, DrpcState(), sim_signals, keys)
        o_live = drpc.featurizer.observe(got, DrpcState(), sig, keys)
        np.testing.assert_allclose(o_live.local, o_sim.local, rtol=FEATURE_RTOL, atol=FEATURE_ATOL)
        intent = LearnedIntent.load(DEFAULT_HRL_HIGH_BUNDLE, slo_p95_ms=SLO_MS)
        i_sim = intent.featurizer.observe(sim_snap, sim_ix, HrlState(), DrpcState(), sim_signals, keys)
        i_live = intent.featurizer.observe(got, got_ix, HrlState(), DrpcState(), sig, keys)
        np.testing.assert_allclose(i_live.service, i_sim.service, rtol=FEATURE_RTOL, atol=FEATURE_ATOL)
        np.testing.assert_allclose(i_live.global_, i_sim.global_, rtol=FEATURE_RTOL, atol=FEATURE_ATOL)

        # ---- the extender's scores: the simulator's for the same state --------------------------------------------
        sim_scores = placement.score(probe, cands, sim_ix, None, embeddings=rows_sim)
        no_use = ClusterIndex.build(UsageApplier().apply(sim_snap, None)[0])
        sim_scores_no_use = placement.score(probe, cands, no_use, None, embeddings=placement.service_rows(no_use))
        assert np.any(np.rint(sim_scores) != np.rint(sim_scores_no_use)), "the state must make measured use matter"

        def prioritize():
            body = {"Pod": pod_json(probe_svc, namespace, 100, 64 * 2**20), "NodeNames": nodes}
            r = httpx.post(f"{ext.base_url}/scheduler/prioritize", json=body, timeout=5)
            r.raise_for_status()
            return {h["Host"]: h["Score"] for h in r.json()}

        def extender_measures() -> bool:
            m = httpx.get(f"{ext.base_url}/metrics", timeout=5).text
            return 'hrl_metrics_source_state{source="resource_usage",state="ok"} 1.0' in m

        wait_for(extender_measures, 30, "the extender to apply the measured use")
        time.sleep(2.5)  # its service rows are recomputed every second from the snapshot with use
        served = prioritize()
        checked = 0
        for i, n in enumerate(cands):
            frac = sim_scores[i] - math.floor(sim_scores[i])
            if abs(frac - 0.5) > 0.1:
                assert served[node_map[n]] == int(math.floor(sim_scores[i] + 0.5)), (n, sim_scores, served)
                checked += 1
        assert checked >= 2, (sim_scores, served)

        # ---- the decisions: the intent autoscaler's scale change and the resize ----------------------------------
        sim_planner = state_planner()
        sim_planner.autoscaler.signals = sim_signals  # as policy.sim.hrl_stacks hands them to its readers
        sim_plan = sim_planner.plan(sim_snap, sim_ix, placement)
        changed = {k: v for k, v in sim_plan.replica_targets.items() if v != 1}
        assert changed and sim_plan.resizes, sim_plan
        guarded = guard_planner(planner, live, rereads=True)
        observe = live.wrap(KubeObserver(api, sim_snap.graph))
        report = run_once(
            CycleDeps(
                observe,
                KubeEvictor(api),
                guarded,
                placement,
                cfg,
                scaler=KubeScaler(api),
                resizer=KubeResizer(api),
            ),
            time.time(),
        )
        ns_sim = sim_snap.pods[0].namespace
        live_targets = {k.replace(f"{namespace}/", f"{ns_sim}/"): v for k, v in report.replica_targets.items()}
        assert live_targets == dict(sim_plan.replica_targets)
        scaled = {r.workload.split("/")[1]: r for r in report.scaling if r.outcome == "scaled"}
        assert set(scaled) == {k.split("/")[1] for k in changed}, [r.to_json() for r in report.scaling]
        for name, r in scaled.items():
            spec = get_json(cp, "deployment", name, "-n", namespace)["spec"]
            assert spec["replicas"] == r.target
        back = {v: k for k, v in pod_map.items()}
        live_resizes = {back[rz.pod]: rz for rz in report.resizes}
        assert set(live_resizes) == {rz.pod for rz in sim_plan.resizes}
        for rz in sim_plan.resizes:
            got_rz = live_resizes[rz.pod]
            assert got_rz.outcome == "resized", got_rz.to_json()
            assert got_rz.cpu_request_m == rz.cpu_request_m
            name = pod_map[rz.pod].split("/")[1]
            cs = get_json(cp, "pod", name, "-n", namespace)["spec"]["containers"]
            total = sum(parse_cpu_m(c["resources"]["requests"]["cpu"]) for c in cs)
            assert abs(total - rz.cpu_request_m) <= len(cs), (name, total, rz.cpu_request_m)

        # ---- every source gone: the components say so and fall back ---------------------------------------------
        prom.stop()
        mesh.shutdown()
        mesh.server_close()

        def extender_says_stale() -> str | None:
            r = httpx.get(f"{ext.base_url}/readyz", timeout=5)
            return r.text if r.status_code == 200 and "warning: resource_usage: stale" in r.text else None

        readyz = wait_for(extender_says_stale, 30, "the extender's /readyz to say the measured use is stale")
        assert "not used" in readyz
        m = httpx.get(f"{ext.base_url}/metrics", timeout=5).text
        assert 'hrl_metrics_source_state{source="resource_usage",state="stale"} 1.0' in m
        time.sleep(2.5)
        # fail open: scored on requests, as the extender's own state without use scores (the pods the scale change
        # added are Pending now)
        fallback = prioritize()
        bare = KubeObserver(api, sim_snap.graph)()
        bare = ClusterSnapshot(bare.nodes, bare.pods, graph=bare.graph, taken_at_s=bare.taken_at_s)
        bare_ix = ClusterIndex.build(bare)
        probe_live = new_pod(probe_svc, namespace, Resources(100, 64 * 2**20))
        want = load_learned_placement(DEFAULT_PLACEMENT_BUNDLE).score(probe_live, nodes, bare_ix, None)
        for i, n in enumerate(nodes):
            if abs(want[i] - math.floor(want[i]) - 0.5) > 0.1:
                assert fallback[n] == int(math.floor(want[i] + 0.5)), (n, want, fallback)
        time.sleep(9)  # past maxAgeSeconds for the descheduler's readings too
        report = run_once(
            CycleDeps(
                observe, KubeEvictor(api), guarded, placement, cfg, scaler=KubeScaler(api), resizer=KubeResizer(api)
            ),
            time.time(),
        )
        assert [s.state for s in live.statuses()] == ["stale", "stale"]
        assert report.resizes == () and guarded.withheld["moves"] is True
        assert report.replica_targets == {}  # no pod measured: no target
    assert "live input resource_usage: stale" in ext.stderr
