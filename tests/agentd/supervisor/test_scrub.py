"""Secrets taken out of engine output lines: the engine's own key and anything named a secret."""

from __future__ import annotations

import pytest

from agentd.supervisor.scrub import MARK, is_secret_name, scrub, secrets_of

KEY = "Zq3vX9-fake-engine-key_7Hn2"


def test_the_banner_sglang_prints_at_launch_loses_its_key():
    # sgl-project/sglang#37457: its ServerArgs, key and all, opens every engine's log.
    banner = (
        "[2025-10-05 09:30:00] server_args=ServerArgs(model_path='/w/tiny', "
        f"host='127.0.0.1', port=30001, api_key='{KEY}', admin_api_key=None, "
        "served_model_name='tiny', max_running_requests=1)"
    )
    scrubbed = scrub(banner)
    assert KEY not in scrubbed
    assert f"api_key='{MARK}', admin_api_key=None, served_model_name='tiny'" in scrubbed


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (f"api_key='{KEY}'", f"api_key='{MARK}'"),
        (f'{{"api_key": "{KEY}", "port": 1}}', f'{{"api_key": "{MARK}", "port": 1}}'),
        (f"'api_key': ['{KEY}']", f"'api_key': ['{MARK}']"),
        (f"--api-key {KEY} --port 8000", f"--api-key {MARK} --port 8000"),
        (f"--api-key={KEY}", f"--api-key={MARK}"),
        (f"api-key={KEY}", f"api-key={MARK}"),
        (f"X-API-Key: {KEY}", f"X-API-Key: {MARK}"),
        (f"VLLM_API_KEY={KEY} vllm serve", f"VLLM_API_KEY={MARK} vllm serve"),
        (f"hf_token={KEY}", f"hf_token={MARK}"),
        (f"aws_secret_access_key = {KEY}", f"aws_secret_access_key = {MARK}"),
        (f"GET /v1/models?api_key={KEY}&x=1", f"GET /v1/models?api_key={MARK}&x=1"),
        (f"Authorization: Bearer {KEY}", f"Authorization: Bearer {MARK}"),
        (f"the api-key {KEY} was refused", f"the api-key {MARK} was refused"),
        # A key too short to be scrubbed wherever it appears is still taken where it is named.
        ("api_key='abc'", f"api_key='{MARK}'"),
    ],
)
def test_every_shape_of_a_named_secret_loses_its_value(line, expected):
    assert scrub(line) == expected


@pytest.mark.parametrize(
    "line",
    [
        # An unset key says so, and stays readable.
        "server_args=ServerArgs(api_key=None, admin_api_key=None)",
        "api_key=''",
        '"api_key": null',
        # argparse's own words about the flag are not a key.
        "usage: launch_server.py [--api-key API_KEY] [--port PORT]",
        "error: --api-key --port: expected one argument",
        "an api-key required by the server",
        # SGLang's and vLLM's everyday lines that only look like names of secrets.
        "Decode batch. #running-req: 1, #token: 45, token usage: 0.00",
        "bos_token='<s>' eos_token_id=2 max_new_tokens=16 tokenizer_mode='auto'",
        "TOKENIZERS_PARALLELISM=false",
    ],
)
def test_lines_that_hold_no_secret_are_left_as_they_are(line):
    assert scrub(line) == line


def test_a_secret_the_agent_gave_is_taken_out_wherever_it_appears():
    # A key printed with no name beside it: only knowing the value finds it.
    line = f"listening with {KEY} as its key; {KEY}!"
    assert scrub(line, [KEY]) == f"listening with {MARK} as its key; {MARK}!"
    # Named as well: replaced once, never marked twice.
    assert scrub(f"api_key='{KEY}'", [KEY]) == f"api_key='{MARK}'"
    assert scrub(f"--api-key {KEY}", [KEY]) == f"--api-key {MARK}"


def test_a_secret_that_holds_another_is_taken_out_whole():
    short, long = "abcdefgh1", "abcdefgh1-and-more"
    assert secrets_of({"A_KEY": short, "B_TOKEN": long}) == (long, short)
    assert scrub(f"x {long} y", secrets_of({"A_KEY": short, "B_TOKEN": long})) == f"x {MARK} y"


def test_the_secrets_of_an_environment_are_those_named_or_marked_and_long_enough():
    env = {
        "LLMGW_ENGINE_KEY": KEY,
        "HF_TOKEN": "hf_0123456789abcdef",
        "MY_ENGINE_PASS": "marked-by-the-adapter",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false-ish-long-value",
        # Too short to replace wherever it appears: "1" would take every 1 out of the log.
        "LLAMA_API_KEY": "1",
    }
    found = secrets_of(env, marked={"MY_ENGINE_PASS"})
    assert set(found) == {KEY, "hf_0123456789abcdef", "marked-by-the-adapter"}


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("LLAMA_API_KEY", True),
        ("VLLM_API_KEY", True),
        ("HF_TOKEN", True),
        ("HUGGING_FACE_HUB_TOKEN", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("PGPASSWORD", False),  # one word: not split, and no engine is given it
        ("TOKENIZERS_PARALLELISM", False),
        ("CUDA_VISIBLE_DEVICES", False),
        ("HF_HUB_OFFLINE", False),
    ],
)
def test_a_variable_is_a_secret_when_a_part_of_its_name_says_so(name, secret):
    assert is_secret_name(name) is secret
