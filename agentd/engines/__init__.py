"""Engine adapters: the command line, environment, health and metrics URLs of a shard.

    adapter = adapter_for("llama.cpp", "/opt/llmgw/engines/llama.cpp/b6000-cpu/llama-server")
    cmd = adapter.command(ShardSpec(model_name="gemma", model_path="/w/gemma.gguf", port=8001))
    # cmd.argv, cmd.env (laid over the agent's environment), cmd.health_url, cmd.metrics_url

The adapters are pure; flags.py says which operator flags are refused and why.
"""

from __future__ import annotations

from pathlib import Path

from agentd.engines.base import (
    EngineAdapter,
    EngineCommand,
    EngineSpecError,
    ShardSpec,
    gpu_env,
    is_hub_id,
    url_host,
)
from agentd.engines.llamacpp import LlamaCppAdapter
from agentd.engines.sglang import SglangAdapter
from agentd.engines.sim import SimAdapter
from agentd.engines.vllm import VllmAdapter
from llmgw.engines.flags import (
    EngineArgsRefused,
    Refusal,
    check_args,
    check_env,
    find_env_refusals,
    find_refusals,
    refusal_for,
)

ADAPTERS: dict[str, type[EngineAdapter]] = {
    "llama.cpp": LlamaCppAdapter,
    "vllm": VllmAdapter,
    "sglang": SglangAdapter,
    "sim": SimAdapter,
}


def adapter_for(engine: str, executable: str | Path | None = None) -> EngineAdapter:
    """The adapter of ``engine``, started by ``executable``.

    ``executable`` is the llama-server binary for llama.cpp and the Python
    interpreter of the engine's environment for vLLM and SGLang, and for the
    sim a Python that has llmgw (the agent's own when None). Another way to
    start the sim: ``SimAdapter(["llmgw", "sim-engine"])``.
    """
    cls = ADAPTERS.get(engine)
    if cls is None:
        raise EngineSpecError(
            f"no engine called {engine!r}; there are {', '.join(sorted(ADAPTERS))}"
        )
    if cls is SimAdapter:
        if executable is None:
            return SimAdapter()
        return SimAdapter([str(executable), "-m", "agentd.sim"])
    if executable is None:
        raise EngineSpecError(f"{engine} needs the path of its program, and none was given")
    return cls(executable)  # type: ignore[call-arg]


__all__ = [
    "ADAPTERS",
    "EngineAdapter",
    "EngineArgsRefused",
    "EngineCommand",
    "EngineSpecError",
    "LlamaCppAdapter",
    "Refusal",
    "SglangAdapter",
    "ShardSpec",
    "SimAdapter",
    "VllmAdapter",
    "adapter_for",
    "check_args",
    "check_env",
    "find_env_refusals",
    "find_refusals",
    "gpu_env",
    "is_hub_id",
    "refusal_for",
    "url_host",
]
