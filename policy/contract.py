"""The feature contract: for every input of every learned network, where it comes from on a live cluster and in the
simulator, its unit, and what is used when it is missing. The policies are trained and benchmarked in the simulator
and served on clusters; this table is the promise that they see the same thing in both (issue 24), checked by
``tests/unit/test_feature_contract.py`` (every column of every feature specification a network declares, in the code
and in the committed bundles, has an entry, each with a live source that exists) and rendered into
docs/feature-contract.md (:func:`render_markdown`; a test compares).

Networks (:data:`NETWORKS`, their :class:`~policy.features.FeatureSpec` inputs by bundle key):

- ``placement`` (``placement-mlp-v1``, the extender's low level; ``candidate`` rows, :mod:`policy.lowlevel.features`);
- ``drpc-student`` (``drpc-student-v1``, the DRPC students; ``local`` rows, :mod:`policy.highlevel.drpc`);
- ``intent`` (``intent-actor-v1``, the learned high level; ``service`` and ``global`` rows,
  :mod:`policy.highlevel.learned_intent`);
- ``forecast`` (``gru-forecast-v1``, the workload predictor; ``rates``, :mod:`policy.highlevel.forecast`);
- ``encoder`` (``mpnn-v1``, the graph encoder; ``node`` and ``edge`` rows, :mod:`policy.encoder.graph`).

Sources (:data:`SOURCES`): ``objects`` (the API server's Nodes, Pods, Deployments), ``resource_usage`` (measured CPU
use, :mod:`policy.live`), ``service_signals`` (per-service rate, latency, refused share, :mod:`policy.live`),
``call_graph`` (the topology sources), ``intent`` (the high level's intent through the embedding cache),
``encoder`` (the graph encoder's embedding of the call graph), ``planner_state`` (the state file), ``configuration``.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from policy.encoder import EDGE_SPEC, NODE_SPEC
from policy.features import FeatureSpec
from policy.highlevel.drpc import DRPC_SPEC, HRL_SPEC
from policy.highlevel.forecast import FORECAST_SPEC
from policy.highlevel.learned_intent import INTENT_GLOBAL_SPEC, INTENT_SERVICE_SPEC, INTENT_SERVICE_SPEC_FLAT
from policy.lowlevel.features import PLACEMENT_FEATURES, PLACEMENT_FEATURES_FLAT

__all__ = [
    "Source",
    "SOURCES",
    "NETWORKS",
    "FeatureInput",
    "FEATURE_CONTRACT",
    "ARCHITECTURES",
    "entry_for",
    "contract_problems",
    "render_markdown",
]


@dataclass(frozen=True)
class Source:
    """Where one kind of input comes from: ``live`` (on a cluster) and ``simulator`` (in training and the bench), each
    a sentence naming the code; ``live_reader`` / ``sim_reader``: ``module:attribute`` of the code that produces it
    (checked to exist by the tests)."""

    key: str
    live: str
    simulator: str
    live_reader: str
    sim_reader: str


SOURCES: dict[str, Source] = {
    s.key: s
    for s in (
        Source(
            "objects",
            "the API server: list + watch of Nodes and Pods (extender), one LIST per kind or a watch cache of Nodes, "
            "Pods, PDBs, Deployments (descheduler)",
            "the simulated cluster's objects",
            "policy.observe:snapshot_from_objects",
            "policy.sim.cluster:SimCluster",
        ),
        Source(
            "resource_usage",
            "metricsSources.resourceUsage: the Metrics API (metrics-server) or Prometheus' cAdvisor series, per pod, "
            "sidecars included; a pod without a whole window of measurement is not measured yet",
            "the engine's per-pod CPU of the last simulated minute, mesh proxy included; a pod bound since has none",
            "policy.live:UsageInput",
            "policy.sim.engine:Simulation",
        ),
        Source(
            "service_signals",
            "metricsSources.serviceSignals: Prometheus mesh or OpenTelemetry span metrics by serving service "
            "(arrivals/s, mean and p95 latency, refused share), one query per cycle",
            "the last simulated minute's per-service arrivals, visit latency and refused share",
            "policy.topology.prometheus:PrometheusSource",
            "policy.sim.drpc:signals_from_sim",
        ),
        Source(
            "call_graph",
            "topology.sources: Prometheus mesh or OpenTelemetry call rates and latencies (prometheus+FLAVOR://), "
            "manifests, AppGroups, span tables, and the pods' hrl-scheduler.io/depends-on annotations",
            "the application's call graph with the last simulated minute's call rates",
            "policy.topology.live:TopologyRefresher",
            "policy.sim.engine:Simulation",
        ),
        Source(
            "intent",
            "the descheduler's last plan, through the topology embedding cache's intent record (policy.cache)",
            "the same record, in process (policy.sim.hrl_stacks)",
            "policy.intent:Intent",
            "policy.sim.hrl_stacks:build_hrl_stack",
        ),
        Source(
            "encoder",
            "the graph encoder bundle over the live call graph (and the objects and use of its services)",
            "the same encoder over the simulated graph",
            "policy.encoder:GraphEncoder",
            "policy.encoder:GraphEncoder",
        ),
        Source(
            "planner_state",
            "the descheduler's stateFile (HrlState: rate history, last intent, capacity targets, scale times)",
            "the same state, in memory across simulated minutes",
            "policy.highlevel:HrlState",
            "policy.highlevel:HrlState",
        ),
        Source(
            "configuration",
            "DeschedulerConfiguration (planner.intentPolicy.sloP95Ms, cpuPrice; scaling bounds)",
            "the application's SLO and the stack's configuration",
            "descheduler.config:DeschedulerConfiguration",
            "policy.sim.hrl_stacks:sim_descheduler_config",
        ),
    )
}


#: Every learned network's inputs, by the key its bundle's ``feature_spec`` uses; several layouts of one input
#: (with or without the encoder's embeddings) are all listed.
NETWORKS: dict[str, dict[str, tuple[FeatureSpec, ...]]] = {
    "placement": {"candidate": (PLACEMENT_FEATURES, PLACEMENT_FEATURES_FLAT)},
    "drpc-student": {"local": (DRPC_SPEC, HRL_SPEC)},
    "intent": {"service": (INTENT_SERVICE_SPEC, INTENT_SERVICE_SPEC_FLAT), "global": (INTENT_GLOBAL_SPEC,)},
    "forecast": {"rates": (FORECAST_SPEC,)},
    "encoder": {"node": (NODE_SPEC,), "edge": (EDGE_SPEC,)},
}

#: The bundle ``architecture.type`` of each network.
ARCHITECTURES: dict[str, str] = {
    "placement-mlp-v1": "placement",
    "drpc-student-v1": "drpc-student",
    "intent-actor-v1": "intent",
    "gru-forecast-v1": "forecast",
    "mpnn-v1": "encoder",
}


@dataclass(frozen=True)
class FeatureInput:
    """One input column: ``network`` / ``input`` (the bundle key) / ``feature`` (a name, or an ``fnmatch`` pattern
    such as ``svc_emb_*`` for a block), ``unit`` (from the specification), ``sources`` (keys of :data:`SOURCES`,
    at least one), ``when_missing`` (what the network reads when a source is off, stale or failing)."""

    network: str
    input: str
    feature: str
    unit: str
    sources: tuple[str, ...]
    when_missing: str

    def matches(self, network: str, input: str, feature: str) -> bool:
        return self.network == network and self.input == input and fnmatch.fnmatchcase(feature, self.feature)


_OBJECTS = "always there (no snapshot: the extender answers neutral scores, the descheduler does not run a cycle)"
_USED = (
    "requests stand in for use: the node's measured use is unknown (usage_known 0) and the value equals the "
    "requested one; pods not measured yet count their estimated use (policy.index.estimated_cpu_m: the limit when "
    "above the request, else 85 % of the request, 250m without either: Koordinator's LoadAware estimator)"
)
_RATE = (
    "arrivals from service_signals, else the call graph's incoming rates (an entry service: its outgoing calls / "
    "calls per request), else the CPU use as a proxy; an edge without a rate counts 1 call/s"
)
_SIGNAL = "0, with metrics_known 0 (the students were trained with a share of episodes without service metrics)"
_GRAPH = "an edge without a measured rate counts 1 call/s (rates_known 0)"
_ENC = "the encoder's column at 0 with its *_known flag 0 (a declared-only graph)"

#: The DRPC students' local columns (feature pattern, sources, when missing), shared with the intent's service rows.
_LOCAL: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("replicas_frac", ("objects", "configuration"), _OBJECTS),
    ("at_min", ("objects", "configuration"), _OBJECTS),
    (
        "measured_frac",
        ("objects", "resource_usage"),
        "0 (no pod measured); the replica count stays (no target without a measurement)",
    ),
    ("starting_frac", ("objects", "resource_usage"), "every pod counts as starting"),
    (
        "cpu_util_*",
        ("resource_usage", "objects"),
        "0, and no replica target (the mapping keeps the current replicas without a measured pod)",
    ),
    ("capacity_over_request", ("objects",), _OBJECTS),
    ("load_trend_*", ("service_signals", "call_graph", "planner_state"), _RATE),
    ("forecast_ratio", ("service_signals", "call_graph", "planner_state"), _RATE),
    ("forecast_util", ("resource_usage", "service_signals", "planner_state"), _RATE),
    ("latency_slo", ("service_signals", "configuration"), _SIGNAL),
    ("refused_frac", ("service_signals",), _SIGNAL),
    ("metrics_known", ("service_signals",), "0"),
    ("minutes_since_scale", ("planner_state",), "1 (never scaled by this controller)"),
    ("emb_*", ("encoder", "call_graph"), "0 (a service the graph does not have)"),
)

#: The graph encoder's per-service columns (feature pattern, sources, when missing); the flat placement variant
#: reads the same columns as ``svc_<name>``.
_NODE: tuple[tuple[str, tuple[str, ...], str], ...] = (
    *(
        (f, ("objects",), _OBJECTS)
        for f in ("log_replicas", "log_cpu_request_m", "log_memory_request_mib", "log_cpu_limit_m", "has_cpu_limit")
    ),
    ("log_cpu_usage_m", ("resource_usage",), _ENC),
    ("cpu_usage_per_request", ("resource_usage", "objects"), _ENC),
    (
        "log_memory_usage_mib",
        ("resource_usage",),
        "0: the memory working set is read but not applied (the simulator measures no memory use, so no network "
        "has seen it; policy.live.UsageApplier(memory=False))",
    ),
    ("usage_known", ("resource_usage",), "0"),
    *(
        (f, ("call_graph",), _ENC)
        for f in (
            "log_request_rps",
            "rate_known",
            "log_latency_p*_ms",
            "latency_known",
            "error_rate",
            "error_known",
            "log_in_degree",
            "log_out_degree",
            "is_entry",
            "has_self_call",
        )
    ),
    ("log_slo_p95_ms", ("configuration",), _ENC),
    ("latency_p95_per_slo", ("configuration", "call_graph"), _ENC),
    ("slo_known", ("configuration",), "0"),
)

# (network, input, feature pattern, sources, when missing); the units come from the specifications
_TABLE: tuple[tuple[str, str, str, tuple[str, ...], str], ...] = (
    # ---- placement (policy.lowlevel.features.CONTEXT_FEATURES + the service block) ----
    *(
        ("placement", "candidate", f, ("objects",), _OBJECTS)
        for f in (
            "pod_cpu_request_frac",
            "pod_memory_request_frac",
            "cpu_requested_frac",
            "memory_requested_frac",
            "pods_frac",
            "same_service_node_share",
            "same_service_zone_share",
            "log_same_service_node_pods",
        )
    ),
    ("placement", "candidate", "cpu_used_frac", ("resource_usage", "objects"), _USED),
    ("placement", "candidate", "usage_known", ("resource_usage",), "0 (no node reports measured use)"),
    ("placement", "candidate", "cpu_headroom_cores", ("objects", "resource_usage"), _USED),
    *(
        ("placement", "candidate", f, ("objects", "call_graph"), _GRAPH)
        for f in ("caller_node_share", "callee_node_share", "caller_zone_share", "callee_zone_share")
    ),
    ("placement", "candidate", "log_caller_rps", ("call_graph",), _GRAPH),
    ("placement", "candidate", "log_callee_rps", ("call_graph",), _GRAPH),
    ("placement", "candidate", "rates_known", ("call_graph",), "0 (no edge of the service has a measured rate)"),
    ("placement", "candidate", "intent_*", ("intent",), "the INTENT_SPEC default (1.0): no intent, or a stale one"),
    (
        "placement",
        "candidate",
        "svc_similarity_node",
        ("encoder", "call_graph", "objects"),
        "0 on a node without other pods with a service row (a service without a row is scored neutral)",
    ),
    (
        "placement",
        "candidate",
        "node_log_speed",
        ("objects", "resource_usage", "call_graph"),
        "0: the node declares no speed (label hrl-scheduler.io/cpu-speed) and its measured pods have no measured peers "
        "(or no node reports measured use)",
    ),
    (
        "placement",
        "candidate",
        "svc_emb_*",
        ("encoder", "call_graph"),
        "none: a service without an embedding row is scored neutral (the extender fails open)",
    ),
    *(("placement", "candidate", f"svc_{f}", src, miss) for f, src, miss in _NODE),
    # ---- DRPC students (policy.highlevel.drpc.DRPC_SPEC / HRL_SPEC), and the same columns first in the learned
    # intent's service rows (policy.highlevel.learned_intent.INTENT_SERVICE_SPEC) ----
    *(
        (net, inp, f, src, miss)
        for net, inp in (("drpc-student", "local"), ("intent", "service"))
        for f, src, miss in _LOCAL
    ),
    ("intent", "service", "edge_cross_node_frac", ("objects", "call_graph"), _GRAPH),
    ("intent", "service", "log_call_rps", ("call_graph",), _GRAPH),
    ("intent", "service", "log_cpu_request_cores", ("objects",), _OBJECTS),
    ("intent", "service", "prev_*", ("planner_state",), "the defaults before the first period (0 and 1)"),
    ("intent", "global", "cpu_requested_frac", ("objects",), _OBJECTS),
    ("intent", "global", "cpu_used_frac", ("resource_usage", "objects"), _USED),
    ("intent", "global", "node_util_*", ("resource_usage", "objects"), _USED),
    ("intent", "global", "log_nodes", ("objects",), _OBJECTS),
    ("intent", "global", "deployments_at_max_frac", ("objects", "configuration"), _OBJECTS),
    ("intent", "global", "load_trend_5m", ("service_signals", "call_graph", "planner_state"), _RATE),
    ("intent", "global", "forecast_ratio", ("service_signals", "call_graph", "planner_state"), _RATE),
    ("intent", "global", "app_latency_slo", ("service_signals", "configuration"), _SIGNAL),
    ("intent", "global", "refused_frac", ("service_signals",), _SIGNAL),
    ("intent", "global", "metrics_known", ("service_signals",), "0"),
    ("intent", "global", "cross_node_call_frac", ("objects", "call_graph"), _GRAPH),
    ("intent", "global", "cpu_price", ("configuration",), "the default 0.5"),
    ("intent", "global", "prev_*", ("planner_state",), "the default intent before the first period"),
    # ---- the workload predictor ----
    ("forecast", "rates", "rate_over_window_mean", ("service_signals", "call_graph", "planner_state"), _RATE),
    # ---- the graph encoder (policy.encoder.graph) ----
    *(("encoder", "node", f, src, miss) for f, src, miss in _NODE),
    ("encoder", "edge", "same_node_share", ("objects", "call_graph"), "0 (placement_known 0)"),
    ("encoder", "edge", "placement_known", ("objects",), "0"),
    ("encoder", "edge", "*", ("call_graph",), _ENC),
)


def _units(network: str, input: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for spec in NETWORKS[network][input]:
        out.update(zip(spec.names, spec.units))
    return out


def _build() -> tuple[FeatureInput, ...]:
    out = []
    for network, input, feature, sources, missing in _TABLE:
        units = _units(network, input)
        hit = sorted(n for n in units if fnmatch.fnmatchcase(n, feature))
        unit = units[hit[0]] if len(hit) == 1 else "; ".join(sorted({units[n] for n in hit})) or "?"
        out.append(FeatureInput(network, input, feature, unit, sources, missing))
    return tuple(out)


#: The contract, in table order (the first entry matching a column is its entry).
FEATURE_CONTRACT: tuple[FeatureInput, ...] = _build()


def entry_for(network: str, input: str, feature: str) -> FeatureInput | None:
    """The contract's entry of one column (the first that matches), ``None`` when there is none."""
    for e in FEATURE_CONTRACT:
        if e.matches(network, input, feature):
            return e
    return None


def contract_problems(
    specs: Iterable[tuple[str, str, FeatureSpec]] | None = None,
) -> list[str]:
    """Every column of ``specs`` (``(network, input, spec)``; default: every specification of :data:`NETWORKS`)
    without an entry, or whose entry names no source or an unknown one: one line each (empty: the contract holds)."""
    if specs is None:
        specs = [(n, i, s) for n, ins in NETWORKS.items() for i, ss in ins.items() for s in ss]
    bad = []
    for network, input, spec in specs:
        for name in spec.names:
            e = entry_for(network, input, name)
            if e is None:
                bad.append(f"{network}.{input}.{name}: no entry in policy.contract (no live source)")
            elif not e.sources:
                bad.append(f"{network}.{input}.{name}: the entry names no source")
            else:
                unknown = [s for s in e.sources if s not in SOURCES]
                if unknown:
                    bad.append(f"{network}.{input}.{name}: unknown source(s) {', '.join(unknown)}")
    return bad


def render_markdown(
    contract: Iterable[FeatureInput] = FEATURE_CONTRACT, sources: Mapping[str, Source] = SOURCES
) -> str:
    """docs/feature-contract.md: the sources, then one table per network (feature, unit, sources, when missing)."""
    lines = [
        "# The feature contract",
        "",
        "Generated from `policy/contract.py` (`FEATURE_CONTRACT`) by `hrl-policy features --markdown`; a test "
        "compares. For every input of every learned network: where it comes from on a live cluster and in the "
        "simulator, its unit, and what the network reads when the source is off, stale or failing. "
        "A column without an entry fails `tests/unit/test_feature_contract.py`.",
        "",
        "## Sources",
        "",
        "| source | live | simulator |",
        "|---|---|---|",
    ]
    for s in sources.values():
        lines.append(f"| `{s.key}` | {s.live} (`{s.live_reader}`) | {s.simulator} (`{s.sim_reader}`) |")
    by_net: dict[str, list[FeatureInput]] = {}
    for e in contract:
        by_net.setdefault(e.network, []).append(e)
    for net, entries in by_net.items():
        arch = next((a for a, n in ARCHITECTURES.items() if n == net), "")
        lines += [
            "",
            f"## `{net}` (`{arch}`)",
            "",
            "| input | feature | unit | sources | when missing |",
            "|---|---|---|---|---|",
        ]
        for e in entries:
            src = ", ".join(f"`{s}`" for s in e.sources)
            unit = e.unit.replace("|", "\\|")
            lines.append(f"| `{e.input}` | `{e.feature}` | {unit} | {src} | {e.when_missing} |")
    return "\n".join(lines) + "\n"
