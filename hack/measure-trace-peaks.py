#!/usr/bin/env python3
"""The source of the move cost model's default ``load_factor`` (policy/highlevel/move_cost.py): over the bench's
request-rate traces, the largest rate of the next ``--horizon-min`` minutes divided by the rate now, per trace and
pooled (median, 75th and 90th percentiles). Usage: hack/measure-trace-peaks.py [--horizon-min 10]."""

from __future__ import annotations

import argparse

import numpy as np

from policy.sim.traces import load_trace

TRACES = ("nasa", "twitter", "bursty")


def ratios(rate: np.ndarray, horizon: int) -> np.ndarray:
    """(T - horizon,) max(rate[t .. t+horizon]) / rate[t] over the minutes with traffic."""
    out = [rate[t : t + horizon + 1].max() / rate[t] for t in range(len(rate) - horizon) if rate[t] > 0]
    return np.asarray(out, dtype=np.float64)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--horizon-min", type=int, default=10)
    args = ap.parse_args()
    pooled = []
    print(f"{'trace':10s} {'median':>7s} {'p75':>7s} {'p90':>7s}")
    for name in TRACES:
        r = ratios(np.asarray(load_trace(name), dtype=np.float64), args.horizon_min)
        pooled.append(r)
        print(f"{name:10s} " + " ".join(f"{v:7.2f}" for v in np.percentile(r, [50, 75, 90])))
    print(f"{'pooled':10s} " + " ".join(f"{v:7.2f}" for v in np.percentile(np.concatenate(pooled), [50, 75, 90])))


if __name__ == "__main__":
    main()
