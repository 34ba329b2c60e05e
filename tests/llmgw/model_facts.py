"""Model facts the planning and placement tests share, as the models' metadata reads."""

from __future__ import annotations

from llmgw.modelplan.types import ModelFacts

# Llama-3.3-70B in 16 bits: 80 layers, 8 KV heads of 128.
LLAMA_70B_F16 = ModelFacts(
    format="safetensors",
    architecture="llama",
    layers=80,
    attention_heads=64,
    kv_heads=8,
    head_dim=128,
    embedding_length=8192,
    trained_context=131072,
    quantisation="BF16",
    weights_bytes=141_000_000_000,
    parameters=70_500_000_000,
    active_weights_bytes=141_000_000_000,
)

LLAMA_8B_Q4 = ModelFacts(
    format="gguf",
    architecture="llama",
    layers=32,
    attention_heads=32,
    kv_heads=8,
    head_dim=128,
    embedding_length=4096,
    trained_context=131072,
    quantisation="Q4_K_M",
    weights_bytes=4_920_000_000,
    active_weights_bytes=4_920_000_000,
)
