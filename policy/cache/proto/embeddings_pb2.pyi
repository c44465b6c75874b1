from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Matrix(_message.Message):
    __slots__ = ("rows", "cols", "data")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    COLS_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    rows: int
    cols: int
    data: bytes
    def __init__(self, rows: _Optional[int] = ..., cols: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class EmbeddingEntry(_message.Message):
    __slots__ = ("fingerprint", "services", "embeddings", "version", "timestamp_s", "encoder_version", "stored_at_s")
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    SERVICES_FIELD_NUMBER: _ClassVar[int]
    EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_S_FIELD_NUMBER: _ClassVar[int]
    ENCODER_VERSION_FIELD_NUMBER: _ClassVar[int]
    STORED_AT_S_FIELD_NUMBER: _ClassVar[int]
    fingerprint: str
    services: _containers.RepeatedScalarFieldContainer[str]
    embeddings: Matrix
    version: int
    timestamp_s: float
    encoder_version: str
    stored_at_s: float
    def __init__(self, fingerprint: _Optional[str] = ..., services: _Optional[_Iterable[str]] = ..., embeddings: _Optional[_Union[Matrix, _Mapping]] = ..., version: _Optional[int] = ..., timestamp_s: _Optional[float] = ..., encoder_version: _Optional[str] = ..., stored_at_s: _Optional[float] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("fingerprint", "known_version")
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    KNOWN_VERSION_FIELD_NUMBER: _ClassVar[int]
    fingerprint: str
    known_version: int
    def __init__(self, fingerprint: _Optional[str] = ..., known_version: _Optional[int] = ...) -> None: ...

class GetResponse(_message.Message):
    __slots__ = ("found", "not_modified", "entry")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    NOT_MODIFIED_FIELD_NUMBER: _ClassVar[int]
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    found: bool
    not_modified: bool
    entry: EmbeddingEntry
    def __init__(self, found: _Optional[bool] = ..., not_modified: _Optional[bool] = ..., entry: _Optional[_Union[EmbeddingEntry, _Mapping]] = ...) -> None: ...

class PutRequest(_message.Message):
    __slots__ = ("fingerprint", "services", "embeddings", "timestamp_s", "encoder_version")
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    SERVICES_FIELD_NUMBER: _ClassVar[int]
    EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_S_FIELD_NUMBER: _ClassVar[int]
    ENCODER_VERSION_FIELD_NUMBER: _ClassVar[int]
    fingerprint: str
    services: _containers.RepeatedScalarFieldContainer[str]
    embeddings: Matrix
    timestamp_s: float
    encoder_version: str
    def __init__(self, fingerprint: _Optional[str] = ..., services: _Optional[_Iterable[str]] = ..., embeddings: _Optional[_Union[Matrix, _Mapping]] = ..., timestamp_s: _Optional[float] = ..., encoder_version: _Optional[str] = ...) -> None: ...

class PutResponse(_message.Message):
    __slots__ = ("version", "stored_at_s")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    STORED_AT_S_FIELD_NUMBER: _ClassVar[int]
    version: int
    stored_at_s: float
    def __init__(self, version: _Optional[int] = ..., stored_at_s: _Optional[float] = ...) -> None: ...

class PendingMove(_message.Message):
    __slots__ = ("namespace", "service", "workload", "target_node", "expires_at_s", "source_pod")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    TARGET_NODE_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_S_FIELD_NUMBER: _ClassVar[int]
    SOURCE_POD_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    service: str
    workload: str
    target_node: str
    expires_at_s: float
    source_pod: str
    def __init__(self, namespace: _Optional[str] = ..., service: _Optional[str] = ..., workload: _Optional[str] = ..., target_node: _Optional[str] = ..., expires_at_s: _Optional[float] = ..., source_pod: _Optional[str] = ...) -> None: ...

class Intent(_message.Message):
    __slots__ = ("values", "names", "version", "timestamp_s", "source", "stored_at_s", "pending_moves")
    VALUES_FIELD_NUMBER: _ClassVar[int]
    NAMES_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_S_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    STORED_AT_S_FIELD_NUMBER: _ClassVar[int]
    PENDING_MOVES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    names: _containers.RepeatedScalarFieldContainer[str]
    version: int
    timestamp_s: float
    source: str
    stored_at_s: float
    pending_moves: _containers.RepeatedCompositeFieldContainer[PendingMove]
    def __init__(self, values: _Optional[_Iterable[float]] = ..., names: _Optional[_Iterable[str]] = ..., version: _Optional[int] = ..., timestamp_s: _Optional[float] = ..., source: _Optional[str] = ..., stored_at_s: _Optional[float] = ..., pending_moves: _Optional[_Iterable[_Union[PendingMove, _Mapping]]] = ...) -> None: ...

class GetIntentRequest(_message.Message):
    __slots__ = ("known_version",)
    KNOWN_VERSION_FIELD_NUMBER: _ClassVar[int]
    known_version: int
    def __init__(self, known_version: _Optional[int] = ...) -> None: ...

class GetIntentResponse(_message.Message):
    __slots__ = ("found", "not_modified", "intent")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    NOT_MODIFIED_FIELD_NUMBER: _ClassVar[int]
    INTENT_FIELD_NUMBER: _ClassVar[int]
    found: bool
    not_modified: bool
    intent: Intent
    def __init__(self, found: _Optional[bool] = ..., not_modified: _Optional[bool] = ..., intent: _Optional[_Union[Intent, _Mapping]] = ...) -> None: ...

class PutIntentRequest(_message.Message):
    __slots__ = ("values", "names", "source", "timestamp_s", "pending_moves")
    VALUES_FIELD_NUMBER: _ClassVar[int]
    NAMES_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_S_FIELD_NUMBER: _ClassVar[int]
    PENDING_MOVES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    names: _containers.RepeatedScalarFieldContainer[str]
    source: str
    timestamp_s: float
    pending_moves: _containers.RepeatedCompositeFieldContainer[PendingMove]
    def __init__(self, values: _Optional[_Iterable[float]] = ..., names: _Optional[_Iterable[str]] = ..., source: _Optional[str] = ..., timestamp_s: _Optional[float] = ..., pending_moves: _Optional[_Iterable[_Union[PendingMove, _Mapping]]] = ...) -> None: ...

class PutIntentResponse(_message.Message):
    __slots__ = ("version", "stored_at_s")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    STORED_AT_S_FIELD_NUMBER: _ClassVar[int]
    version: int
    stored_at_s: float
    def __init__(self, version: _Optional[int] = ..., stored_at_s: _Optional[float] = ...) -> None: ...

class LoadTerm(_message.Message):
    __slots__ = ("scale", "from_frac", "cap", "frac_float32")
    SCALE_FIELD_NUMBER: _ClassVar[int]
    FROM_FRAC_FIELD_NUMBER: _ClassVar[int]
    CAP_FIELD_NUMBER: _ClassVar[int]
    FRAC_FLOAT32_FIELD_NUMBER: _ClassVar[int]
    scale: float
    from_frac: float
    cap: float
    frac_float32: bool
    def __init__(self, scale: _Optional[float] = ..., from_frac: _Optional[float] = ..., cap: _Optional[float] = ..., frac_float32: _Optional[bool] = ...) -> None: ...

class ScoreRow(_message.Message):
    __slots__ = ("service", "cpu_m", "memory_bytes", "weight", "base")
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    CPU_M_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    BASE_FIELD_NUMBER: _ClassVar[int]
    service: str
    cpu_m: int
    memory_bytes: int
    weight: float
    base: bytes
    def __init__(self, service: _Optional[str] = ..., cpu_m: _Optional[int] = ..., memory_bytes: _Optional[int] = ..., weight: _Optional[float] = ..., base: _Optional[bytes] = ...) -> None: ...

class ScoreTable(_message.Message):
    __slots__ = ("generation", "producer", "policy", "computed_at_s", "snapshot_age_s", "nodes", "alloc_cpu_m", "cpu_used_m", "requested_cpu_m", "load_term", "rows", "version")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    COMPUTED_AT_S_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_AGE_S_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    ALLOC_CPU_M_FIELD_NUMBER: _ClassVar[int]
    CPU_USED_M_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_CPU_M_FIELD_NUMBER: _ClassVar[int]
    LOAD_TERM_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    generation: int
    producer: str
    policy: str
    computed_at_s: float
    snapshot_age_s: float
    nodes: _containers.RepeatedScalarFieldContainer[str]
    alloc_cpu_m: bytes
    cpu_used_m: bytes
    requested_cpu_m: bytes
    load_term: LoadTerm
    rows: _containers.RepeatedCompositeFieldContainer[ScoreRow]
    version: int
    def __init__(self, generation: _Optional[int] = ..., producer: _Optional[str] = ..., policy: _Optional[str] = ..., computed_at_s: _Optional[float] = ..., snapshot_age_s: _Optional[float] = ..., nodes: _Optional[_Iterable[str]] = ..., alloc_cpu_m: _Optional[bytes] = ..., cpu_used_m: _Optional[bytes] = ..., requested_cpu_m: _Optional[bytes] = ..., load_term: _Optional[_Union[LoadTerm, _Mapping]] = ..., rows: _Optional[_Iterable[_Union[ScoreRow, _Mapping]]] = ..., version: _Optional[int] = ...) -> None: ...

class PublishScoreTableRequest(_message.Message):
    __slots__ = ("table",)
    TABLE_FIELD_NUMBER: _ClassVar[int]
    table: ScoreTable
    def __init__(self, table: _Optional[_Union[ScoreTable, _Mapping]] = ...) -> None: ...

class PublishScoreTableResponse(_message.Message):
    __slots__ = ("version", "watchers")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    WATCHERS_FIELD_NUMBER: _ClassVar[int]
    version: int
    watchers: int
    def __init__(self, version: _Optional[int] = ..., watchers: _Optional[int] = ...) -> None: ...

class TouchScoreTableRequest(_message.Message):
    __slots__ = ("generation", "snapshot_age_s")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_AGE_S_FIELD_NUMBER: _ClassVar[int]
    generation: int
    snapshot_age_s: float
    def __init__(self, generation: _Optional[int] = ..., snapshot_age_s: _Optional[float] = ...) -> None: ...

class TouchScoreTableResponse(_message.Message):
    __slots__ = ("found",)
    FOUND_FIELD_NUMBER: _ClassVar[int]
    found: bool
    def __init__(self, found: _Optional[bool] = ...) -> None: ...

class WatchScoreTableRequest(_message.Message):
    __slots__ = ("known_generation", "watcher")
    KNOWN_GENERATION_FIELD_NUMBER: _ClassVar[int]
    WATCHER_FIELD_NUMBER: _ClassVar[int]
    known_generation: int
    watcher: str
    def __init__(self, known_generation: _Optional[int] = ..., watcher: _Optional[str] = ...) -> None: ...

class ScoreTableHeartbeat(_message.Message):
    __slots__ = ("generation", "snapshot_age_s")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_AGE_S_FIELD_NUMBER: _ClassVar[int]
    generation: int
    snapshot_age_s: float
    def __init__(self, generation: _Optional[int] = ..., snapshot_age_s: _Optional[float] = ...) -> None: ...

class ScoreTableEvent(_message.Message):
    __slots__ = ("table", "heartbeat")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    table: ScoreTable
    heartbeat: ScoreTableHeartbeat
    def __init__(self, table: _Optional[_Union[ScoreTable, _Mapping]] = ..., heartbeat: _Optional[_Union[ScoreTableHeartbeat, _Mapping]] = ...) -> None: ...
