"""vLLM and SGLang environments: the uv command lines, the CUDA build, the refusals.

No GPU and no uv here: a fake runner plays uv and records what it was asked.
"""

from __future__ import annotations

import os
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from agentd.provision.llamacpp import InstallError
from agentd.provision.pyenv import (
    ENGINES,
    NotHere,
    PyEnvSource,
    RequirementsRefused,
    RunResult,
    SubprocessRunner,
    check_requirements,
    choose_build,
    exclude_newer,
    install_python_engine,
    uv_env,
)
from tests.agentd.provision.conftest import FakeRunner, inventory


def hashes(*digits: str) -> str:
    return " \\\n    ".join(f"--hash=sha256:{d * 64}" for d in digits)


# As pip-compile / uv pip compile --generate-hashes write them.
CU124 = f"""\
# vLLM 0.6.3 for CUDA 12.4, resolved from PyPI
vllm==0.6.3 \\
    {hashes("1")}
torch==2.4.0 \\
    {hashes("2", "3")}
    # via vllm
"""
CU118 = f"""\
vllm==0.6.3 \\
    {hashes("4")}
torch==2.4.0+cu118 \\
    {hashes("5")}
"""
OFFERED = {"cu118": CU118, "cu121": CU124, "cu124": CU124, "cu128": CU124}
RELEASED = datetime(2024, 10, 14, 20, 35, 2, tzinfo=UTC)
SOURCE = PyEnvSource(released=RELEASED, requirements=OFFERED)

H100_R550 = inventory("h100_80g_x8")  # driver 550.54.15, compute capability 9.0
A100_R525 = inventory("a100_40g_x2_nvlink", nvidia_driver_version="525.147.05")  # 8.0
CHECK = "import importlib.metadata as m; print(m.version('vllm'))"


def scratch_of(runner: FakeRunner) -> Path:
    return Path(runner.commands[0][-1]).parent


async def test_an_h100_on_driver_550_gets_the_cuda_12_4_build_from_pypi_alone(tmp_path):
    runner = FakeRunner()

    inst = await install_python_engine(
        "vllm", "0.6.3", "", SOURCE, tmp_path, H100_R550, runner=runner, min_free_bytes=0
    )

    s = scratch_of(runner)
    assert s.parent == tmp_path / "vllm" and s.name.startswith(".0.6.3-cu124.partial-")
    assert runner.commands == [
        ["uv", "venv", "--no-config", "--relocatable", "--python", "3.12", f"{s}/venv"],
        [
            "uv", "pip", "install", "--no-config",
            "--python", f"{s}/venv/bin/python",
            "--require-hashes",
            "--exclude-newer", "2024-10-15T20:35:02Z",
            "--index-url", "https://pypi.org/simple",
            "-r", f"{s}/requirements.txt",
        ],
        [f"{s}/venv/bin/python", "-c", CHECK],
    ]  # fmt: skip
    assert inst.path == tmp_path / "vllm" / "0.6.3-cu124"
    assert inst.binary == inst.path / "venv" / "bin" / "python"
    assert (inst.path / "requirements.txt").read_text() == CU124
    assert inst.source == "PyPI as of 2024-10-15T20:35:02Z, cu124 (CUDA 12.4)"
    assert sorted(os.listdir(tmp_path / "vllm")) == ["0.6.3-cu124"]


async def test_an_a100_on_driver_525_gets_the_cuda_11_8_build_with_pytorchs_index(tmp_path):
    runner = FakeRunner()

    inst = await install_python_engine(
        "vllm", "0.6.3", "", SOURCE, tmp_path, A100_R525, runner=runner, min_free_bytes=0
    )

    s = scratch_of(runner)
    assert inst.variant == "cu118"
    assert runner.commands[1] == [
        "uv", "pip", "install", "--no-config",
        "--python", f"{s}/venv/bin/python",
        "--require-hashes",
        "--exclude-newer", "2024-10-15T20:35:02Z",
        "--index-url", "https://pypi.org/simple",
        "--extra-index-url", "https://download.pytorch.org/whl/cu118",
        "-r", f"{s}/requirements.txt",
    ]  # fmt: skip


def test_the_build_follows_the_driver_branch_and_the_gpus_compute_capability():
    vllm = ENGINES["vllm"]
    every = ["cu118", "cu121", "cu124", "cu126", "cu128"]
    assert choose_build(vllm, every, H100_R550).tag == "cu124"
    assert choose_build(vllm, every, A100_R525).tag == "cu118"
    assert choose_build(vllm, every, inventory("l4_24g_x4")).tag == "cu128"  # 570.86
    assert choose_build(vllm, every, inventory("rtx6000_24g_x1")).tag == "cu121"  # 535.183
    assert choose_build(vllm, ["cu121", "cu124"], H100_R550, wanted="cu121").tag == "cu121"


def test_a_blackwell_takes_cuda_12_8_or_nothing():
    b200 = inventory("h100_80g_x8", nvidia_driver_version="570.124.06")
    b200 = b200.model_copy(
        update={"gpus": [g.model_copy(update={"compute_capability": "10.0"}) for g in b200.gpus]}
    )
    assert choose_build(ENGINES["vllm"], ["cu124", "cu128"], b200).tag == "cu128"
    with pytest.raises(InstallError) as caught:
        choose_build(ENGINES["vllm"], ["cu124"], b200)
    assert caught.value.message == (
        "no vLLM build runs on this node (driver 570.124.06): "
        "cu124 has no kernels for compute capability 10.0"
    )


def test_an_old_driver_is_a_failure_that_says_which_driver_would_do():
    r470 = inventory("h100_80g_x8", nvidia_driver_version="470.256.02")
    with pytest.raises(InstallError) as caught:
        choose_build(ENGINES["vllm"], ["cu118", "cu124"], r470)
    assert not isinstance(caught.value, NotHere)
    assert caught.value.message == (
        "no vLLM build runs on this node (driver 470.256.02): "
        "driver 470 is older than what CUDA 12.4 needs (550 or newer, for cu124); "
        "driver 470 is older than what CUDA 11.8 needs (520 or newer, for cu118)"
    )


async def test_a_node_without_a_gpu_is_not_here_for_vllm_and_nothing_runs(tmp_path):
    runner = FakeRunner()
    with pytest.raises(NotHere) as caught:
        await install_python_engine(
            "vllm", "0.6.3", "", SOURCE, tmp_path, inventory("cpu_only_16c"), runner=runner
        )
    assert caught.value.message == (
        "no NVIDIA GPU on this node (no NVIDIA driver); vLLM runs on GPUs only"
    )
    assert runner.commands == []


def test_a_gpu_older_than_the_engine_supports_is_not_here_either():
    pascal = inventory("rtx6000_24g_x1")
    pascal = pascal.model_copy(
        update={"gpus": [g.model_copy(update={"compute_capability": "6.1"}) for g in pascal.gpus]}
    )
    with pytest.raises(
        NotHere, match="vLLM needs compute capability 7.0 or newer; this node has a GPU of 6.1"
    ):
        choose_build(ENGINES["vllm"], ["cu121"], pascal)
    turing = inventory("rtx6000_24g_x1")  # 7.5: SGLang's oldest
    assert choose_build(ENGINES["sglang"], ["cu121"], turing).tag == "cu121"


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("-e git+https://github.com/vllm-project/vllm#egg=vllm", "is an option"),
        ("--index-url https://pypi.example.net/simple", "is an option"),
        ("-i https://pypi.example.net/simple", "is an option"),
        ("--extra-index-url https://download.example.net/whl", "is an option"),
        ("--find-links /srv/wheels", "is an option"),
        ("-r more-requirements.txt", "is an option"),
        (
            f"vllm @ https://example.net/vllm-0.6.3-cp312-linux_x86_64.whl {hashes('1')}",
            "not a package from PyPI",
        ),
        (
            f"git+https://github.com/vllm-project/vllm.git@v0.6.3 {hashes('1')}",
            "not a package from PyPI",
        ),
        (f"./vendor/vllm {hashes('1')}", "not a package from PyPI"),
        (f"/srv/wheels/vllm-0.6.3-cp312-linux_x86_64.whl {hashes('1')}", "not a package from PyPI"),
        (f"file:///srv/wheels/vllm.whl {hashes('1')}", "not a package from PyPI"),
        (f"vllm>=0.6 {hashes('1')}", "does not pin one version with =="),
        ("vllm==0.6.3", "has no --hash"),
        (f"vllm==0.6.3 {hashes('1')} --no-deps", "has the option '--no-deps'"),
    ],
)
def test_a_requirement_that_is_not_a_pinned_hashed_pypi_package_is_refused(line, why):
    with pytest.raises(RequirementsRefused) as caught:
        check_requirements(CU124 + line + "\n")
    assert why in caught.value.message
    assert line.split()[0] in caught.value.message
    assert caught.value.message.startswith("line 8 of the requirements")


async def test_refused_requirements_install_nothing_and_run_nothing(tmp_path):
    runner = FakeRunner()
    bad = PyEnvSource(RELEASED, {"cu124": CU124 + "--extra-index-url https://evil.example\n"})

    with pytest.raises(RequirementsRefused):
        await install_python_engine(
            "vllm", "0.6.3", "", bad, tmp_path, H100_R550, runner=runner, min_free_bytes=0
        )

    assert runner.commands == []
    assert not (tmp_path / "vllm").exists() or os.listdir(tmp_path / "vllm") == []


def test_hashed_requirements_read_as_their_pins():
    assert check_requirements(CU124) == [("vllm", "0.6.3"), ("torch", "2.4.0")]
    marker = f'uvloop==0.21.0 ; sys_platform != "win32" {hashes("9")}\n'
    assert check_requirements(marker) == [("uvloop", "0.21.0")]


async def test_requirements_that_do_not_pin_the_engine_itself_are_refused(tmp_path):
    other = PyEnvSource(RELEASED, {"cu124": CU124.replace("vllm==0.6.3", "vllm==0.6.2")})
    with pytest.raises(RequirementsRefused, match="do not pin vllm==0.6.3"):
        await install_python_engine(
            "vllm", "0.6.3", "", other, tmp_path, H100_R550, runner=FakeRunner(), min_free_bytes=0
        )


async def test_a_failing_uv_is_reported_by_its_error_line_and_leaves_nothing(tmp_path):
    runner = FakeRunner(fail_install="error: Hash mismatch for `torch==2.4.0`")

    with pytest.raises(InstallError) as caught:
        await install_python_engine(
            "vllm", "0.6.3", "", SOURCE, tmp_path, H100_R550, runner=runner, min_free_bytes=0
        )

    assert caught.value.message == (
        "uv pip install failed (exit 1): Hash mismatch for `torch==2.4.0`"
    )
    assert os.listdir(tmp_path / "vllm") == []


async def test_a_disk_too_full_for_an_environment_is_refused_before_it_starts(tmp_path):
    runner = FakeRunner()
    with pytest.raises(InstallError, match=r"vLLM needs 1000000\.0 GB free in"):
        await install_python_engine(
            "vllm", "0.6.3", "", SOURCE, tmp_path, H100_R550, runner=runner,
            min_free_bytes=10**15,
        )  # fmt: skip
    assert runner.commands == []


def test_uv_runs_without_the_nodes_own_index_settings(tmp_path):
    env = uv_env(tmp_path, {
        "PATH": "/usr/bin", "UV_INDEX_URL": "https://evil.example/simple",
        "PIP_EXTRA_INDEX_URL": "https://evil.example", "VIRTUAL_ENV": "/root/venv",
    })  # fmt: skip
    assert env == {
        "PATH": "/usr/bin",
        "UV_CACHE_DIR": str(tmp_path / ".uv-cache"),
        "UV_PYTHON_INSTALL_DIR": str(tmp_path / ".python"),
    }


def test_exclude_newer_is_a_day_after_the_release():
    assert exclude_newer(RELEASED) == "2024-10-15T20:35:02Z"
    assert exclude_newer(date(2025, 1, 31)) == "2025-02-01T00:00:00Z"
    assert exclude_newer(datetime(2024, 12, 31, 23, 0)) == "2025-01-01T23:00:00Z"


async def test_the_real_runner_returns_the_exit_code_and_the_tail_of_the_output():
    runner = SubprocessRunner(keep_bytes=6)
    result = await runner.run(["sh", "-c", "echo resolving; echo error; exit 3"])
    assert result == RunResult(3, "error\n")


async def test_the_real_runner_says_so_when_uv_is_not_installed():
    with pytest.raises(InstallError, match="^uv-not-here is not installed on this node$"):
        await SubprocessRunner().run(["uv-not-here", "venv"])


async def test_the_real_runner_stops_a_command_that_runs_past_its_time():
    with pytest.raises(InstallError, match="sleep 5 did not finish in 0.2 s"):
        await SubprocessRunner().run(["sleep", "5"], timeout_s=0.2)


MIRRORED = PyEnvSource(
    released=RELEASED,
    requirements=OFFERED,
    mirror_urls=("http://10.0.0.5:7080", "http://10.0.0.6:7080"),
    mirror_token="s3cret",
)


async def test_an_environment_comes_from_the_clusters_mirror_with_the_token_kept_off_the_command_line(
    tmp_path,
):
    # Guards a node without PyPI: the recipe's wheels, each pinned by its hash,
    # come from the mirror's index; PyPI's upload times and PyTorch's index are not asked.
    runner = FakeRunner()
    said: list[str] = []

    inst = await install_python_engine(
        "vllm", "0.6.3", "", MIRRORED, tmp_path, A100_R525, runner=runner, min_free_bytes=0,
        say=said.append,
    )  # fmt: skip

    s = scratch_of(runner)
    assert runner.commands[1] == [
        "uv", "pip", "install", "--no-config",
        "--python", f"{s}/venv/bin/python",
        "--require-hashes",
        "-r", f"{s}/requirements.txt",
    ]  # fmt: skip
    assert runner.envs[1]["UV_INDEX_URL"] == "http://llmgw:s3cret@10.0.0.5:7080/simple/"
    assert not any("s3cret" in " ".join(c) for c in runner.commands)
    assert inst.source == "the mirror 10.0.0.5:7080, cu118 (CUDA 11.8)"
    assert any("from the mirror 10.0.0.5:7080" in w for w in said)


async def test_a_mirror_without_the_wheels_hands_over_to_the_next_then_to_pypi(tmp_path):
    class FailingOnMirrors(FakeRunner):
        async def run(self, argv, *, env=None, timeout_s=None):
            if "UV_INDEX_URL" in (env or {}) and list(argv)[1:3] == ["pip", "install"]:
                self.commands.append([str(a) for a in argv])
                self.envs.append(dict(env))
                return RunResult(1, "error: no wheel of torch==2.4.0 at http://llmgw:s3cret@x\n")
            return await super().run(argv, env=env, timeout_s=timeout_s)

    runner = FailingOnMirrors()
    inst = await install_python_engine(
        "vllm", "0.6.3", "", MIRRORED, tmp_path, H100_R550, runner=runner, min_free_bytes=0
    )
    installs = [e.get("UV_INDEX_URL", "") for c, e in zip(runner.commands, runner.envs, strict=True)
                if c[1:3] == ["pip", "install"]]  # fmt: skip
    assert installs == [
        "http://llmgw:s3cret@10.0.0.5:7080/simple/",
        "http://llmgw:s3cret@10.0.0.6:7080/simple/",
        "",
    ]
    assert inst.source.startswith("PyPI as of")


async def test_every_index_failing_names_each_without_the_token(tmp_path):
    runner = FakeRunner(fail_install="error: no wheel of vllm at http://llmgw:s3cret@m/simple/")
    with pytest.raises(InstallError) as e:
        await install_python_engine(
            "vllm", "0.6.3", "", MIRRORED, tmp_path, H100_R550, runner=runner, min_free_bytes=0
        )
    assert "the mirror 10.0.0.5:7080" in e.value.message and "10.0.0.6:7080" in e.value.message
    assert "s3cret" not in e.value.message
    assert "llmgw ctl mirror add DIR --wheels" in e.value.hint
