"""A tiny llama-architecture GGUF with random weights that llama.cpp loads and runs (a few MB).

Written with the ``gguf`` package (llama.cpp's own writer): two layers,
width 256, a byte-fallback SentencePiece vocabulary of 259 tokens, float32.
Its answers are noise; it exists to be loaded, put on a card and asked.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

EMBED = 256
FF = 512
LAYERS = 2
HEADS = 4
KV_HEADS = 2
CONTEXT = 512


def _vocab() -> tuple[list[str], list[float], list[int]]:
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [
        gguf.TokenType.UNKNOWN,
        gguf.TokenType.CONTROL,
        gguf.TokenType.CONTROL,
    ] + [gguf.TokenType.BYTE] * 256
    return tokens, [0.0] * len(tokens), [int(t) for t in types]


def write_tiny_llama_gguf(path: Path, *, seed: int = 0) -> Path:
    """Write the model to ``path`` and return it."""
    rng = np.random.default_rng(seed)
    tokens, scores, types = _vocab()
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("llmgw-tiny-random")
    w.add_context_length(CONTEXT)
    w.add_embedding_length(EMBED)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FF)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(EMBED // HEADS)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)

    def weight(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    kv = EMBED // HEADS * KV_HEADS
    # numpy shapes are (rows, columns): ggml's dimensions reversed.
    w.add_tensor("token_embd.weight", weight(len(tokens), EMBED))
    w.add_tensor("output_norm.weight", np.ones(EMBED, dtype=np.float32))
    w.add_tensor("output.weight", weight(len(tokens), EMBED))
    for i in range(LAYERS):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(EMBED, dtype=np.float32))
        w.add_tensor(f"blk.{i}.attn_q.weight", weight(EMBED, EMBED))
        w.add_tensor(f"blk.{i}.attn_k.weight", weight(kv, EMBED))
        w.add_tensor(f"blk.{i}.attn_v.weight", weight(kv, EMBED))
        w.add_tensor(f"blk.{i}.attn_output.weight", weight(EMBED, EMBED))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(EMBED, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", weight(FF, EMBED))
        w.add_tensor(f"blk.{i}.ffn_up.weight", weight(FF, EMBED))
        w.add_tensor(f"blk.{i}.ffn_down.weight", weight(EMBED, FF))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
