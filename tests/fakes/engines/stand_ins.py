"""The vLLM and SGLang stand-ins as wheels on a local index, with recipes for them.

    with LocalIndex() as index:
        stand_ins = publish_stand_ins(tmp_dir, index)
        release = stand_ins.release("vllm")   # an EngineRelease, source: pyenv

Each engine's recipe pins its wheel and the shared ``fake-engine-core`` by
sha256, per CUDA build (the same files for every build: the stand-ins have
no CUDA code), released on the engine's real release day. The index also
holds a ``fake-engine-core`` uploaded *after* that day, so a recipe that
names it shows ``--exclude-newer`` at work.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from llmgw.config import EngineRelease
from tests.fakes.engines.index import LocalIndex
from tests.fakes.engines.wheels import PACKAGES, build_wheel, sha256_of

CORE = "fake-engine-core"
CORE_VERSION = "1.0.0"
# Uploaded two days after the engines' releases: outside every recipe's cut-off.
LATE_CORE_VERSION = "1.0.1"
# The versions the stand-ins play, and the day each was really released.
VERSIONS = {"vllm": "0.11.0", "sglang": "0.5.3"}
RELEASED = {
    "vllm": datetime(2025, 10, 2, 18, 5, tzinfo=UTC),
    "sglang": datetime(2025, 10, 5, 9, 30, tzinfo=UTC),
}
# The builds the recipes offer: what vLLM and SGLang publish for these versions.
BUILDS = ("cu129", "cu128")


def local_python() -> str:
    """This interpreter's version: uv finds it here instead of downloading one."""
    return f"{sys.version_info.major}.{sys.version_info.minor}"


@dataclass
class StandIns:
    index: LocalIndex
    hashes: dict[str, str]  # wheel file name -> sha256
    wheels: dict[str, Path]  # distribution -> the wheel of the version the recipes pin

    def requirements(self, engine: str, *, core_version: str = CORE_VERSION) -> str:
        """The hashed requirements of ``engine``, as a recipe's build carries them."""
        engine_wheel = self.wheels[engine]
        core_wheel = next(
            p for p in self._core_wheels if p.name.startswith(f"fake_engine_core-{core_version}-")
        )
        return (
            f"# {engine} {VERSIONS[engine]} stand-in and what it needs\n"
            f"{engine}=={VERSIONS[engine]} \\\n"
            f"    --hash=sha256:{self.hashes[engine_wheel.name]}\n"
            f"{CORE}=={core_version} \\\n"
            f"    --hash=sha256:{self.hashes[core_wheel.name]}\n"
        )

    def release(self, engine: str, **overrides) -> EngineRelease:
        """The server.yaml recipe for ``engine``: every build pointing at the local index."""
        fields = {
            "engine": engine,
            "version": VERSIONS[engine],
            "source": "pyenv",
            "released": RELEASED[engine].strftime("%Y-%m-%dT%H:%M:%SZ"),
            "requirements": {tag: self.requirements(engine) for tag in BUILDS},
            "index_url": self.index.simple_url,
            "python": local_python(),
        }
        fields.update(overrides)
        return EngineRelease(**fields)

    @property
    def _core_wheels(self) -> list[Path]:
        return [f.path for f in self.index.files.values() if f.project == CORE]


def publish_stand_ins(out_dir: Path, index: LocalIndex) -> StandIns:
    """Build every wheel into ``out_dir`` and list them on ``index``."""
    wheels: dict[str, Path] = {}
    hashes: dict[str, str] = {}
    core_src = PACKAGES / "core"
    early = min(RELEASED.values()) - timedelta(days=30)
    late = max(RELEASED.values()) + timedelta(days=2)
    for version, uploaded in ((CORE_VERSION, early), (LATE_CORE_VERSION, late)):
        wheel = build_wheel(out_dir, CORE, version, core_src)
        index.add(wheel, upload_time=uploaded)
        hashes[wheel.name] = sha256_of(wheel)
        if version == CORE_VERSION:
            wheels[CORE] = wheel
    for engine, version in VERSIONS.items():
        wheel = build_wheel(
            out_dir,
            engine,
            version,
            PACKAGES / engine,
            requires=[f"{CORE}>=1.0"],
            summary=f"a stand-in for {engine} that llmgw's tests build",
        )
        index.add(wheel, upload_time=RELEASED[engine] - timedelta(minutes=5))
        hashes[wheel.name] = sha256_of(wheel)
        wheels[engine] = wheel
    return StandIns(index=index, hashes=hashes, wheels=wheels)
