"""The workload predictor: numpy serving vs torch, its data split, and that the committed one beats a naive
forecast on held-out data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch  # the [train] extra, which `make test` installs

from policy.bundle import BundleError, PolicyBundle
from policy.features import FeatureSpec
from policy.highlevel import (
    FORECAST_ARCH,
    FORECAST_SPEC,
    GruForecaster,
    forecast_errors,
    naive_forecast,
    normalize_windows,
)
from policy.sim.traces import WINDOWS
from policy.train.forecast_data import (
    EXCLUDE_MARGIN_MIN,
    HELDOUT_SEEDS,
    TRAIN_SEEDS,
    heldout_sets,
    segments,
    windows_of,
)
from policy.train.td3 import WorkloadPredictor

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "policy" / "bundles" / "drpc" / "predictor"


def bundle_of(model: WorkloadPredictor, window: int, spec: FeatureSpec = FORECAST_SPEC) -> PolicyBundle:
    arch = {"type": FORECAST_ARCH, **({"skip": "last_value"} if model.last_value_skip else {})}
    return PolicyBundle(
        level="high",
        policy_version="test-predictor",
        feature_spec={"rates": spec},
        dims={"window": window, "horizon": model.head.out_features, "hidden": model.gru.hidden_size},
        architecture=arch,
        weights={k: v.detach().numpy() for k, v in model.state_dict().items()},
    )


@pytest.mark.parametrize("skip", [False, True])
def test_the_numpy_gru_matches_torch_to_1e_5(skip):
    torch.manual_seed(3)
    model = WorkloadPredictor(hidden=16, horizon=4, last_value_skip=skip)
    x = np.random.default_rng(0).uniform(0.2, 3.0, size=(7, 12)).astype(np.float32)
    with torch.no_grad():
        want = model(torch.as_tensor(x[:, :, None])).numpy()
    got = GruForecaster(bundle_of(model, 12)).forward_normalized(x)
    assert np.max(np.abs(got - want)) < 1e-5


def test_predict_normalises_by_the_window_mean_and_pads_a_short_history():
    torch.manual_seed(0)
    f = GruForecaster(bundle_of(WorkloadPredictor(hidden=8, horizon=3, last_value_skip=True), 10))
    rates = np.array([[5.0, 6.0, 7.0]])
    padded = np.array([[5.0] * 8 + [5.0, 6.0, 7.0]])[:, -10:]
    assert np.allclose(f.predict(rates), f.predict(padded))
    # scale-free: ten times the load, ten times the forecast
    assert np.allclose(f.predict(10 * padded), 10 * f.predict(padded), rtol=1e-4)
    assert f.predict(padded).shape == (1, 3) and np.all(f.predict(padded) >= 0)


@pytest.mark.parametrize("bad", [[[1.0, -1.0]], [[1.0, float("nan")]]])
def test_predict_refuses_negative_or_non_finite_rates(bad):
    f = GruForecaster(bundle_of(WorkloadPredictor(hidden=4, horizon=2), 5))
    with pytest.raises(ValueError, match="rates"):
        f.predict(np.array(bad))


def test_a_bundle_with_another_input_spec_is_refused_naming_both():
    other = FeatureSpec.of([("rate", "requests/s")])
    b = bundle_of(WorkloadPredictor(hidden=4, horizon=2), 5, spec=other)
    with pytest.raises(BundleError, match="expected 1 features \\[rate_over_window_mean.*found 1 features \\[rate "):
        GruForecaster(b)


def test_naive_forecast_and_errors():
    x = np.array([[1.0, 2.0, 4.0]])
    assert naive_forecast(x, 2).tolist() == [[4.0, 4.0]]
    e = forecast_errors(np.array([[4.0, 4.0]]), np.array([[4.0, 8.0]]))
    assert e["wape"] == pytest.approx(4 / 12) and e["mae"] == pytest.approx(2.0)
    xn, m = normalize_windows(x)
    assert np.allclose(xn.mean(axis=1), 1.0, atol=1e-3) and m[0] == pytest.approx(7 / 3 + 1e-3)


@pytest.mark.parametrize("trace", ["nasa", "twitter"])
def test_training_and_held_out_segments_stay_a_day_away_from_the_evaluation_window(trace):
    w = WINDOWS[trace]
    lo, hi = w.start_min - EXCLUDE_MARGIN_MIN, w.start_min + w.length_min + EXCLUDE_MARGIN_MIN
    train, held = segments(trace)
    from policy.sim.traces import data_dir, read_counts

    counts = read_counts(str(data_dir() / w.file))
    # locate each segment in the trace: before the cut-out or after it, never inside
    pos = 0
    seen = []
    for seg in train + held:
        start = next(i for i in range(pos, len(counts) - len(seg) + 1) if np.array_equal(counts[i : i + len(seg)], seg))
        seen.append((start, start + len(seg)))
        pos = start
    assert all(b <= max(lo, 0) or a >= hi for a, b in seen)
    assert sum(len(s) for s in held) > 0.15 * sum(len(s) for s in train + held)


def test_synthetic_training_and_held_out_seeds_differ_from_the_bursty_benchmark_trace():
    assert 20240710 not in TRAIN_SEEDS and 20240710 not in HELDOUT_SEEDS
    assert not set(TRAIN_SEEDS) & set(HELDOUT_SEEDS)


def test_windows_of_cuts_every_window_and_its_horizon():
    w = windows_of(np.arange(10.0), window=4, horizon=2, stride=3)
    assert w.x.tolist() == [[0, 1, 2, 3], [3, 4, 5, 6]]
    assert w.y.tolist() == [[4, 5], [7, 8]]


@pytest.mark.skipif(not (COMMITTED / "manifest.json").is_file(), reason="no committed predictor bundle yet")
def test_the_committed_predictor_beats_the_last_value_forecast_on_held_out_traces():
    f = GruForecaster.load(COMMITTED)
    sets = heldout_sets(f.window, f.horizon, stride=25)
    gru, naive = [], []
    for windows in sets.values():
        gru.append(forecast_errors(f.predict(windows.x), windows.y)["wape"])
        naive.append(forecast_errors(naive_forecast(windows.x, f.horizon), windows.y)["wape"])
    assert np.mean(gru) < 0.95 * np.mean(naive)
