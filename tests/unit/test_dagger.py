"""The high level's DAgger pieces: the imitation fit moves the served network's intent to the oracle's labels, a
labelled episode gives one label per period with the learner's observation, and the served policy falls back to the
tuned constant outside the states it was trained on."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from policy.highlevel import (  # noqa: E402
    INTENT_GLOBAL_SPEC,
    INTENT_SERVICE_SPEC_FLAT,
    IntentActor,
    IntentObservation,
    LearnedIntent,
    intent_from_outputs,
)
from policy.train.dagger import DaggerConfig, Label, fit, global_reach, label_episode  # noqa: E402
from policy.train.intent_episodes import sample_episode_specs  # noqa: E402
from policy.train.intent_net import IntentNet, export_intent  # noqa: E402

Fs, Fg = len(INTENT_SERVICE_SPEC_FLAT), len(INTENT_GLOBAL_SPEC)


def labels(n: int, rng: np.random.Generator) -> list[Label]:
    """States whose first global feature says which capacity target is right (0.4 below 0, 0.8 above)."""
    out = []
    for _ in range(n):
        k = int(rng.integers(2, 6))
        g = rng.normal(size=Fg).astype(np.float32)
        cap = np.full(k, 0.8 if g[0] > 0 else 0.4, np.float32)
        out.append(
            Label(
                rng.normal(size=(k, Fs)).astype(np.float32),
                g,
                cap,
                np.ones(k, np.float32),
                np.array([1.0, 1.0, 0.0], np.float32),
                1.0,
            )
        )
    return out


def served_capacity(net: IntentNet, x: Label) -> float:
    actor = IntentActor(export_intent(net, None, flat=True, policy_version="t", metadata={}))
    services = [f"s{i}" for i in range(len(x.service))]
    it = intent_from_outputs(services, *actor(x.service, x.global_))
    return float(np.mean(list(it.capacity_target.values())))


def test_the_fit_makes_the_served_network_follow_a_state_dependent_label():
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    train, test = labels(200, rng), labels(60, rng)
    net = IntentNet(Fs, Fg, hidden=32)
    high = [x for x in test if x.global_[0] > 0.5]
    low = [x for x in test if x.global_[0] < -0.5]

    def gap() -> float:
        return float(np.mean([served_capacity(net, x) for x in high]) - np.mean([served_capacity(net, x) for x in low]))

    assert abs(gap()) < 0.05  # the untrained network ignores the state
    fit(net, train, epochs=300, lr=1e-2)
    assert gap() > 0.25  # labels 0.8 vs 0.4: the served intent now follows the state


def test_the_fallback_takes_the_tuned_constant_beyond_the_training_reach():
    rng = np.random.default_rng(1)
    train = labels(50, rng)
    net = IntentNet(Fs, Fg, hidden=8)
    g = np.stack([x.global_ for x in train])
    net.set_normalization(np.zeros(Fs), np.ones(Fs), g.mean(0), g.std(0) + 1e-3)
    reach = global_reach(net, train)
    meta = {"fallback": {"global_z_max": reach, "capacity_target": 0.65, "move_budget_frac": 0.0}}
    actor = IntentActor(export_intent(net, None, flat=True, policy_version="t", metadata=meta))
    policy = LearnedIntent.__new__(LearnedIntent)
    policy.actor, policy.fallbacks = actor, 0
    inside = IntentObservation(("a/x",), ("x",), train[0].service[:1], train[0].global_)
    outside = IntentObservation(("a/x",), ("x",), train[0].service[:1], g.mean(0) + 10 * reach * g.std(0))
    assert policy.fallback_intent(inside) is None
    fb = policy.fallback_intent(outside)
    assert fb is not None and fb.capacity_target == {"x": 0.65} and fb.move_budget_frac == 0.0


def test_a_labelled_episode_has_one_label_per_period_with_the_learners_observation():
    cfg = DaggerConfig(
        episode_minutes=10,
        n_samples=80,
        synthetic_share=0.0,
        scenario_share=0.0,
        horizon_min=3,
        capacity_targets=(0.6, 0.8),
        coordinate_services=0,
        flat=True,
        workers=1,
        hidden=8,
    )
    spec = sample_episode_specs(cfg, np.random.default_rng(3), 1, seed0=5)[0]
    net = IntentNet(Fs, Fg, hidden=8)
    ep = label_episode(spec, net.actor_arrays(), net.normalization(), 1.0, cfg)
    assert len(ep.labels) == 2  # decisions at minutes 0 and 5
    for x in ep.labels:
        assert x.service.shape[1] == Fs and x.global_.shape == (Fg,)
        assert ep.learned_best > 0 or all(np.isclose(c, 0.6) or np.isclose(c, 0.8) for c in x.capacity)
        assert x.weight >= 0
    assert np.isfinite(ep.objective) and ep.cpu_s > 0
