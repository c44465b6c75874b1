"""The simulator of a microservice cluster, where every learned policy is trained and every performance claim
is measured (numpy; no Kubernetes, no torch).

- :mod:`.app`: applications (``app.yaml``: services, calls, calibrated parameters); :mod:`.synthetic`: generated
  ones; :mod:`.measurements`: metrics and span tables of a running app; :mod:`.calibrate`: an app fitted to them
  (Online Boutique's vendored fit); :mod:`.appbuild`: ``hrl-policy app build``, a user's app from their data;
- :mod:`.model`: the per-minute performance model; :mod:`.engine`: the simulation loop; :mod:`.cluster`,
  :mod:`.objects`: the simulated cluster and its Kubernetes objects; :mod:`.kube_scheduler`: kube-scheduler's
  scheduling cycle with its score plugins and extenders;
- :mod:`.scenario`: scenario files (apps and loads, node pools, network, interference, tenants, drift,
  events) and one run of a stack in one; :mod:`.pools`: heterogeneous clusters; :mod:`.network`: the topology
  network (delay matrix, jitter, shared links, sidecar); :mod:`.interference`: co-location slowdown;
  :mod:`.events`: node failure and drain;
- :mod:`.traces`: request-rate traces, flash crowds, rate drift; :mod:`.stacks`: whole scheduling stacks by name
  (and the ``hrl_scheduler.stacks`` entry points); :mod:`.drpc`: the ``drpc`` stack; :mod:`.run`: one simulation
  by name (and the API the bench calls to run a scenario cell);
- :mod:`.des`, :mod:`.crosscheck`: the same model as a discrete-event simulation, and the two compared;
- :mod:`.env`: the Gymnasium environment.
"""

__all__ = [
    "app",
    "appbuild",
    "calibrate",
    "cluster",
    "crosscheck",
    "des",
    "drpc",
    "engine",
    "env",
    "events",
    "interference",
    "kube_scheduler",
    "measurements",
    "model",
    "network",
    "objects",
    "pools",
    "run",
    "scenario",
    "stacks",
    "synthetic",
    "traces",
]
