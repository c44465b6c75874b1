"""policy.telemetry's logs and progress: one JSON shape for every record of every library under --log-format json
(uvicorn's color_message dropped, Python warnings as records, hrl-policy's warnings and errors as records, not
plain lines), and progress reports (a record every interval and at the end when there is no terminal) only where a
command turned them on; `hrl-policy app build` reports its fit's progress and leaks no numpy RuntimeWarning; the
training commands report theirs (the hand-counted loops through progress_bar, their lines through note) as JSON
records under --log-format json, nothing else on stderr."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

import policy.telemetry as telemetry
from policy.telemetry import configure_logging, progress, progress_bar, say, showing_progress

ROOT = Path(__file__).resolve().parents[2]
#: The keys of every JSON record (plus the structured fields a record carries, exc_info with a traceback).
SHAPE = {"level", "component", "logger", "message", "timestamp"}


def records(text: str) -> list[dict]:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    out = [json.loads(ln) for ln in lines]  # every line is one object (a plain line fails here)
    assert all(SHAPE <= set(r) for r in out), out
    return out


@pytest.fixture
def json_log():
    buf = io.StringIO()
    configure_logging("hrl-test", "INFO", "json", stream=buf)
    yield buf
    configure_logging("hrl-test", "WARNING", "text")


def test_uvicorns_color_message_is_dropped_in_both_formats(json_log):
    extra = {"color_message": "Started server process [\x1b[36m%d\x1b[0m]", "port": 8888}
    logging.getLogger("uvicorn.error").info("Started server process [%d]", 42, extra=extra)
    (r,) = records(json_log.getvalue())
    assert r["message"] == "Started server process [42]" and r["port"] == 8888 and "color_message" not in r
    buf = io.StringIO()
    configure_logging("hrl-test", "INFO", "text", stream=buf)
    logging.getLogger("uvicorn.error").info("Started server process [%d]", 42, extra=extra)
    assert "color_message" not in buf.getvalue() and "\x1b[" not in buf.getvalue() and "port=8888" in buf.getvalue()


def test_python_warnings_become_records_of_the_same_shape():
    code = (
        "import warnings, numpy as np\n"
        "from policy.telemetry import configure_logging\n"
        "configure_logging('hrl-policy', 'WARNING', 'json')\n"
        "np.nanmedian(np.array([np.nan]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    (r,) = records(out.stderr)
    assert r["logger"] == "py.warnings" and r["level"] == "WARNING"
    assert "RuntimeWarning: All-NaN slice encountered" in r["message"] and not r["message"].endswith("\n")


def test_say_is_the_line_as_is_in_text_and_one_record_in_json(json_log, capsys):
    say("hrl-policy graph: warning: env FOO_ADDR names no Service", prog="hrl-policy")
    say("cfg.yaml: listen.port: must be <= 65535 (got 70000)", logging.ERROR, prog="hrl-policy")
    say("hrl-policy simulate: wrote out.json", logging.INFO, prog="hrl-policy")  # shown at any log level
    warn, err, note = records(json_log.getvalue())
    assert (warn["level"], warn["message"]) == ("WARNING", "graph: env FOO_ADDR names no Service")
    assert (err["level"], err["message"]) == ("ERROR", "cfg.yaml: listen.port: must be <= 65535 (got 70000)")
    assert (note["level"], note["message"]) == ("INFO", "simulate: wrote out.json")
    configure_logging("hrl-test", "WARNING", "text")
    say("hrl-policy graph: warning: as is", prog="hrl-policy")
    assert capsys.readouterr().err == "hrl-policy graph: warning: as is\n"


def test_hrl_policy_warnings_and_errors_are_json_records_under_log_format_json(tmp_path):
    manifest = tmp_path / "app.yaml"
    manifest.write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  selector: {matchLabels: {app: web}}\n"
        "  template:\n    metadata: {labels: {app: web}}\n    spec:\n      containers:\n      - name: web\n"
        "        image: web\n        env: [{name: CART_ADDR, value: 'cart:7070'}]\n"
    )

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "policy.cli", "--log-format", "json", *args],
                              capture_output=True, text=True, cwd=ROOT, timeout=120)  # fmt: skip

    graph = run("graph", str(manifest), "--json")
    warnings = records(graph.stderr)
    assert graph.returncode == 0 and warnings and all(r["level"] == "WARNING" for r in warnings)
    assert any("cart" in r["message"] for r in warnings) and json.loads(graph.stdout)  # stdout: the result only
    missing = run("graph", str(tmp_path / "nope"))
    (r,) = records(missing.stderr)
    assert missing.returncode == 2 and r["level"] == "ERROR" and r["message"].startswith("graph: ")
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: hrl-scheduler.io/v1alpha1\nkind: ExtenderConfiguration\nlisten: {port: 70000}\n")
    check = run("config", "check", str(bad))
    assert check.returncode == 2 and any("listen.port" in r["message"] for r in records(check.stderr))


def test_progress_is_the_iterable_itself_unless_a_command_turns_it_on(monkeypatch, json_log):
    items = range(5)
    assert progress(items, "x", 5) is items
    monkeypatch.setattr(telemetry, "PROGRESS_LOG_INTERVAL_S", 0.0)
    monkeypatch.setattr(telemetry, "PROGRESS_MIN_S", 0.0)
    with showing_progress():
        assert list(progress(items, "calibration: fit", 5, "iteration")) == list(items)
    assert progress(items, "x", 5) is items  # off again after the block
    reports = records(json_log.getvalue())
    assert [r["done"] for r in reports] == [1, 2, 3, 4, 5, 5] and reports[-1]["message"].endswith(" done")
    assert all(r["logger"] == "progress" and r["total"] == 5 for r in reports)


def test_progress_reports_at_most_once_an_interval_and_not_for_a_quick_loop(json_log):
    with showing_progress():
        assert list(progress(range(1000), "quick", 1000)) == list(range(1000))
    assert json_log.getvalue() == ""  # well under the interval and under PROGRESS_MIN_S: nothing to say


def test_a_hand_counted_progress_bar_reports_its_running_figures_only_where_a_command_turned_progress_on(
    monkeypatch, json_log
):
    monkeypatch.setattr(telemetry, "PROGRESS_LOG_INTERVAL_S", 0.0)
    monkeypatch.setattr(telemetry, "PROGRESS_MIN_S", 0.0)
    off = progress_bar("library", 3, "step")  # a trainer called from a library or a test: silent
    off.update(3)
    off.close()
    assert not off.shown and json_log.getvalue() == ""
    with showing_progress():
        assert not progress_bar("x", 3, enabled=False).shown  # the trainer's own switch
        with progress_bar("drpc", 3, "min") as bar:
            for i in range(3):
                bar.update(1)
                bar.set_postfix(R=f"{i:.3f}", drv="teacher")
        bar.close()  # a second close says nothing more
    reports = records(json_log.getvalue())
    assert [r["done"] for r in reports] == [1, 2, 3, 3] and all(r["total"] == 3 for r in reports)
    assert reports[-1]["message"].startswith("drpc: 3/3 min (") and reports[-1]["message"].endswith(
        " R=2.000 drv=teacher done"
    )
    assert reports[-1]["postfix"] == {"R": "2.000", "drv": "teacher"} and "postfix" not in reports[0]


def test_the_training_commands_report_their_progress_as_json_records_and_nothing_else(monkeypatch, tmp_path, capsys):
    from policy.cli import main

    monkeypatch.setattr(telemetry, "PROGRESS_LOG_INTERVAL_S", 0.0)
    monkeypatch.setattr(telemetry, "PROGRESS_MIN_S", 0.0)
    runs = {
        "encoder": ["train", "encoder", "--quick", "--out", str(tmp_path / "encoder")],
        "placement": ["train", "placement", "--quick", "--no-eval", "--out", str(tmp_path / "low"), "--run-dir",
                      str(tmp_path / "placement-run")],
        "drpc": ["train", "drpc", "--quick", "--minutes", "10", "--students", "drpc", "--run-dir",
                 str(tmp_path / "drpc-run"), "--out", str(tmp_path / "drpc")],
        "constant": ["train", "constant", "--quick", "--out", str(tmp_path / "constant.json")],
    }  # fmt: skip
    bars = {
        "encoder": ["encoder: training scenarios", "encoder (layers="],
        "placement": ["placement (encoder)"],
        "drpc": ["drpc predictor", "drpc: "],
        "constant": ["constant intent: grid"],
    }
    for name, args in runs.items():
        assert main(["--log-format", "json", *args]) == 0, name
        err = records(capsys.readouterr().err)  # every line one JSON object: no tqdm bar, no plain line
        progress = [r for r in err if r["logger"] == "progress"]
        for desc in bars[name]:
            # (drpc runs whole episodes: its last one may end past the minutes asked for)
            mine = [r for r in progress if r["message"].startswith(desc)]
            assert mine and mine[-1]["done"] >= mine[-1]["total"] and mine[-1]["message"].endswith(" done"), (
                name,
                desc,
            )
        assert [r for r in err if r["logger"] == "hrl-policy"], name  # its own lines (notes) are records too


def test_app_build_reports_the_progress_of_its_fit_as_json_records(monkeypatch, tmp_path, capsys):
    from test_appbuild import _write_app

    from policy.cli import main

    monkeypatch.setattr(telemetry, "PROGRESS_LOG_INTERVAL_S", 0.0)
    monkeypatch.setattr(telemetry, "PROGRESS_MIN_S", 0.0)
    inputs = _write_app(tmp_path)
    args = ["--log-format", "json", "app", "build", "--manifests", str(inputs["manifests"]), "--spans",
            str(inputs["spans"]), "--metrics", str(inputs["metrics"]), "-o", str(tmp_path / "app"), "--iterations", "4",
            "--json"]  # fmt: skip
    assert main(args) == 0
    err = records(capsys.readouterr().err)
    fit = [r for r in err if r["logger"] == "progress" and r["message"].startswith("calibration: fit")]
    assert fit and fit[-1]["done"] == fit[-1]["total"] == 4
    assert any(r["logger"] == "progress" and "minute by minute" in r["message"] for r in err)
    assert [r for r in err if r["logger"] == "hrl-policy" and r["level"] == "WARNING"]  # its warnings: records too


def test_the_calibration_reports_a_series_without_numbers_as_missing_without_a_numpy_warning():
    """An all-NaN series (a column the exporter never filled) gave numpy's `All-NaN slice encountered` /
    `Mean of empty slice` RuntimeWarning on stderr (an error under pytest's filter); it is NaN, reported as n/a."""
    import numpy as np

    from policy.sim.calibrate import latency_normal_minutes, normal_minutes, quiet_nanmedian

    nan = np.full(6, np.nan)
    assert not normal_minutes(nan, np.ones(6)).any()  # no CPU measured: no normal minute
    ok, _ = latency_normal_minutes(nan, None)
    assert not ok.any()
    assert np.isnan(quiet_nanmedian(nan)) and np.isnan(quiet_nanmedian([])) and quiet_nanmedian([1.0, np.nan, 3]) == 2
