"""What-if reports from recordings of a live cluster (``hrl-policy whatif``), on the simulation side.

- :mod:`.inputs`: a recording (:mod:`policy.recording`) as the simulator's inputs (the app's workloads and observed
  traffic for ``app build``'s calibration, the recorded cluster and placement, load, recorded latency and CPU);
- :mod:`.replay`: one stack replayed on the recording, and its error against it;
- :mod:`.shadow`: the shadow logs summarised, and the shadow decisions compared with the simulator's;
- :mod:`.report`: the whole report (Markdown, JSON, plots).
"""

from .inputs import RecordedCluster, RecordedInputs, read_inputs
from .replay import START_MODES, Replay, replay, replay_error
from .report import FRONT_TARGETS, WhatIf, WhatIfOptions, markdown, whatif
from .shadow import compare_with_simulator, descheduler_summary, extender_summary

__all__ = [
    "RecordedCluster",
    "RecordedInputs",
    "read_inputs",
    "START_MODES",
    "Replay",
    "replay",
    "replay_error",
    "FRONT_TARGETS",
    "WhatIf",
    "WhatIfOptions",
    "whatif",
    "markdown",
    "compare_with_simulator",
    "descheduler_summary",
    "extender_summary",
]
