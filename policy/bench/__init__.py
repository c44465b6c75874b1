"""The benchmark harnesses behind ``make bench*`` (numpy only; each writes its own marked section of
BENCHMARKS.md through :mod:`.markdown`):

- :mod:`.stacks`: every scheduling stack in every cell (scenario × application × load trace) of the bench plan
  (:mod:`.plan`, ``policy/data/bench/plan.yaml``) × seed in the simulator (``make bench``, ``make bench-quick``;
  ``python -m policy.bench``);
- :mod:`.placement`: placement alone, and the learned scorer's inference latency;
- :mod:`.topology`: the graph encoder's time vs graph size, the gRPC cache's latency, the encoder's held-out error
  (``make bench-topology``);
- :mod:`.sim`: the simulator's speed, the discrete-event cross-check and the calibration (``make bench-sim``).
"""

__all__ = ["markdown", "placement", "plan", "sim", "stacks", "topology"]
