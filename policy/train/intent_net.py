"""[torch] The high level's network for training: :class:`IntentNet`, the torch twin of the served
:class:`policy.highlevel.IntentActor` (same arrays, same forward) with a critic and exploration log-stds, and the
one export of an ``intent-actor-v1`` bundle (:func:`export_intent`, :func:`install_intent_bundle`) that every
trainer of the high level (PPO: :mod:`policy.train.hierarchy`; DAgger: :mod:`policy.train.dagger`) uses."""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from policy.bundle import PolicyBundle
from policy.highlevel import (
    INTENT_ARCH,
    INTENT_GLOBAL_SPEC,
    INTENT_SERVICE_SPEC,
    INTENT_SERVICE_SPEC_FLAT,
    LearnedIntent,
    intent_weight_shapes,
)

__all__ = ["N_SERVICE_OUT", "N_GLOBAL_OUT", "IntentNet", "actor_bundle", "export_intent", "install_intent_bundle"]

#: Number of per-service and global pre-activations (capacity target, co-location; locality, balance, budget).
N_SERVICE_OUT, N_GLOBAL_OUT = 2, 3


class IntentNet(nn.Module):
    """The torch twin of :class:`policy.highlevel.IntentActor` (same arrays, same forward) plus the critic and the
    exploration log-stds. ``forward(service (B, N, F_s), mask (B, N) bool, global_ (B, F_g))`` →
    ``(z_s (B, N, 2), z_g (B, 3), value (B,))``; padded services (mask False) are ignored by the pooling."""

    def __init__(self, service_features: int, global_features: int, hidden: int = 64, init_log_std: float = -0.7):
        super().__init__()
        F = service_features + global_features
        self.trunk = nn.Sequential(nn.Linear(F, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
        self.service_head = nn.Linear(hidden, N_SERVICE_OUT)
        self.global_body = nn.Linear(hidden + global_features, hidden)
        self.global_head = nn.Linear(hidden, N_GLOBAL_OUT)
        self.critic_trunk = nn.Sequential(nn.Linear(F, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
        self.critic_head = nn.Sequential(
            nn.Linear(2 * hidden + global_features, hidden), nn.Tanh(), nn.Linear(hidden, 1)
        )
        self.log_std = nn.Parameter(torch.full((N_SERVICE_OUT + N_GLOBAL_OUT,), float(init_log_std)))
        for m in (self.service_head, self.global_head):
            nn.init.orthogonal_(m.weight, 0.01)
            nn.init.zeros_(m.bias)
        with torch.no_grad():  # start at the default intent: locality = balance = 1 (3 σ(z) = 1), budget 0.5
            self.global_head.bias[:2] = math.log(1.0 / 2.0)
        self.register_buffer("s_mean", torch.zeros(service_features))
        self.register_buffer("s_std", torch.ones(service_features))
        self.register_buffer("g_mean", torch.zeros(global_features))
        self.register_buffer("g_std", torch.ones(global_features))
        # rewards are divided by this before GAE (set once from the first episodes): the critic then learns values
        # of order 1, whatever the objective's scale
        self.register_buffer("reward_scale", torch.ones(()))

    def set_normalization(self, s_mean, s_std, g_mean, g_std) -> None:
        for name, v in (("s_mean", s_mean), ("s_std", s_std), ("g_mean", g_mean), ("g_std", g_std)):
            getattr(self, name).copy_(torch.as_tensor(np.asarray(v, dtype=np.float32)))

    def _inputs(self, service: torch.Tensor, global_: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        sn = (service - self.s_mean) / self.s_std.clamp_min(1e-6)
        gn = (global_ - self.g_mean) / self.g_std.clamp_min(1e-6)
        x = torch.cat([sn, gn[:, None, :].expand(-1, sn.shape[1], -1)], dim=-1)
        return x, gn

    def forward(self, service: torch.Tensor, mask: torch.Tensor, global_: torch.Tensor):
        x, gn = self._inputs(service, global_)
        m = mask.to(x.dtype)[..., None]
        n = m.sum(dim=1).clamp_min(1.0)
        h = self.trunk(x)
        z_s = self.service_head(h)
        pooled = (h * m).sum(dim=1) / n
        z_g = self.global_head(torch.tanh(self.global_body(torch.cat([pooled, gn], dim=-1))))
        c = self.critic_trunk(x)
        c_mean = (c * m).sum(dim=1) / n
        c_max = torch.where(m > 0, c, torch.full_like(c, -1e9)).amax(dim=1)
        value = self.critic_head(torch.cat([c_mean, c_max, gn], dim=-1))[:, 0]
        return z_s, z_g, value

    def actor_parameters(self) -> list[nn.Parameter]:
        """The actor's parameters (served) and the exploration log-stds."""
        mods = (self.trunk, self.service_head, self.global_body, self.global_head)
        return [p for m in mods for p in m.parameters()] + [self.log_std]

    def critic_parameters(self) -> list[nn.Parameter]:
        """The critic's parameters (training only)."""
        return [*self.critic_trunk.parameters(), *self.critic_head.parameters()]

    def actor_arrays(self) -> dict[str, np.ndarray]:
        """The actor's arrays named as the bundle's (:func:`policy.highlevel.intent_weight_shapes`)."""
        sd = {k: v.detach().cpu().numpy().astype(np.float32) for k, v in self.state_dict().items()}
        return {k: sd[k] for k in intent_weight_shapes(1, 1, 1)}

    def load_actor(self, bundle: PolicyBundle) -> None:
        """Take the actor's arrays and the input normalization from an ``intent-actor-v1`` ``bundle`` of the same
        shapes (e.g. to fine-tune a distilled policy); the critic and the log-stds keep theirs. Raises ValueError
        naming the array whose shape differs."""
        sd = self.state_dict()
        for k in intent_weight_shapes(1, 1, 1):
            a = torch.as_tensor(np.array(bundle.array(k), dtype=np.float32))  # a copy: bundle arrays are read-only
            if tuple(a.shape) != tuple(sd[k].shape):
                raise ValueError(
                    f"init bundle {bundle.where}: {k}: shape {list(a.shape)}, expected {list(sd[k].shape)}"
                )
            sd[k] = a
        self.load_state_dict(sd)
        s_mean, s_std = bundle.norm("service", self.s_mean.shape[0])
        g_mean, g_std = bundle.norm("global", self.g_mean.shape[0])
        self.set_normalization(s_mean, s_std, g_mean, g_std)

    def normalization(self) -> dict[str, Any]:
        def lst(t):
            return [float(x) for x in t.detach().cpu().numpy()]

        return {
            "service": {"mean": lst(self.s_mean), "std": lst(self.s_std.clamp_min(1e-6))},
            "global": {"mean": lst(self.g_mean), "std": lst(self.g_std.clamp_min(1e-6))},
        }


def export_intent(
    net: IntentNet, path: str | Path | None, *, flat: bool, policy_version: str, metadata: dict[str, Any]
) -> PolicyBundle:
    """The ``intent-actor-v1`` bundle of ``net`` (written to ``path`` unless None)."""
    hidden = net.service_head.in_features
    b = PolicyBundle(
        level="high",
        policy_version=policy_version,
        feature_spec={
            "service": INTENT_SERVICE_SPEC_FLAT if flat else INTENT_SERVICE_SPEC,
            "global": INTENT_GLOBAL_SPEC,
        },
        dims={"hidden": hidden},
        architecture={"type": INTENT_ARCH, "capacity_range": [0.3, 0.95], "colocation_max": 2.0, "weight_max": 3.0},
        weights=net.actor_arrays(),
        normalization=net.normalization(),
        metadata=metadata,
    )
    if path is not None:
        b.save(path)
    return b


def actor_bundle(weights: dict[str, np.ndarray], norm: dict[str, Any], flat: bool, hidden: int) -> PolicyBundle:
    """An in-memory ``intent-actor-v1`` bundle of actor ``weights`` (named as :func:`intent_weight_shapes`) and
    ``norm`` (:meth:`IntentNet.normalization`), for the rollouts of a policy being trained."""
    return PolicyBundle(
        level="high",
        policy_version="training",
        feature_spec={
            "service": INTENT_SERVICE_SPEC_FLAT if flat else INTENT_SERVICE_SPEC,
            "global": INTENT_GLOBAL_SPEC,
        },
        dims={"hidden": hidden},
        architecture={"type": INTENT_ARCH},
        weights=weights,
        normalization=norm,
    )


def install_intent_bundle(
    net: IntentNet,
    out: str | Path,
    staging: str | Path,
    *,
    flat: bool,
    policy_version: str,
    metadata: dict[str, Any],
    predictor: str | Path,
) -> None:
    """Write ``net``'s bundle and a copy of the ``predictor`` bundle as ``out/intent`` and ``out/predictor``: staged
    under ``staging`` first and loaded with the server's own loader (:meth:`LearnedIntent.load`), so a bundle the
    descheduler could not load is never installed; then ``out``'s two folders are replaced."""
    staged = Path(staging)
    if staged.exists():
        shutil.rmtree(staged)
    export_intent(net, staged / "intent", flat=flat, policy_version=policy_version, metadata=metadata)
    shutil.copytree(predictor, staged / "predictor")
    LearnedIntent.load(staged)  # refuse to install what the server could not load
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for sub in ("intent", "predictor"):
        if (out / sub).exists():
            shutil.rmtree(out / sub)
        shutil.copytree(staged / sub, out / sub)
    shutil.rmtree(staged)
