"""An ensemble of learned placement policies scored as one (numpy only).

:class:`PlacementEnsemble` holds K :class:`~policy.lowlevel.LearnedPlacement` members (in the committed bundles, the
placements of the K training seeds of ``make train``, each with the graph encoder it was trained with) and scores a
candidate node with the mean of the members' logits, then the members' shared output rules (sigmoid to 0..10, the
intent adjustment, the saturation guard: :func:`policy.lowlevel.scores_from_logits`). Averaging independently
trained networks is the deep-ensemble recipe (Lakshminarayanan, Pritzel and Blundell, "Simple and scalable
predictive uncertainty estimation using deep ensembles", NeurIPS 2017, arXiv 1612.01474): the members' errors are
partly independent, so the mean varies less from one training seed to the next than any member does.

An ensemble directory holds ``ensemble.json`` (:func:`policy.bundle.ensemble_members`) instead of a bundle;
:func:`load_placement` loads either. Cost: K times a member's featurization and network per scored candidate
(off the request path in the extender, whose :class:`~policy.lowlevel.NodeScoreTable` computes node vectors in the
background), and K sets of service rows (a member whose encoder is not the embedding cache's computes its own).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from policy.bundle import BundleError, check_distinct_members, ensemble_member_error, ensemble_members, is_ensemble
from policy.index import ClusterIndex
from policy.state import ClusterSnapshot, PodInfo

from .interface import PlacementPolicy
from .learned import LearnedPlacement, LogitScorer, load_learned_placement

__all__ = ["PlacementEnsemble", "MemberRows", "load_placement"]

#: What every member must share: the output rules applied after the mean logit.
_SHARED = ("intent_gain", "saturation_guard", "extender_weight")


class MemberRows(tuple):
    """The service rows of each member, in member order (the ensemble's ``embeddings`` / rows token)."""

    __slots__ = ()


class PlacementEnsemble(LogitScorer):
    """K learned placements scored as one: ``score = scores_from_logits(mean_k logit_k(x_k))`` (module docstring;
    ``filter``, ``score``, ``score_parts`` and ``load_term`` are :class:`~policy.lowlevel.learned.LogitScorer`'s),
    a :class:`~policy.lowlevel.PlacementPolicy` served wherever :class:`~policy.lowlevel.LearnedPlacement` is (the
    extender's ``policy.name: learned``, the descheduler's ``placement``, the simulator's stacks).

    ``members``: one or more :class:`LearnedPlacement` (an ensemble file lists at most 16); ``source``: where they
    were loaded from (for messages).
    Raises :class:`~policy.bundle.BundleError` naming the member and the field when the members disagree on the
    output rules (``intent_gain``, ``saturation_guard``, ``extender_weight``), when one network is listed twice
    (the same ``policy_version``), or when there are none."""

    name = "learned"

    def __init__(self, members: Sequence[LearnedPlacement], source: str = ""):
        self.members = tuple(members)
        where = f"placement ensemble {source}".rstrip()
        if not self.members:
            raise BundleError(f"{where}: members: expected at least one placement bundle")
        first = self.members[0]
        for i, m in enumerate(self.members[1:], start=1):
            for k in _SHARED:
                if getattr(m, k) != getattr(first, k):
                    raise BundleError(
                        f"{where}: members[{i}] ({m.bundle.where}): architecture.{k}: expected {getattr(first, k)!r} "
                        f"as members[0], found {getattr(m, k)!r}"
                    )
        check_distinct_members([str(m.version) for m in self.members], where)
        self.intent_gain = first.intent_gain
        self.saturation_guard = first.saturation_guard
        self.extender_weight = first.extender_weight
        self.source = source
        self.version = "ensemble(" + ",".join(str(m.version) for m in self.members) + ")"
        self._tokens: dict[tuple[int, ...], MemberRows] = {}

    @staticmethod
    def load(path: str | Path, *, refresh_s: float = 300.0) -> PlacementEnsemble:
        """The ensemble of directory ``path`` (its ``ensemble.json``, level ``low``), each member loaded by
        :meth:`LearnedPlacement.load` (with the encoder it was trained with). Raises
        :class:`~policy.bundle.BundleError` / :class:`~policy.bundle.BundleMissing` as those do, one line naming
        the file or member."""
        members = []
        for i, d in enumerate(ensemble_members(path, "low")):
            try:
                members.append(LearnedPlacement.load(d, refresh_s=refresh_s))
            except ValueError as exc:  # BundleMissing, BundleError: one line naming the ensemble and the member
                raise ensemble_member_error(path, i, d, exc) from None
        return PlacementEnsemble(members, str(path))

    # ---- what the extender sets on a learned policy ------------------------------------------------------
    @property
    def embedding_source(self) -> Callable[[], Any] | None:
        """The embedding cache's copy, offered to every member (a member uses it only when it was made by the
        member's own encoder: :meth:`LearnedPlacement.service_rows`)."""
        return self.members[0].embedding_source

    @embedding_source.setter
    def embedding_source(self, source: Callable[[], Any] | None) -> None:
        for m in self.members:
            m.embedding_source = source

    @property
    def background_rows(self) -> bool:
        """True once a :class:`~policy.lowlevel.RowsRefresher` computes the members' rows off the request path."""
        return all(m.background_rows for m in self.members)

    @background_rows.setter
    def background_rows(self, value: bool) -> None:
        for m in self.members:
            m.background_rows = value

    def with_embeddings(self, embedding_source: Callable[[], Any] | None) -> PlacementEnsemble:
        """A copy whose members share the weights and encoders, reading embeddings from ``embedding_source``."""
        return PlacementEnsemble([m.with_embeddings(embedding_source) for m in self.members], self.source)

    def refresh(self, snapshot: ClusterSnapshot) -> Any:
        """Compute (if due) every member's service rows of ``snapshot``; returns the first member's. A member that
        fails does not keep the others from refreshing; the first error is raised after all were tried."""
        entries: list[Any] = []
        error: Exception | None = None
        for m in self.members:
            try:
                entries.append(m.refresh(snapshot))
            except Exception as exc:  # noqa: BLE001 - re-raised below, once every member had its turn
                error = error or exc
        if error is not None:
            raise error
        return entries[0]

    def service_rows(self, index: ClusterIndex, service: str | None = None) -> MemberRows:
        """Each member's rows (:meth:`LearnedPlacement.service_rows`) as one :class:`MemberRows`, the same object
        for the same member rows (so that :class:`~policy.lowlevel.NodeScoreTable` keeps its vectors, also when a
        member alternates between the embedding cache's rows and its own)."""
        rows = [m.service_rows(index, service) for m in self.members]
        key = tuple(id(r) for r in rows)
        tokens = self._tokens
        tok = tokens.get(key)
        if tok is not None and all(a is b for a, b in zip(tok, rows)):  # the token holds its rows: ids stay theirs
            return tok
        tok = MemberRows(rows)
        if len(tokens) >= 16:  # rows objects change with the graph and the refreshes: keep the recent ones
            tokens = {}
        self._tokens = {**tokens, key: tok}  # replaced, not mutated: readers on other threads see a whole dict
        return tok

    # ---- LogitScorer: filter, score and the plugin's table, from the mean logit ---------------------------
    def _member_rows(self, embeddings: Any) -> list[Any]:
        if isinstance(embeddings, MemberRows) and len(embeddings) == len(self.members):
            return list(embeddings)
        if embeddings is None:
            return [None] * len(self.members)
        # one embedding entry: for the members made by its encoder; the others read their own rows
        version = getattr(embeddings, "encoder_version", None)
        return [embeddings if version == m.rows_version else None for m in self.members]

    def rows_and_logits(
        self,
        pod: PodInfo,
        candidates: Sequence[str],
        index: ClusterIndex,
        intent: Sequence[float] | None = None,
        *,
        embeddings: Any = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(the first member's feature rows (C, F), the members' mean logit (C,) float64)``. The context columns,
        which the output rules read, are the same in every member's rows. ``embeddings``: a :class:`MemberRows`
        (each member its own), one embedding entry (for the members of its encoder), or None (each member's
        :meth:`LearnedPlacement.service_rows`). Raises ``ValueError`` as :meth:`LearnedPlacement.features` (a
        service without a row)."""
        z = np.zeros(len(candidates), dtype=np.float64)
        x0: np.ndarray | None = None
        for m, rows in zip(self.members, self._member_rows(embeddings)):
            x, logits = m.rows_and_logits(pod, candidates, index, intent, embeddings=rows)
            z += logits
            if x0 is None:
                x0 = x
        assert x0 is not None
        return x0, z / len(self.members)


def load_placement(path: str | Path, *, refresh_s: float | None = None) -> PlacementPolicy:
    """The learned placement of directory ``path``: a :class:`PlacementEnsemble` when it holds ``ensemble.json``,
    else the bundle's :class:`LearnedPlacement` (:func:`~policy.lowlevel.load_learned_placement`, whose missing-bundle
    error names the path and hints at a stack's ``low/``; with ``refresh_s``, :meth:`LearnedPlacement.load`).
    ``refresh_s``: seconds between service-row recomputations (None: the loaders' default, 300). Raises as those
    do."""
    if is_ensemble(path):
        return PlacementEnsemble.load(path, refresh_s=300.0 if refresh_s is None else refresh_s)
    if refresh_s is None:
        return load_learned_placement(path)
    return LearnedPlacement.load(path, refresh_s=refresh_s)
