"""NVML discovery beyond a card's identity: NVLink, MIG instances, PCIe links, processes.

Each test reads a recorded machine through ``FakePynvml`` (the pynvml
module's calls answered from a dict), the way the agent reads a real one.
"""

from __future__ import annotations

from agentd.discovery import links, nvml
from tests.agentd.fake_pynvml import (
    A40_PAIR_AND_ONE,
    A100_MIG,
    A100_NAME,
    GIB,
    HGX_H100,
    FakePynvml,
)

TOPO_4 = """\x1b[4m\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m
GPU0\t X \tNV4\tSYS\tSYS\tPHB\t0-31\t0\t\tN/A
GPU1\tNV4\t X \tSYS\tSYS\tSYS\t0-31\t0\t\tN/A
GPU2\tSYS\tSYS\t X \tNV2\tSYS\t32-63\t1\t\tN/A
GPU3\tSYS\tSYS\tNV2\t X \tSYS\t32-63\t1\t\tN/A
NIC0\tPHB\tSYS\tSYS\tSYS\t X

Legend:

  X    = Self
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def no_topo() -> str:
    raise AssertionError("nvidia-smi must not be asked when NVML answers")


def test_cards_on_nvswitches_reach_every_other_card():
    report = nvml.read_gpus(FakePynvml(HGX_H100), topo=no_topo)
    assert [g.nvlink_peers for g in report.gpus] == [[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]]


def test_a_bridged_pair_reaches_each_other_and_a_card_without_nvlink_reaches_none():
    # The first card's far end is written in the short (legacy) bus form.
    report = nvml.read_gpus(FakePynvml(A40_PAIR_AND_ONE), topo=no_topo)
    assert [g.nvlink_peers for g in report.gpus] == [[1], [0], []]


def test_where_nvml_says_nothing_of_nvlink_nvidia_smi_topo_is_read():
    recording = {
        "cards": [{k: v for k, v in c.items() if k != "nvlink"} for c in HGX_H100["cards"]]
    }
    report = nvml.read_gpus(FakePynvml(recording), topo=lambda: TOPO_4)
    assert [g.nvlink_peers for g in report.gpus] == [[1], [0], [3], [2]]


def test_a_pynvml_without_the_nvlink_calls_falls_back_to_nvidia_smi_too():
    lib = FakePynvml(HGX_H100, without=frozenset({"nvmlDeviceGetNvLinkState"}))
    report = nvml.read_gpus(lib, topo=lambda: TOPO_4)
    assert [g.nvlink_peers for g in report.gpus] == [[1], [0], [3], [2]]
    assert report.note == ""


def test_with_no_nvidia_smi_either_the_cards_have_no_peers_and_still_count():
    recording = {
        "cards": [{k: v for k, v in c.items() if k != "nvlink"} for c in HGX_H100["cards"]]
    }
    report = nvml.read_gpus(FakePynvml(recording), topo=lambda: "")
    assert [g.nvlink_peers for g in report.gpus] == [[], [], [], []]


def test_the_pcie_link_is_read_now_and_at_most():
    g0 = nvml.read_gpus(FakePynvml(HGX_H100), topo=no_topo).gpus[0]
    assert (g0.pcie_gen, g0.pcie_width, g0.pcie_gen_max, g0.pcie_width_max) == (1, 16, 5, 16)


def test_a_card_in_an_older_slot_on_fewer_lanes_is_a_warning_with_its_gbs():
    # Card 0 idles at Gen1 on a Gen5 link: the current generation is never compared.
    report = nvml.read_gpus(FakePynvml(HGX_H100), topo=no_topo)
    (warning,) = report.warnings
    assert warning.startswith("GPU 3 (NVIDIA H100 80GB HBM3) sits in a PCIe Gen4 slot but can do")
    assert "runs on 8 of its 16 PCIe lanes" in warning
    assert "15.8 GB/s of the 63.0 GB/s" in warning
    assert "lspci -vv -s 48:00.0" in warning


def test_a_pcie_warning_needs_both_figures_to_say_anything():
    assert links.pcie_warning(0, "x", "", width=0, gen_max=0, width_max=16, card_gen_max=5) == ""
    assert links.pcie_warning(0, "x", "", width=16, gen_max=4, width_max=16, card_gen_max=4) == ""


def test_a_mig_card_gives_each_instance_as_a_unit_numbered_after_the_cards():
    report = nvml.read_gpus(FakePynvml(A100_MIG), topo=lambda: "")
    cards = [(g.index, g.uuid, g.mig_mode, g.mig_instance) for g in report.gpus]
    assert cards == [
        (0, "GPU-a100-0", "enabled", False),
        (1, "GPU-a100-1", "disabled", False),
        (2, "MIG-3g-0", "", True),
        (3, "MIG-1g-1", "", True),
        (4, "MIG-1g-3", "", True),
    ]
    big = report.gpus[2]
    assert big.name == f"{A100_NAME} MIG 3g.40gb" and big.mig_profile == "3g.40gb"
    assert (big.mig_parent_index, big.memory_total_bytes) == (0, 39 * GIB)
    # Its card's identity, none of its links: MIG instances do not talk over NVLink.
    assert (big.compute_capability, big.pci_bus_id, big.nvlink_peers) == (
        "8.0",
        "00000000:07:00.0",
        [],
    )
    assert [g.mig_profile for g in report.gpus[3:]] == ["1g.10gb", "1g.10gb"]


def test_a_mig_instance_named_without_its_profile_gets_it_from_its_attributes():
    class Attrs(FakePynvml):
        def nvmlDeviceGetAttributes(self, h):
            from types import SimpleNamespace

            return SimpleNamespace(gpuInstanceSliceCount=2, memorySizeMB=20 * 1024)

    recording = {"cards": [dict(A100_MIG["cards"][0])]}
    recording["cards"][0]["mig_devices"] = [
        {"uuid": "MIG-x", "name": "MIG device", "memory_total": 20 * GIB}
    ]
    (_, mig) = nvml.read_gpus(Attrs(recording), topo=lambda: "").gpus
    assert mig.mig_profile == "2g.20gb" and mig.name == f"{A100_NAME} MIG 2g.20gb"


def test_processes_are_read_per_unit_with_graphics_ones_and_mig_instances_apart():
    procs = nvml.processes(FakePynvml(A100_MIG))
    # The MIG card itself is read through its instances, so nothing counts twice;
    # a process listed as compute and graphics counts once.
    assert procs == {1: [(777, 5 * GIB)], 2: [(4242, 2 * GIB)], 3: [], 4: [(5151, GIB)]}


def test_samples_cover_mig_instances_by_their_unit_index():
    samples = {s.index: s for s in nvml.sample(FakePynvml(A100_MIG))}
    assert sorted(samples) == [0, 1, 2, 3, 4]
    assert samples[2].memory_used_bytes == 2 * GIB


def test_a_pynvml_without_pcie_mig_or_process_calls_costs_only_those_facts():
    lacking = frozenset(
        {
            "nvmlDeviceGetMaxPcieLinkGeneration",
            "nvmlDeviceGetGpuMaxPcieLinkGeneration",
            "nvmlDeviceGetMaxMigDeviceCount",
            "nvmlDeviceGetGraphicsRunningProcesses",
            "nvmlDeviceGetComputeRunningProcesses",
        }
    )
    lib = FakePynvml(A100_MIG, without=lacking)
    report = nvml.read_gpus(lib, topo=lambda: "")
    assert [g.uuid for g in report.gpus] == ["GPU-a100-0", "GPU-a100-1"]
    assert report.gpus[0].pcie_gen_max == 0 and report.gpus[0].pcie_width_max == 16
    assert nvml.processes(lib) == {}


def test_a_lost_card_is_skipped_and_the_mig_units_keep_their_numbers():
    recording = {"cards": [{"lost": True}, *A100_MIG["cards"]]}
    report = nvml.read_gpus(FakePynvml(recording), topo=lambda: "")
    assert [g.index for g in report.gpus] == [1, 2, 3, 4, 5]
    (warning,) = report.warnings
    assert warning.startswith("GPU 0 skipped: NVML failed: ")


def test_a_card_in_mig_mode_without_instances_is_a_warning_saying_what_to_do():
    recording = {"cards": [dict(A100_MIG["cards"][0], mig_devices=[])]}
    report = nvml.read_gpus(FakePynvml(recording), topo=lambda: "")
    assert [g.index for g in report.gpus] == [0]
    (warning,) = report.warnings
    assert warning.startswith("GPU 0 (NVIDIA A100-SXM4-80GB) is in MIG mode with no instances")
    assert "nvidia-smi mig -cgi" in warning
