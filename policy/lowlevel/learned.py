"""The learned low-level policy: scores every candidate node for a pod (numpy only; served in the extender).

For a pod of service *s* and each candidate node *n*, :func:`featurize_candidates` builds one row of
:data:`PLACEMENT_FEATURES` (C candidates → a (C, F) float32 array):

- **the node after placing the pod**: requested CPU and memory fractions, measured CPU fraction (requested when
  no metrics; ``usage_known`` says which), pods fraction, CPU cores left; the pod's own requests as fractions of
  the node. A pod already bound to a candidate (the descheduler scoring its current node) is not counted twice;
- **co-location with the call graph**: the call-rate-weighted share of the pods of *s*'s callers on *n*, and of
  its callees (separately), the same shares over *n*'s zone, and the log call rates in and out of *s*;
- **spread**: the share of *s*'s other pods on *n* and in its zone, and their count on *n*;
- **the high-level intent**: its ``locality_weight`` and ``balance_weight`` (:data:`policy.lowlevel.INTENT_SPEC`,
  defaults when absent; see :mod:`policy.train.placement` for what they weigh);
- **the service's representation**: its graph-encoder embedding (``service_input="encoder"``,
  :data:`PLACEMENT_FEATURES`), or, for the ``hrl-no-encoder`` ablation, the encoder's raw per-service input
  row (:data:`policy.encoder.graph.NODE_SPEC`; ``service_input="flat"``, :data:`PLACEMENT_FEATURES_FLAT`).

The network (``placement-mlp-v1``) is one small MLP applied to every row (so any number of candidates, any
cluster)::

    x̂ = (x − μ) / σ                                     (normalisation stored in the bundle)
    h = tanh(W₁ x̂ + b₁);  h = tanh(W₂ h + b₂);  z = W₃ h + b₃  (C,)
    score = clip(10 · sigmoid(z) + g · intent_adjustment(x), 0, 10) · f(x)   (C,), what the extender answers

``intent_adjustment`` (:func:`intent_adjustment`) is 0 at the default intent (1, 1) and otherwise moves the score by
``(locality_weight − 1) × co-location − (balance_weight − 1) × CPU overload`` points per unit of ``g``
(``architecture.intent_gain``, 3 in the committed bundles; the network is trained with it in place): the high
level gets a direct, predictable handle on placement, and the learned part adapts around it. ``f`` is the
saturation guard (:func:`saturation_factor`: 1 up to 70 % CPU use with the pod added, 0 at 100 %) in bundles
with ``architecture.saturation_guard: true``, else 1; trained with it in place as well.

kube-scheduler then adds ``round(score) × weight × 10`` (weight 2 as shipped) to its in-tree plugins' total and
picks the best node. Training (:mod:`policy.train.placement`) optimises exactly that combination: its policy is
the softmax, over the candidates, of ``(in-tree total + 20 · round(score)) / temperature``, and the served
decision (kube-scheduler's argmax) is the trained policy's greedy choice.

Service rows come from :class:`ServiceRowCache` (computed from a snapshot off the request path, refreshed every
``refresh_s`` seconds of snapshot time, keyed by the graph's fingerprint), or from an embedding-cache copy (an
:class:`policy.cache.EmbeddingEntry`) when it was made by the same encoder the bundle was trained with.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from policy.bundle import DEFAULT_BUNDLES, BundleError, PolicyBundle, located, require_bundle
from policy.cache import EmbeddingEntry, LoadTerm
from policy.encoder import DEFAULT_ENCODER_BUNDLE, NODE_SPEC, GraphEncoder
from policy.features import FeatureSpecError
from policy.index import ClusterIndex
from policy.state import ClusterSnapshot, PodInfo

from .features import (
    CONTEXT_FEATURES,
    CONTEXT_LAYOUTS,
    FLAT_ROWS_VERSION,
    SERVICE_INPUTS,
    featurize_candidates,
    node_cpu_used_m,
    placement_feature_spec,
)
from .interface import MAX_EXTENDER_PRIORITY, PlacementPolicy, admission_mask, resource_fit_failures
from .rows import ServiceRowCache, ServiceRows

__all__ = [
    "PLACEMENT_ARCH",
    "DEFAULT_PLACEMENT_BUNDLE",
    "DEFAULT_FLAT_PLACEMENT_BUNDLE",
    "EXTENDER_WEIGHT",
    "mlp_weight_shapes",
    "mlp_logits",
    "intent_adjustment",
    "scores_from_logits",
    "served_totals",
    "LogitScorer",
    "LearnedPlacement",
    "encoder_for",
    "load_learned_placement",
]


log = logging.getLogger(__name__)


PLACEMENT_ARCH = "placement-mlp-v1"


#: The extender's ``weight`` in ``KubeSchedulerConfiguration.extenders`` as shipped (manifests/).
EXTENDER_WEIGHT = 2


DEFAULT_PLACEMENT_BUNDLE = DEFAULT_BUNDLES / "hrl-scheduler" / "low"


DEFAULT_FLAT_PLACEMENT_BUNDLE = DEFAULT_BUNDLES / "hrl-no-encoder" / "low"


# ---- the network ---------------------------------------------------------------------------------------


def mlp_weight_shapes(features: int, hidden: int, layers: int = 2) -> dict[str, tuple[int, ...]]:
    """Every weight of ``placement-mlp-v1`` (torch ``nn.Sequential`` names: Linear at 0, 2, ..., Tanh between)."""
    s: dict[str, tuple[int, ...]] = {}
    d = features
    for i in range(layers):
        s[f"net.{2 * i}.weight"] = (hidden, d)
        s[f"net.{2 * i}.bias"] = (hidden,)
        d = hidden
    s[f"net.{2 * layers}.weight"] = (1, d)
    s[f"net.{2 * layers}.bias"] = (1,)
    return s


def mlp_logits(
    weights: Mapping[str, np.ndarray], x: np.ndarray, mean: np.ndarray, std: np.ndarray, layers: int = 2
) -> np.ndarray:
    """(C,) float32 pre-sigmoid outputs ``z`` of ``placement-mlp-v1`` for rows ``x`` (C, F); ``weights`` in torch
    layout (``weight`` is (out, in))."""
    h = (np.asarray(x, np.float32) - mean) / std
    for i in range(layers):
        h = np.tanh(h @ weights[f"net.{2 * i}.weight"].T + weights[f"net.{2 * i}.bias"])
    z = h @ weights[f"net.{2 * layers}.weight"].T + weights[f"net.{2 * layers}.bias"]
    return z.reshape(-1).astype(np.float32, copy=False)


_COL = {n: i for i, (n, _u) in enumerate(CONTEXT_FEATURES)}


#: CPU used fraction above which :func:`intent_adjustment` counts a node as overloaded (as TopologyHeuristic).
OVERLOAD_FROM = 0.7


def _cpu_overload(x: np.ndarray) -> np.ndarray:
    """(C,) ``clip((cpu_used_frac − 0.7) / 0.3, 0, 1)`` of float64 feature rows ``x`` (C, F): 0 up to 70 % CPU use
    with the pod added, 1 from 100 %; the overload both :func:`intent_adjustment` and :func:`saturation_factor`
    weigh."""
    return np.clip((x[:, _COL["cpu_used_frac"]] - OVERLOAD_FROM) / (1.0 - OVERLOAD_FROM), 0.0, 1.0)


def intent_adjustment(x: np.ndarray) -> np.ndarray:
    """(C,) float64 score adjustment per unit of intent gain, from feature rows ``x`` (C, F) alone:
    ``(locality_weight − 1) · ½(caller_node_share + callee_node_share)
    − max(balance_weight − 1, 0) · clip((cpu_used_frac − 0.7) / 0.3, 0, 1)``; 0 at the default intent.

    The overload term only ever penalizes: a balance weight below 1 means "care less about overload", never
    "prefer overloaded nodes" (the network, which reads the intent among its features, learns how much less),
    and the training reward weighs overload by the same intent (:mod:`policy.train.placement`)."""
    x = np.asarray(x, dtype=np.float64)
    loc = 0.5 * (x[:, _COL["caller_node_share"]] + x[:, _COL["callee_node_share"]])
    over = _cpu_overload(x)
    balance = np.maximum(x[:, _COL["intent_balance_weight"]] - 1.0, 0.0)
    return (x[:, _COL["intent_locality_weight"]] - 1.0) * loc - balance * over


def saturation_factor(x: np.ndarray) -> np.ndarray:
    """(C,) float64 in [0, 1] from feature rows ``x`` (C, F): ``1 − clip((cpu_used_frac − 0.7) / 0.3, 0, 1)``,
    1 up to 70 % CPU use with the pod added, falling linearly to 0 at 100 %.

    The saturation guard of bundles with ``architecture.saturation_guard: true`` multiplies the score by it:
    whatever the network prefers, a node the pod would push past 70 % of its cores loses that preference
    in proportion, and a full node gets 0. Why a fixed factor rather than a learned one: the network is
    trained on simulated clusters whose background load and mesh-proxy CPU are narrower than what it meets
    (a node at 104 % CPU still scored 7.7 of 10 for a co-located caller without it), while queueing makes
    the cost of saturation certain: a station's waiting time grows as 1/(1 − ρ) (Kleinrock, *Queueing
    Systems* vol. 1, M/M/1), far above the 0.05–2 ms a co-located call saves."""
    return 1.0 - _cpu_overload(np.asarray(x, dtype=np.float64))


def scores_from_logits(
    z: np.ndarray, x: np.ndarray | None = None, intent_gain: float = 0.0, saturation_guard: bool = False
) -> np.ndarray:
    """(C,) float64 scores in [0, 10]: ``10 · sigmoid(z)`` (numerically stable), plus ``intent_gain ·``
    :func:`intent_adjustment` ``(x)`` clipped to [0, 10] when ``x`` is given and the gain is not 0, times
    :func:`saturation_factor` ``(x)`` when ``saturation_guard`` (and ``x`` is given)."""
    z = np.asarray(z, dtype=np.float64)
    s = MAX_EXTENDER_PRIORITY * np.where(
        z >= 0, 1.0 / (1.0 + np.exp(-np.abs(z))), np.exp(-np.abs(z)) / (1.0 + np.exp(-np.abs(z)))
    )
    if x is not None and intent_gain:
        s = np.clip(s + intent_gain * intent_adjustment(x), 0.0, MAX_EXTENDER_PRIORITY)
    if x is not None and saturation_guard:
        s = s * saturation_factor(x)
    return s


def served_totals(in_tree_totals: np.ndarray, scores: np.ndarray, weight: int = EXTENDER_WEIGHT) -> np.ndarray:
    """kube-scheduler's final node totals: in-tree total + ``round_half_up(score)`` (clamped 0..10) × weight × 10
    (MaxNodeScore / MaxExtenderPriority), as :func:`extender.wire.build_host_priorities` and
    :class:`policy.sim.kube_scheduler.KubeSchedulerModel` compute them."""
    q = np.clip(np.floor(np.asarray(scores, dtype=np.float64) + 0.5), 0, MAX_EXTENDER_PRIORITY)
    return np.asarray(in_tree_totals, dtype=np.float64) + q * weight * 10


# ---- the policy ----------------------------------------------------------------------------------------


class LogitScorer:
    """What every learned placement shares once it has feature rows and logits (:meth:`rows_and_logits`, which a
    subclass provides): the hard filter, the scores (:func:`scores_from_logits` with the subclass's ``intent_gain``
    and ``saturation_guard``) and the kube-scheduler plugin's table parts (:meth:`load_term`, :meth:`score_parts`).
    :class:`LearnedPlacement` (one network) and :class:`policy.lowlevel.PlacementEnsemble` (the mean logit of
    several) are the two."""

    intent_gain: float
    saturation_guard: bool

    def rows_and_logits(
        self,
        pod: PodInfo,
        candidates: Sequence[str],
        index: ClusterIndex,
        intent: Sequence[float] | None = None,
        *,
        embeddings: Any = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(feature rows (C, F) whose context columns the output rules read, logits (C,))``."""
        raise NotImplementedError

    def filter(self, pod: PodInfo, candidates: Sequence[str], index: ClusterIndex) -> dict[str, str]:
        """The hard filter: :func:`policy.lowlevel.resource_fit_failures`."""
        return resource_fit_failures(pod, candidates, index)

    #: :meth:`filter` is exactly :func:`policy.lowlevel.resource_fit_failures` (:func:`~policy.lowlevel.admission_mask`
    #: as a mask): a caller that applied that mask already need not filter again.
    filter_is_admission = True

    def filter_mask(self, pod: PodInfo, positions: np.ndarray, index: ClusterIndex) -> np.ndarray:
        """:meth:`filter` as a mask over node positions (True: passes), vectorised
        (:func:`policy.lowlevel.admission_mask`)."""
        return admission_mask(pod, positions, index)

    def score(
        self,
        pod: PodInfo,
        candidates: Sequence[str],
        index: ClusterIndex,
        intent: Sequence[float] | None = None,
        *,
        embeddings: Any = None,
    ) -> np.ndarray:
        """(C,) float64 in [0, 10] for ``candidates`` (any list, the pod's current node included: the pod is
        then not counted twice). Raises ``ValueError`` when the pod's service has no service row (the extender
        answers neutral scores then)."""
        if not len(candidates):
            return np.zeros(0)
        x, z = self.rows_and_logits(pod, candidates, index, intent, embeddings=embeddings)
        return scores_from_logits(z, x, self.intent_gain, self.saturation_guard)

    # ---- the plugin's table (policy.lowlevel.scoretable): score = load_term applied to score_parts ----------
    #: the network reads the pod's requests: table rows per (service, requests)
    base_reads_requests = True

    def load_term(self, index: ClusterIndex) -> tuple[LoadTerm, np.ndarray]:
        """The saturation guard as the plugin's load term (``base · (1 − over)`` with the CPU fraction rounded to
        float32, as the feature is; weight 0 in :meth:`score_parts` without the guard), and each node's CPU in use
        before the pod as ``cpu_used_frac`` counts it (:func:`~policy.lowlevel.features.node_cpu_used_m`)."""
        term = LoadTerm(scale=1.0, from_frac=OVERLOAD_FROM, cap=float(MAX_EXTENDER_PRIORITY), frac_float32=True)
        return term, node_cpu_used_m(index)

    def score_parts(
        self,
        pod: PodInfo,
        candidates: Sequence[str],
        index: ClusterIndex,
        intent: Sequence[float] | None = None,
        *,
        embeddings: Any = None,
    ) -> tuple[np.ndarray, float]:
        """``(the score before the saturation guard (C,), 1 with the guard else 0)``: :meth:`score` is
        :func:`policy.lowlevel.apply_load_term` of these with :meth:`load_term`, bit for bit, for an unbound pod.
        Raises like :meth:`score`."""
        if not len(candidates):
            return np.zeros(0), 1.0 if self.saturation_guard else 0.0
        x, z = self.rows_and_logits(pod, candidates, index, intent, embeddings=embeddings)
        base = scores_from_logits(z, x, self.intent_gain, saturation_guard=False)
        return base, 1.0 if self.saturation_guard else 0.0


class LearnedPlacement(LogitScorer):
    """The learned placement policy, a :class:`policy.lowlevel.PlacementPolicy`, built from a ``level: low``
    bundle of architecture ``placement-mlp-v1``.

    ``encoder``: the :class:`policy.encoder.mpnn.GraphEncoder` for ``service_input: encoder`` bundles (default:
    ``find_encoder(architecture.encoder_version)`` when given, called once the bundle itself has been checked,
    else the committed encoder; checked against the bundle's ``architecture.encoder_version``); ``refresh_s``: service
    rows are recomputed when older than this (snapshot time). ``embedding_source``: a callable returning an
    embedding-cache copy (``EmbeddingEntry`` or ``None``) to prefer over in-process rows when its
    ``encoder_version`` matches (the extender passes ``lambda: store.get().embeddings``).

    Raises :class:`policy.bundle.BundleError` (one line naming the bundle directory and the field) when the
    bundle is of another level or architecture, its feature spec differs from :func:`placement_feature_spec` of
    its service input, its dims disagree with its feature spec or arrays (checked before anything is sized by
    them), a weight is misshapen, an ``architecture`` field has the wrong type or range (``temperature``: a
    finite number > 0, default 20; ``intent_gain``: a finite number, default 0; ``extender_weight``: an integer
    >= 1, default :data:`EXTENDER_WEIGHT`; ``saturation_guard``: true or false, default false; ``encoder_version``:
    text or absent), ``normalization.candidate`` is
    not a mean/std pair of the input's width, or the encoder differs from the one it was trained with.
    """

    name = "learned"

    def __init__(
        self,
        bundle: PolicyBundle,
        *,
        encoder: Any = None,
        refresh_s: float = 300.0,
        embedding_source: Callable[[], Any] | None = None,
        find_encoder: Callable[[str], Any] | None = None,
    ):
        where = f"placement {bundle.where}"
        if bundle.level != "low":
            raise BundleError(f"{where}: level: expected 'low', found {bundle.level!r}")
        arch = dict(bundle.architecture)
        if arch.get("type") != PLACEMENT_ARCH:
            raise BundleError(f"{where}: architecture.type: expected {PLACEMENT_ARCH!r}, found {arch.get('type')!r}")
        si = arch.get("service_input")
        if si not in SERVICE_INPUTS:
            raise BundleError(
                f"{where}: architecture.service_input: expected one of {', '.join(SERVICE_INPUTS)}, found {si!r}"
            )
        d = bundle.dims
        try:
            self.hidden, self.layers, self.service_dim = d["hidden"], d["layers"], d["service_dim"]
        except KeyError as exc:
            raise BundleError(f"{where}: dims: missing {exc.args[0]!r}") from None
        found = bundle.feature_spec.get("candidate")
        if found is None:
            raise BundleError(f"{where}: feature_spec: expected input 'candidate', found {sorted(bundle.feature_spec)}")
        # bound every dim by what the manifest's own spec and arrays say before sizing anything by it; a bundle of
        # an earlier layout (without the last context columns) is served as it was trained
        self.context = next((c for c in CONTEXT_LAYOUTS if c[-1][0] in found.names), CONTEXT_LAYOUTS[-1])
        n_context = len(self.context)
        if n_context + self.service_dim != len(found):
            raise BundleError(
                f"{where}: dims.service_dim: expected {len(found) - n_context} "
                f"(feature_spec.candidate has {len(found)} columns, {n_context} of them "
                f"context), found {self.service_dim}"
            )
        if "features" in d and d["features"] != len(found):
            raise BundleError(
                f"{where}: dims.features: expected {len(found)} (the columns of "
                f"feature_spec.candidate), found {d['features']}"
            )
        if self.hidden < 1:
            raise BundleError(f"{where}: dims.hidden: expected an integer >= 1, found {self.hidden}")
        if 2 * self.layers + 2 > len(bundle.weights):
            raise BundleError(
                f"{where}: dims.layers: {self.layers} hidden layers need {2 * self.layers + 2} "
                f"arrays, the bundle has {len(bundle.weights)}"
            )
        if si == "flat" and self.service_dim != len(NODE_SPEC):
            raise BundleError(
                f"{where}: architecture.service_input: 'flat' rows have {len(NODE_SPEC)} columns "
                f"(policy.encoder.graph.NODE_SPEC), but dims.service_dim is {self.service_dim}"
            )
        try:
            spec = placement_feature_spec(si, self.service_dim, self.context)
            spec.check(found, "feature_spec.candidate")
        except (FeatureSpecError, ValueError) as exc:
            raise BundleError(f"{where}: {exc}") from None
        self.spec = spec
        shapes = mlp_weight_shapes(len(spec), self.hidden, self.layers)
        self.weights: dict[str, np.ndarray] = {}
        for k, shape in shapes.items():
            a = bundle.array(k)
            if a.shape != shape:
                raise BundleError(f"{where}: weights[{k!r}]: expected shape {list(shape)}, found {list(a.shape)}")
            self.weights[k] = np.ascontiguousarray(a, dtype=np.float32)
        self.mean, self.std = bundle.norm("candidate", len(spec))
        self.service_input: str = si
        ev = arch.get("encoder_version")
        if ev is not None and not isinstance(ev, str):
            raise BundleError(f"{where}: architecture.encoder_version: expected text, found {ev!r}")
        self.rows_version = str(ev or (FLAT_ROWS_VERSION if si == "flat" else ""))
        self.temperature = _arch_number(arch, "temperature", 20.0, where, minimum=0.0, strict=True)
        self.intent_gain = _arch_number(arch, "intent_gain", 0.0, where)
        guard = arch.get("saturation_guard", False)
        if not isinstance(guard, bool):
            raise BundleError(f"{where}: architecture.saturation_guard: expected true or false, found {guard!r}")
        self.saturation_guard: bool = guard
        self.extender_weight = int(
            _arch_number(arch, "extender_weight", EXTENDER_WEIGHT, where, minimum=1, integer=True)
        )
        if si == "encoder":
            if encoder is None and find_encoder is not None:  # looked up only once the bundle itself is sound
                encoder = find_encoder(self.rows_version)
            if encoder is None:
                encoder = GraphEncoder.load()
            enc_src = getattr(getattr(encoder, "bundle", None), "source", "") or "given"
            if self.rows_version and encoder.version != self.rows_version:
                raise BundleError(
                    f"{where}: architecture.encoder_version: expected {self.rows_version!r} (trained "
                    f"with it), found encoder {encoder.version!r} ({enc_src})"
                )
            if encoder.embedding_dim != self.service_dim:
                raise BundleError(
                    f"{where}: dims.service_dim: expected the encoder's {encoder.embedding_dim} "
                    f"({enc_src}), found {self.service_dim}"
                )
        self.encoder = encoder
        self.rows = ServiceRowCache(si, encoder, refresh_s)
        self.embedding_source = embedding_source
        #: True when a :class:`RowsRefresher` keeps the rows fresh: requests then use the cached rows however
        #: old and compute only when there are none for the graph (the first request after a change of structure)
        self.background_rows = False
        self.bundle = bundle
        self.version = bundle.policy_version

    @staticmethod
    def load(
        path: str | Path = DEFAULT_PLACEMENT_BUNDLE,
        *,
        encoder: Any = None,
        refresh_s: float = 300.0,
        embedding_source: Callable[[], Any] | None = None,
    ) -> LearnedPlacement:
        """Load the bundle at ``path`` (default: the committed ``policy/bundles/hrl-scheduler/low``). The encoder
        (``encoder`` unless given) is the one the bundle was trained with (:func:`encoder_for`: the same bundles
        root's ``<path>/../../encoder``, as ``make train`` writes it, when it loads and matches, else the committed
        ``policy/bundles/encoder``). Everything is checked here, before serving: raises
        :class:`policy.bundle.BundleError`, one line naming the bundle directory (or the encoder's) and the field."""
        b = PolicyBundle.load(path, level="low", architecture_type=PLACEMENT_ARCH)
        try:
            return LearnedPlacement(
                b,
                encoder=encoder,
                refresh_s=refresh_s,
                embedding_source=embedding_source,
                find_encoder=lambda version: encoder_for(Path(path), version),
            )
        except BundleError as exc:
            raise located(exc, path) from None

    def with_embeddings(self, embedding_source: Callable[[], Any] | None) -> LearnedPlacement:
        """A copy sharing the weights and encoder, reading embeddings from ``embedding_source``."""
        return LearnedPlacement(
            self.bundle, encoder=self.encoder, refresh_s=self.rows.refresh_s, embedding_source=embedding_source
        )

    # ---- service rows ----------------------------------------------------------------------------------
    def service_rows(self, index: ClusterIndex, service: str | None = None) -> ServiceRows:
        """The rows to read ``service``'s block from: the embedding source's copy when it has ``service`` and
        was made by this bundle's encoder, else :attr:`rows` for ``index.snapshot``."""
        if self.embedding_source is not None and self.service_input == "encoder":
            try:
                e = self.embedding_source()
            except Exception:  # noqa: BLE001 - a broken source falls back to in-process rows
                e = None
            if (
                e is not None
                and getattr(e, "encoder_version", "") == self.rows_version
                and (service is None or e.row(service) is not None)
            ):
                return e
        if self.background_rows:
            cached = self.rows.peek(index.snapshot)
            if cached is not None:
                return cached
        return self.rows.get(index.snapshot)

    def refresh(self, snapshot: ClusterSnapshot) -> EmbeddingEntry:
        """Compute (if due) and cache the service rows of ``snapshot`` (off the request path)."""
        return self.rows.get(snapshot)

    # ---- PlacementPolicy (LogitScorer: filter, score, the plugin's table) -----------------------------
    def features(
        self,
        pod: PodInfo,
        candidates: Sequence[str],
        index: ClusterIndex,
        intent: Sequence[float] | None = None,
        *,
        embeddings: Any = None,
    ) -> np.ndarray:
        """(C, F) float32 rows of :attr:`spec` (``embeddings``: as :func:`featurize_candidates`; default
        :meth:`service_rows`). Raises ``ValueError`` when the service has no row or the row's width differs."""
        rows = embeddings if embeddings is not None else self.service_rows(index, pod.service)
        x = featurize_candidates(pod, candidates, index, rows, intent)
        if len(self.context) < len(CONTEXT_FEATURES):  # a bundle of an earlier layout: its rows lack the last columns
            x = np.delete(x, np.arange(len(self.context), len(CONTEXT_FEATURES)), axis=1)
        if x.shape[1] != len(self.spec):
            raise ValueError(
                f"features: service row of width {x.shape[1] - len(CONTEXT_FEATURES)}, the bundle "
                f"expects {self.service_dim}"
            )
        return x

    def logits(self, x: np.ndarray) -> np.ndarray:
        """(C,) float32 pre-sigmoid outputs for feature rows ``x`` (C, F)."""
        return mlp_logits(self.weights, x, self.mean, self.std, self.layers)

    def rows_and_logits(
        self,
        pod: PodInfo,
        candidates: Sequence[str],
        index: ClusterIndex,
        intent: Sequence[float] | None = None,
        *,
        embeddings: Any = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(feature rows (C, F), logits (C,))`` of :meth:`features` and :meth:`logits`."""
        x = self.features(pod, candidates, index, intent, embeddings=embeddings)
        return x, self.logits(x)


def encoder_for(bundle_path: Path, version: str = "") -> Any:
    """The :class:`policy.encoder.mpnn.GraphEncoder` a placement bundle at ``bundle_path`` reads embeddings of, looked
    up in this order: ``<bundle_path>/../../encoder`` (the same bundles root, as ``make train`` lays bundles
    out), then the committed ``policy/bundles/encoder``; the first that loads and whose ``policy_version`` is
    ``version`` (any loadable one when ``version`` is empty). A candidate that is absent, does not load or does
    not match is skipped. Raises :class:`policy.bundle.BundleError` naming every encoder path tried and why it
    was not used when none fits."""
    candidates: list[Path] = []
    for c in (Path(bundle_path).resolve().parent.parent / "encoder", Path(DEFAULT_ENCODER_BUNDLE).resolve()):
        if c not in candidates:
            candidates.append(c)
    tried = []
    for c in candidates:
        if not (c / "manifest.json").exists():
            tried.append(f"{c}: absent")
            continue
        try:
            enc = GraphEncoder.load(c)
        except BundleError as exc:
            tried.append(str(located(exc, c)))
            continue
        if not version or enc.version == version:
            return enc
        tried.append(f"{c}: policy_version {enc.version!r}")
    want = f"the encoder {version!r} it was trained with (architecture.encoder_version)" if version else "an encoder"
    raise BundleError(
        f"placement bundle {bundle_path}: no usable encoder bundle: expected {want}; tried {'; '.join(tried)}"
    )


def _arch_number(
    arch: Mapping[str, Any],
    key: str,
    default: float,
    where: str,
    *,
    minimum: float | None = None,
    strict: bool = False,
    integer: bool = False,
) -> float:
    """``architecture[key]`` (``default`` when absent) as a finite number (an integer when ``integer``) >=
    ``minimum`` (> when ``strict``); raises :class:`BundleError` naming the field otherwise (null included)."""
    if key not in arch:
        return float(default)
    v = arch[key]
    ok = (isinstance(v, int) if integer else isinstance(v, (int, float))) and not isinstance(v, bool)
    if ok and -1e300 < v < 1e300 and (minimum is None or (v > minimum if strict else v >= minimum)):
        return float(v)
    kind = "an integer" if integer else "a finite number"
    bound = "" if minimum is None else f" {'>' if strict else '>='} {minimum:g}"
    raise BundleError(f"{where}: architecture.{key}: expected {kind}{bound} (or absent: {default:g}), found {v!r}")


def load_learned_placement(path: str | Path) -> PlacementPolicy:
    """The learned low-level policy (``policy.lowlevel.LearnedPlacement.load(path)``) from bundle directory
    ``path`` (an ensemble directory: :func:`policy.lowlevel.load_placement`). Raises :class:`BundleMissing` when
    there is no bundle there, and whatever the loader raises (:class:`policy.bundle.BundleError`) for a bad
    bundle."""
    p = Path(path)
    hint = ""
    if not (p / "manifest.json").is_file() and (p / "low" / "manifest.json").is_file():
        hint = f"{p} holds a stack's bundles, not a bundle: name its low/ directory, {p / 'low'}"
    p = require_bundle(p, "low-level placement", hint)
    return LearnedPlacement.load(p)
