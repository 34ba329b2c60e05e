"""The node console's GPU figures, read straight from NVML (not through the agent).

The console asks NVML itself so a node whose agent is down still shows its
cards. A ``GpuReader`` is anything with a blocking ``read()``: ``NvmlGpuReader``
on a real node, ``InventoryGpuReader`` for a recorded inventory (the hardware
fixtures tests and demos run on). The screen calls it through
``asyncio.to_thread`` with the 2 s cap of every probe.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from llmgw.inventory import GpuInfo, Inventory

NO_DRIVER = "no NVIDIA driver"
NO_GPUS = "NVML found no GPUs"
NO_PYNVML = "pynvml is not installed, so no GPU figures (install nvidia-ml-py)"
# Idle figures for a recorded inventory (as the agent's fake probe reports them).
IDLE_TEMPERATURE_C = 35


@dataclass(frozen=True)
class GpuReading:
    """One GPU as the console shows it."""

    index: int
    name: str
    memory_used_bytes: int = 0
    memory_total_bytes: int = 0
    utilization_percent: int | None = None  # None: the card does not say
    temperature_c: int | None = None
    # Processes on the card, to find the node's engines on it.
    pids: tuple[int, ...] = ()
    # Its links and MIG facts where this reader knows them (a recorded
    # inventory); NVML's reader leaves them to the agent's status.
    facts: GpuInfo | None = None


@dataclass(frozen=True)
class GpuReport:
    """The GPUs, or none and why in one line (``note``)."""

    gpus: list[GpuReading] = field(default_factory=list)
    note: str = ""
    source: str = "nvml"  # "nvml" or "recorded:<name>"


class GpuReader(Protocol):
    def read(self) -> GpuReport:
        """Every GPU now; never raises for a missing or failing driver (blocking)."""


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


class NvmlGpuReader:
    """This machine's GPUs through ``pynvml`` (nvidia-ml-py).

    ``lib`` is the module to call, ``pynvml`` by default; tests pass a fake
    with the same names that raises pynvml's own errors.
    """

    def __init__(self, lib: Any = None) -> None:
        self._lib = lib

    def read(self) -> GpuReport:
        lib = self._lib
        if lib is None:
            try:
                import pynvml as lib
            except ImportError:
                return GpuReport(note=NO_PYNVML)
        try:
            lib.nvmlInit()
        except lib.NVMLError as e:
            no_driver = (lib.NVML_ERROR_LIBRARY_NOT_FOUND, lib.NVML_ERROR_DRIVER_NOT_LOADED)
            if getattr(e, "value", None) in no_driver:
                return GpuReport(note=NO_DRIVER)
            return GpuReport(note=f"NVML failed: {e}")
        try:
            gpus = []
            count = lib.nvmlDeviceGetCount()
            for index in range(count):
                try:
                    gpus.append(_reading(lib, lib.nvmlDeviceGetHandleByIndex(index), index))
                except lib.NVMLError as e:
                    # A card fallen off the bus must not hide the others.
                    gpus.append(GpuReading(index=index, name=f"not readable: {e}"))
            gpus += _mig_readings(lib, count)
            return GpuReport(gpus=gpus, note="" if gpus else NO_GPUS)
        except lib.NVMLError as e:
            return GpuReport(note=f"NVML failed: {e}")
        finally:
            try:
                lib.nvmlShutdown()
            except lib.NVMLError:
                pass  # nothing to do about it; the next read inits again


def _mig_readings(lib: Any, count: int) -> list[GpuReading]:
    """The MIG instances of cards in MIG mode, numbered after the cards as the agent does."""
    readings: list[GpuReading] = []
    next_index = count
    for index in range(count):
        try:
            handle = lib.nvmlDeviceGetHandleByIndex(index)
            if lib.nvmlDeviceGetMigMode(handle)[0] != getattr(lib, "NVML_DEVICE_MIG_ENABLE", 1):
                continue
            slots = lib.nvmlDeviceGetMaxMigDeviceCount(handle)
        except (lib.NVMLError, AttributeError):
            continue  # no MIG here, or a driver or pynvml that cannot say
        for slot in range(slots):
            try:
                mig = lib.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except lib.NVMLError:
                continue  # an empty slot
            try:
                readings.append(_reading(lib, mig, next_index))
            except lib.NVMLError as e:
                readings.append(GpuReading(index=next_index, name=f"not readable: {e}"))
            next_index += 1
    return readings


def _reading(lib: Any, handle: Any, index: int) -> GpuReading:
    memory = lib.nvmlDeviceGetMemoryInfo(handle)

    def optional(fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except lib.NVMLError:
            return None

    util = optional(lib.nvmlDeviceGetUtilizationRates, handle)
    temp = optional(lib.nvmlDeviceGetTemperature, handle, lib.NVML_TEMPERATURE_GPU)
    procs = optional(lib.nvmlDeviceGetComputeRunningProcesses, handle) or []
    # Vulkan engines (llama.cpp's Vulkan build) are graphics processes.
    procs += optional(getattr(lib, "nvmlDeviceGetGraphicsRunningProcesses", list), handle) or []
    return GpuReading(
        index=index,
        name=_text(lib.nvmlDeviceGetName(handle)),
        memory_used_bytes=int(memory.used),
        memory_total_bytes=int(memory.total),
        utilization_percent=int(util.gpu) if util is not None else None,
        temperature_c=int(temp) if temp is not None else None,
        pids=tuple(p.pid for p in procs),
    )


class InventoryGpuReader:
    """The GPUs of a recorded inventory, idle (what a fake-probe agent reports)."""

    def __init__(self, inventory: Inventory, name: str = "") -> None:
        self._inventory = inventory
        self.name = name
        # Tests set figures here: GPU index -> (memory used, utilization %).
        self.load: dict[int, tuple[int, int]] = {}

    def read(self) -> GpuReport:
        gpus = [
            GpuReading(
                index=g.index,
                name=g.name,
                memory_used_bytes=self.load.get(g.index, (0, 0))[0],
                memory_total_bytes=g.memory_total_bytes,
                utilization_percent=self.load.get(g.index, (0, 0))[1],
                temperature_c=IDLE_TEMPERATURE_C,
                facts=g,
            )
            for g in self._inventory.gpus
        ]
        note = "" if gpus else (self._inventory.host.gpu_note or NO_GPUS)
        return GpuReport(gpus=gpus, note=note, source=f"recorded:{self.name}")
