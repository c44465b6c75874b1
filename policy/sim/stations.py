"""A pod's station in the performance model (:mod:`policy.sim.model`, its docstring's step 4): processor sharing on
``kappa`` cores with at most ``max_inflight`` requests in flight, arrivals in batches; :func:`station_stats` gives
its stationary quantities (:class:`Stations`), also used by the topology network's shared links
(:mod:`policy.sim.network`) and the offline reference (:mod:`policy.sim.reference`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Stations", "station_stats", "sample_trunc_geom"]


@dataclass(frozen=True)
class Stations:
    """Per-pod processor-sharing station quantities (all (P,) arrays): ``kappa`` cores available,
    ``speed`` one request's speed (cores), ``f`` requests served at full speed, ``jt`` last tail index,
    ``rho`` load over ``kappa``, ``blocked`` refusal probability, ``head`` P(full speed | admitted),
    ``mean_sojourn_s`` of an admitted request, ``used_cores``, ``batch_factor`` (sojourn multiplier for
    batch arrivals, 1 without); with node speeds or interference ``work_factor`` (the multiplier of each
    pod's CPU work: slowdown / speed of its node), ``node_slowdown`` (N,) the interference slowdown σ; with a
    mesh sidecar ``node_sidecar_cores`` (N,) the proxies' CPU use per node and ``pod_sidecar_cores`` (P,) per pod
    (the proxy is a container of the pod, so its CPU counts in the pod's measured use)."""

    kappa: np.ndarray
    speed: np.ndarray
    f: np.ndarray
    jt: np.ndarray
    rho: np.ndarray
    blocked: np.ndarray
    head: np.ndarray
    mean_sojourn_s: np.ndarray
    used_cores: np.ndarray
    batch_factor: np.ndarray | None = None
    work_factor: np.ndarray | None = None
    node_sidecar_cores: np.ndarray | None = None
    node_slowdown: np.ndarray | None = None
    pod_sidecar_cores: np.ndarray | None = None


def _log_factorials(n: int) -> np.ndarray:
    return np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, n + 1, dtype=np.float64)))])


def _logsumexp(a: np.ndarray, axis: int) -> np.ndarray:
    m = np.max(a, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        return np.squeeze(m, axis=axis) + np.log(np.sum(np.exp(a - m), axis=axis))


def _log_geom_sum(log_r: np.ndarray, J: np.ndarray) -> np.ndarray:
    """log Σ_{j=1..J} r^j, elementwise (−inf where J == 0 or r == 0)."""
    out = np.full(log_r.shape, -np.inf)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        lt = log_r < -1e-9
        gt = log_r > 1e-9
        eq = ~lt & ~gt & (J > 0)
        # r < 1: r (1 − r^J) / (1 − r)
        m = lt & (J > 0) & np.isfinite(log_r)
        out[m] = log_r[m] + np.log(-np.expm1(J[m] * log_r[m])) - np.log(-np.expm1(log_r[m]))
        # r > 1: r^J (1 − r^−J) / (1 − 1/r)
        m = gt & (J > 0)
        out[m] = J[m] * log_r[m] + np.log(-np.expm1(-J[m] * log_r[m])) - np.log(-np.expm1(-log_r[m]))
        out[eq] = np.log(J[eq].astype(np.float64))
    return out


def station_stats(
    lam_rps: np.ndarray,
    work_s: np.ndarray,
    kappa: np.ndarray,
    speed: np.ndarray,
    max_inflight: np.ndarray,
    batch_gamma: np.ndarray | None = None,
) -> Stations:
    """The stationary quantities of each pod's station (module docstring, step 4).

    ``lam_rps`` (P,) arrivals/s, ``work_s`` (P,) mean CPU work per request (core-seconds), ``kappa`` (P,)
    cores, ``speed`` (P,) one request's speed (0 < speed <= kappa), ``max_inflight`` (P,) int K >= 1.
    ``batch_gamma`` (P,) >= 1: E[B²]/E[B] of the batches requests arrive in (parallel calls of one caller
    to the same pod arrive together; 1 = single arrivals). Batches make an arriving request find
    ``(γ+1)/2`` times as many requests and share the CPU with ``(γ−1)/2`` batch-mates on average (exact in
    the mean for one core and exponential work: M^X/M/1); ``batch_factor`` scales the sojourn accordingly.
    """
    P = len(lam_rps)
    K = np.asarray(max_inflight, dtype=np.int64)
    c = kappa / speed
    f = np.minimum(np.floor(c + 1e-9).astype(np.int64), K)
    f = np.maximum(f, 1)
    with np.errstate(divide="ignore"):
        log_a = np.log(lam_rps * work_s / speed)
        log_rho = np.log(lam_rps * work_s / kappa)
    F = int(f.max(initial=1))
    lf = _log_factorials(F)
    n = np.arange(F)
    # head terms n = 0..f-1 relative to the term at n = f: (n - f) log a + log f! - log n!
    with np.errstate(invalid="ignore"):
        t = (n[None, :] - f[:, None]) * log_a[:, None] + lf[f][:, None] - lf[n][None, :]
    t = np.where(n[None, :] < f[:, None], t, -np.inf)
    t = np.where(np.isnan(t), np.inf, t)  # a == 0: every head term dominates (log a = -inf times negative)
    log_head = _logsumexp(t, axis=1) if P else np.zeros(0)
    J = K - f
    log_tail = _log_geom_sum(log_rho, J)
    log_z = _logsumexp(np.stack([log_head, np.zeros(P), log_tail], axis=1), axis=1) if P else np.zeros(0)
    with np.errstate(invalid="ignore", over="ignore"):
        log_wk = np.where(J > 0, J * log_rho, 0.0)
        log_wk = np.where(np.isnan(log_wk), -np.inf, log_wk)
        blocked = np.where(np.isfinite(log_z), np.exp(log_wk - log_z), 0.0)
        head_abs = np.where(np.isfinite(log_z), np.exp(log_head - log_z), 1.0)
    idle = lam_rps * work_s <= 0
    blocked = np.where(idle, 0.0, np.clip(blocked, 0.0, 1.0))
    acc = np.maximum(1.0 - blocked, 1e-300)
    head = np.where(idle, 1.0, np.clip(head_abs / acc, 0.0, 1.0))
    head = np.where(J > 0, head, 1.0)
    jt = np.maximum(J - 1, 0)
    mean_j = _trunc_geom_mean(np.exp(log_rho), jt)
    base = head / speed + (1.0 - head) * (f + 1 + mean_j) / kappa
    factor = np.ones(P)
    if batch_gamma is not None and P:
        g = np.maximum(np.asarray(batch_gamma, np.float64), 1.0)
        bm = (g > 1 + 1e-12) & ~idle
        if bm.any():
            beta, h = (g[bm] + 1.0) / 2.0, (g[bm] - 1.0) / 2.0
            acc_b = acc[bm]
            with np.errstate(over="ignore", invalid="ignore"):
                pn = np.exp(t[bm] - log_z[bm][:, None]) / acc_b[:, None]  # P(n | admitted), n < f
            pn = np.nan_to_num(pn)
            rate_inv = np.maximum(
                1.0 / speed[bm][:, None], (beta[:, None] * n[None, :] + 1.0 + h[:, None]) / kappa[bm][:, None]
            )
            head_part = np.sum(np.where(n[None, :] < f[bm][:, None], pn * rate_inv, 0.0), axis=1)
            tail_part = (1.0 - head[bm]) * (beta * (f[bm] + mean_j[bm]) + 1.0 + h) / kappa[bm]
            factor[bm] = np.maximum((head_part + tail_part) / base[bm], 1.0)
    mean_sojourn = work_s * base * factor
    used = lam_rps * (1.0 - blocked) * work_s
    return Stations(kappa, speed, f, jt, np.exp(log_rho), blocked, head, mean_sojourn, used, factor)


def _trunc_geom_mean(r: np.ndarray, jt: np.ndarray) -> np.ndarray:
    """E[j] for P(j) ∝ r^j on 0..jt."""
    out = jt / 2.0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        lt = r < 1 - 1e-9
        m = lt & (jt > 0)
        rr = r[m]
        n1 = jt[m] + 1
        rn = np.exp(np.maximum(n1 * np.log(rr), -700.0))
        out = np.where(m, 0.0, out)
        out[m] = rr / (1 - rr) - n1 * rn / (1 - rn)
        gt = (r > 1 + 1e-9) & (jt > 0)
        ri = 1.0 / r[gt]
        n1 = jt[gt] + 1
        rn = np.exp(np.maximum(n1 * np.log(ri), -700.0))
        out[gt] = jt[gt] - (ri / (1 - ri) - n1 * rn / (1 - rn))
    out = np.where(jt <= 0, 0.0, out)
    return np.where(np.isfinite(out), out, jt / 2.0)


def sample_trunc_geom(r: np.ndarray, jt: np.ndarray, u: np.ndarray) -> np.ndarray:
    """j in 0..jt with P(j) ∝ r^j, by inverse CDF (stable for r on both sides of 1)."""
    out = np.floor(u * (jt + 1))  # r == 1: uniform
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        lo = r < 1 - 1e-9
        hi = r > 1 + 1e-9
        rr = np.where(lo, r, np.where(hi, 1.0 / np.where(hi, r, 1.0), 0.5))
        log_rr = np.log(rr)
        # r^(jt+1) without subnormals (slow on most CPUs): exp of a clipped exponent
        tail = np.exp(np.maximum((jt + 1) * log_rr, -700.0))
        j = np.floor(np.log1p(-u * (1.0 - tail)) / log_rr)
        j = np.where(rr <= 0, 0.0, j)
        out = np.where(lo, j, np.where(hi, jt - j, out))
    return np.clip(np.nan_to_num(out, nan=0.0), 0, jt)
