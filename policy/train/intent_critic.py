"""[torch] A cost model of the high level's intents fit on the lookahead oracle's rollouts, and the intents it
prefers: the teacher of ``hrl-policy train dagger --loss critic`` (:mod:`policy.train.dagger`).

**Why a critic.** The oracle (:mod:`policy.sim.oracle`) rolls its candidates out with perfect foresight of the trace
and of the scenario's events, so its best candidate at a state is the best *for the future that happened*: a lean
intent where no burst followed, a consolidating one where no node failed. Imitating that choice (or pulling the
intent toward the cheap candidates, AggreVaTe) teaches the student to bet on futures it cannot see. A regression of
the candidates' costs on what the student *can* see estimates each intent's expected cost given the observation
(the conditional mean over the futures that follow similar states); its argmin is the best decision under that
information, and the gap to the tuned constant says how sure it is. This is fitted Q-evaluation of the oracle's
one-step rollouts (Bertsekas' rollout with a learned cost-to-go; AlphaGo's value network in place of rollouts), used
as the teacher of DAgger.

**Model.** The horizon cost of intent ``a`` at state ``s`` is modelled as a sum over the services of one shared
network (DRPC's student structure, as the actor's trunk: any number of services, any application)::

    Q(s, a) = Σ_i f([x̂_i ; ĝ ; c_i ; p_i / 2 ; λ / 3 ; β / 3 ; m])          f: MLP (F → H → H/2 → 1)

``x̂_i`` / ``ĝ`` the actor's normalized service and global rows, ``c_i`` the service's capacity target, ``p_i`` its
co-location priority, ``λ``, ``β`` the global locality and balance weights and ``m`` the move budget. Only
differences between candidates of one state are fit (the state's own level, set by its future, cancels): the loss is
the squared error between the candidates' costs and the predictions, both centred per state, the costs in units of
the median stakes (the spread of a state's candidates' costs) and clipped.

**The intent it prefers** (:func:`critic_intents`): an ensemble of ``ensemble`` critics, each fit on a bootstrap
resample of the states (Osband et al. 2016, "Deep exploration via bootstrapped DQN", arXiv 1602.04621, for the
uncertainty). Per state: the best one capacity target for every service and global weight setting, by the
ensemble's mean over ``grid`` × ``weights``; then each service moves to its own best target under those weights
where every member predicts a gain for that service above ``service_margin``; the resulting intent replaces the tuned
constant only where *every* member predicts a gain over the constant above ``margin`` (median stakes). An argmin
over many noisy predictions is biased toward optimism (the winner's curse): where the critics cannot tell, or
disagree, the student keeps the baseline (SPIBB's principle, Laroche et al. 2019, arXiv 1712.06924; pessimism under
uncertainty as in offline RL).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from policy.highlevel import default_intent

#: A :class:`policy.train.dagger.Label` (the loop that makes labels imports this module, so not the other way).
Label = Any

__all__ = [
    "ACTION_FEATURES",
    "CriticConfig",
    "IntentCritic",
    "fit_critic",
    "fit_ensemble",
    "CriticTargets",
    "critic_intents",
]

#: The per-service action columns of :class:`IntentCritic` (after the normalized state rows).
ACTION_FEATURES = ("capacity_target", "colocation_priority / 2", "locality_weight / 3", "balance_weight / 3", "budget")


@dataclass(frozen=True)
class CriticConfig:
    """The critic's fit and its choice: ``hidden`` units, ``epochs`` full-batch Adam steps at ``lr`` with
    ``weight_decay``, ``regret_clip`` (the largest cost difference counted, in median stakes), ``ensemble`` members
    (bootstrap resamples; 1: one critic on every state); the choice over the capacity ``grid`` (targets in (0, 1])
    and the global ``weights`` ((locality, balance) pairs, the default first), a service leaving the common target
    only for a gain above ``service_margin`` by every member, the whole kept only when every member predicts a gain
    over the tuned constant above ``margin`` (median stakes, >= 0). Raises ValueError naming the field."""

    hidden: int = 64
    epochs: int = 400
    lr: float = 3e-3
    weight_decay: float = 1e-4
    regret_clip: float = 20.0
    grid: tuple[float, ...] = (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)
    weights: tuple[tuple[float, float], ...] = ((1.0, 1.0), (0.5, 2.0), (2.0, 0.5))
    margin: float = 0.1
    service_margin: float = 0.05
    ensemble: int = 5

    def __post_init__(self) -> None:
        for f in ("hidden", "epochs", "ensemble"):
            if getattr(self, f) < 1:
                raise ValueError(f"critic.{f}: expected an integer >= 1, got {getattr(self, f)!r}")
        for f in ("lr", "regret_clip"):
            if not getattr(self, f) > 0:
                raise ValueError(f"critic.{f}: expected a number > 0, got {getattr(self, f)!r}")
        for f in ("weight_decay", "margin", "service_margin"):
            if getattr(self, f) < 0:
                raise ValueError(f"critic.{f}: expected a number >= 0, got {getattr(self, f)!r}")
        if not self.grid or any(not 0.0 < c <= 1.0 for c in self.grid):
            raise ValueError(f"critic.grid: expected capacity targets in (0, 1], got {self.grid!r}")
        if not self.weights or any(len(w) != 2 or min(w) < 0 for w in self.weights):
            raise ValueError(f"critic.weights: expected (locality, balance) pairs >= 0, got {self.weights!r}")


class IntentCritic(nn.Module):
    """Q(s, a) of the module docstring. ``forward(sn (B, N, F_s), gn (B, F_g), mask (B, N) bool, cap (B, K, N), col
    (B, K, N), glob (B, K, 3))`` → (B, K) predicted horizon cost of each of K candidate intents (locality, balance,
    budget in ``glob``), in the units it was fit in; padded services (mask False) count nothing. ``per_service``
    gives the (B, K, N) terms."""

    def __init__(self, service_features: int, global_features: int, hidden: int = 64):
        super().__init__()
        half = max(1, hidden // 2)
        self.state_in = nn.Linear(service_features + global_features, hidden)
        self.action_in = nn.Linear(len(ACTION_FEATURES), hidden, bias=False)
        self.body = nn.Sequential(nn.Tanh(), nn.Linear(hidden, half), nn.Tanh(), nn.Linear(half, 1))

    def per_service(self, sn, gn, cap, col, glob) -> torch.Tensor:
        B, N, _ = sn.shape
        K = cap.shape[1]
        s = self.state_in(torch.cat([sn, gn[:, None, :].expand(-1, N, -1)], dim=-1))  # (B, N, H)
        g = glob[:, :, None, :].expand(-1, -1, N, -1)
        a = torch.stack([cap, col / 2.0, g[..., 0] / 3.0, g[..., 1] / 3.0, g[..., 2]], dim=-1)  # (B, K, N, 5)
        return self.body(s[:, None, :, :].expand(-1, K, -1, -1) + self.action_in(a))[..., 0]

    def forward(self, sn, gn, mask, cap, col, glob) -> torch.Tensor:
        return (self.per_service(sn, gn, cap, col, glob) * mask[:, None, :].to(sn.dtype)).sum(dim=-1)


def _state_batch(labels: Sequence[Label], s_mean, s_std, g_mean, g_std) -> tuple[torch.Tensor, ...]:
    B = len(labels)
    N = max(1, max(len(x.service) for x in labels))
    Fs = labels[0].service.shape[1]
    sn = np.zeros((B, N, Fs), np.float32)
    mask = np.zeros((B, N), bool)
    for i, x in enumerate(labels):
        n = len(x.service)
        sn[i, :n] = (x.service - s_mean) / s_std
        mask[i, :n] = True
    gn = ((np.stack([x.global_ for x in labels]) - g_mean) / g_std).astype(np.float32)
    return torch.as_tensor(sn), torch.as_tensor(gn), torch.as_tensor(mask)


def _candidates(labels: Sequence[Label], regret_clip: float) -> tuple[torch.Tensor, ...]:
    """(cap (B, K, N), col (B, K, N), glob (B, K, 3), regret (B, K) in median stakes, clipped, kmask (B, K)) of the
    labels that have candidates (every label passed here does)."""
    B = len(labels)
    N = max(1, max(len(x.service) for x in labels))
    K = max(len(x.candidates[3]) for x in labels if x.candidates is not None)
    cap = np.zeros((B, K, N), np.float32)
    col = np.ones((B, K, N), np.float32)
    glob = np.zeros((B, K, 3), np.float32)
    regret = np.zeros((B, K), np.float32)
    kmask = np.zeros((B, K), bool)
    for i, x in enumerate(labels):
        assert x.candidates is not None
        c_cap, c_col, c_glob, c_reg = x.candidates
        n, k = c_cap.shape[1], len(c_reg)
        cap[i, :k, :n], col[i, :k, :n], glob[i, :k], regret[i, :k], kmask[i, :k] = c_cap, c_col, c_glob, c_reg, True
    stakes = np.array([x.weight for x in labels], np.float64)
    med = float(np.median(stakes[stakes > 0])) if np.any(stakes > 0) else 1.0
    regret = np.clip(regret / max(med, 1e-9), 0.0, regret_clip).astype(np.float32)
    return tuple(torch.as_tensor(a) for a in (cap, col, glob, regret, kmask))


def _centred(x: torch.Tensor, kmask: torch.Tensor) -> torch.Tensor:
    m = kmask.to(x.dtype)
    mean = (x * m).sum(1, keepdim=True) / m.sum(1, keepdim=True).clamp_min(1.0)
    return (x - mean) * m


def fit_critic(
    labels: Sequence[Label],
    normalization: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    cfg: CriticConfig = CriticConfig(),
    seed: int = 0,
    bootstrap: bool = False,
) -> tuple[IntentCritic, float]:
    """A fresh :class:`IntentCritic` fit on the candidates of ``labels`` (those without candidates, or with fewer
    than two, are skipped): ``cfg.epochs`` full-batch Adam steps on the per-state centred squared error (module
    docstring); ``bootstrap``: on a resample of the states with replacement (drawn from ``seed``).
    ``normalization``: ``(s_mean, s_std, g_mean, g_std)`` of the actor's inputs. Returns ``(critic, final loss)``.
    Raises ValueError when no label has two candidates."""
    usable = [x for x in labels if x.candidates is not None and len(x.candidates[3]) >= 2]
    if not usable:
        raise ValueError("critic: no label with at least two candidates to compare")
    if bootstrap:
        pick = np.random.default_rng(seed).integers(len(usable), size=len(usable))
        usable = [usable[int(i)] for i in pick]
    torch.manual_seed(seed)
    Fs, Fg = usable[0].service.shape[1], len(usable[0].global_)
    critic = IntentCritic(Fs, Fg, cfg.hidden)
    sn, gn, mask = _state_batch(usable, *normalization)
    cap, col, glob, regret, kmask = _candidates(usable, cfg.regret_clip)
    target = _centred(regret, kmask)
    n = kmask.sum().clamp_min(1)
    opt = torch.optim.Adam(critic.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    value = torch.zeros(())
    for _ in range(cfg.epochs):
        pred = _centred(critic(sn, gn, mask, cap, col, glob), kmask)
        value = ((pred - target) ** 2).sum() / n
        opt.zero_grad()
        value.backward()
        opt.step()
    return critic, float(value.detach())


def fit_ensemble(
    labels: Sequence[Label],
    normalization: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    cfg: CriticConfig = CriticConfig(),
    seed: int = 0,
) -> tuple[list[IntentCritic], float]:
    """``cfg.ensemble`` critics (:func:`fit_critic`), each on its own bootstrap resample (one critic on every state
    when ``cfg.ensemble`` is 1). Returns ``(critics, mean final loss)``."""
    fits = [
        fit_critic(labels, normalization, cfg, seed=seed * 100 + k, bootstrap=cfg.ensemble > 1)
        for k in range(cfg.ensemble)
    ]
    return [c for c, _ in fits], float(np.mean([v for _, v in fits]))


class CriticTargets(NamedTuple):
    """What :func:`critic_intents` chose per label: ``capacity`` (N,), ``colocation`` (N,), ``global_target`` (3,)
    (locality, balance, budget), ``gain`` (predicted cost of the constant minus the chosen, median stakes; 0 where the
    constant was kept) and ``deviated`` (the critic's intent replaced the constant)."""

    capacity: np.ndarray
    colocation: np.ndarray
    global_target: np.ndarray
    gain: float
    deviated: bool


@torch.no_grad()
def critic_intents(
    critics: IntentCritic | Sequence[IntentCritic],
    labels: Sequence[Label],
    normalization: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    baseline: tuple[float, float],
    cfg: CriticConfig = CriticConfig(),
) -> list[CriticTargets]:
    """The intent the ensemble ``critics`` (or one critic) prefers at each state of ``labels`` (module docstring),
    against the tuned constant ``baseline`` = (capacity target, move budget) with the default global weights and
    co-location priorities; ``gain`` is the least of the members' predicted gains over the constant."""
    members = [critics] if isinstance(critics, IntentCritic) else list(critics)
    out: list[CriticTargets] = []
    if not labels or not members:
        return out
    sn, gn, mask = _state_batch(labels, *normalization)
    B, N = mask.shape
    E = len(members)
    grid = torch.tensor(cfg.grid, dtype=torch.float32)
    C = len(cfg.grid)
    loc0, bal0 = default_intent()[:2]
    budget = float(baseline[1])
    m = mask.to(torch.float32)
    ones = torch.ones((B, C, N))
    caps = grid[None, :, None].expand(B, C, N)
    const_cap = torch.full((B, 1, N), float(baseline[0]))
    const_glob = torch.tensor([[[loc0, bal0, budget]]], dtype=torch.float32).expand(B, 1, 3)
    const = torch.stack([c(sn, gn, mask, const_cap, torch.ones((B, 1, N)), const_glob)[:, 0] for c in members])
    # every (weights, common target): the ensemble's terms (W, E, B, C, N)
    terms = torch.stack(
        [
            torch.stack(
                [c.per_service(sn, gn, caps, ones, torch.tensor([[[lo, ba, budget]]]).expand(B, C, 3)) for c in members]
            )
            for lo, ba in cfg.weights
        ]
    )
    totals = (terms * m[None, None, :, None, :]).sum(-1).mean(1)  # (W, B, C): mean over members
    flat = totals.permute(1, 0, 2).reshape(B, -1)
    pick = flat.argmin(1)
    w_idx, c_idx = pick // C, pick % C
    chosen = terms[w_idx, :, torch.arange(B)]  # (B, E, C, N) under the chosen weights
    common = chosen.gather(2, c_idx[:, None, None, None].expand(B, E, 1, N))[:, :, 0, :]  # (B, E, N)
    own = chosen.mean(1).argmin(1)  # (B, N): each service's best target
    own_terms = chosen.gather(2, own[:, None, None, :].expand(B, E, 1, N))[:, :, 0, :]  # (B, E, N)
    move = ((common - own_terms).min(1).values > cfg.service_margin) & mask  # every member agrees, per service
    cap_idx = torch.where(move, own, c_idx[:, None].expand(B, N))
    picked = torch.where(move[:, None, :], own_terms, common)  # (B, E, N)
    gains = const.T - (picked * m[:, None, :]).sum(-1)  # (B, E)
    gain = gains.min(1).values
    weights = torch.tensor(cfg.weights, dtype=torch.float32)[w_idx]  # (B, 2)
    for i, x in enumerate(labels):
        n = len(x.service)
        g_i = float(gain[i])
        if g_i > cfg.margin:
            cap = grid[cap_idx[i, :n]].numpy().astype(np.float32)
            glob = np.array([float(weights[i, 0]), float(weights[i, 1]), budget], np.float32)
            out.append(CriticTargets(cap, np.ones(n, np.float32), glob, g_i, True))
        else:
            cap = np.full(n, float(baseline[0]), np.float32)
            glob = np.array([loc0, bal0, budget], np.float32)
            out.append(CriticTargets(cap, np.ones(n, np.float32), glob, 0.0, False))
    return out
