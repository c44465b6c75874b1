"""The feature contract (policy/contract.py): every input column of every learned network, as the code declares it
and as every committed bundle records it, has an entry naming a live source, and every source's live and simulator
readers exist; the documentation is the contract rendered."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from policy.contract import (
    ARCHITECTURES,
    FEATURE_CONTRACT,
    NETWORKS,
    SOURCES,
    contract_problems,
    entry_for,
    render_markdown,
)
from policy.features import FeatureSpec

ROOT = Path(__file__).resolve().parents[2]
BUNDLES = sorted((ROOT / "policy" / "bundles").rglob("manifest.json"))


def test_every_input_of_every_network_in_the_code_has_a_live_source():
    assert contract_problems() == []
    for net, inputs in NETWORKS.items():
        for inp, specs in inputs.items():
            for spec in specs:
                for name in spec.names:
                    e = entry_for(net, inp, name)
                    assert e is not None and e.sources and e.when_missing, (net, inp, name)


@pytest.mark.parametrize(
    "manifest", BUNDLES, ids=[str(p.parent.relative_to(ROOT / "policy" / "bundles")) for p in BUNDLES]
)
def test_every_input_a_committed_bundle_was_trained_on_has_a_live_source(manifest):
    doc = json.loads(manifest.read_text())
    net = ARCHITECTURES[doc["architecture"]["type"]]
    specs = [(net, key, FeatureSpec.from_json(v)) for key, v in doc["feature_spec"].items()]
    assert {k for _n, k, _s in specs} <= set(NETWORKS[net]), doc["feature_spec"].keys()
    assert contract_problems(specs) == []


def test_a_network_input_without_a_live_source_fails_the_contract():
    grown = FeatureSpec.of(
        [
            *zip(NETWORKS["drpc-student"]["local"][0].names, NETWORKS["drpc-student"]["local"][0].units),
            ("gpu_util", "fraction"),
        ]
    )
    assert contract_problems([("drpc-student", "local", grown)]) == [
        "drpc-student.local.gpu_util: no entry in policy.contract (no live source)"
    ]
    assert contract_problems([("scheduler", "rows", FeatureSpec.of([("x", "1")]))]) == [
        "scheduler.rows.x: no entry in policy.contract (no live source)"
    ]


def test_every_source_names_a_live_and_a_simulator_reader_that_exist():
    for s in SOURCES.values():
        for ref in (s.live_reader, s.sim_reader):
            module, _, attr = ref.partition(":")
            assert hasattr(importlib.import_module(module), attr), ref
    assert {src for e in FEATURE_CONTRACT for src in e.sources} <= set(SOURCES)


def test_measured_use_and_service_signals_are_the_live_sources_of_what_the_simulator_measures():
    # the inputs the issue is about: every network reads them from policy.live's two inputs
    assert entry_for("placement", "candidate", "cpu_used_frac").sources[0] == "resource_usage"
    assert "service_signals" in entry_for("drpc-student", "local", "latency_slo").sources
    assert "service_signals" in entry_for("intent", "global", "refused_frac").sources
    assert SOURCES["resource_usage"].live_reader == "policy.live:UsageInput"


def test_the_documentation_is_the_contract_rendered_and_the_command_prints_it():
    doc = (ROOT / "docs" / "feature-contract.md").read_text()
    assert doc == render_markdown(), "regenerate with: hrl-policy features --markdown > docs/feature-contract.md"
    out = subprocess.run(
        [sys.executable, "-m", "policy.cli", "features", "--json", "--network", "forecast"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["feature"] for r in rows] == ["rate_over_window_mean"] and rows[0]["unit"].startswith("requests/s")
