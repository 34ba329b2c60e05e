"""The engine flags and variables an operator may not pass, however they are spelt."""

from __future__ import annotations

import pytest

from llmgw.engines import flags
from llmgw.engines.flags import (
    ARGPARSE_ENGINES,
    EngineArgsRefused,
    check_args,
    check_env,
    find_env_refusals,
    find_refusals,
    refusal_for,
)

ENGINES = ("llama.cpp", "vllm", "sglang", "sim")


def _refused(engine: str) -> dict[str, str]:
    return {**flags._COMMON, **flags._PER_ENGINE[engine]}


def _cases(long_only: bool = False):
    for engine in ENGINES:
        for flag in sorted(_refused(engine)):
            if not long_only or flag.startswith("--"):
                yield engine, flag


@pytest.mark.parametrize(("engine", "flag"), list(_cases()))
def test_every_refused_flag_is_refused_alone_with_a_value_and_with_equals(engine, flag):
    for args in ([flag], [flag, "x"], [f"{flag}=x"]):
        found = find_refusals(engine, args)
        assert [r.read_as for r in found] == [flag], (engine, args)


@pytest.mark.parametrize(("engine", "flag"), list(_cases(long_only=True)))
def test_a_refused_flag_written_with_underscores_is_the_same_flag(engine, flag):
    # vLLM and SGLang read --trust_remote_code as --trust-remote-code.
    spelt = "--" + flag[2:].replace("-", "_")
    assert refusal_for(engine, spelt) is not None
    assert refusal_for(engine, f"{spelt}=1") is not None


@pytest.mark.parametrize("engine", sorted(ARGPARSE_ENGINES))
def test_every_beginning_of_a_refused_long_flag_is_refused_where_argparse_parses(engine):
    # argparse takes any unambiguous beginning for the flag: --trus is --trust-remote-code.
    for flag in sorted(_refused(engine)):
        if not flag.startswith("--"):
            continue
        for end in range(3, len(flag)):
            given = flag[:end]
            for spelt in (given, "--" + given[2:].replace("-", "_")):
                assert refusal_for(engine, spelt) is not None, (engine, spelt, flag)
                assert refusal_for(engine, f"{spelt}=v") is not None, (engine, spelt)


def test_the_beginnings_the_issue_names_are_refused_for_vllm_and_sglang():
    for engine in ("vllm", "sglang"):
        for given in ("--trust-remote", "--trus", "--trust_remote", "--trust-remote=1"):
            r = refusal_for(engine, given)
            assert r is not None and r.read_as == "--trust-remote-code", (engine, given)


def test_single_dash_beginnings_are_refused_where_argparse_parses():
    # argparse reads -t as -tp when no other flag starts with -t.
    assert refusal_for("vllm", "-t").read_as == "-tp"
    assert refusal_for("vllm", "-tp").read_as == "-tp"
    assert refusal_for("vllm", "-tp=2") is not None


def test_llamacpp_takes_no_abbreviations_so_its_own_longer_flags_pass():
    # --chat-template is a flag of its own there, not the start of --chat-template-file;
    # --lora-init-without-apply starts with the refused --lora but is another flag.
    assert find_refusals("llama.cpp", ["--chat-template", "chatml"]) == []
    assert find_refusals("llama.cpp", ["--lora-init-without-apply"]) == []
    assert find_refusals("llama.cpp", ["--mod", "x"]) == []
    assert refusal_for("llama.cpp", "--chat-template-file").read_as == "--chat-template-file"


def test_short_flags_of_llamacpp_match_exactly():
    for given in ("-m", "-hf", "-hfr", "-mu", "-a", "-c", "-np", "-dev", "-mm", "-md", "-jf"):
        assert refusal_for("llama.cpp", given) is not None, given
    for given in ("-cb", "-ngl", "-t", "-mg", "-ts", "-fa", "-b", "-ub", "-ctk", "-s"):
        assert refusal_for("llama.cpp", given) is None, given


@pytest.mark.parametrize("engine", ENGINES)
def test_tls_flags_are_refused_as_a_family(engine):
    for given in ("--ssl-keyfile", "--ssl-certfile=/x", "--ssl_ca_certs", "--ssl-key-file"):
        assert refusal_for(engine, given) is not None, (engine, given)


def test_a_beginning_of_the_tls_family_is_refused_where_argparse_parses():
    assert refusal_for("vllm", "--ssl").read_as.startswith("--ssl")
    assert refusal_for("sglang", "--ss") is not None


def test_llamacpp_presets_that_download_a_model_are_refused():
    for given in (
        "--gpt-oss-20b-default",
        "--fim-qwen-7b-spec",
        "--embd-gemma-default",
        "--vision-gemma-4b-default",
    ):
        assert refusal_for("llama.cpp", given) is not None, given


def test_a_chat_template_given_as_a_path_is_refused_where_it_may_name_a_file():
    for engine in ("vllm", "sglang"):
        for args in (
            ["--chat-template", "/etc/shadow"],
            ["--chat-template=./t.jinja"],
            ["--chat_template", "~/t.jinja"],
            ["--chat-templ", "/x/y"],
        ):
            found = find_refusals(engine, args)
            assert [r.read_as for r in found] == ["--chat-template"], (engine, args)
        inline = "{% for m in messages %}{{ m['content'] }}</s>{% endfor %}"
        assert find_refusals(engine, ["--chat-template", inline]) == []
        assert find_refusals(engine, [f"--chat-template={inline}"]) == []
    assert find_refusals("sglang", ["--chat-template", "chatml"]) == []


ALLOWED = {
    "llama.cpp": [
        "--n-gpu-layers",
        "20",
        "-ngl",
        "20",
        "--threads",
        "8",
        "--batch-size",
        "512",
        "--flash-attn",
        "on",
        "--jinja",
        "--temp",
        "0.7",
        "--seed",
        "-1",
        "--cache-type-k",
        "q8_0",
        "--chat-template",
        "chatml",
        "--reasoning-format",
        "none",
        "--no-webui",
    ],
    "vllm": [
        "--max-num-batched-tokens",
        "8192",
        "--tokenizer-mode",
        "mistral",
        "--enable-prefix-caching",
        "--kv-cache-dtype",
        "fp8",
        "--enforce-eager",
        "--disable-log-requests",
        "--no-trust-remote-code",
        "--config-format",
        "mistral",
        "--seed",
        "-1",
    ],
    "sglang": [
        "--chunked-prefill-size",
        "4096",
        "--chat-template",
        "chatml",
        "--attention-backend",
        "flashinfer",
        "--log-requests-level",
        "0",
        "--enable-metrics",
    ],
    "sim": ["--ttft-ms", "5", "--itl-ms=1", "--tokens", "8", "--load-ms", "100"],
}


@pytest.mark.parametrize("engine", ENGINES)
def test_ordinary_tuning_flags_pass(engine):
    assert find_refusals(engine, ALLOWED[engine]) == []
    check_args(engine, ALLOWED[engine])


@pytest.mark.parametrize(
    ("engine", "args", "why"),
    [
        ("vllm", ["--gpu-memory-utilization=0.9"], "memory on each card"),
        ("vllm", ["--quantization", "fp8"], "precision"),
        ("vllm", ["-q", "fp8"], "precision"),
        ("vllm", ["--enable-expert-parallel"], "expert parallel"),
        ("sglang", ["--mem-fraction-static", "0.8"], "memory on each card"),
        ("sglang", ["--quantization", "fp8"], "precision"),
        ("sglang", ["--ep-size", "2"], "expert parallel"),
        ("sglang", ["--tp", "2"], "picks GPUs"),
    ],
)
def test_what_the_plan_decided_for_a_python_engine_is_not_repeated_by_the_operator(
    engine, args, why
):
    # The agent sets these from the plan; argparse takes the last of a
    # repeated flag, so the operator's would silently win over the plan.
    (refusal,) = find_refusals(engine, args)
    assert why in refusal.why


def test_the_error_names_the_flag_as_given_and_why():
    with pytest.raises(EngineArgsRefused) as e:
        check_args("vllm", ["--enforce-eager", "--trust_remote_code", "--trus"])
    text = str(e.value)
    assert "--trust_remote_code (read as --trust-remote-code) is refused for vllm" in text
    assert "--trus (read as --trust-remote-code)" in text
    assert "runs Python code" in text
    assert "--enforce-eager" not in text
    assert e.value.hint


def test_a_refused_flag_with_its_value_is_named_without_the_value():
    # The value of --api-key is a secret; errors end up in logs and on consoles.
    with pytest.raises(EngineArgsRefused) as e:
        check_args("llama.cpp", ["--api-key=sk-secret-value"])
    assert "sk-secret-value" not in str(e.value)
    assert "--api-key is refused for llama.cpp: it is a credential" in str(e.value)


def test_negative_numbers_and_plain_values_are_not_flags():
    for engine in ENGINES:
        assert find_refusals(engine, ["-1", "-0.5", "x", "-", "--"]) == []


def test_context_slots_and_parallelism_point_at_the_model():
    r = refusal_for("vllm", "--max-model-len")
    assert "context_length" in r.why
    assert "slots" in refusal_for("llama.cpp", "--parallel").why
    assert "GPUs" in refusal_for("sglang", "--tp").why


def test_variables_that_pick_gpus_hold_keys_or_load_code_are_refused():
    env = {
        "CUDA_VISIBLE_DEVICES": "0",
        "LLAMA_ARG_PORT": "1",
        "LD_PRELOAD": "/x.so",
        "VLLM_API_KEY": "k",
        "OMP_NUM_THREADS": "8",
        "NCCL_DEBUG": "INFO",
        "VLLM_ATTENTION_BACKEND": "FLASHINFER",
    }
    refused = [r.given for r in find_env_refusals("vllm", env)]
    assert refused == ["CUDA_VISIBLE_DEVICES", "LLAMA_ARG_PORT", "LD_PRELOAD", "VLLM_API_KEY"]
    with pytest.raises(EngineArgsRefused, match="LLAMA_ARG_PORT is refused"):
        check_env("llama.cpp", {"LLAMA_ARG_PORT": "1"})
    check_env("vllm", {"OMP_NUM_THREADS": "8"})
