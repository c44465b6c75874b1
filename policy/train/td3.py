"""TD3 (Fujimoto et al., 2018, "Addressing Function Approximation Error in Actor-Critic Methods") and the
DRPC teacher-student extension (arXiv 2407.10169: distributed TD3 autoscaling, one student actor per
deployment on local state, a central teacher on global state, distilled into the students by imitation).

Training-only module (torch). Written in the style of CleanRL's ``td3_continuous_action.py``: networks,
a replay buffer and one update step, with the hyperparameters as a documented dataclass. Serving uses
the numpy forward passes in :mod:`policy.encoder.mpnn` built from exported bundles.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

__all__ = [
    "TD3Config",
    "ReplayBufferSamples",
    "ReplayBuffer",
    "mlp",
    "Actor",
    "Critic",
    "soft_update",
    "TD3",
    "imitation_loss",
    "WorkloadPredictor",
]


@dataclass(frozen=True)
class TD3Config:
    """TD3 hyperparameters (names and defaults from the paper / CleanRL).

    - ``gamma``: discount factor, 0..1 (per decision period);
    - ``tau``: target network soft-update rate, 0..1 (target ← tau·online + (1 − tau)·target);
    - ``policy_delay``: critic updates per actor (and target) update, >= 1;
    - ``target_policy_noise``: std of the Gaussian noise added to target actions (action units, actions in [-1, 1]);
    - ``target_noise_clip``: clip of that noise;
    - ``exploration_noise``: std of the behaviour noise when acting;
    - ``actor_lr`` / ``critic_lr``: Adam learning rates;
    - ``batch_size``, ``buffer_size``, ``learning_starts`` (transitions before the first update);
    - ``hidden``: hidden layer width; ``imitation_weight``: weight of the distillation loss in a student
      update (DRPC), >= 0;
    - ``actor_q_normalization``: divide the actor's ``−Q`` by the batch's mean ``|Q|`` (detached), as TD3+BC
      does (Fujimoto & Gu, 2021), so an added loss (imitation) keeps the same relative weight whatever the
      scale of the returns. Off by default (plain TD3);
    - ``critic_warmup``: critic-only updates before the first actor update, >= 0 (0: plain TD3). A fine-tune's
      actors start trained and its critics fresh: the critics first learn the loaded actors' values, so the first
      actor steps do not follow a random Q.
    """

    gamma: float = 0.95
    tau: float = 0.005
    policy_delay: int = 2
    target_policy_noise: float = 0.2
    target_noise_clip: float = 0.5
    exploration_noise: float = 0.1
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    batch_size: int = 256
    buffer_size: int = 200_000
    learning_starts: int = 1_000
    hidden: int = 64
    imitation_weight: float = 1.0
    actor_q_normalization: bool = False
    critic_warmup: int = 0


class ReplayBufferSamples(NamedTuple):
    """A minibatch of transitions, as torch float32 tensors (the layout of Stable-Baselines3's
    ``ReplayBufferSamples``); ``B`` is the batch size.

    - ``observations``: (B, obs_dim), the state the action was taken in;
    - ``actions``: (B, act_dim), in [-1, 1];
    - ``next_observations``: (B, obs_dim), the state one decision period later;
    - ``dones``: (B, 1), 1.0 where the episode ended at the transition (no bootstrap), else 0.0;
    - ``rewards``: (B, 1);
    - ``teacher_observations`` / ``next_teacher_observations``: (B, teacher_obs_dim), the DRPC teacher's input
      (global state) for the same two states, or ``None`` when the buffer stores none.

    :meth:`TD3.update` reads the first five fields; a different view of the same transitions (the teacher's
    input, a student's slice of the local row) is ``batch._replace(observations=..., next_observations=...)``.
    """

    observations: torch.Tensor
    actions: torch.Tensor
    next_observations: torch.Tensor
    dones: torch.Tensor
    rewards: torch.Tensor
    teacher_observations: torch.Tensor | None = None
    next_teacher_observations: torch.Tensor | None = None


class ReplayBuffer:
    """A ring buffer of ``size`` transitions (numpy, float32): ``obs`` / ``next_obs`` (size, obs_dim),
    ``action`` (size, act_dim) in [-1, 1], ``reward`` and ``done`` (size, 1). With ``teacher_obs_dim`` > 0 it
    also keeps the DRPC teacher's input for both states, ``teacher_obs`` / ``next_teacher_obs``
    (size, teacher_obs_dim). Once full, each :meth:`add` overwrites the oldest transition."""

    def __init__(self, obs_dim: int, act_dim: int, size: int, teacher_obs_dim: int = 0):
        self.size = int(size)
        self.obs = np.zeros((size, obs_dim), np.float32)
        self.next_obs = np.zeros((size, obs_dim), np.float32)
        self.action = np.zeros((size, act_dim), np.float32)
        self.reward = np.zeros((size, 1), np.float32)
        self.done = np.zeros((size, 1), np.float32)
        self.teacher_obs = np.zeros((size, teacher_obs_dim), np.float32) if teacher_obs_dim > 0 else None
        self.next_teacher_obs = np.zeros((size, teacher_obs_dim), np.float32) if teacher_obs_dim > 0 else None
        self.ptr = 0
        self.full = False

    def __len__(self) -> int:
        return self.size if self.full else self.ptr

    def add(self, obs, action, reward, next_obs, done, teacher_obs=None, next_teacher_obs=None) -> None:
        """Store one transition: ``obs`` / ``next_obs`` (obs_dim,), ``action`` (act_dim,), scalar ``reward`` and
        ``done`` (0/1); ``teacher_obs`` / ``next_teacher_obs`` (teacher_obs_dim,) when the buffer keeps them."""
        i = self.ptr
        self.obs[i] = obs
        self.action[i] = action
        self.reward[i] = reward
        self.next_obs[i] = next_obs
        self.done[i] = done
        if self.teacher_obs is not None:
            self.teacher_obs[i] = teacher_obs
            self.next_teacher_obs[i] = next_teacher_obs
        self.ptr = (self.ptr + 1) % self.size
        self.full = self.full or self.ptr == 0

    def sample(self, batch_size: int, rng: np.random.Generator) -> ReplayBufferSamples:
        """``batch_size`` transitions drawn uniformly with replacement (one ``rng.integers`` draw) as a
        :class:`ReplayBufferSamples` of (batch_size, ·) float32 tensors."""
        idx = rng.integers(0, len(self), size=batch_size)

        def rows(a: np.ndarray | None) -> torch.Tensor | None:
            return None if a is None else torch.as_tensor(a[idx])

        return ReplayBufferSamples(
            rows(self.obs),
            rows(self.action),
            rows(self.next_obs),
            rows(self.done),
            rows(self.reward),
            rows(self.teacher_obs),
            rows(self.next_teacher_obs),
        )


def mlp(in_dim: int, hidden: int, out_dim: int, layers: int = 2) -> nn.Sequential:
    """``layers`` hidden ReLU layers of width ``hidden``; state_dict keys ``net.0.weight``, ``net.2.weight``, ..."""
    mods: list[nn.Module] = []
    d = in_dim
    for _ in range(layers):
        mods += [nn.Linear(d, hidden), nn.ReLU()]
        d = hidden
    mods.append(nn.Linear(d, out_dim))
    return nn.Sequential(*mods)


class Actor(nn.Module):
    """Deterministic policy ``obs (B, obs_dim) -> action (B, act_dim)`` in [-1, 1] (tanh)."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: int = 64):
        super().__init__()
        self.net = mlp(obs_dim, hidden, act_dim)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(obs))


class Critic(nn.Module):
    """Twin Q-functions ``(obs, action) -> (q1, q2)``, each (B, 1)."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: int = 64):
        super().__init__()
        self.q1 = mlp(obs_dim + act_dim, hidden, 1)
        self.q2 = mlp(obs_dim + act_dim, hidden, 1)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.cat([obs, action], dim=-1)
        return self.q1(x), self.q2(x)


def soft_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """target ← tau·online + (1 − tau)·target, parameter by parameter."""
    with torch.no_grad():
        for t, o in zip(target.parameters(), online.parameters()):
            t.mul_(1.0 - tau).add_(tau * o)


class TD3:
    """One TD3 agent: ``actor``, twin ``critic`` and their targets.

    :meth:`update` does one critic step on a batch and, every ``policy_delay`` calls after the first
    ``critic_warmup``, one actor step and the soft update of both targets. Returns the losses (floats;
    ``actor_loss`` is None on critic-only steps).
    """

    def __init__(self, obs_dim: int, act_dim: int, config: TD3Config = TD3Config(), seed: int = 0):
        torch.manual_seed(seed)
        self.config = config
        self.actor = Actor(obs_dim, act_dim, config.hidden)
        self.critic = Critic(obs_dim, act_dim, config.hidden)
        self.actor_target = Actor(obs_dim, act_dim, config.hidden)
        self.critic_target = Critic(obs_dim, act_dim, config.hidden)
        self.actor_target.load_state_dict(self.actor.state_dict())
        self.critic_target.load_state_dict(self.critic.state_dict())
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=config.actor_lr)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=config.critic_lr)
        self.updates = 0

    def load_actor(self, weights: Mapping[str, np.ndarray]) -> None:
        """Start the actor (and its target) from ``weights``, arrays named as its state_dict (``net.0.weight``
        (hidden, obs_dim), ...; a bundle's ``weights``). Raises ValueError naming the array that is missing or
        whose shape differs."""
        sd = self.actor.state_dict()
        new = {}
        for k, t in sd.items():
            if k not in weights:
                raise ValueError(f"weights: no array {k!r}")
            a = np.array(weights[k], dtype=np.float32)  # a copy: bundle arrays are read-only
            if tuple(a.shape) != tuple(t.shape):
                raise ValueError(f"weights.{k}: shape {list(a.shape)}, expected {list(t.shape)}")
            new[k] = torch.as_tensor(a)
        self.actor.load_state_dict(new)
        self.actor_target.load_state_dict(new)

    def act(self, obs: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
        """Action for ``obs`` (obs_dim,) or (B, obs_dim); Gaussian exploration noise when ``rng`` is given."""
        with torch.no_grad():
            a = self.actor(torch.as_tensor(np.asarray(obs, np.float32))).numpy()
        if rng is not None:
            a = a + rng.normal(0.0, self.config.exploration_noise, size=a.shape)
        return np.clip(a, -1.0, 1.0).astype(np.float32)

    def critic_loss(self, b: ReplayBufferSamples) -> torch.Tensor:
        """Clipped double-Q loss: both critics regress on ``r + (1 − done)·gamma·min(Q1', Q2')(s', a')`` with
        the target actor's ``a'`` plus clipped Gaussian noise (target policy smoothing)."""
        c = self.config
        with torch.no_grad():
            noise = (torch.randn_like(b.actions) * c.target_policy_noise).clamp(
                -c.target_noise_clip, c.target_noise_clip
            )
            next_a = (self.actor_target(b.next_observations) + noise).clamp(-1.0, 1.0)
            t1, t2 = self.critic_target(b.next_observations, next_a)
            target = b.rewards + (1.0 - b.dones) * c.gamma * torch.min(t1, t2)
        q1, q2 = self.critic(b.observations, b.actions)
        return F.mse_loss(q1, target) + F.mse_loss(q2, target)

    def actor_loss(self, b: ReplayBufferSamples) -> torch.Tensor:
        """``−mean Q1(s, π(s))`` (divided by the batch's mean ``|Q1|`` with ``actor_q_normalization``)."""
        q1, _ = self.critic(b.observations, self.actor(b.observations))
        if self.config.actor_q_normalization:
            return -q1.mean() / q1.abs().mean().detach().clamp_min(1e-6)
        return -q1.mean()

    def update(
        self, b: ReplayBufferSamples, extra_actor_loss: Callable[[ReplayBufferSamples], torch.Tensor] | None = None
    ) -> dict[str, float | None]:
        """One TD3 update on batch ``b``. ``extra_actor_loss(b) -> Tensor`` is added to the actor loss (DRPC's
        imitation). Returns ``{"critic_loss": float, "actor_loss": float | None}``."""
        closs = self.critic_loss(b)
        self.critic_opt.zero_grad()
        closs.backward()
        self.critic_opt.step()
        self.updates += 1
        aloss_v = None
        if self.updates % self.config.policy_delay == 0 and self.updates > self.config.critic_warmup:
            aloss = self.actor_loss(b)
            if extra_actor_loss is not None:
                aloss = aloss + extra_actor_loss(b)
            self.actor_opt.zero_grad()
            aloss.backward()
            self.actor_opt.step()
            soft_update(self.actor_target, self.actor, self.config.tau)
            soft_update(self.critic_target, self.critic, self.config.tau)
            aloss_v = float(aloss.detach())
        return {"critic_loss": float(closs.detach()), "actor_loss": aloss_v}


def imitation_loss(student: Actor, obs: torch.Tensor, teacher_action: torch.Tensor) -> torch.Tensor:
    """DRPC's distillation: mean squared error between the student's action on its local observation and
    the teacher's action for the same deployment (the teacher acts on global state). (B, act_dim) each."""
    return F.mse_loss(student(obs), teacher_action)


class WorkloadPredictor(nn.Module):
    """DRPC's workload predictor: a GRU over the last ``window`` per-minute request rates (normalised),
    predicting the next ``horizon`` minutes. ``x``: (B, window, 1) → (B, horizon).

    ``last_value_skip``: the head predicts the change from the window's last value (``x[:, -1]`` is added to
    every output), so an untrained network starts as the naive last-value forecast."""

    def __init__(self, hidden: int = 32, horizon: int = 5, last_value_skip: bool = False):
        super().__init__()
        self.gru = nn.GRU(1, hidden, batch_first=True)
        self.head = nn.Linear(hidden, horizon)
        self.last_value_skip = last_value_skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, h = self.gru(x)
        y = self.head(h[-1])
        return y + x[:, -1, :] if self.last_value_skip else y
