"""``python -m vllm.entrypoints.openai.api_server``: vLLM 0.11's flags, the stand-in's answers.

The flags are vLLM's own names (vllm/engine/arg_utils.py and
vllm/entrypoints/openai/cli_args.py of the 0.11 line): every one the agent
sets and the common tuning ones. Anything else is refused as vLLM's
argparse refuses it, with exit code 2, so a flag the agent got wrong fails
here as it would on a GPU node.
"""

from __future__ import annotations

import os
import sys

from fake_engine_core import cli
from fake_engine_core.server import Settings, serve

import vllm

VALUE_FLAGS = (
    # the server
    "--host",
    "--port",
    "--uds",
    "--api-key",
    "--served-model-name",
    "--root-path",
    "--uvicorn-log-level",
    "--allowed-origins",
    "--allowed-methods",
    "--allowed-headers",
    "--chat-template",
    "--chat-template-content-format",
    "--response-role",
    "--tool-call-parser",
    "--tool-parser-plugin",
    "--ssl-keyfile",
    "--ssl-certfile",
    "--ssl-ca-certs",
    "--middleware",
    "--lora-modules",
    "--max-log-len",
    # the model
    "--model",
    "--tokenizer",
    "--tokenizer-mode",
    "--revision",
    "--code-revision",
    "--tokenizer-revision",
    "--dtype",
    "--seed",
    "--max-model-len",
    "--quantization",
    "--hf-overrides",
    "--generation-config",
    "--override-generation-config",
    "--config-format",
    "--model-impl",
    "--logits-processors",
    "--max-logprobs",
    "--allowed-local-media-path",
    "--hf-token",
    # loading
    "--load-format",
    "--download-dir",
    "--ignore-patterns",
    "--model-loader-extra-config",
    # parallelism
    "--distributed-executor-backend",
    "--pipeline-parallel-size",
    "--tensor-parallel-size",
    "--data-parallel-size",
    "--data-parallel-size-local",
    "--data-parallel-address",
    "--data-parallel-rpc-port",
    "--data-parallel-backend",
    "--max-parallel-loading-workers",
    "--all2all-backend",
    # cache and memory
    "--block-size",
    "--gpu-memory-utilization",
    "--kv-cache-memory-bytes",
    "--swap-space",
    "--kv-cache-dtype",
    "--num-gpu-blocks-override",
    "--cpu-offload-gb",
    # scheduling
    "--max-num-batched-tokens",
    "--max-num-seqs",
    "--max-num-partial-prefills",
    "--scheduling-policy",
    "--long-prefill-token-threshold",
    # the rest
    "--reasoning-parser",
    "--speculative-config",
    "--compilation-config",
    "-O",
    "--limit-mm-per-prompt",
    "--mm-processor-kwargs",
    "--max-loras",
    "--max-lora-rank",
    "--otlp-traces-endpoint",
    "--device",
)
BOOL_FLAGS = (
    "--trust-remote-code",
    "--skip-tokenizer-init",
    "--disable-log-stats",
    "--disable-log-requests",
    "--disable-frontend-multiprocessing",
    "--enable-auto-tool-choice",
    "--enable-request-id-headers",
    "--return-tokens-as-token-ids",
    "--enable-prompt-tokens-details",
    "--disable-fastapi-docs",
    "--enable-server-load-tracking",
    "--enable-log-outputs",
    "--enable-log-requests",
)
# Booleans vLLM writes from its config dataclasses: --x and --no-x.
OPTIONAL_BOOLS = (
    "--enable-expert-parallel",
    "--enforce-eager",
    "--enable-prefix-caching",
    "--enable-chunked-prefill",
    "--disable-custom-all-reduce",
    "--enable-lora",
    "--async-scheduling",
    "--enable-sleep-mode",
    "--enable-eplb",
)
ALIASES = {
    "--tensor-parallel-size": ("-tp",),
    "--pipeline-parallel-size": ("-pp",),
    "--data-parallel-size": ("-dp",),
    "--enable-expert-parallel": ("-ep",),
    "--quantization": ("-q",),
}


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(
        "vllm.entrypoints.openai.api_server", VALUE_FLAGS, BOOL_FLAGS, OPTIONAL_BOOLS, ALIASES
    )
    args = p.parse_args(cli.normalize(sys.argv[1:] if argv is None else argv))
    model = args.model or "facebook/opt-125m"
    served = (args.served_model_name or model).split()[0]
    serve(
        Settings(
            engine="vllm",
            model_path=model,
            served_name=served,
            host=args.host or "0.0.0.0",
            port=int(args.port or 8000),
            # vLLM takes --api-key, else VLLM_API_KEY.
            api_key=args.api_key or os.environ.get("VLLM_API_KEY", ""),
            max_model_len=int(args.max_model_len or 4096),
            max_running=int(args.max_num_seqs or 256),
            gpu_fraction=float(args.gpu_memory_utilization or 0.9),
            version=vllm.__version__,
        )
    )


if __name__ == "__main__":
    main()
