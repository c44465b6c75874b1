"""The body of ``hrl-policy app build`` (:mod:`policy.sim.appbuild`)."""

from __future__ import annotations

import argparse
import json
import sys

from tabulate import tabulate

from policy.telemetry import say, showing_progress

from .core import PROG

__all__ = ["cmd_app_build"]


def cmd_app_build(args: argparse.Namespace) -> int:
    """Build the app; warnings to stderr; the report as JSON on stdout with ``--json``, else a table."""
    from policy.sim.appbuild import build_app
    from policy.sim.measurements import METRIC_ROLES, parse_column_specs

    from .columns import parse_span_columns

    with showing_progress():  # the fit and its checks run for a minute or more
        result = build_app(
            args.manifests,
            args.spans,
            args.out,
            args.metrics,
            entry=args.entry,
            name=args.name,
            span_columns=parse_span_columns(args.span_column),
            metric_columns=parse_column_specs(args.metrics_column, list(METRIC_ROLES), "--metrics-column"),
            latency_from=args.latency_from,
            slo_p95_ms=args.slo_p95_ms,
            timeout_ms=args.timeout_ms,
            iterations=args.iterations,
            seed=args.seed,
            checks=not args.skip_checks,
            compare=args.compare,
            force=args.force,
        )
    for w in result.warnings:
        say(f"{PROG} app build: warning: {w}", prog=PROG)
    report = result.to_json()
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0

    def f(v, d=2):
        return "n/a" if v is None else f"{v:.{d}f}"

    rows = [
        [
            r["service"],
            f"{f(r['measured_p50_ms'])} / {f(r['measured_p95_ms'])}",
            f"{f(r['simulated_p50_ms'])} / {f(r['simulated_p95_ms'])}",
            f"{f(r['error_p50_pct'], 1)} / {f(r['error_p95_pct'], 1)}",
            r["target_from"],
        ]
        for r in report["services"]
    ]
    print(
        tabulate(
            rows,
            headers=["service", "measured p50 / p95 ms", "simulated p50 / p95 ms", "error p50 / p95 %", "from"],
            disable_numparse=True,
        )
    )
    med = report["median_abs_error_pct"]
    print(f"\nmedian absolute error over {len(rows)} services: p50 {f(med['p50'], 1)} %, p95 {f(med['p95'], 1)} %")
    h = report["checks"]["holdout"]
    if h:
        m = h["median_abs_error_pct"]
        print(f"hold-out (fit on half the traces, compared with the other half): p50 {f(m['p50'], 1)} %, "
              f"p95 {f(m['p95'], 1)} %")  # fmt: skip
    c = report["compare"]
    if c:
        m = c["median_abs_diff_pct"]
        diff = f"p50 {f(m['p50'], 2)} %, p95 {f(m['p95'], 2)} %"
        print(f"vs {c['reference']}: median difference of the simulated latencies {diff}")
    v = report.get("verdict")
    if v:
        counts: dict[str, int] = {}
        for r in v["services"]:
            counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
        per = ", ".join(f"{n} {k}" for k, n in counts.items())
        print(f"verdict: {v['overall']} ({'; '.join(v['reasons'])}); services: {per} (calibration.md, section Verdict)")
    print(
        f"entry {', '.join(report['entry'])} at {report['load_rps']:.2f} req/s; wrote {report['app_yaml']}, "
        f"calibration.md{', ' + report['plot'] if report.get('plot') else ''}, calibration.json, graph.json, "
        f"manifests/\n"
        f"run it: {PROG} simulate --app {report['app_yaml']} --trace nasa --policy default-kube-scheduler"
    )
    return 0
