"""Call graph from Kubernetes manifests: Online Boutique (real files) and small table-driven cases."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from policy.topology.common import TopologyError
from policy.topology.manifests import addresses_in_env, graph_from_objects, load_manifests

ROOT = Path(__file__).resolve().parents[2]
RELEASE = ROOT / "policy/data/apps/online-boutique/kubernetes-manifests.yaml"
PER_SERVICE_DIR = ROOT / "tests/fixtures/online-boutique-manifests"
PROVENANCE = ROOT / "policy/data/apps/online-boutique/PROVENANCE.md"

OB_WORKLOADS = {
    "frontend",
    "cartservice",
    "productcatalogservice",
    "currencyservice",
    "paymentservice",
    "shippingservice",
    "emailservice",
    "checkoutservice",
    "recommendationservice",
    "adservice",
    "loadgenerator",
    "redis-cart",
}


def provenance_edges() -> set[tuple[str, str]]:
    """The numbered call-graph table of the vendored PROVENANCE.md: ``| n | caller | callee | evidence |``."""
    rows = re.findall(r"^\| (\d+) \| ([a-z-]+) \| ([a-z-]+) \|", PROVENANCE.read_text(), flags=re.M)
    assert [int(n) for n, _, _ in rows] == list(range(1, 17))
    return {(caller, callee) for _, caller, callee in rows}


def edge_set(graph) -> set[tuple[str, str]]:
    return {(e.caller, e.callee) for e in graph.edges}


def graph_of(yaml_text: str, tmp_path: Path):
    f = tmp_path / "app.yaml"
    f.write_text(textwrap.dedent(yaml_text))
    return load_manifests(f)


def deployment(
    name: str,
    labels: dict[str, str],
    env: dict[str, str] | None = None,
    namespace: str = "default",
    annotations: dict[str, str] | None = None,
    template_annotations: dict[str, str] | None = None,
) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels, "annotations": template_annotations or {}},
                "spec": {
                    "containers": [
                        {"name": "main", "image": "x", "env": [{"name": k, "value": v} for k, v in (env or {}).items()]}
                    ]
                },
            },
        },
    }


def service(name: str, selector: dict[str, str] | None, namespace: str = "default") -> dict:
    spec = {"ports": [{"port": 80}]}
    if selector is not None:
        spec["selector"] = selector
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


# ---- Online Boutique ---------------------------------------------------------------------------------


def test_the_provenance_table_lists_sixteen_edges_including_the_load_generator():
    edges = provenance_edges()
    assert len(edges) == 16
    assert ("loadgenerator", "frontend") in edges


@pytest.mark.parametrize("source", [RELEASE, PER_SERVICE_DIR], ids=["release-file", "per-service-directory"])
def test_online_boutique_manifests_give_exactly_the_sixteen_provenance_edges(source):
    graph, warnings = load_manifests(source)
    assert edge_set(graph) == provenance_edges()
    assert set(graph.services) == OB_WORKLOADS
    assert all(e.rps is None for e in graph.edges), "declared edges carry no measured rate"


@pytest.mark.parametrize("source", [RELEASE, PER_SERVICE_DIR], ids=["release-file", "per-service-directory"])
def test_the_undeployed_shopping_assistant_is_reported_unresolved_not_an_edge(source):
    graph, warnings = load_manifests(source)
    assert "shoppingassistantservice" not in graph.services
    assert not any("shoppingassistantservice" in (e.caller, e.callee) for e in graph.edges)
    unresolved = [w for w in warnings if "shoppingassistantservice" in w]
    assert len(unresolved) == 1
    assert "SHOPPING_ASSISTANT_SERVICE_ADDR" in unresolved[0] and "frontend" in unresolved[0]
    assert len(warnings) == 1, warnings


def test_several_manifest_paths_are_one_input_so_services_resolve_across_files(tmp_path):
    # frontend.yaml alone cannot resolve its callees; with the other files it can.
    alone, warnings = load_manifests(PER_SERVICE_DIR / "frontend.yaml")
    assert alone.edges == ()
    assert len(warnings) == 8
    together, _ = load_manifests([PER_SERVICE_DIR / "frontend.yaml", PER_SERVICE_DIR / "cartservice.yaml"])
    assert edge_set(together) == {("frontend", "cartservice"), ("cartservice", "redis-cart")}


# ---- env var rules -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, value, hosts",
    [
        ("PRODUCT_CATALOG_SERVICE_ADDR", "productcatalogservice:3550", ["productcatalogservice"]),
        ("REDIS_ADDR", "redis-cart", ["redis-cart"]),
        ("KAFKA_ADDR", "kafka-0:9092,kafka-1:9092", ["kafka-0", "kafka-1"]),
        ("TRACING_URL", "http://jaeger.observability:14268/api/traces", ["jaeger.observability"]),
        ("UPSTREAM", "orders:8080", ["orders"]),
        ("PORT", "8080", []),
        ("ENABLE_PROFILER", "0", []),
        ("GREETING", "hello world", []),
        ("LISTEN_ADDR", ":8080", []),
        ("BIND_ADDR", "0.0.0.0:80", []),
        ("SIDECAR_ADDR", "localhost:15000", []),
        ("ADMIN_ADDR", "127.0.0.1:9901", []),
    ],
)
def test_addresses_are_taken_from_addr_variables_and_host_port_or_url_values(name, value, hosts):
    assert addresses_in_env(name, value) == hosts


def test_a_service_selecting_a_differently_named_deployment_resolves_to_that_workload():
    objs = [
        deployment("api", {"app": "api"}, {"DB_ADDR": "db:5432"}),
        deployment("postgres-primary", {"app": "postgres", "role": "primary"}),
        service("db", {"app": "postgres", "role": "primary"}),
    ]
    graph, warnings = graph_from_objects(objs)
    assert edge_set(graph) == {("api", "postgres")}
    assert set(graph.services) == {"api", "postgres"}
    assert warnings == []


@pytest.mark.parametrize(
    "host",
    [
        "db.data:5432",
        "db.data.svc:5432",
        "db.data.svc.cluster.local:5432",
        "postgres://db.data.svc.cluster.local:5432/orders",
        "postgres-0.db.data.svc.cluster.local:5432",
    ],
)
def test_namespace_qualified_and_fqdn_hosts_resolve_to_the_service_in_that_namespace(host):
    objs = [
        deployment("api", {"app": "api"}, {"DB_ADDR": host}, namespace="web"),
        deployment("postgres", {"app": "postgres"}, namespace="data"),
        service("db", {"app": "postgres"}, namespace="data"),
    ]
    graph, warnings = graph_from_objects(objs)
    assert edge_set(graph) == {("api", "postgres")}
    assert warnings == []


def test_a_short_host_resolves_only_in_the_callers_own_namespace():
    objs = [
        deployment("api", {"app": "api"}, {"DB_ADDR": "db:5432"}, namespace="web"),
        deployment("postgres", {"app": "postgres"}, namespace="data"),
        service("db", {"app": "postgres"}, namespace="data"),
    ]
    graph, warnings = graph_from_objects(objs)
    assert graph.edges == ()
    assert len(warnings) == 2 and "'db'" in warnings[0]
    assert warnings[1].startswith("no call edges among 2 services: 1 address(es) in env vars")  # the summary


def test_a_host_that_matches_a_workload_but_no_service_is_not_an_edge():
    objs = [deployment("api", {"app": "api"}, {"CACHE_ADDR": "cache:6379"}), deployment("cache", {"app": "cache"})]
    graph, warnings = graph_from_objects(objs)
    assert graph.edges == ()
    assert set(graph.services) == {"api", "cache"}, "isolated workloads are still services"
    assert len(warnings) == 2 and "is not a Service" in warnings[0]
    assert "none resolved to another workload" in warnings[1]


def test_a_service_without_a_selected_workload_is_reported_not_an_edge():
    objs = [deployment("api", {"app": "api"}, {"DB_ADDR": "external-db:5432"}), service("external-db", None)]
    graph, warnings = graph_from_objects(objs)
    assert graph.edges == ()
    assert len(warnings) == 1 and "selects no workload" in warnings[0]


def test_local_and_non_address_values_produce_no_edge_and_no_warning():
    objs = [
        deployment(
            "api", {"app": "api"}, {"LISTEN_ADDR": ":8080", "PORT": "8080", "MODE": "fast", "BIND_ADDR": "0.0.0.0:9090"}
        )
    ]
    graph, warnings = graph_from_objects(objs)
    assert graph.edges == () and warnings == []
    assert graph.services == ("api",)


def test_env_from_a_configmap_in_the_input_is_followed(tmp_path):
    graph, warnings = graph_of(
        """
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: endpoints}
        data: {CACHE_ADDR: "cache:6379"}
        ---
        apiVersion: apps/v1
        kind: Deployment
        metadata: {name: api}
        spec:
          selector: {matchLabels: {app: api}}
          template:
            metadata: {labels: {app: api}}
            spec:
              containers:
              - name: main
                envFrom: [{configMapRef: {name: endpoints}}]
                env:
                - name: QUEUE_ADDR
                  valueFrom: {configMapKeyRef: {name: endpoints, key: CACHE_ADDR}}
        ---
        apiVersion: apps/v1
        kind: StatefulSet
        metadata: {name: cache}
        spec:
          selector: {matchLabels: {app: cache}}
          template:
            metadata: {labels: {app: cache}}
            spec: {containers: [{name: redis}]}
        ---
        apiVersion: v1
        kind: Service
        metadata: {name: cache}
        spec: {selector: {app: cache}}
        """,
        tmp_path,
    )
    assert edge_set(graph) == {("api", "cache")}
    assert warnings == []


def test_bare_pods_and_daemonsets_are_workloads_too():
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "worker-1", "labels": {"app": "worker"}},
        "spec": {"containers": [{"name": "w", "env": [{"name": "BROKER_ADDR", "value": "broker:5672"}]}]},
    }
    ds = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "log-agent"},
        "spec": {
            "selector": {"matchLabels": {"app": "log-agent"}},
            "template": {"metadata": {"labels": {"app": "log-agent"}}, "spec": {"containers": [{"name": "a"}]}},
        },
    }
    objs = [pod, ds, deployment("rabbit", {"app": "rabbitmq"}), service("broker", {"app": "rabbitmq"})]
    graph, warnings = graph_from_objects(objs)
    assert edge_set(graph) == {("worker", "rabbitmq")}
    assert set(graph.services) == {"worker", "log-agent", "rabbitmq"}


# ---- depends-on annotation ------------------------------------------------------------------------------


def test_depends_on_annotation_adds_edges_to_named_services_workloads_and_service_objects():
    objs = [
        deployment(
            "web",
            {"app": "web"},
            annotations={"hrl-scheduler.io/depends-on": "catalog, orders-svc"},
            template_annotations={"hrl-scheduler.io/depends-on": "search-v2"},
        ),
        deployment("catalog", {"app": "catalog"}),
        deployment("orders", {"app": "orders"}),
        service("orders-svc", {"app": "orders"}),
        deployment("search-v2", {"app.kubernetes.io/name": "search"}),
    ]
    graph, warnings = graph_from_objects(objs)
    assert edge_set(graph) == {("web", "catalog"), ("web", "orders"), ("web", "search")}
    assert all(e.rps is None for e in graph.edges)
    assert warnings == []


def test_an_unknown_depends_on_name_is_a_warning_not_an_edge():
    objs = [
        deployment("web", {"app": "web"}, annotations={"hrl-scheduler.io/depends-on": "catalog,ghost"}),
        deployment("catalog", {"app": "catalog"}),
    ]
    graph, warnings = graph_from_objects(objs)
    assert edge_set(graph) == {("web", "catalog")}
    assert "ghost" not in graph.services
    assert len(warnings) == 1 and "'ghost'" in warnings[0] and "depends-on" in warnings[0]


# ---- errors ---------------------------------------------------------------------------------------------


def test_malformed_yaml_is_an_error_naming_the_file_and_line(tmp_path):
    f = tmp_path / "broken.yaml"
    f.write_text("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\n  labels: [unclosed\n")
    with pytest.raises(TopologyError) as exc:
        load_manifests(f)
    msg = str(exc.value)
    assert "\n" not in msg
    assert re.match(rf"^{re.escape(str(f))}:\d+: invalid YAML", msg), msg


def test_a_malformed_file_inside_a_directory_is_named(tmp_path):
    (tmp_path / "ok.yaml").write_text("apiVersion: v1\nkind: Service\nmetadata: {name: a}\n")
    (tmp_path / "bad.yaml").write_text("kind: Deployment\nmetadata: {name: x\n")
    with pytest.raises(TopologyError, match=r"bad\.yaml:\d+: invalid YAML"):
        load_manifests(tmp_path)


def test_a_workload_with_a_malformed_env_is_an_error_naming_object_and_field(tmp_path):
    bad = deployment("api", {"app": "api"})
    bad["spec"]["template"]["spec"]["containers"][0]["env"] = {"DB_ADDR": "db:5432"}
    expected = r"app\.yaml: Deployment default/api: spec\.template\.spec\.containers\[0\]\.env: expected a list"
    with pytest.raises(TopologyError, match=expected):
        graph_from_objects([bad], "app.yaml")


def test_a_missing_path_is_an_error():
    with pytest.raises(TopologyError, match="no such file"):
        load_manifests("/nonexistent/app.yaml")
