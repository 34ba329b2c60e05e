"""Reading a Hugging Face model: config.json and safetensors headers written by hand."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from llmgw.errors import UsageError
from llmgw.modelplan.hf_meta import read_hf, read_hf_dir, read_safetensors_header

LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
}

MIXTRAL_CONFIG = {
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
    "max_position_embeddings": 32768,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "torch_dtype": "bfloat16",
}


def tensor(dtype: str, shape: list[int]) -> dict:
    return {"dtype": dtype, "shape": shape, "data_offsets": [0, 0]}


def write_safetensors(path: Path, header: dict, data: bytes = b"") -> Path:
    """The format by hand: 8 bytes of little-endian length, the JSON, the data."""
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


def llama_header() -> dict:
    return {
        "__metadata__": {"format": "pt"},
        "model.embed_tokens.weight": tensor("BF16", [1000, 4096]),
        "model.layers.0.self_attn.q_proj.weight": tensor("BF16", [4096, 4096]),
        "model.layers.0.self_attn.k_proj.weight": tensor("BF16", [1024, 4096]),
        "model.layers.0.mlp.up_proj.weight": tensor("BF16", [14336, 4096]),
        "model.norm.weight": tensor("F32", [4096]),
    }


def mixtral_header() -> dict:
    header = {"model.embed_tokens.weight": tensor("BF16", [1000, 4096])}
    for e in range(8):
        header[f"model.layers.0.block_sparse_moe.experts.{e}.w1.weight"] = tensor(
            "BF16", [14336, 4096]
        )
    header["model.layers.0.block_sparse_moe.gate.weight"] = tensor("BF16", [8, 4096])
    return header


def test_a_llama_like_model_gives_its_shape_and_its_bytes_from_the_tensors():
    facts = read_hf(LLAMA_CONFIG, [llama_header()])
    assert facts.format == "safetensors"
    assert facts.architecture == "llama"
    assert (facts.layers, facts.attention_heads, facts.kv_heads) == (32, 32, 8)
    assert facts.head_dim == 4096 // 32
    assert facts.trained_context == 131072
    elements_bf16 = 1000 * 4096 + 4096 * 4096 + 1024 * 4096 + 14336 * 4096
    assert facts.parameters == elements_bf16 + 4096
    assert facts.weights_bytes == elements_bf16 * 2 + 4096 * 4
    assert facts.active_weights_bytes == facts.weights_bytes
    assert facts.quantisation == "BF16"
    assert facts.experts == 0


def test_a_mixtral_like_model_reads_two_of_its_eight_experts():
    facts = read_hf(MIXTRAL_CONFIG, [mixtral_header()])
    assert (facts.experts, facts.experts_used) == (8, 2)
    expert = 14336 * 4096 * 2
    dense = (1000 * 4096 + 8 * 4096) * 2
    assert facts.weights_bytes == dense + 8 * expert
    assert facts.active_weights_bytes == dense + 2 * expert


def test_several_files_add_up():
    one = read_hf(LLAMA_CONFIG, [llama_header()])
    two = read_hf(LLAMA_CONFIG, [llama_header(), llama_header()])
    assert two.weights_bytes == 2 * one.weights_bytes


def test_experts_are_read_by_any_of_their_names():
    config = {**LLAMA_CONFIG, "n_routed_experts": 256, "num_experts_per_tok": 8}
    assert read_hf(config, [llama_header()]).experts == 256
    config = {**LLAMA_CONFIG, "num_experts": 128, "num_experts_per_tok": 8}
    assert read_hf(config, [llama_header()]).experts_used == 8


def test_an_explicit_head_dim_wins_over_hidden_over_heads():
    # Qwen3 and Gemma set head_dim apart from hidden_size / heads.
    config = {**LLAMA_CONFIG, "head_dim": 256}
    assert read_hf(config, [llama_header()]).head_dim == 256


def test_without_kv_heads_every_attention_head_has_its_own():
    config = {k: v for k, v in LLAMA_CONFIG.items() if k != "num_key_value_heads"}
    assert read_hf(config, [llama_header()]).kv_heads == 32


def test_a_model_that_also_reads_pictures_is_sized_by_its_text_config():
    config = {"model_type": "llava", "text_config": LLAMA_CONFIG, "vision_config": {}}
    facts = read_hf(config, [llama_header()])
    assert (facts.architecture, facts.layers, facts.kv_heads) == ("llama", 32, 8)


def test_a_quantised_checkpoint_is_named_by_its_method():
    config = {**LLAMA_CONFIG, "quantization_config": {"quant_method": "fp8"}}
    assert read_hf(config, [llama_header()]).quantisation == "FP8"
    config = {**LLAMA_CONFIG, "quantization_config": {"quant_method": "awq", "bits": 4}}
    assert read_hf(config, [llama_header()]).quantisation == "AWQ-4bit"


def test_fp8_and_packed_fp4_tensors_are_sized_by_their_bits():
    header = {"a": tensor("F8_E4M3", [10, 10]), "b": tensor("F4", [10, 10])}
    assert read_hf(LLAMA_CONFIG, [header]).weights_bytes == 100 + 50


def test_a_directory_is_read_from_its_config_and_headers_only(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(MIXTRAL_CONFIG))
    # The data after the header is never read: it may be anything.
    write_safetensors(tmp_path / "model-00001.safetensors", mixtral_header(), b"x" * 64)
    write_safetensors(tmp_path / "model-00002.safetensors", llama_header())
    facts = read_hf_dir(tmp_path)
    assert facts == read_hf(MIXTRAL_CONFIG, [mixtral_header(), llama_header()])


def test_the_header_is_the_json_after_the_length(tmp_path):
    path = write_safetensors(tmp_path / "m.safetensors", llama_header(), b"\0" * 16)
    assert read_safetensors_header(path) == llama_header()


def test_a_length_past_the_file_is_not_a_safetensors_file(tmp_path):
    path = tmp_path / "m.safetensors"
    path.write_bytes(struct.pack("<Q", 10_000) + b"{}")
    with pytest.raises(UsageError, match="not a safetensors file"):
        read_safetensors_header(path)


def test_a_gguf_file_is_not_a_safetensors_file(tmp_path):
    path = tmp_path / "m.safetensors"
    path.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\0" * 64)
    with pytest.raises(UsageError, match="not a safetensors file"):
        read_safetensors_header(path)


def test_a_header_that_is_not_json_is_refused(tmp_path):
    path = tmp_path / "m.safetensors"
    path.write_bytes(struct.pack("<Q", 4) + b"nope")
    with pytest.raises(UsageError, match="not JSON"):
        read_safetensors_header(path)


def test_a_directory_without_config_says_so(tmp_path):
    write_safetensors(tmp_path / "m.safetensors", llama_header())
    with pytest.raises(UsageError, match="no config.json"):
        read_hf_dir(tmp_path)


def test_a_directory_of_pickles_only_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_CONFIG))
    (tmp_path / "pytorch_model.bin").write_bytes(b"\0")
    with pytest.raises(UsageError, match="no .safetensors files"):
        read_hf_dir(tmp_path)


def test_a_shape_that_is_not_sizes_is_refused():
    with pytest.raises(UsageError, match="shape"):
        read_hf(LLAMA_CONFIG, [{"a": {"dtype": "BF16", "shape": "big"}}])


def test_the_vocabulary_size_comes_from_the_config_or_its_text_config():
    assert read_hf({**LLAMA_CONFIG, "vocab_size": 128256}, [llama_header()]).vocab_size == 128256
    text = {**LLAMA_CONFIG, "vocab_size": 262208}
    config = {"model_type": "gemma3", "text_config": text, "vision_config": {}}
    assert read_hf(config, [llama_header()]).vocab_size == 262208
