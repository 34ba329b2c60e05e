"""``python -m sglang.launch_server``: SGLang 0.5's flags, the stand-in's answers.

The flags are SGLang's own names (python/sglang/srt/server_args.py of the
0.5 line): every one the agent sets and the common tuning ones. Anything
else is refused as its argparse refuses it, with exit code 2.

At launch it logs its ServerArgs as SGLang does (``logger.info(f"{server_args=}")``
in its engine's launch), the key among them (sgl-project/sglang#37457).
``LLMGW_FAKE_ENGINE_LOAD_ERROR=WORDS`` makes it fail right after, as an
SGLang whose scheduler cannot load the model does.
"""

from __future__ import annotations

import os
import sys
import time

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


LOAD_ERROR_ENV = "LLMGW_FAKE_ENGINE_LOAD_ERROR"


def log(message: str) -> None:
    """A line as SGLang's logger writes it: ``[2025-10-05 09:30:00] message``."""
    print(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {message}", flush=True)


def server_args(args, served: str) -> str:
    """The ServerArgs dataclass's repr, as SGLang logs it (some of its fields, in its order)."""
    fields = {
        "model_path": args.model_path,
        "tokenizer_path": args.tokenizer_path or args.model_path,
        "tokenizer_mode": args.tokenizer_mode or "auto",
        "load_format": args.load_format or "auto",
        "trust_remote_code": args.trust_remote_code,
        "context_length": int(args.context_length) if args.context_length else None,
        "dtype": args.dtype or "auto",
        "quantization": args.quantization,
        "served_model_name": served,
        "host": args.host or "127.0.0.1",
        "port": int(args.port or 30000),
        "mem_fraction_static": float(args.mem_fraction_static or 0.88),
        "max_running_requests": int(args.max_running_requests or 0) or None,
        "tp_size": int(args.tp_size or 1),
        "pp_size": int(args.pp_size or 1),
        "download_dir": args.download_dir,
        "api_key": args.api_key,
        "admin_api_key": args.admin_api_key,
        "enable_metrics": args.enable_metrics,
    }
    return "ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in fields.items()) + ")"


def main(argv: list[str] | None = None) -> None:
    p = cli.parser("sglang.launch_server", VALUE_FLAGS, BOOL_FLAGS, (), ALIASES)
    args = p.parse_args(cli.normalize(sys.argv[1:] if argv is None else argv))
    if not args.model_path:
        p.error("the following arguments are required: --model-path")
    served = args.served_model_name or args.model_path
    log(f"server_args={server_args(args, served)}")
    if words := os.environ.get(LOAD_ERROR_ENV):
        log(f"Scheduler hit an exception: {words}")
        log("Received sigquit from a child process. It usually means the child failed.")
        sys.exit(1)
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
