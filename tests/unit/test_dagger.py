"""The high level's DAgger pieces: the imitation fit moves the served network's intent to the oracle's labels, a
labelled episode gives one label per period with the learner's observation, and the served policy falls back to the
tuned constant outside the states it was trained on."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from policy.highlevel import (  # noqa: E402
    INTENT_GLOBAL_SPEC,
    INTENT_SERVICE_SPEC_FLAT,
    Intent,
    IntentActor,
    IntentObservation,
    LearnedIntent,
    intent_from_outputs,
)
from policy.train.dagger import (  # noqa: E402
    FIT_LOSSES,
    DaggerConfig,
    FitOptions,
    Label,
    fit,
    global_reach,
    label_episode,
    load_labels,
    save_labels,
    service_reach,
    train_dagger,
)
from policy.train.finetune import RunOptions  # noqa: E402
from policy.train.intent_episodes import sample_episode_specs  # noqa: E402
from policy.train.intent_net import IntentNet, export_intent  # noqa: E402

Fs, Fg = len(INTENT_SERVICE_SPEC_FLAT), len(INTENT_GLOBAL_SPEC)


def labels(n: int, rng: np.random.Generator) -> list[Label]:
    """States whose first global feature says which capacity target is right (0.4 below 0, 0.8 above)."""
    out = []
    for _ in range(n):
        k = int(rng.integers(2, 6))
        g = rng.normal(size=Fg).astype(np.float32)
        cap = np.full(k, 0.8 if g[0] > 0 else 0.4, np.float32)
        out.append(
            Label(
                rng.normal(size=(k, Fs)).astype(np.float32),
                g,
                cap,
                np.ones(k, np.float32),
                np.array([1.0, 1.0, 0.0], np.float32),
                1.0,
            )
        )
    return out


def served_capacity(net: IntentNet, x: Label) -> float:
    actor = IntentActor(export_intent(net, None, flat=True, policy_version="t", metadata={}))
    services = [f"s{i}" for i in range(len(x.service))]
    it = intent_from_outputs(services, *actor(x.service, x.global_))
    return float(np.mean(list(it.capacity_target.values())))


def test_the_fit_makes_the_served_network_follow_a_state_dependent_label():
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    train, test = labels(200, rng), labels(60, rng)
    net = IntentNet(Fs, Fg, hidden=32)
    high = [x for x in test if x.global_[0] > 0.5]
    low = [x for x in test if x.global_[0] < -0.5]

    def gap() -> float:
        return float(np.mean([served_capacity(net, x) for x in high]) - np.mean([served_capacity(net, x) for x in low]))

    assert abs(gap()) < 0.05  # the untrained network ignores the state
    fit(net, train, epochs=300, lr=1e-2)
    assert gap() > 0.25  # labels 0.8 vs 0.4: the served intent now follows the state


def test_the_fallback_takes_the_tuned_constant_beyond_the_training_reach():
    rng = np.random.default_rng(1)
    train = labels(50, rng)
    net = IntentNet(Fs, Fg, hidden=8)
    g = np.stack([x.global_ for x in train])
    net.set_normalization(np.zeros(Fs), np.ones(Fs), g.mean(0), g.std(0) + 1e-3)
    reach = global_reach(net, train)
    meta = {"fallback": {"global_z_max": reach, "capacity_target": 0.65, "move_budget_frac": 0.0}}
    actor = IntentActor(export_intent(net, None, flat=True, policy_version="t", metadata=meta))
    policy = LearnedIntent.__new__(LearnedIntent)
    policy.actor, policy.fallbacks = actor, 0
    inside = IntentObservation(("a/x",), ("x",), train[0].service[:1], train[0].global_)
    outside = IntentObservation(("a/x",), ("x",), train[0].service[:1], g.mean(0) + 10 * reach * g.std(0))
    assert policy.fallback_intent(inside) is None
    fb = policy.fallback_intent(outside)
    assert fb is not None and fb.capacity_target == {"x": 0.65} and fb.move_budget_frac == 0.0


def test_a_labelled_episode_has_one_label_per_period_with_the_learners_observation():
    cfg = DaggerConfig(
        episode_minutes=10,
        n_samples=80,
        synthetic_share=0.0,
        scenario_share=0.0,
        horizon_min=3,
        capacity_targets=(0.6, 0.8),
        coordinate_services=0,
        flat=True,
        workers=1,
        hidden=8,
    )
    spec = sample_episode_specs(cfg, np.random.default_rng(3), 1, seed0=5)[0]
    net = IntentNet(Fs, Fg, hidden=8)
    ep = label_episode(spec, net.actor_arrays(), net.normalization(), 1.0, cfg)
    assert len(ep.labels) == 2  # decisions at minutes 0 and 5
    for x in ep.labels:
        assert x.service.shape[1] == Fs and x.global_.shape == (Fg,)
        assert ep.learned_best > 0 or all(np.isclose(c, 0.6) or np.isclose(c, 0.8) for c in x.capacity)
        assert x.weight >= 0
    assert np.isfinite(ep.objective) and ep.cpu_s > 0
    for x in ep.labels:  # every candidate the oracle rolled out, with its regret against the best
        c_cap, c_col, c_glob, regret = x.candidates
        k = len(regret)
        assert k >= 2 and c_cap.shape == (k, len(x.service)) and c_col.shape == c_cap.shape and c_glob.shape == (k, 3)
        assert regret.min() == 0.0 and (regret >= 0).all()
        best = int(np.argmin(regret))
        assert np.allclose(c_cap[best], x.capacity)


def ambiguous(n: int, rng: np.random.Generator) -> list[Label]:
    """States that do not tell the lean intent (0.9) from the safe one (0.5): in half of them the lean one is best
    and the safe one costs 1 more; in the other half the safe one is best and the lean one costs 10 more (the same
    observation in every one)."""
    out = []
    k = 3
    g = rng.normal(size=Fg).astype(np.float32)
    rows = rng.normal(size=(k, Fs)).astype(np.float32)
    for i in range(n):
        lean_best = i % 2 == 0
        best = 0.9 if lean_best else 0.5
        cands = (
            np.array([[0.5] * k, [0.9] * k], np.float32),
            np.ones((2, k), np.float32),
            np.array([[1.0, 1.0, 0.0]] * 2, np.float32),
            np.array([1.0, 0.0] if lean_best else [0.0, 10.0], np.float32),
        )
        out.append(
            Label(
                rows,
                g,
                np.full(k, best, np.float32),
                np.ones(k, np.float32),
                np.array([1.0, 1.0, 0.0], np.float32),
                1.0,  # equal stakes: the imitation fit weighs them alike
                cands,
            )
        )
    return out


def test_the_cost_fit_takes_the_candidate_whose_mistakes_cost_least_where_imitation_averages():
    rng = np.random.default_rng(4)
    data = ambiguous(80, rng)
    caps = {}
    for loss in FIT_LOSSES:
        torch.manual_seed(0)
        net = IntentNet(Fs, Fg, hidden=16)
        fit(net, data, 300, 1e-2, FitOptions(loss=loss, imitation_weight=0.0 if loss == "cost" else 0.1))
        caps[loss] = float(np.mean([served_capacity(net, x) for x in data]))
    assert 0.6 < caps["imitation"] < 0.8  # the mean of the best candidates: neither
    assert caps["cost"] < 0.56  # the safe intent: its mistakes cost 1, the lean one's 10


def test_the_fit_refuses_an_unknown_loss():
    with pytest.raises(ValueError, match="loss: expected one of cost, imitation, got 'ranking'"):
        fit(IntentNet(Fs, Fg, hidden=4), ambiguous(2, np.random.default_rng(0)), 1, 1e-3, FitOptions(loss="ranking"))
    with pytest.raises(ValueError, match="loss: expected one of"):
        DaggerConfig(loss="ranking")
    with pytest.raises(ValueError, match="fallback_quantile: expected a finite number in \\(0, 1\\], got 0"):
        DaggerConfig(fallback_quantile=0)


def test_the_label_archive_gives_back_every_label_and_its_candidates(tmp_path):
    rng = np.random.default_rng(5)
    data = ambiguous(5, rng) + labels(3, rng)  # with and without candidates
    save_labels(tmp_path / "labels.npz", data)
    back = load_labels(tmp_path / "labels.npz")
    assert len(back) == len(data)
    for a, b in zip(data, back):
        for f in ("service", "global_", "capacity", "colocation", "global_target"):
            assert np.array_equal(getattr(a, f), getattr(b, f))
        assert a.weight == b.weight
        assert (a.candidates is None) == (b.candidates is None)
        if a.candidates is not None:
            assert all(np.array_equal(x, y) for x, y in zip(a.candidates, b.candidates))
    z = dict(np.load(tmp_path / "labels.npz"))
    z["cand_regret"] = z["cand_regret"][:-1]
    np.savez(tmp_path / "bad.npz", **z)
    with pytest.raises(ValueError, match="bad.npz: the label archive's arrays do not add up"):
        load_labels(tmp_path / "bad.npz")


def test_a_service_whose_row_lies_outside_the_training_states_gets_the_constant_alone():
    rng = np.random.default_rng(6)
    train = labels(50, rng)
    net = IntentNet(Fs, Fg, hidden=8)
    s = np.concatenate([x.service for x in train])
    g = np.stack([x.global_ for x in train])
    net.set_normalization(s.mean(0), s.std(0) + 1e-3, g.mean(0), g.std(0) + 1e-3)
    s_reach, g_reach = service_reach(net, train, 0.99), global_reach(net, train, 0.99)
    assert s_reach <= service_reach(net, train) and g_reach <= global_reach(net, train)
    meta = {"fallback": {"global_z_max": 1e9, "service_z_max": s_reach, "capacity_target": 0.65}}
    actor = IntentActor(export_intent(net, None, flat=True, policy_version="t", metadata=meta))
    policy = LearnedIntent.__new__(LearnedIntent)
    policy.actor, policy.fallbacks, policy.service_fallbacks = actor, 0, 0
    rows = np.stack([s.mean(0), s.mean(0) + 10 * s_reach * s.std(0)]).astype(np.float32)
    obs = IntentObservation(("a/x", "a/y"), ("x", "y"), rows, g.mean(0).astype(np.float32))
    served = intent_from_outputs(obs.services, *actor(obs.service, obs.global_))
    out = policy.service_fallback(obs, served)
    assert out.capacity_target["y"] == 0.65 and out.colocation_priority["y"] == 1.0
    assert out.capacity_target["x"] == served.capacity_target["x"]  # in the training states: the network's own
    assert out.values == served.values and policy.service_fallbacks == 1
    assert policy.fallback_intent(obs) is None  # the global row is inside: no whole-intent fallback
    old = {"fallback": {"global_z_max": 1e9, "capacity_target": 0.65}}  # a bundle without the per-service threshold
    policy.actor = IntentActor(export_intent(net, None, flat=True, policy_version="t", metadata=old))
    assert policy.service_fallback(obs, served) is served


def _learned_intent(meta: dict) -> tuple[LearnedIntent, IntentNet]:
    """A LearnedIntent serving an untrained network exported with the bundle metadata ``meta``, and the network."""
    net = IntentNet(Fs, Fg, hidden=8)
    policy = LearnedIntent.__new__(LearnedIntent)
    policy.actor = IntentActor(export_intent(net, None, flat=True, policy_version="t", metadata=meta))
    return policy, net


def test_the_lean_margin_caps_capacity_targets_above_the_constant_and_leaves_more_headroom_alone():
    meta = {"fallback": {"global_z_max": 1e9, "capacity_target": 0.6, "lean_margin": 0.05}}
    policy, net = _learned_intent(meta)
    policy.lean_capped = 0
    asked = Intent((1.0, 1.0), capacity_target={"a": 0.9, "b": 0.62, "c": 0.4}, move_budget_frac=0.2)
    out = policy.lean_cap(asked)
    assert out.capacity_target == {"a": 0.65, "b": 0.62, "c": 0.4}  # only the leaner-than-allowed one is lowered
    assert out.values == asked.values and out.move_budget_frac == 0.2 and policy.lean_capped == 1
    assert policy.lean_cap(out) is out and policy.lean_capped == 1  # nothing above the cap: unchanged, not counted
    del meta["fallback"]["lean_margin"]  # a bundle without a margin: the network's own targets
    policy.actor = IntentActor(export_intent(net, None, flat=True, policy_version="t", metadata=meta))
    assert policy.lean_cap(asked) is asked


def test_services_without_room_to_burst_are_not_run_leaner_than_the_constant_plus_the_no_burst_margin():
    meta = {"fallback": {"global_z_max": 1e9, "capacity_target": 0.6, "no_burst_lean_margin": 0.05}}
    policy, net = _learned_intent(meta)
    policy.no_burst_capped = 0
    room = INTENT_SERVICE_SPEC_FLAT.index("capacity_over_request")
    rows = np.zeros((3, Fs), np.float32)
    rows[:, room] = [0.1, 0.1, 0.2]  # limit = request (Guaranteed), twice: no room; the limit twice the request: room
    obs = IntentObservation(("n/g1", "n/g2", "n/b"), ("g1", "g2", "b"), rows, np.zeros(Fg, np.float32))
    asked = Intent((1.0, 1.0), capacity_target={"g1": 0.9, "g2": 0.5, "b": 0.9}, move_budget_frac=0.0)
    out = policy.no_burst_cap(obs, asked)
    # the Guaranteed service asked leaner than 0.65 is lowered; more headroom and a Burstable service are left alone
    assert out.capacity_target == {"g1": 0.65, "g2": 0.5, "b": 0.9} and policy.no_burst_capped == 1
    assert out.values == asked.values
    assert policy.no_burst_cap(obs, out) is out and policy.no_burst_capped == 1
    del meta["fallback"]["no_burst_lean_margin"]  # a bundle without the margin: the network's own targets
    policy.actor = IntentActor(export_intent(net, None, flat=True, policy_version="t", metadata=meta))
    assert policy.no_burst_cap(obs, asked) is asked


def test_a_refit_from_archived_labels_rolls_out_nothing_and_names_its_archives(tmp_path):
    data = ambiguous(12, np.random.default_rng(7))
    save_labels(tmp_path / "labels.npz", data)
    cfg = DaggerConfig(flat=True, hidden=8, epochs=5, iterations=2, eval_episodes=0, workers=1, quick=True)
    constant = {"capacity_target": 0.6, "move_budget_frac": 0.0, "objective": 1.0}
    net, report = train_dagger(
        cfg,
        tmp_path / "out",
        tmp_path / "run",
        constant=constant,
        opts=RunOptions(labels_from=(tmp_path / "labels.npz",)),
    )
    [row] = report["rows"]  # one fit, no labelled episode
    assert row["episodes"] == 0 and row["labels"] == 12
    meta = json.loads((tmp_path / "out" / "intent" / "manifest.json").read_text())["metadata"]
    assert meta["labels_from"] == [str(tmp_path / "labels.npz")] and meta["labels"] == 12
    assert meta["loss"] == "cost" and meta["fallback"]["capacity_target"] == 0.6
    assert len(load_labels(tmp_path / "run" / "labels.npz")) == 12  # the labels it was fit on, archived again
    save_labels(tmp_path / "empty.npz", [])
    with pytest.raises(ValueError, match="labels: no label in"):
        train_dagger(cfg, None, tmp_path / "run2", opts=RunOptions(labels_from=(tmp_path / "empty.npz",)))
