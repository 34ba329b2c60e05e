"""``llmgw doctor`` on this machine: its facts, read by discovery, through the shared checks.

Each check reads facts already gathered by discovery (host facts, NVML) and
answers ok, warn or fail with a detail and, when something is wrong, a fix in
plain words. Readers are parameters so tests pass recorded facts.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from agentd.discovery.host import read_host
from agentd.discovery.nvml import NO_DRIVER, NO_GPUS, NvmlReport, read_gpus
from llmgw.inventory import HostInfo
from llmgw.paths import Paths
from llmgw.setup.doctor_checks import (
    DISK_FAIL_BYTES,
    DISK_WARN_BYTES,
    DRIVER_MIN_MAJOR,
    GLIBC_FAIL,
    GLIBC_WARN,
    PYTHON_MIN,
    Check,
    Status,
    check_cpu,
    check_disk,
    check_driver,
    check_glibc,
    check_os,
    check_python,
)


def run_checks(
    paths: Paths,
    *,
    host_reader: Callable[[Path], HostInfo] = read_host,
    nvml: Callable[[], NvmlReport] = read_gpus,
    python_version: Sequence[int] = tuple(sys.version_info[:3]),
) -> list[Check]:
    """Every check, for the agent data dir of ``paths``."""
    host = host_reader(paths.agent_data_dir)
    report = nvml()
    return [
        check_cpu(host),
        check_driver(host),
        check_nvml(report),
        check_os(host),
        check_disk(host),
        check_glibc(host.glibc_version),
        check_python(python_version),
    ]


def check_nvml(report: NvmlReport) -> Check:
    if report.gpus:
        cards = [g for g in report.gpus if not g.mig_instance]
        counts = Counter(g.name for g in cards)
        kinds = ", ".join(f"{n}x {name}" for name, n in counts.items())
        detail = f"{len(cards)} GPU(s): {kinds}"
        if len(cards) < len(report.gpus):
            detail += f", {len(report.gpus) - len(cards)} MIG instance(s)"
        if report.warnings:
            if all("PCIe" in w for w in report.warnings):
                fix = (
                    "compare the card's LnkCap with its LnkSta in lspci -vv: reseat it, or "
                    "move it to a slot of its PCIe generation and width"
                )
            else:
                fix = (
                    "run nvidia-smi and the kernel log (dmesg | grep -i xid): "
                    "a GPU that fell off the bus needs a reboot or a reseat"
                )
            return Check(
                name="nvml",
                status="warn",
                detail=f"{detail}; {'; '.join(report.warnings)}",
                fix=fix,
            )
        return Check(name="nvml", status="ok", detail=detail)
    if report.note == NO_DRIVER:
        fix = "see the NVIDIA driver check; on a CPU-only node there is nothing to do"
    elif report.note == NO_GPUS:
        fix = "check the cards are seated and powered: lspci | grep -i nvidia"
    else:
        fix = (
            "run nvidia-smi: the driver's library must match the loaded kernel module, "
            "and a driver upgrade without a reboot leaves them apart"
        )
    return Check(name="nvml", status="warn", detail=f"no GPUs: {report.note}", fix=fix)


__all__ = [
    "DISK_FAIL_BYTES",
    "DISK_WARN_BYTES",
    "DRIVER_MIN_MAJOR",
    "GLIBC_FAIL",
    "GLIBC_WARN",
    "PYTHON_MIN",
    "Check",
    "Status",
    "check_cpu",
    "check_disk",
    "check_driver",
    "check_glibc",
    "check_nvml",
    "check_os",
    "check_python",
    "run_checks",
]
