"""Reading a GGUF file's header: synthetic files written with gguf.GGUFWriter, and a real one."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from llmgw.errors import UsageError
from llmgw.modelplan.gguf_meta import quantisation_name, read_gguf, read_gguf_header


def write_gguf(
    path: Path,
    *,
    arch: str = "llama",
    layers: int = 2,
    heads: int = 4,
    kv_heads: int | None = 2,
    embedding: int = 64,
    key_length: int | None = 16,
    context: int = 4096,
    file_type: int | None = int(gguf.LlamaFileType.MOSTLY_Q4_K_M),
    experts: int = 0,
    experts_used: int = 0,
    tokens: int = 300,
    extra: dict | None = None,
) -> Path:
    """A small but well-formed GGUF: the metadata llama.cpp writes and a few tensors."""
    w = gguf.GGUFWriter(path, arch=arch)
    w.add_block_count(layers)
    w.add_context_length(context)
    w.add_embedding_length(embedding)
    w.add_head_count(heads)
    if kv_heads is not None:
        w.add_head_count_kv(kv_heads)
    if key_length is not None:
        w.add_key_length(key_length)
    if file_type is not None:
        w.add_file_type(file_type)
    if experts:
        w.add_expert_count(experts)
        w.add_expert_used_count(experts_used)
    # A vocabulary, as every real model has: an array of strings to skip.
    w.add_token_list([f"tok{i}" for i in range(tokens)])
    w.add_token_scores([0.0] * tokens)
    for key, value in (extra or {}).items():
        w.add_uint32(key, value)
    w.add_tensor("token_embd.weight", np.zeros((tokens, embedding), dtype=np.float16))
    for layer in range(layers):
        w.add_tensor(f"blk.{layer}.attn_q.weight", np.zeros((embedding, embedding), np.float32))
        if experts:
            w.add_tensor(
                f"blk.{layer}.ffn_up_exps.weight",
                np.zeros((experts, 32, embedding), np.float32),
            )
            w.add_tensor(f"blk.{layer}.ffn_up_shexp.weight", np.zeros((32, embedding), np.float32))
        else:
            w.add_tensor(f"blk.{layer}.ffn_up.weight", np.zeros((32, embedding), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_a_dense_model_gives_its_shape_context_and_quantisation(tmp_path):
    path = write_gguf(tmp_path / "m.gguf")
    facts = read_gguf(path)
    assert facts.format == "gguf"
    assert facts.architecture == "llama"
    assert (facts.layers, facts.attention_heads, facts.kv_heads) == (2, 4, 2)
    assert (facts.head_dim, facts.embedding_length) == (16, 64)
    assert facts.trained_context == 4096
    assert facts.quantisation == "Q4_K_M"
    assert facts.weights_bytes == path.stat().st_size
    assert facts.active_weights_bytes == facts.weights_bytes
    assert facts.parameters == 300 * 64 + 2 * (64 * 64 + 32 * 64)
    assert facts.experts == 0
    assert facts.kv_bytes_per_element == 2


def test_without_key_length_the_head_dim_is_embedding_over_heads(tmp_path):
    facts = read_gguf(write_gguf(tmp_path / "m.gguf", key_length=None, embedding=128, heads=8))
    assert facts.head_dim == 16


def test_without_kv_heads_every_attention_head_has_its_own(tmp_path):
    # Older (pre-GQA) models write no head_count_kv.
    facts = read_gguf(write_gguf(tmp_path / "m.gguf", kv_heads=None, heads=4))
    assert facts.kv_heads == 4


def test_a_model_of_experts_reads_its_dense_part_and_its_share_of_the_experts(tmp_path):
    path = write_gguf(tmp_path / "moe.gguf", arch="qwen3moe", experts=8, experts_used=2)
    facts = read_gguf(path)
    assert (facts.experts, facts.experts_used) == (8, 2)
    expert_bytes = 2 * 8 * 32 * 64 * 4  # layers × experts × 32 × 64 f32
    dense = facts.weights_bytes - expert_bytes
    assert facts.active_weights_bytes == dense + expert_bytes * 2 // 8


def test_without_a_file_type_the_quantisation_is_the_type_holding_most_bytes(tmp_path):
    facts = read_gguf(write_gguf(tmp_path / "m.gguf", file_type=None))
    assert facts.quantisation == "F32"


@pytest.mark.parametrize(
    ("file_type", "name"),
    [
        (0, "F32"),
        (1, "F16"),
        (7, "Q8_0"),
        (15, "Q4_K_M"),
        (17, "Q5_K_M"),
        (18, "Q6_K"),
        (32, "BF16"),
        (9999, "ftype 9999"),
    ],
)
def test_llama_cpp_file_types_have_their_names(file_type, name):
    assert quantisation_name(file_type) == name


def test_the_header_walk_agrees_with_gguf_reader(tmp_path):
    # Guards our own walk of the header (used for speed) against the
    # library's reader: same keys' values, same tensors, same sizes.
    path = write_gguf(tmp_path / "moe.gguf", experts=4, experts_used=2)
    ours = read_gguf_header(path)
    theirs = gguf.GGUFReader(path)
    for key, field in theirs.fields.items():
        if key.startswith("GGUF.") or key == "tokenizer.ggml.tokens":
            continue
        assert ours.fields[key] == field.contents(), key
    assert [(t.name, t.n_elements, t.n_bytes) for t in ours.tensors] == [
        (t.name, int(t.n_elements), int(t.n_bytes)) for t in theirs.tensors
    ]
    assert ours.fields["tokenizer.ggml.tokens"] is None  # skipped, not decoded


def test_a_split_model_counts_every_part(tmp_path):
    first = write_gguf(tmp_path / "m-00001-of-00002.gguf", extra={"split.count": 2})
    (tmp_path / "m-00002-of-00002.gguf").write_bytes(b"\0" * 1000)
    assert read_gguf(first).weights_bytes == first.stat().st_size + 1000


def test_a_split_model_with_a_part_missing_says_which(tmp_path):
    first = write_gguf(tmp_path / "m-00001-of-00003.gguf", extra={"split.count": 3})
    (tmp_path / "m-00002-of-00003.gguf").write_bytes(b"\0")
    with pytest.raises(UsageError, match="m-00003-of-00003.gguf"):
        read_gguf(first)


def test_a_file_that_is_not_gguf_is_refused_in_plain_words(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{}")
    with pytest.raises(UsageError, match="not a GGUF file"):
        read_gguf(path)


def test_an_empty_file_is_not_gguf(tmp_path):
    path = tmp_path / "empty.gguf"
    path.write_bytes(b"")
    with pytest.raises(UsageError, match="not a GGUF file"):
        read_gguf(path)


def test_a_file_cut_short_says_it_may_be_incomplete(tmp_path):
    whole = write_gguf(tmp_path / "m.gguf").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole[:200])  # inside the vocabulary
    with pytest.raises(UsageError, match="not a readable GGUF file") as e:
        read_gguf(cut)
    assert "fetch it again" in e.value.hint


def test_a_missing_file_says_so(tmp_path):
    with pytest.raises(UsageError, match="no such file"):
        read_gguf(tmp_path / "nope.gguf")


def test_a_directory_is_not_a_gguf_file(tmp_path):
    with pytest.raises(UsageError, match="is a directory"):
        read_gguf(tmp_path)


def test_the_real_gemma3_270m_from_pypi(gemma3_270m_gguf):
    facts = read_gguf(gemma3_270m_gguf)
    assert facts.architecture == "gemma3"
    assert facts.layers == 18
    assert facts.trained_context == 32768
    assert facts.quantisation == "Q4_K_M"
    assert (facts.attention_heads, facts.kv_heads, facts.head_dim) == (4, 1, 256)
    assert facts.weights_bytes == gemma3_270m_gguf.stat().st_size
    # "270m": the tensor table's count, not a figure written in the metadata.
    assert 250_000_000 < facts.parameters < 290_000_000


def test_the_vocabulary_size_is_the_length_of_the_token_list_that_is_skipped(tmp_path):
    # The gateway refuses token ids past it (llama.cpp's server answered them with a 500).
    path = write_gguf(tmp_path / "m.gguf", tokens=300)
    assert read_gguf(path).vocab_size == 300
    header = read_gguf_header(path)
    assert header.fields["tokenizer.ggml.tokens"] is None
    assert header.array_lengths["tokenizer.ggml.tokens"] == 300


def test_the_real_gemma3_270m_has_262144_tokens(gemma3_270m_gguf):
    assert read_gguf(gemma3_270m_gguf).vocab_size == 262_144
