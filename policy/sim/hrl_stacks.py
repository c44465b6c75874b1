"""hrl-scheduler's learned stacks for the simulator (`make bench`, ``hrl-policy simulate --policy NAME``),
registered by name with :func:`policy.sim.stackbase.register_stack` (listed by :mod:`policy.sim.stacks`). They run
the descheduler's own cycle as a library: the simulation side imports :mod:`descheduler`; the descheduler never
imports the simulator (the import contracts in pyproject.toml).

Every stack is the product wired as in a cluster:

- **low level**: the learned placement policy of the stack's bundle, plugged into kube-scheduler's default
  profile as an extender (``InProcessExtender``, weight 2 as the shipped KubeSchedulerConfiguration: each 0..10
  score × 2 × 10 is added to the in-tree plugins' sum), fed with the current cluster index and the intent;
- **high level**: :class:`policy.highlevel.HierarchicalPolicy` driven by the real :func:`descheduler.loop.run_once`
  (guards, caps, cooldown, the bounds of ``scaling``) once per simulated minute: replica targets every minute
  through the simulator's scale subresource (:class:`policy.sim.subresources.SimScaler`), moves every 5 simulated
  minutes through its Eviction API, in-place CPU resizes every minute when the configuration's ``resize`` is
  enabled (:data:`SIM_DESCHEDULER_CONFIG`: it is) and the variant resizes (:class:`policy.highlevel.ResizePlanner`
  through :class:`policy.sim.subresources.SimResizer`, i.e. ``sim.resize(pod_key, cpu_request_m=...)``; a simulator
  without ``resize`` answers ``unsupported`` to each and the run goes on), and the intent of each cycle passed
  down to the low level.

=====================  ===================================================================================
stack                  what differs from ``hrl-scheduler`` (bundles under ``policy/bundles/<stack>/``)
=====================  ===================================================================================
``hrl-scheduler``      the full hierarchy: ``low/`` placement on service embeddings, ``high/`` DRPC students
                       (distilled from the teacher), intent from cluster utilisation × forecast
``hrl-ensemble``       each level the mean of the training seeds' networks: ``low/`` and ``high/`` hold an
                       ``ensemble.json`` naming ``hrl-scheduler``'s bundles of training seeds 0, 1, 2
                       (:class:`policy.lowlevel.PlacementEnsemble`, :class:`policy.highlevel.IntentEnsemble`)
``hrl-no-encoder``     ``low/`` and ``high/`` trained on flat per-service features instead of embeddings
``hrl-flat``           no hierarchy: the low level never gets an intent (always the INTENT_SPEC defaults,
                       and its ``low/`` bundle is trained that way), the students of ``high/`` are trained by
                       TD3 alone (no teacher, no distillation), and moves are planned with the default intent
                       too; everything else (moves by the low level's scores, replica targets) is unchanged,
                       so the ablation isolates the coordination from above
``hrl-no-rebalance``   no moves (no evictions at all); intent and replica targets as ``hrl-scheduler``
``hrl-no-autoscale``   fixed replicas (the manifests'); only ``low/`` is loaded
``hrl-no-resize``      no in-place resizes; ``hrl-scheduler``'s bundles
``hrl-no-shield``      the autoscaler's saturation shield off (the last-resort guardrail); ``hrl-scheduler``'s
                       bundles
=====================  ===================================================================================

Every learned stack reports, per run (``SimResult.extra["counters"]``), how often each guardrail changed a replica
target (``guardrail_saturation_shield``, ``guardrail_stabilization``) or held the limit target off a service that
was not calm (``guardrail_limit_target_held``), how often the extender failed open
(``extender_failed_open``), how often the learned high level fell back to its tuned constant (``intent_fallbacks``:
periods; ``intent_service_fallbacks``: services given the constant's target alone, their rows outside the training
states; ``intent_lean_capped``: targets lowered to the bundle's lean margin; ``intent_no_burst_capped``: those of
services without room to burst lowered to its no-burst margin), what became of its moves
(:data:`MOVE_COUNTERS`, with their reasons) and what every action of its cycles came to, as the simulated API answered
it (``actions_<kind>_<outcome>``: kind ``move``, ``scale`` or ``resize``, the outcomes of
:class:`descheduler.loop.CycleReport`; e.g. ``actions_resize_resized`` counts resizes the API server took,
``actions_resize_no_room`` those it refused): a refused action counts as refused. Moves are make-before-break
(:mod:`descheduler.surge` through :class:`policy.sim.subresources.SimMover`: the Deployment scaled up by one, the new
pod steered to the target by the pending-move record the cycle publishes next to the intent, the old pod marked with the
lowest deletion cost and scaled away once the new one is Ready), else evictions behind the guards; each priced by the
move cost model (:class:`policy.highlevel.MoveCostModel`, against the application's SLO and manifest CPU).

``drpc`` (DRPC's TD3 autoscaling with default placement) is a stack of ``policy.sim.drpc``.

Every learned stack takes the knob ``tseed`` (:data:`policy.sim.stackbase.TRAINING_SEED_KNOB`):
``hrl-scheduler@tseed=1`` runs the bundles of training seed 1, ``policy/bundles/seeds/1/<folder>/{low,high}`` (and the
encoder ``seeds/1/encoder`` when there is one); ``tseed=0`` (the default) is the committed ``policy/bundles/<folder>``.
A run given another bundles root (:attr:`policy.sim.stackbase.StackContext.bundles`: ``--bundles DIR`` of
``hrl-policy simulate`` and ``python -m policy.bench``, e.g. the bundles ``hrl-policy train --app`` wrote) reads
``DIR/<folder>`` and ``DIR/seeds/N/<folder>`` instead, in the same layout.
The bench runs each learned stack at several training seeds to measure the spread that training alone causes.

A factory raises :class:`policy.bundle.BundleMissing` naming the path when a bundle is missing (a training seed
without bundles included): the benchmark never falls back silently to a heuristic or to another seed's bundles. Tests
and the demo build the same stacks from other parts with :func:`build_hrl_stack` (``parts=``).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from descheduler.config import DeschedulerConfiguration, load_descheduler_config, resize_planner_from_config
from descheduler.guards import EvictionHistory
from descheduler.loop import CycleDeps, CycleReport, run_once
from policy.baselines.kube_default import default_score_plugins
from policy.bundle import is_ensemble, require_seed_bundle, training_seed_root
from policy.cache import InMemoryEmbeddingCache, IntentEntry
from policy.highlevel import (
    FixedIntent,
    HierarchicalPolicy,
    IntentAutoscaler,
    IntentEnsemble,
    IntentPolicy,
    ReplicaAutoscaler,
    UtilizationIntent,
    load_intent_policy,
    load_learned_autoscaler,
)
from policy.highlevel.tuned import tuned_burst
from policy.index import ClusterIndex
from policy.intent import Intent
from policy.live import signal_readers
from policy.lowlevel import PlacementPolicy, TopologyHeuristic, load_placement

from .drpc import signals_from_sim
from .engine import BACKGROUND_NAMESPACE, PeriodicHook, Simulation
from .kube_scheduler import InProcessExtender, KubeSchedulerModel
from .objective import reference_cores
from .stackbase import (
    AUTOSCALER_PERIOD_MIN,
    DESCHEDULER_PERIOD_MIN,
    INTENT_AUTOSCALER_KNOBS,
    TRAINING_SEED_KNOB,
    Knob,
    StackBuild,
    StackContext,
    autoscaled_workloads,
    register_stack,
    terms_lookup,
    training_seed,
)
from .subresources import SimMover, SimResizer, SimScaler

__all__ = [
    "HrlVariant",
    "VARIANTS",
    "StackParts",
    "bundles_root",
    "EXTENDER_WEIGHT",
    "MOVE_MARGIN",
    "SIM_DESCHEDULER_CONFIG",
    "MOVE_COUNTERS",
    "sim_descheduler_config",
    "load_parts",
    "build_hrl_stack",
    "hrl_planner",
    "hrl_scheduler",
    "hrl_ensemble",
    "hrl_no_encoder",
    "hrl_flat",
    "hrl_no_rebalance",
    "hrl_no_autoscale",
    "hrl_no_resize",
    "hrl_no_shield",
]

#: The extender's weight in the shipped KubeSchedulerConfiguration (manifests/).
EXTENDER_WEIGHT = 2
#: Score points (0..10) the best other node must beat the pod's node by before a move: a move costs the
#: requests in flight on the evicted pod and a start-up delay, so small differences are not worth it.
MOVE_MARGIN = 2.0

#: The descheduler's configuration inside the simulator: the shipped caps and cooldown, the background
#: tenants' namespace excluded, replicas within 1..10 (as the HPA baseline), at most 4 added or removed per
#: Deployment per minute (the HPA's default scale-up policy: 4 pods per period), in-place resizes with the
#: ``resize`` section's defaults except a 120 s per-pod cooldown (two simulated minutes), its cycle every simulated
#: minute (``intervalSeconds`` 60: a make-before-break move's two pods overlap one cycle) and make-before-break moves
#: with the ``moves`` section's defaults (:func:`sim_descheduler_config` sets the cost model's SLO and CPU reference
#: to the application's).
SIM_DESCHEDULER_CONFIG: Mapping[str, Any] = {
    "apiVersion": "hrl-scheduler.io/v1alpha1",
    "kind": "DeschedulerConfiguration",
    "intervalSeconds": 60,
    # the in-process extender reads the pending-move record when it scores: the scale-up needs no delay
    "moves": {"steerDelaySeconds": 0},
    "excludedNamespaces": ["kube-system", BACKGROUND_NAMESPACE],
    "planner": {"name": "hierarchical"},
    "scaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 10, "maxStepPerCycle": 4},
    "resize": {"enabled": True, "cooldownSeconds": 120},
}


def sim_descheduler_config(app: Any = None) -> DeschedulerConfiguration:
    """:data:`SIM_DESCHEDULER_CONFIG` loaded; with an ``app`` (:class:`policy.sim.app.AppSpec`) the move cost model
    prices latency against its p95 SLO and CPU against its manifest requests (the objective's own ``S`` and ``C0``,
    :mod:`policy.sim.objective`), as an operator sets ``moves.costModel.sloP95Ms`` / ``cpuReferenceCores``."""
    doc: dict[str, Any] = dict(SIM_DESCHEDULER_CONFIG)
    if app is not None:
        doc["moves"] = {
            **doc["moves"],
            "costModel": {"sloP95Ms": float(app.slo_p95_ms), "cpuReferenceCores": float(reference_cores(app))},
        }
    return load_descheduler_config(doc)


@dataclass(frozen=True)
class HrlVariant:
    """One learned stack: its ``name`` (also its bundle folder), whether it plans moves (``rebalance``), has
    replica targets (``autoscale``), passes the intent down (``pass_intent``) and resizes pods in place
    (``resize``, when the configuration's ``resize`` section is enabled too), keeps the autoscaler's saturation
    ``shield``, the folder of ``policy/bundles`` it loads (``bundles``; empty: its name), and a one-line
    description."""

    name: str
    rebalance: bool = True
    autoscale: bool = True
    pass_intent: bool = True
    shield: bool = True
    resize: bool = True
    bundles: str = ""
    description: str = ""

    @property
    def folder(self) -> str:
        """The bundle folder under ``policy/bundles``."""
        return self.bundles or self.name


VARIANTS: dict[str, HrlVariant] = {
    v.name: v
    for v in (
        HrlVariant(
            "hrl-scheduler",
            description="learned placement (extender) + hierarchical descheduler: DRPC "
            "replica targets, moves by the low level's scores, intent",
        ),
        HrlVariant(
            "hrl-ensemble",
            description="hrl-scheduler with both levels the mean of the training seeds' networks (ensembles)",
        ),
        HrlVariant("hrl-no-encoder", description="hrl-scheduler on flat per-service features (no graph encoder)"),
        HrlVariant(
            "hrl-flat", pass_intent=False, description="no hierarchy: no intent passed down, students without a teacher"
        ),
        HrlVariant("hrl-no-rebalance", rebalance=False, description="hrl-scheduler without moves (no evictions)"),
        HrlVariant("hrl-no-autoscale", autoscale=False, description="hrl-scheduler with fixed replicas"),
        HrlVariant(
            "hrl-no-resize", resize=False, bundles="hrl-scheduler", description="hrl-scheduler without in-place resizes"
        ),
        HrlVariant(
            "hrl-no-shield",
            shield=False,
            bundles="hrl-scheduler",
            description="hrl-scheduler with the autoscaler's saturation shield off",
        ),
    )
}


def bundles_root(ctx: StackContext) -> Path:
    """The bundles root of the run's training seed (:func:`policy.bundle.training_seed_root`) under the run's bundles
    root (``ctx.bundles``; None: the committed ``policy/bundles``)."""
    return training_seed_root(training_seed(ctx), ctx.bundles)


@dataclass(frozen=True)
class StackParts:
    """The learned parts a stack runs: the low-level ``placement``, the ``autoscaler`` (``None`` for a variant
    without replica targets) and the high level's ``intent_policy`` (``None``: the hand rule
    :class:`~policy.highlevel.UtilizationIntent`, or no intent for a variant that passes none)."""

    placement: PlacementPolicy
    autoscaler: ReplicaAutoscaler | None = None
    intent_policy: IntentPolicy | None = None


def served_burst(ctx: StackContext, root: str | Path) -> float:
    """The ``burst`` the intent's autoscaler runs with (:attr:`policy.highlevel.IntentAutoscaler.burst`): the stack's
    knob ``burst`` where the name sets it, else the tuned constant's under ``root``
    (``<root>/hrl-scheduler/high/constant.json``, :func:`policy.highlevel.tuned.tuned_burst`; 0 without one), as the
    descheduler reads it beside its intent bundle. Raises ValueError for a malformed ``constant.json``."""
    if "burst" in ctx.params:
        return float(ctx.params["burst"])
    return tuned_burst(Path(root) / "hrl-scheduler" / "high")


def load_parts(variant: HrlVariant, ctx: StackContext, root: str | Path | None = None) -> StackParts:
    """Load ``<root>/<variant>/low`` (and ``high`` when the variant autoscales; the intent's autoscaler with
    :func:`served_burst`); ``root`` defaults to the bundles of
    the run's training seed (knob ``tseed``: 0 ``policy/bundles``, N ``policy/bundles/seeds/N``). Raises
    :class:`policy.bundle.BundleMissing` naming the missing path (a training seed without bundles included: never a
    fallback to another seed's), and whatever the loaders raise for a bad bundle."""
    base = Path(root) if root is not None else bundles_root(ctx)
    over = dict(ctx.parts)
    if "placement" not in over and not ctx.params.get("heuristic"):
        require_seed_bundle(base / variant.folder / "low", f"{variant.name} low-level placement", training_seed(ctx))
    placement = over.get("placement") or (
        TopologyHeuristic() if ctx.params.get("heuristic") else load_placement(base / variant.folder / "low")
    )
    workloads = autoscaled_workloads(ctx.app)
    high = base / variant.folder / "high"
    intent = over.get("intent_policy")
    if intent is None and variant.pass_intent and ((high / "intent" / "manifest.json").is_file() or is_ensemble(high)):
        intent = load_intent_policy(high, slo_p95_ms=ctx.app.slo_p95_ms, workloads=workloads)
        if "pessimism" in ctx.params:
            if not isinstance(intent, IntentEnsemble):
                raise ValueError(f"knob pessimism: {high} is not an intent ensemble (no ensemble.json)")
            intent.pessimism = float(ctx.params["pessimism"])
    auto = over.get("autoscaler")
    if auto is None and variant.autoscale:
        if intent is not None:  # the learned high level's capacity targets, carried out per Deployment
            featurizer = getattr(intent, "featurizer", None)  # LearnedIntent, IntentEnsemble (its first member's)
            predictor = featurizer.local.predictor if featurizer is not None else None
            auto = IntentAutoscaler(
                workloads=tuple(workloads),
                forecaster=predictor,
                shield=variant.shield,
                burst=served_burst(ctx, base),
                **({"forecast_min": float(ctx.params["forecast_min"])} if "forecast_min" in ctx.params else {}),
                entry_forecast=bool(ctx.params.get("entry_forecast", 0)),
                **({"limit_target": float(ctx.params["limit_target"])} if "limit_target" in ctx.params else {}),
            )
        else:
            auto = load_learned_autoscaler(high, workloads, slo_p95_ms=ctx.app.slo_p95_ms, shield=variant.shield)
    # knobs of the intent's autoscaler: refused where another one runs, or where the caller gave one (built without)
    for knob in (k.name for k in INTENT_AUTOSCALER_KNOBS):
        if knob in ctx.params and (not isinstance(auto, IntentAutoscaler) or over.get("autoscaler") is not None):
            raise ValueError(
                f"knob {knob}: this stack's replica targets do not come from the learned intent (no {high / 'intent'} "
                "or an autoscaler given)"
            )
    return StackParts(placement, auto if variant.autoscale else None, intent)


def hrl_planner(
    variant: HrlVariant, parts: StackParts, cfg: DeschedulerConfiguration, workloads: tuple[str, ...]
) -> HierarchicalPolicy:
    """The high level of stack ``variant`` as the simulator runs it (periods: replica targets and resizes every
    minute, moves and the learned intent every 5 minutes), over ``parts`` and the descheduler configuration
    ``cfg``, managing ``workloads`` (``namespace/name``)."""
    resize_planner = resize_planner_from_config(cfg) if variant.resize else None
    if resize_planner is not None:
        resize_planner = replace(resize_planner, workloads=workloads)
    planner = HierarchicalPolicy(
        autoscaler=parts.autoscaler if variant.autoscale else None,
        intent_policy=parts.intent_policy
        if parts.intent_policy is not None and variant.pass_intent
        else (UtilizationIntent() if variant.pass_intent else FixedIntent()),
        intent_period_s=DESCHEDULER_PERIOD_MIN * 60.0 if parts.intent_policy is not None else 0.0,
        rebalance=variant.rebalance,
        margin=MOVE_MARGIN,
        overload_threshold=cfg.planner.overload_threshold,
        max_moves=cfg.planner.max_moves,
        max_moves_per_service=cfg.planner.max_moves_per_service,
        moves_period_s=DESCHEDULER_PERIOD_MIN * 60.0,
        scale_period_s=AUTOSCALER_PERIOD_MIN * 60.0,
        resizer=resize_planner,
        resize_period_s=AUTOSCALER_PERIOD_MIN * 60.0,
        workloads=workloads,
        excluded_namespaces=tuple(cfg.excluded_namespaces),
        evict_local_storage_pods=cfg.evict_local_storage_pods,
        name=f"{variant.name}-planner",
    )
    return planner


def build_hrl_stack(
    name: str,
    ctx: StackContext,
    parts: StackParts | None = None,
    *,
    root: str | Path | None = None,
    config: DeschedulerConfiguration | None = None,
    reports: list[CycleReport] | None = None,
) -> StackBuild:
    """Build learned stack ``name`` (a key of :data:`VARIANTS`) for one simulation (see the module docstring).

    ``parts``: the placement and autoscaler to run (default: :func:`load_parts` from ``root``); ``config``:
    the descheduler's configuration (default :func:`sim_descheduler_config`); ``reports``: a list that receives
    every cycle's :class:`~descheduler.loop.CycleReport`. Raises ``ValueError`` for an unknown name and
    :class:`policy.bundle.BundleMissing` for a missing bundle."""
    if name not in VARIANTS:
        raise ValueError(f"unknown learned stack {name!r} (known: {', '.join(VARIANTS)})")
    variant = VARIANTS[name]
    if parts is None:
        parts = load_parts(variant, ctx, root)
    cfg = config if config is not None else sim_descheduler_config(ctx.app)
    weight = int(ctx.params.get("weight", EXTENDER_WEIGHT))
    if "weight" in ctx.params:  # the descheduler predicts the scheduler it runs beside (a given config's is kept)
        cfg = cfg.model_copy(
            update={"scheduler_prediction": cfg.scheduler_prediction.model_copy(update={"extender_weight": weight})}
        )
    planner = hrl_planner(variant, parts, cfg, tuple(autoscaled_workloads(ctx.app)))
    resize_planner = planner.resizer
    placement = parts.placement
    # the intent crosses from the descheduler to the extender as in a cluster: through the embedding cache's intent
    # record, in the wire form of the one codec (policy.intent.Intent.to_wire / from_wire)
    cache = InMemoryEmbeddingCache()
    shared: dict[str, Any] = {"index": None, "intent": None, "version": 0, "moves": (), "now": 0.0}

    def on_change(snapshot) -> None:
        shared["index"] = ClusterIndex.build(snapshot)
        shared["now"] = float(snapshot.taken_at_s)

    def fetch() -> None:
        found = cache.get_intent(shared["version"]).entry
        if isinstance(found, IntentEntry):
            shared["version"], shared["moves"] = found.version, found.pending_moves
            shared["intent"] = Intent.from_wire(found.names, found.values) if variant.pass_intent else None

    def view():
        fetch()
        return shared["index"], shared["intent"]

    def pending():
        fetch()
        return shared["moves"], shared["now"]

    extender = InProcessExtender(placement, view, weight=weight, pending=pending)
    scheduler = KubeSchedulerModel(plugins=default_score_plugins(terms_lookup(ctx.app)), extenders=[extender])
    history = EvictionHistory()
    tally = _RunTally()

    def cycle(sim: Simulation) -> None:
        readers = signal_readers(planner)
        if readers:  # the students and the learned high level read the mesh-like service metrics
            signals = signals_from_sim(sim)
            for x in readers:
                x.signals = signals
        report = run_once(
            CycleDeps(
                sim.observe,
                sim.evictor,
                planner,
                placement,
                cfg,
                history=history,
                scaler=SimScaler(sim),
                resizer=SimResizer(sim) if resize_planner is not None else None,
                mover=SimMover(sim),
            ),
            sim.now_s,
        )
        # the intent and the make-before-break moves in progress, in one record (a stack that passes no intent
        # publishes an empty vector: its extender scores with the defaults, and still steers the moved pods)
        names, values = report.intent.to_wire() if variant.pass_intent else ([], [])
        cache.put_intent(values, names, source="hrl-descheduler", pending_moves=report.pending_moves)
        tally.add(report)
        if reports is not None:
            reports.append(report)

    def counters() -> dict[str, float]:
        return tally.counters(planner, extender)

    hook = PeriodicHook("hrl-descheduler", AUTOSCALER_PERIOD_MIN, cycle, at_start=True)
    return StackBuild(
        scheduler,
        hooks=(hook,),
        scheduler_name="hrl-scheduler",
        on_change=on_change,
        counters=counters,
        handles={"planner": planner, "placement": placement, "extender": extender, "config": cfg},
    )


#: The move counters every learned stack reports (``SimResult.extra["counters"]``), totals over the run: moves begun
#: make-before-break, finished, given up, made by the Eviction API, planned but not made; the reasons follow as
#: ``moves_aborted_<reason>`` (:data:`descheduler.surge.ABORT_REASONS`), ``moves_refused_<reason>`` (the first
#: blocker: a guard, ``cost``, ``surge``; or ``eviction_refused``, ``not_found``, ``skipped``, ``error``) and
#: ``moves_fallback_<reason>`` (why a move could not be made make-before-break,
#: :data:`descheduler.surge.SURGE_REFUSALS`), present when not zero; a reason is written in snake case
#: (:func:`_counter_key`), as the bench's summary requires of every counter name.
MOVE_COUNTERS: tuple[str, ...] = ("moves_surged", "moves_completed", "moves_aborted", "moves_evicted", "moves_refused")


_TOTALS = ("surged", "completed", "aborted", "evicted", "refused")


class _RunTally:
    """What a learned stack's cycles did over one run: the moves' counters (:data:`MOVE_COUNTERS` and their
    reasons), what every API call answered (``<kind>_<outcome>`` -> count) and the evictions of lost nodes' pods
    (``node_loss_<outcome>``, :mod:`descheduler.nodeloss`), for ``StackBuild.counters``."""

    def __init__(self) -> None:
        self.moves: Counter[str] = Counter()
        self.actions: Counter[str] = Counter()
        self.node_loss: Counter[str] = Counter()

    def add(self, report: CycleReport) -> None:
        self.moves.update(_move_counters(report))
        self.node_loss.update({k: n for k, n in report.node_loss_counts.items() if n})
        for kind, counts in (("move", report.counts), ("scale", report.scale_counts), ("resize", report.resize_counts)):
            self.actions.update({f"{kind}_{outcome}": n for outcome, n in counts.items() if n})

    def counters(self, planner: Any, extender: InProcessExtender) -> dict[str, float]:
        out = {"guardrail_saturation_shield": 0.0, "guardrail_stabilization": 0.0, "guardrail_limit_target_held": 0.0}
        for k, v in (getattr(planner.autoscaler, "guardrail_counts", None) or {}).items():
            out[f"guardrail_{k}"] = float(v)
        out["extender_failed_open"] = float(extender.calls.get("failed_open", 0))
        for k in MOVE_COUNTERS:
            out[k] = float(self.moves.get(k, 0))
        out.update({k: float(v) for k, v in sorted(self.moves.items()) if k not in MOVE_COUNTERS})
        intent_policy = getattr(planner.intent_policy, "base", planner.intent_policy)
        out["intent_fallbacks"] = float(getattr(intent_policy, "fallbacks", 0))
        out["intent_service_fallbacks"] = float(getattr(intent_policy, "service_fallbacks", 0))
        out["intent_lean_capped"] = float(getattr(intent_policy, "lean_capped", 0))
        out["intent_no_burst_capped"] = float(getattr(intent_policy, "no_burst_capped", 0))
        out.update({f"actions_{k}": float(v) for k, v in sorted(self.actions.items())})
        out["node_loss_evicted"] = float(self.node_loss.get("evicted", 0))
        out.update({f"node_loss_{k}": float(v) for k, v in sorted(self.node_loss.items()) if k != "evicted"})
        return out


def _move_counters(report: CycleReport) -> Counter[str]:
    """One cycle's :attr:`~descheduler.loop.CycleReport.move_counts` as the run's counter keys."""
    c = report.move_counts
    out: Counter[str] = Counter({f"moves_{k}": int(c[k]) for k in _TOTALS})
    for group, prefix in (
        ("aborted_by_reason", "moves_aborted"),
        ("refused_by_reason", "moves_refused"),
        ("fallback_by_reason", "moves_fallback"),
    ):
        for reason, n in c[group].items():
            out[_counter_key(prefix, reason)] += int(n)
    return out


def _counter_key(prefix: str, reason: str) -> str:
    """``<prefix>_<reason>`` in snake case (``moves_refused`` + ``cost`` -> ``moves_refused_cost``)."""
    return f"{prefix}_{re.sub(r'[^a-z0-9_]+', '_', reason.lower()).strip('_') or 'unknown'}"


@register_stack("hrl-scheduler", knobs=(TRAINING_SEED_KNOB, *INTENT_AUTOSCALER_KNOBS))
def hrl_scheduler(ctx: StackContext) -> StackBuild:
    """hrl-scheduler: learned placement (extender) + hierarchical descheduler (DRPC replica targets every
    minute, moves every 5 minutes, intent passed down); bundles policy/bundles/hrl-scheduler/{low,high}."""
    return build_hrl_stack("hrl-scheduler", ctx)


#: The knob of ``hrl-ensemble`` that moves each service's capacity target from the members' mean towards their
#: lowest (:func:`policy.highlevel.mean_intent`); absent: the ensemble file's.
PESSIMISM_KNOB = Knob(
    "pessimism",
    0.0,
    1.0,
    help="each service's capacity target between the high-level members' mean (0) and their lowest (1)",
)


#: The knobs of ``hrl-ensemble`` that change its low level's part in kube-scheduler's decision: the extender's weight
#: in the profile, and the topology heuristic in place of the learned placement (research: how much of the p95 at
#: equal CPU co-location buys, and at what risk).
WEIGHT_KNOB = Knob(
    "weight", 1, 100, integer=True, help="the extender's weight in kube-scheduler's profile (as shipped and trained: 2)"
)
HEURISTIC_KNOB = Knob(
    "heuristic",
    0,
    1,
    integer=True,
    help="1: the topology heuristic (policy.lowlevel.TopologyHeuristic) scores in place of the learned placement",
)


@register_stack(
    "hrl-ensemble",
    knobs=(*INTENT_AUTOSCALER_KNOBS, PESSIMISM_KNOB, WEIGHT_KNOB, HEURISTIC_KNOB),
)
def hrl_ensemble(ctx: StackContext) -> StackBuild:
    """hrl-scheduler with each level an ensemble of the training seeds' networks (the mean logit of the placements,
    the mean intent of the high levels: policy.lowlevel.PlacementEnsemble, policy.highlevel.IntentEnsemble);
    policy/bundles/hrl-ensemble/{low,high}/ensemble.json. No ``tseed`` knob: its members are the training seeds;
    knob ``pessimism``: each capacity target between the members' mean and lowest (default: the ensemble's
    pessimism.json, else the mean); ``weight``: the extender's weight in the scheduler profile (default 2, as
    shipped); ``heuristic=1``: the topology heuristic in place of the learned placement."""
    return build_hrl_stack("hrl-ensemble", ctx)


@register_stack("hrl-no-encoder", knobs=(TRAINING_SEED_KNOB,))
def hrl_no_encoder(ctx: StackContext) -> StackBuild:
    """hrl-scheduler on flat per-service features instead of graph embeddings (ablation); bundles
    policy/bundles/hrl-no-encoder/{low,high}."""
    return build_hrl_stack("hrl-no-encoder", ctx)


@register_stack("hrl-flat", knobs=(TRAINING_SEED_KNOB,))
def hrl_flat(ctx: StackContext) -> StackBuild:
    """No hierarchy (ablation): no intent passed down, students trained without a teacher; bundles
    policy/bundles/hrl-flat/{low,high}."""
    return build_hrl_stack("hrl-flat", ctx)


@register_stack("hrl-no-resize", knobs=(TRAINING_SEED_KNOB,))
def hrl_no_resize(ctx: StackContext) -> StackBuild:
    """hrl-scheduler without in-place resizes (ablation); hrl-scheduler's bundles."""
    return build_hrl_stack("hrl-no-resize", ctx)


@register_stack("hrl-no-shield", knobs=(TRAINING_SEED_KNOB,))
def hrl_no_shield(ctx: StackContext) -> StackBuild:
    """hrl-scheduler with the autoscaler's saturation shield off (ablation); hrl-scheduler's bundles."""
    return build_hrl_stack("hrl-no-shield", ctx)


@register_stack("hrl-no-rebalance", knobs=(TRAINING_SEED_KNOB,))
def hrl_no_rebalance(ctx: StackContext) -> StackBuild:
    """hrl-scheduler without moves (ablation); bundles policy/bundles/hrl-no-rebalance/{low,high}."""
    return build_hrl_stack("hrl-no-rebalance", ctx)


@register_stack("hrl-no-autoscale", knobs=(TRAINING_SEED_KNOB,))
def hrl_no_autoscale(ctx: StackContext) -> StackBuild:
    """hrl-scheduler with fixed replicas (ablation); bundle policy/bundles/hrl-no-autoscale/low."""
    return build_hrl_stack("hrl-no-autoscale", ctx)
