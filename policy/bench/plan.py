"""The policy benchmark's plan: which scenarios × apps × traces × stacks × seeds ``python -m policy.bench --quick``
(``make bench-quick``) and ``--full`` (``make bench``) run, stated in one file, ``policy/data/bench/plan.yaml``
(:data:`DEFAULT_PLAN`; another with ``--plan FILE``)::

    apiVersion: hrl-scheduler.io/v1alpha1
    kind: BenchPlan
    stacks: [default-kube-scheduler, ..., hrl-scheduler, drpc, hrl-constant, lookahead-oracle]   # every cell's
    trainingApps: [online-boutique, ...]      # apps the learned policies were trained with (labels the tables)
    heldOutApps: [dsb-social-network, ...]    # apps training never saw: generalization is judged there
    trainingSeeds: [0, 1, 2]                  # the learned stacks' training seeds (0: the committed bundles)
    skipMissingTrainingSeeds: false           # true: a training seed without bundles is skipped (said in the report)
    modes:
      quick:
        seeds: [0, 1, 2]
        minutes: 30           # run length: minutes, `scenario` (the scenario file's) or `window` (the whole trace)
        samples: 1000         # user requests sampled per minute (absent: the simulator's default, 2,000)
        sweep: quick          # the baselines' knob sweep: quick | full | none (policy.bench.pareto.sweep_stacks)
        oracle: lookahead-oracle@horizon=10   # the setting of lookahead-oracle this mode runs (its knobs)
        cells:
          - {scenario: baseline-2026-11, apps: [online-boutique, dsb-social-network], traces: [nasa]}
          - {scenario: shared-cluster}          # a scenario of several apps: its own apps and traces
          - {scenario: network-edge, apps: [online-boutique], minutes: 30}

Each ``cells`` entry names a scenario (a built-in name or a scenario YAML file) and, for a one-app scenario, the
apps and traces it runs (their product; absent: the scenario's own app and trace) and optionally its own run
length. A scenario of several apps is one cell whose app and trace are the scenario's own, joined with ``+``.
Every run is centred on the peak of its (first) trace's window (:func:`policy.sim.scenario.scenario_window_offset`).

Narrowing (:func:`plan_cells`): ``--scenarios`` keeps the cells of those scenarios (a scenario the mode does not
plan runs its own app and trace); ``--apps`` / ``--traces``: every selected one-app scenario runs exactly those
apps / traces instead of the planned ones (built-in names, your own app.yaml or trace CSV); a scenario of several
apps keeps its own apps and traces (leave it out with ``--scenarios``).

**Training seeds**: every planned stack with the knob ``tseed`` (the learned stacks,
:data:`policy.sim.stackbase.TRAINING_SEED_KNOB`) but the targets (``lookahead-oracle``, ``hrl-constant``, run on the
committed bundles) runs at each of ``trainingSeeds`` (:func:`learned_runs`); 0 must be one of them (the committed
bundles the tables report). A training seed whose bundles are absent fails the bench unless
``skipMissingTrainingSeeds`` is true; then it is left out, and the report says so.

**The oracle**: a mode's ``oracle`` is the setting of ``lookahead-oracle`` it runs in place of the plain name in
``stacks`` (its knobs: horizon, candidates; validated like any stack name).

A plan error is a :class:`~policy.config.ConfigError`: one line per problem, naming the field and the value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from policy.config import ConfigError, ConfigModel, load_config
from policy.sim.app import load_app
from policy.sim.scenario import load_scenario, resolve_app, scenario_window_offset
from policy.sim.stackbase import parse_stack_name, stack_name
from policy.sim.stacks import get_stack
from policy.sim.traces import load_trace

__all__ = [
    "KIND",
    "DEFAULT_PLAN",
    "PlanCellFile",
    "PlanModeFile",
    "BenchPlanFile",
    "BenchPlan",
    "load_plan",
    "Cell",
    "plan_cells",
    "ORACLE",
    "TARGETS",
    "learned_runs",
]

KIND = "BenchPlan"

#: The oracle's stack family: a mode's ``oracle`` is a setting of it.
ORACLE = "lookahead-oracle"
#: The targets: run on the committed bundles only (training seed 0), whatever ``trainingSeeds`` says.
TARGETS = (ORACLE, "hrl-constant")

#: The shipped plan.
DEFAULT_PLAN = Path(__file__).resolve().parents[1] / "data" / "bench" / "plan.yaml"

Minutes = int | Literal["scenario", "window"]


def _check_minutes(v: object) -> object:
    """One message for every bad run length (instead of one per member of the union)."""
    if v is None or v in ("scenario", "window") or (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
        return v
    raise ValueError("must be a number of minutes >= 1, 'scenario' or 'window'")


class PlanCellFile(ConfigModel):
    """One entry of a mode's ``cells``: a scenario and, for a one-app scenario, the apps × traces it runs (absent:
    its own); ``minutes`` overrides the mode's run length for these cells."""

    scenario: str = Field(min_length=1)
    apps: list[str] | None = Field(None, min_length=1)
    traces: list[str] | None = Field(None, min_length=1)
    minutes: Minutes | None = None

    _minutes = field_validator("minutes", mode="before")(_check_minutes)

    @model_validator(mode="after")
    def _unique(self) -> PlanCellFile:
        for f in ("apps", "traces"):
            v = getattr(self, f) or []
            dup = sorted({x for x in v if v.count(x) > 1})
            if dup:
                raise ValueError(f"{f}: each may appear once, got {dup} twice")
        return self


class PlanModeFile(ConfigModel):
    """A bench size: ``seeds``, run length (``minutes``: a number, ``scenario``: the scenario file's, ``window``: the
    whole trace window), ``samples`` (user requests sampled per minute; None: the simulator's default), the
    baselines' ``sweep`` and the ``cells``."""

    seeds: list[int] = Field(min_length=1)
    minutes: Minutes = "scenario"
    samples: int | None = Field(None, ge=1, le=1_000_000)
    sweep: Literal["quick", "full", "none"] = "quick"
    oracle: str = ORACLE
    cells: list[PlanCellFile] = Field(min_length=1)

    _minutes = field_validator("minutes", mode="before")(_check_minutes)

    @field_validator("oracle")
    @classmethod
    def _oracle(cls, v: str) -> str:
        if parse_stack_name(v)[0] != ORACLE:
            raise ValueError(f"must be a setting of {ORACLE} (e.g. {ORACLE}@horizon=10)")
        get_stack(v)  # a bad knob or value: ValueError naming it
        return v

    @model_validator(mode="after")
    def _checks(self) -> PlanModeFile:
        bad = [s for s in self.seeds if s < 0]
        if bad:
            raise ValueError(f"seeds: must be >= 0, got {bad}")
        dup = sorted({s for s in self.seeds if self.seeds.count(s) > 1})
        if dup:
            raise ValueError(f"seeds: each may appear once, got {dup} twice")
        return self


class BenchPlanFile(ConfigModel):
    """A plan file (module docstring)."""

    description: str = ""
    stacks: list[str] = Field(min_length=1)
    training_apps: list[str] = Field(default_factory=list)
    held_out_apps: list[str] = Field(default_factory=list)
    training_seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    skip_missing_training_seeds: bool = False
    modes: dict[str, PlanModeFile] = Field(min_length=1)

    @model_validator(mode="after")
    def _checks(self) -> BenchPlanFile:
        bad = sorted({t for t in self.training_seeds if t < 0 or self.training_seeds.count(t) > 1})
        if bad or 0 not in self.training_seeds:
            raise ValueError(
                f"trainingSeeds: distinct integers >= 0 including 0 (the committed bundles), got {self.training_seeds}"
            )
        both = sorted(set(self.training_apps) & set(self.held_out_apps))
        if both:
            raise ValueError(f"trainingApps and heldOutApps: an app is one or the other, got {both} in both")
        dup = sorted({s for s in self.stacks if self.stacks.count(s) > 1})
        if dup:
            raise ValueError(f"stacks: each may appear once, got {dup} twice")
        return self


@dataclass(frozen=True)
class BenchPlan:
    """A validated plan and the file it came from."""

    spec: BenchPlanFile
    source: str

    def mode(self, name: str) -> PlanModeFile:
        """The mode ``name``; ConfigError naming ``modes`` when the plan has no such mode."""
        if name not in self.spec.modes:
            raise ConfigError(
                self.source, [("modes", f"no mode {name!r} (the plan has {', '.join(sorted(self.spec.modes))})")]
            )
        return self.spec.modes[name]

    def role(self, app: str) -> str:
        """``"training"``, ``"held-out"`` or ``""`` (neither: e.g. a user's app, alibaba, several apps)."""
        if app in self.spec.held_out_apps:
            return "held-out"
        if app in self.spec.training_apps:
            return "training"
        return ""


def load_plan(path: str | Path | None = None) -> BenchPlan:
    """The plan at ``path`` (default :data:`DEFAULT_PLAN`). Raises :class:`~policy.config.ConfigError`."""
    p = Path(path) if path is not None else DEFAULT_PLAN
    return BenchPlan(load_config(BenchPlanFile, KIND, p), str(p))


@dataclass(frozen=True)
class Cell:
    """One cell of the bench, ready to run: ``scenario`` / ``app`` / ``trace`` as given to
    :func:`policy.sim.scenario.build` (``app`` / ``trace`` None: a scenario of several apps runs its own), the run
    length ``minutes`` and the window offset ``offset_min``; ``scenario_name``, ``family``, ``app_name`` and
    ``trace_name`` are the keys of the summary (several apps' names joined with ``+``), ``apps`` each app's name,
    ``role`` ``training`` / ``held-out`` (every app of the cell is one) or ``""``."""

    scenario: str
    app: str | None
    trace: str | None
    minutes: int
    offset_min: int
    scenario_name: str
    family: str
    app_name: str
    trace_name: str
    apps: tuple[str, ...]
    role: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        """(scenario, app, trace) names: the cell's place in summary.json."""
        return self.scenario_name, self.app_name, self.trace_name


_APP_NAMES: dict[str, str] = {}


def _app_name(ref: str) -> str:
    """The name of the app at ``ref`` (a built-in name or a path; loaded once per process)."""
    if ref not in _APP_NAMES:
        _APP_NAMES[ref] = load_app(ref).name
    return _APP_NAMES[ref]


def _common_role(plan: BenchPlan, names: Sequence[str]) -> str:
    roles = {plan.role(n) for n in names}
    return roles.pop() if len(roles) == 1 else ""


def plan_cells(
    plan: BenchPlan,
    mode: str,
    *,
    scenarios: Sequence[str] | None = None,
    apps: Sequence[str] | None = None,
    traces: Sequence[str] | None = None,
    minutes: int | None = None,
) -> list[Cell]:
    """The cells of ``mode``, narrowed as the module docstring says, in plan order (then the scenarios named that
    the mode does not plan). ``minutes`` overrides every cell's run length. Raises ConfigError (a plan entry that
    cannot run: an unknown scenario, apps or traces given for a scenario of several apps) or ValueError (a
    scenario, app or trace named on the command line that cannot be loaded)."""
    m = plan.mode(mode)
    entries: list[tuple[str, PlanCellFile]] = [(f"modes.{mode}.cells[{i}]", c) for i, c in enumerate(m.cells)]
    if scenarios is not None:
        wanted = list(dict.fromkeys(scenarios))
        entries = [(w, c) for w, c in entries if c.scenario in wanted]
        planned = {c.scenario for _w, c in entries}
        entries += [(f"--scenarios {s}", PlanCellFile(scenario=s)) for s in wanted if s not in planned]
    loaded = {}
    problems: list[tuple[str, str]] = []
    for where, c in entries:
        try:
            loaded[where] = load_scenario(c.scenario)
        except (ValueError, ConfigError) as exc:
            if where.startswith("--"):
                raise ValueError(f"{where}: {' '.join(str(exc).split())}") from None
            problems.append((f"{where}.scenario", " ".join(str(exc).split())))
            continue
        n_apps = len(loaded[where].spec.apps)
        if n_apps > 1 and (c.apps is not None or c.traces is not None):
            problems.append(
                (where, f"scenario {c.scenario!r} runs {n_apps} apps of its own: give no apps or traces for it")
            )
    if problems:
        raise ConfigError(plan.source, problems)

    # one-app entries as (where, scenario, [apps], [traces]); --apps / --traces replace their apps / traces
    single = [
        (w, c, list(c.apps or [loaded[w].spec.apps[0].app]), list(c.traces or [loaded[w].spec.apps[0].load.trace]))
        for w, c in entries
        if len(loaded[w].spec.apps) == 1
    ]
    if apps is not None:
        single = [(w, c, list(dict.fromkeys(apps)), tt) for w, c, _aa, tt in single]
    if traces is not None:
        single = [(w, c, aa, list(dict.fromkeys(traces))) for w, c, aa, _tt in single]
    by_where = {w: (aa, tt) for w, _c, aa, tt in single}

    def length(c: PlanCellFile, scn, trace: str) -> int:
        if minutes is not None:
            return minutes
        v = c.minutes if c.minutes is not None else m.minutes
        if v == "scenario":
            return scn.spec.minutes
        if v == "window":
            return len(load_trace(trace))
        return int(v)

    out: list[Cell] = []
    for where, c in entries:
        scn = loaded[where]
        if where not in by_where:  # several apps: the scenario's own
            names = tuple(_app_name(resolve_app(a.app, scn)) for a in scn.spec.apps)
            trs = tuple(a.load.trace for a in scn.spec.apps)
            T = length(c, scn, trs[0])
            out.append(
                Cell(
                    c.scenario,
                    None,
                    None,
                    T,
                    scenario_window_offset(scn, T),
                    scn.name,
                    scn.family,
                    "+".join(names),
                    "+".join(trs),
                    names,
                    _common_role(plan, names),
                )
            )
            continue
        aa, tt = by_where[where]
        for a in aa:
            ref = resolve_app(a, scn)
            name = _app_name(ref)
            for t in tt:
                T = length(c, scn, t)
                out.append(
                    Cell(
                        c.scenario,
                        ref,
                        t,
                        T,
                        scenario_window_offset(scn, T, trace=t),
                        scn.name,
                        scn.family,
                        name,
                        t,
                        (name,),
                        plan.role(name),
                    )
                )
    seen: set[tuple[str, str, str]] = set()
    dups = []
    for cell in out:
        if cell.key in seen:
            dups.append("/".join(cell.key))
        seen.add(cell.key)
    if dups:
        raise ConfigError(plan.source, [(f"modes.{mode}.cells", f"the same cell planned twice: {', '.join(dups)}")])
    return out


def learned_runs(stacks: Sequence[str], training_seeds: Sequence[int]) -> dict[str, list[str]]:
    """Per stack of ``stacks`` that runs at several training seeds (a registered stack with the knob ``tseed``, not
    set in its name, not one of the targets), the names it runs under: training seed 0 is the name itself, seed N
    ``NAME@tseed=N`` (knobs sorted, :func:`policy.sim.stackbase.stack_name`), in the order of ``training_seeds``.
    Raises ValueError for an unknown stack name or knob."""
    out: dict[str, list[str]] = {}
    for name in stacks:
        base, params = parse_stack_name(name)
        if base in TARGETS or "tseed" in params:
            continue
        if "tseed" not in {k.name for k in get_stack(name).knobs}:
            continue
        out[name] = [name if t == 0 else stack_name(base, {**params, "tseed": float(t)}) for t in training_seeds]
    return out
