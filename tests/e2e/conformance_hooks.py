"""Schemathesis hooks for the conformance run: requests aimed at the local model, kept short.

OpenAI's description names OpenAI's models in its examples and lets any
``max_tokens``; the hooks point ``model`` at the model under test
(``LLMGW_CONFORMANCE_MODEL``) and cap what a request may ask an engine on
two CPU cores to generate, so that the run's examples, not its answers' lengths,
decide how long it takes.
"""

from __future__ import annotations

import os

import schemathesis

# Tokens an answer may be asked for: enough to be an answer, few enough for CPUs.
MAX_ANSWER_TOKENS = 4
MAX_CHOICES = 2
# Inputs an embeddings request (or prompts a completions request) may carry:
# the description allows 2,048, which a CPU engine takes many seconds over.
MAX_INPUTS = 8
# Token ids a prompt of ids may hold (its prefill is what a CPU takes long over).
MAX_PROMPT_TOKENS = 256


# Operations whose body names a model; each gets the model under test.
MODEL_PATHS = ("/chat/completions", "/completions", "/embeddings", "/responses")


@schemathesis.hook
def before_call(ctx, case, **kwargs):
    # Every phase's requests pass here (explicit examples and coverage cases
    # too, which map_body does not see): OpenAI's own examples name its models.
    model = os.environ.get("LLMGW_CONFORMANCE_MODEL", "")
    if case.path_parameters and "model" in case.path_parameters:
        case.path_parameters["model"] = model
    body = case.body
    if not isinstance(body, dict):
        return
    path = case.operation.path
    if "model" in body or path in MODEL_PATHS:
        body["model"] = model
    for name in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        value = body.get(name)
        if type(value) is int:
            body[name] = max(1, min(value, MAX_ANSWER_TOKENS))
    # A null max_tokens is as good as none: llama.cpp then writes until its
    # context is full, a minute and more on CPUs, while every other request waits.
    if (
        path in ("/chat/completions", "/completions")
        and body.get("max_tokens") is None
        and body.get("max_completion_tokens") is None
    ):
        body["max_tokens"] = MAX_ANSWER_TOKENS
    if path == "/responses" and type(body.get("max_output_tokens")) is not int:
        body["max_output_tokens"] = MAX_ANSWER_TOKENS
    if type(body.get("n")) is int and body["n"] > MAX_CHOICES:
        body["n"] = MAX_CHOICES
    # The description lets prompt be null (it defaults to <|endoftext|>, a
    # token of OpenAI's models, not of ours): generated requests would
    # almost never reach the engine. Give them a prompt.
    if path == "/completions" and body.get("prompt") is None:
        body["prompt"] = "Say hello"
    for name in ("input", "prompt"):
        value = body.get(name)
        if isinstance(value, list) and value and not isinstance(value[0], int):
            del value[MAX_INPUTS:]
            for item in value:
                if isinstance(item, list):
                    del item[MAX_PROMPT_TOKENS:]
        elif isinstance(value, list):
            del value[MAX_PROMPT_TOKENS:]
    # The description's embedding is a list of floats only, though OpenAI's API
    # (and llama.cpp's, and the gateway, which passes it on) answer
    # encoding_format "base64" with a string — what the openai SDK asks for.
    # Checked against a schema that has no such answer, it would fail OpenAI's
    # own API too; the SDK tests cover base64.
    if path == "/embeddings" and body.get("encoding_format") == "base64":
        del body["encoding_format"]
