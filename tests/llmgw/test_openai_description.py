"""The tests' copy of OpenAI's API description is whole and in step with the published one."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COPY = ROOT / "tests/fixtures/openai/openapi.json"


def _script():
    spec = importlib.util.spec_from_file_location("openai_spec", ROOT / "scripts/openai_spec.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_copy_holds_every_path_llmgw_serves_and_every_component_they_reach():
    script = _script()
    doc = json.loads(COPY.read_text(encoding="utf-8"))
    assert set(doc["paths"]) == set(script.PATHS)
    refs: set[str] = set()
    script._refs(doc, refs)
    for ref in refs:
        _, _, kind, name = ref.split("/", 3)
        assert name in doc["components"][kind], ref


@pytest.mark.skipif(
    not _script().DEFAULT_DESCRIPTION.exists(), reason="the published description is not here"
)
def test_the_copy_is_what_the_script_makes_of_the_published_description():
    script = _script()
    made = script.render(script.trim(script.load(script.DEFAULT_DESCRIPTION)))
    assert made == COPY.read_text(encoding="utf-8"), "run python scripts/openai_spec.py"
