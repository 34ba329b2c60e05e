"""``python -m sglang.launch_server``: SGLang 0.5's flags, the stand-in's answers.

The flags are SGLang's own names (python/sglang/srt/server_args.py of the
0.5 line): every one the agent sets and the common tuning ones. Anything
else is refused as its argparse refuses it, with exit code 2.
"""

from __future__ import annotations

import sys

from fake_engine_core import cli
from fake_engine_core.server import Settings, serve

import sglang

VALUE_FLAGS = (
    "--model-path",
    "--tokenizer-path",
    "--tokenizer-mode",
    "--load-format",
    "--dtype",
    "--kv-cache-dtype",
    "--quantization",
    "--context-length",
    "--device",
    "--served-model-name",
    "--chat-template",
    "--revision",
    "--download-dir",
    "--host",
    "--port",
    "--api-key",
    "--admin-api-key",
    "--mem-fraction-static",
    "--max-running-requests",
    "--max-total-tokens",
    "--chunked-prefill-size",
    "--max-prefill-tokens",
    "--schedule-policy",
    "--schedule-conservativeness",
    "--tp-size",
    "--pp-size",
    "--dp-size",
    "--ep-size",
    "--stream-interval",
    "--random-seed",
    "--log-level",
    "--log-requests-level",
    "--attention-backend",
    "--sampling-backend",
    "--grammar-backend",
    "--reasoning-parser",
    "--tool-call-parser",
    "--cuda-graph-max-bs",
    "--base-gpu-id",
    "--gpu-id-step",
    "--nnodes",
    "--node-rank",
    "--dist-init-addr",
    "--file-storage-path",
    "--crash-dump-folder",
    "--lora-paths",
    "--watchdog-timeout",
    "--moe-a2a-backend",
    "--speculative-algorithm",
)
BOOL_FLAGS = (
    "--trust-remote-code",
    "--skip-tokenizer-init",
    "--enable-metrics",
    "--log-requests",
    "--disable-radix-cache",
    "--disable-cuda-graph",
    "--enable-torch-compile",
    "--enable-dp-attention",
    "--skip-server-warmup",
    "--enable-custom-logit-processor",
    "--show-time-cost",
    "--enable-mixed-chunk",
)
ALIASES = {
    "--tp-size": ("--tensor-parallel-size", "--tp"),
    "--pp-size": ("--pipeline-parallel-size",),
    "--dp-size": ("--data-parallel-size",),
    "--ep-size": ("--expert-parallel-size", "--ep"),
    "--model-path": ("--model",),
}


def main(argv: list[str] | None = None) -> None:
    p = cli.parser("sglang.launch_server", VALUE_FLAGS, BOOL_FLAGS, (), ALIASES)
    args = p.parse_args(cli.normalize(sys.argv[1:] if argv is None else argv))
    if not args.model_path:
        p.error("the following arguments are required: --model-path")
    served = args.served_model_name or args.model_path
    serve(
        Settings(
            engine="sglang",
            model_path=args.model_path,
            served_name=served,
            host=args.host or "127.0.0.1",
            port=int(args.port or 30000),
            api_key=args.api_key or "",
            max_model_len=int(args.context_length or 4096),
            max_running=int(args.max_running_requests or 256),
            gpu_fraction=float(args.mem_fraction_static or 0.88),
            version=sglang.__version__,
        )
    )


if __name__ == "__main__":
    main()
