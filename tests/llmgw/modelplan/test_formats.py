"""Local weights checked for what they are from their first bytes: GGUF, safetensors, a model dir."""

from __future__ import annotations

import pytest

from llmgw.modelplan.formats import NotWeights, check_local_weights
from tests.fakes.tiny_repo import make_tiny_repo, safetensors_bytes


def test_each_format_is_known_by_its_first_bytes(tmp_path):
    (tmp_path / "m.gguf").write_bytes(b"GGUF\x03\x00\x00\x00")
    (tmp_path / "noext").write_bytes(b"GGUF\x03\x00\x00\x00")
    (tmp_path / "w.safetensors").write_bytes(safetensors_bytes({"a": ("F16", [1], b"\0\0")}))
    assert check_local_weights(tmp_path / "m.gguf") == "gguf"
    assert check_local_weights(tmp_path / "noext") == "gguf"
    assert check_local_weights(tmp_path / "w.safetensors") == "safetensors"
    assert check_local_weights(make_tiny_repo().write(tmp_path / "tiny")) == "hf-dir"


@pytest.mark.parametrize(
    ("name", "data", "words"),
    [
        ("passwd", b"root:x:0:0:root:/root:/bin/bash\n", "neither a GGUF file (no GGUF magic)"),
        ("m.gguf", b"GGML", "is not a GGUF file (no GGUF magic)"),
        ("w.safetensors", b"\x05\x00", "shorter than a safetensors length prefix"),
        ("w.safetensors", b"\xff" * 8 + b"{}", "which it does not hold"),
        ("w.safetensors", b"\x04\0\0\0\0\0\0\0abcd", "no JSON header"),
        ("w.safetensors", b'\x04\0\0\0\0\0\0\0{"a"', "its header is not JSON"),
    ],
)
def test_a_file_that_is_not_weights_says_what_it_is_not(tmp_path, name, data, words):
    (tmp_path / name).write_bytes(data)
    with pytest.raises(NotWeights, match=words.replace("(", r"\(").replace(")", r"\)")):
        check_local_weights(tmp_path / name)


def test_a_directory_needs_a_config_and_safetensors(tmp_path):
    with pytest.raises(NotWeights, match="without config.json"):
        check_local_weights(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "pytorch_model.bin").write_bytes(b"x")
    with pytest.raises(NotWeights, match="holds no .safetensors files"):
        check_local_weights(tmp_path)
