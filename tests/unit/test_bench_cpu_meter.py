"""``make bench-scheduler``'s CPU meter (hack/bench-scheduler.py, ``CpuMeter``) counts a child that is still running
when a phase's meter stops — the overload phase's load generator, reaped only after the phase — in the ``bench`` row,
and a child reaped during the phase once."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
BURN = "while True:\n    pass\n"


def _bench():
    return load_script("hrl_bench_scheduler", ROOT / "hack" / "bench-scheduler.py")


def _burn_until(bench, pid: int, cpu_s: float, timeout_s: float = 30.0) -> None:
    """Until process ``pid`` has used ``cpu_s`` more CPU seconds than now."""
    start, t0 = bench.proc_cpu_s(pid), time.monotonic()
    while bench.proc_cpu_s(pid) - start < cpu_s:
        assert time.monotonic() - t0 < timeout_s, "the child did not get the CPU it needed"
        time.sleep(0.02)


def test_a_live_child_counts_in_the_bench_row_and_a_reaped_one_once():
    bench = _bench()
    cp = SimpleNamespace(components=[])  # the slice of ControlPlane the meter reads
    child = subprocess.Popen([sys.executable, "-c", BURN])
    bench.LIVE_CHILDREN.add(child.pid)
    try:
        # alive through the whole phase: its CPU reaches children_cpu_s() only once reaped, after the meter stops
        meter = bench.CpuMeter(cp)
        c0 = bench.proc_cpu_s(child.pid)
        meter.start()
        _burn_until(bench, child.pid, 0.3)
        res = meter.stop(0)
        used = bench.proc_cpu_s(child.pid) - c0
        assert res["bench"] >= 0.9 * used >= 0.25, (res, used)

        # reaped during the phase: its CPU moves from the live count to children_cpu_s(), not counted twice
        meter = bench.CpuMeter(cp)
        c0 = bench.proc_cpu_s(child.pid)
        meter.start()
        _burn_until(bench, child.pid, 0.3)
        c1 = bench.proc_cpu_s(child.pid)
        child.kill()
        child.wait()
        res = meter.stop(0)
        used = c1 - c0
        assert 0.9 * used <= res["bench"] <= used + 0.5, (res, used)
    finally:
        bench.LIVE_CHILDREN.discard(child.pid)
        if child.poll() is None:
            child.kill()
            child.wait()
