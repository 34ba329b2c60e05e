"""Engine flags and environment variables an operator may not put in a profile.

A profile's ``args`` go onto the engine's command line after the agent's own,
and its ``env`` into the engine's environment. Some flags would undo what the
agent decided or guards: where the engine listens, which GPUs and files it
uses, its key, and whether it runs code that came with the weights. Those are
refused, each with the reason, however they are spelt:

- ``--flag value`` and ``--flag=value``;
- underscores for dashes (``--trust_remote_code``): vLLM and SGLang read both;
- for engines that parse with Python's argparse (vLLM, SGLang, sim), any
  beginning of a refused long flag, since argparse takes ``--trust-remote``
  (or ``--trus``, or even ``--t`` when nothing else starts so) for
  ``--trust-remote-code``. The brief asked for beginnings of four characters
  and more; shorter ones are refused too, because argparse reads them the
  same way. Single-dash flags are abbreviated by argparse as well (``-t`` is
  ``-tp`` when no other flag starts with ``-t``), so the same holds for them.
  llama.cpp takes no abbreviations, and there ``--chat-template`` is a flag of
  its own, not a beginning of the refused ``--chat-template-file``.

Decisions worth knowing:

- context length, slots and tensor parallelism come from the model
  (``context_length``, ``slots``) and the placement, which sized memory for
  them, so the engine flags that set them are refused with a pointer there;
- ``--chat-template-file`` is refused (it reads a file the agent did not
  fetch); an inline ``--chat-template`` passes. vLLM and SGLang also take a
  path in ``--chat-template``: a value with no ``{`` that looks like a path is
  refused there;
- ``--ssl-*`` is refused: the gateway reaches engines itself and the engine
  key guards them; certificate files are the agent's to place.

Pure functions over strings; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from llmgw.errors import UsageError

# Engines whose command line is parsed by argparse, which abbreviates.
ARGPARSE_ENGINES = frozenset({"vllm", "sglang", "sim"})

_AGENT = "is set by the agent"
_MODEL = "is the model's source, set by the agent"
_KEY = "is a credential; the agent gives the engine its key in the environment"
_TLS = "reads certificate files; the gateway reaches engines itself and the engine key guards them"
_CTX = "is set by the agent from the model's context_length (llmgw ctl models context)"
_SLOTS = "is set by the agent from the model's slots"
_GPUS = "picks GPUs, which the agent assigns"
_READS = "reads a file the agent did not fetch"
_WRITES = "writes files outside the engine's own directory"
_DOWNLOADS = "downloads a model the agent did not check"
_CODE = "runs Python code that came with the model or from a file"
_PROMPTS = "logs request text, which llmgw never keeps"
_MEMORY = "is set by the agent from the plan's memory on each card (llmgw ctl model plan)"
_PRECISION = "is set by the agent from the profile's precision (bf16 or fp8), which the plan sized"
_EXPERTS = "is set by the agent from the plan's layout (expert parallel)"

# Refused by every engine.
_COMMON: dict[str, str] = {
    "--host": _AGENT,
    "--port": _AGENT,
    "--api-key": _KEY,
    "--trust-remote-code": _CODE,
    "--download-dir": _WRITES,
    "--log-file": _WRITES,
    "--config": "reads flags from a file, around this check",
    "--hf-token": _KEY,
    "--devices": _GPUS,
}

_PER_ENGINE: dict[str, dict[str, str]] = {
    "llama.cpp": {
        "--model": _MODEL,
        "-m": _MODEL,
        "--model-url": _DOWNLOADS,
        "-mu": _DOWNLOADS,
        "--hf-repo": _DOWNLOADS,
        "-hf": _DOWNLOADS,
        "-hfr": _DOWNLOADS,
        "--hf-file": _DOWNLOADS,
        "-hff": _DOWNLOADS,
        "-hft": _KEY,
        "--docker-repo": _DOWNLOADS,
        "-dr": _DOWNLOADS,
        "--alias": _AGENT,
        "-a": _AGENT,
        "--api-key-file": _KEY,
        "--api-prefix": "moves the paths the agent checks",
        "--ctx-size": _CTX,
        "-c": _CTX,
        "--parallel": _SLOTS,
        "-np": _SLOTS,
        "--device": _GPUS,
        "-dev": _GPUS,
        "--device-draft": _GPUS,
        "-devd": _GPUS,
        "--spec-draft-device": _GPUS,
        "--rpc": "sends the model's work to other machines",
        "--mmproj": _READS,
        "-mm": _READS,
        "--mmproj-url": _DOWNLOADS,
        "-mmu": _DOWNLOADS,
        "--lora": _READS,
        "--lora-scaled": _READS,
        "--control-vector": _READS,
        "--control-vector-scaled": _READS,
        "--model-draft": _READS,
        "-md": _READS,
        "--spec-draft-model": _READS,
        "--hf-repo-draft": _DOWNLOADS,
        "-hfd": _DOWNLOADS,
        "-hfrd": _DOWNLOADS,
        "--spec-draft-hf": _DOWNLOADS,
        "--hf-repo-v": _DOWNLOADS,
        "-hfv": _DOWNLOADS,
        "--hf-file-v": _DOWNLOADS,
        "-hffv": _DOWNLOADS,
        "--model-vocoder": _READS,
        "-mv": _READS,
        "--grammar-file": _READS,
        "--json-schema-file": _READS,
        "-jf": _READS,
        "--chat-template-file": _READS + "; give the template inline with --chat-template",
        "--ui-config-file": _READS,
        "--webui-config-file": _READS,
        "--mcp-servers-config": _READS,
        "--models-dir": _READS,
        "--models-preset": _READS,
        "--media-path": _READS,
        "--path": "serves a directory over HTTP",
        "--slot-save-path": _WRITES,
        "--log-prompts-dir": _PROMPTS,
        "--lookup-cache-static": _READS,
        "-lcs": _READS,
        "--lookup-cache-dynamic": _WRITES,
        "-lcd": _WRITES,
        "--tools": "lets the model run tools on the node",
        "--tools-runtime": "lets the model run tools on the node",
        "--mcp-servers-json": "lets the model call other services",
        "--agent": "lets the model run tools and fetch URLs",
        "-ag": "lets the model run tools",
        "--ui-mcp-proxy": "lets the server fetch URLs for its clients",
        "--webui-mcp-proxy": "lets the server fetch URLs for its clients",
    },
    "vllm": {
        "--model": _MODEL,
        "--served-model-name": _AGENT,
        "--uds": _AGENT,
        "--tokenizer": "reads another repository or path",
        "--load-format": "changes how weights are loaded, some ways running code",
        "--tensor-parallel-size": _GPUS,
        "-tp": _GPUS,
        "--pipeline-parallel-size": _GPUS,
        "-pp": _GPUS,
        "--data-parallel-size": _GPUS,
        "-dp": _GPUS,
        "--data-parallel-size-local": _GPUS,
        "-dpl": _GPUS,
        "--data-parallel-address": _AGENT,
        "-dpa": _AGENT,
        "--data-parallel-rpc-port": _AGENT,
        "-dpp": _AGENT,
        "--device": _GPUS,
        "--max-model-len": _CTX,
        "--max-num-seqs": _SLOTS,
        "--gpu-memory-utilization": _MEMORY,
        "--kv-cache-memory-bytes": _MEMORY,
        "--enable-expert-parallel": _EXPERTS,
        "-ep": _EXPERTS,
        "--quantization": _PRECISION,
        "-q": _PRECISION,
        "--dtype": _PRECISION,
        "--middleware": _CODE,
        "--tool-parser-plugin": _CODE,
        "--logits-processors": _CODE,
        "--enable-log-requests": _PROMPTS,
        "--enable-log-outputs": _PROMPTS,
        "--allowed-local-media-path": _READS,
        "--lora-modules": _READS,
    },
    "sglang": {
        "--model-path": _MODEL,
        "--model": _MODEL,
        "--served-model-name": _AGENT,
        "--tokenizer-path": "reads another repository or path",
        "--load-format": "changes how weights are loaded, some ways running code",
        "--admin-api-key": _KEY,
        "--tp-size": _GPUS,
        "--tensor-parallel-size": _GPUS,
        "--dp-size": _GPUS,
        "--data-parallel-size": _GPUS,
        "--pp-size": _GPUS,
        "--pipeline-parallel-size": _GPUS,
        "--base-gpu-id": _GPUS,
        "--gpu-id-step": _GPUS,
        "--device": _GPUS,
        "--nnodes": _AGENT,
        "--node-rank": _AGENT,
        "--dist-init-addr": _AGENT,
        "--context-length": _CTX,
        "--max-running-requests": _SLOTS,
        "--tp": _GPUS,
        "--mem-fraction-static": _MEMORY,
        "--ep-size": _EXPERTS,
        "--expert-parallel-size": _EXPERTS,
        "--quantization": _PRECISION,
        "--dtype": _PRECISION,
        "--file-storage-path": _WRITES,
        "--crash-dump-folder": _WRITES,
        "--log-requests": _PROMPTS,
        "--lora-paths": _READS,
        "--enable-custom-logit-processor": "lets API clients send code the engine runs",
    },
    "sim": {
        "--model": _AGENT,
        "--max-concurrency": _SLOTS,
        "--max-model-len": _CTX,
    },
}

# Whole families of flags, refused by the beginning of their name.
_FAMILIES: dict[str, tuple[tuple[str, str], ...]] = {
    "": (("--ssl-", _TLS),),
    # llama.cpp's presets that fetch a model from the internet:
    # --fim-qwen-7b-default, --gpt-oss-20b-default, --embd-gemma-default, ...
    "llama.cpp": (
        ("--fim-qwen-", _DOWNLOADS),
        ("--gpt-oss-", _DOWNLOADS),
        ("--vision-gemma-", _DOWNLOADS),
        ("--embd-gemma-", _DOWNLOADS),
    ),
}

# Flags whose value may name a file: refused when it looks like a path.
_PATH_VALUED: dict[str, frozenset[str]] = {
    "vllm": frozenset({"--chat-template"}),
    "sglang": frozenset({"--chat-template"}),
}

# Environment variables a profile may not set, and why.
_ENV_NEVER: dict[str, str] = {
    "CUDA_VISIBLE_DEVICES": _GPUS,
    "NVIDIA_VISIBLE_DEVICES": _GPUS,
    "CUDA_DEVICE_ORDER": _GPUS,
    "HIP_VISIBLE_DEVICES": _GPUS,
    "ROCR_VISIBLE_DEVICES": _GPUS,
    "GGML_VK_VISIBLE_DEVICES": _GPUS,
    "LLMGW_ENGINE_KEY": _KEY,
    "LLAMA_API_KEY": _KEY,
    "VLLM_API_KEY": _KEY,
    "HF_TOKEN": _KEY,
    "HUGGING_FACE_HUB_TOKEN": _KEY,
    "LD_PRELOAD": "loads other code into the engine",
    "LD_LIBRARY_PATH": "loads other code into the engine",
    "PYTHONPATH": "loads other code into the engine",
    "PYTHONSTARTUP": "loads other code into the engine",
    "PYTHONHOME": "loads other code into the engine",
}
# llama.cpp reads every flag from LLAMA_ARG_<NAME> too: a way around the flags.
_ENV_FAMILIES: tuple[tuple[str, str], ...] = (
    ("LLAMA_ARG_", "sets llama.cpp flags from the environment, around the flag check"),
)


class EngineArgsRefused(UsageError):
    """A profile's engine argument or variable that the agent will not pass on."""


@dataclass(frozen=True)
class Refusal:
    """One refused argument: as the operator gave it, what it was read as, and why."""

    given: str
    read_as: str
    why: str
    engine: str

    @property
    def message(self) -> str:
        shown = self.given
        if self.given != self.read_as:
            shown = f"{self.given} (read as {self.read_as})"
        return f"{shown} is refused for {self.engine}: it {self.why}"


def _normalise(name: str) -> str:
    """A long flag as vLLM and SGLang read it: underscores are dashes."""
    if name.startswith("--"):
        return "--" + name[2:].replace("_", "-")
    return name


def _refused_names(engine: str) -> dict[str, str]:
    return {**_COMMON, **_PER_ENGINE.get(engine, {})}


def refusal_for(engine: str, flag: str) -> Refusal | None:
    """Why ``flag`` (``--name`` or ``--name=value``) may not be given to ``engine``, or None."""
    name = flag.split("=", 1)[0]
    if not name.startswith("-") or name in ("-", "--") or _is_number(name):
        return None
    # Named without its value: the value of --api-key=... is a secret.
    given = _normalise(name)
    refused = _refused_names(engine)
    if given in refused:
        return Refusal(name, given, refused[given], engine)
    for prefix, why in (*_FAMILIES.get("", ()), *_FAMILIES.get(engine, ())):
        if given.startswith(prefix):
            return Refusal(name, given, why, engine)
    if engine not in ARGPARSE_ENGINES:
        return None
    # argparse: an exact flag wins, any other beginning stands for the flag
    # it begins. Two dashes need one letter after them, one dash one letter.
    long_form = given.startswith("--")
    if len(given) < (3 if long_form else 2):
        return None
    for never, why in sorted(refused.items()):
        if never.startswith("--") == long_form and never.startswith(given):
            return Refusal(name, never, why, engine)
    for prefix, why in _FAMILIES.get("", ()):
        if long_form and prefix.startswith(given):
            return Refusal(name, prefix + "*", why, engine)
    return None


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _looks_like_path(value: str) -> bool:
    if "{" in value:  # a Jinja template, given inline
        return False
    return "/" in value or "\\" in value or value.startswith((".", "~"))


def _path_valued_flag(engine: str, name: str) -> str:
    """The path-valued flag ``name`` stands for (itself or, for argparse, its beginning), or ""."""
    flags = _PATH_VALUED.get(engine, frozenset())
    if name in flags:
        return name
    if engine in ARGPARSE_ENGINES and name.startswith("--") and len(name) >= 3:
        return next((f for f in sorted(flags) if f.startswith(name)), "")
    return ""


def find_refusals(engine: str, args: Sequence[str]) -> list[Refusal]:
    """Every refused argument in ``args``, in order."""
    found: list[Refusal] = []
    for i, arg in enumerate(args):
        refusal = refusal_for(engine, arg)
        if refusal is not None:
            found.append(refusal)
            continue
        given, eq, value = arg.partition("=")
        name = _normalise(given)
        flag = _path_valued_flag(engine, name)
        if flag:
            if not eq:
                value = args[i + 1] if i + 1 < len(args) else ""
            if _looks_like_path(value):
                why = "names a file here; give the template inline"
                found.append(Refusal(given, flag, why, engine))
    return found


def check_args(engine: str, args: Sequence[str]) -> None:
    """Raise EngineArgsRefused naming every refused argument, or return."""
    found = find_refusals(engine, args)
    if found:
        raise EngineArgsRefused(
            "; ".join(r.message for r in found),
            hint="remove it from the profile's args; the agent sets what it needs itself",
        )


def find_env_refusals(engine: str, env: Mapping[str, str] | Iterable[str]) -> list[Refusal]:
    """Every refused variable name in a profile's ``env``, in order."""
    found = []
    for name in env:
        why = _ENV_NEVER.get(name.upper())
        if why is None:
            why = next((w for p, w in _ENV_FAMILIES if name.upper().startswith(p)), None)
        if why is not None:
            found.append(Refusal(name, name, why, engine))
    return found


def check_env(engine: str, env: Mapping[str, str]) -> None:
    """Raise EngineArgsRefused naming every refused variable, or return."""
    found = find_env_refusals(engine, env)
    if found:
        raise EngineArgsRefused(
            "; ".join(r.message for r in found),
            hint="remove it from the profile's env; the agent sets what it needs itself",
        )
