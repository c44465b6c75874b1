"""Plugin mode on the real control plane: kube-scheduler built with the HRLScore plugin
(hack/build-scheduler-plugin.sh) scores from the table a real ``hrl-extender`` (``scoreTable.publish``) computes from
its watch and publishes to a real ``hrl-policy cache serve``, which streams it to the plugin: a pod lands next to the
service it calls, as the extender would place it; the plugin's metrics say so; when the producer stops, the table ages
past ``maxTableAgeSeconds`` and pods are still scheduled, neutral (fail open); when the cache goes away, the watch
says so and scheduling goes on."""

from __future__ import annotations

import sys

import httpx
import pytest
import yaml
from cp_helpers import apply, cpmod, deployment, node_of, pod_spec, spawn, stop, wait_for, wait_running
from prometheus_client.parser import text_string_to_metric_families

from policy.cache import GrpcEmbeddingCache
from policy.state import ANNOTATION_DEPENDS_ON

pytestmark = pytest.mark.controlplane

PLUGIN = "hrl-plugin"
HOSTNAME = "kubernetes.io/hostname"


def _samples(cp, comp) -> dict[str, float]:
    port = int(comp.ready_url.rsplit(":", 1)[1].split("/")[0])
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(cp.fetch(f"https://127.0.0.1:{port}/metrics")):
        for s in fam.samples:
            if s.name.startswith("hrl_plugin_"):
                key = s.name + "".join(f"{{{k}={v}}}" for k, v in sorted(s.labels.items()))
                out[key] = s.value
    return out


@pytest.fixture
def plugin_mode(control_plane, tmp_path):
    """A cache, an ``hrl-extender`` publishing its score table there (the heuristic, a watch as the
    ``hrl-extender`` identity, the tests' call graph from manifests), and a kube-scheduler with HRLScore (profile
    ``hrl-plugin``, maxTableAgeSeconds 4)."""
    cp = control_plane
    bin_dir = cpmod.plugin_bin_dir(build=True, log=lambda m: print(m, file=sys.stderr))
    cache_port, ext_port = cpmod.free_ports(2)
    cache_addr = f"127.0.0.1:{cache_port}"
    procs = {
        "cache": spawn(
            [sys.executable, "-m", "policy.cli", "cache", "serve", "--listen", cache_addr], tmp_path / "cache.log"
        )
    }
    cfg = {
        "apiVersion": "hrl-scheduler.io/v1alpha1",
        "kind": "ExtenderConfiguration",
        "listen": {"host": "127.0.0.1", "port": ext_port},
        "logLevel": "INFO",
        "kubernetes": {"enabled": True, "kubeconfig": str(cp.kubeconfigs["hrl-extender"])},
        "maxSnapshotAgeSeconds": 120,
        "precompute": {"enabled": False},
        "scoreTable": {"publish": True, "address": cache_addr},
    }
    # the call graph of the tests' services, as a user's manifests (or mesh metrics) give it before any pod runs
    graph = [
        deployment("frontend", depends_on=["backend"]),
        deployment("backend"),
        deployment("three", depends_on=["one"]),
        deployment("one"),
    ]
    (tmp_path / "app.yaml").write_text(yaml.safe_dump_all(graph))
    cfg["topology"] = {"sources": [str(tmp_path / "app.yaml")]}
    (tmp_path / "extender.yaml").write_text(yaml.safe_dump(cfg))
    procs["extender"] = spawn(
        [sys.executable, "-m", "extender", "--config", str(tmp_path / "extender.yaml")], tmp_path / "extender.log"
    )
    base = f"http://127.0.0.1:{ext_port}"

    def ready():
        for name, p in procs.items():
            assert p.poll() is None, f"{name} exited: {(tmp_path / f'{name}.log').read_text()[-2000:]}"
        return httpx.get(base + "/readyz", timeout=1).status_code == 200

    comp = None
    try:
        wait_for(ready, 60, "the cache and the producing extender to be ready")
        comp = cp.start_scheduler(
            PLUGIN,
            binary=bin_dir / "kube-scheduler",
            profile=cpmod.hrl_score_profile(cache_addr, weight=2, max_table_age_s=4.0),
        )
        wait_for(lambda: _samples(cp, comp).get("hrl_plugin_watch_connected") == 1.0, 30, "the plugin's watch")
        yield cp, comp, {**procs, "cache_address": cache_addr}, tmp_path
    finally:
        if comp is not None:
            cp.stop_component(comp)
        for p in reversed(list(procs.values())):
            stop(p)


def test_the_plugin_places_a_pod_next_to_its_callee_from_the_producers_table(plugin_mode, namespace, kwok_nodes):
    cp, comp, procs, _tmp = plugin_mode
    nodes = kwok_nodes(3, cpu="8")
    target = nodes[1]
    # the callee, pinned to one node by the default scheduler (no score of ours involved)
    apply(cp, namespace, [deployment("backend", scheduler="default-scheduler", node_selector={HOSTNAME: target})])
    wait_running(cp, namespace, 1, "app=backend")
    before = _samples(cp, comp)

    def table_knows_backend():  # the caller's row ranks the callee's node first, and the plugin holds that table
        with GrpcEmbeddingCache(procs["cache_address"], 2.0) as cache:
            stream = cache.watch_score_table(0, "test")
            try:
                event = next(iter(stream))
            finally:
                stream.cancel()
        if event[0] != "table":
            return False
        table = event[1]
        row = table.row("frontend", -1, -1)
        if row is None or target not in table.nodes:
            return False
        i = table.nodes.index(target)
        if not all(row.base[i] > b for j, b in enumerate(row.base) if j != i):
            return False
        return _samples(cp, comp).get("hrl_plugin_table_generation", 0) >= table.generation

    wait_for(
        table_knows_backend, 30, "a score table, held by the plugin, that ranks the callee's node first for its caller"
    )
    apply(cp, namespace, [deployment("frontend", replicas=3, scheduler=PLUGIN, depends_on=["backend"])])
    placed = wait_running(cp, namespace, 3, "app=frontend", timeout_s=60)
    # locality 1 on the callee's node: 10 points x weight 2 x 10 = 200, far above what the in-tree scores differ by
    assert {node_of(p) for p in placed} == {target}
    after = _samples(cp, comp)
    ok = after["hrl_plugin_prescore_total{outcome=ok}"] - before.get("hrl_plugin_prescore_total{outcome=ok}", 0)
    assert ok >= 3
    assert after["hrl_plugin_table_rows"] >= 2 and after["hrl_plugin_table_nodes"] >= 3
    assert 0 <= after["hrl_plugin_table_age_seconds"] < 4.0


def test_a_table_older_than_the_bound_scores_neutral_and_pods_are_still_scheduled(plugin_mode, namespace, kwok_nodes):
    cp, comp, procs, _tmp = plugin_mode
    kwok_nodes(2)
    apply(cp, namespace, [deployment("one", scheduler=PLUGIN)])
    wait_running(cp, namespace, 1, "app=one")
    stop(procs["extender"])  # no more tables nor heartbeats: the cache keeps the last one, aging

    def stale():
        return _samples(cp, comp).get("hrl_plugin_table_age_seconds", 0) > 4.0

    wait_for(stale, 30, "the table to age past maxTableAgeSeconds")
    before = _samples(cp, comp).get("hrl_plugin_prescore_total{outcome=neutral_stale}", 0)
    apply(cp, namespace, [deployment("two", replicas=2, scheduler=PLUGIN)])
    wait_running(cp, namespace, 2, "app=two", timeout_s=60)
    assert _samples(cp, comp)["hrl_plugin_prescore_total{outcome=neutral_stale}"] - before >= 2
    stop(procs["cache"])  # the watch breaks: reported, retried, scheduling goes on
    wait_for(lambda: _samples(cp, comp).get("hrl_plugin_watch_connected") == 0.0, 30, "the watch to report the loss")
    assert _samples(cp, comp)["hrl_plugin_watch_errors_total{kind=stream}"] >= 1
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "spec": pod_spec(PLUGIN),
        "metadata": {"name": "three", "labels": {"app": "three"}, "annotations": {ANNOTATION_DEPENDS_ON: "one"}},
    }
    apply(cp, namespace, [pod])
    wait_running(cp, namespace, 1, "app=three", timeout_s=60)


@pytest.mark.parametrize(
    "args, message",
    [
        ({"cacheAdress": "127.0.0.1:1"}, 'unknown field "cacheAdress"'),
        ({"cacheAddress": "nowhere"}, 'HRLScore: args.cacheAddress: expected host:port, got "nowhere"'),
        ({"cacheAddress": "127.0.0.1:1", "maxTableAgeSeconds": 0}, "args.maxTableAgeSeconds: expected 0 < x <= 86400"),
    ],
)
def test_a_bad_plugin_argument_stops_the_scheduler_with_a_message_naming_it(control_plane, args, message):
    bin_dir = cpmod.plugin_bin_dir(build=True)
    profile = cpmod.hrl_score_profile("127.0.0.1:1")
    profile["pluginConfig"][0]["args"] = args
    with pytest.raises(cpmod.ControlPlaneError) as err:
        comp = control_plane.start_scheduler(
            "hrl-plugin-bad", binary=bin_dir / "kube-scheduler", profile=profile, timeout_s=60
        )
        control_plane.stop_component(comp)
    # the scheduler's last log line, as klog writes it: err="... \"quoted\" ..." (its quotes escaped)
    assert message in str(err.value).replace('\\"', '"')
