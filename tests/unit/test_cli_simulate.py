"""``hrl-policy simulate``: the flat JSON object and its errors."""

import json

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
