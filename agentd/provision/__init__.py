"""Engines installed by the node: llama.cpp from a release archive or a wheel,
vLLM and SGLang as uv-built Python environments.

Each install lives in ``<engines_dir>/<engine>/<version>-<variant>/``, built
under a scratch name, checked to run, then renamed into place. ``EngineManager``
drives installs and reports their state in the node's own words.
"""

from agentd.provision.download import ChecksumMismatch, DownloadError, download
from agentd.provision.libcheck import LibraryProblem, check_binary, describe, parse_ldd
from agentd.provision.llamacpp import (
    Installation,
    InstallError,
    LlamaCppRelease,
    install_from_archive,
    install_from_wheel,
    verify,
)
from agentd.provision.manager import (
    ArchiveSource,
    EngineManager,
    EngineState,
    WheelSource,
    installable_engines,
    installed_to_proto,
)
from agentd.provision.pyenv import (
    CUDA_BUILDS,
    NotHere,
    PyEnvSource,
    RequirementsRefused,
    Runner,
    RunResult,
    SubprocessRunner,
    check_requirements,
    choose_build,
)
from agentd.provision.unpack import UnsafeArchive, unpack

__all__ = [
    "CUDA_BUILDS",
    "ArchiveSource",
    "ChecksumMismatch",
    "DownloadError",
    "EngineManager",
    "EngineState",
    "InstallError",
    "Installation",
    "LibraryProblem",
    "LlamaCppRelease",
    "NotHere",
    "PyEnvSource",
    "RequirementsRefused",
    "RunResult",
    "Runner",
    "SubprocessRunner",
    "UnsafeArchive",
    "WheelSource",
    "check_binary",
    "check_requirements",
    "choose_build",
    "describe",
    "download",
    "install_from_archive",
    "install_from_wheel",
    "installable_engines",
    "installed_to_proto",
    "parse_ldd",
    "unpack",
    "verify",
]
