"""The sim engine, called over HTTP with the official openai SDK."""

from __future__ import annotations

import asyncio
import math
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentd.engines import ShardSpec, SimAdapter
from agentd.sim.server import completion_words
from tests.ports import free_port as _free_port

from .conftest import stop_sim

PROMPT = "Say hello to the four engines"  # six words: six prompt tokens


def _client(sim, key: str = "none") -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.v1, api_key=key, max_retries=0)


def _metrics(sim) -> dict[str, float]:
    """Every sample of /metrics by name (labels dropped: one model per sim)."""
    text = httpx.get(f"{sim.base_url}/metrics").text
    return {
        s.name: s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if "le" not in s.labels
    }


def test_a_chat_answer_counts_its_tokens(sim):
    answer = _client(sim).chat.completions.create(
        model="sim-model", messages=[{"role": "user", "content": PROMPT}]
    )
    assert answer.choices[0].message.content == "".join(completion_words(PROMPT, 8))
    assert answer.choices[0].finish_reason == "stop"
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (6, 8)
    assert answer.usage.total_tokens == 14


def test_max_tokens_cuts_the_answer_short(sim):
    answer = _client(sim).chat.completions.create(
        model="sim-model", messages=[{"role": "user", "content": PROMPT}], max_tokens=3
    )
    assert answer.choices[0].finish_reason == "length"
    assert answer.usage.completion_tokens == 3
    assert len(answer.choices[0].message.content.split()) == 3


def test_a_streamed_chat_gives_the_same_text_and_usage_last(sim):
    stream = _client(sim).chat.completions.create(
        model="sim-model",
        messages=[{"role": "user", "content": PROMPT}],
        max_tokens=5,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "".join(completion_words(PROMPT, 5))
    assert chunks[0].choices[0].delta.role == "assistant"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "length" and set(finishes[:-1]) == {None}
    assert chunks[-1].choices == []
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (6, 5)
    assert all(c.usage is None for c in chunks[:-1])


def test_a_stream_without_include_usage_has_no_usage_chunk(sim):
    chunks = list(
        _client(sim).chat.completions.create(
            model="sim-model", messages=[{"role": "user", "content": PROMPT}], stream=True
        )
    )
    assert all(c.choices for c in chunks) and all(c.usage is None for c in chunks)


def test_text_completions_stream_and_not(sim):
    client = _client(sim)
    answer = client.completions.create(model="sim-model", prompt=PROMPT, max_tokens=4)
    assert answer.choices[0].text == "".join(completion_words(PROMPT, 4))
    assert answer.usage.completion_tokens == 4
    chunks = list(
        client.completions.create(
            model="sim-model", prompt=PROMPT, stream=True, stream_options={"include_usage": True}
        )
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "".join(
        completion_words(PROMPT, 8)
    )
    assert chunks[-1].usage.completion_tokens == 8


def test_embeddings_are_unit_vectors_that_depend_only_on_the_input(sim):
    client = _client(sim)
    # The SDK asks for base64 unless told otherwise; both forms must agree.
    a = client.embeddings.create(model="sim-model", input=["red fox", "blue whale"])
    b = client.embeddings.create(model="sim-model", input="red fox", encoding_format="float")
    va, vb = a.data[0].embedding, b.data[0].embedding
    assert len(va) == 64 and all(math.isclose(x, y, abs_tol=1e-6) for x, y in zip(va, vb))
    assert math.isclose(math.fsum(x * x for x in va), 1.0, rel_tol=1e-5)
    assert a.data[1].embedding != va
    assert a.usage.prompt_tokens == 4
    small = client.embeddings.create(model="sim-model", input="x", dimensions=8)
    assert len(small.data[0].embedding) == 8


def test_models_lists_the_one_model_and_another_name_is_not_found(sim):
    client = _client(sim)
    assert [m.id for m in client.models.list()] == ["sim-model"]
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="other", messages=[{"role": "user", "content": "x"}])


def test_metrics_speak_vllms_names(sim):
    client = _client(sim)
    for _ in range(2):
        client.chat.completions.create(
            model="sim-model", messages=[{"role": "user", "content": PROMPT}]
        )
    m = _metrics(sim)
    assert m["vllm:num_requests_running"] == 0 and m["vllm:num_requests_waiting"] == 0
    assert m["vllm:kv_cache_usage_perc"] == 0 and m["vllm:gpu_cache_usage_perc"] == 0
    assert m["vllm:prompt_tokens_total"] == 12
    assert m["vllm:generation_tokens_total"] == 16
    assert m["vllm:time_to_first_token_seconds_count"] == 2
    assert m["vllm:time_to_first_token_seconds_sum"] >= 2 * 0.005
    assert m["vllm:e2e_request_latency_seconds_count"] == 2


async def test_requests_past_max_concurrency_wait_and_are_counted_waiting(sim_factory):
    sim = sim_factory(
        "--model",
        "m",
        "--max-concurrency",
        "1",
        "--ttft-ms",
        "600",
        "--tokens",
        "2",
        "--itl-ms",
        "1",
    )
    client = openai.AsyncOpenAI(base_url=sim.v1, api_key="none", max_retries=0)
    calls = [
        asyncio.create_task(
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        )
        for _ in range(3)
    ]
    seen = None
    async with httpx.AsyncClient() as http:
        for _ in range(50):
            await asyncio.sleep(0.05)
            text = (await http.get(f"{sim.base_url}/metrics")).text
            samples = {
                s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
            }
            if samples["vllm:num_requests_waiting"] == 2:
                seen = samples
                break
    assert seen is not None, "three requests on one slot never showed two waiting"
    assert seen["vllm:num_requests_running"] == 1
    assert seen["vllm:kv_cache_usage_perc"] == 1.0
    answers = await asyncio.gather(*calls)
    assert all(a.usage.completion_tokens == 2 for a in answers)
    await client.close()


def test_time_to_first_token_is_honoured(sim_factory):
    sim = sim_factory("--model", "m", "--ttft-ms", "300", "--itl-ms", "1", "--tokens", "3")
    started = time.monotonic()
    stream = _client(sim).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            break
    assert time.monotonic() - started >= 0.3


def test_a_prompt_past_the_context_is_refused_as_vllm_refuses_it(sim_factory):
    sim = sim_factory("--model", "m", "--max-model-len", "10", "--tokens", "8")
    with pytest.raises(openai.BadRequestError, match="maximum context length is 10"):
        _client(sim).chat.completions.create(
            model="m", messages=[{"role": "user", "content": PROMPT}]
        )


def test_the_engine_key_is_asked_for_on_v1_but_not_on_health_or_metrics(sim_factory):
    sim = sim_factory("--model", "m", "--ttft-ms", "1", env={"LLMGW_ENGINE_KEY": "sk-sim"})
    with pytest.raises(openai.AuthenticationError):
        _client(sim, "wrong").chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}]
        )
    assert httpx.get(f"{sim.v1}/models").status_code == 401
    answer = _client(sim, "sk-sim").chat.completions.create(
        model="m", messages=[{"role": "user", "content": "x"}]
    )
    assert answer.usage.completion_tokens == 32
    assert httpx.get(f"{sim.base_url}/health").status_code == 200
    assert httpx.get(f"{sim.base_url}/metrics").status_code == 200


def test_health_says_503_while_loading_then_200(sim_factory):
    sim = sim_factory("--model", "m", "--load-ms", "700")
    assert httpx.get(f"{sim.base_url}/health").status_code == 503
    time.sleep(0.8)
    assert httpx.get(f"{sim.base_url}/health").status_code == 200


def test_sigterm_stops_it_with_exit_code_0_even_mid_stream(sim_factory):
    sim = sim_factory("--model", "m", "--tokens", "500", "--itl-ms", "20", "--ttft-ms", "1")
    with (
        httpx.Client(timeout=10) as http,
        http.stream(
            "POST",
            f"{sim.v1}/chat/completions",
            json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]},
        ) as resp,
    ):
        next(resp.iter_lines())
        sim.proc.send_signal(signal.SIGTERM)
        assert sim.proc.wait(timeout=10) == 0
    assert stop_sim(sim) == 0


def test_the_adapters_command_starts_a_sim_the_agent_can_reach(tmp_path):
    # The path the agent takes: a fixed free port, the key in the environment, health polled.
    cmd = SimAdapter().command(
        ShardSpec(model_name="m", model_path="-", port=_free_port(), slots=2, engine_key="sk-agent")
    )
    proc = subprocess.Popen(
        cmd.argv,
        env={**os.environ, **cmd.env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                if httpx.get(cmd.health_url).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        base = cmd.health_url.removesuffix("/health")
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="sk-agent", max_retries=0)
        assert [m.id for m in client.models.list()] == ["m"]
        assert "vllm:num_requests_running" in httpx.get(cmd.metrics_url).text
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0


def test_a_taken_port_is_said_plainly():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "agentd.sim", "--model", "m", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=15,
        )
    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
