"""Training, the only package that imports torch (the ``[train]`` extra). Trained networks leave it as numpy
bundles (DESIGN.md section 7) that the serving packages load.

- :mod:`.td3`: TD3 and the DRPC teacher-student extension, the GRU workload predictor (networks, replay buffer);
- :mod:`.drpc`: ``hrl-policy train drpc``: the predictor, then the DRPC teacher and its students;
- :mod:`.placement`: ``hrl-policy train placement``: the learned low-level scorer (PPO through kube-scheduler's
  scoring);
- :mod:`.encoder`: ``hrl-policy train encoder``: the graph encoder, self-supervised on simulator what-ifs;
- :mod:`.encoder_data`, :mod:`.forecast_data`: their data (numpy only);
- :mod:`.pipeline`: ``make train``: every stage in order, bundles installed only when every stage succeeded.

Import the submodules: importing this package loads nothing (so the numpy-only data modules stay torch-free).
"""

__all__ = ["drpc", "encoder", "encoder_data", "forecast_data", "pipeline", "placement", "td3"]
