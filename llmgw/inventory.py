"""What a node has: its host facts and its GPUs, as plain pydantic models.

The agent fills these from the machine (or a recorded fixture) and sends them
as ``proto.llmgw.v1.HostFacts`` and ``Gpu``; the control plane turns them
back into these models for placement, which is pure code over them. No I/O here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from proto.llmgw.v1 import Gpu, GpuSample, HostFacts

MigMode = Literal["", "enabled", "disabled"]


class _Model(BaseModel):
    # A recorded inventory with a misspelt key must fail to load, not load
    # with that fact silently at its default.
    model_config = ConfigDict(extra="forbid")


class GpuInfo(_Model):
    """One NVIDIA GPU as NVML reports it."""

    index: int
    uuid: str
    name: str
    memory_total_bytes: int
    # "major.minor", e.g. "9.0" for Hopper, "8.9" for Ada; "" when unknown.
    compute_capability: str = ""
    # NVML's form, "00000000:18:00.0".
    pci_bus_id: str = ""
    # "" when the card does not support MIG at all.
    mig_mode: MigMode = ""
    # Indexes of the GPUs this one reaches over NVLink (directly or through
    # an NVSwitch).
    nvlink_peers: list[int] = []
    # The PCIe link to the host: generation and lanes now, and the most the
    # card and its slot can do; 0 when not read.
    pcie_gen: int = 0
    pcie_width: int = 0
    pcie_gen_max: int = 0
    pcie_width_max: int = 0
    # A MIG instance: a unit of its own with its own memory, placed alone.
    # Its uuid is the MIG device's ("MIG-…"); mig_parent_index is the card it
    # is carved from, mig_profile its size in NVIDIA's words ("3g.40gb").
    mig_instance: bool = False
    mig_parent_index: int = 0
    mig_profile: str = ""

    @property
    def compute_capability_tuple(self) -> tuple[int, int] | None:
        """(major, minor), or None when unknown or malformed."""
        major, dot, minor = self.compute_capability.partition(".")
        if not dot or not major.isdigit() or not minor.isdigit():
            return None
        return int(major), int(minor)


class HostInfo(_Model):
    """The facts of one machine; the same fields as proto HostFacts."""

    hostname: str = ""
    # From /etc/os-release: ID, ID_LIKE (split on spaces) and VERSION_ID.
    os_id: str = ""
    os_id_like: list[str] = []
    os_version_id: str = ""
    arch: str = ""
    cpu_flags: list[str] = []
    cpu_count: int = 0
    memory_total_bytes: int = 0
    disk_free_bytes: int = 0
    data_dir: str = ""
    # "" when no NVIDIA kernel module is loaded.
    nvidia_driver_version: str = ""
    nvidia_open_kernel_module: bool = False
    # Why the node reports no GPUs ("no NVIDIA driver"); "" when it has some.
    gpu_note: str = ""
    avx2: bool = False
    glibc_version: str = ""
    kernel: str = ""
    # Set when the facts come from a recorded inventory, not this machine.
    fake: bool = False
    # What produced these facts: "nvml" or "fake:<fixture name>".
    probe: str = ""
    warnings: list[str] = []
    # Measured host memory bandwidth, GB/s (0 until measured): CPU speed estimates.
    mem_bandwidth_gbs: float = 0.0

    @property
    def os_family(self) -> list[str]:
        """ID followed by ID_LIKE: the distributions this one behaves like."""
        return [i for i in [self.os_id, *self.os_id_like] if i]


class Inventory(_Model):
    """Everything discovery reports about one node."""

    host: HostInfo
    gpus: list[GpuInfo] = []

    @property
    def gpu_memory_total_bytes(self) -> int:
        return sum(g.memory_total_bytes for g in self.gpus)


class GpuSampleInfo(_Model):
    """One GPU's live figures, sent with every heartbeat."""

    index: int
    memory_used_bytes: int = 0
    # Memory held by processes that are not ours; the agent fills it in,
    # since only it knows which processes are its engines.
    memory_foreign_bytes: int = 0
    utilization_percent: int = 0
    temperature_c: int = 0


def gpu_to_proto(gpu: GpuInfo) -> Gpu:
    return Gpu(**gpu.model_dump())


def host_to_proto(host: HostInfo) -> HostFacts:
    return HostFacts(**host.model_dump())


def inventory_to_proto(inventory: Inventory) -> tuple[HostFacts, list[Gpu]]:
    """The two parts of a Register message that describe the hardware."""
    return host_to_proto(inventory.host), [gpu_to_proto(g) for g in inventory.gpus]


def sample_to_proto(sample: GpuSampleInfo) -> GpuSample:
    return GpuSample(**sample.model_dump())


def gpu_from_proto(gpu: Gpu) -> GpuInfo:
    # An older or newer agent may send a MIG mode we do not know; treat it
    # as "no MIG" rather than refusing the whole node.
    mig = gpu.mig_mode if gpu.mig_mode in ("enabled", "disabled") else ""
    fields = {name: getattr(gpu, name) for name in GpuInfo.model_fields}
    fields["nvlink_peers"] = list(gpu.nvlink_peers)
    return GpuInfo(**{**fields, "mig_mode": mig})


def host_from_proto(host: HostFacts) -> HostInfo:
    return HostInfo(**{name: getattr(host, name) for name in HostInfo.model_fields})


def inventory_from_proto(host: HostFacts, gpus: list[Gpu]) -> Inventory:
    """The Inventory an agent's Register message describes."""
    return Inventory(host=host_from_proto(host), gpus=[gpu_from_proto(g) for g in gpus])
