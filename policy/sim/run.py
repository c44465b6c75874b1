"""One simulation by name — ``hrl-policy simulate --app A --trace T --policy P [--nodes N --minutes M
--seed S --json PATH]``, on the per-application cluster and load of :mod:`policy.sim.sizing` that `make bench`
shares.

- ``--app``: a built-in app (``online-boutique``, ``sock-shop``, ``dsb-hotel-reservation``,
  ``dsb-social-network``, ``dsb-media-microservices``, ``alibaba``) or a path to an ``app.yaml`` / its folder
  (format: :class:`policy.sim.app.AppFile`; docs/benchmarks.md);
- ``--trace``: ``nasa``, ``twitter``, ``bursty`` or a CSV of requests per minute (``minute,requests``),
  scaled so its peak asks :data:`policy.sim.sizing.PEAK_UTILIZATION` (1.25) times the CPU the app's busiest service
  has at its limits at the manifest replicas;
- ``--policy``: a stack of :mod:`policy.sim.stacks` (built-in or from the ``hrl_scheduler.stacks`` entry
  points).

The output is one flat JSON object (:data:`policy.sim.scenario.FLAT_KEYS`): ``scenario`` (``baseline-2026-11``
here), ``family``, ``app``, ``trace``, ``policy``, ``nodes``, ``minutes``, ``seed``, ``offset_min``, ``samples``, the
eight metric keys of :data:`policy.sim.engine.METRIC_KEYS`, the node-utilisation keys of
:data:`policy.sim.engine.NODE_UTIL_KEYS`, ``drain_evictions`` and ``resizes``.

**Running one bench cell of a scenario** (the API the bench calls; :mod:`policy.sim.scenario`)::

    from policy.sim.scenario import run_scenario, scenario_window_offset

    offset = scenario_window_offset("network-edge", minutes=30)        # the 30 minutes around the peak
    flat, res = run_scenario("network-edge", "default-kube-scheduler+hpa",
                             minutes=30, seed=3, offset_min=offset, n_samples=2000)
    # one-app scenarios also take app="sock-shop", trace="twitter" (they replace the scenario's)

``flat`` is the JSON object above (several apps: ``app`` / ``trace`` joined with ``+`` and an ``apps`` object of
per-app figures); ``res`` the :class:`~policy.sim.engine.SimResult` (series, latency samples and weights for
histograms, ``extra`` with the utilisation distribution). ``minutes=None`` runs the scenario's ``minutes``; a
whole trace window is ``minutes=len(load_trace(trace))`` with offset 0. ``policy.sim.scenario.build`` returns
the pieces (application, rates, cluster, :class:`~policy.sim.engine.SimConfig`) for
:func:`policy.sim.stacks.run_stack`, to run them elsewhere (e.g. as Ray tasks; every piece is a picklable
frozen value). Every cell is re-run by one command, which the report should print::

    hrl-policy simulate --scenario network-edge --policy default-kube-scheduler+hpa \
        --minutes 30 --offset <offset> --samples 2000 --seed 3 --json -

The classic setting (``--app``/``--trace`` without ``--scenario``, and :func:`simulate`) is the scenario
``baseline-2026-11`` and gives the same numbers through either path.
"""

from __future__ import annotations

from pathlib import Path

from .app import AppSpec, load_app
from .engine import SimConfig
from .scenario import BASELINE, flat_result
from .sizing import cluster_for, trace_rps
from .stacks import run_stack

__all__ = ["simulate"]


def simulate(
    app: str | AppSpec,
    trace: str,
    policy: str,
    nodes: int | None = None,
    minutes: int | None = 30,
    seed: int = 0,
    offset_min: int = 0,
    n_samples: int | None = None,
    progress=None,
    bundles: str | Path | None = None,
):
    """Run one simulation; returns ``(flat_result_dict, SimResult)``. ``bundles``: the bundles root the learned
    stacks load (:attr:`policy.sim.stackbase.StackContext.bundles`; None: the committed ``policy/bundles``). Raises
    ValueError (unknown app, trace or policy; bad numbers) with a one-line message."""
    spec = load_app(app) if isinstance(app, str) else app
    if nodes is not None and nodes < 1:
        raise ValueError(f"nodes: must be >= 1, got {nodes}")
    if minutes is not None and minutes < 1:
        raise ValueError(f"minutes: must be >= 1, got {minutes}")
    if offset_min < 0:
        raise ValueError(f"offset: must be >= 0, got {offset_min}")
    if n_samples is not None and n_samples < 1:
        raise ValueError(f"samples: must be >= 1, got {n_samples}")
    rps = trace_rps(spec, trace, minutes, offset_min)
    cluster = cluster_for(spec, nodes)
    kw = {} if n_samples is None else {"n_samples": n_samples}
    cfg = SimConfig(minutes=len(rps), seed=seed, **kw)
    res = run_stack(policy, spec, rps, cluster, cfg, progress, bundles=bundles)

    flat = flat_result(
        BASELINE, "baseline", spec.name, trace, policy, cluster.nodes, len(rps), seed, offset_min, cfg.n_samples, res
    )
    return flat, res
