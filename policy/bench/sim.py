"""`make bench-sim`: the simulator's speed and its discrete-event cross-check -> section ``simulator`` of
BENCHMARKS.md (and the ``calibration`` section through :mod:`policy.sim.calibrate`).

Speed, on one core (``OMP_NUM_THREADS=1``, set here before numpy loads):

- a 30-service synthetic app on 20 nodes (3 zones), a 30-minute NASA trace at 80% of capacity: the whole
  simulation (cluster, every pod placed by the kube-scheduler model, 30 minutes of traffic), best of 3;
- Online Boutique on 8 nodes, 30 minutes (the demo's default), best of 3;
- a 5,000-service synthetic app (~10,000 pods) on 1,000 nodes: the seconds per simulated minute once the pods
  are placed (placed directly on random nodes: kube-scheduler's model would take minutes for 10,000 pods);
- the same two sizes with the scenario models ON (:func:`speed_scenario`, :func:`speed_large` with
  ``scenario=True``): the topology network (per-pair delay matrix over 3 zones x racks, jitter, NICs, rack
  uplinks and zone links shared by the calls, an Istio-like sidecar), Erms-style interference and Alibaba-like
  background tenants; the small case is the 27-service DeathStarBench social network on 20 nodes, 30 minutes.

Wall times: median and best of the repeats (the development machine is shared: the load average is logged).

Cross-check: :func:`policy.sim.crosscheck.sweep` (every case at utilisation 0.3-0.85 and 1.0-1.5), with the
network cases (shared links, bottlenecks, jitter) judged on their own target (mean 10 %, p95 15 %).

Usage: ``python -m policy.bench.sim [--quick] [--no-crosscheck] [--no-calibration] [--no-write]``.
"""

from __future__ import annotations

import os

__all__ = ["speed_small", "speed_scenario", "speed_large", "markdown", "main"]

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse
import math
import platform
import re
import sys
import time
from dataclasses import replace

import numpy as np

from policy.sim import calibrate
from policy.sim.app import CallParams, load_app
from policy.sim.engine import ClusterSpec, SimConfig, Simulation, rps_for_app
from policy.sim.interference import Interference
from policy.sim.kube_scheduler import KubeSchedulerModel
from policy.sim.model import PerfModel
from policy.sim.network import TopologyNetwork
from policy.sim.pools import NodePool, PoolClusterSpec
from policy.sim.scenario import BackgroundFile, background_for_nodes
from policy.sim.synthetic import synthetic_app
from policy.sim.traces import load_trace

from .markdown import BENCHMARKS_MD, write_section


def _log(msg: str) -> None:
    print(f"[bench-sim] {msg}", file=sys.stderr, flush=True)


def speed_small(
    app_name: str | None, n_services: int = 30, nodes: int = 20, minutes: int = 30, repeats: int = 3
) -> dict[str, float]:
    """Wall seconds of whole simulations: medians over ``repeats`` (``total_s_best``: the best)."""
    runs = []
    pods = 0
    for r in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        app = load_app(app_name) if app_name else synthetic_app(n_services, seed=1)
        rps = rps_for_app(load_trace("nasa", minutes), PerfModel(app), app, 0.8)
        zones = ("zone-a", "zone-b", "zone-c") if app_name is None else ()
        sim = Simulation(
            app, rps, ClusterSpec(nodes=nodes, zones=zones), KubeSchedulerModel(), SimConfig(minutes=minutes, seed=r)
        )
        sim.start()
        t1 = time.perf_counter()
        sim.run()
        t2 = time.perf_counter()
        pods = sim.pods_placed
        runs.append((t2 - t0, t1 - t0, t2 - t1, time.process_time() - c0))
    a = np.array(runs)
    return {
        "total_s": float(np.median(a[:, 0])),
        "placement_s": float(np.median(a[:, 1])),
        "minutes_s": float(np.median(a[:, 2])),
        "total_s_best": float(a[:, 0].min()),
        "cpu_s": float(np.median(a[:, 3])),
        "pods": pods,
    }


#: The scenario models of the speed benchmark: topology network (delay matrix, jitter, shared links, sidecar) and
#: interference, with the values of the network-datacenter and interference scenarios.
def _scenario_models(racks_per_zone: int):

    net = TopologyNetwork(
        pair_cv=0.3,
        jitter_frac=0.25,
        jitter_cv=1.5,
        nic_gbps=0.75,
        rack_uplink_gbps=10.0,
        cross_zone_gbps=25.0,
        sidecar_ms=2.65,
        sidecar_cpu_ms=0.35,
        seed=1,
    )
    inter = Interference(
        cpu_knee=0.5, cpu_slope=0.6, mem_knee=0.4, mem_slope=1.0, app_gbps_per_core=1.0, background_gbps_per_core=8.0
    )
    return net, inter


def _with_bytes(app, request_bytes: float = 2048.0, response_bytes: float = 32768.0):

    calls = {}
    for e in app.graph.edges:
        c = app.calls.get((e.caller, e.callee), CallParams())
        calls[(e.caller, e.callee)] = c.model_copy(
            update={
                "request_bytes": c.request_bytes or request_bytes,
                "response_bytes": c.response_bytes or response_bytes,
            }
        )
    return replace(app, calls=calls)


def _pools(nodes: int, cpu_m: int, memory_gib: int, racks_per_zone: int, background: bool):

    pool = NodePool(
        "general",
        nodes,
        cpu_m,
        memory_gib * 1024**3,
        zones=("zone-a", "zone-b", "zone-c"),
        region="region-1",
        racks_per_zone=racks_per_zone,
    )
    spec = PoolClusterSpec.of((pool,))
    if background:
        bg = BackgroundFile(use_from="alibaba-2021", use_scale=0.6, cpu_use_cv=0.3, seed=3)
        spec = replace(spec, background=background_for_nodes([cpu_m] * nodes, [memory_gib * 1024**3] * nodes, bg))
    return spec


def speed_scenario(app_name: str = "dsb-social-network", nodes: int = 20, minutes: int = 30, repeats: int = 3) -> dict:
    """Wall seconds of whole simulations with the scenario models ON (module docstring): ``total_s`` /
    ``placement_s`` / ``minutes_s`` medians, ``total_s_best``, ``services``, ``pods``."""
    runs = []
    pods = 0
    app0 = _with_bytes(load_app(app_name))
    for r in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        rps = rps_for_app(load_trace("nasa", minutes), PerfModel(app0), app0, 0.8)
        net, inter = _scenario_models(2)
        cfg = SimConfig(minutes=minutes, seed=r, network_topology=net, interference=inter)
        sim = Simulation(app0, rps, _pools(nodes, 2000, 8, 2, True), KubeSchedulerModel(), cfg)
        sim.start()
        t1 = time.perf_counter()
        sim.run()
        t2 = time.perf_counter()
        pods = sim.pods_placed
        runs.append((t2 - t0, t1 - t0, t2 - t1, time.process_time() - c0))
    a = np.array(runs)
    return {
        "total_s": float(np.median(a[:, 0])),
        "placement_s": float(np.median(a[:, 1])),
        "minutes_s": float(np.median(a[:, 2])),
        "total_s_best": float(a[:, 0].min()),
        "cpu_s": float(np.median(a[:, 3])),
        "services": len(app0.graph.services),
        "pods": pods,
        "nodes": nodes,
    }


def speed_large(
    n_services: int = 5000, nodes: int = 1000, minutes: int = 5, scenario: bool = False
) -> dict[str, float]:
    """Seconds per simulated minute of a large cluster (after direct placement); ``scenario``: with the
    scenario models ON (topology network over 3 zones x 10 racks, interference, background tenants)."""
    t0 = time.perf_counter()
    app = synthetic_app(n_services, seed=1)
    m = PerfModel(app)
    cap = m.capacity_rps(
        {w.service: w.replicas for w in app.workloads}, {w.service: w.pod_limits.cpu_m / 1000.0 for w in app.workloads}
    )
    rps = np.full(minutes, 0.5 * cap)
    if scenario:
        net, inter = _scenario_models(10)
        net = type(net)(**{**net.__dict__, "nic_gbps": 10.0, "rack_uplink_gbps": 40.0, "cross_zone_gbps": 100.0})
        spec = _pools(nodes, 16000, 64, 10, True)
        cfg = SimConfig(minutes=minutes, network_topology=net, interference=inter)
    else:
        spec = ClusterSpec(nodes=nodes, cpu_m=16000, memory_bytes=64 * 1024**3, zones=("zone-a", "zone-b", "zone-c"))
        cfg = SimConfig(minutes=minutes)
    sim = Simulation(app, rps, spec, KubeSchedulerModel(), cfg)
    t1 = time.perf_counter()
    sim.start(schedule=False)  # the pods exist, background tenants sit on their nodes, the app's pods are Pending
    rng = np.random.default_rng(0)
    names = [n.name for n in sim.cluster.nodes]
    for p in sim.cluster.pending():
        sim.schedule_one(p, names[int(rng.integers(len(names)))])
    t2 = time.perf_counter()
    per = []
    cpu = []
    for _ in range(minutes):
        a, c = time.perf_counter(), time.process_time()
        st = sim.advance()
        per.append(time.perf_counter() - a)
        cpu.append(time.process_time() - c)
    return {
        "services": n_services,
        "nodes": nodes,
        "pods": sim.pods_placed,
        "edges": len(app.graph.edges),
        "build_s": t1 - t0,
        "placement_s": t2 - t1,
        "minute_s_median": float(np.median(per)),
        "minute_s_max": float(np.max(per)),
        "minute_s_first": per[0],
        "minute_cpu_s_median": float(np.median(cpu)),
        "p95_ms": st.p95_ms,
        "failed_pct": 100.0 * st.failed / st.offered if st.offered else 0.0,
        "samples_per_service": int(max(16, min(sim.config.n_samples, sim.config.sample_budget // n_services))),
    }


def markdown(
    small: dict,
    ob: dict,
    large: dict,
    points,
    verdict: dict | None,
    seconds: float,
    scen: dict | None = None,
    large_scen: dict | None = None,
    load: tuple[float, float] | None = None,
) -> str:
    from policy.sim import crosscheck

    cpu = platform.processor() or platform.machine()
    loadtxt = f" The 1-minute load average was {load[0]:.1f} at the start and {load[1]:.1f} at the end." if load else ""
    out = [
        f"Written by `make bench-sim` (`python -m policy.bench.sim`) in {seconds:.0f} s on one core "
        f"(OMP_NUM_THREADS=1; {cpu}, Python {platform.python_version()}, numpy {np.__version__}); the "
        f"development machine is shared, so wall times carry noise.{loadtxt}",
        "",
        "### Speed",
        "",
        "Wall seconds, medians of the repeats (best in parentheses); CPU s: the process's CPU time (median), less "
        "sensitive to the other jobs on the machine.",
        "",
        "| case | pods | placement s | traffic s | total s | CPU s | target |",
        "|---|---|---|---|---|---|---|",
        f"| 30-service synthetic app, 20 nodes, 30 min (NASA trace, kube-scheduler model places every pod) | "
        f"{small['pods']} | {small['placement_s']:.2f} | {small['minutes_s']:.2f} | "
        f"**{small['total_s']:.2f}** ({small['total_s_best']:.2f}) | {small['cpu_s']:.2f} | < 2 s |",
        f"| Online Boutique, 8 nodes, 30 min (the demo's run) | {ob['pods']} | {ob['placement_s']:.2f} | "
        f"{ob['minutes_s']:.2f} | {ob['total_s']:.2f} ({ob['total_s_best']:.2f}) | {ob['cpu_s']:.2f} | |",
    ]
    if scen:
        out.append(
            f"| **scenario models ON**: DSB social network ({scen['services']} services), {scen['nodes']} nodes "
            "(3 zones x 2 racks), 30 min: topology network (delay matrix, jitter, shared NICs / uplinks / zone "
            "links, Istio-like sidecar), interference, Alibaba-like tenants | "
            f"{scen['pods']} | {scen['placement_s']:.2f} | {scen['minutes_s']:.2f} | "
            f"**{scen['total_s']:.2f}** ({scen['total_s_best']:.2f}) | {scen['cpu_s']:.2f} | < 2 s |"
        )
    out += [
        "",
        f"Large cluster: {large['services']:,} services ({large['edges']:,} call edges, {large['pods']:,} pods) on "
        f"{large['nodes']:,} nodes: **{large['minute_s_median']:.2f} s per simulated minute** (median of "
        f"{5}, max {large['minute_s_max']:.2f} s, CPU {large['minute_cpu_s_median']:.2f} s; target < 1 s), "
        f"{large['samples_per_service']} latency samples "
        f"per service per minute (sample budget 10^6). Building the app took {large['build_s']:.1f} s, placing "
        f"the pods directly {large['placement_s']:.1f} s (kube-scheduler's model is not timed at this size).",
        "",
    ]
    if large_scen:
        out += [
            f"With the scenario models ON (the same app on {large_scen['nodes']:,} nodes in 3 zones x 10 racks, "
            "topology network with shared links, jitter and sidecars, interference, Alibaba-like tenants): "
            f"**{large_scen['minute_s_median']:.2f} s per simulated minute** (median of 5, max "
            f"{large_scen['minute_s_max']:.2f} s, CPU {large_scen['minute_cpu_s_median']:.2f} s; target < 1 s).",
            "",
        ]
    if points:
        v = verdict or crosscheck.verdict(points)
        net_pts = [p for p in points if p.case in crosscheck.NETWORK]
        vn = crosscheck.verdict(net_pts, exclude=()) if net_pts else None
        out += [
            "### Cross-check: fast model vs discrete-event simulation (simpy)",
            "",
            "Cases of `policy/sim/crosscheck.py`; utilisation = the busiest pod's CPU demand over the cores it "
            "can use (or the busiest node's). DES figures with batch-means 95% CI (20 batches); a latency point "
            "is re-run longer until its CI is under 2.8% (or 2·10^6 requests). Fast figures: one step of "
            "200,000 sampled requests (4 for retry cases, the retry load settling across steps).",
            "",
            crosscheck.markdown(points),
            "",
            f"Criterion (issue 4), over every case but the two stress cases and the network cases (below): "
            f"at utilisation <= 0.85 "
            f"the worst mean error is **{v['max_abs_mean_err_pct']:.1f}%** and the worst p95 error "
            f"**{v['max_abs_p95_err_pct']:.1f}%** (target <= 10%; worst DES CI {v['max_des_ci_pct']:.1f}%); at "
            f"and past saturation the worst failed-% difference is **{v['max_abs_failed_diff_pts']:.1f} "
            "points** (target <= 5).",
            "",
        ]
        if vn is not None:
            out += [
                "Network model (issue 10: the cases `shared-link`, `bottleneck`, `jitter`: shared links, flows with "
                "different bottlenecks, per-pair delays, jitter, sidecar latency): at utilisation <= 0.85 the worst "
                f"mean error is **{vn['max_abs_mean_err_pct']:.1f}%** (target <= 10%) and the worst p95 error "
                f"**{vn['max_abs_p95_err_pct']:.1f}%** (target <= 15%; worst DES CI {vn['max_des_ci_pct']:.1f}%); "
                f"past saturation the worst failed-% difference is {vn['max_abs_failed_diff_pts']:.1f} points. The "
                "fast model times a flow at its bottleneck link (processor sharing, PASTA) and draws each call's "
                "transfers independently; the DES moves every flow at its bottleneck share, recomputed at each "
                "flow arrival and departure, so consecutive calls over one congested link are correlated there.",
                "",
            ]
        out += [
            "Stress cases (reported, outside the criterion; run at fixed lengths, so their CIs are wider):",
            "",
            "- `fanout-batch` (a caller making 2.5 parallel calls to a service with one pod): the model corrects "
            "each call's mean for batch arrivals (M^X/M/1) but draws the parallel calls' sojourns "
            "independently, while in the DES batch-mates sharing one pod finish together, so the maximum of "
            "the batch is overestimated. Parallel multi-calls to a service with several pods (`fanout`) are "
            "within the criterion.",
            "- `retry-storm` (retries with a tight per-try timeout on the bottleneck itself) is bistable: a "
            "burst that pushes the queue past the timeout makes retries, whose load keeps the queue long "
            "(a metastable failure). The DES falls into the storm at some point of a long run; the fast model "
            "is a mean-field model: it stays in the good state when it starts there and in the storm when the "
            "previous minute was in it (the retry failure share carries over between minutes), so it "
            "reproduces storms once triggered but not the random trigger. Retries driven by the callee's own "
            "latency tail (`retries`) are within the criterion.",
        ]
    return "\n".join(out)


_ROW = re.compile(
    r"^\| (?P<case>[\w-]+) \| (?P<util>[\d.]+) \| (?P<lam>[\d.]+) \| (?P<req>[\d,]+) \| "
    r"(?P<dm>[\d.]+) \(±(?P<dmci>[\d.]+|inf)\) \| (?P<fm>[\d.]+) \([+-][\d.]+\) \| "
    r"(?P<dp>[\d.]+) \(±(?P<dpci>[\d.]+|inf)\) \| (?P<fp>[\d.]+) \([+-][\d.]+\) \| "
    r"(?P<df>[\d.]+) \| (?P<ff>[\d.]+) \|$"
)


def previous_points(names_to_skip: set[str], path=None) -> list:
    """The cross-check rows of the current ``simulator`` section of BENCHMARKS.md for the cases not in
    ``names_to_skip``, as :class:`policy.sim.crosscheck.Point` (values as printed, 2 decimals): what
    ``--keep-other-cases`` carries over when only some cases are re-run (the DES is seeded and a case's
    model path unchanged, so a re-run gives the same rows)."""
    from policy.sim.crosscheck import Point

    text = (path or BENCHMARKS_MD).read_text(encoding="utf-8")
    i, j = text.find("<!-- BEGIN simulator -->"), text.find("<!-- END simulator -->")
    out = []
    for line in text[i:j].splitlines() if i >= 0 < j else []:
        m = _ROW.match(line.strip())
        if not m or m["case"] in names_to_skip:
            continue
        dm, dp = float(m["dm"]), float(m["dp"])
        ci = lambda v, pct: math.inf if pct == "inf" else v * float(pct) / 100.0  # noqa: E731
        out.append(
            Point(
                m["case"],
                float(m["util"]),
                float(m["lam"]),
                int(m["req"].replace(",", "")),
                dm,
                ci(dm, m["dmci"]),
                dp,
                ci(dp, m["dpci"]),
                float(m["df"]),
                float(m["fm"]),
                float(m["fp"]),
                float(m["ff"]),
                0.0,
                {"carried_over": True},
            )
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats and a reduced cross-check")
    ap.add_argument("--no-crosscheck", action="store_true")
    ap.add_argument("--no-calibration", action="store_true")
    ap.add_argument("--no-write", action="store_true", help="print, do not write BENCHMARKS.md")
    ap.add_argument("--cases", default=None, help="cross-check only these cases (comma-separated)")
    ap.add_argument(
        "--keep-other-cases",
        action="store_true",
        help="with --cases: carry the other cases' rows over from the current BENCHMARKS.md section",
    )
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    load0 = os.getloadavg()[0]
    reps = 1 if args.quick else 3
    _log("speed: 30-service app, 20 nodes, 30 minutes ...")
    small = speed_small(None, repeats=reps)
    _log(f"  {small}")
    _log("speed: Online Boutique, 8 nodes, 30 minutes ...")
    ob = speed_small("online-boutique", nodes=8, repeats=reps)
    _log(f"  {ob}")
    _log("speed: DSB social network, 20 nodes, 30 minutes, scenario models ON ...")
    scen = speed_scenario(repeats=reps)
    _log(f"  {scen}")
    _log("speed: 5,000 services on 1,000 nodes ...")
    large = speed_large()
    _log(f"  {large}")
    _log("speed: 5,000 services on 1,000 nodes, scenario models ON ...")
    large_scen = speed_large(scenario=True)
    _log(f"  {large_scen}")
    points = []
    if not args.no_crosscheck:
        from policy.sim import crosscheck

        _log("cross-check sweep (slow) ...")

        def prog(p):
            _log(
                f"  {p.case} util {p.util}: DES {p.requests} req mean {p.des_mean_ms:.2f} (±{p.des_mean_ci_pct:.1f}%) "
                f"p95 {p.des_p95_ms:.2f} (±{p.des_p95_ci_pct:.1f}%) failed {p.des_failed_pct:.2f}% | fast mean "
                f"{p.mean_err_pct:+.1f}% p95 {p.p95_err_pct:+.1f}% failed {p.fast_failed_pct:.2f}% "
                f"[{p.des_seconds:.0f} s]"
            )

        if args.quick:
            points = crosscheck.sweep(
                ["single", "chain", "shared-link"], (0.5,), (1.2,), scale=0.5, progress=prog, target_ci_pct=None
            )
        else:
            names = args.cases.split(",") if args.cases else None
            unknown = sorted(set(names or ()) - set(crosscheck.cases()))
            if unknown:
                raise SystemExit(f"--cases: unknown case(s) {unknown} (known: {', '.join(crosscheck.cases())})")
            points = crosscheck.sweep(names, progress=prog)
            if names and args.keep_other_cases:
                kept = previous_points(set(names))
                order = list(crosscheck.cases())
                points = sorted([*kept, *points], key=lambda p: (order.index(p.case), p.util))
                carried = sorted({p.case for p in kept}, key=order.index)
    load1 = os.getloadavg()[0]
    md = markdown(small, ob, large, points, None, time.perf_counter() - t0, scen, large_scen, (load0, load1))
    if points and args.cases and args.keep_other_cases:
        md = md.replace(
            "### Cross-check: fast model vs discrete-event simulation (simpy)\n",
            "### Cross-check: fast model vs discrete-event simulation (simpy)\n\n"
            f"This run re-ran the cases {', '.join(args.cases.split(','))}; the rows of "
            f"{', '.join(carried)} are carried over from the previous `make bench-sim` (their model path is "
            "unchanged and the DES is seeded, so a re-run gives the same rows; an interrupted full run of this "
            "version reproduced the first five of them digit for digit).\n",
        )
    print(md)
    if not args.no_write:
        write_section("simulator", md)
        _log("wrote BENCHMARKS.md section simulator")
    if not args.no_calibration:
        cal_md = calibrate.markdown(calibrate.calibrate())
        print(cal_md)
        if not args.no_write:
            write_section("calibration", cal_md)
            _log("wrote BENCHMARKS.md section calibration")
    return 0


if __name__ == "__main__":
    sys.exit(main())
