"""`make train` orchestration (policy/train/pipeline.py, ``hrl-policy train --all``) with stand-in trainers: the
stages in order, their wall time, the bundles of every stack, and the report; training on your own app
(``--app DIR [--scenario NAME]``): every stage draws its episodes from that app only, in that scenario, and the
bundles go elsewhere than the committed ones."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from policy.cli.core import build_parser, main
from policy.sim.app import builtin_apps_dir
from policy.train import constant, dagger, drpc
from policy.train import pipeline as ta
from policy.train.dagger import DaggerConfig
from policy.train.drpc import _config_for
from policy.train.episodes import TrainingTarget
from policy.train.intent_episodes import episode_pieces, sample_episode_specs
from policy.train.placement import PlacementTrainConfig, sample_instance


def fake_bundle(d: Path, tag: str) -> str:
    d.mkdir(parents=True, exist_ok=True)
    (d / "manifest.json").write_text(json.dumps({"tag": tag}))
    return str(d)


def stand_ins(order: list[str], fail: str | None = None):
    """Trainers that record the order they ran in and write fake bundles where the real stages would."""

    def encoder(root, *, quick, seed, log):
        order.append(f"encoder quick={quick} seed={seed}")
        return [fake_bundle(root / "encoder", "enc")]

    def drpc(root, *, quick, seed, log):
        order.append("drpc")
        assert (root / "encoder" / "manifest.json").is_file()  # reads what the encoder stage wrote
        if fail == "drpc":
            raise RuntimeError("TD3 diverged\nat step 3")
        for s in ("drpc", "hrl-scheduler/high", "hrl-no-encoder/high", "hrl-flat/high"):
            fake_bundle(root / s / "predictor", f"{s}-predictor")
            fake_bundle(root / s / "student", f"{s}-student")
        return [str(root / s) for s in ("drpc", "hrl-scheduler/high", "hrl-no-encoder/high", "hrl-flat/high")]

    def placement(root, *, quick, seed, log):
        order.append("placement")
        return [fake_bundle(root / s / "low", f"{s}-low") for s in ("hrl-scheduler", "hrl-no-encoder", "hrl-flat")]

    def constant(root, *, quick, seed, log):
        order.append("constant")
        assert (root / "hrl-scheduler" / "low" / "manifest.json").is_file()  # searched over the fresh low level
        (root / "hrl-scheduler" / "high" / "constant.json").write_text('{"capacity_target": 0.8}')
        return [str(root / "hrl-scheduler" / "high")]

    def dagger(root, *, quick, seed, log):
        order.append("dagger")
        assert (root / "hrl-scheduler" / "low" / "manifest.json").is_file()  # trains over the fresh low level
        assert (root / "hrl-scheduler" / "high" / "constant.json").is_file()  # with the fresh constant
        for s in ("hrl-scheduler", "hrl-no-encoder"):
            fake_bundle(root / s / "high" / "intent", f"{s}-intent")
        return [str(root / s / "high") for s in ("hrl-scheduler", "hrl-no-encoder")]

    return {"encoder": encoder, "drpc": drpc, "placement": placement, "constant": constant, "dagger": dagger}


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        self.t += 1.5
        return self.t


def test_every_stage_runs_in_order_and_every_stack_gets_its_bundles(tmp_path):
    order: list[str] = []
    report = ta.run_all(tmp_path, quick=True, seed=7, trainers=stand_ins(order), log=lambda m: None, clock=Clock())
    assert order == ["encoder quick=True seed=7", "drpc", "placement", "constant", "dagger"]
    assert report.ok and report.missing == {}
    assert [(s.name, s.status, s.wall_s) for s in report.stages] == [
        ("encoder", "ok", 1.5),
        ("drpc", "ok", 1.5),
        ("placement", "ok", 1.5),
        ("constant", "ok", 1.5),
        ("dagger", "ok", 1.5),
    ]
    assert sorted(report.assembled) == ["hrl-no-autoscale/low", "hrl-no-rebalance/high", "hrl-no-rebalance/low"]
    copied = json.loads((tmp_path / "hrl-no-rebalance" / "high" / "student" / "manifest.json").read_text())
    assert copied == {"tag": "hrl-scheduler/high-student"}  # the ablations run hrl-scheduler's trained policies


def test_a_failing_stage_stops_the_pipeline_and_the_report_says_where(tmp_path):
    order: list[str] = []
    report = ta.run_all(tmp_path, trainers=stand_ins(order, fail="drpc"), log=lambda m: None)
    assert order == ["encoder quick=False seed=0", "drpc"]
    assert [(s.name, s.status) for s in report.stages] == [
        ("encoder", "ok"),
        ("drpc", "failed"),
        ("placement", "not_run"),
        ("constant", "not_run"),
        ("dagger", "not_run"),
    ]
    assert report.stages[1].error == "RuntimeError: TD3 diverged at step 3" and not report.ok
    assert set(report.missing) == set(ta.REQUIRED_BUNDLES)  # nothing of the learned stacks exists
    assert report.missing["hrl-scheduler"] == [
        str(tmp_path / "hrl-scheduler" / "low"),
        str(tmp_path / "hrl-scheduler" / "high"),
    ]


def test_a_stage_whose_module_is_missing_is_a_clear_failure(tmp_path):
    stage = ta.Stage("drpc", "policy.no_such_module:train_stage", "x")
    with pytest.raises(ValueError, match="stage drpc: cannot import policy.no_such_module"):
        ta.resolve(stage)
    with pytest.raises(ValueError, match="unknown"):
        ta.run_all(tmp_path, stages=["encoder", "magic"])
    assert [s.name for s in ta.STAGES] == ["encoder", "drpc", "placement", "constant", "dagger"]
    assert ta.resolve(ta.STAGES[0]) is ta.encoder_stage


def test_a_subset_of_stages_runs_in_the_fixed_order(tmp_path):
    order: list[str] = []
    report = ta.run_all(tmp_path, stages=["placement", "encoder"], trainers=stand_ins(order), log=lambda m: None)
    assert order[0].startswith("encoder") and order[1:] == ["placement"]
    assert [s.name for s in report.stages] == ["encoder", "placement"]


def test_the_report_files_and_the_markdown_section(tmp_path):
    report = ta.run_all(tmp_path / "b", trainers=stand_ins([]), log=lambda m: None, clock=Clock())
    j, c = ta.write_reports(report, tmp_path / "r")
    doc = json.loads(j.read_text())
    assert doc["ok"] and [s["stage"] for s in doc["stages"]] == ["encoder", "drpc", "placement", "constant", "dagger"]
    assert doc["stages"][0]["wall_s"] == 1.5 and doc["total_wall_s"] > 0
    rows = c.read_text().splitlines()
    assert rows[0] == "stage,status,wall_s,bundles" and rows[1].startswith("encoder,ok,1.500,")
    md = ta.markdown(report)
    assert md.startswith("## Training") and "| encoder " in md and "| total " in md and "wall s" in md


def test_the_command_line_nests_train_all_next_to_the_stage_commands(tmp_path, monkeypatch, capsys):
    p = build_parser()
    assert p.parse_args(["train", "encoder", "--quick"])._name == "train encoder"
    assert p.parse_args(["train", "--all"])._name == "train"
    assert main(["train"]) == 2 and "give --all" in capsys.readouterr().err
    order: list[str] = []
    monkeypatch.setattr(ta, "resolve", lambda stage: stand_ins(order)[stage.name])
    rc = main(["train", "--all", "--quick", "--out", str(tmp_path / "bundles"), "--report", str(tmp_path / "rep")])
    assert rc == 0, capsys.readouterr().err
    assert len(order) == 5 and (tmp_path / "rep" / "training.json").is_file()
    assert (tmp_path / "bundles" / "hrl-no-autoscale" / "low" / "manifest.json").is_file()


def test_the_orchestrator_the_hierarchy_and_the_learned_stacks_load_no_torch():
    import subprocess
    import sys

    code = (
        "import sys, policy.train.pipeline, policy.highlevel, policy.sim.hrl_stacks, descheduler.scale; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


# ---- nothing half-written, quick runs elsewhere, versions that name the weights ---------------------------


def test_a_failing_stage_leaves_the_bundles_root_as_it_was(tmp_path):
    root = tmp_path / "bundles"
    fake_bundle(root / "encoder", "committed-encoder")
    fake_bundle(root / "hrl-scheduler" / "low", "committed-low")
    before = {p: p.read_text() for p in root.rglob("*") if p.is_file()}
    report = ta.run_all(root, trainers=stand_ins([], fail="drpc"), log=lambda m: None)
    assert [s.status for s in report.stages] == ["ok", "failed", "not_run", "not_run", "not_run"]
    # the encoder stage succeeded, but its new encoder must not sit next to placement bundles trained on the old one
    assert {p: p.read_text() for p in root.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundles"]  # the staging directory is gone


def test_stages_read_the_roots_earlier_bundles_and_only_their_own_directories_are_replaced(tmp_path):
    root = tmp_path / "bundles"
    fake_bundle(root / "encoder", "earlier-encoder")
    fake_bundle(root / "drpc" / "student", "earlier-drpc")
    seen = []

    def placement(r, *, quick, seed, log):
        seen.append(json.loads((r / "encoder" / "manifest.json").read_text())["tag"])
        return [fake_bundle(r / s / "low", f"new-{s}") for s in ("hrl-scheduler", "hrl-no-encoder", "hrl-flat")]

    report = ta.run_all(root, stages=["placement"], trainers={"placement": placement}, log=lambda m: None)
    assert seen == ["earlier-encoder"] and report.stages[0].status == "ok"
    assert report.stages[0].bundles == [str(root / s / "low") for s in ("hrl-scheduler", "hrl-no-encoder", "hrl-flat")]
    tag = lambda *p: json.loads(root.joinpath(*p, "manifest.json").read_text())["tag"]  # noqa: E731
    assert tag("hrl-flat", "low") == "new-hrl-flat" and tag("hrl-no-autoscale", "low") == "new-hrl-scheduler"
    assert tag("encoder") == "earlier-encoder" and tag("drpc", "student") == "earlier-drpc"


def test_a_quick_run_without_out_never_writes_the_committed_bundles(tmp_path, monkeypatch, capsys):
    committed, quick_root = tmp_path / "committed", tmp_path / "quick"
    fake_bundle(committed / "encoder", "committed")
    monkeypatch.setattr(ta, "DEFAULT_ROOT", committed)
    monkeypatch.setattr(ta, "QUICK_ROOT", quick_root, raising=False)
    monkeypatch.setattr(ta, "resolve", lambda stage: stand_ins([])[stage.name])
    assert main(["train", "--all", "--quick", "--report", str(tmp_path / "rep")]) == 0
    assert sorted(p.name for p in committed.iterdir()) == ["encoder"]
    assert json.loads((committed / "encoder" / "manifest.json").read_text()) == {"tag": "committed"}
    assert (quick_root / "hrl-scheduler" / "low" / "manifest.json").is_file()
    assert f"bundles under {quick_root}" in capsys.readouterr().err


@pytest.mark.parametrize("argv,flag", [(["--stages", "encoder,magic"], "--stages"), (["--seed", "-1"], "--seed")])
def test_a_bad_train_all_argument_is_one_line_and_exit_2_before_any_stage(tmp_path, monkeypatch, capsys, argv, flag):
    order: list[str] = []
    monkeypatch.setattr(ta, "resolve", lambda stage: stand_ins(order)[stage.name])
    rc = main(["train", "--all", "--out", str(tmp_path / "b"), "--report", str(tmp_path / "r"), *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and order == [] and not (tmp_path / "b").exists()
    assert len(err) == 1 and err[0].startswith(f"hrl-policy train: error: {flag}: ") and argv[1] in err[0]


def test_a_content_version_is_the_manifests_weights_digest_and_marks_quick_runs(tmp_path):
    import numpy as np

    from policy import bundle
    from policy.bundle import PolicyBundle
    from policy.features import FeatureSpec

    w1 = {"b": np.zeros(3, np.float32), "a": np.arange(6, dtype=np.float32).reshape(2, 3)}
    w2 = {**w1, "b": np.full(3, 1e-6, np.float32)}
    v1, v2 = bundle.content_version("enc-20260101-s0", w1), bundle.content_version("enc-20260101-s0", w2, quick=True)
    assert v1.startswith("enc-20260101-s0-") and v2.startswith("enc-20260101-s0-quick-")
    assert v1.rsplit("-", 1)[1] != v2.rsplit("-", 1)[1] and len(v1.rsplit("-", 1)[1]) == 8
    assert bundle.content_version("enc-20260101-s0", dict(reversed(list(w1.items())))) == v1  # order-free
    b = PolicyBundle(
        level="encoder",
        policy_version=v1,
        feature_spec={"x": FeatureSpec.of([("x", "1")])},
        dims={},
        architecture={"type": "t"},
        weights=w1,
    )
    b.save(tmp_path)
    sha = json.loads((tmp_path / "manifest.json").read_text())["weights"]["sha256"]
    assert v1.endswith("-" + sha[:8]) and bundle.weights_sha256(w1) == sha


def test_install_replaces_whole_directories_and_touches_nothing_when_a_copy_fails(tmp_path, monkeypatch):
    new_a, new_b = Path(fake_bundle(tmp_path / "new" / "a" / "student", "new-a")).parent, tmp_path / "new" / "b"
    fake_bundle(new_b / "predictor", "new-b")
    dst_a, dst_b = tmp_path / "root" / "a", tmp_path / "root" / "b"
    fake_bundle(dst_a / "student", "old-a")
    fake_bundle(dst_a / "predictor", "old-a-predictor")  # absent from the new directory: goes with the old one
    assert ta.install_dirs({new_a: dst_a, new_b: dst_b}) == [dst_a, dst_b]
    assert sorted(p.name for p in dst_a.iterdir()) == ["student"] and (dst_b / "predictor" / "manifest.json").is_file()
    assert sorted(p.name for p in dst_a.parent.iterdir()) == ["a", "b"]  # no leftovers
    with pytest.raises(ValueError, match="not a directory"):
        ta.install_dirs({new_a: dst_a, tmp_path / "nope": dst_b})
    with pytest.raises(ValueError, match="twice"):
        ta.install_dirs({new_a: dst_a, new_b: dst_b / ".." / "a"})
    fake_bundle(new_a / "student", "newer-a")
    fake_bundle(new_b / "predictor", "newer-b")
    real_copytree = ta.shutil.copytree

    def full_disk(src, dst, *args, **kw):  # the second directory's copy fails (after the first one's worked)
        if Path(dst).name.startswith(".b.new-"):
            raise OSError(28, "No space left on device")
        return real_copytree(src, dst, *args, **kw)

    monkeypatch.setattr(ta.shutil, "copytree", full_disk)
    with pytest.raises(OSError, match="No space"):
        ta.install_dirs({new_a: dst_a, new_b: dst_b})
    assert json.loads((dst_a / "student" / "manifest.json").read_text()) == {"tag": "new-a"}  # not newer-a
    assert json.loads((dst_b / "predictor" / "manifest.json").read_text()) == {"tag": "new-b"}
    assert sorted(p.name for p in dst_a.parent.iterdir()) == ["a", "b"]


def test_a_destination_holding_other_files_is_never_replaced(tmp_path):
    src = Path(fake_bundle(tmp_path / "new" / "student", "new")).parent
    dst = tmp_path / "home"
    fake_bundle(dst / "student", "old")
    (dst / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"holds notes.txt, not a bundle file: refusing"):
        ta.install_dirs({src: dst})
    assert (dst / "notes.txt").read_text() == "mine"
    order: list[str] = []
    (tmp_path / "root" / "encoder").mkdir(parents=True)
    (tmp_path / "root" / "encoder" / "README").write_text("x")
    with pytest.raises(ValueError, match="holds README"):  # train --all checks its root before any stage runs
        ta.run_all(tmp_path / "root", trainers=stand_ins(order), log=lambda m: None)
    assert order == []


# ---- training on your own app (--app, --scenario) ---------------------------------------------------------


@pytest.fixture
def shop(tmp_path) -> str:
    """An app folder as ``hrl-policy app build`` writes one (app.yaml + manifests), named ``my-shop``."""
    d = tmp_path / "apps" / "shop"
    shutil.copytree(builtin_apps_dir() / "sock-shop", d)
    y = d / "app.yaml"
    y.write_text(y.read_text().replace("name: sock-shop", "name: my-shop", 1))
    return str(d)


def test_the_high_levels_episodes_run_the_app_only_and_in_the_scenario_given(shop):
    t = TrainingTarget((shop,), "network-edge")
    cfg = DaggerConfig(**t.distribution())
    specs = sample_episode_specs(cfg, np.random.default_rng(0), 12, seed0=0)
    assert {s.app for s in specs} == {shop} and {s.scenario for s in specs} == {"network-edge"}
    app, rps, cluster, _cfg = episode_pieces(specs[0])
    assert app.name == "my-shop" and cluster.nodes == 12 and len(rps) == cfg.episode_minutes  # network-edge's nodes
    # without a scenario: the usual mix of scenario families and the classic setting, still the app only
    mixed = sample_episode_specs(
        DaggerConfig(**TrainingTarget((shop,)).distribution()), np.random.default_rng(0), 40, seed0=0
    )
    assert (
        {s.app for s in mixed} == {shop} and "" in {s.scenario for s in mixed} and len({s.scenario for s in mixed}) > 2
    )
    # the default distribution draws other apps (what the target replaces)
    default = sample_episode_specs(DaggerConfig(), np.random.default_rng(0), 40, seed0=0)
    assert shop not in {s.app for s in default}


def test_the_low_level_and_the_predictor_train_on_the_app(shop):
    t = TrainingTarget((shop,))
    cfg = PlacementTrainConfig(**t.placement())
    rng = np.random.default_rng(0)
    assert {sample_instance(cfg, rng).app.name for _ in range(10)} == {"my-shop"}  # no synthetic apps either
    assert _config_for(("drpc",), 0, True, None, t.apps).apps == (shop,)


def test_the_pipeline_hands_the_target_to_every_stage(tmp_path, shop):
    seen = {}

    def wrap(name, fn):
        def stage(root, *, quick, seed, log, target=None):
            seen[name] = target
            return fn(root, quick=quick, seed=seed, log=log)

        return stage

    trainers = {k: wrap(k, f) for k, f in stand_ins([]).items()}
    t = TrainingTarget((shop,), "events")
    report = ta.run_all(tmp_path / "b", trainers=trainers, log=lambda m: None, options=ta.StageOptions(t))
    assert report.ok and seen == dict.fromkeys(("encoder", "drpc", "placement", "constant", "dagger"), t)


def test_train_all_with_app_writes_its_own_bundles_and_report_not_the_committed_ones(
    tmp_path, monkeypatch, capsys, shop
):
    committed = tmp_path / "committed"
    monkeypatch.setattr(ta, "DEFAULT_ROOT", committed)
    monkeypatch.setattr(ta, "ROOT", tmp_path)
    got = []

    def resolve(stage):
        fn = stand_ins([])[stage.name]

        def run(root, *, quick, seed, log, target=None):
            got.append(target)
            return fn(root, quick=quick, seed=seed, log=log)

        return run

    monkeypatch.setattr(ta, "resolve", resolve)
    assert main(["train", "--all", "--app", shop, "--scenario", "load"]) == 0, capsys.readouterr().err
    own = tmp_path / "out" / "train" / "my-shop"
    assert not committed.exists()
    assert (own / "bundles" / "hrl-scheduler" / "low" / "manifest.json").is_file()
    assert json.loads((own / "training.json").read_text())["ok"] is True
    assert got == [TrainingTarget((shop,), "load")] * 5


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--app", "/nowhere/app"], "--app: /nowhere/app: app: unknown app"),
        (["--app", "dsb-social-network"], "--app: dsb-social-network: app: 'dsb-social-network' is held out"),
        (["--app", "sock-shop", "--scenario", "mars"], "--scenario: scenario: unknown scenario 'mars'"),
        (["--scenario", "events"], "--scenario: only with --app"),
    ],
)
def test_a_bad_app_or_scenario_is_one_line_and_exit_2_before_any_stage(tmp_path, monkeypatch, capsys, argv, message):
    order: list[str] = []
    monkeypatch.setattr(ta, "resolve", lambda stage: stand_ins(order)[stage.name])
    rc = main(["train", "--all", "--out", str(tmp_path / "b"), "--report", str(tmp_path / "r"), *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and order == [] and not (tmp_path / "b").exists()
    assert len(err) == 1 and err[0].startswith(f"hrl-policy train: error: {message}"), err


def test_a_quick_placement_stage_trains_on_the_app_for_real(tmp_path, shop):
    root = tmp_path / "bundles"
    report = ta.run_all(
        root, quick=True, stages=["placement"], log=lambda m: None, options=ta.StageOptions(TrainingTarget((shop,)))
    )
    assert report.stages[0].status == "ok", report.stages[0].error
    manifest = json.loads((root / "hrl-scheduler" / "low" / "manifest.json").read_text())
    assert "-quick-" in manifest["policy_version"]
    # the bundle says what it was trained on
    assert manifest["metadata"]["train_apps"] == [shop] and manifest["metadata"]["config"]["synthetic_share"] == 0.0


def test_the_high_level_and_drpc_stages_configure_their_training_from_the_target(tmp_path, monkeypatch, shop):
    got = {}
    monkeypatch.setattr(constant, "tune_constant", lambda cfg, *a, **k: got.setdefault("constant", cfg))
    monkeypatch.setattr(dagger, "load_constant", lambda *a, **k: None)
    monkeypatch.setattr(dagger, "train_dagger", lambda cfg, *a, **k: got.setdefault(f"dagger-{cfg.flat}", cfg))
    monkeypatch.setattr(drpc, "train_drpc", lambda cfg, **k: got.setdefault("drpc", cfg) and {})
    monkeypatch.setattr(drpc, "_print_report", lambda *a, **k: None)
    monkeypatch.setattr(drpc, "install_dirs", lambda *a, **k: None)
    t = TrainingTarget((shop,), "events")
    for stage in (constant, dagger, drpc):
        stage.train_stage(tmp_path, quick=True, seed=0, log=lambda m: None, target=t)
    for k in ("constant", "dagger-False", "dagger-True"):
        cfg = got[k]
        assert (cfg.apps, cfg.synthetic_share, cfg.scenarios, cfg.scenario_share) == ((shop,), 0.0, ("events",), 1.0), k
    assert got["drpc"].apps == (shop,)


def test_the_placement_and_dagger_commands_train_on_the_app_too(tmp_path, capsys, shop):
    pl = tmp_path / "pl"
    argv = ["train", "placement", "--quick", "--no-eval", "--app", shop, "--run-dir", str(tmp_path / "r1")]
    assert main([*argv, "--out", str(pl)]) == 0, capsys.readouterr().err
    assert json.loads((pl / "manifest.json").read_text())["metadata"]["train_apps"] == [shop]
    hi = tmp_path / "hi"
    argv = ["train", "dagger", "--quick", "--app", shop, "--scenario", "events", "--run-dir", str(tmp_path / "r2")]
    assert main([*argv, "--out", str(hi)]) == 0, capsys.readouterr().err
    meta = json.loads((hi / "intent" / "manifest.json").read_text())["metadata"]
    assert (meta["apps"], meta["scenarios"], meta["scenario_share"], meta["synthetic_share"]) == (
        [shop],
        ["events"],
        1.0,
        0.0,
    )
    capsys.readouterr()
    assert main(["train", "dagger", "--quick", "--scenario", "events"]) == 2
    assert (
        capsys.readouterr().err.strip()
        == "hrl-policy train dagger: error: --scenario: only with --app (the scenario your app is trained in)"
    )


def test_the_constant_search_grids_the_burst_share_and_breaks_ties_toward_room_and_less_burst(tmp_path, monkeypatch):
    # a cost that is least at capacity 0.6 with burst 0.5, and flat in capacity at 0.8/0.9 (a tie)
    def cost(spec, c, b, root, u):
        return (c - 0.6) ** 2 + (u - 0.5) ** 2 + (0.0 if c < 0.8 else 10.0)

    monkeypatch.setattr(constant, "constant_cost", cost)
    cfg = constant.ConstantSearchConfig(
        capacity_targets=(0.5, 0.6, 0.8, 0.9), burst_shares=(0.0, 0.5, 1.0), episodes=2, workers=1
    )
    out = tmp_path / "constant.json"
    got = constant.tune_constant(cfg, out, log=lambda m: None)
    assert (got["capacity_target"], got["burst"], got["move_budget_frac"]) == (0.6, 0.5, 0.0)
    assert len(got["grid"]) == 4 * 3 and {g["burst"] for g in got["grid"]} == {0.0, 0.5, 1.0}
    assert all(len(g["episode_objectives"]) == 2 for g in got["grid"])
    assert all(abs(np.mean(g["episode_objectives"]) - g["objective"]) < 1e-6 for g in got["grid"])
    assert "episode_objectives" not in got  # the point chosen is a summary; its episodes are in the grid
    assert json.loads(out.read_text())["burst"] == 0.5
    # ties: the larger capacity target, then the smaller burst share
    monkeypatch.setattr(constant, "constant_cost", lambda spec, c, b, root, u: 1.0)
    tie = constant.tune_constant(cfg, None, log=lambda m: None)
    assert (tie["capacity_target"], tie["burst"]) == (0.9, 0.0)
    with pytest.raises(ValueError, match=r"burst_shares: expected numbers in \[0, 1\], got \(1.5,\)"):
        constant.ConstantSearchConfig(burst_shares=(1.5,))


def test_the_constant_search_compares_points_episode_by_episode_and_lists_the_points_it_cannot_tell_apart(
    tmp_path, monkeypatch
):
    # every episode has its own scale (one overloads: 60/min), common to all points; capacity 0.6 costs 0.1 less than
    # 0.5 in every episode (a sure gap however large the spread), 0.7 costs +-1 around 0.6 (a gap of 0 +- 1: tied)
    seeds: dict[int, int] = {}

    def cost(spec, c, b, root, u):
        k = seeds.setdefault(spec.seed, len(seeds))
        scale = 60.0 if k == 0 else 1.0 + k % 3
        extra = {0.5: 0.1, 0.6: 0.0, 0.7: (1.0 if k % 2 else -1.0) + 0.01}[c]
        return scale + extra

    monkeypatch.setattr(constant, "constant_cost", cost)
    cfg = constant.ConstantSearchConfig(capacity_targets=(0.5, 0.6, 0.7), burst_shares=(0.0,), episodes=6, workers=1)
    got = constant.tune_constant(cfg, tmp_path / "constant.json", log=lambda m: None)
    assert got["capacity_target"] == 0.6 and len(seeds) == 6
    by = {g["capacity_target"]: g for g in got["grid"]}
    assert (by[0.6]["paired_gap"], by[0.6]["paired_se"], by[0.6]["cheaper_episodes"]) == (0.0, 0.0, 0)
    assert by[0.5]["paired_gap"] == pytest.approx(0.1) and by[0.5]["paired_se"] == pytest.approx(0.0, abs=1e-9)
    assert by[0.5]["cheaper_episodes"] == 0
    assert by[0.7]["paired_gap"] == pytest.approx(0.01) and by[0.7]["paired_se"] > 0.3
    assert by[0.7]["cheaper_episodes"] == 3
    assert got["tied"] == [{"capacity_target": 0.7, "move_budget_frac": 0.0, "burst": 0.0}]
    assert "paired_gap" not in got and json.loads((tmp_path / "constant.json").read_text())["tied"] == got["tied"]
