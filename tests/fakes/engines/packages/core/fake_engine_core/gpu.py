"""The stand-in's side of the fake-GPU process contract.

A real engine holds memory on its cards once it has loaded, and NVML lists
its process there. On a fake GPU node nothing can, so the stand-in writes
what NVML would say instead, and the agent's fake probe reads it:

    $LLMGW_FAKE_GPU_PROCS/<pid>.json =
        {"pid": <pid>, "cuda_visible_devices": "<its CUDA_VISIBLE_DEVICES>",
         "used_bytes_per_gpu": <its share of the card x LLMGW_FAKE_GPU_BYTES>}

``LLMGW_FAKE_ENGINE_ON_CPU=1`` makes it write nothing: an engine that fell
back to the CPU and serves all the same.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

PROCS_ENV = "LLMGW_FAKE_GPU_PROCS"
ON_CPU_ENV = "LLMGW_FAKE_ENGINE_ON_CPU"
CARD_BYTES_ENV = "LLMGW_FAKE_GPU_BYTES"
# An A100 40GB, the fake node the tests serve on.
NOMINAL_CARD_BYTES = 40 * 2**30


def claim_cards(fraction: float) -> Path | None:
    """Write this process's file (once "loaded"); the path, or None when there is none."""
    procs = os.environ.get(PROCS_ENV, "")
    devices = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    if not procs or not devices or os.environ.get(ON_CPU_ENV) == "1":
        return None
    card = int(os.environ.get(CARD_BYTES_ENV) or NOMINAL_CARD_BYTES)
    Path(procs).mkdir(parents=True, exist_ok=True)
    path = Path(procs) / f"{os.getpid()}.json"
    record = {
        "pid": os.getpid(),
        "cuda_visible_devices": devices,
        "used_bytes_per_gpu": int(fraction * card),
    }
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record))
    tmp.replace(path)  # a reader never sees half a file
    return path


def release_cards(path: Path | None) -> None:
    if path is not None:
        path.unlink(missing_ok=True)
