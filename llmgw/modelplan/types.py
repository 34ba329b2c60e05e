"""What planning knows of a model and what it proposes."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class ModelFacts(BaseModel):
    """Read from GGUF metadata or a Hugging Face config.json + safetensors headers."""

    format: Literal["gguf", "safetensors"]
    architecture: str = ""
    layers: int = 0
    attention_heads: int = 0
    kv_heads: int = 0
    head_dim: int = 0
    embedding_length: int = 0
    trained_context: int = 0
    quantisation: str = ""
    weights_bytes: int = 0
    parameters: int = 0
    # Mixture of experts: total experts, experts used per token.
    experts: int = 0
    experts_used: int = 0
    # Bytes of weights read per token (MoE: only the active part).
    active_weights_bytes: int = 0
    # Bytes per element of the KV cache (2 for f16/bf16).
    kv_bytes_per_element: int = 2
    # Tokens in the vocabulary (0: not known): the gateway refuses token ids
    # past it, which engines answered with a 500.
    vocab_size: int = 0


class CardNeed(BaseModel):
    """The memory one card holds for one shard of a layout."""

    weights_bytes: int
    kv_bytes: int
    overhead_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_bytes + self.overhead_bytes


class Layout(BaseModel):
    """One way to run the model: on N cards of one node, or on CPU."""

    kind: Literal["gpu", "cpu"]
    # The card's name as NVML reports it ("NVIDIA H100 80GB HBM3") and the
    # 90% of its memory planning may use; empty for a CPU layout.
    card_name: str = ""
    card_usable_bytes: int = 0
    gpus: int = 0
    tensor_parallel: int = 1
    expert_parallel: bool = False
    per_card: CardNeed | None = None
    # CPU layouts: host memory needed.
    host_memory_bytes: int = 0
    context: int = 0
    tokens_per_s: float = 0.0
    notes: list[str] = Field(default_factory=list)
    # plan_for_inventories: nodes of the shapes this layout was planned on
    # (the first HOSTS_NAMED of them; a note counts them all).
    hosts: list[str] = Field(default_factory=list)


class Plan(BaseModel):
    """Every layout that could run the model, best first, or why none can."""

    facts: ModelFacts
    context: int
    kv_bytes_per_token: int
    layouts: list[Layout] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    refused: str = ""
    # Card name -> why the plan has no layout on those cards ("fp8 weights
    # need compute capability 8.9 or newer; …"): placement's reason for
    # their nodes. Not sent (the notes say it); a plan's reader is placement.
    card_refusals: dict[str, str] = Field(default_factory=dict, exclude=True)
