"""Each engine's command line, environment and URLs for a shard, asserted exactly."""

from __future__ import annotations

import sys

import pytest

from agentd.engines import (
    EngineArgsRefused,
    EngineSpecError,
    LlamaCppAdapter,
    SglangAdapter,
    ShardSpec,
    SimAdapter,
    VllmAdapter,
    adapter_for,
    is_hub_id,
)
from agentd.engines.sglang import LAUNCHER

GPU_ENV_CPU = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": ""}
KEY = "sk-engine-key-1234"


def _spec(**changes) -> ShardSpec:
    base = {"model_name": "gemma", "model_path": "/w/gemma/gemma.gguf", "port": 8001}
    return ShardSpec(**{**base, **changes})


def test_llamacpp_on_cpu():
    cmd = LlamaCppAdapter("/opt/llama-server").command(
        _spec(context_length=4096, slots=4, extra_args=("--threads", "8"))
    )
    assert cmd.argv == [
        "/opt/llama-server",
        "--model",
        "/w/gemma/gemma.gguf",
        "--alias",
        "gemma",
        "--host",
        "127.0.0.1",
        "--port",
        "8001",
        "--parallel",
        "4",
        "--metrics",
        "--ctx-size",
        "16384",
        "--device",
        "none",
        "--n-gpu-layers",
        "0",
        "--threads",
        "8",
    ]
    assert cmd.env == GPU_ENV_CPU
    assert cmd.health_url == "http://127.0.0.1:8001/health"
    assert cmd.metrics_url == "http://127.0.0.1:8001/metrics"


def test_llamacpp_on_two_gpus_with_a_key_in_the_environment_only():
    cmd = LlamaCppAdapter("/opt/llama-server").command(
        _spec(gpu_indexes=(2, 3), host="10.0.0.5", engine_key=KEY)
    )
    assert cmd.argv == [
        "/opt/llama-server",
        "--model",
        "/w/gemma/gemma.gguf",
        "--alias",
        "gemma",
        "--host",
        "10.0.0.5",
        "--port",
        "8001",
        "--parallel",
        "1",
        "--metrics",
        "--n-gpu-layers",
        "999",
    ]
    assert cmd.env == {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": "2,3",
        "LLAMA_API_KEY": KEY,
    }
    assert cmd.redacted_env()["LLAMA_API_KEY"] == "***"
    assert cmd.health_url == "http://10.0.0.5:8001/health"


def test_vllm_on_two_gpus():
    cmd = VllmAdapter("/opt/vllm/bin/python").command(
        _spec(
            model_path="/w/qwen",
            gpu_indexes=(0, 1),
            context_length=32768,
            slots=16,
            engine_key=KEY,
            extra_args=("--enable-prefix-caching",),
        )
    )
    assert cmd.argv == [
        "/opt/vllm/bin/python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "/w/qwen",
        "--served-model-name",
        "gemma",
        "--host",
        "127.0.0.1",
        "--port",
        "8001",
        "--tensor-parallel-size",
        "2",
        "--max-num-seqs",
        "16",
        "--max-model-len",
        "32768",
        "--enable-prefix-caching",
    ]
    assert cmd.env == {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "VLLM_API_KEY": KEY,
        # The agent fetched the weights: the engine never goes to the hub.
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }


def test_sglang_on_one_gpu_takes_its_key_through_the_launcher():
    cmd = SglangAdapter("/opt/sglang/bin/python").command(
        _spec(model_path="/w/qwen", gpu_indexes=(5,), context_length=8192, slots=8, engine_key=KEY)
    )
    assert cmd.argv == [
        "/opt/sglang/bin/python",
        "-c",
        LAUNCHER,
        "--model-path",
        "/w/qwen",
        "--served-model-name",
        "gemma",
        "--host",
        "127.0.0.1",
        "--port",
        "8001",
        "--tp-size",
        "1",
        "--max-running-requests",
        "8",
        "--enable-metrics",
        "--context-length",
        "8192",
    ]
    assert cmd.env == {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": "5",
        "LLMGW_ENGINE_KEY": KEY,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    assert "LLMGW_ENGINE_KEY" in LAUNCHER and "os.environ.pop" in LAUNCHER


def test_sim():
    cmd = SimAdapter().command(
        _spec(slots=3, context_length=2048, engine_key=KEY, extra_args=("--ttft-ms", "5"))
    )
    assert cmd.argv == [
        sys.executable,
        "-m",
        "agentd.sim",
        "--model",
        "gemma",
        "--host",
        "127.0.0.1",
        "--port",
        "8001",
        "--max-concurrency",
        "3",
        "--max-model-len",
        "2048",
        "--ttft-ms",
        "5",
    ]
    assert cmd.env == {**GPU_ENV_CPU, "LLMGW_ENGINE_KEY": KEY}
    assert SimAdapter(["llmgw", "sim-engine"]).command(_spec()).argv[:2] == ["llmgw", "sim-engine"]


@pytest.mark.parametrize(
    "adapter",
    [
        LlamaCppAdapter("/x"),
        VllmAdapter("/py"),
        SglangAdapter("/py"),
        SimAdapter(),
    ],
)
def test_the_engine_key_is_never_on_the_command_line(adapter):
    # Every user of the node can read a process's command line.
    cmd = adapter.command(_spec(gpu_indexes=(0,), engine_key=KEY))
    assert not any(KEY in a for a in cmd.argv)
    assert list(cmd.env.values()).count(KEY) == 1
    assert KEY not in repr(_spec(engine_key=KEY))


def test_operator_variables_are_kept_but_cannot_override_the_agents():
    cmd = SimAdapter().command(_spec(extra_env={"OMP_NUM_THREADS": "4"}))
    assert cmd.env == {"OMP_NUM_THREADS": "4", **GPU_ENV_CPU}


def test_a_refused_flag_or_variable_stops_the_command_from_being_built():
    with pytest.raises(EngineArgsRefused, match="--trus"):
        VllmAdapter("/py").command(_spec(gpu_indexes=(0,), extra_args=("--trus",)))
    with pytest.raises(EngineArgsRefused, match="-m is refused"):
        LlamaCppAdapter("/x").command(_spec(extra_args=("-m", "/etc/passwd")))
    with pytest.raises(EngineArgsRefused, match="CUDA_VISIBLE_DEVICES"):
        LlamaCppAdapter("/x").command(_spec(extra_env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"}))


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("0.0.0.0", "http://127.0.0.1:8001/health"),
        ("::", "http://[::1]:8001/health"),
        ("fd00::5", "http://[fd00::5]:8001/health"),
        ("node-3.lan", "http://node-3.lan:8001/health"),
    ],
)
def test_the_health_url_reaches_a_wildcard_bound_engine_over_loopback(host, url):
    assert SimAdapter().command(_spec(host=host)).health_url == url


def test_vllm_and_sglang_need_gpus_and_a_matching_tensor_parallel_width():
    for adapter in (VllmAdapter("/py"), SglangAdapter("/py")):
        with pytest.raises(EngineSpecError, match="needs GPUs") as e:
            adapter.command(_spec())
        assert "llama.cpp" in e.value.hint
        with pytest.raises(EngineSpecError, match="tensor parallel 4 over 2"):
            adapter.command(_spec(gpu_indexes=(0, 1), tensor_parallel=4))


@pytest.mark.parametrize(
    "changes",
    [
        {"port": 0},
        {"port": 70000},
        {"slots": 0},
        {"model_path": ""},
        {"model_name": ""},
        {"context_length": -1},
    ],
)
def test_settings_no_engine_can_start_with_are_refused(changes):
    with pytest.raises(EngineSpecError):
        LlamaCppAdapter("/x").command(_spec(**changes))


def test_the_sim_needs_no_weights():
    assert SimAdapter().command(_spec(model_path="")).argv[3:5] == ["--model", "gemma"]


def test_a_model_vllm_downloads_itself_is_read_as_safetensors_only():
    # Left to choose, vLLM takes pytorch_model.bin when a repository has no
    # safetensors, and loading a pickle runs whatever it holds.
    cmd = VllmAdapter("/py").command(_spec(model_path="Qwen/Qwen2.5-7B", gpu_indexes=(0,)))
    assert cmd.argv[-2:] == ["--load-format", "safetensors"]
    cmd = SglangAdapter("/py").command(_spec(model_path="Qwen/Qwen2.5-7B", gpu_indexes=(0,)))
    assert cmd.argv[-2:] == ["--load-format", "safetensors"]
    allowed = VllmAdapter("/py").command(
        _spec(model_path="Qwen/Qwen2.5-7B", gpu_indexes=(0,), allow_pickle=True)
    )
    assert "--load-format" not in allowed.argv
    fetched = VllmAdapter("/py").command(_spec(model_path="/w/qwen", gpu_indexes=(0,)))
    assert "--load-format" not in fetched.argv


@pytest.mark.parametrize(
    ("path", "hub"),
    [
        ("Qwen/Qwen2.5-7B-Instruct", True),
        ("/var/lib/llmgw-agent/weights/q", False),
        ("./local/dir", False),
        ("https://h/q/v", False),
        ("q.gguf", False),
        ("org/name:Q4_K_M", False),
        ("a/b/c", False),
        ("~/m/x", False),
    ],
)
def test_hugging_face_ids_are_known_from_paths(path, hub):
    assert is_hub_id(path) is hub


def test_adapters_are_found_by_the_catalogs_engine_names():
    assert isinstance(adapter_for("llama.cpp", "/x"), LlamaCppAdapter)
    assert isinstance(adapter_for("vllm", "/py"), VllmAdapter)
    assert isinstance(adapter_for("sglang", "/py"), SglangAdapter)
    assert adapter_for("sim").launcher() == [sys.executable, "-m", "agentd.sim"]
    assert adapter_for("sim", "/py").launcher() == ["/py", "-m", "agentd.sim"]
    with pytest.raises(EngineSpecError, match="llama.cpp, sglang, sim, vllm"):
        adapter_for("trtllm", "/x")
    with pytest.raises(EngineSpecError, match="needs the path"):
        adapter_for("vllm")
