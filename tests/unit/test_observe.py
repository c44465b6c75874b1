"""policy.observe: Kubernetes API JSON → domain types, as the API server and kube-scheduler send them."""

import json

import pytest

from policy.observe import (
    ObjectError,
    load_objects,
    parse_cpu_m,
    parse_memory_bytes,
    parse_node,
    parse_pdb,
    parse_pod,
    parse_workload,
    service_of,
    snapshot_from_objects,
)
from policy.state import OwnerRef


@pytest.mark.parametrize(
    "value,expected",
    [
        ("100m", 100),
        ("0.5", 500),
        ("1", 1000),
        (2, 2000),
        ("1.5", 1500),
        ("250m", 250),
        ("0.0001", 1),
        ("1e3", 1_000_000),
        ("1k", 1_000_000),
    ],
)
def test_cpu_quantities_become_millicores_rounded_up(value, expected):
    assert parse_cpu_m(value) == expected


@pytest.mark.parametrize(
    "value,expected",
    [
        ("64Mi", 64 * 2**20),
        ("1Gi", 2**30),
        ("128M", 128_000_000),
        ("1e3", 1000),
        (1024, 1024),
        ("0.5Ki", 512),
    ],
)
def test_memory_quantities_become_bytes(value, expected):
    assert parse_memory_bytes(value) == expected


@pytest.mark.parametrize("bad", ["abc", "10x", "", "-1", True, None, "1.2.3"])
def test_an_invalid_quantity_is_rejected_naming_the_field_and_value(bad):
    with pytest.raises(ObjectError) as e:
        parse_cpu_m(bad, "spec.containers[0].resources.requests.cpu")
    assert "spec.containers[0].resources.requests.cpu" in str(e.value)
    assert repr(bad) in str(e.value)
    assert "\n" not in str(e.value)


def test_a_quantity_parsed_before_gives_the_same_value_and_a_bad_one_names_its_field_every_time():
    assert [parse_cpu_m("100m") for _ in range(3)] == [100, 100, 100]
    assert [parse_memory_bytes("128Mi") for _ in range(3)] == [128 * 2**20] * 3
    assert parse_cpu_m("1e3") == 1_000_000 and parse_memory_bytes("1e3") == 1000  # one cache per unit
    for field in ("a.cpu", "b.cpu"):
        with pytest.raises(ObjectError, match=field):
            parse_cpu_m("10x", field)


POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "frontend-7d9c8b6f5-abcde",
        "namespace": "shop",
        "uid": "u-1",
        "labels": {"app": "frontend", "pod-template-hash": "7d9c8b6f5"},
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": "frontend-7d9c8b6f5",
                "uid": "rs-1",
                "controller": True,
            }
        ],
        "creationTimestamp": "2026-01-01T00:00:10Z",
    },
    "spec": {
        "schedulerName": "hrl-scheduler",
        "containers": [
            {
                "name": "a",
                "resources": {
                    "requests": {"cpu": "100m", "memory": "64Mi"},
                    "limits": {"cpu": "200m", "memory": "128Mi"},
                },
            },
            {"name": "b", "resources": {"limits": {"cpu": "300m", "memory": "1Gi"}}},
        ],
        "initContainers": [{"name": "init", "resources": {"requests": {"cpu": "1", "memory": "10Mi"}}}],
        "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
        "volumes": [{"name": "cfg", "configMap": {"name": "x"}}],
    },
    "status": {"phase": "Pending"},
}


def test_a_pod_sums_container_requests_defaults_requests_from_limits_and_takes_the_init_container_max():
    p = parse_pod(POD)
    # containers: 100m + 300m (request defaulted from limit) = 400m < init 1000m -> 1000m
    assert p.requests.cpu_m == 1000
    assert p.requests.memory_bytes == 64 * 2**20 + 2**30
    assert p.limits.cpu_m == 500
    assert p.service == "frontend"
    assert p.key == "shop/frontend-7d9c8b6f5-abcde"
    assert p.owner == OwnerRef("ReplicaSet", "frontend-7d9c8b6f5", "rs-1")
    assert p.scheduler_name == "hrl-scheduler"
    assert p.node_name is None and not p.is_bound
    assert not p.local_storage and not p.terminating and not p.is_mirror
    assert p.tolerations[0].operator == "Exists"


def test_emptydir_and_hostpath_volumes_mean_local_storage():
    for vol in ({"name": "v", "emptyDir": {}}, {"name": "v", "hostPath": {"path": "/x"}}):
        pod = json.loads(json.dumps(POD))
        pod["spec"]["volumes"].append(vol)
        assert parse_pod(pod).local_storage


def test_a_pod_on_a_claim_bound_to_a_local_persistent_volume_has_local_storage():
    pod = json.loads(json.dumps(POD))
    pod["spec"]["volumes"].append({"name": "d", "persistentVolumeClaim": {"claimName": "data"}})
    pv = {"kind": "PersistentVolume", "metadata": {"name": "pv-local"}, "spec": {"local": {"path": "/mnt"}}}
    pvc = {
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "namespace": "shop"},
        "spec": {"volumeName": "pv-local"},
    }
    snap = snapshot_from_objects([pod, pv, pvc])
    assert snap.pods[0].local_storage
    assert not snapshot_from_objects([pod]).pods[0].local_storage


@pytest.mark.parametrize(
    "labels,annotations,owner,name,expected",
    [
        ({"app": "cart"}, {"hrl-scheduler.io/service": "carts"}, None, "x-1-2", "carts"),
        ({"app.kubernetes.io/name": "geo", "app": "other"}, {}, None, "x", "geo"),
        ({"app": "cart"}, {}, None, "x", "cart"),
        ({}, {}, OwnerRef("ReplicaSet", "checkout-5f6b7c8d9"), "x", "checkout"),
        ({}, {}, OwnerRef("StatefulSet", "redis"), "redis-0", "redis"),
        ({}, {}, None, "payment-abc12-xyz9q", "payment"),
    ],
)
def test_the_service_of_a_pod_follows_the_documented_precedence(labels, annotations, owner, name, expected):
    assert service_of(labels, annotations, owner, name) == expected


def test_a_node_uses_allocatable_and_reads_taints_zone_and_readiness():
    n = parse_node(
        {
            "kind": "Node",
            "metadata": {"name": "n1", "labels": {"topology.kubernetes.io/zone": "z1"}},
            "spec": {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}], "unschedulable": True},
            "status": {
                "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                "allocatable": {"cpu": "3800m", "memory": "15Gi", "pods": "100"},
                "conditions": [{"type": "Ready", "status": "False"}],
            },
        }
    )
    assert n.allocatable.cpu_m == 3800 and n.allocatable_pods == 100
    assert n.zone == "z1" and n.unschedulable and not n.ready
    assert n.taints[0].key == "dedicated"


def test_a_pdb_keeps_its_spec_values_and_status():
    b = parse_pdb(
        {
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "b", "namespace": "shop"},
            "spec": {"minAvailable": "50%", "selector": {"matchLabels": {"app": "cart"}}},
            "status": {"disruptionsAllowed": 0},
        }
    )
    assert b.min_available == "50%" and b.disruptions_allowed == 0
    assert b.covers(parse_pod({**POD, "metadata": {**POD["metadata"], "labels": {"app": "cart"}}}))
    assert not b.covers(parse_pod(POD))


def test_a_pdb_without_status_has_unknown_disruptions_allowed():
    b = parse_pdb({"kind": "PodDisruptionBudget", "metadata": {"name": "b"}, "spec": {}})
    assert b.disruptions_allowed is None


def test_a_deployment_gives_replicas_per_pod_resources_and_depends_on():
    w = parse_workload(
        {
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "ns", "annotations": {"hrl-scheduler.io/depends-on": "db, cache"}},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "250m"}}}]},
                },
            },
        }
    )
    assert (w.replicas, w.service, w.pod_requests.cpu_m, w.depends_on) == (3, "web", 250, ("db", "cache"))


def test_a_negative_replica_count_is_rejected_with_the_object_and_field():
    with pytest.raises(ObjectError, match=r"Deployment ns/web: spec.replicas .* -1"):
        parse_workload({"kind": "Deployment", "metadata": {"name": "web", "namespace": "ns"}, "spec": {"replicas": -1}})


def test_kubectl_list_output_is_flattened_and_typed_lists_give_kinds(tmp_path):
    f = tmp_path / "cluster.json"
    f.write_text(
        json.dumps(
            {
                "kind": "List",
                "apiVersion": "v1",
                "items": [
                    {
                        "kind": "NodeList",
                        "items": [{"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "2"}}}],
                    },
                    POD,
                ],
            }
        )
    )
    snap = snapshot_from_objects(load_objects(f))
    assert [n.name for n in snap.nodes] == ["n1"]
    assert [p.name for p in snap.pods] == ["frontend-7d9c8b6f5-abcde"]


def test_invalid_yaml_reports_the_file_and_line(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("kind: Pod\nmetadata:\n  name: [unclosed\n")
    with pytest.raises(ObjectError, match=r"bad.yaml:\d+: invalid YAML"):
        load_objects(f)


def test_a_pods_restarts_are_read_from_its_container_statuses():
    obj = {
        "metadata": {"name": "p", "namespace": "shop"},
        "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
        "status": {
            "containerStatuses": [
                {"name": "a", "restartCount": 2, "lastState": {"terminated": {"finishedAt": "1970-01-01T00:10:00Z"}}},
                {"name": "b", "restartCount": 1, "lastState": {"terminated": {"finishedAt": "1970-01-01T00:20:00Z"}}},
            ]
        },
    }
    p = parse_pod(obj)
    assert (p.restarts, p.last_terminated_s) == (3, 1200.0)
    assert (parse_pod({**obj, "status": {}}).restarts, parse_pod({**obj, "status": {}}).last_terminated_s) == (0, None)
    # a restarted container without a termination time: its current run's start stands in; none known: None
    lost = {"restartCount": 1, "lastState": {"terminated": {"reason": "ContainerStatusUnknown"}}}
    started = {**lost, "state": {"running": {"startedAt": "1970-01-01T00:30:00Z"}}}
    assert parse_pod({**obj, "status": {"containerStatuses": [started]}}).last_terminated_s == 1800.0
    p = parse_pod({**obj, "status": {"containerStatuses": [lost]}})
    assert (p.restarts, p.last_terminated_s) == (1, None)
    for quiet in ({"lastState": {}}, {"lastState": {"terminated": None}}, {"restartCount": 0}):
        assert parse_pod({**obj, "status": {"containerStatuses": [quiet]}}).last_terminated_s is None
    bad = {**obj, "status": {"containerStatuses": [{"restartCount": -1}]}}
    with pytest.raises(ObjectError, match=r"status.containerStatuses\[0\].restartCount"):
        parse_pod(bad)
