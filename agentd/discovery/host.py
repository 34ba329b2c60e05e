"""This machine's facts: OS, CPU, memory, disk, NVIDIA driver, glibc, kernel.

Every file read is a parameter with the real path as its default, so tests
feed recorded samples. Nothing here raises for a fact it cannot read: the fact
is left empty and a warning in plain words says why, since a node that cannot
read /proc/meminfo is still a node that can run a model.
"""

from __future__ import annotations

import logging
import os
import platform
import re
import shlex
import shutil
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from llmgw.inventory import HostInfo

log = logging.getLogger(__name__)

# The os-release spec: /etc/os-release first, /usr/lib/os-release when the
# distribution ships only that one.
OS_RELEASE_PATHS = (Path("/etc/os-release"), Path("/usr/lib/os-release"))
CPUINFO_PATH = Path("/proc/cpuinfo")
MEMINFO_PATH = Path("/proc/meminfo")
# Exists exactly when an NVIDIA kernel module is loaded; nvidia-smi, by
# contrast, can be installed on a machine whose module failed to load.
NVIDIA_VERSION_PATH = Path("/proc/driver/nvidia/version")

NO_AVX2_WARNING = (
    "CPU has no AVX2: llama.cpp CPU builds will be slow or refuse to run "
    "(on a VM, give it the host's CPU model)"
)

_DRIVER_VERSION = re.compile(r"^\d+\.\d+(\.\d+)?$")


class OsRelease(NamedTuple):
    id: str
    id_like: list[str]
    version_id: str


def parse_os_release(text: str) -> OsRelease:
    """ID, ID_LIKE (split on spaces) and VERSION_ID of an os-release file."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, raw = line.partition("=")
        try:
            # Values are shell-quoted: ID="rhel", ID_LIKE='rhel fedora', ID=debian.
            words = shlex.split(raw)
        except ValueError:
            words = [raw.strip("\"'")]
        values[key.strip()] = " ".join(words)
    return OsRelease(
        id=values.get("ID", "").lower(),
        id_like=values.get("ID_LIKE", "").lower().split(),
        version_id=values.get("VERSION_ID", ""),
    )


def read_os_release(paths: Sequence[Path] = OS_RELEASE_PATHS) -> tuple[OsRelease, list[str]]:
    """The first readable os-release of ``paths``, and warnings when none is."""
    for path in paths:
        try:
            return parse_os_release(path.read_text()), []
        except OSError:
            continue
    names = " or ".join(str(p) for p in paths)
    return OsRelease("", [], ""), [f"cannot read {names}: the OS family is unknown"]


def parse_cpu_flags(text: str) -> list[str]:
    """The CPU's flags from /proc/cpuinfo, in the order the kernel lists them.

    x86 calls the line "flags", arm64 "Features"; the first processor's is
    taken, since the kernel reports the features every CPU has in common.
    """
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("flags", "Features"):
            return value.split()
    return []


def parse_mem_total_bytes(text: str) -> int:
    """MemTotal of /proc/meminfo in bytes, 0 when absent."""
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == "MemTotal:" and fields[1].isdigit():
            # The kernel says "kB" and means KiB.
            return int(fields[1]) * 1024
    return 0


def parse_nvidia_driver(text: str) -> tuple[str, bool]:
    """(driver version, open kernel module) from /proc/driver/nvidia/version.

    The two wordings:
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar ..."
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release ..."
    The version is the first version-looking word after "Module": the word
    right after it is "for" in the open module's wording (the default since
    driver 560), which the Go agent once took for the version.
    """
    for line in text.splitlines():
        if not line.startswith("NVRM version:"):
            continue
        words = line.split()
        if "Module" not in words:
            return "", False
        after = words[words.index("Module") + 1 :]
        version = next((w for w in after if _DRIVER_VERSION.match(w)), "")
        return version, "Open Kernel Module" in line
    return "", False


def disk_free_bytes(path: Path) -> int:
    """Free bytes for ``path``'s file system, measured at its nearest existing parent.

    The data dir may not exist yet on a node that has never run an agent.
    """
    probe = path.absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free


def glibc_version() -> str:
    """The C library's version, "2.36"; "" when it is not glibc (musl, macOS)."""
    try:
        value = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        return ""
    name, _, version = value.partition(" ")
    return version if name == "glibc" else ""


def cpu_count() -> int:
    """CPUs this process may run on: a container or cgroup cpuset may hold fewer."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 0


def _read(path: Path, warnings: list[str], what: str) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError as e:
        warnings.append(f"cannot read {path} ({e.strerror or e}): {what} unknown")
        return ""


def read_host(
    data_dir: Path,
    *,
    os_release_paths: Sequence[Path] = OS_RELEASE_PATHS,
    cpuinfo_path: Path = CPUINFO_PATH,
    meminfo_path: Path = MEMINFO_PATH,
    nvidia_version_path: Path = NVIDIA_VERSION_PATH,
) -> HostInfo:
    """The facts of this machine, with warnings for what could not be read.

    ``gpu_note`` and ``probe`` are left to the GPU probe.
    """
    os_release, warnings = read_os_release(os_release_paths)

    flags = parse_cpu_flags(_read(cpuinfo_path, warnings, "CPU flags"))
    arch = platform.machine()
    avx2 = "avx2" in flags
    # AVX2 is an x86 matter; arm64 llama.cpp builds use NEON instead. With
    # no flags read at all, the warning above already says why.
    if flags and not avx2 and arch in ("x86_64", "AMD64", "i686"):
        warnings.append(NO_AVX2_WARNING)

    memory = parse_mem_total_bytes(_read(meminfo_path, warnings, "memory size"))

    try:
        driver_text = nvidia_version_path.read_text(errors="replace")
    except OSError:
        # No module loaded: not a warning of ours, the GPU probe says so.
        driver_text = ""
    driver, open_module = parse_nvidia_driver(driver_text)

    try:
        disk_free = disk_free_bytes(data_dir)
    except OSError as e:
        warnings.append(f"cannot measure free disk for {data_dir}: {e.strerror or e}")
        disk_free = 0

    glibc = glibc_version()
    for w in warnings:
        log.warning("host facts: %s", w)
    return HostInfo(
        hostname=socket.gethostname(),
        os_id=os_release.id,
        os_id_like=os_release.id_like,
        os_version_id=os_release.version_id,
        arch=arch,
        cpu_flags=flags,
        cpu_count=cpu_count(),
        memory_total_bytes=memory,
        disk_free_bytes=disk_free,
        data_dir=str(data_dir),
        nvidia_driver_version=driver,
        nvidia_open_kernel_module=open_module,
        avx2=avx2,
        glibc_version=glibc,
        kernel=platform.release(),
        warnings=warnings,
    )
