"""vLLM's OpenAI-compatible server, from the Python environment the agent built for it."""

from __future__ import annotations

from pathlib import Path

from agentd.engines.base import EngineAdapter, EngineSpecError, ShardSpec, is_hub_id

MODULE = "vllm.entrypoints.openai.api_server"


class VllmAdapter(EngineAdapter):
    """``python -m vllm.entrypoints.openai.api_server`` on the shard's GPUs."""

    name = "vllm"
    # vLLM's --api-key defaults to this variable.
    key_env = "VLLM_API_KEY"
    runs_on_cpu = False

    def __init__(self, python: str | Path) -> None:
        self.python = str(python)

    def launcher(self) -> list[str]:
        return [self.python, "-m", MODULE]

    def validate(self, spec: ShardSpec) -> None:
        super().validate(spec)
        if spec.tp != len(spec.gpu_indexes):
            raise EngineSpecError(
                f"{spec.model_name}: tensor parallel {spec.tp} over {len(spec.gpu_indexes)} "
                "GPU(s); vLLM runs one shard on exactly its tensor-parallel width of cards"
            )

    def agent_args(self, spec: ShardSpec) -> list[str]:
        args = [
            "--model",
            spec.model_path,
            "--served-model-name",
            spec.model_name,
            "--host",
            spec.host,
            "--port",
            str(spec.port),
            "--tensor-parallel-size",
            str(spec.tp),
            "--max-num-seqs",
            str(spec.slots),
        ]
        if spec.context_length:
            args += ["--max-model-len", str(spec.context_length)]
        return args + safetensors_only(spec)


def safetensors_only(spec: ShardSpec) -> list[str]:
    """Arguments that keep an engine downloading by Hugging Face id off pickle files.

    Left to choose, vLLM and SGLang take a repository's pytorch_model.bin
    when it has no safetensors, and loading a pickle runs whatever it holds.
    A path was fetched and checked by the agent, or placed by the operator.
    """
    if spec.allow_pickle or not is_hub_id(spec.model_path):
        return []
    return ["--load-format", "safetensors"]
