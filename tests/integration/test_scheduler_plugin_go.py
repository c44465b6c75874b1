"""The HRLScore plugin's own Go tests (scheduler-plugin/pkg/scoretable: decoding, rows, the load term, rounding, the
table's age, the service and requests rules; pkg/hrlscore: a cycle's PreScore, Score and NormalizeScore against the
table, interleaved cycles, failing open) with the build's flags, so the compiled packages come from the Go build
cache of the control plane and plugin builds; and its source gofmt-clean. Without Go the test fails saying so."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "scheduler-plugin"


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        pytest.fail("Go is not installed (need go >= 1.26 on PATH for the scheduler plugin)", pytrace=False)
    return go


def test_the_plugins_go_tests_pass():
    env = {**os.environ, "GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
    # -vet=off: vet would analyse every dependency of the package (minutes on a cold cache); the code is gofmt-checked
    # below and compiled with the build's flags
    cmd = [_go(), "test", "-trimpath", "-tags=selinux,notest,grpcnotrace", "-vet=off", "-count=1", "./pkg/..."]
    out = subprocess.run(cmd, cwd=MODULE, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    assert "ok  " in out.stdout


def test_the_plugins_source_is_gofmt_clean():
    gofmt = Path(_go()).with_name("gofmt")
    out = subprocess.run([str(gofmt), "-l", "."], cwd=MODULE, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout == "", f"not gofmt-clean (run gofmt -w): {out.stdout}{out.stderr}"
