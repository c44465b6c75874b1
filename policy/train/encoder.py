"""[torch] The graph encoder's network, its self-supervised pre-training, and its export to a bundle.

Training-only (torch): serving runs the numpy twin :class:`policy.encoder.mpnn.GraphEncoder`, built from the bundle
:func:`export_encoder` writes. The forward pass and the weight names are documented in :mod:`policy.encoder.mpnn`;
:class:`GraphEncoderNet` must stay in step with it (the parity test compares both to 1e-5).

Pre-training (:func:`train_encoder`, ``hrl-policy train encoder``): the objective and data of
:mod:`policy.train.encoder_data` — from a call graph with partial measurements, predict each service's CPU use and
response time now, at 1.5x the load, and with every call on one node (simulator targets) — with a small
MLP head on the embeddings, MSE on standardised log targets, Adam, in the style of CleanRL (one readable
loop, hyperparameters in :class:`EncoderTrainConfig`). Held out: new synthetic graphs and whole
applications never seen in training (``online-boutique`` and ``sock-shop`` by default). The defaults take about
6 minutes on 2 shared CPU cores (the committed bundle: 3.5 min of data, 2.2 min of training, 15 s for the
``--ablation`` twin).
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tabulate import tabulate
from torch import nn

from policy.bundle import PolicyBundle, content_version
from policy.encoder import (
    DEFAULT_ENCODER_BUNDLE,
    EDGE_SPEC,
    ENCODER_ARCH,
    NODE_SPEC,
    GraphEncoder,
    encoder_weight_shapes,
)
from policy.telemetry import note, progress_bar

from .encoder_data import TARGET_SPEC, EncoderSample, error_table, heldout_sets, load_builtin_apps, make_dataset

__all__ = [
    "GraphEncoderNet",
    "scatter_mean",
    "export_encoder",
    "EncoderTrainConfig",
    "collate",
    "graph_weights",
    "train_encoder",
    "save_checkpoint",
    "export_checkpoint",
    "format_report",
    "run_cli",
]


def scatter_mean(values: torch.Tensor, index: torch.Tensor, n: int) -> torch.Tensor:
    """Mean of the rows of ``values`` (E, H) grouped by ``index`` (E,) into ``n`` rows (0 where empty)."""
    out = values.new_zeros((n, values.shape[1])).index_add_(0, index, values)
    count = torch.bincount(index, minlength=n).to(values.dtype).clamp_min(1.0)
    return out / count[:, None]


class _Layer(nn.Module):
    def __init__(self, hidden: int, edge_features: int):
        super().__init__()
        self.msg_in_node = nn.Linear(hidden, hidden, bias=False)
        self.msg_in_edge = nn.Linear(edge_features, hidden)
        self.msg_out_node = nn.Linear(hidden, hidden, bias=False)
        self.msg_out_edge = nn.Linear(edge_features, hidden)
        self.self = nn.Linear(hidden, hidden)
        self.upd_in = nn.Linear(hidden, hidden, bias=False)
        self.upd_out = nn.Linear(hidden, hidden, bias=False)

    def forward(self, h: torch.Tensor, e: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        n = h.shape[0]
        m_in = torch.relu(self.msg_in_node(h)[src] + self.msg_in_edge(e))
        a_in = scatter_mean(m_in, dst, n)
        m_out = torch.relu(self.msg_out_node(h)[dst] + self.msg_out_edge(e))
        a_out = scatter_mean(m_out, src, n)
        return h + torch.relu(self.self(h) + self.upd_in(a_in) + self.upd_out(a_out))


class GraphEncoderNet(nn.Module):
    """The ``mpnn-v1`` encoder (see :mod:`policy.encoder.mpnn`). Inputs are normalised inside ``forward`` with
    the buffers ``node_mean``/``node_std``/``edge_mean``/``edge_std`` (set with :meth:`set_normalization`).

    ``forward(x (N, F), edge_index (2, E) long, edge_attr (E, Fe)) -> (N, D)`` embeddings;
    :meth:`heads` maps embeddings to ``targets`` normalised predictions.
    """

    def __init__(
        self,
        hidden: int = 64,
        embedding: int = 32,
        layers: int = 3,
        head_hidden: int = 64,
        targets: int = 0,
        node_features: int = len(NODE_SPEC),
        edge_features: int = len(EDGE_SPEC),
    ):
        super().__init__()
        self.config = {
            "hidden": hidden,
            "embedding": embedding,
            "layers": layers,
            "head_hidden": head_hidden,
            "targets": targets,
        }
        self.input = nn.Linear(node_features, hidden)
        self.layers = nn.ModuleList([_Layer(hidden, edge_features) for _ in range(layers)])
        self.output = nn.Linear(hidden, embedding)
        self.head = (
            nn.Sequential(nn.Linear(embedding, head_hidden), nn.ReLU(), nn.Linear(head_hidden, targets))
            if targets
            else None
        )
        self.register_buffer("node_mean", torch.zeros(node_features), persistent=False)
        self.register_buffer("node_std", torch.ones(node_features), persistent=False)
        self.register_buffer("edge_mean", torch.zeros(edge_features), persistent=False)
        self.register_buffer("edge_std", torch.ones(edge_features), persistent=False)

    def set_normalization(
        self, node_mean: np.ndarray, node_std: np.ndarray, edge_mean: np.ndarray, edge_std: np.ndarray
    ) -> None:
        """Input scaling (std floored at 1e-6, as :meth:`policy.bundle.PolicyBundle.norm` does)."""
        for name, v in (
            ("node_mean", node_mean),
            ("node_std", np.maximum(node_std, 1e-6)),
            ("edge_mean", edge_mean),
            ("edge_std", np.maximum(edge_std, 1e-6)),
        ):
            getattr(self, name).copy_(torch.as_tensor(np.asarray(v, np.float32)))

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, edge_attr: torch.Tensor) -> torch.Tensor:
        x = (x - self.node_mean) / self.node_std
        e = (edge_attr - self.edge_mean) / self.edge_std
        src, dst = edge_index[0], edge_index[1]
        h = torch.relu(self.input(x))
        for layer in self.layers:
            h = layer(h, e, src, dst)
        return self.output(h)

    def heads(self, z: torch.Tensor) -> torch.Tensor:
        """(N, T) normalised predictions from embeddings ``z``."""
        if self.head is None:
            raise ValueError("GraphEncoderNet built without targets has no heads")
        return self.head(z)


def export_encoder(
    net: GraphEncoderNet,
    path: str | Path,
    *,
    policy_version: str,
    normalization: Mapping[str, Any],
    metadata: Mapping[str, Any] | None = None,
) -> PolicyBundle:
    """Write ``net`` as an encoder bundle into directory ``path`` and return it.

    ``normalization``: ``{"node": {"mean", "std"}, "edge": {...}, "targets": {...}}`` (lists of floats);
    ``metadata``: provenance (objective, data, metrics; ``target_names`` names the head outputs).
    Raises ``ValueError`` when a weight's shape differs from :func:`policy.encoder.mpnn.encoder_weight_shapes`.
    """
    cfg = net.config
    shapes = encoder_weight_shapes(
        len(NODE_SPEC),
        len(EDGE_SPEC),
        cfg["hidden"],
        cfg["embedding"],
        cfg["layers"],
        cfg["head_hidden"],
        cfg["targets"],
    )
    sd = {k: v.detach().cpu().numpy().astype(np.float32) for k, v in net.state_dict().items()}
    if set(sd) != set(shapes) or any(sd[k].shape != s for k, s in shapes.items()):
        raise ValueError(
            f"export: state_dict {sorted((k, v.shape) for k, v in sd.items())} does not match "
            f"mpnn-v1 {sorted(shapes.items())}"
        )
    bundle = PolicyBundle(
        level="encoder",
        policy_version=policy_version,
        feature_spec={"node": NODE_SPEC, "edge": EDGE_SPEC},
        dims=dict(cfg),
        architecture={
            "type": ENCODER_ARCH,
            "aggregation": "mean, callers and callees separately",
            "activation": "relu",
            "residual": True,
        },
        weights=sd,
        normalization=normalization,
        metadata=dict(metadata or {}),
    )
    bundle.save(path)
    return bundle


# ---- pre-training -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class EncoderTrainConfig:
    """Hyperparameters of :func:`train_encoder` (the defaults made the committed ``policy/bundles/encoder``).

    - ``seed``: seeds data generation and torch;
    - ``n_train``: training graphs (scenarios); ``app_share``: fraction of them from the built-in apps not
      held out (the rest synthetic); ``size_range``: services per synthetic graph;
    - ``n_val_synthetic`` / ``n_val_per_app``: held-out scenarios (new synthetic graphs / each held-out app);
    - ``holdout_apps``: built-in apps never seen in training (evaluated only); ``apps``: the built-in apps
      to use at all (``None``: every one under ``policy/data/apps``);
    - ``epochs``, ``batch_graphs`` (graphs per step), ``lr`` (Adam, cosine-decayed to 5%), ``weight_decay``;
    - ``hidden``, ``embedding`` (D), ``layers`` (message-passing rounds; 0 = no graph, a per-service MLP),
      ``head_hidden``: sizes of :class:`GraphEncoderNet`;
    - ``threads``: torch CPU threads (1: with these small matrices, more threads only spin against each other
      on a shared machine — 15x slower on 2 busy cores);
    - ``quick``: a smoke-test run (``--quick``): its ``policy_version`` says ``-quick``.
    """

    seed: int = 0
    n_train: int = 16000
    app_share: float = 0.3
    size_range: tuple[int, int] = (4, 40)
    n_val_synthetic: int = 300
    n_val_per_app: int = 150
    holdout_apps: tuple[str, ...] = ("online-boutique", "sock-shop")
    apps: tuple[str, ...] | None = None
    epochs: int = 20
    batch_graphs: int = 32
    lr: float = 2e-3
    weight_decay: float = 1e-5
    hidden: int = 64
    embedding: int = 32
    layers: int = 3
    head_hidden: int = 64
    threads: int = 1
    quick: bool = False

    def __post_init__(self) -> None:
        for name in ("n_train", "epochs", "batch_graphs", "hidden", "embedding", "head_hidden", "threads"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: expected an integer >= 1, got {getattr(self, name)}")
        if self.layers < 0 or self.seed < 0:
            raise ValueError(f"layers and seed: expected integers >= 0, got {self.layers}, {self.seed}")


def collate(samples: Sequence[EncoderSample]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Several graphs as one disjoint graph: ``(x (ΣN, F), edge_index (2, ΣE) long, edge_attr (ΣE, Fe),
    targets (ΣN, T))``, edge rows offset per graph."""
    xs, eis, eas, ys = [], [], [], []
    off = 0
    for s in samples:
        xs.append(s.arrays.x)
        eis.append(s.arrays.edge_index + off)
        eas.append(s.arrays.edge_attr)
        ys.append(s.targets)
        off += s.arrays.x.shape[0]
    return (
        torch.from_numpy(np.concatenate(xs)),
        torch.from_numpy(np.concatenate(eis, axis=1)),
        torch.from_numpy(np.concatenate(eas)),
        torch.from_numpy(np.concatenate(ys)),
    )


def graph_weights(samples: Sequence[EncoderSample]) -> torch.Tensor:
    """(ΣN,) row weights giving every graph of the batch the same total weight (1 / its services), so a
    386-service app does not drown twenty 10-service ones; they sum to the number of graphs."""
    return torch.from_numpy(
        np.concatenate([np.full(len(s.targets), 1.0 / max(1, len(s.targets)), np.float32) for s in samples])
    )


def _stats(a: np.ndarray) -> dict[str, list[float]]:
    """Column mean and std; a (nearly) constant column keeps scale 1, so an unseen value stays moderate."""
    return {"mean": [float(v) for v in a.mean(0)], "std": [float(v) if v > 1e-3 else 1.0 for v in a.std(0)]}


def _fit(
    cfg: EncoderTrainConfig, layers: int, train: Sequence[EncoderSample], norm: Mapping[str, Any], log, progress: bool
) -> tuple[GraphEncoderNet, float, float]:
    """One CleanRL-style loop: Adam on the MSE of standardised targets, each graph weighing the same.
    Returns ``(net, seconds, final loss)``."""
    torch.manual_seed(cfg.seed)
    y_mean = torch.tensor(norm["targets"]["mean"])
    y_std = torch.tensor(norm["targets"]["std"])
    net = GraphEncoderNet(cfg.hidden, cfg.embedding, layers, cfg.head_hidden, len(TARGET_SPEC))
    net.set_normalization(
        np.array(norm["node"]["mean"]),
        np.array(norm["node"]["std"]),
        np.array(norm["edge"]["mean"]),
        np.array(norm["edge"]["std"]),
    )
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    steps_per_epoch = max(1, math.ceil(len(train) / cfg.batch_graphs))
    total_steps = cfg.epochs * steps_per_epoch
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda k: 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(k, total_steps) / total_steps))
    )
    rng = np.random.default_rng(cfg.seed)
    bar = progress_bar(f"encoder (layers={layers})", total_steps, "step", enabled=progress)
    t0 = time.perf_counter()
    loss_ema = math.nan
    for epoch in range(cfg.epochs):
        order = rng.permutation(len(train))
        for k in range(steps_per_epoch):
            batch = [train[i] for i in order[k * cfg.batch_graphs : (k + 1) * cfg.batch_graphs]]
            x, ei, ea, y = collate(batch)
            w = graph_weights(batch)
            pred = net.heads(net(x, ei, ea))
            loss = torch.sum(w[:, None] * (pred - (y - y_mean) / y_std) ** 2) / (w.sum() * y.shape[1])
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(net.parameters(), 5.0)
            opt.step()
            sched.step()
            lv = float(loss.detach())
            loss_ema = lv if math.isnan(loss_ema) else 0.98 * loss_ema + 0.02 * lv
            bar.update(1)
            bar.set_postfix(epoch=epoch + 1, loss=f"{loss_ema:.4f}")
        if not bar.shown and (epoch + 1) % 10 == 0:
            log(
                f"encoder (layers={layers}): epoch {epoch + 1}/{cfg.epochs}, loss {loss_ema:.4f}, "
                f"{time.perf_counter() - t0:.0f} s"
            )
    bar.close()
    train_s = time.perf_counter() - t0
    log(f"encoder (layers={layers}): {total_steps} steps in {train_s:.0f} s, final loss {loss_ema:.4f}")
    net.eval()
    return net, train_s, loss_ema


def _evaluate(enc: GraphEncoder, sets: Mapping[str, Sequence[EncoderSample]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, ss in sets.items():
        preds = [enc.predict(s.arrays) for s in ss]
        for subset in ("all", "unmeasured"):
            out[f"{name}/{subset}"] = error_table(preds, ss, subset)
    return out


def train_encoder(
    config: EncoderTrainConfig = EncoderTrainConfig(),
    out: str | Path | None = DEFAULT_ENCODER_BUNDLE,
    log=print,
    progress: bool = True,
    ablation: bool = False,
) -> tuple[GraphEncoderNet, dict[str, Any]]:
    """Pre-train the encoder (module docstring), export it to ``out`` (``None``: do not write a bundle),
    and evaluate the exported bundle with the numpy :class:`~policy.encoder.mpnn.GraphEncoder` on the held-out sets.
    ``ablation``: also train the same network without message passing (``layers=0``: each service sees only
    its own features) on the same data, and report its held-out error next to the encoder's.

    Returns ``(net, report)``; ``report`` has ``heldout`` (``"<set>/<all|unmeasured>"`` → target →
    :func:`~policy.train.encoder_data.error_table` figures), ``baseline_mean`` (the same for predicting the training
    mean), ``ablation_no_graph`` (with ``ablation``), ``train_s``, ``data_s``, ``config``. The bundle's
    metadata records the same figures.
    """
    cfg = config
    torch.set_num_threads(max(1, cfg.threads))
    t_start = time.perf_counter()
    all_apps = load_builtin_apps(only=cfg.apps)
    held = [a for a in all_apps if a.name in cfg.holdout_apps]
    train_apps = [a for a in all_apps if a.name not in cfg.holdout_apps]
    log(
        f"encoder: generating {cfg.n_train} training scenarios (apps: "
        f"{', '.join(a.name for a in train_apps) or 'none'} + synthetic; held out: "
        f"{', '.join(a.name for a in held) or 'none'})"
    )
    train = make_dataset(cfg.n_train, cfg.seed, train_apps, cfg.app_share if train_apps else 0.0, cfg.size_range)
    sets = heldout_sets(cfg.seed, cfg.n_val_synthetic, cfg.n_val_per_app, held, cfg.size_range)
    t_data = time.perf_counter() - t_start
    log(f"encoder: data ready in {t_data:.0f} s ({sum(len(s.targets) for s in train)} service rows)")
    X = np.concatenate([s.arrays.x for s in train])
    E = np.concatenate([s.arrays.edge_attr for s in train])
    Y = np.concatenate([s.targets for s in train])
    norm = {"node": _stats(X), "edge": _stats(E), "targets": _stats(Y)}

    net, train_s, final_loss = _fit(cfg, cfg.layers, train, norm, log, progress)
    n_params = sum(p.numel() for p in net.parameters())
    # date, seed, rounds, -quick, and the weights' digest (policy.bundle.content_version): a quick 8-dim encoder
    # never shares the committed one's version, so the encoder_version cross-checks in serving tell them apart

    version = content_version(
        f"encoder-{time.strftime('%Y%m%d')}-s{cfg.seed}-l{cfg.layers}",
        {k: v.detach().cpu().numpy().astype(np.float32) for k, v in net.state_dict().items()},
        quick=cfg.quick,
    )
    meta: dict[str, Any] = {
        "objective": "predict per-service CPU use and mean response time now, at 1.5x load, and with every "
        "call on one node (policy.train.encoder_data), from partially measured call graphs",
        "target_names": list(TARGET_SPEC.names),
        "target_units": list(TARGET_SPEC.units),
        "train_apps": [a.name for a in train_apps],
        "holdout_apps": [a.name for a in held],
        "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(cfg).items()},
        "train_s": round(train_s, 1),
        "data_s": round(t_data, 1),
        "final_loss": round(final_loss, 5),
        "parameters": n_params,
        "train_rows": int(len(Y)),
        "torch_version": torch.__version__,
    }
    enc = GraphEncoder(_bundle_of(net, version, norm, meta))
    heldout = _evaluate(enc, sets)
    baseline: dict[str, Any] = {}
    for name, ss in sets.items():
        means = [np.broadcast_to(np.array(norm["targets"]["mean"], np.float32), s.targets.shape) for s in ss]
        for subset in ("all", "unmeasured"):
            baseline[f"{name}/{subset}"] = error_table(means, ss, subset)
    meta["heldout"] = heldout
    meta["baseline_mean"] = baseline
    meta["heldout_rows"] = {k: int(sum(len(s.targets) for s in v)) for k, v in sets.items()}
    report: dict[str, Any] = {
        "heldout": heldout,
        "baseline_mean": baseline,
        "train_s": train_s,
        "data_s": t_data,
        "parameters": n_params,
        "policy_version": version,
        "config": meta["config"],
        "rows": meta["heldout_rows"],
        "train_rows": int(len(Y)),
    }
    if ablation:
        flat, flat_s, _ = _fit(cfg, 0, train, norm, log, progress)
        abl = _evaluate(GraphEncoder(_bundle_of(flat, version + "-l0", norm, {})), sets)
        meta["ablation_no_graph"] = abl
        meta["ablation_train_s"] = round(flat_s, 1)
        report["ablation_no_graph"] = abl
    if out is not None:
        export_encoder(net, out, policy_version=version, normalization=norm, metadata=meta)
    return net, report


def _bundle_of(net: GraphEncoderNet, version: str, norm: Mapping[str, Any], meta: Mapping[str, Any]) -> PolicyBundle:

    with tempfile.TemporaryDirectory() as d:
        return export_encoder(net, d, policy_version=version, normalization=norm, metadata=meta)


def format_report(report: Mapping[str, Any]) -> str:
    """A readable table of :func:`train_encoder`'s held-out figures (and the mean-predictor baseline)."""
    rows = []
    abl = report.get("ablation_no_graph") or {}
    for setname, table in report["heldout"].items():
        base = report["baseline_mean"][setname]
        for t, m in table.items():
            a = abl.get(setname, {}).get(t)
            rows.append(
                [
                    setname,
                    t,
                    f"{m['mae_log']:.3f}",
                    f"{100 * m['median_rel_err']:.1f}",
                    f"{m['r2']:.3f}",
                    f"{a['mae_log']:.3f}" if a else "",
                    f"{base[t]['mae_log']:.3f}",
                ]
            )
    return tabulate(
        rows,
        headers=["held-out set", "target", "MAE log1p", "median rel err %", "R2", "no-graph MAE", "mean-pred MAE"],
        disable_numparse=True,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m policy.train.encoder [--quick] [--out DIR] [--json PATH]``."""
    p = argparse.ArgumentParser(prog="python -m policy.train.encoder", description=__doc__.splitlines()[0])
    p.add_argument(
        "--out",
        default=None,
        help="bundle directory to write (default: policy/bundles/encoder; with --quick: runs/encoder-quick/bundle)",
    )
    p.add_argument("--quick", action="store_true", help="a tiny run (smoke test; seconds)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int, default=None)
    p.add_argument("--layers", type=int, default=None)
    p.add_argument("--json", metavar="PATH", help="write the report as JSON")
    p.add_argument("--checkpoint", metavar="PATH", help="also save a torch checkpoint")
    p.add_argument("--ablation", action="store_true", help="also train and report a no-message-passing twin")
    a = p.parse_args(argv)
    return run_cli(a.out, a.quick, a.seed, a.epochs, a.layers, a.json, checkpoint=a.checkpoint, ablation=a.ablation)


def save_checkpoint(
    net: GraphEncoderNet,
    path: str | Path,
    *,
    policy_version: str,
    normalization: Mapping[str, Any],
    metadata: Mapping[str, Any],
) -> None:
    """A torch checkpoint of ``net`` (state_dict, sizes, normalisation, metadata) for :func:`export_checkpoint`."""
    torch.save(
        {
            "state_dict": net.state_dict(),
            "config": dict(net.config),
            "policy_version": policy_version,
            "normalization": dict(normalization),
            "metadata": dict(metadata),
        },
        str(path),
    )


def export_checkpoint(path: str | Path, out: str | Path) -> PolicyBundle:
    """``hrl-policy export encoder``: rebuild the net from a :func:`save_checkpoint` file and write its bundle
    to ``out``. Raises ``ValueError`` for a file that is not such a checkpoint."""
    try:
        ck = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - OSError, UnpicklingError, RuntimeError: one line
        raise ValueError(f"{path}: not a readable encoder checkpoint ({type(exc).__name__})") from None
    if not isinstance(ck, dict) or not {"state_dict", "config", "normalization"} <= set(ck):
        raise ValueError(f"{path}: not an encoder checkpoint (expected state_dict, config, normalization)")
    c = ck["config"]
    net = GraphEncoderNet(c["hidden"], c["embedding"], c["layers"], c["head_hidden"], c["targets"])
    net.load_state_dict(ck["state_dict"])
    n = ck["normalization"]
    net.set_normalization(
        np.array(n["node"]["mean"]), np.array(n["node"]["std"]), np.array(n["edge"]["mean"]), np.array(n["edge"]["std"])
    )
    return export_encoder(
        net,
        out,
        policy_version=str(ck.get("policy_version") or "encoder"),
        normalization=n,
        metadata=ck.get("metadata") or {},
    )


#: Where ``train encoder --quick`` writes without ``--out`` (git-ignored ``runs/``).
QUICK_OUT = Path(__file__).resolve().parents[2] / "runs" / "encoder-quick" / "bundle"


def run_cli(
    out: str | None,
    quick: bool,
    seed: int,
    epochs: int | None,
    layers: int | None,
    json_path: str | None,
    log=print,
    checkpoint: str | None = None,
    ablation: bool = False,
) -> int:
    """The body of ``hrl-policy train encoder`` and ``python -m policy.train.encoder``: train, write the bundle
    to ``out`` (default ``policy/bundles/encoder``; with ``quick`` :data:`QUICK_OUT`, so a smoke test never
    overwrites the committed bundle), then the checkpoint and the JSON report when asked. Every argument is
    checked first: a bad one raises ``ValueError`` naming the flag and the value, before any training."""
    if seed < 0:
        raise ValueError(f"--seed: expected an integer >= 0, got {seed}")
    if epochs is not None and epochs < 1:
        raise ValueError(f"--epochs: expected an integer >= 1, got {epochs}")
    if layers is not None and layers < 0:
        raise ValueError(f"--layers: expected an integer >= 0, got {layers}")
    for flag, path in (("--checkpoint", checkpoint), ("--json", json_path)):
        if path and not Path(path).resolve().parent.is_dir():
            raise ValueError(f"{flag}: directory {Path(path).resolve().parent} does not exist")
    kw: dict[str, Any] = {"seed": seed}
    if quick:
        kw.update(
            n_train=64,
            n_val_synthetic=16,
            n_val_per_app=8,
            epochs=2,
            hidden=16,
            embedding=8,
            head_hidden=16,
            quick=True,
        )
    if epochs is not None:
        kw["epochs"] = epochs
    if layers is not None:
        kw["layers"] = layers
    cfg = EncoderTrainConfig(**kw)
    # a --quick run never overwrites the committed bundle unless --out says so
    out = out if out is not None else str(QUICK_OUT if quick else DEFAULT_ENCODER_BUNDLE)
    # its progress on stderr: a bar on a terminal, else records (policy.telemetry.progress_bar and note: JSON ones
    # under --log-format json), where the command turned progress on; ``log`` gets the report
    net, report = train_encoder(cfg, out, log=note, progress=True, ablation=ablation)
    if checkpoint:
        b = PolicyBundle.load(out)
        save_checkpoint(
            net,
            checkpoint,
            policy_version=b.policy_version,
            normalization=dict(b.normalization),
            metadata=dict(b.metadata),
        )
        log(f"checkpoint written to {checkpoint}")
    log(format_report(report))
    if out:
        log(f"{report['policy_version']}: bundle written to {out}" + (" (quick run)" if quick else ""))
    if json_path:
        Path(json_path).write_text(json.dumps(report, indent=1, default=float) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
