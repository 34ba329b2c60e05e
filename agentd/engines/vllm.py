"""vLLM's OpenAI-compatible server, from the Python environment the agent built for it."""

from __future__ import annotations

from pathlib import Path

from agentd.engines.base import EngineAdapter, EngineSpecError, ShardSpec, is_hub_id

MODULE = "vllm.entrypoints.openai.api_server"
# What each precision of the plan asks the engine for. fp8 is quantized by
# the engine as it loads (vLLM and SGLang both read --quantization fp8 on
# bf16 weights); bf16 sets the dtype so fp32 weights are not kept as fp32.
QUANTIZATION = {"fp8": "fp8"}
DTYPE = {"bf16": "bfloat16"}


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
        check_width(spec, "vLLM")

    def agent_env(self, spec: ShardSpec) -> dict[str, str]:
        return offline_env(spec)

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
        if spec.pp > 1:
            args += ["--pipeline-parallel-size", str(spec.pp)]
        if spec.expert_parallel:
            args += ["--enable-expert-parallel"]
        if spec.context_length:
            args += ["--max-model-len", str(spec.context_length)]
        if spec.gpu_memory_fraction:
            args += ["--gpu-memory-utilization", f"{spec.gpu_memory_fraction:.2f}"]
        if spec.download_dir:
            args += ["--download-dir", spec.download_dir]
        args += precision_args(spec)
        return args + safetensors_only(spec)


def check_width(spec: ShardSpec, label: str) -> None:
    """A shard runs on exactly tensor x pipeline cards: no more, no fewer."""
    if spec.tp * spec.pp != len(spec.gpu_indexes):
        stages = f" x {spec.pp} pipeline stages" if spec.pp > 1 else ""
        raise EngineSpecError(
            f"{spec.model_name}: tensor parallel {spec.tp}{stages} over "
            f"{len(spec.gpu_indexes)} GPU(s); {label} runs one shard on exactly its "
            "tensor x pipeline width of cards"
        )


def precision_args(spec: ShardSpec) -> list[str]:
    """--quantization fp8 or --dtype bfloat16 as the plan's precision says; none for ""."""
    if quant := QUANTIZATION.get(spec.precision):
        return ["--quantization", quant]
    if dtype := DTYPE.get(spec.precision):
        return ["--dtype", dtype]
    return []


def offline_env(spec: ShardSpec) -> dict[str, str]:
    """Keep an engine off the internet when the agent fetched its weights.

    The agent fetched and checked every file; an engine that went to the hub
    anyway (a missing tokenizer file, a "newer" revision) would load what
    nobody checked, and hang where the node has no route out.
    """
    if is_hub_id(spec.model_path):
        return {}
    return {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def safetensors_only(spec: ShardSpec) -> list[str]:
    """Arguments that keep an engine downloading by Hugging Face id off pickle files.

    Left to choose, vLLM and SGLang take a repository's pytorch_model.bin
    when it has no safetensors, and loading a pickle runs whatever it holds.
    A path was fetched and checked by the agent, or placed by the operator.
    """
    if spec.allow_pickle or not is_hub_id(spec.model_path):
        return []
    return ["--load-format", "safetensors"]
