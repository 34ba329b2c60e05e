"""The fake probe's processes, from the directory engine stand-ins write to, and the memory rate."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from agentd.discovery import FakeGpuProbe, bandwidth, probe_for
from agentd.discovery.fake import PROCS_ENV, procs_dir_for, visible_units
from llmgw.config import HardwareConfig
from llmgw.inventory import GpuInfo

GIB = 2**30


def write_held(procs_dir, pid: int, visible: str | None, used: int) -> None:
    procs_dir.mkdir(parents=True, exist_ok=True)
    entry = {"pid": pid, "cuda_visible_devices": visible, "used_bytes_per_gpu": used}
    (procs_dir / f"{pid}.json").write_text(json.dumps(entry))


def test_a_fake_probe_agent_tells_its_engines_where_to_say_what_they_hold(tmp_path):
    probe = probe_for(HardwareConfig(probe="fake", fixture="a100_40g_x2_nvlink"), tmp_path)
    assert probe.engine_env() == {PROCS_ENV: str(tmp_path / "fake-gpu" / "procs")}


def test_memory_held_by_indexes_in_pci_order_is_reported_on_those_cards(tmp_path):
    procs = procs_dir_for(tmp_path)
    probe = FakeGpuProbe.from_fixture("h100_80g_x8", procs_dir=procs)
    write_held(procs, os.getpid(), "2,3", 30 * GIB)
    held = probe.processes()
    assert held[2] == [(os.getpid(), 30 * GIB)] and held[3] == [(os.getpid(), 30 * GIB)]
    assert all(held[i] == [] for i in (0, 1, 4, 5, 6, 7))
    samples = {s.index: s.memory_used_bytes for s in probe.sample()}
    assert samples[2] == 30 * GIB and samples[0] == 0


def test_the_files_of_processes_that_ended_hold_nothing(tmp_path):
    procs = procs_dir_for(tmp_path)
    probe = FakeGpuProbe.from_fixture("a100_40g_x2_nvlink", procs_dir=procs)
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], stdout=-1)
    write_held(procs, int(done.stdout), "0", GIB)
    (procs / "garbled.json").write_text("{not json")
    assert probe.processes() == {0: [], 1: []}


def test_cuda_visible_devices_is_read_as_cuda_reads_it():
    def gpu(index, uuid, bus, **extra):
        return GpuInfo(
            index=index, uuid=uuid, name="x", memory_total_bytes=GIB, pci_bus_id=bus, **extra
        )

    # NVML index 0 sits on the later bus: CUDA's "0" in PCI order is unit 1.
    gpus = [
        gpu(0, "GPU-b", "00000000:81:00.0"),
        gpu(1, "GPU-a", "00000000:18:00.0", mig_mode="enabled"),
        gpu(2, "MIG-1", "00000000:18:00.0", mig_instance=True, mig_parent_index=1),
    ]
    assert visible_units(gpus, "0") == [1]
    assert visible_units(gpus, "MIG-1") == [2]
    assert visible_units(gpus, "GPU-b,1") == [0, 0]
    # CUDA stops at the first entry that names no device.
    assert visible_units(gpus, "1,7,0") == [0]
    assert visible_units(gpus, "") == []
    assert visible_units(gpus, None) == [1, 0]


def test_the_fake_probe_gives_the_recorded_bandwidth_and_measures_nothing():
    probe = FakeGpuProbe.from_fixture("h100_80g_x8")
    assert probe.mem_bandwidth_gbs() == probe.inventory().host.mem_bandwidth_gbs


def test_the_memory_rate_is_measured_in_a_fraction_of_a_second():
    gbs = bandwidth.measure_gbs(size_bytes=16 * 2**20, passes=2)
    # Any machine that runs an agent copies faster than 0.1 GB/s; no figure is asserted.
    assert gbs > 0.1


def test_the_buffer_stays_past_the_caches_and_within_free_memory():
    assert bandwidth.buffer_bytes(64 * GIB, 32 * 2**20) == 256 * 2**20
    assert bandwidth.buffer_bytes(64 * GIB, 0) == 64 * 2**20
    assert bandwidth.buffer_bytes(64 * GIB, 1 * GIB) == 512 * 2**20
    assert bandwidth.buffer_bytes(256 * 2**20, 32 * 2**20) == 32 * 2**20
