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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pynvml

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


def _optional(fn: Any, *args: Any, default: Any) -> Any:
    """``fn(*args)``, or ``default`` when the card does not support it."""
    try:
        return fn(*args)
    except pynvml.NVMLError_NotSupported:
        return default


def _mig_mode(lib: Any, handle: Any) -> str:
    modes = _optional(lib.nvmlDeviceGetMigMode, handle, default=None)
    if modes is None:
        return ""
    return "enabled" if modes[0] == pynvml.NVML_DEVICE_MIG_ENABLE else "disabled"


def _gpu(lib: Any, index: int) -> GpuInfo:
    handle = lib.nvmlDeviceGetHandleByIndex(index)
    cc = _optional(lib.nvmlDeviceGetCudaComputeCapability, handle, default=None)
    return GpuInfo(
        index=index,
        uuid=_text(lib.nvmlDeviceGetUUID(handle)),
        name=_text(lib.nvmlDeviceGetName(handle)),
        memory_total_bytes=int(lib.nvmlDeviceGetMemoryInfo(handle).total),
        compute_capability=f"{cc[0]}.{cc[1]}" if cc else "",
        pci_bus_id=_text(lib.nvmlDeviceGetPciInfo(handle).busId),
        mig_mode=_mig_mode(lib, handle),
    )


def read_gpus(lib: Any = pynvml) -> NvmlReport:
    """Every GPU NVML sees; never raises for a missing or failing driver."""
    report = NvmlReport()
    try:
        with _session(lib):
            count = lib.nvmlDeviceGetCount()
            for index in range(count):
                try:
                    report.gpus.append(_gpu(lib, index))
                except pynvml.NVMLError as e:
                    # One lost card (Xid 79, "GPU has fallen off the bus")
                    # must not hide the others.
                    report.warnings.append(f"GPU {index} skipped: NVML failed: {e}")
    except _NvmlUnavailable as e:
        report.note = e.note
    except pynvml.NVMLError as e:
        report.gpus, report.note = [], _note_for(e)
    if not report.gpus and not report.note:
        report.note = NO_GPUS
    for w in report.warnings:
        log.warning("%s", w)
    return report


def _sample(lib: Any, index: int) -> GpuSampleInfo:
    handle = lib.nvmlDeviceGetHandleByIndex(index)
    memory = lib.nvmlDeviceGetMemoryInfo(handle)
    util = _optional(lib.nvmlDeviceGetUtilizationRates, handle, default=None)
    temp = _optional(lib.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU, default=0)
    return GpuSampleInfo(
        index=index,
        memory_used_bytes=int(memory.used),
        utilization_percent=int(util.gpu) if util is not None else 0,
        temperature_c=int(temp),
    )


def sample(lib: Any = pynvml) -> list[GpuSampleInfo]:
    """Each GPU's memory used, utilization and temperature; [] with no driver.

    A heartbeat must go out whatever NVML does, so failures give no sample
    for that GPU (or none at all) rather than an exception.
    """
    samples: list[GpuSampleInfo] = []
    try:
        with _session(lib):
            for index in range(lib.nvmlDeviceGetCount()):
                try:
                    samples.append(_sample(lib, index))
                except pynvml.NVMLError as e:
                    log.debug("GPU %s not sampled: %s", index, e)
    except (_NvmlUnavailable, pynvml.NVMLError) as e:
        log.debug("no GPU samples: %s", e)
    return samples


def processes(lib: Any = pynvml) -> dict[int, list[tuple[int, int]]]:
    """GPU index -> (pid, bytes used) of every compute process on it; {} with no driver.

    The agent tells its own engines' processes from others' (by descent) and
    reports the rest as foreign memory, which placement must not hand out.
    """
    out: dict[int, list[tuple[int, int]]] = {}
    try:
        with _session(lib):
            for index in range(lib.nvmlDeviceGetCount()):
                try:
                    handle = lib.nvmlDeviceGetHandleByIndex(index)
                    procs = lib.nvmlDeviceGetComputeRunningProcesses(handle)
                except pynvml.NVMLError as e:
                    log.debug("GPU %s processes not read: %s", index, e)
                    continue
                out[index] = [(p.pid, p.usedGpuMemory or 0) for p in procs]
    except (_NvmlUnavailable, pynvml.NVMLError) as e:
        log.debug("no GPU processes: %s", e)
    return out
