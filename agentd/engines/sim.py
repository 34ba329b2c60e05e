"""The built-in simulator (agentd.sim): an OpenAI-compatible engine with no model."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from agentd.engines.base import EngineAdapter, ShardSpec

# The simulator is part of llmgw, so it runs from the agent's own Python.
DEFAULT_LAUNCHER = (sys.executable, "-m", "agentd.sim")


class SimAdapter(EngineAdapter):
    """``python -m agentd.sim`` (or ``llmgw sim-engine``) with the shard's name, port and slots."""

    name = "sim"
    # agentd.sim reads its key from here and unsets it.
    key_env = "LLMGW_ENGINE_KEY"
    needs_weights = False
    # It plays a model without a card: placed on GPUs, it holds none of them.
    holds_gpu_memory = False

    def __init__(self, launcher: Sequence[str] = DEFAULT_LAUNCHER) -> None:
        self._launcher = list(launcher)

    def launcher(self) -> list[str]:
        return list(self._launcher)

    def agent_args(self, spec: ShardSpec) -> list[str]:
        # The model path is not read: the simulator has no weights.
        args = [
            "--model",
            spec.model_name,
            "--host",
            spec.host,
            "--port",
            str(spec.port),
            # Slots are the requests a real engine runs at once; the rest queue.
            "--max-concurrency",
            str(spec.slots),
        ]
        if spec.context_length:
            args += ["--max-model-len", str(spec.context_length)]
        if spec.threads:
            args += ["--threads", str(spec.threads)]
        return args
