"""Conversions between the cache's records (:mod:`policy.cache.records`) and the protobuf messages of
``policy/cache/proto/embeddings.proto``. The stubs are imported on first use (:func:`pb_modules`), so gRPC is
loaded only when a server or a client is built."""

from __future__ import annotations

import numpy as np

from policy.intent import PendingMove

from .records import EmbeddingEntry, IntentEntry, check_pending_moves

__all__ = [
    "pb_modules",
    "matrix_to_pb",
    "matrix_from_pb",
    "entry_to_pb",
    "entry_from_pb",
    "intent_to_pb",
    "intent_from_pb",
    "pending_moves_to_pb",
    "pending_moves_from_pb",
]


# ---- gRPC: conversions -----------------------------------------------------------------------------------------


def pb_modules():
    from .proto import embeddings_pb2, embeddings_pb2_grpc

    return embeddings_pb2, embeddings_pb2_grpc


def matrix_to_pb(pb2, m: np.ndarray):
    m = np.ascontiguousarray(m, dtype="<f4")
    return pb2.Matrix(rows=m.shape[0], cols=m.shape[1] if m.ndim == 2 else 0, data=m.tobytes())


def matrix_from_pb(mat) -> np.ndarray:
    rows, cols = int(mat.rows), int(mat.cols)
    if len(mat.data) != rows * cols * 4:
        raise ValueError(f"embeddings: {rows}x{cols} float32 needs {rows * cols * 4} bytes, got {len(mat.data)}")
    return np.frombuffer(mat.data, dtype="<f4").reshape(rows, cols).astype(np.float32)


def entry_to_pb(pb2, e: EmbeddingEntry):
    return pb2.EmbeddingEntry(
        fingerprint=e.fingerprint,
        services=list(e.services),
        embeddings=matrix_to_pb(pb2, e.matrix),
        version=e.version,
        timestamp_s=e.timestamp_s,
        encoder_version=e.encoder_version,
        stored_at_s=e.stored_at_s,
    )


def entry_from_pb(p) -> EmbeddingEntry:
    return EmbeddingEntry(
        p.fingerprint,
        tuple(p.services),
        matrix_from_pb(p.embeddings),
        int(p.version),
        float(p.timestamp_s),
        p.encoder_version,
        float(p.stored_at_s),
    )


def pending_moves_to_pb(pb2, moves) -> list:
    return [
        pb2.PendingMove(
            namespace=m.namespace,
            service=m.service,
            workload=m.workload,
            target_node=m.target_node,
            expires_at_s=m.expires_at_s,
            source_pod=m.source_pod,
        )
        for m in moves
    ]


def pending_moves_from_pb(items) -> tuple[PendingMove, ...]:
    """The messages' :class:`policy.intent.PendingMove` values. Raises ValueError naming the entry for an invalid one
    (an empty name, a non-finite expiry): the record is refused whole."""
    out = []
    for i, p in enumerate(items):
        try:
            out.append(PendingMove(p.namespace, p.service, p.workload, p.target_node, p.expires_at_s, p.source_pod))
        except ValueError as exc:
            raise ValueError(f"pending_moves[{i}]: {exc}") from None
    return check_pending_moves(out)


def intent_to_pb(pb2, it: IntentEntry):
    return pb2.Intent(
        values=list(it.values),
        names=list(it.names),
        version=it.version,
        timestamp_s=it.timestamp_s,
        source=it.source,
        stored_at_s=it.stored_at_s,
        pending_moves=pending_moves_to_pb(pb2, it.pending_moves),
    )


def intent_from_pb(p) -> IntentEntry:
    return IntentEntry(
        tuple(float(v) for v in p.values),
        tuple(p.names),
        int(p.version),
        float(p.timestamp_s),
        p.source,
        float(p.stored_at_s),
        pending_moves_from_pb(p.pending_moves),
    )
