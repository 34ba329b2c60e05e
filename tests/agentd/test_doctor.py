"""``llmgw doctor``: the checks over recorded facts, on this machine, and its CLI."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from typer.testing import CliRunner

from agentd import doctor
from agentd.discovery import FakeGpuProbe
from agentd.discovery.nvml import NO_DRIVER, NvmlReport
from llmgw.cli.doctor_cmd import doctor as doctor_command
from llmgw.inventory import HostInfo
from llmgw.paths import Paths

GIB = 1024**3


def _checks_for(fixture: str, tmp_path: Path, **host_changes) -> dict[str, doctor.Check]:
    """The doctor's checks for a recorded machine, by name."""
    inventory = FakeGpuProbe.from_fixture(fixture).inventory()
    host = inventory.host.model_copy(update=host_changes)
    report = NvmlReport(gpus=inventory.gpus, note=host.gpu_note)

    def host_reader(data_dir: Path) -> HostInfo:
        return host

    checks = doctor.run_checks(Paths.under(tmp_path), host_reader=host_reader, nvml=lambda: report)
    return {c.name: c for c in checks}


def test_an_h100_node_passes_every_check(tmp_path):
    checks = _checks_for("h100_80g_x8", tmp_path)
    assert {c.status for c in checks.values()} == {"ok"}, checks
    assert checks["nvml"].detail == "8 GPU(s): 8x NVIDIA H100 80GB HBM3"
    assert "avx512f" in checks["cpu"].detail and "amx_tile" in checks["cpu"].detail
    assert checks["os"].detail == "ubuntu 22.04 (Debian family)"
    assert checks["nvidia driver"].detail == "550.54.15 (proprietary kernel module)"


def test_rocky_is_recognised_as_rhel_family_through_id_like(tmp_path):
    checks = _checks_for("l4_24g_x4", tmp_path)
    assert checks["os"].status == "ok" and "RHEL family" in checks["os"].detail
    assert checks["nvidia driver"].detail == "570.86.15 (open kernel module)"


def test_a_cpu_only_node_is_warned_about_the_driver_with_a_next_step(tmp_path):
    checks = _checks_for("cpu_only_16c", tmp_path)
    driver = checks["nvidia driver"]
    assert driver.status == "warn"
    assert driver.detail == "no NVIDIA driver: only CPU engines can run here"
    assert "apt install nvidia-driver" in driver.fix and "CPU-only" in driver.fix
    assert checks["nvml"].status == "warn" and NO_DRIVER in checks["nvml"].detail
    assert not any(c.status == "fail" for c in checks.values())


def test_a_cpu_without_avx2_is_warned_with_the_fix_for_a_vm(tmp_path):
    # The node-add test VM ran on QEMU's default CPU model: llama.cpp crawled
    # and nothing else looked wrong.
    checks = _checks_for("cpu_only_16c", tmp_path, cpu_flags=["fpu", "sse2", "sse4_2"], avx2=False)
    assert checks["cpu"].status == "warn"
    assert "no AVX2" in checks["cpu"].detail and "host-passthrough" in checks["cpu"].fix


def test_free_disk_fails_under_5_gib_and_warns_under_50_gib(tmp_path):
    assert _checks_for("cpu_only_16c", tmp_path, disk_free_bytes=4 * GIB)["disk"].status == "fail"
    assert _checks_for("cpu_only_16c", tmp_path, disk_free_bytes=49 * GIB)["disk"].status == "warn"
    assert _checks_for("cpu_only_16c", tmp_path, disk_free_bytes=50 * GIB)["disk"].status == "ok"


def test_glibc_fails_under_2_28_and_warns_under_2_31():
    assert doctor.check_glibc("2.17").status == "fail"
    assert doctor.check_glibc("2.28").status == "warn"
    assert doctor.check_glibc("2.31").status == "ok"
    assert doctor.check_glibc("2.36").status == "ok"
    assert doctor.check_glibc("").status == "warn"


def test_an_unknown_os_family_is_a_warning(tmp_path):
    checks = _checks_for("cpu_only_16c", tmp_path, os_id="opensuse-leap", os_id_like=["suse"])
    assert checks["os"].status == "warn" and checks["os"].fix


def test_an_old_driver_is_warned_about_for_vllm(tmp_path):
    checks = _checks_for("rtx6000_24g_x1", tmp_path, nvidia_driver_version="470.239.06")
    assert checks["nvidia driver"].status == "warn" and "525" in checks["nvidia driver"].detail


def test_an_old_python_fails():
    assert doctor.check_python((3, 10, 12)).status == "fail"
    assert doctor.check_python((3, 11, 2)).status == "ok"


def test_every_warning_and_failure_carries_a_fix(tmp_path):
    checks = _checks_for(
        "cpu_only_16c", tmp_path, disk_free_bytes=GIB, glibc_version="2.17", cpu_flags=["fpu"]
    )
    for c in checks.values():
        assert c.status == "ok" or c.fix, c


def test_doctor_on_this_machine_warns_about_the_missing_driver(tmp_path):
    checks = {c.name: c for c in doctor.run_checks(Paths.under(tmp_path))}
    assert checks["nvidia driver"].status == "warn"
    assert checks["nvml"].detail == f"no GPUs: {NO_DRIVER}"
    assert checks["python"].status == "ok"


def _cli() -> typer.Typer:
    app = typer.Typer()
    app.command("doctor")(doctor_command)
    # A second command keeps typer from collapsing the app into doctor itself.
    app.command("noop")(lambda: None)
    return app


def test_doctor_json_prints_only_the_checks_as_json(tmp_path):
    result = CliRunner().invoke(_cli(), ["doctor", "--json"], env={"LLMGW_HOME": str(tmp_path)})
    assert result.exit_code in (0, 1), result.output
    data = json.loads(result.stdout)
    assert list(data) == ["checks"]
    names = [c["name"] for c in data["checks"]]
    assert names == ["cpu", "nvidia driver", "nvml", "os", "disk", "glibc", "python"]
    assert set(data["checks"][0]) == {"name", "status", "detail", "fix"}
    # Exits 1 exactly when a check fails.
    assert result.exit_code == int(any(c["status"] == "fail" for c in data["checks"]))


def test_doctor_prints_a_table_for_people(tmp_path):
    result = CliRunner().invoke(_cli(), ["doctor"], env={"LLMGW_HOME": str(tmp_path)})
    assert "nvidia driver" in result.stdout and "no NVIDIA driver" in result.stdout


def test_a_card_in_the_wrong_pcie_slot_is_a_warning_pointing_at_lspci():
    from agentd.discovery import nvml
    from agentd.doctor import check_nvml
    from tests.agentd.fake_pynvml import HGX_H100, FakePynvml

    check = check_nvml(nvml.read_gpus(FakePynvml(HGX_H100), topo=lambda: ""))
    assert check.status == "warn" and "runs on 8 of its 16 PCIe lanes" in check.detail
    assert "LnkCap" in check.fix


def test_mig_instances_are_counted_apart_from_the_cards():
    from agentd.discovery import nvml
    from agentd.doctor import check_nvml
    from tests.agentd.fake_pynvml import A100_MIG, FakePynvml

    check = check_nvml(nvml.read_gpus(FakePynvml(A100_MIG), topo=lambda: ""))
    assert check.detail == "2 GPU(s): 2x NVIDIA A100-SXM4-80GB, 3 MIG instance(s)"
