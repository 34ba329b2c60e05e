"""Hardware discovery: what this node is, from the machine or from a recording.

``probe_for(hardware, data_dir)`` picks the probe agent.yaml asks for;
``discover`` is the one-shot form. Both probes' methods block (NVML, /proc,
a memory copy): the agent calls them through ``asyncio.to_thread``.

    nvml.py       cards, MIG instances, samples and processes through NVML
    links.py      NVLink peers (NVML, else nvidia-smi topo -m) and PCIe links
    host.py       OS, CPU, memory, disk, driver
    bandwidth.py  the host's memory bandwidth, measured
    fake.py       a recorded inventory, and processes from a directory
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from agentd.discovery import bandwidth, host, nvml
from agentd.discovery.fake import FakeGpuProbe, procs_dir_for
from llmgw.config import HardwareConfig
from llmgw.inventory import GpuSampleInfo, Inventory

__all__ = ["FakeGpuProbe", "Probe", "RealProbe", "discover", "probe_for"]


class Probe(Protocol):
    """Where an agent's hardware facts and live GPU figures come from."""

    def inventory(self) -> Inventory: ...

    def sample(self) -> list[GpuSampleInfo]: ...

    def processes(self) -> dict[int, list[tuple[int, int]]]:
        """Unit index -> (pid, bytes used) of the processes holding memory on it.

        A unit missing from the answer is one whose processes cannot be listed.
        """

    def engine_env(self) -> dict[str, str]:
        """What every engine's environment needs for this probe to see it ({} for NVML)."""

    def mem_bandwidth_gbs(self) -> float:
        """The host's memory bandwidth in GB/s; 0.0 when unknown."""


class RealProbe:
    """This machine: /proc and /etc for the host, NVML for the GPUs."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir

    def inventory(self) -> Inventory:
        facts = host.read_host(self.data_dir)
        report = nvml.read_gpus()
        facts = facts.model_copy(
            update={
                "probe": "nvml",
                "gpu_note": report.note,
                "warnings": [*facts.warnings, *report.warnings],
            }
        )
        return Inventory(host=facts, gpus=report.gpus)

    def sample(self) -> list[GpuSampleInfo]:
        return nvml.sample()

    def processes(self) -> dict[int, list[tuple[int, int]]]:
        return nvml.processes()

    def engine_env(self) -> dict[str, str]:
        return {}

    def mem_bandwidth_gbs(self) -> float:
        return bandwidth.measure_gbs()


def probe_for(hardware: HardwareConfig, data_dir: Path | None = None) -> Probe:
    """The probe agent.yaml's ``hardware`` section names.

    ``data_dir`` is whose free disk the real probe reports; by default the
    agent data dir of the paths in force; a fake probe reads what engines
    hold on its cards from under it. A fake probe with an unknown fixture
    raises DiscoveryError listing the recorded ones.
    """
    if data_dir is None:
        from llmgw.paths import resolve

        data_dir = resolve().agent_data_dir
    if hardware.probe == "fake":
        return FakeGpuProbe.from_fixture(hardware.fixture, procs_dir=procs_dir_for(data_dir))
    return RealProbe(data_dir)


def discover(hardware: HardwareConfig, data_dir: Path) -> Inventory:
    """This node's inventory, as the configured probe reports it."""
    return probe_for(hardware, data_dir).inventory()
