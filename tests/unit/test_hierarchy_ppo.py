"""The high level's PPO update (policy/train/hierarchy.py) learns whatever the objective's scale: rewards in the
thousands (a failed-request penalty, a Lagrange multiplier that grew) must still move the actor."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from policy.highlevel import INTENT_GLOBAL_SPEC, INTENT_SERVICE_SPEC  # noqa: E402
from policy.train.hierarchy import (  # noqa: E402
    Decision,
    EpisodeData,
    HierarchyTrainConfig,
    build_batch,
    ppo_update,
)
from policy.train.intent_net import IntentNet  # noqa: E402


def episodes(net: IntentNet, rng: np.random.Generator, scale: float, n_eps: int = 8, n_dec: int = 6):
    """Decisions sampled from ``net`` (as SampledIntent explores) whose reward is -scale × the first global
    pre-activation: lowering it is the only way to gain."""
    Fs, Fg = len(INTENT_SERVICE_SPEC), len(INTENT_GLOBAL_SPEC)
    std = net.log_std.exp().detach().numpy()
    out = []
    for _ in range(n_eps):
        ds = []
        for t in range(n_dec):
            s = rng.normal(size=(3, Fs)).astype(np.float32)
            g = rng.normal(size=Fg).astype(np.float32)
            with torch.no_grad():
                m_s, m_g, _v = net(
                    torch.as_tensor(s)[None], torch.ones(1, 3, dtype=torch.bool), torch.as_tensor(g)[None]
                )
            z_s = m_s[0].numpy() + std[:2] * rng.normal(size=(3, 2))
            z_g = m_g[0].numpy() + std[2:] * rng.normal(size=3)
            ds.append(Decision(5 * t, s, g, z_s.astype(np.float32), z_g.astype(np.float32), float(-scale * z_g[0])))
        out.append(EpisodeData(None, ds, np.zeros(1), {}, [], 0.0))
    return out


def mean_first_global(net: IntentNet, rng: np.random.Generator) -> float:
    s = torch.as_tensor(rng.normal(size=(64, 3, len(INTENT_SERVICE_SPEC))).astype(np.float32))
    g = torch.as_tensor(rng.normal(size=(64, len(INTENT_GLOBAL_SPEC))).astype(np.float32))
    with torch.no_grad():
        return float(net(s, torch.ones(64, 3, dtype=torch.bool), g)[1][:, 0].mean())


def actor_shift(scale: float) -> float:
    """How far 5 PPO updates (the training's learning rate) move the first global pre-activation, on rewards
    -scale × that pre-activation."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    cfg = HierarchyTrainConfig(epochs=4, minibatch=16)
    net = IntentNet(len(INTENT_SERVICE_SPEC), len(INTENT_GLOBAL_SPEC), 32)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr, eps=1e-5)
    warm = episodes(net, rng, scale)
    rewards = np.array([d.reward for ep in warm for d in ep.decisions])
    net.reward_scale.fill_(float(rewards.std()))  # as train_hierarchy does from its first episodes
    before = mean_first_global(net, np.random.default_rng(1))
    for _ in range(5):
        ppo_update(net, opt, build_batch(net, episodes(net, rng, scale), 0.9, 0.9), cfg, rng)
    return mean_first_global(net, np.random.default_rng(1)) - before


def test_ppo_moves_the_actor_toward_the_better_action_as_far_at_any_reward_scale():
    small, large = actor_shift(1.0), actor_shift(5000.0)
    assert small < -0.02  # toward the better action
    # the critic's loss grows with the rewards' scale: its gradient must not shrink the actor's step
    assert large == pytest.approx(small, rel=0.1), (small, large)


def test_a_paired_baseline_cancels_what_the_episode_input_adds_to_every_decision():
    """Two episodes whose inputs differ by a constant reward per period (a busier trace) but whose decisions are the
    same: with the paired baseline (the same episodes without exploration) the advantages are equal; with the
    critic they are not."""
    net = IntentNet(len(INTENT_SERVICE_SPEC), len(INTENT_GLOBAL_SPEC), 16)
    rng = np.random.default_rng(3)
    base = episodes(net, rng, scale=1.0, n_eps=1, n_dec=4)[0]
    busy = base._replace(decisions=[d._replace(reward=d.reward - 50.0) for d in base.decisions])
    quiet_paired = base._replace(decisions=[d._replace(reward=d.reward - 1.0) for d in base.decisions])
    busy_paired = base._replace(decisions=[d._replace(reward=d.reward - 51.0) for d in base.decisions])
    b = build_batch(net, [base, busy], 0.9, 0.9, paired=[quiet_paired, busy_paired])
    a = b.advantages.numpy()
    assert np.allclose(a[:4], a[4:])
    c = build_batch(net, [base, busy], 0.9, 0.9).advantages.numpy()
    assert not np.allclose(c[:4], c[4:])
