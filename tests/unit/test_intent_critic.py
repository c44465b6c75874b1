"""The critic of the high level (policy.train.intent_critic): fit on candidates' rollout costs it recovers which
capacity target suits which service, prefers it over the tuned constant only beyond its margin, and the DAgger fit
with ``loss="critic"`` makes the served network follow what it prefers."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from policy.highlevel import INTENT_GLOBAL_SPEC, INTENT_SERVICE_SPEC_FLAT  # noqa: E402
from policy.train.dagger import DaggerConfig, Label, fit_student  # noqa: E402
from policy.train.intent_critic import CriticConfig, critic_intents, fit_critic  # noqa: E402
from policy.train.intent_net import IntentNet  # noqa: E402

Fs, Fg = len(INTENT_SERVICE_SPEC_FLAT), len(INTENT_GLOBAL_SPEC)
GRID = (0.5, 0.6, 0.7, 0.8, 0.9)
NORM = (np.zeros(Fs, np.float32), np.ones(Fs, np.float32), np.zeros(Fg, np.float32), np.ones(Fg, np.float32))


def best_target(row: np.ndarray) -> float:
    """The capacity target that costs a service least: lean (0.9) when its first feature is positive, 0.5 else."""
    return 0.9 if row[0] > 0 else 0.5


def states(n: int, rng: np.random.Generator, k: int = 8) -> list[Label]:
    """States of 2-5 services; K candidates: the constant 0.7 and random per-service targets from the grid; each
    candidate's horizon cost is the sum over services of 10 (c - best)^2, plus noise and the state's own level."""
    out = []
    for _ in range(n):
        m = int(rng.integers(2, 6))
        service = rng.normal(size=(m, Fs)).astype(np.float32)
        best = np.array([best_target(r) for r in service], np.float32)
        cap = rng.choice(np.array(GRID, np.float32), size=(k, m))
        cap[0] = 0.7
        cost = (10 * (cap - best) ** 2).sum(1) + rng.normal(0, 0.05, k) + rng.normal(0, 5)
        regret = (cost - cost.min()).astype(np.float32)
        glob = np.tile(np.array([1.0, 1.0, 0.0], np.float32), (k, 1))
        cands = (cap, np.ones((k, m), np.float32), glob, regret)
        out.append(
            Label(
                service,
                rng.normal(size=Fg).astype(np.float32),
                cap[int(regret.argmin())],
                np.ones(m, np.float32),
                glob[0],
                float(cost.max() - cost.min()),
                cands,
            )
        )
    return out


def test_the_critic_recovers_which_target_suits_which_service_and_beats_the_constant_only_beyond_its_margin():
    rng = np.random.default_rng(0)
    train, test = states(300, rng), states(40, rng)
    cfg = CriticConfig(hidden=32, epochs=300, grid=GRID, weights=((1.0, 1.0),), margin=0.0, service_margin=0.0)
    critic, loss = fit_critic(train, NORM, cfg)
    assert loss < 0.05
    chosen = critic_intents(critic, test, NORM, (0.7, 0.0), cfg)
    hits = [abs(t - best_target(r)) < 0.11 for x, c in zip(test, chosen) for t, r in zip(c.capacity, x.service)]
    assert np.mean(hits) > 0.85  # at random: about half (the best or a neighbour of it)
    assert all(c.deviated and c.gain > 0 for c in chosen)
    # a margin beyond any gain keeps the constant everywhere
    kept = critic_intents(critic, test, NORM, (0.7, 0.0), CriticConfig(grid=GRID, weights=((1.0, 1.0),), margin=1e9))
    assert all(not c.deviated and np.all(c.capacity == np.float32(0.7)) for c in kept)


def test_a_critic_without_candidates_to_compare_is_refused():
    x = states(1, np.random.default_rng(1))[0]
    with pytest.raises(ValueError, match="no label with at least two candidates"):
        fit_critic([x._replace(candidates=None)], NORM)


def test_the_critic_loss_trains_the_served_network_toward_what_the_critic_prefers():
    rng = np.random.default_rng(2)
    torch.manual_seed(0)
    data = states(300, rng)
    net = IntentNet(Fs, Fg, hidden=32)
    cfg = DaggerConfig(loss="critic", critic_margin=0.0, hidden=32, capacity_targets=GRID)
    _loss, extra = fit_student(net, data, 300, cfg, (0.7, 0.0))
    assert extra["critic_deviation_share"] > 0.75 and extra["critic_mean_gain"] > 0
    x = states(30, rng)
    service = torch.as_tensor(np.concatenate([s.service for s in x]))[None]
    z_s, _z_g, _v = net(service, torch.ones(service.shape[:2], dtype=torch.bool), torch.zeros((1, Fg)))
    cap = (0.3 + 0.65 * torch.sigmoid(z_s[0, :, 0])).detach().numpy()
    best = np.array([best_target(r) for s in x for r in s.service])
    assert np.mean(cap[best > 0.7]) - np.mean(cap[best < 0.7]) > 0.1  # an untrained network: about 0
