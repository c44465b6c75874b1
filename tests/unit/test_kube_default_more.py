"""The rest of kube-scheduler's default score plugins (TaintToleration, NodeAffinity, InterPodAffinity,
PodTopologySpread), each checked against a decision computed by hand from the Go source's arithmetic."""

import math

import numpy as np
import pytest

from policy.baselines.affinity import (
    NO_TERMS,
    AffinityTerm,
    NodeSelectorTerm,
    PodTerms,
    SpreadConstraint,
    WeightedAffinityTerm,
    parse_pod_terms,
    terms_by_service,
)
from policy.baselines.kube_default import (
    InterPodAffinity,
    NodeAffinity,
    PodTopologySpread,
    TaintToleration,
    default_normalize_score,
    default_score_plugins,
)
from policy.index import ClusterIndex
from policy.observe import ObjectError
from policy.state import (
    LABEL_HOSTNAME,
    LABEL_ZONE,
    ClusterSnapshot,
    LabelSelector,
    NodeInfo,
    OwnerRef,
    PodInfo,
    Resources,
    Taint,
    Toleration,
)

GI = 2**30


def node(name, zone="", **kw):
    labels = {LABEL_HOSTNAME: name}
    if zone:
        labels[LABEL_ZONE] = zone
    return NodeInfo(name, Resources(4000, 8 * GI), labels=labels, **kw)


def pod(name, node_name=None, rs="web-7d9f8", app="web", ns="ns", **kw):
    return PodInfo(
        name,
        ns,
        app,
        Resources(100, GI),
        node_name=node_name,
        labels={"app": app},
        owner=OwnerRef("ReplicaSet", rs) if rs else None,
        **kw,
    )


def index(pods, nodes):
    return ClusterIndex.build(ClusterSnapshot(nodes=tuple(nodes), pods=tuple(pods)))


@pytest.mark.parametrize(
    "raw,reverse,expected",
    [
        ([0, 0, 0], False, [0, 0, 0]),
        ([0, 0, 0], True, [100, 100, 100]),
        ([1, 2, 3], False, [33, 66, 100]),
        ([1, 2, 3], True, [67, 34, 0]),
    ],
)
def test_default_normalize_scales_by_the_maximum_with_integer_division(raw, reverse, expected):
    assert default_normalize_score(np.array(raw), reverse).tolist() == expected


def test_taint_toleration_prefers_nodes_with_fewer_untolerated_prefer_no_schedule_taints():
    soft = Taint("gpu", "yes", "PreferNoSchedule")
    soft2 = Taint("spot", "", "PreferNoSchedule")
    nodes = [node("a"), node("b", taints=(soft,)), node("c", taints=(soft, soft2))]
    idx = index([], nodes)
    # counts 0, 1, 2 -> 100 - 100*count//2
    assert TaintToleration().score(pod("p"), ["a", "b", "c"], idx).tolist() == [100, 50, 0]
    # a toleration without effect tolerates the gpu taint: counts 0, 0, 1
    tolerant = pod("p", tolerations=(Toleration("gpu", "Exists"),))
    assert TaintToleration().score(tolerant, ["a", "b", "c"], idx).tolist() == [100, 100, 0]


def test_node_affinity_sums_matched_preferred_weights_then_normalizes():
    nodes = [node("a", zone="z1"), node("b", zone="z2"), node("c")]
    terms = PodTerms(
        preferred_node_affinity=(
            (30, NodeSelectorTerm(((LABEL_ZONE, "In", ("z1",)),))),
            (10, NodeSelectorTerm(((LABEL_ZONE, "Exists", ()),))),
        )
    )
    plugin = NodeAffinity(lambda p: terms)
    # raw a = 40, b = 10, c = 0 -> 100*raw//40
    assert plugin.score(pod("p"), ["a", "b", "c"], index([], nodes)).tolist() == [100, 25, 0]
    assert NodeAffinity().score(pod("p"), ["a", "b"], index([], nodes)).tolist() == [0, 0]


def test_inter_pod_affinity_adds_preferred_affinity_subtracts_anti_affinity_and_normalizes_min_max():
    nodes = [node("a", zone="z1"), node("b", zone="z1"), node("c", zone="z2")]
    db = PodInfo("db-1", "ns", "db", Resources(100, GI), node_name="a", labels={"app": "db"})
    cache = PodInfo("cache-1", "ns", "cache", Resources(100, GI), node_name="c", labels={"app": "cache"})
    incoming = PodInfo("api-1", "ns", "api", Resources(100, GI), labels={"app": "api"})
    api_terms = PodTerms(
        preferred_affinity=(WeightedAffinityTerm(50, AffinityTerm(LabelSelector({"app": "db"}), LABEL_ZONE)),),
        preferred_anti_affinity=(
            WeightedAffinityTerm(20, AffinityTerm(LabelSelector({"app": "cache"}), LABEL_HOSTNAME)),
        ),
    )
    plugin = InterPodAffinity(lambda p: api_terms if p.service == "api" else NO_TERMS)
    # topology scores: zone z1 += 50 (db on a, zone z1); hostname c -= 20 (cache on c)
    # raw: a = 50, b = 50, c = -20 -> int(100 * (s + 20) / 70): 100, 100, 0
    assert plugin.score(incoming, ["a", "b", "c"], index([db, cache], nodes)).tolist() == [100, 100, 0]


def test_inter_pod_affinity_counts_existing_pods_required_terms_with_the_hard_weight():
    nodes = [node("a", zone="z1"), node("b", zone="z2")]
    db = PodInfo("db-1", "ns", "db", Resources(100, GI), node_name="b", labels={"app": "db"})
    db_terms = PodTerms(required_affinity=(AffinityTerm(LabelSelector({"app": "api"}), LABEL_ZONE),))
    plugin = InterPodAffinity(lambda p: db_terms if p.service == "db" else NO_TERMS)
    incoming = PodInfo("api-1", "ns", "api", Resources(100, GI), labels={"app": "api"})
    # zone z2 += 1 -> a = 0, b = 1 -> 0, 100
    assert plugin.score(incoming, ["a", "b"], index([db], nodes)).tolist() == [0, 100]
    # a pod of another namespace is not selected by the term (namespaces default to the term owner's)
    other = PodInfo("api-2", "other", "api", Resources(100, GI), labels={"app": "api"})
    assert plugin.score(other, ["a", "b"], index([db], nodes)).tolist() == [0, 0]


def test_inter_pod_affinity_skips_when_nobody_has_affinity_terms():
    nodes = [node("a"), node("b")]
    assert InterPodAffinity().score(pod("p"), ["a", "b"], index([pod("x", "a")], nodes)).tolist() == [0, 0]


def test_pod_topology_spread_system_defaults_spread_a_replicaset_over_hostnames():
    nodes = [node("n1"), node("n2"), node("n3")]
    existing = [pod("w1", "n1"), pod("w2", "n1"), pod("w3", "n2"), pod("other", "n3", rs="db-5f6g7", app="db")]
    s = PodTopologySpread().score(pod("new"), ["n1", "n2", "n3"], index(existing, nodes))
    # hostname weight ln(3 + 2); the zone constraint is skipped on nodes without a zone label.
    # raw: n1 round(2 ln5 + 2) = 5, n2 round(ln5 + 2) = 4, n3 round(0 + 2) = 2; max 5, min 2
    # normalized 100 * (5 + 2 - raw) // 5: 40, 60, 100
    w = math.log(5)
    assert [round(2 * w + 2), round(w + 2), 2] == [5, 4, 2]
    assert s.tolist() == [40, 60, 100]


def test_pod_topology_spread_counts_zones_over_all_nodes_and_hostnames_on_the_node():
    nodes = [node("a1", zone="z1"), node("a2", zone="z1"), node("b1", zone="z2")]
    existing = [pod("w1", "a1"), pod("w2", "a1"), pod("w3", "a2")]
    s = PodTopologySpread().score(pod("new"), ["a2", "b1"], index(existing, nodes))
    # scored nodes a2, b1: hostname weight ln(2 + 2), zone weight ln(2 + 2) (values z1, z2)
    # a2: host 1 * ln4 + 2 + zone 3 * ln4 + 4 = 4 ln4 + 6 = 11.545 -> 12
    # b1: 0 + 2 + 0 + 4 = 6; max 12, min 6 -> 100 * (18 - raw) // 12: a2 50, b1 100
    assert round(4 * math.log(4) + 6) == 12
    assert s.tolist() == [50, 100]


def test_pod_topology_spread_skips_pods_without_a_controller():
    nodes = [node("n1"), node("n2")]
    assert PodTopologySpread().score(pod("bare", rs=None), ["n1", "n2"], index([], nodes)).tolist() == [0, 0]


def test_pod_topology_spread_uses_the_pods_own_schedule_anyway_constraints_and_ignores_unlabelled_nodes():
    nodes = [node("a", zone="z1"), node("b", zone="z2"), NodeInfo("c", Resources(4000, 8 * GI))]
    existing = [pod("w1", "a"), pod("w2", "a")]
    terms = PodTerms(
        spread_constraints=(SpreadConstraint(1, LABEL_ZONE, "ScheduleAnyway", LabelSelector({"app": "web"})),)
    )
    s = PodTopologySpread(lambda p: terms).score(pod("new"), ["a", "b", "c"], index(existing, nodes))
    # c lacks the zone key: ignored (0). zone weight ln(2 + 2): a = round(2 ln4) = 3, b = 0
    # normalized 100 * (3 + 0 - raw) // 3: a 0, b 100
    assert s.tolist() == [0, 100, 0]


def test_the_default_profile_spreads_replicas_across_nodes():
    from policy.sim.kube_scheduler import KubeSchedulerModel

    nodes = [node("n1"), node("n2")]
    existing = [pod("w1", "n1")]
    res = KubeSchedulerModel(plugins=default_score_plugins()).schedule(
        pod("new"), {}, index(existing, nodes), {}, np.random.default_rng(0)
    )
    assert res.node == "n2"


def test_pod_terms_parse_from_a_pod_spec_and_reject_bad_weights():
    spec = {
        "affinity": {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {
                            "labelSelector": {"matchLabels": {"app": "web"}},
                            "topologyKey": LABEL_HOSTNAME,
                        },
                    }
                ]
            },
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 5,
                        "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]},
                    }
                ]
            },
        },
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": LABEL_ZONE,
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"app": "web"}},
            }
        ],
    }
    t = parse_pod_terms(spec)
    assert t.preferred_anti_affinity[0].weight == 100
    assert t.preferred_anti_affinity[0].term.topology_key == LABEL_HOSTNAME
    assert t.preferred_node_affinity[0][0] == 5
    assert t.spread_constraints[0].max_skew == 1
    bad = {
        "affinity": {
            "podAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 0, "podAffinityTerm": {"topologyKey": "k"}}
                ]
            }
        }
    }
    with pytest.raises(ObjectError, match="weight"):
        parse_pod_terms(bad)


def test_terms_by_service_reads_pod_templates():
    dep = {
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "template": {
                "spec": {
                    "topologySpreadConstraints": [
                        {"maxSkew": 2, "topologyKey": LABEL_ZONE, "whenUnsatisfiable": "ScheduleAnyway"}
                    ]
                }
            }
        },
    }
    look = terms_by_service([dep, {"kind": "Deployment", "metadata": {"name": "db"}}], lambda o: o["metadata"]["name"])
    assert look(pod("x", app="web")).spread_constraints[0].max_skew == 2
    assert look(pod("y", app="db")) == NO_TERMS
