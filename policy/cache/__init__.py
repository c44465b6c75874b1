"""The topology embedding cache shared by the extender and the descheduler (DESIGN.md section 2): records keyed
by the call graph's fingerprint (:mod:`.records`), the in-process store (:mod:`.memory`), the node-score table
relayed from the extender to the kube-scheduler plugin (:mod:`.scoretable`), the gRPC server and client
(:mod:`.server`, :mod:`.client`, :mod:`.codec`; generated stubs in ``proto/``), the background copy the extender
reads (:mod:`.refresher`) and their metrics (:mod:`.metrics`).
"""

from .client import CacheTimeout, CacheUnavailable, GrpcEmbeddingCache
from .codec import entry_from_pb, entry_to_pb, intent_from_pb, intent_to_pb, matrix_from_pb, matrix_to_pb, pb_modules
from .memory import EmbeddingCache, InMemoryEmbeddingCache
from .metrics import GRPC_BUCKETS_S, CacheClientMetrics, CacheMetrics, EncoderMetrics
from .records import (
    MAX_DIM,
    MAX_FINGERPRINT_CHARS,
    MAX_MESSAGE_BYTES,
    EmbeddingEntry,
    IntentEntry,
    Lookup,
    check_intent,
    check_put,
    fingerprint,
)
from .refresher import CacheRefresher
from .scoretable import (
    LoadTerm,
    ScoreRow,
    ScoreTable,
    ScoreTableHub,
    WatchersExhausted,
    check_table_pb,
    table_from_pb,
    table_to_pb,
)
from .server import SERVICE_NAME, CacheServer

__all__ = [
    "fingerprint",
    "EmbeddingEntry",
    "IntentEntry",
    "Lookup",
    "MAX_MESSAGE_BYTES",
    "check_put",
    "check_intent",
    "MAX_DIM",
    "MAX_FINGERPRINT_CHARS",
    "CacheMetrics",
    "CacheClientMetrics",
    "EncoderMetrics",
    "GRPC_BUCKETS_S",
    "EmbeddingCache",
    "InMemoryEmbeddingCache",
    "pb_modules",
    "matrix_to_pb",
    "matrix_from_pb",
    "entry_to_pb",
    "entry_from_pb",
    "intent_to_pb",
    "intent_from_pb",
    "CacheServer",
    "SERVICE_NAME",
    "GrpcEmbeddingCache",
    "CacheUnavailable",
    "CacheTimeout",
    "CacheRefresher",
    "LoadTerm",
    "ScoreRow",
    "ScoreTable",
    "ScoreTableHub",
    "WatchersExhausted",
    "check_table_pb",
    "table_from_pb",
    "table_to_pb",
]
