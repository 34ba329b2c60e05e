"""Hardware discovery: what this node is, from the machine or from a recording.

``probe_for(hardware, data_dir)`` picks the probe agent.yaml asks for;
``discover`` is the one-shot form. Both probes' methods block (NVML, /proc):
the agent calls them through ``asyncio.to_thread``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from agentd.discovery import host, nvml
from agentd.discovery.fake import FakeGpuProbe
from llmgw.config import HardwareConfig
from llmgw.inventory import GpuSampleInfo, Inventory

__all__ = ["FakeGpuProbe", "Probe", "RealProbe", "discover", "probe_for"]


class Probe(Protocol):
    """Where an agent's hardware facts and live GPU figures come from."""

    def inventory(self) -> Inventory: ...

    def sample(self) -> list[GpuSampleInfo]: ...

    def processes(self) -> dict[int, list[tuple[int, int]]]:
        """GPU index -> (pid, bytes used) of the processes on it."""


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


def probe_for(hardware: HardwareConfig, data_dir: Path | None = None) -> Probe:
    """The probe agent.yaml's ``hardware`` section names.

    ``data_dir`` is whose free disk the real probe reports; by default the
    agent data dir of the paths in force. A fake probe with an unknown
    fixture raises DiscoveryError listing the recorded ones.
    """
    if hardware.probe == "fake":
        return FakeGpuProbe.from_fixture(hardware.fixture)
    if data_dir is None:
        from llmgw.paths import resolve

        data_dir = resolve().agent_data_dir
    return RealProbe(data_dir)


def discover(hardware: HardwareConfig, data_dir: Path) -> Inventory:
    """This node's inventory, as the configured probe reports it."""
    return probe_for(hardware, data_dir).inventory()
