"""A small Hugging Face repository of safetensors, made by the test: a few MB, real headers.

The config is a real Llama-style ``config.json`` (as transformers writes it),
the tokenizer a real ``tokenizers`` WordLevel ``tokenizer.json``, and the
weights two safetensors shards written by hand in the format's own layout
(8-byte little-endian header length, JSON header, then the tensors' bytes),
with ``model.safetensors.index.json`` mapping every tensor to its shard. The
weights are random bf16 bits: nothing here runs inference on them, but every
size a reader can work out from the headers is exact.

    repo = make_tiny_repo()
    repo.files          # {"config.json": b"...", "model-00001-of-00002.safetensors": b"...", ...}
    repo.parameters     # the parameter count the headers add up to
    repo.write(tmp_path / "tiny")   # the same files in a directory
"""

from __future__ import annotations

import json
import random
import struct
from dataclasses import dataclass
from pathlib import Path

# bf16: two bytes an element.
_BF16_BYTES = 2


@dataclass(frozen=True)
class TinyRepo:
    """The files of a tiny model repository and what a reader should find in them."""

    files: dict[str, bytes]
    config: dict
    parameters: int
    weights_bytes: int
    shards: tuple[str, ...]

    def write(self, path: Path) -> Path:
        """The files under ``path`` (made), as a downloaded repository lies on disk."""
        path = Path(path)
        for name, data in self.files.items():
            dest = path / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
        return path


def safetensors_bytes(tensors: dict[str, tuple[str, list[int], bytes]], metadata=None) -> bytes:
    """A safetensors file of ``{name: (dtype, shape, raw bytes)}``, laid out as the format says.

    The header is padded with spaces to a multiple of 8 bytes, as the
    reference writer does, so the data that follows is aligned.
    """
    header: dict = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    offset = 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(raw for _, _, raw in tensors.values())


def _llama_shapes(cfg: dict) -> dict[str, list[int]]:
    hidden, inter = cfg["hidden_size"], cfg["intermediate_size"]
    head_dim = hidden // cfg["num_attention_heads"]
    kv = cfg["num_key_value_heads"] * head_dim
    shapes = {"model.embed_tokens.weight": [cfg["vocab_size"], hidden]}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}"
        shapes |= {
            f"{p}.input_layernorm.weight": [hidden],
            f"{p}.self_attn.q_proj.weight": [hidden, hidden],
            f"{p}.self_attn.k_proj.weight": [kv, hidden],
            f"{p}.self_attn.v_proj.weight": [kv, hidden],
            f"{p}.self_attn.o_proj.weight": [hidden, hidden],
            f"{p}.post_attention_layernorm.weight": [hidden],
            f"{p}.mlp.gate_proj.weight": [inter, hidden],
            f"{p}.mlp.up_proj.weight": [inter, hidden],
            f"{p}.mlp.down_proj.weight": [hidden, inter],
        }
    shapes["model.norm.weight"] = [hidden]
    shapes["lm_head.weight"] = [cfg["vocab_size"], hidden]
    return shapes


def _tokenizer(vocab_size: int) -> dict:
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab |= {f"t{i}": i for i in range(3, vocab_size)}
    special = [
        {
            "id": i,
            "content": tok,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for tok, i in (("<unk>", 0), ("<s>", 1), ("</s>", 2))
    ]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": special,
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
    }


def make_tiny_repo(
    *,
    vocab_size: int = 8192,
    hidden_size: int = 128,
    layers: int = 4,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate_size: int = 256,
    max_position_embeddings: int = 4096,
    seed: int = 0,
) -> TinyRepo:
    """A Llama-style repository in two safetensors shards (about 5.4 MB with the defaults)."""
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab_size,
        "hidden_size": hidden_size,
        "intermediate_size": intermediate_size,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "max_position_embeddings": max_position_embeddings,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.46.0",
    }
    rng = random.Random(seed)
    shapes = _llama_shapes(config)
    names = list(shapes)
    # The first shard: the embeddings and the first half of the layers.
    cut = names.index(f"model.layers.{max(layers // 2, 1)}.input_layernorm.weight")
    shard_names = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
    parts = (names[:cut], names[cut:])
    files: dict[str, bytes] = {}
    weight_map: dict[str, str] = {}
    parameters = total = 0
    for shard, part in zip(shard_names, parts, strict=True):
        tensors = {}
        for name in part:
            shape = shapes[name]
            n = 1
            for d in shape:
                n *= d
            parameters += n
            raw = rng.randbytes(n * _BF16_BYTES)
            total += len(raw)
            tensors[name] = ("BF16", shape, raw)
            weight_map[name] = shard
        files[shard] = safetensors_bytes(tensors, {"format": "pt"})
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    files["model.safetensors.index.json"] = _json(index)
    files["config.json"] = _json(config)
    files["generation_config.json"] = _json(
        {"bos_token_id": 1, "eos_token_id": 2, "transformers_version": "4.46.0"}
    )
    files["tokenizer.json"] = _json(_tokenizer(vocab_size))
    files["tokenizer_config.json"] = _json(
        {
            "bos_token": "<s>",
            "eos_token": "</s>",
            "unk_token": "<unk>",
            "model_max_length": max_position_embeddings,
            "tokenizer_class": "PreTrainedTokenizerFast",
            "chat_template": "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n"
            "{% endfor %}assistant:",
        }
    )
    files["special_tokens_map.json"] = _json(
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    )
    files["README.md"] = b"# tiny\n\nA tiny Llama-style model with random weights, for tests.\n"
    return TinyRepo(files, config, parameters, total, shard_names)


def _json(obj) -> bytes:
    return (json.dumps(obj, indent=2) + "\n").encode()
