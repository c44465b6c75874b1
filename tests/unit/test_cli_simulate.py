"""``hrl-policy simulate``: the flat JSON object and its errors; ``--bundles DIR`` runs the learned stacks on the
bundles under DIR (as ``hrl-policy train --app`` writes them) instead of the committed ``policy/bundles``."""

import json
import shutil

from policy.cli.core import main
from policy.sim.engine import METRIC_KEYS, NODE_UTIL_KEYS
from policy.sim.scenario import FLAT_KEYS


def test_simulate_writes_one_flat_object_with_the_run_the_eight_metrics_and_node_utilization(tmp_path, capsys):
    out = tmp_path / "r.json"
    rc = main(
        [
            "simulate",
            "--app",
            "online-boutique",
            "--trace",
            "nasa",
            "--policy",
            "default-kube-scheduler",
            "--nodes",
            "5",
            "--minutes",
            "3",
            "--seed",
            "1",
            "--json",
            str(out),
        ]
    )
    assert rc == 0
    obj = json.loads(out.read_text())
    assert set(obj) == set(FLAT_KEYS)
    assert {"app", "trace", "policy", "nodes", "minutes", "seed", *METRIC_KEYS, *NODE_UTIL_KEYS} <= set(obj)
    assert (obj["scenario"], obj["offset_min"], obj["samples"]) == ("baseline-2026-11", 0, 2000)
    assert (obj["app"], obj["trace"], obj["policy"], obj["nodes"], obj["minutes"], obj["seed"]) == (
        "online-boutique",
        "nasa",
        "default-kube-scheduler",
        5,
        3,
        1,
    )
    assert all(isinstance(obj[k], float) for k in METRIC_KEYS)
    assert capsys.readouterr().out == ""


def test_json_to_stdout_carries_only_the_json(capsys):
    rc = main(
        [
            "simulate",
            "--app",
            "online-boutique",
            "--trace",
            "bursty",
            "--policy",
            "trimaran-tlp",
            "--minutes",
            "2",
            "--json",
            "-",
        ]
    )
    assert rc == 0
    assert json.loads(capsys.readouterr().out)["policy"] == "trimaran-tlp"


def test_a_trace_csv_and_an_app_folder_are_accepted(tmp_path, capsys):
    from policy.sim.app import builtin_apps_dir

    csv = tmp_path / "load.csv"
    csv.write_text("minute,requests\n" + "".join(f"{i},{100 + 10 * i}\n" for i in range(5)))
    rc = main(
        [
            "simulate",
            "--app",
            str(builtin_apps_dir() / "sock-shop"),
            "--trace",
            str(csv),
            "--policy",
            "default-kube-scheduler",
            "--minutes",
            "5",
            "--json",
            "-",
        ]
    )
    assert rc == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["app"] == "sock-shop" and obj["minutes"] == 5 and obj["trace"] == str(csv)


def test_unknown_names_and_bad_numbers_are_one_line_errors(capsys):
    assert main(["simulate", "--app", "online-boutique", "--trace", "nasa", "--policy", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown stack 'nope'" in err and len(err.strip().splitlines()) == 1
    assert main(["simulate", "--app", "no-such-app", "--trace", "nasa", "--policy", "default-kube-scheduler"]) == 2
    assert "unknown app" in capsys.readouterr().err
    assert (
        main(
            [
                "simulate",
                "--app",
                "online-boutique",
                "--trace",
                "nasa",
                "--policy",
                "default-kube-scheduler",
                "--minutes",
                "0",
            ]
        )
        == 2
    )
    assert "minutes" in capsys.readouterr().err


def _simulate(capsys, policy: str, *extra: str) -> tuple[int, dict | None, str]:
    """``hrl-policy simulate`` of ``policy`` (3 minutes of Online Boutique under nasa): exit code, JSON, stderr."""
    rc = main(["simulate", "--app", "online-boutique", "--trace", "nasa", "--policy", policy, "--minutes", "3",
               "--json", "-", *extra])  # fmt: skip
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if rc == 0 else None), err


def test_bundles_runs_the_learned_stacks_on_the_bundles_under_that_root_and_not_on_policy_bundles(tmp_path, capsys):
    from policy.bundle import DEFAULT_BUNDLES

    mine = tmp_path / "out" / "train" / "shop" / "bundles"  # where `hrl-policy train --app` writes them
    shutil.copytree(DEFAULT_BUNDLES, mine, ignore=shutil.ignore_patterns("seeds"))
    _, committed, _ = _simulate(capsys, "hrl-constant")
    _, copied, _ = _simulate(capsys, "hrl-constant", "--bundles", str(mine))
    assert copied == committed  # the same bundles, the same bits
    # a tuned constant of its own (capacity 0.9 where the committed one says 0.6): the run follows the copy
    constant = mine / "hrl-scheduler" / "high" / "constant.json"
    tuned = json.loads(constant.read_text())
    assert tuned["capacity_target"] != 0.9
    constant.write_text(json.dumps({**tuned, "capacity_target": 0.9}))
    rc, own, _ = _simulate(capsys, "hrl-constant", "--bundles", str(mine))
    _, knob, _ = _simulate(capsys, "hrl-constant@capacity=0.9")
    assert rc == 0 and own != committed
    assert {**own, "policy": ""} == {**knob, "policy": ""}
    assert (DEFAULT_BUNDLES / "hrl-scheduler" / "high" / "constant.json").read_text() != constant.read_text()
    # a learned stack whose bundle the root lacks: one line naming the bundle under the root, never the committed one
    shutil.rmtree(mine / "hrl-scheduler" / "low")
    rc, _, err = _simulate(capsys, "hrl-scheduler", "--bundles", str(mine))
    assert rc == 2 and len(err.strip().splitlines()) == 1 and str(mine / "hrl-scheduler" / "low") in err, err


def test_bundles_refuses_a_missing_directory_and_one_without_bundles_in_one_line(tmp_path, capsys):
    rc, _, err = _simulate(capsys, "hrl-scheduler", "--bundles", str(tmp_path / "nope"))
    assert rc == 2 and err.strip().splitlines() == [
        f"hrl-policy simulate: error: --bundles: no such directory (got {str(tmp_path / 'nope')!r}); expected a "
        "bundles root laid out like policy/bundles"
    ]
    (tmp_path / "empty" / "hrl-scheduler").mkdir(parents=True)
    rc, _, err = _simulate(capsys, "hrl-scheduler", "--bundles", str(tmp_path / "empty"))
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "--bundles: no policy bundle in" in err, err
