"""Rendering the Helm chart manifests/charts/hrl-scheduler for the chart tests (tests/unit/test_chart*.py): Helm
from its Go module (hack/build-helm.sh), `helm template` with values on stdin, and small accessors of the objects."""

from __future__ import annotations

import json
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from policy.documents import load_yaml_all

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "manifests" / "charts" / "hrl-scheduler"
NS = "hrl-system"


@cache
def helm() -> str:
    out = subprocess.run([str(ROOT / "hack" / "build-helm.sh")], capture_output=True, text=True)
    assert out.returncode == 0, f"hack/build-helm.sh failed:\n{out.stderr[-3000:]}"
    return out.stdout.strip().splitlines()[-1]


def template(
    values: dict[str, Any] | None = None, *extra: str, check: bool = True, namespace: str = NS
) -> subprocess.CompletedProcess:
    cmd = [helm(), "template", "hrl", str(CHART), "--namespace", namespace, "-f", "-", *extra]
    out = subprocess.run(cmd, input=yaml.safe_dump(values or {}), capture_output=True, text=True, timeout=120)
    if check:
        assert out.returncode == 0, out.stderr
    return out


@cache
def _render(values_json: str, kube: str, namespace: str) -> tuple[dict[str, Any], ...]:
    out = template(json.loads(values_json), "--kube-version", kube, namespace=namespace)
    return tuple(d for d in yaml.safe_load_all(out.stdout) if d)


def render(values: dict[str, Any] | None = None, kube: str = "1.36.3", namespace: str = NS) -> tuple[dict, ...]:
    return _render(json.dumps(values or {}, sort_keys=True), kube, namespace)


def find(objs, kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def one(objs, kind: str, name: str) -> dict[str, Any]:
    found = find(objs, kind, name)
    assert len(found) == 1, f"expected one {kind}/{name}, found {[o['metadata']['name'] for o in find(objs, kind)]}"
    return found[0]


def pod_template(o: dict[str, Any]) -> dict[str, Any]:
    return o["spec"]["jobTemplate"]["spec"]["template"] if o["kind"] == "CronJob" else o["spec"]["template"]


def pod_spec(o: dict[str, Any]) -> dict[str, Any]:
    return pod_template(o)["spec"]


def workloads(objs) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] in ("Deployment", "CronJob")]


def config_of(objs, name: str, key: str = "config.yaml") -> dict[str, Any]:
    """The configuration file of ConfigMap ``name``, read as the components read their file (policy.documents:
    e.g. Helm's ``1e-05`` is a number there, a string to PyYAML's own loader)."""
    return load_yaml_all(one(objs, "ConfigMap", name)["data"][key])[0]


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a label selector's matchLabels (or a plain map, as a Service's) select ``labels``."""
    match = selector.get("matchLabels", selector) if isinstance(selector, dict) else {}
    return bool(match) and all(labels.get(k) == v for k, v in match.items())
