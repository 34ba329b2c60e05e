"""What a local weights path is: a GGUF file, a safetensors file, or a model directory.

Checked when a model is added (by the control plane, where it can see the
path) and again by the node before an engine is started on it: a path that is
none of these would otherwise start an engine that fails over and over in its
own log lines. Only the first bytes of a file are read.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Literal

from llmgw.errors import UsageError

GGUF_MAGIC = b"GGUF"
# The safetensors format caps its header at 100 MB.
MAX_SAFETENSORS_HEADER_BYTES = 100_000_000

LocalFormat = Literal["gguf", "safetensors", "hf-dir"]


class NotWeights(UsageError):
    """A local path that holds no weights an engine here loads."""


def safetensors_problem(path: Path) -> str:
    """Why the file at path is not a safetensors file ("" when it is one)."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            prefix = f.read(8)
            if len(prefix) < 8:
                return "shorter than a safetensors length prefix"
            (length,) = struct.unpack("<Q", prefix)
            if length > MAX_SAFETENSORS_HEADER_BYTES or length > size - 8:
                return f"its first 8 bytes give a header of {length} bytes, which it does not hold"
            raw = f.read(length)
    except OSError as e:
        return f"it cannot be read ({e.strerror or e})"
    if not raw.lstrip().startswith(b"{"):
        return "no JSON header after its length"
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        return "its header is not JSON"
    return "" if isinstance(header, dict) else "its header is not a JSON object"


def has_gguf_magic(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(4) == GGUF_MAGIC
    except OSError:
        return False


def check_local_weights(path: str | Path) -> LocalFormat:
    """The format of the weights at path, or NotWeights saying what the path is not.

    The path must exist (the caller says what a missing one means where it looks).
    """
    path = Path(path)
    if path.is_dir():
        return _check_dir(path)
    if not path.is_file():
        raise NotWeights(f"{path} is neither a file nor a directory of weights")
    name = path.name.lower()
    if name.endswith(".gguf"):
        if has_gguf_magic(path):
            return "gguf"
        raise NotWeights(
            f"{path} is not a GGUF file (no GGUF magic)",
            hint="the download may be incomplete or the file mislabelled; fetch it again",
        )
    if name.endswith(".safetensors"):
        if problem := safetensors_problem(path):
            raise NotWeights(f"{path} is not a safetensors file ({problem})")
        return "safetensors"
    if has_gguf_magic(path):
        return "gguf"
    problem = safetensors_problem(path)
    if not problem:
        return "safetensors"
    raise NotWeights(
        f"{path} is neither a GGUF file (no GGUF magic) nor a safetensors file ({problem})",
        hint="point the source at a model's .gguf file or its Hugging Face directory",
    )


def _check_dir(path: Path) -> LocalFormat:
    if not (path / "config.json").is_file():
        raise NotWeights(
            f"{path} is a directory without config.json: not a Hugging Face model directory",
            hint="point at the model's directory as downloaded, or at one .gguf file",
        )
    shards = sorted(path.glob("*.safetensors"))
    if not shards:
        raise NotWeights(
            f"{path} holds no .safetensors files",
            hint="models stored only as pickles (.bin) are not served; "
            "ask for the safetensors form",
        )
    for shard in shards:
        if problem := safetensors_problem(shard):
            raise NotWeights(f"{shard} is not a safetensors file ({problem})")
    return "hf-dir"
