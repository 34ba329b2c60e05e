"""Reading what planning needs from a GGUF file's header, with the gguf library's tables.

One of the two readers of model planning (the other is hf_meta): the only
modules of llmgw.modelplan that touch files. Only the header is read: the
metadata and the tensor table, never the weights.

The gguf library gives the format's value types, its quantisation block sizes
and llama.cpp's file-type names. Its GGUFReader is not used to parse: it
builds numpy views of every element of every metadata array, which for a
262,144-token vocabulary (gemma-3) took 12 s a file; the walk below skips the
arrays it does not need and reads the same header in a fraction of a second.
The tests check it against GGUFReader.
"""

from __future__ import annotations

import mmap
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gguf

from llmgw.errors import UsageError
from llmgw.modelplan.types import ModelFacts

GGUF_MAGIC = b"GGUF"
# Versions 2 and 3 (64-bit counts), as gguf.GGUFReader supports; 1 is long gone.
SUPPORTED_VERSIONS = (2, 3)

# Tensors holding a layer's experts: llama.cpp names them ffn_{gate,up,down}_exps
# (or ffn_gate_up_exps); shared experts are ffn_*_shexp and always run.
_EXPERT_TENSOR = re.compile(r"_exps\.")

# A file of a split model: name-00001-of-00003.gguf.
_SPLIT_NAME = re.compile(r"^(?P<stem>.*)-(?P<part>\d{5})-of-(?P<count>\d{5})\.gguf$")

_VT = gguf.GGUFValueType
_SCALAR_FORMAT = {
    _VT.UINT8: "B",
    _VT.INT8: "b",
    _VT.UINT16: "H",
    _VT.INT16: "h",
    _VT.UINT32: "I",
    _VT.INT32: "i",
    _VT.FLOAT32: "f",
    _VT.BOOL: "?",
    _VT.UINT64: "Q",
    _VT.INT64: "q",
    _VT.FLOAT64: "d",
}


@dataclass(frozen=True)
class GgufTensor:
    """One entry of the tensor table."""

    name: str
    shape: tuple[int, ...]
    type_name: str
    n_elements: int
    n_bytes: int


@dataclass
class GgufHeader:
    """A GGUF file's metadata (arrays of strings left out) and tensor table.

    ``array_lengths``: the length of each array of strings left out (the
    vocabulary's is the model's vocabulary size).
    """

    version: int
    fields: dict[str, Any] = field(default_factory=dict)
    tensors: list[GgufTensor] = field(default_factory=list)
    array_lengths: dict[str, int] = field(default_factory=dict)


def read_gguf(path: str | Path) -> ModelFacts:
    """The facts of the GGUF model at path: shape, trained context, quantisation, size.

    weights_bytes is the file's size (all parts' for a split model): what the
    engine loads. Raises UsageError in plain words for a missing, unreadable,
    cut-short or non-GGUF file.
    """
    path = Path(path)
    header = read_gguf_header(path)
    return gguf_facts(header, _weights_bytes(path, header.fields))


def gguf_facts(header: GgufHeader, weights_bytes: int) -> ModelFacts:
    """The facts of a GGUF header whose file (all parts of it) holds ``weights_bytes``."""
    fields = header.fields
    arch = str(fields.get("general.architecture") or "")

    def arch_int(key: str) -> int:
        return _as_int(fields.get(f"{arch}.{key}"))

    layers = arch_int("block_count")
    heads = arch_int("attention.head_count")
    # Absent means no grouped-query attention: one KV head per attention head.
    kv_heads = arch_int("attention.head_count_kv") or heads
    embedding = arch_int("embedding_length")
    head_dim = arch_int("attention.key_length") or (embedding // heads if heads else 0)
    experts = arch_int("expert_count")
    experts_used = arch_int("expert_used_count")

    parameters = sum(t.n_elements for t in header.tensors)
    expert_bytes = sum(t.n_bytes for t in header.tensors if _EXPERT_TENSOR.search(t.name))

    active_bytes = weights_bytes
    if experts > 1 and experts_used > 0 and expert_bytes:
        # Every token reads the dense part and experts_used of the experts.
        dense = weights_bytes - expert_bytes
        active_bytes = dense + expert_bytes * experts_used // experts

    return ModelFacts(
        format="gguf",
        architecture=arch,
        layers=layers,
        attention_heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        embedding_length=embedding,
        trained_context=arch_int("context_length"),
        quantisation=_quantisation(fields.get("general.file_type"), header.tensors),
        weights_bytes=weights_bytes,
        parameters=parameters,
        experts=experts,
        experts_used=experts_used,
        active_weights_bytes=active_bytes,
        # llama.cpp keeps its KV cache in f16 unless told otherwise.
        kv_bytes_per_element=2,
        vocab_size=header.array_lengths.get("tokenizer.ggml.tokens") or arch_int("vocab_size"),
    )


def read_gguf_header(path: str | Path) -> GgufHeader:
    """The metadata and tensor table of the GGUF file at path.

    Numbers and strings are kept, arrays of numbers as lists; arrays of
    strings (vocabularies, merges) are skipped and stored as None, their
    lengths kept in ``array_lengths``.
    """
    path = Path(path)
    try:
        with path.open("rb") as f:
            if f.read(4) != GGUF_MAGIC:
                raise UsageError(
                    f"{path}: not a GGUF file",
                    hint="a Hugging Face model is a directory of config.json and "
                    ".safetensors files",
                )
            # Mapped, not read: the walk touches only the header's pages.
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                return _Walk(buf).header()
    except FileNotFoundError as e:
        raise UsageError(f"{path}: no such file") from e
    except IsADirectoryError as e:
        raise UsageError(f"{path}: is a directory, not a GGUF file") from e
    except (struct.error, IndexError, UnicodeDecodeError, _Malformed) as e:
        raise UsageError(
            f"{path}: not a readable GGUF file ({e})",
            hint="it may be cut short: fetch it again and check its sha256",
        ) from e
    except OSError as e:
        raise UsageError(f"{path}: cannot be read ({e.strerror or e})") from e


def parse_gguf_prefix(prefix: bytes, *, whole: bool = False) -> GgufHeader | None:
    """The header of a GGUF file from its first bytes; None when they end before it does.

    For a header read over the network a piece at a time (llmgw/hub/gguf_remote.py).
    ``whole``: the bytes are the whole file, so ending early is a cut-short file.
    Raises UsageError for bytes that are not GGUF or say what no writer would.
    """
    if len(prefix) < 4:
        if whole:
            raise UsageError("not a GGUF file (shorter than its magic number)")
        return None
    if prefix[:4] != GGUF_MAGIC:
        raise UsageError(
            "not a GGUF file",
            hint="a Hugging Face model is a directory of config.json and .safetensors files",
        )
    try:
        return _Walk(prefix).header()
    except (struct.error, IndexError, _PastTheEnd) as e:
        if whole:
            raise UsageError(
                f"not a readable GGUF file ({e})",
                hint="it may be cut short: fetch it again and check its sha256",
            ) from e
        return None
    except (UnicodeDecodeError, _Malformed) as e:
        raise UsageError(f"not a readable GGUF file ({e})") from e


class _Malformed(Exception):
    """The header says something no GGUF writer would."""


class _PastTheEnd(_Malformed):
    """A length that runs past the bytes there are (a cut-short file, or a prefix of one)."""


class _Walk:
    """A cursor over a mapped GGUF header."""

    def __init__(self, buf: mmap.mmap | bytes) -> None:
        self.buf = buf
        self.pos = 4
        self.order = "<"
        # The length of the array of strings value() last skipped.
        self.skipped: int | None = None

    def unpack(self, fmt: str) -> Any:
        (value,) = struct.unpack_from(self.order + fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.unpack("Q")
        if self.pos + n > len(self.buf):
            raise _PastTheEnd("a string runs past the end of the file")
        text = self.buf[self.pos : self.pos + n].decode("utf-8")
        self.pos += n
        return text

    def value(self, value_type: int) -> Any:
        if value_type == _VT.STRING:
            return self.string()
        if value_type == _VT.ARRAY:
            item_type = self.unpack("I")
            count = self.unpack("Q")
            if item_type == _VT.STRING:
                self.skipped = count
                for _ in range(count):
                    n = self.unpack("Q")  # (not `pos += unpack()`: unpack moves pos)
                    self.pos += n
                if self.pos > len(self.buf):
                    raise _PastTheEnd("an array runs past the end of the file")
                return None
            if item_type == _VT.ARRAY:
                return [self.value(_VT.ARRAY) for _ in range(count)]
            fmt = self.order + str(count) + self._format(item_type)
            items = list(struct.unpack_from(fmt, self.buf, self.pos))
            self.pos += struct.calcsize(fmt)
            return items
        return self.unpack(self._format(value_type))

    @staticmethod
    def _format(value_type: int) -> str:
        try:
            return _SCALAR_FORMAT[_VT(value_type)]
        except (ValueError, KeyError) as e:
            raise _Malformed(f"unknown value type {value_type}") from e

    def header(self) -> GgufHeader:
        version = self.unpack("I")
        if version & 0xFFFF == 0:
            # Written on a big-endian machine: every number is the other way round.
            self.order = ">"
            version = struct.unpack(">I", struct.pack("<I", version))[0]
        if version not in SUPPORTED_VERSIONS:
            raise _Malformed(f"GGUF version {version}; versions 2 and 3 are read")
        tensor_count = self.unpack("Q")
        kv_count = self.unpack("Q")
        result = GgufHeader(version=version)
        for _ in range(kv_count):
            key = self.string()
            self.skipped = None
            result.fields[key] = self.value(self.unpack("I"))
            if self.skipped is not None:
                result.array_lengths[key] = self.skipped
        for _ in range(tensor_count):
            result.tensors.append(self._tensor())
        return result

    def _tensor(self) -> GgufTensor:
        name = self.string()
        n_dims = self.unpack("I")
        shape = tuple(self.unpack("Q") for _ in range(n_dims))
        type_id = self.unpack("I")
        self.unpack("Q")  # offset into the data section
        try:
            qtype = gguf.GGMLQuantizationType(type_id)
            block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
        except (ValueError, KeyError) as e:
            raise _Malformed(f"tensor {name} has unknown type {type_id}") from e
        n_elements = 1
        for dim in shape:
            n_elements *= dim
        return GgufTensor(
            name=name,
            shape=shape,
            type_name=qtype.name,
            n_elements=n_elements,
            n_bytes=n_elements // block_size * type_size,
        )


def quantisation_name(file_type: int) -> str:
    """llama.cpp's name for a general.file_type number: 15 → "Q4_K_M", 1 → "F16"."""
    try:
        name = gguf.LlamaFileType(file_type).name
    except ValueError:
        return f"ftype {file_type}"
    for prefix in ("MOSTLY_", "ALL_"):
        name = name.removeprefix(prefix)
    return name


def _as_int(value: Any) -> int:
    # Some architectures give a per-layer array (head_count_kv of a hybrid
    # model, 0 for its recurrent layers); the largest sizes the cache safely.
    if isinstance(value, list):
        numbers = [v for v in value if isinstance(v, int | float)]
        return int(max(numbers)) if numbers else 0
    if isinstance(value, int | float):
        return int(value)
    return 0


def _quantisation(file_type: Any, tensors: list[GgufTensor]) -> str:
    if isinstance(file_type, int) and not isinstance(file_type, bool):
        return quantisation_name(file_type)
    # No file_type (older converters): the type holding most of the bytes.
    by_type: dict[str, int] = {}
    for tensor in tensors:
        by_type[tensor.type_name] = by_type.get(tensor.type_name, 0) + tensor.n_bytes
    return max(by_type, key=by_type.__getitem__) if by_type else ""


def _weights_bytes(path: Path, fields: Mapping[str, Any]) -> int:
    count = _as_int(fields.get("split.count"))
    if count <= 1:
        return path.stat().st_size
    match = _SPLIT_NAME.match(path.name)
    if not match:
        raise UsageError(
            f"{path}: is one part of a model split in {count}, but its name does not say "
            "which (expected name-00001-of-0000N.gguf)"
        )
    stem = match["stem"]
    total = 0
    missing = []
    for part in range(1, count + 1):
        part_path = path.with_name(f"{stem}-{part:05d}-of-{count:05d}.gguf")
        try:
            total += part_path.stat().st_size
        except FileNotFoundError:
            missing.append(part_path.name)
    if missing:
        raise UsageError(
            f"{path}: is part of a model split in {count}; missing beside it: "
            + ", ".join(missing),
            hint="fetch every part into the same directory",
        )
    return total
