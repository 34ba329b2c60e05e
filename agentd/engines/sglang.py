"""SGLang's server, from the Python environment the agent built for it."""

from __future__ import annotations

from pathlib import Path

from agentd.engines.base import EngineAdapter, ShardSpec
from agentd.engines.vllm import check_width, offline_env, precision_args, safetensors_only

# SGLang takes its key only as --api-key, which would put it on the command
# line for every user of the node to read. This launcher takes it from the
# environment, unsets it, and adds the flag to sys.argv inside the process,
# where /proc/<pid>/cmdline does not see it. Child processes SGLang spawns
# get their settings through a pipe, not their command line. The key goes as
# --api-key=KEY: a key starting with "-" would otherwise be read as an option.
LAUNCHER = (
    "import os, runpy, sys\n"
    "key = os.environ.pop('LLMGW_ENGINE_KEY', '')\n"
    "if key:\n"
    "    sys.argv.append('--api-key=' + key)\n"
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
        check_width(spec, "SGLang")

    def agent_env(self, spec: ShardSpec) -> dict[str, str]:
        return offline_env(spec)

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
        if spec.pp > 1:
            args += ["--pp-size", str(spec.pp)]
        if spec.expert_parallel:
            # SGLang's experts spread over the tensor-parallel group.
            args += ["--ep-size", str(spec.tp)]
        if spec.context_length:
            args += ["--context-length", str(spec.context_length)]
        if spec.gpu_memory_fraction:
            # SGLang's share is for weights and KV cache, as the plan's need is.
            args += ["--mem-fraction-static", f"{spec.gpu_memory_fraction:.2f}"]
        if spec.download_dir:
            args += ["--download-dir", spec.download_dir]
        args += precision_args(spec)
        return args + safetensors_only(spec)
