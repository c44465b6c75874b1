"""DRPC's workload predictor in numpy: a GRU over the last ``window`` minutes of a request rate, forecasting
the next ``horizon`` minutes (arXiv 2407.10169, "Workload Processor and Predictor": an LSTM/GRU forecaster
feeding the autoscaler; we use the GRU). Trained in torch by :mod:`policy.train.drpc`
(:class:`policy.train.td3.WorkloadPredictor`), served here from a bundle (no torch).

Normalisation (scale-free, so one network serves every service and every trace)::

    m  = mean(x[-window:]) + eps            eps = 1e-3 requests/s
    x̂  = x / m                              (window, 1)  the network's input
    ŷ  = x̂[-1] + Linear(GRU(x̂))            (horizon,) the forecast in units of m (the head predicts the
                                            change from the last value: ``architecture.skip: last_value``;
                                            without it, ŷ = Linear(GRU(x̂)))
    y  = m · max(ŷ, 0)                      requests/s, minutes t+1 .. t+horizon

GRU (PyTorch ``nn.GRU`` gate order r, z, n; weights ``gru.weight_ih_l0`` (3H, 1), ``gru.weight_hh_l0`` (3H, H),
``gru.bias_ih_l0``, ``gru.bias_hh_l0``; head ``head.weight`` (horizon, H), ``head.bias``)::

    r = σ(W_ir x + b_ir + W_hr h + b_hr)
    z = σ(W_iz x + b_iz + W_hz h + b_hz)
    n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn))
    h ← (1 − z) ⊙ n + z ⊙ h

(source: the ``torch.nn.GRU`` documentation). Bundle: ``level: high``, ``architecture.type: gru-forecast-v1``,
``feature_spec: {"rates": FORECAST_SPEC}``, dims ``window``, ``horizon``, ``hidden``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from policy.bundle import BundleError, PolicyBundle
from policy.features import FeatureSpec, FeatureSpecError, check_specs

__all__ = [
    "FORECAST_ARCH",
    "FORECAST_SPEC",
    "EPS_RPS",
    "GruForecaster",
    "forecast_weight_shapes",
    "normalize_windows",
    "naive_forecast",
    "forecast_errors",
    "rate_history",
    "Forecaster",
    "TrendForecaster",
    "forecast_factor",
]

FORECAST_ARCH = "gru-forecast-v1"
#: The predictor's one input column (per minute of the window).
FORECAST_SPEC = FeatureSpec.of([("rate_over_window_mean", "requests/s ÷ (mean of the window + 1e-3)")])
#: Added to the window mean before dividing (requests/s): an idle series stays finite.
EPS_RPS = 1e-3


def forecast_weight_shapes(hidden: int, horizon: int) -> dict[str, tuple[int, ...]]:
    """Every weight of ``gru-forecast-v1`` and its shape (torch layout)."""
    H = hidden
    return {
        "gru.weight_ih_l0": (3 * H, 1),
        "gru.weight_hh_l0": (3 * H, H),
        "gru.bias_ih_l0": (3 * H,),
        "gru.bias_hh_l0": (3 * H,),
        "head.weight": (horizon, H),
        "head.bias": (horizon,),
    }


def normalize_windows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(B, W) rates (requests/s, >= 0) → ((B, W) x / m, (B,) m) with m = window mean + :data:`EPS_RPS`."""
    x = np.asarray(x, dtype=np.float64)
    m = x.mean(axis=1) + EPS_RPS
    return (x / m[:, None]).astype(np.float32), m


def naive_forecast(x: np.ndarray, horizon: int) -> np.ndarray:
    """The last-value forecast: (B, W) → (B, horizon), every future minute equal to the last one."""
    x = np.asarray(x, dtype=np.float64)
    return np.repeat(x[:, -1:], horizon, axis=1)


def forecast_errors(pred: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """Errors of (B, horizon) forecasts against the truth, both in requests/s: ``wape`` (Σ|e| / Σ|y|, the
    weighted absolute percentage error, 0..), ``rmse`` (requests/s) and ``mae`` (requests/s)."""
    e = np.asarray(pred, np.float64) - np.asarray(truth, np.float64)
    denom = float(np.abs(truth).sum())
    return {
        "wape": float(np.abs(e).sum() / denom) if denom > 0 else 0.0,
        "rmse": float(np.sqrt(np.mean(e**2))),
        "mae": float(np.mean(np.abs(e))),
    }


def _sigmoid(a: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * a))


def rate_history(rates: np.ndarray) -> np.ndarray:
    """``rates`` as a (B, T) float64 array of per-minute rates (requests/s); a 1-D history is one row.
    Raises ValueError for another shape, T < 1, or a negative or non-finite rate."""
    r = np.asarray(rates, dtype=np.float64)
    if r.ndim == 1:
        r = r[None, :]
    if r.ndim != 2 or r.shape[1] < 1:
        raise ValueError(f"rates: expected (B, T >= 1) requests/s, got shape {r.shape}")
    if not np.all(np.isfinite(r)) or np.any(r < 0):
        raise ValueError("rates: must be finite and >= 0")
    return r


class GruForecaster:
    """The numpy predictor built from a ``gru-forecast-v1`` bundle.

    ``window`` / ``horizon`` (minutes) and ``hidden`` come from the bundle's dims. Raises
    :class:`~policy.bundle.BundleError` for a bundle of another level, architecture or feature spec, or a
    missing / misshapen weight.
    """

    def __init__(self, bundle: PolicyBundle):
        where = f"predictor bundle {bundle.policy_version}"
        if bundle.level != "high":
            raise BundleError(f"{where}: level: expected 'high', found {bundle.level!r}")
        if bundle.architecture.get("type") != FORECAST_ARCH:
            raise BundleError(
                f"{where}: architecture.type: expected {FORECAST_ARCH!r}, found {bundle.architecture.get('type')!r}"
            )

        try:
            check_specs({"rates": FORECAST_SPEC}, dict(bundle.feature_spec))
        except FeatureSpecError as exc:
            raise BundleError(f"{where}: {exc}") from None
        try:
            self.window, self.horizon, self.hidden = (int(bundle.dims[k]) for k in ("window", "horizon", "hidden"))
        except KeyError as exc:
            raise BundleError(f"{where}: dims: missing {exc.args[0]!r}") from None
        self.w: dict[str, np.ndarray] = {}
        for k, shape in forecast_weight_shapes(self.hidden, self.horizon).items():
            a = bundle.array(k)
            if a.shape != shape:
                raise BundleError(f"{where}: weights[{k!r}]: expected shape {list(shape)}, found {list(a.shape)}")
            self.w[k] = np.ascontiguousarray(a.T if a.ndim == 2 else a, dtype=np.float32)
        skip = bundle.architecture.get("skip")
        if skip not in (None, "last_value"):
            raise BundleError(f"{where}: architecture.skip: expected 'last_value' or absent, found {skip!r}")
        self.last_value_skip = skip == "last_value"
        self.bundle = bundle
        self.version = bundle.policy_version

    @staticmethod
    def load(path: str | Path) -> GruForecaster:
        """Load the predictor bundle in directory ``path``."""
        return GruForecaster(
            PolicyBundle.load(
                path, level="high", feature_spec={"rates": FORECAST_SPEC}, architecture_type=FORECAST_ARCH
            )
        )

    def forward_normalized(self, x: np.ndarray) -> np.ndarray:
        """The network itself: (B, W) normalised rates → (B, horizon) float32 (units of the window mean)."""
        x = np.asarray(x, dtype=np.float32)
        if x.ndim != 2:
            raise ValueError(f"x: expected (B, window) rates, got shape {x.shape}")
        w = self.w
        H = self.hidden
        B = x.shape[0]
        h = np.zeros((B, H), np.float32)
        wi, wh, bi, bh = w["gru.weight_ih_l0"], w["gru.weight_hh_l0"], w["gru.bias_ih_l0"], w["gru.bias_hh_l0"]
        gi_all = x[:, :, None] * wi[0][None, None, :] + bi  # (B, W, 3H): the input part of every step
        for t in range(x.shape[1]):
            gi = gi_all[:, t]
            gh = h @ wh + bh
            r = _sigmoid(gi[:, :H] + gh[:, :H])
            z = _sigmoid(gi[:, H : 2 * H] + gh[:, H : 2 * H])
            n = np.tanh(gi[:, 2 * H :] + r * gh[:, 2 * H :])
            h = (1.0 - z) * n + z * h
        y = h @ w["head.weight"] + w["head.bias"]
        if self.last_value_skip:
            y = y + x[:, -1:]
        return y.astype(np.float32, copy=False)

    def predict(self, rates: np.ndarray) -> np.ndarray:
        """(B, T) per-minute rates (requests/s, T >= 1; the last ``window`` minutes are used, a shorter
        history is padded on the left with its first value) → (B, horizon) forecast rates (requests/s, >= 0)
        for the next ``horizon`` minutes. Raises ValueError for negative or non-finite rates."""
        r = rate_history(rates)
        if r.shape[1] < self.window:
            r = np.concatenate([np.repeat(r[:, :1], self.window - r.shape[1], axis=1), r], axis=1)
        xn, m = normalize_windows(r[:, -self.window :])
        y = self.forward_normalized(xn)
        return np.maximum(y, 0.0) * m[:, None]


# ---- forecasting -----------------------------------------------------------------------------------------


@runtime_checkable
class Forecaster(Protocol):
    """The workload predictor's interface (as :class:`policy.highlevel.forecast.GruForecaster`): ``predict`` maps
    (B, T) per-period rates (requests/s, >= 0) to (B, horizon) forecast rates for the next periods."""

    def predict(self, rates: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class TrendForecaster:
    """The stand-in predictor: a least-squares line through the last ``window`` (>= 2) points, extrapolated
    ``horizon`` (>= 1) periods ahead, floored at 0. One point: the last value (no trend)."""

    window: int = 5
    horizon: int = 1

    def predict(self, rates: np.ndarray) -> np.ndarray:
        """(B, T) → (B, horizon) requests/s; see the class docstring. Raises ValueError for negative or
        non-finite rates or an empty history."""
        r = rate_history(rates)
        x = r[:, -max(2, self.window) :]
        t = x.shape[1]
        steps = np.arange(1, self.horizon + 1, dtype=np.float64)
        if t < 2:
            return np.repeat(x[:, -1:], self.horizon, axis=1)
        s = np.arange(t, dtype=np.float64)
        sc = s - s.mean()
        slope = (x - x.mean(axis=1, keepdims=True)) @ sc / float(sc @ sc)
        last_fit = x.mean(axis=1) + slope * sc[-1]
        return np.maximum(last_fit[:, None] + slope[:, None] * steps[None, :], 0.0)


def forecast_factor(series: np.ndarray, forecaster: Forecaster | None, lo: float = 0.5, hi: float = 2.0) -> float:
    """Forecast change of a rate: mean forecast over the predictor's horizon ÷ the last measured value, clipped
    to ``[lo, hi]``; 1 when the series is empty, its last value is ~0 (< 1e-6 requests/s), or the predictor
    fails (bad input never stops a cycle over a forecast)."""
    x = np.asarray(series, dtype=np.float64)
    if x.size == 0 or not np.isfinite(x[-1]) or x[-1] < 1e-6:
        return 1.0
    fc = forecaster if forecaster is not None else TrendForecaster()
    try:
        pred = float(np.mean(fc.predict(x[None, :])))
    except (ValueError, FloatingPointError):
        return 1.0
    if not math.isfinite(pred):
        return 1.0
    return float(np.clip(pred / x[-1], lo, hi))
