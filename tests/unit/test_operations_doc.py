"""docs/operations.md stays true to the code: every field of ExtenderConfiguration and DeschedulerConfiguration
(walked from the pydantic models) has a row in the configuration reference with the model's default, no row
names a field that does not exist, and the troubleshooting section names every metric label value and every
overlay the code and manifests/ have."""

from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from descheduler.config import DeschedulerConfiguration
from descheduler.guards import GUARD_NAMES
from extender.config import ExtenderConfiguration
from extender.scoring import FILTER_OUTCOMES, PRIORITIZE_OUTCOMES

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "operations.md").read_text()
ROW = re.compile(r"^\| `([A-Za-z0-9_.]+)` \|\s*([^|]*?)\s*\|", re.M)


def submodels(annotation: Any) -> list[type[BaseModel]]:
    args = typing.get_args(annotation) or (annotation,)
    return [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]


def fields(model: type[BaseModel], prefix: str = "") -> dict[str, Any]:
    """Dotted camelCase path → default (``PydanticUndefined`` when required, ``BaseModel`` for a section)."""
    out: dict[str, Any] = {}
    for name, f in model.model_fields.items():
        path = prefix + (f.alias or name)
        out[path] = (
            f.get_default(call_default_factory=True)
            if f.default is not PydanticUndefined or f.default_factory is not None
            else PydanticUndefined
        )
        for sub in submodels(f.annotation):
            out.update(fields(sub, path + "."))
    return out


def section(title: str) -> str:
    start = DOC.index(title)
    end = DOC.find("\n### ", start + len(title))
    return DOC[start : end if end >= 0 else None]


def documented(title: str) -> dict[str, str]:
    return {m[1]: m[2].strip() for m in ROW.finditer(section(title))}


MODELS = [
    (ExtenderConfiguration, "### 5.1 ExtenderConfiguration"),
    (DeschedulerConfiguration, "### 5.2 DeschedulerConfiguration"),
]


@pytest.mark.parametrize("model,title", MODELS, ids=["extender", "descheduler"])
def test_every_configuration_field_is_documented(model, title):
    missing = sorted(set(fields(model)) - set(documented(title)))
    assert missing == [], f"add these fields to the table under {title!r} in docs/operations.md"


@pytest.mark.parametrize("model,title", MODELS, ids=["extender", "descheduler"])
def test_no_documented_field_is_unknown_to_the_code(model, title):
    assert sorted(set(documented(title)) - set(fields(model))) == []


def expected_cell(default: Any) -> Any:
    if default is PydanticUndefined:
        return "required"
    if isinstance(default, BaseModel):
        return ""
    if isinstance(default, tuple):
        return list(default)
    return default


@pytest.mark.parametrize("model,title", MODELS, ids=["extender", "descheduler"])
def test_every_documented_default_is_the_models_default(model, title):
    rows = documented(title)
    wrong = {}
    for path, default in fields(model).items():
        cell = rows.get(path)
        if cell is None:
            continue
        want = expected_cell(default)
        got = cell if cell in ("", "required") else yaml.safe_load(cell.strip("`"))
        if got != want:
            wrong[path] = (cell, want)
    assert wrong == {}


@pytest.mark.parametrize("name", [*PRIORITIZE_OUTCOMES, *(f"`{o}`" for o in FILTER_OUTCOMES), *GUARD_NAMES])
def test_troubleshooting_names_every_outcome_and_guard(name):
    assert f"`{name.strip('`')}`" in section("## 7. Troubleshooting")


OVERLAYS = sorted(p.parent.name for p in (ROOT / "manifests" / "overlays").glob("*/kustomization.yaml"))


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_overlay_is_described(overlay):
    assert f"overlays/{overlay}" in DOC
