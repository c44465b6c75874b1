"""Call-graph sources → :class:`policy.state.ServiceGraph`.

- :mod:`.manifests`: Kubernetes manifests (env vars naming Services; ``hrl-scheduler.io/depends-on``);
- :mod:`.spans`: OpenTelemetry-style span CSV tables;
- :mod:`.alibaba`: Alibaba MSCallGraph CSV (v2021, v2022);
- :mod:`.sources`: ``detect_format`` and ``load_graph`` over any mix of them (what ``hrl-policy graph`` uses).

Every reader raises :class:`TopologyError` (a ``ValueError``) with a one-line message naming file, line and
field, and returns warnings (unresolved hosts, unknown names, repeated spans) as a list of strings.
"""

from .common import TopologyError
from .sources import FORMATS, Format, detect_format, load_graph

__all__ = ["TopologyError", "FORMATS", "Format", "detect_format", "load_graph"]
