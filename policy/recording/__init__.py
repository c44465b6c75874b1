"""Recordings of a live cluster (``hrl-policy record``) for the what-if report (``hrl-policy whatif``).

- :mod:`.format`: the versioned recording directory (layout, manifest, redaction, writer and reader);
- :mod:`.signals` (imported on its own: it loads the HTTP client): what is read from Prometheus per step (call
  graph, per-service rates, latency and success, pods' CPU and memory);
- :mod:`.recorder`: the step loop (bounded memory, resumable, the shadow logs copied);
- :mod:`.kube`: the Kubernetes adapter (the only module here importing ``kubernetes``; never reads Secrets).
"""

from .format import (
    ADDRESS_ENV,
    EDGE_COLUMNS,
    FORMAT_VERSION,
    POD_COLUMNS,
    SERVICE_COLUMNS,
    Manifest,
    Recording,
    RecordingError,
    RecordingWriter,
    redact,
)
from .recorder import (
    ObjectSource,
    RecordOptions,
    SignalSource,
    bound_pods,
    copy_shadow_log,
    record,
    recording_summary,
)

__all__ = [
    "bound_pods",
    "FORMAT_VERSION",
    "POD_COLUMNS",
    "SERVICE_COLUMNS",
    "EDGE_COLUMNS",
    "ADDRESS_ENV",
    "Manifest",
    "Recording",
    "RecordingError",
    "RecordingWriter",
    "redact",
    "ObjectSource",
    "SignalSource",
    "RecordOptions",
    "record",
    "recording_summary",
    "copy_shadow_log",
]
