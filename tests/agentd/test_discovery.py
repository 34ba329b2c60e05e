"""Hardware discovery: host facts from sample files, NVML through a fake, fixtures."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pynvml
import pytest

from agentd.discovery import FakeGpuProbe, discover, nvml, probe_for
from agentd.discovery import host as hostmod
from agentd.discovery.fake import FIXTURES_DIR, fixture_names
from llmgw.config import HardwareConfig
from llmgw.errors import DiscoveryError

PROPRIETARY = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
    "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n"
)
OPEN = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build  "
    "(dvs-builder@U16-I3-B03-4-3)  Thu Jan 23 22:57:29 UTC 2025\n"
    "GCC version:  gcc version 11.4.1 20231218 (Red Hat 11.4.1-3) (GCC)\n"
)
ROCKY = """NAME="Rocky Linux"
VERSION="9.3 (Blue Onyx)"
ID="rocky"
ID_LIKE="rhel centos fedora"
VERSION_ID="9.3"
PLATFORM_ID="platform:el9"
"""
CPUINFO_AVX2 = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7543 32-Core Processor
flags\t\t: fpu vme de pse tsc msr sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 bmi2

processor\t: 1
flags\t\t: fpu vme de pse tsc msr sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 bmi2
"""
# QEMU's default CPU model, as the node-add test VM had it.
CPUINFO_QEMU = """processor\t: 0
model name\t: QEMU Virtual CPU version 2.5+
flags\t\t: fpu de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pse36 clflush mmx fxsr sse sse2 syscall nx lm rep_good nopl cpuid pni cx16 x2apic hypervisor lahf_lm
"""
MEMINFO = "MemTotal:       65842868 kB\nMemFree:        1234 kB\nMemAvailable:   5678 kB\n"


def _host_files(tmp_path: Path, *, cpuinfo: str = CPUINFO_AVX2, driver: str | None = None):
    (tmp_path / "os-release").write_text(ROCKY)
    (tmp_path / "cpuinfo").write_text(cpuinfo)
    (tmp_path / "meminfo").write_text(MEMINFO)
    if driver is not None:
        (tmp_path / "nvidia-version").write_text(driver)
    return {
        "os_release_paths": (tmp_path / "os-release",),
        "cpuinfo_path": tmp_path / "cpuinfo",
        "meminfo_path": tmp_path / "meminfo",
        "nvidia_version_path": tmp_path / "nvidia-version",
    }


# --- host facts -------------------------------------------------------------


def test_the_proprietary_driver_version_is_read_from_its_wording():
    assert hostmod.parse_nvidia_driver(PROPRIETARY) == ("550.54.15", False)


def test_the_open_kernel_module_version_is_the_number_not_the_word_for():
    # Guards the Go agent's bug: the word after "Module" was taken, "for".
    assert hostmod.parse_nvidia_driver(OPEN) == ("570.86.15", True)


def test_a_two_part_driver_version_and_an_unknown_wording_are_handled():
    old = "NVRM version: NVIDIA UNIX x86_64 Kernel Module 535.54 Mon\n"
    assert hostmod.parse_nvidia_driver(old) == ("535.54", False)
    assert hostmod.parse_nvidia_driver("something else\n") == ("", False)


def test_os_release_gives_id_id_like_split_on_spaces_and_version():
    assert hostmod.parse_os_release(ROCKY) == ("rocky", ["rhel", "centos", "fedora"], "9.3")


def test_os_release_values_may_be_unquoted_or_single_quoted():
    text = "ID=debian\nVERSION_ID='12'\n# a comment\n"
    assert hostmod.parse_os_release(text) == ("debian", [], "12")


def test_a_missing_os_release_leaves_the_os_empty_with_a_warning(tmp_path):
    os_release, warnings = hostmod.read_os_release((tmp_path / "nope",))
    assert os_release == ("", [], "")
    assert "cannot read" in warnings[0] and "nope" in warnings[0]


def test_cpu_flags_are_reported_in_full_with_avx2(tmp_path):
    info = hostmod.read_host(tmp_path / "data", **_host_files(tmp_path))
    assert info.cpu_flags[:3] == ["fpu", "vme", "de"] and "bmi2" in info.cpu_flags
    assert info.avx2 is True
    assert not any("AVX2" in w for w in info.warnings)


def test_a_cpu_without_avx2_is_reported_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.setattr(hostmod.platform, "machine", lambda: "x86_64")
    info = hostmod.read_host(tmp_path / "data", **_host_files(tmp_path, cpuinfo=CPUINFO_QEMU))
    assert info.avx2 is False
    assert "hypervisor" in info.cpu_flags
    assert hostmod.NO_AVX2_WARNING in info.warnings


def test_arm64_features_are_read_as_flags():
    text = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 asimddp sve\n"
    assert hostmod.parse_cpu_flags(text)[:2] == ["fp", "asimd"]


def test_host_facts_are_read_from_the_given_files(tmp_path):
    info = hostmod.read_host(tmp_path / "not" / "yet", **_host_files(tmp_path, driver=OPEN))
    assert (info.os_id, info.os_id_like, info.os_version_id) == (
        "rocky",
        ["rhel", "centos", "fedora"],
        "9.3",
    )
    assert info.memory_total_bytes == 65842868 * 1024
    assert info.nvidia_driver_version == "570.86.15" and info.nvidia_open_kernel_module
    # The data dir does not exist yet: its nearest existing parent is measured.
    assert info.disk_free_bytes > 0
    assert info.data_dir == str(tmp_path / "not" / "yet")
    assert info.cpu_count > 0 and info.kernel and info.arch


def test_unreadable_proc_files_give_empty_facts_and_warnings_not_errors(tmp_path):
    info = hostmod.read_host(
        tmp_path,
        os_release_paths=(tmp_path / "a",),
        cpuinfo_path=tmp_path / "b",
        meminfo_path=tmp_path / "c",
        nvidia_version_path=tmp_path / "d",
    )
    assert info.cpu_flags == [] and info.memory_total_bytes == 0 and info.os_id == ""
    assert info.nvidia_driver_version == ""
    assert len(info.warnings) == 3
    # Flags unknown is not the same as "no AVX2": no misleading warning.
    assert hostmod.NO_AVX2_WARNING not in info.warnings


def test_this_machine_reports_its_glibc_version():
    assert hostmod.glibc_version().count(".") >= 1


# --- NVML -------------------------------------------------------------------


class FakeNvml:
    """Plays pynvml for a machine with the given cards, raising pynvml's own errors."""

    def __init__(self, cards: list[dict], *, init_error: int | None = None) -> None:
        self.cards = cards
        self.init_error = init_error
        self.inits = self.shutdowns = 0

    def nvmlInit(self):
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)
        self.inits += 1

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetCount(self):
        return len(self.cards)

    def nvmlDeviceGetHandleByIndex(self, i):
        card = self.cards[i]
        if card.get("lost"):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return card

    def nvmlDeviceGetUUID(self, h):
        return h["uuid"]

    def nvmlDeviceGetName(self, h):
        return h["name"]

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=h["total"], used=h.get("used", 0))

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return h["cc"]

    def nvmlDeviceGetPciInfo(self, h):
        # A ctypes char array reads back as bytes.
        return SimpleNamespace(busId=h["bus"].encode())

    def nvmlDeviceGetMigMode(self, h):
        if h.get("mig") is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [h["mig"], h["mig"]]

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=h.get("util", 0), memory=0)

    def nvmlDeviceGetTemperature(self, h, sensor):
        return h.get("temp", 0)


H100 = {
    "uuid": "GPU-1a2b", "name": "NVIDIA H100 80GB HBM3", "total": 85520809984, "cc": (9, 0),
    "bus": "00000000:18:00.0", "mig": 0, "used": 1 << 30, "util": 37, "temp": 41,
}  # fmt: skip
L4 = {
    "uuid": "GPU-3c4d", "name": "NVIDIA L4", "total": 24152899584, "cc": (8, 9),
    "bus": "00000000:00:03.0",
}  # fmt: skip


def test_real_discovery_on_this_machine_reports_no_gpus_and_why_without_raising(tmp_path):
    inventory = discover(HardwareConfig(probe="real"), tmp_path)
    assert inventory.gpus == []
    assert inventory.host.gpu_note == nvml.NO_DRIVER
    assert inventory.host.probe == "nvml" and inventory.host.fake is False
    assert inventory.host.data_dir == str(tmp_path)


def test_sampling_with_no_driver_gives_no_samples():
    assert nvml.sample() == []


def test_nvml_cards_are_read_with_compute_capability_bus_id_and_mig_mode():
    fake = FakeNvml([H100, L4])
    report = nvml.read_gpus(fake)
    assert report.note == "" and report.warnings == []
    h100, l4 = report.gpus
    assert (h100.index, h100.name, h100.memory_total_bytes) == (0, H100["name"], 85520809984)
    assert (h100.compute_capability, h100.pci_bus_id, h100.mig_mode) == (
        "9.0",
        "00000000:18:00.0",
        "disabled",
    )
    # An L4 has no MIG: NVML says "not supported", we say "".
    assert (l4.compute_capability, l4.mig_mode) == ("8.9", "")
    assert fake.inits == fake.shutdowns == 1


def test_a_driver_that_is_installed_but_not_loaded_counts_as_no_driver():
    report = nvml.read_gpus(FakeNvml([], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    assert report.gpus == [] and report.note == nvml.NO_DRIVER


def test_other_nvml_failures_give_no_gpus_and_nvmls_own_words():
    report = nvml.read_gpus(FakeNvml([], init_error=pynvml.NVML_ERROR_UNKNOWN))
    assert report.gpus == []
    assert report.note.startswith("NVML failed: ") and "Unknown Error" in report.note


def test_a_lost_gpu_is_skipped_without_hiding_the_others():
    report = nvml.read_gpus(FakeNvml([H100, {"lost": True}]))
    assert [g.index for g in report.gpus] == [0]
    assert "GPU 1 skipped" in report.warnings[0]


def test_samples_report_memory_used_utilization_and_temperature():
    (s,) = nvml.sample(FakeNvml([H100]))
    assert (s.memory_used_bytes, s.utilization_percent, s.temperature_c) == (1 << 30, 37, 41)


# --- fake probe -------------------------------------------------------------


def test_every_recorded_inventory_loads_and_is_marked_fake():
    names = fixture_names()
    recorded = {"h100_80g_x8", "rtx6000_24g_x1", "l4_24g_x4", "a100_40g_x2_nvlink", "cpu_only_16c"}
    assert recorded <= set(names)
    for name in names:
        inventory = FakeGpuProbe.from_fixture(name).inventory()
        assert inventory.host.fake is True
        assert inventory.host.probe == f"fake:{name}"


def test_the_h100_fixture_has_eight_80gb_hopper_cards_on_nvlink():
    inventory = FakeGpuProbe.from_fixture("h100_80g_x8").inventory()
    assert len(inventory.gpus) == 8
    assert {g.memory_total_bytes for g in inventory.gpus} == {85520809984}
    assert {g.compute_capability for g in inventory.gpus} == {"9.0"}
    assert len({g.uuid for g in inventory.gpus}) == 8
    assert inventory.gpus[0].nvlink_peers == [1, 2, 3, 4, 5, 6, 7]


def test_the_cpu_only_fixture_has_no_gpus_and_says_why():
    inventory = FakeGpuProbe.from_fixture("cpu_only_16c").inventory()
    assert inventory.gpus == [] and inventory.host.gpu_note == "no NVIDIA driver"
    assert inventory.host.cpu_count == 16 and inventory.host.avx2


def test_an_unknown_fixture_name_is_refused_with_the_names_there_are():
    with pytest.raises(DiscoveryError) as e:
        FakeGpuProbe.from_fixture("h100_80g_x9")
    assert "h100_80g_x9" in str(e.value)
    for name in fixture_names():
        assert name in str(e.value)


def test_a_fixture_can_be_a_path_to_a_json_file(tmp_path):
    path = tmp_path / "my_box.json"
    path.write_text((FIXTURES_DIR / "l4_24g_x4.json").read_text())
    inventory = FakeGpuProbe.from_fixture(str(path)).inventory()
    assert inventory.host.probe == "fake:my_box" and len(inventory.gpus) == 4


def test_a_json_file_that_is_no_inventory_is_refused_in_plain_words(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"host": {"hostnme": "x"}}')
    with pytest.raises(DiscoveryError, match="not a recorded inventory"):
        FakeGpuProbe.from_fixture(str(path))


def test_the_fake_probe_samples_idle_cards():
    samples = FakeGpuProbe.from_fixture("a100_40g_x2_nvlink").sample()
    figures = [
        (s.index, s.memory_used_bytes, s.utilization_percent, s.temperature_c) for s in samples
    ]
    assert figures == [(0, 0, 0, 35), (1, 0, 0, 35)]


def test_probe_for_picks_the_fake_probe_that_agent_yaml_names(tmp_path):
    probe = probe_for(HardwareConfig(probe="fake", fixture="rtx6000_24g_x1"), tmp_path)
    assert probe.inventory().gpus[0].name == "Quadro RTX 6000"
    assert discover(HardwareConfig(probe="fake", fixture="rtx6000_24g_x1"), tmp_path).host.fake


def test_a_fake_probe_without_a_fixture_lists_the_names_there_are():
    with pytest.raises(DiscoveryError, match="cpu_only_16c"):
        probe_for(HardwareConfig(probe="fake"))
