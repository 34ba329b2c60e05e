"""A stand-in for the ``pynvml`` module over a recorded machine, raising pynvml's own errors.

It implements the NVML calls discovery makes, each answering from a dict
that records what a driver said (``A100_MIG``, ``HGX_H100`` below). A fact
missing from the recording is what a driver without it answers:
NVML_ERROR_NOT_SUPPORTED. So a test states a machine, not a call sequence.

    lib = FakePynvml(HGX_H100)
    report = nvml.read_gpus(lib)
"""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

import pynvml


def _err(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


class FakePynvml:
    """``pynvml`` for the machine ``recording`` describes.

    recording = {"cards": [card, ...]}, a card = {
        "uuid", "name", "memory_total", "memory_used", "cc": [9, 0], "bus": "00000000:18:00.0",
        "mig": 0 | 1 (absent: no MIG), "max_mig": 7,
        "mig_devices": [{"uuid": "MIG-…", "name": "…", "memory_total": …, "procs": […]} | None],
        "pcie": {"gen", "width", "gen_max", "width_max", "card_gen_max"} (each may be absent),
        "nvlink": [{"active": bool, "remote_bus": "…", "remote_type": 0 | 2}, …] (absent: none),
        "procs": [{"pid", "used", "kind": "compute" | "graphics"}],
        "util", "temp", "lost": bool,
    }
    """

    NVMLError = pynvml.NVMLError
    NVML_ERROR_LIBRARY_NOT_FOUND = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    NVML_ERROR_DRIVER_NOT_LOADED = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU

    def __init__(
        self, recording: dict, *, init_error: int | None = None, without: frozenset = frozenset()
    ) -> None:
        self.recording = copy.deepcopy(recording)
        self.init_error = init_error
        # Calls this pynvml lacks, as an older nvidia-ml-py does.
        self.without = without
        self.inits = self.shutdowns = 0
        self.calls: set[str] = set()

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("nvml"):
            if name in object.__getattribute__(self, "without"):
                raise AttributeError(name)
            object.__getattribute__(self, "calls").add(name)
        return object.__getattribute__(self, name)

    # -- session -------------------------------------------------------------

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise _err(self.init_error)
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    # -- cards ---------------------------------------------------------------

    @property
    def cards(self) -> list[dict]:
        return self.recording["cards"]

    def nvmlDeviceGetCount(self) -> int:
        return len(self.cards)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> dict:
        card = self.cards[index]
        if card.get("lost"):
            raise _err(pynvml.NVML_ERROR_GPU_IS_LOST)
        return card

    @staticmethod
    def _fact(handle: dict, key: str) -> Any:
        if key not in handle:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return handle[key]

    def nvmlDeviceGetUUID(self, h: dict) -> str:
        return h["uuid"]

    def nvmlDeviceGetName(self, h: dict) -> str:
        return h["name"]

    def nvmlDeviceGetMemoryInfo(self, h: dict) -> SimpleNamespace:
        return SimpleNamespace(total=h["memory_total"], used=h.get("memory_used", 0))

    def nvmlDeviceGetCudaComputeCapability(self, h: dict) -> tuple[int, int]:
        return tuple(self._fact(h, "cc"))

    def nvmlDeviceGetPciInfo(self, h: dict) -> SimpleNamespace:
        # A ctypes char array reads back as bytes.
        return SimpleNamespace(busId=h["bus"].encode())

    def nvmlDeviceGetUtilizationRates(self, h: dict) -> SimpleNamespace:
        return SimpleNamespace(gpu=self._fact(h, "util"), memory=0)

    def nvmlDeviceGetTemperature(self, h: dict, sensor: int) -> int:
        return self._fact(h, "temp")

    # -- MIG -----------------------------------------------------------------

    def nvmlDeviceGetMigMode(self, h: dict) -> list[int]:
        mode = self._fact(h, "mig")
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: dict) -> int:
        return self._fact(h, "max_mig")

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: dict, index: int) -> dict:
        devices = h.get("mig_devices", [])
        if index >= len(devices) or devices[index] is None:
            raise _err(pynvml.NVML_ERROR_NOT_FOUND)
        return devices[index]

    # -- PCIe ----------------------------------------------------------------

    def _pcie(self, h: dict, key: str) -> int:
        return self._fact(self._fact(h, "pcie"), key)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: dict) -> int:
        return self._pcie(h, "gen")

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: dict) -> int:
        return self._pcie(h, "width")

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: dict) -> int:
        return self._pcie(h, "gen_max")

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: dict) -> int:
        return self._pcie(h, "width_max")

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, h: dict) -> int:
        return self._pcie(h, "card_gen_max")

    # -- NVLink --------------------------------------------------------------

    def _link(self, h: dict, link: int) -> dict:
        links = self._fact(h, "nvlink")
        if link >= len(links):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return links[link]

    def nvmlDeviceGetNvLinkState(self, h: dict, link: int) -> int:
        return pynvml.NVML_FEATURE_ENABLED if self._link(h, link)["active"] else 0

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: dict, link: int) -> SimpleNamespace:
        return SimpleNamespace(busId=self._link(h, link)["remote_bus"].encode())

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h: dict, link: int) -> int:
        return self._link(h, link).get("remote_type", pynvml.NVML_NVLINK_DEVICE_TYPE_GPU)

    # -- processes -----------------------------------------------------------

    def _procs(self, h: dict, kind: str) -> list[SimpleNamespace]:
        if h.get("mig") == pynvml.NVML_DEVICE_MIG_ENABLE:
            # As NVML does: the card's list holds every instance's processes.
            listed = [p for d in h.get("mig_devices", []) if d for p in d.get("procs", [])]
        else:
            listed = h.get("procs", [])
        return [
            SimpleNamespace(pid=p["pid"], usedGpuMemory=p.get("used"))
            for p in listed
            if p.get("kind", "compute") == kind
        ]

    def nvmlDeviceGetComputeRunningProcesses(self, h: dict) -> list[SimpleNamespace]:
        return self._procs(h, "compute")

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: dict) -> list[SimpleNamespace]:
        return self._procs(h, "graphics")


GIB = 2**30
H100_NAME = "NVIDIA H100 80GB HBM3"


def _h100(i: int, **extra) -> dict:
    return {
        "uuid": f"GPU-h100-{i}", "name": H100_NAME, "memory_total": 80 * GIB, "cc": [9, 0],
        "bus": f"00000000:{0x18 + 0x10 * i:02x}:00.0", "mig": 0,
        "pcie": {"gen": 1, "width": 16, "gen_max": 5, "width_max": 16, "card_gen_max": 5},
        # An HGX board: each card's 18 links go to the NVSwitches, whose bus ids are no card's.
        "nvlink": [
            {"active": True, "remote_bus": f"00000000:{0xc0 + link % 4:02x}:00.0", "remote_type": 2}
            for link in range(18)
        ],
        **extra,
    }  # fmt: skip


# Four H100 on NVSwitches; card 3 sits in a Gen4 slot on 8 lanes.
HGX_H100 = {
    "cards": [
        _h100(0),
        _h100(1),
        _h100(2),
        _h100(3, pcie={"gen": 4, "width": 8, "gen_max": 4, "width_max": 16, "card_gen_max": 5}),
    ]
}

# Two A40s bridged to each other by NVLink (no switch), and a third card without NVLink.
A40_PAIR_AND_ONE = {
    "cards": [
        {
            "uuid": "GPU-a40-0", "name": "NVIDIA A40", "memory_total": 48 * GIB, "cc": [8, 6],
            "bus": "00000000:41:00.0",
            "nvlink": [{"active": True, "remote_bus": "0000:61:00.0"}] * 4
            + [{"active": False, "remote_bus": ""}],
        },
        {
            "uuid": "GPU-a40-1", "name": "NVIDIA A40", "memory_total": 48 * GIB, "cc": [8, 6],
            "bus": "00000000:61:00.0",
            "nvlink": [{"active": True, "remote_bus": "00000000:41:00.0"}] * 4,
        },
        {
            "uuid": "GPU-l4", "name": "NVIDIA L4", "memory_total": 24 * GIB, "cc": [8, 9],
            "bus": "00000000:81:00.0",
        },
    ]
}  # fmt: skip

# One A100 80GB in MIG mode: a 3g.40gb, two 1g.10gb and an empty slot; and a whole card.
A100_NAME = "NVIDIA A100-SXM4-80GB"
A100_MIG = {
    "cards": [
        {
            "uuid": "GPU-a100-0", "name": A100_NAME, "memory_total": 80 * GIB,
            "memory_used": 3 * GIB, "cc": [8, 0], "bus": "00000000:07:00.0", "mig": 1,
            "max_mig": 7,
            "pcie": {"gen": 4, "width": 16, "gen_max": 4, "width_max": 16, "card_gen_max": 4},
            "mig_devices": [
                {"uuid": "MIG-3g-0", "name": f"{A100_NAME} MIG 3g.40gb",
                 "memory_total": 39 * GIB, "memory_used": 2 * GIB,
                 "procs": [{"pid": 4242, "used": 2 * GIB}]},
                {"uuid": "MIG-1g-1", "name": f"{A100_NAME} MIG 1g.10gb",
                 "memory_total": 9 * GIB + GIB // 2},
                None,
                {"uuid": "MIG-1g-3", "name": f"{A100_NAME} MIG 1g.10gb",
                 "memory_total": 9 * GIB + GIB // 2,
                 "procs": [{"pid": 5151, "used": GIB, "kind": "graphics"}]},
            ],
        },
        {
            "uuid": "GPU-a100-1", "name": A100_NAME, "memory_total": 80 * GIB, "cc": [8, 0],
            "bus": "00000000:0f:00.0", "mig": 0,
            "procs": [{"pid": 777, "used": 5 * GIB}, {"pid": 777, "used": 5 * GIB,
                                                       "kind": "graphics"}],
        },
    ]
}  # fmt: skip
