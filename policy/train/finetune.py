"""Fine-tuning the learned stacks on your own app (``hrl-policy train --all --app DIR --fine-tune [ROOT]``): every
stage starts from the trained bundle at its place under a bundles root (``ROOT``, default the committed
``policy/bundles``) instead of a fresh initialisation, with a smaller budget, on the episodes of your app (and
scenario). numpy only: the stages' torch modules use it, and the orchestrator (:mod:`policy.train.pipeline`)
checks every source before any stage trains.

What each stage takes from its source, and what stays fixed so the served features mean what they meant:

=============  =======================================  =============================================================
stage          source (under ``ROOT``)                  starts from / keeps fixed
=============  =======================================  =============================================================
``drpc``       ``drpc/student``,                        each student's actor; the teacher (never exported) starts as
               ``hrl-scheduler/high/student``,          the widest student's actor with zero weights on its extra
               ``hrl-flat/high/student``,               columns; the critics are fresh and learn alone first
               ``drpc/predictor``                       (``td3.critic_warmup``). The predictor is reused, not
                                                        retrained (its forecasts are student inputs)
``placement``  ``<stack>/low`` of every variant         the MLP's weights and its input normalization (fixed)
``constant``   ``hrl-scheduler/high/constant.json``     a grid search on your app; the grid includes the source's
                                                        capacity target
``dagger``     ``<stack>/high/intent``                  the actor and its input normalization (fixed); the fallback's
                                                        reach is the larger of the source's and the new states'
``encoder``    (not fine-tuned)                         the other bundles read its embeddings: copied unchanged
=============  =======================================  =============================================================

**Compatible or refused.** A source bundle is loaded with the level, feature specification and architecture type
the stage builds, then every field the stage's network depends on (``dims.hidden``, ``architecture.encoder_version``,
``metadata.predictor_version``, ...) is compared with what the stage would build; a difference raises ``ValueError``
in one line naming the bundle directory and the field (never a silent fresh start).

**Provenance.** Every bundle a fine-tuning stage writes carries ``metadata.fine_tuned_from = {"policy_version",
"bundle", "root"}`` (the source's version, its directory under the root, and the root), and its ``policy_version``
has ``-ft`` before the weights' digest (:func:`policy.bundle.content_version`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from policy.bundle import DEFAULT_BUNDLES, BundleError, Level, PolicyBundle
from policy.features import FeatureSpec

__all__ = ["FINE_TUNED_STAGES", "FineTune", "RunOptions"]

#: The stages that can start from a trained bundle, in pipeline order (the encoder is never fine-tuned).
FINE_TUNED_STAGES = ("drpc", "placement", "constant", "dagger")


def _plain(v: Any) -> Any:
    """``v`` as JSON data (mapping proxies → dicts, tuples → lists), so that values equal as JSON compare equal."""
    return json.loads(json.dumps(v, default=lambda x: dict(x) if isinstance(x, Mapping) else list(x)))


def _field(b: PolicyBundle, dotted: str) -> Any:
    """``b``'s manifest field ``dotted`` (``dims.hidden``, ``architecture.encoder_version``, ``metadata.x.y``);
    None when absent."""
    head, *rest = dotted.split(".")
    v: Any = getattr(b, head)
    for k in rest:
        v = v.get(k) if isinstance(v, Mapping) else None
    return v


@dataclass(frozen=True)
class FineTune:
    """Start the training stages from the bundles under ``source`` (a bundles root laid out as ``policy/bundles``;
    default the committed one). Raises ``ValueError`` naming ``--fine-tune`` when ``source`` is not a directory."""

    source: Path = field(default=DEFAULT_BUNDLES)

    def __post_init__(self) -> None:
        p = Path(self.source)
        object.__setattr__(self, "source", p)
        if not p.is_dir():
            raise ValueError(f"--fine-tune: {p}: not a directory (a bundles root laid out as policy/bundles)")

    @classmethod
    def from_flag(cls, value: str | None, *, app_given: bool) -> FineTune | None:
        """``--fine-tune [ROOT]`` of ``hrl-policy train --all``: None when absent, the committed bundles for an
        empty ``value``. Raises ``ValueError`` naming the flag without ``--app`` or for a ROOT that is not a
        directory."""
        if value is None:
            return None
        if not app_given:
            raise ValueError("--fine-tune: only with --app (the app the trained bundles are fine-tuned on)")
        return cls(Path(value)) if value else cls()

    def path(self, rel: str) -> Path:
        """``source / rel``."""
        return self.source / rel

    def load(
        self,
        rel: str,
        *,
        stage: str,
        level: Level,
        feature_spec: Mapping[str, FeatureSpec] | None = None,
        architecture_type: str | None = None,
        expect: Mapping[str, Any] | None = None,
    ) -> PolicyBundle:
        """The source bundle ``rel`` (e.g. ``hrl-scheduler/low``) for ``stage``, checked to be what the stage builds:
        ``level``, ``feature_spec`` (input name → spec) and ``architecture_type`` as :meth:`PolicyBundle.load` checks
        them, then each ``expect`` entry, a dotted manifest field (``dims.hidden``, ``architecture.encoder_version``,
        ``metadata.predictor_version``) → the value the stage builds, compared as JSON. Raises ``ValueError``, one
        line starting ``--fine-tune: bundle <dir>: <field>:``, for a missing, unreadable or different bundle."""
        d = self.path(rel)
        if not (d / "manifest.json").is_file():
            raise ValueError(f"--fine-tune: bundle {d}: manifest.json: missing (the {stage} stage starts from it)")
        try:
            b = PolicyBundle.load(d, level=level, feature_spec=feature_spec, architecture_type=architecture_type)
        except BundleError as exc:
            line = " ".join(str(exc).split())
            raise ValueError(f"--fine-tune: {line} (expected: what the {stage} stage builds)") from None
        for name, want in (expect or {}).items():
            got = _field(b, name)
            if _plain(got) != _plain(want):
                raise ValueError(
                    f"--fine-tune: bundle {d}: {name}: the {stage} stage builds {_plain(want)!r}, "
                    f"the bundle has {_plain(got)!r}"
                )
        return b

    def provenance(self, rel: str, bundle: PolicyBundle) -> dict[str, Any]:
        """``metadata.fine_tuned_from`` of a bundle trained from ``bundle`` (loaded from ``rel``): ``policy_version``,
        ``bundle`` (``rel``) and ``root`` (the source root)."""
        return {"policy_version": bundle.policy_version, "bundle": rel, "root": str(self.source)}


@dataclass(frozen=True)
class RunOptions:
    """A trainer's optional inputs and outputs beside its configuration (``train_drpc``, ``train_placement``,
    ``train_dagger``): ``tensorboard``, a directory for TensorBoard event files (None: none); ``init``, what to
    start from (a fine-tune: the stage's source bundle, or for DRPC a student name → bundle mapping; None: a fresh
    start); ``fine_tuned_from``, the provenance that goes into the written bundles' metadata (for DRPC per student);
    ``labels_from``, label archives of earlier runs to refit on (DAgger only; empty: roll out)."""

    tensorboard: str | Path | None = None
    init: Any = None
    fine_tuned_from: Any = None
    labels_from: tuple[str | Path, ...] = ()
