"""The node's facts as the probe reported them, and the checks only a node being added gets.

``node_checks`` runs the doctor's own checks (llmgw.setup.doctor_checks, the same
``llmgw doctor`` runs locally) over the probed facts, then those that only
make sense from the control plane's side: can the node reach every control
plane address, is its clock close, which package manager does its family use,
is its libstdc++ new enough for the llama.cpp build, does it run systemd.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, Field

from llmgw.inventory import HostInfo
from llmgw.onboard.events import Clock, OnboardError, StepEvent
from llmgw.setup.doctor_checks import (
    Check,
    check_cpu,
    check_disk,
    check_driver,
    check_glibc,
    check_os,
    check_python,
)

# The llama.cpp release build is linked against glibc 2.34 and GCC 12's libstdc++.
LLAMACPP_GLIBC = (2, 34)
LLAMACPP_GLIBCXX = (3, 4, 30)
# Usage timestamps and heartbeat deadlines are compared across machines.
CLOCK_WARN_S = 2.0
# Certificates are backdated by minutes; beyond that the node sees them as not yet valid.
CLOCK_FAIL_S = 300.0


class Reach(BaseModel):
    address: str
    ok: bool
    error: str = ""


class Gpu(BaseModel):
    name: str
    memory_total_bytes: int = 0
    uuid: str = ""


class NodeFacts(BaseModel):
    """What the probe printed, plus the clock offset measured around it."""

    hostname: str = ""
    uid: int = -1
    python_version: list[int] = []
    python_path: str = ""
    os_release: dict[str, str] = {}
    arch: str = ""
    kernel: str = ""
    glibc_version: str = ""
    systemd: bool = False
    package_managers: list[str] = []
    reach: list[Reach] = []
    cpu_flags: list[str] = []
    cpu_count: int = 0
    memory_total_bytes: int = 0
    nvidia_driver_version: str = ""
    nvidia_open_kernel_module: bool = False
    gpus: list[Gpu] = []
    libstdcxx_path: str = ""
    glibcxx_versions: list[str] = []
    disk_path: str = ""
    disk_free_bytes: int = 0
    time: float = 0.0
    # Node clock minus control plane clock, seconds (set by the caller).
    clock_offset_s: float = 0.0
    # Where the agent will keep its data (for the disk check's words).
    data_dir: str = ""
    extra: dict[str, Any] = Field(default_factory=dict)

    @property
    def os_family(self) -> list[str]:
        rel = self.os_release
        return [i for i in [rel.get("ID", ""), *rel.get("ID_LIKE", "").split()] if i]

    def host(self) -> HostInfo:
        rel = self.os_release
        return HostInfo(
            hostname=self.hostname,
            os_id=rel.get("ID", ""),
            os_id_like=rel.get("ID_LIKE", "").split(),
            os_version_id=rel.get("VERSION_ID", ""),
            arch=self.arch,
            cpu_flags=self.cpu_flags,
            cpu_count=self.cpu_count,
            memory_total_bytes=self.memory_total_bytes,
            disk_free_bytes=self.disk_free_bytes,
            data_dir=self.data_dir or self.disk_path,
            nvidia_driver_version=self.nvidia_driver_version,
            nvidia_open_kernel_module=self.nvidia_open_kernel_module,
            avx2="avx2" in self.cpu_flags,
            glibc_version=self.glibc_version,
            kernel=self.kernel,
            probe="ssh",
        )


def node_checks(facts: NodeFacts, *, agent_port_hint: str = "") -> list[Check]:
    """Every check for a node being added, in the order they are shown."""
    host = facts.host()
    checks = [
        check_os(host),
        check_package_manager(facts),
        check_cpu(host),
        check_driver(host),
        check_gpus(facts),
        check_disk(host),
        check_glibc(host.glibc_version),
        check_libstdcxx(facts),
        check_python(facts.python_version or [0, 0, 0]),
        check_clock(facts.clock_offset_s),
        check_systemd(facts),
    ]
    checks.extend(check_reach(r) for r in facts.reach)
    return checks


def package_manager(facts: NodeFacts) -> str:
    """apt-get, dnf, yum or zypper, decided from ID and ID_LIKE; "" when none fits."""
    family = set(facts.os_family)
    have = set(facts.package_managers)
    if "debian" in family or "ubuntu" in family:
        return "apt-get"
    if family & {"rhel", "fedora", "centos"}:
        # dnf where the node has it (RHEL 8+, Fedora), yum on older ones.
        return "dnf" if "dnf" in have or "yum" not in have else "yum"
    if family & {"suse", "opensuse", "sles"}:
        return "zypper"
    return ""


def check_package_manager(facts: NodeFacts) -> Check:
    pm = package_manager(facts)
    name = facts.os_release.get("PRETTY_NAME") or " ".join(facts.os_family) or "unknown"
    if not pm:
        like = facts.os_release.get("ID_LIKE", "")
        return Check(
            name="package manager",
            status="fail",
            detail=f"unsupported OS family: {name} (ID={facts.os_release.get('ID', '')!r}, "
            f"ID_LIKE={like!r}) is not of Debian's, Red Hat's or SUSE's family, so llmgw "
            "cannot install the libraries engines need",
            fix="add a machine running Debian, Ubuntu, RHEL, Rocky, AlmaLinux, Fedora or "
            "openSUSE; the agent uses apt-get, dnf, yum or zypper",
        )
    if pm not in facts.package_managers:
        return Check(
            name="package manager",
            status="fail",
            detail=f"{name} is of a family that uses {pm}, but {pm} is not on the PATH",
            fix=f"install {pm} on the node, or check root's PATH there",
        )
    return Check(name="package manager", status="ok", detail=pm)


def check_gpus(facts: NodeFacts) -> Check:
    if facts.gpus:
        names: dict[str, int] = {}
        for g in facts.gpus:
            names[g.name] = names.get(g.name, 0) + 1
        kinds = ", ".join(f"{n}x {name}" for name, n in names.items())
        return Check(name="gpus", status="ok", detail=f"{len(facts.gpus)} GPU(s): {kinds}")
    if facts.nvidia_driver_version:
        return Check(
            name="gpus",
            status="warn",
            detail="the NVIDIA driver is loaded but nvidia-smi lists no GPU",
            fix="run nvidia-smi on the node; check the cards are seated: lspci | grep -i nvidia",
        )
    return Check(name="gpus", status="ok", detail="none: a CPU-only node")


def check_libstdcxx(facts: NodeFacts) -> Check:
    need = ".".join(str(v) for v in LLAMACPP_GLIBCXX)
    versions = [_tuple(v) for v in facts.glibcxx_versions]
    newest = max((v for v in versions if v), default=None)
    if not facts.libstdcxx_path:
        return Check(
            name="libstdc++",
            status="warn",
            detail="libstdc++.so.6 not found: the llama.cpp build will not start",
            fix="it is installed with the engines' packages (libstdc++6 / libstdc++); "
            "if that fails, install it by hand",
        )
    glibc = _tuple(facts.glibc_version)
    if newest is None or newest < LLAMACPP_GLIBCXX or (glibc and glibc < LLAMACPP_GLIBC):
        have = ".".join(str(v) for v in newest) if newest else "unknown"
        return Check(
            name="libstdc++",
            status="warn",
            detail=f"libstdc++.so.6 is too old (needs GLIBCXX_{need}, has GLIBCXX_{have}): "
            "the llama.cpp release build needs glibc 2.34 and GCC 12's libstdc++",
            fix="use an OS release with GCC 12's libstdc++ (Debian 12, Ubuntu 22.04, RHEL 10); "
            "engines from PyPI builds may still run",
        )
    return Check(name="libstdc++", status="ok", detail=f"GLIBCXX_{'.'.join(map(str, newest))}")


def check_clock(offset_s: float) -> Check:
    off = abs(offset_s)
    words = f"{offset_s:+.1f} s from the control plane's clock"
    fix = "run time synchronisation on the node (timedatectl set-ntp true, or chrony)"
    if off > CLOCK_FAIL_S:
        return Check(
            name="clock",
            status="fail",
            detail=f"{words}: certificates would look not yet valid or expired",
            fix=fix,
        )
    if off > CLOCK_WARN_S:
        return Check(
            name="clock",
            status="warn",
            detail=f"{words}: usage times and heartbeat deadlines will be off",
            fix=fix,
        )
    return Check(name="clock", status="ok", detail=words)


def check_systemd(facts: NodeFacts) -> Check:
    if facts.systemd:
        return Check(name="systemd", status="ok", detail="the agent runs as llmgw-agent.service")
    return Check(
        name="systemd",
        status="warn",
        detail="no systemd here (no /run/systemd/system): the agent is started detached with "
        "a pidfile, and nothing starts it again after a crash or a reboot",
        fix="start it from the node's own init system at boot; node add starts it again",
    )


def check_reach(r: Reach) -> Check:
    if r.ok:
        return Check(name="control plane", status="ok", detail=f"{r.address} reachable")
    host, _, port = r.address.rpartition(":")
    return Check(
        name="control plane",
        status="fail",
        detail=f"the node cannot reach the control plane at {r.address} ({r.error})",
        fix=f"open TCP port {port} on {host.strip('[]')} to the node (firewall, security group), "
        "or give the address the node can reach: --control-plane HOST:PORT[,HOST:PORT…]",
    )


def _tuple(version: str) -> tuple[int, ...] | None:
    parts = version.split(".")
    if not version or not all(p.isdigit() for p in parts):
        return None
    return tuple(int(p) for p in parts)


def doctor_events(
    checks: list[Check], *, host: str, warnings: list[dict], clock: Clock
) -> Iterator[StepEvent]:
    """The doctor step of ``node add`` and ``server add``: an event per check (warnings
    also kept in ``warnings``, for the result), then OnboardError naming every failed
    check, or one closing event."""
    for c in checks:
        if c.status == "warn":
            warnings.append({"check": c.name, "detail": c.detail, "fix": c.fix})
        yield StepEvent(
            step="doctor",
            status=c.status,
            item=c.name,
            detail=c.detail,
            fix=c.fix,
            elapsed_s=clock.elapsed(),
        )
    failed = [c for c in checks if c.status == "fail"]
    if failed:
        raise OnboardError(
            f"{len(failed)} check(s) failed on {host}: " + "; ".join(c.detail for c in failed),
            hint=" · ".join(c.fix for c in failed if c.fix),
        )
    warned = sum(c.status == "warn" for c in checks)
    yield StepEvent(
        step="doctor",
        status="ok",
        detail=f"{len(checks)} checks, {warned} warning(s)",
        elapsed_s=clock.elapsed(),
    )
