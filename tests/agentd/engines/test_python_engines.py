"""vLLM and SGLang command lines from what the plan decided, run against the stand-ins' real CLIs."""

from __future__ import annotations

import asyncio
import json
import os
import signal

import httpx
import pytest

from agentd.engines import EngineSpecError, SglangAdapter, ShardSpec, VllmAdapter
from agentd.shards import gpu_fraction

GIB = 2**30


def planned(**kw) -> ShardSpec:
    fields = {
        "model_name": "tiny",
        "model_path": "/var/lib/llmgw-agent/weights/tiny",
        "port": 8001,
        "context_length": 8192,
        "slots": 4,
        "gpu_indexes": (0, 1),
        "tensor_parallel": 2,
        "gpu_memory_fraction": 0.42,
        "download_dir": "/var/lib/llmgw-agent/weights",
        "engine_key": "k-123",
    }
    fields.update(kw)
    return ShardSpec(**fields)


def value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_vllm_gets_the_plans_parallelism_memory_share_precision_and_the_weights_cache():
    cmd = VllmAdapter("/e/python").command(
        planned(
            gpu_indexes=(0, 1, 2, 3), pipeline_parallel=2, expert_parallel=True, precision="fp8"
        )
    )
    argv = cmd.argv
    assert value(argv, "--tensor-parallel-size") == "2"
    assert value(argv, "--pipeline-parallel-size") == "2"
    assert "--enable-expert-parallel" in argv
    assert value(argv, "--max-model-len") == "8192"
    assert value(argv, "--gpu-memory-utilization") == "0.42"
    assert value(argv, "--quantization") == "fp8"
    assert value(argv, "--download-dir") == "/var/lib/llmgw-agent/weights"
    assert (value(argv, "--host"), value(argv, "--port")) == ("127.0.0.1", "8001")
    # The key only in the environment; the engine kept off the hub.
    assert "k-123" not in " ".join(argv)
    assert cmd.env["VLLM_API_KEY"] == "k-123"
    assert cmd.env["HF_HUB_OFFLINE"] == cmd.env["TRANSFORMERS_OFFLINE"] == "1"
    assert cmd.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"


def test_sglang_gets_its_own_names_for_the_same_decisions():
    cmd = SglangAdapter("/e/python").command(planned(expert_parallel=True, precision="bf16"))
    argv = cmd.argv
    assert value(argv, "--tp-size") == "2"
    assert value(argv, "--ep-size") == "2"
    assert "--pp-size" not in argv
    assert value(argv, "--context-length") == "8192"
    assert value(argv, "--mem-fraction-static") == "0.42"
    assert value(argv, "--dtype") == "bfloat16"
    assert "--quantization" not in argv
    assert value(argv, "--download-dir") == "/var/lib/llmgw-agent/weights"
    assert "k-123" not in " ".join(argv)


def test_a_shard_must_fill_exactly_its_tensor_times_pipeline_cards():
    with pytest.raises(EngineSpecError, match="tensor parallel 2 x 2 pipeline stages over 2"):
        VllmAdapter("/e/python").command(planned(pipeline_parallel=2))


def test_the_memory_share_is_the_plans_bytes_over_the_smallest_card_rounded_up():
    assert gpu_fraction(17 * GIB, [40 * GIB, 40 * GIB]) == 0.43  # 0.425 up, never less
    assert gpu_fraction(17 * GIB, [40 * GIB, 80 * GIB]) == 0.43
    assert gpu_fraction(80 * GIB, [40 * GIB]) == 0.95  # capped: CUDA's own context
    assert gpu_fraction(0, [40 * GIB]) == 0.0  # the engine's own default
    assert gpu_fraction(10 * GIB, []) == 0.0


async def run_until_healthy(argv, env, port: int) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        env={"PATH": os.environ["PATH"], **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    assert proc.stdout is not None
    # The stand-in says where it listens once it has loaded, as vLLM's uvicorn does.
    async for line in proc.stdout:
        if b"running on http://" in line:
            break
    async with httpx.AsyncClient() as http:
        assert (await http.get(f"http://127.0.0.1:{port}/health")).status_code == 200
    return proc


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
async def test_the_stand_in_takes_the_command_line_the_agent_writes_and_claims_its_cards(
    engine, request, tmp_path, unused_tcp_port
):
    python = request.getfixturevalue(f"{engine}_stand_in_env")
    adapter = (VllmAdapter if engine == "vllm" else SglangAdapter)(python)
    cmd = adapter.command(planned(port=unused_tcp_port, expert_parallel=True, precision="fp8"))
    procs = tmp_path / "procs"
    procs.mkdir()
    env = {**cmd.env, "LLMGW_FAKE_GPU_PROCS": str(procs)}
    proc = await run_until_healthy(cmd.argv, env, unused_tcp_port)
    try:
        (claim,) = [json.loads(p.read_text()) for p in procs.glob("*.json")]
        assert claim == {
            "pid": proc.pid,
            "cuda_visible_devices": "0,1",
            "used_bytes_per_gpu": int(0.42 * 40 * GIB),
        }
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{unused_tcp_port}") as http:
            assert (await http.get("/v1/models")).status_code == 401  # the key guards it
            models = await http.get("/v1/models", headers={"authorization": "Bearer k-123"})
            assert models.json()["data"][0]["id"] == "tiny"
            metrics = (await http.get("/metrics")).text
        prefix = "vllm:num_requests_running" if engine == "vllm" else "sglang:num_running_reqs"
        assert prefix in metrics
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        await proc.wait()
    assert not list(procs.glob("*.json"))  # released on the way out


async def test_the_stand_in_on_the_cpu_claims_no_card(vllm_stand_in_env, tmp_path, unused_tcp_port):
    cmd = VllmAdapter(vllm_stand_in_env).command(planned(port=unused_tcp_port))
    procs = tmp_path / "procs"
    procs.mkdir()
    env = {**cmd.env, "LLMGW_FAKE_GPU_PROCS": str(procs), "LLMGW_FAKE_ENGINE_ON_CPU": "1"}
    proc = await run_until_healthy(cmd.argv, env, unused_tcp_port)
    try:
        assert not list(procs.glob("*.json"))
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        await proc.wait()


@pytest.mark.parametrize(
    ("engine", "module"),
    [("vllm", "vllm.entrypoints.openai.api_server"), ("sglang", "sglang.launch_server")],
)
async def test_a_flag_the_engine_does_not_have_ends_it_with_exit_2_as_argparse_does(
    engine, module, request
):
    python = request.getfixturevalue(f"{engine}_stand_in_env")
    proc = await asyncio.create_subprocess_exec(
        str(python),
        "-m",
        module,
        "--model-path" if engine == "sglang" else "--model",
        "/w",
        "--tensor-parallel-sizes",
        "2",
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate()
    assert proc.returncode == 2
    assert b"unrecognized arguments: --tensor-parallel-sizes" in err


def test_a_key_that_starts_with_a_dash_reaches_sglang_as_the_value_of_api_key(monkeypatch):
    # Guards a failure one start in 64 had: a token_urlsafe key beginning with "-"
    # after "--api-key" was read by SGLang's argparse as an option of its own.
    import argparse
    import runpy
    import sys

    from agentd.engines.sglang import LAUNCHER

    seen = {}

    def launch(name, run_name, alter_sys):
        parser = argparse.ArgumentParser()
        parser.add_argument("--api-key")
        seen["key"] = parser.parse_args(sys.argv[1:]).api_key

    monkeypatch.setattr(runpy, "run_module", launch)
    monkeypatch.setenv("LLMGW_ENGINE_KEY", "-starts-with-a-dash")
    monkeypatch.setattr(sys, "argv", ["-c"])
    exec(LAUNCHER, {})  # noqa: S102 (the launcher is the code under test)
    assert seen["key"] == "-starts-with-a-dash"
