"""The chart's plugin mode (``scheduler.scoring.mode: plugin``): the second scheduler runs the hrl-kube-scheduler image
with the HRLScore profile the control-plane tests run (hack/controlplane.py ``hrl_score_profile``,
tests/integration/test_controlplane_plugin.py) and no extenders[] entry; the extender publishes its score table to
the embedding cache (its Deployment, or the extender's sidecar), whose Service and NetworkPolicy let the plugin
watch it; extender mode renders as before; plugin mode without the second scheduler is refused with one line."""

from __future__ import annotations

import pytest

from extender.config import load_extender_config
from tests.integration.cp_helpers import cpmod
from tests.unit.test_chart import NS, config_of, one, pod_spec, render, template


@pytest.mark.parametrize("learned", [False, True])
@pytest.mark.parametrize("cache_mode", ["deployment", "sidecar"])
def test_plugin_mode_runs_hrlscore_fed_by_the_extenders_table_through_the_embedding_cache(learned, cache_mode):
    values = {
        "scheduler": {"scoring": {"mode": "plugin"}},
        "learnedPolicies": {"enabled": learned, "cache": {"mode": cache_mode}},
        "networkPolicy": {"enabled": True},
    }
    objs = render(values)
    cfg = config_of(objs, "hrl-scheduler-config")
    assert "extenders" not in cfg  # no HTTP call per pod
    (profile,) = cfg["profiles"]
    # the plugin watches the cache where it runs: its own Deployment's Service, or the extender's (sidecar)
    cache_host = "hrl-embedding-cache" if cache_mode == "deployment" else "hrl-extender"
    want = cpmod.hrl_score_profile(f"{cache_host}.{NS}.svc:50051", weight=2, max_table_age_s=30)
    assert {k: v for k, v in profile.items() if k != "schedulerName"} == want
    sched = pod_spec(one(objs, "Deployment", "hrl-scheduler"))["containers"][0]
    assert sched["image"] == "ghcr.io/hrl-scheduler/hrl-kube-scheduler:0.1.0"
    ext = load_extender_config(config_of(objs, "hrl-extender-config"))
    assert not ext.precompute.enabled
    assert (ext.cache is not None) == learned  # the heuristic needs no embeddings: the cache only relays the table
    containers = {c["name"]: c for c in pod_spec(one(objs, "Deployment", "hrl-extender"))["containers"]}
    if cache_mode == "sidecar":
        assert ext.score_table_address() == "127.0.0.1:50051"
        assert containers["embedding-cache"]["ports"][0]["containerPort"] == 50051
        svc = one(objs, "Service", "hrl-extender")
        assert {p["name"]: p["port"] for p in svc["spec"]["ports"]}["grpc-cache"] == 50051
        cache_policy = one(objs, "NetworkPolicy", "hrl-extender")
    else:
        assert ext.score_table_address() == f"hrl-embedding-cache.{NS}.svc:50051"
        assert "embedding-cache" not in containers
        assert one(objs, "Deployment", "hrl-embedding-cache")
        cache_policy = one(objs, "NetworkPolicy", "hrl-embedding-cache")
    # the NetworkPolicy lets the second scheduler reach the cache's gRPC port
    (grpc_rule,) = [r for r in cache_policy["spec"]["ingress"] if r["ports"][0]["port"] == "grpc-cache"]
    callers = [f["podSelector"]["matchLabels"]["app.kubernetes.io/name"] for f in grpc_rule["from"]]
    assert "hrl-scheduler" in callers and "hrl-descheduler" in callers


def test_extender_mode_is_the_default_and_keeps_its_registration():
    objs = render({})
    cfg = config_of(objs, "hrl-scheduler-config")
    assert len(cfg["extenders"]) == 1 and "plugins" not in cfg["profiles"][0]
    assert load_extender_config(config_of(objs, "hrl-extender-config")).score_table_address() is None
    assert "embedding-cache" not in {c["name"] for c in pod_spec(one(objs, "Deployment", "hrl-extender"))["containers"]}


@pytest.mark.parametrize(
    "values,message",
    [
        (
            {"scheduler": {"mode": "dropin", "scoring": {"mode": "plugin"}}},
            'scheduler.scoring.mode: plugin needs scheduler.mode second (got "dropin"',
        ),
        ({"scheduler": {"scoring": {"mode": "grpc"}}}, "/scheduler/scoring/mode"),
        ({"scheduler": {"scoring": {"maxTableAgeSeconds": 0}}}, "/scheduler/scoring/maxTableAgeSeconds"),
        (
            {"extender": {"mode": "shadow"}, "scheduler": {"scoring": {"mode": "plugin"}}},
            "extender.mode: shadow with scheduler.scoring.mode: plugin",
        ),
    ],
)
def test_bad_plugin_values_are_refused_with_a_message_naming_the_value(values, message):
    out = template(values, check=False)
    assert out.returncode != 0 and message in out.stderr, out.stderr
