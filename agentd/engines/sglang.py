"""SGLang's server, from the Python environment the agent built for it."""

from __future__ import annotations

from pathlib import Path

from agentd.engines.base import EngineAdapter, EngineSpecError, ShardSpec
from agentd.engines.vllm import safetensors_only

# SGLang takes its key only as --api-key, which would put it on the command
# line for every user of the node to read. This launcher takes it from the
# environment, unsets it, and adds the flag to sys.argv inside the process,
# where /proc/<pid>/cmdline does not see it. Child processes SGLang spawns
# get their settings through a pipe, not their command line.
LAUNCHER = (
    "import os, runpy, sys\n"
    "key = os.environ.pop('LLMGW_ENGINE_KEY', '')\n"
    "if key:\n"
    "    sys.argv += ['--api-key', key]\n"
    "runpy.run_module('sglang.launch_server', run_name='__main__', alter_sys=True)\n"
)


class SglangAdapter(EngineAdapter):
    """``sglang.launch_server`` on the shard's GPUs, started through LAUNCHER."""

    name = "sglang"
    key_env = "LLMGW_ENGINE_KEY"
    runs_on_cpu = False

    def __init__(self, python: str | Path) -> None:
        self.python = str(python)

    def launcher(self) -> list[str]:
        return [self.python, "-c", LAUNCHER]

    def validate(self, spec: ShardSpec) -> None:
        super().validate(spec)
        if spec.tp != len(spec.gpu_indexes):
            raise EngineSpecError(
                f"{spec.model_name}: tensor parallel {spec.tp} over {len(spec.gpu_indexes)} "
                "GPU(s); SGLang runs one shard on exactly its tensor-parallel width of cards"
            )

    def agent_args(self, spec: ShardSpec) -> list[str]:
        args = [
            "--model-path",
            spec.model_path,
            "--served-model-name",
            spec.model_name,
            "--host",
            spec.host,
            "--port",
            str(spec.port),
            "--tp-size",
            str(spec.tp),
            "--max-running-requests",
            str(spec.slots),
            # /metrics is off unless asked for; the gateway's router reads it.
            "--enable-metrics",
        ]
        if spec.context_length:
            args += ["--context-length", str(spec.context_length)]
        return args + safetensors_only(spec)
