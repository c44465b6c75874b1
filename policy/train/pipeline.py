"""`make train` = ``hrl-policy train --all``: every training stage in order, every learned stack's bundles
written to ``policy/bundles/<stack>/``, and the wall time of each stage reported.

Stages (each a function ``fn(root: Path, *, quick: bool, seed: int, log: Callable[[str], None]) ->
list[str]`` that trains and writes bundle directories under ``root``, returning the directories it wrote),
run in this order because each may read what the previous ones wrote:

=============  ===================================================  ================================================
stage          entry                                                 writes (under ``root``)
=============  ===================================================  ================================================
``encoder``    ``policy.train.encoder.run_cli`` (graph encoder)      ``encoder/``
``drpc``       ``policy.train.drpc:train_stage`` (GRU predictor,     ``drpc/``, ``hrl-scheduler/high``,
               DRPC teacher + students)                              ``hrl-no-encoder/high``, ``hrl-flat/high``
``placement``  ``policy.train.placement:train_stage`` (the learned   ``hrl-scheduler/low``, ``hrl-no-encoder/low``,
               low level)                                            ``hrl-flat/low``
``constant``   ``policy.train.constant:train_stage`` (the best       ``hrl-scheduler/high/constant.json``
               constant intent over the trained low level)
``dagger``     ``policy.train.dagger:train_stage`` (the learned      ``hrl-scheduler/high``, ``hrl-no-encoder/high``
               high level, distilled from the lookahead oracle)      (``intent/``, ``predictor/``)
=============  ===================================================  ================================================

Then :func:`assemble` completes the ablations that evaluate the full hierarchy's trained policies with one
part switched off (``hrl-no-rebalance/{low,high}`` and ``hrl-no-autoscale/low`` are copies of
``hrl-scheduler``'s bundles unless a stage wrote its own) and checks that every learned stack has its
bundles (:data:`REQUIRED_BUNDLES`).

**Nothing half-written.** The stages train into a staging directory next to the bundles root (seeded with the
root's existing bundles, so a stage reads what earlier stages or runs left there); only when every chosen stage
succeeded are the directories they wrote (and the assembled copies) moved into the root, each directory
replaced as a whole (:func:`install_dirs`). A ``--quick`` run's default root is ``out/train/bundles``
(:data:`QUICK_ROOT`), never the committed ``policy/bundles``.

**Versions.** Every trainer names a new bundle ``<what>-<date>-s<seed>[-...][-quick]-<hash8>``
(:func:`content_version`): ``hash8`` is the first 8 hex digits of the SHA-256 of its ``weights.npz``, the digest
its manifest records under ``weights.sha256``, so two different trainings never share a ``policy_version`` and
serving's version cross-checks (equality of ``encoder_version`` / ``predictor_version``) tell them apart.

**Fine-tuning** (``hrl-policy train --all --app DIR --fine-tune [ROOT]``, :mod:`policy.train.finetune`): the stages
but the encoder start from the bundles under ``ROOT`` (default the committed ones), each source checked against what
its stage builds before any stage runs (:attr:`Stage.fine_tune_check`); the staging directory, and so the bundles root
at the end, is completed from ``ROOT`` where the root has no bundle.

Training wall time per stage goes to ``training.json`` and ``training.csv`` in the report directory and, for a
full (not ``--quick``) run into ``policy/bundles``, to the ``training`` section of BENCHMARKS.md
(:func:`policy.bench.markdown.write_section`). torch is imported only by the stages' own modules.
"""

from __future__ import annotations

import csv
import importlib
import json
import os
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tabulate import tabulate

from .episodes import TrainingTarget
from .finetune import FINE_TUNED_STAGES, FineTune

__all__ = [
    "Stage",
    "StageOptions",
    "STAGES",
    "REQUIRED_BUNDLES",
    "ABLATION_COPIES",
    "StageResult",
    "TrainingReport",
    "resolve",
    "run_all",
    "assemble",
    "missing_bundles",
    "markdown",
    "install_dirs",
    "check_replaceable",
    "DEFAULT_ROOT",
    "QUICK_ROOT",
]


ROOT = Path(__file__).resolve().parents[2]


DEFAULT_ROOT = ROOT / "policy" / "bundles"


#: Where ``train --all --quick`` writes without ``--out`` (git-ignored): a quick run never overwrites the committed
#: bundles unless told to.
QUICK_ROOT = ROOT / "out" / "train" / "bundles"


def _outermost(paths: Sequence[Path]) -> list[Path]:
    """``paths`` without duplicates and without any path inside another one of them."""
    res = sorted({Path(p).resolve() for p in paths}, key=lambda p: len(p.parts))
    out: list[Path] = []
    for p in res:
        if not any(p == q or q in p.parents for q in out):
            out.append(p)
    return out


_BUNDLE_FILES = frozenset({"manifest.json", "weights.npz", "constant.json"})


def check_replaceable(dirs: Sequence[str | Path]) -> None:
    """Raise ``ValueError`` naming the first of ``dirs`` that exists and holds anything but bundles
    (``manifest.json`` / ``weights.npz`` files, in it or in subdirectories; hidden leftovers of an interrupted
    write are allowed): :func:`install_dirs` replaces a directory as a whole, and must never delete someone's
    files because a path was mistyped."""
    for d in map(Path, dirs):
        if d.is_symlink() or (d.exists() and not d.is_dir()):
            raise ValueError(f"install: {d} is not a bundle directory (a file or a link): refusing to replace it")
        if not d.is_dir():
            continue
        for f in d.rglob("*"):
            if (f.is_file() or f.is_symlink()) and f.name not in _BUNDLE_FILES and not f.name.startswith("."):
                raise ValueError(f"install: {d} holds {f.relative_to(d)}, not a bundle file: refusing to replace it")


def install_dirs(pairs: Mapping[str | Path, str | Path]) -> list[Path]:
    """Replace each destination directory (value) by a copy of its source directory (key), all together: first
    every source is copied next to its destination (``.<name>.new-*``; the step that can fail, e.g. on a full
    disk, before anything is replaced), then each destination is swapped in by two renames (the old one moved
    aside, then deleted). A reader sees the old or the new directory, never a mix of both (a student with
    another training's predictor). Returns the destinations. Raises ``ValueError`` when a destination is
    given twice, a source is not a directory or a destination holds other files (:func:`check_replaceable`);
    ``OSError`` from the copies (the destinations are untouched)."""
    items = [(Path(s), Path(d)) for s, d in pairs.items()]
    dsts = [d.resolve() for _s, d in items]
    if len(set(dsts)) != len(dsts):
        raise ValueError(f"install: a destination is given twice ({', '.join(str(d) for d in dsts)})")
    check_replaceable([d for _s, d in items])
    for s, _d in items:
        if not s.is_dir():
            raise ValueError(f"install: {s} is not a directory")
    tag = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    staged: list[tuple[Path, Path]] = []
    try:
        for s, d in items:
            d.parent.mkdir(parents=True, exist_ok=True)
            tmp = d.parent / f".{d.name}.new-{tag}"
            shutil.copytree(s, tmp)
            staged.append((tmp, d))
    except BaseException:
        for tmp, _d in staged:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    for tmp, d in staged:
        old = d.parent / f".{d.name}.old-{tag}"
        if d.exists() or d.is_symlink():
            os.rename(d, old)
        os.rename(tmp, d)
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old, ignore_errors=True)
        elif old.exists() or old.is_symlink():
            old.unlink()
    return [d for _t, d in staged]


StageFn = Callable[..., Sequence[str]]


@dataclass(frozen=True)
class StageOptions:
    """What :func:`run_all` hands every stage besides the bundles root, ``quick``, ``seed`` and ``log``, each as a
    keyword argument only when set (so a stage function that takes neither still runs): ``target``, train on your
    own apps (:class:`~policy.train.episodes.TrainingTarget`); ``tensorboard``, the TensorBoard log directory each
    stage writes its runs under (:mod:`policy.train.tensorboard`); ``fine_tune``, start every stage from the trained
    bundles under a root (:class:`~policy.train.finetune.FineTune`)."""

    target: TrainingTarget | None = None
    tensorboard: Path | None = None
    fine_tune: FineTune | None = None

    def kwargs(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.target is not None:
            out["target"] = self.target
        if self.tensorboard is not None:
            out["tensorboard"] = Path(self.tensorboard)
        if self.fine_tune is not None:
            out["fine_tune"] = self.fine_tune
        return out


@dataclass(frozen=True)
class Stage:
    """A training stage: ``name``, its ``entry`` (``module:function``, imported when the stage runs), a one-line
    ``description`` and, for a stage that can be fine-tuned, ``fine_tune_check``: ``module:function`` called as
    ``fn(fine_tune, root)`` before any stage runs, raising ValueError for a source it could not start from."""

    name: str
    entry: str
    description: str
    fine_tune_check: str = ""


STAGES: tuple[Stage, ...] = (
    Stage("encoder", "policy.train.pipeline:encoder_stage", "graph encoder (self-supervised, simulator what-ifs)"),
    Stage(
        "drpc",
        "policy.train.drpc:train_stage",
        "GRU workload predictor, DRPC teacher and students (TD3)",
        "policy.train.drpc:check_fine_tune",
    ),
    Stage(
        "placement",
        "policy.train.placement:train_stage",
        "learned low-level placement policy",
        "policy.train.placement:check_fine_tune",
    ),
    Stage(
        "constant",
        "policy.train.constant:train_stage",
        "the best constant intent (grid search, on Ray)",
        "policy.train.constant:check_fine_tune",
    ),
    Stage(
        "dagger",
        "policy.train.dagger:train_stage",
        "learned high level (DAgger from the lookahead oracle, on Ray)",
        "policy.train.dagger:check_fine_tune",
    ),
)


#: Bundle directories (under the bundles root) each learned stack loads. A directory counts as present when a
#: ``manifest.json`` is in it or below it (``high/`` holds ``student/`` and ``predictor/``; ``drpc/`` likewise).
REQUIRED_BUNDLES: Mapping[str, tuple[str, ...]] = {
    "hrl-scheduler": ("hrl-scheduler/low", "hrl-scheduler/high"),
    "hrl-no-encoder": ("hrl-no-encoder/low", "hrl-no-encoder/high"),
    "hrl-flat": ("hrl-flat/low", "hrl-flat/high"),
    "hrl-no-rebalance": ("hrl-no-rebalance/low", "hrl-no-rebalance/high"),
    "hrl-no-autoscale": ("hrl-no-autoscale/low",),
    "drpc": ("drpc",),
}


#: Ablations that run the full hierarchy's trained policies with a part switched off: copied from
#: ``hrl-scheduler`` unless a stage wrote them (destination → source).
ABLATION_COPIES: Mapping[str, str] = {
    "hrl-no-rebalance/low": "hrl-scheduler/low",
    "hrl-no-rebalance/high": "hrl-scheduler/high",
    "hrl-no-autoscale/low": "hrl-scheduler/low",
}


@dataclass
class StageResult:
    """One stage's outcome: ``status`` ``ok`` / ``failed`` / ``not_run``, ``wall_s`` (seconds), the bundle
    directories it wrote and, when it failed, the one-line ``error``."""

    name: str
    status: str = "not_run"
    wall_s: float = 0.0
    bundles: list[str] = field(default_factory=list)
    error: str = ""


@dataclass
class TrainingReport:
    """The whole run: ``stages`` in order, ``total_wall_s``, ``quick``, ``seed``, the bundles ``root``, the
    ``assembled`` copies and the ``missing`` bundles (stack → paths) after assembly; for a fine-tune, its
    ``fine_tune_source`` root and the directories copied from it unchanged (``from_source``: the encoder, and
    whatever the stages run did not write)."""

    stages: list[StageResult]
    total_wall_s: float
    quick: bool
    seed: int
    root: str
    assembled: list[str] = field(default_factory=list)
    missing: dict[str, list[str]] = field(default_factory=dict)
    fine_tune_source: str = ""
    from_source: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(s.status == "ok" for s in self.stages) and not self.missing

    def to_json(self) -> dict[str, Any]:
        return {
            "quick": self.quick,
            "seed": self.seed,
            "root": self.root,
            "ok": self.ok,
            "total_wall_s": round(self.total_wall_s, 3),
            "stages": [
                {
                    "stage": s.name,
                    "status": s.status,
                    "wall_s": round(s.wall_s, 3),
                    "bundles": s.bundles,
                    "error": s.error,
                }
                for s in self.stages
            ],
            "assembled": self.assembled,
            "missing": self.missing,
            "fine_tune": {"source": self.fine_tune_source, "from_source": self.from_source}
            if self.fine_tune_source
            else None,
        }


def encoder_stage(
    root: Path,
    *,
    quick: bool,
    seed: int,
    log: Callable[[str], None] = print,
    target: TrainingTarget | None = None,
    tensorboard: str | Path | None = None,
) -> list[str]:
    """The ``encoder`` stage: ``policy.train.encoder.run_cli`` writing ``<root>/encoder``. ``target`` changes
    nothing: the encoder learns from synthetic call graphs and simulator what-ifs, not from the training apps;
    ``tensorboard`` is not written by this stage (its held-out errors are in its report)."""
    from . import encoder as encoder_train

    out = Path(root) / "encoder"
    rc = encoder_train.run_cli(str(out), quick, seed, None, None, None, log=log)
    if rc != 0:
        raise RuntimeError(f"train encoder exited {rc}")
    return [str(out)]


def resolve(stage: Stage, entry: str | None = None) -> StageFn:
    """The stage's function (``entry``: another ``module:function`` of it, e.g. its ``fine_tune_check``). Raises
    ``ValueError`` naming the entry when it cannot be imported or found."""
    entry = entry or stage.entry
    mod_name, _, attr = entry.partition(":")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as exc:
        raise ValueError(f"stage {stage.name}: cannot import {mod_name} ({exc})") from exc
    fn = getattr(mod, attr, None)
    if not callable(fn):
        raise ValueError(f"stage {stage.name}: {entry} is not a function")
    return fn


def _has_bundle(p: Path) -> bool:
    return p.is_dir() and any(p.rglob("manifest.json"))


def assemble(root: str | Path, written: Sequence[str] = ()) -> tuple[list[str], dict[str, list[str]]]:
    """Copy :data:`ABLATION_COPIES` whose destination no stage wrote (``written``: directories the stages
    reported) from their source when it exists; then list what each stack still lacks. Returns
    ``(copied destinations, {stack: [missing paths]})``."""
    root = Path(root)
    wrote = {Path(w).resolve() for w in written}
    copied = []
    for dst, src in ABLATION_COPIES.items():
        d, s = root / dst, root / src
        if d.resolve() in wrote or not _has_bundle(s):
            continue
        if d.exists():
            shutil.rmtree(d)
        shutil.copytree(s, d)
        copied.append(dst)
    return copied, missing_bundles(root)


def missing_bundles(root: str | Path) -> dict[str, list[str]]:
    """``{stack: [missing paths]}``: the :data:`REQUIRED_BUNDLES` directories under ``root`` without a bundle."""
    root = Path(root)
    missing: dict[str, list[str]] = {}
    for stack, paths in REQUIRED_BUNDLES.items():
        for rel in paths:
            p = root / rel
            if not _has_bundle(p):
                missing.setdefault(stack, []).append(str(p))
    return missing


#: Bundle directories (under a root) a stage may read: copied into the staging root before the stages run.
_SEED_DIRS: tuple[str, ...] = ("encoder", *sorted({p for ps in REQUIRED_BUNDLES.values() for p in ps}))


def _seed_staging(root: Path, staging: Path, source: Path | None = None) -> list[str]:
    """Copy ``root``'s bundle directories (:data:`_SEED_DIRS`) into ``staging``; then, for a fine-tune, ``source``'s
    where ``root`` has none. Returns the directories taken from ``source``."""
    taken = []
    for rel in _SEED_DIRS:
        src = root / rel
        if _has_bundle(src):
            shutil.copytree(src, staging / rel, dirs_exist_ok=True)
        elif source is not None and _has_bundle(source / rel):
            shutil.copytree(source / rel, staging / rel, dirs_exist_ok=True)
            taken.append(rel)
    return taken


def run_all(
    root: str | Path | None = None,
    *,
    quick: bool = False,
    seed: int = 0,
    stages: Sequence[str] | None = None,
    trainers: Mapping[str, StageFn] | None = None,
    log: Callable[[str], None] = lambda m: print(m, file=sys.stderr),
    clock: Callable[[], float] = time.monotonic,
    options: StageOptions | None = None,
) -> TrainingReport:
    """Run the stages (``stages``: names, default all, always in :data:`STAGES` order), then :func:`assemble`.

    ``root``: the bundles root (default :data:`DEFAULT_ROOT`, with ``quick`` :data:`QUICK_ROOT`). The stages
    train into a staging directory next to it (seeded with the root's bundles); only when all of them succeed
    are the directories they wrote and the assembled copies installed into ``root`` (:func:`install_dirs`), so
    a failed run leaves ``root`` as it was. ``trainers``: stage name → function overriding its entry (tests,
    stand-ins). ``options``: what every stage gets besides (:class:`StageOptions`: your own apps, a TensorBoard
    directory, a fine-tune). Stops at the first stage that fails (later stages read earlier
    outputs); its error is in the report. Raises ``ValueError`` for an unknown stage name or a negative seed
    (before anything runs).

    **Fine-tune** (``options.fine_tune``): the stages of :data:`~policy.train.finetune.FINE_TUNED_STAGES` (the
    default; the encoder is refused: the other bundles read its embeddings) start from the bundles under its source
    root. The staging directory takes ``root``'s bundles and, where ``root`` has none, the source's (its encoder
    among them); every chosen stage's ``fine_tune_check`` then runs on it before any stage trains, and its
    ``ValueError`` (one line naming the source bundle and the field) propagates with nothing written. On success the
    directories taken from the source are installed with the stages' own, so ``root`` holds a complete set."""
    names = [s.name for s in STAGES]
    options = options or StageOptions()
    fine_tune = options.fine_tune
    default = [n for n in names if fine_tune is None or n in FINE_TUNED_STAGES]
    chosen = default if stages is None else list(stages)
    unknown = [n for n in chosen if n not in names]
    if unknown:
        raise ValueError(f"stages: unknown {unknown} (known: {', '.join(names)})")
    if not chosen:
        raise ValueError(f"stages: expected at least one of {', '.join(names)}")
    if fine_tune is not None and any(n not in FINE_TUNED_STAGES for n in chosen):
        raise ValueError(
            f"stages: {', '.join(n for n in chosen if n not in FINE_TUNED_STAGES)}: not fine-tuned (the other "
            f"stages' bundles read the encoder's embeddings); with a fine-tune choose among "
            f"{', '.join(FINE_TUNED_STAGES)}"
        )
    if seed < 0:
        raise ValueError(f"seed: expected an integer >= 0, got {seed}")
    root = Path(root) if root is not None else (QUICK_ROOT if quick else DEFAULT_ROOT)
    check_replaceable([root / rel for rel in (*_SEED_DIRS, *ABLATION_COPIES)])
    target = options.target
    on = ""
    if target is not None:
        on = f"; apps {', '.join(target.apps)}" + (f", scenario {target.scenario}" if target.scenario else "")
    if fine_tune is not None:
        on += f"; fine-tuning the bundles under {fine_tune.source}"
    staging = root.parent / f".{root.name}.staging-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    results = [StageResult(s.name) for s in STAGES if s.name in chosen]
    chosen_stages = [s for s in STAGES if s.name in chosen]
    t_all = clock()
    written: list[Path] = []
    copied: list[str] = []
    from_source: list[str] = []
    try:
        staging.mkdir(parents=True)
        from_source = _seed_staging(root, staging, fine_tune.source if fine_tune is not None else None)
        if fine_tune is not None:  # every source checked before any stage trains
            for stage in chosen_stages:
                if stage.fine_tune_check:
                    resolve(stage, stage.fine_tune_check)(fine_tune, staging)
        log(f"train --all: bundles root {root}" + (" (quick run)" if quick else "") + on)
        if from_source and fine_tune is not None:
            log(f"train --all: taken from {fine_tune.source} (none under {root}): {', '.join(from_source)}")
        root.mkdir(parents=True, exist_ok=True)
        for stage, res in zip(chosen_stages, results):
            log(f"train --all: stage {stage.name}: {stage.description}")
            t0 = clock()
            try:
                fn = (trainers or {}).get(stage.name) or resolve(stage)
                out = fn(staging, quick=quick, seed=seed, log=log, **options.kwargs())
                wrote = [Path(p) for p in (out or [])]
                written += wrote
                res.bundles = [str(_moved(p, staging, root)) for p in wrote]
                res.status = "ok"
            except Exception as exc:  # noqa: BLE001 - report the failing stage, stop the pipeline
                res.status = "failed"
                res.error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:500]}"
            res.wall_s = clock() - t0
            log(
                f"train --all: stage {stage.name}: {res.status} in {res.wall_s:.1f} s"
                + (f" ({res.error})" if res.error else "")
            )
            if res.status != "ok":
                break
        if all(r.status == "ok" for r in results):
            copied, _ = assemble(staging, [str(p) for p in written])
            base = staging.resolve()
            kept = [staging / c for c in (*copied, *from_source)]
            dirs = [p for p in _outermost(written + kept) if p != base and base in p.parents]
            from_source = [r for r in from_source if r not in copied and not _overlaps(staging / r, written)]
            install_dirs({p: root / p.relative_to(base) for p in dirs})
            log(f"train --all: {len(dirs)} bundle directories installed under {root}")
        else:
            log(f"train --all: a stage failed: nothing installed, {root} left as it was")
            from_source = []
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return TrainingReport(
        results,
        clock() - t_all,
        quick,
        seed,
        str(root),
        copied,
        missing_bundles(root),
        str(fine_tune.source) if fine_tune is not None else "",
        from_source,
    )


def _overlaps(p: Path, others: Sequence[Path]) -> bool:
    """Whether ``p`` is one of ``others``, inside one, or holds one."""
    p = Path(p).resolve()
    for o in (Path(q).resolve() for q in others):
        if o == p or o in p.parents or p in o.parents:
            return True
    return False


def _moved(p: Path, staging: Path, root: Path) -> Path:
    """``p`` under ``staging`` → the same place under ``root`` (other paths unchanged)."""
    try:
        return root / Path(p).resolve().relative_to(staging.resolve())
    except ValueError:
        return Path(p)


def markdown(report: TrainingReport) -> str:
    """The ``training`` section of BENCHMARKS.md: wall time per stage on this machine."""
    rows = [
        [
            s.name,
            s.status,
            f"{s.wall_s:.1f}",
            f"{s.wall_s / 60:.1f}",
            ", ".join(os.path.relpath(b, ROOT) if os.path.isabs(b) else b for b in s.bundles) or "-",
        ]
        for s in report.stages
    ]
    rows.append(
        [
            "total",
            "ok" if report.ok else "incomplete",
            f"{report.total_wall_s:.1f}",
            f"{report.total_wall_s / 60:.1f}",
            "",
        ]
    )
    cpus = os.cpu_count() or 0
    lines = [
        "## Training",
        "",
        f"`make train` (`hrl-policy train --all`, seed {report.seed}) on {cpus} CPU cores: wall time per stage "
        "(each stage trains in torch with one thread per process and exports numpy bundles to "
        "`policy/bundles/<stack>/`).",
        "",
        tabulate(
            rows,
            headers=["stage", "status", "wall s", "wall min", "bundles written"],
            tablefmt="github",
            disable_numparse=True,
        ),
    ]
    if report.assembled:
        lines += [
            "",
            "Copied from `hrl-scheduler` (ablations evaluated with its trained policies): "
            + ", ".join(f"`{a}`" for a in report.assembled)
            + ".",
        ]
    if report.missing:
        lines += ["", "Missing after this run: " + "; ".join(f"{k}: {', '.join(v)}" for k, v in report.missing.items())]
    return "\n".join(lines) + "\n"


def write_reports(report: TrainingReport, out_dir: str | Path) -> tuple[Path, Path]:
    """Write ``training.json`` and ``training.csv`` (stage, status, wall_s, bundles) into ``out_dir``."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    j = d / "training.json"
    j.write_text(json.dumps(report.to_json(), indent=1) + "\n", encoding="utf-8")
    c = d / "training.csv"
    with c.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["stage", "status", "wall_s", "bundles"])
        for s in report.stages:
            w.writerow([s.name, s.status, f"{s.wall_s:.3f}", ";".join(s.bundles)])
        w.writerow(["total", "ok" if report.ok else "incomplete", f"{report.total_wall_s:.3f}", ""])
    return j, c
