"""The acceptance of the gateway as a new user meets it: ``llmgw up`` serving the starter
model through llama.cpp's server, and the official openai and anthropic SDKs as clients."""

from __future__ import annotations

import json
import signal

import anthropic
import openai
import pytest

from tests.e2e.helpers import init_on_free_ports, llmgw, start, wait_until
from tests.e2e.test_up import _ready_replica


def _ctl_json(home, *args) -> dict:
    res = llmgw(home, "ctl", *args, "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


@pytest.fixture
def up(tmp_path):
    home = tmp_path / "home"
    init_on_free_ports(home)
    proc = start(home, "up")
    try:
        replica = wait_until(lambda: _ready_replica(home), timeout_s=240)
        yield home, replica["model"]
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, out


def test_the_official_sdks_get_answers_from_the_starter_model(up):
    home, model = up
    base = _ctl_json(home, "status")["gateway_url"]
    # The key command `llmgw up` prints works as printed: its project exists.
    key = _ctl_json(home, "keys", "create", "--project", "local/default/default")["secret"]
    client = openai.OpenAI(base_url=base, api_key=key, max_retries=0, timeout=120)

    listed = {m.id: m.model_extra["loaded"] for m in client.models.list().data}
    assert listed == {model: True}
    chat = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Say hello"}], max_tokens=8
    )
    assert chat.choices[0].message.content and chat.usage.completion_tokens > 0
    chunks = list(
        client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Count to three"}],
            max_tokens=8,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].usage.completion_tokens > 0
    emb = client.embeddings.create(model=model, input=["a cat", "a dog"])
    assert len(emb.data) == 2 and len(emb.data[0].embedding) > 100

    claude = anthropic.Anthropic(base_url=base.removesuffix("/v1"), api_key=key, max_retries=0)
    message = claude.messages.create(
        model=model, max_tokens=8, messages=[{"role": "user", "content": "Say hello"}]
    )
    assert message.content[0].text and message.usage.output_tokens > 0
    with claude.messages.stream(
        model=model, max_tokens=8, messages=[{"role": "user", "content": "Say hi"}]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text and final.stop_reason in ("max_tokens", "end_turn")

    bad = openai.OpenAI(base_url=base, api_key="llmgw-not-a-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(
            model="no-such-model", messages=[{"role": "user", "content": "x"}]
        )

    limited_key = _ctl_json(
        home, "keys", "create", "--project", "local/default/default", "--rpm", "2"
    )["secret"]
    limited = openai.OpenAI(base_url=base, api_key=limited_key, max_retries=0, timeout=120)
    for _ in range(2):
        limited.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=2
        )
    with pytest.raises(openai.RateLimitError) as err:
        limited.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=2
        )
    assert int(err.value.response.headers["retry-after"]) >= 1

    # Every request above is metered, by the project the key belongs to.
    def counted():
        groups = _ctl_json(home, "usage", "--by", "project")["groups"]
        return groups and sum(g["requests"] for g in groups) >= 9 and groups

    groups = wait_until(counted, timeout_s=30)
    assert {g["group"]["project"] for g in groups} == {"local/default/default"}


def test_the_sdks_retrieve_the_model_get_two_choices_and_count_tokens(starter_gateway):
    # Each of these was a 404 or a 400 from llama.cpp before (issue 12).
    starter = starter_gateway
    client = openai.OpenAI(
        base_url=starter.base_url, api_key=starter.key, max_retries=0, timeout=120
    )
    model = client.models.retrieve(starter.model)
    assert model.id == starter.model and model.object == "model"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")

    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Say hi"}]
    two = client.chat.completions.create(model=starter.model, messages=messages, max_tokens=4, n=2)
    assert [c.index for c in two.choices] == [0, 1] and two.model == starter.model
    assert all(c.message.content is not None for c in two.choices)
    # The starter's llama.cpp has one slot: the two choices were two requests, their usage summed.
    assert two.usage.completion_tokens > 0 and two.usage.prompt_tokens % 2 == 0
    chunks = list(
        client.chat.completions.create(
            model=starter.model,
            messages=messages,
            max_tokens=3,
            n=2,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert {c.index for chunk in chunks for c in chunk.choices} == {0, 1}
    assert chunks[-1].usage.completion_tokens > 0

    claude = anthropic.Anthropic(
        base_url=starter.base_url.removesuffix("/v1"), api_key=starter.key, max_retries=0
    )
    counted = claude.messages.count_tokens(
        model=starter.model, system="be brief", messages=[{"role": "user", "content": "Say hi"}]
    )
    # Counted by the engine's own template and tokenizer: the prompt its answer reports.
    assert counted.input_tokens > 0
    assert counted.input_tokens == two.usage.prompt_tokens // 2


def test_input_the_engine_cannot_take_is_a_400_naming_the_field(starter_gateway):
    starter = starter_gateway
    client = openai.OpenAI(
        base_url=starter.base_url, api_key=starter.key, max_retries=0, timeout=120
    )
    # gemma-3 has 262,144 tokens: the id past them was the engine's 500.
    with pytest.raises(openai.BadRequestError) as err:
        client.embeddings.create(model=starter.model, input=[[1, 2], [262_144]])
    assert err.value.body["param"] == "input[1][0]" and "262144" in err.value.message
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model=starter.model, prompt=["a", [1, 2]], max_tokens=2)
    assert err.value.body["param"] == "prompt[1]"
    # A tool type llama.cpp does not take was its 500 too.
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model=starter.model,
            messages=[{"role": "user", "content": "hi"}],
            tools=[{"type": "custom", "custom": {"name": "f"}}],
            max_tokens=2,
        )
    assert err.value.body["param"] == "tools[0].type"
    assert isinstance(err.value.body["code"], str)
