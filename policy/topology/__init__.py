"""Call-graph sources → :class:`policy.state.ServiceGraph`.

- :mod:`.manifests`: Kubernetes manifests (env vars naming Services; ``hrl-scheduler.io/depends-on``);
- :mod:`.spans`: OpenTelemetry-style span CSV tables;
- :mod:`.alibaba`: Alibaba MSCallGraph CSV (v2021, v2022);
- :mod:`.appgroup`: the scheduler-plugins AppGroup CRD (read, and export a graph as one);
- :mod:`.prometheus`: live Istio / Linkerd / OpenTelemetry service-graph metrics through the Prometheus HTTP API;
- :mod:`.sources`: ``detect_format`` and ``load_graph`` over any mix of them (what ``hrl-policy graph`` uses);
- :mod:`.live`: ``TopologyRefresher`` (background refresh of live sources, last good graph, staleness, rate
  smoothing) and its metrics.

Every reader raises :class:`TopologyError` (a ``ValueError``) with a one-line message naming file, line and
field, and returns warnings (unresolved hosts, unknown names, repeated spans) as a list of strings.
"""

from .common import TopologyError
from .sources import FORMATS, Format, detect_format, is_live_source, load_graph

__all__ = ["TopologyError", "FORMATS", "Format", "detect_format", "is_live_source", "load_graph"]
