"""The best constant intent (``hrl-policy train constant``): the capacity target and move budget that, held for a
whole run, cost least on the training distribution. The learned high level must beat it to earn its place (DESIGN.md
section 9), and it is the intent the learned high level falls back to outside the states it was trained on.

Grid search: every point of ``capacity_targets`` × ``move_budgets`` × ``burst_shares`` runs ``hrl-constant``
(hrl-scheduler's served stack under that one intent, its autoscaler counting that share of a Burstable pod's CPU
headroom as capacity, :attr:`policy.highlevel.IntentAutoscaler.burst`; :mod:`policy.sim.oracle`) on the same
``episodes`` training episodes
(:class:`~policy.train.intent_episodes.EpisodeDistribution`: training apps and synthetic ones, training segments of the
traces; never a held-out app, never an evaluation window), priced with the benchmark's objective
(:data:`policy.sim.objective.DEFAULT_OBJECTIVE`); the point of least mean cost per minute wins. Written to
``policy/bundles/<stack>/high/constant.json``:
``{"capacity_target", "move_budget_frac", "burst", "objective", "episodes", "tied", "grid": [{"capacity_target",
"move_budget_frac", "burst", "objective", "paired_gap", "paired_se", "cheaper_episodes", "episode_objectives"}...]}``
(``episode_objectives``: each episode's cost per minute, in the same order at every point: what a choice per episode
would gain over the constant). The learned stacks' autoscaler serves its ``burst`` in the simulator and in the
descheduler (:mod:`policy.highlevel.tuned`).

**How sure the choice is.** Every point runs the same episodes with the same seeds (common random numbers), so two
points compare episode by episode: ``paired_gap`` is a point's mean cost per minute above the chosen one's,
``paired_se`` the standard error of that per-episode difference, ``cheaper_episodes`` the episodes in which it cost
less than the chosen point; ``tied`` lists the points whose gap is within two standard errors (the search cannot tell
them from the choice). A few episodes that overload whatever the intent (about 20 to 80 per minute against 1 to 5
for most) dominate the mean, so with 12 episodes most of the grid was tied and the choice moved with the training seed
(capacity 0.6, 0.9, 0.9 at seeds 0, 1, 2); the default is 36."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from policy.bundle import DEFAULT_BUNDLES
from policy.lowlevel import load_learned_placement
from policy.sim.objective import DEFAULT_OBJECTIVE, app_costs
from policy.sim.oracle import load_tuned_constant
from policy.sim.stacks import StackContext, build_stack
from policy.telemetry import note

from .episodes import TrainingTarget
from .finetune import FineTune
from .intent_episodes import EpisodeDistribution, EpisodeSpec, episode_pieces, sample_episode_specs
from .ray_pool import TaskPool

__all__ = [
    "ConstantSearchConfig",
    "constant_cost",
    "paired_gaps",
    "search_episodes",
    "tune_constant",
    "load_constant",
    "FINE_TUNE",
    "check_fine_tune",
    "train_stage",
    "run_cli",
    "DEFAULT_CONSTANT",
]


#: The committed result of the search for hrl-scheduler.
DEFAULT_CONSTANT = DEFAULT_BUNDLES / "hrl-scheduler" / "high" / "constant.json"


@dataclass(frozen=True)
class ConstantSearchConfig(EpisodeDistribution):
    """The grid (``capacity_targets`` in [0.3, 0.95], ``move_budgets`` in [0, 1], ``burst_shares`` in [0, 1]) and the
    ``episodes`` it is judged on (30-minute episodes by default), ``workers`` Ray tasks at a time, ``seed``."""

    episode_minutes: int = 30
    capacity_targets: tuple[float, ...] = (0.5, 0.6, 0.7, 0.8, 0.9)
    move_budgets: tuple[float, ...] = (0.0,)
    burst_shares: tuple[float, ...] = (0.0, 0.25, 0.5, 1.0)
    episodes: int = 36
    workers: int = 2
    seed: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if any(not 0.3 <= c <= 0.95 for c in self.capacity_targets) or not self.capacity_targets:
            raise ValueError(f"capacity_targets: expected numbers in [0.3, 0.95], got {self.capacity_targets!r}")
        if any(not 0.0 <= b <= 1.0 for b in self.move_budgets) or not self.move_budgets:
            raise ValueError(f"move_budgets: expected numbers in [0, 1], got {self.move_budgets!r}")
        if any(not 0.0 <= b <= 1.0 for b in self.burst_shares) or not self.burst_shares:
            raise ValueError(f"burst_shares: expected numbers in [0, 1], got {self.burst_shares!r}")
        if self.episodes < 1 or self.workers < 1:
            raise ValueError(f"episodes, workers: expected integers >= 1, got {self.episodes!r}, {self.workers!r}")


def constant_cost(
    spec: EpisodeSpec,
    capacity_target: float,
    move_budget_frac: float,
    bundles_root: str | None = None,
    burst: float = 0.0,
) -> float:
    """Mean cost per minute of episode ``spec`` under ``hrl-constant`` with that intent and ``burst`` share (the
    bench's objective); ``bundles_root``: where the low level comes from (``<root>/hrl-scheduler/low``; default the
    committed one)."""
    app, rps, cluster, config = episode_pieces(spec)
    name = f"hrl-constant@budget={move_budget_frac:g},burst={burst:g},capacity={capacity_target:g}"
    parts: dict[str, Any] = {}
    low = Path(bundles_root) / "hrl-scheduler" / "low" if bundles_root else None
    if low is not None and (low / "manifest.json").is_file():
        parts["placement"] = load_learned_placement(low)
    built = build_stack(name, StackContext(app, cluster, spec.seed, config, parts=parts, rps=rps))
    res = built.simulation(app, rps, cluster, config).run()
    return float(app_costs(app, res.series, DEFAULT_OBJECTIVE).mean())


def search_episodes(dist: EpisodeDistribution, n: int, seed: int) -> list[EpisodeSpec]:
    """The ``n`` training episodes of ``dist`` a grid search judges on, for draw ``seed``: the same for every search
    of that seed (``train constant``, ``train pessimism``), so their results compare episode by episode."""
    return sample_episode_specs(dist, np.random.default_rng(20_000 + seed), n, seed0=8_000_000)


def paired_gaps(costs: np.ndarray, best: int) -> tuple[list[dict[str, Any]], list[int]]:
    """Each grid point's comparison with point ``best``, paired over the episodes (module docstring, "How sure the
    choice is"): ``costs`` is points × episodes (cost per minute, the same episodes and seeds in every row). Returns
    per point ``paired_gap`` (mean of its cost minus the best's), ``paired_se`` (the standard error of that
    difference; 0 with one episode), both rounded to 6 digits, and ``cheaper_episodes``; and the indices of the
    points other than ``best`` whose gap is within two standard errors (tied with it)."""
    out, tied = [], []
    for i, row in enumerate(costs):
        diff = row - costs[best]
        se = float(diff.std(ddof=1) / np.sqrt(len(diff))) if len(diff) > 1 else 0.0
        out.append(
            {
                "paired_gap": round(float(diff.mean()), 6),
                "paired_se": round(se, 6),
                "cheaper_episodes": int((diff < 0).sum()),
            }
        )
        if i != best and diff.mean() <= 2.0 * se:
            tied.append(i)
    return out, tied


def _point(job: tuple[EpisodeSpec, float, float, str | None, float]) -> float:
    return constant_cost(*job)


def tune_constant(
    cfg: ConstantSearchConfig = ConstantSearchConfig(),
    out: str | Path | None = None,
    *,
    ray_address: str | None = None,
    bundles_root: str | Path | None = None,
    log: Callable[[str], None] = lambda m: print(m, file=sys.stderr),
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run the grid search (module docstring); write the result to ``out`` (a ``constant.json`` path; None: do not
    write). ``bundles_root``: the low level to search over (:func:`constant_cost`); ``extra``: more keys of the
    result (a fine-tune's ``fine_tuned_from``). Returns the result."""
    t0 = time.perf_counter()
    specs = search_episodes(cfg, cfg.episodes, cfg.seed)
    points = [(c, b, u) for u in cfg.burst_shares for b in cfg.move_budgets for c in cfg.capacity_targets]
    root = None if bundles_root is None else str(bundles_root)
    jobs = [(s, c, b, root, u) for c, b, u in points for s in specs]
    pool = TaskPool(cfg.workers, ray_address)
    try:
        costs = np.array(pool.map(_point, jobs, desc="constant intent: grid")).reshape(len(points), len(specs))
    finally:
        pool.close()
    grid = [
        {
            "capacity_target": c,
            "move_budget_frac": b,
            "burst": u,
            "objective": float(costs[i].mean()),
            "episode_objectives": [round(float(x), 6) for x in costs[i]],
        }
        for i, (c, b, u) in enumerate(points)
    ]
    # ties: the larger capacity target (more room), then the smaller burst share (less reliance on idle neighbours)
    b = min(range(len(grid)), key=lambda i: (grid[i]["objective"], -grid[i]["capacity_target"], grid[i]["burst"]))
    best = grid[b]
    gaps, ties = paired_gaps(costs, b)
    for g, gap in zip(grid, gaps):
        g.update(gap)
    tied = [
        {
            "capacity_target": grid[i]["capacity_target"],
            "move_budget_frac": grid[i]["move_budget_frac"],
            "burst": grid[i]["burst"],
        }
        for i in ties
    ]
    result = {
        **{
            k: v
            for k, v in best.items()
            if k not in ("episode_objectives", "paired_gap", "paired_se", "cheaper_episodes")
        },
        "episodes": len(specs),
        "tied": tied,
        "grid": grid,
        "train_s": round(time.perf_counter() - t0, 1),
        **(extra or {}),
    }
    log(
        f"constant intent: capacity target {best['capacity_target']:g}, move budget {best['move_budget_frac']:g}, "
        f"burst {best['burst']:g}: "
        f"{best['objective']:.3f}/min over {len(specs)} training episodes; "
        f"{len(tied)} of the other {len(grid) - 1} points within two paired standard errors of it"
    )
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result


def load_constant(path: str | Path = DEFAULT_CONSTANT) -> dict[str, Any] | None:
    """The search result at ``path`` (None when there is none). Raises ValueError naming the file and the field for
    a malformed one (:func:`policy.sim.oracle.load_tuned_constant`, which ``hrl-constant`` reads it with)."""
    return load_tuned_constant(path)


#: The budget of a fine-tune (``train --all --fine-tune``; :mod:`policy.train.finetune`): a third of the episodes.
FINE_TUNE: dict[str, Any] = {"episodes": 12}

_CONSTANT = "hrl-scheduler/high/constant.json"


def _source_constant(fine_tune: FineTune) -> dict[str, Any] | None:
    """The source's ``constant.json`` (None when it has none). Raises ValueError naming ``--fine-tune`` and the file
    for a malformed one."""
    try:
        return load_constant(fine_tune.path(_CONSTANT))
    except ValueError as exc:
        raise ValueError(f"--fine-tune: {exc}") from None


def check_fine_tune(fine_tune: FineTune, root: str | Path) -> None:
    """Refuse (ValueError, one line) a source whose ``constant.json`` is malformed; one without it is searched from
    the default grid."""
    _source_constant(fine_tune)


def train_stage(
    root: str | Path,
    *,
    quick: bool = False,
    seed: int = 0,
    log: Callable[[str], None] = print,
    target: TrainingTarget | None = None,
    tensorboard: str | Path | None = None,
    fine_tune: FineTune | None = None,
) -> list[str]:
    """The ``constant`` stage of ``make train``: the search over the staged ``root``'s bundles, written to
    ``<root>/hrl-scheduler/high/constant.json``, on the episodes of ``target`` when given
    (:meth:`TrainingTarget.distribution`). ``tensorboard`` is accepted and unused: a grid search has no learning
    curve (its grid is in constant.json). ``fine_tune``: the search has no weights to start from; it runs with the
    :data:`FINE_TUNE` budget, its grid includes the source's capacity target and move budget, and the result
    records them under ``fine_tuned_from``. Returns the directory written."""
    budget = QUICK if quick else (FINE_TUNE if fine_tune is not None else {})
    over: dict[str, Any] = dict(budget, **(target.distribution() if target is not None else {}))
    extra = None
    source = _source_constant(fine_tune) if fine_tune is not None else None
    if fine_tune is not None and source is not None:
        base = ConstantSearchConfig()
        over["capacity_targets"] = tuple(
            sorted({*over.get("capacity_targets", base.capacity_targets), float(source["capacity_target"])})
        )
        over["move_budgets"] = tuple(
            sorted({*over.get("move_budgets", base.move_budgets), float(source["move_budget_frac"])})
        )
        over["burst_shares"] = tuple(
            sorted({*over.get("burst_shares", base.burst_shares), float(source.get("burst", 0.0))})
        )
        extra = {
            "fine_tuned_from": {
                "capacity_target": source["capacity_target"],
                "move_budget_frac": source["move_budget_frac"],
                "burst": source.get("burst", 0.0),
                "bundle": _CONSTANT,
                "root": str(fine_tune.source),
            }
        }
    cfg = ConstantSearchConfig(seed=seed, **over)
    out = Path(root) / "hrl-scheduler" / "high"
    tune_constant(cfg, out / "constant.json", bundles_root=root, log=log, extra=extra)
    return [str(out)]


QUICK = {
    "episodes": 2,
    "episode_minutes": 10,
    "capacity_targets": (0.6, 0.8),
    "burst_shares": (0.0, 0.5),
    "workers": 1,
    "n_samples": 100,
}


#: The search configurations' fields a command-line option sets, in the messages they raise (longest first).
_OPTIONS = (
    ("episodes, workers", "--episodes, --workers"),
    ("episode_minutes", "--minutes"),
    ("pessimism_values", "--values"),
)


def option_error(exc: ValueError) -> ValueError:
    """``exc`` (a search configuration's one-line error) with the fields named as the options that set them."""
    text = str(exc)
    for field_name, option in _OPTIONS:
        text = text.replace(field_name, option)
    return ValueError(text)


def run_cli(args: Any) -> int:
    """The body of ``hrl-policy train constant``. Returns the exit status."""
    over: dict[str, Any] = dict(QUICK) if args.quick else {}
    for opt, name in (("episodes", "episodes"), ("minutes", "episode_minutes"), ("workers", "workers")):
        v = getattr(args, opt, None)
        if v is not None:
            over[name] = v
    try:
        cfg = ConstantSearchConfig(seed=args.seed, **over)
    except ValueError as exc:
        raise option_error(exc) from None
    out = Path(args.out) if args.out else (None if args.quick else DEFAULT_CONSTANT)
    result = tune_constant(cfg, out, ray_address=args.ray_address, log=note)
    print(json.dumps(result, indent=1))
    return 0
