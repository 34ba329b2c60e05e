"""Reading what planning needs from a Hugging Face model: config.json and safetensors headers.

One of the two readers of model planning (the other is gguf_meta). A
safetensors file opens with 8 bytes, a little-endian length, then that many
bytes of JSON naming every tensor's dtype, shape and offsets; the weights
follow. Only that header is read, so a plan costs kilobytes, not gigabytes.
read_hf itself is pure: it takes the parsed config and headers.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from llmgw.errors import UsageError
from llmgw.modelplan.types import ModelFacts

# The safetensors format caps its header at 100 MB; a larger length is not
# a safetensors file (or not one to trust).
MAX_HEADER_BYTES = 100_000_000

# Bits an element of each safetensors dtype takes (F4 and F6 are packed).
DTYPE_BITS: dict[str, int] = {
    "F64": 64,
    "I64": 64,
    "U64": 64,
    "F32": 32,
    "I32": 32,
    "U32": 32,
    "F16": 16,
    "BF16": 16,
    "I16": 16,
    "U16": 16,
    "F8_E4M3": 8,
    "F8_E5M2": 8,
    "F8_E8M0": 8,
    "I8": 8,
    "U8": 8,
    "BOOL": 8,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "F4": 4,
}

# config.json's names for the count of experts, as different families write it
# (Mixtral num_local_experts, Qwen-MoE num_experts, DeepSeek n_routed_experts).
_EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
_EXPERTS_USED_KEYS = ("num_experts_per_tok", "num_experts_per_token", "moe_topk")

_DTYPE_NAMES = {"bfloat16": "BF16", "float16": "F16", "float32": "F32", "float64": "F64"}


def read_safetensors_header(path: str | Path) -> dict[str, Any]:
    """The JSON header of the safetensors file at path (tensor name → dtype, shape, offsets)."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            prefix = f.read(8)
            if len(prefix) < 8:
                raise UsageError(f"{path}: not a safetensors file (too short)")
            (length,) = struct.unpack("<Q", prefix)
            size = path.stat().st_size
            if length > MAX_HEADER_BYTES or length > size - 8:
                raise UsageError(
                    f"{path}: not a safetensors file (its header would be {length} bytes)"
                )
            raw = f.read(length)
    except FileNotFoundError as e:
        raise UsageError(f"{path}: no such file") from e
    except IsADirectoryError as e:
        raise UsageError(f"{path}: is a directory, not a safetensors file") from e
    except OSError as e:
        raise UsageError(f"{path}: cannot be read ({e.strerror or e})") from e
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UsageError(f"{path}: not a safetensors file (its header is not JSON)") from e
    if not isinstance(header, dict):
        raise UsageError(f"{path}: not a safetensors file (its header is not a JSON object)")
    return header


def read_hf_dir(path: str | Path) -> ModelFacts:
    """The facts of the Hugging Face model in directory path (config.json + *.safetensors)."""
    path = Path(path)
    config_path = path / "config.json"
    try:
        config = json.loads(config_path.read_text())
    except FileNotFoundError as e:
        raise UsageError(
            f"{path}: no config.json", hint="point at the model's directory, as downloaded"
        ) from e
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UsageError(f"{config_path}: not readable JSON ({e})") from e
    if not isinstance(config, dict):
        raise UsageError(f"{config_path}: not a JSON object")
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise UsageError(
            f"{path}: no .safetensors files",
            hint="models stored as pickles (.bin) are not planned; ask for the safetensors form",
        )
    return read_hf(config, [read_safetensors_header(f) for f in files])


def read_hf(
    config: Mapping[str, Any], safetensors_headers: Sequence[Mapping[str, Any]]
) -> ModelFacts:
    """The facts of a model from its config.json and its safetensors headers (pure).

    Parameters and bytes come from the tensors' shapes and dtypes; the shape of
    attention and the trained context from the config. A model that also reads
    pictures is sized by its text_config.
    """
    text = _text_config(config)

    heads = _int(text, "num_attention_heads")
    hidden = _int(text, "hidden_size")
    experts = _first_int(text, _EXPERT_KEYS)
    experts_used = _first_int(text, _EXPERTS_USED_KEYS)

    parameters = 0
    weights_bytes = 0
    expert_bytes = 0
    bytes_by_dtype: dict[str, int] = {}
    for header in safetensors_headers:
        for name, tensor in header.items():
            if name == "__metadata__" or not isinstance(tensor, Mapping):
                continue
            elements, n_bytes = _tensor_size(name, tensor)
            parameters += elements
            weights_bytes += n_bytes
            dtype = str(tensor.get("dtype", ""))
            bytes_by_dtype[dtype] = bytes_by_dtype.get(dtype, 0) + n_bytes
            # ".experts." and not "shared_experts": shared experts run for every token.
            if ".experts." in name:
                expert_bytes += n_bytes

    active_bytes = weights_bytes
    if experts > 1 and experts_used > 0 and expert_bytes:
        active_bytes = weights_bytes - expert_bytes + expert_bytes * experts_used // experts

    return ModelFacts(
        format="safetensors",
        architecture=str(text.get("model_type") or config.get("model_type") or ""),
        layers=_int(text, "num_hidden_layers"),
        attention_heads=heads,
        # Absent means no grouped-query attention: one KV head per attention head.
        kv_heads=_int(text, "num_key_value_heads") or heads,
        head_dim=_int(text, "head_dim") or (hidden // heads if heads else 0),
        embedding_length=hidden,
        trained_context=_int(text, "max_position_embeddings"),
        quantisation=_quantisation(config, text, bytes_by_dtype),
        weights_bytes=weights_bytes,
        parameters=parameters,
        experts=experts if experts > 1 else 0,
        experts_used=experts_used if experts > 1 else 0,
        active_weights_bytes=active_bytes,
        # vLLM and SGLang keep the KV cache in the model's 16-bit dtype by default.
        kv_bytes_per_element=2,
        vocab_size=_int(text, "vocab_size") or _int(config, "vocab_size"),
    )


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    text = config.get("text_config")
    if isinstance(text, Mapping) and text.get("num_hidden_layers"):
        return text
    return config


def _int(config: Mapping[str, Any], key: str) -> int:
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return int(value)


def _first_int(config: Mapping[str, Any], keys: Sequence[str]) -> int:
    for key in keys:
        if value := _int(config, key):
            return value
    return 0


def _tensor_size(name: str, tensor: Mapping[str, Any]) -> tuple[int, int]:
    """(elements, bytes) of one header entry."""
    shape = tensor.get("shape", [])
    if not isinstance(shape, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise UsageError(f"tensor {name}: shape {shape!r} is not a list of sizes")
    elements = 1
    for dim in shape:
        elements *= dim
    dtype = str(tensor.get("dtype", ""))
    bits = DTYPE_BITS.get(dtype)
    if bits is None:
        # An unknown dtype: the offsets still say how many bytes it takes.
        offsets = tensor.get("data_offsets")
        if isinstance(offsets, list) and len(offsets) == 2:
            return elements, int(offsets[1]) - int(offsets[0])
        raise UsageError(f"tensor {name}: unknown dtype {dtype!r}")
    return elements, -(-elements * bits // 8)


def _quantisation(
    config: Mapping[str, Any], text: Mapping[str, Any], bytes_by_dtype: Mapping[str, int]
) -> str:
    quant = config.get("quantization_config") or text.get("quantization_config")
    if isinstance(quant, Mapping) and quant.get("quant_method"):
        method = str(quant["quant_method"]).upper()
        bits = quant.get("bits") or quant.get("w_bit")
        return f"{method}-{bits}bit" if isinstance(bits, int) and method != "FP8" else method
    if bytes_by_dtype:
        return max(bytes_by_dtype, key=bytes_by_dtype.__getitem__)
    dtype = text.get("torch_dtype") or text.get("dtype") or config.get("torch_dtype") or ""
    return _DTYPE_NAMES.get(str(dtype), str(dtype).upper())
