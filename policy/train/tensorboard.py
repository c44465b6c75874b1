"""[torch] TensorBoard event files of the training runs (``hrl-policy train ... --tensorboard DIR``).

A :class:`TrainingBoard` mirrors the rows a trainer already writes to its CSV log (``log.csv`` of
:mod:`policy.train.placement`, ``progress.csv`` of :mod:`policy.train.dagger` and :mod:`policy.train.drpc`): every
finite number of a row becomes the scalar ``<prefix>/<column>`` at the row's step (the iteration or episode), so
``tensorboard --logdir DIR`` shows the same curves as the CSV files and the PNG plots, live while training runs,
and several runs side by side. The writer is :class:`torch.utils.tensorboard.SummaryWriter`; it needs the
``tensorboard`` package (the ``[tensorboard]`` extra: ``pip install -e '.[train,tensorboard]'``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = ["TrainingBoard", "open_board", "MISSING_TENSORBOARD"]

#: The one-line error when ``--tensorboard`` is given without the tensorboard package.
MISSING_TENSORBOARD = (
    "--tensorboard: needs the tensorboard package (the [tensorboard] extra: pip install -e '.[train,tensorboard]')"
)


class TrainingBoard:
    """TensorBoard event files for one training run under ``log_dir`` (created; None: TensorBoard off, every
    method does nothing). ``hparams``: the run's configuration, recorded once as the text ``config`` (one
    ``key: value`` per line).

    Raises ValueError (:data:`MISSING_TENSORBOARD`) when the tensorboard package is not installed."""

    def __init__(self, log_dir: str | Path | None, hparams: Mapping[str, Any] | None = None):
        self.log_dir = None if log_dir is None else Path(log_dir)
        self._writer: Any = None
        if self.log_dir is None:
            return
        try:
            from torch.utils.tensorboard import SummaryWriter  # the optional tensorboard package, on demand
        except ImportError:
            raise ValueError(MISSING_TENSORBOARD) from None
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._writer = SummaryWriter(log_dir=str(self.log_dir))
        if hparams:
            self._writer.add_text("config", "\n".join(f"    {k}: {v}" for k, v in sorted(hparams.items())), 0)

    def row(self, step: int, row: Mapping[str, Any], prefix: str) -> int:
        """Write every finite number of ``row`` (bools and non-numbers skipped) as ``<prefix>/<column>`` at
        ``step``; returns how many scalars were written. The events are flushed so TensorBoard shows them now."""
        if self._writer is None:
            return 0
        n = 0
        for k, v in row.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                continue
            self._writer.add_scalar(f"{prefix}/{k}", float(v), int(step))
            n += 1
        self._writer.flush()
        return n

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()

    def __enter__(self) -> TrainingBoard:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def open_board(log_dir: str | Path | None, hparams: Mapping[str, Any] | None = None) -> TrainingBoard:
    """A :class:`TrainingBoard` under ``log_dir`` (None: one that writes nothing)."""
    return TrainingBoard(log_dir, hparams)
