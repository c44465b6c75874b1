"""``ExtenderConfiguration``: the extender's versioned YAML configuration (DESIGN.md section 6).

Every field is optional; an empty file (or no ``--config``) gives the defaults below::

    apiVersion: hrl-scheduler.io/v1alpha1
    kind: ExtenderConfiguration
    listen:
      host: 127.0.0.1          # address to bind; 0.0.0.0 to serve other hosts (e.g. in a Pod)
      port: 8888               # TCP port, 0..65535 (0 = any free port)
      tls: null                # {certFile, keyFile}: serve HTTPS (kube-scheduler: enableHTTPS + tlsConfig.caData)
      healthPort: null         # also serve /livez, /healthz, /readyz on host:healthPort, from a thread of its own
                               #   (the probes then pass while the scoring loop is saturated); null = off
    urlPrefix: /scheduler      # the extender's urlPrefix in KubeSchedulerConfiguration.extenders
    policy:
      name: topology-heuristic # the low-level placement policy: topology-heuristic | learned
      targetUtilization: 0.7   # topology-heuristic: CPU utilisation above which a node counts as hot, 0 < x < 1
      bundle: null             # learned only (an error with topology-heuristic); null = the shipped
                               #   policy/bundles/hrl-ensemble/low (the training seeds' placements, averaged)
      embeddingRefreshSeconds: 30  # learned: recompute the service rows (embeddings) in the background this often
    topology:
      sources: []              # call-graph sources: manifest files/dirs, AppGroups, span CSVs, Alibaba CSVs, and
                               #   live URIs prometheus+istio|linkerd|otel://HOST:PORT?window=5m&namespace=NS
      refreshSeconds: 30       #   live sources are re-read in the background this often
      smoothingHalfLifeSeconds: 0  # EWMA half-life of the live rates across refreshes; 0 = off
      staleAfterSeconds: 0     #   no successful refresh for this long = stale; 0 = 3 x refreshSeconds
    snapshotFile: null         # optional `kubectl get nodes,pods,pdb -A -o json` output to load at start
    kubernetes:                # the live cluster: list + watch Nodes and Pods (extender/kube.py)
      enabled: false           #   true: feed the snapshot from the API server (exclusive with snapshotFile)
      kubeconfig: null         #   path; null = in-cluster service account, else $KUBECONFIG / ~/.kube/config
      resyncSeconds: 300       #   full re-list period
      debounceSeconds: 0.2     #   wait after a change before rebuilding the snapshot (coalesces bursts)
    maxSnapshotAgeSeconds: 0   # older snapshots → neutral scores and /readyz 503; 0 = never stale
    cache: null                # the topology embedding cache (gRPC, `hrl-policy cache serve`), e.g.
                               #   {address: 127.0.0.1:50051, refreshSeconds: 10, timeoutSeconds: 1,
                               #    maxAgeSeconds: 900, match: graph}; null = no cache (no embeddings needed)
    limits:                    # no request can stall the others (docs/operations.md, "Extender limits")
      maxRequestBytes: 16777216  # larger bodies get 413 (counted in hrl_extender_requests_too_large_total)
      offloadRequestBytes: 262144  # larger bodies are decoded and scored in the worker pool, off the event loop
      workers: 2               #   threads of that pool; a large body finding them all busy is shed (neutral)
      requestDeadlineSeconds: 0.2  # a request not answered this long after its bytes reached the socket gets a
                               #   neutral reply; keep it below kube-scheduler's httpTimeout (300ms as shipped)
      maxQueuedRequests: 128   # complete requests not answered yet beyond this are shed (neutral reply)
      maxLoopBusySeconds: 0.05 # requests read after the loop has scored this long since it last read its sockets
                               #   are shed (neutral reply): a flood cannot make the others wait in their sockets
      headerTimeoutSeconds: 2  # a request's headers must arrive within this (408 and the connection closed)
      bodyTimeoutSeconds: 2    # its body within this of its headers (408 and closed); a slow body never delays
                               #   scoring: requests are scored once complete
      idleTimeoutSeconds: 120  # a keep-alive connection without a request is closed after this (above
                               #   kube-scheduler's 90 s, so that the scheduler closes first)
      maxConnections: 1024     # open connections at most: a new one beyond displaces one without a request in
                               #   progress (of the address holding the most; kube-scheduler's goes last)
      maxConnectionsPerClient: 64  # open connections at most from one client address; 0 = no bound
      maxLoopStallSeconds: 10  # listen.healthPort: /livez and /readyz there answer 503 when the scoring loop has
                               #   not turned for this long (stuck: the probes on listen.port would time out)
    precompute:                # per-service node-score vectors computed off the request path
      enabled: true            #   false: every request scores its candidates directly (same scores, slower)
      maxKeys: 256             #   (service, requests) vectors kept; memory maxKeys x nodes x 8 bytes
    metricsSources:            # live inputs (policy.live): what the placement policy saw in training
      resourceUsage:           #   measured pod CPU use; needs kubernetes.enabled (it reaches the index by the watch)
        uri: null              #   metrics-api | prometheus+cadvisor://HOST:PORT?window=1m; null = off (requests)
        refreshSeconds: 30     #   read in the background this often (never on a request)
        maxAgeSeconds: 120     #   an older measurement is stale: not used (scores on requests, /readyz warns)
    scoreTable:                # plugin mode: publish the node-score table kube-scheduler's HRLScore plugin reads
      publish: false           #   true: compute it at every snapshot change, publish it to the embedding cache
      address: null            #   host:port of that cache; null = cache.address
      timeoutSeconds: 1        #   deadline of each publish
      maxKeys: 256             #   (service, requests) rows: the pending pods', then the other pods' of each service
      minIntervalSeconds: 0.1  #   at most one new table per this many seconds (heartbeats in between)
    mode: active               # active: answer our scores; shadow: answer neutral scores (kube-scheduler alone
                               #   decides) and record what we would have chosen (extender/decisions.py)
    decisions:                 # the decision record (in shadow mode: the shadow log), docs/shadow-mode.md
      enabled: null            #   null = on in shadow mode, off in active mode
      log: null                #   JSON-lines file of the decisions; null = metrics (and Events) only
      maxBytes: 67108864       #   the log rotates at this size ...
      backups: 3               #   ... keeping this many old files
      explain: true            #   each record carries the explanation of our best node and of the bound one
      events: false            #   opt-in: an Event (events.k8s.io/v1) on each pod with the top three
                               #   contributions (needs `create` on events.events.k8s.io; kubernetes.enabled)
      maxPending: 10000        #   decisions waiting for their pod's binding (older ones dropped, counted)
      pendingTimeoutSeconds: 300  # a pod not bound this long after it was scored is recorded as unbound
      queueSize: 1000          #   resolved decisions waiting to be explained and written
    logLevel: INFO             # DEBUG, INFO, WARNING or ERROR

Relative paths are relative to the working directory of the process. The matching kube-scheduler side
(``KubeSchedulerConfiguration.extenders[]``) is documented in DESIGN.md section 5: ``urlPrefix:
http://HOST:PORT/scheduler``, ``prioritizeVerb: prioritize``, ``filterVerb: filter`` (optional),
``nodeCacheCapable: true``, ``ignorable: true``, ``weight``, ``httpTimeout``.

Every number is finite and every ``*Seconds`` field at most :data:`policy.config.MAX_SECONDS` (365 days).
Load with :func:`load_extender_config`; every problem is reported at once with its dotted path in a
:class:`policy.config.ConfigError`.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from policy.bundle import SERVED_PLACEMENT_BUNDLE
from policy.config import (
    HOST_PORT,
    URL_PATH,
    ConfigModel,
    ExistingBundle,
    ExistingFile,
    ExistingPath,
    load_config,
    matches,
    pattern_schema,
)
from policy.live import ExtenderMetricsSourcesConfig
from policy.lowlevel import (
    LearnedPlacement,
    PlacementEnsemble,
    PlacementPolicy,
    RowsRefresher,
    TopologyHeuristic,
    load_placement,
)
from policy.state import ServiceGraph
from policy.topology.live import TopologyRefresher
from policy.topology.sources import is_live_source, load_graph

from .decisions import DecisionRecorder, DecisionSettings
from .http import DEFAULT_MAX_CONNECTIONS_PER_CLIENT, HttpLimits

__all__ = [
    "KIND",
    "TLSConfig",
    "ListenConfig",
    "PolicyConfig",
    "TopologyConfig",
    "KubernetesConfig",
    "CacheConfig",
    "LimitsConfig",
    "PrecomputeConfig",
    "DecisionsConfig",
    "ExtenderConfiguration",
    "load_extender_config",
    "build_policy",
    "start_policy_feeds",
    "tls_context",
    "http_limits",
    "load_topology",
    "topology_refresher",
    "decision_recorder",
]

KIND = "ExtenderConfiguration"


class TLSConfig(ConfigModel):
    """HTTPS serving: the extender's certificate and private key (PEM files), read once at start.

    The matching kube-scheduler side is ``enableHTTPS: true`` with ``tlsConfig.caData`` (or ``caFile``)
    holding the CA that signed ``certFile``, and ``urlPrefix: https://...`` naming a host the certificate
    is valid for (``tlsConfig.serverName`` otherwise). Never set ``tlsConfig.insecure``. Client
    certificates are not requested. A rotated certificate takes effect at the next restart.
    """

    cert_file: ExistingFile = Field(
        ..., min_length=1, description="PEM certificate chain served to clients (leaf first). Required."
    )
    key_file: ExistingFile = Field(
        ..., min_length=1, description="PEM private key of certFile (unencrypted). Required."
    )


class ListenConfig(ConfigModel):
    """Where the HTTP server listens."""

    host: str = Field(
        "127.0.0.1", min_length=1, description="Address to bind (IPv4/IPv6 literal or host name). Default 127.0.0.1."
    )
    port: int = Field(8888, ge=0, le=65535, description="TCP port, 0..65535; 0 = any free port. Default 8888.")
    tls: TLSConfig | None = Field(
        None,
        description="Serve HTTPS with this certificate and key ({certFile, keyFile}); null = plain HTTP. Default null.",
    )
    health_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="Also serve the probes (GET /livez, /healthz, /readyz; nothing else) on host:healthPort, "
        "with the same TLS, from a thread and event loop of their own (extender.server.HealthListener): they "
        "answer within milliseconds while the loop serving `port` is saturated, and answer 503 when that loop has "
        "not turned for limits.maxLoopStallSeconds. 0..65535, 0 = any free port, not `port`; null = the probes "
        "only on `port` (they are there in any case). Default null (the chart sets it).",
    )

    @field_validator("health_port")
    @classmethod
    def _health_port_differs(cls, v: int | None, info: ValidationInfo) -> int | None:
        port = info.data.get("port")
        if v is not None and v != 0 and v == port:
            raise ValueError(f"must differ from listen.port ({port}): the probes' listener binds a port of its own")
        return v


class PolicyConfig(ConfigModel):
    """The low-level placement policy that scores nodes."""

    name: Literal["topology-heuristic", "learned"] = Field(
        "topology-heuristic",
        description="Policy name. topology-heuristic: prefer nodes hosting the pod's callers and callees "
        "(weighted by call rate), penalise nodes above targetUtilization "
        "(policy.lowlevel.TopologyHeuristic). learned: the trained placement policy of `bundle` "
        "(policy.lowlevel.LearnedPlacement; numpy).",
    )
    target_utilization: float = Field(
        0.7,
        gt=0.0,
        lt=1.0,
        description="topology-heuristic: CPU utilisation (requested or measured, with the pod added) above which "
        "a node is penalised, as a fraction 0 < x < 1. Default 0.7.",
    )
    bundle: ExistingBundle | None = Field(
        None,
        min_length=1,
        description="learned: the policy bundle directory (level low), or an ensemble directory (ensemble.json); "
        "null = the committed policy/bundles/hrl-ensemble/low (hrl-scheduler's placements of training seeds 0, 1 and "
        "2, averaged). Loaded at start: a bad bundle is a configuration error.",
    )
    embedding_refresh_seconds: float = Field(
        30.0,
        gt=0.0,
        description="learned: how often the service rows (graph-encoder embeddings) are recomputed from the "
        "snapshot in the background when no embedding cache provides them. Default 30.",
    )

    @model_validator(mode="after")
    def _bundle_needs_learned(self) -> PolicyConfig:
        if self.bundle is not None and self.name != "learned":
            raise ValueError(f"bundle ({self.bundle!r}) is only read by name: learned (got name: {self.name})")
        return self


class TopologyConfig(ConfigModel):
    """Where the call graph comes from."""

    sources: tuple[ExistingPath, ...] = Field(
        (),
        description="Paths read once by policy.topology.sources.load_graph (Kubernetes manifests, AppGroups, "
        "span tables, Alibaba MSCallGraph CSVs; kind detected from content) and live URIs "
        "(prometheus+istio|linkerd|otel[+https]://HOST:PORT[/PREFIX]?window=5m&namespace=NS, "
        "policy.topology.prometheus) re-read every refreshSeconds in the background; a live "
        "source that fails keeps its last good graph, marked stale (metric "
        "hrl_topology_graph_stale, /readyz message; scoring goes on). Empty: the graph comes from "
        "the snapshot source, else is empty (neutral scores).",
    )
    refresh_seconds: float = Field(
        30.0, gt=0.0, description="Seconds between refreshes of the live sources. Default 30."
    )
    smoothing_half_life_seconds: float = Field(
        0.0,
        ge=0.0,
        description="Half-life (s) of the exponential moving average of live call rates and "
        "latencies across refreshes (policy.topology.live.RateSmoother); 0 = off. Default 0.",
    )
    stale_after_seconds: float = Field(
        0.0,
        ge=0.0,
        description="A call graph whose live sources have not all been refreshed successfully for "
        "this long is stale; 0 = 3 x refreshSeconds. Default 0.",
    )


class KubernetesConfig(ConfigModel):
    """The live snapshot source (:class:`extender.kube.KubeSnapshotSource`): list + watch Nodes and Pods.
    Needs get/list/watch on ``nodes`` and ``pods`` only."""

    enabled: bool = Field(
        False,
        description="Feed the snapshot from the API server. Exclusive with snapshotFile / --snapshot. Default false.",
    )
    kubeconfig: ExistingFile | None = Field(
        None,
        description="kubeconfig path; null = the in-cluster service account when running in a Pod, "
        "else $KUBECONFIG / ~/.kube/config. Default null.",
    )
    resync_seconds: float = Field(300.0, gt=0.0, description="Full re-list period, seconds > 0. Default 300.")
    debounce_seconds: float = Field(
        0.2,
        ge=0.0,
        le=10.0,
        description="Wait after a change before rebuilding the snapshot, 0..10 s (coalesces bursts of "
        "events). Default 0.2.",
    )


class CacheConfig(ConfigModel):
    """The topology embedding cache the extender reads (``hrl-policy cache serve``, usually a sidecar).

    A background thread (:class:`policy.cache.CacheRefresher`) copies the embeddings and the intent
    every ``refreshSeconds``; requests read the copy and never wait on the network. With a cache configured,
    a pod whose service has no embedding in the copy, or whose copy is older than ``maxAgeSeconds``, gets
    neutral scores (outcomes ``neutral_embeddings_missing`` / ``neutral_embeddings_stale``); an intent older
    than ``maxAgeSeconds`` is dropped (defaults apply). A dead cache leaves the last copy in use until it
    ages out.
    """

    address: str = Field(
        ...,
        min_length=3,
        description="host:port of the cache's gRPC endpoint. Required.",
        json_schema_extra=pattern_schema(HOST_PORT),
    )
    refresh_seconds: float = Field(10.0, gt=0.0, description="Seconds between refreshes of the copy. Default 10.")
    timeout_seconds: float = Field(1.0, gt=0.0, le=60.0, description="Deadline of each gRPC call, seconds. Default 1.")
    max_age_seconds: float = Field(
        900.0,
        ge=0.0,
        description="Embeddings or intent computed longer ago than this are stale; 0 = never. Default 900.",
    )
    match: Literal["graph", "latest"] = Field(
        "graph",
        description="graph: read the entry of the fingerprint of the extender's own call graph (the "
        "most recent entry while it has none); latest: always the most recently stored "
        "entry. Default graph.",
    )

    @field_validator("address")
    @classmethod
    def _host_port(cls, v: str) -> str:
        if not matches(HOST_PORT, v):
            raise ValueError("must be host:port, e.g. 127.0.0.1:50051")
        return v


class LimitsConfig(ConfigModel):
    """What keeps one request, or a flood of them, from stalling the others (:mod:`extender.server`). Every
    request the extender answers without scoring gets the neutral reply (prioritize: every candidate 0; filter:
    every candidate passes), counted as outcome ``neutral_overload`` / ``neutral_deadline`` (prioritize) or
    ``overload`` / ``deadline`` (filter)."""

    max_request_bytes: int = Field(
        16 * 1024 * 1024,
        ge=1024,
        le=1024**3,
        description="Largest request body accepted, bytes (1 KiB..1 GiB); larger ones are answered 413 with a "
        "one-line reason before being read, and counted in hrl_extender_requests_too_large_total. "
        "Default 16 MiB (a nodeCacheCapable: false request with 500 large Node objects).",
    )
    offload_request_bytes: int = Field(
        256 * 1024,
        ge=0,
        description="Bodies larger than this are decoded and scored in the worker pool (limits.workers), "
        "not on the event loop; 0 = every body. Default 256 KiB (a nodeCacheCapable request with 5,000 "
        "names is about 100 KiB).",
    )
    workers: int = Field(2, ge=1, le=64, description="Threads decoding and scoring large bodies, 1..64. Default 2.")
    request_deadline_seconds: float = Field(
        0.2,
        gt=0.0,
        le=60.0,
        description="A request not answered this long after it arrived (its headers were read) gets the "
        "neutral reply; keep it below kube-scheduler's httpTimeout so that the scheduler gets an "
        "answer rather than a timeout. Default 0.2 (httpTimeout 300ms as shipped).",
    )
    max_queued_requests: int = Field(
        128,
        ge=1,
        description="Complete requests not answered yet (waiting for a worker, or behind another request of "
        "their connection) beyond this are shed: answered neutral at once, without scoring. Requests are scored "
        "as they are read, so under load the wait is in the sockets, which requestDeadlineSeconds counts. "
        "Default 128.",
    )
    max_loop_busy_seconds: float = Field(
        0.05,
        gt=0.0,
        le=60.0,
        description="The event loop scores the requests it reads for at most this many seconds before it reads "
        "its sockets again; requests read past it are shed (neutral_overload): under a flood no request waits in "
        "its socket for longer than this plus the cost of shedding the others (tens of microseconds each). "
        "At most requestDeadlineSeconds. Default 0.05.",
    )
    header_timeout_seconds: float = Field(
        2.0,
        gt=0.0,
        le=300.0,
        description="A request's line and headers must be complete within this many seconds (of the connection's "
        "accept for its first request, of its first byte after that); else it is answered 408 and the connection "
        "closed. kube-scheduler sends a request whole. Default 2.",
    )
    body_timeout_seconds: float = Field(
        2.0,
        gt=0.0,
        le=300.0,
        description="A request's body must be complete within this many seconds of its headers, else it is "
        "answered 408 and the connection closed; a client that reads no reply for this long is cut off. A request "
        "being read never delays the scoring of others. Default 2.",
    )
    idle_timeout_seconds: float = Field(
        120.0,
        gt=0.0,
        le=3600.0,
        description="A keep-alive connection without a request for this many seconds is closed. Default 120 "
        "(above the 90 s after which kube-scheduler's transport closes its idle connections itself).",
    )
    max_connections: int = Field(
        1024,
        ge=1,
        le=1_000_000,
        description="Open connections at most; a new connection beyond it displaces one without a request in "
        "progress (closed at once when every one has one): from the client address holding the most connections, "
        "then the one that answered the fewest requests, then the least recently active, so that kube-scheduler's "
        "keep-alive connection goes last. Each costs a file descriptor and a few KiB. Default 1024.",
    )

    max_connections_per_client: int = Field(
        DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
        ge=0,
        le=1_000_000,
        description="Open connections at most from one client address (0 = no bound); a new one beyond is closed "
        "at once. kube-scheduler holds one to three per replica (one request per scheduling cycle, Go's 2 idle "
        "connections per host); 64 leaves room for every replica and other clients sharing an address (the "
        "host-network kube-scheduler of drop-in mode shares its node's), while filling maxConnections takes 16 "
        "addresses. Default 64.",
    )
    max_loop_stall_seconds: float = Field(
        10.0,
        gt=0.0,
        le=3600.0,
        description="With listen.healthPort: /livez and /readyz on that port answer 503 once the event loop "
        "serving listen.port has not completed a turn (read its sockets, run its timers) for this many seconds "
        "(a handler stuck on the loop: the probes on listen.port would time out); under overload a turn takes "
        "at most maxLoopBusySeconds plus the cost of shedding. Seconds > 0, at most 3600. Default 10.",
    )

    @model_validator(mode="after")
    def _busy_within_deadline(self) -> LimitsConfig:
        if self.max_loop_busy_seconds > self.request_deadline_seconds:
            raise ValueError(
                f"maxLoopBusySeconds ({self.max_loop_busy_seconds:g}) must not exceed requestDeadlineSeconds "
                f"({self.request_deadline_seconds:g})"
            )
        return self


class PrecomputeConfig(ConfigModel):
    """Node-score vectors per (service, requests) computed off the request path
    (:class:`policy.lowlevel.NodeScoreTable`): a prioritize request then gathers its candidates' scores."""

    enabled: bool = Field(True, description="Precompute the vectors. false: score every request directly.")
    max_keys: int = Field(
        256,
        ge=1,
        le=100_000,
        description="(service, requests) vectors kept per snapshot; memory maxKeys x nodes x 8 bytes. Default 256.",
    )


class ScoreTableConfig(ConfigModel):
    """Plugin mode (docs/operations.md, "Scoring in the scheduler"): compute the node-score table of the policy at
    every snapshot change (:func:`policy.lowlevel.build_score_table`) and publish it to the embedding cache, which
    streams it to kube-scheduler's HRLScore plugin; a heartbeat every second while nothing changes keeps its age
    current (:class:`extender.publisher.ScoreTablePublisher`)."""

    publish: bool = Field(False, description="Publish the table. Default false.")
    address: str | None = Field(
        None,
        description="host:port of the embedding cache to publish to; null = cache.address. Default null.",
        json_schema_extra=pattern_schema(HOST_PORT),
    )
    timeout_seconds: float = Field(1.0, gt=0.0, le=60.0, description="Deadline of each publish, seconds. Default 1.")
    max_keys: int = Field(
        256,
        ge=1,
        le=100_000,
        description="(service, requests) rows at most: the pending pods' first, then those of each service's other "
        "pods; message size about maxKeys x nodes x 8 bytes. Default 256.",
    )
    min_interval_seconds: float = Field(
        0.1, ge=0.0, le=60.0, description="At most one new table per this many seconds, 0..60. Default 0.1."
    )

    @field_validator("address")
    @classmethod
    def _host_port(cls, v: str | None) -> str | None:
        return v if v is None else CacheConfig._host_port(v)


class DecisionsConfig(ConfigModel):
    """The decision record (:mod:`extender.decisions`): per pod, the candidates, our scores, the node kube-scheduler
    bound it to, and the explanation; in shadow mode, the shadow log."""

    enabled: bool | None = Field(
        None, description="Record decisions; null = on in shadow mode, off in active mode. Default null."
    )
    log: str | None = Field(
        None,
        min_length=1,
        description="JSON-lines file the decisions are written to (its folder is created); null = none (metrics "
        "and Events only). Default null.",
    )
    max_bytes: int = Field(64 * 2**20, ge=4096, description="The log rotates at this size, bytes. Default 64 MiB.")
    backups: int = Field(3, ge=0, le=100, description="Rotated log files kept. Default 3.")
    explain: bool = Field(
        True, description="Each record carries the explanation of our best node and of the bound node. Default true."
    )
    events: bool = Field(
        False,
        description="Opt-in: an Event (events.k8s.io/v1) on each scored pod with the top three contributions of our "
        "choice and of the bound node. Needs kubernetes.enabled and `create` on events.events.k8s.io. "
        "Default false.",
    )
    max_pending: int = Field(
        10_000, ge=1, le=1_000_000, description="Decisions waiting for their pod's binding. Default 10000."
    )
    pending_timeout_seconds: float = Field(
        300.0, gt=0.0, description="A pod not bound this long after it was scored is recorded as unbound. Default 300."
    )
    queue_size: int = Field(1_000, ge=1, le=1_000_000, description="Resolved decisions waiting to be written.")


class ExtenderConfiguration(ConfigModel):
    """The whole ``kind: ExtenderConfiguration`` document (see the module docstring for a full example)."""

    listen: ListenConfig = Field(default_factory=ListenConfig, description="HTTP listen address.")
    url_prefix: str = Field(
        "/scheduler",
        description="Path prefix of the verbs: POST {urlPrefix}/filter and {urlPrefix}/prioritize. Must "
        "start with '/'; a trailing '/' is dropped. Default /scheduler.",
        json_schema_extra=pattern_schema(URL_PATH),
    )
    policy: PolicyConfig = Field(default_factory=PolicyConfig, description="Placement policy.")
    topology: TopologyConfig = Field(default_factory=TopologyConfig, description="Call-graph sources.")
    snapshot_file: ExistingPath | None = Field(
        None,
        description="Optional static cluster state loaded at start: a Kubernetes List as printed by "
        "`kubectl get nodes,pods,pdb -A -o json` (or any file/dir policy.observe reads). "
        "The --snapshot flag overrides it.",
    )
    kubernetes: KubernetesConfig = Field(
        default_factory=KubernetesConfig, description="Live snapshot from the API server (list + watch)."
    )
    max_snapshot_age_seconds: float = Field(
        0.0,
        ge=0.0,
        description="A snapshot not updated for longer than this many seconds is stale: scores turn "
        "neutral, filter passes every node and /readyz answers 503. 0 = never stale "
        "(right for a static snapshotFile; set it, e.g. 120, with a live watch).",
    )
    cache: CacheConfig | None = Field(
        None, description="The topology embedding cache to copy embeddings and intent from; null = none."
    )
    limits: LimitsConfig = Field(
        default_factory=LimitsConfig, description="Body size, deadline, queue and worker limits of the server."
    )
    precompute: PrecomputeConfig = Field(
        default_factory=PrecomputeConfig, description="Node-score vectors computed off the request path."
    )
    metrics_sources: ExtenderMetricsSourcesConfig = Field(
        default_factory=ExtenderMetricsSourcesConfig,
        description="Live inputs (policy.live): resourceUsage, the measured CPU use of the pods (Metrics API or "
        "Prometheus cAdvisor), read in the background and applied to the watch's snapshots.",
    )
    score_table: ScoreTableConfig = Field(
        default_factory=ScoreTableConfig, description="Plugin mode: the node-score table published for HRLScore."
    )
    mode: Literal["active", "shadow"] = Field(
        "active",
        description="active: answer the policy's scores. shadow: answer neutral scores (every candidate 0, so "
        "kube-scheduler's own plugins alone decide) and record what the policy would have chosen (decisions). "
        "Default active.",
    )
    decisions: DecisionsConfig = Field(
        default_factory=DecisionsConfig, description="The decision record (the shadow log in shadow mode)."
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="Log level of the process (stderr). Case-insensitive. Default INFO."
    )

    @model_validator(mode="after")
    def _usage_needs_the_watch(self) -> ExtenderConfiguration:
        if self.metrics_sources.resource_usage.uri is not None and not self.kubernetes.enabled:
            raise ValueError(
                "metricsSources.resourceUsage.uri: needs kubernetes.enabled (measured use reaches the index "
                "through the watch's snapshot builder)"
            )
        return self

    @model_validator(mode="after")
    def _table_needs_a_cache(self) -> ExtenderConfiguration:
        st = self.score_table
        if st.publish and st.address is None and self.cache is None:
            raise ValueError(
                "scoreTable.publish: needs scoreTable.address or cache.address (the cache HRLScore watches)"
            )
        return self

    def score_table_address(self) -> str | None:
        """Where the score table is published (``None``: it is not)."""
        st = self.score_table
        if not st.publish:
            return None
        return st.address or (self.cache.address if self.cache is not None else None)

    @model_validator(mode="after")
    def _decisions_in_shadow(self) -> ExtenderConfiguration:
        if self.mode == "shadow" and self.decisions.enabled is False:
            raise ValueError("decisions.enabled: false and mode: shadow: shadow mode records decisions")
        if self.mode == "shadow" and self.score_table.publish:
            raise ValueError(
                "scoreTable.publish: true and mode: shadow: the HRLScore plugin would score with the policy while "
                "shadow mode answers neutral scores; publish the table in active mode only"
            )
        if self.decisions.events and not self.kubernetes.enabled:
            raise ValueError("decisions.events: true needs kubernetes.enabled: true (the Events go to the API server)")
        return self

    @property
    def records_decisions(self) -> bool:
        """True when the decision record is on (``decisions.enabled``, or its default: on in shadow mode)."""
        d = self.decisions.enabled
        return self.mode == "shadow" if d is None else d

    @field_validator("url_prefix")
    @classmethod
    def _check_prefix(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError("must start with '/'")
        if not matches(URL_PATH, v):
            raise ValueError("must be a plain URL path (no spaces, '?' or '#')")
        v = v.rstrip("/")
        return v

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, v: Any) -> Any:
        return v.upper() if isinstance(v, str) else v

    @model_validator(mode="after")
    def _one_snapshot_source(self) -> ExtenderConfiguration:
        if self.kubernetes.enabled and self.snapshot_file is not None:
            raise ValueError(
                f"snapshotFile ({self.snapshot_file!r}) and kubernetes.enabled are exclusive: the snapshot comes "
                "from a file or from the live cluster"
            )
        return self


def load_extender_config(
    source: str | Path | Mapping[str, Any] | None, *, check_files: bool = False
) -> ExtenderConfiguration:
    """Load an ``ExtenderConfiguration`` from a YAML file path, a mapping, or ``None`` (all defaults).
    ``check_files``: also check that the files it names exist (TLS files, ``snapshotFile``, ``kubeconfig``,
    ``policy.bundle``, the file sources of ``topology.sources``), in the same pass (``hrl-extender`` does).
    Raises :class:`policy.config.ConfigError` listing every problem with its dotted path."""
    return load_config(ExtenderConfiguration, KIND, source, check_files=check_files)


def tls_context(config: ExtenderConfiguration) -> ssl.SSLContext | None:
    """The ``ssl.SSLContext`` (server side) that makes the server speak HTTPS when ``listen.tls`` is set, else
    ``None``. The pair is loaded here (Python's ``ssl``) so a missing, unreadable or mismatched file fails at start
    with one line naming the field. Raises ``ValueError``."""
    tls = config.listen.tls
    if tls is None:
        return None

    for field, path in (("certFile", tls.cert_file), ("keyFile", tls.key_file)):
        if not Path(path).is_file():
            raise ValueError(f"listen.tls.{field}: no such file {path!r}")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_cert_chain(tls.cert_file, tls.key_file)
    except OSError as exc:  # ssl.SSLError is an OSError: bad PEM, key not matching the certificate
        detail = " ".join(str(getattr(exc, "reason", None) or exc.strerror or exc).split())
        raise ValueError(
            f"listen.tls: cannot load certFile {tls.cert_file!r} with keyFile {tls.key_file!r}: {detail}"
        ) from exc
    return ctx


def http_limits(config: ExtenderConfiguration) -> HttpLimits:
    """The :class:`extender.http.HttpLimits` of ``config.limits`` (timeouts, connection bound, body size)."""
    lim = config.limits
    return HttpLimits(
        header_timeout_s=lim.header_timeout_seconds,
        body_timeout_s=lim.body_timeout_seconds,
        idle_timeout_s=lim.idle_timeout_seconds,
        max_connections=lim.max_connections,
        max_request_bytes=lim.max_request_bytes,
        max_connections_per_client=lim.max_connections_per_client,
    )


def build_policy(config: ExtenderConfiguration) -> PlacementPolicy:
    """The placement policy ``config.policy`` names, configured. ``learned`` loads its bundle (and the graph
    encoder it was trained with); raises :class:`policy.bundle.BundleError` (a ``ValueError``, one line naming
    the bundle) when it cannot."""
    p = config.policy
    if p.name == "topology-heuristic":
        return TopologyHeuristic(target_utilization=p.target_utilization)
    if p.name == "learned":
        return load_placement(p.bundle or SERVED_PLACEMENT_BUNDLE, refresh_s=p.embedding_refresh_seconds)
    raise ValueError(f"policy.name: unknown policy {p.name!r}")  # pragma: no cover - Literal guards this


def start_policy_feeds(policy: PlacementPolicy, config: ExtenderConfiguration, store) -> RowsRefresher | None:
    """Feed a learned policy its service rows off the request path: with ``cache`` configured it prefers the
    cache's embeddings (``store.get().embeddings``, when made by the encoder it was trained with); a background
    :class:`policy.lowlevel.RowsRefresher` recomputes rows from the store's snapshot every
    ``policy.embeddingRefreshSeconds`` either way (the fallback). Returns the started refresher (call ``stop()``
    at shutdown), or ``None`` for a policy that needs no rows."""
    if not isinstance(policy, (LearnedPlacement, PlacementEnsemble)):
        return None
    if config.cache is not None:
        policy.embedding_source = lambda: store.get().embeddings
    return RowsRefresher(policy, lambda: store.get().snapshot, config.policy.embedding_refresh_seconds).start()


def topology_refresher(config: ExtenderConfiguration, refresh: bool = True):
    """A :class:`policy.topology.live.TopologyRefresher` for ``config.topology`` when its sources include a live
    URI, with its first refresh done when ``refresh`` (a failing live source makes it stale, not an error), else
    ``None``.
    Returns ``(refresher | None, warnings of the file sources)``. File sources are read once here; their errors
    (:class:`policy.topology.TopologyError`) and a malformed URI (``ValueError``) propagate. Start its background
    thread with ``refresher.start()``; publish its graphs with ``refresher.on_update``."""
    t = config.topology
    if not any(is_live_source(s) for s in t.sources):
        return None, []

    refresher, warnings = TopologyRefresher.from_sources(
        list(t.sources),
        refresh_s=t.refresh_seconds,
        half_life_s=t.smoothing_half_life_seconds,
        stale_after_s=t.stale_after_seconds or None,
    )
    if refresh:
        refresher.refresh_once()
    return refresher, [str(w) for w in warnings]


def load_topology(config: ExtenderConfiguration) -> tuple[ServiceGraph | None, list[str]]:
    """The call graph from ``config.topology.sources`` and the loader's warnings, or ``(None, [])``
    when no sources are configured. Uses ``policy.topology.sources.load_graph(paths)`` (imported here,
    lazily, so the extender starts without it when no sources are configured); its errors propagate."""
    if not config.topology.sources:
        return None, []

    graph, warnings = load_graph(list(config.topology.sources))
    return graph, [str(w) for w in warnings]


def decision_recorder(config: ExtenderConfiguration, policy: PlacementPolicy, registry: Any, events: Any = None):
    """The :class:`extender.decisions.DecisionRecorder` of ``config.decisions`` (not started), or ``None`` when the
    record is off. ``events``: the :class:`extender.decisions.EventSink` (``decisions.events``). Raises ``OSError``
    when the log cannot be opened."""
    if not config.records_decisions:
        return None
    d = config.decisions
    settings = DecisionSettings(
        log_path=d.log,
        max_bytes=d.max_bytes,
        backups=d.backups,
        explain=d.explain,
        max_pending=d.max_pending,
        pending_timeout_s=d.pending_timeout_seconds,
        queue_size=d.queue_size,
    )
    return DecisionRecorder(config.mode, policy, registry, settings, events=events if d.events else None)
