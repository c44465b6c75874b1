"""Whole scheduling stacks (placement + rebalancing + scaling) for the simulator, by name: what `make bench`
compares and ``hrl-policy simulate --policy NAME`` runs.

A stack is a factory ``factory(ctx: StackContext) -> StackBuild``: given the application, the cluster spec
and the seed of the run, it builds kube-scheduler's profile (:class:`KubeSchedulerModel`: score plugins and
extenders), the controllers that run inside the simulation (:class:`PeriodicHook`: descheduler,
autoscalers) and, when its extenders need the cluster state, an ``on_change(snapshot)`` callback the
simulation calls before every scheduling cycle.

The stacks (each module registers its own with :func:`~policy.sim.stackbase.register_stack`; this module imports
them all, and :mod:`.stackbase` imports none of them, so there is no cycle):

- :mod:`.builtin_stacks`: the baselines users run today (``default-kube-scheduler``, ``default-kube-scheduler+hpa``,
  ``networkaware``, ``trimaran-tlp``, ``descheduler-lownodeutilization``, ``threshold-autoscaler``);
- :mod:`.hrl_stacks`: hrl-scheduler's learned stacks and their ablations (``hrl-scheduler``, ``hrl-no-encoder``,
  ``hrl-flat``, ...), the product's own descheduling cycle (:func:`descheduler.loop.run_once`) run as a library;
- :mod:`.drpc`: ``drpc``; :mod:`.reference`: ``offline-reference``, a placement planned under a simplified model;
- :mod:`.oracle`: ``lookahead-oracle``, the achievable target (forked rollouts of candidate intents).

A name may set the stack's knobs (:class:`Knob`, :attr:`StackInfo.knobs`): ``NAME@knob=value,...``, e.g.
``default-kube-scheduler+hpa@target=0.6`` (HPA target 60 %), ``networkaware@hpa=0.8,weight=20``; a knob left out
keeps its default, so the plain name and the name with every default give the same run, bit for bit.

More stacks come from other installed packages through the entry-point group ``hrl_scheduler.stacks``: each
entry point names a stack and points at its factory. A package adds one in its ``pyproject.toml``::

    [project.entry-points."hrl_scheduler.stacks"]
    my-stack = "my_package.stacks:build_my_stack"

and ``hrl-policy simulate --policy my-stack`` / ``python -m policy.bench`` run it without any change here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from importlib import metadata
from pathlib import Path

import numpy as np

from . import drpc as _drpc  # noqa: F401  (registers the drpc stack)
from . import hrl_stacks as _hrl_stacks  # noqa: F401  (registers the learned stacks)
from . import oracle as _oracle  # noqa: F401  (registers lookahead-oracle)
from .app import AppSpec
from .builtin_stacks import (
    BENCH_STACKS,
    HPA_KNOB,
    default_kube_scheduler,
    default_kube_scheduler_hpa,
    descheduler_hook,
    descheduler_lownodeutilization,
    hpa_hook,
    networkaware,
    threshold_autoscaler,
    threshold_hook,
    trimaran_tlp,
)
from .engine import ClusterSpec, SimConfig, Simulation
from .objective import app_costs
from .reference import REFERENCE_STACKS, offline_reference
from .stackbase import (
    AUTOSCALER_PERIOD_MIN,
    DESCHEDULER_PERIOD_MIN,
    NOT_AUTOSCALED_IMAGES,
    Knob,
    PodView,
    StackBuild,
    StackContext,
    StackFactory,
    StackInfo,
    autoscaled_workloads,
    check_knobs,
    current_replicas,
    parse_stack_name,
    pod_views,
    register_stack,
    registered_stacks,
    stack_name,
    terms_lookup,
    workload_key,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "Knob",
    "parse_stack_name",
    "stack_name",
    "DESCHEDULER_PERIOD_MIN",
    "AUTOSCALER_PERIOD_MIN",
    "NOT_AUTOSCALED_IMAGES",
    "StackContext",
    "StackBuild",
    "check_knobs",
    "registered_stacks",
    "StackFactory",
    "StackInfo",
    "register_stack",
    "available_stacks",
    "get_stack",
    "build_stack",
    "run_stack",
    "terms_lookup",
    "workload_key",
    "autoscaled_workloads",
    "PodView",
    "pod_views",
    "current_replicas",
    "default_kube_scheduler",
    "hpa_hook",
    "default_kube_scheduler_hpa",
    "threshold_hook",
    "threshold_autoscaler",
    "descheduler_hook",
    "descheduler_lownodeutilization",
    "networkaware",
    "trimaran_tlp",
    "HPA_KNOB",
    "offline_reference",
    "REFERENCE_STACKS",
    "BENCH_STACKS",
]


ENTRY_POINT_GROUP = "hrl_scheduler.stacks"


def _entry_points() -> list[metadata.EntryPoint]:
    return list(metadata.entry_points(group=ENTRY_POINT_GROUP))


def available_stacks() -> dict[str, StackInfo]:
    """Every stack by name: the built-ins, then those of the ``hrl_scheduler.stacks`` entry points (loaded
    here). Raises ValueError when an entry point reuses a built-in name or cannot be loaded."""
    builtin = registered_stacks()
    out = dict(builtin)
    for ep in _entry_points():
        if ep.name in builtin:
            raise ValueError(
                f"entry point {ep.name!r} ({ep.value}) of group {ENTRY_POINT_GROUP}: the name of a built-in stack"
            )
        try:
            fn = ep.load()
        except Exception as exc:
            raise ValueError(
                f"entry point {ep.name!r} ({ep.value}) of group {ENTRY_POINT_GROUP}: cannot load: {exc}"
            ) from exc
        if not callable(fn):
            raise ValueError(f"entry point {ep.name!r} ({ep.value}): not a callable stack factory")
        out[ep.name] = StackInfo(ep.name, fn, (fn.__doc__ or "").strip().split("\n")[0], f"entry point {ep.value}")
    return out


def get_stack(name: str) -> StackInfo:
    """The stack called ``name`` (``base`` or ``base@knob=value,...``; the knobs are validated). Raises
    ValueError listing the known names when there is none, or naming a bad knob or value."""
    base, params = parse_stack_name(name)
    builtin = registered_stacks()
    if base in builtin:
        info = builtin[base]
    else:
        stacks = available_stacks()
        if base not in stacks:
            raise ValueError(f"policy: unknown stack {base!r} (known: {', '.join(sorted(stacks))})")
        info = stacks[base]
    check_knobs(info, name, params)
    return info


def build_stack(name: str, ctx: StackContext) -> StackBuild:
    """Build stack ``name`` (``base@knob=value,...`` sets knobs, see :class:`Knob`) for one run. Raises
    ValueError for an unknown name, a bad knob, or a factory that does not return a :class:`StackBuild`."""
    info = get_stack(name)
    params = check_knobs(info, name, parse_stack_name(name)[1])
    if params or ctx.params:
        ctx = replace(ctx, params=params)
    built = info.factory(ctx)
    if not isinstance(built, StackBuild):
        raise ValueError(
            f"stack {name!r} ({info.origin}): factory returned {type(built).__name__}, "
            "expected policy.sim.stacks.StackBuild"
        )
    return built


def run_stack(
    name: str,
    app: AppSpec,
    rps: Sequence[float],
    cluster: ClusterSpec,
    config: SimConfig,
    progress: Callable[[int], None] | None = None,
    on_minute: Callable[[Simulation], None] | None = None,
    *,
    bundles: str | Path | None = None,
):
    """Build stack ``name`` and run one simulation; returns the :class:`~policy.sim.engine.SimResult`.
    ``progress(minute)`` after each minute; ``on_minute(sim)`` too, to read the simulation's state (it must
    not change it); ``bundles``: the bundles root the learned stacks load (:attr:`StackContext.bundles`; None: the
    committed ``policy/bundles``)."""
    rate = np.asarray(rps, dtype=np.float64)
    root = None if bundles is None else Path(bundles)
    built = build_stack(name, StackContext(app, cluster, config.seed, config, rps=rate, bundles=root))
    try:
        sim = built.simulation(app, rps, cluster, config)
        if on_minute is None:
            res = sim.run(progress)
        else:
            if built.before_minute is None:
                sim.start()
            while sim.minute < config.minutes:
                m = sim.minute
                sim.advance()
                on_minute(sim)
                if progress is not None:
                    progress(m)
            res = sim.result()
        if built.counters is not None:
            res.extra["counters"] = {str(k): float(v) for k, v in built.counters().items()}
        costs = app_costs(app, res.series)
        res.extra["objective"] = float(costs.mean()) if len(costs) else 0.0
        return res
    finally:
        if built.close is not None:
            built.close()
