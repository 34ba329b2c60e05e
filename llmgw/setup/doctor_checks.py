"""The doctor's checks: what a machine lacks to run engines, and what to do about it.

Pure functions over facts (``HostInfo`` and a few node-only facts), so the
same checks run for ``llmgw doctor`` on this machine (agentd gathers the
facts) and for ``llmgw node add`` on another (a probe over SSH gathers them).
Each answers ok, warn or fail with a detail and, when something is wrong, a
fix in plain words.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel

from llmgw.inventory import HostInfo

Status = Literal["ok", "warn", "fail"]

GIB = 1024**3
# Below this the node cannot hold even one small model's weights beside the
# engine's own files.
DISK_FAIL_BYTES = 5 * GIB
# One 70B model's weights take ~40 GB at 4 bits, ~140 GB at 16.
DISK_WARN_BYTES = 50 * GIB
# Older than 2.28 (RHEL 8), prebuilt llama.cpp and PyTorch wheels do not
# load; older than 2.31 (Ubuntu 20.04), some prebuilt engine builds do not.
GLIBC_FAIL = (2, 28)
GLIBC_WARN = (2, 31)
# vLLM and SGLang's CUDA 12 builds need this driver or newer.
DRIVER_MIN_MAJOR = 525
PYTHON_MIN = (3, 11)

DEBIAN_FAMILY = {"debian", "ubuntu"}
RHEL_FAMILY = {"rhel", "centos", "fedora", "rocky", "almalinux", "ol"}

# Shown when AVX2 is present or missing, in this order.
_X86_VECTOR_FLAGS = (
    "sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni",
    "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_tile",
)  # fmt: skip
_ARM_VECTOR_FLAGS = ("asimd", "asimddp", "sve", "sve2", "i8mm")


class Check(BaseModel):
    """One line of the doctor's report."""

    name: str
    status: Status
    detail: str
    # The next step in plain words; "" when there is nothing to do.
    fix: str = ""


def check_cpu(host: HostInfo) -> Check:
    flags = set(host.cpu_flags)
    if not flags:
        return Check(
            name="cpu",
            status="warn",
            detail="CPU flags unknown: /proc/cpuinfo could not be read",
            fix="check that /proc is mounted; the agent reads it to pick llama.cpp's CPU build",
        )
    if host.arch in ("aarch64", "arm64"):
        found = [f for f in _ARM_VECTOR_FLAGS if f in flags]
        return Check(name="cpu", status="ok", detail=f"arm64, vector extensions: {_list(found)}")
    found = [f for f in _X86_VECTOR_FLAGS if f in flags]
    if host.avx2:
        return Check(name="cpu", status="ok", detail=f"vector extensions: {_list(found)}")
    return Check(
        name="cpu",
        status="warn",
        detail=f"no AVX2 (vector extensions: {_list(found)}): "
        "llama.cpp CPU builds will be slow or refuse to run",
        fix="on a VM, give it the host's CPU model (libvirt: <cpu mode='host-passthrough'/>, "
        "Proxmox: CPU type 'host'): QEMU's default model hides AVX2. On bare metal the CPU "
        "predates AVX2; serve models from a GPU or a newer machine",
    )


def check_driver(host: HostInfo) -> Check:
    version = host.nvidia_driver_version
    if not version:
        return Check(
            name="nvidia driver",
            status="warn",
            detail="no NVIDIA driver: only CPU engines can run here",
            fix=_driver_install_fix(host),
        )
    module = "open" if host.nvidia_open_kernel_module else "proprietary"
    detail = f"{version} ({module} kernel module)"
    major = version.partition(".")[0]
    if major.isdigit() and int(major) < DRIVER_MIN_MAJOR:
        return Check(
            name="nvidia driver",
            status="warn",
            detail=f"{detail} is older than {DRIVER_MIN_MAJOR}: vLLM and SGLang will not run",
            fix=f"upgrade the NVIDIA driver to {DRIVER_MIN_MAJOR} or newer and reboot; "
            "llama.cpp runs on this one",
        )
    return Check(name="nvidia driver", status="ok", detail=detail)


def _driver_install_fix(host: HostInfo) -> str:
    family = set(host.os_family)
    if "ubuntu" in family:
        how = "sudo ubuntu-drivers install"
    elif "debian" in family:
        how = "apt install nvidia-driver, from non-free"
    elif family & RHEL_FAMILY:
        how = "dnf module install nvidia-driver, from NVIDIA's CUDA repository"
    else:
        how = "your distribution's NVIDIA driver package"
    return (
        f"on a GPU machine, install the NVIDIA driver ({how}) and reboot; "
        "on a CPU-only node there is nothing to do"
    )


def check_os(host: HostInfo) -> Check:
    if not host.os_id:
        reason = next((w for w in host.warnings if "os-release" in w), "no ID in os-release")
        return Check(
            name="os",
            status="warn",
            detail=reason,
            fix="restore /etc/os-release (every systemd distribution ships one): "
            "engines are installed per OS family",
        )
    name = f"{host.os_id} {host.os_version_id}".strip()
    family = set(host.os_family)
    if family & DEBIAN_FAMILY:
        return Check(name="os", status="ok", detail=f"{name} (Debian family)")
    if family & RHEL_FAMILY:
        return Check(name="os", status="ok", detail=f"{name} (RHEL family)")
    return Check(
        name="os",
        status="warn",
        detail=f"{name}: neither Debian- nor RHEL-family",
        fix="llmgw is tested on Debian, Ubuntu and RHEL-family systems; engines may need "
        "libraries this one names differently, so install them by hand if an engine says so",
    )


def check_disk(host: HostInfo) -> Check:
    free = host.disk_free_bytes
    detail = f"{free / GIB:.1f} GiB free for {host.data_dir}"
    fix = (
        "free space on that disk, or set data_dir in agent.yaml to a larger one: "
        "model weights and engines take tens of GB"
    )
    if free < DISK_FAIL_BYTES:
        return Check(name="disk", status="fail", detail=f"{detail} (needs 5 GiB)", fix=fix)
    if free < DISK_WARN_BYTES:
        return Check(name="disk", status="warn", detail=f"{detail} (50 GiB advised)", fix=fix)
    return Check(name="disk", status="ok", detail=detail)


def check_glibc(version: str) -> Check:
    parsed = _version_tuple(version)
    upgrade = "upgrade to an OS release with glibc 2.31 or newer (Ubuntu 22.04, Debian 12, RHEL 9)"
    if parsed is None:
        return Check(
            name="glibc",
            status="warn",
            detail="not glibc, or its version unknown: prebuilt llama.cpp and vLLM builds need it",
            fix="run the agent on a glibc-based distribution (Debian, Ubuntu, RHEL family)",
        )
    if parsed < GLIBC_FAIL:
        return Check(
            name="glibc",
            status="fail",
            detail=f"glibc {version} is older than 2.28: prebuilt llama.cpp and vLLM "
            "binaries will not load",
            fix=upgrade,
        )
    if parsed < GLIBC_WARN:
        return Check(
            name="glibc",
            status="warn",
            detail=f"glibc {version} is older than 2.31: some prebuilt engine builds will not load",
            fix=upgrade,
        )
    return Check(name="glibc", status="ok", detail=f"glibc {version}")


def check_python(version: Sequence[int]) -> Check:
    text = ".".join(str(v) for v in version)
    if tuple(version[:2]) < PYTHON_MIN:
        return Check(
            name="python",
            status="fail",
            detail=f"Python {text}: llmgw needs 3.11 or newer",
            fix="install llmgw with Python 3.11 or newer",
        )
    return Check(name="python", status="ok", detail=f"Python {text}")


def _version_tuple(version: str) -> tuple[int, ...] | None:
    parts = version.split(".")
    if not version or not all(p.isdigit() for p in parts):
        return None
    return tuple(int(p) for p in parts)


def _list(items: list[str]) -> str:
    return ", ".join(items) if items else "none"
