"""Fixtures of model planning: recorded node inventories and the real gemma-3 GGUF."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmgw.inventory import Inventory

FIXTURES_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "hardware"


def load_inventory(name: str) -> Inventory:
    return Inventory.model_validate_json((FIXTURES_DIR / f"{name}.json").read_text())


@pytest.fixture(scope="session")
def inventories() -> dict[str, Inventory]:
    return {p.stem: load_inventory(p.stem) for p in sorted(FIXTURES_DIR.glob("*.json"))}
