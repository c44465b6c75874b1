"""``hrl-policy whatif RECORDING --policy STACK...``: the counterfactual report of a recording.

Steps (:func:`whatif`):

1. **the app**: built from the recording by ``app build``'s calibration (:func:`policy.sim.appbuild.
   build_from_observations`, the recording read by :func:`policy.whatif.inputs.read_inputs`): its workloads, call
   graph and calls per request from the mesh metrics, CPU per request and working set from the pods' use, each
   service's own time fitted to its recorded latency; the hold-out check fits the even steps and compares with the
   odd ones. Written to ``OUT/app/`` (``calibration.md``);
2. **what happened**: the baseline stack (``default-kube-scheduler``, or ``default-kube-scheduler+hpa`` when the
   recording holds HorizontalPodAutoscalers of the app) replayed from the recorded placement under the recorded load
   (:func:`policy.whatif.replay.replay`), and its error against the recording, step by step: per service the
   median absolute error of the simulated p50 / p95 visit latency, and of the app's CPU. This is the calibration
   error the rest is read with;
3. **what each stack would have done**: every ``--policy`` stack replayed the same way (same seeds: the same
   requests), its latency, failures, CPU, cross-node calls, evictions, scale changes and resizes against the
   baseline; and **at equal CPU**: each stack's p95 against the front of the tuned HPA (the baseline with an HPA at
   CPU targets 50-90 %, :func:`policy.bench.pareto.at_equal_cpu`) at the CPU the stack spent, where the front reaches
   it (a stack cheaper than every HPA setting has no comparison, said so);
4. **the shadow logs**: the extender's decisions (agreement with kube-scheduler, score gaps, the largest
   disagreements and why) and the descheduler's dry runs (proposed moves, scale changes and resizes with their
   predicted effect, the guards that blocked the rest); each shadow decision compared with the simulator's policy on
   the recorded cluster at its time (:func:`policy.whatif.shadow.compare_with_simulator`).

Output: ``OUT/report.md``, ``OUT/report.json`` (every figure, stable keys with units), and the plots
``OUT/latency.png`` (p95 per step: recorded and each replay), ``OUT/cpu.png`` (CPU per step), ``OUT/services.png``
(per service, recorded vs replayed p50 / p95) and ``OUT/equal_cpu.png`` (p95 against CPU: the stacks and the HPA
front); the plots need matplotlib (``pip install 'hrl-scheduler[bench]'``), the report says when it is missing.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from policy.bench.pareto import FrontPoint, at_equal_cpu, pareto_front
from policy.sim.appbuild import BuildOptions, BuildResult, Observations, build_from_observations, holdout_check
from policy.sim.stackbase import AUTOSCALER_PERIOD_MIN, DESCHEDULER_PERIOD_MIN
from policy.sim.stacks import get_stack

from .inputs import RecordedInputs, read_inputs
from .replay import Replay, replay, replay_error
from .shadow import compare_with_simulator, descheduler_summary, extender_summary, policy_for

__all__ = ["FRONT_TARGETS", "WhatIfOptions", "WhatIf", "whatif", "markdown"]

#: CPU targets of the tuned-HPA front the stacks are compared with at equal CPU.
FRONT_TARGETS = (0.5, 0.6, 0.7, 0.8, 0.9)
_KEYS = ("latency_mean_ms", "latency_p95_ms", "failed_pct", "cpu_core_hours", "cross_node_call_pct", "evictions")


@dataclass(frozen=True)
class WhatIfOptions:
    """``stacks``: the stacks to compare (``--policy``); ``seeds``: seeds per stack (the same for all: common random
    numbers); ``start``: ``recorded`` or ``fresh`` (:mod:`policy.whatif.replay`); ``front``: run the tuned-HPA front
    for the equal-CPU comparison; ``iterations``: of the calibration's fit; ``samples``: user requests drawn per
    step."""

    stacks: tuple[str, ...] = ("hrl-scheduler",)
    seeds: int = 3
    start: str = "recorded"
    front: bool = True
    iterations: int = 20
    samples: int = 2000


@dataclass
class WhatIf:
    """Everything :func:`whatif` computed (``to_json`` is ``report.json``)."""

    recording: str
    inputs: RecordedInputs
    build: BuildResult
    baseline: str
    runs: dict[str, list[Replay]]
    error: dict[str, Any]
    error_by_seed: list[dict[str, Any]]
    equal_cpu: dict[str, Any]
    shadow: dict[str, Any]
    options: WhatIfOptions
    plots: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def stack_metrics(self, stack: str) -> dict[str, float]:
        runs = self.runs[stack]
        return {k: float(np.mean([r.metrics.get(k, math.nan) for r in runs])) for k in _KEYS} | {
            "resizes": float(np.mean([r.result.extra.get("resizes", 0) for r in runs])),
            "pods_end": float(np.mean([sum(len(v) for v in r.nodes.values()) for r in runs])),
        }

    def to_json(self) -> dict[str, Any]:
        m = self.inputs.recording.manifest
        err = self.error
        return {
            "recording": self.recording,
            "window_s": m.steps * m.step_s,
            "step_s": m.step_s,
            "steps": m.steps,
            "namespaces": self.inputs.namespaces,
            "app": str(self.build.out),
            "baseline": self.baseline,
            "stacks": list(self.options.stacks),
            "seeds": self.options.seeds,
            "start": self.options.start,
            "calibration": {
                "fit_median_abs_error_pct": {
                    k: _r(v) for k, v in self.build.calibration.median_abs_error_pct().items()
                },
                "holdout_median_abs_error_pct": (self.build.holdout or {}).get("median_abs_error_pct"),
            },
            "replay_error": {
                "median_abs_error_pct": {k: _r(v) for k, v in err["median_abs_error_pct"].items()},
                "by_seed_p50_pct": [_r(e["median_abs_error_pct"]["p50"]) for e in self.error_by_seed],
                "services": [s.to_json() for s in err["services"].values()],
                "cpu": {k: _r(v) for k, v in err["cpu"].items()},
            },
            "results": {s: {k: _r(v) for k, v in self.stack_metrics(s).items()} for s in self.runs},
            "equal_cpu": self.equal_cpu,
            "shadow": self.shadow,
            "plots": self.plots,
            "notes": self.notes,
            "warnings": self.inputs.warnings + self.build.warnings,
        }


def _r(v: float | None, d: int = 3) -> float | None:
    return None if v is None or not isinstance(v, (int, float)) or not math.isfinite(v) else round(float(v), d)


def _baseline(inputs: RecordedInputs) -> str:
    """``default-kube-scheduler+hpa`` when an HPA of the recording targets an app workload, else the plain one."""
    objs = inputs.recording.objects(0)
    for o in objs:
        if (
            o.get("kind") == "HorizontalPodAutoscaler"
            and (o.get("metadata") or {}).get("namespace") in inputs.namespaces
        ):
            return "default-kube-scheduler+hpa"
    return "default-kube-scheduler"


def _build(inputs: RecordedInputs, out: Path, options: WhatIfOptions) -> BuildResult:
    rec = inputs.recording
    manifests = inputs.write_manifests(out / "recorded-workloads")
    stats = inputs.stats

    def holdout(struct, mt, entry, o):  # the even steps fitted, the odd ones compared (the rates are the window's)
        return holdout_check(
            struct,
            (stats, stats),
            mt,
            entry,
            o,
            "the fit repeated on the even steps of the recording; its simulated visit latencies compared with the "
            "odd steps' recorded latencies (the call rates are the whole window's).",
        )

    obs = Observations(inputs.graph, stats, "mesh metrics", str(rec.root), holdout)
    text = str(rec.root)
    build_inputs = {"manifests": f"{text} (workloads at step 0)", "spans": text, "metrics": text}
    return build_from_observations(
        manifests,
        out / "app",
        obs,
        inputs.metrics,
        BuildOptions(name="recorded-app", iterations=options.iterations, force=True),
        build_inputs,
        list(inputs.warnings),
    )


def _equal_cpu(runs: dict[str, list[Replay]], stacks: Sequence[str], front_names: Sequence[str]) -> dict[str, Any]:
    if not front_names:
        return {}
    per_seed = {s: [r.metrics["latency_p95_ms"] for r in runs[s]] for s in front_names}
    points = [FrontPoint(s, float(np.mean([r.metrics["cpu_core_hours"] for r in runs[s]])), float(np.mean(per_seed[s])))
              for s in front_names]  # fmt: skip
    front = pareto_front(points)
    out: dict[str, Any] = {"front": [{"stack": p.stack, "cpu_core_hours": _r(p.cpu, 5), "latency_p95_ms": _r(p.value)}
                                     for p in front]}  # fmt: skip
    for s in stacks:
        cmp = at_equal_cpu(
            front,
            [r.metrics["cpu_core_hours"] for r in runs[s]],
            [r.metrics["latency_p95_ms"] for r in runs[s]],
            per_seed,
        )
        out[s] = (
            {"ratio": _r(cmp["ratio"]), "delta_ms": _r(cmp["delta"]["mean"]), "ci95_ms": _r(cmp["delta"]["ci95"]),
             "position": cmp["position"], "bracket": cmp["bracket"], "cpu_core_hours": _r(cmp["cpu_core_hours"], 5)}
            if cmp is not None
            else None
        )  # fmt: skip
    return out


def whatif(
    recording: str | Path,
    out: str | Path,
    options: WhatIfOptions = WhatIfOptions(),
    progress: Callable[[str], None] | None = None,
) -> WhatIf:
    """Write the what-if report of ``recording`` into ``out`` (module docstring) and return it. Raises
    ``ValueError`` (one line) for an unreadable recording, an unknown stack, bad options."""
    for s in options.stacks:
        get_stack(s)
    if options.seeds < 1:
        raise ValueError(f"--seeds: must be >= 1, got {options.seeds}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    say = progress or (lambda _msg: None)
    inputs = read_inputs(recording)
    say(f"building the app from {recording} ({inputs.steps} steps of {inputs.step_s:g} s)")
    build = _build(inputs, out, options)
    app = build.app
    baseline = _baseline(inputs)
    front = [f"default-kube-scheduler+hpa@target={t:g}" for t in FRONT_TARGETS] if options.front else []
    names = list(dict.fromkeys([baseline, *options.stacks, *front]))
    runs: dict[str, list[Replay]] = {}
    notes: list[str] = []
    for s in names:
        say(f"replaying {s} ({options.seeds} seed(s))")
        runs[s] = [
            replay(s, app, inputs, seed=k, start=options.start, n_samples=options.samples) for k in range(options.seeds)
        ]
    by_seed = [replay_error(r, inputs) for r in runs[baseline]]
    err = by_seed[0]
    eq = _equal_cpu(runs, [s for s in names if s not in front], front)
    if eq and len(eq["front"]) == 1:
        notes.append(
            "every HPA target of the front spent the same CPU (the HPA never scaled in this window): the equal-CPU "
            "comparison has one point, not a trade-off curve"
        )
    rec = inputs.recording
    ext, desch = rec.shadow_records("extender"), rec.shadow_records("descheduler")
    shadow: dict[str, Any] = {"extender": extender_summary(ext) if ext else None,
                              "descheduler": descheduler_summary(desch) if desch else None}  # fmt: skip
    if ext:
        say("comparing the shadow decisions with the simulator's policy")
        pol, note = policy_for(ext)
        shadow["simulator"] = compare_with_simulator(rec, ext, pol)
        if note:
            notes.append(note)
    window_min = inputs.steps * inputs.step_s / 60.0
    if window_min < DESCHEDULER_PERIOD_MIN:
        notes.append(
            f"the window ({window_min:g} min) is shorter than the simulated descheduler's period of moves "
            f"({DESCHEDULER_PERIOD_MIN} min; replica targets every {AUTOSCALER_PERIOD_MIN} min): hrl-scheduler's "
            "stacks can differ from the baseline here only by where new pods land; record longer to see its moves"
        )
    w = WhatIf(str(recording), inputs, build, baseline, runs, err, by_seed, eq, shadow, options, notes=notes)
    w.plots = plots(w, out)
    (out / "report.json").write_text(json.dumps(w.to_json(), indent=2) + "\n", encoding="utf-8")
    (out / "report.md").write_text(markdown(w), encoding="utf-8")
    shutil.rmtree(out / "recorded-workloads", ignore_errors=True)
    return w


# ---- plots ------------------------------------------------------------------------------------------------------


def plots(w: WhatIf, out: Path) -> list[str]:
    """Write the report's plots (module docstring); ``[]`` with a note when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        w.notes.append("no plots: matplotlib is not installed (pip install 'hrl-scheduler[bench]')")
        return []
    t = (np.arange(w.inputs.steps) + 1) * w.inputs.step_s / 60.0
    shown = [w.baseline, *[s for s in w.options.stacks if s != w.baseline]]
    files = []
    entry = [s for s in w.inputs.entry if s in w.inputs.latency]
    fig, ax = plt.subplots(figsize=(8, 4))
    if entry:
        ax.plot(t, w.inputs.latency[entry[0]][:, 1], "k-o", label=f"recorded ({entry[0]} p95)")
    for s in shown:
        r = w.runs[s][0]
        lat = r.service_latency(entry[0]) if entry else None
        if lat is not None:
            ax.plot(t, lat[:, 1], "--", label=f"{s} (replay, {entry[0]} p95)")
    ax.set_xlabel("minutes into the recording")
    ax.set_ylabel("p95 latency (ms)")
    ax.set_title("Entry service p95: recorded and replayed")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "latency.png", dpi=110)
    plt.close(fig)
    files.append("latency.png")
    fig, ax = plt.subplots(figsize=(8, 4))
    if np.isfinite(w.inputs.cpu_cores).any():
        ax.plot(t, w.inputs.cpu_cores, "k-o", label="recorded (the app's pods)")
    for s in shown:
        ax.plot(t, w.runs[s][0].result.series["cpu_cores_used"], "--", label=f"{s} (replay)")
    ax.set_xlabel("minutes into the recording")
    ax.set_ylabel("CPU in use (cores)")
    ax.set_title("The app's CPU: recorded and replayed")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "cpu.png", dpi=110)
    plt.close(fig)
    files.append("cpu.png")
    rows = list(w.error["services"].values())
    if rows:
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for ax, q in zip(axes, ("p50", "p95")):
            rec = [getattr(r, f"recorded_{q}_ms") for r in rows]
            sim = [getattr(r, f"simulated_{q}_ms") for r in rows]
            ax.scatter(rec, sim)
            for r, x, y in zip(rows, rec, sim):
                ax.annotate(r.service, (x, y), fontsize=6)
            pos = [v for v in rec + sim if v and v > 0]
            lo, hi = (min(pos) / 1.5, max(pos) * 1.5) if pos else (0.1, 10.0)
            ax.plot([lo, hi], [lo, hi], "k:", lw=1)
            ax.set_xscale("log")  # services from sub-millisecond to seconds
            ax.set_yscale("log")
            ax.set_xlabel(f"recorded {q} (ms, median over steps, log)")
            ax.set_ylabel(f"replayed {q} (ms, log)")
            ax.set_title(f"{w.baseline}: per service {q}")
        fig.tight_layout()
        fig.savefig(out / "services.png", dpi=110)
        plt.close(fig)
        files.append("services.png")
    if w.equal_cpu:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        fr = w.equal_cpu["front"]
        ax.plot([p["cpu_core_hours"] for p in fr], [p["latency_p95_ms"] for p in fr], "k-o", label="tuned HPA front")
        for s in shown:
            m = w.stack_metrics(s)
            ax.scatter([m["cpu_core_hours"]], [m["latency_p95_ms"]], s=60, label=s)
        xs = [p["cpu_core_hours"] for p in fr] + [w.stack_metrics(s)["cpu_core_hours"] for s in shown]
        ys = [p["latency_p95_ms"] for p in fr] + [w.stack_metrics(s)["latency_p95_ms"] for s in shown]
        for lim, vals in ((ax.set_xlim, xs), (ax.set_ylim, ys)):  # at least ±5 %: equal values look equal
            vals = [v for v in vals if v is not None and math.isfinite(v)]
            if vals:
                mid, half = (max(vals) + min(vals)) / 2, (max(vals) - min(vals)) / 2
                half = max(half * 1.2, 0.05 * abs(mid), 1e-9)
                lim(mid - half, mid + half)
        ax.ticklabel_format(useOffset=False)
        ax.set_xlabel("CPU (core-hours over the window)")
        ax.set_ylabel("p95 latency (ms)")
        ax.set_title("Each stack at its CPU, against the tuned HPA")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "equal_cpu.png", dpi=110)
        plt.close(fig)
        files.append("equal_cpu.png")
    return files


# ---- markdown ---------------------------------------------------------------------------------------------------


def _f(v: Any, d: int = 1) -> str:
    return "n/a" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{d}f}"


def _sections_happened(w: WhatIf) -> list[str]:
    j = w.to_json()
    cal = j["calibration"]
    rep = j["replay_error"]
    med = rep["median_abs_error_pct"]
    out = [
        "## What happened: the replay and its error",
        "",
        f"The app was built from the recording by `app build`'s calibration ({w.build.out}/calibration.md): fit error "
        f"(median over services) p50 {_f(cal['fit_median_abs_error_pct']['p50'])} %, p95 "
        f"{_f(cal['fit_median_abs_error_pct']['p95'])} %"
        + (
            f"; hold-out (even steps fitted, odd steps compared) p50 {_f(cal['holdout_median_abs_error_pct']['p50'])} %"
            f", p95 {_f(cal['holdout_median_abs_error_pct']['p95'])} %"
            if cal["holdout_median_abs_error_pct"]
            else ""
        )
        + ".",
        "",
        f"**Replay error** ({w.baseline} replayed from the recorded placement under the recorded load, compared "
        f"step by step with the recording): per-service median absolute error of the latency **p50 {_f(med['p50'])} %, "
        f"p95 {_f(med['p95'])} %** (median over {len(rep['services'])} services; over seeds p50 "
        f"{', '.join(_f(x) for x in rep['by_seed_p50_pct'])} %); the app's CPU: recorded "
        f"{_f(rep['cpu']['recorded_cores'], 3)} cores, replayed {_f(rep['cpu']['simulated_cores'], 3)} "
        f"(median step error {_f(rep['cpu']['error_pct'])} %). Every figure below is read with this error.",
        "",
        "| service | recorded p50 / p95 ms | replayed p50 / p95 ms | error p50 / p95 % | steps |",
        "|---|---|---|---|---|",
    ]
    for r in rep["services"]:
        out.append(
            f"| {r['service']} | {_f(r['recorded_p50_ms'], 2)} / {_f(r['recorded_p95_ms'], 2)} | "
            f"{_f(r['simulated_p50_ms'], 2)} / {_f(r['simulated_p95_ms'], 2)} | {_f(r['error_p50_pct'])} / "
            f"{_f(r['error_p95_pct'])} | {r['steps']} |"
        )
    return out


def _sections_stacks(w: WhatIf) -> list[str]:
    j = w.to_json()
    base = j["results"][w.baseline]
    out = [
        "",
        "## What each stack would have done",
        "",
        f"Replays of the same load on the same cluster from the {w.options.start} placement, {w.options.seeds} seed(s) "
        "each (the same seeds for every stack: the same requests). Means over the seeds; Δ against the baseline.",
        "",
        "| stack | p95 ms | mean ms | failed % | CPU core-h | cross-node calls % | evictions | resizes | "
        "p95 at equal CPU vs tuned HPA |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in [w.baseline, *[x for x in w.options.stacks if x != w.baseline]]:
        m = j["results"][s]
        eq = w.equal_cpu.get(s) if w.equal_cpu else None
        if not w.equal_cpu:
            eq_text = "not run (--no-front)"
        elif eq:
            eq_text = f"x{_f(eq['ratio'], 2)} ({eq['position']} the front)"
        else:
            eq_text = "cheaper than every HPA setting"
        delta = "" if s == w.baseline else f" (Δ {m['latency_p95_ms'] - base['latency_p95_ms']:+.1f})"
        out.append(
            f"| {s} | {_f(m['latency_p95_ms'])}{delta} | {_f(m['latency_mean_ms'])} | {_f(m['failed_pct'], 2)} | "
            f"{_f(m['cpu_core_hours'], 4)} | {_f(m['cross_node_call_pct'])} | {_f(m['evictions'], 1)} | "
            f"{_f(m['resizes'], 1)} | {eq_text} |"
        )
    return out


def _sections_shadow(w: WhatIf) -> list[str]:
    sh = w.shadow
    out = ["", "## The shadow logs: what hrl-scheduler would have changed", ""]
    ext = sh.get("extender")
    if ext:
        out += [
            f"**Extender** ({ext['decisions']} decisions, policy {', '.join(ext['policy']) or 'n/a'}): kube-scheduler "
            f"bound {_f(ext['agreement_pct'])} % of the {ext['scored']} scored pods to one of hrl-scheduler's best "
            f"nodes; mean score gap {_f(ext['score_gap_mean'], 2)} points (p95 {_f(ext['score_gap_p95'], 2)}); "
            f"results {ext['results']}.",
            "",
        ]
        if ext["largest_disagreements"]:
            out += ["| pod | bound to | we would have chosen | gap | why ours | why not the bound node |",
                    "|---|---|---|---|---|---|"]  # fmt: skip
            for d in ext["largest_disagreements"]:
                out.append(
                    f"| {d['pod']} | {d['bound_node']} | {', '.join(d['our_choice'] or [])} | "
                    f"{_f(d['score_gap'], 2)} | {'; '.join(d['why_ours'])} | {'; '.join(d['why_not_bound'])} |"
                )
            out.append("")
    else:
        out += ["No extender shadow log in the recording (`hrl-policy record --extender-log`).", ""]
    sim = sh.get("simulator")
    if sim:
        out += [
            f"**Shadow decisions vs the simulator**: on the recorded cluster at each decision's time, the simulator's "
            f"copy of the policy chose one of the extender's best nodes for {_f(sim['same_choice_pct'])} % of "
            f"{sim['compared']} decisions (skipped: {sim['skipped'] or 'none'})."
            + (
                " Where they differ, the live extender scored with another input than the recording holds: most "
                "often its call graph (declared manifests or annotations, where the recording has the measured "
                "rates), the intent or the policy's bundle; the replay's placements are read with that caveat."
                if sim["same_choice_pct"] is not None and sim["same_choice_pct"] < 100
                else ""
            ),
            "",
        ]
    d = sh.get("descheduler")
    if d:
        out += [
            f"**Descheduler** ({d['cycles']} dry-run cycles): {d['moves']} moves proposed "
            f"({d['moves_landing_as_planned']} landing where planned, by reason {d['moves_by_reason']}), "
            f"{len(d['scale_changes'])} scale changes, {d['resizes']} resizes; predicted cross-node calls "
            f"{_f(d['cross_node_call_pct_before'])} % → {_f(d['cross_node_call_pct_after'])} %; blocked by guard: "
            f"{d['blocked_by_guard'] or 'none'}.",
            "",
        ]
        for s in d["scale_changes"][:10]:
            out.append(
                f"- scale {s['workload']}: {s['replicas_before']} → {s['replicas_after']} replicas "
                f"(predicted pod CPU use {_f(s['pod_cpu_util_after'], 2)} of requests)"
            )
        for m in d["example_moves"]:
            out.append(
                f"- move {m['pod']}: {m['from_node']} → {m['predicted_node']} ({m['why']}; co-location "
                f"{_f(m['colocation_before'], 2)} → {_f(m['colocation_after'], 2)})"
            )
    else:
        out += ["No descheduler shadow log in the recording (`hrl-policy record --descheduler-log`)."]
    return out


def markdown(w: WhatIf) -> str:
    """``report.md``."""
    m = w.inputs.recording.manifest
    head = [
        "# What-if report",
        "",
        f"Recording `{w.recording}`: {m.steps} steps of {m.step_s:g} s ({m.steps * m.step_s / 60:.1f} min) from "
        f"{m.cluster or 'a cluster'}, namespaces {', '.join(w.inputs.namespaces)}; "
        f"{len(w.build.app.services)} services, entry {', '.join(w.build.calibration.entry)}; "
        f"{len(w.inputs.cluster.objects)} nodes, {len(w.inputs.cluster.background)} other pods. "
        f"Written by `hrl-policy whatif` (policy/whatif/report.py).",
        "",
    ]
    body = head + _sections_happened(w) + _sections_stacks(w) + _sections_shadow(w)
    if w.plots:
        body += ["", "## Plots", ""] + [f"![{p}]({p})" for p in w.plots]
    notes = w.notes + w.inputs.warnings
    if notes:
        body += ["", "## Notes", ""] + [f"- {n}" for n in dict.fromkeys(notes)]
    return "\n".join(body) + "\n"
