"""TD3 update mechanics and DRPC's imitation, on toy batches."""

import numpy as np
import torch  # the [train] extra, which `make test` installs

from policy.train.td3 import TD3, Actor, ReplayBuffer, ReplayBufferSamples, TD3Config, WorkloadPredictor, imitation_loss


def batch(n=32, obs_dim=4, act_dim=2, seed=0):
    rng = np.random.default_rng(seed)
    buf = ReplayBuffer(obs_dim, act_dim, 100)
    for _ in range(64):
        buf.add(rng.normal(size=obs_dim), rng.uniform(-1, 1, act_dim), rng.normal(), rng.normal(size=obs_dim), 0.0)
    return buf.sample(n, rng)


def flat(m):
    return torch.cat([p.detach().flatten().clone() for p in m.parameters()])


def test_the_actor_and_the_targets_update_only_every_policy_delay_steps():
    agent = TD3(4, 2, TD3Config(policy_delay=2), seed=0)
    b = batch()
    a0, ta0, tc0 = flat(agent.actor), flat(agent.actor_target), flat(agent.critic_target)
    c0 = flat(agent.critic)
    r1 = agent.update(b)
    assert r1["actor_loss"] is None
    assert not torch.equal(flat(agent.critic), c0)  # critic moved
    assert torch.equal(flat(agent.actor), a0)  # actor did not
    assert torch.equal(flat(agent.actor_target), ta0) and torch.equal(flat(agent.critic_target), tc0)
    r2 = agent.update(b)
    assert r2["actor_loss"] is not None
    assert not torch.equal(flat(agent.actor), a0)


def test_targets_move_by_tau_towards_the_online_networks():
    tau = 0.1
    agent = TD3(4, 2, TD3Config(policy_delay=1, tau=tau), seed=1)
    old_t = flat(agent.critic_target)
    agent.update(batch())
    expected = tau * flat(agent.critic) + (1 - tau) * old_t
    assert torch.allclose(flat(agent.critic_target), expected, atol=1e-6)


def test_the_imitation_loss_pulls_a_student_toward_its_teacher():
    torch.manual_seed(0)
    student = Actor(3, 1, 16)
    obs = torch.randn(64, 3)
    teacher = torch.tanh(obs[:, :1] * 2.0)
    opt = torch.optim.Adam(student.parameters(), lr=1e-2)
    before = float(imitation_loss(student, obs, teacher).detach())
    for _ in range(200):
        loss = imitation_loss(student, obs, teacher)
        opt.zero_grad()
        loss.backward()
        opt.step()
    after = float(imitation_loss(student, obs, teacher).detach())
    assert after < 0.2 * before


def test_the_replay_buffer_wraps_around_and_keeps_its_size():
    buf = ReplayBuffer(1, 1, 5)
    for i in range(7):
        buf.add([i], [0], i, [i], 0)
    assert len(buf) == 5 and buf.full
    assert sorted(buf.obs[:, 0].tolist()) == [2, 3, 4, 5, 6]


def test_a_sample_is_a_named_tuple_of_float32_rows_with_the_teachers_input_when_kept():
    rng = np.random.default_rng(0)
    plain = batch(n=8)
    assert isinstance(plain, ReplayBufferSamples)
    assert plain.observations.shape == plain.next_observations.shape == (8, 4) and plain.actions.shape == (8, 2)
    assert plain.rewards.shape == plain.dones.shape == (8, 1)
    assert all(t.dtype == torch.float32 for t in plain[:5])
    assert plain.teacher_observations is None and plain.next_teacher_observations is None
    buf = ReplayBuffer(2, 1, 10, teacher_obs_dim=3)
    for i in range(4):
        buf.add([i, i], [0.5], -i, [i + 1, i + 1], 0.0, teacher_obs=[i] * 3, next_teacher_obs=[i + 1] * 3)
    b = buf.sample(16, rng)
    assert b.teacher_observations.shape == b.next_teacher_observations.shape == (16, 3)
    # every row is one stored transition: the teacher's input and the local row of the same state
    assert torch.equal(b.teacher_observations[:, 0], b.observations[:, 0])
    assert torch.equal(b.next_teacher_observations[:, 0], b.observations[:, 0] + 1)
    assert torch.equal(b.rewards[:, 0], -b.observations[:, 0])


def test_the_workload_predictor_maps_a_window_to_the_horizon():
    m = WorkloadPredictor(hidden=8, horizon=3)
    assert m(torch.zeros(5, 10, 1)).shape == (5, 3)
