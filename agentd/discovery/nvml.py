"""GPUs through NVML (the ``pynvml`` module of nvidia-ml-py).

NVML calls block; these are sync functions the agent runs through
``asyncio.to_thread``. Neither ever raises for a machine without a driver or
with a sick one: discovery answers "no GPUs" and says why, so a CPU node and
a node with a broken driver both stay up and explain themselves.

``lib`` is the module to call, ``pynvml`` by default; tests pass a fake with
the same functions that raises pynvml's own error types.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pynvml

from agentd.discovery import links
from llmgw.inventory import GpuInfo, GpuSampleInfo

log = logging.getLogger(__name__)

NO_DRIVER = "no NVIDIA driver"
NO_GPUS = "NVML found no GPUs"

# libnvidia-ml.so.1 missing (no driver installed), or present with the
# kernel module not loaded: either way there is no driver to use.
_NO_DRIVER_ERRORS = (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, pynvml.NVML_ERROR_DRIVER_NOT_LOADED)


@dataclass
class NvmlReport:
    """The GPUs NVML sees, or none and why."""

    gpus: list[GpuInfo] = field(default_factory=list)
    # Why there are no GPUs ("no NVIDIA driver", "NVML failed: ..."); "" when there are.
    note: str = ""
    # GPUs that were skipped, and the like: the node still runs on the rest.
    warnings: list[str] = field(default_factory=list)


class _NvmlUnavailable(Exception):
    def __init__(self, note: str) -> None:
        super().__init__(note)
        self.note = note


def _note_for(err: pynvml.NVMLError) -> str:
    if getattr(err, "value", None) in _NO_DRIVER_ERRORS:
        return NO_DRIVER
    return f"NVML failed: {err}"


@contextmanager
def _session(lib: Any) -> Iterator[None]:
    # Init and shut down on every call rather than once per agent: NVML
    # counts its inits, and a driver reinstalled under a running agent is
    # picked up at the next call instead of failing until a restart.
    try:
        lib.nvmlInit()
    except pynvml.NVMLError as e:
        raise _NvmlUnavailable(_note_for(e)) from e
    try:
        yield
    finally:
        try:
            lib.nvmlShutdown()
        except pynvml.NVMLError as e:
            log.debug("nvmlShutdown: %s", e)


def _text(value: str | bytes) -> str:
    # Structure fields (the PCI bus id) come back as bytes; functions as str.
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _optional(lib: Any, name: str, *args: Any, default: Any) -> Any:
    """``lib.<name>(*args)``, or ``default`` when the driver or card cannot say.

    Every fact beyond a card's identity and memory is optional: a driver too
    old for a call (or a pynvml without it), a card that does not support it,
    or a figure NVML cannot read costs that one fact, never the card.
    """
    fn = getattr(lib, name, None)
    if fn is None:
        return default
    try:
        return fn(*args)
    except pynvml.NVMLError as e:
        log.debug("%s: %s", name, e)
        return default


def _mig_mode(lib: Any, handle: Any) -> str:
    modes = _optional(lib, "nvmlDeviceGetMigMode", handle, default=None)
    if modes is None:
        return ""
    return "enabled" if modes[0] == pynvml.NVML_DEVICE_MIG_ENABLE else "disabled"


def _mig_handles(lib: Any, handle: Any) -> list[Any]:
    """The MIG devices carved from a card in MIG mode, in NVML's order."""
    count = _optional(lib, "nvmlDeviceGetMaxMigDeviceCount", handle, default=0)
    handles = []
    for i in range(int(count or 0)):
        try:
            handles.append(lib.nvmlDeviceGetMigDeviceHandleByIndex(handle, i))
        except pynvml.NVMLError:
            continue  # NOT_FOUND: a slot with no instance in it
    return handles


@dataclass
class _Unit:
    """One placeable unit: a whole card, or a MIG instance of one."""

    index: int
    handle: Any
    # The card's index for a MIG instance; None for a whole card.
    parent: int | None = None
    # A card in MIG mode: its instances are the units, never the card itself.
    mig_enabled: bool = False


def _units(lib: Any, count: int, warnings: list[str] | None = None) -> list[_Unit]:
    """Every card, then every MIG instance numbered on from the last card.

    Numbering follows NVML's card order then each card's MIG order, the
    same in discovery, samples and processes, so a unit index means one
    thing everywhere. A card NVML cannot open is left out (and said so in
    ``warnings``) without renumbering the others.
    """
    cards: list[_Unit] = []
    for index in range(count):
        try:
            handle = lib.nvmlDeviceGetHandleByIndex(index)
        except pynvml.NVMLError as e:
            if warnings is not None:
                warnings.append(f"GPU {index} skipped: NVML failed: {e}")
            continue
        cards.append(_Unit(index, handle, mig_enabled=_mig_mode(lib, handle) == "enabled"))
    units = list(cards)
    next_index = count
    for card in cards:
        if not card.mig_enabled:
            continue
        for mig in _mig_handles(lib, card.handle):
            units.append(_Unit(next_index, mig, parent=card.index))
            next_index += 1
    return units


_MIG_PROFILE = re.compile(r"MIG\s+(\d+g\.\d+gb)", re.IGNORECASE)


def _mig_profile(lib: Any, handle: Any, name: str) -> str:
    """NVIDIA's name for an instance's size ("1g.10gb"), from its name or its attributes."""
    m = _MIG_PROFILE.search(name)
    if m:
        return m.group(1).lower()
    attrs = _optional(lib, "nvmlDeviceGetAttributes", handle, default=None)
    if attrs is None or not getattr(attrs, "gpuInstanceSliceCount", 0):
        return ""
    return f"{attrs.gpuInstanceSliceCount}g.{round(attrs.memorySizeMB / 1024)}gb"


def _card(lib: Any, unit: _Unit, pcie: dict[str, int]) -> GpuInfo:
    handle = unit.handle
    cc = _optional(lib, "nvmlDeviceGetCudaComputeCapability", handle, default=None)
    return GpuInfo(
        index=unit.index,
        uuid=_text(lib.nvmlDeviceGetUUID(handle)),
        name=_text(lib.nvmlDeviceGetName(handle)),
        memory_total_bytes=int(lib.nvmlDeviceGetMemoryInfo(handle).total),
        compute_capability=f"{cc[0]}.{cc[1]}" if cc else "",
        pci_bus_id=_text(lib.nvmlDeviceGetPciInfo(handle).busId),
        mig_mode="enabled" if unit.mig_enabled else _mig_mode(lib, handle),
        pcie_gen=int(pcie["pcie_gen"]),
        pcie_width=int(pcie["pcie_width"]),
        pcie_gen_max=int(pcie["pcie_gen_max"]),
        pcie_width_max=int(pcie["pcie_width_max"]),
    )


def _mig_instance(lib: Any, unit: _Unit, parent: GpuInfo) -> GpuInfo:
    """A MIG instance as a unit of its own: its uuid and memory, its card's other facts."""
    handle = unit.handle
    name = _text(lib.nvmlDeviceGetName(handle))
    profile = _mig_profile(lib, handle, name)
    if not _MIG_PROFILE.search(name):
        # Some drivers name an instance after its card alone: it is said the same way.
        name = f"{parent.name} MIG {profile}".strip()
    return GpuInfo(
        index=unit.index,
        uuid=_text(lib.nvmlDeviceGetUUID(handle)),
        name=name,
        memory_total_bytes=int(lib.nvmlDeviceGetMemoryInfo(handle).total),
        compute_capability=parent.compute_capability,
        pci_bus_id=parent.pci_bus_id,
        mig_instance=True,
        mig_parent_index=parent.index,
        mig_profile=profile,
    )


def read_gpus(lib: Any = pynvml, *, topo: Callable[[], str] = links.run_topo) -> NvmlReport:
    """Every GPU and MIG instance NVML sees; never raises for a missing or failing driver.

    ``topo`` gives ``nvidia-smi topo -m``'s output, read only where NVML says
    nothing about NVLink.
    """
    report = NvmlReport()
    try:
        with _session(lib):
            count = lib.nvmlDeviceGetCount()
            units = _units(lib, count, report.warnings)
            cards: dict[int, GpuInfo] = {}
            handles: dict[int, tuple[Any, str]] = {}
            for unit in units:
                try:
                    if unit.parent is None:
                        pcie = links.read_pcie(lib, unit.handle, _optional)
                        gpu = _card(lib, unit, pcie)
                        cards[unit.index] = gpu
                        handles[unit.index] = (unit.handle, gpu.pci_bus_id)
                        warning = links.pcie_warning(
                            gpu.index, gpu.name, gpu.pci_bus_id,
                            width=gpu.pcie_width, gen_max=gpu.pcie_gen_max,
                            width_max=gpu.pcie_width_max, card_gen_max=int(pcie["card_gen_max"]),
                        )  # fmt: skip
                        if warning:
                            report.warnings.append(warning)
                    elif unit.parent in cards:
                        gpu = _mig_instance(lib, unit, cards[unit.parent])
                    else:
                        continue
                except pynvml.NVMLError as e:
                    # One lost card (Xid 79, "GPU has fallen off the bus")
                    # must not hide the others.
                    what = "GPU" if unit.parent is None else f"MIG instance of GPU {unit.parent},"
                    report.warnings.append(f"{what} {unit.index} skipped: NVML failed: {e}")
                    continue
                report.gpus.append(gpu)
            carved = {g.mig_parent_index for g in report.gpus if g.mig_instance}
            for gpu in report.gpus:
                if gpu.mig_mode == "enabled" and gpu.index not in carved:
                    report.warnings.append(
                        f"GPU {gpu.index} ({gpu.name}) is in MIG mode with no instances, so "
                        "nothing can run on it: make some (nvidia-smi mig -cgi <profiles> -C) "
                        "or turn MIG off (nvidia-smi -i <card> -mig 0)"
                    )
            peers = links.with_fallback(links.nvml_peers(lib, handles), sorted(handles), topo)
            for gpu in report.gpus:
                if not gpu.mig_instance:
                    gpu.nvlink_peers = peers.get(gpu.index, [])
    except _NvmlUnavailable as e:
        report.note = e.note
    except pynvml.NVMLError as e:
        report.gpus, report.note = [], _note_for(e)
    if not report.gpus and not report.note:
        report.note = NO_GPUS
    for w in report.warnings:
        log.warning("%s", w)
    return report


def _sample(lib: Any, unit: _Unit) -> GpuSampleInfo:
    handle = unit.handle
    memory = lib.nvmlDeviceGetMemoryInfo(handle)
    util = _optional(lib, "nvmlDeviceGetUtilizationRates", handle, default=None)
    temp = _optional(
        lib, "nvmlDeviceGetTemperature", handle, pynvml.NVML_TEMPERATURE_GPU, default=0
    )
    return GpuSampleInfo(
        index=unit.index,
        memory_used_bytes=int(memory.used),
        utilization_percent=int(util.gpu) if util is not None else 0,
        temperature_c=int(temp),
    )


def sample(lib: Any = pynvml) -> list[GpuSampleInfo]:
    """Each unit's memory used, utilization and temperature; [] with no driver.

    A heartbeat must go out whatever NVML does, so failures give no sample
    for that unit (or none at all) rather than an exception.
    """
    samples: list[GpuSampleInfo] = []
    try:
        with _session(lib):
            for unit in _units(lib, lib.nvmlDeviceGetCount()):
                try:
                    samples.append(_sample(lib, unit))
                except pynvml.NVMLError as e:
                    log.debug("GPU %s not sampled: %s", unit.index, e)
    except (_NvmlUnavailable, pynvml.NVMLError) as e:
        log.debug("no GPU samples: %s", e)
    return samples


def _unit_processes(lib: Any, handle: Any) -> list[tuple[int, int]] | None:
    """(pid, bytes used) of the compute and graphics processes on one unit.

    Vulkan engines (llama.cpp's Vulkan build) hold memory as graphics
    processes; CUDA ones as compute. A process in both lists counts once.
    Bytes are 0 where NVML cannot tell (it lists the process all the same).
    None when NVML lists neither kind for this unit.
    """
    used: dict[int, int] = {}
    answered = False
    for name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        procs = _optional(lib, name, handle, default=None)
        if procs is None:
            continue
        answered = True
        for p in procs:
            used[p.pid] = max(used.get(p.pid, 0), int(p.usedGpuMemory or 0))
    return sorted(used.items()) if answered else None


def processes(lib: Any = pynvml) -> dict[int, list[tuple[int, int]]]:
    """Unit index -> (pid, bytes used) of every process holding memory on it; {} with no driver.

    A card in MIG mode is read through its instances, each its own unit, so
    no process is counted on both. The agent tells its own engines' processes
    from others' (by descent): a GPU shard is ready only when its processes
    hold memory on its units, and the rest is foreign memory placement must
    not hand out. A unit whose processes NVML cannot list is left out.
    """
    out: dict[int, list[tuple[int, int]]] = {}
    try:
        with _session(lib):
            for unit in _units(lib, lib.nvmlDeviceGetCount()):
                if unit.mig_enabled:
                    continue
                procs = _unit_processes(lib, unit.handle)
                if procs is not None:
                    out[unit.index] = procs
    except (_NvmlUnavailable, pynvml.NVMLError) as e:
        log.debug("no GPU processes: %s", e)
    return out
